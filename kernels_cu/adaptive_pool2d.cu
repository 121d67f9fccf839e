// Adaptive (and global) max / average pooling: bin i spans [i*In/Out, ceil((i+1)*In/Out)).
//
// Macros: DTYPE_HALF, DTYPE_BF16, LAYOUT_NHWC, ADAPT_THREADS [256] (threads per block of every kernel),
// ADAPT_VSPLIT_U [8], ADAPT_GVEC_U [8] (loads in flight per thread of the vsplit and gvec kernels),
// ADAPT_GVEC_S [1] (lanes per (image, channel vector) pair of the gvec kernel).
//
// Entry points:
//   adaptive_pool2d_max, adaptive_pool2d_avg (contract signature) one thread per output
//   adaptive_pool2d_{max,maxi,avg}_vec   NHWC, HAL_VEC channels per thread (16-byte loads)
//   adaptive_pool2d_{max,avg}_gvec(x, y, N, C, HW) NHWC global pooling (1x1 output, no indices):
//       HAL_VEC channels per ADAPT_GVEC_S [1] lanes, ADAPT_GVEC_U [8] pixel loads in flight each
//   adaptive_pool2d_{max,maxi,avg}_tile  NCHW shared-memory tiles (hal_window.cuh)
//   adaptive_pool2d_{max,maxi,avg}_block one block per output: few outputs, large bins
//   adaptive_pool2d_{max,maxi,avg}_vsplit NHWC, a block per (output pixel, 32 channel vectors):
//       its warps split the bin's pixels (global pooling of small images has too few outputs
//       for a thread each)
//   adaptive_pool2d_{max,avg}_gflat(x, y, P, HW) NCHW global pooling (1x1 output, no indices):
//       warps stage groups of 32 consecutive planes in shared memory with 16-byte copies
#include "hal_window.cuh"

#ifndef ADAPT_THREADS
#define ADAPT_THREADS 256
#endif

__device__ __forceinline__ int bin_lo(int o, int In, int Out) { return (int)(((long long)o * In) / Out); }
__device__ __forceinline__ int bin_hi(int o, int In, int Out) {
    return (int)(((long long)(o + 1) * In + Out - 1) / Out);
}

// decode a physical output index into (n, c, oh, ow) and the input element strides
struct OutPos {
    int n, c, oh, ow;
    long long base, rs, cs;
};
__device__ __forceinline__ OutPos out_pos(long long i, int C, int IH, int IW, int OH, int OW) {
    OutPos q;
#if LAYOUT_NHWC
    q.c = (int)(i % C);
    i /= C;
    q.ow = (int)(i % OW);
    i /= OW;
    q.oh = (int)(i % OH);
    q.n = (int)(i / OH);
    q.base = (long long)q.n * IH * IW * C + q.c;
    q.rs = (long long)IW * C;
    q.cs = C;
#else
    q.ow = (int)(i % OW);
    i /= OW;
    q.oh = (int)(i % OH);
    i /= OH;
    q.c = (int)(i % C);
    q.n = (int)(i / C);
    q.base = ((long long)q.n * C + q.c) * IH * IW;
    q.rs = IW;
    q.cs = 1;
#endif
    return q;
}

template <bool MAXP>
__device__ __forceinline__ void adaptive_direct(const act_t* __restrict__ x, act_t* __restrict__ y,
                                                long long* __restrict__ ind, int N, int C, int IH, int IW, int OH,
                                                int OW) {
    const long long total = (long long)N * C * OH * OW;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const OutPos q = out_pos(i, C, IH, IW, OH, OW);
        const int hs = bin_lo(q.oh, IH, OH), he = bin_hi(q.oh, IH, OH);
        const int ws = bin_lo(q.ow, IW, OW), we = bin_hi(q.ow, IW, OW);
        float acc = MAXP ? HAL_NEG_INF : 0.0f;
        long long bi = (long long)hs * IW + ws;
        for (int ih = hs; ih < he; ++ih)
            for (int iw = ws; iw < we; ++iw) {
                const float v = ld_act(x + q.base + ih * q.rs + iw * q.cs);
                if (MAXP)
                    max_take(v, (long long)ih * IW + iw, acc, bi);
                else
                    acc += v;
            }
        if (!MAXP) acc /= (float)((he - hs) * (we - ws));
        st_act(y + i, acc);
        if (MAXP && ind) ind[i] = bi;
    }
}

