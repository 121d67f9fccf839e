/* Sliding-window 2-D pooling: pool2d_max, pool2d_avg.
 *
 * Arguments (all backends): x, y, indices, N, C, IH, IW, OH, OW, KH, KW, SH, SW,
 * PT, PB, PL, PR, DH, DW, DIVISOR, COUNT_INCLUDE_PAD. indices may be NULL.
 *
 * Work mapping (1-D range, work-group WG):
 *   NCHW: one work-item = VEC consecutive outputs along OW of one (n, c, oh) row;
 *         interior taps load VEC inputs at once (vloadN at stride 1, vload2N.even at
 *         stride 2), borders gather per lane.
 *   NCHW with LOCAL_TILE=1: one work-group = a TILE_W x (WG / TILE_W) output tile of one
 *         plane; the group stages the input window it reads in local memory (overlapping
 *         windows are then read once from global memory), one output per work-item.
 *   NCHW with LOCAL_TILE=2 (row bands): one work-group = BAND consecutive output rows of
 *         one plane (a trailing int argument; the launcher sizes it so that the input rows
 *         it needs fit BAND_ELEMS floats of local memory). Those input rows are one
 *         contiguous range: the group copies it with aligned vector loads (float4,
 *         vloada_half4), then each work-item computes outputs from local memory and the
 *         group's stores are consecutive. For GPUs without fast unaligned vector loads
 *         (NVIDIA: vload4 at an element offset issues four scalar loads).
 *   NCHW with LOCAL_TILE=3 (aligned row strips; fixed 2x2 or 3x3 windows of stride 2,
 *         dilation 1, left pad 0 or 1, no indices, IW % VEC == 0, which the launcher
 *         checks): one work-item = STRIP_ROWS consecutive output rows of one plane times
 *         the VEC/2 output columns ow with 2 * ow in [c0, c0 + VEC), c0 = j * VEC. For each
 *         of the 2 * STRIP_ROWS + K - 2 input rows it needs it issues one aligned vector
 *         load (input columns [c0, c0 + VEC)) and the 0-2 scalar halo loads the window
 *         needs, reduces each row horizontally, then the rows vertically; no local memory,
 *         no barrier. The range is j fastest, then strip, then plane, so a work-group's
 *         loads of one input row are consecutive aligned vectors.
 *   NHWC: one work-item = VEC consecutive channels of one output pixel; when C % VEC == 0
 *         every vector is VEC-aligned and loads/stores go through the aligned forms.
 * Max: start at -inf, take a tap when v > best || isnan(v) in row-major tap order, the
 * first valid tap's index if none is taken. Avg: float sum / divisor rule.
 * POOL_NO_IDX=1 (the launcher's, when no indices are asked for): the vector max paths
 * (NCHW direct, NHWC) keep no index vector; indices must then be NULL.
 */

#ifndef POOL_NO_IDX
#define POOL_NO_IDX 0
#endif
#if POOL_NO_IDX
#define IDX_TRACK(stmt)
#else
#define IDX_TRACK(stmt) stmt
#endif

/* MAX_NANV(best, v): the running max of the index-free paths, NaN wins. HAL_PTX_MAXNAN=1
 * (the launcher's, on NVIDIA's OpenCL for sm_80 and later, float arithmetic, never tuned):
 * one PTX max.NaN.f32 per element, where the select of (v > best) | isnan(v) compiles to
 * about six instructions (opencl_ptx.py); the value is the same, up to the sign of a zero
 * max (either zero here, the first one otherwise) and the NaN payload (canonical here), as
 * the CUDA backend's max_nan. */
