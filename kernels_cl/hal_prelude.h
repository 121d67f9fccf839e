/* hal OpenCL prelude: dtype, vector-width and helper macros shared by every kernel file.
 *
 * The backend prepends this file to each .cl source (so PyOpenCL's and the driver's
 * caches key on the full text) and passes, as -D macros:
 *   DTYPE_HALF  0 | 1   storage type float or half (half is storage only: every load
 *                       converts to float through vload_half*, every store rounds once
 *                       through vstore_half*, which need no cl_khr_fp16)
 *   DTYPE_BF16  0 | 1   storage type bfloat16 (with DTYPE_HALF=0): ushort words, storage
 *                       only like half; loads and stores convert with integer operations
 *                       (hal_bf2f*, hal_f2bf* below), so any OpenCL 1.2 device runs it
 *   LAYOUT_NHWC 0 | 1   physical layout of activations
 *   WG                  work-group size the kernels are compiled for
 *   VEC 1 | 4 | 8       vector width: along W in NCHW, along C in NHWC
 *   HALF_ARITH 0 | 1    native half arithmetic (max pooling only; needs cl_khr_fp16)
 *   HALF_RAW 0 | 1      aligned float16 vectors as raw ushortN accesses (hal_ldrawN, hal_strawN)
 *   FUSE_RELU 0 | 1     every output store applies ReLU first (v < 0 ? 0 : v; NaN stays NaN)
 * plus each kernel family's own parameters. Shapes always arrive as runtime arguments.
 *
 * Indexing uses int: hal limits tensors to 2^31 - 1 elements.
 */
#ifndef HAL_PRELUDE_H
#define HAL_PRELUDE_H

#ifndef DTYPE_HALF
#define DTYPE_HALF 0
#endif
#ifndef DTYPE_BF16
#define DTYPE_BF16 0
#endif
#if DTYPE_HALF && DTYPE_BF16
#error "DTYPE_HALF and DTYPE_BF16 are exclusive"
#endif
#ifndef LAYOUT_NHWC
#define LAYOUT_NHWC 0
#endif
#ifndef WG
#define WG 64
#endif
#ifndef VEC
#define VEC 4
#endif
#ifndef HALF_ARITH
#define HALF_ARITH 0
#endif
#ifndef FUSE_RELU
#define FUSE_RELU 0
#endif

#define HAL_CAT_(a, b) a##b
#define HAL_CAT(a, b) HAL_CAT_(a, b)

/* ---- float16 vectors as raw 16-bit words (HALF_RAW=1, a family's tuning parameter) ----
 * One ushortN load or store at an N-element-aligned offset, converted through vload_half /
 * vstore_half on a private copy (registers): NVIDIA's OpenCL splits vloada_halfN /
 * vstorea_halfN into N 16-bit accesses (benchmarks/opencl_ptx.py counts them). */
#ifndef HALF_RAW
#define HALF_RAW 0
#endif
#if DTYPE_HALF && HALF_RAW
#define HAL_RAW_IO(N)                                                                      \
    inline HAL_CAT(float, N) HAL_CAT(hal_ldraw, N)(__global const half* p)                \
    {                                                                                      \
        const HAL_CAT(ushort, N) r = *(__global const HAL_CAT(ushort, N)*)p;               \
        return HAL_CAT(vload_half, N)(0, (const __private half*)&r);                       \
    }                                                                                      \
    inline void HAL_CAT(hal_straw, N)(HAL_CAT(float, N) v, __global half* p)              \
    {                                                                                      \
        HAL_CAT(ushort, N) r;                                                              \
        HAL_CAT(vstore_half, N)(v, 0, (__private half*)&r);                                \
        *(__global HAL_CAT(ushort, N)*)p = r;                                              \
    }
HAL_RAW_IO(2)
HAL_RAW_IO(4)
HAL_RAW_IO(8)
#endif

/* ---- bfloat16 conversions (DTYPE_BF16=1): integer operations only -------------------
 * Load: the word is the high half of the float32 (exact). Store: round to nearest even on the
 * float32's bits (add 0x7fff plus the lowest kept bit, keep the high half), which also rounds
 * values past the largest bfloat16 to inf and keeps inf; a NaN becomes the quiet NaN 0x7fc0
 * with its sign. These are the bits of ml_dtypes' float32 -> bfloat16 conversion. */
#if DTYPE_BF16
inline float hal_bf2f(ushort u) { return as_float((uint)u << 16); }
inline ushort hal_f2bf(float f)
{
    const uint b = as_uint(f);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (ushort)(((b >> 16) & 0x8000u) | 0x7fc0u);
    return (ushort)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}
