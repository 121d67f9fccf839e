/* hal_prelude.h: shared macros of the C kernels (hal's CPU backend).
 *
 * Compile-time selection (all passed as -D by backends/cpu.py):
 *   HAL_ISA_AVX512   AVX-512F/BW/VL intrinsics, 16 floats per vector
 *   HAL_ISA_AVX2     AVX2 + FMA + F16C intrinsics, 8 floats per vector
 *   (neither)        portable C, one float per "vector"
 *   DTYPE_HALF=0|1   storage type float32 or IEEE float16 (storage only: every
 *                    load converts to float, every store rounds once)
 *   DTYPE_BF16=0|1   storage type bfloat16 (with DTYPE_HALF=0; storage only as
 *                    float16: loads widen the 16 bits to a float, stores round to
 *                    nearest even, as ml_dtypes' float32 -> bfloat16 cast does)
 *   LAYOUT_NHWC=0|1  activation layout
 *   FUSE_RELU=0|1    every output store applies ReLU first (v < 0 ? 0 : v; NaN
 *                    stays NaN); st/vf_store/vf_store_part are output stores only
 *
 * Kernels are written once against the small vector layer below (vf_*: float
 * vectors, vm_*: lane masks, vi_*: int32 lanes for pooling indices), so the three
 * ISA paths share every line of arithmetic and differ only in the width VW.
 * Every geometry argument is a C `long` (hal_int).
 */
#ifndef HAL_PRELUDE_H
#define HAL_PRELUDE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(HAL_ISA_AVX512) || defined(HAL_ISA_AVX2)
#include <immintrin.h>
#endif

#ifndef DTYPE_HALF
#define DTYPE_HALF 0
#endif
#ifndef DTYPE_BF16
#define DTYPE_BF16 0
#endif
#if DTYPE_HALF && DTYPE_BF16
#error "DTYPE_HALF and DTYPE_BF16 are exclusive"
#endif
/* 16-bit storage (float16 or bfloat16): hal_t is the raw word, ld/st and vf_load/vf_store convert */
#define HAL_STORE16 (DTYPE_HALF || DTYPE_BF16)
#ifndef LAYOUT_NHWC
#define LAYOUT_NHWC 0
#endif
#ifndef FUSE_RELU
#define FUSE_RELU 0
#endif

#define HAL_EXPORT __attribute__((visibility("default")))
#define HAL_INLINE static inline __attribute__((always_inline))
#define HAL_CAT_(a, b) a##b
#define HAL_CAT(a, b) HAL_CAT_(a, b)
#define HAL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define HAL_MAX(a, b) ((a) > (b) ? (a) : (b))
#define HAL_CDIV(a, b) (((a) + (b) - 1) / (b))

typedef long hal_int;

#if HAL_STORE16
typedef uint16_t hal_t;
#else
typedef float hal_t;
#endif

/* ------------------------------------------------------------------------ */
/* threads: OpenMP default unless hal_set_num_threads(n > 0) (HAL_NUM_THREADS) */
/* ------------------------------------------------------------------------ */
static int hal_threads_ = 0;

HAL_EXPORT void hal_set_num_threads(int n) { hal_threads_ = n; }

static inline int hal_nthreads(void) {
#ifdef _OPENMP
    return hal_threads_ > 0 ? hal_threads_ : omp_get_max_threads();
#else
    return 1;
#endif
}

/* Forking threads costs a few microseconds: small calls run on one thread. */
#define HAL_PAR_MIN_WORK 32768L

static inline int hal_threads_for(hal_int work) { return work < HAL_PAR_MIN_WORK ? 1 : hal_nthreads(); }

/* 64-byte aligned scratch (vector loads of packed data stay within one line). */
static inline void *hal_alloc(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) return NULL;
    return p;
}

