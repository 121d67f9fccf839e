"""`hal conformance` on int8/uint8: the quantized cases against the quantized oracle."""

from __future__ import annotations

import json

import numpy as np
import pytest

import hal
from hal import conformance, reference
from hal.cli import main

OPENCL = [d for d in hal.devices() if d.kind == "opencl"]


def _run(capsys, *args):
    code = main(["conformance", "--json", "--seed", "4", *args])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("device_id", ["cpu", *(d.id for d in OPENCL)])
def test_quantized_cases_pass(capsys, device_id):
    code, doc = _run(capsys, "--device", device_id, "--dtype", "int8,uint8")
    assert code == 0 and doc["failed"] == 0 and doc["skipped"] == 0
    assert doc["passed"] == 2 * 2 * len(conformance.QUANT_CASES)
    assert {r["op"] for r in doc["results"]} == {"max_pool2d", "avg_pool2d", "conv2d"}


def test_a_result_one_step_off_fails(capsys, monkeypatch):
    """The check is exact for pooling: an oracle shifted by one step must fail every pooling case."""
    real = reference.quantized_pool2d_from_spec

    def shifted(spec, q):
        want, idx = real(spec, q)
        info = np.iinfo(want.dtype)
        return np.where(want == info.max, want - 1, want + 1).astype(want.dtype), idx

    monkeypatch.setattr(reference, "quantized_pool2d_from_spec", shifted)
    code, doc = _run(capsys, "--device", "cpu", "--dtype", "int8", "--layout", "NCHW")
    failed = {r["op"] for r in doc["results"] if not r["ok"]}
    assert code == 1 and failed == {"max_pool2d", "avg_pool2d"}


def test_a_backend_without_quantized_kernels_is_skipped_not_passed(capsys, monkeypatch):
    backend = type(hal.device("cpu").backend)
    monkeypatch.setattr(backend, "quantized_pooling", False)  # as the CUDA backend today
    monkeypatch.setattr(backend, "quantized_conv", False)
    code, doc = _run(capsys, "--device", "cpu", "--dtype", "int8", "--layout", "NCHW")
    assert code == 0 and doc["passed"] == 0 and doc["failed"] == 0
    assert doc["skipped"] == len(conformance.QUANT_CASES)
    assert all("not implemented" in r["skipped"] for r in doc["results"])


def test_an_unknown_dtype_is_a_clear_error(capsys):
    assert main(["conformance", "--device", "cpu", "--dtype", "int4"]) == 2
    assert "--dtype" in capsys.readouterr().out
