"""CUDA int8/uint8 pooling: every ``quant_pool2d.cu`` kernel that can serve a case, side by side.

Method (one process, one GPU): for each case and each kernel variant the launcher can be made
to pick (NCHW: ``rows``, ``rows_b``, the one-thread-per-output contract kernel; NHWC:
``vec16``, ``vec4``, the contract kernel), the plan is built by ``CudaBackend._plan_qpool2d``
with the alignment it is told (16, 4, 1) or under ``force_generic``, and run on the same
buffers. With ``--experiments``, also the variants tried and dropped: ``[M16]``: the row
kernels built with 16 outputs per thread (``QROW_OUT=16``) instead of the launcher's 8;
``[minbN]``: the served fast kernel with ``QPOOL_MINB=N`` (registers capped so that N blocks
of 256 threads fit a multiprocessor); ``[tN]``: built and launched with N threads per block.

* check: every variant's output equals the contract kernel's byte for byte, each run on an
  output buffer filled with a different byte first (so an element a kernel leaves unwritten
  shows). The contract kernel itself is checked against the oracle by
  ``benchmarks/check_cuda.py --only quant``.
* "ms": median of 20 single calls between CUDA events; "b2b ms": median over 15 batches of 20
  back-to-back calls, per call (hides launch ramp and tail, as cuda_ops.py's figures do).
* traffic: one byte per input and output element; "% copy" against a device-to-device copy
  of 256 MiB measured in the same run (reads + writes).

Last, QLinearConv 3x3 64->64 pad 1, int8 in, weights and out (``quant_conv2d.cu``, the kernel the
launcher serves named in the table, checked exactly against the oracle, median of 10 single
calls, GOP/s = 2 x MACs / time): 16x64x32x32 and 256x64x32x32 (enough tiles for every
multiprocessor), NCHW and NHWC (tensor cores since ``qconv2d_k3_tc``; CUDA cores before).

``--profile`` runs each variant five times and nothing else (for ``ncu -k regex:...``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

import hal
from hal import spec as S

CASES = [  # name, kind, (N, C, H, W), kernel, stride, padding, zero point (avg)
    ("maxpool3x3s2p1", "max", (64, 64, 112, 112), 3, 2, 1, 0),
    ("avgpool3x3s2p1", "avg", (64, 64, 112, 112), 3, 2, 1, 3),
    ("maxpool2x2s2 4096^2", "max", (1, 1, 4096, 4096), 2, 2, 0, 0),
]


def time_qconv(be: Any, rng: np.random.Generator) -> list[dict[str, Any]]:
    """QLinearConv 3x3 64->64 pad 1 on 16 and 256 images of 64x32x32 int8 (int8 weights, int8 out),
    both layouts: the ``quant_conv2d.cu`` kernel the launcher serves (named in the row) checked
    exactly against the oracle, then timed (CUDA events, median of 10 single calls); GOP/s counts
    2 x MACs."""
    from hal import reference as R

    out = []
    for layout, batch in (("NCHW", 16), ("NHWC", 16), ("NCHW", 256), ("NHWC", 256)):
        shape, cout = (batch, 64, 32, 32), 64
        name = f"qconv3x3 64->64 {batch}x32x32"
        conv = S.conv2d_spec(S.TensorGeometry(*shape, layout, np.dtype(np.int8)), (cout, 64, 3, 3), False, None,
                             1, 1, 1, 1)
        spec = S.QConv2dSpec(conv, np.dtype(np.int8), np.dtype(np.int8), 3, -2, True)
        x = rng.integers(-128, 128, shape).astype(np.int8)
        w = rng.integers(-128, 128, conv.weight_shape).astype(np.int8)
        bias = rng.integers(-5000, 5000, cout).astype(np.int32)
        wz = np.zeros(cout, np.int32)
        m = np.full(cout, 1e-4, np.float32)
        want = R.qconv2d_from_spec(spec, x, w, bias, wz, m)
        phys = np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if layout == "NHWC" else x
        bufs = [be.upload(a) for a in (phys, w, bias)]
        n, c, oh, ow = conv.out_shape
        y, wzb, mb = be.allocate(n * c * oh * ow), be.upload(wz), be.upload(m)

        def call(bufs: Any = bufs, y: Any = y, wzb: Any = wzb, mb: Any = mb, spec: Any = spec) -> None:
            be.qconv2d(spec, bufs[0], bufs[1], bufs[2], y, wzb, mb, {})

        kernel = be._plan_qconv2d(spec, be.qconv_output_kind(spec, mb), int(bufs[0]) % 16 == 0)[0].kernel
        call()
        got = np.empty((n, oh, ow, c) if layout == "NHWC" else (n, c, oh, ow), np.int8)
        be.download(y, got)
        got = got.transpose(0, 3, 1, 2) if layout == "NHWC" else got
        check = "ok" if np.array_equal(got, want) else f"MISMATCH ({int((got != want).sum())})"
        ms = statistics.median(be.time_launches(call, 10, warmup=2)) * 1e3
        gops = 2 * n * c * oh * ow * 64 * 9 / (ms * 1e-3) / 1e9
        out.append({"case": name, "dtype": "int8", "layout": layout, "kernel": kernel, "ms": ms, "gops": gops,
                    "check": check})
        print(f"{name:22s} {'int8':6s} {layout:6s} {kernel:24s} {ms:8.4f} {gops:8.1f} GOP/s  {check}")
    return out


def main(argv: list[str] | None = None) -> int:
    """Time and check every variant; print a table, write ``quant_cuda.json`` to ``--out``."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--dtypes", default="int8,uint8")
    ap.add_argument("--only", default="", help="only cases whose name contains one of these comma-separated texts")
    ap.add_argument("--profile", action="store_true", help="run each variant 5 times, no timing or checks")
    ap.add_argument("--experiments", action="store_true",
                    help="also the variants that were tried and dropped: [M16], [minb6], [t128], [t512]")
    ap.add_argument("--out", default=".")
    args = ap.parse_args(argv)
    dev = hal.device(args.device)
    be = dev.backend
    rng = np.random.default_rng(12)
    nbytes = 256 * 2**20
    src, dst = be.upload(np.ones(nbytes // 4, np.float32)), be.allocate(nbytes)
    copy = 2 * nbytes / (statistics.median(be.time_launches(lambda: be.copy(src, dst, nbytes), 20)) * 1e9)
    print(f"# {dev}: copy {copy:.1f} GB/s")
    print(f"{'case':22s} {'dtype':6s} {'layout':6s} {'kernel':24s} {'ms':>8s} {'b2b ms':>8s} {'% copy':>7s}  check")
    rows: list[dict[str, Any]] = []
    only = [o for o in args.only.split(",") if o]
    for name, kind, shape, k, st, pad, zp in CASES:
        if only and not any(o in name for o in only):
            continue
        for dtype in args.dtypes.split(","):
            dt = np.dtype(dtype)
            info = np.iinfo(dt)
            for layout in ("NCHW", "NHWC") if shape[0] > 1 else ("NCHW",):
                g = S.TensorGeometry(*shape, layout, dt)
                spec = S.pool2d_spec(kind, S.plane_geometry(g), k, st, pad, 1, False, True, None, False)
                if kind == "avg":
                    spec = dataclasses.replace(spec, zero_point=zp)
                x_host = rng.integers(info.min, info.max + 1, shape).astype(dt)
                phys = x_host.transpose(0, 2, 3, 1) if layout == "NHWC" else x_host
                x = be.upload(np.ascontiguousarray(phys))
                out_n = int(np.prod(spec.out_shape))
                y = be.allocate(out_n)
                variants = [("align16", 16, False), ("align4", 4, False), ("align1", 1, False), ("contract", 16, True)]
                if args.experiments:
                    variants = [("t512", 16, False), ("t128", 16, False), ("minb6", 16, False),
                                ("rows16", 16, False), *variants]
                want = None
                for label, align, generic in reversed(variants):  # the contract kernel first
                    be.force_generic = generic
                    try:
                        plan = be._plan_qpool2d(spec, False, align)
                    finally:
                        be.force_generic = False
                    kname = plan[0].kernel
                    if label == "rows16":  # experiment: the row kernels with 16 outputs per thread
                        if "_rows_" not in kname:
                            continue
                        (launch,) = plan
                        groups = spec.n * spec.c * spec.out_h * -(-spec.out_w // 16)
                        plan = (dataclasses.replace(launch, defines=(*launch.defines, ("QROW_OUT", 16)),
                                                    grid=be._grid_1d(groups, launch.block[0])),)
                        kname += "[M16]"
                    if label in ("t128", "t512"):  # experiment: another block size for the fast kernels
                        if kname == "pool2d_max" or kname == "pool2d_avg":
                            continue
                        (launch,) = plan
                        threads = int(label[1:])
                        work = launch.grid[0] * launch.block[0]  # >= the kernel's thread count
                        plan = (dataclasses.replace(launch, defines=(*launch.defines, ("QPOOL_THREADS", threads)),
                                                    grid=be._grid_1d(work, threads), block=(threads, 1, 1)),)
                        kname += f"[{label}]"
                    if label.startswith("minb"):  # experiment: registers capped for more blocks per SM
                        if kname == "pool2d_max" or kname == "pool2d_avg":
                            continue
                        (launch,) = plan
                        plan = (dataclasses.replace(launch, defines=(*launch.defines, ("QPOOL_MINB", int(label[4:])))),)
                        kname += f"[minb{label[4:]}]"
                    if label != "contract" and any(r.get("kernel") == kname and r["case"] == name
                                                   and r["dtype"] == dtype and r["layout"] == layout for r in rows):
                        continue  # the same kernel as a variant already timed

                    def call(plan: Any = plan, x: Any = x, y: Any = y) -> None:
                        be._run(plan, {"x": x, "y": y, "i": None})

                    if args.profile:
                        for _ in range(5):
                            call()
                        be.synchronize()
                        continue
                    fill = np.full(out_n, 0x5A if label != "contract" else 0xA5, np.uint8).view(dt)
                    y_fill = be.upload(fill)
                    be.copy(y_fill, y, out_n)
                    call()
                    got = np.empty(out_n, dt)
                    be.download(y, got)
                    if want is None:
                        want, check = got, "reference"
                    else:
                        check = "ok" if np.array_equal(got, want) else f"MISMATCH ({int((got != want).sum())})"
                    ms = statistics.median(be.time_launches(call, 20, warmup=3)) * 1e3

                    def batch(call: Any = call) -> None:
                        for _ in range(20):
                            call()

                    b2b = statistics.median(be.time_launches(batch, 15, warmup=1)) * 1e3 / 20
                    share = (x_host.size + out_n) / (b2b * 1e-3) / 1e9 / copy
                    rows.append({"case": name, "dtype": dtype, "layout": layout, "kernel": kname, "ms": ms,
                                 "b2b_ms": b2b, "copy_share": share, "check": check})
                    print(f"{name:22s} {dtype:6s} {layout:6s} {kname:24s} {ms:8.4f} {b2b:8.4f} "
                          f"{100 * share:6.1f}%  {check}")
                    sys.stdout.flush()
    if not args.profile and (not only or any(o in "qconv3x3" for o in only)):
        rows.extend(time_qconv(be, rng))
    if not args.profile:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        doc = {"device": str(dev), "copy_gbps": copy, "rows": rows}
        (out / "quant_cuda.json").write_text(json.dumps(doc, indent=1))
    bad = [r for r in rows if r["check"].startswith("MISMATCH")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
