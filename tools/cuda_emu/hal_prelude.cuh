// Host emulation of the CUDA prelude (tools/cuda_emu.py): the names kernels_cu/*.cu use from
// hal_prelude.cuh and from CUDA, as plain C++20 running one fiber per CUDA thread (runtime.cpp).
// cp.async copies land at their thread's wait (a missing wait reads stale shared memory);
// warp collectives (ldmatrix, mma, shuffles) are emulated in emu.h.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "emu.h"

#ifndef DTYPE_HALF
#define DTYPE_HALF 0
#endif
#ifndef DTYPE_BF16
#define DTYPE_BF16 0
#endif
#define HAL_ACT16 (DTYPE_HALF || DTYPE_BF16)
#ifndef LAYOUT_NHWC
#define LAYOUT_NHWC 0
#endif
#ifndef FUSE_RELU
#define FUSE_RELU 0
#endif
#if DTYPE_HALF
typedef __half act_t;
#define HAL_VEC 8
#elif DTYPE_BF16
typedef __nv_bfloat16 act_t;
#define HAL_VEC 8
#else
typedef float act_t;
#define HAL_VEC 4
#endif
#define HAL_HAS_CP_ASYNC 1
// programmatic dependent launch: nothing to wait for on the host
#define HAL_PDL_ENTRY() ((void)0)
#define HAL_NEG_INF (-INFINITY)
using std::isnan;
using std::max;
using std::min;

inline float out_act(float v) {
#if FUSE_RELU
    return v < 0.0f ? 0.0f : v;
#else
    return v;
#endif
}
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// conversions, scalar and 16-byte vector loads and stores (the depthwise register and pipe kernels)
inline float to_f(float v) { return v; }
inline float to_f(__half v) { return __half2float(v); }
template <typename T>
inline T from_f(float v);
template <>
inline float from_f<float>(float v) { return v; }
template <>
inline __half from_f<__half>(float v) { return __float2half_rn(v); }
inline float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <>
inline __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
// 16-bit activations by their bits (kernels_cu/hal_prelude.cuh's act16_f, act2_f, act2_word; float16's in
// float32 builds, as there)
#if DTYPE_BF16
typedef __nv_bfloat16 act16_t;
#else
typedef __half act16_t;
#endif
inline float act16_f(unsigned short h) { return to_f(act16_t{h}); }
inline float2 act2_f(uint32_t w) { return {act16_f((unsigned short)(w & 0xffffu)), act16_f((unsigned short)(w >> 16))}; }
inline uint32_t act2_word(float a, float b) {
    return (uint32_t)from_f<act16_t>(a).x | ((uint32_t)from_f<act16_t>(b).x << 16);
}
inline float ld_act(const act_t* p) { return to_f(*p); }
inline void st_act(act_t* p, float v) { *p = from_f<act_t>(out_act(v)); }
inline void unpack_vec(const uint4& u, float (&f)[HAL_VEC]) {
    const act_t* a = reinterpret_cast<const act_t*>(&u);
    for (int i = 0; i < HAL_VEC; ++i) f[i] = to_f(a[i]);
}
inline uint4 pack_vec(const float (&f)[HAL_VEC]) {
    uint4 u;
    act_t* a = reinterpret_cast<act_t*>(&u);
    for (int i = 0; i < HAL_VEC; ++i) a[i] = from_f<act_t>(out_act(f[i]));
    return u;
}
inline void ld_vec(const act_t* p, float (&f)[HAL_VEC]) { unpack_vec(*reinterpret_cast<const uint4*>(p), f); }
inline void st_vec(act_t* p, const float (&f)[HAL_VEC]) { *reinterpret_cast<uint4*>(p) = pack_vec(f); }
// the max-pooling rules of kernels_cu/hal_prelude.cuh (max_nan in its pre-sm_80 form: the same values)
inline float max_nan(float best, float v) { return (v > best || std::isnan(v)) ? v : best; }
inline void max_take(float v, long long i, float& best, long long& bi) {
    if (v > best || std::isnan(v)) {
        best = v;
        bi = i;
    }
}
// __fdividef: a plain division here (the GPU's is within 2 ulp)
inline float __fdividef(float a, float b) { return a / b; }
// division by a run-time invariant, as in kernels_cu/hal_prelude.cuh
struct FastDiv {
    uint32_t d, m, s;
};
inline uint32_t fdiv(uint32_t n, const FastDiv& f) { return (__umulhi(n, f.m) + n) >> f.s; }
// cp.async as late as the PTX allows: a copy lands only when its thread waits for its group
// (cp.async.wait_group N completes all but the N most recent committed groups), so shared
// memory read before the wait shows stale bytes
inline void cp_async16(void* smem, const void* gmem) { emu_async_copy(smem, gmem); }
inline void cp_async16_zfill(void* smem, const void* gmem, bool valid) { emu_async_copy(smem, valid ? gmem : nullptr); }
inline void cp_async4_zfill(void* smem, const void* gmem, bool valid) { emu_async_copy(smem, valid ? gmem : nullptr, 4); }
inline void cp_async_commit() { emu_async_commit(); }
template <int N>
inline void cp_async_wait() {
    emu_async_wait(N);
}
// L2 cache hints (batch_norm.cu's flat inference): no cache here, plain loads and stores
inline uint64_t l2_policy_evict_first() { return 0; }
inline uint64_t l2_policy_evict_last() { return 0; }
inline uint4 ld16_hint(const void* g, uint64_t) { return *reinterpret_cast<const uint4*>(g); }
template <typename T>
inline void __stcs(T* p, T v) {
    *p = v;
}
inline __half __ushort_as_half(unsigned short h) { return __half{h}; }
inline float __uint_as_float(unsigned u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}
inline unsigned __float_as_uint(float f) {
    unsigned u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}
