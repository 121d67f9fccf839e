"""Exceptions raised by hal.

Every hal error derives from :class:`HalError`; argument errors are also
:class:`ValueError` (or :class:`TypeError`) so code written against
``torch.nn.functional`` keeps catching what it expects.
"""

from __future__ import annotations

from collections.abc import Mapping


class HalError(Exception):
    """Base class of every error hal raises on purpose."""


class BackendUnavailable(HalError):
    """A backend cannot run here; the message says why and how to get it."""


class DeviceNotFound(HalError, LookupError):
    """A device string matched no device; the message lists what is available."""


class KernelCompileError(HalError):
    """A kernel failed to build. Carries the backend, file, defines, options and log."""

    def __init__(
        self,
        backend: str,
        file: str,
        defines: Mapping[str, object],
        options: list[str],
        log: str,
    ) -> None:
        self.backend = backend
        self.file = file
        self.defines = dict(defines)
        self.options = list(options)
        self.log = log
        define_text = " ".join(f"-D{k}={v}" for k, v in sorted(self.defines.items()))
        super().__init__(
            f"{backend}: building {file} failed\n"
            f"  defines: {define_text or '(none)'}\n"
            f"  options: {' '.join(self.options) or '(none)'}\n"
            f"  log:\n{log.rstrip()}"
        )


class LaunchLimitExceeded(HalError):
    """Parameters a compiled kernel cannot launch with as given (its own work-group or local-memory limit).

    Raised only where the backend was told not to shrink them (``Backend.exact_params``,
    set by the tuner): a per-kernel limit is known only after the build, so such a
    candidate is infeasible rather than wrong.
    """


class OutOfMemory(HalError, MemoryError):
    """A device allocation failed; the message names the size and the device."""

    def __init__(self, device: str, nbytes: int, detail: str = "") -> None:
        self.device = device
        self.nbytes = nbytes
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"{device}: out of device memory allocating {nbytes} bytes "
            f"({nbytes / 2**20:.1f} MiB){extra}"
        )


class UnsupportedOperation(HalError, NotImplementedError):
    """This backend does not implement the requested op or dtype; the message says which."""


class HalValueError(HalError, ValueError):
    """An argument has a bad value. The message names the argument."""


class HalTypeError(HalError, TypeError):
    """An argument has the wrong type. The message names the argument."""


def bad_arg(name: str, expected: str, got: object) -> HalValueError:
    """Build the standard argument error: ``name: expected ..., got ...``."""
    return HalValueError(f"{name}: expected {expected}, got {got!r}")
