// 2-D convolution (cross-correlation, groups, dilation, asymmetric padding; fp32 accumulate).
//
// Macros: DTYPE_HALF, DTYPE_BF16, LAYOUT_NHWC, CONV_THREADS [256] (threads per block of conv2d and
// the depthwise tiles), CONV_OCC [0] (their occupancy target), CONV_SIMT_CI [8] (input channels per pipeline stage of the
// float 3x3 kernel), DW_PREFETCH [1] (NHWC depthwise register blocks: next row's loads first).
//
// Entry points:
//   conv2d (contract signature)            one thread per output, any spec
//   conv2d_dw_tile_{g,k3s1}(x, w, bias, y, WinParams)
//       depthwise (groups == C_in == C_out) shared-memory tiles (hal_window.cuh)
//   conv2d_k3_simt(x, w, bias, y, N, CI, IH, IW, CO, OH, OW, PT, PL, tiles_h, tiles_w, co_tiles)
//       dense 3x3, stride 1, dilation 1, groups 1, CUDA cores: implicit GEMM, block tile
//       8 x 32 output pixels x 64 output channels, 8 x 8 outputs per thread, input and
//       weights double-buffered in shared memory (cp.async on sm_80+)
//   conv2d_k3_tc(x, w, bias, y, N, CI, IH, IW, CO, OH, OW, KH, KW, PT, PL, tiles_h, tiles_w)
//       float16 (and bfloat16 on sm_80+: mma .bf16), dense KH,KW <= 3, stride 1, dilation 1,
//       groups 1, C_in <= 64, tensor cores (mma.sync m16n8k16, m16n8k8 on sm_75): persistent blocks keep all weights of
//       64 output channels in shared memory and stream 4 x 32 pixel tiles (ldmatrix
//       reads the 3x3 shifted views of one input tile, XOR-swizzled: no bank conflicts)
//   conv2d_k3_tc_pipe(x, w, bias, y, N, CI, IH, IW, CO, OH, OW, PT, PL, tiles_h, tiles_w)
//       float16 (and bfloat16, sm_80+) dense 3x3, C_in <= 64, pipelined (CONV_TC=2; see there)
//   conv2d_tc_wprep(w, wp, CI, CO, taps, nchunk, total) + conv2d_k{3,1}_tc_wide(x, wp, bias, y, N,
//       CI, IH, IW, CO, OH, OW, PT, PL, tiles_h, tiles_w, nchunk): float16 NHWC dense 3x3 / 1x1,
//       stride 1, any C_in % 8 == 0, weights streamed 32 channels at a time (CONV_TC=3; see there)
//   conv2d_k1_gemm(x, w, bias, y, N, CI, IH, IW, CO, OH, OW, SH, SW, PT, PL): float16 NHWC 1x1, any
//       stride and padding, C_in % 8 == 0, as one GEMM on tensor cores (CONV_K1_GEMM, K1G_STAGES [3],
//       K1G_BN [128]; see there); conv2d_k1_gemm_persist(_cs), same arguments: its persistent variants
//       (K1G_PERSIST, a launch parameter); conv2d_k1_gemm_nchw(_persist(_cs))(x, w, bias, y, N, CI, HW, CO):
//       the NCHW twin without transposes (CONV_K1_NCHW, K1N_PERSIST; see there)
//   conv2d_k1_simt(x, w, bias, y, N, CI, IH, IW, CO, OH, OW, SH, SW, PT, PL): float32 1x1 (NCHW and NHWC), any
//       stride, padding, channel counts and alignment, as one SGEMM on CUDA cores (CONV_K1_SIMT, K1S_BN [128],
//       K1S_BK [8]; see there)
//   conv2d_im2col_simt(x, w, bias, y, N, CI, IH, IW, CO, OH, OW, KH, KW, SH, SW, DH, DW, PT, PL): float32
//       dense convs of any window, stride, dilation and padding as an implicit GEMM on CUDA cores, the same
//       tiles (CONV_IM2COL in float32; see there)
//   conv2d_dw_rows{2,4}_k3s1, conv2d_dw_cols{2,4,8}_k3s1, conv2d_dw_cols{2,4}r{4,8}_k3s1
//       (x, w, bias, y, DwRegParams) depthwise 3x3 stride 1 from registers (see there)
//   conv2d_dw_pipe{4,8,16}_k3s1(x, w, bias, y, N, C, IH, IW, OH, OW, PT, PL, tiles_h, tiles_w)
//       NHWC depthwise 3x3 stride 1, C % (16 / sizeof(act_t)) == 0: persistent blocks stream
//       tiles through two shared buffers with cp.async (DW_PIPE; see there)
//   conv2d_grp_{k3s1,g}(x, w, bias, y, GrpParams) register-tiled direct conv on CUDA cores for
//       the specs the kernels above do not take: grouped, strided, dilated, other windows (see there)
//   conv2d_grp_tc{8,16}(x, w, bias, y, GrpTcParams) float16 grouped convs (stride 1, KH, KW <= 3,
//       <= 16 channels a group) on tensor cores (GRP_TC; see there)
//   conv2d_dw_tc_k3s1, conv2d_dw_tc_persist_k3s1(x, w, bias, y, DwTcParams) float16 NCHW depthwise
//       3x3 stride 1, IW % 8 == 0, PL <= 1, on tensor cores: each row's taps as a banded matrix
//       (DW_TC; see there)
//   conv2d_im2col_tc(x, w, bias, y, Im2colParams) float16 dense convs with C_in KH KW <= 256 (stems), any
//       stride, dilation and padding, as an implicit GEMM on tensor cores (CONV_IM2COL; see there)
#include "hal_window.cuh"

#ifndef CONV_THREADS
#define CONV_THREADS 256
#endif
#ifndef CONV_SIMT_CI
#define CONV_SIMT_CI 8
#endif
// CONV_OCC [0]: resident threads per multiprocessor the register allocation of the generic
// and depthwise kernels must allow (0: the compiler's choice)
#ifndef CONV_OCC
#define CONV_OCC 0
#endif
// DW_PREFETCH [1]: the NHWC depthwise register blocks issue the next input row's loads
// before the current row's FMAs (more registers, more loads in flight)
#ifndef DW_PREFETCH
#define DW_PREFETCH 1
#endif
#define CONV_MINB (CONV_OCC / CONV_THREADS > 0 ? CONV_OCC / CONV_THREADS : 1)

// ---------------------------------------------------------------------------------
// generic: one thread per output
// ---------------------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(CONV_THREADS, CONV_MINB)
    conv2d(const act_t* __restrict__ x, const act_t* __restrict__ w, const float* __restrict__ bias,
           act_t* __restrict__ y, int N, int CI, int IH, int IW, int CO, int OH, int OW, int KH, int KW, int SH, int SW,
           int PT, int PL, int DH, int DW, int G) {
    HAL_PDL_ENTRY();
    const long long total = (long long)N * CO * OH * OW;
    const int cig = CI / G, cog = CO / G;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        long long t = i;
        int n, co, oh, ow;
#if LAYOUT_NHWC
        co = (int)(t % CO);
        t /= CO;
        ow = (int)(t % OW);
        t /= OW;
        oh = (int)(t % OH);
        n = (int)(t / OH);
#else
        ow = (int)(t % OW);
        t /= OW;
        oh = (int)(t % OH);
        t /= OH;
        co = (int)(t % CO);
        n = (int)(t / CO);
#endif
        const int ci0 = (co / cog) * cig;
        const int hs = oh * SH - PT, ws = ow * SW - PL;
        float acc = bias ? bias[co] : 0.0f;
        const act_t* wc = w + (long long)co * cig * KH * KW;
        for (int ci = 0; ci < cig; ++ci) {
            for (int kh = 0; kh < KH; ++kh) {
                const int ih = hs + kh * DH;
                if ((unsigned)ih >= (unsigned)IH) continue;
                for (int kw = 0; kw < KW; ++kw) {
                    const int iw = ws + kw * DW;
                    if ((unsigned)iw >= (unsigned)IW) continue;
#if LAYOUT_NHWC
                    const long long xo = (((long long)n * IH + ih) * IW + iw) * CI + ci0 + ci;
#else
                    const long long xo = (((long long)n * CI + ci0 + ci) * IH + ih) * IW + iw;
#endif
                    acc = fmaf(ld_act(x + xo), ld_act(wc + (ci * KH + kh) * KW + kw), acc);
                }
            }
        }
        st_act(y + i, acc);
    }
}

// ---------------------------------------------------------------------------------
// depthwise tiles
// ---------------------------------------------------------------------------------
#if LAYOUT_NHWC
#define DW_BODY(KH_, KW_, SH_, SW_) \
    win_nhwc<WIN_DW, false, KH_, KW_, SH_, SW_, (KH_ == 3 ? WIN_STRIP_NHWC : 0)>(x, y, nullptr, w, bias, p)
#else
#define DW_BODY(KH_, KW_, SH_, SW_) \
    win_nchw<WIN_DW, false, false, KH_, KW_, SH_, SW_, (KH_ == 3 ? WIN_STRIP_K3S1 : 0)>(x, y, nullptr, w, bias, p)
#endif
extern "C" __global__ void __launch_bounds__(CONV_THREADS, CONV_MINB)
    conv2d_dw_tile_g(const act_t* __restrict__ x, const act_t* __restrict__ w, const float* __restrict__ bias,
                     act_t* __restrict__ y, WinParams p) {
    HAL_PDL_ENTRY();
    DW_BODY(0, 0, 0, 0);
}
extern "C" __global__ void __launch_bounds__(CONV_THREADS, CONV_MINB)
    conv2d_dw_tile_k3s1(const act_t* __restrict__ x, const act_t* __restrict__ w, const float* __restrict__ bias,
                        act_t* __restrict__ y, WinParams p) {
    HAL_PDL_ENTRY();
    DW_BODY(3, 3, 1, 1);
}

// ---------------------------------------------------------------------------------
// dense 3x3 on CUDA cores
// ---------------------------------------------------------------------------------
namespace simt {
constexpr int TR = 8, TC = 32, TCO = 64;
constexpr int IR = TR + 2, ICOL = TC + 2, ICP = 36, WST = 68;
constexpr int CIC = CONV_SIMT_CI;
constexpr int IN_FLOATS = CIC * IR * ICP;
constexpr int W_FLOATS = CIC * 9 * WST;
constexpr int BUF = IN_FLOATS + W_FLOATS;
}  // namespace simt

// xn: this image's input; offsets inside one image and inside the weights fit in int
__device__ __forceinline__ void simt_fill(float* buf, const act_t* __restrict__ xn, const act_t* __restrict__ w,
                                          int ci0, int co0, int oh0, int ow0, int CI, int IH, int IW, int CO, int PT,
                                          int PL) {
    using namespace simt;
    float* sin = buf;
    float* sw = buf + IN_FLOATS;
    for (int f = threadIdx.x; f < CIC * IR * ICOL; f += 256) {
#if LAYOUT_NHWC
        const int cil = f % CIC, rem = f / CIC;
#else
        const int cil = f / (IR * ICOL), rem = f - (f / (IR * ICOL)) * (IR * ICOL);
#endif
        const int r = rem / ICOL, c = rem - (rem / ICOL) * ICOL;
        const int ih = oh0 - PT + r, iw = ow0 - PL + c, ci = ci0 + cil;
        const bool valid = ci < CI && (unsigned)ih < (unsigned)IH && (unsigned)iw < (unsigned)IW;
#if LAYOUT_NHWC
        const int off = (ih * IW + iw) * CI + ci;
#else
        const int off = (ci * IH + ih) * IW + iw;
#endif
        float* dst = sin + (cil * IR + r) * ICP + c;
#if HAL_ACT16
        *dst = valid ? to_f(xn[off]) : 0.0f;
#else
        cp_async4_zfill(dst, valid ? (const void*)(xn + off) : (const void*)xn, valid);
#endif
    }
    for (int f = threadIdx.x; f < TCO * CIC * 9; f += 256) {
        const int col = f / (CIC * 9), rem = f - (f / (CIC * 9)) * (CIC * 9);
        const int cil = rem / 9, tap = rem - (rem / 9) * 9;
        const int co = co0 + col, ci = ci0 + cil;
        const bool valid = co < CO && ci < CI;
        const int off = (co * CI + ci) * 9 + tap;
        float* dst = sw + (cil * 9 + tap) * WST + col;
#if HAL_ACT16
        *dst = valid ? to_f(w[off]) : 0.0f;
#else
        cp_async4_zfill(dst, valid ? (const void*)(w + off) : (const void*)w, valid);
#endif
    }
}

extern "C" __global__ void __launch_bounds__(256, 2)
    conv2d_k3_simt(const act_t* __restrict__ x, const act_t* __restrict__ w, const float* __restrict__ bias,
                   act_t* __restrict__ y, int N, int CI, int IH, int IW, int CO, int OH, int OW, int PT, int PL,
                   int tiles_h, int tiles_w, int co_tiles) {
    HAL_PDL_ENTRY();
    using namespace simt;
    extern __shared__ __align__(16) float smem_f[];
    int b = blockIdx.x;
    const int twi = b % tiles_w;
    b /= tiles_w;
    const int thi = b % tiles_h;
    b /= tiles_h;
    const int cot = b % co_tiles;
    const int n = b / co_tiles;
    const int oh0 = thi * TR, ow0 = twi * TC, co0 = cot * TCO;
    const int tid = threadIdx.x, cg = tid & 7, pg = tid >> 3, orow = pg >> 2, ocol0 = (pg & 3) * 8;

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

    const int nchunks = (CI + CIC - 1) / CIC;
    const act_t* xn = x + (long long)n * CI * IH * IW;
    simt_fill(smem_f, xn, w, 0, co0, oh0, ow0, CI, IH, IW, CO, PT, PL);
    cp_async_commit();
    for (int k = 0; k < nchunks; ++k) {
        if (k + 1 < nchunks)
            simt_fill(smem_f + ((k + 1) & 1) * BUF, xn, w, (k + 1) * CIC, co0, oh0, ow0, CI, IH, IW, CO, PT, PL);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const float* sin = smem_f + (k & 1) * BUF;
        const float* sw = sin + IN_FLOATS;
#pragma unroll 1
        for (int cil = 0; cil < CIC; ++cil) {
#pragma unroll
            for (int kh = 0; kh < 3; ++kh) {
                const float* srow = sin + (cil * IR + orow + kh) * ICP + ocol0;
                float a[10];
#pragma unroll
                for (int j = 0; j < 5; ++j) {
                    const float2 t = *reinterpret_cast<const float2*>(srow + 2 * j);
                    a[2 * j] = t.x;
                    a[2 * j + 1] = t.y;
                }
#pragma unroll
                for (int kw = 0; kw < 3; ++kw) {
                    const float* swp = sw + (cil * 9 + kh * 3 + kw) * WST + cg * 4;
                    const float4 b0 = *reinterpret_cast<const float4*>(swp);
                    const float4 b1 = *reinterpret_cast<const float4*>(swp + 32);
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        const float av = a[i + kw];
                        acc[i][0] = fmaf(av, b0.x, acc[i][0]);
                        acc[i][1] = fmaf(av, b0.y, acc[i][1]);
                        acc[i][2] = fmaf(av, b0.z, acc[i][2]);
                        acc[i][3] = fmaf(av, b0.w, acc[i][3]);
                        acc[i][4] = fmaf(av, b1.x, acc[i][4]);
                        acc[i][5] = fmaf(av, b1.y, acc[i][5]);
                        acc[i][6] = fmaf(av, b1.z, acc[i][6]);
                        acc[i][7] = fmaf(av, b1.w, acc[i][7]);
                    }
                }
            }
        }
        __syncthreads();
    }

    // epilogue
    const int oh = oh0 + orow;
    if (oh >= OH) return;
    const int owb = ow0 + ocol0;
    float bv[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int co = co0 + (j < 4 ? cg * 4 + j : 32 + cg * 4 + j - 4);
        bv[j] = (bias && co < CO) ? bias[co] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = out_act(acc[i][j] + bv[j]);  // raw vector stores follow
#if LAYOUT_NHWC
    const bool vec_ok = (CO % 4 == 0) && aligned16(y);
    act_t* yrow = y + (((long long)n * OH + oh) * OW + owb) * CO;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        if (owb + i < OW) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int cb = co0 + h * 32 + cg * 4;
                act_t* yp = yrow + i * CO + cb;
                if (vec_ok && cb + 3 < CO) {
#if HAL_ACT16
                    uint2 u;
                    u.x = act2_word(acc[i][h * 4], acc[i][h * 4 + 1]);
                    u.y = act2_word(acc[i][h * 4 + 2], acc[i][h * 4 + 3]);
                    *reinterpret_cast<uint2*>(yp) = u;
#else
                    *reinterpret_cast<float4*>(yp) =
                        make_float4(acc[i][h * 4], acc[i][h * 4 + 1], acc[i][h * 4 + 2], acc[i][h * 4 + 3]);
#endif
                } else {
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        if (cb + j < CO) st_act(yp + j, acc[i][h * 4 + j]);
                }
            }
        }
    }
#else
    const bool vec_ok = (OW % HAL_VEC == 0) && aligned16(y) && owb + 7 < OW;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int co = co0 + (j < 4 ? cg * 4 + j : 32 + cg * 4 + j - 4);
        if (co >= CO) continue;
        act_t* yp = y + (((long long)n * CO + co) * OH + oh) * OW + owb;
        if (vec_ok) {
            float o[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) o[i] = acc[i][j];
#if HAL_ACT16
            st_vec(yp, o);
#else
            *reinterpret_cast<float4*>(yp) = make_float4(o[0], o[1], o[2], o[3]);
            *reinterpret_cast<float4*>(yp + 4) = make_float4(o[4], o[5], o[6], o[7]);
#endif
        } else {
#pragma unroll
            for (int i = 0; i < 8; ++i)
                if (owb + i < OW) st_act(yp + i, acc[i][j]);
        }
    }
#endif
}

// ---------------------------------------------------------------------------------
// dense KH,KW <= 3 on tensor cores (float16; conv2d_k3_tc and conv2d_k3_tc_pipe, with the helpers
// before them, bfloat16 too: ldmatrix moves 16-bit words of either type, the mma takes its operand type
// from TC_MMA_AB, the staged zeros and the stores convert to the build's type; bfloat16 mma needs
// sm_80, so a bfloat16 build for sm_75 traps there and the launcher never plans it)
// ---------------------------------------------------------------------------------
#if HAL_ACT16
namespace tc {
constexpr int TR = 4, TCOL = 32, TCO = 64, ICMAX = TCOL + 2;
constexpr int W_HALVES = 9 * TCO * 64;
}  // namespace tc
#if DTYPE_BF16
#define TC_MMA_AB "bf16"  // mma.sync's A and B operand type: the activations' own
#define TC_ZERO __float2bfloat16_rn(0.0f)
#define TC_CVT(v) __float2bfloat16_rn(v)
#define TC_PAIR_T __nv_bfloat162
#define TC_PAIR(a, b) __floats2bfloat162_rn(a, b)
#define TC_BITS(v) __bfloat16_as_ushort(v)
#else
#define TC_MMA_AB "f16"
#define TC_ZERO __float2half(0.0f)
#define TC_CVT(v) __float2half_rn(v)
#define TC_PAIR_T __half2
#define TC_PAIR(a, b) __floats2half2_rn(a, b)
#define TC_BITS(v) __half_as_ushort(v)
#endif

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// (the launcher uses the tensor-core kernel on sm_75 and newer only)
__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 750
    (void)addr;
    r0 = r1 = r2 = r3 = 0u;
    __trap();
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
#endif
}
// the same with .trans: each 8x8 matrix is transposed as it is distributed (lane t gets row t % 4 * 2
// (+ 1) of column t / 4 of each matrix): the "col" B fragments of mma from a [k][n] tile, n contiguous
__device__ __forceinline__ void ldsm_x4_trans(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2,
                                              unsigned& r3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 750
    (void)addr;
    r0 = r1 = r2 = r3 = 0u;
    __trap();
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
#endif
}
__device__ __forceinline__ void mma16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32." TC_MMA_AB "." TC_MMA_AB ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#elif defined(__CUDA_ARCH__) && (__CUDA_ARCH__ < 750 || DTYPE_BF16)  // (no bfloat16 mma before sm_80)
    (void)c;
    (void)a;
    (void)b0;
    (void)b1;
    __trap();
#else
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(b0));
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[2]), "r"(a[3]), "r"(b1));
#endif
}

// the bias of the 16 output channels a lane's mma fragments hold: 8 nt + 2 (lane % 4) + {0,1}
__device__ __forceinline__ void tc_bias_frag(const float* __restrict__ bias, int co0, int CO, int lane,
                                             float (&bv)[8][2]) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int co = co0 + nt * 8 + (lane & 3) * 2 + e;
            bv[nt][e] = (bias && co < CO) ? bias[co] : 0.0f;
        }
}

#if LAYOUT_NHWC
// one warp's output row of a tile, 32 pixels x 64 channels from mma fragments (lane: pixels
// lane/4 (+8) of each m16 tile, channels 8 nt + 2 (lane % 4) + {0,1}), through `stage` (the
// warp's 4 KB: [pixel][16-byte chunk ^ pixel & 7]) to whole 16-byte NHWC stores
__device__ __forceinline__ void tc_store_row_nhwc(act_t* stage, const float (&acc)[2][8][4], const float (&bv)[8][2],
                                                  int lane, act_t* __restrict__ y, int n, int oh, int ow0, int co0,
                                                  int OH, int OW, int CO, bool vec_out) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int hsel = 0; hsel < 2; ++hsel) {
            const int px = mt * 16 + (lane >> 2) + hsel * 8;
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
                const TC_PAIR_T v = TC_PAIR(out_act(acc[mt][nt][hsel * 2] + bv[nt][0]),
                                            out_act(acc[mt][nt][hsel * 2 + 1] + bv[nt][1]));
                *reinterpret_cast<TC_PAIR_T*>(stage + px * 64 + ((nt ^ (px & 7)) << 3) + (lane & 3) * 2) = v;
            }
        }
    __syncwarp();
    if (oh >= OH) return;
    act_t* yrow = y + ((long long)n * OH + oh) * OW * CO;
#pragma unroll
    for (int it = 0; it < 8; ++it) {
        const int i = it * 32 + lane, px = i >> 3, ch = i & 7;
        const int ow = ow0 + px, co = co0 + ch * 8;
        if (ow >= OW || co >= CO) continue;
        const uint4 u = *reinterpret_cast<const uint4*>(stage + px * 64 + ((ch ^ (px & 7)) << 3));
        act_t* yp = yrow + (long long)ow * CO + co;
        if (vec_out && co + 8 <= CO) {
            *reinterpret_cast<uint4*>(yp) = u;
        } else {
            const act_t* h = reinterpret_cast<const act_t*>(&u);
#pragma unroll
            for (int j = 0; j < 8; ++j)
                if (co + j < CO) yp[j] = h[j];
        }
    }
}
#else
constexpr int TC_NCHW_CO_STRIDE = 32 + 8;  // NCHW output staging row: 80 bytes, no bank conflicts
// one warp's output row of a tile, as tc_store_row_nhwc, to NCHW: through `stage` (the warp's
// [co][pixel] rows of 40 halves: the 4 channel rows a store instruction touches fall in
// different banks) to 16-byte stores along each channel's row
__device__ __forceinline__ void tc_store_row_nchw(act_t* stage, const float (&acc)[2][8][4], const float (&bv)[8][2],
                                                  int lane, act_t* __restrict__ y, int n, int oh, int ow0, int co0,
                                                  int OH, int OW, int CO, bool vec_out) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int hsel = 0; hsel < 2; ++hsel) {
            const int px = mt * 16 + (lane >> 2) + hsel * 8;
#pragma unroll
            for (int nt = 0; nt < 8; ++nt)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int col = nt * 8 + (lane & 3) * 2 + e;
                    stage[col * TC_NCHW_CO_STRIDE + px] = TC_CVT(out_act(acc[mt][nt][hsel * 2 + e] + bv[nt][e]));
                }
        }
    __syncwarp();
    if (oh >= OH) return;
#pragma unroll
    for (int it = 0; it < 8; ++it) {
        const int i = it * 32 + lane, col = i >> 2, j = i & 3;
        const int co = co0 + col, ow = ow0 + j * 8;
        if (co >= CO || ow >= OW) continue;
        const uint4 u = *reinterpret_cast<const uint4*>(stage + col * TC_NCHW_CO_STRIDE + j * 8);
        act_t* yp = y + (((long long)n * CO + co) * OH + oh) * OW + ow;
        if (vec_out && ow + 8 <= OW) {
            *reinterpret_cast<uint4*>(yp) = u;
        } else {
            const act_t* h = reinterpret_cast<const act_t*>(&u);
#pragma unroll
            for (int k = 0; k < 8; ++k)
                if (ow + k < OW) yp[k] = h[k];
        }
    }
}
#endif

