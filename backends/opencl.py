"""The OpenCL backend: PyOpenCL runtime and the kernels in ``kernels_cl/``.

Devices are numbered across all platforms in platform order (``opencl:0``,
``opencl:1``, ...). Each device gets one context, one in-order queue and one
``pyopencl.tools.MemoryPool``; programs are built from the prelude
``hal_prelude.h`` plus one kernel file, with dtype, layout and tuning parameters
as ``-D`` macros and shapes as runtime arguments, so one build serves every shape.
int8/uint8 programs (``qpool2d.cl``, ``qpool2d_pack.cl``, ``qconv2d.cl``) get ``hal_quant.h`` after the prelude
and ``-DDTYPE_INT8=1`` or ``-DDTYPE_UINT8=1``; float builds see neither. bfloat16 programs get
``-DDTYPE_BF16=1`` (16-bit words, float arithmetic; the prelude's integer conversions), float32
and float16 builds no DTYPE_BF16 at all.
Built programs are cached in memory per (file, sorted defines); on disk PyOpenCL's
binary cache (or the driver's own, for PoCL and NVIDIA) keeps them across runs,
under ``HAL_CACHE_DIR``; ``HAL_DISABLE_CACHE`` turns both off.

``HAL_OPENCL_PROFILE`` (``amd-gcn``, ``amd-rdna``, ``mali-bifrost``, ``mali-valhall``,
``adreno6xx``, ``nvidia``, ``pocl``, ... see :data:`PROFILES`) makes every OpenCL
device report that profile's vendor and architecture, so the tuning tables serve
that profile's parameters on the device at hand. This is emulation: the limits
(work-group size, local memory, fp16) stay the real device's, so every launch
stays legal, and nothing about speed on the emulated hardware is learnt from it.
"""

from __future__ import annotations

import math
import os
import re
import threading
import warnings
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np

from hal.backends.base import Backend, BackendProbe, Buffer, DeviceInfo, fixed_plane_ok
from hal.cache import cache_dir, cache_disabled
from hal.dtypes import is_bfloat16, transferable
from hal.errors import BackendUnavailable, HalError, KernelCompileError, LaunchLimitExceeded, OutOfMemory
from hal.resources import kernel_source
from hal.spec import AdaptivePool2dSpec, BatchNormSpec, Conv2dSpec, EltwiseSpec, Pool2dSpec, QConv2dSpec
from hal.tuning.schema import KernelSchema, Param

FOLDER = "kernels_cl"
PRELUDE = "hal_prelude.h"
#: int8/uint8 helpers, prepended after the prelude for quantized builds only (the float
#: programs' text, and so every cache entry for them, stays as it was)
QUANT_HEADER = "hal_quant.h"
QUANT_DTYPES = (np.dtype(np.int8), np.dtype(np.uint8))

NO_PYOPENCL = "opencl: pyopencl is not installed; pip install 'hal-kernels[opencl]'"
NO_PLATFORM = (
    "opencl: no OpenCL platform found; pip install pocl-binary-distribution or apt-get install pocl-opencl-icd"
)

#: HAL_OPENCL_PROFILE name -> (vendor, arch_family, arch) reported for tuning.
PROFILES: dict[str, tuple[str, str, str]] = {
    "amd-gcn": ("amd", "gcn", "gfx906"),
    "amd-cdna": ("amd", "cdna", "gfx90a"),
    "amd-rdna": ("amd", "rdna", "gfx1030"),
    "mali-midgard": ("arm", "mali", "midgard"),
    "mali-bifrost": ("arm", "mali", "bifrost"),
    "mali-valhall": ("arm", "mali", "valhall"),
    "adreno5xx": ("qualcomm", "adreno", "adreno5xx"),
    "adreno6xx": ("qualcomm", "adreno", "adreno6xx"),
    "adreno7xx": ("qualcomm", "adreno", "adreno7xx"),
    "intel-gen9": ("intel", "intel-gpu", "gen9"),
    "intel-xe": ("intel", "intel-gpu", "xe"),
    "nvidia": ("nvidia", "hopper", "sm_90"),
    "pocl": ("pocl", "cpu", "pocl-cpu"),
}

_NV_FAMILIES: dict[int, str] = {3: "kepler", 5: "maxwell", 6: "pascal", 7: "volta", 8: "ampere", 9: "hopper",
                                10: "blackwell", 11: "blackwell", 12: "blackwell"}
_MALI_BIFROST = {31, 51, 52, 71, 72, 76}
_MALI_VALHALL = {57, 68, 77, 78, 310, 510, 610, 615, 710, 715}
_MALI_GEN5 = {620, 625, 720, 725, 925}
_AMD_GCN_NAMES = ("tahiti", "pitcairn", "hawaii", "tonga", "fiji", "ellesmere", "baffin", "polaris", "vega")


# ----------------------------------------------------------------------------
# device recognition (pure functions: testable without a device)
# ----------------------------------------------------------------------------


def _amd_family(gfx: str) -> str:
    digits = gfx[3:]
    if len(digits) >= 4 and digits[:2] in ("10", "11", "12"):
        return "rdna"
    if digits.startswith(("908", "90a", "94", "95")):
        return "cdna"
    return "gcn"


def _nvidia_family(cc: tuple[int, int]) -> str:
    if cc == (7, 5):
        return "turing"
    if cc == (8, 9):
        return "ada"
    return _NV_FAMILIES.get(cc[0], "nvidia")


def _mali_arch(name: str) -> str:
    m = re.search(r"(?:mali|immortalis)[-\s]*([tg])(\d+)", name)
    if not m:
        return "mali"
    if m.group(1) == "t":
        return "midgard"
    num = int(m.group(2))
    if num in _MALI_BIFROST:
        return "bifrost"
    if num in _MALI_VALHALL:
        return "valhall"
    if num in _MALI_GEN5:
        return "gen5"
    return "valhall" if num >= 100 else "bifrost"


def is_pocl_platform(platform: str) -> bool:
    """Whether an OpenCL platform name is PoCL's."""
    p = platform.lower()
    return "portable computing language" in p or p.startswith("pocl")


def classify(
    platform: str,
    name: str,
    vendor: str,
    extensions: str = "",
    is_cpu: bool = False,
    board: str = "",
    nv_cc: tuple[int, int] | None = None,
) -> tuple[str, str, str]:
    """(vendor, arch_family, arch) of an OpenCL device from its names and extensions."""
    p, n, v, b = platform.lower(), name.lower(), vendor.lower(), board.lower()
    if is_pocl_platform(p) and is_cpu:
        return "pocl", "cpu", "pocl-cpu"
    if "nvidia" in v or "nvidia" in n or "cl_nv_device_attribute_query" in extensions:
        if nv_cc is not None:
            return "nvidia", _nvidia_family(nv_cc), f"sm_{nv_cc[0]}{nv_cc[1]}"
        return "nvidia", "nvidia", "nvidia"
    if "advanced micro devices" in v or re.search(r"\bamd\b", v) or "gfx" in n or "gfx" in b:
        if is_cpu:
            return "amd", "cpu", "x86"
        gfx = re.search(r"gfx[0-9a-f]+", n) or re.search(r"gfx[0-9a-f]+", b)
        if gfx:
            return "amd", _amd_family(gfx.group(0)), gfx.group(0)
        if "navi" in n or "navi" in b:
            return "amd", "rdna", "rdna"
        if any(code in n or code in b for code in _AMD_GCN_NAMES):
            return "amd", "gcn", "gcn"
        return "amd", "amd", "amd"
    if "mali" in n or "immortalis" in n or re.search(r"\barm\b", v):
        return "arm", "mali", _mali_arch(n)
    if "adreno" in n or "qualcomm" in v:
        m = re.search(r"adreno\D*(\d)\d\d", n)
        return "qualcomm", "adreno", f"adreno{m.group(1)}xx" if m else "adreno"
    if "intel" in v or "intel" in n:
        if is_cpu:
            return "intel", "cpu", "x86"
        if "data center gpu max" in n:
            return "intel", "intel-gpu", "xe-hpc"
        if "arc" in n.split() or "arc(tm)" in n:
            return "intel", "intel-gpu", "xe-hpg"
        if "xe" in n or re.search(r"uhd graphics 7\d\d", n):
            return "intel", "intel-gpu", "xe"
        return "intel", "intel-gpu", "gen9"
    if is_pocl_platform(p):
        return "pocl", "pocl", "pocl"
    word = re.sub(r"[^a-z0-9]+", "-", v).strip("-") or "unknown"
    return word, "unknown", "unknown"


def _active_profile() -> tuple[str | None, str]:
    """(profile name or None, a note when HAL_OPENCL_PROFILE names no known profile)."""
    wanted = os.environ.get("HAL_OPENCL_PROFILE", "").strip().lower()
    if not wanted:
        return None, ""
    if wanted in PROFILES:
        return wanted, ""
    known = ", ".join(sorted(PROFILES))
    return None, f"HAL_OPENCL_PROFILE={wanted!r} is not a known profile ({known}); ignored"


# ----------------------------------------------------------------------------
# discovery
# ----------------------------------------------------------------------------

_enum_lock = threading.Lock()
_enumerated: list[tuple[Any, Any]] | None = None


def _apply_cache_env() -> None:
    """With HAL_DISABLE_CACHE, also switch off the drivers' own kernel caches (before they load)."""
    if cache_disabled():
        os.environ.setdefault("POCL_KERNEL_CACHE", "0")
        os.environ.setdefault("CUDA_CACHE_DISABLE", "1")


def _enumerate() -> list[tuple[Any, Any]]:
    """Every (platform, device) pair, platforms in order, devices in platform order."""
    global _enumerated
    with _enum_lock:
        if _enumerated is None:
            _apply_cache_env()
            import pyopencl as cl

            pairs: list[tuple[Any, Any]] = []
            try:
                platforms = cl.get_platforms()
            except cl.Error:
                platforms = []  # clGetPlatformIDs fails with PLATFORM_NOT_FOUND_KHR when no ICD is installed
            for platform in platforms:
                try:
                    devices = platform.get_devices()
                except cl.Error:
                    continue  # a platform with no devices raises DEVICE_NOT_FOUND
                pairs.extend((platform, d) for d in devices)
            _enumerated = pairs
        return _enumerated


#: the probe build: a PoCL whose LLVM predates the host CPU lists its device and then fails
#: every build ("unknown target CPU 'generic'": PyPI's PoCL 3.0, LLVM 14, on AMD Zen 5)
_PROBE_SOURCE = "__kernel void hal_probe(__global float* a) { a[get_global_id(0)] = 1.0f; }"


def _pocl_cannot_build(device: Any) -> str:
    """Why a PoCL device cannot build a one-line kernel ("" when it can): such a device is
    left out of the device list, with the reason in the backend's status, instead of failing
    every op later."""
    import pyopencl as cl

    try:
        cl.Program(cl.Context([device]), _PROBE_SOURCE).build()
    except cl.Error as exc:
        log = " ".join(str(exc).split())
        found = re.search(r"error: .*?(?= Device |$)", log)  # the build log's first error, else the whole message
        why = found.group(0)[:160] if found else log[-200:] or type(exc).__name__
        hint = ("; this PoCL's LLVM does not know the host CPU: install a newer PoCL "
                "(Debian/Ubuntu: apt-get install pocl-opencl-icd)" if "unknown target CPU" in log else "")
        return f"{str(device.name).strip()} cannot build a kernel: {why}{hint}"
    return ""


