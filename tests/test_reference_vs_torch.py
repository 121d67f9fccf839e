"""The float64 oracle agrees with torch.nn.functional (where torch accepts the arguments)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from hal import reference
from hal.errors import HalValueError
from hal.spec import resolve_padding
from strategies import SETTINGS, padding_forms, seeds, shapes

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def _x(seed, shape, nan=0.0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if nan:
        x[rng.random(shape) < nan] = np.nan
    return x


pool_kw = st.fixed_dictionaries({
    "kernel_size": st.integers(1, 4),
    "stride": st.integers(1, 3),
    "padding": st.integers(0, 2),
    "ceil_mode": st.booleans(),
})


@SETTINGS
@given(shape=shapes(max_hw=20, max_c=6), kw=pool_kw, dilation=st.integers(1, 3), seed=seeds,
       nan=st.sampled_from([0.0, 0.2]))
def test_max_pool2d_matches_torch(shape, kw, dilation, seed, nan):
    x = _x(seed, shape, nan)
    try:
        want, want_i = F.max_pool2d(_t(x), dilation=dilation, return_indices=True, **kw)
        # hal rejects, on purpose, windows lying entirely in the padding (torch returns -inf there)
        got, got_i = reference.max_pool2d(x, dilation=dilation, return_indices=True, **kw)
    except (RuntimeError, HalValueError):
        assume(False)
    np.testing.assert_array_equal(got, want.numpy())
    np.testing.assert_array_equal(got_i, want_i.numpy())


@SETTINGS
@given(shape=shapes(max_hw=20, max_c=6), kw=pool_kw, seed=seeds, count_include_pad=st.booleans(),
       divisor=st.one_of(st.none(), st.integers(1, 9)))
def test_avg_pool2d_matches_torch(shape, kw, seed, count_include_pad, divisor):
    x = _x(seed, shape)
    try:
        want = F.avg_pool2d(_t(x), count_include_pad=count_include_pad, divisor_override=divisor, **kw)
        got = reference.avg_pool2d(x, count_include_pad=count_include_pad, divisor_override=divisor, **kw)
    except (RuntimeError, HalValueError):
        assume(False)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-12, atol=1e-12)


@SETTINGS
@given(shape=shapes(max_hw=20, max_c=5), out=st.tuples(st.integers(1, 8), st.integers(1, 8)), seed=seeds)
def test_adaptive_pools_match_torch(shape, out, seed):
    x = _x(seed, shape)
    np.testing.assert_allclose(reference.adaptive_avg_pool2d(x, out), F.adaptive_avg_pool2d(_t(x), out).numpy(),
                               rtol=1e-12, atol=1e-12)
    got, got_i = reference.adaptive_max_pool2d(x, out, return_indices=True)
    want, want_i = F.adaptive_max_pool2d(_t(x), out, return_indices=True)
    np.testing.assert_array_equal(got, want.numpy())
    np.testing.assert_array_equal(got_i, want_i.numpy())


@SETTINGS
@given(shape=shapes(max_hw=14, max_c=6), seed=seeds, k=st.tuples(st.integers(1, 4), st.integers(1, 4)),
       stride=st.integers(1, 3), dilation=st.integers(1, 2), padding=padding_forms(2), groups=st.sampled_from([1, 2]),
       cout_per_group=st.integers(1, 3), bias=st.booleans())
def test_conv2d_matches_torch(shape, seed, k, stride, dilation, padding, groups, cout_per_group, bias):
    n, c, h, w = shape
    c = c * groups
    x = _x(seed, (n, c, h, w))
    wt = _x(seed + 1, (groups * cout_per_group, c // groups, *k))
    b = _x(seed + 2, (groups * cout_per_group,)) if bias else None
    try:
        got = reference.conv2d(x, wt, b, stride, padding, dilation, groups)
    except HalValueError:
        assume(False)
    top, bottom, left, right = resolve_padding(padding, (h, w), k, (stride, stride), (dilation, dilation))
    xp = F.pad(_t(x), (left, right, top, bottom))
    want = F.conv2d(xp, _t(wt), None if b is None else _t(b), stride, 0, dilation, groups)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-10)


@SETTINGS
@given(shape=shapes(max_hw=10, max_c=6), seed=seeds, training=st.booleans(), momentum=st.floats(0, 1),
       mean=st.sampled_from([0.0, 1e4]))
def test_batch_norm_matches_torch(shape, seed, training, momentum, mean):
    n, c, h, w = shape
    assume(not training or n * h * w > 1)
    x = mean + _x(seed, shape)
    rng = np.random.default_rng(seed + 1)
    rm, rv = rng.standard_normal(c), rng.uniform(0.5, 2, c)
    weight, bias = rng.standard_normal(c), rng.standard_normal(c)
    t_rm, t_rv = _t(rm.copy()), _t(rv.copy())
    want = F.batch_norm(_t(x), t_rm, t_rv, _t(weight), _t(bias), training, momentum, 1e-5)
    got = reference.batch_norm(x, rm, rv, weight, bias, training, momentum, 1e-5)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(rm, t_rm.numpy(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(rv, t_rv.numpy(), rtol=1e-9, atol=1e-9)
