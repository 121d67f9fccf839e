// hal CUDA prelude: storage type, conversions, 16-byte vectors, fast division,
// asynchronous copies and cache hints shared by every kernels_cu/*.cu file.
//
// Macros (all optional, defaults in brackets):
//   DTYPE_HALF [0]   1: activations are float16 (storage only: compute in float)
//   DTYPE_BF16 [0]   1: activations are bfloat16 (storage only, as float16; not with DTYPE_HALF).
//                    HAL_ACT16 is 1 for either: the 16-bit storage paths (two activations a
//                    32-bit word, eight a 16-byte vector) serve both, through act16_f, act2_f
//                    and act2_word below; float16's own arithmetic (half2 max, mma) stays
//                    behind DTYPE_HALF
//   LAYOUT_NHWC [0]  1: activations are channels-last
//   FUSE_RELU [0]    1: every output store (st_act, st_vec, pack_vec) applies ReLU first
//                    (v < 0 ? 0 : v, so NaN stays NaN as in torch.relu)
#pragma once

// test hook: lets a checker see how a failed build is reported
#ifdef HAL_COMPILE_ERROR_TEST
#error "HAL_COMPILE_ERROR_TEST is defined: this build fails on purpose"
#endif

#include <cuda_fp16.h>
#include <stdint.h>

#ifndef DTYPE_HALF
#define DTYPE_HALF 0
#endif
#ifndef DTYPE_BF16
#define DTYPE_BF16 0
#endif
#if DTYPE_HALF && DTYPE_BF16
#error "DTYPE_HALF and DTYPE_BF16 exclude each other"
#endif
#define HAL_ACT16 (DTYPE_HALF || DTYPE_BF16)
#if DTYPE_BF16
#include <cuda_bf16.h>  // (sm_75 too: conversions in software there)
#endif
#ifndef LAYOUT_NHWC
#define LAYOUT_NHWC 0
#endif
#ifndef FUSE_RELU
#define FUSE_RELU 0
#endif

#if DTYPE_HALF
typedef __half act_t;
#elif DTYPE_BF16
typedef __nv_bfloat16 act_t;
#else
typedef float act_t;
#endif

// elements of act_t in one 16-byte vector
#define HAL_VEC ((int)(16 / sizeof(act_t)))

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define HAL_HAS_CP_ASYNC 1
#else
#define HAL_HAS_CP_ASYNC 0
#endif

#define HAL_NEG_INF (-__int_as_float(0x7f800000))

// Programmatic dependent launch (sm_90+; the launcher adds the launch attribute, see
// docs/backend-cuda.md): the first statement of every kernel. It waits until the kernel
// ahead of it in the stream has finished and its writes are visible (so nothing may touch
// global memory before it), then lets the next kernel launch, whose blocks then take SMs
// during this kernel's tail instead of after it. Without the attribute both are no-ops.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define HAL_PDL_ENTRY() asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#else
#define HAL_PDL_ENTRY() ((void)0)
#endif

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
#if DTYPE_BF16
// bfloat16 -> float is exact; float -> bfloat16 rounds to nearest even (NaN stays NaN,
// overflow goes to infinity), as float16's __float2half_rn
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
#endif

// 16-bit activations by their bits: one from its 16 bits, the two of a 32-bit word (the low
// half is the lower address), and two floats rounded to nearest even into one word (float16's in
// float32 builds, whose templates of the 16-bit paths name them but never run)
__device__ __forceinline__ float act16_f(unsigned short h) {
#if !DTYPE_BF16
    return __half2float(__ushort_as_half(h));
#else
    return __bfloat162float(__ushort_as_bfloat16(h));
#endif
}
__device__ __forceinline__ float2 act2_f(uint32_t w) {
#if !DTYPE_BF16
    return __half22float2(*reinterpret_cast<const __half2*>(&w));
#else
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w));
#endif
}
__device__ __forceinline__ uint32_t act2_word(float a, float b) {
#if !DTYPE_BF16
    const __half2 h = __floats2half2_rn(a, b);
#else
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
#endif
    return *reinterpret_cast<const uint32_t*>(&h);
}

// the output epilogue: every store of an activation goes through it
__device__ __forceinline__ float out_act(float v) {
#if FUSE_RELU
    return v < 0.0f ? 0.0f : v;
#else
    return v;
#endif
}

__device__ __forceinline__ float ld_act(const act_t* p) { return to_f(*p); }
__device__ __forceinline__ void st_act(act_t* p, float v) { *p = from_f<act_t>(out_act(v)); }

// ---------------------------------------------------------------------------------
// 16-byte vectors of HAL_VEC activations, unpacked to float
// ---------------------------------------------------------------------------------
__device__ __forceinline__ void unpack_vec(const uint4& u, float (&f)[HAL_VEC]) {
#if DTYPE_HALF
    const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float2 t = __half22float2(h[i]);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
#elif DTYPE_BF16
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float2 t = __bfloat1622float2(h[i]);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
#else
    f[0] = __uint_as_float(u.x);
    f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z);
    f[3] = __uint_as_float(u.w);
#endif
}

__device__ __forceinline__ uint4 pack_vec(const float (&f)[HAL_VEC]) {
    uint4 u;
#if DTYPE_HALF
    __half2* h = reinterpret_cast<__half2*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2half2_rn(out_act(f[2 * i]), out_act(f[2 * i + 1]));
#elif DTYPE_BF16
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(out_act(f[2 * i]), out_act(f[2 * i + 1]));
#else
    u.x = __float_as_uint(out_act(f[0]));
    u.y = __float_as_uint(out_act(f[1]));
    u.z = __float_as_uint(out_act(f[2]));
    u.w = __float_as_uint(out_act(f[3]));
#endif
    return u;
}

