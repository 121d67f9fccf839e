/* conv2d.c: direct 2-D convolution (cross-correlation) with groups, stride, dilation, padding.
 *
 * Both layouts first copy one image at a time into a zero-padded float
 * workspace, so the inner loops never test bounds and float16 is converted once:
 *
 * NCHW: the padded image is also split into stride phases,
 *   xs[ci][a][b][i][j] = x[ci][i*SH + a - PT][j*SW + b - PL]   (0 outside),
 *   with HPh = OH + ((KH-1)*DH)/SH rows and WPh = OW + ((KW-1)*DW)/SW columns,
 * so output (oh, ow) reads tap (kh, kw) at phase ((kh*DH)%SH, (kw*DW)%SW),
 * position (oh + (kh*DH)/SH) * WPh + ow + (kw*DW)/SW: a constant offset from
 * p = oh*WPh + ow for every stride and dilation. The register tile
 * (conv2d_nchw_tile.h) runs CO_BLOCK output channels x W_BLOCK vectors of p;
 * tiles follow the output rows, or run over p straight through the rows
 * ("flat") when rows are too short for whole vectors.
 *
 * NHWC: the padded image keeps NHWC; the tile (conv2d_nhwc_tile.h) runs
 * W_BLOCK output pixels x CO_BLOCK vectors of output channels, broadcasting each
 * input value. Depthwise NHWC reads the input directly (no copy): W_BLOCK
 * pixels x CO_BLOCK channel vectors per tile, bounds-checked pixels at the borders.
 *
 * Weights are repacked per call into tile order (float, zero-padded to whole tiles).
 */
#include "hal_prelude.h"

#ifndef CO_BLOCK
#define CO_BLOCK 4 /* tile height: NCHW output channels, NHWC output-channel vectors */
#endif
#ifndef W_BLOCK
#define W_BLOCK 2 /* tile width: NCHW vectors along the output row, NHWC output pixels */
#endif

#if !LAYOUT_NHWC
#define TCB 1
#include "conv2d_nchw_tile.h"
#undef TCB
#if CO_BLOCK != 1
#define TCB CO_BLOCK
#include "conv2d_nchw_tile.h"
#undef TCB
#endif
#else
#define TCV 1
#include "conv2d_nhwc_tile.h"
#undef TCV
#if CO_BLOCK != 1
#define TCV CO_BLOCK
#include "conv2d_nhwc_tile.h"
#undef TCV
#endif
#endif

/* n values to a float row (a copy, or a vector conversion from float16 or bfloat16). */
static inline void copy_row(float *restrict dst, const hal_t *restrict src, hal_int n) {
#if HAL_STORE16
    hal_int i = 0;
    for (; i + VW <= n; i += VW) vf_storef(dst + i, vf_load(src + i));
    for (; i < n; i++) dst[i] = ld(src + i);
#else
    memcpy(dst, src, sizeof(float) * (size_t)(n > 0 ? n : 0));
#endif
}

/* The wide tile when the group has enough output channels to fill most of it, else one-high tiles. */
static inline int use_wide(hal_int units) { return units >= CO_BLOCK || 2 * units > CO_BLOCK; }

