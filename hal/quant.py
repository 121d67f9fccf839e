"""int8/uint8 quantization with ONNX semantics (QuantizeLinear, QLinearConv, ConvInteger).

A quantized tensor is an int8 or uint8 ``hal.Tensor`` carrying ``scale`` and
``zero_point``: per tensor (a float and an int), or per output channel for conv
weights (arrays of length C_out). ``real = (q - zero_point) * scale``.
Rounding is half to even and results saturate to the dtype's range.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hal.dtypes import is_float_data
from hal.errors import HalTypeError, HalValueError

QUANT_DTYPES = (np.dtype(np.int8), np.dtype(np.uint8))


@dataclass(frozen=True)
class QParams:
    """Validated scale and zero point (tuples of length 1, or C for per-channel)."""

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]

    @property
    def per_channel(self) -> bool:
        """True for one scale per output channel."""
        return len(self.scale) > 1

    def scale_value(self) -> float | np.ndarray:
        """Scalar for per-tensor, float64 array for per-channel."""
        return self.scale[0] if not self.per_channel else np.asarray(self.scale, np.float64)

    def zero_point_value(self) -> int | np.ndarray:
        """Scalar for per-tensor, int64 array for per-channel."""
        return self.zero_point[0] if not self.per_channel else np.asarray(self.zero_point, np.int64)


def qrange(dtype: np.dtype) -> tuple[int, int]:
    """(min, max) of a quantized dtype."""
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def qparams(scale: Any, zero_point: Any, dtype: np.dtype, channels: int | None = None,
            name: str = "scale") -> QParams:
    """Validate quantization parameters for ``dtype``.

    ``channels`` is the number of output channels when per-channel parameters are
    allowed (conv weights); otherwise both must be scalars.
    """
    dtype = np.dtype(dtype)
    if dtype not in QUANT_DTYPES:
        raise HalTypeError(f"dtype: expected int8 or uint8 for quantized data, got {dtype.name}")
    zp_name = name.replace("scale", "zero_point") if "scale" in name else "zero_point"
    s = np.asarray(scale, dtype=np.float64).reshape(-1) if scale is not None else None
    if s is None or s.size == 0:
        raise HalValueError(f"{name}: expected a positive float, got {scale!r}")
    z = np.asarray(0 if zero_point is None else zero_point).reshape(-1)
    if z.dtype.kind not in "iu" and not (z.dtype.kind == "f" and np.all(z == np.round(z))):
        raise HalValueError(f"{zp_name}: expected integers, got {zero_point!r}")
    z = z.astype(np.int64)
    if not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise HalValueError(f"{name}: expected positive finite values, got {scale!r}")
    with np.errstate(over="ignore", under="ignore"):
        s32 = s.astype(np.float32)  # the kernels and QuantizeLinear compute in float32
    if not np.all(np.isfinite(s32)) or np.any(s32 <= 0):
        raise HalValueError(f"{name}: expected values a float32 holds (positive, at most 3.4e38), got {scale!r}")
    lo, hi = qrange(dtype)
    if np.any(z < lo) or np.any(z > hi):
        raise HalValueError(f"{zp_name}: expected values in [{lo}, {hi}] for {dtype.name}, got {zero_point!r}")
    if channels is None:
        if s.size != 1 or z.size != 1:
            culprit = name if s.size != 1 else zp_name
            raise HalValueError(f"{culprit}: expected one scale and one zero point per tensor, "
                                f"got {s.size} and {z.size}")
    else:
        for what, arr in ((name, s), (zp_name, z)):
            if arr.size not in (1, channels):
                raise HalValueError(f"{what}: expected 1 or {channels} (one per output channel) values, got {arr.size}")
        if s.size != z.size and 1 not in (s.size, z.size):
            raise HalValueError(f"{zp_name}: shape does not match {name}")
        if s.size == channels or z.size == channels:
            s = np.broadcast_to(s, (channels,))
            z = np.broadcast_to(z, (channels,))
    return QParams(tuple(float(v) for v in s), tuple(int(v) for v in z))


def quantize_array(x: np.ndarray, q: QParams, dtype: np.dtype, axis: int = 0) -> np.ndarray:
    """ONNX QuantizeLinear in float32: saturate(round_half_even(x / scale) + zero_point). Saturation happens
    before any integer conversion, so values past the range and +-inf give the range's ends; NaN (which
    QuantizeLinear leaves undefined for integer outputs) gives the zero point."""
    xf = np.asarray(x, dtype=np.float32)
    shape = [1] * xf.ndim
    if q.per_channel:
        shape[axis] = -1
    scale = np.asarray(q.scale, np.float32).reshape(shape) if q.per_channel else np.float32(q.scale[0])
    zp = np.asarray(q.zero_point, np.int64).reshape(shape) if q.per_channel else q.zero_point[0]
    lo, hi = qrange(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        v = np.rint(xf / scale).astype(np.float64) + zp  # exact: |integers| < 2**53 or saturated below
    v = np.where(np.isnan(v), zp, v)
    return np.clip(v, lo, hi).astype(dtype)


def dequantize_array(q: np.ndarray, p: QParams, axis: int = 0) -> np.ndarray:
    """``(q - zero_point) * scale`` in float32."""
    shape = [1] * q.ndim
    if p.per_channel:
        shape[axis] = -1
    scale = np.asarray(p.scale, np.float32).reshape(shape) if p.per_channel else np.float32(p.scale[0])
    zp = np.asarray(p.zero_point, np.int64).reshape(shape) if p.per_channel else p.zero_point[0]
    return ((q.astype(np.int64) - zp).astype(np.float32) * scale).astype(np.float32)


def fold_batch_norm(
    weight: Any, bias: Any, running_mean: Any, running_var: Any, gamma: Any = None, beta: Any = None,
    eps: float = 1e-5,
) -> tuple[np.ndarray, np.ndarray]:
    """Fold an inference BatchNorm into the conv before it: returns (weight', bias') in float32.

    ``conv(x, w', b') == batch_norm(conv(x, w, b), mean, var, gamma, beta)``:
    ``w' = w * g`` and ``b' = (b - mean) * g + beta`` with ``g = gamma / sqrt(var + eps)``.
    Quantize the folded weights afterwards for the int8 path.
    """
    def floats(v: Any, name: str) -> np.ndarray:
        """``v`` as float64: float data (the weights), or float, int or bool data (the statistics)."""
        a = np.asarray(v.numpy() if hasattr(v, "numpy") else v)
        if getattr(v, "scale", None) is not None or not (
                is_float_data(a.dtype) or (name != "weight" and a.dtype.kind in "iub")):
            quantized = " quantized" if getattr(v, "scale", None) is not None else ""
            raise HalTypeError(f"{name}: expected float values (dequantize a quantized tensor first), got "
                               f"{a.dtype.name}{quantized}")
        return a.astype(np.float64)

    w = floats(weight, "weight")
    if w.ndim != 4:
        raise HalValueError(f"weight: expected a 4-D conv weight, got shape {w.shape}")
    c = w.shape[0]
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating, np.integer)) \
            or not np.isfinite(eps) or eps <= 0:
        raise HalValueError(f"eps: expected a positive finite float (as batch_norm), got {eps!r}")

    def vec(v: Any, name: str, default: float) -> np.ndarray:
        if v is None:
            return np.full(c, default)
        a = floats(v, name)
        if a.shape != (c,):
            raise HalValueError(f"{name}: expected shape ({c},), got {a.shape}")
        return a

    var = vec(running_var, "running_var", 1.0)
    if np.any(var + eps <= 0):
        raise HalValueError("running_var: running_var + eps must be positive")
    g = vec(gamma, "gamma", 1.0) / np.sqrt(var + eps)
    folded_w = w * g[:, None, None, None]
    folded_b = (vec(bias, "bias", 0.0) - vec(running_mean, "running_mean", 0.0)) * g + vec(beta, "beta", 0.0)
    return folded_w.astype(np.float32), folded_b.astype(np.float32)
