"""The CUDA kernels that work from registers without shared memory, forced and checked
against the float64 oracle:

* pooling NHWC walks (pool2d.cu, POOL_NCOLS), with and without 16-byte channel vectors;
* pooling row strips (pool2d.cu, POOL_ROWS): 2x2/2 and 3x3/2 windows in NCHW at widths
  that are multiples of 16 bytes (where they apply) and at widths that are not (where the
  launcher must fall back), every padding the windows allow, ceil_mode, the divisor rules,
  NaN inputs, fused ReLU;
* depthwise 3x3 stride 1 (conv2d.cu): NCHW row strips (DW_ROWS) and NHWC column walks
  (DW_COLS), with and without bias, every padding up to 1 per side and asymmetric ones,
  channel counts that are and are not multiples of 4, fused ReLU; and the NHWC pipelined
  shared-memory kernel (DW_PIPE), which takes the same specs where C is a multiple of 16 bytes;
  and the float16 NCHW tensor-core kernel (DW_TC), which takes widths that are multiples of 8.

Every dtype the CUDA backend takes: float32, float16 and bfloat16 (16-bit storage like float16; the
tensor-core kernel falls back to the CUDA-core ones for it, as for float32)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from test_forced_params import forced

import hal
from hal import reference
from hal.conformance import avg_pool_scale, compare, conv_scale
from hal.errors import HalValueError
from hal.tensor import poison_outputs
from strategies import FLOAT_NAMES, SETTINGS, pool_oracle, random_input, seeds

#: the CUDA backend's float dtypes (strategies.dtypes is every backend's: float32 and float16)
dtypes = st.sampled_from(FLOAT_NAMES)


def _cuda(device: hal.Device) -> None:
    if device.kind != "cuda":
        pytest.skip("CUDA register kernels (pool2d POOL_ROWS, POOL_NCOLS, conv2d DW_ROWS, DW_COLS)")


def _check_forced_pool(device, data, shape, dtype, seed, layout, params):
    """Draw a 2x2/2 or 3x3/2 pooling (pads up to 1, ceil_mode, divisor rules, fused ReLU),
    run it with ``params`` forced and compare with the oracle (NaN inputs for max)."""
    kind = data.draw(st.sampled_from(["max", "avg"]))
    pads = data.draw(st.one_of(st.integers(0, 1), st.tuples(st.integers(0, 1), st.integers(0, 1))))
    cfg = {"kernel_size": data.draw(st.sampled_from([2, 3])), "stride": 2, "padding": pads,
           "ceil_mode": data.draw(st.booleans())}
    if kind == "avg":
        cfg["count_include_pad"] = data.draw(st.booleans())
        cfg["divisor_override"] = data.draw(st.sampled_from([None, None, 5]))
    relu = data.draw(st.booleans())
    x = random_input(seed, shape, dtype, nan_fraction=0.05 if kind == "max" else 0.0)
    ref = pool_oracle(kind, x, **cfg)
    if relu:
        ref = np.where(ref < 0, 0.0, ref)
    op = hal.max_pool2d if kind == "max" else hal.avg_pool2d
    with forced(device, "pool2d", params), poison_outputs():
        out = op(hal.asarray(x, device=device, layout=layout), **cfg, relu=relu)
    scale = avg_pool_scale(x, **cfg) if kind == "avg" else 1.0
    r = compare(f"{kind}_pool2d", dtype, out.numpy(), ref, scale)
    assert r.ok, (shape, layout, cfg, relu, r.detail)


@pytest.mark.parametrize("rows", [2, 4])
@SETTINGS
@given(dtype=dtypes, seed=seeds, data=st.data())
def test_cuda_pool_rows(device, rows, dtype, seed, data):
    """NCHW row strips (POOL_ROWS): mostly widths the kernels take (multiples of the
    16-byte vector), sometimes one they must refuse."""
    _cuda(device)
    vec = 4 if dtype == "float32" else 8
    n, c, h = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 9)), data.draw(st.integers(1, 41))
    w = data.draw(st.one_of(st.integers(1, 12).map(lambda m: m * vec), st.integers(1, 50)))
    _check_forced_pool(device, data, (n, c, h, w), dtype, seed, "NCHW", {"POOL_ROWS": rows})


@pytest.mark.parametrize("cols", [2, 4])
@SETTINGS
@given(dtype=dtypes, seed=seeds, data=st.data())
def test_cuda_pool_ncols(device, cols, dtype, seed, data):
    """NHWC register walks (POOL_NCOLS): channel counts that are and are not multiples of
    the 16-byte vector (the launcher falls back for the latter)."""
    _cuda(device)
    vec = 4 if dtype == "float32" else 8
    n, h, w = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 23)), data.draw(st.integers(1, 23))
    c = data.draw(st.one_of(st.integers(1, 4).map(lambda m: m * vec), st.integers(1, 20)))
    _check_forced_pool(device, data, (n, c, h, w), dtype, seed, "NHWC", {"POOL_NCOLS": cols})


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_cuda_pool_rows_baseline_shape(device, dtype, kind):
    """The benchmark's shape family (3x3/2 pad 1, even width), small batch: exact for max."""
    _cuda(device)
    x = random_input(3, (2, 5, 56, 112), dtype, nan_fraction=0.01 if kind == "max" else 0.0)
    cfg = {"kernel_size": 3, "stride": 2, "padding": 1}
    ref = (reference.max_pool2d if kind == "max" else reference.avg_pool2d)(x.astype(np.float64), **cfg)
    op = hal.max_pool2d if kind == "max" else hal.avg_pool2d
    with forced(device, "pool2d", {"POOL_ROWS": 4}), poison_outputs():
        out = op(hal.asarray(x, device=device), **cfg)
    r = compare(f"{kind}_pool2d", dtype, out.numpy(), ref)
    assert r.ok, r.detail


