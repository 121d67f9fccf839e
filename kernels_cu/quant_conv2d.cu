// int8/uint8 2-D convolution (ONNX QLinearConv and ConvInteger), the CUDA twin of
// kernels_c/qconv2d.c and kernels_cl/qconv2d.cl:
//
//   acc[n, co, oh, ow] = sum over (ci, kh, kw) of (x - XZP) * (w - w_zp[co]) + bias[co]
//
// in 64-bit integers (exact; a padded tap is x == XZP and adds 0), then
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
//           thread, 32-bit offsets and int32 sums where they cannot overflow (below).
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

// element (n, c, h, w) of an N x C x H x W tensor in the build's layout
__device__ __forceinline__ long long qconv_at(long long n, int c, int h, int w, int C, int H, int W) {
#if LAYOUT_NHWC
    return ((n * H + h) * W + w) * C + c;
#else
    return ((n * C + c) * H + h) * W + w;
#endif
}

extern "C" __global__ void __launch_bounds__(QCONV_THREADS)
    qconv2d(const qx_t* __restrict__ x, const qw_t* __restrict__ w, const int* __restrict__ bias, qy_t* __restrict__ y,
            const int* __restrict__ w_zp, const float* __restrict__ multiplier, int N, int CI, int IH, int IW, int CO,
            int OH, int OW, int KH, int KW, int SH, int SW, int PT, int PL, int DH, int DW, int G, int XZP, int YZP) {
    const int cig = CI / G, cog = CO / G;
    const long long total = (long long)N * CO * OH * OW;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        // the output's (n, co, oh, ow) in the build's layout order, so a warp writes adjacent bytes
#if LAYOUT_NHWC
        const int co = (int)(i % CO);
        long long t = i / CO;
        const int ow = (int)(t % OW);
        t /= OW;
        const int oh = (int)(t % OH);
        const long long n = t / OH;
#else
        const int ow = (int)(i % OW);
        long long t = i / OW;
        const int oh = (int)(t % OH);
        t /= OH;
        const int co = (int)(t % CO);
        const long long n = t / CO;
#endif
        const int ci0 = (co / cog) * cig;
        const long long wz = w_zp[co];
        long long acc = bias ? bias[co] : 0;
        for (int ci = 0; ci < cig; ++ci) {
            for (int kh = 0; kh < KH; ++kh) {
                const int ih = oh * SH - PT + kh * DH;
                if (ih < 0 || ih >= IH) continue;  // padding is the zero point: (XZP - XZP) = 0
                for (int kw = 0; kw < KW; ++kw) {
                    const int iw = ow * SW - PL + kw * DW;
                    if (iw < 0 || iw >= IW) continue;
                    const long long xv = (long long)x[qconv_at(n, ci0 + ci, ih, iw, CI, IH, IW)] - XZP;
                    const long long wv = (long long)w[(((long long)co * cig + ci) * KH + kh) * KW + kw] - wz;
                    acc += xv * wv;
                }
            }
        }
#if Y_KIND == 0
        y[i] = (int)acc;
#else
        double v = rint((double)acc * (double)multiplier[co]) + (double)YZP;
        v = v < QY_MIN ? QY_MIN : (v > QY_MAX ? QY_MAX : v);
        y[i] = (qy_t)v;
#endif
    }
}

// qconv2d_co4: the same result, a thread computing 4 consecutive output channels of one
// output pixel (each input tap loaded once for the 4), with 32-bit offsets inside one image
// (the launcher checks CI * IH * IW and CO * cig * KH * KW < 2^31, and cog % 4 == 0 so the 4
// channels share one group). The products sum in int32 where no sum can overflow (cig * KH *
// KW * 255^2 < 2^31: ACC int), else in int64; the bias is added in int64 after.
template <typename ACC>
__device__ __forceinline__ void qconv_co4(const qx_t* __restrict__ x, const qw_t* __restrict__ w,
                                          const int* __restrict__ bias, qy_t* __restrict__ y,
                                          const int* __restrict__ w_zp, const float* __restrict__ multiplier, int N,
                                          int CI, int IH, int IW, int CO, int OH, int OW, int KH, int KW, int SH,
                                          int SW, int PT, int PL, int DH, int DW, int G, int XZP, int YZP) {
    const int cig = CI / G, cog = CO / G, KK = KH * KW, CQ = CO / 4;
    const long long total = (long long)N * CQ * OH * OW;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
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
        const int co0 = 4 * cq, ci0 = (co0 / cog) * cig;
        const qx_t* xn = x + n * CI * IH * IW;
        const qw_t* wc = w + (long long)co0 * cig * KK;  // the 4 channels' weights, cig * KK apart
        int wz[4];
        ACC acc[4] = {0, 0, 0, 0};
#pragma unroll
        for (int k = 0; k < 4; ++k) wz[k] = w_zp[co0 + k];
        for (int ci = 0; ci < cig; ++ci) {
            for (int kh = 0; kh < KH; ++kh) {
                const int ih = oh * SH - PT + kh * DH;
                if (ih < 0 || ih >= IH) continue;  // padding is the zero point: (XZP - XZP) = 0
                for (int kw = 0; kw < KW; ++kw) {
                    const int iw = ow * SW - PL + kw * DW;
                    if (iw < 0 || iw >= IW) continue;
#if LAYOUT_NHWC
                    const int xv = (int)xn[(ih * IW + iw) * CI + ci0 + ci] - XZP;
#else
                    const int xv = (int)xn[((ci0 + ci) * IH + ih) * IW + iw] - XZP;
#endif
                    const int wo = ci * KK + kh * KW + kw;
#pragma unroll
                    for (int k = 0; k < 4; ++k) acc[k] += (ACC)xv * (ACC)((int)wc[k * cig * KK + wo] - wz[k]);
                }
            }
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const long long a = (long long)acc[k] + (bias ? bias[co0 + k] : 0);
#if LAYOUT_NHWC
            const long long o = (((n * OH + oh) * OW + ow) * CO) + co0 + k;
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

extern "C" __global__ void __launch_bounds__(QCONV_THREADS)
    qconv2d_co4(const qx_t* __restrict__ x, const qw_t* __restrict__ w, const int* __restrict__ bias,
                qy_t* __restrict__ y, const int* __restrict__ w_zp, const float* __restrict__ multiplier, int N, int CI,
                int IH, int IW, int CO, int OH, int OW, int KH, int KW, int SH, int SW, int PT, int PL, int DH, int DW,
                int G, int XZP, int YZP) {
    if ((long long)(CI / G) * KH * KW * 255 * 255 < (1LL << 31))
        qconv_co4<int>(x, w, bias, y, w_zp, multiplier, N, CI, IH, IW, CO, OH, OW, KH, KW, SH, SW, PT, PL, DH, DW, G,
                       XZP, YZP);
    else
        qconv_co4<long long>(x, w, bias, y, w_zp, multiplier, N, CI, IH, IW, CO, OH, OW, KH, KW, SH, SW, PT, PL, DH,
                             DW, G, XZP, YZP);
}
