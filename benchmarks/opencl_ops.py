"""Benchmark of the OpenCL backend's kernels, per device, against the copy roofline,
hal's CUDA backend and PyTorch on the same hardware, in the same run.

Method
------
* Cases and byte counts follow ../shared/baselines/h200_pytorch_baseline.py: max/avg pool
  3x3/2 pad 1 on 64x64x112x112 (NCHW and NHWC), max pool 2x2/2 on 1x1x4096x4096, global
  average pool on 256x2048x7x7, BatchNorm inference and training forward on 256x64x32x32,
  conv 3x3 64->64 and depthwise 3x3 on 256x64x32x32 (pad 1). Bytes = each input read once
  + each output written once (conv: 2 * x + weights; global pool: x); conv FLOPs = 2 * MACs.
  On CPU devices (PoCL) and with --quick the batch is cut so one input is about 16 MB.
* hal's launcher is called directly with a spec (no op-layer overhead) and the parameters
  the device's tuning tables serve (the level is printed). Before timing, the output of
  the same launcher at batch 2 is checked against the float64 oracle.
* Timing: ``OpenCLBackend.time_launches`` — OpenCL profiling events on a queue with
  PROFILING_ENABLE, from the first command's start to the last one's end (BatchNorm's
  three kernels together), 3 warm-ups, median of --repeats. The same events on PoCL
  (its timestamps are host clock readings around each command). "ms" is one call as a
  user's loop runs it: the calls are enqueued one after another, and a multi-kernel op's
  figure includes any gap in which the device waited for the host (Python) to enqueue its
  next kernel (fp16 NHWC BatchNorm training measured 0.053-0.073 ms on the H200 across runs
  under NVIDIA's OpenCL, from those gaps).
* "queued": the same calls timed with ``time_launches(queued=True)`` (what ``hal tune``
  and ``hal bench`` use): the timed calls are enqueued behind a marker that waits on an
  OpenCL user event, set complete once the last call has enqueued its kernels, so the
  device runs the op's kernels (and the calls) back to back and the host's enqueue time
  is in no figure; each figure is still one call's first kernel start to its last end (the
  gate's marker is not timed). Median of --repeats, 3 warm-ups, "q copy%" against the
  same copy figure. "b2b q": per call, batches of --b2b calls timed as one (1 warm-up,
  ``median_ms_b2b(queued=True)``, max(5, repeats / 2) batches): the gaps between the calls'
  kernels counted too. Where the backend cannot gate (no user events, say) it warns and
  times without the gate; the row's "queued_note" (a "*" after the figure) says why.
* --rotate MB: each case's calls cycle through copies of its input and output, MB in all
  (at least one copy), so that a call does not find its input in the L2 that the previous
  call left (the H200's is 50 MB; float16 BatchNorm's x is 33.5 MB). Without it every call
  runs on the same buffers, as every table before session 32 was measured. The CUDA and
  PyTorch columns never rotate.
* Copy roofline: ``enqueue_copy`` of a 256 MiB buffer (64 MiB on a CPU) timed the same
  way in the same run; GB/s counts reads + writes. "copy%" = achieved GB/s / copy GB/s.
* "cuda x": hal's CUDA backend on the same GPU (only for NVIDIA OpenCL devices when the
  cuda backend is available), the same spec, timed with its own ``time_launches`` around
  batches of 20 back-to-back calls (``median_ms_b2b``; cuda_ops.py's method). CUDA events
  around a single call also count the host's launch time whenever the GPU waits for it:
  for 20-µs kernels that had doubled the CUDA time (session 9: fp16 global pooling 0.032 ms
  here against 0.0169 ms in cuda_ops.py in the same call);
  "torch x": PyTorch on the same hardware (CUDA events on NVIDIA, host clock on the CPU
  for PoCL), cuDNN TF32 off. Both are time ratios hal-opencl / other: above 1 = slower.
  PyTorch may be absent: the column then says why.
* ``--dtypes`` may name int8 and uint8: the pooling cases then run the quantized kernels
  (``qpool2d.cl``; zero point 3 for average pooling), checked exactly against
  ``reference.quantized_pool2d_from_spec``; one byte per element in the traffic. The CUDA
  column times the CUDA backend's ``quant_pool2d.cu`` (one thread per output, not tuned);
  PyTorch's quantized pooling runs on the CPU only, so its column is empty for them.
* --launches times each launch of the served set alone (profiling events, median start
  and duration from the call's first start): where a multi-kernel op's time goes; then
  again with the calls gated ("queued launches", the row's "launches_queued"): the gaps
  the host made are gone from those, what is left between kernels is the device's own.
* --sweep times a few parameter sets per case (each validated against the schema and
  the device; queued time, as the tuner) and writes the fastest, when it beats the served
  set's queued time by 5 %, as suggested
  tuning-table entries with a "measured on ..." provenance to OUT/opencl_tuning.json;
  every candidate's time is in OUT/opencl_ops.json (each row's "sweep"; a candidate the
  schema rejects for this device, or one the launcher would have to shrink, is listed with
  "ms": null and why it was "skipped"; so is one whose launch, by the backend's
  ``launch_signature``, is that of a set already timed: a parameter the case ignores).
  --candidates replaces the built-in sets with a JSON list or a named one ("qpack": the
  packed int8/uint8 kernels, QROWS16=1 and 2 for NCHW and QVEC16=2, 3 and 4 for NHWC, at
  three work-groups).

    python benchmarks/opencl_ops.py [--device opencl:0] [--quick] [--sweep] [--repeats 20]
                                    [--only SUBSTR] [--b2b 20] [--out DIR] [--dtypes int8,uint8]
                                    [--candidates qpack|JSON]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

import hal
from hal import reference as R
from hal import spec as S
from hal.dtypes import is_bfloat16
from hal.tuning.table import kernel_key


@dataclass(frozen=True)
class Case:
    """One op at one shape (full size = the H200 baseline's)."""

    name: str
    family: str  # pool2d, adaptive_pool2d, conv2d, batch_norm
    shape: tuple[int, int, int, int]
    layouts: tuple[str, ...]
    kwargs: dict[str, Any]


CASES: tuple[Case, ...] = (
    Case("maxpool3x3s2p1", "pool2d", (64, 64, 112, 112), ("NCHW", "NHWC"), {"kind": "max", "k": 3, "s": 2, "p": 1}),
    Case("avgpool3x3s2p1", "pool2d", (64, 64, 112, 112), ("NCHW", "NHWC"), {"kind": "avg", "k": 3, "s": 2, "p": 1}),
    Case("maxpool2x2s2 4096^2", "pool2d", (1, 1, 4096, 4096), ("NCHW",), {"kind": "max", "k": 2, "s": 2, "p": 0}),
    Case("globalavgpool", "adaptive_pool2d", (256, 2048, 7, 7), ("NCHW", "NHWC"), {"kind": "avg", "out": 1}),
    Case("bn infer", "batch_norm", (256, 64, 32, 32), ("NCHW", "NHWC"), {"training": False}),
    Case("bn train fwd", "batch_norm", (256, 64, 32, 32), ("NCHW", "NHWC"), {"training": True}),
    Case("conv3x3 64->64", "conv2d", (256, 64, 32, 32), ("NCHW", "NHWC"), {"co": 64, "groups": 1}),
    Case("dwconv3x3", "conv2d", (256, 64, 32, 32), ("NCHW", "NHWC"), {"co": 64, "groups": 64}),
)

#: parameter sets --sweep tries per family (filtered by the schema and the device).
SWEEP: dict[str, list[dict[str, int]]] = {
    "pool2d": [{"WG": wg, "VEC": v, "INTERIOR": i} for wg in (128, 256) for v in (4, 8) for i in (0, 1)]
    + [{"WG": 256, "VEC": 1, "LOCAL_TILE": 1}]
    + [{"WG": wg, "LOCAL_TILE": 2, "BAND_KB": kb} for wg in (128, 256) for kb in (8, 16, 32)]
    # aligned row strips (NCHW fixed windows; elsewhere they fall back to the bands)
    + [{"WG": wg, "VEC": v, "LOCAL_TILE": 3, "STRIP_ROWS": r} for wg in (128, 256) for v in (4, 8) for r in (2, 4)]
    # float16 as raw 16-bit words (a no-op for float32)
    + [{"WG": wg, "VEC": v, "LOCAL_TILE": t, "STRIP_ROWS": 2, "HALF_RAW": 1}
       for wg in (128, 256) for v in (4, 8) for t in (0, 3)]
    # int8/uint8 NHWC, 16 channels per work-item (qpool2d.cl QPOOL_VEC16; for other dtypes and
    # layouts a no-op: the default path at that work-group)
    + [{"WG": wg, "QVEC16": 1} for wg in (64, 128, 256, 512)]
    # int8/uint8 on packed bytes (qpool2d_pack.cl): QROWS16 serves NCHW 2x2 / 3x3 stride 2,
    # QVEC16=2 NHWC; each set names both, so neither layout times a no-op (float: the default path)
    + [{"WG": wg, "QROWS16": 1, "QVEC16": 2, "STRIP_ROWS": r} for wg in (128, 256) for r in (2, 4)],
    "adaptive_pool2d": [{"WG": wg, "VEC": v, "MODE": m} for wg in (64, 256) for v in (1, 4) for m in (1, 2)]
    # flat (3), and the pipelined global kernels (4: NCHW 1x1 outputs of small planes, else as 0)
    + [{"WG": 128, "VEC": 8, "MODE": 3, "HALF_RAW": 1}, {"WG": 256, "VEC": 8, "MODE": 0},
       {"WG": 64, "VEC": 8, "MODE": 2, "HALF_RAW": 1}]
    + [{"WG": wg, "VEC": v, "MODE": 4, "PIPE_GROUPS": g} for wg in (64, 128, 256) for v in (4, 8)
       for g in (2, 4, 8, 16)]
    # NHWC global pooling: a work-item per (image, channel vector), GVEC_U loads in flight
    # (session 15; for NCHW a no-op: the per-item kernel)
    + [{"WG": wg, "VEC": v, "MODE": 1, "GVEC_U": u, "HALF_RAW": 1} for wg in (64, 128, 256) for v in (4, 8)
       for u in (8, 16)],
    "conv2d": [{"ALGO": 2, "TILE": t, "TK": k} for t in (32, 64) for k in (8, 16)]
    + [{"ALGO": 1, "WG": wg, "VEC": v} for wg in (64, 256) for v in (1, 4)],
    "batch_norm": [{"WG": wg, "VEC": v} for wg in (64, 128, 256, 512) for v in (1, 4, 8)]
    # float16 as raw 16-bit words (a no-op for float32 and VEC 1)
    + [{"WG": wg, "VEC": v, "HALF_RAW": 1} for wg in (64, 128, 256, 512) for v in (4, 8)]
    # NHWC inference looping over the vectors of each work-item's channels
    + [{"WG": wg, "VEC": v, "HALF_RAW": 1, "INFER_LOOP": 1} for wg in (64, 128, 256) for v in (4, 8)],
}


#: named candidate lists for --candidates (instead of a JSON list): "qpack", the packed int8/uint8
#: kernels against the served sets (--dtypes int8,uint8 --only pool3x3,pool2x2)
CANDIDATE_SETS: dict[str, list[dict[str, int]]] = {
    "qpack": [{"WG": wg, "QROWS16": 1, "QVEC16": 2, "STRIP_ROWS": r} for wg in (64, 128, 256) for r in (2, 4)]
    # the second versions (not yet measured on the H200): QROWS16=2 (NCHW average; its max is
    # QROWS16=1's, skipped by launch_signature) beside QVEC16=3 and 4 (NHWC, 2 and 4 output
    # pixels per work-item; STRIP_ROWS does not matter to them, so NHWC times 3 of 6 per value)
    + [{"WG": wg, "QROWS16": 2, "QVEC16": qv, "STRIP_ROWS": r} for qv in (3, 4) for wg in (64, 128, 256)
       for r in (2, 4)],
}


QUANT = ("int8", "uint8")


def make_spec(case: Case, shape: tuple[int, int, int, int], dtype: str, layout: str) -> Any:
    """The frozen spec of one case."""
    geo = S.TensorGeometry(*shape, layout, np.dtype(dtype))  # type: ignore[arg-type]
    kw = case.kwargs
    if case.family == "pool2d":
        spec = S.pool2d_spec(kw["kind"], geo, kw["k"], kw["s"], kw["p"], 1, False, True, None, False)
        return replace(spec, zero_point=3) if dtype in QUANT and kw["kind"] == "avg" else spec
    if case.family == "adaptive_pool2d":
        return S.adaptive_pool2d_spec(kw["kind"], geo, kw["out"], False)
    if case.family == "conv2d":
        g = kw["groups"]
        return S.conv2d_spec(geo, (kw["co"], shape[1] // g, 3, 3), False, None, 1, 1, 1, g)
    return S.batch_norm_spec(geo, kw["training"], 0.1, 1e-5, True)


def traffic(spec: Any, case: Case) -> tuple[float, float]:
    """(bytes, flops) by the baseline's rule."""
    es = np.dtype(spec.dtype).itemsize
    if case.family == "pool2d":
        return (np.prod(spec.in_shape) + np.prod(spec.out_shape)) * es, 0.0
    if case.family == "adaptive_pool2d":
        return float(np.prod(spec.in_shape) * es), 0.0
    if case.family == "conv2d":
        w = np.prod(spec.weight_shape) if spec.groups == 1 else 0
        return float((2 * np.prod(spec.in_shape) + w) * es), float(spec.flops)
    return float(2 * np.prod(spec.shape) * es), 0.0


class Runner:
    """Buffers and a launcher call for one spec on one hal device."""

    def __init__(self, dev: Any, spec: Any, rng: np.random.Generator, rotate_bytes: int = 0) -> None:
        self.dev, self.spec, self.backend = dev, spec, dev.backend
        b = self.backend
        shape = spec.in_shape if hasattr(spec, "in_shape") else spec.shape
        if np.dtype(spec.dtype).name in QUANT:
            info = np.iinfo(spec.dtype)
            self.x_host = rng.integers(info.min, info.max + 1, shape).astype(spec.dtype)
        else:
            self.x_host = rng.standard_normal(shape).astype(spec.dtype)
        phys = self.x_host.transpose(0, 2, 3, 1) if spec.layout == "NHWC" else self.x_host
        self.x = b.upload(np.ascontiguousarray(phys))
        out_shape = spec.out_shape if hasattr(spec, "out_shape") else spec.shape
        self.out_shape = out_shape
        ybytes = int(np.prod(out_shape)) * np.dtype(spec.dtype).itemsize
        self.y = b.allocate(ybytes)
        # --rotate: copies of (x, y) that the calls cycle through, rotate_bytes of them in all,
        # so that no call finds its input in a cache the previous call filled
        nsets = max(1, -(-rotate_bytes // (self.x_host.nbytes + ybytes)))
        self.sets = [(self.x, self.y)] + [(b.upload(np.ascontiguousarray(phys)), b.allocate(ybytes))
                                          for _ in range(nsets - 1)]
        self.extra: list[Any] = []
        self.host_extra: list[np.ndarray | None] = []
        if isinstance(spec, S.Conv2dSpec):
            w = (rng.standard_normal(spec.weight_shape) * 0.1).astype(spec.dtype)
            self.host_extra = [w]
            self.extra = [b.upload(w)]
        elif isinstance(spec, S.BatchNormSpec):
            c = spec.c
            host = [rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32),
                    (rng.standard_normal(c) * 0.1).astype(np.float32), (rng.random(c) + 0.5).astype(np.float32)]
            self.host_extra = host
            self.extra = [b.upload(a) for a in host]

    def call(self, params: dict[str, int]) -> Callable[[], None]:
        """A no-argument launch of this spec with ``params``."""
        b, s = self.backend, self.spec

        def launch(x: Any, y: Any) -> None:
            if isinstance(s, S.Pool2dSpec):
                b.pool2d(s, x, y, None, params)
            elif isinstance(s, S.AdaptivePool2dSpec):
                b.adaptive_pool2d(s, x, y, None, params)
            elif isinstance(s, S.Conv2dSpec):
                b.conv2d(s, x, self.extra[0], None, y, params)
            else:
                w, bias, rm, rv = self.extra
                b.batch_norm(s, x, y, w, bias, rm, rv, params)

        if len(self.sets) == 1:
            return lambda: launch(self.x, self.y)
        turn = [0]

        def rotating() -> None:
            launch(*self.sets[turn[0] % len(self.sets)])
            turn[0] += 1

        return rotating

    def output(self) -> np.ndarray:
        """y in logical NCHW."""
        n, c, h, w = self.out_shape
        phys = (n, h, w, c) if self.spec.layout == "NHWC" else (n, c, h, w)
        out = np.empty(phys, dtype=self.spec.dtype)
        self.backend.download(self.y, out)
        return out.transpose(0, 3, 1, 2) if self.spec.layout == "NHWC" else out

    def oracle(self) -> tuple[np.ndarray, float]:
        """(float64 reference, error scale) for this runner's inputs.

        The scale is sum |x||w| for conv (its rounding grows with it), else max(1, |ref|)."""
        s, x = self.spec, self.x_host.astype(np.float64)
        if isinstance(s, (S.Pool2dSpec, S.AdaptivePool2dSpec)):
            ref = R.pool2d_from_spec(s, x)[0]
        elif isinstance(s, S.Conv2dSpec):
            w = self.host_extra[0].astype(np.float64)  # type: ignore[union-attr]
            ref = R.conv2d_from_spec(s, x, w, None)
            return ref, float(R.conv2d_from_spec(s, np.abs(x), np.abs(w), None).max())
        else:
            w, bias, rm, rv = (a.astype(np.float64) for a in self.host_extra)  # type: ignore[union-attr]
            ref = R.batch_norm_from_spec(s, x, rm.copy(), rv.copy(), w, bias)
        return ref, max(1.0, float(np.abs(ref).max()))


def median_ms(backend: Any, fn: Callable[[], None], repeats: int, queued: bool = False) -> float:
    """Median device milliseconds of ``fn`` (``queued``: ``time_launches(queued=True)``)."""
    return statistics.median(backend.time_launches(fn, repeats, warmup=3, queued=queued)) * 1e3


def median_ms_b2b(backend: Any, fn: Callable[[], None], repeats: int, inner: int = 20, queued: bool = False) -> float:
    """Median device milliseconds per call of ``fn`` over batches of ``inner`` back-to-back
    calls: the events bracket a batch, so a launch gap counts once per batch, not per call
    (``queued``: the batches gated as ``time_launches(queued=True)`` gates calls, so not
    even once)."""
    def batch() -> None:
        for _ in range(inner):
            fn()

    return statistics.median(backend.time_launches(batch, repeats, warmup=1, queued=queued)) * 1e3 / inner


def queued_ms(backend: Any, fn: Callable[[], None], repeats: int, inner: int = 1) -> tuple[float, str]:
    """(median device ms per call with ``queued=True``: single calls, or with ``inner`` > 1
    batches of that many as :func:`median_ms_b2b`; '' or the backend's warning that it
    could not gate the calls and timed them without the gate)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ms = median_ms_b2b(backend, fn, repeats, inner, queued=True) if inner > 1 else median_ms(
            backend, fn, repeats, queued=True)
    notes = []
    for w in caught:
        if "time_launches(queued=True)" in str(w.message):
            notes.append(str(w.message))
        else:  # not ours: as it would have been shown
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return ms, "; ".join(dict.fromkeys(notes))


def launch_breakdown(backend: Any, fn: Callable[[], None], repeats: int, queued: bool = False) -> list[dict[str, Any]]:
    """Per command of one call of ``fn``: its kernel, median start, end and duration in ms
    from the call's first start (the gaps between an op's launches show as start minus the
    previous end; ``queued``: each call gated as ``time_launches(queued=True)`` gates it)."""
    calls = backend.launch_profile(fn, repeats, warmup=3, queued=queued)
    rows = []
    for i, (name, _, _) in enumerate(calls[0]):
        start = statistics.median(c[i][1] for c in calls) * 1e3
        end = statistics.median(c[i][2] for c in calls) * 1e3
        took = statistics.median(c[i][2] - c[i][1] for c in calls) * 1e3
        rows.append({"kernel": name, "start_ms": start, "end_ms": end, "ms": took})
    return rows


def copy_gbps(dev: Any, is_cpu: bool) -> float:
    """Device-to-device enqueue_copy GB/s (reads + writes) of a large buffer."""
    b = dev.backend
    nbytes = (64 if is_cpu else 256) * 2**20
    src = b.upload(np.ones(nbytes // 4, np.float32))
    dst = b.allocate(nbytes)
    return 2 * nbytes / (median_ms(b, lambda: b.copy(src, dst, nbytes), 20) / 1e3) / 1e9


def torch_tensor(torch: Any, a: np.ndarray) -> Any:
    """A PyTorch tensor of host data; bfloat16 (ml_dtypes, which torch.from_numpy refuses) by its 16-bit words."""
    if is_bfloat16(a.dtype):
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def torch_ms(case: Case, spec: Any, runner: Runner, on_gpu: bool, repeats: int) -> tuple[float | None, str]:
    """PyTorch's median ms for the same case on the same hardware, or (None, why)."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None, "torch not installed"
    if on_gpu and not torch.cuda.is_available():
        return None, "torch has no CUDA here"
    tdev = "cuda" if on_gpu else "cpu"
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    x = torch_tensor(torch, runner.x_host).to(tdev)
    if spec.layout == "NHWC":
        x = x.contiguous(memory_format=torch.channels_last)
    kw = case.kwargs
    if case.family == "pool2d":
        fn = F.max_pool2d if kw["kind"] == "max" else F.avg_pool2d
        call = lambda: fn(x, kw["k"], kw["s"], kw["p"])  # noqa: E731
    elif case.family == "adaptive_pool2d":
        call = lambda: F.adaptive_avg_pool2d(x, kw["out"])  # noqa: E731
    elif case.family == "conv2d":
        w = torch_tensor(torch, runner.host_extra[0]).to(tdev)  # type: ignore[arg-type]
        if spec.layout == "NHWC":
            w = w.contiguous(memory_format=torch.channels_last)
        call = lambda: F.conv2d(x, w, None, 1, 1, 1, kw["groups"])  # noqa: E731
    else:
        vecs = [torch.from_numpy(a).to(tdev).to(x.dtype) for a in runner.host_extra]  # type: ignore[arg-type]
        call = lambda: F.batch_norm(x, vecs[2], vecs[3], vecs[0], vecs[1], training=kw["training"])  # noqa: E731
    try:
        for _ in range(3):
            call()
        times = []
        if on_gpu:
            torch.cuda.synchronize()
            for _ in range(repeats):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                call()
                b.record()
                torch.cuda.synchronize()
                times.append(a.elapsed_time(b))
        else:
            import time

            for _ in range(repeats):
                t0 = time.perf_counter()
                call()
                times.append((time.perf_counter() - t0) * 1e3)
    except RuntimeError as exc:  # e.g. an fp16 kernel PyTorch lacks on the CPU
        return None, f"torch: {str(exc).splitlines()[0][:60]}"
    return statistics.median(times), ""


def check(runner: Runner, params: dict[str, int]) -> str:
    """'' when the launcher's output matches the oracle, else what went wrong."""
    runner.call(params)()
    if np.dtype(runner.spec.dtype).name in QUANT:  # integers: exact
        want_q = R.quantized_pool2d_from_spec(runner.spec, runner.x_host)[0]
        wrong = int((runner.output() != want_q).sum())
        return f"MISMATCH ({wrong} elements differ)" if wrong else ""
    got = runner.output().astype(np.float64)
    want, scale = runner.oracle()
    # float32's accumulation order; one float16 (11 bits) or bfloat16 (8 bits) rounding
    tol = 1e-5 if runner.spec.dtype == np.float32 else 8e-3 if is_bfloat16(runner.spec.dtype) else 2e-3
    err = float(np.max(np.abs(got - want)) / scale)
    if np.isnan(got).any() or err > tol:
        return f"MISMATCH (max error {err:.3g})"
    return ""


def candidate_list(candidates: str, family: str) -> list[dict[str, int]]:
    """--sweep's parameter sets for ``family``: the built-in ones, a named list
    (:data:`CANDIDATE_SETS`) or a JSON list."""
    if not candidates:
        return SWEEP[family]
    if candidates in CANDIDATE_SETS:
        return CANDIDATE_SETS[candidates]
    return json.loads(candidates)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print a table; write OUT/opencl_ops.json (and the sweep's suggestions)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", action="append", help="hal OpenCL device string (default: every OpenCL device)")
    ap.add_argument("--quick", action="store_true", help="CPU-sized shapes everywhere")
    ap.add_argument("--sweep", action="store_true", help="time candidate parameter sets and suggest table entries")
    ap.add_argument("--launches", action="store_true",
                    help="also time each launch of the served set on its own (kernel, start, end)")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--b2b", type=int, default=20,
                    help="calls per gated batch of the 'b2b q' column (0: no such column)")
    ap.add_argument("--only", default="", help="only cases whose name contains one of these comma-separated texts")
    ap.add_argument("--dtypes", default="float32,float16")
    ap.add_argument("--candidates", default="",
                    help="with --sweep: a JSON list of parameter sets to try instead of the built-in ones, "
                         f"or the name of a built-in list ({', '.join(CANDIDATE_SETS)})")
    ap.add_argument("--rotate", type=int, default=0, metavar="MB",
                    help="time each case on copies of its input and output, MB of them in all, one call "
                         "after another on the next copy (0: every call on the same buffers)")
    ap.add_argument("--out", default=".")
    args = ap.parse_args(argv)
    devices = [hal.device(d) for d in args.device] if args.device else [d for d in hal.devices() if d.kind == "opencl"]
    if not devices:
        print("no OpenCL device:", [s.reason for s in hal.backend_status() if s.name == "opencl"])
        return 1
    cuda_dev = None
    try:
        cuda_dev = next(d for d in hal.devices() if d.kind == "cuda")
    except StopIteration:
        pass
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    suggestions: list[dict[str, Any]] = []
    today = datetime.date.today().isoformat()
    for dev in devices:
        info = dev.info
        extras = dict(info.extras)
        real_vendor = extras.get("real_vendor", info.vendor)
        is_cpu = extras.get("device_type") == "CPU"
        on_nvidia = real_vendor == "nvidia"
        gbps_copy = copy_gbps(dev, is_cpu)
        print(f"# {dev.id}: {info.name} [{info.platform}, driver {info.driver}] vendor={info.vendor} "
              f"arch={info.arch} copy {gbps_copy:.1f} GB/s", flush=True)
        rng = np.random.default_rng(0)
        for case in CASES:
            if args.only and not any(part in case.name for part in args.only.split(",")):
                continue
            shape = case.shape
            if is_cpu or args.quick:
                n, c, h, w = shape
                per = c * h * w * 4
                shape = (max(1, min(n, (16 * 2**20) // per)), c, h, w) if n > 1 else (n, c, min(h, 2048), min(w, 2048))
            for dtype in args.dtypes.split(","):
                if dtype in QUANT and case.family != "pool2d":
                    continue  # quantized conv is timed by nothing here yet; pooling is the memory-bound case
                for layout in case.layouts:
                    spec = make_spec(case, shape, dtype, layout)
                    resolved = dev.tuner.resolve_spec(spec)
                    params = dict(resolved.params)
                    small = Runner(dev, make_spec(case, (min(2, shape[0]), *shape[1:]), dtype, layout), rng)
                    bad = check(small, params)
                    del small
                    runner = Runner(dev, spec, rng, args.rotate * 2**20)
                    ms = median_ms(dev.backend, runner.call(params), args.repeats)
                    q_ms, q_note = queued_ms(dev.backend, runner.call(params), args.repeats)
                    nbytes, flops = traffic(spec, case)
                    gbps = nbytes / ms / 1e6
                    row: dict[str, Any] = {
                        "device": dev.id, "device_name": info.name, "case": case.name, "dtype": dtype,
                        "layout": layout, "shape": "x".join(map(str, shape)), "ms": ms, "gbps": gbps,
                        "copy_share": gbps / gbps_copy, "queued_ms": q_ms, "queued_gbps": nbytes / q_ms / 1e6,
                        "queued_copy_share": nbytes / q_ms / 1e6 / gbps_copy, "b2b_queued_ms": None,
                        "b2b_queued_copy_share": None, "queued_note": q_note,
                        "gflops": flops / ms / 1e6 if flops else None,
                        "params": params, "level": resolved.level, "check": bad or "ok",
                        "rotated_sets": len(runner.sets),
                    }
                    if args.b2b > 0:
                        b_ms, b_note = queued_ms(dev.backend, runner.call(params), max(5, args.repeats // 2), args.b2b)
                        row["b2b_queued_ms"] = b_ms
                        row["b2b_queued_copy_share"] = nbytes / b_ms / 1e6 / gbps_copy
                        row["queued_note"] = "; ".join(n for n in dict.fromkeys((q_note, b_note)) if n)
                    if args.launches:
                        row["launches"] = launch_breakdown(dev.backend, runner.call(params), args.repeats)
                        row["launches_queued"] = launch_breakdown(dev.backend, runner.call(params), args.repeats,
                                                                  queued=True)
                    if cuda_dev is not None and on_nvidia:
                        crun = Runner(cuda_dev, spec, rng)
                        cparams = dict(cuda_dev.tuner.resolve_spec(spec).params)
                        row["cuda_ms"] = median_ms_b2b(cuda_dev.backend, crun.call(cparams), max(5, args.repeats // 2))
                        del crun
                    if dtype in QUANT:
                        t_ms, why = None, "PyTorch's quantized pooling runs on the CPU only"
                    elif on_nvidia or is_cpu:
                        t_ms, why = torch_ms(case, spec, runner, on_nvidia, args.repeats)
                    else:
                        t_ms, why = None, "no PyTorch backend for this device"
                    row["torch_ms"], row["torch_note"] = t_ms, why
                    if args.sweep:
                        schema = dev.backend.schemas()[case.family]
                        # ranked by queued time: a multi-kernel op's plain figure holds the host's gaps
                        best = (q_ms, params)
                        row["sweep"] = tried = []  # every candidate timed (queued), for the record
                        # sets that launch the same kernel on the same work (a parameter the spec
                        # ignores) are timed once: the backend's launch_signature, None = unknown
                        seen = {dev.backend.launch_signature(spec, params)} - {None}
                        for cand in candidate_list(args.candidates, case.family):
                            full = {**schema.defaults(), **cand}
                            if full == params:
                                continue
                            why = schema.validate(full, info)
                            if why:
                                tried.append({"ms": None, "params": cand, "skipped": str(why)})
                                continue
                            sig = dev.backend.launch_signature(spec, full)
                            if sig is not None and sig in seen:
                                tried.append({"ms": None, "params": cand, "skipped": "same launch as a set timed"})
                                continue
                            seen.add(sig)
                            dev.backend.exact_params = True  # a set the launcher would shrink is skipped
                            try:
                                t, _ = queued_ms(dev.backend, runner.call(full), max(5, args.repeats // 2))
                            except hal.HalError as exc:
                                tried.append({"ms": None, "params": cand, "skipped": f"{type(exc).__name__}: {exc}"})
                                continue
                            finally:
                                dev.backend.exact_params = False
                            tried.append({"ms": t, "params": cand})
                            if t < best[0]:
                                best = (t, full)
                        row["sweep_best"] = {"ms": best[0], "params": best[1]}
                        if best[0] < 0.95 * q_ms and not check(
                            Runner(dev, make_spec(case, (min(2, shape[0]), *shape[1:]), dtype, layout), rng), best[1]
                        ):
                            family, key = kernel_key(spec)
                            keep = {"pool2d": ("kind", "dtype", "layout", "kernel", "stride"),
                                    "adaptive_pool2d": ("kind", "dtype", "layout", "out_h", "out_w"),
                                    "conv2d": ("dtype", "layout", "kernel", "groups"),
                                    "batch_norm": ("mode", "dtype", "layout")}[family]
                            suggestions.append({
                                "level": "arch", "match": extras.get("real_arch", info.arch), "kernel": family,
                                "key": {k: key[k] for k in keep},
                                "params": {k: v for k, v in best[1].items() if v != schema.defaults()[k]} or best[1],
                                "provenance": f"measured on {info.name} ({info.platform} {info.driver}), {today}, "
                                              f"benchmarks/opencl_ops.py --sweep, {case.name} {row['shape']}: "
                                              f"{best[0]:.4g} ms vs {q_ms:.4g} ms served (queued)",
                            })
                    rows.append(row)
                    del runner
                    print(_line(row), flush=True)
    (out_dir / "opencl_ops.json").write_text(json.dumps(rows, indent=1))
    if args.sweep:
        (out_dir / "opencl_tuning.json").write_text(json.dumps(suggestions, indent=1))
    print("\n" + _header())
    for row in rows:
        print(_line(row))
    return 0 if all(r["check"] == "ok" for r in rows) else 2


def _header() -> str:
    return (f"{'case':22s} {'dtype':7s} {'layout':6s} {'shape':17s} {'ms':>9s} {'GB/s':>8s} {'copy%':>6s} "
            f"{'queued':>10s} {'q copy%':>7s} {'b2b q':>9s} "
            f"{'GFLOP/s':>8s} {'cuda x':>7s} {'torch x':>7s} level  check")


def _line(r: dict[str, Any]) -> str:
    cuda = f"{r['ms'] / r['cuda_ms']:7.2f}" if r.get("cuda_ms") else f"{'-':>7s}"
    torch = f"{r['ms'] / r['torch_ms']:7.2f}" if r.get("torch_ms") else f"{'-':>7s}"
    gf = f"{r['gflops']:8.1f}" if r.get("gflops") else f"{'':8s}"
    star = "*" if r.get("queued_note") else " "  # timed without the gate: see queued_note
    queued = (f"{r['queued_ms']:9.4f}{star} {100 * r['queued_copy_share']:6.1f}%" if r.get("queued_ms")
              else f"{'-':>10s} {'-':>7s}")
    b2b = f"{r['b2b_queued_ms']:9.4f}" if r.get("b2b_queued_ms") else f"{'-':>9s}"
    sweep = ""
    for key, label in (("launches", "launches"), ("launches_queued", "queued launches")):
        if r.get(key):
            sweep += f"  {label} " + ", ".join(f"{c['kernel']} {c['start_ms']:.4f}+{c['ms']:.4f}" for c in r[key])
    if "sweep_best" in r:
        sweep += f"  sweep best {r['sweep_best']['ms']:.4g} ms {r['sweep_best']['params']}"
    note = f" ({r['torch_note']})" if r.get("torch_note") and not r.get("torch_ms") else ""
    return (f"{r['case']:22s} {r['dtype']:7s} {r['layout']:6s} {r['shape']:17s} {r['ms']:9.4f} {r['gbps']:8.1f} "
            f"{100 * r['copy_share']:5.1f}% {queued} {b2b} {gf} {cuda} {torch} {r['level']:6s} "
            f"{r['check']}{note}{sweep}")


if __name__ == "__main__":
    sys.exit(main())
