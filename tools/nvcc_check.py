"""Compile every CUDA kernel with nvcc for each supported architecture (CI has no GPU).

Each ``kernels_cu/*.cu`` file is compiled for sm_75, sm_80, sm_90 and sm_120: every
combination of the float dtype (float32, float16: DTYPE_HALF=1, bfloat16: DTYPE_BF16=1 with
DTYPE_HALF=0) and LAYOUT_NHWC for sm_75 and sm_90, float32 NCHW, float16 NHWC and bfloat16 (NCHW for
sm_80, NHWC for sm_120) for sm_80 and sm_120 (whose code differs from sm_90's in launch bounds
only), and with the fused-ReLU epilogue (FUSE_RELU=1) for sm_90 (bfloat16's too), as is
adaptive_pool2d.cu with a plane size fixed at build time (ADAPT_GHW, the launcher's; in all three
dtypes) and with two lanes a pair (ADAPT_GVEC_S 2, the sm_90 float16 entry's, also for sm_75 and
for bfloat16), and as conv2d.cu with the streamed-weight kernels' 4-row tiles (TC_WIDE_ROWS 4;
float16 NHWC for sm_80, sm_90 and sm_120, bfloat16 NCHW for sm_90; one stage, TC_WIDE_STAGES 1,
for sm_120). bfloat16 (cuda_bf16.h) builds for sm_75 too, its conversions in software there.
The quantized kernels (quant_pool2d.cu, quant_conv2d.cu) build instead per integer type
(DTYPE_UINT8, W_UINT8, Y_KIND) and layout, the same way (every combination for sm_75 and sm_90,
the first and last for the others). Tuning parameters take the kernels' defaults. Without nvcc
the check says so and passes, since a machine without CUDA cannot build these kernels anyway.

Optimisation: the front end, which finds syntax and type errors, and ptxas, which checks every
inline-PTX instruction against the architecture, run alike at -O0, and an unoptimised build
takes a quarter of the time (conv2d.cu for sm_75: 3.0 s against 11.9 s). So every build runs
at -O0 (``-Xcicc -O0 -Xptxas -O0``), and each file's float16 NHWC combination (or the last
quantized one) and its bfloat16 NHWC one are built for sm_90 at nvcc's default -O3 instead, as
the H200 compiles them: an error that only optimisation exposes (an immediate operand that needs
constant folding) shows there, and an -O3 build finds all that an -O0 one would. The whole check
before bfloat16: 45 unoptimised builds in 88 s on two cores here, and the seven -O3 builds brought
it to about two minutes (it took 232 s with every build at -O3); with bfloat16, 77 builds in 114-115 s
(session 44: leaving out the sm_90 -O0 twins of the twelve -O3 builds, 12 of 149 architecture passes,
did not show in that time).
A build that compiles with a warning fails the check as well: PyCUDA shows users every one.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "kernels_cu"
ARCHS = ("75", "80", "90", "120")


def variants() -> list[tuple[Path, dict[str, int], tuple[str, ...]]]:
    """(file, defines, archs): every dtype x layout for every arch; the fused-ReLU epilogue
    (a store-side change that compiles alike everywhere) for sm_90 only, to keep CI short.
    The quantized files take neither DTYPE_HALF, DTYPE_BF16 nor FUSE_RELU: their own type macros
    instead."""
    out = []
    quant = {
        # int8 and uint8 pooling
        "quant_pool2d.cu": [{"DTYPE_UINT8": u} for u in (0, 1)],
        # input x weight -> output types: int8 x int8 -> int32, uint8 x int8 -> int8,
        # int8 x uint8 -> uint8, uint8 x uint8 -> int32
        "quant_conv2d.cu": [{"DTYPE_UINT8": u, "W_UINT8": wu, "Y_KIND": yk}
                            for u, wu, yk in ((0, 0, 0), (1, 0, 1), (0, 1, 2), (1, 1, 0))],
    }
    for path in sorted(KERNELS.glob("*.cu")):
        if path.name in quant:
            combos = [{**d, "LAYOUT_NHWC": nhwc} for d in quant[path.name] for nhwc in (0, 1)]
        else:
            combos = [{"DTYPE_HALF": half, "LAYOUT_NHWC": nhwc} for half, nhwc in itertools.product((0, 1), (0, 1))]
        # every combination for sm_75 (no cp.async) and sm_90 (the measured architecture); the
        # first and last (float32 NCHW and float16 NHWC, or the quantized ends) for sm_80 and
        # sm_120 too, whose code paths differ from sm_90's in launch bounds only
        out.extend((path, d, ARCHS if i in (0, len(combos) - 1) else ("75", "90")) for i, d in enumerate(combos))
        if path.name in quant:
            continue
        # bfloat16 (DTYPE_HALF=0: float16's own paths stay out), both layouts for sm_75 and sm_90, NCHW
        # for sm_80 and NHWC for sm_120 besides
        out.append((path, {"DTYPE_BF16": 1, "DTYPE_HALF": 0, "LAYOUT_NHWC": 0}, ("75", "80", "90")))
        out.append((path, {"DTYPE_BF16": 1, "DTYPE_HALF": 0, "LAYOUT_NHWC": 1}, ("75", "90", "120")))
        out.append((path, {"DTYPE_HALF": 0, "LAYOUT_NHWC": 1, "FUSE_RELU": 1}, ("90",)))
        out.append((path, {"DTYPE_HALF": 1, "LAYOUT_NHWC": 0, "FUSE_RELU": 1}, ("90",)))
        out.append((path, {"DTYPE_BF16": 1, "DTYPE_HALF": 0, "LAYOUT_NHWC": 0, "FUSE_RELU": 1}, ("90",)))
    # the streamed-weight kernels' 4-row tiles (TC_WIDE_ROWS 4: 128 threads, what sm_80's stride 2 and the
    # 99 KiB parts build), float16 NHWC and bfloat16 NCHW
    conv = KERNELS / "conv2d.cu"
    if conv.exists():
        out.append((conv, {"DTYPE_HALF": 1, "LAYOUT_NHWC": 1, "TC_WIDE_ROWS": 4}, ("80", "90", "120")))
        out.append((conv, {"DTYPE_BF16": 1, "DTYPE_HALF": 0, "LAYOUT_NHWC": 0, "TC_WIDE_ROWS": 4}, ("90",)))
        # ... in one stage (TC_WIDE_STAGES 1: the 99 KiB parts' 3x3 stride 2)
        out.append((conv, {"DTYPE_HALF": 1, "LAYOUT_NHWC": 1, "TC_WIDE_ROWS": 4, "TC_WIDE_STAGES": 1}, ("120",)))
    # a shape the launcher fixes at build time: global pooling's plane size (ADAPT_GHW); and the
    # NHWC global pooling's lanes a pair that the sm_90 float16 entry asks for (ADAPT_GVEC_S 2,
    # ADAPT_GVEC_U 4), whose shuffles the default build leaves out
    adaptive = KERNELS / "adaptive_pool2d.cu"
    if adaptive.exists():
        out.extend((adaptive, {"DTYPE_HALF": half, "LAYOUT_NHWC": 0, "ADAPT_GHW": 49}, ("90",)) for half in (0, 1))
        out.append((adaptive, {"DTYPE_BF16": 1, "DTYPE_HALF": 0, "LAYOUT_NHWC": 0, "ADAPT_GHW": 49}, ("75", "90")))
        out.append((adaptive, {"DTYPE_HALF": 1, "LAYOUT_NHWC": 1, "ADAPT_GVEC_S": 2, "ADAPT_GVEC_U": 4}, ("75", "90")))
        out.append((adaptive, {"DTYPE_BF16": 1, "DTYPE_HALF": 0, "LAYOUT_NHWC": 1, "ADAPT_GVEC_S": 2,
                               "ADAPT_GVEC_U": 4}, ("90",)))
    return out


def builds() -> list[tuple[Path, dict[str, int], tuple[str, ...], bool]]:
    """(file, defines, archs, optimised): the variants at -O0, and each file's last combination
    for every architecture (float16 NHWC, or the last quantized one) and its bfloat16 NHWC build
    once more for sm_90 at -O3 (and not at -O0 for sm_90)."""
    todo = variants()
    last: dict[Path, dict[str, int]] = {}
    bf16: dict[Path, dict[str, int]] = {}
    for path, defines, archs in todo:
        if len(archs) == len(ARCHS):
            last[path] = defines
        if defines.get("DTYPE_BF16") and defines.get("LAYOUT_NHWC") and set(defines) == {"DTYPE_BF16", "DTYPE_HALF",
                                                                                        "LAYOUT_NHWC"}:
            bf16[path] = defines
    optimised = [*last.items(), *bf16.items()]
    # the -O3 sm_90 build checks all that its -O0 twin would (front end and ptxas alike), so that
    # twin builds for the other architectures only
    out = [(path, defines, tuple(a for a in archs if a != "90" or (path, defines) not in optimised), False)
           for path, defines, archs in todo]
    out.extend((path, d, ("90",), True) for path, d in optimised)
    return [b for b in out if b[2]]


def compile_one(
    nvcc: str, path: Path, defines: dict[str, int], archs: tuple[str, ...], optimised: bool, workdir: str
) -> tuple[str, int, str]:
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    flags = [f"-D{k}={v}" for k, v in sorted(defines.items())]
    opt = [] if optimised else ["-Xcicc", "-O0", "-Xptxas", "-O0"]
    # device code only (-fatbin): the files hold kernels alone, and skipping the host pass saves
    # about a sixth of each build
    out = os.path.join(workdir, f"{path.stem}-{abs(hash((*flags, *archs, optimised)))}.fatbin")
    cmd = [nvcc, "-fatbin", "--std=c++17", "-I", str(KERNELS), *gencode, *flags, *opt, str(path), "-o", out]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    level = "-O3" if optimised else "-O0"
    return f"sm_{'/'.join(archs)} {level}: {path.name} {' '.join(flags)}", proc.returncode, proc.stdout + proc.stderr


def main() -> int:
    nvcc = os.environ.get("NVCC") or shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc"
                                                           if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    todo = builds()
    if not todo:
        print("nvcc check: no .cu files")
        return 0
    if nvcc is None:
        print("nvcc check: skipped, nvcc not found (install the CUDA toolkit to compile kernels_cu/)")
        return 0
    # NVCC_JOBS: parallel builds (default: every core)
    jobs = int(os.environ.get("NVCC_JOBS") or 0) or os.cpu_count() or 2
    # the longest builds first, so that no core idles on the last large file
    todo.sort(key=lambda v: v[0].stat().st_size * (4 * len(v[2]) if v[3] else len(v[2])), reverse=True)
    failed = 0
    with tempfile.TemporaryDirectory() as work, ThreadPoolExecutor(max_workers=jobs) as pool:
        for name, code, log in pool.map(lambda v: compile_one(nvcc, *v, work), todo):
            # a warning fails the check too: hal's users see every one (PyCUDA hands them on as UserWarning)
            warned = "warning" in log.lower()
            status = "ok" if code == 0 and not warned else ("FAILED (warnings)" if code == 0 else "FAILED")
            print(f"nvcc {name}: {status}")
            if code or warned:
                failed += 1
                print(log)
    print(f"nvcc check done: {len(todo) - failed} builds compiled, {failed} did not")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
