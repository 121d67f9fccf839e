/* Quantized 2-D convolution (ONNX QLinearConv / ConvInteger): qconv2d.
 *
 * Arguments: x, w, bias, y, w_zp, multiplier, N, CI, IH, IW, CO, OH, OW, KH, KW, SH, SW, PT,
 * PL, DH, DW, G, X_ZP, Y_ZP (conv2d.cl's geometry, then the two per-tensor zero points).
 *   x           int8 / uint8 activations (DTYPE_INT8 / DTYPE_UINT8), NCHW or NHWC
 *   w           int8 / uint8 weights (W_UINT8 0 | 1), OIHW (CO, CI/G, KH, KW)
 *   bias        int32 (CO) or NULL
 *   y           Y_KIND 0: int32 accumulator (ConvInteger); 1: int8; 2: uint8 (QLinearConv)
 *   w_zp        int32 (CO), the weights' zero point per output channel
 *   multiplier  float32 (CO) = x_scale * w_scale[co] / y_scale, NULL when Y_KIND == 0
 * acc = sum over the window and the group's input channels of (x - X_ZP) * (w - w_zp[co]),
 * in int (padded taps are x == X_ZP, so they add 0), plus bias[co]; then either acc, or
 * saturate(rint((float)acc * multiplier[co]) + Y_ZP). Zero points are subtracted where
 * values are loaded (direct) or staged (GEMM); products of such 9-bit values and their sums
 * use mad24 / int arithmetic.
 *
 * CONV_ALGO (the backend resolves the schema's ALGO per call), as conv2d.cl:
 *   1  direct: one work-item = VEC outputs, along OW in NCHW, along C_out in NHWC
 *      (depthwise, group-uniform and per-lane paths in NHWC).
 *   2  implicit GEMM with local-memory tiles: Y[m, p] = sum_k W[m, k] X[k, p] per group,
 *      k = (ci, kh, kw) in NCHW, (kh, kw, ci) in NHWC; TILE x TK slices of the centred
 *      weights and of the centred on-the-fly im2col matrix are staged as int in groups of
 *      four consecutive k (int4), so the inner loop is 4-term int dot products; each
 *      work-item accumulates 4 x 4 outputs.
 */

#if !(DTYPE_INT8 || DTYPE_UINT8)
#error "qconv2d.cl is built with -DDTYPE_INT8=1 or -DDTYPE_UINT8=1"
#endif
#ifndef CONV_ALGO
#define CONV_ALGO 1
#endif
#ifndef W_UINT8
#define W_UINT8 0
#endif
#ifndef Y_KIND
#define Y_KIND 0
#endif

#if W_UINT8
typedef uchar wtype_t;
#else
typedef char wtype_t;
#endif
#define LDW(p, i) ((int)(p)[(i)])

#if Y_KIND == 0
typedef int ytype_t;
#elif Y_KIND == 1
typedef char ytype_t;
#define CONVERT_Y_SAT(v) convert_char_sat(v)
#elif Y_KIND == 2
typedef uchar ytype_t;
#define CONVERT_Y_SAT(v) convert_uchar_sat(v)
#else
#error "Y_KIND must be 0 (int32), 1 (int8) or 2 (uint8)"
#endif

/* The one epilogue: bias, then the int32 accumulator or the requantized value. rint rounds
 * half to even; the sum with Y_ZP is exact below 2^24 and saturates in the conversion beyond
 * (float to int8/uint8 conversions with _sat clamp, and the value is already integral). */
inline ytype_t qconv_out(int acc, int co, __global const int* bias, __global const float* multiplier, int Y_ZP)
{
    if (bias) acc += bias[co];
#if Y_KIND == 0
    return acc;
#else
    return CONVERT_Y_SAT(rint((float)acc * multiplier[co]) + (float)Y_ZP);
#endif
}

#define QCONV_ARGS                                                                          \
    __global const qtype_t* restrict x, __global const wtype_t* restrict w,                 \
    __global const int* restrict bias, __global ytype_t* restrict y,                        \
    __global const int* restrict w_zp, __global const float* restrict multiplier,           \
    int N, int CI, int IH, int IW, int CO, int OH, int OW, int KH, int KW,                  \
    int SH, int SW, int PT, int PL, int DH, int DW, int G, int X_ZP, int Y_ZP

#if CONV_ALGO == 1
/* ------------------------------------------------------------------------------------
 * direct
 * ---------------------------------------------------------------------------------- */

#if !LAYOUT_NHWC

