// BatchNorm forward: batch statistics and the per-channel affine map, for NCHW and NHWC,
// float32 and float16 (float arithmetic). Statistics: Chan merges of chunk statistics; a
// chunk's own are shifted sums about one of its values (bounded cancellation, see
// bn_sums_flush) or, with BN_STATS_SUMS 0, two-pass over each batch; never the unshifted
// E[x^2] - E[x]^2.
//
// Macros: DTYPE_HALF, DTYPE_BF16, LAYOUT_NHWC, BN_THREADS [256] (threads per block, <= 512),
// BN_UNROLL [4] (16-byte loads in flight per thread), BN_STATS_SUMS [64] (see below),
// BN_L2_HINT [1] (sm_80+: the statistics pass asks L2 to keep x, the apply pass lets x
// and y go first, and the apply pass runs each block's range backwards, so that training
// re-reads from L2 what the statistics pass read last), BN_INFER_OCC [0] (resident
// threads per multiprocessor the register allocation of batch_norm_infer_flat must allow;
// 0 = 1024 for BN_UNROLL 8, else 1536), BN_INFER_EARLY [0] (flat inference: the first
// tile's loads before the channel constants).
//
// Work split, shared by the statistics and apply kernels (so that both walk the data
// in mirrored order):
//   NCHW  block = (channel c, slab s): the slab is a range of channel c's N*HW values
//         taken in (n, hw) order; HAL_VEC values per load when HW % HAL_VEC == 0.
//   NHWC  block = (channel chunk, slab s): the slab is a range of the N*HW pixels,
//         each thread keeps HAL_VEC channels (when C % HAL_VEC == 0) and walks pixels.
//
// Entry points:
//   batch_norm_stats(x, mean, var, N, C, HW, part, BnParams)
//       per-block partial (count, mean, M2) of each channel into part[3 * (c * slabs + s)]
//   batch_norm_finalize(part, mean, var, weight, bias, running_mean, running_var, scale,
//                       beta, C, slabs, BnParams)
//       one block per channel merges the partials (Chan), writes mean/var (biased),
//       scale = weight / sqrt(var + eps), beta = bias, and updates the running statistics
//       (unbiased variance). A separate launch: a last-block merge of every channel's
//       partials serialised microseconds at the end of the statistics pass.
//   batch_norm_apply_ex(x, y, mean, scale, beta, running_mean, running_var, weight, bias,
//                       N, C, HW, BnParams)
//       y = (x - mean) * scale + beta (training: from the stats kernel; inference:
//       computed from the running statistics). Subtracting the mean first keeps
//       inputs with a large mean exact.
//   batch_norm_apply_merged(x, y, part, mean, var, weight, bias, running_mean, running_var,
//                           scale, beta, N, C, HW, BnParams)
//       NCHW training without the finalize launch: each block merges its channel's partials
//       (the launcher's BN_APPLY_MERGE), then applies.
//   batch_norm_infer_flat(x, y, running_mean, running_var, weight, bias, BnFlat)
//       inference over 16-byte vectors with a persistent grid (see there).
//   batch_norm_infer_flat_reg(same arguments) NHWC, C / HAL_VEC dividing the block: the
//       thread's channel constants in registers (see there).
//   batch_norm_apply(x, y, scale, shift, N, C, HW) (contract signature) y = x * scale + shift.
//   batch_norm_train_fused(x, y, weight, bias, running_mean, running_var, part, aff, bar, M, C,
//                          BnFused) NHWC training in one cooperative launch (see there).
#include "hal_prelude.cuh"

#ifndef BN_THREADS
#define BN_THREADS 256
#endif
#ifndef BN_UNROLL
#define BN_UNROLL 4
#endif
#ifndef BN_L2_HINT
#define BN_L2_HINT 1
#endif
// BN_STATS_SUMS [64]: 0 = the statistics pass merges each batch of loads (two-pass in the
// batch, then Chan); N = per thread, shifted sums over chunks of about N values per
// channel, one Chan merge per chunk (bn_sums_flush). On the H200 (session 18) 64 ran the
// float16 NHWC statistics pass in 0.0169 ms instead of 0.0260 (the merges' divisions had
// made it issue-bound), float16 NCHW 0.0161 instead of 0.0181, float32 4-6 % faster
#ifndef BN_STATS_SUMS
#define BN_STATS_SUMS 64
#endif
// BN_PIVOT_N [4]: each shifted-sum chunk starts about its first value and, once it holds
// BN_PIVOT_N values, re-centres on their mean (bn_sums_recentre); 0 = keeps the first value.
// Why: with an outlier as the pivot, M2's error grew as n (n + 1) eps / 2 (session 28: 5e-5
// for chunks of 64); about the mean of m values the cancellation is at most 1 + n / m
#ifndef BN_PIVOT_N
#define BN_PIVOT_N 4
#endif
// resident threads per multiprocessor the register budget must allow (enough loads in
// flight); 16-bit NHWC keeps 3 x 8 per-channel constants per thread, so a little less
#if HAL_ACT16 && LAYOUT_NHWC
#define BN_MIN_BLOCKS (BN_THREADS >= 768 ? 1 : 768 / BN_THREADS)
#else
#define BN_MIN_BLOCKS (BN_THREADS >= 1024 ? 1 : 1024 / BN_THREADS)
#endif

struct BnParams {
    int slabs;     // blocks per channel (NCHW) or pixel slabs (NHWC)
    int vec;       // 1: HAL_VEC values per load
    int cv_chunk;  // NHWC: channel groups per block
    int cchunks;   // NHWC: blocks along channels
    float eps, momentum;
    int infer;    // apply_ex: 1 = statistics from the running buffers
    int reverse;  // apply_ex: walk each block's range backwards
    FastDiv fd_plane;  // NCHW: loads per plane (HW / HAL_VEC, or HW)
};

__device__ __forceinline__ uint4 ld_raw(const act_t* p, uint64_t pol) {
#if BN_L2_HINT
    return ld16_hint(p, pol);
#else
    (void)pol;
    return __ldg(reinterpret_cast<const uint4*>(p));
#endif
}
// element j of a 16-byte vector of activations (j a compile-time constant after unrolling)
__device__ __forceinline__ float raw_get(const uint4& u, int j) {
#if HAL_ACT16
    const unsigned w = j < 2 ? u.x : (j < 4 ? u.y : (j < 6 ? u.z : u.w));
    const unsigned short h = (j & 1) ? (unsigned short)(w >> 16) : (unsigned short)(w & 0xffffu);
    return act16_f(h);
#else
    return __uint_as_float(j == 0 ? u.x : (j == 1 ? u.y : (j == 2 ? u.z : u.w)));
#endif
}
template <int VE>
__device__ __forceinline__ void load_ve(const act_t* p, float (&v)[VE], uint64_t pol) {
    if constexpr (VE == HAL_VEC) {
        unpack_vec(ld_raw(p, pol), v);
    } else {
        (void)pol;
        v[0] = ld_act(p);
    }
}
__device__ __forceinline__ void store_raw(act_t* p, uint4 u) {
#if BN_L2_HINT
    __stcs(reinterpret_cast<uint4*>(p), u);
#else
    *reinterpret_cast<uint4*>(p) = u;
#endif
}

// merge a batch of values (two-pass inside the batch) into a running Stat
template <int K>
__device__ __forceinline__ void stat_add_batch(Stat& st, const float (&v)[K], int k) {
    if (k == 0) return;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < K; ++i) s += i < k ? v[i] : 0.0f;
    const float m = s / (float)k;
    float m2 = 0.0f;
#pragma unroll
    for (int i = 0; i < K; ++i) {
        const float d = v[i] - m;
        m2 += i < k ? d * d : 0.0f;
    }
    Stat b;
    b.n = (float)k;
    b.mean = m;
    b.m2 = m2;
    st = stat_merge(st, b);
}