#if !LAYOUT_NHWC
static int conv_nchw(const hal_t *restrict x, const hal_t *restrict w, const float *restrict bias,
                     hal_t *restrict y, hal_int N, hal_int CI, hal_int IH, hal_int IW, hal_int CO, hal_int OH,
                     hal_int OW, hal_int KH, hal_int KW, hal_int SH, hal_int SW, hal_int PT, hal_int PL,
                     hal_int DH, hal_int DW, hal_int G) {
    const hal_int cig = CI / G, cog = CO / G, ntaps = KH * KW;
    const int wide = use_wide(cog);
    const hal_int cb = wide ? CO_BLOCK : 1, ncob = HAL_CDIV(cog, cb);
    const hal_int moh = ((KH - 1) * DH) / SH, mow = ((KW - 1) * DW) / SW;
    /* the stride phases (a, b) some tap reads, at most KH row and KW column phases: only those are kept, so
     * that a stride past the window (SH * SW phases, most unread) costs no memory */
    hal_int *pa = (hal_int *)malloc(sizeof(hal_int) * (size_t)KH), *pb = (hal_int *)malloc(sizeof(hal_int) * (size_t)KW);
    hal_int na = 0, nb = 0;
    if (!pa || !pb) {
        free(pa);
        free(pb);
        return 1;
    }
    for (hal_int kh = 0; kh < KH; kh++) {
        const hal_int a = (kh * DH) % SH;
        hal_int i = 0;
        while (i < na && pa[i] != a) i++;
        if (i == na) pa[na++] = a;
    }
    for (hal_int kw = 0; kw < KW; kw++) {
        const hal_int b = (kw * DW) % SW;
        hal_int i = 0;
        while (i < nb && pb[i] != b) i++;
        if (i == nb) pb[nb++] = b;
    }
    const hal_int HPh = OH + moh, WPh = OW + mow, plane = HPh * WPh, ci_stride = na * nb * plane;
    const hal_int TW = W_BLOCK * VW, tpr = HAL_CDIV(OW, TW);
    const hal_int ntile_row = OH * tpr, ntile_flat = HAL_CDIV(OH * WPh, TW);
    const int flat = ntile_flat * 10 < ntile_row * 9; /* flat when it saves more than 10% of the lanes */
    const hal_int ntile = flat ? ntile_flat : ntile_row;
    const hal_int xs_len = CI * ci_stride + TW + WPh + VW; /* junk lanes read up to TW + WPh past the end */
    float *xs = (float *)hal_alloc(sizeof(float) * (size_t)xs_len);
    float *wp = (float *)hal_alloc(sizeof(float) * (size_t)(G * ncob * cig * ntaps * cb));
    hal_int *tapoff = (hal_int *)malloc(sizeof(hal_int) * (size_t)ntaps);
    int status = 1;
    if (!xs || !wp || !tapoff) goto done;
    status = 0;
    memset(xs, 0, sizeof(float) * (size_t)xs_len);
    for (hal_int kh = 0; kh < KH; kh++)
        for (hal_int kw = 0; kw < KW; kw++) {
            const hal_int a = (kh * DH) % SH, b = (kw * DW) % SW;
            hal_int ia = 0, ib = 0;
            while (pa[ia] != a) ia++;
            while (pb[ib] != b) ib++;
            tapoff[kh * KW + kw] = (ia * nb + ib) * plane + ((kh * DH) / SH) * WPh + (kw * DW) / SW;
        }
    const hal_int gcs = G * ncob, tasks = gcs * ntile;
#pragma omp parallel num_threads(hal_threads_for(N * OH * OW * CO * cig * ntaps / 4))
    {
#pragma omp for schedule(guided)
        for (hal_int gc = 0; gc < gcs; gc++) {
            const hal_int g = gc / ncob, cob = gc - g * ncob;
            for (hal_int ci = 0; ci < cig; ci++)
                for (hal_int t = 0; t < ntaps; t++)
                    for (hal_int k = 0; k < cb; k++) {
                        const hal_int co = cob * cb + k;
                        wp[((gc * cig + ci) * ntaps + t) * cb + k] =
                            co < cog ? ld(w + ((g * cog + co) * cig + ci) * ntaps + t) : 0.0f;
                    }
        }
        for (hal_int n = 0; n < N; n++) {
#pragma omp for schedule(guided)
            for (hal_int ca = 0; ca < CI * na; ca++) {
                const hal_int ci = ca / na, ia = ca - ci * na, a = pa[ia];
                const hal_t *src = x + (n * CI + ci) * IH * IW;
                for (hal_int i = 0; i < HPh; i++) {
                    const hal_int r = i * SH + a - PT;
                    for (hal_int ib = 0; ib < nb; ib++) {
                        const hal_int b = pb[ib];
                        float *dst = xs + ci * ci_stride + (ia * nb + ib) * plane + i * WPh;
                        if (r < 0 || r >= IH) {
                            memset(dst, 0, sizeof(float) * (size_t)WPh);
                            continue;
                        }
                        /* valid j: 0 <= j*SW + b - PL < IW */
                        const hal_int off = b - PL;
                        hal_int jlo = off < 0 ? HAL_CDIV(-off, SW) : 0;
                        hal_int jhi = IW - 1 - off < 0 ? 0 : HAL_MIN(WPh, (IW - 1 - off) / SW + 1);
                        if (jlo > jhi) jlo = jhi;
                        memset(dst, 0, sizeof(float) * (size_t)jlo);
                        const hal_t *first = src + r * IW + jlo * SW + off; /* input column of dst[jlo] */
                        if (SW == 1) copy_row(dst + jlo, first, jhi - jlo);
                        else
                            for (hal_int j = jlo; j < jhi; j++) dst[j] = ld(first + (j - jlo) * SW);
                        memset(dst + jhi, 0, sizeof(float) * (size_t)(WPh - jhi));
                    }
                }
            }
#pragma omp for schedule(guided)
            for (hal_int task = 0; task < tasks; task++) {
                const hal_int gc = task / ntile, tile = task - gc * ntile;
                const hal_int g = gc / ncob, cob = gc - g * ncob;
                const hal_int p0 = flat ? tile * TW : (tile / tpr) * WPh + (tile % tpr) * TW;
                const hal_int nco = HAL_MIN(cb, cog - cob * cb);
                const float *xg = xs + g * cig * ci_stride + p0;
                const float *wblk = wp + gc * cig * ntaps * cb;
                const float *bb = bias ? bias + g * cog + cob * cb : NULL;
                hal_t *yb = y + (n * CO + g * cog + cob * cb) * OH * OW;
                if (wide)
                    HAL_CAT(nchw_tile_, CO_BLOCK)(xg, ci_stride, cig, tapoff, ntaps, wblk, bb, nco, yb, OH * OW, p0,
                                                  WPh, OW, OH);
                else
                    nchw_tile_1(xg, ci_stride, cig, tapoff, ntaps, wblk, bb, nco, yb, OH * OW, p0, WPh, OW, OH);
            }
        }
    }
done:
    free(xs);
    free(wp);
    free(tapoff);
    free(pa);
    free(pb);
    return status;
}

