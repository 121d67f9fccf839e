"""The CUDA tensor-core kernels on the host emulator (tools/cuda_emu.py), without a GPU.

One float16 conv through ``conv2d_k3_tc_pipe`` (NCHW: staged rows, the transposition, the
staged output), one float16 1x1 conv through ``conv2d_k1_gemm`` and one through each persistent 1x1
GEMM (``conv2d_k1_gemm_persist_cs``, ``conv2d_k1_gemm_nchw_persist``), one float32 1x1 conv through the
SGEMM ``conv2d_k1_simt`` and one uint8 x int8
QLinearConv through ``qconv2d_k3_tc`` (NHWC: the zero-point algebra and the mma of ones),
BatchNorm's flat inference with its first loads early, BatchNorm training (its statistics'
shifted-sum chunks, and in one cooperative launch with grid barriers) and the tiled direct conv
(grouped 3x3, a strided 7x7), the grouped
tensor-core conv, the dense 3x3 CUDA-core conv, the implicit GEMMs (float16 stems on tensor cores, float32
on CUDA cores), the float16
NCHW depthwise conv on tensor cores and its row strips with
halos by shuffles, and NHWC global pooling
with two lanes a pair, each with the plan the
launcher makes for an H200, against the oracle.
tools/cuda_emu.py runs the rest (every type pair, both kernels, more shapes) before device
time is spent.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent



def _gxx_major() -> int:
    if shutil.which("g++") is None:
        return 0
    out = subprocess.run(["g++", "-dumpversion"], capture_output=True, text=True).stdout.strip()
    return int(out.split(".")[0]) if out.split(".")[0].isdigit() else 0


# C++20 <barrier> and _Float16 on x86-64: g++ 12 or newer
pytestmark = pytest.mark.skipif(_gxx_major() < 12, reason="the CUDA emulator needs g++ 12 or newer (C++20, _Float16)")


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import cuda_emu
    finally:
        sys.path.pop(0)
    return cuda_emu, cuda_emu.h200_backend(), tmp_path_factory.mktemp("cuda-emu")


def test_pipelined_float16_conv_matches_the_oracle_on_the_emulator(emu):
    cuda_emu, be, work = emu
    kernel, ok, detail = cuda_emu.check_conv(be, np.random.default_rng(5), work, (1, 24, 9, 16), 70, "NCHW", 1,
                                             {"CONV_TC": 2})
    assert kernel == "conv2d_k3_tc_pipe"
    assert ok, detail


def test_int8_tensor_core_conv_matches_the_oracle_on_the_emulator(emu):
    cuda_emu, be, work = emu
    kernel, ok, detail = cuda_emu.check_qconv(be, np.random.default_rng(6), work, (1, 32, 9, 16), 70, "NHWC", 1,
                                              np.uint8, np.int8, np.uint8)
    assert kernel == "qconv2d_k3_tc"
    assert ok, detail


def test_streamed_weight_float16_conv_matches_the_oracle_on_the_emulator(emu):
    """CONV_TC=3 (the streamed-weight kernels): the weight layout pass, then 3 chunks of 32 channels."""
    cuda_emu, be, work = emu
    kernel, ok, detail = cuda_emu.check_conv(be, np.random.default_rng(7), work, (1, 72, 9, 16), 70, "NHWC", 1,
                                             {"CONV_TC": 3})
    assert kernel == "conv2d_k3_tc_wide"
    assert ok, detail


def test_gemm_1x1_conv_matches_the_oracle_on_the_emulator(emu):
    """CONV_K1_GEMM (opt-in): conv2d_k1_gemm, float16 NHWC 1x1 stride 2 padding 1 (zero rows), 2 x 10 x 11
    outputs (M = 220: a partial second 128-pixel tile), 40 input channels (a partial second 32-channel
    stage), 70 output channels (a partial tile, C_out % 8 != 0: the scalar stores), one launch."""
    cuda_emu, be, work = emu
    kernel, ok, detail = cuda_emu.check_k1_gemm(be, np.random.default_rng(12), work, (2, 40, 17, 19), 70, stride=2,
                                                padding=1)
    assert kernel == "conv2d_k1_gemm"
    assert ok, detail


def test_ldmatrix_trans_follows_the_ptx_layout_on_the_emulator(emu):
    """The emulated ldmatrix.x4 and ldmatrix.x4.trans (conv2d_k1_gemm_nchw's B fragments) against the PTX
    ISA's fragment layout, computed independently of emu.h."""
    cuda_emu, _, work = emu
    _, ok, detail = cuda_emu.check_ldmatrix(work)
    assert ok, detail


def test_nchw_gemm_1x1_conv_matches_the_oracle_on_the_emulator(emu):
    """CONV_K1_NCHW (opt-in): conv2d_k1_gemm_nchw, float16 NCHW 1x1 stride 1 with ReLU and no bias, 3 images of
    7 x 8 (168 pixels over the batch: a second 128-pixel tile that spans images, partly past the end), 40
    input channels (a partial second 32-channel stage), 70 output channels (a partial 128-channel tile), x
    and w followed by NaNs; one launch, no transposes."""
    cuda_emu, be, work = emu
    kernel, ok, detail = cuda_emu.check_k1_nchw(be, np.random.default_rng(14), work, (3, 40, 7, 8), 70,
                                                relu=True, bias=False)
    assert kernel == "conv2d_k1_gemm_nchw"
    assert ok, detail


@pytest.mark.parametrize(("shape", "stride", "padding", "params"), [
    ((3, 40, 13, 17), 2, 1, {}),
    ((3, 24, 18, 71), (2, 1), (0, 2, 1, 0), {"K1N_SAMPLE": 1}),
])
def test_strided_nchw_1x1_conv_samples_then_runs_the_gemm_on_the_emulator(emu, shape, stride, padding, params):
    """CONV_K1_NCHW 1 at stride 2 with padding 1: sample_planes writes the 8 x 10 sampled pixels of 3 x 40 x 13 x
    17 (zeros for the padding) into the poisoned workspace, then conv2d_k1_gemm_nchw runs over it; x, w and the
    workspace followed by NaNs, which must come back untouched past its end. K1N_SAMPLE 1 (sample_planes_rows8,
    8 rows a warp) at stride (2, 1) with asymmetric padding: 10 x 72 outputs (three column passes), 720 rows (a
    partial last block, warps whose rows cross planes)."""
    cuda_emu, be, work = emu
    kernel, ok, detail = cuda_emu.check_k1_nchw(be, np.random.default_rng(16), work, shape, 70, stride=stride,
                                                padding=padding, params=params)
    assert kernel == "conv2d_k1_gemm_nchw"
    assert ok, detail


@pytest.mark.parametrize(("check", "shape", "params", "kernel"), [
    ("check_k1_gemm", (3, 40, 13, 17), {"K1G_PERSIST": 2}, "conv2d_k1_gemm_persist_cs"),
    ("check_k1_nchw", (5, 40, 9, 16), {"K1N_PERSIST": 1}, "conv2d_k1_gemm_nchw_persist"),
])
def test_persistent_gemm_1x1_convs_match_the_oracle_on_the_emulator(emu, check, shape, params, kernel):
    """K1G_PERSIST 2 / K1N_PERSIST 1 (opt-in): the persistent 1x1 GEMMs planned for one multiprocessor, so
    that its 2 blocks walk 3 tiles each (6 tiles: 663 NHWC pixels, or 720 NCHW pixels over 5 images, the last
    tile partial), the next tile's stages issued before this tile's epilogue; 40 input channels (a partial
    second stage), 70 output channels (a partial tile; NHWC's scalar stores), ReLU and no bias on NCHW."""
    cuda_emu, be, work = emu
    nchw = check == "check_k1_nchw"
    kernel_run, ok, detail = getattr(cuda_emu, check)(be, np.random.default_rng(15), work, shape, 70, params=params,
                                                      relu=nchw, bias=not nchw, sms=1)
    assert kernel_run == kernel
    assert ok, detail


def test_float32_sgemm_1x1_conv_matches_the_oracle_on_the_emulator(emu):
    """CONV_K1_SIMT (opt-in): conv2d_k1_simt, float32 NCHW 1x1 stride 2 padding 1 (padded pixels give the
    bias alone) with ReLU, 2 x 9 x 10 outputs (M = 180: a second 128-pixel tile that spans both images,
    gathered pixel loads), 37 input channels (scalar loads along k, a partial 8-channel stage), 70 output
    channels (a partial 128-channel tile), x and w followed by NaNs; one launch, no transposes."""
    cuda_emu, be, work = emu
    kernel, ok, detail = cuda_emu.check_k1_simt(be, np.random.default_rng(13), work, (2, 37, 17, 19), 70,
                                                layout="NCHW", stride=2, padding=1, relu=True)
    assert kernel == "conv2d_k1_simt"
    assert ok, detail


def test_pipelined_depthwise_conv_matches_the_oracle_on_the_emulator(emu):
    """DW_PIPE (opt-in): float16 NHWC, 72 channels (a partial 128-byte
    slice), 13 x 17 (no multiple of the 4 x 16 tiles), on 1 multiprocessor so each persistent
    block takes several tiles; against the oracle and bit for bit against the register walk."""
    cuda_emu, be, work = emu
    kernel, ok, detail = cuda_emu.check_dwconv(be, np.random.default_rng(8), work, (3, 72, 13, 17), np.float16, 1,
                                               {"DW_PIPE": 4}, sms=1, same_as={"DW_COLS": 4, "DW_CROWS": 8})
    assert kernel == "conv2d_dw_pipe4_k3s1"
    assert ok, detail


def test_depthwise_conv_on_tensor_cores_matches_the_oracle_on_the_emulator(emu):
    """DW_TC (opt-in): float16 NCHW depthwise, 21 x 40 (two row tiles, a second column tile
    with one n-tile inside the output), 5 planes, padding 1, against the oracle."""
    cuda_emu, be, work = emu
    kernel, ok, detail = cuda_emu.check_dwconv(be, np.random.default_rng(9), work, (2, 5, 21, 40), np.float16, 1,
                                               {"DW_TC": 1}, layout="NCHW")
    assert kernel == "conv2d_dw_tc_k3s1"
    assert ok, detail


@pytest.mark.parametrize("kind", ["avg", "max"])
def test_global_pooling_lanes_per_pair_match_the_oracle_on_the_emulator(emu, kind):
    """ADAPT_GVEC_S 2 with 4 loads in flight (the sm_90 float16 entry): float16 NHWC global
    pooling of 5 x 264 x 7 x 7 planned for one multiprocessor, so pairs (165) are no multiple of
    16 a warp and the last warp is partial; 2 % NaN inputs."""
    cuda_emu, be, work = emu
    kernel, ok, detail = cuda_emu.check_gvec(be, np.random.default_rng(10), work, (5, 264, 7, 7), np.float16, kind,
                                             {"ADAPT_GVEC_S": 2, "ADAPT_GVEC_U": 4}, sms=1, nan_frac=0.02)
    assert kernel == f"adaptive_pool2d_{kind}_gvec"
    assert ok, detail


def test_batch_norm_flat_inference_matches_the_oracle_on_the_emulator(emu):
    """batch_norm_infer_flat_reg with the first tile's loads early (BN_INFER_EARLY), one
    multiprocessor's persistent blocks walking several tiles, NaN inputs: against the oracle
    and bit for bit against the plain walk."""
    cuda_emu, be, work = emu
    walk = {"BN_THREADS": 128, "BN_UNROLL": 2, "BN_BLOCKS_PER_SM": 2}
    kernel, ok, detail = cuda_emu.check_bn_infer(be, np.random.default_rng(7), work, (4, 64, 8, 12), np.float16,
                                                 "NHWC", {**walk, "BN_INFER_EARLY": 1}, sms=1, same_as=walk)
    assert kernel == "batch_norm_infer_flat_reg"
    assert ok, detail


_BN_WALK = {"BN_THREADS": 128, "BN_UNROLL": 2, "BN_BLOCKS_PER_SM": 2}


@pytest.mark.parametrize(
    "shape,dtype,layout,data,params",
    [
        ((4, 24, 16, 20), np.float16, "NHWC", "outlier", {"BN_STATS_SUMS": 16}),
        ((4, 24, 16, 20), np.float32, "NHWC", "big_mean", {}),
        ((3, 13, 10, 11), np.float32, "NHWC", "outlier", {"BN_STATS_SUMS": 16}),  # C % 4: scalar loads
        ((4, 6, 23, 29), np.float32, "NCHW", "outlier", {"BN_STATS_SUMS": 16}),  # HW % 4: scalar loads
        ((3, 5, 24, 36), np.float16, "NCHW", "big_mean", {"BN_STATS_SUMS": 16, "BN_APPLY_MERGE": 1}),
        ((3, 5, 24, 36), np.float32, "NCHW", "normal", {"BN_STATS_SUMS": 0}),
    ],
)
def test_batch_norm_training_matches_the_oracle_on_the_emulator(emu, shape, dtype, layout, data, params):
    """The training plan (statistics, finalize or the merged apply, apply) on one
    multiprocessor, so that each thread's walk spans several shifted-sum chunks
    (BN_STATS_SUMS): y and the running statistics against the float64 oracle, on data whose
    pivots sit far from the mean (every channel's first element 1e3) or with a mean of 1e4."""
    cuda_emu, be, work = emu
    kernel, ok, detail = cuda_emu.check_bn_train(be, np.random.default_rng(11), work, shape, dtype, layout,
                                                 {**_BN_WALK, **params}, sms=1, data=data)
    assert kernel in ("batch_norm_apply_ex", "batch_norm_apply_merged")
    assert ok, detail


@pytest.mark.parametrize(("name", "kw"), [
    ("groups 8 float16 NHWC", dict(shape=(2, 64, 13, 19), cout=64, groups=8, layout="NHWC", dtype=np.float16,
                                   params={}, kernel="conv2d_grp_k3s1")),
    ("groups 8 float16 NCHW on tensor cores", dict(shape=(2, 64, 13, 37), cout=64, groups=8, layout="NCHW",
                                                   dtype=np.float16, params={"GRP_TC": 1, "GRP_TC_ROWS": 8},
                                                   kernel="conv2d_grp_tc8")),
    ("7x7 stride 2 float32 NCHW, 4 channels a stage", dict(shape=(1, 6, 23, 29), cout=10, groups=1, layout="NCHW",
                                                          dtype=np.float32, params={"GRP_CIC": 4}, k=(7, 7),
                                                          stride=2, padding=(3, 2, 1, 3), kernel="conv2d_grp_g")),
    # 3x3 stride 2 on tensor cores (session 21): two 32-channel chunks (the second partial), two
    # output-channel tiles (the second partial), 10 x 35 outputs (partial 8 x 32 tiles)
    ("3x3 stride 2 float16 NHWC on tensor cores", dict(shape=(1, 40, 19, 70), cout=70, groups=1, layout="NHWC",
                                                     dtype=np.float16, params={}, stride=2,
                                                     kernel="conv2d_k3s2_tc_wide")),
    # 1x1 stride 2: only the patch's even rows and columns are copied (skipping its even columns fails it)
    ("1x1 stride 2 float16 NHWC on tensor cores", dict(shape=(1, 40, 17, 70), cout=70, groups=1, layout="NHWC",
                                                     dtype=np.float16, params={}, k=(1, 1), stride=2, padding=0,
                                                     kernel="conv2d_k1s2_tc_wide")),
    # TC_WIDE_ROWS 4 (session 42: the streamed-weight kernels on 99 KB parts and stride 2 on sm_80): 4 x 32
    # tiles, 4 warps; 9 or 10 output rows (a partial last tile), partial column and channel tiles
    ("3x3 wide 4 rows float16 NHWC", dict(shape=(1, 40, 9, 35), cout=70, groups=1, layout="NHWC", dtype=np.float16,
                                         params={"CONV_TC": 3, "TC_WIDE_ROWS": 4}, kernel="conv2d_k3_tc_wide")),
    ("3x3 wide 4 rows float16 NCHW", dict(shape=(1, 40, 10, 40), cout=24, groups=1, layout="NCHW", dtype=np.float16,
                                         params={"CONV_TC": 3, "TC_WIDE_ROWS": 4}, kernel="conv2d_k3_tc_wide")),
    ("1x1 wide 4 rows float16 NHWC", dict(shape=(2, 40, 9, 40), cout=70, groups=1, layout="NHWC", dtype=np.float16,
                                         params={"CONV_TC": 3, "TC_WIDE_ROWS": 4}, k=(1, 1), padding=0,
                                         kernel="conv2d_k1_tc_wide")),
    ("3x3 stride 2 4 rows float16 NHWC", dict(shape=(1, 40, 19, 70), cout=70, groups=1, layout="NHWC",
                                             dtype=np.float16, params={"TC_WIDE_ROWS": 4}, stride=2,
                                             kernel="conv2d_k3s2_tc_wide")),
    # one stage (TC_WIDE_STAGES 1: the 99 KiB parts' 3x3 stride 2): each next stage loads after the mma into
    # the one buffer; two chunks, two tiles a block (1 SM), a partial row tile; NCHW stride 1 too
    ("3x3 stride 2 4 rows 1 stage float16 NHWC", dict(shape=(2, 40, 17, 35), cout=24, groups=1, layout="NHWC",
                                                     dtype=np.float16, params={"TC_WIDE_ROWS": 4,
                                                                               "TC_WIDE_STAGES": 1},
                                                     stride=2, sms=1, kernel="conv2d_k3s2_tc_wide")),
    ("3x3 wide 1 stage float16 NCHW", dict(shape=(1, 40, 10, 40), cout=24, groups=1, layout="NCHW",
                                          dtype=np.float16, params={"CONV_TC": 3, "TC_WIDE_STAGES": 1}, sms=1,
                                          kernel="conv2d_k3_tc_wide")),
    # NCHW: transposed to NHWC and back around the same kernel (its last launch is the transpose)
    ("3x3 stride 2 float16 NCHW on tensor cores", dict(shape=(2, 16, 13, 37), cout=24, groups=1, layout="NCHW",
                                                     dtype=np.float16, params={}, stride=2, padding=(1, 0, 0, 2),
                                                     kernel="layout_transpose")),
])
def test_tiled_direct_conv_matches_the_oracle_on_the_emulator(emu, name, kw):
    """The register-tiled direct kernel (grouped, strided and other convs), partial tiles,
    the output poisoned, against the float64 oracle."""
    cuda_emu, be, work = emu
    kernel, ok, detail = cuda_emu.check_tiled(be, np.random.default_rng(11), work, **kw)
    assert ok, f"{name}: {kernel}: {detail}"


@pytest.mark.parametrize(("name", "kw"), [
    # the dense 3x3 stride-1 CUDA-core kernel float32 serves (conv2d_k3_simt, no CI test before session 27):
    # partial 8 x 32 tiles, a partial 64-channel tile and a partial 8-channel chunk, its cp.async stages
    ("float32 dense 3x3 NCHW on CUDA cores", dict(shape=(2, 12, 13, 37), cout=70, groups=1, layout="NCHW",
                                                dtype=np.float32, params={}, kernel="conv2d_k3_simt")),
    # CONV_IM2COL, float16 (session 26): the stem's 7x7 stride 2 of 3 channels (K 147 padded to 160), a row of
    # 3 segments (the last partial), C_out 70 (a partial second 64-channel chunk), 2 SMs: warps walk tiles
    ("float16 7x7 stride 2 stem NHWC", dict(shape=(2, 3, 21, 75), cout=70, groups=1, layout="NHWC",
                                           dtype=np.float16, params={"CONV_IM2COL": 1}, k=(7, 7), stride=2,
                                           padding=3, sms=2, kernel="conv2d_im2col_tc")),
    # CONV_IM2COL, float32 (session 27): the stem on the SGEMM's tiles (K 147: a partial last stage), and
    # NHWC's channel quads (C_in % 4 == 0: k as (ky, kx, ci), weights through the table) with padding
    ("float32 7x7 stride 2 stem NCHW", dict(shape=(2, 3, 21, 75), cout=70, groups=1, layout="NCHW",
                                           dtype=np.float32, params={"CONV_IM2COL": 1}, k=(7, 7), stride=2,
                                           padding=3, kernel="conv2d_im2col_simt")),
    ("float32 3x3 stride 2 NHWC channel quads", dict(shape=(2, 16, 11, 14), cout=24, groups=1, layout="NHWC",
                                                    dtype=np.float32, params={"CONV_IM2COL": 1}, stride=2,
                                                    padding=1, kernel="conv2d_im2col_simt")),
])
def test_dense_and_implicit_gemm_convs_match_the_oracle_on_the_emulator(emu, name, kw):
    """conv2d_k3_simt and the implicit GEMMs (CONV_IM2COL): conv2d_im2col_tc (float16, tensor cores) and
    conv2d_im2col_simt (float32, CUDA cores), each alone in its plan, the output poisoned, against the float64
    oracle."""
    cuda_emu, be, work = emu
    kernel, ok, detail = cuda_emu.check_tiled(be, np.random.default_rng(17), work, **kw)
    assert ok, f"{name}: {kernel}: {detail}"


def test_depthwise_row_strips_with_shuffled_halos_match_the_plain_strips_on_the_emulator(emu):
    """DW_SHFL (opt-in): conv2d_dw_rows4s_k3s1 on float16 NCHW 1x5x30x40, padding 1: 5 vector columns a
    row, so warps cross strips and planes (halos from lanes and from memory), and the last strip of each
    plane is partial; against the oracle and bit for bit against the plain strips (the same FMA order)."""
    cuda_emu, be, work = emu
    kernel, ok, detail = cuda_emu.check_dwconv(be, np.random.default_rng(13), work, (1, 5, 30, 40), np.float16, 1,
                                               {"DW_ROWS": 4, "DW_SHFL": 1}, layout="NCHW",
                                               same_as={"DW_ROWS": 4}, kernel="conv2d_dw_rows4s_k3s1")
    assert kernel == "conv2d_dw_rows4s_k3s1"
    assert ok, detail


@pytest.mark.parametrize("name, kw", [
    # float32 C 64 over 3 blocks: a block a channel, two grid barriers (the sm_90 entries' mode)
    ("float32 3x64x9x7 a block a channel", dict(shape=(3, 64, 9, 7), dtype=np.float32, params={}, sms=3,
                                                data="normal")),
    # float16 with 4 of each thread's 38 vectors re-read, a mean of 1e4
    ("float16 8x64x30x30 re-read", dict(shape=(8, 64, 30, 30), dtype=np.float16, params={}, sms=3, data="big_mean")),
    # every block merging every channel (one grid barrier), C 24 (channel groups not sharing a warp), mean 1e4
    ("float32 C24 every block every channel", dict(shape=(4, 24, 7, 9), dtype=np.float32,
                                                   params={"BN_FUSED_FIN": 1}, sms=2, data="big_mean")),
])
def test_batch_norm_training_in_one_cooperative_launch_matches_the_oracle_on_the_emulator(emu, name, kw):
    """batch_norm_train_fused (BN_FUSED 1, NHWC) with every block's threads at once (emu_launch_coop:
    each block runs until its threads only spin, so a read of another block's writes without a grid
    barrier between them fails), y and the running statistics against the float64 oracle."""
    cuda_emu, be, work = emu
    kernel, ok, detail = cuda_emu.check_bn_train(be, np.random.default_rng(29), work, layout="NHWC",
                                                 kernel="batch_norm_train_fused",
                                                 **{**kw, "params": {"BN_FUSED": 1, **kw["params"]}})
    assert ok, f"{name}: {kernel}: {detail}"


@pytest.mark.parametrize("params, sms", [
    ({"BN_FUSED": 1, "BN_FUSED_THREADS": 256, "BN_FUSED_REGS": 16}, 2),  # the fused kernel, 133 values a thread
    ({"BN_THREADS": 128, "BN_BLOCKS_PER_SM": 2}, 1),  # the two-pass kernels, 266 values a thread
    ({"BN_THREADS": 128, "BN_BLOCKS_PER_SM": 2, "BN_UNROLL": 1}, 1),  # one load a batch: re-centred after 4
])
def test_batch_norm_training_variance_with_an_outlier_pivot_on_the_emulator(emu, params, sms):
    """Float32 NHWC 2x348x14x19 with every channel's first element at 1e3: full 64-value chunks that
    start at the outlier; re-centred on the mean of their first BN_PIVOT_N values, the running
    variance within 2e-5 of its scale (session 28 found 5e-5 with the first value as the pivot)."""
    cuda_emu, be, work = emu
    kernel, ok, detail = cuda_emu.check_bn_train(be, np.random.default_rng(1), work, (2, 348, 14, 19), np.float32,
                                                 "NHWC", params, sms=sms, data="outlier")
    assert ok, f"{kernel}: {detail}"


def test_batch_norm_training_outlier_pivot_case_fails_with_the_first_value_as_pivot_on_the_emulator(emu):
    """The case above with BN_PIVOT_N 0 (each chunk's first value the pivot, as before session 45)
    fails on the running variance, as session 28 found: so it is the outlier case, not a lenient check,
    that the re-centring passes."""
    cuda_emu, be, work = emu
    params = {"BN_FUSED": 1, "BN_FUSED_THREADS": 256, "BN_FUSED_REGS": 16, "BN_PIVOT_N": 0}
    kernel, ok, detail = cuda_emu.check_bn_train(be, np.random.default_rng(1), work, (2, 348, 14, 19), np.float32,
                                                 "NHWC", params, sms=2, data="outlier")
    assert kernel == "batch_norm_train_fused"
    assert not ok and "running_var" in detail, f"{kernel}: {detail or 'passed'}"


def _asan_builds() -> bool:
    """g++ links a program under AddressSanitizer here (libasan installed)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.cpp"
        src.write_text("int main() { return 0; }\n")
        res = subprocess.run(["g++", "-fsanitize=address", str(src), "-o", str(Path(tmp) / "probe")],
                             capture_output=True, text=True)
        return res.returncode == 0


def test_batch_norm_training_in_one_cooperative_launch_stays_inside_its_buffers_under_asan(emu, monkeypatch):
    """The fused kernel's re-read case (float16, 4 of 38 vectors a thread read again in pass 2) under
    the emulator's --asan: every byte of every buffer outside its tensor is poisoned, so a global
    load or store past a tensor (which the oracle cannot see when the value goes unused) fails."""
    if not _asan_builds():
        pytest.skip("g++ cannot link with -fsanitize=address here (no libasan)")
    cuda_emu, be, work = emu
    monkeypatch.setattr(cuda_emu, "_SANITIZE", list(cuda_emu._ASAN))
    kernel, ok, detail = cuda_emu.check_bn_train(be, np.random.default_rng(29), work, shape=(8, 64, 30, 30),
                                                 dtype=np.float16, layout="NHWC", kernel="batch_norm_train_fused",
                                                 params={"BN_FUSED": 1}, sms=3, data="big_mean")
    assert ok, f"{kernel}: {detail}"
