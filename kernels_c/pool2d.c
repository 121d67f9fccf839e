/* pool2d.c: sliding-window max and average pooling (entry points pool2d_max, pool2d_avg).
 *
 * NCHW: one task per output row; the interior of the row (every tap inside the
 * input) runs W_BLOCK vectors of outputs at a time, loading the input contiguously
 * (stride 1), deinterleaved (stride 2) or gathered (other strides); the border
 * outputs and the tail run the scalar loop.
 * NHWC: one task per output row; each output pixel runs C_BLOCK vectors of
 * channels at a time, then single vectors, then a scalar channel tail.
 *
 * Max: start at -inf and take a tap when v > best || isnan(v), scanning taps row
 * major, so the first maximum wins and NaN propagates (indices as PyTorch's).
 * Without indices the vector path keeps max(v, best) (the first maximum) and an
 * "any NaN" mask, which gives the same value with fewer operations.
 */
#include "hal_prelude.h"

#ifndef W_BLOCK
#define W_BLOCK 1 /* NCHW: output vectors per step along W */
#endif
#ifndef C_BLOCK
#define C_BLOCK 1 /* NHWC: channel vectors per step */
#endif

typedef struct {
    hal_int N, C, IH, IW, OH, OW, KH, KW, SH, SW, PT, PB, PL, PR, DH, DW, DIV, CIP;
} pool_geom;

/* Per output row / column: first and one-past-last valid tap, and the tap count
 * inside the padded extent (for count_include_pad). Valid taps are contiguous. */
typedef struct {
    hal_int *rk0, *rk1, *rpad, *ck0, *ck1, *cpad;
} pool_tabs;

static void axis_table(hal_int O, hal_int I, hal_int K, hal_int S, hal_int P0, hal_int P1, hal_int D, hal_int *k0,
                       hal_int *k1, hal_int *pad) {
    for (hal_int o = 0; o < O; o++) {
        hal_int lo = -1, hi = 0, pc = 0, start = o * S - P0;
        for (hal_int k = 0; k < K; k++) {
            hal_int i = start + k * D;
            if (i >= 0 && i < I) {
                if (lo < 0) lo = k;
                hi = k + 1;
            }
            if (i >= -P0 && i < I + P1) pc++;
        }
        k0[o] = lo < 0 ? 0 : lo;
        k1[o] = lo < 0 ? 0 : hi;
        pad[o] = pc;
    }
}

static inline float pool_divisor(const pool_geom *g, const pool_tabs *t, hal_int oh, hal_int ow) {
    if (g->DIV > 0) return (float)g->DIV;
    if (g->CIP) return (float)(t->rpad[oh] * t->cpad[ow]);
    return (float)((t->rk1[oh] - t->rk0[oh]) * (t->ck1[ow] - t->ck0[ow]));
}

/* One output element, any geometry; taps at xp[(ih * IW + iw) * ps]. */
HAL_INLINE void pool_point(const int MAX, const int IDX, const hal_t *restrict xp, hal_int ps, hal_t *restrict yo,
                           int64_t *restrict io, hal_int oh, hal_int ow, const pool_geom *g, const pool_tabs *t) {
    const hal_int kh0 = t->rk0[oh], kh1 = t->rk1[oh], kw0 = t->ck0[ow], kw1 = t->ck1[ow];
    const hal_int ihb = oh * g->SH - g->PT, iwb = ow * g->SW - g->PL;
    if (MAX) {
        float best = -INFINITY;
        hal_int bi = (ihb + kh0 * g->DH) * g->IW + iwb + kw0 * g->DW;
        for (hal_int kh = kh0; kh < kh1; kh++) {
            const hal_int ih = ihb + kh * g->DH;
            for (hal_int kw = kw0; kw < kw1; kw++) {
                const hal_int pix = ih * g->IW + iwb + kw * g->DW;
                const float v = ld(xp + pix * ps);
                if (v > best || v != v) {
                    best = v;
                    bi = pix;
                }
            }
        }
        st(yo, best);
        if (IDX) *io = bi;
    } else {
        float sum = 0.0f;
        for (hal_int kh = kh0; kh < kh1; kh++) {
            const hal_int ih = ihb + kh * g->DH;
            for (hal_int kw = kw0; kw < kw1; kw++) sum += ld(xp + (ih * g->IW + iwb + kw * g->DW) * ps);
        }
        st(yo, sum / pool_divisor(g, t, oh, ow));
    }
}