extern "C" __global__ void __launch_bounds__(ADAPT_THREADS)
    adaptive_pool2d_max(const act_t* __restrict__ x, act_t* __restrict__ y, long long* __restrict__ indices, int N,
                        int C, int IH, int IW, int OH, int OW) {
    HAL_PDL_ENTRY();
    adaptive_direct<true>(x, y, indices, N, C, IH, IW, OH, OW);
}
extern "C" __global__ void __launch_bounds__(ADAPT_THREADS)
    adaptive_pool2d_avg(const act_t* __restrict__ x, act_t* __restrict__ y, long long* __restrict__ indices, int N,
                        int C, int IH, int IW, int OH, int OW) {
    HAL_PDL_ENTRY();
    adaptive_direct<false>(x, y, indices, N, C, IH, IW, OH, OW);
}

// ---- NHWC, HAL_VEC channels per thread (C % HAL_VEC == 0, aligned buffers)
template <int OP, bool IDX>
__device__ __forceinline__ void adaptive_vec(const act_t* __restrict__ x, act_t* __restrict__ y,
                                             long long* __restrict__ ind, int N, int C, int IH, int IW, int OH,
                                             int OW) {
    const int ncv = C / HAL_VEC;
    const long long total = (long long)N * OH * OW * ncv;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        long long t = i;
        const int cv = (int)(t % ncv);
        t /= ncv;
        const int ow = (int)(t % OW);
        t /= OW;
        const int oh = (int)(t % OH);
        const int n = (int)(t / OH);
        const int hs = bin_lo(oh, IH, OH), he = bin_hi(oh, IH, OH);
        const int ws = bin_lo(ow, IW, OW), we = bin_hi(ow, IW, OW);
        float acc[HAL_VEC];
        long long bi[HAL_VEC];
#pragma unroll
        for (int j = 0; j < HAL_VEC; ++j) {
            acc[j] = OP == WIN_MAX ? HAL_NEG_INF : 0.0f;
            bi[j] = (long long)hs * IW + ws;
        }
        const act_t* xb = x + (long long)n * IH * IW * C + cv * HAL_VEC;
        for (int ih = hs; ih < he; ++ih) {
            const act_t* xr = xb + (long long)ih * IW * C;
#pragma unroll 4
            for (int iw = ws; iw < we; ++iw) {
                float v[HAL_VEC];
                ld_vec(xr + (long long)iw * C, v);
                if (OP == WIN_MAX) {
#pragma unroll
                    for (int j = 0; j < HAL_VEC; ++j) max_take(v[j], (long long)ih * IW + iw, acc[j], bi[j]);
                } else {
#pragma unroll
                    for (int j = 0; j < HAL_VEC; ++j) acc[j] += v[j];
                }
            }
        }
        if (OP == WIN_AVG) {
            const float d = (float)((he - hs) * (we - ws));
#pragma unroll
            for (int j = 0; j < HAL_VEC; ++j) acc[j] /= d;
        }
        const long long o = (((long long)n * OH + oh) * OW + ow) * C + cv * HAL_VEC;
        st_vec(y + o, acc);
        if (IDX) {
#pragma unroll
            for (int j = 0; j < HAL_VEC; ++j) ind[o + j] = bi[j];
        }
    }
}

#define ADAPT_VEC_KERNEL(NAME, OP, IDX)                                                                         \
    extern "C" __global__ void __launch_bounds__(ADAPT_THREADS)                                                 \
        NAME(const act_t* __restrict__ x, act_t* __restrict__ y, long long* __restrict__ indices, int N, int C, \
             int IH, int IW, int OH, int OW) { HAL_PDL_ENTRY();                                                 \
        adaptive_vec<OP, IDX>(x, y, indices, N, C, IH, IW, OH, OW);                                             \
    }
