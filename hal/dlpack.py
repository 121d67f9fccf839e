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


# ---------------------------------------------------------------------------------------------
# import: hal.from_dlpack
# ---------------------------------------------------------------------------------------------
#: DLDeviceType codes whose memory the host reads directly (CPU, CUDA host-pinned)
_HOST_READABLE = (KDL_CPU, 3)
_DEVICE_TYPE_NAMES = {1: "CPU", 2: "CUDA", 3: "CUDA host", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 10: "ROCm",
                      13: "CUDA managed", 14: "oneAPI"}
#: hal's dtypes by (DLPack type code, bits); float64 comes in as the host's float64 (hal.asarray makes it
#: float32 on a device), bfloat16 where ml_dtypes is installed
_NUMPY_TYPES = {(_KDL_FLOAT, 32): "float32", (_KDL_FLOAT, 16): "float16", (_KDL_FLOAT, 64): "float64",
                (_KDL_BFLOAT, 16): "bfloat16", (_KDL_INT, 8): "int8", (_KDL_UINT, 8): "uint8",
                (_KDL_INT, 32): "int32", (_KDL_INT, 64): "int64"}

# separate prototypes from the destructor's (which takes the capsule as an address): these take the object
_obj_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_obj_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_obj_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", ctypes.pythonapi))
#: the name a consumer gives the capsule it took (kept for the capsule's life, as _NAME)
_USED_NAME = ctypes.create_string_buffer(b"used_dltensor")


class _Imported:
    """A consumed DLManagedTensor: calls the producer's deleter once, when hal lets go of the memory."""

    def __init__(self, managed: Any) -> None:
        self._managed = managed

    def release(self) -> None:
        """Hand the memory back to its producer (idempotent)."""
        managed, self._managed = self._managed, None
        if managed is not None and managed.contents.deleter:
            managed.contents.deleter(managed)

    def __del__(self) -> None:
        self.release()


def _consume(capsule: Any) -> tuple[_Imported, _DLTensor]:
    """Take a ``dltensor`` capsule: from here the caller's _Imported owns the memory."""
    if not _obj_is_valid(capsule, _NAME):
        from hal.errors import HalTypeError

        raise HalTypeError("data: __dlpack__ gave no unused 'dltensor' capsule (hal reads the unversioned one, "
                           "once)")
    managed = ctypes.cast(_obj_pointer(capsule, _NAME), ctypes.POINTER(_DLManagedTensor))
    owner = _Imported(managed)
    _obj_set_name(capsule, _USED_NAME)  # the producer's capsule destructor leaves it to us now
    return owner, managed.contents.dl_tensor


