"""Run CUDA tensor-core kernels on the host, without a GPU, against the oracle.

The device time on the H200 is scarce (30 minutes a session); this checks the indexing of
`conv2d_k3_tc`, `conv2d_k3_tc_pipe`, the 1x1 GEMM `conv2d_k1_gemm` (`check_k1_gemm`), its NCHW twin
without transposes `conv2d_k1_gemm_nchw` (`check_k1_nchw`) and its float32
SGEMM twin `conv2d_k1_simt` (`check_k1_simt`), the dense 3x3 CUDA-core kernel `conv2d_k3_simt`, the depthwise
`conv2d_dw_pipe*_k3s1` and register walks,
the tiled direct convs `conv2d_grp_k3s1` / `conv2d_grp_g` and the grouped tensor-core
`conv2d_grp_tc8` / `conv2d_grp_tc16`, the implicit GEMMs `conv2d_im2col_tc` / `conv2d_im2col_simt`
(kernels_cu/conv2d.cu), the int8 convs of `quant_conv2d.cu` (`qconv2d_k3_tc`,
`qconv2d_co4`, `qconv2d`), BatchNorm's flat inference kernels (`batch_norm_infer_flat`,
`batch_norm_infer_flat_reg`) and its training kernels (statistics, finalize, apply, and the
cooperative `batch_norm_train_fused`), and the NHWC
global pooling kernels `adaptive_pool2d_{max,avg}_gvec` (lanes per pair, shuffles) before any of it: the kernels'
own source, compiled by g++ (C++20) against `tools/cuda_emu/` (a host `hal_prelude.cuh`, CUDA
keywords, float16, and the warp collectives: ldmatrix.x4 (and .trans, `check_ldmatrix`), mma.sync
m16n8k16 f16 and bf16 (the type the kernel's mma string names) and m16n8k32 s8/u8, shfl.xor), launched
with the plan the real launcher makes for an H200 (grid, block, shared memory, arguments), one fiber per
CUDA thread (a switch at each barrier, each pass over them in the other direction), blocks one after
another; a cooperative launch (grid barriers) runs
every block at once, each block until its threads only spin in a grid barrier's wait, the blocks
in turn, each turn in the other direction (a read of another block's writes without a barrier
between them then sees them unwritten).

What it shows: wrong indices, tiles, swizzles, fragment layouts, zero-point algebra, stores
outside the output (the output is poisoned with NaN or the dtype's extremes; the buffers have
guard bytes), and missing cp.async waits (a copy lands only when its thread waits for its
group). What it cannot show: races that its one schedule does not expose, timing, and
anything of the GPU's own arithmetic order (mma sums in float in k order here).

    python3 tools/cuda_emu.py [--quick] [--only SUBSTR] [--seed N] [--fuzz N | --fuzz-bn N] [--asan] [--optimise]

--asan builds with g++'s AddressSanitizer and poisons each buffer's bytes outside its tensor (the
guard, the alignment slack): a read or write of global memory outside the tensors, which the
guard bytes catch only for stores, stops the case. Shared memory is one 256 KiB arena, unbounded
by the launch's size; no race detection.

Exit status 1 when a case fails. tests/test_cuda_emu.py runs a selection of them in CI.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
EMU = Path(__file__).resolve().parent / "cuda_emu"
KERNELS = ROOT / "kernels_cu"
GUARD = 64  # bytes after each buffer that must stay untouched


def _planning_backend(info: Any) -> Any:
    """A CudaBackend for ``info`` (compute capability and SM count from it) that plans without a GPU;
    workspaces are fake addresses, and the driver is taken to allow cooperative launches (as the H200's:
    batch_norm_train_fused where BN_FUSED asks for it)."""
    from hal.backends.base import Backend
    from hal.backends.cuda import CudaBackend, CudaBuffer

    major, minor = dict(info.extras)["compute_capability"].split(".")
    be = CudaBackend.__new__(CudaBackend)
    Backend.__init__(be, info)
    be.force_generic, be._cc, be._arch = False, (int(major), int(minor)), info.arch
    be._sms, be._smem_default = info.compute_units, 48 * 1024
    be._lock, be._workspace = threading.RLock(), {}
    be._workspace_buffer = lambda name, nbytes: CudaBuffer(0x100000, nbytes, None)
    be._barrier_buffer = lambda: CudaBuffer(0x100000, 256, None)
    be.cooperative = True
    return be


def h200_backend() -> Any:
    """A CudaBackend that plans as on an H200 (sm_90, 132 SMs, 227 KiB of shared memory a block),
    without a GPU; its launches are recorded, not made."""
    from hal.device import DeviceInfo

    return _planning_backend(DeviceInfo(
        "cuda", 0, "NVIDIA H200", "nvidia", "sm_90", "sm_90", 132, 1024, 232448, 140 << 30, True, 32, "cuda", "580",
        (("compute_capability", "9.0"), ("shared_memory_per_block_default", "49152"),
         ("shared_memory_per_sm", "233472"), ("max_threads_per_sm", "2048"), ("l2_bytes", str(50 << 20)))))


#: each architecture's limits as the planner sees them (shared memory a block may opt into, resident
#: threads per SM) and one part's SM count (T4, A100, RTX 3080, RTX 4090, H100/H200, B200, RTX 5080)
ARCH_LIMITS: dict[str, tuple[int, int, int]] = {
    "sm_75": (64 << 10, 1024, 40), "sm_80": (166912, 2048, 108), "sm_86": (101376, 1536, 68),
    "sm_89": (101376, 1536, 128), "sm_90": (232448, 2048, 132), "sm_100": (232448, 2048, 148),
    "sm_120": (101376, 1536, 84),
}


def arch_backend(arch: str) -> Any:
    """A CudaBackend that plans as on a GPU of ``arch`` (ARCH_LIMITS), without one; its launches are
    recorded, not made. Its name matches no device entry: the arch, then vendor levels serve it."""
    from hal.device import DeviceInfo

    smem, threads, sms = ARCH_LIMITS[arch]
    return _planning_backend(DeviceInfo(
        "cuda", 0, f"Emulated {arch}", "nvidia", arch, arch, sms, 1024, smem, 16 << 30, True, 32, "cuda", "580",
        (("compute_capability", f"{arch[3:-1]}.{arch[-1]}"), ("shared_memory_per_block_default", "49152"),
         ("shared_memory_per_sm", str(smem + 1024)), ("max_threads_per_sm", str(threads)))))


def _function_span(text: str, name: str) -> tuple[int, int]:
    """The [start, end) of the body braces of the first function whose signature names `name`."""
    m = re.search(r"\b" + re.escape(name) + r"\s*\(", text)
    if m is None:
        raise ValueError(f"{name} not found")
    start = text.index("{", m.end())
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return start, i + 1
    raise ValueError(f"{name}: unbalanced braces")


def _replace_body(text: str, name: str, body: str) -> str:
    start, end = _function_span(text, name)
    return text[:start] + "{ " + body + " }" + text[end:]


def _with_window(text: str) -> str:
    """A kernel file's text with hal_window.cuh in place of its include (the emulator's prelude instead of
    the real one); the tiles' dynamic shared memory is the emulator's one smem_raw array."""
    window = (KERNELS / "hal_window.cuh").read_text()
    window = window.replace("#pragma once", "").replace('#include "hal_prelude.cuh"', "")
    window = window.replace("extern __shared__ __align__(16) unsigned char hal_smem[];",
                            "unsigned char* hal_smem = smem_raw;")
    if '#include "hal_window.cuh"' not in text:
        raise ValueError("the kernel file no longer includes hal_window.cuh")
    return text.replace('#include "hal_window.cuh"', window)


def kernel_source(file: str) -> str:
    """The kernel file's text as the emulator compiles it (after the host prelude): conv2d.cu's
    dense 3x3 CUDA-core kernel and tensor-core section onwards (its other kernels need intrinsics the
    emulator does not model), the inline PTX of ldmatrix and mma routed to the emulator's collectives."""
    text = (KERNELS / file).read_text()
    if file == "conv2d.cu":
        # the contract kernel and the depthwise tiles (hal_window.cuh), then conv2d_k3_simt (its dynamic
        # shared memory: the emulator's one smem_raw array)
        head = _with_window(text[:text.index("// dense 3x3 on CUDA cores")])
        simt = text[text.index("namespace simt {"):text.index("// dense KH,KW <= 3 on tensor cores")]
        simt = simt.replace("extern __shared__ __align__(16) float smem_f[];",
                            "float* smem_f = reinterpret_cast<float*>(smem_raw);")
        start = text.index("namespace tc {")
        end = text.index("// end of the tensor-core section")
        # and the depthwise register and pipelined kernels, after the section's #endif
        rest = text.index("\n", text.index("#endif", end)) + 1
        tc = text[start:end]
        if text.rfind("#if HAL_ACT16", 0, start) < 0 or "#if HAL_ACT16" not in tc:
            raise ValueError("conv2d.cu: the tensor-core section's dtype guards moved")
        # the section is the 16-bit builds' (float16 and bfloat16) in two guarded parts (conv2d_k3_tc and
        # conv2d_k3_tc_pipe, then the streamed-weight, 1x1 GEMM and im2col kernels, whose own #if HAL_ACT16 the
        # section's #endif closes): a float32 build leaves it out, as nvcc does
        text = head + simt + "#if HAL_ACT16\n" + tc + "#endif\n" + text[rest:]
        text = _replace_body(text, "ldsm_x4", "emu_ldsm_x4(addr, r0, r1, r2, r3);")
        text = _replace_body(text, "ldsm_x4_trans", "emu_ldsm_x4_trans(addr, r0, r1, r2, r3);")
        # the operand type the kernel's own mma string names (TC_MMA_AB): a bfloat16 build whose mma said
        # f16 would multiply bfloat16 bits as float16, here as on the device
        text = _replace_body(text, "mma16816", "emu_mma_16816<emu_mma_is_bf16(TC_MMA_AB)>(c, a, b0, b1);")
    elif file == "batch_norm.cu":
        # every kernel but the contract entry point, after the real prelude's Welford/Chan
        # section; the emulator's dynamic shared memory is its one smem_raw array
        prelude = (KERNELS / "hal_prelude.cuh").read_text()
        start = prelude.index("struct Stat {")
        stats = prelude[start:prelude.index("\n}\n", prelude.index("Stat stat_shfl_xor(", start)) + 3]
        # and the cooperative training kernel after it (emu_launch_coop runs its grid barriers)
        fused = text[text.index("// Training in one launch (NHWC"):]
        text = stats + text[:text.index("// contract entry point")] + fused
        text = _replace_body(text, "fused_cp16", "(void)pol; cp_async16(smem, g);")
        text = text.replace("extern __shared__ __align__(16) uint4 s_cache[];",
                            "uint4* s_cache = reinterpret_cast<uint4*>(smem_raw);")
        for name in ("s_tab", "s_red"):
            text = text.replace(f"extern __shared__ __align__(16) float {name}[];",
                                f"float* {name} = reinterpret_cast<float*>(smem_raw);")
        # a static array is shared by the block's threads (the emulator runs one block at a time)
        text = text.replace("__shared__ float ", "static float ")
    elif file == "quant_conv2d.cu":
        text = _replace_body(text, "qtc_ldsm_x4", "emu_ldsm_x4(addr, r0, r1, r2, r3);")
        text = _replace_body(text, "qtc_mma", "emu_mma_i8<!DTYPE_UINT8, !W_UINT8>(c, a, b0, b1);")
    elif file == "adaptive_pool2d.cu":
        # every kernel, after hal_window.cuh (the NCHW tiles); the per-block statics are the block's
        # shared memory (one block at a time)
        text = _with_window(text).replace("__shared__ float ", "static float ")
        text = text.replace("__shared__ long long ", "static long long ")
        text = text.replace("extern __shared__ __align__(16) unsigned char s_raw[];",
                            "unsigned char* s_raw = smem_raw;")
    elif file == "pool2d.cu":
        # every kernel, after hal_window.cuh (the tiles)
        text = _with_window(text)
    elif file == "eltwise.cu":
        # the layout transpose and the plane sampling alone; the static tile is the block's shared memory
        # (one block at a time)
        start = text.index('extern "C" __global__ void __launch_bounds__(256) layout_transpose(')
        text = text[start:text.index('extern "C" __global__ void hal_spin(')]
        text = text.replace("__shared__ act_t tile", "static act_t tile")
    else:
        raise ValueError(f"file: {file} is not emulated")
    return text


def _fmt_items(fmt: str) -> list[str]:
    """A launch format's arguments: "P" (a buffer), "i" / "q" (an int / a long long), "<n>s" (an n-byte struct)."""
    return re.findall(r"\d+s|[Piq]", fmt)


def _main_source(kernel: str, fmt: str, cooperative: bool = False) -> str:
    """A main() that loads the pointer arguments from files ('-' for NULL), takes the ints from
    argv, launches `kernel` over the grid and block in argv[1..6] (``cooperative``: every block at
    once, emu_launch_coop) and writes the buffers back."""
    lines = ['#include "kernel.cpp"', "#include <cstdio>", "#include <cstdlib>", "#include <string>",
             "struct AnyPtr { void* p; template <class T> operator T*() const { return (T*)p; } };",
             "struct AnyBlob { std::vector<unsigned char> b;",  # a by-value struct argument, from its bytes
             "    template <class T> operator T() const { T t; std::memcpy(&t, b.data(), sizeof(T)); return t; } };",
             "static AnyBlob blob(const char* hex) { AnyBlob a; for (; hex[0] && hex[1]; hex += 2)",
             "    a.b.push_back((unsigned char)std::strtoul(std::string(hex, 2).c_str(), nullptr, 16)); return a; }",
             "#ifdef EMU_GUARD",  # --asan: the bytes around the tensor poisoned (the guard, the slack)
             "#include <sanitizer/asan_interface.h>",
             "#define EMU_POISON(a, n) ASAN_POISON_MEMORY_REGION(a, n)",
             "#define EMU_UNPOISON(a, n) ASAN_UNPOISON_MEMORY_REGION(a, n)",
             "#else",
             "#define EMU_GUARD 0",
             "#define EMU_POISON(a, n)",
             "#define EMU_UNPOISON(a, n)",
             "#endif",
             "static std::vector<std::vector<unsigned char>> bufs;",
             "static AnyPtr load(const char* path) {",
             "    if (std::string(path) == \"-\") return AnyPtr{nullptr};",
             "    FILE* f = std::fopen(path, \"rb\"); std::fseek(f, 0, SEEK_END); long n = std::ftell(f);",
             "    std::fseek(f, 0, SEEK_SET); bufs.emplace_back((size_t)n + 256);",
             "    unsigned char* base = bufs.back().data();",
             "    unsigned char* p = base + (256 - ((uintptr_t)base & 255)) % 256;",  # 256-byte aligned, as a pool
             "    if (std::fread(p, 1, (size_t)n, f) != (size_t)n) std::abort(); std::fclose(f);",
             "    EMU_POISON(base, (size_t)(p - base));",
             "    EMU_POISON(p + n - EMU_GUARD, (size_t)(base + n + 256 - (p + n - EMU_GUARD)));",
             "    return AnyPtr{p}; }",
             "static void save(const char* path, const AnyPtr& a) {",
             "    if (std::string(path) == \"-\") return;",
             "    for (auto& b : bufs) EMU_UNPOISON(b.data(), b.size());",
             "    FILE* f = std::fopen(path, \"rb\"); std::fseek(f, 0, SEEK_END); long n = std::ftell(f);",
             "    std::fclose(f);",
             "    f = std::fopen(path, \"wb\"); std::fwrite(a.p, 1, (size_t)n, f); std::fclose(f); }",
             "int main(int argc, char** argv) {",
             "    auto u = [&](int i) { return (unsigned)std::atoi(argv[i]); };",
             "    dim3 grid{u(1), u(2), u(3)}, block{u(4), u(5), u(6)};",
             "    bufs.reserve(16);"]
    args, k = [], 7
    for j, f in enumerate(_fmt_items(fmt)):
        if f == "P":
            lines.append(f"    AnyPtr p{j} = load(argv[{k}]);")
            args.append(f"p{j}")
        elif f.endswith("s"):
            lines.append(f"    AnyBlob b{j} = blob(argv[{k}]);")
            args.append(f"b{j}")
        else:
            lines.append(f"    long long i{j} = std::atoll(argv[{k}]);")
            args.append(f"i{j}")
        k += 1
    launcher = "emu_launch_coop" if cooperative else "emu_launch"
    lines.append(f"    {launcher}(grid, block, [&] {{ {kernel}({', '.join(args)}); }});")
    k = 7
    for j, f in enumerate(_fmt_items(fmt)):
        if f == "P":
            lines.append(f"    save(argv[{k}], p{j});")
        k += 1
    lines.append("    return 0;\n}")
    return "\n".join(lines) + "\n"


