"""CUDA backend on PyCUDA.

Nothing here touches CUDA at import time. ``probe`` imports PyCUDA lazily and never
raises. Each device's *primary* context is retained (never ``pycuda.autoinit``) and
pushed around every piece of work, so hal runs from any thread and shares the device
with PyTorch, CuPy or anything else using the runtime API in the same process. Memory
comes from ``pycuda.tools.DeviceMemoryPool``; all work goes to one stream per device
(a blocking stream, so it is ordered with work on the legacy default stream that
PyTorch uses unless told otherwise).

Kernels (``kernels_cu/*.cu``) are compiled with nvcc (``pycuda.compiler.compile``) for the device's own
``sm_XY`` with ``-D`` macros for dtype, layout and the tuning parameters that change
code; shapes are run-time arguments, so one build serves every shape. Builds are cached
in memory per (file, defines) and on disk as cubins under ``hal.cache.cache_dir("cuda-cubin")``.

Each launcher turns a spec into a launch plan (kernel, grid, block, shared memory and
the packed arguments) once per (spec, parameters, buffer alignment) and replays it.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import struct
import threading
import time
import types
import warnings
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np

from hal import cache, resources
from hal.backends.base import Backend, BackendProbe, Buffer, DeviceInfo, fixed_plane_ok
from hal.backends.cubin import kernel_digest
from hal.dtypes import FLOAT_DTYPES, is_bfloat16, transferable
from hal.errors import HalError, KernelCompileError, OutOfMemory, UnsupportedOperation
from hal.quant import QUANT_DTYPES
from hal.spec import AdaptivePool2dSpec, BatchNormSpec, Conv2dSpec, EltwiseSpec, Pool2dSpec, QConv2dSpec
from hal.tuning.schema import KernelSchema, Param

_NOT_INSTALLED = "cuda: PyCUDA not installed; pip install 'hal-kernels[cuda]'"
_NO_DEVICE = "cuda: no CUDA driver / no device found"


# ----------------------------------------------------------------------------------
# device identity
# ----------------------------------------------------------------------------------


def arch_family(major: int, minor: int) -> str:
    """Marketing-neutral architecture family of compute capability ``major.minor``."""
    if major == 7:
        return "turing" if minor >= 5 else "volta"
    if major == 8:
        return "ada" if minor == 9 else "ampere"
    if major == 9:
        return "hopper"
    if major in (10, 11, 12):
        return "blackwell"
    if major == 6:
        return "pascal"
    return f"sm{major}x"


def _device_info(drv: Any, index: int) -> DeviceInfo:
    dev = drv.Device(index)
    major, minor = dev.compute_capability()
    attr = drv.device_attribute

    def get(name: str, default: int = 0) -> int:
        try:
            return int(dev.get_attribute(getattr(attr, name)))
        except Exception:  # attribute missing in this PyCUDA/driver
            return default

    smem_default = get("MAX_SHARED_MEMORY_PER_BLOCK", 48 * 1024)
    smem_optin = get("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", smem_default)
    try:
        version = drv.get_driver_version()
        driver = f"{version // 1000}.{(version % 1000) // 10}"
    except Exception:
        driver = ""
    extras = (
        ("compute_capability", f"{major}.{minor}"),
        ("shared_memory_per_block_default", str(smem_default)),
        ("shared_memory_per_sm", str(get("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"))),
        ("l2_bytes", str(get("L2_CACHE_SIZE"))),
        ("max_threads_per_sm", str(get("MAX_THREADS_PER_MULTIPROCESSOR", 2048))),
        ("pci_bus_id", str(dev.pci_bus_id()) if hasattr(dev, "pci_bus_id") else ""),
    )
    return DeviceInfo(
        backend="cuda",
        index=index,
        name=str(dev.name()),
        vendor="nvidia",
        arch_family=arch_family(major, minor),
        arch=f"sm_{major}{minor}",
        compute_units=get("MULTIPROCESSOR_COUNT", 1),
        max_work_group=get("MAX_THREADS_PER_BLOCK", 1024),
        local_mem_bytes=smem_optin,
        global_mem_bytes=int(dev.total_memory()),
        fp16=True,
        subgroup=get("WARP_SIZE", 32),
        platform="CUDA",
        driver=driver,
        extras=extras,
    )


# ----------------------------------------------------------------------------------
# buffers
# ----------------------------------------------------------------------------------


class CudaBuffer:
    """A device address with its size; keeps its owner (pool allocation or foreign object) alive.

    A buffer that owns a pool allocation does not free it itself when it dies: the block
    (with its size) goes on its backend's list of freed blocks. The backend's next
    allocation of the same size takes the last one back directly; otherwise the list goes
    back to the pool at the next allocation or synchronize, where the context is current
    anyway. PyCUDA's pool needs a current context when a block comes back to an empty pool,
    and Python may collect a buffer on any thread at any time; this way a free costs no
    context push, and an op repeated on one shape allocates with no push and no pool call
    (together about 2.5 µs of each call on the H200's host).
    """

    __slots__ = ("__weakref__", "_freed_into", "nbytes", "owner", "ptr")

    def __init__(self, ptr: int, nbytes: int, owner: object, freed_into: list[Any] | None = None) -> None:
        self.ptr = int(ptr)
        self.nbytes = int(nbytes)
        self.owner = owner
        self._freed_into = freed_into  # set only for buffers that own a pool allocation

    def __int__(self) -> int:
        return self.ptr

    def __index__(self) -> int:
        return self.ptr

    def __repr__(self) -> str:
        return f"CudaBuffer(0x{self.ptr:x}, {self.nbytes} bytes)"

    def __del__(self) -> None:
        freed_into, owner = self._freed_into, self.owner
        if freed_into is None or owner is None:
            return
        self.owner = None
        freed_into.append((self.nbytes, owner))  # list.append is atomic: safe from any thread, even at shutdown


def _ptr(buf: Buffer | None) -> int:
    return 0 if buf is None else int(buf)


# ----------------------------------------------------------------------------------
# launch plans
# ----------------------------------------------------------------------------------


def fastdiv(d: int) -> tuple[int, int, int]:
    """(d, m, s) for the kernels' division by an invariant: q = (umulhi(n, m) + n) >> s, n < 2**31."""
    d = max(1, int(d))
    s = (d - 1).bit_length()
    m = ((1 << 32) * ((1 << s) - d)) // d + 1
    return d, m & 0xFFFFFFFF, s


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


#: WinParams in hal_window.cuh: 29 int32 fields, then three FastDiv (3 x uint32 each)
_WIN_FIELDS = (
    "N C IH IW OH OW KH KW SH SW PT PB PL PR DH DW divisor count_include_pad "
    "planes band bands th tw tiles_h tiles_w tc chunks w_floats spp"
).split()

#: output rows per strip of the fixed-window NCHW kernels (WIN_STRIP_* in hal_window.cuh)
_STRIP_ROWS = {"k3s2": 4, "k2s2": 2, "k3s1": 4}


def pack_win(fields: Mapping[str, int]) -> bytes:
    """The WinParams struct, as the kernels read it (divisors derived from the fields)."""
    spp = max(1, int(fields.get("spp", 1)))
    divs = (*fastdiv(fields["OW"]), *fastdiv(fields["OH"]), *fastdiv(spp))
    return struct.pack(f"<{len(_WIN_FIELDS)}i9I", *(int(fields.get(k, 0)) for k in _WIN_FIELDS), *divs)


def pack_bn(
    slabs: int, vec: int, cv_chunk: int, cchunks: int, eps: float, momentum: float, infer: int, reverse: int,
    fd_plane: tuple[int, int, int],
) -> bytes:
    """The BnParams struct of batch_norm.cu."""
    return struct.pack("<4i2f2i3I", slabs, vec, cv_chunk, cchunks, eps, momentum, infer, reverse, *fd_plane)


@dataclass(frozen=True)
class Launch:
    """One kernel launch: what to build, the geometry, and the arguments.

    ``args`` holds ints/floats/bytes and, for buffers, the name of the launcher
    argument (a str) whose device address goes there at launch time. ``pdl``: may this
    launch use programmatic dependent launch (``CudaBackend.pdl``), where the backend does.
    ``cooperative``: launch with the cooperative attribute (every block resident at once, or
    the driver refuses: ``CooperativeLaunchRefused``); for kernels with grid barriers.
    """

    file: str
    defines: tuple[tuple[str, int], ...]
    kernel: str
    fmt: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int
    args: tuple[object, ...]
    pdl: bool = True
    cooperative: bool = False


# ----------------------------------------------------------------------------------
# schemas
# ----------------------------------------------------------------------------------


def _fits_threads(*names: str) -> Callable[[Mapping[str, int], DeviceInfo], str | None]:
    def check(params: Mapping[str, int], device: DeviceInfo) -> str | None:
        for name in names:
            if params[name] > device.max_work_group:
                return f"{name}={params[name]} exceeds the device's {device.max_work_group} threads per block"
        return None

    return check


def _fits_smem(name: str) -> Callable[[Mapping[str, int], DeviceInfo], str | None]:
    def check(params: Mapping[str, int], device: DeviceInfo) -> str | None:
        if params[name] * 1024 > device.local_mem_bytes:
            return (
                f"{name}={params[name]} KiB exceeds the device's {device.local_mem_bytes} bytes "
                "of shared memory per block"
            )
        return None

    return check


def _fits_occupancy(name: str) -> Callable[[Mapping[str, int], DeviceInfo], str | None]:
    def check(params: Mapping[str, int], device: DeviceInfo) -> str | None:
        limit = int(dict(device.extras).get("max_threads_per_sm", "1024"))
        if params[name] > limit:
            return f"{name}={params[name]} exceeds the device's {limit} resident threads per multiprocessor"
        return None

    return check


_SCHEMAS: dict[str, KernelSchema] = {
    "pool2d": KernelSchema(
        "cuda",
        "pool2d",
        (
            Param("POOL_THREADS", (128, 256, 512), 256, "threads per block (-D)"),
            Param("POOL_OCC", (0, 1024, 1536, 2048), 1024,
                  "resident threads per SM the register allocation must allow, 0 = compiler's choice (-D)"),
            Param("POOL_TILE_H", (1, 2, 4, 8, 16, 32), 16, "output rows per block (NCHW band, NHWC tile)"),
            Param("POOL_TILE_W", (4, 8, 16, 32), 8, "output columns per NHWC tile"),
            Param("POOL_SMEM_KB", (8, 16, 24, 32, 48), 48, "shared-memory budget per block for the input tile, KiB"),
            Param("POOL_SPLIT", (0, 1), 0, "float32 stride-2 NCHW tiles: even/odd columns apart in shared memory (-D)"),
            Param("POOL_H2", (0, 1), 1,
                  "float16 and bfloat16 max pooling without indices in 16-bit pairs: NHWC strips, NCHW 2x2/2 and "
                  "3x3/2 output pairs (-D)"),
            Param("POOL_H2AVG", (0, 1), 1,
                  "float16 and bfloat16 NCHW average pooling 2x2/2 and 3x3/2 (even width): output pairs from 32-bit "
                  "words (-D)"),
            Param("POOL_ROWS", (0, 2, 4), 0,
                  "NCHW 2x2/2 and 3x3/2 windows without indices, width a multiple of 16 bytes: output rows per "
                  "thread of the register row-strip kernels (no shared memory); 0 = the shared-memory tiles"),
            Param("POOL_NCOLS", (0, 2, 4), 0,
                  "NHWC 2x2/2 and 3x3/2 windows without indices, C a multiple of 16 bytes: output pixels per "
                  "thread of the register walks (no shared memory); 0 = the shared-memory tiles"),
        ),
        (_fits_threads("POOL_THREADS"), _fits_smem("POOL_SMEM_KB"), _fits_occupancy("POOL_OCC")),
    ),
    "adaptive_pool2d": KernelSchema(
        "cuda",
        "adaptive_pool2d",
        (
            Param("ADAPT_THREADS", (128, 256, 512), 256, "threads per block (-D)"),
            Param("ADAPT_SMEM_KB", (8, 16, 24, 32, 48), 32, "shared-memory budget per NCHW tile, KiB"),
            Param("ADAPT_VSPLIT", (0, 1), 1,
                  "NHWC: a block per output pixel when the outputs are too few for a thread each"),
            Param("ADAPT_GFLAT", (0, 1), 1,
                  "NCHW global pooling: warps stage 32 whole planes at a time through shared memory"),
            Param("ADAPT_GSTAGES", (0, 2, 3, 4), 0,
                  "NCHW global pooling: shared-memory buffers per warp, 0 = 3 for float16, 2 for float32 (-D)"),
            Param("ADAPT_VSPLIT_U", (1, 2, 4, 8), 8,
                  "NHWC block-per-output kernel: 16-byte loads per thread issued before folding (-D)"),
            Param("ADAPT_GVEC_U", (0, 4, 8, 16), 8,
                  "NHWC global pooling without indices, enough (image, channel vector) pairs to fill the GPU: "
                  "a thread per pair with this many 16-byte loads in flight (adaptive_pool2d_*_gvec); 0 = off (-D)"),
            Param("ADAPT_GVEC_S", (1, 2, 4), 1,
                  "NHWC global pooling (gvec): lanes of a warp per (image, channel vector) pair, each folding a "
                  "contiguous slice of the pixels, combined by shuffles; 1 = a thread per pair (-D)"),
        ),
        (_fits_threads("ADAPT_THREADS"), _fits_smem("ADAPT_SMEM_KB")),
    ),
    "conv2d": KernelSchema(
        "cuda",
        "conv2d",
        (
            Param("CONV_THREADS", (128, 256, 512), 256, "threads per block of the generic and depthwise kernels (-D)"),
            Param("CONV_OCC", (0, 1024, 1536, 2048), 1024,
                  "resident threads per SM for those kernels' register allocation, 0 = compiler's choice (-D)"),
            Param("CONV_SIMT_CI", (4, 8), 8, "input channels per pipeline stage of the float 3x3 kernel (-D)"),
            Param("CONV_TC", (0, 1, 2, 3), 1,
                  "float16 dense convolutions on tensor cores (bfloat16 too on sm_80+): "
                  "1 = conv2d_k3_tc (C_in <= 64, KH, KW <= 3); "
                  "2 = the pipelined 3x3 kernel (conv2d_k3_tc_pipe: C_in <= 64, NHWC C_in % 8 == 0, NCHW W % 8 == 0) "
                  "where it applies, 3x3 and 1x1 with C_in > 64 on the streamed-weight kernels "
                  "(conv2d_k{3,1}_tc_wide: NHWC C_in % 8 == 0, NCHW W % 8 == 0), else 1's kernel; "
                  "3 = the streamed-weight kernels for every 3x3 and 1x1 they take, else 1's kernel; "
                  "0 = CUDA cores; every value but 0 sends 3x3 and 1x1 stride 2 (C_in % 8 == 0) to "
                  "conv2d_k{3,1}s2_tc_wide"),
            Param("TC_WIDE_STAGES", (1, 2, 3, 4), 2,
                  "stage buffers of the streamed-weight tensor-core kernels: stages - 1 in flight under the mma "
                  "(1: none, the next stage loads after the mma); a count whose shared memory does not fit the "
                  "device takes 4-row tiles (TC_WIDE_ROWS), else, at stride 2, one stage, else serves the next "
                  "kernel in line (-D)"),
            Param("TC_WIDE_L2PF", (0, 128, 256), 0,
                  "the streamed-weight kernels' input copies ask L2 to fetch this many aligned bytes around each "
                  "16-byte chunk (cp.async .L2::128B / 256B; 0 = none): the later chunks of an NHWC pixel (-D)"),
            Param("TC_WIDE_ROWS", (8, 4), 8,
                  "output rows of the streamed-weight kernels' tiles, a warp each (-D): 8, or 4 (half the "
                  "threads, about 58 % of the shared memory for 3x3); 8 takes 4 where 8 rows' shared memory "
                  "does not fit the device (3x3 stride 1 on 99 KB parts, stride 2 on sm_80)"),
            Param("TC_WIDE_K1_BLOCKS", (1, 2), 1,
                  "resident blocks per SM conv2d_k1_tc_wide is built and launched for (2: 128 registers); "
                  "the grid keeps to what the shared memory allows (-D)"),
            Param("CONV_K1_GEMM", (0, 1), 0,
                  "float16 and bfloat16 dense 1x1 convs (any stride and padding, C_in % 8 == 0, 16-byte aligned NHWC "
                  "buffers, sm_80+): 1 = one GEMM on tensor cores before the CONV_TC kernels (conv2d_k1_gemm: 128 "
                  "output pixels x K1G_BN output channels a block, 32 input channels a cp.async stage, the weights "
                  "read as they lie; NCHW between two layout transposes through NHWC workspaces); 0 = the CONV_TC "
                  "kernels (session 22; the sm_90 table asks for it: NHWC 1x1 at stride 1 and 2, NCHW at stride 2)"),
            Param("K1G_STAGES", (2, 3, 4), 3,
                  "conv2d_k1_gemm: cp.async stage buffers, stages - 1 in flight under the mma (-D)"),
            Param("K1G_BN", (64, 128), 128,
                  "conv2d_k1_gemm: output channels per block tile (2 x 4 warps of 64 x 32 for 128, 4 x 2 of "
                  "32 x 32 for 64); 64 wherever C_out <= 64, whatever this says (-D)"),
            Param("K1G_PERSIST", (0, 1, 2), 0,
                  "conv2d_k1_gemm: 0 = one block per output tile; 1 = persistent blocks (conv2d_k1_gemm_persist: "
                  "resident blocks x SMs, each walking tiles, the next tile's first K1G_STAGES - 1 stages issued "
                  "before this tile's epilogue, a separate output staging buffer: K1G_BN x 256 more bytes of "
                  "shared memory); 2 = 1 with streaming (st.global.cs) output stores; where the device cannot "
                  "hold as many persistent blocks an SM as the registers allow, 0's kernel serves (session 25, "
                  "H200: 3-8 % faster than 0; the sm_90 float16 NHWC 1x1 entries serve it)"),
            Param("CONV_K1_NCHW", (0, 1), 0,
                  "float16 and bfloat16 NCHW dense 1x1 convs (C_in % 8 == 0, OH*OW % 8 == 0, 16-byte aligned "
                  "buffers, sm_80+): "
                  "1 = one GEMM on tensor cores with no transposes, tried before CONV_K1_GEMM's transposing path "
                  "(conv2d_k1_gemm_nchw: K1N_BM output channels x 128 pixels a block, 32 input channels a "
                  "cp.async stage, ldmatrix.trans for the pixel-contiguous input); at another stride or padding "
                  "after sample_planes (x's sampled pixels into a workspace, session 25); 0 = the other kernels "
                  "(stride 1: measured in session 24; the sampled path: see the sm_90 entries)"),
            Param("K1N_STAGES", (2, 3, 4), 3,
                  "conv2d_k1_gemm_nchw: cp.async stage buffers, stages - 1 in flight under the mma (-D)"),
            Param("K1N_BM", (64, 128), 128,
                  "conv2d_k1_gemm_nchw: output channels per block tile (2 x 4 warps of BM/2 x 32 pixels); 64 "
                  "wherever C_out <= 64, whatever this says (-D)"),
            Param("K1N_PERSIST", (0, 1, 2), 0,
                  "conv2d_k1_gemm_nchw: 0 = one block per output tile; 1 = persistent blocks "
                  "(conv2d_k1_gemm_nchw_persist: resident blocks x SMs, each walking tiles, the next tile's "
                  "first K1N_STAGES - 1 stages issued before this tile's epilogue, a separate output staging "
                  "buffer: K1N_BM x 256 more bytes of shared memory); 2 = 1 with streaming (st.global.cs) "
                  "output stores; where the device cannot hold as many persistent blocks an SM as the "
                  "registers allow, 0's kernel serves (session 25, H200: 5-20 % faster than 0; the sm_90 float16 "
                  "NCHW 1x1 entries serve it)"),
            Param("K1N_SAMPLE", (0, 1), 0,
                  "CONV_K1_NCHW at another stride or padding: the kernel that samples x first; 0 = sample_planes "
                  "(a warp an output row, one load in flight a lane; session 25, measured), 1 = "
                  "sample_planes_rows8 (8 rows a warp, their loads issued before their stores; session 26: 0.0471 "
                  "against 0.0626 ms for 32x256x56x56 -> 512 stride 2 on the H200)"),
            Param("CONV_IM2COL", (0, 1), 0,
                  "float16 (sm_75+) and bfloat16 (sm_80+) dense convs with C_in * KH * KW <= 256 that no "
                  "tensor-core kernel above takes (the 7x7 stride-2 stem of 3 channels, other strided or dilated "
                  "stems): 1 = an implicit GEMM on "
                  "tensor cores, both layouts natively (conv2d_im2col_tc: a warp gathers 32 output pixels' im2col "
                  "rows into shared memory, then 64 output channels by mma.sync; session 26), 0 = the tiled "
                  "direct kernel on CUDA cores. float32 dense convs with C_in * KH * KW <= 4096, any window: 1 = an "
                  "implicit GEMM on CUDA cores (conv2d_im2col_simt: conv2d_k1_simt's tiles, K1S_BN and K1S_BK, "
                  "with the input gathered through a per-k offset table; session 27)"),
            Param("CONV_K1_SIMT", (0, 1), 0,
                  "float32 dense 1x1 convs (groups 1, any stride and padding, any C_in, C_out and alignment): "
                  "1 = one SGEMM on CUDA cores, both layouts natively (conv2d_k1_simt: 128 output pixels x K1S_BN "
                  "output channels a block, K1S_BK input channels a double-buffered shared-memory stage, 8 x 8 "
                  "outputs a thread, fp32 FMAs only: no tensor cores, no TF32), ahead of the tiled direct "
                  "kernel; 0 = the tiled direct kernel or one thread per output (session 23; the sm_90 table asks "
                  "for it in both layouts at stride 1 and 2: 1.04-2.10x PyTorch on the H200)"),
            Param("K1S_BN", (64, 128), 128,
                  "conv2d_k1_simt: output channels per block tile (256 threads for 128, 128 for 64); 64 "
                  "wherever C_out <= 64, whatever this says (-D)"),
            Param("K1S_BK", (8, 16), 8, "conv2d_k1_simt: input channels per shared-memory stage (-D)"),
            Param("DW_TILE_H", (1, 2, 4, 8, 16, 32), 32, "depthwise: output rows per block"),
            Param("DW_TILE_W", (4, 8, 16, 32), 8, "depthwise NHWC: output columns per tile"),
            Param("DW_SMEM_KB", (8, 16, 24, 32, 48), 32, "depthwise: shared-memory budget per block, KiB"),
            Param("DW_HALF4", (0, 1), 1,
                  "float16 and bfloat16 NHWC depthwise 3x3: 4 channels per thread, weights in registers (0: 8, "
                  "read per use) (-D)"),
            Param("DW_H2", (0, 1), 1,
                  "float16 and bfloat16 NCHW depthwise 3x3 stride 1 (even width): output pairs from 32-bit words "
                  "(-D)"),
            Param("DW_ROWS", (0, 2, 4), 0,
                  "NCHW depthwise 3x3 stride 1, width a multiple of 16 bytes: output rows per thread of the "
                  "register row-strip kernel (no shared memory); 0 = the shared-memory tiles"),
            Param("DW_SHFL", (0, 1, 2), 0,
                  "with DW_ROWS, padding 1 on every side: each thread loads only its own rows, and the rows "
                  "above and below and the halo columns come from neighbouring lanes by shuffles "
                  "(1: conv2d_dw_rows{2,4}s_k3s1; 2: conv2d_dw_rows{2,4}p_k3s1, a persistent grid whose threads "
                  "load their next item's rows while computing the current one; the same outputs bit for bit "
                  "as the plain strips; session 23)"),
            Param("DW_SHFL_OCC", (512, 640, 768, 1024), 640,
                  "with DW_SHFL 2: resident threads per SM the persistent kernel is built and launched for (-D)"),
            Param("DW_COLS", (0, 2, 4, 8), 0,
                  "NHWC depthwise 3x3 stride 1, C % 4 == 0: output pixels per thread of the register kernel "
                  "that walks a row with its 3x3 window in registers; 0 = the shared-memory tiles"),
            Param("DW_CROWS", (0, 4, 8), 0,
                  "with DW_COLS 2 or 4: output rows per thread, the walk going down a block of rows and loading "
                  "each input row once; 0 = one row"),
            Param("DW_PREFETCH", (0, 1), 1,
                  "with DW_CROWS: the next input row's loads issued before the current row's FMAs (-D)"),
            Param("DW_PIPE", (0, 4, 8, 16), 0,
                  "NHWC depthwise 3x3 stride 1, C % (16 / element size) == 0, 16-byte aligned: output rows per "
                  "tile of the pipelined shared-memory kernel (conv2d_dw_pipe{4,8,16}_k3s1: persistent blocks, "
                  "tiles of this many rows x 32 (float32) or 16 (float16) columns x 128 bytes of channels copied "
                  "by cp.async into two buffers, the next tile's copies in flight while the current one is "
                  "computed; on the H200 as fast as the DW_COLS walks, not faster), tried before DW_COLS; 0 = off"),
            Param("DW_PIPE_COLS", (1, 2), 1,
                  "with DW_PIPE: output columns per thread (2: conv2d_dw_pipe{rows}x2_k3s1, tiles twice as wide, "
                  "each input pixel converted once for two columns' taps; serves float16 on sm_90, session 15)"),
            Param("DW_TC", (0, 1, 2), 0,
                  "float16 NCHW depthwise 3x3 stride 1 (IW % 8 == 0, left padding <= 1, sm_75+) on tensor cores: "
                  "a row's taps as a banded matrix, a warp per 16 x 32 output tile (1: conv2d_dw_tc_k3s1, a warp "
                  "a tile; 2: conv2d_dw_tc_persist_k3s1, persistent warps with the next tile's loads in flight; "
                  "session 20); opt-in: slower than the DW_ROWS strips on the H200, and an Inf or NaN input makes "
                  "NaN of nearby outputs of its rows (the matrix's zeros times Inf), so the tuner never offers it",
                  untuned=(1, 2)),
            Param("GRP_TILED", (0, 1), 1,
                  "specs no other kernel takes (grouped but not depthwise, channel multipliers, strides, "
                  "dilations, other kernel sizes): 1 = the register-tiled direct kernel (conv2d_grp_k3s1, "
                  "conv2d_grp_g) where its shared memory fits, 0 = one thread per output (conv2d)"),
            Param("GRP_COT", (1, 2, 4, 8), 8, "tiled direct kernel: output channels per thread (-D)"),
            Param("GRP_PIX", (1, 2, 4), 4, "tiled direct kernel: consecutive output columns per thread (-D)"),
            Param("GRP_TILE_W", (4, 8, 16, 32, 64), 32,
                  "tiled direct kernel: output columns per tile at most (the tile narrows to the output's width)"),
            Param("GRP_TC", (0, 1), 0,
                  "float16 (sm_75+) and bfloat16 (sm_80+) grouped convs, stride 1, no dilation, KH, KW <= 3, at "
                  "most 16 channels a group in and out: 1 = on tensor cores (conv2d_grp_tc8 / conv2d_grp_tc16; "
                  "the sm_90 float16 NHWC groups-8 entry, session 20), 0 = the tiled direct kernel"),
            Param("GRP_TC_ROWS", (4, 8, 16, 32), 16,
                  "with GRP_TC: output rows per tile (tiles are 32 columns wide; no taller than the output)"),
            Param("GRP_OCC", (0, 1024, 1536), 0,
                  "tiled direct kernel: resident threads per SM its register allocation must allow, 0 = the "
                  "compiler's choice (about 80 registers) (-D)"),
            Param("GRP_CIC", (1, 2, 4, 8, 16), 8,
                  "tiled direct kernel: input channels staged in shared memory at a time (fewer where the "
                  "device's shared memory per block would not hold them)"),
        ),
        (_fits_threads("CONV_THREADS"), _fits_smem("DW_SMEM_KB"), _fits_occupancy("CONV_OCC")),
    ),
    "batch_norm": KernelSchema(
        "cuda",
        "batch_norm",
        (
            Param("BN_THREADS", (128, 256, 512), 256, "threads per block (-D)"),
            Param("BN_UNROLL", (1, 2, 4, 8), 4, "16-byte loads in flight per thread (-D)"),
            Param("BN_BLOCKS_PER_SM", (2, 4, 8, 16, 32), 16,
                  "blocks per multiprocessor (NCHW grid; NHWC runs one wave of at most this many)"),
            Param("BN_L2_HINT", (0, 1), 1, "L2 eviction hints and mirrored apply order (-D, sm_80+)"),
            Param("BN_FLAT", (0, 1), 1,
                  "inference: one wave of persistent blocks over 16-byte vectors (batch_norm_infer_flat)"),
            Param("BN_INFER_OCC", (0, 1024, 1536, 2048), 0,
                  "resident threads per SM for batch_norm_infer_flat's registers, 0 = by BN_UNROLL (-D)"),
            Param("BN_FLAT_REG", (0, 1), 1,
                  "NHWC flat inference: channel constants in registers when C / vector width divides BN_THREADS"),
            Param("BN_INFER_TILES", (0, 1), 0,
                  "flat inference: 1 = a block per tile of BN_UNROLL x BN_THREADS vectors (the hardware balances "
                  "the last wave; each block rebuilds the channel table), 0 = one wave of persistent blocks"),
            Param("BN_INFER_EARLY", (0, 1), 0,
                  "flat inference: 1 = the first tile's loads are issued before the channel constants are read (-D)"),
            Param("BN_APPLY_MERGE", (0, 1), 0,
                  "NCHW training: 1 = each apply block merges its channel's partial statistics itself "
                  "(batch_norm_apply_merged), no batch_norm_finalize launch"),
            Param("BN_STATS_SUMS", (0, 16, 32, 64, 128), 64,
                  "training statistics: 0 = a Chan merge per batch of loads; N = shifted sums over chunks of "
                  "about N values per channel and thread, a merge per chunk (-D; session 18)"),
            Param("BN_PIVOT_N", (0, 4), 4,
                  "training statistics' shifted sums: each chunk re-centres on the mean of its first N values "
                  "(-D; session 45); 0 = keeps its first value as the pivot, where an outlier leaves M2 good to "
                  "only about n (n + 1) eps / 2 (never offered by the tuner)", untuned=(0,)),
            Param("BN_FUSED", (0, 1), 0,
                  "NHWC training: 1 = one cooperative launch (batch_norm_train_fused) that keeps x on chip between "
                  "the statistics and the apply where it fits (what does not is re-read, from L2 where it fits)"),
            Param("BN_FUSED_THREADS", (256, 512, 1024), 512,
                  "batch_norm_train_fused's threads per block (-D, that kernel's builds only)"),
            Param("BN_FUSED_REGS", (0, 4, 8, 12, 16), 8,
                  "batch_norm_train_fused: 16-byte vectors each thread keeps in registers "
                  "(-D, that kernel's builds only)"),
            Param("BN_FUSED_FIN", (0, 1), 0,
                  "batch_norm_train_fused: 1 = every block merges every channel's partials (one grid barrier), "
                  "where they are at most 128 KiB; 0 = a block a channel and a second barrier"),
        ),
        (_fits_threads("BN_THREADS", "BN_FUSED_THREADS"),),
    ),
    "eltwise": KernelSchema(
        "cuda", "eltwise", (Param("ELT_THREADS", (128, 256, 512), 256, "threads per block (-D)"),),
        (_fits_threads("ELT_THREADS"),),
    ),
    # quant_conv2d.cu: exact integer sums, nothing to tune (the kernel follows from the spec, _plan_qconv2d);
    # the empty schema lets the op layer resolve parameters as for the other ops
    "qconv2d": KernelSchema("cuda", "qconv2d", ()),
}

#: parameters that change the generated code (passed as -D); the rest shape the launch only
_COMPILE_PARAMS = {
    "pool2d": ("POOL_THREADS", "POOL_OCC", "POOL_SPLIT", "POOL_H2", "POOL_H2AVG"),
    "adaptive_pool2d": ("ADAPT_THREADS", "ADAPT_GSTAGES", "ADAPT_VSPLIT_U", "ADAPT_GVEC_U", "ADAPT_GVEC_S"),
    "conv2d": ("CONV_THREADS", "CONV_SIMT_CI", "CONV_OCC", "DW_HALF4", "DW_H2", "DW_PREFETCH", "DW_SHFL_OCC",
               "TC_WIDE_STAGES", "TC_WIDE_L2PF", "TC_WIDE_ROWS", "TC_WIDE_K1_BLOCKS", "K1G_STAGES", "K1G_BN", "K1S_BN",
               "K1S_BK", "K1N_STAGES", "K1N_BM", "GRP_COT", "GRP_PIX", "GRP_OCC"),
    "batch_norm": ("BN_THREADS", "BN_UNROLL", "BN_L2_HINT", "BN_INFER_OCC", "BN_INFER_EARLY", "BN_STATS_SUMS",
                   "BN_PIVOT_N"),
    "eltwise": ("ELT_THREADS",),
    "qconv2d": (),
}

#: float32, float16 and bfloat16 (where ml_dtypes is installed): the float kernels' storage types
_FLOAT_DTYPES = FLOAT_DTYPES
#: quant_pool2d.cu's threads per block (its QPOOL_THREADS default)
_QPOOL_THREADS = 256
#: quant_conv2d.cu's threads per block (its QCONV_THREADS default)
_QCONV_THREADS = 256
# qconv2d_k3_tc: the weights of 64 channels, two 8x32 input tiles of 64 bytes a pixel (NHWC) or one and its
# rows as staged (NCHW), per-channel constants
_QCONV_TC_SMEM = {"NHWC": 9 * 64 * 64 + 2 * 10 * 34 * 64 + 64 * (8 + 4 + 4),
                  "NCHW": 9 * 64 * 64 + 10 * 34 * 64 + 64 * 10 * 64 + 64 * (8 + 4 + 4)}
#: quant_pool2d.cu's NCHW row kernels: (kernel size, stride) of their square windows, and
#: the outputs per thread (its QROW_OUT default)
_QPOOL_ROWS = ((2, 2), (3, 2), (3, 1))
_QROW_OUT = 8


def _contract_pool_args(spec: Pool2dSpec) -> tuple[object, ...]:
    """The contract's pool2d arguments (docs/ARCHITECTURE.md): buffers x, y, indices, then
    N, C, IH, IW, OH, OW, KH, KW, SH, SW, PT, PB, PL, PR, DH, DW, DIVISOR, COUNT_INCLUDE_PAD."""
    (kh, kw), (sh, sw), (dh, dw) = spec.kernel, spec.stride, spec.dilation
    return ("x", "y", "i", spec.n, spec.c, spec.in_h, spec.in_w, spec.out_h, spec.out_w, kh, kw, sh, sw,
            *spec.pads, dh, dw, spec.divisor or 0, int(spec.count_include_pad))


#: the kernel family (schema) of each spec type the launch plans cover
_SPEC_FAMILIES: dict[type, str] = {Pool2dSpec: "pool2d", AdaptivePool2dSpec: "adaptive_pool2d",
                                   Conv2dSpec: "conv2d", BatchNormSpec: "batch_norm"}


@functools.lru_cache(maxsize=1)
def _libcuda() -> Any:
    """The CUDA driver library through ctypes (for the graph calls PyCUDA lacks), or None."""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
        for name in ("cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuGraphInstantiateWithFlags",
                     "cuGraphLaunch", "cuGraphDestroy"):
            getattr(lib, name).restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return lib


#: set to 0 to launch without programmatic dependent launch (see ``CudaBackend.pdl``)
PDL_ENV = "HAL_CUDA_PDL"
_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
_CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2
_CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE = 720
_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class CooperativeLaunchRefused(HalError):
    """The driver would not make a cooperative grid resident (fewer multiprocessors available
    than planned for, under MPS or green contexts); the op falls back to its other plan."""


@functools.lru_cache(maxsize=1)
def pdl_structs() -> types.SimpleNamespace:
    """The ctypes forms of CUlaunchConfig and of the CUlaunchAttributes hal passes
    (``attr``: programmatic stream serialization allowed; ``coop_attr``: cooperative), for
    ``cuLaunchKernelEx``."""
    import ctypes

    class Attribute(ctypes.Structure):  # CUlaunchAttribute: id, pad to 8, a 64-byte union
        _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int * 16)]

    class Config(ctypes.Structure):  # CUlaunchConfig
        _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                    ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(Attribute)), ("num_attrs", ctypes.c_uint)]

    attr = Attribute()
    attr.id = _CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value[0] = 1  # programmaticStreamSerializationAllowed
    coop_attr = Attribute()
    coop_attr.id = _CU_LAUNCH_ATTRIBUTE_COOPERATIVE
    coop_attr.value[0] = 1
    return types.SimpleNamespace(ctypes=ctypes, Config=Config, attr=attr, coop_attr=coop_attr)


