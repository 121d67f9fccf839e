"""The conformance cases with NaN and infinities in x (``Case.specials``)."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from hal import conformance

SPECIAL_CASES = [c for c in conformance.CASES if c.specials]


def test_special_cases_cover_every_float_op_family():
    """Average and global pooling, dense and depthwise conv, BatchNorm inference (max pooling has its NaN cases)."""
    assert {(c.op, c.kwargs.get("groups", 1) > 1) for c in SPECIAL_CASES} >= {
        ("avg_pool2d", False), ("adaptive_avg_pool2d", False), ("conv2d", False), ("conv2d", True),
        ("batch_norm", False)}


@pytest.mark.parametrize("case", SPECIAL_CASES, ids=[c.name for c in SPECIAL_CASES])
def test_special_inputs_hold_nan_and_both_infinities_in_every_float_dtype(case):
    for dtype in ("float32", "float16", "bfloat16"):
        x = conformance._inputs(case, np.random.default_rng(3), conformance.as_dtype(dtype))["x"].astype(np.float64)
        assert np.isnan(x).any() and np.isposinf(x).any() and np.isneginf(x).any(), dtype
        assert np.isfinite(x).mean() > 0.95  # the finite outputs still carry most of the check


@pytest.mark.parametrize("case", SPECIAL_CASES, ids=[c.name for c in SPECIAL_CASES])
def test_a_result_that_loses_nan_or_infinities_fails(case, monkeypatch):
    """On the CPU a special case passes; with the op's outputs' NaN and infinities turned into
    numbers (as a kernel multiplying an Inf by a structural zero does the other way round) it fails."""
    dev = hal.device("cpu")
    assert conformance.run_case(case, dev, "float32", "NCHW", np.random.default_rng(5)).ok
    run_op = conformance._run_op

    def finite(*args, **kwargs):
        out = run_op(*args, **kwargs)
        return {**out, "y": np.nan_to_num(out["y"], nan=0.0, posinf=0.0, neginf=0.0)}

    monkeypatch.setattr(conformance, "_run_op", finite)
    result = conformance.run_case(case, dev, "float32", "NCHW", np.random.default_rng(5))
    assert not result.ok and ("NaN" in result.detail or "infinity" in result.detail), result.detail
