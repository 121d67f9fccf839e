"""The OpenCL backend's flat adaptive pooling (MODE 3: runs of whole NCHW planes staged in
local memory), forced on each OpenCL device and checked against the float64 oracle: small
planes of odd sizes, plane counts that are multiples of nothing, work-groups with one
work-item per output and with several, max with indices (NaN, -inf, ties, signed zeros)
and avg with fused ReLU, float32 and float16. The MODE 0 rule is checked on fake devices."""

from __future__ import annotations

import contextlib
import types
import zlib
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_forced_params import forced

import hal
from hal import reference
from hal.backends.base import DeviceInfo
from hal.conformance import compare, compare_indices
from hal.spec import TensorGeometry, adaptive_pool2d_spec
from hal.tensor import poison_outputs
from strategies import SETTINGS, dtypes, random_input, seeds, shapes

#: (WG, VEC) sets: staging buffers of 2048, 4096 and up to 16384 elements (what local memory
#: holds), scalar and 4/8-wide copies
FLAT_PARAMS = [{"MODE": 3, "WG": 32, "VEC": 1}, {"MODE": 3, "WG": 64, "VEC": 4}, {"MODE": 3, "WG": 256, "VEC": 8}]
PLANES = [(1, 1), (3, 5), (7, 7), (13, 11), (8, 8), (2, 6)]  # 8x8 and 2x6: even runs, rotated scans
#: 3 planes: one per work-group, several work-items per output merging in local memory;
#: 111 and 1057 planes: chunks of all sizes, a partial last one, one work-item per output
#: (the launcher's groups counted for one compute unit, see one_compute_unit)
BATCHES = [(1, 3), (3, 37), (7, 151)]


def _opencl(device: hal.Device) -> None:
    if device is None or device.kind != "opencl":
        pytest.skip("the flat and pipe kernels (MODE 3, 4) are the OpenCL backend's")


@pytest.fixture
def one_compute_unit(device, monkeypatch):
    """Launch geometry as on a device of one compute unit: the launcher's lower bound on the
    number of work-groups (flat: 4 per compute unit; pipe: PIPE_GROUPS) then leaves whole
    chunks to the groups, so the same kernel branches run on every device for the same shape."""
    _opencl(device)
    monkeypatch.setattr(device.backend, "info", replace(device.backend.info, compute_units=1))


@contextlib.contextmanager
def built(device: hal.Device, drop_plans: bool = True) -> Iterator[list[dict[str, int]]]:
    """The defines of every kernel the backend looks up inside the block; its launch plans dropped
    first unless ``drop_plans`` is False (a call an earlier test planned with the same spec and
    parameters looks up none: the tests' order is pytest's)."""
    if drop_plans:
        device.backend.drop_plans()
    seen: list[dict[str, int]] = []
    original = device.backend._kernel

    def spy(file: str, name: str, defines: dict[str, int], local: int) -> object:
        seen.append(dict(defines))
        return original(file, name, defines, local)

    device.backend._kernel = spy  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        del device.backend._kernel


