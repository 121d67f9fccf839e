#!/usr/bin/env bash
# session 43 call 4: the merged tree on NVIDIA's OpenCL: the int8/uint8 pooling table as served, then the
# forced-path tests of the changed NHWC paths
set -u
source .device/setup.sh > $OUT/setup.txt 2>&1
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . > $OUT/pip.txt 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/card.txt
timeout 80 python3 benchmarks/opencl_ops.py --device opencl:nvidia --dtypes int8,uint8 --only pool --out $OUT/served > $OUT/call4-served.txt 2>&1
grep -v -i "warn\|lambda" $OUT/call4-served.txt | tail -12
HAL_TEST_DEVICES=opencl:nvidia HAL_TEST_EXAMPLES=8 timeout 230 python3 -m pytest -q -p no:cacheprovider \
  tests/test_forced_params.py -k "nhwc16 or packed or nhwc_paths" > $OUT/call4-pytest.txt 2>&1
grep -E "passed|failed|^FAILED" $OUT/call4-pytest.txt | tail -5
