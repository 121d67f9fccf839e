/* Elementwise ops over COUNT contiguous elements (layout does not matter).
 *
 * eltwise_relu(x, y, COUNT): y = x < 0 ? 0 : x (NaN stays NaN); x and y may be the same
 * buffer. The backend builds this file with FUSE_RELU=1, so the store applies the ReLU.
 * One work-item = VEC consecutive elements, a scalar tail at the end.
 */

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void eltwise_relu(__global const dtype_t* x, __global dtype_t* y, int COUNT)
{
    const int i = get_global_id(0) * VEC;
    if (i >= COUNT) return;
    if (i + VEC <= COUNT) {
        STV(LDV(x, i), y, i);
    } else {
        for (int j = i; j < COUNT; ++j) ST(LD(x, j), y, j);
    }
}
