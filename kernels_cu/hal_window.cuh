// Tiled sliding-window kernels shared by pool2d.cu, adaptive_pool2d.cu and conv2d.cu
// (max pooling, average pooling, depthwise convolution).
//
// A block copies the input its outputs need into shared memory with 16-byte
// (cp.async on sm_80+) loads, each input byte read once from DRAM, then computes
// its outputs from shared memory. Tile geometry is chosen by the launcher and
// passed in WinParams; shapes are run-time values, so one build serves every shape.
//
//  NCHW: a block covers either a band of output rows of one plane or several whole
//        planes: the input it needs is one contiguous range of memory.
//  NHWC: a block covers a (tile rows x tile cols) patch of one image and a chunk of
//        channels; each thread computes HAL_VEC channels of an output pixel
//        (16-byte vectors), which needs C % HAL_VEC == 0 and 16-byte aligned buffers.
#pragma once

#include "hal_prelude.cuh"

// WIN_SPLIT [0]: float32 stride-2 NCHW tiles keep even and odd columns apart in shared
// memory (no bank conflicts, more address arithmetic); 0 reads them in place (2-way conflicts)
#ifndef WIN_SPLIT
#define WIN_SPLIT 0
#endif

// WIN_H2 [0]: 16-bit (float16, bfloat16) max pooling without indices in pairs (max is exact in
// either, so the results equal the float path's): NHWC strips take the maximum of 8 channels in 4
// instructions; NCHW 2x2/2 and 3x3/2 windows (even IW) compute two adjacent outputs per
// thread from 32-bit shared-memory words. The launcher then keeps 16 bytes in front of the
// NCHW input tile (the words left of column 0 are read, then masked).
#ifndef WIN_H2
#define WIN_H2 0
#endif

// WIN_H2AVG [0]: 16-bit average pooling, 2x2/2 and 3x3/2 windows (even IW): a thread computes
// two adjacent outputs of a strip from 32-bit shared-memory words (half the loads and the index
// work of the float path), converting each pair to float and summing in float. Same 16-byte
// guard in front of the NCHW tile as WIN_H2.
#ifndef WIN_H2AVG
#define WIN_H2AVG 0
#endif

// WIN_DW4 [1]: float16 NHWC depthwise strips take 4 channels (8 bytes) per thread instead of 8,
// so that the 3x3 weights of the thread stay in registers as floats (as with float32) instead
// of being read from shared memory for every tap of every output. DW_HALF4 (conv2d.cu's -D)
// sets it.
#ifndef WIN_DW4
#ifdef DW_HALF4
#define WIN_DW4 DW_HALF4
#else
#define WIN_DW4 1
#endif
#endif

// WIN_DWH2 [1]: 16-bit NCHW depthwise 3x3 stride 1 (even IW): a thread computes two adjacent
// outputs of a strip from 32-bit shared-memory words (4 columns in 2-3 loads instead of 6), float
// FMAs in the order of the float path. DW_H2 (conv2d.cu's -D) sets it; the launcher keeps the
// 16-byte guard in front of the tile.
#ifndef WIN_DWH2
#ifdef DW_H2
#define WIN_DWH2 DW_H2
#else
#define WIN_DWH2 1
#endif
#endif

#define WIN_MAX 0
#define WIN_AVG 1
#define WIN_DW 2

