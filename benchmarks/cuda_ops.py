"""Benchmark of the CUDA backend against PyTorch/cuDNN on the same GPU, in the same run.

For each case of ../shared/baselines/h200_pytorch_baseline.py (same shapes, same byte
and FLOP counts: each input read once, each output written once; conv counts 2*MACs):

* the copy bandwidth of this run (PyTorch device-to-device copy of 2**28 elements),
* hal's launcher (the backend called directly with a spec) and PyTorch, timed with CUDA
  events two ways: ``b2b`` = 20 calls back to back between two events, median of 15
  (GPU time per call, launch overhead hidden when the GPU is the bottleneck), and
  ``call`` = one call between two events after a synchronize, median of 50 (as the
  baseline file does: includes the host's launch overhead when it exceeds nothing),
* ``queued`` (a second table): the same calls enqueued behind a sleeping kernel, so the GPU
  runs them back to back whatever the host's launch cost (where one call's host time
  exceeds its GPU time, b2b measures the host), with the host's enqueue time per call,
* ``graph`` (a third table): 20 calls captured into one CUDA graph (hal: the backend's
  ``capture``, what ``hal.capture`` uses; PyTorch: ``torch.cuda.graph``), each replay queued
  the same way: without the stream's gap between kernels (about 1.3 µs on the H200),
* warm-up first; inputs rotate among several sets so that together they exceed 3x the
  L2 (no call finds its input in L2 from the previous call),
* hal's output checked against PyTorch's on the same input before timing,
* hal's parameters: what the device's tuning tables serve for the spec (the fallback
  chain's level is printed), as hal's ops would run it, and the schema default beside it;
  ``--sweep``: also a few tuning candidates per case; the fastest (queued GPU time, each
  candidate also timed b2b) is reported and written as a suggested tuning-table entry.

    python3 benchmarks/cuda_ops.py [--sweep] [--quick] [--out DIR] [--only SUBSTR[|SUBSTR...]]

Writes DIR/cuda_ops.json (every measurement) and DIR/tuning_sm.json (suggested entries);
prints the table last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hal import device as hal_device
from hal import spec as S
from hal.backends.cuda import CudaBackend

L2_BYTES = 60 * 1024 * 1024


@dataclass
class Case:
    """One benchmark case: how to run it in hal and in PyTorch, and what it moves."""

    name: str
    family: str
    dtype: str
    layout: str
    nbytes: float
    flops: float
    key: dict[str, Any]
    candidates: list[dict[str, int]] = field(default_factory=list)
    setup: Callable[..., Any] | None = None


def tdt(torch: Any, dtype: str) -> Any:
    """torch dtype of a name."""
    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]


def geom(shape: tuple[int, int, int, int], layout: str, dtype: str) -> S.TensorGeometry:
    """TensorGeometry of a logical shape."""
    n, c, h, w = shape
    return S.TensorGeometry(n, c, h, w, layout, np.dtype(dtype))  # type: ignore[arg-type]


def fmt_tensor(torch: Any, t: Any, layout: str) -> Any:
    """``t`` in the memory format of ``layout``."""
    return t.contiguous(memory_format=torch.channels_last) if layout == "NHWC" else t.contiguous()


def nsets_for(bytes_per_call: float) -> int:
    """Input sets to rotate so that together they exceed 3x the L2."""
    return int(max(1, min(8, math.ceil(3 * L2_BYTES / max(bytes_per_call, 1.0)))))


def wrap(be: CudaBackend, t: Any) -> Any:
    """A hal buffer over a PyTorch tensor (no copy)."""
    return be.wrap(t.data_ptr(), t.numel() * t.element_size(), t)


# ----------------------------------------------------------------------------------
# case builders: each returns (hal_call(i, params), torch_call(i), check() -> (ok, detail), spec)
# ----------------------------------------------------------------------------------


def case_spec(case: Case) -> Any:
    """The op spec a case launches (no tensors: the served parameters, and so the builds, follow from it)."""
    k = case.key
    g = geom(k["shape"], case.layout, case.dtype)
    if case.family == "pool2d":
        return S.pool2d_spec(k["kind"], g, k["k"], k["s"], k["p"], 1, False, True, None, False)
    if case.family == "adaptive_pool2d":
        return S.adaptive_pool2d_spec("avg", g, 1, False)
    if case.family == "conv2d":
        kk, groups = k.get("k", 3), k["groups"]
        wshape = (k["cout"], k["shape"][1] // groups, kk, kk)
        return S.conv2d_spec(g, wshape, False, None, k.get("stride", 1), kk // 2, 1, groups)
    return S.batch_norm_spec(g, k["mode"] == "train", 0.1, 1e-5, True)


def setup_pool(torch: Any, F: Any, be: CudaBackend, case: Case) -> tuple[Any, Any, Any]:
    """max/avg pooling."""
    k = case.key
    shape, kind = k["shape"], k["kind"]
    kern, stride, pad = k["k"], k["s"], k["p"]
    dt = tdt(torch, case.dtype)
    sp = case_spec(case)
    n = nsets_for(case.nbytes)
    xs = [fmt_tensor(torch, torch.randn(*shape, device="cuda", dtype=dt), case.layout) for _ in range(n)]
    ys = [fmt_tensor(torch, torch.empty(sp.out_shape, device="cuda", dtype=dt), case.layout) for _ in range(n)]
    xw = [wrap(be, x) for x in xs]
    yw = [wrap(be, y) for y in ys]
    tf = F.max_pool2d if kind == "max" else F.avg_pool2d

    def hal(i: int, params: dict[str, int]) -> None:
        be.pool2d(sp, xw[i % n], yw[i % n], None, params)

    def ref(i: int) -> Any:
        return tf(xs[i % n], kern, stride, pad)

    def check(params: dict[str, int]) -> tuple[bool, str]:
        ys[0].fill_(float("nan"))
        hal(0, params)
        be.synchronize()
        return close(torch, ys[0], ref(0), exact=kind == "max")

    return hal, ref, check, sp


def setup_adaptive(torch: Any, F: Any, be: CudaBackend, case: Case) -> tuple[Any, Any, Any]:
    """global average pooling."""
    shape = case.key["shape"]
    dt = tdt(torch, case.dtype)
    sp = case_spec(case)
    n = nsets_for(case.nbytes)
    xs = [fmt_tensor(torch, torch.randn(*shape, device="cuda", dtype=dt), case.layout) for _ in range(n)]
    ys = [fmt_tensor(torch, torch.empty(sp.out_shape, device="cuda", dtype=dt), case.layout) for _ in range(n)]
    xw, yw = [wrap(be, x) for x in xs], [wrap(be, y) for y in ys]

    def hal(i: int, params: dict[str, int]) -> None:
        be.adaptive_pool2d(sp, xw[i % n], yw[i % n], None, params)

    def ref(i: int) -> Any:
        return F.adaptive_avg_pool2d(xs[i % n], 1)

    def check(params: dict[str, int]) -> tuple[bool, str]:
        ys[0].fill_(float("nan"))
        hal(0, params)
        be.synchronize()
        return close(torch, ys[0], ref(0))

    return hal, ref, check, sp


def setup_conv(torch: Any, F: Any, be: CudaBackend, case: Case) -> tuple[Any, Any, Any]:
    """dense, grouped and depthwise 3x3 (or key "k" x k, padding k // 2, key "stride") convolution (no bias,
    TF32 off)."""
    shape, cout, groups, k = case.key["shape"], case.key["cout"], case.key["groups"], case.key.get("k", 3)
    stride = case.key.get("stride", 1)
    dt = tdt(torch, case.dtype)
    wshape = (cout, shape[1] // groups, k, k)
    sp = case_spec(case)
    n = nsets_for(case.nbytes)
    xs = [fmt_tensor(torch, torch.randn(*shape, device="cuda", dtype=dt), case.layout) for _ in range(n)]
    w = (torch.randn(*wshape, device="cuda", dtype=torch.float32) / math.sqrt(wshape[1] * k * k)).to(dt).contiguous()
    wt = fmt_tensor(torch, w, case.layout)  # PyTorch's preferred weight format for the layout
    ys = [fmt_tensor(torch, torch.empty(sp.out_shape, device="cuda", dtype=dt), case.layout) for _ in range(n)]
    xw, yw, ww = [wrap(be, x) for x in xs], [wrap(be, y) for y in ys], wrap(be, w)

    def hal(i: int, params: dict[str, int]) -> None:
        be.conv2d(sp, xw[i % n], ww, None, yw[i % n], params)

    def ref(i: int) -> Any:
        return F.conv2d(xs[i % n], wt, stride=stride, padding=k // 2, groups=groups)

    def check(params: dict[str, int]) -> tuple[bool, str]:
        ys[0].fill_(float("nan"))
        hal(0, params)
        be.synchronize()
        return close(torch, ys[0], ref(0))

    return hal, ref, check, sp


def setup_bn(torch: Any, F: Any, be: CudaBackend, case: Case) -> tuple[Any, Any, Any]:
    """BatchNorm forward, training or inference."""
    shape, training = case.key["shape"], case.key["mode"] == "train"
    dt = tdt(torch, case.dtype)
    c = shape[1]
    sp = case_spec(case)
    n = nsets_for(case.nbytes)
    xs = [fmt_tensor(torch, torch.randn(*shape, device="cuda", dtype=dt) * 2 + 0.5, case.layout) for _ in range(n)]
    ys = [fmt_tensor(torch, torch.empty(*shape, device="cuda", dtype=dt), case.layout) for _ in range(n)]
    g = torch.rand(c, device="cuda") + 0.5
    b = torch.randn(c, device="cuda")
    rm = torch.randn(c, device="cuda")
    rv = torch.rand(c, device="cuda") + 0.5
    # as the baseline file: PyTorch gets half parameters for half inputs; hal's are float32 by contract
    # (bfloat16: PyTorch's mixed form, float32 parameters; it never takes cuDNN's BatchNorm either way)
    tp = [t.to(dt) if case.dtype == "float16" else t.clone() for t in (g, b, rm, rv)]
    hp = [t.clone() for t in (g, b, rm, rv)]
    xw, yw = [wrap(be, x) for x in xs], [wrap(be, y) for y in ys]
    hw_ = [wrap(be, t) for t in hp]

    def hal(i: int, params: dict[str, int]) -> None:
        be.batch_norm(sp, xw[i % n], yw[i % n], hw_[0], hw_[1], hw_[2], hw_[3], params)

    def ref(i: int) -> Any:
        return F.batch_norm(xs[i % n], tp[2], tp[3], tp[0], tp[1], training=training)

    def check(params: dict[str, int]) -> tuple[bool, str]:
        ys[0].fill_(float("nan"))
        rm0, rv0 = hp[2].clone(), hp[3].clone()
        hal(0, params)
        be.synchronize()
        want = F.batch_norm(xs[0].float(), rm0.clone(), rv0.clone(), g, b, training=training).to(dt)
        return close(torch, ys[0], want)

    return hal, ref, check, sp


#: the checks' tolerance relative to the output's scale: float32's accumulation order, one float16 rounding
#: (11 significant bits) or one bfloat16 rounding (8 bits: 2**-8 relative)
RTOL = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 8e-3}

SETUPS = {"pool2d": setup_pool, "adaptive_pool2d": setup_adaptive, "conv2d": setup_conv, "batch_norm": setup_bn}


def close(torch: Any, got: Any, want: Any, exact: bool = False) -> tuple[bool, str]:
    """hal output vs PyTorch output: exact for max pooling, else within RTOL of the output's dtype
    relative to the output's scale."""
    if torch.isnan(got).any():
        return False, f"{int(torch.isnan(got).sum())} NaN (unwritten?)"
    if exact:
        ok = torch.equal(got, want)
        return bool(ok), "" if ok else f"{int((got != want).sum())} elements differ"
    g, w = got.float(), want.float()
    err = (g - w).abs().max().item()
    scale = max(w.abs().max().item(), 1.0)
    tol = RTOL[str(got.dtype).removeprefix("torch.")]
    return err <= tol * scale, f"max err {err:.3g} (scale {scale:.3g})"


