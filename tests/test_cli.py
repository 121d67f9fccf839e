"""The ``hal`` command."""

from __future__ import annotations

import json

import hal
from hal.cli import main


def test_devices_lists_devices_and_missing_backends(capsys):
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    for d in hal.devices():
        assert d.id in out
    for s in hal.backend_status():
        if not s.available:
            assert f"{s.name} unavailable" in out


def test_devices_json(capsys):
    assert main(["devices", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {d["id"] for d in doc["devices"]} == {d.id for d in hal.devices()}


def test_conformance_quick_json_on_cpu(capsys):
    code = main(["conformance", "--device", "cpu", "--quick", "--json", "--seed", "1", "--dtype", "float32",
                 "--layout", "NCHW"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["failed"] == 0 and doc["passed"] > 10 and code == 0
    assert {r["op"] for r in doc["results"]} == {"max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
                                                 "adaptive_max_pool2d", "conv2d", "batch_norm"}


def test_unknown_device_is_a_clear_error(capsys):
    assert main(["conformance", "--device", "tpu:3"]) == 2
    assert "unknown backend" in capsys.readouterr().err


def test_reasons_with_brackets_survive_the_terminal(capsys):
    """Install hints such as hal-kernels[cuda] must not be eaten as markup."""
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    for s in hal.backend_status():
        if not s.available and "[" in s.reason:
            assert s.reason.split("pip install ")[-1].strip("'") in out.replace("\n", "")


def test_unknown_dtype_is_a_clear_error(capsys):
    """conformance and tune name the --dtype values they do not know, and start nothing."""
    for command in (["conformance", "--device", "cpu"], ["tune", "--device", "cpu", "--size", "tiny"]):
        assert main([*command, "--dtype", "float32,bfloat17"]) == 2
        captured = capsys.readouterr()
        assert "--dtype" in captured.out + captured.err and "bfloat17" in captured.out + captured.err
