#!/usr/bin/env bash
# One call on the H200 machine: install hal, then the steps named on the command line,
# each under its own time limit, most important first. Every log lands in one archive,
# $OUT/results.tar.gz (the device tool brings back at most 8 files); a summary is printed.
#   bash benchmarks/h200_session.sh tests conformance overhead tune-cuda-rapid ...
# (conformance compiles every build it checks on a fresh machine: session 14 cut it at 100 s)
# Steps: tests, nn, conformance, check, sanitize, memcheck (sanitize's memcheck alone), overhead, overhead-nopdl, bench-cuda, bench-cuda2 (a second
# cuda_ops.py run into b2/, BENCH_ARGS2: a whole table split by dtype across two steps), bench-nopdl
# (HAL_CUDA_PDL=0: without programmatic dependent launch), sweep, tune-cuda-rapid,
# tune-cuda-normal, tune-ocl-rapid, tune-ocl-normal, tvd-cuda, tvd-ocl, demo, hal-bench, ocl-bench, ocl-tests, ocl-ab (AB_FILE, AB_OLD), ocl-bn-scaling (SCALE_ARGS), ocl-read,
# ocl-ptx, timing, torch-diag, ncu, quant-bench, ncu-quant, bn-breakdown, bn-fused
# (sanitize: SAN_ARGS, default "--only one"; sweep: ONLY, SWEEP_ARGS such as "--dtype float16"; the *_ARGS
# split on spaces, so check's --match with a space goes in CHECK_MATCH, e.g. CHECK_MATCH="k1n sampled", and
# cuda_ops.py's --skip in BENCH_SKIP / BENCH_SKIP2, e.g. BENCH_SKIP="g32 64x128x56x56 nhwc float32"; REQUIRE_GPU, e.g.
# H200, runs no step on another card)
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-/tmp/hal-out}"; R=/tmp/hal-results; mkdir -p "$OUT" "$R"
export PYTHONUNBUFFERED=1 HAL_CACHE_DIR=/tmp/hal-cache
# REQUIRE_GPU=H200: stop before installing when the card's name lacks it (a call for an H200 can get an H100, and
# H200 tuning entries or H200 figures must come from an H200)
if [ -n "${REQUIRE_GPU:-}" ] && ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q "$REQUIRE_GPU"; then
  echo "not a $REQUIRE_GPU ($(nvidia-smi --query-gpu=name --format=csv,noheader)): no step run"; exit 3; fi
source .device/setup.sh >"$R/setup.log" 2>&1 || { tail -20 "$R/setup.log"; exit 1; }
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$R/pip.log" 2>&1 || { tail "$R/pip.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$R/gpu.txt"
hal devices >"$R/devices.txt" 2>&1
pack() { tar -czf "$OUT/results.tar.gz" -C "$R" . ; }
trap pack EXIT
step() { local name=$1 limit=$2; shift 2; local t0=$(date +%s)
  timeout "$limit" "$@" >"$R/$name.txt" 2>&1; local rc=$?
  echo "[$name: exit $rc, $(( $(date +%s) - t0 )) s]"; pack; }  # packed after each step: a cut call still returns
tune() { local dev=$1 mode=$2 budget=$3 out=$4
  step "tune-$out" $(( budget + 60 )) hal tune run --device "$dev" --mode "$mode" --budget "${budget}s" --out "$R/$out.json" ${TUNE_ARGS:-}
  tail -4 "$R/tune-$out.txt"; }
