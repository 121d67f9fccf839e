#!/usr/bin/env bash
# The GPU A/B of qpool2d-nhwc-avg-masked.patch, one device call (about 6 min on a warm H200):
#   source .device/setup.sh is done by h200_session.sh; run from the repository root as
#   REQUIRE_GPU=H200 bash benchmarks/patches/qpool2d-nhwc-avg-masked.ab.sh
# Steps: NVIDIA's PTX and ptxas registers of the int8 pooling kernels with the patch (ocl-ptx), then
# opencl_ops.py three times (patched, main's kernel, patched again: the two patched runs give the
# noise), each sweeping QVEC16 2, 3, 4 x WG 64, 128, 256 on the int8/uint8 3x3/2 averages of
# 64x64x112x112 (both layouts; NCHW runs the served set, QVEC16 being NHWC-only), every candidate
# checked against the quantized oracle. Results: $OUT/results.tar.gz (ab-new1/, ab-old/, ab-new2/, ptx/).
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export OUT="${OUT:-/tmp/hal-out}"
cp kernels_cl/qpool2d_pack.cl /tmp/qpool2d_pack.main.cl
git apply benchmarks/patches/qpool2d-nhwc-avg-masked.patch || { echo "patch failed (already applied?)"; exit 1; }
C='[{"WG":64,"QVEC16":2},{"WG":128,"QVEC16":2},{"WG":256,"QVEC16":2},{"WG":64,"QVEC16":3},{"WG":128,"QVEC16":3},'
C+='{"WG":256,"QVEC16":3},{"WG":64,"QVEC16":4},{"WG":128,"QVEC16":4},{"WG":256,"QVEC16":4}]'
# AB_LEAN=1 (a short device budget): WG 128 and 256 only, no PTX step, 110 s a run;
# AB_LEAN=2 (shorter still): QVEC16 2 and 4 only, 90 s a run; AB_LEAN=3: as 2, without the second
# patched run (no noise estimate), 80 s a run
if [ "${AB_LEAN:-}" = 3 ]; then
  C='[{"WG":128,"QVEC16":2},{"WG":256,"QVEC16":2},{"WG":128,"QVEC16":4},{"WG":256,"QVEC16":4}]'
  STEPS="ocl-ab"; export T_OCL=80 AB_RUNS="new1 old"
elif [ "${AB_LEAN:-}" = 2 ]; then
  C='[{"WG":128,"QVEC16":2},{"WG":256,"QVEC16":2},{"WG":128,"QVEC16":4},{"WG":256,"QVEC16":4}]'
  STEPS="ocl-ab"; export T_OCL=90
elif [ -n "${AB_LEAN:-}" ]; then
  C='[{"WG":128,"QVEC16":2},{"WG":256,"QVEC16":2},{"WG":128,"QVEC16":3},{"WG":256,"QVEC16":3},'
  C+='{"WG":128,"QVEC16":4},{"WG":256,"QVEC16":4}]'; STEPS="ocl-ab"; export T_OCL=110
else STEPS="ocl-ptx ocl-ab"; export T_OCL=150; fi
export PTX_ARGS="--only int8 --ptxas sm_90"
export OCL_ARGS="--dtypes int8,uint8 --only avgpool3x3s2p1 --sweep --candidates $C"
export AB_FILE=kernels_cl/qpool2d_pack.cl AB_OLD=/tmp/qpool2d_pack.main.cl
# shellcheck disable=SC2086
bash benchmarks/h200_session.sh $STEPS