def test_cuda_pool_rows_indices_fall_back(device):
    """Indices requested: the tile kernels serve, with the oracle's indices."""
    _cuda(device)
    x = random_input(4, (1, 3, 17, 32), "float32")
    with forced(device, "pool2d", {"POOL_ROWS": 2}), poison_outputs():
        out, idx = hal.max_pool2d(hal.asarray(x, device=device), 3, 2, 1, return_indices=True)
    ref, ref_idx = reference.max_pool2d(x.astype(np.float64), 3, 2, 1, return_indices=True)
    assert compare("max_pool2d", "float32", out.numpy(), ref).ok
    np.testing.assert_array_equal(idx.numpy(), ref_idx)


@pytest.mark.parametrize("path", [("NCHW", {"DW_ROWS": 2}), ("NCHW", {"DW_ROWS": 4}), ("NHWC", {"DW_COLS": 2}),
                                  ("NHWC", {"DW_COLS": 4}), ("NHWC", {"DW_COLS": 8}),
                                  ("NHWC", {"DW_COLS": 2, "DW_CROWS": 4}), ("NHWC", {"DW_COLS": 4, "DW_CROWS": 8}),
                                  ("NHWC", {"DW_PIPE": 4}), ("NHWC", {"DW_PIPE": 8}), ("NHWC", {"DW_PIPE": 16}),
                                  ("NHWC", {"DW_PIPE": 8, "DW_PIPE_COLS": 2}),
                                  # float16 NCHW on tensor cores (float32 and bfloat16 fall back to the others)
                                  ("NCHW", {"DW_TC": 1}), ("NCHW", {"DW_TC": 2})],
                         ids=lambda p: "-".join(f"{k}{v}" for k, v in p[1].items()))
@SETTINGS
@given(dtype=dtypes, seed=seeds, data=st.data())
def test_cuda_depthwise_registers(device, path, dtype, seed, data):
    _cuda(device)
    layout, params = path
    vec = 4 if dtype == "float32" else 8
    n, h = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 37))
    if layout == "NCHW":
        c = data.draw(st.integers(2, 9))
        w = data.draw(st.one_of(st.integers(1, 10).map(lambda m: m * vec), st.integers(1, 45)))
    else:
        c = data.draw(st.one_of(st.integers(1, 6).map(lambda m: 4 * m), st.integers(2, 13)))
        w = data.draw(st.integers(1, 45))
    pads = data.draw(st.one_of(st.integers(0, 1), st.tuples(*[st.integers(0, 1)] * 4)))
    x = random_input(seed, (n, c, h, w), dtype)
    wt = random_input(seed + 1, (c, 1, 3, 3), dtype)
    b = random_input(seed + 2, (c,), "float32") if data.draw(st.booleans()) else None
    relu = data.draw(st.booleans())
    x64, w64 = x.astype(np.float64), wt.astype(np.float64)
    b64 = None if b is None else b.astype(np.float64)
    kw = {"padding": pads, "groups": c}
    try:
        ref = reference.conv2d(x64, w64, b64, **kw)
    except HalValueError:
        assume(False)
    if relu:
        ref = np.where(ref < 0, 0.0, ref)
    with forced(device, "conv2d", params), poison_outputs():
        y = hal.conv2d(hal.asarray(x, device=device, layout=layout), hal.asarray(wt, device=device), b, **kw,
                       relu=relu)
    assert y.layout == layout and y.shape == ref.shape
    r = compare("conv2d", dtype, y.numpy(), ref, conv_scale(x64, w64, b64, **kw))
    assert r.ok, r.detail


