// 2-D max and average pooling (hal semantics: see docs/ARCHITECTURE.md).
//
// Macros: DTYPE_HALF, LAYOUT_NHWC (hal_prelude.cuh), POOL_THREADS [256]: threads per
// block (the launcher launches every kernel here with exactly that many), POOL_OCC [0],
// POOL_SPLIT [0], POOL_H2 [1], POOL_H2AVG [1] (below).
//
// Entry points:
//   pool2d_max, pool2d_avg  (contract signature) one thread per output, any spec
//   pool2d_{max,maxi,avg}_tile_{g,k3s2,k2s2}(x, y, indices, WinParams)
//       shared-memory tiles (hal_window.cuh); maxi writes indices; k3s2 / k2s2 are
//       3x3 / 2x2 windows with stride 2 and no dilation, g any window.
#ifndef POOL_THREADS
#define POOL_THREADS 256
#endif
// POOL_OCC [0]: resident threads per multiprocessor the register allocation must allow
// (0: the compiler's choice); more blocks in flight against fewer registers
#ifndef POOL_OCC
#define POOL_OCC 0
#endif
#define POOL_MINB (POOL_OCC / POOL_THREADS > 0 ? POOL_OCC / POOL_THREADS : 1)
// POOL_SPLIT [0]: float32 stride-2 NCHW tiles with even/odd columns apart (hal_window.cuh)
#ifdef POOL_SPLIT
#define WIN_SPLIT POOL_SPLIT
#endif
// POOL_H2 [1]: float16 max pooling without indices in half2 (hal_window.cuh, WIN_H2); the
// launcher reserves the 16-byte guard in front of NCHW tiles whenever it is set
#ifndef POOL_H2
#define POOL_H2 1
#endif
#define WIN_H2 POOL_H2
// POOL_H2AVG [1]: float16 average pooling 2x2/2 and 3x3/2 (even IW) from 32-bit words, two
// outputs per thread, float sums (hal_window.cuh, WIN_H2AVG); the launcher reserves the same
// 16-byte guard in front of NCHW tiles
#ifndef POOL_H2AVG
#define POOL_H2AVG 1
#endif
#define WIN_H2AVG POOL_H2AVG
// the half2 3x3/2 average path needs ~54 registers: at more than 1024 resident threads per SM
// (POOL_OCC 1536 / 2048, tuned for the float path) it would spill, so its kernel stays at 1024
#if DTYPE_HALF && !LAYOUT_NHWC && POOL_H2AVG && POOL_MINB > (1024 / POOL_THREADS > 0 ? 1024 / POOL_THREADS : 1)
#define POOL_MINB_H2AVG (1024 / POOL_THREADS > 0 ? 1024 / POOL_THREADS : 1)
#else
#define POOL_MINB_H2AVG POOL_MINB
#endif

#include "hal_window.cuh"

template <bool MAXP>
__device__ __forceinline__ void pool_direct(const act_t* __restrict__ x, act_t* __restrict__ y,
                                            long long* __restrict__ ind, int N, int C, int IH, int IW, int OH,
                                            int OW, int KH, int KW, int SH, int SW, int PT, int PB, int PL, int PR,
                                            int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD) {
    const long long total = (long long)N * C * OH * OW;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        long long t = i;
        int n, c, oh, ow;
#if LAYOUT_NHWC
        c = (int)(t % C);
        t /= C;
        ow = (int)(t % OW);
        t /= OW;
        oh = (int)(t % OH);
        n = (int)(t / OH);
        const long long base = (long long)n * IH * IW * C + c;
        const long long rs = (long long)IW * C, cs = C;
#else
        ow = (int)(t % OW);
        t /= OW;
        oh = (int)(t % OH);
        t /= OH;
        c = (int)(t % C);
        n = (int)(t / C);
        const long long base = ((long long)n * C + c) * IH * IW;
        const long long rs = IW, cs = 1;
#endif
        const int hs = oh * SH - PT, ws = ow * SW - PL;
        if (MAXP) {
            float best = HAL_NEG_INF;
            long long bi = (long long)first_tap(hs, DH) * IW + first_tap(ws, DW);
            for (int kh = 0; kh < KH; ++kh) {
                const int ih = hs + kh * DH;
                if ((unsigned)ih >= (unsigned)IH) continue;
                for (int kw = 0; kw < KW; ++kw) {
                    const int iw = ws + kw * DW;
                    if ((unsigned)iw >= (unsigned)IW) continue;
                    max_take(ld_act(x + base + ih * rs + iw * cs), (long long)ih * IW + iw, best, bi);
                }
            }
            st_act(y + i, best);
            if (ind) ind[i] = bi;
        } else {
            float sum = 0.0f;
            for (int kh = 0; kh < KH; ++kh) {
                const int ih = hs + kh * DH;
                if ((unsigned)ih >= (unsigned)IH) continue;
                for (int kw = 0; kw < KW; ++kw) {
                    const int iw = ws + kw * DW;
                    if ((unsigned)iw >= (unsigned)IW) continue;
                    sum += ld_act(x + base + ih * rs + iw * cs);
                }
            }
            int div;
            if (DIVISOR > 0)
                div = DIVISOR;
            else if (COUNT_INCLUDE_PAD)
                div = count_taps(hs, KH, DH, -PT, IH + PB) * count_taps(ws, KW, DW, -PL, IW + PR);
            else
                div = count_taps(hs, KH, DH, 0, IH) * count_taps(ws, KW, DW, 0, IW);
            st_act(y + i, sum / (float)div);
        }
    }
}

