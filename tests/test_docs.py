"""Docs that must stay true: the tolerance table and the README example."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hal.conformance import TOLERANCES

ROOT = Path(__file__).resolve().parent.parent


def test_conformance_doc_repeats_the_tolerances():
    text = (ROOT / "docs" / "conformance.md").read_text()
    rows = re.findall(r"^\|\s*(\w+)\s*\|\s*(b?float\d+)\s*\|\s*([\d.e-]+)\s*\|\s*([\d.e-]+)\s*\|", text, re.M)
    documented = {(op, dt): (float(r), float(a)) for op, dt, r, a in rows}
    assert documented == {k: (v.rtol, v.atol) for k, v in TOLERANCES.items()}


def test_readme_example_runs():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    if not blocks:
        pytest.fail("README has no python example")
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
