// int8/uint8 2-D max and average pooling (ONNX MaxPool on integers, QLinearAveragePool
// with equal input and output scales), the CUDA twin of kernels_cl/qpool2d.cl and
// kernels_c/qpool2d.c.
//
// Macros: DTYPE_UINT8 [0] (1: uint8, else int8), LAYOUT_NHWC (hal_prelude.cuh),
// QPOOL_THREADS [256] (threads per block; the launcher launches with that many).
//
// Semantics, every entry point (pool2d.cu's contract signature plus the zero point ZP last):
//   max: the largest raw integer of the window; the first one on ties (a later tap is taken
//       only when strictly greater), so its per-plane index ih * IW + iw is the first
//       maximum's, as for floats; indices may be NULL. Padding is never taken.
//   avg: saturate(rint(sum(q - ZP) / divisor) + ZP) over the taps inside the input (a padded
//       tap is q == ZP, adding 0); the divisor is DIVISOR if nonzero, else the taps inside the
//       padded extent with COUNT_INCLUDE_PAD, else the taps inside the input. The sum is an
//       exact int and rint rounds ties to even (ONNX's rounding).
//
// Entry points:
//   pool2d_max, pool2d_avg: any window, indices; one thread per output, a grid-stride loop.
//       Windows of up to QPOOL_TAPS [9] taps load every tap at once from addresses clamped into
//       the input; larger windows loop. The division is in double (|sum| < 2^31, divisor < 2^31:
//       the correctly rounded quotient keeps every tie exact). Slow: one output per thread
//       costs a few hundred instructions of index arithmetic (session 11: 8 % of copy).
//   pool2d_{max,avg}_rows_k{K}s{S} (NCHW, a K x K window, stride S, no dilation, IW % 4 == 0,
//       x 4-byte aligned, no indices; K x S in 3x2, 2x2, 3x1): a thread owns 8 consecutive
//       outputs of a row. It loads each window row as aligned 32-bit words, shifts them into a
//       byte stream starting at its first column, masks columns and rows outside the input
//       with the fill byte, and reduces two outputs per 16-bit lane word (qlanes below). Word
//       stores where OW % 4 == 0 and y is aligned, else bytes.
//   pool2d_{max,avg}_rows_b_k{K}s{S}: the same for any width and alignment, the stream built
//       from one-byte loads (session 12).
//   pool2d_{max,avg}_vec{V}[_k{K}] (NHWC, KH * KW <= 9, C % V == 0, x and y V-byte aligned,
//       no indices; V = 4 or 16; _k3, _k2: a square 3x3 or 2x2 window, no dilation): a thread owns V
//       channels of one output pixel and loads its taps as V-byte vectors, all before any is
//       used, reducing as above.
// The fast paths' lanes: each byte is made unsigned (int8: +128, the sign bit flipped) and
// widened to a 16-bit lane, so one instruction takes two maxima (VIMNMX.U16x2) or two sums; a
// tap outside the input is the fill byte (max: the dtype's minimum, avg: the zero point), the
// lanes add at most 9 x 255, and the bias (ZP, +128 for int8) of every window tap is
// subtracted at the end; the quotient is rounded exactly by qdiv_round.
// Fused ReLU does not apply (hal's quantized ops take none). Not tuned: no parameters.
//
// Outside the pool2d tuning family (docs/tuning.md): it takes none of pool2d.cu's
// parameters, so editing it does not stale the measured float pooling entries.
#include "hal_prelude.cuh"

#ifndef DTYPE_UINT8
#define DTYPE_UINT8 0
#endif
#ifndef QPOOL_THREADS
#define QPOOL_THREADS 256
#endif
#ifndef QPOOL_TAPS
#define QPOOL_TAPS 9
#endif
#if DTYPE_UINT8
typedef unsigned char q_t;
#define Q_MIN 0
#define Q_MAX 255
#else
typedef signed char q_t;
#define Q_MIN (-128)
#define Q_MAX 127
#endif

