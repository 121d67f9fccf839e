"""Tuning tables: loading, keys, and the fallback chain.

Lookup order (the design brief's, after CLBlast and MIOpen):

1. ``user``        a user table entry for this exact device
2. ``device``      a shipped entry for this exact device
3. ``arch``        same architecture (``sm_90``, ``gfx90a``, ``x86-avx512``)
4. ``arch_family`` same family (``hopper``, ``rdna``, ``valhall``, ``x86``)
5. ``vendor``      same vendor
6. ``default``     the backend schema's defaults

User tables may hold entries at any level; at each level they win over shipped
ones. Every hit is validated against the kernel schema and the device's limits;
an invalid entry is skipped with one warning and the next level serves.
``HAL_TUNING=off`` serves defaults only; ``HAL_TUNING_PATH`` names extra user
table files (``os.pathsep``-separated) in addition to the user cache dir's.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hal.cache import cache_root
from hal.spec import AdaptivePool2dSpec, BatchNormSpec, Conv2dSpec, EltwiseSpec, Pool2dSpec, QConv2dSpec, Spec
from hal.tuning.schema import KernelSchema

if TYPE_CHECKING:
    from hal.backends.base import DeviceInfo

TABLE_FORMAT = "hal-tuning-table"
TABLE_VERSION = 1
LEVELS: tuple[str, ...] = ("user", "device", "arch", "arch_family", "vendor", "default")
#: the DeviceInfo field an entry's ``match`` is compared with, per level.
LEVEL_FIELDS: dict[str, str] = {"device": "name", "arch": "arch", "arch_family": "arch_family", "vendor": "vendor"}
BUCKETED = ("n", "c", "k", "h", "w", "out_h", "out_w")


def bucket(size: int) -> int:
    """Next power of two >= ``size`` (a tuning key's shape bucket)."""
    return 1 << max(int(size) - 1, 0).bit_length()


def _hw(pair: tuple[int, int]) -> str:
    return f"{pair[0]}x{pair[1]}"


def kernel_key(spec: Spec) -> tuple[str, dict[str, object]]:
    """(kernel family, key fields) for a spec; shape fields are bucketed."""
    if isinstance(spec, Pool2dSpec):
        return "pool2d", {
            "kind": spec.kind,
            "dtype": spec.dtype.name,
            "layout": spec.layout,
            "kernel": _hw(spec.kernel),
            "stride": _hw(spec.stride),
            "dilation": _hw(spec.dilation),
            "n": bucket(spec.n),
            "c": bucket(spec.c),
            "h": bucket(spec.in_h),
            "w": bucket(spec.in_w),
        }
    if isinstance(spec, AdaptivePool2dSpec):
        return "adaptive_pool2d", {
            "kind": spec.kind,
            "dtype": spec.dtype.name,
            "layout": spec.layout,
            "n": bucket(spec.n),
            "c": bucket(spec.c),
            "h": bucket(spec.in_h),
            "w": bucket(spec.in_w),
            "out_h": bucket(spec.out_h),
            "out_w": bucket(spec.out_w),
        }
    if isinstance(spec, EltwiseSpec):
        return "eltwise", {"op": spec.op, "dtype": spec.dtype.name, "n": bucket(spec.count)}
    if isinstance(spec, QConv2dSpec):
        _, key = kernel_key(spec.conv)
        return "qconv2d", {**key, "out_dtype": spec.out_dtype.name}
    if isinstance(spec, Conv2dSpec):
        groups = "dense" if spec.groups == 1 else ("depthwise" if spec.depthwise else "grouped")
        return "conv2d", {
            "dtype": spec.dtype.name,
            "layout": spec.layout,
            "kernel": _hw(spec.kernel),
            "stride": _hw(spec.stride),
            "dilation": _hw(spec.dilation),
            "groups": groups,
            "n": bucket(spec.n),
            "c": bucket(spec.c_in),
            "k": bucket(spec.c_out),
            "h": bucket(spec.in_h),
            "w": bucket(spec.in_w),
        }
    if isinstance(spec, BatchNormSpec):
        return "batch_norm", {
            "mode": "train" if spec.training else "infer",
            "dtype": spec.dtype.name,
            "layout": spec.layout,
            "n": bucket(spec.n),
            "c": bucket(spec.c),
            "h": bucket(spec.h),
            "w": bucket(spec.w),
        }
    raise TypeError(f"spec: expected a hal spec, got {type(spec).__name__}")


@dataclass(frozen=True)
class Entry:
    """One table row: where it applies, what it sets, and where it came from."""

    level: str
    match: str
    kernel: str
    key: tuple[tuple[str, object], ...]
    params: tuple[tuple[str, int], ...]
    provenance: str
    source: str
    #: the architecture it was measured on, when recorded: a device-level entry then also
    #: requires it (the same device name under another profile, e.g. an emulated one, differs)
    arch: str | None = None

    def applies(self, kernel: str, key: Mapping[str, object]) -> bool:
        """True when every key field this entry names equals the lookup key's."""
        return self.kernel == kernel and all(key.get(k) == v for k, v in self.key)


@dataclass(frozen=True)
class Resolved:
    """The parameters that serve one call, and which fallback level served them."""

    params: Mapping[str, int]
    level: str
    provenance: str
    source: str


def _parse_entry(raw: Any, backend: str, source: str) -> Entry:
    if not isinstance(raw, dict):
        raise ValueError("entry is not an object")
    level = raw.get("level")
    if level not in LEVEL_FIELDS:
        raise ValueError(f"level {level!r} not one of {sorted(LEVEL_FIELDS)}")
    match = raw.get("match")
    kernel = raw.get("kernel")
    key = raw.get("key", {})
    params = raw.get("params")
    provenance = raw.get("provenance")
    if not isinstance(match, str) or not isinstance(kernel, str):
        raise ValueError("match and kernel must be strings")
    if not isinstance(key, dict) or not isinstance(params, dict) or not params:
        raise ValueError("key must be an object and params a non-empty object")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in params.values()):
        raise ValueError("params values must be integers")
    if not isinstance(provenance, str) or not provenance.strip():
        raise ValueError("provenance missing: every entry must say where it came from")
    if raw.get("backend", backend) != backend:
        raise ValueError("entry for another backend")
    stale = _staleness(raw, backend)
    if stale:
        raise ValueError(f"stale: {stale}")
    return Entry(
        level=level,
        match=match,
        kernel=kernel,
        key=tuple(sorted(key.items())),
        params=tuple(sorted(params.items())),
        provenance=provenance,
        source=source,
        arch=raw.get("arch") if isinstance(raw.get("arch"), str) else None,
    )


