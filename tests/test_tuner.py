"""`hal tune` on the CPU backend: validation, timeouts, crashes, resume, merge, show.

Faults are injected through the test-only ``HAL_TUNE_INJECT`` variable (candidate
ordinals): ``wrong`` corrupts the candidate's output before validation, ``hang``
never returns, ``crash`` aborts the worker process, ``over-limit`` raises the error a
backend raises for parameters a compiled kernel cannot launch as given.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hal
from hal.cli import main
from hal.tuning import tuner, workloads

pytestmark = pytest.mark.skipif(not any(d.kind == "cpu" for d in hal.devices()), reason="needs the cpu backend")

BASE = ["tune", "--device", "cpu", "--size", "tiny", "--dtype", "float32", "--layout", "NCHW", "--repeats", "3",
        "--seed", "5"]


def _plan(kernel="pool2d", name="maxpool3x3s2p1"):
    return [(w, "float32", "NCHW") for w in workloads.select([kernel]) if w.name == name]


def test_bucket_shapes_cover_largest_smallest_and_odd():
    shapes = tuner.bucket_shapes((64, 64, 112, 112))
    assert shapes[0] == (64, 64, 128, 128)
    assert shapes[1] == (33, 33, 65, 65)
    assert all(v % 2 for v in shapes[2])


def test_wrong_hanging_and_crashing_candidates_are_rejected(monkeypatch, tmp_path):
    monkeypatch.setenv("HAL_TUNE_INJECT", "wrong:2,hang:3,crash:4")
    monkeypatch.setattr(tuner, "CANDIDATE_TIMEOUT", 10.0)  # the hang waits it out; a tiny candidate takes < 1 s
    outcomes = tuner.tune(hal.device("cpu"), _plan(), mode="rapid", size="tiny", repeats=3, seed=1,
                          journal_path=tmp_path / "j.jsonl")
    (o,) = outcomes
    statuses = sorted(status for _, status, _ in o.rejected)
    assert statuses == ["crashed", "timeout", "wrong"], o.rejected
    entries = tuner.table_entries(hal.device("cpu"), outcomes, "tiny", "rapid")
    rejected = [p for p, _, _ in o.rejected]
    assert all(e["params"] not in rejected for e in entries)
    assert o.default_ms is not None and o.best_ms is not None


def _tuned_with(monkeypatch, tmp_path, inject: str):
    """The one outcome of a rapid CPU run of _plan() with HAL_TUNE_INJECT=inject."""
    monkeypatch.setenv("HAL_TUNE_INJECT", inject)
    (o,) = tuner.tune(hal.device("cpu"), _plan(), mode="rapid", size="tiny", repeats=3, seed=1,
                      journal_path=tmp_path / "j.jsonl")
    return o


def test_a_candidate_that_breaks_the_device_costs_only_itself(monkeypatch, tmp_path):
    """A launch that faults can leave the context unusable (on the H200, NVIDIA's OpenCL then
    failed every later candidate with OUT_OF_RESOURCES): the worker is restarted after it."""
    o = _tuned_with(monkeypatch, tmp_path, "poison:2")
    assert [status for _, status, _ in o.rejected] == ["error"], o.rejected
    assert "OUT_OF_RESOURCES" in o.rejected[0][2]
    assert o.default_ms is not None and o.best_ms is not None


def test_candidates_over_a_kernel_limit_are_replaced_by_spares_not_rejected(monkeypatch):
    """A per-kernel limit (known after the build) makes a candidate infeasible, not wrong:
    it is reported apart and a spare takes its place, so rapid still measures 8 sets."""
    monkeypatch.setenv("HAL_TUNE_INJECT", "over-limit:2,over-limit:5")
    # no table entry in the way: whether the served set is one more candidate or one of the
    # shuffled ones depends on the entries this machine matches (by CPU name and architecture;
    # on a 2-core AMD EPYC the served bn infer set is among the shuffled ones)
    monkeypatch.setattr(tuner, "_serving_params", lambda *args: None)
    dev = hal.device("cpu")
    plan = [(w, "float32", "NCHW") for w in workloads.select(["batch_norm"]) if w.name == "bn infer"]
    schema = dev.backend.schemas()["batch_norm"]
    assert sum(schema.validate(c, dev.info) is None for c in schema.candidates()) >= tuner.MODES["rapid"] + 3
    (o,) = tuner.tune(dev, plan, mode="rapid", size="tiny", repeats=3, seed=1)
    assert len(o.over_limit) == 2 and not o.rejected, (o.over_limit, o.rejected)
    assert o.tried == tuner.MODES["rapid"], o.tried
    assert o.best_params not in [p for p, _ in o.over_limit]


def test_killed_run_resumes_without_redoing_and_blacklists_the_one_in_flight(tmp_path):
    out = tmp_path / "table.json"
    journal = out.with_name(out.name + ".journal.jsonl")
    env = {**os.environ, "HAL_TUNE_INJECT": "hang:4", "HAL_TUNE_TIMEOUT": "600"}
    cmd = [sys.executable, "-m", "hal", *BASE, "--ops", "pool2d", "--mode", "rapid", "--out", str(out)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:  # wait until the 4th candidate (the hanging one) has started
            if journal.exists() and journal.read_text().count('"start"') >= 4:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the tuning run never reached its 4th candidate")
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    before = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    finished = {r["id"] for r in before if r["event"] == "end"}
    in_flight = {r["id"] for r in before if r["event"] == "start"} - finished
    assert len(finished) == 3 and len(in_flight) == 1
    env.pop("HAL_TUNE_INJECT")
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, timeout=600)
    assert not journal.exists()  # a finished run removes its journal
    assert out.exists()


def test_a_run_cut_by_its_budget_keeps_its_journal_and_resumes(tmp_path, capsys):
    out = tmp_path / "table.json"
    journal = out.with_name(out.name + ".journal.jsonl")
    args = [*BASE, "--ops", "pool2d,batch_norm", "--mode", "rapid", "--out", str(out)]
    assert main([*args, "--budget", "0.001s"]) == 0  # cut before its first candidate, however fast the machine
    assert "unfinished" in capsys.readouterr().out
    assert journal.exists()
    assert main(args) == 0
    assert not journal.exists()  # finished: the journal goes


def test_resume_from_journal_skips_finished(monkeypatch, tmp_path):
    journal = tmp_path / "j.jsonl"
    calls = []
    real_run = tuner.Worker.run

    def counting_run(self, task, timeout):
        calls.append(task)
        return real_run(self, task, timeout)

    monkeypatch.setattr(tuner.Worker, "run", counting_run)
    tuner.tune(hal.device("cpu"), _plan(), mode="rapid", size="tiny", repeats=3, seed=2, journal_path=journal)
    first = len(calls)
    calls.clear()
    tuner.tune(hal.device("cpu"), _plan(), mode="rapid", size="tiny", repeats=3, seed=2, journal_path=journal)
    assert first >= 2 and len(calls) == 1  # only the final re-timing runs again
    # the same journal after a kernel edit (other sources): nothing is taken from it
    calls.clear()
    monkeypatch.setattr(tuner, "_sources_id", lambda device, kernel: "edited sources")
    tuner.tune(hal.device("cpu"), _plan(), mode="rapid", size="tiny", repeats=3, seed=2, journal_path=journal)
    assert len(calls) == first


def test_cli_tune_writes_a_table_that_serves_and_show_reports_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HAL_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "cache" / "tuning" / "cpu-test.json"
    assert main([*BASE, "--ops", "batch_norm", "--mode", "rapid", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["format"] == "hal-tuning-table" and doc["backend"] == "cpu"
    for e in doc["entries"]:
        assert "measured by hal tune" in e["provenance"] and e["median_ms"] <= e["default_ms"] * 0.97
    # a handmade user entry for this device serves at the "user" level
    dev = hal.device("cpu")
    wl = workloads.select(["batch_norm"])[0]
    spec = wl.spec_for(wl.shape("tiny"), "float32", "NCHW")
    defaults = dev.backend.schemas()["batch_norm"].defaults()
    name, value = next(iter(defaults.items()))
    allowed = next(p.values for p in dev.backend.schemas()["batch_norm"].params if p.name == name)
    other = next((v for v in allowed if v != value), value)
    from hal.tuning.table import kernel_key
    _, key = kernel_key(spec)
    tuner.write_table_atomic(out, tuner.new_table("cpu", [{"level": "device", "match": dev.info.name,
                                                           "kernel": "batch_norm", "key": key,
                                                           "params": {name: other}, "provenance": "test"}]))
    dev.tuner.clear()
    assert dev.tuner.resolve_spec(spec).level == "user"
    assert main(["tune", "show", "--device", "cpu", "--size", "tiny", "--ops", "batch_norm", "--dtype", "float32",
                 "--layout", "NCHW"]) == 0
    assert "user" in capsys.readouterr().out
    dev.tuner.clear()


def test_merge_keeps_the_faster_entry(tmp_path):
    def doc(ms, wg):
        return tuner.new_table("cpu", [{"level": "device", "match": "X", "kernel": "pool2d", "key": {"n": 1},
                                        "params": {"W": wg}, "median_ms": ms, "provenance": "p"}])
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    tuner.write_table_atomic(a, doc(2.0, 1))
    tuner.write_table_atomic(b, doc(1.0, 2))
    assert main(["tune", "merge", str(a), str(b), "--out", str(c)]) == 0
    merged = json.loads(c.read_text())["entries"]
    assert len(merged) == 1 and merged[0]["params"] == {"W": 2}


def test_stale_entries_are_skipped(tmp_path):
    from hal.tuning.table import parse_table
    raw = tuner.new_table("cpu", [{"level": "device", "match": "X", "kernel": "pool2d", "params": {"W": 1},
                                   "provenance": "p", "kernel_hash": "0" * 64},
                                  {"level": "device", "match": "X", "kernel": "pool2d", "params": {"W": 1},
                                   "provenance": "p", "hal_version": "0.0.1"}])
    with pytest.warns(UserWarning, match="stale"):
        assert parse_table(json.dumps(raw), "cpu", "t.json") == []


def test_source_hash_stales_only_its_own_kernel_family():
    from hal.resources import family_hash
    from hal.tuning.table import parse_table
    current = family_hash("kernels_c", "pool2d")
    assert current != family_hash("kernels_c", "conv2d")

    def entry(source_hash):
        return {"level": "device", "match": "X", "kernel": "pool2d", "key": {}, "params": {"W": 1},
                "provenance": "p", "source_hash": source_hash}

    assert len(parse_table(json.dumps(tuner.new_table("cpu", [entry(current)])), "cpu", "t.json")) == 1
    # conv2d's sources are not pool2d's: an entry carrying them is stale
    with pytest.warns(UserWarning, match="pool2d kernel sources changed"):
        raw = tuner.new_table("cpu", [entry(family_hash("kernels_c", "conv2d"))])
        assert parse_table(json.dumps(raw), "cpu", "t.json") == []


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    tuner.write_table_atomic(path, tuner.new_table("cpu", []))

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(json, "dump", boom)
    with pytest.raises(RuntimeError):
        tuner.write_table_atomic(path, tuner.new_table("cpu", [{"x": 1}]))
    assert json.loads(path.read_text())["entries"] == []
    assert [p.name for p in Path(tmp_path).iterdir()] == ["t.json"]


def test_what_the_tables_serve_today_is_a_contender(tmp_path, monkeypatch):
    """A tuned entry must beat the parameters served today, not only the schema default."""
    monkeypatch.setenv("HAL_CACHE_DIR", str(tmp_path / "cache"))
    dev = hal.device("cpu")
    wl = next(w for w in workloads.select(["batch_norm"]) if w.name == "bn infer")
    schema = dev.backend.schemas()["batch_norm"]
    defaults = schema.defaults()
    name, value = next(iter(defaults.items()))
    allowed = next(p.values for p in schema.params if p.name == name)
    other = next(v for v in allowed if v != value)
    from hal.tuning.table import kernel_key
    _, key = kernel_key(wl.spec_for(wl.shape("tiny"), "float32", "NCHW"))
    table = tmp_path / "cache" / "tuning" / "served.json"
    table.parent.mkdir(parents=True)
    tuner.write_table_atomic(table, tuner.new_table("cpu", [{"level": "device", "match": dev.info.name,
                                                             "kernel": "batch_norm", "key": key,
                                                             "params": {name: other}, "provenance": "test"}]))
    dev.tuner.clear()
    try:
        served = tuner._serving_params(dev, wl, "tiny", "float32", "NCHW", schema)
        assert served == {**defaults, name: other}
        (outcome,) = tuner.tune(dev, [(wl, "float32", "NCHW")], mode="rapid", size="tiny", repeats=3, seed=5)
        assert outcome.tried >= 2
        if outcome.kept:
            assert outcome.best_params not in (defaults, served)
            assert outcome.serving_ms is None or outcome.best_ms <= outcome.serving_ms * (1 - tuner.MARGIN)
    finally:
        dev.tuner.clear()


def test_candidates_name_each_kernel_once():
    """Parameters another one switches off (pool2d's BAND_KB without row bands) are not
    searched: two candidates never build the same kernel."""
    from hal.backends.opencl import SCHEMAS
    schema = SCHEMAS["pool2d"]
    cands = schema.candidates()
    assert len({tuple(sorted(c.items())) for c in cands}) == len(cands)
    assert all(c["BAND_KB"] == 16 for c in cands if c["LOCAL_TILE"] != 2)
    assert {c["BAND_KB"] for c in cands if c["LOCAL_TILE"] == 2} == {4, 8, 16, 32}
    assert all(schema.canonical(c) == c for c in cands)


def _h200_info():
    """An H200's DeviceInfo as the CUDA planner sees it (no GPU needed: only the schema's constraints read it)."""
    from hal.device import DeviceInfo

    return DeviceInfo("cuda", 0, "NVIDIA H200", "nvidia", "sm_90", "sm_90", 132, 1024, 232448, 140 << 30, True, 32,
                      "cuda", "580", (("compute_capability", "9.0"), ("shared_memory_per_block_default", "49152"),
                                      ("shared_memory_per_sm", "233472"), ("max_threads_per_sm", "2048")))


@pytest.mark.parametrize("family", ["conv2d", "batch_norm"])
@pytest.mark.parametrize("mode", ["rapid", "exhaustive"])
def test_cuda_candidates_are_drawn_from_spaces_too_large_to_list(family, mode):
    """CUDA's conv2d (about 3e19 combinations) and batch_norm (5e6) schemas: the tuner's candidate
    order draws them at random instead of listing every combination (which never ended for conv2d
    and took 15 s for batch_norm): distinct, valid on the device, never the default, never an untuned
    value, enough spares, the same order for the same seed, in well under a second each."""
    import random

    from hal.backends.cuda import _SCHEMAS

    schema, info = _SCHEMAS[family], _h200_info()
    assert schema.size() > tuner.ENUMERATED_UP_TO
    default = schema.defaults()
    limit = tuner.MODES[mode]
    start = time.monotonic()
    order = tuner.candidate_order(schema, info, default, random.Random("7-w-float32-NCHW"), limit)
    took = time.monotonic() - start
    want = tuner.DRAWN_EXHAUSTIVE if limit is None else tuner.DRAWN_PER_MEASURED * limit
    assert len(order) == want
    assert len({tuple(sorted(c.items())) for c in order}) == len(order)
    assert all(c != default and schema.validate(c, info) is None for c in order)
    untuned = {p.name: p.untuned for p in schema.params if p.untuned}
    assert all(c[name] not in values for c in order for name, values in untuned.items())
    assert order == tuner.candidate_order(schema, info, default, random.Random("7-w-float32-NCHW"), limit)
    assert took < 5.0, f"{took:.1f} s"


def test_small_spaces_are_still_listed_and_shuffled():
    """A space of at most ENUMERATED_UP_TO combinations (OpenCL's batch_norm) keeps the listed order:
    every valid candidate but the default, shuffled by the seed, as before the draws."""
    import random

    from hal.backends.opencl import SCHEMAS
    from hal.device import DeviceInfo

    schema = SCHEMAS["batch_norm"]
    info = DeviceInfo("opencl", 0, "Fake GPU", "fakeco", "fakefam", "fk1", 8, 256, 65536, 2**30, False, 32)
    default = schema.defaults()
    want = [c for c in schema.candidates() if c != default and schema.validate(c, info) is None]
    assert len(want) > 8
    random.Random("3").shuffle(want)
    assert tuner.candidate_order(schema, info, default, random.Random("3"), 8) == want


def test_ops_select_families_or_workload_names():
    from hal.errors import HalValueError
    from hal.tuning import workloads
    assert [w.name for w in workloads.select(["avgpool3x3s2p1"])] == ["avgpool3x3s2p1"]
    assert {w.kernel for w in workloads.select(["pool2d"])} == {"pool2d"}
    with pytest.raises(HalValueError, match="ops: expected kernel families or workload names"):
        workloads.select(["pool2d", "no-such-workload"])


def test_timing_inputs_are_copied_until_they_exceed_the_cache():
    """#5: timed inputs larger than the last-level cache; a workload smaller than it is
    timed over rotating copies (up to 8) that together exceed three times the cache."""
    mib = 1 << 20
    assert tuner.timing_copies(200 * mib, 50 * mib) == 1
    assert tuner.timing_copies(67 * mib, 50 * mib) == 3
    assert tuner.timing_copies(34 * mib, 50 * mib) == 5
    assert tuner.timing_copies(1 * mib, 50 * mib) == tuner.MAX_TIMING_COPIES

    class Info:
        extras = (("l2_bytes", str(50 * mib)),)

    assert tuner.last_level_cache_bytes(Info()) == 50 * mib
    assert tuner.last_level_cache_bytes(object()) == tuner.DEFAULT_CACHE_BYTES


def test_timed_calls_rotate_among_the_input_copies(monkeypatch):
    """Each timed call reads another copy of the input, in turn."""
    dev = hal.device("cpu")
    backend = dev.backend
    (wl, dtype, layout), = _plan()
    monkeypatch.setattr(tuner, "last_level_cache_bytes", lambda info: 1 << 30)  # every workload "fits"
    seen = []
    real = type(backend).pool2d

    def recording(self, spec, x, y, indices, params):
        seen.append(x.ctypes.data if hasattr(x, "ctypes") else id(x))
        return real(self, spec, x, y, indices, params)

    monkeypatch.setattr(type(backend), "pool2d", recording)
    task = tuner.Task(wl, dtype, layout, "tiny", backend.schemas()["pool2d"].defaults(), 16, 3, validate=False)
    result = tuner._evaluate(backend, task, {})
    assert result["status"] == "ok"
    copies = tuner.MAX_TIMING_COPIES
    assert len(set(seen)) == copies  # 2 warm-up + 16 timed calls over 8 copies
    assert seen[copies:2 * copies] == seen[:copies]  # in turn, not at random


def test_stale_device_entries_become_contenders(tmp_path, monkeypatch):
    """An entry whose kernel sources changed serves nothing, but its parameters (the last
    winner) are re-measured by the next tuning run of that device and workload."""
    from hal.resources import family_hash
    from hal.tuning.tuner import _stale_params
    from hal.tuning.workloads import WORKLOADS

    dev = hal.device("cpu")
    wl = next(w for w in WORKLOADS if w.name == "maxpool3x3s2p1")

    def entry(source_hash, params, match=dev.info.name):
        return {"level": "device", "match": match, "kernel": "pool2d", "key": {}, "params": params,
                "provenance": "p", "source_hash": source_hash}

    stale_hash = family_hash("kernels_c", "conv2d")
    path = tmp_path / "user.json"
    tuner.write_table_atomic(path, tuner.new_table("cpu", [
        entry(stale_hash, {"W_BLOCK": 4, "C_BLOCK": 1}),
        entry(family_hash("kernels_c", "pool2d"), {"W_BLOCK": 1, "C_BLOCK": 4}),  # fresh: serves, not stale
        entry(stale_hash, {"W_BLOCK": 1, "C_BLOCK": 1}, match="another device"),
        entry(stale_hash, {"W_BLOCK": 3, "C_BLOCK": 1}),  # not allowed by today's schema
    ]))
    monkeypatch.setenv("HAL_TUNING_PATH", str(path))
    dev.tuner.clear()
    try:
        schema = dev.backend.schemas()["pool2d"]
        assert _stale_params(dev, wl, "tiny", "float32", "NCHW", schema) == [{"W_BLOCK": 4, "C_BLOCK": 1}]
    finally:
        dev.tuner.clear()


def test_merge_replaces_stale_entries_even_when_they_timed_faster(tmp_path):
    """A table written before a kernel edit and a run after it: the current entry stays,
    whatever the stale one's time (hal tune run --out into an existing file merges too)."""
    from hal.resources import family_hash

    def doc(ms, w, source_hash):
        return tuner.new_table("cpu", [{"level": "device", "match": "X", "kernel": "pool2d", "key": {"n": 1},
                                        "params": {"W": w}, "median_ms": ms, "provenance": "p",
                                        "source_hash": source_hash}])
    old, new, out = tmp_path / "old.json", tmp_path / "new.json", tmp_path / "out.json"
    tuner.write_table_atomic(old, doc(0.5, 1, family_hash("kernels_c", "conv2d")))  # stale for pool2d
    tuner.write_table_atomic(new, doc(1.0, 2, family_hash("kernels_c", "pool2d")))
    for order in ([old, new], [new, old]):
        assert main(["tune", "merge", *map(str, order), "--out", str(out)]) == 0
        merged = json.loads(out.read_text())["entries"]
        assert [e["params"] for e in merged] == [{"W": 2}]


def test_merge_drop_stale_leaves_out_entries_no_re_tune_replaced(tmp_path, capsys):
    """After a kernel edit a re-tune keeps no entry where a default serves as fast; --drop-stale
    takes the old measured entry out (one table alone is enough), current entries stay."""
    from hal.resources import family_hash

    def entry(key, w, source_hash):
        return {"level": "device", "match": "X", "kernel": "pool2d", "key": {"n": key}, "params": {"W": w},
                "median_ms": 1.0, "provenance": "p", "source_hash": source_hash}
    stale, current = family_hash("kernels_c", "conv2d"), family_hash("kernels_c", "pool2d")
    table, out = tmp_path / "t.json", tmp_path / "out.json"
    tuner.write_table_atomic(table, tuner.new_table("cpu", [entry(1, 1, stale), entry(2, 2, current)]))
    assert main(["tune", "merge", str(table), "--out", str(out)]) == 2  # one table needs --drop-stale
    assert not out.exists()
    assert main(["tune", "merge", str(table), "--out", str(out), "--drop-stale"]) == 0
    assert [e["key"] for e in json.loads(out.read_text())["entries"]] == [{"n": 2}]
    assert "dropped device 'X' pool2d [n=1]: the pool2d kernel sources changed" in capsys.readouterr().out
    # without --drop-stale a merge keeps the stale entry (serving skips it with a warning)
    assert main(["tune", "merge", str(table), str(table), "--out", str(out)]) == 0
    assert len(json.loads(out.read_text())["entries"]) == 2


def _count_evaluations(monkeypatch, calls: list) -> None:
    """Record each candidate evaluation's parameters in ``calls`` (not the re-timing of the top few)."""
    real_run = tuner.Worker.run

    def counting_run(self, task, timeout):
        if not isinstance(task, list):
            calls.append(dict(task.params))
        return real_run(self, task, timeout)

    monkeypatch.setattr(tuner.Worker, "run", counting_run)


def test_same_launch_plan_is_measured_once(monkeypatch):
    """Two parameter sets whose launch signatures are equal are one kernel: the second is
    skipped and a spare measured in its place (CUDA's launch plans; faked here on the CPU)."""
    dev = hal.device("cpu")
    calls = []
    _count_evaluations(monkeypatch, calls)
    # only W_BLOCK reaches the "kernel": every C_BLOCK variant of one W_BLOCK is the same launch
    monkeypatch.setattr(dev.backend, "launch_signature", lambda spec, params: ("w", params.get("W_BLOCK")),
                        raising=False)
    (outcome,) = tuner.tune(dev, _plan(), mode="rapid", size="tiny", repeats=3, seed=2)
    assert outcome.same_kernel > 0
    assert len({c["W_BLOCK"] for c in calls}) == len(calls) == outcome.tried  # one run per distinct W_BLOCK


def test_same_built_kernel_is_measured_once(monkeypatch):
    """Sets whose launch plans differ (CUDA: every code-changing parameter is in the -D set) but
    whose built signatures are equal (the compiled kernels' code) are measured once; spares past
    the prebuilt ones are built in batches before they are checked (faked here on the CPU)."""
    dev = hal.device("cpu")
    calls, prebuilds = [], []
    _count_evaluations(monkeypatch, calls)
    monkeypatch.setattr(dev.backend, "launch_signature", lambda spec, params: tuple(sorted(params.items())),
                        raising=False)
    monkeypatch.setattr(dev.backend, "built_signature", lambda spec, params: ("w", params.get("W_BLOCK")),
                        raising=False)
    monkeypatch.setattr(dev.backend, "prebuild", lambda specs, sets: prebuilds.append(len(sets)) or 0,
                        raising=False)
    # the CPU's pool2d space has 9 sets (3 W_BLOCKs): 3 chosen (seed 2: two of one W_BLOCK), 6 spares,
    # built 3 at a time as the queue reaches them
    monkeypatch.setitem(tuner.MODES, "rapid", 3)
    monkeypatch.setattr(tuner, "PREBUILD_BATCH", 3)
    (outcome,) = tuner.tune(dev, _plan(), mode="rapid", size="tiny", repeats=3, seed=2)
    assert outcome.same_kernel > 0
    assert len({c["W_BLOCK"] for c in calls}) == len(calls) == outcome.tried == 3  # distinct W_BLOCKs
    assert prebuilds[0] == 3 and prebuilds[1] == 3, prebuilds  # the chosen sets, then spares in batches
    assert sum(prebuilds) <= 9, prebuilds  # none built twice


def test_drawn_spaces_are_screened_one_parameter_at_a_time(monkeypatch):
    """A space too large to enumerate is screened first: each parameter's other values from the
    default, by built signature; the parameters that change nothing are held at their defaults in
    most draws, and the distinct one-parameter variants come first (the CPU's 9-set pool2d space,
    drawn here as CUDA's conv2d is, with a fake built signature that only W_BLOCK changes)."""
    dev = hal.device("cpu")
    monkeypatch.setattr(tuner, "ENUMERATED_UP_TO", 0)
    monkeypatch.setattr(dev.backend, "built_signature", lambda spec, params: ("w", params["W_BLOCK"]), raising=False)
    schema = dev.backend.schemas()["pool2d"]
    default = schema.defaults()
    ((wl, dtype, layout),) = _plan()
    screen = tuner.screen_parameters(dev, wl, "tiny", dtype, layout, schema, default)
    assert screen is not None and screen.relevant == {"W_BLOCK"}
    others = sorted(w for w in (1, 2, 4) if w != default["W_BLOCK"])
    assert sorted(v["W_BLOCK"] for v in screen.variants) == others
    assert all(v["C_BLOCK"] == default["C_BLOCK"] for v in screen.variants)
    order = tuner.candidate_order(schema, dev.info, default, random.Random(1), 2, screen)
    assert sorted(c["W_BLOCK"] for c in order[:2]) == others and all(c in screen.variants for c in order[:2])
    keys = [tuple(sorted(c.items())) for c in order]
    assert default not in order and len(keys) == len(set(keys))
    # every draw keeps C_BLOCK at its default where only W_BLOCK may vary
    focused = schema.draw(random.Random(3), 3, lambda c: True, vary={"W_BLOCK"})
    assert {c["C_BLOCK"] for c in focused} == {default["C_BLOCK"]}
    (outcome,) = tuner.tune(dev, _plan(), mode="rapid", size="tiny", repeats=3, seed=2)
    assert outcome.screened == (1, 2)
    assert outcome.tried == 3  # the default and the two W_BLOCK variants: every other set repeats one
    # an enumerated space is not screened
    monkeypatch.setattr(tuner, "ENUMERATED_UP_TO", 200_000)
    (outcome,) = tuner.tune(dev, _plan(), mode="rapid", size="tiny", repeats=3, seed=2)
    assert outcome.screened is None


def test_opencl_launch_signature_names_the_kernel_that_runs():
    """OpenCL's launch_signature (the tuner's same-kernel skip): parameters a call ignores
    give one signature (NHWC pooling ignores LOCAL_TILE, float32 ignores HALF_RAW), those it
    uses give different ones; families without a signature give None."""
    import numpy as np

    from hal import spec as S

    devs = [d for d in hal.devices() if d.kind == "opencl"]
    if not devs:
        pytest.skip("no OpenCL device")
    sig = devs[0].backend.launch_signature
    f32, f16 = np.dtype(np.float32), np.dtype(np.float16)

    def pool(layout, dtype):
        return S.pool2d_spec("max", S.TensorGeometry(2, 8, 32, 48, layout, dtype), 3, 2, 1, 1, False, True, None,
                             False)

    nhwc, nchw, nchw16 = pool("NHWC", f32), pool("NCHW", f32), pool("NCHW", f16)
    assert sig(nhwc, {"LOCAL_TILE": 3, "VEC": 4}) == sig(nhwc, {"LOCAL_TILE": 0, "VEC": 4})
    assert sig(nhwc, {"VEC": 4}) != sig(nhwc, {"VEC": 8})
    assert sig(nchw, {"LOCAL_TILE": 3, "VEC": 4}) != sig(nchw, {"LOCAL_TILE": 0, "VEC": 4})
    assert sig(nchw, {"LOCAL_TILE": 3, "HALF_RAW": 1}) == sig(nchw, {"LOCAL_TILE": 3})
    assert sig(nchw16, {"LOCAL_TILE": 3, "HALF_RAW": 1}) != sig(nchw16, {"LOCAL_TILE": 3})
    # max pooling without indices builds the vector max paths without index tracking
    with_idx = S.pool2d_spec("max", S.TensorGeometry(2, 8, 32, 48, "NHWC", f32), 3, 2, 1, 1, False, True, None, True)
    assert ("POOL_NO_IDX", 1) in sig(nhwc, {"VEC": 4})[2] and ("POOL_NO_IDX", 1) not in sig(with_idx, {"VEC": 4})[2]
    # QVEC16: int8/uint8 NHWC fixed windows only (VEC and FIXED_WINDOW then do not matter); a no-op elsewhere
    q8 = S.pool2d_spec("max", S.TensorGeometry(2, 40, 32, 48, "NHWC", np.dtype(np.int8)), 3, 2, 1, 1, False, True,
                       None, False)
    assert sig(q8, {"QVEC16": 1, "VEC": 4}) == sig(q8, {"QVEC16": 1, "VEC": 8, "FIXED_WINDOW": 0})
    assert sig(q8, {"QVEC16": 1})[3] == 2 * 16 * 24 * 3 != sig(q8, {"VEC": 8})[3]
    assert sig(nhwc, {"QVEC16": 1}) == sig(nhwc, {}) and sig(nchw, {"QVEC16": 1}) == sig(nchw, {})
    q8_idx = S.pool2d_spec("max", S.TensorGeometry(2, 40, 32, 48, "NHWC", np.dtype(np.int8)), 3, 2, 1, 1, False,
                           True, None, True)
    assert sig(q8_idx, {"QVEC16": 1}) == sig(q8_idx, {})
    bn32 = S.batch_norm_spec(S.TensorGeometry(2, 8, 32, 48, "NCHW", f32), False, 0.1, 1e-5, True)
    bn16 = S.batch_norm_spec(S.TensorGeometry(2, 8, 32, 48, "NCHW", f16), False, 0.1, 1e-5, True)
    assert sig(bn32, {"VEC": 4, "HALF_RAW": 1}) == sig(bn32, {"VEC": 4}) != sig(bn32, {"VEC": 8})
    assert sig(bn16, {"VEC": 4, "HALF_RAW": 1}) != sig(bn16, {"VEC": 4})
    # adaptive pooling: PIPE_GROUPS matters to the pipe kernels only (MODE 4, NCHW 1x1 outputs)
    def adaptive(layout, dtype, out):
        return S.adaptive_pool2d_spec("avg", S.plane_geometry(S.TensorGeometry(64, 40, 7, 7, layout, dtype)), out,
                                      False)

    pipe, nhwc_g = adaptive("NCHW", f32, 1), adaptive("NHWC", f32, 1)
    assert sig(pipe, {"MODE": 4, "PIPE_GROUPS": 2}) != sig(pipe, {"MODE": 4, "PIPE_GROUPS": 16})
    assert ("ADAPTIVE_GROUP", 3) in sig(pipe, {"MODE": 4})[2]
    assert sig(nhwc_g, {"MODE": 4, "PIPE_GROUPS": 2}) == sig(nhwc_g, {"MODE": 4, "PIPE_GROUPS": 16})
    assert sig(nhwc_g, {"MODE": 4}) == sig(nhwc_g, {"MODE": 0})  # MODE 4 runs as MODE 0 there
    assert sig(S.EltwiseSpec("relu", 1000, f32), {}) is None


def test_int8_pooling_tunes_with_the_quantized_oracle(monkeypatch, tmp_path):
    """`hal tune --dtype int8,uint8` plans the pooling workloads only (no int8 twin for the
    others), checks candidates exactly against the quantized oracle (average pooling with a
    nonzero zero point) and rejects a wrong one."""
    plan = list(workloads.plans(workloads.select(None), ["int8", "uint8"], ["NCHW"]))
    assert plan and {wl.kernel for wl, _, _ in plan} == {"pool2d"}
    avg = next(wl for wl, _, _ in plan if wl.name == "avgpool3x3s2p1")
    assert avg.spec_for(avg.shape("tiny"), "uint8", "NCHW").zero_point == workloads.QUANT_ZERO_POINT != 0
    monkeypatch.setenv("HAL_TUNE_INJECT", "wrong:2")
    picked = [(wl, dt, lay) for wl, dt, lay in plan if wl.name == "avgpool3x3s2p1" and dt == "int8"]
    (o,) = tuner.tune(hal.device("cpu"), picked, mode="rapid", size="tiny", repeats=3, seed=1,
                      journal_path=tmp_path / "j.jsonl")
    assert [status for _, status, _ in o.rejected] == ["wrong"], o.rejected
    assert o.default_ms is not None and o.best_ms is not None


def test_int8_validation_poisons_twice():
    """Any int8 value can be a result, so one poison value cannot show every unwritten
    element: validation runs poisoned with the minimum, then the maximum. An element left
    unwritten whose oracle value is the minimum passes the first run and fails the second."""
    import numpy as np

    from hal.tuning import evaluate

    assert evaluate.poison_passes(np.dtype(np.float32)) == (False,)
    assert evaluate.poison_passes(np.dtype(np.int8)) == (False, True)
    be = hal.device("cpu").backend
    wl = next(w for w in workloads.WORKLOADS if w.name == "maxpool3x3s2p1")
    spec = wl.spec_for(wl.shape("tiny"), "int8", "NCHW")
    host = evaluate.make_inputs(spec, np.random.default_rng(0))
    host["x"][0, 0] = -128  # a plane whose outputs are all the minimum
    problem = evaluate.upload_problem(be, spec, host)
    want = evaluate.oracle(problem)
    k = int(np.flatnonzero(want["y"].reshape(-1) == -128)[0])
    real = be.pool2d

    def skips_one(spec_, x, y, indices, params):
        before = np.asarray(y).reshape(-1).view(np.int8)[k]
        real(spec_, x, y, indices, params)
        np.asarray(y).reshape(-1).view(np.int8)[k] = before  # as if element k were never written

    be.pool2d = skips_one
    try:
        results = []
        for high in evaluate.poison_passes(spec.dtype):
            launch, outs = evaluate.launcher(be, problem, {}, high=high)
            launch()
            got, damaged = evaluate.read_outputs(be, problem, outs, high=high)
            results.append(not damaged and evaluate.check(problem, got, want).ok)
    finally:
        del be.pool2d
    assert results == [True, False]


def test_bfloat16_tunes_with_its_own_key_and_poison(monkeypatch, tmp_path):
    """bfloat16 workloads are measured and checked like float16's: NaN-poisoned outputs (the
    float rule), a wrong candidate rejected, and entries keyed on dtype bfloat16 only."""
    import numpy as np

    from hal.dtypes import BFLOAT16
    from hal.tuning import evaluate

    if BFLOAT16 is None:
        pytest.skip("ml_dtypes is not installed")
    assert evaluate.poison_passes(BFLOAT16) == (False,)
    monkeypatch.setenv("HAL_TUNE_INJECT", "wrong:2")
    plan = [(w, "bfloat16", "NCHW") for w in workloads.select(["pool2d"]) if w.name == "avgpool3x3s2p1"]
    outcomes = tuner.tune(hal.device("cpu"), plan, mode="rapid", size="tiny", repeats=3, seed=1,
                          journal_path=tmp_path / "j.jsonl")
    (o,) = outcomes
    assert [status for _, status, _ in o.rejected] == ["wrong"], o.rejected
    assert o.default_ms is not None
    for entry in tuner.table_entries(hal.device("cpu"), outcomes, "tiny", "rapid"):
        assert entry["key"]["dtype"] == "bfloat16"
        assert np.dtype(entry["key"]["dtype"]) == BFLOAT16


def test_the_first_check_corner_holds_nan_and_infinities():
    """Float pooling and conv check inputs with specials hold NaN, +Inf and -Inf; BatchNorm's and
    int8's do not (one NaN blinds a BatchNorm channel; integers have none)."""
    import numpy as np

    from hal.tuning import evaluate

    for name, dtype, layout in (("maxpool3x3s2p1", "float16", "NHWC"), ("conv3x3 64->64", "float32", "NCHW"),
                                ("avgpool3x3s2p1", "int8", "NCHW"), ("bn train", "float32", "NCHW")):
        wl = next(w for w in workloads.select([name]))
        spec = wl.spec_for(wl.shape("tiny"), dtype, layout)
        x = evaluate.make_inputs(spec, np.random.default_rng(1), specials=True)["x"].astype(np.float64)
        special = name in ("maxpool3x3s2p1", "conv3x3 64->64")
        assert (np.isnan(x).any() and np.isposinf(x).any() and np.isneginf(x).any()) == special, name
        assert np.isfinite(evaluate.make_inputs(spec, np.random.default_rng(1))["x"].astype(np.float64)).all()


def test_a_candidate_that_loses_nan_or_infinities_is_rejected(monkeypatch, tmp_path):
    """A candidate whose outputs turn NaN and infinities into numbers (as CUDA's DW_TC turned an
    Inf input into NaN of finite outputs) passes random finite inputs; the first corner's specials
    reject it."""
    o = _tuned_with(monkeypatch, tmp_path, "finite:2")
    assert [status for _, status, _ in o.rejected] == ["wrong"], o.rejected
    assert "NaN" in o.rejected[0][2]
