"""The ops: names, argument order and defaults of ``torch.nn.functional``.

Each op validates its arguments, builds one frozen spec (``hal.spec``), allocates
the outputs, resolves the kernel parameters through the device's tuner and calls
the backend's launcher. Inputs may be ``hal.Tensor`` or anything numpy accepts;
host arrays are uploaded to the device of the first Tensor argument, or to the
selected device (``hal.use_device``, ``HAL_DEVICE``, automatic).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from typing import Any

import numpy as np

from hal.device import Device
from hal.device import device as resolve_device
from hal.dtypes import FLOAT_DTYPE_SET, FLOAT_NAMES, is_bfloat16, is_float, is_float_data, require_float
from hal.errors import HalError, HalTypeError, HalValueError, UnsupportedOperation, bad_arg
from hal.quant import QUANT_DTYPES, qparams
from hal.spec import (
    EltwiseSpec,
    PaddingArg,
    QConv2dSpec,
    _arg_key,
    adaptive_pool2d_spec,
    batch_norm_spec,
    conv2d_spec,
    plane_geometry,
    pool2d_spec,
)
from hal.tensor import Tensor, _output, _poison, asarray, empty

F32 = np.dtype(np.float32)
I64 = np.dtype(np.int64)


def _pick_device(args: Sequence[Any]) -> Device:
    """The device of the Tensor arguments (all must agree), else the selected device."""
    found: Device | None = None
    for name, value in args:
        if isinstance(value, Tensor):
            dev = value.device
            if found is None:
                found = dev
            elif dev is not found and dev != found:  # identity first: Device.__eq__ compares ids
                raise HalValueError(
                    f"{name}: expected a tensor on {found.id} like the other arguments, got one on {dev.id}"
                )
    return found if found is not None else resolve_device(None)


def _require_backend_dtype(dev: Device, dtype: np.dtype) -> None:
    """bfloat16 only where the backend has kernels for it (else they would read its words as float)."""
    if is_bfloat16(dtype) and not type(dev.backend).bfloat16:
        raise UnsupportedOperation(f"{dev.id}: bfloat16 is not implemented on the {dev.kind} backend")


def _activation(x: Any, dev: Device, name: str = "input", allow_int: bool = False) -> Tensor:
    """``x`` as a 4-D float (or, with ``allow_int``, int8/uint8) Tensor on ``dev``."""
    if not isinstance(x, Tensor):
        array = np.asarray(x)
        if array.ndim != 4:
            raise bad_arg(name, "a 4-D (N, C, H, W) array", array.shape)
        if not (is_float(array.dtype) or array.dtype == np.float64) and not (allow_int and array.dtype in QUANT_DTYPES):
            raise HalTypeError(f"{name}: expected dtype {FLOAT_NAMES}, got {array.dtype.name}")
        x = asarray(array, device=dev)
    if x.ndim != 4:
        raise bad_arg(name, "a 4-D (N, C, H, W) tensor", x.shape)
    if not (allow_int and x.dtype in QUANT_DTYPES):
        require_float(x.dtype, name)
        _require_backend_dtype(dev, x.dtype)
    if x.size == 0:
        raise bad_arg(name, "a non-empty tensor", x.shape)
    return x


def _plane_geometry(x: Tensor) -> Any:
    """Geometry for ops that keep the channel count (pools, BatchNorm): ``hal.spec.plane_geometry``."""
    return plane_geometry(x.geometry())


def _require_quantized_pooling(dev: Device, x: Tensor) -> None:
    if x.dtype in QUANT_DTYPES and not type(dev.backend).quantized_pooling:
        raise UnsupportedOperation(f"{dev.id}: int8/uint8 pooling is not implemented on the {dev.kind} backend")


def _vector(value: Any, dev: Device, length: int, name: str) -> Tensor:
    """A float32 vector of ``length`` on ``dev`` (BatchNorm parameters, conv bias)."""
    if isinstance(value, Tensor):
        if value.shape != (length,):
            raise bad_arg(name, f"shape ({length},)", value.shape)
        if value.dtype == F32:
            return value
        require_float(value.dtype, name)
        return asarray(value.numpy().astype(F32), device=dev)
    array = np.asarray(value)
    if array.shape != (length,):
        raise bad_arg(name, f"shape ({length},)", array.shape)
    if not is_float_data(array.dtype):
        raise HalTypeError(f"{name}: expected a float array, got dtype {array.dtype.name}")
    return asarray(array.astype(F32), device=dev)


#: set by ``record_launches``: every backend launch is appended (kernel, spec, buffers, params) to each open
#: recording, innermost last (a capture nested in another records into both)
_recorded: ContextVar[tuple[list[tuple[Device, str, Any, tuple[Any, ...], Any]], ...]] = ContextVar(
    "hal_recorded_launches", default=()
)


@contextmanager
def record_launches() -> Iterator[list[tuple[Device, str, Any, tuple[Any, ...], Any]]]:
    """Record the backend launches of the ops called inside (for benchmarks).

    Each entry is (device, launcher name, spec, buffers, parameters); replaying them
    (``getattr(device.backend, name)(spec, *buffers, params)``) runs the same kernels on
    the same buffers without the op layer's validation, lookup and allocation.
    """
    launches: list[tuple[Device, str, Any, tuple[Any, ...], Any]] = []
    token = _recorded.set((*_recorded.get(), launches))
    try:
        yield launches
    finally:
        _recorded.reset(token)


def replay_launches(launches: Sequence[tuple[Device, str, Any, tuple[Any, ...], Any]]) -> None:
    """Run recorded launches again, in order, on the same buffers (no validation, lookup or allocation)."""
    for dev, kernel, spec, buffers, params in launches:
        getattr(dev.backend, kernel)(spec, *buffers, params)


def _launch(dev: Device, kernel: str, spec: Any, *buffers: Any) -> None:
    params = dev.tuner.resolve_spec(spec).params
    getattr(dev.backend, kernel)(spec, *buffers, params)
    for recording in _recorded.get():
        recording.append((dev, kernel, spec, buffers, params))


#: per-call plans of float pooling calls: (op's plan builder, device, input shape, layout,
#: dtype, arguments) -> (spec, ReLU still to apply). A repeated call (one network, fixed
#: shapes) skips validation, the spec memo and the fusion decision, about 2 µs of the 6 µs
#: the op layer took per call. Only calls that passed validation are stored; the arguments
#: are keyed with their types (``hal.spec._arg_key``), so 3 and 3.0 do not share a plan.
_PLANS: dict[object, tuple[Any, bool]] = {}
_PLAN_LIMIT = 4096


def _planned(
    build: Callable[..., tuple[Device, Tensor, tuple[Any, bool]]], input: Any, *args: Any
) -> tuple[Device, Tensor, tuple[Any, bool]]:
    """(device, input tensor, (spec, ReLU still to apply)) of a pooling call: the stored plan
    of a float hal.Tensor call seen before, else ``build(input, *args)`` (which validates;
    its result is stored when the call can be keyed: a float Tensor, hashable arguments)."""
    x = input
    key: object | None = None
    if x.__class__ is Tensor and x.dtype in FLOAT_DTYPE_SET:
        key = (build, x.device, x.shape, x.layout, x.dtype, _arg_key(args))
        try:
            plan = _PLANS.get(key)
        except TypeError:  # a list or an array among the arguments: validated every call
            key = plan = None
        if plan is not None:
            return x.device, x, plan
    dev, x, plan = build(input, *args)
    if key is not None:
        if len(_PLANS) >= _PLAN_LIMIT:
            _PLANS.clear()  # bounded; a fuzzing run's shapes would otherwise crowd out the network's
        _PLANS[key] = plan
    return dev, x, plan


def _new_output(shape: tuple[int, ...], x: Tensor, dtype: np.dtype | None = None) -> Tensor:
    """``empty`` for a spec's output shape (already a tuple of ints) in x's layout, on x's
    device, without ``empty``'s argument conversions (0.4-0.5 µs of a 5 µs op call)."""
    dt = x.dtype if dtype is None else dtype
    if _poison.get():
        return empty(shape, dt, x.device, x.layout)
    return _output(x.device.backend.allocate(max(math.prod(shape) * dt.itemsize, 1)), shape, dt, x.layout, x.device)


