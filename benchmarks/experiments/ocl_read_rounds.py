"""How fast can an OpenCL kernel read a tensor once, and what does a one-wave grid cost?

BatchNorm training's statistics pass reads x once, but on the H200 it reads 33.5 MB (float16)
in 19-20 µs and 67 MB (float32) in 28-29 µs. Its grid is one wave whose work-items each load R
rounds of 16 values, all in step. This script times plain read-and-sum kernels with the same skeleton
(a grid-stride loop, U vector loads in flight per work-item and round, a local-memory sum per
group, one float written per group) over the grid sizes and depths that separate the causes:

* groups per compute unit 4 / 8 / 16 (one wave, R rounds in step, as the statistics pass),
  or ``flat`` (one round per work-item, many waves that the hardware staggers);
* U = 1, 2, 4, 8 vectors in flight (float4 or 8 halves: 16 bytes each);
* the arithmetic per vector: a plain sum, the statistics pass's own (a batch's mean and M2,
  then Chan's update with a division), or shifted sums (what CUDA's BN_STATS_SUMS keeps);
* then the statistics pass's own walk (``read_walk``: x as N x 64 x 32 x 32 NCHW, a group per
  chunk of one channel's planes, hal's one-wave grid, WG 128 and 256), with a plain local sum
  or with the Chan tree merge the pass ends with: what the walk and the merge add to a read.

Each configuration runs on ``--rotate`` MB of copies of x (cycled, past the L2), timed with
profiling events (median of ``--repeats``), beside a device copy of x's bytes timed the same
way. The sums are checked against numpy, so a kernel that skipped its loads would show.
Last, a few of these kernels and the copy are timed again, each after an untimed copy of x's bytes
(the statistics pass in hal's training call follows the previous call's apply, which wrote y).
Session 35 (H200, benchmarks/results/h200-2026-12-06-session35/): a plain read took 20.7-22.4
µs for the float32 tensor on every grid and depth, 5-8 µs less than the statistics pass; session
36 (h200-2026-12-06-session36/): hal's own walk with the Chan merge reads as fast (22.2-23.0 µs);
on an H100 (h100-2026-12-06-session36/) a read after the write took 5-8 µs longer than alone, as
long as hal's statistics launch in its call: the gap is the previous write's, not the kernel's.

    python3 benchmarks/experiments/ocl_read_rounds.py [--device-substring NVIDIA] [--json F]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

SOURCE = r"""
#if HALF
typedef ushort8 vec_t;   /* 8 halves as raw bits: one 16-byte load */
typedef float8 fv_t;
inline fv_t cvt(vec_t r) { return vload_half8(0, (const __private half*)&r); }
inline float hsum(fv_t f) { return f.s0 + f.s1 + f.s2 + f.s3 + f.s4 + f.s5 + f.s6 + f.s7; }
#else
typedef float4 vec_t;
typedef float4 fv_t;
inline fv_t cvt(vec_t v) { return v; }
inline float hsum(fv_t v) { return v.x + v.y + v.z + v.w; }
#endif

/* One batch of U vectors into the lane state: MODE 1 keeps (cnt, s1 = mean, s2 = M2) as
 * batch_norm.cl's BN_BATCH does, MODE 0 and 2 plain and squared sums (cnt counts either way). */
inline void accumulate(const fv_t* d, fv_t* s1, fv_t* s2, float* cnt)
{
#if MODE == 1
    fv_t bs = d[0];
#pragma unroll
    for (int u = 1; u < U; ++u) bs += d[u];
    const fv_t bm = bs * (1.0f / U);
    fv_t bq = (fv_t)0.0f;
#pragma unroll
    for (int u = 0; u < U; ++u) { const fv_t e = d[u] - bm; bq += e * e; }
    const float nt = *cnt + (float)U, fb = (float)U / nt;
    const fv_t dl = bm - *s1;
    *s1 += dl * fb;
    *s2 += bq + dl * dl * (*cnt * fb);
    *cnt = nt;
#else
#pragma unroll
    for (int u = 0; u < U; ++u) { *s1 += d[u]; if (MODE == 2) *s2 += d[u] * d[u]; }
    *cnt += (float)U;
#endif
}

