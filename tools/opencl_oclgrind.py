"""Run hal's OpenCL kernels on Oclgrind, a simulator that checks every memory access.

Oclgrind (Debian's ``oclgrind`` package) is an OpenCL 1.2 device that interprets each
work-item and reports reads and writes outside a buffer and, with ``OCLGRIND_DATA_RACES=1``,
two work-items touching one word with no barrier or atomics between them. It writes those
reports to a log and lets the launch finish, so the oracle can pass while the log does not:
this script fails on any line in the log.

1. Finds Oclgrind's ICD library; where it is missing and this runs as root with apt-get,
   installs the package; otherwise it says so and exits 0 (a user's machine without root).
2. Self-check: a kernel writing one element past its buffer and a kernel whose work-items
   all write one word must each be reported, or the checker is not live and the run fails.
3. Runs, with ``HAL_OPENCL_EXACT_BUFFERS=1`` (each buffer exactly its tensor's bytes: the
   memory pool's bins round sizes up, and an access one element past the end landed inside
   the bin unseen) and Oclgrind registered through ``OCL_ICD_VENDORS`` for these runs only:
   the conformance suite in every dtype, then the OpenCL op tests given by ``--tests``.

Usage: ``python tools/opencl_oclgrind.py [--tests FILE ...] [--examples N] [--jobs N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
STATE = ROOT / ".venv" / "oclgrind"
LIBRARY_PLACES = (
    "/usr/lib/oclgrind/liboclgrind-rt-icd.so",
    "/usr/lib/x86_64-linux-gnu/oclgrind/liboclgrind-rt-icd.so",
    "/usr/lib/aarch64-linux-gnu/oclgrind/liboclgrind-rt-icd.so",
    "/usr/local/lib/liboclgrind-rt-icd.so",
)

SELF_CHECK = r"""
import numpy as np
import pyopencl as cl

device = next(d for p in cl.get_platforms() for d in p.get_devices() if "oclgrind" in d.name.lower())
context = cl.Context([device])
queue = cl.CommandQueue(context)
program = cl.Program(context, '''
__kernel void one_past_the_end(__global float* y) { y[get_global_id(0) + 1] = 1.0f; }
__kernel void every_item_writes_one_word(__global float* y) { y[0] = (float)get_global_id(0); }
''').build()
buffer = cl.Buffer(context, cl.mem_flags.READ_WRITE, 16 * 4)
getattr(program, "{kernel}")(queue, (16,), (16,), buffer)
queue.finish()
"""

#: Operations Oclgrind 21.10 (Debian 12's package) gets wrong, probed on each run: a kernel
#: using them computes wrong numbers there, and wrong addresses too (reports of unaligned or
#: out-of-bounds loads that no other implementation makes). The default op tests below are
#: ones whose kernels avoid them. Each: (what, a statement of n = 20 and g = 16, out[0]'s value).
DEFECT_PROBES = (
    ("min(int4, int) and clamp(int4, int, int), the scalar-argument overloads",
     "out[0] = min(g + (int4)(0, 4, 8, 12), n - 4).w * 10 + clamp(n - g - (int4)(0, 4, 8, 12), 0, 4).x", 164),
    ("a negated vector compare against a runtime scalar, -(int2 < int) (zext of <2 x i1>)",
     "vstore2(-((int2)(0, 3) < n), 0, out)", 1),
    ("funnel shifts (llvm.fshl, which clang makes of shift pairs such as (a << 16) | (b >> 16))",
     "out[0] = (int)((((uint4)(n, 1, 2, g) << 16) | ((uint4)(g + 0x20000, n, 1, 2) >> 16)).x)", (20 << 16) | 2),
)
DEFECT_CHECK = r"""
import json
import sys

import numpy as np
import pyopencl as cl

device = next(d for p in cl.get_platforms() for d in p.get_devices() if "oclgrind" in d.name.lower())
context = cl.Context([device])
queue = cl.CommandQueue(context)
results = []
for statement in json.loads(sys.argv[1]):
    source = "__kernel void probe(__global int* out, int n, int g) { " + statement + "; }"
    out = np.zeros(2, np.int32)
    buffer = cl.Buffer(context, cl.mem_flags.READ_WRITE, 8)
    try:
        cl.Program(context, source).build().probe(queue, (1,), (1,), buffer, np.int32(20), np.int32(16))
        cl.enqueue_copy(queue, out, buffer)
        results.append(int(out[0]))
    except (cl.Error, AttributeError) as exc:  # a kernel Oclgrind cannot create: AttributeError
        results.append(str(exc))
print(json.dumps(results))
"""


def find_library() -> str | None:
    """Oclgrind's ICD library (``OCLGRIND_ICD_LIBRARY`` first), or None."""
    places = [os.environ.get("OCLGRIND_ICD_LIBRARY", ""), *LIBRARY_PLACES]
    return next((p for p in places if p and Path(p).is_file()), None)


