"""How many distinct kernels the CUDA tuner's candidates launch, without a GPU.

For each tuning workload on CUDA's drawn spaces (conv2d, batch_norm), the candidates a run of
``--mode`` would queue (``tuner.candidate_order``, the seed's draw): their launch plans as planned
for an H200 (tools/cuda_emu's planning backend) and their built signatures, the cubins built by
nvcc here (``--jobs`` at once, cached under ``--cache``). Prints, per workload, the candidates,
the distinct launch signatures and the distinct built signatures (the kernels the tuner measures).

    python benchmarks/experiments/tune_distinct.py --mode rapid --seed 45
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import random
import subprocess
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="rapid", choices=("rapid", "normal", "exhaustive"))
    parser.add_argument("--seed", type=int, default=45)
    parser.add_argument("--size", default="small")
    parser.add_argument("--only", default="", help="workload names, comma-separated (default: all drawn ones)")
    parser.add_argument("--cases", default="float16:NHWC,float32:NCHW", help="dtype:layout pairs")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--screen", action="store_true",
                        help="order the candidates as hal tune does since session 46 (tuner.screen_parameters)")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/hal-tune-distinct"))
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT / "tools"))
    import cuda_emu

    from hal.backends import cuda
    from hal.tuning import tuner, workloads

    args.cache.mkdir(parents=True, exist_ok=True)

    def nvcc_build(file: str, defines: dict[str, int], arch: str) -> bytes:
        options = cuda.CudaBackend.compile_options(defines)
        out = args.cache / (hashlib.sha256("|".join([file, arch, *options]).encode()).hexdigest() + ".cubin")
        if not out.is_file():
            tmp = out.with_suffix(".tmp")
            subprocess.run(["nvcc", "-cubin", f"-arch={arch}", f"-I{ROOT / 'kernels_cu'}", *options, "-o", str(tmp),
                            str(ROOT / "kernels_cu" / file)], check=True, capture_output=True)
            tmp.replace(out)
        return out.read_bytes()

    cuda.build_cubin = nvcc_build  # type: ignore[assignment]
    be = cuda_emu.h200_backend()

    def build_all(specs: list[object], sets: list[dict[str, int]]) -> int:
        builds = set()
        for spec in specs:
            for s in sets:
                try:
                    builds.update((launch.file, launch.defines) for launch in be._plan_for(spec, s))
                except Exception:  # as CudaBackend.prebuild: the evaluation reports it
                    continue
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda key: nvcc_build(key[0], dict(key[1]), be._arch), builds))
        return len(builds)

    be.prebuild = build_all  # the backend's own runs PyCUDA's nvcc in processes: unpatched there
    device = types.SimpleNamespace(backend=be, info=be.info, id="cuda:emulated-h200")
    schemas = be.schemas()
    only = {n for n in args.only.split(",") if n}
    for wl in workloads.select(None):
        schema = schemas[wl.kernel]
        if schema.size() <= tuner.ENUMERATED_UP_TO or (only and wl.name not in only):
            continue
        for case in args.cases.split(","):
            dtype, layout = case.split(":")
            spec = wl.spec_for(wl.shape(args.size), dtype, layout)
            default = schema.defaults()
            rng = random.Random(f"{args.seed}-{wl.name}-{dtype}-{layout}")
            screen = tuner.screen_parameters(device, wl, args.size, dtype, layout, schema, default) \
                if args.screen else None
            sets = [default, *tuner.candidate_order(schema, be.info, default, rng, tuner.MODES[args.mode], screen)]
            builds = build_all([spec], sets)
            launched = {be.launch_signature(spec, s) for s in sets}
            built = {be.built_signature(spec, s) for s in sets}
            kernels = {tuple(k[1] for k in b) for b in built if b is not None}
            if screen is not None:
                print(f"{wl.name:16s} {dtype:8s} {layout}: screen: {len(screen.variants)} variants, relevant "
                      f"{sorted(screen.relevant)} of {len(schema.params)}", flush=True)
            print(f"{wl.name:16s} {dtype:8s} {layout}: {len(sets):4d} candidates, {builds:4d} -D sets, "
                  f"{len(launched):4d} launch signatures, {len(built):4d} built signatures "
                  f"({len(kernels)} kernel sequences)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
