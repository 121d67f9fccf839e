"""Native half arithmetic (HALF_ARITH=1) of the OpenCL pooling kernels, on a device with cl_khr_fp16.

The AMD, Mali and Adreno tables ask for HALF_ARITH=1 in float16 max pooling; PoCL lacks
``cl_khr_fp16``, so the emulated profiles there serve the float path instead. Intel's CPU
OpenCL runtime has the extension: ``make opencl-intel`` runs this file on it (CI does too),
so the half code paths are built and checked against the oracle somewhere. On a device
without the extension every test here skips with that reason.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_forced_params import _kernels_built, forced

import hal
from hal import reference
from hal.conformance import compare, compare_indices
from hal.tensor import poison_outputs
from strategies import SETTINGS, pool_oracle, random_input, seeds, shapes

pytestmark = pytest.mark.forced_params


def _half_device(device: hal.Device) -> None:
    """Skip unless ``device`` is OpenCL with cl_khr_fp16, and prove its compiler defines the macro
    the kernels test (``defined(cl_khr_fp16)``): else HALF_ARITH=1 would build the float path."""
    if device.kind != "opencl":
        pytest.skip("OpenCL HALF_ARITH")
    if not device.info.fp16:
        pytest.skip(f"{device.id} lacks cl_khr_fp16 (PoCL does; `make opencl-intel` runs these on Intel's CPU runtime)")
    import pyopencl as cl

    backend = device.backend
    src = "#ifndef cl_khr_fp16\n#error cl_khr_fp16 undefined\n#endif\n__kernel void probe(__global float *x) { }\n"
    cl.Program(backend._rt.context, src).build()


def _half_arith_of(file: str, defines: Mapping[str, int]) -> int:
    return int(defines.get("HALF_ARITH", 0))


def _check_max(device: hal.Device, x: np.ndarray, layout: str, cfg: dict, relu: bool,
               params: Mapping[str, int], adaptive: bool = False) -> None:
    """Run max pooling with ``params`` forced, assert every kernel built for it had HALF_ARITH=1, and
    compare values (and indices where asked) with the oracle."""
    if adaptive:
        ref = reference.adaptive_max_pool2d(x.astype(np.float64), cfg["output_size"], cfg["return_indices"])
    else:
        ref = pool_oracle("max", x, **cfg)  # a window the spec refuses: the example is discarded
    files = ("adaptive_pool2d.cl",) if adaptive else ("pool2d.cl",)
    kernel = "adaptive_pool2d" if adaptive else "pool2d"
    xt = hal.asarray(x, device=device, layout=layout)
    with forced(device, kernel, params), poison_outputs(), _kernels_built(device, files, _half_arith_of) as built:
        if adaptive:
            out = hal.adaptive_max_pool2d(xt, cfg["output_size"], return_indices=cfg["return_indices"])
        else:
            out = hal.max_pool2d(xt, **cfg, relu=relu)
    assert all(built), f"a kernel built without HALF_ARITH: {built}"
    if cfg.get("return_indices"):
        (out, idx), (ref, ref_idx) = out, ref
        keep = ~np.isnan(ref)
        r = compare_indices(idx.numpy()[keep], ref_idx[keep])
        assert r.ok, (cfg, layout, dict(params), r.detail)
    if relu:
        ref = np.where(ref < 0, 0.0, ref)
    assert out.dtype == np.float16
    r = compare("max_pool2d", "float16", out.numpy(), ref)
    assert r.ok, (cfg, layout, dict(params), relu, r.detail)


def _input(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    """float16 data with NaNs, infinities of both signs and values past float16's normal range's middle."""
    x = random_input(seed, shape, "float16", nan_fraction=0.05)
    rng = np.random.default_rng(seed + 1)
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, size=min(flat.size, 3), replace=False)
    flat[picks] = np.array([-np.inf, np.inf, 6.0e4], dtype=np.float16)[: picks.size]
    return x


#: (VEC, INTERIOR): every vector width, NCHW's mask-free interior path on and off
HALF_POOL_PARAMS = [(1, 0), (4, 0), (4, 1), (8, 0), (8, 1)]
HALF_SHAPES = [(2, 3, 17, 23), (1, 16, 9, 12), (1, 9, 30, 41)]
HALF_WINDOWS = [
    {"kernel_size": 3, "stride": 2, "padding": 1},
    {"kernel_size": 2, "stride": 2, "padding": 0, "ceil_mode": True},
    {"kernel_size": (3, 2), "stride": (1, 2), "padding": (1, 0), "dilation": 2},
]


@pytest.mark.parametrize("vec,interior", HALF_POOL_PARAMS)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_half_arith_max_pool(device, vec, interior, layout):
    """Every vector width and both layouts, with and without indices and fused ReLU."""
    _half_device(device)
    params = {"LOCAL_TILE": 0, "VEC": vec, "INTERIOR": interior, "HALF_ARITH": 1}
    for i, (shape, window) in enumerate(itertools.product(HALF_SHAPES, HALF_WINDOWS)):
        x = _input(100 * vec + 10 * interior + i, shape)
        for return_indices, relu in ((False, False), (True, False), (False, True)):
            _check_max(device, x, layout, {**window, "return_indices": return_indices}, relu, params)


@SETTINGS
@given(shape=shapes(max_hw=50, max_c=20), seed=seeds, data=st.data())
def test_half_arith_max_pool_fuzz(device, shape, seed, data):
    _half_device(device)
    layout = data.draw(st.sampled_from(["NCHW", "NHWC"]))
    vec, interior = data.draw(st.sampled_from(HALF_POOL_PARAMS))
    cfg = {"kernel_size": (data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))),
           "stride": data.draw(st.integers(1, 3)), "padding": data.draw(st.integers(0, 1)),
           "dilation": data.draw(st.integers(1, 2)), "ceil_mode": data.draw(st.booleans()),
           "return_indices": data.draw(st.booleans())}
    x = _input(seed, shape)
    _check_max(device, x, layout, cfg, data.draw(st.booleans()),
               {"LOCAL_TILE": 0, "VEC": vec, "INTERIOR": interior, "HALF_ARITH": 1})


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("vec", [1, 4, 8])
def test_half_arith_adaptive_max_pool(device, layout, vec):
    """The per-output adaptive kernel (MODE 1; the group and flat kernels compute in float)."""
    _half_device(device)
    params = {"MODE": 1, "VEC": vec, "HALF_ARITH": 1, "GVEC_U": 0}
    for i, (shape, out) in enumerate([((2, 16, 13, 11), (5, 3)), ((1, 7, 9, 9), 1), ((3, 24, 7, 7), (1, 1))]):
        x = _input(7 * vec + i, shape)
        for return_indices in (False, True):
            _check_max(device, x, layout, {"output_size": out, "return_indices": return_indices}, False, params,
                       adaptive=True)