/* x - X_ZP for the VEC taps iw = iwb + j * SW of one row; 0 where a tap is padding */
inline intV xtaps(__global const qtype_t* row, int iwb, int SW, int IW, int nvalid, int X_ZP)
{
    if (nvalid == VEC && iwb >= 0 && iwb + VEC * SW - 1 < IW) {
        if (SW == 1) return LDQV(row, iwb) - X_ZP;
        if (SW == 2) return LDQ2V_EVEN(row, iwb) - X_ZP;
    }
    int tmp[VEC];
    for (int j = 0; j < VEC; ++j) {
        const int iw = iwb + j * SW;
        tmp[j] = (j < nvalid && iw >= 0 && iw < IW) ? LDQ(row, iw) - X_ZP : 0;
    }
    return PRIV_LDV(tmp);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void qconv2d(QCONV_ARGS)
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
    const int wz = w_zp[co];
    __global const wtype_t* wp = w + co * CIG * KH * KW;
    intV acc = (intV)0;
    for (int ci = 0; ci < CIG; ++ci) {
        __global const qtype_t* xp = x + (n * CI + ci0 + ci) * IH * IW;
        for (int kh = 0; kh < KH; ++kh) {
            const int ih = h0 + kh * DH;
            if (ih < 0 || ih >= IH) continue;
            __global const qtype_t* row = xp + ih * IW;
            for (int kw = 0; kw < KW; ++kw) {
                const int wv = LDW(wp, (ci * KH + kh) * KW + kw) - wz;
                acc = mad24(xtaps(row, w0 + kw * DW, SW, IW, nvalid, X_ZP), (intV)wv, acc);
            }
        }
    }
    int av[VEC];
    PRIV_STV(acc, av);
    const int o = ((n * CO + co) * OH + oh) * OW + ow0;
    for (int j = 0; j < nvalid; ++j) y[o + j] = qconv_out(av[j], co, bias, multiplier, Y_ZP);
}

#else /* NHWC */

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void qconv2d(QCONV_ARGS)
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
    int out[VEC];

    if (CIG == 1 && COG == 1) {
        /* depthwise, multiplier 1: lane j reads input channel c0 + j */
        int wz[VEC];
        for (int j = 0; j < VEC; ++j) wz[j] = j < nvalid ? w_zp[c0 + j] : 0;
        intV acc = (intV)0;
        for (int kh = 0; kh < KH; ++kh) {
            const int ih = h0 + kh * DH;
            if (ih < 0 || ih >= IH) continue;
            for (int kw = 0; kw < KW; ++kw) {
                const int iw = w0 + kw * DW;
                if (iw < 0 || iw >= IW) continue;
                const int p = ((n * IH + ih) * IW + iw) * CI + c0;
                int xv[VEC], wv[VEC];
                for (int j = 0; j < VEC; ++j) {
                    const int ok = j < nvalid;
                    wv[j] = ok ? LDW(w, (c0 + j) * KHW + kh * KW + kw) - wz[j] : 0;
                    if (nvalid < VEC) xv[j] = ok ? LDQ(x, p + j) - X_ZP : 0;
                }
                const intV xs = nvalid == VEC ? LDQV(x, p) - X_ZP : PRIV_LDV(xv);
                acc = mad24(xs, PRIV_LDV(wv), acc);
            }
        }
        PRIV_STV(acc, out);
    } else if (nvalid == VEC && c0 / COG == (c0 + VEC - 1) / COG) {
        /* all lanes in one group: one input value feeds VEC output channels */
        const int ci0 = (c0 / COG) * CIG;
        const int wstride = CIG * KHW;
        int wz[VEC];
        for (int j = 0; j < VEC; ++j) wz[j] = w_zp[c0 + j];
        const intV wzv = PRIV_LDV(wz);
        intV acc = (intV)0;
        for (int kh = 0; kh < KH; ++kh) {
            const int ih = h0 + kh * DH;
            if (ih < 0 || ih >= IH) continue;
            for (int kw = 0; kw < KW; ++kw) {
                const int iw = w0 + kw * DW;
                if (iw < 0 || iw >= IW) continue;
                __global const qtype_t* xp = x + ((n * IH + ih) * IW + iw) * CI + ci0;
                __global const wtype_t* wp = w + c0 * wstride + kh * KW + kw;
                for (int ci = 0; ci < CIG; ++ci) {
                    int wv[VEC];
                    for (int j = 0; j < VEC; ++j) wv[j] = LDW(wp, j * wstride + ci * KHW);
                    acc = mad24((intV)(LDQ(xp, ci) - X_ZP), PRIV_LDV(wv) - wzv, acc);
                }
            }
        }
        PRIV_STV(acc, out);
    } else {
        /* lanes in different groups, or the channel tail: one lane at a time */
        for (int j = 0; j < VEC; ++j) {
            int a = 0;
            const int co = c0 + j;
            if (j < nvalid) {
                const int ci0 = (co / COG) * CIG;
                const int wz = w_zp[co];
                for (int kh = 0; kh < KH; ++kh) {
                    const int ih = h0 + kh * DH;
                    if (ih < 0 || ih >= IH) continue;
                    for (int kw = 0; kw < KW; ++kw) {
                        const int iw = w0 + kw * DW;
                        if (iw < 0 || iw >= IW) continue;
                        __global const qtype_t* xp = x + ((n * IH + ih) * IW + iw) * CI + ci0;
                        for (int ci = 0; ci < CIG; ++ci)
                            a = mad24(LDQ(xp, ci) - X_ZP, LDW(w, (co * CIG + ci) * KHW + kh * KW + kw) - wz, a);
                    }
                }
            }
            out[j] = a;
        }
    }
    for (int j = 0; j < nvalid; ++j) y[o + j] = qconv_out(out[j], c0 + j, bias, multiplier, Y_ZP);
}
#endif /* layout */

