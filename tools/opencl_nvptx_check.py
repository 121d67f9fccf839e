"""Compile the OpenCL kernels' NVIDIA-only paths with clang for nvptx (CI has no GPU).

``pool2d.cl`` takes inline PTX on NVIDIA's OpenCL for sm_80 and later (``HAL_PTX_MAXNAN``:
``max.NaN.f32``, and for float16 with ``HALF_RAW`` the packed ``max.NaN.f16x2`` and
``prmt``), and ``qpool2d_pack.cl`` on sm_90 and later (``HAL_PTX_U16X2``: ``max.s16x2`` for
int8, ``max.u16x2`` for uint8, ``prmt``). PoCL, which runs every other test here, never
builds those branches, so a syntax error in them would first show on the GPU. This check
builds them with clang's OpenCL front end for ``nvptx64-nvidia-nvcl`` (the NDRange builtins
are clang's; ``vload_half*`` and ``vstore_half*``, which come from a runtime library clang
does not link here, are declared by a stub) and checks that the PTX holds the instructions
each variant is for. Without clang the check says so and passes.
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
KERNELS = ROOT / "kernels_cl"
CLANGS = ("clang", *(f"clang-{v}" for v in range(20, 13, -1)))


def stub() -> str:
    """Declarations of the half conversions clang's nvptx target leaves undeclared."""
    lines = []
    for space, n in itertools.product(("__global", "__private", "__local"), ("", "2", "4", "8", "16")):
        f = f"float{n}"
        lines.append(f"{f} __attribute__((overloadable)) vload_half{n}(size_t o, const {space} half* p);")
        lines.append(f"void __attribute__((overloadable)) vstore_half{n}({f} v, size_t o, {space} half* p);")
        if n:
            lines.append(f"{f} __attribute__((overloadable)) vloada_half{n}(size_t o, const {space} half* p);")
            lines.append(f"void __attribute__((overloadable)) vstorea_half{n}({f} v, size_t o, {space} half* p);")
    return "\n".join(lines) + "\n"


def variants() -> list[tuple[dict[str, int], tuple[str, ...]]]:
    """(defines, instructions the PTX must hold) for pool2d.cl's index-free max paths as the
    launcher builds them on NVIDIA sm_80+: NHWC, NCHW direct (interior) and the row strips (2x2 and 3x3,
    left pad 0 and 1), float32, float16 as raw words and bfloat16 (16-bit words, float max), VEC 4
    and 8, one fused-ReLU each."""
    base = {"HAL_PTX_MAXNAN": 1, "WG": 128, "POOL_FIXED": 1, "POOL_SH": 2, "POOL_SW": 2, "POOL_DH": 1, "POOL_DW": 1}
    dtypes = {"float32": {}, "float16": {"DTYPE_HALF": 1, "HALF_RAW": 1}, "bfloat16": {"DTYPE_BF16": 1}}
    out = []
    for name, vec in itertools.product(dtypes, (4, 8)):
        half = int(name == "float16")
        dtype = {"DTYPE_HALF": 0, **dtypes[name], "VEC": vec}
        want = ("max.NaN.f16x2",) if half else ("max.NaN.f32",)
        for relu in (0, 1):
            out.append(({**base, **dtype, "LAYOUT_NHWC": 1, "POOL_NO_IDX": 1, "POOL_KH": 3, "POOL_KW": 3,
                         "FUSE_RELU": relu}, want))
        # NCHW direct: the PTX max serves its mask-free interior path (the INTERIOR parameter)
        out.append(({**base, **dtype, "LAYOUT_NHWC": 0, "POOL_NO_IDX": 1, "POOL_INTERIOR": 1, "POOL_KH": 3,
                     "POOL_KW": 3}, ("max.NaN.f32",)))
        for k, pl in itertools.product((2, 3), (0, 1)):
            out.append(({**base, **dtype, "LAYOUT_NHWC": 0, "LOCAL_TILE": 3, "STRIP_ROWS": 2, "POOL_PL": pl,
                         "POOL_KH": k, "POOL_KW": k, "FUSE_RELU": int(k == 3 and pl == 1)},
                        (*want, "prmt.b32") if half else want))
    return out


