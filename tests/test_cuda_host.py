"""Host-side logic of the CUDA backend that needs no GPU (CI runs it): buffer lifetimes."""

from __future__ import annotations


def test_cuda_buffer_defers_its_free():
    """Without a GPU: a dead pool buffer puts its block on the backend's list (no context
    needed on whatever thread collects it), and the backend frees the list's blocks (with
    its context current, at its next allocation or synchronize); foreign buffers free nothing."""
    import gc
    import threading

    from hal.backends.cuda import CudaBackend, CudaBuffer

    class Block:
        freed = 0

        def free(self) -> None:
            self.freed += 1

    freed_list: list[object] = []
    blocks = [Block() for _ in range(3)]
    bufs = [CudaBuffer(0x1000 * (i + 1), 256, b, freed_list) for i, b in enumerate(blocks)]
    foreign = CudaBuffer(0x9000, 64, object())  # wrap(): keeps its owner alive, frees nothing
    del foreign
    worker = threading.Thread(target=bufs.pop)  # collected on another thread
    worker.start()
    worker.join()
    del bufs
    gc.collect()
    assert sorted(id(b) for _, b in freed_list) == sorted(map(id, blocks)) and all(b.freed == 0 for b in blocks)
    assert all(n == 256 for n, _ in freed_list)
    backend = CudaBackend.__new__(CudaBackend)
    backend._freed = freed_list
    backend._return_freed()
    assert freed_list == [] and all(b.freed == 1 for b in blocks)


def test_cuda_allocate_reuses_a_dead_block_of_the_same_size():
    """Without a GPU: an allocation of the size a dead buffer had takes its block back with no
    context push and no pool call; any other size returns the dead blocks to the pool (context
    pushed) and allocates from it."""
    from hal.backends.cuda import CudaBackend, CudaBuffer

    class Block:
        def __init__(self, ptr: int) -> None:
            self.ptr, self.freed = ptr, 0

        def __int__(self) -> int:
            return self.ptr

        def free(self) -> None:
            self.freed += 1

    class Ctx:
        pushes = 0

        def push(self) -> None:
            Ctx.pushes += 1

        @staticmethod
        def pop() -> None:
            pass

    class Drv:
        Context = Ctx

    backend = CudaBackend.__new__(CudaBackend)
    backend._freed = []
    backend._ctx, backend._drv = Ctx(), Drv
    from_pool: list[int] = []

    def alloc_raw(nbytes: int) -> CudaBuffer:
        backend._return_freed()
        from_pool.append(nbytes)
        block = Block(0x100000 + len(from_pool))
        return CudaBuffer(int(block), nbytes, block, backend._freed)

    backend._alloc_raw = alloc_raw
    first = backend.allocate(4096)
    assert Ctx.pushes == 1 and from_pool == [4096]
    ptr, block = first.ptr, first.owner
    del first  # dead: its block waits on the backend's list
    again = backend.allocate(4096)
    assert again.ptr == ptr and again.owner is block and Ctx.pushes == 1 and from_pool == [4096]
    assert block.freed == 0 and backend._freed == []
    del again
    other = backend.allocate(100)  # another size: the dead block goes back to the pool
    assert Ctx.pushes == 2 and from_pool == [4096, 100] and block.freed == 1 and backend._freed == []
    assert other.nbytes == 100


def _cuda_emu():
    """tools/cuda_emu.py (its planners without a GPU)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    try:
        import cuda_emu
    finally:
        sys.path.pop(0)
    return cuda_emu


def _h200_without_gpu():
    """A CudaBackend that plans as on an H200 (tools/cuda_emu.py's, which runs the plans on its
    emulator) and records its launches (kernel names) instead of making them."""
    be = _cuda_emu().h200_backend()
    runs: list[tuple[str, ...]] = []
    be._run = lambda plan, buffers: runs.append(tuple(launch.kernel for launch in plan))
    return be, runs


def _kernels_planned_on_sm75(plan) -> list[str]:
    """The kernels `plan(backend=...)` launches on an H200 planner that says it is sm_75 (no cp.async)."""
    old, _ = _h200_without_gpu()
    old._cc = (7, 5)
    kept: list[object] = []
    old._run = lambda launches, buffers: kept.append(launches)
    plan(backend=old)
    return [launch.kernel for launch in kept[-1]]


def _conv_plans_on_h200():
    """An H200 planner whose launch plans are kept whole (not just the kernel names), an aligned
    and an 8-byte-misaligned buffer, and conv2d.cu's source: what the depthwise plan tests read."""
    from hal.backends.cuda import CudaBuffer
    from hal.resources import kernel_source

    be, _ = _h200_without_gpu()
    plans: list[object] = []
    be._run = lambda plan, buffers: plans.append(plan)
    return (be, plans, CudaBuffer(0x10000, 1 << 30, None), CudaBuffer(0x10008, 1 << 30, None),
            kernel_source("kernels_cu", "conv2d.cu"))


def test_cuda_global_pooling_fixes_small_planes_at_build_time():
    """Without a GPU: NCHW global pooling builds small planes fixed (ADAPT_GHW) where the
    lanes' shared-memory strides leave at most 2-way bank conflicts: 7x7 in both dtypes,
    6x6 in float16 only, never 8x8 (every lane in one bank) or planes over 64."""
    import numpy as np

    from hal import spec as S
    from hal.backends.base import fixed_plane_ok
    from hal.backends.cuda import CudaBuffer

    assert fixed_plane_ok(49, 2) and fixed_plane_ok(49, 4) and fixed_plane_ok(36, 2)
    assert not fixed_plane_ok(36, 4) and not fixed_plane_ok(64, 2) and not fixed_plane_ok(65, 4)
    be, _ = _h200_without_gpu()
    plans: list[object] = []
    be._run = lambda plan, buffers: plans.append(plan)
    buf = CudaBuffer(0x10000, 1 << 30, None)
    for dtype, h, w, fixed in ((np.float16, 7, 7, 49), (np.float32, 7, 7, 49), (np.float16, 6, 6, 36),
                               (np.float32, 6, 6, None), (np.float16, 8, 8, None), (np.float32, 9, 9, None)):
        g = S.TensorGeometry(8, 64, h, w, "NCHW", np.dtype(dtype))
        be.adaptive_pool2d(S.adaptive_pool2d_spec("avg", S.plane_geometry(g), 1, False), buf, buf, None,
                           {"ADAPT_GFLAT": 1})
        (launch,) = plans[-1]
        assert launch.kernel == "adaptive_pool2d_avg_gflat"
        assert dict(launch.defines).get("ADAPT_GHW") == fixed, (dtype, h, w, launch.defines)


def test_cuda_launchers_plan_once_without_a_gpu():
    """Without a GPU: every CUDA launcher's host side (parameter key, plan, workspace) runs,
    with the launch itself recorded instead; a repeated call reuses its stored plan, and
    NCHW training with BN_APPLY_MERGE plans two launches instead of three."""
    import numpy as np

    from hal import spec as S
    from hal.backends.cuda import CudaBuffer

    be, runs = _h200_without_gpu()
    x, y = CudaBuffer(0x10000, 1 << 30, None), CudaBuffer(0x20000, 1 << 30, None)
    for dtype in (np.float32, np.float16):
        for layout in ("NCHW", "NHWC"):
            g = S.TensorGeometry(4, 16, 33, 35, layout, np.dtype(dtype))
            pg = S.plane_geometry(g)
            calls = [
                lambda pg=pg: be.pool2d(S.pool2d_spec("max", pg, 3, 2, 1, 1, False, True, None, False), x, y, None,
                                        {}),
                lambda pg=pg: be.adaptive_pool2d(S.adaptive_pool2d_spec("avg", pg, 1, False), x, y, None, {}),
                lambda g=g: be.conv2d(S.conv2d_spec(g, (16, 1, 3, 3), True, (16,), 1, 1, 1, 16), x, x, x, y, {}),
                *(lambda t=t, m=m, pg=pg: be.batch_norm(S.batch_norm_spec(pg, t, 0.1, 1e-5, True), x, y, x, x, x, x,
                                                        {"BN_APPLY_MERGE": m})
                  for t in (False, True) for m in (0, 1)),
            ]
            for call in calls:
                before = len(be._plans)
                call()
                assert len(be._plans) == before + 1
                call()
                assert len(be._plans) == before + 1 and runs[-1] == runs[-2]
            merged = runs[-2] if layout == "NCHW" else None
            if merged is not None:
                assert merged == ("batch_norm_stats", "batch_norm_apply_merged")
    assert ("batch_norm_stats", "batch_norm_finalize", "batch_norm_apply_ex") in runs


def test_cuda_quantized_pooling_plans_without_a_gpu():
    """Without a GPU: int8/uint8 pooling plans one quant_pool2d.cu launch whose arguments match
    its format (3 pointers, pool2d's 18 ints and the zero point last), built per dtype and
    layout; float specs keep pool2d.cu."""
    import numpy as np

    from hal import spec as S
    from hal.backends.cuda import CudaBackend, CudaBuffer

    assert CudaBackend.quantized_pooling
    be, _ = _h200_without_gpu()
    plans: list[object] = []
    be._run = lambda plan, buffers: plans.append(plan)
    buf = CudaBuffer(0x10000, 1 << 30, None)
    for dtype in (np.int8, np.uint8):
        for layout in ("NCHW", "NHWC"):
            g = S.plane_geometry(S.TensorGeometry(2, 5, 9, 11, layout, np.dtype(dtype)))
            for kind in ("max", "avg"):
                spec = S.pool2d_spec(kind, g, 3, 2, 1, 1, True, False, None, False)
                if kind == "avg":
                    from dataclasses import replace

                    spec = replace(spec, zero_point=-7 if dtype == np.int8 else 200)
                be.pool2d(spec, buf, buf, None, {})
                (launch,) = plans[-1]
                # NCHW 3x3/2 without indices: the byte row kernel (width 11); NHWC with 5 channels:
                # the contract kernel; the same argument list either way
                want = f"pool2d_{kind}_rows_b_k3s2" if layout == "NCHW" else f"pool2d_{kind}"
                assert (launch.file, launch.kernel) == ("quant_pool2d.cu", want)
                assert dict(launch.defines) == {"DTYPE_UINT8": int(dtype == np.uint8),
                                                "LAYOUT_NHWC": int(layout == "NHWC")}
                assert len(launch.fmt) == len(launch.args) == 22 and launch.fmt == "PPP" + "i" * 19
                assert launch.args[3:9] == (2, 5, 9, 11, spec.out_h, spec.out_w)
                assert launch.args[-1] == spec.zero_point and launch.args[-2] == 0  # count_include_pad False
    be.pool2d(S.pool2d_spec("max", S.plane_geometry(S.TensorGeometry(2, 5, 9, 11, "NCHW", np.dtype(np.float32))),
                            3, 2, 1, 1, False, True, None, False), buf, buf, None, {})
    assert plans[-1][0].file == "pool2d.cu"