ADAPT_VEC_KERNEL(adaptive_pool2d_max_vec, WIN_MAX, false)
ADAPT_VEC_KERNEL(adaptive_pool2d_maxi_vec, WIN_MAX, true)
ADAPT_VEC_KERNEL(adaptive_pool2d_avg_vec, WIN_AVG, false)

// ---- NHWC global pooling (1x1 output) without indices: each (image, 16-byte channel vector)
// pair is walked by ADAPT_GVEC_S [1] lanes of one warp, lane s * (32 / S) + v taking pair v of
// the warp's 32 / S consecutive pairs and slice s of the pixels, [s * L, min(HW, (s + 1) * L)),
// L = ceil(HW / S), in row-major order with ADAPT_GVEC_U loads in flight before any is folded
// in; no shared memory, no barrier. Each load instruction of a warp reads S runs of 512 / S
// contiguous bytes. S > 1 combines the slices' partials by shuffles in a fixed tree
// ((0, 1), (2, 3), then the pairs: deterministic); S == 1 is a thread per pair, the fold
// order of adaptive_vec (the same sums). S > 1 gives float16 (half float32's vectors per
// image) more threads: S 2 with 4 loads in flight serves sm_90 float16 (session 20).
#ifndef ADAPT_GVEC_U
#define ADAPT_GVEC_U 8
#endif
#ifndef ADAPT_GVEC_S
#define ADAPT_GVEC_S 1
#endif
template <int OP>
__device__ __forceinline__ void adaptive_gvec(const act_t* __restrict__ x, act_t* __restrict__ y, int N, int C,
                                              int HW) {
    constexpr int U = ADAPT_GVEC_U > 0 ? ADAPT_GVEC_U : 1;
    constexpr int S = ADAPT_GVEC_S;
    static_assert(S == 1 || S == 2 || S == 4, "ADAPT_GVEC_S: 1, 2 or 4 lanes per pair");
    static_assert(ADAPT_THREADS % 32 == 0, "whole warps: the shuffles' partners stay in the loop together");
    constexpr int PW = 32 / S;  // pairs per warp and round
    const int ncv = C / HAL_VEC;
    const long long total = (long long)N * ncv;
    const long long gt = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x & 31, s = lane / PW, v = lane - s * PW;
    // the pixel slice: no int overflow for HW up to 2^31 - 1 (s * L <= HW + S - 1 stays small)
    int lo = 0, hi = HW;
    if (S > 1) {
        const int L = HW / S + (HW % S != 0);
        lo = min(HW, s * L);
        hi = HW - lo <= L ? HW : lo + L;
    }
    // S > 1: the loop runs on the warp's first pair (i - v), the same for its 32 lanes, so every
    // lane reaches every shuffle; lanes past the last pair fold nothing and store nothing
    const long long stride = (long long)gridDim.x * blockDim.x / S;
    for (long long i = S == 1 ? gt : (gt >> 5) * PW + v; (S == 1 ? i : i - v) < total; i += stride) {
        const bool live = S == 1 || i < total;
        float acc[HAL_VEC];
#pragma unroll
        for (int j = 0; j < HAL_VEC; ++j) acc[j] = OP == WIN_MAX ? HAL_NEG_INF : 0.0f;
        const int n = live ? (int)(i / ncv) : 0, cv = live ? (int)(i - (long long)n * ncv) : 0;
        if (live) {
            const act_t* xb = x + (long long)n * HW * C + cv * HAL_VEC;
            for (int p0 = lo; p0 < hi; p0 += U) {
                uint4 raw[U];
#pragma unroll
                for (int u = 0; u < U; ++u)
                    if (p0 + u < hi) raw[u] = __ldg(reinterpret_cast<const uint4*>(xb + (long long)(p0 + u) * C));
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    if (p0 + u < hi) {
                        float f[HAL_VEC];
                        unpack_vec(raw[u], f);
#pragma unroll
                        for (int j = 0; j < HAL_VEC; ++j)
                            acc[j] = OP == WIN_MAX ? max_nan(acc[j], f[j]) : acc[j] + f[j];
                    }
                }
            }
        }
        // the slices' partials: lane s takes s ^ 1's (PW lanes away), then s ^ 2's; max_nan
        // keeps a NaN of any slice
#pragma unroll
        for (int off = PW; off < 32; off <<= 1)
#pragma unroll
            for (int j = 0; j < HAL_VEC; ++j) {
                const float o = __shfl_xor_sync(0xffffffffu, acc[j], off);
                acc[j] = OP == WIN_MAX ? max_nan(acc[j], o) : acc[j] + o;
            }
        if (live && (S == 1 || s == 0)) {
            if (OP == WIN_AVG) {
                const float d = (float)HW;
#pragma unroll
                for (int j = 0; j < HAL_VEC; ++j) acc[j] /= d;
            }
            st_vec(y + (long long)n * C + cv * HAL_VEC, acc);
        }
    }
}
#define ADAPT_GVEC_KERNEL(NAME, OP)                                                                       \
    extern "C" __global__ void __launch_bounds__(ADAPT_THREADS)                                           \
        NAME(const act_t* __restrict__ x, act_t* __restrict__ y, int N, int C, int HW) { HAL_PDL_ENTRY(); \
        adaptive_gvec<OP>(x, y, N, C, HW);                                                                \
    }