extern "C" __global__ void __launch_bounds__(256, 2)
    conv2d_k3_tc(const act_t* __restrict__ x, const act_t* __restrict__ w, const float* __restrict__ bias,
                 act_t* __restrict__ y, int N, int CI, int IH, int IW, int CO, int OH, int OW, int KH, int KW, int PT,
                 int PL, int tiles_h, int tiles_w) {
    HAL_PDL_ENTRY();
    using namespace tc;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    act_t* s_w = reinterpret_cast<act_t*>(smem_raw);
    act_t* s_in = s_w + W_HALVES;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp & 3, wn = warp >> 2;
    const int co0 = blockIdx.y * TCO;
    const int KK = KH * KW;
    const int nk16 = (CI + 15) >> 4;  // <= 4 (C_in <= 64)

    // all weights of this block's 64 output channels: [tap][co][ci], 16-byte chunks XOR (co & 7)
    for (int f = tid; f < KK * TCO * 8; f += blockDim.x) {
        const int c8 = f & 7, rest = f >> 3;
        const int col = rest % TCO, tap = rest / TCO;
        const int kh = tap / KW, kw = tap - (tap / KW) * KW;
        const int co = co0 + col;
        __align__(16) act_t h[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int ci = c8 * 8 + j;
            h[j] = (co < CO && ci < CI) ? w[(((long long)co * CI + ci) * KH + kh) * KW + kw] : TC_ZERO;
        }
        *reinterpret_cast<uint4*>(s_w + (tap * TCO + col) * 64 + ((c8 ^ (col & 7)) * 8)) =
            *reinterpret_cast<const uint4*>(h);
    }

    const int irows = TR + KH - 1, icols = TCOL + KW - 1;
    const bool vec_in = LAYOUT_NHWC && (CI % 8 == 0) && aligned16(x);
#if LAYOUT_NHWC
    const bool vec_out = (CO % 2 == 0) && ((reinterpret_cast<uintptr_t>(y) & 3u) == 0);
#endif
    float bv[4][2];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int co = co0 + wn * 32 + nt * 8 + (lane & 3) * 2 + e;
            bv[nt][e] = (bias && co < CO) ? bias[co] : 0.0f;
        }

    const int ntiles = N * tiles_h * tiles_w;
    for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
        int tt = t;
        const int twi = tt % tiles_w;
        tt /= tiles_w;
        const int thi = tt % tiles_h;
        const int n = tt / tiles_h;
        const int oh0 = thi * TR, ow0 = twi * TCOL;
        __syncthreads();  // previous tile's reads of s_in are done
        // thread -> (16-byte channel chunk c8, pixels pix0, pix0 + 32, ...): no division per copy
        {
            const int npix = irows * icols;
            const int c8 = vec_in ? (tid & 7) : (tid >> 5);
            int pix = vec_in ? (tid >> 3) : (tid & 31);
            const int pstep = vec_in ? (blockDim.x >> 3) : 32;
            int r = pix / icols, c = pix - (pix / icols) * icols;
            for (; pix < npix; pix += pstep) {
                const int ih = oh0 - PT + r, iw = ow0 - PL + c;
                const int p = r * ICMAX + c;
                act_t* dst = s_in + p * 64 + ((c8 ^ (p & 7)) * 8);
                const bool inside = (unsigned)ih < (unsigned)IH && (unsigned)iw < (unsigned)IW;
                if (vec_in) {  // NHWC, C_in % 8 == 0: 16-byte copies along the channels of each pixel
                    const bool valid = inside && c8 * 8 < CI;
                    const act_t* src = valid ? x + (((long long)n * IH + ih) * IW + iw) * CI + c8 * 8 : x;
                    cp_async16_zfill(dst, src, valid);
                } else {  // gather 8 channels; the 32 lanes of a warp take 32 pixels: coalesced loads
                    __align__(16) act_t h[8];
#pragma unroll
                    for (int j = 0; j < 8; ++j) {
                        const int ci = c8 * 8 + j;
#if LAYOUT_NHWC
                        const long long off = (((long long)n * IH + ih) * IW + iw) * CI + ci;
#else
                        const long long off = (((long long)n * CI + ci) * IH + ih) * IW + iw;
#endif
                        h[j] = (inside && ci < CI) ? x[off] : TC_ZERO;
                    }
                    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(h);
                }
                c += pstep;
                while (c >= icols) {
                    c -= icols;
                    ++r;
                }
            }
        }
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();

        float acc[2][4][4];
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int b = 0; b < 4; ++b)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[a][b][e] = 0.0f;

        // per-lane ldmatrix rows: A = pixels (16 per m tile), B = output channels; the XOR
        // swizzle of B rows is (co & 7) = (lane & 7)
        const int pr = (lane & 7) + ((lane >> 3) & 1) * 8, a_half = lane >> 4, b_half = (lane >> 3) & 1;
        const int b_row = wn * 32 + (lane & 7) + (lane >> 4) * 8;
        const unsigned in_u = smem_u32(s_in), w_u = smem_u32(s_w);
        for (int kh = 0; kh < KH; ++kh) {
            for (int kw = 0; kw < KW; ++kw) {
                const int tap = kh * KW + kw;
                unsigned a_base[2], a_sw[2], b_base[2];
#pragma unroll
                for (int mt = 0; mt < 2; ++mt) {
                    const int p = (wm + kh) * ICMAX + mt * 16 + pr + kw;
                    a_base[mt] = in_u + p * 128;
                    a_sw[mt] = p & 7;
                }
#pragma unroll
                for (int np = 0; np < 2; ++np) b_base[np] = w_u + (tap * TCO + b_row + np * 16) * 128;
#pragma unroll
                for (int kc = 0; kc < 4; ++kc) {
                    if (kc < nk16) {
                        unsigned af[2][4], bf[4][2];
#pragma unroll
                        for (int mt = 0; mt < 2; ++mt)
                            ldsm_x4(a_base[mt] + ((((unsigned)(kc * 2 + a_half)) ^ a_sw[mt]) << 4), af[mt][0], af[mt][1],
                                    af[mt][2], af[mt][3]);
#pragma unroll
                        for (int np = 0; np < 2; ++np)
                            ldsm_x4(b_base[np] + ((((unsigned)(kc * 2 + b_half)) ^ (unsigned)(lane & 7)) << 4),
                                    bf[2 * np][0], bf[2 * np][1], bf[2 * np + 1][0], bf[2 * np + 1][1]);
#pragma unroll
                        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                            for (int nt = 0; nt < 4; ++nt) mma16816(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
                    }
                }
            }
        }

        // epilogue: lane holds rows lane/4 and lane/4 + 8 of each m16 tile, channels 2*(lane%4) + {0,1}
        const int oh = oh0 + wm;
        if (oh < OH) {
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                for (int hsel = 0; hsel < 2; ++hsel) {
                    const int ow = ow0 + mt * 16 + (lane >> 2) + hsel * 8;
                    if (ow >= OW) continue;
#pragma unroll
                    for (int nt = 0; nt < 4; ++nt) {
                        const int co = co0 + wn * 32 + nt * 8 + (lane & 3) * 2;
                        const float v0 = out_act(acc[mt][nt][hsel * 2] + bv[nt][0]);
                        const float v1 = out_act(acc[mt][nt][hsel * 2 + 1] + bv[nt][1]);
#if LAYOUT_NHWC
                        act_t* yp = y + (((long long)n * OH + oh) * OW + ow) * CO + co;
                        if (vec_out && co + 1 < CO) {
                            *reinterpret_cast<TC_PAIR_T*>(yp) = TC_PAIR(v0, v1);
                        } else {
                            if (co < CO) yp[0] = TC_CVT(v0);
                            if (co + 1 < CO) yp[1] = TC_CVT(v1);
                        }
#else
                        const long long plane = (long long)OH * OW;
                        act_t* yp = y + (((long long)n * CO + co) * OH + oh) * OW + ow;
                        if (co < CO) yp[0] = TC_CVT(v0);
                        if (co + 1 < CO) yp[plane] = TC_CVT(v1);
#endif
                    }
                }
        }
    }
}

// ---------------------------------------------------------------------------------
// dense 3x3 float16 on tensor cores, pipelined (CONV_TC=2): one persistent block per
// multiprocessor keeps the weights of 64 output channels ([tap][co][ci], swizzled as above)
// and streams 8 x 32-pixel output tiles; the next tile's cp.async copies run while the warps
// multiply the current one. A warp owns one output row of the tile (32 pixels x 64 channels:
// 6 ldmatrix per 16 mma); the 3x3 taps and 4 k-steps are unrolled so the next fragments
// load under the current mma; results leave through shared memory as 16-byte stores.
//   NHWC (C_in % 8 == 0): two [pixel][channel] input buffers, filled by cp.async directly.
//   NCHW (W % 8 == 0): cp.async brings the next tile's rows as they lie ([ci][row][48 columns]
//   from a 16-byte aligned column) into a staging area; after the current tile, the block
//   transposes it into the one [pixel][channel] buffer.
// Needs C_in <= 64, a 16-byte aligned input; shared memory tcp::smem_bytes(NHWC).
// ---------------------------------------------------------------------------------
namespace tcp {
constexpr int TR = 8, TCOL = 32, TCO = 64, IROWS = TR + 2, ICOLS = TCOL + 2, NPIX = IROWS * ICOLS;
constexpr int W_HALVES = 9 * TCO * 64, IN_HALVES = NPIX * 64;
#if !LAYOUT_NHWC
constexpr int SCOLS = 48;                 // NCHW staging [ci][row][column]: 6 aligned 16-byte chunks per row
#endif
}  // namespace tcp

extern "C" __global__ void __launch_bounds__(256, 1)
    conv2d_k3_tc_pipe(const act_t* __restrict__ x, const act_t* __restrict__ w, const float* __restrict__ bias,
                      act_t* __restrict__ y, int N, int CI, int IH, int IW, int CO, int OH, int OW, int PT, int PL,
                      int tiles_h, int tiles_w) {
    HAL_PDL_ENTRY();
    using namespace tcp;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    act_t* s_w = reinterpret_cast<act_t*>(smem_raw);
    act_t* s_in0 = s_w + W_HALVES;  // NHWC: two input buffers; NCHW: one, then the staging area
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int co0 = blockIdx.y * TCO;
    const int ntiles = N * tiles_h * tiles_w;

#if LAYOUT_NHWC
    // one tile's patch (IROWS x ICOLS pixels x 64 channels) into buffer `buf`: thread ->
    // 16-byte channel chunk (tid & 7) of pixels tid / 8, + 32, ... (zero outside)
    auto load_tile = [&](int t, int buf) {
        const int twi = t % tiles_w, rest = t / tiles_w;
        const int thi = rest % tiles_h, n = rest / tiles_h;
        const int ih0 = thi * TR - PT, iw0 = twi * TCOL - PL;
        act_t* s_in = s_in0 + buf * IN_HALVES;
        const int c8 = tid & 7;
        const bool chan_ok = c8 * 8 < CI;
        int pix = tid >> 3, r = 0, c = pix;
        for (; pix < NPIX; pix += 32) {
            const int ih = ih0 + r, iw = iw0 + c;
            const bool valid = chan_ok && (unsigned)ih < (unsigned)IH && (unsigned)iw < (unsigned)IW;
            const act_t* src = valid ? x + (((long long)n * IH + ih) * IW + iw) * CI + c8 * 8 : x;
            cp_async16_zfill(s_in + pix * 64 + ((c8 ^ (pix & 7)) * 8), src, valid);
            c += 32;
            if (c >= ICOLS) {
                c -= ICOLS;
                ++r;
            }
        }
    };
#else
    act_t* s_stage = s_in0 + IN_HALVES;
    // the first patch column's offset inside the staged rows (the same for every tile: 32 | ow0)
    const int col_shift = ((-PL) % 8 + 8) % 8;
    // one tile's rows into the staging area: [ci][row][6 chunks of 8 columns from an aligned column]
    auto load_tile = [&](int t, int) {
        const int twi = t % tiles_w, rest = t / tiles_w;
        const int thi = rest % tiles_h, n = rest / tiles_h;
        const int ih0 = thi * TR - PT, iwa = twi * TCOL - PL - col_shift;  // iwa % 8 == 0
        for (int f = tid; f < 64 * IROWS * (SCOLS / 8); f += blockDim.x) {
            const int k = f % (SCOLS / 8), rest2 = f / (SCOLS / 8);
            const int r = rest2 % IROWS, ci = rest2 / IROWS;
            const int ih = ih0 + r, iw = iwa + k * 8;  // IW % 8 == 0: a chunk is all inside or all outside
            const bool valid = ci < CI && (unsigned)ih < (unsigned)IH && (unsigned)iw < (unsigned)IW;
            const act_t* src = valid ? x + (((long long)n * CI + ci) * IH + ih) * IW + iw : x;
            cp_async16_zfill(s_stage + (ci * IROWS + r) * SCOLS + k * 8, src, valid);
        }
    };
#endif

    if ((int)blockIdx.x < ntiles) load_tile(blockIdx.x, 0);
    cp_async_commit();

    // weights, while the first tile's copies are in flight: zero the padding first
    // (channels >= C_in or >= C_out), then scatter the block's contiguous [co][ci][3][3]
    // run, read as 16-byte vectors where aligned
    const int ncol = min(TCO, CO - co0), per_co = CI * 9;
    if (CI < 64 || ncol < TCO) {
        for (int f = tid; f < W_HALVES / 8; f += blockDim.x)
            reinterpret_cast<uint4*>(s_w)[f] = make_uint4(0u, 0u, 0u, 0u);
        __syncthreads();
    }
    const act_t* wb = w + (long long)co0 * per_co;
    const int wtotal = ncol * per_co;
    auto put_w = [&](int e, act_t v) {
        const int col = e / per_co, rem = e - col * per_co;
        const int ci = rem / 9, tap = rem - ci * 9;
        s_w[(tap * TCO + col) * 64 + (((ci >> 3) ^ (col & 7)) << 3) + (ci & 7)] = v;
    };
    if (CI % 8 == 0 && aligned16(wb)) {  // 9 * C_in % 8 == 0: no vector straddles two channels
        for (int f = tid; f < wtotal / 8; f += blockDim.x) {
            const uint4 u = __ldg(reinterpret_cast<const uint4*>(wb) + f);
            const act_t* h = reinterpret_cast<const act_t*>(&u);
#pragma unroll
            for (int j = 0; j < 8; ++j) put_w(f * 8 + j, h[j]);
        }
    } else {
        for (int e = tid; e < wtotal; e += blockDim.x) put_w(e, wb[e]);
    }

    float bv[8][2];
    tc_bias_frag(bias, co0, CO, lane, bv);
#if LAYOUT_NHWC
    const bool vec_out = (CO % 8 == 0) && aligned16(y);
#else
    const bool vec_out = (OW % 8 == 0) && aligned16(y);
#endif
    // per-lane ldmatrix rows: A = pixels (16 per m tile), B = output channels (swizzle co & 7 = lane & 7)
    const int pr = (lane & 7) + ((lane >> 3) & 1) * 8, a_half = lane >> 4, b_half = (lane >> 3) & 1;
    const int b_row = (lane & 7) + (lane >> 4) * 8;
    const unsigned w_u = smem_u32(s_w);

#if LAYOUT_NHWC
    int buf = 0;
#endif
    for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
        cp_async_wait<0>();
        __syncthreads();  // tile t has landed; every warp is done with the previous tile's buffers
#if LAYOUT_NHWC
        if (t + (int)gridDim.x < ntiles) load_tile(t + gridDim.x, buf ^ 1);
        cp_async_commit();
        act_t* s_in = s_in0 + buf * IN_HALVES;
        buf ^= 1;
#else
        // staging [ci][row][column] -> buffer [pixel][16-byte channel chunk ^ pixel & 7]: a warp
        // takes 32 consecutive pixels of one chunk (conflict-free reads along a row)
        act_t* s_in = s_in0;
        for (int f = tid; f < NPIX * 8; f += blockDim.x) {
            const int c8 = f / NPIX, p = f - c8 * NPIX;
            const int r = p / ICOLS, c = p - r * ICOLS;
            const act_t* src = s_stage + (c8 * 8 * IROWS + r) * SCOLS + col_shift + c;
            __align__(16) act_t h[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) h[j] = src[j * IROWS * SCOLS];
            *reinterpret_cast<uint4*>(s_in + p * 64 + ((c8 ^ (p & 7)) << 3)) = *reinterpret_cast<const uint4*>(h);
        }
        __syncthreads();  // the buffer is ready and the staging area free
        if (t + (int)gridDim.x < ntiles) load_tile(t + gridDim.x, 0);
        cp_async_commit();
#endif
        const unsigned in_u = smem_u32(s_in);
        float acc[2][8][4];
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int b = 0; b < 8; ++b)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[a][b][e] = 0.0f;

        const int p0 = warp * ICOLS + pr;
#pragma unroll
        for (int tap = 0; tap < 9; ++tap) {
            const int kh = tap / 3, kw = tap % 3;
            unsigned a_base[2], a_sw[2];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                const int p = p0 + kh * ICOLS + mt * 16 + kw;
                a_base[mt] = in_u + p * 128;
                a_sw[mt] = p & 7;
            }
            const unsigned b_base = w_u + (tap * TCO + b_row) * 128;
#pragma unroll
            for (int kc = 0; kc < 4; ++kc) {
                unsigned af[2][4], bf[8][2];
#pragma unroll
                for (int mt = 0; mt < 2; ++mt)
                    ldsm_x4(a_base[mt] + ((((unsigned)(kc * 2 + a_half)) ^ a_sw[mt]) << 4), af[mt][0], af[mt][1],
                            af[mt][2], af[mt][3]);
#pragma unroll
                for (int np = 0; np < 4; ++np)
                    ldsm_x4(b_base + np * 16 * 128 + ((((unsigned)(kc * 2 + b_half)) ^ (unsigned)(lane & 7)) << 4),
                            bf[2 * np][0], bf[2 * np][1], bf[2 * np + 1][0], bf[2 * np + 1][1]);
#pragma unroll
                for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                    for (int nt = 0; nt < 8; ++nt) mma16816(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
            }
        }
        __syncthreads();  // every warp is done reading the buffer: it becomes the output staging area

        // lane holds pixels lane/4 (+8) of each m16 tile, channels 8 nt + 2 (lane % 4) + {0,1}
        const int twi = t % tiles_w, rest = t / tiles_w;
        const int thi = rest % tiles_h, n = rest / tiles_h;
        const int oh = thi * TR + warp, ow0 = twi * TCOL;
#if LAYOUT_NHWC
        tc_store_row_nhwc(s_in + warp * (TCOL * 64), acc, bv, lane, y, n, oh, ow0, co0, OH, OW, CO, vec_out);
#else
        tc_store_row_nchw(s_in + warp * (TCO * TC_NCHW_CO_STRIDE), acc, bv, lane, y, n, oh, ow0, co0, OH, OW, CO,
                          vec_out);
#endif
    }
    cp_async_wait<0>();  // nothing left in flight when the block exits
}

#endif  // HAL_ACT16

#if HAL_ACT16  // float16's, and bfloat16's on sm_80+ (TC_MMA_AB; the launcher never plans them for bfloat16 on sm_75)
// ---------------------------------------------------------------------------------
// dense 3x3 and 1x1 float16 NHWC on tensor cores for any C_in % 8 == 0 (CONV_TC=3; written
// for C_in > 64, which conv2d_k3_tc_pipe cannot hold): the weights no longer fit shared
// memory, so they stream with the input, 32 input channels at a time. conv2d_tc_wprep first
// lays the weights out as the stages read them ([co tile][chunk][tap][64 co][32 ci], zero past
// C_in and C_out: one contiguous run per stage, 36,864 bytes for 3x3); conv2d_k{3,1}_tc_wide
// then walk (tile, chunk) stages, each an 8 x 32-pixel patch (plus its halo for 3x3) of 32
// channels plus that run, the next stage's cp.async copies in flight under the current one's
// mma.sync (two stage buffers of 64-byte rows, swizzled as qconv2d_k3_tc's). A warp owns one
// output row of the tile (32 pixels x 64 channels), the accumulators persist over a tile's
// chunks, and the results leave through the consumed stage buffer as conv2d_k3_tc_pipe's do.
// Shared memory tcw::Geo<K>::SMEM: 117,248 bytes (3x3), 65,536 (1x1); with TC_WIDE_ROWS 4 (a
// 4 x 32 tile, 4 warps) 99,840 and 32,768.
// ---------------------------------------------------------------------------------
// TC_WIDE_STAGES [2]: stage buffers of conv2d_k{3,1}_tc_wide; STAGES - 1 stages' copies are in
// flight while the warps multiply one (a 1x1 stage is a few mma per warp: its loads' latency,
// not the tensor cores, set the pace with 2); 1: none in flight, the next stage loads after
// the mma (what 3x3 stride 2 fits in on the 99 KB parts)
#ifndef TC_WIDE_STAGES
#define TC_WIDE_STAGES 2
#endif
// TC_WIDE_ROWS [8]: output rows of a tile, one warp each (8 or 4): 4 rows take about 58 % of the
// shared memory for 3x3 (99,840 bytes at stride 1, 148,608 at stride 2, two stages), so the
// streamed-weight kernels fit sm_86/89/120's 99 KB a block (stride 1) and sm_80's 163 KB
// (stride 2), at half the block's threads and each stage's weights shared by half the outputs
#ifndef TC_WIDE_ROWS
#define TC_WIDE_ROWS 8
#endif
static_assert(TC_WIDE_ROWS == 8 || TC_WIDE_ROWS == 4, "TC_WIDE_ROWS: 8 or 4");
#define TC_WIDE_THREADS (TC_WIDE_ROWS * 32)
namespace tcw {
constexpr int TCO = 64, KC = 32, TR = TC_WIDE_ROWS, TCOL = 32, STAGES = TC_WIDE_STAGES;
template <int K, int S = 1>  // K x K taps, stride S (2: NHWC only)
struct Geo {
    static constexpr int TAPS = K * K, IROWS = (TR - 1) * S + K, ICOLS = (TCOL - 1) * S + K, NPIX = IROWS * ICOLS;
    // stride 2 stores a patch row's even columns first, then its odd ones: the 16 consecutive
    // outputs an ldmatrix covers then read consecutive staged pixels for every tap (bank-conflict
    // free under tcw_at's swizzle, as at stride 1), where columns two apart would share banks
    static constexpr int EVEN_COLS = (ICOLS + 1) / 2;
    static __device__ __forceinline__ int col_pos(int c) { return S == 1 ? c : (c & 1) ? EVEN_COLS + (c >> 1) : c >> 1; }
    static constexpr int W_HALVES = TAPS * TCO * KC;  // one stage's weights
    static constexpr int IN_BYTES = NPIX * 64, W_BYTES = TAPS * TCO * 64;
#if LAYOUT_NHWC
    // a stage: the patch as [pixel][32 channels] and the chunk's weights; a stage buffer also
    // holds the 8 warps' 32 x 64 float16 results ([pixel][channel]) at the end of a tile
    static constexpr int STAGE_BYTES = IN_BYTES + W_BYTES, OUT_BYTES = TR * TCOL * TCO * 2;
    static constexpr int BUF_BYTES = STAGE_BYTES > OUT_BYTES ? STAGE_BYTES : OUT_BYTES;
    static constexpr int SMEM = STAGES * BUF_BYTES;
#else
    // a stage: the patch's rows as they lie ([32 ci][row][48 columns from a 16-byte aligned
    // column]) and the chunk's weights; one more buffer takes the transposed patch; a stage
    // buffer also holds the results as [co][40 halves] rows at the end of a tile
    static constexpr int SCOLS = 48, ROWS_BYTES = KC * IROWS * SCOLS * 2, W_OFF = ROWS_BYTES;
    static constexpr int STAGE_BYTES = ROWS_BYTES + W_BYTES, OUT_BYTES = TR * TCO * (TCOL + 8) * 2;
    static constexpr int BUF_BYTES = STAGE_BYTES > OUT_BYTES ? STAGE_BYTES : OUT_BYTES;
    static constexpr int SMEM = STAGES * BUF_BYTES + IN_BYTES;
#endif
};
}  // namespace tcw

// a 64-byte row's 16-byte chunk, XOR-swizzled by (row / 2) % 4: the 8 consecutive rows an
// ldmatrix reads fall in 8 different bank groups
__device__ __forceinline__ int tcw_at(int row, int chunk) { return row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4); }

// TC_WIDE_L2PF [0]: the input copies of conv2d_k{3,1}_tc_wide ask L2 to fetch the aligned 128 or
// 256 bytes around each 16-byte chunk (cp.async .L2::128B / .L2::256B): with C_in > 32 a stage
// reads 64 bytes of each NHWC pixel and the next stages read the rest, each from DRAM again
// unless L2 already holds it
#ifndef TC_WIDE_L2PF
#define TC_WIDE_L2PF 0
#endif
__device__ __forceinline__ void tcw_copy16(void* smem, const void* gmem, bool valid) {
#if TC_WIDE_L2PF && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    const int n = valid ? 16 : 0;
#if TC_WIDE_L2PF == 256
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(gmem), "r"(n));
#else
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(gmem), "r"(n));
#endif
#else
    cp_async16_zfill(smem, gmem, valid);
#endif
}