// BN_STATS_SUMS: merge kc values d_i = x_i - p, given as s1 = sum d_i and s2 = sum d_i^2
// about a pivot p that is one of them (the chunk's first value), into st, whose values
// are taken about K_c; cp_k = p - K_c. M2 = s2 - s1^2 / kc cancels at most a factor
// s2 / M2 = 1 + kc (p - mean)^2 / M2 <= 1 + kc, since p's own term puts (p - mean)^2 in
// M2: so the chunk length bounds the error whatever the data (a pivot far from the
// mean, or an outlier first value)
__device__ __forceinline__ void bn_sums_flush(Stat& st, float& s1, float& s2, float cp_k, int kc) {
    const float n = (float)kc;
    const float mb = s1 / n;
    Stat b;
    b.n = n;
    b.mean = cp_k + mb;
    b.m2 = fmaxf(fmaf(-s1, mb, s2), 0.0f);
    st = stat_merge(st, b);
    s1 = 0.0f;
    s2 = 0.0f;
}

// BN_PIVOT_N: move a chunk's sums (s1, s2 about cp, kc values so far) to a pivot at their
// mean, cp' = cp + s1 / kc: s1' = s1 - kc (cp' - cp) (rounding's residue, about 0) and
// s2' = M2 + s1'^2 / kc, with M2 = s2 - s1 s1 / kc their M2 (cancelling at most 1 + kc, as
// in bn_sums_flush, over kc <= BN_PIVOT_N + BN_UNROLL values). Why: the chunk's later
// values then add to s2 about the mean of its first kc, and (p - mean)^2 <= M2 / kc
// (Cauchy-Schwarz over those kc), so the flush's s2 / M2 is at most 1 + n / kc instead
// of 1 + n, whatever the data (docs/backend-cuda.md, "The shifted sums' error bound")
__device__ __forceinline__ void bn_sums_recentre(float& s1, float& s2, float& cp, int kc) {
    const float n = (float)kc;
    const float mb = s1 / n;
    const float m2 = fmaxf(fmaf(-s1, mb, s2), 0.0f);
    const float moved = cp + mb;
    s1 = fmaf(-n, moved - cp, s1);
    s2 = fmaf(s1, s1 / n, m2);
    cp = moved;
}

__device__ __forceinline__ Stat warp_merge(Stat s) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s = stat_merge(s, stat_shfl_xor(s, off));
    return s;
}

// ---------------------------------------------------------------------------------
// block -> work ranges
// ---------------------------------------------------------------------------------
struct NchwRange {
    int c;
    long long v0, v1;  // loads [v0, v1) of channel c, in (n, position) order
    int per_plane;     // loads per plane
};
template <int VE>
__device__ __forceinline__ NchwRange nchw_range(int N, int C, int HW, const BnParams& p) {
    NchwRange r;
    r.c = blockIdx.x / p.slabs;
    const int s = blockIdx.x - r.c * p.slabs;
    r.per_plane = HW / VE;
    const long long total = (long long)N * r.per_plane;
    r.v0 = total * s / p.slabs;
    r.v1 = total * (s + 1) / p.slabs;
    return r;
}
// address of load v (channel c)
template <int VE>
__device__ __forceinline__ long long nchw_offset(long long v, int C, int HW, int c, int per_plane,
                                                 const BnParams& p) {
    const int n = (int)fdiv((uint32_t)v, p.fd_plane);
    const int j = (int)(v - (long long)n * per_plane);
    return ((long long)n * C + c) * HW + (long long)j * VE;
}

struct NhwcRange {
    int cv, g, rg;     // this thread's channel group and pixel phase; pixel step
    int cvb;           // channel groups in this block
    bool active;
    long long r0, r1;  // pixels [r0, r1)
};
template <int VE>
__device__ __forceinline__ NhwcRange nhwc_range(int N, int C, int HW, const BnParams& p) {
    NhwcRange r;
    const int ncv = C / VE;
    const int cc = blockIdx.x % p.cchunks, s = blockIdx.x / p.cchunks;
    const int cvb = min(p.cv_chunk, ncv - cc * p.cv_chunk);
    r.cvb = cvb;
    r.rg = blockDim.x / cvb;
    r.g = threadIdx.x / cvb;
    r.cv = cc * p.cv_chunk + (threadIdx.x - r.g * cvb);
    r.active = r.g < r.rg;
    const long long M = (long long)N * HW;
    r.r0 = M * s / p.slabs;
    r.r1 = M * (s + 1) / p.slabs;
    return r;
}

// ---------------------------------------------------------------------------------
// statistics
// ---------------------------------------------------------------------------------
// a: the statistics of x - K_c; mean[c] holds K_c (from batch_norm_stats). The apply pass
// computes (x - mean[c]) * scale + beta, so mean[c] stays K_c (x - K_c is exact where x is
// near K_c) and beta takes the shifted mean: bias - mean(x - K_c) * scale.
__device__ __forceinline__ void finalize_channel(int c, Stat a, float* mean, float* var, const float* weight,
                                                 const float* bias, float* running_mean, float* running_var,
                                                 float* scale, float* beta, const BnParams& p) {
    const float v = fmaxf(a.m2 / a.n, 0.0f);
    const float centre = mean[c];
    var[c] = v;
    const float inv = 1.0f / sqrtf(v + p.eps);
    const float sc = weight ? weight[c] * inv : inv;
    scale[c] = sc;
    beta[c] = (bias ? bias[c] : 0.0f) - a.mean * sc;
    if (running_mean) {
        const float m = p.momentum;
        running_mean[c] = (1.0f - m) * running_mean[c] + m * (centre + a.mean);
        running_var[c] = (1.0f - m) * running_var[c] + m * (v * a.n / (a.n - 1.0f));
    }
}