ADAPT_GVEC_KERNEL(adaptive_pool2d_max_gvec, WIN_MAX)
ADAPT_GVEC_KERNEL(adaptive_pool2d_avg_gvec, WIN_AVG)

// ---- NCHW tiles
#define ADAPT_TILE_KERNEL(NAME, OP, IDX)                                                                     \
    extern "C" __global__ void __launch_bounds__(ADAPT_THREADS)                                              \
        NAME(const act_t* __restrict__ x, act_t* __restrict__ y, long long* __restrict__ indices, WinParams p) { HAL_PDL_ENTRY(); \
        win_nchw<OP, true, IDX, 0, 0, 0, 0>(x, y, indices, nullptr, nullptr, p);                             \
    }
ADAPT_TILE_KERNEL(adaptive_pool2d_max_tile, WIN_MAX, false)
ADAPT_TILE_KERNEL(adaptive_pool2d_maxi_tile, WIN_MAX, true)
ADAPT_TILE_KERNEL(adaptive_pool2d_avg_tile, WIN_AVG, false)

// ---- one block per output (large bins, few outputs)
__device__ __forceinline__ void max_combine(float& v, long long& i, float v2, long long i2) {
    const bool n1 = isnan(v), n2 = isnan(v2);
    bool take;
    if (n1 || n2)
        take = n2 && (!n1 || i2 > i);  // the last NaN in scan order
    else
        take = v2 > v || (v2 == v && i2 < i);  // the first maximum
    if (take) {
        v = v2;
        i = i2;
    }
}

template <int OP, bool IDX>
__device__ __forceinline__ void adaptive_block(const act_t* __restrict__ x, act_t* __restrict__ y,
                                               long long* __restrict__ ind, int N, int C, int IH, int IW, int OH,
                                               int OW) {
    __shared__ float s_v[32];
    __shared__ long long s_i[32];
    const long long total = (long long)N * C * OH * OW;
    for (long long o = blockIdx.x; o < total; o += gridDim.x) {
        const OutPos q = out_pos(o, C, IH, IW, OH, OW);
        const int hs = bin_lo(q.oh, IH, OH), he = bin_hi(q.oh, IH, OH);
        const int ws = bin_lo(q.ow, IW, OW), we = bin_hi(q.ow, IW, OW);
        const int ww = we - ws, count = (he - hs) * ww;
        float acc = OP == WIN_MAX ? HAL_NEG_INF : 0.0f;
        long long bi = 0x7fffffffffffffffLL;
        int r = threadIdx.x / ww, c = threadIdx.x - (threadIdx.x / ww) * ww;
        for (int t = threadIdx.x; t < count; t += blockDim.x) {
            const int ih = hs + r, iw = ws + c;
            const float v = ld_act(x + q.base + ih * q.rs + iw * q.cs);
            if (OP == WIN_MAX) {
                if (bi == 0x7fffffffffffffffLL) bi = (long long)ih * IW + iw;
                max_take(v, (long long)ih * IW + iw, acc, bi);
            } else {
                acc += v;
            }
            c += blockDim.x;
            while (c >= ww) {
                c -= ww;
                ++r;
            }
        }
        // warp then block reduction
        for (int off = 16; off > 0; off >>= 1) {
            const float v2 = __shfl_down_sync(0xffffffffu, acc, off);
            const long long i2 = __shfl_down_sync(0xffffffffu, bi, off);
            if (OP == WIN_MAX)
                max_combine(acc, bi, v2, i2);
            else
                acc += v2;
        }
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
        if (lane == 0) {
            s_v[warp] = acc;
            s_i[warp] = bi;
        }
        __syncthreads();
        if (warp == 0) {
            acc = lane < nw ? s_v[lane] : (OP == WIN_MAX ? HAL_NEG_INF : 0.0f);
            bi = lane < nw ? s_i[lane] : 0x7fffffffffffffffLL;
            for (int off = 16; off > 0; off >>= 1) {
                const float v2 = __shfl_down_sync(0xffffffffu, acc, off);
                const long long i2 = __shfl_down_sync(0xffffffffu, bi, off);
                if (OP == WIN_MAX)
                    max_combine(acc, bi, v2, i2);
                else
                    acc += v2;
            }
            if (lane == 0) {
                if (OP == WIN_AVG) acc /= (float)count;
                st_act(y + o, acc);
                if (IDX) ind[o] = bi;
            }
        }
        __syncthreads();
    }
}

