# session 36, call 2: reads after a write (ocl_read_rounds.py's new probes) beside hal's own training launches on the
# same card, then the PTX registers of main's BatchNorm programs
set -u
export OUT
export T_READ=90 PTX_ARGS="--only bn --ptxas sm_90"
export T_OCL=90 OCL_ARGS="--only train --launches --rotate 256"
bash benchmarks/h200_session.sh ocl-read ocl-bench ocl-ptx
