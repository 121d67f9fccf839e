"""How OpenCL BatchNorm training's launches scale with the batch: fixed cost against bandwidth.

For C = 64, 32x32 planes and each batch N of ``--batches``, float16 and float32, NCHW and
NHWC, with the parameters the tables serve (``--params`` laid over them): each launch of one
training call, queued (``OpenCLBackend.launch_profile(queued=True)``, median of ``--repeats``),
its inputs rotated through ``--rotate`` MB of copies (``opencl_ops.py --rotate``), and a
device copy of x's bytes timed the same way. A least-squares line through each launch's
times against x's bytes gives its fixed cost (the intercept, µs) and the bandwidth of the
rest (bytes of x over the slope; the statistics pass reads x once, the apply pass reads it
and writes y). A statistics pass whose intercept dwarfs the copy's is paying per launch,
not per byte.

    python3 benchmarks/experiments/ocl_bn_scaling.py --device opencl:nvidia [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import opencl_ops as B

import hal


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through (xs, ys)."""
    slope, intercept = np.polyfit(np.asarray(xs), np.asarray(ys), 1)
    return float(intercept), float(slope)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="opencl:nvidia")
    ap.add_argument("--batches", default="32,64,128,256,512")
    ap.add_argument("--dtypes", default="float16,float32")
    ap.add_argument("--layouts", default="NCHW,NHWC")
    ap.add_argument("--params", default="{}", help="JSON laid over the served parameters")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--rotate", type=int, default=256, metavar="MB")
    ap.add_argument("--out", default=".")
    args = ap.parse_args(argv)
    dev = hal.device(args.device)
    be = dev.backend
    case = next(c for c in B.CASES if c.name == "bn train fwd")
    rng = np.random.default_rng(0)
    rows: list[dict[str, Any]] = []
    print(f"# {dev.id}: {dev.info.name}, rotate {args.rotate} MB, queued launches (ms)")
    for dtype in args.dtypes.split(","):
        for layout in args.layouts.split(","):
            series: dict[str, list[tuple[float, float]]] = {}
            for n in map(int, args.batches.split(",")):
                spec = B.make_spec(case, (n, 64, 32, 32), dtype, layout)
                params = {**dict(dev.tuner.resolve_spec(spec).params), **json.loads(args.params)}
                runner = B.Runner(dev, spec, rng, args.rotate * 2**20)
                launches = B.launch_breakdown(be, runner.call(params), args.repeats, queued=True)
                nbytes = runner.x_host.nbytes
                sets = runner.sets
                turn = [0]

                def copy(sets: list[Any] = sets, turn: list[int] = turn, nbytes: int = nbytes) -> None:
                    src, dst = sets[turn[0] % len(sets)]  # x's bytes into its own y, rotated as the op
                    be.copy(src, dst, nbytes)
                    turn[0] += 1

                copy_ms = statistics.median(be.time_launches(copy, args.repeats, warmup=3, queued=True)) * 1e3
                whole = max(r["end_ms"] for r in launches)
                row = {"dtype": dtype, "layout": layout, "n": n, "x_bytes": nbytes, "params": params,
                       "launches": launches, "whole_ms": whole, "copy_ms": copy_ms}
                rows.append(row)
                for r in launches:
                    series.setdefault(r["kernel"], []).append((nbytes, r["ms"]))
                series.setdefault("copy x -> y", []).append((nbytes, copy_ms))
                series.setdefault("whole call", []).append((nbytes, whole))
                print(f"{dtype} {layout} N={n:4d} x {nbytes / 1e6:7.1f} MB: "
                      + ", ".join(f"{r['kernel']} {r['start_ms']:.4f}+{r['ms']:.4f}" for r in launches)
                      + f"; whole {whole:.4f}; copy {copy_ms:.4f}", flush=True)
                del runner
            for name, pts in series.items():
                a, b = fit([p[0] for p in pts], [p[1] for p in pts])
                print(f"  {dtype} {layout} {name:28s} fixed {a * 1e3:6.1f} us, then x's bytes at "
                      f"{1 / b / 1e6 if b > 0 else float('nan'):7.0f} GB/s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ocl_bn_scaling.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