/* ------------------------------------------------------------------------ */
/* scalar float16 <-> float32                                               */
/* ------------------------------------------------------------------------ */
#if defined(HAL_ISA_AVX512) || defined(HAL_ISA_AVX2)
HAL_INLINE float hal_h2f(uint16_t h) { return _cvtsh_ss(h); }
HAL_INLINE uint16_t hal_f2h(float f) { return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
#else
static inline float hal_h2f(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
    float out;
    if (e == 0) {
        out = (float)m * 5.9604644775390625e-8f; /* subnormal: m * 2^-24, exact */
        memcpy(&bits, &out, 4);
        bits |= sign;
    } else if (e == 31) {
        bits = sign | 0x7f800000u | (m << 13);
    } else {
        bits = sign | ((e + 112u) << 23) | (m << 13);
    }
    memcpy(&out, &bits, 4);
    return out;
}

static inline uint16_t hal_f2h(float f) { /* round to nearest even, as F16C does */
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf, NaN (kept quiet, payload kept) */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? (0x200u | ((ax >> 13) & 0x3ffu)) : 0u));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to infinity */
    if (ax < 0x38800000u) {                                  /* below 2^-14: subnormal half */
        float a;
        memcpy(&a, &ax, 4);
        return (uint16_t)(sign | (uint32_t)nearbyintf(a * 16777216.0f)); /* exact scaling, RNE */
    }
    uint32_t h = (((ax >> 23) - 112u) << 10) | ((ax & 0x7fffffu) >> 13), rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry into the exponent is right */
    return (uint16_t)(sign | h);
}
#endif

/* ------------------------------------------------------------------------ */
/* scalar bfloat16 <-> float32 (the same on every path)                     */
/* ------------------------------------------------------------------------ */
/* bfloat16 is the top half of a float32: widening is exact. */
HAL_INLINE float hal_bf2f(uint16_t h) {
    const uint32_t bits = (uint32_t)h << 16;
    float out;
    memcpy(&out, &bits, 4);
    return out;
}

/* Round to nearest even: add 0x7fff plus the kept part's lowest bit, drop the low 16
 * bits. Overflow carries into the exponent and gives inf, as it should; inf stays
 * inf; subnormals round like any other value (no flush). A NaN would carry into the
 * sign or lose its mantissa, so it becomes the quiet NaN 0x7fc0 with its sign
 * (ml_dtypes does the same). The vector stores below compute exactly this. */