#define ADAPT_BLOCK_KERNEL(NAME, OP, IDX)                                                                       \
    extern "C" __global__ void __launch_bounds__(ADAPT_THREADS)                                                 \
        NAME(const act_t* __restrict__ x, act_t* __restrict__ y, long long* __restrict__ indices, int N, int C, \
             int IH, int IW, int OH, int OW) { HAL_PDL_ENTRY();                                                 \
        adaptive_block<OP, IDX>(x, y, indices, N, C, IH, IW, OH, OW);                                           \
    }
ADAPT_BLOCK_KERNEL(adaptive_pool2d_max_block, WIN_MAX, false)
ADAPT_BLOCK_KERNEL(adaptive_pool2d_maxi_block, WIN_MAX, true)
ADAPT_BLOCK_KERNEL(adaptive_pool2d_avg_block, WIN_AVG, false)

// ---- NHWC, a block per (output pixel, 32 channel vectors); warp g takes pixels g, g + G, ...
// in row-major order, ADAPT_VSPLIT_U of them loaded (16 bytes each) before any is folded
// in (one at a time with indices: their registers); the fold order is the same for every U.
// Partials go through shared memory as [j][warp][lane] (consecutive lanes, consecutive
// words: no bank conflicts). The bin's pixel index ih * IW + iw must fit an int (the
// launcher checks IH * IW < 2^31).
#ifndef ADAPT_VSPLIT_U
#define ADAPT_VSPLIT_U 8
#endif
// without indices, 64 registers: 4 blocks of 256 threads per multiprocessor (with indices
// the 8 x 64-bit best indices need more: the compiler's choice)
#define ADAPT_VSPLIT_MINB (ADAPT_THREADS >= 1024 ? 1 : 1024 / ADAPT_THREADS)
template <int OP, bool IDX>
__device__ __forceinline__ void adaptive_vsplit(const act_t* __restrict__ x, act_t* __restrict__ y,
                                                long long* __restrict__ ind, int N, int C, int IH, int IW, int OH,
                                                int OW) {
    constexpr int U = IDX ? 1 : ADAPT_VSPLIT_U;
    extern __shared__ __align__(16) unsigned char s_raw[];
    const int G = blockDim.x >> 5, g = threadIdx.x >> 5, cvl = threadIdx.x & 31;
    float* s_v = reinterpret_cast<float*>(s_raw);                                         // [VEC][G][32]
    long long* s_i = reinterpret_cast<long long*>(s_raw + (size_t)G * 32 * HAL_VEC * 4);  // [VEC][G][32]
    const int ncv = C / HAL_VEC, chunks = (ncv + 31) / 32;
    const long long total = (long long)N * OH * OW * chunks;
    const long long none = 0x7fffffffffffffffLL;
    for (long long b = blockIdx.x; b < total; b += gridDim.x) {
        const int chunk = (int)(b % chunks);
        long long t = b / chunks;
        const int ow = (int)(t % OW);
        t /= OW;
        const int oh = (int)(t % OH);
        const int n = (int)(t / OH);
        const int cv = chunk * 32 + cvl;
        const int hs = bin_lo(oh, IH, OH), he = bin_hi(oh, IH, OH);
        const int ws = bin_lo(ow, IW, OW), we = bin_hi(ow, IW, OW);
        const int bw = we - ws, cnt = (he - hs) * bw;
        float acc[HAL_VEC];
        long long bi[HAL_VEC];
#pragma unroll
        for (int j = 0; j < HAL_VEC; ++j) {
            acc[j] = OP == WIN_MAX ? HAL_NEG_INF : 0.0f;
            bi[j] = none;
        }
        if (cv < ncv) {
            const act_t* xb = x + (long long)n * IH * IW * C + cv * HAL_VEC;
            int r = g / bw, c = g - (g / bw) * bw;
            for (int k0 = g; k0 < cnt; k0 += U * G) {
                uint4 raw[U];
                int pix[U];  // ih * IW + iw
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    pix[u] = (hs + r) * IW + (ws + c);
                    if (k0 + u * G < cnt) raw[u] = __ldg(reinterpret_cast<const uint4*>(xb + (long long)pix[u] * C));
                    c += G;
                    while (c >= bw) {
                        c -= bw;
                        ++r;
                    }
                }
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    if (k0 + u * G < cnt) {
                        float v[HAL_VEC];
                        unpack_vec(raw[u], v);
                        const long long idx = pix[u];
#pragma unroll
                        for (int j = 0; j < HAL_VEC; ++j) {
                            if (OP == WIN_MAX) {
                                if (IDX) {
                                    if (bi[j] == none) bi[j] = idx;
                                    max_take(v[j], idx, acc[j], bi[j]);
                                } else {
                                    acc[j] = max_nan(acc[j], v[j]);
                                }
                            } else {
                                acc[j] += v[j];
                            }
                        }
                    }
                }
            }
        }
