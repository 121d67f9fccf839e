// Host emulation runtime for CUDA kernels (tools/cuda_emu.py): CUDA keywords, thread
// indices, barriers, float16, bfloat16, and the warp collectives the tensor-core kernels use
// (ldmatrix.x4 and ldmatrix.x4.trans, mma.sync m16n8k16 f16 and bf16 -> f32 and m16n8k32 s8/u8 -> s32, shfl.xor).
// A block's threads run as fibers (ucontext) on one OS thread, each until it waits at a barrier
// or exits; blocks run one after another (runtime.cpp).
#pragma once
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__
#define __align__(n)

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
struct uint2 {
    unsigned x, y;
};
struct uint4 {
    unsigned x, y, z, w;
};
struct int4 {
    int x, y, z, w;
};
struct float2 {
    float x, y;
};
struct float4 {
    float x, y, z, w;
};
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
inline int4 make_int4(int a, int b, int c, int d) { return {a, b, c, d}; }
inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline float2 make_float2(float a, float b) { return {a, b}; }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }

// the running fiber's (the scheduler sets them when it switches)
extern dim3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
// the block's dynamic shared memory (one block at a time)
extern unsigned char smem_raw[];
constexpr unsigned EMU_SMEM = 256 * 1024;

inline unsigned __cvta_generic_to_shared(const void* p) {
    return (unsigned)(reinterpret_cast<const unsigned char*>(p) - smem_raw);
}
template <class T>
inline T __ldg(const T* p) {
    return *p;
}
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicExch(unsigned* p, unsigned v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
inline void __threadfence() {}
template <class T>
inline T __ldcg(const T* p) {
    return *p;
}
// the running fiber gives way (a spin-wait's sleep: in a cooperative grid the other blocks' fibers
// run meanwhile, runtime.cpp's emu_launch_coop)
void emu_yield();
inline void __nanosleep(unsigned) { emu_yield(); }

// ---- float16 (storage as in cuda_fp16.h, conversions round to nearest even)
struct __half {
    uint16_t x;
};
struct __half2 {
    __half x, y;
};
inline __half __float2half_rn(float f) {
    _Float16 h = (_Float16)f;
    __half r;
    std::memcpy(&r.x, &h, 2);
    return r;
}
inline __half __float2half(float f) { return __float2half_rn(f); }
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline float __half2float(__half h) {
    _Float16 v;
    std::memcpy(&v, &h.x, 2);
    return (float)v;
}
inline __half2 __floats2half2_rn(float a, float b) { return {__float2half_rn(a), __float2half_rn(b)}; }
inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }

// ---- bfloat16 (storage as in cuda_bf16.h): bfloat16 -> float is exact (the bits shifted up);
// float -> bfloat16 rounds to nearest, ties to even, as __float2bfloat16_rn and cvt.rn.bf16.f32 do:
// a carry out of the mantissa moves into the exponent, so values past the largest bfloat16 by half
// an ulp or more become infinity; NaN stays NaN (CUDA's canonical 0x7FFF, as its software path)
struct __nv_bfloat16 {
    uint16_t x;
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{(uint16_t)0x7fffu};
    u += 0x7fffu + ((u >> 16) & 1u);
    return __nv_bfloat16{(uint16_t)(u >> 16)};
}
inline float __bfloat162float(__nv_bfloat16 h) {
    const uint32_t u = (uint32_t)h.x << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short h) { return __nv_bfloat16{h}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)}; }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return {__bfloat162float(h.x), __bfloat162float(h.y)}; }

// ---- integer intrinsics of the float16 pair paths (hal_window.cuh)
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
    return (unsigned)((((unsigned long long)hi << 32) | lo) >> (shift & 31u));
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
    return r;
}

// ---- barriers and warp collectives
// A barrier of `expected` fibers: the last to arrive completes the phase and runs on; the others
// wait until the scheduler sees the phase move on. A fiber that exits drops out of every later
// phase (arrive_and_drop, as in C++20's barrier).
struct EmuBarrier {
    int expected = 0, arrived = 0;
    unsigned phase = 0;
    void arrive_and_wait();
    void arrive_and_drop();
};
struct EmuWarp {
    EmuBarrier bar;
    unsigned addr[32];
    unsigned a[32][4], b[32][2];
    float cf[32][4];
    int ci[32][4];
    uint32_t su[32];  // the shuffles' words
};
struct EmuBlock {
    EmuBarrier* bar;
    std::vector<EmuWarp>* warps;
};
extern EmuBlock emu_block;
extern int emu_lane, emu_warp;

