#!/usr/bin/env bash
# session 43 call 3: the merged masked NHWC int8 average + entries on NVIDIA's OpenCL: the int8/uint8 pooling
# table as served, the patched kernel twice and main's once (same entries), then correctness
set -u
export AB_FILE=kernels_cl/qpool2d_pack.cl AB_OLD=.device/qpool2d_pack.main.cl T_OCL=70
export OCL_ARGS="--dtypes int8,uint8 --only pool"
export OCL_TESTS="tests/test_forced_params.py tests/test_quant.py -k quantized" T_OCLTEST=150
bash benchmarks/h200_session.sh ocl-ab ocl-tests
source .device/setup.sh >/dev/null 2>&1
timeout 120 hal conformance --device opencl:nvidia --dtype int8,uint8 --seed 43 > $OUT/conformance-int8.txt 2>&1
grep -E "FAIL|passed" $OUT/conformance-int8.txt | tail -5
