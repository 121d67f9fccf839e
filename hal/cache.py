"""Where hal keeps compiled kernels: ``HAL_CACHE_DIR`` or the platform's user cache dir.

``HAL_DISABLE_CACHE=1`` turns every on-disk kernel cache off (hal's own C cache,
and PyOpenCL's and PyCUDA's compile caches as the backends pass it on).
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def cache_disabled() -> bool:
    """True when ``HAL_DISABLE_CACHE`` is set to a true value."""
    return os.environ.get("HAL_DISABLE_CACHE", "").strip().lower() not in ("", "0", "false", "no", "off")


def cache_root() -> Path:
    """``HAL_CACHE_DIR``, or the platform's user cache dir for hal."""
    return Path(os.environ.get("HAL_CACHE_DIR") or platformdirs.user_cache_dir("hal", appauthor=False))


def cache_dir(sub: str) -> Path:
    """The cache folder ``sub`` (created), under ``HAL_CACHE_DIR`` or the user cache dir."""
    path = cache_root() / sub
    path.mkdir(parents=True, exist_ok=True)
    return path
