"""Where batch_norm_train_fused's time goes: %globaltimer stamps per block, and the driver's occupancy.

For the NHWC 256x64x32x32 training cases of benchmarks/cuda_ops.py (float32, float16), each
``--vary`` set laid over ``{"BN_FUSED": 1}`` and the served parameters:

* the whole call queued behind a sleeping kernel (cuda_ops.time_queued), with the served
  (two-pass) plan beside it;
* one more call built with BN_FUSED_PROFILE 1: thread 0 of every block stamps %globaltimer at
  the start, after issuing pass 1's loads, after the block's partials, after each grid barrier
  and at the end; printed as the median and the latest block, in µs from the earliest start;
* cuOccupancyMaxActiveBlocksPerMultiprocessor for the kernel as launched (a cooperative grid
  needs one block an SM).

    python3 benchmarks/experiments/bn_fused_phases.py [--vary '{"BN_FUSED_THREADS": 256}' ...]
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cuda_ops as B

from hal import device as hal_device

PHASES = ("start", "pass-1 loads issued", "partials written", "barrier 1", "finalize + barrier 2", "end")


def with_defines(be: Any, hal_call: Any, defines: dict[str, int]) -> Any:
    """hal_call with batch_norm_train_fused built with `defines` as well (experiments' -D, not parameters)."""
    def call(i: int, params: dict[str, int]) -> None:
        run = be._run

        def patched(plan: Any, bufs: Any) -> None:
            run(tuple(dataclasses.replace(launch, defines=tuple(sorted({**dict(launch.defines), **defines}.items())))
                      if launch.kernel == "batch_norm_train_fused" else launch for launch in plan), bufs)

        saved = be.__dict__.get("_run")  # profile_once may have laid its own over the method
        be._run = patched
        try:
            hal_call(i, params)
        finally:
            if saved is None:
                del be._run
            else:
                be._run = saved

    return call if defines else hal_call


def profile_once(be: Any, hal_call: Any, params: dict[str, int], c: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """One call with batch_norm_train_fused built with BN_FUSED_PROFILE 1; its plan and buffers."""
    kept: list[Any] = []
    run = be._run

    def profiled(plan: Any, bufs: Any) -> None:
        plan = tuple(dataclasses.replace(launch, defines=tuple(sorted((*launch.defines, ("BN_FUSED_PROFILE", 1)))))
                     if launch.kernel == "batch_norm_train_fused" else launch for launch in plan)
        kept.append((plan, dict(bufs)))
        run(plan, bufs)

    g = be._sms
    be._workspace_buffer("bn_part", 12 * c * g + 64 * g + 64)  # room for the stamps after the partials
    be._run = profiled  # an instance attribute over the method, removed again below
    try:
        hal_call(0, params)
    finally:
        del be._run
    be.synchronize()
    return kept[-1]


def phases(be: Any, launch: Any, part: Any, c: int) -> dict[str, Any]:
    """The driver's occupancy for `launch` and the blocks' stamps, in µs from the earliest start."""
    from hal.backends import cuda as hc

    occ_fn = hc._libcuda().cuOccupancyMaxActiveBlocksPerMultiprocessor
    occ_fn.restype = ctypes.c_int
    n = ctypes.c_int()
    g = be._sms
    with be._active():
        status = occ_fn(ctypes.byref(n), ctypes.c_void_p(be._pdl_function(launch)), ctypes.c_int(launch.block[0]),
                        ctypes.c_size_t(launch.shared))
    raw = np.empty(3 * c * g + 16 * g + 16, np.float32)
    with be._active():
        be._drv.memcpy_dtoh(raw, int(part))
    off = (3 * c * g + 1) & ~1
    stamps = raw[off:off + 16 * g].view(np.uint64).reshape(g, 8)[:, :6].astype(np.int64)
    rel = (stamps - stamps[:, 0].min()) / 1000.0
    return {"occupancy": int(n.value), "occupancy_status": status, "shared": launch.shared,
            "phases_median_us": [float(np.median(rel[:, i])) for i in range(6)],
            "phases_max_us": [float(rel[:, i].max()) for i in range(6)]}


def run_case(torch: Any, F: Any, dev: Any, case: Any, varies: list[dict[str, int]]) -> list[dict[str, Any]]:
    """The served plan and each BN_FUSED variant of one case."""
    be = dev.backend
    hal_call, _ref, check, spec = B.setup_bn(torch, F, be, case)
    served = dict(dev.tuner.resolve_spec(spec).params)
    two_pass, _ = B.time_queued(torch, lambda i: hal_call(i, served))
    print(f"{case.name} {case.dtype}: served queued {two_pass:.4f} ms", flush=True)
    rows = []
    for extra in varies:
        # keys "D:NAME" are -D defines of the fused kernel's build (experiments), the rest parameters
        defines = {k[2:]: int(v) for k, v in extra.items() if k.startswith("D:")}
        params = {**served, "BN_FUSED": 1, **{k: v for k, v in extra.items() if not k.startswith("D:")}}
        call = with_defines(be, hal_call, defines)
        ok, detail = check(params) if not defines else (None, "experiment build")
        whole, _ = B.time_queued(torch, lambda i, params=params, call=call: call(i, params))
        plan, bufs = profile_once(be, call, params, spec.c)
        row: dict[str, Any] = {"case": case.name, "dtype": case.dtype, "extra": extra, "ok": ok, "detail": detail,
                               "queued_ms": whole, "two_pass_ms": two_pass, "kernels": [x.kernel for x in plan]}
        if plan[0].kernel == "batch_norm_train_fused":
            row.update(phases(be, plan[0], bufs["part"], spec.c))
        rows.append(row)
        line = (f"  {json.dumps(extra)}: ok={ok} {detail} queued {whole:.4f} ms ({two_pass / whole:.2f}x two-pass) "
                f"kernels {row['kernels']}")
        if "phases_median_us" in row:
            line += (f" occupancy {row['occupancy']} (status {row['occupancy_status']}), "
                     f"shared {row['shared']}\n    "
                     + " | ".join(f"{name} {m:.1f}/{x:.1f}" for name, m, x in
                                  zip(PHASES, row["phases_median_us"], row["phases_max_us"], strict=True)))
        print(line, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vary", action="append", default=[], help="JSON parameters over BN_FUSED 1 (repeatable)")
    ap.add_argument("--out", default="", help="folder for bn_fused_phases.json")
    args = ap.parse_args(argv)

    import torch
    import torch.nn.functional as F

    dev = hal_device("cuda:0")
    cases = [c for c in B.build_cases(True) if c.family == "batch_norm" and c.key["mode"] == "train"
             and c.layout == "NHWC"]
    varies = [{}] + [json.loads(v) for v in args.vary]
    rows = [row for case in cases for row in run_case(torch, F, dev, case, varies)]
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "bn_fused_phases.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
