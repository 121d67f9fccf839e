"""The ops: names, argument order and defaults of ``torch.nn.functional``.

Each op validates its arguments, builds one frozen spec (``hal.spec``), allocates
the outputs, resolves the kernel parameters through the device's tuner and calls
the backend's launcher. Inputs may be ``hal.Tensor`` or anything numpy accepts;
host arrays are uploaded to the device of the first Tensor argument, or to the
selected device (``hal.use_device``, ``HAL_DEVICE``, automatic).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hal.device import Device
from hal.device import device as resolve_device
from hal.dtypes import require_float
from hal.errors import HalTypeError, HalValueError, bad_arg
from hal.spec import (
    PaddingArg,
    adaptive_pool2d_spec,
    batch_norm_spec,
    conv2d_spec,
    pool2d_spec,
)
from hal.tensor import Tensor, asarray, empty

F32 = np.dtype(np.float32)
I64 = np.dtype(np.int64)


def _pick_device(args: Sequence[Any]) -> Device:
    """The device of the Tensor arguments (all must agree), else the selected device."""
    found: Device | None = None
    for name, value in args:
        if isinstance(value, Tensor):
            if found is None:
                found = value.device
            elif value.device != found:
                raise HalValueError(
                    f"{name}: expected a tensor on {found.id} like the other arguments, got one on {value.device.id}"
                )
    return found if found is not None else resolve_device(None)


def _activation(x: Any, dev: Device, name: str = "input") -> Tensor:
    """``x`` as a 4-D float Tensor on ``dev``."""
    if not isinstance(x, Tensor):
        array = np.asarray(x)
        if array.ndim != 4:
            raise bad_arg(name, "a 4-D (N, C, H, W) array", array.shape)
        if array.dtype not in (np.float32, np.float16, np.float64):
            raise HalTypeError(f"{name}: expected dtype float32 or float16, got {array.dtype.name}")
        x = asarray(array, device=dev)
    if x.ndim != 4:
        raise bad_arg(name, "a 4-D (N, C, H, W) tensor", x.shape)
    require_float(x.dtype, name)
    if x.size == 0:
        raise bad_arg(name, "a non-empty tensor", x.shape)
    return x


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
    if array.dtype.kind != "f":
        raise HalTypeError(f"{name}: expected a float array, got dtype {array.dtype.name}")
    return asarray(array.astype(F32), device=dev)


def _launch(dev: Device, kernel: str, spec: Any, *buffers: Any) -> None:
    params = dev.tuner.resolve_spec(spec).params
    getattr(dev.backend, kernel)(spec, *buffers, params)


# ----------------------------------------------------------------------------
# pooling
# ----------------------------------------------------------------------------


def max_pool2d(
    input: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: PaddingArg = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """2-D max pooling; NaN propagates; indices are int64 ``h * W + w`` per plane."""
    dev = _pick_device([("input", input)])
    x = _activation(input, dev)
    spec = pool2d_spec("max", x.geometry(), kernel_size, stride, padding, dilation, ceil_mode, True, None,
                       return_indices)
    y = empty(spec.out_shape, x.dtype, dev, x.layout)
    idx = empty(spec.out_shape, I64, dev, x.layout) if return_indices else None
    _launch(dev, "pool2d", spec, x.buffer, y.buffer, None if idx is None else idx.buffer)
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
) -> Tensor:
    """2-D average pooling (``dilation`` is ONNX's extension; PyTorch has none)."""
    dev = _pick_device([("input", input)])
    x = _activation(input, dev)
    spec = pool2d_spec("avg", x.geometry(), kernel_size, stride, padding, dilation, ceil_mode, count_include_pad,
                       divisor_override, False)
    y = empty(spec.out_shape, x.dtype, dev, x.layout)
    _launch(dev, "pool2d", spec, x.buffer, y.buffer, None)
    return y


def adaptive_avg_pool2d(input: Any, output_size: Any) -> Tensor:
    """Adaptive average pooling (``output_size`` 1 is global average pooling)."""
    dev = _pick_device([("input", input)])
    x = _activation(input, dev)
    spec = adaptive_pool2d_spec("avg", x.geometry(), output_size, False)
    y = empty(spec.out_shape, x.dtype, dev, x.layout)
    _launch(dev, "adaptive_pool2d", spec, x.buffer, y.buffer, None)
    return y


def adaptive_max_pool2d(input: Any, output_size: Any, return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """Adaptive max pooling; NaN propagates; optional int64 per-plane indices."""
    dev = _pick_device([("input", input)])
    x = _activation(input, dev)
    spec = adaptive_pool2d_spec("max", x.geometry(), output_size, return_indices)
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
) -> Tensor:
    """2-D convolution (cross-correlation) with stride, padding, dilation and groups."""
    dev = _pick_device([("input", input), ("weight", weight), ("bias", bias)])
    x = _activation(input, dev)
    w_shape = weight.shape if isinstance(weight, Tensor) else np.shape(weight)
    b_shape = None if bias is None else (bias.shape if isinstance(bias, Tensor) else np.shape(bias))
    spec = conv2d_spec(x.geometry(), tuple(w_shape), bias is not None, b_shape, stride, padding, dilation, groups)
    if isinstance(weight, Tensor):
        if weight.dtype != x.dtype:
            raise HalTypeError(f"weight: expected dtype {x.dtype.name} like the input, got {weight.dtype.name}")
        w = weight if weight.layout == "NCHW" else weight.to(layout="NCHW")
    else:
        w_array = np.asarray(weight)
        if w_array.dtype.kind != "f":
            raise HalTypeError(f"weight: expected a float array, got dtype {w_array.dtype.name}")
        w = asarray(w_array.astype(x.dtype), device=dev)
    b = None if bias is None else _vector(bias, dev, spec.c_out, "bias")
    y = empty(spec.out_shape, x.dtype, dev, x.layout)
    _launch(dev, "conv2d", spec, x.buffer, w.buffer, None if b is None else b.buffer, y.buffer)
    return y


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
) -> Tensor:
    """BatchNorm over (N, H, W) per channel.

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
    spec = batch_norm_spec(x.geometry(), training, momentum, eps, running_mean is not None)
    rm, rm_host = _running(running_mean, dev, spec.c, "running_mean", spec.training)
    rv, rv_host = _running(running_var, dev, spec.c, "running_var", spec.training)
    w = None if weight is None else _vector(weight, dev, spec.c, "weight")
    b = None if bias is None else _vector(bias, dev, spec.c, "bias")
    y = empty(spec.shape, x.dtype, dev, x.layout)
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
    # numpy running statistics are updated in place, as the API promises
    for host, tensor in ((rm_host, rm), (rv_host, rv)):
        if host is not None and tensor is not None:
            host[...] = tensor.numpy().astype(host.dtype)
    return y