_BUILT: dict[str, Path] = {}
# -O0: the tests' builds are most of their time, and an unoptimised build pays for its slower run
# (session 44: the emulator's CI test files 148 s on two cores against 208 s at -O1); --optimise
# (-O1) is for long fuzz runs, where the run outweighs the build
_GXX = ["g++", "-std=c++20", "-O0", "-pthread", "-w"]
#: --asan: AddressSanitizer over every build; each buffer's bytes outside the tensor (the guard,
#: the alignment slack) are poisoned, so a kernel's read or write there stops the run
_ASAN = ["-fsanitize=address", "-fno-omit-frame-pointer", f"-DEMU_GUARD={GUARD}"]
_SANITIZE: list[str] = []


def _gxx_flags() -> list[str]:
    return [*_GXX, *_SANITIZE]


def _stderr_gist(err: str) -> str:
    """An AddressSanitizer report's headline, access and first frames (its tail is the allocation's
    stack, which says little); anything else's last 2000 characters."""
    if "ERROR: AddressSanitizer" not in err:
        return err[-2000:]
    lines = err.splitlines()
    start = next(i for i, line in enumerate(lines) if "ERROR: AddressSanitizer" in line)
    keep = [line.strip() for line in lines[start:start + 12]
            if "AddressSanitizer" in line or " of size " in line or line.strip().startswith(("#0", "#1", "#2"))
            or "is located" in line]
    return " | ".join(keep)[:2000]


def _run_env() -> dict[str, str] | None:
    """The emulator's environment: under --asan, no leak report (fiber stacks live until exit) and
    no fake stacks (the fibers switch stacks by swapcontext)."""
    if not _SANITIZE:
        return None
    import os

    return {**os.environ, "ASAN_OPTIONS": "detect_leaks=0:detect_stack_use_after_return=0"}
# the standard headers and emu.h, none of which reads a kernel's -D macros: precompiled once
_PCH_HEADERS = ["algorithm", "cmath", "cstdint", "cstdio", "cstdlib", "cstring", "functional", "string", "vector"]


def _gxx(cmd: list[str], what: str) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(f"g++ failed for {what}:\n{res.stderr[-4000:]}")


def _common(work: Path) -> Path:
    """A folder with the emulator's sources, its runtime compiled once and a precompiled header of
    the standard headers and emu.h (g++ spends about 1.8 s on each of those per kernel build)."""
    key = hashlib.sha256("\0".join([*_gxx_flags(), *(p.read_text() for p in sorted(EMU.iterdir()))]).encode())
    d = work / f"common-{key.hexdigest()[:16]}"
    if (d / "runtime.o").exists() and (d / "emu_pch.h.gch").exists():
        return d
    d.mkdir(parents=True, exist_ok=True)
    for p in EMU.iterdir():
        shutil.copy(p, d / p.name)
    (d / "emu_pch.h").write_text("".join(f"#include <{h}>\n" for h in _PCH_HEADERS) + '#include "emu.h"\n')
    _gxx([*_gxx_flags(), "-I", str(d), "-x", "c++-header", str(d / "emu_pch.h"), "-o", str(d / "emu_pch.h.gch")],
         "the emulator's precompiled header")
    _gxx([*_gxx_flags(), "-I", str(d), "-c", str(d / "runtime.cpp"), "-o", str(d / "runtime.o")],
         "the emulator's runtime")
    return d


def build(file: str, defines: dict[str, int], kernel: str, fmt: str, work: Path, cooperative: bool = False) -> Path:
    """Compile the emulated kernel file with `defines` and a main for `kernel`; cached per source."""
    src = kernel_source(file)
    main = _main_source(kernel, fmt, cooperative)
    flags = [f"-D{k}={v}" for k, v in sorted(defines.items())]
    key = hashlib.sha256("\0".join([src, main, *flags, *_SANITIZE,
                                     *(p.read_text() for p in sorted(EMU.iterdir()))]).encode())
    tag = key.hexdigest()[:16]
    if tag in _BUILT and _BUILT[tag].exists():
        return _BUILT[tag]
    common = _common(work)
    d = work / tag
    d.mkdir(parents=True, exist_ok=True)
    (d / "kernel.cpp").write_text('#include "hal_prelude.cuh"\n' + src)
    # the precompiled header first: g++ uses one only as the main file's first include
    (d / "main.cpp").write_text('#include "emu_pch.h"\n' + main)
    exe = d / "emu"
    _gxx([*_gxx_flags(), "-I", str(common), *flags, str(d / "main.cpp"), str(common / "runtime.o"), "-o", str(exe)],
         f"{file} {flags}")
    _BUILT[tag] = exe
    return exe


@dataclass
class Launched:
    kernel: str  # the plan's last
    outputs: dict[str, np.ndarray]
    kernels: tuple[str, ...] = ()  # every launch's, in order


def run_plan(be: Any, call: Any, buffers: dict[str, np.ndarray | None], outputs: set[str], work: Path) -> Launched:
    """Plan one op on `be` (its `_run` captured), then run the plan's launches in order in the
    emulator with `buffers` (by the launches' buffer names; a workspace the backend would add,
    such as the wide kernels' weights, is passed here too, poisoned); return the output arrays
    read back and the last kernel."""
    plans: list[Any] = []
    be._run = lambda plan, bufs: plans.append(plan)
    call()
    paths: dict[str, Path] = {}
    for name, arr in buffers.items():
        if arr is not None:
            paths[name] = work / f"buf_{name}.bin"
            paths[name].write_bytes(np.ascontiguousarray(arr).tobytes() + bytes([0x5A]) * GUARD)
    for launch in plans[-1]:
        if launch.shared > 256 * 1024:
            raise ValueError(f"{launch.kernel}: {launch.shared} bytes of shared memory (the emulator has 256 KiB)")
        exe = build(launch.file, dict(launch.defines), launch.kernel, launch.fmt, work, launch.cooperative)
        argv = [str(exe), *map(str, launch.grid), *map(str, launch.block)]
        for a, f in zip(launch.args, _fmt_items(launch.fmt), strict=True):
            if f == "P":
                argv.append(str(paths[a]) if a in paths else "-")
            elif f.endswith("s"):
                argv.append(bytes(a).hex())
            else:
                argv.append(str(int(a)))
        res = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=_run_env())
        if res.returncode:
            gist = _stderr_gist(res.stderr)
            raise RuntimeError(f"{launch.kernel}: the emulator exited with {res.returncode}: {gist}")
    out = {}
    for name in outputs:
        arr = buffers[name]
        assert arr is not None
        raw = paths[name].read_bytes()
        if raw[len(raw) - GUARD:] != bytes([0x5A]) * GUARD:
            raise RuntimeError(f"{launch.kernel}: wrote past the end of {name}")
        out[name] = np.frombuffer(raw[:len(raw) - GUARD], arr.dtype).reshape(arr.shape)
    return Launched(plans[-1][-1].kernel, out, tuple(launch.kernel for launch in plans[-1]))


def _aligned_buffer() -> Any:
    """A device-buffer stand-in at a 256-byte aligned address (the emulator's buffers are too)."""
    from hal.backends.cuda import CudaBuffer

    return CudaBuffer(0x10000, 1 << 30, None)


def _planner(be: Any, sms: int | None) -> Any:
    """``be``, or, for `sms` multiprocessors, a fresh H200 backend that plans for that many (its
    own plan cache: plans are keyed by spec and parameters, not by the multiprocessor count)."""
    if sms is None:
        return be
    fewer = h200_backend()
    fewer._sms = sms
    return fewer


def _phys(a: np.ndarray, layout: str) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)) if layout == "NHWC" else a


def _logical(a: np.ndarray, layout: str) -> np.ndarray:
    return a.transpose(0, 3, 1, 2) if layout == "NHWC" else a


def check_conv(be: Any, rng: np.random.Generator, work: Path, shape: tuple[int, int, int, int], cout: int,
               layout: str, padding: Any, params: dict[str, int], bias: bool = True,
               k: int = 3, sms: int | None = None) -> tuple[str, bool, str]:
    """A float16 k x k conv through the launcher's plan, against the float64 oracle; `sms`
    plans for fewer multiprocessors (persistent blocks then walk several tiles)."""
    from hal import reference as ref
    from hal import spec as S

    be = _planner(be, sms)
    sp = S.conv2d_spec(S.TensorGeometry(*shape, layout, np.dtype(np.float16)), (cout, shape[1], k, k), bias,
                       (cout,) if bias else None, 1, padding, 1, 1)
    x = rng.standard_normal(shape).astype(np.float16)
    w = (rng.standard_normal(sp.weight_shape) / np.sqrt(shape[1] * k * k)).astype(np.float16)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    want = ref.conv2d_from_spec(sp, x.astype(np.float64), w.astype(np.float64), b)
    scale = ref.conv2d_from_spec(sp, np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)),
                                 None if b is None else np.abs(b))
    from hal.backends.cuda import tc_wide_weight_halves

    n, c, oh, ow = sp.out_shape
    y = np.full((n, oh, ow, c) if layout == "NHWC" else (n, c, oh, ow), np.nan, np.float16)
    wp = np.full(tc_wide_weight_halves(shape[1], cout, k * k), np.nan, np.float16)  # the wide kernels' workspace
    # NHWC workspaces of x and y: an NCHW conv whose own streamed-weight build does not fit runs the NHWC one
    xt, yt = np.full(x.size, np.nan, np.float16), np.full(y.size, np.nan, np.float16)
    dummy = _aligned_buffer()
    r = run_plan(be, lambda: be.conv2d(sp, dummy, dummy, dummy if bias else None, dummy, params),
                 {"x": _phys(x, layout), "w": w, "b": b, "y": y, "wp": wp, "xt": xt, "yt": yt}, {"y"}, work)
    got = _logical(r.outputs["y"], layout).astype(np.float64)
    err = np.abs(got - want) / (scale + np.abs(want) + 1e-30)
    ok = bool(np.isfinite(got).all() and (err <= 1.5e-3).all())
    return r.kernel, ok, "" if ok else f"max rel err {np.nanmax(err):.3g}, {int((~np.isfinite(got)).sum())} unwritten"


def _check_1x1(be: Any, rng: np.random.Generator, work: Path, shape: tuple[int, int, int, int], cout: int,
               dtype: Any, layout: str, stride: Any, padding: Any, params: dict[str, int], bias: bool, relu: bool,
               kernel: str, alone: bool, tol: float, sms: int | None = None,
               expect: tuple[str, ...] | None = None) -> tuple[str, bool, str]:
    """A dense 1x1 conv through the launcher's plan with `params`, which must launch `kernel` (alone, or
    among others, such as NCHW's transposes; with `expect`, exactly those launches); y and the workspaces
    (NHWC xt / yt, the sampled input xs) poisoned with NaN, and with `alone` or `expect` x, w and xs
    followed by as many NaNs as they hold (a read past either's end, even one a zero multiplies, makes a
    NaN; with `expect`, xs's NaN tail must also come back untouched). Against the float64 oracle: float16
    within `tol` of sum |x||w| + |b| + |y|
    (check_conv's rule), float32 within `tol` of sum |x||w| + |b|; `relu` fuses ReLU; `sms` plans for
    that many multiprocessors (persistent blocks then walk several tiles)."""
    from hal import reference as ref
    from hal import spec as S

    be = _planner(be, sms)

    sp = S.conv2d_spec(S.TensorGeometry(*shape, layout, np.dtype(dtype)), (cout, shape[1], 1, 1), bias,
                       (cout,) if bias else None, stride, padding, 1, 1)
    sp = replace(sp, relu=relu)
    x = rng.standard_normal(shape).astype(dtype)
    w = (rng.standard_normal(sp.weight_shape) / np.sqrt(shape[1])).astype(dtype)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    want = ref.conv2d_from_spec(sp, x.astype(np.float64), w.astype(np.float64), b)
    scale = ref.conv2d_from_spec(replace(sp, relu=False), np.abs(x.astype(np.float64)),
                                 np.abs(w.astype(np.float64)), None if b is None else np.abs(b))
    if np.dtype(dtype).itemsize == 2:  # float16, bfloat16: the output's rounding
        scale = scale + np.abs(want)
    n, c, oh, ow = sp.out_shape
    y = np.full((n, oh, ow, c) if layout == "NHWC" else (n, c, oh, ow), np.nan, dtype)

    def nan_tail(a: np.ndarray) -> np.ndarray:
        return np.concatenate([a.ravel(), np.full(a.size, np.nan, a.dtype)]) if alone or expect else a

    dummy = _aligned_buffer()
    r = run_plan(be, lambda: be.conv2d(sp, dummy, dummy, dummy if bias else None, dummy, params),
                 {"x": nan_tail(_phys(x, layout)), "w": nan_tail(w), "b": b, "y": y,
                  "xt": np.full(x.size, np.nan, dtype), "yt": np.full(y.size, np.nan, dtype),
                  "xs": nan_tail(np.full(n * shape[1] * oh * ow, np.nan, dtype))}, {"y", "xs"}, work)
    if expect is not None and r.kernels != expect:
        return r.kernel, False, f"planned {list(r.kernels)}, not {list(expect)}"
    if expect is not None and not np.isnan(r.outputs["xs"][n * shape[1] * oh * ow:].astype(np.float32)).all():
        return r.kernel, False, "wrote past the end of the sampled input xs"
    if (r.kernels != (kernel,)) if alone else (kernel not in r.kernels):
        return r.kernel, False, f"planned {list(r.kernels)}, not {kernel}{' alone' if alone else ''}"
    got = _logical(r.outputs["y"], layout).astype(np.float64)
    err = np.abs(got - want) / (scale + 1e-30)
    ok = bool(np.isfinite(got).all() and (err <= tol).all())
    worst = float(np.max(err[np.isfinite(err)], initial=0.0))
    detail = "" if ok else f"max rel err {worst:.3g}, {int((~np.isfinite(got)).sum())} not finite"
    return kernel, ok, detail


#: the kernel name's suffix by K1G_PERSIST / K1N_PERSIST
_PERSIST_SUFFIX = {0: "", 1: "_persist", 2: "_persist_cs"}


#: the 16-bit tensor-core convs' tolerance relative to sum |x||w| + |b| + |y|: float16's rounding of the
#: output (11 bits) or bfloat16's (8 bits: 2**-8), plus float32 sums
TC_TOL = {"float16": 1.5e-3, "bfloat16": 8e-3}


def check_k1_gemm(be: Any, rng: np.random.Generator, work: Path, shape: tuple[int, int, int, int], cout: int,
                  layout: str = "NHWC", stride: Any = 1, padding: Any = 0, params: dict[str, int] | None = None,
                  bias: bool = True, relu: bool = False, sms: int | None = None,
                  dtype: Any = np.float16) -> tuple[str, bool, str]:
    """A float16 (or `dtype`: bfloat16) 1x1 conv with CONV_K1_GEMM on (and `params`): ``conv2d_k1_gemm``
    (NCHW: between two layout transposes, whose NHWC workspaces are poisoned too), or with K1G_PERSIST its
    persistent kernel, planned for `sms` multiprocessors; see _check_1x1."""
    params = {"CONV_K1_GEMM": 1, **(params or {})}
    kernel = "conv2d_k1_gemm" + _PERSIST_SUFFIX[params.get("K1G_PERSIST", 0)]
    return _check_1x1(be, rng, work, shape, cout, dtype, layout, stride, padding, params, bias, relu, kernel,
                      False, TC_TOL[np.dtype(dtype).name], sms)


