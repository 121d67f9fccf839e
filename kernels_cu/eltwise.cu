// Elementwise ops over COUNT contiguous elements (the layout does not matter).
//
// Macros: DTYPE_HALF, DTYPE_BF16, ELT_THREADS [256] (threads per block).
//
// eltwise_relu(x, y, COUNT): y = x < 0 ? 0 : x (NaN stays NaN, as torch.relu); x and y
// may be the same buffer. 16-byte vectors when both are 16-byte aligned, grid-stride.
//
// layout_transpose(x, y, R, CC): each image (blockIdx.z) of x is an R x CC row-major matrix;
// y gets its transpose (CC x R). NCHW -> NHWC is R = C, CC = H * W; NHWC -> NCHW is R = H * W,
// CC = C. 64 x 64 tiles through shared memory, blocks of 64 x 4 threads, 16 elements a thread
// each way. The float16 NCHW 3x3 stride-2 conv runs between two of these
// (CudaBackend._plan_conv2d).
//
// sample_planes(x, y, ROWS, IH, IW, OH, OW, SH, SW, PT, PL): y's planes (OH x OW, ROWS = planes x OH
// rows) take x's planes (IH x IW) at rows oy * SH - PT and columns ox * SW - PL, zero outside: a 1x1
// conv's input at its stride and padding, so that the float16 NCHW 1x1 GEMM at stride 1 serves strided
// and padded 1x1 convs (CudaBackend._plan_conv_k1_nchw). Blocks of 32 x 8 threads: a warp an output row
// (lanes over its columns), blockIdx.x over groups of 8 rows. Any alignment.
// sample_planes_rows8: the same with 8 consecutive output rows a warp (blockIdx.x over groups of 64),
// the 8 rows' loads issued before their stores, so that a lane has 8 loads in flight, not 1; ROWS a
// multiple of 8 (the GEMM's C_in % 8 == 0 makes it so), so a warp's rows all exist (K1N_SAMPLE 1;
// session 25: emulator-checked, not measured on a GPU).
//
// hal_spin(NS): one thread busy-waits NS nanoseconds of the GPU's global timer. Not an op:
// CudaBackend.time_launches queues it ahead of the launches it times, so that the host has
// enqueued them all before the GPU reaches them (no idle gaps inside the event pairs).
#include "hal_prelude.cuh"

#ifndef ELT_THREADS
#define ELT_THREADS 256
#endif

__device__ __forceinline__ float relu_f(float v) { return v < 0.0f ? 0.0f : v; }

extern "C" __global__ void __launch_bounds__(ELT_THREADS) eltwise_relu(const act_t* x, act_t* y, long long COUNT) {
    HAL_PDL_ENTRY();
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long t0 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (aligned16(x) && aligned16(y)) {
        const long long nv = COUNT / HAL_VEC;
        for (long long v = t0; v < nv; v += stride) {
            float f[HAL_VEC];
            unpack_vec(*reinterpret_cast<const uint4*>(x + v * HAL_VEC), f);
#pragma unroll
            for (int j = 0; j < HAL_VEC; ++j) f[j] = relu_f(f[j]);
            st_vec(y + v * HAL_VEC, f);
        }
        for (long long i = nv * HAL_VEC + t0; i < COUNT; i += stride) st_act(y + i, relu_f(ld_act(x + i)));
    } else {
        for (long long i = t0; i < COUNT; i += stride) st_act(y + i, relu_f(ld_act(x + i)));
    }
}

extern "C" __global__ void __launch_bounds__(256) layout_transpose(const act_t* __restrict__ x, act_t* __restrict__ y,
                                                                    int R, int CC) {
    HAL_PDL_ENTRY();
    // 64 x 64 tiles: a tile row is 128 bytes of float16; rows padded so that the column reads of
    // a warp fall in 32 distinct banks (2 elements of float16, 1 of float)
    constexpr int T = 64, PAD = sizeof(act_t) == 2 ? 2 : 1;
    __shared__ act_t tile[T][T + PAD];
    const long long image = (long long)blockIdx.z * R * CC;
    const act_t* xi = x + image;
    act_t* yi = y + image;
    const int c0 = blockIdx.x * T, r0 = blockIdx.y * T, tx = threadIdx.x;
#pragma unroll
    for (int k = threadIdx.y; k < T; k += 4) {
        const int r = r0 + k, c = c0 + tx;
        if (r < R && c < CC) tile[k][tx] = xi[(long long)r * CC + c];
    }
    __syncthreads();
#pragma unroll
    for (int k = threadIdx.y; k < T; k += 4) {
        const int c = c0 + k, r = r0 + tx;
        if (c < CC && r < R) yi[(long long)c * R + r] = tile[tx][k];
    }
}

extern "C" __global__ void __launch_bounds__(256) sample_planes(const act_t* __restrict__ x, act_t* __restrict__ y,
                                                                 int ROWS, int IH, int IW, int OH, int OW, int SH,
                                                                 int SW, int PT, int PL) {
    HAL_PDL_ENTRY();
    const int row = blockIdx.x * 8 + threadIdx.y;  // plane * OH + oy
    if (row >= ROWS) return;
    const int plane = row / OH, oy = row - plane * OH, iy = oy * SH - PT;
    act_t* yr = y + (long long)row * OW;
    if (iy < 0 || iy >= IH) {  // a padding row
        for (int ox = threadIdx.x; ox < OW; ox += 32) st_act(yr + ox, 0.0f);
        return;
    }
    const act_t* xr = x + ((long long)plane * IH + iy) * IW;
    for (int ox = threadIdx.x; ox < OW; ox += 32) {
        const int ix = ox * SW - PL;
        if (ix >= 0 && ix < IW) yr[ox] = xr[ix];
        else st_act(yr + ox, 0.0f);
    }
}

extern "C" __global__ void __launch_bounds__(256) sample_planes_rows8(const act_t* __restrict__ x,
                                                                       act_t* __restrict__ y, int ROWS, int IH,
                                                                       int IW, int OH, int OW, int SH, int SW,
                                                                       int PT, int PL) {
    HAL_PDL_ENTRY();
    constexpr int R = 8;
    const int row0 = (blockIdx.x * 8 + threadIdx.y) * R;  // the warp's first row: plane * OH + oy
    if (row0 >= ROWS) return;
    const int plane0 = row0 / OH, oy0 = row0 - plane0 * OH;
    const act_t zero = from_f<act_t>(0.0f);
    for (int c0 = 0; c0 < OW; c0 += 32) {
        const int ox = c0 + threadIdx.x, ix = ox * SW - PL;
        const bool column = ox < OW && ix >= 0 && ix < IW;
        act_t v[R];
        int plane = plane0, oy = oy0;
#pragma unroll
        for (int r = 0; r < R; ++r) {  // every load first, then every store
            const int iy = oy * SH - PT;
            v[r] = column && iy >= 0 && iy < IH ? x[((long long)plane * IH + iy) * IW + ix] : zero;
            if (++oy == OH) oy = 0, ++plane;
        }
        if (ox < OW) {
#pragma unroll
            for (int r = 0; r < R; ++r) y[(long long)(row0 + r) * OW + ox] = v[r];
        }
    }
}

extern "C" __global__ void hal_spin(long long NS) {
    HAL_PDL_ENTRY();
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while ((long long)(t - t0) < NS);
}