// the output element i's (n, c, oh, ow), and where its plane starts with the input's row and
// column strides (elements). I is the index type: unsigned int where the output has fewer
// than 2^31 elements (the launchers' case; a 64-bit division or remainder costs tens of
// instructions, and this kernel does four per output), long long otherwise.
struct QPos {
    int n, c, oh, ow;
    long long base, rs, cs;
};
template <typename I>
__device__ __forceinline__ QPos qpos(I i, int C, int IH, int IW, int OH, int OW) {
    QPos q;
#if LAYOUT_NHWC
    q.c = (int)(i % (I)C);
    i /= (I)C;
    q.ow = (int)(i % (I)OW);
    i /= (I)OW;
    q.oh = (int)(i % (I)OH);
    q.n = (int)(i / (I)OH);
    q.base = (long long)q.n * IH * IW * C + q.c;
    q.rs = (long long)IW * C;
    q.cs = C;
#else
    q.ow = (int)(i % (I)OW);
    i /= (I)OW;
    q.oh = (int)(i % (I)OH);
    i /= (I)OH;
    q.c = (int)(i % (I)C);
    q.n = (int)(i / (I)C);
    q.base = ((long long)q.n * C + q.c) * IH * IW;
    q.rs = IW;
    q.cs = 1;
#endif
    return q;
}

// The window's first QPOOL_TAPS taps in row-major order, each loaded from an address clamped
// into the input (all loads issued before any is used); v[t] = the tap, or fill where it lies
// outside the input or past the window (t >= KH * KW); pix[t] = its per-plane index.
__device__ __forceinline__ void qpool_taps(const q_t* __restrict__ x, const QPos& q, int h0, int w0, int KH, int KW,
                                           int DH, int DW, int IH, int IW, int fill, int (&v)[QPOOL_TAPS],
                                           int (&pix)[QPOOL_TAPS]) {
    int kh = 0, kw = 0;
#pragma unroll
    for (int t = 0; t < QPOOL_TAPS; ++t) {
        const int ih = h0 + kh * DH, iw = w0 + kw * DW;
        const bool ok = kh < KH && ih >= 0 && ih < IH && iw >= 0 && iw < IW;
        const int ihc = min(max(ih, 0), IH - 1), iwc = min(max(iw, 0), IW - 1);
        const int raw = x[q.base + ihc * q.rs + iwc * q.cs];
        v[t] = ok ? raw : fill;
        pix[t] = ih * IW + iw;
        if (++kw == KW) {
            kw = 0;
            ++kh;
        }
    }
}

// taps in [lo, hi) of a window of K taps D apart, starting at s0
__device__ __forceinline__ int qtaps_in(int s0, int K, int D, int lo, int hi) {
    int n = 0;
    for (int k = 0; k < K; ++k) n += s0 + k * D >= lo && s0 + k * D < hi;
    return n;
}

// the average's divisor: DIVISOR if nonzero, else the window's taps inside the padded extent
// (COUNT_INCLUDE_PAD) or inside the input
__device__ __forceinline__ int qwindow_count(int h0, int w0, int KH, int KW, int DH, int DW, int IH, int IW, int PT,
                                             int PB, int PL, int PR, int DIVISOR, int COUNT_INCLUDE_PAD) {
    if (DIVISOR > 0) return DIVISOR;
    const bool pad = COUNT_INCLUDE_PAD;
    return qtaps_in(h0, KH, DH, pad ? -PT : 0, pad ? IH + PB : IH) * qtaps_in(w0, KW, DW, pad ? -PL : 0, pad ? IW + PR : IW);
}

