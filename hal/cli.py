"""The ``hal`` command: ``hal devices`` and ``hal conformance``."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import hal
from hal.cache import cache_root
from hal.conformance import DEFAULT_DTYPES, iter_matrix
from hal.device import Device, backend_status, devices, is_gpu
from hal.dtypes import DTYPE_NAMES, FLOAT_DTYPES
from hal.errors import HalError


def _console(stderr: bool = False) -> Console:
    """A console that keeps tables readable in CI logs (no terminal: 160 columns)."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else 160)


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def cmd_devices(args: argparse.Namespace) -> int:
    """Print every device and, for each missing backend, why and how to get it."""
    console = _console()
    statuses = backend_status()
    if args.json:
        doc = {
            "devices": [{"id": d.id, **d.info.signature(), "global_mem_bytes": d.info.global_mem_bytes,
                         "platform": d.info.platform} for d in devices()],
            "unavailable": {s.name: s.reason for s in statuses if not s.available},
            "skipped": {where: why for s in statuses for where, why in s.skipped.items()},
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
            console.print(f"[yellow]{s.name} unavailable[/yellow]: {escape(s.reason)}")
        elif s.skipped:  # a device found but left out (an OpenCL driver that cannot build)
            console.print(f"[yellow]{s.name}[/yellow]: {escape(s.reason)}")
    return 0


def _select(spec: str | None) -> list[Device]:
    if spec is None or spec.strip() in ("", "all"):
        return devices()
    chosen: list[Device] = []
    for part in spec.split(","):
        if part.strip():  # "cpu,," is cpu once
            dev = hal.device(part.strip())
            if dev not in chosen:
                chosen.append(dev)
    return chosen


def _known_dtypes(dtypes: list[str], console: Console) -> bool:
    """Whether every ``--dtype`` value is one hal's ops take; says which are not."""
    known = [DTYPE_NAMES[d] for d in FLOAT_DTYPES] + ["int8", "uint8"]
    unknown = [d for d in dtypes if d not in known]
    if unknown:
        console.print(f"[red]--dtype: expected {', '.join(known[:-1])} or {known[-1]}, got {', '.join(unknown)}[/red]")
    return not unknown


def cmd_conformance(args: argparse.Namespace) -> int:
    """Run the conformance matrix; exit status 1 on any failure."""
    console = _console(stderr=args.json)
    targets = _select(args.device)
    if not targets:
        console.print("[red]no device available[/red]")
        return 1
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    dtypes = args.dtype.split(",") if args.dtype else list(DEFAULT_DTYPES)
    if not _known_dtypes(dtypes, console):
        return 2
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
    skipped = [r for r in results if r.skipped]
    passed = len(results) - len(failures) - len(skipped)
    if args.json:
        print(json.dumps({"seed": seed, "passed": passed, "failed": len(failures), "skipped": len(skipped),
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
        if all(g.skipped for g in group):
            table.add_row(dev, op, dt, lay, str(len(group)), "-", "[yellow]skip[/yellow]")
            continue
        table.add_row(dev, op, dt, lay, str(len(group)), f"{max(g.max_error for g in group):.2e}",
                      "[green]pass[/green]" if not bad else f"[red]FAIL {len(bad)}[/red]")
    console.print(table)
    for why in sorted({r.skipped for r in skipped}):
        console.print(f"[yellow]skipped[/yellow] {sum(r.skipped == why for r in skipped)} cases: {escape(why)}")
    for r in failures:
        console.print(f"[red]FAIL[/red] {r.device} {r.op} {escape('[' + r.case + ']')} {r.dtype} {r.layout}: "
                      f"{escape(r.detail)}")
    for s in backend_status():
        if not s.available:
            console.print(f"[yellow]skipped {s.name}[/yellow]: {escape(s.reason)}")
    console.print(f"{passed} passed, {len(failures)} failed" + (f", {len(skipped)} skipped" if skipped else ""))
    return 1 if failures else 0


def _budget(text: str | None) -> float | None:
    if not text:
        return None
    units = {"s": 1, "m": 60, "h": 3600}
    unit = text[-1].lower()
    try:
        seconds = float(text[:-1]) * units[unit] if unit in units else float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected e.g. 90s, 10m or 1h, got {text!r}") from exc
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive time such as 90s, 10m or 1h, got {text!r}")
    return seconds


def _budget_arg(text: str) -> str:
    """argparse type of --budget: checked when parsed (exit 2, the option named), kept as text."""
    _budget(text)
    return text


def _int_at_least(minimum: int) -> Callable[[str], int]:
    """argparse type: an integer >= ``minimum``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from exc
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value
    return parse


def _layouts_arg(text: str) -> str:
    """argparse type of --layout: NCHW, NHWC or both, comma-separated."""
    if not text or any(v not in ("NCHW", "NHWC") for v in text.split(",")):
        raise argparse.ArgumentTypeError(f"expected NCHW, NHWC or both comma-separated, got {text!r}")
    return text


def _writable_file(text: str) -> str:
    """argparse type of an output file: its folder exists and it is not a folder itself (checked before the run
    that produces it, not after)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"expected a file path, got the folder {text!r}")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"the folder {str(path.parent)!r} of {text!r} does not exist")
    return text


def _user_table_path(dev: Device) -> Path:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", dev.info.name).strip("-").lower() or "device"
    return cache_root() / "tuning" / f"{dev.kind}-{slug}.json"


def cmd_tune(args: argparse.Namespace) -> int:
    """``hal tune`` (search), ``hal tune show`` and ``hal tune merge A B --out C [--drop-stale]``."""
    from hal.tuning import tuner, workloads

    console = _console()
    if args.action == "merge":
        if len(args.files) < (1 if args.drop_stale else 2) or not args.out:
            console.print("[red]hal tune merge: expected two or more table files (one with --drop-stale) "
                          "and --out FILE[/red]")
            return 2
        docs = []
        for f in args.files:
            why = "no such file"
            try:
                doc = tuner.read_table(Path(f)) if Path(f).is_file() else None
            except (OSError, ValueError) as exc:  # JSONDecodeError is a ValueError
                doc, why = None, str(exc)
            if doc is not None and not (isinstance(doc, dict) and isinstance(doc.get("entries", []), list)
                                        and all(isinstance(e, dict) for e in doc.get("entries", []))):
                doc, why = None, "not a hal tuning table (an object with a list of entry objects)"
            if doc is None:
                console.print(f"[red]hal tune merge: {escape(f)}: {escape(why)}[/red]")
                return 2
            docs.append(doc)
        out_path = Path(args.out)
        if out_path.is_dir() or not out_path.parent.is_dir():
            console.print(f"[red]hal tune merge: --out {escape(args.out)}: expected a file in an existing folder[/red]")
            return 2
        backends = {d.get("backend") for d in docs if d}
        if len(backends) != 1:
            console.print(f"[red]hal tune merge: tables of different backends {sorted(map(str, backends))}[/red]")
            return 2
        backend = str(backends.pop())
        merged = tuner.merge_entries(*[d.get("entries", []) for d in docs], backend=backend)
        if args.drop_stale:
            merged, dropped = tuner.drop_stale_entries(merged, backend)
            for entry, why in dropped:
                console.print(f"dropped {escape(tuner.describe_entry(entry))}: {escape(why)}")
        tuner.write_table_atomic(Path(args.out), tuner.new_table(backend, merged))
        console.print(f"merged {sum(len(d.get('entries', [])) for d in docs)} entries into {len(merged)}: {args.out}")
        return 0
    if args.files:
        console.print(f"[red]hal tune {args.action}: table files are for 'hal tune merge' (got "
                      f"{escape(' '.join(args.files))}); --out names the table to write[/red]")
        return 2
    dev = hal.device(args.device)
    kernels = args.ops.split(",") if args.ops else None
    dtypes = args.dtype.split(",") if args.dtype else ["float32", "float16"]
    if not _known_dtypes(dtypes, console):
        return 2
    layouts = args.layout.split(",") if args.layout else ["NCHW", "NHWC"]
    plan = list(workloads.plans(workloads.select(kernels), dtypes, layouts))
    size = args.size if args.size != "auto" else ("full" if is_gpu(dev) else "small")
    if args.action == "show":
        table = Table(title=f"parameters serving {dev.id} ({dev.info.name})")
        for col in ("kernel", "workload", "dtype", "layout", "level", "params", "provenance"):
            table.add_column(col)
        for wl, dt, lay in plan:
            resolved = dev.tuner.resolve_spec(wl.spec_for(wl.shape(size), dt, lay))
            table.add_row(wl.kernel, wl.name, dt, lay, resolved.level,
                          " ".join(f"{k}={v}" for k, v in sorted(resolved.params.items())), resolved.provenance)
        console.print(table)
        return 0
    out = Path(args.out) if args.out else _user_table_path(dev)
    try:  # the table this run merges into: read (and checked) before the search, not after
        existing = tuner.read_table(out).get("entries", []) if out.exists() else []
    except (OSError, ValueError, AttributeError) as exc:
        console.print(f"[red]hal tune: --out {escape(str(out))}: cannot read it as a tuning table to merge "
                      f"into ({escape(str(exc))})[/red]")
        return 2
    journal = out.with_name(out.name + ".journal.jsonl")
    start = time.monotonic()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[extra]}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("tuning", total=None, extra="")

        def report(what: str, done: int, total: int, best: float | None, left: float | None) -> None:
            extra = f"best {best:.4f} ms" if best is not None else "no valid candidate yet"
            if left is not None:
                extra += f", {left:.0f} s left"
            progress.update(task, description=what, completed=done, total=total, extra=extra)

        outcomes = tuner.tune(dev, plan, mode=args.mode, size=size, budget_s=_budget(args.budget),
                              journal_path=journal, repeats=args.repeats, seed=args.seed, progress=report)
    entries = tuner.table_entries(dev, outcomes, size, args.mode)
    tuner.write_table_atomic(out, tuner.new_table(dev.kind, tuner.merge_entries(existing, entries,
                                                                                backend=dev.kind)))
    unfinished = [o for o in outcomes if not o.finished]
    if not unfinished:
        journal.unlink(missing_ok=True)
    dev.tuner.clear()
    table = Table(title=f"hal tune {args.mode} on {dev.id} ({dev.info.name}), {size} shapes, "
                        f"{time.monotonic() - start:.0f} s")
    for col in ("workload", "dtype", "layout", "tried", "rejected", "over limit", "default ms", "served ms", "best ms",
                "speed-up", "kept"):
        table.add_column(col)
    for o in outcomes:
        speed = f"{o.default_ms / o.best_ms:.2f}x" if o.default_ms and o.best_ms else "-"
        table.add_row(o.workload, o.dtype, o.layout, str(o.tried), str(len(o.rejected)), str(len(o.over_limit)),
                      f"{o.default_ms:.4f}" if o.default_ms else "-",
                      f"{o.serving_ms:.4f}" if o.serving_ms else "-", f"{o.best_ms:.4f}" if o.best_ms else "-",
                      speed, "yes" if o.kept else "no")
    console.print(table)
    for o in outcomes:
        for params, status, detail in o.rejected:
            console.print(f"[yellow]rejected[/yellow] {o.workload} {o.dtype} {o.layout} {params}: {status} "
                          f"{escape(detail)}")
    same = sum(o.same_kernel for o in outcomes)
    if same:
        console.print(f"{same} candidates launched exactly what an earlier candidate did (parameters that do not "
                      "apply to the workload) and were replaced by spares")
    for o in outcomes:
        if o.screened is not None:
            console.print(f"{o.workload} {o.dtype} {o.layout}: {o.screened[0]} of {o.screened[1]} parameters change "
                          "its kernels at the default (screened one at a time; 3 of 4 draws vary only those)")
    over = sum(len(o.over_limit) for o in outcomes)
    if over:
        console.print(f"{over} candidates were over a compiled kernel's own launch limit and were replaced by spares "
                      "(not wrong: the limit is known only after the build)")
    console.print(f"{len(entries)} entries written to {out}")
    if unfinished:
        console.print(f"[yellow]the budget ran out with {len(unfinished)} of {len(outcomes)} workloads unfinished; "
                      f"the journal {journal} is kept: the same command again resumes, skipping every candidate "
                      "already measured[/yellow]")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    """Per op and shape: time, GB/s, GFLOP/s, share of copy bandwidth, ratio to PyTorch, tuning level."""
    from hal import bench

    console = _console()
    targets = devices() if args.all else [hal.device(args.device)]
    ops = args.ops.split(",") if args.ops else None
    if ops:
        known = {c.op for c in bench.CASES} | {c.name for c in bench.CASES}
        unknown = [o for o in ops if o not in known]
        if unknown:
            console.print(f"[red]--ops: expected op or case names ({', '.join(sorted(known))}), got "
                          f"{escape(', '.join(unknown))}[/red]")
            return 2
    dtypes = tuple(args.dtype.split(",")) if args.dtype else ("float32", "float16")
    if not _known_dtypes(list(dtypes), console):
        return 2
    layouts = tuple(args.layout.split(",")) if args.layout else ("NCHW", "NHWC")
    with Progress(TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task("bench", total=None)
        rows = bench.run(targets, ops, dtypes, layouts, size="quick" if args.quick else args.size,
                         repeats=3 if args.quick else args.repeats, with_torch=not args.no_torch,
                         progress=lambda what: progress.update(task, description=what))
    table = Table(title="hal bench (median of repeats; ms = the kernels' device time, op ms = one public call; "
                        "bytes = inputs once + outputs once)")
    for col in ("device", "case", "dtype", "layout", "shape", "ms", "op ms", "GB/s", "GFLOP/s", "of copy BW",
                "torch ms", "vs torch", "tuning"):
        table.add_column(col)
    for r in rows:
        table.add_row(r.device, r.case, r.dtype, r.layout, r.shape, f"{r.ms:.4f}", f"{r.op_ms:.4f}", f"{r.gbps:.1f}",
                      f"{r.gflops:.1f}" if r.gflops else "-",
                      f"{r.copy_share:.0%}" if r.copy_share is not None else "-",
                      f"{r.torch_ms:.4f}" if r.torch_ms else "-",
                      f"{r.speedup_vs_torch:.2f}x" if r.speedup_vs_torch else "-", r.tuning_level)
    console.print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(bench.to_json(rows), indent=1))
    if args.plot:
        try:
            bench.plot_roofline(rows, args.plot)
        except ImportError:
            console.print("[yellow]--plot needs matplotlib: pip install 'hal-kernels[plot]'[/yellow]")
            return 1
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """``hal demo cnn16``: the 16-layer CNN on every device, logits checked against the oracle."""
    from hal import demo

    console = _console()
    targets = devices() if args.all or not args.device else [hal.device(args.device)]
    batch = 8 if args.quick else args.batch
    results, _ = demo.run(targets, batch=batch, dtype=args.dtype, layout=args.layout,
                          repeats=2 if args.quick else args.repeats)
    names = [name for name, _ in results[0].layer_ms] if results else []
    table = Table(title=f"cnn16 per-layer time (ms), batch {batch}, {args.dtype} {args.layout}, fused")
    table.add_column("layer")
    for r in results:
        table.add_column(r.device)
    for i, name in enumerate(names):
        table.add_row(name, *[f"{r.layer_ms[i][1]:.3f}" for r in results])
    console.print(table)
    bad = 0
    for r in results:
        ok = r.agrees and r.same_predictions
        bad += not ok
        console.print(f"{r.device}: {r.images_per_s:,.0f} images/s ({r.graph_images_per_s:,.0f} replayed from "
                      f"hal.capture, {r.graph_mode}), logits max error {r.max_error:.2e} of the "
                      f"largest (limit {demo.RTOL[args.dtype]:.0e}), predictions "
                      f"{'match' if r.same_predictions else 'DIFFER'} -> "
                      + ("[green]agrees with the oracle[/green]" if ok else "[red]DISAGREES[/red]"))
    return 1 if bad else 0


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
    p.add_argument("--seed", type=_int_at_least(0), help="random seed (default: fresh; printed for reproduction)")
    p.add_argument("--dtype", help="float32,float16,bfloat16,int8,uint8 (default float32,float16,bfloat16,int8; "
                                   "int8/uint8 run the quantized cases against the quantized oracle)")
    p.add_argument("--layout", type=_layouts_arg, help="NCHW,NHWC (default both)")
    p.set_defaults(func=cmd_conformance)
    p = sub.add_parser("tune", help="measure a tuning table for a device (also: tune show, tune merge A B --out C)")
    p.add_argument("action", nargs="?", choices=["run", "show", "merge"], default="run")
    p.add_argument("files", nargs="*", help="tables to merge")
    p.add_argument("--device", help="device to tune (default: the selected device)")
    p.add_argument("--ops", help="kernel families (pool2d,adaptive_pool2d,conv2d,batch_norm) or workload names "
                                 "such as avgpool3x3s2p1, comma-separated (default all)")
    p.add_argument("--mode", choices=["rapid", "normal", "exhaustive"], default="normal")
    p.add_argument("--budget", type=_budget_arg, help="time limit, e.g. 10m")
    p.add_argument("--out", help="table file to write (default: the user table of this device)")
    p.add_argument("--size", choices=["auto", "full", "small", "tiny"], default="auto",
                   help="workload sizes (auto: full on GPUs, small on CPUs)")
    p.add_argument("--dtype", help="float32,float16,bfloat16,int8,uint8 (default float32,float16; int8/uint8 tune the "
                                   "pooling workloads, checked against the quantized oracle)")
    p.add_argument("--layout", type=_layouts_arg, help="NCHW,NHWC (default both)")
    p.add_argument("--repeats", type=_int_at_least(1), default=10, help="timed runs per candidate (median)")
    p.add_argument("--seed", type=_int_at_least(0), help="random seed for inputs and candidate sampling")
    p.add_argument("--drop-stale", action="store_true",
                   help="merge: leave out measured entries whose kernel sources changed since they were measured "
                        "(after a kernel edit, where a re-tune kept no entry for a key)")
    p.set_defaults(func=cmd_tune)
    p = sub.add_parser("bench", help="time every op against the device's copy bandwidth and PyTorch")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--device", help="device to measure (default: the selected device)")
    group.add_argument("--all", action="store_true", help="every device found")
    p.add_argument("--ops", help="ops or case names, comma-separated (default all)")
    p.add_argument("--dtype", help="float32,float16,bfloat16 (default float32,float16)")
    p.add_argument("--layout", type=_layouts_arg, help="NCHW,NHWC (default both)")
    p.add_argument("--size", choices=["auto", "full", "small"], default="auto",
                   help="auto: the baseline shapes on GPUs with 8 GB or more, about 16 MB inputs elsewhere")
    p.add_argument("--quick", action="store_true", help="tiny shapes, 3 repeats (a smoke test)")
    p.add_argument("--repeats", type=_int_at_least(1), default=20)
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch comparison")
    p.add_argument("--json", type=_writable_file, help="write the rows as JSON")
    p.add_argument("--plot", type=_writable_file, help="draw a roofline chart (PNG) with matplotlib")
    p.set_defaults(func=cmd_bench)
    p = sub.add_parser("demo", help="hal demo cnn16: the 16-layer CNN on every device against the oracle")
    p.add_argument("name", choices=["cnn16"])
    group = p.add_mutually_exclusive_group()
    group.add_argument("--device", help="one device (default: every device found)")
    group.add_argument("--all", action="store_true", help="every device found")
    p.add_argument("--quick", action="store_true", help="batch 8, 2 repeats")
    p.add_argument("--batch", type=_int_at_least(1), default=64)
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    p.add_argument("--layout", choices=["NCHW", "NHWC"], default="NCHW")
    p.add_argument("--repeats", type=_int_at_least(1), default=5)
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hal`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except HalError as exc:
        _console(stderr=True).print(f"[red]hal: {escape(str(exc))}[/red]")
        return 2


if __name__ == "__main__":
    sys.exit(main())