/* MODE 0: a plain sum per lane. MODE 1: BatchNorm's statistics arithmetic (batch_norm.cl's
 * BN_BATCH: the batch's mean and M2 two-pass per lane, then Chan's update with one division).
 * MODE 2: shifted sums per lane (s1 += d, s2 += d * d). Every mode writes the group's sum
 * of x (count * mean for MODE 1), so one check covers all. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void read_sum(__global const vec_t* restrict x, __global float* restrict out, int n)
{
    const int gid = get_global_id(0), G = get_global_size(0), lid = get_local_id(0);
    fv_t s1 = (fv_t)0.0f, s2 = (fv_t)0.0f;
    float cnt = 0.0f;
    int i = gid;
    for (; i + (U - 1) * G < n; i += U * G) {
        fv_t d[U];
#pragma unroll
        for (int u = 0; u < U; ++u) d[u] = cvt(x[i + u * G]);
        accumulate(d, &s1, &s2, &cnt);
    }
#if MODE == 1
    s1 *= cnt;
    cnt = 0.0f;
#endif
    for (; i < n; i += G) s1 += cvt(x[i]);
    __local float red[WG];
    red[lid] = hsum(s1) + 0.0f * hsum(s2);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (lid < s) red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) out[get_group_id(0)] = red[0];
}

/* The statistics pass's NCHW walk (batch_norm.cl's BN_NCHW_WALK, in vectors): group (chunk, c)
 * reads a contiguous range of channel c's N * P vectors (P per plane), stepping with adds;
 * U loads per batch, the MODE arithmetic as above. TAIL 0: a plain local sum; TAIL 1: Chan's
 * merge of (count, mean, M2) over the group (batch_norm.cl's bn_tree_merge, a division per
 * level). Writes the group's sum of x either way. */
