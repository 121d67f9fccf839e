"""The tuning fallback chain with fake device signatures (no kernels run)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from hal.backends.base import DeviceInfo
from hal.spec import TensorGeometry, pool2d_spec
from hal.tuning import table
from hal.tuning.schema import KernelSchema, Param
from hal.tuning.table import Tuner, bucket, kernel_key


def wg_limit(params, device):
    return None if params["WG"] <= device.max_work_group else f"WG {params['WG']} > max {device.max_work_group}"


SCHEMA = KernelSchema("fake", "pool2d", (Param("WG", (32, 64, 128, 256, 512), 64), Param("VEC", (1, 2, 4), 1)),
                      (wg_limit,))
SCHEMAS = {"pool2d": SCHEMA}


def info(name="Fake GPU X1", arch="fk1", family="fakefam", vendor="fakeco", max_wg=256):
    return DeviceInfo("fake", 0, name, vendor, family, arch, 8, max_wg, 65536, 2**30, False, 32)


def spec(h=100):
    g = TensorGeometry(2, 8, h, h, "NCHW", np.dtype(np.float32))
    return pool2d_spec("max", g, 3, 2, 1, 1, False, True, None, False)


def entry(level, match, wg, key=None, provenance="test entry"):
    return {"level": level, "match": match, "kernel": "pool2d", "key": key or {}, "params": {"WG": wg},
            "provenance": provenance}


def write(path, entries, backend="fake"):
    path.write_text(json.dumps({"format": "hal-tuning-table", "version": 1, "backend": backend,
                                "entries": entries}))


@pytest.fixture
def shipped(monkeypatch, tmp_path):
    """Replace the shipped table with one that has an entry at every level."""
    entries = [
        entry("device", "Fake GPU X1", 512, provenance="measured on Fake GPU X1"),
        entry("arch", "fk1", 128),
        entry("arch_family", "fakefam", 32),
        entry("vendor", "fakeco", 256),
    ]
    monkeypatch.setattr(table, "shipped_entries",
                        lambda backend: tuple(table.parse_table(json.dumps(
                            {"format": "hal-tuning-table", "version": 1, "backend": "fake", "entries": entries}),
                            "fake", "shipped:fake.json")))
    monkeypatch.setenv("HAL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HAL_TUNING_PATH", raising=False)
    monkeypatch.delenv("HAL_TUNING", raising=False)
    return tmp_path


def test_bucket():
    assert [bucket(v) for v in (1, 2, 3, 4, 5, 112, 128, 129)] == [1, 2, 4, 4, 8, 128, 128, 256]


def test_key_fields_and_buckets():
    kernel, key = kernel_key(spec(100))
    assert kernel == "pool2d"
    assert key["kernel"] == "3x3" and key["stride"] == "2x2" and key["h"] == 128 and key["n"] == 2


@pytest.mark.parametrize(
    "dev,level,wg",
    [
        (info(max_wg=1024), "device", 512),
        (info(name="Fake GPU X2"), "arch", 128),
        (info(name="Fake GPU X3", arch="fk2"), "arch_family", 32),
        (info(name="Other", arch="o1", family="otherfam"), "vendor", 256),
        (info(name="Other", arch="o1", family="otherfam", vendor="nobody"), "default", 64),
    ],
)
def test_every_fallback_level(shipped, dev, level, wg):
    resolved = Tuner(dev, SCHEMAS).resolve_spec(spec())
    assert resolved.level == level
    assert resolved.params["WG"] == wg
    assert resolved.params["VEC"] == 1  # partial entries complete from the defaults


def test_user_table_wins(shipped, monkeypatch):
    user = shipped / "user.json"
    write(user, [entry("device", "Fake GPU X1", 32, provenance="hal tune, today")])
    monkeypatch.setenv("HAL_TUNING_PATH", str(user))
    resolved = Tuner(info(max_wg=1024), SCHEMAS).resolve_spec(spec())
    assert (resolved.level, resolved.params["WG"]) == ("user", 32)


def test_entry_over_device_limit_steps_down_with_one_warning(shipped):
    tuner = Tuner(info(max_wg=256), SCHEMAS)  # the device entry asks for 512
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = tuner.resolve_spec(spec(100))
        second = tuner.resolve_spec(spec(40))  # another bucket: same bad entry, no second warning
    assert first.level == "arch" and second.level == "arch"
    assert len([w for w in caught if "invalid" in str(w.message)]) == 1


def test_malformed_lines_are_skipped(shipped):
    user = shipped / "user.json"
    user.write_text(json.dumps({"format": "hal-tuning-table", "version": 1, "backend": "fake", "entries": [
        {"level": "device", "match": "Fake GPU X1", "kernel": "pool2d", "params": {"WG": "big"},
         "provenance": "x"},
        {"level": "device", "match": "Fake GPU X1", "kernel": "pool2d", "params": {"WG": 32}},  # no provenance
        {"level": "nowhere", "match": "x", "kernel": "pool2d", "params": {"WG": 32}, "provenance": "x"},
        entry("device", "Fake GPU X1", 128, provenance="good line"),
    ]}))
    with pytest.warns(UserWarning, match="skipped"):
        entries = table.parse_table(user.read_text(), "fake", str(user))
    assert len(entries) == 1 and entries[0].provenance == "good line"
    with pytest.warns(UserWarning, match="not valid JSON"):
        assert table.parse_table("{not json", "fake", "broken.json") == []


def test_tuning_off_serves_defaults(shipped, monkeypatch):
    monkeypatch.setenv("HAL_TUNING", "off")
    resolved = Tuner(info(max_wg=1024), SCHEMAS).resolve_spec(spec())
    assert resolved.level == "default" and resolved.params == SCHEMA.defaults()


def test_more_specific_key_wins(shipped, monkeypatch):
    entries = [entry("arch", "fk1", 32), entry("arch", "fk1", 256, key={"kind": "max", "h": 128})]
    monkeypatch.setattr(table, "shipped_entries", lambda backend: tuple(
        table._parse_entry(e, "fake", f"t#{i}") for i, e in enumerate(entries)))
    dev = info(name="Fake GPU X9")
    assert Tuner(dev, SCHEMAS).resolve_spec(spec(100)).params["WG"] == 256
    assert Tuner(dev, SCHEMAS).resolve_spec(spec(300)).params["WG"] == 32


def test_shipped_tables_are_valid_and_have_provenance():
    """Every shipped entry parses, names a known kernel and parameters, and says where it came from."""
    import importlib

    from hal.backends import BACKEND_MODULES
    for backend in BACKEND_MODULES:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            entries = table.shipped_entries.__wrapped__(backend)
        if not entries:
            continue
        schemas = importlib.import_module(BACKEND_MODULES[backend]).BACKEND.schemas()
        for e in entries:
            assert e.kernel in schemas, e
            names = {p.name for p in schemas[e.kernel].params}
            assert set(dict(e.params)) <= names, e
            for name, value in e.params:
                allowed = next(p.values for p in schemas[e.kernel].params if p.name == name)
                assert value in allowed, e
            assert e.provenance.strip()
            if e.level in ("device", "arch") and "measured" in e.provenance:
                assert "not measured" in e.provenance or any(ch.isdigit() for ch in e.provenance)


def test_device_entry_with_an_arch_serves_only_that_arch(monkeypatch, tmp_path):
    """A measured device entry records its arch: the same device name under another profile
    (an emulated one, a forced ISA) falls through to that profile's own levels."""
    measured = {**entry("device", "Fake GPU X1", 256, provenance="measured on Fake GPU X1"), "arch": "fk1"}
    entries = [measured, entry("arch", "fk2", 128)]
    monkeypatch.setattr(table, "shipped_entries",
                        lambda backend: tuple(table.parse_table(json.dumps(
                            {"format": "hal-tuning-table", "version": 1, "backend": "fake", "entries": entries}),
                            "fake", "shipped:fake.json")))
    monkeypatch.setenv("HAL_CACHE_DIR", str(tmp_path / "cache"))
    same = Tuner(info(arch="fk1"), SCHEMAS).resolve_spec(spec())
    assert (same.level, same.params["WG"]) == ("device", 256)
    emulated = Tuner(info(arch="fk2"), SCHEMAS).resolve_spec(spec())
    assert (emulated.level, emulated.params["WG"]) == ("arch", 128)


