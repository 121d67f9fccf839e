/* BatchNorm2d forward: batch_norm_stats, batch_norm_finalize, batch_norm_apply.
 *
 * Contract entry points (all backends):
 *   batch_norm_stats(x, mean, var, N, C, HW, partial, CHUNKS)  [partial, CHUNKS: this backend's workspace]
 *   batch_norm_apply(x, y, scale, shift, N, C, HW)
 * plus this backend's batch_norm_finalize (one work-item per channel) and
 * batch_norm_infer (inference in one pass: scale and shift computed per work-item from
 * the running statistics, so one launch instead of finalize + apply).
 *
 * Statistics are Welford per work-item and Chan's parallel merge across work-items and
 * chunks (never E[x^2] - E[x]^2). They are taken of d = x - K_c with K_c the channel's
 * first element, so a large mean (1e4 with std 1) keeps its low-order digits: the mean
 * of d is small and exact to float precision, and so is (x - K_c) in the apply pass.
 *
 * partial[(c * CHUNKS + chunk) * 3 + {0, 1, 2}] = (count, mean of d, M2) of one chunk.
 * stats also writes mean[c] = K_c + mean(d), var[c] = M2 / count when CHUNKS == 1.
 * finalize merges the chunks (training) or reads the running statistics (inference) and
 * writes scale[c] and shift[c], shift[C + c] = centre, so that apply computes
 *   y = (x - shift[C + c]) * scale[c] + shift[c].
 * With the running statistics the centre is running_mean[c]: y = (x - mean) * scale + bias.
 */

/* ---- Welford / Chan ----------------------------------------------------------------- */

inline void chan_merge(float* n, float* m, float* q, float nb, float mb, float qb)
{
    if (nb == 0.0f) return;
    if (*n == 0.0f) {
        *n = nb;
        *m = mb;
        *q = qb;
        return;
    }
    const float nt = *n + nb;
    const float d = mb - *m;
    const float fb = nb / nt;
    *m += d * fb;
    *q += qb + d * d * (*n) * fb;
    *n = nt;
}

