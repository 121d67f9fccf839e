/* Adaptive 2-D pooling: adaptive_pool2d_max, adaptive_pool2d_avg.
 *
 * Arguments (all backends): x, y, indices, N, C, IH, IW, OH, OW (indices may be NULL).
 * Bin i along an axis of input size In and output size Out covers
 * [(i * In) / Out, ((i + 1) * In + Out - 1) / Out) in integer math.
 *
 * ADAPTIVE_GROUP selects the work mapping (the backend resolves it per call):
 *   0  one work-item per output: NCHW scalar (avg sums VEC-wide along each bin row),
 *      NHWC VEC channels per work-item;
 *   1  one work-group per output (NCHW) or per output pixel and 16*VEC channels (NHWC):
 *      the group strides over the bin and reduces in local memory; for large bins such
 *      as global pooling.
 *   2  NCHW only, "flat": a work-group stages a run of whole planes in local memory with
 *      coalesced loads, then reduces their bins there; for small planes (see below).
 *   3  NCHW global pooling only, "pipe": as flat, for planes of a build-time size, with
 *      the next run's loads in flight while a run is reduced (see below).
 * Max pooling scans taps row-major, takes v > best || isnan(v); partial results combine
 * by flat index (first maximum, last NaN), which equals the sequential scan order.
 */

#ifndef ADAPTIVE_GROUP
#define ADAPTIVE_GROUP 0
#endif
/* GVEC_U > 0 (NHWC, ADAPTIVE_GROUP 0 only): the per-item kernels become the global-pooling
 * walk with GVEC_U loads in flight (see there) */
#ifndef GVEC_U
#define GVEC_U 0
#endif

/* HALF_RAW=1 (float16, VEC 4 or 8): the aligned vector loads of the per-item and group
 * kernels, and the NHWC per-item vector stores, as one raw ushortN access each (hal_ldrawN,
 * hal_strawN in hal_prelude.h), where vload_halfN may become N 16-bit loads (NVIDIA). NCHW
 * rows take scalars up to their first VEC-aligned element; NHWC channel vectors are aligned
 * when C % VEC == 0 (c0 is a multiple of VEC); otherwise the element-aligned loads serve.
 * The flat kernels copy raw bits already, and NCHW max loads scalars. */
#if DTYPE_HALF && HALF_RAW && VEC > 1
#define ADAPT_RAW 1
#define RAW_LDV(p) HAL_CAT(hal_ldraw, VEC)(p)
#define RAW_STV(v, p) HAL_CAT(hal_straw, VEC)(ACTV(v), (p))
/* elements from the last VEC-aligned address up to p (OpenCL buffers are aligned, but the
 * check costs nothing and keeps a misaligned buffer on the element-aligned loads) */
#define RAW_MIS(p) ((int)(((ulong)(p) / sizeof(half)) % VEC))
/* NHWC kernels (x, y, C in scope): every channel vector is aligned */
#define RAW_OK (C % VEC == 0 && !RAW_MIS(x) && !RAW_MIS(y))
#else
#define ADAPT_RAW 0
#define RAW_OK 0
#endif

#define BIN_START(i, in, out) (((i) * (in)) / (out))
#define BIN_END(i, in, out) ((((i) + 1) * (in) + (out) - 1) / (out))

/* (bv, bi) := combine(earlier-or-any (bv, bi), (v, i)) by scan order = flat index order */
#define MAX_COMBINE(bv, bi, v, i)                                                       \
    do {                                                                                \
        const int an_ = isnan(bv), bn_ = isnan(v);                                      \
        int takeb_;                                                                     \
        if (an_ || bn_) takeb_ = bn_ && (!an_ || (i) > (bi));                           \
        else takeb_ = (v) > (bv) || ((v) == (bv) && (i) < (bi));                        \
        if (takeb_) { bv = (v); bi = (i); }                                             \
    } while (0)

/* local slots a := combine(a, b): the group reductions' step (a holds the earlier taps) */
inline void max_merge_slots(__local float* sv, __local int* si, int a, int b)
{
    float bv = sv[a];
    int bi = si[a];
    MAX_COMBINE(bv, bi, sv[b], si[b]);
    sv[a] = bv;
    si[a] = bi;
}

/* raw element bits (the flat and pipe kernels copy them unconverted: NaN payloads and -0 kept) */
#if ADAPTIVE_GROUP >= 2
#if DTYPE_HALF || DTYPE_BF16
typedef ushort raw_t;
#if VEC == 1
typedef ushort rawV;
#else
typedef HAL_CAT(ushort, VEC) rawV;
#endif
#else
typedef uint raw_t;
#if VEC == 1
typedef uint rawV;
#else
typedef HAL_CAT(uint, VEC) rawV;
#endif
#endif
#endif