// weights [co][ci][taps] -> wp[co tile][chunk][tap][64 co][32 ci] (zero past C_in / C_out)
extern "C" __global__ void __launch_bounds__(256) conv2d_tc_wprep(const act_t* __restrict__ w, act_t* __restrict__ wp,
                                                                  int CI, int CO, int taps, int nchunk, int total) {
    HAL_PDL_ENTRY();
    using namespace tcw;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int cil = i % KC, rest = i / KC;
        const int col = rest % TCO, rest2 = rest / TCO;
        const int tap = rest2 % taps, rest3 = rest2 / taps;
        const int chunk = rest3 % nchunk, ct = rest3 / nchunk;
        const int co = ct * TCO + col, ci = chunk * KC + cil;
        wp[i] = (co < CO && ci < CI) ? w[((long long)co * CI + ci) * taps + tap] : TC_ZERO;
    }
}

template <int K, int S = 1>
__device__ __forceinline__ void tc_wide_body(unsigned char* smem_raw, const act_t* __restrict__ x,
                                             const act_t* __restrict__ wp,
                                             const float* __restrict__ bias, act_t* __restrict__ y, int N, int CI,
                                             int IH, int IW, int CO, int OH, int OW, int PT, int PL, int tiles_h,
                                             int tiles_w, int nchunk) {
    using namespace tcw;
    using G = Geo<K, S>;
    constexpr int TAPS = G::TAPS, ICOLS = G::ICOLS, NPIX = G::NPIX, W_HALVES = G::W_HALVES;
    constexpr int BUF_BYTES = G::BUF_BYTES;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int co0 = blockIdx.y * TCO;
    const int ntiles = N * tiles_h * tiles_w;
    const act_t* wpb = wp + (long long)blockIdx.y * nchunk * W_HALVES;

    // the chunk's weights (contiguous in wp: 16-byte copies, TAPS x 1 a thread)
    auto load_weights = [&](int chunk, unsigned char* s_w) {
        const act_t* wc = wpb + (long long)chunk * W_HALVES;
        for (int f = tid; f < W_HALVES / 8; f += blockDim.x)  // row f / 4 = tap * 64 + co, chunk f % 4
            cp_async16(s_w + tcw_at(f >> 2, f & 3), wc + f * 8);
    };
    // stage s = (tile blockIdx.x + (s / nchunk) * gridDim.x, chunk s % nchunk) into buffer `buf`:
    // NHWC: the patch's 32 channels (thread -> 16-byte chunk tid & 3 of pixels tid / 4, + threads / 4,
    // ..., zero outside); NCHW: its rows as they lie; then the chunk's weights
#if LAYOUT_NHWC
    constexpr int W_OFF = G::IN_BYTES;
    auto load_stage = [&](int t, int chunk, int buf) {
        unsigned char* s_in = smem_raw + buf * BUF_BYTES;
        const int twi = t % tiles_w, rest = t / tiles_w;
        const int thi = rest % tiles_h, n = rest / tiles_h;
        const int ih0 = thi * TR * S - PT, iw0 = twi * TCOL * S - PL;
        const int c16 = tid & 3, ci = chunk * KC + c16 * 8;
        int pix = tid >> 2, r = pix / ICOLS, c = pix - r * ICOLS;
        for (; pix < NPIX; pix += TC_WIDE_THREADS / 4) {
            const int ih = ih0 + r, iw = iw0 + c;
            const bool valid = ci < CI && (unsigned)ih < (unsigned)IH && (unsigned)iw < (unsigned)IW;
            const act_t* src = valid ? x + (((long long)n * IH + ih) * IW + iw) * CI + ci : x;
            // 1x1 stride 2 reads even rows and columns of the patch only: the rest is never copied
            if (!(K == 1 && S == 2 && ((r | c) & 1)))
                tcw_copy16(s_in + tcw_at(S == 1 ? pix : r * ICOLS + G::col_pos(c), c16), src, valid);
            c += TC_WIDE_THREADS / 4;
            while (c >= ICOLS) {
                c -= ICOLS;
                ++r;
            }
        }
        load_weights(chunk, s_in + W_OFF);
    };
#else
    constexpr int W_OFF = G::W_OFF, SCOLS = G::SCOLS, IROWS = G::IROWS;
    unsigned char* s_tin = smem_raw + STAGES * BUF_BYTES;  // the transposed patch
    const int col_shift = ((-PL) % 8 + 8) % 8;       // the patch's first column inside the staged rows
    // (IW % 8 == 0: a 16-byte chunk of a row is all inside the image or all outside)
    auto load_stage = [&](int t, int chunk, int buf) {
        act_t* rows = reinterpret_cast<act_t*>(smem_raw + buf * BUF_BYTES);
        const int twi = t % tiles_w, rest = t / tiles_w;
        const int thi = rest % tiles_h, n = rest / tiles_h;
        const int ih0 = thi * TR - PT, iwa = twi * TCOL - PL - col_shift;
        for (int f = tid; f < KC * IROWS * (SCOLS / 8); f += blockDim.x) {
            const int k = f % (SCOLS / 8), rest2 = f / (SCOLS / 8);
            const int r = rest2 % IROWS, cl = rest2 / IROWS, ci = chunk * KC + cl;
            const int ih = ih0 + r, iw = iwa + k * 8;
            const bool valid = ci < CI && (unsigned)ih < (unsigned)IH && (unsigned)iw < (unsigned)IW;
            const act_t* src = valid ? x + (((long long)n * CI + ci) * IH + ih) * IW + iw : x;
            tcw_copy16(rows + (cl * IROWS + r) * SCOLS + k * 8, src, valid);
        }
        load_weights(chunk, smem_raw + buf * BUF_BYTES + W_OFF);
    };
#endif

    float bv[8][2];
    tc_bias_frag(bias, co0, CO, lane, bv);
#if LAYOUT_NHWC
    const bool vec_out = (CO % 8 == 0) && aligned16(y);
#else
    const bool vec_out = (OW % 8 == 0) && aligned16(y);
#endif
    const int pr = (lane & 7) + ((lane >> 3) & 1) * 8, a_half = lane >> 4, b_half = (lane >> 3) & 1;
    const int b_row = (lane & 7) + (lane >> 4) * 8;

    // stage s lives in buffer s % STAGES; the first STAGES - 1 go out before the loop (one
    // commit group each, empty past the last tile, so the group count stays exact). One stage
    // (TC_WIDE_STAGES 1) loads stage 0 here and each next stage once every warp is done with the
    // buffer: no copy in flight under the mma, in half the shared memory of two
#pragma unroll
    for (int s = 0; s < (STAGES > 1 ? STAGES - 1 : 1); ++s) {
        const int t = blockIdx.x + (s / nchunk) * gridDim.x;
        if (t < ntiles) load_stage(t, s % nchunk, s);
        cp_async_commit();
    }
    float acc[2][8][4];
    int buf = 0;
    for (int s = 0;; ++s) {
        const int t = blockIdx.x + (s / nchunk) * gridDim.x, chunk = s % nchunk;
        if (t >= ntiles) break;
        cp_async_wait<(STAGES > 1 ? STAGES - 2 : 0)>();
        __syncthreads();  // stage s has landed; every warp is done with stage s - 1's buffer
        unsigned char* s_buf = smem_raw + buf * BUF_BYTES;
#if LAYOUT_NHWC
        const unsigned in_u = smem_u32(s_buf);
#else
        // staged rows [ci][row][column] -> [pixel][16-byte channel chunk, swizzled]: a warp takes
        // 32 consecutive pixels of one chunk (reads along a row)
        {
            const act_t* rows = reinterpret_cast<const act_t*>(s_buf);
            for (int f = tid; f < NPIX * (KC / 8); f += blockDim.x) {
                const int c8 = f / NPIX, p = f - c8 * NPIX;
                const int r = p / ICOLS, c = p - r * ICOLS;
                const act_t* src = rows + (c8 * 8 * IROWS + r) * SCOLS + col_shift + c;
                __align__(16) act_t h[8];
#pragma unroll
                for (int j = 0; j < 8; ++j) h[j] = src[j * IROWS * SCOLS];
                *reinterpret_cast<uint4*>(s_tin + tcw_at(p, c8)) = *reinterpret_cast<const uint4*>(h);
            }
        }
        __syncthreads();  // the transposed patch is ready (the staged rows stay until the stage is done)
        const unsigned in_u = smem_u32(s_tin);
#endif
        const unsigned w_u = smem_u32(s_buf) + W_OFF;
        if (STAGES > 1) {  // stage s + STAGES - 1 into stage s - 1's buffer
            const int sn = s + STAGES - 1, tn = blockIdx.x + (sn / nchunk) * gridDim.x;
            if (tn < ntiles) load_stage(tn, sn % nchunk, buf == 0 ? STAGES - 1 : buf - 1);
            cp_async_commit();
        }
        if (chunk == 0) {
#pragma unroll
            for (int a = 0; a < 2; ++a)
#pragma unroll
                for (int b = 0; b < 8; ++b)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[a][b][e] = 0.0f;
        }
        // output pixel m of the warp's row reads staged row warp * S + kh, column m * S + kw
        const int p0 = warp * S * ICOLS + pr;
#pragma unroll
        for (int tap = 0; tap < TAPS; ++tap) {
            const int kh = tap / K, kw = tap % K;
            int pa[2];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) pa[mt] = p0 + kh * ICOLS + mt * 16 + G::col_pos(kw);
#pragma unroll
            for (int kc = 0; kc < 2; ++kc) {  // 16 channels per k step
                unsigned af[2][4], bf[8][2];
#pragma unroll
                for (int mt = 0; mt < 2; ++mt)
                    ldsm_x4(in_u + tcw_at(pa[mt], kc * 2 + a_half), af[mt][0], af[mt][1], af[mt][2], af[mt][3]);
#pragma unroll
                for (int np = 0; np < 4; ++np)
                    ldsm_x4(w_u + tcw_at(tap * TCO + np * 16 + b_row, kc * 2 + b_half), bf[2 * np][0], bf[2 * np][1],
                            bf[2 * np + 1][0], bf[2 * np + 1][1]);
#pragma unroll
                for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                    for (int nt = 0; nt < 8; ++nt) mma16816(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
            }
        }
        if (chunk == nchunk - 1) {
            __syncthreads();  // every warp is done reading the buffer: it becomes the output staging area
            const int twi = t % tiles_w, rest = t / tiles_w;
            const int thi = rest % tiles_h, n = rest / tiles_h;
            const int oh = thi * TR + warp, ow0 = twi * TCOL;
#if LAYOUT_NHWC
            tc_store_row_nhwc(reinterpret_cast<act_t*>(s_buf) + warp * (TCOL * 64), acc, bv, lane, y, n, oh, ow0, co0,
                              OH, OW, CO, vec_out);
#else
            tc_store_row_nchw(reinterpret_cast<act_t*>(s_buf) + warp * (TCO * TC_NCHW_CO_STRIDE), acc, bv, lane, y, n,
                              oh, ow0, co0, OH, OW, CO, vec_out);
#endif
        }
        if (STAGES == 1) {  // stage s + 1 into the one buffer, once every warp is done with it
            __syncthreads();
            const int sn = s + 1, tn = blockIdx.x + (sn / nchunk) * gridDim.x;
            if (tn < ntiles) load_stage(tn, sn % nchunk, 0);
            cp_async_commit();
        }
        buf = buf + 1 == STAGES ? 0 : buf + 1;
    }
    cp_async_wait<0>();  // nothing left in flight when the block exits
}
// TC_WIDE_K1_BLOCKS [1]: resident blocks per SM conv2d_k1_tc_wide is built for (2: at most 128
// registers, no spills on sm_90; ncu of one block per SM, 206 registers: 12.5 % occupancy and 5.3
// cycles between a warp's instructions, a 1x1 stage being a few mma per warp). The 3x3 kernel
// keeps one: 117 KB of shared memory and 218 registers
#ifndef TC_WIDE_K1_BLOCKS
#define TC_WIDE_K1_BLOCKS 1
#endif
#define TC_WIDE_KERNEL(NAME, K, S, MINB)                                                                              \
    extern "C" __global__ void __launch_bounds__(TC_WIDE_THREADS, MINB)                                               \
        NAME(const act_t* __restrict__ x, const act_t* __restrict__ wp, const float* __restrict__ bias,            \
             act_t* __restrict__ y, int N, int CI, int IH, int IW, int CO, int OH, int OW, int PT, int PL,           \
             int tiles_h, int tiles_w, int nchunk) { HAL_PDL_ENTRY();                                                 \
        extern __shared__ __align__(16) unsigned char smem_raw[];                                                     \
        tc_wide_body<K, S>(smem_raw, x, wp, bias, y, N, CI, IH, IW, CO, OH, OW, PT, PL, tiles_h, tiles_w, nchunk);   \
    }
TC_WIDE_KERNEL(conv2d_k3_tc_wide, 3, 1, 1)
TC_WIDE_KERNEL(conv2d_k1_tc_wide, 1, 1, TC_WIDE_K1_BLOCKS)

// The k-loop of the float16 GEMM kernels (conv2d_k1_gemm, conv2d_k1_gemm_nchw and their persistent
// variants): stage kt lives in buffer kt % STAGES; the first STAGES - 1 go out before the loop
// (tc_gemm_prologue: one commit group each, empty past the last, so that the group count stays exact).
// load_stage(kt, buf) issues stage kt's copies into buffer buf; frags(buf, kk, af, bf) reads the A and
// B fragments of k step kk (16 channels) from buffer buf. tc_gemm_k_steps runs the loop after the
// prologue: on return every copy has landed and every warp is done reading the stages, so they can
// become the output staging area or take the next tile's prologue. tc_gemm_k_loop is the two in a row.
template <int STAGES, class LoadStage>
__device__ __forceinline__ void tc_gemm_prologue(int KT, LoadStage&& load_stage) {
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) load_stage(s, s);
        cp_async_commit();
    }
}
template <int STAGES, int BK, int MT, int NT, class LoadStage, class Frags>
__device__ __forceinline__ void tc_gemm_k_steps(float (&acc)[MT][NT][4], int KT, LoadStage&& load_stage,
                                                Frags&& frags) {
#pragma unroll
    for (int a = 0; a < MT; ++a)
#pragma unroll
        for (int b = 0; b < NT; ++b)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[a][b][e] = 0.0f;
    int buf = 0, nbuf = STAGES - 1;
    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();  // stage kt has landed; every warp is done with stage kt - 1's buffer
        if (kt + STAGES - 1 < KT) load_stage(kt + STAGES - 1, nbuf);  // into stage kt - 1's buffer
        cp_async_commit();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {  // 16 channels per k step
            unsigned af[MT][4], bf[NT][2];
            frags(buf, kk, af, bf);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) mma16816(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
        }
        buf = buf + 1 == STAGES ? 0 : buf + 1;
        nbuf = nbuf + 1 == STAGES ? 0 : nbuf + 1;
    }
    cp_async_wait<0>();  // (the trailing groups are empty)
    __syncthreads();
}
template <int STAGES, int BK, int MT, int NT, class LoadStage, class Frags>
__device__ __forceinline__ void tc_gemm_k_loop(float (&acc)[MT][NT][4], int KT, LoadStage&& load_stage,
                                               Frags&& frags) {
    tc_gemm_prologue<STAGES>(KT, load_stage);
    tc_gemm_k_steps<STAGES, BK>(acc, KT, load_stage, frags);
}
// The persistent tile walk of the GEMM kernels (K1G_PERSIST, K1N_PERSIST): block b takes tiles b,
// b + grid, ... (the launcher's grid is at most the tile count, and tiles + grid < 2^31). After a
// tile's k steps, finish() loads what its epilogue needs (its bias: loaded then rather than kept in
// registers across the k steps, which spilled) and returns that epilogue, the tile's coordinates bound;
// seek(t) points the copies at tile t. Every warp is done with the stage buffers by then, so the next
// tile's first stages go out under this tile's epilogue, whose staging buffer the k steps never touch
// (the barriers in them order its reuse after the last tile's stores read it). Every thread, one past
// the data too, takes part in every barrier: no early return.
template <int STAGES, int BK, int MT, int NT, class LoadStage, class Frags, class Finish, class Seek>
__device__ __forceinline__ void tc_gemm_tiles(int KT, unsigned ntiles, LoadStage&& load_stage, Frags&& frags,
                                              Finish&& finish, Seek&& seek) {
    tc_gemm_prologue<STAGES>(KT, load_stage);
    for (unsigned t = blockIdx.x;;) {
        float acc[MT][NT][4];
        tc_gemm_k_steps<STAGES, BK>(acc, KT, load_stage, frags);
        auto epilogue = finish();
        t += gridDim.x;
        const bool more = t < ntiles;
        if (more) {
            seek(t);
            tc_gemm_prologue<STAGES>(KT, load_stage);
        }
        epilogue(acc);
        if (!more) break;
    }
}

#if LAYOUT_NHWC
// 3x3 stride 2 (a ResNet's downsampling conv; session 21): the patch of an 8 x 32 output tile is
// 17 x 65 input pixels, 107,584 bytes a stage with the weights (two stages: 215,168 bytes, sm_90's
// 227 KB; the launcher checks the device's limit); with TC_WIDE_ROWS 4, 9 x 65 pixels, 74,304 bytes
// (two stages fit sm_80's 163 KB). NCHW's staged rows and transposed patch do not fit beside them.
TC_WIDE_KERNEL(conv2d_k3s2_tc_wide, 3, 2, 1)
// 1x1 stride 2 (a ResNet's projection shortcut): a 15 x 63 patch of which the even rows and
// columns (8 x 32 pixels) are copied, 60,480 + 4,096 bytes a stage
TC_WIDE_KERNEL(conv2d_k1s2_tc_wide, 1, 2, TC_WIDE_K1_BLOCKS)

// ---------------------------------------------------------------------------------
// float16 NHWC 1x1 convolution as a GEMM on tensor cores (CONV_K1_GEMM; session 22): any stride and
// padding, C_in % 8 == 0. Y[M = N*OH*OW, CO] = X'[M, CI] * W^T, where row m of X' is the input pixel
// (n, oh*SH - PT, ow*SW - PL) (zero outside the image) and W is the weight [CO][CI] as it lies: its
// rows are K-contiguous, the "col" B operand of mma.sync and a plain ldmatrix (no weight pass).
//   Block tile 128 pixels (M) x K1G_BN output channels (N) x 32 input channels (K), 8 warps: BN 128
//   as 2 x 4 warps of 64 x 32, BN 64 as 4 x 2 of 32 x 32 (6 or 4 ldmatrix.x4 per 16 or 8 mma a
//   16-channel step). K1G_STAGES cp.async stages of [128 pixels][32 ch] + [BN channels][32 ch]
//   (16 + 8 KB for BN 128), STAGES - 1 in flight under the mma; copies are 16 bytes, zero-filled for
//   pixels outside the image or past M, channels past C_in and output channels past C_out. Each
//   64-byte row's 16-byte chunks are XOR-swizzled by (row / 2) % 4 (tcw_at): the 8 rows an ldmatrix
//   reads fall in 8 different bank groups. A thread's copy rows (pixel -> input offset) are worked
//   out once per block; the K loop only adds the chunk's channel offset.
//   Grid: one block per (M tile, N tile), the N tiles of one M tile adjacent (blocks that read the
//   same input rows run together, the later ones from L2). conv2d_k1_gemm_persist (K1G_PERSIST 1; _cs: 2,
//   streaming stores): MINB blocks an SM x the SMs, block b taking tiles b, b + grid, ... (the same order:
//   the tiles running at once are still adjacent); after a tile's k steps it issues the next tile's first
//   STAGES - 1 stages, then runs this tile's epilogue through a staging buffer of its own (k1g::PSMEM).
//   Epilogue: bias (float, may be NULL), ReLU (FUSE_RELU), float16 through shared memory
//   ([128][BN], 16-byte chunks XOR row % 8: conflict-free both ways) to 16-byte stores along each
//   output pixel's channels (C_out % 8 == 0 and y 16-byte aligned), scalar stores otherwise.
// Needs x and w 16-byte aligned, C_in % 8 == 0, N*OH*OW + 128 < 2^31; shared memory
// max(STAGES x (128 + BN) x 64, 128 x BN x 2) bytes (k1g::SMEM: 49,152 for 3 stages of BN 128); the
// persistent variants STAGES x (128 + BN) x 64 + 128 x BN x 2 (k1g::PSMEM: 81,920 for 3 stages of BN 128)
// and tiles + grid < 2^31.
// ---------------------------------------------------------------------------------
// K1G_STAGES [3]: stage buffers of conv2d_k1_gemm (2..4); K1G_BN [128]: its tile's output channels
// (64 or 128; the launcher builds 64 wherever C_out <= 64)
#ifndef K1G_STAGES
#define K1G_STAGES 3
#endif
#ifndef K1G_BN
#define K1G_BN 128
#endif
namespace k1g {
constexpr int BM = 128, BN = K1G_BN, BK = 32, STAGES = K1G_STAGES, THREADS = 256;
static_assert(BN == 64 || BN == 128, "K1G_BN: 64 or 128");
static_assert(STAGES >= 2 && STAGES <= 4, "K1G_STAGES: 2, 3 or 4");
constexpr int WARPS_N = BN == 128 ? 4 : 2, WARPS_M = 8 / WARPS_N;
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N, MT = WM / 16, NT = WN / 8;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int OUT_BYTES = BM * BN * 2;
constexpr int SMEM = STAGES * STAGE_BYTES > OUT_BYTES ? STAGES * STAGE_BYTES : OUT_BYTES;
static_assert(SMEM >= OUT_BYTES && SMEM <= 227 * 1024, "k1g::SMEM: the staged output tile fits");
// 16-byte copies a thread makes per stage: rows tid / 4 + 64 i, chunk tid % 4
constexpr int A_LOADS = BM * (BK / 8) / THREADS, B_LOADS = BN * (BK / 8) / THREADS;
constexpr int ROW_STEP = THREADS / (BK / 8);
// resident blocks per SM the registers allow: 2 (128 registers) for BN 128, 3 (85) for BN 64
constexpr int MINB = BN == 128 ? 2 : 3;
// the persistent variants (K1G_PERSIST): the stages and the output staging buffer side by side; MINB blocks
// of it (+ 1 KB each, the system's) fit sm_90's 228 KB an SM (4 stages: 2 x 97 KB for BN 128, 3 x 65 for 64)
constexpr int PSMEM = STAGES * STAGE_BYTES + OUT_BYTES;
static_assert(MINB * (PSMEM + 1024) <= 228 * 1024, "k1g::PSMEM: MINB persistent blocks an SM on sm_90");
}  // namespace k1g

// conv2d_k1_gemm's body. PERSIST 0: the block's one tile (blockIdx.x). 1: persistent (K1G_PERSIST), the block
// walks tiles blockIdx.x + i gridDim.x and issues the next tile's first STAGES - 1 stages before this tile's
// epilogue, which stages the results in their own buffer past the stages (k1g::PSMEM). 2: as 1, with
// streaming stores (st.global.cs: y is not read again by this kernel).
template <int PERSIST>
__device__ __forceinline__ void k1g_body(unsigned char* smem_raw, const act_t* __restrict__ x,
                                         const act_t* __restrict__ w, const float* __restrict__ bias,
                                         act_t* __restrict__ y, int N, int CI, int IH, int IW, int CO, int OH,
                                         int OW, int SH, int SW, int PT, int PL) {
    using namespace k1g;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp % WARPS_M, wn = warp / WARPS_M;
    const int ntn = (CO + BN - 1) / BN;
    unsigned t = blockIdx.x;
    int mtile = t / ntn, ntile = t - mtile * ntn;
    int m0 = mtile * BM, n0 = ntile * BN;
    const int OHW = OH * OW, M = N * OHW;
    const int KT = (CI + BK - 1) / BK;

    // this thread's copy rows: pixels m0 + r0 + ROW_STEP i (NULL: a zero row), output channels
    // n0 + r0 + ROW_STEP i, each at its 16-byte chunk c16 of the stage's 32 channels
    const int c16 = tid & 3, r0 = tid >> 2;
    const act_t* a_src[A_LOADS];
    const act_t* b_src[B_LOADS];
    auto copy_rows = [&]() {
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            const int m = m0 + r0 + ROW_STEP * i;
            a_src[i] = nullptr;
            if (m < M) {
                const int n = m / OHW, rem = m - n * OHW;
                const int oh = rem / OW, ow = rem - oh * OW;
                const int ih = oh * SH - PT, iw = ow * SW - PL;
                if ((unsigned)ih < (unsigned)IH && (unsigned)iw < (unsigned)IW)
                    a_src[i] = x + (((long long)n * IH + ih) * IW + iw) * CI + c16 * 8;
            }
        }
#pragma unroll
        for (int i = 0; i < B_LOADS; ++i) {
            const int co = n0 + r0 + ROW_STEP * i;
            b_src[i] = co < CO ? w + (long long)co * CI + c16 * 8 : nullptr;
        }
    };
    copy_rows();
    // stage kt (input channels 32 kt ..) into buffer `buf`
    auto load_stage = [&](int kt, int buf) {
        unsigned char* sa = smem_raw + buf * STAGE_BYTES;
        unsigned char* sb = sa + A_BYTES;
        const int k0 = kt * BK;
        const bool kin = k0 + c16 * 8 < CI;  // C_in % 8 == 0: a chunk is all inside or all past C_in
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            const bool valid = kin && a_src[i] != nullptr;
            cp_async16_zfill(sa + tcw_at(r0 + ROW_STEP * i, c16), valid ? a_src[i] + k0 : x, valid);
        }