// f(v, ih, iw) for each tap of the window inside the input, row-major (windows over
// QPOOL_TAPS taps: a branch per row and per tap)
template <typename F>
__device__ __forceinline__ void qeach_tap(const q_t* __restrict__ x, const QPos& q, int h0, int w0, int KH, int KW,
                                          int DH, int DW, int IH, int IW, F f) {
    for (int kh = 0; kh < KH; ++kh) {
        const int ih = h0 + kh * DH;
        if (ih < 0 || ih >= IH) continue;
        for (int kw = 0; kw < KW; ++kw) {
            const int iw = w0 + kw * DW;
            if (iw >= 0 && iw < IW) f((int)x[q.base + ih * q.rs + iw * q.cs], ih, iw);
        }
    }
}

#define QPOOL_ARGS                                                                                        \
    const q_t *__restrict__ x, q_t *__restrict__ y, long long *__restrict__ indices, int N, int C, int IH, \
        int IW, int OH, int OW, int KH, int KW, int SH, int SW, int PT, int PB, int PL, int PR, int DH, int DW, \
        int DIVISOR, int COUNT_INCLUDE_PAD, int ZP

#define QPOOL_PASS \
    x, y, indices, N, C, IH, IW, OH, OW, KH, KW, SH, SW, PT, PB, PL, PR, DH, DW, DIVISOR, COUNT_INCLUDE_PAD, ZP

template <typename I>
__device__ __forceinline__ void qpool_max(QPOOL_ARGS) {
    const I total = (I)N * C * OH * OW;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        const QPos q = qpos<I>(i, C, IH, IW, OH, OW);
        const int h0 = q.oh * SH - PT, w0 = q.ow * SW - PL;
        int best = Q_MIN - 1;  // below every value: the first valid tap is taken
        long long bi = 0;
        if (KH * KW <= QPOOL_TAPS) {
            int v[QPOOL_TAPS], pix[QPOOL_TAPS];
            qpool_taps(x, q, h0, w0, KH, KW, DH, DW, IH, IW, Q_MIN - 1, v, pix);
#pragma unroll
            for (int t = 0; t < QPOOL_TAPS; ++t) {
                if (v[t] > best) {
                    best = v[t];
                    bi = pix[t];
                }
            }
        } else {
            qeach_tap(x, q, h0, w0, KH, KW, DH, DW, IH, IW, [&](int v, int ih, int iw) {
                if (v > best) {
                    best = v;
                    bi = (long long)ih * IW + iw;
                }
            });
        }
        y[i] = (q_t)best;
        if (indices) indices[i] = bi;
    }
}

extern "C" __global__ void __launch_bounds__(QPOOL_THREADS) pool2d_max(QPOOL_ARGS) {
    HAL_PDL_ENTRY();
    if ((long long)N * C * OH * OW < (1LL << 31))
        qpool_max<unsigned int>(QPOOL_PASS);
    else
        qpool_max<long long>(QPOOL_PASS);
}

template <typename I>
__device__ __forceinline__ void qpool_avg(QPOOL_ARGS) {
    const I total = (I)N * C * OH * OW;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        const QPos q = qpos<I>(i, C, IH, IW, OH, OW);
        const int h0 = q.oh * SH - PT, w0 = q.ow * SW - PL;
        int sum = 0;
        if (KH * KW <= QPOOL_TAPS) {
            int v[QPOOL_TAPS], pix[QPOOL_TAPS];
            qpool_taps(x, q, h0, w0, KH, KW, DH, DW, IH, IW, ZP, v, pix);  // a tap outside adds 0
#pragma unroll
            for (int t = 0; t < QPOOL_TAPS; ++t) sum += v[t] - ZP;
        } else {
            qeach_tap(x, q, h0, w0, KH, KW, DH, DW, IH, IW, [&](int v, int, int) { sum += v - ZP; });
        }
        const int count = qwindow_count(h0, w0, KH, KW, DH, DW, IH, IW, PT, PB, PL, PR, DIVISOR, COUNT_INCLUDE_PAD);
        const double r = rint((double)sum / (double)(count > 0 ? count : 1)) + ZP;
        y[i] = (q_t)(r < Q_MIN ? Q_MIN : (r > Q_MAX ? Q_MAX : r));
    }
}