#define LANES 16
#define ROWS (WG / LANES)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void batch_norm_stats(__global const dtype_t* restrict x, __global float* restrict mean, __global float* restrict var,
                      int N, int C, int HW, __global float* restrict partial, int CHUNKS)
{
    const int chunk = get_group_id(0);
    const int lid = get_local_id(0);
    const long E = (long)N * HW; /* values per channel */
#if !LAYOUT_NHWC
    /* group (chunk, c); work-items stride over the chunk VEC values at a time */
    const int c = get_group_id(1);
    const float K = LD(x, c * HW);
    float cnt = 0.0f;
    floatV vm = (floatV)0.0f, vq = (floatV)0.0f;
    float sm = 0.0f, sq = 0.0f, scnt = 0.0f;
    if (HW % VEC == 0) {
        const long EV = E / VEC;
        const int s = (int)(EV * chunk / CHUNKS), e = (int)(EV * (chunk + 1) / CHUNKS);
        const int HWV = HW / VEC;
        for (int v = s + lid; v < e; v += WG) {
            const int n = v / HWV, hv = v % HWV;
            const floatV d = LDV(x, (n * C + c) * HW + hv * VEC) - K;
            cnt += 1.0f;
            const float inv = 1.0f / cnt; /* one division per step, shared by the VEC lanes */
            const floatV delta = d - vm;
            vm += delta * inv;
            vq += delta * (d - vm);
        }
    } else {
        const int s = (int)(E * chunk / CHUNKS), e = (int)(E * (chunk + 1) / CHUNKS);
        for (int v = s + lid; v < e; v += WG) {
            const int n = v / HW, hw = v % HW;
            const float d = LD(x, (n * C + c) * HW + hw) - K;
            scnt += 1.0f;
            const float delta = d - sm;
            sm += delta / scnt;
            sq += delta * (d - sm);
        }
    }
    /* fold the VEC lanes (each saw cnt values) into the scalar state */
    {
        float lm[VEC], lq[VEC];
        PRIV_STV(vm, lm);
        PRIV_STV(vq, lq);
        for (int j = 0; j < VEC; ++j) chan_merge(&scnt, &sm, &sq, cnt, lm[j], lq[j]);
    }
    __local float rn[WG], rm[WG], rq[WG];
    rn[lid] = scnt;
    rm[lid] = sm;
    rq[lid] = sq;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int st = WG / 2; st > 0; st >>= 1) {
        if (lid < st) {
            float n = rn[lid], m = rm[lid], q = rq[lid];
            chan_merge(&n, &m, &q, rn[lid + st], rm[lid + st], rq[lid + st]);
            rn[lid] = n;
            rm[lid] = m;
            rq[lid] = q;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        __global float* pp = partial + (c * CHUNKS + chunk) * 3;
        pp[0] = rn[0];
        pp[1] = rm[0];
        pp[2] = rq[0];
        if (CHUNKS == 1) {
            mean[c] = K + rm[0];
            var[c] = rq[0] / rn[0];
        }
    }
#else
    /* group (chunk, channel tile of LANES * VEC); work-item (cl, r): VEC channels, rows r, r + ROWS, ... */
    const int ct = get_group_id(1);
    const int cl = lid % LANES, r = lid / LANES;
    const int c0 = (ct * LANES + cl) * VEC;
    const int nvalid = clamp(C - c0, 0, VEC);
    const int s = (int)(E * chunk / CHUNKS), e = (int)(E * (chunk + 1) / CHUNKS);
    float cnt = 0.0f;
    floatV vm = (floatV)0.0f, vq = (floatV)0.0f;
    if (nvalid > 0) {
        floatV Kv;
        if (nvalid == VEC) {
            Kv = LDV(x, c0);
        } else {
            float t[VEC];
            for (int j = 0; j < VEC; ++j) t[j] = j < nvalid ? LD(x, c0 + j) : 0.0f;
            Kv = PRIV_LDV(t);
        }
        for (int m = s + r; m < e; m += ROWS) {
            floatV d;
            if (nvalid == VEC) {
                d = LDV(x, m * C + c0) - Kv;
            } else {
                float t[VEC];
                for (int j = 0; j < VEC; ++j) t[j] = j < nvalid ? LD(x, m * C + c0 + j) : 0.0f;
                d = PRIV_LDV(t) - Kv;
            }
            cnt += 1.0f;
            const float inv = 1.0f / cnt; /* one division per step, shared by the VEC lanes */
            const floatV delta = d - vm;
            vm += delta * inv;
            vq += delta * (d - vm);
        }
    }
    __local float rn[WG], rm[WG * VEC], rq[WG * VEC];
    rn[lid] = cnt;
    PRIV_STV(vm, rm + lid * VEC);
    PRIV_STV(vq, rq + lid * VEC);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int st = ROWS / 2; st > 0; st >>= 1) {
        if (r < st) {
            const int b = lid + st * LANES;
            const float na = rn[lid], nb = rn[b];
            for (int j = 0; j < VEC; ++j) {
                float n = na, m = rm[lid * VEC + j], q = rq[lid * VEC + j];
                chan_merge(&n, &m, &q, nb, rm[b * VEC + j], rq[b * VEC + j]);
                rm[lid * VEC + j] = m;
                rq[lid * VEC + j] = q;
            }
            rn[lid] = na + nb;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (r == 0) {
        for (int j = 0; j < nvalid; ++j) {
            const int c = c0 + j;
            __global float* pp = partial + (c * CHUNKS + chunk) * 3;
            pp[0] = rn[lid];
            pp[1] = rm[lid * VEC + j];
            pp[2] = rq[lid * VEC + j];
            if (CHUNKS == 1) {
                mean[c] = LD(x, c) + rm[lid * VEC + j];
                var[c] = rq[lid * VEC + j] / rn[lid];
            }
        }
    }
#endif
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void batch_norm_finalize(__global const dtype_t* restrict x, __global const float* restrict partial, int CHUNKS,
                         int HW, __global const float* restrict weight, __global const float* restrict bias,
                         __global float* restrict running_mean, __global float* restrict running_var,
                         __global float* restrict mean, __global float* restrict var,
                         __global float* restrict scale, __global float* restrict shift,
                         int C, float eps, float momentum, int training)
{
    const int c = get_global_id(0);
    if (c >= C) return;
    float centre, mrel, v;
    if (training) {
        float n = 0.0f, m = 0.0f, q = 0.0f;
        for (int k = 0; k < CHUNKS; ++k) {
            __global const float* pp = partial + (c * CHUNKS + k) * 3;
            chan_merge(&n, &m, &q, pp[0], pp[1], pp[2]);
        }
#if LAYOUT_NHWC
        centre = LD(x, c);
#else
        centre = LD(x, c * HW);
#endif
        mrel = m;
        v = q / n;
        const float mu = centre + m;
        mean[c] = mu;
        var[c] = v;
        if (running_mean && running_var) {
            running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * mu;
            running_var[c] = (1.0f - momentum) * running_var[c] + momentum * (v * (n / (n - 1.0f)));
        }
    } else {
        centre = running_mean[c];
        mrel = 0.0f;
        v = running_var[c];
    }
    float s = 1.0f / sqrt(v + eps);
    if (weight) s *= weight[c];
    scale[c] = s;
    shift[c] = (bias ? bias[c] : 0.0f) - mrel * s;
    shift[C + c] = centre;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void batch_norm_apply(__global const dtype_t* restrict x, __global dtype_t* restrict y,
                      __global const float* restrict scale, __global const float* restrict shift,
                      int N, int C, int HW)
{
    const int gid = get_global_id(0);
#if !LAYOUT_NHWC
    /* VEC consecutive values of one (n, c) plane */
    const int HWV = CEIL_DIV(HW, VEC);
    if (gid >= N * C * HWV) return;
    const int hv = gid % HWV;
    const int nc = gid / HWV;
    const int c = nc % C;
    const int p = nc * HW + hv * VEC;
    const int nvalid = min(VEC, HW - hv * VEC);
    const float s = scale[c], b = shift[c], k = shift[C + c];
    if (nvalid == VEC) {
        STV((LDV(x, p) - k) * s + b, y, p);
    } else {
        for (int j = 0; j < nvalid; ++j) ST((LD(x, p + j) - k) * s + b, y, p + j);
    }
#else
    /* VEC consecutive channels of one pixel */
    const int CV = CEIL_DIV(C, VEC);
    if (gid >= N * HW * CV) return;
    const int cv = gid % CV;
    const int m = gid / CV;
    const int c0 = cv * VEC;
    const int p = m * C + c0;
    const int nvalid = min(VEC, C - c0);
    if (nvalid == VEC) {
        STV((LDV(x, p) - FLDV(shift, C + c0)) * FLDV(scale, c0) + FLDV(shift, c0), y, p);
    } else {
        for (int j = 0; j < nvalid; ++j) {
            const int c = c0 + j;
            ST((LD(x, p + j) - shift[C + c]) * scale[c] + shift[c], y, p + j);
        }
    }
#endif
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void batch_norm_infer(__global const dtype_t* restrict x, __global dtype_t* restrict y,
                      __global const float* restrict weight, __global const float* restrict bias,
                      __global const float* restrict running_mean, __global const float* restrict running_var,
                      int N, int C, int HW, float eps)
{
    const int gid = get_global_id(0);
#if !LAYOUT_NHWC
    const int HWV = CEIL_DIV(HW, VEC);
    if (gid >= N * C * HWV) return;
    const int hv = gid % HWV;
    const int nc = gid / HWV;
    const int c = nc % C;
    const int p = nc * HW + hv * VEC;
    const int nvalid = min(VEC, HW - hv * VEC);
    const float s = (weight ? weight[c] : 1.0f) / sqrt(running_var[c] + eps);
    const float k = running_mean[c], b = bias ? bias[c] : 0.0f;
    if (nvalid == VEC) {
        STV((LDV(x, p) - k) * s + b, y, p);
    } else {
        for (int j = 0; j < nvalid; ++j) ST((LD(x, p + j) - k) * s + b, y, p + j);
    }
#else
    const int CV = CEIL_DIV(C, VEC);
    if (gid >= N * HW * CV) return;
    const int cv = gid % CV;
    const int m = gid / CV;
    const int c0 = cv * VEC;
    const int p = m * C + c0;
    const int nvalid = min(VEC, C - c0);
    if (nvalid == VEC) {
        const floatV s = (weight ? FLDV(weight, c0) : (floatV)1.0f) / sqrt(FLDV(running_var, c0) + eps);
        const floatV b = bias ? FLDV(bias, c0) : (floatV)0.0f;
        STV((LDV(x, p) - FLDV(running_mean, c0)) * s + b, y, p);
    } else {
        for (int j = 0; j < nvalid; ++j) {
            const int c = c0 + j;
            const float s = (weight ? weight[c] : 1.0f) / sqrt(running_var[c] + eps);
            ST((LD(x, p + j) - running_mean[c]) * s + (bias ? bias[c] : 0.0f), y, p + j);
        }
    }
#endif
}