def _query(device: Any, attr: str, default: Any = None) -> Any:
    try:
        return getattr(device, attr)
    except Exception:  # attribute unsupported by this device or PyOpenCL version
        return default


def _describe(index: int, platform: Any, device: Any) -> DeviceInfo:
    import pyopencl as cl

    extensions = _query(device, "extensions", "") or ""
    dtype = int(_query(device, "type", 0) or 0)
    is_cpu = bool(dtype & cl.device_type.CPU)
    nv_cc = None
    if "cl_nv_device_attribute_query" in extensions:
        major = _query(device, "compute_capability_major_nv")
        minor = _query(device, "compute_capability_minor_nv")
        if major is not None and minor is not None:
            nv_cc = (int(major), int(minor))
    board = _query(device, "board_name_amd", "") if "cl_amd_device_attribute_query" in extensions else ""
    vendor, family, arch = classify(
        platform.name, device.name, device.vendor, extensions, is_cpu, board or "", nv_cc
    )
    if vendor == "nvidia":
        subgroup = int(_query(device, "warp_size_nv", 32) or 32)
    elif vendor == "amd" and not is_cpu:
        subgroup = int(_query(device, "wavefront_width_amd", 64) or 64)
    elif "cl_intel_subgroups" in extensions:
        sizes = _query(device, "sub_group_sizes_intel", None)
        subgroup = int(max(sizes)) if sizes else 1
    else:
        subgroup = 1
    item_sizes = _query(device, "max_work_item_sizes", None) or [device.max_work_group_size]
    max_wg = int(min(device.max_work_group_size, item_sizes[0]))
    kind = "CPU" if is_cpu else ("GPU" if dtype & cl.device_type.GPU else "ACCELERATOR")
    extras: list[tuple[str, str]] = [
        ("device_type", kind),
        ("opencl_version", str(device.version)),
        ("max_mem_alloc_bytes", str(int(device.max_mem_alloc_size))),
        ("cache_bytes", str(int(_query(device, "global_mem_cache_size", 0) or 0))),
    ]
    info = DeviceInfo(
        backend="opencl",
        index=index,
        name=str(device.name).strip(),
        vendor=vendor,
        arch_family=family,
        arch=arch,
        compute_units=int(device.max_compute_units),
        max_work_group=max_wg,
        local_mem_bytes=int(device.local_mem_size),
        global_mem_bytes=int(device.global_mem_size),
        fp16="cl_khr_fp16" in extensions,
        subgroup=subgroup,
        platform=str(platform.name).strip(),
        driver=str(device.driver_version).strip(),
        extras=tuple(extras),
    )
    profile, _ = _active_profile()
    if profile is not None:
        p_vendor, p_family, p_arch = PROFILES[profile]
        info = replace(
            info,
            vendor=p_vendor,
            arch_family=p_family,
            arch=p_arch,
            extras=(
                *info.extras,
                ("emulated_profile", profile),
                ("real_vendor", vendor),
                ("real_arch_family", family),
                ("real_arch", arch),
            ),
        )
    return info


# ----------------------------------------------------------------------------
# parameter schemas
# ----------------------------------------------------------------------------

WG_VALUES = (32, 64, 128, 256, 512, 1024)
BN_LANES = 16  # work-items across channels in the NHWC reductions (kernels' LANES)
#: BatchNorm statistics: work-items per compute unit the grid aims for on GPUs (a wave
#: every current GPU holds at once: NVIDIA sm_80/90 2048 per SM, AMD up to 2560 per CU).
#: Each keeps a batch of 16 values in flight (batch_norm.cl's BN_VALUES): on the H200,
#: 132 x 1024 x 64 bytes = 8.6 MB in float32, above the ~4 MB its bandwidth-latency product
#: needs; measured there (256x64x32x32, 2048 and 4096 per unit) more did not help.
BN_ITEMS_PER_CU = 1024
#: values each work-item of the statistics pass loads per batch (batch_norm.cl's BN_VALUES)
BN_VALUES = 16


