/* batch_norm.c: BatchNorm statistics and normalization (batch_norm_stats, batch_norm_apply).
 *
 * Statistics without cancellation: the data is cut into chunks of about CHUNK
 * values that stay in cache; each chunk gets an exact two-pass treatment (a
 * rough mean m0 from pass one, then sums of d = x - m0 and d^2 in pass two, so
 * mean = m0 + sum(d)/n and M2 = sum(d^2) - sum(d)^2/n), and chunks are merged in
 * double with Chan's formula. Memory is read once; E[x^2] - E[x]^2 never appears.
 *
 * Apply: y = ((x - center_hi) - center_lo) * scale + shift. Subtracting the mean
 * (as a float pair hi + lo) before scaling keeps the digits that the usual
 * x * scale + (bias - mean * scale) loses when |mean| >> std (mean 1e4, std 1).
 */
#include "hal_prelude.h"

#ifndef CHUNK
#define CHUNK 4096 /* values per statistics chunk */
#endif
#ifndef ACC
#define ACC 2 /* independent vector accumulators */
#endif

typedef struct {
    double n, mean, m2;
} moments;

static inline void chan_merge(moments *a, double nb, double mb, double m2b) {
    if (nb <= 0) return;
    if (a->n <= 0) {
        a->n = nb;
        a->mean = mb;
        a->m2 = m2b;
        return;
    }
    const double n = a->n + nb, d = mb - a->mean;
    a->mean += d * (nb / n);
    a->m2 += m2b + d * d * (a->n * nb / n);
    a->n = n;
}

#if !LAYOUT_NHWC
/* Moments of len contiguous values (two passes; the chunk is in cache for the second). */
static moments chunk_moments(const hal_t *restrict p, hal_int len) {
    vf acc[ACC];
    for (int a = 0; a < ACC; a++) acc[a] = vf_zero();
    hal_int i = 0;
    for (; i + ACC * VW <= len; i += ACC * VW)
        for (int a = 0; a < ACC; a++) acc[a] = vf_add(acc[a], vf_load(p + i + a * VW));
    double s = 0.0;
    for (int a = 0; a < ACC; a++) s += (double)vf_hsum(acc[a]);
    for (; i < len; i++) s += (double)ld(p + i);
    const float m0 = (float)(s / (double)len);
    const vf mv = vf_set1(m0);
    vf s1[ACC], s2[ACC];
    for (int a = 0; a < ACC; a++) s1[a] = s2[a] = vf_zero();
    for (i = 0; i + ACC * VW <= len; i += ACC * VW)
        for (int a = 0; a < ACC; a++) {
            const vf d = vf_sub(vf_load(p + i + a * VW), mv);
            s1[a] = vf_add(s1[a], d);
            s2[a] = vf_fma(d, d, s2[a]);
        }
    double d1 = 0.0, d2 = 0.0;
    for (int a = 0; a < ACC; a++) {
        d1 += (double)vf_hsum(s1[a]);
        d2 += (double)vf_hsum(s2[a]);
    }
    for (; i < len; i++) {
        const double d = (double)(ld(p + i) - m0);
        d1 += d;
        d2 += d * d;
    }
    moments m = {(double)len, (double)m0 + d1 / (double)len, d2 - d1 * d1 / (double)len};
    if (m.m2 < 0) m.m2 = 0;
    return m;
}

static void stats_nchw(const hal_t *restrict x, double *mean, double *var, hal_int N, hal_int C, hal_int HW) {
    const hal_int nch = HAL_CDIV(HW, CHUNK), per_c = N * nch, tasks = C * per_c;
    moments *parts = (moments *)hal_alloc(sizeof(moments) * (size_t)tasks);
    if (!parts) return;
    const int nt = hal_threads_for(N * C * HW);
#pragma omp parallel num_threads(nt)
    {
#pragma omp for schedule(guided)
        for (hal_int t = 0; t < tasks; t++) { /* memory order; parts grouped by channel */
            const hal_int plane = t / nch, k = t - plane * nch, n = plane / C, c = plane - n * C;
            const hal_int off = k * CHUNK;
            parts[c * per_c + n * nch + k] = chunk_moments(x + plane * HW + off, HAL_MIN((hal_int)CHUNK, HW - off));
        }
#pragma omp for schedule(guided)
        for (hal_int c = 0; c < C; c++) {
            moments m = {0, 0, 0};
            for (hal_int t = 0; t < per_c; t++) chan_merge(&m, parts[c * per_c + t].n, parts[c * per_c + t].mean,
                                                           parts[c * per_c + t].m2);
            mean[c] = m.mean;
            var[c] = m.m2 / m.n;
        }
    }
    free(parts);
}
#else
/* NHWC: chunks of R pixels; per channel vector, both passes over the chunk's
 * R x VW slice (in L1). Every channel of a chunk has the same count, so each
 * thread merges a chunk into its running (mean, M2) with two scalar
 * coefficients (Chan), a loop over channels the compiler vectorizes; the
 * threads' results are merged in thread order at the end. */
