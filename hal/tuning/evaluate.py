"""Run one kernel with explicit parameters on a backend, check it, time it.

Used by the tuner's worker process: every candidate is checked against the
float64 oracle on fresh random inputs, with its outputs poisoned (NaN, or the
int minimum) and followed by a guard region that must come back untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hal import reference
from hal.backends.base import Backend, Buffer
from hal.conformance import Comparison, compare, compare_indices, conv_scale
from hal.spec import AdaptivePool2dSpec, BatchNormSpec, Conv2dSpec, Pool2dSpec, Spec

#: bytes of guard after every output
GUARD_BYTES = 4096


def _physical(a: np.ndarray, layout: str) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1) if layout == "NHWC" else a)


def _logical(a: np.ndarray, layout: str) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 3, 1, 2) if layout == "NHWC" else a)


def _poison(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Output poison plus guard, as one flat byte-compatible array."""
    count = int(np.prod(shape)) + GUARD_BYTES // dtype.itemsize
    fill = np.nan if dtype.kind == "f" else np.iinfo(dtype).min
    return np.full(count, fill, dtype=dtype)


@dataclass
class Problem:
    """Inputs and output buffers of one spec on one backend."""

    spec: Spec
    host: dict[str, np.ndarray]
    buffers: dict[str, Buffer]
    outputs: dict[str, tuple[tuple[int, ...], np.dtype]] = field(default_factory=dict)


def _out_shape(spec: Spec) -> tuple[int, int, int, int]:
    if isinstance(spec, BatchNormSpec):
        return spec.shape
    return spec.out_shape


def make_problem(backend: Backend, spec: Spec, rng: np.random.Generator) -> Problem:
    """Fresh random inputs (never zeros) for ``spec``, uploaded in its layout."""
    dt = spec.dtype
    layout = spec.layout
    host: dict[str, np.ndarray] = {}
    if isinstance(spec, Conv2dSpec):
        host["x"] = rng.standard_normal(spec.in_shape, dtype=np.float32).astype(dt)
        host["weight"] = (rng.standard_normal(spec.weight_shape) * 0.2).astype(dt)
        host["bias"] = rng.standard_normal(spec.c_out).astype(np.float32)
    elif isinstance(spec, BatchNormSpec):
        host["x"] = (1.0 + rng.standard_normal(spec.shape, dtype=np.float32)).astype(dt)
        for name, values in (("weight", rng.standard_normal(spec.c)), ("bias", rng.standard_normal(spec.c)),
                             ("running_mean", rng.standard_normal(spec.c)),
                             ("running_var", rng.uniform(0.5, 2.0, spec.c))):
            host[name] = values.astype(np.float32)
    else:
        host["x"] = rng.standard_normal(spec.in_shape, dtype=np.float32).astype(dt)
    buffers = {"x": backend.upload(_physical(host["x"], layout))}
    for name in ("weight", "bias", "running_mean", "running_var"):
        if name in host:
            buffers[name] = backend.upload(np.ascontiguousarray(host[name]))
    problem = Problem(spec, host, buffers)
    shape = _out_shape(spec)
    problem.outputs["y"] = (shape, dt)
    if isinstance(spec, (Pool2dSpec, AdaptivePool2dSpec)) and spec.kind == "max" and spec.return_indices:
        problem.outputs["indices"] = (shape, np.dtype(np.int64))
    return problem


def launcher(backend: Backend, problem: Problem, params: dict[str, int]) -> tuple[Callable[[], None], dict[str, Any]]:
    """A no-argument launch of ``problem`` with ``params``, and its poisoned output buffers."""
    spec = problem.spec
    outs = {name: backend.upload(_poison(shape, dt)) for name, (shape, dt) in problem.outputs.items()}
    b = problem.buffers
    if isinstance(spec, Pool2dSpec):
        def launch() -> None:
            backend.pool2d(spec, b["x"], outs["y"], outs.get("indices"), params)
    elif isinstance(spec, AdaptivePool2dSpec):
        def launch() -> None:
            backend.adaptive_pool2d(spec, b["x"], outs["y"], outs.get("indices"), params)
    elif isinstance(spec, Conv2dSpec):
        def launch() -> None:
            backend.conv2d(spec, b["x"], b["weight"], b["bias"], outs["y"], params)
    else:
        def launch() -> None:
            backend.batch_norm(spec, b["x"], outs["y"], b["weight"], b["bias"], b["running_mean"],
                               b["running_var"], params)
    return launch, outs


def read_outputs(backend: Backend, problem: Problem, outs: dict[str, Any]) -> tuple[dict[str, np.ndarray], str]:
    """Download outputs (logical order); second value names a damaged guard, or is empty."""
    result: dict[str, np.ndarray] = {}
    damaged = ""
    for name, (shape, dt) in problem.outputs.items():
        flat = _poison(shape, dt)
        backend.download(outs[name], flat)
        body, guard = flat[: int(np.prod(shape))], flat[int(np.prod(shape)):]
        poison = _poison((0,), dt)
        if guard.tobytes() != poison[: guard.size].tobytes():
            damaged = f"{name}: the kernel wrote past the end of its output"
        phys = shape if problem.spec.layout == "NCHW" else (shape[0], shape[2], shape[3], shape[1])
        result[name] = _logical(body.reshape(phys), problem.spec.layout)
    return result, damaged


def oracle(problem: Problem) -> dict[str, Any]:
    """The float64 oracle's outputs for ``problem`` (running statistics updated on copies)."""
    spec, host = problem.spec, problem.host
    x64 = host["x"].astype(np.float64)
    if isinstance(spec, (Pool2dSpec, AdaptivePool2dSpec)):
        y, idx = reference.pool2d_from_spec(spec, x64)
        return {"y": y, "indices": idx}
    if isinstance(spec, Conv2dSpec):
        w64 = host["weight"].astype(np.float64)
        b64 = host["bias"].astype(np.float64)
        y = reference.conv2d_from_spec(spec, x64, w64, b64)
        kw = {"stride": spec.stride, "padding": spec.pads, "dilation": spec.dilation, "groups": spec.groups}
        return {"y": y, "scale": conv_scale(x64, w64, b64, **kw)}
    assert isinstance(spec, BatchNormSpec)
    rm = host["running_mean"].astype(np.float64)
    rv = host["running_var"].astype(np.float64)
    y = reference.batch_norm_from_spec(spec, x64, rm, rv, host["weight"], host["bias"])
    return {"y": y}


def check(problem: Problem, got: dict[str, np.ndarray], want: dict[str, Any]) -> Comparison:
    """Compare a candidate's outputs with the oracle under the conformance tolerances."""
    spec = problem.spec
    if isinstance(spec, (Pool2dSpec, AdaptivePool2dSpec)):
        op = "max_pool2d" if spec.kind == "max" else "avg_pool2d"
        result = compare(op, spec.dtype, got["y"], want["y"])
        if result.ok and "indices" in got:
            result = compare_indices(got["indices"], want["indices"])
        return result
    if isinstance(spec, Conv2dSpec):
        return compare("conv2d", spec.dtype, got["y"], want["y"], want["scale"])
    return compare("batch_norm", spec.dtype, got["y"], want["y"])