def max_input(seed: int, shape: tuple[int, int, int, int], dtype: str) -> np.ndarray:
    """Normal values, half of them rounded to integers (many equal maxima), 5 % NaN, 5 % -inf;
    plane 0 all -inf (index of the first tap), plane 1 all NaN (the last), plane 2 signed zeros."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    x = np.where(rng.random(shape) < 0.5, np.round(x), x)
    x[rng.random(shape) < 0.05] = np.nan
    x[rng.random(shape) < 0.05] = -np.inf
    planes = x.reshape(-1, shape[2] * shape[3])
    planes[0] = -np.inf
    if len(planes) > 2:
        planes[1] = np.nan
        planes[2] = np.where(rng.random(planes.shape[1]) < 0.5, -0.0, 0.0)
    return x.astype(dtype)


def check_max(device: hal.Device, x: np.ndarray, out: object) -> None:
    with poison_outputs():
        y, idx = hal.adaptive_max_pool2d(hal.asarray(x, device=device), out, return_indices=True)
    ref_y, ref_idx = reference.adaptive_max_pool2d(x.astype(np.float64), out, return_indices=True)
    got = y.numpy()
    with np.errstate(invalid="ignore"):  # inf - inf where both are -inf
        r = compare("adaptive_max_pool2d", x.dtype, got, ref_y)
    assert r.ok, r.detail
    # max is exact: the stored value is the chosen tap's, -0.0 and 0.0 included
    keep = ~np.isnan(ref_y)
    assert np.array_equal(np.signbit(got)[keep], np.signbit(ref_y)[keep])
    # the first maximum, the last NaN (every window: the flat path scans as the oracle does)
    r = compare_indices(idx.numpy(), ref_idx)
    assert r.ok, r.detail


def check_avg(device: hal.Device, x: np.ndarray, out: object, relu: bool = False) -> None:
    with poison_outputs():
        y = hal.adaptive_avg_pool2d(hal.asarray(x, device=device), out, relu=relu)
    ref = reference.adaptive_avg_pool2d(x.astype(np.float64), out)
    if relu:
        ref = np.maximum(ref, 0.0)
    r = compare("adaptive_avg_pool2d", x.dtype, y.numpy(), ref)
    assert r.ok, r.detail


@pytest.mark.parametrize("params", FLAT_PARAMS, ids=lambda p: f"wg{p['WG']}-vec{p['VEC']}")
@pytest.mark.parametrize("batch", BATCHES, ids=lambda b: f"{b[0] * b[1]}planes")
@pytest.mark.parametrize("plane", PLANES, ids=lambda p: f"{p[0]}x{p[1]}")
@pytest.mark.parametrize("out", [1, (2, 3)], ids=["1x1", "2x3"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_adaptive_flat_matches_oracle(device, one_compute_unit, kind, dtype, out, plane, batch, params):
    shape = (*batch, *plane)
    seed = zlib.crc32(repr((kind, dtype, out, plane, batch, params)).encode())
    with forced(device, "adaptive_pool2d", params), built(device) as defines:
        if kind == "max":
            check_max(device, max_input(seed, shape, dtype), out)
        else:
            check_avg(device, random_input(seed, shape, dtype), out)
    assert defines and all(d["ADAPTIVE_GROUP"] == 2 for d in defines), "the flat kernels did not run"


@pytest.mark.parametrize("plane", [(7, 7), (3, 5), (8, 8)], ids=lambda p: f"{p[0]}x{p[1]}")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_adaptive_flat_fused_relu(device, dtype, plane):
    _opencl(device)
    x = random_input(17, (2, 29, *plane), dtype)
    for params in FLAT_PARAMS[:2]:
        with forced(device, "adaptive_pool2d", params), built(device) as defines:
            for out in (1, (2, 3)):
                check_avg(device, x, out, relu=True)
        assert {d["ADAPTIVE_GROUP"] for d in defines} == {2} and all(d["FUSE_RELU"] for d in defines)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_adaptive_flat_max_equals_the_per_item_path(device, dtype):
    """Bit for bit, values and indices, NaN windows included."""
    _opencl(device)
    x = max_input(5, (2, 45, 9, 10), dtype)
    results = []
    for params in ({"MODE": 1}, *FLAT_PARAMS):
        with forced(device, "adaptive_pool2d", params), poison_outputs():
            for out in (1, (2, 3), (4, 4)):
                y, idx = hal.adaptive_max_pool2d(hal.asarray(x, device=device), out, return_indices=True)
                results.append((params.get("WG"), out, y.numpy().view(np.uint16 if dtype == "float16" else np.uint32),
                                idx.numpy()))
    first = results[:3]
    for i in range(3, len(results), 3):
        for (_, out, y0, i0), (wg, _, y1, i1) in zip(first, results[i:i + 3], strict=True):
            np.testing.assert_array_equal(y1, y0, err_msg=f"WG {wg} out {out}")
            np.testing.assert_array_equal(i1, i0, err_msg=f"WG {wg} out {out}")


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_adaptive_flat_falls_back_where_it_does_not_apply(device, layout):
    """MODE 3 for NHWC, or for planes larger than the staging buffer (WG 32: 2048 elements),
    runs MODE 0's other kernels, and right."""
    _opencl(device)
    shape = (2, 5, 7, 7) if layout == "NHWC" else (1, 3, 61, 53)
    x = random_input(3, shape, "float32")
    with forced(device, "adaptive_pool2d", {"MODE": 3, "WG": 32, "VEC": 4}), built(device) as defines:
        with poison_outputs():
            y = hal.adaptive_avg_pool2d(hal.asarray(x, device=device, layout=layout), (2, 3))
    assert defines and all(d["ADAPTIVE_GROUP"] != 2 for d in defines)
    ref = reference.adaptive_avg_pool2d(x.astype(np.float64), (2, 3))
    r = compare("adaptive_avg_pool2d", "float32", y.numpy(), ref)
    assert r.ok, r.detail


