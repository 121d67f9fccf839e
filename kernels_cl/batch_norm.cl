/* BatchNorm2d forward: batch_norm_stats, batch_norm_finalize, batch_norm_apply.
 *
 * Contract entry points (all backends):
 *   batch_norm_stats(x, mean, var, N, C, HW, partial, CHUNKS)  [partial, CHUNKS: this backend's workspace]
 *   batch_norm_apply(x, y, scale, shift, N, C, HW)
 * plus this backend's batch_norm_finalize (merges the chunks' partial statistics) and
 * batch_norm_infer (inference in one pass: scale and shift computed per work-item from
 * the running statistics, so one launch instead of finalize + apply; NHWC with
 * BN_INFER_LOOP=1: each work-item loops over vectors of the same channels).
 *
 * Statistics are Welford/Chan (never E[x^2] - E[x]^2): each work-item merges batches of
 * BN_VALUES values (two-pass inside the batch, then Chan's update; single vectors at the
 * end of its range), then Chan's merge across VEC lanes, work-items and chunks. They are
 * taken of d = x - K_c with K_c the channel's first element, so a large mean (1e4 with
 * std 1) keeps its low-order digits: the mean of d is small and exact to float precision,
 * and so is (x - K_c) in the apply pass.
 *
 * partial[(c * CHUNKS + chunk) * 3 + {0, 1, 2}] = (count, mean of d, M2) of one chunk.
 * stats also writes mean[c] = K_c + mean(d), var[c] = M2 / count when CHUNKS == 1.
 * finalize merges the chunks (training) or reads the running statistics (inference) and
 * writes scale[c] and shift[c], shift[C + c] = centre, so that apply computes
 *   y = (x - shift[C + c]) * scale[c] + shift[c].
 * With the running statistics the centre is running_mean[c]: y = (x - mean) * scale + bias.
 *
 * Aligned access. vloadN / vload_halfN at an element offset promise only element
 * alignment, and NVIDIA's compiler then splits a float4 into four 4-byte loads. hal's
 * buffers are whole allocations (no sub-buffers), so an element offset that is a multiple
 * of VEC is VEC-element aligned; every kernel checks the shape once (NCHW: HW % VEC == 0,
 * NHWC: C % VEC == 0, a uniform branch) and then loads and stores through aligned vector
 * types (one 16-byte access for float4, half8 and bfloat16's ushort8), else runs the
 * element-aligned code.
 */

#ifndef BN_INFER_LOOP
#define BN_INFER_LOOP 0
#endif
#define BN_LOOP_U 4

/* ---- aligned VEC-wide access (the offset a multiple of VEC); stores apply ACTV like STV -- */
#if VEC == 1
#ifndef LDV_A
#define LDV_A(p, i) LD(p, i)
#endif
#ifndef STV_A
#define STV_A(v, p, i) ST(v, p, i)
#endif
#ifndef FLDV_A
#define FLDV_A(p, i) ((p)[(i)])
#endif
#else
#if DTYPE_HALF && HALF_RAW
#define LDV_A(p, i) HAL_CAT(hal_ldraw, VEC)((p) + (i))
#define STV_A(v, p, i) HAL_CAT(hal_straw, VEC)(ACTV(v), (p) + (i))
#elif DTYPE_HALF
#ifndef LDV_A
#define LDV_A(p, i) HAL_CAT(vloada_half, VEC)(0, (p) + (i))
#endif
#ifndef STV_A
#define STV_A(v, p, i) HAL_CAT(vstorea_half, VEC)(ACTV(v), 0, (p) + (i))
#endif
#elif DTYPE_BF16
#ifndef LDV_A
#define LDV_A(p, i) BF_ALDV(p, i)
#endif
#ifndef STV_A
#define STV_A(v, p, i) BF_ASTV(v, p, i)
#endif
#else
#ifndef LDV_A
#define LDV_A(p, i) (*(__global const floatV*)((p) + (i)))
#endif
#ifndef STV_A
#define STV_A(v, p, i) (*(__global floatV*)((p) + (i)) = ACTV(v))
#endif
#endif
/* float32 parameter vectors (scale, shift, weight, ...) */
#ifndef FLDV_A
#define FLDV_A(p, i) (*(__global const floatV*)((p) + (i)))
#endif
#endif

