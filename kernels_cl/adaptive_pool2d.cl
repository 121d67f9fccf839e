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
 * Max pooling scans taps row-major, takes v > best || isnan(v); partial results combine
 * by flat index (first maximum, last NaN), which equals the sequential scan order.
 */

#ifndef ADAPTIVE_GROUP
#define ADAPTIVE_GROUP 0
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

#if !ADAPTIVE_GROUP && !LAYOUT_NHWC
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
        for (; iw + VEC <= we; iw += VEC) vsum += LDV(row, iw);
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
    const int obase = ((n * OH + oh) * OW + ow) * C + c0;

inline floatV load_ch_f(__global const dtype_t* x, int p, int nvalid)
{
    if (nvalid == VEC) return LDV(x, p);
    float tmp[VEC];
    for (int j = 0; j < VEC; ++j) tmp[j] = j < nvalid ? LD(x, p + j) : 0.0f;
    return PRIV_LDV(tmp);
}

inline ctypeV load_ch_c(__global const dtype_t* x, int p, int nvalid)
{
    if (nvalid == VEC) return LDCV(x, p);
    ctype tmp[VEC];
    for (int j = 0; j < VEC; ++j) tmp[j] = j < nvalid ? LDC(x, p + j) : (ctype)0;
#if HAL_HALF_COMPUTE && VEC > 1
    return HAL_CAT(vload, VEC)(0, tmp);
#else
    return PRIV_LDV(tmp);
#endif
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void adaptive_pool2d_max(__global const dtype_t* restrict x, __global dtype_t* restrict y,
                         __global long* restrict indices, int N, int C, int IH, int IW, int OH, int OW)
{
    ITEM_PROLOGUE
    ctypeV best = (ctypeV)(-INFINITY);
    intV bidx = (intV)(hs * IW + ws);
    for (int ih = hs; ih < he; ++ih) {
        for (int iw = ws; iw < we; ++iw) {
            const ctypeV v = load_ch_c(x, ((n * IH + ih) * IW + iw) * C + c0, nvalid);
            const cmaskV take = (v > best) | isnan(v);
            best = select(best, v, take);
            bidx = select(bidx, (intV)(ih * IW + iw), CMASK_TO_INT(take));
        }
    }
    const floatV out = CTOFLOATV(best);
    if (nvalid == VEC) {
        STV(out, y, obase);
    } else {
        float tv[VEC];
        PRIV_STV(out, tv);
        for (int j = 0; j < nvalid; ++j) ST(tv[j], y, obase + j);
    }
    if (indices) ST_IDX(bidx, indices, obase, nvalid);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void adaptive_pool2d_avg(__global const dtype_t* restrict x, __global dtype_t* restrict y,
                         __global long* restrict indices, int N, int C, int IH, int IW, int OH, int OW)
{
    ITEM_PROLOGUE
    floatV sum = (floatV)0.0f;
    for (int ih = hs; ih < he; ++ih)
        for (int iw = ws; iw < we; ++iw) sum += load_ch_f(x, ((n * IH + ih) * IW + iw) * C + c0, nvalid);
    const floatV out = sum / (float)((he - hs) * (we - ws));
    if (nvalid == VEC) {
        STV(out, y, obase);
    } else {
        float tv[VEC];
        PRIV_STV(out, tv);
        for (int j = 0; j < nvalid; ++j) ST(tv[j], y, obase + j);
    }
}

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
        if (lid < s) {
            float bv = sv[lid];
            int bi = si[lid];
            const float v = sv[lid + s];
            const int i = si[lid + s];
            MAX_COMBINE(bv, bi, v, i);
            sv[lid] = bv;
            si[lid] = bi;
        }
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
        const int nv = taps / VEC;
        for (int t = lid; t < nv; t += WG) sum += HSUM(LDV(run, t * VEC));
        for (int t = nv * VEC + lid; t < taps; t += WG) sum += LD(run, t);
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
    const int obase = o * C + c0;

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
            if (nvalid == VEC) {
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
            for (int j = 0; j < VEC; ++j) {
                const int a = lid * VEC + j, b = (lid + s * LANES) * VEC + j;
                float bv = sv[a];
                int bi = si[a];
                const float v = sv[b];
                const int i = si[b];
                MAX_COMBINE(bv, bi, v, i);
                sv[a] = bv;
                si[a] = bi;
            }
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
            if (nvalid == VEC) {
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