@pytest.mark.parametrize("cols,crows", [(2, 4), (2, 8), (4, 4), (4, 8), (8, 4)])
def test_cuda_depthwise_block_plan(cols, crows):
    """Without a GPU: the planner picks the 2-D register block kernel for DW_COLS 2/4 with
    DW_CROWS (one-row walk for DW_COLS 8), the kernel exists in conv2d.cu, and the grid
    covers every (image, row strip, column strip, channel group)."""
    from hal.backends.cuda import CudaBackend
    from hal.resources import kernel_source
    from hal.spec import TensorGeometry, conv2d_spec

    planner = CudaBackend.__new__(CudaBackend)  # planning needs no context
    planner.force_generic, planner._cc, planner._arch, planner._sms = False, (9, 0), "sm_90", 132
    planner._smem_default = 48 * 1024
    n, c, h, w = 3, 24, 19, 30
    spec = conv2d_spec(TensorGeometry(n, c, h, w, "NHWC", np.dtype(np.float32)), (c, 1, 3, 3), False, None,
                       1, 1, 1, c)
    (launch,) = planner._plan_conv2d(spec, {"DW_COLS": cols, "DW_CROWS": crows, "CONV_THREADS": 128}, True)
    blocked = cols in (2, 4)
    assert launch.kernel == (f"conv2d_dw_cols{cols}r{crows}_k3s1" if blocked else f"conv2d_dw_cols{cols}_k3s1")
    assert f"({launch.kernel}," in kernel_source("kernels_cu", "conv2d.cu")
    rows = -(-h // crows) if blocked else h
    items = n * rows * -(-w // cols) * (c // 4)
    assert launch.grid[0] * launch.block[0] >= items > (launch.grid[0] - 1) * launch.block[0]



@pytest.mark.parametrize("merge", [0, 1])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_cuda_batch_norm_merge_plan(merge, layout):
    """Without a GPU: NCHW training with BN_APPLY_MERGE is two launches, statistics first (the
    launcher reads the slab count from its blob), then batch_norm_apply_merged with one
    argument per parameter of its signature; NHWC, or BN_APPLY_MERGE 0, keeps three launches."""
    import re

    from hal.backends.cuda import CudaBackend
    from hal.resources import kernel_source
    from hal.spec import TensorGeometry, batch_norm_spec

    planner = CudaBackend.__new__(CudaBackend)  # planning needs no context
    planner.force_generic, planner._cc, planner._arch, planner._sms = False, (9, 0), "sm_90", 132
    planner._smem_default = 48 * 1024
    spec = batch_norm_spec(TensorGeometry(7, 6, 5, 9, layout, np.dtype(np.float32)), True, 0.1, 1e-5, True)
    plan = planner._plan_batch_norm(spec, {"BN_APPLY_MERGE": merge, "BN_THREADS": 128}, True)
    names = [launch.kernel for launch in plan]
    if merge and layout == "NCHW":
        assert names == ["batch_norm_stats", "batch_norm_apply_merged"]
        merged = plan[1]
        source = kernel_source("kernels_cu", "batch_norm.cu")
        signature = re.search(r"batch_norm_apply_merged\(([^)]*)\)", source).group(1)
        assert len(merged.args) == signature.count(",") + 1 == len(re.findall(r"\d*[A-Za-z]", merged.fmt))
        assert merged.grid == plan[0].grid and merged.block == plan[0].block
    else:
        assert names == ["batch_norm_stats", "batch_norm_finalize", "batch_norm_apply_ex"]
