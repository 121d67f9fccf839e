"""Host overhead of one small op call: Python to launch, through hal's public API.

Method: a tiny input (8x16x16x16, max pooling 3x3/2 pad 1, float32; BatchNorm inference,
ReLU and global average pooling as further cases) so that the GPU's work is far shorter
than the host's.
For each case, ``N`` calls are issued back to back from Python with no synchronize in
between, and the host clock (``time.perf_counter``) is read around them after a
synchronize, ending with one; the per-call figure is the elapsed time divided by ``N``,
the median over ``ROUNDS`` rounds, after a warm-up. When the device queue never runs dry
this is the time the host spends per call: validation, the tuning lookup, output
allocation from the memory pool, and the launch. Three levels are timed:

* ``op``: ``hal.max_pool2d(x, 3, 2, 1)`` - everything a user pays, a new output each call;
* ``launcher``: the backend's launcher with a resolved spec and a preallocated output
  (no validation, no lookup, no allocation: the backend's own cost; max pooling and
  global average pooling);
* ``replay``: ``graph.replay()`` of the op captured with ``hal.capture`` (one CUDA graph
  launch on CUDA, the launcher elsewhere);
* ``torch``: ``torch.nn.functional.max_pool2d`` on the same device, when torch and a
  matching device are present (CUDA for ``cuda:*``).

``--no-enqueue`` replaces the backend's enqueue (OpenCL's ``_launch``, CUDA's ``_run``) with
a no-op, leaving hal's Python alone: on a CPU OpenCL driver (PoCL), whose kernels run on the
same cores, the other figures are mostly kernel time.

    python3 benchmarks/host_overhead.py [--device cuda:0] [--calls 2000] [--json FILE] [--no-enqueue]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import hal
from hal.spec import adaptive_pool2d_spec, batch_norm_spec, plane_geometry, pool2d_spec

ROUNDS = 15


def per_call_us(call: Callable[[], Any], sync: Callable[[], None], calls: int) -> float:
    """Median host time per call (µs) over ROUNDS rounds of ``calls`` back-to-back calls."""
    for _ in range(max(20, calls // 10)):
        call()
    sync()
    samples = []
    for _ in range(ROUNDS):
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        sync()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def measure(device: str, calls: int) -> list[dict[str, Any]]:
    """Per-call host time of the op, the launcher and PyTorch for three small cases."""
    dev = hal.device(device)
    rng = np.random.default_rng(0)
    x_host = rng.standard_normal((8, 16, 16, 16)).astype(np.float32)
    x = hal.asarray(x_host, device=dev)
    # running statistics already on the device, as torch's are (no upload per call)
    mean = hal.asarray(rng.standard_normal(16).astype(np.float32), device=dev)
    var = hal.asarray(rng.uniform(0.5, 2.0, 16).astype(np.float32), device=dev)
    sync = dev.backend.synchronize
    rows: list[dict[str, Any]] = []

    # the public ops
    op_calls: dict[str, Callable[[], Any]] = {
        "max_pool2d 3x3/2": lambda: hal.max_pool2d(x, 3, 2, 1),
        "batch_norm infer": lambda: hal.batch_norm(x, mean, var),
        "batch_norm train": lambda: hal.batch_norm(x, mean, var, training=True),
        "relu": lambda: hal.relu(x),
        "adaptive_avg_pool2d 1x1": lambda: hal.adaptive_avg_pool2d(x, 1),
    }
    # the launchers of max pooling and global pooling, spec resolved and output allocated once
    y = hal.max_pool2d(x, 3, 2, 1)
    spec = pool2d_spec("max", x.geometry(), 3, 2, 1, 1, False, True, None, False)
    params = dev.tuner.resolve_spec(spec).params
    yg = hal.adaptive_avg_pool2d(x, 1)
    gspec = adaptive_pool2d_spec("avg", plane_geometry(x.geometry()), 1, False)
    gparams = dev.tuner.resolve_spec(gspec).params
    yb = hal.batch_norm(x, mean, var)
    bspec = batch_norm_spec(x.geometry(), True, 0.1, 1e-5, True)
    bparams = dev.tuner.resolve_spec(bspec).params
    launchers: dict[str, Callable[[], Any]] = {
        "batch_norm train": lambda: dev.backend.batch_norm(bspec, x.buffer, yb.buffer, None, None, mean.buffer,
                                                           var.buffer, bparams),
        "max_pool2d 3x3/2": lambda: dev.backend.pool2d(spec, x.buffer, y.buffer, None, params),
        "adaptive_avg_pool2d 1x1": lambda: dev.backend.adaptive_pool2d(gspec, x.buffer, yg.buffer, None, gparams),
    }

    torch_calls: dict[str, Callable[[], Any]] = {}
    torch_sync: Callable[[], None] | None = None
    try:
        import torch
        import torch.nn.functional as F

        tdev = "cuda" if dev.backend.name == "cuda" and torch.cuda.is_available() else (
            "cpu" if dev.backend.name == "cpu" else None)
        if tdev is not None:
            tx = torch.from_numpy(x_host).to(tdev)
            tm, tv = torch.from_numpy(mean.numpy()).to(tdev), torch.from_numpy(var.numpy()).to(tdev)
            torch_calls = {
                "max_pool2d 3x3/2": lambda: F.max_pool2d(tx, 3, 2, 1),
                "batch_norm infer": lambda: F.batch_norm(tx, tm, tv, training=False),
                "batch_norm train": lambda: F.batch_norm(tx, tm, tv, training=True),
                "relu": lambda: torch.relu(tx),
                "adaptive_avg_pool2d 1x1": lambda: F.adaptive_avg_pool2d(tx, 1),
            }
            torch_sync = torch.cuda.synchronize if tdev == "cuda" else (lambda: None)
    except ImportError:
        pass

    for name, call in op_calls.items():
        row: dict[str, Any] = {"device": str(dev.id), "case": name, "op_us": per_call_us(call, sync, calls)}
        if name in launchers:
            row["launcher_us"] = per_call_us(launchers[name], sync, calls)
        if name.startswith("max_pool2d"):
            with hal.capture() as graph:
                hal.max_pool2d(x, 3, 2, 1)
            row["replay_us"] = per_call_us(graph.replay, sync, calls)
            row["replay_mode"] = graph.mode
        if name in torch_calls and torch_sync is not None:
            row["torch_us"] = per_call_us(torch_calls[name], torch_sync, calls)
        rows.append(row)
    return rows


def micro(device: str, calls: int) -> list[tuple[str, float]]:
    """Per-call host time (µs) of the pieces of one op call, each timed alone (CUDA only).

    The pieces: a PyCUDA context push/pop pair, a ctypes ``cuCtxGetCurrent``, a pool
    allocation and its free (context pushed), ``hal.tensor.empty`` (allocation and the
    free of the previous one), the cached spec constructor, the tuner lookup, the
    launcher's plan lookup and argument packing, and the bare launch (context pushed).
    """
    import ctypes

    from hal.tensor import empty

    dev = hal.device(device)
    backend = dev.backend
    if backend.name != "cuda":
        return []
    drv = backend._drv
    ctx = backend._ctx
    x = hal.asarray(np.random.default_rng(2).standard_normal((8, 16, 16, 16)).astype(np.float32), device=dev)
    spec = pool2d_spec("max", x.geometry(), 3, 2, 1, 1, False, True, None, False)
    params = dev.tuner.resolve_spec(spec).params
    y = hal.max_pool2d(x, 3, 2, 1)
    nothing = lambda: None  # noqa: E731
    rows: list[tuple[str, float]] = []

    def push_pop() -> None:
        ctx.push()
        drv.Context.pop()

    lib = ctypes.CDLL("libcuda.so.1")

    def get_current() -> None:
        cur = ctypes.c_void_p()
        lib.cuCtxGetCurrent(ctypes.byref(cur))

    def alloc_free() -> None:
        ctx.push()
        block = backend._pool.allocate(4096)
        block.free()
        drv.Context.pop()

    holder: list[Any] = [None]

    def hal_empty() -> None:
        holder[0] = empty((8, 16, 8, 8), np.float32, dev)

    geometry = x.geometry()
    key = ("pool2d", spec, backend._pkey(params), False, True, False)
    plan = backend._plans.get(key)
    rows.append(("python call (baseline)", per_call_us(nothing, nothing, calls)))
    rows.append(("ctx push+pop", per_call_us(push_pop, nothing, calls)))
    rows.append(("ctypes cuCtxGetCurrent", per_call_us(get_current, nothing, calls)))
    rows.append(("pool alloc+free (pushed)", per_call_us(alloc_free, nothing, calls)))
    rows.append(("hal empty (alloc + free prev)", per_call_us(hal_empty, nothing, calls)))
    rows.append(("pool2d_spec (memoised)", per_call_us(
        lambda: pool2d_spec("max", geometry, 3, 2, 1, 1, False, True, None, False), nothing, calls)))
    rows.append(("tuner.resolve_spec", per_call_us(lambda: dev.tuner.resolve_spec(spec), nothing, calls)))
    rows.append(("x.geometry()", per_call_us(x.geometry, nothing, calls)))
    if plan is not None:
        fns = tuple(backend._function(launch) for launch in plan)
        buffers = {"x": x.buffer, "y": y.buffer, "i": None}

        def pack_only() -> None:
            for launch, fn in zip(plan, fns, strict=True):
                args = [int(buffers[a]) if isinstance(a, str) and buffers[a] is not None else
                        (0 if isinstance(a, str) else a) for a in launch.args]
                _ = backend_pack(fn.arg_format, *args)

        backend_pack = sys.modules[type(backend).__module__]._pack_fn

        def launch_pushed() -> None:
            ctx.push()
            for launch, fn in zip(plan, fns, strict=True):
                args = [int(buffers[a]) if isinstance(a, str) and buffers[a] is not None else
                        (0 if isinstance(a, str) else a) for a in launch.args]
                fn._launch_kernel(launch.grid, launch.block, backend_pack(fn.arg_format, *args), launch.shared,
                                  backend._stream)
            drv.Context.pop()

        nargs = sum(len(la.args) for la in plan)
        rows.append((f"arg list + pack ({nargs} args)", per_call_us(pack_only, nothing, calls)))
        rows.append(("launch incl. pack (pushed)", per_call_us(launch_pushed, backend.synchronize, calls)))
    rows.append(("backend.pool2d (launcher)", per_call_us(
        lambda: backend.pool2d(spec, x.buffer, y.buffer, None, params), backend.synchronize, calls)))
    rows.append(("hal.max_pool2d (op)", per_call_us(lambda: hal.max_pool2d(x, 3, 2, 1), backend.synchronize, calls)))
    return rows


def pdl_ab(device: str, calls: int, rounds: int = 8) -> list[tuple[str, float, float]]:
    """(case, µs with programmatic dependent launch, µs without) per call on a CUDA device
    that has it: the same calls, the backend's ``pdl`` switched between alternating rounds
    in one process, so that a host whose speed drifts between runs cannot decide it."""
    dev = hal.device(device)
    backend = dev.backend
    if backend.name != "cuda" or not getattr(backend, "pdl", False):
        return []
    x = hal.asarray(np.random.default_rng(3).standard_normal((8, 16, 16, 16)).astype(np.float32), device=dev)
    spec = pool2d_spec("max", x.geometry(), 3, 2, 1, 1, False, True, None, False)
    params = dev.tuner.resolve_spec(spec).params
    y = hal.max_pool2d(x, 3, 2, 1)
    cases = {"max_pool2d 3x3/2 op": lambda: hal.max_pool2d(x, 3, 2, 1),
             "max_pool2d launcher": lambda: backend.pool2d(spec, x.buffer, y.buffer, None, params)}
    out = []
    for name, call in cases.items():
        times: dict[bool, list[float]] = {True: [], False: []}
        for r in range(2 * rounds):
            on = r % 2 == 0
            backend.pdl = on
            times[on].append(per_call_us(call, backend.synchronize, calls // 4))
        backend.pdl = True
        out.append((name, statistics.median(times[True]), statistics.median(times[False])))
    return out


def _profile(device: str | None, calls: int) -> None:
    import cProfile
    import pstats

    dev = hal.device(device)
    x = hal.asarray(np.random.default_rng(1).standard_normal((8, 16, 16, 16)).astype(np.float32), device=dev)
    for _ in range(100):
        hal.max_pool2d(x, 3, 2, 1)
    dev.backend.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        hal.max_pool2d(x, 3, 2, 1)
    dev.backend.synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(22)


def main(argv: list[str] | None = None) -> int:
    """Print (and optionally write as JSON) the per-call host time of each case."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None, help="device (default: the selected device)")
    ap.add_argument("--calls", type=int, default=2000, help="back-to-back calls per round")
    ap.add_argument("--json", default=None, help="write the rows here")
    ap.add_argument("--profile", action="store_true", help="also print cProfile's top entries for the op call")
    ap.add_argument("--micro", action="store_true", help="also time the pieces of one call alone (CUDA)")
    ap.add_argument("--pdl-ab", action="store_true",
                    help="also time the op and its launcher with and without programmatic dependent launch, "
                         "alternating rounds (CUDA sm_90+)")
    ap.add_argument("--no-enqueue", action="store_true",
                    help="replace the backend's enqueue with a no-op (hal's Python alone; no torch column)")
    args = ap.parse_args(argv)
    if args.no_enqueue:
        backend = hal.device(args.device).backend
        for name in ("_launch", "_run"):
            if hasattr(backend, name):
                setattr(backend, name, lambda *a, **k: None)
    rows = measure(args.device, args.calls)
    if args.no_enqueue:
        for r in rows:
            r.pop("torch_us", None)
            r["no_enqueue"] = True
    if args.profile:
        _profile(args.device, args.calls)
    if args.micro:
        for name, us in micro(args.device, args.calls):
            print(f"micro {name:<36} {us:8.2f} µs")
    if args.pdl_ab:
        for name, on, off in pdl_ab(args.device, args.calls):
            print(f"pdl-ab {name:<28} with {on:7.2f} µs  without {off:7.2f} µs")
    print(f"{'device':<12} {'case':<24} {'op µs':>8} {'launcher µs':>12} {'replay µs':>10} {'torch µs':>9}")
    for r in rows:
        launcher = f"{r['launcher_us']:.2f}" if "launcher_us" in r else "-"
        replay = f"{r['replay_us']:.2f}" if "replay_us" in r else "-"
        torch_us = f"{r['torch_us']:.2f}" if "torch_us" in r else "-"
        print(f"{r['device']:<12} {r['case']:<24} {r['op_us']:>8.2f} {launcher:>12} {replay:>10} {torch_us:>9}"
              + (f"  (replay: {r['replay_mode']})" if "replay_mode" in r else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