template <int VE>
__device__ __forceinline__ void bn_stats(const act_t* __restrict__ x, int N, int C, int HW, float* part,
                                         float* pivot, const BnParams& p, float* s_red) {
    constexpr int U = BN_UNROLL;
    uint64_t pol = 0;
#if BN_L2_HINT
    pol = l2_policy_evict_last();
#endif
#if LAYOUT_NHWC
    const NhwcRange r = nhwc_range<VE>(N, C, HW, p);
    float* mine = s_red + 3 * ((size_t)threadIdx.x * VE);  // this thread's VE states (n, mean, M2)
#if BN_STATS_SUMS
    // shifted sums about the chunk's first value: a subtract, an add and an FMA per value,
    // one Chan merge per BN_STATS_SUMS values (bn_sums_flush). The merged states stay in
    // this thread's s_red slots, which the block reduction reads, so that the registers
    // go to the sums (float16: 8 channels x 3)
    float s1[VE], s2[VE], cp[VE];
    int kc = 0;
#pragma unroll
    for (int j = 0; j < VE; ++j) {
        s1[j] = s2[j] = cp[j] = 0.0f;
        mine[3 * j] = mine[3 * j + 1] = mine[3 * j + 2] = 0.0f;
    }
    auto flush = [&]() {
#pragma unroll
        for (int j = 0; j < VE; ++j) {
            // statistics of x - K_c, K_c = the channel's first element (pixel 0), as below
            const float kj = ld_act(x + (long long)r.cv * VE + j);
            Stat a{mine[3 * j], mine[3 * j + 1], mine[3 * j + 2]};
            bn_sums_flush(a, s1[j], s2[j], cp[j] - kj, kc);
            mine[3 * j] = a.n;
            mine[3 * j + 1] = a.mean;
            mine[3 * j + 2] = a.m2;
        }
        kc = 0;
    };
    if (r.active) {
        const act_t* xc = x + (long long)r.cv * VE;
        for (long long q = r.r0 + r.g; q < r.r1; q += (long long)U * r.rg) {
            int k = 0;
            uint4 raw[U];  // VE == HAL_VEC: kept packed
            float col[U];  // VE == 1
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const long long qq = q + (long long)u * r.rg;
                raw[u] = make_uint4(0u, 0u, 0u, 0u);
                col[u] = 0.0f;
                if (qq < r.r1) {
                    if constexpr (VE == HAL_VEC)
                        raw[u] = ld_raw(xc + qq * C, pol);
                    else
                        col[u] = ld_act(xc + qq * C);
                    ++k;
                }
            }
            // loads past the end are the last ones, so the first k are valid
            auto val = [&](int u, int j) -> float {
                if constexpr (VE == HAL_VEC)
                    return raw_get(raw[u], j);
                else
                    return col[u];
            };
            if (kc == 0) {
#pragma unroll
                for (int j = 0; j < VE; ++j) cp[j] = val(0, j);
            }
            // BN_PIVOT_N: re-centre at the chunk's BN_PIVOT_N-th value inside its first batch,
            // or after the batch that brings it there when batches are shorter
            const bool fresh = kc == 0;
#pragma unroll
            for (int j = 0; j < VE; ++j) {
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const float d = u < k ? val(u, j) - cp[j] : 0.0f;
                    s1[j] += d;
                    s2[j] = fmaf(d, d, s2[j]);
                    if (BN_PIVOT_N > 0 && u + 1 == BN_PIVOT_N && fresh && u < k)
                        bn_sums_recentre(s1[j], s2[j], cp[j], BN_PIVOT_N);
                }
            }
            if (BN_PIVOT_N > U && kc < BN_PIVOT_N && kc + k >= BN_PIVOT_N) {
#pragma unroll
                for (int j = 0; j < VE; ++j) bn_sums_recentre(s1[j], s2[j], cp[j], kc + k);
            }
            kc += k;
            if (kc >= BN_STATS_SUMS) flush();
        }
        if (kc > 0) flush();
    }
#else
    Stat st[VE];
#pragma unroll
    for (int j = 0; j < VE; ++j) st[j] = Stat{0.0f, 0.0f, 0.0f};
    // statistics of x - K_c, K_c = the channel's first element (pixel 0): a large mean
    // (1e4 with std 1) then keeps its low-order digits through every merge
    float piv[VE];
#pragma unroll
    for (int j = 0; j < VE; ++j) piv[j] = r.active ? ld_act(x + (long long)r.cv * VE + j) : 0.0f;
    if (r.active) {
        const act_t* xc = x + (long long)r.cv * VE;
        for (long long q = r.r0 + r.g; q < r.r1; q += (long long)U * r.rg) {
            int k = 0;
            if constexpr (VE == HAL_VEC) {
                uint4 raw[U];  // kept packed: float16 x 8 channels x U would not fit in registers
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const long long qq = q + (long long)u * r.rg;
                    raw[u] = make_uint4(0u, 0u, 0u, 0u);
                    if (qq < r.r1) {
                        raw[u] = ld_raw(xc + qq * C, pol);
                        ++k;
                    }
                }
#pragma unroll
                for (int j = 0; j < VE; ++j) {
                    float col[U];
#pragma unroll
                    for (int u = 0; u < U; ++u) col[u] = raw_get(raw[u], j) - piv[j];
                    stat_add_batch<U>(st[j], col, k);
                }
            } else {
                float col[U];
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const long long qq = q + (long long)u * r.rg;
                    col[u] = 0.0f;
                    if (qq < r.r1) {
                        col[u] = ld_act(xc + qq * C) - piv[0];
                        ++k;
                    }
                }
                stat_add_batch<U>(st[0], col, k);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < VE; ++j) {
        mine[3 * j] = st[j].n;
        mine[3 * j + 1] = st[j].mean;
        mine[3 * j + 2] = st[j].m2;
    }
#endif
    // block reduction over the pixel phases g of each channel
    const int cvb = r.cvb;
    __syncthreads();
    const int nch = cvb * VE;
    const int cc = blockIdx.x % p.cchunks, s = blockIdx.x / p.cchunks;
    for (int t = threadIdx.x; t < nch; t += blockDim.x) {
        const int cvl = t / VE, j = t - cvl * VE;
        Stat a{0.0f, 0.0f, 0.0f};
        for (int g = 0; g < r.rg; ++g) {
            const float* d = s_red + 3 * ((size_t)(g * cvb + cvl) * VE + j);
            a = stat_merge(a, Stat{d[0], d[1], d[2]});
        }
        const int c = (cc * p.cv_chunk + cvl) * VE + j;
        float* o = part + 3 * ((size_t)c * p.slabs + s);
        o[0] = a.n;
        o[1] = a.mean;
        o[2] = a.m2;
        if (s == 0) pivot[c] = ld_act(x + c);  // K_c, for batch_norm_finalize
    }
#else
    (void)s_red;
    const NchwRange r = nchw_range<VE>(N, C, HW, p);
    Stat st{0.0f, 0.0f, 0.0f};
    // statistics of x - K_c, K_c = the channel's first element (n = 0, position 0), as in NHWC
    const float piv = ld_act(x + (long long)r.c * HW);
    constexpr int UB = (U * VE > 32) ? (32 / VE > 0 ? 32 / VE : 1) : U;  // at most 32 values per batch
#if BN_STATS_SUMS
    float s1 = 0.0f, s2 = 0.0f, cp = 0.0f;  // shifted sums about cp (v[] already holds x - K_c)
    int kc = 0;
#endif
    for (long long v0 = r.v0 + threadIdx.x; v0 < r.v1; v0 += (long long)UB * blockDim.x) {
        float v[UB * VE];
        int k = 0;
#pragma unroll
        for (int u = 0; u < UB; ++u) {
            const long long vv = v0 + (long long)u * blockDim.x;
            if (vv < r.v1) {
                float t[VE];
                load_ve<VE>(x + nchw_offset<VE>(vv, C, HW, r.c, r.per_plane, p), t, pol);
#pragma unroll
                for (int j = 0; j < VE; ++j) v[u * VE + j] = t[j] - piv;
                ++k;
            }
        }
        // loads past the end are the last ones, so the first k*VE values are valid
#if BN_STATS_SUMS
        const bool fresh = kc == 0;
        if (fresh) cp = v[0];
#pragma unroll
        for (int i = 0; i < UB * VE; ++i) {
            const float d = i < k * VE ? v[i] - cp : 0.0f;
            s1 += d;
            s2 = fmaf(d, d, s2);
            if (BN_PIVOT_N > 0 && i + 1 == BN_PIVOT_N && fresh && i < k * VE)  // as in NHWC
                bn_sums_recentre(s1, s2, cp, BN_PIVOT_N);
        }
        if (BN_PIVOT_N > UB * VE && kc < BN_PIVOT_N && kc + k * VE >= BN_PIVOT_N)
            bn_sums_recentre(s1, s2, cp, kc + k * VE);
        kc += k * VE;
        if (kc >= BN_STATS_SUMS) {
            bn_sums_flush(st, s1, s2, cp, kc);
            kc = 0;
        }
#else
        stat_add_batch<UB * VE>(st, v, k * VE);
#endif
    }
#if BN_STATS_SUMS
    if (kc > 0) bn_sums_flush(st, s1, s2, cp, kc);
#endif
    st = warp_merge(st);
    __shared__ float s_w[3 * 32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) {
        s_w[3 * warp] = st.n;
        s_w[3 * warp + 1] = st.mean;
        s_w[3 * warp + 2] = st.m2;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        Stat a{0.0f, 0.0f, 0.0f};
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) a = stat_merge(a, Stat{s_w[3 * w], s_w[3 * w + 1], s_w[3 * w + 2]});
        const int s = blockIdx.x - r.c * p.slabs;
        float* o = part + 3 * ((size_t)r.c * p.slabs + s);
        o[0] = a.n;
        o[1] = a.mean;
        o[2] = a.m2;
        if (s == 0) pivot[r.c] = piv;  // K_c, for batch_norm_finalize
    }
