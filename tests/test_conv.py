"""conv2d on every device against the float64 oracle (hypothesis-driven)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import hal
from hal import reference
from hal.conformance import compare, conv_scale
from hal.errors import HalValueError
from hal.tensor import poison_outputs
from strategies import SETTINGS, dtypes, layouts, padding_forms, random_input, seeds


@st.composite
def conv_cases(draw: st.DrawFn) -> dict:
    groups = draw(st.sampled_from([1, 1, 2, 3, "depthwise"]))
    per_group_in = draw(st.integers(1, 6))
    n = draw(st.integers(1, 2))
    if groups == "depthwise":
        g = draw(st.integers(1, 40))
        c_in, c_out = g, g * draw(st.sampled_from([1, 1, 2]))
    else:
        g = groups
        c_in = g * per_group_in
        c_out = g * draw(st.integers(1, 6))
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    return {
        "shape": (n, c_in, draw(st.integers(1, 20)), draw(st.integers(1, 20))),
        "weight_shape": (c_out, c_in // g, kh, kw),
        "bias": draw(st.booleans()),
        "stride": draw(st.one_of(st.integers(1, 3), st.tuples(st.integers(1, 3), st.integers(1, 3)))),
        "padding": draw(padding_forms(2)),
        "dilation": draw(st.one_of(st.just(1), st.integers(1, 2))),
        "groups": g,
    }


def _check_conv(device, x, w, b, dtype, layout, **kw):
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    b64 = None if b is None else b.astype(np.float64)
    try:
        ref = reference.conv2d(x64, w64, b64, **kw)
    except HalValueError:
        assume(False)
    with poison_outputs():
        y = hal.conv2d(hal.asarray(x, device=device, layout=layout), hal.asarray(w, device=device), b, **kw)
    assert y.layout == layout and y.shape == ref.shape
    r = compare("conv2d", dtype, y.numpy(), ref, conv_scale(x64, w64, b64, **kw))
    assert r.ok, r.detail


@SETTINGS
@given(case=conv_cases(), dtype=dtypes, layout=layouts, seed=seeds)
def test_conv2d(device, case, dtype, layout, seed):
    x = random_input(seed, case["shape"], dtype)
    w = random_input(seed + 1, case["weight_shape"], dtype)
    b = random_input(seed + 2, (case["weight_shape"][0],), dtype) if case["bias"] else None
    kw = {k: case[k] for k in ("stride", "padding", "dilation", "groups")}
    _check_conv(device, x, w, b, dtype, layout, **kw)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize(
    "shape,wshape,kw",
    [
        ((2, 64, 13, 11), (64, 64, 3, 3), {"padding": 1}),  # the CNN's 3x3 64->64, odd plane
        ((2, 37, 17, 19), (37, 1, 3, 3), {"padding": 1, "groups": 37}),  # depthwise, odd channels
        ((1, 16, 12, 12), (24, 2, 3, 3), {"padding": "same", "groups": 8}),  # grouped
        ((3, 130, 5, 7), (7, 130, 1, 1), {}),  # 1x1, many channels
        ((2, 64, 13, 19), (64, 8, 3, 3), {"padding": 1, "groups": 8}),  # ResNeXt-like groups of 8
        ((1, 24, 23, 21), (40, 24, 5, 5), {"stride": 2, "padding": 2}),  # dense 5x5 stride 2
    ],
    ids=["3x3-64", "depthwise", "grouped", "1x1", "groups-8", "5x5-s2"],
)
def test_conv2d_cnn_shapes(device, shape, wshape, kw, dtype, layout):
    x = random_input(5, shape, dtype)
    w = random_input(6, wshape, dtype) * np.asarray(0.2, dtype=dtype)
    b = random_input(7, (wshape[0],), dtype)
    _check_conv(device, x, w, b, dtype, layout, **kw)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize(
    "shape,wshape,kw",
    [
        ((1, 3, 8, 8), (4, 3, 3, 3), {"stride": 65536}),  # a stride past the input: one output pixel
        ((1, 4, 9, 10), (4, 2, 3, 2), {"stride": (7, 9), "padding": 2, "groups": 2}),  # past the window
        ((1, 3, 5, 6), (2, 3, 2, 2), {"stride": (1, 2**31 - 1), "dilation": (3, 1), "padding": (0, 1)}),
    ],
    ids=["stride-65536", "stride-past-window", "stride-2^31-1"],
)
def test_conv2d_strides_past_the_window(device, shape, wshape, kw, layout):
    """Strides larger than the window (most stride phases of the input unread): the CPU kernel once kept a
    scratch copy of every phase (stride squared of them: gigabytes at stride 65536) and, when that failed to
    allocate, returned without writing y (session 25)."""
    x = random_input(8, shape, "float32")
    w = random_input(9, wshape, "float32")
    _check_conv(device, x, w, None, "float32", layout, **kw)
