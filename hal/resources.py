"""Kernel sources shipped as package data (``kernels_c``, ``kernels_cl``, ``kernels_cu``)."""

from __future__ import annotations

import hashlib
from functools import cache
from importlib import resources
from pathlib import Path

KERNEL_FOLDERS = ("kernels_c", "kernels_cl", "kernels_cu")


@cache
def kernel_dir(folder: str) -> Path:
    """Filesystem folder holding one backend's kernel sources (for ``#include``)."""
    if folder not in KERNEL_FOLDERS:
        raise ValueError(f"folder: expected one of {KERNEL_FOLDERS}, got {folder!r}")
    root = resources.files(f"hal.{folder}")
    path = Path(str(root))
    if not path.is_dir():  # zipped installs are not supported: kernels need real include paths
        raise FileNotFoundError(f"hal.{folder} is not a folder on disk: {root}")
    return path


@cache
def kernel_source(folder: str, name: str) -> str:
    """Text of one kernel source file."""
    return (kernel_dir(folder) / name).read_text(encoding="utf-8")


@cache
def folder_hash(folder: str) -> str:
    """sha256 over every source file of a kernel folder (sources and headers)."""
    digest = hashlib.sha256()
    for path in sorted(kernel_dir(folder).iterdir()):
        if path.is_file() and path.suffix in (".c", ".h", ".cl", ".cu", ".cuh"):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


HEADER_SUFFIXES = (".h", ".cuh")
SOURCE_SUFFIXES = (".c", ".cl", ".cu")


@cache
def family_hash(folder: str, kernel: str) -> str:
    """sha256 over the files one kernel family builds from: every header of the folder and
    the family's own sources (``<kernel>.*``, its quantized twin ``q<kernel>.*`` and their
    variants ``<kernel>_*.*`` / ``q<kernel>_*.*``, such as ``qpool2d_pack.cl``).

    Tuning entries record it, so that editing one family's kernels stales that family's
    measured entries only; a shared header stales them all.
    """
    return family_hash_in(kernel_dir(folder), kernel)


def family_hash_in(directory: Path, kernel: str) -> str:
    """``family_hash`` over the files of ``directory`` (another revision's kernel folder, say)."""
    digest = hashlib.sha256()
    for path in sorted(directory.iterdir()):
        own = path.suffix in SOURCE_SUFFIXES and (
            path.stem in (kernel, f"q{kernel}") or path.stem.startswith((f"{kernel}_", f"q{kernel}_"))
        )
        if path.is_file() and (own or path.suffix in HEADER_SUFFIXES):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()
