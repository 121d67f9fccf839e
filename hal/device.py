"""Devices: discovery, naming and selection.

Device strings: ``"cpu"``, ``"opencl:N"``, ``"cuda:N"``, ``"opencl:<substring>"``
(matched case-insensitively against platform and device names, as PyOpenCL's
``PYOPENCL_CTX`` does: ``"opencl:pocl"``, ``"opencl:nvidia"``), a bare backend
name for its first device, and ``"auto"``.

Selection order: an explicit ``device=`` argument, then ``with hal.use_device(...)``
(a context variable, so threads and async tasks keep their own), then the
``HAL_DEVICE`` environment variable, then the first available of CUDA, an
OpenCL GPU, and the CPU.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache

from hal.backends import BACKEND_MODULES, backend_class
from hal.backends.base import Backend, BackendProbe, DeviceInfo
from hal.errors import BackendUnavailable, DeviceNotFound, HalError, HalTypeError
from hal.tuning.table import Tuner

_selected: contextvars.ContextVar[Device | None] = contextvars.ContextVar("hal_device", default=None)
_lock = threading.Lock()


@dataclass(frozen=True)
class BackendStatus:
    """Whether one backend can run here, why not, and its devices."""

    name: str
    available: bool
    reason: str
    devices: tuple[DeviceInfo, ...]
    #: devices found but left out, each with why (see ``BackendProbe.skipped``)
    skipped: Mapping[str, str] = field(default_factory=dict)


class Device:
    """One device: its identity and limits (``info``), its runtime and its tuner."""

    def __init__(self, info: DeviceInfo, backend_cls: type[Backend]) -> None:
        self.info = info
        self._backend_cls = backend_cls
        self._backend: Backend | None = None
        self._tuner: Tuner | None = None
        self._hash = hash(info.id)  # devices key the ops' per-call plans: hashed once

    @property
    def id(self) -> str:
        """Canonical name: ``cpu``, ``opencl:0``, ``cuda:0``."""
        return self.info.id

    @property
    def kind(self) -> str:
        """Backend name."""
        return self.info.backend

    @property
    def backend(self) -> Backend:
        """The device's runtime, created on first use."""
        if self._backend is None:
            with _lock:
                if self._backend is None:
                    try:
                        self._backend = self._backend_cls(self.info)
                    except HalError:
                        raise
                    except Exception as exc:  # driver errors at context creation
                        raise BackendUnavailable(f"{self.id}: could not initialise ({exc})") from exc
        return self._backend

    @property
    def tuner(self) -> Tuner:
        """Parameter lookup for this device (tuning tables + fallback chain)."""
        if self._tuner is None:
            self._tuner = Tuner(self.info, self._backend_cls.schemas())
        return self._tuner

    def synchronize(self) -> None:
        """Wait until all queued work on this device has finished."""
        self.backend.synchronize()

    def __repr__(self) -> str:
        return f"hal.Device('{self.id}', {self.info.name!r})"

    def __str__(self) -> str:
        return self.id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self) -> int:
        return self._hash


def _probe(name: str) -> BackendProbe:
    try:
        return backend_class(name).probe()
    except Exception as exc:  # a probe must never take hal down with it
        return BackendProbe(False, f"{name}: probing failed ({type(exc).__name__}: {exc})")


@lru_cache(maxsize=1)
def _registry() -> tuple[tuple[BackendStatus, ...], tuple[Device, ...]]:
    statuses = []
    found: list[Device] = []
    for name in BACKEND_MODULES:
        probe = _probe(name)
        statuses.append(BackendStatus(name, probe.available, probe.reason, tuple(probe.devices), dict(probe.skipped)))
        if probe.available:
            cls = backend_class(name)
            found.extend(Device(info, cls) for info in probe.devices)
    return tuple(statuses), tuple(found)


def refresh() -> None:
    """Forget discovered devices (probe again on next use)."""
    _registry.cache_clear()


def backend_status() -> list[BackendStatus]:
    """Every backend with its availability, reason and devices."""
    return list(_registry()[0])


def devices() -> list[Device]:
    """Every available device, CUDA first, then OpenCL, then the CPU."""
    return list(_registry()[1])


def _is_gpu(info: DeviceInfo) -> bool:
    """A GPU by the driver's own device type (an emulated profile changes vendor and arch, not this)."""
    if info.backend == "cuda":
        return True
    if info.backend != "opencl":
        return False
    kind = dict(info.extras).get("device_type")
    if kind is not None:
        return kind == "GPU"
    return info.vendor != "pocl" and "cpu" not in info.arch


def is_gpu(device: Device) -> bool:
    """True for CUDA devices and OpenCL GPUs."""
    return _is_gpu(device.info)


def _available_text() -> str:
    found = ", ".join(f"{d.id} ({d.info.name})" for d in devices()) or "none"
    missing = "; ".join(s.reason for s in backend_status() if not s.available)
    return f"available: {found}" + (f"; unavailable: {missing}" if missing else "")


def _auto() -> Device:
    found = devices()
    for wanted in ("cuda", "opencl-gpu", "cpu", "opencl"):
        for d in found:
            if wanted == "opencl-gpu":
                if d.kind == "opencl" and _is_gpu(d.info):
                    return d
            elif d.kind == wanted:
                return d
    raise DeviceNotFound(f"no device found; {_available_text()}")


def _parse(spec: str) -> Device:
    text = spec.strip()
    lowered = text.lower()
    if lowered in ("", "auto"):
        return _auto()
    name, _, rest = lowered.partition(":")
    if name not in BACKEND_MODULES:
        raise DeviceNotFound(
            f"device: unknown backend in {spec!r}; expected 'cpu', 'opencl[:N|:name]', 'cuda[:N]' or 'auto'; "
            + _available_text()
        )
    status = next(s for s in backend_status() if s.name == name)
    if not status.available:
        raise BackendUnavailable(status.reason)
    candidates = [d for d in devices() if d.kind == name]
    if rest == "":
        return candidates[0]
    if rest.isdigit():
        for d in candidates:
            if d.info.index == int(rest):
                return d
        raise DeviceNotFound(f"device: no {name} device with index {rest}; {_available_text()}")
    for d in candidates:
        haystack = f"{d.info.platform} {d.info.name} {d.info.vendor} {d.info.arch}".lower()
        if rest in haystack:
            return d
    raise DeviceNotFound(f"device: no {name} device matches {rest!r}; {_available_text()}")


def device(spec: str | Device | None = None) -> Device:
    """Resolve ``spec`` (or the current selection when None) to a Device."""
    if isinstance(spec, Device):
        return spec
    if spec is None:
        current = _selected.get()
        if current is not None:
            return current
        env = os.environ.get("HAL_DEVICE", "").strip()
        return _parse(env) if env else _auto()
    if not isinstance(spec, str):
        raise HalTypeError(f"device: expected a device string such as 'cpu' or 'opencl:0', got {spec!r}")
    return _parse(spec)


@contextmanager
def use_device(spec: str | Device) -> Iterator[Device]:
    """Make ``spec`` the default device inside the ``with`` block."""
    dev = device(spec)
    token = _selected.set(dev)
    try:
        yield dev
    finally:
        _selected.reset(token)
