"""Run one kernel with explicit parameters on a backend, check it, time it.

Used by the tuner's worker process: every candidate is checked against the
float64 oracle on fresh random inputs, with its outputs poisoned (NaN, or the
int minimum) and followed by a guard region that must come back untouched.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hal import reference
from hal.backends.base import Backend, Buffer
from hal.conformance import Comparison, add_specials, compare, compare_indices, conv_scale
from hal.dtypes import is_float
from hal.spec import AdaptivePool2dSpec, BatchNormSpec, Conv2dSpec, Pool2dSpec
from hal.tuning.workloads import TunedSpec

#: bytes of guard after every output
GUARD_BYTES = 4096


def _physical(a: np.ndarray, layout: str) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1) if layout == "NHWC" else a)


def _logical(a: np.ndarray, layout: str) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 3, 1, 2) if layout == "NHWC" else a)


def _poison(shape: tuple[int, ...], dtype: np.dtype, high: bool = False) -> np.ndarray:
    """Output poison plus guard, as one flat byte-compatible array: NaN, or for integers the
    dtype's minimum (``high``: its maximum)."""
    count = int(np.prod(shape)) + GUARD_BYTES // dtype.itemsize
    fill = np.nan if is_float(dtype) else (np.iinfo(dtype).max if high else np.iinfo(dtype).min)
    return np.full(count, fill, dtype=dtype)


def poison_passes(dtype: np.dtype) -> tuple[bool, ...]:
    """The ``high`` flags a validation runs with: floats once (NaN equals no result); integers
    twice, poisoned with the minimum and then the maximum, since any integer may be a result
    and an unwritten element must differ from the oracle in one of the two."""
    return (False,) if is_float(np.dtype(dtype)) else (False, True)


#: poison arrays by (shape, dtype, high), read-only: every candidate uploads the same tens of
#: MB, and filling them anew took a fifth of a pooling candidate's host time
_POISON_CACHE: dict[tuple[tuple[int, ...], str, bool], np.ndarray] = {}


def _cached_poison(shape: tuple[int, ...], dtype: np.dtype, high: bool = False) -> np.ndarray:
    key = (tuple(shape), np.dtype(dtype).str, high)
    array = _POISON_CACHE.get(key)
    if array is None:
        if len(_POISON_CACHE) >= 8:
            _POISON_CACHE.clear()
        array = _poison(shape, np.dtype(dtype), high)
        array.setflags(write=False)  # uploads copy; nothing may write the shared poison
        _POISON_CACHE[key] = array
    return array


@dataclass
class Problem:
    """Inputs and output buffers of one spec on one backend."""

    spec: TunedSpec
    host: dict[str, np.ndarray]
    buffers: dict[str, Buffer]
    outputs: dict[str, tuple[tuple[int, ...], np.dtype]] = field(default_factory=dict)


def _out_shape(spec: TunedSpec) -> tuple[int, int, int, int]:
    if isinstance(spec, BatchNormSpec):
        return spec.shape
    return spec.out_shape


#: with ``specials``, the fraction of a float pooling or conv input set to NaN, +Inf and -Inf (at
#: least one of each): a candidate must give them the oracle's NaN and infinities. Tensor-core
#: depthwise (CUDA's DW_TC) made finite outputs NaN where an Inf met its banded matrix's zeros,
#: which random finite inputs never show
SPECIAL_FRACTION = 1e-3


def make_inputs(spec: TunedSpec, rng: np.random.Generator, specials: bool = False) -> dict[str, np.ndarray]:
    """Fresh random host inputs (never zeros) for ``spec``, in logical NCHW order; with
    ``specials`` (float pooling and conv only) a few of x's values NaN, +Inf and -Inf.

    They depend on the spec's geometry and dtype, not on its layout: one set (and one
    oracle) serves both layouts of a workload. BatchNorm takes no specials: one NaN makes
    its whole channel NaN in training, which would blind the check to that channel.
    """
    dt = spec.dtype
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
    elif dt.kind in "iu":  # int8/uint8 pooling: integers across the whole range
        info = np.iinfo(dt)
        host["x"] = rng.integers(info.min, info.max + 1, spec.in_shape).astype(dt)
    else:
        host["x"] = rng.standard_normal(spec.in_shape, dtype=np.float32).astype(dt)
    if specials and is_float(dt) and not isinstance(spec, BatchNormSpec):
        add_specials(host["x"], SPECIAL_FRACTION, rng)
    return host


def upload_problem(backend: Backend, spec: TunedSpec, host: dict[str, np.ndarray]) -> Problem:
    """``host`` (from :func:`make_inputs`) uploaded in ``spec``'s layout."""
    buffers = {"x": backend.upload(_physical(host["x"], spec.layout))}
    for name in ("weight", "bias", "running_mean", "running_var"):
        if name in host:
            buffers[name] = backend.upload(np.ascontiguousarray(host[name]))
    problem = Problem(spec, host, buffers)
    shape = _out_shape(spec)
    problem.outputs["y"] = (shape, spec.dtype)
    if isinstance(spec, (Pool2dSpec, AdaptivePool2dSpec)) and spec.kind == "max" and spec.return_indices:
        problem.outputs["indices"] = (shape, np.dtype(np.int64))
    return problem


def problem_bytes(problem: Problem) -> int:
    """Bytes one launch of ``problem`` reads and writes at least: its inputs and outputs."""
    inputs = sum(a.nbytes for a in problem.host.values())
    outputs = sum(int(np.prod(shape)) * np.dtype(dt).itemsize for shape, dt in problem.outputs.values())
    return inputs + outputs