def test_cuda_quantized_pooling_picks_its_fast_kernels_without_a_gpu():
    """Without a GPU: int8/uint8 pooling without indices takes quant_pool2d.cu's NCHW row
    kernels for square 3x3/2, 2x2/2 and 3x3/1 windows (8 outputs per thread; from words
    where the width is a multiple of 4 and the buffers aligned, else from bytes: rows_b), and
    its NHWC vector kernels (16 channels where C % 16 == 0 and both buffers are 16-byte aligned,
    else 4) for windows of at most 9 taps; indices, other windows, odd widths or channels,
    unaligned buffers and force_generic keep one thread per output, with a grid for it. Square
    2x2 and 3x3 NHWC windows without dilation take the variants with their taps built in
    (_k2, _k3)."""
    import numpy as np

    from hal import spec as S
    from hal.backends.cuda import CudaBuffer

    be, _ = _h200_without_gpu()
    plans: list[object] = []
    be._run = lambda plan, buffers: plans.append(plan)

    def kernel(shape, layout, window, indices=False, address=0x10000, dtype=np.int8):
        k, st, pad, dil = window
        g = S.plane_geometry(S.TensorGeometry(*shape, layout, np.dtype(dtype)))
        spec = S.pool2d_spec("max", g, k, st, pad, dil, False, True, None, indices)
        buf = CudaBuffer(address, 1 << 30, None)
        be.pool2d(spec, buf, buf, buf if indices else None, {})
        (launch,) = plans[-1]
        return launch.kernel, launch.grid[0] * launch.block[0]

    for k, st in ((3, 2), (2, 2), (3, 1)):
        name, threads = kernel((2, 5, 9, 12), "NCHW", (k, st, 1, 1))
        assert name == f"pool2d_max_rows_k{k}s{st}"
        out_w = (12 + 2 - k) // st + 1
        assert threads >= 2 * 5 * ((9 + 2 - k) // st + 1) * -(-out_w // 8)
    assert kernel((2, 5, 9, 12), "NCHW", (3, 2, 1, 1), dtype=np.uint8)[0] == "pool2d_max_rows_k3s2"
    assert kernel((2, 5, 9, 12), "NCHW", (3, 2, 1, 1), indices=True)[0] == "pool2d_max"
    # widths that are not a multiple of 4, or unaligned buffers: the same rows from byte loads
    assert kernel((2, 5, 9, 11), "NCHW", (3, 2, 1, 1))[0] == "pool2d_max_rows_b_k3s2"
    assert kernel((2, 5, 9, 14), "NCHW", (2, 2, 0, 1))[0] == "pool2d_max_rows_b_k2s2"
    assert kernel((2, 5, 9, 12), "NCHW", (3, 1, 1, 1), address=0x10002)[0] == "pool2d_max_rows_b_k3s1"
    assert kernel((2, 5, 9, 12), "NCHW", (3, 2, 1, 2))[0] == "pool2d_max"  # dilation
    assert kernel((2, 5, 9, 12), "NCHW", ((3, 2), 2, 1, 1))[0] == "pool2d_max"  # not square
    assert kernel((2, 5, 9, 12), "NCHW", (2, 1, 0, 1))[0] == "pool2d_max"  # 2x2/1: no row kernel
    name, threads = kernel((2, 32, 9, 11), "NHWC", (3, 2, 1, 1))
    assert name == "pool2d_max_vec16_k3" and threads >= 2 * 5 * 6 * 2
    assert kernel((2, 32, 9, 11), "NHWC", (3, 2, 1, 1), address=0x10004)[0] == "pool2d_max_vec4_k3"
    assert kernel((2, 12, 9, 11), "NHWC", (2, 2, 0, 1))[0] == "pool2d_max_vec4_k2"
    assert kernel((2, 12, 9, 11), "NHWC", (3, 1, 1, 2))[0] == "pool2d_max_vec4"  # dilation
    assert kernel((2, 12, 9, 11), "NHWC", ((2, 3), 1, 1, 1))[0] == "pool2d_max_vec4"  # not square
    assert kernel((2, 12, 9, 11), "NHWC", (4, 2, 1, 1))[0] == "pool2d_max"  # 16 taps
    assert kernel((2, 6, 9, 11), "NHWC", (3, 2, 1, 1))[0] == "pool2d_max"
    assert kernel((2, 32, 9, 11), "NHWC", (3, 2, 1, 1), indices=True)[0] == "pool2d_max"
    be.force_generic = True
    assert kernel((2, 32, 9, 11), "NHWC", (3, 2, 1, 1))[0] == "pool2d_max"
    assert kernel((2, 5, 9, 12), "NCHW", (3, 2, 1, 1))[0] == "pool2d_max"


def test_cuda_quantized_conv_plans_without_a_gpu():
    """Without a GPU: int8/uint8 conv plans one quant_conv2d.cu launch with the contract's 24
    arguments (6 buffers, the geometry, then X_ZP and Y_ZP), built per input, weight and output
    type and layout: ``qconv2d_co4`` where C_out per group is a multiple of 4, else ``qconv2d``;
    a multiplier goes with an int8/uint8 output only."""
    import numpy as np
    import pytest

    from hal import spec as S
    from hal.backends.cuda import CudaBackend, CudaBuffer
    from hal.errors import HalValueError

    assert CudaBackend.quantized_conv
    be, _ = _h200_without_gpu()
    plans: list[object] = []
    be._run = lambda plan, buffers: plans.append((plan, buffers))
    buf = CudaBuffer(0x10000, 1 << 30, None)
    for layout in ("NCHW", "NHWC"):
        conv = S.conv2d_spec(S.TensorGeometry(2, 6, 9, 11, layout, np.dtype(np.uint8)), (4, 3, 3, 2), False, None,
                             (2, 1), (1, 0), (1, 2), 2)
        for out, kind in ((np.int32, 0), (np.int8, 1), (np.uint8, 2)):
            spec = S.QConv2dSpec(conv, np.dtype(np.int8), np.dtype(out), 3, 0 if kind == 0 else -4, True)
            be.qconv2d(spec, buf, buf, None, buf, buf, None if kind == 0 else buf, {})
            (launch,), buffers = plans[-1]
            assert (launch.file, launch.kernel) == ("quant_conv2d.cu", "qconv2d")  # 2 channels per group
            assert dict(launch.defines) == {"DTYPE_UINT8": 1, "W_UINT8": 0, "Y_KIND": kind,
                                            "LAYOUT_NHWC": int(layout == "NHWC")}
            assert launch.fmt == "PPPPPP" + "i" * 18 and len(launch.args) == 24
            assert launch.args[6:] == (2, 6, 9, 11, 4, conv.out_h, conv.out_w, 3, 2, 2, 1, 1, 0, 1, 2, 2, 3,
                                       spec.y_zero_point)
            assert buffers["b"] is None and (buffers["m"] is None) == (kind == 0)
            assert launch.grid[0] * launch.block[0] >= 2 * 4 * conv.out_h * conv.out_w
        # 8 output channels in 2 groups: 4 channels of one group per thread
        conv8 = S.conv2d_spec(S.TensorGeometry(2, 6, 9, 11, layout, np.dtype(np.uint8)), (8, 3, 3, 2), False, None,
                              (2, 1), (1, 0), (1, 2), 2)
        be.qconv2d(S.QConv2dSpec(conv8, np.dtype(np.int8), np.dtype(np.int8), 3, 1, True), buf, buf, None, buf, buf,
                   buf, {})
        (launch,), _ = plans[-1]
        assert launch.kernel == "qconv2d_co4" and launch.args[6:13] == (2, 6, 9, 11, 8, conv8.out_h, conv8.out_w)
        assert launch.grid[0] * launch.block[0] >= 2 * 2 * conv8.out_h * conv8.out_w
        with pytest.raises(HalValueError, match="multiplier"):
            be.qconv2d(S.QConv2dSpec(conv, np.dtype(np.int8), np.dtype(np.int32), 3, 0, True), buf, buf, None, buf,
                       buf, buf, {})


def test_cuda_tensor_core_conv_plans_without_a_gpu():
    """Without a GPU: CONV_TC=2 plans ``conv2d_k3_tc_pipe`` for float16 3x3 stride-1 convs with C_in <= 64
    and 16-byte aligned buffers (NHWC: C_in % 8 == 0), one block per multiprocessor (split over the
    64-channel output tiles) and its layout's shared memory; every other case falls back to
    ``conv2d_k3_tc`` (CONV_TC=1's kernel) or the CUDA-core kernels."""
    import numpy as np

    from hal import spec as S
    from hal.backends.cuda import _TC_PIPE_SMEM, CudaBuffer

    be, _ = _h200_without_gpu()
    plans: list[object] = []
    be._run = lambda plan, buffers: plans.append(plan)
    buf = CudaBuffer(0x10000, 1 << 30, None)
    odd = CudaBuffer(0x10004, 1 << 30, None)

    def plan(layout="NHWC", ci=64, co=64, k=3, dtype=np.float16, x=buf, tc=2):
        sp = S.conv2d_spec(S.TensorGeometry(256, ci, 32, 32, layout, np.dtype(dtype)), (co, ci, k, k), False, None,
                           1, k // 2, 1, 1)
        be.conv2d(sp, x, buf, None, buf, {"CONV_TC": tc})
        return plans[-1][-1]  # the conv launch (the streamed-weight kernels put their weight layout first)

    for layout in ("NHWC", "NCHW"):
        launch = plan(layout)
        assert launch.kernel == "conv2d_k3_tc_pipe" and launch.shared == _TC_PIPE_SMEM[layout] <= 232448
        assert launch.grid == (132, 1, 1) and launch.block == (256, 1, 1)
        assert launch.args[4:] == (256, 64, 32, 32, 64, 32, 32, 1, 1, 4, 1)
        assert plan(layout, co=130).grid == (44, 3, 1)
        for fallback in (dict(k=1), dict(x=odd), dict(tc=1)):
            assert plan(layout, **fallback).kernel in ("conv2d_k3_tc", "conv2d_k3_simt"), fallback
        assert plan(layout, ci=72).kernel == "conv2d_k3_tc_wide"  # past 64 input channels: streamed weights
    assert plan("NHWC", ci=12).kernel == "conv2d_k3_tc"  # NHWC copies need C_in % 8 == 0
    assert plan("NCHW", ci=12).kernel == "conv2d_k3_tc_pipe"  # NCHW transposes any C_in
    assert plan(dtype=np.float32).kernel == "conv2d_k3_simt"


def test_cuda_tiled_direct_conv_plans_without_a_gpu():
    """Without a GPU: grouped convs other than depthwise, channel multipliers, strided and other
    dense convs the specialised kernels do not take plan the register-tiled direct kernel
    (``conv2d_grp_k3s1`` for 3x3 stride 1, else ``conv2d_grp_g``): a block per (image, tile,
    group, chunk of GRP_COT output channels), the tile no wider or taller than the output,
    GRP_COT narrowed to the group's outputs, the staged channels halved until the shared
    memory fits; GRP_TILED 0 and ``force_generic`` keep the one-thread-per-output kernel."""
    import struct

    import numpy as np

    from hal import spec as S
    from hal.backends.cuda import CudaBuffer

    be, _ = _h200_without_gpu()
    plans: list[object] = []
    be._run = lambda plan, buffers: plans.append(plan)
    buf = CudaBuffer(0x10000, 1 << 30, None)

    def plan(shape=(256, 64, 32, 32), co=64, groups=8, k=3, stride=1, dtype=np.float32, layout="NCHW", **params):
        sp = S.conv2d_spec(S.TensorGeometry(*shape, layout, np.dtype(dtype)), (co, shape[1] // groups, k, k), False,
                           None, stride, k // 2, 1, groups)
        be.conv2d(sp, buf, buf, None, buf, params)
        (launch,) = plans[-1]
        grp = launch.kernel in ("conv2d_grp_k3s1", "conv2d_grp_g")
        fields = struct.unpack("<30i", launch.args[4][:120]) if grp else ()
        names = ("N CI IH IW CO OH OW KH KW SH SW DH DW PT PL G cig cog chunks txn th tiles_w tiles_h cic iht iwt "
                 "iwp cs vec_in vec_out").split()
        return launch, dict(zip(names, fields, strict=True)) if fields else {}

    launch, f = plan()
    assert launch.kernel == "conv2d_grp_k3s1" and launch.block == (256, 1, 1) and launch.grid == (256 * 8, 1, 1)
    assert (f["txn"], f["th"], f["tiles_w"], f["tiles_h"], f["cig"], f["cog"], f["chunks"]) == (8, 32, 1, 1, 8, 8, 1)
    assert (f["iht"], f["iwt"], f["iwp"], f["cic"]) == (34, 34, 34, 8) and f["cs"] % 32 == 4 and f["cs"] >= 34 * 34
    assert launch.shared == 4 * 8 * (f["cs"] + 9 * 8) and dict(launch.defines)["GRP_COT"] == 8
    assert (f["vec_in"], f["vec_out"]) == (0, 0)  # NCHW
    assert (plan(layout="NHWC")[1]["vec_in"], plan(layout="NHWC")[1]["vec_out"]) == (1, 1)
    assert plan((2, 24, 9, 9), co=24, groups=4, layout="NHWC")[1]["vec_in"] == 0  # 6 channels a group
    assert plan(layout="NHWC", GRP_COT=2)[1]["vec_out"] == 0
    # 32 groups of 4 channels: GRP_COT narrowed to 4; a 56 x 56 output in tiles of 32 x 32
    launch, f = plan((2, 128, 56, 56), co=128, groups=32)
    assert dict(launch.defines)["GRP_COT"] == 4 and (f["chunks"], f["tiles_w"], f["tiles_h"]) == (1, 2, 2)
    assert launch.grid == (2 * 2 * 2 * 32, 1, 1)
    # a 7-wide output: a 2-thread-wide tile (8 columns) of 7 rows
    launch, f = plan((4, 16, 7, 7), co=32, groups=2)
    assert (f["txn"], f["th"], f["chunks"]) == (2, 7, 2) and launch.block == (14, 1, 1)
    # strided dense, 1x1 dense in float32, a channel multiplier: the general variant
    assert plan((8, 64, 56, 56), co=128, groups=1, stride=2)[0].kernel == "conv2d_grp_g"
    assert plan((8, 64, 56, 56), co=128, groups=1, k=1)[0].kernel == "conv2d_grp_g"
    assert plan((8, 3, 224, 224), co=64, groups=1, k=7, stride=2)[0].kernel == "conv2d_grp_g"
    launch, f = plan((2, 16, 9, 9), co=48, groups=16, k=5)
    assert launch.kernel == "conv2d_grp_g" and dict(launch.defines)["GRP_COT"] == 4 and f["cog"] == 3
    # 7x7 stride 2, tiles of 32 x 64 outputs: 16 staged channels of 69 x 133 inputs do not fit
    # 227 KiB, so 4 (halved until they do)
    launch, f = plan((1, 32, 200, 200), co=32, groups=2, k=7, stride=2, GRP_CIC=16, GRP_TILE_W=64,
                     CONV_THREADS=512)
    assert (f["iht"], f["iwt"], f["cic"]) == (69, 133, 4) and launch.shared <= 232448
    # GRP_TC 1: float16 grouped convs of at most 16 channels a group, stride 1, on tensor cores
    launch, _ = plan(dtype=np.float16, layout="NHWC", GRP_TC=1)
    assert launch.kernel == "conv2d_grp_tc8" and launch.block == (128, 1, 1) and launch.grid == (256 * 2 * 8, 1, 1)
    tc = struct.unpack("<22i", launch.args[4])
    assert tc[11:] == (8, 8, 8, 8, 5, 16, 1, 2, 18, 34, 1)  # G cig cog cigp ksteps th tiles_w tiles_h iht iwt vec_in
    assert launch.shared == 2 * 18 * 34 * 8
    launch, _ = plan((2, 30, 9, 9), co=30, groups=2, dtype=np.float16, GRP_TC=1)  # 15 in (16 padded), 15 out
    assert launch.kernel == "conv2d_grp_tc16" and struct.unpack("<22i", launch.args[4])[12:16] == (15, 15, 16, 9)
    # 24 outputs a group: the tiled direct kernel
    assert plan((2, 30, 9, 9), co=48, groups=2, dtype=np.float16, GRP_TC=1)[0].kernel == "conv2d_grp_k3s1"
    for no_tc in (dict(dtype=np.float32), dict(stride=2, dtype=np.float16), dict(k=5, dtype=np.float16),
                  dict(shape=(2, 64, 9, 9), co=64, groups=2, dtype=np.float16), dict(dtype=np.float16)):
        assert not plan(**no_tc, **({} if no_tc == dict(dtype=np.float16) else {"GRP_TC": 1}))[0].kernel.startswith(
            "conv2d_grp_tc"), no_tc
    # the specialised kernels keep their specs
    assert plan(groups=64, co=64)[0].kernel.startswith("conv2d_dw")
    assert plan(groups=1)[0].kernel == "conv2d_k3_simt"
    assert plan(GRP_TILED=0)[0].kernel == "conv2d"
    be.force_generic = True
    try:
        assert plan()[0].kernel == "conv2d"
    finally:
        be.force_generic = False


def test_cuda_nhwc_global_pooling_plans_a_thread_per_channel_vector_without_a_gpu():
    """Without a GPU: NHWC global pooling without indices plans ``adaptive_pool2d_*_gvec`` (a thread per
    (image, 16-byte channel vector), arguments N, C, H*W) where those pairs number at least 256 per
    multiprocessor; indices, fewer pairs, or ADAPT_GVEC_U=0 keep the block-per-output vsplit kernel."""
    import numpy as np

    from hal import spec as S
    from hal.backends.cuda import CudaBuffer

    be, _ = _h200_without_gpu()
    plans: list[object] = []
    be._run = lambda plan, buffers: plans.append(plan)
    buf = CudaBuffer(0x10000, 1 << 30, None)

    def plan(n=256, kind="avg", dtype=np.float16, indices=False, params=None):
        sp = S.adaptive_pool2d_spec(kind, S.TensorGeometry(n, 2048, 7, 7, "NHWC", np.dtype(dtype)), (1, 1), indices)
        be.adaptive_pool2d(sp, buf, buf, buf if indices else None, params or {"ADAPT_THREADS": 256})
        (launch,) = plans[-1]
        return launch

    for kind in ("avg", "max"):
        for dtype, vec in ((np.float16, 8), (np.float32, 4)):
            launch = plan(kind=kind, dtype=dtype)
            assert launch.kernel == f"adaptive_pool2d_{kind}_gvec" and launch.args[2:] == (256, 2048, 49)
            assert launch.fmt == "PPiii" and launch.grid[0] * launch.block[0] >= 256 * 2048 // vec
    assert plan(kind="max", indices=True).kernel == "adaptive_pool2d_maxi_vsplit"
    assert plan(n=8).kernel == "adaptive_pool2d_avg_vsplit"  # 2048 pairs: too few for a thread each
    assert plan(params={"ADAPT_GVEC_U": 0}).kernel == "adaptive_pool2d_avg_vsplit"


def test_cuda_gvec_lanes_per_pair_plan_s_times_the_threads_without_a_gpu():
    """Without a GPU: ADAPT_GVEC_S lanes per (image, channel vector) pair build with that -D and
    launch S times the threads (the grid-stride loop keeps whole warps: blocks of whole warps);
    eligibility counts those threads, so fewer pairs take gvec; float16 keeps programmatic
    dependent launch with S > 1 (off only with one lane per pair)."""
    import numpy as np

    from hal import spec as S
    from hal.backends.cuda import CudaBuffer

    be, _ = _h200_without_gpu()
    plans: list[object] = []
    be._run = lambda plan, buffers: plans.append(plan)
    buf = CudaBuffer(0x10000, 1 << 30, None)

    def plan(n, s, dtype=np.float16, kind="avg", threads=256):
        g = S.TensorGeometry(n, 2056, 7, 7, "NHWC", np.dtype(dtype))
        be.adaptive_pool2d(S.adaptive_pool2d_spec(kind, g, (1, 1), False), buf, buf, None,
                           {"ADAPT_GVEC_S": s, "ADAPT_THREADS": threads})
        (launch,) = plans[-1]
        return launch

    for dtype, vec in ((np.float16, 8), (np.float32, 4)):
        for s in (1, 2, 4):
            for threads in (128, 256, 512):
                launch = plan(135, s, dtype, threads=threads)
                pairs = 135 * 2056 // vec  # 257 (514) vectors an image: no multiple of 32
                assert launch.kernel == "adaptive_pool2d_avg_gvec" and launch.args[2:] == (135, 2056, 49)
                assert dict(launch.defines)["ADAPT_GVEC_S"] == s and launch.block == (threads, 1, 1)
                assert launch.grid[0] == -(-pairs * s // threads), (dtype, s, threads, launch.grid)
                assert launch.pdl is (dtype == np.float32 or s > 1)
    # 67 float16 images: 17219 pairs, under 256 a multiprocessor (33792) alone, over it with 2 lanes
    assert plan(67, 1).kernel == "adaptive_pool2d_avg_vsplit"
    assert plan(67, 2, kind="max").kernel == "adaptive_pool2d_max_gvec"
    assert plan(33, 4).kernel == "adaptive_pool2d_avg_gvec" and plan(32, 4).kernel == "adaptive_pool2d_avg_vsplit"
    # a grid past the cap (132 SMs x 8 blocks of 256 x 8): the kernel's grid-stride loop walks the rest
    launch = plan(2111, 4, np.float32)
    assert launch.grid == (132 * 8 * 8, 1, 1) and launch.grid[0] * 256 < 2111 * 514 * 4


def test_cuda_quantized_conv_plans_tensor_cores_without_a_gpu():
    """Without a GPU: dense 3x3 stride-1 int8/uint8 convs with C_in % 16 == 0 (<= 64) and a
    16-byte aligned input (NCHW: W % 16 == 0) plan ``qconv2d_k3_tc`` (one block per
    multiprocessor, split over the 64-channel output tiles; 19 arguments ending with XZP, YZP and
    the tile counts); other channel counts, strides, groups or an unaligned input keep the
    CUDA-core kernels."""
    import numpy as np

    from hal import spec as S
    from hal.backends.cuda import _QCONV_TC_SMEM, CudaBuffer

    be, _ = _h200_without_gpu()
    plans: list[object] = []
    be._run = lambda plan, buffers: plans.append(plan)
    buf = CudaBuffer(0x10000, 1 << 30, None)
    odd = CudaBuffer(0x10001, 1 << 30, None)

    def plan(layout="NHWC", ci=64, co=64, stride=1, groups=1, x=buf, w=32):
        conv = S.conv2d_spec(S.TensorGeometry(16, ci, 32, w, layout, np.dtype(np.uint8)), (co, ci // groups, 3, 3),
                             False, None, stride, 1, 1, groups)
        spec = S.QConv2dSpec(conv, np.dtype(np.int8), np.dtype(np.int8), 3, -5, True)
        be.qconv2d(spec, x, buf, None, buf, buf, buf, {})
        (launch,) = plans[-1]
        return launch

    for layout in ("NHWC", "NCHW"):
        launch = plan(layout)
        assert launch.kernel == "qconv2d_k3_tc" and launch.shared == _QCONV_TC_SMEM[layout] <= 232448
        assert launch.grid == (64, 1, 1) and launch.block == (256, 1, 1)  # 16 images x 4 row tiles x 1 column tile
        assert launch.fmt == "PPPPPP" + "i" * 13
        assert launch.args[6:] == (16, 64, 32, 32, 64, 32, 32, 1, 1, 3, -5, 4, 1)
        assert plan(layout, co=130).grid == (44, 3, 1)
        for fallback in (dict(ci=24), dict(ci=80), dict(stride=2), dict(groups=2), dict(x=odd)):
            assert plan(layout, **fallback).kernel in ("qconv2d", "qconv2d_co4"), fallback
    assert plan("NCHW", w=40).kernel == "qconv2d_co4"  # NCHW rows are staged in 16-byte chunks: W % 16 == 0


def test_cuda_streamed_weight_tensor_core_conv_plans_without_a_gpu():
    """Without a GPU: CONV_TC=3 plans two launches for float16 3x3 and 1x1 stride-1 convs (NHWC: C_in % 8
    == 0, NCHW: W % 8 == 0; any C_in): ``conv2d_tc_wprep`` (the weights into the stages' layout, a
    workspace of ``tc_wide_weight_halves`` elements) then ``conv2d_k{3,1}_tc_wide`` (one block per
    multiprocessor split over the 64-channel output tiles, 32-channel chunks); others go as CONV_TC=1.
    CONV_TC=2 takes them only where the pipelined kernel cannot (C_in > 64); TC_WIDE_STAGES sizes the
    shared memory, and a count that does not fit serves the next kernel in line."""
    import numpy as np

    from hal import spec as S
    from hal.backends.cuda import _TC_WIDE_SMEM, CudaBuffer, tc_wide_weight_halves

    be, _ = _h200_without_gpu()
    plans: list[object] = []
    be._run = lambda plan, buffers: plans.append((plan, buffers))
    buf = CudaBuffer(0x10000, 1 << 30, None)

    def plan(layout="NHWC", ci=256, co=256, k=3, w=28, **params):
        sp = S.conv2d_spec(S.TensorGeometry(32, ci, 28, w, layout, np.dtype(np.float16)), (co, ci, k, k), False,
                           None, 1, k // 2, 1, 1)
        be.conv2d(sp, buf, buf, None, buf, {"CONV_TC": 3, **params})
        return plans[-1]

    (prep, wide), buffers = plan()
    assert tc_wide_weight_halves(256, 256) == 4 * 8 * 9 * 64 * 32
    assert prep.kernel == "conv2d_tc_wprep" and prep.args == ("w", "wp", 256, 256, 9, 8, 4 * 8 * 9 * 64 * 32)
    assert wide.kernel == "conv2d_k3_tc_wide" and wide.shared == _TC_WIDE_SMEM["NHWC", 3, 2, 8] == 117248
    assert wide.grid == (33, 4, 1) and wide.args[4:] == (32, 256, 28, 28, 256, 28, 28, 1, 1, 4, 1, 8)
    assert buffers["wp"].nbytes >= 2 * tc_wide_weight_halves(256, 256)
    (only,), _ = plan(ci=64, co=64, layout="NCHW")
    assert only.kernel == "conv2d_k3_tc"  # as CONV_TC=2: NCHW rows are copied in 16-byte chunks, W % 8 == 0 (28)
    (prep, wide), _ = plan(ci=256, co=256, layout="NCHW", w=32)
    assert wide.kernel == "conv2d_k3_tc_wide" and wide.shared == _TC_WIDE_SMEM["NCHW", 3, 2, 8] <= 232448
    (only,), _ = plan(ci=12, co=64)
    assert only.kernel == "conv2d_k3_tc"
    (prep, wide), buffers = plan(ci=1024, co=96, k=1)  # 1x1: one tap, no halo
    assert prep.args == ("w", "wp", 1024, 96, 1, 32, 2 * 32 * 1 * 64 * 32) and wide.kernel == "conv2d_k1_tc_wide"
    assert wide.shared == _TC_WIDE_SMEM["NHWC", 1, 2, 8] == 65536
    assert buffers["wp"].nbytes >= 2 * tc_wide_weight_halves(1024, 96, 1)
    # deeper pipelines: three or four stage buffers where they fit 227 KiB
    (_, wide), _ = plan(TC_WIDE_STAGES=3)
    assert wide.kernel == "conv2d_k3_tc_wide" and wide.shared == 3 * 58624 == _TC_WIDE_SMEM["NHWC", 3, 3, 8]
    assert ("TC_WIDE_STAGES", 3) in wide.defines
    (_, wide), _ = plan(layout="NCHW", w=32, TC_WIDE_STAGES=3)
    assert wide.shared == _TC_WIDE_SMEM["NCHW", 3, 3, 8] <= 232448
    (_, wide), _ = plan(k=1, TC_WIDE_STAGES=4)
    assert wide.kernel == "conv2d_k1_tc_wide" and wide.shared == 4 * 32768
    # the 1x1 kernel built for two blocks per SM: twice the grid where two fit the SM's shared memory
    (_, wide), _ = plan(k=1, TC_WIDE_STAGES=3, TC_WIDE_K1_BLOCKS=2)
    assert wide.grid == (2 * 132 // 4, 4, 1) and ("TC_WIDE_K1_BLOCKS", 2) in wide.defines
    (_, wide), _ = plan(k=1, TC_WIDE_STAGES=4, TC_WIDE_K1_BLOCKS=2)  # 2 x 132 KiB do not fit 228 KiB
    assert wide.grid == (33, 4, 1)
    (_, wide), _ = plan(TC_WIDE_K1_BLOCKS=2)  # 3x3: one block per SM whatever the parameter
    assert wide.grid == (33, 4, 1)
    # four stages of 8 rows (234,496 bytes) do not fit: tiles of 4 rows (TC_WIDE_ROWS 4, 128 threads) do
    (_, wide), _ = plan(TC_WIDE_STAGES=4)
    assert _TC_WIDE_SMEM["NHWC", 3, 4, 8] > 232448 and wide.kernel == "conv2d_k3_tc_wide"
    assert wide.shared == _TC_WIDE_SMEM["NHWC", 3, 4, 4] == 4 * 49920 and wide.block == (128, 1, 1)
    assert ("TC_WIDE_ROWS", 4) in wide.defines and wide.args[-3:] == (7, 1, 8)  # 28 rows: 7 tiles of 4
    # TC_WIDE_ROWS 4 asked for: 4-row tiles where 8 would fit too
    (_, wide), _ = plan(TC_WIDE_ROWS=4)
    assert wide.shared == 99840 and wide.block == (128, 1, 1) and ("TC_WIDE_ROWS", 4) in wide.defines
    (_, wide), _ = plan()
    assert wide.block == (256, 1, 1) and ("TC_WIDE_ROWS", 8) in wide.defines
    # CONV_TC=2: the pipelined kernel up to 64 input channels, the streamed weights past them
    (only,), _ = plan(ci=64, co=64, CONV_TC=2)
    assert only.kernel == "conv2d_k3_tc_pipe"
    (_, wide), _ = plan(ci=128, co=64, CONV_TC=2)
    assert wide.kernel == "conv2d_k3_tc_wide"
    (_, wide), _ = plan(ci=128, co=64, k=1, CONV_TC=2)
    assert wide.kernel == "conv2d_k1_tc_wide"
    (only,), _ = plan(ci=64, co=64, k=1, CONV_TC=2)
    assert only.kernel == "conv2d_k3_tc"  # 1x1 with C_in <= 64: CONV_TC 1's kernel, as before


def test_cuda_pipelined_depthwise_plans_without_a_gpu():
    """Without a GPU: DW_PIPE plans ``conv2d_dw_pipe{rows}_k3s1`` for NHWC depthwise 3x3 stride-1
    convs with C % (16 / element size) == 0 and 16-byte aligned buffers: 256 threads, two
    (rows + 2) x (width + 2) patches of 128 bytes (width 16 in float16, 32 in float32), a
    persistent grid of the resident blocks (3 a multiprocessor by registers, fewer where the
    shared memory says so) over the 128-byte channel slices (grid.y); everything else, and
    DW_PIPE 0 (the default), keeps today's kernels."""
    import numpy as np

    from hal import spec as S
    from hal.backends.cuda import _DW_PIPE_MINB, _DW_PIPE_SLICE, _DW_PIPE_THREADS, _SCHEMAS

    be, plans, buf, odd, source = _conv_plans_on_h200()
    # the launcher's copy of the kernel's geometry and register bound (namespace dwp, DW_PIPE_KERNEL)
    assert f"constexpr int THREADS = {_DW_PIPE_THREADS};" in source and f"SLICE = {_DW_PIPE_SLICE};" in source
    assert "__launch_bounds__(dwp::THREADS, MINB)" in source
    for rows in (4, 8, 16):
        for cols, minb in _DW_PIPE_MINB.items():
            name = f"conv2d_dw_pipe{rows}{'' if cols == 1 else f'x{cols}'}_k3s1"
            assert f"DW_PIPE_KERNEL({name}, {rows}, {cols}, {minb})" in source

    def plan(shape=(256, 64, 32, 32), dtype=np.float16, pipe=8, layout="NHWC", stride=1, pad=1, x=buf, **extra):
        c = shape[1]
        sp = S.conv2d_spec(S.TensorGeometry(*shape, layout, np.dtype(dtype)), (c, 1, 3, 3), True, (c,), stride,
                           pad, 1, c)
        be.conv2d(sp, x, buf, buf, buf, {"DW_PIPE": pipe, **extra})
        (launch,) = plans[-1]
        return launch

    launch = plan()
    assert launch.kernel == "conv2d_dw_pipe8_k3s1" and f"({launch.kernel}," in source
    assert launch.block == (256, 1, 1) and launch.shared == 2 * 10 * 18 * 128
    assert launch.grid == (396, 1, 1)  # 2048 tiles of 8 x 16; 3 blocks a multiprocessor (registers)
    assert launch.fmt == "PPPP" + "i" * 10
    assert launch.args == ("x", "w", "b", "y", 256, 64, 32, 32, 32, 32, 1, 1, 4, 2)
    launch = plan(dtype=np.float32)  # 2 slices of 32 floats, tiles of 8 x 32, 2 blocks (shared memory)
    assert (launch.kernel, launch.shared, launch.grid) == ("conv2d_dw_pipe8_k3s1", 2 * 10 * 34 * 128, (132, 2, 1))
    launch = plan(dtype=np.float32, pipe=16)  # one block a multiprocessor; 512 tiles
    assert (launch.kernel, launch.shared, launch.grid) == ("conv2d_dw_pipe16_k3s1", 2 * 18 * 34 * 128, (66, 2, 1))
    launch = plan((3, 40, 13, 17), pipe=4, pad=2)  # a partial slice; 15 x 19 outputs in tiles of 4 x 16: 3 x 4 x 2
    assert (launch.kernel, launch.shared, launch.grid) == ("conv2d_dw_pipe4_k3s1", 2 * 6 * 18 * 128, (24, 1, 1))
    assert launch.args[4:] == (3, 40, 13, 17, 15, 19, 2, 2, 4, 2)
    launch = plan((2, 72, 9, 33), dtype=np.float32, pipe=4, pad=0)
    assert launch.grid == (4, 3, 1) and launch.args[4:] == (2, 72, 9, 33, 7, 31, 0, 0, 2, 1)
    # what does not qualify keeps today's kernels
    for fallback in (dict(pipe=0), dict(shape=(2, 36, 9, 9)), dict(layout="NCHW"), dict(stride=2), dict(x=odd),
                     dict(dtype=np.float32, shape=(2, 6, 9, 9))):
        assert not plan(**fallback).kernel.startswith("conv2d_dw_pipe"), fallback
    assert plan(shape=(2, 36, 9, 9), dtype=np.float32).kernel == "conv2d_dw_pipe8_k3s1"  # float32: C % 4
    assert plan(DW_COLS=4, DW_CROWS=8).kernel == "conv2d_dw_pipe8_k3s1"  # tried before the register walks
    assert plan(pipe=0, DW_COLS=4, DW_CROWS=8).kernel == "conv2d_dw_cols4r8_k3s1"
    # two output columns a thread: tiles 32 wide in float16 (64 in float32), 2 blocks a multiprocessor
    launch = plan(DW_PIPE_COLS=2)
    assert (launch.kernel, launch.shared) == ("conv2d_dw_pipe8x2_k3s1", 2 * 10 * 34 * 128)
    assert launch.grid == (264, 1, 1) and launch.args[-2:] == (4, 1)  # 1024 tiles of 8 x 32
    launch = plan((3, 40, 13, 17), dtype=np.float32, pipe=4, pad=2, DW_PIPE_COLS=2)
    assert (launch.kernel, launch.shared) == ("conv2d_dw_pipe4x2_k3s1", 2 * 6 * 66 * 128)
    assert launch.args[-2:] == (4, 1) and launch.grid == (12, 2, 1)
    be.force_generic = True
    try:
        assert plan().kernel == "conv2d"
    finally:
        be.force_generic = False
    assert _SCHEMAS["conv2d"].defaults()["DW_PIPE"] == 0


def test_cuda_tensor_core_depthwise_plans_without_a_gpu():
    """Without a GPU: DW_TC plans ``conv2d_dw_tc_k3s1`` (1) or ``conv2d_dw_tc_persist_k3s1`` (2)
    for float16 NCHW depthwise 3x3 stride-1 convs with IW % 8 == 0, left padding <= 1 and
    16-byte aligned buffers: 4 warps a block, a warp per 16 x 32 output tile of one plane (or
    the resident blocks' warps striding over them), each warp 18 x 56 halves of shared memory,
    the struct's fields and divisors as the kernel reads them; everything else, DW_TC 0 (the
    default) and sm_70, keep the other kernels. It is tried before DW_PIPE."""
    import struct

    import numpy as np

    from hal import spec as S
    from hal.backends.cuda import _DW_TC_PERSIST_MINB, _DW_TC_WARP_SMEM, _DW_TC_WARPS, _SCHEMAS, fastdiv

    be, plans, buf, odd, source = _conv_plans_on_h200()
    # the launcher's copy of the kernel's geometry
    assert f"constexpr int DWTC_WARPS = {_DW_TC_WARPS}, DWTC_ROWS = 18," in source
    assert _DW_TC_WARP_SMEM == 18 * 56 * 2 and "constexpr int DWTC_RS = 56;" in source

    def plan(shape=(256, 64, 32, 32), dtype=np.float16, layout="NCHW", pad=1, x=buf, tc=1, **extra):
        c = shape[1]
        sp = S.conv2d_spec(S.TensorGeometry(*shape, layout, np.dtype(dtype)), (c, 1, 3, 3), True, (c,), 1,
                           pad, 1, c)
        be.conv2d(sp, x, buf, buf, buf, {"DW_TC": tc, **extra})
        (launch,) = plans[-1]
        return launch

    launch = plan()
    assert launch.kernel == "conv2d_dw_tc_k3s1" and "conv2d_dw_tc_k3s1(const __half*" in source
    tiles = 256 * 64 * 2 * 1  # 32 x 32 planes: 2 row tiles of 16, one column tile of 32
    assert launch.block == (128, 1, 1) and launch.shared == 4 * 18 * 56 * 2
    assert launch.grid == (tiles // 4, 1, 1)
    blob = launch.args[-1]
    assert launch.args[:4] == ("x", "w", "b", "y") and launch.fmt == f"PPPP{len(blob)}s"
    assert struct.unpack("<7iI9I", blob) == (64, 32, 32, 32, 32, 1, 1, tiles, *fastdiv(1), *fastdiv(2), *fastdiv(64))
    launch = plan((3, 5, 21, 40), pad=(0, 1, 0, 1))  # 20 x 39 outputs: 2 x 2 tiles a plane, 15 planes
    fields = struct.unpack("<7iI9I", launch.args[-1])
    assert fields[:8] == (5, 21, 40, 20, 39, 0, 0, 60) and launch.grid == (15, 1, 1)
    # what does not qualify keeps the other kernels
    for fallback in (dict(tc=0), dict(dtype=np.float32), dict(layout="NHWC"), dict(shape=(2, 6, 9, 12)),
                     dict(pad=2), dict(x=odd)):
        assert plan(**fallback).kernel != "conv2d_dw_tc_k3s1", fallback
    assert plan(DW_PIPE=8).kernel == "conv2d_dw_tc_k3s1"  # tried before the others
    # persistent warps: the grid is the resident blocks (6 a multiprocessor, the kernel's bound)
    assert "__launch_bounds__(DWTC_WARPS * 32, DWTC_PERSIST_MINB)" in source
    assert f"constexpr int DWTC_PERSIST_MINB = {_DW_TC_PERSIST_MINB};" in source
    launch = plan(tc=2)
    assert (launch.kernel, launch.grid, launch.shared) == ("conv2d_dw_tc_persist_k3s1", (132 * 6, 1, 1), 8064)
    assert launch.args[-1] == plan().args[-1]
    assert plan((3, 5, 21, 40), tc=2).grid == (15, 1, 1)  # fewer tiles than warps: a block per 4 tiles
    cc = be._cc
    be._cc = (7, 0)  # no mma.sync m16n8k8 before sm_75
    try:
        assert plan((2, 8, 9, 16)).kernel != "conv2d_dw_tc_k3s1"  # a shape not planned before (plans are cached)
    finally:
        be._cc = cc
    assert _SCHEMAS["conv2d"].defaults()["DW_TC"] == 0


def test_cuda_depthwise_row_strips_with_shuffled_halos_plan_without_a_gpu():
    """Without a GPU: DW_SHFL with DW_ROWS plans ``conv2d_dw_rows{2,4}s_k3s1`` for NCHW depthwise 3x3
    stride-1 convs padded 1 on every side, with the plain strips' grid and arguments (the same
    threads, each loading its own rows only); other paddings keep the plain strips, and DW_SHFL
    is off by default."""
    import numpy as np

    from hal import spec as S
    from hal.backends.cuda import _SCHEMAS, _cdiv

    be, plans, buf, _, source = _conv_plans_on_h200()

    def plan(shape=(256, 64, 32, 32), dtype=np.float16, pad=1, **params):
        c = shape[1]
        sp = S.conv2d_spec(S.TensorGeometry(*shape, "NCHW", np.dtype(dtype)), (c, 1, 3, 3), True, (c,), 1, pad, 1,
                           c)
        be.conv2d(sp, buf, buf, buf, buf, {"DW_ROWS": 4, "CONV_THREADS": 128, **params})
        (launch,) = plans[-1]
        return launch

    shfl, plain = plan(DW_SHFL=1), plan()
    assert shfl.kernel == "conv2d_dw_rows4s_k3s1" and plain.kernel == "conv2d_dw_rows4_k3s1"
    assert "DW_ROWS_SHFL_KERNEL(conv2d_dw_rows4s_k3s1, 4)" in source
    assert (shfl.grid, shfl.block, shfl.args) == (plain.grid, plain.block, plain.args)
    assert plan((2, 8, 16, 24), np.float32, DW_SHFL=1, DW_ROWS=2).kernel == "conv2d_dw_rows2s_k3s1"
    for pad in (0, (1, 1, 0, 1), (1, 0, 1, 1)):
        for shfl in (1, 2):
            assert plan((2, 8, 16, 24), pad=pad, DW_SHFL=shfl).kernel == "conv2d_dw_rows4_k3s1", (pad, shfl)
    assert _SCHEMAS["conv2d"].defaults()["DW_SHFL"] == 0
    # DW_SHFL 2, the persistent grid: 132 SMs x 5 blocks of 128 (DW_SHFL_OCC 640) would give each
    # thread 6.2 steps of 256x64x32x32's 524,288 items; 7 steps each need 586 blocks
    persist = plan(DW_SHFL=2)
    assert persist.kernel == "conv2d_dw_rows4p_k3s1" and "DW_ROWS_PERSIST_KERNEL(conv2d_dw_rows4p_k3s1, 4)" in source
    assert persist.grid == (586, 1, 1) and persist.args == plain.args and ("DW_SHFL_OCC", 640) in persist.defines
    assert plan(DW_SHFL=2, DW_SHFL_OCC=1024, CONV_THREADS=256).grid == (_cdiv(524288, 4 * 256), 1, 1)
    assert plan((1, 2, 8, 16), DW_SHFL=2).grid == (1, 1, 1)  # 16 items: one block, one step


def test_cuda_time_launches_queues_the_calls_behind_a_spin():
    """Without a GPU: ``queued=True`` enqueues ``hal_spin`` before the first event pair, for at
    least the host time the enqueues take (from the fastest warm-up call), and still one
    event pair around each call; without it nothing is enqueued ahead."""
    import contextlib
    import time

    from hal.backends.cuda import CudaBackend

    log: list[object] = []

    class Event:
        def record(self, stream: object) -> None:
            log.append("event")

        def synchronize(self) -> None:
            pass

        def time_since(self, other: object) -> float:
            return 0.02

    backend = CudaBackend.__new__(CudaBackend)
    backend._drv, backend._stream = type("Drv", (), {"Event": Event})(), object()
    backend._plans = {}
    backend._active = contextlib.nullcontext  # type: ignore[method-assign]
    backend.synchronize = lambda: log.append("sync")  # type: ignore[method-assign]
    backend._run = lambda plan, buffers: log.append(plan)  # type: ignore[method-assign]

    def launch() -> None:
        time.sleep(0.002)  # 2 ms of host time a call
        log.append("launch")

    times = backend.time_launches(launch, repeats=5, warmup=2, queued=True)
    assert times == [2e-5] * 5
    spin_at = next(i for i, e in enumerate(log) if isinstance(e, tuple))
    (spin,) = log[spin_at]
    assert spin.kernel == "hal_spin" and spin.file == "eltwise.cu"
    assert spin.args[0] >= 5 * 2_000_000, spin.args  # ns: covers the five calls' host time
    assert log[:spin_at] == ["launch", "launch", "sync"]
    assert log[spin_at + 1:] == ["event", "launch", "event"] * 5
    assert spin.args[0] % 1_000_000 == 0 and backend._spin_plan(spin.args[0]) is log[spin_at]  # one plan a duration
    log.clear()
    backend.time_launches(launch, repeats=3, warmup=1)
    assert log == ["launch"] + ["event", "launch", "event"] * 3


def test_cuda_pdl_launch_passes_the_plan_and_packed_arguments():
    """Without a GPU: a launch with programmatic dependent launch hands cuLaunchKernelEx the
    plan's grid, block, shared memory and stream, one attribute (programmatic stream
    serialization, id 6, allowed), and the arguments packed as PyCUDA packs them (the
    plan's struct format), in a buffer passed through ``extra``; a failed launch raises."""
    import ctypes
    import struct
    import types

    import pytest

    from hal.backends.cuda import Launch, PdlLaunch, pdl_structs
    from hal.errors import HalError

    seen: list[dict[str, object]] = []
    status = [0]

    def launch_ex(cfg_ref: object, func: ctypes.c_void_p, params: object, extra: object) -> int:
        cfg = cfg_ref._obj  # type: ignore[attr-defined]
        ptrs = list(extra)  # type: ignore[call-overload]
        size = ctypes.c_size_t.from_address(ptrs[3]).value
        seen.append({"grid": tuple(cfg.grid), "block": tuple(cfg.block), "shared": cfg.shared,
                     "stream": cfg.stream, "attr": (cfg.attrs[0].id, cfg.attrs[0].value[0]), "n": cfg.num_attrs,
                     "func": func.value, "params": params, "markers": (ptrs[0], ptrs[2], ptrs[4]),
                     "packed": ctypes.string_at(ptrs[1], size)})
        return status[0]

    api = types.SimpleNamespace(lib=types.SimpleNamespace(cuLaunchKernelEx=launch_ex), **vars(pdl_structs()))
    win = struct.pack("<3i", 7, 8, 9)
    plan = Launch("pool2d.cu", (("DTYPE_HALF", 1),), "pool2d_max_rows_k2s2", f"PPi{len(win)}sf",
                  (33, 2, 1), (256, 1, 1), 4096, ("x", "y", 5, win, 0.25))
    run = PdlLaunch(api, 0xABC0, plan, 0x5150)
    args = (0x7F0000001000, 0x7F0000002000, 5, win, 0.25)
    run(args)
    run((0x10, 0x20, -3, win, 1.5))
    (first, second) = seen
    assert first["grid"] == (33, 2, 1) and first["block"] == (256, 1, 1) and first["shared"] == 4096
    assert first["stream"] == 0x5150 and first["func"] == 0xABC0 and first["params"] is None
    assert first["attr"] == (6, 1) and first["n"] == 1 and first["markers"] == (1, 2, None)
    assert first["packed"] == struct.pack(plan.fmt, *args)
    assert second["packed"] == struct.pack(plan.fmt, 0x10, 0x20, -3, win, 1.5)
    status[0] = 201  # CUDA_ERROR_INVALID_CONTEXT
    with pytest.raises(HalError, match=r"pool2d_max_rows_k2s2.*201"):
        run(args)


def test_cuda_pdl_is_off_for_the_float16_nhwc_global_pooling_wave():
    """Without a GPU: the float16 NHWC global pooling kernel (``gvec``, a part of one wave)
    is planned without programmatic dependent launch at one lane a pair, with it at two
    (ADAPT_GVEC_S 2, the sm_90 entry), float32's and other kernels with it."""
    import numpy as np

    from hal import spec as S
    from hal.backends.cuda import CudaBuffer

    be, _ = _h200_without_gpu()
    plans: list[object] = []
    be._run = lambda plan, buffers: plans.append(plan)
    buf = CudaBuffer(0x10000, 1 << 30, None)
    for dtype, lanes, pdl in ((np.float16, 1, False), (np.float16, 2, True), (np.float32, 1, True)):
        g = S.plane_geometry(S.TensorGeometry(256, 2048, 7, 7, "NHWC", np.dtype(dtype)))
        be.adaptive_pool2d(S.adaptive_pool2d_spec("avg", g, 1, False), buf, buf, None,
                           {"ADAPT_GVEC_U": 4, "ADAPT_GVEC_S": lanes})
        (launch,) = plans[-1]
        assert launch.kernel == "adaptive_pool2d_avg_gvec" and launch.pdl is pdl, (dtype, lanes, launch)
        be.pool2d(S.pool2d_spec("max", g, 3, 2, 1, 1, False, True, None, False), buf, buf, None, {})
        assert all(launch.pdl for launch in plans[-1])


def test_cuda_run_dispatches_pdl_plain_and_capture_launches(monkeypatch):
    """Without a GPU: ``_run`` sends a plan's launches through ``cuLaunchKernelEx`` while
    ``pdl`` is on, except a launch planned with ``pdl=False`` and every launch made while a
    graph is being captured, which go through PyCUDA's launch; switching ``pdl`` off between
    calls is honoured at the next call."""
    import types

    import hal.backends.cuda as cuda_mod
    from hal.backends.cuda import CudaBackend, CudaBuffer, Launch, pdl_structs

    log: list[tuple[str, str]] = []

    def launch_ex(cfg_ref: object, func: object, params: object, extra: object) -> int:
        log.append(("pdl", names[func.value]))  # type: ignore[attr-defined]
        return 0

    api = types.SimpleNamespace(lib=types.SimpleNamespace(cuLaunchKernelEx=launch_ex), **vars(pdl_structs()))
    monkeypatch.setattr(cuda_mod, "_pdl_api", lambda: api)
    monkeypatch.setattr(cuda_mod, "_FAST_LAUNCH", True)
    monkeypatch.setattr(cuda_mod, "_pack_fn", lambda fmt, *args: b"")

    class Fn:
        arg_format = "P"

        def __init__(self, name: str) -> None:
            self.name = name

        def _launch_kernel(self, *args: object) -> None:
            log.append(("plain", self.name))

    plan = (Launch("pool2d.cu", (), "a", "P", (1, 1, 1), (32, 1, 1), 0, ("x",)),
            Launch("pool2d.cu", (), "b", "P", (1, 1, 1), (32, 1, 1), 0, ("x",), pdl=False))
    names = {0x10: "a", 0x20: "b"}
    be = CudaBackend.__new__(CudaBackend)
    be._plan_fns, be.pdl, be._capturing = {}, True, False
    be._stream = types.SimpleNamespace(handle=0x77)
    be._ctx = types.SimpleNamespace(push=lambda: None)
    be._drv = types.SimpleNamespace(Context=types.SimpleNamespace(pop=lambda: None))
    be._function = lambda launch: Fn(launch.kernel)  # type: ignore[method-assign]
    be._pdl_function = lambda launch: {"a": 0x10, "b": 0x20}[launch.kernel]  # type: ignore[method-assign]
    buffers = {"x": CudaBuffer(0x1000, 64, None)}
    mixed, plain = [("pdl", "a"), ("plain", "b")], [("plain", "a"), ("plain", "b")]
    # (pdl, capturing) in turn on one backend: its plan cache must follow each switch
    for pdl, capturing, want in ((True, False, mixed), (True, True, plain), (False, False, plain),
                                 (True, False, mixed)):
        be.pdl, be._capturing = pdl, capturing
        log.clear()
        be._run(plan, buffers)
        assert log == want, (pdl, capturing, log)


def test_cuda_strided_float16_nhwc_conv_plans_the_stride_2_tensor_core_kernel():
    """Without a GPU: a float16 NHWC 3x3 stride-2 dense conv (C_in % 8 == 0, aligned, sm_80+,
    tensor cores allowed) takes the weight layout pass and conv2d_k3s2_tc_wide with the
    shared memory its stride-2 patch needs (tcw::Geo<3, 2>: 17 x 65 pixels); NCHW takes the
    same launches, built NHWC, between two transposes through NHWC workspaces (misaligned
    buffers too); float32, CONV_TC 0, C_in % 8 != 0, a misaligned NHWC buffer, stride 1 or a
    device with less shared memory per block take other kernels."""
    import numpy as np

    from hal import spec as S
    from hal.backends.cuda import _TC_WIDE_S2_SMEM

    be, plans, buf, odd, source = _conv_plans_on_h200()
    assert "TC_WIDE_KERNEL(conv2d_k3s2_tc_wide, 3, 2, 1)" in source
    assert "TC_WIDE_KERNEL(conv2d_k1s2_tc_wide, 1, 2, TC_WIDE_K1_BLOCKS)" in source
    assert _TC_WIDE_S2_SMEM[3, 2, 8] == 2 * (17 * 65 * 64 + 9 * 64 * 64) == 215_168
    assert _TC_WIDE_S2_SMEM[1, 2, 8] == 2 * (15 * 63 * 64 + 64 * 64) == 129_152
    assert _TC_WIDE_S2_SMEM[3, 2, 4] == 2 * (9 * 65 * 64 + 9 * 64 * 64) == 148_608  # TC_WIDE_ROWS 4

    def kernels(shape=(64, 64, 56, 56), cout=128, dtype=np.float16, layout="NHWC", stride=2, x=buf, k=3, **params):
        sp = S.conv2d_spec(S.TensorGeometry(*shape, layout, np.dtype(dtype)), (cout, shape[1], k, k), True, (cout,),
                           stride, k // 2, 1, 1)
        be.conv2d(sp, x, buf, buf, buf, params)
        return plans[-1]

    wprep, conv = kernels()
    assert (wprep.kernel, conv.kernel) == ("conv2d_tc_wprep", "conv2d_k3s2_tc_wide")
    assert conv.shared == 215_168 and conv.block == (256, 1, 1)
    # 64 images x 4 x 1 tiles of 8 x 32 (28 x 28 outputs), 2 output-channel tiles, one block an SM
    assert conv.grid == (66, 2, 1)
    assert conv.args == ("x", "wp", "b", "y", 64, 64, 56, 56, 128, 28, 28, 1, 1, 4, 1, 2)
    assert wprep.args[2:5] == (64, 128, 9)
    to_nhwc, wprep2, conv2, to_nchw = kernels(layout="NCHW", x=odd)
    assert (wprep2.kernel, conv2.kernel) == ("conv2d_tc_wprep", "conv2d_k3s2_tc_wide")
    assert dict(conv2.defines)["LAYOUT_NHWC"] == 1 and conv2.args[:4] == ("xt", "wp", "b", "yt")
    assert conv2.args[4:] == conv.args[4:] and conv2.grid == conv.grid
    assert (to_nhwc.kernel, to_nhwc.file, to_nhwc.args) == ("layout_transpose", "eltwise.cu", ("x", "xt", 64, 3136))
    assert to_nhwc.grid == (49, 1, 64) and to_nhwc.block == (64, 4, 1)
    assert (to_nchw.kernel, to_nchw.args, to_nchw.grid) == ("layout_transpose", ("yt", "y", 784, 128), (2, 13, 64))
    for other in (dict(dtype=np.float32), dict(CONV_TC=0), dict(shape=(64, 60, 56, 56)), dict(x=odd),
                  dict(stride=1), dict(layout="NCHW", dtype=np.float32)):
        assert all(launch.kernel != "conv2d_k3s2_tc_wide" for launch in kernels(**other)), other
    # 1x1 stride 2 (a projection shortcut, 256 -> 512 on 56 x 56): the 1x1 build; its 129 KB keep it
    # to one block an SM even where TC_WIDE_K1_BLOCKS asks for two
    wprep1, conv1 = kernels((32, 256, 56, 56), 512, k=1)
    assert (conv1.kernel, conv1.shared, conv1.grid) == ("conv2d_k1s2_tc_wide", 129_152, (17, 8, 1))
    assert wprep1.args[2:5] == (256, 512, 1) and conv1.args[4:] == (32, 256, 56, 56, 512, 28, 28, 0, 0, 4, 1, 8)
    assert kernels((32, 256, 56, 56), 512, k=1, TC_WIDE_K1_BLOCKS=2)[1].grid == (17, 8, 1)
    assert [launch.kernel for launch in kernels((32, 256, 56, 56), 512, k=1, layout="NCHW")] == [
        "layout_transpose", "conv2d_tc_wprep", "conv2d_k1s2_tc_wide", "layout_transpose"]
    # TC_WIDE_ROWS 4: 4 x 32 tiles of 4 warps, twice the row tiles
    _, conv4 = kernels(TC_WIDE_ROWS=4)
    assert (conv4.kernel, conv4.shared, conv4.block) == ("conv2d_k3s2_tc_wide", 148_608, (128, 1, 1))
    assert conv4.args[4:] == (64, 64, 56, 56, 128, 28, 28, 1, 1, 7, 1, 2) and ("TC_WIDE_ROWS", 4) in conv4.defines
    be.info = be.info.__class__(**{**be.info.__dict__, "local_mem_bytes": 163 * 1024})  # sm_80's opt-in limit
    # 8 rows' 215,168 bytes do not fit there: 4 rows' 148,608 do (NCHW through the transposes as well)
    _, conv80 = kernels()
    assert (conv80.kernel, conv80.shared, conv80.block) == ("conv2d_k3s2_tc_wide", 148_608, (128, 1, 1))
    assert ("TC_WIDE_ROWS", 4) in conv80.defines
    assert [launch.kernel for launch in kernels(layout="NCHW", x=odd)] == [
        "layout_transpose", "conv2d_tc_wprep", "conv2d_k3s2_tc_wide", "layout_transpose"]
    assert kernels((32, 256, 56, 56), 512, k=1)[1].kernel == "conv2d_k1s2_tc_wide"  # 129 KB fits there
    # sm_86/89/120 (99 KiB): 4 rows in one stage (74,304 bytes), TC_WIDE_STAGES 1 built
    be.info = be.info.__class__(**{**be.info.__dict__, "local_mem_bytes": 99 * 1024})
    _, conv86 = kernels()
    assert (conv86.kernel, conv86.shared, conv86.block) == ("conv2d_k3s2_tc_wide", 74_304, (128, 1, 1))
    assert ("TC_WIDE_ROWS", 4) in conv86.defines and ("TC_WIDE_STAGES", 1) in conv86.defines
    be.info = be.info.__class__(**{**be.info.__dict__, "local_mem_bytes": 64 * 1024})  # nothing fits 64 KiB
    assert all(launch.kernel != "conv2d_k3s2_tc_wide" for launch in kernels())


def test_cuda_float16_1x1_conv_plans_the_gemm_kernel_with_conv_k1_gemm():
    """Without a GPU: CONV_K1_GEMM 1 sends a float16 dense 1x1 conv (any stride and padding, C_in % 8 == 0,
    16-byte aligned x, y and weights, sm_80+) to conv2d_k1_gemm alone: one block per 128-pixel x K1G_BN
    output tile (K1G_STAGES, K1G_BN build it and size its shared memory; 64 channels wherever C_out <= 64),
    no weight pass or workspace;
    NCHW runs it between two transposes (any x and y alignment). CONV_K1_GEMM 0 (the default), C_in % 8
    != 0, float32, a misaligned NHWC buffer or weight, other windows, groups and sm_75 take other kernels."""
    import numpy as np

    from hal import spec as S
    from hal.backends.cuda import _SCHEMAS, CudaBuffer, _k1g_smem

    be, _, buf, odd, source = _conv_plans_on_h200()
    runs: list[tuple[object, dict]] = []
    be._run = lambda plan, buffers: runs.append((plan, buffers))
    assert "K1G_KERNEL(conv2d_k1_gemm, 0)" in source and "namespace k1g {" in source
    assert _SCHEMAS["conv2d"].defaults()["CONV_K1_GEMM"] == 0
    assert _k1g_smem(3, 128) == 49_152 and _k1g_smem(4, 128) == 65_536 and _k1g_smem(3, 64) == 36_864
    assert _k1g_smem(2, 64) == 24_576  # the 128 x 64 output tile (16 KB) fits in the stages

    def plan(shape=(32, 256, 56, 56), cout=64, k=1, stride=1, padding=0, layout="NHWC", dtype=np.float16, x=buf,
             w=buf, groups=1, backend=be, **params):
        sp = S.conv2d_spec(S.TensorGeometry(*shape, layout, np.dtype(dtype)), (cout, shape[1] // groups, k, k), True,
                           (cout,), stride, padding, 1, groups)
        backend.conv2d(sp, x, w, buf, buf, {"CONV_K1_GEMM": 1, **params})
        return runs[-1] if backend is be else None

    (gemm,), buffers = plan()  # 1x1 256 -> 64: C_out <= 64 narrows the tile to K1G_BN 64
    assert gemm.kernel == "conv2d_k1_gemm" and gemm.file == "conv2d.cu" and gemm.block == (256, 1, 1)
    assert gemm.shared == 36_864 and gemm.grid == (32 * 56 * 56 // 128, 1, 1)  # 784 M tiles x 1 N tile
    assert gemm.fmt == "PPPP" + "i" * 11
    assert gemm.args == ("x", "w", "b", "y", 32, 256, 56, 56, 64, 56, 56, 1, 1, 0, 0)
    assert ("K1G_STAGES", 3) in gemm.defines and ("K1G_BN", 64) in gemm.defines
    assert "wp" not in buffers and "xt" not in buffers
    (gemm,), _ = plan(cout=65)  # past 64 channels: K1G_BN as asked (128 by default), 49,152 bytes
    assert ("K1G_BN", 128) in gemm.defines and gemm.shared == 49_152 and gemm.grid == (784, 1, 1)
    (gemm,), _ = plan(cout=65, K1G_BN=64)
    assert ("K1G_BN", 64) in gemm.defines and gemm.grid == (784 * 2, 1, 1)
    # 1x1 stride 2 256 -> 512 (a projection shortcut): 196 M tiles x 4 N tiles, N tiles of an M tile adjacent
    (gemm,), _ = plan(cout=512, stride=2)
    assert gemm.grid == (196 * 4, 1, 1) and gemm.args[4:] == (32, 256, 56, 56, 512, 28, 28, 2, 2, 0, 0)
    (gemm,), _ = plan((2, 40, 17, 19), 70, stride=(2, 1), padding=(1, 0, 2, 1), K1G_BN=64, K1G_STAGES=4)
    assert gemm.kernel == "conv2d_k1_gemm" and gemm.shared == _k1g_smem(4, 64) == 49_152
    assert ("K1G_BN", 64) in gemm.defines and ("K1G_STAGES", 4) in gemm.defines
    assert gemm.args[4:] == (2, 40, 17, 19, 70, 9, 22, 2, 1, 1, 2) and gemm.grid == (4 * 2, 1, 1)  # M 396
    # fused ReLU: the -D the epilogue reads
    sp = S.conv2d_spec(S.TensorGeometry(2, 64, 9, 9, "NHWC", np.dtype(np.float16)), (64, 64, 1, 1), False, None, 1, 0,
                       1, 1)
    be.conv2d(S.Conv2dSpec(**{**sp.__dict__, "relu": True}), buf, buf, None, buf, {"CONV_K1_GEMM": 1})
    assert dict(runs[-1][0][0].defines)["FUSE_RELU"] == 1 and runs[-1][0][0].kernel == "conv2d_k1_gemm"
    # NCHW: transposed into the NHWC workspaces and back, the NHWC build between; misaligned x is fine there
    (to_nhwc, gemm, to_nchw), buffers = plan(cout=512, stride=2, layout="NCHW", x=odd)
    assert (to_nhwc.kernel, to_nhwc.args) == ("layout_transpose", ("x", "xt", 256, 3136))
    assert gemm.kernel == "conv2d_k1_gemm" and gemm.args[:4] == ("xt", "w", "b", "yt")
    assert dict(gemm.defines)["LAYOUT_NHWC"] == 1
    assert (to_nchw.kernel, to_nchw.args) == ("layout_transpose", ("yt", "y", 784, 512))
    assert "xt" in buffers and "yt" in buffers and "wp" not in buffers
    # elsewhere: the kernels that served before
    for other in (dict(CONV_K1_GEMM=0), dict(shape=(32, 60, 56, 56)), dict(dtype=np.float32), dict(x=odd),
                  dict(w=CudaBuffer(0x10008, 1 << 30, None)), dict(k=3, padding=1), dict(groups=2)):
        assert all(launch.kernel != "conv2d_k1_gemm" for launch in plan(**other)[0]), other
    assert [launch.kernel for launch in plan(CONV_K1_GEMM=0, CONV_TC=2)[0]] == ["conv2d_tc_wprep", "conv2d_k1_tc_wide"]
    assert plan(CONV_K1_GEMM=0, cout=512, stride=2)[0][-1].kernel == "conv2d_k1s2_tc_wide"
    assert "conv2d_k1_gemm" not in _kernels_planned_on_sm75(plan)  # no cp.async: built there, never planned


def test_cuda_float16_nchw_1x1_conv_plans_the_nchw_gemm_kernel_with_conv_k1_nchw():
    """Without a GPU: CONV_K1_NCHW 1 sends a float16 NCHW dense 1x1 conv at stride 1 without padding (C_in % 8
    == 0, H*W % 8 == 0, 16-byte aligned x, y and weights, sm_80+) to conv2d_k1_gemm_nchw alone, ahead of
    CONV_K1_GEMM's transposes: one block per K1N_BM-channel x 128-pixel tile (pixels over the batch; K1N_BM
    64 wherever C_out <= 64), no workspace. CONV_K1_NCHW 0 (the default), float32, NHWC, C_in % 8, H*W % 8,
    a misaligned buffer, padding that leaves OH*OW % 8 != 0, 3x3, groups and sm_75 take other kernels (other
    strides and paddings: the next test)."""
    import numpy as np

    from hal import spec as S
    from hal.backends.cuda import _SCHEMAS, CudaBuffer, _k1n_smem

    be, _, buf, odd, source = _conv_plans_on_h200()
    runs: list[tuple[object, dict]] = []
    be._run = lambda plan, buffers: runs.append((plan, buffers))
    assert "K1N_KERNEL(conv2d_k1_gemm_nchw, 0)" in source and "namespace k1n {" in source
    assert "ldmatrix.sync.aligned.m8n8.x4.trans" in source
    assert _SCHEMAS["conv2d"].defaults()["CONV_K1_NCHW"] == 0
    assert _k1n_smem(3, 128) == 49_152 and _k1n_smem(4, 128) == 65_536 and _k1n_smem(3, 64) == 36_864
    assert _k1n_smem(2, 64) == 24_576  # the 64 x 128 output tile (16 KB) fits in the stages

    def plan(shape=(32, 256, 56, 56), cout=64, k=1, stride=1, padding=0, layout="NCHW", dtype=np.float16, x=buf,
             w=buf, y=buf, groups=1, backend=be, **params):
        sp = S.conv2d_spec(S.TensorGeometry(*shape, layout, np.dtype(dtype)), (cout, shape[1] // groups, k, k), True,
                           (cout,), stride, padding, 1, groups)
        backend.conv2d(sp, x, w, buf, y, {"CONV_K1_NCHW": 1, **params})
        return runs[-1] if backend is be else None

    (gemm,), buffers = plan()  # 1x1 256 -> 64: C_out <= 64 narrows the tile to K1N_BM 64
    assert gemm.kernel == "conv2d_k1_gemm_nchw" and gemm.file == "conv2d.cu" and gemm.block == (256, 1, 1)
    assert gemm.shared == 36_864 and gemm.grid == (32 * 56 * 56 // 128, 1, 1)  # 784 pixel tiles x 1 channel tile
    assert gemm.fmt == "PPPPiiii" and gemm.args == ("x", "w", "b", "y", 32, 256, 3136, 64)
    defines = dict(gemm.defines)
    assert defines["K1N_STAGES"] == 3 and defines["K1N_BM"] == 64 and defines["LAYOUT_NHWC"] == 0
    assert "xt" not in buffers and "yt" not in buffers and "wp" not in buffers
    (gemm,), _ = plan((32, 64, 56, 56), 256)  # 64 -> 256: K1N_BM 128, two channel tiles a pixel tile
    assert dict(gemm.defines)["K1N_BM"] == 128 and gemm.shared == 49_152 and gemm.grid == (784 * 2, 1, 1)
    (gemm,), _ = plan((32, 64, 56, 56), 256, K1N_BM=64, K1N_STAGES=4)
    assert dict(gemm.defines)["K1N_BM"] == 64 and gemm.grid == (784 * 4, 1, 1) and gemm.shared == _k1n_smem(4, 64)
    (gemm,), _ = plan((3, 40, 7, 8), 70)  # 168 pixels: two pixel tiles, the second spanning images
    assert gemm.grid == (2, 1, 1) and gemm.args[4:] == (3, 40, 56, 70)
    # fused ReLU: the -D the epilogue reads
    sp = S.conv2d_spec(S.TensorGeometry(2, 64, 8, 8, "NCHW", np.dtype(np.float16)), (64, 64, 1, 1), False, None, 1, 0,
                       1, 1)
    be.conv2d(S.Conv2dSpec(**{**sp.__dict__, "relu": True}), buf, buf, None, buf, {"CONV_K1_NCHW": 1})
    assert dict(runs[-1][0][0].defines)["FUSE_RELU"] == 1 and runs[-1][0][0].kernel == "conv2d_k1_gemm_nchw"
    # ahead of CONV_K1_GEMM's transposing path where both are on; that path where this one does not apply
    assert [launch.kernel for launch in plan(CONV_K1_GEMM=1)[0]] == ["conv2d_k1_gemm_nchw"]
    assert [launch.kernel for launch in plan(CONV_K1_GEMM=1, x=odd)[0]] == [
        "layout_transpose", "conv2d_k1_gemm", "layout_transpose"]
    # elsewhere: other kernels
    for other in (dict(CONV_K1_NCHW=0), dict(dtype=np.float32), dict(layout="NHWC"), dict(shape=(32, 60, 56, 56)),
                  dict(shape=(2, 64, 7, 7)), dict(x=odd), dict(y=odd), dict(w=CudaBuffer(0x10008, 1 << 30, None)),
                  dict(padding=1), dict(k=3, padding=1), dict(groups=2)):
        assert all(launch.kernel != "conv2d_k1_gemm_nchw" for launch in plan(**other)[0]), other
    assert "conv2d_k1_gemm_nchw" not in _kernels_planned_on_sm75(plan)  # no cp.async: built there, never planned


def test_cuda_float16_nchw_strided_1x1_conv_samples_x_then_runs_the_stride_1_gemm():
    """Without a GPU: with CONV_K1_NCHW 1, a float16 NCHW dense 1x1 conv at another stride or padding launches
    sample_planes (eltwise.cu: the pixels the window reads, zeros for padding, into the workspace "xs" of N x
    C_in x OH x OW) and then conv2d_k1_gemm_nchw (or its persistent kernel) over "xs" at stride 1, where OH*OW
    % 8 == 0; no transposes. Elsewhere (OH*OW % 8 != 0, a misaligned buffer) CONV_K1_GEMM's transposes."""
    import numpy as np

    from hal import spec as S

    be, _, buf, odd, _ = _conv_plans_on_h200()
    runs: list[tuple[object, dict]] = []
    be._run = lambda plan, buffers: runs.append((plan, buffers))

    def plan(shape=(32, 256, 56, 56), cout=512, stride=2, padding=0, x=buf, **params):
        sp = S.conv2d_spec(S.TensorGeometry(*shape, "NCHW", np.dtype(np.float16)), (cout, shape[1], 1, 1), True,
                           (cout,), stride, padding, 1, 1)
        be.conv2d(sp, x, buf, buf, buf, {"CONV_K1_NCHW": 1, "CONV_K1_GEMM": 1, **params})
        return runs[-1]

    (sample, gemm), buffers = plan()  # a ResNet projection: 56x56 -> 28x28
    assert (sample.kernel, sample.file, sample.block, sample.shared) == ("sample_planes", "eltwise.cu", (32, 8, 1), 0)
    rows = 32 * 256 * 28
    assert sample.grid == (rows // 8, 1, 1) and sample.fmt == "PP" + "i" * 9
    assert sample.args == ("x", "xs", rows, 56, 56, 28, 28, 2, 2, 0, 0)
    assert gemm.kernel == "conv2d_k1_gemm_nchw" and gemm.args == ("xs", "w", "b", "y", 32, 256, 784, 512)
    assert buffers["xs"].nbytes >= 2 * 32 * 256 * 28 * 28 and "xt" not in buffers and "yt" not in buffers
    # stride (2, 1) with asymmetric padding (top 0, bottom 2, left 1, right 0): 10 x 32 outputs of 18 x 31
    (sample, gemm), _ = plan((2, 24, 18, 31), 24, (2, 1), (0, 2, 1, 0))
    assert sample.args == ("x", "xs", 2 * 24 * 10, 18, 31, 10, 32, 2, 1, 0, 1) and sample.grid == (60, 1, 1)
    assert gemm.args[4:] == (2, 24, 320, 24)
    (sample, gemm), _ = plan((2, 40, 8, 8), 24, 1, 2)  # padding alone: 12 x 12
    assert sample.args[2:] == (2 * 40 * 12, 8, 8, 12, 12, 1, 1, 2, 2) and gemm.args[6] == 144
    (_, gemm), _ = plan(K1N_PERSIST=1)
    assert gemm.kernel == "conv2d_k1_gemm_nchw_persist" and gemm.args[0] == "xs"
    # K1N_SAMPLE 1: 8 rows a warp, 64 a block, the same arguments and workspace
    (sample, gemm), buffers = plan(K1N_SAMPLE=1)
    assert (sample.kernel, sample.block, sample.grid) == ("sample_planes_rows8", (32, 8, 1), (rows // 64, 1, 1))
    assert sample.args == ("x", "xs", rows, 56, 56, 28, 28, 2, 2, 0, 0) and "xs" in buffers
    assert plan((2, 24, 18, 31), 24, (2, 1), (0, 2, 1, 0), K1N_SAMPLE=1)[0][0].grid == (8, 1, 1)  # 480 rows
    # OH*OW % 8 != 0 (9 x 9) and a misaligned x: the GEMM between transposes
    for other in (dict(shape=(2, 16, 18, 18)), dict(x=odd)):
        assert [launch.kernel for launch in plan(**other)[0]] == [
            "layout_transpose", "conv2d_k1_gemm", "layout_transpose"], other
    assert [launch.kernel for launch in plan(CONV_K1_NCHW=0)[0]] == [
        "layout_transpose", "conv2d_k1_gemm", "layout_transpose"]


def test_cuda_float16_1x1_gemms_plan_their_persistent_variants_with_k1g_and_k1n_persist():
    """Without a GPU: K1G_PERSIST / K1N_PERSIST 1 and 2 send what conv2d_k1_gemm / conv2d_k1_gemm_nchw serve to
    their persistent kernels (2: streaming stores) of the same build (no -D of their own): a grid of the
    blocks an SM the registers allow (2 for 128-wide tiles, 3 for 64) x 132 SMs, at most the tile count, and
    the stages plus a separate output staging buffer of shared memory. Where the device's shared memory holds
    fewer such blocks an SM (or not one), the one-block-a-tile kernel serves; 0 (the default) keeps it."""
    import dataclasses

    import numpy as np

    from hal import spec as S
    from hal.backends.cuda import _SCHEMAS, _k1g_persist_smem, _k1g_smem, _k1n_persist_smem, _k1n_smem

    be, _, buf, _, source = _conv_plans_on_h200()
    runs: list[tuple[object, dict]] = []
    be._run = lambda plan, buffers: runs.append((plan, buffers))
    for name in ("K1G_KERNEL(conv2d_k1_gemm_persist, 1)", "K1G_KERNEL(conv2d_k1_gemm_persist_cs, 2)",
                 "K1N_KERNEL(conv2d_k1_gemm_nchw_persist, 1)", "K1N_KERNEL(conv2d_k1_gemm_nchw_persist_cs, 2)"):
        assert name in source
    defaults = _SCHEMAS["conv2d"].defaults()
    assert defaults["K1G_PERSIST"] == 0 and defaults["K1N_PERSIST"] == 0
    # the stages (16 or 12 KB each) and the output tile (32 or 16 KB) side by side
    assert _k1g_persist_smem(3, 128) == 81_920 and _k1g_persist_smem(4, 128) == 98_304
    assert _k1g_persist_smem(4, 64) == 65_536 and _k1n_persist_smem(4, 128) == 98_304
    assert _k1n_persist_smem(3, 64) == 53_248

    def plan(shape=(32, 64, 56, 56), cout=256, layout="NHWC", backend=be, **params):
        sp = S.conv2d_spec(S.TensorGeometry(*shape, layout, np.dtype(np.float16)), (cout, shape[1], 1, 1), True,
                           (cout,), 1, 0, 1, 1)
        gate = {"CONV_K1_GEMM": 1} if layout == "NHWC" else {"CONV_K1_NCHW": 1}
        backend.conv2d(sp, buf, buf, buf, buf, {**gate, **params})
        return runs[-1][0][-1]

    base = plan(K1G_STAGES=4)  # 784 M tiles x 2 N tiles
    assert base.kernel == "conv2d_k1_gemm" and base.grid == (1568, 1, 1) and base.shared == _k1g_smem(4, 128)
    for pv, kernel in ((1, "conv2d_k1_gemm_persist"), (2, "conv2d_k1_gemm_persist_cs")):
        gemm = plan(K1G_STAGES=4, K1G_PERSIST=pv)
        assert gemm.kernel == kernel and gemm.grid == (2 * 132, 1, 1) and gemm.shared == 98_304
        assert gemm.defines == base.defines and gemm.args == base.args and gemm.fmt == base.fmt
    gemm = plan((32, 256, 56, 56), 64, K1G_PERSIST=1)  # C_out <= 64: K1G_BN 64, three blocks an SM
    assert gemm.grid == (3 * 132, 1, 1) and gemm.shared == _k1g_persist_smem(3, 64) and gemm.defines == plan(
        (32, 256, 56, 56), 64).defines
    assert plan((1, 16, 5, 7), 24, K1G_PERSIST=1).grid == (1, 1, 1)  # one tile: one block
    base = plan(layout="NCHW", K1N_STAGES=3)  # 784 pixel tiles x 2 channel tiles
    assert base.kernel == "conv2d_k1_gemm_nchw" and base.grid == (1568, 1, 1) and base.shared == _k1n_smem(3, 128)
    for pv, kernel in ((1, "conv2d_k1_gemm_nchw_persist"), (2, "conv2d_k1_gemm_nchw_persist_cs")):
        gemm = plan(layout="NCHW", K1N_STAGES=3, K1N_PERSIST=pv)
        assert gemm.kernel == kernel and gemm.grid == (2 * 132, 1, 1) and gemm.shared == 81_920
        assert gemm.defines == base.defines and gemm.args == base.args
    gemm = plan((3, 40, 7, 8), 70, layout="NCHW", K1N_PERSIST=1, K1N_BM=64)  # 2 pixel x 2 channel tiles
    assert gemm.kernel == "conv2d_k1_gemm_nchw_persist" and gemm.grid == (4, 1, 1)
    # the persistent parameter of the other kernel does nothing here
    assert plan(K1N_PERSIST=1).kernel == "conv2d_k1_gemm" and plan(layout="NCHW", K1G_PERSIST=1).kernel == (
        "conv2d_k1_gemm_nchw")

    # an SM of 164 KB (sm_80): 4 stages of 128-wide tiles (96 KB a block) hold one persistent block, 3 stages two
    def with_smem(per_block: int, per_sm: int):
        extras = dict(be.info.extras)
        extras["shared_memory_per_sm"] = str(per_sm)
        small, _, _, _, _ = _conv_plans_on_h200()
        small.info = dataclasses.replace(be.info, local_mem_bytes=per_block, extras=tuple(extras.items()))
        small._run = be._run
        return small

    sm80 = with_smem(163 * 1024, 164 * 1024)
    assert plan(K1G_STAGES=4, K1G_PERSIST=1, backend=sm80).kernel == "conv2d_k1_gemm"
    assert plan(K1G_STAGES=3, K1G_PERSIST=1, backend=sm80).kernel == "conv2d_k1_gemm_persist"
    assert plan(layout="NCHW", K1N_STAGES=4, K1N_PERSIST=2, backend=sm80).kernel == "conv2d_k1_gemm_nchw"
    sm86 = with_smem(99 * 1024, 100 * 1024)  # one 80 KB block an SM: the non-persistent kernel's two serve
    assert plan(K1G_STAGES=3, K1G_PERSIST=1, backend=sm86).kernel == "conv2d_k1_gemm"
    assert plan(layout="NCHW", K1N_STAGES=2, K1N_PERSIST=1, backend=sm86).kernel == "conv2d_k1_gemm_nchw"


def test_cuda_float32_1x1_conv_plans_the_sgemm_kernel_with_conv_k1_simt():
    """Without a GPU: CONV_K1_SIMT 1 sends a float32 dense 1x1 conv (any stride, padding, channel counts and
    alignment) to conv2d_k1_simt alone, in either layout (no transposes, no workspace): one block per
    128-pixel x K1S_BN output tile (K1S_BN, K1S_BK build it and size its shared memory; 64 channels wherever
    C_out <= 64; 2 x K1S_BN threads). CONV_K1_SIMT 0 (the default), float16, groups, other windows,
    force_generic and int32-overflowing shapes take other kernels."""
    import dataclasses

    import numpy as np

    from hal import spec as S
    from hal.backends.cuda import _SCHEMAS, _k1s_smem

    be, _, buf, odd, source = _conv_plans_on_h200()
    runs: list[tuple[object, dict]] = []
    be._run = lambda plan, buffers: runs.append((plan, buffers))
    assert "conv2d_k1_simt(" in source and "namespace k1s {" in source
    assert _SCHEMAS["conv2d"].defaults()["CONV_K1_SIMT"] == 0
    assert _k1s_smem(128, 8) == 16_896 and _k1s_smem(64, 8) == 12_800 and _k1s_smem(128, 16) == 33_792

    def plan(shape=(32, 256, 56, 56), cout=512, k=1, stride=2, padding=0, layout="NHWC", dtype=np.float32, x=buf,
             groups=1, relu=False, **params):
        sp = S.conv2d_spec(S.TensorGeometry(*shape, layout, np.dtype(dtype)), (cout, shape[1] // groups, k, k), True,
                           (cout,), stride, padding, 1, groups)
        be.conv2d(dataclasses.replace(sp, relu=relu), x, buf, buf, buf, {"CONV_K1_SIMT": 1, **params})
        return runs[-1]

    # 1x1 stride 2 256 -> 512 (a projection shortcut): 196 pixel tiles x 4 channel tiles, 256 threads
    (gemm,), buffers = plan()
    assert gemm.kernel == "conv2d_k1_simt" and gemm.file == "conv2d.cu" and gemm.block == (256, 1, 1)
    assert gemm.grid == (196 * 4, 1, 1) and gemm.shared == 16_896 and gemm.fmt == "PPPP" + "i" * 11
    assert gemm.args == ("x", "w", "b", "y", 32, 256, 56, 56, 512, 28, 28, 2, 2, 0, 0)
    defines = dict(gemm.defines)
    assert defines["K1S_BN"] == 128 and defines["K1S_BK"] == 8 and defines["LAYOUT_NHWC"] == 1
    assert defines["DTYPE_HALF"] == 0 and "FUSE_RELU" not in defines and set(buffers) == {"x", "w", "b", "y"}
    (gemm,), _ = plan(cout=64, stride=1)  # C_out <= 64: the 64-wide tile, 128 threads, 784 pixel tiles
    assert dict(gemm.defines)["K1S_BN"] == 64 and gemm.block == (128, 1, 1) and gemm.grid == (784, 1, 1)
    assert gemm.shared == 12_800
    (gemm,), _ = plan(K1S_BN=64, K1S_BK=16)
    assert dict(gemm.defines)["K1S_BN"] == 64 and dict(gemm.defines)["K1S_BK"] == 16
    assert gemm.grid == (196 * 8, 1, 1) and gemm.block == (128, 1, 1) and gemm.shared == _k1s_smem(64, 16)
    # NCHW natively (one launch), any alignment, odd channel counts, asymmetric stride and padding, ReLU
    (gemm,), buffers = plan((2, 37, 17, 19), 70, stride=(2, 1), padding=(1, 0, 2, 1), layout="NCHW", x=odd,
                            relu=True)
    assert gemm.kernel == "conv2d_k1_simt" and dict(gemm.defines)["LAYOUT_NHWC"] == 0
    assert dict(gemm.defines)["FUSE_RELU"] == 1 and set(buffers) == {"x", "w", "b", "y"}
    assert gemm.args[4:] == (2, 37, 17, 19, 70, 9, 22, 2, 1, 1, 2) and gemm.grid == (4 * 1, 1, 1)  # M 396
    # elsewhere: the kernels that served before
    for other in (dict(CONV_K1_SIMT=0), dict(dtype=np.float16), dict(groups=2), dict(k=3, padding=1),
                  dict(shape=(2048, 1024, 64, 64), stride=1)):  # 2^33 input elements: past int32
        assert all(launch.kernel != "conv2d_k1_simt" for launch in plan(**other)[0]), other
    assert plan(CONV_K1_SIMT=0)[0][-1].kernel == "conv2d_grp_g"
    be.force_generic = True
    assert [launch.kernel for launch in plan()[0]] == ["conv2d"]


def test_cuda_float32_conv_im2col_plans_the_implicit_sgemm():
    """Without a GPU: with CONV_IM2COL 1, a float32 dense conv of any window launches conv2d_im2col_simt alone:
    conv2d_k1_simt's tiles (128 pixels x K1S_BN channels, 64 wherever C_out <= 64, 2 x K1S_BN threads), its
    two stages plus a 16-byte table entry per k (K padded to K1S_BK) in shared memory, and the window, stride,
    dilation and padding as arguments. K over 4096, groups, or CONV_IM2COL 0 keep the kernels before it; the
    shipped sm_90 table asks for it for float32 7x7 and 3x3 stride-2 convs."""
    import numpy as np

    from hal import spec as S
    from hal.backends.cuda import _SCHEMAS, _k1s_smem
    from hal.tuning.table import Tuner

    be, plans, buf, _, src = _conv_plans_on_h200()
    assert "conv2d_im2col_simt(" in src

    def plan(shape=(32, 3, 224, 224), cout=64, k=7, stride=2, groups=1, layout="NCHW", **params):
        sp = S.conv2d_spec(S.TensorGeometry(*shape, layout, np.dtype(np.float32)),
                           (cout, shape[1] // groups, k, k), True, (cout,), stride, k // 2, 1, groups)
        be.conv2d(sp, buf, buf, buf, buf, {"CONV_IM2COL": 1, **params})
        return plans[-1]

    for layout in ("NCHW", "NHWC"):
        (launch,) = plan(layout=layout)
        m = 32 * 112 * 112
        assert (launch.kernel, launch.block, launch.grid) == ("conv2d_im2col_simt", (128, 1, 1), (m // 128, 1, 1))
        assert launch.shared == _k1s_smem(64, 8) + 16 * 152  # K = 147 -> 152
        assert launch.args == ("x", "w", "b", "y", 32, 3, 224, 224, 64, 112, 112, 7, 7, 2, 2, 1, 1, 3, 3)
        assert ("K1S_BN", 64) in launch.defines
        (launch,) = plan(shape=(2, 64, 56, 56), cout=130, k=3, layout=layout, K1S_BK=16)  # K 576
        assert (launch.kernel, launch.block) == ("conv2d_im2col_simt", (256, 1, 1))
        assert launch.grid == ((2 * 28 * 28 + 127) // 128 * 2, 1, 1)  # the pixel tiles x 2 channel tiles
        assert launch.shared == _k1s_smem(128, 16) + 16 * 576
    assert [la.kernel for la in plan(shape=(1, 512, 9, 9), k=3, stride=1)] == ["conv2d_k3_simt"]  # K 4608
    assert [la.kernel for la in plan(shape=(1, 512, 9, 9), k=3, stride=1, CONV_IM2COL=0)] == ["conv2d_k3_simt"]
    assert [la.kernel for la in plan(shape=(2, 8, 9, 9), cout=8, k=3, groups=2)] != ["conv2d_im2col_simt"]
    # the shipped table: the sm_90 float32 7x7 and 3x3 stride-2 entries (measured in session 27) ask for it
    tuner = Tuner(be.info, _SCHEMAS)
    for layout in ("NCHW", "NHWC"):
        for shape, cout, k in (((32, 3, 224, 224), 64, 7), ((64, 64, 56, 56), 128, 3)):
            sp = S.conv2d_spec(S.TensorGeometry(*shape, layout, np.dtype(np.float32)), (cout, shape[1], k, k), False,
                               None, 2, k // 2, 1, 1)
            resolved = tuner.resolve_spec(sp)
            assert resolved.params["CONV_IM2COL"] == 1 and resolved.level == "arch", (layout, k)
            be.conv2d(sp, buf, buf, None, buf, resolved.params)
            assert [la.kernel for la in plans[-1]] == ["conv2d_im2col_simt"]


def test_cuda_float16_stem_plans_the_implicit_gemm_with_conv_im2col():
    """Without a GPU: with CONV_IM2COL 1, a float16 dense conv with C_in * KH * KW <= 256 that no tensor-core
    kernel before it takes (the 7x7 stride-2 stem of 3 channels) launches conv2d_im2col_tc: 4 warps a block,
    persistent blocks over the SMs (by shared memory), 64-channel chunks of C_out on the grid's y, and its
    parameter blob (K padded to 16, an odd count of 16-byte chunks a shared row). K > 256, float32 or
    CONV_IM2COL 0 keep the tiled direct kernel; the shipped sm_90 table asks for the kernel for the stem."""
    import struct

    import numpy as np

    from hal import spec as S
    from hal.backends.cuda import _SCHEMAS
    from hal.tuning.table import Tuner

    be, plans, buf, _, src = _conv_plans_on_h200()
    assert "conv2d_im2col_tc(" in src

    def plan(shape=(32, 3, 224, 224), cout=64, k=7, dtype=np.float16, layout="NCHW", **params):
        sp = S.conv2d_spec(S.TensorGeometry(*shape, layout, np.dtype(dtype)), (cout, shape[1], k, k), True, (cout,),
                           2, k // 2, 1, 1)
        be.conv2d(sp, buf, buf, buf, buf, {"CONV_IM2COL": 1, **params})
        return plans[-1]

    for layout in ("NCHW", "NHWC"):
        (launch,) = plan(layout=layout)
        assert (launch.kernel, launch.file, launch.block) == ("conv2d_im2col_tc", "conv2d.cu", (128, 1, 1))
        kp, pitch = 160, 168  # K = 3 * 49 = 147
        region = 32 * pitch
        assert launch.shared == 16 * kp + 2 * (64 * pitch + 4 * region) == 67072
        tiles = 32 * 112 * 4  # 112 output columns: 4 segments of 32 a row
        per_sm = 232448 // (67072 + 1024)  # the H200's shared memory per SM holds 3
        assert launch.grid == (min(tiles // 4, 132 * per_sm), 1, 1)
        fields = struct.unpack(f"<{len(launch.args[4]) // 4}i", launch.args[4])
        assert fields == (32, 3, 224, 224, 64, 112, 112, 7, 7, 2, 2, 1, 1, 3, 3, 147, kp, pitch, region, 4, tiles)
        assert launch.args[:4] == ("x", "w", "b", "y")
    (launch,) = plan(cout=130, shape=(2, 3, 30, 30))  # three 64-channel chunks
    assert launch.grid[1] == 3
    (launch,) = plan(shape=(2, 5, 30, 30), k=7)  # K = 245 <= 256
    assert launch.kernel == "conv2d_im2col_tc"
    for other in (dict(shape=(2, 6, 30, 30)), dict(CONV_IM2COL=0)):
        assert [launch.kernel for launch in plan(**other)] == ["conv2d_grp_g"], other
    # the shipped table: the sm_90 float16 7x7 stride-2 entries (measured in session 26) ask for it
    tuner = Tuner(be.info, _SCHEMAS)
    for layout in ("NCHW", "NHWC"):
        sp = S.conv2d_spec(S.TensorGeometry(32, 3, 224, 224, layout, np.dtype(np.float16)), (64, 3, 7, 7), False,
                           None, 2, 3, 1, 1)
        resolved = tuner.resolve_spec(sp)
        assert resolved.params["CONV_IM2COL"] == 1 and resolved.level == "arch"


def test_cuda_bn_training_plans_one_cooperative_launch_where_it_applies_without_a_gpu():
    """Without a GPU: NHWC training with BN_FUSED 1 plans batch_norm_train_fused alone, a
    cooperative launch (no programmatic edge) of one block a multiprocessor whose shared memory
    fits a block; float16 256x64x32x32 re-reads 3 % of x, float32 at most half of L2; NCHW,
    C not a multiple of the vector width, a misaligned x, a tensor whose re-read would exceed half
    of L2, or a device without cooperative launches keep the two-pass plan."""
    import math
    import struct

    import numpy as np

    from hal import spec as S
    from hal.backends.cuda import CudaBuffer

    be, _ = _h200_without_gpu()
    plans: list[object] = []
    be._run = lambda plan, buffers: plans.append((plan, buffers))
    be._barrier_buffer = lambda: CudaBuffer(0x30000, 256, None)
    be.cooperative = True
    x, y, odd = CudaBuffer(0x10000, 1 << 31, None), CudaBuffer(0x20000, 1 << 31, None), CudaBuffer(0x10004, 1, None)
    fused = {"BN_FUSED": 1}

    def plan(shape, dtype=np.float32, layout="NHWC", params=fused, xb=x):
        g = S.TensorGeometry(*shape, layout, np.dtype(dtype))
        be.batch_norm(S.batch_norm_spec(g, True, 0.1, 1e-5, True), xb, y, x, x, x, x, params)
        return plans[-1]

    for dtype, regs in ((np.float32, 12), (np.float16, 4)):
        es = np.dtype(dtype).itemsize
        (launch,), bufs = plan((256, 64, 32, 32), dtype, params={**fused, "BN_FUSED_REGS": regs})
        assert launch.kernel == "batch_norm_train_fused" and launch.cooperative and not launch.pdl
        assert launch.grid == (132, 1, 1) and launch.block == (512, 1, 1)
        assert dict(launch.defines)["BN_FUSED_REGS"] == regs and dict(launch.defines)["BN_FUSED_THREADS"] == 512
        blocks, ncv, rg, smem_vecs, gpw = struct.unpack_from("<5i", launch.args[-1])
        assert (blocks, ncv, rg, gpw) == (132, 64 * es // 16, 512 // (64 * es // 16), 32 // (64 * es // 16))
        assert launch.shared <= 232448 and launch.shared >= smem_vecs * 512 * 16
        per_thread = math.ceil(math.ceil(256 * 32 * 32 / 132) / rg)
        kept = 132 * 512 * min(per_thread, regs + smem_vecs) * 16
        reread = 256 * 64 * 32 * 32 * es - kept
        # float32 keeps about two thirds on chip; float16 all but 2 of each thread's 32 vectors
        assert 0 < reread <= ((25 << 20) if dtype == np.float32 else (2 << 20)), reread
        assert {"part", "aff", "bar"} <= set(bufs) and bufs["part"].nbytes >= 12 * 64 * 132
        assert struct.unpack_from("<i", launch.args[-1], 32)[0] == 0  # BnFused.fin: two barriers by default
    # BN_FUSED_FIN 1: every block merges every channel where the partials are at most 128 KiB (C 64: 99 KiB)
    for c, fin in ((64, 1), (128, 0)):
        (launch,), _ = plan((16, c, 8, 8), params={**fused, "BN_FUSED_FIN": 1})
        assert struct.unpack_from("<i", launch.args[-1], 32)[0] == fin, c
    for shape, dtype, layout, params, xb in (
            ((256, 64, 32, 32), np.float32, "NCHW", fused, x),  # NCHW: the two-pass plan
            ((3, 5, 7, 9), np.float32, "NHWC", fused, x),  # C % 4
            ((4, 24, 8, 8), np.float32, "NHWC", fused, odd),  # misaligned
            ((1024, 64, 64, 64), np.float32, "NHWC", fused, x),  # 1 GiB: most of it re-read
            ((256, 64, 32, 32), np.float32, "NHWC", {}, x)):  # BN_FUSED 0 (the schema default)
        launches, _ = plan(shape, dtype, layout, params, xb)
        assert "batch_norm_train_fused" not in [launch.kernel for launch in launches], (shape, layout)
    be.cooperative = False
    launches, _ = plan((16, 64, 32, 32))
    assert [launch.kernel for launch in launches] == ["batch_norm_stats", "batch_norm_finalize", "batch_norm_apply_ex"]


def test_cuda_bn_training_falls_back_to_two_passes_when_the_driver_refuses_a_cooperative_grid_without_a_gpu():
    """Without a GPU: a cooperative launch the driver refuses (CooperativeLaunchRefused, nothing of the
    call ran) gives one RuntimeWarning naming the kernel, the two-pass plan runs in the same call, and
    later calls plan two passes from the start; a capture plans two passes too."""
    import numpy as np
    import pytest

    from hal import spec as S
    from hal.backends.cuda import CooperativeLaunchRefused, CudaBuffer

    be, _ = _h200_without_gpu()
    ran: list[tuple[str, ...]] = []

    def run(plan, buffers):
        if plan[0].cooperative:
            raise CooperativeLaunchRefused(f"{plan[0].kernel}: cooperative grid of {plan[0].grid[0]} blocks refused")
        ran.append(tuple(launch.kernel for launch in plan))

    be._run = run
    be._barrier_buffer = lambda: CudaBuffer(0x30000, 256, None)
    be.cooperative = True
    x = CudaBuffer(0x10000, 1 << 30, None)
    sp = S.batch_norm_spec(S.TensorGeometry(16, 64, 32, 32, "NHWC", np.dtype(np.float32)), True, 0.1, 1e-5, True)
    two_pass = ("batch_norm_stats", "batch_norm_finalize", "batch_norm_apply_ex")
    with pytest.warns(RuntimeWarning, match="batch_norm_train_fused"):
        be.batch_norm(sp, x, x, x, x, x, x, {"BN_FUSED": 1})
    assert ran == [two_pass] and not be.cooperative
    be.batch_norm(sp, x, x, x, x, x, x, {"BN_FUSED": 1})
    assert ran[-1] == two_pass
    be.cooperative, be._capturing = True, True
    be.batch_norm(sp, x, x, x, x, x, x, {"BN_FUSED": 1})
    assert ran[-1] == two_pass and be.cooperative


def test_cuda_other_architectures_send_1x1_convs_and_stems_to_the_gemm_kernels_without_a_gpu():
    """Without a GPU: on every architecture but sm_90 (whose entries are measured) the shipped per-dtype
    conv2d defaults (session 41, not measured there) plan float16 and bfloat16 1x1 convs as the tensor-core
    GEMMs and stems as the implicit GEMM where the architecture has them (bfloat16 sm_80+, cp.async sm_80+)
    and its shared memory holds them, and float32 1x1 convs as the SGEMM; a kernel that does not fit the
    architecture's shared memory is never planned (sm_75's 64 KiB: no tensor-core kernel at all). Without the
    entries these convs ran on the schema defaults, 3.6-77x slower on sm_90. float32 3x3 stride-1 convs keep
    conv2d_k3_simt. Since session 42 the streamed-weight kernels take 4-row tiles where 8 rows do not fit, and
    at stride 2 one stage where two do not: 3x3 convs past 64 input channels on the 99 KiB parts (NCHW through
    NHWC transposes there) and 3x3 stride 2 on sm_80 (163 KiB) and on the 99 KiB parts reach the tensor
    cores."""
    import warnings

    import numpy as np

    from hal import spec as S
    from hal.backends.cuda import _SCHEMAS
    from hal.dtypes import BFLOAT16
    from hal.tuning.table import Tuner

    cuda_emu = _cuda_emu()
    dtypes = [np.dtype(np.float32), np.dtype(np.float16)] + ([BFLOAT16] if BFLOAT16 is not None else [])

    def kernels(be, tuner, dtype, layout, shape, cout, k, stride):
        sp = S.conv2d_spec(S.TensorGeometry(*shape, layout, dtype), (cout, shape[1], k, k), True, (cout,),
                           stride, k // 2, 1, 1)
        resolved = tuner.resolve_spec(sp)
        assert resolved.level == "arch" and dict(resolved.params).get("CONV_THREADS"), resolved
        plan = be._plan_conv2d(sp, resolved.params, True, True)
        assert all(launch.shared <= be._max_smem() for launch in plan), plan
        return [launch.kernel for launch in plan if launch.kernel not in ("layout_transpose", "conv2d_tc_wprep")]

    for arch in ("sm_75", "sm_80", "sm_86", "sm_89", "sm_100", "sm_120"):
        be = cuda_emu.arch_backend(arch)
        tuner = Tuner(be.info, _SCHEMAS)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no shipped entry is invalid there
            for dtype in dtypes:
                tensor_cores = dtype != np.float32 and arch != "sm_75"
                for layout in ("NCHW", "NHWC"):
                    k1 = kernels(be, tuner, dtype, layout, (8, 256, 28, 28), 64, 1, 1)
                    k1s2 = kernels(be, tuner, dtype, layout, (8, 256, 28, 28), 512, 1, 2)
                    stem = kernels(be, tuner, dtype, layout, (2, 3, 64, 64), 64, 7, 2)
                    k3 = kernels(be, tuner, dtype, layout, (2, 64, 20, 24), 64, 3, 1)
                    k3_wide = kernels(be, tuner, dtype, layout, (2, 256, 16, 16), 256, 3, 1)
                    k3s2 = kernels(be, tuner, dtype, layout, (2, 64, 28, 28), 128, 3, 2)
                    where = (arch, str(dtype), layout)
                    if dtype == np.float32:
                        assert k1 == ["conv2d_k1_simt"] and k1s2 == ["conv2d_k1_simt"], where
                        assert k3 == ["conv2d_k3_simt"] and stem == ["conv2d_grp_g"], where
                    elif tensor_cores:
                        gemm = "conv2d_k1_gemm_nchw" if layout == "NCHW" else "conv2d_k1_gemm"
                        # stride 2 at 14 x 14 outputs (not a multiple of 8): NCHW through the transposing GEMM
                        assert k1 == [gemm] and k1s2 == ["conv2d_k1_gemm"], (where, k1, k1s2)
                        assert stem == ["conv2d_im2col_tc"], (where, stem)
                        assert k3[0].startswith("conv2d_k3_tc"), (where, k3)
                        # the streamed weights' 3x3 needs 115-153 KiB with 8 rows (two stages), 98-121 KiB with
                        # 4: on every arch here (NHWC 4 rows, 99,840 bytes, on the 99 KiB parts)
                        assert k3_wide == ["conv2d_k3_tc_wide"], (where, k3_wide)
                        # stride 2: 210 KiB with 8 rows (sm_100), 145 KiB with 4 (sm_80), 73 KiB with 4 in one
                        # stage (the 99 KiB parts)
                        assert k3s2 == ["conv2d_k3s2_tc_wide"], (where, k3s2)
                    else:  # sm_75: bfloat16 has no mma there, and float16's kernels need more than 64 KiB
                        assert not any("tc" in name or "gemm" in name for name in k1 + k1s2 + stem + k3 + k3_wide), \
                            (where, k1, k1s2, stem, k3, k3_wide)