#pragma unroll
        for (int i = 0; i < B_LOADS; ++i) {
            const bool valid = kin && b_src[i] != nullptr;
            cp_async16_zfill(sb + tcw_at(r0 + ROW_STEP * i, c16), valid ? b_src[i] + k0 : w, valid);
        }
    };

    // the bias of the lane's accumulator columns: n0 + wn WN + 8 nt + 2 (lane % 4) + {0, 1}
    float bv[NT][2];
    auto load_bias = [&]() {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int co = n0 + wn * WN + nt * 8 + (lane & 3) * 2 + e;
                bv[nt][e] = (bias && co < CO) ? bias[co] : 0.0f;
            }
    };
    if constexpr (PERSIST == 0) load_bias();  // (the persistent kernels: after each tile's k steps)

    // per-lane ldmatrix rows: A = pixels (matrices: rows 0-7 / 8-15 x channels 0-7 / 8-15), B = output
    // channels (matrices: channels 0-7 x k 0-7, 8-15, then channels 8-15)
    const int a_row = wm * WM + (lane & 7) + ((lane >> 3) & 1) * 8, a_half = lane >> 4;
    const int b_row = wn * WN + (lane & 7) + (lane >> 4) * 8, b_half = (lane >> 3) & 1;
    const unsigned smem_u = smem_u32(smem_raw);
    auto frags = [&](int buf, int kk, unsigned (&af)[MT][4], unsigned (&bf)[NT][2]) {
        const unsigned a_u = smem_u + buf * STAGE_BYTES, b_u = a_u + A_BYTES;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            ldsm_x4(a_u + tcw_at(a_row + mt * 16, kk * 2 + a_half), af[mt][0], af[mt][1], af[mt][2], af[mt][3]);
#pragma unroll
        for (int np = 0; np < NT / 2; ++np)
            ldsm_x4(b_u + tcw_at(b_row + np * 16, kk * 2 + b_half), bf[2 * np][0], bf[2 * np][1],
                    bf[2 * np + 1][0], bf[2 * np + 1][1]);
    };

    // the tile at (tm0, tn0) out of acc, through `stage`
    auto epilogue = [&](float (&acc)[MT][NT][4], act_t* stage, int tm0, int tn0) {
        // results -> [128 pixels][BN channels] float16, chunk ch of row r at (ch ^ (r % 8)): a lane holds
        // pixels lane / 4 (+ 8) of each m16 tile, channels 2 (lane % 4) + {0, 1} of each n8 tile
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hsel = 0; hsel < 2; ++hsel) {
                const int r = wm * WM + mt * 16 + (lane >> 2) + hsel * 8;
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const int ch = wn * (WN / 8) + nt;
                    *reinterpret_cast<TC_PAIR_T*>(stage + r * BN + ((ch ^ (r & 7)) << 3) + (lane & 3) * 2) =
                        TC_PAIR(out_act(acc[mt][nt][hsel * 2] + bv[nt][0]),
                                          out_act(acc[mt][nt][hsel * 2 + 1] + bv[nt][1]));
                }
            }
        __syncthreads();
        // 16-byte chunks out: consecutive threads take consecutive chunks of a pixel's channels (output
        // pixel m's channels start at m * CO in NHWC)
        const bool vec_out = (CO % 8 == 0) && aligned16(y);
        constexpr int CPR = BN / 8;
#pragma unroll
        for (int it = 0; it < BM * CPR / THREADS; ++it) {
            const int i = it * THREADS + tid, r = i / CPR, ch = i % CPR;
            const int m = tm0 + r, co = tn0 + ch * 8;
            if (m >= M || co >= CO) continue;
            const uint4 u = *reinterpret_cast<const uint4*>(stage + r * BN + ((ch ^ (r & 7)) << 3));
            act_t* yp = y + (long long)m * CO + co;
            if (vec_out) {
                if constexpr (PERSIST == 2)
                    __stcs(reinterpret_cast<uint4*>(yp), u);
                else
                    *reinterpret_cast<uint4*>(yp) = u;
            } else {
                const act_t* h = reinterpret_cast<const act_t*>(&u);
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    if (co + j < CO) yp[j] = h[j];
            }
        }
    };

    if constexpr (PERSIST == 0) {
        float acc[MT][NT][4];
        tc_gemm_k_loop<STAGES, BK>(acc, KT, load_stage, frags);
        epilogue(acc, reinterpret_cast<act_t*>(smem_raw), m0, n0);
    } else {
        act_t* const out = reinterpret_cast<act_t*>(smem_raw + STAGES * STAGE_BYTES);
        tc_gemm_tiles<STAGES, BK, MT, NT>(
            KT, (unsigned)((M + BM - 1) / BM * ntn), load_stage, frags,
            [&]() {
                load_bias();
                return [&, tm0 = m0, tn0 = n0](float (&acc)[MT][NT][4]) { epilogue(acc, out, tm0, tn0); };
            },
            [&](unsigned t) {
                mtile = t / ntn;
                ntile = t - mtile * ntn;
                m0 = mtile * BM;
                n0 = ntile * BN;
                copy_rows();
            });
    }
}

// the entry points: PERSIST 0 (one block a tile), 1 and 2 (K1G_PERSIST: the launcher's grid, resident
// blocks x SMs at most; shared memory k1g::PSMEM; 2 with streaming stores)
#define K1G_KERNEL(NAME, PERSIST)                                                                                \
    extern "C" __global__ void __launch_bounds__(256, k1g::MINB)                                                 \
        NAME(const act_t* __restrict__ x, const act_t* __restrict__ w, const float* __restrict__ bias,        \
             act_t* __restrict__ y, int N, int CI, int IH, int IW, int CO, int OH, int OW, int SH, int SW,      \
             int PT, int PL) {                                                                                   \
        HAL_PDL_ENTRY();                                                                                         \
        extern __shared__ __align__(16) unsigned char smem_raw[];                                                \
        k1g_body<PERSIST>(smem_raw, x, w, bias, y, N, CI, IH, IW, CO, OH, OW, SH, SW, PT, PL);                   \
    }
K1G_KERNEL(conv2d_k1_gemm, 0)
K1G_KERNEL(conv2d_k1_gemm_persist, 1)
K1G_KERNEL(conv2d_k1_gemm_persist_cs, 2)
#endif

#if !LAYOUT_NHWC
// ---------------------------------------------------------------------------------
// float16 NCHW 1x1 convolution, stride 1, no padding, as a GEMM on tensor cores (CONV_K1_NCHW; session 23):
// no transposes, no workspace. Per image n: Y[n][co][p] = bias[co] + sum_ci W[co][ci] X[n][ci][p]. GEMM rows
// (M) are the output channels (A = W as it lies: [co][ci], K-contiguous, a plain ldmatrix), columns (N) the
// pixels flattened over (n, p) (B = X as [ci][p], N-contiguous: ldmatrix.trans gives the "col" B fragments),
// K = C_in. H*W % 8 == 0, so every 16-byte chunk of 8 pixels lies inside one image; a tile may end one
// image and start the next (each chunk's image decoded once per block).
//   Block tile K1N_BM output channels x 128 pixels x 32 input channels, 8 warps as 2 (M) x 4 (N) of
//   (K1N_BM / 2) x 32 (BM 128: 4 ldmatrix.x4 + 2 ldmatrix.x4.trans per 16 mma a 16-channel step).
//   K1N_STAGES cp.async stages of [BM co][32 ci] (64-byte rows, tcw_at's swizzle) and [32 ci][128 px]
//   (256-byte rows, 16-byte chunk c of row r at c ^ (r % 8): the 8 rows an ldmatrix.trans reads fall in 8
//   bank groups); copies are 16 bytes, zero-filled past C_out, C_in and the last pixel.
//   Grid: one block per (pixel tile, channel tile), the channel tiles of a pixel tile adjacent.
//   conv2d_k1_gemm_nchw_persist (K1N_PERSIST 1; _cs: 2, streaming stores): MINB blocks an SM x the SMs, block b
//   taking tiles b, b + grid, ... (the same order); after a tile's k steps it issues the next tile's first
//   STAGES - 1 stages, then runs this tile's epilogue through a staging buffer of its own (k1n::PSMEM).
//   Epilogue: bias (float, may be NULL), ReLU (FUSE_RELU), float16 into the stage buffers as [BM][128 px]
//   (the same chunk swizzle), then 16-byte stores along each output channel's pixels.
// Needs x, w, y 16-byte aligned, C_in % 8 == 0, H*W % 8 == 0, N*H*W + 128 < 2^31; shared memory
// max(STAGES x (BM x 64 + 32 x 256), BM x 256) bytes (k1n::SMEM: 49,152 for 3 stages of BM 128); the
// persistent variants STAGES x (BM x 64 + 32 x 256) + BM x 256 (k1n::PSMEM: 81,920 for 3 stages of BM 128)
// and tiles + grid < 2^31.
// ---------------------------------------------------------------------------------
// K1N_STAGES [3]: stage buffers of conv2d_k1_gemm_nchw (2..4); K1N_BM [128]: its tile's output channels
// (64 or 128; the launcher builds 64 wherever C_out <= 64)
#ifndef K1N_STAGES
#define K1N_STAGES 3
#endif
#ifndef K1N_BM
#define K1N_BM 128
#endif
namespace k1n {
constexpr int BM = K1N_BM, BN = 128, BK = 32, STAGES = K1N_STAGES, THREADS = 256;
static_assert(BM == 64 || BM == 128, "K1N_BM: 64 or 128");
static_assert(STAGES >= 2 && STAGES <= 4, "K1N_STAGES: 2, 3 or 4");
constexpr int WARPS_M = 2, WARPS_N = 4;
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N, MT = WM / 16, NT = WN / 8;
constexpr int B_ROW = BN * 2;  // bytes of a [ci][128 px] row (and of a staged output row)
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BK * B_ROW, STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int OUT_BYTES = BM * B_ROW;
constexpr int SMEM = STAGES * STAGE_BYTES > OUT_BYTES ? STAGES * STAGE_BYTES : OUT_BYTES;
static_assert(SMEM >= OUT_BYTES && SMEM <= 227 * 1024, "k1n::SMEM: the staged output tile fits");
// weight copies a thread makes per stage: rows tid / 4 + 64 i, chunk tid % 4
constexpr int A_LOADS = BM * (BK / 8) / THREADS, A_ROW_STEP = THREADS / (BK / 8);
// input copies: pixel chunk tid % 16 of k rows tid / 16 + 16 i
constexpr int CPR = BN / 8, B_LOADS = BK * CPR / THREADS, B_ROW_STEP = THREADS / CPR;
static_assert(THREADS % CPR == 0 && (BM * CPR) % THREADS == 0, "k1n: a thread keeps its pixel chunk");
constexpr int MINB = BM == 128 ? 2 : 3;
// the persistent variants (K1N_PERSIST): the stages and the output staging buffer side by side; MINB blocks
// of it (+ 1 KB each, the system's) fit sm_90's 228 KB an SM (4 stages: 2 x 97 KB for BM 128, 3 x 65 for 64)
constexpr int PSMEM = STAGES * STAGE_BYTES + OUT_BYTES;
static_assert(MINB * (PSMEM + 1024) <= 228 * 1024, "k1n::PSMEM: MINB persistent blocks an SM on sm_90");
// 16-byte chunk c of 256-byte row r (an input k row, or a staged output channel), XOR-swizzled by r % 8
__device__ __forceinline__ int row_at(int row, int chunk) { return row * B_ROW + ((chunk ^ (row & 7)) << 4); }
}  // namespace k1n

// conv2d_k1_gemm_nchw's body. PERSIST 0: the block's one tile (blockIdx.x). 1: persistent (K1N_PERSIST), the
// block walks tiles blockIdx.x + i gridDim.x and issues the next tile's first STAGES - 1 stages before this
// tile's epilogue, which stages the results in their own buffer past the stages (k1n::PSMEM). 2: as 1, with
// streaming stores (st.global.cs: y is not read again by this kernel).
template <int PERSIST>
__device__ __forceinline__ void k1n_body(unsigned char* smem_raw, const act_t* __restrict__ x,
                                         const act_t* __restrict__ w, const float* __restrict__ bias,
                                         act_t* __restrict__ y, int N, int CI, int HW, int CO) {
    using namespace k1n;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp % WARPS_M, wn = warp / WARPS_M;
    const int ntm = (CO + BM - 1) / BM;
    unsigned t = blockIdx.x;
    int ptile = t / ntm, mtile = t - ptile * ntm;
    int co0 = mtile * BM, p0 = ptile * BN;
    const int NP = N * HW;  // pixels of the batch (a multiple of 8)
    const int KT = (CI + BK - 1) / BK;

    // this thread's copies: weight rows co0 + r0 + 64 i at chunk c16 of the stage's 32 channels (NULL: a zero
    // row), and the 8 pixels p0 + 8 pc of k rows kr0 + 16 i (b_src: their channel 0, NULL past the batch)
    const int c16 = tid & 3, r0 = tid >> 2;
    const act_t* a_src[A_LOADS];
    auto weight_rows = [&]() {
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            const int co = co0 + r0 + A_ROW_STEP * i;
            a_src[i] = co < CO ? w + (long long)co * CI + c16 * 8 : nullptr;
        }
    };
    weight_rows();
    const int pc = tid & (CPR - 1), kr0 = tid / CPR;
    const act_t* b_src;
    long long y_off;  // the chunk's offset in y at output channel 0 (-1: past the batch)
    auto pixel_chunk = [&]() {
        const int pix = p0 + pc * 8;
        b_src = nullptr;
        y_off = -1;
        if (pix < NP) {
            const int n = pix / HW, p = pix - n * HW;
            b_src = x + (long long)n * CI * HW + p;
            y_off = (long long)n * CO * HW + p;
        }
    };
    pixel_chunk();
    // stage kt (input channels 32 kt ..) into buffer `buf`
    auto load_stage = [&](int kt, int buf) {
        unsigned char* sa = smem_raw + buf * STAGE_BYTES;
        unsigned char* sb = sa + A_BYTES;
        const int k0 = kt * BK;
        const bool kin = k0 + c16 * 8 < CI;  // C_in % 8 == 0: a chunk is all inside or all past C_in
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            const bool valid = kin && a_src[i] != nullptr;
            cp_async16_zfill(sa + tcw_at(r0 + A_ROW_STEP * i, c16), valid ? a_src[i] + k0 : w, valid);
        }
#pragma unroll
        for (int i = 0; i < B_LOADS; ++i) {
            const int kr = kr0 + B_ROW_STEP * i, ci = k0 + kr;
            const bool valid = b_src != nullptr && ci < CI;
            cp_async16_zfill(sb + row_at(kr, pc), valid ? b_src + (long long)ci * HW : x, valid);
        }
    };

    // the bias of the lane's accumulator rows: co0 + wm WM + 16 mt + lane / 4 (+ 8)
    float bv[MT][2];
    auto load_bias = [&]() {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int co = co0 + wm * WM + mt * 16 + (lane >> 2) + h * 8;
                bv[mt][h] = (bias && co < CO) ? bias[co] : 0.0f;
            }
    };
    if constexpr (PERSIST == 0) load_bias();  // (the persistent kernels: after each tile's k steps)

    // per-lane ldmatrix rows: A = output channels (matrices: rows 0-7 / 8-15 x k 0-7, then k 8-15); B (.trans)
    // = k rows (matrices: k 0-7 / 8-15 x pixels 0-7, then pixels 8-15), each transposed into a B fragment
    const int a_row = wm * WM + (lane & 7) + ((lane >> 3) & 1) * 8, a_half = lane >> 4;
    const int b_krow = (lane & 7) + ((lane >> 3) & 1) * 8, b_chunk = wn * (WN / 8) + (lane >> 4);
    const unsigned smem_u = smem_u32(smem_raw);
    auto frags = [&](int buf, int kk, unsigned (&af)[MT][4], unsigned (&bf)[NT][2]) {
        const unsigned a_u = smem_u + buf * STAGE_BYTES, b_u = a_u + A_BYTES;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            ldsm_x4(a_u + tcw_at(a_row + mt * 16, kk * 2 + a_half), af[mt][0], af[mt][1], af[mt][2], af[mt][3]);
#pragma unroll
        for (int np = 0; np < NT / 2; ++np)
            ldsm_x4_trans(b_u + row_at(kk * 16 + b_krow, b_chunk + np * 2), bf[2 * np][0], bf[2 * np][1],
                          bf[2 * np + 1][0], bf[2 * np + 1][1]);
    };

    // the tile of output channels tco0.. out of acc through `stage`, this thread's chunk at ty_off
    auto epilogue = [&](float (&acc)[MT][NT][4], unsigned char* stage, int tco0, long long ty_off) {
        // results -> [BM channels][128 pixels] float16, chunk ch of row r at (ch ^ (r % 8)): a lane holds
        // channels lane / 4 (+ 8) of each m16 tile, pixels 2 (lane % 4) + {0, 1} of each n8 tile
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hsel = 0; hsel < 2; ++hsel) {
                const int r = wm * WM + mt * 16 + (lane >> 2) + hsel * 8;
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const int ch = wn * (WN / 8) + nt;
                    *reinterpret_cast<TC_PAIR_T*>(stage + row_at(r, ch) + (lane & 3) * 4) =
                        TC_PAIR(out_act(acc[mt][nt][hsel * 2] + bv[mt][hsel]),
                                          out_act(acc[mt][nt][hsel * 2 + 1] + bv[mt][hsel]));
                }
            }
        __syncthreads();
        // 16-byte chunks out: a thread keeps its pixel chunk pc (rows tid / 16 + 16 it); a warp writes two
        // channels' 256 contiguous bytes (where the tile lies in one image)
        if (ty_off < 0) return;
#pragma unroll
        for (int it = 0; it < BM * CPR / THREADS; ++it) {
            const int r = it * (THREADS / CPR) + kr0, co = tco0 + r;
            if (co >= CO) break;
            uint4* yp = reinterpret_cast<uint4*>(y + ty_off + (long long)co * HW);
            const uint4 u = *reinterpret_cast<const uint4*>(stage + row_at(r, pc));
            if constexpr (PERSIST == 2)
                __stcs(yp, u);
            else
                *yp = u;
        }
    };

    if constexpr (PERSIST == 0) {
        float acc[MT][NT][4];
        tc_gemm_k_loop<STAGES, BK>(acc, KT, load_stage, frags);
        epilogue(acc, smem_raw, co0, y_off);
    } else {
        unsigned char* const out = smem_raw + STAGES * STAGE_BYTES;
        tc_gemm_tiles<STAGES, BK, MT, NT>(
            KT, (unsigned)((NP + BN - 1) / BN * ntm), load_stage, frags,
            [&]() {
                load_bias();
                return [&, tco0 = co0, ty_off = y_off](float (&acc)[MT][NT][4]) { epilogue(acc, out, tco0, ty_off); };
            },
            [&](unsigned t) {
                const int was_co0 = co0, was_p0 = p0;
                ptile = t / ntm;
                mtile = t - ptile * ntm;
                co0 = mtile * BM;
                p0 = ptile * BN;
                if (co0 != was_co0) weight_rows();  // the copies' rows change only with their tile
                if (p0 != was_p0) pixel_chunk();
            });
    }
}

// the entry points: PERSIST 0 (one block a tile), 1 and 2 (K1N_PERSIST: the launcher's grid, resident
// blocks x SMs at most; shared memory k1n::PSMEM; 2 with streaming stores)
#define K1N_KERNEL(NAME, PERSIST)                                                                                \
    extern "C" __global__ void __launch_bounds__(256, k1n::MINB)                                                 \
        NAME(const act_t* __restrict__ x, const act_t* __restrict__ w, const float* __restrict__ bias,        \
             act_t* __restrict__ y, int N, int CI, int HW, int CO) {                                            \
        HAL_PDL_ENTRY();                                                                                         \
        extern __shared__ __align__(16) unsigned char smem_raw[];                                                \
        k1n_body<PERSIST>(smem_raw, x, w, bias, y, N, CI, HW, CO);                                               \
    }
K1N_KERNEL(conv2d_k1_gemm_nchw, 0)
K1N_KERNEL(conv2d_k1_gemm_nchw_persist, 1)
K1N_KERNEL(conv2d_k1_gemm_nchw_persist_cs, 2)
#endif