/* ------------------------------------------------------------------------ */
/* NCHW: separable                                                          */
/* ------------------------------------------------------------------------ */
/* One output row at a time:
 * 1. column pass: for every input column, reduce the row's valid taps (kh)
 *    into colv[PL + iw] (vectors along W, contiguous loads). For max with
 *    indices colr keeps the input row the scan "v > best || isnan(v)" picked.
 * 2. row pass: reduce KW columns of colv (stride SW, dilation DW) for VW
 *    outputs at a time. colv is padded with the neutral value (-inf / 0) left
 *    of column 0 and right of the input, so every output, border or not, runs
 *    the same vector code. For max with indices the row pass merges (value,
 *    row) pairs exactly as the row-major scan would (see take_mask).
 * The divisor is (row factor) x (column factor) or DIVISOR. */

typedef struct {
    hal_int Wb;       /* padded column buffer length */
    float *colfac;    /* [OWr] avg divisor column factor (1 past OW) */
    int32_t *firstc;  /* [OWr] first valid input column (max index start) */
} pool_row_tabs;

/* take (v, r) over (best, br)? The row-major scan's choice between a tap in an
 * earlier column (best, br) and one in a later column (v, r): with NaN the last
 * NaN wins (larger row, or equal row and later column), else the larger value,
 * or the equal value in a smaller row. */
HAL_INLINE vm take_mask(vf v, vi r, vf best, vi br) {
    const vm nan_v = vf_isnan(v), nan_b = vf_isnan(best);
    const vm numeric = vm_or(vm_or(nan_v, vf_gt(v, best)), vm_and(vf_eq(v, best), vi_lt(r, br)));
    return vm_or(vm_andnot(nan_b, numeric), vm_and(vm_and(nan_v, nan_b), vi_ge(r, br)));
}

HAL_INLINE void column_block(const int MAX, const int IDX, const int NB, const hal_t *restrict xp, hal_int IW,
                             hal_int ih0, hal_int nrows, hal_int DH, hal_int iw, float *restrict colv,
                             int32_t *restrict colr, hal_int count) {
    vf acc[NB];
    vi br[NB];
    vm nanm[NB];
    for (int b = 0; b < NB; b++) {
        acc[b] = MAX ? vf_set1(-INFINITY) : vf_zero();
        br[b] = vi_set1((int)ih0);
        nanm[b] = vm_none();
    }
    for (hal_int k = 0; k < nrows; k++) {
        const hal_int ih = ih0 + k * DH;
        const hal_t *row = xp + ih * IW + iw;
        const vi rowv = vi_set1((int)ih);
#pragma GCC unroll 8
        for (int b = 0; b < NB; b++) {
            /* count < VW: the row's last, partial vector (neutral fill past the row) */
            const vf v = count >= VW ? vf_load(row + b * VW) : vf_load_fill(row, count, MAX ? -INFINITY : 0.0f);
            if (MAX && IDX) {
                const vm m = vm_or(vf_gt(v, acc[b]), vf_isnan(v));
                acc[b] = vf_blend(acc[b], v, m);
                br[b] = vi_blend(br[b], rowv, m);
            } else if (MAX) {
                acc[b] = vf_max(v, acc[b]);
                nanm[b] = vm_or(nanm[b], vf_isnan(v));
            } else {
                acc[b] = vf_add(acc[b], v);
            }
        }
    }
    for (int b = 0; b < NB; b++) {
        if (MAX && !IDX) acc[b] = vf_blend(acc[b], vf_set1(NAN), nanm[b]);
        vf_storef(colv + iw + b * VW, acc[b]);
        if (IDX) vi_store_i32(colr + iw + b * VW, br[b]);
    }
}

