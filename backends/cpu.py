"""hal's CPU backend: C kernels (``kernels_c/``) compiled by the system C compiler, loaded with ctypes.

Buffers are 1-D ``uint8`` numpy arrays (64-byte aligned); a launcher hands the
kernels raw pointers, so any C-contiguous numpy array also serves as a buffer.
Every kernel call is synchronous and runs with the GIL released (ctypes releases
it around foreign calls); the kernels use OpenMP threads.

Instruction set: the device's ``arch`` names the path the kernels are built for,
``x86-avx512`` (AVX-512F/BW/VL), ``x86-avx2`` (AVX2 + FMA + F16C) or ``generic``
(portable C). It is the best the CPU supports unless ``HAL_CPU_ISA`` asks for a
lower one (``avx512``, ``avx2`` or ``generic``); an ISA the CPU lacks is refused
with a warning. ``HAL_NUM_THREADS`` sets the thread count (default: OpenMP's).

Builds: each (source, defines, ISA) is compiled once with
``cc -O3 <ISA flags> -fopenmp -shared -fPIC`` and cached under
``hal.cache.cache_dir("c")`` as ``<name>-<sha256>.so``, the hash covering the
source, every header, the defines, the flags, ``cc --version`` and hal's version.
``HAL_DISABLE_CACHE`` builds into a temporary folder instead.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
import weakref
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

import numpy as np

from hal.backends.base import Backend, BackendProbe, Buffer, DeviceInfo
from hal.cache import cache_dir, cache_disabled
from hal.dtypes import is_bfloat16
from hal.errors import HalValueError, KernelCompileError, OutOfMemory
from hal.resources import kernel_dir
from hal.spec import AdaptivePool2dSpec, BatchNormSpec, Conv2dSpec, EltwiseSpec, Pool2dSpec, QConv2dSpec
from hal.tuning.schema import KernelSchema, Param

#: instruction-set paths, best first.
ISAS: tuple[str, ...] = ("avx512", "avx2", "generic")
#: DeviceInfo.arch of each path.
ARCH_OF_ISA: dict[str, str] = {"avx512": "x86-avx512", "avx2": "x86-avx2", "generic": "generic"}
ISA_OF_ARCH: dict[str, str] = {arch: isa for isa, arch in ARCH_OF_ISA.items()}
#: compiler flags and the macro that selects each path in kernels_c/hal_prelude.h.
ISA_FLAGS: dict[str, tuple[str, ...]] = {
    "avx512": ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma", "-mf16c"),
    "avx2": ("-mavx2", "-mfma", "-mf16c"),
    "generic": (),
}
ISA_MACRO: dict[str, str | None] = {"avx512": "HAL_ISA_AVX512", "avx2": "HAL_ISA_AVX2", "generic": None}
#: CPU flags (/proc/cpuinfo) each path needs.
ISA_CPU_FLAGS: dict[str, tuple[str, ...]] = {
    "avx512": ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx2", "fma", "f16c"),
    "avx2": ("avx2", "fma", "f16c"),
    "generic": (),
}
#: floats per vector register on each path (DeviceInfo.subgroup).
VECTOR_FLOATS: dict[str, int] = {"avx512": 16, "avx2": 8, "generic": 1}
#: vector registers each path has, for the conv register-tile constraint.
VECTOR_REGISTERS: dict[str, int] = {"avx512": 32, "avx2": 16, "generic": 16}

#: the quantized dtypes (int8/uint8 kernels in qpool2d.c and qconv2d.c)
QUANT_DTYPES = (np.dtype(np.int8), np.dtype(np.uint8))
_P = ctypes.c_void_p
_L = ctypes.c_long
#: argument types of every entry point (buffers first, then ``long`` geometry).
SIGNATURES: dict[str, list[type]] = {
    "pool2d_max": [_P, _P, _P] + [_L] * 18,
    "pool2d_avg": [_P, _P, _P] + [_L] * 18,
    "adaptive_pool2d_max": [_P, _P, _P] + [_L] * 6,
    "adaptive_pool2d_avg": [_P, _P, _P] + [_L] * 6,
    "conv2d": [_P, _P, _P, _P] + [_L] * 16,
    # + workspace (unused: the kernel allocates its own partial sums)
    "batch_norm_stats": [_P, _P, _P, _L, _L, _L, _P],
    # + center_hi, center_lo: y = ((x - hi) - lo) * scale + shift keeps the digits
    # that x * scale + shift loses when |mean| >> std (see docs/backend-cpu.md)
    "batch_norm_apply": [_P, _P, _P, _P, _L, _L, _L, _P, _P],
    "eltwise_relu": [_P, _P, _L],
    # int8/uint8 (qpool2d.c, qconv2d.c): pool2d's arguments + the zero point; conv's + the
    # weight zero points, multipliers and the input and output zero points
    "qpool2d_max": [_P, _P, _P] + [_L] * 19,
    "qpool2d_avg": [_P, _P, _P] + [_L] * 19,
    "qconv2d": [_P] * 6 + [_L] * 18,
}
#: entry points that return a status (0, or 1 where a scratch allocation failed) instead of nothing
_STATUS_ENTRIES = frozenset({"conv2d"})
#: entry points per source file.
FILE_ENTRIES: dict[str, tuple[str, ...]] = {
    "pool2d.c": ("pool2d_max", "pool2d_avg"),
    "adaptive_pool2d.c": ("adaptive_pool2d_max", "adaptive_pool2d_avg"),
    "conv2d.c": ("conv2d",),
    "batch_norm.c": ("batch_norm_stats", "batch_norm_apply"),
    "eltwise.c": ("eltwise_relu",),
    "qpool2d.c": ("qpool2d_max", "qpool2d_avg"),
    "qconv2d.c": ("qconv2d",),
}
#: the schema parameters each layout's code reads (the others are left out of the build key).
LAYOUT_PARAMS: dict[tuple[str, str], tuple[str, ...]] = {
    ("pool2d", "NCHW"): ("W_BLOCK",),
    ("pool2d", "NHWC"): ("C_BLOCK",),
    ("adaptive_pool2d", "NCHW"): ("W_BLOCK",),
    ("adaptive_pool2d", "NHWC"): ("C_BLOCK",),
    ("conv2d", "NCHW"): ("CO_BLOCK", "W_BLOCK"),
    ("conv2d", "NHWC"): ("CO_BLOCK", "W_BLOCK"),
    ("batch_norm", "NCHW"): ("CHUNK", "ACC"),
    ("batch_norm", "NHWC"): ("CHUNK", "ACC"),
    ("eltwise", "NCHW"): ("UNROLL",),
}


# ----------------------------------------------------------------------------
# host facts
# ----------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _cpuinfo() -> dict[str, str]:
    """The first processor block of /proc/cpuinfo ({} where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    info: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if info:
                break
            continue
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    return info


def _is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86")


def detected_isa() -> str:
    """The best path this CPU supports, from its flags."""
    if not _is_x86():
        return "generic"
    flags = set(_cpuinfo().get("flags", "").split())
    for isa in ISAS:
        if all(f in flags for f in ISA_CPU_FLAGS[isa]):
            return isa
    return "generic"


def effective_isa() -> str:
    """``HAL_CPU_ISA`` when set and supported, else the detected path (with a warning when refused)."""
    best = detected_isa()
    wanted = os.environ.get("HAL_CPU_ISA", "").strip().lower()
    if not wanted:
        return best
    if wanted not in ISAS:
        warnings.warn(f"HAL_CPU_ISA={wanted!r} is not one of {', '.join(ISAS)}; using {best}", stacklevel=2)
        return best
    if ISAS.index(wanted) < ISAS.index(best):
        warnings.warn(f"HAL_CPU_ISA={wanted}: this CPU lacks it (best: {best}); using {best}", stacklevel=2)
        return best
    return wanted


def _cache_bytes(level: int) -> int:
    """Size of cpu0's level-``level`` data/unified cache from sysfs, 0 when unknown."""
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for index in sorted(root.glob("index*")):
            if (index / "level").read_text().strip() == str(level) and \
                    (index / "type").read_text().strip() != "Instruction":
                size = (index / "size").read_text().strip().upper()
                match = re.fullmatch(r"(\d+)([KMG]?)", size)
                if match:
                    return int(match.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[match.group(2)]
    except OSError:
        pass
    return 0


def _l2_bytes() -> int:
    """L2 cache size of cpu0 from sysfs, else 1 MiB."""
    return _cache_bytes(2) or 1 << 20


@lru_cache(maxsize=1)
def stream_threshold() -> int:
    """Outputs at least this large (bytes) are written with non-temporal stores:
    half the L3 (from sysfs), else 8 MiB."""
    l3 = _cache_bytes(3)
    return l3 // 2 if l3 else 8 << 20


def _mem_total() -> int:
    """MemTotal from /proc/meminfo (bytes), else 0."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _vendor() -> str:
    vendor_id = _cpuinfo().get("vendor_id", "")
    known = {"GenuineIntel": "intel", "AuthenticAMD": "amd", "HygonGenuine": "hygon", "CentaurHauls": "via"}
    if vendor_id in known:
        return known[vendor_id]
    implementer = _cpuinfo().get("CPU implementer", "")  # arm: 0x41 Arm, 0x61 Apple, ...
    return {"0x41": "arm", "0x61": "apple", "0x51": "qualcomm"}.get(implementer, vendor_id.lower() or "unknown")


def _model_name() -> str:
    info = _cpuinfo()
    return info.get("model name") or info.get("Model") or platform.processor() or platform.machine() or "cpu"


def num_threads() -> int:
    """``HAL_NUM_THREADS`` if a positive int, else 0 (OpenMP's default)."""
    try:
        return max(int(os.environ.get("HAL_NUM_THREADS", "0")), 0)
    except ValueError:
        return 0


# ----------------------------------------------------------------------------
# compiler
# ----------------------------------------------------------------------------


def find_compiler() -> tuple[str, ...] | None:
    """``CC`` (split like a shell word list) or the first of cc, gcc, clang on PATH."""
    return _find_compiler(os.environ.get("CC", "").strip(), os.environ.get("PATH", ""))


@lru_cache(maxsize=8)
def _find_compiler(env: str, path: str) -> tuple[str, ...] | None:
    del path  # part of the cache key: shutil.which searches it
    if env:
        argv = shlex.split(env)
        return tuple(argv) if argv and shutil.which(argv[0]) else None
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return (found,)
    return None


@lru_cache(maxsize=8)
def compiler_version(cc: tuple[str, ...]) -> str:
    """Output of ``cc --version`` (part of every build key); raises OSError if it does not run."""
    done = subprocess.run([*cc, "--version"], capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise OSError(f"{' '.join(cc)} --version failed: {done.stderr.strip()}")
    return done.stdout.strip()


@lru_cache(maxsize=8)
def openmp_flags(cc: tuple[str, ...]) -> tuple[str, ...]:
    """("-fopenmp",) when the compiler builds an OpenMP shared object, else () with a warning."""
    source = "#include <omp.h>\nint hal_omp_probe(void) { return omp_get_max_threads(); }\n"
    with tempfile.TemporaryDirectory(prefix="hal-omp-") as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text(source)
        cmd = [*cc, "-fopenmp", "-shared", "-fPIC", "-o", str(Path(tmp) / "probe.so"), str(src)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        except OSError:
            return ()
    if done.returncode == 0:
        return ("-fopenmp",)
    warnings.warn(f"cpu: {' '.join(cc)} cannot build OpenMP code; kernels run on one thread", stacklevel=2)
    return ()


def _hal_version() -> str:
    try:
        from importlib.metadata import version

        return version("hal-kernels")
    except Exception:  # not installed (a source checkout on sys.path)
        return "0+unknown"


_LIBS: dict[tuple[object, ...], ctypes.CDLL] = {}
_LIB_LOCK = threading.Lock()


def build_flags(isa: str, cc: tuple[str, ...]) -> list[str]:
    """Compiler options of one ISA path (without defines)."""
    return ["-O3", *ISA_FLAGS[isa], *openmp_flags(cc), "-shared", "-fPIC", "-std=gnu11"]


def _compile(cc: tuple[str, ...], src: Path, out: Path, options: list[str], file: str,
             defines: Mapping[str, object]) -> None:
    cmd = [*cc, *options, "-I", str(src.parent), "-o", str(out), str(src), "-lm"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KernelCompileError("cpu", file, dict(defines), options, f"{' '.join(cmd)}\n{exc}") from exc
    if done.returncode != 0:
        raise KernelCompileError("cpu", file, dict(defines), options,
                                 f"{' '.join(cmd)}\n{done.stdout}{done.stderr}")


def load_kernel(file: str, defines: Mapping[str, int], isa: str) -> ctypes.CDLL:
    """The loaded library of ``kernels_c/<file>`` built with ``defines`` for ``isa`` (built once, cached)."""
    cc = find_compiler()
    if cc is None:
        raise KernelCompileError("cpu", file, dict(defines), [], "no C compiler found; install gcc or set CC")
    key = (file, tuple(sorted(defines.items())), isa, cc)
    lib = _LIBS.get(key)
    if lib is not None:
        return lib
    with _LIB_LOCK:
        lib = _LIBS.get(key)
        if lib is None:
            lib = _build_and_load(cc, file, defines, isa)
            for name in FILE_ENTRIES.get(file, ()):
                fn = getattr(lib, name)
                fn.argtypes = SIGNATURES[name]
                fn.restype = ctypes.c_int if name in _STATUS_ENTRIES else None
            lib.hal_set_num_threads.argtypes = [ctypes.c_int]
            lib.hal_set_num_threads.restype = None
            lib.hal_set_num_threads(num_threads())
            lib.hal_set_stream_threshold.argtypes = [ctypes.c_long]
            lib.hal_set_stream_threshold.restype = None
            lib.hal_set_stream_threshold(stream_threshold())
            _LIBS[key] = lib
    return lib


def _build_and_load(cc: tuple[str, ...], file: str, defines: Mapping[str, int], isa: str) -> ctypes.CDLL:
    folder = kernel_dir("kernels_c")
    src = folder / file
    define_flags = [f"-D{k}={v}" for k, v in sorted(defines.items())]
    macro = ISA_MACRO[isa]
    if macro:
        define_flags.append(f"-D{macro}=1")
    options = build_flags(isa, cc) + define_flags
    digest = hashlib.sha256()
    for part in (src.read_bytes(), *(h.read_bytes() for h in sorted(folder.glob("*.h")))):
        digest.update(part)
        digest.update(b"\0")
    for text in (" ".join(options), compiler_version(cc), _hal_version(), " ".join(cc)):
        digest.update(text.encode())
        digest.update(b"\0")
    name = f"{src.stem}-{isa}-{digest.hexdigest()[:32]}.so"
    all_defines = {**defines, **({macro: 1} if macro else {})}

    if cache_disabled():
        with tempfile.TemporaryDirectory(prefix="hal-c-") as tmp_dir:
            out = Path(tmp_dir) / name
            _compile(cc, src, out, options, file, all_defines)
            return ctypes.CDLL(str(out))  # the mapping outlives the deleted file

    out = cache_dir("c") / name
    if out.exists():
        try:
            return ctypes.CDLL(str(out))
        except OSError:  # a damaged cache entry: build it again
            out.unlink(missing_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{src.stem}-", suffix=".so.tmp", dir=out.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        _compile(cc, src, tmp, options, file, all_defines)
        os.replace(tmp, out)  # atomic: readers see no file or a whole one
    finally:
        tmp.unlink(missing_ok=True)
    return ctypes.CDLL(str(out))


# ----------------------------------------------------------------------------
# host memory
# ----------------------------------------------------------------------------


class HostPool:
    """Recycles large host buffers by exact size, as the GPU backends' memory pools do.

    A fresh multi-megabyte numpy array costs a page fault and a page of zeroes
    from the kernel per 4 KiB (or 2 MiB) on first touch: for an op that streams
    25 MB this is a quarter of its time, paid again on every call since every
    op allocates its output. A block is recycled when the buffer handed out
    over it is garbage-collected *and* nothing else references the block (a
    surviving view would raise its reference count: then it is left to numpy).
    At most ``limit`` bytes wait in the pool; ``HAL_CPU_POOL=0`` turns it off.
    """

    #: buffers smaller than this come straight from numpy
    MIN_BYTES = 1 << 20

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._free: dict[int, list[np.ndarray]] = {}
        self._held = 0
        self._lock = threading.Lock()
        self._baseline = self._calibrate()

    def _calibrate(self) -> int:
        """sys.getrefcount of an unreferenced block inside the finalizer (interpreter-specific)."""
        seen: list[int] = []
        raw = np.empty(64, dtype=np.uint8)
        view = raw[:32]
        weakref.finalize(view, lambda block: seen.append(sys.getrefcount(block)), raw)
        del raw, view
        return seen[0] if seen else -1

    def take(self, size: int) -> np.ndarray:
        """A block of ``size`` bytes, recycled when one is free."""
        if size >= self.MIN_BYTES:
            with self._lock:
                blocks = self._free.get(size)
                if blocks:
                    self._held -= size
                    return blocks.pop()
        return np.empty(size, dtype=np.uint8)

    def watch(self, buffer: np.ndarray, block: np.ndarray) -> None:
        """Give ``block`` back when ``buffer`` (a view of it) dies."""
        if block.nbytes >= self.MIN_BYTES and self.limit > 0:
            weakref.finalize(buffer, self._give, block).atexit = False  # nothing to recycle at exit

    def _give(self, block: np.ndarray) -> None:
        # the finalizer's own references: its argument tuple, this frame, getrefcount's argument
        if sys.getrefcount(block) > self._baseline:
            return  # something still points into the block
        with self._lock:
            if self._held + block.nbytes <= self.limit:
                self._free.setdefault(block.nbytes, []).append(block)
                self._held += block.nbytes

    def clear(self) -> None:
        """Drop every pooled block."""
        with self._lock:
            self._free.clear()
            self._held = 0


@lru_cache(maxsize=1)
def host_pool() -> HostPool:
    """The process's pool: up to min(1 GiB, MemTotal / 8), or nothing with HAL_CPU_POOL=0."""
    off = os.environ.get("HAL_CPU_POOL", "").strip().lower() in ("0", "off", "false", "no")
    total = _mem_total()
    return HostPool(0 if off else min(1 << 30, total // 8 if total else 1 << 28))


# ----------------------------------------------------------------------------
# schemas
# ----------------------------------------------------------------------------


def _conv_register_tile(params: Mapping[str, int], device: DeviceInfo) -> str | None:
    """The CO_BLOCK x W_BLOCK accumulator tile must fit the vector registers (with room for operands)."""
    regs = VECTOR_REGISTERS.get(ISA_OF_ARCH.get(device.arch, "generic"), 16)
    limit = regs - 4
    tile = params["CO_BLOCK"] * params["W_BLOCK"]
    if tile > limit:
        return f"CO_BLOCK*W_BLOCK = {tile} accumulators exceed the {limit} the {regs} vector registers leave"
    return None


_SCHEMAS: dict[str, KernelSchema] = {
    "pool2d": KernelSchema(
        "cpu",
        "pool2d",
        (
            Param("W_BLOCK", (1, 2, 4), 2, "NCHW: output vectors computed per step along W"),
            Param("C_BLOCK", (1, 2, 4), 2, "NHWC: channel vectors computed per step"),
        ),
    ),
    "adaptive_pool2d": KernelSchema(
        "cpu",
        "adaptive_pool2d",
        (
            Param("W_BLOCK", (1, 2, 4), 2, "NCHW: input vectors per step of the column (H) pass"),
            Param("C_BLOCK", (1, 2, 4), 2, "NHWC: channel vectors computed per step"),
        ),
    ),
    "conv2d": KernelSchema(
        "cpu",
        "conv2d",
        (
            Param("CO_BLOCK", (1, 2, 3, 4, 6, 8, 12, 16), 4,
                  "register tile height: NCHW output channels, NHWC output-channel vectors"),
            Param("W_BLOCK", (1, 2, 3, 4, 6, 8), 2,
                  "register tile width: NCHW output vectors along W, NHWC output pixels"),
        ),
        (_conv_register_tile,),
    ),
    "batch_norm": KernelSchema(
        "cpu",
        "batch_norm",
        (
            Param("CHUNK", (1024, 2048, 4096, 8192, 16384), 4096,
                  "values per statistics chunk (two passes over a cached chunk, chunks merged with Chan's formula)"),
            Param("ACC", (1, 2, 4), 2, "independent vector accumulators per reduction"),
        ),
    ),
    "eltwise": KernelSchema("cpu", "eltwise", (Param("UNROLL", (1, 2, 4, 8), 4, "vectors per step"),)),
    # portable C, one output element per step: nothing to tune yet
    "qconv2d": KernelSchema("cpu", "qconv2d", ()),
}


# ----------------------------------------------------------------------------
# the backend
# ----------------------------------------------------------------------------


def _ptr(buffer: Buffer | None) -> int | None:
    """The address of a buffer's first byte (None for None)."""
    if buffer is None:
        return None
    try:  # three times faster than ndarray.ctypes.data, which matters for small ops
        return ctypes.addressof(ctypes.c_char.from_buffer(buffer))
    except (TypeError, ValueError):  # read-only or empty arrays
        return int(buffer.ctypes.data)


def _conv_scratch_bytes(spec: Conv2dSpec) -> int:
    """The bytes of conv2d.c's float scratch copy of one image (NCHW: the stride phases some tap reads of the
    padded planes; NHWC: the padded image, without the junk columns a partial tile may add), for
    OutOfMemory's message."""
    (kh, kw), (sh, sw), (dh, dw) = spec.kernel, spec.stride, spec.dilation
    if spec.layout == "NCHW":
        phases = len({(i * dh) % sh for i in range(kh)}) * len({(j * dw) % sw for j in range(kw)})
        plane = (spec.out_h + (kh - 1) * dh // sh) * (spec.out_w + (kw - 1) * dw // sw)
        return 4 * spec.c_in * phases * plane
    return 4 * spec.c_in * ((spec.out_h - 1) * sh + (kh - 1) * dh + 1) * ((spec.out_w - 1) * sw + (kw - 1) * dw + 1)


def _need(buffer: Buffer, nbytes: int, what: str) -> None:
    if buffer.nbytes < nbytes:
        raise HalValueError(f"{what}: buffer holds {buffer.nbytes} bytes, the kernel needs {nbytes}")


def _f32(buffer: Buffer, count: int) -> np.ndarray:
    """A float32 view of the first ``count`` elements of a buffer (writes go to the buffer)."""
    return np.asarray(buffer).reshape(-1).view(np.uint8)[: 4 * count].view(np.float32)


class CpuBackend(Backend):
    """C kernels with AVX2/AVX-512 intrinsics (portable C elsewhere), OpenMP threads, numpy buffers."""

    name = "cpu"
    kernel_folder = "kernels_c"
    #: every output store of pool2d, adaptive_pool2d, conv2d and batch_norm applies
    #: ``spec.relu`` (kernels built with -DFUSE_RELU=1)
    fused_relu = True
    #: int8/uint8 pooling and QLinearConv / ConvInteger in portable C (qpool2d.c, qconv2d.c)
    quantized_pooling = True
    quantized_conv = True
    #: bfloat16 activations in every float kernel: 16-bit storage, float32 arithmetic
    #: (-DDTYPE_BF16=1; conversions in kernels_c/hal_prelude.h)
    bfloat16 = True

    def __init__(self, info: DeviceInfo) -> None:
        super().__init__(info)
        self._libs: dict[tuple[object, ...], ctypes.CDLL] = {}
        isa = ISA_OF_ARCH.get(info.arch, "generic")
        best = detected_isa()
        if ISAS.index(isa) < ISAS.index(best):
            warnings.warn(f"cpu: device arch {info.arch} needs {isa}, which this CPU lacks; using {best}", stacklevel=2)
            isa = best
        self.isa = isa

    # -- discovery -------------------------------------------------------------------
    @classmethod
    def probe(cls) -> BackendProbe:
        """One device, the host CPU, when a C compiler is found."""
        try:
            cc = find_compiler()
            if cc is None:
                hint = "CC does not name a runnable compiler" if os.environ.get("CC") else "no cc, gcc or clang on PATH"
                return BackendProbe(False, f"cpu: no C compiler found ({hint}); apt-get install gcc, or set CC")
            try:
                version = compiler_version(cc)
            except (OSError, subprocess.SubprocessError) as exc:
                return BackendProbe(False, f"cpu: the C compiler does not run ({exc}); apt-get install gcc, or set CC")
            isa = effective_isa()
            info = DeviceInfo(
                backend="cpu",
                index=0,
                name=_model_name(),
                vendor=_vendor(),
                arch_family="x86" if _is_x86() else platform.machine().lower(),
                arch=ARCH_OF_ISA[isa],
                compute_units=os.cpu_count() or 1,
                max_work_group=1,
                local_mem_bytes=_l2_bytes(),
                global_mem_bytes=_mem_total(),
                fp16=False,
                subgroup=VECTOR_FLOATS[isa],
                platform=platform.machine(),
                driver=version.splitlines()[0] if version else " ".join(cc),
                extras=(
                    ("isa", isa),
                    ("isa_detected", detected_isa()),
                    ("compiler", " ".join(cc)),
                    ("threads", str(num_threads() or "openmp default")),
                ),
            )
            return BackendProbe(True, f"cpu: {info.name}, {isa} kernels built by {' '.join(cc)}", (info,))
        except Exception as exc:  # probe never raises
            return BackendProbe(False, f"cpu: probing failed ({type(exc).__name__}: {exc})")

    @classmethod
    def schemas(cls) -> Mapping[str, KernelSchema]:
        """Register tiles, vector blocks and BatchNorm chunking, all -D macros of kernels_c."""
        return dict(_SCHEMAS)

    # -- runtime ---------------------------------------------------------------------
    def allocate(self, nbytes: int) -> Buffer:
        """A 64-byte aligned, uninitialised uint8 array of ``nbytes`` (large ones recycled, see HostPool)."""
        nbytes = int(nbytes)
        pool = host_pool()
        try:
            raw = pool.take(nbytes + 64)
        except (MemoryError, ValueError) as exc:  # ValueError: past numpy's largest array
            pool.clear()
            raise OutOfMemory(self.info.id, nbytes, "host memory") from exc
        offset = (-raw.ctypes.data) % 64
        buffer = raw[offset : offset + nbytes]
        pool.watch(buffer, raw)
        return buffer

    def pointer(self, buffer: Buffer) -> int:
        """The host address of ``buffer`` (for DLPack exports)."""
        return int(buffer.ctypes.data)

    def upload(self, array: np.ndarray) -> Buffer:
        """A new buffer holding a copy of ``array``'s bytes."""
        src = np.ascontiguousarray(array)
        buf = self.allocate(src.nbytes)
        if src.nbytes:
            buf[:] = src.reshape(-1).view(np.uint8)
        return buf

    def download(self, buffer: Buffer, out: np.ndarray) -> None:
        """Copy ``out.nbytes`` bytes of ``buffer`` into ``out``."""
        if out.nbytes:
            out.reshape(-1).view(np.uint8)[:] = np.asarray(buffer).reshape(-1).view(np.uint8)[: out.nbytes]

    def copy(self, src: Buffer, dst: Buffer, nbytes: int) -> None:
        """Copy ``nbytes`` bytes from ``src`` to ``dst``."""
        if nbytes:
            d = np.asarray(dst).reshape(-1).view(np.uint8)
            d[:nbytes] = np.asarray(src).reshape(-1).view(np.uint8)[:nbytes]

    def synchronize(self) -> None:
        """Nothing to wait for: every launch returns when its work is done."""

    # -- kernels ---------------------------------------------------------------------
    def _lib(self, kernel: str, file: str, dtype: np.dtype, layout: str, params: Mapping[str, int],
             relu: bool = False) -> ctypes.CDLL:
        names = LAYOUT_PARAMS[(kernel, layout)]
        fast = (kernel, np.dtype(dtype).num, layout, relu, *(params.get(n) for n in names))
        lib = self._libs.get(fast)
        if lib is not None:
            return lib
        defaults = _SCHEMAS[kernel].defaults()
        defines: dict[str, int] = {
            "DTYPE_HALF": int(np.dtype(dtype) == np.float16),
            "LAYOUT_NHWC": int(layout == "NHWC"),
        }
        if is_bfloat16(dtype):  # absent means 0: float32/float16 builds keep their cache keys
            defines["DTYPE_BF16"] = 1
        if relu:  # absent means 0: unfused builds keep their cache keys
            defines["FUSE_RELU"] = 1
        for name in names:
            defines[name] = int(params.get(name, defaults[name]))
        lib = self._libs[fast] = load_kernel(file, defines, self.isa)
        return lib

    def _qlib(self, file: str, defines: Mapping[str, int]) -> ctypes.CDLL:
        """The int8/uint8 kernels (portable C, no tunable parameters)."""
        key = (file, tuple(sorted(defines.items())))
        lib = self._libs.get(key)
        if lib is None:
            lib = self._libs[key] = load_kernel(file, defines, self.isa)
        return lib

    def pool2d(
        self, spec: Pool2dSpec, x: Buffer, y: Buffer, indices: Buffer | None, params: Mapping[str, int]
    ) -> None:
        """Max or average pooling (pool2d_max / pool2d_avg; int8/uint8 specs: qpool2d_max / qpool2d_avg)."""
        quant = np.dtype(spec.dtype) in QUANT_DTYPES
        if quant:
            lib = self._qlib("qpool2d.c", {"DTYPE_UINT8": int(np.dtype(spec.dtype) == np.uint8),
                                           "LAYOUT_NHWC": int(spec.layout == "NHWC")})
        else:
            lib = self._lib("pool2d", "pool2d.c", spec.dtype, spec.layout, params, spec.relu)
        item = spec.dtype.itemsize
        _need(x, spec.n * spec.c * spec.in_h * spec.in_w * item, "x")
        out_count = spec.n * spec.c * spec.out_h * spec.out_w
        _need(y, out_count * item, "y")
        idx = indices if spec.kind == "max" else None
        if idx is not None:
            _need(idx, out_count * 8, "indices")
        pt, pb, pl, pr = spec.pads
        args = [_ptr(x), _ptr(y), _ptr(idx), spec.n, spec.c, spec.in_h, spec.in_w, spec.out_h, spec.out_w,
                spec.kernel[0], spec.kernel[1], spec.stride[0], spec.stride[1], pt, pb, pl, pr,
                spec.dilation[0], spec.dilation[1], spec.divisor or 0, int(spec.count_include_pad)]
        if quant:
            (lib.qpool2d_max if spec.kind == "max" else lib.qpool2d_avg)(*args, spec.zero_point)
        else:
            (lib.pool2d_max if spec.kind == "max" else lib.pool2d_avg)(*args)

    def adaptive_pool2d(
        self,
        spec: AdaptivePool2dSpec,
        x: Buffer,
        y: Buffer,
        indices: Buffer | None,
        params: Mapping[str, int],
    ) -> None:
        """Adaptive max or average pooling (adaptive_pool2d_max / adaptive_pool2d_avg)."""
        lib = self._lib("adaptive_pool2d", "adaptive_pool2d.c", spec.dtype, spec.layout, params, spec.relu)
        item = spec.dtype.itemsize
        _need(x, spec.n * spec.c * spec.in_h * spec.in_w * item, "x")
        out_count = spec.n * spec.c * spec.out_h * spec.out_w
        _need(y, out_count * item, "y")
        idx = indices if spec.kind == "max" else None
        if idx is not None:
            _need(idx, out_count * 8, "indices")
        fn = lib.adaptive_pool2d_max if spec.kind == "max" else lib.adaptive_pool2d_avg
        fn(_ptr(x), _ptr(y), _ptr(idx), spec.n, spec.c, spec.in_h, spec.in_w, spec.out_h, spec.out_w)

    def conv2d(
        self,
        spec: Conv2dSpec,
        x: Buffer,
        weight: Buffer,
        bias: Buffer | None,
        y: Buffer,
        params: Mapping[str, int],
    ) -> None:
        """Direct convolution with a register tile (conv2d)."""
        lib = self._lib("conv2d", "conv2d.c", spec.dtype, spec.layout, params, spec.relu)
        item = spec.dtype.itemsize
        _need(x, spec.n * spec.c_in * spec.in_h * spec.in_w * item, "x")
        _need(weight, int(np.prod(spec.weight_shape)) * item, "weight")
        _need(y, spec.n * spec.c_out * spec.out_h * spec.out_w * item, "y")
        if bias is not None:
            _need(bias, spec.c_out * 4, "bias")
        pt, _, pl, _ = spec.pads
        failed = lib.conv2d(_ptr(x), _ptr(weight), _ptr(bias), _ptr(y), spec.n, spec.c_in, spec.in_h, spec.in_w,
                            spec.c_out, spec.out_h, spec.out_w, spec.kernel[0], spec.kernel[1], spec.stride[0],
                            spec.stride[1], pt, pl, spec.dilation[0], spec.dilation[1], spec.groups)
        if failed:  # the kernel's scratch (a padded float copy of the input) could not be allocated
            raise OutOfMemory(self.info.id, _conv_scratch_bytes(spec), "host memory for conv2d's padded input copy")

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
        """Quantized conv (QLinearConv, or ConvInteger when ``multiplier`` is None), direct."""
        conv = spec.conv
        out = np.dtype(spec.out_dtype)
        y_kind = self.qconv_output_kind(spec, multiplier)
        lib = self._qlib("qconv2d.c", {"DTYPE_UINT8": int(np.dtype(conv.dtype) == np.uint8),
                                       "W_UINT8": int(np.dtype(spec.w_dtype) == np.uint8), "Y_KIND": y_kind,
                                       "LAYOUT_NHWC": int(conv.layout == "NHWC")})
        _need(x, conv.n * conv.c_in * conv.in_h * conv.in_w, "x")
        _need(weight, int(np.prod(conv.weight_shape)), "weight")
        _need(y, conv.n * conv.c_out * conv.out_h * conv.out_w * out.itemsize, "y")
        _need(w_zero_point, conv.c_out * 4, "w_zero_point")
        if bias is not None:
            _need(bias, conv.c_out * 4, "bias")
        if multiplier is not None:
            _need(multiplier, conv.c_out * 4, "multiplier")
        pt, _, pl, _ = conv.pads
        lib.qconv2d(_ptr(x), _ptr(weight), _ptr(bias), _ptr(y), _ptr(w_zero_point), _ptr(multiplier), conv.n,
                    conv.c_in, conv.in_h, conv.in_w, conv.c_out, conv.out_h, conv.out_w, conv.kernel[0],
                    conv.kernel[1], conv.stride[0], conv.stride[1], pt, pl, conv.dilation[0], conv.dilation[1],
                    conv.groups, spec.x_zero_point, spec.y_zero_point)

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
        """BatchNorm: batch_norm_stats (training) then batch_norm_apply.

        Only the per-channel vectors (C values) are computed here with numpy: the
        scale, the shift and the running-statistics update.
        """
        lib = self._lib("batch_norm", "batch_norm.c", spec.dtype, spec.layout, params, spec.relu)
        n, c, hw = spec.n, spec.c, spec.h * spec.w
        _need(x, n * c * hw * spec.dtype.itemsize, "x")
        _need(y, n * c * hw * spec.dtype.itemsize, "y")
        for buf, what in ((weight, "weight"), (bias, "bias"), (running_mean, "running_mean"),
                          (running_var, "running_var")):
            if buf is not None:
                _need(buf, c * 4, what)
        if spec.training:
            mean = np.empty(c, dtype=np.float64)
            var = np.empty(c, dtype=np.float64)
            lib.batch_norm_stats(_ptr(x), mean.ctypes.data, var.ctypes.data, n, c, hw, None)
            if running_mean is not None and running_var is not None:
                m, count = spec.momentum, spec.count
                rm, rv = _f32(running_mean, c), _f32(running_var, c)
                rm[:] = (1.0 - m) * rm.astype(np.float64) + m * mean
                rv[:] = (1.0 - m) * rv.astype(np.float64) + m * var * (count / (count - 1))
        else:
            if running_mean is None or running_var is None:
                raise HalValueError("running_mean: required (with running_var) when training=False")
            mean = _f32(running_mean, c).astype(np.float64)
            var = _f32(running_var, c).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            scale = 1.0 / np.sqrt(var + spec.eps)
        if weight is not None:
            scale = scale * _f32(weight, c)
        shift = _f32(bias, c).astype(np.float32) if bias is not None else np.zeros(c, dtype=np.float32)
        scale32 = scale.astype(np.float32)
        hi = mean.astype(np.float32)
        lo = (mean - hi.astype(np.float64)).astype(np.float32)
        lib.batch_norm_apply(_ptr(x), _ptr(y), scale32.ctypes.data, shift.ctypes.data, n, c, hw,
                             hi.ctypes.data, lo.ctypes.data)

    def eltwise(self, spec: EltwiseSpec, x: Buffer, y: Buffer, params: Mapping[str, int]) -> None:
        """Elementwise ReLU over ``spec.count`` elements (x and y may be the same buffer)."""
        if spec.op != "relu":
            raise HalValueError(f"eltwise: unknown op {spec.op!r}")
        lib = self._lib("eltwise", "eltwise.c", spec.dtype, "NCHW", params, relu=True)
        _need(x, spec.count * spec.dtype.itemsize, "x")
        _need(y, spec.count * spec.dtype.itemsize, "y")
        lib.eltwise_relu(_ptr(x), _ptr(y), spec.count)


BACKEND = CpuBackend
