"""The backend contract.

A backend is a small runtime (allocate, upload, download, synchronize; building
and launching stay inside it) plus one launcher per kernel family that maps a
frozen spec and a validated parameter set onto launch geometry. Backends never
see raw user arguments: the op layer (``hal.ops``) has already validated
everything and allocated the outputs.

Buffer conventions every launcher follows:

* activations (x, y) hold ``spec.dtype`` in the spec's physical layout, NCHW
  (``n, c, h, w`` contiguous) or NHWC (``n, h, w, c`` contiguous);
* pooling indices are int64 in the output's layout, the flat per-plane index
  ``h * in_w + w`` (PyTorch's);
* conv weights hold ``spec.dtype`` as (C_out, C_in/groups, KH, KW) contiguous in
  either layout; a conv bias and every BatchNorm vector (weight, bias,
  running_mean, running_var) are float32 of length C;
* ``None`` stands for an absent optional buffer: a missing BatchNorm weight
  means 1, a missing bias 0, missing running statistics are neither read nor
  written.

Nothing initializes at import time: ``probe`` reports availability with a
reason instead of raising.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import numpy as np

from hal.errors import HalValueError, UnsupportedOperation
from hal.spec import AdaptivePool2dSpec, BatchNormSpec, Conv2dSpec, EltwiseSpec, Pool2dSpec, QConv2dSpec
from hal.tuning.schema import KernelSchema

_Plan = TypeVar("_Plan")
#: entries a backend's plan caches hold before they start over
PLAN_CACHE_LIMIT = 4096

#: an opaque device allocation owned by a backend (numpy array, cl.Buffer, DeviceAllocation...).
Buffer = Any


#: the largest plane the global-pooling kernels build fixed (CUDA's ADAPT_GHW, OpenCL's
#: PIPE_HW): 7x7, 8x8 and smaller
FIXED_PLANE_MAX = 64


def fixed_plane_ok(hw: int, itemsize: int) -> bool:
    """Whether a global-pooling kernel may build planes of ``hw`` elements fixed, one plane
    per lane read from shared/local memory: small planes whose lane strides leave at most
    2-way bank conflicts among 32 lanes of 32 4-byte banks (lane l reads word
    l * hw * itemsize / 4 + j; a fixed build cannot rotate the start as a runtime loop does)."""
    if not 0 < hw <= FIXED_PLANE_MAX:
        return False
    banks: dict[int, set[int]] = {}
    for lane in range(32):
        word = lane * hw * itemsize // 4
        banks.setdefault(word % 32, set()).add(word)
    return max(len(words) for words in banks.values()) <= 2


@dataclass(frozen=True)
class DeviceInfo:
    """What hal knows about one device: identity, signature and limits."""

    backend: str
    index: int
    name: str
    vendor: str
    arch_family: str
    arch: str
    compute_units: int
    max_work_group: int
    local_mem_bytes: int
    global_mem_bytes: int
    fp16: bool
    subgroup: int
    platform: str = ""
    driver: str = ""
    extras: tuple[tuple[str, str], ...] = field(default=())

    @property
    def id(self) -> str:
        """Canonical device string: ``cpu``, ``opencl:1``, ``cuda:0``."""
        return "cpu" if self.backend == "cpu" else f"{self.backend}:{self.index}"

    def signature(self) -> dict[str, object]:
        """The fields tuning tables key on, as plain JSON values."""
        return {
            "backend": self.backend,
            "vendor": self.vendor,
            "arch_family": self.arch_family,
            "arch": self.arch,
            "device": self.name,
            "compute_units": self.compute_units,
            "max_work_group": self.max_work_group,
            "local_mem_bytes": self.local_mem_bytes,
            "fp16": self.fp16,
            "driver": self.driver,
        }


@dataclass(frozen=True)
class BackendProbe:
    """Result of looking for a backend: its devices, or why there are none."""

    available: bool
    reason: str
    devices: tuple[DeviceInfo, ...] = ()
    #: devices found but left out, each with why (an OpenCL driver that cannot build), e.g.
    #: ``{"opencl:1": "error: unknown target CPU 'generic'"}``
    skipped: Mapping[str, str] = field(default_factory=dict)


class Backend(ABC):
    """One device's runtime plus its kernel launchers."""

    #: "cpu", "opencl" or "cuda".
    name: ClassVar[str]
    #: the kernel folder this backend reads ("kernels_c", "kernels_cl", "kernels_cu").
    kernel_folder: ClassVar[str]

    #: True when ``pool2d`` also accepts int8/uint8 specs (quantized max and average pooling;
    #: the kernels take the spec's zero point as one more trailing int argument)
    quantized_pooling: ClassVar[bool] = False
    #: True when ``qconv2d`` is implemented (and ``schemas()`` has a "qconv2d" entry)
    quantized_conv: ClassVar[bool] = False
    #: True when pool2d, adaptive_pool2d, conv2d and batch_norm honour ``spec.relu``
    #: (kernels built with -DFUSE_RELU=1 apply ``v < 0 ? 0 : v`` before the store)
    fused_relu: ClassVar[bool] = False
    #: True when every float op (pool2d, adaptive_pool2d, conv2d, batch_norm, eltwise) takes
    #: bfloat16 activations (kernels built with -DDTYPE_BF16=1: 16-bit storage, float32 arithmetic)
    bfloat16: ClassVar[bool] = False

    def __init__(self, info: DeviceInfo) -> None:
        self._plans: dict[Hashable, Any] = {}
        self.info = info
        #: False (serving): a launcher whose parameters exceed a limit known only once the
        #: kernel is built (a kernel's own work-group limit) shrinks them, with one warning.
        #: True (the tuner, benchmark sweeps): it raises HalError instead, so that a
        #: measurement is never stored under parameters other than the ones that ran.
        self.exact_params = False
        #: parameter-set keys by identity (``_pkey``); the launch plans (``_planned``) are above
        self._param_keys: dict[int, tuple[Mapping[str, int], tuple[tuple[str, int], ...]]] = {}

    @property
    def info(self) -> DeviceInfo:
        """The device the launchers plan for."""
        return self._info

    @info.setter
    def info(self, value: DeviceInfo) -> None:
        # launch plans depend on it (compute units, limits): a replaced description (tests
        # emulate other devices so) must not be served plans made for the old one
        self._info = value
        self.drop_plans()

    # -- launch plans (helpers for launchers) ---------------------------------------------
    def drop_plans(self) -> None:
        """Forget every stored launch plan: the next call of each op plans (and looks its kernels up) again."""
        self._plans.clear()

    def _pkey(self, params: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
        """A plan-cache key for ``params``; the tuner hands out the same dict each call, so memoise by identity."""
        hit = self._param_keys.get(id(params))
        if hit is not None and hit[0] is params:
            return hit[1]
        key = tuple(sorted(params.items()))
        if len(self._param_keys) > PLAN_CACHE_LIMIT:
            self._param_keys.clear()
        self._param_keys[id(params)] = (params, key)  # holding params keeps its id from being reused
        return key

    def _planned(self, key: Hashable, make: Callable[[], _Plan]) -> _Plan:
        """The plan stored under ``key``, else ``make()`` (stored; errors are not)."""
        plan = self._plans.get(key)
        if plan is None:
            plan = make()
            if len(self._plans) > PLAN_CACHE_LIMIT:
                self._plans.clear()
            self._plans[key] = plan
        return plan

    # -- discovery -------------------------------------------------------------------
    @classmethod
    @abstractmethod
    def probe(cls) -> BackendProbe:
        """Find this backend's devices. Never raises; unavailability carries a reason."""

    @classmethod
    @abstractmethod
    def schemas(cls) -> Mapping[str, KernelSchema]:
        """Tunable parameters per kernel family: 'pool2d', 'adaptive_pool2d', 'conv2d', 'batch_norm'."""

    # -- runtime ---------------------------------------------------------------------
    @abstractmethod
    def allocate(self, nbytes: int) -> Buffer:
        """An uninitialised buffer of ``nbytes`` (>= 1); raises ``OutOfMemory``."""

    @abstractmethod
    def upload(self, array: np.ndarray) -> Buffer:
        """A new buffer holding a copy of the C-contiguous ``array``."""

    @abstractmethod
    def download(self, buffer: Buffer, out: np.ndarray) -> None:
        """Copy ``out.nbytes`` bytes from ``buffer`` into C-contiguous ``out`` (synchronous)."""

    @abstractmethod
    def copy(self, src: Buffer, dst: Buffer, nbytes: int) -> None:
        """Device-to-device copy of ``nbytes``."""

    @abstractmethod
    def synchronize(self) -> None:
        """Wait for every queued launch on this device."""

    def time_launches(
        self, launch: Callable[[], object], repeats: int, warmup: int = 2, *, queued: bool = False
    ) -> list[float]:
        """Seconds each of ``repeats`` calls of ``launch`` took, after ``warmup`` calls.

        The default times on the host around a synchronize; GPU backends override it
        with device events so host overhead stays out of kernel figures. ``queued`` asks
        for the kernels' own time even where one call's host time exceeds its device time
        (CUDA: the calls enqueued behind a spinning kernel; OpenCL: behind a marker that
        waits for a user event, so a multi-kernel op's figure loses the gaps in which the
        device waited for the host); the host clock here ignores it.
        """
        for _ in range(warmup):
            launch()
        self.synchronize()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            launch()
            self.synchronize()
            times.append(time.perf_counter() - start)
        return times

    def prebuild(self, specs: Sequence[object], param_sets: Sequence[Mapping[str, int]]) -> int:
        """Compile, ahead of use, the kernels ``specs`` need under each parameter set.

        Optional: the tuner calls it before evaluating a workload's candidates so that
        backends with slow compilers can build them in parallel into their disk cache.
        Returns the number of builds made; the default makes none.
        """
        return 0

    def launch_signature(self, spec: object, params: Mapping[str, int]) -> Hashable | None:
        """Optional: what a call of ``spec`` under ``params`` would launch (kernels, build
        options, geometry), as a hashable value; two parameter sets with equal signatures
        run the same work, so the tuner measures only the first. None (the default): unknown.
        """
        return None

    def built_signature(self, spec: object, params: Mapping[str, int]) -> Hashable | None:
        """Optional: as ``launch_signature``, with build options replaced by what they build (the
        compiled kernels' code), so that sets whose options differ only where a kernel never looks
        compare equal; may compile (into the backend's build cache). None (the default): unknown."""
        return None

    def capture(self, launch: Callable[[], None]) -> Callable[[], None] | None:
        """Optional: capture what ``launch()`` enqueues into a device-side graph.

        Returns a no-argument replay of the captured work, or None where the backend has
        no such graph (the default) or the capture failed; ``hal.capture`` then replays
        launcher by launcher.
        """
        return None

    # -- kernel launchers ------------------------------------------------------------
    @abstractmethod
    def pool2d(
        self, spec: Pool2dSpec, x: Buffer, y: Buffer, indices: Buffer | None, params: Mapping[str, int]
    ) -> None:
        """Max or average sliding-window pooling (``spec.kind``)."""

    @abstractmethod
    def adaptive_pool2d(
        self,
        spec: AdaptivePool2dSpec,
        x: Buffer,
        y: Buffer,
        indices: Buffer | None,
        params: Mapping[str, int],
    ) -> None:
        """Adaptive max or average pooling."""

    @abstractmethod
    def conv2d(
        self,
        spec: Conv2dSpec,
        x: Buffer,
        weight: Buffer,
        bias: Buffer | None,
        y: Buffer,
        params: Mapping[str, int],
    ) -> None:
        """2-D convolution; ``bias`` is float32 or None."""

    def eltwise(self, spec: EltwiseSpec, x: Buffer, y: Buffer, params: Mapping[str, int]) -> None:
        """Elementwise op (``spec.op``: "relu") over ``spec.count`` elements; x and y may be the same buffer."""
        raise UnsupportedOperation(f"{self.name}: elementwise {spec.op} is not implemented on this backend")

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
        """Quantized conv: int8/uint8 x and weight, int32 bias (or None), int32 per-channel
        weight zero points, float32 per-channel multipliers (None: ConvInteger, int32 out)."""
        raise UnsupportedOperation(f"{self.name}: quantized conv2d is not implemented on this backend")

    @staticmethod
    def qconv_output_kind(spec: QConv2dSpec, multiplier: Buffer | None) -> int:
        """The kernels' Y_KIND of a quantized conv: 0 int32 (ConvInteger), 1 int8, 2 uint8 (QLinearConv).

        A multiplier comes exactly with an int8/uint8 output; anything else is a caller's error.
        """
        kind = {np.dtype(np.int32): 0, np.dtype(np.int8): 1, np.dtype(np.uint8): 2}[np.dtype(spec.out_dtype)]
        if (multiplier is None) != (kind == 0):
            raise HalValueError("multiplier: needed exactly when the output is int8/uint8 (QLinearConv)")
        return kind

    @abstractmethod
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
        """BatchNorm forward; in training also updates the running statistics in place."""
