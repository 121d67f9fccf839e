"""What NVIDIA's OpenCL compiler makes of hal's float16 (and int8) kernels: the PTX of each program.

NVIDIA's OpenCL returns PTX as a program's binary. For a few float16 cases this builds
the kernels hal would run (parameters forced), writes each program's PTX to OUT and
prints, per program, its -D set and the count of the instructions that tell where the
time goes: ``ld.local`` / ``st.local`` (private arrays the compiler put in memory),
vector global loads, 16-bit global loads and stores, and half <-> float conversions.

    python3 benchmarks/opencl_ptx.py [--device opencl:nvidia] [--out DIR] [--only TEXT] [--ptxas sm_90]

``--ptxas`` assembles each PTX with the CUDA toolkit's ptxas and prints each kernel's
registers and spills: whether BatchNorm's statistics grid (1024 work-items per compute unit,
one wave) really fits one wave needs at most 64 registers a work-item on sm_90.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

import hal
from hal import spec as S
from hal.tensor import empty

#: (name, family, layout, parameters) built in float16 on a small shape
CASES: tuple[tuple[str, str, str, dict[str, int]], ...] = (
    ("maxpool strips raw", "pool2d", "NCHW", {"WG": 128, "VEC": 8, "LOCAL_TILE": 3, "STRIP_ROWS": 2, "HALF_RAW": 1}),
    ("maxpool strips vloada", "pool2d", "NCHW", {"WG": 128, "VEC": 8, "LOCAL_TILE": 3, "STRIP_ROWS": 2,
                                                 "HALF_RAW": 0}),
    ("maxpool nhwc raw", "pool2d", "NHWC", {"WG": 128, "VEC": 8, "LOCAL_TILE": 0, "HALF_RAW": 1}),
    ("avgpool strips raw", "pool2d", "NCHW", {"WG": 128, "VEC": 8, "LOCAL_TILE": 3, "STRIP_ROWS": 2, "HALF_RAW": 1}),
    ("avgpool nhwc raw", "pool2d", "NHWC", {"WG": 128, "VEC": 8, "LOCAL_TILE": 0, "HALF_RAW": 1}),
    ("global avg nchw", "adaptive_pool2d", "NCHW", {"WG": 128, "VEC": 8, "MODE": 0, "PIPE_GROUPS": 8}),
    ("global avg nhwc raw", "adaptive_pool2d", "NHWC", {"WG": 32, "VEC": 8, "MODE": 2, "HALF_RAW": 1}),
    ("bn infer", "batch_norm", "NCHW", {}),
    ("bn train", "batch_norm", "NCHW", {}),
    # float32 training with the parameters the H200 serves at 256x64x32x32 (session 35; names
    # ending "f32" build in float32)
    ("bn train f32", "batch_norm", "NCHW", {"WG": 128, "VEC": 4}),
    ("bn train nhwc f32", "batch_norm", "NHWC", {"WG": 256, "VEC": 4, "HALF_RAW": 1}),
    # int8 (qpool2d.cl; names starting "int8" build in int8)
    ("int8 maxpool strips", "pool2d", "NCHW", {"WG": 128, "VEC": 8, "LOCAL_TILE": 3, "STRIP_ROWS": 4}),
    ("int8 maxpool nhwc", "pool2d", "NHWC", {"WG": 128, "VEC": 8, "LOCAL_TILE": 0}),
    # the average strips: 31 % of copy against max's 57 % (session 16: where the division goes)
    ("int8 avgpool strips", "pool2d", "NCHW", {"WG": 128, "VEC": 8, "LOCAL_TILE": 3, "STRIP_ROWS": 2}),
    # 16 channels per work-item (QVEC16; one program holds the aligned uint4 and the vload16 paths)
    ("int8 maxpool nhwc16", "pool2d", "NHWC", {"WG": 128, "QVEC16": 1}),
    ("int8 avgpool nhwc16", "pool2d", "NHWC", {"WG": 128, "QVEC16": 1}),
    # packed bytes (qpool2d_pack.cl): NCHW strips of 16-byte rows (QROWS16), NHWC QVEC16=2
    ("int8 maxpool rows16", "pool2d", "NCHW", {"WG": 128, "QROWS16": 1, "STRIP_ROWS": 4}),
    ("int8 avgpool rows16", "pool2d", "NCHW", {"WG": 128, "QROWS16": 1, "STRIP_ROWS": 4}),
    ("int8 maxpool nhwc16 packed", "pool2d", "NHWC", {"WG": 128, "QVEC16": 2}),
    ("int8 avgpool nhwc16 packed", "pool2d", "NHWC", {"WG": 128, "QVEC16": 2}),
    # QVEC16=3 and 4: 2 and 4 output pixels a work-item (session 23: the average slower than QVEC16=2)
    ("int8 maxpool nhwc16 pix2", "pool2d", "NHWC", {"WG": 128, "QVEC16": 3}),
    ("int8 avgpool nhwc16 pix2", "pool2d", "NHWC", {"WG": 128, "QVEC16": 3}),
    ("int8 maxpool nhwc16 pix4", "pool2d", "NHWC", {"WG": 128, "QVEC16": 4}),
    ("int8 avgpool nhwc16 pix4", "pool2d", "NHWC", {"WG": 128, "QVEC16": 4}),
)

PATTERNS = {
    "ld.local": r"\bld\.local",
    "st.local": r"\bst\.local",
    "ld.global.v": r"\bld\.global(\.\w+)*\.v\d",
    "ld.global 16-bit": r"\bld\.global(\.nc)?\.(u16|b16|f16)\b",
    "ld.global 8-bit": r"\bld\.global(\.nc)?\.(u8|s8|b8)\b",
    "st.global 16-bit": r"\bst\.global\.(u16|b16|f16)\b",
    "st.global.v": r"\bst\.global(\.\w+)*\.v\d",
    "cvt f32<-f16": r"\bcvt\.f32\.f16\b",
    "cvt f16<-f32": r"\bcvt\.rn\.f16\.f32\b",
    "int div/rem": r"\b(div|rem)\.[su]32\b",
    "div.f32": r"\bdiv\.\w+\.f32\b",
    "rcp.f32": r"\brcp\.\w+(\.ftz)?\.f32\b",
    "cvt int<-f32": r"\bcvt\.\w+\.[su]32\.f32\b",
    "add.f32": r"\badd\.(rn\.)?f32\b",
    "max.u16x2": r"\bmax\.u16x2\b",
    "max.s16x2": r"\bmax\.s16x2\b",
    "prmt": r"\bprmt\.b32\b",
    "mul.hi": r"\bmul\.hi\.[su]32\b",
    "setp": r"\bsetp\.",
    "branches": r"\bbra\b",
}


def main(argv: list[str] | None = None) -> int:
    """Build each case, dump the PTX, print the instruction counts."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="opencl:nvidia")
    ap.add_argument("--out", default=".")
    ap.add_argument("--only", default="", help="only cases whose name contains this text")
    ap.add_argument("--ptxas", default="", metavar="ARCH",
                    help="also assemble each PTX with `ptxas -arch=ARCH -v` and print each kernel's registers, "
                         "spills and shared memory (what occupancy it allows)")
    args = ap.parse_args(argv)
    dev = hal.device(args.device)
    backend: Any = dev.backend
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    half = np.dtype(np.float16)
    for name, family, layout, params in CASES:
        if args.only not in name:
            continue
        before = set(backend._rt.programs)
        shape = (2, 64, 7, 7) if family == "adaptive_pool2d" else (2, 8, 32, 48)
        dt = np.dtype(np.int8) if name.startswith("int8") else np.dtype(np.float32) if name.endswith("f32") else half
        geo = S.TensorGeometry(*shape, layout, dt)  # type: ignore[arg-type]
        data = np.random.default_rng(0).standard_normal(shape) * (40 if dt == np.int8 else 1)
        x = hal.asarray(data.astype(dt), device=dev, layout=layout)
        if family == "pool2d":
            kind = "avg" if "avgpool" in name else "max"
            spec = S.pool2d_spec(kind, geo, 3, 2, 1, 1, False, True, None, False)
            y = empty(spec.out_shape, dt, dev, layout)
            backend.pool2d(spec, x.buffer, y.buffer, None, {**dev.tuner.resolve_spec(spec).params, **params})
        elif family == "adaptive_pool2d":
            aspec = S.adaptive_pool2d_spec("avg", S.plane_geometry(geo), 1, False)
            y = empty(aspec.out_shape, half, dev, layout)
            backend.adaptive_pool2d(aspec, x.buffer, y.buffer, None, {**dev.tuner.resolve_spec(aspec).params, **params})
        else:
            training = "train" in name
            tuner, served = dev.tuner, dev.tuner.resolve_spec
            if params:  # the case's parameters over the served ones, for this call only
                def resolve(spec: Any, served: Any = served, params: dict[str, int] = params) -> Any:
                    return dataclasses.replace(served(spec), params={**served(spec).params, **params})

                tuner.resolve_spec = resolve  # type: ignore[method-assign]
            try:
                hal.batch_norm(x, np.zeros(8, np.float32), np.ones(8, np.float32), training=training)
            finally:
                tuner.resolve_spec = served  # type: ignore[method-assign]
        backend.synchronize()
        for key in sorted(set(backend._rt.programs) - before, key=str):
            file, defines = key
            # the driver's binary is the PTX text with NUL padding, which ptxas reads as an unexpected EOF
            ptx = backend._rt.programs[key].binaries[0].decode("latin1", "replace").rstrip("\0") + "\n"
            tag = re.sub(r"\W+", "_", name)
            (out / f"{tag}.ptx").write_text(ptx)
            counts = {k: len(re.findall(p, ptx)) for k, p in PATTERNS.items()}
            print(f"== {name}: {file} {dict(defines)}")
            print("   " + ", ".join(f"{k} {v}" for k, v in counts.items()))
            if args.ptxas:
                print(ptxas_usage(out / f"{tag}.ptx", args.ptxas))
    return 0


def ptxas_usage(ptx: Path, arch: str) -> str:
    """ptxas's resource lines for each kernel of one PTX file (registers, spills, shared memory)."""
    import subprocess

    run = subprocess.run(["ptxas", f"-arch={arch}", "-v", str(ptx), "-o", "/dev/null"], capture_output=True,
                         text=True, check=False)
    lines = [ln.strip() for ln in (run.stdout + run.stderr).splitlines()
             if "Compiling entry" in ln or "Used" in ln or "spill" in ln]
    return "\n".join("   " + ln for ln in lines) or (
        f"   ptxas gave nothing (exit {run.returncode}): {(run.stderr or run.stdout).strip()[-300:]}")


if __name__ == "__main__":
    sys.exit(main())
