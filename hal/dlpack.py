"""DLPack export of hal tensors (``torch.from_dlpack(t)``, ``numpy.from_dlpack(t)``, CuPy, JAX).

``__cuda_array_interface__`` has no type string for bfloat16, and NumPy's own DLPack export
refuses ml_dtypes' types, so hal writes the DLPack structures itself (the unversioned
``dltensor`` capsule every consumer reads). A capsule views the tensor's memory without a copy
and keeps the tensor alive until the consumer lets go of it (its deleter) or, never consumed,
until the capsule is collected. CPU and CUDA tensors export; OpenCL buffers have no address a
consumer could read (``BufferError``, as the protocol asks).

Logical shape (N, C, H, W) with strides in elements, so an NHWC tensor arrives channels-last.
Quantized tensors export their stored integers (scale and zero point do not travel).
"""

from __future__ import annotations

import ctypes
import itertools
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from hal.dtypes import is_bfloat16

if TYPE_CHECKING:
    from hal.tensor import Tensor

#: DLDeviceType codes (dlpack.h)
KDL_CPU, KDL_CUDA = 1, 2
#: DLDataTypeCode codes (dlpack.h)
_KDL_INT, _KDL_UINT, _KDL_FLOAT, _KDL_BFLOAT = 0, 1, 2, 4


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

#: exports whose consumer has not let go yet, by their manager_ctx key (keeps tensor and structures alive)
_LIVE: dict[int, tuple[Any, ...]] = {}
_LIVE_LOCK = threading.Lock()
_KEYS = itertools.count(1)  # manager_ctx values (never 0: a null context)


def _release(managed: Any) -> None:
    """The DLManagedTensor's deleter: the consumer is done (or the capsule died unconsumed)."""
    key = int(managed.contents.manager_ctx or 0)
    with _LIVE_LOCK:
        _LIVE.pop(key, None)


_DELETER_FN = _DELETER(_release)

# the capsule API, called with the GIL held (pythonapi)
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]

#: the capsule keeps a pointer to its name, not a copy: this buffer lives as long as the module
_NAME = ctypes.create_string_buffer(b"dltensor")


def _capsule_died(capsule: int) -> None:
    """The capsule's destructor: still named "dltensor" means no consumer took it, so release here
    (a consumer renames it "used_dltensor" and calls the deleter itself when done)."""
    if _capsule_is_valid(capsule, _NAME):
        _release(ctypes.cast(_capsule_pointer(capsule, _NAME), ctypes.POINTER(_DLManagedTensor)))


_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_capsule_died)


def dlpack_dtype(dtype: np.dtype) -> tuple[int, int]:
    """(DLPack type code, bits) of a hal dtype."""
    if is_bfloat16(dtype):
        return _KDL_BFLOAT, 16
    code = {"f": _KDL_FLOAT, "i": _KDL_INT, "u": _KDL_UINT}.get(dtype.kind)
    if code is None:
        raise BufferError(f"DLPack: no type code for {dtype}")
    return code, dtype.itemsize * 8


def dlpack_device(tensor: Tensor) -> tuple[int, int]:
    """(device type, device id) of ``tensor`` in DLPack's codes: CPU (1, 0) or CUDA (2, ordinal)."""
    kind = tensor.device.kind
    if kind == "cpu":
        return KDL_CPU, 0
    if kind == "cuda":
        return KDL_CUDA, int(tensor.device.info.index)
    raise BufferError(f"DLPack: {tensor.device.id} tensors have no address a consumer can read (CPU and CUDA "
                      "tensors export); use .numpy() for a host copy")


def to_dlpack(tensor: Tensor, stream: Any = None, max_version: Any = None, dl_device: Any = None,
              copy: bool | None = None) -> Any:
    """A ``dltensor`` capsule viewing ``tensor`` (the ``__dlpack__`` protocol). hal's queue is
    synchronized first, so work queued before the export is finished whatever stream the consumer
    reads on (``stream`` is accepted and not needed); ``max_version`` is accepted and the
    unversioned capsule returned, which the protocol allows; ``copy=True`` and a ``dl_device`` other
    than the tensor's raise BufferError."""
    del max_version  # the unversioned capsule serves every version
    device = dlpack_device(tensor)
    if copy:
        raise BufferError("DLPack: hal exports views only (copy=True asked for a copy)")
    if dl_device is not None and tuple(dl_device) != device:
        raise BufferError(f"DLPack: the tensor is on {device}, not {tuple(dl_device)}")
    if stream is not None and not isinstance(stream, int):
        raise TypeError(f"stream: an int or None, got {type(stream).__name__}")
    backend = tensor.device.backend
    pointer = getattr(backend, "pointer", None)  # the CPU and CUDA backends' buffer addresses
    if pointer is None:
        raise BufferError(f"DLPack: the {tensor.device.kind} backend gives no buffer addresses")
    backend.synchronize()
    ndim = tensor.ndim
    shape = (ctypes.c_int64 * max(ndim, 1))(*tensor.shape)
    if tensor.layout == "NHWC" and ndim == 4:
        _, c, h, w = tensor.shape
        elem_strides: tuple[int, ...] = (h * w * c, 1, w * c, c)
    else:
        elem_strides = tuple(int(np.prod(tensor.shape[i + 1:], dtype=np.int64)) for i in range(ndim))
    strides = (ctypes.c_int64 * max(ndim, 1))(*elem_strides)
    code, bits = dlpack_dtype(tensor.dtype)
    managed = _DLManagedTensor()
    managed.dl_tensor.data = pointer(tensor.buffer) if tensor.nbytes else None
    managed.dl_tensor.device = _DLDevice(*device)
    managed.dl_tensor.ndim = ndim
    managed.dl_tensor.dtype = _DLDataType(code, bits, 1)
    managed.dl_tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    managed.dl_tensor.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    managed.dl_tensor.byte_offset = 0
    managed.deleter = _DELETER_FN
    key = next(_KEYS)
    managed.manager_ctx = key
    with _LIVE_LOCK:
        _LIVE[key] = (managed, shape, strides, tensor)
    return _capsule_new(ctypes.addressof(managed), _NAME, ctypes.cast(_CAPSULE_DESTRUCTOR, ctypes.c_void_p))


def live_exports() -> int:
    """How many exports a consumer still holds (tests check that every one is released)."""
    return len(_LIVE)
