"""DLPack export (``torch.from_dlpack(t)``, ``numpy.from_dlpack(t)``) and PyTorch bfloat16 imports.

CPU and CUDA tensors export a view of their memory, every dtype (bfloat16, which
``__cuda_array_interface__`` cannot name, included), NHWC as channels-last strides; OpenCL
tensors refuse with BufferError. On CUDA these tests run where a GPU is (``-m cuda``); CI runs
them on the CPU backend and checks the OpenCL refusal on PoCL.
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

import hal
from hal.dlpack import KDL_CPU, KDL_CUDA, live_exports
from hal.dtypes import BFLOAT16

DTYPES = ["float32", "float16", "int8", "uint8", *(["bfloat16"] if BFLOAT16 is not None else [])]


def _exporting(device: hal.Device) -> bool:
    return device.kind in ("cpu", "cuda")


def _values(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng()
    if dtype in ("int8", "uint8"):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max + 1, shape).astype(dtype)
    return (rng.standard_normal(shape) * 10).astype(np.float32)


def _torch_words(torch: Any, tt: Any) -> np.ndarray:
    """A PyTorch tensor's elements as a host array, bfloat16 as ml_dtypes' bfloat16."""
    host = tt.detach().cpu().contiguous()
    if host.dtype == torch.bfloat16:
        return host.view(torch.int16).numpy().view(BFLOAT16)
    return host.numpy()


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_reads_the_tensor_without_a_copy(device, dtype, layout):
    torch = pytest.importorskip("torch")
    shape = (2, 3, 5, 7)  # odd sizes: a wrong stride shows
    t = hal.asarray(_values(dtype, shape), device=device, dtype=dtype, layout=layout)
    if not _exporting(device):
        with pytest.raises(BufferError, match="no address a consumer can read"):
            torch.from_dlpack(t)
        return
    want = t.numpy()
    tt = torch.from_dlpack(t)
    assert tuple(tt.shape) == shape
    assert str(tt.dtype) == f"torch.{dtype}"
    assert tt.is_contiguous(memory_format=torch.channels_last if layout == "NHWC" else torch.contiguous_format)
    assert tt.device.type == device.kind
    got = _torch_words(torch, tt)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))  # bit for bit
    tt.fill_(7)  # a view: what PyTorch writes, hal reads
    assert np.all(t.numpy().astype(np.float64) == 7)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "uint8"])
def test_numpy_reads_a_cpu_tensor_without_a_copy(device, dtype):
    if device.kind != "cpu":
        pytest.skip("numpy.from_dlpack reads host memory: the CPU backend's tensors")
    t = hal.asarray(_values(dtype, (2, 3, 4, 5)), device=device, dtype=dtype, layout="NHWC")
    a = np.from_dlpack(t)
    np.testing.assert_array_equal(a, t.numpy())
    assert a.strides == tuple(s * a.itemsize for s in (60, 1, 15, 3))
    assert a.ctypes.data == device.backend.pointer(t.buffer)  # the same memory (numpy marks it read-only)


def test_the_export_keeps_the_memory_alive(device):
    torch = pytest.importorskip("torch")
    if not _exporting(device):
        pytest.skip(f"{device.kind} tensors do not export")
    gc.collect()  # exports of earlier tests that are garbage now
    before = live_exports()
    x = _values("float32", (4, 8, 16, 16))
    t = hal.asarray(x, device=device)
    tt = torch.from_dlpack(t)
    assert live_exports() == before + 1
    del t
    gc.collect()
    others = [hal.asarray(np.full(x.shape, -1.0, np.float32), device=device) for _ in range(4)]  # reuse bait
    np.testing.assert_array_equal(_torch_words(torch, tt), x)
    del tt, others
    gc.collect()
    assert live_exports() == before  # released when PyTorch let go


def test_an_unconsumed_capsule_releases_its_tensor(device):
    if not _exporting(device):
        pytest.skip(f"{device.kind} tensors do not export")
    gc.collect()  # exports of earlier tests that are garbage now
    before = live_exports()
    capsule = hal.asarray(np.ones((2, 2), np.float32), device=device).__dlpack__()
    assert live_exports() == before + 1
    del capsule
    gc.collect()
    assert live_exports() == before


def test_dlpack_arguments_are_checked(device):
    t = hal.asarray(np.ones((1, 2, 3, 4), np.float32), device=device)
    if not _exporting(device):
        with pytest.raises(BufferError, match=device.id):
            t.__dlpack_device__()
        return
    kind = KDL_CPU if device.kind == "cpu" else KDL_CUDA
    assert t.__dlpack_device__() == (kind, 0 if device.kind == "cpu" else device.info.index)
    with pytest.raises(BufferError, match="copy=True"):
        t.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="not"):
        t.__dlpack__(dl_device=(kind + 5, 0))
    with pytest.raises(TypeError, match="stream"):
        t.__dlpack__(stream="default")
    assert live_exports() >= 0


def test_a_quantized_tensor_exports_its_integers(device):
    torch = pytest.importorskip("torch")
    if not _exporting(device):
        pytest.skip(f"{device.kind} tensors do not export")
    x = np.random.default_rng().standard_normal((1, 3, 4, 4)).astype(np.float32)
    q = hal.quantize(hal.asarray(x, device=device), 0.05, 3, dtype="int8")
    np.testing.assert_array_equal(_torch_words(torch, torch.from_dlpack(q)), q.numpy())


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_torch_bfloat16_on_the_same_gpu_comes_in_without_a_copy(device, layout):
    torch = pytest.importorskip("torch")
    if BFLOAT16 is None:
        pytest.skip("bfloat16 needs ml_dtypes")
    if device.kind != "cuda":
        pytest.skip("a CUDA device and PyTorch on it (CPU and OpenCL devices take torch's bfloat16 through the host)")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no GPU")
    src = torch.randn(2, 6, 9, 11, device=f"cuda:{device.info.index}", dtype=torch.bfloat16)
    if layout == "NHWC":
        src = src.contiguous(memory_format=torch.channels_last)
    t = hal.asarray(src, device=device, layout=layout)
    assert t.dtype == BFLOAT16 and t.layout == layout
    assert device.backend.pointer(t.buffer) == src.data_ptr()  # the same memory
    y = hal.max_pool2d(t, 3, 2, 1)
    want = torch.nn.functional.max_pool2d(src, 3, 2, 1)
    np.testing.assert_array_equal(_torch_words(torch, torch.from_dlpack(y)).view(np.uint16),
                                  _torch_words(torch, want).view(np.uint16))


# ---------------------------------------------------------------------------------------------------
# import: hal.from_dlpack
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_from_dlpack_takes_host_tensors_of_any_strides(device, dtype, layout):
    """Host memory (NumPy's, hal's CPU tensors', PyTorch's CPU tensors') is copied onto any device, bit for
    bit, strided views included; the producer gets its memory back at once."""
    values = _values(dtype, (2, 3, 5, 7))
    src = hal.asarray(values, device="cpu", dtype=dtype, layout=layout)  # hal's exporter: bfloat16 too
    t = hal.from_dlpack(src, device=device, layout=layout)
    assert (t.dtype, t.layout, t.shape, t.device) == (src.dtype, layout, (2, 3, 5, 7), device)
    np.testing.assert_array_equal(t.numpy().view(np.uint8), src.numpy().view(np.uint8))
    assert live_exports() == 0  # the import released the export after its copy
    if dtype != "bfloat16":  # NumPy's own exporter refuses ml_dtypes' types
        view = np.asarray(src.numpy())[:, ::2, :, 1::3]  # strides that no layout has
        t = hal.from_dlpack(view, device=device)
        np.testing.assert_array_equal(t.numpy().view(np.uint8), np.ascontiguousarray(view).view(np.uint8))
    torch = pytest.importorskip("torch")
    tt = torch.from_dlpack(src).clone()
    if layout == "NHWC":
        tt = tt.contiguous(memory_format=torch.channels_last)
    t = hal.from_dlpack(tt[:, :, 1:], device=device)
    np.testing.assert_array_equal(t.numpy().view(np.uint8), _torch_words(torch, tt[:, :, 1:]).view(np.uint8))


def test_from_dlpack_refuses_what_hal_cannot_hold():
    cpu = hal.device("cpu")
    with pytest.raises(hal.errors.HalTypeError, match="data: expected an object with __dlpack__"):
        hal.from_dlpack([1.0, 2.0], device=cpu)
    with pytest.raises(hal.errors.HalTypeError, match=r"data: DLPack dtype \(code 5, 64 bits"):
        hal.from_dlpack(np.zeros(3, np.complex64), device=cpu)
    src = hal.asarray(np.ones((1, 2, 3, 3), np.float32), device=cpu)

    class OnOpenCL:
        def __dlpack__(self, stream: Any = None) -> Any:
            raise AssertionError("not asked for: the device type refuses first")

        def __dlpack_device__(self) -> tuple[int, int]:
            return 4, 0

    with pytest.raises(hal.errors.HalValueError, match="on OpenCL devices cannot come into hal"):
        hal.from_dlpack(OnOpenCL(), device=cpu)
    capsule = src.__dlpack__()
    hal.from_dlpack(_Producer(capsule, KDL_CPU), device=cpu)
    with pytest.raises(hal.errors.HalTypeError, match="no unused 'dltensor' capsule"):  # a capsule is read once
        hal.from_dlpack(_Producer(capsule, KDL_CPU), device=cpu)
    del capsule
    gc.collect()
    assert live_exports() == 0


class _Producer:
    """An object that hands out a given capsule, claiming a DLPack device (a CUDA one without a GPU)."""

    def __init__(self, capsule: Any, device_type: int, device_id: int = 0) -> None:
        self.capsule, self.device = capsule, (device_type, device_id)
        self.streams: list[Any] = []

    def __dlpack__(self, stream: Any = None) -> Any:
        self.streams.append(stream)
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


def _as_cuda(capsule: Any) -> Any:
    """The capsule, its DLTensor's device type rewritten to CUDA (hal.dlpack's export writes CPU here)."""
    import ctypes

    from hal import dlpack

    managed = ctypes.cast(dlpack._obj_pointer(capsule, dlpack._NAME), ctypes.POINTER(dlpack._DLManagedTensor))
    managed.contents.dl_tensor.device.device_type = KDL_CUDA
    return capsule


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_from_dlpack_wraps_cuda_memory_without_a_copy(monkeypatch, layout):
    """Without a GPU: a CUDA DLPack tensor on the hal device of its ordinal is wrapped, not copied (the
    backend's wrap gets its address and size), in its own layout, with hal's stream passed to the producer;
    the producer's deleter runs once the Tensor is gone. Other strides, float64 or another ordinal refuse."""
    import sys
    from types import SimpleNamespace

    hal_device = sys.modules["hal.device"]  # (hal.device, the attribute, is the function)
    wrapped: list[tuple[int, int]] = []

    class Backend:
        stream = SimpleNamespace(handle=0x5EED)

        def wrap(self, pointer: int, nbytes: int, owner: object) -> tuple[int, int, object]:
            wrapped.append((pointer, nbytes))
            return (pointer, nbytes, owner)

    gpu = SimpleNamespace(kind="cuda", id="cuda:0", info=SimpleNamespace(index=0), backend=Backend())
    monkeypatch.setattr(hal_device, "device", lambda d=None: gpu if d in (None, "cuda:0", gpu) else hal.device(d))
    src = hal.asarray(np.arange(2 * 6 * 5 * 7, dtype=np.float32).reshape(2, 6, 5, 7), device="cpu", layout=layout)
    producer = _Producer(_as_cuda(src.__dlpack__()), KDL_CUDA)
    t = hal.from_dlpack(producer)
    assert producer.streams == [0x5EED]
    assert wrapped == [(src.device.backend.pointer(src.buffer), src.nbytes)]
    assert (t.layout, t.shape, t.dtype, t.device) == (layout, (2, 6, 5, 7), np.float32, gpu)
    assert live_exports() == 1  # hal holds the producer's memory ...
    del t, producer
    gc.collect()
    assert live_exports() == 0  # ... until the Tensor is gone
    # a strided CUDA view has no layout hal keeps: refused, and the memory handed back at once
    view = hal.asarray(np.zeros((2, 6, 5, 7), np.float32), device="cpu")
    capsule = _as_cuda(view.__dlpack__())
    import ctypes

    from hal import dlpack

    managed = ctypes.cast(dlpack._obj_pointer(capsule, dlpack._NAME), ctypes.POINTER(dlpack._DLManagedTensor))
    managed.contents.dl_tensor.strides[3] = 2
    with pytest.raises(hal.errors.HalValueError, match=r"C-contiguous or channels-last 4-D.*element strides"):
        hal.from_dlpack(_Producer(capsule, KDL_CUDA))
    assert live_exports() == 0
    with pytest.raises(hal.errors.HalValueError, match="comes in on cuda:1 only"):
        hal.from_dlpack(_Producer(None, KDL_CUDA, 1), device=gpu)


def test_asarray_takes_a_dlpack_only_cuda_array_without_a_copy(monkeypatch):
    """Without a GPU: hal.asarray on a CUDA device takes an object that exports through DLPack alone (JAX;
    bfloat16 from any library) through from_dlpack, without a copy; a strided one, which from_dlpack refuses,
    comes through the host instead (its __array__)."""
    import sys
    from types import SimpleNamespace

    wrapped: list[int] = []

    class Backend:
        stream = SimpleNamespace(handle=7)

        def wrap(self, pointer: int, nbytes: int, owner: object) -> tuple[int, int, object]:
            wrapped.append(pointer)
            return (pointer, nbytes, owner)

        def upload(self, array: np.ndarray) -> str:
            return "uploaded"

    src = hal.asarray(np.ones((1, 2, 3, 4), np.float32), device="cpu")
    gpu = SimpleNamespace(kind="cuda", id="cuda:0", info=SimpleNamespace(index=0), backend=Backend())
    monkeypatch.setattr(sys.modules["hal.device"], "device", lambda d=None: gpu)
    monkeypatch.setattr(sys.modules["hal.tensor"], "resolve_device", lambda d=None: gpu)

    class JaxLike(_Producer):
        def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
            return np.full((1, 2, 3, 4), 3.0, np.float32)

    t = hal.asarray(JaxLike(_as_cuda(src.__dlpack__()), KDL_CUDA), device=gpu)
    assert wrapped == [src.device.backend.pointer(src.buffer)] and t.buffer[0] == wrapped[0]
    assert (t.shape, t.layout, live_exports()) == ((1, 2, 3, 4), "NCHW", 1)
    del t
    gc.collect()
    assert live_exports() == 0
    import ctypes

    from hal import dlpack

    capsule = _as_cuda(src.__dlpack__())
    managed = ctypes.cast(dlpack._obj_pointer(capsule, dlpack._NAME), ctypes.POINTER(dlpack._DLManagedTensor))
    managed.contents.dl_tensor.strides[1] = 100  # no layout's strides (C is 2)
    t = hal.asarray(JaxLike(capsule, KDL_CUDA), device=gpu)
    assert t.buffer == "uploaded" and len(wrapped) == 1
    assert live_exports() == 0  # from_dlpack handed the refused capsule's memory back


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_from_dlpack_takes_torch_cuda_tensors_without_a_copy(device, dtype, layout):
    """On a GPU: PyTorch's CUDA tensors through DLPack, the same memory, in their layout; hal's op on them
    matches PyTorch's bit for bit (max pooling); a strided one is refused with the argument named."""
    torch = pytest.importorskip("torch")
    if dtype == "bfloat16" and BFLOAT16 is None:
        pytest.skip("bfloat16 needs ml_dtypes")
    if device.kind != "cuda":
        pytest.skip("a CUDA device and PyTorch on it (host tensors: test_from_dlpack_takes_host_tensors_...)")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no GPU")
    src = torch.randn(2, 6, 9, 11, device=f"cuda:{device.info.index}", dtype=getattr(torch, dtype))
    if layout == "NHWC":
        src = src.contiguous(memory_format=torch.channels_last)
    t = hal.from_dlpack(src, device=device)
    assert (str(t.dtype), t.layout, t.shape) == (dtype, layout, (2, 6, 9, 11))
    assert device.backend.pointer(t.buffer) == src.data_ptr()  # the same memory
    y = hal.max_pool2d(t, 3, 2, 1)
    want = torch.nn.functional.max_pool2d(src, 3, 2, 1)
    np.testing.assert_array_equal(_torch_words(torch, torch.from_dlpack(y)).view(np.uint8),
                                  _torch_words(torch, want).view(np.uint8))
    with pytest.raises(hal.errors.HalValueError, match="data: a CUDA tensor comes in C-contiguous"):
        hal.from_dlpack(src[:, :, ::2], device=device)


def test_strides_layout_names_the_memory_order():
    """The one check both CUDA imports (the array interface, DLPack) use: C-contiguous is NCHW,
    channels-last is NHWC, a dimension of size 1 may have any stride (the preferred layout wins where
    both fit), anything else is no layout."""
    from hal.tensor import strides_layout

    assert strides_layout((2, 3, 4, 5), (60, 20, 5, 1)) == "NCHW"
    assert strides_layout((2, 3, 4, 5), (60, 1, 15, 3)) == "NHWC"
    assert strides_layout((2, 3, 4, 5), (60, 1, 15, 3), "NHWC") == "NHWC"
    assert strides_layout((2, 3, 1, 1), (3, 1, 3, 3)) == "NCHW"  # both fit: NCHW asked first
    assert strides_layout((2, 3, 1, 1), (3, 1, 3, 3), "NHWC") == "NHWC"
    assert strides_layout((1, 3, 4, 5), (999, 20, 5, 1)) == "NCHW"
    assert strides_layout((2, 3, 4, 5), (60, 20, 10, 2)) is None  # every other column
    assert strides_layout((2, 3, 4, 5), (20, 60, 5, 1)) is None  # N and C swapped
    assert strides_layout((6, 7), (7, 1)) == "NCHW" and strides_layout((6, 7), (1, 6)) is None