def qpack_variants() -> list[tuple[dict[str, int], tuple[str, ...]]]:
    """(defines, instructions the PTX must hold) for qpool2d_pack.cl's max as the launcher builds
    it on NVIDIA sm_90+ (HAL_PTX_U16X2): the NCHW strips (2x2 and 3x3, left pad 0 and 1, rows
    of 16 aligned bytes or of four words) and the NHWC 16-channel kernel, int8 and uint8. Each
    program holds the average too, which has no PTX of its own but is built all the same."""
    out = []
    for int8 in (1, 0):
        base = {"HAL_PTX_U16X2": 1, "WG": 128, "VEC": 8, "DTYPE_INT8": int8, "DTYPE_UINT8": 1 - int8}
        want = ("max.s16x2" if int8 else "max.u16x2", "prmt.b32")
        for k, pl in itertools.product((2, 3), (0, 1)):
            out.append(({**base, "LAYOUT_NHWC": 0, "STRIP_K": k, "POOL_PL": pl, "STRIP_ROWS": 2 + 2 * (k == 3),
                         "QP_ALIGN16": int(pl == 1)}, want))
        out.append(({**base, "LAYOUT_NHWC": 1, "POOL_FIXED": 1, "POOL_KH": 3, "POOL_KW": 3, "POOL_SH": 2,
                     "POOL_SW": 2, "POOL_DH": 1, "POOL_DW": 1}, want[:1]))
    return out


def compile_one(clang: str, source: Path, defines: dict[str, int], want: tuple[str, ...],
                workdir: str) -> tuple[str, bool, str]:
    flags = [f"-D{k}={v}" for k, v in sorted(defines.items())]
    out = os.path.join(workdir, f"{source.stem}-{abs(hash(tuple(flags)))}.ptx")
    cmd = [clang, "-x", "cl", "-cl-std=CL1.2", "-target", "nvptx64-nvidia-nvcl", "-S", "-O3", *flags, str(source),
           "-o", out]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    label = f"{source.stem.removesuffix('_nvptx')}.cl {' '.join(flags)}"
    if proc.returncode:
        return label, False, proc.stdout + proc.stderr
    ptx = Path(out).read_text()
    missing = [w for w in want if w not in ptx]
    return label, not missing, f"the PTX lacks {missing}" if missing else ""


def main() -> int:
    clang = os.environ.get("CLANG") or next((c for c in map(shutil.which, CLANGS) if c), None)
    if clang is None:
        print("opencl nvptx check: no clang on PATH (set CLANG); skipped, NVIDIA-only paths not compiled")
        return 0
    failures = 0
    with tempfile.TemporaryDirectory() as workdir:
        # the backend's own build prepends the prelude (and int8's header) the same way
        source = Path(workdir) / "pool2d_nvptx.cl"
        source.write_text(stub() + (KERNELS / "hal_prelude.h").read_text() + (KERNELS / "pool2d.cl").read_text())
        qsource = Path(workdir) / "qpool2d_pack_nvptx.cl"
        qsource.write_text(stub() + "".join((KERNELS / f).read_text()
                                            for f in ("hal_prelude.h", "hal_quant.h", "qpool2d_pack.cl")))
        todo = [(source, *v) for v in variants()] + [(qsource, *v) for v in qpack_variants()]
        with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
            for label, ok, log in pool.map(lambda v: compile_one(clang, v[0], v[1], v[2], workdir), todo):
                if not ok:
                    failures += 1
                    print(f"FAIL {label}\n{log.strip()}\n")
    print(f"opencl nvptx check ({Path(clang).name}): {len(todo) - failures}/{len(todo)} variants built"
          " with the PTX they are for")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
