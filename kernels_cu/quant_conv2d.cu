// int8/uint8 2-D convolution (ONNX QLinearConv and ConvInteger), the CUDA twin of
// kernels_c/qconv2d.c and kernels_cl/qconv2d.cl:
//
//   acc[n, co, oh, ow] = sum over (ci, kh, kw) of (x - XZP) * (w - w_zp[co]) + bias[co]
//
// exactly (int64, or int32 where no sum can overflow; a padded tap is x == XZP and adds 0), then
//   Y_KIND 0 (ConvInteger): acc stored as int32 (its low 32 bits, as the C kernel);
//   Y_KIND 1/2 (QLinearConv, int8/uint8 out): saturate(rint(acc * multiplier[co]) + YZP),
//     the product in double (IEEE, rounded to nearest even as the C kernel's nearbyint).
// Groups, stride, padding and dilation as conv2d; weights OIHW; x and y NCHW or NHWC
// (LAYOUT_NHWC, hal_prelude.cuh). bias and, for ConvInteger, multiplier may be NULL.
//
// Macros: DTYPE_UINT8 [0] the input's type, W_UINT8 [0] the weights', Y_KIND [0] the
// output's, QCONV_THREADS [256] (threads per block; the launcher launches with that many).
//
// Entry points (the contract's argument order, docs/ARCHITECTURE.md):
//   qconv2d(x, w, bias, y, w_zp, multiplier, N, CI, IH, IW, CO, OH, OW, KH, KW, SH, SW, PT,
//           PL, DH, DW, G, XZP, YZP): one thread per output element, a grid-stride loop.
//   qconv2d_co4 (same arguments; C_out per group a multiple of 4): 4 output channels per
//           thread, each input tap loaded once for the 4, 32-bit offsets inside an image.
// Both are qconv_body (below) and sum in int32 where no sum can overflow.
// Correct, not fast: no tiling, no tensor cores (IMMA), no tuning parameters; outside the
// conv2d tuning family (docs/tuning.md), so editing it stales no measured entry.
#include "hal_prelude.cuh"

#ifndef DTYPE_UINT8
#define DTYPE_UINT8 0
#endif
#ifndef W_UINT8
#define W_UINT8 0
#endif
#ifndef Y_KIND
#define Y_KIND 0
#endif
#ifndef QCONV_THREADS
#define QCONV_THREADS 256
#endif
#if DTYPE_UINT8
typedef unsigned char qx_t;
#else
typedef signed char qx_t;
#endif
#if W_UINT8
typedef unsigned char qw_t;
#else
typedef signed char qw_t;
#endif
#if Y_KIND == 0
typedef int qy_t;
#elif Y_KIND == 1
typedef signed char qy_t;
#define QY_MIN (-128)
#define QY_MAX 127
#else
typedef unsigned char qy_t;
#define QY_MIN 0
#define QY_MAX 255
#endif

#define QCONV_ARGS                                                                                            \
    const qx_t *__restrict__ x, const qw_t *__restrict__ w, const int *__restrict__ bias, qy_t *__restrict__ y, \
        const int *__restrict__ w_zp, const float *__restrict__ multiplier, int N, int CI, int IH, int IW, int CO, \
        int OH, int OW, int KH, int KW, int SH, int SW, int PT, int PL, int DH, int DW, int G, int XZP, int YZP
#define QCONV_PASS x, w, bias, y, w_zp, multiplier, N, CI, IH, IW, CO, OH, OW, KH, KW, SH, SW, PT, PL, DH, DW, G, XZP, YZP

