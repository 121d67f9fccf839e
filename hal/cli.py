"""The ``hal`` command: ``hal devices`` and ``hal conformance``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import hal
from hal.conformance import iter_matrix
from hal.device import Device, backend_status, devices
from hal.errors import HalError


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def cmd_devices(args: argparse.Namespace) -> int:
    """Print every device and, for each missing backend, why and how to get it."""
    console = Console()
    statuses = backend_status()
    if args.json:
        doc = {
            "devices": [{"id": d.id, **d.info.signature(), "global_mem_bytes": d.info.global_mem_bytes,
                         "platform": d.info.platform} for d in devices()],
            "unavailable": {s.name: s.reason for s in statuses if not s.available},
        }
        print(json.dumps(doc, indent=2))
        return 0
    table = Table(title="hal devices")
    for col in ("id", "name", "vendor", "arch", "CUs", "max WG", "local mem", "memory", "fp16"):
        table.add_column(col)
    for d in devices():
        i = d.info
        table.add_row(d.id, i.name, i.vendor, f"{i.arch_family}/{i.arch}", str(i.compute_units),
                      str(i.max_work_group), _fmt_bytes(i.local_mem_bytes), _fmt_bytes(i.global_mem_bytes),
                      "native" if i.fp16 else "storage")
    console.print(table)
    for s in statuses:
        if not s.available:
            console.print(f"[yellow]{s.name} unavailable[/yellow]: {s.reason}")
    return 0


def _select(spec: str | None) -> list[Device]:
    if spec in (None, "all"):
        return devices()
    return [hal.device(part) for part in spec.split(",")]


def cmd_conformance(args: argparse.Namespace) -> int:
    """Run the conformance matrix; exit status 1 on any failure."""
    console = Console(stderr=args.json)
    targets = _select(args.device)
    if not targets:
        console.print("[red]no device available[/red]")
        return 1
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    dtypes = args.dtype.split(",") if args.dtype else ["float32", "float16"]
    layouts = args.layout.split(",") if args.layout else ["NCHW", "NHWC"]
    results = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=args.json and not sys.stderr.isatty()) as progress:
        task = progress.add_task("conformance", total=None)
        for total, result in iter_matrix(targets, quick=args.quick, seed=seed, dtypes=dtypes, layouts=layouts):
            progress.update(task, total=total, advance=1,
                            description=f"{result.device} {result.op} {result.dtype} {result.layout}")
            results.append(result)
    failures = [r for r in results if not r.ok]
    if args.json:
        print(json.dumps({"seed": seed, "passed": len(results) - len(failures), "failed": len(failures),
                          "results": [r.__dict__ for r in results]}, indent=2, default=str))
        return 1 if failures else 0
    # one row per device x op x dtype x layout: worst error over its cases
    rows: dict[tuple[str, str, str, str], list] = {}
    for r in results:
        rows.setdefault((r.device, r.op, r.dtype, r.layout), []).append(r)
    table = Table(title=f"hal conformance against the float64 oracle (seed {seed})")
    for col in ("device", "op", "dtype", "layout", "cases", "max error", "result"):
        table.add_column(col)
    for (dev, op, dt, lay), group in rows.items():
        bad = [g for g in group if not g.ok]
        table.add_row(dev, op, dt, lay, str(len(group)), f"{max(g.max_error for g in group):.2e}",
                      "[green]pass[/green]" if not bad else f"[red]FAIL {len(bad)}[/red]")
    console.print(table)
    for r in failures:
        console.print(f"[red]FAIL[/red] {r.device} {r.op} [{r.case}] {r.dtype} {r.layout}: {r.detail}")
    for s in backend_status():
        if not s.available:
            console.print(f"[yellow]skipped {s.name}[/yellow]: {s.reason}")
    console.print(f"{len(results) - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``hal`` command."""
    parser = argparse.ArgumentParser(prog="hal", description="hal: pooling, conv and BatchNorm on any device")
    parser.add_argument("--version", action="version", version=f"hal {hal.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("devices", help="list devices, their signatures and limits, and missing backends")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_devices)
    p = sub.add_parser("conformance", help="check every op on every device against the float64 oracle")
    p.add_argument("--device", help="device(s), comma-separated (default: every device found)")
    p.add_argument("--quick", action="store_true", help="a smaller case set")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.add_argument("--seed", type=int, help="random seed (default: fresh; printed for reproduction)")
    p.add_argument("--dtype", help="float32,float16 (default both)")
    p.add_argument("--layout", help="NCHW,NHWC (default both)")
    p.set_defaults(func=cmd_conformance)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hal`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except HalError as exc:
        Console(stderr=True).print(f"[red]hal: {exc}[/red]")
        return 2


if __name__ == "__main__":
    sys.exit(main())
