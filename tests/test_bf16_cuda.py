"""bfloat16 on the CUDA backend (kernels built with -DDTYPE_BF16=1: 16-bit storage, float32 arithmetic).

Without a GPU (CI runs these):

* the planner: on sm_80 and newer bfloat16 plans exactly what float16 plans (kernels, grids, shared memory,
  arguments) under every float16 table entry's parameters and every tensor-core switch, float16's 16-bit
  pair paths (POOL_H2, POOL_H2AVG, DW_H2, with the same tile guard) and its dense and grouped tensor-core
  kernels (mma .bf16) included, but for the depthwise tensor-core kernel (DW_TC), where it takes the CUDA
  cores; on sm_75 (no bfloat16 mma) no tensor-core kernel; its builds carry DTYPE_BF16=1 and
  DTYPE_HALF=0; float32-only kernels stay float32's;
* the tuning tables: a bfloat16 lookup matches no float16 (or float32) entry, so on sm_90 the schema
  defaults serve;
* the host emulator (tools/cuda_emu.py, ``bf16_cases``): pooling in both layouts (the 16-bit pair paths,
  tiles with and without indices, row strips, NHWC walks, a general dilated window, the contract
  kernel), adaptive and global pooling (NCHW tiles, NHWC vectors with indices, the flat NCHW kernel with
  a plane size built in, gvec), BatchNorm training (cooperative and two-pass) and inference, the dense
  3x3 CUDA-core conv, the two tensor-core 3x3 kernels (``conv2d_k3_tc`` and ``conv2d_k3_tc_pipe`` in
  both layouts, the emulator's mma multiplying bfloat16 operands), the tiled grouped conv, depthwise
  tiles in both layouts and the NHWC register walk, against the float64 oracle with the outputs
  poisoned; and the stores' rounding, bit for bit against ml_dtypes (ties to even, subnormals, overflow
  to infinity, NaN).

On a GPU (skipped without one): the same families through the op layer with each kernel path forced,
and the rounding on the device's own conversion instructions.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from test_forced_params import forced

import hal
from hal import reference
from hal.conformance import avg_pool_scale, bn_scale, compare, compare_indices, conv_scale
from hal.tensor import poison_outputs
from strategies import random_input

ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 needs ml_dtypes")

ROOT = Path(__file__).resolve().parent.parent
BF16 = np.dtype(ml_dtypes.bfloat16)


def _tools() -> object:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import cuda_emu
    finally:
        sys.path.pop(0)
    return cuda_emu


cuda_emu = _tools()

#: float16's tensor-core kernels that take bfloat16 too (mma .bf16 on sm_80 and newer): every dense one
BF16_TC = ("conv2d_k3_tc", "conv2d_k3_tc_pipe", "conv2d_tc_wprep", "conv2d_k3_tc_wide", "conv2d_k1_tc_wide",
           "conv2d_k3s2_tc_wide", "conv2d_k1s2_tc_wide", "conv2d_k1_gemm", "conv2d_k1_gemm_persist",
           "conv2d_k1_gemm_persist_cs", "conv2d_k1_gemm_nchw", "conv2d_k1_gemm_nchw_persist",
           "conv2d_k1_gemm_nchw_persist_cs", "conv2d_im2col_tc", "conv2d_grp_tc8", "conv2d_grp_tc16")
#: kernels that must never serve bfloat16: float16's depthwise tensor-core kernels (their mma f16 would
#: read bfloat16 bits as float16) and the float32-only SGEMMs (4-byte elements)
FLOAT16_ONLY = ("conv2d_dw_tc_k3s1", "conv2d_dw_tc_persist_k3s1")
FLOAT32_ONLY = ("conv2d_k1_simt", "conv2d_im2col_simt")


def _planner():
    """An H200 planner (no GPU) whose launch plans are kept."""
    be = cuda_emu.h200_backend()
    plans: list[tuple] = []
    be._run = lambda plan, buffers: plans.append(plan)
    return be, plans


def _sm90_float16_entries(kernel: str) -> list[dict[str, int]]:
    from hal.tuning.table import shipped_entries

    return [dict(e.params) for e in shipped_entries("cuda")
            if e.kernel == kernel and dict(e.key).get("dtype") == "float16"]


# ---------------------------------------------------------------------------------------------------
# without a GPU: the flag, the planner, the tables
# ---------------------------------------------------------------------------------------------------
def test_the_cuda_backend_takes_bfloat16():
    from hal.backends.cuda import CudaBackend

    assert CudaBackend.bfloat16 is True
    defines = dict(CudaBackend.compile_defines("pool2d", BF16, "NHWC", {}))
    assert defines["DTYPE_BF16"] == 1 and defines["DTYPE_HALF"] == 0 and defines["LAYOUT_NHWC"] == 1
    # float32 and float16 builds keep their defines (and so their cubin cache keys)
    for dt in (np.float32, np.float16):
        assert "DTYPE_BF16" not in dict(CudaBackend.compile_defines("conv2d", np.dtype(dt), "NCHW", {}))


#: convs each of which float16 sends to a tensor-core kernel under some parameter
_CONV_CASES = [
    # (name, N, C_in, H, W, C_out, (KH, KW), stride, padding, groups)
    ("dense 3x3 C64", 2, 64, 16, 32, 64, (3, 3), 1, 1, 1),
    ("dense 3x3 C128", 1, 128, 16, 32, 64, (3, 3), 1, 1, 1),
    ("dense 3x3 s2", 1, 64, 16, 32, 64, (3, 3), 2, 1, 1),
    ("dense 1x1", 2, 64, 8, 16, 128, (1, 1), 1, 0, 1),
    ("dense 1x1 s2", 2, 64, 8, 16, 128, (1, 1), 2, 0, 1),
    ("stem 7x7 s2", 1, 3, 32, 32, 64, (7, 7), 2, 3, 1),
    ("grouped 8", 1, 64, 16, 32, 64, (3, 3), 1, 1, 8),
    ("depthwise", 2, 64, 16, 32, 64, (3, 3), 1, 1, 64),
]
_TC_SWITCHES = {"CONV_TC": 3, "CONV_K1_GEMM": 1, "CONV_K1_NCHW": 1, "CONV_IM2COL": 1, "GRP_TC": 1, "DW_TC": 1,
                "CONV_K1_SIMT": 1}


@pytest.mark.parametrize("case", _CONV_CASES, ids=[c[0] for c in _CONV_CASES])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_bfloat16_convs_plan_float16s_dense_tensor_core_kernels_and_no_other(case, layout):
    """Without a GPU: under every sm_90 float16 conv entry's parameters, the defaults, and every
    tensor-core and SGEMM switch on, a bfloat16 conv on sm_90 and sm_80 plans exactly what float16 plans
    (kernels, grids, blocks, shared memory, arguments; built with DTYPE_BF16=1) wherever float16 takes no
    float16-only kernel (the depthwise tensor-core one), and CUDA-core kernels where it does; on
    sm_75 (no bfloat16 mma) no tensor-core kernel at all. Float32's SGEMMs never serve it."""
    from hal.backends.cuda import CudaBuffer
    from hal.spec import TensorGeometry, conv2d_spec

    _, n, ci, h, w, co, k, stride, pad, groups = case
    buf = CudaBuffer(0x10000, 1 << 30, None)

    def plan(dtype, params, cc):
        be, plans = _planner()
        be._cc = cc
        spec = conv2d_spec(TensorGeometry(n, ci, h, w, layout, np.dtype(dtype)), (co, ci // groups, *k), True,
                           (co,), stride, pad, 1, groups)
        be.conv2d(spec, buf, buf, buf, buf, params)
        return plans[-1]

    saw_shared = saw_float16_only = False
    for params in [*_sm90_float16_entries("conv2d"), {}, _TC_SWITCHES]:
        for cc in ((9, 0), (8, 0)):
            bf, half = plan(BF16, params, cc), plan(np.float16, params, cc)
            kernels = [launch.kernel for launch in bf]
            assert not set(kernels) & set(FLOAT16_ONLY + FLOAT32_ONLY), (params, kernels)
            for launch in bf:
                defines = dict(launch.defines)
                assert defines.get("DTYPE_BF16") == 1 and defines["DTYPE_HALF"] == 0, launch.kernel
            if set(launch.kernel for launch in half) & set(FLOAT16_ONLY):
                saw_float16_only = True
                continue
            assert [(x.kernel, x.grid, x.block, x.shared, x.args) for x in bf] == \
                [(x.kernel, x.grid, x.block, x.shared, x.args) for x in half], (params, cc)
            saw_shared = saw_shared or bool(set(kernels) & set(BF16_TC))
        kernels = [launch.kernel for launch in plan(BF16, params, (7, 5))]
        assert not set(kernels) & set(BF16_TC + FLOAT16_ONLY + FLOAT32_ONLY), (params, kernels)
    if groups != ci:
        assert saw_shared, "bfloat16 took no tensor-core kernel here: the case does not test the planner"
    elif layout == "NCHW":  # (float16 NHWC depthwise has no tensor-core kernel)
        assert saw_float16_only, "float16 took no depthwise tensor-core kernel: the gate is untested"


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_bfloat16_dense_3x3_takes_the_tensor_cores_on_sm80_and_newer(layout):
    """Without a GPU: a bfloat16 dense 3x3 (and 2x3, 1x1) stride-1 conv with C_in <= 64 plans float16's CONV_TC
    kernels on sm_90 and sm_80 (CONV_TC 1: conv2d_k3_tc; 2: conv2d_k3_tc_pipe where its copies apply),
    built with DTYPE_BF16=1, with float16's grid, block, shared memory and arguments; on sm_75 (no bfloat16
    mma) the CUDA-core kernel, where float16 keeps conv2d_k3_tc; C_in > 64 takes the streamed-weight
    kernels under CONV_TC 2 and 3 (sm_80+), a 1x1 the GEMM under CONV_K1_GEMM; CONV_TC 0 keeps bfloat16 on
    the CUDA cores."""
    from hal.backends.cuda import CudaBuffer
    from hal.spec import TensorGeometry, conv2d_spec

    buf = CudaBuffer(0x10000, 1 << 30, None)

    def plan(dtype, params, cc=(9, 0), ci=64, k=(3, 3), w=32):
        be, plans = _planner()
        be._cc = cc
        spec = conv2d_spec(TensorGeometry(2, ci, 16, w, layout, np.dtype(dtype)), (48, ci, *k), True, (48,), 1,
                           (k[0] // 2, k[1] // 2), 1, 1)
        be.conv2d(spec, buf, buf, buf, buf, params)
        return plans[-1]

    for params, want in (({}, "conv2d_k3_tc"), ({"CONV_TC": 1}, "conv2d_k3_tc"),
                         ({"CONV_TC": 2}, "conv2d_k3_tc_pipe")):
        for cc in ((9, 0), (8, 0)):
            (launch,) = plan(BF16, params, cc)
            (half,) = plan(np.float16, params, cc)
            assert launch.kernel == half.kernel == want, (params, cc, launch.kernel)
            assert (launch.grid, launch.block, launch.shared, launch.args) == (half.grid, half.block, half.shared,
                                                                               half.args)
            defines = dict(launch.defines)
            assert defines["DTYPE_BF16"] == 1 and defines["DTYPE_HALF"] == 0
        (launch,) = plan(BF16, params, (7, 5))
        assert launch.kernel == "conv2d_k3_simt", (params, launch.kernel)
        assert plan(np.float16, params, (7, 5))[-1].kernel == "conv2d_k3_tc"
    # the pipelined kernel's copies: NHWC C_in % 8 == 0, NCHW W % 8 == 0; else CONV_TC 1's kernel
    assert plan(BF16, {"CONV_TC": 2}, ci=13)[-1].kernel == ("conv2d_k3_tc" if layout == "NHWC"
                                                             else "conv2d_k3_tc_pipe")
    assert plan(BF16, {"CONV_TC": 2}, w=36)[-1].kernel == ("conv2d_k3_tc" if layout == "NCHW"
                                                            else "conv2d_k3_tc_pipe")
    assert plan(BF16, {}, k=(2, 3))[-1].kernel == "conv2d_k3_tc"
    assert plan(BF16, {}, k=(1, 1))[-1].kernel == "conv2d_k3_tc"
    assert "conv2d_k1_gemm" in [x.kernel for x in plan(BF16, {"CONV_K1_GEMM": 1}, k=(1, 1))]  # (NCHW: transposed)
    assert plan(BF16, {"CONV_TC": 0})[-1].kernel == "conv2d_k3_simt"
    assert plan(BF16, {"CONV_TC": 3})[-1].kernel == plan(np.float16, {"CONV_TC": 3})[-1].kernel  # wide, or not
    # C_in > 64: the streamed-weight kernels under CONV_TC 2 and 3, on sm_80+ only
    for params in ({"CONV_TC": 3}, {"CONV_TC": 2}):
        assert [x.kernel for x in plan(BF16, params, ci=72)] == ["conv2d_tc_wprep", "conv2d_k3_tc_wide"], params
        assert [x.kernel for x in plan(BF16, params, cc=(7, 5), ci=72)] == ["conv2d_k3_simt"], params
    assert [x.kernel for x in plan(BF16, {}, ci=72)] == ["conv2d_k3_simt"]  # CONV_TC 1: C_in <= 64 only


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_bfloat16_pooling_plans_keep_to_its_own_builds(layout, kind):
    """Without a GPU: bfloat16 pooling under every sm_90 float16 pool2d entry's parameters (pair paths
    asked for) plans kernels built with DTYPE_BF16=1 and DTYPE_HALF=0, with float16's tiles: the 16-byte
    guard in front of NCHW tiles that the 16-bit pair paths (POOL_H2, POOL_H2AVG) read, none where they
    are off, and no even/odd column split (4-byte elements only)."""
    from hal.backends.cuda import CudaBuffer
    from hal.spec import TensorGeometry, pool2d_spec

    buf = CudaBuffer(0x10000, 1 << 30, None)
    for params in [*_sm90_float16_entries("pool2d"), {"POOL_SPLIT": 1, "POOL_H2": 1, "POOL_H2AVG": 1},
                   {"POOL_H2": 0, "POOL_H2AVG": 0}]:
        shared = {}
        for dtype in (BF16, np.dtype(np.float16)):
            be, plans = _planner()
            spec = pool2d_spec(kind, TensorGeometry(2, 8, 33, 64, layout, dtype), 3, 2, 1, 1, False, True, None,
                               False)
            be.pool2d(spec, buf, buf, None, params)
            (launch,) = plans[-1]
            shared[dtype] = launch.shared
            if dtype == BF16:
                assert dict(launch.defines)["DTYPE_BF16"] == 1 and dict(launch.defines)["DTYPE_HALF"] == 0
        assert shared[BF16] == shared[np.dtype(np.float16)]  # the same tile, guard included
    # the guard itself: bfloat16 NCHW tiles with the pair path on hold 16 bytes more than with it off
    switch = "POOL_H2" if kind == "max" else "POOL_H2AVG"
    if layout == "NCHW":
        got = {}
        for on in (0, 1):
            be, plans = _planner()
            spec = pool2d_spec(kind, TensorGeometry(2, 8, 33, 64, layout, BF16), 3, 2, 1, 1, False, True, None, False)
            be.pool2d(spec, buf, buf, None, {switch: on})
            (launch,) = plans[-1]
            assert "_tile_" in launch.kernel
            got[on] = launch.shared
        assert got[1] - got[0] == 16


def test_bfloat16_table_lookups_take_no_float16_entry():
    """Without a GPU: every shipped float16 (and float32) entry, looked up with its key's dtype
    bfloat16 on a device it matches, does not serve; on an H200 (every sm_90 entry names a dtype) a
    bfloat16 entry (session 41's, measured on an H100) or the schema defaults serve bfloat16; on
    another architecture its dtype-free arch entry may."""
    from hal.backends.cuda import CudaBackend
    from hal.device import DeviceInfo
    from hal.tuning.table import Tuner, shipped_entries

    def info(name: str, arch: str) -> DeviceInfo:
        threads = {"sm_75": 1024, "sm_86": 1536, "sm_89": 1536, "sm_120": 1536}.get(arch, 2048)  # resident per SM
        extras = (("compute_capability", arch[3:4] + "." + arch[4:]), ("max_threads_per_sm", str(threads)))
        return DeviceInfo("cuda", 0, name, "nvidia", "hopper", arch, 132, 1024, 232448, 140 << 30, True, 32, "cuda",
                          "580", extras)

    schemas = CudaBackend.schemas()
    by_source = {e.source: e for e in shipped_entries("cuda")}
    checked = 0
    for e in shipped_entries("cuda"):
        key = dict(e.key)
        if key.get("dtype") not in ("float16", "float32"):
            continue
        dev = info(e.match if e.level == "device" else "NVIDIA H200", e.arch or (e.match if e.level == "arch"
                                                                                 else "sm_90"))
        resolved = Tuner(dev, schemas).resolve(e.kernel, {**key, "dtype": "bfloat16"})
        assert resolved.source != e.source, (e.source, key)
        if dev.arch == "sm_90":
            assert resolved.level == "default" or dict(by_source[resolved.source].key)["dtype"] == "bfloat16", \
                (e.source, resolved)
        checked += 1
    assert checked > 50


# ---------------------------------------------------------------------------------------------------
# without a GPU: the kernels on the host emulator
# ---------------------------------------------------------------------------------------------------
def _gxx_major() -> int:
    if shutil.which("g++") is None:
        return 0
    out = subprocess.run(["g++", "-dumpversion"], capture_output=True, text=True).stdout.strip()
    return int(out.split(".")[0]) if out.split(".")[0].isdigit() else 0


_emulator = pytest.mark.skipif(_gxx_major() < 12, reason="the CUDA emulator needs g++ 12 or newer (C++20)")
_EMU_CASES = cuda_emu.bf16_cases()


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    return cuda_emu.h200_backend(), tmp_path_factory.mktemp("cuda-emu-bf16")


@_emulator
@pytest.mark.parametrize("case", _EMU_CASES, ids=[c[0] for c in _EMU_CASES])
def test_bfloat16_kernels_match_the_oracle_on_the_emulator(emu, case):
    """Each kernel through the plan the launcher makes for an H200, on the host emulator; the case names
    the kernel its plan must launch where it matters (cuda_emu.bf16_cases)."""
    be, work = emu
    name, kind, kw = case
    fn = {"pool": cuda_emu.check_pool, "adaptive": cuda_emu.check_adaptive, "gvec": cuda_emu.check_gvec,
          "bn": cuda_emu.check_bn_infer, "bn-train": cuda_emu.check_bn_train, "tiled": cuda_emu.check_tiled,
          "dwconv": cuda_emu.check_dwconv, "round": cuda_emu.check_bf16_rounding, "k1g": cuda_emu.check_k1_gemm,
          "k1n": cuda_emu.check_k1_nchw}[kind]
    kernel, ok, detail = fn(be, np.random.default_rng(zlib.crc32(name.encode())), work, **kw)
    assert ok, f"{name} ({kernel}): {detail}"


def test_the_rounding_probes_cover_ties_both_ways_and_overflow():
    """The probes check_bf16_rounding stores hold ties that round down (to an even neighbour) and up, a
    value past the largest bfloat16 that rounds to infinity, one below it that does not, and NaNs."""
    probes = cuda_emu.rounding_probes(np.random.default_rng(0), 64)
    mag = probes.view(np.uint32) & 0x7FFFFFFF
    with np.errstate(invalid="ignore"):
        rounded = (probes.astype(BF16).view(np.uint16) & 0x7FFF).astype(np.uint32) << 16
    tie = np.isfinite(probes) & ((mag & 0xFFFF) == 0x8000) & (mag >= 0x00800000)
    assert (rounded[tie] < mag[tie]).any() and (rounded[tie] > mag[tie]).any()
    finite = np.isfinite(probes)
    assert (rounded[finite] == 0x7F800000).any() and (rounded[finite] == 0x7F7F0000).any()
    assert np.isnan(probes).sum() >= 4


# ---------------------------------------------------------------------------------------------------
# on a GPU: the op layer with each kernel path forced
# ---------------------------------------------------------------------------------------------------
def _cuda(device: hal.Device | None) -> None:
    if device is None or device.kind != "cuda":
        pytest.skip("bfloat16 kernels on a CUDA device")


def _seed(*parts: object) -> int:
    return zlib.crc32(repr(parts).encode())


_POOL_PATHS = [
    ("tiles", {}),
    ("rows2", {"POOL_ROWS": 2}),
    ("rows4", {"POOL_ROWS": 4}),
    ("ncols2", {"POOL_NCOLS": 2}),
    ("ncols4", {"POOL_NCOLS": 4}),
    ("h2 asked", {"POOL_H2": 1, "POOL_H2AVG": 1, "POOL_SPLIT": 1}),
]
_POOL_CONFIGS = [
    {"kernel_size": 3, "stride": 2, "padding": 1},
    {"kernel_size": 2, "stride": 2, "ceil_mode": True},
    {"kernel_size": 3, "stride": 2, "padding": (1, 0), "ceil_mode": True},
    {"kernel_size": (5, 3), "stride": (2, 1), "padding": (1, 2, 0, 1)},
]


@pytest.mark.parametrize("path", _POOL_PATHS, ids=[p[0] for p in _POOL_PATHS])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_cuda_bfloat16_pooling_paths(device, path, layout, kind):
    """Pooling with each path forced, shapes that are multiples of nothing and of the 16-byte vector,
    indices (max), count_include_pad both ways and divisor_override (avg), fused ReLU, NaN inputs (max)."""
    _cuda(device)
    _, params = path
    for i, (shape, cfg) in enumerate(zip([(2, 5, 17, 32), (1, 16, 13, 11), (3, 3, 9, 24), (1, 8, 20, 15)],
                                         _POOL_CONFIGS, strict=True)):
        x = random_input(_seed(kind, layout, i), shape, "bfloat16", nan_fraction=0.05 if kind == "max" else 0.0)
        cfg = dict(cfg)
        relu = i % 2 == 1
        with forced(device, "pool2d", params), poison_outputs():
            xt = hal.asarray(x, device=device, layout=layout)
            if kind == "max":
                out, idx = hal.max_pool2d(xt, **cfg, return_indices=True)
                ref, ref_idx = reference.max_pool2d(x.astype(np.float64), **cfg, return_indices=True)
                assert compare_indices(idx.numpy(), ref_idx).ok
                out2 = hal.max_pool2d(xt, **cfg, relu=relu)  # no indices: the register paths
                ref2 = np.where(ref < 0, 0.0, ref) if relu else ref
                r = compare("max_pool2d", BF16, out2.numpy(), ref2)
                assert r.ok, (shape, cfg, r.detail)
            else:
                cfg["count_include_pad"] = i % 2 == 0
                cfg["divisor_override"] = 5 if i == 3 else None
                out = hal.avg_pool2d(xt, **cfg, relu=relu)
                ref = reference.avg_pool2d(x.astype(np.float64), **cfg)
                ref = np.where(ref < 0, 0.0, ref) if relu else ref
        scale = avg_pool_scale(x, **cfg) if kind == "avg" else 1.0
        assert out.dtype == BF16 and out.layout == layout
        r = compare(f"{kind}_pool2d", BF16, out.numpy(), ref, scale)
        assert r.ok, (shape, cfg, r.detail)


_ADAPT_PATHS = [("defaults", {}), ("gvec S2", {"ADAPT_GVEC_S": 2, "ADAPT_GVEC_U": 4}),
                ("no gflat, no vsplit", {"ADAPT_GFLAT": 0, "ADAPT_VSPLIT": 0}), ("gstages 2", {"ADAPT_GSTAGES": 2})]


@pytest.mark.parametrize("path", _ADAPT_PATHS, ids=[p[0] for p in _ADAPT_PATHS])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_cuda_bfloat16_adaptive_and_global_pooling(device, path, layout):
    """Adaptive pooling (bins of every kind) and global pooling: small odd planes (the NCHW flat kernel
    with the plane built in, odd planes starting at odd halves), many channels (the NHWC global
    kernels), large bins (a block per output), max with indices and NaN inputs, avg."""
    _cuda(device)
    _, params = path
    cases = [((2, 37, 7, 7), (1, 1)), ((4, 512, 5, 3), (1, 1)), ((2, 24, 17, 23), (3, 5)), ((1, 8, 64, 64), (1, 2)),
             ((3, 13, 6, 6), (1, 1))]
    for i, (shape, out_size) in enumerate(cases):
        for kind in ("max", "avg"):
            x = random_input(_seed(layout, i, kind), shape, "bfloat16", nan_fraction=0.02 if kind == "max" else 0)
            with forced(device, "adaptive_pool2d", params), poison_outputs():
                xt = hal.asarray(x, device=device, layout=layout)
                if kind == "max":
                    out = hal.adaptive_max_pool2d(xt, out_size)
                    ref, ref_idx = reference.adaptive_max_pool2d(x.astype(np.float64), out_size, return_indices=True)
                    _, idx = hal.adaptive_max_pool2d(xt, out_size, return_indices=True)
                    assert compare_indices(idx.numpy(), ref_idx).ok
                else:
                    out = hal.adaptive_avg_pool2d(xt, out_size)
                    ref = reference.adaptive_avg_pool2d(x.astype(np.float64), out_size)
            r = compare(f"adaptive_{kind}_pool2d", BF16, out.numpy(), ref)
            assert r.ok, (shape, out_size, kind, r.detail)


_CONV_PATHS = [
    ("defaults", {}),
    ("generic", {"GRP_TILED": 0}),
    ("tensor cores asked", _TC_SWITCHES),
    ("tc pipe", {"CONV_TC": 2}),
    ("cuda cores", {"CONV_TC": 0}),
    ("dw rows4", {"DW_ROWS": 4}),
    ("dw rows4 shfl", {"DW_ROWS": 4, "DW_SHFL": 1}),
    ("dw cols8", {"DW_COLS": 8}),
    ("dw cols4r8", {"DW_COLS": 4, "DW_CROWS": 8}),
    ("dw pipe8x2", {"DW_PIPE": 8, "DW_PIPE_COLS": 2}),
    ("dw 8 channels a thread", {"DW_HALF4": 0}),
    ("grp cot4 pix2", {"GRP_COT": 4, "GRP_PIX": 2}),
]
_CONVS = [
    # (shape, C_out, kernel, stride, padding, dilation, groups)
    ((2, 13, 11, 34), 70, (3, 3), 1, 1, 1, 1),
    ((1, 16, 12, 17), 24, (1, 1), 2, 0, 1, 1),
    ((2, 3, 23, 21), 16, (7, 7), 2, 3, 1, 1),
    ((1, 24, 13, 11), 16, (3, 3), 2, (1, 0, 2, 1), 1, 4),
    ((2, 16, 19, 32), 16, (3, 3), 1, 1, 1, 16),
    ((1, 24, 15, 16), 24, (3, 3), 1, (0, 1, 1, 0), 1, 24),
    ((1, 8, 14, 13), 16, (3, 3), 1, 2, 2, 8),
    ((1, 16, 9, 40), 24, (3, 3), 1, 1, 1, 1),  # conv2d_k3_tc_pipe's copies in both layouts (CONV_TC 2, sm_80+)
    ((1, 72, 9, 16), 64, (3, 3), 1, 1, 1, 1),  # C_in > 64: the streamed-weight kernels (CONV_TC 2 and 3)
    ((1, 40, 13, 34), 72, (3, 3), 2, 1, 1, 1),  # the stride-2 streamed-weight kernel (CONV_TC > 0)
    ((1, 32, 10, 16), 32, (3, 3), 1, 1, 1, 4),  # grouped, 8 channels a group: GRP_TC
]


@pytest.mark.parametrize("path", _CONV_PATHS, ids=[p[0] for p in _CONV_PATHS])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_cuda_bfloat16_conv_paths(device, path, layout):
    """Dense (C_in up to 72, stride 1 and 2), 1x1 strided, stem, grouped, depthwise (symmetric and
    asymmetric padding), dilated with a channel multiplier; with and without bias, fused ReLU; each path
    forced (on sm_80+ bfloat16 takes float16's tensor-core kernels where the parameters send float16 there:
    conv2d_k3_tc / _pipe, the streamed-weight and stride-2 kernels, the 1x1 GEMMs, the stem GEMM, the
    grouped ones, mma .bf16; DW_TC must leave it on the CUDA cores and still be right)."""
    _cuda(device)
    _, params = path
    for i, (shape, co, k, stride, pad, dil, groups) in enumerate(_CONVS):
        x = random_input(_seed(layout, i), shape, "bfloat16")
        w = (random_input(_seed(layout, i, "w"), (co, shape[1] // groups, *k), "float32")
             / np.sqrt(shape[1] // groups * k[0] * k[1])).astype(BF16)
        b = random_input(_seed(layout, i, "b"), (co,), "float32") if i % 2 == 0 else None
        relu = i % 3 == 1
        kw = {"stride": stride, "padding": pad, "dilation": dil, "groups": groups}
        x64, w64 = x.astype(np.float64), w.astype(np.float64)
        ref = reference.conv2d(x64, w64, None if b is None else b.astype(np.float64), **kw)
        if relu:
            ref = np.where(ref < 0, 0.0, ref)
        with forced(device, "conv2d", params), poison_outputs():
            y = hal.conv2d(hal.asarray(x, device=device, layout=layout), hal.asarray(w, device=device), b, **kw,
                           relu=relu)
        assert y.dtype == BF16 and y.layout == layout
        r = compare("conv2d", BF16, y.numpy(), ref, conv_scale(x64, w64, None if b is None else b, **kw))
        assert r.ok, (shape, k, stride, pad, groups, r.detail)


_BN_PATHS = [("defaults", {}), ("fused", {"BN_FUSED": 1}), ("two-pass", {"BN_FUSED": 0}),
             ("merged", {"BN_APPLY_MERGE": 1}), ("flat", {"BN_FLAT": 1, "BN_FLAT_REG": 0}),
             ("flat reg", {"BN_FLAT": 1, "BN_FLAT_REG": 1}), ("not flat", {"BN_FLAT": 0})]


@pytest.mark.parametrize("path", _BN_PATHS, ids=[p[0] for p in _BN_PATHS])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("training", [True, False])
def test_cuda_bfloat16_batch_norm(device, path, layout, training):
    """Training (running statistics updated, data with mean 1e4) and inference, weight and bias or
    neither, fused ReLU, channel counts that are and are not multiples of the vector."""
    _cuda(device)
    _, params = path
    for i, shape in enumerate([(2, 16, 7, 9), (3, 5, 6, 8), (1, 40, 5, 5)]):
        mean = 1e4 if (training and i == 1) else 0.5
        x = random_input(_seed(layout, i, training), shape, "bfloat16", mean=mean)
        c = shape[1]
        rng = np.random.default_rng(_seed(i, c))
        rm, rv = rng.standard_normal(c).astype(np.float32), (rng.random(c) + 0.5).astype(np.float32)
        w = rng.standard_normal(c).astype(np.float32) if i != 2 else None
        b = rng.standard_normal(c).astype(np.float32) if i != 2 else None
        relu = i == 1
        rm_ref, rv_ref = rm.astype(np.float64), rv.astype(np.float64)
        ref = reference.batch_norm(x.astype(np.float64), rm_ref, rv_ref, w, b, training=training)
        if relu:
            ref = np.where(ref < 0, 0.0, ref)
        with forced(device, "batch_norm", params), poison_outputs():
            y = hal.batch_norm(hal.asarray(x, device=device, layout=layout), rm, rv, w, b, training=training,
                               relu=relu)
        r = compare("batch_norm", BF16, y.numpy(), ref, bn_scale(x, w, 1e-5, training, rm_ref, rv_ref))
        assert r.ok, (shape, training, r.detail)
        if training:
            np.testing.assert_allclose(rm, rm_ref, rtol=2e-5, atol=2e-5 * (1 + abs(mean)))
            np.testing.assert_allclose(rv, rv_ref, rtol=2e-4)


def test_cuda_bfloat16_relu(device):
    """The elementwise ReLU (what an unfused epilogue would run), aligned and odd element counts."""
    _cuda(device)
    for shape in [(2, 8, 5, 8), (1, 3, 5, 7)]:
        x = random_input(_seed(shape), shape, "bfloat16", nan_fraction=0.05)
        with poison_outputs():
            y = hal.relu(hal.asarray(x, device=device)).numpy()
        want = np.where(x.astype(np.float32) < 0, np.float32(0), x.astype(np.float32)).astype(BF16)
        np.testing.assert_array_equal(y.view(np.uint16)[~np.isnan(want.astype(np.float32))],
                                      want.view(np.uint16)[~np.isnan(want.astype(np.float32))])
        assert np.isnan(y.astype(np.float32)).sum() == np.isnan(x.astype(np.float32)).sum()


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_cuda_bfloat16_stores_round_to_nearest_even(device, layout):
    """The device's own conversions, bit for bit against ml_dtypes: BatchNorm inference of zeros with
    running mean 0 and a variance that makes the scale exactly 1 outputs each channel's bias rounded once
    (cuda_emu.rounding_probes: ties both ways, subnormals, overflow to infinity; NaN stays NaN)."""
    _cuda(device)
    probes = cuda_emu.rounding_probes(np.random.default_rng(3), 1024)
    c = probes.size
    eps = np.float32(1e-5)
    rv = np.float32(1) - eps
    while np.float32(rv + eps) != np.float32(1):
        rv = np.nextafter(rv, np.float32(2))
    shape = (2, c, 1, 3) if layout == "NHWC" else (1, c, 1, 1)  # 16-byte vectors / scalar stores
    x = np.zeros(shape, BF16)
    with poison_outputs():
        y = hal.batch_norm(hal.asarray(x, device=device, layout=layout), np.zeros(c, np.float32),
                           np.full(c, rv, np.float32), None, probes, eps=float(eps)).numpy()
    with np.errstate(invalid="ignore"):
        want = np.broadcast_to(probes.astype(BF16).reshape(1, c, 1, 1), y.shape)
    nan = np.isnan(want.astype(np.float32))
    assert np.isnan(y.astype(np.float32))[nan].all()
    np.testing.assert_array_equal(y.view(np.uint16)[~nan], np.ascontiguousarray(want).view(np.uint16)[~nan])
