"""Frozen per-call specifications and the one shape function behind them.

The op layer turns user arguments into one of these specs; backends and the
float64 oracle receive the same spec, so output shapes and window rules
cannot drift apart between them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache, wraps
from typing import Any, Literal, TypeGuard, TypeVar, Union

import numpy as np

from hal.errors import HalValueError, bad_arg

Layout = Literal["NCHW", "NHWC"]
LAYOUTS: tuple[str, ...] = ("NCHW", "NHWC")

#: what users may pass as ``padding``.
PaddingArg = Union[int, tuple[int, ...], list[int], str]  # noqa: UP007 (runtime alias on 3.10)

Pads = tuple[int, int, int, int]  # (top, bottom, left, right)


# ----------------------------------------------------------------------------
# argument normalisation
# ----------------------------------------------------------------------------


def _is_int(value: object) -> TypeGuard[int | np.integer]:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


#: the largest window size, stride, dilation or padding: every backend's kernels take them as 32-bit ints
MAX_WINDOW_ARG = 2**31 - 1


def pair(value: object, name: str, minimum: int = 1) -> tuple[int, int]:
    """``int`` or 1-/2-sequence of ints in [``minimum``, 2**31 - 1] -> ``(h, w)``."""
    if _is_int(value):
        items = (int(value), int(value))
    elif isinstance(value, (tuple, list)) and len(value) in (1, 2) and all(_is_int(v) for v in value):
        items = (int(value[0]), int(value[-1]))
    else:
        raise bad_arg(name, "an int or a pair of ints", value)
    if min(items) < minimum:
        raise bad_arg(name, f"values >= {minimum}", value)
    if max(items) > MAX_WINDOW_ARG:
        raise bad_arg(name, f"values <= 2**31 - 1 ({MAX_WINDOW_ARG})", value)
    return items


def layout_arg(layout: object, name: str = "layout") -> Layout:
    """Validate a layout name."""
    if layout not in LAYOUTS:
        raise bad_arg(name, "'NCHW' or 'NHWC'", layout)
    return layout  # type: ignore[return-value]


def same_pads(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """ONNX SAME_UPPER: output ceil(size / stride), the odd pixel padded at the end."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def resolve_padding(
    padding: PaddingArg,
    in_hw: tuple[int, int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    dilation: tuple[int, int],
) -> Pads:
    """Turn any accepted ``padding`` form into explicit (top, bottom, left, right)."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0, 0, 0)
        if padding == "same":
            top, bottom = same_pads(in_hw[0], kernel[0], stride[0], dilation[0])
            left, right = same_pads(in_hw[1], kernel[1], stride[1], dilation[1])
            return (top, bottom, left, right)
        raise bad_arg("padding", "an int, (ph, pw), (top, bottom, left, right), 'valid' or 'same'", padding)
    if _is_int(padding):
        p = int(padding)
        pads: tuple[int, ...] = (p, p, p, p)
    elif isinstance(padding, (tuple, list)) and all(_is_int(v) for v in padding):
        values = [int(v) for v in padding]
        if len(values) == 1:
            pads = (values[0],) * 4
        elif len(values) == 2:
            pads = (values[0], values[0], values[1], values[1])
        elif len(values) == 4:
            pads = tuple(values)
        else:
            raise bad_arg("padding", "1, 2 or 4 ints", padding)
    else:
        raise bad_arg("padding", "an int, (ph, pw), (top, bottom, left, right), 'valid' or 'same'", padding)
    if min(pads) < 0:
        raise bad_arg("padding", "non-negative values", padding)
    if max(pads) > MAX_WINDOW_ARG:
        raise bad_arg("padding", f"values <= 2**31 - 1 ({MAX_WINDOW_ARG})", padding)
    return pads  # type: ignore[return-value]


def window_output_size(
    size: int, kernel: int, stride: int, pad_begin: int, pad_end: int, dilation: int, ceil_mode: bool
) -> int:
    """Number of sliding windows along one axis (PyTorch's rule, asymmetric pads).

    Floor division rounds toward -inf, as PyTorch's ``div_rtn``. With ``ceil_mode``
    a last window may run past the padded input, but one that would start in the
    end padding is dropped. Returns a value < 1 when no window fits.
    """
    span = size + pad_begin + pad_end - dilation * (kernel - 1) - 1
    if ceil_mode:
        out = (span + stride - 1) // stride + 1
        if out >= 1 and (out - 1) * stride >= size + pad_begin:
            out -= 1
        return out
    return span // stride + 1


@lru_cache(maxsize=4096)
def _first_empty_window(
    size: int, kernel: int, stride: int, pad_begin: int, dilation: int, out: int
) -> int:
    """Index of the first window with no tap inside the input, or -1. A window starting at s0 has a tap inside
    when its first tap at or past 0 (k0 = ceil(-s0 / dilation), at least 0) exists and lies before `size`;
    the windows are checked in chunks, so that a huge padding costs time, not memory."""
    chunk = 2**22
    for first in range(0, out, chunk):
        starts = np.arange(first, min(out, first + chunk), dtype=np.int64) * stride - pad_begin
        k0 = np.maximum(0, -(starts // dilation))
        inside = (k0 < kernel) & (starts + k0 * dilation < size)
        empty = np.flatnonzero(~inside)
        if empty.size:
            return first + int(empty[0])
    return -1


# ----------------------------------------------------------------------------
# specs
# ----------------------------------------------------------------------------


_F = TypeVar("_F", bound=Callable[..., object])
_T = TypeVar("_T")
_MEMO_LIMIT = 4096


def _hash_once(cls: type[_T]) -> type[_T]:
    """Keep a frozen dataclass's generated hash in the instance after its first use.

    Specs key the per-call lookups (the tuner's spec cache, the backends' plan caches);
    hashing 19 fields each time cost about 0.3 µs per lookup. The cached value never
    travels with a pickle: str hashes differ between processes.
    """
    generated = cls.__hash__

    def __hash__(self: Any) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = generated(self)
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self: Any) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_hash", None)
        return state

    cls.__hash__ = __hash__  # type: ignore[assignment,method-assign]
    # typeshed's object has __getstate__ from Python 3.11 (method-assign), not before (attr-defined)
    cls.__getstate__ = __getstate__  # type: ignore[attr-defined,method-assign]
    return cls


def _arg_key(args: tuple[object, ...]) -> object:
    # the types are part of the key: 1 == 1.0 == True hash alike, but only some are valid
    # arguments; one level of tuples (padding, kernel sizes) keeps its element types too
    types: tuple[object, ...] = tuple(map(type, args))
    if tuple in types:
        types = tuple(
            tuple(map(type, a)) if t is tuple else t  # type: ignore[call-overload]
            for a, t in zip(args, types, strict=True)
        )
    return (args, types)


def _memoized(fn: _F) -> _F:
    """Cache a spec constructor on its (hashable) arguments: repeated calls skip validation.

    Specs are immutable and a function of their arguments alone; arguments that cannot be
    hashed (lists, arrays) are validated every time. Errors are never cached.
    """
    memo: dict[object, object] = {}

    @wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> object:
        if kwargs:
            return fn(*args, **kwargs)
        try:
            key = _arg_key(args)
            hit = memo.get(key)
        except TypeError:
            return fn(*args)
        if hit is None:
            hit = fn(*args)
            if len(memo) < _MEMO_LIMIT:
                memo[key] = hit
        return hit

    return wrapper  # type: ignore[return-value]


@dataclass(frozen=True)
class TensorGeometry:
    """Logical NCHW shape, physical layout and dtype of a 4-D activation tensor."""

    n: int
    c: int
    h: int
    w: int
    layout: Layout
    dtype: np.dtype

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """Logical (N, C, H, W)."""
        return (self.n, self.c, self.h, self.w)

    @property
    def dtype_name(self) -> str:
        """Name used for kernel macros and tuning keys ('float32', 'float16')."""
        return self.dtype.name


class _PoolShapes:
    """Shape properties shared by the pooling specs (fields n, c, in_h, in_w, out_h, out_w)."""

    n: int
    c: int
    in_h: int
    in_w: int
    out_h: int
    out_w: int

    @property
    def in_shape(self) -> tuple[int, int, int, int]:
        """Logical input shape (N, C, H, W)."""
        return (self.n, self.c, self.in_h, self.in_w)

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        """Logical output shape (N, C, OH, OW)."""
        return (self.n, self.c, self.out_h, self.out_w)


@_hash_once
@dataclass(frozen=True)
class Pool2dSpec(_PoolShapes):
    """One sliding-window pooling call (max or average)."""

    kind: Literal["max", "avg"]
    n: int
    c: int
    in_h: int
    in_w: int
    out_h: int
    out_w: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: Pads
    dilation: tuple[int, int]
    ceil_mode: bool
    count_include_pad: bool
    divisor: int | None
    return_indices: bool
    layout: Layout
    dtype: np.dtype
    #: quantized int8/uint8 average pooling: the input's (and output's) zero point
    zero_point: int = 0
    #: apply ReLU to each output before it is stored (NaN stays NaN, as torch.relu)
    relu: bool = False



def plane_geometry(geom: TensorGeometry) -> TensorGeometry:
    """The geometry ops that keep the channel count (pools, BatchNorm) run with.

    With one channel, NHWC and NCHW are the same bytes: the spec then says NCHW, so the
    backend runs its plane-vectorised kernels instead of vectorising along C = 1 (the
    output, in the input's layout, is still correct NHWC).
    """
    if geom.layout == "NHWC" and geom.c == 1:
        return replace(geom, layout="NCHW")
    return geom

@_memoized
def pool2d_spec(
    kind: Literal["max", "avg"],
    x: TensorGeometry,
    kernel_size: object,
    stride: object,
    padding: PaddingArg,
    dilation: object,
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
    return_indices: bool,
) -> Pool2dSpec:
    """Validate pooling arguments and compute the output shape."""
    kernel = pair(kernel_size, "kernel_size")
    no_stride = stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0)
    strides = kernel if no_stride else pair(stride, "stride")
    dil = pair(dilation, "dilation")
    pads = resolve_padding(padding, (x.h, x.w), kernel, strides, dil)
    # the GPU kernels take the divisor as a 32-bit int; torch's int64 range adds nothing real
    if divisor_override is not None and (not _is_int(divisor_override) or not 0 < int(divisor_override) < 2**31):
        raise bad_arg("divisor_override", "a positive int below 2**31 or None", divisor_override)
    out_hw = []
    for axis, size, k, s, pb, pe, d in (
        ("height", x.h, kernel[0], strides[0], pads[0], pads[1], dil[0]),
        ("width", x.w, kernel[1], strides[1], pads[2], pads[3], dil[1]),
    ):
        out = window_output_size(size, k, s, pb, pe, d, ceil_mode)
        if out < 1:
            raise HalValueError(
                f"kernel_size: the dilated kernel ({d * (k - 1) + 1} along {axis}) is larger than the padded "
                f"input ({size} + padding {pb}+{pe} = {size + pb + pe})"
            )
        empty = _first_empty_window(size, k, s, pb, d, out)
        if empty >= 0:
            raise HalValueError(
                f"padding: window {empty} along {axis} lies entirely in the padding "
                f"(input {size}, kernel {k}, stride {s}, padding {pb}+{pe}, dilation {d}); "
                "every pooling window must overlap the input"
            )
        out_hw.append(out)
    return Pool2dSpec(
        kind=kind,
        n=x.n,
        c=x.c,
        in_h=x.h,
        in_w=x.w,
        out_h=out_hw[0],
        out_w=out_hw[1],
        kernel=kernel,
        stride=strides,
        pads=pads,
        dilation=dil,
        ceil_mode=bool(ceil_mode),
        count_include_pad=bool(count_include_pad),
        divisor=None if divisor_override is None else int(divisor_override),
        return_indices=bool(return_indices),
        layout=x.layout,
        dtype=x.dtype,
    )


@_hash_once
@dataclass(frozen=True)
class AdaptivePool2dSpec(_PoolShapes):
    """One adaptive pooling call: bins start=floor(i*In/Out), end=ceil((i+1)*In/Out)."""

    kind: Literal["max", "avg"]
    n: int
    c: int
    in_h: int
    in_w: int
    out_h: int
    out_w: int
    return_indices: bool
    layout: Layout
    dtype: np.dtype
    #: apply ReLU to each output before it is stored
    relu: bool = False


def adaptive_bins(size: int, out: int) -> list[tuple[int, int]]:
    """Start (inclusive) and end (exclusive) of each adaptive bin, in integer math."""
    return [((i * size) // out, -(-((i + 1) * size) // out)) for i in range(out)]


@_memoized
def adaptive_pool2d_spec(
    kind: Literal["max", "avg"], x: TensorGeometry, output_size: object, return_indices: bool
) -> AdaptivePool2dSpec:
    """Validate ``output_size`` (int, pair; None keeps the input size) and build the spec."""
    if _is_int(output_size) or output_size is None:
        sizes: list[object] = [output_size, output_size]
    elif isinstance(output_size, (tuple, list)) and len(output_size) == 2:
        sizes = list(output_size)
    else:
        raise bad_arg("output_size", "an int, a pair of ints or None entries", output_size)
    resolved = []
    for value, size in zip(sizes, (x.h, x.w), strict=True):
        if value is None:
            resolved.append(size)
        elif _is_int(value) and int(value) >= 1:
            resolved.append(int(value))
        else:
            raise bad_arg("output_size", "positive ints (or None to keep the input size)", output_size)
    return AdaptivePool2dSpec(
        kind=kind,
        n=x.n,
        c=x.c,
        in_h=x.h,
        in_w=x.w,
        out_h=resolved[0],
        out_w=resolved[1],
        return_indices=bool(return_indices),
        layout=x.layout,
        dtype=x.dtype,
    )


@_hash_once
@dataclass(frozen=True)
class Conv2dSpec:
    """One 2-D convolution (cross-correlation, as torch.nn.functional.conv2d)."""

    n: int
    c_in: int
    in_h: int
    in_w: int
    c_out: int
    out_h: int
    out_w: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: Pads
    dilation: tuple[int, int]
    groups: int
    has_bias: bool
    layout: Layout
    dtype: np.dtype
    #: apply ReLU to each output (after the bias) before it is stored
    relu: bool = False

    @property
    def in_shape(self) -> tuple[int, int, int, int]:
        """Logical input shape (N, C_in, H, W)."""
        return (self.n, self.c_in, self.in_h, self.in_w)

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        """Logical output shape (N, C_out, OH, OW)."""
        return (self.n, self.c_out, self.out_h, self.out_w)

    @property
    def weight_shape(self) -> tuple[int, int, int, int]:
        """(C_out, C_in / groups, KH, KW)."""
        return (self.c_out, self.c_in // self.groups, self.kernel[0], self.kernel[1])

    @property
    def depthwise(self) -> bool:
        """One input channel per group (a depthwise convolution)."""
        return self.groups == self.c_in and self.groups > 1

    @property
    def flops(self) -> int:
        """2 * multiply-adds."""
        macs_per_output = (self.c_in // self.groups) * self.kernel[0] * self.kernel[1]
        return 2 * self.n * self.c_out * self.out_h * self.out_w * macs_per_output


@_memoized
def conv2d_spec(
    x: TensorGeometry,
    weight_shape: tuple[int, ...],
    has_bias: bool,
    bias_shape: tuple[int, ...] | None,
    stride: object,
    padding: PaddingArg,
    dilation: object,
    groups: object,
) -> Conv2dSpec:
    """Validate conv2d arguments and compute the output shape."""
    if len(weight_shape) != 4:
        raise bad_arg("weight", "a 4-D tensor (C_out, C_in/groups, KH, KW)", tuple(weight_shape))
    if not _is_int(groups) or int(groups) < 1:
        raise bad_arg("groups", "a positive int", groups)
    g = int(groups)
    c_out, c_per_group, kh, kw = (int(v) for v in weight_shape)
    if min(c_out, c_per_group, kh, kw) < 1:
        raise bad_arg("weight", "a non-empty 4-D shape", tuple(weight_shape))
    if x.c % g:
        raise HalValueError(f"groups: {g} does not divide the input channels ({x.c})")
    if c_out % g:
        raise HalValueError(f"groups: {g} does not divide the output channels (weight.shape[0] = {c_out})")
    if c_per_group * g != x.c:
        raise HalValueError(
            f"weight: expected weight.shape[1] * groups == input channels, got {c_per_group} * {g} != {x.c}"
        )
    if has_bias and (bias_shape is None or tuple(bias_shape) != (c_out,)):
        raise bad_arg("bias", f"shape ({c_out},)", None if bias_shape is None else tuple(bias_shape))
    kernel = (kh, kw)
    strides = pair(stride, "stride")
    dil = pair(dilation, "dilation")
    pads = resolve_padding(padding, (x.h, x.w), kernel, strides, dil)
    out_hw = []
    for axis, size, k, s, pb, pe, d in (
        ("height", x.h, kh, strides[0], pads[0], pads[1], dil[0]),
        ("width", x.w, kw, strides[1], pads[2], pads[3], dil[1]),
    ):
        eff = d * (k - 1) + 1
        if size + pb + pe < eff:
            raise HalValueError(
                f"weight: the dilated kernel ({eff} along {axis}) is larger than the padded "
                f"input ({size} + padding {pb}+{pe} = {size + pb + pe})"
            )
        out_hw.append(window_output_size(size, k, s, pb, pe, d, False))
    return Conv2dSpec(
        n=x.n,
        c_in=x.c,
        in_h=x.h,
        in_w=x.w,
        c_out=c_out,
        out_h=out_hw[0],
        out_w=out_hw[1],
        kernel=kernel,
        stride=strides,
        pads=pads,
        dilation=dil,
        groups=g,
        has_bias=has_bias,
        layout=x.layout,
        dtype=x.dtype,
    )


@_hash_once
@dataclass(frozen=True)
class QConv2dSpec:
    """A quantized convolution: ONNX QLinearConv (int8/uint8 out) or ConvInteger (int32 out).

    ``acc = sum((x - x_zero_point) * (w - w_zero_point[co])) + bias[co]`` in int32; QLinearConv
    then stores ``saturate(round_half_even(acc * multiplier[co]) + y_zero_point)`` with
    ``multiplier = x_scale * w_scale[co] / y_scale``.
    """

    conv: Conv2dSpec
    w_dtype: np.dtype
    out_dtype: np.dtype
    x_zero_point: int
    y_zero_point: int
    per_channel: bool

    @property
    def layout(self) -> Layout:
        """Activation layout."""
        return self.conv.layout

    @property
    def dtype(self) -> np.dtype:
        """Input dtype (int8 or uint8)."""
        return self.conv.dtype

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        """Logical output shape."""
        return self.conv.out_shape


@_hash_once
@dataclass(frozen=True)
class BatchNormSpec:
    """One BatchNorm2d forward call.

    In training the batch statistics are used (biased variance) and, when
    ``has_running``, the running statistics are updated in place with
    ``running = (1 - momentum) * running + momentum * batch`` using the unbiased
    batch variance. In inference the running statistics normalize.
    """

    n: int
    c: int
    h: int
    w: int
    training: bool
    momentum: float
    eps: float
    has_running: bool
    layout: Layout
    dtype: np.dtype
    #: apply ReLU to each output before it is stored
    relu: bool = False

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """Logical (N, C, H, W), same for input and output."""
        return (self.n, self.c, self.h, self.w)

    @property
    def count(self) -> int:
        """Values per channel (N * H * W)."""
        return self.n * self.h * self.w


@_memoized
def batch_norm_spec(
    x: TensorGeometry, training: bool, momentum: object, eps: object, has_running: bool
) -> BatchNormSpec:
    """Validate BatchNorm scalars and build the spec."""
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float, np.floating, np.integer)):
        raise bad_arg("momentum", "a float in [0, 1]", momentum)
    if not 0.0 <= float(momentum) <= 1.0:
        raise bad_arg("momentum", "a float in [0, 1]", momentum)
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating, np.integer)) or not (
        math.isfinite(float(eps)) and float(eps) > 0
    ):
        raise bad_arg("eps", "a positive finite float", eps)
    if training and x.n * x.h * x.w <= 1:
        raise HalValueError(
            f"input: expected more than 1 value per channel when training, got input of shape {x.shape}"
        )
    return BatchNormSpec(
        n=x.n,
        c=x.c,
        h=x.h,
        w=x.w,
        training=bool(training),
        momentum=float(momentum),
        eps=float(eps),
        has_running=bool(has_running),
        layout=x.layout,
        dtype=x.dtype,
    )


@_hash_once
@dataclass(frozen=True)
class EltwiseSpec:
    """An elementwise op over ``count`` contiguous elements (layout does not matter)."""

    op: Literal["relu"]
    count: int
    dtype: np.dtype


Spec = Union[EltwiseSpec, Pool2dSpec, AdaptivePool2dSpec, Conv2dSpec, QConv2dSpec, BatchNormSpec]  # noqa: UP007
