/* 2-D convolution (cross-correlation): conv2d.
 *
 * Arguments (all backends): x, w, bias, y, N, CI, IH, IW, CO, OH, OW, KH, KW, SH, SW, PT, PL,
 * DH, DW, G. Weights OIHW (CO, CI/G, KH, KW) in the activation dtype; bias float32 or NULL.
 * Accumulation in float; one rounding on store.
 *
 * CONV_ALGO (the backend resolves the schema's ALGO per call):
 *   1  direct: one work-item = VEC outputs, along OW in NCHW, along C_out in NHWC. Suits
 *      depthwise and other convolutions with few input channels per group.
 *   2  implicit GEMM with local-memory tiles: per group g, Y[m, p] = sum_k W[m, k] X[k, p]
 *      with m an output channel of the group, p = (n, oh, ow) and k = (ci, kh, kw) (NCHW)
 *      or (kh, kw, ci) (NHWC, so consecutive k are contiguous in memory). A work-group
 *      computes a TILE x TILE block of Y, staging TILE x TK slices of W and of the
 *      on-the-fly im2col matrix X in local memory; each work-item accumulates 4 x 4.
 */

#ifndef CONV_ALGO
#define CONV_ALGO 1
#endif

#if CONV_ALGO == 1
/* ------------------------------------------------------------------------------------
 * direct
 * ---------------------------------------------------------------------------------- */

#if !LAYOUT_NHWC