HAL_INLINE uint16_t hal_f2bf(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(((x >> 16) & 0x8000u) | 0x7fc0u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* the fused activation of every output store */
HAL_INLINE float hal_act(float v) { return (FUSE_RELU && v < 0.0f) ? 0.0f : v; }

#if DTYPE_HALF
HAL_INLINE float ld(const hal_t *p) { return hal_h2f(*p); }
HAL_INLINE void st(hal_t *p, float v) { *p = hal_f2h(hal_act(v)); }
#elif DTYPE_BF16
HAL_INLINE float ld(const hal_t *p) { return hal_bf2f(*p); }
HAL_INLINE void st(hal_t *p, float v) { *p = hal_f2bf(hal_act(v)); }
#else
HAL_INLINE float ld(const hal_t *p) { return *p; }
HAL_INLINE void st(hal_t *p, float v) { *p = hal_act(v); }
#endif

/* ------------------------------------------------------------------------ */
/* vector layer                                                             */
/* ------------------------------------------------------------------------ */
#if defined(HAL_ISA_AVX512)

#define VW 16
typedef __m512 vf;
typedef __mmask16 vm;
typedef __m512i vi;

HAL_INLINE vf vf_loadf(const float *p) { return _mm512_loadu_ps(p); }
HAL_INLINE void vf_storef(float *p, vf v) { _mm512_storeu_ps(p, v); }
HAL_INLINE vf vf_act(vf v) {
#if FUSE_RELU
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), v, _mm512_setzero_ps());
#else
    return v;
#endif
}
#if DTYPE_HALF
HAL_INLINE vf vf_load(const hal_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
HAL_INLINE void vf_store(hal_t *p, vf v) {
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(vf_act(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#elif DTYPE_BF16
/* 16 bfloat16 words -> floats: zero-extend to 32 bits, shift into the top half */
HAL_INLINE vf hal_bf2f_v(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
/* hal_f2bf lane by lane (not AVX512_BF16's VCVTNEPS2BF16: it flushes subnormals) */
HAL_INLINE __m256i hal_f2bf_v(vf v) {
    const __m512i x = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __m512i qnan = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x8000)),
                                         _mm512_set1_epi32(0x7fc0));
    r = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), r, qnan);
    return _mm512_cvtepi32_epi16(r); /* every lane is below 2^16: the truncation is exact */
}
HAL_INLINE vf vf_load(const hal_t *p) { return hal_bf2f_v(_mm256_loadu_si256((const __m256i *)p)); }
HAL_INLINE void vf_store(hal_t *p, vf v) { _mm256_storeu_si256((__m256i *)p, hal_f2bf_v(vf_act(v))); }
#else
HAL_INLINE vf vf_load(const hal_t *p) { return _mm512_loadu_ps(p); }
HAL_INLINE void vf_store(hal_t *p, vf v) { _mm512_storeu_ps(p, vf_act(v)); }
#endif
HAL_INLINE vf vf_set1(float a) { return _mm512_set1_ps(a); }
HAL_INLINE vf vf_zero(void) { return _mm512_setzero_ps(); }
HAL_INLINE vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }
HAL_INLINE vf vf_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
HAL_INLINE vf vf_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
HAL_INLINE vf vf_div(vf a, vf b) { return _mm512_div_ps(a, b); }
HAL_INLINE vf vf_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); } /* a*b + c */
/* a if a > b else b; b when a is NaN (x86 MAXPS: the second operand on unordered or equal) */
HAL_INLINE vf vf_max(vf a, vf b) { return _mm512_max_ps(a, b); }
HAL_INLINE vm vf_gt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
HAL_INLINE vm vf_isnan(vf a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
HAL_INLINE vm vm_or(vm a, vm b) { return (vm)(a | b); }
HAL_INLINE vm vm_none(void) { return (vm)0; }
HAL_INLINE int vm_any(vm a) { return a != 0; }
HAL_INLINE vf vf_blend(vf a, vf b, vm m) { return _mm512_mask_blend_ps(m, a, b); } /* m ? b : a */
HAL_INLINE float vf_hsum(vf a) { return _mm512_reduce_add_ps(a); }
HAL_INLINE vi vi_set1(int a) { return _mm512_set1_epi32(a); }
HAL_INLINE vi vi_zero_i32(void) { return _mm512_setzero_si512(); }
HAL_INLINE vi vi_lanes(int step) {
    return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                              _mm512_set1_epi32(step));
}
HAL_INLINE vi vi_add(vi a, vi b) { return _mm512_add_epi32(a, b); }
HAL_INLINE vi vi_blend(vi a, vi b, vm m) { return _mm512_mask_blend_epi32(m, a, b); }
HAL_INLINE void vi_store_i64(int64_t *p, vi v) {
    _mm512_storeu_si512((void *)p, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(v)));
    _mm512_storeu_si512((void *)(p + 8), _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v, 1)));
}
HAL_INLINE void vi_store_i32(int32_t *p, vi v) { _mm512_storeu_si512((void *)p, v); }
HAL_INLINE vi vi_load_i32(const int32_t *p) { return _mm512_loadu_si512((const void *)p); }
/* even elements of p[0 .. 2*VW): one stride-2 row segment */
HAL_INLINE vf vf_load_even(const hal_t *p) {
    const __m512i idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return _mm512_permutex2var_ps(vf_load(p), idx, vf_load(p + VW));
}
HAL_INLINE vf vf_loadf_even(const float *p) {
    const __m512i idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return _mm512_permutex2var_ps(_mm512_loadu_ps(p), idx, _mm512_loadu_ps(p + VW));
}
HAL_INLINE vi vi_load_even(const int32_t *p) {
    const __m512i idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return _mm512_permutex2var_epi32(_mm512_loadu_si512((const void *)p), idx,
                                     _mm512_loadu_si512((const void *)(p + VW)));
}
HAL_INLINE vm vf_eq(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
HAL_INLINE vm vm_and(vm a, vm b) { return (vm)(a & b); }
HAL_INLINE vm vm_andnot(vm a, vm b) { return (vm)(~a & b); } /* ~a & b */
HAL_INLINE vm vi_lt(vi a, vi b) { return _mm512_cmplt_epi32_mask(a, b); }
HAL_INLINE vm vi_ge(vi a, vi b) { return _mm512_cmpge_epi32_mask(a, b); }
HAL_INLINE vi vi_mullo(vi a, vi b) { return _mm512_mullo_epi32(a, b); }
/* the first count lanes of p, the rest fill */
HAL_INLINE vf vf_load_fill(const hal_t *p, hal_int count, float fill) {
    const __mmask16 m = (__mmask16)((1u << count) - 1u);
#if DTYPE_HALF
    return _mm512_mask_mov_ps(_mm512_set1_ps(fill), m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)));
