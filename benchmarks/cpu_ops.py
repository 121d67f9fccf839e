"""CPU backend vs numpy vs PyTorch (CPU), one table in one run.

Method
------
* Every timed function runs ``--warmup`` times (default 5), then ``--repeat``
  times (default 30); the table shows the median wall time (time.perf_counter),
  or with ``--stat min`` the minimum: on a machine shared with other busy
  processes the median measures the other processes, while the minimum of many
  runs estimates the undisturbed time. hal, PyTorch, the copy and numpy are
  timed in turns (one run each, repeated), so all four see the same cache state
  (each one's input partly evicted by the others, as in a network where the
  previous layer wrote it) and a burst of load hits all of them.
* hal runs through the public ops (``hal.max_pool2d`` ...) on tensors already on
  the ``cpu`` device, so op-layer overhead (validation, parameter lookup, output
  allocation) is included, as a user sees it.
* numpy: the obvious numpy formulation of the same op (strided slices and
  np.maximum / sums, tensordot over sliding windows for conv), float32, with
  its BLAS on one thread (OPENBLAS_NUM_THREADS=1 unless set: OpenBLAS threads
  spin after each call and would slow whatever is timed next); and
  ``np.copyto`` of the input's bytes ("copy"), a memory-bandwidth yardstick.
* PyTorch: torch.nn.functional on CPU tensors (``channels_last`` for NHWC), with
  ``torch.set_num_threads`` equal to hal's thread count (``HAL_NUM_THREADS`` or
  the OpenMP default, os.cpu_count()).
* GB/s counts the input read once plus the output written once.
* Ratios: ``torch/hal`` > 1 means hal is faster; ``hal/copy`` is hal's time in
  units of the input copy.
* Sizes (float32): pooling 8x64x112x112 (25.7 MB), 2x2 pool of 1x16x1024x1024
  (64 MB), global average 32x512x14x14, BatchNorm 8x64x112x112, conv 3x3
  64->64 on 8x64x32x32, depthwise 3x3 on 8x64x56x56.

    .venv/bin/python benchmarks/cpu_ops.py [--repeat 30] [--warmup 5] [--only conv]

Parameter sweep (the source of hal/tuning/tables/cpu.json): ``--sweep KERNEL``
times every valid parameter set of the backend schema for ``KERNEL``
(pool2d, adaptive_pool2d, conv2d, batch_norm) through the launcher at the
sweep shapes below, both dtypes and layouts, and prints the best set per
workload with its time and the default's. Each candidate: 3 warm-ups, then
the minimum of ``--repeat`` runs (the minimum, because other processes may
share the machine; it estimates the undisturbed time). Force an ISA path
with ``HAL_CPU_ISA=avx2``.

    .venv/bin/python benchmarks/cpu_ops.py --sweep conv2d [--repeat 15]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads OpenBLAS (see the method)

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

import hal
from hal.backends.cpu import num_threads


def time_turns(fns: list[Callable[[], object]], warmup: int, repeat: int, stat: str) -> list[float]:
    """Each fn's median (or minimum) wall time in ms, the fns run in turns."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, acc in zip(fns, times, strict=True):
            start = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - start)
    pick = min if stat == "min" else statistics.median
    return [pick(t) * 1e3 for t in times]


# ----------------------------------------------------------------------------
# numpy formulations (on the physical array; h, w, c are its axes)
# ----------------------------------------------------------------------------


def np_pool(x: np.ndarray, kind: str, k: int, s: int, p: int, layout: str) -> np.ndarray:
    """k x k / s pooling with symmetric padding p (count_include_pad for avg)."""
    ha, wa = (2, 3) if layout == "NCHW" else (1, 2)
    pad = [(0, 0)] * 4
    pad[ha] = pad[wa] = (p, p)
    xp = np.pad(x, pad, constant_values=-np.inf if kind == "max" else 0.0)
    oh = (x.shape[ha] + 2 * p - k) // s + 1
    ow = (x.shape[wa] + 2 * p - k) // s + 1
    out = None
    for i in range(k):
        for j in range(k):
            sl = [slice(None)] * 4
            sl[ha] = slice(i, i + s * (oh - 1) + 1, s)
            sl[wa] = slice(j, j + s * (ow - 1) + 1, s)
            v = xp[tuple(sl)]
            if out is None:
                out = v.copy()
            elif kind == "max":
                np.maximum(out, v, out=out)
            else:
                out += v
    assert out is not None
    return out if kind == "max" else out / np.float32(k * k)


