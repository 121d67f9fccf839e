/* Quantized (int8/uint8) sliding-window 2-D pooling: pool2d_max, pool2d_avg.
 *
 * Arguments: those of pool2d.cl (x, y, indices, N, C, IH, IW, OH, OW, KH, KW, SH, SW,
 * PT, PB, PL, PR, DH, DW, DIVISOR, COUNT_INCLUDE_PAD) and one more, ZP: the input's (and
 * the output's) zero point. Built with DTYPE_INT8=1 or DTYPE_UINT8=1 (hal_quant.h); work
 * mapping and parameters (WG, VEC, LOCAL_TILE, INTERIOR) are pool2d.cl's:
 *   NCHW: one work-item = VEC outputs along OW (charN loads at stride 1, char2N.even at
 *         stride 2, per-lane gathers at borders); LOCAL_TILE=1: a group stages its input
 *         window in local memory (as int), one output per work-item.
 *   NHWC: one work-item = VEC channels (charN loads along C, scalar tail);
 *         QPOOL_VEC16=1 (the parameter QVEC16): 16 channels per work-item, fixed windows.
 *
 * Max: int compares, starting at QNONE (below the dtype's range) with masked taps reading
 * QNONE, so the first valid tap is always taken, padding never, and a later tap only when
 * strictly greater: the first maximum's index, as for floats. Fused ReLU does not apply.
 * Avg: s = sum over the taps inside the input of (q - ZP) in int (a padded tap is q == ZP,
 * i.e. 0), the float kernels' divisor rule, y = saturate(round_half_even(s / divisor) + ZP).
 *
 * Loads of taps that may lie outside the input (rows, columns, a strip's vectors and halo
 * bytes) are issued unconditionally from addresses clamped into the input, and a select then
 * puts the neutral value (QNONE for max, 0 for avg sums) in place of the taps outside: with
 * a branch around each load, NVIDIA's compiler kept the loads one memory round trip after
 * another (pool2d.cl, SASS). Values and reduction order are those of skipping the taps.
 */

#if !(DTYPE_INT8 || DTYPE_UINT8)
#error "qpool2d.cl is built with -DDTYPE_INT8=1 or -DDTYPE_UINT8=1"
#endif

#ifndef LOCAL_TILE
#define LOCAL_TILE 0
#endif
#ifndef POOL_INTERIOR
#define POOL_INTERIOR 0
#endif
#ifndef QPOOL_VEC16
#define QPOOL_VEC16 0
#endif

/* NHWC builds, as pool2d.cl: POOL_FIXED=1 (the launcher's FIXED_WINDOW, common windows) fixes
 * the window (POOL_KH, ..., POOL_DW) at build time, so the tap loops unroll and the index
 * arithmetic folds (the runtime arguments of the same names are then ignored); POOL_NO_IDX=1
 * (max without indices) keeps no index vector. */
#ifndef POOL_FIXED
#define POOL_FIXED 0
#endif
#ifndef POOL_NO_IDX
#define POOL_NO_IDX 0
#endif
#if POOL_FIXED
#define WKH POOL_KH
#define WKW POOL_KW
#define WSH POOL_SH
#define WSW POOL_SW
#define WDH POOL_DH
#define WDW POOL_DW
#define QTAPS_UNROLL _Pragma("unroll")
#else
#define WKH KH
#define WKW KW
#define WSH SH
#define WSW SW
#define WDH DH
#define WDW DW
#define QTAPS_UNROLL
#endif

#define TILE_W 16
#define TILE_H (WG / TILE_W)
#define TILE_ELEMS (WG * 16) /* int elements: the schema's WG * 16 * 4 bytes */

/* round_half_even(s / d) for d > 0, exact, on I lanes (F: the float type, CF and CI the
 * conversions). For |s| < 2^20 (every window under 4112 taps): t = s * (1 / d), with the
 * division up to 2.5 ulp off (OpenCL's bound) and the product rounded, lies within
 * |x| 2^-21 of x = s / d, while an x that is not a tie lies at least 1 / (2 d) from every
 * k + 1/2, farther than that error; so rint(t) is right except for ties, which the integer
 * test 2 s == (2 floor(t) + 1) d finds exactly (session 12; CUDA's qdiv_round). Larger sums
 * take the slow path: the float quotient, then the exact int remainder corrects it by one
 * step towards s / d and breaks ties to the even quotient. */
#define QDIV_ROUND_EVEN(NAME, I, F, CF, CI, CI_RTE, ANY)                                    \
    inline I NAME(I s, I d)                                                                 \
    {                                                                                       \
        if (!ANY(abs(s) >= (1u << 20))) {                                                   \
            const F t = CF(s) * ((F)1.0f / CF(d));                                          \
            const I f = CI(floor(t));                                                       \
            return select(CI_RTE(t), f + (f & 1), 2 * s == (2 * f + 1) * d);                \
        }                                                                                   \
        I q = CI_RTE(CF(s) / CF(d));                                                        \
        I r2 = 2 * (s - q * d);                                                             \
        q += select((I)0, (I)1, r2 > d) - select((I)0, (I)1, r2 < -d);                      \
        r2 = 2 * (s - q * d);                                                               \
        const I tie_odd = ((r2 == d) | (r2 == -d)) & ((q & 1) != 0);                        \
        return q + select((I)0, select((I)(-1), (I)1, r2 > 0), tie_odd);                    \
    }
/* any() reads the sign bit: a scalar comparison gives 1, not -1 */
#if VEC == 1
#define QANY_V(c) (c)
#else
#define QANY_V(c) any(c)
#endif
QDIV_ROUND_EVEN(div_round_even, intV, floatV, CONVERT_FLOATV, CONVERT_INTV, CONVERT_INTV_SAT_RTE, QANY_V)