#else
/* ------------------------------------------------------------------------------------
 * implicit GEMM, local-memory tiles, int4 dot products
 * ---------------------------------------------------------------------------------- */

#ifndef TILE
#define TILE 32
#endif
#ifndef TK
#define TK 16
#endif
#define TKQ (TK / 4)               /* k quads per slice */
#define RM 4
#define RN 4
#define TXN (TILE / RN)            /* work-items along p */
#define TYM (TILE / RM)            /* work-items along m */
#define GWG (TXN * TYM)            /* work-group size: TILE^2 / 16 */
#define BROWS (GWG / TILE)         /* rows of a TK x TILE slice loaded per pass */
#define BPASS (TK / BROWS)
#define AROWS (GWG / TK)           /* rows (m) of a TILE x TK slice loaded per pass */
#define APASS (TILE / AROWS)

inline int dot4(int4 a, int4 b, int acc)
{
    return mad24(a.w, b.w, mad24(a.z, b.z, mad24(a.y, b.y, mad24(a.x, b.x, acc))));
}

__kernel __attribute__((reqd_work_group_size(GWG, 1, 1)))
void qconv2d(QCONV_ARGS)
{
    /* element (k, m) of a slice lives at [k / 4][m][k % 4]: four consecutive k load as one int4 */
    __local int As[TKQ][TILE + 1][4];
    __local int Bs[TKQ][TILE + 1][4];
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
    __global const qtype_t* xb = x + bn * IH * IW * CI + g * CIG;
    const int KWC = KW * CIG;
#else
    __global const qtype_t* xb = x + (bn * CI + g * CIG) * IH * IW;
#endif
    /* the weight rows this work-item stages, and their zero points */
    const int acol = tid % TK, arow = tid / TK;
    __global const wtype_t* wg = w + g * M * K;
    int azp[APASS];
    for (int s = 0; s < APASS; ++s) {
        const int m = m0 + arow + s * AROWS;
        azp[s] = m < M ? w_zp[g * M + m] : 0;
    }

    int acc[RM][RN];
    for (int i = 0; i < RM; ++i)
        for (int j = 0; j < RN; ++j) acc[i][j] = 0;

    for (int k0 = 0; k0 < K; k0 += TK) {
        /* stage W[m0 .. m0+TILE, k0 .. k0+TK) - w_zp; 0 past K or M */
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
            As[acol >> 2][m][acol & 3] =
                (ka < K && m0 + m < M) ? LDW(wg, (m0 + m) * K + woff) - azp[s] : 0;
        }
        /* stage X[k0 .. k0+TK, p0 .. p0+TILE) - X_ZP; 0 for padding and past K or P */
        for (int s = 0; s < BPASS; ++s) {
            const int kr = brow + s * BROWS;
            const int kb = k0 + kr;
            int v = 0;
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
                    v = LDQ(xb, (ih * IW + iw) * CI + ci) - X_ZP;
#else
                    v = LDQ(xb, (ci * IH + ih) * IW + iw) - X_ZP;
#endif
                }
            }
            Bs[kr >> 2][bcol][kr & 3] = v;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kq = 0; kq < TKQ; ++kq) {
            int4 a[RM], b[RN];
            for (int i = 0; i < RM; ++i) a[i] = vload4(0, As[kq][ty + i * TYM]);
            for (int j = 0; j < RN; ++j) b[j] = vload4(0, Bs[kq][tx + j * TXN]);
            for (int i = 0; i < RM; ++i)
                for (int j = 0; j < RN; ++j) acc[i][j] = dot4(a[i], b[j], acc[i][j]);
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
            const ytype_t v = qconv_out(acc[i][j], co, bias, multiplier, Y_ZP);
#if LAYOUT_NHWC
            y[(n * OHW + r) * CO + co] = v;
#else
            y[(n * CO + co) * OHW + r] = v;
#endif
        }
    }
}
#endif