def from_dlpack(data: Any, device: Any = None, layout: Any = None) -> Tensor:
    """A hal Tensor of any object with ``__dlpack__`` (PyTorch, JAX, CuPy, NumPy, hal itself).

    A CUDA tensor on the hal CUDA device of the same ordinal comes in without a copy when it is
    C-contiguous (NCHW) or channels-last 4-D (NHWC), every hal dtype included (bfloat16, which
    ``__cuda_array_interface__`` cannot name); hal then holds the producer's memory until the Tensor
    is gone, and passes its own stream, so the producer orders its pending work before hal's.
    Host memory (CPU, CUDA host-pinned) of any strides is copied onto ``device`` (default: the
    selected device; float64 becomes float32 there, as in ``hal.asarray``). ``layout`` chooses the
    memory order on the device (default: the source's for CUDA, NCHW for host data); a CUDA tensor
    asked for the other layout is copied.
    """
    from hal.device import device as resolve_device
    from hal.dtypes import as_dtype
    from hal.errors import HalTypeError, HalValueError
    from hal.spec import layout_arg
    from hal.tensor import Tensor, asarray, strides_layout

    if not hasattr(data, "__dlpack__"):
        raise HalTypeError(f"data: expected an object with __dlpack__ (a PyTorch, JAX, CuPy or NumPy array), got "
                           f"{type(data).__name__}")
    dev_type, dev_id = (int(v) for v in data.__dlpack_device__()) if hasattr(data, "__dlpack_device__") \
        else (KDL_CPU, 0)
    want_layout = layout_arg(layout) if layout is not None else None
    if dev_type == KDL_CUDA:
        target = resolve_device(device if device is not None else f"cuda:{dev_id}")
        if target.kind != "cuda" or int(target.info.index) != dev_id or not hasattr(target.backend, "wrap"):
            raise HalValueError(f"device: a DLPack tensor on CUDA device {dev_id} comes in on cuda:{dev_id} only "
                                f"(without a copy), got {target.id}")
        handle = int(getattr(getattr(target.backend, "stream", None), "handle", 0) or 0)
        owner, dl = _consume(data.__dlpack__(stream=handle or 1))  # 1: the legacy default stream
    elif dev_type in _HOST_READABLE:
        target = resolve_device(device)
        owner, dl = _consume(data.__dlpack__())
    else:
        name = _DEVICE_TYPE_NAMES.get(dev_type, f"type {dev_type}")
        raise HalValueError(f"data: DLPack tensors on {name} devices cannot come into hal (CPU, CUDA host and "
                            "CUDA memory can)")
    try:
        code, bits, lanes = int(dl.dtype.code), int(dl.dtype.bits), int(dl.dtype.lanes)
        type_name = _NUMPY_TYPES.get((code, bits)) if lanes == 1 else None
        if type_name is None:
            raise HalTypeError(f"data: DLPack dtype (code {code}, {bits} bits, {lanes} lanes) is none of hal's "
                               "(float32, float16, bfloat16, int8, uint8, int32, int64; float64 from the host)")
        dtype = as_dtype(type_name, "data") if type_name != "float64" else np.dtype(np.float64)
        ndim = int(dl.ndim)
        shape = tuple(int(dl.shape[i]) for i in range(ndim))
        count = int(np.prod(shape, dtype=np.int64))
        dense = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(ndim))
        strides = tuple(int(dl.strides[i]) for i in range(ndim)) if dl.strides else dense  # NULL: C-contiguous
        if count and not dl.data:
            raise HalValueError(f"data: a DLPack tensor of shape {shape} with no data pointer")
        address = int(dl.data or 0) + int(dl.byte_offset)
        if dev_type == KDL_CUDA:
            found = strides_layout(shape, strides, want_layout or "NCHW")
            if dtype == np.float64 or found is None:
                why = "float64 (hal has no float64 kernels)" if found else f"element strides {strides}"
                raise HalValueError(f"data: a CUDA tensor comes in C-contiguous or channels-last 4-D, as one of "
                                    f"hal's dtypes, got {why}: make it contiguous (or float32) first")
            if count == 0:
                owner.release()
                return asarray(np.empty(shape, dtype), device=target, layout=want_layout)
            cuda_backend: Any = target.backend  # the CUDA backend (its wrap checked above)
            buffer = cuda_backend.wrap(address, count * dtype.itemsize, owner)
            tensor = Tensor(buffer, shape, dtype, found if ndim == 4 else "NCHW", target, owner=owner)
            if want_layout is not None and ndim == 4 and want_layout != found:
                return tensor.to(layout=want_layout)
            return tensor
        if any(s < 0 for s in strides):
            raise HalValueError(f"data: negative element strides {strides} (make it contiguous first)")
        span = 1 + sum((n - 1) * s for n, s in zip(shape, strides, strict=True)) if count else 0
        raw: Any = (ctypes.c_char * (span * dtype.itemsize)).from_address(address) if span else b""
        host = np.array(np.ndarray(shape, dtype, buffer=raw, strides=tuple(s * dtype.itemsize for s in strides))
                        if span else np.empty(shape, dtype), copy=True)
    except BaseException:
        owner.release()
        raise
    owner.release()  # host data: copied, the producer's memory is no longer read
    return asarray(host, device=target, layout=want_layout)
