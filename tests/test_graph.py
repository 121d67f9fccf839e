"""hal.capture: a recorded pipeline replays the same kernels on the same buffers."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from hal import reference
from hal.conformance import compare


def _pipeline(x: hal.Tensor, w: hal.Tensor, mean: hal.Tensor, var: hal.Tensor) -> hal.Tensor:
    y = hal.conv2d(x, w, None, padding=1, relu=True)
    y = hal.batch_norm(y, mean, var)
    return hal.max_pool2d(y, 3, 2, 1)


def _oracle(x: np.ndarray, w: np.ndarray, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    y = reference.relu(reference.conv2d(x.astype(np.float64), w.astype(np.float64), None, padding=1))
    y = reference.batch_norm(y, mean.astype(np.float64), var.astype(np.float64))
    return reference.max_pool2d(y, 3, 2, 1)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_replay_follows_new_input(device, layout):
    rng = np.random.default_rng(5)
    shape = (2, 6, 13, 11)
    w_host = (rng.standard_normal((6, 6, 3, 3)) * 0.3).astype(np.float32)
    mean_host = rng.standard_normal(6).astype(np.float32)
    var_host = rng.uniform(0.5, 2.0, 6).astype(np.float32)
    w = hal.asarray(w_host, device=device)
    mean, var = hal.asarray(mean_host, device=device), hal.asarray(var_host, device=device)
    x_host = rng.standard_normal(shape).astype(np.float32)
    x = hal.asarray(x_host, device=device, layout=layout)
    with hal.capture() as graph:
        y = _pipeline(x, w, mean, var)
    assert len(graph) == 3
    if device.kind == "cuda":
        assert graph.mode == "device graph", graph
    first = y.numpy()
    want = _oracle(x_host, w_host, mean_host, var_host)
    r = compare("conv2d", "float32", first, want, np.abs(want).max() + 1.0)  # conv-accumulated rounding
    assert r.ok, r.detail
    for seed in (6, 7):  # new data in the same input buffer: the replay sees it
        x_next = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        x.copy_(x_next)
        graph.replay()
        want = _oracle(x_next, w_host, mean_host, var_host)
        r = compare("conv2d", "float32", y.numpy(), want, np.abs(want).max() + 1.0)
        assert r.ok, r.detail
        assert not np.allclose(y.numpy(), first)


def test_copy_rejects_a_wrong_shape(device):
    x = hal.asarray(np.ones((1, 2, 3, 4), np.float32), device=device)
    with pytest.raises(ValueError, match="source"):
        x.copy_(np.ones((1, 2, 3, 5), np.float32))
    with pytest.raises(ValueError, match="source"):
        x.copy_(hal.asarray(np.ones((1, 2, 3, 4), np.float16), device=device))
    x.copy_(hal.asarray(np.full((1, 2, 3, 4), 3.0, np.float32), device=device, layout="NHWC"))
    assert (x.numpy() == 3.0).all()


def test_a_nested_capture_keeps_the_outer_pipeline_whole(device):
    """A capture inside a capture: the inner graph holds its own launches, the outer one all of them (session
    25: the inner recording used to take its launches away from the outer one, whose replay then skipped them)."""
    rng = np.random.default_rng(8)
    x = hal.asarray(rng.standard_normal((1, 3, 8, 8)).astype(np.float32), device=device)
    with hal.capture() as outer:
        a = hal.max_pool2d(x, 2)
        with hal.capture() as inner:
            b = hal.relu(a)
        c = hal.avg_pool2d(b, 2)
    assert (len(outer), len(inner)) == (3, 1)
    x_next = -np.abs(rng.standard_normal((1, 3, 8, 8))).astype(np.float32)  # every ReLU output 0
    x.copy_(x_next)
    outer.replay()
    np.testing.assert_array_equal(c.numpy(), np.zeros((1, 3, 2, 2), np.float32))
