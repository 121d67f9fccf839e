/* Quantized (int8/uint8) pooling on packed bytes: pool2d_max, pool2d_avg for the opt-in
 * pool2d parameters QROWS16=1 (NCHW) and QVEC16=2 (NHWC). Same entry points and arguments as
 * qpool2d.cl (pool2d.cl's, then ZP), same results to the bit; built with the prelude,
 * hal_quant.h and DTYPE_INT8=1 or DTYPE_UINT8=1 (VEC only sizes the prelude's types).
 *
 * Kept apart from qpool2d.cl so that the kernels every existing table entry serves stay
 * byte for byte what was measured (a kernel family's source hash covers pool2d.* and
 * qpool2d.*, not this file: docs/backend-opencl.md, int8 section).
 *
 * Bytes stay packed four to a 32-bit word and are reduced two to a word, as 16-bit lanes:
 *   max: a lane holds the byte of interest in its HIGH half (any byte below it), and a 16-bit
 *        max then orders lanes by that byte first, so the high byte of the result is the max
 *        of the high bytes; int8 compares the lanes as signed (the byte's sign is the lane's),
 *        uint8 as unsigned: no bias, no masks. The odd bytes of a word are already there;
 *        the even ones are `w << 8`. On NVIDIA's OpenCL at sm_90+ (HAL_PTX_U16X2, the
 *        launcher's ptx_u16x2_ok) one inline-PTX max.s16x2 / max.u16x2 a word, elsewhere
 *        short8 / ushort8 max.
 *   sum: clean 16-bit lanes (w & 0x00ff00ff, (w >> 8) & 0x00ff00ff), int8 made unsigned first
 *        (sign bit flipped: +128), added as 32-bit words (at most 9 x 255 a lane: no carry).
 * The average is saturate(round_half_even(s / divisor) + ZP), s = sum(q - ZP) over the taps
 * inside the input, exactly as qpool2d.cl. With the divisor rules (no DIVISOR override) the
 * divisor d is 1 .. 9 (windows of at most 3x3) and the quotient is found in integers:
 *   u = 2 s + d + 2 d K0 (K0 = 4096 keeps u > 0 for |s| <= 9 * 255), q = floor(u / 2d) =
 *   mul_hi(u, QMAGIC2[d]), QMAGIC2[d] = ceil(2^32 / 2d), exact for u < 2^32 / 2d (u < 2^17
 *   here; tests/test_opencl_host.py checks every u < 2^17). q - K0 = floor(s / d + 1/2) is
 *   round-half-up; u - 2 d q == 0 exactly on a tie, where an odd q steps down to the even
 *   neighbour (an odd d has no ties, and the uniform odd divisor skips that test).
 * Saturation: a rule divisor is at least the count of taps inside, so |s / d| stays within
 * [QMIN - ZP, QMAX - ZP] (ZP lies in the dtype's range) and q + ZP needs no clamp; the
 * DIVISOR override (any size) takes QDIV_ROUND_EVEN's float fast path (|s| < 2^20) and
 * saturates, as qpool2d.cl.
 *
 * Second versions (QROWS16=2 average: -DQP_V2=1; QVEC16=3 and 4: -DQP_PIX=2 and 4 output
 * pixels a work-item) add a cheaper division where the divisor d equals the number of taps the
 * biased sum S holds (the common case: the window inside the input, or count_include_pad with
 * the NCHW strips' zero-point fill). Then s = S - d (ZP + QP_BIAS), and since d (ZP + QP_BIAS)
 * / d is an integer the result is round_half_even(S / d - (ZP + QP_BIAS)) + ZP = q - t - QP_BIAS
 * with q = round_half_up(S / d) = floor((S + h) / d), h = d >> 1, and t = 1 on a tie ((S + h)
 * a multiple of d, even d only) where q - ZP is odd (parity: q ^ ZP). 0 <= q - t <= 255 (S <= 255 d),
 * so the stored byte is (q - t) ^ (0x80 for int8): no zero point, no clamp. q comes two 16-bit
 * lanes at a time from one packed word T = S0 | S1 << 16 (S0, S1 <= 9 * 255; qp_div2):
 *   q1 = (T * M + C) >> 32, q0 = ((T << 16) * M + C) >> 32 (64-bit products; IMAD.WIDE), with
 *   M = ceil(2^16 / d), C = (h << 16) M: the lane-0 bits below lane 1 add under 0.04 / d, and
 *   M's rounding under 0.035 (d - 1) / d, so both are exact for d = 1 .. 9 (checked for every
 *   pair S0, S1 <= 2295 in numpy; the forced tests compare every path with the oracle).
 * Ties: the lanes of T + h - q d are (S + h) mod d (no borrow), zero exactly on a tie (qp_ties2).
 */

#if !(DTYPE_INT8 || DTYPE_UINT8)
#error "qpool2d_pack.cl is built with -DDTYPE_INT8=1 or -DDTYPE_UINT8=1"
#endif
#ifndef HAL_PTX_U16X2
#define HAL_PTX_U16X2 0
#endif

#define QP_LO 0x00ff00ffu
#if DTYPE_INT8
#define QP_FLIP 0x80808080u /* +128 a byte: int8 -> the unsigned order */
#define QP_BIAS 128
#else
#define QP_FLIP 0u
#define QP_BIAS 0
#endif
#define QP_K0 4096

