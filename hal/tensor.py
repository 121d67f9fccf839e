"""``hal.Tensor``: a device buffer with a logical shape, dtype, layout and device.

The logical shape of a 4-D tensor is always (N, C, H, W); ``layout`` says how it
lies in memory: ``"NCHW"`` (contiguous) or ``"NHWC"`` (channels last, like
PyTorch's ``channels_last``). Tensors of other ranks are plain C-contiguous.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from hal.backends.base import Buffer
from hal.device import Device
from hal.device import device as resolve_device
from hal.dtypes import as_dtype, is_bfloat16, is_float
from hal.errors import HalTypeError, HalValueError, bad_arg
from hal.spec import Layout, TensorGeometry, layout_arg

#: kernels index with 32-bit ints
MAX_ELEMENTS = 2**31 - 1


def physical_shape(shape: tuple[int, ...], layout: Layout) -> tuple[int, ...]:
    """Memory order of a logical shape: NHWC puts channels last."""
    if layout == "NHWC":
        n, c, h, w = shape
        return (n, h, w, c)
    return shape


#: (shape, layout, dtype) -> TensorGeometry, shared by every tensor of that geometry
_GEOMETRIES: dict[tuple[tuple[int, ...], str, np.dtype], TensorGeometry] = {}


class Tensor:
    """An array on a hal device."""

    __slots__ = ("_owner", "buffer", "device", "dtype", "layout", "scale", "shape", "zero_point")

    def __init__(
        self,
        buffer: Buffer,
        shape: tuple[int, ...],
        dtype: np.dtype,
        layout: Layout,
        device: Device,
        *,
        scale: Any = None,
        zero_point: Any = None,
        owner: object = None,
    ) -> None:
        self.buffer = buffer
        self.shape = tuple(map(int, shape))
        self.dtype = np.dtype(dtype)
        self.layout: Layout = layout
        self.device = device
        self.scale = scale
        self.zero_point = zero_point
        self._owner = owner  # keeps foreign memory alive (zero-copy imports)

    # -- basic properties ------------------------------------------------------------
    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of device memory the elements occupy."""
        return self.size * self.dtype.itemsize

    @property
    def physical_shape(self) -> tuple[int, ...]:
        """Shape in memory order."""
        return physical_shape(self.shape, self.layout)

    def geometry(self, name: str = "input") -> TensorGeometry:
        """The (N, C, H, W) geometry ops build specs from."""
        if self.ndim != 4:
            raise bad_arg(name, "a 4-D (N, C, H, W) tensor", self.shape)
        key = (self.shape, self.layout, self.dtype)
        geom = _GEOMETRIES.get(key)
        if geom is None:
            n, c, h, w = self.shape
            geom = TensorGeometry(n, c, h, w, self.layout, self.dtype)
            if len(_GEOMETRIES) > 4096:
                _GEOMETRIES.clear()
            _GEOMETRIES[key] = geom  # one object per geometry: the spec memo then hashes it once
        return geom

    # -- conversion ------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """A new host array in logical (NCHW) order."""
        out = np.empty(self.physical_shape, dtype=self.dtype)
        if out.size:
            self.device.backend.download(self.buffer, out)
        if self.layout == "NHWC":
            return np.ascontiguousarray(out.transpose(0, 3, 1, 2))
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        array = self.numpy()
        return array if dtype is None else array.astype(dtype)

    def to(self, device: str | Device | None = None, *, layout: Layout | None = None, dtype: Any = None) -> Tensor:
        """A copy on ``device`` (and/or in another layout or dtype); self when nothing changes."""
        target = resolve_device(device) if device is not None else self.device
        target_layout = layout_arg(layout) if layout is not None else self.layout
        target_dtype = as_dtype(dtype) if dtype is not None else self.dtype
        if target == self.device and target_layout == self.layout and target_dtype == self.dtype:
            return self
        return asarray(self.numpy().astype(target_dtype, copy=False), device=target, layout=target_layout,
                       scale=self.scale, zero_point=self.zero_point)

    def copy_(self, source: Any) -> Tensor:
        """Write ``source``'s values into this tensor's memory, in place; returns self.

        ``source`` is a host array of the same logical (N, C, H, W) shape (cast to this
        dtype) or a Tensor of the same shape and dtype (any device or layout). The buffer
        keeps its address, which is what a captured ``hal.Graph`` replays on.
        """
        backend = self.device.backend
        if isinstance(source, Tensor):
            if source.shape != self.shape:
                raise bad_arg("source", f"shape {self.shape}", source.shape)
            if source.dtype != self.dtype:
                raise bad_arg("source", f"dtype {self.dtype.name}", source.dtype.name)
            if source.device == self.device and source.layout == self.layout:
                if self.nbytes:
                    backend.copy(source.buffer, self.buffer, self.nbytes)
                return self
            source = source.numpy()
        array = np.asarray(source)
        if array.shape != self.shape:
            raise bad_arg("source", f"an array of shape {self.shape}", array.shape)
        host = array.astype(self.dtype, copy=False)
        if self.layout == "NHWC" and host.ndim == 4:
            host = host.transpose(0, 2, 3, 1)
        if self.nbytes:
            staged = backend.upload(np.ascontiguousarray(host))
            backend.copy(staged, self.buffer, self.nbytes)
        return self

    def contiguous_layout(self, layout: Layout) -> Tensor:
        """This tensor in ``layout`` on the same device."""
        return self.to(self.device, layout=layout)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """Zero-copy view for PyTorch, CuPy and Numba (CUDA tensors only)."""
        backend = self.device.backend
        if self.device.kind != "cuda" or not hasattr(backend, "pointer"):
            raise AttributeError("__cuda_array_interface__ is only defined on CUDA tensors")
        if is_bfloat16(self.dtype):  # the interface has no type string for it (numpy has no bfloat16)
            raise AttributeError("__cuda_array_interface__: bfloat16 has no type string there; use DLPack "
                                 "(torch.from_dlpack(t), no copy) or .numpy() (an ml_dtypes.bfloat16 array)")
        item = self.dtype.itemsize
        strides = None
        if self.layout == "NHWC":
            _, c, h, w = self.shape
            strides = (h * w * c * item, item, w * c * item, c * item)
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (backend.pointer(self.buffer), False),
            "strides": strides,
            "version": 3,
        }

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: bool | None = None) -> Any:
        """A DLPack capsule viewing this tensor without a copy (CPU and CUDA tensors, every dtype,
        bfloat16 included): ``torch.from_dlpack(t)``, ``numpy.from_dlpack(t)``. See hal.dlpack."""
        from hal.dlpack import to_dlpack

        return to_dlpack(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        """(DLPack device type, device id): (1, 0) on the CPU, (2, ordinal) on CUDA."""
        from hal.dlpack import dlpack_device

        return dlpack_device(self)

    def __repr__(self) -> str:
        quant = f", scale={self.scale}, zero_point={self.zero_point}" if self.scale is not None else ""
        return (
            f"hal.Tensor(shape={self.shape}, dtype={self.dtype.name}, layout={self.layout}, "
            f"device='{self.device.id}'{quant})"
        )

    def __len__(self) -> int:
        return self.shape[0] if self.shape else 0


_poison: contextvars.ContextVar[bool] = contextvars.ContextVar("hal_poison_outputs", default=False)

@contextmanager
def poison_outputs(enabled: bool = True) -> Iterator[None]:
    """Fill every op output with NaN (floats) or the dtype's minimum (ints) before the kernel runs.

    Tests and ``hal conformance`` use it so an element a kernel never writes shows up.
    """
    token = _poison.set(enabled)
    try:
        yield
    finally:
        _poison.reset(token)


def _output(buffer: Buffer, shape: tuple[int, ...], dtype: np.dtype, layout: Layout, device: Device) -> Tensor:
    """A Tensor from arguments already in canonical form (a tuple of ints, an np.dtype):
    ``Tensor.__init__`` without its keyword handling and conversions (every op's output)."""
    t = object.__new__(Tensor)
    t.buffer, t.shape, t.dtype, t.layout, t.device = buffer, shape, dtype, layout, device
    t.scale = t.zero_point = t._owner = None
    return t


def empty(shape: tuple[int, ...], dtype: Any, device: Device, layout: Layout = "NCHW") -> Tensor:
    """An uninitialised tensor (ops allocate their outputs with this); poisoned under ``poison_outputs``."""
    dt = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
    shape = tuple(map(int, shape))
    count = math.prod(shape)
    if _poison.get() and count:
        fill = np.nan if is_float(dt) else np.iinfo(dt).min
        host = np.full(physical_shape(shape, layout), fill, dtype=dt)
        return _output(device.backend.upload(host), shape, dt, layout, device)
    return _output(device.backend.allocate(max(count * dt.itemsize, 1)), shape, dt, layout, device)


def strides_layout(shape: tuple[int, ...], strides: tuple[int, ...], prefer: Layout = "NCHW") -> Layout | None:
    """The layout whose memory order element ``strides`` describe: NCHW where C-contiguous, NHWC where
    channels-last 4-D (``prefer`` first where both fit: dimensions of size 1 may have any stride), else None."""
    dense = tuple(int(np.prod(shape[i + 1 :], dtype=np.int64)) for i in range(len(shape)))
    orders: dict[Layout, tuple[int, ...]] = {"NCHW": dense}
    if len(shape) == 4:
        _, c, h, w = shape
        orders["NHWC"] = (h * w * c, 1, w * c, c)
    for name in sorted(orders, key=lambda n: n != prefer):
        if all(a == b or n == 1 for a, b, n in zip(strides, orders[name], shape, strict=True)):
            return name
    return None


def _from_cuda_interface(
    data: Any, dev: Device, dtype: Any, layout: Layout, words_are: np.dtype | None = None
) -> Tensor | None:
    """Zero-copy import of a C-contiguous (or channels-last 4-D) CUDA array.

    ``words_are`` reads the array's elements as another dtype of the same size (bfloat16 words
    that PyTorch can only export as int16); hal's dtype check applies to that dtype, not the export's.
    """
    iface = data.__cuda_array_interface__
    backend = dev.backend
    if not hasattr(backend, "wrap"):
        return None
    shape = tuple(int(s) for s in iface["shape"])
    src_dtype = np.dtype(iface["typestr"])
    if words_are is not None:
        if words_are.itemsize != src_dtype.itemsize:
            return None
        src_dtype = words_are
    if dtype is not None and as_dtype(dtype) != src_dtype:
        return None
    item = src_dtype.itemsize
    strides = iface.get("strides")
    if strides is None:
        found_layout: Layout | None = "NCHW"
    elif any(int(s) % item for s in strides):
        return None
    else:
        found_layout = strides_layout(shape, tuple(int(s) // item for s in strides), layout)
    if found_layout is None or (len(shape) == 4 and found_layout != layout and strides is not None):
        return None
    nbytes = max(math.prod(shape) * item, 1)
    buffer = backend.wrap(int(iface["data"][0]), nbytes, data)
    return Tensor(buffer, shape, as_dtype(src_dtype), found_layout, dev, owner=data)


def _dlpack_on(data: Any) -> tuple[int, int] | None:
    """(DLPack device type, ordinal) of an object that exports through DLPack alone (no array
    interface, not a NumPy array), else None."""
    if isinstance(data, np.ndarray) or hasattr(data, "__cuda_array_interface__") or not hasattr(data, "__dlpack__"):
        return None
    try:
        kind, ordinal = data.__dlpack_device__()
    except Exception:  # a producer without a usable device answer: not a DLPack import
        return None
    return int(kind), int(ordinal)


def _torch_int16(tensor: Any) -> Any:
    """torch.int16, from the module that made ``tensor`` (hal does not import PyTorch itself)."""
    import sys

    return sys.modules[type(tensor).__module__.split(".")[0]].int16


def asarray(
    data: Any,
    device: str | Device | None = None,
    dtype: Any = None,
    layout: Layout | None = None,
    *,
    scale: Any = None,
    zero_point: Any = None,
) -> Tensor:
    """``data`` as a Tensor on ``device`` (no copy when it already is one there).

    ``data`` is logical NCHW (for 4-D); ``layout`` chooses the memory order on the
    device ("NCHW" for host data when not given; a Tensor keeps its own). float64
    input becomes float32 unless ``dtype`` says otherwise. Objects with
    ``__cuda_array_interface__`` are imported without a copy on CUDA devices.
    """
    if isinstance(data, Tensor):
        if device is None and dtype is None and (layout is None or data.ndim != 4 or layout == data.layout):
            return data
        return data.to(device, layout=layout if data.ndim == 4 else None, dtype=dtype)
    layout = layout_arg(layout if layout is not None else "NCHW")
    dev = resolve_device(device)
    if str(getattr(data, "dtype", "")) == "torch.bfloat16":
        # PyTorch exports bfloat16 neither to numpy nor through __cuda_array_interface__: its 16-bit
        # words come as an int16 view, without a copy where the tensor is already on this CUDA device,
        # else through the host, and are bfloat16 again here
        bf16 = as_dtype("bfloat16", "data")  # without ml_dtypes: a TypeError that says to install it
        if dev.kind == "cuda" and getattr(data, "is_cuda", False) and (dtype is None or as_dtype(dtype) == bf16):
            imported = _from_cuda_interface(data.detach().view(_torch_int16(data)), dev, None, layout, bf16)
            if imported is not None:
                return imported
        data = data.detach().cpu().view(_torch_int16(data)).numpy().view(bf16)
    if dev.kind == "cuda" and hasattr(data, "__cuda_array_interface__"):
        imported = _from_cuda_interface(data, dev, dtype, layout)
        if imported is not None:
            return imported
    if dev.kind == "cuda" and scale is None and zero_point is None and _dlpack_on(data) == (2, dev.info.index):
        # no array interface but DLPack on this GPU (JAX, bfloat16 anywhere): the memory without a copy where
        # its strides are a layout's, else (from_dlpack refuses) through the host below
        from hal.dlpack import from_dlpack

        try:
            imported = from_dlpack(data, device=dev, layout=layout)
        except HalValueError:
            pass
        else:
            return imported if dtype is None else imported.to(dtype=dtype)
    if hasattr(data, "__cuda_array_interface__") and not isinstance(data, np.ndarray):
        if hasattr(data, "get"):  # CuPy
            data = data.get()
        elif hasattr(data, "cpu"):  # PyTorch
            data = data.cpu().numpy()
    array = np.asarray(data)
    if dtype is None:
        if array.dtype == np.float64:
            target = np.dtype(np.float32)
        elif array.dtype == np.bool_:
            raise HalTypeError("data: boolean arrays are not supported")
        else:
            target = as_dtype(array.dtype, "data")
    else:
        target = as_dtype(dtype)
    if array.ndim != 4 and layout != "NCHW":
        raise HalValueError(f"layout: 'NHWC' needs a 4-D array, got shape {array.shape}")
    if array.size > MAX_ELEMENTS:
        raise HalValueError(f"data: at most {MAX_ELEMENTS} elements are supported, got {array.size}")
    if scale is not None or zero_point is not None:
        from hal.quant import qparams

        if scale is None:
            raise HalValueError("scale: required with zero_point for quantized data")
        per_channel = np.size(scale) > 1 or np.size(zero_point) > 1
        q = qparams(scale, zero_point, target, channels=array.shape[0] if per_channel and array.ndim else None)
        scale = q.scale[0] if not q.per_channel else np.asarray(q.scale)
        zero_point = q.zero_point[0] if not q.per_channel else np.asarray(q.zero_point)
    host = array.astype(target, copy=False)
    if layout == "NHWC":
        host = host.transpose(0, 2, 3, 1)
    host = np.ascontiguousarray(host)
    if host.size:
        buffer = dev.backend.upload(host)
    else:
        buffer = dev.backend.allocate(1)
    return Tensor(buffer, array.shape, target, layout, dev, scale=scale, zero_point=zero_point)