def np_pool2x2(x: np.ndarray) -> np.ndarray:
    """2x2 / 2 max pooling of an NCHW array with even H and W."""
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def np_bn(x: np.ndarray, layout: str, training: bool, rm: np.ndarray, rv: np.ndarray) -> np.ndarray:
    """BatchNorm, channel axis by layout (two-pass variance in training)."""
    axes = (0, 2, 3) if layout == "NCHW" else (0, 1, 2)
    shape = (1, -1, 1, 1) if layout == "NCHW" else (1, 1, 1, -1)
    if training:
        mean = x.mean(axis=axes)
        var = ((x - mean.reshape(shape)) ** 2).mean(axis=axes)
    else:
        mean, var = rm, rv
    scale = (1.0 / np.sqrt(var + 1e-5)).astype(np.float32)
    return (x - mean.reshape(shape).astype(np.float32)) * scale.reshape(shape)


def np_conv(x: np.ndarray, w: np.ndarray, layout: str) -> np.ndarray:
    """3x3 / 1 pad 1 dense conv via sliding windows + tensordot (im2col + BLAS)."""
    if layout == "NCHW":
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # n c h w 3 3
        return np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(1, 2))  # n h w c 3 3
    return np.tensordot(win, w, axes=([3, 4, 5], [1, 2, 3]))


def np_depthwise(x: np.ndarray, w: np.ndarray, layout: str) -> np.ndarray:
    """3x3 / 1 pad 1 depthwise conv as 9 shifted multiply-adds."""
    if layout == "NCHW":
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        h, wd = x.shape[2], x.shape[3]
        out = np.zeros_like(x)
        for i in range(3):
            for j in range(3):
                out += xp[:, :, i : i + h, j : j + wd] * w[:, 0, i, j].reshape(1, -1, 1, 1)
        return out
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    h, wd = x.shape[1], x.shape[2]
    out = np.zeros_like(x)
    for i in range(3):
        for j in range(3):
            out += xp[:, i : i + h, j : j + wd, :] * w[:, 0, i, j]
    return out


# ----------------------------------------------------------------------------
# cases
# ----------------------------------------------------------------------------


@dataclass
class Case:
    """One benchmark row."""

    name: str
    layout: str
    shape: tuple[int, int, int, int]
    hal_fn: Callable[[hal.Tensor], object]
    torch_fn: Callable[[torch.Tensor], object]
    np_fn: Callable[[np.ndarray], object]
    out_elems: Callable[[tuple[int, int, int, int]], int]


