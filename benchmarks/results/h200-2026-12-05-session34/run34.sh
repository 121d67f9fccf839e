# session 34: the bn-interleave branch's kernel on the H200 (one device call)
set -u
export OUT
patch -p1 < .device/interleave.patch >/dev/null || { echo "patch failed"; exit 3; }
C=$(cat .device/cands.json)
export T_OCL=100 AB_FILE=kernels_cl/batch_norm.cl AB_OLD=.device/bn_old.cl HAL_TUNING_PATH=$PWD/.device/ab_table.json
export OCL_ARGS="--only train --launches --rotate 256 --sweep --candidates $C"
export TUNE_ARGS="--ops batch_norm" B_NORMAL=110
export T_OCLTEST=60 OCL_TESTS=tests/test_batch_norm.py
bash benchmarks/h200_session.sh ocl-ab tune-ocl-normal ocl-tests