extern "C" __global__ void __launch_bounds__(QPOOL_THREADS) pool2d_avg(QPOOL_ARGS) {
    HAL_PDL_ENTRY();
    if ((long long)N * C * OH * OW < (1LL << 31))
        qpool_avg<unsigned int>(QPOOL_PASS);
    else
        qpool_avg<long long>(QPOOL_PASS);
}

// ---------------------------------------------------------------------------------
// fast paths: four outputs per 32-bit word
// ---------------------------------------------------------------------------------
typedef unsigned int qword_t;

#if DTYPE_UINT8
#define Q_BIAS 0
#define Q_FLIP 0u
#else
#define Q_BIAS 128
#define Q_FLIP 0x80808080u
#endif
#ifndef QROW_OUT
#define QROW_OUT 8
#endif
// QPOOL_MINB [0]: the fast kernels' blocks per multiprocessor asked of the compiler
// (__launch_bounds__' second argument, which caps registers); 0: none asked
#ifndef QPOOL_MINB
#define QPOOL_MINB 0
#endif
#if QPOOL_MINB > 0
#define QPOOL_FAST_BOUNDS __launch_bounds__(QPOOL_THREADS, QPOOL_MINB)
#else
#define QPOOL_FAST_BOUNDS __launch_bounds__(QPOOL_THREADS)
#endif

// four copies of the low byte of b
__device__ __forceinline__ qword_t qsplat(int b) { return (qword_t)(b & 0xFF) * 0x01010101u; }

// The even (0, 2) and odd (1, 3) bytes of w as 16-bit lanes, made unsigned first (int8: the
// sign bit flipped, +128, which keeps their order), so that one VIMNMX.U16x2 (__vmaxu2) takes
// two maxima and a 32-bit add two sums; __vmaxs4 / __vmaxu4 cost six instructions each.
__device__ __forceinline__ void qlanes(qword_t w, qword_t& even, qword_t& odd) {
    w ^= Q_FLIP;
    even = __byte_perm(w, 0u, 0x4240);
    odd = __byte_perm(w, 0u, 0x4341);
}

// a lane word into the running max or sum of its two outputs
template <bool IS_MAX>
__device__ __forceinline__ qword_t qlane_op(qword_t acc, qword_t t) {
    return IS_MAX ? __vmaxu2(acc, t) : acc + t;
}

// the lane word of stream bytes b and b + 2 (ev/od: the stream's even and odd lanes)
template <int NA>
__device__ __forceinline__ qword_t qpair(const qword_t (&ev)[NA], const qword_t (&od)[NA], int b) {
    const int j = b >> 2, j1 = min(j + 1, NA - 1);
    const qword_t lo = (b & 1) ? od[j] : ev[j];
    return ((b >> 1) & 1) ? __funnelshift_r(lo, (b & 1) ? od[j1] : ev[j1], 16) : lo;
}

// rint(sum / count), ties to even, exactly, for |sum| < 2^21: t = sum * inv (inv a few ulp
// off 1 / count) lies within |x| 2^-21 of x = sum / count, while a quotient that is not a
// tie lies at least 1 / (2 count) from every k + 1/2, farther than that error; so rint(t)
// is right but for ties, which the integer test 2 sum == (2 floor(t) + 1) count finds
// exactly and rounds to the even neighbour. (A division per output, IEEE, and a residual
// correction after rint were both slower, session 12.)
__device__ __forceinline__ int qdiv_round(int sum, int count, float inv) {
    const float t = (float)sum * inv;
    const int f = (int)floorf(t), q = __float2int_rn(t);
    return 2 * sum == (2 * f + 1) * count ? f + (f & 1) : q;
}

// an approximate 1 / v (MUFU.RCP alone; __fdividef adds a denormal rescale qdiv_round needs not)
__device__ __forceinline__ float qrcp(float v) {
#ifdef __CUDA_ARCH__
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
#else
    return __fdividef(1.0f, v);  // the host emulation of the tests
#endif
}

