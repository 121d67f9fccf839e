"""OpenCLBackend.time_launches(queued=True): the timed calls gated behind a user event.

Runs on the first OpenCL device of ``HAL_TEST_DEVICES`` (none given: ``opencl:0``, PoCL in
CI); skips without one. A gate left shut would make the
queue wait forever: every test here runs under a faulthandler deadline that ends the
process with a traceback instead of hanging (the project has no pytest-timeout).
"""

from __future__ import annotations

import faulthandler
import math
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import hal
from hal import reference as R
from hal import spec as S

pytestmark = pytest.mark.opencl

#: seconds after which a hung test ends the whole run (with every thread's traceback)
DEADLINE_S = 120


@pytest.fixture(autouse=True)
def _deadline() -> Iterator[None]:
    faulthandler.dump_traceback_later(DEADLINE_S, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> Any:
    """The first OpenCL device of ``--devices`` / ``HAL_TEST_DEVICES`` (none given: ``opencl:0``):
    its backend; skips without one, or when the devices chosen hold no OpenCL one."""
    wanted = [s.strip() for s in request.config.getoption("--devices").split(",") if s.strip()]
    chosen = [s for s in wanted if s.startswith("opencl")]
    if wanted and not chosen:
        pytest.skip(f"no OpenCL device among --devices {','.join(wanted)}")
    name = chosen[0] if chosen else "opencl:0"
    try:
        dev = hal.device(name)
    except hal.HalError as exc:
        pytest.skip(f"no OpenCL device: {exc}")
    if dev.kind != "opencl":
        pytest.skip(f"{name} is not an OpenCL device")
    return dev.backend


class _BatchNorm:
    """BatchNorm training forward, NCHW, through the backend's launcher: two kernels
    (statistics with the finalize fused, then apply), no running statistics."""

    def __init__(self, backend: Any) -> None:
        rng = np.random.default_rng(7)
        self.backend = backend
        self.spec = S.batch_norm_spec(S.TensorGeometry(2, 8, 6, 5, "NCHW", np.dtype(np.float32)),  # type: ignore[arg-type]
                                      True, 0.1, 1e-5, False)
        self.x_host = rng.standard_normal((2, 8, 6, 5)).astype(np.float32)
        self.w_host = rng.standard_normal(8).astype(np.float32)
        self.b_host = rng.standard_normal(8).astype(np.float32)
        self.x, self.w, self.b = (backend.upload(a) for a in (self.x_host, self.w_host, self.b_host))
        self.y = backend.allocate(self.x_host.nbytes)

    def __call__(self) -> None:
        self.backend.batch_norm(self.spec, self.x, self.y, self.w, self.b, None, None, {})

    def check(self) -> None:
        """The output against the float64 reference (after the queue has finished)."""
        got = np.empty_like(self.x_host)
        self.backend.download(self.y, got)
        want = R.batch_norm_from_spec(self.spec, self.x_host, None, None, self.w_host, self.b_host)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _recording(monkeypatch: pytest.MonkeyPatch, backend: Any) -> tuple[list[Any], list[Any]]:
    """(gates made, events the backend recorded), each appended as it happens."""
    gates: list[Any] = []
    recorded: list[Any] = []
    base = type(backend)._Gate

    class Gate(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            gates.append(self)

    record = backend._record

    def keep(event: Any, kernel: Any = None) -> None:
        recorded.append(event)
        record(event, kernel)

    monkeypatch.setattr(type(backend), "_Gate", Gate)
    monkeypatch.setattr(backend, "_record", keep)
    return gates, recorded


def _our_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if str(w.message).startswith("hal opencl: time_launches")]


def test_queued_runs_each_call_behind_a_gate_and_times_only_its_kernels(
    backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Warm-ups ungated, then one gate in front of all the timed calls: inside each timed
    call, every kernel enqueued since the gate has not run (still held after 20 ms); each
    figure is exactly the call's first kernel start to its last kernel end (the gate's
    marker is not one of the recorded commands); the backend's queue is the main one again
    afterwards."""
    import pyopencl as cl

    bn = _BatchNorm(backend)
    gates, recorded = _recording(monkeypatch, backend)
    held: list[bool] = []

    def launch() -> None:
        bn()
        if backend._events is not None and gates:  # a timed, gated call
            time.sleep(0.02)
            status = cl.command_execution_status
            timed = recorded[2 * warmup:]
            held.append(len(timed) > 0 and all(
                e.command_execution_status not in (status.RUNNING, status.COMPLETE) for e in timed))

    repeats, warmup = 4, 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        times = backend.time_launches(launch, repeats, warmup=warmup, queued=True)
    assert not _our_warnings(caught)
    assert len(gates) == 1 and held == [True] * repeats
    assert len(recorded) == 2 * (warmup + repeats)  # two kernels a call, gates not among them
    markers = {g.marker.int_ptr for g in gates}
    assert not markers & {e.int_ptr for e in recorded}
    assert all(g.event.command_execution_status == cl.command_execution_status.COMPLETE for g in gates)
    assert not any(g.forced for g in gates)
    start, end = cl.profiling_info.START, cl.profiling_info.END
    for i, t in enumerate(times):
        events = recorded[2 * (warmup + i): 2 * (warmup + i) + 2]
        want = (max(e.get_profiling_info(end) for e in events) * 1e-9
                - min(e.get_profiling_info(start) for e in events) * 1e-9)
        assert math.isfinite(t) and t > 0
        assert t == pytest.approx(want, rel=0, abs=1e-12)
    assert backend.queue is backend._rt.queue and backend._events is None
    bn.check()

    # launch_profile takes the same gate: the two kernels, named, the first at 0
    gates.clear()
    calls = backend.launch_profile(bn, 2, warmup=1, queued=True)
    assert len(gates) == 1
    for commands in calls:
        assert [n for n, _, _ in commands] == ["batch_norm_stats_finalize", "batch_norm_apply"]
        assert commands[0][1] == 0.0 and all(0.0 <= s <= e for _, s, e in commands)


def test_plain_timing_takes_no_gate(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """queued=False (the default) stays as it was: no user event, no gate."""
    bn = _BatchNorm(backend)
    gates, recorded = _recording(monkeypatch, backend)
    times = backend.time_launches(bn, 3, warmup=1)
    assert not gates and len(recorded) == 2 * 4
    assert all(math.isfinite(t) and t > 0 for t in times)


def test_an_exception_in_a_gated_call_opens_the_gate_and_restores_the_queue(
    backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """launch() raising after it enqueued kernels behind the gate: the exception comes
    through at once, the gate open (by time_launches, not by its watchdog, held off for
    60 s here), the queue and event list restored, and the backend still computes right,
    plain and queued."""
    import pyopencl as cl

    bn = _BatchNorm(backend)
    gates, _ = _recording(monkeypatch, backend)
    monkeypatch.setattr(type(backend), "gate_hold_s", 60.0)  # the watchdog must not be what opens it
    calls = 0

    def launch() -> None:
        nonlocal calls
        calls += 1
        bn()
        if calls == 4:  # 2 warm-ups, then the second timed call
            raise RuntimeError("boom")

    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="boom"):
        backend.time_launches(launch, 5, warmup=2, queued=True)
    assert time.perf_counter() - start < 30
    assert len(gates) == 1 and not any(g.forced for g in gates)
    assert all(g.event.command_execution_status == cl.command_execution_status.COMPLETE for g in gates)
    assert backend.queue is backend._rt.queue and backend._events is None
    backend._rt.profiling_queue().finish()
    backend.synchronize()
    bn.check()
    y = hal.relu(hal.asarray(bn.x_host, device=hal.device(backend.info.id)))
    np.testing.assert_array_equal(y.numpy(), np.maximum(bn.x_host, 0))
    times = backend.time_launches(bn, 2, warmup=1, queued=True)
    assert len(times) == 2 and all(math.isfinite(t) and t > 0 for t in times)


def _falls_back(backend: Any, launch: Callable[[], None], match: str) -> list[float]:
    start = time.perf_counter()
    with pytest.warns(UserWarning, match=match):
        times = backend.time_launches(launch, 3, warmup=1, queued=True)
    assert time.perf_counter() - start < 30
    assert backend.queue is backend._rt.queue and backend._events is None
    assert len(times) == 3 and all(math.isfinite(t) and t > 0 for t in times)
    return times


def test_a_launch_that_waits_for_the_gated_queue_falls_back_instead_of_hanging(
    backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blocking download inside launch() waits for the queue the gate holds shut: the
    watchdog opens the gate after gate_hold_s, and the calls are timed again ungated."""
    bn = _BatchNorm(backend)
    gates, _ = _recording(monkeypatch, backend)
    monkeypatch.setattr(type(backend), "gate_hold_s", 0.05)
    out = np.empty(4, np.float32)

    def launch() -> None:
        bn()
        backend.download(bn.y, out)

    _falls_back(backend, launch, "watchdog opened it")
    assert len(gates) == 1 and gates[0].forced
    bn.check()


def test_queued_falls_back_to_plain_timing_without_user_events(
    backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver or PyOpenCL without user events: a warning naming why, then plain timing."""
    import pyopencl as cl

    class NoUserEvent:
        def __init__(self, context: Any) -> None:
            raise cl.RuntimeError("clCreateUserEvent failed: INVALID_OPERATION")

    monkeypatch.setattr(cl, "UserEvent", NoUserEvent)
    bn = _BatchNorm(backend)
    _falls_back(backend, bn, "no user event on this device")
    bn.check()


def test_queued_falls_back_when_launch_records_no_command(backend: Any) -> None:
    """A call that enqueues nothing this backend records has nothing to gate: a warning,
    then the plain path's host timing."""
    _falls_back(backend, lambda: None, "nothing to gate")
