// Host emulation runtime (tools/cuda_emu.py): the globals emu.h declares and the launcher.
#include <cstdio>
#include <cstdlib>

#include "emu.h"

thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
alignas(128) unsigned char smem_raw[EMU_SMEM];
EmuBlock emu_block;
thread_local int emu_lane, emu_warp;
thread_local std::vector<std::vector<EmuCopy>> emu_groups;
thread_local std::vector<EmuCopy> emu_open;

void emu_launch(dim3 grid, dim3 block, const std::function<void()>& kernel) {
    gridDim = grid;
    blockDim = block;
    const unsigned n = block.x * block.y * block.z;
    for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
            for (unsigned bx = 0; bx < grid.x; ++bx) {
                std::memset(smem_raw, 0xA5, EMU_SMEM);  // garbage, as on a device
                std::barrier<> bar((std::ptrdiff_t)n);
                std::vector<EmuWarp> warps((n + 31) / 32);
                emu_block = EmuBlock{&bar, &warps};
                std::vector<std::thread> threads;
                threads.reserve(n);
                for (unsigned t = 0; t < n; ++t)
                    threads.emplace_back([&, t] {
                        blockIdx = dim3{bx, by, bz};
                        threadIdx = dim3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
                        emu_lane = (int)(t % 32);
                        emu_warp = (int)(t / 32);
                        emu_groups.clear();
                        emu_open.clear();
                        kernel();
                        if (!emu_groups.empty() || !emu_open.empty()) {
                            std::fprintf(stderr, "cuda_emu: a thread exited with cp.async copies never waited for\n");
                            std::abort();
                        }
                        // an exited thread no longer holds the others at a barrier
                        bar.arrive_and_drop();
                        warps[t / 32].bar.arrive_and_drop();
                    });
                for (auto& th : threads) th.join();
            }
}
