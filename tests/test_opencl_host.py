"""Host-side logic of the OpenCL backend that needs no device (CI runs it)."""

from __future__ import annotations

import json

import numpy as np
import pytest


def _builder(ptx_maxnan: bool, ptx_u16x2: bool = False):
    """An OpenCLBackend that can plan pooling builds without a context."""
    from hal.backends.opencl import OpenCLBackend

    be = OpenCLBackend.__new__(OpenCLBackend)
    be._ptx_maxnan = ptx_maxnan
    be._ptx_u16x2 = ptx_u16x2
    return be


@pytest.mark.parametrize("layout, local_tile", [("NHWC", 0), ("NCHW", 0), ("NCHW", 3)])
def test_index_free_max_builds_ptx_max_only_where_asked(layout: str, local_tile: int) -> None:
    """HAL_PTX_MAXNAN (pool2d.cl's max.NaN.f32) is defined only on a device that can take it
    (NVIDIA's OpenCL, sm_80+: the backend's _ptx_maxnan), only for max pooling without
    indices, float arithmetic, float dtypes; everything else keeps its option string."""
    from hal import spec as S
    from hal.backends.opencl import OpenCLBackend

    defaults = OpenCLBackend.schemas()["pool2d"].defaults()
    params = {**defaults, "VEC": 4, "LOCAL_TILE": local_tile, "HALF_ARITH": 0}
    for dtype in (np.float32, np.float16):
        g = S.plane_geometry(S.TensorGeometry(2, 8, 32, 48, layout, np.dtype(dtype)))  # type: ignore[arg-type]
        for kind, indices in (("max", False), ("max", True), ("avg", False)):
            spec = S.pool2d_spec(kind, g, 3, 2, 1, 1, False, True, None, indices)
            for nvidia in (True, False):
                _, _, defines, _, _ = _builder(nvidia)._pool2d_build(spec, params)
                want = nvidia and kind == "max" and not indices
                assert defines.get("HAL_PTX_MAXNAN", 0) == int(want), (dtype, kind, indices, nvidia, defines)
    g = S.plane_geometry(S.TensorGeometry(2, 8, 32, 48, layout, np.dtype(np.float16)))  # type: ignore[arg-type]
    spec = S.pool2d_spec("max", g, 3, 2, 1, 1, False, True, None, False)
    _, _, defines, _, _ = _builder(True)._pool2d_build(spec, {**params, "HALF_ARITH": 1})
    # native half compares (HALF_ARITH, NCHW direct and NHWC) keep the select; the strips compute in float
    assert defines.get("HAL_PTX_MAXNAN", 0) == int(defines["HALF_ARITH"] == 0), defines
    assert defines["HALF_ARITH"] == int(local_tile == 0)


def test_ptx_maxnan_only_on_nvidia_opencl_sm80_and_later() -> None:
    """The device rule behind HAL_PTX_MAXNAN: NVIDIA's platform, sm_80 or later, not emulated."""
    from dataclasses import replace

    from hal.backends.opencl import ptx_maxnan_ok
    from hal.device import DeviceInfo

    h200 = DeviceInfo("opencl", 0, "NVIDIA H200", "nvidia", "sm_90", "sm_90", 132, 1024, 49152, 140 << 30, False, 32,
                      "NVIDIA CUDA", "580", ())
    assert ptx_maxnan_ok(h200)
    assert ptx_maxnan_ok(replace(h200, arch="sm_80")) and ptx_maxnan_ok(replace(h200, arch="sm_120"))
    assert not ptx_maxnan_ok(replace(h200, arch="sm_75"))
    assert not ptx_maxnan_ok(replace(h200, arch="gfx90a"))
    assert not ptx_maxnan_ok(replace(h200, platform="Portable Computing Language"))  # pocl-cuda, pocl-cpu
    assert not ptx_maxnan_ok(replace(h200, arch="valhall", extras=(("emulated_profile", "mali-valhall"),)))


