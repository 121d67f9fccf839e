#!/usr/bin/env bash
# bfloat16's first GPU check, one device call (about 5 min): conformance in bfloat16 on cuda:0 and
# opencl:nvidia, and tests/test_bf16_cuda.py's GPU tests (every CUDA path forced: pooling, adaptive and
# global pooling, the CUDA-core convs, BatchNorm, the device's own store rounding), in parallel.
# tests/test_dlpack.py on cuda:0 too (DLPack export to PyTorch, its bf16 CUDA tensors imported without a copy).
#   carry .device; command: bash benchmarks/bf16_gpu_check.sh   (logs and a summary in $OUT)
# T (seconds, default 240: the GPU tests alone took 164 s on an H100) bounds each of the three jobs. Then, unless BENCH=0, the timing:
# benchmarks/cuda_ops.py --dtype bfloat16 (hal's served parameters and the schema default against PyTorch's
# bfloat16 in the same run, every hal output checked against PyTorch's first; bounded by TB, default 240 s).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-/tmp/hal-out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
source .device/setup.sh >"$OUT/setup.log" 2>&1 || { echo "setup failed"; tail -20 "$OUT/setup.log"; exit 1; }
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$OUT/pip.log" 2>&1 || { tail -20 "$OUT/pip.log"; exit 1; }
python3 -c "import ml_dtypes" 2>/dev/null || { echo "ml_dtypes missing: add its cp312 wheel to .device (pip download ml_dtypes)"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
T=${T:-240}
job() { name=$1; shift; ( timeout "$T" "$@" >"$OUT/$name.txt" 2>&1; echo "exit $?" >>"$OUT/$name.txt" ) & }
job conf-cuda hal conformance --device cuda:0 --dtype bfloat16 --seed 39
job conf-ocl hal conformance --device opencl:nvidia --dtype bfloat16 --seed 39
job pytest-cuda python3 -m pytest -q -p no:cacheprovider -m cuda -W ignore::UserWarning tests/test_bf16_cuda.py \
  tests/test_dlpack.py
wait
for f in "$OUT"/conf-*.txt "$OUT"/pytest-*.txt; do echo "=== $f"; tail -6 "$f"; done
if [ "${BENCH:-1}" != 0 ]; then
  timeout "${TB:-240}" python3 benchmarks/cuda_ops.py --dtype bfloat16 --no-torch-call --out "$OUT/bench-bf16" \
    >"$OUT/bench-bf16.txt" 2>&1; echo "exit $?" >>"$OUT/bench-bf16.txt"
  echo "=== bench-bf16"; tail -75 "$OUT/bench-bf16.txt"
fi