#endif
}

extern "C" __global__ void __launch_bounds__(BN_THREADS, BN_MIN_BLOCKS)
    batch_norm_stats(const act_t* __restrict__ x, float* __restrict__ mean, float* __restrict__ var, int N, int C,
                     int HW, float* __restrict__ part, BnParams p) {
    HAL_PDL_ENTRY();
    extern __shared__ __align__(16) float s_red[];
    // mean[c] receives the pivot K_c here; batch_norm_finalize reads it, merges the partial
    // statistics (of x - K_c) and writes the apply pass's centre there
    (void)var;
    if (p.vec)
        bn_stats<HAL_VEC>(x, N, C, HW, part, mean, p, s_red);
    else
        bn_stats<1>(x, N, C, HW, part, mean, p, s_red);
}

// one block per channel: merge its `slabs` partial statistics (Chan), then mean, biased
// variance, scale = weight / sqrt(var + eps), beta = bias, and the running statistics
// (unbiased variance) once
extern "C" __global__ void __launch_bounds__(BN_THREADS)
    batch_norm_finalize(const float* __restrict__ part, float* __restrict__ mean, float* __restrict__ var,
                        const float* __restrict__ weight, const float* __restrict__ bias, float* running_mean,
                        float* running_var, float* __restrict__ scale, float* __restrict__ beta, int C, int slabs,
                        BnParams p) {
    HAL_PDL_ENTRY();
    const int c = blockIdx.x;
    if (c >= C) return;
    Stat a{0.0f, 0.0f, 0.0f};
    const float* pc = part + 3 * (size_t)c * slabs;
    for (int s = threadIdx.x; s < slabs; s += blockDim.x) a = stat_merge(a, Stat{pc[3 * s], pc[3 * s + 1], pc[3 * s + 2]});
    a = warp_merge(a);
    __shared__ float s_w[3 * 32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) {
        s_w[3 * warp] = a.n;
        s_w[3 * warp + 1] = a.mean;
        s_w[3 * warp + 2] = a.m2;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        Stat t{0.0f, 0.0f, 0.0f};
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) t = stat_merge(t, Stat{s_w[3 * w], s_w[3 * w + 1], s_w[3 * w + 2]});
        finalize_channel(c, t, mean, var, weight, bias, running_mean, running_var, scale, beta, p);
    }
}

// ---------------------------------------------------------------------------------
// apply
// ---------------------------------------------------------------------------------
__device__ __forceinline__ void channel_affine(int c, const float* mean, const float* scale, const float* beta,
                                               const float* rm, const float* rv, const float* weight,
                                               const float* bias, const BnParams& p, float& m, float& s, float& b) {
    if (p.infer) {
        m = rm[c];
        const float inv = 1.0f / sqrtf(rv[c] + p.eps);
        s = weight ? weight[c] * inv : inv;
        b = bias ? bias[c] : 0.0f;
    } else {
        m = mean[c];
        s = scale[c];
        b = beta[c];
    }
}

#if !LAYOUT_NHWC
template <int VE>
__device__ __forceinline__ void bn_apply_nchw(const act_t* __restrict__ x, act_t* __restrict__ y, const NchwRange& r,
                                              float m, float s, float b, int C, int HW, const BnParams& p,
                                              uint64_t pol);
#endif

template <int VE>
__device__ __forceinline__ void bn_apply(const act_t* __restrict__ x, act_t* __restrict__ y, const float* mean,
                                         const float* scale, const float* beta, const float* rm, const float* rv,
                                         const float* weight, const float* bias, int N, int C, int HW,
                                         const BnParams& p) {
    uint64_t pol = 0;
#if BN_L2_HINT
    pol = l2_policy_evict_first();
#endif
#if LAYOUT_NHWC
    constexpr int U = BN_UNROLL;
    const NhwcRange r = nhwc_range<VE>(N, C, HW, p);
    if (!r.active) return;
    float m[VE], s[VE], b[VE];
#pragma unroll
    for (int j = 0; j < VE; ++j) channel_affine(r.cv * VE + j, mean, scale, beta, rm, rv, weight, bias, p, m[j], s[j], b[j]);
    const long long step = (long long)U * r.rg;
    const long long nsteps = (r.r1 - r.r0 - r.g + step - 1) / step;  // iterations of this thread
    for (long long it = 0; it < nsteps; ++it) {
        const long long q = r.r0 + r.g + (p.reverse ? nsteps - 1 - it : it) * step;
        const act_t* xc = x + (long long)r.cv * VE;
        act_t* yc = y + (long long)r.cv * VE;
        if constexpr (VE == HAL_VEC) {
            uint4 raw[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const long long qq = q + (long long)u * r.rg;
                if (qq < r.r1) raw[u] = ld_raw(xc + qq * C, pol);
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const long long qq = q + (long long)u * r.rg;
                if (qq < r.r1) {
                    float f[HAL_VEC];
                    unpack_vec(raw[u], f);
#pragma unroll
                    for (int j = 0; j < HAL_VEC; ++j) f[j] = fmaf(f[j] - m[j], s[j], b[j]);
                    store_raw(yc + qq * C, pack_vec(f));
                }
            }
        } else {
            float v[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const long long qq = q + (long long)u * r.rg;
                if (qq < r.r1) v[u] = ld_act(xc + qq * C);
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const long long qq = q + (long long)u * r.rg;
                if (qq < r.r1) st_act(yc + qq * C, fmaf(v[u] - m[0], s[0], b[0]));
            }
        }
    }
#else
    const NchwRange r = nchw_range<VE>(N, C, HW, p);
    float m, s, b;
    channel_affine(r.c, mean, scale, beta, rm, rv, weight, bias, p, m, s, b);
    bn_apply_nchw<VE>(x, y, r, m, s, b, C, HW, p, pol);
#endif
}

#if !LAYOUT_NHWC
// y = (x - m) * s + b over block range r of channel r.c (NCHW)
template <int VE>
__device__ __forceinline__ void bn_apply_nchw(const act_t* __restrict__ x, act_t* __restrict__ y, const NchwRange& r,
                                              float m, float s, float b, int C, int HW, const BnParams& p,
                                              uint64_t pol) {
    constexpr int U = BN_UNROLL;
    const long long step = (long long)U * blockDim.x;
    const long long nsteps = (r.v1 - r.v0 + step - 1) / step;
    for (long long it = 0; it < nsteps; ++it) {
        const long long v0 = r.v0 + threadIdx.x + (p.reverse ? nsteps - 1 - it : it) * step;
        long long off[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const long long vv = v0 + (long long)u * blockDim.x;
            off[u] = vv < r.v1 ? nchw_offset<VE>(vv, C, HW, r.c, r.per_plane, p) : -1;
        }
        if constexpr (VE == HAL_VEC) {
            uint4 raw[U];
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (off[u] >= 0) raw[u] = ld_raw(x + off[u], pol);
#pragma unroll
            for (int u = 0; u < U; ++u) {
                if (off[u] >= 0) {
                    float f[HAL_VEC];
                    unpack_vec(raw[u], f);
#pragma unroll
                    for (int j = 0; j < HAL_VEC; ++j) f[j] = fmaf(f[j] - m, s, b);
                    store_raw(y + off[u], pack_vec(f));
                }
            }
        } else {
            float v[U];
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (off[u] >= 0) v[u] = ld_act(x + off[u]);
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (off[u] >= 0) st_act(y + off[u], fmaf(v[u] - m, s, b));
        }
    }
}
#endif

