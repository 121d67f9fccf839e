"""Kernel paths the tables may choose, forced one by one on each device and checked against
the float64 oracle: a path no shipped table serves on this machine must still be right
before a tuning run or another device's table hands it out."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Mapping

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import hal
from hal import reference
from hal.conformance import compare, compare_indices, conv_scale
from hal.errors import HalValueError
from hal.tensor import poison_outputs
from hal.tuning.table import Resolved, kernel_key
from strategies import SETTINGS, dtypes, layouts, pool_oracle, random_input, seeds, shapes

# every test here serves fixed parameters (`forced`): the same under every HAL_OPENCL_PROFILE
pytestmark = pytest.mark.forced_params


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


#: pool2d paths of the OpenCL backend: (LOCAL_TILE, BAND_KB, FIXED_WINDOW); 4 KB bands split
#: the planes of the shapes below into several bands, the last one partial; the row strips
#: (3) apply to few of the random windows and widths, so they mostly check the fallback here
OPENCL_POOL_PATHS = [(0, 16, 1), (0, 16, 0), (1, 16, 1), (2, 4, 1), (2, 4, 0), (2, 16, 1), (3, 16, 1)]


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
    ref = pool_oracle(kind, x, **cfg)
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


@contextlib.contextmanager
def _kernels_built(device: hal.Device, files: tuple[str, ...], pick: Callable[[str, Mapping[str, int]], int]
                   ) -> Iterator[list[int]]:
    """pick(file, defines) of every kernel from `files` the OpenCL launcher asks for, in order. The
    backend's launch plans are dropped first: a launch planned before, with the same spec and
    parameters (by an earlier test: the order is pytest's), would otherwise ask for none."""
    backend = device.backend
    backend.drop_plans()
    original = backend._kernel
    seen: list[int] = []

    def spy(file: str, name: str, defines: Mapping[str, int], local: int) -> object:
        if file in files:
            seen.append(pick(file, defines))
        return original(file, name, defines, local)

    backend._kernel = spy
    try:
        yield seen
    finally:
        del backend._kernel


def built_paths(device: hal.Device) -> contextlib.AbstractContextManager[list[int]]:
    """The LOCAL_TILE of every pool2d.cl / qpool2d.cl kernel the OpenCL launcher asks for, in order."""
    return _kernels_built(device, ("pool2d.cl", "qpool2d.cl"), lambda f, d: d["LOCAL_TILE"])


def _pool_case(kind: str, extra: Mapping[str, object], x: np.ndarray, x_avg: np.ndarray,
               cfg: Mapping[str, object]) -> tuple | None:
    """(op, input, options, relu, float64 reference) of one pooling case: max pooling takes
    ``x`` (NaN, -inf), average ``x_avg``; ``extra`` holds the options and ``relu``. None
    where a window lies wholly in the padding (the op refuses it)."""
    opts = {key: v for key, v in extra.items() if key != "relu"}
    relu = bool(extra.get("relu", False))
    xk = x if kind == "max" else x_avg
    ref_fn = reference.max_pool2d if kind == "max" else reference.avg_pool2d
    try:
        ref = ref_fn(xk.astype(np.float64), **cfg, **opts)
    except HalValueError:
        return None
    if relu:
        ref = np.where(ref < 0, 0.0, ref)
    return (hal.max_pool2d if kind == "max" else hal.avg_pool2d), xk, opts, relu, ref


#: the packed int8/uint8 kernels (QROWS16=1 and 2, QVEC16=2, 3 and 4)
QPACK = "qpool2d_pack.cl"

#: row strips (LOCAL_TILE=3): shapes with IW % 8 == 0 (so VEC 4 and 8 both apply) that are
#: multiples of no strip or vector: odd and even IH, odd and even OW, partial last strips
STRIP_SHAPES = [(2, 3, 9, 40), (1, 2, 8, 24), (1, 3, 5, 16), (3, 2, 12, 8), (1, 2, 13, 112)]
#: (kernel, padding): symmetric pads 0 and 1, and asymmetric ones (any top, bottom and
#: right pad; left pad 0 or 1)
STRIP_WINDOWS = [(2, 0), (2, 1), (3, 0), (3, 1), (3, (2, 0, 1, 2)), (2, (0, 1, 0, 1))]
STRIP_KINDS = [("max", {}), ("max", {"relu": True}), ("avg", {"count_include_pad": True}),
               ("avg", {"count_include_pad": False}), ("avg", {"divisor_override": 5, "relu": True})]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("vec", [4, 8])
@pytest.mark.parametrize("rows", [2, 4])
def test_opencl_strip_path(device, dtype, vec, rows):
    """LOCAL_TILE=3 forced, and checked to be the path that ran, against the oracle: NaN
    and -inf inputs for max pooling (NaN propagates), every divisor rule, fused ReLU,
    ceil_mode (a last output whose vector column starts at IW), NaN-poisoned outputs."""
    _opencl(device)
    params = {"LOCAL_TILE": 3, "STRIP_ROWS": rows, "VEC": vec}
    for i, (shape, (k, pad), ceil) in enumerate(itertools.product(STRIP_SHAPES, STRIP_WINDOWS, (False, True))):
        x = random_input(1000 * vec + 10 * rows + i, shape, dtype, nan_fraction=0.03)
        x[0, 0, 0, : shape[3] // 2] = -np.inf
        x_avg = np.nan_to_num(x, neginf=-2.0)
        for kind, extra in STRIP_KINDS:
            cfg = {"kernel_size": k, "stride": 2, "padding": pad, "ceil_mode": ceil}
            case = _pool_case(kind, extra, x, x_avg, cfg)
            if case is None:
                continue
            op, xk, opts, relu, ref = case
            with forced(device, "pool2d", params), poison_outputs(), built_paths(device) as paths:
                out = op(hal.asarray(xk, device=device), **cfg, **opts, relu=relu)
            assert paths == [3], (shape, k, pad, ceil, kind, paths)
            with np.errstate(invalid="ignore"):  # compare's error bound on the -inf outputs
                r = compare(f"{kind}_pool2d", dtype, out.numpy(), ref)
            assert r.ok, (shape, k, pad, ceil, kind, extra, r.detail)


#: NHWC whole vectors (C % VEC == 0): every tap loaded from a clamped address, the ones
#: outside replaced by -inf / +0 (pool2d.cl's NHWC_CLAMPED_TAPS). Channels that fill 1-3
#: vectors of 8, odd sizes, windows reaching past every border, strides 1-3, dilation
NHWC_VECTOR_SHAPES = [(2, 8, 9, 7), (1, 16, 5, 13), (2, 24, 11, 6)]
NHWC_VECTOR_WINDOWS = [
    {"kernel_size": 3, "stride": 2, "padding": 1},
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
    {"kernel_size": (2, 3), "stride": (1, 3), "padding": (1, 0)},
    {"kernel_size": 4, "stride": 3, "padding": 2, "ceil_mode": True},
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("params", [{"VEC": 4}, {"VEC": 8}, {"VEC": 8, "HALF_RAW": 1}, {"VEC": 4, "FIXED_WINDOW": 0}],
                         ids=["vec4", "vec8", "vec8-raw", "vec4-runtime-window"])
def test_opencl_nhwc_whole_vector_taps(device, dtype, params):
    """NHWC with whole aligned vectors, forced, against the oracle with NaN-poisoned outputs:
    max without indices (NaN and -inf inputs: NaN propagates, a window of -inf gives -inf),
    with fused ReLU and with dilation 2; average under every divisor rule. Taps outside the
    input must not count, whatever their clamped loads read."""
    _opencl(device)
    for i, (shape, window) in enumerate(itertools.product(NHWC_VECTOR_SHAPES, NHWC_VECTOR_WINDOWS)):
        x = random_input(4000 + i, shape, dtype, nan_fraction=0.03)
        x[0, :, 0, :] = -np.inf  # a row of -inf on the border the clamped loads re-read
        x_avg = np.nan_to_num(x, neginf=-2.0)
        cases = [("max", {}), ("max", {"relu": True}), ("max", {"dilation": 2}), ("avg", {"count_include_pad": True}),
                 ("avg", {"count_include_pad": False}), ("avg", {"divisor_override": 5, "relu": True})]
        for kind, extra in cases:
            case = _pool_case(kind, extra, x, x_avg, window)
            if case is None:
                continue
            op, xk, opts, relu, ref = case
            with forced(device, "pool2d", {"LOCAL_TILE": 0, **params}), poison_outputs():
                out = op(hal.asarray(xk, device=device, layout="NHWC"), **window, **opts, relu=relu)
            with np.errstate(invalid="ignore"):
                r = compare(f"{kind}_pool2d", dtype, out.numpy(), ref)
            assert r.ok, (shape, window, kind, extra, r.detail)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_opencl_strip_path_falls_back_where_it_does_not_apply(device, dtype):
    """IW % VEC != 0, indices, NHWC, other windows: the launcher silently serves the row
    bands (or the vector path), and the results are right."""
    _opencl(device)
    cases = [  # (shape, layout, vec, op, cfg)
        ((2, 3, 9, 23), "NCHW", 4, "max", {"kernel_size": 3, "stride": 2, "padding": 1}),
        ((1, 2, 10, 20), "NCHW", 8, "avg", {"kernel_size": 2, "stride": 2, "count_include_pad": False}),
        ((2, 3, 9, 16), "NCHW", 4, "max", {"kernel_size": 3, "stride": 2, "padding": 1, "return_indices": True}),
        ((1, 3, 9, 16), "NHWC", 4, "avg", {"kernel_size": 3, "stride": 2, "padding": 1}),
        ((1, 2, 9, 16), "NCHW", 4, "max", {"kernel_size": 3, "stride": 1, "padding": 1}),
        ((1, 2, 9, 16), "NCHW", 8, "avg", {"kernel_size": 3, "stride": 2, "padding": 2}),
    ]
    for i, (shape, layout, vec, kind, cfg) in enumerate(cases):
        x = random_input(40 + i, shape, dtype, nan_fraction=0.03 if kind == "max" else 0.0)
        ref = (reference.max_pool2d if kind == "max" else reference.avg_pool2d)(x.astype(np.float64), **cfg)
        op = hal.max_pool2d if kind == "max" else hal.avg_pool2d
        params = {"LOCAL_TILE": 3, "VEC": vec}
        with forced(device, "pool2d", params), poison_outputs(), built_paths(device) as paths:
            out = op(hal.asarray(x, device=device, layout=layout), **cfg)
        assert paths and 3 not in paths, (shape, layout, cfg, paths)
        if cfg.get("return_indices"):
            (out, idx), (ref, ref_idx) = out, ref
            keep = ~np.isnan(ref)
            r = compare_indices(idx.numpy()[keep], ref_idx[keep])
            assert r.ok, r.detail
        r = compare(f"{kind}_pool2d", dtype, out.numpy(), ref)
        assert r.ok, (shape, layout, cfg, r.detail)


@pytest.mark.parametrize("rows", [2, 4])
@pytest.mark.parametrize("window", [(3, 2, 1), (3, 2, 0), (2, 2, 0), (2, 2, 1)])
def test_opencl_strip_path_writes_only_its_outputs(device, rows, window):
    """Guard canaries around every output of the row strips (the tuner's evaluation)."""
    _opencl(device)
    from hal import spec as S
    from hal.tuning import evaluate
    k, s, p = window
    params = {**device.tuner.schemas["pool2d"].defaults(), "LOCAL_TILE": 3, "STRIP_ROWS": rows}
    for kind, shape, ceil in itertools.product(("max", "avg"), ((1, 2, 9, 8), (2, 3, 23, 40)), (False, True)):
        geom = S.TensorGeometry(*shape, "NCHW", np.dtype("float32"))
        spec = S.pool2d_spec(kind, geom, k, s, p, 1, ceil, True, None, False)
        problem = evaluate.make_problem(device.backend, spec, np.random.default_rng(7))
        launch, outs = evaluate.launcher(device.backend, problem, params)
        with built_paths(device) as paths:
            launch()
        assert paths == [3], paths
        got, damaged = evaluate.read_outputs(device.backend, problem, outs)
        assert not damaged, (kind, shape, ceil, damaged)
        result = evaluate.check(problem, got, evaluate.oracle(problem))
        assert result.ok, (kind, shape, ceil, result.detail)


def test_opencl_strip_params_are_canonical(device):
    """STRIP_ROWS only matters to LOCAL_TILE=3, which always fixes its window (FIXED_WINDOW
    does not matter to it) and needs VEC 4 or 8, and to the int8/uint8 strips of QROWS16=1."""
    _opencl(device)
    schema = device.tuner.schemas["pool2d"]
    cands = schema.candidates()
    assert all(c["STRIP_ROWS"] == 4 for c in cands if c["LOCAL_TILE"] != 3 and not c["QROWS16"])
    assert {c["STRIP_ROWS"] for c in cands if c["LOCAL_TILE"] == 3} == {2, 4}
    assert {c["STRIP_ROWS"] for c in cands if c["QROWS16"] and c["LOCAL_TILE"] != 3} == {2, 4}
    assert all(c["FIXED_WINDOW"] == 1 for c in cands if c["LOCAL_TILE"] == 3)
    defaults = schema.defaults()
    assert defaults["LOCAL_TILE"] == 0 and defaults["STRIP_ROWS"] == 4
    assert schema.validate({**defaults, "LOCAL_TILE": 3, "VEC": 1}, device.info) is not None
    assert schema.validate({**defaults, "LOCAL_TILE": 3, "VEC": 8, "STRIP_ROWS": 2}, device.info) is None


@pytest.mark.parametrize("path", [{"LOCAL_TILE": 0, "VEC": 4}, {"LOCAL_TILE": 0, "VEC": 8},
                                  {"LOCAL_TILE": 3, "VEC": 4, "STRIP_ROWS": 2},
                                  {"LOCAL_TILE": 3, "VEC": 8, "STRIP_ROWS": 4}],
                         ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_opencl_half_raw(device, path, layout):
    """HALF_RAW=1: float16 vectors as raw 16-bit words converted in registers, on the vector
    paths (NCHW and NHWC) and the strips, aligned and unaligned widths, against the oracle."""
    _opencl(device)
    cases = [((2, 3, 13, 16), {"kernel_size": 3, "stride": 2, "padding": 1}),
             ((1, 16, 9, 24), {"kernel_size": 2, "stride": 2, "ceil_mode": True}),
             ((2, 5, 11, 21), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
             ((1, 8, 7, 40), {"kernel_size": 3, "stride": 1, "padding": 1})]
    for i, (shape, cfg) in enumerate(cases):
        x = random_input(70 + i, shape, "float16", nan_fraction=0.02)
        for kind in ("max", "avg"):
            xk = x if kind == "max" else np.nan_to_num(x)
            ref = (reference.max_pool2d if kind == "max" else reference.avg_pool2d)(xk.astype(np.float64), **cfg)
            op = hal.max_pool2d if kind == "max" else hal.avg_pool2d
            with forced(device, "pool2d", {**path, "HALF_RAW": 1}), poison_outputs():
                out = op(hal.asarray(xk, device=device, layout=layout), **cfg, relu=(i == 2))
            if i == 2:
                ref = np.where(ref < 0, 0.0, ref)
            r = compare(f"{kind}_pool2d", "float16", out.numpy(), ref)
            assert r.ok, (shape, cfg, kind, r.detail)


#: the divisor rules the quantized pooling tests run: max, then average with and without the
#: padding counted and with overrides below and above 9 taps
_QUANT_POOL_KINDS = (("max", True, None), ("avg", True, None), ("avg", False, None), ("avg", True, 3),
                     ("avg", False, 11))


def _quantized_stride2_pools(shape, dtype, zp, windows):
    """(spec, (k, pad, ceil, kind, include_pad, divisor)) for each stride-2 window (k, pad, ceil) and
    each of _QUANT_POOL_KINDS that pool2d_spec accepts on an NCHW int tensor of `shape`; averages
    carry the zero point `zp`."""
    from dataclasses import replace

    from hal.spec import TensorGeometry, pool2d_spec

    geom = TensorGeometry(*shape, "NCHW", np.dtype(dtype))
    for k, pad, ceil in windows:
        for kind, include_pad, divisor in _QUANT_POOL_KINDS:
            try:
                spec = pool2d_spec(kind, geom, k, 2, pad, 1, ceil, include_pad, divisor, False)
            except HalValueError:
                continue
            yield (replace(spec, zero_point=zp) if kind == "avg" else spec), (k, pad, ceil, kind, include_pad, divisor)


def _quantized_pool(qt, k, pad, ceil, kind, include_pad, divisor):
    """hal's stride-2 max or average pooling of `qt` (one of _quantized_stride2_pools' cases)."""
    if kind == "max":
        return hal.max_pool2d(qt, k, 2, pad, ceil_mode=ceil)
    return hal.avg_pool2d(qt, k, 2, pad, ceil_mode=ceil, count_include_pad=include_pad, divisor_override=divisor)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("path", [{"LOCAL_TILE": 3, "VEC": 4, "STRIP_ROWS": 2},
                                  {"LOCAL_TILE": 3, "VEC": 8, "STRIP_ROWS": 4}],
                         ids=lambda p: f"vec{p['VEC']}-rows{p['STRIP_ROWS']}")
def test_opencl_quantized_strip_path(device, dtype, path):
    """int8/uint8 row strips (qpool2d.cl, LOCAL_TILE=3), checked to be the path that ran,
    exactly against the quantized oracle: both windows, both left pads, ceil_mode, every
    divisor rule (overrides below and above the 9 taps the strips' reciprocal table holds),
    zero points across the range (saturation), widths that are multiples of VEC with odd
    heights and output widths."""
    _opencl(device)


    rng = np.random.default_rng(7 + path["VEC"])
    info = np.iinfo(dtype)
    shapes = [(2, 3, 13, 16), (1, 5, 9, 24), (1, 2, 20, 40), (2, 1, 7, 8)]
    for shape in shapes:
        q = rng.integers(info.min, info.max + 1, shape).astype(dtype)
        zp = int(rng.integers(info.min, info.max + 1))
        windows = ((3, 1, False), (3, 1, True), (3, 0, True), (2, 0, False), (2, 1, True), (2, 0, True))
        for spec, (k, pad, ceil, kind, include_pad, divisor) in _quantized_stride2_pools(shape, dtype, zp, windows):
            want, _ = reference.quantized_pool2d_from_spec(spec, q)
            qt = hal.asarray(q, device=device, scale=0.5, zero_point=zp)
            with forced(device, "pool2d", path), poison_outputs(), built_paths(device) as paths:
                y = _quantized_pool(qt, k, pad, ceil, kind, include_pad, divisor)
            assert paths == [3], (shape, k, pad, ceil, kind, paths)
            np.testing.assert_array_equal(y.numpy(), want, err_msg=str((shape, k, pad, ceil, kind, divisor, zp)))


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("vec", [1, 4, 8])
@pytest.mark.parametrize("fixed", [0, 1])
def test_opencl_quantized_nhwc_paths(device, dtype, vec, fixed):
    """int8/uint8 NHWC pooling (qpool2d.cl): whole aligned words where C % VEC == 0 (C 8 and
    16; LDQV_A, STQV_A), the element-aligned gather with a partial last vector otherwise (C 12
    at VEC 8, C 5); the window built in (FIXED_WINDOW, common windows) or not; taps outside the
    input on every side, dilation, ceil_mode, every divisor rule, max with and without
    indices (POOL_NO_IDX); exactly against the quantized oracle, outputs poisoned."""
    _opencl(device)
    from dataclasses import replace

    from hal.spec import TensorGeometry, pool2d_spec

    rng = np.random.default_rng(40 + vec)
    info = np.iinfo(dtype)
    windows = ((3, 2, 1, 1, False), (3, 1, 2, 2, True), (2, 2, 0, 1, True), (3, 2, 1, 1, True))
    for shape in [(2, 8, 9, 11), (1, 16, 7, 10), (2, 12, 6, 9), (1, 5, 8, 7)]:
        q = rng.integers(info.min, info.max + 1, shape).astype(dtype)
        zp = int(rng.integers(info.min, info.max + 1))
        qt = hal.asarray(q, device=device, layout="NHWC", scale=0.5, zero_point=zp)
        for k, s, pad, dil, ceil in windows:
            for kind, include_pad, divisor in (("max", True, None), ("avg", True, None), ("avg", False, None),
                                               ("avg", True, 5)):
                if kind == "avg" and dil > 1:
                    include_pad = False  # dilated average: the divisor rule without padding counts
                geom = TensorGeometry(*shape, "NCHW", np.dtype(dtype))
                spec = pool2d_spec(kind, geom, k, s, pad, dil, ceil, include_pad, divisor, False)
                spec = replace(spec, zero_point=zp) if kind == "avg" else spec
                want, want_idx = reference.quantized_pool2d_from_spec(spec, q)
                label = str((shape, k, s, pad, dil, ceil, kind, include_pad, divisor, zp))
                with forced(device, "pool2d", {"VEC": vec, "FIXED_WINDOW": fixed}), poison_outputs():
                    if kind == "max":
                        y, idx = hal.max_pool2d(qt, k, s, pad, dil, ceil_mode=ceil, return_indices=True)
                        np.testing.assert_array_equal(idx.numpy(), want_idx, err_msg=label)
                        np.testing.assert_array_equal(y.numpy(), want, err_msg=label)
                        y = hal.max_pool2d(qt, k, s, pad, dil, ceil_mode=ceil)
                    else:
                        y = hal.avg_pool2d(qt, k, s, pad, ceil_mode=ceil, count_include_pad=include_pad,
                                           divisor_override=divisor, dilation=dil)
                np.testing.assert_array_equal(y.numpy(), want, err_msg=label)


#: qpool2d_pack.cl's NHWC builds: output pixels per work-item (QP_PIX, absent for one) -> QVEC16
_QPIX_QVEC16 = {1: 2, 2: 3, 4: 4}


def built_q16(device: hal.Device) -> contextlib.AbstractContextManager[list[int]]:
    """QPOOL_VEC16 (0 when absent) of every qpool2d.cl kernel the OpenCL launcher asks for, in
    order, and for each of qpool2d_pack.cl's NHWC kernels the QVEC16 value that builds it
    (2; 3 and 4: QP_PIX 2 and 4)."""
    return _kernels_built(device, ("qpool2d.cl", QPACK),
                          lambda f, d: _QPIX_QVEC16[d.get("QP_PIX", 1)] if f == QPACK else d.get("QPOOL_VEC16", 0))


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("wg, qvec", [(64, 1), (128, 1), (128, 2), (128, 3), (64, 4), (256, 4)])
def test_opencl_quantized_nhwc16_path(device, dtype, wg, qvec):
    """int8/uint8 NHWC pooling, 16 channels per work-item (QVEC16=1; 2: the same on packed
    16-bit lanes, qpool2d_pack.cl; 3 and 4: 2 and 4 output pixels per work-item, output widths
    that are multiples of neither): aligned 16-byte taps (C 16, 32), vload16 and a partial
    last group (C 20, 37, 5); windows 3x3/2, 3x3/1, 2x2/2 and 1x1 with pads 0 and 1 and
    ceil_mode (taps outside on every side), every divisor rule, zero points at and across the
    range (saturation); checked to be the path that ran, exactly against the quantized
    oracle, outputs poisoned. Max with indices and dilated windows run the VEC path instead."""
    _opencl(device)
    from dataclasses import replace

    from hal.spec import TensorGeometry, pool2d_spec

    rng = np.random.default_rng(160 + wg)
    info = np.iinfo(dtype)
    windows = ((3, 2, 1, False), (3, 2, 1, True), (3, 2, 0, True), (3, 1, 1, False), (2, 2, 0, True),
               (2, 2, 1, False), (1, 1, 0, False))
    shapes = [(2, 16, 9, 11), (1, 32, 7, 6), (2, 20, 6, 9), (1, 37, 5, 8), (1, 5, 8, 7)]
    for i, shape in enumerate(shapes):
        q = rng.integers(info.min, info.max + 1, shape).astype(dtype)
        zp = (info.min, info.max, int(rng.integers(info.min, info.max + 1)))[i % 3]
        qt = hal.asarray(q, device=device, layout="NHWC", scale=0.5, zero_point=zp)
        for k, s, pad, ceil in windows:
            for kind, include_pad, divisor in (("max", True, None), ("avg", True, None), ("avg", False, None),
                                               ("avg", True, 7)):
                geom = TensorGeometry(*shape, "NCHW", np.dtype(dtype))
                try:
                    spec = pool2d_spec(kind, geom, k, s, pad, 1, ceil, include_pad, divisor, False)
                except HalValueError:
                    continue
                spec = replace(spec, zero_point=zp) if kind == "avg" else spec
                want, want_idx = reference.quantized_pool2d_from_spec(spec, q)
                label = str((shape, k, s, pad, ceil, kind, include_pad, divisor, zp))
                with forced(device, "pool2d", {"QVEC16": qvec, "WG": wg}), poison_outputs(), \
                        built_q16(device) as built:
                    if kind == "max":
                        y = hal.max_pool2d(qt, k, s, pad, ceil_mode=ceil)
                    else:
                        y = hal.avg_pool2d(qt, k, s, pad, ceil_mode=ceil, count_include_pad=include_pad,
                                           divisor_override=divisor)
                assert built == [qvec], label
                np.testing.assert_array_equal(y.numpy(), want, err_msg=label)
                if kind == "max":  # with indices, or dilated: the VEC path
                    with forced(device, "pool2d", {"QVEC16": qvec, "WG": wg}), poison_outputs(), \
                            built_q16(device) as built:
                        y, idx = hal.max_pool2d(qt, k, s, pad, ceil_mode=ceil, return_indices=True)
                    assert built == [0], label
                    np.testing.assert_array_equal(y.numpy(), want, err_msg=label)
                    np.testing.assert_array_equal(idx.numpy(), want_idx, err_msg=label)


def _tie_windows(rng: np.random.Generator, shape: tuple[int, int, int, int], lo: int, hi: int,
                 targets: list[int]) -> np.ndarray:
    """NCHW integers in [lo, hi] whose 2x2 stride-2 windows (no padding) have centred sums
    drawn from ``targets`` (those within reach of four taps, else random)."""
    n, c, h, w = shape
    t = rng.choice(targets, (n, c, h // 2, w // 2))
    t = np.where((t >= 4 * lo) & (t <= 4 * hi), t, rng.integers(4 * lo, 4 * hi + 1, t.shape))
    base, rem = t // 4, t % 4
    q = np.empty(shape, np.int64)
    for i, (dh, dw) in enumerate(((0, 0), (0, 1), (1, 0), (1, 1))):
        q[:, :, dh::2, dw::2] = base + (rem > i)
    return q


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("qvec", [1, 3, 4])
def test_opencl_quantized_nhwc16_divisors(device, dtype, qvec):
    """The QVEC16 average's integer division (qpool2d.cl's q16_div_round_even; 3 and 4:
    qpool2d_pack.cl's division on 16-bit lane pairs where the divisor is the count of taps
    inside, else QVEC16=2's) through the forced path: divisor overrides 1 (the sum itself,
    saturating), 2, 6, 11, 300, 1000 and 2^31 - 1 beside both padding rules, zero points at,
    next to and inside the range ends, C a multiple of 16 and not, shapes no tile divides,
    pads and ceil_mode; and windows whose
    sums are built to be exact ties (k + 1/2, both signs) of the even divisors, so rounding
    half to even decides them. Exactly against the quantized oracle, outputs poisoned."""
    _opencl(device)
    from dataclasses import replace

    from hal.spec import TensorGeometry, pool2d_spec

    rng = np.random.default_rng(1600)
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    divisors = (None, 1, 2, 6, 11, 300, 1000, 2**31 - 1)
    zps = (lo, lo + 1, hi - 1, hi, (lo + hi) // 2)
    cases = []  # (shape, q, zp, windows, divisors)
    for i, shape in enumerate([(2, 16, 9, 11), (1, 21, 7, 13), (1, 48, 5, 6), (2, 5, 11, 7)]):
        zp = zps[i % len(zps)]
        cases.append((shape, rng.integers(lo, hi + 1, shape), zp,
                      ((3, 2, 1, False), (3, 2, 1, True), (2, 2, 1, True), (3, 1, 0, False)), divisors))
    for shape in [(1, 32, 10, 14), (2, 19, 6, 10)]:
        for zp in zps:  # the centred taps lie in [lo - zp, hi - zp]
            for d in (2, 6, 300, 1000):
                ties = [(2 * k + 1) * d // 2 for k in range(-8, 8)]
                q = _tie_windows(rng, shape, lo - zp, hi - zp, ties) + zp
                cases.append((shape, q, zp, ((2, 2, 0, False),), (d, None) if d == 2 else (d,)))  # specs once
    for shape, q, zp, windows, divs in cases:
        q = q.astype(dtype)
        qt = hal.asarray(q, device=device, layout="NHWC", scale=0.5, zero_point=zp)
        geom = TensorGeometry(*shape, "NCHW", np.dtype(dtype))
        for k, s, pad, ceil in windows:
            for divisor in divs:
                for include_pad in (True, False):
                    spec = replace(pool2d_spec("avg", geom, k, s, pad, 1, ceil, include_pad, divisor, False),
                                   zero_point=zp)
                    want, _ = reference.quantized_pool2d_from_spec(spec, q)
                    label = str((shape, k, s, pad, ceil, include_pad, divisor, zp))
                    with forced(device, "pool2d", {"QVEC16": qvec}), poison_outputs(), \
                            built_q16(device) as built:
                        y = hal.avg_pool2d(qt, k, s, pad, ceil_mode=ceil, count_include_pad=include_pad,
                                           divisor_override=divisor)
                    assert built == [qvec], label
                    np.testing.assert_array_equal(y.numpy(), want, err_msg=label)


def built_qpack(device: hal.Device) -> contextlib.AbstractContextManager[list[int]]:
    """1 for every qpool2d_pack.cl kernel the OpenCL launcher asks for, 0 for every qpool2d.cl one, in order."""
    return _kernels_built(device, ("qpool2d.cl", QPACK), lambda f, d: int(f == QPACK))


def built_qpack_variant(device: hal.Device) -> contextlib.AbstractContextManager[list[int]]:
    """As built_qpack, with 2 for the NCHW strips' second average (QP_V2: QROWS16=2) and the
    QVEC16 value of the NHWC builds with several pixels per work-item (3, 4)."""
    def pick(f: str, d: Mapping[str, int]) -> int:
        if f != QPACK:
            return 0
        return _QPIX_QVEC16[d["QP_PIX"]] if "QP_PIX" in d else 1 + d.get("QP_V2", 0)

    return _kernels_built(device, ("qpool2d.cl", QPACK), pick)


#: QROWS16 (NCHW): rows of 16 aligned bytes (IW 16, 48, 112) and of four words with a partial
#: last chunk (IW 20, 24, 44); odd and even heights and output widths (OW 12: 4-byte stores),
#: one channel and several, planes narrower than one chunk; IW 7 (not a multiple of 4) runs
#: qpool2d.cl instead
ROWS16_SHAPES = [(2, 3, 13, 16), (1, 5, 9, 20), (1, 1, 5, 44), (2, 2, 8, 24), (1, 2, 7, 48), (1, 1, 11, 112),
                 (1, 2, 5, 7)]


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("qrows, rows, wg", [(1, 2, 32), (1, 4, 256), (2, 2, 32), (2, 4, 256), (2, 4, 64)])
def test_opencl_quantized_rows16_path(device, dtype, qrows, rows, wg):
    """int8/uint8 NCHW pooling on packed bytes (QROWS16=1, qpool2d_pack.cl; 2: the average with
    rows unpacked once and the K*K divisor on 16-bit lane pairs, max as 1): 2x2 and 3x3 windows
    of stride 2 with left pads 0 and 1 (the four tap layouts), ceil_mode (windows past the
    bottom and right edges), every divisor rule (the integer division, ties included: 2x2 and
    corner windows divide by 4 and 6) and overrides below and above 9 taps, zero points at the
    range's ends and inside it; checked to be the path that ran (qpool2d.cl where IW % 4 != 0
    and for max with indices), exactly against the quantized oracle, outputs poisoned."""
    _opencl(device)


    rng = np.random.default_rng(1700 + rows + 10 * qrows)
    info = np.iinfo(dtype)
    params = {"QROWS16": qrows, "STRIP_ROWS": rows, "WG": wg}
    for i, shape in enumerate(ROWS16_SHAPES):
        packed = shape[3] % 4 == 0
        q = rng.integers(info.min, info.max + 1, shape).astype(dtype)
        zp = (info.min, info.max, int(rng.integers(info.min, info.max + 1)))[i % 3]
        qt = hal.asarray(q, device=device, scale=0.5, zero_point=zp)
        windows = ((3, 1, False), (3, 1, True), (3, 0, True), (3, 0, False), (2, 0, False), (2, 1, True),
                   (2, 0, True))
        for spec, (k, pad, ceil, kind, include_pad, divisor) in _quantized_stride2_pools(shape, dtype, zp, windows):
            want, want_idx = reference.quantized_pool2d_from_spec(spec, q)
            label = str((shape, k, pad, ceil, kind, include_pad, divisor, zp))
            with forced(device, "pool2d", params), poison_outputs(), built_qpack_variant(device) as built:
                y = _quantized_pool(qt, k, pad, ceil, kind, include_pad, divisor)
            variant = qrows if kind == "avg" else 1  # QROWS16=2's max is QROWS16=1's kernel
            assert built == [variant if packed else 0], label
            np.testing.assert_array_equal(y.numpy(), want, err_msg=label)
            if kind == "max" and ceil:  # with indices: qpool2d.cl
                with forced(device, "pool2d", params), poison_outputs(), built_qpack(device) as built:
                    y, idx = hal.max_pool2d(qt, k, 2, pad, ceil_mode=ceil, return_indices=True)
                assert built == [0], label
                np.testing.assert_array_equal(y.numpy(), want, err_msg=label)
                np.testing.assert_array_equal(idx.numpy(), want_idx, err_msg=label)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_opencl_quantized_packed_ties(device, dtype):
    """The packed kernels' integer division (qpool2d_pack.cl's qp_div_ties, QROWS16=1 and
    QVEC16=2) on windows whose sums are exact ties: 2x2 stride-2 windows without padding divide
    by 4 under both rules, and their centred sums are built as 4 k + 2 (k + 1/2 after the
    division, both signs), so rounding half to even decides every output; the same inputs with
    divisor overrides 2 and 6 (the float path) built the same way; zero points at, next to and
    inside the range's ends. NCHW (widths 20 and 16) and NHWC (C 32 and 19). Exactly against
    the quantized oracle, outputs poisoned."""
    _opencl(device)
    from dataclasses import replace

    from hal.spec import TensorGeometry, pool2d_spec

    rng = np.random.default_rng(1800)
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    for layout, params, sizes in (("NCHW", {"QROWS16": 1, "STRIP_ROWS": 2}, [(1, 3, 10, 20), (2, 2, 6, 16)]),
                                  ("NCHW", {"QROWS16": 2, "STRIP_ROWS": 4}, [(1, 3, 10, 20), (2, 2, 6, 16)]),
                                  ("NHWC", {"QVEC16": 2}, [(1, 32, 10, 14), (2, 19, 6, 10)]),
                                  ("NHWC", {"QVEC16": 3}, [(1, 32, 10, 14), (2, 19, 6, 10)]),
                                  ("NHWC", {"QVEC16": 4}, [(1, 32, 10, 14), (2, 19, 6, 10)])):
        for shape in sizes:
            for zp in (lo, lo + 1, hi - 1, hi, (lo + hi) // 2):  # the centred taps lie in [lo - zp, hi - zp]
                for d, divisor in ((4, None), (2, 2), (6, 6)):
                    ties = [(2 * k + 1) * d // 2 for k in range(-8, 8)]
                    q = (_tie_windows(rng, shape, lo - zp, hi - zp, ties) + zp).astype(dtype)
                    qt = hal.asarray(q, device=device, layout=layout, scale=0.5, zero_point=zp)
                    geom = TensorGeometry(*shape, "NCHW", np.dtype(dtype))
                    for include_pad in (True, False) if divisor is None else (True,):
                        spec = replace(pool2d_spec("avg", geom, 2, 2, 0, 1, False, include_pad, divisor, False),
                                       zero_point=zp)
                        want, _ = reference.quantized_pool2d_from_spec(spec, q)
                        label = str((layout, shape, zp, d, divisor, include_pad))
                        with forced(device, "pool2d", params), poison_outputs(), built_qpack(device) as built:
                            y = hal.avg_pool2d(qt, 2, 2, 0, count_include_pad=include_pad, divisor_override=divisor)
                        assert built == [1], label
                        np.testing.assert_array_equal(y.numpy(), want, err_msg=label)


@pytest.mark.parametrize("params", [{"QROWS16": 1, "STRIP_ROWS": 2}, {"QROWS16": 1, "STRIP_ROWS": 4},
                                    {"QROWS16": 2, "STRIP_ROWS": 2}, {"QROWS16": 2, "STRIP_ROWS": 4},
                                    {"QVEC16": 2}, {"QVEC16": 3}, {"QVEC16": 4}],
                         ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
def test_opencl_quantized_packed_paths_write_only_their_outputs(device, params):
    """The packed int8/uint8 kernels under the tuner's evaluation: outputs poisoned with the
    dtype's minimum, then its maximum (an unwritten byte differs from the oracle in one of the
    two), followed by guard canaries that must come back untouched (a store past the output);
    widths whose last chunk or channel group is partial, both dtypes, max and average."""
    _opencl(device)
    from dataclasses import replace

    from hal import spec as S
    from hal.tuning import evaluate

    full = {**device.tuner.schemas["pool2d"].defaults(), **params}
    layout = "NHWC" if "QVEC16" in params else "NCHW"
    sizes = ((1, 3, 9, 20), (2, 1, 6, 16)) if layout == "NCHW" else ((1, 20, 7, 9), (2, 32, 5, 6))
    for dtype, kind, shape, (k, pad, ceil) in itertools.product(
            ("int8", "uint8"), ("max", "avg"), sizes, ((3, 1, True), (2, 0, False))):
        geom = S.TensorGeometry(*shape, layout, np.dtype(dtype))
        spec = S.pool2d_spec(kind, geom, k, 2, pad, 1, ceil, False, None, False)
        spec = replace(spec, zero_point=-5 if dtype == "int8" else 200) if kind == "avg" else spec
        assert device.backend.launch_signature(spec, full)[0] == QPACK, (spec, full)
        problem = evaluate.make_problem(device.backend, spec, np.random.default_rng(19))
        want = evaluate.oracle(problem)
        for high in evaluate.poison_passes(spec.dtype):
            launch, outs = evaluate.launcher(device.backend, problem, full, high=high)
            launch()
            got, damaged = evaluate.read_outputs(device.backend, problem, outs, high)
            label = (dtype, kind, shape, k, pad, ceil, high)
            assert not damaged, (label, damaged)
            result = evaluate.check(problem, got, want)
            assert result.ok, (label, result.detail)


def _limit_work_groups(be: object, monkeypatch: pytest.MonkeyPatch, limit: int = 64) -> None:
    """Make every kernel the OpenCL backend builds refuse work-groups above ``limit``."""
    from hal.backends import opencl as ocl

    real_kernel = be._kernel

    def limited(file: str, name: str, defines: Mapping[str, int], local: int) -> object:
        if local > limit:
            raise ocl._TooLarge(f"{name}: work-group {local} above this test's limit {limit}")
        return real_kernel(file, name, defines, local)

    monkeypatch.setattr(be, "_kernel", limited)


def test_opencl_pool_plans_keep_the_launch_limits(device, monkeypatch):
    """The OpenCL pooling launcher plans a (spec, parameters) pair once. A work-group the built
    kernel refuses is shrunk once (served calls) and refused under ``exact_params`` (the tuner):
    the stored plan of the first must not serve the second. Outputs checked against the oracle."""
    _opencl(device)
    from hal.errors import LaunchLimitExceeded

    be = device.backend
    be.drop_plans()
    _limit_work_groups(be, monkeypatch)
    x = random_input(21, (2, 5, 13, 11), "float32")
    xt = hal.asarray(x, device=device)
    spec = hal.spec.pool2d_spec("max", xt.geometry(), 3, 2, 1, 1, False, True, None, False)
    params = {**device.tuner.schemas["pool2d"].defaults(), "WG": 256, "VEC": 1, "LOCAL_TILE": 0}
    want = reference.max_pool2d(x.astype(np.float64), 3, 2, 1)
    for _ in range(2):  # planned, then served from the plan
        with poison_outputs(), pytest.warns(UserWarning) if not be._plans else contextlib.nullcontext():
            y = hal.tensor.empty(spec.out_shape, np.float32, device)
            be.pool2d(spec, xt.buffer, y.buffer, None, params)
        r = compare("max_pool2d", "float32", y.numpy(), want)
        assert r.ok, r.detail
    be.exact_params = True
    try:
        with pytest.raises(LaunchLimitExceeded):
            be.pool2d(spec, xt.buffer, y.buffer, None, params)
    finally:
        be.exact_params = False


@pytest.mark.parametrize("training", [False, True])
def test_opencl_batch_norm_plans_keep_the_launch_limits(device, monkeypatch, training):
    """The same for the OpenCL BatchNorm launcher's plans (inference, and training's three
    launches with their per-call workspaces); running statistics checked too."""
    _opencl(device)
    from hal.errors import LaunchLimitExceeded

    be = device.backend
    be.drop_plans()
    _limit_work_groups(be, monkeypatch)
    shape = (3, 5, 7, 9)
    x = random_input(22, shape, "float32", mean=2.0)
    rng = np.random.default_rng(23)
    weight, bias = rng.standard_normal(5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    xt = hal.asarray(x, device=device)
    spec = hal.spec.batch_norm_spec(xt.geometry(), training, 0.1, 1e-5, True)
    params = {**device.tuner.schemas["batch_norm"].defaults(), "WG": 256}
    for i in range(2):  # planned, then served from the plan
        rm = rng.standard_normal(5).astype(np.float32)
        rv = rng.uniform(0.5, 2.0, 5).astype(np.float32)
        ref_rm, ref_rv = rm.astype(np.float64), rv.astype(np.float64)
        want = reference.batch_norm(x.astype(np.float64), ref_rm, ref_rv, weight, bias, training, 0.1, 1e-5)
        bufs = [hal.asarray(a, device=device) for a in (weight, bias, rm, rv)]
        with poison_outputs(), pytest.warns(UserWarning) if i == 0 else contextlib.nullcontext():
            y = hal.tensor.empty(shape, np.float32, device)
            be.batch_norm(spec, xt.buffer, y.buffer, *(b.buffer for b in bufs), params)
        r = compare("batch_norm", "float32", y.numpy(), want)
        assert r.ok, r.detail
        for got, ref in ((bufs[2].numpy(), ref_rm), (bufs[3].numpy(), ref_rv)):
            r = compare("batch_norm", "float32", got, ref)
            assert r.ok, r.detail
    be.exact_params = True
    try:
        with pytest.raises(LaunchLimitExceeded):
            be.batch_norm(spec, xt.buffer, y.buffer, *(b.buffer for b in bufs), params)
    finally:
        be.exact_params = False


#: the register-tiled direct conv's parameters (CUDA: conv2d_grp_*), one set at a time over the
#: defaults (8 x 4); every GRP_COT and GRP_PIX value, though not every pair: each pair is a build
#: of conv2d.cu per dtype and layout (tools/cuda_emu.py runs other pairs)
TILED_CONV_PARAMS = [{"GRP_COT": 1, "GRP_PIX": 1}, {"GRP_COT": 2, "GRP_PIX": 4}, {"GRP_COT": 4, "GRP_PIX": 2},
                     {"GRP_TILE_W": 4}, {"GRP_TILE_W": 64}, {"GRP_CIC": 1}, {"GRP_CIC": 16},
                     {"CONV_THREADS": 128, "GRP_PIX": 2}, {"GRP_OCC": 1024}, {"GRP_TILED": 0},
                     # float16 grouped convs on tensor cores (the others run the tiled kernel)
                     {"GRP_TC": 1}, {"GRP_TC": 1, "GRP_TC_ROWS": 4}]

#: (shape, weight shape, conv arguments): groups 8 with 3x3 stride 1 (conv2d_grp_k3s1), 13
#: channels a group (odd: GRP_TC pads one, conv2d_grp_tc16), a dense 5x5 stride 2 over 20
#: input channels (several staged chunks), a channel multiplier of 3 with dilation 2 and
#: asymmetric padding; widths and heights no multiple of a tile
TILED_CONV_CASES = [((2, 64, 13, 19), (64, 8, 3, 3), {"padding": 1, "groups": 8}),
                    ((2, 26, 11, 37), (26, 13, 3, 3), {"padding": (1, 0), "groups": 2}),
                    ((1, 20, 21, 37), (12, 20, 5, 5), {"stride": 2, "padding": 2}),
                    ((2, 5, 17, 11), (15, 1, 3, 3), {"padding": (2, 1), "dilation": 2, "groups": 5})]


@pytest.mark.parametrize("params", TILED_CONV_PARAMS, ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_tiled_direct_conv_paths(device, params, dtype):
    """Each tile shape of the tiled direct conv, forced, on both layouts against the oracle."""
    if "GRP_TILED" not in device.tuner.schemas["conv2d"].defaults():
        pytest.skip("the tiled direct conv's parameters are CUDA's")
    for i, (shape, wshape, kw) in enumerate(TILED_CONV_CASES):
        x = random_input(31 + i, shape, dtype)
        w = random_input(41 + i, wshape, dtype) * np.asarray(0.3, dtype=dtype)
        b = random_input(51 + i, (wshape[0],), dtype) if i != 2 else None
        ref = reference.conv2d(x.astype(np.float64), w.astype(np.float64),
                               None if b is None else b.astype(np.float64), **kw)
        for layout in ("NCHW", "NHWC"):
            with forced(device, "conv2d", params), poison_outputs():
                y = hal.conv2d(hal.asarray(x, device=device, layout=layout), hal.asarray(w, device=device), b, **kw)
            scale = conv_scale(x.astype(np.float64), w.astype(np.float64),
                               None if b is None else b.astype(np.float64), **kw)
            r = compare("conv2d", dtype, y.numpy(), ref, scale)
            assert r.ok, f"{shape} {wshape} {kw} {layout}: {r.detail}"