// a window's divisor (count > 0; a non-positive count cannot occur and divides by 1)
struct QDivisor {
    int count;
    float inv;
};
__device__ __forceinline__ QDivisor qdivisor(int count) {
    count = count > 0 ? count : 1;
    return QDivisor{count, qrcp((float)count)};
}

// saturate(rint(sum / divisor) + ZP) as a byte, sum = a 16-bit lane minus the window's bias
__device__ __forceinline__ qword_t qavg(qword_t lanes, int lane, int bias, QDivisor d, int ZP) {
    const int v = qdiv_round((int)((lanes >> (16 * lane)) & 0xFFFFu) - bias, d.count, d.inv) + ZP;
    return (qword_t)min(max(v, Q_MIN), Q_MAX) & 0xFFu;
}

// the bytes k of a stream word whose positions satisfy first <= k < end (the columns inside
// the input): two clamped funnel shifts, no branch
__device__ __forceinline__ qword_t qbyte_mask(int first, int end) {
    const qword_t below_end = __funnelshift_lc(~0u, 0u, 8 * max(end, 0));  // bytes k < end
    const qword_t below_first = __funnelshift_lc(~0u, 0u, 8 * max(first, 0));
    return below_end & ~below_first;
}


// NCHW rows: a thread's QROW_OUT (8) consecutive outputs of one output row, from K input
// rows of NW 32-bit words each (IW % 4 == 0). A word index outside the row is clamped
// unsigned (a negative one to the row's last word): every byte of such a word lies outside
// the input and is masked, so any word in the row serves. Lane words pair two outputs whose
// taps lie 2 bytes apart in the stream: outputs o, o + 1 for stride 2 (pair p: 2p, 2p + 1),
// o, o + 2 for stride 1 (pair p: 4(p / 2) + p % 2, + 2). Session 12, H200, 3x3/2 int8 max on
// 64x64x112x112: a 16-byte vector and two halo words per row instead of 5 words was slower
// (0.043 against 0.036 ms, benchmarks/quant_cuda.py) and was dropped.
// WORDS 0 (the rows_b kernels: any width, any alignment): the stream is assembled from NB
// one-byte loads per row, each from a column clamped into the row.
template <int K, int S, bool WORDS, bool IS_MAX, typename I>
__device__ __forceinline__ void qrows(QPOOL_ARGS) {
    constexpr int M = QROW_OUT;                   // outputs per thread, a multiple of 4
    constexpr int NB = (M - 1) * S + K;           // input columns they read per row
    constexpr int NW = WORDS ? (NB + 6) / 4 : 1;  // words covering NB bytes at any alignment
    constexpr int NA = (NB + 3) / 4;              // words of the shifted stream
    constexpr int NP = M / 2;                     // lane words (output pairs)
    const int OWG = (OW + M - 1) / M;
    const unsigned IWW = (unsigned)IW >> 2;
    const I total = (I)N * C * OH * OWG;
    const qword_t fill = qsplat(IS_MAX ? Q_MIN : ZP);
    const bool word_store = (OW & 3) == 0 && ((size_t)y & 3) == 0;
    const qword_t* xw = reinterpret_cast<const qword_t*>(x);
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        const int g = (int)(i % (I)OWG);
        const I r = i / (I)OWG;  // the output row: (n * C + c) * OH + oh
        const int oh = (int)(r % (I)OH);
        const I plane = r / (I)OH;
        const int ow0 = g * M, c0 = ow0 * S - PL, h0 = oh * S - PT;
        const int wb = c0 >> 2, shift = 8 * (c0 & 3);  // c0 may be negative: >> floors
        // Rows: a max clamps a row outside the input to the nearest one, which lies in the same
        // window (no dilation, and every window overlaps the input), so it needs no mask; an
        // average reads any row and replaces it by the fill.
        qword_t raw[K][NW];
        unsigned char bytes[K][WORDS ? 1 : NB];
#pragma unroll
        for (int kh = 0; kh < K; ++kh) {
            const unsigned ih = IS_MAX ? (unsigned)min(max(h0 + kh, 0), IH - 1) : min((unsigned)(h0 + kh), (unsigned)IH - 1u);
            if constexpr (WORDS) {
                const qword_t* row = xw + ((size_t)plane * IH + ih) * IWW;
#pragma unroll
                for (int j = 0; j < NW; ++j) raw[kh][j] = __ldg(row + min((unsigned)(wb + j), IWW - 1u));
            } else {
                const unsigned char* row = reinterpret_cast<const unsigned char*>(x) + ((size_t)plane * IH + ih) * IW;
#pragma unroll
                for (int b = 0; b < NB; ++b) bytes[kh][b] = __ldg(row + min((unsigned)(c0 + b), (unsigned)IW - 1u));
            }
        }
        // the stream bytes inside the input's columns (all of them but at the row's two ends)
        qword_t inside[NA];
#pragma unroll
        for (int j = 0; j < NA; ++j) inside[j] = qbyte_mask(-c0 - 4 * j, IW - c0 - 4 * j);
        // the window rows reduced first, per stream word, then the columns per output pair
        qword_t ev[NA], od[NA];  // lanes start at 0: below every unsigned byte, and an empty sum
#pragma unroll
        for (int j = 0; j < NA; ++j) ev[j] = 0, od[j] = 0;
#pragma unroll
        for (int kh = 0; kh < K; ++kh) {
            const bool row_in = IS_MAX || (h0 + kh >= 0 && h0 + kh < IH);
#pragma unroll
            for (int j = 0; j < NA; ++j) {
                const qword_t keep = row_in ? inside[j] : 0u;
                qword_t a = 0;
                if constexpr (WORDS) {
                    a = __funnelshift_r(raw[kh][j], j + 1 < NW ? raw[kh][j + 1] : 0u, shift);
                } else {
#pragma unroll
                    for (int k = 0; k < 4; ++k)
                        if (4 * j + k < NB) a |= (qword_t)bytes[kh][4 * j + k] << (8 * k);
                }
                qword_t e, o;
                qlanes((a & keep) | (fill & ~keep), e, o);
                ev[j] = qlane_op<IS_MAX>(ev[j], e);
                od[j] = qlane_op<IS_MAX>(od[j], o);
            }
        }
        qword_t acc[NP];
#pragma unroll
        for (int p = 0; p < NP; ++p) {
            const int o1 = S == 2 ? 2 * p : 4 * (p >> 1) + (p & 1);
            acc[p] = qpair(ev, od, o1 * S);
#pragma unroll
            for (int kw = 1; kw < K; ++kw) acc[p] = qlane_op<IS_MAX>(acc[p], qpair(ev, od, o1 * S + kw));
        }
        qword_t out[M / 4];
        if (IS_MAX) {
#pragma unroll
            for (int m = 0; m < M / 4; ++m) out[m] = __byte_perm(acc[2 * m], acc[2 * m + 1], S == 2 ? 0x6420 : 0x6240) ^ Q_FLIP;
        } else {
            const bool pad = COUNT_INCLUDE_PAD;
            const int rows = qtaps_in(h0, K, 1, pad ? -PT : 0, pad ? IH + PB : IH);
            const int lo = pad ? -PL : 0, hi = pad ? IW + PR : IW;
            const int bias = K * K * (ZP + Q_BIAS);
#pragma unroll
            for (int m = 0; m < M / 4; ++m) {
                out[m] = 0;
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const int o = 4 * m + k, p = S == 2 ? o >> 1 : 2 * (o >> 2) + (o & 1), lane = S == 2 ? o & 1 : (o >> 1) & 1;
                    // the window's columns inside [lo, hi), branch-free (every warp has edge threads)
                    const int w0 = (ow0 + o) * S - PL;
                    const QDivisor d = qdivisor(DIVISOR > 0 ? DIVISOR : rows * max(0, min(w0 + K, hi) - max(w0, lo)));
                    out[m] |= qavg(acc[p], lane, bias, d, ZP) << (8 * k);
                }
            }
        }
        q_t* yp = y + (size_t)r * OW + ow0;
        if (word_store && ow0 + M <= OW) {
#pragma unroll
            for (int m = 0; m < M / 4; ++m) reinterpret_cast<qword_t*>(yp)[m] = out[m];
        } else {
#pragma unroll
            for (int o = 0; o < M; ++o)
                if (ow0 + o < OW) yp[o] = (q_t)(out[o >> 2] >> (8 * (o & 3)));
        }
    }
}

