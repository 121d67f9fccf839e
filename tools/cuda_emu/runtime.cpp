// Host emulation runtime (tools/cuda_emu.py): the globals emu.h declares and the launcher.
//
// A block's threads are fibers (ucontext) on the one OS thread: each runs until it waits at a
// barrier (__syncthreads, or a warp's, which every warp collective uses) or exits, then the
// scheduler moves to the next that can run. Switching fibers costs far less than waking OS
// threads (the std::thread version spent most of its time in futexes), and the schedule is
// deterministic. Each pass over the fibers alternates direction, so a read of another thread's
// shared-memory write with no barrier between them sees it unwritten for some pair of threads
// (a missing __syncthreads then fails against the oracle), whichever of the two is lower.
#include <ucontext.h>

#include <algorithm>

#include <cstdio>
#include <cstdlib>

#include "emu.h"

dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
alignas(128) unsigned char smem_raw[EMU_SMEM];
EmuBlock emu_block;
int emu_lane, emu_warp;
std::vector<std::vector<EmuCopy>> emu_groups;
std::vector<EmuCopy> emu_open;

namespace {

constexpr size_t STACK_BYTES = 256 * 1024;  // the mma collectives keep 3 KB of matrices on the stack

struct Fiber {
    ucontext_t ctx;
    char* stack = nullptr;
    dim3 tid;
    int lane = 0, warp = 0;
    std::vector<std::vector<EmuCopy>> groups;
    std::vector<EmuCopy> open;
    const EmuBarrier* waiting = nullptr;  // waits until this barrier's phase moves past wait_phase
    unsigned wait_phase = 0;
    bool done = false;
    unsigned block = 0;  // emu_launch_coop: the fiber's block (linear index)
};

ucontext_t scheduler;
std::vector<Fiber> fibers;
Fiber* running = nullptr;
const std::function<void()>* kernel_fn = nullptr;

void fiber_main() {
    (*kernel_fn)();
    // (an empty group, committed after the last copies, is harmless: conv2d_k3_simt's last stage commits one)
    bool pending = !emu_open.empty();
    for (const auto& g : emu_groups) pending = pending || !g.empty();
    if (pending) {
        std::fprintf(stderr, "cuda_emu: a thread exited with cp.async copies never waited for\n");
        std::abort();
    }
    // an exited thread no longer holds the others at a barrier
    emu_block.bar->arrive_and_drop();
    (*emu_block.warps)[emu_warp].bar.arrive_and_drop();
    running->done = true;
}  // returns to `scheduler` (uc_link)

void wait_phase(const EmuBarrier* bar, unsigned phase) {
    running->waiting = bar;
    running->wait_phase = phase;
    swapcontext(&running->ctx, &scheduler);
    running->waiting = nullptr;
}

// run fiber f until it waits or exits, with its thread state in emu.h's globals meanwhile
void resume(Fiber& f) {
    threadIdx = f.tid;
    emu_lane = f.lane;
    emu_warp = f.warp;
    emu_groups.swap(f.groups);
    emu_open.swap(f.open);
    running = &f;
    swapcontext(&scheduler, &f.ctx);
    running = nullptr;
    emu_groups.swap(f.groups);
    emu_open.swap(f.open);
}

// thread t of a block of `block`'s shape, at the start of the kernel (its stack already allocated)
void start_fiber(Fiber& f, unsigned t, dim3 block) {
    f.tid = dim3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
    f.lane = (int)(t % 32);
    f.warp = (int)(t / 32);
    f.groups.clear();
    f.open.clear();
    f.waiting = nullptr;
    f.done = false;
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = STACK_BYTES;
    f.ctx.uc_link = &scheduler;
    makecontext(&f.ctx, fiber_main, 0);
}

}  // namespace

bool emu_spun = false;  // the fiber just resumed gave way in a spin-wait (emu_yield), nothing else

void emu_yield() {
    if (!running) return;
    emu_spun = true;
    swapcontext(&running->ctx, &scheduler);  // runnable again at the next turn
}

void EmuBarrier::arrive_and_wait() {
    const unsigned p = phase;
    if (++arrived == expected) {  // the last one completes the phase and runs on
        arrived = 0;
        ++phase;
        return;
    }
    wait_phase(this, p);
}

void EmuBarrier::arrive_and_drop() {
    --expected;
    if (arrived > 0 && arrived == expected) {
        arrived = 0;
        ++phase;
    }
}

