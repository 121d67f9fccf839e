"""Do `hal tune` and `benchmarks/cuda_ops.py` time a candidate alike? (CUDA)

Session 7 found BatchNorm-training device entries measured by `hal tune` that
`cuda_ops.py --sweep` timed 30 % slower than the schema default. The two differ in how
they time:

* ``per-launch``: `hal tune` (``Backend.time_launches``) records an event pair around
  each launch (one op call: for training three kernels and a workspace lookup), median of
  30;
* ``b2b``: `cuda_ops.py` records one event pair around 20 calls back to back, median of
  15 such batches;
* ``queued`` (session 16, what `hal tune` now uses): per-launch event pairs enqueued behind
  a spinning kernel (``time_launches(queued=True)``), so the GPU never waits for the host.

Both rotate among copies of the input so that together they exceed the L2. This script
times the same parameter sets both ways, interleaved, on the tuner's own problems
(``hal.tuning.evaluate``), and prints the ratio.

    python3 benchmarks/timing_methods.py [--device cuda:0] [--json FILE]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from typing import Any

import numpy as np

import hal
from hal.tuning import evaluate
from hal.tuning.tuner import last_level_cache_bytes, timing_copies
from hal.tuning.workloads import WORKLOADS

#: (workload name, dtype, layout, parameter sets); {} = what the tables serve
CASES: list[tuple[str, str, str, list[dict[str, int]]]] = [
    ("bn train", "float16", "NHWC", [{}, {"BN_BLOCKS_PER_SM": 2, "BN_THREADS": 256, "BN_UNROLL": 4},
                                      {"BN_THREADS": 128, "BN_UNROLL": 2, "BN_BLOCKS_PER_SM": 16}]),
    ("bn train", "float32", "NCHW", [{}, {"BN_THREADS": 256, "BN_UNROLL": 8, "BN_L2_HINT": 1},
                                      {"BN_THREADS": 128, "BN_BLOCKS_PER_SM": 8}]),
    ("maxpool3x3s2p1", "float32", "NCHW", [{}]),
    # kernels of 10-20 µs, whose host time per call exceeds their GPU time (session 16)
    ("maxpool2x2s2", "float16", "NCHW", [{}, {"POOL_ROWS": 0}]),
    ("globalavgpool", "float16", "NHWC", [{}]),
    ("bn infer", "float16", "NCHW", [{}]),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--json", default=None)
    ap.add_argument("--size", default="full", help="workload size: full, small or tiny (a dry run off the GPU)")
    args = ap.parse_args()
    dev = hal.device(args.device)
    backend = dev.backend
    drv = getattr(backend, "_drv", None)  # CUDA events for the b2b batches; else the host clock

    def batch(launch: Any) -> float:
        """ms per call of 20 calls back to back."""
        if drv is None:
            backend.synchronize()
            t0 = time.perf_counter()
            for _ in range(20):
                launch()
            backend.synchronize()
            return (time.perf_counter() - t0) / 20 * 1e3
        with backend._active():
            start, end = drv.Event(), drv.Event()
            start.record(backend.stream)
        for _ in range(20):
            launch()
        with backend._active():
            end.record(backend.stream)
            end.synchronize()
            return end.time_since(start) / 20

    rows: list[dict[str, Any]] = []
    for name, dtype, layout, sets in CASES:
        wl = next(w for w in WORKLOADS if w.name == name)
        spec = wl.spec_for(wl.shape(args.size), dtype, layout)
        host = evaluate.make_inputs(spec, np.random.default_rng(0))
        first = evaluate.upload_problem(backend, spec, host)
        copies = timing_copies(evaluate.problem_bytes(first), last_level_cache_bytes(backend.info))
        problems = [first] + [evaluate.upload_problem(backend, spec, host) for _ in range(copies - 1)]
        outs = [evaluate.output_buffers(backend, p) for p in problems]
        for params in sets:
            served = dev.tuner.resolve_spec(spec).params
            p = {**served, **params} if params else dict(served)
            cycle = itertools.cycle([evaluate.launcher(backend, pr, p, o)[0]
                                     for pr, o in zip(problems, outs, strict=True)])

            def call(launches: Any = cycle) -> None:
                next(launches)()

            per_launch, queued, b2b = [], [], []
            for _ in range(3):  # interleaved rounds
                per_launch.append(statistics.median(backend.time_launches(call, 30)) * 1e3)
                queued.append(statistics.median(backend.time_launches(call, 30, queued=True)) * 1e3)
                b2b.append(statistics.median(batch(call) for _ in range(15)))
            row = {"case": f"{name} {dtype} {layout}", "params": params or "served", "per_launch_ms": min(per_launch),
                   "queued_ms": min(queued), "b2b_ms": min(b2b), "copies": copies}
            rows.append(row)
            print(f"{row['case']:32s} {row['params']!s:70s} per-launch {row['per_launch_ms']:.4f} ms  "
                  f"queued {row['queued_ms']:.4f} ms  b2b {row['b2b_ms']:.4f} ms  "
                  f"ratio {row['per_launch_ms'] / row['b2b_ms']:.2f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