#if ADAPTIVE_GROUP == 2
#if LAYOUT_NHWC
#error "ADAPTIVE_GROUP 2 (flat) is NCHW only"
#endif
/* ---- NCHW, whole planes staged in local memory ("flat") -----------------------------
 * With one work-item per output, neighbouring work-items read planes IH*IW elements
 * apart: for small planes every load of a warp touches a different cache line. Here
 * work-group g takes chunks of P consecutive planes (chunks g, g + G, ... of G groups;
 * P = min(FLAT_ELEMS / (IH*IW), ceil(N*C / G))). A chunk is one contiguous run of the
 * input: the group copies it into local memory, work-item i taking vectors i, i + WG, ...
 * (VEC-wide, aligned; scalar head and tail), the run keeping its global alignment in
 * local memory. Then S work-items per output (S a power of two: the most that fit in the
 * group, 1 once the chunk holds WG / 2 outputs or more) reduce each bin from local memory
 * and store (S = 1: consecutive outputs from consecutive work-items). The copy moves raw
 * bits (no conversion; NaN payloads and -0 kept); loads from local memory go through LD.
 * FLAT_ELEMS: staging capacity in elements, a multiple of VEC, set by the launcher from
 * the device's local memory, and at least IH*IW (the launcher checks).
 */
#ifndef FLAT_ELEMS
#define FLAT_ELEMS (16 * WG)
#endif
#ifndef FLAT_U
#define FLAT_U 4 /* vector loads each work-item issues before storing them */
#endif

/* Copy elements [s0, s0 + ne) of x to local element off + j (j = 0 .. ne - 1), where off =
 * the run's element offset modulo VEC, so that aligned global vectors land on aligned
 * local vectors. Returns off. FLAT_U loads are issued before their stores. */
inline int flat_stage(__global const dtype_t* x, __local rawV* stage, int s0, int ne, int lid)
{
    __global const raw_t* xs = (__global const raw_t*)x;
    __local raw_t* ls = (__local raw_t*)stage;
    const int off = (int)(((ulong)xs / sizeof(raw_t) + (ulong)s0) % VEC);
    const int head = min((VEC - off) % VEC, ne);
    if (lid < head) ls[off + lid] = xs[s0 + lid];
    const int nv = (ne - head) / VEC;
    __global const rawV* xv = (__global const rawV*)(xs + s0 + head);
    __local rawV* lv = stage + (off + head) / VEC;
    int k = lid;
    for (; k + (FLAT_U - 1) * WG < nv; k += FLAT_U * WG) {
        rawV r[FLAT_U];
#pragma unroll
        for (int j = 0; j < FLAT_U; ++j) r[j] = xv[k + j * WG];
#pragma unroll
        for (int j = 0; j < FLAT_U; ++j) lv[k + j * WG] = r[j];
    }
    for (; k < nv; k += WG) lv[k] = xv[k];
    const int t0 = head + nv * VEC;
    if (lid < ne - t0) ls[off + t0 + lid] = xs[s0 + t0 + lid];
    return off;
}

/* Sequential max over run[a, b) (plane indices base + a ..): v > best || isnan(v). */
inline void flat_max_run(__local const dtype_t* run, int base, int a, int b, float* best, int* bidx)
{
    float bv = *best;
    int bi = *bidx;
    for (int k = a; k < b; ++k) {
        const float v = LD(run, k);
        if (v > bv || isnan(v)) {
            bv = v;
            bi = base + k;
        }
    }
    *best = bv;
    *bidx = bi;
}

inline float flat_sum_run(__local const dtype_t* run, int a, int b)
{
    float sum = 0.0f;
    for (int k = a; k < b; ++k) sum += LD(run, k);
    return sum;
}

#define FLAT_PROLOGUE                                                                  \
    __local rawV stage[FLAT_ELEMS / VEC + 1];                                          \
    __local const dtype_t* sx = (__local const dtype_t*)stage;                         \
    const int lid = get_local_id(0);                                                   \
    const int G = get_num_groups(0);                                                   \
    const int HW = IH * IW, OHW = OH * OW, NC = N * C;                                 \
    const int P = min(FLAT_ELEMS / HW, CEIL_DIV(NC, G));                               \
    /* S work-items per output: the largest power of two with S * P * OHW <= WG */     \
    const int fit = OHW > WG ? 0 : WG / (P * OHW);                                     \
    const int S = fit > 1 ? 1 << (31 - clz(fit)) : 1;

/* Work unit u = t * S + s of a chunk: output t (plane q, run lp in local memory, its bin),
 * taps s, s + S, ... . S = 1 loops over the chunk's outputs and stores each at once;
 * S > 1 makes one pass (np * OHW * S <= WG) leaving partial results for the merge.
 * Every barrier is outside the branches (same trip counts in every work-item). */
#define FLAT_UNIT(u)                                                                   \
    const int t = (u) / S, s = (u) - t * S;                                            \
    const int q = t / OHW, o = t - q * OHW;                                            \
    const int oh = o / OW, ow = o - oh * OW;                                           \
    const int hs = BIN_START(oh, IH, OH), he = BIN_END(oh, IH, OH);                    \
    const int ws = BIN_START(ow, IW, OW), we = BIN_END(ow, IW, OW);                    \
    const int bw = we - ws, taps = (he - hs) * bw;                                     \
    __local const dtype_t* lp = sx + off + q * HW;