inline void chan(float* n, float* m, float* q, float nb, float mb, float qb)
{
    if (nb == 0.0f) return;
    if (*n == 0.0f) { *n = nb; *m = mb; *q = qb; return; }
    const float nt = *n + nb, d = mb - *m, fb = nb / nt;
    *m += d * fb;
    *q += qb + d * d * (*n) * fb;
    *n = nt;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void read_walk(__global const vec_t* restrict x, __global float* restrict out, int N, int C, int P, int CHUNKS)
{
    const int chunk = get_group_id(0), c = get_group_id(1), lid = get_local_id(0);
    const long EP = (long)N * P;
    const int s = (int)(EP * chunk / CHUNKS), e = (int)(EP * (chunk + 1) / CHUNKS);
    const int SA = WG / P, SB = WG - SA * P;
    const uint plane = (uint)C * (uint)P;
    const uint DA = (uint)SA * plane + (uint)SB, DW = plane - (uint)P;
    int v = s + lid;
    const int n0 = v / P;
    int j = v - n0 * P;
    uint off = ((uint)n0 * (uint)C + (uint)c) * (uint)P + (uint)j;
    fv_t s1 = (fv_t)0.0f, s2 = (fv_t)0.0f;
    float cnt = 0.0f;
    for (; v < e - (U - 1) * WG; v += U * WG) {
        fv_t d[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            d[u] = cvt(x[off]);
            j += SB; off += DA;
            if (j >= P) { j -= P; off += DW; }
        }
        accumulate(d, &s1, &s2, &cnt);
    }
#if MODE == 1
    s1 *= cnt;
#endif
    for (; v < e; v += WG) {
        s1 += cvt(x[off]);
        j += SB; off += DA;
        if (j >= P) { j -= P; off += DW; }
        cnt += 1.0f;
    }
    __local float rn[WG], rm[WG], rq[WG];
#if TAIL
    /* the group's (count, mean, M2) of the lanes' sums, merged by a Chan tree as hal does */
    float n = cnt * (float)(sizeof(fv_t) / sizeof(float)), m = n > 0.0f ? hsum(s1) / n : 0.0f;
    float q = hsum(s2);
    rn[lid] = n; rm[lid] = m; rq[lid] = q;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int st = WG / 2; st > 0; st >>= 1) {
        if (lid < st) {
            chan(&n, &m, &q, rn[lid + st], rm[lid + st], rq[lid + st]);
            rn[lid] = n; rm[lid] = m; rq[lid] = q;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) out[c * CHUNKS + chunk] = rn[0] * rm[0] + 0.0f * rq[0];
#else
    rm[lid] = hsum(s1) + 0.0f * hsum(s2);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int st = WG / 2; st > 0; st >>= 1) {
        if (lid < st) rm[lid] += rm[lid + st];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) out[c * CHUNKS + chunk] = rm[0];
#endif
}
"""


#: MODE -> what the kernel computes per loaded vector
MODES = {0: "sum", 1: "bn", 2: "sums2"}


def median_ms(queue: Any, launch: Any, repeats: int, before: Any = None) -> float:
    """Median device time (ms) of ``launch()``, each call's event measured on its own; ``before()``, when
    given, is queued (untimed) ahead of every launch."""
    for _ in range(3):
        launch()
    queue.finish()
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        ev = launch()
        ev.wait()
        times.append((ev.profile.end - ev.profile.start) * 1e-6)
    return statistics.median(times)


def sums_match(got: np.ndarray, host: np.ndarray, want: float) -> bool:
    """Whether the groups' float32 partial sums add up to x's float64 sum (float32 rounding allowed)."""
    err = abs(float(got.astype(np.float64).sum()) - want)
    return err <= 1e-3 * float(np.abs(host).astype(np.float64).sum()) / max(1, got.size) ** 0.5 + 1.0


def main(argv: list[str] | None = None) -> int:
    import pyopencl as cl

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device-substring", default="NVIDIA")
    ap.add_argument("--mb", type=int, default=64, help="float32 tensor size; float16 takes half")
    ap.add_argument("--rotate", type=int, default=256, metavar="MB")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--wg", type=int, default=256)
    ap.add_argument("--walk-chunks", type=int, default=0, help="chunks per channel in read_walk (0: hal's rule)")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    dev = next(d for p in cl.get_platforms() for d in p.get_devices() if args.device_substring in d.name)
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    cus = dev.max_compute_units
    rng = np.random.default_rng(0)
    rows: list[dict[str, Any]] = []
    print(f"# {dev.name}: {cus} compute units, WG {args.wg}, x cycled over {args.rotate} MB")
    for dtype in (np.float32, np.float16):
        nbytes = args.mb * 2**20 // (1 if dtype == np.float32 else 2)
        host = rng.standard_normal(nbytes // np.dtype(dtype).itemsize).astype(dtype)
        copies = [cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
                  for _ in range(max(1, -(-args.rotate * 2**20 // (2 * nbytes))))]
        dst = [cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes) for _ in copies]
        turn = [0]

        def copy(turn: list[int] = turn, copies: list[Any] = copies, dst: list[Any] = dst,
                 nbytes: int = nbytes) -> Any:
            k = turn[0] % len(copies)
            turn[0] += 1
            return cl.enqueue_copy(queue, dst[k], copies[k], byte_count=nbytes)

        copy_ms = median_ms(queue, copy, args.repeats)
        copy_gbps = 2 * nbytes / copy_ms / 1e6
        print(f"{np.dtype(dtype).name}: {nbytes / 1e6:.1f} MB, copy {copy_ms * 1e3:.1f} us ({copy_gbps:.0f} GB/s)")
        n = nbytes // 16
        want = float(host.astype(np.float64).sum())
        probes: list[tuple[str, Any]] = [("device copy", copy)]
        # the plain sum over every depth and grid; BatchNorm's arithmetic (1) and shifted sums (2)
        # at the statistics pass's 16 values per batch (4 float4, 2 x 8 halves) and at twice that
        sums = [(0, u, (4, 8, 16, 0)) for u in (1, 2, 4, 8)]
        arith = [(m, u, (8, 0)) for m in (1, 2) for u in ((4, 8) if dtype == np.float32 else (2, 4))]
        for mode, u, gpcs in sums + arith:
            prg = cl.Program(ctx, SOURCE).build(
                [f"-DWG={args.wg}", f"-DU={u}", f"-DHALF={int(dtype == np.float16)}", f"-DMODE={mode}"])
            kern = prg.read_sum
            for gpc in gpcs:
                groups = gpc * cus if gpc else -(-n // (args.wg * u))
                out = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4 * groups)
                kern.set_args(copies[0], out, np.int32(n))
                cl.enqueue_nd_range_kernel(queue, kern, (groups * args.wg,), (args.wg,))
                got = np.empty(groups, np.float32)
                cl.enqueue_copy(queue, got, out)
                ok = sums_match(got, host, want)

                def launch(groups: int = groups, out: Any = out, kern: Any = kern, n: int = n,
                           turn: list[int] = turn, copies: list[Any] = copies) -> Any:
                    k = turn[0] % len(copies)
                    turn[0] += 1
                    kern.set_args(copies[k], out, np.int32(n))
                    return cl.enqueue_nd_range_kernel(queue, kern, (groups * args.wg,), (args.wg,))

                ms = median_ms(queue, launch, args.repeats)
                rounds = n / (groups * args.wg * u)
                gbps = nbytes / ms / 1e6
                row = {"dtype": np.dtype(dtype).name, "mode": MODES[mode], "U": u,
                       "groups_per_cu": gpc or "flat", "groups": groups,
                       "rounds": rounds, "us": ms * 1e3, "gbps": gbps, "copy_gbps": copy_gbps,
                       "share_of_copy_rate": gbps / copy_gbps, "sum_ok": bool(ok)}
                rows.append(row)
                if mode == 0 and u == 4 and gpc == 8:
                    probes.append((f"sum U={u} groups/CU={gpc}", launch))
                print(f"  {MODES[mode]:5s} U={u} groups/CU={gpc or 'flat'!s:>4s} rounds {rounds:7.2f}: "
                      f"{ms * 1e3:6.1f} us, "
                      f"{gbps:5.0f} GB/s = {100 * gbps / copy_gbps:5.1f} % of the copy rate"
                      f"{'' if ok else '  SUM WRONG'}", flush=True)
        # the statistics pass's own walk over x as N x 64 x 32 x 32 (NCHW), hal's grid: one wave of
        # 1024 work-items per compute unit split into chunks of each channel
        lanes = 4 if dtype == np.float32 else 8
        c_, p_ = 64, 1024 // lanes
        n_ = n // (c_ * p_)
        u = 16 // lanes
        for wg in (128, 256):
            chunks = args.walk_chunks or max(1, cus * (1024 // wg) // c_)
            for mode, tail in ((0, 0), (1, 0), (0, 1), (1, 1)):
                prg = cl.Program(ctx, SOURCE).build([f"-DWG={wg}", f"-DU={u}", f"-DHALF={int(dtype == np.float16)}",
                                                     f"-DMODE={mode}", f"-DTAIL={tail}"])
                kern = prg.read_walk
                out = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4 * chunks * c_)
                scal = (np.int32(n_), np.int32(c_), np.int32(p_), np.int32(chunks))
                kern.set_args(copies[0], out, *scal)
                cl.enqueue_nd_range_kernel(queue, kern, (chunks * wg, c_), (wg, 1))
                got = np.empty(chunks * c_, np.float32)
                cl.enqueue_copy(queue, got, out)
                ok = sums_match(got, host, want)

                def walk(out: Any = out, kern: Any = kern, scal: tuple[Any, ...] = scal, wg: int = wg,
                         chunks: int = chunks, turn: list[int] = turn, copies: list[Any] = copies) -> Any:
                    k = turn[0] % len(copies)
                    turn[0] += 1
                    kern.set_args(copies[k], out, *scal)
                    return cl.enqueue_nd_range_kernel(queue, kern, (chunks * wg, 64), (wg, 1))

                ms = median_ms(queue, walk, args.repeats)
                gbps = nbytes / ms / 1e6
                name = f"walk {MODES[mode]}{' + Chan tree' if tail else ''}"
                rows.append({"dtype": np.dtype(dtype).name, "mode": name, "U": u, "wg": wg, "chunks": chunks,
                             "shape": [n_, c_, 32, 32], "us": ms * 1e3, "gbps": gbps, "copy_gbps": copy_gbps,
                             "share_of_copy_rate": gbps / copy_gbps, "sum_ok": bool(ok)})
                print(f"  {name:22s} WG {wg} x {chunks} chunks x {c_} channels: {ms * 1e3:6.1f} us, "
                      f"{gbps:5.0f} GB/s = {100 * gbps / copy_gbps:5.1f} % of the copy rate"
                      f"{'' if ok else '  SUM WRONG'}", flush=True)
                if mode == 1 and tail:
                    probes.append((f"{name} WG {wg}", walk))
        # In hal's training call the statistics pass follows a launch that wrote a tensor of x's size
        # (the previous call's apply), so L2 holds dirty lines it must write back while it reads. The
        # same kernels, each after an untimed device copy of x's bytes (to buffers it does not read):
        print(f"  after a write of {nbytes / 1e6:.1f} MB (an untimed device copy queued before each launch):")
        for name, fn in probes:
            clean = median_ms(queue, fn, args.repeats)
            dirty = median_ms(queue, fn, args.repeats, before=copy)
            rows.append({"dtype": np.dtype(dtype).name, "mode": name, "after_write": True,
                         "clean_us": clean * 1e3, "after_write_us": dirty * 1e3})
            print(f"    {name:34s} alone {clean * 1e3:6.1f} us, after a write {dirty * 1e3:6.1f} us "
                  f"({(dirty - clean) * 1e3:+5.1f})", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