def check_ldmatrix(work: Path) -> tuple[str, bool, str]:
    """The emulated ldmatrix.x4 and ldmatrix.x4.trans against the PTX ISA's fragment layout, computed here
    independently: four 8x8 b16 matrices (element (m, r, c) = 64 m + 8 r + c) whose rows lie 48 bytes
    apart in shared memory, lane 8 m + r giving row r of matrix m; lane t must get (row t / 4, columns
    2 (t % 4), + 1) of each matrix, low half first, and with .trans (rows 2 (t % 4), + 1, column t / 4)."""
    common = _common(work)
    d = work / "ldmatrix"
    d.mkdir(parents=True, exist_ok=True)
    (d / "main.cpp").write_text("\n".join([
        '#include "emu_pch.h"', "#include <cstdio>",
        "static unsigned out[2][32][4];",
        "int main() {",
        "    emu_launch(dim3{1, 1, 1}, dim3{32, 1, 1}, [&] {",
        "        const int t = threadIdx.x;",
        "        for (int c = 0; c < 8; ++c) {",  # lane t (matrix t / 8, row t % 8) writes its row
        "            const uint16_t v = (uint16_t)(64 * (t / 8) + 8 * (t % 8) + c);",
        "            std::memcpy(smem_raw + 48 * t + 2 * c, &v, 2); }",
        "        __syncthreads();",
        "        unsigned* o = out[0][t];",
        "        emu_ldsm_x4(48u * t, o[0], o[1], o[2], o[3]);",
        "        o = out[1][t];",
        "        emu_ldsm_x4_trans(48u * t, o[0], o[1], o[2], o[3]); });",
        "    std::fwrite(out, sizeof out, 1, stdout);",
        "    return 0; }", ""]))
    exe = d / "ldmatrix"
    _gxx([*_GXX, "-I", str(common), str(d / "main.cpp"), str(common / "runtime.o"), "-o", str(exe)], "ldmatrix")
    got = np.frombuffer(subprocess.run([str(exe)], capture_output=True, check=True).stdout, np.uint32)
    got = got.reshape(2, 32, 4)
    want = np.zeros((2, 32, 4), np.uint32)
    for t in range(32):
        for m in range(4):
            lo, hi = 64 * m + 8 * (t // 4) + 2 * (t % 4), 64 * m + 8 * (t // 4) + 2 * (t % 4) + 1
            want[0, t, m] = lo | hi << 16
            lo, hi = 64 * m + 8 * (2 * (t % 4)) + t // 4, 64 * m + 8 * (2 * (t % 4) + 1) + t // 4
            want[1, t, m] = lo | hi << 16
    bad = [name for i, name in enumerate(("ldmatrix.x4", "ldmatrix.x4.trans")) if not (got[i] == want[i]).all()]
    return "emu_ldsm_x4(_trans)", not bad, ", ".join(f"{b} wrong" for b in bad)


def check_k1_nchw(be: Any, rng: np.random.Generator, work: Path, shape: tuple[int, int, int, int], cout: int,
                  params: dict[str, int] | None = None, bias: bool = True,
                  relu: bool = False, sms: int | None = None, stride: Any = 1,
                  padding: Any = 0, dtype: Any = np.float16) -> tuple[str, bool, str]:
    """A float16 (or `dtype`: bfloat16) NCHW 1x1 conv with CONV_K1_NCHW on (and `params`):
    ``conv2d_k1_gemm_nchw``, or with K1N_PERSIST its persistent kernel, planned for `sms` multiprocessors,
    alone (no transposes) at stride 1 without padding, else after ``sample_planes`` (the sampled input in
    the poisoned workspace xs); see _check_1x1."""
    params = {"CONV_K1_NCHW": 1, **(params or {})}
    kernel = "conv2d_k1_gemm_nchw" + _PERSIST_SUFFIX[params.get("K1N_PERSIST", 0)]
    tol = TC_TOL[np.dtype(dtype).name]
    if stride in (1, (1, 1)) and padding in (0, (0, 0, 0, 0)):
        return _check_1x1(be, rng, work, shape, cout, dtype, "NCHW", 1, 0, params, bias, relu, kernel, True,
                          tol, sms)
    return _check_1x1(be, rng, work, shape, cout, dtype, "NCHW", stride, padding, params, bias, relu, kernel,
                      False, tol, sms,
                      ("sample_planes_rows8" if params.get("K1N_SAMPLE") else "sample_planes", kernel))


def check_k1_simt(be: Any, rng: np.random.Generator, work: Path, shape: tuple[int, int, int, int], cout: int,
                  layout: str = "NHWC", stride: Any = 1, padding: Any = 0, params: dict[str, int] | None = None,
                  bias: bool = True, relu: bool = False) -> tuple[str, bool, str]:
    """A float32 1x1 conv with CONV_K1_SIMT on (and `params`): ``conv2d_k1_simt`` alone (both layouts
    natively), within 1e-5 of sum |x||w| + |b| (check_cuda.py's float32 tolerance); see _check_1x1."""
    return _check_1x1(be, rng, work, shape, cout, np.float32, layout, stride, padding,
                      {"CONV_K1_SIMT": 1, **(params or {})}, bias, relu, "conv2d_k1_simt", True, 1e-5)


def check_tiled(be: Any, rng: np.random.Generator, work: Path, shape: tuple[int, int, int, int], cout: int,
                groups: int, layout: str, dtype: Any, params: dict[str, int], k: tuple[int, int] = (3, 3),
                stride: Any = 1, padding: Any = 1, dilation: Any = 1, bias: bool = True,
                kernel: str = "", sms: int | None = None) -> tuple[str, bool, str]:
    """A conv the register-tiled direct kernel serves (grouped, strided, dilated, any window;
    float32 or float16, both layouts), or another kernel the parameters pick (`kernel` names a
    kernel the plan must launch), against the float64 oracle under the conformance tolerance, the
    output poisoned; `sms` plans for fewer multiprocessors (persistent blocks walk several tiles)."""
    from hal import conformance
    from hal import reference as ref
    from hal import spec as S

    be = _planner(be, sms)

    sp = S.conv2d_spec(S.TensorGeometry(*shape, layout, np.dtype(dtype)), (cout, shape[1] // groups, *k), bias,
                       (cout,) if bias else None, stride, padding, dilation, groups)
    x = rng.standard_normal(shape).astype(dtype)
    w = (rng.standard_normal(sp.weight_shape) / np.sqrt(sp.weight_shape[1] * k[0] * k[1])).astype(dtype)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    want = ref.conv2d_from_spec(sp, x.astype(np.float64), w.astype(np.float64), b)
    scale = ref.conv2d_from_spec(sp, np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)),
                                 None if b is None else np.abs(b))
    from hal.backends.cuda import tc_wide_weight_halves

    n, c, oh, ow = sp.out_shape
    y = np.full((n, oh, ow, c) if layout == "NHWC" else (n, c, oh, ow), np.nan, dtype)
    # the streamed-weight kernels' workspace (16-bit: float16 or bfloat16), and NCHW's NHWC copies of x
    # and y, poisoned
    wp = np.full(tc_wide_weight_halves(shape[1], cout, k[0] * k[1]), np.nan,
                 dtype if np.dtype(dtype).itemsize == 2 else np.float16)
    xt, yt = np.full(x.size, np.nan, dtype), np.full(y.size, np.nan, dtype)
    dummy = _aligned_buffer()
    r = run_plan(be, lambda: be.conv2d(sp, dummy, dummy, dummy if bias else None, dummy, params),
                 {"x": _phys(x, layout), "w": w, "b": b, "y": y, "wp": wp, "xt": xt, "yt": yt}, {"y"}, work)
    got = _logical(r.outputs["y"], layout).astype(np.float64)
    cmp = conformance.compare("conv2d", dtype, got, want, np.maximum(scale, 1e-30))
    detail = "" if cmp.ok else f"{cmp.detail} (max err {cmp.max_error:.3g})"
    if not detail and not np.isfinite(got).all():
        detail = f"{int((~np.isfinite(got)).sum())} unwritten"
    if not detail and kernel and kernel not in r.kernels:  # (NCHW's tensor-core plans end in a transpose)
        detail = f"served by {list(r.kernels)}, not {kernel}"
    return kernel or r.kernel, not detail, detail


def check_dwconv(be: Any, rng: np.random.Generator, work: Path, shape: tuple[int, int, int, int], dtype: Any,
                 padding: Any, params: dict[str, int], bias: bool = True, sms: int | None = None,
                 same_as: dict[str, int] | None = None, layout: str = "NHWC",
                 kernel: str | None = None) -> tuple[str, bool, str]:
    """A depthwise 3x3 stride-1 conv (NHWC unless `layout`) through the launcher's plan (on `sms` multiprocessors
    if given: fewer persistent blocks, several tiles each), against the float64 oracle under
    the conformance tolerance; with `same_as`, also bit for bit against the plan of those params;
    with `kernel`, the plan must launch that kernel."""
    from hal import conformance
    from hal import reference as ref
    from hal import spec as S

    c = shape[1]
    sp = S.conv2d_spec(S.TensorGeometry(*shape, layout, np.dtype(dtype)), (c, 1, 3, 3), bias,
                       (c,) if bias else None, 1, padding, 1, c)
    x = rng.standard_normal(shape).astype(dtype)
    w = (rng.standard_normal(sp.weight_shape) / 3.0).astype(dtype)
    b = rng.standard_normal(c).astype(np.float32) if bias else None
    want = ref.conv2d_from_spec(sp, x.astype(np.float64), w.astype(np.float64), b)
    scale = ref.conv2d_from_spec(sp, np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)),
                                 None if b is None else np.abs(b))
    n, _, oh, ow = sp.out_shape
    dummy = _aligned_buffer()
    be = _planner(be, sms)
    outs = []
    for ps in (params, same_as) if same_as is not None else (params,):
        y = _phys(np.full((n, c, oh, ow), np.nan, dtype), layout)
        outs.append(run_plan(be, lambda ps=ps: be.conv2d(sp, dummy, dummy, dummy if bias else None, dummy, ps),
                             {"x": _phys(x, layout), "w": w, "b": b, "y": y}, {"y"}, work))
    got = _logical(outs[0].outputs["y"], layout)
    cmp = conformance.compare("conv2d", dtype, got, want, np.maximum(scale, 1e-30))
    detail = "" if cmp.ok else f"{cmp.detail} (max err {cmp.max_error:.3g})"
    if cmp.ok and not np.isfinite(got).all():
        detail = f"{int((~np.isfinite(got)).sum())} unwritten"
    if not detail and same_as is not None:
        other = outs[1].outputs["y"]
        if not np.array_equal(outs[0].outputs["y"].view(np.uint8), other.view(np.uint8)):
            detail = f"differs bitwise from {outs[1].kernel} in {int((outs[0].outputs['y'] != other).sum())} places"
    if not detail and kernel and outs[0].kernel != kernel:
        detail = f"served by {outs[0].kernel}, not {kernel}"
    return outs[0].kernel, not detail, detail


