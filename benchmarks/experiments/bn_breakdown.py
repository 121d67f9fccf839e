"""Where BatchNorm training's time goes on the CUDA backend: the whole call and each launch.

For the four 256x64x32x32 training cases of benchmarks/cuda_ops.py (fp32/fp16, NCHW/NHWC),
with the parameters the tables serve and with each ``--vary`` set laid over them:

* the output checked against PyTorch first (as cuda_ops.py checks),
* the whole call, queued behind a sleeping kernel (cuda_ops.time_queued: GPU ms per call of
  20 calls run back to back, inputs rotated past the L2),
* each launch of the plan alone, timed the same way (its inputs rotated too, so the apply
  pass alone finds no x in L2 that the statistics pass left there: the whole call can be
  less than the sum),
* a PyTorch copy of the tensor's size (one read, one write) and its read-only half as the
  ceilings.

    python3 benchmarks/experiments/bn_breakdown.py [--vary '{"BN_STATS_SUMS": 32}' ...] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cuda_ops as B

from hal import device as hal_device


def measure(torch: Any, be: Any, case: Any, hal_call: Any, check: Any, params: dict[str, int]) -> dict[str, Any]:
    """One case under one parameter set: the check, the whole call and each launch, queued."""
    ok, detail = check(params)
    whole, host_us = B.time_queued(torch, lambda i: hal_call(i, params))
    n_sets = B.nsets_for(case.nbytes)
    recorded: list[tuple[Any, dict[str, Any]]] = []  # each set's plan and buffers, from real calls
    run = be._run

    def record(plan: Any, bufs: Any) -> None:
        recorded.append((plan, dict(bufs)))
        run(plan, bufs)

    be._run = record  # an instance attribute over the method, removed again below
    try:
        for i in range(n_sets):
            hal_call(i, params)
    finally:
        del be._run
    be.synchronize()

    def alone(k: int) -> float:
        def one(i: int) -> None:
            plan, bufs = recorded[i % n_sets]
            be._run((plan[k],), bufs)

        return B.time_queued(torch, one)[0]

    parts = [{"kernel": launch.kernel, "grid": launch.grid[0], "block": launch.block[0], "ms": alone(k)}
             for k, launch in enumerate(recorded[0][0])]
    return {"ok": ok, "detail": detail, "whole_ms": whole, "host_us": host_us, "parts": parts}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vary", action="append", default=[], help="JSON parameters over the served ones (repeatable)")
    ap.add_argument("--only", default="", help="cases whose name or dtype contains this text")
    ap.add_argument("--out", default="", help="folder for bn_breakdown.json")
    args = ap.parse_args(argv)

    import torch
    import torch.nn.functional as F

    dev = hal_device("cuda:0")
    be = dev.backend  # hal's own runtime for the device, as the ops use it
    cases = [c for c in B.build_cases(True) if c.family == "batch_norm" and c.key["mode"] == "train"
             and (not args.only or args.only in c.name or args.only in c.dtype)]
    rows: list[dict[str, Any]] = []
    for case in cases:
        hal_call, _ref, check, spec = B.setup_bn(torch, F, be, case)
        served = dict(dev.tuner.resolve_spec(spec).params)
        _, copy_q = B.same_size_copy_ms(torch, case.nbytes)
        for extra in [{}] + [json.loads(v) for v in args.vary]:
            params = {**served, **extra}
            row = {"case": case.name, "dtype": case.dtype, "params": params, "extra": extra,
                   **measure(torch, be, case, hal_call, check, params), "copy_queued_ms": copy_q}
            rows.append(row)
            print(f"{case.name} {case.dtype} {json.dumps(extra)}: ok={row['ok']} {row['detail']} "
                  f"whole {row['whole_ms']:.4f} ms ({100 * copy_q / row['whole_ms']:.1f} % of a same-size copy, "
                  f"{copy_q:.4f} ms) | "
                  + " | ".join(f"{p['kernel']} <{p['grid']}x{p['block']}> {p['ms']:.4f}" for p in row["parts"]),
                  flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "bn_breakdown.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