#elif DTYPE_BF16
    return _mm512_mask_mov_ps(_mm512_set1_ps(fill), m, hal_bf2f_v(_mm256_maskz_loadu_epi16(m, p)));
#else
    return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), m, p);
#endif
}
HAL_INLINE float vf_hmax(vf a) { return _mm512_reduce_max_ps(a); } /* no NaN in a */

#elif defined(HAL_ISA_AVX2)

#define VW 8
typedef __m256 vf;
typedef __m256 vm;
typedef __m256i vi;

HAL_INLINE vf vf_loadf(const float *p) { return _mm256_loadu_ps(p); }
HAL_INLINE void vf_storef(float *p, vf v) { _mm256_storeu_ps(p, v); }
HAL_INLINE vf vf_act(vf v) {
#if FUSE_RELU
    const __m256 z = _mm256_setzero_ps();
    return _mm256_blendv_ps(v, z, _mm256_cmp_ps(v, z, _CMP_LT_OQ));
#else
    return v;
#endif
}
#if DTYPE_HALF
HAL_INLINE vf vf_load(const hal_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
HAL_INLINE void vf_store(hal_t *p, vf v) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(vf_act(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#elif DTYPE_BF16
/* 8 bfloat16 words -> floats: zero-extend to 32 bits, shift into the top half */
HAL_INLINE vf hal_bf2f_v(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
/* hal_f2bf lane by lane */
HAL_INLINE __m128i hal_f2bf_v(vf v) {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i qnan = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x8000)),
                                         _mm256_set1_epi32(0x7fc0));
    r = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(qnan),
                                             _mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
    /* every lane is in [0, 2^16): the unsigned saturating pack is exact */
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}
HAL_INLINE vf vf_load(const hal_t *p) { return hal_bf2f_v(_mm_loadu_si128((const __m128i *)p)); }
HAL_INLINE void vf_store(hal_t *p, vf v) { _mm_storeu_si128((__m128i *)p, hal_f2bf_v(vf_act(v))); }
#else
HAL_INLINE vf vf_load(const hal_t *p) { return _mm256_loadu_ps(p); }
HAL_INLINE void vf_store(hal_t *p, vf v) { _mm256_storeu_ps(p, vf_act(v)); }
#endif
HAL_INLINE vf vf_set1(float a) { return _mm256_set1_ps(a); }
HAL_INLINE vf vf_zero(void) { return _mm256_setzero_ps(); }
HAL_INLINE vf vf_add(vf a, vf b) { return _mm256_add_ps(a, b); }
HAL_INLINE vf vf_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
HAL_INLINE vf vf_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
HAL_INLINE vf vf_div(vf a, vf b) { return _mm256_div_ps(a, b); }
HAL_INLINE vf vf_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
HAL_INLINE vf vf_max(vf a, vf b) { return _mm256_max_ps(a, b); }
HAL_INLINE vm vf_gt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
HAL_INLINE vm vf_isnan(vf a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
HAL_INLINE vm vm_or(vm a, vm b) { return _mm256_or_ps(a, b); }
HAL_INLINE vm vm_none(void) { return _mm256_setzero_ps(); }
HAL_INLINE int vm_any(vm a) { return _mm256_movemask_ps(a) != 0; }
HAL_INLINE vf vf_blend(vf a, vf b, vm m) { return _mm256_blendv_ps(a, b, m); }
HAL_INLINE float vf_hsum(vf a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
HAL_INLINE vi vi_set1(int a) { return _mm256_set1_epi32(a); }
HAL_INLINE vi vi_zero_i32(void) { return _mm256_setzero_si256(); }
HAL_INLINE vi vi_lanes(int step) {
    return _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(step));
}
HAL_INLINE vi vi_add(vi a, vi b) { return _mm256_add_epi32(a, b); }
HAL_INLINE vi vi_blend(vi a, vi b, vm m) {
    return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b), m));
}
HAL_INLINE void vi_store_i64(int64_t *p, vi v) {
    _mm256_storeu_si256((__m256i *)p, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(v)));
    _mm256_storeu_si256((__m256i *)(p + 4), _mm256_cvtepi32_epi64(_mm256_extracti128_si256(v, 1)));
}
HAL_INLINE void vi_store_i32(int32_t *p, vi v) { _mm256_storeu_si256((__m256i *)p, v); }
HAL_INLINE vi vi_load_i32(const int32_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
HAL_INLINE vf vf_load_even(const hal_t *p) {
    vf a = vf_load(p), b = vf_load(p + VW);
    /* [a0 a2 b0 b2 | a4 a6 b4 b6] -> 64-bit blocks (0, 2, 1, 3) -> a0 a2 a4 a6 b0 b2 b4 b6 */
    vf t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}
HAL_INLINE vf vf_loadf_even(const float *p) {
    vf t = _mm256_shuffle_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + VW), _MM_SHUFFLE(2, 0, 2, 0));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}
