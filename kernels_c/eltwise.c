/* eltwise.c: elementwise ops over COUNT contiguous elements (layout does not matter).
 *
 * eltwise_relu(x, y, COUNT): y = x < 0 ? 0 : x (NaN stays NaN); x and y may be the
 * same buffer. The backend builds this file with FUSE_RELU=1, so the store applies
 * the ReLU. UNROLL vectors per step, a scalar tail, chunks of 64 Ki elements per
 * thread task.
 */
#include "hal_prelude.h"

#ifndef UNROLL
#define UNROLL 4 /* vectors per step */
#endif

HAL_EXPORT void eltwise_relu(const hal_t *x, hal_t *y, hal_int COUNT) {
    const hal_int chunk = 65536, tasks = HAL_CDIV(COUNT, chunk);
    const int stream = hal_use_stream((size_t)COUNT * sizeof(hal_t)) && x != y; /* in place: keep it cached */
#pragma omp parallel num_threads(hal_threads_for(COUNT))
    {
#pragma omp for schedule(guided) nowait
        for (hal_int t = 0; t < tasks; t++) {
            const hal_int i1 = HAL_MIN(COUNT, (t + 1) * chunk);
            hal_int i = t * chunk;
            if (stream) {
                for (; i < i1 && !hal_aligned(y + i); i++) st(y + i, ld(x + i));
                for (; i + VW <= i1; i += VW) vf_stream(y + i, vf_load(x + i));
            }
            for (; i + UNROLL * VW <= i1; i += UNROLL * VW) {
                vf v[UNROLL];
#pragma GCC unroll 8
                for (int u = 0; u < UNROLL; u++) v[u] = vf_load(x + i + u * VW);
#pragma GCC unroll 8
                for (int u = 0; u < UNROLL; u++) vf_store(y + i + u * VW, v[u]);
            }
            for (; i + VW <= i1; i += VW) vf_store(y + i, vf_load(x + i));
            for (; i < i1; i++) st(y + i, ld(x + i));
        }
        if (stream) hal_stream_fence();
    }
}