HAL_INLINE void pool_row_nchw(const int MAX, const int IDX, const hal_int SWc, const hal_int KWc,
                              const hal_t *restrict xp, hal_t *restrict yr, int64_t *restrict ir, hal_int oh,
                              const pool_geom *g, const pool_tabs *t, const pool_row_tabs *rt,
                              float *restrict colbuf, int32_t *restrict rowbuf) {
    const hal_int IW = g->IW, OW = g->OW, DW = g->DW, PL = g->PL;
    const hal_int kh0 = t->rk0[oh], nrows = t->rk1[oh] - kh0, ih0 = oh * g->SH - g->PT + kh0 * g->DH;
    float *colv = colbuf + PL;
    int32_t *colr = rowbuf + PL;
    /* 1. column pass over the input columns */
    hal_int iw = 0;
    for (; iw + W_BLOCK * VW <= IW; iw += W_BLOCK * VW)
        column_block(MAX, IDX, W_BLOCK, xp, IW, ih0, nrows, g->DH, iw, colv, colr, VW);
    for (; iw + VW <= IW; iw += VW) column_block(MAX, IDX, 1, xp, IW, ih0, nrows, g->DH, iw, colv, colr, VW);
    if (!IDX && iw < IW) { /* masked last vector: the lanes past the row write the neutral padding value */
        column_block(MAX, 0, 1, xp, IW, ih0, nrows, g->DH, iw, colv, colr, IW - iw);
        iw = IW;
    }
    for (; iw < IW; iw++) {
        float best = MAX ? -INFINITY : 0.0f;
        int32_t r = (int32_t)ih0;
        for (hal_int k = 0; k < nrows; k++) {
            const hal_int ih = ih0 + k * g->DH;
            const float v = ld(xp + ih * IW + iw);
            if (!MAX) {
                best += v;
            } else if (v > best || v != v) {
                best = v;
                r = (int32_t)ih;
            }
        }
        colv[iw] = best;
        if (IDX) colr[iw] = r;
    }
    /* 2. row pass: outputs ow .. ow + VW read colbuf[ow*SW + kw*DW + lane*SW] */
    const float rowfac = g->CIP ? (float)t->rpad[oh] : (float)nrows;
    const vi lanes = vi_lanes((int)SWc), ivw = vi_set1((int)IW);
    for (hal_int ow = 0; ow < OW; ow += VW) {
        const float *base = colbuf + ow * SWc;
        vf acc = MAX ? vf_set1(-INFINITY) : vf_zero();
        vm nanm = vm_none();
        vi br = vi_set1((int)ih0), bc = vi_zero_i32();
        if (IDX) bc = vi_load_i32(rt->firstc + ow);
        for (hal_int kw = 0; kw < KWc; kw++) {
            const vf v = vf_loadf_strided(base + kw * DW, SWc);
            if (MAX && IDX) {
                const vi r = vi_load_strided(rowbuf + ow * SWc + kw * DW, SWc);
                const vm m = take_mask(v, r, acc, br);
                acc = vf_blend(acc, v, m);
                br = vi_blend(br, r, m);
                bc = vi_blend(bc, vi_add(vi_set1((int)(ow * SWc + kw * DW - PL)), lanes), m);
            } else if (MAX) {
                acc = vf_max(v, acc);
                nanm = vm_or(nanm, vf_isnan(v));
            } else {
                acc = vf_add(acc, v);
            }
        }
        if (MAX && !IDX) acc = vf_blend(acc, vf_set1(NAN), nanm);
        if (!MAX) {
            const vf div = g->DIV > 0 ? vf_set1((float)g->DIV) : vf_mul(vf_set1(rowfac), vf_loadf(rt->colfac + ow));
            acc = vf_div(acc, div);
        }
        if (ow + VW <= OW) {
            vf_store(yr + ow, acc);
            if (IDX) vi_store_i64(ir + ow, vi_add(vi_mullo(br, ivw), bc));
        } else {
            vf_store_part(yr + ow, acc, OW - ow);
            if (IDX) vi_store_i64_part(ir + ow, vi_add(vi_mullo(br, ivw), bc), OW - ow);
        }
    }
}