/* the stored average: saturate(round_half_even(s / count) + ZP) as int (STQ saturates) */
#define QAVG(s, count, ZP) (div_round_even((s), max((count), (intV)1)) + (ZP))

/* Aligned VEC-byte access at an element offset i that is a multiple of VEC (hal's buffers
 * are whole allocations, so such an offset is VEC-byte aligned): NHWC where C % VEC == 0,
 * the NCHW row strips. vloadN / vstoreN of char promise one-byte alignment only, and
 * NVIDIA's compiler (as clang for nvptx) then issues VEC one-byte loads. */
#if VEC == 1
#define LDQV_A(p, i) LDQ(p, i)
#define STQV_A(v, p, i) STQ(v, p, i)
#else
/* loaded as 32-bit words and unpacked with shifts (a charN load compiles to 4-byte pieces
 * at most: PTX has no v8.u8) */
#if VEC == 4
typedef uint qwords_t;
#define AS_QWORDS as_uint
#define QREP(w) ((uint4)(w))
#define QSH ((uint4)(0, 8, 16, 24))
#else
typedef uint2 qwords_t;
#define AS_QWORDS as_uint2
#define QREP(w) ((uint8)((w).s0, (w).s0, (w).s0, (w).s0, (w).s1, (w).s1, (w).s1, (w).s1))
#define QSH ((uint8)(0, 8, 16, 24, 0, 8, 16, 24))
#endif
inline intV q_unpack(qwords_t w)
{
#if DTYPE_INT8
    return HAL_CAT(as_int, VEC)(QREP(w) << (24 - QSH)) >> 24;
#else
    return HAL_CAT(as_int, VEC)((QREP(w) >> QSH) & 0xffu);
#endif
}
#define LDQV_A(p, i) q_unpack(*(__global const qwords_t*)((p) + (i)))
#define STQV_A(v, p, i) (*(__global qwords_t*)((p) + (i)) = AS_QWORDS(CONVERT_QV_SAT(v)))
#endif

#if !LAYOUT_NHWC && !LOCAL_TILE
/* ------------------------------------------------------------------------------------
 * NCHW, VEC outputs per work-item
 * ---------------------------------------------------------------------------------- */

/* VEC taps of one input row for lanes j: iw = iwb + j * SW; lanes outside read fill. The
 * gather loads every lane from its column clamped into the row, then selects fill: no
 * branch per lane. (The vector-or-gather test stays a branch: a select would issue both.) */
inline intV qtaps(__global const qtype_t* row, int iwb, int SW, int IW, int nvalid, int fill)
{
    if (nvalid == VEC && iwb >= 0 && iwb + VEC * SW - 1 < IW) {
        if (SW == 1) return LDQV(row, iwb);
        if (SW == 2) return LDQ2V_EVEN(row, iwb);
    }
    int tmp[VEC];
    for (int j = 0; j < VEC; ++j) {
        const int iw = iwb + j * SW;
        const int raw = LDQ(row, clamp(iw, 0, IW - 1));
        tmp[j] = (j < nvalid && iw >= 0 && iw < IW) ? raw : fill;
    }
    return PRIV_LDV(tmp);
}

inline void store_q(__global qtype_t* y, int base, intV v, int nvalid)
{
    if (nvalid == VEC) {
        STQV(v, y, base);
    } else {
        int tmp[VEC];
        PRIV_STV(v, tmp);
        for (int j = 0; j < nvalid; ++j) STQ(tmp[j], y, base + j);
    }
}

/* every tap of every lane inside the input and loadable at once (stride 1 or 2) */
#define INTERIOR                                                                            \
    (POOL_INTERIOR && nvalid == VEC && SW <= 2 && h0 >= 0 && h0 + (KH - 1) * DH < IH && w0 >= 0 && \
     w0 + (KW - 1) * DW + VEC * SW - 1 < IW)