def _fuse(dev: Device, spec: Any, relu: bool) -> tuple[Any, bool]:
    """(spec, ReLU still to apply): fused into the kernel's store where the backend can."""
    if relu is False:  # the usual call: no check needed
        return spec, False
    _check_relu_flag(relu)
    if not relu:
        return spec, False
    if type(dev.backend).fused_relu:
        return replace(spec, relu=True), False
    return spec, True


def _relu_in_place(dev: Device, y: Tensor) -> None:
    spec = EltwiseSpec("relu", y.size, y.dtype)
    _launch(dev, "eltwise", spec, y.buffer, y.buffer)


def relu(input: Any) -> Tensor:
    """``torch.relu``: max(x, 0) with NaN kept; a new tensor in the input's layout."""
    dev = _pick_device([("input", input)])
    x = input if isinstance(input, Tensor) else asarray(np.asarray(input), device=dev)
    require_float(x.dtype, "input")
    _require_backend_dtype(dev, x.dtype)
    y = empty(x.shape, x.dtype, dev, x.layout)
    if x.size:
        _launch(dev, "eltwise", EltwiseSpec("relu", x.size, x.dtype), x.buffer, y.buffer)
    return y


# ----------------------------------------------------------------------------
# pooling
# ----------------------------------------------------------------------------


