"""Session 43: the tuning-table side of merging `qpool2d-nhwc-avg-masked.patch` (run from the repository
root with the patch applied; method in this folder's README).

1. sm_90 int8 / uint8 NHWC 3x3/2 averages: call 2's A/B on an NVIDIA H100 (not an H200) timed the patched
   kernel's QVEC16 4, WG 128 at 0.0289 / 0.0285 ms (int8, two patched runs) and 0.0308 / 0.0306 (uint8)
   against 0.0374 / 0.0355 ms for main's kernel's best set (its served QVEC16 2): the entries take it.
2. PyPI PoCL (`pthread-AMD EPYC`) pool2d entries: the two whose launched kernel's code changed
   (`qpool_patch_proof.py --compile`: NHWC int8 / uint8 average) are dropped, that PoCL cannot re-measure
   them here; the other 18 are re-stamped (their kernel's clang-15 -O2 SPIR IR is identical).
3. Session 37's 20 PoCL entries for Debian's PoCL on this VM, measured with the patch applied, are
   re-stamped (every build preprocesses the same at 73f0cb7 + patch and now) and merged, but for the NHWC
   int8 / uint8 max: the merged launcher no longer builds their QVEC16 4 aligned-only (it ran 7 % slower on
   the H100, call 3), so they were re-measured here (`pocl-pool2d-int8-nhwc-max.json`, `hal tune run
   --device opencl:0 --ops maxpool3x3s2p1 --dtype int8,uint8 --layout NHWC --mode normal`).
The sm_90 NHWC max entries keep their H200 measurement: their kernel's PTX is identical before and after.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TABLE = ROOT / "hal/tuning/tables/opencl.json"
S37 = ROOT / "benchmarks/results/pocl-2026-12-06-session37"
WHERE = "benchmarks/results/h100-2026-12-07-session43"
AB = (f"measured on NVIDIA H100 80GB HBM3 (NVIDIA's OpenCL, driver 580.159.04; not an H200), 2026-12-07 (session 43, "
      f"{WHERE}/call2-qpool-ab): benchmarks/opencl_ops.py --dtypes int8,uint8 --only avgpool3x3s2p1 --sweep over "
      "QVEC16 2 / 4 x WG 128 / 256 (queued profiling events, every candidate checked against the quantized oracle), "
      "the patched qpool2d_pack.cl twice and main's once in one call: QVEC16 4, WG 128 {new} ms on 64x64x112x112 "
      "against {old} ms for main's kernel's best set (QVEC16 2, the served one); params before (session 23, "
      "measured on the H200): {before}")
NEW_TIMES = {"int8": ("0.0289 / 0.0285", "0.0374"), "uint8": ("0.0308 / 0.0306", "0.0355")}
DROPPED = {("avg", "int8"), ("avg", "uint8")}  # NHWC 3x3/2, PyPI PoCL


def main() -> None:
    doc = json.loads(TABLE.read_text())
    kept = []
    for e in doc["entries"]:
        key = e.get("key", {})
        nhwc_q = (e["kernel"] == "pool2d" and key.get("layout") == "NHWC" and key.get("kernel") == "3x3"
                  and key.get("dtype") in ("int8", "uint8"))
        if nhwc_q and e["level"] == "device" and e["match"] == "pthread-AMD EPYC" \
                and (key["kind"], key["dtype"]) in DROPPED:
            continue
        if nhwc_q and e["level"] == "arch" and e["match"] == "sm_90" and key["kind"] == "avg":
            new, old = NEW_TIMES[key["dtype"]]
            before = json.dumps(e["params"])
            e["params"] = {"WG": 128, "STRIP_ROWS": 2, "QVEC16": 4, "QROWS16": 1}
            e["provenance"] = AB.format(new=new, old=old, before=before)
        kept.append(e)
    print(f"{len(doc['entries']) - len(kept)} PyPI PoCL entries dropped")
    doc["entries"] = kept
    TABLE.write_text(json.dumps(doc, indent=1) + "\n")
    restamp = [sys.executable, str(ROOT / "tools/restamp_unchanged.py")]
    subprocess.run([*restamp, str(TABLE), "--kernel", "pool2d", "--reason",
                    "2026-12-07 (session 43): the masked NHWC int8 average's merge; clang-15 -O2 SPIR IR of every "
                    f"build of this entry identical before and after ({WHERE}/qpool_patch_proof.py --compile)"],
                   check=True)
    merged = []
    for name in ("pocl-pool2d.json", "pocl-pool2d-int8.json"):
        out = Path("/tmp") / f"s43-{name}"
        s37 = json.loads((S37 / name).read_text())
        s37["entries"] = [e for e in s37["entries"] if not (e["key"]["kind"] == "max" and e["key"]["layout"] == "NHWC"
                                                             and e["key"]["dtype"] in ("int8", "uint8"))]
        out.write_text(json.dumps(s37, indent=1) + "\n")
        subprocess.run([*restamp, str(out), "--kernel", "pool2d", "--reason",
                        "2026-12-07 (session 43): measured with the masked-average patch applied before the bfloat16 "
                        "edit; every build preprocesses the same at 73f0cb7 + patch and at the merge "
                        f"({WHERE}/qpool_patch_proof.py)"], check=True)
        merged.append(str(out))
    retuned = str(Path(__file__).resolve().parent / "pocl-pool2d-int8-nhwc-max.json")
    subprocess.run([sys.executable, "-m", "hal", "tune", "merge", str(TABLE), *merged, retuned, "--out", str(TABLE)],
                   check=True)


if __name__ == "__main__":
    main()