#: backend -> kernel folder, for the staleness check of measured entries
KERNEL_FOLDERS = {"cpu": "kernels_c", "opencl": "kernels_cl", "cuda": "kernels_cu"}


def _staleness(raw: dict[str, Any], backend: str) -> str:
    """Why a measured entry no longer describes this hal (other version, other kernel source), or ''."""
    from hal import __version__
    from hal.resources import family_hash, folder_hash

    version = raw.get("hal_version")
    if version is not None and version != __version__:
        return f"measured with hal {version}, this is hal {__version__}"
    if backend not in KERNEL_FOLDERS:
        return ""
    folder = KERNEL_FOLDERS[backend]
    # source_hash covers the entry's own kernel family (resources.family_hash); kernel_hash,
    # from older tables, the whole folder
    recorded = raw.get("source_hash")
    if recorded is not None:
        kernel = raw.get("kernel")
        if not isinstance(kernel, str) or recorded != family_hash(folder, kernel):
            return f"the {kernel} kernel sources changed since it was measured"
        return ""
    recorded = raw.get("kernel_hash")
    if recorded is not None and recorded != folder_hash(folder):
        return "the kernel sources changed since it was measured"
    return ""


def parse_table(text: str, backend: str, source: str) -> list[Entry]:
    """Parse a table file; malformed entries are skipped with a warning, never fatal."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        warnings.warn(f"hal tuning: {source} is not valid JSON ({exc}); ignored", stacklevel=3)
        return []
    if not isinstance(doc, dict) or doc.get("format") != TABLE_FORMAT:
        warnings.warn(f"hal tuning: {source} is not a {TABLE_FORMAT} file; ignored", stacklevel=3)
        return []
    if doc.get("version") != TABLE_VERSION:
        warnings.warn(
            f"hal tuning: {source} has version {doc.get('version')!r}, expected {TABLE_VERSION}; ignored", stacklevel=3
        )
        return []
    if doc.get("backend") != backend:
        return []
    entries = []
    for i, raw in enumerate(doc.get("entries", [])):
        try:
            entries.append(_parse_entry(raw, backend, f"{source}#{i}"))
        except ValueError as exc:
            warnings.warn(f"hal tuning: {source} entry {i} skipped: {exc}", stacklevel=3)
    return entries


@cache
def shipped_entries(backend: str) -> tuple[Entry, ...]:
    """Entries of the table shipped with hal for ``backend``."""
    path = resources.files("hal.tuning") / "tables" / f"{backend}.json"
    if not path.is_file():
        return ()
    return tuple(parse_table(path.read_text(encoding="utf-8"), backend, f"shipped:{backend}.json"))


def stale_device_params(device: DeviceInfo, kernel: str, key: Mapping[str, object]) -> list[dict[str, int]]:
    """Parameters of the shipped and user device-level entries for this device and key that
    are stale (their kernel sources changed since they were measured). They serve nothing;
    the tuner re-measures them as contenders, since the last winner is a likely one again."""
    texts: list[tuple[str, str]] = []
    path = resources.files("hal.tuning") / "tables" / f"{device.backend}.json"
    if path.is_file():
        texts.append((path.read_text(encoding="utf-8"), "shipped"))
    for user in user_table_paths():
        with contextlib.suppress(OSError):
            if user.is_file():
                texts.append((user.read_text(encoding="utf-8"), str(user)))
    found: list[dict[str, int]] = []
    for text, _ in texts:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            continue
        if not isinstance(doc, dict) or doc.get("backend") != device.backend:
            continue
        for raw in doc.get("entries", []):
            if not isinstance(raw, dict) or raw.get("level") != "device" or not _staleness(raw, device.backend):
                continue
            fresh = {k: v for k, v in raw.items() if k not in ("source_hash", "kernel_hash", "hal_version")}
            try:
                entry = _parse_entry(fresh, device.backend, "stale")
            except ValueError:
                continue
            if entry.match == device.name and entry.applies(kernel, key) and entry.arch in (None, device.arch):
                params = dict(entry.params)
                if params not in found:
                    found.append(params)
    return found


def user_table_paths() -> list[Path]:
    """User table files: ``HAL_TUNING_PATH`` entries, then the user cache dir's tables."""
    paths = [Path(p) for p in os.environ.get("HAL_TUNING_PATH", "").split(os.pathsep) if p]
    root = cache_root() / "tuning"
    if root.is_dir():
        paths.extend(sorted(root.glob("*.json")))
    return paths


