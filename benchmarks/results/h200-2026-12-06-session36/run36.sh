# session 36: A/B of bn-nhwc-fused.patch (most important first), then read-walk experiment and PTX registers
set -u
export OUT
git apply benchmarks/patches/bn-nhwc-fused.patch || { echo "patch failed"; exit 1; }
C=$(cat benchmarks/patches/bn-nhwc-fused.cands.json)
export T_OCL=200 OCL_ARGS="--only train --launches --rotate 256 --sweep --candidates $C"
export T_OCLTEST=110 OCL_TESTS="tests/test_batch_norm.py -k nhwc_fused"
export T_READ=60 PTX_ARGS="--only train --ptxas sm_90"
bash benchmarks/h200_session.sh ocl-bench ocl-tests ocl-read ocl-ptx