#define QROWS_KERNEL(KIND, IS_MAX, NAME, WORDS, K, S)                                                \
    extern "C" __global__ void QPOOL_FAST_BOUNDS pool2d_##KIND##_##NAME##_k##K##s##S(QPOOL_ARGS) { HAL_PDL_ENTRY(); \
        if ((long long)N * C * OH * OW < (1LL << 31))                                                    \
            qrows<K, S, WORDS, IS_MAX, unsigned int>(QPOOL_PASS);                                        \
        else                                                                                             \
            qrows<K, S, WORDS, IS_MAX, long long>(QPOOL_PASS);                                           \
    }
#define QROWS_KERNELS(K, S)                          \
    QROWS_KERNEL(max, true, rows, true, K, S)        \
    QROWS_KERNEL(avg, false, rows, true, K, S)       \
    QROWS_KERNEL(max, true, rows_b, false, K, S)     \
    QROWS_KERNEL(avg, false, rows_b, false, K, S)
#if !LAYOUT_NHWC
QROWS_KERNELS(2, 2)
QROWS_KERNELS(3, 2)
QROWS_KERNELS(3, 1)
#endif

// NHWC: V channels (bytes) of one output pixel per thread, every tap a V-byte vector
template <int V>
struct QVec {
    qword_t w[V / 4];
};
template <int V>
__device__ __forceinline__ QVec<V> qload_vec(const q_t* p) {
    QVec<V> v;
    if constexpr (V == 16) {
        const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
        v.w[0] = u.x, v.w[1] = u.y, v.w[2] = u.z, v.w[3] = u.w;
    } else {
        v.w[0] = __ldg(reinterpret_cast<const qword_t*>(p));
    }
    return v;
}
template <int V>
__device__ __forceinline__ void qstore_vec(q_t* p, const qword_t (&w)[V / 4]) {
    if constexpr (V == 16)
        *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
    else
        *reinterpret_cast<qword_t*>(p) = w[0];
}

