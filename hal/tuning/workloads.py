"""Representative shapes the tuner measures (the CNN shapes of the H200 baselines).

``full`` sizes are the baseline file's (a few hundred MB: larger than any GPU's
last-level cache); ``small`` sizes suit a CPU or PoCL run of minutes; ``tiny``
sizes exist for tests of the tuner itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, TypeAlias

import numpy as np

from hal.quant import QUANT_DTYPES
from hal.spec import (
    LAYOUTS,
    AdaptivePool2dSpec,
    BatchNormSpec,
    Conv2dSpec,
    Pool2dSpec,
    TensorGeometry,
    adaptive_pool2d_spec,
    batch_norm_spec,
    conv2d_spec,
    plane_geometry,
    pool2d_spec,
)

SIZES = ("full", "small", "tiny")

#: the specs a workload builds and the tuner evaluates: hal.spec.Spec less the elementwise and
#: quantized-conv ones; integer dtypes (QUANT_FAMILIES) only in the pooling specs
TunedSpec: TypeAlias = Pool2dSpec | AdaptivePool2dSpec | Conv2dSpec | BatchNormSpec

#: the families ``hal tune --dtype int8,uint8`` plans: those whose kernels have int8/uint8
#: twins built with the same parameters
QUANT_FAMILIES = ("pool2d",)
#: the zero point of quantized average-pooling workloads (nonzero: padding counts as it)
QUANT_ZERO_POINT = 3


@dataclass(frozen=True)
class Workload:
    """One op call shape; ``spec_for`` builds its spec for a dtype and layout."""

    kernel: str
    name: str
    op: str
    shapes: dict[str, tuple[int, int, int, int]]
    kwargs: dict[str, Any] = field(default_factory=dict)
    weight: tuple[int, int, int, int] | None = None  # (C_out, C_in/groups, KH, KW) at full size

    def shape(self, size: str) -> tuple[int, int, int, int]:
        """Input shape at one of the sizes."""
        return self.shapes[size]

    def spec_for(self, shape: tuple[int, int, int, int], dtype: str, layout: str) -> TunedSpec:
        """The spec of this workload at ``shape``."""
        n, c, h, w = shape
        geom = TensorGeometry(n, c, h, w, layout, np.dtype(dtype))  # type: ignore[arg-type]
        if self.op != "conv2d":
            geom = plane_geometry(geom)  # as the ops build it (one channel runs the NCHW kernels)
        kw = self.kwargs
        if self.op in ("max_pool2d", "avg_pool2d"):
            spec = pool2d_spec("max" if self.op == "max_pool2d" else "avg", geom, kw["kernel_size"],
                               kw.get("stride"), kw.get("padding", 0), 1, False, True, None, False)
            if spec.kind == "avg" and np.dtype(dtype) in QUANT_DTYPES:
                spec = replace(spec, zero_point=QUANT_ZERO_POINT)  # padding then counts as a real value
            return spec
        if self.op in ("adaptive_avg_pool2d", "adaptive_max_pool2d"):
            return adaptive_pool2d_spec("avg" if self.op == "adaptive_avg_pool2d" else "max", geom,
                                        kw["output_size"], False)
        if self.op == "conv2d":
            groups = c if kw.get("groups") == "depthwise" else kw.get("groups", 1)
            assert self.weight is not None
            # output channels follow the input's, so tiny and small sizes stay consistent
            return conv2d_spec(geom, (c, c // groups, self.weight[2], self.weight[3]), True, (c,),
                               kw.get("stride", 1), kw.get("padding", 0), 1, groups)
        if self.op == "batch_norm":
            return batch_norm_spec(geom, kw["training"], 0.1, 1e-5, True)
        raise ValueError(f"workload op {self.op!r}")


WORKLOADS: tuple[Workload, ...] = (
    Workload("pool2d", "maxpool3x3s2p1", "max_pool2d",
             {"full": (64, 64, 112, 112), "small": (8, 64, 56, 56), "tiny": (2, 5, 17, 19)},
             {"kernel_size": 3, "stride": 2, "padding": 1}),
    Workload("pool2d", "avgpool3x3s2p1", "avg_pool2d",
             {"full": (64, 64, 112, 112), "small": (8, 64, 56, 56), "tiny": (2, 5, 17, 19)},
             {"kernel_size": 3, "stride": 2, "padding": 1}),
    Workload("pool2d", "maxpool2x2s2", "max_pool2d",
             {"full": (1, 1, 4096, 4096), "small": (1, 1, 2048, 2048), "tiny": (1, 1, 61, 67)},
             {"kernel_size": 2, "stride": 2}),
    Workload("adaptive_pool2d", "globalavgpool", "adaptive_avg_pool2d",
             {"full": (256, 2048, 7, 7), "small": (32, 512, 7, 7), "tiny": (3, 37, 7, 7)},
             {"output_size": 1}),
    Workload("conv2d", "conv3x3 64->64", "conv2d",
             {"full": (256, 64, 32, 32), "small": (8, 64, 32, 32), "tiny": (2, 8, 9, 11)},
             {"padding": 1}, weight=(64, 64, 3, 3)),
    Workload("conv2d", "dwconv3x3", "conv2d",
             {"full": (256, 64, 32, 32), "small": (8, 64, 32, 32), "tiny": (2, 8, 9, 11)},
             {"padding": 1, "groups": "depthwise"}, weight=(64, 1, 3, 3)),
    Workload("batch_norm", "bn train", "batch_norm",
             {"full": (256, 64, 32, 32), "small": (16, 64, 32, 32), "tiny": (2, 5, 9, 11)},
             {"training": True}),
    Workload("batch_norm", "bn infer", "batch_norm",
             {"full": (256, 64, 32, 32), "small": (16, 64, 32, 32), "tiny": (2, 5, 9, 11)},
             {"training": False}),
)


def select(kernels: list[str] | None = None) -> list[Workload]:
    """Workloads of the given kernel families or workload names (all when None)."""
    unknown = sorted(set(kernels or ()) - {w.kernel for w in WORKLOADS} - {w.name for w in WORKLOADS})
    if unknown:
        from hal.errors import bad_arg

        choices = sorted({w.kernel for w in WORKLOADS}) + [w.name for w in WORKLOADS]
        raise bad_arg("ops", f"kernel families or workload names among {choices}", ",".join(unknown))
    return [w for w in WORKLOADS if kernels is None or w.kernel in kernels or w.name in kernels]


def plans(workloads: list[Workload], dtypes: list[str], layouts: list[str]) -> Iterator[tuple[Workload, str, str]]:
    """Every (workload, dtype, layout) combination.

    One-channel workloads are planned in NCHW only: with C = 1 both layouts are the same
    bytes, and the ops run (and look up parameters for) the NCHW kernels either way.
    int8/uint8 are planned for the pooling workloads only (``QUANT_FAMILIES``).
    """
    for wl in workloads:
        one_channel = all(shape[1] == 1 for shape in wl.shapes.values())
        for dt in dtypes:
            if np.dtype(dt) in QUANT_DTYPES and wl.kernel not in QUANT_FAMILIES:
                continue
            for lay in layouts:
                if lay in LAYOUTS and not (one_channel and lay == "NHWC" and "NCHW" in layouts):
                    yield wl, dt, lay