extern "C" __global__ void __launch_bounds__(BN_THREADS, BN_MIN_BLOCKS)
    batch_norm_apply_ex(const act_t* __restrict__ x, act_t* __restrict__ y, const float* __restrict__ mean,
                        const float* __restrict__ scale, const float* __restrict__ beta,
                        const float* __restrict__ running_mean, const float* __restrict__ running_var,
                        const float* __restrict__ weight, const float* __restrict__ bias, int N, int C, int HW,
                        BnParams p) {
    HAL_PDL_ENTRY();
    if (p.vec)
        bn_apply<HAL_VEC>(x, y, mean, scale, beta, running_mean, running_var, weight, bias, N, C, HW, p);
    else
        bn_apply<1>(x, y, mean, scale, beta, running_mean, running_var, weight, bias, N, C, HW, p);
}

#if !LAYOUT_NHWC
// Training, NCHW, without batch_norm_finalize (BN_APPLY_MERGE): every block merges its
// channel's `slabs` partials itself (one warp, a fixed order, so every block of a channel
// gets bit-identical constants), then applies them to its range; the channel's slab-0
// block also writes what batch_norm_finalize would (var, scale, beta, running statistics).
// Saves a launch and its tail (the partials are a few hundred bytes, read from L2).
extern "C" __global__ void __launch_bounds__(BN_THREADS, BN_MIN_BLOCKS)
    batch_norm_apply_merged(const act_t* __restrict__ x, act_t* __restrict__ y, const float* __restrict__ part,
                            float* __restrict__ mean, float* __restrict__ var, const float* __restrict__ weight,
                            const float* __restrict__ bias, float* running_mean, float* running_var,
                            float* __restrict__ scale, float* __restrict__ beta, int N, int C, int HW, BnParams p) {
    HAL_PDL_ENTRY();
    __shared__ float s_aff[3];
    const NchwRange r = p.vec ? nchw_range<HAL_VEC>(N, C, HW, p) : nchw_range<1>(N, C, HW, p);
    const int c = r.c;
    if (threadIdx.x < 32) {
        Stat a{0.0f, 0.0f, 0.0f};
        const float* pc = part + 3 * (size_t)c * p.slabs;
        for (int s = threadIdx.x; s < p.slabs; s += 32) a = stat_merge(a, Stat{pc[3 * s], pc[3 * s + 1], pc[3 * s + 2]});
        a = warp_merge(a);
        if (threadIdx.x == 0) {
            const int slab = blockIdx.x - c * p.slabs;
            if (slab == 0) finalize_channel(c, a, mean, var, weight, bias, running_mean, running_var, scale, beta, p);
            // the same arithmetic as finalize_channel (mean[c] holds the pivot K_c)
            const float v = fmaxf(a.m2 / a.n, 0.0f);
            const float inv = 1.0f / sqrtf(v + p.eps);
            const float sc = weight ? weight[c] * inv : inv;
            s_aff[0] = mean[c];
            s_aff[1] = sc;
            s_aff[2] = (bias ? bias[c] : 0.0f) - a.mean * sc;
        }
    }
    __syncthreads();
    const float m = s_aff[0], sc = s_aff[1], b = s_aff[2];
    uint64_t pol = 0;
#if BN_L2_HINT
    pol = l2_policy_evict_first();
#endif
    if (p.vec)
        bn_apply_nchw<HAL_VEC>(x, y, r, m, sc, b, C, HW, p, pol);
    else
        bn_apply_nchw<1>(x, y, r, m, sc, b, C, HW, p, pol);
}
#endif

// ---------------------------------------------------------------------------------
// inference, flat: the tensor as one array of 16-byte vectors, each vector inside one
// channel (NCHW, HW % HAL_VEC == 0) or holding HAL_VEC consecutive channels (NHWC,
// C % HAL_VEC == 0); buffers 16-byte aligned, fewer than 2^31 vectors. A wave of
// persistent blocks (grid <= resident blocks) walks tiles of BN_UNROLL x blockDim
// vectors; each block first puts every channel's (mean, scale, shift) in shared memory,
// so the loop has no global loads besides x, 32-bit indices, and no integer division
// (FastDiv). Same arithmetic as apply_ex: (x - mean) * scale + shift.
// ---------------------------------------------------------------------------------
#ifndef BN_INFER_OCC
#define BN_INFER_OCC 0
#endif
// BN_INFER_EARLY [0]: the first tile's loads leave before the channel constants are read and
// (flat) before the barrier, so a block's first bytes are not one dependent round trip of
// parameter loads late; later tiles load after the previous tile's stores, as with 0
#ifndef BN_INFER_EARLY
#define BN_INFER_EARLY 0
#endif
// the flat inference kernels' walk: tiles of U x blockDim vectors, block b starting at tile b
// and striding by the grid (< 2^31 vectors: the grid is one wave), and the L2 policy of x
struct BnWalk {
    unsigned nvec, bd, stride, v0;
    uint64_t pol;
};
__device__ __forceinline__ BnWalk bn_walk(int nvec, int U) {
    BnWalk w;
    w.pol = 0;
#if BN_L2_HINT
    w.pol = l2_policy_evict_first();
#endif
    const unsigned tile = (unsigned)U * blockDim.x;
    w.nvec = (unsigned)nvec;
    w.bd = blockDim.x;
    w.stride = gridDim.x * tile;
    w.v0 = blockIdx.x * tile + threadIdx.x;
    return w;
}
// the U vectors v0 + u * bd (u < U) of one tile that lie below nvec
template <int U>
__device__ __forceinline__ void bn_load_tile(uint4 (&raw)[U], const act_t* __restrict__ x, unsigned v0,
                                             unsigned nvec, unsigned bd, uint64_t pol) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const unsigned v = v0 + u * bd;
        if (v < nvec) raw[u] = ld_raw(x + (size_t)v * HAL_VEC, pol);
    }
}
// the two flat kernels' loop: setup() builds the channel constants (BN_INFER_EARLY: after the
// first tile's loads are issued), then every vector v below nvec goes through apply(v, f) on
// its HAL_VEC floats and is stored; with BN_INFER_EARLY each next tile loads after the stores
template <int U, class Setup, class Apply>
__device__ __forceinline__ void bn_flat_walk(const act_t* __restrict__ x, act_t* __restrict__ y, int nvec_total,
                                             Setup setup, Apply apply) {
    const BnWalk wk = bn_walk(nvec_total, U);
    const unsigned nvec = wk.nvec, bd = wk.bd, stride = wk.stride;
    uint4 raw[U];
#if BN_INFER_EARLY
    bn_load_tile<U>(raw, x, wk.v0, nvec, bd, wk.pol);
#endif
    setup();
    for (unsigned v0 = wk.v0; v0 < nvec; v0 += stride) {
#if !BN_INFER_EARLY
        bn_load_tile<U>(raw, x, v0, nvec, bd, wk.pol);
#endif
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const unsigned v = v0 + u * bd;
            if (v < nvec) {
                float f[HAL_VEC];
                unpack_vec(raw[u], f);
                apply(v, f);
                store_raw(y + (size_t)v * HAL_VEC, pack_vec(f));
            }
        }
#if BN_INFER_EARLY
        bn_load_tile<U>(raw, x, v0 + stride, nvec, bd, wk.pol);  // the next tile (none past the end)
#endif
    }
}
// 0 = by the unroll: 8 vectors (32 registers of data) per thread fit without spills at 64
// registers (1024 threads), 4 at 40 (1536); the launcher sizes its grid by the same rule
#define BN_INFER_OCC_ASKED (BN_INFER_OCC ? BN_INFER_OCC : (BN_UNROLL >= 8 ? 1024 : 1536))
// clamped to the architecture's resident threads per SM (ptxas ignores larger requests)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 750
#define BN_ARCH_THREADS_SM 1024
#elif defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 890 || __CUDA_ARCH__ >= 1200)
#define BN_ARCH_THREADS_SM 1536
#else
#define BN_ARCH_THREADS_SM 2048
#endif
#define BN_INFER_THREADS_SM (BN_INFER_OCC_ASKED < BN_ARCH_THREADS_SM ? BN_INFER_OCC_ASKED : BN_ARCH_THREADS_SM)
#define BN_INFER_MINB (BN_INFER_THREADS_SM >= 2 * BN_THREADS ? BN_INFER_THREADS_SM / BN_THREADS : 1)