// T output channels of one output pixel per thread (T divides C_out per group, so they share
// one group and each input tap is loaded once for the T). IDX: the type of offsets inside one
// image and into the weights (int where the launcher checks CI * IH * IW and CO * cig * KH * KW
// < 2^31, else long long). ACC: the type the products sum in (int where cig * KH * KW * 255^2 <
// 2^31, so no sum can overflow; else long long); the bias is added in 64 bits after.
template <int T, typename IDX, typename ACC>
__device__ __forceinline__ void qconv_body(QCONV_ARGS) {
    const int cig = CI / G, cog = CO / G, KK = KH * KW, CQ = CO / T;
    const long long total = (long long)N * CQ * OH * OW;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        // the output's (n, channel group, oh, ow) in the build's layout order
#if LAYOUT_NHWC
        const int cq = (int)(i % CQ);
        long long t = i / CQ;
        const int ow = (int)(t % OW);
        t /= OW;
        const int oh = (int)(t % OH);
        const long long n = t / OH;
#else
        const int ow = (int)(i % OW);
        long long t = i / OW;
        const int oh = (int)(t % OH);
        t /= OH;
        const int cq = (int)(t % CQ);
        const long long n = t / CQ;
#endif
        const int co0 = T * cq, ci0 = (co0 / cog) * cig;
        const qx_t* xn = x + n * CI * IH * IW;
        const qw_t* wc = w + (long long)co0 * cig * KK;  // the T channels' weights, cig * KK apart
        int wz[T];
        ACC acc[T];
#pragma unroll
        for (int k = 0; k < T; ++k) wz[k] = w_zp[co0 + k], acc[k] = 0;
        for (int ci = 0; ci < cig; ++ci) {
            for (int kh = 0; kh < KH; ++kh) {
                const int ih = oh * SH - PT + kh * DH;
                if (ih < 0 || ih >= IH) continue;  // padding is the zero point: (XZP - XZP) = 0
                for (int kw = 0; kw < KW; ++kw) {
                    const int iw = ow * SW - PL + kw * DW;
                    if (iw < 0 || iw >= IW) continue;
#if LAYOUT_NHWC
                    const int xv = (int)xn[((IDX)ih * IW + iw) * CI + ci0 + ci] - XZP;
#else
                    const int xv = (int)xn[((IDX)(ci0 + ci) * IH + ih) * IW + iw] - XZP;
#endif
                    const IDX wo = (IDX)ci * KK + kh * KW + kw;
#pragma unroll
                    for (int k = 0; k < T; ++k) acc[k] += (ACC)xv * (ACC)((int)wc[(IDX)k * cig * KK + wo] - wz[k]);
                }
            }
        }
#pragma unroll
        for (int k = 0; k < T; ++k) {
            const long long a = (long long)acc[k] + (bias ? bias[co0 + k] : 0);
#if LAYOUT_NHWC
            const long long o = ((n * OH + oh) * OW + ow) * CO + co0 + k;
#else
            const long long o = ((n * CO + co0 + k) * OH + oh) * OW + ow;
#endif
#if Y_KIND == 0
            y[o] = (int)a;
#else
            double v = rint((double)a * (double)multiplier[co0 + k]) + (double)YZP;
            v = v < QY_MIN ? QY_MIN : (v > QY_MAX ? QY_MAX : v);
            y[o] = (qy_t)v;
#endif
        }
    }
}

// int32 sums when no window's sum of products can leave int32
__device__ __forceinline__ bool qconv_narrow(int CI, int G, int KH, int KW) {
    return (long long)(CI / G) * KH * KW * 255 * 255 < (1LL << 31);
}

extern "C" __global__ void __launch_bounds__(QCONV_THREADS) qconv2d(QCONV_ARGS) {
    if (qconv_narrow(CI, G, KH, KW))
        qconv_body<1, long long, int>(QCONV_PASS);
    else
        qconv_body<1, long long, long long>(QCONV_PASS);
}

extern "C" __global__ void __launch_bounds__(QCONV_THREADS) qconv2d_co4(QCONV_ARGS) {
    if (qconv_narrow(CI, G, KH, KW))
        qconv_body<4, int, int>(QCONV_PASS);
    else
        qconv_body<4, int, long long>(QCONV_PASS);
}