__device__ __forceinline__ void ld_vec(const act_t* p, float (&f)[HAL_VEC]) {
    unpack_vec(__ldg(reinterpret_cast<const uint4*>(p)), f);
}
__device__ __forceinline__ void st_vec(act_t* p, const float (&f)[HAL_VEC]) {
    *reinterpret_cast<uint4*>(p) = pack_vec(f);
}
// streaming variants: data touched once (evict first)
__device__ __forceinline__ void ld_vec_cs(const act_t* p, float (&f)[HAL_VEC]) {
    unpack_vec(__ldcs(reinterpret_cast<const uint4*>(p)), f);
}
__device__ __forceinline__ void st_vec_cs(act_t* p, const float (&f)[HAL_VEC]) {
    __stcs(reinterpret_cast<uint4*>(p), pack_vec(f));
}

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// ---------------------------------------------------------------------------------
// division by a run-time invariant (magic numbers computed on the host, valid for n < 2^31):
//   q = (umulhi(n, m) + n) >> s  with  s = ceil(log2 d),  m = 2^32 * (2^s - d) / d + 1
// ---------------------------------------------------------------------------------
struct FastDiv {
    uint32_t d, m, s;
};
__device__ __forceinline__ uint32_t fdiv(uint32_t n, const FastDiv& f) { return (__umulhi(n, f.m) + n) >> f.s; }

// ---------------------------------------------------------------------------------
// global -> shared copies: cp.async on sm_80+, a plain load/store before
// ---------------------------------------------------------------------------------
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
#if HAL_HAS_CP_ASYNC
    unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
#else
    *reinterpret_cast<uint4*>(smem) = __ldg(reinterpret_cast<const uint4*>(gmem));
#endif
}
// 16 bytes, zero-filled when !valid (gmem must still be a valid address)
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool valid) {
#if HAL_HAS_CP_ASYNC
    unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
#else
    *reinterpret_cast<uint4*>(smem) = valid ? __ldg(reinterpret_cast<const uint4*>(gmem)) : make_uint4(0, 0, 0, 0);
#endif
}
// 4 bytes, zero-filled when !valid
__device__ __forceinline__ void cp_async4_zfill(void* smem, const void* gmem, bool valid) {
#if HAL_HAS_CP_ASYNC
    unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    int n = valid ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
#else
    *reinterpret_cast<float*>(smem) = valid ? __ldg(reinterpret_cast<const float*>(gmem)) : 0.0f;
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if HAL_HAS_CP_ASYNC
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// the "memory" clobber keeps the shared-memory reads after the wait after it (the compiler
// does not know the copies write shared memory); a barrier after it does not make this redundant
// where a lane reads back its own copies before any barrier
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if HAL_HAS_CP_ASYNC
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// ---------------------------------------------------------------------------------
// L2 cache policies (sm_80+): keep data for a second pass, or let it go first
// ---------------------------------------------------------------------------------
__device__ __forceinline__ uint64_t l2_policy_evict_last() {
    uint64_t p = 0;
#if HAL_HAS_CP_ASYNC
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(p));
#endif
    return p;
}
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
    uint64_t p = 0;
#if HAL_HAS_CP_ASYNC
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
#endif
    return p;
}
__device__ __forceinline__ uint4 ld16_hint(const void* g, uint64_t policy) {
#if HAL_HAS_CP_ASYNC
    uint4 u;
    asm volatile("ld.global.nc.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;\n"
                 : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
                 : "l"(g), "l"(policy));
    return u;
#else
    (void)policy;
    return __ldg(reinterpret_cast<const uint4*>(g));
#endif
}

// ---------------------------------------------------------------------------------
// Welford/Chan running statistics (count, mean, M2)
// ---------------------------------------------------------------------------------
struct Stat {
    float n, mean, m2;
};
__device__ __forceinline__ Stat stat_merge(const Stat& a, const Stat& b) {
    float n = a.n + b.n;
    if (n == 0.0f) return a;
    float d = b.mean - a.mean;
    float fb = b.n / n;
    Stat r;
    r.n = n;
    r.mean = a.mean + d * fb;
    r.m2 = a.m2 + b.m2 + d * d * a.n * fb;
    return r;
}
__device__ __forceinline__ Stat stat_shfl_down(const Stat& s, int off) {
    Stat r;
    r.n = __shfl_down_sync(0xffffffffu, s.n, off);
    r.mean = __shfl_down_sync(0xffffffffu, s.mean, off);
    r.m2 = __shfl_down_sync(0xffffffffu, s.m2, off);
    return r;
}
__device__ __forceinline__ Stat stat_shfl_xor(const Stat& s, int off) {
    Stat r;
    r.n = __shfl_xor_sync(0xffffffffu, s.n, off);
    r.mean = __shfl_xor_sync(0xffffffffu, s.mean, off);
    r.m2 = __shfl_xor_sync(0xffffffffu, s.m2, off);
    return r;
}

// NaN-propagating maximum: the value the sequential rule `v > best || isnan(v)` ends with
__device__ __forceinline__ float max_nan(float best, float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    float r;
    asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(r) : "f"(best), "f"(v));
    return r;
#else
    return (v > best || isnan(v)) ? v : best;
#endif
}

// max-pooling combine: NaN wins (latest NaN index), else larger value, ties -> earlier index
__device__ __forceinline__ void max_take(float v, long long i, float& best, long long& bi) {
    if (v > best || isnan(v)) {
        best = v;
        bi = i;
    }
}