def install() -> None:
    """apt-get install oclgrind (after an update if the first try fails)."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    argv = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "oclgrind"]
    if subprocess.run(argv, env=env, capture_output=True).returncode:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
        subprocess.run(argv, env=env, check=True, capture_output=True)


def run_checked(name: str, argv: list[str], env: dict[str, str]) -> bool:
    """Run one command under Oclgrind; True when it exits 0 and Oclgrind logged nothing."""
    log = STATE / f"{name}.log"
    log.unlink(missing_ok=True)
    start = time.monotonic()
    res = subprocess.run(argv, env={**env, "OCLGRIND_LOG": str(log)}, cwd=ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - start
    tail = (res.stdout + res.stderr).strip().splitlines()
    counts = [line for line in res.stdout.splitlines() if " passed" in line or " failed" in line]
    summary = (counts or tail or [""])[-1].strip()
    report = log.read_text(errors="replace") if log.exists() else ""
    ok = res.returncode == 0 and not report.strip()
    print(f"  oclgrind {name}: {summary} ({seconds:.0f} s){'' if ok else ' FAILED'}")
    if res.returncode:
        print("\n".join(tail[-60:]))
    if report.strip():
        lines = report.strip().splitlines()
        print(f"  Oclgrind reported {sum('Kernel:' in line for line in lines)} errors ({log}); the first:")
        print("\n".join(lines[:60]))
    return ok


def self_check(env: dict[str, str]) -> bool:
    """True when Oclgrind reports a planted out-of-bounds write and a planted race."""
    ok = True
    for kernel, expected in (("one_past_the_end", "Invalid write"), ("every_item_writes_one_word", "data race")):
        log = STATE / f"self-check-{kernel}.log"
        log.unlink(missing_ok=True)
        code = SELF_CHECK.replace("{kernel}", kernel)
        res = subprocess.run([sys.executable, "-c", code], env={**env, "OCLGRIND_LOG": str(log)},
                             capture_output=True, text=True)
        report = log.read_text(errors="replace") if log.exists() else ""
        if res.returncode or expected not in report:
            ok = False
            print(f"  oclgrind self-check {kernel}: expected {expected!r} in the log, got rc {res.returncode}:")
            print((res.stderr + report)[-3000:])
    print(f"  oclgrind self-check: {'planted errors reported' if ok else 'FAILED: the checker is not live'}")
    return ok


def report_defects(env: dict[str, str]) -> None:
    """Print which of ``DEFECT_PROBES`` this Oclgrind gets wrong (information, not a failure)."""
    res = subprocess.run([sys.executable, "-c", DEFECT_CHECK, json.dumps([p[1] for p in DEFECT_PROBES])],
                         env=env, capture_output=True, text=True)
    try:
        results = json.loads(res.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        print(f"  oclgrind defect probes did not run: {(res.stdout + res.stderr)[-1000:]}")
        return
    wrong = [f"{what}: got {got!r}, expected {want}"
             for (what, _, want), got in zip(DEFECT_PROBES, results, strict=True) if got != want]
    print(f"  oclgrind defects present ({len(wrong)} of {len(DEFECT_PROBES)} probed; kernels using these "
          "give wrong numbers and addresses there):" if wrong else "  oclgrind defect probes: none present")
    for line in wrong:
        print(f"    - {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", nargs="*", default=[], help="test files to run on opencl:oclgrind")
    parser.add_argument("--examples", default="4", help="HAL_TEST_EXAMPLES for the op tests")
    parser.add_argument("--jobs", default="2", help="pytest-xdist workers")
    parser.add_argument("--dtype", default="float32,float16,bfloat16,int8,uint8", help="conformance dtypes")
    args = parser.parse_args()

    library = find_library()
    if library is None and os.geteuid() == 0 and shutil.which("apt-get"):
        try:
            install()
        except subprocess.CalledProcessError as exc:
            print(f"opencl-oclgrind: apt-get install oclgrind failed: {exc.stderr.decode(errors='replace')[-2000:]}")
            return 1
        library = find_library()
    if library is None:
        print("opencl-oclgrind: skipped: Oclgrind is not installed (apt-get install oclgrind, as root) "
              "and this is not root with apt-get")
        return 0

    STATE.mkdir(parents=True, exist_ok=True)
    vendors = STATE / "vendors"
    vendors.mkdir(exist_ok=True)
    (vendors / "oclgrind.icd").write_text(library + "\n")
    env = {**os.environ, "OCL_ICD_VENDORS": str(vendors), "OCLGRIND_DATA_RACES": "1",
           "HAL_OPENCL_EXACT_BUFFERS": "1"}
    env.pop("HAL_OPENCL_PROFILE", None)

    ok = self_check(env)
    report_defects(env)
    hal = str(VENV_BIN / "hal")
    ok &= run_checked("conformance", [hal, "conformance", "--device", "opencl:oclgrind", "--dtype", args.dtype], env)
    if args.tests:
        pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", args.jobs,
                  "--devices", "opencl:oclgrind", "-m", "opencl", *args.tests]
        # HAL_TEST_SIMULATOR: the tests that size a tensor for a GPU's grid take a smaller one here
        ok &= run_checked("op-tests", pytest, {**env, "HAL_TEST_EXAMPLES": args.examples, "HAL_TEST_SIMULATOR": "1"})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