def check_bn_infer(be: Any, rng: np.random.Generator, work: Path, shape: tuple[int, int, int, int], dtype: Any,
                   layout: str, params: dict[str, int], sms: int | None = None,
                   same_as: dict[str, int] | None = None) -> tuple[str, bool, str]:
    """BatchNorm inference through the launcher's plan (the flat kernels of batch_norm.cu; on
    `sms` multiprocessors if given, so that persistent blocks walk several tiles), against the
    float64 oracle (NaN inputs included); with `same_as`, also bit for bit against that plan."""
    from hal import conformance
    from hal import reference as ref
    from hal import spec as S

    sp = S.batch_norm_spec(S.TensorGeometry(*shape, layout, np.dtype(dtype)), False, 0.1, 1e-5, True)
    c = shape[1]
    x = (rng.standard_normal(shape) * 2.0 + 0.5).astype(dtype)
    x.flat[rng.choice(x.size, max(1, x.size // 500), replace=False)] = np.nan
    rm = rng.standard_normal(c).astype(np.float32)
    rv = (rng.random(c) + 0.5).astype(np.float32)
    w = rng.standard_normal(c).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    want = ref.batch_norm_from_spec(sp, x, rm, rv, w, b)
    dummy = _aligned_buffer()
    be = _planner(be, sms)
    outs = []
    for ps in (params, same_as) if same_as is not None else (params,):
        y = np.full(_phys(x, layout).shape, np.nan, dtype)
        outs.append(run_plan(be, lambda ps=ps: be.batch_norm(sp, dummy, dummy, dummy, dummy, dummy, dummy, ps),
                             {"x": _phys(x, layout), "y": y, "w": w, "b": b, "rm": rm, "rv": rv}, {"y"}, work))
    got = _logical(outs[0].outputs["y"], layout)
    cmp = conformance.compare("batch_norm", dtype, got, want)
    detail = "" if cmp.ok else f"{cmp.detail} (max err {cmp.max_error:.3g})"
    if not detail and same_as is not None:
        other = outs[1].outputs["y"]
        if not np.array_equal(outs[0].outputs["y"].view(np.uint8), other.view(np.uint8)):
            detail = f"differs bitwise from {outs[1].kernel}"
    return outs[0].kernel, not detail, detail


def check_bn_train(be: Any, rng: np.random.Generator, work: Path, shape: tuple[int, int, int, int], dtype: Any,
                   layout: str, params: dict[str, int], sms: int | None = None, data: str = "normal",
                   kernel: str | None = None) -> tuple[str, bool, str]:
    """BatchNorm training through the launcher's plan (statistics, finalize or the merged
    apply, apply; on `sms` multiprocessors if given), y and the running statistics against the
    float64 oracle. `data`: "normal" (N(0.5, 2)), "big_mean" (1e4 + N(0, 1), where cancellation
    shows), or "outlier" (N(0, 1) with every channel's first element at 1e3: the pivots of
    the shifted sums as far from the mean as data gets). `kernel`: fail unless the plan's last
    launch is that kernel."""
    from hal import conformance
    from hal import reference as ref
    from hal import spec as S

    sp = S.batch_norm_spec(S.TensorGeometry(*shape, layout, np.dtype(dtype)), True, 0.1, 1e-5, True)
    c = shape[1]
    if data == "big_mean":
        x64 = 1e4 + rng.standard_normal(shape)
    else:
        x64 = rng.standard_normal(shape) * 2.0 + 0.5
        if data == "outlier":
            x64[0, :, 0, 0] = 1e3
    x = x64.astype(dtype)
    rm = rng.standard_normal(c).astype(np.float32)
    rv = (rng.random(c) + 0.5).astype(np.float32)
    wt = rng.standard_normal(c).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    rm_want, rv_want = rm.astype(np.float64), rv.astype(np.float64)
    want = ref.batch_norm_from_spec(sp, x, rm_want, rv_want, wt, b)
    dummy = _aligned_buffer()
    planner = _planner(be, sms)
    plans: list[Any] = []
    run = planner._run
    planner._run = lambda plan, bufs: plans.append(plan)
    planner.batch_norm(sp, dummy, dummy, dummy, dummy, dummy, dummy, params)
    planner._run = run
    slabs = int(np.frombuffer(bytes(plans[-1][0].args[-1])[:4], np.int32)[0])  # BnParams.slabs
    nan = np.full(c, np.nan, np.float32)
    bufs = {"x": _phys(x, layout), "y": np.full(_phys(x, layout).shape, np.nan, dtype), "w": wt, "b": b,
            "rm": rm.copy(), "rv": rv.copy(), "part": np.full(3 * c * slabs, np.nan, np.float32),
            "mean": nan.copy(), "var": nan.copy(), "scale": nan.copy(), "beta": nan.copy(),
            # batch_norm_train_fused (BnFused.blocks where BnParams.slabs is): its constants and barrier words
            "aff": np.full(3 * c, np.nan, np.float32), "bar": np.zeros(64, np.uint32)}
    got = run_plan(planner, lambda: planner.batch_norm(sp, dummy, dummy, dummy, dummy, dummy, dummy, params),
                   bufs, {"y", "rm", "rv"}, work)
    detail = ""
    cmp = conformance.compare("batch_norm", dtype, _logical(got.outputs["y"], layout), want,
                              scale=conformance.bn_scale(x, wt, 1e-5, True))
    if not cmp.ok:
        detail = f"y: {cmp.detail} (max err {cmp.max_error:.3g})"
    # the running statistics take 0.1 of the batch's: a float32 mean is good to a few ulps of
    # the channel's largest |x|, a variance to a few ulps of itself
    span = np.abs(x.astype(np.float64)).max(axis=(0, 2, 3))
    for name, arr, exp, scale in (("running_mean", got.outputs["rm"], rm_want, np.abs(rm_want) + 0.1 * span),
                                  ("running_var", got.outputs["rv"], rv_want, np.abs(rv_want))):
        err = np.abs(arr.astype(np.float64) - exp) / scale
        if not np.all(err < 2e-5):
            detail += f" {name}: error {float(np.nanmax(err)):.3g} of its scale"
    if kernel and got.kernel != kernel:
        detail += f" ran {got.kernel}, not {kernel}"
    return got.kernel, not detail, detail.strip()


def check_qconv(be: Any, rng: np.random.Generator, work: Path, shape: tuple[int, int, int, int], cout: int,
                layout: str, padding: Any, xd: Any, wd: Any, out: Any, bias: bool = True,
                stride: int = 1, groups: int = 1) -> tuple[str, bool, str]:
    """An int8/uint8 conv through the launcher's plan, exactly against the quantized oracle,
    the output filled with the dtype's minimum, then its maximum."""
    from hal import reference as ref
    from hal import spec as S

    conv = S.conv2d_spec(S.TensorGeometry(*shape, layout, np.dtype(xd)), (cout, shape[1] // groups, 3, 3), False,
                         None, stride, padding, 1, groups)
    xi, wi, o = np.iinfo(xd), np.iinfo(wd), np.dtype(out)
    yzp = 0 if o == np.int32 else int(rng.integers(np.iinfo(o).min, np.iinfo(o).max + 1))
    sp = S.QConv2dSpec(conv, np.dtype(wd), o, int(rng.integers(xi.min, xi.max + 1)), yzp, True)
    x = rng.integers(xi.min, xi.max + 1, shape).astype(xd)
    w = rng.integers(wi.min, wi.max + 1, conv.weight_shape).astype(wd)
    b = rng.integers(-20000, 20000, cout).astype(np.int32) if bias else None
    wz = rng.integers(wi.min, wi.max + 1, cout).astype(np.int32)
    m = None if o == np.int32 else (rng.random(cout) * 4e-3 + 1e-4).astype(np.float32)
    want = ref.qconv2d_from_spec(sp, x, w, b, wz, m)
    n, c, oh, ow = conv.out_shape
    kernel, detail = "", ""
    fills = (-7, 1 << 20) if o == np.int32 else (np.iinfo(o).min, np.iinfo(o).max)
    d = _aligned_buffer()

    def call() -> None:
        be.qconv2d(sp, d, d, d if bias else None, d, d, d if m is not None else None, {})

    for fill in fills:
        y = np.full((n, oh, ow, c) if layout == "NHWC" else (n, c, oh, ow), fill, o)
        r = run_plan(be, call, {"x": _phys(x, layout), "w": w, "b": b, "y": y, "wz": wz, "m": m}, {"y"}, work)
        kernel = r.kernel
        got = _logical(r.outputs["y"], layout)
        if not np.array_equal(got, want):
            bad = np.argwhere(got != want)
            i = tuple(bad[0])
            detail = f"fill {fill}: {len(bad)} differ, first at {i}: got {got[i]}, want {want[i]}"
            break
    return kernel, not detail, detail


def check_gvec(be: Any, rng: np.random.Generator, work: Path, shape: tuple[int, int, int, int], dtype: Any,
               kind: str, params: dict[str, int], sms: int | None = None, nan_frac: float = 0.0
               ) -> tuple[str, bool, str]:
    """NHWC global pooling without indices (``adaptive_pool2d_{max,avg}_gvec``) through the
    launcher's plan (for `sms` multiprocessors if given: fewer pairs reach the kernel, and its
    smaller grid makes warps walk the grid-stride loop) against the float64 oracle, a fraction
    `nan_frac` of NaN inputs; fails where the plan is another kernel."""
    from hal import conformance
    from hal import reference as ref
    from hal import spec as S

    sp = S.adaptive_pool2d_spec(kind, S.TensorGeometry(*shape, "NHWC", np.dtype(dtype)), (1, 1), False)
    x = rng.standard_normal(shape).astype(dtype)
    if nan_frac:
        x[rng.random(shape) < nan_frac] = np.nan
    want, _ = ref.pool2d_from_spec(sp, x.astype(np.float64))
    y = np.full((shape[0], 1, 1, shape[1]), np.nan, dtype)
    dummy = _aligned_buffer()
    be = _planner(be, sms)
    got = run_plan(be, lambda: be.adaptive_pool2d(sp, dummy, dummy, None, params), {"x": _phys(x, "NHWC"), "y": y},
                   {"y"}, work)
    with np.errstate(invalid="ignore"):
        cmp = conformance.compare(f"adaptive_{kind}_pool2d", dtype, _logical(got.outputs["y"], "NHWC"), want)
    detail = "" if cmp.ok else f"{cmp.detail} (max err {cmp.max_error:.3g})"
    if not detail and got.kernel != f"adaptive_pool2d_{kind}_gvec":
        detail = f"planned {got.kernel}, not the gvec kernel"
    return got.kernel, not detail, detail


def _run_pooling(be: Any, launcher: str, op: str, sp: Any, x: np.ndarray, layout: str, want: np.ndarray,
                 want_i: np.ndarray | None, scale: Any, params: dict[str, int] | None, kernel: str | None,
                 sms: int | None, work: Path) -> tuple[str, bool, str]:
    """check_pool's and check_adaptive's run: `launcher`'s plan on `x`, the output poisoned with NaN and the
    indices (if the spec asks) with -1, compared with the oracle's `want` (and `want_i`) as `op`; `kernel`:
    the plan's last launch must be that one."""
    from hal import conformance

    indices = bool(sp.return_indices)
    n, c, oh, ow = sp.out_shape
    out_shape = (n, oh, ow, c) if layout == "NHWC" else (n, c, oh, ow)
    y = np.full(out_shape, np.nan, x.dtype)
    ind = np.full(out_shape, -1, np.int64) if indices else None
    dummy = _aligned_buffer()
    be = _planner(be, sms)
    launch = getattr(be, launcher)
    got = run_plan(be, lambda: launch(sp, dummy, dummy, dummy if indices else None, params or {}),
                   {"x": _phys(x, layout), "y": y, "i": ind}, {"y", "i"} if indices else {"y"}, work)
    cmp = conformance.compare(op, x.dtype, _logical(got.outputs["y"], layout), want, scale)
    detail = "" if cmp.ok else f"{cmp.detail} (max err {cmp.max_error:.3g})"
    if not detail and indices:
        ci = conformance.compare_indices(_logical(got.outputs["i"], layout), want_i)
        detail = "" if ci.ok else f"indices: {ci.detail}"
    if not detail and kernel and got.kernel != kernel:
        detail = f"served by {got.kernel}, not {kernel}"
    return got.kernel, not detail, detail


def check_pool(be: Any, rng: np.random.Generator, work: Path, shape: tuple[int, int, int, int], dtype: Any,
               layout: str, kind: str, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, count_include_pad: bool = True, divisor: int | None = None,
               indices: bool = False, params: dict[str, int] | None = None, relu: bool = False,
               kernel: str | None = None, sms: int | None = None) -> tuple[str, bool, str]:
    """Max or average pooling (pool2d.cu, any dtype, both layouts) through the launcher's plan with `params`,
    against the float64 oracle under the conformance tolerance: a twentieth of max pooling's inputs NaN, the
    output poisoned with NaN and the indices with -1; `kernel`: the plan's last launch must be that one."""
    from hal import reference as ref
    from hal import spec as S

    sp = S.pool2d_spec(kind, S.TensorGeometry(*shape, layout, np.dtype(dtype)), kernel_size, stride, padding,
                       dilation, ceil_mode, count_include_pad, divisor, indices)
    sp = replace(sp, relu=relu)
    x64 = rng.standard_normal(shape)
    if kind == "max":
        x64[rng.random(shape) < 0.05] = np.nan
    x = x64.astype(dtype)
    want, want_i = ref.pool2d_from_spec(sp, x.astype(np.float64))
    scale = 1.0
    if kind == "avg":
        scale = np.maximum(ref.pool2d_from_spec(replace(sp, relu=False), np.abs(x.astype(np.float64)))[0], 1.0)
    return _run_pooling(be, "pool2d", f"{kind}_pool2d", sp, x, layout, want, want_i, scale, params, kernel, sms,
                        work)


def check_adaptive(be: Any, rng: np.random.Generator, work: Path, shape: tuple[int, int, int, int], dtype: Any,
                   layout: str, kind: str, out: tuple[int, int], indices: bool = False,
                   params: dict[str, int] | None = None, kernel: str | None = None,
                   sms: int | None = None) -> tuple[str, bool, str]:
    """Adaptive (and global) max or average pooling (adaptive_pool2d.cu) through the launcher's plan for
    `sms` multiprocessors if given (fewer outputs then reach the kernels that fill the GPU), against the
    float64 oracle: a twentieth of max pooling's inputs NaN, the output poisoned with NaN and the indices
    with -1; `kernel`: the plan's last launch must be that one."""
    from hal import reference as ref
    from hal import spec as S

    sp = S.adaptive_pool2d_spec(kind, S.TensorGeometry(*shape, layout, np.dtype(dtype)), out, indices)
    x64 = rng.standard_normal(shape)
    if kind == "max":
        x64[rng.random(shape) < 0.05] = np.nan
    x = x64.astype(dtype)
    want, want_i = ref.pool2d_from_spec(sp, x.astype(np.float64))
    return _run_pooling(be, "adaptive_pool2d", f"adaptive_{kind}_pool2d", sp, x, layout, want, want_i, 1.0, params,
                        kernel, sms, work)


def rounding_probes(rng: np.random.Generator, count: int = 1024) -> np.ndarray:
    """float32 values whose rounding to bfloat16 is easy to get wrong: zero, subnormals (ties among them, and
    negative ones that round to -0), exact ties between two bfloat16 values rounding down (even) and up (odd
    below), a float32 ulp either side of a tie, the largest bfloat16, the overflow threshold (a tie at the
    largest bfloat16, which is odd: it rounds up, to infinity) and just below it, float32's largest,
    infinities, NaNs (quiet, signalling, negative, with payloads), then random bit patterns up to `count`
    values in all."""
    words = [0x00000000, 0x80000001, 0x00000001, 0x00007FFF, 0x00008000, 0x00018000, 0x80008000, 0x007F8000,
             0x3F808000, 0x3F818000, 0xBF808000, 0xBF818000, 0x3F807FFF, 0x3F808001, 0x3F818001, 0x3F817FFF,
             0x40490FDB, 0x7F7F0000, 0x7F7F7FFF, 0x7F7F8000, 0xFF7F8000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000,
             0xFF800000, 0x7FC00000, 0x7F800001, 0xFFC00000, 0x7FBFFFFF, 0x7FC12345, 0x0001FFFF, 0x33800000]
    words += rng.integers(0, 1 << 32, count - len(words), dtype=np.uint64).tolist()
    return np.array(words, np.uint64).astype(np.uint32).view(np.float32)


def check_bf16_rounding(be: Any, rng: np.random.Generator, work: Path, layout: str,
                        kernel: str | None = None) -> tuple[str, bool, str]:
    """bfloat16 stores round to nearest even, bit for bit as ml_dtypes (NaN: any NaN): BatchNorm inference
    with zero input, running mean 0, running variance 1 - eps (so the scale is exactly 1) and the probes
    (rounding_probes) as the channels' biases, so each output is fma(0, 1, bias) = the bias, rounded once
    by the store (a -0 bias would come out +0: 0 + -0 is +0, so the probes hold none). NHWC: the flat
    kernel's 16-byte vectors (pack_vec); NCHW, one pixel: the scalar stores (st_act). The output is
    poisoned with NaN first."""
    from hal import spec as S
    from hal.dtypes import BFLOAT16

    assert BFLOAT16 is not None
    probes = rounding_probes(rng)
    c = probes.size
    eps = np.float32(1e-5)
    rv = np.float32(1) - eps
    while np.float32(rv + eps) != np.float32(1):  # the float32 variance whose rv + eps is exactly 1
        rv = np.nextafter(rv, np.float32(2))
    shape = (1, c, 1, 1) if layout == "NCHW" else (2, c, 1, 3)
    sp = S.batch_norm_spec(S.TensorGeometry(*shape, layout, BFLOAT16), False, 0.1, float(eps), True)
    x = np.zeros(_phys(np.zeros(shape), layout).shape, BFLOAT16)
    y = np.full(x.shape, np.nan, BFLOAT16)
    dummy = _aligned_buffer()
    got = run_plan(be, lambda: be.batch_norm(sp, dummy, dummy, None, dummy, dummy, dummy, {}),
                   {"x": x, "y": y, "w": None, "b": probes, "rm": np.zeros(c, np.float32),
                    "rv": np.full(c, rv, np.float32)}, {"y"}, work)
    out = _logical(got.outputs["y"], layout)
    with np.errstate(invalid="ignore"):  # (NaN probes)
        want = np.broadcast_to(probes.astype(BFLOAT16).reshape(1, c, 1, 1), out.shape)
    gw, ww = out.view(np.uint16), np.ascontiguousarray(want).view(np.uint16)
    nan_w = np.isnan(want.astype(np.float32))
    bad = (gw != ww) & ~nan_w | (nan_w & ~np.isnan(out.astype(np.float32)))
    detail = ""
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        detail = (f"{int(bad.sum())} of {bad.size} differ; first: float32 0x{probes[i[1]].view(np.uint32):08x} "
                  f"stored as 0x{gw[i]:04x}, ml_dtypes 0x{ww[i]:04x}")
    if not detail and kernel and got.kernel != kernel:
        detail = f"served by {got.kernel}, not {kernel}"
    return got.kernel, not detail, detail


def bf16_cases(full: bool = False) -> list[tuple[str, str, dict[str, Any]]]:
    """bfloat16 through the kernels that serve it (the storage paths of -DDTYPE_BF16=1): pooling in
    both layouts (the 16-bit pair paths, POOL_H2 and POOL_H2AVG, tiles with and without indices, row
    strips, NHWC walks, a general window, the contract kernel), adaptive and global pooling (NCHW tiles,
    NHWC vectors with indices, the flat NCHW kernel with its plane size built in, gvec), BatchNorm
    training (cooperative and two-pass) and inference, the direct convs (dense 3x3 on CUDA cores, the
    tiled grouped kernel), float16's dense KH, KW <= 3 tensor-core kernels that take bfloat16 on sm_80+
    (conv2d_k3_tc, conv2d_k3_tc_pipe, the streamed-weight, stride-2, 1x1 GEMM, stem and grouped ones: mma
    .bf16) and depthwise (tiles in both layouts,
    NCHW pairs (DW_H2), the NHWC register walk, the NCHW row strips with halos by shuffles), and the
    stores' rounding (what CI runs);
    `full` adds the other register and pipelined depthwise kernels, the tiled kernel's 4-channel vectors,
    the adaptive block and vector kernels and the other pooling strips (the command line's list)."""
    from hal.dtypes import BFLOAT16

    bf = BFLOAT16
    extra = [
        ("bf16 dwconv rows2 NCHW", "dwconv",
         dict(shape=(2, 3, 9, 24), dtype=bf, padding=(1, 0, 1, 1), params={"DW_ROWS": 2}, layout="NCHW",
              kernel="conv2d_dw_rows2_k3s1")),
        ("bf16 dwconv rows4 persistent shfl NCHW", "dwconv",
         dict(shape=(2, 3, 13, 16), dtype=bf, padding=1, params={"DW_ROWS": 4, "DW_SHFL": 2}, layout="NCHW",
              kernel="conv2d_dw_rows4p_k3s1", sms=1)),
        ("bf16 dwconv cols8 NHWC", "dwconv",
         dict(shape=(1, 12, 7, 19), dtype=bf, padding=1, params={"DW_COLS": 8}, layout="NHWC",
              kernel="conv2d_dw_cols8_k3s1")),
        ("bf16 dwconv pipe8x2 NHWC", "dwconv",
         dict(shape=(2, 72, 11, 37), dtype=bf, padding=1, params={"DW_PIPE": 8, "DW_PIPE_COLS": 2}, sms=2,
              layout="NHWC", kernel="conv2d_dw_pipe8x2_k3s1")),
        ("bf16 dwconv tile 8 channels NHWC", "dwconv",
         dict(shape=(1, 16, 9, 11), dtype=bf, padding=1, params={"DW_HALF4": 0}, layout="NHWC",
              kernel="conv2d_dw_tile_k3s1")),
        ("bf16 conv grouped 3x3 vec4 NHWC", "tiled",
         dict(shape=(2, 32, 9, 13), cout=32, groups=4, layout="NHWC", dtype=bf, params={}, bias=False,
              kernel="conv2d_grp_k3s1")),
        ("bf16 conv dense 3x3 simt NHWC", "tiled",
         dict(shape=(1, 12, 11, 35), cout=72, groups=1, layout="NHWC", dtype=bf, params={"CONV_TC": 0},
              kernel="conv2d_k3_simt")),
        ("bf16 adaptive max block NCHW", "adaptive",
         dict(shape=(1, 3, 67, 70), dtype=bf, layout="NCHW", kind="max", out=(1, 2), indices=True,
              kernel="adaptive_pool2d_maxi_block")),
        ("bf16 adaptive avg vec NHWC", "adaptive",
         dict(shape=(2, 16, 9, 10), dtype=bf, layout="NHWC", kind="avg", out=(4, 3), params={"ADAPT_VSPLIT": 0},
              kernel="adaptive_pool2d_avg_vec")),
        ("bf16 global max 7x7 NCHW", "adaptive",
         dict(shape=(1, 40, 7, 7), dtype=bf, layout="NCHW", kind="max", out=(1, 1),
              kernel="adaptive_pool2d_max_gflat")),
        # the rest of float16's dense tensor-core kernels (sm_80+, mma .bf16)
        ("bf16 conv 3x3 wide C104 stages3 3 SMs NCHW", "tiled",
         dict(shape=(2, 104, 11, 40), cout=70, groups=1, layout="NCHW", dtype=bf, sms=3,
              params={"CONV_TC": 3, "TC_WIDE_STAGES": 3}, kernel="conv2d_k3_tc_wide")),
        ("bf16 conv 1x1 wide C264 NHWC", "tiled",
         dict(shape=(2, 264, 9, 40), cout=130, groups=1, layout="NHWC", dtype=bf, k=(1, 1), padding=0,
              params={"CONV_TC": 3}, kernel="conv2d_k1_tc_wide")),
        ("bf16 conv 1x1 s2 wide NHWC", "tiled",
         dict(shape=(2, 40, 13, 34), cout=72, groups=1, layout="NHWC", dtype=bf, k=(1, 1), stride=2, padding=0,
              params={"CONV_TC": 1}, kernel="conv2d_k1s2_tc_wide")),
        ("bf16 k1g persist cs bn64 40->200 1 SM NHWC", "k1g",
         dict(shape=(2, 40, 11, 13), cout=200, bias=False, sms=1, dtype=bf,
              params={"K1G_PERSIST": 2, "K1G_BN": 64})),
        ("bf16 k1n persist 40->70 relu 5x9x16 1 SM", "k1n",
         dict(shape=(5, 40, 9, 16), cout=70, relu=True, sms=1, dtype=bf, params={"K1N_PERSIST": 1})),
        ("bf16 k1n sampled s2 pad1 40->70 3x13x17", "k1n",
         dict(shape=(3, 40, 13, 17), cout=70, stride=2, padding=1, dtype=bf)),
        ("bf16 im2col 5x3 dil2 s(1,2) 4->24 NHWC", "tiled",
         dict(shape=(2, 4, 17, 40), cout=24, groups=1, layout="NHWC", dtype=bf, k=(5, 3), stride=(1, 2),
              dilation=2, padding=2, sms=1, params={"CONV_IM2COL": 1}, kernel="conv2d_im2col_tc")),
        ("bf16 grouped tc cig3 cog5 2x3 NCHW", "tiled",
         dict(shape=(2, 9, 7, 11), cout=15, groups=3, layout="NCHW", dtype=bf, k=(2, 3), padding=(1, 1, 0, 2),
              bias=False, params={"GRP_TC": 1, "GRP_TC_ROWS": 4}, kernel="conv2d_grp_tc8")),
        ("bf16 pool max rows2 2x2/2 NCHW", "pool",
         dict(shape=(2, 3, 13, 24), dtype=bf, layout="NCHW", kind="max", kernel_size=2, stride=2,
              ceil_mode=True, params={"POOL_ROWS": 2}, kernel="pool2d_max_rows2_k2s2")),
        ("bf16 pool max ncols4 3x3/2 NHWC", "pool",
         dict(shape=(1, 24, 13, 15), dtype=bf, layout="NHWC", kind="max", kernel_size=3, stride=2, padding=1,
              params={"POOL_NCOLS": 4}, kernel="pool2d_max_ncols4_k3s2")),
    ] if full else []
    core = [
        ("bf16 pool max idx 3x3/2 p1 NCHW", "pool",
         dict(shape=(2, 5, 17, 23), dtype=bf, layout="NCHW", kind="max", kernel_size=3, stride=2, padding=1,
              indices=True, kernel="pool2d_maxi_tile_k3s2")),
        ("bf16 pool avg 3x3/2 ceil excl-pad rows4 NCHW", "pool",
         dict(shape=(1, 3, 19, 32), dtype=bf, layout="NCHW", kind="avg", kernel_size=3, stride=2, padding=1,
              ceil_mode=True, count_include_pad=False, params={"POOL_ROWS": 4},
              kernel="pool2d_avg_rows4_k3s2")),
        ("bf16 pool avg 3x3/2 divisor relu NCHW", "pool",
         dict(shape=(2, 3, 15, 22), dtype=bf, layout="NCHW", kind="avg", kernel_size=3, stride=2, padding=1,
              divisor=5, relu=True, kernel="pool2d_avg_tile_k3s2")),
        # the 16-bit pair paths (even IW, no indices: POOL_H2 max, POOL_H2AVG avg, DW_H2 depthwise), both parities
        ("bf16 pool max pairs 3x3/2 p1 NCHW", "pool",
         dict(shape=(2, 3, 17, 26), dtype=bf, layout="NCHW", kind="max", kernel_size=3, stride=2, padding=1,
              kernel="pool2d_max_tile_k3s2")),
        ("bf16 pool max pairs 2x2/2 ceil NCHW", "pool",
         dict(shape=(1, 3, 13, 22), dtype=bf, layout="NCHW", kind="max", kernel_size=2, stride=2, ceil_mode=True,
              kernel="pool2d_max_tile_k2s2")),
        ("bf16 pool avg pairs 2x2/2 NCHW", "pool",
         dict(shape=(2, 3, 11, 18), dtype=bf, layout="NCHW", kind="avg", kernel_size=2, stride=2,
              kernel="pool2d_avg_tile_k2s2")),
        ("bf16 pool max 2x2/2 NHWC", "pool",
         dict(shape=(2, 24, 13, 11), dtype=bf, layout="NHWC", kind="max", kernel_size=2, stride=2,
              ceil_mode=True, kernel="pool2d_max_tile_k2s2")),
        ("bf16 pool avg 3x3/2 ncols2 NHWC", "pool",
         dict(shape=(1, 16, 11, 13), dtype=bf, layout="NHWC", kind="avg", kernel_size=3, stride=2, padding=1,
              params={"POOL_NCOLS": 2}, kernel="pool2d_avg_ncols2_k3s2")),
        ("bf16 pool max idx 5x3 dil2 asym NHWC", "pool",
         dict(shape=(1, 16, 14, 12), dtype=bf, layout="NHWC", kind="max", kernel_size=(5, 3), stride=(2, 1),
              padding=(1, 2, 0, 1), dilation=2, indices=True, kernel="pool2d_maxi_tile_g")),
        ("bf16 pool avg 3x3/1 C 5 NHWC contract", "pool",
         dict(shape=(2, 5, 9, 7), dtype=bf, layout="NHWC", kind="avg", kernel_size=3, stride=1, padding=1,
              kernel="pool2d_avg")),
        ("bf16 adaptive avg 3x5 NCHW", "adaptive",
         dict(shape=(2, 3, 17, 23), dtype=bf, layout="NCHW", kind="avg", out=(3, 5),
              kernel="adaptive_pool2d_avg_tile")),
        ("bf16 adaptive max idx 4x3 NHWC", "adaptive",
         dict(shape=(1, 24, 9, 10), dtype=bf, layout="NHWC", kind="max", out=(4, 3), indices=True)),
        ("bf16 global avg 7x7 NCHW", "adaptive",
         dict(shape=(2, 37, 7, 7), dtype=bf, layout="NCHW", kind="avg", out=(1, 1),
              kernel="adaptive_pool2d_avg_gflat")),
        ("bf16 global max 5x3 NHWC gvec", "gvec",
         dict(shape=(5, 520, 5, 3), dtype=bf, kind="max", params={}, sms=1, nan_frac=0.05)),
        ("bf16 bn train fused NHWC", "bn-train",
         dict(shape=(2, 24, 5, 7), dtype=bf, layout="NHWC", params={"BN_FUSED": 1}, sms=2,
              kernel="batch_norm_train_fused")),
        ("bf16 bn train two-pass NCHW", "bn-train",
         dict(shape=(3, 5, 7, 9), dtype=bf, layout="NCHW", params={}, data="big_mean")),
        ("bf16 bn infer flat NHWC", "bn", dict(shape=(2, 40, 5, 7), dtype=bf, layout="NHWC", params={})),
        ("bf16 bn infer NCHW", "bn", dict(shape=(2, 5, 7, 9), dtype=bf, layout="NCHW", params={})),
        ("bf16 conv dense 3x3 simt NCHW", "tiled",
         dict(shape=(2, 11, 13, 34), cout=70, groups=1, layout="NCHW", dtype=bf, params={"CONV_TC": 0},
              kernel="conv2d_k3_simt")),
        # the float16 tensor-core kernels that take bfloat16 on sm_80+ (mma .bf16; the H200's plan)
        ("bf16 conv 3x3 tc NHWC", "tiled",
         dict(shape=(1, 16, 7, 37), cout=72, groups=1, layout="NHWC", dtype=bf, params={"CONV_TC": 1},
              kernel="conv2d_k3_tc")),
        ("bf16 conv 2x3 tc C13 asym NCHW", "tiled",
         dict(shape=(2, 13, 6, 35), cout=24, groups=1, layout="NCHW", dtype=bf, params={"CONV_TC": 1}, k=(2, 3),
              padding=(1, 0, 2, 1), bias=False, kernel="conv2d_k3_tc")),
        ("bf16 conv 3x3 tc pipe NHWC", "tiled",
         dict(shape=(1, 24, 11, 35), cout=70, groups=1, layout="NHWC", dtype=bf, params={"CONV_TC": 2}, sms=2,
              kernel="conv2d_k3_tc_pipe")),
        ("bf16 conv 3x3 tc pipe C12 NCHW", "tiled",
         dict(shape=(1, 12, 10, 40), cout=16, groups=1, layout="NCHW", dtype=bf, params={"CONV_TC": 2}, sms=1,
              padding=(0, 1, 1, 2), kernel="conv2d_k3_tc_pipe")),
        ("bf16 conv 3x3 wide C72 NHWC", "tiled",
         dict(shape=(1, 72, 9, 16), cout=64, groups=1, layout="NHWC", dtype=bf, params={"CONV_TC": 2},
              kernel="conv2d_k3_tc_wide")),
        ("bf16 conv 3x3 s2 wide NCHW", "tiled",
         dict(shape=(1, 24, 11, 35), cout=70, groups=1, layout="NCHW", dtype=bf, stride=2,
              padding=(1, 0, 2, 1), params={}, kernel="conv2d_k3s2_tc_wide")),
        ("bf16 k1g s2 pad1 40->70 NHWC", "k1g",
         dict(shape=(2, 40, 17, 19), cout=70, stride=2, padding=1, dtype=bf)),
        ("bf16 k1n 40->70 2x9x16", "k1n", dict(shape=(2, 40, 9, 16), cout=70, dtype=bf)),
        ("bf16 im2col 7x7 s2 stem 3->70 2 SMs NCHW", "tiled",
         dict(shape=(2, 3, 21, 75), cout=70, groups=1, layout="NCHW", dtype=bf, k=(7, 7), stride=2, padding=3,
              sms=2, params={"CONV_IM2COL": 1}, kernel="conv2d_im2col_tc")),
        ("bf16 grouped tc cig16 cog12 NHWC", "tiled",
         dict(shape=(1, 32, 9, 35), cout=24, groups=2, layout="NHWC", dtype=bf, padding=(0, 2, 1, 0),
              params={"GRP_TC": 1}, kernel="conv2d_grp_tc16")),
        ("bf16 conv grouped 3x3/2 NHWC", "tiled",
         dict(shape=(1, 24, 11, 13), cout=16, groups=4, layout="NHWC", dtype=bf, params={}, stride=2,
              padding=(1, 0, 2, 1), kernel="conv2d_grp_g")),
        ("bf16 dwconv tile NCHW", "dwconv",
         dict(shape=(2, 5, 13, 17), dtype=bf, padding=1, params={}, layout="NCHW", kernel="conv2d_dw_tile_k3s1")),
        ("bf16 dwconv pairs NCHW", "dwconv",
         dict(shape=(2, 5, 13, 18), dtype=bf, padding=1, params={}, layout="NCHW", kernel="conv2d_dw_tile_k3s1")),
        ("bf16 dwconv tile NHWC", "dwconv",
         dict(shape=(1, 24, 9, 11), dtype=bf, padding=(1, 0, 0, 1), params={}, layout="NHWC",
              kernel="conv2d_dw_tile_k3s1")),
        ("bf16 dwconv cols4r4 NHWC", "dwconv",
         dict(shape=(2, 12, 9, 10), dtype=bf, padding=1, params={"DW_COLS": 4, "DW_CROWS": 4}, layout="NHWC",
              kernel="conv2d_dw_cols4r4_k3s1")),
        ("bf16 dwconv rows4 shfl NCHW", "dwconv",
         dict(shape=(1, 3, 11, 32), dtype=bf, padding=1, params={"DW_ROWS": 4, "DW_SHFL": 1}, layout="NCHW",
              kernel="conv2d_dw_rows4s_k3s1")),
        ("bf16 rounding vectors NHWC", "round", dict(layout="NHWC", kernel="batch_norm_infer_flat_reg")),
        ("bf16 rounding scalars NCHW", "round", dict(layout="NCHW")),
    ]
    return [*extra, *core]


def cases(quick: bool) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, kind, arguments): float16 tensor-core convs of both kernels and layouts, the
    pipelined NHWC depthwise kernel (float32 and float16, DW_PIPE), and the int8 convs
    (tensor cores where they apply, the CUDA-core kernels elsewhere)."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    for layout in ("NHWC", "NCHW"):
        out.append((f"conv tc3 wide 72->70 {layout}", "conv",
                    dict(shape=(2, 72, 9, 16), cout=70, layout=layout, padding=1, params={"CONV_TC": 3})))
    if not quick:
        out.append(("conv tc3 wide 136->64 asym NHWC", "conv", dict(shape=(1, 136, 10, 35), cout=64, layout="NHWC",
                                                                    padding=(0, 2, 1, 0), params={"CONV_TC": 3})))
        out.append(("conv tc3 wide 24->8 NHWC", "conv",
                    dict(shape=(2, 24, 7, 9), cout=8, layout="NHWC", padding=1, params={"CONV_TC": 3}, bias=False)))
        out.append(("conv tc3 wide 1x1 264->130 NHWC", "conv", dict(shape=(2, 264, 9, 40), cout=130, layout="NHWC",
                                                                    padding=0, params={"CONV_TC": 3}, k=1)))
        out.append(("conv tc3 wide 1x1 pad1 16->24 NHWC", "conv", dict(shape=(1, 16, 5, 7), cout=24, layout="NHWC",
                                                                       padding=1, params={"CONV_TC": 3}, k=1)))
        out.append(("conv tc3 wide 136->64 asym NCHW", "conv", dict(shape=(1, 136, 10, 40), cout=64, layout="NCHW",
                                                                    padding=(0, 2, 1, 0), params={"CONV_TC": 3})))
        out.append(("conv tc3 wide 1x1 264->130 NCHW", "conv", dict(shape=(2, 264, 9, 40), cout=130, layout="NCHW",
                                                                    padding=0, params={"CONV_TC": 3}, k=1)))
        out.append(("conv tc3 wide pad3 NCHW", "conv", dict(shape=(1, 40, 7, 16), cout=24, layout="NCHW", padding=3,
                                                            params={"CONV_TC": 3})))
        # deeper pipelines (TC_WIDE_STAGES), with 3 blocks walking several tiles and chunks each
        for layout in ("NHWC", "NCHW"):
            for k, stages in ((3, 3), (1, 3), (1, 4)):
                out.append((f"conv tc3 wide k{k} stages{stages} 3 SMs {layout}", "conv",
                            dict(shape=(2, 104, 11, 40), cout=70, layout=layout, padding=k // 2, k=k, sms=3,
                                 params={"CONV_TC": 3, "TC_WIDE_STAGES": stages})))
        for layout in ("NHWC", "NCHW"):  # the 1x1 kernel at two blocks per SM: a grid of 2 x SMs
            out.append((f"conv tc3 wide k1 2 blocks stages3 3 SMs {layout}", "conv",
                        dict(shape=(2, 104, 11, 40), cout=70, layout=layout, padding=0, k=1, sms=3,
                             params={"CONV_TC": 3, "TC_WIDE_STAGES": 3, "TC_WIDE_K1_BLOCKS": 2})))
        out.append(("conv tc2 wide 72->64 NHWC", "conv", dict(shape=(1, 72, 9, 16), cout=64, layout="NHWC",
                                                              padding=1, params={"CONV_TC": 2})))
        # the stride-2 streamed-weight kernels (wherever CONV_TC > 0; NCHW through the transposes)
        out.append(("conv tc1 wide s2 3x3 asym NCHW", "tiled",
                    dict(shape=(1, 24, 11, 35), cout=70, groups=1, layout="NCHW", dtype=np.float16, stride=2,
                         padding=(1, 0, 2, 1), params={}, kernel="conv2d_k3s2_tc_wide")))
        out.append(("conv tc1 wide s2 1x1 NHWC", "tiled",
                    dict(shape=(2, 40, 13, 34), cout=72, groups=1, layout="NHWC", dtype=np.float16, k=(1, 1),
                         stride=2, padding=0, params={"CONV_TC": 1}, kernel="conv2d_k1s2_tc_wide")))
    for layout in ("NHWC", "NCHW"):
        for tc in (2, 1):
            out.append((f"conv tc{tc} 24->70 {layout}", "conv",
                        dict(shape=(2, 24, 9, 16), cout=70, layout=layout, padding=1, params={"CONV_TC": tc})))
        if not quick:
            out.append((f"conv tc2 40->64 asym {layout}", "conv",
                        dict(shape=(1, 40, 10, 24), cout=64, layout=layout, padding=(0, 2, 1, 0),
                             params={"CONV_TC": 2}, bias=False)))
            out.append((f"conv tc2 pad3 {layout}", "conv",
                        dict(shape=(1, 16, 7, 16), cout=16, layout=layout, padding=3, params={"CONV_TC": 2})))
    # the 1x1 GEMM kernel (CONV_K1_GEMM, conv2d_k1_gemm): M = N*OH*OW no multiple of 128, C_in 40 (a
    # partial 32-channel stage) and 264 (9 stages: the ring of stage buffers wraps), C_out 70 (a partial
    # N tile; C_out % 8 != 0: the scalar stores) and 136 / 72 (16-byte stores, a second N tile), stride 1,
    # 2 and (2, 1), padding 0, 1 and asymmetric, ReLU, no bias, K1G_BN 64 (asked for, and C_out <= 64),
    # K1G_STAGES 2 and 4, NCHW
    out.append(("k1g s1 40->70 NHWC", "k1g", dict(shape=(2, 40, 9, 13), cout=70)))
    out.append(("k1g s2 pad1 40->70 NHWC", "k1g", dict(shape=(2, 40, 17, 19), cout=70, stride=2, padding=1)))
    if not quick:
        out.append(("k1g s1 40->136 relu nobias NHWC", "k1g",
                    dict(shape=(1, 40, 11, 13), cout=136, relu=True, bias=False)))
        out.append(("k1g s2 264->72 relu NHWC", "k1g", dict(shape=(1, 264, 21, 30), cout=72, stride=2, relu=True)))
        out.append(("k1g s1 pad1 bn64 40->70 NHWC", "k1g",
                    dict(shape=(1, 40, 7, 9), cout=70, padding=1, params={"K1G_BN": 64})))
        out.append(("k1g s1 bn64 104->136 relu NHWC", "k1g",
                    dict(shape=(1, 104, 9, 16), cout=136, relu=True, params={"K1G_BN": 64})))
        out.append(("k1g s1 stages2 104->72 NHWC", "k1g", dict(shape=(1, 104, 9, 16), cout=72,
                                                                params={"K1G_STAGES": 2})))
        out.append(("k1g s1 stages4 104->136 NHWC", "k1g", dict(shape=(1, 104, 9, 16), cout=136,
                                                                 params={"K1G_STAGES": 4})))
        # (C_out <= 64 narrows the tile to K1G_BN 64 whatever the parameter)
        out.append(("k1g s1 stages4 narrowed 104->24 NHWC", "k1g", dict(shape=(1, 104, 9, 16), cout=24,
                                                                         params={"K1G_STAGES": 4})))
        out.append(("k1g s(2,1) asym pad 16->24 NHWC", "k1g",
                    dict(shape=(1, 16, 10, 9), cout=24, stride=(2, 1), padding=(1, 0, 2, 1))))
        out.append(("k1g s2 pad1 40->70 NCHW", "k1g",
                    dict(shape=(2, 40, 9, 13), cout=70, stride=2, padding=1, layout="NCHW")))
        out.append(("k1g s1 40->72 relu NCHW", "k1g", dict(shape=(1, 40, 9, 13), cout=72, relu=True, layout="NCHW")))
    # the persistent 1x1 GEMM (K1G_PERSIST 1, 2: conv2d_k1_gemm_persist(_cs)), planned for 1 or 2 SMs, so that 2
    # or 3 blocks a SM (BN 128 / 64) each walk several tiles, the next tile's stages issued under this one's
    # epilogue: M no multiple of 128 (a partial last tile), C_in 40 (a partial stage; KT 2 < STAGES - 1 with
    # 4 stages: empty prologue groups) and 264 (KT 9: the ring wraps inside each tile), C_out 70 (a partial
    # N tile, scalar stores), 200 and 264 (4 / 3 N tiles: a grid of 3 / 2 blocks is no multiple of them, so
    # a block's N tile and bias change between its tiles), stride 2 with padding, ReLU, no bias, K1G_STAGES
    # 2, 3 and 4, K1G_BN 64 and 128, NCHW (through the transposes), a single tile
    out.append(("k1g persist 40->70 1 SM NHWC", "k1g",
                dict(shape=(3, 40, 13, 17), cout=70, sms=1, params={"K1G_PERSIST": 1})))
    if not quick:
        for st in (2, 3, 4):
            out.append((f"k1g persist stages{st} 264->264 relu 1 SM NHWC", "k1g",
                        dict(shape=(1, 264, 15, 17), cout=264, relu=True, sms=1,
                             params={"K1G_PERSIST": 1, "K1G_STAGES": st})))
            out.append((f"k1g persist cs stages{st} bn64 40->200 nobias 1 SM NHWC", "k1g",
                        dict(shape=(2, 40, 11, 13), cout=200, bias=False, sms=1,
                             params={"K1G_PERSIST": 2, "K1G_STAGES": st, "K1G_BN": 64})))
        out.append(("k1g persist s2 pad1 40->70 relu 2 SMs NHWC", "k1g",
                    dict(shape=(4, 40, 31, 23), cout=70, stride=2, padding=1, relu=True, sms=2,
                         params={"K1G_PERSIST": 1, "K1G_STAGES": 4})))
        out.append(("k1g persist cs narrowed 104->24 1 SM NHWC", "k1g",
                    dict(shape=(2, 104, 13, 17), cout=24, sms=1, params={"K1G_PERSIST": 2})))
        out.append(("k1g persist s2 pad1 40->136 NCHW", "k1g",
                    dict(shape=(2, 40, 21, 23), cout=136, stride=2, padding=1, layout="NCHW", sms=1,
                         params={"K1G_PERSIST": 1})))
        out.append(("k1g persist one tile 16->24", "k1g",
                    dict(shape=(1, 16, 5, 7), cout=24, params={"K1G_PERSIST": 1})))
    # the NCHW 1x1 GEMM without transposes (CONV_K1_NCHW, conv2d_k1_gemm_nchw): pixels flattened over the
    # batch (9x16 = 144 and 7x8 = 56 a image: tiles of 128 that span images, a partial last tile), C_in 40
    # (a partial 32-channel stage) and 264 (9 stages: the ring wraps), C_out 70 (a partial channel tile;
    # rows past C_out) and 136 / 24 (two tiles; the tile narrowed to 64), ReLU, no bias, K1N_BM 64 (asked
    # for), K1N_STAGES 2 and 4
    out.append(("ldmatrix x4 and x4.trans (PTX layout)", "ldsm", {}))
    out.append(("k1n 40->70 2x9x16", "k1n", dict(shape=(2, 40, 9, 16), cout=70)))
    if not quick:
        out.append(("k1n 40->70 relu nobias 3x7x8", "k1n", dict(shape=(3, 40, 7, 8), cout=70, relu=True,
                                                                bias=False)))
        out.append(("k1n 264->136 2x9x16", "k1n", dict(shape=(2, 264, 9, 16), cout=136)))
        out.append(("k1n 104->24 relu 3x7x8", "k1n", dict(shape=(3, 104, 7, 8), cout=24, relu=True)))
        out.append(("k1n bm64 40->136 3x7x8", "k1n", dict(shape=(3, 40, 7, 8), cout=136, params={"K1N_BM": 64})))
        out.append(("k1n stages2 104->70 2x9x16", "k1n", dict(shape=(2, 104, 9, 16), cout=70,
                                                              params={"K1N_STAGES": 2})))
        out.append(("k1n stages4 104->136 relu 1x9x16", "k1n", dict(shape=(1, 104, 9, 16), cout=136, relu=True,
                                                                    params={"K1N_STAGES": 4})))
        out.append(("k1n 8->8 nobias 1x2x4", "k1n", dict(shape=(1, 8, 2, 4), cout=8, bias=False)))
    # other strides and paddings: sample_planes (x's sampled pixels into the workspace xs, poisoned, with a
    # NaN tail) and then the stride-1 GEMM over them: stride 2 with padding 1 (8x10 outputs from 13x17),
    # (2, 1) with asymmetric padding, padding alone (rows and columns of zeros), stride 3, C_in 264, ReLU,
    # no bias, persistent on one SM
    out.append(("k1n sampled s2 pad1 40->70 3x13x17", "k1n",
                dict(shape=(3, 40, 13, 17), cout=70, stride=2, padding=1)))
    if not quick:
        out.append(("k1n sampled s(2,1) asym nobias 2x24x18x31", "k1n",
                    dict(shape=(2, 24, 18, 31), cout=24, stride=(2, 1), padding=(0, 2, 1, 0), bias=False)))
        out.append(("k1n sampled pad2 relu 2x40x8x8", "k1n",
                    dict(shape=(2, 40, 8, 8), cout=24, padding=2, relu=True)))
        out.append(("k1n sampled s3 264->136 2x264x24x24", "k1n",
                    dict(shape=(2, 264, 24, 24), cout=136, stride=3)))
        out.append(("k1n sampled persist s2 40->70 5x16x16 1 SM", "k1n",
                    dict(shape=(5, 40, 16, 16), cout=70, stride=2, sms=1, params={"K1N_PERSIST": 1})))
    # K1N_SAMPLE 1 (sample_planes_rows8, 8 rows a warp): a warp's rows crossing planes (OH 8 and 10: rows 8
    # a warp cross every 10-row plane), rows past the last plane (ROWS no multiple of 64), OW past 32
    # (three and two column passes: 72 and 40), padding rows and columns, stride (2, 1) and 3
    out.append(("k1n sampled rows8 s2 pad1 40->70 3x13x17", "k1n",
                dict(shape=(3, 40, 13, 17), cout=70, stride=2, padding=1, params={"K1N_SAMPLE": 1})))
    if not quick:
        out.append(("k1n sampled rows8 s(2,1) asym wide 3x24x18x71", "k1n",
                    dict(shape=(3, 24, 18, 71), cout=24, stride=(2, 1), padding=(0, 2, 1, 0), bias=False,
                         params={"K1N_SAMPLE": 1})))
        out.append(("k1n sampled rows8 s3 persist 264->136 2x264x24x24", "k1n",
                    dict(shape=(2, 264, 24, 24), cout=136, stride=3, params={"K1N_SAMPLE": 1, "K1N_PERSIST": 1})))
        out.append(("k1n sampled rows8 pad2 relu 1x8x8x36", "k1n",
                    dict(shape=(1, 8, 8, 36), cout=24, padding=2, relu=True, params={"K1N_SAMPLE": 1})))
    # the persistent NCHW 1x1 GEMM (K1N_PERSIST 1, 2: conv2d_k1_gemm_nchw_persist(_cs)), planned for 1 or 2 SMs
    # (2 or 3 blocks a SM for BM 128 / 64, each walking several tiles): pixels over the batch no multiple of
    # 128 (tiles that span images; a partial last tile whose threads past the batch store nothing but keep
    # to the barriers), C_in 40 (a partial stage) and 264 (KT 9), C_out 70 (a partial channel tile), 200 and
    # 264 (4 / 3 channel tiles: grids of 3 / 2 blocks no multiple of them, a block's weight rows and bias
    # change between its tiles), ReLU, no bias, K1N_STAGES 2, 3 and 4, K1N_BM 64 and 128, a single tile
    out.append(("k1n persist 40->70 relu 5x9x16 1 SM", "k1n",
                dict(shape=(5, 40, 9, 16), cout=70, relu=True, sms=1, params={"K1N_PERSIST": 1})))
    if not quick:
        for st in (2, 3, 4):
            out.append((f"k1n persist stages{st} 264->264 nobias 3x7x8 1 SM", "k1n",
                        dict(shape=(3, 264, 7, 8), cout=264, bias=False, sms=1,
                             params={"K1N_PERSIST": 1, "K1N_STAGES": st})))
            out.append((f"k1n persist cs stages{st} bm64 40->200 relu 4x9x16 1 SM", "k1n",
                        dict(shape=(4, 40, 9, 16), cout=200, relu=True, sms=1,
                             params={"K1N_PERSIST": 2, "K1N_STAGES": st, "K1N_BM": 64})))
        out.append(("k1n persist cs narrowed 104->24 16x7x8 2 SMs", "k1n",
                    dict(shape=(16, 104, 7, 8), cout=24, sms=2, params={"K1N_PERSIST": 2})))
        out.append(("k1n persist 40->136 5x9x16 2 SMs", "k1n",
                    dict(shape=(5, 40, 9, 16), cout=136, sms=2, params={"K1N_PERSIST": 1, "K1N_STAGES": 4})))
        out.append(("k1n persist one tile 8->8", "k1n",
                    dict(shape=(1, 8, 2, 4), cout=8, bias=False, params={"K1N_PERSIST": 1})))
    # the float32 1x1 SGEMM (CONV_K1_SIMT, conv2d_k1_simt), both layouts natively: M = N*OH*OW no multiple
    # of 128 (tiles that span images), C_in 37, 38 and 39 (scalar loads along k, each of a quad's last three
    # guards in use; a partial 8-channel stage), 40 and 264
    # (float4 loads; 33 and 17 stages), C_out 70 (a partial tile; scalar NHWC stores), 72 (float4 NHWC
    # stores), 24 (the tile narrowed to 64) and 136 (two or three channel tiles), stride 1, 2 and (2, 1),
    # padding 0, 1 and asymmetric (padded pixels: just the bias), ReLU, no bias, K1S_BN 64 (asked for),
    # K1S_BK 16; NCHW's float4 pixel loads (stride 1, no padding, H W % 4 == 0) and their gathers elsewhere
    # (odd sizes, padding only after the image), float4 stores along pixels where OH OW % 4 == 0
    out.append(("k1s s2 pad1 37->70 relu NCHW", "k1s",
                dict(shape=(2, 37, 17, 19), cout=70, stride=2, padding=1, relu=True, layout="NCHW")))
    out.append(("k1s s1 37->70 NHWC", "k1s", dict(shape=(2, 37, 9, 13), cout=70)))
    if not quick:
        out.append(("k1s s2 pad1 40->72 relu NHWC", "k1s",
                    dict(shape=(2, 40, 17, 19), cout=72, stride=2, padding=1, relu=True)))
        out.append(("k1s s1 pad1 nobias 37->24 NHWC", "k1s",
                    dict(shape=(1, 37, 7, 9), cout=24, padding=1, bias=False)))
        out.append(("k1s s2 bk16 264->136 NHWC", "k1s",
                    dict(shape=(1, 264, 21, 30), cout=136, stride=2, params={"K1S_BK": 16})))
        out.append(("k1s bn64 40->136 relu NHWC", "k1s",
                    dict(shape=(1, 40, 9, 16), cout=136, relu=True, params={"K1S_BN": 64})))
        out.append(("k1s s(2,1) asym pad 39->70 NHWC", "k1s",
                    dict(shape=(1, 39, 10, 9), cout=70, stride=(2, 1), padding=(1, 0, 2, 1))))
        out.append(("k1s s1 40->72 NCHW", "k1s", dict(shape=(3, 40, 8, 12), cout=72, layout="NCHW")))
        out.append(("k1s s1 39->70 odd NCHW", "k1s", dict(shape=(2, 39, 9, 13), cout=70, layout="NCHW")))
        out.append(("k1s s1 pad1 nobias 38->24 NCHW", "k1s",
                    dict(shape=(2, 38, 7, 9), cout=24, padding=1, bias=False, layout="NCHW")))
        out.append(("k1s bk16 bn64 264->136 relu NCHW", "k1s",
                    dict(shape=(1, 264, 9, 16), cout=136, relu=True, layout="NCHW",
                         params={"K1S_BK": 16, "K1S_BN": 64})))
        out.append(("k1s s1 pad after 16->70 NCHW", "k1s",
                    dict(shape=(1, 16, 8, 8), cout=70, padding=(0, 1, 0, 1), layout="NCHW")))
        out.append(("k1s s(2,1) asym pad 40->24 NCHW", "k1s",
                    dict(shape=(2, 40, 10, 9), cout=24, stride=(2, 1), padding=(1, 0, 2, 1), layout="NCHW")))
    # the pipelined depthwise kernel (DW_PIPE): float32 and float16, shapes no multiple of a tile,
    # padding 0, 1, 2, partial channel slices, and (on 2 SMs) several tiles per persistent block;
    # against the register walk (DW_COLS 4, DW_CROWS 8) bit for bit: the same FMA order
    regs = {"DW_COLS": 4, "DW_CROWS": 8}
    out.append(("dwconv pipe8 f16 3x72x13x17 pad1", "dwconv",
                dict(shape=(3, 72, 13, 17), dtype=np.float16, padding=1, params={"DW_PIPE": 8}, same_as=regs)))
    out.append(("dwconv pipe8x2 f16 3x72x13x35 pad1", "dwconv",
                dict(shape=(3, 72, 13, 35), dtype=np.float16, padding=1, params={"DW_PIPE": 8, "DW_PIPE_COLS": 2},
                     same_as=regs)))
    out.append(("dwconv pipe8 f32 3x40x13x33 pad1 nobias", "dwconv",
                dict(shape=(3, 40, 13, 33), dtype=np.float32, padding=1, params={"DW_PIPE": 8}, bias=False,
                     same_as=regs)))
    if not quick:
        for dt, c in ((np.float16, 24), (np.float16, 136), (np.float32, 24), (np.float32, 72)):
            name = np.dtype(dt).name.replace("float", "f")
            for rows in (4, 8, 16):
                for pad in (0, 1, 2):
                    out.append((f"dwconv pipe{rows} {name} 3x{c}x17x13 pad{pad}", "dwconv",
                                dict(shape=(3, c, 17, 13), dtype=dt, padding=pad, params={"DW_PIPE": rows},
                                     bias=pad != 2, same_as=regs)))
        out.append(("dwconv pipe4 f16 asym pad 2x40x9x33", "dwconv",
                    dict(shape=(2, 40, 9, 33), dtype=np.float16, padding=(2, 0, 0, 2), params={"DW_PIPE": 4},
                         same_as=regs)))
        out.append(("dwconv pipe8 f32 2SM persistent 2x96x33x70", "dwconv",
                    dict(shape=(2, 96, 33, 70), dtype=np.float32, padding=1, params={"DW_PIPE": 8}, sms=2,
                         same_as=regs)))
        out.append(("dwconv pipe4 f16 1SM persistent 3x72x21x35", "dwconv",
                    dict(shape=(3, 72, 21, 35), dtype=np.float16, padding=2, params={"DW_PIPE": 4}, sms=1)))
        # two output columns a thread (DW_PIPE_COLS 2): odd widths leave a lone last column
        for dt, c in ((np.float16, 72), (np.float32, 40)):
            name = np.dtype(dt).name.replace("float", "f")
            # (float32 16 x 2: 304 KB of shared memory, too big: the launcher serves another kernel)
            for rows, pad, w in ((4, 1, 33), (8, 0, 35), (16, 2, 17))[:3 if dt == np.float16 else 2]:
                out.append((f"dwconv pipe{rows}x2 {name} 2x{c}x19x{w} pad{pad}", "dwconv",
                            dict(shape=(2, c, 19, w), dtype=dt, padding=pad, bias=pad != 0, same_as=regs,
                                 params={"DW_PIPE": rows, "DW_PIPE_COLS": 2})))
        out.append(("dwconv pipe8x2 f16 1SM persistent 3x72x21x70", "dwconv",
                    dict(shape=(3, 72, 21, 70), dtype=np.float16, padding=1, params={"DW_PIPE": 8, "DW_PIPE_COLS": 2},
                         sms=1, same_as=regs)))
    # the NCHW row strips with halos by shuffles (DW_SHFL): a warp that is one whole 32 x 32 plane,
    # rows that cross warps and planes (5 vector columns), partial strips, a last warp with idle
    # lanes, rows of 32 or more lanes (every halo loaded), float32; bit for bit against the plain strips
    shfl_cases = [("f16 2x3x32x32", (2, 3, 32, 32), np.float16, 4, True, 128),
                  ("f16 1x5x30x40 partial strips", (1, 5, 30, 40), np.float16, 4, True, 256),
                  ("f32 2x3x17x16 rows2 nobias", (2, 3, 17, 16), np.float32, 2, False, 128),
                  ("f16 1x3x7x24 idle lanes", (1, 3, 7, 24), np.float16, 4, True, 128),
                  ("f16 1x2x9x264 wide rows", (1, 2, 9, 264), np.float16, 2, True, 256)]
    for name, shape, dt, rows, bias, threads in shfl_cases[:2 if quick else None]:
        out.append((f"dwconv rows{rows} shfl {name}", "dwconv",
                    dict(shape=shape, dtype=dt, padding=1, bias=bias, layout="NCHW",
                         params={"DW_ROWS": rows, "DW_SHFL": 1, "CONV_THREADS": threads},
                         same_as={"DW_ROWS": rows, "CONV_THREADS": threads},
                         kernel=f"conv2d_dw_rows{rows}s_k3s1")))
    # the persistent grid (DW_SHFL 2) on 1 or 2 multiprocessors: each thread walks 2 to 4 items, the
    # next one's rows loaded while the current one computes, the last step with idle lanes or warps
    persist_cases = [("f16 2x20x32x32", (2, 20, 32, 32), np.float16, 4, True, 128),
                     ("f16 1x20x30x40 partial strips", (1, 20, 30, 40), np.float16, 4, True, 256),
                     ("f32 2x24x17x16 rows2 nobias", (2, 24, 17, 16), np.float32, 2, False, 128),
                     ("f16 1x12x9x264 wide rows", (1, 12, 9, 264), np.float16, 2, True, 256)]
    for name, shape, dt, rows, bias, threads in persist_cases[:1 if quick else None]:
        for sms in (1, 2):
            out.append((f"dwconv rows{rows} persist {sms}SM {name}", "dwconv",
                        dict(shape=shape, dtype=dt, padding=1, bias=bias, layout="NCHW", sms=sms,
                             params={"DW_ROWS": rows, "DW_SHFL": 2, "CONV_THREADS": threads},
                             same_as={"DW_ROWS": rows, "CONV_THREADS": threads},
                             kernel=f"conv2d_dw_rows{rows}p_k3s1")))
    # the float16 NCHW depthwise kernel on tensor cores (DW_TC): widths past one 32-column tile
    # and not a multiple of 32, heights past one 16-row tile, padding 0 and 1 (asymmetric too),
    # odd output widths (scalar stores), no bias
    out.append(("dwconv tc f16 NCHW 2x5x21x40 pad1", "dwconv",
                dict(shape=(2, 5, 21, 40), dtype=np.float16, padding=1, params={"DW_TC": 1}, layout="NCHW")))
    if not quick:
        out.append(("dwconv tc f16 NCHW 1x3x17x72 pad0 nobias", "dwconv",
                    dict(shape=(1, 3, 17, 72), dtype=np.float16, padding=0, params={"DW_TC": 1}, bias=False,
                         layout="NCHW")))
        out.append(("dwconv tc f16 NCHW 2x4x33x8 asym pad", "dwconv",
                    dict(shape=(2, 4, 33, 8), dtype=np.float16, padding=(2, 0, 1, 0), params={"DW_TC": 1},
                         layout="NCHW")))
        out.append(("dwconv tc f16 NCHW 1x2x9x64 odd out width", "dwconv",
                    dict(shape=(1, 2, 9, 64), dtype=np.float16, padding=(1, 1, 1, 0), params={"DW_TC": 1},
                         layout="NCHW")))
        out.append(("dwconv tc f16 NCHW 1x70x5x16 many planes", "dwconv",
                    dict(shape=(1, 70, 5, 16), dtype=np.float16, padding=1, params={"DW_TC": 1}, layout="NCHW")))
    # the persistent variant (DW_TC 2) on 1 multiprocessor: each warp walks several tiles, the
    # next one's loads in flight; bit for bit against a warp per tile (the same mma order)
    out.append(("dwconv tc persist f16 NCHW 3x7x37x72 1SM", "dwconv",
                dict(shape=(3, 7, 37, 72), dtype=np.float16, padding=1, params={"DW_TC": 2}, layout="NCHW", sms=1,
                     same_as={"DW_TC": 1})))
    if not quick:
        out.append(("dwconv tc persist f16 NCHW 2x5x21x40 asym 1SM", "dwconv",
                    dict(shape=(2, 5, 21, 40), dtype=np.float16, padding=(0, 2, 1, 0), params={"DW_TC": 2},
                         layout="NCHW", sms=1, bias=False, same_as={"DW_TC": 1})))
    # BatchNorm inference, the flat kernels (shared-memory table; NHWC constants in registers),
    # BN_INFER_EARLY against the plain walk bit for bit, on one multiprocessor so that the
    # persistent blocks walk several tiles
    walk = {"BN_THREADS": 128, "BN_UNROLL": 2, "BN_BLOCKS_PER_SM": 2}
    for dt, dname in ((np.float16, "f16"), (np.float32, "f32")) if not quick else ((np.float16, "f16"),):
        for layout, c in (("NCHW", 24), ("NHWC", 64), ("NHWC", 24)):
            kind = "reg" if layout == "NHWC" and c == 64 else "flat"
            out.append((f"bn infer {kind} early {dname} {layout} 4x{c}x8x12 1SM", "bn",
                        dict(shape=(4, c, 8, 12), dtype=dt, layout=layout, params={**walk, "BN_INFER_EARLY": 1},
                             sms=1, same_as=walk)))
    if not quick:
        out.append(("bn infer tiles early f32 NCHW 3x24x4x10", "bn",
                    dict(shape=(3, 24, 4, 10), dtype=np.float32, layout="NCHW",
                         params={"BN_INFER_EARLY": 1, "BN_INFER_TILES": 1, "BN_UNROLL": 4},
                         same_as={"BN_INFER_TILES": 1, "BN_UNROLL": 4})))
        out.append(("bn infer early f16 NHWC FLAT_REG 0 4x64x8x12 1SM", "bn",
                    dict(shape=(4, 64, 8, 12), dtype=np.float16, layout="NHWC",
                         params={**walk, "BN_INFER_EARLY": 1, "BN_FLAT_REG": 0}, sms=1, same_as=walk)))
    # BatchNorm training on one multiprocessor (each thread's walk spans several shifted-sum
    # chunks), pivots far from the mean or a mean of 1e4
    if not quick:
        for dt, dname in ((np.float16, "f16"), (np.float32, "f32")):
            for layout, shape in (("NHWC", (4, 24, 16, 20)), ("NHWC", (3, 13, 10, 11)), ("NCHW", (4, 6, 23, 29)),
                                  ("NCHW", (3, 5, 24, 36))):
                for sums in (0, 16, 64):
                    for data in ("outlier", "big_mean"):
                        out.append((f"bn train {dname} {layout} {'x'.join(map(str, shape))} sums {sums} {data}",
                                    "bn-train", dict(shape=shape, dtype=dt, layout=layout, data=data, sms=1,
                                                     params={**walk, "BN_STATS_SUMS": sums})))
    # NHWC training in one cooperative launch (batch_norm_train_fused), every block's fibers at once
    # (emu_launch_coop): 2-4 blocks, a block a channel and every block every channel (BN_FUSED_FIN),
    # vectors in registers, shared memory and re-read (8x64x30x30 float16: 4 of 38 a thread), blocks
    # without pixels, channel groups that share a warp (C 64) or not (C 24, 40)
    fk = "batch_norm_train_fused"
    fused_cases = [("f32 3x64x9x7 3SM", (3, 64, 9, 7), np.float32, {}, 3, "normal", True),
                   # (a mean of 1e4; an outlier as the first value of full 64-value chunks: test_cuda_emu's
                   # outlier-pivot tests, which BN_PIVOT_N 0 fails)
                   ("f16 8x64x30x30 re-read 3SM", (8, 64, 30, 30), np.float16, {}, 3, "big_mean", True),
                   ("f32 C24 fin1 big mean 2SM", (4, 24, 7, 9), np.float32, {"BN_FUSED_FIN": 1}, 2, "big_mean", False),
                   ("f16 C40 256 threads regs 12 2SM", (3, 40, 11, 13), np.float16,
                    {"BN_FUSED_THREADS": 256, "BN_FUSED_REGS": 12}, 2, "outlier", False),
                   ("f32 1 image 4SM", (1, 8, 5, 7), np.float32, {"BN_FUSED_FIN": 1}, 4, "normal", False),
                   ("f32 C64 regs 0 fin1 3SM", (5, 64, 13, 11), np.float32, {"BN_FUSED_REGS": 0, "BN_FUSED_FIN": 1}, 3,
                    "big_mean", False)]
    for name, shape, dt, extra, sms, data, in_quick in fused_cases:
        if in_quick or not quick:
            out.append((f"bn fused {name}", "bn-train",
                        dict(shape=shape, dtype=dt, layout="NHWC", data=data, sms=sms, kernel=fk,
                             params={"BN_FUSED": 1, **extra})))
    # the register-tiled direct kernel: groups 8 (the H200 table's case, smaller), 3 channels a
    # group (a partial GRP_COT chunk), channel multipliers, stride 2, dilation, 5x5 and 1x1,
    # asymmetric padding, input channels in several stages (GRP_CIC), every GRP_COT / GRP_PIX
    for layout in ("NCHW", "NHWC"):
        for dt, dname in ((np.float32, "f32"), (np.float16, "f16")):
            out.append((f"tiled g8 3x3 {dname} {layout} 2x64x13x19", "tiled",
                        dict(shape=(2, 64, 13, 19), cout=64, groups=8, layout=layout, dtype=dt, params={},
                             kernel="conv2d_grp_k3s1")))
        if not quick:
            out.append((f"tiled g4 cig3 cog5 stages {layout}", "tiled",
                        dict(shape=(2, 12, 11, 9), cout=20, groups=4, layout=layout, dtype=np.float32,
                             params={"GRP_CIC": 2, "GRP_TILE_W": 4}, padding=(0, 2, 1, 0), kernel="conv2d_grp_k3s1")))
            out.append((f"tiled dw multiplier 3 s2 {layout}", "tiled",
                        dict(shape=(2, 6, 15, 17), cout=18, groups=6, layout=layout, dtype=np.float16, params={},
                             stride=2, bias=False, kernel="conv2d_grp_g")))
            out.append((f"tiled dense 5x5 dil2 {layout}", "tiled",
                        dict(shape=(1, 10, 16, 21), cout=7, groups=1, layout=layout, dtype=np.float32,
                             params={"GRP_COT": 4, "GRP_PIX": 2, "GRP_CIC": 4}, k=(5, 5), dilation=2, padding=3,
                             kernel="conv2d_grp_g")))
            out.append((f"tiled dense 1x1 s2 {layout}", "tiled",
                        dict(shape=(2, 24, 9, 13), cout=16, groups=1, layout=layout, dtype=np.float32,
                             params={"GRP_COT": 2, "GRP_PIX": 1}, k=(1, 1), stride=2, padding=0,
                             kernel="conv2d_grp_g")))
            out.append((f"tiled dense 7x7 s2 stem {layout}", "tiled",
                        dict(shape=(1, 3, 23, 29), cout=16, groups=1, layout=layout, dtype=np.float16,
                             params={}, k=(7, 7), stride=2, padding=3, kernel="conv2d_grp_g")))
            # NHWC 4-channel vectors with a partial last stage (12 = 8 + 4 channels) and a partial
            # last chunk of output channels (12 = 8 + 4); stride 2
            out.append((f"tiled g2 cig12 stages s2 vectors {layout}", "tiled",
                        dict(shape=(2, 24, 15, 13), cout=24, groups=2, layout=layout, dtype=np.float16,
                             params={"GRP_CIC": 8}, stride=2, kernel="conv2d_grp_g")))
            out.append((f"tiled g2 cig12 k3s1 vectors f32 {layout}", "tiled",
                        dict(shape=(1, 24, 10, 21), cout=24, groups=2, layout=layout, dtype=np.float32,
                             params={"GRP_CIC": 8, "GRP_PIX": 2}, kernel="conv2d_grp_k3s1")))
            out.append((f"tiled g2 3x3 s1 cot1 pix1 {layout}", "tiled",
                        dict(shape=(1, 8, 7, 33), cout=6, groups=2, layout=layout, dtype=np.float16,
                             params={"GRP_COT": 1, "GRP_PIX": 1, "GRP_TILE_W": 8}, kernel="conv2d_grp_k3s1")))
            out.append((f"tiled g8 3x3 cot2 pix2 64 threads {layout}", "tiled",
                        dict(shape=(1, 16, 9, 10), cout=32, groups=8, layout=layout, dtype=np.float32,
                             params={"GRP_COT": 2, "GRP_PIX": 2, "CONV_THREADS": 128, "GRP_TILE_W": 64},
                             padding=2, kernel="conv2d_grp_k3s1")))
    # the dense 3x3 stride-1 kernel on CUDA cores (conv2d_k3_simt: float32's, float16's without tensor cores):
    # partial 8 x 32 tiles, a partial 64-channel tile, a partial input-channel chunk (C_in 12 of 8 a chunk, or
    # of 4 with CONV_SIMT_CI 4), asymmetric padding; its cp.async stages land late, as on a GPU
    for layout in ("NCHW", "NHWC"):
        for name, dtype, params, more in (
                ("f32 2x12x13x37->70", np.float32, {}, {}),
                ("f32 simt_ci4 2x12x13x37->70", np.float32, {"CONV_SIMT_CI": 4}, {}),
                ("f16 CONV_TC 0 asym pad 1x20x9x35->70", np.float16, {"CONV_TC": 0}, dict(padding=(0, 2, 1, 0)))):
            if quick and (name.startswith("f16") or "simt_ci4" in name):
                continue
            shape = (1, 20, 9, 35) if dtype == np.float16 else (2, 12, 13, 37)
            out.append((f"k3 simt {name} {layout}", "tiled",
                        dict(shape=shape, cout=70, groups=1, layout=layout, dtype=dtype, params=params,
                             kernel="conv2d_k3_simt", **more)))
    # the float16 implicit GEMM for stems (CONV_IM2COL): the 7x7 stride-2 stem (K 147 -> 160), a row of 2
    # segments with a partial one, C_out over 64 (a second, partial chunk), 2 SMs (warps walk several tiles),
    # 3x3 stride 2 with asymmetric padding, dilation, no bias, K exactly 256, K under 16 (1x1 stride 2)
    im2col_shapes = (  # name, shape, C_out, window, further arguments; the first also in quick runs
        ("7x7 s2 stem 3->70 2 SMs", (2, 3, 21, 75), 70, (7, 7), dict(stride=2, padding=3, sms=2)),
        ("3x3 s2 asym 5->16 nobias", (1, 5, 13, 35), 16, (3, 3), dict(stride=2, padding=(0, 2, 1, 0), bias=False)),
        ("5x3 dil2 s(1,2) 4->24", (2, 4, 17, 40), 24, (5, 3), dict(stride=(1, 2), dilation=2, padding=2, sms=1)),
        ("K=256 4x4 16->8", (1, 16, 9, 11), 8, (4, 4), dict(stride=1, padding=1)),
        ("1x1 s2 pad1 K=2 2->130", (1, 2, 5, 65), 130, (1, 1), dict(stride=2, padding=1)),
    )
    for layout in ("NCHW", "NHWC"):
        for name, shape, cout, k, more in im2col_shapes[:1] if quick else im2col_shapes:
            out.append((f"im2col {name} {layout}", "tiled",
                        dict(shape=shape, cout=cout, groups=1, layout=layout, dtype=np.float16, k=k,
                             params={"CONV_IM2COL": 1}, kernel="conv2d_im2col_tc", **more)))
    # the float32 implicit GEMM on CUDA cores (CONV_IM2COL in float32, conv2d_im2col_simt): the same windows,
    # and K past 256 (3x3 stride 2 of 40 channels), C_out past 128 with K1S_BN 128 and K1S_BK 16
    simt_shapes = (
        *im2col_shapes,
        ("3x3 s2 K=360 40->136 bk16", (2, 40, 9, 13), 136, (3, 3), dict(stride=2, padding=1,
                                                                         params={"K1S_BK": 16})),
        ("3x3 s1 K=99 11->70 bn128", (1, 11, 7, 19), 70, (3, 3), dict(padding=1, params={"K1S_BN": 128})),
        # C_in % 4 == 0: NHWC's channel quads (k = (ky, kx, ci)); with K1S_BK 16 two pixel rows a thread
        ("3x3 s2 K=144 16->24 quads", (2, 16, 11, 14), 24, (3, 3), dict(stride=2, padding=1)),
        ("5x3 dil2 K=60 4->70 quads bk16", (1, 4, 13, 17), 70, (5, 3), dict(dilation=2, padding=(2, 1, 0, 3),
                                                                            params={"K1S_BK": 16})),
        ("3x3 K=72 8->8 quads bn64 nobias", (3, 8, 6, 9), 8, (3, 3), dict(padding=1, bias=False)),
        # a table of 3060 k (49 KiB of shared memory beside the stages: past the 48 KiB default)
        ("3x3 K=3060 340->24 bk16", (1, 340, 5, 6), 24, (3, 3), dict(padding=1, params={"K1S_BK": 16})),
    )
    for layout in ("NCHW", "NHWC"):
        # quick: the stem, and the first case of NHWC's channel quads (their own load path)
        quick_simt = (simt_shapes[0], next(c for c in simt_shapes if "quads" in c[0]))
        for name, shape, cout, k, more in quick_simt if quick else simt_shapes:
            more = dict(more)
            more.pop("sms", None)
            params = {"CONV_IM2COL": 1, **more.pop("params", {})}
            out.append((f"im2col simt {name} {layout}", "tiled",
                        dict(shape=shape, cout=cout, groups=1, layout=layout, dtype=np.float32, k=k,
                             params=params, kernel="conv2d_im2col_simt", **more)))
    # the float16 grouped tensor-core kernels (GRP_TC): 8 and 16 channels a group (tc8, tc16),
    # an odd channel count (a padded channel), 2x3 windows, asymmetric padding, tiles past the
    # output's rows and columns, NHWC with and without 16-byte channel loads
    for layout in ("NHWC", "NCHW"):
        out.append((f"grouped tc g8 {layout} 2x64x13x37", "tiled",
                    dict(shape=(2, 64, 13, 37), cout=64, groups=8, layout=layout, dtype=np.float16,
                         params={"GRP_TC": 1, "GRP_TC_ROWS": 8}, kernel="conv2d_grp_tc8")))
        if not quick:
            out.append((f"grouped tc cig16 cog12 {layout}", "tiled",
                        dict(shape=(1, 32, 9, 35), cout=24, groups=2, layout=layout, dtype=np.float16,
                             params={"GRP_TC": 1}, padding=(0, 2, 1, 0), kernel="conv2d_grp_tc16")))
            out.append((f"grouped tc cig3 cog5 2x3 {layout}", "tiled",
                        dict(shape=(2, 9, 7, 11), cout=15, groups=3, layout=layout, dtype=np.float16,
                             params={"GRP_TC": 1, "GRP_TC_ROWS": 4}, k=(2, 3), padding=(1, 1, 0, 2), bias=False,
                             kernel="conv2d_grp_tc8")))
            out.append((f"grouped tc multiplier 3 {layout}", "tiled",
                        dict(shape=(2, 6, 9, 40), cout=18, groups=6, layout=layout, dtype=np.float16,
                             params={"GRP_TC": 1, "GRP_TC_ROWS": 4}, kernel="conv2d_grp_tc8")))
            out.append((f"grouped tc g4 cig4 rows32 {layout}", "tiled",
                        dict(shape=(1, 16, 40, 20), cout=16, groups=4, layout=layout, dtype=np.float16,
                             params={"GRP_TC": 1, "GRP_TC_ROWS": 32}, kernel="conv2d_grp_tc8")))
    types = [(np.int8, np.int8), (np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.uint8)]
    for layout in ("NHWC", "NCHW"):
        for xd, wd in types if not quick else types[1:2]:
            for o in (np.int8, np.int32) if not quick else (np.uint8,):
                out.append((f"qconv tc {np.dtype(xd).name}x{np.dtype(wd).name}->{np.dtype(o).name} {layout}", "qconv",
                            dict(shape=(2, 32, 9, 16), cout=70, layout=layout, padding=1, xd=xd, wd=wd, out=o)))
        if not quick:
            out.append((f"qconv tc pad3 {layout}", "qconv", dict(shape=(1, 16, 7, 16), cout=8, layout=layout,
                                                                  padding=3, xd=np.int8, wd=np.int8, out=np.int8)))
            out.append((f"qconv co4 s2 {layout}", "qconv", dict(shape=(2, 8, 9, 11), cout=8, layout=layout, padding=1,
                                                                 xd=np.uint8, wd=np.int8, out=np.uint8, stride=2)))
    # NHWC global pooling (gvec) with ADAPT_GVEC_S lanes per pair, planned for one multiprocessor
    # (256 threads suffice): partial last warps (pair counts no multiple of 32 / S), pixel
    # counts no multiple of S, 3 pixels over 4 lanes (an empty slice), a grid-stride second
    # round (17160 threads over 128 blocks of 128), NaN inputs, and one lane per pair
    for kind in ("avg", "max"):
        out.append((f"gvec S2 f16 5x264x7x7 {kind}", "gvec", dict(shape=(5, 264, 7, 7), dtype=np.float16, kind=kind,
                                                                  params={"ADAPT_GVEC_S": 2}, sms=1)))
        out.append((f"gvec S4 f32 nan 5x264x5x3 {kind}", "gvec",
                    dict(shape=(5, 264, 5, 3), dtype=np.float32, kind=kind, params={"ADAPT_GVEC_S": 4}, sms=1,
                         nan_frac=0.02)))
        if not quick:
            out.append((f"gvec S4 U4 f32 3x264x5x3 {kind}", "gvec",
                        dict(shape=(3, 264, 5, 3), dtype=np.float32, kind=kind,
                             params={"ADAPT_GVEC_S": 4, "ADAPT_GVEC_U": 4}, sms=1)))
            out.append((f"gvec S4 f16 5x136x1x3 empty slice {kind}", "gvec",
                        dict(shape=(5, 136, 1, 3), dtype=np.float16, kind=kind, params={"ADAPT_GVEC_S": 4}, sms=1)))
            out.append((f"gvec S4 128 f32 65x264x1x3 grid-stride {kind}", "gvec",
                        dict(shape=(65, 264, 1, 3), dtype=np.float32, kind=kind,
                             params={"ADAPT_GVEC_S": 4, "ADAPT_THREADS": 128}, sms=1)))
            out.append((f"gvec S2 U16 f16 nan 5x264x7x7 {kind}", "gvec",
                        dict(shape=(5, 264, 7, 7), dtype=np.float16, kind=kind,
                             params={"ADAPT_GVEC_S": 2, "ADAPT_GVEC_U": 16}, sms=1, nan_frac=0.02)))
            out.append((f"gvec S1 f32 5x264x7x7 {kind}", "gvec",
                        dict(shape=(5, 264, 7, 7), dtype=np.float32, kind=kind, params={}, sms=1)))
    return out


def _fuzz_1x1(rng: np.random.Generator, i: int, layout: str) -> tuple[str, str, dict[str, Any]]:
    """One random float16 1x1 GEMM case (see fuzz_cases); NCHW output planes of OH*OW % 8 == 0, so that the
    NCHW GEMM (after sample_planes where strided or padded) serves rather than the transposes."""
    n, ci, cout = int(rng.integers(1, 4)), 8 * int(rng.integers(1, 34)), int(rng.integers(1, 300))
    stride = tuple(int(v) for v in rng.integers(1, 4, 2))
    pad = [int(v) for v in rng.integers(0, 3, 4)] if rng.integers(2) else [0, 0, 0, 0]
    oh, ow = int(rng.integers(1, 12)), 8 * int(rng.integers(1, 4)) if layout == "NCHW" else int(rng.integers(1, 30))
    dims = []
    for o, s, lo, hi in ((oh, stride[0], 0, 1), (ow, stride[1], 2, 3)):  # an input size that gives `o` outputs
        size = (o - 1) * s + 1 - pad[lo] - pad[hi] + int(rng.integers(0, s))
        if size < 1:
            pad[lo] = pad[hi] = 0
            size = (o - 1) * s + 1 + int(rng.integers(0, s))
        dims.append(size)
    persist, stages, bias, relu = int(rng.integers(3)), int(rng.integers(2, 5)), bool(rng.integers(2)), bool(
        rng.integers(2))
    width = (64, 128)[int(rng.integers(2))]
    params = ({"K1N_STAGES": stages, "K1N_BM": width, "K1N_PERSIST": persist} if layout == "NCHW"
              else {"K1G_STAGES": stages, "K1G_BN": width, "K1G_PERSIST": persist})
    kw = dict(shape=(n, ci, *dims), cout=cout, stride=stride, padding=tuple(pad), params=params, bias=bias,
              relu=relu, sms=int(rng.integers(1, 4)))
    return (f"fuzz{i} gemm1x1 {layout} {n}x{ci}x{dims[0]}x{dims[1]}->{cout} s{stride} pad{tuple(pad)} {params}",
            "k1n" if layout == "NCHW" else "k1g", kw)


def fuzz_cases(rng: np.random.Generator, count: int) -> list[tuple[str, str, dict[str, Any]]]:
    """`count` random cases for the served tensor-core kernels (and CONV_TC=3's, in one to four stages of 8- or
    4-row tiles): shapes, channel counts, padding up to 3 per side, both layouts, every int8 type pair and
    output type; every fourth a float16 1x1 GEMM (NHWC conv2d_k1_gemm, NCHW conv2d_k1_gemm_nchw, sampled
    where strided or padded) at strides 1-3, padding up to 2 a side, any stage count, tile width and
    persistence."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    types = [(np.int8, np.int8), (np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.uint8)]
    for i in range(count):
        layout = ("NHWC", "NCHW")[int(rng.integers(2))]
        n, h = int(rng.integers(1, 3)), int(rng.integers(3, 20))
        pad = tuple(int(v) for v in rng.integers(0, 4, 4))
        if i % 4 == 3:
            out.append(_fuzz_1x1(rng, i, layout))
        elif i % 3 == 2:  # int8: C_in % 16 == 0; NCHW widths % 16 == 0 (else the CUDA-core kernels serve)
            ci = 16 * int(rng.integers(1, 5))
            w = 16 * int(rng.integers(1, 3)) if layout == "NCHW" else int(rng.integers(3, 40))
            xd, wd = types[int(rng.integers(4))]
            o = (np.int8, np.uint8, np.int32)[int(rng.integers(3))]
            out.append((f"fuzz{i} qconv {layout} {n}x{ci}x{h}x{w} pad{pad}", "qconv",
                        dict(shape=(n, ci, h, w), cout=int(rng.integers(1, 140)), layout=layout, padding=pad, xd=xd,
                             wd=wd, out=o, bias=bool(rng.integers(2)))))
        else:  # float16: CONV_TC 2 (C_in <= 64) or 3 (NHWC, any C_in % 8 == 0, 3x3 or 1x1)
            tc = 3 if rng.integers(2) else 2
            ci = 8 * int(rng.integers(1, 21 if tc == 3 else 9))
            w = 8 * int(rng.integers(1, 5)) if layout == "NCHW" else int(rng.integers(3, 40))
            k = 1 if (tc == 3 and rng.integers(3) == 0) else 3
            # one to four stages, 8- or 4-row tiles (4 with 3x3 in 8 rows does not fit: 4-row tiles serve)
            stages = int(rng.integers(1, 5)) if tc == 3 else 2
            rows = (8, 4)[int(rng.integers(2))] if tc == 3 else 8
            out.append((f"fuzz{i} conv tc{tc} k{k} st{stages} rows{rows} {layout} {n}x{ci}x{h}x{w} pad{pad}", "conv",
                        dict(shape=(n, ci, h, w), cout=int(rng.integers(1, 140)), layout=layout, padding=pad,
                             params={"CONV_TC": tc, "TC_WIDE_STAGES": stages, "TC_WIDE_ROWS": rows},
                             bias=bool(rng.integers(2)), k=k, sms=int(rng.integers(1, 5)))))
    return out


def fuzz_bn_fused_cases(rng: np.random.Generator, count: int) -> list[tuple[str, str, dict[str, Any]]]:
    """`count` random NHWC training cases through batch_norm_train_fused: either dtype, C a multiple of
    the vector width up to 128 (now and then up to 1024), 1-4 blocks, every thread and register count,
    both finalize modes, the three data kinds; every third one large enough for 1024 threads without
    registers to re-read part of x."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    for i in range(count):
        dt = (np.float32, np.float16)[int(rng.integers(2))]
        vec = 4 if dt == np.float32 else 8
        params = {"BN_FUSED": 1, "BN_FUSED_THREADS": int(rng.choice([256, 512, 1024])),
                  "BN_FUSED_REGS": int(rng.choice([0, 4, 8, 12, 16])), "BN_FUSED_FIN": int(rng.integers(2))}
        c = vec * int(rng.integers(1, 33 if rng.integers(4) else 129))
        shape = (int(rng.integers(1, 5)), c, int(rng.integers(1, 21)), int(rng.integers(1, 21)))
        if shape[0] * shape[2] * shape[3] < 2:  # training needs 2 values a channel (else a HalValueError)
            shape = (shape[0], c, shape[2], 2)
        sms = int(rng.integers(1, 5))
        if i % 3 == 2:
            params.update(BN_FUSED_THREADS=1024, BN_FUSED_REGS=0)
            c = 64
            shape, sms = (4, c, 24, 24 + int(rng.integers(0, 9))), 2
        data = ("normal", "outlier", "big_mean")[int(rng.integers(3))]
        out.append((f"fuzz{i} bn fused {np.dtype(dt).name} {'x'.join(map(str, shape))} {sms}SM "
                     f"t{params['BN_FUSED_THREADS']} r{params['BN_FUSED_REGS']} fin{params['BN_FUSED_FIN']} {data}",
                     "bn-train", dict(shape=shape, dtype=dt, layout="NHWC", data=data, sms=sms, params=params,
                                      kernel="batch_norm_train_fused")))
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the cases; print one line each; exit 1 on any failure."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one case per kernel and layout")
    ap.add_argument("--only", default="", help="cases whose name contains this text")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fuzz", type=int, default=0, help="instead of the list, this many random cases")
    ap.add_argument("--asan", action="store_true",
                    help="build with AddressSanitizer; a read or write outside a buffer's tensor stops the case")
    ap.add_argument("--fuzz-bn", type=int, default=0,
                    help="instead of the list, this many random cases of BatchNorm training in one cooperative launch")
    ap.add_argument("--optimise", action="store_true",
                    help="build at -O1 instead of -O0: slower builds, faster runs (long fuzz runs)")
    args = ap.parse_args(argv)
    if shutil.which("g++") is None:
        print("cuda_emu: g++ not found")
        return 2
    if args.asan:
        _SANITIZE[:] = _ASAN
    if args.optimise:
        _GXX[_GXX.index("-O0")] = "-O1"
    be = h200_backend()
    rng = np.random.default_rng(args.seed)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="hal-cuda-emu-") as tmp:
        work = Path(tmp)
        chosen = (fuzz_cases(rng, args.fuzz) if args.fuzz else
                  fuzz_bn_fused_cases(rng, args.fuzz_bn) if args.fuzz_bn else cases(args.quick) + bf16_cases(True))
        for name, kind, kw in chosen:
            if args.only and args.only not in name:
                continue
            fn = {"conv": check_conv, "dwconv": check_dwconv, "qconv": check_qconv, "bn": check_bn_infer,
                  "bn-train": check_bn_train, "tiled": check_tiled, "gvec": check_gvec, "k1g": check_k1_gemm,
                  "k1n": check_k1_nchw, "k1s": check_k1_simt, "ldsm": check_ldmatrix, "pool": check_pool,
                  "adaptive": check_adaptive, "round": check_bf16_rounding}[kind]
            try:
                kernel, ok, detail = check_ldmatrix(work) if kind == "ldsm" else fn(be, rng, work, **kw)
            except RuntimeError as exc:  # the emulator died (a sanitizer's report, a trap): this case fails
                kernel, ok, detail = "", False, str(exc)
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {name:44s} {kernel:18s} {detail}", flush=True)
    print(f"cuda_emu: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
