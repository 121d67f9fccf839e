/* conv2d_nhwc_tile.h: the NHWC register tiles, included by conv2d.c once per tile height TCV.
 *
 * Dense/grouped: W_BLOCK output pixels x TCV vectors of output channels; per
 * (tap, input channel) TCV weight vectors are loaded and each pixel's input
 * value is broadcast into TCV FMAs.
 * Depthwise (direct, no padded copy): W_BLOCK pixels x TCV channel vectors of
 * interior pixels (every tap column inside the input), rows kh0 .. kh1 only.
 */
static void HAL_CAT(nhwc_tile_, TCV)(const float *restrict xt0, hal_int pixstride, const hal_int *restrict tapoff,
                                     hal_int ntaps, hal_int cig, const float *restrict wblk,
                                     const float *restrict bias, hal_int nco, hal_t *restrict yt, hal_int CO,
                                     hal_int npix) {
    vf acc[W_BLOCK][TCV];
#pragma GCC unroll 16
    for (int v = 0; v < TCV; v++) {
        /* a vector load: lane-by-lane stores then a vector load would stall store forwarding */
        const vf b0 = bias ? vf_loadf_part(bias + v * VW, nco - v * VW) : vf_zero();
#pragma GCC unroll 8
        for (int p = 0; p < W_BLOCK; p++) acc[p][v] = b0;
    }
    for (hal_int t = 0; t < ntaps; t++) {
        const float *xt = xt0 + tapoff[t];
        const float *wt = wblk + t * cig * (TCV * VW);
        for (hal_int ci = 0; ci < cig; ci++) {
            vf wv[TCV];
#pragma GCC unroll 16
            for (int v = 0; v < TCV; v++) wv[v] = vf_loadf(wt + ci * (TCV * VW) + v * VW);
#pragma GCC unroll 8
            for (int p = 0; p < W_BLOCK; p++) {
                const vf xb = vf_set1(xt[p * pixstride + ci]);
#pragma GCC unroll 16
                for (int v = 0; v < TCV; v++) acc[p][v] = vf_fma(xb, wv[v], acc[p][v]);
            }
        }
    }
#pragma GCC unroll 8
    for (int p = 0; p < W_BLOCK; p++) {
        if (p >= npix) break;
#pragma GCC unroll 16
        for (int v = 0; v < TCV; v++) {
            const hal_int c = v * VW;
            if (c + VW <= nco) vf_store(yt + p * CO + c, acc[p][v]);
            else if (c < nco) vf_store_part(yt + p * CO + c, acc[p][v], nco - c);
        }
    }
}

/* channel vector v of a depthwise block: whole, partial (masked) or absent */
#define DW_LOAD(p, v, nco) \
    ((v) * VW + VW <= (nco) ? vf_load(p) : vf_load_fill((p), (nco) - (v) * VW, 0.0f))

/* Any tap geometry: W_BLOCK pixels, the taps at xc + kh*rowstride + tapw[kw]. */
static void HAL_CAT(dw_nhwc_tile_, TCV)(const hal_t *restrict xc, hal_int rowstride, hal_int pixstride,
                                        const hal_int *restrict tapw, hal_int KW, hal_int kh0, hal_int kh1,
                                        const float *restrict wblk, hal_int Cw, const float *restrict bias,
                                        hal_int nco, hal_t *restrict yt, hal_int C) {
    vf acc[W_BLOCK][TCV];
#pragma GCC unroll 16
    for (int v = 0; v < TCV; v++) {
        const vf b0 = bias ? vf_loadf_part(bias + v * VW, nco - v * VW) : vf_zero();
#pragma GCC unroll 8
        for (int p = 0; p < W_BLOCK; p++) acc[p][v] = b0;
    }
    for (hal_int kh = kh0; kh < kh1; kh++) {
        for (hal_int kw = 0; kw < KW; kw++) {
            const hal_t *xt = xc + kh * rowstride + tapw[kw];
            const float *wt = wblk + (kh * KW + kw) * Cw;
#pragma GCC unroll 16
            for (int v = 0; v < TCV; v++) {
                if (v * VW >= nco) break;
                const vf wv = vf_loadf(wt + v * VW);
#pragma GCC unroll 8
                for (int p = 0; p < W_BLOCK; p++)
                    acc[p][v] = vf_fma(DW_LOAD(xt + p * pixstride + v * VW, v, nco), wv, acc[p][v]);
            }
        }
    }
#pragma GCC unroll 8
    for (int p = 0; p < W_BLOCK; p++)
#pragma GCC unroll 16
        for (int v = 0; v < TCV; v++) {
            const hal_int c = v * VW;
            if (c + VW <= nco) vf_store(yt + p * C + c, acc[p][v]);
            else if (c < nco) vf_store_part(yt + p * C + c, acc[p][v], nco - c);
        }
}

/* 3 taps wide, stride 1, dilation 1 along W: per kernel row, input column j of
 * the tile feeds output pixels j, j-1, j-2 through taps 0, 1, 2, so each input
 * vector is loaded once and the row's three weight vectors stay in registers
 * (W_BLOCK + 2 loads per 3 * W_BLOCK FMAs instead of one load per FMA). */
static void HAL_CAT(dw3_nhwc_tile_, TCV)(const hal_t *restrict xc, hal_int rowstride, hal_int C, hal_int kh0,
                                         hal_int kh1, const float *restrict wblk, hal_int Cw,
                                         const float *restrict bias, hal_int nco, hal_t *restrict yt) {
    vf acc[W_BLOCK][TCV];
#pragma GCC unroll 16
    for (int v = 0; v < TCV; v++) {
        const vf b0 = bias ? vf_loadf_part(bias + v * VW, nco - v * VW) : vf_zero();
#pragma GCC unroll 8
        for (int p = 0; p < W_BLOCK; p++) acc[p][v] = b0;
    }
    for (hal_int kh = kh0; kh < kh1; kh++) {
        const hal_t *xr = xc + kh * rowstride;
        const float *wr = wblk + kh * 3 * Cw;
#pragma GCC unroll 16
        for (int v = 0; v < TCV; v++) {
            if (v * VW >= nco) break;
            const vf w0 = vf_loadf(wr + v * VW), w1 = vf_loadf(wr + Cw + v * VW), w2 = vf_loadf(wr + 2 * Cw + v * VW);
#pragma GCC unroll 10
            for (int j = 0; j < W_BLOCK + 2; j++) {
                const vf xv = DW_LOAD(xr + j * C + v * VW, v, nco);
                if (j < W_BLOCK) acc[j][v] = vf_fma(xv, w0, acc[j][v]);
                if (j >= 1 && j - 1 < W_BLOCK) acc[j - 1][v] = vf_fma(xv, w1, acc[j - 1][v]);
                if (j >= 2) acc[j - 2][v] = vf_fma(xv, w2, acc[j - 2][v]);
            }
        }
    }
#pragma GCC unroll 8
    for (int p = 0; p < W_BLOCK; p++)
#pragma GCC unroll 16
        for (int v = 0; v < TCV; v++) {
            const hal_int c = v * VW;
            if (c + VW <= nco) vf_store(yt + p * C + c, acc[p][v]);
            else if (c < nco) vf_store_part(yt + p * C + c, acc[p][v], nco - c);
        }
}
#undef DW_LOAD