@functools.lru_cache(maxsize=1)
def _pdl_api() -> types.SimpleNamespace | None:
    """``pdl_structs`` with the driver (``lib``: cuLaunchKernelEx and the module calls,
    through ctypes, since PyCUDA's launch takes no launch attributes and keeps its function
    handles to itself), or None where the driver lacks cuLaunchKernelEx (before CUDA 12.0)."""
    import ctypes

    lib = _libcuda()
    if lib is None or not hasattr(lib, "cuLaunchKernelEx"):
        return None
    lib.cuLaunchKernelEx.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.cuLaunchKernelEx.restype = ctypes.c_int
    for name in ("cuModuleLoadData", "cuModuleGetFunction", "cuFuncSetAttribute"):
        getattr(lib, name).restype = ctypes.c_int
    return types.SimpleNamespace(lib=lib, **vars(pdl_structs()))


class PdlLaunch:
    """One launch of a plan through cuLaunchKernelEx with programmatic stream serialization
    (or, for ``launch.cooperative``, as a cooperative grid instead).

    The configuration is built once; each call packs the arguments into this launch's own
    buffer (as PyCUDA packs them: ``struct`` with the plan's format) and passes it through
    ``extra``, under a lock, since the driver reads the buffer during the call only."""

    __slots__ = ("_api", "_buf", "_call", "_cfg", "_coop", "_extra", "_func", "_lock", "_size", "_struct", "kernel")

    def __init__(self, api: Any, func: int, launch: Launch, stream: int) -> None:
        ct = api.ctypes
        self._api = api
        self.kernel = launch.kernel
        cfg = api.Config()
        cfg.grid[:] = launch.grid
        cfg.block[:] = launch.block
        cfg.shared = launch.shared
        cfg.stream = stream
        self._coop = launch.cooperative
        cfg.attrs = ct.pointer(api.coop_attr if launch.cooperative else api.attr)
        cfg.num_attrs = 1
        self._cfg = cfg
        self._struct = struct.Struct(launch.fmt)
        self._buf = ct.create_string_buffer(max(1, self._struct.size))
        self._size = ct.c_size_t(self._struct.size)
        # CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END
        self._extra = (ct.c_void_p * 5)(1, ct.addressof(self._buf), 2, ct.addressof(self._size), None)
        self._func = ct.c_void_p(func)
        self._call = api.lib.cuLaunchKernelEx
        self._lock = threading.Lock()

    def __call__(self, args: Sequence[object]) -> None:
        with self._lock:
            self._struct.pack_into(self._buf, 0, *args)
            status = self._call(self._api.ctypes.byref(self._cfg), self._func, None, self._extra)
        if status == _CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE and self._coop:
            raise CooperativeLaunchRefused(f"{self.kernel}: cooperative grid of {self._cfg.grid[0]} blocks refused")
        if status != 0:
            raise HalError(f"cuLaunchKernelEx of {self.kernel} failed (CUresult {status})")


def _load_pack() -> tuple[Callable[..., bytes] | None, bool]:
    try:
        from pycuda._pvt_struct import pack  # what prepared_async_call packs arguments with
    except ImportError:
        return None, False
    return pack, True


_pack_fn, _FAST_LAUNCH = _load_pack()

#: conv2d_im2col_tc: the largest C_in * KH * KW (its shared memory: 16 + 2 * 64 bytes a k for the offsets and the
#: weights, and 4 warps' 32 rows of k)
_IM2COL_KMAX = 256
#: conv2d_im2col_simt's largest K = C_in KH KW (its table: 16 bytes a k in shared memory, 64 KiB at most)
_IM2COL_SIMT_KMAX = 4096
_TC_SMEM = (9 * 64 * 64 + 6 * 34 * 64) * 2  # conv2d_k3_tc: all weights of 64 channels + one input tile
# conv2d_k3_tc_pipe: the weights + two 8x32 input tiles (NHWC), or one tile and its rows as staged (NCHW)
_TC_PIPE_SMEM = {"NHWC": (9 * 64 * 64 + 2 * 10 * 34 * 64) * 2, "NCHW": (9 * 64 * 64 + 10 * 34 * 64 + 64 * 10 * 48) * 2}


