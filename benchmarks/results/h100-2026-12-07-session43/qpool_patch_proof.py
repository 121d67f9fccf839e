"""Which pool2d tuning entries does `benchmarks/patches/qpool2d-nhwc-avg-masked.patch` change?

Preprocesses (clang -E, blank lines dropped) every build that a pool2d entry may serve (pads 0 and 1,
with and without indices) with the launcher importable now and a given kernels_cl folder, and writes one
sha256 per entry build. Run once before `git apply` and once after, then compare the two dumps:

    python qpool_patch_proof.py dump --kernels kernels_cl --out before.json      # main
    git apply benchmarks/patches/qpool2d-nhwc-avg-masked.patch
    python qpool_patch_proof.py dump --kernels kernels_cl --out after.json       # patched
    python qpool_patch_proof.py compare before.json after.json

Every int8 build's preprocessed text changes (the patch adds a function and a macro to the file all
of them include), so `--compile` compares clang-15's optimized output instead (a proxy for NVIDIA's and
PoCL's compilers, both LLVM-based): where it is the same, the entry's code is unchanged.

An entry whose every build preprocesses the same kept its code: its measurement holds. `--table` picks the
entries (default the shipped opencl.json's pool2d entries; a `hal tune` output file works too). Devices:
PoCL entries build with this machine's PoCL backend, sm_90 / NVIDIA H200 entries with a copy of it that
says it is an H200 (the launchers' NVIDIA-only defines such as HAL_PTX_U16X2 included).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import itertools
import json
import subprocess
import tempfile
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np

warnings.simplefilter("ignore")
import hal  # noqa: E402
from hal.backends.opencl import QUANT_HEADER, SCHEMAS  # noqa: E402
from hal.spec import TensorGeometry, pool2d_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def backends():
    pocl = hal.device("opencl:0").backend
    nv = copy.copy(pocl)
    nv.info = replace(pocl.info, name="NVIDIA H200", vendor="nvidia", compute_units=132, local_mem_bytes=49152,
                      max_work_group=1024, extras=(("device_type", "GPU"),))
    nv._ptx_maxnan = True
    nv._ptx_u16x2 = True
    return pocl, nv


def source(folder: Path, file: str, defines: dict) -> str:
    s = (folder / "hal_prelude.h").read_text()
    if defines.get("DTYPE_INT8") or defines.get("DTYPE_UINT8"):
        s += f'\n#line 1 "{QUANT_HEADER}"\n' + (folder / QUANT_HEADER).read_text()
    return s + f'\n#line 1 "{file}"\n' + (folder / file).read_text()


def kernel_only(text: str, kernel: str, target: str) -> str:
    """The launched kernel's own function in clang's output: every pool2d program holds both pool2d_max
    and pool2d_avg, and a max entry launches only the first (the builtins are external declarations)."""
    lines = text.splitlines()
    head = f".entry {kernel}(" if target.startswith("nvptx") else f"@{kernel}("
    start = next(i for i, line in enumerate(lines) if head in line and (line.startswith((".entry", "define"))))
    end = next(i for i in range(start, len(lines)) if lines[i] == "}")
    return "\n".join(lines[start:end + 1])


def preprocessed(folder: Path, file: str, defines: dict, target: str = "", kernel: str = "") -> str:
    """The build's preprocessed text or, with a target, clang's -O2 output for it (PTX for nvptx64,
    LLVM IR for spir64; the module's file name lines dropped), with a kernel name only that kernel's."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernel.cl"
        src.write_text(source(folder, file, defines))
        flags = [f"-D{k}={v}" for k, v in sorted(defines.items())]
        if target:
            cmd = ["clang-15", "-x", "cl", "-cl-std=CL1.2", "-O2", "-Xclang", "-finclude-default-header", "-target",
                   target, "-S", *(["-emit-llvm"] if target == "spir64" else []), *flags, str(src), "-o", "-"]
        else:
            cmd = ["clang-15", "-E", "-P", "-x", "cl", "-cl-std=CL1.2", *flags, str(src)]
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
    if r.returncode:
        raise RuntimeError(r.stderr[-400:])
    text = "\n".join(line for line in r.stdout.splitlines()
                      if line.strip() and not line.startswith(("; ModuleID", "source_filename")))
    return kernel_only(text, kernel, target) if target and kernel else text


def builds(be, entry: dict) -> list[tuple[str, str, dict]]:
    key = entry["key"]
    p = {**SCHEMAS["pool2d"].defaults(), **entry["params"]}
    dt = np.dtype(key["dtype"])
    k, s = int(key["kernel"][0]), int(key["stride"][0])
    n, c, h, w = (key.get(x, d) for x, d in (("n", 8), ("c", 64), ("h", 64), ("w", 64)))
    g = TensorGeometry(n, c, h, w, key["layout"], dt)
    out = []
    for pad, idx in itertools.product((0, 1), (False, True)):
        if pad * 2 > k or (idx and key["kind"] != "max"):
            continue
        spec = pool2d_spec(key["kind"], g, k, s, pad, 1, False, True, None, idx)
        file, name, d, _mode, _band = be._pool2d_build(spec, be._params("pool2d", p))
        out.append((file, name, d))
    return out


def dump(args: argparse.Namespace) -> None:
    pocl, nv = backends()
    doc = json.loads(Path(args.table).read_text())
    rows = []
    for i, e in enumerate(doc["entries"]):
        if e.get("kernel") != "pool2d" or e.get("level") not in ("device", "arch"):
            continue
        if e["level"] == "arch" and e["match"] != "sm_90":
            continue
        be = nv if e["match"] in ("sm_90", "NVIDIA H200") else pocl
        for file, name, d in builds(be, e):
            target = "" if not args.compile else "nvptx64-nvidia-nvcl" if be is nv else "spir64"
            text = preprocessed(Path(args.kernels), file, d, target, name)
            rows.append({"entry": i, "match": e["match"], "key": e["key"], "file": file,
                         "defines": d, "sha256": hashlib.sha256(text.encode()).hexdigest()})
    Path(args.out).write_text(json.dumps(rows, indent=1))
    print(f"{len(rows)} builds of {len({r['entry'] for r in rows})} entries -> {args.out}")


def compare(args: argparse.Namespace) -> None:
    a, b = (json.loads(Path(x).read_text()) for x in (args.before, args.after))
    assert [(r["entry"], r["file"]) for r in a] == [(r["entry"], r["file"]) for r in b], "different entry lists"
    changed: dict[int, dict] = {}
    for ra, rb in zip(a, b, strict=True):
        if ra["sha256"] != rb["sha256"]:
            changed[ra["entry"]] = ra
    entries = sorted({r["entry"] for r in a})
    print(f"{len(entries)} entries, {len(a)} builds; changed: {len(changed)}")
    for i, r in sorted(changed.items()):
        print(f"  entry {i} {r['match']}: {r['key']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--kernels", default=str(ROOT / "kernels_cl"))
    d.add_argument("--table", default=str(ROOT / "hal/tuning/tables/opencl.json"))
    d.add_argument("--out", required=True)
    d.add_argument("--compile", action="store_true",
                   help="hash clang-15's -O2 output (PTX for the NVIDIA entries, SPIR LLVM IR for PoCL's), the "
                        "launched kernel's function only, instead of the preprocessed text: an unused function the "
                        "patch adds, or the other kernel of the program, then changes nothing")
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    args = ap.parse_args()
    dump(args) if args.cmd == "dump" else compare(args)


if __name__ == "__main__":
    main()
