/* qconv2d.c: int8/uint8 convolution for hal's CPU backend: ONNX QLinearConv and ConvInteger.
 *
 *   acc[n, co, oh, ow] = sum over (ci, kh, kw) of (x - XZP) * (w - w_zp[co]) + bias[co]
 *
 * in 64-bit integers (exact), then
 *   Y_KIND 0 (ConvInteger): acc stored as int32;
 *   Y_KIND 1/2 (QLinearConv, int8/uint8 out):
 *       saturate(round_half_even(acc * multiplier[co]) + YZP),
 * the product in double (nearbyint: to nearest, ties to even). Groups, stride, padding and
 * dilation as conv2d.c; weights OIHW; x and y in LAYOUT_NHWC or NCHW. Portable C: one
 * output element per step, threads over output rows.
 *
 * -D DTYPE_UINT8=0|1 the input's type, W_UINT8=0|1 the weights', Y_KIND=0|1|2 the output.
 */
#include "hal_prelude.h"

#ifndef DTYPE_UINT8
#define DTYPE_UINT8 0
#endif
#ifndef W_UINT8
#define W_UINT8 0
#endif
#ifndef Y_KIND
#define Y_KIND 0
#endif
#if DTYPE_UINT8
typedef uint8_t qx_t;
#else
typedef int8_t qx_t;
#endif
#if W_UINT8
typedef uint8_t qw_t;
#else
typedef int8_t qw_t;
#endif
#if Y_KIND == 0
typedef int32_t qy_t;
#elif Y_KIND == 1
typedef int8_t qy_t;
#define QY_MIN (-128)
#define QY_MAX 127
#else
typedef uint8_t qy_t;
#define QY_MIN 0
#define QY_MAX 255
#endif

static inline hal_int qconv_at(hal_int n, hal_int c, hal_int h, hal_int w, hal_int C, hal_int H, hal_int W) {
#if LAYOUT_NHWC
    return ((n * H + h) * W + w) * C + c;
#else
    return ((n * C + c) * H + h) * W + w;
#endif
}

HAL_EXPORT void qconv2d(const qx_t *x, const qw_t *w, const int32_t *bias, qy_t *y, const int32_t *w_zp,
                        const float *multiplier, hal_int N, hal_int CI, hal_int IH, hal_int IW, hal_int CO,
                        hal_int OH, hal_int OW, hal_int KH, hal_int KW, hal_int SH, hal_int SW, hal_int PT, hal_int PL,
                        hal_int DH, hal_int DW, hal_int G, hal_int XZP, hal_int YZP) {
    const hal_int cig = CI / G, cog = CO / G;
    const hal_int rows = N * CO * OH;
#if Y_KIND == 0
    (void)multiplier;
    (void)YZP;
#endif
#pragma omp parallel for schedule(static) num_threads(hal_threads_for(rows * OW * cig * KH * KW))
    for (hal_int r = 0; r < rows; r++) {
        const hal_int oh = r % OH, co = (r / OH) % CO, n = r / (OH * CO);
        const hal_int ci0 = (co / cog) * cig;
        const int64_t wz = w_zp[co];
        for (hal_int ow = 0; ow < OW; ow++) {
            int64_t acc = bias ? bias[co] : 0;
            for (hal_int ci = 0; ci < cig; ci++) {
                for (hal_int kh = 0; kh < KH; kh++) {
                    const hal_int ih = oh * SH - PT + kh * DH;
                    if (ih < 0 || ih >= IH) continue; /* padding is the zero point: (XZP - XZP) = 0 */
                    for (hal_int kw = 0; kw < KW; kw++) {
                        const hal_int iw = ow * SW - PL + kw * DW;
                        if (iw < 0 || iw >= IW) continue;
                        const int64_t xv = (int64_t)x[qconv_at(n, ci0 + ci, ih, iw, CI, IH, IW)] - XZP;
                        const int64_t wv = (int64_t)w[((co * cig + ci) * KH + kh) * KW + kw] - wz;
                        acc += xv * wv;
                    }
                }
            }
            const hal_int out = qconv_at(n, co, oh, ow, CO, OH, OW);
#if Y_KIND == 0
            y[out] = (int32_t)acc;
#else
            double v = nearbyint((double)acc * (double)multiplier[co]) + (double)YZP;
            v = v < QY_MIN ? QY_MIN : v > QY_MAX ? QY_MAX : v;
            y[out] = (qy_t)v;
#endif
        }
    }
}