def _tc_wide_smem(layout: str, k: int, stages: int, stride: int = 1, rows: int = 8) -> int:
    """conv2d_k{3,1}_tc_wide's (and NHWC conv2d_k{3,1}s2_tc_wide's, stride 2) shared memory (tcw::Geo in
    conv2d.cu): `stages` stage buffers (TC_WIDE_STAGES), each a `rows` x 32 output tile's (TC_WIDE_ROWS)
    input patch of 32 channels ([pixel][channel] in NHWC, the rows as they lie in NCHW) and those channels'
    weights, or the tile's results where they are more; NCHW adds the transposed patch."""
    patch = ((rows - 1) * stride + k) * (31 * stride + k) * 64
    weights = k * k * 64 * 64
    if layout == "NHWC":
        return stages * max(patch + weights, rows * 32 * 64 * 2)
    return stages * max(32 * (rows + k - 1) * 48 * 2 + weights, rows * 64 * 40 * 2) + patch


#: conv2d_k{3,1}_tc_wide by (layout, K, TC_WIDE_STAGES, TC_WIDE_ROWS): 3x3 NHWC, two stages, 8 rows 117,248 bytes
_TC_WIDE_SMEM = {(layout, k, st, rows): _tc_wide_smem(layout, k, st, rows=rows)
                 for layout in ("NHWC", "NCHW") for k in (1, 3) for st in (1, 2, 3, 4) for rows in (8, 4)}
#: conv2d_k{3,1}s2_tc_wide (NHWC only) by (K, TC_WIDE_STAGES, TC_WIDE_ROWS): 3x3 with two stages and 8 rows
#: 215,168 bytes, with 4 rows 148,608, with 4 rows and one stage 74,304
_TC_WIDE_S2_SMEM = {(k, st, rows): _tc_wide_smem("NHWC", k, st, 2, rows)
                    for k in (1, 3) for st in (1, 2, 3, 4) for rows in (8, 4)}


def _transposes_fit(spec: Conv2dSpec) -> bool:
    """Whether CudaBackend._through_nhwc can carry `spec` (layout_transpose's grid: images and
    64-element tiles below 65536 a dimension; int32 element counts)."""
    n, ci, co = spec.n, spec.c_in, spec.c_out
    hw_in, hw_out = spec.in_h * spec.in_w, spec.out_h * spec.out_w
    return (n < 65536 and _cdiv(hw_in, 64) < 65536 and _cdiv(hw_out, 64) < 65536
            and n * ci * hw_in < 2**31 and n * co * hw_out < 2**31)


def _k1g_smem(stages: int, bn: int) -> int:
    """conv2d_k1_gemm's shared memory (k1g::SMEM in conv2d.cu): `stages` stage buffers (K1G_STAGES) of
    128 pixels and `bn` output channels (K1G_BN) x 32 input channels (64-byte rows), or the block's
    128 x `bn` float16 results, staged for the stores, where they are more."""
    return max(stages * (128 + bn) * 64, 128 * bn * 2)


def _k1n_smem(stages: int, bm: int) -> int:
    """conv2d_k1_gemm_nchw's shared memory (k1n::SMEM in conv2d.cu): `stages` stage buffers (K1N_STAGES) of
    `bm` output channels (K1N_BM) x 32 input channels (64-byte rows) and 32 input channels x 128 pixels
    (256-byte rows), or the block's `bm` x 128 float16 results, staged for the stores, where they are more."""
    return max(stages * (bm * 64 + 32 * 256), bm * 256)


#: resident blocks an SM the GEMM kernels' registers allow (k1g::MINB / k1n::MINB in conv2d.cu), by tile width
_K1_MINB = {128: 2, 64: 3}
#: the persistent GEMM kernels by K1G_PERSIST / K1N_PERSIST (2: streaming stores)
_K1G_PERSIST_KERNELS = {1: "conv2d_k1_gemm_persist", 2: "conv2d_k1_gemm_persist_cs"}
_K1N_PERSIST_KERNELS = {1: "conv2d_k1_gemm_nchw_persist", 2: "conv2d_k1_gemm_nchw_persist_cs"}


def _k1g_persist_smem(stages: int, bn: int) -> int:
    """conv2d_k1_gemm_persist's shared memory (k1g::PSMEM): the stage buffers and, beside them, the
    128 x `bn` float16 output staging buffer (the next tile's stages load while it is stored)."""
    return stages * (128 + bn) * 64 + 128 * bn * 2


def _k1n_persist_smem(stages: int, bm: int) -> int:
    """conv2d_k1_gemm_nchw_persist's shared memory (k1n::PSMEM): the stage buffers and, beside them, the
    `bm` x 128 float16 output staging buffer."""
    return stages * (bm * 64 + 32 * 256) + bm * 256


def _k1s_smem(bn: int, bk: int) -> int:
    """conv2d_k1_simt's shared memory (k1s::SMEM in conv2d.cu): two stage buffers of `bk` input channels
    (K1S_BK) x (128 pixels + `bn` output channels (K1S_BN)) floats, each row of the two padded by 4 floats."""
    return 2 * bk * ((128 + 4) + (bn + 4)) * 4


_SIMT_BUF_FLOATS = {ci: ci * 10 * 36 + ci * 9 * 68 for ci in (4, 8)}

#: conv2d_dw_pipe{rows}[x{cols}]_k3s1 (conv2d.cu, namespace dwp): threads per block, the blocks per
#: SM its __launch_bounds__ lets the registers allow (by output columns per thread), bytes of
#: channels per tile
_DW_PIPE_THREADS, _DW_PIPE_MINB, _DW_PIPE_SLICE = 256, {1: 3, 2: 2}, 128
# conv2d_dw_tc_k3s1: warps a block, and each warp's staged tile (18 rows x 56 halves); the
# persistent variant's blocks a multiprocessor (its __launch_bounds__)
_DW_TC_WARPS, _DW_TC_WARP_SMEM, _DW_TC_PERSIST_MINB = 4, 18 * 56 * 2, 6


def dw_pipe_geometry(itemsize: int, rows: int, cols: int = 1) -> tuple[int, int]:
    """conv2d_dw_pipe{rows}[x{cols}]_k3s1's tile width (output columns: one thread per 4-channel
    group of the 128-byte slice and `cols` columns) and its shared memory (two (rows + 2) x
    (width + 2) pixel patches of 128 bytes)."""
    tw = _DW_PIPE_THREADS // (_DW_PIPE_SLICE // (4 * itemsize)) * cols
    return tw, 2 * (rows + 2) * (tw + 2) * _DW_PIPE_SLICE


def tc_wide_weight_halves(c_in: int, c_out: int, taps: int = 9) -> int:
    """The float16 elements of conv2d_tc_wprep's weight layout: [co tile][32-channel chunk][tap][64][32]."""
    return _cdiv(c_out, 64) * _cdiv(c_in, 32) * taps * 64 * 32


def _cubin_path(file: str, defines: Mapping[str, int], arch: str) -> Path | None:
    """Where hal keeps the cubin of one build: keyed by the kernel sources' hash, file, defines, arch."""
    if cache.cache_disabled():
        return None
    key = hashlib.sha256(
        "|".join([_sources_hash(), file, arch, *CudaBackend.compile_options(defines)]).encode()
    ).hexdigest()
    return cache.cache_dir("cuda-cubin") / f"{key}.cubin"


@functools.lru_cache(maxsize=1)
def _sources_hash() -> str:
    return resources.folder_hash(CudaBackend.kernel_folder)


def build_cubin(file: str, defines: Mapping[str, int], arch: str) -> bytes:
    """The cubin of one build: from hal's cubin cache, else compiled by nvcc and stored there.

    Needs no CUDA context (parallel warm-up runs it in worker processes). hal keys the
    cache itself: PyCUDA's own cache runs the preprocessor on every lookup to hash the
    included headers, which costs about a second per build even when it hits.
    """
    from pycuda.compiler import compile as nvcc_compile

    path = _cubin_path(file, defines, arch)
    if path is not None and path.is_file():
        return path.read_bytes()
    options = CudaBackend.compile_options(defines)
    include = str(resources.kernel_dir(CudaBackend.kernel_folder))
    source = resources.kernel_source(CudaBackend.kernel_folder, file)
    cubin: bytes = nvcc_compile(
        source, options=options, arch=arch, no_extern_c=True, include_dirs=[include], cache_dir=False
    )
    if path is not None:
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_bytes(cubin)
            os.replace(tmp, path)  # atomic: a concurrent reader sees the old state or the whole file
        except OSError:
            tmp.unlink(missing_ok=True)
    return cubin


class _DeviceState:
    """What every CudaBackend of one device shares: the retained primary context."""

    def __init__(self, drv: Any, index: int) -> None:
        self.ctx = drv.Device(index).retain_primary_context()


_STATES: dict[int, _DeviceState] = {}
_STATES_LOCK = threading.Lock()


