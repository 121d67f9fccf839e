/* conv2d_nchw_tile.h: the NCHW register tile, included by conv2d.c once per tile height TCB.
 *
 * A tile is TCB output channels x W_BLOCK vectors of consecutive output positions
 * p of the phase-split padded input (p = oh * WPh + ow, see conv2d.c), so every
 * tap is one unaligned vector load at a constant offset (tapoff) and TCB
 * broadcast-FMAs per loaded vector. Lanes whose p is past the row (ow >= OW) or
 * past the last row are computed on padding and not stored.
 */
static void HAL_CAT(nchw_tile_, TCB)(const float *restrict xg, hal_int ci_stride, hal_int cig,
                                     const hal_int *restrict tapoff, hal_int ntaps, const float *restrict wblk,
                                     const float *restrict bias, hal_int nco, hal_t *restrict yb, hal_int OHOW,
                                     hal_int p0, hal_int WPh, hal_int OW, hal_int OH) {
    vf acc[TCB][W_BLOCK];
#pragma GCC unroll 16
    for (int k = 0; k < TCB; k++) {
        const vf b0 = vf_set1(bias && k < nco ? bias[k] : 0.0f);
#pragma GCC unroll 8
        for (int b = 0; b < W_BLOCK; b++) acc[k][b] = b0;
    }
    for (hal_int ci = 0; ci < cig; ci++) {
        const float *xc = xg + ci * ci_stride;
        const float *wc = wblk + ci * ntaps * TCB;
        for (hal_int t = 0; t < ntaps; t++) {
            const float *xt = xc + tapoff[t];
            const float *wt = wc + t * TCB;
            vf xv[W_BLOCK];
#pragma GCC unroll 8
            for (int b = 0; b < W_BLOCK; b++) xv[b] = vf_loadf(xt + b * VW);
#pragma GCC unroll 16
            for (int k = 0; k < TCB; k++) {
                const vf wk = vf_set1(wt[k]);
#pragma GCC unroll 8
                for (int b = 0; b < W_BLOCK; b++) acc[k][b] = vf_fma(wk, xv[b], acc[k][b]);
            }
        }
    }
#pragma GCC unroll 8
    for (int b = 0; b < W_BLOCK; b++) {
        const hal_int p = p0 + b * VW, oh = p / WPh, ow = p - oh * WPh;
        if (oh < OH && ow + VW <= OW) {
#pragma GCC unroll 16
            for (int k = 0; k < TCB; k++)
                if (k < nco) vf_store(yb + k * OHOW + oh * OW + ow, acc[k][b]);
        } else {
            for (int k = 0; k < TCB; k++) {
                if (k >= nco) continue;
                float tmp[VW];
                vf_storef(tmp, acc[k][b]);
                hal_int h = oh, w = ow;
                for (int j = 0; j < VW; j++) {
                    if (h < OH && w < OW) st(yb + k * OHOW + h * OW + w, tmp[j]);
                    if (++w == WPh) {
                        w = 0;
                        h++;
                    }
                }
            }
        }
    }
}
