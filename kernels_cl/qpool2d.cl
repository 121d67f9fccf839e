/* Quantized (int8/uint8) sliding-window 2-D pooling: pool2d_max, pool2d_avg.
 *
 * Arguments: those of pool2d.cl (x, y, indices, N, C, IH, IW, OH, OW, KH, KW, SH, SW,
 * PT, PB, PL, PR, DH, DW, DIVISOR, COUNT_INCLUDE_PAD) and one more, ZP: the input's (and
 * the output's) zero point. Built with DTYPE_INT8=1 or DTYPE_UINT8=1 (hal_quant.h); work
 * mapping and parameters (WG, VEC, LOCAL_TILE, INTERIOR) are pool2d.cl's:
 *   NCHW: one work-item = VEC outputs along OW (charN loads at stride 1, char2N.even at
 *         stride 2, per-lane gathers at borders); LOCAL_TILE=1: a group stages its input
 *         window in local memory (as int), one output per work-item.
 *   NHWC: one work-item = VEC channels (charN loads along C, scalar tail).
 *
 * Max: int compares, starting at QNONE (below the dtype's range) with masked taps reading
 * QNONE, so the first valid tap is always taken, padding never, and a later tap only when
 * strictly greater: the first maximum's index, as for floats. Fused ReLU does not apply.
 * Avg: s = sum over the taps inside the input of (q - ZP) in int (a padded tap is q == ZP,
 * i.e. 0), the float kernels' divisor rule, y = saturate(round_half_even(s / divisor) + ZP).
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

#define TILE_W 16
#define TILE_H (WG / TILE_W)
#define TILE_ELEMS (WG * 16) /* int elements: the schema's WG * 16 * 4 bytes */

/* round_half_even(s / d) for d > 0, exact. The float quotient is within one of the answer
 * (OpenCL lets float division be 2.5 ulp off, which could move a tie), so the exact int
 * remainder corrects it: one step towards s / d, then ties to the even quotient. */
inline intV div_round_even(intV s, intV d)
{
    intV q = CONVERT_INTV_SAT_RTE(CONVERT_FLOATV(s) / CONVERT_FLOATV(d));
    intV r2 = 2 * (s - q * d);
    q += MASK01(r2 > d) - MASK01(r2 < -d);
    r2 = 2 * (s - q * d);
    const intV tie_odd = ((r2 == d) | (r2 == -d)) & ((q & 1) != 0);
    return q + select((intV)0, select((intV)(-1), (intV)1, r2 > 0), tie_odd);
}

/* the stored average: saturate(round_half_even(s / count) + ZP) as int (STQ saturates) */
#define QAVG(s, count, ZP) (div_round_even((s), max((count), (intV)1)) + (ZP))

#if !LAYOUT_NHWC && !LOCAL_TILE
/* ------------------------------------------------------------------------------------
 * NCHW, VEC outputs per work-item
 * ---------------------------------------------------------------------------------- */

/* VEC taps of one input row for lanes j: iw = iwb + j * SW; lanes outside read fill */
inline intV qtaps(__global const qtype_t* row, int iwb, int SW, int IW, int nvalid, int fill)
{
    if (nvalid == VEC && iwb >= 0 && iwb + VEC * SW - 1 < IW) {
        if (SW == 1) return LDQV(row, iwb);
        if (SW == 2) return LDQ2V_EVEN(row, iwb);
    }
    int tmp[VEC];
    for (int j = 0; j < VEC; ++j) {
        const int iw = iwb + j * SW;
        tmp[j] = (j < nvalid && iw >= 0 && iw < IW) ? LDQ(row, iw) : fill;
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
        for (int kh = 0; kh < KH; ++kh) {
            const int ih = h0 + kh * DH;
            if (ih < 0 || ih >= IH) continue;
            __global const qtype_t* row = xp + ih * IW;
            for (int kw = 0; kw < KW; ++kw) {
                const int iwb = w0 + kw * DW;
                const intV v = qtaps(row, iwb, SW, IW, nvalid, QNONE);
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
    for (int kh = 0; kh < KH; ++kh) {
        const int ih = h0 + kh * DH;
        rows_pad += (ih >= -PT && ih < IH + PB);
        if (ih < 0 || ih >= IH) continue;
        ++rows_in;
        __global const qtype_t* row = xp + ih * IW;
        for (int kw = 0; kw < KW; ++kw) sum += qtaps(row, w0 + kw * DW, SW, IW, nvalid, 0);
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
    const int h0 = oh * SH - PT;                                                           \
    const int w0 = ow * SW - PL;                                                           \
    const int obase = ((n * OH + oh) * OW + ow) * C + c0;

/* VEC channels from element p, lanes past the channel tail reading fill */
inline intV qchannels(__global const qtype_t* x, int p, int nvalid, int fill)
{
    if (nvalid == VEC) return LDQV(x, p);
    int tmp[VEC];
    for (int j = 0; j < VEC; ++j) tmp[j] = j < nvalid ? LDQ(x, p + j) : fill;
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

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_max(__global const qtype_t* restrict x, __global qtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD, int ZP)
{
    NHWC_PROLOGUE
    intV best = (intV)QNONE;
    intV bidx = (intV)0;
    for (int kh = 0; kh < KH; ++kh) {
        const int ih = h0 + kh * DH;
        if (ih < 0 || ih >= IH) continue;
        for (int kw = 0; kw < KW; ++kw) {
            const int iw = w0 + kw * DW;
            if (iw < 0 || iw >= IW) continue;
            const intV v = qchannels(x, ((n * IH + ih) * IW + iw) * C + c0, nvalid, QNONE);
            const intV take = v > best;
            best = select(best, v, take);
            bidx = select(bidx, (intV)(ih * IW + iw), take);
        }
    }
    store_q(y, obase, best, nvalid);
    if (indices) ST_IDX(bidx, indices, obase, nvalid);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_avg(__global const qtype_t* restrict x, __global qtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD, int ZP)
{
    NHWC_PROLOGUE
    intV sum = (intV)0;
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
            if (iw < 0 || iw >= IW) continue;
            sum += qchannels(x, ((n * IH + ih) * IW + iw) * C + c0, nvalid, 0);
        }
    }
    const int taps_in = rows_in * cols_in;
    const int count = DIVISOR > 0 ? DIVISOR : (COUNT_INCLUDE_PAD ? rows_pad * cols_pad : taps_in);
    store_q(y, obase, QAVG(sum - ZP * taps_in, (intV)count, ZP), nvalid);
}
#endif
