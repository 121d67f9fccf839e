# session 36, call 5: the conformance suite on whatever sm_90 card comes (both GPU backends, the shipped sm_90
# entries serving); on an H200, first the after-a-write read probe and the training launches
set -u
export OUT
export T_CONF=300 T_READ=60 T_OCL=60 OCL_ARGS="--only train --launches --rotate 256"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bash benchmarks/h200_session.sh ocl-read ocl-bench conformance
else
  bash benchmarks/h200_session.sh conformance
fi
