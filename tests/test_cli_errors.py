"""The command line refuses bad arguments with exit code 2 and a message naming the argument (session 25's
audit: tracebacks, runs that did nothing and exited 0, output paths checked only after a long run)."""

from __future__ import annotations

import pytest

from hal.cli import main


@pytest.mark.parametrize("argv,named", [
    (["tune", "run", "--device", "cpu", "--budget", "abc"], "--budget"),
    (["tune", "run", "--device", "cpu", "--budget", "0"], "--budget"),
    (["tune", "run", "--device", "cpu", "--budget=-5s"], "--budget"),
    (["tune", "run", "--device", "cpu", "--repeats", "0"], "--repeats"),
    (["tune", "run", "--device", "cpu", "--seed=-1"], "--seed"),
    (["tune", "show", "--device", "cpu", "--layout", "NCWH"], "--layout"),
    (["conformance", "--quick", "--device", "cpu", "--seed=-1"], "--seed"),
    (["conformance", "--quick", "--device", "cpu", "--layout", "nchw"], "--layout"),
    (["bench", "--device", "cpu", "--quick", "--repeats", "0"], "--repeats"),
    (["bench", "--device", "cpu", "--quick", "--json", "/nonexistent-hal-dir/x.json"], "--json"),
    (["demo", "cnn16", "--device", "cpu", "--batch", "0"], "--batch"),
    (["demo", "cnn16", "--device", "cpu", "--batch=-1"], "--batch"),
])
def test_bad_option_values_exit_2_naming_the_option(argv, named, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert named in capsys.readouterr().err


def test_table_files_are_checked_before_anything_runs(tmp_path, capsys):
    good = tmp_path / "a.json"
    good.write_text('{"format": "hal-tuning-table", "version": 1, "backend": "cpu", "entries": []}')
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "bad.json").write_text("nope")
    for other in ("list.json", "bad.json", "missing.json"):
        assert main(["tune", "merge", str(good), str(tmp_path / other), "--out", str(tmp_path / "m.json")]) == 2
        assert other in capsys.readouterr().out
    assert main(["tune", "merge", str(good), str(good), "--out", str(tmp_path)]) == 2  # a folder
    assert main(["tune", "show", str(good), "--device", "cpu"]) == 2  # files are merge's
    assert main(["tune", "run", "--device", "cpu", "--ops", "avgpool3x3s2p1", "--out", str(tmp_path / "bad.json"),
                 "--budget", "5s"]) == 2  # --out unreadable as a table: refused before the search
    assert (tmp_path / "bad.json").read_text() == "nope"
    assert main(["bench", "--device", "cpu", "--quick", "--no-torch", "--dtype", "int3"]) == 2
    assert main(["bench", "--device", "cpu", "--quick", "--no-torch", "--ops", "nosuch"]) == 2