def test_ptx_u16x2_only_on_nvidia_opencl_sm90_and_later() -> None:
    """The device rule behind HAL_PTX_U16X2 (qpool2d.cl's 16-channel int8 max): as
    HAL_PTX_MAXNAN's, from sm_90 (max.u16x2's first architecture)."""
    from dataclasses import replace

    from hal.backends.opencl import ptx_u16x2_ok
    from hal.device import DeviceInfo

    h200 = DeviceInfo("opencl", 0, "NVIDIA H200", "nvidia", "sm_90", "sm_90", 132, 1024, 49152, 140 << 30, False, 32,
                      "NVIDIA CUDA", "580", ())
    assert ptx_u16x2_ok(h200) and ptx_u16x2_ok(replace(h200, arch="sm_120"))
    assert not ptx_u16x2_ok(replace(h200, arch="sm_80")) and not ptx_u16x2_ok(replace(h200, arch="sm_89"))
    assert not ptx_u16x2_ok(replace(h200, platform="Portable Computing Language"))
    assert not ptx_u16x2_ok(replace(h200, arch="valhall", extras=(("emulated_profile", "mali-valhall"),)))



def test_launch_profile_names_each_launch_of_batch_norm_training() -> None:
    """OpenCLBackend.launch_profile (benchmarks/opencl_ops.py --launches): one entry per
    command of a call, named by kernel, in enqueue order, times from the call's first start;
    time_launches spans the same commands. NCHW training is two launches (the statistics'
    last group per channel finalizes it), NHWC three; the per-channel counters the fused
    launch counts groups with are back at zero after every call."""
    from test_forced_params import forced

    import hal

    try:
        dev = hal.device("opencl:0")
    except hal.HalError as exc:
        pytest.skip(f"no OpenCL device: {exc}")
    rng = np.random.default_rng(3)
    for layout, c, params, want in (
        ("NCHW", 4, {}, ["batch_norm_stats_finalize", "batch_norm_apply"]),
        ("NCHW", 64, {"WG": 32, "VEC": 4}, ["batch_norm_stats_finalize", "batch_norm_apply"]),
        ("NHWC", 64, {"WG": 32, "VEC": 4}, ["batch_norm_stats", "batch_norm_finalize", "batch_norm_apply"]),
    ):
        x = hal.asarray(rng.standard_normal((2, c, 5, 7)).astype(np.float32), device=dev, layout=layout)
        rm, rv = np.zeros(c, np.float32), np.ones(c, np.float32)
        call = lambda x=x, rm=rm, rv=rv: hal.batch_norm(x, rm, rv, training=True)  # noqa: E731
        with forced(dev, "batch_norm", params):
            calls = dev.backend.launch_profile(call, repeats=3, warmup=1)
        assert len(calls) == 3
        for commands in calls:
            assert [name for name, _, _ in commands] == want
            assert commands[0][1] == 0.0
            for _, start, end in commands:
                assert 0.0 <= start <= end
            assert [s for _, s, _ in commands] == sorted(s for _, s, _ in commands)  # in-order queue
        assert all(t > 0 for t in dev.backend.time_launches(call, repeats=2, warmup=1))
    buf, size = dev.backend._rt.workspace["bn_counters"]
    counters = np.empty(size // 4, np.int32)
    dev.backend.download(buf, counters)
    assert not counters.any(), counters


def test_workspace_is_zero_up_to_every_size_asked_for() -> None:
    """A zeroed workspace buffer is zero up to the size each call asks for. The memory pool
    may hand out more than the first request (1000 bytes -> a 1023-byte buffer), and only
    the request was zeroed: a later, larger request within that size must not see what the
    pool's memory held (BatchNorm's group counters read it as counts: wrong statistics for
    every later call, session 10's intermittent CI failure)."""
    import pyopencl as cl

    import hal

    try:
        dev = hal.device("opencl:0")
    except hal.HalError as exc:
        pytest.skip(f"no OpenCL device: {exc}")
    be = dev.backend
    if be._rt.exact_buffers:
        pytest.skip("HAL_OPENCL_EXACT_BUFFERS=1: no pool, so no bin larger than the request to test")
    first = be._workspace("test-zeroed", 1000, zeroed=True)
    whole = first.size // 4 * 4
    assert whole > 1000, "the pool gave exactly what was asked: this test would not notice the bug"
    cl.enqueue_copy(be.queue, first, np.full(whole // 4, 7, np.int32), is_blocking=True)  # memory as reused
    again = be._workspace("test-zeroed", whole, zeroed=True)
    got = np.empty(whole // 4, np.int32)
    be.download(again, got)
    assert not got.any(), np.flatnonzero(got)


def test_qpool2d_strip_division_table_is_exact():
    """qpool2d.cl's QMAGIC9: floor(u / d) = (u * QMAGIC9[d]) >> 32 for d = 2 .. 9 and every u the
    strips' averages reach (u = s + 4096 d < 2^16, |s| <= 2295), as its comment claims."""
    import re
    from pathlib import Path

    src = (Path(__file__).resolve().parent.parent / "kernels_cl" / "qpool2d.cl").read_text()
    body = re.search(r"QMAGIC9\[10\]\s*=\s*\{([^}]*)\}", src)
    assert body, "QMAGIC9 not found in qpool2d.cl"
    magic = [int(v.strip().rstrip("u")) for v in body.group(1).split(",")]
    assert len(magic) == 10
    u = np.arange(1 << 16, dtype=np.uint64)
    for d in range(2, 10):
        assert magic[d] < 1 << 32
        assert np.array_equal((u * np.uint64(magic[d])) >> np.uint64(32), u // np.uint64(d)), d


def test_qpool2d_pack_division_table_is_exact():
    """qpool2d_pack.cl's QMAGIC2: floor(u / 2d) = (u * QMAGIC2[d]) >> 32 for d = 1 .. 9 and every
    u < 2^17 (its averages reach u = 2 s + d + 8192 d < 78400, |s| <= 2295), as its header claims."""
    import re
    from pathlib import Path

    src = (Path(__file__).resolve().parent.parent / "kernels_cl" / "qpool2d_pack.cl").read_text()
    body = re.search(r"QMAGIC2\[10\]\s*=\s*\{([^}]*)\}", src)
    assert body, "QMAGIC2 not found in qpool2d_pack.cl"
    magic = [int(v.strip().rstrip("u")) for v in body.group(1).split(",")]
    assert len(magic) == 10
    u = np.arange(1 << 17, dtype=np.uint64)
    for d in range(1, 10):
        assert magic[d] < 1 << 32
        assert np.array_equal((u * np.uint64(magic[d])) >> np.uint64(32), u // np.uint64(2 * d)), d


def test_packed_int8_pooling_builds_only_where_it_applies() -> None:
    """QROWS16=1 builds qpool2d_pack.cl's NCHW strips for int8/uint8 2x2 and 3x3 windows of
    stride 2 (left pad 0 or 1, no dilation, no indices, IW % 4 == 0; QP_ALIGN16 where
    IW % 16 == 0), and QVEC16=2 its NHWC kernels where QVEC16=1 applies; every other spec
    keeps the build it had. HAL_PTX_U16X2 only for max, only where the device takes it; the
    canonical set keeps STRIP_ROWS for QROWS16 (it sizes the strips)."""
    from hal import spec as S
    from hal.backends.opencl import QPACK_FILE, OpenCLBackend

    schema = OpenCLBackend.schemas()["pool2d"]
    defaults = schema.defaults()
    rows = {**defaults, "QROWS16": 1, "STRIP_ROWS": 2}
    assert schema.canonical(rows)["STRIP_ROWS"] == 2 and schema.canonical({**rows, "QROWS16": 0})["STRIP_ROWS"] == 4

    def build(shape: tuple[int, int, int, int], layout: str, dtype: str, kind: str, k: int, s: int, pad: int,
              dil: int = 1, indices: bool = False, params: dict[str, int] = rows, ptx: bool = False) -> tuple:
        """(file, kernel, -D set, mode, band rows) the launcher builds for this pooling call."""
        g = S.plane_geometry(S.TensorGeometry(*shape, layout, np.dtype(dtype)))  # type: ignore[arg-type]
        spec = S.pool2d_spec(kind, g, k, s, pad, dil, False, True, None, indices)
        return _builder(ptx, ptx)._pool2d_build(spec, params)

    for dtype, kind, w, k, pad in (("int8", "max", 112, 3, 1), ("uint8", "avg", 20, 2, 0), ("int8", "avg", 36, 3, 0),
                                   ("uint8", "max", 48, 2, 1)):
        for ptx in (True, False):
            file, _, defines, _, _ = build((2, 8, 9, w), "NCHW", dtype, kind, k, 2, pad, ptx=ptx)
            assert file == QPACK_FILE, (dtype, kind, w, k, pad)
            assert (defines["STRIP_K"], defines["POOL_PL"], defines["STRIP_ROWS"]) == (k, pad, 2)
            assert defines["QP_ALIGN16"] == int(w % 16 == 0)
            assert defines.get("HAL_PTX_U16X2", 0) == int(ptx and kind == "max"), (kind, ptx)
    for why, args in (("IW % 4", ((2, 8, 9, 30), "NCHW", "int8", "max", 3, 2, 1)),
                      ("indices", ((2, 8, 9, 32), "NCHW", "int8", "max", 3, 2, 1, 1, True)),
                      ("stride 1", ((2, 8, 9, 32), "NCHW", "uint8", "avg", 3, 1, 1)),
                      ("dilation", ((2, 8, 9, 32), "NCHW", "int8", "max", 2, 2, 0, 2)),
                      ("window 4", ((2, 8, 9, 32), "NCHW", "int8", "avg", 4, 2, 1)),
                      ("float", ((2, 8, 9, 32), "NCHW", "float32", "max", 3, 2, 1)),
                      ("NHWC", ((2, 8, 9, 32), "NHWC", "int8", "max", 3, 2, 1))):
        assert build(*args)[0] != QPACK_FILE, why
    q2 = {**defaults, "QVEC16": 2}
    for kind in ("max", "avg"):
        file, _, defines, _, _ = build((2, 20, 9, 9), "NHWC", "uint8", kind, 3, 2, 1, params=q2, ptx=True)
        assert file == QPACK_FILE and defines["LAYOUT_NHWC"] == 1 and defines["POOL_KH"] == 3
        assert defines.get("HAL_PTX_U16X2", 0) == int(kind == "max")
    assert build((2, 20, 9, 9), "NHWC", "int8", "max", 3, 2, 1, indices=True, params=q2)[0] != QPACK_FILE
    assert build((2, 20, 9, 9), "NCHW", "int8", "max", 3, 2, 1, params=q2)[0] != QPACK_FILE


def test_make_runs_each_distinct_emulated_profile_once(monkeypatch, tmp_path) -> None:
    """tools/opencl_profiles.py (make test's profile list): profiles that match the same table
    entries run once, the later ones named with the one they duplicate (the three AMD profiles
    share the vendor rows); a user table's entry for one family sets that profile apart."""
    import json
    import sys
    from pathlib import Path

    monkeypatch.delenv("HAL_TUNING_PATH", raising=False)
    monkeypatch.setenv("HAL_CACHE_DIR", str(tmp_path / "cache"))  # no user tables of this machine
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "tools"))
    sys.modules.pop("opencl_profiles", None)
    import opencl_profiles

    amd = ["amd-gcn", "amd-cdna", "amd-rdna", "nvidia"]
    assert opencl_profiles.distinct(amd) == (["amd-gcn", "nvidia"], [("amd-cdna", "amd-gcn"), ("amd-rdna", "amd-gcn")])
    user = tmp_path / "user.json"
    user.write_text(json.dumps({"format": "hal-tuning-table", "version": 1, "backend": "opencl", "entries": [
        {"level": "arch_family", "match": "cdna", "kernel": "pool2d", "key": {}, "params": {"WG": 64},
         "provenance": "test entry"}]}))
    monkeypatch.setenv("HAL_TUNING_PATH", str(user))
    assert opencl_profiles.distinct(amd) == (["amd-gcn", "amd-cdna", "nvidia"], [("amd-rdna", "amd-gcn")])
    with pytest.raises(SystemExit, match="not a profile"):
        opencl_profiles.distinct(["mali-t999"])


@pytest.mark.parametrize("exact", ["1", ""])
def test_exact_buffers_are_exactly_the_bytes_asked_for(monkeypatch, exact: str) -> None:
    """HAL_OPENCL_EXACT_BUFFERS=1 (the Oclgrind runs): each buffer is exactly the size asked for,
    so a checking driver sees an access one element past the end; without it, the pool's bins
    round 1000 bytes up (the slack that hid such an access)."""
    import pyopencl as cl

    from hal.backends.opencl import OpenCLBackend, _Runtime

    try:
        device = next(d for p in cl.get_platforms() for d in p.get_devices())
    except (cl.Error, StopIteration) as exc:
        pytest.skip(f"no OpenCL device: {exc}")
    monkeypatch.setenv("HAL_OPENCL_EXACT_BUFFERS", exact)
    be = OpenCLBackend.__new__(OpenCLBackend)
    be._rt = _Runtime(device)
    buffer = be.allocate(1000)
    assert (buffer.size == 1000) == bool(exact), buffer.size


def test_opencl_ops_rotate_cycles_through_copies_of_the_buffers() -> None:
    """benchmarks/opencl_ops.py --rotate: the runner holds enough (x, y) copies for the bytes
    asked, each call launches on the next copy, and every copy's output is the op's."""
    import sys
    from pathlib import Path

    import hal
    from hal import reference

    try:
        dev = hal.device("opencl:0")
    except hal.HalError as exc:
        pytest.skip(f"no OpenCL device: {exc}")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    try:
        import opencl_ops as B
    finally:
        sys.path.pop(0)
    case = next(c for c in B.CASES if c.name == "bn train fwd")
    spec = B.make_spec(case, (2, 8, 5, 7), "float32", "NCHW")
    per_set = 2 * 2 * 8 * 5 * 7 * 4  # x and y
    runner = B.Runner(dev, spec, np.random.default_rng(1), rotate_bytes=3 * per_set - 1)
    assert len(runner.sets) == 3
    assert len({id(x) for x, _ in runner.sets}) == 3 and len({id(y) for _, y in runner.sets}) == 3
    params = dict(dev.tuner.resolve_spec(spec).params)
    nan = dev.backend.upload(np.full(2 * 8 * 5 * 7, np.nan, np.float32))
    for _, y in runner.sets:
        dev.backend.copy(nan, y, 2 * 8 * 5 * 7 * 4)  # unwritten outputs show as NaN
    call = runner.call(params)
    w, b, rm, rv = (a.astype(np.float64) for a in runner.host_extra)
    want = reference.batch_norm_from_spec(spec, runner.x_host.astype(np.float64), rm.copy(), rv.copy(), w, b)
    for turn in range(3):
        call()
        out = np.empty((2, 8, 5, 7), np.float32)
        dev.backend.download(runner.sets[turn][1], out)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_pocl_device_that_cannot_build_is_left_out(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A PoCL device whose probe build fails is not listed, and the backend's status names it
    and why (PyPI's PoCL 3.0 on a CPU its LLVM 14 does not know fails every build)."""
    pytest.importorskip("pyopencl")
    from hal.backends import opencl as ocl

    pocl = [i for i, (p, _) in enumerate(ocl._enumerate()) if ocl.is_pocl_platform(p.name)]
    if not pocl:
        pytest.skip("no PoCL platform here")
    monkeypatch.setattr(ocl, "_pocl_cannot_build", lambda device: "fake: error: unknown target CPU 'generic'")
    probe = ocl.OpenCLBackend.probe()
    assert not {info.index for info in probe.devices} & set(pocl)
    for index in pocl:
        assert f"opencl:{index} skipped (fake: error: unknown target CPU 'generic')" in probe.reason
        assert probe.skipped[f"opencl:{index}"] == "fake: error: unknown target CPU 'generic'"
    # what `hal devices --json` reads: the status carries the skipped devices as data
    from hal.device import backend_status, refresh

    refresh()
    try:
        status = next(s for s in backend_status() if s.name == "opencl")
        assert set(status.skipped) == {f"opencl:{index}" for index in pocl}
        from hal.cli import main

        capsys.readouterr()
        assert main(["devices", "--json"]) == 0
        listed = json.loads(capsys.readouterr().out)["skipped"]
        assert {k: v for k, v in listed.items() if k.startswith("opencl:")} == {
            f"opencl:{index}": "fake: error: unknown target CPU 'generic'" for index in pocl}
    finally:
        monkeypatch.undo()
        refresh()


def test_pocl_probe_build_names_the_error_and_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's reason is the build log's first error, plus the install hint for the
    unknown-CPU failure; a device that builds gives ""."""
    cl = pytest.importorskip("pyopencl")
    from hal.backends import opencl as ocl

    class FailingProgram:
        def __init__(self, *args: object) -> None:
            pass

        def build(self) -> None:
            raise cl.RuntimeError("clBuildProgram failed: BUILD_PROGRAM_FAILURE - Build on <pyopencl.Device "
                                  "'pthread-X' at 0x1>: error: unknown target CPU 'generic' Device pthread-X "
                                  "failed to build the program")

    class FakeDevice:
        name = "pthread-X "

    monkeypatch.setattr(cl, "Context", lambda devices: None)
    monkeypatch.setattr(cl, "Program", FailingProgram)
    why = ocl._pocl_cannot_build(FakeDevice())
    assert why.startswith("pthread-X cannot build a kernel: error: unknown target CPU 'generic';"), why
    assert "apt-get install pocl-opencl-icd" in why
    monkeypatch.undo()
    working = [d for p, d in ocl._enumerate() if ocl.is_pocl_platform(p.name)]
    usable = {info.name for info in ocl.OpenCLBackend.probe().devices}
    for device in working:
        if device.name.strip() in usable:
            assert ocl._pocl_cannot_build(device) == ""


def test_ensure_pocl_advises_when_it_cannot_install(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """tools/ensure_pocl.py (the Makefile's environment step): nothing to do where a PoCL device
    builds; where none does and it is not root (or has no apt-get), it names the package and fails
    rather than leaving the OpenCL tests without a device; as root it would install it."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "tools" / "ensure_pocl.py"
    spec = importlib.util.spec_from_file_location("ensure_pocl", path)
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    monkeypatch.setattr(tool, "pocl_builds", lambda: (True, "opencl: 1 device(s)"))
    assert tool.main() == 0
    monkeypatch.setattr(tool, "pocl_builds", lambda: (False, "opencl: no usable OpenCL device"))
    monkeypatch.setattr(tool.os, "geteuid", lambda: 1000)
    ran: list[list[str]] = []
    monkeypatch.setattr(tool.subprocess, "run", lambda cmd, **kw: ran.append(cmd))
    assert tool.main() == 1
    out = capsys.readouterr().out
    assert "no PoCL device builds kernels here" in out and "apt-get install pocl-opencl-icd" in out
    assert ran == []  # not root: nothing installed
    # root with apt-get: installs Debian's PoCL, then checks again
    import types

    answers = iter([(False, "opencl: no usable OpenCL device"), (True, "opencl: 1 device(s)")])
    monkeypatch.setattr(tool, "pocl_builds", lambda: next(answers))
    monkeypatch.setattr(tool.os, "geteuid", lambda: 0)
    monkeypatch.setattr(tool.shutil, "which", lambda name: "/usr/bin/" + name)
    done = types.SimpleNamespace(returncode=0)
    monkeypatch.setattr(tool.subprocess, "run", lambda cmd, **kw: ran.append(cmd) or done)
    assert tool.main() == 0
    assert ran[-1] == ["apt-get", "install", "-y", "-qq", "pocl-opencl-icd"]