/* ---- 16-bit lane max (the high byte of each lane decides) --------------------------------- */
#if HAL_PTX_U16X2
inline uint qp_max2(uint a, uint b)
{
    uint d;
#if DTYPE_INT8
    __asm__("max.s16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#else
    __asm__("max.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#endif
    return d;
}
inline uint4 qp_max4(uint4 a, uint4 b)
{
    return (uint4)(qp_max2(a.x, b.x), qp_max2(a.y, b.y), qp_max2(a.z, b.z), qp_max2(a.w, b.w));
}
/* the high bytes of a's and b's two lanes, in order: a.hi0, a.hi1, b.hi0, b.hi1 */
inline uint qp_hibytes(uint a, uint b)
{
    uint d;
    __asm__("prmt.b32 %0, %1, %2, 0x7531;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
#else
#if DTYPE_INT8
inline uint qp_max2(uint a, uint b) { return as_uint(max(as_short2(a), as_short2(b))); }
inline uint4 qp_max4(uint4 a, uint4 b) { return as_uint4(max(as_short8(a), as_short8(b))); }
#else
inline uint qp_max2(uint a, uint b) { return as_uint(max(as_ushort2(a), as_ushort2(b))); }
inline uint4 qp_max4(uint4 a, uint4 b) { return as_uint4(max(as_ushort8(a), as_ushort8(b))); }
#endif
inline uint qp_hibytes(uint a, uint b)
{
    return ((a >> 8) & 0xffu) | ((a >> 16) & 0xff00u) | ((b << 8) & 0xff0000u) | (b & 0xff000000u);
}
#endif

/* ceil(2^32 / (2 d)) for d = 1 .. 9 (index 0 unused) */
__constant uint QMAGIC2[10] = {0u,         2147483648u, 1073741824u, 715827883u, 536870912u,
                               429496730u, 357913942u,  306783379u,  268435456u, 238609295u};

/* round_half_even((S - z) / d) on 8 lanes, S the lanes' biased sums (0 .. 9 * 255), z the
 * bias they carry, d in 1 .. 9 and m = QMAGIC2[d] per lane (see the file's header); TIES 0
 * for an odd d, which has none */
#define QP_DIV_BODY(TIES)                                                                  \
    const uint8 u = as_uint8(2 * S + (d * (2 * QP_K0 + 1) - 2 * z));                       \
    uint8 q = mul_hi(u, m);                                                                \
    if (TIES) q -= select((uint8)0, q & 1u, u == q * as_uint8(2 * d));                     \
    return as_int8(q) - QP_K0;
inline int8 qp_div_ties(int8 S, int8 z, int8 d, uint8 m) { QP_DIV_BODY(1) }
inline int8 qp_div_odd(int8 S, int8 z, int8 d, uint8 m) { QP_DIV_BODY(0) }

/* the DIVISOR override: QDIV_ROUND_EVEN's fast path (|s| < 2^20), inv = 1 / d once */
inline int8 qp_div_float(int8 s, int d, float inv)
{
    const float8 t = convert_float8(s) * inv;
    const int8 f = convert_int8(floor(t));
    return select(convert_int8_rte(t), f + (f & 1), 2 * s == (2 * f + 1) * d);
}

/* Stored bytes packed into words as 16-bit lanes, the odd bytes shifted over the even ones:
 * built as a char vector and reinterpreted, the words went out as 4-byte st.global.v4.u8
 * pieces (clang for nvptx); gathered lane by lane into words, PoCL ran the NHWC average 3x
 * slower (its vectorizer). */
/* 8 lanes in [QMIN, QMAX], in output order, as the 8 stored bytes; _SAT saturates first */
inline uint2 qp_bytes8(int8 v)
{
    return as_uint2(convert_ushort4(v.even & 0xff)) | (as_uint2(convert_ushort4(v.odd & 0xff)) << 8);
}
#define QP_BYTES8(v) qp_bytes8(v)
#define QP_BYTES8_SAT(v) qp_bytes8(clamp((v), QMIN, QMAX))
/* the 16 channels' bytes from the even (e) and odd (o) channels' lanes */
inline uint4 qp_bytes16(int8 e, int8 o)
{
    return as_uint4(convert_ushort8(e & 0xff)) | (as_uint4(convert_ushort8(o & 0xff)) << 8);
}

/* ---- second versions: the division of d = the taps summed (see the file's header) ---------- */
/* ceil(2^16 / d) for d = 1 .. 9 (index 0 unused) */
__constant uint QMAGIC16[10] = {0u, 65536u, 32768u, 21846u, 16384u, 13108u, 10923u, 9363u, 8192u, 7282u};

/* floor((S + h) / d) of both 16-bit lanes of T (each <= 9 * 255), as q0 | q1 << 16; m =
 * QMAGIC16[d], c = (h << 16) m */
inline uint qp_div2(uint T, uint m, ulong c)
{
    const uint q1 = (uint)(((ulong)T * m + c) >> 32);
    const uint q0 = (uint)(((ulong)(T << 16) * m + c) >> 32);
    return q0 | (q1 << 16);
}
/* Q = qp_div2(T): one step down on a tie where the lane's q - ZP is odd; h2 = h * 0x00010001,
 * zpar = (ZP & 1) * 0x00010001 (only for an even d: an odd d has no ties) */
inline uint qp_ties2(uint T, uint Q, uint d, uint h2, uint zpar)
{
    const uint rem = T + h2 - Q * d;                         /* lanes (S + h) mod d, no borrow */
    const uint nz = ((rem + 0x7fff7fffu) >> 15) & 0x00010001u; /* 1 where the remainder is > 0 */
    return Q - (~nz & (Q ^ zpar) & 0x00010001u);
}
/* The 16 stored bytes of an average by a rule divisor d (1 .. 9, at least taps_in): ev / od hold
 * the even / odd channels' sums S of the flipped bytes of the taps_in taps inside, as 16-bit
 * lanes. S' = S + (d - taps_in)(ZP + QP_BIAS) counts the missing taps as zero points, so
 * s = S' - d (ZP + QP_BIAS) and the packed division above (d = the taps S' holds) applies;
 * 0 <= S' <= 255 d since ZP + QP_BIAS <= 255 (session 37: one division for every rule divisor,
 * where the kernels before divided unpacked lanes unless d == taps_in). */
inline uint4 qp_avg16(uint4 ev, uint4 od, int d, int taps_in, int zp)
{
    const uint fill = (uint)((d - taps_in) * (zp + QP_BIAS)) * 0x00010001u;
    ev += fill;
    od += fill;
    const uint m = QMAGIC16[d];
    const ulong c = (ulong)((uint)(d >> 1) << 16) * m;
    uint4 qe = (uint4)(qp_div2(ev.x, m, c), qp_div2(ev.y, m, c), qp_div2(ev.z, m, c), qp_div2(ev.w, m, c));
    uint4 qo = (uint4)(qp_div2(od.x, m, c), qp_div2(od.y, m, c), qp_div2(od.z, m, c), qp_div2(od.w, m, c));
    if (!(d & 1)) {
        const uint h2 = (uint)(d >> 1) * 0x00010001u, zpar = ((uint)zp & 1u) * 0x00010001u;
        qe = (uint4)(qp_ties2(ev.x, qe.x, d, h2, zpar), qp_ties2(ev.y, qe.y, d, h2, zpar),
                     qp_ties2(ev.z, qe.z, d, h2, zpar), qp_ties2(ev.w, qe.w, d, h2, zpar));
        qo = (uint4)(qp_ties2(od.x, qo.x, d, h2, zpar), qp_ties2(od.y, qo.y, d, h2, zpar),
                     qp_ties2(od.z, qo.z, d, h2, zpar), qp_ties2(od.w, qo.w, d, h2, zpar));
    }
    return (qe | (qo << 8)) ^ QP_FLIP;
}
/* QP_DIVISOR_RULE [1]: the NHWC averages divide by the rules (count_include_pad); 0 = by the
 * divisor_override DIVISOR (the launcher's, from the spec), QDIV_ROUND_EVEN's float path */
#ifndef QP_DIVISOR_RULE
#define QP_DIVISOR_RULE 1
#endif

/* the low bytes of a's and b's two 16-bit lanes, in order: a.lo0, a.lo1, b.lo0, b.lo1 */
#if HAL_PTX_U16X2
inline uint qp_lobytes(uint a, uint b)
{
    uint d;
    __asm__("prmt.b32 %0, %1, %2, 0x6420;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
#else
inline uint qp_lobytes(uint a, uint b)
{
    return (a & 0xffu) | ((a >> 8) & 0xff00u) | ((b & 0xffu) << 16) | ((b << 8) & 0xff000000u);
}
#endif

#if !LAYOUT_NHWC
/* ------------------------------------------------------------------------------------
 * NCHW row strips with 16-byte row vectors (QROWS16=1): 2x2 and 3x3 windows of stride 2
 * (STRIP_K), dilation 1, left pad POOL_PL 0 or 1, no indices, IW % 4 == 0 (the launcher's
 * _qrows16_applies). A work-item takes STRIP_ROWS output rows of one plane and the 8 output
 * columns ow0 = 8 j .. 8 j + 7, whose windows read the 16 input columns c0 = 16 j .. c0 + 15
 * plus the left halo c0 - 1 (POOL_PL 1) or the right halo c0 + 16 (3x3, POOL_PL 0). Per
 * input row of the strip (2 STRIP_ROWS + STRIP_K - 2 rows, each loaded once): one 16-byte
 * load (QP_ALIGN16, IW % 16 == 0: one aligned uint4; else four aligned 32-bit words, word
 * addresses clamped into the row) and the halo byte, every row's loads issued before any is
 * used, from rows and columns clamped into the input. Then per output row the window rows
 * are reduced first (per word), then the columns: in word k, lane 0 is output 2k and lane 1
 * output 2k + 1, and the taps of output o = 2k + L (chunk columns 2o - 1 .. 2o + 2, as the
 * window and its left pad pick) are the views
 *   E (column 2o):     max: w << 8                          sum: w & 0x00ff00ff
 *   O (column 2o + 1): max: w                               sum: (w >> 8) & 0x00ff00ff
 *   P (column 2o - 1): the O view's lanes moved up one lane, (O_k << 16) | (O_{k-1} >> 16),
 *                      O_{-1} holding the left halo in its lane 1
 *   N (column 2o + 2): the E view's lanes moved down one, (E_k >> 16) | (E_{k+1} << 16),
 *                      E_4 holding the right halo in its lane 0
 * (3x3, pad 1: P, E, O; 3x3, pad 0: E, O, N; 2x2, pad 0: E, O; 2x2, pad 1: P, E).
 * Taps outside the input: max takes rows and halo columns clamped into the input as they are
 * (a clamped tap is a tap of the same window: every window overlaps the input, and a strip's
 * clamped row serves only windows that hold the row it was clamped to), and replaces the
 * bytes past the row's end (a chunk with c0 + 16 > IW) by the dtype's minimum; the average
 * replaces every tap outside by the zero point, so that s = sum of the window's K * K taps
 * - K * K * ZP (in the biased bytes: - K * K * (ZP + QP_BIAS)) whatever the border. Stores:
 * 8 bytes per output row (qp_store8).
 * ---------------------------------------------------------------------------------- */
#if !defined(STRIP_K) || !defined(POOL_PL) || !defined(STRIP_ROWS) || !defined(QP_ALIGN16)
#error "qpool2d_pack.cl: the NCHW kernels are built with STRIP_K, POOL_PL, STRIP_ROWS and QP_ALIGN16"
#endif
#define SK STRIP_K
#define QP_KK (SK * SK)
#define QP_NIN (2 * STRIP_ROWS + SK - 2)
#define QP_HALO_L (POOL_PL > 0)
#define QP_HALO_R (SK - 1 - POOL_PL >= 2)

#define QP_PROLOGUE                                                                        \
    const int JV = CEIL_DIV(OW, 8);                                                        \
    const int S_ = CEIL_DIV(OH, STRIP_ROWS);                                               \
    const int gid = get_global_id(0);                                                      \
    if (gid >= N * C * S_ * JV) return;                                                    \
    const int j = gid % JV;                                                                \
    const int t = gid / JV;                                                                \
    const int oh0 = (t % S_) * STRIP_ROWS;                                                 \
    const int nc = t / S_;                                                                 \
    const int ow0 = 8 * j;                                                                 \
    const int c0 = 16 * j; /* <= IW: the window of output ow0 overlaps the input */        \
    const int h0 = 2 * oh0 - PT;                                                           \
    const int nv = min(8, OW - ow0);                                                       \
    __global const uchar* xp = (__global const uchar*)x + nc * IH * IW;                    \
    const int partial = c0 + 16 > IW;                                                      \
    /* bytes of word k inside the row (chunks past the row's end: partial) */              \
    const int4 nb = clamp(IW - c0 - (int4)(0, 4, 8, 12), 0, 4);                             \
    const uint4 keep = select(((uint4)1u << as_uint4(8 * nb)) - 1u, (uint4)0xffffffffu, nb == 4); \
    const int lcol = clamp(c0 - 1, 0, IW - 1);                                             \
    const int rcol = min(c0 + 16, IW - 1);                                                 \
    uint4 wr[QP_NIN];                                                                      \
    uint hl[QP_NIN], hr[QP_NIN];                                                           \
    QP_LOAD_ROWS

/* every row's 16 bytes and halo bytes, from rows and columns clamped into the input */
#if QP_ALIGN16
#define QP_LOAD_CHUNK(row) (*(__global const uint4*)((row) + min(c0, IW - 16)))
#define QP_WORD_COLS
#else
#define QP_LOAD_CHUNK(row)                                                                 \
    ((uint4)(*(__global const uint*)((row) + wc.x), *(__global const uint*)((row) + wc.y), \
             *(__global const uint*)((row) + wc.z), *(__global const uint*)((row) + wc.w)))
#define QP_WORD_COLS const int4 wc = min(c0 + (int4)(0, 4, 8, 12), IW - 4);
#endif
#define QP_LOAD_ROWS                                                                       \
    QP_WORD_COLS                                                                           \
    _Pragma("unroll") for (int i = 0; i < QP_NIN; ++i) {                                   \
        __global const uchar* row = xp + clamp(h0 + i, 0, IH - 1) * IW;                    \
        wr[i] = QP_LOAD_CHUNK(row);                                                        \
        hl[i] = QP_HALO_L ? (uint)row[lcol] : 0u;                                          \
        hr[i] = QP_HALO_R ? (uint)row[rcol] : 0u;                                          \
    }

/* the output row's first nv of 8 bytes at o: one 8-byte store where OW % 8 == 0 (o is then a
 * multiple of 8), two 4-byte ones where OW % 4 == 0, else (and for a partial chunk) bytes
 * (vstoreN of char promises one-byte alignment only, and NVIDIA then writes bytes anyway) */
inline void qp_store8(__global qtype_t* y, int o, int nv, int OW, uint2 w)
{
    __global uchar* yb = (__global uchar*)y;
    if (nv == 8 && OW % 8 == 0) {
        *(__global uint2*)(yb + o) = w;
    } else if (nv == 8 && OW % 4 == 0) {
        *(__global uint*)(yb + o) = w.x;
        *(__global uint*)(yb + o + 4) = w.y;
    } else {
        for (int h = 0; h < nv; ++h) yb[o + h] = (uchar)((h < 4 ? w.x : w.y) >> (8 * (h & 3)));
    }
}

#define QP_OUT_BASE (nc * OH + oh0 + r) * OW + ow0

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_max(__global const qtype_t* restrict x, __global qtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD, int ZP)
{
    QP_PROLOGUE
    if (partial) { /* past the row's end: the dtype's minimum, never above a tap inside */
        const uint4 none = (uint4)(DTYPE_INT8 ? 0x80808080u : 0u);
        _Pragma("unroll") for (int i = 0; i < QP_NIN; ++i) wr[i] = bitselect(none, wr[i], keep);
    }
    /* a constant trip count (no break), so that the loop unrolls and wr[] stays in registers */
#pragma unroll
    for (int r = 0; r < STRIP_ROWS; ++r) {
        if (oh0 + r >= OH) continue;
        /* the window rows: O (odd columns) and E (even columns) views, halos in their lanes */
        uint4 vo = wr[2 * r], ve = wr[2 * r] << 8;
        uint vl = hl[2 * r] << 24, vr = hr[2 * r] << 8;
        _Pragma("unroll") for (int kh = 1; kh < SK; ++kh) {
            vo = qp_max4(vo, wr[2 * r + kh]);
            ve = qp_max4(ve, wr[2 * r + kh] << 8);
            if (QP_HALO_L) vl = qp_max2(vl, hl[2 * r + kh] << 24);
            if (QP_HALO_R) vr = qp_max2(vr, hr[2 * r + kh] << 8);
        }
#if SK == 3 && POOL_PL == 1
        const uint4 m = qp_max4(qp_max4((vo << 16) | ((uint4)(vl, vo.xyz) >> 16), ve), vo);
#elif SK == 3
        const uint4 m = qp_max4(qp_max4(ve, vo), (ve >> 16) | ((uint4)(ve.yzw, vr) << 16));
#elif POOL_PL == 1
        const uint4 m = qp_max4((vo << 16) | ((uint4)(vl, vo.xyz) >> 16), ve);
#else
        const uint4 m = qp_max4(ve, vo);
#endif
        qp_store8(y, QP_OUT_BASE, nv, OW, (uint2)(qp_hibytes(m.x, m.y), qp_hibytes(m.z, m.w)));
    }
}

#ifndef QP_V2
#define QP_V2 0
#endif
#if !QP_V2
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_avg(__global const qtype_t* restrict x, __global qtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD, int ZP)
{
    QP_PROLOGUE
    const uint zb = (uint)ZP & 0xffu; /* the zero point's stored byte: every tap outside */
    const uint4 zw = (uint4)(zb * 0x01010101u);
    if (partial) {
        _Pragma("unroll") for (int i = 0; i < QP_NIN; ++i) wr[i] = bitselect(zw, wr[i], keep);
    }
    if (h0 < 0 || h0 + QP_NIN > IH) { /* a strip at the top or bottom: rows outside */
        _Pragma("unroll") for (int i = 0; i < QP_NIN; ++i) {
            const int row_ok = h0 + i >= 0 && h0 + i < IH;
            wr[i] = row_ok ? wr[i] : zw;
            hl[i] = row_ok ? hl[i] : zb;
            hr[i] = row_ok ? hr[i] : zb;
        }
    }
    /* halo columns outside the input: K rows of the zero point (biased as every byte) */
    const uint zsum = SK * ((zb ^ (QP_FLIP & 0xffu)));
    const int lin = c0 >= 1, rin = c0 + 16 < IW;
    /* the divisor rules: per-lane column counts, uniform across the lanes except at the
     * plane's left and right edges (and past its end) */
    const int8 lane = (int8)(0, 1, 2, 3, 4, 5, 6, 7);
    int8 cols_in = (int8)0, cols_pad = (int8)0;
    for (int kw = 0; kw < SK; ++kw) {
        const int8 iw = c0 + 2 * lane - POOL_PL + kw;
        cols_in -= (iw >= 0) & (iw < IW);
        cols_pad -= (iw >= -POOL_PL) & (iw < IW + PR);
    }
    const int8 cols = COUNT_INCLUDE_PAD ? cols_pad : cols_in;
    const int cols_full = all((cols == SK) | (lane >= nv));
    const float inv_divisor = DIVISOR > 0 ? 1.0f / (float)DIVISOR : 1.0f;
    const int8 z = (int8)(QP_KK * (ZP + QP_BIAS)); /* the biased sums' offset: K * K taps */
#pragma unroll
    for (int r = 0; r < STRIP_ROWS; ++r) {
        if (oh0 + r >= OH) continue;
        uint4 ve = (uint4)0, vo = (uint4)0;
        uint vl = 0u, vr = 0u;
        _Pragma("unroll") for (int kh = 0; kh < SK; ++kh) {
            const uint4 w = wr[2 * r + kh] ^ QP_FLIP;
            ve += w & QP_LO;
            vo += (w >> 8) & QP_LO;
            if (QP_HALO_L) vl += (hl[2 * r + kh] ^ QP_FLIP) & 0xffu;
            if (QP_HALO_R) vr += (hr[2 * r + kh] ^ QP_FLIP) & 0xffu;
        }
        vl = lin ? vl : zsum;
        vr = rin ? vr : zsum;
#if SK == 3 && POOL_PL == 1
        const uint4 tsum = ve + vo + ((vo << 16) | ((uint4)(vl << 16, vo.xyz) >> 16));
#elif SK == 3
        const uint4 tsum = ve + vo + ((ve >> 16) | ((uint4)(ve.yzw, vr) << 16));
#elif POOL_PL == 1
        const uint4 tsum = ve + ((vo << 16) | ((uint4)(vl << 16, vo.xyz) >> 16));
#else
        const uint4 tsum = ve + vo;
#endif
        int8 S;
        S.even = as_int4(tsum & 0xffffu);
        S.odd = as_int4(tsum >> 16);
        uint2 out;
        if (DIVISOR > 0) {
            out = QP_BYTES8_SAT(qp_div_float(S - z, DIVISOR, inv_divisor) + ZP);
        } else {
            int rows_in = 0, rows_pad = 0;
            for (int kh = 0; kh < SK; ++kh) {
                const int ih = h0 + 2 * r + kh;
                rows_in += ih >= 0 && ih < IH;
                rows_pad += ih >= -PT && ih < IH + PB;
            }
            const int rows = COUNT_INCLUDE_PAD ? rows_pad : rows_in;
            int8 q;
            if (cols_full) { /* one divisor for the 8 outputs (the common case) */
                const int d = max(rows * SK, 1);
                if (d & 1)
                    q = qp_div_odd(S, z, (int8)d, (uint8)QMAGIC2[d]);
                else
                    q = qp_div_ties(S, z, (int8)d, (uint8)QMAGIC2[d]);
            } else {
                const int8 d = clamp(rows * cols, 1, 9); /* lanes past OW may count 0 taps */
                const uint8 m = (uint8)(QMAGIC2[d.s0], QMAGIC2[d.s1], QMAGIC2[d.s2], QMAGIC2[d.s3],
                                        QMAGIC2[d.s4], QMAGIC2[d.s5], QMAGIC2[d.s6], QMAGIC2[d.s7]);
                q = qp_div_ties(S, z, d, m);
            }
            out = QP_BYTES8(q + ZP);
        }
        qp_store8(y, QP_OUT_BASE, nv, OW, out);
    }
}
#else
/* QROWS16=2's average: QROWS16=1's loads, fills and tap views, with
 *  - every input row unpacked once into its even and odd lanes (the row between two output
 *    rows serves both), the window rows then summed with three-input adds;
 *  - every output row computed (the stores alone skip rows past OH), so that nothing is
 *    recomputed behind a branch;
 *  - where the divisor is K * K for all 8 outputs (cols_full and every window row counted:
 *    count_include_pad, or a strip inside the input) the division of the file's header on
 *    packed lanes: qp_div2 per word (ties for the 2x2 window's 4), bytes gathered from the
 *    lanes (qp_lobytes), the int8 bias flipped off, no zero point and no clamp. Other rows
 *    (the plane's edges without count_include_pad, ceil_mode, DIVISOR) as QROWS16=1. */
#define QP_M16 (SK == 3 ? 7282u : 16384u) /* QMAGIC16[K * K] */
#define QP_H16 ((uint)(QP_KK >> 1))
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_avg(__global const qtype_t* restrict x, __global qtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD, int ZP)
{
    QP_PROLOGUE
    const uint zb = (uint)ZP & 0xffu; /* the zero point's stored byte: every tap outside */
    const uint4 zw = (uint4)(zb * 0x01010101u);
    if (partial) {
        _Pragma("unroll") for (int i = 0; i < QP_NIN; ++i) wr[i] = bitselect(zw, wr[i], keep);
    }
    if (h0 < 0 || h0 + QP_NIN > IH) { /* a strip at the top or bottom: rows outside */
        _Pragma("unroll") for (int i = 0; i < QP_NIN; ++i) {
            const int row_ok = h0 + i >= 0 && h0 + i < IH;
            wr[i] = row_ok ? wr[i] : zw;
            hl[i] = row_ok ? hl[i] : zb;
            hr[i] = row_ok ? hr[i] : zb;
        }
    }
    /* every row's even and odd lanes (biased bytes), once */
    uint4 re[QP_NIN], ro[QP_NIN];
    _Pragma("unroll") for (int i = 0; i < QP_NIN; ++i) {
        const uint4 w = wr[i] ^ QP_FLIP;
        re[i] = w & QP_LO;
        ro[i] = (w >> 8) & QP_LO;
        hl[i] = (hl[i] ^ QP_FLIP) & 0xffu;
        hr[i] = (hr[i] ^ QP_FLIP) & 0xffu;
    }
    /* halo columns outside the input: K rows of the zero point (biased as every byte) */
    const uint zsum = SK * ((zb ^ (QP_FLIP & 0xffu)));
    const int lin = c0 >= 1, rin = c0 + 16 < IW;
    const int8 lane = (int8)(0, 1, 2, 3, 4, 5, 6, 7);
    int8 cols_in = (int8)0, cols_pad = (int8)0;
    for (int kw = 0; kw < SK; ++kw) {
        const int8 iw = c0 + 2 * lane - POOL_PL + kw;
        cols_in -= (iw >= 0) & (iw < IW);
        cols_pad -= (iw >= -POOL_PL) & (iw < IW + PR);
    }
    const int8 cols = COUNT_INCLUDE_PAD ? cols_pad : cols_in;
    const int cols_full = all((cols == SK) | (lane >= nv));
    const float inv_divisor = DIVISOR > 0 ? 1.0f / (float)DIVISOR : 1.0f;
    const int8 z = (int8)(QP_KK * (ZP + QP_BIAS)); /* the biased sums' offset: K * K taps */
    const uint zpar = ((uint)ZP & 1u) * 0x00010001u;
#pragma unroll
    for (int r = 0; r < STRIP_ROWS; ++r) {
        const int i0 = 2 * r;
#if SK == 3
        const uint4 ve = re[i0] + re[i0 + 1] + re[i0 + 2];
        const uint4 vo = ro[i0] + ro[i0 + 1] + ro[i0 + 2];
        uint vl = hl[i0] + hl[i0 + 1] + hl[i0 + 2];
        uint vr = hr[i0] + hr[i0 + 1] + hr[i0 + 2];
#else
        const uint4 ve = re[i0] + re[i0 + 1];
        const uint4 vo = ro[i0] + ro[i0 + 1];
        uint vl = hl[i0] + hl[i0 + 1];
        uint vr = hr[i0] + hr[i0 + 1];
#endif
        vl = lin ? vl : zsum;
        vr = rin ? vr : zsum;
#if SK == 3 && POOL_PL == 1
        const uint4 tsum = ve + vo + ((vo << 16) | ((uint4)(vl << 16, vo.xyz) >> 16));
#elif SK == 3
        const uint4 tsum = ve + vo + ((ve >> 16) | ((uint4)(ve.yzw, vr) << 16));
#elif POOL_PL == 1
        const uint4 tsum = ve + ((vo << 16) | ((uint4)(vl << 16, vo.xyz) >> 16));
#else
        const uint4 tsum = ve + vo;
#endif
        int rows_in = 0, rows_pad = 0;
        for (int kh = 0; kh < SK; ++kh) {
            const int ih = h0 + i0 + kh;
            rows_in += ih >= 0 && ih < IH;
            rows_pad += ih >= -PT && ih < IH + PB;
        }
        const int rows = COUNT_INCLUDE_PAD ? rows_pad : rows_in;
        uint2 out;
        if (DIVISOR == 0 && rows == SK && cols_full) { /* d = K * K for the 8 outputs */
            const ulong c = (ulong)(QP_H16 << 16) * QP_M16;
            uint4 Q = (uint4)(qp_div2(tsum.x, QP_M16, c), qp_div2(tsum.y, QP_M16, c), qp_div2(tsum.z, QP_M16, c),
                              qp_div2(tsum.w, QP_M16, c));
#if !(SK & 1) /* 2x2: d = 4 has ties */
            const uint h2 = QP_H16 * 0x00010001u;
            Q = (uint4)(qp_ties2(tsum.x, Q.x, QP_KK, h2, zpar), qp_ties2(tsum.y, Q.y, QP_KK, h2, zpar),
                        qp_ties2(tsum.z, Q.z, QP_KK, h2, zpar), qp_ties2(tsum.w, Q.w, QP_KK, h2, zpar));
#endif
            out = (uint2)(qp_lobytes(Q.x, Q.y), qp_lobytes(Q.z, Q.w)) ^ (uint2)(QP_FLIP);
        } else {
            int8 S;
            S.even = as_int4(tsum & 0xffffu);
            S.odd = as_int4(tsum >> 16);
            if (DIVISOR > 0) {
                out = QP_BYTES8_SAT(qp_div_float(S - z, DIVISOR, inv_divisor) + ZP);
            } else {
                int8 q;
                if (cols_full) {
                    const int d = max(rows * SK, 1);
                    if (d & 1)
                        q = qp_div_odd(S, z, (int8)d, (uint8)QMAGIC2[d]);
                    else
                        q = qp_div_ties(S, z, (int8)d, (uint8)QMAGIC2[d]);
                } else {
                    const int8 d = clamp(rows * cols, 1, 9); /* lanes past OW may count 0 taps */
                    const uint8 m = (uint8)(QMAGIC2[d.s0], QMAGIC2[d.s1], QMAGIC2[d.s2], QMAGIC2[d.s3],
                                            QMAGIC2[d.s4], QMAGIC2[d.s5], QMAGIC2[d.s6], QMAGIC2[d.s7]);
                    q = qp_div_ties(S, z, d, m);
                }
                out = QP_BYTES8(q + ZP);
            }
        }
        if (oh0 + r < OH) qp_store8(y, QP_OUT_BASE, nv, OW, out);
    }
}
#endif

#else
/* ------------------------------------------------------------------------------------
 * NHWC, 16 channels per work-item (QVEC16=2): qpool2d.cl's QPOOL_VEC16 kernels (the same
 * work mapping, loads and stores: one output pixel's 16-channel group a work-item, the
 * window fixed at build time, every tap one 16-byte vector loaded before the reduction),
 * with the reductions above: max on the high bytes of 16-bit lanes (no bias, no masks), and
 * an average whose divisor (the same for the 16 channels) divides on packed 16-bit lane pairs
 * (qp_avg16), the taps outside the input masked to 0 (session 37; before, a border branch and
 * a division of unpacked lanes).
 * ---------------------------------------------------------------------------------- */
#if !POOL_FIXED || POOL_DH != 1 || POOL_DW != 1 || POOL_KH > 3 || POOL_KW > 3
#error "qpool2d_pack.cl: QVEC16=2 is built with a fixed window of at most 3x3 without dilation"
#endif
#define Q16_TAPS (POOL_KH * POOL_KW)
typedef QTYPE_(16) q16_t;

#define Q16_PROLOGUE                                                                       \
    const int CG = CEIL_DIV(C, 16);                                                        \
    const int gid = get_global_id(0);                                                      \
    if (gid >= N * OH * OW * CG) return;                                                   \
    const int cg = gid % CG;                                                               \
    int t = gid / CG;                                                                      \
    const int ow = t % OW;                                                                 \
    t /= OW;                                                                               \
    const int oh = t % OH;                                                                 \
    const int n = t / OH;                                                                  \
    const int c0 = cg * 16;                                                                \
    const int nvalid = min(16, C - c0);                                                    \
    const int h0 = oh * POOL_SH - PT;                                                      \
    const int w0 = ow * POOL_SW - PL;                                                      \
    const int obase = ((n * OH + oh) * OW + ow) * C + c0;

/* 16 channels from element p at any alignment; lanes past nvalid repeat the last channel */
inline uint4 q16_load_any(__global const qtype_t* x, int p, int nvalid)
{
    if (nvalid == 16) return as_uint4(vload16(0, x + p));
    qtype_t tmp[16];
    for (int j = 0; j < 16; ++j) tmp[j] = x[p + min(j, nvalid - 1)];
    return as_uint4(vload16(0, tmp));
}

/* the work-item's 16 output bytes: one uint4 store when aligned (C % 16 == 0) */
inline void q16_store(__global qtype_t* y, int o, int nvalid, int aligned, uint4 w)
{
    if (aligned) {
        *(__global uint4*)(y + o) = w;
        return;
    }
    const q16_t v = HAL_CAT(as_, QTYPE_(16))(w);
    if (nvalid == 16) {
        vstore16(v, 0, y + o);
    } else {
        qtype_t tmp[16];
        vstore16(v, 0, tmp);
        for (int j = 0; j < nvalid; ++j) y[o + j] = tmp[j];
    }
}

#ifndef QP_PIX
#define QP_PIX 0
#endif
#if !QP_PIX
/* the window's taps, row-major, into tap[]: every load issued before any is used */
#define Q16_LOAD_WINDOW(LOAD)                                                              \
    _Pragma("unroll") for (int kh = 0; kh < POOL_KH; ++kh) {                               \
        const int prow = (n * IH + clamp(h0 + kh, 0, IH - 1)) * IW;                        \
        _Pragma("unroll") for (int kw = 0; kw < POOL_KW; ++kw) {                           \
            const int p = (prow + clamp(w0 + kw, 0, IW - 1)) * C + c0;                     \
            tap[kh * POOL_KW + kw] = LOAD;                                                 \
        }                                                                                  \
    }
#define Q16_WINDOW_TAPS                                                                    \
    const int aligned = C % 16 == 0;                                                       \
    uint4 tap[Q16_TAPS];                                                                   \
    if (aligned) {                                                                         \
        Q16_LOAD_WINDOW(*(__global const uint4*)(x + p))                                   \
    } else {                                                                               \
        Q16_LOAD_WINDOW(q16_load_any(x, p, nvalid))                                        \
    }

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_max(__global const qtype_t* restrict x, __global qtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD, int ZP)
{
    Q16_PROLOGUE
    Q16_WINDOW_TAPS
    /* clamped taps are taps of the same window: taken as they are */
    uint4 ev = tap[0] << 8, od = tap[0];
    _Pragma("unroll") for (int u = 1; u < Q16_TAPS; ++u) {
        ev = qp_max4(ev, tap[u] << 8);
        od = qp_max4(od, tap[u]);
    }
    q16_store(y, obase, nvalid, aligned, ((ev >> 8) & QP_LO) | (od & ~QP_LO));
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_avg(__global const qtype_t* restrict x, __global qtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD, int ZP)
{
    Q16_PROLOGUE
    Q16_WINDOW_TAPS
    int rows_in = 0, rows_pad = 0, cols_in = 0, cols_pad = 0;
    _Pragma("unroll") for (int kw = 0; kw < POOL_KW; ++kw) {
        const int iw = w0 + kw;
        cols_in += (iw >= 0 && iw < IW);
        cols_pad += (iw >= -PL && iw < IW + PR);
    }
    _Pragma("unroll") for (int kh = 0; kh < POOL_KH; ++kh) {
        const int ih = h0 + kh;
        rows_in += (ih >= 0 && ih < IH);
        rows_pad += (ih >= -PT && ih < IH + PB);
    }
    /* taps outside the input masked to 0: no border branch for a warp to diverge on */
    uint4 ev = (uint4)0, od = (uint4)0;
    _Pragma("unroll") for (int kh = 0; kh < POOL_KH; ++kh) {
        const uint rm = h0 + kh >= 0 && h0 + kh < IH ? QP_LO : 0u;
        _Pragma("unroll") for (int kw = 0; kw < POOL_KW; ++kw) {
            const uint m = rm & (w0 + kw >= 0 && w0 + kw < IW ? QP_LO : 0u);
            const uint4 w = tap[kh * POOL_KW + kw] ^ QP_FLIP;
            ev += w & m;
            od += (w >> 8) & m;
        }
    }
    const int taps_in = rows_in * cols_in;
#if QP_DIVISOR_RULE
    const uint4 out = qp_avg16(ev, od, max(COUNT_INCLUDE_PAD ? rows_pad * cols_pad : taps_in, 1), taps_in, ZP);
#else
    const int8 se = convert_int8(as_ushort8(ev)), so = convert_int8(as_ushort8(od));
    const int8 z = (int8)(taps_in * (ZP + QP_BIAS)); /* the flip's +128 a tap, then the zero point */
    const float inv = 1.0f / (float)DIVISOR;
    const uint4 out = qp_bytes16(clamp(qp_div_float(se - z, DIVISOR, inv) + ZP, QMIN, QMAX),
                                 clamp(qp_div_float(so - z, DIVISOR, inv) + ZP, QMIN, QMAX));
#endif
    q16_store(y, obase, nvalid, aligned, out);
}
#else
/* ------------------------------------------------------------------------------------
 * QVEC16=3 and 4 (QP_PIX = 2 and 4): the 16 channels of QP_PIX neighbouring output pixels of
 * one output row a work-item. Their windows share input columns (stride 2: one of three;
 * stride 1: two of three), so the work-item loads the Q16P_SPAN columns of the KH window rows
 * once, reduces every column over the rows first, then each output over its KW columns:
 * fewer loads, address computations, unpacks and index divisions per output than QVEC16=2.
 * The average (session 37) masks the taps outside the input instead of branching on the
 * border (in session 23's version a warp holding one border work-item ran both paths, and
 * count_include_pad's borders a third, unpacked division) and divides every rule divisor on
 * 16-bit lane pairs as the file's header says, the missing taps counted as zero points; the
 * divisor_override (QP_DIVISOR_RULE=0) divides as QVEC16=2.
 * ---------------------------------------------------------------------------------- */
#define Q16P_SPAN ((QP_PIX - 1) * POOL_SW + POOL_KW)
/* Q16_ALIGNED=1 (the launcher's, where C % 16 == 0): every tap one aligned 16-byte load, the
 * other path not built; else decided per call */
#if defined(Q16_ALIGNED) && Q16_ALIGNED
#define Q16_ALIGNED_TEST 1
#else
#define Q16_ALIGNED_TEST (C % 16 == 0)
#endif
#define Q16P_PROLOGUE                                                                      \
    const int CG = CEIL_DIV(C, 16);                                                        \
    const int OWB = CEIL_DIV(OW, QP_PIX);                                                  \
    const int gid = get_global_id(0);                                                      \
    if (gid >= N * OH * OWB * CG) return;                                                  \
    const int cg = gid % CG;                                                               \
    int t = gid / CG;                                                                      \
    const int ow0 = (t % OWB) * QP_PIX;                                                    \
    t /= OWB;                                                                              \
    const int oh = t % OH;                                                                 \
    const int n = t / OH;                                                                  \
    const int c0 = cg * 16;                                                                \
    const int nvalid = min(16, C - c0);                                                    \
    const int np = min(QP_PIX, OW - ow0);                                                  \
    const int h0 = oh * POOL_SH - PT;                                                      \
    const int w0 = ow0 * POOL_SW - PL;                                                     \
    const int obase = ((n * OH + oh) * OW + ow0) * C + c0;                                 \
    const int aligned = Q16_ALIGNED_TEST;                                                  \
    uint4 tap[POOL_KH][Q16P_SPAN];                                                         \
    if (aligned) {                                                                         \
        Q16P_LOAD(*(__global const uint4*)(x + p))                                         \
    } else {                                                                               \
        Q16P_LOAD(q16_load_any(x, p, nvalid))                                              \
    }

/* the KH rows x Q16P_SPAN columns, from rows and columns clamped into the input, every load
 * issued before any is used */
#define Q16P_LOAD(LOAD)                                                                    \
    _Pragma("unroll") for (int kh = 0; kh < POOL_KH; ++kh) {                               \
        const int prow = (n * IH + clamp(h0 + kh, 0, IH - 1)) * IW;                        \
        _Pragma("unroll") for (int i = 0; i < Q16P_SPAN; ++i) {                            \
            const int p = (prow + clamp(w0 + i, 0, IW - 1)) * C + c0;                      \
            tap[kh][i] = LOAD;                                                             \
        }                                                                                  \
    }

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_max(__global const qtype_t* restrict x, __global qtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD, int ZP)
{
    Q16P_PROLOGUE
    /* clamped taps are taps of the same window (each stored output's window overlaps the
     * input, and its clamped columns are its own): taken as they are; columns first */
    uint4 ev[Q16P_SPAN], od[Q16P_SPAN];
    _Pragma("unroll") for (int i = 0; i < Q16P_SPAN; ++i) {
        od[i] = tap[0][i];
        ev[i] = tap[0][i] << 8;
        _Pragma("unroll") for (int kh = 1; kh < POOL_KH; ++kh) {
            od[i] = qp_max4(od[i], tap[kh][i]);
            ev[i] = qp_max4(ev[i], tap[kh][i] << 8);
        }
    }
    _Pragma("unroll") for (int q = 0; q < QP_PIX; ++q) {
        uint4 e = ev[q * POOL_SW], o = od[q * POOL_SW];
        _Pragma("unroll") for (int kw = 1; kw < POOL_KW; ++kw) {
            e = qp_max4(e, ev[q * POOL_SW + kw]);
            o = qp_max4(o, od[q * POOL_SW + kw]);
        }
        if (q < np) q16_store(y, obase + q * C, nvalid, aligned, ((e >> 8) & QP_LO) | (o & ~QP_LO));
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void pool2d_avg(__global const qtype_t* restrict x, __global qtype_t* restrict y, __global long* restrict indices,
                int N, int C, int IH, int IW, int OH, int OW, int KH, int KW, int SH, int SW,
                int PT, int PB, int PL, int PR, int DH, int DW, int DIVISOR, int COUNT_INCLUDE_PAD, int ZP)
{
    Q16P_PROLOGUE
    /* which window rows and span columns lie inside the input: a tap outside is masked to 0
     * (the same instructions for every work-item: no border branch to diverge on) */
    int rows_in = 0, rows_pad = 0;
    uint rmask[POOL_KH], cmask[Q16P_SPAN];
    _Pragma("unroll") for (int kh = 0; kh < POOL_KH; ++kh) {
        const int ih = h0 + kh;
        const int in = ih >= 0 && ih < IH;
        rmask[kh] = in ? QP_LO : 0u;
        rows_in += in;
        rows_pad += (ih >= -PT && ih < IH + PB);
    }
    _Pragma("unroll") for (int i = 0; i < Q16P_SPAN; ++i) cmask[i] = (w0 + i >= 0 && w0 + i < IW) ? QP_LO : 0u;
    /* every column summed over the window rows, the flipped bytes as clean 16-bit lanes */
    uint4 se[Q16P_SPAN], so[Q16P_SPAN];
    _Pragma("unroll") for (int i = 0; i < Q16P_SPAN; ++i) {
        se[i] = (uint4)0;
        so[i] = (uint4)0;
        _Pragma("unroll") for (int kh = 0; kh < POOL_KH; ++kh) {
            const uint m = rmask[kh] & cmask[i];
            const uint4 w = tap[kh][i] ^ QP_FLIP;
            se[i] += w & m;
            so[i] += (w >> 8) & m;
        }
    }
#if !QP_DIVISOR_RULE
    const float inv = 1.0f / (float)DIVISOR;
#endif
    _Pragma("unroll") for (int q = 0; q < QP_PIX; ++q) {
        int cols_in = 0, cols_pad = 0;
        _Pragma("unroll") for (int kw = 0; kw < POOL_KW; ++kw) {
            const int iw = w0 + q * POOL_SW + kw;
            cols_in += (iw >= 0 && iw < IW);
            cols_pad += (iw >= -PL && iw < IW + PR);
        }
        uint4 ev = se[q * POOL_SW], od = so[q * POOL_SW];
        _Pragma("unroll") for (int kw = 1; kw < POOL_KW; ++kw) {
            ev += se[q * POOL_SW + kw];
            od += so[q * POOL_SW + kw];
        }
        const int taps_in = rows_in * cols_in;
        uint4 out;
#if QP_DIVISOR_RULE
        out = qp_avg16(ev, od, max(COUNT_INCLUDE_PAD ? rows_pad * cols_pad : taps_in, 1), taps_in, ZP);
#else
        /* the divisor_override: QDIV_ROUND_EVEN's float path, saturated */
        const int8 se8 = convert_int8(as_ushort8(ev)), so8 = convert_int8(as_ushort8(od));
        const int8 z = (int8)(taps_in * (ZP + QP_BIAS)); /* the flip's +128 a tap, then the zero point */
        out = qp_bytes16(clamp(qp_div_float(se8 - z, DIVISOR, inv) + ZP, QMIN, QMAX),
                         clamp(qp_div_float(so8 - z, DIVISOR, inv) + ZP, QMIN, QMAX));
#endif
        if (q < np) q16_store(y, obase + q * C, nvalid, aligned, out);
    }
}
#endif
#endif
