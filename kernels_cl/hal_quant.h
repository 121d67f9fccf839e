/* hal OpenCL quantized-storage helpers, prepended after hal_prelude.h for int8/uint8 builds.
 *
 * Kept out of the prelude so the float programs' source text, and with it every driver's
 * kernel cache entry for them, does not change. Macros from the backend:
 *   DTYPE_INT8  0 | 1   activations are int8 (char)    } exactly one of the two is 1
 *   DTYPE_UINT8 0 | 1   activations are uint8 (uchar)  }
 * plus the prelude's LAYOUT_NHWC, WG and VEC. Loads widen to int, stores saturate.
 */
#ifndef HAL_QUANT_H
#define HAL_QUANT_H

#ifndef DTYPE_INT8
#define DTYPE_INT8 0
#endif
#ifndef DTYPE_UINT8
#define DTYPE_UINT8 0
#endif
#if DTYPE_INT8 == DTYPE_UINT8
#error "quantized builds set exactly one of DTYPE_INT8=1, DTYPE_UINT8=1"
#endif

#if DTYPE_INT8
typedef char qtype_t;
#define QMIN (-128)
#define QMAX 127
#define QTYPE_(n) HAL_CAT(char, n)
#define CONVERT_Q_SAT(v) convert_char_sat(v)
#else
typedef uchar qtype_t;
#define QMIN 0
#define QMAX 255
#define QTYPE_(n) HAL_CAT(uchar, n)
#define CONVERT_Q_SAT(v) convert_uchar_sat(v)
#endif

/* below every int8/uint8 value: the start of a max and the value of a masked tap, so the
 * first valid tap always wins and padding never does */
#define QNONE (-1024)

/* ---- scalar: LDQ widens to int, STQ saturates an int ------------------------------------ */
#define LDQ(p, i) ((int)(p)[(i)])
#define STQ(v, p, i) ((p)[(i)] = CONVERT_Q_SAT(v))

/* ---- VEC-wide, any element offset (vloadN of char needs one-byte alignment only) -------- */
#if VEC == 1
#define LDQV(p, i) LDQ(p, i)
/* VEC values at stride 2 from element i */
#define LDQ2V_EVEN(p, i) LDQ(p, i)
#define STQV(v, p, i) STQ(v, p, i)
#define CONVERT_INTV(v) ((int)(v))
#define CONVERT_INTV_SAT_RTE(v) convert_int_sat_rte(v)
#else
#define CONVERT_INTV(v) HAL_CAT(convert_int, VEC)(v)
#define CONVERT_INTV_SAT_RTE(v) HAL_CAT(HAL_CAT(convert_int, VEC), _sat_rte)(v)
#define CONVERT_QV_SAT(v) HAL_CAT(HAL_CAT(convert_, QTYPE_(VEC)), _sat)(v)
#define LDQV(p, i) CONVERT_INTV(HAL_CAT(vload, VEC)(0, (p) + (i)))
#if VEC == 4
#define LDQ2V_EVEN(p, i) CONVERT_INTV(vload8(0, (p) + (i)).even)
#else
/* char16 is 128 bits: no 512-bit vector appears (see the prelude on PoCL) */
#define LDQ2V_EVEN(p, i) CONVERT_INTV(vload16(0, (p) + (i)).even)
#endif
#define STQV(v, p, i) HAL_CAT(vstore, VEC)(CONVERT_QV_SAT(v), 0, (p) + (i))
#endif

#endif /* HAL_QUANT_H */