#define HAL_BF16_IO(N)                                                                       \
    inline HAL_CAT(float, N) HAL_CAT(hal_bf2f, N)(HAL_CAT(ushort, N) u)                      \
    {                                                                                        \
        return HAL_CAT(as_float, N)(HAL_CAT(convert_uint, N)(u) << 16);                      \
    }                                                                                        \
    inline HAL_CAT(ushort, N) HAL_CAT(hal_f2bf, N)(HAL_CAT(float, N) f)                      \
    {                                                                                        \
        const HAL_CAT(uint, N) b = HAL_CAT(as_uint, N)(f);                                   \
        const HAL_CAT(uint, N) r = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;                   \
        const HAL_CAT(uint, N) nan = ((b >> 16) & 0x8000u) | 0x7fc0u;                         \
        return HAL_CAT(convert_ushort, N)(select(r, nan, (b & 0x7fffffffu) > 0x7f800000u));  \
    }
HAL_BF16_IO(2)
HAL_BF16_IO(4)
HAL_BF16_IO(8)
#endif

/* ---- scalar storage access: LD returns float, ST rounds once ------------------------- */
#if DTYPE_HALF
typedef half dtype_t;
#define LD(p, i) vload_half((i), (p))
#define ST(v, p, i) vstore_half(ACT1(v), (i), (p))
#elif DTYPE_BF16
typedef ushort dtype_t;
#define LD(p, i) hal_bf2f((p)[(i)])
#define ST(v, p, i) ((p)[(i)] = hal_f2bf(ACT1(v)))
#else
typedef float dtype_t;
#define LD(p, i) ((p)[(i)])
#define ST(v, p, i) ((p)[(i)] = ACT1(v))
#endif

/* ---- VEC-wide access at any element offset (alignment of one element suffices) -------- */
#if VEC == 1
typedef float floatV;
typedef int intV;
#define VTRUE 1
#define LANE_IDS 0
#define LDV(p, i) LD(p, i)
/* VEC values at stride 2 starting at element i (reads elements i .. i + 2*VEC - 1) */
#define LD2V_EVEN(p, i) LD(p, i)
#define STV(v, p, i) ST(v, p, i)
#define PRIV_LDV(a) ((a)[0])
#define FLDV(p, i) ((p)[(i)])
#define PRIV_STV(v, a) ((a)[0] = (v))
#define CONVERT_FLOATV(v) ((float)(v))
#define HSUM(v) (v)
#elif VEC == 4 || VEC == 8
typedef HAL_CAT(float, VEC) floatV;
typedef HAL_CAT(int, VEC) intV;
#define VTRUE (-1)
#if VEC == 4
#define LANE_IDS ((int4)(0, 1, 2, 3))
#define HSUM(v) (((v).s0 + (v).s1) + ((v).s2 + (v).s3))
#define VEC2 16
#else
#define LANE_IDS ((int8)(0, 1, 2, 3, 4, 5, 6, 7))
#define HSUM(v) ((((v).s0 + (v).s1) + ((v).s2 + (v).s3)) + (((v).s4 + (v).s5) + ((v).s6 + (v).s7)))
#endif
#if DTYPE_HALF
#define LDV(p, i) HAL_CAT(vload_half, VEC)(0, (p) + (i))
#define STV(v, p, i) HAL_CAT(vstore_half, VEC)(ACTV(v), 0, (p) + (i))
#if VEC == 4
#define LD2V_EVEN(p, i) (vload_half8(0, (p) + (i)).even)
#else
/* two 8-wide loads, not one 16-wide: 512-bit vectors miscompile on some CPU targets (PoCL) */
#define LD2V_EVEN(p, i) ((float8)(vload_half8(0, (p) + (i)).even, vload_half8(0, (p) + (i) + 8).even))
#endif
#elif DTYPE_BF16
#define LDV(p, i) HAL_CAT(hal_bf2f, VEC)(HAL_CAT(vload, VEC)(0, (p) + (i)))
#define STV(v, p, i) HAL_CAT(vstore, VEC)(HAL_CAT(hal_f2bf, VEC)(ACTV(v)), 0, (p) + (i))
#if VEC == 4
#define LD2V_EVEN(p, i) hal_bf2f4(vload8(0, (p) + (i)).even)
#else
#define LD2V_EVEN(p, i) hal_bf2f8((ushort8)(vload8(0, (p) + (i)).even, vload8(0, (p) + (i) + 8).even))
#endif
/* VEC-aligned element offset i of a global buffer: one ushortN access (the kernels' aligned paths) */
#define BF_ALDV(p, i) HAL_CAT(hal_bf2f, VEC)(*(__global const HAL_CAT(ushort, VEC)*)((p) + (i)))
#define BF_ASTV(v, p, i) (*(__global HAL_CAT(ushort, VEC)*)((p) + (i)) = HAL_CAT(hal_f2bf, VEC)(ACTV(v)))
#else
#define LDV(p, i) HAL_CAT(vload, VEC)(0, (p) + (i))
#define STV(v, p, i) HAL_CAT(vstore, VEC)(ACTV(v), 0, (p) + (i))
#if VEC == 4
#define LD2V_EVEN(p, i) (vload8(0, (p) + (i)).even)
#else
#define LD2V_EVEN(p, i) ((float8)(vload8(0, (p) + (i)).even, vload8(0, (p) + (i) + 8).even))
#endif
#endif
#define PRIV_LDV(a) HAL_CAT(vload, VEC)(0, (a))
#define FLDV(p, i) HAL_CAT(vload, VEC)(0, (p) + (i))
#define PRIV_STV(v, a) HAL_CAT(vstore, VEC)((v), 0, (a))
#define CONVERT_FLOATV(v) HAL_CAT(convert_float, VEC)(v)
#else
#error "VEC must be 1, 4 or 8"
#endif

