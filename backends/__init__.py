"""hal's backends: ``cpu`` (C kernels), ``opencl`` (PyOpenCL) and ``cuda`` (PyCUDA).

Importing this package imports no GPU library; each backend module imports its
driver lazily inside ``probe``.
"""

from __future__ import annotations

import importlib

from hal.backends.base import Backend

#: backend name -> module path; order is the automatic selection order's basis.
BACKEND_MODULES: dict[str, str] = {
    "cuda": "hal.backends.cuda",
    "opencl": "hal.backends.opencl",
    "cpu": "hal.backends.cpu",
}


def backend_class(name: str) -> type[Backend]:
    """The Backend subclass registered under ``name`` (imports its module)."""
    module = importlib.import_module(BACKEND_MODULES[name])
    cls: type[Backend] = module.BACKEND
    return cls