/* plane index of tap k of a bin (row-major); whole-row bins are one run */
#define FLAT_TAP(k) (bw == IW ? hs * IW + (k) : (hs + (k) / bw) * IW + ws + (k) % bw)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void adaptive_pool2d_max(__global const dtype_t* restrict x, __global dtype_t* restrict y,
                         __global long* restrict indices, int N, int C, int IH, int IW, int OH, int OW)
{
    FLAT_PROLOGUE
    __local float sv[WG];
    __local int si[WG];
    for (int p0 = get_group_id(0) * P; p0 < NC; p0 += G * P) {
        const int np = min(P, NC - p0);
        const int off = flat_stage(x, stage, p0 * HW, np * HW, lid);
        const int obase = p0 * OHW, work = np * OHW * S;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int u = lid; u < work; u += WG) {
            FLAT_UNIT(u)
            float best = -INFINITY;
            if (S == 1) {
                int bidx = hs * IW + ws;
                if (bw == IW) {
                    /* whole rows: one run. An even run starts at lid % taps (spreading
                     * a warp's work-items over the local-memory banks); the taps before
                     * the start are scanned second and merged as the earlier ones. */
                    __local const dtype_t* run = lp + hs * IW;
                    const int r = (taps & 1) ? 0 : lid % taps;
                    flat_max_run(run, hs * IW, r, taps, &best, &bidx);
                    if (r) {
                        float b2 = -INFINITY;
                        int i2 = hs * IW;
                        flat_max_run(run, hs * IW, 0, r, &b2, &i2);
                        MAX_COMBINE(best, bidx, b2, i2);
                    }
                } else {
                    for (int ih = hs; ih < he; ++ih) flat_max_run(lp + ih * IW, ih * IW, ws, we, &best, &bidx);
                }
                ST(best, y, obase + t);
                if (indices) indices[obase + t] = bidx;
            } else {
                /* taps s, s + S, ... in order; the first one is always taken, a work-item
                 * without taps leaves (-inf, INT_MAX), which every merge discards */
                int bidx = INT_MAX;
                for (int k = s; k < taps; k += S) {
                    const int i = FLAT_TAP(k);
                    const float v = LD(lp, i);
                    if (k == s || v > best || isnan(v)) {
                        best = v;
                        bidx = i;
                    }
                }
                sv[u] = best;
                si[u] = bidx;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        /* S > 1: merge the S partial (value, index) pairs of each output by flat index
         * (first maximum, last NaN), which equals the sequential scan */
        for (int h = S >> 1; h > 0; h >>= 1) {
            if ((lid & (S - 1)) < h && lid < work) max_merge_slots(sv, si, lid, lid + h);
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        /* work-item lid stores output lid (merged at lid * S): consecutive stores. (A store
         * by the merging work-item, guarded by (lid & (S - 1)) == 0, ran in every work-item
         * under PoCL 3.0-rc2.) */
        if (S > 1 && lid < np * OHW) {
            ST(sv[lid * S], y, obase + lid);
            if (indices) indices[obase + lid] = si[lid * S];
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* the next chunk overwrites the stage and sv/si */
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void adaptive_pool2d_avg(__global const dtype_t* restrict x, __global dtype_t* restrict y,
                         __global long* restrict indices, int N, int C, int IH, int IW, int OH, int OW)
{
    FLAT_PROLOGUE
    __local float ss[WG];
    for (int p0 = get_group_id(0) * P; p0 < NC; p0 += G * P) {
        const int np = min(P, NC - p0);
        const int off = flat_stage(x, stage, p0 * HW, np * HW, lid);
        const int obase = p0 * OHW, work = np * OHW * S;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int u = lid; u < work; u += WG) {
            FLAT_UNIT(u)
            float sum = 0.0f;
            if (S == 1) {
                if (bw == IW) {
                    /* whole rows: one run, rotated as in max (which only reorders the sum) */
                    __local const dtype_t* run = lp + hs * IW;
                    const int r = (taps & 1) ? 0 : lid % taps;
                    sum = flat_sum_run(run, r, taps) + flat_sum_run(run, 0, r);
                } else {
                    for (int ih = hs; ih < he; ++ih) sum += flat_sum_run(lp + ih * IW, ws, we);
                }
                ST(sum / (float)taps, y, obase + t);
            } else {
                for (int k = s; k < taps; k += S) sum += LD(lp, FLAT_TAP(k));
                ss[u] = sum;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int h = S >> 1; h > 0; h >>= 1) {
            if ((lid & (S - 1)) < h && lid < work) ss[lid] += ss[lid + h];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (S > 1 && lid < np * OHW) { /* as in max */
            const int oh = (lid % OHW) / OW, ow = (lid % OHW) % OW;
            const int taps = (BIN_END(oh, IH, OH) - BIN_START(oh, IH, OH)) * (BIN_END(ow, IW, OW) - BIN_START(ow, IW, OW));
            ST(ss[lid * S] / (float)taps, y, obase + lid);
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* the next chunk overwrites the stage and ss */
    }
}

#elif ADAPTIVE_GROUP == 3
#if LAYOUT_NHWC
#error "ADAPTIVE_GROUP 3 (pipe) is NCHW only"
#endif
#ifndef PIPE_HW
#error "ADAPTIVE_GROUP 3 (pipe) needs PIPE_HW, the plane size"
#endif
#if WG % VEC
#error "ADAPTIVE_GROUP 3 (pipe) needs WG to be a multiple of VEC"
#endif
/* ---- NCHW global pooling of small planes, pipelined ("pipe") ------------------------
 * Every plane has PIPE_HW elements, fixed at build time (the launcher's), and one output.
 * A chunk is WG consecutive planes: WG * PIPE_HW contiguous elements, VEC-aligned when x
 * is (WG is a multiple of VEC). Work-group g takes the full chunks g, g + G, ...: each
 * work-item holds its vectors of the next chunk in registers (vector lid + j * WG, a
 * constant count), writes them to local memory, issues the loads of the chunk after, and
 * while those are in flight reduces plane lid of this one with unrolled local loads; the
 * flat kernel instead waits for each chunk's loads before it reduces. float16 and bfloat16
 * planes are read as 32-bit words (two elements per local load; a plane of odd size starts
 * at an odd element on odd work-items, and the element of its first or last word that is
 * not its own is replaced by the identity). The launcher builds it where the lane strides
 * leave at most 2-way bank conflicts. Sums run in element order; max takes v > best ||
 * isnan(v) in order (the first maximum, the last NaN: the sequential scan). The planes of a
 * last partial chunk (and every plane, should x not be VEC-aligned) are read directly.
 */
#define PIPE_VECS (WG * PIPE_HW / VEC) /* aligned vectors of one chunk */
#define PIPE_J CEIL_DIV(PIPE_HW, VEC)  /* of which work-item lid takes lid + j * WG */
#define PIPE_FULL(j) (PIPE_HW % VEC == 0 || (j) * WG + lid < PIPE_VECS)

/* element k of plane lid of the staged chunk, as float (words of two 16-bit elements for
 * float16 and bfloat16, in memory order) */
#if DTYPE_HALF || DTYPE_BF16
#define PIPE_WORDS 1
#define PIPE_NW ((PIPE_HW + 1) / 2)
inline float2 pipe_word(__local const uint* w, int j)
{
    const uint v = w[j];
#if DTYPE_HALF
    return vload_half2(0, (const __private half*)&v);
#else
    return hal_bf2f2(as_ushort2(v));
#endif
}
#else
#define PIPE_WORDS 0
#endif

/* plane lid of the staged chunk: max (and the index of the taken element) or sum */
inline float pipe_reduce(__local const raw_t* stage, int lid, const int is_max, int* bidx)
{
    const float id = is_max ? -INFINITY : 0.0f;
    float acc = id;
    int bi = 0;
#if PIPE_WORDS
    const int e0 = lid * PIPE_HW;
    const int odd = (PIPE_HW & 1) ? (e0 & 1) : 0;
    __local const uint* w = (__local const uint*)stage + (e0 >> 1);
#pragma unroll
    for (int j = 0; j < PIPE_NW; ++j) {
        float2 h = pipe_word(w, j);
#if PIPE_HW & 1
        if (j == 0 && odd) h.x = id; /* the neighbour's half */
        if (j == PIPE_NW - 1 && !odd) h.y = id;
#endif
        if (is_max) {
            if (h.x > acc || isnan(h.x)) { acc = h.x; bi = 2 * j - odd; }
            if (h.y > acc || isnan(h.y)) { acc = h.y; bi = 2 * j + 1 - odd; }
        } else {
            acc = (acc + h.x) + h.y;
        }
    }
#else
    __local const float* pl = (__local const float*)stage + lid * PIPE_HW;
#pragma unroll
    for (int k = 0; k < PIPE_HW; ++k) {
        const float v = pl[k];
        if (is_max) {
            if (v > acc || isnan(v)) { acc = v; bi = k; }
        } else {
            acc += v;
        }
    }
#endif
    *bidx = bi;
    return is_max ? acc : acc / (float)PIPE_HW;
}

/* the same from global memory (a partial chunk, or x not VEC-aligned) */
inline float pipe_reduce_direct(__global const dtype_t* xp, const int is_max, int* bidx)
{
    float acc = is_max ? -INFINITY : 0.0f;
    int bi = 0;
    for (int k = 0; k < PIPE_HW; ++k) {
        const float v = LD(xp, k);
        if (is_max) {
            if (v > acc || isnan(v)) { acc = v; bi = k; }
        } else {
            acc += v;
        }
    }
    *bidx = bi;
    return is_max ? acc : acc / (float)PIPE_HW;
}

/* stage: PIPE_STAGE16 16-byte words of local memory: PIPE_VECS + 1 vectors (+ 1: a 16-bit
 * plane's last word may pass the chunk's end), declared as uint4 so that the 32-bit word
 * loads of float16 and bfloat16 are aligned at VEC 1 too (a ushort array is 2-byte aligned;
 * NVIDIA's OpenCL faulted on it) */
#define PIPE_STAGE16 CEIL_DIV((PIPE_VECS + 1) * VEC * (int)sizeof(raw_t), 16)
inline void pipe_body(__global const dtype_t* restrict x, __global dtype_t* restrict y,
                      __global long* restrict indices, int NC, __local rawV* stage, const int is_max)
{
    const int lid = get_local_id(0);
    const int G = get_num_groups(0);
    __global const rawV* xv = (__global const rawV*)x;
    /* full chunks staged through registers; none when x is not VEC-aligned */
    const int full = ((ulong)x % (VEC * sizeof(dtype_t))) ? 0 : NC / WG;
    int c = get_group_id(0);
    rawV r[PIPE_J];
    if (c < full) {
#pragma unroll
        for (int j = 0; j < PIPE_J; ++j)
            if (PIPE_FULL(j)) r[j] = xv[c * PIPE_VECS + j * WG + lid];
    }
    for (; c < full; c += G) {
        barrier(CLK_LOCAL_MEM_FENCE); /* the previous chunk's reads of the stage are done */
#pragma unroll
        for (int j = 0; j < PIPE_J; ++j)
            if (PIPE_FULL(j)) stage[j * WG + lid] = r[j];
        barrier(CLK_LOCAL_MEM_FENCE);
        if (c + G < full) { /* the next chunk's loads, in flight during the reduction */
#pragma unroll
            for (int j = 0; j < PIPE_J; ++j)
                if (PIPE_FULL(j)) r[j] = xv[(c + G) * PIPE_VECS + j * WG + lid];
        }
        int bidx;
        const float v = pipe_reduce((__local const raw_t*)stage, lid, is_max, &bidx);
        const int plane = c * WG + lid;
        ST(v, y, plane);
        if (is_max && indices) indices[plane] = bidx;
    }
    for (int plane = full * WG + get_global_id(0); plane < NC; plane += get_global_size(0)) {
        int bidx;
        const float v = pipe_reduce_direct(x + plane * PIPE_HW, is_max, &bidx);
        ST(v, y, plane);
        if (is_max && indices) indices[plane] = bidx;
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void adaptive_pool2d_max(__global const dtype_t* restrict x, __global dtype_t* restrict y,
                         __global long* restrict indices, int N, int C, int IH, int IW, int OH, int OW)
{
    __local uint4 stage[PIPE_STAGE16];
    pipe_body(x, y, indices, N * C, (__local rawV*)stage, 1);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void adaptive_pool2d_avg(__global const dtype_t* restrict x, __global dtype_t* restrict y,
                         __global long* restrict indices, int N, int C, int IH, int IW, int OH, int OW)
{
    __local uint4 stage[PIPE_STAGE16];
    pipe_body(x, y, indices, N * C, (__local rawV*)stage, 0);
}

#elif !ADAPTIVE_GROUP && !LAYOUT_NHWC
/* ---- NCHW, one output per work-item ---------------------------------------------- */

#define ITEM_PROLOGUE                                                                  \
    const int gid = get_global_id(0);                                                  \
    if (gid >= N * C * OH * OW) return;                                                \
    const int ow = gid % OW;                                                           \
    const int oh = (gid / OW) % OH;                                                    \
    const int nc = gid / (OW * OH);                                                    \
    const int hs = BIN_START(oh, IH, OH), he = BIN_END(oh, IH, OH);                    \
    const int ws = BIN_START(ow, IW, OW), we = BIN_END(ow, IW, OW);                    \
    __global const dtype_t* xp = x + nc * IH * IW;

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void adaptive_pool2d_max(__global const dtype_t* restrict x, __global dtype_t* restrict y,
                         __global long* restrict indices, int N, int C, int IH, int IW, int OH, int OW)
{
    ITEM_PROLOGUE
    ctype best = (ctype)(-INFINITY);
    long bidx = hs * IW + ws;
    for (int ih = hs; ih < he; ++ih) {
        for (int iw = ws; iw < we; ++iw) {
            const ctype v = LDC(xp, ih * IW + iw);
            if (v > best || isnan(v)) {
                best = v;
                bidx = ih * IW + iw;
            }
        }
    }
    ST(CTOFLOAT(best), y, gid);
    if (indices) indices[gid] = bidx;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void adaptive_pool2d_avg(__global const dtype_t* restrict x, __global dtype_t* restrict y,
                         __global long* restrict indices, int N, int C, int IH, int IW, int OH, int OW)
{
    ITEM_PROLOGUE
    floatV vsum = (floatV)0.0f;
    float sum = 0.0f;
    for (int ih = hs; ih < he; ++ih) {
        __global const dtype_t* row = xp + ih * IW;
        int iw = ws;
#if ADAPT_RAW
        const int head = min(ws + (VEC - RAW_MIS(row + ws)) % VEC, we);
        for (; iw < head; ++iw) sum += LD(row, iw);
        for (; iw + VEC <= we; iw += VEC) vsum += RAW_LDV(row + iw);
#else
        for (; iw + VEC <= we; iw += VEC) vsum += LDV(row, iw);
#endif
        for (; iw < we; ++iw) sum += LD(row, iw);
    }
    sum += HSUM(vsum);
    ST(sum / (float)((he - hs) * (we - ws)), y, gid);
}

#elif !ADAPTIVE_GROUP && LAYOUT_NHWC
/* ---- NHWC, VEC channels per work-item ---------------------------------------------- */

#define ITEM_PROLOGUE                                                                  \
    const int CV = CEIL_DIV(C, VEC);                                                   \
    const int gid = get_global_id(0);                                                  \
    if (gid >= N * OH * OW * CV) return;                                               \
    const int cv = gid % CV;                                                           \
    int t = gid / CV;                                                                  \
    const int ow = t % OW;                                                             \
    t /= OW;                                                                           \
    const int oh = t % OH;                                                             \
    const int n = t / OH;                                                              \
    const int c0 = cv * VEC;                                                           \
    const int nvalid = min(VEC, C - c0);                                               \
    const int hs = BIN_START(oh, IH, OH), he = BIN_END(oh, IH, OH);                    \
    const int ws = BIN_START(ow, IW, OW), we = BIN_END(ow, IW, OW);                    \
    const int obase = ((n * OH + oh) * OW + ow) * C + c0;                              \
    const int raw = RAW_OK;

inline floatV load_ch_f(__global const dtype_t* x, int p, int nvalid, int raw)
{
#if ADAPT_RAW
    if (raw) return RAW_LDV(x + p);
#endif
    if (nvalid == VEC) return LDV(x, p);
    float tmp[VEC];
    for (int j = 0; j < VEC; ++j) tmp[j] = j < nvalid ? LD(x, p + j) : 0.0f;
    return PRIV_LDV(tmp);
}

inline ctypeV load_ch_c(__global const dtype_t* x, int p, int nvalid, int raw)
{
#if ADAPT_RAW && !HAL_HALF_COMPUTE
    if (raw) return RAW_LDV(x + p);
#endif
    if (nvalid == VEC) return LDCV(x, p);
    ctype tmp[VEC];
    for (int j = 0; j < VEC; ++j) tmp[j] = j < nvalid ? LDC(x, p + j) : (ctype)0;
#if HAL_HALF_COMPUTE && VEC > 1
    return HAL_CAT(vload, VEC)(0, tmp);
#else
    return PRIV_LDV(tmp);
#endif
}

/* the work-item's nvalid outputs */
inline void store_ch(__global dtype_t* y, int obase, int nvalid, int raw, floatV out)
{
#if ADAPT_RAW
    if (raw) {
        RAW_STV(out, y + obase);
        return;
    }
#endif
    if (nvalid == VEC) {
        STV(out, y, obase);
    } else {
        float tv[VEC];
        PRIV_STV(out, tv);
        for (int j = 0; j < nvalid; ++j) ST(tv[j], y, obase + j);
    }
}

#if !GVEC_U
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void adaptive_pool2d_max(__global const dtype_t* restrict x, __global dtype_t* restrict y,
                         __global long* restrict indices, int N, int C, int IH, int IW, int OH, int OW)
{
    ITEM_PROLOGUE
    ctypeV best = (ctypeV)(-INFINITY);
    intV bidx = (intV)(hs * IW + ws);
    for (int ih = hs; ih < he; ++ih) {
        for (int iw = ws; iw < we; ++iw) {
            const ctypeV v = load_ch_c(x, ((n * IH + ih) * IW + iw) * C + c0, nvalid, raw);
            const cmaskV take = (v > best) | isnan(v);
            best = select(best, v, take);
            bidx = select(bidx, (intV)(ih * IW + iw), CMASK_TO_INT(take));
        }
    }
    store_ch(y, obase, nvalid, raw, CTOFLOATV(best));
    if (indices) ST_IDX(bidx, indices, obase, nvalid);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void adaptive_pool2d_avg(__global const dtype_t* restrict x, __global dtype_t* restrict y,
                         __global long* restrict indices, int N, int C, int IH, int IW, int OH, int OW)
{
    ITEM_PROLOGUE
    floatV sum = (floatV)0.0f;
    for (int ih = hs; ih < he; ++ih)
        for (int iw = ws; iw < we; ++iw) sum += load_ch_f(x, ((n * IH + ih) * IW + iw) * C + c0, nvalid, raw);
    store_ch(y, obase, nvalid, raw, sum / (float)((he - hs) * (we - ws)));
}

#else
/* NHWC global pooling (1x1 output, no indices, C % VEC == 0; the launcher's
 * _adaptive_gvec): a work-item per (image, VEC channels), as above, walks the image's
 * pixels in order with GVEC_U vector loads issued before any is folded in (the CUDA
 * backend's adaptive_gvec). Every load reads a pixel clamped into the image, so none waits
 * behind a branch; taps past the end are then left out. Same fold order as above. Max
 * folds in float (exact for both storage types: it selects an input). */
#define GVEC_WALK(LOADV, FOLD)                                                         \
    for (int p0 = 0; p0 < hw; p0 += GVEC_U) {                                          \
        floatV v_[GVEC_U];                                                             \
        _Pragma("unroll")                                                              \
        for (int u = 0; u < GVEC_U; ++u) {                                             \
            const int p = (img + min(p0 + u, hw - 1)) * C + c0;                        \
            v_[u] = LOADV;                                                             \
        }                                                                              \
        _Pragma("unroll")                                                              \
        for (int u = 0; u < GVEC_U; ++u)                                               \
            if (p0 + u < hw) FOLD(acc, v_[u]);                                         \
    }
#define GVEC_SUM(a, v) a += (v)
#define GVEC_MAX(a, v) a = select(a, v, (v > a) | isnan(v))
#if ADAPT_RAW
#define GVEC_BODY(FOLD)                                                                \
    if (raw) {                                                                         \
        GVEC_WALK(RAW_LDV(x + p), FOLD)                                                \
    } else {                                                                           \
        GVEC_WALK(LDV(x, p), FOLD)                                                     \
    }
#else
#define GVEC_BODY(FOLD) GVEC_WALK(LDV(x, p), FOLD)
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void adaptive_pool2d_max(__global const dtype_t* restrict x, __global dtype_t* restrict y,
                         __global long* restrict indices, int N, int C, int IH, int IW, int OH, int OW)
{
    ITEM_PROLOGUE
    const int hw = IH * IW, img = n * hw;
    floatV acc = (floatV)(-INFINITY);
    GVEC_BODY(GVEC_MAX)
    store_ch(y, obase, nvalid, raw, acc);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void adaptive_pool2d_avg(__global const dtype_t* restrict x, __global dtype_t* restrict y,
                         __global long* restrict indices, int N, int C, int IH, int IW, int OH, int OW)
{
    ITEM_PROLOGUE
    const int hw = IH * IW, img = n * hw;
    floatV acc = (floatV)0.0f;
    GVEC_BODY(GVEC_SUM)
    store_ch(y, obase, nvalid, raw, acc / (float)hw);
}
#endif

#elif ADAPTIVE_GROUP && !LAYOUT_NHWC
/* ---- NCHW, one work-group per output ----------------------------------------------- */

#define GROUP_PROLOGUE                                                                 \
    const int o = get_group_id(0);                                                     \
    const int lid = get_local_id(0);                                                   \
    const int ow = o % OW;                                                             \
    const int oh = (o / OW) % OH;                                                      \
    const int nc = o / (OW * OH);                                                      \
    const int hs = BIN_START(oh, IH, OH), he = BIN_END(oh, IH, OH);                    \
    const int ws = BIN_START(ow, IW, OW), we = BIN_END(ow, IW, OW);                    \
    const int bw = we - ws;                                                            \
    const int taps = (he - hs) * bw;                                                   \
    __global const dtype_t* xp = x + nc * IH * IW;

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void adaptive_pool2d_max(__global const dtype_t* restrict x, __global dtype_t* restrict y,
                         __global long* restrict indices, int N, int C, int IH, int IW, int OH, int OW)
{
    GROUP_PROLOGUE
    __local float sv[WG];
    __local int si[WG];
    float best = -INFINITY;
    int bidx = INT_MAX;
    int unseen = 1;
    for (int t = lid; t < taps; t += WG) {
        const int ih = hs + t / bw, iw = ws + t % bw;
        const float v = LD(xp, ih * IW + iw);
        if (unseen || v > best || isnan(v)) {
            best = v;
            bidx = ih * IW + iw;
            unseen = 0;
        }
    }
    sv[lid] = best;
    si[lid] = bidx;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (lid < s) max_merge_slots(sv, si, lid, lid + s);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        ST(sv[0], y, o);
        if (indices) indices[o] = si[0];
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void adaptive_pool2d_avg(__global const dtype_t* restrict x, __global dtype_t* restrict y,
                         __global long* restrict indices, int N, int C, int IH, int IW, int OH, int OW)
{
    GROUP_PROLOGUE
    __local float ss[WG];
    float sum = 0.0f;
    if (bw == IW) {
        /* whole rows: the bin is one contiguous run, read VEC-wide */
        __global const dtype_t* run = xp + hs * IW;
#if ADAPT_RAW
        /* scalars up to the first aligned element, then aligned raw vectors */
        const int head = min((VEC - RAW_MIS(run)) % VEC, taps);
        if (lid < head) sum += LD(run, lid);
        const int nv = (taps - head) / VEC;
        for (int t = lid; t < nv; t += WG) sum += HSUM(RAW_LDV(run + head + t * VEC));
        for (int t = head + nv * VEC + lid; t < taps; t += WG) sum += LD(run, t);
#else
        const int nv = taps / VEC;
        for (int t = lid; t < nv; t += WG) sum += HSUM(LDV(run, t * VEC));
        for (int t = nv * VEC + lid; t < taps; t += WG) sum += LD(run, t);
#endif
    } else {
        for (int t = lid; t < taps; t += WG) sum += LD(xp, (hs + t / bw) * IW + ws + t % bw);
    }
    ss[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (lid < s) ss[lid] += ss[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) ST(ss[0] / (float)taps, y, o);
}

#else
/* ---- NHWC, one work-group per output pixel and 16 * VEC channels --------------------
 * Work-item (cl, r): cl = lid % 16 picks VEC channels, r = lid / 16 strides over taps. */

#define LANES 16
#define ROWS (WG / LANES)

#define GROUP_PROLOGUE                                                                 \
    const int CT = CEIL_DIV(C, LANES * VEC);                                           \
    const int grp = get_group_id(0);                                                   \
    const int ct = grp % CT;                                                           \
    const int o = grp / CT; /* (n * OH + oh) * OW + ow */                              \
    const int ow = o % OW;                                                             \
    const int oh = (o / OW) % OH;                                                      \
    const int n = o / (OW * OH);                                                       \
    const int lid = get_local_id(0);                                                   \
    const int cl = lid % LANES, r = lid / LANES;                                       \
    const int c0 = (ct * LANES + cl) * VEC;                                            \
    const int nvalid = clamp(C - c0, 0, VEC);                                          \
    const int hs = BIN_START(oh, IH, OH), he = BIN_END(oh, IH, OH);                    \
    const int ws = BIN_START(ow, IW, OW), we = BIN_END(ow, IW, OW);                    \
    const int bw = we - ws;                                                            \
    const int taps = (he - hs) * bw;                                                   \
    const int obase = o * C + c0;                                                      \
    const int raw = RAW_OK;

inline float lane_load(__global const dtype_t* x, int p, int j, int nvalid)
{
    return j < nvalid ? LD(x, p + j) : 0.0f;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void adaptive_pool2d_max(__global const dtype_t* restrict x, __global dtype_t* restrict y,
                         __global long* restrict indices, int N, int C, int IH, int IW, int OH, int OW)
{
    GROUP_PROLOGUE
    __local float sv[WG * VEC];
    __local int si[WG * VEC];
    float best[VEC];
    int bidx[VEC];
    for (int j = 0; j < VEC; ++j) {
        best[j] = -INFINITY;
        bidx[j] = INT_MAX;
    }
    int unseen = 1;
    if (nvalid > 0) {
        for (int t = r; t < taps; t += ROWS) {
            const int ih = hs + t / bw, iw = ws + t % bw;
            const int p = ((n * IH + ih) * IW + iw) * C + c0;
            float v[VEC];
            if (raw) {
#if ADAPT_RAW
                PRIV_STV(RAW_LDV(x + p), v);
#endif
            } else if (nvalid == VEC) {
                PRIV_STV(LDV(x, p), v);
            } else {
                for (int j = 0; j < VEC; ++j) v[j] = lane_load(x, p, j, nvalid);
            }
            for (int j = 0; j < VEC; ++j) {
                if (unseen || v[j] > best[j] || isnan(v[j])) {
                    best[j] = v[j];
                    bidx[j] = ih * IW + iw;
                }
            }
            unseen = 0;
        }
    }
    for (int j = 0; j < VEC; ++j) {
        sv[lid * VEC + j] = best[j];
        si[lid * VEC + j] = bidx[j];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = ROWS / 2; s > 0; s >>= 1) {
        if (r < s) {
            for (int j = 0; j < VEC; ++j) max_merge_slots(sv, si, lid * VEC + j, (lid + s * LANES) * VEC + j);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (r == 0) {
        for (int j = 0; j < nvalid; ++j) {
            ST(sv[lid * VEC + j], y, obase + j);
            if (indices) indices[obase + j] = si[lid * VEC + j];
        }
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void adaptive_pool2d_avg(__global const dtype_t* restrict x, __global dtype_t* restrict y,
                         __global long* restrict indices, int N, int C, int IH, int IW, int OH, int OW)
{
    GROUP_PROLOGUE
    __local float ss[WG * VEC];
    floatV sum = (floatV)0.0f;
    if (nvalid > 0) {
        for (int t = r; t < taps; t += ROWS) {
            const int p = ((n * IH + hs + t / bw) * IW + ws + t % bw) * C + c0;
            if (raw) {
#if ADAPT_RAW
                sum += RAW_LDV(x + p);
#endif
            } else if (nvalid == VEC) {
                sum += LDV(x, p);
            } else {
                float v[VEC];
                for (int j = 0; j < VEC; ++j) v[j] = lane_load(x, p, j, nvalid);
                sum += PRIV_LDV(v);
            }
        }
    }
    PRIV_STV(sum, ss + lid * VEC);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = ROWS / 2; s > 0; s >>= 1) {
        if (r < s) {
            for (int j = 0; j < VEC; ++j) ss[lid * VEC + j] += ss[(lid + s * LANES) * VEC + j];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (r == 0) {
        for (int j = 0; j < nvalid; ++j) ST(ss[lid * VEC + j] / (float)taps, y, obase + j);
    }
}
#endif