#pragma unroll
        for (int j = 0; j < HAL_VEC; ++j) {
            s_v[(j * G + g) * 32 + cvl] = acc[j];
            if (IDX) s_i[(j * G + g) * 32 + cvl] = bi[j];
        }
        __syncthreads();
        if (g == 0 && cv < ncv) {
            for (int q = 1; q < G; ++q) {
#pragma unroll
                for (int j = 0; j < HAL_VEC; ++j) {
                    const float v2 = s_v[(j * G + q) * 32 + cvl];
                    if (OP == WIN_MAX) {
                        if (IDX)
                            max_combine(acc[j], bi[j], v2, s_i[(j * G + q) * 32 + cvl]);
                        else
                            acc[j] = max_nan(acc[j], v2);
                    } else {
                        acc[j] += v2;
                    }
                }
            }
            if (OP == WIN_AVG) {
#pragma unroll
                for (int j = 0; j < HAL_VEC; ++j) acc[j] /= (float)cnt;
            }
            const long long o = (((long long)n * OH + oh) * OW + ow) * C + cv * HAL_VEC;
            st_vec(y + o, acc);
            if (IDX) {
#pragma unroll
                for (int j = 0; j < HAL_VEC; ++j) ind[o + j] = bi[j];
            }
        }
        __syncthreads();
    }
}

#define ADAPT_VSPLIT_KERNEL(NAME, OP, IDX)                                                                      \
    extern "C" __global__ void __launch_bounds__(ADAPT_THREADS, (IDX) ? 1 : ADAPT_VSPLIT_MINB)                  \
        NAME(const act_t* __restrict__ x, act_t* __restrict__ y, long long* __restrict__ indices, int N, int C, \
             int IH, int IW, int OH, int OW) { HAL_PDL_ENTRY();                                                 \
        adaptive_vsplit<OP, IDX>(x, y, indices, N, C, IH, IW, OH, OW);                                          \
    }
