"""``hal bench``: how fast each op runs on each device, against the hardware and PyTorch.

Method: every case runs once through the public op with its backend launches
recorded (``hal.ops.record_launches``). ``ms`` times those launches replayed on the
same buffers: the kernels' own time, since a GPU outruns Python's per-call overhead
on small ops and would otherwise idle between calls (on GPUs also queued:
``time_launches(queued=True)``, behind a spinning kernel on CUDA and a user event on
OpenCL, so that not even the replay's own launch cost shows). ``op ms`` times the public call
as a user makes it (validation, tuning lookup, output allocation, launch). Both use
the backend's ``time_launches`` (device events on GPUs, host clock around a
synchronize elsewhere): warm-up, then the median of repeats.
Bytes count each input read once and each output written once (the baseline
file's rule); the copy bandwidth is a device-to-device copy of 256 MiB (64 MiB on
a CPU), reads plus writes, measured once per device and cached. PyTorch runs the
same case on the same hardware in the same process when it is installed (CUDA
for ``cuda`` and NVIDIA OpenCL devices, the CPU for ``cpu`` and PoCL).
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

import hal
from hal.cache import cache_dir
from hal.device import Device
from hal.device import is_gpu as device_is_gpu
from hal.dtypes import is_bfloat16
from hal.ops import record_launches, replay_launches
from hal.spec import layout_arg


@dataclass(frozen=True)
class BenchCase:
    """One op at one shape (full size = the H200 baseline's)."""

    name: str
    op: str
    shape: tuple[int, int, int, int]
    kwargs: dict[str, Any]
    weight: tuple[int, int, int, int] | None = None
    kernel_family: str = ""


CASES: tuple[BenchCase, ...] = (
    BenchCase("maxpool3x3s2p1", "max_pool2d", (64, 64, 112, 112), {"kernel_size": 3, "stride": 2, "padding": 1}),
    BenchCase("avgpool3x3s2p1", "avg_pool2d", (64, 64, 112, 112), {"kernel_size": 3, "stride": 2, "padding": 1}),
    BenchCase("maxpool2x2s2 4096^2", "max_pool2d", (1, 1, 4096, 4096), {"kernel_size": 2, "stride": 2}),
    BenchCase("globalavgpool", "adaptive_avg_pool2d", (256, 2048, 7, 7), {"output_size": 1}),
    BenchCase("conv3x3 64->64", "conv2d", (256, 64, 32, 32), {"padding": 1}, (64, 64, 3, 3)),
    BenchCase("dwconv3x3", "conv2d", (256, 64, 32, 32), {"padding": 1, "groups": 64}, (64, 1, 3, 3)),
    BenchCase("bn infer", "batch_norm", (256, 64, 32, 32), {"training": False}),
    BenchCase("bn train fwd", "batch_norm", (256, 64, 32, 32), {"training": True}),
)


@dataclass
class BenchRow:
    """One measured case."""

    device: str
    case: str
    dtype: str
    layout: str
    shape: str
    #: device time of the op's kernels (its launches replayed on the same buffers)
    ms: float
    #: one public op call as a user makes it (validation, lookup, allocation, launch)
    op_ms: float
    gbps: float
    gflops: float
    copy_share: float | None
    torch_ms: float | None
    speedup_vs_torch: float | None
    tuning_level: str
    intensity: float


def scaled_shape(case: BenchCase, dev: Device, size: str) -> tuple[int, int, int, int]:
    """Full size on GPUs with the memory for it; N (or H, W) scaled down elsewhere."""
    n, c, h, w = case.shape
    if size == "quick":
        return (max(1, min(n, 2)), min(c, 8), min(h, 33), min(w, 33))
    is_gpu = device_is_gpu(dev)
    if size == "full" or (size == "auto" and is_gpu and dev.info.global_mem_bytes >= 8 * 2**30):
        return case.shape
    # CPU-sized: about 16 MB of float32 input
    target = 4 * 2**20
    elems = n * c * h * w
    if elems <= target:
        return case.shape
    if n > 1:
        return (max(1, n * target // elems), c, h, w)
    side = int((target / (c * n)) ** 0.5)
    return (n, c, min(h, side), min(w, side))


def _bytes_and_flops(case: BenchCase, x: hal.Tensor, y: hal.Tensor) -> tuple[int, int]:
    item = x.dtype.itemsize
    nbytes = x.size * item + y.size * y.dtype.itemsize
    flops = 0
    if case.op == "conv2d":
        assert case.weight is not None
        n, c = x.shape[:2]
        k = case.weight
        groups = case.kwargs.get("groups", 1)
        c_out = c if groups > 1 else k[0]
        nbytes += c_out * (c // groups) * k[2] * k[3] * item
        flops = 2 * n * c_out * y.shape[2] * y.shape[3] * (c // groups) * k[2] * k[3]
    return nbytes, flops


def copy_bandwidth(dev: Device) -> float:
    """Device-to-device copy GB/s (reads + writes), measured once per device and cached."""
    # str hash() is salted per process; a stable digest keeps the cache across runs
    digest = hashlib.sha256(f"{dev.kind}|{dev.info.name}|{dev.info.driver}".encode()).hexdigest()[:16]
    path = cache_dir("bench") / f"copy-{dev.kind}-{digest}.json"
    if path.exists():
        try:
            return float(json.loads(path.read_text())["gbps"])
        except (ValueError, KeyError):
            pass
    is_gpu = device_is_gpu(dev)
    nbytes = (256 if is_gpu else 64) * 2**20
    backend = dev.backend
    src = backend.upload(np.random.default_rng(0).standard_normal(nbytes // 4).astype(np.float32))
    dst = backend.allocate(nbytes)
    times = backend.time_launches(lambda: backend.copy(src, dst, nbytes), 20, warmup=3)
    gbps = 2 * nbytes / statistics.median(times) / 1e9
    path.write_text(json.dumps({"device": dev.info.name, "gbps": gbps}))
    return gbps


def _make_call(case: BenchCase, x: hal.Tensor, dev: Device, rng: np.random.Generator) -> Callable[[], hal.Tensor]:
    fn = getattr(hal, case.op)
    if case.op == "conv2d":
        assert case.weight is not None
        c = x.shape[1]
        groups = case.kwargs.get("groups", 1)
        groups = c if groups > 1 else 1
        kw = {**case.kwargs, "groups": groups}
        c_out = c if groups > 1 else case.weight[0]
        w = hal.asarray((rng.standard_normal((c_out, c // groups, *case.weight[2:])) * 0.1).astype(x.dtype),
                        device=dev)
        return lambda: fn(x, w, None, **kw)
    if case.op == "batch_norm":
        c = x.shape[1]
        rm = hal.asarray(np.zeros(c, np.float32), device=dev)
        rv = hal.asarray(np.ones(c, np.float32), device=dev)
        return lambda: fn(x, rm, rv, None, None, **case.kwargs)
    return lambda: fn(x, **case.kwargs)


def _torch_time(case: BenchCase, dev: Device, x_host: np.ndarray, layout: str, repeats: int) -> float | None:
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    on_gpu = dev.kind == "cuda" or (dev.kind == "opencl" and dev.info.vendor == "nvidia")
    if on_gpu and not torch.cuda.is_available():
        return None
    tdev = "cuda" if on_gpu else "cpu"
    if is_bfloat16(x_host.dtype):  # torch reads no ml_dtypes array: the same 16-bit words, retyped
        x = torch.from_numpy(x_host.view(np.int16)).view(torch.bfloat16).to(tdev)
    else:
        x = torch.from_numpy(x_host).to(tdev)
    if layout == "NHWC":
        x = x.contiguous(memory_format=torch.channels_last)
    kw = dict(case.kwargs)
    if case.op == "conv2d":
        assert case.weight is not None
        c = x.shape[1]
        groups = c if kw.get("groups", 1) > 1 else 1
        kw["groups"] = groups
        c_out = c if groups > 1 else case.weight[0]
        w = torch.randn(c_out, c // groups, *case.weight[2:], device=tdev, dtype=x.dtype) * 0.1
        call = lambda: F.conv2d(x, w, None, **kw)  # noqa: E731
    elif case.op == "batch_norm":
        c = x.shape[1]
        rm, rv = torch.zeros(c, device=tdev), torch.ones(c, device=tdev)
        call = lambda: F.batch_norm(x, rm, rv, None, None, **kw)  # noqa: E731
    else:
        fn = getattr(F, case.op)
        call = lambda: fn(x, **kw)  # noqa: E731
    try:
        for _ in range(3):
            call()
        if on_gpu:
            torch.cuda.synchronize()
            times = []
            for _ in range(repeats):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                call()
                b.record()
                torch.cuda.synchronize()
                times.append(a.elapsed_time(b) / 1e3)
        else:
            import time
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
    except RuntimeError:  # e.g. fp16 ops PyTorch lacks on the CPU
        return None
    return statistics.median(times) * 1e3


def run(
    devices: list[Device],
    ops: list[str] | None = None,
    dtypes: tuple[str, ...] = ("float32", "float16"),
    layouts: tuple[str, ...] = ("NCHW", "NHWC"),
    size: str = "auto",
    repeats: int = 20,
    with_torch: bool = True,
    progress: Callable[[str], None] | None = None,
    shapes: dict[str, tuple[int, int, int, int]] | None = None,
) -> list[BenchRow]:
    """Measure every case on every device (``shapes``: input shapes by case name, instead of ``size``)."""
    rows = []
    rng = np.random.default_rng(0)
    for dev in devices:
        copy_gbps = copy_bandwidth(dev)
        for case in CASES:
            if ops and case.op not in ops and case.name not in ops:
                continue
            for dtype in dtypes:
                for layout in layouts:
                    if progress:
                        progress(f"{dev.id} {case.name} {dtype} {layout}")
                    shape = shapes[case.name] if shapes and case.name in shapes else scaled_shape(case, dev, size)
                    x_host = rng.standard_normal(shape).astype(dtype)
                    x = hal.asarray(x_host, device=dev, layout=layout_arg(layout))
                    call = _make_call(case, x, dev, rng)
                    with record_launches() as launches:
                        y = call()
                    keep = (launches, y)  # the recorded buffers stay alive while they are replayed
                    times = dev.backend.time_launches(lambda: replay_launches(launches), repeats, warmup=3, queued=True)
                    ms = statistics.median(times) * 1e3
                    op_ms = statistics.median(dev.backend.time_launches(call, repeats, warmup=3)) * 1e3
                    del keep
                    nbytes, flops = _bytes_and_flops(case, x, y)
                    gbps = nbytes / ms / 1e6
                    spec_level = "-"
                    try:
                        spec_level = _level(dev, case, x)
                    except Exception:  # the level is informative only
                        pass
                    torch_ms = _torch_time(case, dev, x_host, layout, repeats) if with_torch else None
                    rows.append(BenchRow(
                        device=dev.id, case=case.name, dtype=dtype, layout=layout,
                        shape="x".join(map(str, shape)), ms=ms, op_ms=op_ms, gbps=gbps, gflops=flops / ms / 1e6,
                        copy_share=gbps / copy_gbps if copy_gbps else None, torch_ms=torch_ms,
                        speedup_vs_torch=(torch_ms / ms) if torch_ms else None, tuning_level=spec_level,
                        intensity=flops / nbytes if nbytes else 0.0,
                    ))
    return rows


def _level(dev: Device, case: BenchCase, x: hal.Tensor) -> str:
    from hal import spec as S

    g = x.geometry()
    kw = case.kwargs
    if case.op in ("max_pool2d", "avg_pool2d"):
        sp: Any = S.pool2d_spec("max" if case.op == "max_pool2d" else "avg", g, kw["kernel_size"], kw.get("stride"),
                                kw.get("padding", 0), 1, False, True, None, False)
    elif case.op == "adaptive_avg_pool2d":
        sp = S.adaptive_pool2d_spec("avg", g, kw["output_size"], False)
    elif case.op == "conv2d":
        assert case.weight is not None
        groups = g.c if kw.get("groups", 1) > 1 else 1
        c_out = g.c if groups > 1 else case.weight[0]
        sp = S.conv2d_spec(g, (c_out, g.c // groups, *case.weight[2:]), False, None, 1, kw["padding"], 1, groups)
    else:
        sp = S.batch_norm_spec(g, kw["training"], 0.1, 1e-5, True)
    return dev.tuner.resolve_spec(sp).level


def plot_roofline(rows: list[BenchRow], path: str) -> None:
    """Achieved GFLOP/s (or GB/s for zero-FLOP ops) against arithmetic intensity, one mark per op and device."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for dev in sorted({r.device for r in rows}):
        mine = [r for r in rows if r.device == dev]
        xs = [max(r.intensity, 1e-2) for r in mine]
        ys = [r.gflops if r.gflops > 0 else r.gbps for r in mine]
        ax.scatter(xs, ys, label=dev)
        for r, xv, yv in zip(mine, xs, ys, strict=True):
            ax.annotate(f"{r.case} {r.dtype[-2:]} {r.layout}", (xv, yv), fontsize=6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte; memory-bound ops at 0.01)")
    ax.set_ylabel("GFLOP/s (GB/s for ops without FLOPs)")
    ax.legend()
    ax.set_title("hal bench roofline")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def to_json(rows: list[BenchRow]) -> list[dict[str, Any]]:
    """Rows as plain dicts."""
    return [asdict(r) for r in rows]