// ---------------------------------------------------------------------------------
// float16 dense convs with few input channels (K = C_in KH KW <= 256: the 7x7 stride-2 stem of 3
// channels, 3x3 / 5x5 stems) as an implicit GEMM on tensor cores (CONV_IM2COL; session 26). Before it
// they ran on the CUDA-core tiled direct kernel (H200: the 7x7/2 3->64 stem of 32x3x224x224 0.64 ms,
// cuDNN 0.089 NHWC / 0.188 NCHW). Any stride, dilation, padding and either layout, natively.
//   GEMM: rows = 32 output pixels of one output row (a warp's tile), columns = 64 output channels
//   (blockIdx.y's chunk), k = (ci, ky, kx) as the weights lie ([co][ci][kh][kw]), padded with zeros
//   to KP, a multiple of 16. Each warp gathers its tile's im2col rows itself, lane = pixel, 8 k a
//   16-byte shared store (row pitch KP + 8 halves: an odd count of 16-byte chunks, so neither
//   those stores nor the ldmatrix reads conflict), with the per-k offsets from a table the block
//   builds once; then 2 x 8 mma per 16 k, and the results leave through the same shared rows as
//   whole 16-byte stores (tc_store_row_*). Persistent blocks of 4 warps keep the 64 channels'
//   weights in shared memory; warps walk tiles on their own (no block barrier after the start).
namespace im2c {
constexpr int WARPS = 4, TCO = 64;  // (the largest K, 256, is the launcher's: _IM2COL_KMAX)
// 8 halves' bits as one 16-byte shared store
__device__ __forceinline__ uint4 pack8(const unsigned short (&v)[8]) {
    return make_uint4(v[0] | ((unsigned)v[1] << 16), v[2] | ((unsigned)v[3] << 16), v[4] | ((unsigned)v[5] << 16),
                      v[6] | ((unsigned)v[7] << 16));
}
}  // namespace im2c
// (A twin that first copied each segment's input rows into shared memory and gathered from there, session
// 26, was 2.3x slower in NCHW and 2.0x in NHWC on the stem: session 27; removed.)
struct Im2colParams {
    int N, CI, IH, IW, CO, OH, OW, KH, KW, SH, SW, DH, DW, PT, PL;
    int K, KP, pitch, region;  // real and padded k, shared row pitch and a warp's region (halves)
    int segs, tiles;           // 32-pixel segments of an output row, N OH segs tiles
};
extern "C" __global__ void __launch_bounds__(im2c::WARPS * 32)
    conv2d_im2col_tc(const act_t* __restrict__ x, const act_t* __restrict__ w, const float* __restrict__ bias,
                     act_t* __restrict__ y, Im2colParams p) {
    HAL_PDL_ENTRY();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    using namespace im2c;
    int4* s_tab = reinterpret_cast<int4*>(smem_raw);      // per k: dy, dx, x offset, -
    act_t* s_w = reinterpret_cast<act_t*>(s_tab + p.KP);  // [co][k], row pitch p.pitch
    act_t* s_a = s_w + TCO * p.pitch;                      // per warp: [pixel][k] rows, then the output stage
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int co0 = blockIdx.y * TCO;
    const int taps = p.KH * p.KW;
    for (int k = tid; k < p.KP; k += blockDim.x) {
        int4 t = make_int4(1 << 28, 0, 0, 0);  // padding k: a row no pixel reaches (reads as zero)
        if (k < p.K) {
            const int c = k / taps, r = k - c * taps, ky = r / p.KW, kx = r - ky * p.KW;
            const int dy = ky * p.DH, dx = kx * p.DW;
#if LAYOUT_NHWC
            t = make_int4(dy, dx, (dy * p.IW + dx) * p.CI + c, 0);
#else
            t = make_int4(dy, dx, (c * p.IH + dy) * p.IW + dx, 0);
#endif
        }
        s_tab[k] = t;
    }
    for (int f = tid; f < TCO * p.KP; f += blockDim.x) {
        const int co = f / p.KP, k = f - co * p.KP;
        s_w[co * p.pitch + k] = (k < p.K && co0 + co < p.CO) ? w[(long long)(co0 + co) * p.K + k] : TC_ZERO;
    }
    __syncthreads();
    float bv[8][2];
    tc_bias_frag(bias, co0, p.CO, lane, bv);
    act_t* s_mine = s_a + warp * p.region;
    const int ksteps = p.KP >> 4;
#if LAYOUT_NHWC
    const bool vec_out = aligned16(y) && p.CO % 8 == 0;
#else
    const bool vec_out = aligned16(y) && p.OW % 8 == 0;
#endif
    for (int t = blockIdx.x * WARPS + warp; t < p.tiles; t += gridDim.x * WARPS) {
        const int seg = t % p.segs, rest = t / p.segs, oh = rest % p.OH, n = rest / p.OH;
        const int ow0 = seg * 32, ow = ow0 + lane;
        const int iy0 = oh * p.SH - p.PT, ix0 = ow * p.SW - p.PL;
        const bool pix_ok = ow < p.OW;
#if LAYOUT_NHWC
        const act_t* xn = x + (long long)n * p.IH * p.IW * p.CI;
        const long long pix = ((long long)iy0 * p.IW + ix0) * p.CI;
#else
        const act_t* xn = x + (long long)n * p.CI * p.IH * p.IW;
        const long long pix = (long long)iy0 * p.IW + ix0;
#endif
        __syncwarp();  // every lane is done with the previous tile's stage
        for (int kc = 0; kc < p.KP; kc += 8) {
            unsigned short v[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const int4 tb = s_tab[kc + j];
                const int iy = iy0 + tb.x, ix = ix0 + tb.y;
                v[j] = 0;
                if (pix_ok && (unsigned)iy < (unsigned)p.IH && (unsigned)ix < (unsigned)p.IW)
                    v[j] = TC_BITS(xn[pix + tb.z]);
            }
            *reinterpret_cast<uint4*>(s_mine + lane * p.pitch + kc) = pack8(v);
        }
        __syncwarp();
        float acc[2][8][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
        // ldmatrix rows: A = pixel (lane % 16) of each m tile at k + 8 (lane / 16); B = channel
        // 8 (lane / 16) + lane % 8 of each pair of n tiles at k + 8 ((lane / 8) % 2)
        const unsigned a_addr = smem_u32(s_mine + (lane & 15) * p.pitch + (lane >> 4) * 8);
        const unsigned b_addr = smem_u32(s_w + ((lane >> 4) * 8 + (lane & 7)) * p.pitch + ((lane >> 3) & 1) * 8);
        for (int ks = 0; ks < ksteps; ++ks) {
            unsigned af[2][4], bf[8][2];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
                ldsm_x4(a_addr + 2 * (mt * 16 * p.pitch + ks * 16), af[mt][0], af[mt][1], af[mt][2], af[mt][3]);
#pragma unroll
            for (int np = 0; np < 4; ++np)
                ldsm_x4(b_addr + 2 * (np * 16 * p.pitch + ks * 16), bf[2 * np][0], bf[2 * np][1], bf[2 * np + 1][0],
                        bf[2 * np + 1][1]);
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                for (int nt = 0; nt < 8; ++nt) mma16816(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
        }
        __syncwarp();  // the tile's rows are read: they become the output stage
#if LAYOUT_NHWC
        tc_store_row_nhwc(s_mine, acc, bv, lane, y, n, oh, ow0, co0, p.OH, p.OW, p.CO, vec_out);
#else
        tc_store_row_nchw(s_mine, acc, bv, lane, y, n, oh, ow0, co0, p.OH, p.OW, p.CO, vec_out);
#endif
    }
}
// end of the tensor-core section
#endif  // HAL_ACT16


// ---------------------------------------------------------------------------------
// depthwise 3x3, stride 1, no dilation, from registers (DW_ROWS / DW_COLS in the schema;
// the launcher picks them): no shared memory, no barrier, every load of a thread in
// flight at once; neighbouring threads' overlapping reads are L1/L2 hits. Per output the
// float FMAs run in the order of the tile kernels (bias, then taps row-major).
// ---------------------------------------------------------------------------------
struct DwRegParams {
    int C, IH, IW, OH, OW, PT, PL;
    unsigned items;  // threads with work (< 2^31)
    // NCHW rows: vector columns per row (ceil(OW / HAL_VEC)), strips per plane, C
    // NHWC cols: channel groups of 4 (C / 4), column strips per output row, OH
    FastDiv fd_a, fd_b, fd_c;
};

__device__ __forceinline__ void dw_weights(const act_t* __restrict__ w, int c, float (&wt)[9]) {
#pragma unroll
    for (int k = 0; k < 9; ++k) wt[k] = to_f(w[c * 9 + k]);
}

// NCHW row strips, the arithmetic and stores shared by both ways of loading: raw[r] is input
// row ih0 + r at columns [c0, c0 + V) (zero outside the input), hl[r] / hr[r] the halo columns
// as floats (zero outside): c0 - 1 and c0 + V for PL = 1, c0 + V and c0 + V + 1 for PL = 0.
template <int R, int PL>
__device__ __forceinline__ void dw_rows_finish(const uint4 (&raw)[R + 2], const float (&hl)[R + 2],
                                               const float (&hr)[R + 2], bool vin, int ih0, int IH, int c0,
                                               const act_t* __restrict__ w, const float* __restrict__ bias,
                                               act_t* __restrict__ y, unsigned plane, int c, int oh0, int OH,
                                               int OW) {
    constexpr int V = HAL_VEC, NR = R + 2;
    float wt[9];
    dw_weights(w, c, wt);
    const float b0 = bias ? bias[c] : 0.0f;
    float acc[R][V];
#pragma unroll
    for (int s = 0; s < R; ++s)
#pragma unroll
        for (int i = 0; i < V; ++i) acc[s][i] = b0;
#pragma unroll
    for (int r = 0; r < NR; ++r) {
        if ((unsigned)(ih0 + r) >= (unsigned)IH) continue;  // zero padding rows
        float f[V + 2];  // f[e]: column c0 - PL + e (zero outside the input)
        float v[V];
        unpack_vec(raw[r], v);
        const int vo = PL;  // index of column c0 in f
#pragma unroll
        for (int e = 0; e < V; ++e) f[vo + e] = vin ? v[e] : 0.0f;
        if (PL) {
            f[0] = hl[r];
            f[V + 1] = hr[r];
        } else {
            f[V] = hl[r];
            f[V + 1] = hr[r];
        }
#pragma unroll
        for (int s = 0; s < R; ++s) {
            const int kh = r - s;  // compile-time after unrolling
            if (kh < 0 || kh > 2) continue;
#pragma unroll
            for (int i = 0; i < V; ++i)
#pragma unroll
                for (int k = 0; k < 3; ++k) acc[s][i] = fmaf(f[i + k], wt[kh * 3 + k], acc[s][i]);
        }
    }
    act_t* __restrict__ yp = y + ((size_t)plane * OH + oh0) * OW + c0;
#pragma unroll
    for (int s = 0; s < R; ++s) {
        if (oh0 + s >= OH) break;
        act_t* op = yp + (size_t)s * OW;
        if (c0 + V <= OW && aligned16(op)) {
            st_vec(op, acc[s]);
        } else {
#pragma unroll
            for (int i = 0; i < V; ++i)
                if (c0 + i < OW) st_act(op + i, acc[s][i]);
        }
    }
}

// NCHW: a thread owns one aligned 16-byte vector column of a plane (input columns
// [c0, c0 + V), IW % V == 0) and a strip of R output rows; its outputs are the V columns
// ow in [c0, c0 + V), which read columns c0 - PL .. c0 + V + 1 - PL: the vector and two
// halo columns (one each side for PL = 1, two right for PL = 0).
template <int R, int PL>
__device__ __forceinline__ void dw_rows(const act_t* __restrict__ x, const act_t* __restrict__ w,
                                        const float* __restrict__ bias, act_t* __restrict__ y,
                                        const DwRegParams& p) {
    constexpr int V = HAL_VEC, NR = R + 2;
    const unsigned it = blockIdx.x * blockDim.x + threadIdx.x;
    if (it >= p.items) return;
    const unsigned q = fdiv(it, p.fd_a);
    const int j = (int)(it - q * p.fd_a.d);
    const unsigned plane = fdiv(q, p.fd_b);
    const int oh0 = (int)(q - plane * p.fd_b.d) * R;
    const int c = (int)(plane - fdiv(plane, p.fd_c) * p.fd_c.d);
    const int IH = p.IH, IW = p.IW;
    const int ih0 = oh0 - p.PT, c0 = j * V;
    // halo columns: e = 0 .. 1 are f[0] and f[V + 1] for PL = 1, f[V] and f[V + 1] for PL = 0
    const int hc0 = PL ? c0 - 1 : c0 + V, hc1 = c0 + V + 1 - PL;
    const bool vin = c0 < IW, h0in = (unsigned)hc0 < (unsigned)IW, h1in = (unsigned)hc1 < (unsigned)IW;
    const act_t* __restrict__ xp = x + (size_t)plane * IH * IW;
    uint4 raw[NR];
    act_t h0[NR], h1[NR];
#pragma unroll
    for (int r = 0; r < NR; ++r) {
        const int ih = ih0 + r;
        raw[r] = make_uint4(0u, 0u, 0u, 0u);
        h0[r] = h1[r] = from_f<act_t>(0.0f);
        if ((unsigned)ih < (unsigned)IH) {
            const act_t* rp = xp + (size_t)ih * IW;
            if (vin) raw[r] = __ldg(reinterpret_cast<const uint4*>(rp + c0));
            if (h0in) h0[r] = rp[hc0];
            if (h1in) h1[r] = rp[hc1];
        }
    }
    float hl[NR], hr[NR];
#pragma unroll
    for (int r = 0; r < NR; ++r) {
        hl[r] = h0in ? to_f(h0[r]) : 0.0f;
        hr[r] = h1in ? to_f(h1[r]) : 0.0f;
    }
    dw_rows_finish<R, PL>(raw, hl, hr, vin, ih0, IH, c0, w, bias, y, plane, c, oh0, p.OH, p.OW);
}

#define DW_ROWS_KERNEL(NAME, R)                                                                                  \
    extern "C" __global__ void __launch_bounds__(CONV_THREADS)                                                   \
        NAME(const act_t* __restrict__ x, const act_t* __restrict__ w, const float* __restrict__ bias,          \
             act_t* __restrict__ y, DwRegParams p) { HAL_PDL_ENTRY();                                            \
        if (p.PL > 0)                                                                                            \
            dw_rows<R, 1>(x, w, bias, y, p);                                                                     \
        else                                                                                                     \
            dw_rows<R, 0>(x, w, bias, y, p);                                                                     \
    }
DW_ROWS_KERNEL(conv2d_dw_rows2_k3s1, 2)
DW_ROWS_KERNEL(conv2d_dw_rows4_k3s1, 4)

// The row strips with their halos from neighbouring lanes (DW_SHFL; padding 1 on every side,
// so OH == IH and OW == IW). A thread loads only its own R rows, once; the row above and the
// row below come from the lanes a vector column (p.fd_a.d threads) up and down, the halo
// columns from the lanes either side, by shuffles. Only where that lane lies outside the warp
// (or the row outside the plane) does a thread load the halo itself. For a 32 x 32 float16
// plane with R = 4 a warp is the whole plane: 4 loads of 16 bytes a thread and nothing read
// twice, where the plain strips load 6 vectors and 12 scalars. Same FMA order as dw_rows<R, 1>,
// so the outputs are bit for bit those of dw_rows. Every lane of a warp runs the shuffles:
// lanes past the last item load nothing and store nothing.
__device__ __forceinline__ float dw_elem(unsigned word, bool high) {
#if HAL_ACT16
    return act16_f((unsigned short)(high ? word >> 16 : word & 0xffffu));
#else
    (void)high;
    return __uint_as_float(word);
#endif
}
__device__ __forceinline__ uint4 dw_shfl_up4(const uint4& v, int d) {
    return make_uint4(__shfl_up_sync(0xffffffffu, v.x, d), __shfl_up_sync(0xffffffffu, v.y, d),
                      __shfl_up_sync(0xffffffffu, v.z, d), __shfl_up_sync(0xffffffffu, v.w, d));
}
__device__ __forceinline__ uint4 dw_shfl_down4(const uint4& v, int d) {
    return make_uint4(__shfl_down_sync(0xffffffffu, v.x, d), __shfl_down_sync(0xffffffffu, v.y, d),
                      __shfl_down_sync(0xffffffffu, v.z, d), __shfl_down_sync(0xffffffffu, v.w, d));
}
// item it's own R rows (zero outside the input; nothing for lanes past the last item)
template <int R>
__device__ __forceinline__ void dw_shfl_own(const act_t* __restrict__ x, const DwRegParams& p, unsigned it,
                                            uint4 (&own)[R]) {
    constexpr int V = HAL_VEC;
    const bool active = it < p.items;
    const unsigned itc = active ? it : p.items - 1;
    const unsigned q = fdiv(itc, p.fd_a);
    const int j = (int)(itc - q * p.fd_a.d);
    const unsigned plane = fdiv(q, p.fd_b);
    const int oh0 = (int)(q - plane * p.fd_b.d) * R;
    const act_t* __restrict__ xp = x + ((size_t)plane * p.IH + oh0) * p.IW + j * V;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        own[r] = make_uint4(0u, 0u, 0u, 0u);
        if (active && oh0 + r < p.IH) own[r] = __ldg(reinterpret_cast<const uint4*>(xp + (size_t)r * p.IW));
    }
}
// item it from its own rows: the halos by shuffles (or loads where the lane is outside the
// warp), then dw_rows_finish. Every lane of the warp calls it, for items of one warp-wide step.
template <int R>
__device__ __forceinline__ void dw_shfl_item(const act_t* __restrict__ x, const act_t* __restrict__ w,
                                             const float* __restrict__ bias, act_t* __restrict__ y,
                                             const DwRegParams& p, unsigned it, const uint4 (&own)[R]) {
    constexpr int V = HAL_VEC, NR = R + 2;
    const bool active = it < p.items;
    const int lane = (int)(threadIdx.x & 31u);
    const unsigned itc = active ? it : p.items - 1;
    const unsigned q = fdiv(itc, p.fd_a);
    const int a = (int)p.fd_a.d;  // vector columns a row: the lane a row down is lane + a
    const int j = (int)(itc - q * p.fd_a.d);
    const unsigned plane = fdiv(q, p.fd_b);
    const int oh0 = (int)(q - plane * p.fd_b.d) * R;
    const int c = (int)(plane - fdiv(plane, p.fd_c) * p.fd_c.d);
    const int IH = p.IH, IW = p.IW;
    const int ih0 = oh0 - 1, c0 = j * V;
    const act_t* __restrict__ xp = x + (size_t)plane * IH * IW + c0;
    uint4 raw[NR];
#pragma unroll
    for (int r = 0; r < R; ++r) raw[r + 1] = own[r];
    // the rows above and below: the last own row of the strip above, the first of the one below
    const int d = a < 32 ? a : 0;
    const uint4 up = dw_shfl_up4(raw[R], d), dn = dw_shfl_down4(raw[1], d);
    raw[0] = raw[R + 1] = make_uint4(0u, 0u, 0u, 0u);
    if (active && ih0 >= 0)
        raw[0] = d && lane >= d ? up : __ldg(reinterpret_cast<const uint4*>(xp + (size_t)ih0 * IW));
    if (active && ih0 + R + 1 < IH)
        raw[R + 1] = d && lane + d < 32 ? dn : __ldg(reinterpret_cast<const uint4*>(xp + (size_t)(ih0 + R + 1) * IW));
    // the halo columns: the left lane's last element, the right lane's first
    const bool left = j > 0, right = j + 1 < a;
    float hl[NR], hr[NR];
#pragma unroll
    for (int r = 0; r < NR; ++r) {
        const unsigned lw = __shfl_up_sync(0xffffffffu, raw[r].w, 1);
        const unsigned rw = __shfl_down_sync(0xffffffffu, raw[r].x, 1);
        hl[r] = hr[r] = 0.0f;
        const bool row_in = (unsigned)(ih0 + r) < (unsigned)IH;
        if (active && row_in && left) hl[r] = lane > 0 ? dw_elem(lw, true) : to_f(xp[(size_t)(ih0 + r) * IW - 1]);
        if (active && row_in && right) hr[r] = lane < 31 ? dw_elem(rw, false) : to_f(xp[(size_t)(ih0 + r) * IW + V]);
    }
    if (active) dw_rows_finish<R, 1>(raw, hl, hr, true, ih0, IH, c0, w, bias, y, plane, c, oh0, p.OH, p.OW);
}

#define DW_ROWS_SHFL_KERNEL(NAME, R)                                                                             \
    extern "C" __global__ void __launch_bounds__(CONV_THREADS)                                                   \
        NAME(const act_t* __restrict__ x, const act_t* __restrict__ w, const float* __restrict__ bias,          \
             act_t* __restrict__ y, DwRegParams p) { HAL_PDL_ENTRY();                                            \
        const unsigned it = blockIdx.x * blockDim.x + threadIdx.x;                                               \
        uint4 own[R];                                                                                            \
        dw_shfl_own<R>(x, p, it, own);                                                                           \
        dw_shfl_item<R>(x, w, bias, y, p, it, own);                                                              \
    }
DW_ROWS_SHFL_KERNEL(conv2d_dw_rows2s_k3s1, 2)
DW_ROWS_SHFL_KERNEL(conv2d_dw_rows4s_k3s1, 4)

// DW_SHFL 2: the same items on a persistent grid (the launcher's: at most the resident blocks,
// sized so every thread gets the same number of steps), each thread striding by the grid with
// the next item's own rows loaded before the current item's shuffles, FMAs and stores: the
// loads of one step are in flight while the previous one computes, where a block of the
// one-item kernel loads, then computes, then ends (4.4 waves of them for 256x64x32x32).
// DW_SHFL_OCC [640]: resident threads per SM the kernel is built for (float16 with 4 rows on
// sm_90: 96 registers at 640 without spills, 80 with spills at 768).
#ifndef DW_SHFL_OCC
#define DW_SHFL_OCC 640
#endif
#define DW_SHFL_MINB (DW_SHFL_OCC >= 2 * CONV_THREADS ? DW_SHFL_OCC / CONV_THREADS : 1)
#define DW_ROWS_PERSIST_KERNEL(NAME, R)                                                                          \
    extern "C" __global__ void __launch_bounds__(CONV_THREADS, DW_SHFL_MINB)                                     \
        NAME(const act_t* __restrict__ x, const act_t* __restrict__ w, const float* __restrict__ bias,          \
             act_t* __restrict__ y, DwRegParams p) { HAL_PDL_ENTRY();                                            \
        const unsigned stride = gridDim.x * blockDim.x;                                                          \
        unsigned it = blockIdx.x * blockDim.x + threadIdx.x;                                                     \
        const unsigned warp0 = it - (threadIdx.x & 31u); /* the loop's bound is the same for the whole warp */   \
        uint4 cur[R];                                                                                            \
        dw_shfl_own<R>(x, p, it, cur);                                                                           \
        for (unsigned base = warp0; base < p.items; base += stride, it += stride) {                              \
            uint4 nxt[R];                                                                                        \
            dw_shfl_own<R>(x, p, it + stride, nxt);                                                              \
            dw_shfl_item<R>(x, w, bias, y, p, it, cur);                                                          \
            _Pragma("unroll") for (int r = 0; r < R; ++r) cur[r] = nxt[r];                                       \
        }                                                                                                        \
    }
DW_ROWS_PERSIST_KERNEL(conv2d_dw_rows2p_k3s1, 2)
DW_ROWS_PERSIST_KERNEL(conv2d_dw_rows4p_k3s1, 4)

// NHWC: a thread owns 4 channels (C % 4 == 0: 16 bytes in float32, 8 in float16 and bfloat16) of M
// consecutive output pixels of one output row; it walks the row left to right keeping the
// 3 x 3 window of 4-channel input vectors in registers (each input column is loaded once
// per thread, 3 x (M + 2) loads for M outputs), with the 36 weights in registers as floats.
// Threads are numbered channel group fastest, then column strip, then row. M is 2, 4 or 8.
#if HAL_ACT16
typedef uint2 dw_raw_t;  // 4 halves (or 4 bfloat16)
#else
typedef float4 dw_raw_t;
#endif
__device__ __forceinline__ void dw_unpack(const dw_raw_t& v, float (&f)[4]) {
#if HAL_ACT16
    const float2 a = act2_f(v.x);
    const float2 b = act2_f(v.y);
    f[0] = a.x;
    f[1] = a.y;
    f[2] = b.x;
    f[3] = b.y;
#else
    f[0] = v.x;
    f[1] = v.y;
    f[2] = v.z;
    f[3] = v.w;
#endif
}
__device__ __forceinline__ void dw_ld4(const act_t* p, float (&f)[4]) {
    dw_unpack(__ldg(reinterpret_cast<const dw_raw_t*>(p)), f);
}
__device__ __forceinline__ void dw_st4(act_t* p, const float (&f)[4]) {
#if HAL_ACT16
    uint2 u;
    u.x = act2_word(out_act(f[0]), out_act(f[1]));
    u.y = act2_word(out_act(f[2]), out_act(f[3]));
    *reinterpret_cast<uint2*>(p) = u;
#else
    *reinterpret_cast<float4*>(p) = make_float4(out_act(f[0]), out_act(f[1]), out_act(f[2]), out_act(f[3]));
#endif
}

// one NHWC register-path thread: its image, first output row (rows of R), first output
// column (strips of M) and first channel (groups of 4); threads are numbered channel group
// fastest, then column strip, then row strip, then image
struct DwThread {
    unsigned n;
    int row0, ow0, c;
};
template <int M, int R>
__device__ __forceinline__ DwThread dw_thread(unsigned it, const DwRegParams& p) {
    const unsigned q = fdiv(it, p.fd_a);
    const int cg = (int)(it - q * p.fd_a.d);
    const unsigned q2 = fdiv(q, p.fd_b);
    DwThread t;
    t.ow0 = (int)(q - q2 * p.fd_b.d) * M;
    t.n = fdiv(q2, p.fd_c);
    t.row0 = (int)(q2 - t.n * p.fd_c.d) * R;
    t.c = cg * 4;
    return t;
}
// the 4 channels' 3 x 3 weights and biases, as floats in registers
__device__ __forceinline__ void dw_consts4(const act_t* __restrict__ w, const float* __restrict__ bias, int c,
                                           float (&wt)[4][9], float (&b)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) dw_weights(w, c + i, wt[i]);
#pragma unroll
    for (int i = 0; i < 4; ++i) b[i] = bias ? bias[c + i] : 0.0f;
}

// acc[i] = b[i] + the 3 x 3 taps of channel i (tap(kh, kw, i) x weight), rows whose
// row_in(kh) is false skipped: zero padding rows, as in the tiles
template <class RowIn, class Tap>
__device__ __forceinline__ void dw_taps4(const float (&b)[4], const float (&wt)[4][9], RowIn row_in, Tap tap,
                                         float (&acc)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float a = b[i];
#pragma unroll
        for (int kh = 0; kh < 3; ++kh) {
            if (!row_in(kh)) continue;
#pragma unroll
            for (int kw = 0; kw < 3; ++kw) a = fmaf(tap(kh, kw, i), wt[i][kh * 3 + kw], a);
        }
        acc[i] = a;
    }
}

