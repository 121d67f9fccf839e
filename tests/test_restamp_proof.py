"""tools/restamp_proof.py: which stale measured OpenCL entries an edit left unchanged."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import restamp_proof as R  # noqa: E402

sys.path.pop(0)

CLANG = next((c for c in map(shutil.which, R.CLANGS) if c), None)
needs_clang = pytest.mark.skipif(CLANG is None, reason="no clang to preprocess OpenCL with")


def _measured() -> list[dict]:
    doc = json.loads(R.TABLE.read_text())
    return [e for e in doc["entries"] if "source_hash" in e]


def _read(name: str) -> str:
    from hal.resources import kernel_dir

    return (kernel_dir("kernels_cl") / name).read_text()


def test_every_measured_entry_plans_its_builds():
    """Each measured entry of the shipped OpenCL table (the H200's and PoCL's) has builds the
    tool can compare: a device it knows, keys it can turn into specs."""
    entries = _measured()
    assert len({e["match"] for e in entries}) >= 2
    for entry in entries:
        assert R.builds(entry), (entry["match"], entry["kernel"], entry["key"])


@needs_clang
def test_unchanged_sources_leave_every_build_the_same():
    """Every distinct build of every measured entry preprocesses to the same text from the same sources."""
    pairs = {(f, tuple(sorted(d.items()))): (f, d) for e in _measured() for f, d in R.builds(e)}
    assert R.same_builds(CLANG, list(pairs.values()), _read, _read) == []


@needs_clang
def test_the_comparison_sees_code_and_ignores_what_a_build_does_not_compile():
    """A kernel appended to pool2d.cl changes every pool2d build; the same kernel inside
    ``#if DTYPE_BF16`` changes none of the float32/float16 ones, nor does a comment."""
    pool = [(f, d) for f, d in R.builds(next(e for e in _measured() if e["kernel"] == "pool2d"))]
    probe = "\n__kernel void hal_restamp_probe(__global float* p) { p[0] = 1.0f; }\n"

    def edited(extra: str):
        return lambda name: _read(name) + (extra if name == "pool2d.cl" else "")

    assert pool and all(not d.get("DTYPE_BF16") for _, d in pool)
    assert len(R.same_builds(CLANG, pool, _read, edited(probe))) == len(pool)
    assert R.same_builds(CLANG, pool, _read, edited(f"\n#if DTYPE_BF16{probe}#endif\n")) == []
    assert R.same_builds(CLANG, pool, _read, edited("\n/* a comment */\n")) == []


@needs_clang
def test_apply_restamps_an_entry_whose_builds_did_not_change(tmp_path, monkeypatch):
    """With the current sources pretended new (another hash) and a copy of them as the base the
    entry was fresh against, --apply gives the entry the current hash and says why in its
    provenance; an entry stale at the base too keeps its hash."""
    import hal.resources
    from hal.resources import kernel_dir

    real = hal.resources.family_hash
    entry = next(e for e in _measured() if e["kernel"] == "pool2d")
    fresh = {**entry, "source_hash": real("kernels_cl", "pool2d")}
    stale = {**entry, "source_hash": "0" * 64}
    table = tmp_path / "opencl.json"
    table.write_text(json.dumps({**json.loads(R.TABLE.read_text()), "entries": [fresh, stale]}))
    monkeypatch.setattr(hal.resources, "family_hash", lambda folder, kernel: "f" + real(folder, kernel)[1:])
    base = tmp_path / "kernels_cl"
    shutil.copytree(kernel_dir("kernels_cl"), base)
    assert R.main(["--base-dir", str(base), "--table", str(table), "--apply"]) == 0
    got = json.loads(table.read_text())["entries"]
    assert got[0]["source_hash"] == "f" + real("kernels_cl", "pool2d")[1:]
    assert "tools/restamp_proof.py" in got[0]["provenance"]
    assert got[1]["source_hash"] == "0" * 64 and got[1]["provenance"] == entry["provenance"]
