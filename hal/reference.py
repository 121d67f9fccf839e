"""The float64 numpy oracle: the definition of every op's semantics.

Each function takes the same arguments as its ``hal`` op (numpy NCHW input) and
computes in float64 through the same spec functions the op layer uses, so shape
rules are shared. It is slow on purpose: clarity over speed.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from hal.errors import HalValueError, bad_arg
from hal.spec import (
    AdaptivePool2dSpec,
    BatchNormSpec,
    Conv2dSpec,
    PaddingArg,
    Pool2dSpec,
    QConv2dSpec,
    TensorGeometry,
    adaptive_bins,
    adaptive_pool2d_spec,
    batch_norm_spec,
    conv2d_spec,
    pool2d_spec,
)


def _geometry(x: np.ndarray, name: str = "input") -> TensorGeometry:
    if x.ndim != 4:
        raise bad_arg(name, "a 4-D (N, C, H, W) array", x.shape)
    n, c, h, w = x.shape
    return TensorGeometry(n, c, h, w, "NCHW", np.dtype(np.float64))


def relu(x: np.ndarray) -> np.ndarray:
    """``torch.relu``: negative values become 0; NaN stays NaN."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(x < 0, 0.0, x)


# ----------------------------------------------------------------------------
# pooling
# ----------------------------------------------------------------------------