#else /* NHWC */

/* Zero-padded NHWC float copy of image n: rows HPad, columns WPad. */
static inline void pad_image_nhwc(const hal_t *restrict x, float *restrict xs, hal_int n, hal_int CI, hal_int IH,
                                  hal_int IW, hal_int HPad, hal_int WPad, hal_int PT, hal_int PL) {
#pragma omp for schedule(guided)
    for (hal_int i = 0; i < HPad; i++) {
        const hal_int r = i - PT;
        float *dst = xs + i * WPad * CI;
        if (r < 0 || r >= IH) {
            memset(dst, 0, sizeof(float) * (size_t)(WPad * CI));
            continue;
        }
        /* valid columns are one contiguous run of the input row */
        const hal_int jlo = HAL_MIN(WPad, PL), jhi = HAL_MAX(jlo, HAL_MIN(WPad, IW + PL));
        memset(dst, 0, sizeof(float) * (size_t)(jlo * CI));
        copy_row(dst + jlo * CI, x + ((n * IH + r) * IW + (jlo - PL)) * CI, (jhi - jlo) * CI);
        memset(dst + jhi * CI, 0, sizeof(float) * (size_t)((WPad - jhi) * CI));
    }
}

/* One depthwise output pixel, channels c0 .. c0 + nco (xn, wb, bb, yo already offset
 * by c0), taps outside the input skipped. */