template <int M>
__device__ __forceinline__ void dw_cols(const act_t* __restrict__ x, const act_t* __restrict__ w,
                                        const float* __restrict__ bias, act_t* __restrict__ y,
                                        const DwRegParams& p) {
    const unsigned it = blockIdx.x * blockDim.x + threadIdx.x;
    if (it >= p.items) return;
    const DwThread t = dw_thread<M, 1>(it, p);
    const unsigned n = t.n;
    const int oh = t.row0, ow0 = t.ow0, c = t.c;
    const int C = p.C, IH = p.IH, IW = p.IW, OW = p.OW;
    float wt[4][9], b[4];
    dw_consts4(w, bias, c, wt, b);
    const int ih0 = oh - p.PT, iw0 = ow0 - p.PL;
    const act_t* __restrict__ xn = x + (size_t)n * IH * IW * C + c;
    bool rin[3];
#pragma unroll
    for (int kh = 0; kh < 3; ++kh) rin[kh] = (unsigned)(ih0 + kh) < (unsigned)IH;
#if HAL_ACT16
    // float16 (and bfloat16): every 8-byte load of the walk issued first (3 x (M + 2) in flight, 2 registers
    // each), converted as the walk reaches them: the float window alone left too few loads
    // in flight per thread at this kernel's occupancy
    uint2 pre[3][M + 2];
#pragma unroll
    for (int col = 0; col < M + 2; ++col) {
        const int iw = iw0 + col;
#pragma unroll
        for (int kh = 0; kh < 3; ++kh) {
            pre[kh][col] = make_uint2(0u, 0u);
            if (rin[kh] && (unsigned)iw < (unsigned)IW)
                pre[kh][col] = __ldg(reinterpret_cast<const uint2*>(xn + ((size_t)(ih0 + kh) * IW + iw) * C));
        }
    }
#endif
    // win[kh][col % 3][channel]: the last three input columns
    float win[3][3][4];
#pragma unroll
    for (int col = 0; col < M + 2; ++col) {
        const int iw = iw0 + col;
        const bool cin = (unsigned)iw < (unsigned)IW;
#pragma unroll
        for (int kh = 0; kh < 3; ++kh) {
            float* f = win[kh][col % 3];
#if HAL_ACT16
            if (true) {
                dw_unpack(pre[kh][col], win[kh][col % 3]);
                (void)cin;
            } else {
#else
            if (rin[kh] && cin) {
                dw_ld4(xn + ((size_t)(ih0 + kh) * IW + iw) * C, win[kh][col % 3]);
            } else {
#endif
#pragma unroll
                for (int i = 0; i < 4; ++i) f[i] = 0.0f;
            }
        }
        if (col < 2) continue;
        const int ow = ow0 + col - 2;  // its window: columns col - 2 .. col
        float acc[4];
        dw_taps4(
            b, wt, [&](int kh) { return rin[kh]; },
            [&](int kh, int kw, int i) { return win[kh][(col - 2 + kw) % 3][i]; }, acc);
        if (ow < OW) dw_st4(y + (((size_t)n * p.OH + oh) * OW + ow) * C + c, acc);
    }
}

#define DW_COLS_KERNEL(NAME, M)                                                                                  \
    extern "C" __global__ void __launch_bounds__(CONV_THREADS)                                                   \
        NAME(const act_t* __restrict__ x, const act_t* __restrict__ w, const float* __restrict__ bias,          \
             act_t* __restrict__ y, DwRegParams p) { HAL_PDL_ENTRY();                                            \
        dw_cols<M>(x, w, bias, y, p);                                                                            \
    }
DW_COLS_KERNEL(conv2d_dw_cols2_k3s1, 2)
DW_COLS_KERNEL(conv2d_dw_cols4_k3s1, 4)
DW_COLS_KERNEL(conv2d_dw_cols8_k3s1, 8)

// NHWC, 2-D register blocks: a thread owns 4 channels of an R x M block of outputs (R
// output rows, M columns) and walks its rows top to bottom, loading each input row of the
// block once (M + 2 vectors, the next row's loads issued before the current row's FMAs)
// and keeping the last three rows in registers: (R + 2) x
// (M + 2) loads for R x M outputs (the one-row walk above: 3 x (M + 2) for M), so L2 and
// L1 serve about 1.9x the input at R = 8, M = 4 instead of 4.5x. Threads are numbered
// channel group fastest, then column strip, then row strip, then image. Same taps, same
// FMA order and the same padding rule as the one-row walk (zero columns enter the FMAs,
// rows outside the input are skipped).
// one input row of a block: M + 2 vectors of 4 channels, zeros outside the input
template <int M>
__device__ __forceinline__ void dw_load_row(const act_t* __restrict__ xn, int ih, int iw0, int IW, int C, bool row_in,
                                            const bool (&cin)[M + 2], dw_raw_t (&out)[M + 2]) {
#pragma unroll
    for (int col = 0; col < M + 2; ++col) {
#if HAL_ACT16
        out[col] = make_uint2(0u, 0u);
#else
        out[col] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#endif
        if (row_in && cin[col])
            out[col] = __ldg(reinterpret_cast<const dw_raw_t*>(xn + ((size_t)ih * IW + (iw0 + col)) * C));
    }
}
template <int M, int R>
__device__ __forceinline__ void dw_block(const act_t* __restrict__ x, const act_t* __restrict__ w,
                                         const float* __restrict__ bias, act_t* __restrict__ y,
                                         const DwRegParams& p) {
    const unsigned it = blockIdx.x * blockDim.x + threadIdx.x;
    if (it >= p.items) return;
    const DwThread t = dw_thread<M, R>(it, p);
    const unsigned n = t.n;
    const int oh0 = t.row0, ow0 = t.ow0, c = t.c;
    const int C = p.C, IH = p.IH, IW = p.IW, OW = p.OW, OH = p.OH;
    float wt[4][9], b[4];
    dw_consts4(w, bias, c, wt, b);
    const int ih0 = oh0 - p.PT, iw0 = ow0 - p.PL;
    const act_t* __restrict__ xn = x + (size_t)n * IH * IW * C + c;
    act_t* __restrict__ yn = y + (size_t)n * OH * OW * C + c;
    bool cin[M + 2];
#pragma unroll
    for (int col = 0; col < M + 2; ++col) cin[col] = (unsigned)(iw0 + col) < (unsigned)IW;
    bool rin[R + 2];
#pragma unroll
    for (int r = 0; r < R + 2; ++r) rin[r] = (unsigned)(ih0 + r) < (unsigned)IH;
    // the next input row's loads are issued before the current row is converted and used,
    // so a row of loads is in flight while the FMAs run (raw vectors: float4 or 4 halves)
    // (DW_PREFETCH 0: each row loaded where it is used, fewer registers)
#if DW_PREFETCH
    dw_raw_t nxt[M + 2];
    dw_load_row<M>(xn, ih0, iw0, IW, C, rin[0], cin, nxt);
#endif
    float win[3][M + 2][4];  // input rows r - 2, r - 1, r at slots (r - 2) % 3 ...
#pragma unroll
    for (int r = 0; r < R + 2; ++r) {
        dw_raw_t cur[M + 2];
#if DW_PREFETCH
#pragma unroll
        for (int col = 0; col < M + 2; ++col) cur[col] = nxt[col];
        if (r + 1 < R + 2) dw_load_row<M>(xn, ih0 + r + 1, iw0, IW, C, rin[r + 1], cin, nxt);
#else
        dw_load_row<M>(xn, ih0 + r, iw0, IW, C, rin[r], cin, cur);
#endif
#pragma unroll
        for (int col = 0; col < M + 2; ++col) dw_unpack(cur[col], win[r % 3][col]);
        if (r < 2) continue;
        const int oh = oh0 + r - 2;  // its window: input rows r - 2 .. r
        if (oh >= OH) break;
#pragma unroll
        for (int m = 0; m < M; ++m) {
            float acc[4];
            dw_taps4(
                b, wt, [&](int kh) { return rin[r - 2 + kh]; },
                [&](int kh, int kw, int i) { return win[(r - 2 + kh) % 3][m + kw][i]; }, acc);
            if (ow0 + m < OW) dw_st4(yn + ((size_t)oh * OW + ow0 + m) * C, acc);
        }
    }
}

#define DW_BLOCK_KERNEL(NAME, M, R)                                                                              \
    extern "C" __global__ void __launch_bounds__(CONV_THREADS)                                                   \
        NAME(const act_t* __restrict__ x, const act_t* __restrict__ w, const float* __restrict__ bias,          \
             act_t* __restrict__ y, DwRegParams p) { HAL_PDL_ENTRY();                                            \
        dw_block<M, R>(x, w, bias, y, p);                                                                        \
    }
DW_BLOCK_KERNEL(conv2d_dw_cols2r4_k3s1, 2, 4)
DW_BLOCK_KERNEL(conv2d_dw_cols2r8_k3s1, 2, 8)
DW_BLOCK_KERNEL(conv2d_dw_cols4r4_k3s1, 4, 4)
DW_BLOCK_KERNEL(conv2d_dw_cols4r8_k3s1, 4, 8)

// ---------------------------------------------------------------------------------
// depthwise 3x3, stride 1, no dilation, NHWC, pipelined through shared memory
// (DW_PIPE in the schema: conv2d_dw_pipe{4,8,16}_k3s1, TH = 4, 8 or 16 output rows a tile).
// The register walks above hold every load of a thread in registers until it lands
// (ncu on the served float16 block: 156 registers, 18.75 % theoretical occupancy, DRAM 31 % busy):
// too few bytes in flight. Here the loads are cp.async copies that hold no register.
// Persistent blocks of 256 threads; blockIdx.y is a 128-byte channel slice (64 halves or
// 32 floats; the last one partial when C * sizeof(act_t) % 128 != 0: its missing chunks
// are zero-filled, their threads store nothing), blockIdx.x walks the spatial tiles (TH
// output rows x TW columns of one image; TW = 16 in float16, 32 in float32) with a stride of
// gridDim.x. A tile's input patch, (TH + 2) x (TW + 2) pixels x 128 bytes, is copied in
// 16-byte chunks (zero-filled outside the image: the padding) into one of two shared
// buffers; the next tile's copies are issued before the current tile is computed.
// Compute: thread = (4-channel group g, column); it walks its column down the patch,
// reading each input row's 3 pixels from shared memory once and adding them into the
// three outputs they belong to (rolling accumulators: acc = bias, then the taps kh, kw
// row-major, the register walks' FMA order; rows outside the input skipped, zero columns
// FMA'd, as there), with the 36 weights and 4 biases as floats in registers.
// Needs C % (16 / sizeof(act_t)) == 0, 16-byte aligned x and y; shared memory 2 buffers of
// (TH + 2) x (TW + 2) x 128 bytes. sm_75 has no cp.async: the copies are plain loads and
// stores there (hal_prelude.cuh), still correct.
// ---------------------------------------------------------------------------------
#if LAYOUT_NHWC
namespace dwp {
constexpr int THREADS = 256;
constexpr int SLICE = 128;                               // bytes of channels per tile
constexpr int CH = 16 / (int)sizeof(act_t);              // channels per 16-byte chunk
constexpr int G = SLICE / (4 * (int)sizeof(act_t));      // 4-channel groups per slice: 8 float32, 16 float16
}  // namespace dwp

// M: output columns per thread (1, or 2: each input pixel a thread reads is converted once for
// two outputs' taps instead of once per output column; ncu found the float16 kernel bound by
// instruction issue); a tile is THREADS / G x M columns wide
template <int TH, int M>
__device__ __forceinline__ void dw_pipe(unsigned char* smem, const act_t* __restrict__ x,
                                        const act_t* __restrict__ w, const float* __restrict__ bias,
                                        act_t* __restrict__ y, int N, int C, int IH, int IW, int OH, int OW,
                                        int PT, int PL, int tiles_h, int tiles_w) {
    using namespace dwp;
    constexpr int TW = THREADS / G * M;  // output columns per tile: 32 M float32, 16 M float16
    constexpr int ICOLS = TW + 2, IROWS = TH + 2, NPIX = IROWS * ICOLS, BUF = NPIX * SLICE;
    const int tid = threadIdx.x;
    const int ntiles = N * tiles_h * tiles_w;
    const int cs = blockIdx.y * (SLICE / (int)sizeof(act_t));  // the block's first channel

    // one tile's patch into buffer `buf`: thread -> 16-byte chunk (tid & 7) of pixels
    // tid / 8, + 32, ... (zero outside the image and past C)
    const int c8 = tid & 7;
    const bool chan_ok = cs + c8 * CH < C;
    const act_t* __restrict__ xs = x + cs + c8 * CH;
    auto load_tile = [&](int t, int buf) {
        const int twi = t % tiles_w, rest = t / tiles_w;
        const int thi = rest % tiles_h, n = rest / tiles_h;
        const int ih0 = thi * TH - PT, iw0 = twi * TW - PL;
        unsigned char* s = smem + buf * BUF + c8 * 16;
        for (int pix = tid >> 3; pix < NPIX; pix += THREADS / 8) {
            const int r = pix / ICOLS, c = pix - r * ICOLS;
            const int ih = ih0 + r, iw = iw0 + c;
            const bool valid = chan_ok && (unsigned)ih < (unsigned)IH && (unsigned)iw < (unsigned)IW;
            const act_t* src = valid ? xs + (((long long)n * IH + ih) * IW + iw) * C : x;
            cp_async16_zfill(s + pix * SLICE, src, valid);
        }
    };

    if ((int)blockIdx.x < ntiles) load_tile(blockIdx.x, 0);
    cp_async_commit();

    // the thread's 4 channels and first output column; weights and biases while the copies fly
    const int g = tid % G, col = tid / G * M;
    const int c = cs + g * 4;
    const bool chan_in = c < C;  // C % 4 == 0: all 4 or none
    float wt[4][9], b[4];
    if (chan_in) {
        dw_consts4(w, bias, c, wt, b);
    } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            b[i] = 0.0f;
#pragma unroll
            for (int k = 0; k < 9; ++k) wt[i][k] = 0.0f;
        }
    }

    int buf = 0;
    for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
        cp_async_wait<0>();
        __syncthreads();  // tile t has landed; every thread is done with the other buffer
        if (t + (int)gridDim.x < ntiles) load_tile(t + gridDim.x, buf ^ 1);
        cp_async_commit();
        const unsigned char* s = smem + buf * BUF + col * SLICE + g * (4 * (int)sizeof(act_t));
        buf ^= 1;
        const int twi = t % tiles_w, rest = t / tiles_w;
        const int thi = rest % tiles_h, n = rest / tiles_h;
        const int oh0 = thi * TH, ow = twi * TW + col, ih0 = oh0 - PT;
        if (!chan_in || ow >= OW) continue;
        act_t* __restrict__ yp = y + (((long long)n * OH + oh0) * OW + ow) * C + c;
        const long long ystep = (long long)OW * C;
        // input row r of the patch feeds outputs r - kh (kh = 0, 1, 2): acc[(r - kh) % 3]
        float acc[3][M][4];
#pragma unroll
        for (int r = 0; r < IROWS; ++r) {
            if (r < TH) {
#pragma unroll
                for (int m = 0; m < M; ++m)
#pragma unroll
                    for (int i = 0; i < 4; ++i) acc[r % 3][m][i] = b[i];
            }
            if ((unsigned)(ih0 + r) < (unsigned)IH) {  // rows outside the input: skipped
                float v[M + 2][4];
#pragma unroll
                for (int j = 0; j < M + 2; ++j)
                    dw_unpack(*reinterpret_cast<const dw_raw_t*>(s + (r * ICOLS + j) * SLICE), v[j]);
#pragma unroll
                for (int kh = 0; kh < 3; ++kh) {
                    const int o = r - kh;  // compile-time after unrolling
                    if (o < 0 || o >= TH) continue;
#pragma unroll
                    for (int m = 0; m < M; ++m)
#pragma unroll
                        for (int i = 0; i < 4; ++i)
#pragma unroll
                            for (int kw = 0; kw < 3; ++kw)
                                acc[o % 3][m][i] = fmaf(v[m + kw][i], wt[i][kh * 3 + kw], acc[o % 3][m][i]);
                }
            }
            if (r >= 2 && oh0 + r - 2 < OH) {
#pragma unroll
                for (int m = 0; m < M; ++m)
                    if (m == 0 || ow + m < OW) dw_st4(yp + (r - 2) * ystep + m * C, acc[(r - 2) % 3][m]);
            }
        }
    }
    cp_async_wait<0>();  // nothing left in flight when the block exits
}

// MINB: blocks per SM the registers must allow (M 1: 3, at most 80 registers; M 2: 2, at most 128;
// the launcher's _DW_PIPE_MINB)
#define DW_PIPE_KERNEL(NAME, TH, M, MINB)                                                                        \
    extern "C" __global__ void __launch_bounds__(dwp::THREADS, MINB)                                             \
        NAME(const act_t* __restrict__ x, const act_t* __restrict__ w, const float* __restrict__ bias,          \
             act_t* __restrict__ y, int N, int C, int IH, int IW, int OH, int OW, int PT, int PL, int tiles_h,   \
             int tiles_w) { HAL_PDL_ENTRY();                                                                     \
        extern __shared__ __align__(16) unsigned char smem_raw[];                                                \
        dw_pipe<TH, M>(smem_raw, x, w, bias, y, N, C, IH, IW, OH, OW, PT, PL, tiles_h, tiles_w);                 \
    }
DW_PIPE_KERNEL(conv2d_dw_pipe4_k3s1, 4, 1, 3)
DW_PIPE_KERNEL(conv2d_dw_pipe8_k3s1, 8, 1, 3)
DW_PIPE_KERNEL(conv2d_dw_pipe16_k3s1, 16, 1, 3)
DW_PIPE_KERNEL(conv2d_dw_pipe4x2_k3s1, 4, 2, 2)
DW_PIPE_KERNEL(conv2d_dw_pipe8x2_k3s1, 8, 2, 2)
DW_PIPE_KERNEL(conv2d_dw_pipe16x2_k3s1, 16, 2, 2)
#endif

// ---------------------------------------------------------------------------------
// register-tiled direct conv on CUDA cores, for the specs no kernel above takes: grouped
// convs other than depthwise (ResNeXt, RegNet), depthwise with a channel multiplier, strides,
// dilations, other kernel sizes. The one-thread-per-output `conv2d` re-read every input and
// weight from global memory for each output (H200, 3x3 groups 8 on 256x64x32x32: 1.6 ms).
// Block = (image n, tile of th x txn * GRP_PIX outputs, group g, chunk of GRP_COT output
// channels of g), the chunk and the group fastest so that the blocks reading one input tile
// run together and share it in L2. The group's input channels, cic at a time, are staged
// with their halo in shared memory as float (zero outside the input: the padding), the
// chunk's weights as [channel][tap][GRP_COT]. Thread (tx, ty) owns GRP_COT output channels x
// GRP_PIX consecutive columns of output row ty: each staged input value it reads feeds
// GRP_COT FMAs, each weight (a broadcast read) GRP_PIX. Accumulation in float, the bias
// first, then channels, rows and columns of taps in order.
// Macros: GRP_COT [8] (output channels per thread: 1, 2, 4, 8), GRP_PIX [4] (output columns
// per thread: 1, 2, 4), GRP_OCC [0] (below), GRP_BATCH [8] (below).
// ---------------------------------------------------------------------------------
#ifndef GRP_COT
#define GRP_COT 8
#endif
#ifndef GRP_PIX
#define GRP_PIX 4
#endif
// the launcher's geometry (backends/cuda.py, _plan_conv_tiled), 32-bit ints in this order
struct GrpParams {
    int N, CI, IH, IW, CO, OH, OW;
    int KH, KW, SH, SW, DH, DW, PT, PL;
    int G, cig, cog, chunks;  // groups, channels per group in and out, GRP_COT chunks per group
    int txn, th;              // threads along a tile row (tile width txn * GRP_PIX), tile rows
    int tiles_w, tiles_h;
    int cic, iht, iwt, iwp, cs;  // channels per stage, staged rows and columns, row and channel pitch
    int vec_in, vec_out;         // NHWC: stage and store 4 channels a vector (the launcher's conditions)
    FastDiv fd_iwt, fd_plane, fd_cic, fd_taps, fd_cq;  // by iwt, iht * iwt, cic, KH * KW, cic / 4
};
// staged values a thread loads before it stores any (the loads of a batch are in flight together:
// one at a time, each stage waited for about one memory latency per value)
#ifndef GRP_BATCH
#define GRP_BATCH 8
#endif
// GRP_OCC [0]: resident threads per multiprocessor the kernels' registers must allow (0: the
// compiler's choice, about 80 registers: 768 threads)
#ifndef GRP_OCC
#define GRP_OCC 0
#endif
#define GRP_MINB (GRP_OCC / CONV_THREADS > 0 ? GRP_OCC / CONV_THREADS : 1)

// GRP_COT weights of one (channel, tap) from shared memory (16-byte reads where GRP_COT % 4 == 0)
__device__ __forceinline__ void grp_weights(const float* ws, float (&wv)[GRP_COT]) {
#if GRP_COT % 4 == 0
#pragma unroll
    for (int q = 0; q < GRP_COT / 4; ++q) {
        const float4 t = reinterpret_cast<const float4*>(ws)[q];
        wv[4 * q] = t.x;
        wv[4 * q + 1] = t.y;
        wv[4 * q + 2] = t.z;
        wv[4 * q + 3] = t.w;
    }
#else
#pragma unroll
    for (int q = 0; q < GRP_COT; ++q) wv[q] = ws[q];
#endif
}

// KH_, KW_, SH_, SW_ nonzero: built in, with dilation 1 (the 3x3 stride-1 variant reads each
// row's GRP_PIX + 2 values once, 8 bytes at a time); 0: from p
template <int KH_, int KW_, int SH_, int SW_>
__device__ __forceinline__ void grp_conv(unsigned char* smem, const act_t* __restrict__ x,
                                         const act_t* __restrict__ w, const float* __restrict__ bias,
                                         act_t* __restrict__ y, const GrpParams& p) {
    constexpr int COT = GRP_COT, PIX = GRP_PIX;
    const int KH = KH_ ? KH_ : p.KH, KW = KW_ ? KW_ : p.KW;
    const int SH = SH_ ? SH_ : p.SH, SW = SW_ ? SW_ : p.SW;
    const int DH = KH_ ? 1 : p.DH, DW = KW_ ? 1 : p.DW;
    const int taps = KH * KW;
    float* s_x = reinterpret_cast<float*>(smem);
    float* s_w = s_x + p.cic * p.cs;  // cs % 4 == 0: 16-byte aligned

    int b = blockIdx.x;
    const int per_tile = p.G * p.chunks;
    const int gc = b % per_tile;
    b /= per_tile;
    const int twi = b % p.tiles_w;
    b /= p.tiles_w;
    const int thi = b % p.tiles_h;
    const int n = b / p.tiles_h;
    const int g = gc / p.chunks;
    const int co_l0 = (gc - g * p.chunks) * COT;  // the chunk's first channel within the group
    const int ncot = min(COT, p.cog - co_l0);
    const int co0 = g * p.cog + co_l0;
    const int oh0 = thi * p.th, ow0 = twi * p.txn * PIX;
    const int ih0 = oh0 * SH - p.PT, iw0 = ow0 * SW - p.PL;
    const int tid = threadIdx.x, nthreads = blockDim.x;
    const int tx = tid % p.txn, ty = tid / p.txn;  // the block is txn x th threads

    float acc[COT][PIX];
#pragma unroll
    for (int co = 0; co < COT; ++co) {
        const float b0 = (bias != nullptr && co < ncot) ? bias[co0 + co] : 0.0f;
#pragma unroll
        for (int px = 0; px < PIX; ++px) acc[co][px] = b0;
    }
    const int plane = p.iht * p.iwt;
    const int ci_g = g * p.cig;  // the group's first input channel
#if LAYOUT_NHWC
    const act_t* __restrict__ xn = x + (long long)n * p.IH * p.IW * p.CI + ci_g;
    const int stage_elems = p.cic * plane;  // (pixel, channel) pairs, channels fastest, cic a pixel
#else
    const act_t* __restrict__ xn = x + ((long long)n * p.CI + ci_g) * p.IH * p.IW;
#endif
    for (int c0 = 0; c0 < p.cig; c0 += p.cic) {
        const int nc = min(p.cic, p.cig - c0);
#if !LAYOUT_NHWC
        const int stage_elems = nc * plane;  // (channel, row, column), columns fastest
#endif
        __syncthreads();  // every thread is done with the previous stage
#if LAYOUT_NHWC
        if (p.vec_in) {  // C, the group's and a stage's channels multiples of 4, x 16-byte aligned
            const int cq = p.cic >> 2, quads = cq * plane;
            for (int f0 = tid; f0 < quads; f0 += (GRP_BATCH / 2) * nthreads) {
                float v[GRP_BATCH / 2][4];
                int dst[GRP_BATCH / 2];
#pragma unroll
                for (int u = 0; u < GRP_BATCH / 2; ++u) {
                    const int f = f0 + u * nthreads;
                    dst[u] = -1;
#pragma unroll
                    for (int j = 0; j < 4; ++j) v[u][j] = 0.0f;
                    if (f >= quads) continue;
                    const int pix = (int)fdiv((unsigned)f, p.fd_cq), cl = (f - pix * cq) * 4;
                    if (cl >= nc) continue;
                    const int r = (int)fdiv((unsigned)pix, p.fd_iwt), c = pix - r * p.iwt;
                    dst[u] = cl * p.cs + r * p.iwp + c;
                    const int ih = ih0 + r, iw = iw0 + c;
                    if ((unsigned)ih < (unsigned)p.IH && (unsigned)iw < (unsigned)p.IW)
                        dw_ld4(xn + ((long long)ih * p.IW + iw) * p.CI + c0 + cl, v[u]);
                }
#pragma unroll
                for (int u = 0; u < GRP_BATCH / 2; ++u)
                    if (dst[u] >= 0) {
#pragma unroll
                        for (int j = 0; j < 4; ++j) s_x[dst[u] + j * p.cs] = v[u][j];
                    }
            }
        } else
#endif
        for (int f0 = tid; f0 < stage_elems; f0 += GRP_BATCH * nthreads) {
            float v[GRP_BATCH];
            int dst[GRP_BATCH];
#pragma unroll
            for (int u = 0; u < GRP_BATCH; ++u) {
                const int f = f0 + u * nthreads;
                dst[u] = -1;
                v[u] = 0.0f;
                if (f >= stage_elems) continue;
#if LAYOUT_NHWC
                const int pix = (int)fdiv((unsigned)f, p.fd_cic), cl = f - pix * p.cic;
                if (cl >= nc) continue;
#else
                const int cl = (int)fdiv((unsigned)f, p.fd_plane), pix = f - cl * plane;
#endif
                const int r = (int)fdiv((unsigned)pix, p.fd_iwt), c = pix - r * p.iwt;
                dst[u] = cl * p.cs + r * p.iwp + c;
                const int ih = ih0 + r, iw = iw0 + c;
                if ((unsigned)ih < (unsigned)p.IH && (unsigned)iw < (unsigned)p.IW) {
#if LAYOUT_NHWC
                    v[u] = ld_act(xn + ((long long)ih * p.IW + iw) * p.CI + c0 + cl);
#else
                    v[u] = ld_act(xn + ((long long)(c0 + cl) * p.IH + ih) * p.IW + iw);
#endif
                }
            }
#pragma unroll
            for (int u = 0; u < GRP_BATCH; ++u)
                if (dst[u] >= 0) s_x[dst[u]] = v[u];
        }
        for (int f = tid; f < nc * taps * COT; f += nthreads) {
            const int col = f % COT, rest = f / COT;
            const int cl = (int)fdiv((unsigned)rest, p.fd_taps), tap = rest - cl * taps;
            s_w[f] = col < ncot ? ld_act(w + ((long long)(co0 + col) * p.cig + c0 + cl) * taps + tap) : 0.0f;
        }
        __syncthreads();
        for (int cl = 0; cl < nc; ++cl) {
            const float* xs = s_x + cl * p.cs + ty * SH * p.iwp + tx * PIX * SW;
            const float* ws = s_w + cl * taps * COT;
            for (int kh = 0; kh < KH; ++kh) {
                const float* xr = xs + kh * DH * p.iwp;
                if constexpr (KW_ == 3 && SW_ == 1) {
                    float v[PIX + 2];
                    if constexpr (PIX % 2 == 0) {  // iwp, cs and tx * PIX even: 8-byte aligned
#pragma unroll
                        for (int j = 0; j < PIX / 2 + 1; ++j) {
                            const float2 t = reinterpret_cast<const float2*>(xr)[j];
                            v[2 * j] = t.x;
                            v[2 * j + 1] = t.y;
                        }
                    } else {
#pragma unroll
                        for (int j = 0; j < PIX + 2; ++j) v[j] = xr[j];
                    }
#pragma unroll
                    for (int kw = 0; kw < 3; ++kw) {
                        float wv[COT];
                        grp_weights(ws + (kh * 3 + kw) * COT, wv);
#pragma unroll
                        for (int co = 0; co < COT; ++co)
#pragma unroll
                            for (int px = 0; px < PIX; ++px) acc[co][px] = fmaf(v[px + kw], wv[co], acc[co][px]);
                    }
                } else {
                    for (int kw = 0; kw < KW; ++kw) {
                        float wv[COT];
                        grp_weights(ws + (kh * KW + kw) * COT, wv);
                        float v[PIX];
#pragma unroll
                        for (int px = 0; px < PIX; ++px) v[px] = xr[px * SW + kw * DW];
#pragma unroll
                        for (int co = 0; co < COT; ++co)
#pragma unroll
                            for (int px = 0; px < PIX; ++px) acc[co][px] = fmaf(v[px], wv[co], acc[co][px]);
                    }
                }
            }
        }
    }
    const int oh = oh0 + ty, ow = ow0 + tx * PIX;
    if (oh >= p.OH) return;
#if LAYOUT_NHWC && GRP_COT % 4 == 0
    if (p.vec_out) {  // C_out and the group's multiples of 4, y 16-byte aligned: 4 channels a store
#pragma unroll
        for (int px = 0; px < PIX; ++px) {
            if (ow + px >= p.OW) break;
            act_t* dst = y + (((long long)n * p.OH + oh) * p.OW + ow + px) * p.CO + co0;
#pragma unroll
            for (int q = 0; q < COT / 4; ++q) {
                if (4 * q >= ncot) break;
                const float f4[4] = {acc[4 * q][px], acc[4 * q + 1][px], acc[4 * q + 2][px], acc[4 * q + 3][px]};
                dw_st4(dst + 4 * q, f4);
            }
        }
        return;
    }
#endif
#pragma unroll
    for (int px = 0; px < PIX; ++px) {
        if (ow + px >= p.OW) break;
#pragma unroll
        for (int co = 0; co < COT; ++co) {
            if (co >= ncot) break;
#if LAYOUT_NHWC
            act_t* dst = y + (((long long)n * p.OH + oh) * p.OW + ow + px) * p.CO + co0 + co;
#else
            act_t* dst = y + (((long long)n * p.CO + co0 + co) * p.OH + oh) * p.OW + ow + px;
#endif
            st_act(dst, acc[co][px]);
        }
    }
}

