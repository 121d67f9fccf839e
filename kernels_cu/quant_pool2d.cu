// int8/uint8 2-D max and average pooling (ONNX MaxPool on integers, QLinearAveragePool
// with equal input and output scales), the CUDA twin of kernels_cl/qpool2d.cl and
// kernels_c/qpool2d.c.
//
// Macros: DTYPE_UINT8 [0] (1: uint8, else int8), LAYOUT_NHWC (hal_prelude.cuh),
// QPOOL_THREADS [256] (threads per block; the launcher launches with that many).
//
// Entry points (pool2d.cu's contract signature plus the zero point ZP last), one thread
// per output element, a grid-stride loop:
//   pool2d_max: the largest raw integer of the window; the first one on ties (a later tap is
//       taken only when strictly greater), so its per-plane index ih * IW + iw is the first
//       maximum's, as for floats; indices may be NULL. Padding is never taken.
//   pool2d_avg: saturate(rint(sum(q - ZP) / divisor) + ZP) over the taps inside the input
//       (a padded tap is q == ZP, adding 0); the divisor is DIVISOR if nonzero, else the taps
//       inside the padded extent with COUNT_INCLUDE_PAD, else the taps inside the input. The
//       sum is an exact int; the division is in double, whose correctly rounded quotient keeps
//       every tie exact (|sum| < 2^31, divisor < 2^31), so rint (ties to even) is ONNX's rounding.
// Windows of up to QPOOL_TAPS [9] taps (3x3 and smaller) load every tap at once, from an
// address clamped into the input, and then discard the taps outside by a select (SASS: the
// 9 loads with no branch between; the general loop, for larger windows, has a branch per
// tap). On the H200 that hardly changed the time (session 11, max 3x3/2 on 64x64x112x112
// int8: NCHW 0.182 -> 0.195 ms, NHWC 0.246 -> 0.223 ms; 8 % of copy, 5-7x the OpenCL
// kernels' time): one output per thread costs a few hundred instructions of index and
// address arithmetic, which bounds it. Several outputs per thread would amortise it.
// Fused ReLU does not apply (hal's quantized ops take none). Not tuned: no parameters.
//
// Outside the pool2d tuning family (docs/tuning.md): it takes none of pool2d.cu's
// parameters, so editing it does not stale the measured float pooling entries.
#include "hal_prelude.cuh"

#ifndef DTYPE_UINT8
#define DTYPE_UINT8 0
#endif
#ifndef QPOOL_THREADS
#define QPOOL_THREADS 256
#endif
#ifndef QPOOL_TAPS
#define QPOOL_TAPS 9
#endif
#if DTYPE_UINT8
typedef unsigned char q_t;
#define Q_MIN 0
#define Q_MAX 255
#else
typedef signed char q_t;
#define Q_MIN (-128)
#define Q_MAX 127
#endif

// the output element i's (n, c, oh, ow), and where its plane starts with the input's row and
// column strides (elements). I is the index type: unsigned int where the output has fewer
// than 2^31 elements (the launchers' case; a 64-bit division or remainder costs tens of
// instructions, and this kernel does four per output), long long otherwise.
struct QPos {
    int n, c, oh, ow;
    long long base, rs, cs;
};
template <typename I>
__device__ __forceinline__ QPos qpos(I i, int C, int IH, int IW, int OH, int OW) {
    QPos q;
#if LAYOUT_NHWC
    q.c = (int)(i % (I)C);
    i /= (I)C;
    q.ow = (int)(i % (I)OW);
    i /= (I)OW;
    q.oh = (int)(i % (I)OH);
    q.n = (int)(i / (I)OH);
    q.base = (long long)q.n * IH * IW * C + q.c;
    q.rs = (long long)IW * C;
    q.cs = C;
#else
    q.ow = (int)(i % (I)OW);
    i /= (I)OW;
    q.oh = (int)(i % (I)OH);
    i /= (I)OH;
    q.c = (int)(i % (I)C);
    q.n = (int)(i / (I)C);
    q.base = ((long long)q.n * C + q.c) * IH * IW;
    q.rs = IW;
    q.cs = 1;
#endif
    return q;
}

// The window's first QPOOL_TAPS taps in row-major order, each loaded from an address clamped
// into the input (all loads issued before any is used); v[t] = the tap, or fill where it lies
// outside the input or past the window (t >= KH * KW); pix[t] = its per-plane index.
__device__ __forceinline__ void qpool_taps(const q_t* __restrict__ x, const QPos& q, int h0, int w0, int KH, int KW,
                                           int DH, int DW, int IH, int IW, int fill, int (&v)[QPOOL_TAPS],
                                           int (&pix)[QPOOL_TAPS]) {
    int kh = 0, kw = 0;
#pragma unroll
    for (int t = 0; t < QPOOL_TAPS; ++t) {
        const int ih = h0 + kh * DH, iw = w0 + kw * DW;
        const bool ok = kh < KH && ih >= 0 && ih < IH && iw >= 0 && iw < IW;
        const int ihc = min(max(ih, 0), IH - 1), iwc = min(max(iw, 0), IW - 1);
        const int raw = x[q.base + ihc * q.rs + iwc * q.cs];
        v[t] = ok ? raw : fill;
        pix[t] = ih * IW + iw;
        if (++kw == KW) {
            kw = 0;
            ++kh;
        }
    }
}