void emu_launch(dim3 grid, dim3 block, const std::function<void()>& kernel) {
    gridDim = grid;
    blockDim = block;
    kernel_fn = &kernel;
    const unsigned n = block.x * block.y * block.z;
    if (fibers.size() < n) fibers.resize(n);
    for (unsigned t = 0; t < n; ++t)
        if (!fibers[t].stack) fibers[t].stack = static_cast<char*>(std::malloc(STACK_BYTES));
    for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
            for (unsigned bx = 0; bx < grid.x; ++bx) {
                std::memset(smem_raw, 0xA5, EMU_SMEM);  // garbage, as on a device
                EmuBarrier bar;
                bar.expected = (int)n;
                std::vector<EmuWarp> warps((n + 31) / 32);
                for (unsigned w = 0; w < warps.size(); ++w) warps[w].bar.expected = (int)std::min(32u, n - 32 * w);
                emu_block = EmuBlock{&bar, &warps};
                blockIdx = dim3{bx, by, bz};
                for (unsigned t = 0; t < n; ++t) start_fiber(fibers[t], t, block);
                for (bool forward = true;; forward = !forward) {
                    bool left = false, ran = false;
                    for (unsigned i = 0; i < n; ++i) {
                        Fiber& f = fibers[forward ? i : n - 1 - i];
                        if (f.done) continue;
                        left = true;
                        if (f.waiting && f.waiting->phase == f.wait_phase) continue;
                        resume(f);
                        ran = true;
                    }
                    if (!left) break;
                    if (!ran) {
                        std::fprintf(stderr, "cuda_emu: block (%u, %u, %u): every thread left waits at a barrier "
                                             "the others never reach (a barrier in divergent code)\n", bx, by, bz);
                        std::abort();
                    }
                }
            }
}

void emu_launch_coop(dim3 grid, dim3 block, const std::function<void()>& kernel) {
    gridDim = grid;
    blockDim = block;
    kernel_fn = &kernel;
    const unsigned n = block.x * block.y * block.z, nb = grid.x * grid.y * grid.z, total = n * nb;
    static std::vector<Fiber> coop;  // kept: their stacks are reused
    if (coop.size() < total) coop.resize(total);
    std::vector<EmuBarrier> bars(nb);
    std::vector<std::vector<EmuWarp>> warps(nb, std::vector<EmuWarp>((n + 31) / 32));
    std::vector<std::vector<unsigned char>> smem(nb, std::vector<unsigned char>(EMU_SMEM, 0xA5));
    for (unsigned b = 0; b < nb; ++b) {
        bars[b].expected = (int)n;
        for (unsigned w = 0; w < warps[b].size(); ++w) warps[b][w].bar.expected = (int)std::min(32u, n - 32 * w);
    }
    for (unsigned i = 0; i < total; ++i) {
        if (!coop[i].stack) coop[i].stack = static_cast<char*>(std::malloc(STACK_BYTES));
        start_fiber(coop[i], i % n, block);
        coop[i].block = i / n;
    }
    unsigned current = nb;  // the block whose shared memory smem_raw holds
    auto enter = [&](unsigned b) {
        if (b == current) return;
        if (current < nb) std::memcpy(smem[current].data(), smem_raw, EMU_SMEM);
        std::memcpy(smem_raw, smem[b].data(), EMU_SMEM);
        current = b;
        emu_block = EmuBlock{&bars[b], &warps[b]};
        blockIdx = dim3{b % grid.x, (b / grid.x) % grid.y, b / (grid.x * grid.y)};
    };
    // Blocks take turns, each running until its threads only spin (or wait at a block barrier):
    // so one block goes as far as it can before the others start, and a read of another block's
    // writes without a grid barrier between them sees them unwritten (each turn over the blocks
    // in the other direction, so either block of a pair runs ahead in some turn)
    long turns = 0;
    for (bool forward = true;; forward = !forward) {
        bool left = false, progress = false;
        for (unsigned bi = 0; bi < nb; ++bi) {
            const unsigned b = forward ? bi : nb - 1 - bi;
            for (bool again = true; again;) {
                again = false;
                for (unsigned t = 0; t < n; ++t) {
                    Fiber& f = coop[b * n + (forward ? t : n - 1 - t)];
                    if (f.done) continue;
                    left = true;
                    if (f.waiting && f.waiting->phase == f.wait_phase) continue;
                    enter(b);
                    emu_spun = false;
                    resume(f);
                    if (!emu_spun) again = progress = true;
                }
            }
        }
        if (!left) break;
        if (!progress) {
            std::fprintf(stderr, "cuda_emu: cooperative grid: every thread left spins or waits at a barrier the "
                                 "others never reach (a grid barrier that never opens?)\n");
            std::abort();
        }
        if (++turns > 100000) {
            std::fprintf(stderr, "cuda_emu: cooperative grid: no end after %ld turns\n", turns);
            std::abort();
        }
    }
}