HAL_INLINE vi vi_load_even(const int32_t *p) {
    return _mm256_castps_si256(vf_loadf_even((const float *)p)); /* a bit-exact shuffle */
}
HAL_INLINE vm vf_eq(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
HAL_INLINE vm vm_and(vm a, vm b) { return _mm256_and_ps(a, b); }
HAL_INLINE vm vm_andnot(vm a, vm b) { return _mm256_andnot_ps(a, b); } /* ~a & b */
HAL_INLINE vm vi_lt(vi a, vi b) { return _mm256_castsi256_ps(_mm256_cmpgt_epi32(b, a)); }
HAL_INLINE vm vi_ge(vi a, vi b) { return _mm256_andnot_ps(vi_lt(a, b), _mm256_castsi256_ps(_mm256_set1_epi32(-1))); }
HAL_INLINE vi vi_mullo(vi a, vi b) { return _mm256_mullo_epi32(a, b); }
HAL_INLINE vf vf_load_fill(const hal_t *p, hal_int count, float fill) {
    float t[VW];
    for (int j = 0; j < VW; j++) t[j] = j < count ? ld(p + j) : fill;
    return _mm256_loadu_ps(t);
}
HAL_INLINE float vf_hmax(vf a) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

#else /* portable C: one lane */

#define VW 1
typedef float vf;
typedef int vm;
typedef int32_t vi;

HAL_INLINE vf vf_loadf(const float *p) { return *p; }
HAL_INLINE void vf_storef(float *p, vf v) { *p = v; }
HAL_INLINE vf vf_load(const hal_t *p) { return ld(p); }
HAL_INLINE void vf_store(hal_t *p, vf v) { st(p, v); }
HAL_INLINE vf vf_set1(float a) { return a; }
HAL_INLINE vf vf_zero(void) { return 0.0f; }
HAL_INLINE vf vf_add(vf a, vf b) { return a + b; }
HAL_INLINE vf vf_sub(vf a, vf b) { return a - b; }
HAL_INLINE vf vf_mul(vf a, vf b) { return a * b; }
HAL_INLINE vf vf_div(vf a, vf b) { return a / b; }
HAL_INLINE vf vf_fma(vf a, vf b, vf c) { return a * b + c; }
HAL_INLINE vf vf_max(vf a, vf b) { return a > b ? a : b; }
HAL_INLINE vm vf_gt(vf a, vf b) { return a > b; }
HAL_INLINE vm vf_isnan(vf a) { return a != a; }
HAL_INLINE vm vm_or(vm a, vm b) { return a | b; }
HAL_INLINE vm vm_none(void) { return 0; }
HAL_INLINE int vm_any(vm a) { return a != 0; }
HAL_INLINE vf vf_blend(vf a, vf b, vm m) { return m ? b : a; }
HAL_INLINE float vf_hsum(vf a) { return a; }
HAL_INLINE vi vi_set1(int a) { return a; }
HAL_INLINE vi vi_zero_i32(void) { return 0; }
HAL_INLINE vi vi_lanes(int step) { (void)step; return 0; }
HAL_INLINE vi vi_add(vi a, vi b) { return a + b; }
HAL_INLINE vi vi_blend(vi a, vi b, vm m) { return m ? b : a; }
HAL_INLINE void vi_store_i64(int64_t *p, vi v) { *p = v; }
HAL_INLINE void vi_store_i32(int32_t *p, vi v) { *p = v; }
HAL_INLINE vi vi_load_i32(const int32_t *p) { return *p; }
HAL_INLINE vf vf_load_even(const hal_t *p) { return ld(p); }
HAL_INLINE vf vf_loadf_even(const float *p) { return *p; }
HAL_INLINE vi vi_load_even(const int32_t *p) { return *p; }
HAL_INLINE vm vf_eq(vf a, vf b) { return a == b; }
HAL_INLINE vm vm_and(vm a, vm b) { return a & b; }
HAL_INLINE vm vm_andnot(vm a, vm b) { return (!a) & b; }
HAL_INLINE vm vi_lt(vi a, vi b) { return a < b; }
HAL_INLINE vm vi_ge(vi a, vi b) { return a >= b; }
HAL_INLINE vi vi_mullo(vi a, vi b) { return a * b; }
HAL_INLINE vf vf_load_fill(const hal_t *p, hal_int count, float fill) { return count > 0 ? ld(p) : fill; }
HAL_INLINE float vf_hmax(vf a) { return a; }

#endif

/* VW elements at p, p + s, p + 2s, ...: contiguous, deinterleaved (s = 2) or gathered. */
HAL_INLINE vf vf_load_strided(const hal_t *p, hal_int s) {
    if (s == 1) return vf_load(p);
    if (s == 2) return vf_load_even(p);
    float t[VW];
    for (int j = 0; j < VW; j++) t[j] = ld(p + j * s);
    return vf_loadf(t);
}

/* The first count (0 .. VW) floats of p, zeros after them; no read past p + count. */
HAL_INLINE vf vf_loadf_part(const float *p, hal_int count) {
    if (count >= VW) return vf_loadf(p);
    if (count <= 0) return vf_zero();
#if defined(HAL_ISA_AVX512)
    return _mm512_maskz_loadu_ps((__mmask16)((1u << count) - 1u), p);
#else
    float t[VW];
    for (int j = 0; j < VW; j++) t[j] = j < count ? p[j] : 0.0f;
    return vf_loadf(t);
#endif
}

/* The same from a float buffer. */
HAL_INLINE vf vf_loadf_strided(const float *p, hal_int s) {
    if (s == 1) return vf_loadf(p);
    if (s == 2) return vf_loadf_even(p);
    float t[VW];
    for (int j = 0; j < VW; j++) t[j] = p[j * s];
    return vf_loadf(t);
}

HAL_INLINE vi vi_load_strided(const int32_t *p, hal_int s) {
    if (s == 1) return vi_load_i32(p);
    if (s == 2) return vi_load_even(p);
    int32_t t[VW];
    for (int j = 0; j < VW; j++) t[j] = p[j * s];
    return vi_load_i32(t);
}

/* The first `count` lanes of v to p[0 .. count) (a tail store). */
HAL_INLINE void vf_store_part(hal_t *p, vf v, hal_int count) {
    float t[VW];
    vf_storef(t, v);
    for (hal_int j = 0; j < count; j++) st(p + j, t[j]);
}

/* ------------------------------------------------------------------------ */
/* non-temporal output stores                                               */
/* ------------------------------------------------------------------------ */
/* An output much larger than the last-level cache is evicted before anyone
 * reads it again; streaming stores then skip the read-for-ownership of every
 * destination line (a third of a streaming kernel's memory traffic). They need
 * a destination aligned to the vector's bytes and an sfence before other
 * threads may read the data. */
#define HAL_VBYTES ((hal_int)(VW * sizeof(hal_t)))

/* set by the backend from the L3 size in sysfs (sysconf's figure is wrong in
 * some VMs); 0 = not set: 8 MiB */
static size_t hal_stream_bytes_ = 0;

HAL_EXPORT void hal_set_stream_threshold(long bytes) { hal_stream_bytes_ = bytes > 0 ? (size_t)bytes : 0; }

static inline size_t hal_stream_threshold(void) { return hal_stream_bytes_ ? hal_stream_bytes_ : (size_t)8 << 20; }

/* stream an output when it is this large (bytes) */
static inline int hal_use_stream(size_t bytes) { return VW > 1 && bytes >= hal_stream_threshold(); }

HAL_INLINE int hal_aligned(const void *p) { return ((uintptr_t)p % (uintptr_t)HAL_VBYTES) == 0; }

#if defined(HAL_ISA_AVX512)
HAL_INLINE void vf_stream(hal_t *p, vf v) { /* p aligned to HAL_VBYTES */
#if DTYPE_HALF
    _mm256_stream_si256((__m256i *)p, _mm512_cvtps_ph(vf_act(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif DTYPE_BF16
    _mm256_stream_si256((__m256i *)p, hal_f2bf_v(vf_act(v)));
#else
    _mm512_stream_ps(p, vf_act(v));
#endif
}
HAL_INLINE void hal_stream_fence(void) { _mm_sfence(); }
#elif defined(HAL_ISA_AVX2)
HAL_INLINE void vf_stream(hal_t *p, vf v) {
#if DTYPE_HALF
    _mm_stream_si128((__m128i *)p, _mm256_cvtps_ph(vf_act(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif DTYPE_BF16
    _mm_stream_si128((__m128i *)p, hal_f2bf_v(vf_act(v)));
#else
    _mm256_stream_ps(p, vf_act(v));
#endif
}
HAL_INLINE void hal_stream_fence(void) { _mm_sfence(); }
#else
HAL_INLINE void vf_stream(hal_t *p, vf v) { vf_store(p, v); }
HAL_INLINE void hal_stream_fence(void) {}
#endif

HAL_INLINE void vi_store_i64_part(int64_t *p, vi v, hal_int count) {
    int32_t t[VW];
    vi_store_i32(t, v);
    for (hal_int j = 0; j < count; j++) p[j] = t[j];
}

#endif /* HAL_PRELUDE_H */
