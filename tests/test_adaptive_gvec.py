"""The OpenCL backend's NHWC global-pooling walk (``GVEC_U``: a work-item per image and VEC
channels, GVEC_U pixel loads in flight), forced on each OpenCL device and checked against
the float64 oracle: pixel counts that are not multiples of GVEC_U (49, 15, 51, 1), channel
counts that are whole vectors and (falling back to the plain per-item kernel) not, max
without indices over NaN, -inf, ties and signed zeros, avg with and without fused ReLU,
float32 and float16 (raw half vectors too), outputs poisoned."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from test_adaptive_flat import built, max_input, one_compute_unit  # noqa: F401 (a fixture)
from test_forced_params import forced

import hal
from hal import reference
from hal.conformance import compare
from hal.tensor import poison_outputs
from strategies import random_input

#: (GVEC_U, VEC, WG, HALF_RAW): 4, 8 and 16 loads in flight, scalar, 4- and 8-wide channel vectors
GVEC_PARAMS = [(8, 8, 64, 1), (4, 4, 128, 0), (16, 8, 32, 0), (8, 1, 64, 0)]
PLANES = [(7, 7), (3, 5), (17, 3), (1, 1), (8, 8)]


def _opencl(device: hal.Device) -> None:
    if device is None or device.kind != "opencl":
        pytest.skip("GVEC_U is the OpenCL backend's adaptive-pooling parameter")


def _params(u: int, vec: int, wg: int, raw: int) -> dict[str, int]:
    return {"MODE": 1, "GVEC_U": u, "VEC": vec, "WG": wg, "HALF_RAW": raw}


def _run(device: hal.Device, kind: str, x: np.ndarray, relu: bool = False) -> np.ndarray:
    xt = hal.asarray(x, device=device, layout="NHWC")
    with poison_outputs():
        if kind == "max":
            y = hal.adaptive_max_pool2d(xt, 1)
        else:
            y = hal.adaptive_avg_pool2d(xt, 1, relu=relu)
    return y.numpy()


def _check(device: hal.Device, kind: str, x: np.ndarray, relu: bool = False) -> None:
    got = _run(device, kind, x, relu)
    x64 = x.astype(np.float64)
    if kind == "max":
        ref = reference.adaptive_max_pool2d(x64, 1)
        with np.errstate(invalid="ignore"):
            r = compare("adaptive_max_pool2d", x.dtype, got, ref)
        assert r.ok, r.detail
        keep = ~np.isnan(ref)  # max is exact: the first maximum's bits, -0.0 and 0.0 included
        assert np.array_equal(np.signbit(got)[keep], np.signbit(ref)[keep])
    else:
        ref = reference.adaptive_avg_pool2d(x64, 1)
        if relu:
            ref = np.maximum(ref, 0.0)
        r = compare("adaptive_avg_pool2d", x.dtype, got, ref)
        assert r.ok, r.detail


@pytest.mark.parametrize("gvec", GVEC_PARAMS, ids=lambda g: f"u{g[0]}-vec{g[1]}-wg{g[2]}-raw{g[3]}")
@pytest.mark.parametrize("plane", PLANES, ids=lambda p: f"{p[0]}x{p[1]}")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_adaptive_gvec_matches_oracle(device, kind, dtype, plane, gvec):
    _opencl(device)
    u, vec = gvec[:2]
    shape = (3, 5 * max(vec, 4) * 2, *plane)  # C 40 or 80: whole vectors, odd vector counts
    seed = zlib.crc32(repr((kind, dtype, plane, gvec)).encode())
    x = max_input(seed, shape, dtype) if kind == "max" else random_input(seed, shape, dtype)
    with forced(device, "adaptive_pool2d", _params(*gvec)), built(device) as defines:
        _check(device, kind, x)
    assert defines and all(d.get("GVEC_U") == u for d in defines), "the GVEC_U walk did not run"


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_adaptive_gvec_fused_relu(device, dtype):
    _opencl(device)
    x = random_input(23, (5, 24, 7, 7), dtype)
    with forced(device, "adaptive_pool2d", _params(8, 8, 64, 1)), built(device) as defines:
        _check(device, "avg", x, relu=True)
    assert defines and all(d.get("GVEC_U") == 8 and d.get("FUSE_RELU") for d in defines)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_adaptive_gvec_falls_back_where_it_does_not_apply(device, dtype):
    """C % VEC != 0, max with indices, and a 2x3 output run the plain per-item kernel (no
    GVEC_U in its -D set), and right; the walk and the per-item kernel agree bit for bit."""
    _opencl(device)
    x = max_input(9, (2, 12, 7, 7), dtype)  # C 12: not whole 8-wide vectors
    with forced(device, "adaptive_pool2d", _params(8, 8, 64, 0)), built(device) as defines:
        _check(device, "max", x)
        _check(device, "avg", x)
        xt = hal.asarray(x, device=device, layout="NHWC")
        with poison_outputs():
            hal.adaptive_max_pool2d(xt, 1, return_indices=True)
            hal.adaptive_avg_pool2d(xt, (2, 3))
    assert defines and all("GVEC_U" not in d for d in defines)
    x = max_input(10, (3, 16, 9, 5), dtype)
    bits = np.uint16 if dtype == "float16" else np.uint32
    for kind in ("max", "avg"):
        runs = []
        for params in ({"MODE": 1, "VEC": 8, "WG": 64}, _params(8, 8, 64, 0), _params(4, 8, 64, 1)):
            with forced(device, "adaptive_pool2d", params):
                runs.append(_run(device, kind, x).view(bits))
        np.testing.assert_array_equal(runs[1], runs[0], err_msg=kind)
        np.testing.assert_array_equal(runs[2], runs[0], err_msg=kind)


@pytest.mark.usefixtures("one_compute_unit")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_adaptive_gvec_replaces_the_group_kernel_where_items_fill_the_device(device, dtype):
    """MODE 0 with GVEC_U: an 8x8 plane (64 taps, the work-group-per-output kernel's threshold)
    walks per (image, channel vector) once there are GVEC_MIN_ITEMS_PER_CU of them per compute
    unit (one here: 8 x 256 / 8 = 256), and keeps the group kernel with fewer; both right."""
    from hal.backends.opencl import GVEC_MIN_ITEMS_PER_CU

    for shape, walk in (((8, 256, 8, 8), True), ((2, 64, 8, 8), False)):
        assert (shape[0] * shape[1] // 8 >= GVEC_MIN_ITEMS_PER_CU) == walk
        x = random_input(31, shape, dtype)
        with forced(device, "adaptive_pool2d", {"MODE": 0, "GVEC_U": 8, "VEC": 8, "WG": 64}), \
                built(device) as defines:
            _check(device, "avg", x)
        assert defines and all((d.get("GVEC_U") == 8) == walk for d in defines), (shape, defines)
        assert all(d["ADAPTIVE_GROUP"] == int(not walk) for d in defines), (shape, defines)
