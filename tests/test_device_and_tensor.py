"""Device strings, selection order, and Tensor round trips."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from hal.device import is_gpu
from hal.errors import DeviceNotFound


def test_device_strings_resolve(device):
    assert hal.device(device.id) == device
    assert hal.device(device) is device
    assert hal.device(device.kind) in hal.devices()


def test_unknown_devices_list_what_is_available():
    with pytest.raises(DeviceNotFound, match="available"):
        hal.device("tpu:0")
    for status in hal.backend_status():
        if status.available:
            with pytest.raises(DeviceNotFound, match="available"):
                hal.device(f"{status.name}:{len(status.devices) + 3}")
            with pytest.raises(DeviceNotFound, match="available"):
                hal.device(f"{status.name}:no-such-device-name")
        elif status.name != "cpu":
            with pytest.raises(hal.BackendUnavailable):
                hal.device(status.name)


def test_selection_order(monkeypatch):
    found = hal.devices()
    if not found:
        pytest.skip("no device")
    last = found[-1]
    monkeypatch.setenv("HAL_DEVICE", last.id)
    assert hal.device() == last
    with hal.use_device(found[0]):
        assert hal.device() == found[0]
        assert hal.device(last.id) == last  # explicit wins
        x = hal.max_pool2d(np.ones((1, 1, 4, 4), np.float32) + np.arange(16, dtype=np.float32).reshape(4, 4), 2)
        assert x.device == found[0]
    assert hal.device() == last
    monkeypatch.delenv("HAL_DEVICE")
    first = hal.device()
    kinds = {d.kind for d in found}
    gpu_opencl = any(d.kind == "opencl" and is_gpu(d) for d in found)
    expected = "cuda" if "cuda" in kinds else ("opencl" if gpu_opencl else "cpu")
    assert first.kind == expected  # cuda, then an OpenCL GPU, then the cpu (PoCL is no GPU)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "uint8", "int32", "int64"])
def test_round_trip(device, dtype, layout):
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((2, 3, 5, 7)) * 50).astype(dtype)
    t = hal.asarray(data, device=device, layout=layout)
    assert t.shape == (2, 3, 5, 7) and t.layout == layout and t.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(t.numpy(), data)
    np.testing.assert_array_equal(np.asarray(t), data)
    other = t.to(layout="NHWC" if layout == "NCHW" else "NCHW")
    np.testing.assert_array_equal(other.numpy(), data)
    assert hal.asarray(t) is t


def test_float64_becomes_float32(device):
    t = hal.asarray(np.arange(6.0).reshape(1, 1, 2, 3), device=device)
    assert t.dtype == np.float32


def test_to_another_device():
    found = hal.devices()
    data = np.random.default_rng(1).standard_normal((1, 2, 3, 4)).astype(np.float32)
    for a in found:
        for b in found:
            np.testing.assert_array_equal(hal.asarray(data, device=a).to(b).numpy(), data)


def test_ops_return_tensors_in_input_layout(device):
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    with hal.use_device(device):
        y = hal.max_pool2d(x, 2)
    assert isinstance(y, hal.Tensor) and y.device == device and y.layout == "NCHW"
    y = hal.avg_pool2d(hal.asarray(x, device=device, layout="NHWC"), 2)
    assert y.layout == "NHWC"
    assert "hal.Tensor" in repr(y)
