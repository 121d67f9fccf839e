"""BatchNorm on every device against the float64 oracle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import hal
from hal import reference
from hal.conformance import bn_scale, compare
from hal.tensor import poison_outputs
from strategies import SETTINGS, dtypes, layouts, random_input, seeds, shapes


def _params(seed, c):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(c).astype(np.float32), rng.uniform(0.5, 2, c).astype(np.float32),
            rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32))


@SETTINGS
@given(shape=shapes(max_hw=24), dtype=dtypes, layout=layouts, seed=seeds, training=st.booleans(),
       affine=st.booleans(), momentum=st.sampled_from([0.1, 0.0, 1.0, 0.37]), eps=st.sampled_from([1e-5, 1e-3]))
def test_batch_norm(device, shape, dtype, layout, seed, training, affine, momentum, eps):
    n, c, h, w = shape
    if training and n * h * w == 1:
        return  # rejected (tested in test_errors)
    x = random_input(seed, shape, dtype)
    rm, rv, weight, bias = _params(seed + 1, c)
    if not affine:
        weight = bias = None
    ref_rm, ref_rv = rm.astype(np.float64), rv.astype(np.float64)
    ref = reference.batch_norm(x.astype(np.float64), ref_rm, ref_rv, weight, bias, training, momentum, eps)
    with poison_outputs():
        y = hal.batch_norm(hal.asarray(x, device=device, layout=layout), rm, rv, weight, bias, training, momentum, eps)
    r = compare("batch_norm", dtype, y.numpy(), ref, bn_scale(x, weight, eps, training, rm, rv))
    assert r.ok, r.detail
    for got, want in ((rm, ref_rm), (rv, ref_rv)):
        r = compare("batch_norm", "float32", got, want)
        assert r.ok, r.detail


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_batch_norm_no_cancellation(device, layout):
    """Mean 1e4, std 1: E[x^2] - E[x]^2 in float32 would lose every digit of the variance."""
    x = random_input(1, (8, 5, 33, 31), "float32", mean=1e4)
    rm, rv = np.zeros(5, np.float32), np.ones(5, np.float32)
    ref_rm, ref_rv = rm.astype(np.float64), rv.astype(np.float64)
    ref = reference.batch_norm(x.astype(np.float64), ref_rm, ref_rv, training=True)
    y = hal.batch_norm(hal.asarray(x, device=device, layout=layout), rm, rv, training=True)
    scale = bn_scale(x, None, 1e-5, True)
    assert scale.max() < 30  # the float32 mean allowance stays far below what cancellation costs
    r = compare("batch_norm", "float32", y.numpy(), ref, scale)
    assert r.ok, r.detail
    r = compare("batch_norm", "float32", rv, ref_rv)
    assert r.ok, r.detail


def test_batch_norm_running_tensors_on_device(device):
    """Running statistics held as device tensors are updated in place on the device."""
    x = random_input(2, (4, 3, 5, 6), "float32")
    rm, rv, _, _ = _params(3, 3)
    rm_t, rv_t = hal.asarray(rm, device=device), hal.asarray(rv, device=device)
    ref_rm, ref_rv = rm.astype(np.float64), rv.astype(np.float64)
    reference.batch_norm(x.astype(np.float64), ref_rm, ref_rv, training=True, momentum=0.3)
    hal.batch_norm(hal.asarray(x, device=device), rm_t, rv_t, training=True, momentum=0.3)
    assert compare("batch_norm", "float32", rm_t.numpy(), ref_rm).ok
    assert compare("batch_norm", "float32", rv_t.numpy(), ref_rv).ok
    np.testing.assert_array_equal(rm, _params(3, 3)[0])  # the host copy was not touched


def test_batch_norm_large_channel_plane(device):
    """Per-channel reduction over more values than any work-group, with odd tails."""
    x = random_input(4, (3, 7, 97, 89), "float32", mean=3.0)
    rm, rv = np.zeros(7, np.float32), np.ones(7, np.float32)
    for layout in ("NCHW", "NHWC"):
        a, b = rm.copy(), rv.copy()
        ref_rm, ref_rv = rm.astype(np.float64), rv.astype(np.float64)
        ref = reference.batch_norm(x.astype(np.float64), ref_rm, ref_rv, training=True)
        y = hal.batch_norm(hal.asarray(x, device=device, layout=layout), a, b, training=True)
        assert compare("batch_norm", "float32", y.numpy(), ref).ok
        assert compare("batch_norm", "float32", b, ref_rv).ok


def test_tolerance_rejects_cancellation():
    """The mean-1e4 bound is meaningful: E[x^2] - E[x]^2 in float32 fails it."""
    x = random_input(1, (8, 5, 33, 31), "float32", mean=1e4)
    ref = reference.batch_norm(x.astype(np.float64), None, None, training=True)
    mean = x.mean(axis=(0, 2, 3), dtype=np.float32)
    naive_var = (x * x).mean(axis=(0, 2, 3), dtype=np.float32) - mean * mean
    naive = (x - mean[None, :, None, None]) / np.sqrt(np.abs(naive_var)[None, :, None, None] + 1e-5)
    assert not compare("batch_norm", "float32", naive, ref, bn_scale(x, None, 1e-5, True)).ok