#ifndef HAL_PTX_MAXNAN
#define HAL_PTX_MAXNAN 0
#endif
#if HAL_PTX_MAXNAN
inline float hal_maxnan1(float a, float b)
{
    float r;
    __asm__("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
inline float2 hal_maxnan2(float2 a, float2 b) { return (float2)(hal_maxnan1(a.x, b.x), hal_maxnan1(a.y, b.y)); }
inline float4 hal_maxnan4(float4 a, float4 b) { return (float4)(hal_maxnan2(a.lo, b.lo), hal_maxnan2(a.hi, b.hi)); }
inline float8 hal_maxnan8(float8 a, float8 b) { return (float8)(hal_maxnan4(a.lo, b.lo), hal_maxnan4(a.hi, b.hi)); }
inline float16 hal_maxnan16(float16 a, float16 b)
{
    return (float16)(hal_maxnan8(a.lo, b.lo), hal_maxnan8(a.hi, b.hi));
}
#define MAX_NANV(best, v) HAL_CAT(hal_maxnan, VEC)(best, v)
/* float16 pairs: max.NaN.f16x2 on raw 32-bit words (two halves each; sm_80+). The max of
 * halves is a half, so the NHWC path below keeps whole vectors packed, with no conversion
 * per element (8 cvt + 8 max per float16 vector of 8 become 4 max). */
#if DTYPE_HALF && HALF_RAW && (VEC == 4 || VEC == 8)
#define HAL_PACKED_HMAX 1
inline uint hal_hmax2(uint a, uint b)
{
    uint r;
    __asm__("max.NaN.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
#if VEC == 4
typedef uint2 hpackV; /* VEC halves as VEC / 2 words */
inline hpackV hal_hmaxv(hpackV a, hpackV b) { return (uint2)(hal_hmax2(a.x, b.x), hal_hmax2(a.y, b.y)); }
#else
typedef uint4 hpackV;
inline hpackV hal_hmaxv(hpackV a, hpackV b)
{
    return (uint4)(hal_hmax2(a.x, b.x), hal_hmax2(a.y, b.y), hal_hmax2(a.z, b.z), hal_hmax2(a.w, b.w));
}
#endif
#define HPACK_NEG_INF ((hpackV)(0xFC00FC00u))
#endif
#elif HAL_HALF_COMPUTE && VEC == 1
/* native half scalars: select(half, half, c) takes a short c, and a scalar compare is an int */
#define MAX_NANV(best, v) select((best), (v), (short)(((v) > (best)) | isnan(v)))
#else
#define MAX_NANV(best, v) select((best), (v), ((v) > (best)) | isnan(v))
#endif

#ifndef LOCAL_TILE
#define LOCAL_TILE 0
#endif
#ifndef POOL_INTERIOR
#define POOL_INTERIOR 0 /* the schema's INTERIOR: NCHW mask-free path for interior windows */
#endif

/* VEC-wide access at a VEC-aligned element offset of an aligned buffer (OpenCL buffers are
 * aligned, so offsets that are multiples of VEC are too): one wide load or store, where
 * vloadN / vload_halfN at an element offset may compile to VEC scalar ones (NVIDIA) */
/* HALF_RAW=1: float16 vectors through hal_ldrawN / hal_strawN (hal_prelude.h) */

#if VEC == 1
#define ALDV(p, i) LD(p, i)
#define ASTV(v, p, i) ST(v, p, i)
#elif DTYPE_HALF && HALF_RAW
#define ALDV(p, i) HAL_CAT(hal_ldraw, VEC)((p) + (i))
#define ASTV(v, p, i) HAL_CAT(hal_straw, VEC)(ACTV(v), (p) + (i))
#elif DTYPE_HALF
#define ALDV(p, i) HAL_CAT(vloada_half, VEC)(0, (p) + (i))
#define ASTV(v, p, i) HAL_CAT(vstorea_half, VEC)(ACTV(v), 0, (p) + (i))
#elif DTYPE_BF16
#define ALDV(p, i) BF_ALDV(p, i)
#define ASTV(v, p, i) BF_ASTV(v, p, i)
#else
#define ALDV(p, i) (*(__global const floatV*)((p) + (i)))
#define ASTV(v, p, i) (*(__global floatV*)((p) + (i)) = ACTV(v))
#endif
#if HAL_HALF_COMPUTE && VEC > 1
#define ALDCV(p, i) (*(__global const ctypeV*)((p) + (i)))
#elif HAL_HALF_COMPUTE
#define ALDCV(p, i) ((p)[(i)])
#else
#define ALDCV(p, i) ALDV(p, i)
#endif

/* POOL_FIXED=1: the window (POOL_KH, POOL_KW, POOL_SH, POOL_SW, POOL_DH, POOL_DW) is fixed at
 * build time, so the tap loops unroll and the index arithmetic folds; the runtime
 * arguments of the same names are then ignored. The launcher builds common windows so. */
#ifndef POOL_FIXED
#define POOL_FIXED 0
#endif
#if POOL_FIXED
#define WKH POOL_KH
#define WKW POOL_KW
#define WSH POOL_SH
#define WSW POOL_SW
#define WDH POOL_DH
#define WDW POOL_DW
#else
#define WKH KH
#define WKW KW
#define WSH SH
#define WSW SW
#define WDH DH
#define WDW DW
#endif

#define TILE_W 16
#define TILE_H (WG / TILE_W)
/* float elements of the staged input window; the backend's local-memory constraint
 * counts WG * 16 * 4 bytes */
#define TILE_ELEMS (WG * 16)

/* One window of the local-memory variants (LOCAL_TILE 1 and 2), the taps read by
 * READ(ih, iw) from the window at (h0, w0). WINDOW_MAX: the largest value, the first one
 * on ties, a NaN always wins, and its per-plane index. WINDOW_AVG: the sum of the valid
 * taps and the divisor (DIVISOR, or the taps inside the padded extent, or the valid ones). */
/* the window's taps inside the input, row-major: the body between these sees ih and iw */
#define TAPS_INSIDE_BEGIN                                                                  \
    for (int kh = 0; kh < WKH; ++kh) {                                                     \
        const int ih = h0 + kh * WDH;                                                      \
        if (ih < 0 || ih >= IH) continue;                                                  \
        for (int kw = 0; kw < WKW; ++kw) {                                                 \
            const int iw = w0 + kw * WDW;                                                  \
            if (iw < 0 || iw >= IW) continue;
#define TAPS_INSIDE_END                                                                    \
        }                                                                                  \
    }
#define WINDOW_MAX(READ, best, bidx)                                                       \
    {                                                                                      \
        int unseen = 1;                                                                    \
        TAPS_INSIDE_BEGIN                                                                  \
                const float v = READ(ih, iw);                                              \
                if (unseen || v > best || isnan(v)) {                                      \
                    best = v;                                                              \
                    bidx = ih * IW + iw;                                                   \
                    unseen = 0;                                                            \
                }                                                                          \
        TAPS_INSIDE_END                                                                    \
    }
#define WINDOW_AVG(READ, sum, count)                                                       \
    {                                                                                      \
        int rows_in = 0, rows_pad = 0, cols_in = 0, cols_pad = 0;                          \
        for (int kw = 0; kw < WKW; ++kw) {                                                 \
            const int iw = w0 + kw * WDW;                                                  \
            cols_in += (iw >= 0 && iw < IW);                                               \
            cols_pad += (iw >= -PL && iw < IW + PR);                                       \
        }                                                                                  \
        for (int kh = 0; kh < WKH; ++kh) {                                                 \
            const int ih = h0 + kh * WDH;                                                  \
            rows_pad += (ih >= -PT && ih < IH + PB);                                       \
            if (ih < 0 || ih >= IH) continue;                                              \
            ++rows_in;                                                                     \
            for (int kw = 0; kw < WKW; ++kw) {                                             \
                const int iw = w0 + kw * WDW;                                              \
                if (iw >= 0 && iw < IW) sum += READ(ih, iw);                               \
            }                                                                              \
        }                                                                                  \
        count = DIVISOR > 0 ? DIVISOR : (COUNT_INCLUDE_PAD ? rows_pad * cols_pad : rows_in * cols_in); \
    }

#if !LAYOUT_NHWC && !LOCAL_TILE
/* ------------------------------------------------------------------------------------
 * NCHW, VEC outputs per work-item
 * ---------------------------------------------------------------------------------- */

/* VEC taps of one input row for lanes ow0 + j: iw = iwb + j * SW (masked lanes -> 0). */
inline ctypeV taps_c(__global const dtype_t* row, int iwb, int SW, int IW, int nvalid)
{
    if (nvalid == VEC && iwb >= 0 && iwb + VEC * WSW - 1 < IW) {
        if (WSW == 1) return LDCV(row, iwb);
        if (WSW == 2) return LDC2V_EVEN(row, iwb);
    }
    ctype tmp[VEC];
    for (int j = 0; j < VEC; ++j) {
        const int iw = iwb + j * WSW;
        tmp[j] = (j < nvalid && iw >= 0 && iw < IW) ? LDC(row, iw) : (ctype)0;
    }
#if HAL_HALF_COMPUTE && VEC > 1
    return HAL_CAT(vload, VEC)(0, tmp);
#else
    return PRIV_LDV(tmp);
#endif
}

inline floatV taps_f(__global const dtype_t* row, int iwb, int SW, int IW, int nvalid)
{
    if (nvalid == VEC && iwb >= 0 && iwb + VEC * WSW - 1 < IW) {
        if (WSW == 1) return LDV(row, iwb);
        if (WSW == 2) return LD2V_EVEN(row, iwb);
    }
    float tmp[VEC];
    for (int j = 0; j < VEC; ++j) {
        const int iw = iwb + j * WSW;
        tmp[j] = (j < nvalid && iw >= 0 && iw < IW) ? LD(row, iw) : 0.0f;
    }
    return PRIV_LDV(tmp);
}

/* Every tap of every lane inside the input, and the lanes' taps loadable at once (stride
 * 1 or 2): the common case, which then needs no masks, no bounds and no tap counting. */
#define INTERIOR                                                                            \
    (POOL_INTERIOR && nvalid == VEC && WSW <= 2 && h0 >= 0 && h0 + (WKH - 1) * WDH < IH && w0 >= 0 &&            \
     w0 + (WKW - 1) * WDW + VEC * WSW - 1 < IW)

inline void store_out(__global dtype_t* y, int base, floatV v, int nvalid)
{
    if (nvalid == VEC) {
        STV(v, y, base);
    } else {
        float tmp[VEC];
        PRIV_STV(v, tmp);
        for (int j = 0; j < nvalid; ++j) ST(tmp[j], y, base + j);
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_max(__global const dtype_t* restrict x, __global dtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD)
{
    const int OWV = CEIL_DIV(OW, VEC);
    const int gid = get_global_id(0);
    if (gid >= N * C * OH * OWV) return;
    const int owv = gid % OWV;
    const int t = gid / OWV;
    const int oh = t % OH;
    const int nc = t / OH;
    const int ow0 = owv * VEC;
    const int nvalid = min(VEC, OW - ow0);
    const int h0 = oh * WSH - PT;
    const int w0 = ow0 * WSW - PL;
    __global const dtype_t* xp = x + nc * IH * IW;
    const intV lane = LANE_IDS;
    const int base = (nc * OH + oh) * OW + ow0;
    if (INTERIOR) {
        ctypeV best = (ctypeV)(-INFINITY);
        IDX_TRACK(intV bidx = h0 * IW + w0 + lane * WSW;) /* the first tap, kept when every tap is -inf */
#if POOL_NO_IDX
#define MAX_STEP(best, bidx, v, idx) best = MAX_NANV(best, v)
#else
#define MAX_STEP(best, bidx, v, idx)                                                        \
    {                                                                                       \
        const cmaskV take_ = ((v) > (best)) | isnan(v);                                     \
        best = select(best, v, take_);                                                      \
        bidx = select(bidx, (idx), CMASK_TO_INT(take_));                                    \
    }
#endif
        /* the stride test stays outside the loops: a select between both loads would issue both */
#define MAX_TAPS(LOAD)                                                                      \
        for (int kh = 0; kh < WKH; ++kh) {                                                   \
            const int ih = h0 + kh * WDH;                                                    \
            __global const dtype_t* row = xp + ih * IW;                                     \
            for (int kw = 0; kw < WKW; ++kw) {                                               \
                const int iwb = w0 + kw * WDW;                                               \
                const ctypeV v = LOAD(row, iwb);                                            \
                MAX_STEP(best, bidx, v, ih * IW + iwb + lane * WSW);                         \
            }                                                                               \
        }
        if (WSW == 1) {
            MAX_TAPS(LDCV)
        } else {
            MAX_TAPS(LDC2V_EVEN)
        }
        STV(CTOFLOATV(best), y, base);
        IDX_TRACK(if (indices) ST_IDX(bidx, indices, base, VEC);)
        return;
    }
    const intV lane_ok = lane < nvalid;

    ctypeV best = (ctypeV)(-INFINITY);
    IDX_TRACK(intV bidx = (intV)0;)
    intV unseen = (intV)VTRUE; /* no valid tap taken yet */
    for (int kh = 0; kh < WKH; ++kh) {
        const int ih = h0 + kh * WDH;
        if (ih < 0 || ih >= IH) continue;
        __global const dtype_t* row = xp + ih * IW;
        for (int kw = 0; kw < WKW; ++kw) {
            const int iwb = w0 + kw * WDW;
            const intV iw = iwb + lane * WSW;
            const intV ok = lane_ok & (iw >= 0) & (iw < IW);
            const ctypeV v = taps_c(row, iwb, WSW, IW, nvalid);
            const intV take = ok & (unseen | CMASK_TO_INT((v > best) | isnan(v)));
            best = select(best, v, TO_CMASK(take));
            IDX_TRACK(bidx = select(bidx, ih * IW + iw, take);)
            unseen &= ~ok;
        }
    }
    store_out(y, base, CTOFLOATV(best), nvalid);
    IDX_TRACK(if (indices) ST_IDX(bidx, indices, base, nvalid);)
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_avg(__global const dtype_t* restrict x, __global dtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD)
{
    const int OWV = CEIL_DIV(OW, VEC);
    const int gid = get_global_id(0);
    if (gid >= N * C * OH * OWV) return;
    const int owv = gid % OWV;
    const int t = gid / OWV;
    const int oh = t % OH;
    const int nc = t / OH;
    const int ow0 = owv * VEC;
    const int nvalid = min(VEC, OW - ow0);
    const int h0 = oh * WSH - PT;
    const int w0 = ow0 * WSW - PL;
    __global const dtype_t* xp = x + nc * IH * IW;
    const intV lane = LANE_IDS;
    if (INTERIOR) {
        floatV sum = (floatV)0.0f;
#define SUM_TAPS(LOAD)                                                                      \
        for (int kh = 0; kh < WKH; ++kh) {                                                   \
            __global const dtype_t* row = xp + (h0 + kh * WDH) * IW;                         \
            for (int kw = 0; kw < WKW; ++kw) sum += LOAD(row, w0 + kw * WDW);                 \
        }
        if (WSW == 1) {
            SUM_TAPS(LDV)
        } else {
            SUM_TAPS(LD2V_EVEN)
        }
        /* no padding inside the window: both counting rules give KH * KW */
        STV(sum / (float)(DIVISOR > 0 ? DIVISOR : WKH * WKW), y, (nc * OH + oh) * OW + ow0);
        return;
    }

    floatV sum = (floatV)0.0f;
    int rows_in = 0, rows_pad = 0;
    for (int kh = 0; kh < WKH; ++kh) {
        const int ih = h0 + kh * WDH;
        rows_pad += (ih >= -PT && ih < IH + PB);
        if (ih < 0 || ih >= IH) continue;
        ++rows_in;
        __global const dtype_t* row = xp + ih * IW;
        for (int kw = 0; kw < WKW; ++kw) sum += taps_f(row, w0 + kw * WDW, WSW, IW, nvalid);
    }
    floatV result;
    if (DIVISOR > 0) {
        result = sum / (float)DIVISOR;
    } else {
        intV cols_in = (intV)0, cols_pad = (intV)0;
        for (int kw = 0; kw < WKW; ++kw) {
            const intV iw = w0 + kw * WDW + lane * WSW;
            cols_in += MASK01((iw >= 0) & (iw < IW));
            cols_pad += MASK01((iw >= -PL) & (iw < IW + PR));
        }
        const intV count = COUNT_INCLUDE_PAD ? rows_pad * cols_pad : rows_in * cols_in;
        /* lanes past OW may count 0 taps; they are never stored */
        result = sum / CONVERT_FLOATV(max(count, (intV)1));
    }
    store_out(y, (nc * OH + oh) * OW + ow0, result, nvalid);
}

#elif !LAYOUT_NHWC && LOCAL_TILE == 1
/* ------------------------------------------------------------------------------------
 * NCHW, local-memory tile: one output per work-item
 * ---------------------------------------------------------------------------------- */

#define TILE_PROLOGUE                                                                       \
    const int TX = CEIL_DIV(OW, TILE_W);                                                   \
    const int TY = CEIL_DIV(OH, TILE_H);                                                   \
    const int grp = get_group_id(0);                                                       \
    const int tx = grp % TX;                                                               \
    const int ty = (grp / TX) % TY;                                                        \
    const int nc = grp / (TX * TY);                                                        \
    const int lid = get_local_id(0);                                                       \
    const int oh = ty * TILE_H + lid / TILE_W;                                             \
    const int ow = tx * TILE_W + lid % TILE_W;                                             \
    const int ih0 = ty * TILE_H * WSH - PT;                                                 \
    const int iw0 = tx * TILE_W * WSW - PL;                                                 \
    const int EH = (TILE_H - 1) * WSH + (WKH - 1) * WDH + 1;                                  \
    const int EW = (TILE_W - 1) * WSW + (WKW - 1) * WDW + 1;                                  \
    __global const dtype_t* xp = x + nc * IH * IW;                                         \
    __local float tile[TILE_ELEMS];                                                        \
    /* the same for the whole group: the barrier below is in uniform control flow */       \
    const int staged = (nc < N * C) && EH * EW <= TILE_ELEMS;                              \
    if (staged) {                                                                          \
        for (int i = lid; i < EH * EW; i += WG) {                                          \
            const int ih = ih0 + i / EW;                                                   \
            const int iw = iw0 + i % EW;                                                   \
            tile[i] = (ih >= 0 && ih < IH && iw >= 0 && iw < IW) ? LD(xp, ih * IW + iw) : 0.0f; \
        }                                                                                  \
        barrier(CLK_LOCAL_MEM_FENCE);                                                      \
    }                                                                                      \
    if (nc >= N * C || oh >= OH || ow >= OW) return;                                       \
    const int h0 = oh * WSH - PT;                                                           \
    const int w0 = ow * WSW - PL;

#define TAP(ih, iw) (staged ? tile[((ih) - ih0) * EW + ((iw) - iw0)] : LD(xp, (ih) * IW + (iw)))

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_max(__global const dtype_t* restrict x, __global dtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD)
{
    TILE_PROLOGUE
    float best = -INFINITY;
    long bidx = 0;
    WINDOW_MAX(TAP, best, bidx)
    const int o = (nc * OH + oh) * OW + ow;
    ST(best, y, o);
    if (indices) indices[o] = bidx;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_avg(__global const dtype_t* restrict x, __global dtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD)
{
    TILE_PROLOGUE
    float sum = 0.0f;
    int count;
    WINDOW_AVG(TAP, sum, count)
    ST(sum / (float)count, y, (nc * OH + oh) * OW + ow);
}

#elif !LAYOUT_NHWC && LOCAL_TILE == 2
/* ------------------------------------------------------------------------------------
 * NCHW, row bands staged in local memory: BAND output rows of one plane per work-group
 * ---------------------------------------------------------------------------------- */

#ifndef BAND_ELEMS
#define BAND_ELEMS 4096
#endif

/* Stage elements [g0, g0 + len) of x into band[0, len) as floats. The buffer base is
 * aligned (OpenCL buffers are), so after a head of at most 3 elements the loads are
 * aligned 4-wide vectors (16 bytes of float, 8 of half or bfloat16). */
inline void stage_range(__global const dtype_t* restrict x, int g0, int len, __local float* band)
{
    const int lid = get_local_id(0);
#if DTYPE_HALF
#define BAND_VW 4 /* vloada_half4: NVIDIA runs vloada_half8 slowly (measured in batch_norm.cl) */
#else
#define BAND_VW 4
#endif
    const int head = min(len, (BAND_VW - (g0 & (BAND_VW - 1))) & (BAND_VW - 1));
    const int nvec = (len - head) / BAND_VW;
    const int tail = head + nvec * BAND_VW;
    if (lid < head) band[lid] = LD(x, g0 + lid);
    __global const dtype_t* xa = x + g0 + head;
    for (int v = lid; v < nvec; v += WG) {
#if DTYPE_HALF
        vstore4(vloada_half4(v, xa), 0, band + head + v * 4);
#elif DTYPE_BF16
        vstore4(hal_bf2f4(((__global const ushort4*)xa)[v]), 0, band + head + v * 4);
#else
        vstore4(((__global const float4*)xa)[v], 0, band + head + v * 4);
#endif
    }
    for (int i = tail + lid; i < len; i += WG) band[i] = LD(x, g0 + i);
}

#define BAND_PROLOGUE                                                                      \
    const int bands = CEIL_DIV(OH, BAND);                                                  \
    const int grp = get_group_id(0);                                                       \
    const int nc = grp / bands;                                                            \
    const int oh0 = (grp % bands) * BAND;                                                  \
    const int nout = min(BAND, OH - oh0) * OW;                                             \
    /* input rows the band's windows touch, clipped to the plane */                        \
    const int ih_lo = max(0, oh0 * WSH - PT);                                               \
    const int ih_hi = min(IH, (oh0 + nout / OW - 1) * WSH - PT + (WKH - 1) * WDH + 1);        \
    __local float band[BAND_ELEMS];                                                        \
    /* group-uniform: the barrier below is in uniform control flow */                      \
    if (nc >= N * C) return;                                                               \
    if (ih_hi > ih_lo) stage_range(x, nc * IH * IW + ih_lo * IW, (ih_hi - ih_lo) * IW, band); \
    barrier(CLK_LOCAL_MEM_FENCE);                                                          \
    const int obase = (nc * OH + oh0) * OW;

#define BAND_TAP(ih, iw) band[((ih) - ih_lo) * IW + (iw)]

/* Opens the loop over the band's outputs o (row r, column ow; window origin h0, w0); the
 * kernel closes it. Outputs step by WG without a division per output. The trip count is
 * the same for the whole group, the tail masked inside: PoCL (3.x) miscompiled a
 * per-work-item bound here once the window was constant. */
#define BAND_OUTPUTS_BEGIN                                                                 \
    const int step_r = WG / OW, step_w = WG % OW;                                          \
    int r = get_local_id(0) / OW, ow = get_local_id(0) % OW;                               \
    for (int o0 = 0; o0 < nout; o0 += WG, r += step_r, ow += step_w) {                     \
        if (ow >= OW) {                                                                    \
            ow -= OW;                                                                      \
            ++r;                                                                           \
        }                                                                                  \
        const int o = o0 + get_local_id(0);                                                \
        if (o >= nout) continue;                                                           \
        const int h0 = (oh0 + r) * WSH - PT;                                               \
        const int w0 = ow * WSW - PL;

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_max(__global const dtype_t* restrict x, __global dtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD, int BAND)
{
    BAND_PROLOGUE
    BAND_OUTPUTS_BEGIN
        float best = -INFINITY;
        int bidx = 0;
        WINDOW_MAX(BAND_TAP, best, bidx)
        ST(best, y, obase + o);
        if (indices) indices[obase + o] = bidx;
    } /* BAND_OUTPUTS_BEGIN */
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_avg(__global const dtype_t* restrict x, __global dtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD, int BAND)
{
    BAND_PROLOGUE
    BAND_OUTPUTS_BEGIN
        float sum = 0.0f;
        int count;
        WINDOW_AVG(BAND_TAP, sum, count)
        ST(sum / (float)count, y, obase + o);
    } /* BAND_OUTPUTS_BEGIN */
}

#elif !LAYOUT_NHWC && LOCAL_TILE == 3
/* ------------------------------------------------------------------------------------
 * NCHW, aligned row strips: STRIP_ROWS output rows x VEC/2 output columns per work-item
 * (fixed KxK windows, K 2 or 3, stride 2, dilation 1, no indices, IW % VEC == 0)
 * ---------------------------------------------------------------------------------- */

#if !POOL_FIXED || VEC == 1 || POOL_SH != 2 || POOL_SW != 2 || POOL_KH != POOL_KW || (POOL_KW != 2 && POOL_KW != 3) || POOL_DH != 1 || POOL_DW != 1
#error "pool2d.cl: LOCAL_TILE=3 is built for a fixed 2x2 or 3x3 window, stride 2, dilation 1, VEC 4 or 8"
#endif
#ifndef STRIP_ROWS
#define STRIP_ROWS 4
#endif
#ifndef POOL_PL
#define POOL_PL 0 /* the left pad (0 or 1), fixed at build time: it picks the taps below */
#endif
#define SK POOL_KW
/* input rows of one strip: 2 per output row, plus the window's overhang */
#define STRIP_IN (2 * STRIP_ROWS + SK - 2)
/* the scalar halo columns next to the vector: the left one (c0 - 1) when each window starts
 * one column left of its even column (PL = 1), the right one (c0 + VEC) when the last
 * lane's window reaches past the vector (K - 2 - PL > 0: a 3-wide window with PL = 0) */
#define HALO_L (POOL_PL > 0)
#define HALO_R (SK - 2 - POOL_PL > 0)

/* VEC/2 outputs per row: floatH lanes h = outputs ow0 + h, whose windows start at input
 * column c0 + 2h - PL. EVEN/ODD are the vector's even/odd columns; PREV_ODD shifts the
 * odd ones right by one lane with the left halo in lane 0, NEXT_EVEN shifts the even
 * ones left with the right halo in the last lane. */
#if VEC == 4
#define HV 2
typedef float2 floatH;
typedef int2 intH;
#define HLANES ((int2)(0, 1))
#define PREV_ODD(v, l) ((float2)((l), (v).s1))
#define NEXT_EVEN(v, r) ((float2)((v).s2, (r)))
#else
#define HV 4
typedef float4 floatH;
typedef int4 intH;
#define HLANES ((int4)(0, 1, 2, 3))
#define PREV_ODD(v, l) ((float4)((l), (v).s135))
#define NEXT_EVEN(v, r) ((float4)((v).s246, (r)))
#endif
/* the window's taps left to right, per (K, PL) */
#if SK == 3 && POOL_PL == 1
#define STRIP_TAPS(v, l, r, T0, T1, T2) T0 = PREV_ODD(v, l); T1 = (v).even; T2 = (v).odd;
#elif SK == 3
#define STRIP_TAPS(v, l, r, T0, T1, T2) T0 = (v).even; T1 = (v).odd; T2 = NEXT_EVEN(v, r);
#elif POOL_PL == 1
#define STRIP_TAPS(v, l, r, T0, T1, T2) T0 = PREV_ODD(v, l); T1 = (v).even;
#else
#define STRIP_TAPS(v, l, r, T0, T1, T2) T0 = (v).even; T1 = (v).odd;
#endif

#if FUSE_RELU
#define ACTH(v) select((v), (floatH)0.0f, (v) < (floatH)0.0f)
#else
#define ACTH(v) (v)
#endif

/* max of the taps so far (best) and a later one: the later one wins only when larger or
 * NaN. This "first maximum, NaN wins" merge is associative, so reducing each row and then
 * the rows gives the row-major scan's value (indices are not asked for on this path). */
inline floatH strip_max(floatH best, floatH v)
{
#if HAL_PTX_MAXNAN
    return HAL_CAT(hal_maxnan, HV)(best, v);
#else
    return select(best, v, (v > best) | isnan(v));
#endif
}

#define STRIP_PROLOGUE                                                                     \
    const int JV = CEIL_DIV(2 * OW, VEC); /* vector columns per row (ceil_mode: up to IW) */ \
    const int S = CEIL_DIV(OH, STRIP_ROWS);                                                \
    const int gid = get_global_id(0);                                                      \
    if (gid >= N * C * S * JV) return;                                                     \
    /* j fastest: a group's loads of one input row are consecutive vectors */              \
    const int j = gid % JV;                                                                \
    const int t = gid / JV;                                                                \
    const int oh0 = (t % S) * STRIP_ROWS;                                                  \
    const int nc = t / S;                                                                  \
    const int c0 = j * VEC;                                                                \
    const int ow0 = j * HV;                                                                \
    const int h0 = oh0 * 2 - PT;                                                           \
    /* rows the stored outputs read: a partial last strip loads no rows past them */       \
    const int ih_end = min(IH, (min(oh0 + STRIP_ROWS, OH) - 1) * 2 - PT + SK);             \
    /* IW % VEC == 0: the vector is wholly inside the row or (ceil_mode, c0 == IW) outside */ \
    const int vin = c0 < IW;                                                               \
    const int lin = HALO_L && c0 > 0;                                                      \
    const int rin = HALO_R && c0 + VEC < IW;                                               \
    __global const dtype_t* xp = x + nc * IH * IW;                                         \
    const int obase = nc * OH * OW + ow0;                                                  \
    const int nv = OW - ow0; /* outputs of this column that exist (>= 1) */                \
    /* whole aligned vector stores: every row then starts at a multiple of HV */           \
    const int vstore_ok = nv >= HV && OW % HV == 0;

/* One horizontal reduction per input row of the strip: hrow[i] = the reduced taps of input
 * row h0 + i for each lane (NEUTRAL for rows, vectors and halo columns outside the input).
 * Every row's loads come from a valid address (row and columns clamped into the input) and
 * are issued unconditionally, the values outside replaced by NEUTRAL afterwards: with a
 * branch around each row's loads NVIDIA's compiler kept the rows one memory round trip
 * after another (SASS, session 10); this way all of them are in flight at once. */
#define STRIP_ROW_IN(ih) ((ih) >= 0 && (ih) < ih_end)
#define STRIP_ROW(ih) (xp + clamp((ih), 0, IH - 1) * IW)
#define STRIP_VCOL (vin ? c0 : c0 - VEC) /* c0 == IW (ceil_mode): any valid vector */
#define STRIP_LCOL max(c0 - 1, 0)
#define STRIP_RCOL min(c0 + VEC, IW - 1)
#define STRIP_ROWS_LOAD(NEUTRAL, REDUCE)                                                   \
    floatH hrow[STRIP_IN];                                                                 \
    _Pragma("unroll") for (int i = 0; i < STRIP_IN; ++i) {                                 \
        const int ih = h0 + i;                                                             \
        const int row_ok = STRIP_ROW_IN(ih);                                                 \
        __global const dtype_t* row = STRIP_ROW(ih);                                       \
        /* one aligned vector (never vloadN at an element offset: scalar on NVIDIA) */     \
        const floatV vraw = ALDV(row, STRIP_VCOL);                                         \
        const float lraw = HALO_L ? LD(row, STRIP_LCOL) : (NEUTRAL);                       \
        const float rraw = HALO_R ? LD(row, STRIP_RCOL) : (NEUTRAL);                       \
        const floatV v = row_ok && vin ? vraw : (floatV)(NEUTRAL);                           \
        const float l = row_ok && lin ? lraw : (NEUTRAL);                                    \
        const float r = row_ok && rin ? rraw : (NEUTRAL);                                    \
        floatH T0, T1, T2;                                                                 \
        STRIP_TAPS(v, l, r, T0, T1, T2)                                                    \
        hrow[i] = REDUCE;                                                                  \
    }

inline void strip_store(__global dtype_t* y, int o, int nv, int vstore_ok, floatH v)
{
    if (vstore_ok) {
#if DTYPE_HALF && HALF_RAW
        HAL_CAT(hal_straw, HV)(ACTH(v), y + o);
#elif DTYPE_HALF
        HAL_CAT(vstorea_half, HV)(ACTH(v), 0, y + o);
#elif DTYPE_BF16
        *(__global HAL_CAT(ushort, HV)*)(y + o) = HAL_CAT(hal_f2bf, HV)(ACTH(v));
#else
        *(__global floatH*)(y + o) = ACTH(v);
#endif
    } else {
        float t[HV];
        HAL_CAT(vstore, HV)(v, 0, t);
        for (int h = 0; h < min(nv, HV); ++h) ST(t[h], y, o + h);
    }
}

#if HAL_PACKED_HMAX
/* float16 max on packed halves (HAL_PACKED_HMAX, above): a row's vector stays VEC/2 raw words;
 * PTX prmt gathers the lanes' taps (even, odd, the odd ones shifted right with the left halo,
 * the even ones shifted left with the right halo) as HV/2 words of two halves, and
 * max.NaN.f16x2 reduces them: no conversion until a partial or ReLU store */
inline uint hal_prmt(uint a, uint b, uint sel)
{
    uint r;
    __asm__("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}
#define HALF_NEG_INF 0xFC00u
/* prmt selectors: (low halves of a, b), (high halves), (low of a, high of b) */
#define PRMT_LO 0x5410u
#define PRMT_HI 0x7632u
#define PRMT_LOHI 0x7610u
#if VEC == 4
typedef uint hpackH; /* HV = 2 halves */
#define hmaxH hal_hmax2
#define HPACKH_NEG_INF 0xFC00FC00u
inline hpackH strip_row_packed(hpackV w, uint l, uint r)
{
    const uint E = hal_prmt(w.x, w.y, PRMT_LO), O = hal_prmt(w.x, w.y, PRMT_HI);
#if SK == 3 && POOL_PL == 1
    return hmaxH(hmaxH(hal_prmt(l, w.x, PRMT_LOHI), E), O);
#elif SK == 3
    return hmaxH(hmaxH(E, O), hal_prmt(w.y, r, PRMT_LO));
#elif POOL_PL == 1
    return hmaxH(hal_prmt(l, w.x, PRMT_LOHI), E);
#else
    return hmaxH(E, O);
#endif
}
#else
typedef uint2 hpackH; /* HV = 4 halves */
inline hpackH hmaxH(hpackH a, hpackH b) { return (uint2)(hal_hmax2(a.x, b.x), hal_hmax2(a.y, b.y)); }
#define HPACKH_NEG_INF ((uint2)(0xFC00FC00u))
inline hpackH strip_row_packed(hpackV w, uint l, uint r)
{
    const uint2 E = (uint2)(hal_prmt(w.x, w.y, PRMT_LO), hal_prmt(w.z, w.w, PRMT_LO));
    const uint2 O = (uint2)(hal_prmt(w.x, w.y, PRMT_HI), hal_prmt(w.z, w.w, PRMT_HI));
#if SK == 3 && POOL_PL == 1
    return hmaxH(hmaxH((uint2)(hal_prmt(l, w.x, PRMT_LOHI), hal_prmt(w.y, w.z, PRMT_HI)), E), O);
#elif SK == 3
    return hmaxH(hmaxH(E, O), (uint2)(hal_prmt(w.y, w.z, PRMT_LO), hal_prmt(w.w, r, PRMT_LO)));
#elif POOL_PL == 1
    return hmaxH((uint2)(hal_prmt(l, w.x, PRMT_LOHI), hal_prmt(w.y, w.z, PRMT_HI)), E);
#else
    return hmaxH(E, O);
#endif
}
#endif

inline void strip_store_packed(__global dtype_t* y, int o, int nv, int vstore_ok, hpackH v)
{
#if !FUSE_RELU
    if (vstore_ok) {
        *(__global hpackH*)(y + o) = v; /* the maxima's own bits */
        return;
    }
#endif
    strip_store(y, o, nv, vstore_ok, HAL_CAT(vload_half, HV)(0, (const __private half*)&v));
}
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_max(__global const dtype_t* restrict x, __global dtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD)
{
    STRIP_PROLOGUE
#if HAL_PACKED_HMAX
    hpackH hrow[STRIP_IN];
#pragma unroll
    for (int i = 0; i < STRIP_IN; ++i) { /* loads as in STRIP_ROWS_LOAD: clamped, all in flight */
        const int ih = h0 + i;
        const int row_ok = STRIP_ROW_IN(ih);
        __global const ushort* row = (__global const ushort*)STRIP_ROW(ih);
        const hpackV wraw = *(__global const hpackV*)(row + STRIP_VCOL);
        const uint lraw = HALO_L ? (uint)row[STRIP_LCOL] : HALF_NEG_INF;
        const uint rraw = HALO_R ? (uint)row[STRIP_RCOL] : HALF_NEG_INF;
        hrow[i] = strip_row_packed(row_ok && vin ? wraw : HPACK_NEG_INF, row_ok && lin ? lraw : HALF_NEG_INF,
                                   row_ok && rin ? rraw : HALF_NEG_INF);
    }
#define STRIP_VMAX hmaxH
#define STRIP_VSTORE strip_store_packed
    typedef hpackH strip_t;
#else
#if SK == 3
    STRIP_ROWS_LOAD(-INFINITY, strip_max(strip_max(T0, T1), T2))
#else
    STRIP_ROWS_LOAD(-INFINITY, strip_max(T0, T1))
#endif
#define STRIP_VMAX strip_max
#define STRIP_VSTORE strip_store
    typedef floatH strip_t;
#endif
    /* then the rows vertically: output row r takes input rows 2r .. 2r + SK - 1 */
#pragma unroll
    for (int r = 0; r < STRIP_ROWS; ++r) {
        if (oh0 + r >= OH) break;
        strip_t m = hrow[2 * r];
        for (int kh = 1; kh < SK; ++kh) m = STRIP_VMAX(m, hrow[2 * r + kh]);
        STRIP_VSTORE(y, obase + (oh0 + r) * OW, nv, vstore_ok, m);
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_avg(__global const dtype_t* restrict x, __global dtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD)
{
    STRIP_PROLOGUE
#if SK == 3
    STRIP_ROWS_LOAD(0.0f, T0 + T1 + T2)
#else
    STRIP_ROWS_LOAD(0.0f, T0 + T1)
#endif
    /* the divisor rule's column counts, per lane (the same for every row of the strip) */
    intH cols_in = (intH)0, cols_pad = (intH)0;
    for (int kw = 0; kw < SK; ++kw) {
        const intH iw = c0 + 2 * HLANES - POOL_PL + kw;
        cols_in -= (iw >= 0) & (iw < IW); /* a true vector compare is -1 */
        cols_pad -= (iw >= -POOL_PL) & (iw < IW + PR);
    }
#pragma unroll
    for (int r = 0; r < STRIP_ROWS; ++r) {
        if (oh0 + r >= OH) break;
        floatH sum = hrow[2 * r];
        int rows_in = 0, rows_pad = 0;
        for (int kh = 0; kh < SK; ++kh) {
            const int ih = h0 + 2 * r + kh;
            if (kh) sum += hrow[2 * r + kh];
            rows_in += (ih >= 0 && ih < IH);
            rows_pad += (ih >= -PT && ih < IH + PB);
        }
        floatH out;
        if (DIVISOR > 0) {
            out = sum / (float)DIVISOR;
        } else {
            const intH count = COUNT_INCLUDE_PAD ? rows_pad * cols_pad : rows_in * cols_in;
            /* lanes past OW may count 0 taps; they are never stored */
            out = sum / HAL_CAT(convert_float, HV)(max(count, (intH)1));
        }
        strip_store(y, obase + (oh0 + r) * OW, nv, vstore_ok, out);
    }
}

#else
/* ------------------------------------------------------------------------------------
 * NHWC: VEC channels per work-item
 * ---------------------------------------------------------------------------------- */

#define NHWC_PROLOGUE                                                                      \
    const int CV = CEIL_DIV(C, VEC);                                                       \
    const int gid = get_global_id(0);                                                      \
    if (gid >= N * OH * OW * CV) return;                                                   \
    const int cv = gid % CV;                                                               \
    int t = gid / CV;                                                                      \
    const int ow = t % OW;                                                                 \
    t /= OW;                                                                               \
    const int oh = t % OH;                                                                 \
    const int n = t / OH;                                                                  \
    const int c0 = cv * VEC;                                                               \
    const int nvalid = min(VEC, C - c0);                                                   \
    const int h0 = oh * WSH - PT;                                                           \
    const int w0 = ow * WSW - PL;                                                           \
    const int obase = ((n * OH + oh) * OW + ow) * C + c0;                                  \
    const int aligned = C % VEC == 0; /* every full vector then starts VEC-aligned */

/* A whole aligned vector's taps, row-major, each loaded from a valid address (clamped into
 * the input) and issued unconditionally; the body sees p (the clamped tap's element offset)
 * and ok (the tap is inside the input) and discards what is outside by a select. A branch
 * around each tap's load kept the taps one memory round trip after another on NVIDIA
 * (SASS, session 10); this way a fixed window's loads are all in flight at once. */
#define NHWC_CLAMPED_TAPS_BEGIN                                                            \
    _Pragma("unroll") for (int kh = 0; kh < WKH; ++kh) {                                   \
        const int ih = h0 + kh * WDH;                                                      \
        const int row_ok = ih >= 0 && ih < IH;                                             \
        const int prow = (n * IH + clamp(ih, 0, IH - 1)) * IW;                             \
        _Pragma("unroll") for (int kw = 0; kw < WKW; ++kw) {                               \
            const int iw = w0 + kw * WDW;                                                  \
            const int ok = row_ok && iw >= 0 && iw < IW;                                   \
            const int p = (prow + clamp(iw, 0, IW - 1)) * C + c0;
#define NHWC_CLAMPED_TAPS_END                                                              \
        }                                                                                  \
    }

/* TAPS_INSIDE (above) for the element-wise paths: the body also sees p, the tap's element offset */
#define NHWC_TAPS_INSIDE_BEGIN                                                             \
    TAPS_INSIDE_BEGIN                                                                      \
            const int p = ((n * IH + ih) * IW + iw) * C + c0;
#define NHWC_TAPS_INSIDE_END TAPS_INSIDE_END

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_max(__global const dtype_t* restrict x, __global dtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD)
{
    NHWC_PROLOGUE
#if POOL_NO_IDX
    if (nvalid == VEC && aligned) { /* whole aligned vectors, every tap's load in flight at once */
#if HAL_PACKED_HMAX /* max of packed halves (above) */
        hpackV pbest = HPACK_NEG_INF;
        NHWC_CLAMPED_TAPS_BEGIN
            const hpackV v = *(__global const hpackV*)(x + p);
            pbest = hal_hmaxv(pbest, ok ? v : HPACK_NEG_INF);
        NHWC_CLAMPED_TAPS_END
#if FUSE_RELU
        ASTV(HAL_CAT(vload_half, VEC)(0, (const __private half*)&pbest), y, obase);
#else
        *(__global hpackV*)(y + obase) = pbest; /* the maximum's own bits */
#endif
#else
        /* from -inf: a tap outside (-inf) never wins, the first inside needs no branch */
        ctypeV vbest = (ctypeV)(-INFINITY);
        NHWC_CLAMPED_TAPS_BEGIN
            const ctypeV v = ALDCV(x, p);
            vbest = MAX_NANV(vbest, ok ? v : (ctypeV)(-INFINITY));
        NHWC_CLAMPED_TAPS_END
        ASTV(CTOFLOATV(vbest), y, obase);
#endif
        return;
    }
#endif
    ctypeV best = (ctypeV)(-INFINITY);
    IDX_TRACK(intV bidx = (intV)0;)
    IDX_TRACK(int unseen = 1;)
    NHWC_TAPS_INSIDE_BEGIN
            ctypeV v;
            if (nvalid == VEC) {
                v = aligned ? ALDCV(x, p) : LDCV(x, p);
            } else {
                ctype tmp[VEC];
                for (int j = 0; j < VEC; ++j) tmp[j] = j < nvalid ? LDC(x, p + j) : (ctype)0;
#if HAL_HALF_COMPUTE && VEC > 1
                v = HAL_CAT(vload, VEC)(0, tmp);
#else
                v = PRIV_LDV(tmp);
#endif
            }
#if POOL_NO_IDX
            /* from -inf, the first tap needs no branch of its own (a -inf tap leaves -inf) */
            best = MAX_NANV(best, v);
#else
            if (unseen) {
                best = v;
                bidx = (intV)(ih * IW + iw);
                unseen = 0;
            } else {
                const cmaskV take = (v > best) | isnan(v);
                best = select(best, v, take);
                bidx = select(bidx, (intV)(ih * IW + iw), CMASK_TO_INT(take));
            }
#endif
    NHWC_TAPS_INSIDE_END
    const floatV out = CTOFLOATV(best);
    if (nvalid == VEC) {
        if (aligned) ASTV(out, y, obase);
        else STV(out, y, obase);
    } else {
        float tv[VEC];
        PRIV_STV(out, tv);
        for (int j = 0; j < nvalid; ++j) ST(tv[j], y, obase + j);
    }
    IDX_TRACK(if (indices) ST_IDX(bidx, indices, obase, nvalid);)
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_avg(__global const dtype_t* restrict x, __global dtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD)
{
    NHWC_PROLOGUE
    int rows_in = 0, rows_pad = 0, cols_in = 0, cols_pad = 0;
    for (int kw = 0; kw < WKW; ++kw) {
        const int iw = w0 + kw * WDW;
        cols_in += (iw >= 0 && iw < IW);
        cols_pad += (iw >= -PL && iw < IW + PR);
    }
    for (int kh = 0; kh < WKH; ++kh) {
        const int ih = h0 + kh * WDH;
        rows_in += (ih >= 0 && ih < IH);
        rows_pad += (ih >= -PT && ih < IH + PB);
    }
    /* the taps inside the input, row-major, from +0 (a tap outside adds +0: the same sum) */
    floatV sum = (floatV)0.0f;
    if (nvalid == VEC && aligned) {
        NHWC_CLAMPED_TAPS_BEGIN
            const floatV v = ALDV(x, p);
            sum += ok ? v : (floatV)0.0f;
        NHWC_CLAMPED_TAPS_END
    } else {
        NHWC_TAPS_INSIDE_BEGIN
                if (nvalid == VEC) {
                    sum += LDV(x, p);
                } else {
                    float tmp[VEC];
                    for (int j = 0; j < VEC; ++j) tmp[j] = j < nvalid ? LD(x, p + j) : 0.0f;
                    sum += PRIV_LDV(tmp);
                }
        NHWC_TAPS_INSIDE_END
    }
    const int count = DIVISOR > 0 ? DIVISOR : (COUNT_INCLUDE_PAD ? rows_pad * cols_pad : rows_in * cols_in);
    const floatV out = sum / (float)count;
    if (nvalid == VEC) {
        if (aligned) ASTV(out, y, obase);
        else STV(out, y, obase);
    } else {
        float tv[VEC];
        PRIV_STV(out, tv);
        for (int j = 0; j < nvalid; ++j) ST(tv[j], y, obase + j);
    }
}
#endif