inline void __syncthreads() { emu_block.bar->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { (*emu_block.warps)[emu_warp].bar.arrive_and_wait(); }

// ldmatrix.sync.aligned.m8n8.x4.shared.b16: lanes 8m..8m+7 give matrix m's row addresses;
// lane t gets 4 bytes of row t/4 of each matrix, at byte (t % 4) * 4
inline void emu_ldsm_x4(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3) {
    EmuWarp& w = (*emu_block.warps)[emu_warp];
    w.addr[emu_lane] = addr;
    w.bar.arrive_and_wait();
    unsigned r[4];
    for (int m = 0; m < 4; ++m) std::memcpy(&r[m], smem_raw + w.addr[m * 8 + emu_lane / 4] + (emu_lane % 4) * 4, 4);
    w.bar.arrive_and_wait();
    r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: the same row addresses, each 8x8 matrix transposed
// as it is distributed: lane t gets element (row 2 (t % 4), column t / 4) of each matrix in its low
// half and (row 2 (t % 4) + 1, column t / 4) in its high half
inline void emu_ldsm_x4_trans(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3) {
    EmuWarp& w = (*emu_block.warps)[emu_warp];
    w.addr[emu_lane] = addr;
    w.bar.arrive_and_wait();
    unsigned r[4];
    for (int m = 0; m < 4; ++m) {
        uint16_t lo, hi;
        std::memcpy(&lo, smem_raw + w.addr[m * 8 + (emu_lane % 4) * 2] + (emu_lane / 4) * 2, 2);
        std::memcpy(&hi, smem_raw + w.addr[m * 8 + (emu_lane % 4) * 2 + 1] + (emu_lane / 4) * 2, 2);
        r[m] = (unsigned)lo | ((unsigned)hi << 16);
    }
    w.bar.arrive_and_wait();
    r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}

inline float emu_h(unsigned word, int half) { return __half2float(__half{(uint16_t)(word >> (16 * half))}); }
// a bfloat16 of a 32-bit word: its 16 bits as the top of a float (exact)
inline float emu_bf(unsigned word, int half) {
    return __bfloat162float(__ushort_as_bfloat16((unsigned short)(word >> (16 * half))));
}
// the operand type an mma string names ("bf16" or "f16"), at compile time
constexpr bool emu_mma_is_bf16(const char* t) { return t[0] == 'b' && t[1] == 'f' && t[2] == '1' && t[3] == '6'; }

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 (PTX ISA fragment layouts, the same
// for both types; products summed in float in k order; BF16: the operands are bfloat16)
template <bool BF16>
inline void emu_mma_16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    EmuWarp& w = (*emu_block.warps)[emu_warp];
    auto op = [](unsigned word, int h) { return BF16 ? emu_bf(word, h) : emu_h(word, h); };
    for (int i = 0; i < 4; ++i) w.a[emu_lane][i] = a[i], w.cf[emu_lane][i] = c[i];
    w.b[emu_lane][0] = b0, w.b[emu_lane][1] = b1;
    w.bar.arrive_and_wait();
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; ++l) {
        const int g = l / 4, t = l % 4;
        for (int h = 0; h < 2; ++h) {
            A[g][2 * t + h] = op(w.a[l][0], h);
            A[g + 8][2 * t + h] = op(w.a[l][1], h);
            A[g][2 * t + 8 + h] = op(w.a[l][2], h);
            A[g + 8][2 * t + 8 + h] = op(w.a[l][3], h);
            B[2 * t + h][g] = op(w.b[l][0], h);
            B[2 * t + 8 + h][g] = op(w.b[l][1], h);
        }
    }
    const int g = emu_lane / 4, t = emu_lane % 4;
    float d[4];
    for (int e = 0; e < 4; ++e) {
        const int row = g + (e >= 2 ? 8 : 0), col = 2 * t + (e & 1);
        float s = w.cf[emu_lane][e];
        for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
        d[e] = s;
    }
    w.bar.arrive_and_wait();
    for (int e = 0; e < 4; ++e) c[e] = d[e];
}

inline void emu_mma_f16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    emu_mma_16816<false>(c, a, b0, b1);
}

