/* adaptive_pool2d.c: adaptive max and average pooling (adaptive_pool2d_max, adaptive_pool2d_avg).
 *
 * Bins: start = (i * In) / Out, end = ((i + 1) * In + Out - 1) / Out (integer math).
 *
 * NCHW is separable: for one output row, a column pass reduces the bin's input
 * rows for every input column (vectors along W, contiguous), then a short scalar
 * pass reduces each bin's columns. For max with indices the column pass keeps,
 * per column, the row its scan selected; the row pass then picks the tap the
 * row-major scan would have picked (see merge_max_idx).
 * Global pooling (1x1 output) without indices reduces each contiguous plane.
 * NHWC runs C_BLOCK channel vectors per step over the bin's taps.
 */
#include "hal_prelude.h"

#ifndef W_BLOCK
#define W_BLOCK 2 /* NCHW: vectors per step of the column pass */
#endif
#ifndef C_BLOCK
#define C_BLOCK 2 /* NHWC: channel vectors per step */
#endif

static inline hal_int bin_lo(hal_int i, hal_int in, hal_int out) { return (i * in) / out; }
static inline hal_int bin_hi(hal_int i, hal_int in, hal_int out) { return ((i + 1) * in + out - 1) / out; }

/* ------------------------------------------------------------------------ */
/* NCHW                                                                     */
/* ------------------------------------------------------------------------ */

