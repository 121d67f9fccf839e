#!/usr/bin/env bash
# The CUDA backend's whole device session in one command, for the H200 test machine
# (see ../shared/device/README.md): install hal, check every kernel against the oracle,
# benchmark against PyTorch in the same run, optionally run compute-sanitizer.
#
# From the repository root, with ../shared/device copied to .device/ (carried):
#   bash benchmarks/cuda_device_run.sh [STEP...]
# STEPs (default: check bench): check, quickcheck, bench, sweep, sanitize, ONLY=<text>
# (restricts the benchmark to case names containing <text>). Logs and JSON go to $OUT
# (default /tmp/hal-out); the benchmark's table is printed last.
set -u -o pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
OUT="${OUT:-/tmp/hal-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export HAL_CACHE_DIR="${HAL_CACHE_DIR:-/tmp/hal-cache}"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(check bench)
only=""
for s in "${steps[@]}"; do case "$s" in ONLY=*) only="${s#ONLY=}";; esac; done

# (at most 8 files come back from $OUT: keep the set logs out of it)
source .device/setup.sh >/tmp/hal-setup.log 2>&1 || { echo "setup.sh failed"; cat /tmp/hal-setup.log; exit 1; }
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/tmp/hal-pip.log 2>&1 \
  || { echo "pip install failed"; tail -20 /tmp/hal-pip.log; exit 1; }
python3 -c "import hal.backends.cuda as c; print(c.CudaBackend.probe().reason)" || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader

rc=0
for s in "${steps[@]}"; do
  t0=$(date +%s)
  case "$s" in
    check)
      timeout 400 python3 benchmarks/check_cuda.py --out "$OUT" 2>&1 | tee "$OUT/check.log" | grep -v "^  " ; rc=$((rc | $?)) ;;
    quickcheck)
      timeout 300 python3 benchmarks/check_cuda.py --quick --out "$OUT" 2>&1 | tee "$OUT/check.log" | grep -v "^  "; rc=$((rc | $?)) ;;
    bench)
      timeout 500 python3 benchmarks/cuda_ops.py --out "$OUT" --only "$only" 2>&1 | tee "$OUT/bench.log" | tail -45 ;;
    sweep)
      timeout 560 python3 benchmarks/cuda_ops.py --sweep --out "$OUT" --only "$only" 2>&1 | tee "$OUT/bench.log" | tail -45 ;;
    profile)
      # Nsight Compute (clocks left alone) on the second float32 launch of a few cases
      : >"$OUT/ncu.log"
      while IFS='|' read -r case kern; do
        [ -z "$case" ] && continue
        timeout 120 ncu --clock-control none --launch-skip 1 --launch-count 1 --kernel-name "regex:$kern" \
          --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
          --section WarpStateStats --section SchedulerStats \
          python3 benchmarks/cuda_ops.py --profile --only "$case" >>"$OUT/ncu.log" 2>&1
        echo "ncu $case: exit $?"
      done <<< "${NCU_CASES:-maxpool3x3s2p1 64x64x112x112 nhwc|pool2d_max_tile
maxpool3x3s2p1 64x64x112x112 nchw|pool2d_max_tile
bn infer fwd 256x64x32x32 nchw|batch_norm_apply_ex
dwconv3x3 256x64x32x32 nhwc|conv2d_dw_tile}"
      grep -E "^  [a-z_0-9]+|Duration|DRAM Throughput|Memory Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per Thread|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Block Limit" "$OUT/ncu.log" | head -90 ;;
    sanitize)
      for tool in memcheck racecheck; do
        timeout 60 compute-sanitizer --tool "$tool" --print-limit 20 python3 benchmarks/check_cuda.py --only one \
          >"$OUT/sanitize-$tool.log" 2>&1
        echo "compute-sanitizer $tool: exit $? ; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|check_cuda:' "$OUT/sanitize-$tool.log" | tr '\n' ' ')"
      done ;;
    ONLY=*) ;;
    *) echo "unknown step $s" ;;
  esac
  echo "[step $s: $(( $(date +%s) - t0 )) s]"
done
exit $rc