/* ---- Welford / Chan ----------------------------------------------------------------- */

inline void chan_merge(float* n, float* m, float* q, float nb, float mb, float qb)
{
    if (nb == 0.0f) return;
    if (*n == 0.0f) {
        *n = nb;
        *m = mb;
        *q = qb;
        return;
    }
    const float nt = *n + nb;
    const float d = mb - *m;
    const float fb = nb / nt;
    *m += d * fb;
    *q += qb + d * d * (*n) * fb;
    *n = nt;
}

/* Each work-item loads a batch of BN_VALUES values (BN_U vectors, or BN_VALUES scalars on
 * the element-aligned NCHW path) before it updates its statistics: that many independent
 * loads in flight per work-item instead of one (a load -> Welford-update chain per
 * vector leaves the memory system idle while the update runs), one division per batch
 * instead of one per vector, and the same 16 floats of batch registers at every VEC (on
 * the H200, 4 float8 loads per batch cost registers and occupancy: 2 float8 ran the
 * statistics pass 10-30 % faster, 16 scalars 10-25 % faster than 4). BN_BATCH and
 * BN_STEP1 take T = float or floatV (every lane has the same count). */
#define BN_VALUES 16
#define BN_U (BN_VALUES / VEC)

/* merge d[0 .. U-1] per lane into (cnt, m, q): the batch's mean and M2 two-pass, then Chan */
#define BN_BATCH(T, U, cnt, m, q, d)                                                         \
    do {                                                                                     \
        T bs_ = (d)[0];                                                                      \
        _Pragma("unroll") for (int u_ = 1; u_ < (U); ++u_) bs_ += (d)[u_];                   \
        const T bm_ = bs_ * (1.0f / (U));                                                    \
        T bq_ = (T)0.0f;                                                                     \
        _Pragma("unroll") for (int u_ = 0; u_ < (U); ++u_) {                                 \
            const T e_ = (d)[u_] - bm_;                                                      \
            bq_ += e_ * e_;                                                                  \
        }                                                                                    \
        const float na_ = (cnt), nt_ = na_ + (float)(U), fb_ = (float)(U) / nt_;             \
        const T dl_ = bm_ - (m);                                                             \
        (m) += dl_ * fb_;                                                                    \
        (q) += bq_ + dl_ * dl_ * (na_ * fb_);                                                \
        (cnt) = nt_;                                                                         \
    } while (0)

/* one value per lane: Welford's update */
#define BN_STEP1(T, cnt, m, q, d)                                                            \
    do {                                                                                     \
        const float nt_ = (cnt) + 1.0f, inv_ = 1.0f / nt_;                                   \
        const T dl_ = (d) - (m);                                                             \
        (m) += dl_ * inv_;                                                                   \
        (q) += dl_ * ((d) - (m));                                                            \
        (cnt) = nt_;                                                                         \
    } while (0)

/* NCHW walk over one channel's values, position v = n * P + j (P positions of UNIT
 * elements per plane), element offset off = (n * C + c) * HW + j * UNIT, advanced by WG
 * positions with adds only: WG = SA * P + SB, so a step adds SB to j, SA planes, and one
 * more plane when j wraps (a per-vector v / P and v % P cost two integer divisions,
 * tens of instructions on GPUs). uint offsets: a step past the end may exceed INT_MAX. */
#define BN_NCHW_STEP(j, off)                                                                 \
    do {                                                                                     \
        (j) += SB;                                                                           \
        (off) += DA;                                                                         \
        if ((j) >= P) {                                                                      \
            (j) -= P;                                                                        \
            (off) += DW;                                                                     \
        }                                                                                    \
    } while (0)