def pool2d_from_spec(spec: Pool2dSpec | AdaptivePool2dSpec, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Evaluate a pooling spec on float64 NCHW ``x``; returns (values, int64 indices)."""
    x = np.asarray(x, dtype=np.float64)
    if isinstance(spec, Pool2dSpec):
        return _pool2d_by_taps(spec, x)
    n, c, ih, iw = x.shape
    out = np.empty((n, c, spec.out_h, spec.out_w), dtype=np.float64)
    idx = np.zeros((n, c, spec.out_h, spec.out_w), dtype=np.int64)
    if isinstance(spec, AdaptivePool2dSpec):
        rows = [list(range(a, b)) for a, b in adaptive_bins(ih, spec.out_h)]
        cols = [list(range(a, b)) for a, b in adaptive_bins(iw, spec.out_w)]
        row_counts = [len(r) for r in rows]
        col_counts = [len(cc) for cc in cols]
        pad_rows = row_counts
        pad_cols = col_counts
    else:
        kh, kw = spec.kernel
        sh, sw = spec.stride
        dh, dw = spec.dilation
        pt, pb, pl, pr = spec.pads
        rows, cols, pad_rows, pad_cols = [], [], [], []
        for o in range(spec.out_h):
            taps = [o * sh - pt + i * dh for i in range(kh)]
            rows.append([t for t in taps if 0 <= t < ih])
            pad_rows.append(sum(1 for t in taps if -pt <= t < ih + pb))
        for o in range(spec.out_w):
            taps = [o * sw - pl + j * dw for j in range(kw)]
            cols.append([t for t in taps if 0 <= t < iw])
            pad_cols.append(sum(1 for t in taps if -pl <= t < iw + pr))
    for oh, r in enumerate(rows):
        for ow, cc in enumerate(cols):
            window = x[:, :, r][:, :, :, cc].reshape(n, c, -1)
            flat = (np.asarray(r)[:, None] * iw + np.asarray(cc)[None, :]).reshape(-1)
            if spec.kind == "max":
                out[:, :, oh, ow], idx[:, :, oh, ow] = _max_with_index(window, flat)
            else:
                total = window.sum(axis=2)
                if isinstance(spec, Pool2dSpec) and spec.divisor is not None:
                    divisor = spec.divisor
                elif isinstance(spec, Pool2dSpec) and spec.count_include_pad:
                    divisor = pad_rows[oh] * pad_cols[ow]
                else:
                    divisor = len(r) * len(cc)
                out[:, :, oh, ow] = total / divisor
    if spec.relu:
        out = relu(out)
    return out, idx


def _pool2d_by_taps(spec: Pool2dSpec, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fixed-window pooling, vectorised over every output position, one kernel tap at a time.

    Taps are visited in row-major window order and taps outside the input are skipped,
    so max pooling sees the same sequence as a per-window scan (strict '>' keeps the
    first maximum, a NaN always wins, the initial index is the first valid tap).
    """
    n, c, ih, iw = x.shape
    kh, kw = spec.kernel
    sh, sw = spec.stride
    dh, dw = spec.dilation
    pt, pb, pl, pr = spec.pads
    oh = np.arange(spec.out_h)
    ow = np.arange(spec.out_w)
    shape = (n, c, spec.out_h, spec.out_w)
    if spec.kind == "max":
        best = np.full(shape, -np.inf)
        best_i = np.full(shape, -1, dtype=np.int64)
        first = np.full((spec.out_h, spec.out_w), -1, dtype=np.int64)
    else:
        total = np.zeros(shape)
    valid_rows = np.zeros(spec.out_h, dtype=np.int64)
    valid_cols = np.zeros(spec.out_w, dtype=np.int64)
    padded_rows = np.zeros(spec.out_h, dtype=np.int64)
    padded_cols = np.zeros(spec.out_w, dtype=np.int64)
    for i in range(kh):
        rows = oh * sh - pt + i * dh
        valid_rows += (rows >= 0) & (rows < ih)
        padded_rows += (rows >= -pt) & (rows < ih + pb)
    for j in range(kw):
        cols = ow * sw - pl + j * dw
        valid_cols += (cols >= 0) & (cols < iw)
        padded_cols += (cols >= -pl) & (cols < iw + pr)
    for i in range(kh):
        rows = oh * sh - pt + i * dh
        row_ok = (rows >= 0) & (rows < ih)
        if not row_ok.any():
            continue
        r = np.clip(rows, 0, ih - 1)
        x_rows = x[:, :, r, :]  # (n, c, OH, IW)
        for j in range(kw):
            cols = ow * sw - pl + j * dw
            col_ok = (cols >= 0) & (cols < iw)
            if not col_ok.any():
                continue
            cc = np.clip(cols, 0, iw - 1)
            v = x_rows[:, :, :, cc]  # (n, c, OH, OW)
            ok = row_ok[:, None] & col_ok[None, :]
            if spec.kind == "max":
                flat = r[:, None] * iw + cc[None, :]
                first = np.where((first < 0) & ok, flat, first)
                take = ok & ((v > best) | np.isnan(v))
                best = np.where(take, v, best)
                best_i = np.where(take, flat, best_i)
            else:
                total += np.where(ok, v, 0.0)
    if spec.kind == "max":
        out = best
        idx = np.where(best_i < 0, first, best_i)
    else:
        if spec.divisor is not None:
            divisor: np.ndarray | int = spec.divisor
        elif spec.count_include_pad:
            divisor = padded_rows[:, None] * padded_cols[None, :]
        else:
            divisor = valid_rows[:, None] * valid_cols[None, :]
        out = total / divisor
        idx = np.zeros(shape, dtype=np.int64)
    if spec.relu:
        out = relu(out)
    return out, idx


def _max_with_index(window: np.ndarray, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Max over the last axis in scan order: strict '>' keeps the first maximum,
    and a NaN always wins (so the last NaN's index is reported), as PyTorch does."""
    n, c, k = window.shape
    best = np.full((n, c), -np.inf)
    best_i = np.full((n, c), flat[0], dtype=np.int64)
    for t in range(k):
        v = window[:, :, t]
        take = (v > best) | np.isnan(v)
        best = np.where(take, v, best)
        best_i = np.where(take, flat[t], best_i)
    return best, best_i


def max_pool2d(
    x: np.ndarray,
    kernel_size: object,
    stride: object = None,
    padding: PaddingArg = 0,
    dilation: object = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """float64 ``torch.nn.functional.max_pool2d``."""
    spec = pool2d_spec(
        "max", _geometry(x), kernel_size, stride, padding, dilation, ceil_mode, True, None, return_indices
    )
    out, idx = pool2d_from_spec(spec, x)
    return (out, idx) if return_indices else out


def avg_pool2d(
    x: np.ndarray,
    kernel_size: object,
    stride: object = None,
    padding: PaddingArg = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
    dilation: object = 1,
) -> np.ndarray:
    """float64 ``torch.nn.functional.avg_pool2d`` (plus ONNX's dilation)."""
    spec = pool2d_spec(
        "avg", _geometry(x), kernel_size, stride, padding, dilation, ceil_mode, count_include_pad,
        divisor_override, False,
    )
    return pool2d_from_spec(spec, x)[0]


def adaptive_avg_pool2d(x: np.ndarray, output_size: object) -> np.ndarray:
    """float64 ``torch.nn.functional.adaptive_avg_pool2d``."""
    return pool2d_from_spec(adaptive_pool2d_spec("avg", _geometry(x), output_size, False), x)[0]


def adaptive_max_pool2d(
    x: np.ndarray, output_size: object, return_indices: bool = False
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """float64 ``torch.nn.functional.adaptive_max_pool2d``."""
    out, idx = pool2d_from_spec(adaptive_pool2d_spec("max", _geometry(x), output_size, return_indices), x)
    return (out, idx) if return_indices else out


def pool_kind(spec: Pool2dSpec | AdaptivePool2dSpec) -> Literal["max", "avg"]:
    """'max' or 'avg'."""
    return spec.kind


# ----------------------------------------------------------------------------
# convolution
# ----------------------------------------------------------------------------


def conv2d_from_spec(spec: Conv2dSpec, x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """Evaluate a conv spec in float64 on NCHW ``x`` and OIHW ``weight``."""
    x = np.asarray(x, dtype=np.float64)
    weight = np.asarray(weight, dtype=np.float64)
    pt, pb, pl, pr = spec.pads
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    g = spec.groups
    cig = spec.c_in // g
    cog = spec.c_out // g
    sh, sw = spec.stride
    dh, dw = spec.dilation
    oh, ow = spec.out_h, spec.out_w
    out = np.zeros((spec.n, g, cog, oh, ow), dtype=np.float64)
    wg = weight.reshape(g, cog, cig, spec.kernel[0], spec.kernel[1])
    for ki in range(spec.kernel[0]):
        for kj in range(spec.kernel[1]):
            r0, c0 = ki * dh, kj * dw
            patch = xp[:, :, r0 : r0 + (oh - 1) * sh + 1 : sh, c0 : c0 + (ow - 1) * sw + 1 : sw]
            patch = patch.reshape(spec.n, g, cig, oh, ow)
            out += np.einsum("ngchw,goc->ngohw", patch, wg[:, :, :, ki, kj], optimize=True)
    y = out.reshape(spec.n, spec.c_out, oh, ow)
    if bias is not None:
        y += np.asarray(bias, dtype=np.float64)[None, :, None, None]
    return relu(y) if spec.relu else y


def conv2d(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    stride: object = 1,
    padding: PaddingArg = 0,
    dilation: object = 1,
    groups: int = 1,
) -> np.ndarray:
    """float64 ``torch.nn.functional.conv2d``."""
    weight = np.asarray(weight)
    spec = conv2d_spec(
        _geometry(x),
        weight.shape,
        bias is not None,
        None if bias is None else np.shape(bias),
        stride,
        padding,
        dilation,
        groups,
    )
    return conv2d_from_spec(spec, x, weight, bias)


# ----------------------------------------------------------------------------
# batch norm
# ----------------------------------------------------------------------------


def batch_norm_from_spec(
    spec: BatchNormSpec,
    x: np.ndarray,
    running_mean: np.ndarray | None,
    running_var: np.ndarray | None,
    weight: np.ndarray | None,
    bias: np.ndarray | None,
) -> np.ndarray:
    """Evaluate a BatchNorm spec in float64; updates the running arrays in place in training."""
    x = np.asarray(x, dtype=np.float64)
    if spec.training:
        mean = x.mean(axis=(0, 2, 3))
        var = ((x - mean[None, :, None, None]) ** 2).mean(axis=(0, 2, 3))  # two-pass: no cancellation
        if running_mean is not None and running_var is not None:
            m = spec.momentum
            unbiased = var * spec.count / (spec.count - 1)
            running_mean[...] = (1 - m) * running_mean.astype(np.float64) + m * mean
            running_var[...] = (1 - m) * running_var.astype(np.float64) + m * unbiased
    else:
        if running_mean is None or running_var is None:
            raise HalValueError("running_mean: required (with running_var) when training=False")
        mean = np.asarray(running_mean, dtype=np.float64)
        var = np.asarray(running_var, dtype=np.float64)
    scale = 1.0 / np.sqrt(var + spec.eps)
    if weight is not None:
        scale = scale * np.asarray(weight, dtype=np.float64)
    shift = -mean * scale
    if bias is not None:
        shift = shift + np.asarray(bias, dtype=np.float64)
    out = x * scale[None, :, None, None] + shift[None, :, None, None]
    return relu(out) if spec.relu else out


def batch_norm(
    x: np.ndarray,
    running_mean: np.ndarray | None,
    running_var: np.ndarray | None,
    weight: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> np.ndarray:
    """float64 ``torch.nn.functional.batch_norm`` (running arrays updated in place in training)."""
    spec = batch_norm_spec(_geometry(x), training, momentum, eps, running_mean is not None)
    return batch_norm_from_spec(spec, x, running_mean, running_var, weight, bias)


# ----------------------------------------------------------------------------
# quantized int8 / uint8 (ONNX semantics: round half to even, saturate)
# ----------------------------------------------------------------------------


def quantized_pool2d_from_spec(spec: Pool2dSpec | AdaptivePool2dSpec, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pooling on quantized integers: max on the raw values; average as
    ``saturate(round_half_even(sum(q - zp) / divisor) + zp)`` (padding counts as the zero point)."""
    zp = spec.zero_point if isinstance(spec, Pool2dSpec) else 0
    info = np.iinfo(spec.dtype)
    if spec.kind == "max":
        out, idx = pool2d_from_spec(spec, q.astype(np.float64))
        return out.astype(spec.dtype), idx
    mean, idx = pool2d_from_spec(spec, q.astype(np.float64) - zp)
    return np.clip(np.rint(mean) + zp, info.min, info.max).astype(spec.dtype), idx


def qconv2d_from_spec(
    spec: QConv2dSpec,
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None,
    w_zero_point: np.ndarray,
    multiplier: np.ndarray | None,
) -> np.ndarray:
    """QLinearConv (``multiplier`` given) or ConvInteger (int32 accumulator) on NCHW integers."""
    xc = x.astype(np.float64) - spec.x_zero_point
    wc = w.astype(np.float64) - np.asarray(w_zero_point, np.float64)[:, None, None, None]
    acc = conv2d_from_spec(spec.conv, xc, wc, None)  # exact: integers far below 2**53
    if bias is not None:
        acc = acc + np.asarray(bias, np.float64)[None, :, None, None]
    if multiplier is None:
        return acc.astype(np.int64).astype(np.int32)
    info = np.iinfo(spec.out_dtype)
    y = np.rint(acc * np.asarray(multiplier, np.float64)[None, :, None, None]) + spec.y_zero_point
    return np.clip(y, info.min, info.max).astype(spec.out_dtype)