static inline void dw_pixel(const hal_t *restrict xn, const float *restrict wb, hal_int Cw,
                            const float *restrict bb, hal_int nco, hal_t *restrict yo, hal_int IW, hal_int C,
                            hal_int KW, hal_int ihb, hal_int kh0, hal_int kh1, hal_int iwb, hal_int DH, hal_int DW) {
    for (hal_int c = 0; c < nco; c += VW) {
        const hal_int cnt = HAL_MIN(VW, nco - c);
        vf acc = bb ? vf_loadf_part(bb + c, cnt) : vf_zero();
        for (hal_int kh = kh0; kh < kh1; kh++)
            for (hal_int kw = 0; kw < KW; kw++) {
                const hal_int iw = iwb + kw * DW;
                if (iw < 0 || iw >= IW) continue;
                const hal_t *p = xn + ((ihb + kh * DH) * IW + iw) * C + c;
                const vf xv = cnt == VW ? vf_load(p) : vf_load_fill(p, cnt, 0.0f);
                acc = vf_fma(xv, vf_loadf(wb + (kh * KW + kw) * Cw + c), acc);
            }
        if (cnt == VW) vf_store(yo + c, acc);
        else vf_store_part(yo + c, acc, cnt);
    }
}

/* Depthwise NHWC straight from the input (a padded copy would double the memory
 * traffic of this memory-bound op): tiles for interior pixels, a bounds-checked
 * loop (still vectors along C) for the border pixels. */
static int dw_nhwc(const hal_t *restrict x, const hal_t *restrict w, const float *restrict bias, hal_t *restrict y,
                   hal_int N, hal_int C, hal_int IH, hal_int IW, hal_int OH, hal_int OW, hal_int KH, hal_int KW,
                   hal_int SH, hal_int SW, hal_int PT, hal_int PL, hal_int DH, hal_int DW) {
    const hal_int ntaps = KH * KW;
    const int wide = use_wide(HAL_CDIV(C, VW));
    const hal_int cbw = (wide ? CO_BLOCK : 1) * VW, ncb = HAL_CDIV(C, cbw), Cw = ncb * cbw;
    const int dw3 = KW == 3 && SW == 1 && DW == 1;
    /* interior outputs: every tap column inside [0, IW) */
    const hal_int owa = HAL_MIN(OW, HAL_CDIV(PL, SW));
    const hal_int span = IW - 1 - (KW - 1) * DW + PL;
    const hal_int owb = HAL_MAX(owa, span < 0 ? 0 : HAL_MIN(OW, span / SW + 1));
    float *wp = (float *)hal_alloc(sizeof(float) * (size_t)(ntaps * Cw));
    hal_int *tapw = (hal_int *)malloc(sizeof(hal_int) * (size_t)KW);
    int status = 1;
    if (!wp || !tapw) goto done;
    status = 0;
    for (hal_int t = 0; t < ntaps; t++)
        for (hal_int c = 0; c < Cw; c++) wp[t * Cw + c] = c < C ? ld(w + c * ntaps + t) : 0.0f;
    for (hal_int kw = 0; kw < KW; kw++) tapw[kw] = kw * DW * C;
    const hal_int tasks = N * OH * ncb;
#pragma omp parallel for schedule(guided) num_threads(hal_threads_for(N * OH * OW * C * ntaps / 4))
    for (hal_int task = 0; task < tasks; task++) {
        const hal_int r = task / ncb, cb = task - r * ncb, n = r / OH, oh = r - n * OH;
        const hal_int c0 = cb * cbw, nco = HAL_MIN(cbw, C - c0), ihb = oh * SH - PT;
        /* valid kernel rows */
        hal_int kh0 = 0, kh1 = KH;
        while (kh0 < KH && ihb + kh0 * DH < 0) kh0++;
        while (kh1 > kh0 && ihb + (kh1 - 1) * DH >= IH) kh1--;
        const hal_t *xn = x + n * IH * IW * C;
        hal_t *yrow = y + (n * OH + oh) * OW * C + c0;
        const float *bb = bias ? bias + c0 : NULL;
        const float *wb = wp + c0;
        hal_int ow = 0;
        for (; ow < owa; ow++)
            dw_pixel(xn + c0, wb, Cw, bb, nco, yrow + ow * C, IW, C, KW, ihb, kh0, kh1, ow * SW - PL, DH, DW);
        /* tiles start at the first valid kernel row (kh0), with the weights offset to match */
        const hal_int nkh = kh1 - kh0;
        const float *wk = wb + kh0 * KW * Cw;
        for (; ow + W_BLOCK <= owb; ow += W_BLOCK) {
            const hal_t *xc = xn + ((ihb + kh0 * DH) * IW + ow * SW - PL) * C + c0;
            if (dw3 && wide)
                HAL_CAT(dw3_nhwc_tile_, CO_BLOCK)(xc, DH * IW * C, C, 0, nkh, wk, Cw, bb, nco, yrow + ow * C);
            else if (dw3)
                dw3_nhwc_tile_1(xc, DH * IW * C, C, 0, nkh, wk, Cw, bb, nco, yrow + ow * C);
            else if (wide)
                HAL_CAT(dw_nhwc_tile_, CO_BLOCK)(xc, DH * IW * C, SW * C, tapw, KW, 0, nkh, wk, Cw, bb, nco,
                                                 yrow + ow * C, C);
            else
                dw_nhwc_tile_1(xc, DH * IW * C, SW * C, tapw, KW, 0, nkh, wk, Cw, bb, nco, yrow + ow * C, C);
        }
        /* the right border and the last interior pixels short of a whole tile */
        for (; ow < OW; ow++)
            dw_pixel(xn + c0, wb, Cw, bb, nco, yrow + ow * C, IW, C, KW, ihb, kh0, kh1, ow * SW - PL, DH, DW);
    }
done:
    free(wp);
    free(tapw);
    return status;
}

