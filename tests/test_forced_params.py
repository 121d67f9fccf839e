"""Kernel paths the tables may choose, forced one by one on each device and checked against
the float64 oracle: a path no shipped table serves on this machine must still be right
before a tuning run or another device's table hands it out."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Mapping

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import hal
from hal import reference
from hal.conformance import compare, compare_indices
from hal.errors import HalValueError
from hal.tensor import poison_outputs
from hal.tuning.table import Resolved, kernel_key
from strategies import SETTINGS, dtypes, layouts, random_input, seeds, shapes


@contextlib.contextmanager
def forced(device: hal.Device, kernel: str, params: Mapping[str, int]) -> Iterator[None]:
    """Serve ``params`` over the schema defaults for every ``kernel`` call on ``device``."""
    tuner = device.tuner
    original = tuner.resolve_spec
    merged = {**tuner.schemas[kernel].defaults(), **params}
    problem = tuner.schemas[kernel].validate(merged, device.info)
    if problem:
        pytest.skip(f"{kernel} {dict(params)} is not valid on {device.id}: {problem}")

    def resolve(spec: object) -> Resolved:
        if kernel_key(spec)[0] == kernel:
            return Resolved(merged, "forced", "test", "test")
        return original(spec)

    tuner.resolve_spec = resolve
    try:
        yield
    finally:
        del tuner.resolve_spec


def _opencl(device: hal.Device) -> None:
    if device.kind != "opencl":
        pytest.skip("OpenCL pool2d parameters")


#: pool2d paths of the OpenCL backend: (LOCAL_TILE, BAND_KB); 4 KB bands split the planes
#: of the shapes below into several bands, the last one partial
OPENCL_POOL_PATHS = [(0, 16, 1), (0, 16, 0), (1, 16, 1), (2, 4, 1), (2, 4, 0), (2, 16, 1)]


@pytest.mark.parametrize("path", OPENCL_POOL_PATHS, ids=lambda p: f"tile{p[0]}-{p[1]}kb-fixed{p[2]}")
@SETTINGS
@given(shape=shapes(max_hw=90, max_c=7), dtype=dtypes, seed=seeds, data=st.data())
def test_opencl_pool_paths(device, path, shape, dtype, seed, data):
    _opencl(device)
    kind = data.draw(st.sampled_from(["max", "avg"]))
    layout = data.draw(layouts)
    k = data.draw(st.integers(1, 4))
    cfg = {"kernel_size": (k, data.draw(st.integers(1, 4))), "stride": data.draw(st.integers(1, 3)),
           "padding": data.draw(st.integers(0, 1)), "ceil_mode": data.draw(st.booleans())}
    if kind == "max":
        cfg["dilation"] = data.draw(st.integers(1, 2))
        cfg["return_indices"] = data.draw(st.booleans())
    else:
        cfg["count_include_pad"] = data.draw(st.booleans())
    x = random_input(seed, shape, dtype, nan_fraction=0.05 if kind == "max" else 0.0)
    ref_fn = reference.max_pool2d if kind == "max" else reference.avg_pool2d
    try:
        ref = ref_fn(x.astype(np.float64), **cfg)
    except HalValueError:
        assume(False)
    op = hal.max_pool2d if kind == "max" else hal.avg_pool2d
    params = {"LOCAL_TILE": path[0], "BAND_KB": path[1], "FIXED_WINDOW": path[2]}
    with forced(device, "pool2d", params), poison_outputs():
        out = op(hal.asarray(x, device=device, layout=layout), **cfg)
    if kind == "max" and cfg["return_indices"]:
        (out, idx), (ref, ref_idx) = out, ref
        keep = ~np.isnan(ref)
        r = compare_indices(idx.numpy()[keep], ref_idx[keep])
        assert r.ok, r.detail
    r = compare(f"{kind}_pool2d", dtype, out.numpy(), ref)
    assert r.ok, r.detail


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_opencl_band_path_falls_back_when_a_row_does_not_fit(device, dtype):
    """One input row wider than the band's local memory: the launcher serves the vector path."""
    _opencl(device)
    x = random_input(5, (1, 2, 3, 1531), dtype)
    cfg = {"kernel_size": 3, "stride": 2, "padding": 1}
    with forced(device, "pool2d", {"LOCAL_TILE": 2, "BAND_KB": 4}), poison_outputs():
        y = hal.avg_pool2d(hal.asarray(x, device=device), **cfg)
    r = compare("avg_pool2d", dtype, y.numpy(), reference.avg_pool2d(x.astype(np.float64), **cfg))
    assert r.ok, r.detail


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_opencl_band_path_fused_relu(device, dtype):
    _opencl(device)
    x = random_input(9, (2, 3, 37, 45), dtype)
    cfg = {"kernel_size": 3, "stride": 2, "padding": 1}
    with forced(device, "pool2d", {"LOCAL_TILE": 2, "BAND_KB": 4}), poison_outputs():
        y = hal.max_pool2d(hal.asarray(x, device=device), **cfg, relu=True)
    ref = np.maximum(reference.max_pool2d(x.astype(np.float64), **cfg), 0.0)
    r = compare("max_pool2d", dtype, y.numpy(), ref)
    assert r.ok, r.detail


def test_exact_params_refuses_to_shrink(device, monkeypatch):
    """The tuner's mode: parameters the launcher cannot run as given raise instead of
    silently running smaller ones (a table entry must describe what was measured)."""
    _opencl(device)
    from hal.backends import opencl

    def too_large(*args, **kwargs):
        raise opencl._TooLarge("pool2d_max: work-group 256 above this kernel's limit 128")

    x = hal.asarray(random_input(1, (1, 2, 9, 9), "float32"), device=device)
    monkeypatch.setattr(device.backend, "_kernel", too_large)
    monkeypatch.setattr(device.backend, "exact_params", True)
    with pytest.raises(hal.HalError, match="cannot launch WG="):
        hal.max_pool2d(x, 3)


@pytest.mark.parametrize("path", OPENCL_POOL_PATHS, ids=lambda p: f"tile{p[0]}-{p[1]}kb-fixed{p[2]}")
@pytest.mark.parametrize("window", [(1, 2, 0), (2, 1, 0), (3, 2, 1), (2, 2, 0), (3, 1, 1)])
def test_opencl_pool_paths_write_only_their_outputs(device, path, window):
    """Guard canaries around every output (the tuner's evaluation): an out-of-bounds store
    shows here as damage instead of as a crash much later."""
    _opencl(device)
    from hal import spec as S
    from hal.tuning import evaluate
    k, s, p = window
    params = {**device.tuner.schemas["pool2d"].defaults(),
              "LOCAL_TILE": path[0], "BAND_KB": path[1], "FIXED_WINDOW": path[2]}
    for kind, layout, shape in itertools.product(("max", "avg"), ("NCHW", "NHWC"), ((1, 2, 9, 9), (2, 3, 23, 19))):
        geom = S.TensorGeometry(*shape, layout, np.dtype("float32"))
        spec = S.pool2d_spec(kind, geom, k, s, p, 1, False, True, None, kind == "max")
        problem = evaluate.make_problem(device.backend, spec, np.random.default_rng(5))
        launch, outs = evaluate.launcher(device.backend, problem, params)
        launch()
        got, damaged = evaluate.read_outputs(device.backend, problem, outs)
        assert not damaged, (kind, layout, damaged)
        result = evaluate.check(problem, got, evaluate.oracle(problem))
        assert result.ok, (kind, layout, result.detail)