def make_problem(backend: Backend, spec: TunedSpec, rng: np.random.Generator) -> Problem:
    """Fresh random inputs (never zeros) for ``spec``, uploaded in its layout."""
    return upload_problem(backend, spec, make_inputs(spec, rng))


def output_buffers(backend: Backend, problem: Problem) -> dict[str, Any]:
    """Plain output buffers for ``problem`` (timing: nothing reads them back, so no poison)."""
    return {name: backend.allocate(int(np.prod(shape)) * np.dtype(dt).itemsize)
            for name, (shape, dt) in problem.outputs.items()}


def launcher(
    backend: Backend, problem: Problem, params: dict[str, int], outs: dict[str, Any] | None = None,
    high: bool = False,
) -> tuple[Callable[[], None], dict[str, Any]]:
    """A no-argument launch of ``problem`` with ``params`` into ``outs``, or into freshly
    poisoned output buffers (with their guard regions; ``high``: see :func:`poison_passes`)
    when ``outs`` is None."""
    spec = problem.spec
    if outs is None:
        outs = {name: backend.upload(_cached_poison(shape, dt, high))
                for name, (shape, dt) in problem.outputs.items()}
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


def read_outputs(
    backend: Backend, problem: Problem, outs: dict[str, Any], high: bool = False
) -> tuple[dict[str, np.ndarray], str]:
    """Download outputs (logical order); second value names a damaged guard (poisoned as
    :func:`launcher` did with ``high``), or is empty."""
    result: dict[str, np.ndarray] = {}
    damaged = ""
    for name, (shape, dt) in problem.outputs.items():
        flat = np.empty(int(np.prod(shape)) + GUARD_BYTES // dt.itemsize, dtype=dt)
        backend.download(outs[name], flat)  # every byte is overwritten: no need to poison it
        body, guard = flat[: int(np.prod(shape))], flat[int(np.prod(shape)):]
        poison = _poison((0,), dt, high)
        if guard.tobytes() != poison[: guard.size].tobytes():
            damaged = f"{name}: the kernel wrote past the end of its output"
        phys = shape if problem.spec.layout == "NCHW" else (shape[0], shape[2], shape[3], shape[1])
        result[name] = _logical(body.reshape(phys), problem.spec.layout)
    return result, damaged


#: batch chunks the oracle computes on threads (numpy releases the GIL in its loops)
_ORACLE_THREADS = max(1, min(8, os.cpu_count() or 1))


def _by_batch_chunks(fn: Callable[[np.ndarray], Any], x: np.ndarray) -> list[Any]:
    """``fn`` over slices of ``x`` along N, on threads; results in batch order."""
    n = x.shape[0]
    chunks = min(n, _ORACLE_THREADS)
    if chunks <= 1 or x.size < (1 << 20):
        return [fn(x)]
    bounds = np.linspace(0, n, chunks + 1).astype(int)
    with ThreadPoolExecutor(max_workers=chunks) as pool:
        return list(pool.map(lambda i: fn(x[bounds[i]:bounds[i + 1]]), range(chunks)))


def oracle(problem: Problem) -> dict[str, Any]:
    """The float64 oracle's outputs for ``problem`` (running statistics updated on copies).

    Pooling is independent along N, so large pooling oracles run in batch chunks on
    threads (a 64x64x128x128 one took 9 s on one core); conv's einsum is BLAS-threaded.
    """
    spec, host = problem.spec, problem.host
    if np.dtype(spec.dtype).kind in "iu":  # the quantized oracle: exact integers
        assert isinstance(spec, (Pool2dSpec, AdaptivePool2dSpec))  # integer workloads are pooling (QUANT_FAMILIES)
        parts = _by_batch_chunks(lambda xs: reference.quantized_pool2d_from_spec(spec, xs), host["x"])
        y = np.concatenate([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
        idx = np.concatenate([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
        return {"y": y, "indices": idx}
    x64 = host["x"].astype(np.float64)
    if isinstance(spec, (Pool2dSpec, AdaptivePool2dSpec)):
        parts = _by_batch_chunks(lambda xs: reference.pool2d_from_spec(spec, xs), x64)
        y = np.concatenate([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
        idx = np.concatenate([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
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
    if np.dtype(spec.dtype).kind in "iu":  # integers: exactly the quantized oracle's
        bad = np.argwhere(np.asarray(got["y"]) != want["y"])
        if bad.size == 0 and "indices" in got:
            return compare_indices(got["indices"], want["indices"])
        if bad.size:
            k = tuple(int(i) for i in bad[0])
            return Comparison(False, float("inf"), f"at {k}: got {got['y'][k]}, oracle {want['y'][k]} "
                                                  f"({len(bad)} differ)")
        return Comparison(True, 0.0)
    if isinstance(spec, (Pool2dSpec, AdaptivePool2dSpec)):
        op = "max_pool2d" if spec.kind == "max" else "avg_pool2d"
        result = compare(op, spec.dtype, got["y"], want["y"])
        if result.ok and "indices" in got:
            result = compare_indices(got["indices"], want["indices"])
        return result
    if isinstance(spec, Conv2dSpec):
        return compare("conv2d", spec.dtype, got["y"], want["y"], want["scale"])
    return compare("batch_norm", spec.dtype, got["y"], want["y"])
