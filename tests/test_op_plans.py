"""The ops' per-call plans (``hal.ops._PLANS``): a repeated call takes the stored spec and
must behave exactly like the first one: same results, same errors, nothing shared across
layouts, dtypes, devices or argument types."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from hal import ops, reference
from hal.conformance import compare, compare_indices
from hal.errors import HalValueError
from hal.tensor import poison_outputs

SHAPE = (3, 5, 13, 11)  # a multiple of no tile or vector width


def _check(op: str, dtype: str, got: np.ndarray, want: np.ndarray) -> None:
    result = compare(op, dtype, got, want)
    assert result.ok, f"{op}: {result.detail}"


def _fresh(device: str, seed: int, dtype: str = "float32", layout: str = "NCHW") -> tuple[hal.Tensor, np.ndarray]:
    host = np.random.default_rng(seed).standard_normal(SHAPE).astype(dtype)
    return hal.asarray(host, device=device, layout=layout), host


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_repeated_calls_match_the_oracle(device: str, layout: str) -> None:
    ops._PLANS.clear()
    for seed in (1, 2, 3):  # the first call stores the plans, the others take them
        x, host = _fresh(device, seed, layout=layout)
        with poison_outputs():
            y, idx = hal.max_pool2d(x, 3, 2, 1, return_indices=True)
            a = hal.avg_pool2d(x, (3, 2), 2, (1, 0), count_include_pad=False)
            g = hal.adaptive_avg_pool2d(x, (4, 3))
            r = hal.max_pool2d(x, 2, relu=True)
        want, want_idx = reference.max_pool2d(host, 3, 2, 1, return_indices=True)
        _check("max_pool2d", "float32", y.numpy(), want)
        assert compare_indices(idx.numpy(), want_idx).ok
        _check("avg_pool2d", "float32", a.numpy(),
               reference.avg_pool2d(host, (3, 2), 2, (1, 0), count_include_pad=False))
        _check("adaptive_avg_pool2d", "float32", g.numpy(), reference.adaptive_avg_pool2d(host, (4, 3)))
        _check("max_pool2d", "float32", r.numpy(), np.maximum(reference.max_pool2d(host, 2), 0.0))
        assert y.layout == layout and y.dtype == np.float32
    assert len(ops._PLANS) >= 4


def test_plans_keep_argument_types(device: str) -> None:
    ops._PLANS.clear()
    x, _ = _fresh(device, 4)
    hal.max_pool2d(x, 3)
    for bad in (3.0, True, (3, 3.0)):  # equal to 3 as dict keys; still refused
        with pytest.raises(HalValueError, match="kernel_size"):
            hal.max_pool2d(x, bad)


def test_errors_are_not_stored(device: str) -> None:
    ops._PLANS.clear()
    x, _ = _fresh(device, 5)
    for _ in range(2):
        with pytest.raises(HalValueError, match="kernel_size"):
            hal.max_pool2d(x, 30)  # a window larger than the image
    assert not ops._PLANS


def test_plans_are_per_dtype_and_layout(device: str) -> None:
    ops._PLANS.clear()
    for dtype in ("float32", "float16"):
        for layout in ("NCHW", "NHWC"):
            x, host = _fresh(device, 6, dtype, layout)
            y = hal.max_pool2d(x, 3, 2)
            assert (y.dtype, y.layout) == (np.dtype(dtype), layout)
            _check("max_pool2d", dtype, y.numpy(), reference.max_pool2d(host.astype(np.float64), 3, 2))
    assert len(ops._PLANS) == 4


def test_unhashable_arguments_take_the_validated_path(device: str) -> None:
    ops._PLANS.clear()
    x, host = _fresh(device, 7)
    y = hal.max_pool2d(x, [3, 2], [2, 1])
    _check("max_pool2d", "float32", y.numpy(), reference.max_pool2d(host, (3, 2), (2, 1)))
    assert not ops._PLANS


def test_plan_store_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    ops._PLANS.clear()
    monkeypatch.setattr(ops, "_PLAN_LIMIT", 3)
    x, _ = _fresh("cpu", 8)
    for k in (1, 2, 3, 4, 5):
        hal.max_pool2d(x, k)
    assert 0 < len(ops._PLANS) <= 3