def _check_relu_flag(relu: object) -> None:
    if not isinstance(relu, (bool, np.bool_)):
        raise HalTypeError(f"relu: expected True or False, got {relu!r}")


def _no_quantized_relu(x: Tensor, relu: object) -> None:
    """``relu=True`` is a float extension: on int8/uint8 data it would need the zero point's clamp, which no
    kernel applies, so it is refused rather than ignored (the flag itself is checked in _fuse)."""
    if x.dtype in QUANT_DTYPES and not (isinstance(relu, (bool, np.bool_)) and not relu):
        raise HalValueError(f"relu: fused ReLU applies to float tensors, not {x.dtype.name}; clamp the quantized "
                            "result at its zero point, or quantize after a float ReLU")


def _max_pool2d_plan(input: Any, kernel_size: Any, stride: Any, padding: PaddingArg, dilation: Any, ceil_mode: bool,
                     return_indices: bool, relu: bool) -> tuple[Device, Tensor, tuple[Any, bool]]:
    dev = _pick_device([("input", input)])
    x = _activation(input, dev, allow_int=True)
    _require_quantized_pooling(dev, x)
    _no_quantized_relu(x, relu)
    spec = pool2d_spec("max", _plane_geometry(x), kernel_size, stride, padding, dilation, ceil_mode, True, None,
                       return_indices)
    return dev, x, _fuse(dev, spec, relu)


def _avg_pool2d_plan(input: Any, kernel_size: Any, stride: Any, padding: PaddingArg, ceil_mode: bool,
                     count_include_pad: bool, divisor_override: int | None, dilation: Any,
                     relu: bool) -> tuple[Device, Tensor, tuple[Any, bool]]:
    dev = _pick_device([("input", input)])
    x = _activation(input, dev, allow_int=True)
    zero_point = 0
    if x.dtype in QUANT_DTYPES:
        if x.scale is None:
            raise HalTypeError("input: average pooling of int8/uint8 needs a quantized tensor "
                               "(hal.quantize or hal.asarray(..., scale=, zero_point=))")
        zero_point = qparams(x.scale, x.zero_point, x.dtype, name="input.scale").zero_point[0]
    _require_quantized_pooling(dev, x)
    spec = pool2d_spec("avg", _plane_geometry(x), kernel_size, stride, padding, dilation, ceil_mode,
                       count_include_pad, divisor_override, False)
    if zero_point:  # quantized inputs are never stored as plans: the zero point is the tensor's
        spec = replace(spec, zero_point=zero_point)
    _no_quantized_relu(x, relu)
    return dev, x, _fuse(dev, spec, relu)