# ----------------------------------------------------------------------------------
# timing
# ----------------------------------------------------------------------------------


def time_b2b(torch: Any, fn: Callable[[int], Any], reps: int = 15, inner: int = 20) -> float:
    """Median ms per call of ``inner`` back-to-back calls between two events."""
    for i in range(5):
        fn(i)
    torch.cuda.synchronize()
    out = []
    for r in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for i in range(inner):
            fn(r * inner + i)
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / inner)
    return float(np.median(out))


_SLEEP_CYCLES = [1 << 21]  # grown until the host queues 20 calls inside the sleep


def time_queued(torch: Any, fn: Callable[[int], Any], reps: int = 15, inner: int = 20) -> tuple[float, float]:
    """(median GPU ms per call, median host µs per call) of ``inner`` calls queued behind a
    sleeping kernel: the host enqueues all of them while the GPU sleeps, so the GPU runs
    them back to back without waiting for the host (``b2b`` does wait where one call's host
    time exceeds its GPU time), and the host's enqueue time is the launch path's own cost.
    hal's stream is a blocking stream, ordered with PyTorch's legacy default stream."""
    for i in range(5):
        fn(i)
    torch.cuda.synchronize()
    gpu, host = [], []
    sleep0, longer = _SLEEP_CYCLES[0], 0
    for r in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s0.record()
        torch.cuda._sleep(_SLEEP_CYCLES[0])
        s1.record()
        a.record()
        t0 = time.perf_counter()
        for i in range(inner):
            fn(r * inner + i)
        t1 = time.perf_counter()
        b.record()
        b.synchronize()
        if (t1 - t0) * 1e3 > 0.8 * s0.elapsed_time(s1):  # the GPU may have waited: sleep longer, repeat
            # unless the enqueue itself waits for the GPU whatever the sleep (calls of many launches
            # fill the launch queue: PyTorch's float32 NHWC grouped conv, ~1.5 ms a call): then no
            # queued time (NaN), and the sleep back where it was (it had doubled 15 times, stalling
            # the whole-table runs of sessions 25 and 26 for minutes)
            longer += 1
            if longer > 4:
                _SLEEP_CYCLES[0] = sleep0
                return float("nan"), float("nan")
            _SLEEP_CYCLES[0] *= 2
            continue
        gpu.append(a.elapsed_time(b) / inner)
        host.append((t1 - t0) * 1e6 / inner)
    if not gpu:
        return float("nan"), float("nan")
    return float(np.median(gpu)), float(np.median(host))


def time_graph(torch: Any, capture: Callable[[Callable[[], None]], Callable[[], None] | None],
               fn: Callable[[int], Any], inner: int = 20) -> float:
    """Median GPU ms per call of ``inner`` calls captured into one CUDA graph by ``capture``
    (which returns its replay, or None when capture failed: then NaN), each replay queued
    behind a sleeping kernel as in ``time_queued``: the kernels run back to back without
    the stream's per-launch gap, as a captured pipeline runs them."""
    for i in range(3):
        fn(i)
    torch.cuda.synchronize()
    replay = capture(lambda: [fn(i) for i in range(inner)])
    if replay is None:
        return float("nan")
    ms, _ = time_queued(torch, lambda i: replay(), inner=1)
    return ms / inner