ADAPT_VSPLIT_KERNEL(adaptive_pool2d_max_vsplit, WIN_MAX, false)
ADAPT_VSPLIT_KERNEL(adaptive_pool2d_maxi_vsplit, WIN_MAX, true)
ADAPT_VSPLIT_KERNEL(adaptive_pool2d_avg_vsplit, WIN_AVG, false)

// ---- global pooling (1x1 output) of NCHW planes: the input read as one flat array.
// Warp w takes groups w, w + W, ... of 32 consecutive planes (32 * HW contiguous
// elements, 16-byte aligned when x is, since 32 * HW * sizeof(act_t) % 16 == 0), copies
// each group into one of its ADAPT_GSTAGES shared-memory buffers with coalesced 16-byte
// cp.async (the next STAGES - 1 groups' copies in flight while this one is summed), then
// lane l reduces plane l from shared memory in order. Shared memory: STAGES buffers x
// 32 * HW activations per warp. ADAPT_GSTAGES 0 = 3 for float16 (a float16 group is half
// the bytes: two groups in flight per warp keep as many bytes in flight as float32's
// one), 2 for float32; the launcher sizes shared memory by the same rule.
#ifndef ADAPT_GSTAGES
#define ADAPT_GSTAGES 0
#endif
#if ADAPT_GSTAGES == 0
#define ADAPT_GST (HAL_ACT16 ? 3 : 2)
#else
#define ADAPT_GST ADAPT_GSTAGES
#endif
// ADAPT_GHW > 0 (the launcher's, never tuned): every plane has ADAPT_GHW elements, fixed at
// build time, so a full group's copies and each lane's reduction unroll with constant
// offsets. float16 lanes then read their plane as 32-bit words (two halves per shared
// load; a plane of odd size starts at an odd half on odd lanes, and the one half of the
// first or last word that is not theirs is replaced by the identity). The launcher sets it
// only where lane strides leave at most 2-way bank conflicts. Without it (0), the runtime
// HW loop below serves: it spent ~8 issued instructions per float16 element (ncu: issue
// 59 % busy, DRAM 59 %), the fixed path about 3.
#ifndef ADAPT_GHW
#define ADAPT_GHW 0
#endif
#if ADAPT_GHW
template <int OP>
__device__ __forceinline__ float fixed_plane_reduce(const act_t* group, int lane) {
    constexpr int HW = ADAPT_GHW;
    const float ID = OP == WIN_MAX ? HAL_NEG_INF : 0.0f;
    float acc = ID;
#if HAL_ACT16
    // plane `lane` is halves [lane * HW, lane * HW + HW) of the group: NW words from its first
    constexpr int NW = (HW + 1) / 2;
    const int e0 = lane * HW;
    const bool odd = (HW & 1) && (e0 & 1);
    const unsigned* w = reinterpret_cast<const unsigned*>(group) + (e0 >> 1);
#pragma unroll
    for (int j = 0; j < NW; ++j) {
        const unsigned word = w[j];
        float lo = act16_f((unsigned short)(word & 0xffffu));
        float hi = act16_f((unsigned short)(word >> 16));
        if ((HW & 1) && j == 0) lo = odd ? ID : lo;           // odd lanes start at the high half
        if ((HW & 1) && j == NW - 1) hi = odd ? hi : ID;      // even lanes end at the low half
        acc = OP == WIN_MAX ? max_nan(max_nan(acc, lo), hi) : (acc + lo) + hi;
    }
#else
    const act_t* pl = group + lane * HW;
#pragma unroll
    for (int k = 0; k < HW; ++k) acc = OP == WIN_MAX ? max_nan(acc, pl[k]) : acc + pl[k];
#endif
    return OP == WIN_AVG ? acc / (float)HW : acc;
}
#endif