def cases(rng: np.random.Generator) -> list[Case]:
    """The benchmark rows."""
    big = (8, 64, 112, 112)
    out = []

    def half(s: tuple[int, int, int, int]) -> int:
        return s[0] * s[1] * ((s[2] + 1) // 2) * ((s[3] + 1) // 2)

    for layout in ("NCHW", "NHWC"):
        for kind in ("max", "avg"):
            hal_op = hal.max_pool2d if kind == "max" else hal.avg_pool2d
            t_op = F.max_pool2d if kind == "max" else F.avg_pool2d
            out.append(Case(f"{kind} pool 3x3/2 p1", layout, big,
                            lambda t, op=hal_op: op(t, 3, 2, 1), lambda t, op=t_op: op(t, 3, 2, 1),
                            lambda a, kind=kind, layout=layout: np_pool(a, kind, 3, 2, 1, layout), half))
    out.append(Case("max pool 2x2/2 large", "NCHW", (1, 16, 1024, 1024), lambda t: hal.max_pool2d(t, 2),
                    lambda t: F.max_pool2d(t, 2), np_pool2x2, lambda s: s[0] * s[1] * (s[2] // 2) * (s[3] // 2)))
    for layout in ("NCHW", "NHWC"):
        ax = (2, 3) if layout == "NCHW" else (1, 2)
        out.append(Case("global avg pool", layout, (32, 512, 14, 14), lambda t: hal.adaptive_avg_pool2d(t, 1),
                        lambda t: F.adaptive_avg_pool2d(t, 1), lambda a, ax=ax: a.mean(axis=ax),
                        lambda s: s[0] * s[1]))
    c = big[1]
    rm = rng.standard_normal(c).astype(np.float32)
    rv = rng.uniform(0.5, 2, c).astype(np.float32)
    trm, trv = torch.from_numpy(rm.copy()), torch.from_numpy(rv.copy())
    for layout in ("NCHW", "NHWC"):
        for training in (False, True):
            hrm, hrv = rm.copy(), rv.copy()
            out.append(Case(f"batchnorm {'train' if training else 'infer'}", layout, big,
                            lambda t, tr=training, a=hrm, b=hrv: hal.batch_norm(t, a, b, training=tr),
                            lambda t, tr=training: F.batch_norm(t, trm, trv, training=tr),
                            lambda a, tr=training, layout=layout: np_bn(a, layout, tr, rm, rv),
                            lambda s: s[0] * s[1] * s[2] * s[3]))
    w = (rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32)
    tw = torch.from_numpy(w)
    wd = (rng.standard_normal((64, 1, 3, 3)) * 0.3).astype(np.float32)
    twd = torch.from_numpy(wd)
    for layout in ("NCHW", "NHWC"):
        hw = hal.asarray(w, device="cpu")
        out.append(Case("conv 3x3 64->64", layout, (8, 64, 32, 32), lambda t, hw=hw: hal.conv2d(t, hw, padding=1),
                        lambda t: F.conv2d(t, tw, padding=1), lambda a, layout=layout: np_conv(a, w, layout),
                        lambda s: s[0] * 64 * s[2] * s[3]))
    for layout in ("NCHW", "NHWC"):
        hwd = hal.asarray(wd, device="cpu")
        out.append(Case("depthwise 3x3 c64", layout, (8, 64, 56, 56),
                        lambda t, hw=hwd: hal.conv2d(t, hw, padding=1, groups=64),
                        lambda t: F.conv2d(t, twd, padding=1, groups=64),
                        lambda a, layout=layout: np_depthwise(a, wd, layout), lambda s: s[0] * s[1] * s[2] * s[3]))
    return out


# ----------------------------------------------------------------------------
# parameter sweep
# ----------------------------------------------------------------------------

#: (kernel, name, spec builder(dtype, layout)) of the sweep workloads.
def sweep_workloads() -> list[tuple[str, str, Callable[[np.dtype, str], object]]]:
    """The shapes each kernel family's parameters are chosen at."""
    from hal.spec import TensorGeometry, adaptive_pool2d_spec, batch_norm_spec, conv2d_spec, pool2d_spec

    def geom(shape: tuple[int, int, int, int], dt: np.dtype, lay: str) -> TensorGeometry:
        return TensorGeometry(*shape, lay, dt)  # type: ignore[arg-type]

    big = (8, 64, 112, 112)
    return [
        ("pool2d", "max 3x3/2 p1 8x64x112x112",
         lambda dt, lay: pool2d_spec("max", geom(big, dt, lay), 3, 2, 1, 1, False, True, None, False)),
        ("pool2d", "avg 3x3/2 p1 8x64x112x112",
         lambda dt, lay: pool2d_spec("avg", geom(big, dt, lay), 3, 2, 1, 1, False, True, None, False)),
        ("pool2d", "max 2x2/2 1x16x1024x1024",
         lambda dt, lay: pool2d_spec("max", geom((1, 16, 1024, 1024), dt, lay), 2, 2, 0, 1, False, True, None,
                                     False)),
        ("adaptive_pool2d", "global avg 32x512x14x14",
         lambda dt, lay: adaptive_pool2d_spec("avg", geom((32, 512, 14, 14), dt, lay), 1, False)),
        ("adaptive_pool2d", "avg 8x64x56x56 -> 7x7",
         lambda dt, lay: adaptive_pool2d_spec("avg", geom((8, 64, 56, 56), dt, lay), 7, False)),
        ("conv2d", "3x3 64->64 8x64x32x32",
         lambda dt, lay: conv2d_spec(geom((8, 64, 32, 32), dt, lay), (64, 64, 3, 3), False, None, 1, 1, 1, 1)),
        ("conv2d", "3x3/2 64->128 8x64x56x56",
         lambda dt, lay: conv2d_spec(geom((8, 64, 56, 56), dt, lay), (128, 64, 3, 3), False, None, 2, 1, 1, 1)),
        ("conv2d", "1x1 256->64 8x256x28x28",
         lambda dt, lay: conv2d_spec(geom((8, 256, 28, 28), dt, lay), (64, 256, 1, 1), False, None, 1, 0, 1, 1)),
        ("conv2d", "depthwise 3x3 8x64x56x56",
         lambda dt, lay: conv2d_spec(geom((8, 64, 56, 56), dt, lay), (64, 1, 3, 3), False, None, 1, 1, 1, 64)),
        ("batch_norm", "train 8x64x112x112",
         lambda dt, lay: batch_norm_spec(geom(big, dt, lay), True, 0.1, 1e-5, True)),
    ]


def sweep(kernel: str, repeat: int, dtypes: list[str], layouts: list[str]) -> None:
    """Time every valid parameter set of ``kernel`` at its sweep workloads."""
    dev = hal.device("cpu")
    backend = dev.backend
    schema = type(backend).schemas()[kernel]
    cands = [p for p in schema.candidates() if schema.validate(p, dev.info) is None]
    default = schema.defaults()
    rng = np.random.default_rng(0)
    print(f"sweep {kernel} on {dev.info.name} ({dev.info.arch}), {len(cands)} candidates, min of {repeat} runs")
    for kern, name, build in sweep_workloads():
        if kern != kernel:
            continue
        for dtn in dtypes:
            for lay in layouts:
                dt = np.dtype(dtn)
                spec = build(dt, lay)
                launch = _launcher(backend, spec, dt, rng)
                # parameters this layout's code does not read are left at their default
                from hal.backends.cpu import LAYOUT_PARAMS

                used = LAYOUT_PARAMS[(kernel, lay)]
                seen: dict[tuple[int, ...], dict[str, int]] = {}
                for p in cands:
                    seen.setdefault(tuple(p[k] for k in used), {**default, **{k: p[k] for k in used}})
                results = _time_candidates(launch, [p for p in seen.values()
                                                    if schema.validate(p, dev.info) is None], repeat)
                ms_default = next((ms for ms, p in results if p == default), None)
                if ms_default is None:
                    ms_default = _time_candidates(launch, [default], repeat)[0][0]
                best_ms, best = results[0]
                top = ", ".join(f"{ms:.3f}:{_short(p, used)}" for ms, p in results[:4])
                print(f"{name:<28} {dtn:<8} {lay:<5} best {_short(best, used):<22} {best_ms:8.3f} ms  "
                      f"default {ms_default:8.3f} ms  ({ms_default / best_ms:4.2f}x)  top: {top}", flush=True)


def _time_candidates(launch: Callable[[dict], None], cands: list[dict[str, int]],
                     repeat: int) -> list[tuple[float, dict[str, int]]]:
    """(min ms, params) per candidate, fastest first."""
    results = []
    for params in cands:
        results.append((timeit_min(lambda p=params: launch(p), 3, repeat), params))
    return sorted(results, key=lambda r: r[0])


def _short(params: dict[str, int], used: tuple[str, ...]) -> str:
    return " ".join(f"{k}={params[k]}" for k in used)


def timeit_min(fn: Callable[[], object], warmup: int, repeat: int) -> float:
    """Minimum wall time of fn() in milliseconds."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def _launcher(backend: object, spec: object, dt: np.dtype, rng: np.random.Generator) -> Callable[[dict], None]:
    """A closure launching ``spec`` on fresh buffers with given params."""
    from hal.spec import AdaptivePool2dSpec, BatchNormSpec, Conv2dSpec, Pool2dSpec

    def buf(shape: tuple[int, ...], dtype: np.dtype = dt) -> object:
        return backend.upload(rng.standard_normal(shape).astype(dtype))  # type: ignore[attr-defined]

    if isinstance(spec, (Pool2dSpec, AdaptivePool2dSpec)):
        x, y = buf(spec.in_shape), buf(spec.out_shape)
        fn = backend.pool2d if isinstance(spec, Pool2dSpec) else backend.adaptive_pool2d  # type: ignore[attr-defined]
        return lambda p: fn(spec, x, y, None, p)
    if isinstance(spec, Conv2dSpec):
        x, w, y = buf(spec.in_shape), buf(spec.weight_shape), buf(spec.out_shape)
        return lambda p: backend.conv2d(spec, x, w, None, y, p)  # type: ignore[attr-defined]
    assert isinstance(spec, BatchNormSpec)
    x, y = buf(spec.shape), buf(spec.shape)
    rm, rv = buf((spec.c,), np.dtype(np.float32)), backend.upload(np.ones(spec.c, np.float32))  # type: ignore[attr-defined]
    return lambda p: backend.batch_norm(spec, x, y, None, None, rm, rv, p)  # type: ignore[attr-defined]


def main() -> None:
    """Run every case and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--only", default="", help="run the cases whose name contains this text")
    parser.add_argument("--no-numpy", action="store_true", help="skip the numpy formulations (slow for conv)")
    parser.add_argument("--stat", choices=["median", "min"], default="median", help="statistic of the repeats")
    parser.add_argument("--sweep", help="time every parameter set of a kernel family instead")
    parser.add_argument("--dtype", default="float32,float16", help="sweep dtypes")
    parser.add_argument("--layout", default="NCHW,NHWC", help="sweep layouts")
    args = parser.parse_args()
    threads = num_threads() or os.cpu_count() or 1
    torch.set_num_threads(threads)
    if args.sweep:
        sweep(args.sweep, args.repeat, args.dtype.split(","), args.layout.split(","))
        return
    dev = hal.device("cpu")
    print(f"hal cpu: {dev.info.name}, arch {dev.info.arch}, {threads} threads; torch {torch.__version__} "
          f"({torch.get_num_threads()} threads); numpy {np.__version__}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{args.stat} of {args.repeat} after {args.warmup} warm-ups (hal, torch, copy, numpy in turns); ms; "
          f"GB/s = (input + output bytes) / time; load average at start {load:.2f}")
    rng = np.random.default_rng(0)
    header = (f"{'case':<22} {'layout':<6} {'hal ms':>8} {'GB/s':>6} {'numpy ms':>9} {'torch ms':>9} "
              f"{'copy ms':>8} {'torch/hal':>9} {'numpy/hal':>9} {'hal/copy':>8}")
    print(header)
    print("-" * len(header))
    for case in cases(rng):
        if not args.only or args.only in case.name:
            print(measure(case, dev, rng, args), flush=True)


def measure(case: Case, dev: hal.Device, rng: np.random.Generator, args: argparse.Namespace) -> str:
    """Time one case with hal, PyTorch, numpy and a numpy copy; one table row."""
    x = rng.standard_normal(case.shape).astype(np.float32)
    phys = x.transpose(0, 2, 3, 1).copy() if case.layout == "NHWC" else x.copy()
    t = hal.asarray(x, device=dev, layout=case.layout)
    tx = torch.from_numpy(x.copy())
    if case.layout == "NHWC":
        tx = tx.contiguous(memory_format=torch.channels_last)
    dst = np.empty_like(phys)
    fns = [lambda: case.hal_fn(t), lambda: case.torch_fn(tx), lambda: np.copyto(dst, phys)]
    if not args.no_numpy:
        fns.append(lambda: case.np_fn(phys))
    with torch.no_grad():
        times = time_turns(fns, args.warmup, args.repeat, args.stat)
    ms_hal, ms_torch, ms_copy = times[:3]
    ms_np = times[3] if len(times) > 3 else float("nan")
    gbs = (x.nbytes + case.out_elems(case.shape) * 4) / ms_hal / 1e6
    return (f"{case.name:<22} {case.layout:<6} {ms_hal:8.3f} {gbs:6.1f} {ms_np:9.3f} {ms_torch:9.3f} "
            f"{ms_copy:8.3f} {ms_torch / ms_hal:9.2f} {ms_np / ms_hal:9.2f} {ms_hal / ms_copy:8.2f}")

if __name__ == "__main__":
    main()
