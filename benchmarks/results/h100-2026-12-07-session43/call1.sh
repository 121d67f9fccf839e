#!/usr/bin/env bash
# session 43 call 1: one-stage 4-row build first GPU run; H200-only A/B if the card is an H200
set -u
source .device/setup.sh
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . > $OUT/pip.txt 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/card.txt 2>&1
CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader)
P='[{"TC_WIDE_ROWS":4,"TC_WIDE_STAGES":1},{"CONV_TC":3,"TC_WIDE_ROWS":4,"TC_WIDE_STAGES":1}]'
timeout 150 python3 benchmarks/check_cuda.py --only conv --match "stages1|rows4" --prebuild "$P" > $OUT/call1-check-stages1.txt 2>&1
timeout 120 compute-sanitizer --tool racecheck python3 benchmarks/check_cuda.py --only conv --match stages1 > $OUT/call1-racecheck-stages1.txt 2>&1
timeout 90 compute-sanitizer --tool memcheck python3 benchmarks/check_cuda.py --only conv --match stages1 > $OUT/call1-memcheck-stages1.txt 2>&1
timeout 120 python3 benchmarks/cuda_ops.py --sweep --dtype float16 --only "conv3x3 s2" --no-torch-call --out $OUT/sweep-s2 > $OUT/call1-sweep-s2.txt 2>&1
if [[ "$CARD" == *H200* ]]; then
  timeout 100 python3 benchmarks/cuda_ops.py --dtype bfloat16 --no-torch-call --out $OUT/cuda-bf16 > $OUT/call1-cuda-bf16.txt 2>&1
else
  timeout 110 python3 benchmarks/opencl_ops.py --device opencl:nvidia --dtypes bfloat16 --sweep --only "conv3x3 64->64" --out $OUT/ocl-bf16-conv > $OUT/call1-ocl-bf16-conv.txt 2>&1
fi
echo done