def _adaptive_avg_pool2d_plan(input: Any, output_size: Any, relu: bool) -> tuple[Device, Tensor, tuple[Any, bool]]:
    dev = _pick_device([("input", input)])
    x = _activation(input, dev)
    return dev, x, _fuse(dev, adaptive_pool2d_spec("avg", _plane_geometry(x), output_size, False), relu)


def max_pool2d(
    input: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: PaddingArg = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
    *,
    relu: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """2-D max pooling; NaN propagates; indices are int64 ``h * W + w`` per plane.

    ``relu=True`` (a hal extension) applies ReLU to the result, fused into the kernel
    where the backend can.

    int8/uint8 input (quantized or raw) pools the integers; the output keeps the
    input's scale and zero point.
    """
    dev, x, (spec, relu_after) = _planned(_max_pool2d_plan, input, kernel_size, stride, padding, dilation, ceil_mode,
                                          return_indices, relu)
    y = _new_output(spec.out_shape, x)
    y.scale, y.zero_point = x.scale, x.zero_point
    idx = _new_output(spec.out_shape, x, I64) if return_indices else None
    _launch(dev, "pool2d", spec, x.buffer, y.buffer, None if idx is None else idx.buffer)
    if relu_after:
        _relu_in_place(dev, y)
    return (y, idx) if idx is not None else y


def avg_pool2d(
    input: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: PaddingArg = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
    dilation: Any = 1,
    *,
    relu: bool = False,
) -> Tensor:
    """2-D average pooling (``dilation`` is ONNX's extension; PyTorch has none).

    ``divisor_override``, as PyTorch's, replaces the divisor; it must be below 2**31 (the
    GPU kernels take it as a 32-bit int).

    A quantized int8/uint8 input gives ``saturate(round_half_even(sum(q - zp) / divisor) + zp)``
    with the input's scale and zero point (ONNX QLinearAveragePool with equal scales).
    """
    dev, x, (spec, relu_after) = _planned(_avg_pool2d_plan, input, kernel_size, stride, padding, ceil_mode,
                                          count_include_pad, divisor_override, dilation, relu)
    y = _new_output(spec.out_shape, x)
    y.scale, y.zero_point = x.scale, x.zero_point
    _launch(dev, "pool2d", spec, x.buffer, y.buffer, None)
    if relu_after:
        _relu_in_place(dev, y)
    return y


def adaptive_avg_pool2d(input: Any, output_size: Any, *, relu: bool = False) -> Tensor:
    """Adaptive average pooling (``output_size`` 1 is global average pooling)."""
    dev, x, (spec, relu_after) = _planned(_adaptive_avg_pool2d_plan, input, output_size, relu)
    y = _new_output(spec.out_shape, x)
    _launch(dev, "adaptive_pool2d", spec, x.buffer, y.buffer, None)
    if relu_after:
        _relu_in_place(dev, y)
    return y


def adaptive_max_pool2d(input: Any, output_size: Any, return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """Adaptive max pooling; NaN propagates; optional int64 per-plane indices."""
    dev = _pick_device([("input", input)])
    x = _activation(input, dev)
    spec = adaptive_pool2d_spec("max", _plane_geometry(x), output_size, return_indices)
    y = empty(spec.out_shape, x.dtype, dev, x.layout)
    idx = empty(spec.out_shape, I64, dev, x.layout) if return_indices else None
    _launch(dev, "adaptive_pool2d", spec, x.buffer, y.buffer, None if idx is None else idx.buffer)
    return (y, idx) if idx is not None else y


# ----------------------------------------------------------------------------
# convolution
# ----------------------------------------------------------------------------


def conv2d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: PaddingArg = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    output_scale: Any = None,
    output_zero_point: Any = None,
    output_dtype: Any = None,
    relu: bool = False,
) -> Tensor:
    """2-D convolution (cross-correlation) with stride, padding, dilation and groups.

    With quantized int8/uint8 ``input`` and ``weight``: ONNX QLinearConv when
    ``output_scale`` is given (a quantized result), else ConvInteger (the int32
    accumulator). A quantized conv's ``bias`` is int32 with scale x_scale * w_scale.
    ``relu=True`` (a hal extension, float only) applies ReLU after the bias, fused into
    the kernel's store where the backend can.
    """
    dev = _pick_device([("input", input), ("weight", weight), ("bias", bias)])
    x = _activation(input, dev, allow_int=True)
    if x.dtype in QUANT_DTYPES:
        _no_quantized_relu(x, relu)
        return _qconv2d(dev, x, weight, bias, stride, padding, dilation, groups, output_scale, output_zero_point,
                        output_dtype)
    if output_scale is not None or output_zero_point is not None:
        raise HalTypeError("output_scale: only a quantized (int8/uint8) input takes output quantization parameters")
    if output_dtype is not None:
        raise HalTypeError("output_dtype: only a quantized (int8/uint8) input takes an output dtype; a float conv "
                           "returns the input's dtype")
    w_shape = weight.shape if isinstance(weight, Tensor) else np.shape(weight)
    b_shape = None if bias is None else (bias.shape if isinstance(bias, Tensor) else np.shape(bias))
    spec = conv2d_spec(x.geometry(), tuple(w_shape), bias is not None, b_shape, stride, padding, dilation, groups)
    spec, relu_after = _fuse(dev, spec, relu)
    if isinstance(weight, Tensor):
        if weight.dtype != x.dtype:
            raise HalTypeError(f"weight: expected dtype {x.dtype.name} like the input, got {weight.dtype.name}")
        w = weight if weight.layout == "NCHW" else weight.to(layout="NCHW")
    else:
        w_array = np.asarray(weight)
        if not is_float_data(w_array.dtype):
            raise HalTypeError(f"weight: expected a float array, got dtype {w_array.dtype.name}")
        w = asarray(w_array.astype(x.dtype), device=dev)
    b = None if bias is None else _vector(bias, dev, spec.c_out, "bias")
    y = empty(spec.out_shape, x.dtype, dev, x.layout)
    _launch(dev, "conv2d", spec, x.buffer, w.buffer, None if b is None else b.buffer, y.buffer)
    if relu_after:
        _relu_in_place(dev, y)
    return y


def _qconv2d(dev: Device, x: Tensor, weight: Any, bias: Any, stride: Any, padding: PaddingArg, dilation: Any,
             groups: Any, output_scale: Any, output_zero_point: Any, output_dtype: Any) -> Tensor:
    if x.scale is None:
        raise HalTypeError("input: expected a quantized tensor (scale and zero_point) for an int8/uint8 conv2d")
    if not isinstance(weight, Tensor) or weight.dtype not in QUANT_DTYPES or weight.scale is None:
        got = weight.dtype.name if isinstance(weight, Tensor) else np.asarray(weight).dtype.name
        raise HalTypeError(f"weight: expected a quantized int8/uint8 hal.Tensor (hal.quantize) like the input, "
                           f"got {got}")
    if weight.ndim != 4:
        raise bad_arg("weight", "a 4-D tensor (C_out, C_in/groups, KH, KW)", weight.shape)
    xq = qparams(x.scale, x.zero_point, x.dtype, name="input.scale")
    c_out = weight.shape[0]
    wq = qparams(weight.scale, weight.zero_point, weight.dtype, channels=c_out, name="weight.scale")
    if bias is not None:
        b = bias.numpy() if isinstance(bias, Tensor) else np.asarray(bias)
        if b.dtype.kind not in "iu":
            raise HalTypeError(f"bias: expected int32 values (scale x_scale * w_scale) for a quantized conv2d, "
                               f"got {b.dtype.name}")
        if b.shape != (c_out,):
            raise bad_arg("bias", f"shape ({c_out},)", b.shape)
        if np.any(b > np.iinfo(np.int32).max) or np.any(b < np.iinfo(np.int32).min):
            raise HalValueError("bias: values out of the int32 range")
    conv = conv2d_spec(x.geometry(), weight.shape, bias is not None, None if bias is None else (c_out,), stride,
                       padding, dilation, groups)
    if output_scale is None:
        if output_zero_point is not None or output_dtype is not None:
            raise HalValueError("output_scale: required when output_zero_point or output_dtype is given")
        out_dtype, yq, multiplier = np.dtype(np.int32), None, None
    else:
        try:
            out_dtype = np.dtype(output_dtype) if output_dtype is not None else x.dtype
        except TypeError as exc:
            raise HalTypeError(f"output_dtype: expected 'int8' or 'uint8', got {output_dtype!r}") from exc
        if out_dtype not in QUANT_DTYPES:
            raise HalTypeError(f"output_dtype: expected 'int8' or 'uint8', got {out_dtype.name}")
        yq = qparams(output_scale, output_zero_point, out_dtype, name="output_scale")
        w_scales = np.broadcast_to(np.asarray(wq.scale, np.float64), (c_out,))
        multiplier = (xq.scale[0] * w_scales / yq.scale[0]).astype(np.float32)
    if not type(dev.backend).quantized_conv:
        raise UnsupportedOperation(f"{dev.id}: quantized conv2d is not implemented on the {dev.kind} backend")
    spec = QConv2dSpec(conv, weight.dtype, out_dtype, xq.zero_point[0], 0 if yq is None else yq.zero_point[0],
                       wq.per_channel)
    w = weight if weight.layout == "NCHW" else weight.to(layout="NCHW")
    w_zp = asarray(np.broadcast_to(np.asarray(wq.zero_point, np.int32), (c_out,)).copy(), device=dev)
    b_t = None if bias is None else asarray(b.astype(np.int32), device=dev)
    m_t = None if multiplier is None else asarray(multiplier, device=dev)
    y = empty(spec.out_shape, out_dtype, dev, x.layout)
    if yq is not None:
        y.scale, y.zero_point = yq.scale[0], yq.zero_point[0]
    _launch(dev, "qconv2d", spec, x.buffer, w.buffer, None if b_t is None else b_t.buffer, y.buffer, w_zp.buffer,
            None if m_t is None else m_t.buffer)
    return y


# ----------------------------------------------------------------------------
# quantization
# ----------------------------------------------------------------------------


def quantize(x: Any, scale: Any, zero_point: Any = 0, dtype: Any = "int8", device: Any = None) -> Tensor:
    """ONNX QuantizeLinear: ``saturate(round_half_even(x / scale) + zero_point)``.

    ``scale``/``zero_point`` are per tensor (scalars) or per output channel (arrays
    of length x.shape[0], for conv weights). Computed on the host in float32, as ONNX
    specifies, then placed on the device.
    """
    from hal.quant import quantize_array

    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise HalTypeError(f"dtype: expected 'int8' or 'uint8', got {dtype!r}") from exc
    if isinstance(x, Tensor):
        dev = x.device if device is None else resolve_device(device)
        layout = x.layout
        host = x.numpy()
    else:
        dev = resolve_device(device)
        layout = "NCHW"
        host = np.asarray(x)
    if not is_float_data(host.dtype):
        raise HalTypeError(f"x: expected float data to quantize, got {host.dtype.name}")
    # per output channel where either parameter is an array of more than one value (the other broadcasts)
    try:
        per_channel = np.size(scale) > 1 or np.size(zero_point) > 1
    except ValueError:  # a ragged sequence: qparams names it
        per_channel = False
    channels = host.shape[0] if host.ndim >= 1 and per_channel else None
    try:
        q = qparams(scale, zero_point, dt, channels=channels)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, HalError):
            raise
        raise HalTypeError(f"scale: expected a positive float or an array of them, and zero_point integers; got "
                           f"{scale!r} and {zero_point!r} ({exc})") from exc
    data = quantize_array(host, q, dt, axis=0)
    scale_out = q.scale[0] if not q.per_channel else np.asarray(q.scale)
    zp_out = q.zero_point[0] if not q.per_channel else np.asarray(q.zero_point)
    return asarray(data, device=dev, layout=layout if data.ndim == 4 else None, scale=scale_out, zero_point=zp_out)


