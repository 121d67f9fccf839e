#!/usr/bin/env bash
# The GPU runs pending since session 43, one device call (session 44 wrote it; no machine started that day):
#   run: bash benchmarks/pending_gpu.sh core, then bash benchmarks/pending_gpu.sh rest (two calls of at most about
#   560 s and 210 s; "all", the default, is both in one call, up to about 770 s: past one call's 600 s if every step
#   runs to its limit). Carry .device; results under $OUT, a summary printed. "core": the session-45 checks and the
#   forced-path test; "rest": the H200 figures (another card: conformance in every dtype).
# On an H200 only: the OpenCL int8/uint8 pooling table as served (session 43's NHWC average, the int8 rows last
# measured in session 24), bfloat16 on both backends (no H200 figure yet). On any card: the forced-path test that
# session 43's H100 left unchecked; on another card, conformance in every dtype on both backends instead.
# First, on any card (session 45): BatchNorm's CUDA checks with the shifted sums re-centred (BN_PIVOT_N 4, the
# new default), the training calls timed against BN_PIVOT_N 0 in one run (a ratio, on whatever card came), a short
# hal tune on cuda:0 (drawn candidates, NaN and infinities in its checks), float conformance on both backends.
# Delete a line once its figures are in docs/performance.md.
set -u
source .device/setup.sh > $OUT/setup.txt 2>&1
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . > $OUT/pip.txt 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/card.txt
CARD=$(cat $OUT/card.txt); echo "card: $CARD"
export HAL_CACHE_DIR=/tmp/hal-cache
PART=${1:-all}  # all, core, rest, or short (core without the BN_PIVOT_N timing and the forced-path test: ~350 s)
if [[ "$PART" != rest ]]; then
timeout 90 python3 benchmarks/check_cuda.py --only bn --progress --match "16x64|odd|C130|params|fused" --out $OUT/check-bn > $OUT/check-bn.txt 2>&1
grep -v "^ok\|  ok" $OUT/check-bn.txt | tail -6
[[ "$PART" != short ]] && timeout 120 python3 benchmarks/experiments/bn_breakdown.py --vary '{"BN_PIVOT_N": 0}' \
  --out $OUT/bn-pivot > $OUT/bn-pivot.txt 2>&1 && tail -14 $OUT/bn-pivot.txt
# hal tune on cuda:0 gets past conv2d and BatchNorm now that their candidates are drawn (session 45), screened
# and measured once per compiled kernel (session 46): a short run (the screen builds conv2d.cu ~35 times)
timeout 150 hal tune run --device cuda:0 --ops dwconv3x3,"bn train" --mode rapid --size small --dtype float16 \
  --layout NHWC --budget 120s --seed 45 --out $OUT/tune-cuda.json > $OUT/tune-cuda.txt 2>&1
tail -12 $OUT/tune-cuda.txt
# the conformance cases with NaN and infinities (session 45) on NVIDIA's two backends, float dtypes
timeout 100 hal conformance --device cuda:0,opencl:nvidia --dtype float32,float16 --seed 45 > $OUT/conf-float.txt 2>&1
grep -E "FAIL|passed" $OUT/conf-float.txt | tail -6
fi
if [[ "$PART" == core || "$PART" == short ]]; then  # only the checks above (and, core, the forced-path test)
  :
elif [[ "$CARD" == *H200* ]]; then
  timeout 60 python3 benchmarks/opencl_ops.py --device opencl:nvidia --dtypes int8,uint8 --only pool --out $OUT/ocl-int8 > $OUT/ocl-int8.txt 2>&1
  grep -v -i "warn\|lambda" $OUT/ocl-int8.txt | tail -14
  timeout 90 python3 benchmarks/cuda_ops.py --dtype bfloat16 --no-torch-call --out $OUT/cuda-bf16 > $OUT/cuda-bf16.txt 2>&1
  tail -22 $OUT/cuda-bf16.txt
  timeout 60 python3 benchmarks/opencl_ops.py --device opencl:nvidia --dtypes bfloat16 --out $OUT/ocl-bf16 > $OUT/ocl-bf16.txt 2>&1
  grep -v -i "warn\|lambda" $OUT/ocl-bf16.txt | tail -16
else  # another card: the whole tree's correctness there instead, every dtype on both backends
  timeout 150 hal conformance --device cuda:0,opencl:nvidia --dtype float32,float16,bfloat16,int8,uint8 --seed 44 > $OUT/conformance.txt 2>&1
  grep -E "FAIL|passed" $OUT/conformance.txt | tail -6
fi
if [[ "$PART" != rest && "$PART" != short ]]; then
  HAL_TEST_DEVICES=opencl:nvidia HAL_TEST_EXAMPLES=8 timeout 90 python3 -m pytest -q -p no:cacheprovider \
    tests/test_forced_params.py -k "nhwc16_path" > $OUT/pytest-nhwc16.txt 2>&1
  grep -E "passed|failed|^FAILED" $OUT/pytest-nhwc16.txt | tail -5
fi
cd $OUT && for d in check-bn bn-pivot ocl-int8 cuda-bf16 ocl-bf16; do [ -d $d ] && tar -czf $d.tar.gz $d && rm -rf $d; done; ls $OUT