struct BnFlat {
    int nvec;    // 16-byte vectors in the tensor
    int C;       // channels
    FastDiv fa;  // NCHW: vectors per plane (HW / HAL_VEC); NHWC: vectors per pixel (C / HAL_VEC)
    FastDiv fc;  // NCHW: C
    float eps;
};

extern "C" __global__ void __launch_bounds__(BN_THREADS, BN_INFER_MINB)
    batch_norm_infer_flat(const act_t* __restrict__ x, act_t* __restrict__ y, const float* __restrict__ running_mean,
                          const float* __restrict__ running_var, const float* __restrict__ weight,
                          const float* __restrict__ bias, BnFlat p) {
    HAL_PDL_ENTRY();
    extern __shared__ __align__(16) float s_tab[];  // [3][C]: mean, scale, shift
    float* s_m = s_tab;
    float* s_s = s_tab + p.C;
    float* s_b = s_tab + 2 * p.C;
    auto setup = [&]() {
        for (int c = threadIdx.x; c < p.C; c += blockDim.x) {
            s_m[c] = running_mean[c];
            const float inv = 1.0f / sqrtf(running_var[c] + p.eps);
            s_s[c] = weight ? weight[c] * inv : inv;
            s_b[c] = bias ? bias[c] : 0.0f;
        }
        __syncthreads();
    };
    auto apply = [&](unsigned v, float (&f)[HAL_VEC]) {
        const unsigned q = fdiv(v, p.fa);
#if LAYOUT_NHWC
        const int c0 = (int)(v - q * p.fa.d) * HAL_VEC;  // first of HAL_VEC channels
        const float4* m4 = reinterpret_cast<const float4*>(s_m + c0);
        const float4* s4 = reinterpret_cast<const float4*>(s_s + c0);
        const float4* b4 = reinterpret_cast<const float4*>(s_b + c0);
#pragma unroll
        for (int k = 0; k < HAL_VEC / 4; ++k) {
            const float4 m = m4[k], s = s4[k], b = b4[k];
            f[4 * k + 0] = fmaf(f[4 * k + 0] - m.x, s.x, b.x);
            f[4 * k + 1] = fmaf(f[4 * k + 1] - m.y, s.y, b.y);
            f[4 * k + 2] = fmaf(f[4 * k + 2] - m.z, s.z, b.z);
            f[4 * k + 3] = fmaf(f[4 * k + 3] - m.w, s.w, b.w);
        }
#else
        const int c = (int)(q - fdiv(q, p.fc) * p.fc.d);  // plane q -> channel q mod C
        const float m = s_m[c], s = s_s[c], b = s_b[c];
#pragma unroll
        for (int j = 0; j < HAL_VEC; ++j) f[j] = fmaf(f[j] - m, s, b);
#endif
    };
    bn_flat_walk<BN_UNROLL>(x, y, p.nvec, setup, apply);
}

// NHWC inference with the channel constants in registers: when C / HAL_VEC (vectors per
// pixel, p.fa.d) divides blockDim.x, vector v = blockIdx * tile + threadIdx + u * bd + k * stride
// holds channels (threadIdx % (C / HAL_VEC)) * HAL_VEC ..., the same for every vector a thread
// visits (tile, bd and stride are multiples of bd). So each thread computes its HAL_VEC
// (mean, scale, shift) once and the loop has neither shared-memory reads (float16: 6
// conflicted 16-byte reads per vector in batch_norm_infer_flat) nor a division. Same
// arithmetic as batch_norm_infer_flat. The constants take registers (float16 3 x 8, float32
// 3 x 4), so the resident threads are capped where ptxas would otherwise spill: float16
// 1024 (768 at BN_UNROLL 8), float32 1280 at BN_UNROLL 4. The launcher sizes the grid by
// the same rule (_bn_infer_occ in backends/cuda.py).
#if HAL_ACT16
#define BN_REG_CAP (BN_UNROLL >= 8 ? 768 : 1024)
#else
#define BN_REG_CAP (BN_UNROLL >= 8 ? 1024 : (BN_UNROLL >= 4 ? 1280 : 2048))
#endif
#define BN_REG_THREADS_SM (BN_INFER_THREADS_SM < BN_REG_CAP ? BN_INFER_THREADS_SM : BN_REG_CAP)
#define BN_REG_MINB (BN_REG_THREADS_SM >= 2 * BN_THREADS ? BN_REG_THREADS_SM / BN_THREADS : 1)

extern "C" __global__ void __launch_bounds__(BN_THREADS, BN_REG_MINB)
    batch_norm_infer_flat_reg(const act_t* __restrict__ x, act_t* __restrict__ y,
                              const float* __restrict__ running_mean, const float* __restrict__ running_var,
                              const float* __restrict__ weight, const float* __restrict__ bias, BnFlat p) {
    HAL_PDL_ENTRY();
    const int c0 = (int)(threadIdx.x % p.fa.d) * HAL_VEC;  // fa.d = C / HAL_VEC divides blockDim.x
    float m[HAL_VEC], s[HAL_VEC], b[HAL_VEC];
    auto setup = [&]() {
#pragma unroll
        for (int j = 0; j < HAL_VEC; ++j) {
            const int c = c0 + j;
            m[j] = running_mean[c];
            const float inv = 1.0f / sqrtf(running_var[c] + p.eps);
            s[j] = weight ? weight[c] * inv : inv;
            b[j] = bias ? bias[c] : 0.0f;
        }
    };
    auto apply = [&](unsigned, float (&f)[HAL_VEC]) {
#pragma unroll
        for (int j = 0; j < HAL_VEC; ++j) f[j] = fmaf(f[j] - m[j], s[j], b[j]);
    };
    bn_flat_walk<BN_UNROLL>(x, y, p.nvec, setup, apply);
}

// contract entry point: y = x * scale[c] + shift[c], one thread per element
extern "C" __global__ void __launch_bounds__(BN_THREADS)
    batch_norm_apply(const act_t* __restrict__ x, act_t* __restrict__ y, const float* __restrict__ scale,
                     const float* __restrict__ shift, int N, int C, int HW) {
    HAL_PDL_ENTRY();
    const long long total = (long long)N * C * HW;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
#if LAYOUT_NHWC
        const int c = (int)(i % C);
#else
        const int c = (int)((i / HW) % C);
#endif
        st_act(y + i, fmaf(ld_act(x + i), scale[c], shift[c]));
    }
}

