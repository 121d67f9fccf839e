"""Turn call 2's OpenCL bfloat16 sweep (NVIDIA's OpenCL on an H100, `opencl_ops.py --device opencl:nvidia
--dtypes bfloat16 --sweep --only pool,bn`) into hal/tuning/tables/opencl.json's sm_90 bfloat16 entries.

Per swept case (each candidate's output checked against the oracle before timing, queued events):
- where the sweep's best beat the served parameters by more than 3 %, the best becomes the entry (replacing
  session 41's unmeasured copy of float16's entry, or added where none served: global average pooling NHWC);
- where the served parameters came within 3 % of the best, the entry keeps them and its provenance says they
  were measured;
- HALF_RAW and HALF_ARITH are left out of every bfloat16 entry: the launchers set them for float16 only, so a
  bfloat16 build is the same with or without them (docs/backend-opencl.md).
The two conv entries (3x3 NCHW / NHWC) were not swept and stay unmeasured. Run from the repository root.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
TABLE = HERE.parents[2] / "hal" / "tuning" / "tables" / "opencl.json"
INERT = ("HALF_RAW", "HALF_ARITH")
WHERE = "benchmarks/results/h100-2026-12-07-session42, call 2"


def key_of(row: dict) -> tuple[str, dict]:
    case, dt, layout = row["case"], row["dtype"], row["layout"]
    if case.startswith(("maxpool", "avgpool")):
        size = "2x2" if "2x2" in case else "3x3"
        return "pool2d", {"kind": case[:3], "dtype": dt, "layout": layout, "kernel": size, "stride": "2x2"}
    if case.startswith("globalavgpool"):
        return "adaptive_pool2d", {"kind": "avg", "dtype": dt, "layout": layout, "out_h": 1, "out_w": 1}
    if case.startswith("bn "):
        return "batch_norm", {"mode": "infer" if "infer" in case else "train", "dtype": dt, "layout": layout}
    raise ValueError(case)


def main() -> None:
    rows = json.loads((HERE / "call2-ocl-bf16-sweep.json").read_text())
    suggested = json.loads((HERE / "call2-ocl-bf16-tuning.json").read_text())
    doc = json.loads(TABLE.read_text())
    for row in rows:
        kernel, key = key_of(row)
        served, best = row["queued_ms"], row["sweep_best"]["ms"]
        what = f"{row['case']} {row['shape']} {row['layout']}"
        entry = next((e for e in doc["entries"] if e["level"] == "arch" and e["match"] == "sm_90"
                      and e["kernel"] == kernel and e["key"] == key), None)
        if best < 0.97 * served:
            sug = next(s for s in suggested if s["kernel"] == kernel and s["key"] == key)
            params = {k: v for k, v in sug["params"].items() if k not in INERT}
            prov = (f"measured on NVIDIA H100 80GB HBM3 (NVIDIA CUDA 580.159.04), 2026-12-07 (session 42), "
                    f"benchmarks/opencl_ops.py --sweep, {what}: {best:.5f} ms vs {served:.5f} ms served (queued; "
                    f"HALF_RAW / HALF_ARITH left out: float16's alone); serves the H200 unmeasured ({WHERE})")
            if entry is None:
                doc["entries"].append({"level": "arch", "match": "sm_90", "kernel": kernel, "key": key,
                                       "params": params, "provenance": prov})
                print(f"added    {kernel} {key}: {params} ({best:.5f} vs {served:.5f} ms)")
            else:
                print(f"replaced {kernel} {key}: {entry['params']} -> {params} ({best:.5f} vs {served:.5f} ms)")
                entry["params"], entry["provenance"] = params, prov
        elif entry is not None:
            entry["provenance"] = (
                f"measured on NVIDIA H100 80GB HBM3 (NVIDIA CUDA 580.159.04), 2026-12-07 (session 42), "
                f"benchmarks/opencl_ops.py --sweep, {what}: served {served:.5f} ms, the sweep's best {best:.5f} ms "
                f"(within 3 %; the parameters are float16's entry's without HALF_RAW, session 41); serves the H200 "
                f"unmeasured ({WHERE})")
            print(f"kept     {kernel} {key}: {entry['params']} ({served:.5f} vs best {best:.5f} ms)")
        else:
            print(f"none     {kernel} {key}: the vendor level serves within 3 % ({served:.5f} vs {best:.5f} ms)")
    TABLE.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