class CudaBackend(Backend):
    """One CUDA device through PyCUDA."""

    name: ClassVar[str] = "cuda"
    kernel_folder: ClassVar[str] = "kernels_cu"
    #: every output store goes through the prelude's epilogue (-DFUSE_RELU=1)
    fused_relu: ClassVar[bool] = True
    #: int8/uint8 max and average pooling (quant_pool2d.cu, not tuned)
    quantized_pooling: ClassVar[bool] = True
    #: int8/uint8 QLinearConv and ConvInteger (quant_conv2d.cu: one thread per output, not tuned)
    quantized_conv: ClassVar[bool] = True
    #: bfloat16 activations in every float op (-DDTYPE_BF16=1: 16-bit storage, float32 arithmetic,
    #: the CUDA-core kernels; float16's tensor-core and half2 paths stay float16's)
    bfloat16: ClassVar[bool] = True
    #: cooperative launches (batch_norm_train_fused): set per device in __init__ (the driver's
    #: cuLaunchKernelEx and the device's attribute), cleared when the driver refuses one
    cooperative: bool = False
    _capturing: bool = False  # set per instance by capture (a class default for planners made without __init__)

    # -- discovery ---------------------------------------------------------------------
    @classmethod
    def probe(cls) -> BackendProbe:
        """Find CUDA devices; never raises."""
        try:
            import pycuda.driver as drv
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] == "pycuda":
                return BackendProbe(False, _NOT_INSTALLED)
            return BackendProbe(False, f"{_NO_DEVICE} ({exc})")
        except Exception as exc:  # libcuda missing, broken build
            return BackendProbe(False, f"{_NO_DEVICE} ({type(exc).__name__}: {exc})")
        try:
            drv.init()
            count = drv.Device.count()
            infos = tuple(_device_info(drv, i) for i in range(count))
        except Exception as exc:
            return BackendProbe(False, f"{_NO_DEVICE} ({type(exc).__name__}: {exc})")
        if not infos:
            return BackendProbe(False, _NO_DEVICE)
        names = ", ".join(f"{i.name} ({i.arch})" for i in infos)
        return BackendProbe(True, f"cuda: {len(infos)} device(s): {names}", infos)

    @classmethod
    def schemas(cls) -> Mapping[str, KernelSchema]:
        """Tunable parameters of every kernel family."""
        return dict(_SCHEMAS)

    # -- runtime -----------------------------------------------------------------------
    def __init__(self, info: DeviceInfo) -> None:
        super().__init__(info)
        import pycuda.driver as drv
        import pycuda.tools

        self._drv = drv
        drv.init()
        with _STATES_LOCK:
            state = _STATES.get(info.index)
            if state is None:
                state = _STATES[info.index] = _DeviceState(drv, info.index)
        self._ctx = state.ctx
        major, minor = (int(v) for v in dict(info.extras).get("compute_capability", "7.5").split("."))
        self._cc = (major, minor)
        self._arch = f"sm_{major}{minor}"
        self._sms = max(1, info.compute_units)
        self._smem_default = int(dict(info.extras).get("shared_memory_per_block_default", 48 * 1024))
        self._lock = threading.RLock()
        self._modules: dict[tuple[str, tuple[tuple[str, int], ...]], Any] = {}
        self._functions: dict[tuple[str, tuple[tuple[str, int], ...], str], Any] = {}
        #: per plan: its launches, PyCUDA's functions, whether the fast launch applies, and (with
        #: the pdl setting they were made for) the cuLaunchKernelEx launchers, made on first use
        self._plan_fns: dict[int, tuple[tuple[Launch, ...], tuple[Any, ...], bool,
                                        tuple[bool, tuple[Any, ...]] | None]] = {}
        #: inside ``capture``: plain launches (a graph has no launch gaps to hide, and its
        #: BatchNorm training ran 5-13 % slower with programmatic edges, session 17 call2)
        self._capturing = False
        #: programmatic dependent launch: on sm_90+ where the driver has cuLaunchKernelEx,
        #: unless HAL_CUDA_PDL=0 (docs/backend-cuda.md, "Launching"); read at each launch
        self.pdl = major >= 9 and os.environ.get(PDL_ENV, "1") != "0" and _pdl_api() is not None
        coop_attr = getattr(drv.device_attribute, "COOPERATIVE_LAUNCH", None)  # not in every PyCUDA
        self.cooperative = _pdl_api() is not None and (
            bool(drv.Device(info.index).get_attribute(coop_attr)) if coop_attr is not None else major >= 6)
        #: cubins of builds compiled here, until their first PDL launch loads them again
        #: (``build_all``'s, often never launched, are read back from hal's cache instead)
        self._cubins: dict[tuple[str, tuple[tuple[str, int], ...]], bytes] = {}
        self._pdl_modules: dict[tuple[str, tuple[tuple[str, int], ...]], int] = {}
        self._pdl_funcs: dict[tuple[str, tuple[tuple[str, int], ...], str], list[int]] = {}
        self._workspace: dict[str, CudaBuffer] = {}
        #: tests only: use the contract entry points (one thread per output) everywhere
        self.force_generic = False
        #: (bytes, pool block) of dead buffers: reused or returned at the next allocation (CudaBuffer)
        self._freed: list[tuple[int, Any]] = []
        with self._active():
            self._pool = pycuda.tools.DeviceMemoryPool()
            self._stream = drv.Stream()
        atexit.register(self._release)

    @contextmanager
    def _active(self) -> Iterator[None]:
        """Make this device's primary context current on the calling thread."""
        self._ctx.push()
        try:
            yield
        finally:
            self._drv.Context.pop()

    def _release(self) -> None:
        try:
            with self._active():
                self._stream.synchronize()
                self._return_freed()
                self._pool.stop_holding()
        except Exception:  # interpreter shutdown: the driver may already be gone
            pass

    def _return_freed(self) -> None:
        """Hand the blocks of dead buffers back to the pool (the context must be current)."""
        freed = self._freed
        while freed:
            try:
                block = freed.pop()[1]
            except IndexError:  # another thread took the last one
                return
            try:
                block.free()
            except Exception:  # a block the driver already released (context torn down)
                pass

    def _alloc_raw(self, nbytes: int) -> CudaBuffer:
        if self._freed:
            self._return_freed()
        try:
            alloc = self._pool.allocate(nbytes)
        except Exception as exc:  # pycuda.driver.MemoryError (the pool already freed what it held)
            if type(exc).__name__ == "MemoryError" or "out of memory" in str(exc).lower():
                raise OutOfMemory(self.info.id, nbytes, str(exc)) from exc
            raise
        return CudaBuffer(int(alloc), nbytes, alloc, self._freed)

    def allocate(self, nbytes: int) -> Buffer:
        """An uninitialised device buffer of ``nbytes`` (>= 1) from the memory pool."""
        nbytes = max(1, int(nbytes))
        freed = self._freed
        if freed:
            try:
                entry = freed.pop()
            except IndexError:  # another thread took the last one
                entry = None
            if entry is not None:
                if entry[0] == nbytes:
                    # a dead buffer's block of this very size: no pool call, no context push.
                    # Its last users were queued on this device's one stream, before anything
                    # the new buffer will be used by (the pool's own reuse relies on the same)
                    return CudaBuffer(int(entry[1]), nbytes, entry[1], freed)
                freed.append(entry)  # the pool takes it back below
        self._ctx.push()  # explicit push/pop: every op allocates, and a generator costs microseconds
        try:
            return self._alloc_raw(nbytes)
        finally:
            self._drv.Context.pop()

    def upload(self, array: np.ndarray) -> Buffer:
        """A new device buffer holding a copy of ``array``."""
        host = transferable(np.ascontiguousarray(array))
        with self._active():
            buf = self._alloc_raw(max(1, host.nbytes))
            if host.nbytes:
                # pageable source: the driver has copied it out before this returns
                self._drv.memcpy_htod_async(buf.ptr, host, self._stream)
        return buf

    def download(self, buffer: Buffer, out: np.ndarray) -> None:
        """Copy ``out.nbytes`` bytes of ``buffer`` into ``out`` (waits for queued work first)."""
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise HalError("download: out must be a writeable C-contiguous array")
        if out.nbytes == 0:
            return
        with self._active():
            self._drv.memcpy_dtoh_async(transferable(out), int(buffer), self._stream)
            self._stream.synchronize()

    def copy(self, src: Buffer, dst: Buffer, nbytes: int) -> None:
        """Device-to-device copy of ``nbytes`` on this device's stream."""
        if nbytes <= 0:
            return
        with self._active():
            self._drv.memcpy_dtod_async(int(dst), int(src), int(nbytes), self._stream)

    def synchronize(self) -> None:
        """Wait for every launch queued on this device's stream."""
        with self._active():
            self._stream.synchronize()
            if self._freed:
                self._return_freed()

    def time_launches(
        self, launch: Callable[[], object], repeats: int, warmup: int = 2, *, queued: bool = False
    ) -> list[float]:
        """Seconds of device time each of ``repeats`` calls of ``launch`` took (CUDA events on the stream).

        Without ``queued``, a GPU that outruns the host idles inside each event pair while
        the host prepares the launch: the figure is what a user's loop of such calls gets.
        ``queued`` (the tuner, ``hal bench``'s kernel time): the event pairs and launches are
        enqueued behind ``hal_spin`` (eltwise.cu), sized from the warm-up calls' host time,
        so the GPU runs them back to back: the kernels' own time, also for kernels of
        10-20 µs whose host time exceeds their GPU time."""
        drv = self._drv
        host = []  # each warm-up call's host time; the fastest counts (the first may compile)
        for _ in range(warmup):
            t0 = time.perf_counter()
            launch()
            host.append(time.perf_counter() - t0)
        host_s = min(host, default=50e-6)
        with self._active():
            events = [(drv.Event(), drv.Event()) for _ in range(repeats)]
        if queued:
            self.synchronize()
            # twice the host time the enqueues should take, plus 1-2 ms, in whole ms (a few
            # plans, reused); at most 0.5 s
            ms = min(500, int(2e3 * repeats * (host_s + 20e-6)) + 2)
            self._run(self._spin_plan(ms * 1_000_000), {})
        for start, end in events:
            with self._active():
                start.record(self._stream)
            launch()
            with self._active():
                end.record(self._stream)
        with self._active():
            if events:
                events[-1][1].synchronize()
            return [end.time_since(start) / 1e3 for start, end in events]

    def _spin_plan(self, ns: int) -> tuple[Launch, ...]:
        """One thread of ``hal_spin`` busy-waiting ``ns`` nanoseconds (see ``time_launches``);
        kept per duration, so that the per-plan launch cache keeps one entry for each."""
        def make() -> tuple[Launch, ...]:
            defines = self.compile_defines("eltwise", np.dtype(np.float32), "NCHW", _SCHEMAS["eltwise"].defaults())
            return (Launch("eltwise.cu", defines, "hal_spin", "q", (1, 1, 1), (1, 1, 1), 0, (int(ns),)),)

        return self._planned(("hal_spin", int(ns)), make)

    def pointer(self, buffer: Buffer) -> int:
        """The device address of ``buffer`` (for ``__cuda_array_interface__``)."""
        return int(buffer)

    def wrap(self, pointer: int, nbytes: int, owner: object) -> Buffer:
        """A non-owning buffer over foreign device memory; keeps ``owner`` alive."""
        return CudaBuffer(int(pointer), int(nbytes), owner)

    @property
    def stream(self) -> Any:
        """The pycuda.driver.Stream all of this device's work goes to."""
        return self._stream

    def capture(self, launch: Callable[[], None]) -> Callable[[], None] | None:
        """Capture what ``launch`` enqueues into a CUDA graph; returns its replay, or None.

        PyCUDA has no graph API, so this calls the driver (libcuda) through ctypes:
        cuStreamBeginCapture on this backend's stream (thread-local mode), ``launch()``,
        cuStreamEndCapture, cuGraphInstantiateWithFlags; the replay is one cuGraphLaunch.
        Any failure (an old driver, a launch that cannot be captured) ends the capture
        and returns None, and the caller replays launcher by launcher instead. The
        workspaces the kernels use are kept alive with the graph, since their addresses
        are baked into it.
        """
        lib = _libcuda()
        if lib is None:
            return None
        import ctypes

        stream = ctypes.c_void_p(self._stream.handle)
        graph, graph_exec = ctypes.c_void_p(), ctypes.c_void_p()
        self._ctx.push()
        try:
            if lib.cuStreamBeginCapture_v2(stream, 1) != 0:  # CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
                return None
            self._capturing = True
            try:
                launch()
            finally:
                self._capturing = False
                ended = lib.cuStreamEndCapture(stream, ctypes.byref(graph))
            if ended != 0 or not graph.value:
                return None
            if lib.cuGraphInstantiateWithFlags(ctypes.byref(graph_exec), graph, ctypes.c_ulonglong(0)) != 0:
                lib.cuGraphDestroy(graph)
                return None
        except Exception:
            return None
        finally:
            self._drv.Context.pop()
        keep = (graph, graph_exec, tuple(self._workspace.values()), self._ctx)
        drv = self._drv

        def replay() -> None:
            keep[3].push()
            try:
                status = lib.cuGraphLaunch(graph_exec, stream)
            finally:
                drv.Context.pop()
            if status != 0:
                raise HalError(f"{self.info.id}: cuGraphLaunch failed (CUresult {status})")

        replay.hal_graph = keep  # type: ignore[attr-defined]
        return replay

    @contextmanager
    def activate(self) -> Iterator[None]:
        """Public form of the context push/pop (for benchmarks that use PyCUDA events)."""
        with self._active():
            yield

    # -- compilation --------------------------------------------------------------------
    def _module(self, file: str, defines: tuple[tuple[str, int], ...]) -> Any:
        key = (file, defines)
        mod = self._modules.get(key)
        if mod is not None:
            return mod
        with self._lock:
            mod = self._modules.get(key)
            if mod is None:
                mod = self._compile(file, dict(defines))
                self._modules[key] = mod
        return mod

    @staticmethod
    def compile_options(defines: Mapping[str, int]) -> list[str]:
        """The nvcc options (besides -arch and -I) a build with ``defines`` uses."""
        return [f"-D{k}={int(v)}" for k, v in sorted(defines.items())] + ["--std=c++17"]

    def _compile(self, file: str, defines: dict[str, int]) -> Any:
        drv = self._drv
        try:
            cubin = build_cubin(file, defines, self._arch)
        except drv.CompileError as exc:
            log = "\n".join(str(part) for part in (exc.msg, exc.stdout, exc.stderr) if part)
            include = str(resources.kernel_dir(self.kernel_folder))
            full = [*self.compile_options(defines), f"-arch={self._arch}", f"-I{include}"]
            raise KernelCompileError("cuda", file, defines, full, log) from exc
        if self.pdl:
            self._cubins[(file, tuple(sorted(defines.items())))] = cubin
        with self._active():
            return drv.module_from_buffer(cubin)

    def build_all(
        self, keys: Iterable[tuple[str, tuple[tuple[str, int], ...]]], processes: int | None = None
    ) -> int:
        """Compile many (file, defines) builds at once in worker processes, then load them.

        The workers run nvcc only (no CUDA context) and share hal's cubin cache; a build
        that fails is left for the ordinary path, which reports it when the build is used.
        Returns the number of builds loaded.
        """
        loaded = 0
        for key, cubin in self._compile_parallel(keys, processes).items():
            with self._active():
                module = self._drv.module_from_buffer(cubin)
            with self._lock:
                self._modules.setdefault(key, module)  # PDL reloads from hal's cache when launched
            loaded += 1
        return loaded

    def _compile_parallel(
        self, keys: Iterable[tuple[str, tuple[tuple[str, int], ...]]], processes: int | None = None
    ) -> dict[tuple[str, tuple[tuple[str, int], ...]], bytes]:
        """Cubins of the builds not loaded yet, compiled in spawned worker processes (into hal's cache).

        A build that fails is left out: the ordinary path reports it, with its log, when used.
        """
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        todo = [k for k in dict.fromkeys(keys) if k not in self._modules]
        if not todo:
            return {}
        workers = max(1, min(len(todo), processes or os.cpu_count() or 1))
        built: dict[tuple[str, tuple[tuple[str, int], ...]], bytes] = {}
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {key: pool.submit(build_cubin, key[0], dict(key[1]), self._arch) for key in todo}
            for key, future in futures.items():
                try:
                    built[key] = future.result()
                except Exception:
                    continue
        return built

    def prebuild(self, specs: Sequence[object], param_sets: Sequence[Mapping[str, int]]) -> int:
        """Compile every (file, defines) the specs need under each parameter set, in parallel.

        The builds go to hal's cubin cache only (nvcc in worker processes, nothing is
        loaded here), so the tuner's worker process later finds them there.
        """
        keys: dict[tuple[str, tuple[tuple[str, int], ...]], None] = {}
        for spec in specs:
            for params in param_sets:
                try:
                    launches = self._plan_for(spec, params)
                except Exception:  # a candidate that cannot be planned fails where it is evaluated
                    continue
                keys.update({(launch.file, launch.defines): None for launch in launches})
        return len(self._compile_parallel(keys))

    def launch_signature(self, spec: object, params: Mapping[str, int]) -> Hashable | None:
        """The launch plan of ``spec`` under ``params`` (schema defaults filled in): files,
        -D sets, kernel names, grids, blocks, shared memory and arguments."""
        family = _SPEC_FAMILIES.get(type(spec))
        if family is None:
            return None
        try:
            plan = self._plan_for(spec, {**_SCHEMAS[family].defaults(), **params})
        except Exception:  # a set that cannot be planned is evaluated (and fails) as usual
            return None
        return plan or None

    def built_signature(self, spec: object, params: Mapping[str, int]) -> Hashable | None:
        """The launch plan of ``spec`` under ``params`` with each launch's -D set replaced by a digest
        of its kernel's compiled code (``cubin.kernel_digest``): builds what is not in the cubin
        cache. The -D set holds every code-changing parameter of the family, most of which a given
        kernel never reads (CUDA's conv2d: about 20), so plans that differ only there often run the
        same code; this signature says so. None where a build or the plan fails (the evaluation
        reports it)."""
        family = _SPEC_FAMILIES.get(type(spec))
        if family is None:
            return None
        try:
            plan = self._plan_for(spec, {**_SCHEMAS[family].defaults(), **params})
            cubins = {}
            for launch in plan:
                key = (launch.file, launch.defines)
                if key not in cubins:
                    cubins[key] = build_cubin(launch.file, dict(launch.defines), self._arch)
            return tuple(
                (kernel_digest(cubins[(launch.file, launch.defines)], launch.kernel), launch.kernel, launch.fmt,
                 launch.grid, launch.block, launch.shared, launch.args, launch.pdl, launch.cooperative)
                for launch in plan) or None
        except Exception:  # optional, as launch_signature: a set that cannot be built is evaluated as usual
            return None

    def _plan_for(self, spec: object, params: Mapping[str, int]) -> tuple[Launch, ...]:
        if isinstance(spec, Pool2dSpec):
            return self._plan_pool2d(spec, params, spec.return_indices, True)
        if isinstance(spec, AdaptivePool2dSpec):
            return self._plan_adaptive(spec, params, spec.return_indices, True)
        if isinstance(spec, Conv2dSpec):
            return self._plan_conv2d(spec, params, True)
        if isinstance(spec, BatchNormSpec):
            return self._plan_batch_norm(spec, params, True)
        return ()

    def _function(self, launch: Launch) -> Any:
        key = (launch.file, launch.defines, launch.kernel)
        fn = self._functions.get(key)
        if fn is None:
            mod = self._module(launch.file, launch.defines)
            with self._lock:
                fn = mod.get_function(launch.kernel)
                fn.prepare(launch.fmt)
                fn.hal_max_shared = self._smem_default
                self._functions[key] = fn
        if launch.shared > fn.hal_max_shared:
            with self._active():
                fn.set_attribute(self._drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, launch.shared)
            fn.hal_max_shared = launch.shared
        return fn

    def _pdl_function(self, launch: Launch) -> int:
        """The driver's handle (CUfunction) of ``launch``'s kernel, from a module loaded
        through ctypes from the same cubin as PyCUDA's (whose handle PyCUDA keeps to itself),
        with the launch's dynamic shared memory allowed."""
        api = _pdl_api()
        assert api is not None  # self.pdl is only set where it is not
        ct = api.ctypes
        mkey = (launch.file, launch.defines)
        fkey = (launch.file, launch.defines, launch.kernel)
        with self._lock:
            entry = self._pdl_funcs.get(fkey)
            if entry is None:
                module = self._pdl_modules.get(mkey)
                if module is None:
                    cubin = self._cubins.pop(mkey, None) or build_cubin(launch.file, dict(launch.defines), self._arch)
                    handle = ct.c_void_p()
                    with self._active():
                        status = api.lib.cuModuleLoadData(ct.byref(handle), ct.c_char_p(cubin))
                    if status != 0:
                        raise HalError(f"{self.info.id}: cuModuleLoadData of {launch.file} failed (CUresult {status})")
                    module = self._pdl_modules[mkey] = int(handle.value or 0)
                func = ct.c_void_p()
                with self._active():
                    status = api.lib.cuModuleGetFunction(ct.byref(func), ct.c_void_p(module),
                                                         launch.kernel.encode())
                if status != 0:
                    raise HalError(f"{self.info.id}: cuModuleGetFunction({launch.kernel}) failed (CUresult {status})")
                entry = self._pdl_funcs[fkey] = [int(func.value or 0), self._smem_default]
            if launch.shared > entry[1]:
                with self._active():
                    status = api.lib.cuFuncSetAttribute(ct.c_void_p(entry[0]),
                                                        _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                        ct.c_int(launch.shared))
                if status != 0:
                    raise HalError(f"{self.info.id}: {launch.kernel}: {launch.shared} bytes of shared memory "
                                   f"refused (CUresult {status})")
                entry[1] = launch.shared
            return entry[0]

    def _run(self, launches: tuple[Launch, ...], buffers: Mapping[str, Buffer | None]) -> None:
        # the per-call path: functions cached per plan, one context push, then either
        # cuLaunchKernelEx with programmatic dependent launch (self.pdl) or PyCUDA's launch
        # primitive called directly where it has one (prepared_async_call re-checks its
        # arguments in Python on every call)
        hit = self._plan_fns.get(id(launches))
        if hit is None or hit[0] is not launches:
            fns = tuple(self._function(launch) for launch in launches)
            fast = _FAST_LAUNCH and all(hasattr(fn, "_launch_kernel") for fn in fns)
            hit = (launches, fns, fast, None)
            if len(self._plan_fns) > 4096:
                self._plan_fns.clear()
            self._plan_fns[id(launches)] = hit
        _, fns, fast, pdl_fns = hit
        pdl = self.pdl and not self._capturing  # read per call: benchmarks switch it (A/B in one process)
        if pdl or any(launch.cooperative for launch in launches):
            if pdl_fns is None or pdl_fns[0] != pdl:
                stream = int(self._stream.handle)
                pdl_fns = (pdl, tuple(PdlLaunch(_pdl_api(), self._pdl_function(launch), launch, stream)
                                      if launch.cooperative or (pdl and launch.pdl) else fn
                                      for launch, fn in zip(launches, fns, strict=True)))
                self._plan_fns[id(launches)] = (launches, fns, fast, pdl_fns)
            fns = pdl_fns[1]
        self._ctx.push()
        try:
            for launch, fn in zip(launches, fns, strict=True):
                args = [_ptr(buffers.get(a)) if isinstance(a, str) else a for a in launch.args]
                if isinstance(fn, PdlLaunch):
                    fn(args)
                elif fast:
                    arg_buf = _pack_fn(fn.arg_format, *args)  # type: ignore[misc]
                    fn._launch_kernel(launch.grid, launch.block, arg_buf, launch.shared, self._stream)
                else:
                    fn.prepared_async_call(launch.grid, launch.block, self._stream, *args, shared_size=launch.shared)
        finally:
            self._drv.Context.pop()

    def prepare(self, launches: tuple[Launch, ...]) -> None:
        """Build (or load from cache) everything ``launches`` need."""
        for launch in launches:
            self._function(launch)

    # -- helpers -----------------------------------------------------------------------------
    def _grid_1d(self, total: int, threads: int) -> tuple[int, int, int]:
        per_sm = max(1, 2048 // threads)
        return (max(1, min(_cdiv(total, threads), self._sms * per_sm * 8)), 1, 1)

    def _max_smem(self) -> int:
        return int(self.info.local_mem_bytes)

    def _threads_per_sm(self) -> int:
        return int(dict(self.info.extras).get("max_threads_per_sm", "2048") or 2048)

    def _resident_blocks(self, shared: int, cap: int) -> int:
        """Blocks of ``shared`` bytes one multiprocessor holds at once, at most ``cap``, at least
        1 (each block also takes 1 KiB of the system's); ``cap`` where the size is unknown."""
        smem_sm = int(dict(self.info.extras).get("shared_memory_per_sm", "0") or 0)
        if smem_sm <= 0 or not shared:
            return max(1, cap)
        return max(1, min(cap, smem_sm // (shared + 1024)))

    def _workspace_buffer(self, name: str, nbytes: int) -> CudaBuffer:
        buf = self._workspace.get(name)
        if buf is None or buf.nbytes < nbytes:
            buf = self.allocate(max(nbytes, 256))
            self._workspace[name] = buf
        return buf

    @staticmethod
    def compile_defines(
        family: str, dtype: np.dtype, layout: str, params: Mapping[str, int], relu: bool = False
    ) -> tuple[tuple[str, int], ...]:
        """The -D set a launch of ``family`` builds with (dtype, layout, fused ReLU, code-changing parameters)."""
        full = {**_SCHEMAS[family].defaults(), **params}
        defines = {"DTYPE_HALF": int(np.dtype(dtype) == np.float16), "LAYOUT_NHWC": int(layout == "NHWC")}
        if is_bfloat16(np.dtype(dtype)):  # absent means 0: float32 and float16 builds keep their cache keys
            defines["DTYPE_BF16"] = 1
        if relu:  # absent means 0: unfused builds keep their cache keys
            defines["FUSE_RELU"] = 1
        defines.update({name: int(full[name]) for name in _COMPILE_PARAMS[family]})
        return tuple(sorted(defines.items()))

    @staticmethod
    def family_file(family: str) -> str:
        """The kernel source of a kernel family."""
        return f"{family}.cu"

    # -- sliding windows (pooling, depthwise) -----------------------------------------------
    def _window_plan(
        self,
        *,
        nhwc: bool,
        es: int,
        n: int,
        c: int,
        ih: int,
        iw: int,
        oh: int,
        ow: int,
        kh: int,
        kw: int,
        sh: int,
        sw: int,
        pt: int,
        pl: int,
        dh: int,
        dw: int,
        adaptive: bool,
        split: bool,
        weights_per_plane: int,
        tile_h: int,
        tile_w: int,
        budget: int,
        strip_rows: int = 0,
        guard: int = 0,
    ) -> tuple[dict[str, int], int, int] | None:
        """WinParams fields, grid size and shared bytes for a tile plan; None when no tile fits.

        ``guard``: bytes (a multiple of 16) kept in front of an NCHW input tile, which the
        float16 half2 max-pooling path reads left of column 0 (and masks).
        """
        vec = 16 // es
        max_smem = self._max_smem()
        budget = min(budget, max_smem)
        fields: dict[str, int] = {}

        def rows_in(tr: int, size: int, out: int, k: int, s: int, d: int) -> int:
            if adaptive:
                return min(size, (tr * size) // out + 2)
            return min(size, (tr - 1) * s + (k - 1) * d + 1)

        if not nhwc:
            def chunk_bytes(length: int) -> int:
                if split:
                    hs = ((length + 8) // 2 + 3) & ~3
                    return 2 * hs * 4 + 16
                return (length + 2 * vec) * es

            planes_total = n * c
            plane = ih * iw
            if chunk_bytes(plane) <= budget:
                planes = max(1, budget // max(1, chunk_bytes(plane)))
                while planes > 1 and chunk_bytes(planes * plane) > budget:
                    planes -= 1
                planes = min(planes, max(1, _cdiv(planes_total, self._sms * 8)))
                fields.update(planes=planes, band=oh, bands=1, spp=_cdiv(oh, max(1, strip_rows)))
                grid = _cdiv(planes_total, planes)
                in_bytes = chunk_bytes(planes * plane)
                w_floats = planes * weights_per_plane
            else:
                tr = max(1, min(tile_h, oh))
                while tr > 1 and chunk_bytes(rows_in(tr, ih, oh, kh, sh, dh) * iw) > budget:
                    tr //= 2
                in_bytes = chunk_bytes(rows_in(tr, ih, oh, kh, sh, dh) * iw)
                w_floats = weights_per_plane
                bands = _cdiv(oh, tr)
                fields.update(planes=0, band=tr, bands=bands)
                grid = planes_total * bands
            w_floats = ((w_floats + 3) & ~3) + guard // 4
            shared = w_floats * 4 + in_bytes
            if shared > max_smem or grid >= 2**31:
                return None
            fields["w_floats"] = w_floats
            return fields, grid, shared

        # NHWC: th x tw output tile, channel chunk tc (a multiple of vec)
        if adaptive or c % vec:
            return None
        th, tw = max(1, min(tile_h, oh)), max(1, min(tile_w, ow))

        def pixels(th_: int, tw_: int) -> int:
            return rows_in(th_, ih, oh, kh, sh, dh) * rows_in(tw_, iw, ow, kw, sw, dw)

        # prefer whole pixels (all channels: one contiguous segment per input row) and shrink
        # the tile down to 8 output pixels for that; split channels only beyond
        while pixels(th, tw) * c * es > budget and th * tw > 8:
            if tw >= th and tw > 1:
                tw //= 2
            else:
                th //= 2
        while pixels(th, tw) * vec * es > budget and (th > 1 or tw > 1):
            if tw >= th and tw > 1:
                tw //= 2
            else:
                th //= 2
        px = pixels(th, tw)
        if px * c * es <= budget:
            tc = c
        else:
            tc = max(vec, (budget // (px * es)) // vec * vec)
            chunks = _cdiv(c, tc)
            tc = _cdiv(_cdiv(c, chunks), vec) * vec
        chunks = _cdiv(c, tc)
        w_floats = (weights_per_plane * tc + 3) & ~3
        shared = w_floats * 4 + px * tc * es
        tiles_h, tiles_w = _cdiv(oh, th), _cdiv(ow, tw)
        grid = n * tiles_h * tiles_w * chunks
        if shared > max_smem or grid >= 2**31:
            return None
        fields.update(th=th, tw=tw, tiles_h=tiles_h, tiles_w=tiles_w, tc=tc, chunks=chunks, w_floats=w_floats)
        return fields, grid, shared

    def _float_only(self, what: str, dtype: np.dtype, spec: object = None) -> None:
        if np.dtype(dtype) not in _FLOAT_DTYPES:
            raise UnsupportedOperation(f"{self.info.id}: {what} in {np.dtype(dtype).name} is not implemented on CUDA")

    # -- eltwise -----------------------------------------------------------------------------------
    def eltwise(self, spec: EltwiseSpec, x: Buffer, y: Buffer, params: Mapping[str, int]) -> None:
        """Elementwise ReLU over ``spec.count`` elements (``x`` may be ``y``)."""
        if spec.op != "relu":
            raise UnsupportedOperation(f"{self.info.id}: elementwise {spec.op!r} is not implemented on CUDA")
        self._float_only("relu", spec.dtype)
        if spec.count <= 0:
            return
        p = {**_SCHEMAS["eltwise"].defaults(), **params}
        threads = int(p["ELT_THREADS"])
        key = ("eltwise", spec.count, spec.dtype, threads)

        def make() -> tuple[Launch, ...]:
            defines = self.compile_defines("eltwise", spec.dtype, "NCHW", p)
            vec = 16 // spec.dtype.itemsize
            return (Launch("eltwise.cu", defines, "eltwise_relu", "PPq", self._grid_1d(_cdiv(spec.count, vec), threads),
                           (threads, 1, 1), 0, ("x", "y", spec.count)),)

        self._run(self._planned(key, make), {"x": x, "y": y})

    # -- pool2d ----------------------------------------------------------------------------------
    def pool2d(
        self, spec: Pool2dSpec, x: Buffer, y: Buffer, indices: Buffer | None, params: Mapping[str, int]
    ) -> None:
        """Max or average pooling; int8/uint8 specs run ``quant_pool2d.cu`` (the zero point as a last argument)."""
        if np.dtype(spec.dtype) in QUANT_DTYPES:  # quant_pool2d.cu
            align = 16 if int(x) % 16 == 0 and int(y) % 16 == 0 else (4 if int(x) % 4 == 0 and int(y) % 4 == 0 else 1)
            qkey = ("qpool2d", spec, indices is not None, align, self.force_generic)
            plan = self._planned(qkey, lambda: self._plan_qpool2d(spec, indices is not None, align))
            self._run(plan, {"x": x, "y": y, "i": indices})
            return
        self._float_only("pool2d", spec.dtype, spec)
        aligned = int(x) % 16 == 0 and int(y) % 16 == 0
        key = ("pool2d", spec, self._pkey(params), indices is not None, aligned, self.force_generic)
        plan = self._planned(key, lambda: self._plan_pool2d(spec, params, indices is not None, aligned))
        self._run(plan, {"x": x, "y": y, "i": indices})

    def _plan_qpool2d(self, spec: Pool2dSpec, with_indices: bool, align: int) -> tuple[Launch, ...]:
        """int8/uint8 pooling (quant_pool2d.cu, no tuning parameters). Without indices: NCHW
        square 2x2/2, 3x3/2 and 3x3/1 windows run the row kernels (8 outputs per thread, from
        32-bit words over word-aligned rows, IW % 4 == 0, else from one-byte loads), NHWC windows of at most 9 taps with
        C a multiple of 4 (16) and 4- (16-) byte aligned buffers the vector kernels (4 or 16
        channels per thread; square 2x2 and 3x3 windows without dilation built in); everything
        else, and ``force_generic``, one thread per output.
        ``align``: the largest of 16, 4, 1 that both x's and y's addresses are multiples of."""
        defines = (("DTYPE_UINT8", int(np.dtype(spec.dtype) == np.uint8)), ("LAYOUT_NHWC", int(spec.layout == "NHWC")))
        (kh, kw), (sh, sw), (dh, dw) = spec.kernel, spec.stride, spec.dilation
        kernel, threads = f"pool2d_{spec.kind}", spec.n * spec.c * spec.out_h * spec.out_w
        if not (with_indices or self.force_generic):
            if spec.layout == "NCHW" and (kh, sh) in _QPOOL_ROWS and (kh, sh, dh, dw) == (kw, sw, 1, 1):
                words = spec.in_w % 4 == 0 and align >= 4  # else the stream from one-byte loads
                kernel = f"pool2d_{spec.kind}_{'rows' if words else 'rows_b'}_k{kh}s{sh}"
                threads = spec.n * spec.c * spec.out_h * _cdiv(spec.out_w, _QROW_OUT)
            elif spec.layout == "NHWC" and kh * kw <= 9 and spec.c % 4 == 0 and align >= 4:
                vec = 16 if spec.c % 16 == 0 and align >= 16 else 4
                # square windows without dilation: taps unrolled without branches
                square = f"_k{kh}" if kh == kw and kh in (2, 3) and (dh, dw) == (1, 1) else ""
                kernel = f"pool2d_{spec.kind}_vec{vec}{square}"
                threads = spec.n * spec.out_h * spec.out_w * (spec.c // vec)
        return (
            Launch("quant_pool2d.cu", defines, kernel, "PPP" + "i" * 19, self._grid_1d(threads, _QPOOL_THREADS),
                   (_QPOOL_THREADS, 1, 1), 0, (*_contract_pool_args(spec), spec.zero_point)),
        )

    def _plan_pool2d(
        self, spec: Pool2dSpec, params: Mapping[str, int], with_indices: bool, aligned: bool
    ) -> tuple[Launch, ...]:
        p = {**_SCHEMAS["pool2d"].defaults(), **params}
        threads = int(p["POOL_THREADS"])
        defines = self.compile_defines("pool2d", spec.dtype, spec.layout, p, spec.relu)
        nhwc = spec.layout == "NHWC"
        es = spec.dtype.itemsize
        half = es == 2  # 16-bit storage (float16, bfloat16): no even/odd split, the pair paths
        pt, pb, pl, pr = spec.pads
        kh, kw = spec.kernel
        sh, sw = spec.stride
        dh, dw = spec.dilation
        divisor = spec.divisor or 0
        if (kh, kw, sh, sw, dh, dw) == (3, 3, 2, 2, 1, 1):
            variant = "k3s2"
        elif (kh, kw, sh, sw, dh, dw) == (2, 2, 2, 2, 1, 1):
            variant = "k2s2"
        else:
            variant = "g"
        rows = self._plan_pool_rows(spec, p, variant, with_indices, aligned, defines, threads)
        if rows is not None:
            return rows
        ncols = self._plan_pool_ncols(spec, p, variant, with_indices, aligned, defines, threads)
        if ncols is not None:
            return ncols
        tile = None
        if not self.force_generic and (aligned or not nhwc):
            tile = self._window_plan(
                nhwc=nhwc, es=es, n=spec.n, c=spec.c, ih=spec.in_h, iw=spec.in_w, oh=spec.out_h, ow=spec.out_w,
                kh=kh, kw=kw, sh=sh, sw=sw, pt=pt, pl=pl, dh=dh, dw=dw, adaptive=False,
                split=(variant != "g" and not half and bool(p["POOL_SPLIT"])), weights_per_plane=0,
                tile_h=int(p["POOL_TILE_H"]), tile_w=int(p["POOL_TILE_W"]), budget=int(p["POOL_SMEM_KB"]) * 1024,
                strip_rows=_STRIP_ROWS.get(variant, 0),
                # the 16-bit pair NCHW paths (pool2d.cu, POOL_H2 / POOL_H2AVG) read up to 8 bytes left of the tile
                guard=16 if (half and not nhwc and variant != "g"
                             and ((spec.kind == "max" and not with_indices and p["POOL_H2"])
                                  or (spec.kind == "avg" and p["POOL_H2AVG"]))) else 0,
            )
        if tile is not None:
            fields, grid, shared = tile
            fields.update(
                N=spec.n, C=spec.c, IH=spec.in_h, IW=spec.in_w, OH=spec.out_h, OW=spec.out_w, KH=kh, KW=kw, SH=sh,
                SW=sw, PT=pt, PB=pb, PL=pl, PR=pr, DH=dh, DW=dw, divisor=divisor,
                count_include_pad=int(spec.count_include_pad),
            )
            blob = pack_win(fields)
            kind = "maxi" if (spec.kind == "max" and with_indices) else spec.kind
            return (
                Launch("pool2d.cu", defines, f"pool2d_{kind}_tile_{variant}", f"PPP{len(blob)}s", (grid, 1, 1),
                       (threads, 1, 1), shared, ("x", "y", "i", blob)),
            )
        total = spec.n * spec.c * spec.out_h * spec.out_w
        return (
            Launch("pool2d.cu", defines, f"pool2d_{spec.kind}", "PPP" + "i" * 18, self._grid_1d(total, threads),
                   (threads, 1, 1), 0, _contract_pool_args(spec)),
        )

    def _plan_pool_rows(
        self, spec: Pool2dSpec, p: Mapping[str, int], variant: str, with_indices: bool, aligned: bool,
        defines: tuple[tuple[str, int], ...], threads: int,
    ) -> tuple[Launch, ...] | None:
        """The register row-strip kernels (pool2d.cu, POOL_ROWS), or None where they do not apply."""
        rows = int(p["POOL_ROWS"])
        vec = 16 // spec.dtype.itemsize
        pt, pb, pl, pr = spec.pads
        if (rows == 0 or self.force_generic or not aligned or spec.layout != "NCHW" or with_indices
                or variant == "g" or spec.in_w % vec or pl > 1 or pt > 1):
            return None
        planes = spec.n * spec.c
        strips = _cdiv(spec.out_h, rows)
        nvr = _cdiv(2 * spec.out_w, vec)  # vector columns per row: every output column's first one
        items = planes * strips * nvr
        if items >= 2**31 or planes * spec.in_h * spec.in_w >= 2**62:
            return None
        blob = struct.pack(
            "<10iI6I", spec.in_h, spec.in_w, spec.out_h, spec.out_w, pt, pb, pl, pr, spec.divisor or 0,
            int(spec.count_include_pad), items, *fastdiv(nvr), *fastdiv(strips),
        )
        return (
            Launch("pool2d.cu", defines, f"pool2d_{spec.kind}_rows{rows}_{variant}", f"PP{len(blob)}s",
                   (_cdiv(items, threads), 1, 1), (threads, 1, 1), 0, ("x", "y", blob)),
        )

    def _plan_dw_pipe(
        self, spec: Conv2dSpec, p: Mapping[str, int], aligned: bool, defines: tuple[tuple[str, int], ...],
    ) -> tuple[Launch, ...] | None:
        """The pipelined NHWC depthwise kernel (conv2d.cu: conv2d_dw_pipe{DW_PIPE}[x{DW_PIPE_COLS}]_k3s1),
        or None.

        Persistent blocks: grid (spatial tiles, capped at the resident blocks over the channel
        slices; 128-byte channel slices), each block striding over its slice's tiles."""
        rows = int(p["DW_PIPE"])
        es = spec.dtype.itemsize
        if (rows == 0 or self.force_generic or not aligned or spec.layout != "NHWC"
                or (spec.kernel, spec.stride, spec.dilation) != ((3, 3), (1, 1), (1, 1)) or spec.c_in % (16 // es)):
            return None
        cols = int(p["DW_PIPE_COLS"])
        tw, shared = dw_pipe_geometry(es, rows, cols)
        if shared > self._max_smem():
            return None
        n, c, ih, iw, oh, ow = spec.n, spec.c_in, spec.in_h, spec.in_w, spec.out_h, spec.out_w
        pt, _, pl, _ = spec.pads
        slices = _cdiv(c * es, _DW_PIPE_SLICE)
        tiles_h, tiles_w = _cdiv(oh, rows), _cdiv(ow, tw)
        ntiles = n * tiles_h * tiles_w
        per_sm = self._resident_blocks(shared, min(_DW_PIPE_MINB[cols], self._threads_per_sm() // _DW_PIPE_THREADS))
        grid_x = max(1, min(ntiles, _cdiv(self._sms * per_sm, slices)))
        # the kernel's tile indices (t + gridDim.x) and pixel coordinates are 32-bit ints
        if ntiles + grid_x >= 2**31 or slices > 65535 or max(ih, iw, oh, ow, pt, pl) >= 2**30 \
                or n * c * ih * iw >= 2**62:
            return None
        args = ("x", "w", "b", "y", n, c, ih, iw, oh, ow, pt, pl, tiles_h, tiles_w)
        return (
            Launch("conv2d.cu", defines, f"conv2d_dw_pipe{rows}{'' if cols == 1 else f'x{cols}'}_k3s1",
                   "PPPP" + "i" * 10, (grid_x, slices, 1),
                   (_DW_PIPE_THREADS, 1, 1), shared, args),
        )

    def _plan_dw_tc(
        self, spec: Conv2dSpec, p: Mapping[str, int], aligned: bool, defines: tuple[tuple[str, int], ...],
    ) -> tuple[Launch, ...] | None:
        """The float16 NCHW depthwise kernels on tensor cores (conv2d.cu: conv2d_dw_tc_k3s1 for
        DW_TC 1, conv2d_dw_tc_persist_k3s1 for 2), or None.

        Tiles of 16 output rows x 32 output columns of one plane, 4 warps a block: a warp a tile,
        or (2) a grid of the resident blocks whose warps stride over the tiles."""
        pt, _, pl, _ = spec.pads
        n, c, ih, iw, oh, ow = spec.n, spec.c_in, spec.in_h, spec.in_w, spec.out_h, spec.out_w
        if (not p["DW_TC"] or self.force_generic or not aligned or spec.layout != "NCHW"
                or spec.dtype != np.float16 or self._cc < (7, 5)
                or (spec.kernel, spec.stride, spec.dilation) != ((3, 3), (1, 1), (1, 1)) or iw % 8 or pl > 1):
            return None
        tiles_h, tiles_w = _cdiv(oh, 16), _cdiv(ow, 32)
        tiles = n * c * tiles_h * tiles_w
        # the kernel's tile index is 32-bit (blockIdx.x * 4 + warp) and its pixel coordinates are ints
        if tiles >= 2**31 or max(ih, iw, oh, ow, pt) >= 2**30 or n * c * ih * iw >= 2**62:
            return None
        blob = struct.pack("<7iI9I", c, ih, iw, oh, ow, pt, pl, tiles, *fastdiv(tiles_w), *fastdiv(tiles_h),
                           *fastdiv(c))
        shared, blocks = _DW_TC_WARPS * _DW_TC_WARP_SMEM, _cdiv(tiles, _DW_TC_WARPS)
        kernel = "conv2d_dw_tc_k3s1"
        if p["DW_TC"] == 2:
            kernel = "conv2d_dw_tc_persist_k3s1"
            blocks = min(blocks, self._sms * self._resident_blocks(shared, _DW_TC_PERSIST_MINB))
        return (
            Launch("conv2d.cu", defines, kernel, f"PPPP{len(blob)}s", (blocks, 1, 1), (_DW_TC_WARPS * 32, 1, 1),
                   shared, ("x", "w", "b", "y", blob)),
        )

    def _plan_dw_registers(
        self, spec: Conv2dSpec, p: Mapping[str, int], aligned: bool, defines: tuple[tuple[str, int], ...],
        threads: int,
    ) -> tuple[Launch, ...] | None:
        """The register depthwise kernels (conv2d.cu: DW_ROWS in NCHW, DW_COLS in NHWC), or None."""
        if (spec.kernel, spec.stride, spec.dilation) != ((3, 3), (1, 1), (1, 1)) or not aligned:
            return None
        pt, _, pl, _ = spec.pads
        n, c, ih, iw, oh, ow = spec.n, spec.c_in, spec.in_h, spec.in_w, spec.out_h, spec.out_w
        if spec.layout == "NCHW":
            rows, vec = int(p["DW_ROWS"]), 16 // spec.dtype.itemsize
            if rows == 0 or iw % vec or pl > 1 or pt > 2:
                return None
            a, b, cc = _cdiv(ow, vec), _cdiv(oh, rows), c
            # DW_SHFL: halos by shuffles where every pad is 1 (so the output is the input's size)
            shfl = int(p["DW_SHFL"]) if spec.pads == (1, 1, 1, 1) and threads % 32 == 0 else 0
            kernel = f"conv2d_dw_rows{rows}{('', 's', 'p')[shfl]}_k3s1"
            persistent = shfl == 2
            items = n * c * b * a
        else:
            persistent = False
            cols, crows = int(p["DW_COLS"]), int(p["DW_CROWS"])
            if cols == 0 or c % 4:
                return None
            if crows and cols in (2, 4):  # 2-D register blocks
                a, b, cc = c // 4, _cdiv(ow, cols), _cdiv(oh, crows)
                kernel = f"conv2d_dw_cols{cols}r{crows}_k3s1"
            else:
                a, b, cc = c // 4, _cdiv(ow, cols), oh
                kernel = f"conv2d_dw_cols{cols}_k3s1"
            items = n * cc * b * a
        if items >= 2**31 or n * c * ih * iw >= 2**62:
            return None
        blob = struct.pack("<7iI9I", c, ih, iw, oh, ow, pt, pl, items, *fastdiv(a), *fastdiv(b), *fastdiv(cc))
        grid = _cdiv(items, threads)
        if persistent:  # DW_SHFL 2: at most the resident blocks, every thread the same steps
            per_sm = max(1, min(int(p["DW_SHFL_OCC"]), self._threads_per_sm()) // threads)
            steps = _cdiv(items, min(grid, self._sms * per_sm) * threads)
            grid = _cdiv(items, steps * threads)
        return (
            Launch("conv2d.cu", defines, kernel, f"PPPP{len(blob)}s", (grid, 1, 1),
                   (threads, 1, 1), 0, ("x", "w", "b", "y", blob)),
        )

    def _plan_pool_ncols(
        self, spec: Pool2dSpec, p: Mapping[str, int], variant: str, with_indices: bool, aligned: bool,
        defines: tuple[tuple[str, int], ...], threads: int,
    ) -> tuple[Launch, ...] | None:
        """The NHWC register walks (pool2d.cu, POOL_NCOLS), or None where they do not apply."""
        cols = int(p["POOL_NCOLS"])
        vec = 16 // spec.dtype.itemsize
        if (cols == 0 or self.force_generic or not aligned or spec.layout != "NHWC" or with_indices
                or variant == "g" or spec.c % vec):
            return None
        pt, pb, pl, pr = spec.pads
        strips = _cdiv(spec.out_w, cols)
        items = spec.n * spec.out_h * strips * (spec.c // vec)
        if items >= 2**31 or spec.n * spec.c * spec.in_h * spec.in_w >= 2**62:
            return None
        blob = struct.pack(
            "<12iI9I", spec.n, spec.c, spec.in_h, spec.in_w, spec.out_h, spec.out_w, pt, pb, pl, pr,
            spec.divisor or 0, int(spec.count_include_pad), items,
            *fastdiv(spec.c // vec), *fastdiv(strips), *fastdiv(spec.out_h),
        )
        return (
            Launch("pool2d.cu", defines, f"pool2d_{spec.kind}_ncols{cols}_{variant}", f"PP{len(blob)}s",
                   (_cdiv(items, threads), 1, 1), (threads, 1, 1), 0, ("x", "y", blob)),
        )

    # -- adaptive_pool2d -------------------------------------------------------------------------
    def adaptive_pool2d(
        self,
        spec: AdaptivePool2dSpec,
        x: Buffer,
        y: Buffer,
        indices: Buffer | None,
        params: Mapping[str, int],
    ) -> None:
        """Adaptive max or average pooling."""
        self._float_only("adaptive_pool2d", spec.dtype, spec)
        aligned = int(x) % 16 == 0 and int(y) % 16 == 0
        key = ("adaptive", spec, self._pkey(params), indices is not None, aligned, self.force_generic)
        plan = self._planned(key, lambda: self._plan_adaptive(spec, params, indices is not None, aligned))
        self._run(plan, {"x": x, "y": y, "i": indices})

    def _plan_adaptive(
        self, spec: AdaptivePool2dSpec, params: Mapping[str, int], with_indices: bool, aligned: bool
    ) -> tuple[Launch, ...]:
        p = {**_SCHEMAS["adaptive_pool2d"].defaults(), **params}
        threads = int(p["ADAPT_THREADS"])
        defines = self.compile_defines("adaptive_pool2d", spec.dtype, spec.layout, p, spec.relu)
        es = spec.dtype.itemsize
        vec = 16 // es
        kind = "maxi" if (spec.kind == "max" and with_indices) else spec.kind
        dims = (spec.n, spec.c, spec.in_h, spec.in_w, spec.out_h, spec.out_w)
        outputs = spec.n * spec.c * spec.out_h * spec.out_w
        bin_area = (_cdiv(spec.in_h, spec.out_h) + 1) * (_cdiv(spec.in_w, spec.out_w) + 1)
        few_large = bin_area >= 1024 and outputs <= self._sms * 64
        if not self.force_generic:
            gflat = self._plan_adaptive_gflat(spec, p, defines, with_indices, aligned)
            if gflat is not None:
                return gflat
            if few_large:
                return (
                    Launch("adaptive_pool2d.cu", defines, f"adaptive_pool2d_{kind}_block", "PPP" + "i" * 6,
                           (min(outputs, 2**31 - 1), 1, 1), (threads, 1, 1), 0, ("x", "y", "i", *dims)),
                )
            # NHWC global pooling with ADAPT_GVEC_S lanes per (image, channel vector) where those lanes
            # fill the GPU; the kernel's pixel counter (p0 + u, u < ADAPT_GVEC_U) is an int
            gvec_s = int(p["ADAPT_GVEC_S"])
            gvec_threads = outputs // vec * gvec_s
            if spec.layout == "NHWC" and aligned and spec.c % vec == 0 and p["ADAPT_GVEC_U"] and not with_indices \
                    and (spec.out_h, spec.out_w) == (1, 1) and spec.kind in ("avg", "max") \
                    and gvec_threads >= self._sms * 256 and spec.in_h * spec.in_w < 2**31 - 16:
                return (
                    # float16 with a thread per pair: a part of one wave (256 blocks on 132 SMs for
                    # 256x2048x7x7), which programmatic dependent launch placed worse: 0.0168 -> 0.0184
                    # ms (session 17 call2; float32, 512 blocks: 0.0288 -> 0.0268 ms); with 2 lanes a
                    # pair float16 has float32's blocks, and with PDL took 0.0152 ms against 0.0165 for
                    # one lane without (session 20 call3)
                    Launch("adaptive_pool2d.cu", defines, f"adaptive_pool2d_{spec.kind}_gvec", "PPiii",
                           self._grid_1d(gvec_threads, threads), (threads, 1, 1), 0,
                           ("x", "y", spec.n, spec.c, spec.in_h * spec.in_w),
                           pdl=spec.dtype.itemsize != 2 or gvec_s > 1),
                )
            # the kernel keeps pixel indices ih * IW + iw (and a few rows past the bin) in an int
            if spec.layout == "NHWC" and aligned and spec.c % vec == 0 and p["ADAPT_VSPLIT"] and bin_area >= 8 \
                    and outputs // vec < self._sms * 4096 and (spec.in_h + 256) * spec.in_w < 2**31:
                groups = threads // 32
                blocks = spec.n * spec.out_h * spec.out_w * _cdiv(spec.c // vec, 32)
                return (
                    Launch("adaptive_pool2d.cu", defines, f"adaptive_pool2d_{kind}_vsplit", "PPP" + "i" * 6,
                           (min(blocks, 2**31 - 1), 1, 1), (threads, 1, 1), groups * 32 * vec * 12,
                           ("x", "y", "i", *dims)),
                )
            if spec.layout == "NHWC" and aligned and spec.c % vec == 0:
                total = outputs // vec
                return (
                    Launch("adaptive_pool2d.cu", defines, f"adaptive_pool2d_{kind}_vec", "PPP" + "i" * 6,
                           self._grid_1d(total, threads), (threads, 1, 1), 0, ("x", "y", "i", *dims)),
                )
            if spec.layout == "NCHW" and bin_area <= 256:
                tile = self._window_plan(
                    nhwc=False, es=es, n=spec.n, c=spec.c, ih=spec.in_h, iw=spec.in_w, oh=spec.out_h,
                    ow=spec.out_w, kh=1, kw=1, sh=1, sw=1, pt=0, pl=0, dh=1, dw=1, adaptive=True, split=False,
                    weights_per_plane=0, tile_h=8, tile_w=8, budget=int(p["ADAPT_SMEM_KB"]) * 1024,
                )
                if tile is not None:
                    fields, grid, shared = tile
                    fields.update(N=spec.n, C=spec.c, IH=spec.in_h, IW=spec.in_w, OH=spec.out_h, OW=spec.out_w,
                                  KH=1, KW=1, SH=1, SW=1, DH=1, DW=1)
                    blob = pack_win(fields)
                    return (
                        Launch("adaptive_pool2d.cu", defines, f"adaptive_pool2d_{kind}_tile", f"PPP{len(blob)}s",
                               (grid, 1, 1), (threads, 1, 1), shared, ("x", "y", "i", blob)),
                    )
            if bin_area >= 1024:
                return (
                    Launch("adaptive_pool2d.cu", defines, f"adaptive_pool2d_{kind}_block", "PPP" + "i" * 6,
                           (min(outputs, 2**31 - 1), 1, 1), (threads, 1, 1), 0, ("x", "y", "i", *dims)),
                )
        return (
            Launch("adaptive_pool2d.cu", defines, f"adaptive_pool2d_{spec.kind}", "PPP" + "i" * 6,
                   self._grid_1d(outputs, threads), (threads, 1, 1), 0, ("x", "y", "i", *dims)),
        )

    def _plan_adaptive_gflat(
        self, spec: AdaptivePool2dSpec, p: Mapping[str, int], defines: tuple[tuple[str, int], ...],
        with_indices: bool, aligned: bool,
    ) -> tuple[Launch, ...] | None:
        """NCHW global pooling through shared memory (adaptive_pool2d_*_gflat), or None where it does not apply."""
        planes, hw = spec.n * spec.c, spec.in_h * spec.in_w
        if not (p["ADAPT_GFLAT"] and spec.layout == "NCHW" and (spec.out_h, spec.out_w) == (1, 1) and aligned
                and not with_indices and spec.kind in ("avg", "max") and 0 < planes < 2**31 - 32):
            return None
        # ADAPT_GSTAGES group buffers (0: 3 for float16, 2 for float32, as ADAPT_GST in the kernel)
        stages = int(p["ADAPT_GSTAGES"]) or (3 if spec.dtype.itemsize == 2 else 2)
        per_warp = stages * 32 * hw * spec.dtype.itemsize
        limit = min(self._max_smem(), 64 * 1024)
        if per_warp > limit and not p["ADAPT_GSTAGES"] and stages > 2:
            # the automatic choice falls back to two buffers before giving up on the kernel
            stages, per_warp = 2, 2 * 32 * hw * spec.dtype.itemsize
            defines = self.compile_defines("adaptive_pool2d", spec.dtype, spec.layout,
                                           {**p, "ADAPT_GSTAGES": 2}, spec.relu)
        if per_warp > limit:  # large planes: the tile and block kernels suffice
            return None
        if fixed_plane_ok(hw, spec.dtype.itemsize):
            defines = tuple(sorted((*defines, ("ADAPT_GHW", hw))))
        groups = _cdiv(planes, 32)
        warps = max(1, min(int(p["ADAPT_THREADS"]) // 32, self._max_smem() // per_warp, groups))
        shared = warps * per_warp
        per_sm = self._resident_blocks(shared, self._threads_per_sm() // (warps * 32))
        grid = max(1, min(_cdiv(groups, warps), self._sms * per_sm))
        return (
            Launch("adaptive_pool2d.cu", defines, f"adaptive_pool2d_{spec.kind}_gflat", "PPii", (grid, 1, 1),
                   (warps * 32, 1, 1), shared, ("x", "y", planes, hw)),
        )

    # -- conv2d ------------------------------------------------------------------------------------
    def conv2d(
        self,
        spec: Conv2dSpec,
        x: Buffer,
        weight: Buffer,
        bias: Buffer | None,
        y: Buffer,
        params: Mapping[str, int],
    ) -> None:
        """2-D convolution."""
        self._float_only("conv2d", spec.dtype, spec)
        aligned = int(x) % 16 == 0 and int(y) % 16 == 0
        w_aligned = int(weight) % 16 == 0  # conv2d_k1_gemm reads the weights as they lie, 16 bytes a copy
        key = ("conv2d", spec, self._pkey(params), aligned, self.force_generic, w_aligned)
        plan = self._planned(key, lambda: self._plan_conv2d(spec, params, aligned, w_aligned))
        if all(launch.kernel not in ("conv2d_tc_wprep", "layout_transpose", "sample_planes", "sample_planes_rows8")
               for launch in plan):
            self._run(plan, {"x": x, "w": weight, "b": bias, "y": y})
            return
        with self._lock:  # the workspaces are shared: keep the launches of one call together
            taps = spec.kernel[0] * spec.kernel[1]
            es = spec.dtype.itemsize
            buffers = {"x": x, "w": weight, "b": bias, "y": y}
            if any(launch.kernel == "conv2d_tc_wprep" for launch in plan):  # the streamed weights' layout
                buffers["wp"] = self._workspace_buffer("conv_tc_wide_w",
                                                       2 * tc_wide_weight_halves(spec.c_in, spec.c_out, taps))
            if any(launch.kernel == "layout_transpose" for launch in plan):  # NHWC copies of x and y
                buffers["xt"] = self._workspace_buffer("conv_nhwc_x", es * spec.n * spec.c_in * spec.in_h * spec.in_w)
                buffers["yt"] = self._workspace_buffer("conv_nhwc_y",
                                                       es * spec.n * spec.c_out * spec.out_h * spec.out_w)
            if any(launch.kernel.startswith("sample_planes") for launch in plan):  # the 1x1 window's pixels of x
                buffers["xs"] = self._workspace_buffer("conv_k1_sampled_x",
                                                       es * spec.n * spec.c_in * spec.out_h * spec.out_w)
            self._run(plan, buffers)

    def qconv2d(
        self,
        spec: QConv2dSpec,
        x: Buffer,
        weight: Buffer,
        bias: Buffer | None,
        y: Buffer,
        w_zero_point: Buffer,
        multiplier: Buffer | None,
        params: Mapping[str, int],
    ) -> None:
        """Quantized conv (QLinearConv, or ConvInteger when ``multiplier`` is None):
        ``quant_conv2d.cu``, exact integer sums (no tuning parameters; kernels in ``_plan_qconv2d``)."""
        y_kind = self.qconv_output_kind(spec, multiplier)
        aligned = int(x) % 16 == 0
        key = ("qconv2d", spec, y_kind, aligned, self.force_generic)
        plan = self._planned(key, lambda: self._plan_qconv2d(spec, y_kind, aligned))
        self._run(plan, {"x": x, "w": weight, "b": bias, "y": y, "wz": w_zero_point, "m": multiplier})

    def _plan_qconv2d(self, spec: QConv2dSpec, y_kind: int, aligned: bool) -> tuple[Launch, ...]:
        """One launch, built per input, weight and output type and layout: ``qconv2d_k3_tc``
        (tensor cores) for dense 3x3 stride-1 convs with C_in % 16 == 0, C_in <= 64 and a
        16-byte aligned input (NCHW: W % 16 == 0) on sm_80+; else ``qconv2d_co4`` (4 output
        channels per thread) where C_out per group is a multiple of 4 and offsets fit 32 bits,
        else ``qconv2d`` (a thread per output element); grid-stride loops past the grid's cap."""
        conv = spec.conv
        defines = (("DTYPE_UINT8", int(np.dtype(conv.dtype) == np.uint8)),
                   ("W_UINT8", int(np.dtype(spec.w_dtype) == np.uint8)), ("Y_KIND", y_kind),
                   ("LAYOUT_NHWC", int(conv.layout == "NHWC")))
        if conv.groups == 1 and conv.kernel == (3, 3) and conv.stride == (1, 1) and conv.dilation == (1, 1) \
                and conv.c_in % 16 == 0 and conv.c_in <= 64 and aligned \
                and (conv.layout == "NHWC" or conv.in_w % 16 == 0) \
                and self._cc >= (8, 0) and _QCONV_TC_SMEM[conv.layout] <= self._max_smem() and not self.force_generic:
            tiles_h, tiles_w, co_tiles = _cdiv(conv.out_h, 8), _cdiv(conv.out_w, 32), _cdiv(conv.c_out, 64)
            ntiles = conv.n * tiles_h * tiles_w
            if ntiles < 2**31:
                grid = (max(1, min(ntiles, _cdiv(self._sms, co_tiles))), co_tiles, 1)
                args = ("x", "w", "b", "y", "wz", "m", conv.n, conv.c_in, conv.in_h, conv.in_w, conv.c_out,
                        conv.out_h, conv.out_w, conv.pads[0], conv.pads[2], spec.x_zero_point, spec.y_zero_point,
                        tiles_h, tiles_w)
                return (Launch("quant_conv2d.cu", defines, "qconv2d_k3_tc", "PPPPPP" + "i" * 13, grid, (256, 1, 1),
                               _QCONV_TC_SMEM[conv.layout], args),)
        total = conv.n * conv.c_out * conv.out_h * conv.out_w
        geometry = (conv.n, conv.c_in, conv.in_h, conv.in_w, conv.c_out, conv.out_h, conv.out_w, *conv.kernel,
                    *conv.stride, conv.pads[0], conv.pads[2], *conv.dilation, conv.groups)
        kernel = "qconv2d"
        cig, cog = conv.c_in // conv.groups, conv.c_out // conv.groups
        if cog % 4 == 0 and conv.c_in * conv.in_h * conv.in_w < 2**31 \
                and conv.c_out * cig * conv.kernel[0] * conv.kernel[1] < 2**31:
            kernel, total = "qconv2d_co4", total // 4  # 4 output channels of one group per thread
        return (
            Launch("quant_conv2d.cu", defines, kernel, "PPPPPP" + "i" * 18, self._grid_1d(total, _QCONV_THREADS),
                   (_QCONV_THREADS, 1, 1), 0,
                   ("x", "w", "b", "y", "wz", "m", *geometry, spec.x_zero_point, spec.y_zero_point)),
        )

    def _plan_conv_grouped_tc(
        self, spec: Conv2dSpec, p: Mapping[str, int], defines: tuple[tuple[str, int], ...], aligned: bool
    ) -> tuple[Launch, ...] | None:
        """float16 and bfloat16 grouped convs on tensor cores (conv2d.cu: conv2d_grp_tc8 for at most 8
        output channels a group, conv2d_grp_tc16 for at most 16), or None where they do not apply:
        not float16 (sm_75+) or bfloat16 (sm_80+), groups 1 or depthwise, a stride or dilation, KH or KW
        above 3, more than 16 channels a group in or out, or a grid of 2^31 blocks or more. 128 threads;
        a tile is GRP_TC_ROWS rows (at most the output's) x 32 columns of one image and group."""
        groups = spec.groups
        cig, cog = spec.c_in // groups, spec.c_out // groups
        kh, kw = spec.kernel
        if not self._tensor_core_dtype(spec.dtype) or groups == 1 or (cig == 1 and cog == 1) or cig > 16 or cog > 16 \
                or (spec.stride, spec.dilation) != ((1, 1), (1, 1)) or kh > 3 or kw > 3 or self._cc < (7, 5):
            return None
        cigp = cig + cig % 2
        ksteps = _cdiv(kh * kw * cigp, 16)
        th = min(int(p["GRP_TC_ROWS"]), spec.out_h)
        tiles_w, tiles_h = _cdiv(spec.out_w, 32), _cdiv(spec.out_h, th)
        iht, iwt = th + kh - 1, 32 + kw - 1
        shared = 2 * iht * iwt * cigp
        blocks = spec.n * tiles_h * tiles_w * groups
        if blocks >= 2**31 or shared > self._max_smem():
            return None
        vec_in = int(spec.layout == "NHWC" and aligned and cig % 8 == 0 and spec.c_in % 8 == 0)
        fields = (spec.n, spec.c_in, spec.in_h, spec.in_w, spec.c_out, spec.out_h, spec.out_w, kh, kw,
                  spec.pads[0], spec.pads[2], groups, cig, cog, cigp, ksteps, th, tiles_w, tiles_h, iht, iwt, vec_in)
        blob = struct.pack(f"<{len(fields)}i", *fields)
        kernel = "conv2d_grp_tc8" if cog <= 8 else "conv2d_grp_tc16"
        return (Launch("conv2d.cu", defines, kernel, f"PPPP{len(blob)}s", (blocks, 1, 1), (128, 1, 1), shared,
                       ("x", "w", "b", "y", blob)),)

    def _plan_conv_tiled(
        self, spec: Conv2dSpec, p: Mapping[str, int], defines: tuple[tuple[str, int], ...], threads: int,
        aligned: bool,
    ) -> tuple[Launch, ...] | None:
        """The register-tiled direct kernel (conv2d.cu: conv2d_grp_k3s1 for 3x3 stride 1 without
        dilation, else conv2d_grp_g), or None where even one staged input channel would not fit
        the device's shared memory or the grid would pass 2^31 - 1 blocks. GRP_COT narrows to the
        smallest power of two holding a group's output channels. A tile is ``txn``
        threads x GRP_PIX columns (at most GRP_TILE_W, no wider than the output) by ``th`` rows
        (the block's remaining threads, no more than the output's rows). NHWC stages and stores
        4-channel vectors where channel counts and 16-byte aligned buffers allow."""
        groups = spec.groups
        cig, cog = spec.c_in // groups, spec.c_out // groups
        # no wider than the group's output channels (a power of two at least): no idle lanes
        cot, pix = min(int(p["GRP_COT"]), 1 << (cog - 1).bit_length()), int(p["GRP_PIX"])
        defines = tuple((k, cot if k == "GRP_COT" else v) for k, v in defines)
        kh, kw = spec.kernel
        sh, sw = spec.stride
        dh, dw = spec.dilation
        oh, ow = spec.out_h, spec.out_w
        chunks = _cdiv(cog, cot)
        txn = max(1, min(threads, _cdiv(min(int(p["GRP_TILE_W"]), ow), pix)))
        th = max(1, min(threads // txn, oh))
        tiles_w, tiles_h = _cdiv(ow, txn * pix), _cdiv(oh, th)
        iwt = (txn * pix - 1) * sw + (kw - 1) * dw + 1
        iht = (th - 1) * sh + (kh - 1) * dh + 1
        iwp = iwt + (2 - iwt) % 4  # = 2 mod 4: even (8-byte row reads) and rows 2 banks apart
        cs = iht * iwp
        cs += (4 - cs) % 32  # = 4 mod 32: 16-byte aligned, and NHWC staging's channels 4 banks apart
        cic = min(int(p["GRP_CIC"]), cig)
        while cic > 1 and 4 * cic * (cs + kh * kw * cot) > self._max_smem():
            cic //= 2
        shared = 4 * cic * (cs + kh * kw * cot)
        blocks = spec.n * tiles_h * tiles_w * groups * chunks
        if shared > self._max_smem() or blocks >= 2**31:  # (shared memory bounds the staged offsets too)
            return None
        variant = "k3s1" if (kh, kw, sh, sw, dh, dw) == (3, 3, 1, 1, 1, 1) else "g"
        nhwc = spec.layout == "NHWC"
        # NHWC 4-channel vectors: every vector inside one group and one stage, 16-byte aligned buffers
        vec_in = int(nhwc and aligned and spec.c_in % 4 == 0 and cig % 4 == 0 and cic % 4 == 0)
        vec_out = int(nhwc and aligned and spec.c_out % 4 == 0 and cog % 4 == 0 and cot % 4 == 0)
        fields = (spec.n, spec.c_in, spec.in_h, spec.in_w, spec.c_out, oh, ow, kh, kw, sh, sw, dh, dw,
                  spec.pads[0], spec.pads[2], groups, cig, cog, chunks, txn, th, tiles_w, tiles_h,
                  cic, iht, iwt, iwp, cs, vec_in, vec_out)
        divs = (*fastdiv(iwt), *fastdiv(iht * iwt), *fastdiv(cic), *fastdiv(kh * kw), *fastdiv(max(1, cic // 4)))
        blob = struct.pack(f"<{len(fields)}i{len(divs)}I", *fields, *divs)
        return (
            Launch("conv2d.cu", defines, f"conv2d_grp_{variant}", f"PPPP{len(blob)}s", (blocks, 1, 1),
                   (txn * th, 1, 1), shared, ("x", "w", "b", "y", blob)),
        )

    def _tensor_core_dtype(self, dtype: np.dtype) -> bool:
        """Whether the dense and grouped tensor-core conv kernels take ``dtype`` on this device: float16 (mma
        f16, which sm_75 has too) or bfloat16 on sm_80 and newer (mma .bf16). Each kernel adds its own
        conditions; the depthwise one (DW_TC) takes float16 alone."""
        return dtype == np.float16 or (is_bfloat16(dtype) and self._cc >= (8, 0))

    def _tc_wide_fit(self, p: Mapping[str, int], smem_of: Callable[[int, int], int],
                     one_stage: bool = False) -> tuple[int, int, int]:
        """(rows, stages, shared memory) of a streamed-weight kernel: TC_WIDE_ROWS and TC_WIDE_STAGES, else
        4-row tiles where 8 rows' shared memory (``smem_of(rows, stages)``) does not fit the device, else
        (``one_stage``: 3x3 stride 2 on the 99 KiB parts) 4 rows in one stage; the asked pair where none fits."""
        rows, stages = int(p["TC_WIDE_ROWS"]), int(p["TC_WIDE_STAGES"])
        tries = [(rows, stages), (4, stages)] + ([(4, 1)] if one_stage else [])
        for r, st in tries:
            if smem_of(r, st) <= self._max_smem():
                return r, st, smem_of(r, st)
        return rows, stages, smem_of(rows, stages)

    def _plan_conv_tc_wide(self, spec: Conv2dSpec, p: Mapping[str, int], aligned: bool,
                           tc16: bool) -> tuple[Launch, ...] | None:
        """The streamed-weight tensor-core kernels (conv2d_tc_wprep, then conv2d_k{3,1}[s2]_tc_wide) for a dense
        16-bit 3x3 or 1x1 conv on sm_80+, or None where they do not apply. Stride 1: CONV_TC 3, or 2 past 64
        input channels (the pipelined and all-weights-resident kernels cannot hold them); NHWC C_in % 8 == 0, NCHW
        W % 8 == 0, aligned buffers; an NCHW conv whose own build does not fit the shared memory (3x3 on the 99 KiB
        parts) runs the NHWC build between two transposes. Stride 2 (a ResNet's downsampling 3x3 and projection
        1x1): any CONV_TC but 0, C_in % 8 == 0, NHWC builds only (NCHW through the transposes): the CUDA-core
        kernels took 0.8-2 ms for 3x3 against cuDNN's 0.02-0.06 on the H200, the transposing path 0.69x PyTorch.
        Tiles of TC_WIDE_ROWS rows in TC_WIDE_STAGES stages, 4 rows where 8 do not fit, one stage where two do
        not at stride 2 (_tc_wide_fit)."""
        kh, kw = spec.kernel
        sh, sw = spec.stride
        dh, dw = spec.dilation
        pt, _, pl, _ = spec.pads
        n, ci, co, ih, iw, oh, ow = spec.n, spec.c_in, spec.c_out, spec.in_h, spec.in_w, spec.out_h, spec.out_w
        if not (spec.groups == 1 and tc16 and p["CONV_TC"] and kh == kw and kh in (1, 3) and self._cc >= (8, 0)
                and tc_wide_weight_halves(ci, co, kh * kw) < 2**31):
            return None
        nchw = spec.layout == "NCHW"
        if (sh, sw, dh, dw) == (1, 1, 1, 1):
            if not (p["CONV_TC"] == 3 or (p["CONV_TC"] == 2 and ci > 64)):
                return None
            layout = spec.layout
            rows, stages, smem = self._tc_wide_fit(p, lambda r, st: _TC_WIDE_SMEM[layout, kh, st, r])
            # the copies: NHWC 16-byte channel chunks (C_in % 8), NCHW row chunks (W % 8)
            copies = ci % 8 == 0 if layout == "NHWC" else iw % 8 == 0
            if nchw and smem > self._max_smem() and ci % 8 == 0 and _transposes_fit(spec):
                # NCHW's build does not fit (its staged rows and transposed patch: 3x3 on the 99 KiB parts)
                layout, copies = "NHWC", True
                rows, stages, smem = self._tc_wide_fit(p, lambda r, st: _TC_WIDE_SMEM["NHWC", kh, st, r])
            name = f"conv2d_k{kh}_tc_wide"
        elif (sh, sw, dh, dw) == (2, 2, 1, 1):
            layout, name = "NHWC", f"conv2d_k{kh}s2_tc_wide"
            copies = ci % 8 == 0 and (not nchw or _transposes_fit(spec))
            rows, stages, smem = self._tc_wide_fit(p, lambda r, st: _TC_WIDE_S2_SMEM[kh, st, r], one_stage=True)
        else:
            return None
        via_nhwc = layout != spec.layout
        if not (copies and (aligned or via_nhwc) and smem <= self._max_smem()
                and n * _cdiv(oh, rows) * _cdiv(ow, 32) < 2**31):
            return None
        defines = self.compile_defines("conv2d", spec.dtype, layout,
                                       {**p, "TC_WIDE_ROWS": rows, "TC_WIDE_STAGES": stages}, spec.relu)
        tiles_h, tiles_w, co_tiles, nchunk = _cdiv(oh, rows), _cdiv(ow, 32), _cdiv(co, 64), _cdiv(ci, 32)
        total = tc_wide_weight_halves(ci, co, kh * kw)
        per_sm = self._resident_blocks(smem, int(p["TC_WIDE_K1_BLOCKS"]) if kh == 1 else 1)
        grid = (max(1, min(n * tiles_h * tiles_w, _cdiv(self._sms * per_sm, co_tiles))), co_tiles, 1)
        xs, ys = ("xt", "yt") if via_nhwc else ("x", "y")
        plan = (
            Launch("conv2d.cu", defines, "conv2d_tc_wprep", "PPiiiii", self._grid_1d(total, 256), (256, 1, 1), 0,
                   ("w", "wp", ci, co, kh * kw, nchunk, total)),
            Launch("conv2d.cu", defines, name, "PPPP" + "i" * 12, grid, (rows * 32, 1, 1), smem,
                   (xs, "wp", "b", ys, n, ci, ih, iw, co, oh, ow, pt, pl, tiles_h, tiles_w, nchunk)),
        )
        return self._through_nhwc(spec, plan) if via_nhwc else plan

    def _plan_conv2d(self, spec: Conv2dSpec, params: Mapping[str, int], aligned: bool,
                     w_aligned: bool = True) -> tuple[Launch, ...]:
        p = {**_SCHEMAS["conv2d"].defaults(), **params}
        threads = int(p["CONV_THREADS"])
        simt_ci = int(p["CONV_SIMT_CI"])
        defines = self.compile_defines("conv2d", spec.dtype, spec.layout, p, spec.relu)
        es = spec.dtype.itemsize
        # the tensor-core kernels take float16 (mma f16, sm_75+) and bfloat16 (mma .bf16, sm_80+), but for
        # the depthwise one (DW_TC), which stays float16's; elsewhere bfloat16 takes the CUDA-core kernels,
        # as float32
        tc16 = self._tensor_core_dtype(spec.dtype)
        f32 = spec.dtype == np.float32
        kh, kw = spec.kernel
        sh, sw = spec.stride
        dh, dw = spec.dilation
        pt, _, pl, _ = spec.pads
        n, ci, co, ih, iw, oh, ow = spec.n, spec.c_in, spec.c_out, spec.in_h, spec.in_w, spec.out_h, spec.out_w
        unit = (sh, sw, dh, dw) == (1, 1, 1, 1)
        if not self.force_generic:
            # CONV_K1_NCHW: float16 NCHW 1x1 convs at stride 1 as one GEMM on tensor cores without transposes,
            # ahead of CONV_K1_GEMM's transposing path
            if p["CONV_K1_NCHW"] and (kh, kw) == (1, 1) and w_aligned and spec.layout == "NCHW":
                nchw_gemm = self._plan_conv_k1_nchw(spec, p, aligned, defines)
                if nchw_gemm is not None:
                    return nchw_gemm
            # CONV_K1_GEMM: float16 1x1 convs, any stride and padding, as one GEMM on tensor cores
            if p["CONV_K1_GEMM"] and (kh, kw) == (1, 1) and w_aligned:
                gemm = self._plan_conv_k1_gemm(spec, p, aligned, defines)
                if gemm is not None:
                    return gemm
            # CONV_K1_SIMT: float32 1x1 convs, any stride and padding, as one SGEMM on CUDA cores (else
            # the tiled direct kernel below takes them)
            if p["CONV_K1_SIMT"] and (kh, kw) == (1, 1) and f32:
                sgemm = self._plan_conv_k1_simt(spec, p)
                if sgemm is not None:
                    return sgemm
            # the streamed-weight kernels: 3x3 and 1x1 at stride 1 (CONV_TC 3, or 2 past 64 input channels), and
            # at stride 2 wherever tensor cores are allowed
            wide = self._plan_conv_tc_wide(spec, p, aligned, tc16)
            if wide is not None:
                return wide
            # the pipelined kernel's copies: NHWC 16-byte channel chunks, NCHW 16-byte row chunks
            pipe_copies = ci % 8 == 0 if spec.layout == "NHWC" else iw % 8 == 0
            if spec.groups == 1 and unit and tc16 and p["CONV_TC"] == 2 and (kh, kw) == (3, 3) and ci <= 64 \
                    and pipe_copies and aligned and self._cc >= (8, 0) \
                    and _TC_PIPE_SMEM[spec.layout] <= self._max_smem():
                tiles_h, tiles_w, co_tiles = _cdiv(oh, 8), _cdiv(ow, 32), _cdiv(co, 64)
                ntiles = n * tiles_h * tiles_w
                grid = (max(1, min(ntiles, _cdiv(self._sms, co_tiles))), co_tiles, 1)
                args: tuple[object, ...] = ("x", "w", "b", "y", n, ci, ih, iw, co, oh, ow, pt, pl, tiles_h, tiles_w)
                return (
                    Launch("conv2d.cu", defines, "conv2d_k3_tc_pipe", "PPPP" + "i" * 11, grid, (256, 1, 1),
                           _TC_PIPE_SMEM[spec.layout], args),
                )
            if spec.groups == 1 and unit and tc16 and p["CONV_TC"] and ci <= 64 and kh <= 3 and kw <= 3 \
                    and self._cc >= (7, 5) and _TC_SMEM <= self._max_smem():
                tiles_h, tiles_w = _cdiv(oh, 4), _cdiv(ow, 32)
                ntiles = n * tiles_h * tiles_w
                grid = (max(1, min(ntiles, self._sms * 2)), _cdiv(co, 64), 1)
                args = ("x", "w", "b", "y", n, ci, ih, iw, co, oh, ow, kh, kw, pt, pl, tiles_h, tiles_w)
                return (
                    Launch("conv2d.cu", defines, "conv2d_k3_tc", "PPPP" + "i" * 13, grid, (256, 1, 1), _TC_SMEM,
                           args),
                )
            if p["CONV_IM2COL"] and spec.groups == 1 and (tc16 or f32):
                im2col = self._plan_conv_im2col(spec, defines) if tc16 else self._plan_conv_im2col_simt(spec, p)
                if im2col is not None:
                    return im2col
            simt_smem = 2 * _SIMT_BUF_FLOATS[simt_ci] * 4
            if spec.groups == 1 and unit and (kh, kw) == (3, 3) and simt_smem <= self._max_smem() \
                    and n * ci * ih * iw < 2**31 and co * ci * 9 < 2**31:
                tiles_h, tiles_w, co_tiles = _cdiv(oh, 8), _cdiv(ow, 32), _cdiv(co, 64)
                blocks = n * tiles_h * tiles_w * co_tiles
                if blocks < 2**31:
                    args = ("x", "w", "b", "y", n, ci, ih, iw, co, oh, ow, pt, pl, tiles_h, tiles_w, co_tiles)
                    return (
                        Launch("conv2d.cu", defines, "conv2d_k3_simt", "PPPP" + "i" * 12, (blocks, 1, 1), (256, 1, 1),
                               simt_smem, args),
                    )
            if spec.groups == ci == co and ci > 1:
                dw_tc = self._plan_dw_tc(spec, p, aligned, defines)
                if dw_tc is not None:
                    return dw_tc
                pipe = self._plan_dw_pipe(spec, p, aligned, defines)
                if pipe is not None:
                    return pipe
                reg = self._plan_dw_registers(spec, p, aligned, defines, threads)
                if reg is not None:
                    return reg
            if spec.groups == ci == co and ci > 1 and (aligned or spec.layout == "NCHW"):
                variant = "k3s1" if (kh, kw, sh, sw, dh, dw) == (3, 3, 1, 1, 1, 1) else "g"
                tile = self._window_plan(
                    nhwc=spec.layout == "NHWC", es=es, n=n, c=ci, ih=ih, iw=iw, oh=oh, ow=ow, kh=kh, kw=kw, sh=sh,
                    sw=sw, pt=pt, pl=pl, dh=dh, dw=dw, adaptive=False, split=False, weights_per_plane=kh * kw,
                    tile_h=int(p["DW_TILE_H"]), tile_w=int(p["DW_TILE_W"]), budget=int(p["DW_SMEM_KB"]) * 1024,
                    strip_rows=_STRIP_ROWS.get(variant, 0),
                    # the 16-bit pair NCHW path (conv2d.cu via hal_window.cuh, DW_H2) reads up to 8 bytes left of
                    # the tile
                    guard=16 if (es == 2 and spec.layout == "NCHW" and variant == "k3s1" and p["DW_H2"]) else 0,
                )
                if tile is not None:
                    fields, blocks, shared = tile
                    fields.update(N=n, C=ci, IH=ih, IW=iw, OH=oh, OW=ow, KH=kh, KW=kw, SH=sh, SW=sw, PT=pt, PL=pl,
                                  DH=dh, DW=dw)
                    blob = pack_win(fields)
                    return (
                        Launch("conv2d.cu", defines, f"conv2d_dw_tile_{variant}", f"PPPP{len(blob)}s", (blocks, 1, 1),
                               (threads, 1, 1), shared, ("x", "w", "b", "y", blob)),
                    )
            if p["GRP_TC"]:
                grouped_tc = self._plan_conv_grouped_tc(spec, p, defines, aligned)
                if grouped_tc is not None:
                    return grouped_tc
            if p["GRP_TILED"]:
                tiled = self._plan_conv_tiled(spec, p, defines, threads, aligned)
                if tiled is not None:
                    return tiled
        total = n * co * oh * ow
        args = ("x", "w", "b", "y", n, ci, ih, iw, co, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw, spec.groups)
        return (
            Launch("conv2d.cu", defines, "conv2d", "PPPP" + "i" * 16, self._grid_1d(total, threads), (threads, 1, 1),
                   0, args),
        )

    def _plan_conv_im2col(self, spec: Conv2dSpec, defines: tuple[tuple[str, int], ...]) -> tuple[Launch, ...] | None:
        """conv2d_im2col_tc (CONV_IM2COL) for a float16 dense conv, or None where it does not apply: K = C_in *
        KH * KW over 256, before sm_75, its shared memory over the device's, or sizes past its int32 offsets.
        Persistent blocks of 4 warps, as many as fit the SMs (shared memory bounds them), times the 64-channel
        chunks of C_out on the grid's y."""
        kh, kw = spec.kernel
        k = spec.c_in * kh * kw
        if k > _IM2COL_KMAX or self._cc < (7, 5):
            return None
        kp = _cdiv(k, 16) * 16
        pitch = kp + 8  # an odd count of 16-byte chunks a row: conflict-free stores and ldmatrix
        region = max(32 * pitch, 64 * 40)  # a warp's im2col rows, then its output stage (NCHW's is the larger)
        shared = 16 * kp + 2 * (64 * pitch + 4 * region)
        segs = _cdiv(spec.out_w, 32)
        tiles = spec.n * spec.out_h * segs
        # (a warp's tile index steps by 4 x the grid, at most 4 x 8 blocks x SMs: it must stay within int32)
        if shared > self._max_smem() or tiles + 4 * self._sms * 8 >= 2**31 \
                or spec.n * spec.c_in * spec.in_h * spec.in_w >= 2**31 or spec.c_in * spec.in_h * spec.in_w >= 2**28:
            return None
        co_chunks = _cdiv(spec.c_out, 64)
        per_sm = self._resident_blocks(shared, 8)
        grid = (max(1, min(_cdiv(tiles, 4), _cdiv(self._sms * per_sm, co_chunks))), co_chunks, 1)
        pt, _, pl, _ = spec.pads
        fields = (spec.n, spec.c_in, spec.in_h, spec.in_w, spec.c_out, spec.out_h, spec.out_w, kh, kw,
                  *spec.stride, *spec.dilation, pt, pl, k, kp, pitch, region, segs, tiles)
        blob = struct.pack(f"<{len(fields)}i", *fields)
        return (Launch("conv2d.cu", defines, "conv2d_im2col_tc", f"PPPP{len(blob)}s", grid, (128, 1, 1), shared,
                       ("x", "w", "b", "y", blob)),)

    def _plan_conv_k1_gemm(
        self, spec: Conv2dSpec, p: Mapping[str, int], aligned: bool, defines: tuple[tuple[str, int], ...]
    ) -> tuple[Launch, ...] | None:
        """conv2d_k1_gemm (CONV_K1_GEMM) for a float16 dense 1x1 conv, or None where it does not apply:
        C_in % 8 == 0 (16-byte channel chunks), x and y 16-byte aligned (NHWC; the weights always, which
        the caller checks), sm_80+, its shared memory (K1G_STAGES, K1G_BN) within the device's, and
        M = N * OH * OW (+ a tile) and the grid within int32. One block per 128-pixel x K1G_BN-channel
        output tile (K1G_BN 64 wherever C_out <= 64: a 128-wide tile would multiply zero weights for
        half its mma), the N tiles of an M tile adjacent. K1G_PERSIST 1 / 2: the persistent kernel of the
        same build instead (the resident blocks x SMs, each walking tiles in that order; 2: streaming
        stores) where `_k1_persist_grid` allows it. NCHW: x transposed into an NHWC workspace, the NHWC
        build, the result transposed back (the stride-2 tensor-core path's way; any alignment of x and y)."""
        n, ci, co, ih, iw, oh, ow = spec.n, spec.c_in, spec.c_out, spec.in_h, spec.in_w, spec.out_h, spec.out_w
        sh, sw = spec.stride
        pt, _, pl, _ = spec.pads
        nchw = spec.layout == "NCHW"
        bn = 64 if co <= 64 else int(p["K1G_BN"])
        smem = _k1g_smem(int(p["K1G_STAGES"]), bn)
        m = n * oh * ow
        grid = _cdiv(m, 128) * _cdiv(co, bn)
        if not (spec.groups == 1 and spec.kernel == (1, 1) and self._tensor_core_dtype(spec.dtype) and ci % 8 == 0
                and (aligned or nchw) and self._cc >= (8, 0) and smem <= self._max_smem()
                and m + 128 < 2**31 and grid < 2**31
                and (not nchw or _transposes_fit(spec))):
            return None
        if nchw or bn != p["K1G_BN"]:  # the NHWC build, of the tile width served
            defines = self.compile_defines("conv2d", spec.dtype, "NHWC", {**p, "K1G_BN": bn}, spec.relu)
        kernel, smem, grid = self._k1_kernel("conv2d_k1_gemm", _K1G_PERSIST_KERNELS, int(p["K1G_PERSIST"]),
                                             _k1g_persist_smem(int(p["K1G_STAGES"]), bn), smem, grid, _K1_MINB[bn])
        xs, ys = ("xt", "yt") if nchw else ("x", "y")
        gemm = Launch("conv2d.cu", defines, kernel, "PPPP" + "i" * 11, (grid, 1, 1), (256, 1, 1),
                      smem, (xs, "w", "b", ys, n, ci, ih, iw, co, oh, ow, sh, sw, pt, pl))
        return self._through_nhwc(spec, (gemm,)) if nchw else (gemm,)

    def _plan_conv_k1_nchw(
        self, spec: Conv2dSpec, p: Mapping[str, int], aligned: bool, defines: tuple[tuple[str, int], ...]
    ) -> tuple[Launch, ...] | None:
        """conv2d_k1_gemm_nchw (CONV_K1_NCHW) for a float16 NCHW dense 1x1 conv (strided or padded: after
        sample_planes, below), or None where it does not apply: C_in % 8 == 0 (16-byte weight chunks), OH*OW %
        8 == 0 (16-byte pixel chunks, each inside one image), x and y 16-byte aligned (the weights too, which
        the caller checks), sm_80+, its shared memory (K1N_STAGES, K1N_BM) within the device's, and N*OH*OW
        (+ a tile), the element offsets and the grid within int32. One block per K1N_BM-channel x 128-pixel output tile
        (K1N_BM 64 wherever C_out <= 64), the pixels flattened over the batch, the channel tiles of a pixel
        tile adjacent. K1N_PERSIST 1 / 2: the persistent kernel of the same build instead (the resident
        blocks x SMs, each walking tiles in that order; 2: streaming stores) where `_k1_persist_grid` allows
        it. No transposes. Another stride or padding: x's sampled pixels first (sample_planes, eltwise.cu:
        the rows and columns the 1x1 window reads, zeros for padding) into the workspace "xs", N x C_in x OH
        x OW, then the stride-1 GEMM over it (OH * OW % 8 == 0; the sampled input is a quarter of x at
        stride 2, where the transposing path moves all of x twice)."""
        n, ci, co, ih, iw, oh, ow = spec.n, spec.c_in, spec.c_out, spec.in_h, spec.in_w, spec.out_h, spec.out_w
        sampled = spec.stride != (1, 1) or spec.pads != (0, 0, 0, 0)
        hw = oh * ow
        bm = 64 if co <= 64 else int(p["K1N_BM"])
        smem = _k1n_smem(int(p["K1N_STAGES"]), bm)
        m = n * hw
        grid = _cdiv(m, 128) * _cdiv(co, bm)
        if not (spec.groups == 1 and spec.kernel == (1, 1) and self._tensor_core_dtype(spec.dtype)
                and spec.layout == "NCHW"
                and ci % 8 == 0 and hw % 8 == 0 and aligned and self._cc >= (8, 0)
                and smem <= self._max_smem() and 0 < m and m + 128 < 2**31 and n * ci * hw < 2**31
                and n * co * hw < 2**31 and grid < 2**31 and n * ci * ih * iw < 2**31):
            return None
        if bm != p["K1N_BM"]:  # the build of the tile height served
            defines = self.compile_defines("conv2d", spec.dtype, "NCHW", {**p, "K1N_BM": bm}, spec.relu)
        kernel, smem, grid = self._k1_kernel("conv2d_k1_gemm_nchw", _K1N_PERSIST_KERNELS, int(p["K1N_PERSIST"]),
                                             _k1n_persist_smem(int(p["K1N_STAGES"]), bm), smem, grid, _K1_MINB[bm])
        gemm = Launch("conv2d.cu", defines, kernel, "PPPPiiii", (grid, 1, 1), (256, 1, 1), smem,
                      ("xs" if sampled else "x", "w", "b", "y", n, ci, hw, co))
        if not sampled:
            return (gemm,)
        rows = n * ci * oh  # < 2^31 with n * ci * hw; a multiple of 8 (sample_planes_rows8 relies on it)
        sh, sw = spec.stride
        pt, _, pl, _ = spec.pads
        edefines = self.compile_defines("eltwise", spec.dtype, "NCHW", _SCHEMAS["eltwise"].defaults())
        sample, rows_per_block = ("sample_planes_rows8", 64) if p["K1N_SAMPLE"] else ("sample_planes", 8)
        return (
            Launch("eltwise.cu", edefines, sample, "PP" + "i" * 9, (_cdiv(rows, rows_per_block), 1, 1), (32, 8, 1),
                   0, ("x", "xs", rows, ih, iw, oh, ow, sh, sw, pt, pl)),
            gemm,
        )

    def _k1_kernel(self, base: str, persistent: Mapping[int, str], mode: int, psmem: int, smem: int, grid: int,
                   minb: int) -> tuple[str, int, int]:
        """(kernel, shared memory, grid) of a 1x1 GEMM launch: the persistent kernel of the same build for
        K1G_PERSIST / K1N_PERSIST `mode` 1 or 2 (`psmem` bytes a block), where the device holds its blocks
        (`_k1_persist_grid`); else `base`, one block a tile (`smem`, `grid`)."""
        if mode:
            pgrid = self._k1_persist_grid(psmem, grid, minb)
            if pgrid is not None:
                return persistent[mode], psmem, pgrid
        return base, smem, grid

    def _k1_persist_grid(self, shared: int, tiles: int, minb: int) -> int | None:
        """The grid of a persistent 1x1 GEMM kernel (K1G_PERSIST, K1N_PERSIST) of `shared` bytes a block over
        `tiles` output tiles: the `minb` blocks an SM its registers allow x the SMs, at most `tiles`; None
        (the one-block-a-tile kernel serves) where the shared memory does not fit a block, or holds fewer than
        `minb` of them an SM (persistence trades the second resident block's overlap for its own: with fewer
        blocks than the non-persistent kernel keeps, that trade is not the one measured), or where tiles +
        grid reaches 2^31 (the kernel's tile index)."""
        if shared > self._max_smem() or self._resident_blocks(shared, minb) < minb:
            return None
        grid = max(1, min(tiles, self._sms * minb))
        return grid if tiles + grid < 2**31 else None

    def _plan_conv_k1_simt(self, spec: Conv2dSpec, p: Mapping[str, int]) -> tuple[Launch, ...] | None:
        """conv2d_k1_simt (CONV_K1_SIMT) for a float32 dense 1x1 conv, or None where it does not apply: not
        float32, groups other than 1, another window, no output, an element offset of x, y or the weights
        (or M = N * OH * OW + a tile) past int32, the grid past 2^31 - 1 blocks, or its shared memory
        (K1S_BN, K1S_BK) past the device's. Any stride, padding, C_in, C_out and alignment: the kernel
        vectorizes where they allow. One block per 128-pixel x K1S_BN-channel output tile (K1S_BN 64
        wherever C_out <= 64), the channel tiles of a pixel tile adjacent; 2 x K1S_BN threads. Both
        layouts run natively (no transposes, no workspace)."""
        n, ci, co, ih, iw, oh, ow = spec.n, spec.c_in, spec.c_out, spec.in_h, spec.in_w, spec.out_h, spec.out_w
        sh, sw = spec.stride
        pt, _, pl, _ = spec.pads
        if spec.groups != 1 or spec.kernel != (1, 1) or spec.dtype != np.float32:
            return None
        bn, bk = (64 if co <= 64 else int(p["K1S_BN"])), int(p["K1S_BK"])
        m = n * oh * ow
        grid = _cdiv(m, 128) * _cdiv(co, bn)
        smem = _k1s_smem(bn, bk)
        if not (0 < m and m + 128 < 2**31 and n * ci * ih * iw < 2**31 and m * co < 2**31 and co * ci < 2**31
                and grid < 2**31 and smem <= self._max_smem()):
            return None
        defines = self.compile_defines("conv2d", spec.dtype, spec.layout, {**p, "K1S_BN": bn}, spec.relu)
        return (
            Launch("conv2d.cu", defines, "conv2d_k1_simt", "PPPP" + "i" * 11, (grid, 1, 1), (2 * bn, 1, 1), smem,
                   ("x", "w", "b", "y", n, ci, ih, iw, co, oh, ow, sh, sw, pt, pl)),
        )

    def _plan_conv_im2col_simt(self, spec: Conv2dSpec, p: Mapping[str, int]) -> tuple[Launch, ...] | None:
        """conv2d_im2col_simt (CONV_IM2COL in float32) for a float32 dense conv of any window, stride, dilation
        and padding, or None where it does not apply: not float32, groups other than 1, no output, K = C_in *
        KH * KW past _IM2COL_SIMT_KMAX, element offsets of x (with its padding), y or the weights (or M + a
        tile) past int32, the grid past 2^31 - 1 blocks, or its shared memory (conv2d_k1_simt's stages and a
        16-byte table entry per k) past the device's. conv2d_k1_simt's tiles and launch (K1S_BN, K1S_BK),
        both layouts natively."""
        n, ci, co, ih, iw, oh, ow = spec.n, spec.c_in, spec.c_out, spec.in_h, spec.in_w, spec.out_h, spec.out_w
        kh, kw = spec.kernel
        pt, pb, pl, pr = spec.pads
        k = ci * kh * kw
        if spec.groups != 1 or spec.dtype != np.float32 or k > _IM2COL_SIMT_KMAX:
            return None
        bn, bk = (64 if co <= 64 else int(p["K1S_BN"])), int(p["K1S_BK"])
        m = n * oh * ow
        grid = _cdiv(m, 128) * _cdiv(co, bn)
        smem = _k1s_smem(bn, bk) + 16 * _cdiv(k, bk) * bk
        # the kernel's offsets from a window corner in the padded input (its rows of -2^30 stay out)
        padded = (n + 1) * ci * (ih + pt + pb + 1) * (iw + pl + pr + 1)
        if not (0 < m and m + 128 < 2**31 and padded < 2**31 and max(pt, pl) < 2**20 and m * co < 2**31
                and co * k < 2**31 and grid < 2**31 and smem <= self._max_smem()):
            return None
        defines = self.compile_defines("conv2d", spec.dtype, spec.layout, {**p, "K1S_BN": bn}, spec.relu)
        return (
            Launch("conv2d.cu", defines, "conv2d_im2col_simt", "PPPP" + "i" * 15, (grid, 1, 1), (2 * bn, 1, 1),
                   smem, ("x", "w", "b", "y", n, ci, ih, iw, co, oh, ow, kh, kw, *spec.stride, *spec.dilation,
                          pt, pl)),
        )

    def _through_nhwc(self, spec: Conv2dSpec, plan: tuple[Launch, ...]) -> tuple[Launch, ...]:
        """An NCHW conv as `plan` (NHWC launches on the workspaces "xt" and "yt") between two
        layout_transpose launches: x into "xt", then "yt" back into y (see _transposes_fit)."""
        n, ci, co = spec.n, spec.c_in, spec.c_out
        hw_in, hw_out = spec.in_h * spec.in_w, spec.out_h * spec.out_w
        edefines = self.compile_defines("eltwise", spec.dtype, "NCHW", _SCHEMAS["eltwise"].defaults())
        return (
            Launch("eltwise.cu", edefines, "layout_transpose", "PPii", (_cdiv(hw_in, 64), _cdiv(ci, 64), n),
                   (64, 4, 1), 0, ("x", "xt", ci, hw_in)),
            *plan,
            Launch("eltwise.cu", edefines, "layout_transpose", "PPii", (_cdiv(co, 64), _cdiv(hw_out, 64), n),
                   (64, 4, 1), 0, ("yt", "y", hw_out, co)),
        )

    # -- batch_norm --------------------------------------------------------------------------------
    def batch_norm(
        self,
        spec: BatchNormSpec,
        x: Buffer,
        y: Buffer,
        weight: Buffer | None,
        bias: Buffer | None,
        running_mean: Buffer | None,
        running_var: Buffer | None,
        params: Mapping[str, int],
    ) -> None:
        """BatchNorm forward (training updates the running statistics in place)."""
        self._float_only("batch_norm", spec.dtype, spec)
        aligned = int(x) % 16 == 0 and int(y) % 16 == 0
        # no cooperative launch inside a capture (cuLaunchKernelEx with the cooperative attribute
        # did not capture on the H200's driver, session 28): the two-pass plan there
        key = ("bn", spec, self._pkey(params), aligned, self.cooperative and not self._capturing)
        plan = self._planned(key, lambda: self._plan_batch_norm(spec, params, aligned))
        c = spec.c
        buffers: dict[str, Buffer | None] = {
            "x": x, "y": y, "w": weight, "b": bias, "rm": running_mean, "rv": running_var,
        }
        with self._lock:  # the workspace is shared: keep the launches of one call together
            if plan[0].kernel == "batch_norm_train_fused":
                blocks = struct.unpack_from("<i", cast(bytes, plan[0].args[-1]))[0]  # BnFused.blocks
                buffers["part"] = self._workspace_buffer("bn_part", 12 * c * blocks)
                buffers["aff"] = self._workspace_buffer("bn_stats", 16 * c)
                buffers["bar"] = self._barrier_buffer()
                try:
                    self._run(plan, buffers)
                    return
                except CooperativeLaunchRefused as exc:  # nothing of this call ran: the other plan serves
                    warnings.warn(f"{self.info.id}: {exc}; BatchNorm training takes the two-pass plan from now on",
                                  RuntimeWarning, stacklevel=2)
                    self.cooperative = False
                    plan = self._planned((*key[:-1], False), lambda: self._plan_batch_norm(spec, params, aligned))
            if spec.training:
                slabs = struct.unpack_from("<i", cast(bytes, plan[0].args[-1]))[0]  # BnParams.slabs
                buffers["part"] = self._workspace_buffer("bn_part", 12 * c * slabs)
                stats = self._workspace_buffer("bn_stats", 16 * c)
                buffers["mean"] = stats
                buffers["var"] = CudaBuffer(stats.ptr + 4 * c, 4 * c, stats)
                buffers["scale"] = CudaBuffer(stats.ptr + 8 * c, 4 * c, stats)
                buffers["beta"] = CudaBuffer(stats.ptr + 12 * c, 4 * c, stats)
            self._run(plan, buffers)

    def _plan_batch_norm(self, spec: BatchNormSpec, params: Mapping[str, int], aligned: bool) -> tuple[Launch, ...]:
        p = {**_SCHEMAS["batch_norm"].defaults(), **params}
        threads, unroll = int(p["BN_THREADS"]), int(p["BN_UNROLL"])
        defines = self.compile_defines("batch_norm", spec.dtype, spec.layout, p, spec.relu)
        es = spec.dtype.itemsize
        vecw = 16 // es
        n, c, hw = spec.n, spec.c, spec.h * spec.w
        bps = int(p["BN_BLOCKS_PER_SM"])
        if not spec.training and p["BN_FLAT"] and aligned:
            flat = self._plan_bn_flat(spec, p, defines, vecw)
            if flat is not None:
                return flat
        if spec.training and spec.layout == "NHWC" and p["BN_FUSED"] and aligned:
            fused = self._plan_bn_fused(spec, p, defines, vecw)
            if fused is not None:
                return fused
        if spec.layout == "NHWC":
            vec = int(aligned and c % vecw == 0)
            ve = vecw if vec else 1
            ncv = c // ve
            cv_chunk = min(ncv, threads)
            cchunks = _cdiv(ncv, cv_chunk)
            rg = threads // cv_chunk
            # one wave, every block resident: equal slabs finish together (the partials per
            # channel are merged by a block per channel afterwards)
            wave = self._sms * max(1, min(bps, 2048 // threads))
            slabs = max(1, min(_cdiv(wave, cchunks), _cdiv(n * hw, rg * unroll)))
            grid = slabs * cchunks
            fd = fastdiv(1)
            shared = threads * ve * 12
        else:
            vec = int(aligned and hw % vecw == 0)
            ve = vecw if vec else 1
            per_plane = hw // ve
            cv_chunk, cchunks = 1, 1
            # many blocks: the hardware balances them over the multiprocessors
            slabs = max(1, min(_cdiv(self._sms * bps, c), _cdiv(n * per_plane, threads * unroll)))
            grid = slabs * c
            fd = fastdiv(per_plane)
            shared = 0
        infer = int(not spec.training)
        apply_blob = pack_bn(slabs, vec, cv_chunk, cchunks, spec.eps, spec.momentum, infer,
                             int(spec.training and p["BN_L2_HINT"] == 1), fd)
        apply = Launch(
            "batch_norm.cu", defines, "batch_norm_apply_ex", f"PPPPPPPPPiii{len(apply_blob)}s", (grid, 1, 1),
            (threads, 1, 1), 0,
            ("x", "y", "mean", "scale", "beta", "rm", "rv", "w", "b", n, c, hw, apply_blob),
        )
        if not spec.training:
            return (apply,)
        stats_blob = pack_bn(slabs, vec, cv_chunk, cchunks, spec.eps, spec.momentum, 0, 0, fd)
        stats = Launch(
            "batch_norm.cu", defines, "batch_norm_stats", f"PPPiiiP{len(stats_blob)}s", (grid, 1, 1),
            (threads, 1, 1), shared, ("x", "mean", "var", n, c, hw, "part", stats_blob),
        )
        fin = Launch(
            "batch_norm.cu", defines, "batch_norm_finalize", f"PPPPPPPPPii{len(stats_blob)}s", (c, 1, 1),
            (threads, 1, 1), 0,
            ("part", "mean", "var", "w", "b", "rm" if spec.has_running else 0, "rv" if spec.has_running else 0,
             "scale", "beta", c, slabs, stats_blob),
        )
        if spec.layout == "NCHW" and p["BN_APPLY_MERGE"]:
            merged = Launch(
                "batch_norm.cu", defines, "batch_norm_apply_merged", f"PPPPPPPPPPPiii{len(apply_blob)}s", (grid, 1, 1),
                (threads, 1, 1), 0,
                ("x", "y", "part", "mean", "var", "w", "b", "rm" if spec.has_running else 0,
                 "rv" if spec.has_running else 0, "scale", "beta", n, c, hw, apply_blob),
            )
            return (stats, merged)  # stats first: batch_norm() reads the slab count from its blob
        return (stats, fin, apply)

    def _plan_bn_fused(
        self, spec: BatchNormSpec, p: Mapping[str, int], defines: tuple[tuple[str, int], ...], vecw: int
    ) -> tuple[Launch, ...] | None:
        """NHWC training in one cooperative launch (batch_norm_train_fused), or None where it does
        not apply: no cooperative launch, C not a multiple of the vector width or past one block's
        threads, or more of x than half of L2 would have to be re-read (then x crosses DRAM about
        twice, as in the two-pass plan, at one block a multiprocessor: not measured there)."""
        if not self.cooperative or self._capturing or spec.c % vecw:
            return None
        threads, regs = int(p["BN_FUSED_THREADS"]), int(p["BN_FUSED_REGS"])
        ncv = spec.c // vecw
        if ncv > threads:
            return None
        rg = threads // ncv
        gpw = 32 // ncv if ncv <= 16 and 32 % ncv == 0 else 1  # lanes of one channel group in a warp
        blocks = self._sms  # __launch_bounds__(threads, 1): one block an SM always fits
        pixels = spec.n * spec.h * spec.w
        per_thread = _cdiv(_cdiv(pixels, blocks), rg)
        red = (rg // gpw) * ncv * vecw * 12  # the block reduction's states
        budget = self._max_smem() - red
        if budget < 0:
            return None
        smem_vecs = max(0, min(per_thread - regs, budget // (16 * threads)))
        kept = blocks * threads * min(per_thread, regs + smem_vecs) * 16
        reread = pixels * spec.c * spec.dtype.itemsize - kept
        l2 = int(dict(self.info.extras).get("l2_bytes", "0") or 0)
        if reread > l2 // 2:
            return None
        fin = int(bool(p["BN_FUSED_FIN"]) and spec.c * blocks * 12 <= 128 * 1024)
        blob = struct.pack("<5i2f2i", blocks, ncv, rg, smem_vecs, gpw, spec.eps, spec.momentum,
                           int(spec.has_running), fin)
        fdefines = tuple(sorted({**dict(defines), "BN_FUSED_THREADS": threads, "BN_FUSED_REGS": regs}.items()))
        return (Launch("batch_norm.cu", fdefines, "batch_norm_train_fused", f"PPPPPPPPPqi{len(blob)}s", (blocks, 1, 1),
                       (threads, 1, 1), smem_vecs * threads * 16 + red,
                       ("x", "y", "w", "b", "rm" if spec.has_running else 0, "rv" if spec.has_running else 0,
                        "part", "aff", "bar", pixels, spec.c, blob), pdl=False, cooperative=True),)

    def _barrier_buffer(self) -> CudaBuffer:
        """Two zeroed words for grid barriers (batch_norm_train_fused): zeroed once, and every
        barrier leaves its count at zero again."""
        buf = self._workspace.get("grid_barrier")
        if buf is None:
            buf = self.allocate(256)
            with self._active():
                self._drv.memset_d32_async(int(buf), 0, 64, self._stream)
            self._workspace["grid_barrier"] = buf
        return buf

    def _plan_bn_flat(
        self, spec: BatchNormSpec, p: Mapping[str, int], defines: tuple[tuple[str, int], ...], vecw: int
    ) -> tuple[Launch, ...] | None:
        """Inference over aligned 16-byte vectors (batch_norm_infer_flat), or None where it does not apply."""
        n, c, hw = spec.n, spec.c, spec.h * spec.w
        if spec.layout == "NHWC":
            if c % vecw:
                return None
            fa, fc = fastdiv(c // vecw), fastdiv(1)
        else:
            if hw % vecw:
                return None
            fa, fc = fastdiv(hw // vecw), fastdiv(c)
        nvec = n * c * hw // vecw
        shared = 12 * c  # (mean, scale, shift) of every channel
        if nvec >= 2**31 or shared > self._smem_default:
            return None
        threads, unroll = int(p["BN_THREADS"]), int(p["BN_UNROLL"])
        # NHWC with C / vecw dividing the block: every vector a thread visits holds the same
        # channels, so batch_norm_infer_flat_reg keeps their constants in registers
        reg = spec.layout == "NHWC" and bool(p["BN_FLAT_REG"]) and threads % (c // vecw) == 0
        if reg:
            shared = 0
        # persistent blocks: the grid must be resident all at once (BN_INFER_THREADS_SM and
        # BN_REG_THREADS_SM in batch_norm.cu)
        occ = self._bn_infer_occ(p, spec.dtype.itemsize == 2, reg)
        per_sm = self._resident_blocks(shared, min(int(p["BN_BLOCKS_PER_SM"]), occ // threads))
        tiles = _cdiv(nvec, threads * unroll)
        # the kernels stride by the grid, so a grid of every tile runs each block once
        grid = tiles if p["BN_INFER_TILES"] else max(1, min(self._sms * per_sm, tiles))
        blob = struct.pack("<2i3I3If", nvec, c, *fa, *fc, spec.eps)
        kernel = "batch_norm_infer_flat_reg" if reg else "batch_norm_infer_flat"
        return (
            Launch("batch_norm.cu", defines, kernel, f"PPPPPP{len(blob)}s", (grid, 1, 1),
                   (threads, 1, 1), shared, ("x", "y", "rm", "rv", "w", "b", blob)),
        )

    def _bn_infer_occ(self, p: Mapping[str, int], half: bool, reg: bool) -> int:
        """Resident threads per SM the flat inference kernels are compiled for (mirrors batch_norm.cu)."""
        unroll = int(p["BN_UNROLL"])
        occ = int(p["BN_INFER_OCC"]) or (1024 if unroll >= 8 else 1536)
        occ = min(occ, self._threads_per_sm())
        if reg:  # BN_REG_CAP: the per-thread constants' registers
            cap = (768 if unroll >= 8 else 1024) if half else (1024 if unroll >= 8 else 1280 if unroll >= 4 else 2048)
            occ = min(occ, cap)
        return occ


BACKEND = CudaBackend