static void stats_nhwc(const hal_t *restrict x, double *mean, double *var, hal_int N, hal_int C, hal_int HW) {
    const hal_int P = N * HW, R = HAL_MAX(CHUNK / C, 32), nch = HAL_CDIV(P, R);
    const int nt = hal_threads_for(P * C);
    double *acc = (double *)calloc((size_t)nt * (size_t)(2 * C + 1), sizeof(double));
    if (!acc) return;
#pragma omp parallel num_threads(nt)
    {
#ifdef _OPENMP
        double *mine = acc + (size_t)omp_get_thread_num() * (size_t)(2 * C + 1);
#else
        double *mine = acc;
#endif
        double *am = mine, *a2 = mine + C, *an = mine + 2 * C; /* mean, M2, count */
        float *tmp = (float *)hal_alloc(sizeof(float) * 3 * (size_t)C);
#pragma omp for schedule(static)
        for (hal_int k = 0; k < nch; k++) {
            if (!tmp) continue;
            float *cm = tmp, *c1 = tmp + C, *c2 = tmp + 2 * C; /* chunk m0, sum d, sum d^2 */
            const hal_int p0 = k * R, rows = HAL_MIN(R, P - p0);
            const hal_t *base = x + p0 * C;
            const float invf = 1.0f / (float)rows;
            hal_int c = 0;
            /* four channel vectors at a time: four independent add chains per pass */
            for (; c + 4 * VW <= C; c += 4 * VW) {
                vf s[4], m0[4], s1[4], s2[4];
                for (int v = 0; v < 4; v++) s[v] = s1[v] = s2[v] = vf_zero();
                for (hal_int r = 0; r < rows; r++)
#pragma GCC unroll 4
                    for (int v = 0; v < 4; v++) s[v] = vf_add(s[v], vf_load(base + r * C + c + v * VW));
                for (int v = 0; v < 4; v++) m0[v] = vf_mul(s[v], vf_set1(invf));
                for (hal_int r = 0; r < rows; r++)
#pragma GCC unroll 4
                    for (int v = 0; v < 4; v++) {
                        const vf d = vf_sub(vf_load(base + r * C + c + v * VW), m0[v]);
                        s1[v] = vf_add(s1[v], d);
                        s2[v] = vf_fma(d, d, s2[v]);
                    }
                for (int v = 0; v < 4; v++) {
                    vf_storef(cm + c + v * VW, m0[v]);
                    vf_storef(c1 + c + v * VW, s1[v]);
                    vf_storef(c2 + c + v * VW, s2[v]);
                }
            }
            for (; c + VW <= C; c += VW) {
                vf s = vf_zero();
                for (hal_int r = 0; r < rows; r++) s = vf_add(s, vf_load(base + r * C + c));
                const vf m0 = vf_mul(s, vf_set1(invf));
                vf s1 = vf_zero(), s2 = vf_zero();
                for (hal_int r = 0; r < rows; r++) {
                    const vf d = vf_sub(vf_load(base + r * C + c), m0);
                    s1 = vf_add(s1, d);
                    s2 = vf_fma(d, d, s2);
                }
                vf_storef(cm + c, m0);
                vf_storef(c1 + c, s1);
                vf_storef(c2 + c, s2);
            }
            for (; c < C; c++) {
                float s = 0.0f;
                for (hal_int r = 0; r < rows; r++) s += ld(base + r * C + c);
                const float m0 = s * invf;
                float s1 = 0.0f, s2 = 0.0f;
                for (hal_int r = 0; r < rows; r++) {
                    const float d = ld(base + r * C + c) - m0;
                    s1 += d;
                    s2 += d * d;
                }
                cm[c] = m0;
                c1[c] = s1;
                c2[c] = s2;
            }
            const double nb = (double)rows, inv = 1.0 / nb, n = *an + nb, f1 = nb / n, f2 = *an * nb / n;
            for (hal_int j = 0; j < C; j++) {
                const double d1 = c1[j], mb = (double)cm[j] + d1 * inv, m2b = fmax((double)c2[j] - d1 * d1 * inv, 0.0);
                const double d = mb - am[j];
                am[j] += d * f1;
                a2[j] += m2b + d * d * f2;
            }
            *an = n;
        }
        free(tmp);
    }
    for (hal_int c = 0; c < C; c++) {
        moments m = {0, 0, 0};
        for (int t = 0; t < nt; t++) {
            const double *th = acc + (size_t)t * (size_t)(2 * C + 1);
            chan_merge(&m, th[2 * C], th[c], th[C + c]);
        }
        mean[c] = m.mean;
        var[c] = m.m2 / m.n;
    }
    free(acc);
}
#endif

/* mean[C], var[C] (biased) in double; workspace is unused (may be NULL). */
HAL_EXPORT void batch_norm_stats(const hal_t *x, double *mean, double *var, hal_int N, hal_int C, hal_int HW,
                                 void *workspace) {
    (void)workspace;
#if LAYOUT_NHWC
    stats_nhwc(x, mean, var, N, C, HW);
#else
    stats_nchw(x, mean, var, N, C, HW);
#endif
}