template <int OP>
__device__ __forceinline__ void adaptive_global_flat(const act_t* __restrict__ x, act_t* __restrict__ y, int P,
                                                     int HW) {
    constexpr int ST = ADAPT_GST;
    static_assert(ST >= 2 && ST <= 8, "ADAPT_GSTAGES: 2..8 buffers per warp");
    extern __shared__ __align__(16) unsigned char s_raw[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int ge = 32 * HW;  // activations per group (a multiple of HAL_VEC)
    act_t* bufs = reinterpret_cast<act_t*>(s_raw) + (size_t)warp * ST * ge;
    const int groups = (P + 31) / 32;
    const int nw = gridDim.x * (blockDim.x >> 5);
    // even HW: lane l starts at element l mod HW of its plane (fewer bank conflicts)
#if !ADAPT_GHW
    const int start = (HW & 1) ? 0 : lane % HW;
#endif
    auto issue = [&](int g, act_t* b) {
        const act_t* src = x + (long long)g * ge;
#if ADAPT_GHW
        if (g * 32 + 32 <= P) {  // a full group: a constant count of 16-byte copies
            constexpr int NV = 32 * ADAPT_GHW / HAL_VEC;
#pragma unroll
            for (int j = 0; j < (NV + 31) / 32; ++j) {
                const int i = lane + 32 * j;
                if (NV % 32 == 0 || i < NV) cp_async16(b + i * HAL_VEC, src + i * HAL_VEC);
            }
            return;
        }
#endif
        const int ne = min(32, P - g * 32) * HW;
        const int nv = ne / HAL_VEC;
        for (int i = lane; i < nv; i += 32) cp_async16(b + i * HAL_VEC, src + i * HAL_VEC);
        for (int i = nv * HAL_VEC + lane; i < ne; i += 32) b[i] = src[i];  // tail of the last group
    };
    const int g0 = blockIdx.x * (blockDim.x >> 5) + warp;
    // prologue: the first ST - 1 groups (a commit each, issued or not, so that the
    // wait below always counts ST - 1 younger commit groups)
#pragma unroll
    for (int s = 0; s < ST - 1; ++s) {
        const int gs = g0 + s * nw;
        if (gs < groups) issue(gs, bufs + (size_t)s * ge);
        cp_async_commit();
    }
    int slot = 0;  // buffer of group g (iteration it): it mod ST
    for (int g = g0; g < groups; g += nw) {
        act_t* cur = bufs + (size_t)slot * ge;
        const int gn = g + (ST - 1) * nw;
        // the buffer of the previous iteration's group, released by its closing __syncwarp
        const int nslot = slot == 0 ? ST - 1 : slot - 1;
        if (gn < groups) issue(gn, bufs + (size_t)nslot * ge);
        cp_async_commit();
        cp_async_wait<ST - 1>();  // this lane's copies of group g are done
        __syncwarp();             // ... and every lane's are visible
        const int plane = g * 32 + lane;
#if ADAPT_GHW
        if (plane < P) st_act(y + plane, fixed_plane_reduce<OP>(cur, lane));
#else
        if (plane < P) {
            const act_t* pl = cur + lane * HW;
            float acc = OP == WIN_MAX ? HAL_NEG_INF : 0.0f;
#pragma unroll 4
            for (int k = start; k < HW; ++k) {
                const float v = to_f(pl[k]);
                acc = OP == WIN_MAX ? max_nan(acc, v) : acc + v;
            }
            for (int k = 0; k < start; ++k) {
                const float v = to_f(pl[k]);
                acc = OP == WIN_MAX ? max_nan(acc, v) : acc + v;
            }
            if (OP == WIN_AVG) acc /= (float)HW;
            st_act(y + plane, acc);
        }
#endif
        __syncwarp();  // cur is refilled ST - 1 iterations later
        slot = slot + 1 == ST ? 0 : slot + 1;
    }
    cp_async_wait<0>();
}

extern "C" __global__ void __launch_bounds__(ADAPT_THREADS)
    adaptive_pool2d_avg_gflat(const act_t* __restrict__ x, act_t* __restrict__ y, int P, int HW) {
    HAL_PDL_ENTRY();
    adaptive_global_flat<WIN_AVG>(x, y, P, HW);
}
extern "C" __global__ void __launch_bounds__(ADAPT_THREADS)
    adaptive_pool2d_max_gflat(const act_t* __restrict__ x, act_t* __restrict__ y, int P, int HW) {
    HAL_PDL_ENTRY();
    adaptive_global_flat<WIN_MAX>(x, y, P, HW);
}