#define BN_NCHW_WALK(T, U, LOAD, UNIT, cnt, m, q)                                            \
    do {                                                                                     \
        const long EP = (long)N * P;                                                         \
        const int s = (int)(EP * chunk / CHUNKS), e = (int)(EP * (chunk + 1) / CHUNKS);      \
        const int SA = WG / P, SB = WG - SA * P;                                             \
        const uint plane = (uint)C * (uint)HW;                                               \
        const uint DA = (uint)SA * plane + (uint)(SB * (UNIT)), DW = plane - (uint)HW;      \
        int v = s + lid;                                                                     \
        const int n0 = v / P;                                                                \
        int j = v - n0 * P;                                                                  \
        uint off = ((uint)n0 * (uint)C + (uint)c) * (uint)HW + (uint)(j * (UNIT));           \
        for (; v < e - ((U) - 1) * WG; v += (U) * WG) {                                      \
            uint o_[U];                                                                      \
            T d_[U];                                                                         \
            _Pragma("unroll") for (int u_ = 0; u_ < (U); ++u_) {                             \
                o_[u_] = off;                                                                \
                BN_NCHW_STEP(j, off);                                                        \
            }                                                                                \
            _Pragma("unroll") for (int u_ = 0; u_ < (U); ++u_) d_[u_] = LOAD(x, o_[u_]) - K;  \
            BN_BATCH(T, U, cnt, m, q, d_);                                                   \
        }                                                                                    \
        for (; v < e; v += WG) {                                                             \
            const T d = LOAD(x, off) - K;                                                    \
            BN_NCHW_STEP(j, off);                                                            \
            BN_STEP1(T, cnt, m, q, d);                                                       \
        }                                                                                    \
    } while (0)

/* NHWC walk over rows m = s + r, s + r + R, ... of this work-item's VEC channels */
#define BN_NHWC_WALK(LOAD)                                                                   \
    do {                                                                                     \
        int m = s + r;                                                                       \
        uint off = (uint)m * (uint)C + (uint)c0;                                             \
        for (; m < e - (BN_U - 1) * R; m += BN_U * R) {                                      \
            floatV d_[BN_U];                                                                 \
            _Pragma("unroll") for (int u_ = 0; u_ < BN_U; ++u_) d_[u_] = LOAD(x, off + u_ * rstep) - Kv; \
            off += BN_U * rstep;                                                             \
            BN_BATCH(floatV, BN_U, cnt, vm, vq, d_);                                         \
        }                                                                                    \
        for (; m < e; m += R) {                                                              \
            const floatV d = LOAD(x, off) - Kv;                                              \
            off += rstep;                                                                    \
            BN_STEP1(floatV, cnt, vm, vq, d);                                                \
        }                                                                                    \
    } while (0)

#define LANES 16

/* NHWC: work-items across channel vectors, the power of two >= ceil(C / VEC) up to LANES
 * (the launcher's tiling, _bn_lanes, mirrors it): C = 16 with VEC 4 keeps every work-item
 * busy instead of 4 of each 16. Returns log2 of it. */
inline int bn_lanes_log2(int C)
{
    const int cv = CEIL_DIV(C, VEC);
    int lg = 0;
    while ((1 << lg) < cv && (1 << lg) < LANES) ++lg;
    return lg;
}

/* VEC channels at element p, the first nvalid real (element-aligned loads) */
inline floatV bn_load_tail(__global const dtype_t* restrict x, uint p, int nvalid)
{
    if (nvalid == VEC) return LDV(x, p);
    float t[VEC];
    for (int j = 0; j < VEC; ++j) t[j] = j < nvalid ? LD(x, p + j) : 0.0f;
    return PRIV_LDV(t);
}
#define BN_LOAD_TAIL(x, p) bn_load_tail((x), (p), nvalid)

