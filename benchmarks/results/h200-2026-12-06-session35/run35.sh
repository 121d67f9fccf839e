# session 35: read-rate experiment, statistics-grid sweep (minimal: little device time left)
set -u
export OUT
C=$(cat .device/cands35.json)
export T_READ=50
export T_OCL=110 OCL_ARGS="--only train --launches --rotate 256 --sweep --candidates $C"
bash benchmarks/h200_session.sh ocl-read ocl-bench