/* VEC inputs of one row for lanes j: iw = iwb + j * SW, masked lanes 0 */
inline floatV taps_f(__global const dtype_t* row, int iwb, int SW, int IW, int nvalid)
{
    if (nvalid == VEC && iwb >= 0 && iwb + VEC * SW - 1 < IW) {
        if (SW == 1) return LDV(row, iwb);
        if (SW == 2) return LD2V_EVEN(row, iwb);
    }
    float tmp[VEC];
    for (int j = 0; j < VEC; ++j) {
        const int iw = iwb + j * SW;
        tmp[j] = (j < nvalid && iw >= 0 && iw < IW) ? LD(row, iw) : 0.0f;
    }
    return PRIV_LDV(tmp);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void conv2d(__global const dtype_t* restrict x, __global const dtype_t* restrict w,
            __global const float* restrict bias, __global dtype_t* restrict y,
            int N, int CI, int IH, int IW, int CO, int OH, int OW, int KH, int KW,
            int SH, int SW, int PT, int PL, int DH, int DW, int G)
{
    const int OWV = CEIL_DIV(OW, VEC);
    const int gid = get_global_id(0);
    if (gid >= N * CO * OH * OWV) return;
    const int owv = gid % OWV;
    int t = gid / OWV;
    const int oh = t % OH;
    t /= OH;
    const int co = t % CO;
    const int n = t / CO;
    const int CIG = CI / G, COG = CO / G;
    const int ci0 = (co / COG) * CIG;
    const int ow0 = owv * VEC;
    const int nvalid = min(VEC, OW - ow0);
    const int h0 = oh * SH - PT, w0 = ow0 * SW - PL;
    __global const dtype_t* wp = w + co * CIG * KH * KW;
    floatV acc = (floatV)0.0f;
    for (int ci = 0; ci < CIG; ++ci) {
        __global const dtype_t* xp = x + (n * CI + ci0 + ci) * IH * IW;
        for (int kh = 0; kh < KH; ++kh) {
            const int ih = h0 + kh * DH;
            if (ih < 0 || ih >= IH) continue;
            __global const dtype_t* row = xp + ih * IW;
            for (int kw = 0; kw < KW; ++kw) {
                const float wv = LD(wp, (ci * KH + kh) * KW + kw);
                acc = fma(taps_f(row, w0 + kw * DW, SW, IW, nvalid), (floatV)wv, acc);
            }
        }
    }
    if (bias) acc += bias[co];
    const int o = ((n * CO + co) * OH + oh) * OW + ow0;
    if (nvalid == VEC) {
        STV(acc, y, o);
    } else {
        float tv[VEC];
        PRIV_STV(acc, tv);
        for (int j = 0; j < nvalid; ++j) ST(tv[j], y, o + j);
    }
}

#else /* NHWC */

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void conv2d(__global const dtype_t* restrict x, __global const dtype_t* restrict w,
            __global const float* restrict bias, __global dtype_t* restrict y,
            int N, int CI, int IH, int IW, int CO, int OH, int OW, int KH, int KW,
            int SH, int SW, int PT, int PL, int DH, int DW, int G)
{
    const int COV = CEIL_DIV(CO, VEC);
    const int gid = get_global_id(0);
    if (gid >= N * OH * OW * COV) return;
    const int cv = gid % COV;
    int t = gid / COV;
    const int ow = t % OW;
    t /= OW;
    const int oh = t % OH;
    const int n = t / OH;
    const int CIG = CI / G, COG = CO / G;
    const int KHW = KH * KW;
    const int c0 = cv * VEC;
    const int nvalid = min(VEC, CO - c0);
    const int h0 = oh * SH - PT, w0 = ow * SW - PL;
    const int o = ((n * OH + oh) * OW + ow) * CO + c0;
    float out[VEC];

    if (CIG == 1 && COG == 1) {
        /* depthwise, multiplier 1: lane j reads input channel c0 + j */
        floatV acc = (floatV)0.0f;
        for (int kh = 0; kh < KH; ++kh) {
            const int ih = h0 + kh * DH;
            if (ih < 0 || ih >= IH) continue;
            for (int kw = 0; kw < KW; ++kw) {
                const int iw = w0 + kw * DW;
                if (iw < 0 || iw >= IW) continue;
                const int p = ((n * IH + ih) * IW + iw) * CI + c0;
                float xv[VEC], wv[VEC];
                for (int j = 0; j < VEC; ++j) {
                    const int ok = j < nvalid;
                    wv[j] = ok ? LD(w, (c0 + j) * KHW + kh * KW + kw) : 0.0f;
                    if (nvalid < VEC) xv[j] = ok ? LD(x, p + j) : 0.0f;
                }
                const floatV xs = nvalid == VEC ? LDV(x, p) : PRIV_LDV(xv);
                acc = fma(xs, PRIV_LDV(wv), acc);
            }
        }
        PRIV_STV(acc, out);
    } else if (nvalid == VEC && c0 / COG == (c0 + VEC - 1) / COG) {
        /* all lanes in one group: one input value feeds VEC output channels */
        const int ci0 = (c0 / COG) * CIG;
        const int wstride = CIG * KHW;
        floatV acc = (floatV)0.0f;
        for (int kh = 0; kh < KH; ++kh) {
            const int ih = h0 + kh * DH;
            if (ih < 0 || ih >= IH) continue;
            for (int kw = 0; kw < KW; ++kw) {
                const int iw = w0 + kw * DW;
                if (iw < 0 || iw >= IW) continue;
                __global const dtype_t* xp = x + ((n * IH + ih) * IW + iw) * CI + ci0;
                __global const dtype_t* wp = w + c0 * wstride + kh * KW + kw;
                for (int ci = 0; ci < CIG; ++ci) {
                    float wv[VEC];
                    for (int j = 0; j < VEC; ++j) wv[j] = LD(wp, j * wstride + ci * KHW);
                    acc = fma((floatV)LD(xp, ci), PRIV_LDV(wv), acc);
                }
            }
        }
        PRIV_STV(acc, out);
    } else {
        /* lanes in different groups, or the channel tail: one lane at a time */
        for (int j = 0; j < VEC; ++j) {
            float a = 0.0f;
            const int co = c0 + j;
            if (j < nvalid) {
                const int ci0 = (co / COG) * CIG;
                for (int kh = 0; kh < KH; ++kh) {
                    const int ih = h0 + kh * DH;
                    if (ih < 0 || ih >= IH) continue;
                    for (int kw = 0; kw < KW; ++kw) {
                        const int iw = w0 + kw * DW;
                        if (iw < 0 || iw >= IW) continue;
                        __global const dtype_t* xp = x + ((n * IH + ih) * IW + iw) * CI + ci0;
                        for (int ci = 0; ci < CIG; ++ci)
                            a = fma(LD(xp, ci), LD(w, (co * CIG + ci) * KHW + kh * KW + kw), a);
                    }
                }
            }
            out[j] = a;
        }
    }
    for (int j = 0; j < VEC; ++j)
        if (bias && j < nvalid) out[j] += bias[c0 + j];
    if (nvalid == VEC) {
        STV(PRIV_LDV(out), y, o);
    } else {
        for (int j = 0; j < nvalid; ++j) ST(out[j], y, o + j);
    }
}
#endif /* layout */

#else
/* ------------------------------------------------------------------------------------
 * implicit GEMM, local-memory tiles
 * ---------------------------------------------------------------------------------- */

#ifndef TILE
#define TILE 32
#endif
#ifndef TK
#define TK 16
#endif
#define RM 4
#define RN 4
#define TXN (TILE / RN)            /* work-items along p */
#define TYM (TILE / RM)            /* work-items along m */
#define GWG (TXN * TYM)            /* work-group size: TILE^2 / 16 */
#define BROWS (GWG / TILE)         /* rows of a TK x TILE slice loaded per pass */
#define BPASS (TK / BROWS)
#define AROWS (GWG / TK)           /* rows (m) of a TILE x TK slice loaded per pass */
#define APASS (TILE / AROWS)

__kernel __attribute__((reqd_work_group_size(GWG, 1, 1)))
void conv2d(__global const dtype_t* restrict x, __global const dtype_t* restrict w,
            __global const float* restrict bias, __global dtype_t* restrict y,
            int N, int CI, int IH, int IW, int CO, int OH, int OW, int KH, int KW,
            int SH, int SW, int PT, int PL, int DH, int DW, int G)
{
    __local float As[TK][TILE + 1];
    __local float Bs[TK][TILE + 1];
    const int CIG = CI / G, M = CO / G;
    const int KHW = KH * KW;
    const int K = CIG * KHW;
    const int OHW = OH * OW;
    const int P = N * OHW;
    const int g = get_group_id(2);
    const int m0 = get_group_id(1) * TILE;
    const int p0 = get_group_id(0) * TILE;
    const int tid = get_local_id(0);
    const int tx = tid % TXN, ty = tid / TXN;

    /* the im2col column this work-item stages: fixed for the whole K loop */
    const int bcol = tid % TILE, brow = tid / TILE;
    const int bp = p0 + bcol;
    const int bp_ok = bp < P;
    const int bn = bp_ok ? bp / OHW : 0;
    const int br = bp_ok ? bp % OHW : 0;
    const int bih = (br / OW) * SH - PT;
    const int biw = (br % OW) * SW - PL;
#if LAYOUT_NHWC
    __global const dtype_t* xb = x + bn * IH * IW * CI + g * CIG;
    const int KWC = KW * CIG;
#else
    __global const dtype_t* xb = x + (bn * CI + g * CIG) * IH * IW;
#endif
    /* the weight rows this work-item stages */
    const int acol = tid % TK, arow = tid / TK;
    __global const dtype_t* wg = w + g * M * K;

    float acc[RM][RN];
    for (int i = 0; i < RM; ++i)
        for (int j = 0; j < RN; ++j) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += TK) {
        /* stage W[m0 .. m0+TILE, k0 .. k0+TK) */
        const int ka = k0 + acol;
        int woff = ka;
#if LAYOUT_NHWC
        if (ka < K) {
            const int kh = ka / KWC, rem = ka % KWC;
            woff = (rem % CIG) * KHW + kh * KW + rem / CIG;
        }
#endif
        for (int s = 0; s < APASS; ++s) {
            const int m = arow + s * AROWS;
            As[acol][m] = (ka < K && m0 + m < M) ? LD(wg, (m0 + m) * K + woff) : 0.0f;
        }
        /* stage X[k0 .. k0+TK, p0 .. p0+TILE) */
        for (int s = 0; s < BPASS; ++s) {
            const int kr = brow + s * BROWS;
            const int kb = k0 + kr;
            float v = 0.0f;
            if (bp_ok && kb < K) {
#if LAYOUT_NHWC
                const int kh = kb / KWC, rem = kb % KWC;
                const int kw = rem / CIG, ci = rem % CIG;
#else
                const int ci = kb / KHW, rem = kb % KHW;
                const int kh = rem / KW, kw = rem % KW;
#endif
                const int ih = bih + kh * DH, iw = biw + kw * DW;
                if (ih >= 0 && ih < IH && iw >= 0 && iw < IW) {
#if LAYOUT_NHWC
                    v = LD(xb, (ih * IW + iw) * CI + ci);
#else
                    v = LD(xb, (ci * IH + ih) * IW + iw);
#endif
                }
            }
            Bs[kr][bcol] = v;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < TK; ++kk) {
            float a[RM], b[RN];
            for (int i = 0; i < RM; ++i) a[i] = As[kk][ty + i * TYM];
            for (int j = 0; j < RN; ++j) b[j] = Bs[kk][tx + j * TXN];
            for (int i = 0; i < RM; ++i)
                for (int j = 0; j < RN; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    for (int j = 0; j < RN; ++j) {
        const int p = p0 + tx + j * TXN;
        if (p >= P) continue;
        const int n = p / OHW, r = p % OHW;
        for (int i = 0; i < RM; ++i) {
            const int m = m0 + ty + i * TYM;
            if (m >= M) continue;
            const int co = g * M + m;
            float v = acc[i][j];
            if (bias) v += bias[co];
#if LAYOUT_NHWC
            ST(v, y, (n * OHW + r) * CO + co);
#else
            ST(v, y, (n * CO + co) * OHW + r);
#endif
        }
    }
}
#endif
