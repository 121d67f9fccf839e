"""Show which stale measured OpenCL tuning entries a kernel edit left unchanged; re-stamp them.

A measured entry records its kernel family's ``source_hash``, and any edit of the family's
files stales it (it then serves nothing until measured again, on hardware that may be scarce).
For every measured entry of ``hal/tuning/tables/opencl.json`` that was fresh at ``--base`` (a
git revision) and is stale now, this lists the builds the entry may serve: each (file, -D set)
the launcher makes for the entry's key and parameters (pooling with padding 0 and 1, with and
without indices; BatchNorm with and without running statistics; the conv's algorithm), on
every compute-unit count from 1 to 256 (some -D sets follow it), on the entry's device as
``_device`` describes it. Each build's program text (``program_source``: prelude, quantized
header, file) is preprocessed by clang (``-E -P``, OpenCL 1.2) from the base revision's sources
and from the working tree's; an entry whose every build is the same text (blank lines aside)
kept its code, and ``--apply`` gives it the current hash with the reason in its provenance.

    python tools/restamp_proof.py --base HEAD~3            # report
    python tools/restamp_proof.py --base HEAD~3 --apply    # and re-stamp
    python tools/restamp_proof.py --base-dir /tmp/old/kernels_cl   # sources from a folder instead

Entries already stale at the base, or on a device ``_device`` does not know, are reported, never
re-stamped. Only OpenCL: CUDA's measured entries carry no source hash (docs/tuning.md).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import date
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "hal" / "tuning" / "tables" / "opencl.json"
CLANGS = ("clang", *(f"clang-{v}" for v in range(20, 13, -1)))
#: compute-unit counts the builds are enumerated over (adaptive pooling's and BatchNorm's -D
#: sets follow the device's compute units)
COMPUTE_UNITS = (1, 2, 4, 8, 16, 32, 64, 128, 132, 256)


def _device(name: str) -> Any:
    """A DeviceInfo for a measured entry's device name, or None where unknown. The H200's as
    NVIDIA's OpenCL reports it (tests/test_opencl_host.py); PoCL's CPU devices as PoCL does."""
    from hal.device import DeviceInfo

    if name == "NVIDIA H200":
        return DeviceInfo("opencl", 0, name, "nvidia", "sm_90", "sm_90", 132, 1024, 49152, 140 << 30, True, 32,
                          "NVIDIA CUDA", "580", (("device_type", "GPU"),))
    if name.startswith("pthread-"):
        return DeviceInfo("opencl", 0, name, "pocl", "cpu", "pocl-cpu", 2, 4096, 1 << 20, 16 << 30, False, 1,
                          "Portable Computing Language", "pocl", (("device_type", "CPU"),))
    return None


def _planner(info: Any) -> Any:
    """An OpenCLBackend that plans for ``info`` without a context (launch_signature only)."""
    from hal.backends.base import Backend
    from hal.backends.opencl import OpenCLBackend, ptx_maxnan_ok, ptx_u16x2_ok

    be = OpenCLBackend.__new__(OpenCLBackend)
    Backend.__init__(be, info)
    be._warned, be._events = set(), None
    be._ptx_maxnan, be._ptx_u16x2 = ptx_maxnan_ok(info), ptx_u16x2_ok(info)
    return be


def _specs(entry: dict[str, Any]) -> Iterator[Any]:
    """The specs an entry's key may serve (its shape; the options the key does not fix)."""
    from hal.spec import TensorGeometry, adaptive_pool2d_spec, batch_norm_spec, conv2d_spec, pool2d_spec

    key, kernel = entry["key"], entry["kernel"]
    dt = np.dtype(key["dtype"])
    g = TensorGeometry(key["n"], key["c"], key["h"], key["w"], key["layout"], dt)
    if kernel == "pool2d":
        k, s = int(key["kernel"].split("x")[0]), int(key["stride"][0])
        for pad, idx in itertools.product((0, 1), (False, True)):
            if pad * 2 <= k and not (idx and key["kind"] != "max"):
                spec = pool2d_spec(key["kind"], g, k, s, pad, 1, False, True, None, idx)
                yield replace(spec, zero_point=3) if dt.kind in "iu" and key["kind"] == "avg" else spec
    elif kernel == "adaptive_pool2d":
        for idx in (False, True) if key["kind"] == "max" else (False,):
            yield adaptive_pool2d_spec(key["kind"], g, (key["out_h"], key["out_w"]), idx)
    elif kernel == "conv2d":
        cin, k = key["c"], int(key["kernel"].split("x")[0])
        groups = 1 if key["groups"] == "dense" else cin
        yield conv2d_spec(g, (key["k"], cin // groups, k, k), False, None, int(key["stride"][0]), 1, 1, groups)
    elif kernel == "batch_norm":
        for running in (False, True):
            yield batch_norm_spec(g, key["mode"] == "train", 0.1, 1e-5, running or key["mode"] == "infer")


def builds(entry: dict[str, Any]) -> list[tuple[str, dict[str, int]]]:
    """Every (file, -D set) the launcher builds for the entry on its device, over COMPUTE_UNITS;
    [] where the device is unknown or nothing could be planned."""
    from hal.backends.opencl import SCHEMAS

    base = _device(entry["match"])
    if base is None:
        return []
    params = {**SCHEMAS[entry["kernel"]].defaults(), **entry["params"]}
    found: dict[tuple[str, tuple[tuple[str, int], ...]], None] = {}
    for cu in COMPUTE_UNITS:
        be = _planner(replace(base, compute_units=cu))
        for spec in _specs(entry):
            sig = be.launch_signature(spec, params)
            if sig is not None:
                found[(sig[0], sig[2])] = None
    return [(file, dict(defines)) for file, defines in found]


def preprocess(clang: str, text: str, defines: dict[str, int]) -> tuple[bool, str]:
    """(ok, clang -E -P output without blank lines, or the error's tail)."""
    with tempfile.NamedTemporaryFile("w", suffix=".cl", delete=False) as f:
        f.write(text)
    try:
        res = subprocess.run([clang, "-E", "-P", "-x", "cl", "-cl-std=CL1.2",
                              *(f"-D{k}={v}" for k, v in sorted(defines.items())), f.name],
                             capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if res.returncode:
        return False, res.stderr[-400:]
    return True, "\n".join(line for line in res.stdout.splitlines() if line.strip())


def same_builds(clang: str, pairs: list[tuple[str, dict[str, int]]], old: Callable[[str], str],
                new: Callable[[str], str]) -> list[tuple[str, dict[str, int], str]]:
    """The builds whose preprocessed text differs between the ``old`` and ``new`` sources (a file
    name -> its text), with why; [] when every build is the same."""
    from hal.backends.opencl import program_source

    def check(pair: tuple[str, dict[str, int]]) -> tuple[str, dict[str, int], str] | None:
        file, defines = pair
        try:
            a = preprocess(clang, program_source(file, defines, old), defines)
        except FileNotFoundError:
            return file, defines, "absent from the base"
        b = preprocess(clang, program_source(file, defines, new), defines)
        if not (a[0] and b[0]):
            return file, defines, f"clang failed: {a[1] if not a[0] else b[1]}"
        return None if a[1] == b[1] else (file, defines, "preprocessed text differs")

    with ThreadPoolExecutor(max(os.cpu_count() or 1, 2)) as pool:
        return [r for r in pool.map(check, pairs) if r is not None]


def base_folder(rev: str, into: Path) -> Path:
    """kernels_cl/ as of git revision ``rev``, extracted under ``into``."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev, "kernels_cl"],
                          capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into / "kernels_cl"


def main(argv: list[str] | None = None) -> int:
    """Report (and with --apply re-stamp) the stale measured entries whose builds did not change."""
    from hal.resources import family_hash, family_hash_in, kernel_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    base = ap.add_mutually_exclusive_group(required=True)
    base.add_argument("--base", help="git revision whose kernel sources the entries were fresh against")
    base.add_argument("--base-dir", type=Path, help="or a folder holding those sources (a kernels_cl copy)")
    ap.add_argument("--table", type=Path, default=TABLE)
    ap.add_argument("--apply", action="store_true", help="re-stamp the entries shown unchanged")
    args = ap.parse_args(argv)
    clang = os.environ.get("CLANG") or next((c for c in map(shutil.which, CLANGS) if c), None)
    if clang is None:
        print("restamp_proof: no clang found (set CLANG)")
        return 2
    warnings.simplefilter("ignore")
    doc = json.loads(args.table.read_text())
    new_dir = kernel_dir("kernels_cl")
    restamped = 0
    with tempfile.TemporaryDirectory() as tmp:
        old_dir = args.base_dir or base_folder(args.base, Path(tmp))
        since = args.base or str(args.base_dir)
        for i, entry in enumerate(doc["entries"]):
            kernel, recorded = entry.get("kernel"), entry.get("source_hash")
            if recorded is None or recorded == family_hash("kernels_cl", kernel):
                continue
            label = f"entry {i} ({entry['match']}, {kernel}, {entry.get('key')})"
            if recorded != family_hash_in(old_dir, kernel):
                print(f"{label}: stale at {since} too; measure it again")
                continue
            pairs = builds(entry)
            if not pairs:
                print(f"{label}: cannot plan its builds (a device _device does not know); not re-stamped")
                continue
            bad = same_builds(clang, pairs, lambda name: (old_dir / name).read_text(),
                              lambda name: (new_dir / name).read_text())
            if bad:
                file, defines, why = bad[0]
                print(f"{label}: {len(bad)} of {len(pairs)} builds changed ({file} {defines}: {why})")
                continue
            print(f"{label}: all {len(pairs)} builds unchanged")
            if args.apply:
                entry["source_hash"] = family_hash("kernels_cl", kernel)
                entry["provenance"] += (f"; source_hash re-stamped {date.today().isoformat()}: its {len(pairs)} "
                                        f"builds preprocess as at {since} (tools/restamp_proof.py)")
                restamped += 1
    if restamped:
        args.table.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{restamped} entries re-stamped" if args.apply else "report only (--apply re-stamps)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