def test_untuned_values_are_allowed_but_never_candidates():
    """``Param.untuned``: a caller or a table may ask for such a value (validate accepts it), the
    tuner's candidates never hold it; a default cannot be untuned, nor can a value not allowed."""
    schema = KernelSchema("opencl", "k", (Param("A", (1, 2), 1), Param("B", (0, 4), 4, untuned=(0,))))
    cands = schema.candidates()
    assert cands == [{"A": 1, "B": 4}, {"A": 2, "B": 4}]
    assert schema.validate({"A": 2, "B": 0}, info()) is None
    with pytest.raises(ValueError, match="untuned"):
        Param("B", (0, 4), 4, untuned=(4,))
    with pytest.raises(ValueError, match="untuned"):
        Param("B", (0, 4), 4, untuned=(8,))


def test_cuda_batch_norm_pivot_zero_is_never_a_tuning_candidate():
    """CUDA's BN_PIVOT_N 0 (shifted sums about each chunk's first value) trades a precision bound,
    so it is untuned (no candidate holds it: the test above), while the default re-centres (4)."""
    from hal.backends.cuda import _SCHEMAS

    pivot = next(p for p in _SCHEMAS["batch_norm"].params if p.name == "BN_PIVOT_N")
    assert pivot.default == 4 and pivot.untuned == (0,)


def test_cuda_depthwise_tensor_cores_are_never_a_tuning_candidate():
    """CUDA's DW_TC 1 and 2 spread an Inf or NaN input to nearby outputs (PyTorch's depthwise does
    not), which the tuner's random inputs cannot show: untuned, the default off."""
    from hal.backends.cuda import _SCHEMAS

    tc = next(p for p in _SCHEMAS["conv2d"].params if p.name == "DW_TC")
    assert tc.default == 0 and tc.untuned == (1, 2)