// ---------------------------------------------------------------------------------
// Training in one launch (NHWC, 16-byte vectors): batch_norm_train_fused
//
// A cooperative grid (every block resident, cuLaunchKernelEx with the cooperative
// attribute; the launcher sizes it by the driver's occupancy) reads x once, keeps what
// fits on chip, and writes y after two grid barriers, so x crosses DRAM about once
// instead of twice. Thread t keeps the HAL_VEC channels cv = t % ncv of pixels
// q_k = r0 + t / ncv + k * rg of its block's slab [r0, r1): k < BN_FUSED_REGS in
// registers, the next `smem_vecs` in shared memory ([k][thread], conflict-free), the
// rest re-read in the second pass (first read with evict_last, re-read first, so from
// L2 where it fits). Statistics: the shifted sums of bn_stats (chunks of BN_STATS_SUMS
// values about the chunk's first, Chan merges), of x - K_c, K_c = x[pixel 0, c].
//   pass 1  per-block partials (n, mean, M2) of every channel -> part[3 (c G + b)]
//   barrier
//   block b merges the G partials of channels b, b + G, ... -> aff[3 c] = (K_c, scale,
//           beta), running statistics (unbiased variance)
//   barrier
//   pass 2  y = (x - K_c) * scale + beta, the re-read part first, streaming stores.
// bar[2]: an arrival count and a generation; zero when the workspace is made, and each
// barrier leaves the count at zero again, so launches need no reset.
// ---------------------------------------------------------------------------------
#if LAYOUT_NHWC
#ifndef BN_FUSED_THREADS
#define BN_FUSED_THREADS 512
#endif
#ifndef BN_FUSED_REGS
#define BN_FUSED_REGS 8
#endif
// experiments only (benchmarks/experiments/bn_fused_phases.py): thread 0 of each block writes
// %globaltimer at 6 points to the 8 words after the partials (part + 3 C G, rounded to 8 bytes)
#ifndef BN_FUSED_PROFILE
#define BN_FUSED_PROFILE 0
#endif
#if BN_FUSED_PROFILE
#define FUSED_STAMP(i)                                                                                 \
    if (threadIdx.x == 0) {                                                                            \
        unsigned long long t_;                                                                         \
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                                         \
        reinterpret_cast<unsigned long long*>(part + ((3LL * C * p.blocks + 1) & ~1LL))[8 * blockIdx.x + (i)] = t_; \
    }
#else
#define FUSED_STAMP(i)
#endif

struct BnFused {
    int blocks;     // G, the grid (all resident)
    int ncv;        // C / HAL_VEC
    int rg;         // BN_FUSED_THREADS / ncv: pixels a block walks at once
    int smem_vecs;  // vectors per thread cached in shared memory
    int gpw;        // lanes of one channel group in a warp (32 / ncv where ncv divides 32, else 1)
    float eps, momentum;
    int running;  // 1: update running_mean / running_var
    int fin;      // 1: every block merges every channel (one grid barrier); 0: a block a channel, two barriers
};

__device__ __forceinline__ void grid_barrier(unsigned* bar, unsigned nblocks) {
    __syncthreads();
    if (threadIdx.x == 0) {
        volatile unsigned* gen = bar + 1;
        const unsigned g0 = *gen;  // read before arriving: the release cannot come earlier
        __threadfence();
        if (atomicAdd(bar, 1u) == nblocks - 1) {
            atomicExch(bar, 0u);  // reset before the release, ready for the next barrier
            __threadfence();
            atomicAdd(bar + 1, 1u);
        } else {
            while (*gen == g0) __nanosleep(64);
        }
        __threadfence();
    }
    __syncthreads();
}

struct FusedSums {
    float s1[HAL_VEC], s2[HAL_VEC], cp[HAL_VEC];
    Stat st[HAL_VEC];
    int kc;
};
// add one vector (values x - K) to the chunk sums; flush a chunk of BN_STATS_SUMS values
__device__ __forceinline__ void fused_add(FusedSums& f, const uint4& u, const float (&piv)[HAL_VEC]) {
    float v[HAL_VEC];
    unpack_vec(u, v);
    if (f.kc == 0) {
#pragma unroll
        for (int j = 0; j < HAL_VEC; ++j) f.cp[j] = v[j] - piv[j];
    }
#pragma unroll
    for (int j = 0; j < HAL_VEC; ++j) {
        const float d = (v[j] - piv[j]) - f.cp[j];
        f.s1[j] += d;
        f.s2[j] = fmaf(d, d, f.s2[j]);
    }
    ++f.kc;
    if (BN_PIVOT_N > 0 && f.kc == BN_PIVOT_N) {  // (see BN_PIVOT_N)
#pragma unroll
        for (int j = 0; j < HAL_VEC; ++j) bn_sums_recentre(f.s1[j], f.s2[j], f.cp[j], BN_PIVOT_N);
    }
    if (f.kc >= (BN_STATS_SUMS > 0 ? BN_STATS_SUMS : 64)) {
#pragma unroll
        for (int j = 0; j < HAL_VEC; ++j) bn_sums_flush(f.st[j], f.s1[j], f.s2[j], f.cp[j], f.kc);
        f.kc = 0;
    }
}

// a 16-byte global -> shared copy with an L2 policy (cp.async on sm_80+)
__device__ __forceinline__ void fused_cp16(uint4* smem, const act_t* g, uint64_t pol) {
#if HAL_HAS_CP_ASYNC
    const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(g), "l"(pol));
#else
    (void)pol;
    *smem = __ldg(reinterpret_cast<const uint4*>(g));
#endif
}

__device__ __forceinline__ uint4 fused_apply(const uint4& u, const float (&m)[HAL_VEC], const float (&s)[HAL_VEC],
                                             const float (&b)[HAL_VEC]) {
    float f[HAL_VEC];
    unpack_vec(u, f);
#pragma unroll
    for (int j = 0; j < HAL_VEC; ++j) f[j] = fmaf(f[j] - m[j], s[j], b[j]);
    return pack_vec(f);
}