def _bn_lanes(c: int, vec: int) -> int:
    """NHWC BatchNorm statistics: work-items across channels (batch_norm.cl's bn_lanes_log2)."""
    cv = -(-c // vec)
    lanes = 1
    while lanes < cv and lanes < BN_LANES:
        lanes *= 2
    return lanes


def _bn_segment(chunks: int, wg: int) -> int:
    """Work-items merging one channel's partials in batch_norm_finalize (bn_segment_log2)."""
    t = 1
    while t < chunks and t < wg:
        t *= 2
    return t


def _wg_limit(name: str) -> Callable[[Mapping[str, int], DeviceInfo], str | None]:
    def check(params: Mapping[str, int], device: DeviceInfo) -> str | None:
        if params[name] > device.max_work_group:
            return f"{name}={params[name]} exceeds the device's max work-group size {device.max_work_group}"
        return None

    return check


def _local_limit(
    what: str, nbytes: Callable[[Mapping[str, int]], int]
) -> Callable[[Mapping[str, int], DeviceInfo], str | None]:
    def check(params: Mapping[str, int], device: DeviceInfo) -> str | None:
        need = nbytes(params)
        if need > device.local_mem_bytes:
            return f"{what} needs {need} bytes of local memory, the device has {device.local_mem_bytes}"
        return None

    return check


def _needs_fp16(params: Mapping[str, int], device: DeviceInfo) -> str | None:
    if params.get("HALF_ARITH", 0) and not device.fp16:
        return "HALF_ARITH=1 needs cl_khr_fp16, which the device lacks"
    return None


def _gemm_wg(params: Mapping[str, int]) -> int:
    return (params["TILE"] // 4) ** 2


def _gemm_local(params: Mapping[str, int]) -> int:
    return 0 if params["ALGO"] == 1 else 2 * params["TK"] * (params["TILE"] + 1) * 4


def _gemm_wg_check(params: Mapping[str, int], device: DeviceInfo) -> str | None:
    if params["ALGO"] != 1 and _gemm_wg(params) > device.max_work_group:
        return (f"TILE={params['TILE']} needs work-groups of {_gemm_wg(params)}, above the device's "
                f"max {device.max_work_group}")
    return None


def _pool_local_bytes(params: Mapping[str, int]) -> int:
    """Local memory of one pool2d work-group (static __local arrays)."""
    if params["LOCAL_TILE"] == 1:
        return params["WG"] * 16 * 4
    return params["BAND_KB"] * 1024 if params["LOCAL_TILE"] == 2 else 0


def _pool_canonical(params: dict[str, int]) -> dict[str, int]:
    """BAND_KB matters only to LOCAL_TILE=2, INTERIOR only to LOCAL_TILE=0, STRIP_ROWS only
    to LOCAL_TILE=3 and QROWS16=1 (int8/uint8 row strips); LOCAL_TILE=3 always builds its
    window fixed, so FIXED_WINDOW does not matter to it (where the strips do not apply, the
    fallback then runs with the default)."""
    out = dict(params)
    if out["LOCAL_TILE"] != 2:
        out["BAND_KB"] = _BAND_KB.default
    if out["LOCAL_TILE"] != 0:
        out["INTERIOR"] = 0
    if out["LOCAL_TILE"] == 3:
        out["FIXED_WINDOW"] = _FIXED_WINDOW.default
    elif not out.get("QROWS16", 0):
        out["STRIP_ROWS"] = _STRIP_ROWS.default
    return out


#: BatchNorm inference with INFER_LOOP: work-groups per compute unit (each work-item then
#: loops over the vectors of its channels)
BN_LOOP_GROUPS_PER_CU = 8


def _bn_infer_loop(spec: BatchNormSpec, params: Mapping[str, int]) -> bool:
    """Whether batch_norm_infer runs its channel loop (INFER_LOOP): inference, NHWC, whole
    channel vectors (C % VEC == 0), and C / VEC dividing WG (so that the global size, a
    multiple of WG, keeps every work-item on the same channels)."""
    vec = params["VEC"]
    return bool(params["INFER_LOOP"] and not spec.training and spec.layout == "NHWC" and spec.c % vec == 0
                and params["WG"] % (spec.c // vec) == 0)


def _adaptive_canonical(params: dict[str, int]) -> dict[str, int]:
    """HALF_RAW changes only vector loads and stores: VEC 1 has none. PIPE_GROUPS only sizes
    the pipe kernels' launch, which MODE 0 and 4 may run; GVEC_U only the per-item kernels,
    which every MODE but 2 may run."""
    out = {**params, "HALF_RAW": 0} if params["VEC"] == 1 else dict(params)
    if out["MODE"] not in (0, 4):
        out["PIPE_GROUPS"] = 8
    if out["MODE"] == 2:  # the group kernels: no per-item walk
        out["GVEC_U"] = 0
    return out


def _strip_vec(params: Mapping[str, int], device: DeviceInfo) -> str | None:
    if params["LOCAL_TILE"] == 3 and params["VEC"] == 1:
        return "LOCAL_TILE=3 (row strips) needs VEC 4 or 8"
    return None


def program_source(file: str, defines: Mapping[str, int], read: Callable[[str], str] | None = None) -> str:
    """The text one build of ``file`` compiles: the prelude, the quantized header for int8/uint8
    builds, then the file, each behind a ``#line``; ``read`` (a file name -> its text) defaults to
    the shipped kernels (tools/restamp_proof.py passes another revision's)."""
    read = read or (lambda name: kernel_source(FOLDER, name))
    source = read(PRELUDE)
    if defines.get("DTYPE_INT8") or defines.get("DTYPE_UINT8"):
        source += f'\n#line 1 "{QUANT_HEADER}"\n' + read(QUANT_HEADER)
    return source + f'\n#line 1 "{file}"\n' + read(file)


def _conv_algo(spec: Conv2dSpec, p: Mapping[str, int]) -> int:
    """conv2d.cl's algorithm for ``spec``: ``ALGO``, or where it is 0 the implicit GEMM (2) for
    reductions of at least 32 with at least 16 output channels a group, else direct (1)."""
    kdim = spec.c_in // spec.groups * spec.kernel[0] * spec.kernel[1]
    return p["ALGO"] or (2 if kdim >= 32 and spec.c_out // spec.groups >= 16 else 1)


def _conv_build(algo: int, p: Mapping[str, int], base: dict[str, int]) -> tuple[dict[str, int], int]:
    """The -D set and work-group size of a conv build of ``algo`` under parameters ``p``."""
    if algo == 2:
        return {**base, "CONV_ALGO": 2, "TILE": p["TILE"], "TK": p["TK"]}, _gemm_wg(p)
    return {**base, "CONV_ALGO": 1, "WG": p["WG"], "VEC": p["VEC"]}, p["WG"]


def ptx_maxnan_ok(info: DeviceInfo) -> bool:
    """Whether pool2d.cl may take its index-free max as inline PTX ``max.NaN.f32``
    (HAL_PTX_MAXNAN): NVIDIA's own OpenCL (which compiles ``__asm__``) on sm_80 or later,
    and no emulated profile (emulation asks for the profile's code paths)."""
    if "emulated_profile" in dict(info.extras) or not info.platform.lower().startswith("nvidia"):
        return False
    arch = info.arch
    return arch.startswith("sm_") and arch[3:].isdigit() and int(arch[3:]) >= 80


#: the GVEC_U walk replaces MODE 0's work-group-per-output kernel for planes of 64 taps or
#: more only with this many (image, channel vector) work-items per compute unit
GVEC_MIN_ITEMS_PER_CU = 256


def ptx_u16x2_ok(info: DeviceInfo) -> bool:
    """Whether qpool2d.cl's 16-channel int8 max may reduce with inline PTX ``max.u16x2``
    (HAL_PTX_U16X2): as :func:`ptx_maxnan_ok`, on sm_90 or later (the instruction's first
    architecture)."""
    return ptx_maxnan_ok(info) and int(info.arch[3:]) >= 90


def _strip_applies(spec: Pool2dSpec, vec: int) -> bool:
    """Whether pool2d's LOCAL_TILE=3 path (aligned row strips) serves ``spec``: NCHW (float or
    int8/uint8), a 2x2 or 3x3 window of stride 2 and dilation 1, left pad 0 or 1, no indices, every input
    row starting VEC-aligned (IW % VEC == 0) and every index within int32."""
    k = spec.kernel[0]
    if (spec.layout != "NCHW" or spec.return_indices
            or spec.kernel != (k, k) or k not in (2, 3) or spec.stride != (2, 2) or spec.dilation != (1, 1)
            or spec.pads[2] not in (0, 1) or vec not in (4, 8) or spec.in_w % vec):
        return False
    planes = spec.n * spec.c
    items = planes * -(-spec.out_h // 2) * -(-2 * spec.out_w // vec)  # STRIP_ROWS 2 at most items
    return max(planes * spec.in_h * spec.in_w, planes * spec.out_h * spec.out_w, items) < 2**31


def _qrows16_applies(spec: Pool2dSpec) -> bool:
    """Whether qpool2d_pack.cl's NCHW row strips (QROWS16=1) serve ``spec``: int8/uint8 NCHW, a
    2x2 or 3x3 window of stride 2 and dilation 1, left pad 0 or 1, no indices, every input row
    starting at a multiple of 4 bytes (IW % 4 == 0: the rows load as aligned 32-bit words) and
    every index within int32."""
    k = spec.kernel[0]
    if (spec.layout != "NCHW" or np.dtype(spec.dtype) not in QUANT_DTYPES or spec.return_indices
            or spec.kernel != (k, k) or k not in (2, 3) or spec.stride != (2, 2) or spec.dilation != (1, 1)
            or spec.pads[2] not in (0, 1) or spec.in_w % 4):
        return False
    planes = spec.n * spec.c
    items = planes * -(-spec.out_h // 2) * -(-spec.out_w // 8)  # STRIP_ROWS 2 at most items
    return max(planes * spec.in_h * spec.in_w, planes * spec.out_h * spec.out_w, items) < 2**31


#: the pooling launcher's mode for qpool2d_pack.cl's NCHW strips (LOCAL_TILE's are 0 .. 3)
_QROWS16_MODE = 4
#: the packed int8/uint8 kernels (QROWS16=1 and 2, QVEC16=2, 3 and 4)
QPACK_FILE = "qpool2d_pack.cl"


def _qvec16_applies(spec: Pool2dSpec) -> bool:
    """Whether qpool2d.cl's 16-channel NHWC kernels (QVEC16=1) serve ``spec``: int8/uint8
    NHWC, a window built fixed (``_common_window``), max without indices."""
    return (spec.layout == "NHWC" and np.dtype(spec.dtype) in QUANT_DTYPES and not spec.return_indices
            and _common_window(spec))


def _common_window(spec: Pool2dSpec) -> bool:
    """Windows pool2d builds with the window fixed at compile time (FIXED_WINDOW=1): up to
    3x3, strides up to 2, no dilation -- the CNN pools, a bounded number of builds."""
    return max(spec.kernel) <= 3 and max(spec.stride) <= 2 and spec.dilation == (1, 1)


def _band_rows(spec: Pool2dSpec, elems: int) -> int:
    """Output rows per work-group of pool2d's LOCAL_TILE=2 path: the most whose input rows
    fit ``elems`` floats of local memory, 0 when not even one row's do."""
    kh, dh, sh = spec.kernel[0], spec.dilation[0], spec.stride[0]
    rows = elems // max(spec.in_w, 1)  # input rows that fit
    reach = (kh - 1) * dh + 1
    if rows < reach:
        return 0
    return min(spec.out_h, (rows - reach) // sh + 1)


#: flat adaptive pooling (MODE 3): staging capacity per work-item, in elements (the
#: launcher shrinks it to what the device's local memory holds), and the least it needs
FLAT_PER_ITEM = 64
FLAT_MIN_PER_ITEM = 4
#: local memory left unplanned: drivers add their own (NVIDIA's OpenCL 80 bytes here)
FLAT_SLACK = 1024
#: MODE 0 picks the flat mapping on GPUs for global pooling of planes of at most this many
#: elements (the largest measured; 20x20 still ran 1.3x faster than the group kernel) ...
FLAT_AUTO_PLANE = 400
#: ... when the staging buffer holds at least this many of them
FLAT_AUTO_MIN_PLANES = 8


def _flat_scratch(wg: int) -> int:
    """Bytes of the flat kernels' partial-result arrays (float value + int index per work-item)."""
    return wg * 8


def _adaptive_local(params: Mapping[str, int]) -> int:
    """Local memory adaptive pooling needs at least: the group reductions (MODE 0, 2, and 3,
    which falls back to MODE 0's choice where planes are too large or the layout is NHWC),
    and for MODE 3 the flat scratch, slack and a minimal float32 staging buffer (MODE 0
    sizes its buffer to the local memory left, or runs without one)."""
    mode, wg = params["MODE"], params["WG"]
    # MODE 4 runs as MODE 0 where its stage does not fit (the launcher checks per shape)
    group = 0 if mode == 1 else wg * params["VEC"] * 8
    flat = _flat_scratch(wg) + FLAT_SLACK + FLAT_MIN_PER_ITEM * wg * 4 + 4 * params["VEC"] if mode == 3 else 0
    return max(group, flat)


_WG = Param("WG", WG_VALUES, 64, "work-group size (1-D)")
_BAND_KB = Param("BAND_KB", (4, 8, 16, 32), 16, "pool2d LOCAL_TILE=2: local memory per group for the staged rows")
_STRIP_ROWS = Param("STRIP_ROWS", (2, 4), 4, "pool2d LOCAL_TILE=3: output rows per work-item")
_FIXED_WINDOW = Param("FIXED_WINDOW", (0, 1), 1,
                      "build windows up to 3x3, stride up to 2, with the window as compile-time constants")
_VEC = Param("VEC", (1, 4, 8), 4, "vector width: along W in NCHW, along C in NHWC")
_HALF = Param("HALF_ARITH", (0, 1), 0, "native half compares in max pooling (needs cl_khr_fp16; exact)")
_QVEC16 = Param("QVEC16", (0, 1, 2, 3, 4), 0,
                "int8/uint8 NHWC pooling, windows FIXED_WINDOW builds (up to 3x3, stride up to 2, no dilation), "
                "max without indices: 16 channels per work-item (one aligned 16-byte load per tap where "
                "C % 16 == 0), the window's loads issued before the reduction; 2: the same work mapping "
                "on packed 16-bit lanes (max without bias or masks, the average divided in integers, "
                "qpool2d_pack.cl); 3 and 4: 2 and 4 neighbouring output pixels per work-item on packed "
                "lanes, the shared input columns loaded once and reduced over the rows first, the "
                "average's divisor where it is the count of taps inside divided on 16-bit lane pairs "
                "(qpool2d_pack.cl); other specs as 0")
_QROWS16 = Param("QROWS16", (0, 1, 2), 0,
                 "int8/uint8 NCHW pooling, 2x2 and 3x3 windows of stride 2 (left pad 0 or 1, no dilation, "
                 "max without indices) where IW % 4 == 0: row strips of STRIP_ROWS output rows x 8 "
                 "outputs per work-item from one 16-byte vector per input row, bytes reduced as packed "
                 "16-bit lanes, the average divided in integers (qpool2d_pack.cl); 2: the same, the "
                 "average with every input row unpacked once and a divisor of K*K divided on 16-bit "
                 "lane pairs (max as 1); other specs as 0")
#: QVEC16 value -> output pixels per work-item of qpool2d_pack.cl's NHWC kernels (QP_PIX; 2: one)
_QVEC16_PIX = {3: 2, 4: 4}
_HALF_RAW = Param("HALF_RAW", (0, 1), 0,
                  "float16 vectors as raw 16-bit words (one ushortN access) converted through a private "
                  "copy, where vloada_halfN / vstorea_halfN may split into N accesses (NVIDIA)")

SCHEMAS: dict[str, KernelSchema] = {
    "pool2d": KernelSchema(
        "opencl",
        "pool2d",
        (
            _WG,
            _VEC,
            Param("LOCAL_TILE", (0, 1, 2, 3), 0,
                  "NCHW: 1 stages each group's 16-wide 2-D input window in local memory; 2 stages "
                  "row bands (contiguous, aligned 16-byte loads; float only); 3 = aligned row strips "
                  "without local memory (STRIP_ROWS x VEC/2 outputs per work-item, one aligned VEC "
                  "load per input row) for 2x2 and 3x3 windows of stride 2 without indices when "
                  "IW % VEC == 0, else the row bands (or the vector path)"),
            Param("INTERIOR", (0, 1), 0, "NCHW: a mask-free path for windows wholly inside the input"),
            _BAND_KB,
            _FIXED_WINDOW,
            _HALF,
            _STRIP_ROWS,
            _HALF_RAW,
            _QVEC16,
            _QROWS16,
        ),
        (
            _wg_limit("WG"),
            _local_limit("LOCAL_TILE", _pool_local_bytes),
            _needs_fp16,
            _strip_vec,
        ),
        canonical=_pool_canonical,
    ),
    "adaptive_pool2d": KernelSchema(
        "opencl",
        "adaptive_pool2d",
        (
            _WG,
            _VEC,
            Param("MODE", (0, 1, 2, 3, 4), 0,
                  "0 auto, 1 one work-item per output, 2 one work-group per output, "
                  "3 flat: whole NCHW planes staged in local memory, 4 pipe: NCHW global pooling "
                  "of small planes (size fixed at build time, the next planes' loads in flight "
                  "while these are reduced; elsewhere as 0; 0 picks it where it would pick flat)"),
            _HALF,
            _HALF_RAW,
            # 8: on the H200 (session 9 sweep, WG 128 VEC 4), 8 groups per SM ran float16 7x7
            # global pooling 9 % and float32 3 % faster than 4
            Param("PIPE_GROUPS", (2, 4, 8, 16), 8, "the pipe kernels (MODE 0 or 4): work-groups per compute unit"),
            Param("GVEC_U", (0, 4, 8, 16), 0,
                  "NHWC global pooling (no indices, C % VEC == 0) on the per-item kernel (MODE 1; MODE 0, 3 and 4 "
                  "take it too where the work-items fill the device): this many pixel loads in flight per work-item; "
                  "0 = off"),
        ),
        (
            _wg_limit("WG"),
            _local_limit("MODE (group reduction, flat staging)", _adaptive_local),
            _needs_fp16,
        ),
        canonical=_adaptive_canonical,
    ),
    "conv2d": KernelSchema(
        "opencl",
        "conv2d",
        (
            Param("ALGO", (0, 1, 2), 0, "0 auto, 1 direct, 2 implicit GEMM with local-memory tiles"),
            _WG,
            _VEC,
            Param("TILE", (16, 32, 64), 32, "GEMM output tile (work-group = TILE^2 / 16)"),
            Param("TK", (8, 16), 16, "GEMM reduction slice staged per step"),
        ),
        (_wg_limit("WG"), _gemm_wg_check, _local_limit("GEMM tiles", _gemm_local)),
    ),
    # conv2d's parameters and meaning; the GEMM tiles hold int (the same bytes as float)
    "qconv2d": KernelSchema(
        "opencl",
        "qconv2d",
        (
            Param("ALGO", (0, 1, 2), 0, "0 auto, 1 direct, 2 implicit GEMM with local-memory tiles (int4 dots)"),
            _WG,
            _VEC,
            Param("TILE", (16, 32, 64), 32, "GEMM output tile (work-group = TILE^2 / 16)"),
            Param("TK", (8, 16), 16, "GEMM reduction slice staged per step (a multiple of 4)"),
        ),
        (_wg_limit("WG"), _gemm_wg_check, _local_limit("GEMM tiles", _gemm_local)),
    ),
    "batch_norm": KernelSchema(
        "opencl",
        "batch_norm",
        (_WG, _VEC, _HALF_RAW,
         Param("INFER_LOOP", (0, 1), 0,
               "inference, NHWC: each work-item loops over vectors of the same VEC channels (their "
               "scale computed once), where C % VEC == 0 and C / VEC divides WG")),
        (_wg_limit("WG"), _local_limit("statistics reduction", lambda p: 4 * p["WG"] * (1 + 2 * p["VEC"]))),
    ),
    "eltwise": KernelSchema("opencl", "eltwise", (_WG, _VEC), (_wg_limit("WG"),)),
}


# ----------------------------------------------------------------------------
# per-device runtime (shared by every backend object of one device)
# ----------------------------------------------------------------------------


class _Runtime:
    """One device's context, in-order queue, memory pool and program cache."""

    def __init__(self, device: Any) -> None:
        import pyopencl as cl
        import pyopencl.tools as cl_tools

        self.device = device
        self.context = cl.Context([device])
        self.queue = cl.CommandQueue(self.context, device)
        self.pool = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(self.queue))
        #: HAL_OPENCL_EXACT_BUFFERS=1: every buffer its own allocation of exactly the bytes asked
        #: for, not a pool bin rounded up, so that a checking driver (Oclgrind) sees an access one
        #: element past a tensor's end; slower, for checking runs only
        self.exact_buffers = os.environ.get("HAL_OPENCL_EXACT_BUFFERS", "") not in ("", "0")
        self._profiling_queue: Any = None
        self.programs: dict[tuple[str, tuple[tuple[str, int], ...]], Any] = {}
        self.kernels: dict[tuple[Any, ...], Any] = {}
        #: id(kernel) -> kernel, for kernels whose scalar argument dtypes are declared
        self.typed_kernels: dict[int, Any] = {}
        self.lock = threading.RLock()
        self.max_alloc = int(device.max_mem_alloc_size)
        #: scratch buffers kept between calls (BatchNorm training's statistics), by name:
        #: (buffer, the bytes asked for)
        self.workspace: dict[str, tuple[Any, int]] = {}

    def profiling_queue(self) -> Any:
        """A second in-order queue with event profiling, made on first use.

        Kept apart from the main queue because profiling slows some drivers down (Mali
        serialises job chains); only ``time_launches`` uses it."""
        import pyopencl as cl

        if self._profiling_queue is None:
            self._profiling_queue = cl.CommandQueue(
                self.context, self.device, properties=cl.command_queue_properties.PROFILING_ENABLE
            )
        return self._profiling_queue


_runtimes: dict[int, _Runtime] = {}
_runtimes_lock = threading.Lock()


def _conv_geometry(spec: Conv2dSpec) -> list[Any]:
    """The int geometry arguments every conv kernel takes, in contract order."""
    return [_i32(v) for v in (spec.n, spec.c_in, spec.in_h, spec.in_w, spec.c_out, spec.out_h, spec.out_w,
                              *spec.kernel, *spec.stride, spec.pads[0], spec.pads[2], *spec.dilation, spec.groups)]


def _round_up(value: int, multiple: int) -> int:
    return max(multiple, -(-value // multiple) * multiple)


def _floor_allowed(values: Sequence[int], limit: int) -> int:
    fitting = [v for v in values if v <= limit]
    return max(fitting) if fitting else min(values)


class _TooLarge(Exception):
    """A built kernel accepts smaller work-groups than asked for."""


def _i32(value: int) -> np.int32:
    return np.int32(value)


class OpenCLBackend(Backend):
    """PyOpenCL runtime and launchers for one OpenCL device."""

    name: ClassVar[str] = "opencl"
    kernel_folder: ClassVar[str] = FOLDER
    fused_relu: ClassVar[bool] = True
    #: every float op builds for bfloat16 (-DDTYPE_BF16=1: ushort storage, float arithmetic)
    bfloat16: ClassVar[bool] = True
    quantized_pooling: ClassVar[bool] = True
    quantized_conv: ClassVar[bool] = True

    def __init__(self, info: DeviceInfo) -> None:
        """Open (or reuse) the device's context, queue and memory pool."""
        super().__init__(info)
        pairs = _enumerate()
        if not 0 <= info.index < len(pairs):
            raise BackendUnavailable(f"{info.id}: no such OpenCL device (found {len(pairs)})")
        _platform, device = pairs[info.index]
        if str(device.name).strip() != info.name:
            raise BackendUnavailable(f"{info.id}: device list changed ({device.name!r} != {info.name!r})")
        with _runtimes_lock:
            runtime = _runtimes.get(info.index)
            if runtime is None:
                runtime = _runtimes[info.index] = _Runtime(device)
        self._rt = runtime
        self._queue = runtime.queue  # the profiling queue while time_launches runs
        self._warned: set[str] = set()
        self._events: list[tuple[str, Any]] | None = None  # (name, event) while _profiled runs
        self._ptx_maxnan = ptx_maxnan_ok(info)
        self._ptx_u16x2 = ptx_u16x2_ok(info)

    # -- discovery -------------------------------------------------------------------
    @classmethod
    def probe(cls) -> BackendProbe:
        """Find OpenCL devices; never raises."""
        try:
            import pyopencl  # noqa: F401
        except Exception as exc:  # ImportError, or a broken ICD loader raising at import
            return BackendProbe(False, f"{NO_PYOPENCL} ({type(exc).__name__}: {exc})")
        try:
            pairs = _enumerate()
        except Exception as exc:
            return BackendProbe(False, f"{NO_PLATFORM} ({type(exc).__name__}: {exc})")
        if not pairs:
            return BackendProbe(False, NO_PLATFORM)
        infos = []
        skipped: dict[str, str] = {}
        for index, (platform, device) in enumerate(pairs):
            try:
                info = _describe(index, platform, device)
                broken = _pocl_cannot_build(device) if is_pocl_platform(str(platform.name)) else ""
            except Exception as exc:
                skipped[f"opencl:{index}"] = f"{type(exc).__name__}: {exc}"
                continue
            if broken:
                skipped[f"opencl:{index}"] = broken
            else:
                infos.append(info)
        problems = [f"{where} skipped ({why})" for where, why in skipped.items()]
        if not infos:
            return BackendProbe(False, f"opencl: no usable OpenCL device; {'; '.join(problems)}", (), skipped)
        _, note = _active_profile()
        profile = os.environ.get("HAL_OPENCL_PROFILE", "").strip().lower()
        parts = [f"opencl: {len(infos)} device(s)"]
        if profile and not note:
            parts.append(f"emulating profile {profile} for tuning (limits are the real devices')")
        if note:
            warnings.warn(f"hal opencl: {note}", stacklevel=2)
            parts.append(note)
        parts.extend(problems)
        return BackendProbe(True, "; ".join(parts), tuple(infos), skipped)

    @classmethod
    def schemas(cls) -> Mapping[str, KernelSchema]:
        """Tunable parameters of each kernel family (pool2d serves int8/uint8 pooling too)."""
        return SCHEMAS

    # -- runtime ---------------------------------------------------------------------
    def allocate(self, nbytes: int) -> Buffer:
        """A pooled device buffer of at least one byte; raises OutOfMemory."""
        import pyopencl as cl

        size = max(int(nbytes), 1)
        if size > self._rt.max_alloc:
            raise OutOfMemory(self.info.id, size, f"above CL_DEVICE_MAX_MEM_ALLOC_SIZE = {self._rt.max_alloc}")
        try:
            if self._rt.exact_buffers:
                return cl.Buffer(self._rt.context, cl.mem_flags.READ_WRITE, size)
            return self._rt.pool.allocate(size)
        except (cl.MemoryError, cl.RuntimeError, cl.LogicError) as exc:
            raise OutOfMemory(self.info.id, size, str(exc).strip()) from exc

    def _workspace(self, name: str, nbytes: int, zeroed: bool = False) -> Buffer:
        """The device's scratch buffer ``name`` of at least ``nbytes``, kept between calls
        (callers hold the runtime's lock across the launches that use it; the in-order queue
        orders one call's use before the next). ``zeroed``: all zero when first made or grown,
        and the kernels leave it zero."""
        workspace = self._rt.workspace
        # the size asked for is kept with the buffer: a pooled buffer may be larger, and
        # only the bytes asked for were zeroed
        buf, size = workspace.get(name, (None, 0))
        if buf is None or size < nbytes:
            size = max(-(-nbytes // 4) * 4, 4)
            buf = self.upload(np.zeros(size // 4, np.int32)) if zeroed else self.allocate(size)
            workspace[name] = (buf, size)
        return buf

    def upload(self, array: np.ndarray) -> Buffer:
        """A new buffer holding ``array`` (the copy has finished when this returns)."""
        import pyopencl as cl

        host = transferable(np.ascontiguousarray(array))
        buffer = self.allocate(host.nbytes)
        if host.nbytes:
            cl.enqueue_copy(self._queue, buffer, host, is_blocking=True)
        return buffer

    def download(self, buffer: Buffer, out: np.ndarray) -> None:
        """Copy ``out.nbytes`` bytes of ``buffer`` into ``out`` (waits for queued work)."""
        import pyopencl as cl

        if out.nbytes:
            if not out.flags.c_contiguous:
                raise ValueError("out: expected a C-contiguous array")
            cl.enqueue_copy(self._queue, transferable(out), buffer, is_blocking=True)

    def copy(self, src: Buffer, dst: Buffer, nbytes: int) -> None:
        """Device-to-device copy, queued in order."""
        import pyopencl as cl

        if nbytes:
            self._record(cl.enqueue_copy(self._queue, dst, src, byte_count=int(nbytes)))

    def synchronize(self) -> None:
        """Wait for every queued command."""
        self._queue.finish()

    @property
    def queue(self) -> Any:
        """The command queue commands go to now."""
        return self._queue

    class _Gate:
        """A ``pyopencl.UserEvent`` holding an in-order queue shut behind a marker (see
        ``time_launches(queued=True)``), and a watchdog thread that opens it after ``hold``
        seconds: a launch that waits for the gated queue itself (a blocking copy, a download,
        a finish) would otherwise wait forever. ``forced`` says the watchdog opened it."""

        def __init__(self, context: Any, queue: Any, hold: float) -> None:
            """Enqueue the gating marker; raises what PyOpenCL raises where user events fail."""
            import pyopencl as cl

            self.event = cl.UserEvent(context)
            self._lock = threading.Lock()
            self._open = False
            self.forced = False
            try:
                #: never recorded by ``_record``: not among the commands ``_profiled`` times
                self.marker = cl.enqueue_marker(queue, wait_for=[self.event])
            except BaseException:
                self.open()  # a user event nothing waits on, completed all the same
                raise
            self._timer = threading.Timer(hold, self.open, kwargs={"forced": True})
            self._timer.daemon = True
            self._timer.start()

        def open(self, forced: bool = False) -> None:
            """Let the queue run (once; later calls do nothing); ``forced``: by the watchdog."""
            import pyopencl as cl

            with self._lock:
                if self._open:
                    return
                self._open, self.forced = True, forced
                timer = getattr(self, "_timer", None)
                if timer is not None and not forced:
                    timer.cancel()
                self.event.set_status(cl.command_execution_status.COMPLETE)

    #: the least time the gated calls' enqueues may take before the watchdog opens the gate
    #: (``time_launches(queued=True)``; the limit is also at least 10x their expected host
    #: time: ``repeats`` times the fastest warm-up call's)
    gate_hold_s: ClassVar[float] = 0.5

    def time_launches(
        self, launch: Callable[[], object], repeats: int, warmup: int = 2, *, queued: bool = False
    ) -> list[float]:
        """Device seconds of each of ``repeats`` calls of ``launch``, from OpenCL profiling events.

        Each figure runs from the start of the first command ``launch`` enqueued to the
        end of its last one, on a profiling-enabled queue; host timing around a finish
        serves calls that enqueue nothing this backend sees. Without ``queued`` the calls
        are enqueued one after another, and a multi-kernel op's figure includes the gaps in
        which the device waited for the host to enqueue its next kernel: what a user's loop
        of such calls gets. ``queued`` (the tuner, ``hal bench``'s kernel time): the timed
        calls are enqueued behind a marker that waits for a ``pyopencl.UserEvent``, set
        complete once the last call has returned, so the device runs every call's kernels
        back to back and the host's enqueue time is in no figure, as CUDA's queued timing
        runs its calls behind a spinning kernel (the marker is not one of the timed
        commands; each figure is still its own call's first start to last end). One gate for
        all the calls, not one per call: on the H200 (NVIDIA's OpenCL) a call gated and
        waited for alone started on an idle GPU and measured up to 20 % above the ungated
        figure even for one kernel. The ``warmup`` calls are never gated. An exception in
        ``launch`` opens the gate, lets the queue drain and restores it before it
        propagates. Where the gate cannot be honoured (no user events; a call that enqueues
        nothing this backend records; or the gate held past ``gate_hold_s``, and 10x the
        enqueues' expected host time, because ``launch`` waits for the queue it has gated,
        say with a download: a watchdog thread then opens it) a warning says why and every
        call is timed again without the gate.
        """
        times = []
        for commands, host in self._profiled(launch, repeats, warmup, gated=queued):
            if commands:
                times.append(max(end for _, _, end in commands) - min(start for _, start, _ in commands))
            else:
                times.append(host)
        return times

    def launch_profile(
        self, launch: Callable[[], object], repeats: int, warmup: int = 2, *, queued: bool = False
    ) -> list[list[tuple[str, float, float]]]:
        """Per call of ``launch``: each command it enqueued as (kernel name or "copy", start, end)
        in device seconds from the call's first start, from OpenCL profiling events: where
        the time of a multi-kernel op goes, gaps between its launches included. ``queued``:
        the calls gated as in ``time_launches(queued=True)`` (the gaps the host made go)."""
        calls = []
        for commands, _ in self._profiled(launch, repeats, warmup, gated=queued):
            t0 = min((start for _, start, _ in commands), default=0.0)
            calls.append([(name, start - t0, end - t0) for name, start, end in commands])
        return calls

    def _profiled(self, launch: Callable[[], object], repeats: int, warmup: int,
                  gated: bool = False) -> list[tuple[list[tuple[str, float, float]], float]]:
        """(commands as (name, start s, end s), host seconds) of each of ``repeats`` calls,
        on a profiling-enabled queue; the host time only where no command was recorded.
        ``gated``: all the timed calls enqueued behind one ``_Gate``, opened after the last;
        where the gate fails, the watchdog opens it or a call records no command, a warning
        and every call again ungated."""
        import time

        import pyopencl as cl

        self._rt.queue.finish()
        queue = self._rt.profiling_queue()
        previous = self._queue
        self._queue = queue
        try:
            fastest = 0.0  # the fastest warm-up call's host time (the first may compile)
            for i in range(warmup):
                start = time.perf_counter()
                launch()
                took = time.perf_counter() - start
                fastest = took if i == 0 else min(fastest, took)
            queue.finish()
            # the gate's watchdog allows 10x the enqueues' expected host time
            hold = max(self.gate_hold_s, 10 * repeats * fastest)
            while True:
                spans: list[list[tuple[str, Any]]] = []
                host: list[float] = []
                why = ""
                gate = None
                if gated:
                    try:
                        gate = self._Gate(self._rt.context, queue, hold)
                    except Exception as exc:  # cl.Error, or a PyOpenCL/driver without user events
                        why = f"no user event on this device ({type(exc).__name__}: {str(exc).strip()})"
                try:
                    for _ in range(0 if why else repeats):
                        self._events = []
                        start = time.perf_counter()
                        try:
                            launch()
                        finally:
                            events, self._events = self._events, None
                        if not events and gate is None:
                            queue.finish()
                        host.append(time.perf_counter() - start if not events else 0.0)
                        spans.append(events)
                        if gate is not None and not events:
                            why = "launch() enqueued no command this backend records: nothing to gate"
                            break
                        if gate is not None and gate.forced:
                            break
                finally:
                    if gate is not None:
                        gate.open()  # also when launch raised: a shut queue would never drain
                        queue.finish()
                if gate is not None and gate.forced and not why:
                    why = (f"the gate held {hold:.3g} s while launch() enqueued (does it wait for the "
                           "queue: a download, a blocking copy, a finish?); the watchdog opened it")
                if not why:
                    break
                warnings.warn(f"hal opencl: time_launches(queued=True) on {self.info.id} timed without "
                              f"the gate: {why}", stacklevel=3)
                gated = False
            queue.finish()
        finally:
            self._queue = previous
            self._events = None
        info = cl.profiling_info
        return [([(name, e.get_profiling_info(info.START) * 1e-9, e.get_profiling_info(info.END) * 1e-9)
                  for name, e in events], seconds) for events, seconds in zip(spans, host, strict=True)]

    # -- building --------------------------------------------------------------------
    def _program(self, file: str, defines: Mapping[str, int]) -> Any:
        import pyopencl as cl

        key = (file, tuple(sorted(defines.items())))
        rt = self._rt
        with rt.lock:
            program = rt.programs.get(key)
            if program is not None:
                return program
            source = program_source(file, defines)
            # HAL_OPENCL_BUILD_OPTIONS: extra compiler options for every build (make test passes
            # -cl-opt-disable to PoCL, whose optimising builds are most of CI's time)
            options = [f"-D{k}={v}" for k, v in key[1]] + os.environ.get("HAL_OPENCL_BUILD_OPTIONS", "").split()
            try:
                # False: no binary cache; build() types cache_dir str | None but passes False on to its cache
                program = cl.Program(rt.context, source).build(
                    options=options, devices=[rt.device],
                    cache_dir=False if cache_disabled() else str(cache_dir("opencl")),  # type: ignore[arg-type]
                )
            except cl.Error as exc:
                log = str(exc)  # PyOpenCL's message carries the compiler's build log
                raise KernelCompileError("opencl", file, dict(defines), options, log) from None
            rt.programs[key] = program
            return program

    def _kernel(self, file: str, name: str, defines: Mapping[str, int], local: int) -> Any:
        """A cached kernel object, checked against its own work-group and local-memory limits."""
        import pyopencl as cl

        key = (file, tuple(sorted(defines.items())), name)
        rt = self._rt
        entry = rt.kernels.get(key)
        if entry is None:
            kernel = cl.Kernel(self._program(file, defines), name)
            info = cl.kernel_work_group_info
            limit = int(kernel.get_work_group_info(info.WORK_GROUP_SIZE, rt.device))
            static_local = int(kernel.get_work_group_info(info.LOCAL_MEM_SIZE, rt.device))
            entry = rt.kernels[key] = (kernel, limit, static_local)
        kernel, limit, static_local = entry
        if local > limit:
            raise _TooLarge(f"{name}: work-group {local} above this kernel's limit {limit}")
        if static_local > self.info.local_mem_bytes:
            raise _TooLarge(f"{name}: {static_local} bytes of local memory above the device's "
                            f"{self.info.local_mem_bytes}")
        return kernel

    def _params(self, family: str, params: Mapping[str, int]) -> dict[str, int]:
        """The schema defaults overlaid with ``params``; work-groups clamped to the device."""
        schema = SCHEMAS[family]
        merged = {**schema.defaults(), **{k: int(v) for k, v in params.items()}}
        limit = self.info.max_work_group
        if merged["WG"] > limit:
            merged["WG"] = _floor_allowed(WG_VALUES, limit)
        if family in ("conv2d", "qconv2d") and _gemm_wg(merged) > limit:
            merged["TILE"] = _floor_allowed((16, 32, 64), 4 * math.isqrt(limit))
        return merged

    def _shrink(self, params: dict[str, int], key: str, values: Sequence[int], why: str) -> dict[str, int]:
        if self.exact_params:
            raise LaunchLimitExceeded(f"{self.info.id}: cannot launch {key}={params[key]} as given ({why})")
        smaller = [v for v in values if v < params[key]]
        if not smaller:
            raise HalError(f"{self.info.id}: cannot launch ({why}) even with {key}={params[key]}")
        warn_key = f"{key}:{why}"
        if warn_key not in self._warned:
            self._warned.add(warn_key)
            warnings.warn(f"hal opencl: {why}; retrying with {key}={max(smaller)}", stacklevel=4)
        return {**params, key: max(smaller)}

    def _launch(self, kernel: Any, global_size: tuple[int, ...], local_size: tuple[int, ...], args: list[Any]) -> None:
        # Declaring the scalar argument types once lets PyOpenCL pack them directly: an
        # untyped kernel goes through the buffer protocol for every numpy scalar, which
        # measured ~13 us per argument (255 us per launch of a 20-argument kernel on PoCL,
        # 9 us typed), the bulk of hal's OpenCL host overhead.
        typed = self._rt.typed_kernels
        if id(kernel) not in typed:
            kernel.set_scalar_arg_dtypes([a.dtype if isinstance(a, np.generic) else None for a in args])
            typed[id(kernel)] = kernel  # kernels are cached for the runtime's life: the id stays theirs
        self._record(kernel(self._queue, global_size, local_size, *args), kernel)

    def _record(self, event: Any, kernel: Any = None) -> None:
        """Keep ``event`` for ``_profiled``, named by its kernel ("copy" without one); the
        name is a driver query, made only while profiling."""
        if self._events is not None:
            self._events.append((kernel.function_name if kernel is not None else "copy", event))

    @staticmethod
    def _base_defines(spec: Any) -> dict[str, int]:
        dtype = np.dtype(spec.dtype)
        defines = {
            "DTYPE_HALF": int(dtype == np.float16),
            "LAYOUT_NHWC": int(getattr(spec, "layout", "NCHW") == "NHWC"),
            "FUSE_RELU": int(bool(getattr(spec, "relu", False))),
        }
        if dtype in QUANT_DTYPES:  # only then: float builds keep their option strings (driver caches)
            defines["DTYPE_INT8"] = int(dtype == np.int8)
            defines["DTYPE_UINT8"] = int(dtype == np.uint8)
        if is_bfloat16(dtype):  # likewise: float32 and float16 builds keep their -D sets
            defines["DTYPE_BF16"] = 1
        return defines

    # -- launchers -------------------------------------------------------------------
    def _pool2d_build(self, spec: Pool2dSpec, p: Mapping[str, int]) -> tuple[str, str, dict[str, int], int, int]:
        """(file, kernel name, -D set, LOCAL_TILE mode actually run, band rows) of one pooling call
        (mode ``_QROWS16_MODE`` for qpool2d_pack.cl's NCHW strips)."""
        nhwc = spec.layout == "NHWC"
        half = np.dtype(spec.dtype) == np.float16
        quant = np.dtype(spec.dtype) in QUANT_DTYPES
        file = "qpool2d.cl" if quant else "pool2d.cl"
        name = "pool2d_max" if spec.kind == "max" else "pool2d_avg"
        mode = 0 if nhwc else p["LOCAL_TILE"]
        if p["QROWS16"] and _qrows16_applies(spec):
            # row strips of 16-byte row vectors on packed bytes (VEC only sizes the prelude's types);
            # QROWS16=2 changes the average only (its max is QROWS16=1's build: one launch signature)
            v2 = p["QROWS16"] == 2 and spec.kind == "avg"
            return QPACK_FILE, name, {
                **self._base_defines(spec), "WG": p["WG"], "VEC": 8, "STRIP_ROWS": p["STRIP_ROWS"],
                "STRIP_K": spec.kernel[0], "POOL_PL": spec.pads[2], "QP_ALIGN16": int(spec.in_w % 16 == 0),
                **({"QP_V2": 1} if v2 else {}),
                **({"HAL_PTX_U16X2": 1} if (spec.kind == "max" or v2) and self._ptx_u16x2 else {}),
            }, _QROWS16_MODE, 0
        if p["QVEC16"] in _QVEC16_PIX and _qvec16_applies(spec):
            # several output pixels per work-item on packed 16-bit lanes, shared columns loaded once
            return QPACK_FILE, name, {
                **self._base_defines(spec), "WG": p["WG"], "VEC": 8, "POOL_FIXED": 1,
                "POOL_KH": spec.kernel[0], "POOL_KW": spec.kernel[1], "POOL_SH": spec.stride[0],
                "POOL_SW": spec.stride[1], "POOL_DH": 1, "POOL_DW": 1, "QP_PIX": _QVEC16_PIX[p["QVEC16"]],
                # the average builds only the path that C's alignment takes (measured with it, session 43);
                # the max keeps both: its aligned-only build ran 7 % slower on an H100
                **({"Q16_ALIGNED": int(spec.c % 16 == 0), "QP_DIVISOR_RULE": int(spec.divisor is None)}
                   if spec.kind == "avg" else {}),
                **({"HAL_PTX_U16X2": 1} if self._ptx_u16x2 else {}),
            }, 0, 0
        if p["QVEC16"] == 2 and _qvec16_applies(spec):
            # QVEC16=1's work mapping on packed 16-bit lanes
            return QPACK_FILE, name, {
                **self._base_defines(spec), "WG": p["WG"], "VEC": 8, "POOL_FIXED": 1,
                "POOL_KH": spec.kernel[0], "POOL_KW": spec.kernel[1], "POOL_SH": spec.stride[0],
                "POOL_SW": spec.stride[1], "POOL_DH": 1, "POOL_DW": 1,
                **({"QP_DIVISOR_RULE": int(spec.divisor is None)} if spec.kind == "avg" else {}),
                **({"HAL_PTX_U16X2": 1} if spec.kind == "max" and self._ptx_u16x2 else {}),
            }, 0, 0
        if p["QVEC16"] and _qvec16_applies(spec):
            # 16 channels per work-item, the window built in (VEC only sizes the prelude's types)
            return file, name, {
                **self._base_defines(spec), "WG": p["WG"], "VEC": 8, "LOCAL_TILE": 0, "POOL_INTERIOR": 0,
                "HALF_ARITH": 0, "QPOOL_VEC16": 1, "POOL_FIXED": 1,
                "POOL_KH": spec.kernel[0], "POOL_KW": spec.kernel[1], "POOL_SH": spec.stride[0],
                "POOL_SW": spec.stride[1], "POOL_DH": 1, "POOL_DW": 1,
                **({"POOL_NO_IDX": 1} if spec.kind == "max" else {}),
                **({"HAL_PTX_U16X2": 1} if spec.kind == "max" and self._ptx_u16x2 else {}),
            }, 0, 0
        if mode == 3 and not _strip_applies(spec, p["VEC"]):
            # the row bands: the other aligned-load path, for the devices a strip entry is for
            mode = 2
        band = 0
        elems = p["BAND_KB"] * 256
        if mode == 2:
            band = 0 if quant else _band_rows(spec, elems)
            if band == 0:  # int8 kernels have no band path; or one input row is too long
                mode = 0
        tile = mode in (1, 2)  # local-memory paths: one output per work-item, VEC=1
        defines = {
            **self._base_defines(spec),
            "WG": p["WG"],
            "VEC": 1 if tile else p["VEC"],
            "LOCAL_TILE": mode,
            "POOL_INTERIOR": p["INTERIOR"] if mode == 0 and not nhwc else 0,
            # the strips compute in float (their max is exact anyway)
            "HALF_ARITH": p["HALF_ARITH"] if half and mode == 0 else 0,
        }
        if mode == 2:
            defines["BAND_ELEMS"] = elems
        if half and p["HALF_RAW"] and not tile:
            defines["HALF_RAW"] = 1
        if spec.kind == "max" and not spec.return_indices and mode == 0 and (nhwc or not quant):
            # the vector max paths then keep no index vector (8 ints and a select per tap)
            defines["POOL_NO_IDX"] = 1
        if (self._ptx_maxnan and spec.kind == "max" and not spec.return_indices and mode in (0, 3) and not quant
                and not defines["HALF_ARITH"]):
            defines["HAL_PTX_MAXNAN"] = 1  # index-free max as PTX max.NaN.f32 (pool2d.cl)
        if mode == 3:  # built for its window only; the left pad picks the taps
            defines.update(STRIP_ROWS=p["STRIP_ROWS"], POOL_PL=spec.pads[2])
            if quant:  # qpool2d.cl's strips take the window size alone (stride 2, dilation 1)
                defines["STRIP_K"] = spec.kernel[0]
        if (p["FIXED_WINDOW"] or mode == 3) and (nhwc or not quant) and _common_window(spec):
            defines.update(POOL_FIXED=1, POOL_KH=spec.kernel[0], POOL_KW=spec.kernel[1],
                           POOL_SH=spec.stride[0], POOL_SW=spec.stride[1],
                           POOL_DH=spec.dilation[0], POOL_DW=spec.dilation[1])
        return file, name, defines, mode, band

    @staticmethod
    def _pool2d_items(spec: Pool2dSpec, p: Mapping[str, int], mode: int, band: int) -> int:
        """Work-items of one pooling launch (before rounding up to the work-group)."""
        wg = p["WG"]
        if mode == _QROWS16_MODE:
            return spec.n * spec.c * -(-spec.out_h // p["STRIP_ROWS"]) * -(-spec.out_w // 8)
        if mode == 3:
            return spec.n * spec.c * -(-spec.out_h // p["STRIP_ROWS"]) * -(-2 * spec.out_w // p["VEC"])
        if mode == 2:
            return spec.n * spec.c * -(-spec.out_h // band) * wg
        if mode == 1:
            tiles = -(-spec.out_w // 16) * -(-spec.out_h // (wg // 16))
            return spec.n * spec.c * tiles * wg
        if spec.layout == "NHWC":
            if p["QVEC16"] and _qvec16_applies(spec):  # 16 channels of QP_PIX output pixels
                return spec.n * spec.out_h * -(-spec.out_w // _QVEC16_PIX.get(p["QVEC16"], 1)) * -(-spec.c // 16)
            return spec.n * spec.out_h * spec.out_w * -(-spec.c // p["VEC"])
        return spec.n * spec.c * spec.out_h * -(-spec.out_w // p["VEC"])

    def pool2d(
        self, spec: Pool2dSpec, x: Buffer, y: Buffer, indices: Buffer | None, params: Mapping[str, int]
    ) -> None:
        """Max or average pooling; int8/uint8 specs run ``qpool2d.cl`` (the zero point as a last argument)."""
        # planned once per (spec, parameters, exact_params): rebuilding the -D set, looking up
        # the build and converting 18 arguments took most of 14 µs of Python per call
        kernel, scalars, global_size, local_size = self._planned(
            ("pool2d", spec, self._pkey(params), self.exact_params), lambda: self._plan_pool2d(spec, params))
        self._launch(kernel, global_size, local_size, [x, y, indices if spec.kind == "max" else None, *scalars])

    def _plan_pool2d(
        self, spec: Pool2dSpec, params: Mapping[str, int]
    ) -> tuple[Any, tuple[Any, ...], tuple[int], tuple[int]]:
        """(kernel, scalar arguments, global size, local size) of a pooling call."""
        p = self._params("pool2d", params)
        scalars = [
            *map(_i32, (spec.n, spec.c, spec.in_h, spec.in_w, spec.out_h, spec.out_w, *spec.kernel, *spec.stride,
                        *spec.pads, *spec.dilation, spec.divisor or 0, int(spec.count_include_pad))),
        ]
        if np.dtype(spec.dtype) in QUANT_DTYPES:
            scalars.append(_i32(spec.zero_point))
        while True:
            file, name, defines, mode, band = self._pool2d_build(spec, p)
            try:
                kernel = self._kernel(file, name, defines, p["WG"])
                break
            except _TooLarge as exc:
                p = self._shrink(p, "WG", WG_VALUES, str(exc))
        if mode == 2:
            scalars.append(_i32(band))
        wg = p["WG"]
        return kernel, tuple(scalars), (_round_up(self._pool2d_items(spec, p, mode, band), wg),), (wg,)

    def launch_signature(self, spec: object, params: Mapping[str, int]) -> Hashable | None:
        """What a pooling, adaptive pooling, BatchNorm or conv call would build and launch (file,
        kernel, -D set, work-items): the tuner measures parameter sets with one signature once
        (NHWC pooling ignores LOCAL_TILE, float32 and bfloat16 ignore HALF_RAW, adaptive
        pooling outside the pipe kernels ignores PIPE_GROUPS, ...). Before any build, so a
        work-group the built kernel turns out not to allow is the tuner's "over limit", as usual."""
        try:
            if isinstance(spec, Pool2dSpec):
                p = self._params("pool2d", params)
                file, name, defines, mode, band = self._pool2d_build(spec, p)
                return (file, name, tuple(sorted(defines.items())), self._pool2d_items(spec, p, mode, band))
            if isinstance(spec, AdaptivePool2dSpec):
                name, defines, items = self._adaptive_build(spec, self._params("adaptive_pool2d", params))
                return ("adaptive_pool2d.cl", name, tuple(sorted(defines.items())), items)
            if isinstance(spec, BatchNormSpec):
                p = self._params("batch_norm", params)
                # the -D set holds WG and VEC, which fix every launch's geometry for a given spec
                return ("batch_norm.cl", spec.training, tuple(sorted(self._batch_norm_defines(spec, p).items())))
            if isinstance(spec, Conv2dSpec):
                # the -D set and work-group fix the grid for a given spec (the GEMM ignores WG and VEC)
                p = self._params("conv2d", params)
                defines, local = _conv_build(_conv_algo(spec, p), p, self._base_defines(spec))
                return ("conv2d.cl", "conv2d", tuple(sorted(defines.items())), local)
        except Exception:  # a set that cannot be planned is evaluated (and fails) as usual
            return None
        return None

    def adaptive_pool2d(
        self,
        spec: AdaptivePool2dSpec,
        x: Buffer,
        y: Buffer,
        indices: Buffer | None,
        params: Mapping[str, int],
    ) -> None:
        """Adaptive max or average pooling (``MODE``: 0 decides per call, see :meth:`_adaptive_flat`)."""
        # planned once per (spec, parameters, exact_params), as pool2d
        kernel, scalars, global_size, local_size = self._planned(
            ("adaptive_pool2d", spec, self._pkey(params), self.exact_params),
            lambda: self._plan_adaptive_pool2d(spec, params))
        self._launch(kernel, global_size, local_size, [x, y, indices if spec.kind == "max" else None, *scalars])

    def _plan_adaptive_pool2d(
        self, spec: AdaptivePool2dSpec, params: Mapping[str, int]
    ) -> tuple[Any, tuple[Any, ...], tuple[int], tuple[int]]:
        """(kernel, scalar arguments, global size, local size) of an adaptive pooling call."""
        p = self._params("adaptive_pool2d", params)
        scalars = tuple(map(_i32, (spec.n, spec.c, spec.in_h, spec.in_w, spec.out_h, spec.out_w)))
        while True:
            name, defines, items = self._adaptive_build(spec, p)
            try:
                kernel = self._kernel("adaptive_pool2d.cl", name, defines, p["WG"])
                return kernel, scalars, (items,), (p["WG"],)
            except _TooLarge as exc:
                p = self._shrink(p, "WG", WG_VALUES, str(exc))

    def _adaptive_build(self, spec: AdaptivePool2dSpec, p: Mapping[str, int]) -> tuple[str, dict[str, int], int]:
        """(kernel name, -D set, work-items) of an adaptive pooling call under (clamped)
        parameters ``p``: the pipe, flat, group or per-item kernels (see ``MODE``)."""
        nhwc = spec.layout == "NHWC"
        half = np.dtype(spec.dtype) == np.float16
        name = "adaptive_pool2d_max" if spec.kind == "max" else "adaptive_pool2d_avg"
        wg = p["WG"]
        pipe = self._adaptive_pipe(spec, p)
        if pipe:
            planes = spec.n * spec.c
            full = planes // wg
            # enough groups to keep loads in flight on every compute unit, each then looping
            # over its chunks; the planes past the full chunks are read directly
            groups = min(full, p["PIPE_GROUPS"] * max(self.info.compute_units, 1)) if full else -(-planes // wg)
            defines = {**self._base_defines(spec), "WG": wg, "VEC": p["VEC"], "ADAPTIVE_GROUP": 3, "PIPE_HW": pipe}
            return name, defines, groups * wg
        flat = self._adaptive_flat(spec, p)
        if p["MODE"] in (0, 3, 4):
            # a work-group per output pays off once a bin holds a few rows of taps
            taps = -(-spec.in_h // spec.out_h) * -(-spec.in_w // spec.out_w)
            # with GVEC_U, NHWC global pooling walks the image per (image, channel vector)
            # whatever the plane size, where those work-items fill the device
            walk = self._adaptive_gvec(spec, p) and \
                spec.n * (spec.c // p["VEC"]) >= GVEC_MIN_ITEMS_PER_CU * max(self.info.compute_units, 1)
            group = taps >= 64 and not walk
        else:
            group = p["MODE"] == 2
        defines = {
            **self._base_defines(spec),
            "WG": wg,
            "VEC": p["VEC"],
            "ADAPTIVE_GROUP": 2 if flat else int(group),
            "HALF_ARITH": p["HALF_ARITH"] if half and not group and not flat else 0,
        }
        if flat:
            defines["FLAT_ELEMS"] = flat
        if not flat and not group and self._adaptive_gvec(spec, p):
            defines["GVEC_U"] = p["GVEC_U"]
        # raw fp16 vectors: NCHW avg's rows and NHWC's channel vectors (the flat kernels copy
        # raw bits already, NCHW max loads scalars); only then, so that other builds keep
        # their -D sets
        if half and p["HALF_RAW"] and p["VEC"] > 1 and not flat and (nhwc or spec.kind == "avg"):
            defines["HALF_RAW"] = 1
        outputs = spec.n * spec.out_h * spec.out_w
        if flat:
            # one chunk of at most FLAT_ELEMS // plane planes per group (the kernel derives
            # the same chunk size from the group count), but enough groups to fill the device
            planes = spec.n * spec.c
            groups = -(-planes // (flat // (spec.in_h * spec.in_w)))
            return name, defines, max(groups, min(planes, 4 * max(self.info.compute_units, 1))) * wg
        if group and nhwc:
            items = outputs * -(-spec.c // (BN_LANES * p["VEC"])) * wg
        elif group:
            items = outputs * spec.c * wg
        elif nhwc:
            items = outputs * -(-spec.c // p["VEC"])
        else:
            items = outputs * spec.c
        return name, defines, _round_up(items, wg)

    @staticmethod
    def _adaptive_gvec(spec: AdaptivePool2dSpec, p: Mapping[str, int]) -> bool:
        """Whether a per-item adaptive call runs the global-pooling walk (``GVEC_U``): NHWC,
        1x1 output, no indices, whole channel vectors (C % VEC == 0). H200, NVIDIA's OpenCL
        (session 15): fp16 NHWC 7x7 global pooling 0.0279 -> 0.0153 ms, fp32 0.0330 -> 0.0297.
        MODE 0, 3 and 4 also take it instead of the work-group-per-output kernel for planes of
        64 taps or more when there are ``GVEC_MIN_ITEMS_PER_CU`` work-items per compute unit."""
        return bool(p["GVEC_U"] and spec.layout == "NHWC" and spec.out_h == spec.out_w == 1
                    and not spec.return_indices and spec.c % p["VEC"] == 0)

    def _adaptive_pipe(self, spec: AdaptivePool2dSpec, p: Mapping[str, int]) -> int:
        """The plane size (``PIPE_HW``) when this call runs the pipelined global kernels, else
        0: NCHW global pooling of planes that :func:`fixed_plane_ok` admits, whose stage (a
        chunk of WG planes and one vector) fits the device's local memory (less
        ``FLAT_SLACK``). MODE 4 asks for them (elsewhere it runs as MODE 0); MODE 0 takes them
        where its rule would take the flat kernels (:meth:`_adaptive_flat`). H200, 7x7 planes:
        1.4x (float32) and 1.6x (float16) faster than the flat kernels
        (benchmarks/results/h200-2026-12-01-session9)."""
        mode = p["MODE"]
        if mode not in (0, 4) or spec.layout == "NHWC" or spec.out_h != 1 or spec.out_w != 1:
            return 0
        if mode == 0 and not self._adaptive_flat(spec, p):
            return 0
        es = np.dtype(spec.dtype).itemsize
        hw = spec.in_h * spec.in_w
        if not fixed_plane_ok(hw, es) or p["WG"] % p["VEC"]:
            return 0
        stage = -(-(p["WG"] * hw + p["VEC"]) * es // 16) * 16  # PIPE_STAGE16 words of 16 bytes
        return hw if stage <= self.info.local_mem_bytes - FLAT_SLACK else 0

    def _adaptive_flat(self, spec: AdaptivePool2dSpec, p: Mapping[str, int]) -> int:
        """Staging capacity in elements (``FLAT_ELEMS``) when this call runs the flat NCHW
        kernels, else 0.

        MODE 3 asks for them; NHWC, and planes the buffer cannot hold, then run as MODE 0
        would otherwise. MODE 0 picks them on GPUs (not Mali, whose local memory is ordinary
        cached memory) for global pooling (1x1 output) of planes of at most
        ``FLAT_AUTO_PLANE`` elements of which the buffer holds ``FLAT_AUTO_MIN_PLANES``. The
        buffer is ``FLAT_PER_ITEM`` elements per work-item, less where the device's local
        memory (after the scratch arrays, ``FLAT_SLACK`` and one vector of alignment slack)
        holds fewer.
        """
        mode = p["MODE"]
        if mode not in (0, 3, 4) or spec.layout == "NHWC":
            return 0
        es = np.dtype(spec.dtype).itemsize
        wg, vec = p["WG"], p["VEC"]
        room = (self.info.local_mem_bytes - _flat_scratch(wg) - FLAT_SLACK) // es - vec
        elems = min(FLAT_PER_ITEM * wg, room) // vec * vec
        plane = spec.in_h * spec.in_w
        if elems < plane:
            return 0
        if mode == 3:
            return elems
        # H200: global pooling of 7x7..20x20 planes ran 1.3-5.7x faster than MODE 0's former
        # choice; outputs of 2x1 .. 3x3 ran 10-70 % slower than one work-item per output, whose
        # warps then read few cache lines already. The real device decides, not a profile.
        extras = dict(self.info.extras)
        family = extras.get("real_arch_family", self.info.arch_family)
        gpu = extras.get("device_type") == "GPU" and family != "mali"
        glob = spec.out_h == spec.out_w == 1
        return elems if gpu and glob and plane <= FLAT_AUTO_PLANE and elems // plane >= FLAT_AUTO_MIN_PLANES else 0

    def conv2d(
        self,
        spec: Conv2dSpec,
        x: Buffer,
        weight: Buffer,
        bias: Buffer | None,
        y: Buffer,
        params: Mapping[str, int],
    ) -> None:
        """2-D convolution: direct or implicit GEMM (``ALGO``; 0 decides per call)."""
        args = [x, weight, bias, y, *_conv_geometry(spec)]
        self._launch_conv("conv2d.cl", "conv2d", spec, self._params("conv2d", params),
                          self._base_defines(spec), args)

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
        """Quantized conv (QLinearConv, or ConvInteger when ``multiplier`` is None): direct or GEMM."""
        conv = spec.conv
        y_kind = self.qconv_output_kind(spec, multiplier)
        args = [x, weight, bias, y, w_zero_point, multiplier, *_conv_geometry(conv),
                _i32(spec.x_zero_point), _i32(spec.y_zero_point)]
        base = {
            **self._base_defines(conv),
            "W_UINT8": int(np.dtype(spec.w_dtype) == np.uint8),
            "Y_KIND": y_kind,
        }
        self._launch_conv("qconv2d.cl", "qconv2d", conv, self._params("qconv2d", params), base, args)

    def _launch_conv(self, file: str, entry: str, spec: Conv2dSpec, p: dict[str, int],
                     base: dict[str, int], args: list[Any]) -> None:
        """Shared by conv2d and qconv2d: pick direct or GEMM, build (shrinking what the driver refuses), launch."""
        cog = spec.c_out // spec.groups
        algo = _conv_algo(spec, p)
        while True:
            defines, local = _conv_build(algo, p, base)
            try:
                kernel = self._kernel(file, entry, defines, local)
                break
            except _TooLarge as exc:
                if algo == 2:
                    p = self._shrink(p, "TILE", (16, 32, 64), str(exc))
                else:
                    p = self._shrink(p, "WG", WG_VALUES, str(exc))
        if algo == 2:
            tile = p["TILE"]
            positions = spec.n * spec.out_h * spec.out_w
            gsize = (-(-positions // tile) * local, -(-cog // tile), spec.groups)
            self._launch(kernel, gsize, (local, 1, 1), args)
        else:
            if spec.layout == "NHWC":
                items = spec.n * spec.out_h * spec.out_w * -(-spec.c_out // p["VEC"])
            else:
                items = spec.n * spec.c_out * spec.out_h * -(-spec.out_w // p["VEC"])
            self._launch(kernel, (_round_up(items, local),), (local,), args)

    def _batch_norm_defines(self, spec: BatchNormSpec, p: Mapping[str, int]) -> dict[str, int]:
        """The -D set of batch_norm.cl for ``spec`` under (clamped) parameters ``p``."""
        defines = {**self._base_defines(spec), "WG": p["WG"], "VEC": p["VEC"]}
        if spec.dtype == np.float16 and p["HALF_RAW"] and p["VEC"] > 1:
            defines["HALF_RAW"] = 1
        if _bn_infer_loop(spec, p):
            defines["BN_INFER_LOOP"] = 1
        return defines

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
        """BatchNorm forward: training = stats, finalize, apply; inference = one pass."""
        kernels, wg, items, chunks, tiles, per_group, scalars = self._planned(
            ("batch_norm", spec, self._pkey(params), self.exact_params), lambda: self._plan_batch_norm(spec, params))
        c = spec.c
        if not spec.training:
            self._launch(kernels["batch_norm_infer"], (items,), (wg,),
                         [x, y, weight, bias, running_mean, running_var, *scalars])
            return
        n_, c_, hw_, chunks_, eps, momentum = scalars
        rm, rv = (running_mean, running_var) if spec.has_running else (None, None)
        with self._rt.lock:  # the workspace is shared: keep one call's launches together
            # batch statistics and the affine map, never returned (separate buffers: a
            # sub-buffer's offset must be a multiple of the device's base alignment)
            mean, var = self._workspace("bn_mean", 4 * c), self._workspace("bn_var", 4 * c)
            scale, shift = self._workspace("bn_scale", 4 * c), self._workspace("bn_shift", 8 * c)
            partial = self._workspace("bn_partial", 12 * c * chunks)
            if "batch_norm_stats_finalize" in kernels:  # NCHW: the last group of a channel finalizes it
                self._launch(
                    kernels["batch_norm_stats_finalize"], (chunks * wg, tiles), (wg, 1),
                    [x, partial, chunks_, n_, c_, hw_, weight, bias, rm, rv,
                     mean, var, scale, shift, eps, momentum, self._workspace("bn_counters", 4 * c, zeroed=True)],
                )
            else:
                self._launch(
                    kernels["batch_norm_stats"], (chunks * wg, tiles), (wg, 1),
                    [x, mean, var, n_, c_, hw_, partial, chunks_],
                )
                self._launch(
                    kernels["batch_norm_finalize"], (-(-c // per_group) * wg,), (wg,),
                    [x, partial, chunks_, hw_, weight, bias, rm, rv,
                     mean, var, scale, shift, c_, eps, momentum, _i32(1)],
                )
            self._launch(kernels["batch_norm_apply"], (items,), (wg,), [x, y, scale, shift, n_, c_, hw_])

    def _plan_batch_norm(
        self, spec: BatchNormSpec, params: Mapping[str, int]
    ) -> tuple[dict[str, Any], int, int, int, int, int, tuple[Any, ...]]:
        """(kernels, work-group, elementwise work-items rounded up to it, statistics chunks,
        statistics tiles, channels per finalize group, scalar arguments: inference's, or
        training's N, C, HW, chunks, eps, momentum) of a BatchNorm call."""
        p = self._params("batch_norm", params)
        nhwc = spec.layout == "NHWC"
        c, hw = spec.c, spec.h * spec.w
        if spec.training and not nhwc and hw < p["VEC"]:
            # No plane holds a whole vector, so a VEC build would run its element paths
            # anyway. VEC 1 also leaves out the statistics' aligned branch, whose
            # WG / (HW / VEC) Intel's CPU compiler (2026.2) evaluates on the other side of
            # the branch as well: a division by zero there kills the process (SIGFPE).
            p = {**p, "VEC": 1}
        while True:
            defines = self._batch_norm_defines(spec, p)
            if not spec.training:
                names: tuple[str, ...] = ("batch_norm_infer",)
            elif nhwc:
                # a channel tile's last group would merge its 64 channels' 528 partials (H200)
                # alone: 0.052 ms for the fused statistics against 0.019 + 0.007 (session 10)
                names = ("batch_norm_stats", "batch_norm_finalize", "batch_norm_apply")
            else:
                names = ("batch_norm_stats_finalize", "batch_norm_apply")
            try:
                kernels = {n: self._kernel("batch_norm.cl", n, defines, p["WG"]) for n in names}
                break
            except _TooLarge as exc:
                p = self._shrink(p, "WG", WG_VALUES, str(exc))
        wg, vec = p["WG"], p["VEC"]
        items = _round_up(spec.n * hw * -(-c // vec) if nhwc else spec.n * c * -(-hw // vec), wg)
        if not spec.training:
            if "BN_INFER_LOOP" in defines:  # a grid-stride loop: enough groups to fill the device
                items = min(items, BN_LOOP_GROUPS_PER_CU * max(self.info.compute_units, 1) * wg)
            return kernels, wg, items, 0, 0, 0, (_i32(spec.n), _i32(c), _i32(hw), np.float32(spec.eps))
        count = spec.count
        # Statistics grid: the groups split each channel's values evenly, so the pass takes
        # as long as its slowest wave; aim for one wave of about BN_ITEMS_PER_CU work-items
        # per compute unit on GPUs (floor, not ceiling: a second, partial wave would add a
        # tail), 4 groups per core on CPUs, each work-item still reading two batches of
        # BN_VALUES values (NCHW: values of one channel; NHWC: rows of VEC channels).
        cu = max(self.info.compute_units, 1)
        gpu = dict(self.info.extras).get("device_type") != "CPU"
        target = cu * (max(1, BN_ITEMS_PER_CU // wg) if gpu else 4)
        if nhwc:
            lanes = _bn_lanes(c, vec)
            tiles = -(-c // (lanes * vec))
            most = max(1, count // ((wg // lanes) * 2 * (BN_VALUES // vec)))
        else:
            tiles = c
            most = max(1, count // (wg * 2 * BN_VALUES))
        chunks = int(min(max(1, target // tiles), most, 1024))
        per_group = wg // _bn_segment(chunks, wg)  # channels per finalize group
        scalars = (_i32(spec.n), _i32(c), _i32(hw), _i32(chunks), np.float32(spec.eps), np.float32(spec.momentum))
        return kernels, wg, items, chunks, tiles, per_group, scalars

    def eltwise(self, spec: EltwiseSpec, x: Buffer, y: Buffer, params: Mapping[str, int]) -> None:
        """Elementwise ReLU over ``spec.count`` elements (``x`` may be ``y``)."""
        if spec.op != "relu":
            raise HalError(f"{self.info.id}: elementwise op {spec.op!r} is not implemented")
        kernel, count, global_size, local_size = self._planned(
            ("eltwise", spec, self._pkey(params), self.exact_params), lambda: self._plan_eltwise(spec, params))
        self._launch(kernel, global_size, local_size, [x, y, count])

    def _plan_eltwise(self, spec: EltwiseSpec, params: Mapping[str, int]) -> tuple[Any, Any, tuple[int], tuple[int]]:
        """(kernel, element count argument, global size, local size) of a ReLU call."""
        p = self._params("eltwise", params)
        while True:
            defines = {**self._base_defines(spec), "FUSE_RELU": 1, "WG": p["WG"], "VEC": p["VEC"]}
            try:
                kernel = self._kernel("eltwise.cl", "eltwise_relu", defines, p["WG"])
                break
            except _TooLarge as exc:
                p = self._shrink(p, "WG", WG_VALUES, str(exc))
        items = -(-spec.count // p["VEC"])
        return kernel, _i32(spec.count), (_round_up(items, p["WG"]),), (p["WG"],)


BACKEND = OpenCLBackend