#define GRP_KERNEL(NAME, KH_, KW_, SH_, SW_)                                                                    \
    extern "C" __global__ void __launch_bounds__(CONV_THREADS, GRP_MINB)                                        \
        NAME(const act_t* __restrict__ x, const act_t* __restrict__ w, const float* __restrict__ bias,         \
             act_t* __restrict__ y, GrpParams p) {                                                              \
        HAL_PDL_ENTRY();                                                                                        \
        extern __shared__ __align__(16) unsigned char smem_raw[];                                               \
        grp_conv<KH_, KW_, SH_, SW_>(smem_raw, x, w, bias, y, p);                                               \
    }
GRP_KERNEL(conv2d_grp_k3s1, 3, 3, 1, 1)
GRP_KERNEL(conv2d_grp_g, 0, 0, 0, 0)

// ---------------------------------------------------------------------------------
// float32 dense 1x1 convs as one SGEMM on CUDA cores (CONV_K1_SIMT; session 23). Before it
// they ran on the tiled direct kernel or one thread per output (H200, session 22: 1x1 stride 2
// 256->512 on 32x256x56x56 5.77 ms NCHW, 2.56 ms NHWC; cuDNN 0.178 / 0.263 ms). fp32 FMAs only:
// no tensor cores, no TF32.
//   NHWC: Y[m][co] = sum_ci X'[m][ci] W[co][ci], m = (n, oh, ow) and X' row m the input pixel
//         (n, oh SH - PT, ow SW - PL), zeros outside the image: rows = pixels, columns = channels.
//   NCHW: Y[n][co][p] = sum_ci W[co][ci] X[n][ci][pixel(p)]: rows = channels, columns = pixels.
//   The columns are the output's contiguous dimension either way. The M = N OH OW pixels run
//   across images: a tile may end one image and start the next.
// Block tile 128 pixels x K1S_BN output channels (256 threads for 128, 128 for 64), K1S_BK input
// channels a stage. A thread owns 8 x 8 outputs: rows 4 ty + {0..3} and BR / 2 + 4 ty + {0..3},
// columns 4 tx + {0..3} and BC / 2 + 4 tx + {0..3}; a warp is 4 x 8 threads, so each k's four
// float4 shared reads take 64 and 128 contiguous bytes (no bank conflicts), for 64 FMAs.
// Both operands lie k-major in shared memory ([k][row], [k][column], rows padded by 4 floats),
// in two buffers: a stage's global loads go to registers before the current stage's FMAs and
// into the other buffer after them, one barrier a stage. Loads along k (X in NHWC, W always)
// are float4 where C_in % 4 == 0 and the buffer is 16-byte aligned, else scalar, and are stored
// transposed (rows 4 (mod 8) floats apart: 16 rows x 2 k-quads of a warp in 32 banks for K1S_BK
// 8). NCHW X loads 4 consecutive pixels of one channel: a float4 where output pixel p reads input
// pixel p (stride 1, no padding, H W % 4 == 0, x aligned), else four gathers. Channels past C_in,
// pixels past M or outside the image and channels past C_out load zeros; accumulation in k order,
// then the bias (may be NULL) and the fused ReLU (FUSE_RELU); float4 stores along the output's
// contiguous dimension where it allows (NHWC C_out % 4 == 0, NCHW OH OW % 4 == 0; y aligned),
// guarded scalar stores elsewhere. Needs every element offset of x, y and w and M + 128 below 2^31
// (the launcher checks: _plan_conv_k1_simt).
// ---------------------------------------------------------------------------------
#if !HAL_ACT16  // float32 only (the launcher plans these for float32 alone)
// K1S_BN [128]: output channels a block tile (64 or 128; the launcher builds 64 wherever C_out <= 64);
// K1S_BK [8]: input channels a shared-memory stage (8 or 16)
#ifndef K1S_BN
#define K1S_BN 128
#endif
#ifndef K1S_BK
#define K1S_BK 8
#endif
namespace k1s {
constexpr int BP = 128, BCO = K1S_BN, BK = K1S_BK;
static_assert(BCO == 64 || BCO == 128, "K1S_BN: 64 or 128");
static_assert(BK == 8 || BK == 16, "K1S_BK: 8 or 16");
constexpr int THREADS = BP * BCO / 64;          // 8 x 8 outputs a thread
constexpr int MINB = 65536 / (128 * THREADS);   // 128 registers a thread: 2 blocks of 256, 4 of 128
#if LAYOUT_NHWC
constexpr int BR = BP, BC = BCO;  // rows: pixels; columns: output channels
#else
constexpr int BR = BCO, BC = BP;  // rows: output channels; columns: pixels
#endif
constexpr int RS = BR + 4, CS = BC + 4;  // shared row strides in floats: 4 (mod 8), 16-byte multiples
constexpr int STAGE = BK * (RS + CS);    // floats a buffer: [BK][RS] rows, then [BK][CS] columns
constexpr int SMEM = 2 * STAGE * 4;      // bytes (_k1s_smem in the backend)
static_assert(SMEM <= 48 * 1024, "k1s::SMEM: within the default dynamic shared memory");
constexpr int TX = BC / 8, TY = BR / 8;  // the block's threads: TY x TX
constexpr int WX = 8, WY = 4;            // a warp's: WY x WX
static_assert(TX * TY == THREADS && TX % WX == 0 && TY % WY == 0, "k1s: the thread grid");
constexpr int KQ = BK / 4;                                // float4 groups along k of a row, a stage
constexpr int GX = BP * KQ / THREADS, GW = BCO * KQ / THREADS;  // float4 loads a thread, a stage: x, w
constexpr int RSTEP = THREADS / KQ;                       // rows between a thread's k-row loads
constexpr int XSTEP = THREADS / (BP / 4);                 // k between a thread's pixel loads of x (NCHW, GATHER)
static_assert(GX >= 1 && GW >= 1 && GX * THREADS == BP * KQ && GW * THREADS == BCO * KQ, "k1s: whole loads");
}  // namespace k1s

// channels k .. k + 3 of the row at element offset `off` of src (-1: a zero row); zeros past C_in.
// VEC: C_in % 4 == 0 and src 16-byte aligned (k % 4 == 0: the quad is all inside or all past C_in)
template <bool VEC>
__device__ __forceinline__ float4 k1s_ld_k(const float* __restrict__ src, int off, int k, int CI) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (off < 0 || k >= CI) return v;
    const float* p = src + off + k;
    if (VEC) {
        v = __ldg(reinterpret_cast<const float4*>(p));
    } else {
        v.x = __ldg(p);
        if (k + 1 < CI) v.y = __ldg(p + 1);
        if (k + 2 < CI) v.z = __ldg(p + 2);
        if (k + 3 < CI) v.w = __ldg(p + 3);
    }
    return v;
}

// NCHW: channel k of the four pixels at element offsets off[0..3] of x at channel 0 (-1: zero)
// VEC: the four are consecutive and 16-byte aligned, all valid or none
template <bool VEC>
__device__ __forceinline__ float4 k1s_ld_px(const float* __restrict__ x, const int (&off)[4], int k, int CI,
                                            int IHW) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (k >= CI) return v;
    const int ko = k * IHW;
    if (VEC) {
        if (off[0] >= 0) v = __ldg(reinterpret_cast<const float4*>(x + off[0] + ko));
    } else {
        if (off[0] >= 0) v.x = __ldg(x + off[0] + ko);
        if (off[1] >= 0) v.y = __ldg(x + off[1] + ko);
        if (off[2] >= 0) v.z = __ldg(x + off[2] + ko);
        if (off[3] >= 0) v.w = __ldg(x + off[3] + ko);
    }
    return v;
}

// output pixel m's input pixel: its image n and (ih, iw); false where it lies outside the input
__device__ __forceinline__ bool k1s_pixel(int m, int OHW, int OW, int SH, int SW, int PT, int PL, int IH, int IW,
                                          int& n, int& ih, int& iw) {
    n = m / OHW;
    const int rem = m - n * OHW, oh = rem / OW, ow = rem - (rem / OW) * OW;
    ih = oh * SH - PT;
    iw = ow * SW - PL;
    return (unsigned)ih < (unsigned)IH && (unsigned)iw < (unsigned)IW;
}

// a float4 of k-quad kq .. kq + 3 of row `row`, transposed into s ([k][stride])
__device__ __forceinline__ void k1s_st_t(float* s, int stride, int row, int kq, const float4& v) {
    s[kq * stride + row] = v.x;
    s[(kq + 1) * stride + row] = v.y;
    s[(kq + 2) * stride + row] = v.z;
    s[(kq + 3) * stride + row] = v.w;
}

// GATHER (conv2d_im2col_simt): channels of the 1x1 GEMM become k of any window (see there): x's k of 4
// output pixels gathered through the table `tab`, as NCHW's loads; with VX (NHWC, C_in % 4 == 0, x
// aligned: k = (ky, kx, ci), "GQ") a float4 of 4 channels of one pixel row, as NHWC's 1x1 loads
__device__ __forceinline__ float4 k1s_gather(const float* __restrict__ x, const int (&base)[4], const int (&ih0)[4],
                                             const int (&iw0)[4], const int4& t, int IH, int IW) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if ((unsigned)(ih0[0] + t.y) < (unsigned)IH && (unsigned)(iw0[0] + t.z) < (unsigned)IW) v.x = __ldg(x + base[0] + t.x);
    if ((unsigned)(ih0[1] + t.y) < (unsigned)IH && (unsigned)(iw0[1] + t.z) < (unsigned)IW) v.y = __ldg(x + base[1] + t.x);
    if ((unsigned)(ih0[2] + t.y) < (unsigned)IH && (unsigned)(iw0[2] + t.z) < (unsigned)IW) v.z = __ldg(x + base[2] + t.x);
    if ((unsigned)(ih0[3] + t.y) < (unsigned)IH && (unsigned)(iw0[3] + t.z) < (unsigned)IW) v.w = __ldg(x + base[3] + t.x);
    return v;
}

// VX: x's loads as float4 (NHWC: C_in % 4 == 0, x aligned; NCHW: output pixel p reads input pixel p,
// H W % 4 == 0, x aligned); VW: w's (KK % 4 == 0, w aligned; GQ: w's elements through the table's .w).
// KK: the GEMM's k (C_in; GATHER: C_in KH KW, with `tab` its per-k offsets, KT x BK entries)
template <bool VX, bool VW, bool GATHER = false>
__device__ __forceinline__ void k1s_body(float* smem, const float* __restrict__ x, const float* __restrict__ w,
                                         const float* __restrict__ bias, float* __restrict__ y, int N, int CI, int IH,
                                         int IW, int CO, int OH, int OW, int SH, int SW, int PT, int PL, int KK = 0,
                                         const int4* __restrict__ tab = nullptr) {
    using namespace k1s;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int ty = (warp / (TX / WX)) * WY + lane / WX, tx = (warp % (TX / WX)) * WX + lane % WX;
    // the output-channel tiles of a pixel tile are adjacent blocks: they read the same input pixels
    const int nco = (CO + BCO - 1) / BCO;
    const int ptile = blockIdx.x / nco, ctile = blockIdx.x - ptile * nco;
    const int m0 = ptile * BP, co0 = ctile * BCO;
    const int OHW = OH * OW, M = N * OHW;
    if (!GATHER) KK = CI;
    constexpr bool GQ = GATHER && VX && LAYOUT_NHWC;  // x's k-quads: 4 channels of one pixel
    const int KT = (KK + BK - 1) / BK;

    // this thread's loads of a stage: k-rows lrow + RSTEP i at k .. k + 3 (w; NHWC x too); NCHW x and
    // GATHER: pixels p4 .. p4 + 3 of the tile at k xk + XSTEP i
    const int kq = (tid % KQ) * 4, lrow = tid / KQ;
    const int p4 = (tid % (BP / 4)) * 4, xk = tid / (BP / 4);
    int woff[GW];
#pragma unroll
    for (int i = 0; i < GW; ++i) {
        const int co = co0 + lrow + RSTEP * i;
        woff[i] = co < CO ? co * KK : -1;
    }
    // GATHER: the 4 pixels' (GQ: the GX pixel rows') window corners (ih0, iw0) and their offsets in x (a
    // row of -2^30 past M: never inside; the table's k past KK add another -2^30)
    int gbase[4], gih[4], giw[4];
    if (GATHER) {
#pragma unroll
        for (int j = 0; j < (GQ ? GX : 4); ++j) {
            const int m = GQ ? m0 + lrow + RSTEP * j : m0 + p4 + j;
            gih[j] = -(1 << 30), giw[j] = 0, gbase[j] = 0;
            if (m < M) {
                const int n = m / OHW, rem = m - n * OHW, oh = rem / OW, ow = rem - oh * OW;
                gih[j] = oh * SH - PT;
                giw[j] = ow * SW - PL;
#if LAYOUT_NHWC
                gbase[j] = ((n * IH + gih[j]) * IW + giw[j]) * CI;
#else
                gbase[j] = n * CI * IH * IW + gih[j] * IW + giw[j];
#endif
            }
        }
    }
#if LAYOUT_NHWC
    int xoff[GX];
#pragma unroll
    for (int i = 0; i < GX; ++i) {
        const int m = m0 + lrow + RSTEP * i;
        int n, ih, iw;
        xoff[i] = (!GATHER && m < M && k1s_pixel(m, OHW, OW, SH, SW, PT, PL, IH, IW, n, ih, iw))
                      ? ((n * IH + ih) * IW + iw) * CI : -1;
    }
#else
    const int IHW = IH * IW;
    int xoff[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int m = m0 + p4 + j;
        int n, ih, iw;
        xoff[j] = (!GATHER && m < M && k1s_pixel(m, OHW, OW, SH, SW, PT, PL, IH, IW, n, ih, iw))
                      ? n * CI * IHW + ih * IW + iw : -1;
    }
#endif
    float4 rx[GX], rw[GW];
    auto load = [&](int k0) {
        if (GQ) {
            // w's k-quad k0 + kq .. + 3 from four places (k = (ky, kx, ci) is not w's order); x's from one
            // float4 of a pixel's channels, (ky, kx) shared by the quad as C_in % 4 == 0
            const int4 t = tab[k0 + kq];
            int wk[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) wk[e] = k0 + kq + e < KK ? tab[k0 + kq + e].w : -1;
#pragma unroll
            for (int i = 0; i < GW; ++i) {
                rw[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (woff[i] >= 0) {
                    if (wk[0] >= 0) rw[i].x = __ldg(w + woff[i] + wk[0]);
                    if (wk[1] >= 0) rw[i].y = __ldg(w + woff[i] + wk[1]);
                    if (wk[2] >= 0) rw[i].z = __ldg(w + woff[i] + wk[2]);
                    if (wk[3] >= 0) rw[i].w = __ldg(w + woff[i] + wk[3]);
                }
            }
#pragma unroll
            for (int i = 0; i < GX; ++i) {
                rx[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if ((unsigned)(gih[i] + t.y) < (unsigned)IH && (unsigned)(giw[i] + t.z) < (unsigned)IW)
                    rx[i] = __ldg(reinterpret_cast<const float4*>(x + gbase[i] + t.x));
            }
        } else {
#pragma unroll
            for (int i = 0; i < GW; ++i) rw[i] = k1s_ld_k<VW>(w, woff[i], k0 + kq, KK);
#pragma unroll
            for (int i = 0; i < GX; ++i)
                if (GATHER)
                    rx[i] = k1s_gather(x, gbase, gih, giw, tab[k0 + xk + XSTEP * i], IH, IW);
                else
#if LAYOUT_NHWC
                    rx[i] = k1s_ld_k<VX>(x, xoff[i], k0 + kq, CI);
#else
                    rx[i] = k1s_ld_px<VX>(x, xoff, k0 + xk + XSTEP * i, CI, IHW);
#endif
        }
    };
    auto store = [&](float* s) {
        float* sr = s;            // [BK][RS]
        float* sc = s + BK * RS;  // [BK][CS]
#if LAYOUT_NHWC
        // GATHER (not GQ): x as 4 pixels at one k, like NCHW's (the rows are the pixels here)
#pragma unroll
        for (int i = 0; i < GX; ++i)
            if (GATHER && !GQ)
                *reinterpret_cast<float4*>(sr + (xk + XSTEP * i) * RS + p4) = rx[i];
            else
                k1s_st_t(sr, RS, lrow + RSTEP * i, kq, rx[i]);
#pragma unroll
        for (int i = 0; i < GW; ++i) k1s_st_t(sc, CS, lrow + RSTEP * i, kq, rw[i]);
#else
#pragma unroll
        for (int i = 0; i < GW; ++i) k1s_st_t(sr, RS, lrow + RSTEP * i, kq, rw[i]);
#pragma unroll
        for (int i = 0; i < GX; ++i) *reinterpret_cast<float4*>(sc + (xk + XSTEP * i) * CS + p4) = rx[i];
#endif
    };

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

    load(0);
    store(smem);
    __syncthreads();
    for (int kt = 0; kt < KT; ++kt) {
        const bool more = kt + 1 < KT;
        if (more) load((kt + 1) * BK);  // in flight under this stage's FMAs
        const float* sr = smem + (kt & 1) * STAGE + ty * 4;
        const float* sc = smem + (kt & 1) * STAGE + BK * RS + tx * 4;
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            const float4 a0 = *reinterpret_cast<const float4*>(sr + kk * RS);
            const float4 a1 = *reinterpret_cast<const float4*>(sr + kk * RS + BR / 2);
            const float4 b0 = *reinterpret_cast<const float4*>(sc + kk * CS);
            const float4 b1 = *reinterpret_cast<const float4*>(sc + kk * CS + BC / 2);
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        // the other buffer was last read in stage kt - 1, which every thread finished before the
        // previous barrier; this one is read again two stages on, after the next barrier
        if (more) store(smem + ((kt + 1) & 1) * STAGE);
        __syncthreads();
    }

#if LAYOUT_NHWC
    // rows = pixels, columns = channels: float4 stores along each output pixel's channels
    float bv[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int co = co0 + (j < 4 ? 0 : BC / 2) + tx * 4 + (j & 3);
        bv[j] = (bias && co < CO) ? __ldg(bias + co) : 0.0f;
    }
    const bool vec_out = CO % 4 == 0 && aligned16(y);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int m = m0 + (i < 4 ? 0 : BR / 2) + ty * 4 + (i & 3);
        if (m >= M) continue;
        float* yrow = y + m * CO;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int co = co0 + h * (BC / 2) + tx * 4;
            float o[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) o[e] = out_act(acc[i][h * 4 + e] + bv[h * 4 + e]);
            if (vec_out && co < CO) {
                *reinterpret_cast<float4*>(yrow + co) = make_float4(o[0], o[1], o[2], o[3]);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (co + e < CO) yrow[co + e] = o[e];
            }
        }
    }
#else
    // rows = channels, columns = pixels: float4 stores along each channel's pixels (4 pixels of one
    // image where OH OW % 4 == 0); yoff: a column's pixel at channel 0 of y (-1: past M), for one
    // half of the thread's columns at a time (fewer live registers)
    const bool vec_out = OHW % 4 == 0 && aligned16(y);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        int yoff[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int m = m0 + h * (BC / 2) + tx * 4 + e;
            const int n = m / OHW;
            yoff[e] = m < M ? n * CO * OHW + (m - n * OHW) : -1;
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int co = co0 + (i < 4 ? 0 : BR / 2) + ty * 4 + (i & 3);
            if (co >= CO) continue;
            const float bvi = bias ? __ldg(bias + co) : 0.0f;
            const int cof = co * OHW;
            float o[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) o[e] = out_act(acc[i][h * 4 + e] + bvi);
            if (vec_out) {
                if (yoff[0] >= 0) *reinterpret_cast<float4*>(y + yoff[0] + cof) = make_float4(o[0], o[1], o[2], o[3]);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (yoff[e] >= 0) y[yoff[e] + cof] = o[e];
            }
        }
    }
#endif
}

extern "C" __global__ void __launch_bounds__(k1s::THREADS, k1s::MINB)
    conv2d_k1_simt(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                   float* __restrict__ y, int N, int CI, int IH, int IW, int CO, int OH, int OW, int SH, int SW,
                   int PT, int PL) {
    HAL_PDL_ENTRY();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float* smem = reinterpret_cast<float*>(smem_raw);
    const bool vw = CI % 4 == 0 && aligned16(w);
#if LAYOUT_NHWC
    const bool vx = CI % 4 == 0 && aligned16(x);
#else
    const bool vx = SH == 1 && SW == 1 && PT == 0 && PL == 0 && OH == IH && OW == IW && (IH * IW) % 4 == 0 &&
                    aligned16(x);
#endif
    if (vx) {
        if (vw)
            k1s_body<true, true>(smem, x, w, bias, y, N, CI, IH, IW, CO, OH, OW, SH, SW, PT, PL);
        else
            k1s_body<true, false>(smem, x, w, bias, y, N, CI, IH, IW, CO, OH, OW, SH, SW, PT, PL);
    } else {
        if (vw)
            k1s_body<false, true>(smem, x, w, bias, y, N, CI, IH, IW, CO, OH, OW, SH, SW, PT, PL);
        else
            k1s_body<false, false>(smem, x, w, bias, y, N, CI, IH, IW, CO, OH, OW, SH, SW, PT, PL);
    }
}

