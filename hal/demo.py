"""``hal demo cnn16``: the 16-layer CNN on real images, on every device, checked against the oracle.

Images: scikit-learn's bundled handwritten digits (8x8, no download), upscaled
4x to 32x32 by pixel repetition and standardised. Weights: He-initialised with a
fixed seed (the point is agreement between devices, not accuracy). Each device
runs the fused network (BatchNorm folded into the convs, ReLU fused into the
stores); the oracle runs the unfused network in float64. Logits must agree within
``RTOL`` of the largest oracle logit, and every device must predict the same classes.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass

import numpy as np

from hal.device import Device
from hal.graph import capture
from hal.nn import Sequential, cnn16
from hal.spec import layout_arg
from hal.tensor import Tensor, asarray

#: logits tolerance, relative to max |oracle logit| (float32: 16 layers of float32 accumulation;
#: the 16-bit types: a rounding per layer, bfloat16's 8 times float16's (on PoCL and the CPU,
#: batch 16: float16 7-9e-4, bfloat16 7.8e-3, 2026-12-07))
RTOL = {"float32": 1e-3, "float16": 3e-2, "bfloat16": 8e-2}


def digits(batch: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, 1, 32, 32) float32, labels) from scikit-learn's bundled digits."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise RuntimeError("the cnn16 demo needs scikit-learn's bundled digits: pip install scikit-learn") from exc
    data = load_digits()
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(data.images), size=batch, replace=batch > len(data.images))
    images = np.kron(data.images[pick], np.ones((4, 4)))[:, None]  # 8x8 -> 32x32
    images = (images - images.mean()) / images.std()
    return images.astype(np.float32), data.target[pick]


@dataclass
class DeviceResult:
    """One device's run of the demo."""

    device: str
    max_error: float
    agrees: bool
    same_predictions: bool
    images_per_s: float
    layer_ms: list[tuple[str, float]]
    #: the same forward pass captured once (``hal.capture``) and replayed
    graph_images_per_s: float = 0.0
    graph_mode: str = ""


def _layer_name(i: int, layer: object) -> str:
    name = type(layer).__name__
    return f"{i:2d} {name}{'+ReLU' if getattr(layer, 'relu', False) else ''}"


def run_device(net: Sequential, fused: Sequential, x: np.ndarray, ref: np.ndarray, dev: Device, dtype: str,
               layout: str, repeats: int) -> DeviceResult:
    """Run, compare and time the fused network on one device."""
    xt = asarray(x.astype(dtype), device=dev, layout=layout_arg(layout))
    logits = fused(xt).numpy().reshape(x.shape[0], -1).astype(np.float64)
    err = float(np.abs(logits - ref).max() / max(np.abs(ref).max(), 1e-30))
    same = bool((logits.argmax(1) == ref.argmax(1)).all())
    backend = dev.backend
    total = backend.time_launches(lambda: fused(xt), repeats, warmup=1)
    with capture() as graph:
        out = fused(xt)
    graph.replay()
    replayed = out.numpy().reshape(x.shape[0], -1).astype(np.float64)
    same_replay = bool(np.array_equal(replayed, logits))  # identical kernels on identical data
    graph_total = backend.time_launches(graph.replay, repeats, warmup=1)
    layer_ms = []
    act: Tensor = xt
    for i, layer in enumerate(fused):
        inp = act
        times = backend.time_launches(functools.partial(layer, inp), repeats, warmup=1)
        layer_ms.append((_layer_name(i, layer), statistics.median(times) * 1e3))
        act = layer(inp)
    return DeviceResult(dev.id, err, err <= RTOL[dtype] and bool(np.isfinite(logits).all()) and same_replay, same,
                        x.shape[0] / statistics.median(total), layer_ms,
                        x.shape[0] / statistics.median(graph_total), graph.mode)


def run(devices: list[Device], batch: int = 64, dtype: str = "float32", layout: str = "NCHW",
        repeats: int = 5) -> tuple[list[DeviceResult], np.ndarray]:
    """The demo on every device; returns the results and the oracle logits."""
    x, _ = digits(batch)
    net = cnn16(num_classes=10, in_channels=1, seed=0)
    fused = net.fused()
    ref = net.reference(x.astype(dtype).astype(np.float64)).reshape(batch, -1)
    return [run_device(net, fused, x, ref, d, dtype, layout, repeats) for d in devices], ref