#define NCHW_PROLOGUE                                                                       \
    const int OWV = CEIL_DIV(OW, VEC);                                                     \
    const int gid = get_global_id(0);                                                      \
    if (gid >= N * C * OH * OWV) return;                                                   \
    const int owv = gid % OWV;                                                             \
    const int t = gid / OWV;                                                               \
    const int oh = t % OH;                                                                 \
    const int nc = t / OH;                                                                 \
    const int ow0 = owv * VEC;                                                             \
    const int nvalid = min(VEC, OW - ow0);                                                 \
    const int h0 = oh * SH - PT;                                                           \
    const int w0 = ow0 * SW - PL;                                                          \
    __global const qtype_t* xp = x + nc * IH * IW;                                         \
    const intV lane = LANE_IDS;                                                            \
    const int base = (nc * OH + oh) * OW + ow0;

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_max(__global const qtype_t* restrict x, __global qtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD, int ZP)
{
    NCHW_PROLOGUE
    intV best = (intV)QNONE;
    intV bidx = (intV)0;
    if (INTERIOR) {
#define QMAX_TAPS(LOAD)                                                                     \
        for (int kh = 0; kh < KH; ++kh) {                                                   \
            const int ih = h0 + kh * DH;                                                    \
            __global const qtype_t* row = xp + ih * IW;                                     \
            for (int kw = 0; kw < KW; ++kw) {                                               \
                const int iwb = w0 + kw * DW;                                               \
                const intV v = LOAD(row, iwb);                                              \
                const intV take = v > best;                                                 \
                best = select(best, v, take);                                               \
                bidx = select(bidx, ih * IW + iwb + lane * SW, take);                       \
            }                                                                               \
        }
        if (SW == 1) {
            QMAX_TAPS(LDQV)
        } else {
            QMAX_TAPS(LDQ2V_EVEN)
        }
    } else {
        /* rows outside: loaded from the nearest row, read as QNONE (never taken) */
        for (int kh = 0; kh < KH; ++kh) {
            const int ih = h0 + kh * DH;
            const int row_ok = ih >= 0 && ih < IH;
            __global const qtype_t* row = xp + clamp(ih, 0, IH - 1) * IW;
            for (int kw = 0; kw < KW; ++kw) {
                const int iwb = w0 + kw * DW;
                const intV raw = qtaps(row, iwb, SW, IW, nvalid, QNONE);
                const intV v = row_ok ? raw : (intV)QNONE;
                const intV take = v > best;
                best = select(best, v, take);
                bidx = select(bidx, ih * IW + iwb + lane * SW, take);
            }
        }
    }
    store_q(y, base, best, nvalid);
    if (indices) ST_IDX(bidx, indices, base, nvalid);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_avg(__global const qtype_t* restrict x, __global qtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD, int ZP)
{
    NCHW_PROLOGUE
    intV sum = (intV)0;
    if (INTERIOR) {
#define QSUM_TAPS(LOAD)                                                                     \
        for (int kh = 0; kh < KH; ++kh) {                                                   \
            __global const qtype_t* row = xp + (h0 + kh * DH) * IW;                         \
            for (int kw = 0; kw < KW; ++kw) sum += LOAD(row, w0 + kw * DW);                 \
        }
        if (SW == 1) {
            QSUM_TAPS(LDQV)
        } else {
            QSUM_TAPS(LDQ2V_EVEN)
        }
        /* no padding inside the window: both counting rules give KH * KW */
        const int taps = KH * KW;
        store_q(y, base, QAVG(sum - ZP * taps, (intV)(DIVISOR > 0 ? DIVISOR : taps), ZP), VEC);
        return;
    }
    int rows_in = 0, rows_pad = 0;
    /* rows outside: loaded from the nearest row, adding 0 */
    for (int kh = 0; kh < KH; ++kh) {
        const int ih = h0 + kh * DH;
        const int row_ok = ih >= 0 && ih < IH;
        rows_pad += (ih >= -PT && ih < IH + PB);
        rows_in += row_ok;
        __global const qtype_t* row = xp + clamp(ih, 0, IH - 1) * IW;
        for (int kw = 0; kw < KW; ++kw) {
            const intV raw = qtaps(row, w0 + kw * DW, SW, IW, nvalid, 0);
            sum += row_ok ? raw : (intV)0;
        }
    }
    intV cols_in = (intV)0, cols_pad = (intV)0;
    for (int kw = 0; kw < KW; ++kw) {
        const intV iw = w0 + kw * DW + lane * SW;
        cols_in += MASK01((iw >= 0) & (iw < IW));
        cols_pad += MASK01((iw >= -PL) & (iw < IW + PR));
    }
    const intV taps_in = rows_in * cols_in;
    /* lanes past OW may count 0 taps; QAVG divides by at least 1 and they are never stored */
    const intV count = DIVISOR > 0 ? (intV)DIVISOR : (COUNT_INCLUDE_PAD ? rows_pad * cols_pad : taps_in);
    store_q(y, base, QAVG(sum - ZP * taps_in, count, ZP), nvalid);
}

#elif !LAYOUT_NHWC && LOCAL_TILE == 3
/* ------------------------------------------------------------------------------------
 * NCHW, aligned row strips (pool2d.cl's LOCAL_TILE=3 in integers): STRIP_ROWS output rows
 * x VEC/2 output columns per work-item, for fixed KxK windows (STRIP_K 2 or 3), stride 2,
 * dilation 1, left pad POOL_PL (0 or 1), no indices, IW % VEC == 0 (the launcher checks).
 * Per input row of the strip: one aligned VEC-byte load and the 0-2 halo bytes the window
 * needs, all from addresses clamped into the input and issued unconditionally (rows, vectors
 * and halo bytes outside then replaced by NEUTRAL); each row is reduced horizontally, then
 * the rows vertically. Max: QNONE for taps outside the input (never taken); avg: the raw sum
 * of the taps inside the input, then (sum - ZP * taps) with the divisor rule and
 * round-half-even, as the other paths.
 * ---------------------------------------------------------------------------------- */
#if VEC == 1 || !defined(STRIP_K) || !defined(POOL_PL) || !defined(STRIP_ROWS)
#error "qpool2d.cl: LOCAL_TILE=3 is built with VEC 4 or 8, STRIP_K, POOL_PL and STRIP_ROWS"
#endif
#define SK STRIP_K
#define STRIP_IN (2 * STRIP_ROWS + SK - 2)
#define HALO_L (POOL_PL > 0)
#define HALO_R (SK - 2 - POOL_PL > 0)
#if VEC == 4
#define HV 2
typedef int2 intH;
#define HLANES ((int2)(0, 1))
#define PREV_ODD(v, l) ((int2)((l), (v).s1))
#define NEXT_EVEN(v, r) ((int2)((v).s2, (r)))
#else
#define HV 4
typedef int4 intH;
#define HLANES ((int4)(0, 1, 2, 3))
#define PREV_ODD(v, l) ((int4)((l), (v).s135))
#define NEXT_EVEN(v, r) ((int4)((v).s246, (r)))
#endif
#if SK == 3 && POOL_PL == 1
#define STRIP_TAPS(v, l, r, T0, T1, T2) T0 = PREV_ODD(v, l); T1 = (v).even; T2 = (v).odd;
#elif SK == 3
#define STRIP_TAPS(v, l, r, T0, T1, T2) T0 = (v).even; T1 = (v).odd; T2 = NEXT_EVEN(v, r);
#elif POOL_PL == 1
#define STRIP_TAPS(v, l, r, T0, T1, T2) T0 = PREV_ODD(v, l); T1 = (v).even;
#else
#define STRIP_TAPS(v, l, r, T0, T1, T2) T0 = (v).even; T1 = (v).odd;
#endif
#define MASK01H(m) select((intH)0, (intH)1, (m))

/* The strips' averages, round_half_even(s / d) on HV lanes, with |s| <= 9 * 255 = 2295.
 * A strip window's divisor is at most SK * SK = 9 taps, so d in 1 .. 9: integer only (the
 * float path below spends five conversions and a reciprocal a lane, and conversions run at
 * a quarter of the integer rate on NVIDIA). u = s + 4096 d >= 0 keeps floor(u / d) =
 * floor(s / d) + 4096; floor(u / d) = mul_hi(u, QMAGIC9[d]), QMAGIC9[d] = ceil(2^32 / d), is
 * exact for every u < 2^32 / d (u < 2^16 here; checked for u < 60000); d = 1 is u itself.
 * Then r = u - q d, and 2 r - d picks floor, floor + 1, or on a tie the even one. */
__constant uint QMAGIC9[10] = {0u,         0u,         2147483648u, 1431655766u, 1073741824u,
                               858993460u, 715827883u, 613566757u,  536870912u,  477218589u};
typedef HAL_CAT(float, HV) floatH;
typedef HAL_CAT(uint, HV) uintH;
#if HV == 2
#define QMAGIC9_H(d) ((uintH)(QMAGIC9[(d).s0], QMAGIC9[(d).s1]))
#else
#define QMAGIC9_H(d) ((uintH)(QMAGIC9[(d).s0], QMAGIC9[(d).s1], QMAGIC9[(d).s2], QMAGIC9[(d).s3]))
#endif
inline intH strip_div_round_even9(intH s, intH d)
{
    const intH ub = s + (d << 12);
    const uintH u = HAL_CAT(as_uint, HV)(ub);
    const intH q = HAL_CAT(as_int, HV)(select(mul_hi(u, QMAGIC9_H(d)), u, d == 1));
    const intH r2 = 2 * (ub - q * d) - d;
    return q - 4096 + select((intH)0, (intH)1, (r2 > 0) | ((r2 == 0) & ((q & 1) != 0)));
}
/* the DIVISOR override (any size): QDIV_ROUND_EVEN's fast path, inv = 1 / DIVISOR once a
 * work-item (within OpenCL's 2.5 ulp, the bound that path needs) */
inline intH strip_div_round_even(intH s, intH d, floatH inv)
{
    const floatH t = HAL_CAT(convert_float, HV)(s) * inv;
    const intH f = HAL_CAT(convert_int, HV)(floor(t));
    return select(HAL_CAT(HAL_CAT(convert_int, HV), _rte)(t), f + (f & 1), 2 * s == (2 * f + 1) * d);
}

#define QSTRIP_PROLOGUE                                                                    \
    const int JV = CEIL_DIV(2 * OW, VEC);                                                  \
    const int S = CEIL_DIV(OH, STRIP_ROWS);                                                \
    const int gid = get_global_id(0);                                                      \
    if (gid >= N * C * S * JV) return;                                                     \
    const int j = gid % JV;                                                                \
    const int t = gid / JV;                                                                \
    const int oh0 = (t % S) * STRIP_ROWS;                                                  \
    const int nc = t / S;                                                                  \
    const int c0 = j * VEC;                                                                \
    const int ow0 = j * HV;                                                                \
    const int h0 = oh0 * 2 - PT;                                                           \
    const int vin = c0 < IW;                                                               \
    const int lin = HALO_L && c0 > 0;                                                      \
    const int rin = HALO_R && c0 + VEC < IW;                                               \
    __global const qtype_t* xp = x + nc * IH * IW;                                         \
    const int obase = nc * OH * OW + ow0;                                                  \
    const int nv = OW - ow0;

/* hrow[i]: the reduced taps of input row h0 + i per lane (NEUTRAL for rows, vectors and
 * halo bytes outside the input). As pool2d.cl's STRIP_ROWS_LOAD: every row's loads come
 * from a valid address (row and columns clamped into the input) and are issued
 * unconditionally, the values outside replaced by NEUTRAL afterwards, so that all rows'
 * loads are in flight at once (a branch around each row's loads serialised them on NVIDIA).
 * Columns: the vector stays aligned (IW % VEC == 0; c0 == IW, under ceil_mode, reads the
 * row's last one), a halo byte outside reads the nearest one. */
#define QSTRIP_VCOL min(c0, IW - VEC)
#define QSTRIP_LCOL clamp(c0 - 1, 0, IW - 1)
#define QSTRIP_RCOL min(c0 + VEC, IW - 1)
#define QSTRIP_ROWS_LOAD(NEUTRAL, REDUCE)                                                  \
    intH hrow[STRIP_IN];                                                                   \
    _Pragma("unroll") for (int i = 0; i < STRIP_IN; ++i) {                                 \
        const int ih = h0 + i;                                                             \
        const int row_ok = ih >= 0 && ih < IH;                                             \
        __global const qtype_t* row = xp + clamp(ih, 0, IH - 1) * IW;                      \
        /* one aligned VEC-byte load: IW % VEC == 0 and c0 % VEC == 0 */                   \
        const intV vraw = LDQV_A(row, QSTRIP_VCOL);                                       \
        const int lraw = HALO_L ? LDQ(row, QSTRIP_LCOL) : (NEUTRAL);                       \
        const int rraw = HALO_R ? LDQ(row, QSTRIP_RCOL) : (NEUTRAL);                       \
        const intV v = row_ok && vin ? vraw : (intV)(NEUTRAL);                             \
        const int l = row_ok && lin ? lraw : (NEUTRAL);                                    \
        const int r = row_ok && rin ? rraw : (NEUTRAL);                                    \
        intH T0, T1, T2;                                                                   \
        STRIP_TAPS(v, l, r, T0, T1, T2)                                                    \
        hrow[i] = REDUCE;                                                                  \
    }

/* aligned: OW % HV == 0, so every row's output offset o (a multiple of HV) is HV-byte
 * aligned and the HV bytes go as one store; vstoreN of char promises one-byte alignment
 * only, and NVIDIA's compiler then writes them one byte at a time */
inline void qstrip_store(__global qtype_t* y, int o, int nv, int aligned, intH v)
{
    if (nv >= HV) {
        const QTYPE_(HV) q = HAL_CAT(HAL_CAT(convert_, QTYPE_(HV)), _sat)(v);
        if (aligned)
            *(__global QTYPE_(HV)*)(y + o) = q;
        else
            HAL_CAT(vstore, HV)(q, 0, y + o);
    } else {
        int t[HV];
        HAL_CAT(vstore, HV)(v, 0, t);
        for (int h = 0; h < nv; ++h) STQ(t[h], y, o + h);
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_max(__global const qtype_t* restrict x, __global qtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD, int ZP)
{
    QSTRIP_PROLOGUE
#if SK == 3
    QSTRIP_ROWS_LOAD(QNONE, max(max(T0, T1), T2))
#else
    QSTRIP_ROWS_LOAD(QNONE, max(T0, T1))
#endif
#pragma unroll
    for (int r = 0; r < STRIP_ROWS; ++r) {
        if (oh0 + r >= OH) break;
        intH m = hrow[2 * r];
        for (int kh = 1; kh < SK; ++kh) m = max(m, hrow[2 * r + kh]);
        qstrip_store(y, obase + (oh0 + r) * OW, nv, OW % HV == 0, m);
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_avg(__global const qtype_t* restrict x, __global qtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD, int ZP)
{
    QSTRIP_PROLOGUE
#if SK == 3
    QSTRIP_ROWS_LOAD(0, T0 + T1 + T2)
#else
    QSTRIP_ROWS_LOAD(0, T0 + T1)
#endif
    const floatH inv_divisor = (floatH)(DIVISOR > 0 ? 1.0f / (float)DIVISOR : 1.0f);
    intH cols_in = (intH)0, cols_pad = (intH)0;
    for (int kw = 0; kw < SK; ++kw) {
        const intH iw = c0 + 2 * HLANES - POOL_PL + kw;
        cols_in += MASK01H((iw >= 0) & (iw < IW));
        cols_pad += MASK01H((iw >= -POOL_PL) & (iw < IW + PR));
    }
#pragma unroll
    for (int r = 0; r < STRIP_ROWS; ++r) {
        if (oh0 + r >= OH) break;
        intH sum = hrow[2 * r];
        int rows_in = 0, rows_pad = 0;
        for (int kh = 0; kh < SK; ++kh) {
            const int ih = h0 + 2 * r + kh;
            if (kh) sum += hrow[2 * r + kh];
            rows_in += (ih >= 0 && ih < IH);
            rows_pad += (ih >= -PT && ih < IH + PB);
        }
        const intH taps = rows_in * cols_in;
        const intH s = sum - ZP * taps;
        const intH q = DIVISOR > 0 ? strip_div_round_even(s, (intH)DIVISOR, inv_divisor)
                                   : strip_div_round_even9(s, max(COUNT_INCLUDE_PAD ? rows_pad * cols_pad : taps, (intH)1));
        qstrip_store(y, obase + (oh0 + r) * OW, nv, OW % HV == 0, q + ZP);
    }
}

#elif !LAYOUT_NHWC && LOCAL_TILE
/* ------------------------------------------------------------------------------------
 * NCHW, local-memory tile: one output per work-item (the backend builds VEC=1)
 * ---------------------------------------------------------------------------------- */
#if VEC != 1
#error "qpool2d.cl: LOCAL_TILE=1 is built with VEC=1"
#endif

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
    const int ih0 = ty * TILE_H * SH - PT;                                                 \
    const int iw0 = tx * TILE_W * SW - PL;                                                 \
    const int EH = (TILE_H - 1) * SH + (KH - 1) * DH + 1;                                  \
    const int EW = (TILE_W - 1) * SW + (KW - 1) * DW + 1;                                  \
    __global const qtype_t* xp = x + nc * IH * IW;                                         \
    __local int tile[TILE_ELEMS];                                                          \
    /* the same for the whole group: the barrier below is in uniform control flow */       \
    const int staged = (nc < N * C) && EH * EW <= TILE_ELEMS;                              \
    if (staged) {                                                                          \
        for (int i = lid; i < EH * EW; i += WG) {                                          \
            const int ih = ih0 + i / EW;                                                   \
            const int iw = iw0 + i % EW;                                                   \
            tile[i] = (ih >= 0 && ih < IH && iw >= 0 && iw < IW) ? LDQ(xp, ih * IW + iw) : 0; \
        }                                                                                  \
        barrier(CLK_LOCAL_MEM_FENCE);                                                      \
    }                                                                                      \
    if (nc >= N * C || oh >= OH || ow >= OW) return;                                       \
    const int h0 = oh * SH - PT;                                                           \
    const int w0 = ow * SW - PL;

#define TAP(ih, iw) (staged ? tile[((ih) - ih0) * EW + ((iw) - iw0)] : LDQ(xp, (ih) * IW + (iw)))

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_max(__global const qtype_t* restrict x, __global qtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD, int ZP)
{
    TILE_PROLOGUE
    int best = QNONE;
    int bidx = 0;
    for (int kh = 0; kh < KH; ++kh) {
        const int ih = h0 + kh * DH;
        if (ih < 0 || ih >= IH) continue;
        for (int kw = 0; kw < KW; ++kw) {
            const int iw = w0 + kw * DW;
            if (iw < 0 || iw >= IW) continue;
            const int v = TAP(ih, iw);
            if (v > best) {
                best = v;
                bidx = ih * IW + iw;
            }
        }
    }
    const int o = (nc * OH + oh) * OW + ow;
    STQ(best, y, o);
    if (indices) indices[o] = bidx;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_avg(__global const qtype_t* restrict x, __global qtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD, int ZP)
{
    TILE_PROLOGUE
    int sum = 0;
    int rows_in = 0, rows_pad = 0, cols_in = 0, cols_pad = 0;
    for (int kw = 0; kw < KW; ++kw) {
        const int iw = w0 + kw * DW;
        cols_in += (iw >= 0 && iw < IW);
        cols_pad += (iw >= -PL && iw < IW + PR);
    }
    for (int kh = 0; kh < KH; ++kh) {
        const int ih = h0 + kh * DH;
        rows_pad += (ih >= -PT && ih < IH + PB);
        if (ih < 0 || ih >= IH) continue;
        ++rows_in;
        for (int kw = 0; kw < KW; ++kw) {
            const int iw = w0 + kw * DW;
            if (iw >= 0 && iw < IW) sum += TAP(ih, iw);
        }
    }
    const int taps_in = rows_in * cols_in;
    const int count = DIVISOR > 0 ? DIVISOR : (COUNT_INCLUDE_PAD ? rows_pad * cols_pad : taps_in);
    STQ(QAVG(sum - ZP * taps_in, count, ZP), y, (nc * OH + oh) * OW + ow);
}

#elif LAYOUT_NHWC && QPOOL_VEC16
/* ------------------------------------------------------------------------------------
 * NHWC, 16 channels per work-item (pool2d's QVEC16; CUDA's pool2d_*_vec16_k*), for the
 * windows the launcher builds fixed (POOL_FIXED: up to 3x3, stride up to 2, no dilation)
 * and max without indices. Each tap is the 16 bytes of one pixel's channel group: one
 * aligned uint4 load where C % 16 == 0, else a vload16 (one-byte alignment), and for the
 * last, partial group a gather from channels clamped to the last one (those lanes are
 * never stored). All the window's loads are issued first, from rows and columns clamped
 * into the input, and the reduction follows. Bytes are reduced as two 16-bit lanes per
 * 32-bit word (the even and the odd bytes), made unsigned first (int8: the sign bit
 * flipped, i.e. +128, which keeps the order): max as ushort8 max, which leaves the clamped
 * taps as they are (a tap of the same window: no select, as QNHWC_TAP_OK); sums as 32-bit
 * adds (at most 257 taps of 255 fit a 16-bit lane: no carry), a tap outside the input
 * replaced by 0. The average is then the other NHWC path's: s = sum - ZP * taps_in
 * (centred), the divisor rule, saturate(round_half_even(s / divisor) + ZP), where
 * |s| < 2^20 always, so QDIV_ROUND_EVEN's fast path alone is exact.
 * ---------------------------------------------------------------------------------- */
#if !POOL_FIXED || POOL_DH != 1 || POOL_DW != 1 || POOL_KH * POOL_KW > 257
#error "qpool2d.cl: QPOOL_VEC16=1 is built with a fixed window without dilation (at most 257 taps)"
#endif
#if DTYPE_INT8
#define Q16_FLIP 0x80808080u
#define Q16_BIAS 128
#else
#define Q16_FLIP 0u
#define Q16_BIAS 0
#endif
#define Q16_TAPS (POOL_KH * POOL_KW)
#define Q16_LO 0x00ff00ffu
typedef QTYPE_(16) q16_t;

#define Q16_PROLOGUE                                                                       \
    const int CG = CEIL_DIV(C, 16);                                                        \
    const int gid = get_global_id(0);                                                      \
    if (gid >= N * OH * OW * CG) return;                                                   \
    const int cg = gid % CG;                                                               \
    int t = gid / CG;                                                                      \
    const int ow = t % OW;                                                                 \
    t /= OW;                                                                               \
    const int oh = t % OH;                                                                 \
    const int n = t / OH;                                                                  \
    const int c0 = cg * 16;                                                                \
    const int nvalid = min(16, C - c0);                                                    \
    const int h0 = oh * POOL_SH - PT;                                                      \
    const int w0 = ow * POOL_SW - PL;                                                      \
    const int obase = ((n * OH + oh) * OW + ow) * C + c0;

/* 16 channels from element p at any alignment; lanes past nvalid repeat the last channel */
inline uint4 q16_load_any(__global const qtype_t* x, int p, int nvalid)
{
    if (nvalid == 16) return as_uint4(vload16(0, x + p));
    qtype_t tmp[16];
    for (int j = 0; j < 16; ++j) tmp[j] = x[p + min(j, nvalid - 1)];
    return as_uint4(vload16(0, tmp));
}

inline void q16_store_any(__global qtype_t* y, int o, int nvalid, uint4 w)
{
    const q16_t v = HAL_CAT(as_, QTYPE_(16))(w);
    if (nvalid == 16) {
        vstore16(v, 0, y + o);
    } else {
        qtype_t tmp[16];
        vstore16(v, 0, tmp);
        for (int j = 0; j < nvalid; ++j) y[o + j] = tmp[j];
    }
}

/* the window's taps, row-major, into tap[]: every load issued before any is used */
#define Q16_LOAD_WINDOW(LOAD)                                                              \
    _Pragma("unroll") for (int kh = 0; kh < POOL_KH; ++kh) {                               \
        const int prow = (n * IH + clamp(h0 + kh, 0, IH - 1)) * IW;                        \
        _Pragma("unroll") for (int kw = 0; kw < POOL_KW; ++kw) {                           \
            const int p = (prow + clamp(w0 + kw, 0, IW - 1)) * C + c0;                     \
            tap[kh * POOL_KW + kw] = LOAD;                                                 \
        }                                                                                  \
    }
#define Q16_ALIGNED_LOAD (*(__global const uint4*)(x + p))
/* both kernels' window: aligned = whole 16-byte channel groups (one uint4 a tap), tap[] */
#define Q16_WINDOW_TAPS                                                                    \
    const int aligned = C % 16 == 0;                                                       \
    uint4 tap[Q16_TAPS];                                                                   \
    if (aligned) {                                                                         \
        Q16_LOAD_WINDOW(Q16_ALIGNED_LOAD)                                                  \
    } else {                                                                               \
        Q16_LOAD_WINDOW(q16_load_any(x, p, nvalid))                                        \
    }

/* the work-item's 16 output bytes: one uint4 store when aligned */
inline void q16_store(__global qtype_t* y, int o, int nvalid, int aligned, uint4 w)
{
    if (aligned)
        *(__global uint4*)(y + o) = w;
    else
        q16_store_any(y, o, nvalid, w);
}

/* HAL_PTX_U16X2=1 (NVIDIA's OpenCL, sm_90+; the launcher's ptx_u16x2_ok): one PTX
 * max.u16x2 per word. NVIDIA's compiler turns the ushort8 max into 8 scalar max.u16 and the
 * prmt.b32 to split and join the words (session 15's PTX: 128 max.u16, 127 prmt per
 * work-item of the 3x3 max), where sm_90 has the two-lane instruction (CUDA's __vmaxu2). */
#ifndef HAL_PTX_U16X2
#define HAL_PTX_U16X2 0
#endif
#if HAL_PTX_U16X2
inline uint q16_max_word(uint a, uint b)
{
    uint d;
    __asm__("max.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
inline uint4 q16_max_lanes(uint4 a, uint4 b)
{
    return (uint4)(q16_max_word(a.x, b.x), q16_max_word(a.y, b.y), q16_max_word(a.z, b.z), q16_max_word(a.w, b.w));
}
#else
inline uint4 q16_max_lanes(uint4 a, uint4 b)
{
    return as_uint4(max(as_ushort8(a), as_ushort8(b)));
}
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_max(__global const qtype_t* restrict x, __global qtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD, int ZP)
{
    Q16_PROLOGUE
    Q16_WINDOW_TAPS
    uint4 ev = (uint4)0, od = (uint4)0; /* 0: below every unsigned byte */
    _Pragma("unroll") for (int u = 0; u < Q16_TAPS; ++u) {
        const uint4 w = tap[u] ^ Q16_FLIP;
        ev = q16_max_lanes(ev, w & Q16_LO);
        od = q16_max_lanes(od, (w >> 8) & Q16_LO);
    }
    const uint4 out = (ev | (od << 8)) ^ Q16_FLIP;
    q16_store(y, obase, nvalid, aligned, out);
}

/* round_half_even(s / d) on 8 lanes for |s| < 2^20, inv = 1 / d: QDIV_ROUND_EVEN's fast path */
inline int8 q16_div_round_even(int8 s, int d, float inv)
{
    const float8 t = convert_float8(s) * inv;
    const int8 f = convert_int8(floor(t));
    return select(convert_int8_sat_rte(t), f + (f & 1), 2 * s == (2 * f + 1) * d);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_avg(__global const qtype_t* restrict x, __global qtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD, int ZP)
{
    Q16_PROLOGUE
    Q16_WINDOW_TAPS
    int rows_in = 0, rows_pad = 0, cols_in = 0, cols_pad = 0;
    _Pragma("unroll") for (int kw = 0; kw < POOL_KW; ++kw) {
        const int iw = w0 + kw;
        cols_in += (iw >= 0 && iw < IW);
        cols_pad += (iw >= -PL && iw < IW + PR);
    }
    _Pragma("unroll") for (int kh = 0; kh < POOL_KH; ++kh) {
        const int ih = h0 + kh;
        rows_in += (ih >= 0 && ih < IH);
        rows_pad += (ih >= -PT && ih < IH + PB);
    }
    uint4 ev = (uint4)0, od = (uint4)0;
    _Pragma("unroll") for (int kh = 0; kh < POOL_KH; ++kh) {
        const int row_ok = h0 + kh >= 0 && h0 + kh < IH;
        _Pragma("unroll") for (int kw = 0; kw < POOL_KW; ++kw) {
            const int ok = row_ok && w0 + kw >= 0 && w0 + kw < IW;
            const uint4 w = ok ? tap[kh * POOL_KW + kw] ^ Q16_FLIP : (uint4)0; /* outside adds 0 */
            ev += w & Q16_LO;
            od += (w >> 8) & Q16_LO;
        }
    }
    const int taps_in = rows_in * cols_in;
    const int count = DIVISOR > 0 ? DIVISOR : (COUNT_INCLUDE_PAD ? rows_pad * cols_pad : taps_in);
    const int d = max(count, 1);
    const float inv = 1.0f / (float)d;
    const int bias = taps_in * (ZP + Q16_BIAS); /* the flip's +128 per tap, then the zero point */
    const int8 qe = q16_div_round_even(convert_int8(as_ushort8(ev)) - bias, d, inv) + ZP;
    const int8 qo = q16_div_round_even(convert_int8(as_ushort8(od)) - bias, d, inv) + ZP;
    q16_t v;
    v.even = HAL_CAT(HAL_CAT(convert_, QTYPE_(8)), _sat)(qe);
    v.odd = HAL_CAT(HAL_CAT(convert_, QTYPE_(8)), _sat)(qo);
    const uint4 out = as_uint4(v);
    q16_store(y, obase, nvalid, aligned, out);
}

#else
/* ------------------------------------------------------------------------------------
 * NHWC: VEC channels per work-item; every tap loaded from a clamped address, the taps
 * outside the input discarded by a select (QNHWC_CLAMPED_TAPS below); aligned VEC-byte
 * loads and stores where C % VEC == 0 (LDQV_A, STQV_A)
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
    const int h0 = oh * WSH - PT;                                                          \
    const int w0 = ow * WSW - PL;                                                          \
    const int obase = ((n * OH + oh) * OW + ow) * C + c0;

/* VEC channels from element p, lanes past the channel tail reading fill (loaded from the
 * last channel, then replaced: no branch per lane) */
inline intV qchannels(__global const qtype_t* x, int p, int nvalid, int fill)
{
    if (nvalid == VEC) return LDQV(x, p);
    int tmp[VEC];
    for (int j = 0; j < VEC; ++j) {
        const int raw = LDQ(x, p + min(j, nvalid - 1));
        tmp[j] = j < nvalid ? raw : fill;
    }
    return PRIV_LDV(tmp);
}

/* The window's taps, row-major, each loaded from a valid address (clamped into the input)
 * and issued unconditionally; the body sees p (the clamped tap's element offset) and ok
 * (the tap is inside the input) and discards what is outside by a select (pool2d.cl's
 * NHWC_CLAMPED_TAPS: a branch around each tap's load serialised the loads on NVIDIA). */
#define QNHWC_CLAMPED_TAPS_BEGIN                                                           \
    QTAPS_UNROLL for (int kh = 0; kh < WKH; ++kh) {                                        \
        const int ih = h0 + kh * WDH;                                                      \
        const int row_ok = ih >= 0 && ih < IH;                                             \
        const int prow = (n * IH + clamp(ih, 0, IH - 1)) * IW;                             \
        QTAPS_UNROLL for (int kw = 0; kw < WKW; ++kw) {                                    \
            const int iw = w0 + kw * WDW;                                                  \
            const int ok = row_ok && iw >= 0 && iw < IW;                                   \
            const int p = (prow + clamp(iw, 0, IW - 1)) * C + c0;
#define QNHWC_CLAMPED_TAPS_END                                                             \
        }                                                                                  \
    }

inline void store_q(__global qtype_t* y, int base, intV v, int nvalid)
{
    if (nvalid == VEC) {
        STQV(v, y, base);
    } else {
        int tmp[VEC];
        PRIV_STV(v, tmp);
        for (int j = 0; j < nvalid; ++j) STQ(tmp[j], y, base + j);
    }
}

/* A fixed window without dilation and without indices takes every clamped tap as it is:
 * clamped to the nearest row and column, a tap outside the input is a tap of the same window
 * (every window overlaps the input), so the max is unchanged and no select is needed. */
#if POOL_FIXED && POOL_NO_IDX && POOL_DH == 1 && POOL_DW == 1
#define QNHWC_TAP_OK(ok) 1
#else
#define QNHWC_TAP_OK(ok) (ok)
#endif
#define QNHWC_MAX_TAPS(LOAD)                                                               \
    QNHWC_CLAMPED_TAPS_BEGIN                                                               \
            const intV raw = LOAD;                                                         \
            const intV v = QNHWC_TAP_OK(ok) ? raw : (intV)QNONE; /* never taken */         \
            const intV take = v > best;                                                    \
            best = select(best, v, take);                                                  \
            QNHWC_TAKE_IDX                                                                 \
    QNHWC_CLAMPED_TAPS_END
#if POOL_NO_IDX
#define QNHWC_TAKE_IDX
#else
#define QNHWC_TAKE_IDX bidx = select(bidx, (intV)(ih * IW + iw), take);
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_max(__global const qtype_t* restrict x, __global qtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD, int ZP)
{
    NHWC_PROLOGUE
    intV best = (intV)QNONE;
#if !POOL_NO_IDX
    intV bidx = (intV)0;
#endif
    if (C % VEC == 0) {
        QNHWC_MAX_TAPS(LDQV_A(x, p))
        STQV_A(best, y, obase);
    } else {
        QNHWC_MAX_TAPS(qchannels(x, p, nvalid, QNONE))
        store_q(y, obase, best, nvalid);
    }
#if !POOL_NO_IDX
    if (indices) ST_IDX(bidx, indices, obase, nvalid);
#endif
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_avg(__global const qtype_t* restrict x, __global qtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD, int ZP)
{
    NHWC_PROLOGUE
    intV sum = (intV)0;
    int rows_in = 0, rows_pad = 0, cols_in = 0, cols_pad = 0;
    QTAPS_UNROLL for (int kw = 0; kw < WKW; ++kw) {
        const int iw = w0 + kw * WDW;
        cols_in += (iw >= 0 && iw < IW);
        cols_pad += (iw >= -PL && iw < IW + PR);
    }
    QTAPS_UNROLL for (int kh = 0; kh < WKH; ++kh) {
        const int ih = h0 + kh * WDH;
        rows_in += (ih >= 0 && ih < IH);
        rows_pad += (ih >= -PT && ih < IH + PB);
    }
#define QNHWC_SUM_TAPS(LOAD)                                                               \
    QNHWC_CLAMPED_TAPS_BEGIN                                                               \
            const intV raw = LOAD;                                                         \
            sum += ok ? raw : (intV)0; /* a tap outside adds nothing */                    \
    QNHWC_CLAMPED_TAPS_END
    const int taps_in = rows_in * cols_in;
    const int count = DIVISOR > 0 ? DIVISOR : (COUNT_INCLUDE_PAD ? rows_pad * cols_pad : taps_in);
    if (C % VEC == 0) {
        QNHWC_SUM_TAPS(LDQV_A(x, p))
        STQV_A(QAVG(sum - ZP * taps_in, (intV)count, ZP), y, obase);
    } else {
        QNHWC_SUM_TAPS(qchannels(x, p, nvalid, 0))
        store_q(y, obase, QAVG(sum - ZP * taps_in, (intV)count, ZP), nvalid);
    }
}
#endif