#define QPOOL_ARGS                                                                                        \
    const q_t *__restrict__ x, q_t *__restrict__ y, long long *__restrict__ indices, int N, int C, int IH, \
        int IW, int OH, int OW, int KH, int KW, int SH, int SW, int PT, int PB, int PL, int PR, int DH, int DW, \
        int DIVISOR, int COUNT_INCLUDE_PAD, int ZP

#define QPOOL_PASS \
    x, y, indices, N, C, IH, IW, OH, OW, KH, KW, SH, SW, PT, PB, PL, PR, DH, DW, DIVISOR, COUNT_INCLUDE_PAD, ZP

template <typename I>
__device__ __forceinline__ void qpool_max(QPOOL_ARGS) {
    const I total = (I)N * C * OH * OW;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        const QPos q = qpos<I>(i, C, IH, IW, OH, OW);
        const int h0 = q.oh * SH - PT, w0 = q.ow * SW - PL;
        int best = Q_MIN - 1;  // below every value: the first valid tap is taken
        long long bi = 0;
        if (KH * KW <= QPOOL_TAPS) {
            int v[QPOOL_TAPS], pix[QPOOL_TAPS];
            qpool_taps(x, q, h0, w0, KH, KW, DH, DW, IH, IW, Q_MIN - 1, v, pix);
#pragma unroll
            for (int t = 0; t < QPOOL_TAPS; ++t) {
                if (v[t] > best) {
                    best = v[t];
                    bi = pix[t];
                }
            }
        } else {
            for (int kh = 0; kh < KH; ++kh) {
                const int ih = h0 + kh * DH;
                if (ih < 0 || ih >= IH) continue;
                for (int kw = 0; kw < KW; ++kw) {
                    const int iw = w0 + kw * DW;
                    if (iw < 0 || iw >= IW) continue;
                    const int v = x[q.base + ih * q.rs + iw * q.cs];
                    if (v > best) {
                        best = v;
                        bi = (long long)ih * IW + iw;
                    }
                }
            }
        }
        y[i] = (q_t)best;
        if (indices) indices[i] = bi;
    }
}

extern "C" __global__ void __launch_bounds__(QPOOL_THREADS) pool2d_max(QPOOL_ARGS) {
    if ((long long)N * C * OH * OW < (1LL << 31))
        qpool_max<unsigned int>(QPOOL_PASS);
    else
        qpool_max<long long>(QPOOL_PASS);
}

template <typename I>
__device__ __forceinline__ void qpool_avg(QPOOL_ARGS) {
    const I total = (I)N * C * OH * OW;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        const QPos q = qpos<I>(i, C, IH, IW, OH, OW);
        const int h0 = q.oh * SH - PT, w0 = q.ow * SW - PL;
        int sum = 0, rows_in = 0, rows_pad = 0, cols_in = 0, cols_pad = 0;
        for (int kw = 0; kw < KW; ++kw) {
            const int iw = w0 + kw * DW;
            cols_in += iw >= 0 && iw < IW;
            cols_pad += iw >= -PL && iw < IW + PR;
        }
        for (int kh = 0; kh < KH; ++kh) {
            const int ih = h0 + kh * DH;
            rows_pad += ih >= -PT && ih < IH + PB;
            rows_in += ih >= 0 && ih < IH;
        }
        if (KH * KW <= QPOOL_TAPS) {
            int v[QPOOL_TAPS], pix[QPOOL_TAPS];
            qpool_taps(x, q, h0, w0, KH, KW, DH, DW, IH, IW, ZP, v, pix);  // a tap outside adds 0
#pragma unroll
            for (int t = 0; t < QPOOL_TAPS; ++t) sum += v[t] - ZP;
        } else {
            for (int kh = 0; kh < KH; ++kh) {
                const int ih = h0 + kh * DH;
                if (ih < 0 || ih >= IH) continue;
                for (int kw = 0; kw < KW; ++kw) {
                    const int iw = w0 + kw * DW;
                    if (iw >= 0 && iw < IW) sum += (int)x[q.base + ih * q.rs + iw * q.cs] - ZP;
                }
            }
        }
        const int count = DIVISOR > 0 ? DIVISOR : (COUNT_INCLUDE_PAD ? rows_pad * cols_pad : rows_in * cols_in);
        const double r = rint((double)sum / (double)(count > 0 ? count : 1)) + ZP;
        y[i] = (q_t)(r < Q_MIN ? Q_MIN : (r > Q_MAX ? Q_MAX : r));
    }
}

extern "C" __global__ void __launch_bounds__(QPOOL_THREADS) pool2d_avg(QPOOL_ARGS) {
    if ((long long)N * C * OH * OW < (1LL << 31))
        qpool_avg<unsigned int>(QPOOL_PASS);
    else
        qpool_avg<long long>(QPOOL_PASS);
}
