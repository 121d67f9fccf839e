"""Test configuration: a ``device`` parameter over every device hal finds.

Unavailable backends appear as skipped tests with the reason. Choose devices with
``--devices cpu,opencl:pocl`` or ``HAL_TEST_DEVICES``; select by backend with
``-m cpu``, ``-m opencl`` or ``-m cuda``.
"""

from __future__ import annotations

import os

import pytest

import hal


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--devices",
        default=os.environ.get("HAL_TEST_DEVICES", ""),
        help="comma-separated device strings to test (default: every device found)",
    )


def _device_params(config: pytest.Config) -> list:
    wanted = [s.strip() for s in config.getoption("--devices").split(",") if s.strip()]
    params = []
    if wanted:
        for spec in wanted:
            try:
                dev = hal.device(spec)
            except hal.HalError as exc:
                params.append(pytest.param(None, id=spec, marks=pytest.mark.skip(reason=str(exc))))
                continue
            params.append(pytest.param(dev, id=dev.id, marks=getattr(pytest.mark, dev.kind)))
        return params
    for status in hal.backend_status():
        if not status.available:
            marks = [pytest.mark.skip(reason=status.reason), getattr(pytest.mark, status.name)]
            params.append(pytest.param(None, id=status.name, marks=marks))
    for dev in hal.devices():
        params.append(pytest.param(dev, id=dev.id, marks=getattr(pytest.mark, dev.kind)))
    return params


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", _device_params(metafunc.config), scope="session")


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = []
    for status in hal.backend_status():
        if status.available:
            for info in status.devices:
                lines.append(f"hal device {info.id}: {info.name} ({info.vendor}, {info.arch})")
        else:
            lines.append(f"hal backend {status.name} unavailable: {status.reason}")
    return lines