/* Specialised instances: constant stride (and window width for the common windows). */
#define POOL_NCHW_VARIANT(NAME, MAX, IDX)                                                                            \
    static void NAME(const hal_t *restrict x, hal_t *restrict y, int64_t *restrict ind, const pool_geom *g,         \
                     const pool_tabs *t, const pool_row_tabs *rt) {                                                  \
        const hal_int rows = g->N * g->C * g->OH, plane_in = g->IH * g->IW, plane_out = g->OH * g->OW;              \
        _Pragma("omp parallel num_threads(hal_threads_for(rows * g->OW * g->KH * g->KW))") {                        \
            float *colbuf = (float *)hal_alloc(sizeof(float) * (size_t)rt->Wb);                                      \
            int32_t *rowbuf = (int32_t *)hal_alloc(sizeof(int32_t) * (size_t)rt->Wb);                               \
            if (colbuf && rowbuf) {                                                                                  \
                /* the padding never changes: the column pass writes [PL, PL + IW) only */                          \
                for (hal_int i = 0; i < rt->Wb; i++) {                                                               \
                    colbuf[i] = MAX ? -INFINITY : 0.0f;                                                              \
                    rowbuf[i] = INT32_MAX; /* a padded column never wins a tie */                                    \
                }                                                                                                    \
            }                                                                                                        \
            _Pragma("omp for schedule(guided)") for (hal_int r = 0; r < rows; r++) {                                 \
                if (!colbuf || !rowbuf) continue;                                                                    \
                const hal_int pl = r / g->OH, oh = r - pl * g->OH;                                                   \
                const hal_t *xp = x + pl * plane_in;                                                                 \
                hal_t *yr = y + pl * plane_out + oh * g->OW;                                                         \
                int64_t *ir = IDX ? ind + pl * plane_out + oh * g->OW : NULL;                                        \
                if (g->SW == 2 && g->KW == 3)                                                                        \
                    pool_row_nchw(MAX, IDX, 2, 3, xp, yr, ir, oh, g, t, rt, colbuf, rowbuf);                         \
                else if (g->SW == 2 && g->KW == 2)                                                                   \
                    pool_row_nchw(MAX, IDX, 2, 2, xp, yr, ir, oh, g, t, rt, colbuf, rowbuf);                         \
                else if (g->SW == 1 && g->KW == 3)                                                                   \
                    pool_row_nchw(MAX, IDX, 1, 3, xp, yr, ir, oh, g, t, rt, colbuf, rowbuf);                         \
                else if (g->SW == 1)                                                                                 \
                    pool_row_nchw(MAX, IDX, 1, g->KW, xp, yr, ir, oh, g, t, rt, colbuf, rowbuf);                     \
                else if (g->SW == 2)                                                                                 \
                    pool_row_nchw(MAX, IDX, 2, g->KW, xp, yr, ir, oh, g, t, rt, colbuf, rowbuf);                     \
                else                                                                                                 \
                    pool_row_nchw(MAX, IDX, g->SW, g->KW, xp, yr, ir, oh, g, t, rt, colbuf, rowbuf);                 \
            }                                                                                                        \
            free(colbuf);                                                                                            \
            free(rowbuf);                                                                                            \
        }                                                                                                            \
    }

#if !LAYOUT_NHWC
POOL_NCHW_VARIANT(pool_nchw_max, 1, 0)
POOL_NCHW_VARIANT(pool_nchw_max_idx, 1, 1)
POOL_NCHW_VARIANT(pool_nchw_avg, 0, 0)
#endif

/* ------------------------------------------------------------------------ */
/* NHWC                                                                     */
/* ------------------------------------------------------------------------ */