// ---------------------------------------------------------------------------------
// 16-bit pairs in a 32-bit word (low half = lower column / channel): float16's, or bfloat16's
// (a bfloat16 is the upper half of a float32: its conversions are shifts and masks)
// ---------------------------------------------------------------------------------
#if DTYPE_BF16
#define WIN_NEG_INF_H2 0xFF80FF80u
#else
#define WIN_NEG_INF_H2 0xFC00FC00u
#endif
__device__ __forceinline__ float win_h_lo(uint32_t h) { return act16_f((unsigned short)(h & 0xFFFFu)); }
__device__ __forceinline__ float win_h_hi(uint32_t h) { return act16_f((unsigned short)(h >> 16)); }
// lane-wise max_nan (max.NaN: the same maximum the float path takes)
__device__ __forceinline__ uint32_t win_hmax2(uint32_t best, uint32_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t r;
#if DTYPE_BF16
    asm("max.NaN.bf16x2 %0, %1, %2;\n" : "=r"(r) : "r"(best), "r"(v));
#else
    asm("max.NaN.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(best), "r"(v));
#endif
    return r;
#elif DTYPE_BF16
    // the maximum is one of the two values, or a NaN: rounding it back changes nothing
    return act2_word(max_nan(win_h_lo(best), win_h_lo(v)), max_nan(win_h_hi(best), win_h_hi(v)));
#else
    const __half lo = __float2half_rn(max_nan(win_h_lo(best), win_h_lo(v)));
    const __half hi = __float2half_rn(max_nan(win_h_hi(best), win_h_hi(v)));
    return (uint32_t)__half_as_ushort(lo) | ((uint32_t)__half_as_ushort(hi) << 16);
#endif
}
// store two adjacent 16-bit outputs (the second only when `two`) through the epilogue
__device__ __forceinline__ void win_st_h2(act_t* p, uint32_t h, bool two) {
#if HAL_ACT16 && !FUSE_RELU
    // no epilogue: store the words as they are (one 4-byte store when aligned)
    if (two && (reinterpret_cast<uintptr_t>(p) & 3u) == 0) {
        *reinterpret_cast<uint32_t*>(p) = h;
        return;
    }
#endif
    st_act(p, win_h_lo(h));
    if (two) st_act(p + 1, win_h_hi(h));
}

// store two adjacent outputs given as floats (the second only when `two`) through the epilogue
__device__ __forceinline__ void win_st_f2(act_t* p, float a, float b, bool two) {
#if HAL_ACT16
    if (two && (reinterpret_cast<uintptr_t>(p) & 3u) == 0) {  // one 4-byte store, rounded as st_act rounds
        *reinterpret_cast<uint32_t*>(p) = act2_word(out_act(a), out_act(b));
        return;
    }
#endif
    st_act(p, a);
    if (two) st_act(p + 1, b);
}

struct WinParams {
    int N, C, IH, IW, OH, OW;
    int KH, KW, SH, SW, PT, PB, PL, PR, DH, DW;
    int divisor, count_include_pad;
    // NCHW plan: planes > 0 -> that many whole planes per block; else bands of `band` output rows
    int planes, band, bands;
    // NHWC plan: output tile th x tw, tiles_h x tiles_w tiles, channel chunk tc (chunks of them)
    int th, tw, tiles_h, tiles_w, tc, chunks;
    // float offset of the input tile in dynamic shared memory (after depthwise weights)
    int w_floats;
    // NCHW strips (fixed windows): strips of output rows per plane when a block holds whole planes
    int spp;
    FastDiv fd_ow, fd_oh, fd_sp;
};

// output rows per strip of the fixed-window NCHW kernels (the launcher uses the same numbers)
#define WIN_STRIP_K3S2 4
#define WIN_STRIP_K2S2 2
#define WIN_STRIP_K3S1 4
// NHWC strips hold 16-byte vectors: shorter, or the registers run out
#define WIN_STRIP_NHWC 2

// first input row/col a window reads (clipped to the input), and one past the last
template <bool ADAPT>
__device__ __forceinline__ int win_lo(int o, int S, int P, int In, int Out) {
    if (ADAPT) return (int)(((long long)o * In) / Out);
    int v = o * S - P;
    return v < 0 ? 0 : (v > In ? In : v);
}
template <bool ADAPT>
__device__ __forceinline__ int win_hi(int o, int S, int P, int K, int D, int In, int Out) {
    if (ADAPT) return (int)(((long long)(o + 1) * In + Out - 1) / Out);
    int v = o * S - P + (K - 1) * D + 1;
    return v < 0 ? 0 : (v > In ? In : v);
}
// number of k in [0, K) with lo <= s + k * D < hi
__device__ __forceinline__ int count_taps(int s, int K, int D, int lo, int hi) {
    int klo = s >= lo ? 0 : (lo - s + D - 1) / D;
    int last = hi - 1 - s;
    int khi = last < 0 ? 0 : min(K, last / D + 1);
    return max(0, khi - klo);
}
// first k in [0, K) with s + k * D >= 0 (a valid tap exists: the spec guarantees it)
__device__ __forceinline__ int first_tap(int s, int D) { return s >= 0 ? s : s + ((-s + D - 1) / D) * D; }

// ---------------------------------------------------------------------------------
// NCHW
// ---------------------------------------------------------------------------------

// Copy len elements from g into s; returns o such that element e is at s[o + e]
// (SPLIT: at ((e + o) & 1) * hs + ((e + o) >> 1): even and odd columns apart, so that
// stride-2 windows read consecutive words).
template <bool SPLIT>
__device__ __forceinline__ int load_contig(act_t* s, const act_t* __restrict__ g, int len, int hs) {
    const int o = (int)((reinterpret_cast<uintptr_t>(g) & 15u) / sizeof(act_t));
    const act_t* ga = g - o;
    const int nv = (o + len + HAL_VEC - 1) / HAL_VEC;
    if (!SPLIT) {
        for (int v = threadIdx.x; v < nv; v += blockDim.x) {
            const int e0 = v * HAL_VEC - o;
            if (e0 >= 0 && e0 + HAL_VEC <= len) {
                cp_async16(s + v * HAL_VEC, ga + v * HAL_VEC);
            } else {
#pragma unroll
                for (int j = 0; j < HAL_VEC; ++j) {
                    const int e = e0 + j;
                    if (e >= 0 && e < len) s[v * HAL_VEC + j] = g[e];
                }
            }
        }
        cp_async_commit();
        cp_async_wait<0>();
    } else {
        // float only (the launcher never asks for SPLIT with float16)
        float* sf = reinterpret_cast<float*>(s);
        const float* gf = reinterpret_cast<const float*>(g);
        const float* gaf = reinterpret_cast<const float*>(ga);
        const int step = blockDim.x;
        for (int v0 = threadIdx.x; v0 < nv; v0 += 4 * step) {
            float4 r[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int v = v0 + u * step;
                const int e0 = v * 4 - o;
                if (v < nv) {
                    if (e0 >= 0 && e0 + 4 <= len) {
                        r[u] = __ldg(reinterpret_cast<const float4*>(gaf) + v);
                    } else {
                        r[u].x = (e0 >= 0 && e0 < len) ? gf[e0] : 0.0f;
                        r[u].y = (e0 + 1 >= 0 && e0 + 1 < len) ? gf[e0 + 1] : 0.0f;
                        r[u].z = (e0 + 2 >= 0 && e0 + 2 < len) ? gf[e0 + 2] : 0.0f;
                        r[u].w = (e0 + 3 >= 0 && e0 + 3 < len) ? gf[e0 + 3] : 0.0f;
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int v = v0 + u * step;
                if (v < nv) {
                    *reinterpret_cast<float2*>(sf + 2 * v) = make_float2(r[u].x, r[u].z);
                    *reinterpret_cast<float2*>(sf + hs + 2 * v) = make_float2(r[u].y, r[u].w);
                }
            }
        }
    }
    return o;
}

// Fixed windows (FKH x FKW, stride FSH x FSW, no dilation): a thread walks a vertical strip
// of SR outputs of one column, keeping the window's values in registers, so input rows
// shared by consecutive outputs are read from shared memory once.
template <int OP, bool IDX, int FKH, int FKW, int FSH, int FSW, int SR, bool SPLIT>
__device__ __forceinline__ void win_nchw_strips(const act_t* __restrict__ s_in, const float* __restrict__ s_w, int o,
                                                int hs, act_t* __restrict__ y, long long* __restrict__ ind,
                                                const float* __restrict__ bias, const WinParams& p, long long pf,
                                                int np, int oh_f, int oh_l, int ih_lo, long long out0) {
    const int IH = p.IH, IW = p.IW, OH = p.OH, OW = p.OW;
    const bool planes = p.planes > 0;
    const int nb = planes ? OH : (oh_l - oh_f + 1);
    const int spp = planes ? p.spp : (nb + SR - 1) / SR;
    const int items = np * spp * OW;
    const float neutral = OP == WIN_MAX ? HAL_NEG_INF : 0.0f;
    for (int it = threadIdx.x; it < items; it += blockDim.x) {
        const int t = (int)fdiv((uint32_t)it, p.fd_ow);
        const int ow = it - t * OW;
        int pl = 0, j = t;
        if (planes) {
            pl = (int)fdiv((uint32_t)t, p.fd_sp);
            j = t - pl * spp;
        }
        const int oh_s = oh_f + j * SR;
        const int cnt = min(SR, oh_f + nb - oh_s);
        const int rowbase = pl * IH - ih_lo;
        const int ws0 = ow * FSW - p.PL;
        bool colok[FKW];
#pragma unroll
        for (int kw = 0; kw < FKW; ++kw) colok[kw] = (unsigned)(ws0 + kw) < (unsigned)IW;
        float wk[FKH * FKW];
        float b0 = 0.0f;
        if (OP == WIN_DW) {
#pragma unroll
            for (int k = 0; k < FKH * FKW; ++k) wk[k] = s_w[pl * FKH * FKW + k];
            b0 = bias ? bias[(pf + pl) % p.C] : 0.0f;
        }
        float v[FKH][FKW];
#pragma unroll
        for (int s = 0; s < SR; ++s) {
            if (s < cnt) {
                const int oh = oh_s + s;
                const int hs0 = oh * FSH - p.PT;
#pragma unroll
                for (int kh = 0; kh < FKH; ++kh) {
                    if (s > 0 && kh < FKH - FSH) {
#pragma unroll
                        for (int kw = 0; kw < FKW; ++kw) v[kh][kw] = v[kh + FSH][kw];
                    } else {
                        const int ih = hs0 + kh;
                        const bool rok = (unsigned)ih < (unsigned)IH;
                        const int e0 = (rowbase + ih) * IW + ws0;
#pragma unroll
                        for (int kw = 0; kw < FKW; ++kw) {
                            float val = neutral;
                            if (rok && colok[kw]) {
                                const int e = e0 + kw + o;
                                val = SPLIT ? reinterpret_cast<const float*>(s_in)[(e & 1) * hs + (e >> 1)]
                                            : to_f(s_in[e]);
                            }
                            v[kh][kw] = val;
                        }
                    }
                }
                float acc;
                long long bi = 0;
                if (OP == WIN_MAX) {
                    acc = HAL_NEG_INF;
                    if (IDX) {
                        bi = (long long)max(hs0, 0) * IW + max(ws0, 0);
#pragma unroll
                        for (int kh = 0; kh < FKH; ++kh)
#pragma unroll
                            for (int kw = 0; kw < FKW; ++kw)
                                max_take(v[kh][kw], (long long)(hs0 + kh) * IW + ws0 + kw, acc, bi);
                    } else {
#pragma unroll
                        for (int kh = 0; kh < FKH; ++kh)
#pragma unroll
                            for (int kw = 0; kw < FKW; ++kw) acc = max_nan(acc, v[kh][kw]);
                    }
                } else if (OP == WIN_AVG) {
                    acc = 0.0f;
#pragma unroll
                    for (int kh = 0; kh < FKH; ++kh)
#pragma unroll
                        for (int kw = 0; kw < FKW; ++kw) acc += v[kh][kw];
                    int div;
                    if (p.divisor > 0)
                        div = p.divisor;
                    else if (p.count_include_pad)
                        div = count_taps(hs0, FKH, 1, -p.PT, IH + p.PB) * count_taps(ws0, FKW, 1, -p.PL, IW + p.PR);
                    else
                        div = count_taps(hs0, FKH, 1, 0, IH) * count_taps(ws0, FKW, 1, 0, IW);
                    acc = __fdividef(acc, (float)div);
                } else {
                    acc = b0;
#pragma unroll
                    for (int kh = 0; kh < FKH; ++kh)
#pragma unroll
                        for (int kw = 0; kw < FKW; ++kw) acc = fmaf(v[kh][kw], wk[kh * FKW + kw], acc);
                }
                const long long oi = out0 + (long long)(pl * OH + oh - oh_f) * OW + ow;
                st_act(y + oi, acc);
                if (IDX) ind[oi] = bi;
            }
        }
    }
}

// 16-bit max pooling, FK x FK windows with stride 2 (FK 2 or 3), even IW, no indices: a thread
// computes a vertical strip of SR rows of two adjacent outputs (ow, ow + 1) from 32-bit words.
// S = parity of the shared-memory element of column c0 = 2 * ow - PL (the same for every row
// and pair when IW is even): the words start at element c0 - S.
//  * rows: a strip row outside the tile is replaced by the nearest tile row; every window
//    holding such a row also holds that one (a window has a valid tap), and the maximum of
//    a set does not change when one of its members is repeated;
//  * columns: the maximum of a window's rows is taken lane-wise on whole words, then lanes
//    of columns outside [0, IW) become -inf, then the taps are regrouped with byte_perm:
//    X = (c0, c0 + 2), Y = (c0 + 1, c0 + 3), Z = (c0 + 2, c0 + 4): out = max(X, Y, Z).
template <int FK, int SR, int S>
__device__ __forceinline__ void win_nchw_h2(const act_t* __restrict__ s_in, int o, act_t* __restrict__ y,
                                            const WinParams& p, int np, int oh_f, int oh_l, int ih_lo, int ih_hi,
                                            long long out0) {
    constexpr int NW = (FK == 2 && S == 0) ? 2 : 3;  // words under a row of the pair's windows
    constexpr int NR = (SR - 1) * 2 + FK;            // input rows under a strip
    const int IH = p.IH, IW = p.IW, OH = p.OH, OW = p.OW;
    const int IWh = IW >> 1;
    const bool planes = p.planes > 0;
    const int nb = planes ? OH : (oh_l - oh_f + 1);
    const int spp = planes ? p.spp : (nb + SR - 1) / SR;
    const int owp = (OW + 1) >> 1;  // output column pairs
    const int items = np * spp * owp;
    const int NT = blockDim.x;
    // item = t * owp + c, advanced without a division per item
    int t = (int)threadIdx.x / owp;
    int c = (int)threadIdx.x - t * owp;
    const int dt = NT / owp, dc = NT - dt * owp;
    const uint32_t* __restrict__ sw = reinterpret_cast<const uint32_t*>(s_in);
    for (int it = threadIdx.x; it < items; it += NT) {
        int pl = 0, j = t;
        if (planes) {
            pl = (int)fdiv((uint32_t)t, p.fd_sp);
            j = t - pl * spp;
        }
        const int oh_s = oh_f + j * SR;
        const int cnt = min(SR, oh_f + nb - oh_s);
        const int ow = 2 * c;
        const int c0 = 2 * ow - p.PL;
        // word of (row ih, column c0 - S) is wb + ih * IWh (c0 - S - o even; may be -1: the guard)
        const int wb = (o + (pl * IH - ih_lo) * IW + c0 - S) >> 1;
        // after the shift by S, word k holds columns (c0 + 2k, c0 + 2k + 1)
        uint32_t keep[3], fill[3];
#pragma unroll
        for (int k = 0; k < 3; ++k) {
            keep[k] = ((unsigned)(c0 + 2 * k) < (unsigned)IW ? 0x0000FFFFu : 0u) |
                      ((unsigned)(c0 + 2 * k + 1) < (unsigned)IW ? 0xFFFF0000u : 0u);
            fill[k] = WIN_NEG_INF_H2 & ~keep[k];
        }
        const int hs_s = oh_s * 2 - p.PT;
        uint32_t acc[SR][NW];
#pragma unroll
        for (int rr = 0; rr < NR; ++rr) {
            const int ih = min(max(hs_s + rr, ih_lo), ih_hi - 1);
            const uint32_t* rp = sw + (wb + ih * IWh);
            uint32_t w[NW];
#pragma unroll
            for (int k = 0; k < NW; ++k) w[k] = rp[k];
#pragma unroll
            for (int s = 0; s < SR; ++s) {
                const int kh = rr - 2 * s;  // compile-time after unrolling
                if (kh < 0 || kh >= FK) continue;
#pragma unroll
                for (int k = 0; k < NW; ++k) acc[s][k] = kh == 0 ? w[k] : win_hmax2(acc[s][k], w[k]);
            }
        }
#pragma unroll
        for (int s = 0; s < SR; ++s) {
            if (s >= cnt) continue;
            uint32_t a0 = acc[s][0], a1 = acc[s][1], a2 = acc[s][NW - 1];
            if (S) {
                a0 = __funnelshift_r(a0, a1, 16);
                a1 = __funnelshift_r(a1, a2, 16);
                a2 >>= 16;
            }
            a0 = (a0 & keep[0]) | fill[0];
            a1 = (a1 & keep[1]) | fill[1];
            uint32_t r = win_hmax2(__byte_perm(a0, a1, 0x5410), __byte_perm(a0, a1, 0x7632));
            if (FK == 3) {
                a2 = (a2 & keep[2]) | fill[2];
                r = win_hmax2(r, __byte_perm(a1, a2, 0x5410));
            }
            const long long oi = out0 + (long long)(pl * OH + oh_s + s - oh_f) * OW + ow;
            win_st_h2(y + oi, r, ow + 1 < OW);
        }
        c += dc;
        t += dt;
        if (c >= owp) {
            c -= owp;
            ++t;
        }
    }
}

// 16-bit average pooling, FK x FK windows with stride 2 (FK 2 or 3), even IW (WIN_H2AVG): a thread
// computes a vertical strip of SR rows of two adjacent outputs (ow, ow + 1). Word k of a row holds
// columns (c0 - S + 2k, c0 - S + 2k + 1), c0 = 2 * ow - PL, S its parity as in win_nchw_h2.
//  * columns outside [0, IW) (padding, a neighbouring row, the guard or the slack past the tile)
//    are zeroed in the word before conversion: they add nothing;
//  * rows outside [0, IH) add nothing; rows of the strip outside the tile (read clamped to it)
//    only feed outputs past the block's last row, which are not stored;
//  * each row's two window sums are taken in float, then added to every strip output using it;
//    the strip is walked in halves of two output rows (the row between them is read twice).
template <int FK, int SR, int S>
__device__ __forceinline__ void win_nchw_h2avg(const act_t* __restrict__ s_in, int o, act_t* __restrict__ y,
                                               const WinParams& p, int np, int oh_f, int oh_l, int ih_lo, int ih_hi,
                                               long long out0) {
    constexpr int NW = (FK == 2 && S == 0) ? 2 : 3;  // words under a row of the pair's windows
    static_assert(SR % 2 == 0, "strips of whole halves");
    const int IH = p.IH, IW = p.IW, OH = p.OH, OW = p.OW;
    const int IWh = IW >> 1;
    const bool planes = p.planes > 0;
    const int nb = planes ? OH : (oh_l - oh_f + 1);
    const int spp = planes ? p.spp : (nb + SR - 1) / SR;
    const int owp = (OW + 1) >> 1;  // output column pairs
    const int items = np * spp * owp;
    const int NT = blockDim.x;
    int t = (int)threadIdx.x / owp;
    int c = (int)threadIdx.x - t * owp;
    const int dt = NT / owp, dc = NT - dt * owp;
    const uint32_t* __restrict__ sw = reinterpret_cast<const uint32_t*>(s_in);
    for (int it = threadIdx.x; it < items; it += NT) {
        int pl = 0, j = t;
        if (planes) {
            pl = (int)fdiv((uint32_t)t, p.fd_sp);
            j = t - pl * spp;
        }
        const int oh_s = oh_f + j * SR;
        const int cnt = min(SR, oh_f + nb - oh_s);
        const int ow = 2 * c;
        const int c0 = 2 * ow - p.PL;
        const int wb = (o + (pl * IH - ih_lo) * IW + c0 - S) >> 1;
        uint32_t keep[NW];
#pragma unroll
        for (int k = 0; k < NW; ++k)
            keep[k] = ((unsigned)(c0 - S + 2 * k) < (unsigned)IW ? 0x0000FFFFu : 0u) |
                      ((unsigned)(c0 - S + 2 * k + 1) < (unsigned)IW ? 0xFFFF0000u : 0u);
        const int hs_s = oh_s * 2 - p.PT;
        // the strip in halves of two output rows (fewer registers: no spills at 2048 threads per SM)
#pragma unroll 1
        for (int h = 0; h < SR; h += 2) {
            if (h >= cnt) break;
            float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
#pragma unroll
            for (int rr = 0; rr < FK + 2; ++rr) {
                const int ih = hs_s + 2 * h + rr;
                if ((unsigned)ih >= (unsigned)IH) continue;  // padding rows add nothing
                const uint32_t* rp = sw + (wb + min(max(ih, ih_lo), ih_hi - 1) * IWh);
                float f[2 * NW];
#pragma unroll
                for (int k = 0; k < NW; ++k) {
                    const uint32_t m = rp[k] & keep[k];
                    const float2 v = act2_f(m);
                    f[2 * k] = v.x;
                    f[2 * k + 1] = v.y;
                }
                float ha = f[S] + f[S + 1], hb = f[S + 2] + f[S + 3];
                if (FK == 3) {
                    ha += f[S + 2];
                    hb += f[(FK == 3 ? S + 4 : 0)];
                }
#pragma unroll
                for (int s = 0; s < 2; ++s) {
                    const int kh = rr - 2 * s;  // compile-time after unrolling
                    if (kh < 0 || kh >= FK) continue;
                    acc[s][0] += ha;
                    acc[s][1] += hb;
                }
            }
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                if (h + s >= cnt) continue;
                float da, db;
                if (p.divisor > 0) {
                    da = db = (float)p.divisor;
                } else {
                    const bool cip = p.count_include_pad != 0;
                    const int wlo = cip ? -p.PL : 0, whi = cip ? IW + p.PR : IW;
                    const int chs = count_taps(hs_s + 2 * (h + s), FK, 1, cip ? -p.PT : 0, cip ? IH + p.PB : IH);
                    da = (float)(chs * count_taps(c0, FK, 1, wlo, whi));
                    db = (float)(chs * count_taps(c0 + 2, FK, 1, wlo, whi));
                }
                const long long oi = out0 + (long long)(pl * OH + oh_s + h + s - oh_f) * OW + ow;
                win_st_f2(y + oi, __fdividef(acc[s][0], da), __fdividef(acc[s][1], db), ow + 1 < OW);
            }
        }
        c += dc;
        t += dt;
        if (c >= owp) {
            c -= owp;
            ++t;
        }
    }
}

// 16-bit depthwise 3x3, stride 1, no dilation, even IW (WIN_DWH2): a thread computes a vertical
// strip of SR rows of two adjacent outputs (ow, ow + 1), ow even. Word k of a row holds columns
// (c0 - S + 2k, c0 - S + 2k + 1), c0 = ow - PL, S its parity. Columns outside [0, IW) are zeroed
// in the word before conversion (zero padding); rows outside [0, IH) are skipped; rows of the
// strip outside the tile (read clamped to it) only feed outputs past the block's last row.
template <int SR, int S>
__device__ __forceinline__ void win_nchw_dwh2(const act_t* __restrict__ s_in, const float* __restrict__ s_w, int o,
                                              act_t* __restrict__ y, const float* __restrict__ bias,
                                              const WinParams& p, long long pf, int np, int oh_f, int oh_l, int ih_lo,
                                              int ih_hi, long long out0) {
    constexpr int NW = S == 0 ? 2 : 3;  // words under a row of the pair's windows
    constexpr int NR = SR + 2;          // input rows under a strip
    const int IH = p.IH, IW = p.IW, OH = p.OH, OW = p.OW;
    const int IWh = IW >> 1;
    const bool planes = p.planes > 0;
    const int nb = planes ? OH : (oh_l - oh_f + 1);
    const int spp = planes ? p.spp : (nb + SR - 1) / SR;
    const int owp = (OW + 1) >> 1;  // output column pairs
    const int items = np * spp * owp;
    const int NT = blockDim.x;
    int t = (int)threadIdx.x / owp;
    int c = (int)threadIdx.x - t * owp;
    const int dt = NT / owp, dc = NT - dt * owp;
    const uint32_t* __restrict__ sw = reinterpret_cast<const uint32_t*>(s_in);
    for (int it = threadIdx.x; it < items; it += NT) {
        int pl = 0, j = t;
        if (planes) {
            pl = (int)fdiv((uint32_t)t, p.fd_sp);
            j = t - pl * spp;
        }
        const int oh_s = oh_f + j * SR;
        const int cnt = min(SR, oh_f + nb - oh_s);
        const int ow = 2 * c;
        const int c0 = ow - p.PL;
        const int wb = (o + (pl * IH - ih_lo) * IW + c0 - S) >> 1;
        uint32_t keep[NW];
#pragma unroll
        for (int k = 0; k < NW; ++k)
            keep[k] = ((unsigned)(c0 - S + 2 * k) < (unsigned)IW ? 0x0000FFFFu : 0u) |
                      ((unsigned)(c0 - S + 2 * k + 1) < (unsigned)IW ? 0xFFFF0000u : 0u);
        float wk[9];
#pragma unroll
        for (int k = 0; k < 9; ++k) wk[k] = s_w[pl * 9 + k];
        const float b0 = bias ? bias[(pf + pl) % p.C] : 0.0f;
        const int hs_s = oh_s - p.PT;
        float acc[SR][2];
#pragma unroll
        for (int s = 0; s < SR; ++s) acc[s][0] = acc[s][1] = b0;
#pragma unroll
        for (int rr = 0; rr < NR; ++rr) {
            const int ih = hs_s + rr;
            if ((unsigned)ih >= (unsigned)IH) continue;  // zero padding rows
            const uint32_t* rp = sw + (wb + min(max(ih, ih_lo), ih_hi - 1) * IWh);
            float f[2 * NW];
#pragma unroll
            for (int k = 0; k < NW; ++k) {
                const uint32_t m = rp[k] & keep[k];
                const float2 v = act2_f(m);
                f[2 * k] = v.x;
                f[2 * k + 1] = v.y;
            }
#pragma unroll
            for (int s = 0; s < SR; ++s) {
                const int kh = rr - s;  // compile-time after unrolling
                if (kh < 0 || kh >= 3) continue;
#pragma unroll
                for (int kw = 0; kw < 3; ++kw) {
                    acc[s][0] = fmaf(f[S + kw], wk[kh * 3 + kw], acc[s][0]);
                    acc[s][1] = fmaf(f[S + 1 + kw], wk[kh * 3 + kw], acc[s][1]);
                }
            }
        }
#pragma unroll
        for (int s = 0; s < SR; ++s) {
            if (s >= cnt) continue;
            const long long oi = out0 + (long long)(pl * OH + oh_s + s - oh_f) * OW + ow;
            win_st_f2(y + oi, acc[s][0], acc[s][1], ow + 1 < OW);
        }
        c += dc;
        t += dt;
        if (c >= owp) {
            c -= owp;
            ++t;
        }
    }
}

template <int OP, bool ADAPT, bool IDX, int FKH, int FKW, int FSH, int FSW, int SR = 0>
__device__ __forceinline__ void win_nchw(const act_t* __restrict__ x, act_t* __restrict__ y,
                                         long long* __restrict__ ind, const act_t* __restrict__ w,
                                         const float* __restrict__ bias, const WinParams& p) {
    extern __shared__ __align__(16) unsigned char hal_smem[];
    constexpr bool SPLIT = WIN_SPLIT && (FSW == 2) && !HAL_ACT16 && !ADAPT;  // 4-byte elements only
    const int KH = FKH ? FKH : p.KH, KW = FKW ? FKW : p.KW;
    const int SH = FSH ? FSH : p.SH, SW = FSW ? FSW : p.SW;
    const int DH = FKH ? 1 : p.DH, DW = FKW ? 1 : p.DW;
    const int IH = p.IH, IW = p.IW, OH = p.OH, OW = p.OW;

    const long long P = (long long)p.N * p.C;
    const long long b = blockIdx.x;
    long long pf;
    int np, oh_f, oh_l;
    if (p.planes > 0) {
        pf = b * p.planes;
        np = (int)min((long long)p.planes, P - pf);
        oh_f = 0;
        oh_l = OH - 1;
    } else {
        pf = b / p.bands;
        const int band = (int)(b - pf * p.bands);
        np = 1;
        oh_f = band * p.band;
        oh_l = min(OH, oh_f + p.band) - 1;
    }
    const int ih_lo = win_lo<ADAPT>(oh_f, SH, p.PT, IH, OH);
    const int ih_hi = win_hi<ADAPT>(oh_l, SH, p.PT, KH, DH, IH, OH);
    const int len = ((np - 1) * IH + ih_hi - ih_lo) * IW;

    float* s_w = reinterpret_cast<float*>(hal_smem);
    act_t* s_in = reinterpret_cast<act_t*>(hal_smem + (size_t)p.w_floats * 4);
    const int KK = KH * KW;
    if (OP == WIN_DW) {
        for (int i = threadIdx.x; i < np * KK; i += blockDim.x) {
            const int pl = i / KK;
            const int c = (int)((pf + pl) % p.C);
            s_w[i] = to_f(w[(long long)c * KK + (i - pl * KK)]);
        }
    }
    const int hs = SPLIT ? (((len + 8) / 2 + 3) & ~3) : 0;
    const int o = load_contig<SPLIT>(s_in, x + (pf * IH + ih_lo) * IW, len, hs);
    __syncthreads();

    const int nout = (np * OH - (OH - 1 - oh_l) - oh_f) * OW;
    const long long out0 = (pf * OH + oh_f) * OW;
    if constexpr (SR > 0) {
        (void)nout;
#if WIN_H2 && HAL_ACT16
        if constexpr (OP == WIN_MAX && !IDX && !ADAPT && FSH == 2 && FSW == 2 && FKH == FKW &&
                      (FKW == 2 || FKW == 3)) {
            if ((IW & 1) == 0) {  // the element parity of a column is then the same on every row
                if (((o - p.PL) & 1) == 0)
                    win_nchw_h2<FKW, SR, 0>(s_in, o, y, p, np, oh_f, oh_l, ih_lo, ih_hi, out0);
                else
                    win_nchw_h2<FKW, SR, 1>(s_in, o, y, p, np, oh_f, oh_l, ih_lo, ih_hi, out0);
                return;
            }
        }
#endif
#if WIN_DWH2 && HAL_ACT16
        if constexpr (OP == WIN_DW && !ADAPT && FKH == 3 && FKW == 3 && FSH == 1 && FSW == 1) {
            // even IW; the columns read (c0 - 1 .. c0 + 4 of every pair) stay within the guard in
            // front of the tile and the slack behind it
            if ((IW & 1) == 0 && p.PL <= 6 && ((OW - 1) & ~1) - p.PL + 4 <= IW + 8) {
                if (((o - p.PL) & 1) == 0)
                    win_nchw_dwh2<SR, 0>(s_in, s_w, o, y, bias, p, pf, np, oh_f, oh_l, ih_lo, ih_hi, out0);
                else
                    win_nchw_dwh2<SR, 1>(s_in, s_w, o, y, bias, p, pf, np, oh_f, oh_l, ih_lo, ih_hi, out0);
                return;
            }
        }
#endif
#if WIN_H2AVG && HAL_ACT16
        if constexpr (OP == WIN_AVG && !ADAPT && FSH == 2 && FSW == 2 && FKH == FKW && (FKW == 2 || FKW == 3)) {
            if ((IW & 1) == 0) {
                if (((o - p.PL) & 1) == 0)
                    win_nchw_h2avg<FKW, SR, 0>(s_in, o, y, p, np, oh_f, oh_l, ih_lo, ih_hi, out0);
                else
                    win_nchw_h2avg<FKW, SR, 1>(s_in, o, y, p, np, oh_f, oh_l, ih_lo, ih_hi, out0);
                return;
            }
        }
#endif
        win_nchw_strips<OP, IDX, FKH, FKW, FSH, FSW, SR, SPLIT>(s_in, s_w, o, hs, y, ind, bias, p, pf, np, oh_f, oh_l,
                                                                ih_lo, out0);
    } else {
    for (int l = threadIdx.x; l < nout; l += blockDim.x) {
        const int r = (int)fdiv((uint32_t)l, p.fd_ow);
        const int ow = l - r * OW;
        int R = oh_f + r, pl = 0, oh = R;
        if (p.planes > 0) {
            pl = (int)fdiv((uint32_t)R, p.fd_oh);
            oh = R - pl * OH;
        }
        const int rowbase = pl * IH - ih_lo;  // chunk row of input row ih = rowbase + ih
        int hs0, he, ws0, we;
        if (ADAPT) {
            hs0 = win_lo<true>(oh, 1, 0, IH, OH);
            he = win_hi<true>(oh, 1, 0, 1, 1, IH, OH);
            ws0 = win_lo<true>(ow, 1, 0, IW, OW);
            we = win_hi<true>(ow, 1, 0, 1, 1, IW, OW);
        } else {
            hs0 = oh * SH - p.PT;
            ws0 = ow * SW - p.PL;
        }
#define WIN_GET(e) (SPLIT ? reinterpret_cast<const float*>(s_in)[(((e) + o) & 1) * hs + (((e) + o) >> 1)] \
                          : to_f(s_in[o + (e)]))
        float acc;
        long long bi = 0;
        if (OP == WIN_MAX) {
            acc = HAL_NEG_INF;
            if (ADAPT) {
                bi = (long long)hs0 * IW + ws0;
                for (int ih = hs0; ih < he; ++ih) {
                    const int e = (rowbase + ih) * IW;
                    for (int iw = ws0; iw < we; ++iw) {
                        if (IDX)
                            max_take(WIN_GET(e + iw), (long long)ih * IW + iw, acc, bi);
                        else
                            acc = max_nan(acc, WIN_GET(e + iw));
                    }
                }
            } else {
                bi = (long long)first_tap(hs0, DH) * IW + first_tap(ws0, DW);
#pragma unroll
                for (int kh = 0; kh < KH; ++kh) {
                    const int ih = hs0 + kh * DH;
                    if ((unsigned)ih >= (unsigned)IH) continue;
                    const int e = (rowbase + ih) * IW;
#pragma unroll
                    for (int kw = 0; kw < KW; ++kw) {
                        const int iw = ws0 + kw * DW;
                        if ((unsigned)iw >= (unsigned)IW) continue;
                        if (IDX)
                            max_take(WIN_GET(e + iw), (long long)ih * IW + iw, acc, bi);
                        else
                            acc = max_nan(acc, WIN_GET(e + iw));
                    }
                }
            }
        } else if (OP == WIN_AVG) {
            acc = 0.0f;
            int div;
            if (ADAPT) {
                float a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;  // independent sums: the bins can be long
                for (int ih = hs0; ih < he; ++ih) {
                    const int e = (rowbase + ih) * IW;
                    int iw = ws0;
                    for (; iw + 3 < we; iw += 4) {
                        acc += WIN_GET(e + iw);
                        a1 += WIN_GET(e + iw + 1);
                        a2 += WIN_GET(e + iw + 2);
                        a3 += WIN_GET(e + iw + 3);
                    }
                    for (; iw < we; ++iw) acc += WIN_GET(e + iw);
                }
                acc = (acc + a1) + (a2 + a3);
                div = (he - hs0) * (we - ws0);
            } else {
#pragma unroll
                for (int kh = 0; kh < KH; ++kh) {
                    const int ih = hs0 + kh * DH;
                    if ((unsigned)ih >= (unsigned)IH) continue;
                    const int e = (rowbase + ih) * IW;
#pragma unroll
                    for (int kw = 0; kw < KW; ++kw) {
                        const int iw = ws0 + kw * DW;
                        if ((unsigned)iw >= (unsigned)IW) continue;
                        acc += WIN_GET(e + iw);
                    }
                }
                if (p.divisor > 0)
                    div = p.divisor;
                else if (p.count_include_pad)
                    div = count_taps(hs0, KH, DH, -p.PT, IH + p.PB) * count_taps(ws0, KW, DW, -p.PL, IW + p.PR);
                else
                    div = count_taps(hs0, KH, DH, 0, IH) * count_taps(ws0, KW, DW, 0, IW);
            }
            acc = __fdividef(acc, (float)div);
        } else {  // depthwise convolution
            const long long plane = pf + pl;
            acc = bias ? bias[plane % p.C] : 0.0f;
            const float* wk = s_w + pl * KK;
#pragma unroll
            for (int kh = 0; kh < KH; ++kh) {
                const int ih = hs0 + kh * DH;
                if ((unsigned)ih >= (unsigned)IH) continue;
                const int e = (rowbase + ih) * IW;
#pragma unroll
                for (int kw = 0; kw < KW; ++kw) {
                    const int iw = ws0 + kw * DW;
                    if ((unsigned)iw >= (unsigned)IW) continue;
                    acc = fmaf(WIN_GET(e + iw), wk[kh * KW + kw], acc);
                }
            }
        }
#undef WIN_GET
        st_act(y + out0 + l, acc);
        if (IDX) ind[out0 + l] = bi;
    }
    }
}

// ---------------------------------------------------------------------------------
// NHWC (C % HAL_VEC == 0, 16-byte aligned x and y)
// ---------------------------------------------------------------------------------
// NHWC fixed windows without indices: a thread walks a vertical strip of SR output pixels
// for one channel vector. Input rows are visited once each (row-major) and folded into every
// output of the strip that uses them; depthwise weights stay in registers for the strip.
// CW (4 or HAL_VEC) activations at p in shared memory as floats; CW == 4 with 16-bit activations
// (float16, bfloat16) is 8 bytes
template <int CW>
__device__ __forceinline__ void win_ld_cw(const act_t* p, float (&v)[CW]) {
    if constexpr (CW == HAL_VEC) {
        unpack_vec(*reinterpret_cast<const uint4*>(p), v);
    } else {
#if HAL_ACT16
        const uint2 u = *reinterpret_cast<const uint2*>(p);
        const float2 a = act2_f(u.x);
        const float2 b = act2_f(u.y);
        v[0] = a.x;
        v[1] = a.y;
        v[2] = b.x;
        v[3] = b.y;
#endif
    }
}
// store CW outputs through the epilogue (st_vec, or out_act and one 8-byte store for 4 16-bit ones)
template <int CW>
__device__ __forceinline__ void win_st_cw(act_t* p, const float (&f)[CW]) {
    if constexpr (CW == HAL_VEC) {
        st_vec(p, f);
    } else {
#if HAL_ACT16
        uint2 u;
        u.x = act2_word(out_act(f[0]), out_act(f[1]));
        u.y = act2_word(out_act(f[2]), out_act(f[3]));
        *reinterpret_cast<uint2*>(p) = u;
#endif
    }
}

template <int OP, int FKH, int FKW, int FSH, int FSW, int SR>
__device__ __forceinline__ void win_nhwc_strips(const act_t* __restrict__ s_in, const float* __restrict__ s_w,
                                                act_t* __restrict__ y, const float* __restrict__ bias,
                                                const WinParams& p, int n, int oh0, int oh1, int ow0, int ow1, int c0,
                                                int tce, int ih_lo, int iw_lo, int nc, int L, bool whole) {
    const int IH = p.IH, IW = p.IW, OH = p.OH, OW = p.OW, C = p.C;
    const int NT = blockDim.x, tid = threadIdx.x;
    // channels per thread: 16-bit depthwise takes 4 (WIN_DW4) so that its weights fit in registers
    constexpr int CW = (OP == WIN_DW && HAL_ACT16 && WIN_DW4) ? 4 : HAL_VEC;
    const int ncv = tce / CW;
    const int twe = ow1 - ow0;
    const int spt = (oh1 - oh0 + SR - 1) / SR;
    const int npairs = twe * spt;
    constexpr int NR = (SR - 1) * FSH + FKH;  // input rows under a strip
    int p0, pstep, cv0, cvstep;
    if (ncv >= NT) {
        p0 = 0;
        pstep = 1;
        cv0 = tid;
        cvstep = NT;
    } else {
        pstep = NT / ncv;
        p0 = tid / ncv;
        cv0 = tid - p0 * ncv;
        cvstep = ncv;
        if (p0 >= pstep) p0 = npairs;
    }
    // shared-memory element offset of (tile row r, tile col c): r * rstride + c * pstride
    const int pstride = whole ? C : L, rstride = whole ? L : nc * L;
    int j = p0 / twe, owl = p0 - (p0 / twe) * twe;
    for (int pr = p0; pr < npairs; pr += pstep) {
        const int ow = ow0 + owl, oh_s = oh0 + j * SR;
        const int cnt = min(SR, oh1 - oh_s);
        const int ws0 = ow * FSW - p.PL;
        const int hs_s = oh_s * FSH - p.PT;
        bool colok[FKW];
#pragma unroll
        for (int kw = 0; kw < FKW; ++kw) colok[kw] = (unsigned)(ws0 + kw) < (unsigned)IW;
        for (int cv = cv0; cv < ncv; cv += cvstep) {
            const int cbase = (ws0 - iw_lo) * pstride + cv * CW;
#if WIN_H2 && HAL_ACT16
            if constexpr (OP == WIN_MAX) {  // 8 channels as 4 half2 words: no conversions per tap
                uint32_t hacc[SR][4];
#pragma unroll
                for (int s = 0; s < SR; ++s)
#pragma unroll
                    for (int q = 0; q < 4; ++q) hacc[s][q] = WIN_NEG_INF_H2;
#pragma unroll
                for (int rr = 0; rr < NR; ++rr) {
                    const int ih = hs_s + rr;
                    if ((unsigned)ih >= (unsigned)IH) continue;
                    if (rr > (cnt - 1) * FSH + FKH - 1) continue;
                    const act_t* rp = s_in + (ih - ih_lo) * rstride + cbase;
#pragma unroll
                    for (int kw = 0; kw < FKW; ++kw) {
                        if (!colok[kw]) continue;
                        const uint4 u = *reinterpret_cast<const uint4*>(rp + kw * pstride);
#pragma unroll
                        for (int s = 0; s < SR; ++s) {
                            const int kh = rr - s * FSH;
                            if (kh < 0 || kh >= FKH) continue;
                            if (s >= cnt) continue;
                            hacc[s][0] = win_hmax2(hacc[s][0], u.x);
                            hacc[s][1] = win_hmax2(hacc[s][1], u.y);
                            hacc[s][2] = win_hmax2(hacc[s][2], u.z);
                            hacc[s][3] = win_hmax2(hacc[s][3], u.w);
                        }
                    }
                }
#pragma unroll
                for (int s = 0; s < SR; ++s) {
                    if (s >= cnt) continue;
                    float f[HAL_VEC];
                    unpack_vec(make_uint4(hacc[s][0], hacc[s][1], hacc[s][2], hacc[s][3]), f);
                    st_vec(y + (((long long)n * OH + oh_s + s) * OW + ow) * C + c0 + cv * HAL_VEC, f);
                }
                continue;
            }
#endif
            float acc[SR][CW];
            // the strip's weights in registers (float32, and 16-bit with 4 channels per thread);
            // 16-bit with 8 channels (WIN_DW4 = 0) reads them per use
            constexpr bool WREG = OP == WIN_DW && (!HAL_ACT16 || CW == 4);
            float wr[WREG ? FKH * FKW : 1][CW];
            if (WREG) {
#pragma unroll
                for (int k = 0; k < FKH * FKW; ++k)
#pragma unroll
                    for (int q = 0; q < CW; ++q) wr[WREG ? k : 0][q] = s_w[k * tce + cv * CW + q];
            }
#pragma unroll
            for (int s = 0; s < SR; ++s)
#pragma unroll
                for (int q = 0; q < CW; ++q)
                    acc[s][q] = OP == WIN_MAX ? HAL_NEG_INF
                                              : (OP == WIN_DW && bias ? bias[c0 + cv * CW + q] : 0.0f);
#pragma unroll
            for (int rr = 0; rr < NR; ++rr) {
                const int ih = hs_s + rr;
                if ((unsigned)ih >= (unsigned)IH) continue;  // padding: neutral for every output
                if (rr > (cnt - 1) * FSH + FKH - 1) continue;  // only outputs past the tile's end read it
                const act_t* rp = s_in + (ih - ih_lo) * rstride + cbase;
#pragma unroll
                for (int kw = 0; kw < FKW; ++kw) {
                    if (!colok[kw]) continue;
                    float v[CW];
                    win_ld_cw<CW>(rp + kw * pstride, v);
#pragma unroll
                    for (int s = 0; s < SR; ++s) {
                        const int kh = rr - s * FSH;  // compile-time after unrolling
                        if (kh < 0 || kh >= FKH) continue;
                        if (s >= cnt) continue;
#pragma unroll
                        for (int q = 0; q < CW; ++q) {
                            if (OP == WIN_MAX)
                                acc[s][q] = max_nan(acc[s][q], v[q]);
                            else if (OP == WIN_AVG)
                                acc[s][q] += v[q];
                            else
                                acc[s][q] = fmaf(v[q], WREG ? wr[WREG ? kh * FKW + kw : 0][q]
                                                            : s_w[(kh * FKW + kw) * tce + cv * CW + q],
                                                 acc[s][q]);
                        }
                    }
                }
            }
#pragma unroll
            for (int s = 0; s < SR; ++s) {
                if (s >= cnt) continue;
                const int oh = oh_s + s;
                if (OP == WIN_AVG) {
                    const int hs0 = oh * FSH - p.PT;
                    int div;
                    if (p.divisor > 0)
                        div = p.divisor;
                    else if (p.count_include_pad)
                        div = count_taps(hs0, FKH, 1, -p.PT, IH + p.PB) * count_taps(ws0, FKW, 1, -p.PL, IW + p.PR);
                    else
                        div = count_taps(hs0, FKH, 1, 0, IH) * count_taps(ws0, FKW, 1, 0, IW);
                    const float fd = (float)div;
#pragma unroll
                    for (int q = 0; q < CW; ++q) acc[s][q] = __fdividef(acc[s][q], fd);
                }
                win_st_cw<CW>(y + (((long long)n * OH + oh) * OW + ow) * C + c0 + cv * CW, acc[s]);
            }
        }
        owl += pstep;
        while (owl >= twe) {
            owl -= twe;
            ++j;
        }
    }
}

template <int OP, bool IDX, int FKH, int FKW, int FSH, int FSW, int SR = 0>
__device__ __forceinline__ void win_nhwc(const act_t* __restrict__ x, act_t* __restrict__ y,
                                         long long* __restrict__ ind, const act_t* __restrict__ w,
                                         const float* __restrict__ bias, const WinParams& p) {
    extern __shared__ __align__(16) unsigned char hal_smem[];
    const int KH = FKH ? FKH : p.KH, KW = FKW ? FKW : p.KW;
    const int SH = FSH ? FSH : p.SH, SW = FSW ? FSW : p.SW;
    const int DH = FKH ? 1 : p.DH, DW = FKW ? 1 : p.DW;
    const int IH = p.IH, IW = p.IW, OH = p.OH, OW = p.OW, C = p.C;
    const int NT = blockDim.x, tid = threadIdx.x;

    int t = blockIdx.x;
    const int cc = t % p.chunks;
    t /= p.chunks;
    const int twi = t % p.tiles_w;
    t /= p.tiles_w;
    const int thi = t % p.tiles_h;
    const int n = t / p.tiles_h;
    const int oh0 = thi * p.th, oh1 = min(OH, oh0 + p.th);
    const int ow0 = twi * p.tw, ow1 = min(OW, ow0 + p.tw);
    const int c0 = cc * p.tc, tce = min(p.tc, C - c0);
    const int ih_lo = win_lo<false>(oh0, SH, p.PT, IH, OH);
    const int ih_hi = win_hi<false>(oh1 - 1, SH, p.PT, KH, DH, IH, OH);
    const int iw_lo = win_lo<false>(ow0, SW, p.PL, IW, OW);
    const int iw_hi = win_hi<false>(ow1 - 1, SW, p.PL, KW, DW, IW, OW);
    const int nr = ih_hi - ih_lo, nc = iw_hi - iw_lo;
    const bool whole = (tce == C);  // one segment per input row, else one per input pixel
    const int spr = whole ? 1 : nc;
    const int L = whole ? nc * C : tce;  // elements per segment (a multiple of HAL_VEC)
    const int nseg = nr * spr, nvps = L / HAL_VEC;

    float* s_w = reinterpret_cast<float*>(hal_smem);
    act_t* s_in = reinterpret_cast<act_t*>(hal_smem + (size_t)p.w_floats * 4);

    // ---- load: 2-D thread mapping (segment, vector) without per-vector division
    {
        int s0, sstep, j0, jstep;
        if (nvps >= NT) {
            s0 = 0;
            sstep = 1;
            j0 = tid;
            jstep = NT;
        } else {
            sstep = NT / nvps;
            s0 = tid / nvps;
            j0 = tid - s0 * nvps;
            jstep = nvps;
            if (s0 >= sstep) s0 = nseg;  // idle thread
        }
        int r = s0 / spr, q = s0 - (s0 / spr) * spr;
        for (int s = s0; s < nseg; s += sstep) {
            const act_t* g = x + (((long long)n * IH + ih_lo + r) * IW + iw_lo + q) * C + c0;
            act_t* d = s_in + (size_t)s * L;
            for (int j = j0; j < nvps; j += jstep) cp_async16(d + j * HAL_VEC, g + j * HAL_VEC);
            q += sstep;
            while (q >= spr) {
                q -= spr;
                ++r;
            }
        }
        cp_async_commit();
    }
    const int KK = KH * KW;
    if (OP == WIN_DW) {  // weights as [tap][channel] floats
        for (int i = tid; i < KK * tce; i += NT) {
            const int tap = i / tce, c = i - tap * tce;
            s_w[i] = to_f(w[(long long)(c0 + c) * KK + tap]);
        }
    }
    cp_async_wait<0>();
    __syncthreads();

    if constexpr (SR > 0 && !IDX) {
        win_nhwc_strips<OP, FKH, FKW, FSH, FSW, SR>(s_in, s_w, y, bias, p, n, oh0, oh1, ow0, ow1, c0, tce, ih_lo,
                                                    iw_lo, nc, L, whole);
        return;
    }
    // ---- compute: thread = (output pixel, channel vector)
    const int ncv = tce / HAL_VEC;
    const int twe = ow1 - ow0;
    const int npix = (oh1 - oh0) * twe;
    int p0, pstep, cv0, cvstep;
    if (ncv >= NT) {
        p0 = 0;
        pstep = 1;
        cv0 = tid;
        cvstep = NT;
    } else {
        pstep = NT / ncv;
        p0 = tid / ncv;
        cv0 = tid - p0 * ncv;
        cvstep = ncv;
        if (p0 >= pstep) p0 = npix;
    }
    int ohl = p0 / twe, owl = p0 - (p0 / twe) * twe;
    for (int pix = p0; pix < npix; pix += pstep) {
        const int oh = oh0 + ohl, ow = ow0 + owl;
        const int hs0 = oh * SH - p.PT, ws0 = ow * SW - p.PL;
        const long long obase = (((long long)n * OH + oh) * OW + ow) * C + c0;
        for (int cv = cv0; cv < ncv; cv += cvstep) {
            float acc[HAL_VEC];
            long long bi[HAL_VEC];
            if (OP == WIN_MAX) {
                const long long first = (long long)first_tap(hs0, DH) * IW + first_tap(ws0, DW);
#pragma unroll
                for (int j = 0; j < HAL_VEC; ++j) {
                    acc[j] = HAL_NEG_INF;
                    bi[j] = first;
                }
            } else if (OP == WIN_AVG) {
#pragma unroll
                for (int j = 0; j < HAL_VEC; ++j) acc[j] = 0.0f;
            } else {
#pragma unroll
                for (int j = 0; j < HAL_VEC; ++j) acc[j] = bias ? bias[c0 + cv * HAL_VEC + j] : 0.0f;
            }
#pragma unroll
            for (int kh = 0; kh < KH; ++kh) {
                const int ih = hs0 + kh * DH;
                if ((unsigned)ih >= (unsigned)IH) continue;
                const int r = ih - ih_lo;
#pragma unroll
                for (int kw = 0; kw < KW; ++kw) {
                    const int iw = ws0 + kw * DW;
                    if ((unsigned)iw >= (unsigned)IW) continue;
                    const int col = iw - iw_lo;
                    const int e = whole ? (r * L + col * C + cv * HAL_VEC) : ((r * nc + col) * L + cv * HAL_VEC);
                    float v[HAL_VEC];
                    unpack_vec(*reinterpret_cast<const uint4*>(s_in + e), v);
                    if (OP == WIN_MAX) {
                        const long long idx = (long long)ih * IW + iw;
#pragma unroll
                        for (int j = 0; j < HAL_VEC; ++j) {
                            if (IDX)
                                max_take(v[j], idx, acc[j], bi[j]);
                            else
                                acc[j] = max_nan(acc[j], v[j]);
                        }
                    } else if (OP == WIN_AVG) {
#pragma unroll
                        for (int j = 0; j < HAL_VEC; ++j) acc[j] += v[j];
                    } else {
                        const float* wk = s_w + (kh * KW + kw) * tce + cv * HAL_VEC;
#pragma unroll
                        for (int j = 0; j < HAL_VEC; ++j) acc[j] = fmaf(v[j], wk[j], acc[j]);
                    }
                }
            }
            if (OP == WIN_AVG) {
                int div;
                if (p.divisor > 0)
                    div = p.divisor;
                else if (p.count_include_pad)
                    div = count_taps(hs0, KH, DH, -p.PT, IH + p.PB) * count_taps(ws0, KW, DW, -p.PL, IW + p.PR);
                else
                    div = count_taps(hs0, KH, DH, 0, IH) * count_taps(ws0, KW, DW, 0, IW);
                const float fd = (float)div;
#pragma unroll
                for (int j = 0; j < HAL_VEC; ++j) acc[j] = __fdividef(acc[j], fd);
            }
            st_vec(y + obase + cv * HAL_VEC, acc);
            if (IDX) {
#pragma unroll
                for (int j = 0; j < HAL_VEC; ++j) ind[obase + cv * HAL_VEC + j] = bi[j];
            }
        }
        owl += pstep;
        while (owl >= twe) {
            owl -= twe;
            ++ohl;
        }
    }
}