// K > 0: a K x K window without dilation (its taps unrolled without a branch each); K == 0:
// any KH x KW window of at most QPOOL_TAPS taps.
template <int V, int K, bool IS_MAX, typename I>
__device__ __forceinline__ void qvec(QPOOL_ARGS) {
    constexpr int NV = V / 4;
    constexpr int T = K > 0 ? K * K : QPOOL_TAPS;  // taps loaded
    const int kh_n = K > 0 ? K : KH, kw_n = K > 0 ? K : KW, KHW = kh_n * kw_n;
    const int CG = C / V;
    const I total = (I)N * OH * OW * CG;
    const qword_t fill = qsplat(IS_MAX ? Q_MIN : ZP);
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        const int cg = (int)(i % (I)CG);
        I pix = i / (I)CG;  // (n * OH + oh) * OW + ow
        const int ow = (int)(pix % (I)OW);
        const I t = pix / (I)OW;
        const int oh = (int)(t % (I)OH);
        const I n = t / (I)OH;
        const int h0 = oh * SH - PT, w0 = ow * SW - PL;
        const q_t* xn = x + (size_t)n * IH * IW * C + cg * V;
        // K > 0 (no dilation): a max clamps a tap outside the input to the nearest row and
        // column, a tap of the same window, so it needs no select
        constexpr bool CLAMP_ONLY = K > 0 && IS_MAX;
        const int dh = K > 0 ? 1 : DH, dw = K > 0 ? 1 : DW;
        QVec<V> tap[T];
        bool ok[T];
#pragma unroll
        for (int u = 0; u < T; ++u) {
            const int kh = K > 0 ? u / K : u / kw_n, kw = K > 0 ? u % K : u % kw_n;
            const int ih = h0 + kh * dh, iw = w0 + kw * dw;
            ok[u] = CLAMP_ONLY || ((K > 0 || u < KHW) && ih >= 0 && ih < IH && iw >= 0 && iw < IW);
            const unsigned ihc = CLAMP_ONLY ? (unsigned)min(max(ih, 0), IH - 1) : min((unsigned)ih, (unsigned)IH - 1u);
            const unsigned iwc = CLAMP_ONLY ? (unsigned)min(max(iw, 0), IW - 1) : min((unsigned)iw, (unsigned)IW - 1u);
            tap[u] = qload_vec<V>(xn + (size_t)ihc * IW * C + iwc * C);
        }
        qword_t ev[NV], od[NV];  // channels 0, 2 and 1, 3 of each word, as lanes starting at 0
#pragma unroll
        for (int j = 0; j < NV; ++j) ev[j] = 0, od[j] = 0;
#pragma unroll
        for (int u = 0; u < T; ++u)
            if (K > 0 || u < KHW)
#pragma unroll
                for (int j = 0; j < NV; ++j) {
                    qword_t e, o;
                    qlanes(ok[u] ? tap[u].w[j] : fill, e, o);
                    ev[j] = qlane_op<IS_MAX>(ev[j], e);
                    od[j] = qlane_op<IS_MAX>(od[j], o);
                }
        qword_t out[NV];
        if (IS_MAX) {
#pragma unroll
            for (int j = 0; j < NV; ++j) out[j] = __byte_perm(ev[j], od[j], 0x6240) ^ Q_FLIP;
        } else {
            const QDivisor d =
                qdivisor(qwindow_count(h0, w0, kh_n, kw_n, dh, dw, IH, IW, PT, PB, PL, PR, DIVISOR, COUNT_INCLUDE_PAD));
            const int bias = KHW * (ZP + Q_BIAS);
#pragma unroll
            for (int j = 0; j < NV; ++j) {
                out[j] = 0;
#pragma unroll
                for (int k = 0; k < 4; ++k) out[j] |= qavg((k & 1) ? od[j] : ev[j], k >> 1, bias, d, ZP) << (8 * k);
            }
        }
        qstore_vec<V>(y + (size_t)pix * C + cg * V, out);
    }
}

#define QVEC_KERNEL(KIND, IS_MAX, V, K, NAME)                                                      \
    extern "C" __global__ void QPOOL_FAST_BOUNDS pool2d_##KIND##_vec##V##NAME(QPOOL_ARGS) { HAL_PDL_ENTRY();     \
        if ((long long)N * C * OH * OW < (1LL << 31))                                                    \
            qvec<V, K, IS_MAX, unsigned int>(QPOOL_PASS);                                                \
        else                                                                                             \
            qvec<V, K, IS_MAX, long long>(QPOOL_PASS);                                                   \
    }
#define QVEC_KERNELS(V)                      \
    QVEC_KERNEL(max, true, V, 0, )           \
    QVEC_KERNEL(avg, false, V, 0, )          \
    QVEC_KERNEL(max, true, V, 2, _k2)        \
    QVEC_KERNEL(avg, false, V, 2, _k2)       \
    QVEC_KERNEL(max, true, V, 3, _k3)        \
    QVEC_KERNEL(avg, false, V, 3, _k3)
#if LAYOUT_NHWC
QVEC_KERNELS(4)
QVEC_KERNELS(16)
#endif