def dequantize(q: Tensor) -> Tensor:
    """``(q - zero_point) * scale`` as float32, on q's device and in its layout."""
    from hal.quant import dequantize_array

    if not isinstance(q, Tensor) or q.dtype not in QUANT_DTYPES or q.scale is None:
        raise HalTypeError("q: expected a quantized int8/uint8 hal.Tensor")
    channels = q.shape[0] if np.size(q.scale) > 1 else None
    p = qparams(q.scale, q.zero_point, q.dtype, channels=channels, name="q.scale")
    data = dequantize_array(q.numpy(), p, axis=0)
    return asarray(data, device=q.device, layout=q.layout if q.ndim == 4 else None)


# ----------------------------------------------------------------------------
# batch norm
# ----------------------------------------------------------------------------


def _running(value: Any, dev: Device, length: int, name: str, training: bool) -> tuple[Tensor | None, Any]:
    """(device float32 buffer tensor, host array to write back into or None)."""
    if value is None:
        return None, None
    if isinstance(value, Tensor):
        if value.shape != (length,):
            raise bad_arg(name, f"shape ({length},)", value.shape)
        if value.dtype != F32:
            raise HalTypeError(f"{name}: expected a float32 tensor (updated in place), got {value.dtype.name}")
        return value, None
    if not isinstance(value, np.ndarray):
        raise HalTypeError(
            f"{name}: expected a numpy array or hal.Tensor of shape ({length},), got {type(value).__name__}"
        )
    if value.shape != (length,):
        raise bad_arg(name, f"shape ({length},)", value.shape)
    if value.dtype.kind != "f":
        raise HalTypeError(f"{name}: expected a float array, got dtype {value.dtype.name}")
    if training and not value.flags.writeable:
        raise HalValueError(f"{name}: the array is read-only, but training updates it in place")
    return asarray(value.astype(F32), device=dev), (value if training else None)


