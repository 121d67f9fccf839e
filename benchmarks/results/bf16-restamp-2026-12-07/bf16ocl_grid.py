import itertools, sys
sys.argv = ["x"]
exec(open("/tmp/bf16ocl_proof.py").read().split("table = json.loads")[0])
base = [dict(DTYPE_HALF=h, LAYOUT_NHWC=l, VEC=v, FUSE_RELU=r, HALF_RAW=hr, WG=64)
        for h, l, v, r, hr in itertools.product((0, 1), (0, 1), (1, 4, 8), (0, 1), (0, 1)) if not (hr and not h)]
fam = {
 "pool2d.cl": [dict(LOCAL_TILE=0, POOL_INTERIOR=i, POOL_NO_IDX=n, HAL_PTX_MAXNAN=m) for i, n, m in itertools.product((0, 1), (0, 1), (0, 1))]
   + [dict(LOCAL_TILE=1), dict(LOCAL_TILE=2, BAND_ELEMS=4096)]
   + [dict(LOCAL_TILE=3, POOL_FIXED=1, POOL_KH=k, POOL_KW=k, POOL_SH=2, POOL_SW=2, POOL_DH=1, POOL_DW=1, POOL_PL=pl, STRIP_ROWS=2, HAL_PTX_MAXNAN=m)
      for k, pl, m in itertools.product((2, 3), (0, 1), (0, 1))],
 "adaptive_pool2d.cl": [dict(ADAPTIVE_GROUP=g) for g in (0, 1)] + [dict(ADAPTIVE_GROUP=0, GVEC_U=8), dict(ADAPTIVE_GROUP=2, FLAT_ELEMS=2048),
   dict(ADAPTIVE_GROUP=3, PIPE_HW=49), dict(ADAPTIVE_GROUP=3, PIPE_HW=36)],
 "conv2d.cl": [dict(CONV_ALGO=1), dict(CONV_ALGO=2, TILE=32, TK=16)],
 "batch_norm.cl": [dict(), dict(BN_INFER_LOOP=1)],
 "eltwise.cl": [dict()],
}
jobs = []
for f, extras in fam.items():
    for b, e in itertools.product(base, extras):
        d = {**b, **e}
        if f == "pool2d.cl" and d.get("LOCAL_TILE") == 3 and (d["VEC"] == 1 or d["LAYOUT_NHWC"]):
            continue
        if f == "adaptive_pool2d.cl" and d["ADAPTIVE_GROUP"] >= 2 and d["LAYOUT_NHWC"]:
            continue
        if f == "adaptive_pool2d.cl" and d["ADAPTIVE_GROUP"] == 3 and d["WG"] % d["VEC"]:
            continue
        jobs.append((f, d))
def run(j):
    f, d = j
    ro, o, eo = pre(OLD, f, d); rn, n, en = pre(NEW, f, d)
    return j, ro, rn, o == n, eo
bad = errs = 0
with ThreadPoolExecutor(8) as pool:
    for (f, d), ro, rn, same, err in pool.map(run, jobs):
        if ro or rn:
            errs += 1
            if errs < 3: print("preprocess error", f, d, err)
        elif not same:
            bad += 1; print("DIFF", f, d)
print(f"grid: {len(jobs)} float32/float16 define sets over the 5 float kernel files: {bad} differ, {errs} fail to preprocess")
