"""Proof for re-stamping cuda.json's measured entries after session 40's bfloat16 kernel edits (kernels_cu/:
hal_window.cuh's pair paths POOL_H2, POOL_H2AVG and DW_H2, conv2d.cu's dense tensor-core section, and the
prelude's act16_f / act2_f / act2_word in every build).

Compiles, with the kernel sources of BASE (default e27d013, main before the edit) and of the working tree:
  * each measured entry (one with a source_hash) of hal/tuning/tables/cuda.json with its own -D set
    (CudaBackend.compile_defines of its key's dtype and layout and its params), for sm_90 at -O3,
    to PTX and to a cubin; both must be byte-identical;
  * every float32 and float16 build tools/nvcc_check.py makes of the float files (and the quantized
    files' builds) for sm_75 and sm_90 to PTX; identical, or listed.
Run from the repository root: .venv/bin/python benchmarks/results/bf16-pairs-restamp-2026-12-07/pairs_proof.py [BASE]
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tools"))
import nvcc_check  # noqa: E402

from hal.backends.cuda import CudaBackend  # noqa: E402


def sources(base: str, into: Path) -> Path:
    data = subprocess.run(["git", "archive", base, "kernels_cu"], cwd=ROOT, capture_output=True, check=True).stdout
    tarfile.open(fileobj=io.BytesIO(data)).extractall(into)
    return into / "kernels_cu"


def build(folder: Path, file: str, defines: dict[str, int], arch: str, kind: str, out: Path) -> bytes:
    cmd = ["nvcc", f"-{kind}", "--std=c++17", f"-arch=sm_{arch}", "-I", str(folder),
           *[f"-D{k}={v}" for k, v in sorted(defines.items())], str(folder / file), "-o", str(out)]
    subprocess.run(cmd, check=True, capture_output=True)
    return out.read_bytes()


def main() -> int:
    base = sys.argv[1] if len(sys.argv) > 1 else "e27d013"
    table = json.loads((ROOT / "hal/tuning/tables/cuda.json").read_text())
    jobs = []
    for i, e in enumerate(table["entries"]):
        if "source_hash" in e:
            key = e["key"]
            d = dict(CudaBackend.compile_defines(e["kernel"], np.dtype(key["dtype"]), key["layout"], e["params"]))
            for kind in ("ptx", "cubin"):
                jobs.append((f"entry {i} ({e['kernel']} {key['dtype']} {key['layout']})", f"{e['kernel']}.cu", d,
                             "90", kind))
    for path, d, archs in nvcc_check.variants():
        if d.get("DTYPE_BF16"):
            continue
        for arch in ("75", "90"):
            if arch in archs:
                jobs.append((f"{path.name} {d}", path.name, d, arch, "ptx"))
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        old, new = sources(base, t / "old"), ROOT / "kernels_cu"

        def one(job: tuple[str, str, dict[str, int], str, str]) -> tuple[str, bool]:
            name, file, d, arch, kind = job
            tag = abs(hash((name, arch, kind)))
            a = build(old, file, d, arch, kind, t / f"{tag}.old.{kind}")
            b = build(new, file, d, arch, kind, t / f"{tag}.new.{kind}")
            return f"{name} sm_{arch} {kind}", a == b

        with ThreadPoolExecutor() as pool:
            results = list(pool.map(one, jobs))
    differ = [name for name, same in results if not same]
    for name in differ:
        print("DIFFERS", name)
    print(f"{len(results) - len(differ)} of {len(results)} builds identical (base {base})")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
