"""Pooling on every device against the float64 oracle (hypothesis-driven)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import hal
from hal import reference
from hal.conformance import avg_pool_scale, compare, compare_indices
from hal.errors import HalValueError
from hal.tensor import poison_outputs
from strategies import SETTINGS, dtypes, layouts, padding_forms, random_input, seeds, shapes


def _pool_config(draw: st.DrawFn) -> dict:
    k = draw(st.tuples(st.integers(1, 5), st.integers(1, 5)))
    stride = draw(st.one_of(st.none(), st.integers(1, 3), st.tuples(st.integers(1, 3), st.integers(1, 3))))
    return {
        "kernel_size": k if k[0] != k[1] else k[0],
        "stride": stride,
        "padding": draw(padding_forms(3)),
        "ceil_mode": draw(st.booleans()),
    }


@st.composite
def max_pool_cases(draw: st.DrawFn) -> dict:
    cfg = _pool_config(draw)
    cfg["dilation"] = draw(st.one_of(st.just(1), st.integers(1, 3)))
    cfg["return_indices"] = draw(st.booleans())
    return cfg


@st.composite
def avg_pool_cases(draw: st.DrawFn) -> dict:
    cfg = _pool_config(draw)
    cfg["count_include_pad"] = draw(st.booleans())
    cfg["divisor_override"] = draw(st.one_of(st.none(), st.integers(1, 30)))
    cfg["dilation"] = draw(st.one_of(st.just(1), st.just(1), st.integers(1, 2)))
    return cfg


def _run(device, fn, x, layout, **kwargs):
    with poison_outputs():
        xt = hal.asarray(x, device=device, layout=layout)
        return fn(xt, **kwargs)


@SETTINGS
@given(shape=shapes(), cfg=max_pool_cases(), dtype=dtypes, layout=layouts, seed=seeds,
       nan=st.sampled_from([0.0, 0.0, 0.1]))
def test_max_pool2d(device, shape, cfg, dtype, layout, seed, nan):
    x = random_input(seed, shape, dtype, nan_fraction=nan)
    try:
        ref = reference.max_pool2d(x.astype(np.float64), **cfg)
    except HalValueError:
        assume(False)
    out = _run(device, hal.max_pool2d, x, layout, **cfg)
    if cfg["return_indices"]:
        (y, idx), (ref_y, ref_idx) = out, ref
        got_idx = idx.numpy()
        assert idx.dtype == np.int64 and idx.layout == layout
        keep = ~np.isnan(ref_y)  # a window holding NaN may report any NaN's index
        r = compare_indices(got_idx[keep], ref_idx[keep])
        assert r.ok, r.detail
    else:
        y, ref_y = out, ref
    assert y.layout == layout and y.dtype == np.dtype(dtype)
    r = compare("max_pool2d", dtype, y.numpy(), ref_y)
    assert r.ok, r.detail


@SETTINGS
@given(shape=shapes(), cfg=avg_pool_cases(), dtype=dtypes, layout=layouts, seed=seeds)
def test_avg_pool2d(device, shape, cfg, dtype, layout, seed):
    x = random_input(seed, shape, dtype)
    try:
        ref = reference.avg_pool2d(x.astype(np.float64), **cfg)
    except HalValueError:
        assume(False)
    y = _run(device, hal.avg_pool2d, x, layout, **cfg)
    r = compare("avg_pool2d", dtype, y.numpy(), ref, avg_pool_scale(x, **cfg))
    assert r.ok, r.detail


@SETTINGS
@given(shape=shapes(), out=st.tuples(st.integers(1, 9), st.integers(1, 9)), dtype=dtypes, layout=layouts,
       seed=seeds, kind=st.sampled_from(["avg", "max"]), nan=st.sampled_from([0.0, 0.1]))
def test_adaptive_pool2d(device, shape, out, dtype, layout, seed, kind, nan):
    x = random_input(seed, shape, dtype, nan_fraction=nan if kind == "max" else 0.0)
    x64 = x.astype(np.float64)
    if kind == "avg":
        y = _run(device, hal.adaptive_avg_pool2d, x, layout, output_size=out)
        r = compare("adaptive_avg_pool2d", dtype, y.numpy(), reference.adaptive_avg_pool2d(x64, out))
        assert r.ok, r.detail
    else:
        y, idx = _run(device, hal.adaptive_max_pool2d, x, layout, output_size=out, return_indices=True)
        ref_y, ref_idx = reference.adaptive_max_pool2d(x64, out, return_indices=True)
        r = compare("adaptive_max_pool2d", dtype, y.numpy(), ref_y)
        assert r.ok, r.detail
        keep = ~np.isnan(ref_y)
        r = compare_indices(idx.numpy()[keep], ref_idx[keep])
        assert r.ok, r.detail


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_global_avg_pool_large_plane(device, dtype, layout):
    """A plane larger than any work-group or vector tile, with a tail."""
    x = random_input(7, (2, 67, 61, 53), dtype)
    y = _run(device, hal.adaptive_avg_pool2d, x, layout, output_size=1)
    r = compare("adaptive_avg_pool2d", dtype, y.numpy(), reference.adaptive_avg_pool2d(x.astype(np.float64), 1))
    assert r.ok, r.detail


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_max_pool_nan_propagates_with_index(device, layout):
    x = random_input(3, (1, 2, 6, 6), "float32")
    x[0, 1, 2, 3] = np.nan
    y, idx = _run(device, hal.max_pool2d, x, layout, kernel_size=2, return_indices=True)
    assert np.isnan(y.numpy()[0, 1, 1, 1])
    assert idx.numpy()[0, 1, 1, 1] == 2 * 6 + 3
    assert not np.isnan(np.delete(y.numpy().reshape(-1), 1 * 9 + 1 * 3 + 1)).any()


def test_common_cnn_pools(device):
    """The shapes the benchmarks use, scaled down: 3x3/2 pad 1 and 2x2/2."""
    for layout in ("NCHW", "NHWC"):
        x = random_input(11, (2, 19, 57, 57), "float32")
        for fn, ref_fn, kw in (
            (hal.max_pool2d, reference.max_pool2d, {"kernel_size": 3, "stride": 2, "padding": 1}),
            (hal.avg_pool2d, reference.avg_pool2d, {"kernel_size": 3, "stride": 2, "padding": 1}),
            (hal.max_pool2d, reference.max_pool2d, {"kernel_size": 2, "stride": 2}),
        ):
            y = _run(device, fn, x, layout, **kw)
            r = compare(fn.__name__, "float32", y.numpy(), ref_fn(x.astype(np.float64), **kw))
            assert r.ok, (fn.__name__, layout, r.detail)


@pytest.mark.parametrize("op", ["max", "avg", "adaptive", "bn"])
def test_single_channel_nhwc_matches_nchw(device, op):
    """One channel: NHWC and NCHW are the same bytes, and the results must be too."""
    x = random_input(21, (2, 1, 37, 41), "float32")
    outs = []
    for layout in ("NCHW", "NHWC"):
        t = hal.asarray(x, device=device, layout=layout)
        with poison_outputs():
            if op == "max":
                y, idx = hal.max_pool2d(t, 3, 2, 1, return_indices=True)
                assert y.layout == idx.layout == layout
                outs.append((y.numpy(), idx.numpy()))
            elif op == "avg":
                outs.append((hal.avg_pool2d(t, 2).numpy(),))
            elif op == "adaptive":
                outs.append((hal.adaptive_avg_pool2d(t, (3, 5)).numpy(),))
            else:
                outs.append((hal.batch_norm(t, None, None, training=True).numpy(),))
    for a, b in zip(*outs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_compare_matched_infinities_warn_nothing():
    """Matching +-inf outputs (max pooling of -inf inputs) pass without a numpy RuntimeWarning,
    and a mismatched infinity still fails, on both the fast and the full path."""
    import warnings

    ref = np.tile(np.array([1.0, -np.inf, np.inf]), (3000, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for rows in (3000, 2):  # large arrays take the chunked fast path first
            for dtype in ("float32", "float16"):
                assert compare("max_pool2d", dtype, ref[:rows].astype(dtype), ref[:rows]).ok
            bad = ref[:rows].astype(np.float32)
            bad[1, 1] = np.inf
            r = compare("max_pool2d", "float32", bad, ref[:rows])
            assert not r.ok and "infinity mismatch" in r.detail