def batch_norm(
    input: Any,
    running_mean: Any,
    running_var: Any,
    weight: Any = None,
    bias: Any = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
    *,
    relu: bool = False,
) -> Tensor:
    """BatchNorm over (N, H, W) per channel (``relu=True``: ReLU fused into the store).

    Training normalizes with the biased batch variance and updates
    ``running_mean``/``running_var`` in place (unbiased variance), as PyTorch does;
    inference normalizes with the running statistics.
    """
    dev = _pick_device(
        [("input", input), ("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
         ("bias", bias)]
    )
    x = _activation(input, dev)
    if (running_mean is None) != (running_var is None):
        raise HalValueError("running_mean: running_mean and running_var must be given together or both be None")
    if not training and running_mean is None:
        raise HalValueError("running_mean: required (with running_var) when training=False")
    bn_spec = batch_norm_spec(_plane_geometry(x), training, momentum, eps, running_mean is not None)
    spec, relu_after = _fuse(dev, bn_spec, relu)
    rm, rm_host = _running(running_mean, dev, spec.c, "running_mean", spec.training)
    rv, rv_host = _running(running_var, dev, spec.c, "running_var", spec.training)
    w = None if weight is None else _vector(weight, dev, spec.c, "weight")
    b = None if bias is None else _vector(bias, dev, spec.c, "bias")
    y = _new_output(spec.shape, x)
    _launch(
        dev,
        "batch_norm",
        spec,
        x.buffer,
        y.buffer,
        None if w is None else w.buffer,
        None if b is None else b.buffer,
        None if rm is None else rm.buffer,
        None if rv is None else rv.buffer,
    )
    if relu_after:
        _relu_in_place(dev, y)
    # numpy running statistics are updated in place, as the API promises
    for host, tensor in ((rm_host, rm), (rv_host, rv)):
        if host is not None and tensor is not None:
            host[...] = tensor.numpy().astype(host.dtype)
    return y