// x, y 16-byte aligned, C % HAL_VEC == 0, ncv <= BN_FUSED_THREADS; M = N * HW pixels.
// Shared memory (dynamic only, so that a launch under 48 KiB needs no opt-in: a static array
// would count on top): smem_vecs * BN_FUSED_THREADS 16-byte vectors, then the block
// reduction's (rg / gpw) * ncv * HAL_VEC states (3 floats each; later the pivots and the
// channels' constants).
extern "C" __global__ void __launch_bounds__(BN_FUSED_THREADS, 1)
    batch_norm_train_fused(const act_t* __restrict__ x, act_t* __restrict__ y, const float* __restrict__ weight,
                           const float* __restrict__ bias, float* running_mean, float* running_var,
                           float* part, float* aff, unsigned* bar, long long M, int C, BnFused p) {
    constexpr int R = BN_FUSED_REGS;
    constexpr int T = BN_FUSED_THREADS;
    constexpr int U = 4;  // shared-memory and re-read vectors in flight per thread
    extern __shared__ __align__(16) uint4 s_cache[];
    const int tid = threadIdx.x;
    const int ncv = p.ncv, rg = p.rg;
    const int g = tid / ncv, cv = tid - g * ncv;
    const bool active = g < rg;
    const long long r0 = M * blockIdx.x / p.blocks, r1 = M * (blockIdx.x + 1) / p.blocks;
    const long long span = r1 - r0 - g;
    const int nk = active && span > 0 ? (int)((span + rg - 1) / rg) : 0;  // this thread's vectors
    const int nreg = min(nk, R), nsm = min(nk - nreg, p.smem_vecs);
    const act_t* xc = x + (long long)cv * HAL_VEC + (r0 + g) * C;
    act_t* yc = y + (long long)cv * HAL_VEC + (r0 + g) * C;
    const long long kstep = (long long)rg * C;  // elements between a thread's vectors
    const uint64_t pol_once = l2_policy_evict_first(), pol_keep = l2_policy_evict_last();
    FUSED_STAMP(0)

    // the pivots K_c through shared memory: every thread of every block loading the same few
    // lines of x (or of aff below) made those L2 lines a hot spot (session 28: the second pass
    // took 60 us for 4 MB of stores, in proportion to the threads)
    float* s_red = reinterpret_cast<float*>(s_cache + (size_t)p.smem_vecs * T);  // >= 3 C floats
    for (int c = tid; c < C; c += T) s_red[c] = ld_act(x + c);
    __syncthreads();
    float piv[HAL_VEC];
    FusedSums f;
#pragma unroll
    for (int j = 0; j < HAL_VEC; ++j) {
        piv[j] = active ? s_red[cv * HAL_VEC + j] : 0.0f;
        f.s1[j] = f.s2[j] = f.cp[j] = 0.0f;
        f.st[j] = Stat{0.0f, 0.0f, 0.0f};
    }
    f.kc = 0;
    __syncthreads();  // s_red takes the partial states later

    // ---- pass 1: read x once; the shared-memory part as copies all in flight at once, in two
    // groups, so that the first half's statistics overlap the second half's copies ----
    uint4* mine = s_cache + tid;
    const int nsm_a = (nsm + 1) / 2;
    for (int k = 0; k < nsm_a; ++k) fused_cp16(mine + (size_t)k * T, xc + (nreg + k) * kstep, pol_once);
    cp_async_commit();
    for (int k = nsm_a; k < nsm; ++k) fused_cp16(mine + (size_t)k * T, xc + (nreg + k) * kstep, pol_once);
    cp_async_commit();
    uint4 reg[R > 0 ? R : 1];
#pragma unroll
    for (int k = 0; k < R; ++k)
        if (k < nreg) reg[k] = ld16_hint(xc + k * kstep, pol_once);
#pragma unroll
    for (int k = 0; k < R; ++k)
        if (k < nreg) fused_add(f, reg[k], piv);
    for (int k0 = nreg + nsm; k0 < nk; k0 += U) {
        uint4 t[U];
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (k0 + u < nk) t[u] = ld16_hint(xc + (k0 + u) * kstep, pol_keep);
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (k0 + u < nk) fused_add(f, t[u], piv);
    }
    FUSED_STAMP(1)
    // this thread's own copies: no block barrier needed to read them ("memory": the reads below
    // stay below the wait); shared-memory reads in batches of U, ahead of their arithmetic
    auto add_smem = [&](int k0, int k1) {
        for (; k0 < k1; k0 += U) {
            uint4 t[U];
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (k0 + u < k1) t[u] = mine[(size_t)(k0 + u) * T];
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (k0 + u < k1) fused_add(f, t[u], piv);
        }
    };
    cp_async_wait<1>();
    add_smem(0, nsm_a);
    cp_async_wait<0>();
    add_smem(nsm_a, nsm);
    if (f.kc > 0) {
#pragma unroll
        for (int j = 0; j < HAL_VEC; ++j) bn_sums_flush(f.st[j], f.s1[j], f.s2[j], f.cp[j], f.kc);
    }

    // ---- block partials: lanes of one channel group merge by shuffles, then through shared memory ----
    if (p.gpw > 1) {
#pragma unroll
        for (int j = 0; j < HAL_VEC; ++j)
            for (int off = 16; off >= ncv; off >>= 1) f.st[j] = stat_merge(f.st[j], stat_shfl_xor(f.st[j], off));
    }
    const int entries = rg / p.gpw;  // states per channel group in s_red
    if (active && g % p.gpw == 0) {
        float* d = s_red + 3 * ((size_t)(g / p.gpw) * ncv + cv) * HAL_VEC;
#pragma unroll
        for (int j = 0; j < HAL_VEC; ++j) {
            d[3 * j] = f.st[j].n;
            d[3 * j + 1] = f.st[j].mean;
            d[3 * j + 2] = f.st[j].m2;
        }
    }
    __syncthreads();
    for (int c = tid; c < C; c += T) {
        const int cvc = c / HAL_VEC, j = c - cvc * HAL_VEC;
        Stat a{0.0f, 0.0f, 0.0f};
        for (int e = 0; e < entries; ++e) {
            const float* d = s_red + 3 * (((size_t)e * ncv + cvc) * HAL_VEC + j);
            a = stat_merge(a, Stat{d[0], d[1], d[2]});
        }
        float* o = part + 3 * ((size_t)c * p.blocks + blockIdx.x);
        o[0] = a.n;
        o[1] = a.mean;
        o[2] = a.m2;
    }
    FUSED_STAMP(2)
    grid_barrier(bar, p.blocks);
    FUSED_STAMP(3)

    // ---- per channel: merge the G partials (a warp a channel: lanes over the partials in a fixed
    // order, then xor shuffles), the affine constants, the running statistics once ----
    const int warp = tid >> 5, lane = tid & 31;
    auto merge_channel = [&](int c, float* dst) {
        Stat a{0.0f, 0.0f, 0.0f};
        const float* pc = part + 3 * (size_t)c * p.blocks;
        for (int s = lane; s < p.blocks; s += 32)
            a = stat_merge(a, Stat{__ldcg(pc + 3 * s), __ldcg(pc + 3 * s + 1), __ldcg(pc + 3 * s + 2)});
        a = warp_merge(a);
        if (lane == 0) {
            const float v = fmaxf(a.m2 / a.n, 0.0f);
            const float centre = ld_act(x + c);
            const float inv = 1.0f / sqrtf(v + p.eps);
            const float sc = weight ? weight[c] * inv : inv;
            dst[3 * c] = centre;
            dst[3 * c + 1] = sc;
            dst[3 * c + 2] = (bias ? bias[c] : 0.0f) - a.mean * sc;
            if (p.running && c % p.blocks == (int)blockIdx.x) {  // one block a channel
                const float mo = p.momentum;
                running_mean[c] = (1.0f - mo) * running_mean[c] + mo * (centre + a.mean);
                running_var[c] = (1.0f - mo) * running_var[c] + mo * (v * a.n / (a.n - 1.0f));
            }
        }
    };
    if (p.fin) {
        // every block merges every channel itself (the same order everywhere, so the same bits), into
        // shared memory: no second barrier; the planner picks this where C * G partials are few
        for (int c = warp; c < C; c += T / 32) merge_channel(c, s_red);
        __syncthreads();
        FUSED_STAMP(4)
    } else {
        // block b the channels b, b + G, ... (a warp each), through aff to every block after a barrier
        for (int c = (int)blockIdx.x + warp * p.blocks; c < C; c += (T / 32) * p.blocks) merge_channel(c, aff);
        grid_barrier(bar, p.blocks);
        FUSED_STAMP(4)
        for (int i = tid; i < 3 * C; i += T) s_red[i] = __ldcg(aff + i);  // once a block (see the pivots)
        __syncthreads();
    }

    // ---- pass 2: y, the re-read part first (what pass 1 read last), then shared memory, then registers ----
    if (!active) return;
    float m[HAL_VEC], s[HAL_VEC], b[HAL_VEC];
#pragma unroll
    for (int j = 0; j < HAL_VEC; ++j) {
        const float* a3 = s_red + 3 * (cv * HAL_VEC + j);
        m[j] = a3[0];
        s[j] = a3[1];
        b[j] = a3[2];
    }
    for (int k1 = nk; k1 > nreg + nsm; k1 -= U) {
        uint4 t[U];
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (k1 - 1 - u >= nreg + nsm) t[u] = ld16_hint(xc + (k1 - 1 - u) * kstep, pol_once);
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (k1 - 1 - u >= nreg + nsm) __stcs(reinterpret_cast<uint4*>(yc + (k1 - 1 - u) * kstep), fused_apply(t[u], m, s, b));
    }
    for (int k = 0; k < nsm; ++k)
        __stcs(reinterpret_cast<uint4*>(yc + (nreg + k) * kstep), fused_apply(mine[(size_t)k * T], m, s, b));
#pragma unroll
    for (int k = 0; k < R; ++k)
        if (k < nreg) __stcs(reinterpret_cast<uint4*>(yc + k * kstep), fused_apply(reg[k], m, s, b));
    FUSED_STAMP(5)
}
#endif
