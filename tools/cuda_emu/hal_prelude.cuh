// Host emulation of the CUDA prelude (tools/cuda_emu.py): the names kernels_cu/*.cu use from
// hal_prelude.cuh and from CUDA, as plain C++20 running one std::thread per CUDA thread.
// cp.async copies land at their thread's wait (a missing wait reads stale shared memory);
// warp collectives (ldmatrix, mma, shuffles) are emulated in emu.h.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "emu.h"

#ifndef DTYPE_HALF
#define DTYPE_HALF 0
#endif
#ifndef LAYOUT_NHWC
#define LAYOUT_NHWC 0
#endif
#ifndef FUSE_RELU
#define FUSE_RELU 0
#endif
#if DTYPE_HALF
typedef __half act_t;
#define HAL_VEC 8
#else
typedef float act_t;
#define HAL_VEC 4
#endif
#define HAL_HAS_CP_ASYNC 1
using std::max;
using std::min;

inline float out_act(float v) {
#if FUSE_RELU
    return v < 0.0f ? 0.0f : v;
#else
    return v;
#endif
}
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
// cp.async as late as the PTX allows: a copy lands only when its thread waits for its group
// (cp.async.wait_group N completes all but the N most recent committed groups), so shared
// memory read before the wait shows stale bytes
inline void cp_async16(void* smem, const void* gmem) { emu_async_copy(smem, gmem); }
inline void cp_async16_zfill(void* smem, const void* gmem, bool valid) { emu_async_copy(smem, valid ? gmem : nullptr); }
inline void cp_async_commit() { emu_async_commit(); }
template <int N>
inline void cp_async_wait() {
    emu_async_wait(N);
}