def user_entries(backend: str) -> list[Entry]:
    """Entries of every user table for ``backend`` (read each time the cache is cleared)."""
    entries: list[Entry] = []
    for path in user_table_paths():
        if path.is_dir():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            warnings.warn(f"hal tuning: cannot read {path} ({exc}); ignored", stacklevel=2)
            continue
        entries.extend(parse_table(text, backend, str(path)))
    return entries


def tuning_enabled() -> bool:
    """False when ``HAL_TUNING=off`` asks for backend defaults only."""
    return os.environ.get("HAL_TUNING", "").strip().lower() not in ("off", "0", "false", "no")


def _specificity(entry: Entry) -> int:
    return len(entry.key)


def _candidates(
    entries: Iterable[Entry], level: str, device: DeviceInfo, kernel: str, key: Mapping[str, object]
) -> list[Entry]:
    value = getattr(device, LEVEL_FIELDS[level])
    hits = [e for e in entries if e.level == level and e.match == value and e.applies(kernel, key)
            and (level != "device" or e.arch is None or e.arch == device.arch)]
    return sorted(hits, key=_specificity, reverse=True)


class Tuner:
    """Resolves parameters for one device: caches per (kernel, key), warns once per bad entry."""

    def __init__(self, device: DeviceInfo, schemas: Mapping[str, KernelSchema]) -> None:
        self.device = device
        self.schemas = schemas
        self._cache: dict[tuple[str, tuple[tuple[str, object], ...]], Resolved] = {}
        # specs are frozen and hashable: the per-call lookup is one dict probe
        self._spec_cache: dict[Spec, Resolved] = {}
        self._warned: set[str] = set()
        self._user: list[Entry] | None = None

    def clear(self) -> None:
        """Forget resolved parameters and re-read user tables on the next lookup."""
        self._cache.clear()
        self._spec_cache.clear()
        self._user = None

    def _user_entries(self) -> list[Entry]:
        if self._user is None:
            self._user = user_entries(self.device.backend)
        return self._user

    def resolve_spec(self, spec: Spec) -> Resolved:
        """Parameters for one spec."""
        hit = self._spec_cache.get(spec)
        if hit is not None:
            return hit
        kernel, key = kernel_key(spec)
        resolved = self.resolve(kernel, key)
        self._spec_cache[spec] = resolved
        return resolved

    def resolve(self, kernel: str, key: Mapping[str, object]) -> Resolved:
        """Walk the fallback chain for (kernel, key)."""
        cache_key = (kernel, tuple(sorted(key.items())))
        hit = self._cache.get(cache_key)
        if hit is not None:
            return hit
        schema = self.schemas.get(kernel)
        if schema is None:
            from hal.errors import UnsupportedOperation

            raise UnsupportedOperation(f"{self.device.id}: the {self.device.backend} backend has no {kernel} kernel")
        resolved = None
        if tuning_enabled():
            resolved = self._walk(schema, kernel, key)
        if resolved is None:
            resolved = Resolved(schema.defaults(), "default", "backend default", f"schema:{self.device.backend}")
        self._cache[cache_key] = resolved
        return resolved

    def _walk(self, schema: KernelSchema, kernel: str, key: Mapping[str, object]) -> Resolved | None:
        user = self._user_entries()
        shipped = shipped_entries(self.device.backend)
        chain: list[tuple[str, list[Entry]]] = [("user", _candidates(user, "device", self.device, kernel, key))]
        for level in ("device", "arch", "arch_family", "vendor"):
            hits = _candidates(user, level, self.device, kernel, key) if level != "device" else []
            hits += _candidates(shipped, level, self.device, kernel, key)
            chain.append((level, hits))
        for level, hits in chain:
            if not hits:
                continue
            entry = hits[0]  # the most specific entry at this level serves, or the level is skipped
            params = {**schema.defaults(), **dict(entry.params)}  # an entry may set only some parameters
            reason = schema.validate(params, self.device)
            if reason is None:
                return Resolved(params, level, entry.provenance, entry.source)
            if entry.source not in self._warned:
                self._warned.add(entry.source)
                warnings.warn(
                    f"hal tuning: {entry.source} ({level} level, {kernel}) is invalid on "
                    f"{self.device.name}: {reason}; falling back one level",
                    stacklevel=4,
                )
        return None