// mma.sync.aligned.m16n8k32.row.col.s32.{s8,u8}.{s8,u8}.s32
template <bool A_SIGNED, bool B_SIGNED>
inline void emu_mma_i8(int (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    EmuWarp& w = (*emu_block.warps)[emu_warp];
    for (int i = 0; i < 4; ++i) w.a[emu_lane][i] = a[i], w.ci[emu_lane][i] = c[i];
    w.b[emu_lane][0] = b0, w.b[emu_lane][1] = b1;
    w.bar.arrive_and_wait();
    auto byte = [](unsigned word, int j, bool sgn) {
        const unsigned v = (word >> (8 * j)) & 0xffu;
        return sgn ? (int)(signed char)v : (int)v;
    };
    int A[16][32], B[32][8];
    for (int l = 0; l < 32; ++l) {
        const int g = l / 4, t = l % 4;
        for (int j = 0; j < 4; ++j) {
            A[g][4 * t + j] = byte(w.a[l][0], j, A_SIGNED);
            A[g + 8][4 * t + j] = byte(w.a[l][1], j, A_SIGNED);
            A[g][16 + 4 * t + j] = byte(w.a[l][2], j, A_SIGNED);
            A[g + 8][16 + 4 * t + j] = byte(w.a[l][3], j, A_SIGNED);
            B[4 * t + j][g] = byte(w.b[l][0], j, B_SIGNED);
            B[16 + 4 * t + j][g] = byte(w.b[l][1], j, B_SIGNED);
        }
    }
    const int g = emu_lane / 4, t = emu_lane % 4;
    int d[4];
    for (int e = 0; e < 4; ++e) {
        const int row = g + (e >= 2 ? 8 : 0), col = 2 * t + (e & 1);
        int s = w.ci[emu_lane][e];
        for (int k = 0; k < 32; ++k) s += A[row][k] * B[k][col];
        d[e] = s;
    }
    w.bar.arrive_and_wait();
    for (int e = 0; e < 4; ++e) c[e] = d[e];
}

// Warp shuffles: every lane of the warp takes part (the kernels here call them so). Each lane
// publishes its 32-bit word, then reads lane `src`'s; a source outside the warp gives the lane
// its own value, as on the GPU.
inline uint32_t emu_shfl(uint32_t v, int src) {
    EmuWarp& w = (*emu_block.warps)[emu_warp];
    w.su[emu_lane] = v;
    w.bar.arrive_and_wait();
    const uint32_t r = src >= 0 && src < 32 ? w.su[src] : v;
    w.bar.arrive_and_wait();
    return r;
}
inline float emu_shfl(float v, int src) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    u = emu_shfl(u, src);
    std::memcpy(&v, &u, 4);
    return v;
}
inline float __shfl_xor_sync(unsigned, float v, int mask) { return emu_shfl(v, emu_lane ^ mask); }
inline float __shfl_down_sync(unsigned, float v, int delta) { return emu_shfl(v, emu_lane + delta); }
inline unsigned __shfl_up_sync(unsigned, unsigned v, int delta) { return emu_shfl(uint32_t(v), emu_lane - delta); }
inline unsigned __shfl_down_sync(unsigned, unsigned v, int delta) { return emu_shfl(uint32_t(v), emu_lane + delta); }
inline long long __shfl_down_sync(unsigned, long long v, int delta) {  // two 32-bit shuffles, as on the GPU
    const uint32_t lo = emu_shfl(uint32_t((unsigned long long)v), emu_lane + delta);
    const uint32_t hi = emu_shfl(uint32_t((unsigned long long)v >> 32), emu_lane + delta);
    return (long long)(((unsigned long long)hi << 32) | lo);
}

// ---- cp.async groups of the calling thread: deferred 16- or 4-byte copies (src null: zero fill)
struct EmuCopy {
    void* dst;
    const void* src;
    size_t bytes;
};
// the running fiber's (swapped in and out by the scheduler)
extern std::vector<std::vector<EmuCopy>> emu_groups;  // committed, oldest first
extern std::vector<EmuCopy> emu_open;                 // not yet committed
inline void emu_async_copy(void* dst, const void* src, size_t bytes = 16) { emu_open.push_back({dst, src, bytes}); }
inline void emu_async_commit() {
    emu_groups.push_back(std::move(emu_open));
    emu_open.clear();
}
inline void emu_land(const std::vector<EmuCopy>& g) {
    for (const EmuCopy& c : g) {
        if (c.src)
            std::memcpy(c.dst, c.src, c.bytes);
        else
            std::memset(c.dst, 0, c.bytes);
    }
}
// wait_group n: all committed groups but the n most recent land (copies not yet committed
// belong to no group and stay in flight, as in the PTX ISA)
inline void emu_async_wait(int n) {
    const size_t keep = (size_t)n < emu_groups.size() ? (size_t)n : emu_groups.size();
    for (size_t i = 0; i + keep < emu_groups.size(); ++i) emu_land(emu_groups[i]);
    emu_groups.erase(emu_groups.begin(), emu_groups.end() - (long)keep);
}

// run `kernel` over the grid: blocks one after another, each as blockDim.x fibers
void emu_launch(dim3 grid, dim3 block, const std::function<void()>& kernel);
// a cooperative grid: every block's fibers at once (grid barriers), each block with its own
// shared memory (swapped into smem_raw when the scheduler moves between blocks)
void emu_launch_coop(dim3 grid, dim3 block, const std::function<void()>& kernel);
