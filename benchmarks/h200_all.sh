#!/usr/bin/env bash
# One call on the H200 machine for what the lead needs from it: hal conformance on cuda:0
# and NVIDIA's OpenCL, the OpenCL benchmark, the cnn16 demo and the test suite on both.
# Logs go to $OUT (at most 8 files come back). Each step has its own time limit (most
# important first) so the call ends inside the device time that is left.
#   bash benchmarks/h200_all.sh            (from the repository root, .device/ carried)
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-/tmp/hal-out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HAL_CACHE_DIR=/tmp/hal-cache
source .device/setup.sh >/tmp/setup.log 2>&1 || { cat /tmp/setup.log; exit 1; }
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/tmp/pip.log 2>&1 || { tail /tmp/pip.log; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
hal devices >"$OUT/devices.txt" 2>&1
step() { local name=$1 limit=$2; shift 2; local t0=$(date +%s)
  timeout "$limit" "$@"; echo "[$name: exit $?, $(( $(date +%s) - t0 )) s]"; }
step conformance ${T_CONF:-60} hal conformance --device cuda:0,opencl:nvidia --seed 7 >"$OUT/conformance.txt" 2>&1
grep -E "FAIL|passed" "$OUT/conformance.txt" | tail -12
step opencl-bench ${T_BENCH:-70} python3 benchmarks/opencl_ops.py --device opencl:nvidia >"$OUT/opencl_bench.txt" 2>&1
step demo ${T_DEMO:-30} hal demo cnn16 --batch 256 >"$OUT/demo.txt" 2>&1
step pytest ${T_TEST:-150} env HAL_TEST_DEVICES=cuda:0,opencl:nvidia HAL_TEST_EXAMPLES=${EXAMPLES:-8} \
  python3 -m pytest -q -p no:cacheprovider tests -k "not test_tuner and not test_cli" >"$OUT/pytest.log" 2>&1
grep -E "^FAILED|passed|failed" "$OUT/pytest.log" | tail -15
tail -5 "$OUT/demo.txt"; tail -40 "$OUT/opencl_bench.txt"