/* Chan's merge of the states of T (a power of two) consecutive work-items: work-item lid is
 * number t of its segment of T, and the segment's merged state ends in rn, rm, rq at the
 * index of its t = 0; every work-item of the group calls it (barriers) */
inline void bn_tree_merge(int lid, int t, int T, float n, float m, float q, __local float* rn, __local float* rm,
                          __local float* rq)
{
    rn[lid] = n;
    rm[lid] = m;
    rq[lid] = q;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int st = T / 2; st > 0; st >>= 1) {
        if (t < st) {
            chan_merge(&n, &m, &q, rn[lid + st], rm[lid + st], rq[lid + st]);
            rn[lid] = n;
            rm[lid] = m;
            rq[lid] = q;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* NCHW statistics of one group (chunk, c): a contiguous range of channel c's N * HW values
 * in (n, hw) order, consecutive work-items reading consecutive vectors (coalesced). Leaves
 * the group's (count, mean of d, M2) in rn[0], rm[0], rq[0] (local) and the pivot in K. */
#define BN_STATS_NCHW_GROUP                                                                  \
    const int chunk = get_group_id(0);                                                       \
    const int lid = get_local_id(0);                                                         \
    const int c = get_group_id(1);                                                           \
    const float K = LD(x, c * HW);                                                           \
    __local float rn[WG], rm[WG], rq[WG];                                                    \
    bn_stats_nchw_group(x, N, C, HW, CHUNKS, chunk, c, lid, K, rn, rm, rq)

inline void bn_stats_nchw_group(__global const dtype_t* restrict x, int N, int C, int HW, int CHUNKS, int chunk,
                                int c, int lid, float K, __local float* rn, __local float* rm, __local float* rq)
{
    float cnt = 0.0f;
    floatV vm = (floatV)0.0f, vq = (floatV)0.0f;
    float sm = 0.0f, sq = 0.0f, scnt = 0.0f;
    if (HW % VEC == 0) {
        /* every vector lies in one plane at a multiple of VEC: aligned loads */
        const int P = HW / VEC;
        BN_NCHW_WALK(floatV, BN_U, LDV_A, VEC, cnt, vm, vq);
    } else {
        /* one value per position (each load still coalesced across the work-items) */
        const int P = HW;
        BN_NCHW_WALK(float, BN_VALUES, LD, 1, scnt, sm, sq);
    }
    /* fold the VEC lanes (each saw cnt values) into the scalar state */
    {
        float lm[VEC], lq[VEC];
        PRIV_STV(vm, lm);
        PRIV_STV(vq, lq);
        for (int j = 0; j < VEC; ++j) chan_merge(&scnt, &sm, &sq, cnt, lm[j], lq[j]);
    }
    bn_tree_merge(lid, lid, WG, scnt, sm, sq, rn, rm, rq);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void batch_norm_stats(__global const dtype_t* restrict x, __global float* restrict mean, __global float* restrict var,
                      int N, int C, int HW, __global float* restrict partial, int CHUNKS)
{
#if !LAYOUT_NHWC
    BN_STATS_NCHW_GROUP;
    if (lid == 0) {
        __global float* pp = partial + (c * CHUNKS + chunk) * 3;
        pp[0] = rn[0];
        pp[1] = rm[0];
        pp[2] = rq[0];
        if (CHUNKS == 1) {
            mean[c] = K + rm[0];
            var[c] = rq[0] / rn[0];
        }
    }
#else
    /* group (chunk, channel tile of L * VEC); work-item (cl, r): VEC channels, rows r, r + R, ... */
    const int chunk = get_group_id(0);
    const int lid = get_local_id(0);
    const long E = (long)N * HW; /* rows (pixels) */
    const int lg = bn_lanes_log2(C);
    const int L = 1 << lg, R = WG >> lg;
    const int ct = get_group_id(1);
    const int cl = lid & (L - 1), r = lid >> lg;
    const int c0 = (ct * L + cl) * VEC;
    const int nvalid = clamp(C - c0, 0, VEC);
    const int s = (int)(E * chunk / CHUNKS), e = (int)(E * (chunk + 1) / CHUNKS);
    const uint rstep = (uint)R * (uint)C;
    float cnt = 0.0f;
    floatV vm = (floatV)0.0f, vq = (floatV)0.0f;
    if (nvalid > 0) {
        if (C % VEC == 0) {
            /* rows start at multiples of C, lanes at multiples of VEC: aligned loads */
            const floatV Kv = LDV_A(x, c0);
            BN_NHWC_WALK(LDV_A);
        } else {
            const floatV Kv = bn_load_tail(x, c0, nvalid);
            BN_NHWC_WALK(BN_LOAD_TAIL);
        }
    }
    __local float rn[WG], rm[WG * VEC], rq[WG * VEC];
    rn[lid] = cnt;
    PRIV_STV(vm, rm + lid * VEC);
    PRIV_STV(vq, rq + lid * VEC);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int st = R / 2; st > 0; st >>= 1) {
        if (r < st) {
            const int b = lid + st * L;
            const float na = rn[lid], nb = rn[b];
            for (int j = 0; j < VEC; ++j) {
                float n = na, m = rm[lid * VEC + j], q = rq[lid * VEC + j];
                chan_merge(&n, &m, &q, nb, rm[b * VEC + j], rq[b * VEC + j]);
                rm[lid * VEC + j] = m;
                rq[lid * VEC + j] = q;
            }
            rn[lid] = na + nb;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (r == 0) {
        for (int j = 0; j < nvalid; ++j) {
            const int c = c0 + j;
            __global float* pp = partial + (c * CHUNKS + chunk) * 3;
            pp[0] = rn[lid];
            pp[1] = rm[lid * VEC + j];
            pp[2] = rq[lid * VEC + j];
            if (CHUNKS == 1) {
                mean[c] = LD(x, c) + rm[lid * VEC + j];
                var[c] = rq[lid * VEC + j] / rn[lid];
            }
        }
    }
#endif
}

/* Work-items per channel in finalize: the power of two >= CHUNKS, at most WG (the
 * launcher's _bn_segment mirrors it). Returns log2 of it. */
inline int bn_segment_log2(int CHUNKS)
{
    int lg = 0;
    while ((1 << lg) < CHUNKS && (1 << lg) < WG) ++lg;
    return lg;
}

/* What finalize writes for channel c from its merged training statistics (count n, mean m
 * and M2 q of d = x - centre): mean, biased variance, the running statistics (unbiased
 * variance), and scale[c], shift[c], shift[C + c] = centre for batch_norm_apply. */
inline void bn_finish_channel(int c, int C, float centre, float n, float m, float q,
                              __global const float* restrict weight, __global const float* restrict bias,
                              __global float* restrict running_mean, __global float* restrict running_var,
                              __global float* restrict mean, __global float* restrict var,
                              __global float* restrict scale, __global float* restrict shift, float eps,
                              float momentum)
{
    const float v = q / n;
    const float mu = centre + m;
    mean[c] = mu;
    var[c] = v;
    if (running_mean && running_var) {
        running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * mu;
        running_var[c] = (1.0f - momentum) * running_var[c] + momentum * (v * (n / (n - 1.0f)));
    }
    float s = 1.0f / sqrt(v + eps);
    if (weight) s *= weight[c];
    scale[c] = s;
    shift[c] = (bias ? bias[c] : 0.0f) - m * s;
    shift[C + c] = centre;
}

/* Each channel's CHUNKS partials are merged by T = 2^bn_segment_log2(CHUNKS) work-items
 * (a strided share each, then a tree in local memory), WG / T channels per group: one
 * work-item walking hundreds of partials in a row is a chain of dependent L2 round trips
 * and divisions, far longer than the statistics pass it follows. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void batch_norm_finalize(__global const dtype_t* restrict x, __global const float* restrict partial, int CHUNKS,
                         int HW, __global const float* restrict weight, __global const float* restrict bias,
                         __global float* restrict running_mean, __global float* restrict running_var,
                         __global float* restrict mean, __global float* restrict var,
                         __global float* restrict scale, __global float* restrict shift,
                         int C, float eps, float momentum, int training)
{
    const int lid = get_local_id(0);
    const int lg = bn_segment_log2(training ? CHUNKS : 1);
    const int T = 1 << lg;
    const int t = lid & (T - 1);
    const int c = get_group_id(0) * (WG >> lg) + (lid >> lg);
    float n = 0.0f, m = 0.0f, q = 0.0f;
    __local float rn[WG], rm[WG], rq[WG];
    if (training) {
        if (c < C) {
            for (int k = t; k < CHUNKS; k += T) {
                __global const float* pp = partial + (c * CHUNKS + k) * 3;
                chan_merge(&n, &m, &q, pp[0], pp[1], pp[2]);
            }
        }
        bn_tree_merge(lid, t, T, n, m, q, rn, rm, rq);
    }
    if (t != 0 || c >= C) return;
    if (training) {
#if LAYOUT_NHWC
        const float centre = LD(x, c);
#else
        const float centre = LD(x, c * HW);
#endif
        bn_finish_channel(c, C, centre, rn[lid], rm[lid], rq[lid], weight, bias, running_mean, running_var, mean,
                          var, scale, shift, eps, momentum);
        return;
    }
    const float v = running_var[c];
    float s = 1.0f / sqrt(v + eps);
    if (weight) s *= weight[c];
    scale[c] = s;
    shift[c] = bias ? bias[c] : 0.0f;
    shift[C + c] = running_mean[c];
}

#if !LAYOUT_NHWC
/* NCHW training statistics and finalize in one launch: each group writes its partial as
 * batch_norm_stats does, then counts itself in counters[c] (zero before the launch); the
 * channel's last group merges the channel's CHUNKS partials in chunk order (the result does
 * not depend on which group is last), writes what batch_norm_finalize writes and sets the
 * counter back to zero for the next launch. One launch and one host enqueue fewer than
 * stats + finalize: on the H200 the finalize launch took 6-7 us of a 55 us fp16 call and
 * the host's third enqueue gated the apply pass (benchmarks/opencl_ops.py --launches). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void batch_norm_stats_finalize(__global const dtype_t* restrict x, __global float* restrict partial, int CHUNKS,
                               int N, int C, int HW, __global const float* restrict weight,
                               __global const float* restrict bias, __global float* restrict running_mean,
                               __global float* restrict running_var, __global float* restrict mean,
                               __global float* restrict var, __global float* restrict scale,
                               __global float* restrict shift, float eps, float momentum,
                               __global int* restrict counters)
{
    BN_STATS_NCHW_GROUP;
    __local int last;
    /* The partials and the counter cross groups, and OpenCL 1.2 orders no plain global access
     * of one group against another's (Oclgrind's race check reports every such pair): they are
     * written and read with 32-bit atomics, the floats as their bits. A few words a group. */
    volatile __global int* const bits = (volatile __global int*)partial;
    if (lid == 0) {
        const int at = (c * CHUNKS + chunk) * 3;
        atomic_xchg(bits + at, as_int(rn[0]));
        atomic_xchg(bits + at + 1, as_int(rm[0]));
        atomic_xchg(bits + at + 2, as_int(rq[0]));
        mem_fence(CLK_GLOBAL_MEM_FENCE); /* the partial is in memory before the count says so */
        last = atomic_inc(counters + c) == CHUNKS - 1;
    }
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    if (!last) return;
    mem_fence(CLK_GLOBAL_MEM_FENCE);
    /* atomic reads (or with 0): the other groups' partials from memory, not from a stale cache */
    volatile __global int* const vp = bits + c * CHUNKS * 3;
    const int T = 1 << bn_segment_log2(CHUNKS);
    float n = 0.0f, m = 0.0f, q = 0.0f;
    for (int k = lid; k < CHUNKS; k += T)
        chan_merge(&n, &m, &q, as_float(atomic_or(vp + 3 * k, 0)), as_float(atomic_or(vp + 3 * k + 1, 0)),
                   as_float(atomic_or(vp + 3 * k + 2, 0)));
    bn_tree_merge(lid, lid, T, n, m, q, rn, rm, rq); /* work-items past T hold empty states */
    if (lid == 0) {
        atomic_xchg(counters + c, 0);
        bn_finish_channel(c, C, K, rn[0], rm[0], rq[0], weight, bias, running_mean, running_var, mean, var, scale,
                          shift, eps, momentum);
    }
}
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void batch_norm_apply(__global const dtype_t* restrict x, __global dtype_t* restrict y,
                      __global const float* restrict scale, __global const float* restrict shift,
                      int N, int C, int HW)
{
    const int gid = get_global_id(0);
#if !LAYOUT_NHWC
    /* VEC consecutive values of one (n, c) plane */
    const int HWV = CEIL_DIV(HW, VEC);
    if (gid >= N * C * HWV) return;
    if (HW % VEC == 0) {
        /* planes hold whole vectors: vector gid starts at element gid * VEC, aligned */
        const int c = (gid / HWV) % C;
        const int p = gid * VEC;
        STV_A((LDV_A(x, p) - shift[C + c]) * scale[c] + shift[c], y, p);
        return;
    }
    const int hv = gid % HWV;
    const int nc = gid / HWV;
    const int c = nc % C;
    const int p = nc * HW + hv * VEC;
    const int nvalid = min(VEC, HW - hv * VEC);
    const float s = scale[c], b = shift[c], k = shift[C + c];
    if (nvalid == VEC) {
        STV((LDV(x, p) - k) * s + b, y, p);
    } else {
        for (int j = 0; j < nvalid; ++j) ST((LD(x, p + j) - k) * s + b, y, p + j);
    }
#else
    /* VEC consecutive channels of one pixel */
    const int CV = CEIL_DIV(C, VEC);
    if (gid >= N * HW * CV) return;
    if (C % VEC == 0) {
        /* rows hold whole vectors: vector gid starts at element gid * VEC, aligned, and so
         * are its channels' parameters (C % VEC == 0 aligns shift + C too) */
        const int c0 = (gid % CV) * VEC;
        const int p = gid * VEC;
        STV_A((LDV_A(x, p) - FLDV_A(shift, C + c0)) * FLDV_A(scale, c0) + FLDV_A(shift, c0), y, p);
        return;
    }
    const int cv = gid % CV;
    const int m = gid / CV;
    const int c0 = cv * VEC;
    const int p = m * C + c0;
    const int nvalid = min(VEC, C - c0);
    if (nvalid == VEC) {
        STV((LDV(x, p) - FLDV(shift, C + c0)) * FLDV(scale, c0) + FLDV(shift, c0), y, p);
    } else {
        for (int j = 0; j < nvalid; ++j) {
            const int c = c0 + j;
            ST((LD(x, p + j) - shift[C + c]) * scale[c] + shift[c], y, p + j);
        }
    }
#endif
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void batch_norm_infer(__global const dtype_t* restrict x, __global dtype_t* restrict y,
                      __global const float* restrict weight, __global const float* restrict bias,
                      __global const float* restrict running_mean, __global const float* restrict running_var,
                      int N, int C, int HW, float eps)
{
    const int gid = get_global_id(0);
#if !LAYOUT_NHWC
    const int HWV = CEIL_DIV(HW, VEC);
    if (gid >= N * C * HWV) return;
    if (HW % VEC == 0) {
        /* planes hold whole vectors: vector gid starts at element gid * VEC, aligned */
        const int c = (gid / HWV) % C;
        const int p = gid * VEC;
        const float s = (weight ? weight[c] : 1.0f) / sqrt(running_var[c] + eps);
        STV_A((LDV_A(x, p) - running_mean[c]) * s + (bias ? bias[c] : 0.0f), y, p);
        return;
    }
    const int hv = gid % HWV;
    const int nc = gid / HWV;
    const int c = nc % C;
    const int p = nc * HW + hv * VEC;
    const int nvalid = min(VEC, HW - hv * VEC);
    const float s = (weight ? weight[c] : 1.0f) / sqrt(running_var[c] + eps);
    const float k = running_mean[c], b = bias ? bias[c] : 0.0f;
    if (nvalid == VEC) {
        STV((LDV(x, p) - k) * s + b, y, p);
    } else {
        for (int j = 0; j < nvalid; ++j) ST((LD(x, p + j) - k) * s + b, y, p + j);
    }
#else
    const int CV = CEIL_DIV(C, VEC);
    if (gid >= N * HW * CV) return;
#if BN_INFER_LOOP
    {
        /* the launcher's (C % VEC == 0, and the global size G a multiple of CV = C / VEC):
         * vectors gid, gid + G, ... all hold channels c0 .. c0 + VEC - 1, so their scale and
         * shift are computed once (a square root and a division per channel cost as much as
         * a float16 vector's own arithmetic); BN_LOOP_U loads are issued before their stores */
        const int c0 = (gid % CV) * VEC;
        const floatV s = (weight ? FLDV_A(weight, c0) : (floatV)1.0f) / sqrt(FLDV_A(running_var, c0) + eps);
        const floatV k = FLDV_A(running_mean, c0);
        const floatV b = bias ? FLDV_A(bias, c0) : (floatV)0.0f;
        const int nv = N * HW * CV, G = get_global_size(0);
        int v = gid;
        for (; v + (BN_LOOP_U - 1) * G < nv; v += BN_LOOP_U * G) {
            floatV in[BN_LOOP_U];
#pragma unroll
            for (int u = 0; u < BN_LOOP_U; ++u) in[u] = LDV_A(x, (v + u * G) * VEC);
#pragma unroll
            for (int u = 0; u < BN_LOOP_U; ++u) STV_A((in[u] - k) * s + b, y, (v + u * G) * VEC);
        }
        for (; v < nv; v += G) STV_A((LDV_A(x, v * VEC) - k) * s + b, y, v * VEC);
        return;
    }
#endif
    if (C % VEC == 0) {
        /* rows hold whole vectors: aligned activations and parameter vectors */
        const int c0 = (gid % CV) * VEC;
        const int p = gid * VEC;
        const floatV s = (weight ? FLDV_A(weight, c0) : (floatV)1.0f) / sqrt(FLDV_A(running_var, c0) + eps);
        const floatV b = bias ? FLDV_A(bias, c0) : (floatV)0.0f;
        STV_A((LDV_A(x, p) - FLDV_A(running_mean, c0)) * s + b, y, p);
        return;
    }
    const int cv = gid % CV;
    const int m = gid / CV;
    const int c0 = cv * VEC;
    const int p = m * C + c0;
    const int nvalid = min(VEC, C - c0);
    if (nvalid == VEC) {
        const floatV s = (weight ? FLDV(weight, c0) : (floatV)1.0f) / sqrt(FLDV(running_var, c0) + eps);
        const floatV b = bias ? FLDV(bias, c0) : (floatV)0.0f;
        STV((LDV(x, p) - FLDV(running_mean, c0)) * s + b, y, p);
    } else {
        for (int j = 0; j < nvalid; ++j) {
            const int c = c0 + j;
            const float s = (weight ? weight[c] : 1.0f) / sqrt(running_var[c] + eps);
            ST((LD(x, p + j) - running_mean[c]) * s + (bias ? bias[c] : 0.0f), y, p + j);
        }
    }
#endif
}
