"""OpenCL adaptive pooling with HALF_RAW=1: float16 vectors as raw 16-bit words (hal_ldrawN /
hal_strawN) on every path that has aligned vector loads, forced one by one and checked against
the float64 oracle: one work-item per output (NCHW avg rows with a scalar head up to the first
aligned element; NHWC channel vectors, max and avg, with raw stores) and one work-group per
output (NCHW avg whole-row runs; NHWC channel vectors), global and non-global outputs, odd
heights and widths, channel counts that are and are not multiples of VEC, NaN-poisoned outputs."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from test_adaptive_flat import built
from test_forced_params import forced

import hal
from hal import reference
from hal.conformance import compare, compare_indices
from hal.tensor import poison_outputs

#: forced work mapping -> the ADAPTIVE_GROUP it builds
PATHS = {"item": ({"MODE": 1}, 0), "group": ({"MODE": 2}, 1)}
#: (shape, output size); every list holds cases whose vectors the raw loads read (NCHW: bins
#: at least 2 * VEC wide, or whole-row runs for the group kernels; NHWC: C % 8 == 0), and
#: cases that mix them with the element-aligned fallbacks (NHWC C % VEC != 0, narrow bins)
CASES = {
    "NCHW": [((2, 3, 13, 37), (3, 2)), ((1, 5, 7, 7), 1), ((3, 2, 11, 29), (2, 1)), ((2, 3, 9, 45), (4, 5)),
             ((1, 7, 5, 19), 1)],
    "NHWC": [((2, 24, 9, 11), (3, 4)), ((1, 40, 7, 7), 1), ((3, 16, 13, 10), (2, 1)), ((2, 20, 5, 9), (2, 3)),
             ((1, 13, 6, 7), 1)],
}


def _opencl(device: hal.Device) -> None:
    if device is None or device.kind != "opencl":
        pytest.skip("HALF_RAW is the OpenCL backend's")


def _input(seed: int, shape: tuple[int, ...], kind: str) -> np.ndarray:
    """Fresh normal values; for max, half of them rounded to integers (equal maxima: the first
    wins), 2 % NaN (the last wins) and 2 % -inf."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if kind == "max":
        x = np.where(rng.random(shape) < 0.5, np.round(x), x)
        x[rng.random(shape) < 0.02] = np.nan
        x[rng.random(shape) < 0.02] = -np.inf
    return x.astype(np.float16)


def _check(device: hal.Device, kind: str, x: np.ndarray, out: object, layout: str, relu: bool) -> None:
    xt = hal.asarray(x, device=device, layout=layout)
    x64 = x.astype(np.float64)
    with poison_outputs():
        if kind == "max":
            y, idx = hal.adaptive_max_pool2d(xt, out, return_indices=True)
        else:
            y = hal.adaptive_avg_pool2d(xt, out, relu=relu)
    if kind == "max":
        ref, ref_idx = reference.adaptive_max_pool2d(x64, out, return_indices=True)
        r = compare_indices(idx.numpy(), ref_idx)
        assert r.ok, (x.shape, out, "indices", r.detail)
    else:
        ref = reference.adaptive_avg_pool2d(x64, out)
        if relu:
            ref = np.maximum(ref, 0.0)
    with np.errstate(invalid="ignore"):  # inf - inf where both are -inf
        r = compare(f"adaptive_{kind}_pool2d", x.dtype, y.numpy(), ref)
    assert r.ok, (x.shape, out, r.detail)


@pytest.mark.parametrize("vec", [4, 8])
@pytest.mark.parametrize("path", list(PATHS))
# NCHW max loads scalars: no raw vectors (test_adaptive_half_raw_define checks it builds without)
@pytest.mark.parametrize(("layout", "kind"), [("NCHW", "avg"), ("NHWC", "max"), ("NHWC", "avg")])
def test_adaptive_half_raw_matches_oracle(device, layout, kind, path, vec):
    _opencl(device)
    params, group = PATHS[path]
    for i, (shape, out) in enumerate(CASES[layout]):
        x = _input(zlib.crc32(repr((layout, kind, path, vec, i)).encode()), shape, kind)
        with forced(device, "adaptive_pool2d", {**params, "VEC": vec, "HALF_RAW": 1}), built(device) as defines:
            _check(device, kind, x, out, layout, relu=kind == "avg" and i % 2 == 1)
        assert defines and all(d.get("HALF_RAW") == 1 and d["ADAPTIVE_GROUP"] == group for d in defines), defines


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_adaptive_half_raw_define(device, layout):
    """HALF_RAW reaches only the builds with raw vectors: float32, VEC 1, NCHW max and the
    flat kernels (raw copies already) keep the -D sets they had without it."""
    _opencl(device)
    shape, out = (2, 16, 7, 9), (2, 3)

    def defines_of(dtype: str, kind: str, params: dict[str, int]) -> list[dict[str, int]]:
        x = _input(3, shape, kind).astype(dtype)
        with forced(device, "adaptive_pool2d", params), built(device) as defines:
            _check(device, kind, x, out, layout, relu=False)
        assert defines
        return defines

    for kind in ("max", "avg"):
        for params in ({"MODE": 1, "VEC": 4}, {"MODE": 2, "VEC": 8}, {"MODE": 1, "VEC": 1}, {"MODE": 3, "VEC": 4}):
            raw = defines_of("float16", kind, {**params, "HALF_RAW": 1})
            plain = defines_of("float16", kind, {**params, "HALF_RAW": 0})
            f32 = defines_of("float32", kind, {**params, "HALF_RAW": 1})
            assert all("HALF_RAW" not in d for d in plain + f32)
            flat = layout == "NCHW" and params["MODE"] == 3
            uses = params["VEC"] > 1 and not flat and (layout == "NHWC" or kind == "avg")
            assert raw == ([{**d, "HALF_RAW": 1} for d in plain] if uses else plain), (kind, params)


def test_adaptive_schema_half_raw():
    """HALF_RAW is an adaptive_pool2d parameter (default 0); VEC 1 candidates carry it once."""
    from hal.backends.opencl import SCHEMAS

    schema = SCHEMAS["adaptive_pool2d"]
    assert schema.defaults()["HALF_RAW"] == 0
    cands = schema.candidates()
    assert {c["HALF_RAW"] for c in cands if c["VEC"] > 1} == {0, 1}
    assert {c["HALF_RAW"] for c in cands if c["VEC"] == 1} == {0}
