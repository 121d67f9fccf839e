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