def torch_capture(torch: Any) -> Callable[[Callable[[], None]], Callable[[], None] | None]:
    """``time_graph``'s capture for PyTorch calls: torch.cuda.graph on a side stream."""
    def capture(calls: Callable[[], None]) -> Callable[[], None] | None:
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                calls()
        except Exception as exc:
            print(f"  torch graph capture failed: {type(exc).__name__}: {exc}", flush=True)
            return None
        return graph.replay

    return capture


def time_call(torch: Any, fn: Callable[[int], Any], iters: int = 50) -> float:
    """Median ms of one call between two events after a synchronize (the baseline file's method)."""
    for i in range(10):
        fn(i)
    torch.cuda.synchronize()
    out = []
    for i in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(i)
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b))
    return float(np.median(out))


def copy_bandwidth(torch: Any, dtype: str) -> tuple[float, float]:
    """(ms, GB/s) of a 2**28-element device copy, bytes read + written."""
    dt = tdt(torch, dtype)
    bufs = [torch.randn(1 << 28, device="cuda", dtype=dt)]
    bufs.append(torch.empty_like(bufs[0]))
    ms = time_call(torch, lambda i: bufs[1].copy_(bufs[0]))
    nbytes = 2 * bufs[0].numel() * bufs[0].element_size()
    bufs.clear()
    torch.cuda.empty_cache()
    return ms, nbytes / ms / 1e6


