// 2-D max and average pooling (hal semantics: see docs/ARCHITECTURE.md).
//
// Macros: DTYPE_HALF, DTYPE_BF16, LAYOUT_NHWC (hal_prelude.cuh), POOL_THREADS [256]: threads per
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
// POOL_H2 [1]: 16-bit max pooling without indices in pairs (hal_window.cuh, WIN_H2); the
// launcher reserves the 16-byte guard in front of NCHW tiles whenever it is set
#ifndef POOL_H2
#define POOL_H2 1
#endif
#define WIN_H2 POOL_H2
// POOL_H2AVG [1]: 16-bit average pooling 2x2/2 and 3x3/2 (even IW) from 32-bit words, two
// outputs per thread, float sums (hal_window.cuh, WIN_H2AVG); the launcher reserves the same
// 16-byte guard in front of NCHW tiles
#ifndef POOL_H2AVG
#define POOL_H2AVG 1
#endif
#define WIN_H2AVG POOL_H2AVG
// the pair 3x3/2 average path needs ~54 registers: at more than 1024 resident threads per SM
// (POOL_OCC 1536 / 2048, tuned for the float path) it would spill, so its kernel stays at 1024
#if HAL_ACT16 && !LAYOUT_NHWC && POOL_H2AVG && POOL_MINB > (1024 / POOL_THREADS > 0 ? 1024 / POOL_THREADS : 1)
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
    HAL_PDL_ENTRY();
    pool_direct<true>(POOL_DIRECT_PASS);
}
extern "C" __global__ void __launch_bounds__(POOL_THREADS, POOL_MINB) pool2d_avg(POOL_DIRECT_ARGS) {
    HAL_PDL_ENTRY();
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
        NAME(const act_t* __restrict__ x, act_t* __restrict__ y, long long* __restrict__ indices, WinParams p) { HAL_PDL_ENTRY(); \
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

// ---------------------------------------------------------------------------------
// NCHW row strips from registers (POOL_ROWS > 0 in the schema; the launcher picks them):
// 2x2/2 and 3x3/2 windows, no dilation, no indices, IW % HAL_VEC == 0, 16-byte aligned x.
//
// A thread owns one aligned 16-byte input vector column j of a plane (input columns
// [j*V, j*V + V), V = HAL_VEC) and a strip of R output rows; its outputs are the V/2
// columns ow with 2*ow in that range. For each of the 2R+K-2 input rows the strip reads it
// issues one 16-byte load, plus the column left of the vector when PL = 1 and the one right
// of it when K - 2 - PL > 0 (both usually L1 hits: the neighbour thread loads them). No
// shared memory and no barrier: every load of a thread is in flight at once, and the few
// rows two strips share come from L2. Taps outside the input are skipped (max: -inf; avg:
// add nothing); rows are reduced horizontally first, then summed (max-ed) vertically, the
// order the tile kernels use. Threads are numbered j fastest, then strip, then plane, so
// a warp's loads of one row are contiguous.
// ---------------------------------------------------------------------------------
struct RowParams {
    int IH, IW, OH, OW, PT, PB, PL, PR, divisor, count_include_pad;
    unsigned items;           // planes * strips * vector columns (< 2^31)
    FastDiv fd_nvr, fd_strips;  // vector columns per row (ceil(2 * OW / V)), strips per plane
};

template <bool MAXP, int K, int R, int PL>
__device__ __forceinline__ void pool_rows(const act_t* __restrict__ x, act_t* __restrict__ y, const RowParams& p) {
    constexpr int V = HAL_VEC, H = V / 2, NR = 2 * R + K - 2;
    constexpr bool LEFT = PL > 0, RIGHT = K - 2 - PL > 0;
    const unsigned it = blockIdx.x * blockDim.x + threadIdx.x;
    if (it >= p.items) return;
    const unsigned q = fdiv(it, p.fd_nvr);
    const int j = (int)(it - q * p.fd_nvr.d);
    const unsigned plane = fdiv(q, p.fd_strips);
    const int oh0 = (int)(q - plane * p.fd_strips.d) * R;
    const int IH = p.IH, IW = p.IW;
    const int ih0 = 2 * oh0 - p.PT, c0 = j * V;
    const bool vin = c0 < IW;  // ceil_mode: the last output may start at column IW
    const bool lin = LEFT && c0 > 0 && c0 - 1 < IW;
    const bool rin = RIGHT && c0 + V < IW;
    const act_t* __restrict__ xp = x + (size_t)plane * IH * IW + c0;

    // every load first (all in flight), then the arithmetic
    uint4 raw[NR];
    act_t lh[NR], rh[NR];
#pragma unroll
    for (int r = 0; r < NR; ++r) {
        const int ih = ih0 + r;
        raw[r] = make_uint4(0u, 0u, 0u, 0u);
        lh[r] = rh[r] = from_f<act_t>(0.0f);
        if ((unsigned)ih < (unsigned)IH) {
            const act_t* rp = xp + (size_t)ih * IW;
            if (vin) raw[r] = __ldg(reinterpret_cast<const uint4*>(rp));
            if (lin) lh[r] = rp[-1];
            if (rin) rh[r] = rp[V];
        }
    }
    constexpr float NEUTRAL = MAXP ? -__builtin_huge_valf() : 0.0f;
    float acc[R][H];
#pragma unroll
    for (int s = 0; s < R; ++s)
#pragma unroll
        for (int i = 0; i < H; ++i) acc[s][i] = NEUTRAL;
#pragma unroll
    for (int r = 0; r < NR; ++r) {
        if ((unsigned)(ih0 + r) >= (unsigned)IH) continue;  // padding rows: skipped taps
        // f[0]: column c0 - 1, f[1 .. V]: the vector, f[V + 1]: column c0 + V
        float f[V + 2];
        f[0] = lin ? to_f(lh[r]) : NEUTRAL;
        f[V + 1] = rin ? to_f(rh[r]) : NEUTRAL;
        if (vin) {
            float v[V];
            unpack_vec(raw[r], v);
#pragma unroll
            for (int e = 0; e < V; ++e) f[1 + e] = v[e];
        } else {
#pragma unroll
            for (int e = 0; e < V; ++e) f[1 + e] = NEUTRAL;
        }
        // output i reads columns c0 + 2i - PL + k, k < K: f[1 + 2i - PL + k]
        float h[H];
#pragma unroll
        for (int i = 0; i < H; ++i) {
            float a = f[1 + 2 * i - PL];
#pragma unroll
            for (int k = 1; k < K; ++k) a = MAXP ? max_nan(a, f[1 + 2 * i - PL + k]) : a + f[1 + 2 * i - PL + k];
            h[i] = a;
        }
        // input row r feeds strip rows s with 2s <= r <= 2s + K - 1
#pragma unroll
        for (int s = 0; s < R; ++s) {
            if (r < 2 * s || r > 2 * s + K - 1) continue;
#pragma unroll
            for (int i = 0; i < H; ++i) acc[s][i] = MAXP ? max_nan(acc[s][i], h[i]) : acc[s][i] + h[i];
        }
    }
    const int OH = p.OH, OW = p.OW, ow0 = c0 / 2;
    act_t* __restrict__ yp = y + ((size_t)plane * OH + oh0) * OW + ow0;
    float cw[H];  // average: taps per output column (the divisor's column factor)
    if (!MAXP) {
        const bool cip = p.count_include_pad != 0;
#pragma unroll
        for (int i = 0; i < H; ++i)
            cw[i] = (float)count_taps(2 * (ow0 + i) - PL, K, 1, cip ? -PL : 0, cip ? IW + p.PR : IW);
    }
#pragma unroll
    for (int s = 0; s < R; ++s) {
        if (oh0 + s >= OH) break;
        float o[H];
        if (MAXP) {
#pragma unroll
            for (int i = 0; i < H; ++i) o[i] = acc[s][i];
        } else {
            const bool cip = p.count_include_pad != 0;
            const float ch = (float)count_taps(2 * (oh0 + s) - p.PT, K, 1, cip ? -p.PT : 0, cip ? IH + p.PB : IH);
#pragma unroll
            for (int i = 0; i < H; ++i)
                o[i] = __fdividef(acc[s][i], p.divisor > 0 ? (float)p.divisor : ch * cw[i]);
        }
        act_t* op = yp + (size_t)s * OW;
        // the strip's H outputs as one 8-byte store where they are all inside the row and aligned
        if (ow0 + H <= OW && (reinterpret_cast<uintptr_t>(op) & 7u) == 0) {
#if HAL_ACT16
            uint2 u;
            u.x = act2_word(out_act(o[0]), out_act(o[1]));
            u.y = act2_word(out_act(o[2]), out_act(o[3]));
            *reinterpret_cast<uint2*>(op) = u;
#else
            *reinterpret_cast<float2*>(op) = make_float2(out_act(o[0]), out_act(o[1]));
#endif
        } else {
#pragma unroll
            for (int i = 0; i < H; ++i)
                if (ow0 + i < OW) st_act(op + i, o[i]);
        }
    }
}

#define POOL_ROWS_KERNEL(NAME, MAXP, K, R)                                                                      \
    extern "C" __global__ void __launch_bounds__(POOL_THREADS) NAME(const act_t* __restrict__ x,              \
                                                                   act_t* __restrict__ y, RowParams p) { HAL_PDL_ENTRY(); \
        if (p.PL > 0)                                                                                         \
            pool_rows<MAXP, K, R, 1>(x, y, p);                                                                \
        else                                                                                                  \
            pool_rows<MAXP, K, R, 0>(x, y, p);                                                                \
    }

POOL_ROWS_KERNEL(pool2d_max_rows2_k3s2, true, 3, 2)
POOL_ROWS_KERNEL(pool2d_max_rows4_k3s2, true, 3, 4)
POOL_ROWS_KERNEL(pool2d_avg_rows2_k3s2, false, 3, 2)
POOL_ROWS_KERNEL(pool2d_avg_rows4_k3s2, false, 3, 4)
POOL_ROWS_KERNEL(pool2d_max_rows2_k2s2, true, 2, 2)
POOL_ROWS_KERNEL(pool2d_max_rows4_k2s2, true, 2, 4)
POOL_ROWS_KERNEL(pool2d_avg_rows2_k2s2, false, 2, 2)
POOL_ROWS_KERNEL(pool2d_avg_rows4_k2s2, false, 2, 4)

// ---------------------------------------------------------------------------------
// NHWC walks from registers (POOL_NCOLS > 0 in the schema; the launcher picks them):
// 2x2/2 and 3x3/2 windows, no dilation, no indices, C % HAL_VEC == 0, 16-byte aligned
// buffers. A thread owns one 16-byte vector of channels of M consecutive output pixels of
// one output row: it issues all K x (2M + K - 2) 16-byte loads of their windows first
// (the columns two neighbouring outputs share are loaded once), then reduces each output's
// taps row-major in float. No shared memory, no barrier; the rows two output rows share
// come from L1/L2. Threads are numbered channel vector fastest, then column strip, then
// output row, so a warp's loads of one input pixel row are contiguous.
// ---------------------------------------------------------------------------------
struct NColParams {
    int N, C, IH, IW, OH, OW, PT, PB, PL, PR, divisor, count_include_pad;
    unsigned items;                  // N * OH * strips * C / HAL_VEC (< 2^31)
    FastDiv fd_cv, fd_strips, fd_oh;  // channel vectors, column strips per row, OH
};

template <bool MAXP, int K, int M>
__device__ __forceinline__ void pool_ncols(const act_t* __restrict__ x, act_t* __restrict__ y, const NColParams& p) {
    constexpr int V = HAL_VEC, NC = 2 * M + K - 2;
    const unsigned it = blockIdx.x * blockDim.x + threadIdx.x;
    if (it >= p.items) return;
    const unsigned q = fdiv(it, p.fd_cv);
    const int c = (int)(it - q * p.fd_cv.d) * V;
    const unsigned q2 = fdiv(q, p.fd_strips);
    const int ow0 = (int)(q - q2 * p.fd_strips.d) * M;
    const unsigned n = fdiv(q2, p.fd_oh);
    const int oh = (int)(q2 - n * p.fd_oh.d);
    const int C = p.C, IH = p.IH, IW = p.IW, OW = p.OW;
    const int ih0 = 2 * oh - p.PT, iw0 = 2 * ow0 - p.PL;
    const act_t* __restrict__ xn = x + (size_t)n * IH * IW * C + c;
    bool rin[K], cin[NC];
#pragma unroll
    for (int kh = 0; kh < K; ++kh) rin[kh] = (unsigned)(ih0 + kh) < (unsigned)IH;
#pragma unroll
    for (int j = 0; j < NC; ++j) cin[j] = (unsigned)(iw0 + j) < (unsigned)IW;
    uint4 pre[K][NC];
#pragma unroll
    for (int kh = 0; kh < K; ++kh)
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            pre[kh][j] = make_uint4(0u, 0u, 0u, 0u);
            if (rin[kh] && cin[j])
                pre[kh][j] = __ldg(reinterpret_cast<const uint4*>(xn + ((size_t)(ih0 + kh) * IW + iw0 + j) * C));
        }
    const bool cip = p.count_include_pad != 0;
    const float ch = MAXP ? 1.0f : (float)count_taps(ih0, K, 1, cip ? -p.PT : 0, cip ? IH + p.PB : IH);
#pragma unroll
    for (int m = 0; m < M; ++m) {
        const int ow = ow0 + m;
        if (ow >= OW) break;
        float acc[V];
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = MAXP ? HAL_NEG_INF : 0.0f;
#pragma unroll
        for (int kh = 0; kh < K; ++kh) {
            if (!rin[kh]) continue;  // padding rows: skipped taps
#pragma unroll
            for (int kw = 0; kw < K; ++kw) {
                const int j = 2 * m + kw;  // compile-time after unrolling
                if (!cin[j]) continue;
                float f[V];
                unpack_vec(pre[kh][j], f);
#pragma unroll
                for (int e = 0; e < V; ++e) acc[e] = MAXP ? max_nan(acc[e], f[e]) : acc[e] + f[e];
            }
        }
        if (!MAXP) {
            const float d = p.divisor > 0
                                ? (float)p.divisor
                                : ch * (float)count_taps(2 * ow - p.PL, K, 1, cip ? -p.PL : 0, cip ? IW + p.PR : IW);
#pragma unroll
            for (int e = 0; e < V; ++e) acc[e] = __fdividef(acc[e], d);
        }
        st_vec(y + (((size_t)n * p.OH + oh) * OW + ow) * C + c, acc);
    }
}

#define POOL_NCOLS_KERNEL(NAME, MAXP, K, M)                                                        \
    extern "C" __global__ void __launch_bounds__(POOL_THREADS)                                     \
        NAME(const act_t* __restrict__ x, act_t* __restrict__ y, NColParams p) { HAL_PDL_ENTRY(); \
        pool_ncols<MAXP, K, M>(x, y, p);                                                           \
    }
POOL_NCOLS_KERNEL(pool2d_max_ncols2_k3s2, true, 3, 2)
POOL_NCOLS_KERNEL(pool2d_max_ncols4_k3s2, true, 3, 4)
POOL_NCOLS_KERNEL(pool2d_avg_ncols2_k3s2, false, 3, 2)
POOL_NCOLS_KERNEL(pool2d_avg_ncols4_k3s2, false, 3, 4)
POOL_NCOLS_KERNEL(pool2d_max_ncols2_k2s2, true, 2, 2)
POOL_NCOLS_KERNEL(pool2d_max_ncols4_k2s2, true, 2, 4)
POOL_NCOLS_KERNEL(pool2d_avg_ncols2_k2s2, false, 2, 2)
POOL_NCOLS_KERNEL(pool2d_avg_ncols4_k2s2, false, 2, 4)