// ---------------------------------------------------------------------------------
// float32 dense convs of any window as an implicit GEMM on CUDA cores (CONV_IM2COL in float32;
// session 27): conv2d_k1_simt's tiles, stages and FMA loop with k = (ci, ky, kx) as the weights lie
// ([co][ci][kh][kw]: a row of w is K = C_in KH KW contiguous floats), x's elements gathered through a
// table the block builds first in shared memory behind the two stages: for each k its offset in x
// from a pixel's window corner, ky DH and kx DW (k past K: a row offset of -2^30, never inside). A
// thread gathers 4 consecutive output pixels at one k per load (bounds tested per element: zeros
// outside the image), stored as one float4 into the pixel operand. Before it the stems and strided
// 3x3 convs ran on the tiled direct kernel (H200, session 26: the 7x7/2 3->64 stem of 32x3x224x224
// 0.45 ms at best, cuDNN 0.37). NHWC with C_in % 4 == 0 and x aligned orders k as (ky, kx, ci)
// instead (the table's .w maps each k to w's order): a thread loads a float4 of 4 channels of one
// pixel row, as conv2d_k1_simt's NHWC loads, where 4 pixels at one k lie C_in SW floats apart (with
// those gathers, session 27: 3x3 64->64 on 256x64x32x32 1.04 ms against 0.67 in NCHW, 3x3 stride 2
// 64->128 0.36 against 0.27). Needs the offsets of x, y and w and M + 128 below 2^31 (the launcher
// checks: _plan_conv_im2col_simt).
extern "C" __global__ void __launch_bounds__(k1s::THREADS, k1s::MINB)
    conv2d_im2col_simt(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                       float* __restrict__ y, int N, int CI, int IH, int IW, int CO, int OH, int OW, int KH, int KW,
                       int SH, int SW, int DH, int DW, int PT, int PL) {
    HAL_PDL_ENTRY();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float* smem = reinterpret_cast<float*>(smem_raw);
    int4* tab = reinterpret_cast<int4*>(smem_raw + k1s::SMEM);
    const int KHW = KH * KW, K = CI * KHW, KP = (K + k1s::BK - 1) / k1s::BK * k1s::BK;
    // NHWC with C_in % 4 == 0 and x aligned: k = (ky, kx, ci), x's loads 4 channels at once
    const bool quads = LAYOUT_NHWC && CI % 4 == 0 && aligned16(x);
    for (int k = threadIdx.x; k < KP; k += k1s::THREADS) {
        int4 t = make_int4(0, -(1 << 30), 0, 0);
        if (k < K) {
            int ci, ky, kx;
            if (quads) {
                const int r = k / CI;
                ci = k - r * CI, ky = r / KW, kx = r - ky * KW;
            } else {
                const int r = k / KHW;
                ci = r, ky = (k - r * KHW) / KW, kx = k - r * KHW - ky * KW;
            }
            t.y = ky * DH;
            t.z = kx * DW;
            t.w = ci * KHW + ky * KW + kx;  // the element's k in w's order
#if LAYOUT_NHWC
            t.x = (t.y * IW + t.z) * CI + ci;
#else
            t.x = ci * IH * IW + t.y * IW + t.z;
#endif
        }
        tab[k] = t;
    }
    __syncthreads();  // (k1s_body's first barrier comes after its first stage's loads)
#if LAYOUT_NHWC
    if (quads) {
        k1s_body<true, false, true>(smem, x, w, bias, y, N, CI, IH, IW, CO, OH, OW, SH, SW, PT, PL, K, tab);
        return;
    }
#endif
    if (K % 4 == 0 && aligned16(w))
        k1s_body<false, true, true>(smem, x, w, bias, y, N, CI, IH, IW, CO, OH, OW, SH, SW, PT, PL, K, tab);
    else
        k1s_body<false, false, true>(smem, x, w, bias, y, N, CI, IH, IW, CO, OH, OW, SH, SW, PT, PL, K, tab);
}
#endif  // !HAL_ACT16 (conv2d_k1_simt, conv2d_im2col_simt)

// ---------------------------------------------------------------------------------
// grouped convs in float16 (and bfloat16, session 40) on tensor cores (GRP_TC; session 19, first run on the H200 in
// session 20): stride 1, no dilation, KH, KW <= 3, at most 16 input and 16 output
// channels a group (ResNeXt, RegNet). Per group the conv is a GEMM of pixels x (C_out / G)
// x K, K = (kh, kw, ci) with the group's channels padded to an even count cigp, in
// k-steps of 16 (mma.sync m16n8k16, float accumulators). A block is (image, tile of th rows
// x 32 columns, group), the group fastest: its input patch, (th + KH - 1) x (32 + KW - 1)
// pixels x cigp halves, is staged in shared memory channels-last (zero outside the input and
// in the padded channel), so that a fragment's two consecutive k are one 32-bit read. Each
// lane keeps its B fragments (the group's weights, zero past K and C_out / G) in registers
// for the whole block; a warp walks m-tiles of 16 pixels of one row.
// ---------------------------------------------------------------------------------
#if HAL_ACT16  // float16's, and bfloat16's on sm_80+ (TC_MMA_AB: the launcher plans no bfloat16 below sm_80)
struct GrpTcParams {
    int N, CI, IH, IW, CO, OH, OW, KH, KW, PT, PL;
    int G, cig, cog, cigp;  // groups, channels a group in and out, cig rounded up to even
    int ksteps;             // ceil(KH * KW * cigp / 16), at most 9
    int th, tiles_w, tiles_h, iht, iwt;
    int vec_in;             // NHWC, cig % 8 == 0, x 16-byte aligned: 8 channels a 16-byte load
};
constexpr int GRP_TC_KSMAX = 9;  // 3 x 3 taps x 16 channels

template <int NT>  // n-tiles of 8 output channels: 1 (C_out / G <= 8) or 2 (<= 16)
__device__ __forceinline__ void grp_tc(unsigned char* smem, const act_t* __restrict__ x,
                                       const act_t* __restrict__ w, const float* __restrict__ bias,
                                       act_t* __restrict__ y, const GrpTcParams& p) {
    act_t* s_x = reinterpret_cast<act_t*>(smem);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
    int b = blockIdx.x;
    const int g = b % p.G;
    b /= p.G;
    const int twi = b % p.tiles_w;
    b /= p.tiles_w;
    const int thi = b % p.tiles_h;
    const int n = b / p.tiles_h;
    const int oh0 = thi * p.th, ow0 = twi * 32;
    const int ih0 = oh0 - p.PT, iw0 = ow0 - p.PL;
    const int taps = p.KH * p.KW, kreal = taps * p.cigp;

    // the patch: pixel (r, c) at halves (r * iwt + c) * cigp, channel ci at + ci
    const int npix = p.iht * p.iwt;
#if LAYOUT_NHWC
    const act_t* __restrict__ xn = x + (long long)n * p.IH * p.IW * p.CI + (long long)g * p.cig;
    if (p.vec_in) {  // 8 channels a 16-byte load; cigp == cig
        const int per = p.cig >> 3, total = npix * per;
        for (int f0 = tid; f0 < total; f0 += 4 * blockDim.x) {
            uint4 v[4];
            int dst[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int f = f0 + u * blockDim.x;
                dst[u] = -1;
                v[u] = make_uint4(0u, 0u, 0u, 0u);
                if (f >= total) continue;
                const int pix = f / per, q = f - pix * per;
                const int r = pix / p.iwt, c = pix - r * p.iwt;
                dst[u] = pix * p.cigp + q * 8;
                const int ih = ih0 + r, iw = iw0 + c;
                if ((unsigned)ih < (unsigned)p.IH && (unsigned)iw < (unsigned)p.IW)
                    v[u] = __ldg(reinterpret_cast<const uint4*>(xn + ((long long)ih * p.IW + iw) * p.CI + q * 8));
            }
#pragma unroll
            for (int u = 0; u < 4; ++u)
                if (dst[u] >= 0) *reinterpret_cast<uint4*>(s_x + dst[u]) = v[u];
        }
    } else
#else
    const act_t* __restrict__ xn = x + ((long long)n * p.CI + (long long)g * p.cig) * p.IH * p.IW;
#endif
    {
        const int total = npix * p.cigp;
        for (int f0 = tid; f0 < total; f0 += GRP_BATCH * blockDim.x) {
            act_t v[GRP_BATCH];
            int dst[GRP_BATCH];
#pragma unroll
            for (int u = 0; u < GRP_BATCH; ++u) {
                const int f = f0 + u * blockDim.x;
                dst[u] = -1;
                v[u] = TC_ZERO;
                if (f >= total) continue;
#if LAYOUT_NHWC
                const int pix = f / p.cigp, ci = f - pix * p.cigp;  // channels fastest
#else
                const int ci = f / npix, pix = f - ci * npix;  // columns fastest
#endif
                const int r = pix / p.iwt, c = pix - r * p.iwt;
                dst[u] = pix * p.cigp + ci;
                const int ih = ih0 + r, iw = iw0 + c;
                if (ci < p.cig && (unsigned)ih < (unsigned)p.IH && (unsigned)iw < (unsigned)p.IW) {
#if LAYOUT_NHWC
                    v[u] = xn[((long long)ih * p.IW + iw) * p.CI + ci];
#else
                    v[u] = xn[((long long)ci * p.IH + ih) * p.IW + iw];
#endif
                }
            }
#pragma unroll
            for (int u = 0; u < GRP_BATCH; ++u)
                if (dst[u] >= 0) s_x[dst[u]] = v[u];
        }
    }

    // this lane's k: ks * 16 + 2 (lane % 4) (+ 8), pairs of channels of one tap; its patch
    // offsets (-1: past K, a zero operand) and B fragments, n = nt * 8 + lane / 4
    const int q2 = (lane & 3) * 2, gq = lane >> 2;
    int off_lo[GRP_TC_KSMAX], off_hi[GRP_TC_KSMAX];
    unsigned bfr[GRP_TC_KSMAX][NT][2];
#pragma unroll
    for (int ks = 0; ks < GRP_TC_KSMAX; ++ks) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int k = ks * 16 + q2 + 8 * h;
            int off = -1;
            if (ks < p.ksteps && k < kreal) {
                const int tap = k / p.cigp, ci = k - tap * p.cigp;
                const int kh = tap / p.KW, kw = tap - kh * p.KW;
                off = (kh * p.iwt + kw) * p.cigp + ci;
            }
            (h ? off_hi : off_lo)[ks] = off;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const int co = nt * 8 + gq;
                float wv[2] = {0.0f, 0.0f};
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int tap = (k + e) / p.cigp, ci = (k + e) - ((k + e) / p.cigp) * p.cigp;
                    if (off >= 0 && co < p.cog && ci < p.cig)
                        wv[e] = to_f(w[(((long long)g * p.cog + co) * p.cig + ci) * taps + tap]);
                }
                TC_PAIR_T hw = TC_PAIR(wv[0], wv[1]);
                bfr[ks][nt][h] = *reinterpret_cast<unsigned*>(&hw);
            }
        }
    }
    float bv[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int co = nt * 8 + q2 + e;
            bv[nt][e] = (bias != nullptr && co < p.cog) ? bias[g * p.cog + co] : 0.0f;
        }
    __syncthreads();

    const int mtiles = p.th * 2;  // 16 pixels of one row each
    for (int mt = warp; mt < mtiles; mt += nwarps) {
        const int row = mt >> 1, col = (mt & 1) * 16 + gq;  // this lane's first pixel; the other is col + 8
        const int oh = oh0 + row;
        if (oh >= p.OH) break;  // m-tiles go row by row: the rest are past the output too
        const act_t* s0 = s_x + (row * p.iwt + col) * p.cigp;
        const act_t* s8 = s0 + 8 * p.cigp;
        float acc[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            acc[nt][0] = acc[nt][2] = bv[nt][0];
            acc[nt][1] = acc[nt][3] = bv[nt][1];
        }
#pragma unroll
        for (int ks = 0; ks < GRP_TC_KSMAX; ++ks) {
            if (ks >= p.ksteps) break;
            unsigned a[4];
            const int lo = off_lo[ks], hi = off_hi[ks];
            a[0] = lo >= 0 ? *reinterpret_cast<const unsigned*>(s0 + lo) : 0u;
            a[1] = lo >= 0 ? *reinterpret_cast<const unsigned*>(s8 + lo) : 0u;
            a[2] = hi >= 0 ? *reinterpret_cast<const unsigned*>(s0 + hi) : 0u;
            a[3] = hi >= 0 ? *reinterpret_cast<const unsigned*>(s8 + hi) : 0u;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) mma16816(acc[nt], a, bfr[ks][nt][0], bfr[ks][nt][1]);
        }
#pragma unroll
        for (int half8 = 0; half8 < 2; ++half8) {
            const int ow = ow0 + col + 8 * half8;
            if (ow >= p.OW) continue;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int co = nt * 8 + q2 + e;
                    if (co >= p.cog) continue;
                    const long long c = (long long)g * p.cog + co;
#if LAYOUT_NHWC
                    st_act(y + (((long long)n * p.OH + oh) * p.OW + ow) * p.CO + c, acc[nt][2 * half8 + e]);
#else
                    st_act(y + ((n * (long long)p.CO + c) * p.OH + oh) * p.OW + ow, acc[nt][2 * half8 + e]);
#endif
                }
        }
    }
}

#define GRP_TC_KERNEL(NAME, NT)                                                                                 \
    extern "C" __global__ void __launch_bounds__(128)                                                           \
        NAME(const act_t* __restrict__ x, const act_t* __restrict__ w, const float* __restrict__ bias,         \
             act_t* __restrict__ y, GrpTcParams p) {                                                            \
        HAL_PDL_ENTRY();                                                                                        \
        extern __shared__ __align__(16) unsigned char smem_raw[];                                               \
        grp_tc<NT>(smem_raw, x, w, bias, y, p);                                                                 \
    }
GRP_TC_KERNEL(conv2d_grp_tc8, 1)
GRP_TC_KERNEL(conv2d_grp_tc16, 2)
#endif  // HAL_ACT16

#if DTYPE_HALF  // the depthwise tensor-core kernel is float16's alone
// ---------------------------------------------------------------------------------
// depthwise 3x3 stride 1, float16 NCHW, on tensor cores (DW_TC; session 20). The SIMT
// depthwise kernels are issue-bound in float16 (about 33 instructions an output where the
// floor is 9 FMAs, plus a conversion per input read). Along a row, a 3-tap filter is a
// banded (Toeplitz) matrix: out[oh][ow0 + n] = sum_kh sum_k in[oh + kh][window + k] *
// T_kh[k][n], T_kh[k][n] = w[kh][k - n - 6 + PL] where that index is 0..2, else 0. So 16
// output rows x 8 output columns of one plane are 3 mma.sync m16n8k16 (A: 16 staged input
// rows x 16 staged columns, read as halves with no conversion; B: the channel's T_kh,
// built once a tile; float accumulators, bias first). A warp owns a tile of 16 x 32 outputs
// of one plane, stages its 18 input rows x 48 columns (6 aligned 8-half vectors a row,
// zero outside the input; IW % 8 == 0, so a vector is wholly in or out) in its own slice
// of shared memory, and needs no block barrier. Staged column j is input column ow0 - 8 + j
// (the 32 columns of the tile as 4 aligned vectors, the halo columns ow0 - 1, ow0 + 32 and
// ow0 + 33, zeros elsewhere); n-tile t reads the window of staged columns [8t + 2, 8t + 18),
// which holds the taps of its outputs for PL <= 1 (k = n + kw + 6 - PL in [5, 15]). The
// outputs go back through the same staging area and out as 16-byte row vectors.
// Not the reference's arithmetic for non-finite inputs: the banded matrix's zeros multiply
// the window's other columns, so an Inf or NaN input makes NaN of the outputs of its rows
// within 16 columns (0 x Inf), where a direct conv gives Inf or finite values; hence opt-in.
// ---------------------------------------------------------------------------------
struct DwTcParams {
    int C, IH, IW, OH, OW, PT, PL;
    unsigned tiles;              // warp tiles: N * C * tiles_h * tiles_w (< 2^31)
    FastDiv fd_tw, fd_th, fd_c;  // tiles_w, tiles_h, C
};
constexpr int DWTC_WARPS = 4, DWTC_ROWS = 18, DWTC_VECS = 4;  // staged rows, 8-half vectors a row (+ halos)
// halves a staged row (48 used): RS / 2 = 4 (mod 8) words puts the 8 rows of a fragment
// read in distinct banks
constexpr int DWTC_RS = 56;
// halves a row of the staged output (16 x 32): 40 / 2 = 4 mod 8 words, 16-byte rows
constexpr int DWTC_OS = 40;
constexpr int DWTC_SLOTS = DWTC_ROWS * DWTC_VECS, DWTC_LOADS = (DWTC_SLOTS + 31) / 32;

// the persistent variant's blocks a multiprocessor (its register bound: 65536 / (6 x 128) = 85;
// at 8 blocks, 64 registers, it spills)
constexpr int DWTC_PERSIST_MINB = 6;

// one tile's global reads, in registers until they are staged: 4 vectors a row (columns
// ow0 .. ow0 + 31), the halo columns ow0 - 1 and ow0 + 32, ow0 + 33 of row `lane`, the
// channel's 9 weights and its bias
struct DwTcLoads {
    uint4 v[DWTC_LOADS];
    unsigned short halo_l;  // bits of the half at column ow0 - 1
    unsigned halo_r;        // the halves at columns ow0 + 32, ow0 + 33 (IW % 8 == 0: both or neither)
    unsigned short wt[9];
    float b0;
};

__device__ __forceinline__ void dwtc_tile(unsigned t, const DwTcParams& p, unsigned& plane, int& c, int& oh0,
                                          int& ow0) {
    const unsigned q = fdiv(t, p.fd_tw);
    const int tw = (int)(t - q * p.fd_tw.d);
    plane = fdiv(q, p.fd_th);
    const int th = (int)(q - plane * p.fd_th.d);
    c = (int)(plane - fdiv(plane, p.fd_c) * p.fd_c.d);
    oh0 = th * 16;
    ow0 = tw * 32;
}

__device__ __forceinline__ void dwtc_load(DwTcLoads& L, const __half* __restrict__ x, const __half* __restrict__ w,
                                          const float* __restrict__ bias, const DwTcParams& p, unsigned t,
                                          int lane) {
    unsigned plane;
    int c, oh0, ow0;
    dwtc_tile(t, p, plane, c, oh0, ow0);
    const int ih0 = oh0 - p.PT;
    const __half* __restrict__ xp = x + (size_t)plane * p.IH * p.IW;
#pragma unroll
    for (int u = 0; u < DWTC_LOADS; ++u) {
        const int slot = lane + 32 * u;
        L.v[u] = make_uint4(0u, 0u, 0u, 0u);
        if (slot < DWTC_SLOTS) {
            const int r = slot >> 2, vv = slot & 3;
            const int ih = ih0 + r, iw = ow0 + 8 * vv;
            if ((unsigned)ih < (unsigned)p.IH && iw < p.IW)
                L.v[u] = __ldg(reinterpret_cast<const uint4*>(xp + (size_t)ih * p.IW + iw));
        }
    }
    L.halo_l = 0;
    L.halo_r = 0;
    if (lane < DWTC_ROWS && (unsigned)(ih0 + lane) < (unsigned)p.IH) {
        const __half* row = xp + (size_t)(ih0 + lane) * p.IW;
        if (ow0 > 0) L.halo_l = __ldg(reinterpret_cast<const unsigned short*>(row + ow0 - 1));
        if (ow0 + 32 < p.IW) L.halo_r = __ldg(reinterpret_cast<const unsigned*>(row + ow0 + 32));
    }
#pragma unroll
    for (int k = 0; k < 9; ++k) L.wt[k] = __ldg(reinterpret_cast<const unsigned short*>(w) + c * 9 + k);
    L.b0 = bias != nullptr ? __ldg(bias + c) : 0.0f;
}

// PERSIST: a warp walks tiles t, t + (warps in the grid), ..., and issues the next tile's
// loads before it computes the current one; else a warp per tile
template <bool PERSIST>
__device__ __forceinline__ void dw_tc(unsigned char* smem, const __half* __restrict__ x,
                                      const __half* __restrict__ w, const float* __restrict__ bias,
                                      __half* __restrict__ y, const DwTcParams& p) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned t = blockIdx.x * DWTC_WARPS + warp;
    if (t >= p.tiles) return;  // warp-uniform; the kernel has no block barrier
    __half* s = reinterpret_cast<__half*>(smem) + warp * DWTC_ROWS * DWTC_RS;
    const unsigned step = gridDim.x * DWTC_WARPS;
    // this lane's B fragment elements: k = q2 + 8 h + i, n = gq, tap column kw = k - n - 6 + PL
    const int q2 = (lane & 3) * 2, gq = lane >> 2;
    int kws[2][2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int i = 0; i < 2; ++i) kws[h][i] = q2 + 8 * h + i - gq - 6 + p.PL;
    DwTcLoads L;
    dwtc_load(L, x, w, bias, p, t, lane);
    for (;;) {
        // stage the tile: the row vectors at columns 8 .. 39, the side vectors with the halos
        // and zeros elsewhere (the windows read columns 2 .. 41)
#pragma unroll
        for (int u = 0; u < DWTC_LOADS; ++u) {
            const int slot = lane + 32 * u;
            if (slot < DWTC_SLOTS) *reinterpret_cast<uint4*>(s + (slot >> 2) * DWTC_RS + 8 + 8 * (slot & 3)) = L.v[u];
        }
        if (lane < DWTC_ROWS) {
            *reinterpret_cast<uint4*>(s + lane * DWTC_RS) = make_uint4(0u, 0u, 0u, (unsigned)L.halo_l << 16);
            *reinterpret_cast<uint4*>(s + lane * DWTC_RS + 40) = make_uint4(L.halo_r, 0u, 0u, 0u);
        }
        unsigned bf[3][2];
#pragma unroll
        for (int kh = 0; kh < 3; ++kh)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                unsigned short e[2];
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const int kw = kws[h][i];
                    e[i] = kw == 0 ? L.wt[kh * 3] : kw == 1 ? L.wt[kh * 3 + 1] : kw == 2 ? L.wt[kh * 3 + 2] : 0;
                }
                bf[kh][h] = (unsigned)e[0] | ((unsigned)e[1] << 16);
            }
        const float b0 = L.b0;
        __syncwarp();
        unsigned plane;
        int c, oh0, ow0;
        dwtc_tile(t, p, plane, c, oh0, ow0);
        const unsigned tn = t + step;
        const bool more = PERSIST && tn < p.tiles;
        if (more) dwtc_load(L, x, w, bias, p, tn, lane);  // in flight while this tile computes

        const int ntiles = min(4, (p.OW - ow0 + 7) >> 3);  // n-tiles of 8 columns inside the output
        float acc[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[nt][e] = b0;
#pragma unroll
        for (int kh = 0; kh < 3; ++kh) {
            // 8-column chunks 0..4 of rows gq + kh and gq + 8 + kh; n-tile t is chunks t and t + 1
            const __half* r0 = s + (gq + kh) * DWTC_RS + 2 + q2;
            const __half* r8 = r0 + 8 * DWTC_RS;
            unsigned lo[5], hi[5];
#pragma unroll
            for (int ch = 0; ch < 5; ++ch) {
                lo[ch] = *reinterpret_cast<const unsigned*>(r0 + 8 * ch);
                hi[ch] = *reinterpret_cast<const unsigned*>(r8 + 8 * ch);
            }
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                if (nt < ntiles) {
                    const unsigned a[4] = {lo[nt], hi[nt], lo[nt + 1], hi[nt + 1]};
                    mma16816(acc[nt], a, bf[kh][0], bf[kh][1]);
                }
            }
        }

        // the C fragments (rows gq and gq + 8, columns 8 nt + q2 (+1)) go through this warp's
        // staging area, rows of DWTC_OS halves (OS / 2 = 4 mod 8 words: no bank conflicts), and
        // out as 16-byte vectors: a lane per 8 columns of a row, 4 lanes a row
        __syncwarp();  // every lane's fragment reads of the staged input are done
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                __half2 h = __floats2half2_rn(out_act(acc[nt][2 * hr]), out_act(acc[nt][2 * hr + 1]));
                *reinterpret_cast<__half2*>(s + (gq + 8 * hr) * DWTC_OS + 8 * nt + q2) = h;
            }
        __syncwarp();
        __half* __restrict__ yp = y + (size_t)plane * p.OH * p.OW;
        const bool vec_out = (p.OW & 7) == 0;  // rows 16-byte aligned (y is)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            const int r = (lane >> 2) + 8 * hr, c0 = 8 * (lane & 3);
            const int oh = oh0 + r, ow = ow0 + c0;
            if (oh >= p.OH || ow >= p.OW) continue;
            const __half* src = s + r * DWTC_OS + c0;
            __half* o = yp + (size_t)oh * p.OW + ow;
            if (vec_out) {
                *reinterpret_cast<uint4*>(o) = *reinterpret_cast<const uint4*>(src);
            } else {
                for (int i = 0; i < 8 && ow + i < p.OW; ++i) o[i] = src[i];
            }
        }
        if (!more) break;
        t = tn;
        __syncwarp();  // the output's reads are done before the next tile is staged
    }
}

extern "C" __global__ void __launch_bounds__(DWTC_WARPS * 32)
    conv2d_dw_tc_k3s1(const __half* __restrict__ x, const __half* __restrict__ w, const float* __restrict__ bias,
                      __half* __restrict__ y, DwTcParams p) {
    HAL_PDL_ENTRY();
    extern __shared__ __align__(16) unsigned char smem_raw[];  // DWTC_WARPS x DWTC_ROWS x DWTC_RS halves
    dw_tc<false>(smem_raw, x, w, bias, y, p);
}
extern "C" __global__ void __launch_bounds__(DWTC_WARPS * 32, DWTC_PERSIST_MINB)
    conv2d_dw_tc_persist_k3s1(const __half* __restrict__ x, const __half* __restrict__ w,
                              const float* __restrict__ bias, __half* __restrict__ y, DwTcParams p) {
    HAL_PDL_ENTRY();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    dw_tc<true>(smem_raw, x, w, bias, y, p);
}
#endif
