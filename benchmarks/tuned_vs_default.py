"""Tuned against default: the same hal bench cases under three tuning configurations.

For each case of ``hal.bench.CASES`` (the baseline shapes, scaled to the device as
``hal bench`` scales them), per dtype and layout, in one process and interleaved case by
case (so that drift in clocks or temperature hits all three alike):

* ``default``: ``HAL_TUNING=off``, the backend's schema defaults;
* ``shipped``: the tables shipped with hal (whatever level of the fallback chain serves);
* ``tuned``: the shipped tables plus the table written by ``hal tune --out FILE``, given
  here with ``--table FILE`` (read through ``HAL_TUNING_PATH``, the user level).

Shapes are the tuner's workload shapes at ``--size`` (auto: full on GPUs, small
elsewhere, as ``hal tune`` picks), so the tuned entries' buckets are the ones timed.

Each configuration is timed as ``hal bench`` times it (the public op, the backend's
``time_launches``: device events on GPUs, warm-up then the median of repeats). Run it with
a fresh ``HAL_CACHE_DIR`` so that no older user table joins the ``default``/``shipped``
runs. The table printed last has ms per configuration and the ratios default/tuned and
shipped/tuned (above 1: the tuned table is faster).

    python3 benchmarks/tuned_vs_default.py --device cuda:0 --table tuned.json [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import hal
from hal import bench
from hal.device import is_gpu
from hal.tuning import workloads

MODES = ("default", "shipped", "tuned")
#: hal bench case -> the tuner workload measured at the same op and arguments
WORKLOAD_OF = {"maxpool2x2s2 4096^2": "maxpool2x2s2", "bn train fwd": "bn train"}


def tuner_shapes(size: str) -> dict[str, tuple[int, int, int, int]]:
    """Each bench case's input shape at the tuner's ``size``: the shapes its entries were measured at."""
    by_name = {w.name: w for w in workloads.WORKLOADS}
    return {c.name: by_name[WORKLOAD_OF.get(c.name, c.name)].shape(size) for c in bench.CASES}


def _configure(dev: Any, mode: str, table: str) -> None:
    os.environ.pop("HAL_TUNING", None)
    os.environ.pop("HAL_TUNING_PATH", None)
    if mode == "default":
        os.environ["HAL_TUNING"] = "off"
    elif mode == "tuned":
        os.environ["HAL_TUNING_PATH"] = table
    dev.tuner.clear()


def measure(device: str, table: str, ops: list[str] | None, dtypes: tuple[str, ...], layouts: tuple[str, ...],
            size: str, repeats: int) -> list[dict[str, Any]]:
    """One row per case, dtype and layout: ms and serving level under each mode."""
    dev = hal.device(device)
    if size == "auto":  # as hal tune chooses: full shapes on GPUs, small elsewhere
        size = "full" if is_gpu(dev) else "small"
    shapes = tuner_shapes(size)
    rows = []
    for case in bench.CASES:
        if ops and case.op not in ops and case.name not in ops:
            continue
        for dtype in dtypes:
            for layout in layouts:
                row: dict[str, Any] = {"device": dev.id, "case": case.name, "dtype": dtype, "layout": layout}
                for mode in MODES:
                    _configure(dev, mode, table)
                    try:
                        (r,) = bench.run([dev], [case.name], (dtype,), (layout,), "auto", repeats, with_torch=False,
                                         shapes=shapes)
                    except hal.errors.UnsupportedOperation:
                        row[mode] = None
                        continue
                    row[mode], row[f"{mode}_level"], row["shape"] = r.ms, r.tuning_level, r.shape
                rows.append(row)
    _configure(dev, "shipped", table)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Print (and optionally save) the tuned-against-default table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--table", required=True, help="the table `hal tune --out` wrote")
    ap.add_argument("--ops", default=None, help="ops or case names, comma-separated")
    ap.add_argument("--dtype", default="float32,float16")
    ap.add_argument("--layout", default="NCHW,NHWC")
    ap.add_argument("--size", default="auto", choices=("auto", "full", "small", "tiny"),
                    help="the tuner's workload size the table was measured at (auto: as hal tune picks)")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = measure(args.device, os.path.abspath(args.table), args.ops.split(",") if args.ops else None,
                   tuple(args.dtype.split(",")), tuple(args.layout.split(",")), args.size, args.repeats)
    print(f"{'case':<22}{'dtype':<9}{'layout':<7}{'default ms':>11}{'shipped ms':>11}{'tuned ms':>10}"
          f"{'def/tuned':>10}{'ship/tuned':>11}  tuned level")
    for r in rows:
        d, s, t = r.get("default"), r.get("shipped"), r.get("tuned")
        if t is None or d is None or s is None:
            print(f"{r['case']:<22}{r['dtype']:<9}{r['layout']:<7}  unsupported")
            continue
        print(f"{r['case']:<22}{r['dtype']:<9}{r['layout']:<7}{d:>11.4f}{s:>11.4f}{t:>10.4f}"
              f"{d / t:>10.2f}{s / t:>11.2f}  {r['tuned_level']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
