/* qpool2d.c: int8/uint8 max and average pooling for hal's CPU backend (ONNX semantics).
 *
 * Same entry points and argument order as pool2d.c, plus the zero point last:
 *   max: the largest raw integer of the window (first one on ties, as pool2d.c), and its
 *        per-plane index ih * IW + iw when indices is not NULL;
 *   avg: saturate(round_half_even(sum(q - zp) / divisor) + zp), padding counting as the
 *        zero point; the divisor as in pool2d.c (DIVISOR, or the taps inside the padded
 *        extent with COUNT_INCLUDE_PAD, or the valid taps).
 * Integer sums are exact; the one division is in double, whose correctly rounded quotient
 * keeps every tie of sum / divisor exact, so nearbyint (to nearest, ties to even) is
 * ONNX's rounding. Portable C: one output element per step, threads over output rows.
 *
 * -D DTYPE_UINT8=0|1 selects int8 or uint8; LAYOUT_NHWC as everywhere.
 */
#include "hal_prelude.h"

#ifndef DTYPE_UINT8
#define DTYPE_UINT8 0
#endif
#if DTYPE_UINT8
typedef uint8_t q_t;
#define Q_MIN 0
#define Q_MAX 255
#else
typedef int8_t q_t;
#define Q_MIN (-128)
#define Q_MAX 127
#endif

/* The valid taps [k0, k1) of output o along one axis, and the taps inside the padded extent. */
static inline void qpool_axis(hal_int o, hal_int I, hal_int K, hal_int S, hal_int P0, hal_int P1, hal_int D,
                              hal_int *k0, hal_int *k1, hal_int *padded) {
    hal_int lo = -1, hi = 0, pc = 0;
    const hal_int start = o * S - P0;
    for (hal_int k = 0; k < K; k++) {
        const hal_int i = start + k * D;
        if (i >= 0 && i < I) {
            if (lo < 0) lo = k;
            hi = k + 1;
        }
        if (i >= -P0 && i < I + P1) pc++;
    }
    *k0 = lo < 0 ? 0 : lo;
    *k1 = lo < 0 ? 0 : hi;
    *padded = pc;
}

static inline hal_int qpool_at(hal_int n, hal_int c, hal_int h, hal_int w, hal_int C, hal_int H, hal_int W) {
#if LAYOUT_NHWC
    return ((n * H + h) * W + w) * C + c;
#else
    return ((n * C + c) * H + h) * W + w;
#endif
}

static void qpool_run(const int MAX, const q_t *x, q_t *y, int64_t *indices, hal_int N, hal_int C, hal_int IH,
                      hal_int IW, hal_int OH, hal_int OW, hal_int KH, hal_int KW, hal_int SH, hal_int SW, hal_int PT,
                      hal_int PB, hal_int PL, hal_int PR, hal_int DH, hal_int DW, hal_int DIVISOR, hal_int CIP,
                      hal_int ZP) {
    const hal_int rows = N * C * OH;
#pragma omp parallel for schedule(static) num_threads(hal_threads_for(rows * OW * KH * KW))
    for (hal_int r = 0; r < rows; r++) {
        const hal_int oh = r % OH, c = (r / OH) % C, n = r / (OH * C);
        hal_int kh0, kh1, hpad;
        qpool_axis(oh, IH, KH, SH, PT, PB, DH, &kh0, &kh1, &hpad);
        for (hal_int ow = 0; ow < OW; ow++) {
            hal_int kw0, kw1, wpad;
            qpool_axis(ow, IW, KW, SW, PL, PR, DW, &kw0, &kw1, &wpad);
            const hal_int out = qpool_at(n, c, oh, ow, C, OH, OW);
            if (MAX) {
                int best = Q_MIN - 1; /* below every value: the first valid tap always wins */
                hal_int best_i = 0;
                for (hal_int kh = kh0; kh < kh1; kh++) {
                    const hal_int ih = oh * SH - PT + kh * DH;
                    for (hal_int kw = kw0; kw < kw1; kw++) {
                        const hal_int iw = ow * SW - PL + kw * DW;
                        const int v = x[qpool_at(n, c, ih, iw, C, IH, IW)];
                        if (v > best) {
                            best = v;
                            best_i = ih * IW + iw;
                        }
                    }
                }
                y[out] = (q_t)best;
                if (indices) indices[out] = best_i;
            } else {
                int64_t sum = 0;
                for (hal_int kh = kh0; kh < kh1; kh++) {
                    const hal_int ih = oh * SH - PT + kh * DH;
                    for (hal_int kw = kw0; kw < kw1; kw++) {
                        const hal_int iw = ow * SW - PL + kw * DW;
                        sum += (int64_t)x[qpool_at(n, c, ih, iw, C, IH, IW)] - ZP;
                    }
                }
                const hal_int divisor = DIVISOR > 0 ? DIVISOR : CIP ? hpad * wpad : (kh1 - kh0) * (kw1 - kw0);
                double v = nearbyint((double)sum / (double)divisor) + (double)ZP;
                v = v < Q_MIN ? Q_MIN : v > Q_MAX ? Q_MAX : v;
                y[out] = (q_t)v;
            }
        }
    }
}

HAL_EXPORT void qpool2d_max(const q_t *x, q_t *y, int64_t *indices, hal_int N, hal_int C, hal_int IH, hal_int IW,
                            hal_int OH, hal_int OW, hal_int KH, hal_int KW, hal_int SH, hal_int SW, hal_int PT,
                            hal_int PB, hal_int PL, hal_int PR, hal_int DH, hal_int DW, hal_int DIVISOR,
                            hal_int COUNT_INCLUDE_PAD, hal_int ZP) {
    qpool_run(1, x, y, indices, N, C, IH, IW, OH, OW, KH, KW, SH, SW, PT, PB, PL, PR, DH, DW, DIVISOR,
              COUNT_INCLUDE_PAD, ZP);
}

HAL_EXPORT void qpool2d_avg(const q_t *x, q_t *y, int64_t *indices, hal_int N, hal_int C, hal_int IH, hal_int IW,
                            hal_int OH, hal_int OW, hal_int KH, hal_int KW, hal_int SH, hal_int SW, hal_int PT,
                            hal_int PB, hal_int PL, hal_int PR, hal_int DH, hal_int DW, hal_int DIVISOR,
                            hal_int COUNT_INCLUDE_PAD, hal_int ZP) {
    (void)indices;
    qpool_run(0, x, y, NULL, N, C, IH, IW, OH, OW, KH, KW, SH, SW, PT, PB, PL, PR, DH, DW, DIVISOR,
              COUNT_INCLUDE_PAD, ZP);
}
