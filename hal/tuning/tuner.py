"""``hal tune``: search each kernel's parameter space on the device at hand.

For every workload (kernel family, representative shape, dtype, layout):

1. candidates = the schema's parameter sets that pass its constraints on this
   device (dropped before anything is compiled), sampled by mode
   (rapid: 8, normal: 32, exhaustive: all), the default always included;
2. each candidate is checked against the float64 oracle on fresh random inputs
   with poisoned outputs and a guard region, at three shapes of the workload's
   bucket (its largest, its smallest and one that is a multiple of nothing); a
   wrong candidate is reported and never stored;
3. correct candidates are timed (warm-up, median of repeats) at the workload
   shape; the best few are re-timed against the default, interleaved;
4. a result is kept only when it beats the default by at least ``MARGIN``.

Candidates run in a worker process with a time limit, so a hanging or crashing
kernel costs one candidate, not the run; the worker is restarted. A journal
(JSON lines) records each candidate before it starts and after it ends: a
resumed run skips finished candidates and blacklists the one that was in flight.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing as mp
import os
import random
import statistics
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hal.errors import KernelCompileError, LaunchLimitExceeded
from hal.tuning.table import TABLE_FORMAT, TABLE_VERSION, bucket, kernel_key
from hal.tuning.workloads import Workload

if TYPE_CHECKING:
    from hal.backends.base import DeviceInfo
    from hal.tuning.schema import KernelSchema

MARGIN = 0.03
MODES = {"rapid": 8, "normal": 32, "exhaustive": None}
#: spaces of at most this many combinations are enumerated, larger ones drawn at random (KernelSchema.draw)
ENUMERATED_UP_TO = 200_000
#: candidates an exhaustive run measures where the space is drawn, not enumerated
DRAWN_EXHAUSTIVE = 1024
#: drawn candidates per measured one (spares for sets over a kernel limit or launching an earlier set's kernel)
DRAWN_PER_MEASURED = 8
#: spares built together (in parallel, where the backend can) when the queue reaches one not built yet
PREBUILD_BATCH = 8
#: seconds one candidate may take (build, three checks, timing) before it is cut off
CANDIDATE_TIMEOUT = float(os.environ.get("HAL_TUNE_TIMEOUT", "120"))


# ----------------------------------------------------------------------------
# the worker process
# ----------------------------------------------------------------------------


def bucket_shapes(shape: tuple[int, int, int, int]) -> list[tuple[int, int, int, int]]:
    """Largest, smallest and a multiple-of-nothing shape of ``shape``'s bucket."""
    tops = [bucket(v) for v in shape]
    lows = [t // 2 + 1 if t > 1 else 1 for t in tops]
    odd = []
    for lo, hi in zip(lows, tops, strict=True):
        mid = (lo + hi) // 2
        odd.append(mid if mid % 2 else max(lo, mid - 1))
    return [tuple(tops), tuple(lows), tuple(odd)]  # type: ignore[list-item]


@dataclass
class Task:
    """One candidate evaluation sent to the worker."""

    workload: Workload
    dtype: str
    layout: str
    size: str
    params: dict[str, int]
    repeats: int
    seed: int
    validate: bool = True
    fault: str = ""  # test-only: "wrong", "hang", "crash", "over-limit", "poison" or "finite"


#: assumed where a device does not report its last-level cache
DEFAULT_CACHE_BYTES = 64 << 20
#: most copies of a timing input the tuner keeps on the device
MAX_TIMING_COPIES = 8


def last_level_cache_bytes(info: Any) -> int:
    """The device's last-level cache in bytes, as its backend reports it (CUDA's L2,
    OpenCL's global memory cache), else DEFAULT_CACHE_BYTES."""
    extras = dict(getattr(info, "extras", ()))
    for name in ("l2_bytes", "cache_bytes"):
        try:
            value = int(extras.get(name, 0))
        except ValueError:
            continue
        if value > 0:
            return value
    return DEFAULT_CACHE_BYTES


def timing_copies(set_bytes: int, cache_bytes: int) -> int:
    """Copies of a timing input (and output) that together exceed three times the cache."""
    if set_bytes <= 0:
        return 1
    return max(1, min(MAX_TIMING_COPIES, -(-3 * cache_bytes // set_bytes)))


def _checked_problem(
    backend: Any, task: Task, index: int, shape: tuple[int, int, int, int], spec: Any, cache: dict[Any, Any]
) -> tuple[Any, dict[str, Any]]:
    """The uploaded check problem and its oracle outputs for one corner of the bucket.

    Inputs and oracle depend on (workload, dtype, shape, seed), not on the layout, so the
    two layouts of a workload (planned one after the other) share them; the uploaded
    buffers are per layout. Only the current workload and dtype are held: full sizes are GBs.
    """
    from hal.tuning import evaluate

    oracle_key = ("oracle", task.workload.name, task.dtype, shape, task.seed)
    problem_key = ("problem", task.workload.name, task.dtype, task.layout, shape, task.seed)
    if oracle_key not in cache:
        for old in [k for k in cache if k[0] == "oracle" and k[1:3] != oracle_key[1:3]]:
            del cache[old]
        # the first corner's float inputs hold NaN and infinities (evaluate.SPECIAL_FRACTION)
        host = evaluate.make_inputs(spec, np.random.default_rng([task.seed, index]), specials=index == 0)
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf is the oracle's NaN
            cache[oracle_key] = (host, evaluate.oracle(evaluate.Problem(spec, host, {})))
    if problem_key not in cache:
        for old in [k for k in cache if k[0] == "problem" and k[1:4] != problem_key[1:4]]:
            del cache[old]
        cache[problem_key] = evaluate.upload_problem(backend, spec, cache[oracle_key][0])
    return cache[problem_key], cache[oracle_key][1]


def _evaluate(backend: Any, task: Task, oracle_cache: dict[Any, Any]) -> dict[str, Any]:
    from hal.tuning import evaluate

    wl = task.workload
    shape = wl.shape(task.size)
    if task.fault == "hang":
        time.sleep(10**6)
    if task.fault == "crash":
        os.abort()
    if task.fault == "over-limit":
        raise LaunchLimitExceeded("test-only: a kernel limit the candidate is over")
    if task.fault == "poison" or getattr(backend, "_test_poisoned", False):
        backend._test_poisoned = True  # as a faulting kernel leaves the context: every later call fails
        raise RuntimeError("test-only: clEnqueueReadBuffer failed: OUT_OF_RESOURCES")
    if task.validate:
        for i, check_shape in enumerate(bucket_shapes(shape)):
            try:
                spec = wl.spec_for(check_shape, task.dtype, task.layout)
            except ValueError:
                continue  # this corner of the bucket is not a valid call of the op
            problem, want = _checked_problem(backend, task, i, check_shape, spec, oracle_cache)
            for high in evaluate.poison_passes(spec.dtype):
                launch, outs = evaluate.launcher(backend, problem, task.params, high=high)
                launch()
                got, damaged = evaluate.read_outputs(backend, problem, outs, high=high)
                if task.fault == "wrong":
                    got["y"] = got["y"] + 1
                if task.fault == "finite":  # as a kernel that turns NaN or infinities into numbers
                    got["y"] = np.nan_to_num(got["y"], nan=0.0, posinf=0.0, neginf=0.0)
                if damaged:
                    return {"status": "wrong", "detail": f"shape {check_shape}: {damaged}"}
                with np.errstate(invalid="ignore", over="ignore"):
                    result = evaluate.check(problem, got, want)
                if not result.ok:
                    return {"status": "wrong", "detail": f"shape {check_shape}: {result.detail}"}
    # the timing inputs are the same for every candidate of a workload: made (and uploaded) once,
    # as several copies when one would fit in the last-level cache, and the timed calls rotate
    # among them, so no call finds its input left in the cache by the previous one
    key = ("timing", wl.name, task.dtype, task.layout, shape, task.seed)
    if key not in oracle_cache:
        for old in [k for k in oracle_cache if k[0] == "timing"]:
            del oracle_cache[old]  # one full-size timing input held at a time
        spec = wl.spec_for(shape, task.dtype, task.layout)
        host = evaluate.make_inputs(spec, np.random.default_rng(task.seed))
        first = evaluate.upload_problem(backend, spec, host)
        copies = timing_copies(evaluate.problem_bytes(first), last_level_cache_bytes(backend.info))
        problems = [first] + [evaluate.upload_problem(backend, spec, host) for _ in range(copies - 1)]
        # outputs allocated once with the inputs: every candidate and re-timing round reuses them
        oracle_cache[key] = [(p, evaluate.output_buffers(backend, p)) for p in problems]
    launches = itertools.cycle([evaluate.launcher(backend, p, task.params, outs)[0] for p, outs in oracle_cache[key]])
    times = backend.time_launches(lambda: next(launches)(), task.repeats, warmup=2, queued=True)
    return {"status": "ok", "median_ms": statistics.median(times) * 1e3, "times_ms": [t * 1e3 for t in times]}


def _die_with_parent() -> None:
    """Linux: have the kernel kill this worker when the tuning process dies (even by kill -9)."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def worker_main(conn: Connection, device_id: str) -> None:
    """Serve tasks on ``device_id`` until told to stop (runs in a child process)."""
    _die_with_parent()
    import hal

    backend = hal.device(device_id).backend
    backend.exact_params = True  # a candidate the launcher would have to shrink is rejected
    cache: dict[Any, Any] = {}
    while True:
        task = conn.recv()
        if task is None:
            return
        try:
            if isinstance(task, list):  # re-timing several parameter sets, interleaved
                rounds: dict[int, list[float]] = {i: [] for i in range(len(task))}
                for _ in range(3):
                    for i, t in enumerate(task):
                        rounds[i].append(_evaluate(backend, t, cache)["median_ms"])
                conn.send({"status": "ok", "medians_ms": [statistics.median(v) for v in rounds.values()]})
            else:
                conn.send(_evaluate(backend, task, cache))
        except LaunchLimitExceeded as exc:  # infeasible on this device, not wrong: the tuner draws a spare
            conn.send({"status": "over-limit", "detail": str(exc)[:2000]})
        except Exception as exc:  # a failing build or launch is this candidate's result
            # a launch that faulted may leave the context unusable (NVIDIA's OpenCL then fails
            # every later call with OUT_OF_RESOURCES): the next candidate gets a fresh worker.
            # A build error leaves the context as it was.
            conn.send({"status": "error", "detail": f"{type(exc).__name__}: {exc}".strip()[:2000],
                       "trace": traceback.format_exc(limit=3)[-2000:],
                       "restart": not isinstance(exc, KernelCompileError)})


class Worker:
    """A child process evaluating candidates, restarted after a hang or crash."""

    def __init__(self, device_id: str) -> None:
        self.device_id = device_id
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._conn: Connection | None = None

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=worker_main, args=(child, self.device_id), daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent

    def run(self, task: Any, timeout: float) -> dict[str, Any]:
        """Evaluate ``task``; a timeout or a dead worker is reported as the result."""
        if self._proc is None or not self._proc.is_alive():
            self._start()
        assert self._conn is not None
        self._conn.send(task)
        if self._conn.poll(timeout):
            try:
                result = self._conn.recv()
            except EOFError:
                pass
            else:
                if result.get("restart"):
                    self.stop(kill=True)
                return result
            self.stop(kill=True)
            return {"status": "crashed", "detail": "the worker process died"}
        alive = self._proc.is_alive()
        self.stop(kill=True)
        if alive:
            return {"status": "timeout", "detail": f"no result within {timeout:.0f} s; cut off"}
        return {"status": "crashed", "detail": f"the worker process died (exit code {self._proc.exitcode})"}

    def stop(self, kill: bool = False) -> None:
        """End the worker process."""
        if self._proc is None:
            return
        if kill:
            self._proc.kill()
        else:
            try:
                assert self._conn is not None
                self._conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        self._proc.join(timeout=10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        self._proc = None
        self._conn = None


# ----------------------------------------------------------------------------
# journal and tables
# ----------------------------------------------------------------------------


class Journal:
    """JSON lines: each candidate's start and end, so a killed run can resume."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.done: dict[str, dict[str, Any]] = {}
        self.in_flight: set[str] = set()
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # the line being written when the run was killed
                if rec.get("event") == "start":
                    self.in_flight.add(rec["id"])
                elif rec.get("event") == "end":
                    self.in_flight.discard(rec["id"])
                    self.done[rec["id"]] = rec["result"]
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")

    def start(self, cid: str) -> None:
        """Record that candidate ``cid`` is about to run."""
        self._write({"event": "start", "id": cid})

    def end(self, cid: str, result: dict[str, Any]) -> None:
        """Record the outcome of candidate ``cid``."""
        self._write({"event": "end", "id": cid, "result": result})

    def _write(self, rec: dict[str, Any]) -> None:
        self._file.write(json.dumps(rec) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        """Close the journal file."""
        self._file.close()


def write_table_atomic(path: Path, doc: dict[str, Any]) -> None:
    """Write a table as JSON through a temporary file and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _entry_id(e: dict[str, Any]) -> str:
    return json.dumps([e.get("level"), e.get("match"), e.get("kernel"), e.get("key", {})], sort_keys=True)


def merge_entries(*lists: list[dict[str, Any]], backend: str | None = None) -> list[dict[str, Any]]:
    """Union of entries; where two cover the same (level, match, kernel, key) the faster measured one
    stays, except that with ``backend`` given a current entry always replaces a stale one (measured
    with other kernel sources or another hal: its time says nothing about today's kernels)."""
    from hal.tuning.table import _staleness

    def stale(e: dict[str, Any]) -> bool:
        return backend is not None and bool(_staleness(e, backend))

    merged: dict[str, dict[str, Any]] = {}
    for entries in lists:
        for e in entries:
            eid = _entry_id(e)
            old = merged.get(eid)
            if old is None or (stale(old) and not stale(e)):
                merged[eid] = e
            elif stale(e) and not stale(old):
                continue
            elif e.get("median_ms") is not None and e["median_ms"] < old.get("median_ms", float("inf")):
                merged[eid] = e
    return list(merged.values())


def drop_stale_entries(
    entries: list[dict[str, Any]], backend: str
) -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], str]]]:
    """Entries that still describe this hal's kernels, and the stale ones with the reason each is
    stale. Serving skips stale entries anyway (with a warning); dropping them keeps a shipped
    table free of entries nobody can serve after a kernel edit whose re-tune kept no entry."""
    from hal.tuning.table import _staleness

    kept: list[dict[str, Any]] = []
    dropped: list[tuple[dict[str, Any], str]] = []
    for e in entries:
        why = _staleness(e, backend)
        if why:
            dropped.append((e, why))
        else:
            kept.append(e)
    return kept, dropped


def describe_entry(entry: dict[str, Any]) -> str:
    """One line naming a table entry: level, match, kernel and key."""
    raw_key = entry.get("key")
    key = ", ".join(f"{k}={v}" for k, v in sorted(raw_key.items())) if isinstance(raw_key, dict) else repr(raw_key)
    return f"{entry.get('level')} {entry.get('match')!r} {entry.get('kernel')} [{key}]"


def read_table(path: Path) -> dict[str, Any]:
    """A table file as a dict (an empty table when the file does not exist)."""
    if not path.exists():
        return {}
    doc = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or doc.get("format") != TABLE_FORMAT:
        raise ValueError(f"{path}: not a {TABLE_FORMAT} file")
    return doc


# ----------------------------------------------------------------------------
# the search
# ----------------------------------------------------------------------------


@dataclass
class Outcome:
    """What tuning one workload found."""

    workload: str
    kernel: str
    dtype: str
    layout: str
    default_ms: float | None
    best_ms: float | None
    best_params: dict[str, int] | None
    kept: bool
    tried: int
    rejected: list[tuple[dict[str, int], str, str]] = field(default_factory=list)
    #: candidates the compiled kernel could not launch as given (a per-kernel work-group or
    #: local-memory limit, known only after the build); each was replaced by a spare
    over_limit: list[tuple[dict[str, int], str]] = field(default_factory=list)
    #: candidates whose launch plan equals an earlier candidate's (the backend's
    #: launch_signature): the same kernels under another name, skipped and replaced by spares
    same_kernel: int = 0
    #: a drawn space's screen (screen_parameters): (parameters that change the workload's kernels
    #: at the default, parameters in all); None where the space was enumerated or not screened
    screened: tuple[int, int] | None = None
    #: False when the budget ran out before every planned candidate was evaluated
    finished: bool = True
    #: what the tables serve today (shipped or user entry), when it differs from the default,
    #: and its re-timed median: a result must beat both to be kept
    serving_params: dict[str, int] | None = None
    serving_ms: float | None = None


def _cid(wl: Workload, dtype: str, layout: str, size: str, params: dict[str, int], sources: str = "") -> str:
    """A candidate's journal key; ``sources`` names the device and its kernel sources, so that a
    journal left by a run on another device or before a kernel edit is not taken for this one's."""
    return json.dumps([wl.name, dtype, layout, size, params, sources], sort_keys=True)


def _sources_id(device: Any, kernel: str) -> str:
    """Device, hal version and the kernel family's source hash: what a journaled result depends on."""
    from hal import __version__
    from hal.resources import family_hash
    from hal.tuning.table import KERNEL_FOLDERS

    folder = KERNEL_FOLDERS.get(device.kind)
    source = family_hash(folder, kernel) if folder else ""
    return f"{device.id}|{device.info.name}|{__version__}|{source}"


def parse_faults() -> dict[int, str]:
    """Test-only fault injection: ``HAL_TUNE_INJECT="wrong:1,hang:3,crash:5,poison:7"`` (candidate
    ordinals; poison: an error that leaves the worker's device unusable, as a faulting launch does;
    finite: NaN and infinities in the output replaced by 0)."""
    faults = {}
    for item in os.environ.get("HAL_TUNE_INJECT", "").split(","):
        if ":" in item:
            kind, _, index = item.partition(":")
            faults[int(index)] = kind.strip()
    return faults


@dataclass
class Screen:
    """A drawn space's parameters tried one at a time from the default, at the workload's timing
    shape: those whose values change what a call launches or builds there (``relevant``), and one
    set per distinct change (``variants``)."""

    relevant: frozenset[str]
    variants: list[dict[str, int]]


def candidate_order(
    schema: KernelSchema, info: DeviceInfo, default: dict[str, int], rng: random.Random, limit: int | None,
    screen: Screen | None = None,
) -> list[dict[str, int]]:
    """The valid candidates other than ``default``, in the order the tuner measures them (those past
    ``limit - 1`` are spares): all of them shuffled where the schema has at most ENUMERATED_UP_TO
    combinations; else a random draw of DRAWN_PER_MEASURED per measured one (an exhaustive run:
    DRAWN_EXHAUSTIVE in all), since listing every combination would not end (CUDA's conv2d).
    With a ``screen``, a drawn order starts with its variants (shuffled), then takes three draws
    that vary only its relevant parameters to one that varies every parameter: most of a large
    space's parameters do nothing at a given workload (CUDA's conv2d: the other kernels' tiles)."""
    if schema.size() <= ENUMERATED_UP_TO:
        others = [c for c in schema.candidates() if c != default and schema.validate(c, info) is None]
        rng.shuffle(others)
        return others
    want = DRAWN_EXHAUSTIVE if limit is None else DRAWN_PER_MEASURED * limit

    def accept(c: dict[str, int]) -> bool:
        return c != default and schema.validate(c, info) is None

    if screen is None:
        return schema.draw(rng, want, accept)
    near = list(screen.variants)
    rng.shuffle(near)
    focused = schema.draw(rng, want * 3 // 4, accept, vary=screen.relevant)
    broad = schema.draw(rng, want - len(focused), accept)
    mixed = []
    for i, c in enumerate(focused):  # three focused draws, then a broad one
        mixed.append(c)
        if i % 3 == 2 and i // 3 < len(broad):
            mixed.append(broad[i // 3])
    mixed.extend(broad[len(focused) // 3:])
    order: dict[tuple[tuple[str, int], ...], dict[str, int]] = {}
    for c in [*near, *mixed]:
        order.setdefault(_key(c), c)
    return list(order.values())


def screen_parameters(
    device: Any, wl: Workload, size: str, dtype: str, layout: str, schema: KernelSchema, default: dict[str, int]
) -> Screen | None:
    """Each parameter's other tuned values, one at a time from ``default``, compared by the backend's
    built signature (else its launch signature) at the timing shape; None where the backend has
    neither. Builds every variant first (in parallel, where the backend can)."""
    spec = _timing_spec(wl, size, dtype, layout)
    if spec is None:
        return None
    singles: list[tuple[str, dict[str, int]]] = []
    for p in schema.params:
        for v in p.values:
            if v == default[p.name] or v in p.untuned:
                continue
            c = {**default, p.name: v}
            c = schema.canonical(c) if schema.canonical is not None else c
            if c != default and schema.validate(c, device.info) is None:
                singles.append((p.name, c))
    _prebuild(device, wl, size, dtype, layout, [default, *(c for _, c in singles)])
    sign = _built_signature
    base = sign(device, spec, default)
    if base is None:
        sign = _launch_signature
        base = sign(device, spec, default)
    if base is None:
        return None
    seen, relevant, variants = {base}, set(), []
    for name, c in singles:
        signature = sign(device, spec, c)
        if signature != base:  # None (unknown) counts as a change
            relevant.add(name)
        if signature is None or signature not in seen:
            seen.add(signature)
            variants.append(c)
    return Screen(frozenset(relevant), variants)


def tune(
    device: Any,
    workloads: list[tuple[Workload, str, str]],
    mode: str = "normal",
    size: str = "small",
    budget_s: float | None = None,
    journal_path: Path | None = None,
    repeats: int = 10,
    seed: int | None = None,
    progress: Callable[[str, int, int, float | None, float | None], None] | None = None,
) -> list[Outcome]:
    """Search every workload's candidates on ``device``; returns one Outcome per workload."""
    schemas = device.backend.schemas()
    info = device.info
    limit = MODES[mode]
    seed = int.from_bytes(os.urandom(4), "little") if seed is None else seed
    faults = parse_faults()
    deadline = None if budget_s is None else time.monotonic() + budget_s
    journal = Journal(journal_path) if journal_path else None
    worker = Worker(device.id)
    outcomes: list[Outcome] = []
    ordinal = 0
    try:
        for wl, dtype, layout in workloads:
            schema = schemas[wl.kernel]
            sources = _sources_id(device, wl.kernel)
            default = schema.defaults()
            screen = None
            if schema.size() > ENUMERATED_UP_TO and (deadline is None or time.monotonic() < deadline):
                screen = screen_parameters(device, wl, size, dtype, layout, schema, default)
            others = candidate_order(schema, info, default, random.Random(f"{seed}-{wl.name}-{dtype}-{layout}"),
                                     limit, screen)
            chosen = [default] + (others if limit is None else others[: limit - 1])
            serving = _serving_params(device, wl, size, dtype, layout, schema)
            if serving is not None and serving != default and serving not in chosen:
                chosen.insert(1, serving)
            # the winners of earlier runs whose kernel sources changed since: likely winners again
            for previous in _stale_params(device, wl, size, dtype, layout, schema):
                if previous not in chosen:
                    chosen.insert(1, previous)
            if deadline is None or time.monotonic() < deadline:
                _prebuild(device, wl, size, dtype, layout, chosen)
            results: list[tuple[dict[str, int], dict[str, Any]]] = []
            outcome = Outcome(wl.name, wl.kernel, dtype, layout, None, None, None, False, 0)
            if screen is not None:
                outcome.screened = (len(screen.relevant), len(schema.params))
            # candidates over a per-kernel limit do not count: spares from the same shuffled
            # order take their places, so a mode always measures its number of launchable sets
            prebuilt = {_key(c) for c in chosen}
            spare_list = [c for c in others if _key(c) not in prebuilt]
            taken = 0  # spares queued so far (spare_list[:taken])
            queue = list(chosen)
            signatures: set[Any] = set()
            timing_spec = _timing_spec(wl, size, dtype, layout)
            # None where the backend has no built signatures (the default's tells)
            built_signatures: set[Any] | None = (
                set() if _built_signature(device, timing_spec, default) is not None else None)
            i = 0
            while i < len(queue):
                params = queue[i]
                i += 1
                if deadline is not None and time.monotonic() > deadline:
                    outcome.finished = False
                    break
                # a set that launches exactly what an earlier one did is the same kernel: a spare
                # takes its place, so a mode measures its number of distinct kernels
                repeat = _seen_before(_launch_signature(device, timing_spec, params), signatures)
                # the same check on the compiled code: -D sets that differ only in macros the launched
                # kernels never read (CUDA: every code-changing parameter of the family is a -D)
                if not repeat and built_signatures is not None:
                    if _key(params) not in prebuilt:  # a spare: build it and the next few in parallel
                        batch = [params, *spare_list[taken:taken + PREBUILD_BATCH - 1]]
                        _prebuild(device, wl, size, dtype, layout, batch)
                        prebuilt.update(_key(c) for c in batch)
                    repeat = _seen_before(_built_signature(device, timing_spec, params), built_signatures)
                if repeat:
                    outcome.same_kernel += 1
                    taken = _queue_spare(queue, spare_list, taken)
                    continue
                cid = _cid(wl, dtype, layout, size, params, sources)
                if journal and cid in journal.done:
                    result = journal.done[cid]
                elif journal and cid in journal.in_flight:
                    result = {"status": "blacklisted", "detail": "was running when an earlier run died"}
                    journal.end(cid, result)
                else:
                    ordinal += 1
                    task = Task(wl, dtype, layout, size, params, repeats, seed, True, faults.get(ordinal, ""))
                    if journal:
                        journal.start(cid)
                    result = worker.run(task, CANDIDATE_TIMEOUT)
                    if journal:
                        journal.end(cid, result)
                if result["status"] == "over-limit":
                    outcome.over_limit.append((params, result.get("detail", "")))
                    taken = _queue_spare(queue, spare_list, taken)
                    continue
                results.append((params, result))
                outcome.tried += 1
                if result["status"] != "ok":
                    outcome.rejected.append((params, result["status"], result.get("detail", "")))
                best = min((r["median_ms"] for _, r in results if r["status"] == "ok"), default=None)
                if progress:
                    left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                    progress(f"{wl.name} {dtype} {layout}", outcome.tried, len(chosen), best, left)
            ok = sorted(((r["median_ms"], p) for p, r in results if r["status"] == "ok"), key=lambda t: t[0])
            default_ok = next((r for p, r in results if p == default and r["status"] == "ok"), None)
            if default_ok is None or not ok:
                outcomes.append(outcome)
                continue
            # re-time the top few against the default (and what the tables serve today),
            # interleaved, to keep noise out of the choice
            serving_ok = serving is not None and serving != default and any(
                p == serving and r["status"] == "ok" for p, r in results)
            top = [p for _, p in ok[:3] if p != default and p != serving]
            contenders = [default, *([serving] if serving_ok else []), *top]
            retimed = worker.run([Task(wl, dtype, layout, size, p, repeats, seed, validate=False)
                                  for p in contenders], CANDIDATE_TIMEOUT * len(contenders))
            if retimed.get("status") != "ok":
                outcomes.append(outcome)
                continue
            medians = retimed["medians_ms"]
            best_i = int(np.argmin(medians))
            outcome.default_ms = medians[0]
            outcome.best_ms = medians[best_i]
            outcome.best_params = contenders[best_i]
            baseline = medians[0]
            if serving_ok:
                outcome.serving_params, outcome.serving_ms = serving, medians[1]
                baseline = min(baseline, medians[1])
            outcome.kept = contenders[best_i] not in (default, serving) and medians[best_i] <= baseline * (1 - MARGIN)
            outcomes.append(outcome)
    finally:
        worker.stop()
        if journal:
            journal.close()
    return outcomes


def _serving_params(
    device: Any, wl: Workload, size: str, dtype: str, layout: str, schema: Any
) -> dict[str, int] | None:
    """The parameters the tables serve this workload today (None where only the default would)."""
    from hal.tuning.table import kernel_key

    try:
        kernel, key = kernel_key(wl.spec_for(wl.shape(size), dtype, layout))
        resolved = device.tuner.resolve(kernel, key)
    except Exception:  # informative only: the search still runs against the default
        return None
    if resolved.level == "default":
        return None
    params = {**schema.defaults(), **resolved.params}
    return params if schema.validate(params, device.info) is None else None


def _timing_spec(wl: Workload, size: str, dtype: str, layout: str) -> Any:
    """The spec a workload's candidates are timed at (None where it cannot be built)."""
    try:
        return wl.spec_for(wl.shape(size), dtype, layout)
    except Exception:  # the evaluation reports the problem
        return None


def _launch_signature(device: Any, spec: Any, params: dict[str, int]) -> Any:
    """The backend's launch signature of ``params`` at ``spec``, or None (unknown: evaluate)."""
    if spec is None:
        return None
    try:
        return device.backend.launch_signature(spec, params)
    except Exception:  # optional and informative: never let it stop a run
        return None


def _queue_spare(queue: list[dict[str, int]], spares: list[dict[str, int]], taken: int) -> int:
    """Queue the next spare, if any is left; returns how many are taken."""
    if taken < len(spares):
        queue.append(spares[taken])
        return taken + 1
    return taken


def _seen_before(signature: Any, seen: set[Any]) -> bool:
    """Whether ``signature`` is in ``seen`` (None, unknown, never is); records it."""
    if signature is None:
        return False
    if signature in seen:
        return True
    seen.add(signature)
    return False


def _key(params: dict[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(params.items()))


def _built_signature(device: Any, spec: Any, params: dict[str, int]) -> Any:
    """The backend's built signature of ``params`` at ``spec`` (may compile), or None (unknown: evaluate)."""
    if spec is None:
        return None
    try:
        return device.backend.built_signature(spec, params)
    except Exception:  # as _launch_signature
        return None


def _stale_params(
    device: Any, wl: Workload, size: str, dtype: str, layout: str, schema: Any
) -> list[dict[str, int]]:
    """Parameters of this device's stale table entries for the workload, valid under today's schema."""
    from hal.tuning.table import kernel_key, stale_device_params

    try:
        kernel, key = kernel_key(wl.spec_for(wl.shape(size), dtype, layout))
        stale = stale_device_params(device.info, kernel, key)
    except Exception:  # informative only, as _serving_params
        return []
    out = []
    for params in stale:
        full = {**schema.defaults(), **params}
        if schema.validate(full, device.info) is None:
            out.append(full)
    return out


def _prebuild(device: Any, wl: Workload, size: str, dtype: str, layout: str, chosen: list[dict[str, int]]) -> None:
    """Let the backend compile the workload's candidates in parallel (a slow compiler's builds, cached)."""
    specs = []
    for shape in [wl.shape(size), *bucket_shapes(wl.shape(size))]:
        try:
            specs.append(wl.spec_for(shape, dtype, layout))
        except ValueError:
            continue
    try:
        device.backend.prebuild(specs, chosen)
    except Exception:  # an optimisation only: each candidate still builds (and reports) on its own
        pass


def table_entries(device: Any, outcomes: list[Outcome], size: str, mode: str) -> list[dict[str, Any]]:
    """User-table entries for the kept outcomes (exact device level)."""
    from hal import __version__
    from hal.resources import family_hash

    info = device.info
    folder = type(device.backend).kernel_folder
    entries = []
    by_name = {wl.name: wl for wl in __import__("hal.tuning.workloads", fromlist=["WORKLOADS"]).WORKLOADS}
    for o in outcomes:
        if not o.kept or o.best_params is None:
            continue
        wl = by_name[o.workload]
        spec = wl.spec_for(wl.shape(size), o.dtype, o.layout)
        _, key = kernel_key(spec)
        entries.append({
            "level": "device",
            "match": info.name,
            "arch": info.arch,
            "kernel": o.kernel,
            "key": key,
            "params": o.best_params,
            "median_ms": round(o.best_ms or 0.0, 6),
            "default_ms": round(o.default_ms or 0.0, 6),
            "provenance": (f"measured by hal tune ({mode}) on {info.name}, {date.today().isoformat()}: "
                           f"{o.best_ms:.4f} ms vs default {o.default_ms:.4f} ms"
                           + (f", served before {o.serving_ms:.4f} ms" if o.serving_ms else "")
                           + f" at {wl.name} {'x'.join(map(str, wl.shape(size)))}"),
            "hal_version": __version__,
            "source_hash": family_hash(folder, o.kernel),
            "driver": info.driver,
        })
    return entries


def new_table(backend: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """A table document around ``entries``."""
    return {"format": TABLE_FORMAT, "version": TABLE_VERSION, "backend": backend, "entries": entries}
