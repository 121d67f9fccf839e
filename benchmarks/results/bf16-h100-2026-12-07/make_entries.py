"""The sm_90 bfloat16 entries of hal/tuning/tables/cuda.json from this folder's H100 sweeps.

Run from the repository root: python benchmarks/results/bf16-h100-2026-12-07/make_entries.py [--write]

For each bfloat16 case of benchmarks/cuda_ops.py the sweep timed every candidate (each output checked
against PyTorch first). The entry takes the key of the float16 entry that serves the same case on an
H200 with its dtype made bfloat16, so it covers the shapes float16's does (a dtype-free key would also
serve float32 and float16). Where one float16 entry serves two cases, the candidate with the smallest
worst-case ratio to each case's fastest serves both, and a case that loses more than 3 % by it gets an
entry of its own under the sweep's exact key (the more specific entry serves its shapes). No entry where
the schema default is within 3 % of the fastest (the default serves anyway). Prints what it would add;
--write adds it to the table.
"""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

from hal.backends.cuda import CudaBackend
from hal.device import DeviceInfo
from hal.tuning.table import Tuner, shipped_entries

HERE = Path(__file__).parent
TABLE = Path("hal/tuning/tables/cuda.json")
SWEEPS = ("call6-sweep-bf16-conv.json", "call6-sweep-bf16-pool-bn.json")
MARGIN = 1.03
H200 = DeviceInfo("cuda", 0, "NVIDIA H200", "nvidia", "hopper", "sm_90", 132, 1024, 232448, 140 << 30, True, 32,
                  "cuda", "580", (("compute_capability", "9.0"), ("max_threads_per_sm", "2048")))


def main() -> None:
    bench = runpy.run_path("benchmarks/cuda_ops.py", run_name="make_entries")
    fp16_cases = {c.name: c for c in bench["build_cases"](False, ("float16",))}
    tuner = Tuner(H200, CudaBackend.schemas())
    shipped = {e.source: e for e in shipped_entries("cuda")}
    rows = [r for f in SWEEPS for r in json.loads((HERE / f).read_text())["rows"]]
    groups: dict[str, list[dict]] = {}
    keys: dict[str, dict] = {}
    for row in rows:
        served = tuner.resolve_spec(bench["case_spec"](fp16_cases[row["case"]]))
        if served.level in ("arch", "device"):
            source = served.source
            keys[source] = {**dict(shipped[source].key), "dtype": "bfloat16"}
        else:  # float16 takes the schema default here: the sweep's exact key
            source = f"exact:{row['case']}"
            keys[source] = row["key"]
        groups.setdefault(source, []).append(row)
    entries = []
    for source, group in groups.items():
        timed = [{json.dumps(c["params"], sort_keys=True): c["b2b_ms"] for c in r["candidates"] if c["ok"]}
                 for r in group]
        best = [min(t.values()) for t in timed]
        common = set.intersection(*(set(t) for t in timed))
        choice = min(common, key=lambda p: max(t[p] / b for t, b in zip(timed, best)))
        default = "{}"
        gains = [t[default] / t[choice] for t in timed]
        names = ", ".join(f"{r['case']} {t[choice]:.4f} ms (default {t[default]:.4f})" for r, t in zip(group, timed))
        if max(gains) < MARGIN or choice == default:
            print(f"skip {source}: default within {MARGIN - 1:.0%} ({names})")
            continue
        entry = {"level": "arch", "match": "sm_90", "kernel": group[0]["family"], "key": keys[source],
                 "params": json.loads(choice),
                 "provenance": "measured on NVIDIA H100 80GB HBM3 (sm_90), 2026-12-07 (session 41, call 6), "
                               "benchmarks/cuda_ops.py --dtype bfloat16 --sweep: fastest candidate, output checked "
                               f"against PyTorch before timing: {names}; serves the H200 (sm_90), unmeasured there "
                               f"(benchmarks/results/bf16-h100-2026-12-07)"}
        print(f"add {source} -> {entry['key']} {entry['params']}: {names}")
        entries.append(entry)
        for row, t, b in zip(group, timed, best, strict=True):
            if len(group) > 1 and t[choice] / b > MARGIN:
                own = min(t, key=t.__getitem__)
                note = f"{row['case']} {t[own]:.4f} ms ({t[choice]:.4f} under the shared entry, default {t[default]:.4f})"
                entries.append({**entry, "key": row["key"], "params": json.loads(own),
                                "provenance": entry["provenance"].replace(names, note)})
                print(f"  own entry {row['key']} {own}: {note}")
    if "--write" in sys.argv:
        table = json.loads(TABLE.read_text())
        table["entries"] = [e for e in table["entries"]
                            if not (e["level"] == "arch" and e["match"] == "sm_90" and e["key"].get("dtype") == "bfloat16")]
        table["entries"] += entries
        TABLE.write_text(json.dumps(table, indent=1) + "\n")
        print(f"wrote {len(entries)} entries to {TABLE}")


if __name__ == "__main__":
    main()
