// Does programmatic dependent launch (sm_90) shorten back-to-back short memory-bound kernels?
//
// Session 17 probe, standalone (CUDA runtime, no hal): float16 2x2/2 max pooling of a
// 4096x4096 image and float16 BatchNorm-inference-like scale/shift of 256x64x32x32, the
// two short cases below their targets, each run 20 times back to back between two events
// (median of 15 batches), launched plainly, with the PDL attribute (the kernel waits on
// griddepcontrol.wait before its first load and triggers its dependents at once), and as a
// CUDA graph of the 20 plain launches; a cudaMemcpyAsync of the same bytes for scale.
// Build: nvcc -O3 -arch=sm_90 -o pdl_probe pdl_probe.cu
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#define CHECK(x)                                                                      \
    do {                                                                              \
        cudaError_t e_ = (x);                                                         \
        if (e_ != cudaSuccess) {                                                      \
            std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));   \
            return 1;                                                                 \
        }                                                                             \
    } while (0)

template <bool PDL>
__global__ void pool2x2(const uint4* __restrict__ x, uint2* __restrict__ y, int wv, int ho) {
    if (PDL) {
        asm volatile("griddepcontrol.wait;" ::: "memory");
        asm volatile("griddepcontrol.launch_dependents;");
    }
    // one thread: 8 input columns of two rows -> 4 outputs
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= wv * ho) return;
    const int r = i / wv, c = i - r * wv;
    const uint4 a = x[(2 * r) * wv + c], b = x[(2 * r + 1) * wv + c];
    const __half2* ha = reinterpret_cast<const __half2*>(&a);
    const __half2* hb = reinterpret_cast<const __half2*>(&b);
    __half out[4];
    for (int k = 0; k < 4; ++k) {
        __half2 m = __hmax2(ha[k], hb[k]);
        out[k] = __hmax(__low2half(m), __high2half(m));
    }
    y[i] = *reinterpret_cast<uint2*>(out);
}

template <bool PDL>
__global__ void scale_shift(const uint4* __restrict__ x, uint4* __restrict__ y, const float* s,
                            const float* b, int hw_vec, int c, long long n) {
    if (PDL) {
        asm volatile("griddepcontrol.wait;" ::: "memory");
        asm volatile("griddepcontrol.launch_dependents;");
    }
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int ch = (int)((i / hw_vec) % c);
    const float sc = s[ch], sh = b[ch];
    uint4 v = x[i];
    __half2* h = reinterpret_cast<__half2*>(&v);
    for (int k = 0; k < 4; ++k) {
        float2 f = __half22float2(h[k]);
        h[k] = __floats2half2_rn(f.x * sc + sh, f.y * sc + sh);
    }
    y[i] = v;
}

struct Case {
    const char* name;
    size_t in_bytes, out_bytes;
};

template <typename F>
static float median_ms(F&& batch, cudaStream_t st, int inner) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<float> t;
    for (int rep = 0; rep < 18; ++rep) {
        cudaEventRecord(e0, st);
        batch();
        cudaEventRecord(e1, st);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        if (rep >= 3) t.push_back(ms / inner);
    }
    std::sort(t.begin(), t.end());
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return t[t.size() / 2];
}