@SETTINGS
@given(shape=shapes(max_hw=16), out=st.tuples(st.integers(1, 9), st.integers(1, 9)), dtype=dtypes, seed=seeds,
       kind=st.sampled_from(["avg", "max"]), params=st.sampled_from(FLAT_PARAMS))
def test_adaptive_flat_random_shapes(device, shape, out, dtype, seed, kind, params):
    _opencl(device)
    with forced(device, "adaptive_pool2d", params):
        if kind == "max":
            check_max(device, max_input(seed, shape, dtype), out)
        else:
            check_avg(device, random_input(seed, shape, dtype), out)


# ---- the MODE 0 rule and the local-memory constraint, on fake devices (no kernels run) ----


def _info(device_type="GPU", family="hopper", local=49152, max_wg=1024, emulated_from=None):
    extras = [("device_type", device_type)]
    if emulated_from:
        extras.append(("real_arch_family", emulated_from))
    return DeviceInfo("opencl", 0, "Fake GPU", "fakeco", family, "fk1", 132, max_wg, local, 2**34, False, 32,
                      extras=tuple(extras))


def _flat(info, plane=(7, 7), out=1, layout="NCHW", dtype="float32", **params):
    from hal.backends.opencl import OpenCLBackend

    geom = TensorGeometry(256, 2048, *plane, layout, np.dtype(dtype))  # type: ignore[arg-type]
    spec = adaptive_pool2d_spec("avg", geom, out, False)
    return OpenCLBackend._adaptive_flat(types.SimpleNamespace(info=info), spec,  # type: ignore[arg-type]
                                        {"WG": 128, "VEC": 4, "MODE": 0, "HALF_ARITH": 0, **params})


def test_adaptive_flat_auto_rule():
    gpu = _info()
    elems = _flat(gpu)
    assert elems == 64 * 128 and elems * 4 + 128 * 8 <= gpu.local_mem_bytes  # FLAT_PER_ITEM elements per item
    assert _flat(gpu, plane=(20, 20)) and _flat(gpu, plane=(1, 1)) and _flat(gpu, dtype="float16")
    assert not _flat(gpu, plane=(21, 20))  # above FLAT_AUTO_PLANE: the group kernels serve
    assert not _flat(gpu, plane=(20, 20), WG=32)  # the 2048-element buffer holds < 8 planes
    assert not _flat(gpu, out=(2, 1)) and not _flat(gpu, out=(2, 3))  # one work-item per output wins
    assert _flat(gpu, out=(2, 3), MODE=3)
    assert not _flat(gpu, layout="NHWC")  # already coalesced along C
    assert not _flat(gpu, MODE=1) and not _flat(gpu, MODE=2)
    assert not _flat(_info(device_type="CPU"))  # PoCL: local memory is ordinary memory
    assert not _flat(_info(family="mali")) and not _flat(_info(family="hopper", emulated_from="mali"))
    assert _flat(_info(device_type="CPU"), MODE=3)  # MODE 3 asks for it anywhere
    assert not _flat(_info(device_type="CPU"), MODE=3, plane=(91, 91))  # 8281 elements > the buffer's 8192


@pytest.mark.parametrize("local", [16384, 32768, 49152, 65536])
@pytest.mark.parametrize("wg", [32, 256, 1024])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_adaptive_flat_fits_local_memory(local, wg, dtype):
    """The staging buffer, its alignment slack and the scratch arrays fit the device's
    local memory whenever the schema accepts MODE 3."""
    from hal.backends.opencl import SCHEMAS

    info = _info(local=local)
    params = {"WG": wg, "VEC": 8, "MODE": 3, "HALF_ARITH": 0, "HALF_RAW": 0}
    if SCHEMAS["adaptive_pool2d"].validate(params, info):
        return
    elems = _flat(info, plane=(1, 1), dtype=dtype, **params)
    es = np.dtype(dtype).itemsize
    assert elems > 0 and elems % 8 == 0
    assert (elems + 8) * es + wg * 8 <= local