def same_size_copy_ms(torch: Any, nbytes: float) -> tuple[float, float]:
    """b2b ms of a PyTorch device-to-device copy moving ``nbytes`` (half read, half written),
    inputs rotated past the L2 as the cases' are: the ceiling a kernel of that size meets,
    launch gaps and ramp-up included (informative; the targets use the 2**28 copy); with
    its ``time_queued`` GPU time beside: (b2b ms, queued ms)."""
    n = max(1, int(nbytes / 2) // 4)
    sets = nsets_for(nbytes)
    src = [torch.randn(n, device="cuda") for _ in range(sets)]
    dst = [torch.empty_like(t) for t in src]
    ms = time_b2b(torch, lambda i: dst[i % sets].copy_(src[i % sets]))
    queued, _ = time_queued(torch, lambda i: dst[i % sets].copy_(src[i % sets]))
    src.clear()
    dst.clear()
    torch.cuda.empty_cache()
    return ms, queued


# ----------------------------------------------------------------------------------
# cases
# ----------------------------------------------------------------------------------


#: the 1x1 GEMM kernel (CONV_K1_GEMM, conv2d_k1_gemm, session 22) over its stage counts and (C_out > 64:
#: the launcher takes 64 below) tile widths: the float16 1x1 cases' candidates beside the kernels that
#: serve them without it
K1_GEMM = [{"CONV_K1_GEMM": 1, "K1G_STAGES": st} for st in (3, 2, 4)]
#: and its persistent variants (K1G_PERSIST 1; 2: streaming stores), 3 and 4 stages (with C_in 64 the next
#: tile's whole k range in flight under the epilogue); measured in session 25
K1_GEMM += [{"CONV_K1_GEMM": 1, "K1G_STAGES": st, "K1G_PERSIST": pv} for pv in (1, 2) for st in (3, 4)]
K1_GEMM_BN = K1_GEMM + [{"CONV_K1_GEMM": 1, "K1G_BN": 64, "K1G_STAGES": st} for st in (3, 2, 4)]
#: the NCHW 1x1 GEMM without transposes (CONV_K1_NCHW, conv2d_k1_gemm_nchw, session 24; float16 NCHW stride 1)
#: over its stage counts and (C_out > 64: the launcher takes 64 below) tile heights
K1_NCHW = [{"CONV_K1_NCHW": 1, "K1N_STAGES": st} for st in (3, 2, 4)]
#: and its persistent variants (K1N_PERSIST 1; 2: streaming stores), 3 and 4 stages; measured in session 25
K1_NCHW += [{"CONV_K1_NCHW": 1, "K1N_STAGES": st, "K1N_PERSIST": pv} for pv in (1, 2) for st in (3, 4)]
K1_NCHW_BM = K1_NCHW + [{"CONV_K1_NCHW": 1, "K1N_BM": 64, "K1N_STAGES": st} for st in (3, 2, 4)]
#: the same GEMM for NCHW 1x1 stride 2 after sample_planes (x's sampled pixels into a workspace, session 25), and
#: after sample_planes_rows8 (K1N_SAMPLE 1, 8 rows a warp; not measured yet)
K1_NCHW_S2 = [{"CONV_K1_NCHW": 1, "K1N_STAGES": st, "K1N_PERSIST": pv} for pv in (0, 1) for st in (3, 4)]
K1_NCHW_S2 += [{"CONV_K1_NCHW": 1, "K1N_PERSIST": pv, "K1N_SAMPLE": 1} for pv in (0, 1)]
#: the float32 1x1 SGEMM (CONV_K1_SIMT, conv2d_k1_simt, session 23) over its stage depths and (C_out > 64: the
#: launcher takes 64 below) tile widths: the float32 1x1 cases' candidates beside the tiled direct kernel
K1_SIMT = [{"CONV_K1_SIMT": 1, "K1S_BK": bk} for bk in (8, 16)]
K1_SIMT_BN = K1_SIMT + [{"CONV_K1_SIMT": 1, "K1S_BN": 64, "K1S_BK": bk} for bk in (8, 16)]


def build_cases(quick: bool, dtypes: tuple[str, ...] = ("float32", "float16")) -> list[Case]:
    """The baseline file's cases, plus the candidates swept for each. bfloat16 (no baseline file; PyTorch
    timed in the same run) takes float16's cases and candidates but DW_TC's (float16's alone); where a
    device cannot take bfloat16 on tensor cores (before sm_80), its planner sends those to the CUDA cores."""
    cases: list[Case] = []
    for dtype in dtypes:
        es = 4 if dtype == "float32" else 2
        half = dtype in ("float16", "bfloat16")  # the 16-bit kernels: every one takes both but DW_TC (float16)
        pool_c = [{}, {"POOL_OCC": 2048}, {"POOL_OCC": 2048, "POOL_TILE_H": 32}, {"POOL_SPLIT": 1, "POOL_OCC": 2048},
                  {"POOL_OCC": 0}, {"POOL_OCC": 2048, "POOL_SMEM_KB": 24},
                  {"POOL_TILE_H": 32, "POOL_SMEM_KB": 24}, {"POOL_OCC": 2048, "POOL_TILE_H": 32, "POOL_SMEM_KB": 24}]
        # float16 max pooling: the half2 paths (POOL_H2, default 1) against the float ones
        h2_c = [{"POOL_H2": 0}] if half else []
        # NCHW fixed windows: the register row-strip kernels (POOL_ROWS) against the tiles
        rows_c = [{"POOL_ROWS": 2}, {"POOL_ROWS": 4}, {"POOL_ROWS": 2, "POOL_THREADS": 128},
                  {"POOL_ROWS": 4, "POOL_THREADS": 128}, {"POOL_ROWS": 2, "POOL_THREADS": 512}]
        for layout in ("NCHW", "NHWC"):
            cand = pool_c if layout == "NCHW" else [
                {}, {"POOL_OCC": 0}, {"POOL_OCC": 1536}, {"POOL_TILE_W": 4, "POOL_TILE_H": 4},
                {"POOL_SMEM_KB": 32}, {"POOL_TILE_H": 4, "POOL_TILE_W": 16, "POOL_SMEM_KB": 32},
                {"POOL_TILE_H": 8, "POOL_TILE_W": 8, "POOL_SMEM_KB": 48, "POOL_OCC": 0},
                # the NHWC register walks (POOL_NCOLS) against the tiles
                {"POOL_NCOLS": 2}, {"POOL_NCOLS": 4}, {"POOL_NCOLS": 2, "POOL_THREADS": 128},
                {"POOL_NCOLS": 4, "POOL_THREADS": 128}]
            for kind in ("max", "avg"):
                shape = (64, 64, 112, 112)
                nb = (64 * 64 * 112 * 112 + 64 * 64 * 56 * 56) * es
                # float16 NCHW average: the half2-word path (POOL_H2AVG, default 1) against the float one
                h2a = ([{"POOL_H2AVG": 0}, {"POOL_OCC": 2048, "POOL_H2AVG": 0}, {"POOL_OCC": 0}]
                       if half and layout == "NCHW" and kind == "avg" else [])
                cases.append(Case(f"{kind}pool3x3s2p1 64x64x112x112 {layout.lower()}", "pool2d", dtype, layout, nb, 0,
                                  {"shape": shape, "kind": kind, "k": 3, "s": 2, "p": 1},
                                  cand + (h2_c if kind == "max" else h2a)
                                  + (rows_c if layout == "NCHW" else [])))
        for h in (1024, 4096):
            cases.append(Case(f"maxpool2x2s2 1x1x{h}x{h}", "pool2d", dtype, "NCHW", h * h * es * 1.25, 0,
                              {"shape": (1, 1, h, h), "kind": "max", "k": 2, "s": 2, "p": 0},
                              [{}, {"POOL_SPLIT": 1}, {"POOL_SMEM_KB": 24}, {"POOL_OCC": 2048},
                               {"POOL_SMEM_KB": 16}, {"POOL_OCC": 2048, "POOL_SMEM_KB": 24}, *h2_c, *rows_c]))
        for layout in ("NCHW", "NHWC"):
            cases.append(Case(f"globalavgpool 256x2048x7x7 {layout.lower()}", "adaptive_pool2d", dtype, layout,
                              256 * 2048 * 49 * es, 0, {"shape": (256, 2048, 7, 7)},
                              [{}, {"ADAPT_SMEM_KB": 48}, {"ADAPT_THREADS": 128}, {"ADAPT_VSPLIT": 0},
                               {"ADAPT_THREADS": 512}]
                              # NCHW: gflat buffers per warp (default 3 float16, 2 float32); NHWC:
                              # vsplit loads in flight (default 8; 1 = the previous kernel's loop)
                              + ([{"ADAPT_GFLAT": 0}, {"ADAPT_THREADS": 512, "ADAPT_GFLAT": 0},
                                  {"ADAPT_GSTAGES": 2}, {"ADAPT_GSTAGES": 3}, {"ADAPT_GSTAGES": 4},
                                  {"ADAPT_GSTAGES": 3, "ADAPT_THREADS": 128},
                                  {"ADAPT_GSTAGES": 4, "ADAPT_THREADS": 128},
                                  {"ADAPT_GSTAGES": 2, "ADAPT_THREADS": 128},
                                  {"ADAPT_GSTAGES": 2, "ADAPT_THREADS": 512},
                                  {"ADAPT_GSTAGES": 3, "ADAPT_THREADS": 512}]
                                 if layout == "NCHW" else
                                 # NHWC: gvec (a thread per channel vector, ADAPT_GVEC_U loads in flight)
                                 # against vsplit (ADAPT_GVEC_U 0, its loads in flight ADAPT_VSPLIT_U)
                                 [{"ADAPT_GVEC_U": 4}, {"ADAPT_GVEC_U": 16},
                                  {"ADAPT_GVEC_U": 8, "ADAPT_THREADS": 128}, {"ADAPT_GVEC_U": 16, "ADAPT_THREADS": 128},
                                  {"ADAPT_GVEC_U": 8, "ADAPT_THREADS": 512},
                                  # 2 or 4 lanes per pair, each a slice of the pixels (ADAPT_GVEC_S)
                                  {"ADAPT_GVEC_S": 2}, {"ADAPT_GVEC_S": 4},
                                  {"ADAPT_GVEC_S": 2, "ADAPT_GVEC_U": 4}, {"ADAPT_GVEC_S": 4, "ADAPT_GVEC_U": 4},
                                  {"ADAPT_GVEC_U": 0}, {"ADAPT_GVEC_U": 0, "ADAPT_VSPLIT_U": 4},
                                  {"ADAPT_GVEC_U": 0, "ADAPT_VSPLIT_U": 8, "ADAPT_THREADS": 128},
                                  {"ADAPT_GVEC_U": 0, "ADAPT_VSPLIT_U": 4, "ADAPT_THREADS": 128}])))
        for layout in ("NCHW", "NHWC"):
            x = 256 * 64 * 32 * 32
            # float32: the implicit GEMM on CUDA cores (CONV_IM2COL, conv2d_im2col_simt; session 27)
            im2col_simt = ([{"CONV_IM2COL": 1}, {"CONV_IM2COL": 1, "K1S_BK": 16}, {"CONV_IM2COL": 1, "K1S_BN": 64}]
                           if dtype == "float32" else [])
            dense = ([{}, {"CONV_SIMT_CI": 4}, *im2col_simt] if dtype == "float32" else
                     [{}, {"CONV_TC": 0}, {"CONV_TC": 1}, {"CONV_TC": 2}, {"CONV_TC": 3},
                      {"CONV_TC": 3, "TC_WIDE_STAGES": 3}])
            cases.append(Case(f"conv3x3 64->64 256x32x32 {layout.lower()}", "conv2d", dtype, layout,
                              (2 * x + 64 * 64 * 9) * es, 2 * 256 * 64 * 64 * 9 * 32 * 32,
                              {"shape": (256, 64, 32, 32), "cout": 64, "groups": 1}, dense))
            if half:  # a second shape for the tensor-core kernels: 56 wide, 2 x 32-column tiles
                x56 = 64 * 64 * 56 * 56
                cases.append(Case(f"conv3x3 64->64 64x56x56 {layout.lower()}", "conv2d", dtype, layout,
                                  (2 * x56 + 64 * 64 * 9) * es, 2 * 64 * 64 * 64 * 9 * 56 * 56,
                                  {"shape": (64, 64, 56, 56), "cout": 64, "groups": 1}, dense))
            if half:  # C_in over 64: CUDA cores, or the streamed weights (2, 3, 4 stage buffers)
                # (TC_WIDE_L2PF 128 / 256 measured no faster in session 14) and, 1x1 only, two blocks per SM
                # (stages 4 of 3x3: 4-row tiles, 8 rows' do not fit), 4-row tiles (TC_WIDE_ROWS 4, what the 99 KiB
                # parts get; session 42)
                wide = [{}, *({"CONV_TC": 3, "TC_WIDE_STAGES": st} for st in (2, 3, 4)),
                        *({"CONV_TC": 3, "TC_WIDE_STAGES": st, "TC_WIDE_K1_BLOCKS": 2} for st in (2, 3)),
                        *({"CONV_TC": 3, "TC_WIDE_STAGES": st, "TC_WIDE_ROWS": 4} for st in (2, 3))]
                x32 = 32 * 256 * 32 * 32
                cases.append(Case(f"conv3x3 256->256 32x32x32 {layout.lower()}", "conv2d", dtype, layout,
                                  (2 * x32 + 256 * 256 * 9) * es, 2 * 32 * 256 * 256 * 9 * 32 * 32,
                                  {"shape": (32, 256, 32, 32), "cout": 256, "groups": 1}, wide))
                x56 = 32 * 256 * 56 * 56  # 1x1 256->64, a ResNet bottleneck: the generic kernel or CONV_TC=3
                cases.append(Case(f"conv1x1 256->64 32x56x56 {layout.lower()}", "conv2d", dtype, layout,
                                  (x56 + x56 // 4 + 256 * 64) * es, 2 * 32 * 256 * 64 * 56 * 56,
                                  {"shape": (32, 256, 56, 56), "cout": 64, "groups": 1, "k": 1},
                                  wide + K1_GEMM + (K1_NCHW if layout == "NCHW" else [])))
                # 1x1 64->256 (a bottleneck's expansion): C_in <= 64, which the sm_90 NHWC 1x1 entry also sends to
                # the GEMM; against the session 14 entry's kernels (CONV_K1_GEMM 0)
                x64 = 32 * 64 * 56 * 56
                cases.append(Case(f"conv1x1 64->256 32x56x56 {layout.lower()}", "conv2d", dtype, layout,
                                  (x64 + 4 * x64 + 256 * 64) * es, 2 * 32 * 64 * 256 * 56 * 56,
                                  {"shape": (32, 64, 56, 56), "cout": 256, "groups": 1, "k": 1},
                                  [{"CONV_K1_GEMM": 0, "CONV_TC": 2, "TC_WIDE_STAGES": 3, "TC_WIDE_K1_BLOCKS": 2},
                                   {"CONV_K1_GEMM": 0, "CONV_TC": 3, "TC_WIDE_STAGES": 3, "TC_WIDE_K1_BLOCKS": 2},
                                   {"CONV_K1_GEMM": 0, "CONV_TC": 3, "TC_WIDE_STAGES": 2, "TC_WIDE_K1_BLOCKS": 2},
                                   *K1_GEMM, *({**g, "K1G_BN": 64} for g in K1_GEMM),
                                   *(K1_NCHW_BM if layout == "NCHW" else [])]))
            if dtype == "float32":  # the same 1x1 shapes on the SGEMM (CONV_K1_SIMT) against the tiled direct
                # kernel that serves them without it (the schema default, the first candidate)
                x56 = 32 * 256 * 56 * 56
                cases.append(Case(f"conv1x1 256->64 32x56x56 {layout.lower()}", "conv2d", dtype, layout,
                                  (x56 + x56 // 4 + 256 * 64) * es, 2 * 32 * 256 * 64 * 56 * 56,
                                  {"shape": (32, 256, 56, 56), "cout": 64, "groups": 1, "k": 1}, [{}, *K1_SIMT]))
                x64 = 32 * 64 * 56 * 56
                cases.append(Case(f"conv1x1 64->256 32x56x56 {layout.lower()}", "conv2d", dtype, layout,
                                  (x64 + 4 * x64 + 256 * 64) * es, 2 * 32 * 64 * 256 * 56 * 56,
                                  {"shape": (32, 64, 56, 56), "cout": 256, "groups": 1, "k": 1}, [{}, *K1_SIMT_BN]))
            # the register-tiled direct kernel (session 19) against the one-thread-per-output kernel
            # (GRP_TILED 0) and over its tile shapes
            grp = [{}, {"GRP_PIX": 2}, {"CONV_THREADS": 128}, {"CONV_THREADS": 128, "GRP_PIX": 2},
                   {"GRP_TILE_W": 16}, {"GRP_PIX": 2, "GRP_TILE_W": 16},
                   {"CONV_THREADS": 128, "GRP_PIX": 2, "GRP_TILE_W": 16}, {"GRP_CIC": 4},
                   # registers capped for more resident threads (GRP_OCC)
                   {"GRP_OCC": 1024}, {"GRP_OCC": 1024, "GRP_PIX": 2}, {"GRP_OCC": 1536, "GRP_PIX": 2},
                   {"CONV_THREADS": 128, "GRP_PIX": 2, "GRP_OCC": 1024}]
            if dtype == "float32" and layout == "NCHW":  # one thread per output, for the before / after
                grp.append({"GRP_TILED": 0})
            if half:  # on tensor cores (GRP_TC), rows per tile
                grp += [{"GRP_TC": 1}, {"GRP_TC": 1, "GRP_TC_ROWS": 8}, {"GRP_TC": 1, "GRP_TC_ROWS": 32}]
            cases.append(Case(f"conv3x3 g8 256x64x32x32 {layout.lower()}", "conv2d", dtype, layout, 2 * x * es,
                              2 * 256 * 64 * 8 * 9 * 32 * 32, {"shape": (256, 64, 32, 32), "cout": 64, "groups": 8},
                              grp))
            # ResNeXt-50's first stage (32 groups of 4 channels; the launcher narrows GRP_COT to 4)
            xg32 = 64 * 128 * 56 * 56
            cases.append(Case(f"conv3x3 g32 64x128x56x56 {layout.lower()}", "conv2d", dtype, layout, 2 * xg32 * es,
                              2 * 64 * 128 * 4 * 9 * 56 * 56, {"shape": (64, 128, 56, 56), "cout": 128, "groups": 32},
                              [{}, {"GRP_PIX": 2}, {"CONV_THREADS": 128}, {"CONV_THREADS": 128, "GRP_PIX": 2},
                               {"GRP_TILE_W": 64}, {"GRP_OCC": 1024}, {"GRP_OCC": 1024, "GRP_PIX": 2}]
                              + ([{"GRP_TC": 1}, {"GRP_TC": 1, "GRP_TC_ROWS": 8}] if half else [])))
            # strided dense convs, which the tiled direct kernel took over from one thread per output
            # (session 19; no PyTorch baseline file has them): a ResNet's 3x3/2 downsampling and its stem
            strided = [{}, {"GRP_PIX": 2}, {"CONV_THREADS": 128}, {"GRP_OCC": 1024}, {"GRP_COT": 4}]
            if half:  # 3x3/2 NHWC on tensor cores by default since session 21: the CUDA cores,
                # and L2 fetching the rest of each pixel's channels
                # 4-row tiles: what sm_80 gets, in one stage what the 99 KiB parts get (session 42)
                strided += [{"CONV_TC": 0}, {"TC_WIDE_L2PF": 128}, {"TC_WIDE_L2PF": 256},
                            {"TC_WIDE_ROWS": 4}, {"TC_WIDE_ROWS": 4, "TC_WIDE_STAGES": 1}]
            xs2 = 64 * 64 * 56 * 56
            cases.append(Case(f"conv3x3 s2 64->128 64x56x56 {layout.lower()}", "conv2d", dtype, layout,
                              (xs2 + xs2 // 2 + 128 * 64 * 9) * es, 2 * 64 * 128 * 64 * 9 * 28 * 28,
                              {"shape": (64, 64, 56, 56), "cout": 128, "groups": 1, "stride": 2},
                              strided + im2col_simt))
            # a ResNet-50 projection shortcut, 1x1 stride 2 256->512 (session 21)
            xp = 32 * 256 * 56 * 56
            cases.append(Case(f"conv1x1 s2 256->512 32x56x56 {layout.lower()}", "conv2d", dtype, layout,
                              (xp + xp // 2 + 512 * 256) * es, 2 * 32 * 512 * 256 * 28 * 28,
                              {"shape": (32, 256, 56, 56), "cout": 512, "groups": 1, "k": 1, "stride": 2},
                              strided + (K1_GEMM_BN + (K1_NCHW_S2 if layout == "NCHW" else [])
                                         if half else K1_SIMT_BN)))
            xst = 32 * 3 * 224 * 224
            cases.append(Case(f"conv7x7 s2 3->64 32x224x224 {layout.lower()}", "conv2d", dtype, layout,
                              (xst + 32 * 64 * 112 * 112 + 64 * 3 * 49) * es, 2 * 32 * 64 * 3 * 49 * 112 * 112,
                              {"shape": (32, 3, 224, 224), "cout": 64, "groups": 1, "k": 7, "stride": 2},
                              strided + ([{"CONV_IM2COL": 1}] if half else im2col_simt)))
            dwc = [{}, {"DW_SMEM_KB": 16}, {"DW_SMEM_KB": 48}, {"CONV_OCC": 2048}, {"CONV_OCC": 0}]
            if half:  # NCHW output pairs from half2 words (DW_H2, default 1) against the float path
                dwc += [{"DW_H2": 0}, {"DW_H2": 0, "DW_SMEM_KB": 16}, {"DW_SMEM_KB": 16, "CONV_OCC": 0}]
                if dtype == "float16":
                    dwc += [{"DW_TC": 1}, {"DW_TC": 2}]  # on tensor cores (session 20)
            if layout == "NHWC":
                dwc = [{}, {"CONV_OCC": 0}, {"CONV_OCC": 1536}, {"DW_TILE_W": 16, "DW_TILE_H": 8, "DW_SMEM_KB": 48},
                       {"DW_TILE_W": 4, "DW_TILE_H": 4}, {"DW_TILE_H": 16, "DW_SMEM_KB": 48}]
                if half:  # 4 channels per thread, weights in registers (DW_HALF4, default 1) or 8
                    dwc += [{"DW_HALF4": 0}, {"DW_HALF4": 0, "CONV_OCC": 0},
                            {"CONV_OCC": 0, "DW_TILE_W": 16, "DW_TILE_H": 8, "DW_SMEM_KB": 48}]
            # the register kernels (no shared memory) against the tiles
            dwc += ([{"DW_ROWS": 2}, {"DW_ROWS": 4}, {"DW_ROWS": 2, "CONV_THREADS": 128},
                     {"DW_ROWS": 4, "CONV_THREADS": 128}]
                    # halos by shuffles (session 23)
                    + [{"DW_ROWS": r, "DW_SHFL": 1, "CONV_THREADS": t} for r in (2, 4) for t in (128, 256)]
                    # ... on a persistent grid, the next item's rows loaded under the current one's FMAs
                    + [{"DW_ROWS": r, "DW_SHFL": 2, "CONV_THREADS": t, "DW_SHFL_OCC": o}
                       for r in (2, 4) for t in (128, 256) for o in (512, 640, 1024)]
                    if layout == "NCHW" else
                    [{"DW_COLS": 4}, {"DW_COLS": 8}, {"DW_COLS": 4, "CONV_THREADS": 128},
                     {"DW_COLS": 8, "CONV_THREADS": 128}, {"DW_COLS": 2}, {"DW_COLS": 2, "CONV_THREADS": 128}]
                    # 2-D register blocks (session 6)
                    + [{"DW_COLS": m, "DW_CROWS": r, "CONV_THREADS": t, "DW_PREFETCH": f}
                       for m in (2, 4) for r in (4, 8) for t in (128, 256) for f in (0, 1)]
                    # the pipelined shared-memory kernel (cp.async, persistent blocks), rows per tile
                    + [{"DW_PIPE": r, "DW_PIPE_COLS": m} for r in (4, 8, 16) for m in (1, 2)])
            cases.append(Case(f"dwconv3x3 256x64x32x32 {layout.lower()}", "conv2d", dtype, layout, 2 * x * es,
                              2 * 256 * 64 * 9 * 32 * 32, {"shape": (256, 64, 32, 32), "cout": 64, "groups": 64},
                              dwc))
            if half and layout == "NCHW":  # MobileNetV2's 112 x 112 depthwise (session 20)
                x112 = 32 * 96 * 112 * 112
                cases.append(Case("dwconv3x3 32x96x112x112 nchw", "conv2d", dtype, layout, 2 * x112 * es,
                                  2 * x112 * 9, {"shape": (32, 96, 112, 112), "cout": 96, "groups": 96},
                                  [{}, *([{"DW_TC": 1}, {"DW_TC": 2}] if dtype == "float16" else []),
                                   {"DW_ROWS": 4, "CONV_THREADS": 128},
                                   {"DW_ROWS": 4, "DW_SHFL": 1, "CONV_THREADS": 128},
                                   {"DW_ROWS": 2, "DW_SHFL": 1, "CONV_THREADS": 128},
                                   {"DW_ROWS": 4, "DW_SHFL": 2, "CONV_THREADS": 128},
                                   {"DW_ROWS": 4, "DW_SHFL": 2, "CONV_THREADS": 256, "DW_SHFL_OCC": 1024}]))
        bnc = [{}, {"BN_L2_HINT": 0}, {"BN_THREADS": 512, "BN_BLOCKS_PER_SM": 2}, {"BN_UNROLL": 8},
               {"BN_UNROLL": 2, "BN_BLOCKS_PER_SM": 8}, {"BN_BLOCKS_PER_SM": 2}, {"BN_BLOCKS_PER_SM": 8}]
        # inference only: the flat persistent kernel's occupancy / unroll, and the old kernel
        bn_infer = [{"BN_FLAT": 0}, {"BN_FLAT": 0, "BN_UNROLL": 8}, {"BN_INFER_OCC": 2048},
                    {"BN_INFER_OCC": 1024}, {"BN_UNROLL": 8, "BN_L2_HINT": 0}, {"BN_THREADS": 512},
                    {"BN_UNROLL": 2, "BN_INFER_OCC": 2048},
                    # NHWC: constants in registers (BN_FLAT_REG, default 1) or the shared-memory table
                    {"BN_FLAT_REG": 0}, {"BN_FLAT_REG": 0, "BN_INFER_OCC": 2048},
                    {"BN_UNROLL": 2, "BN_INFER_OCC": 1536}, {"BN_UNROLL": 8, "BN_THREADS": 512},
                    # a block per tile instead of one persistent wave (session 6)
                    *({"BN_INFER_TILES": 1, "BN_THREADS": t, "BN_UNROLL": u} for t in (256, 512) for u in (2, 4, 8)),
                    {"BN_INFER_TILES": 1, "BN_THREADS": 512, "BN_L2_HINT": 0},
                    # the first tile's loads before the channel constants (session 15), with the served shapes
                    {"BN_INFER_EARLY": 1}, {"BN_INFER_EARLY": 1, "BN_THREADS": 512},
                    *({"BN_INFER_EARLY": 1, "BN_INFER_TILES": 1, "BN_THREADS": 512, "BN_UNROLL": u, "BN_L2_HINT": h}
                      for u in (2, 4) for h in (0, 1))]
        # training only: grids against the kernels' real residency (session 7: the statistics
        # kernel's 48 registers fit 10 blocks of 128 per SM, so 16 per SM ran 1.6 waves)
        bn_train = [{"BN_THREADS": t, "BN_BLOCKS_PER_SM": b, "BN_UNROLL": u, "BN_L2_HINT": h}
                    for t, b in ((128, 8), (128, 32), (256, 4), (256, 32)) for u in (2, 4) for h in (0, 1)]
        # the statistics' shifted-sum chunks (BN_STATS_SUMS, session 18; 0 = a merge per batch), and
        # more resident blocks now that the statistics pass issues fewer instructions
        bn_train += [{"BN_STATS_SUMS": s} for s in (0, 32, 128)]
        bn_train += [{"BN_THREADS": t, "BN_BLOCKS_PER_SM": b, "BN_UNROLL": u}
                     for t, b in ((256, 8), (512, 2), (512, 4)) for u in (2, 4)]
        # NCHW training without the finalize launch (session 7)
        bn_merge = [{"BN_APPLY_MERGE": 1, **q} for q in (
            {}, {"BN_THREADS": 128, "BN_BLOCKS_PER_SM": 8, "BN_UNROLL": 2}, {"BN_THREADS": 256, "BN_BLOCKS_PER_SM": 4,
                                                                           "BN_UNROLL": 2},
            {"BN_THREADS": 128, "BN_BLOCKS_PER_SM": 8, "BN_UNROLL": 4}, {"BN_THREADS": 128, "BN_BLOCKS_PER_SM": 16,
                                                                           "BN_UNROLL": 4, "BN_L2_HINT": 0},
            {"BN_THREADS": 128, "BN_BLOCKS_PER_SM": 8, "BN_UNROLL": 2, "BN_L2_HINT": 0},
            {"BN_THREADS": 256, "BN_UNROLL": 2, "BN_BLOCKS_PER_SM": 8})]
        # NHWC training in one cooperative launch (batch_norm_train_fused, session 28): threads, vectors in registers
        bn_fused = [{"BN_FUSED": 1, "BN_FUSED_THREADS": t, "BN_FUSED_REGS": r}
                    for t, r in ((512, 8), (512, 12), (256, 4), (256, 12), (256, 16))]
        # every block merging every channel, one grid barrier (BN_FUSED_FIN, session 28)
        bn_fused += [{**q, "BN_FUSED_FIN": 1} for q in bn_fused]
        for layout in ("NCHW", "NHWC"):
            for mode in ("train", "infer"):
                cases.append(Case(f"bn {mode} fwd 256x64x32x32 {layout.lower()}", "batch_norm", dtype, layout,
                                  2 * 256 * 64 * 32 * 32 * es, 0, {"shape": (256, 64, 32, 32), "mode": mode},
                                  (bnc + bn_train + (bn_merge if layout == "NCHW" else bn_fused) if mode == "train"
                                   else bnc + bn_infer)))
    if quick:
        for c in cases:
            c.candidates = c.candidates[:1]
    return cases


def compile_keys(cases: list[Case], sweep: bool, served: list[dict[str, int]] | None = None,
                 default: bool = True) -> list[tuple[str, tuple[tuple[str, int], ...]]]:
    """Every (file, defines) build of the cases' own kernel family they will use: the candidates, and the
    parameters the tables serve (``served``, one per case) with the schema default beside them, so that a
    fresh machine builds them all in parallel up front instead of one at a time as each case starts."""
    keys = []
    for i, c in enumerate(cases):
        sets = list(c.candidates if sweep else c.candidates[:1])
        if served is not None:
            sets += [served[i]] + ([{}] if default else [])
        for params in sets:
            keys.append((CudaBackend.family_file(c.family),
                         CudaBackend.compile_defines(c.family, np.dtype(c.dtype), c.layout, params)))
    return list(dict.fromkeys(keys))


def table_key(case: Case) -> dict[str, Any]:
    """The tuning-table key fields of a case (sizes bucketed to powers of two)."""
    def b(v: int) -> int:
        return 1 << max(0, (int(v) - 1).bit_length())

    shape = case.key["shape"]
    n, c, h, w = shape
    key: dict[str, Any] = {"dtype": case.dtype, "layout": case.layout}
    if case.family == "pool2d":
        k, s = case.key["k"], case.key["s"]
        key.update(kind=case.key["kind"], kernel=f"{k}x{k}", stride=f"{s}x{s}", n=b(n), c=b(c), h=b(h), w=b(w))
    elif case.family == "adaptive_pool2d":
        key.update(kind="avg", out_h=1, out_w=1, c=b(c), h=b(h), w=b(w))
    elif case.family == "conv2d":
        g, kk = case.key["groups"], case.key.get("k", 3)
        st = case.key.get("stride", 1)
        key.update(kernel=f"{kk}x{kk}", stride=f"{st}x{st}",
                   groups="dense" if g == 1 else ("depthwise" if g == c else "grouped"),
                   c=b(c), k=b(case.key["cout"]), h=b(h), w=b(w))
    else:
        key.update(mode=case.key["mode"], c=b(c), h=b(h), w=b(w))
    return key


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the table last."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sweep", action="store_true", help="time every tuning candidate of each case")
    ap.add_argument("--quick", action="store_true", help="default parameters only")
    ap.add_argument("--only", default="", help="run cases whose name contains this text (alternatives split by |)")
    ap.add_argument("--skip", default="",
                    help="leave out cases whose 'name dtype' contains this text (alternatives split by |)")
    ap.add_argument("--dtype", default="",
                    help="run only this dtype's cases (float32 or float16; bfloat16 runs only when named)")
    ap.add_argument("--out", default="", help="folder for cuda_ops.json and tuning_sm.json")
    ap.add_argument("--no-torch-call", action="store_true", help="skip the per-call (baseline method) timings")
    ap.add_argument("--progress", action="store_true",
                    help="print each timing step of a case as it starts (to see where a run stalls)")
    ap.add_argument("--no-default", action="store_true",
                    help="do not time the schema default beside the served parameters (its column reads nan)")
    ap.add_argument("--profile", action="store_true",
                    help="only run each case's hal call 3 times (the parameters the tables serve), for ncu")
    ap.add_argument("--params", default="",
                    help="with --profile: JSON parameters over the served ones, e.g. '{\"DW_ROWS\": 4}'")
    args = ap.parse_args(argv)

    import torch
    import torch.nn.functional as F

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    probe = CudaBackend.probe()
    if not probe.available:
        print(probe.reason)
        return 2
    info = probe.devices[0]
    be = CudaBackend(info)
    served_dev = hal_device("cuda:0")  # its tuning tables say which parameters the ops serve
    dtypes = ("bfloat16",) if args.dtype == "bfloat16" else ("float32", "float16")
    cases = [c for c in build_cases(args.quick, dtypes)
             if any(o in c.name for o in args.only.split("|")) and args.dtype in ("", c.dtype)
             and not (args.skip and any(o in f"{c.name} {c.dtype}" for o in args.skip.split("|")))]
    t0 = time.time()
    served_params = [dict(served_dev.tuner.resolve_spec(case_spec(c)).params) for c in cases]
    loaded = be.build_all(compile_keys(cases, args.sweep, served_params, not args.no_default))
    print(f"built {loaded} modules in {time.time() - t0:.1f} s", flush=True)

    if args.profile:
        for case in cases:
            hal, _, _, spec = SETUPS[case.family](torch, F, be, case)
            params = {**served_dev.tuner.resolve_spec(spec).params, **json.loads(args.params or "{}")}
            for i in range(3):
                hal(i, params)
            be.synchronize()
            print(f"profiled {case.name} {case.dtype}", flush=True)
        return 0
    copy = {dt: copy_bandwidth(torch, dt) for dt in dict.fromkeys(("float32", *dtypes))}  # float32: the targets' copy
    copies = ", ".join(f"{dt} {v[1]:.0f} GB/s" for dt, v in copy.items())
    print(f"copy bandwidth: {copies}", flush=True)
    rows: list[dict[str, Any]] = []
    size_copy: dict[float, tuple[float, float]] = {}
    t_run = time.time()

    def progress(case: Case, what: str) -> None:
        if args.progress:
            print(f"    [{time.time() - t_run:7.1f} s] {case.name} {case.dtype}: {what}", flush=True)

    for case in cases:
        try:
            hal, ref, check, spec = SETUPS[case.family](torch, F, be, case)
        except Exception as exc:
            print(f"{case.name} {case.dtype}: setup failed: {type(exc).__name__}: {exc}", flush=True)
            continue
        # what hal's ops run for this spec on this device (tables, fallback chain), then the
        # schema default ({}), then (--sweep) the case's other candidates
        resolved = served_dev.tuner.resolve_spec(spec)
        served = dict(resolved.params)
        default = [{}] if served and not args.no_default else []
        cands = [served] + default + (case.candidates[1:] if args.sweep else [])
        timings = []
        for params in cands:
            q = host_us = float("nan")
            try:
                ok, detail = check(params)
                ms = time_b2b(torch, lambda i, p=params, h=hal: h(i, p)) if ok else float("nan")
                if ok and args.sweep:  # GPU time: b2b cannot rank candidates whose host time exceeds it
                    q, host_us = time_queued(torch, lambda i, p=params, h=hal: h(i, p))
            except Exception as exc:
                ok, detail, ms = False, f"{type(exc).__name__}: {exc}", float("nan")
            timings.append({"params": params, "ok": ok, "detail": detail, "b2b_ms": ms, "queued_ms": q,
                            "host_us": host_us})
            print(f"  {case.name} {case.dtype} {params}: {'ok' if ok else 'FAIL ' + detail} {ms:.4f} ms"
                  + (f" (queued {q:.4f} ms)" if args.sweep else ""), flush=True)
        good = [t for t in timings if t["ok"] and not math.isnan(t["b2b_ms"])]
        # the table reports what the ops serve; --sweep reports (and suggests) the fastest by
        # queued GPU time (b2b where that is missing)
        rank = lambda t: t["b2b_ms"] if math.isnan(t["queued_ms"]) else t["queued_ms"]  # noqa: E731
        best = (min(good, key=rank) if args.sweep else
                (timings[0] if timings[0] in good else None)) if good else None
        progress(case, "PyTorch b2b")
        try:  # a PyTorch op that does not run this case (a dtype it lacks) leaves NaN, not the run's end
            torch_b2b = time_b2b(torch, ref)
            progress(case, "PyTorch queued")
            torch_q, torch_host = time_queued(torch, ref)
        except RuntimeError as exc:
            print(f"  {case.name} {case.dtype}: PyTorch failed: {exc}", flush=True)
            torch_b2b = torch_q = torch_host = float("nan")
            ref = None
        if case.nbytes not in size_copy:
            progress(case, "same-size copy")
            size_copy[case.nbytes] = same_size_copy_ms(torch, case.nbytes)
        row: dict[str, Any] = {
            "case": case.name, "dtype": case.dtype, "family": case.family, "layout": case.layout,
            "bytes": case.nbytes, "flops": case.flops, "candidates": timings, "torch_b2b_ms": torch_b2b,
            "torch_queued_ms": torch_q, "torch_host_us": torch_host,
            "copy_GBps": copy[case.dtype][1], "key": table_key(case), "level": resolved.level,
            "same_size_copy_ms": size_copy[case.nbytes][0],
            "same_size_copy_queued_ms": size_copy[case.nbytes][1],
            "default_b2b_ms": (float("nan") if served and args.no_default else
                               timings[1]["b2b_ms"] if served and len(timings) > 1 else timings[0]["b2b_ms"]),
        }
        if best is not None:
            row["params"] = best["params"]
            row["hal_b2b_ms"] = best["b2b_ms"]
            if math.isnan(best["queued_ms"]):  # without --sweep only the reported set is timed queued
                progress(case, "hal queued")
                best["queued_ms"], best["host_us"] = time_queued(torch, lambda i, p=best["params"], h=hal: h(i, p))
            row["hal_queued_ms"], row["hal_host_us"] = best["queued_ms"], best["host_us"]
            progress(case, "hal graph")
            row["hal_graph_ms"] = time_graph(torch, be.capture, lambda i, p=best["params"], h=hal: h(i, p))
            progress(case, "PyTorch graph")
            row["torch_graph_ms"] = time_graph(torch, torch_capture(torch), ref) if ref else float("nan")
            if not args.no_torch_call:
                progress(case, "hal per call")
                row["hal_call_ms"] = time_call(torch, lambda i, p=best["params"], h=hal: h(i, p))
        if not args.no_torch_call and ref is not None:
            progress(case, "PyTorch per call")
            row["torch_call_ms"] = time_call(torch, ref)
        progress(case, "done")
        rows.append(row)
        torch.cuda.empty_cache()

    stamp = datetime.date.today().isoformat()
    entries = []
    for r in rows:
        if "params" in r:
            full = {**CudaBackend.schemas()[r["family"]].defaults(), **r["params"]}
            entries.append({"level": "arch", "match": info.arch, "kernel": r["family"], "key": r["key"],
                            "params": full,
                            "provenance": f"measured on {info.name}, {stamp}, benchmarks/cuda_ops.py"})
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "cuda_ops.json").write_text(json.dumps({"device": info.name, "arch": info.arch, "date": stamp,
                                                       "copy": copy, "rows": rows}, indent=1))
        (out / "tuning_sm.json").write_text(json.dumps(entries, indent=1))

    print()
    print(f"device {info.name} ({info.arch}); copy {copies}; b2b = median of 15 x 20 back-to-back calls")
    what = "fastest swept" if args.sweep else "served by the tables (level)"
    print(f"hal ms: parameters {what}; dflt ms: the schema default; %szcp: a copy of the case's bytes over hal's "
          "time (same method: the ceiling at that size, launch gaps included)")
    hdr = (f"{'case':42s} {'dtype':7s} {'hal ms':>8s} {'GB/s':>7s} {'TF/s':>6s} {'%copy':>6s} {'torch ms':>8s} "
           f"{'x torch':>7s} {'hal call':>8s} {'tch call':>8s} {'dflt ms':>8s} {'%szcp':>6s} level")
    print(hdr)
    for r in rows:
        ms = r.get("hal_b2b_ms", float("nan"))
        gbs = r["bytes"] / ms / 1e6 if ms == ms else float("nan")
        tfs = r["flops"] / ms / 1e9 if ms == ms else float("nan")
        print(f"{r['case']:42s} {r['dtype']:7s} {ms:8.4f} {gbs:7.0f} {tfs:6.1f} {100 * gbs / r['copy_GBps']:6.1f} "
              f"{r['torch_b2b_ms']:8.4f} {r['torch_b2b_ms'] / ms:7.2f} {r.get('hal_call_ms', float('nan')):8.4f} "
              f"{r.get('torch_call_ms', float('nan')):8.4f} {r['default_b2b_ms']:8.4f} "
              f"{100 * r['same_size_copy_ms'] / ms:6.1f} {r['level']}")
    print()
    print("queued: the same calls enqueued behind a sleeping kernel (GPU time per call without host waits; "
          "host µs: the launch path's enqueue time per call)")
    print(f"{'case':42s} {'dtype':7s} {'hal b2b':>8s} {'hal q':>8s} {'%copy q':>7s} {'host µs':>7s} "
          f"{'tch b2b':>8s} {'tch q':>8s} {'tch µs':>7s} {'x tch q':>7s} {'%szcp q':>7s}")
    for r in rows:
        q = r.get("hal_queued_ms", float("nan"))
        print(f"{r['case']:42s} {r['dtype']:7s} {r.get('hal_b2b_ms', float('nan')):8.4f} {q:8.4f} "
              f"{100 * r['bytes'] / q / 1e6 / r['copy_GBps']:7.1f} {r.get('hal_host_us', float('nan')):7.1f} "
              f"{r['torch_b2b_ms']:8.4f} {r['torch_queued_ms']:8.4f} {r['torch_host_us']:7.1f} "
              f"{r['torch_queued_ms'] / q:7.2f} {100 * r['same_size_copy_queued_ms'] / q:7.1f}")
    print()
    print("graph: 20 calls captured into one CUDA graph (hal: the backend's capture, as hal.capture; "
          "PyTorch: torch.cuda.graph), each replay queued behind a sleeping kernel; ms per call")
    print(f"{'case':42s} {'dtype':7s} {'hal q':>8s} {'hal g':>8s} {'%copy g':>7s} {'tch g':>8s} {'x tch g':>7s}")
    for r in rows:
        g = r.get("hal_graph_ms", float("nan"))
        print(f"{r['case']:42s} {r['dtype']:7s} {r.get('hal_queued_ms', float('nan')):8.4f} {g:8.4f} "
              f"{100 * r['bytes'] / g / 1e6 / r['copy_GBps']:7.1f} {r.get('torch_graph_ms', float('nan')):8.4f} "
              f"{r.get('torch_graph_ms', float('nan')) / g:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