/* NB channel vectors c .. c + NB*VW of one output pixel. */
HAL_INLINE void pool_block_nhwc(const int MAX, const int IDX, const int NB, const hal_t *restrict xn,
                                hal_t *restrict yo, int64_t *restrict io, hal_int c, hal_int oh, hal_int ow,
                                const pool_geom *g, const pool_tabs *t, float divisor) {
    const hal_int C = g->C, IW = g->IW, kh0 = t->rk0[oh], kh1 = t->rk1[oh], kw0 = t->ck0[ow], kw1 = t->ck1[ow];
    const hal_int ihb = oh * g->SH - g->PT, iwb = ow * g->SW - g->PL;
    vf acc[NB];
    vi bi[NB];
    vm nanm[NB];
    const vi first = vi_set1((int)((ihb + kh0 * g->DH) * IW + iwb + kw0 * g->DW));
    for (int b = 0; b < NB; b++) {
        acc[b] = MAX ? vf_set1(-INFINITY) : vf_zero();
        nanm[b] = vm_none();
        bi[b] = first;
    }
    for (hal_int kh = kh0; kh < kh1; kh++) {
        const hal_int ih = ihb + kh * g->DH;
        for (hal_int kw = kw0; kw < kw1; kw++) {
            const hal_int pix = ih * IW + iwb + kw * g->DW;
            const hal_t *p = xn + pix * C + c;
            const vi tap = vi_set1((int)pix);
#pragma GCC unroll 8
            for (int b = 0; b < NB; b++) {
                const vf v = vf_load(p + b * VW);
                if (MAX && IDX) {
                    const vm m = vm_or(vf_gt(v, acc[b]), vf_isnan(v));
                    acc[b] = vf_blend(acc[b], v, m);
                    bi[b] = vi_blend(bi[b], tap, m);
                } else if (MAX) {
                    acc[b] = vf_max(v, acc[b]);
                    nanm[b] = vm_or(nanm[b], vf_isnan(v));
                } else {
                    acc[b] = vf_add(acc[b], v);
                }
            }
        }
    }
    for (int b = 0; b < NB; b++) {
        if (MAX && !IDX) acc[b] = vf_blend(acc[b], vf_set1(NAN), nanm[b]);
        if (!MAX) acc[b] = vf_div(acc[b], vf_set1(divisor));
        vf_store(yo + c + b * VW, acc[b]);
        if (IDX) vi_store_i64(io + c + b * VW, bi[b]);
    }
}

#define POOL_NHWC_VARIANT(NAME, MAX, IDX)                                                                            \
    static void NAME(const hal_t *restrict x, hal_t *restrict y, int64_t *restrict ind, const pool_geom *g,         \
                     const pool_tabs *t, int vector_ok) {                                                            \
        const hal_int rows = g->N * g->OH, C = g->C, TC = C_BLOCK * VW;                                              \
        _Pragma("omp parallel for schedule(guided) num_threads(hal_threads_for(rows * g->OW * C * g->KH * g->KW))") \
        for (hal_int r = 0; r < rows; r++) {                                                                         \
            const hal_int n = r / g->OH, oh = r - n * g->OH;                                                         \
            const hal_t *xn = x + n * g->IH * g->IW * C;                                                             \
            for (hal_int ow = 0; ow < g->OW; ow++) {                                                                 \
                const hal_int o = (r * g->OW + ow) * C;                                                              \
                hal_t *yo = y + o;                                                                                   \
                int64_t *io = IDX ? ind + o : NULL;                                                                  \
                const float divisor = MAX ? 0.0f : pool_divisor(g, t, oh, ow);                                       \
                hal_int c = 0;                                                                                       \
                if (vector_ok) {                                                                                     \
                    for (; c + TC <= C; c += TC)                                                                     \
                        pool_block_nhwc(MAX, IDX, C_BLOCK, xn, yo, io, c, oh, ow, g, t, divisor);                    \
                    for (; c + VW <= C; c += VW) pool_block_nhwc(MAX, IDX, 1, xn, yo, io, c, oh, ow, g, t, divisor); \
                }                                                                                                    \
                for (; c < C; c++) pool_point(MAX, IDX, xn + c, C, yo + c, IDX ? io + c : NULL, oh, ow, g, t);       \
            }                                                                                                        \
        }                                                                                                            \
    }

#if LAYOUT_NHWC
POOL_NHWC_VARIANT(pool_nhwc_max, 1, 0)
POOL_NHWC_VARIANT(pool_nhwc_max_idx, 1, 1)
POOL_NHWC_VARIANT(pool_nhwc_avg, 0, 0)
#endif

/* ------------------------------------------------------------------------ */
/* entry points                                                             */
/* ------------------------------------------------------------------------ */