/* int64 indices of the first n lanes of an intV (no long vectors: 512-bit long8 trips
 * LLVM on some CPU targets, and h * W + w always fits an int) */
#define ST_IDX(v, p, base, n)                                                                \
    do {                                                                                     \
        int ti_[VEC];                                                                        \
        PRIV_STV((v), ti_);                                                                  \
        for (int j_ = 0; j_ < (n); ++j_) (p)[(base) + j_] = ti_[j_];                         \
    } while (0)

/* 1 where a mask lane is set, else 0 (works for scalar 1/0 and vector -1/0 masks) */
#define MASK01(m) select((intV)0, (intV)1, (m))

/* ---- compute type for max pooling: half only when asked and supported ----------------
 * Max pooling is exact in any precision (it only compares and copies), so native half
 * arithmetic there changes speed, never results. Every other kernel accumulates in float. */
#if DTYPE_HALF && HALF_ARITH && defined(cl_khr_fp16)
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#define HAL_HALF_COMPUTE 1
typedef half ctype;
#if VEC == 1
typedef half ctypeV;
typedef short cmaskV; /* select(half, half, c) takes a short c */
#define LDCV(p, i) ((p)[(i)])
#define LDC2V_EVEN(p, i) ((p)[(i)])
#define TO_CMASK(m) ((short)(m))
#define CMASK_TO_INT(m) ((int)(m))
#define CTOFLOATV(v) ((float)(v))
#else
typedef HAL_CAT(half, VEC) ctypeV;
typedef HAL_CAT(short, VEC) cmaskV;
#define LDCV(p, i) HAL_CAT(vload, VEC)(0, (p) + (i))
#if VEC == 4
#define LDC2V_EVEN(p, i) (vload8(0, (p) + (i)).even)
#else
#define LDC2V_EVEN(p, i) ((half8)(vload8(0, (p) + (i)).even, vload8(0, (p) + (i) + 8).even))
#endif
#define TO_CMASK(m) HAL_CAT(convert_short, VEC)(m)
#define CMASK_TO_INT(m) HAL_CAT(convert_int, VEC)(m)
#define CTOFLOATV(v) HAL_CAT(convert_float, VEC)(v)
#endif
#define LDC(p, i) ((p)[(i)])
#define CTOFLOAT(v) ((float)(v))
#else
#define HAL_HALF_COMPUTE 0
typedef float ctype;
typedef floatV ctypeV;
typedef intV cmaskV;
#define LDCV(p, i) LDV(p, i)
#define LDC2V_EVEN(p, i) LD2V_EVEN(p, i)
#define LDC(p, i) LD(p, i)
#define TO_CMASK(m) (m)
#define CMASK_TO_INT(m) (m)
#define CTOFLOATV(v) (v)
#define CTOFLOAT(v) (v)
#endif

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

/* ---- the activation every output store (ST, STV) applies --------------------------- */
#if FUSE_RELU
inline float hal_relu1(float v) { return v < 0.0f ? 0.0f : v; }
#define ACT1(v) hal_relu1(v)
#if VEC == 1
#define ACTV(v) hal_relu1(v)
#else
inline floatV hal_reluv(floatV v) { return select(v, (floatV)0.0f, v < (floatV)0.0f); }
#define ACTV(v) hal_reluv(v)
#endif
#else
#define ACT1(v) (v)
#define ACTV(v) (v)
#endif

#endif /* HAL_PRELUDE_H */