/* y = ((x - center_hi) - center_lo) * scale + shift, computed as
 * fma(x - center_hi, scale, shift - center_lo * scale): x - center_hi is exact
 * near the mean (Sterbenz), and center_lo * scale is tiny. center_hi/lo may be
 * NULL (0). */
HAL_EXPORT void batch_norm_apply(const hal_t *x, hal_t *y, const float *scale, const float *shift, hal_int N,
                                 hal_int C, hal_int HW, const float *center_hi, const float *center_lo) {
    const int nt = hal_threads_for(N * C * HW);
    float *params = (float *)hal_alloc(sizeof(float) * 3 * (size_t)C);
    if (!params) return;
    float *hs = params, *ss = params + C, *bs = params + 2 * C;
    for (hal_int c = 0; c < C; c++) {
        hs[c] = center_hi ? center_hi[c] : 0.0f;
        ss[c] = scale[c];
        bs[c] = (float)((double)shift[c] - (center_lo ? (double)center_lo[c] : 0.0) * (double)scale[c]);
    }
    const int stream = hal_use_stream((size_t)(N * C * HW) * sizeof(hal_t));
#if !LAYOUT_NHWC
    const hal_int seg = 16384, nch = HAL_CDIV(HW, seg), tasks = N * C * nch;
#pragma omp parallel num_threads(nt)
    {
#pragma omp for schedule(guided) nowait
        for (hal_int tr = 0; tr < tasks; tr++) {
            /* back to front: the end of x is what a preceding pass (the statistics, or
             * the op that wrote x) left in the last-level cache */
            const hal_int t = tasks - 1 - tr;
            const hal_int plane = t / nch, k = t - plane * nch, c = plane % C;
            const hal_int off = plane * HW + k * seg, len = HAL_MIN(seg, HW - k * seg);
            const hal_t *xp = x + off;
            hal_t *yp = y + off;
            const float h = hs[c], s = ss[c], b = bs[c];
            const vf hv = vf_set1(h), sv = vf_set1(s), bv = vf_set1(b);
            hal_int i = 0;
            if (stream) {
                for (; i < len && !hal_aligned(yp + i); i++) st(yp + i, fmaf(ld(xp + i) - h, s, b));
                for (; i + VW <= len; i += VW) vf_stream(yp + i, vf_fma(vf_sub(vf_load(xp + i), hv), sv, bv));
            }
            for (; i + ACC * VW <= len; i += ACC * VW)
#pragma GCC unroll 4
                for (int a = 0; a < ACC; a++)
                    vf_store(yp + i + a * VW, vf_fma(vf_sub(vf_load(xp + i + a * VW), hv), sv, bv));
            for (; i + VW <= len; i += VW) vf_store(yp + i, vf_fma(vf_sub(vf_load(xp + i), hv), sv, bv));
            for (; i < len; i++) st(yp + i, fmaf(ld(xp + i) - h, s, b));
        }
        if (stream) hal_stream_fence();
    }
#else
    const hal_int P = N * HW, rows = HAL_MAX(1, 16384 / C), nch = HAL_CDIV(P, rows);
    /* every pixel row starts aligned when the base is and a row is whole vectors */
    const int nts = stream && hal_aligned(y) && (C * (hal_int)sizeof(hal_t)) % HAL_VBYTES == 0;
#pragma omp parallel num_threads(nt)
    {
#pragma omp for schedule(guided) nowait
        for (hal_int kr = 0; kr < nch; kr++) {
            const hal_int k = nch - 1 - kr; /* back to front, as for NCHW */
            const hal_int p0 = k * rows, p1 = HAL_MIN(P, p0 + rows);
            hal_int c = 0;
            /* four channel vectors at a time, their parameters held in registers over the pixels */
            for (; c + 4 * VW <= C; c += 4 * VW) {
                vf hv[4], sv[4], bv[4];
                for (int v = 0; v < 4; v++) {
                    hv[v] = vf_loadf(hs + c + v * VW);
                    sv[v] = vf_loadf(ss + c + v * VW);
                    bv[v] = vf_loadf(bs + c + v * VW);
                }
                for (hal_int p = p0; p < p1; p++)
#pragma GCC unroll 4
                    for (int v = 0; v < 4; v++) {
                        const vf r = vf_fma(vf_sub(vf_load(x + p * C + c + v * VW), hv[v]), sv[v], bv[v]);
                        if (nts) vf_stream(y + p * C + c + v * VW, r);
                        else vf_store(y + p * C + c + v * VW, r);
                    }
            }
            for (; c + VW <= C; c += VW) {
                const vf hv = vf_loadf(hs + c), sv = vf_loadf(ss + c), bv = vf_loadf(bs + c);
                for (hal_int p = p0; p < p1; p++) {
                    const vf r = vf_fma(vf_sub(vf_load(x + p * C + c), hv), sv, bv);
                    if (nts) vf_stream(y + p * C + c, r);
                    else vf_store(y + p * C + c, r);
                }
            }
            for (; c < C; c++)
                for (hal_int p = p0; p < p1; p++) st(y + p * C + c, fmaf(ld(x + p * C + c) - hs[c], ss[c], bs[c]));
        }
        if (nts) hal_stream_fence();
    }
#endif
    free(params);
}
