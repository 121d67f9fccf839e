"""Bad input gets a clear error naming the argument; inputs are never modified."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from hal.errors import HalError

X = np.random.default_rng(0).standard_normal((2, 4, 9, 9)).astype(np.float32)
W = np.random.default_rng(1).standard_normal((6, 4, 3, 3)).astype(np.float32)


@pytest.mark.parametrize(
    "call,arg",
    [
        (lambda d: hal.max_pool2d(hal.asarray(X, device=d), 3, stride=-1), "stride"),
        (lambda d: hal.max_pool2d(hal.asarray(X, device=d), 0), "kernel_size"),
        (lambda d: hal.max_pool2d(hal.asarray(X, device=d), 12), "kernel_size"),
        (lambda d: hal.max_pool2d(hal.asarray(X, device=d), 2, padding=-1), "padding"),
        (lambda d: hal.max_pool2d(hal.asarray(X, device=d), 2, padding=(1, 2, 3)), "padding"),
        (lambda d: hal.max_pool2d(hal.asarray(X, device=d), 2, padding="full"), "padding"),
        (lambda d: hal.max_pool2d(hal.asarray(X, device=d), 2, padding=5), "padding"),
        (lambda d: hal.max_pool2d(hal.asarray(X, device=d), 3, dilation=0), "dilation"),
        (lambda d: hal.max_pool2d(hal.asarray(X[0, 0], device=d), 2), "input"),
        (lambda d: hal.avg_pool2d(hal.asarray(X, device=d), 2, divisor_override=0), "divisor_override"),
        (lambda d: hal.avg_pool2d(hal.asarray(X, device=d), 2, divisor_override=2**31), "divisor_override"),
        (lambda d: hal.adaptive_avg_pool2d(hal.asarray(X, device=d), 0), "output_size"),
        (lambda d: hal.adaptive_max_pool2d(hal.asarray(X, device=d), (2, 2, 2)), "output_size"),
        (lambda d: hal.conv2d(hal.asarray(X, device=d), W[:, :3]), "weight"),
        (lambda d: hal.conv2d(hal.asarray(X, device=d), W, groups=3), "groups"),
        (lambda d: hal.conv2d(hal.asarray(X, device=d), W[:5, :2], groups=2), "groups"),
        (lambda d: hal.conv2d(hal.asarray(X, device=d), W, bias=np.zeros(5, np.float32)), "bias"),
        (lambda d: hal.conv2d(hal.asarray(X, device=d), W[0]), "weight"),
        (lambda d: hal.conv2d(hal.asarray(X, device=d), np.ones((6, 4, 13, 3), np.float32)), "weight"),
        (lambda d: hal.conv2d(hal.asarray(X, device=d), W, stride=0), "stride"),
        (lambda d: hal.conv2d(hal.asarray(X, device=d), hal.asarray(W.astype(np.float16), device=d)), "weight"),
        (lambda d: hal.batch_norm(hal.asarray(X, device=d), np.zeros(3, np.float32), np.ones(4, np.float32)),
         "running_mean"),
        (lambda d: hal.batch_norm(hal.asarray(X, device=d), None, None), "running_mean"),
        (lambda d: hal.batch_norm(hal.asarray(X, device=d), np.zeros(4, np.float32), None, training=True),
         "running_mean"),
        (lambda d: hal.batch_norm(hal.asarray(X, device=d), None, None, training=True, momentum=2.0), "momentum"),
        (lambda d: hal.batch_norm(hal.asarray(X, device=d), None, None, training=True, eps=0.0), "eps"),
        (lambda d: hal.batch_norm(hal.asarray(X[:1, :, :1, :1], device=d), None, None, training=True), "input"),
        (lambda d: hal.batch_norm(hal.asarray(X, device=d), np.zeros(4, np.float32), np.ones(4, np.float32),
                                  weight=np.ones(3, np.float32)), "weight"),
        (lambda d: hal.max_pool2d(hal.asarray(X.astype(np.int32), device=d), 2), "input"),
        # past 32 bits (session 25: numpy's MemoryError, OpenCL's OverflowError)
        (lambda d: hal.max_pool2d(hal.asarray(X, device=d), 2, padding=2**31), "padding"),
        (lambda d: hal.max_pool2d(hal.asarray(X, device=d), 2, stride=2**31), "stride"),
        (lambda d: hal.conv2d(hal.asarray(X, device=d), W, stride=(1, 2**31)), "stride"),
        (lambda d: hal.conv2d(hal.asarray(X, device=d), W, dilation=2**31), "dilation"),
        (lambda d: hal.max_pool2d(hal.asarray(X, device=d), 2, relu=np.array([1, 0])), "relu"),
    ],
)
def test_bad_argument_names_itself(device, call, arg):
    with pytest.raises((ValueError, TypeError)) as info:
        call(device)
    assert isinstance(info.value, HalError)
    assert str(info.value).startswith(arg), str(info.value)


def test_bad_dtype_and_layout_names():
    with pytest.raises(TypeError, match="dtype"):
        hal.asarray(X, device="cpu", dtype="complex64")
    with pytest.raises(ValueError, match="layout"):
        hal.asarray(X, device="cpu", layout="CHWN")
    with pytest.raises(ValueError, match="layout"):
        hal.asarray(X[0], device="cpu", layout="NHWC")


def test_inputs_are_not_modified(device):
    x = X.copy()
    w = W.copy()
    b = np.ones(6, np.float32)
    rm, rv = np.zeros(4, np.float32), np.ones(4, np.float32)
    hal.max_pool2d(x, 3, padding=1)
    hal.avg_pool2d(x, 3, padding=1)
    hal.conv2d(x, w, b, padding=1)
    with hal.use_device(device):
        hal.max_pool2d(x, 3, padding=1)
        hal.conv2d(x, w, b, padding=1)
        hal.batch_norm(x, rm, rv, training=False)
    np.testing.assert_array_equal(x, X)
    np.testing.assert_array_equal(w, W)
    np.testing.assert_array_equal(b, np.ones(6, np.float32))
    np.testing.assert_array_equal(rm, np.zeros(4, np.float32))
    np.testing.assert_array_equal(rv, np.ones(4, np.float32))


def test_tensors_on_different_devices_are_refused():
    devs = hal.devices()
    if len(devs) < 2:
        pytest.skip("needs two devices")
    a = hal.asarray(X, device=devs[0])
    w = hal.asarray(W, device=devs[1])
    with pytest.raises(ValueError, match="weight: expected a tensor on"):
        hal.conv2d(a, w)


def test_read_only_running_stats_in_training(device):
    rm, rv = np.zeros(4, np.float32), np.ones(4, np.float32)
    rm.flags.writeable = False
    with pytest.raises(ValueError, match="running_mean"):
        hal.batch_norm(hal.asarray(X, device=device), rm, rv, training=True)