/* NB vectors of columns iw .. iw + NB*VW reduced over rows h0 .. h1. */
HAL_INLINE void column_block(const int MAX, const int IDX, const int NB, const hal_t *restrict xp, hal_int IW,
                             hal_int h0, hal_int h1, hal_int iw, float *restrict colv, int32_t *restrict colr,
                             hal_int count) {
    vf acc[NB];
    vi br[NB];
    vm nanm[NB];
    for (int b = 0; b < NB; b++) {
        acc[b] = MAX ? vf_set1(-INFINITY) : vf_zero();
        br[b] = vi_set1((int)h0);
        nanm[b] = vm_none();
    }
    for (hal_int ih = h0; ih < h1; ih++) {
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

HAL_INLINE void column_pass(const int MAX, const int IDX, const hal_t *restrict xp, hal_int IW, hal_int h0,
                            hal_int h1, float *restrict colv, int32_t *restrict colr) {
    hal_int iw = 0;
    for (; iw + W_BLOCK * VW <= IW; iw += W_BLOCK * VW)
        column_block(MAX, IDX, W_BLOCK, xp, IW, h0, h1, iw, colv, colr, VW);
    for (; iw + VW <= IW; iw += VW) column_block(MAX, IDX, 1, xp, IW, h0, h1, iw, colv, colr, VW);
    if (!IDX && iw < IW) { /* masked last vector; colv has VW of slack */
        column_block(MAX, 0, 1, xp, IW, h0, h1, iw, colv, colr, IW - iw);
        iw = IW;
    }
    for (; iw < IW; iw++) {
        float best = MAX ? -INFINITY : 0.0f;
        int32_t r = (int32_t)h0;
        for (hal_int ih = h0; ih < h1; ih++) {
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
}

/* Columns w0 .. w1 of the column pass, combined as the row-major scan
 * "take when v > best || isnan(v)" would: with NaN present the last NaN wins
 * (largest row, then largest column), else the maximum with the smallest row,
 * then the smallest column. Column c carries (value, row its scan picked). */
static inline void merge_max_idx(const float *colv, const int32_t *colr, hal_int w0, hal_int w1, hal_int h0,
                                 hal_int IW, float *out, int64_t *idx) {
    float best = -INFINITY;
    hal_int br = h0, bc = w0;
    for (hal_int c = w0; c < w1; c++) {
        const float v = colv[c];
        const hal_int r = colr[c];
        int take;
        if (v != v) take = !(best != best) || r >= br;
        else take = !(best != best) && (v > best || (v == best && r < br));
        if (take) {
            best = v;
            br = r;
            bc = c;
        }
    }
    *out = best;
    *idx = br * IW + bc;
}

HAL_INLINE void adaptive_nchw(const int MAX, const int IDX, const hal_t *restrict x, hal_t *restrict y,
                              int64_t *restrict ind, hal_int N, hal_int C, hal_int IH, hal_int IW, hal_int OH,
                              hal_int OW) {
    const hal_int rows = N * C * OH;
#pragma omp parallel num_threads(hal_threads_for(N * C * IH * IW))
    {
        float *colv = (float *)hal_alloc(sizeof(float) * (size_t)(IW + VW));
        int32_t *colr = (int32_t *)hal_alloc(sizeof(int32_t) * (size_t)(IW + VW));
#pragma omp for schedule(guided)
        for (hal_int r = 0; r < rows; r++) {
            if (!colv || !colr) continue;
            const hal_int pl = r / OH, oh = r - pl * OH;
            const hal_int h0 = bin_lo(oh, IH, OH), h1 = bin_hi(oh, IH, OH);
            column_pass(MAX, IDX, x + pl * IH * IW, IW, h0, h1, colv, colr);
            hal_t *yr = y + r * OW;
            for (hal_int ow = 0; ow < OW; ow++) {
                const hal_int w0 = bin_lo(ow, IW, OW), w1 = bin_hi(ow, IW, OW);
                if (MAX && IDX) {
                    float v;
                    merge_max_idx(colv, colr, w0, w1, h0, IW, &v, ind + r * OW + ow);
                    st(yr + ow, v);
                } else if (MAX) {
                    float best = -INFINITY;
                    for (hal_int c = w0; c < w1; c++)
                        if (colv[c] > best || colv[c] != colv[c]) best = colv[c];
                    st(yr + ow, best);
                } else {
                    float sum = 0.0f;
                    for (hal_int c = w0; c < w1; c++) sum += colv[c];
                    st(yr + ow, sum / (float)((h1 - h0) * (w1 - w0)));
                }
            }
        }
        free(colv);
        free(colr);
    }
}

/* Global pooling without indices: each plane is one contiguous reduction
 * (W_BLOCK vector accumulators, a masked tail, one horizontal reduction). */
HAL_INLINE void global_nchw(const int MAX, const hal_t *restrict x, hal_t *restrict y, hal_int planes, hal_int HW) {
    const float neutral = MAX ? -INFINITY : 0.0f;
#pragma omp parallel for schedule(guided) num_threads(hal_threads_for(planes * HW))
    for (hal_int pl = 0; pl < planes; pl++) {
        const hal_t *p = x + pl * HW;
        vf acc[W_BLOCK];
        vm nanm = vm_none();
        for (int b = 0; b < W_BLOCK; b++) acc[b] = vf_set1(neutral);
        hal_int i = 0;
        for (; i + W_BLOCK * VW <= HW; i += W_BLOCK * VW) {
#pragma GCC unroll 8
            for (int b = 0; b < W_BLOCK; b++) {
                const vf v = vf_load(p + i + b * VW);
                if (MAX) {
                    acc[b] = vf_max(v, acc[b]);
                    nanm = vm_or(nanm, vf_isnan(v));
                } else {
                    acc[b] = vf_add(acc[b], v);
                }
            }
        }
        for (; i < HW; i += VW) {
            const vf v = i + VW <= HW ? vf_load(p + i) : vf_load_fill(p + i, HW - i, neutral);
            if (MAX) {
                acc[0] = vf_max(v, acc[0]);
                nanm = vm_or(nanm, vf_isnan(v));
            } else {
                acc[0] = vf_add(acc[0], v);
            }
        }
        for (int b = 1; b < W_BLOCK; b++) acc[0] = MAX ? vf_max(acc[b], acc[0]) : vf_add(acc[b], acc[0]);
        if (MAX) st(y + pl, vm_any(nanm) ? NAN : vf_hmax(acc[0]));
        else st(y + pl, vf_hsum(acc[0]) / (float)HW);
    }
}

/* NHWC global pooling without indices: a task is one image (or a channel range
 * of one, when images are fewer than threads) and walks its pixels in memory
 * order, two at a time, into per-channel float accumulators that stay in L1;
 * reading whole pixel rows keeps the DRAM stream sequential. */
HAL_INLINE void global_nhwc(const int MAX, const hal_t *restrict x, hal_t *restrict y, hal_int N, hal_int C,
                            hal_int HW) {
    const float neutral = MAX ? -INFINITY : 0.0f;
    const int nt = hal_threads_for(N * C * HW);
    /* split channels only when there are fewer images than threads; ranges of whole vectors */
    const hal_int parts = N >= nt ? 1 : HAL_MIN(HAL_CDIV(nt, N), HAL_MAX(1, C / (4 * VW)));
    const hal_int span = HAL_CDIV(HAL_CDIV(C, parts), VW) * VW, tasks = N * parts;
#pragma omp parallel num_threads(nt)
    {
        float *acc = (float *)hal_alloc(sizeof(float) * (size_t)(span + VW));
        unsigned char *nan = (unsigned char *)hal_alloc((size_t)(span + VW));
#pragma omp for schedule(guided)
        for (hal_int t = 0; t < tasks; t++) {
            if (!acc || !nan) continue;
            const hal_int n = t / parts, c0 = (t - n * parts) * span, c1 = HAL_MIN(C, c0 + span), w = c1 - c0;
            if (w <= 0) continue;
            const hal_t *xn = x + n * HW * C + c0;
            hal_int c;
            for (c = 0; c < w; c++) {
                acc[c] = neutral;
                nan[c] = 0;
            }
            vm anynan = vm_none();
            hal_int i = 0;
            for (; i + 2 <= HW; i += 2) {
                const hal_t *p = xn + i * C;
                for (c = 0; c + VW <= w; c += VW) {
                    const vf u = vf_load(p + c), v = vf_load(p + C + c);
                    if (MAX) {
                        vf_storef(acc + c, vf_max(u, vf_max(v, vf_loadf(acc + c))));
                        anynan = vm_or(anynan, vm_or(vf_isnan(u), vf_isnan(v)));
                    } else {
                        vf_storef(acc + c, vf_add(vf_loadf(acc + c), vf_add(u, v)));
                    }
                }
                for (; c < w; c++) {
                    const float u = ld(p + c), v = ld(p + C + c);
                    if (MAX) {
                        if (u != u || v != v) nan[c] = 1;
                        acc[c] = fmaxf(acc[c], fmaxf(u, v));
                    } else {
                        acc[c] += u + v;
                    }
                }
            }
            for (; i < HW; i++) {
                const hal_t *p = xn + i * C;
                for (c = 0; c < w; c++) {
                    const float u = ld(p + c);
                    if (MAX) {
                        if (u != u) nan[c] = 1;
                        acc[c] = fmaxf(acc[c], u);
                    } else {
                        acc[c] += u;
                    }
                }
            }
            hal_t *yo = y + n * C + c0;
            if (MAX && vm_any(anynan)) /* rare: find the channels that saw a NaN */
                for (c = 0; c < w; c++)
                    for (hal_int i2 = 0; i2 < HW && !nan[c]; i2++)
                        if (ld(xn + i2 * C + c) != ld(xn + i2 * C + c)) nan[c] = 1;
            for (c = 0; c < w; c++) st(yo + c, MAX ? (nan[c] ? NAN : acc[c]) : acc[c] / (float)HW);
        }
        free(acc);
        free(nan);
    }
}

/* ------------------------------------------------------------------------ */
/* NHWC                                                                     */
/* ------------------------------------------------------------------------ */

HAL_INLINE void bin_block_nhwc(const int MAX, const int IDX, const int NB, const hal_t *restrict xn,
                               hal_t *restrict yo, int64_t *restrict io, hal_int c, hal_int C, hal_int IW,
                               hal_int h0, hal_int h1, hal_int w0, hal_int w1) {
    vf acc[NB];
    vi bi[NB];
    vm nanm[NB];
    for (int b = 0; b < NB; b++) {
        acc[b] = MAX ? vf_set1(-INFINITY) : vf_zero();
        bi[b] = vi_set1((int)(h0 * IW + w0));
        nanm[b] = vm_none();
    }
    for (hal_int ih = h0; ih < h1; ih++) {
        for (hal_int iw = w0; iw < w1; iw++) {
            const hal_int pix = ih * IW + iw;
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
    const vf count = vf_set1((float)((h1 - h0) * (w1 - w0)));
    for (int b = 0; b < NB; b++) {
        if (MAX && !IDX) acc[b] = vf_blend(acc[b], vf_set1(NAN), nanm[b]);
        if (!MAX) acc[b] = vf_div(acc[b], count);
        vf_store(yo + c + b * VW, acc[b]);
        if (IDX) vi_store_i64(io + c + b * VW, bi[b]);
    }
}

HAL_INLINE void bin_scalar_nhwc(const int MAX, const int IDX, const hal_t *restrict xn, hal_t *restrict yo,
                                int64_t *restrict io, hal_int c, hal_int C, hal_int IW, hal_int h0, hal_int h1,
                                hal_int w0, hal_int w1) {
    float best = MAX ? -INFINITY : 0.0f;
    hal_int bi = h0 * IW + w0;
    for (hal_int ih = h0; ih < h1; ih++)
        for (hal_int iw = w0; iw < w1; iw++) {
            const float v = ld(xn + (ih * IW + iw) * C + c);
            if (!MAX) {
                best += v;
            } else if (v > best || v != v) {
                best = v;
                bi = ih * IW + iw;
            }
        }
    st(yo + c, MAX ? best : best / (float)((h1 - h0) * (w1 - w0)));
    if (IDX) io[c] = bi;
}

HAL_INLINE void adaptive_nhwc(const int MAX, const int IDX, const hal_t *restrict x, hal_t *restrict y,
                              int64_t *restrict ind, hal_int N, hal_int C, hal_int IH, hal_int IW, hal_int OH,
                              hal_int OW) {
    /* tasks: (image, output row, channel chunk), so a global pool of one image still splits */
    const hal_int chunk = HAL_MAX(C_BLOCK * VW, 64), nch = HAL_CDIV(C, chunk), tasks = N * OH * nch;
#pragma omp parallel for schedule(guided) num_threads(hal_threads_for(N * C * IH * IW))
    for (hal_int t = 0; t < tasks; t++) {
        const hal_int r = t / nch, ch = t - r * nch, n = r / OH, oh = r - n * OH;
        const hal_int c0 = ch * chunk, c1 = HAL_MIN(C, c0 + chunk);
        const hal_int h0 = bin_lo(oh, IH, OH), h1 = bin_hi(oh, IH, OH);
        const hal_t *xn = x + n * IH * IW * C;
        for (hal_int ow = 0; ow < OW; ow++) {
            const hal_int w0 = bin_lo(ow, IW, OW), w1 = bin_hi(ow, IW, OW), o = (r * OW + ow) * C;
            hal_t *yo = y + o;
            int64_t *io = IDX ? ind + o : NULL;
            hal_int c = c0;
            for (; c + C_BLOCK * VW <= c1; c += C_BLOCK * VW)
                bin_block_nhwc(MAX, IDX, C_BLOCK, xn, yo, io, c, C, IW, h0, h1, w0, w1);
            for (; c + VW <= c1; c += VW) bin_block_nhwc(MAX, IDX, 1, xn, yo, io, c, C, IW, h0, h1, w0, w1);
            for (; c < c1; c++) bin_scalar_nhwc(MAX, IDX, xn, yo, io, c, C, IW, h0, h1, w0, w1);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* entry points                                                             */
/* ------------------------------------------------------------------------ */

static void adaptive_run(int is_max, const hal_t *x, hal_t *y, int64_t *ind, hal_int N, hal_int C, hal_int IH,
                         hal_int IW, hal_int OH, hal_int OW) {
#if LAYOUT_NHWC
    if (OH == 1 && OW == 1 && !ind) {
        if (is_max) global_nhwc(1, x, y, N, C, IH * IW);
        else global_nhwc(0, x, y, N, C, IH * IW);
    } else if (!is_max) adaptive_nhwc(0, 0, x, y, NULL, N, C, IH, IW, OH, OW);
    else if (ind) adaptive_nhwc(1, 1, x, y, ind, N, C, IH, IW, OH, OW);
    else adaptive_nhwc(1, 0, x, y, NULL, N, C, IH, IW, OH, OW);
#else
    if (OH == 1 && OW == 1 && !ind) {
        if (is_max) global_nchw(1, x, y, N * C, IH * IW);
        else global_nchw(0, x, y, N * C, IH * IW);
    } else if (!is_max) {
        adaptive_nchw(0, 0, x, y, NULL, N, C, IH, IW, OH, OW);
    } else if (ind) {
        adaptive_nchw(1, 1, x, y, ind, N, C, IH, IW, OH, OW);
    } else {
        adaptive_nchw(1, 0, x, y, NULL, N, C, IH, IW, OH, OW);
    }
#endif
}

HAL_EXPORT void adaptive_pool2d_max(const hal_t *x, hal_t *y, int64_t *indices, hal_int N, hal_int C, hal_int IH,
                                    hal_int IW, hal_int OH, hal_int OW) {
    adaptive_run(1, x, y, indices, N, C, IH, IW, OH, OW);
}

HAL_EXPORT void adaptive_pool2d_avg(const hal_t *x, hal_t *y, int64_t *indices, hal_int N, hal_int C, hal_int IH,
                                    hal_int IW, hal_int OH, hal_int OW) {
    (void)indices;
    adaptive_run(0, x, y, NULL, N, C, IH, IW, OH, OW);
}
