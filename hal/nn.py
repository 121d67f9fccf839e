"""``hal.nn``: inference-only layers over the hal ops, with fusion.

Layers mirror ``torch.nn`` names and state-dict keys, so a PyTorch
``nn.Sequential`` of the same layers loads with ``load_state_dict`` (or from an
``.npz`` with the same keys). ``Sequential.fused()`` returns an equivalent network
with every inference BatchNorm folded into the conv before it and every ReLU fused
into the store of the layer before it, which saves a pass over memory per fusion.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from hal import ops
from hal.device import Device
from hal.device import device as resolve_device
from hal.errors import HalTypeError, HalValueError
from hal.quant import fold_batch_norm
from hal.spec import layout_arg, pair
from hal.tensor import Tensor, asarray


def _to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    return np.asarray(value)


class Module:
    """Base layer: named float32 parameters kept on the host and cached per device."""

    #: parameter names and their expected shapes, filled by each layer
    def __init__(self) -> None:
        self._params: dict[str, np.ndarray] = {}
        self._device_cache: dict[tuple[str, str, str], Tensor] = {}
        self.relu = False  # set by fusion: apply ReLU in this layer's store

    def parameters(self) -> dict[str, np.ndarray]:
        """Host copies of the parameters, by name."""
        return dict(self._params)

    def _param(self, name: str, dev: Device, dtype: np.dtype | None = None) -> Tensor:
        array = self._params[name]
        dt = np.dtype(dtype) if dtype is not None else array.dtype
        key = (name, dev.id, dt.name)
        if key not in self._device_cache:
            self._device_cache[key] = asarray(array.astype(dt), device=dev)
        return self._device_cache[key]

    def load(self, params: Mapping[str, Any], prefix: str = "") -> None:
        """Set parameters from ``params`` (keys ``prefix + name``); shapes must match."""
        for name, current in self._params.items():
            key = prefix + name
            if key not in params:
                raise HalValueError(f"state_dict: missing key {key!r}")
            value = _to_numpy(params[key])
            if value.shape != current.shape:
                raise HalValueError(f"state_dict: {key!r} has shape {value.shape}, expected {current.shape}")
            self._params[name] = value.astype(np.float32)
        self._device_cache.clear()

    def __call__(self, x: Any) -> Tensor:
        if not isinstance(x, Tensor):  # an array: on the default device, as the ops take it
            x = asarray(np.asarray(x))
        return self.forward(x)

    def forward(self, x: Tensor) -> Tensor:
        """Run the layer."""
        raise NotImplementedError

    def reference(self, x: np.ndarray) -> np.ndarray:
        """The layer through the float64 oracle (unfused semantics)."""
        raise NotImplementedError

    def _ref_relu(self, y: np.ndarray) -> np.ndarray:
        from hal import reference

        return reference.relu(y) if self.relu else y


class Conv2d(Module):
    """``torch.nn.Conv2d`` (inference)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int], stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 rng: np.random.Generator | None = None) -> None:
        super().__init__()
        kh, kw = pair(kernel_size, "kernel_size")
        for name, value in (("in_channels", in_channels), ("out_channels", out_channels), ("groups", groups)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise HalValueError(f"{name}: expected a positive int, got {value!r}")
        if in_channels % groups or out_channels % groups:
            raise HalValueError(f"groups: expected a divisor of in_channels ({in_channels}) and out_channels "
                                f"({out_channels}), got {groups}")
        rng = rng or np.random.default_rng(0)
        fan_in = in_channels // groups * kh * kw
        self._params["weight"] = (rng.standard_normal((out_channels, in_channels // groups, kh, kw))
                                  * np.sqrt(2.0 / fan_in)).astype(np.float32)  # He initialisation
        if bias:
            self._params["bias"] = (rng.standard_normal(out_channels) * 0.01).astype(np.float32)
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups

    def forward(self, x: Tensor) -> Tensor:
        w = self._param("weight", x.device, x.dtype)
        b = self._param("bias", x.device) if "bias" in self._params else None
        return ops.conv2d(x, w, b, self.stride, self.padding, self.dilation, self.groups, relu=self.relu)

    def reference(self, x: np.ndarray) -> np.ndarray:
        from hal import reference

        y = reference.conv2d(x, self._params["weight"].astype(np.float64),
                             self._params["bias"].astype(np.float64) if "bias" in self._params else None,
                             self.stride, self.padding, self.dilation, self.groups)
        return self._ref_relu(y)


class BatchNorm2d(Module):
    """``torch.nn.BatchNorm2d`` in inference (running statistics)."""

    def __init__(self, num_features: int, eps: float = 1e-5, rng: np.random.Generator | None = None) -> None:
        super().__init__()
        rng = rng or np.random.default_rng(0)
        self._params["weight"] = (1.0 + 0.1 * rng.standard_normal(num_features)).astype(np.float32)
        self._params["bias"] = (0.1 * rng.standard_normal(num_features)).astype(np.float32)
        self._params["running_mean"] = (0.1 * rng.standard_normal(num_features)).astype(np.float32)
        self._params["running_var"] = rng.uniform(0.5, 1.5, num_features).astype(np.float32)
        self.eps = eps

    def load(self, params: Mapping[str, Any], prefix: str = "") -> None:
        super().load({k: v for k, v in params.items() if not k.endswith("num_batches_tracked")}, prefix)

    def forward(self, x: Tensor) -> Tensor:
        dev = x.device
        return ops.batch_norm(x, self._param("running_mean", dev), self._param("running_var", dev),
                              self._param("weight", dev), self._param("bias", dev), False, 0.1, self.eps,
                              relu=self.relu)

    def reference(self, x: np.ndarray) -> np.ndarray:
        from hal import reference

        p = {k: v.astype(np.float64) for k, v in self._params.items()}
        return self._ref_relu(reference.batch_norm(x, p["running_mean"], p["running_var"], p["weight"], p["bias"],
                                                   False, 0.1, self.eps))


class ReLU(Module):
    """``torch.nn.ReLU``."""

    def forward(self, x: Tensor) -> Tensor:
        return ops.relu(x)

    def reference(self, x: np.ndarray) -> np.ndarray:
        from hal import reference

        return reference.relu(x)


class MaxPool2d(Module):
    """``torch.nn.MaxPool2d``."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
                 ceil_mode: bool = False) -> None:
        super().__init__()
        self.args = (kernel_size, stride, padding, dilation, ceil_mode)

    def forward(self, x: Tensor) -> Tensor:
        out = ops.max_pool2d(x, *self.args, relu=self.relu)
        assert isinstance(out, Tensor)
        return out

    def reference(self, x: np.ndarray) -> np.ndarray:
        from hal import reference

        out = reference.max_pool2d(x, *self.args)
        assert isinstance(out, np.ndarray)
        return self._ref_relu(out)


class AvgPool2d(Module):
    """``torch.nn.AvgPool2d``."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None) -> None:
        super().__init__()
        self.args = (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)

    def forward(self, x: Tensor) -> Tensor:
        return ops.avg_pool2d(x, *self.args, relu=self.relu)

    def reference(self, x: np.ndarray) -> np.ndarray:
        from hal import reference

        return self._ref_relu(reference.avg_pool2d(x, *self.args))


class AdaptiveAvgPool2d(Module):
    """``torch.nn.AdaptiveAvgPool2d``."""

    def __init__(self, output_size: Any) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return ops.adaptive_avg_pool2d(x, self.output_size, relu=self.relu)

    def reference(self, x: np.ndarray) -> np.ndarray:
        from hal import reference

        return self._ref_relu(reference.adaptive_avg_pool2d(x, self.output_size))


class Linear(Module):
    """``torch.nn.Linear`` on (N, C, 1, 1) activations (after global pooling): a 1x1 convolution.

    The result stays (N, out_features, 1, 1); ``Tensor.numpy().reshape(N, -1)`` gives the logits.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 rng: np.random.Generator | None = None) -> None:
        super().__init__()
        rng = rng or np.random.default_rng(0)
        bound = 1.0 / np.sqrt(in_features)
        self._params["weight"] = rng.uniform(-bound, bound, (out_features, in_features)).astype(np.float32)
        if bias:
            self._params["bias"] = rng.uniform(-bound, bound, out_features).astype(np.float32)

    def _check(self, x: Any) -> None:
        if len(x.shape) != 4 or x.shape[2:] != (1, 1):
            raise HalValueError(f"input: Linear expects (N, C, 1, 1) activations, got {tuple(x.shape)}")

    def forward(self, x: Tensor) -> Tensor:
        self._check(x)
        key = ("weight4", x.device.id, x.dtype.name)
        if key not in self._device_cache:
            w = self._params["weight"]
            self._device_cache[key] = asarray(w.reshape(*w.shape, 1, 1).astype(x.dtype), device=x.device)
        b = self._param("bias", x.device) if "bias" in self._params else None
        return ops.conv2d(x, self._device_cache[key], b, relu=self.relu)

    def reference(self, x: np.ndarray) -> np.ndarray:
        self._check(x)
        y = x.reshape(x.shape[0], -1) @ self._params["weight"].astype(np.float64).T
        if "bias" in self._params:
            y = y + self._params["bias"].astype(np.float64)
        return self._ref_relu(y.reshape(*y.shape, 1, 1))


class Sequential(Module):
    """``torch.nn.Sequential``: layers applied in order; state-dict keys ``<index>.<name>``."""

    def __init__(self, *layers: Module) -> None:
        super().__init__()
        self.layers = list(layers)

    def __iter__(self) -> Iterator[Module]:
        return iter(self.layers)

    def __len__(self) -> int:
        return len(self.layers)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return x

    def reference(self, x: np.ndarray) -> np.ndarray:
        for layer in self.layers:
            x = layer.reference(x)
        return x

    def parameters(self) -> dict[str, np.ndarray]:
        out = {}
        for i, layer in enumerate(self.layers):
            for name, value in layer.parameters().items():
                out[f"{i}.{name}"] = value
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Load a ``{"0.weight": ..., ...}`` mapping (PyTorch ``state_dict`` or npz contents)."""
        if not isinstance(state, Mapping):
            raise HalTypeError(f"state_dict: expected a mapping of names to arrays, got {type(state).__name__}")
        expected = set(self.parameters())
        extra = sorted(k for k in state if k not in expected and not k.endswith("num_batches_tracked"))
        if extra:
            raise HalValueError(f"state_dict: unexpected key {extra[0]!r}")
        for i, layer in enumerate(self.layers):
            layer.load(state, prefix=f"{i}.")

    def load_npz(self, path: str | Path) -> None:
        """Load parameters saved with ``numpy.savez(path, **{"0.weight": ...})``."""
        with np.load(path) as data:
            self.load_state_dict({k: data[k] for k in data.files})

    def save_npz(self, path: str | Path) -> None:
        """Save parameters in the ``load_npz`` format."""
        # numpy's stub types **kwds beside the bool allow_pickle keyword, so mypy checks the arrays against it too
        np.savez(path, **self.parameters())  # type: ignore[arg-type]

    def fused(self) -> Sequential:
        """An equivalent network: BatchNorm folded into the conv before it, ReLU into the layer before it."""
        out: list[Module] = []
        for layer in self.layers:
            prev = out[-1] if out else None
            if isinstance(layer, BatchNorm2d) and isinstance(prev, Conv2d) and not prev.relu:
                p = layer.parameters()
                w, b = fold_batch_norm(prev.parameters()["weight"], prev.parameters().get("bias"),
                                       p["running_mean"], p["running_var"], p["weight"], p["bias"], layer.eps)
                conv = Conv2d.__new__(Conv2d)
                Module.__init__(conv)
                conv._params = {"weight": w, "bias": b}
                conv.stride, conv.padding, conv.dilation, conv.groups = (prev.stride, prev.padding, prev.dilation,
                                                                          prev.groups)
                out[-1] = conv
            elif isinstance(layer, ReLU) and prev is not None and not isinstance(prev, (ReLU, Sequential)) \
                    and not prev.relu:
                prev.relu = True
            else:
                out.append(_copy(layer))
        return Sequential(*out)


def _copy(layer: Module) -> Module:
    clone = layer.__class__.__new__(layer.__class__)
    clone.__dict__.update(layer.__dict__)
    clone._params = dict(layer._params)
    clone._device_cache = {}
    return clone


def cnn16(num_classes: int = 10, in_channels: int = 1, seed: int = 0) -> Sequential:
    """The network hal is built around: 16 conv3x3+BN+ReLU layers of at most 64 channels,
    max pools between four stages, global average pooling and a linear head."""
    rng = np.random.default_rng(seed)
    layers: list[Module] = []
    c = in_channels
    for stage, width in enumerate((16, 32, 64, 64)):
        for _ in range(4):
            layers += [Conv2d(c, width, 3, padding=1, bias=False, rng=rng), BatchNorm2d(width, rng=rng), ReLU()]
            c = width
        if stage < 3:
            layers.append(MaxPool2d(2))
    layers += [AdaptiveAvgPool2d(1), Linear(c, num_classes, rng=rng)]
    return Sequential(*layers)


def run_on(net: Sequential, x: np.ndarray, device: str | Device, layout: str = "NCHW") -> np.ndarray:
    """Run ``net`` on host batch ``x`` on ``device``; logits as a (N, classes) float64 array."""
    dev = resolve_device(device)
    out = net(asarray(x, device=dev, layout=layout_arg(layout)))
    return out.numpy().reshape(x.shape[0], -1).astype(np.float64)