int main() {
    cudaStream_t st;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const int inner = 20;
    // pooling: 4096x4096 fp16 -> 2048x2048; BN: 256x64x32x32 fp16; 4 buffer sets rotated past L2
    const size_t pin = 4096ull * 4096 * 2, pout = pin / 4, bn = 256ull * 64 * 32 * 32 * 2;
    const int sets = 4;
    std::vector<void*> px(sets), py(sets), bx(sets), by(sets);
    for (int k = 0; k < sets; ++k) {
        CHECK(cudaMalloc(&px[k], pin));
        CHECK(cudaMalloc(&py[k], pout));
        CHECK(cudaMalloc(&bx[k], bn));
        CHECK(cudaMalloc(&by[k], bn));
        CHECK(cudaMemset(px[k], 0x3c, pin));
        CHECK(cudaMemset(bx[k], 0x3c, bn));
    }
    float *s, *b;
    CHECK(cudaMalloc(&s, 64 * 4));
    CHECK(cudaMalloc(&b, 64 * 4));
    CHECK(cudaMemset(s, 0, 64 * 4));
    CHECK(cudaMemset(b, 0, 64 * 4));
    const int wv = 4096 / 8, ho = 2048;
    const int pthreads = 256, pblocks = (wv * ho + pthreads - 1) / pthreads;
    const long long bnv = bn / 16;
    const int bblocks = (int)((bnv + 255) / 256);

    auto plain_pool = [&](int k) {
        pool2x2<false><<<pblocks, pthreads, 0, st>>>((const uint4*)px[k % sets], (uint2*)py[k % sets], wv, ho);
    };
    auto plain_bn = [&](int k) {
        scale_shift<false><<<bblocks, 256, 0, st>>>((const uint4*)bx[k % sets], (uint4*)by[k % sets], s, b,
                                                    32 * 32 * 2 / 16, 64, bnv);
    };
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    auto pdl_pool = [&](int k) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(pblocks);
        cfg.blockDim = dim3(pthreads);
        cfg.stream = st;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        cudaLaunchKernelEx(&cfg, pool2x2<true>, (const uint4*)px[k % sets], (uint2*)py[k % sets], wv, ho);
    };
    auto pdl_bn = [&](int k) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(bblocks);
        cfg.blockDim = dim3(256);
        cfg.stream = st;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        cudaLaunchKernelEx(&cfg, scale_shift<true>, (const uint4*)bx[k % sets], (uint4*)by[k % sets],
                           (const float*)s, (const float*)b, 32 * 32 * 2 / 16, 64, bnv);
    };
    auto graph_of = [&](auto&& one, cudaGraphExec_t* exec) -> int {
        cudaGraph_t g;
        CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        for (int k = 0; k < inner; ++k) one(k);
        CHECK(cudaStreamEndCapture(st, &g));
        CHECK(cudaGraphInstantiate(exec, g, 0));
        return 0;
    };
    cudaGraphExec_t gpool, gbn, gpool_pdl, gbn_pdl;
    if (graph_of(plain_pool, &gpool) || graph_of(plain_bn, &gbn) || graph_of(pdl_pool, &gpool_pdl) ||
        graph_of(pdl_bn, &gbn_pdl))
        return 1;

    // a long copy first: the denominator
    void *cx, *cy;
    const size_t big = 1ull << 30;
    CHECK(cudaMalloc(&cx, big));
    CHECK(cudaMalloc(&cy, big));
    const float big_ms = median_ms([&] { cudaMemcpyAsync(cy, cx, big, cudaMemcpyDeviceToDevice, st); }, st, 1);
    const double copy_gbs = 2.0 * big / (big_ms * 1e6);
    std::printf("copy 1 GiB: %.4f ms, %.0f GB/s\n", big_ms, copy_gbs);

    struct Row {
        const char* name;
        double bytes;
        float ms;
    };
    std::vector<Row> rows;
    const double pbytes = pin + pout, bbytes = 2.0 * bn;
    auto run = [&](const char* name, double bytes, auto&& one) {
        for (int w = 0; w < inner; ++w) one(w);
        rows.push_back({name, bytes, median_ms([&] { for (int k = 0; k < inner; ++k) one(k); }, st, inner)});
    };
    run("pool2x2 fp16 plain", pbytes, plain_pool);
    run("pool2x2 fp16 pdl", pbytes, pdl_pool);
    run("pool2x2 fp16 graph", pbytes, [&](int k) { if (k == 0) cudaGraphLaunch(gpool, st); });
    run("pool2x2 fp16 graph+pdl", pbytes, [&](int k) { if (k == 0) cudaGraphLaunch(gpool_pdl, st); });
    run("copy same bytes", pbytes, [&](int k) {
        cudaMemcpyAsync(py[k % sets], px[k % sets], pout, cudaMemcpyDeviceToDevice, st);
        cudaMemcpyAsync(bx[k % sets], px[k % sets], pin - pout, cudaMemcpyDeviceToDevice, st);
    });
    run("bn-like fp16 plain", bbytes, plain_bn);
    run("bn-like fp16 pdl", bbytes, pdl_bn);
    run("bn-like fp16 graph", bbytes, [&](int k) { if (k == 0) cudaGraphLaunch(gbn, st); });
    run("bn-like fp16 graph+pdl", bbytes, [&](int k) { if (k == 0) cudaGraphLaunch(gbn_pdl, st); });
    run("copy same bytes", bbytes, [&](int k) { cudaMemcpyAsync(by[k % sets], bx[k % sets], bn, cudaMemcpyDeviceToDevice, st); });
    // the graph rows count one launch of 20 kernels per batch of 20 'calls'
    for (auto& r : rows)
        std::printf("%-26s %.4f ms/call  %.1f %% of copy\n", r.name, r.ms, 100.0 * r.bytes / (r.ms * 1e6) / copy_gbs);
    CHECK(cudaStreamSynchronize(st));
    CHECK(cudaGetLastError());
    return 0;
}