static int conv_nhwc(const hal_t *restrict x, const hal_t *restrict w, const float *restrict bias,
                     hal_t *restrict y, hal_int N, hal_int CI, hal_int IH, hal_int IW, hal_int CO, hal_int OH,
                     hal_int OW, hal_int KH, hal_int KW, hal_int SH, hal_int SW, hal_int PT, hal_int PL,
                     hal_int DH, hal_int DW, hal_int G) {
    const hal_int cig = CI / G, cog = CO / G, ntaps = KH * KW;
    if (cig == 1 && cog == 1) return dw_nhwc(x, w, bias, y, N, CI, IH, IW, OH, OW, KH, KW, SH, SW, PT, PL, DH, DW);
    /* the padded copy spans the columns a row's whole tiles read, junk lanes included; where those lanes
     * would more than double it (a stride past the input), only what the windows read, and a partial last
     * tile of a row runs pixel by pixel below */
    const hal_int PB = W_BLOCK, tpr = HAL_CDIV(OW, PB), OWr = tpr * PB;
    const hal_int WReach = (OW - 1) * SW + (KW - 1) * DW + 1;
    const int lean = (OWr - OW) * SW > WReach;
    const hal_int HPad = (OH - 1) * SH + (KH - 1) * DH + 1, WPad = lean ? WReach : WReach + (OWr - OW) * SW;
    const int wide = use_wide(HAL_CDIV(cog, VW));
    const hal_int cbw = (wide ? CO_BLOCK : 1) * VW; /* output channels per tile */
    const hal_int ncob = HAL_CDIV(cog, cbw);
    float *xs = (float *)hal_alloc(sizeof(float) * (size_t)(HPad * WPad * CI));
    float *wp = (float *)hal_alloc(sizeof(float) * (size_t)(G * ncob * ntaps * cig * cbw));
    hal_int *tapoff = (hal_int *)malloc(sizeof(hal_int) * (size_t)ntaps);
    int status = 1;
    if (!xs || !wp || !tapoff) goto done;
    status = 0;
    for (hal_int kh = 0; kh < KH; kh++)
        for (hal_int kw = 0; kw < KW; kw++) tapoff[kh * KW + kw] = (kh * DH * WPad + kw * DW) * CI;
    const hal_int gcs = G * ncob, tasks = gcs * OH * tpr;
#pragma omp parallel num_threads(hal_threads_for(N * OH * OW * CO * cig * ntaps / 4))
    {
#pragma omp for schedule(guided)
        for (hal_int gc = 0; gc < gcs; gc++) {
            const hal_int g = gc / ncob, cob = gc - g * ncob;
            for (hal_int t = 0; t < ntaps; t++)
                for (hal_int ci = 0; ci < cig; ci++)
                    for (hal_int j = 0; j < cbw; j++) {
                        const hal_int co = cob * cbw + j;
                        wp[((gc * ntaps + t) * cig + ci) * cbw + j] =
                            co < cog ? ld(w + ((g * cog + co) * cig + ci) * ntaps + t) : 0.0f;
                    }
        }
        for (hal_int n = 0; n < N; n++) {
            pad_image_nhwc(x, xs, n, CI, IH, IW, HPad, WPad, PT, PL);
#pragma omp for schedule(guided)
            for (hal_int task = 0; task < tasks; task++) {
                const hal_int gc = task / (OH * tpr), pt = task - gc * (OH * tpr);
                const hal_int oh = pt / tpr, ow0 = (pt - oh * tpr) * PB, npix = HAL_MIN(PB, OW - ow0);
                const float *xrow = xs + (oh * SH * WPad + ow0 * SW) * CI;
                const hal_int g = gc / ncob, cob = gc - g * ncob, co0 = g * cog + cob * cbw;
                const hal_int nco = HAL_MIN(cbw, cog - cob * cbw);
                const float *bb = bias ? bias + co0 : NULL;
                const float *wblk = wp + gc * ntaps * cig * cbw;
                hal_t *yt = y + ((n * OH + oh) * OW + ow0) * CO + co0;
                /* a tile: W_BLOCK pixels SW * CI apart (a partial one's junk lanes inside the copy); lean, a
                 * partial tile's pixels each alone, every lane reading it (pixel stride 0), one stored */
                const int whole = npix == PB || !lean;
                const hal_int runs = whole ? 1 : npix, pixstride = whole ? SW * CI : 0;
                for (hal_int q = 0; q < runs; q++) {
                    const float *xq = xrow + g * cig + (whole ? 0 : q * SW * CI);
                    hal_t *yq = yt + (whole ? 0 : q * CO);
                    const hal_int nq = whole ? npix : 1;
                    if (wide)
                        HAL_CAT(nhwc_tile_, CO_BLOCK)(xq, pixstride, tapoff, ntaps, cig, wblk, bb, nco, yq, CO, nq);
                    else
                        nhwc_tile_1(xq, pixstride, tapoff, ntaps, cig, wblk, bb, nco, yq, CO, nq);
                }
            }
        }
    }
done:
    free(xs);
    free(wp);
    free(tapoff);
    return status;
}
#endif

/* 0, or 1 where a scratch allocation failed (nothing written; the backend raises OutOfMemory) */
HAL_EXPORT int conv2d(const hal_t *x, const hal_t *w, const float *bias, hal_t *y, hal_int N, hal_int CI,
                      hal_int IH, hal_int IW, hal_int CO, hal_int OH, hal_int OW, hal_int KH, hal_int KW, hal_int SH,
                      hal_int SW, hal_int PT, hal_int PL, hal_int DH, hal_int DW, hal_int G) {
#if LAYOUT_NHWC
    return conv_nhwc(x, w, bias, y, N, CI, IH, IW, CO, OH, OW, KH, KW, SH, SW, PT, PL, DH, DW, G);
#else
    return conv_nchw(x, w, bias, y, N, CI, IH, IW, CO, OH, OW, KH, KW, SH, SW, PT, PL, DH, DW, G);
#endif
}