for s in "$@"; do
  case "$s" in
    tests) step pytest ${T_TEST:-300} env HAL_TEST_DEVICES=${TEST_DEVICES:-cuda:0} HAL_TEST_EXAMPLES=8 \
        python3 -m pytest -q -p no:cacheprovider ${TESTS:-tests} -k "not test_tuner and not test_cli"
      grep -E "^FAILED|passed|failed" "$R/pytest.txt" | tail -12 ;;
    nn) step pytest-nn 120 env HAL_TEST_DEVICES=cuda:0 python3 -m pytest -q -p no:cacheprovider tests/test_nn.py
      grep -E "^FAILED|passed|failed" "$R/pytest-nn.txt" | tail -8 ;;
    conformance) step conformance ${T_CONF:-240} hal conformance --device ${CONF_DEVICES:-cuda:0,opencl:nvidia} --seed 11
      grep -E "FAIL|passed" "$R/conformance.txt" | tail -8 ;;
    check) step check ${T_CHECK:-300} python3 benchmarks/check_cuda.py --out "$R" ${CHECK_ARGS:-} \
        ${CHECK_MATCH:+--match "$CHECK_MATCH"}; tail -3 "$R/check.txt" ;;
    sanitize) step sanitize 240 bash -c 'for t in memcheck racecheck; do compute-sanitizer --tool $t --print-limit 20 python3 benchmarks/check_cuda.py ${SAN_ARGS:---only one} --out /tmp 2>&1 | tail -6; done'
      cat "$R/sanitize.txt" ;;
    memcheck) step memcheck ${T_MEM:-150} compute-sanitizer --tool memcheck --print-limit 20 python3 benchmarks/check_cuda.py ${SAN_ARGS:---only one} --out /tmp
      tail -4 "$R/memcheck.txt" ;;
    overhead) step overhead 90 python3 benchmarks/host_overhead.py --device cuda:0 --json "$R/overhead.json" --profile --micro --pdl-ab
      step overhead-ocl 60 python3 benchmarks/host_overhead.py --device opencl:nvidia --calls 500
      grep -E "^micro|^cuda|^pdl" "$R/overhead.txt"; tail -4 "$R/overhead-ocl.txt" ;;
    bench-cuda) step cuda-ops ${T_BENCH:-240} python3 benchmarks/cuda_ops.py --out "$R" ${BENCH_ARGS:-} \
        ${BENCH_SKIP:+--skip "$BENCH_SKIP"}; tail -40 "$R/cuda-ops.txt" ;;
    bench-cuda2) mkdir -p "$R/b2"; step cuda-ops2 ${T_BENCH2:-240} python3 benchmarks/cuda_ops.py --out "$R/b2" ${BENCH_ARGS2:-} \
        ${BENCH_SKIP2:+--skip "$BENCH_SKIP2"}
      tail -40 "$R/cuda-ops2.txt" ;;
    bench-nopdl) mkdir -p "$R/nopdl"; step cuda-ops-nopdl ${T_BENCH:-240} env HAL_CUDA_PDL=0 python3 benchmarks/cuda_ops.py --out "$R/nopdl" ${BENCH_ARGS:-}
      tail -40 "$R/cuda-ops-nopdl.txt" ;;
    overhead-nopdl) step overhead-nopdl 60 env HAL_CUDA_PDL=0 python3 benchmarks/host_overhead.py --device cuda:0 --json "$R/overhead-nopdl.json" --profile --micro ;;
    sweep) step cuda-sweep ${T_SWEEP:-300} python3 benchmarks/cuda_ops.py --sweep --out "$R" --only "${ONLY:-}" ${SWEEP_ARGS:-}
      tail -40 "$R/cuda-sweep.txt" ;;
    tune-cuda-rapid) tune cuda:0 rapid ${B_RAPID:-120} cuda-rapid ;;
    tune-cuda-normal) tune cuda:0 normal ${B_NORMAL:-240} cuda-normal ;;
    tune-ocl-rapid) tune opencl:nvidia rapid ${B_RAPID:-120} ocl-rapid ;;
    tune-ocl-normal) tune opencl:nvidia normal ${B_NORMAL:-240} ocl-normal ;;
    tvd-cuda) step tvd-cuda 150 python3 benchmarks/tuned_vs_default.py --device cuda:0 --table "${CUDA_TABLE:-$R/cuda-rapid.json}" \
        --json "$R/tvd-cuda.json" ${TVD_ARGS:-}; tail -34 "$R/tvd-cuda.txt" ;;
    tvd-ocl) step tvd-ocl 150 python3 benchmarks/tuned_vs_default.py --device opencl:nvidia --table "${OCL_TABLE:-$R/ocl-rapid.json}" \
        --json "$R/tvd-ocl.json"; tail -34 "$R/tvd-ocl.txt" ;;
    demo) for d in cuda:0 opencl:nvidia; do step "demo-${d%%:*}" ${T_DEMO:-60} hal demo cnn16 --device $d --batch 256; done
      tail -25 "$R/demo-cuda.txt"; tail -6 "$R/demo-opencl.txt" ;;
    hal-bench) step hal-bench 150 hal bench --device cuda:0 --json "$R/hal-bench.json" --plot "$R/roofline-h200.png"
      tail -40 "$R/hal-bench.txt" ;;
    ocl-bench) step ocl-bench ${T_OCL:-120} python3 benchmarks/opencl_ops.py --device opencl:nvidia --out "$R" ${OCL_ARGS:-}
      tail -32 "$R/ocl-bench.txt" ;;
    ocl-bench2) mkdir -p "$R/b2"; step ocl-bench2 ${T_OCL2:-120} python3 benchmarks/opencl_ops.py --device opencl:nvidia --out "$R/b2" ${OCL_ARGS2:-}
      tail -12 "$R/ocl-bench2.txt" ;;
    ocl-tests) step pytest-ocl ${T_OCLTEST:-150} env HAL_TEST_DEVICES=opencl:nvidia HAL_TEST_EXAMPLES=8 \
        python3 -m pytest -q -p no:cacheprovider ${OCL_TESTS:-tests/test_forced_params.py tests/test_pooling.py}
      grep -E "^FAILED|passed|failed" "$R/pytest-ocl.txt" | tail -12 ;;
    ocl-ab) # AB_FILE (a kernel file) as is, then with AB_OLD in its place, then as is again: opencl_ops.py
      # with OCL_ARGS in each, into ab-new1/, ab-old/, ab-new2/ (the two "new" runs give the noise)
      cp "$AB_FILE" /tmp/ab-keep.cl
      for v in ${AB_RUNS:-new1 old new2}; do mkdir -p "$R/ab-$v"
        [ "$v" = old ] && cp "$AB_OLD" "$AB_FILE"
        step "ocl-ab-$v" ${T_OCL:-120} python3 benchmarks/opencl_ops.py --device opencl:nvidia --out "$R/ab-$v" ${OCL_ARGS:-}
        cp /tmp/ab-keep.cl "$AB_FILE"; grep -v Warning "$R/ocl-ab-$v.txt" | tail -12; done ;;
    ocl-bn-scaling) # SCALE_ARGS: e.g. --batches 64,256 --params {"PREFETCH":1} (no spaces inside the JSON)
      step ocl-bn-scaling ${T_SCALE:-150} python3 benchmarks/experiments/ocl_bn_scaling.py --device opencl:nvidia \
        --out "$R" ${SCALE_ARGS:-}; grep -v Warning "$R/ocl-bn-scaling.txt" | grep "fixed" ;;
    ocl-read) # plain read-and-sum kernels: the read rate one wave of in-step rounds gets against many waves
      step ocl-read ${T_READ:-90} python3 benchmarks/experiments/ocl_read_rounds.py --json "$R/ocl-read.json"
      grep -v Warning "$R/ocl-read.txt" ;;
    ocl-ptx) # PTX_ARGS: e.g. --only train --ptxas sm_90 (registers and spills per kernel)
      step ocl-ptx 90 python3 benchmarks/opencl_ptx.py --out "$R/ptx" ${PTX_ARGS:-}; grep -v Warning "$R/ocl-ptx.txt" | tail -30 ;;
    bn-breakdown) # BNB_ARGS: e.g. --vary {"BN_STATS_SUMS":32} (no spaces inside the JSON)
      step bn-breakdown ${T_BNB:-180} python3 benchmarks/experiments/bn_breakdown.py --out "$R" ${BNB_ARGS:-}
      grep -v Warning "$R/bn-breakdown.txt" | tail -24 ;;
    bn-fused) # BNF_ARGS: e.g. --vary {"BN_FUSED_THREADS":256} (no spaces inside the JSON)
      step bn-fused ${T_BNF:-180} python3 benchmarks/experiments/bn_fused_phases.py --out "$R" ${BNF_ARGS:-}
      grep -v Warning "$R/bn-fused.txt" | tail -40 ;;
    torch-diag) # PyTorch's steps on one conv case, one by one (DIAG_ARGS, e.g. "--dtype float32 --groups 32")
      step torch-diag ${T_DIAG:-150} python3 benchmarks/experiments/torch_grouped_nhwc.py ${DIAG_ARGS:-}
      cat "$R/torch-diag.txt" ;;
    timing) step timing ${T_TIMING:-150} python3 benchmarks/timing_methods.py --json "$R/timing.json"; cat "$R/timing.txt" ;;
    ncu) # NCU_CASES: "case substring|dtype|JSON params|kernel regex;..." (one kernel launch each);
      # NCU_EXTRA: more ncu options (e.g. "--section InstructionStats --section SourceCounters"), NCU_TAIL: lines kept
      step ncu ${T_NCU:-240} bash -c 'IFS=";"; for c in $NCU_CASES; do IFS="|" read -r only dt params kre <<<"$c";
        echo "=== $only $dt $params"; ncu --section SpeedOfLight --section Occupancy --section WarpStateStats \
          --section LaunchStats --section MemoryWorkloadAnalysis ${NCU_EXTRA:-} -k "regex:$kre" --launch-skip 2 \
          --launch-count 1 python3 benchmarks/cuda_ops.py --profile --only "$only" --dtype "$dt" --params "$params" 2>&1 \
          | grep -v "^==PROF==" | tail -${NCU_TAIL:-120}; done'
      grep -E "^===|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per" "$R/ncu.txt" | head -60 ;;
    quant-bench) step quant-bench ${T_QB:-150} python3 benchmarks/quant_cuda.py --out "$R" ${QB_ARGS:-}
      grep -v Warning "$R/quant-bench.txt" | tail -30 ;;
    ncu-quant) # NCU_QUANT: "case substring|dtype|kernel regex;..." (quant_cuda.py --profile, one launch each)
      step ncu-quant ${T_NCU:-240} bash -c 'IFS=";"; for c in $NCU_QUANT; do IFS="|" read -r only dt kre <<<"$c";
        echo "=== $only $dt $kre"; ncu --section SpeedOfLight --section Occupancy --section WarpStateStats \
          --section LaunchStats --section MemoryWorkloadAnalysis --section InstructionStats -k "regex:$kre" \
          --launch-skip 2 --launch-count 1 python3 benchmarks/quant_cuda.py --profile --only "$only" --dtypes "$dt" 2>&1 \
          | grep -v "^==PROF==" | tail -150; done'
      grep -E "^===|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Executed Ipc|Issue Slots" \
        "$R/ncu-quant.txt" | head -60 ;;
    *) echo "unknown step $s" ;;
  esac
done