static void pool_run(int is_max, const hal_t *x, hal_t *y, int64_t *ind, const pool_geom *g) {
    hal_int *buf = (hal_int *)malloc(sizeof(hal_int) * 3 * (size_t)(g->OH + g->OW));
    if (!buf) return;
    pool_tabs t = {buf, buf + g->OH, buf + 2 * g->OH, buf + 3 * g->OH, buf + 3 * g->OH + g->OW,
                   buf + 3 * g->OH + 2 * g->OW};
    axis_table(g->OH, g->IH, g->KH, g->SH, g->PT, g->PB, g->DH, t.rk0, t.rk1, t.rpad);
    axis_table(g->OW, g->IW, g->KW, g->SW, g->PL, g->PR, g->DW, t.ck0, t.ck1, t.cpad);
    /* index lanes are int32: planes of 2^31 elements and more take the scalar path */
    const int vector_ok = g->IH * g->IW < 2147483647L;
#if LAYOUT_NHWC
    if (!is_max) pool_nhwc_avg(x, y, NULL, g, &t, vector_ok);
    else if (ind) pool_nhwc_max_idx(x, y, ind, g, &t, vector_ok);
    else pool_nhwc_max(x, y, NULL, g, &t, vector_ok);
#else
    (void)vector_ok; /* the op layer keeps tensors below 2^31 elements */
    const hal_int OWr = HAL_CDIV(g->OW, VW) * VW;
    pool_row_tabs rt;
    /* colbuf[j] holds input column j - PL; the row pass reads up to
     * (OWr - 1)*SW + (KW - 1)*DW (+ VW for a stride-2 deinterleave) */
    rt.Wb = HAL_MAX((OWr - 1) * g->SW + (g->KW - 1) * g->DW + VW + 1, g->PL + g->IW) + VW;
    rt.colfac = (float *)hal_alloc(sizeof(float) * (size_t)OWr);
    rt.firstc = (int32_t *)hal_alloc(sizeof(int32_t) * (size_t)OWr);
    if (rt.colfac && rt.firstc) {
        for (hal_int ow = 0; ow < OWr; ow++) {
            const int in = ow < g->OW;
            rt.colfac[ow] = !in ? 1.0f : (float)(g->CIP ? t.cpad[ow] : t.ck1[ow] - t.ck0[ow]);
            rt.firstc[ow] = !in ? 0 : (int32_t)(ow * g->SW - g->PL + t.ck0[ow] * g->DW);
        }
        if (!is_max) pool_nchw_avg(x, y, NULL, g, &t, &rt);
        else if (ind) pool_nchw_max_idx(x, y, ind, g, &t, &rt);
        else pool_nchw_max(x, y, NULL, g, &t, &rt);
    }
    free(rt.colfac);
    free(rt.firstc);
#endif
    free(buf);
}

HAL_EXPORT void pool2d_max(const hal_t *x, hal_t *y, int64_t *indices, hal_int N, hal_int C, hal_int IH, hal_int IW,
                           hal_int OH, hal_int OW, hal_int KH, hal_int KW, hal_int SH, hal_int SW, hal_int PT,
                           hal_int PB, hal_int PL, hal_int PR, hal_int DH, hal_int DW, hal_int DIVISOR,
                           hal_int COUNT_INCLUDE_PAD) {
    pool_geom g = {N, C, IH, IW, OH, OW, KH, KW, SH, SW, PT, PB, PL, PR, DH, DW, DIVISOR, COUNT_INCLUDE_PAD};
    pool_run(1, x, y, indices, &g);
}

HAL_EXPORT void pool2d_avg(const hal_t *x, hal_t *y, int64_t *indices, hal_int N, hal_int C, hal_int IH, hal_int IW,
                           hal_int OH, hal_int OW, hal_int KH, hal_int KW, hal_int SH, hal_int SW, hal_int PT,
                           hal_int PB, hal_int PL, hal_int PR, hal_int DH, hal_int DW, hal_int DIVISOR,
                           hal_int COUNT_INCLUDE_PAD) {
    (void)indices;
    pool_geom g = {N, C, IH, IW, OH, OW, KH, KW, SH, SW, PT, PB, PL, PR, DH, DW, DIVISOR, COUNT_INCLUDE_PAD};
    pool_run(0, x, y, NULL, &g);
}