#define POOL_DIRECT_ARGS                                                                                  \
    const act_t *__restrict__ x, act_t *__restrict__ y, long long *__restrict__ indices, int N, int C, int IH, \
        int IW, int OH, int OW, int KH, int KW, int SH, int SW, int PT, int PB, int PL, int PR, int DH, int DW,  \
        int DIVISOR, int COUNT_INCLUDE_PAD
#define POOL_DIRECT_PASS \
    x, y, indices, N, C, IH, IW, OH, OW, KH, KW, SH, SW, PT, PB, PL, PR, DH, DW, DIVISOR, COUNT_INCLUDE_PAD

extern "C" __global__ void __launch_bounds__(POOL_THREADS, POOL_MINB) pool2d_max(POOL_DIRECT_ARGS) {
    pool_direct<true>(POOL_DIRECT_PASS);
}
extern "C" __global__ void __launch_bounds__(POOL_THREADS, POOL_MINB) pool2d_avg(POOL_DIRECT_ARGS) {
    pool_direct<false>(POOL_DIRECT_PASS);
}

#define POOL_SR(KH_) (KH_ == 3 ? WIN_STRIP_K3S2 : (KH_ == 2 ? WIN_STRIP_K2S2 : 0))
#if LAYOUT_NHWC
#define POOL_TILE_BODY(OP, IDX, KH_, KW_, SH_, SW_) \
    win_nhwc<OP, IDX, KH_, KW_, SH_, SW_, (KH_ > 0 ? WIN_STRIP_NHWC : 0)>(x, y, indices, nullptr, nullptr, p)
#else
#define POOL_TILE_BODY(OP, IDX, KH_, KW_, SH_, SW_) \
    win_nchw<OP, false, IDX, KH_, KW_, SH_, SW_, POOL_SR(KH_)>(x, y, indices, nullptr, nullptr, p)
#endif

#define POOL_TILE_KERNEL(NAME, OP, IDX, KH_, KW_, SH_, SW_, MINB)                                          \
    extern "C" __global__ void __launch_bounds__(POOL_THREADS, MINB)                                                  \
        NAME(const act_t* __restrict__ x, act_t* __restrict__ y, long long* __restrict__ indices, WinParams p) { \
        POOL_TILE_BODY(OP, IDX, KH_, KW_, SH_, SW_);                                                       \
    }

POOL_TILE_KERNEL(pool2d_max_tile_g, WIN_MAX, false, 0, 0, 0, 0, POOL_MINB)
POOL_TILE_KERNEL(pool2d_max_tile_k3s2, WIN_MAX, false, 3, 3, 2, 2, POOL_MINB)
POOL_TILE_KERNEL(pool2d_max_tile_k2s2, WIN_MAX, false, 2, 2, 2, 2, POOL_MINB)
POOL_TILE_KERNEL(pool2d_maxi_tile_g, WIN_MAX, true, 0, 0, 0, 0, POOL_MINB)
POOL_TILE_KERNEL(pool2d_maxi_tile_k3s2, WIN_MAX, true, 3, 3, 2, 2, POOL_MINB)
POOL_TILE_KERNEL(pool2d_maxi_tile_k2s2, WIN_MAX, true, 2, 2, 2, 2, POOL_MINB)
POOL_TILE_KERNEL(pool2d_avg_tile_g, WIN_AVG, false, 0, 0, 0, 0, POOL_MINB)
POOL_TILE_KERNEL(pool2d_avg_tile_k3s2, WIN_AVG, false, 3, 3, 2, 2, POOL_MINB_H2AVG)
POOL_TILE_KERNEL(pool2d_avg_tile_k2s2, WIN_AVG, false, 2, 2, 2, 2, POOL_MINB)
