"""hal: one device-agnostic op API for pooling, convolution and BatchNorm.

The same call runs on NVIDIA GPUs (PyCUDA), on any OpenCL 1.2+ device (PyOpenCL;
PoCL on a CPU) and on the CPU (C kernels with AVX2/AVX-512 intrinsics), with the
semantics of ``torch.nn.functional`` checked against a float64 oracle
(``hal.reference``).

>>> import numpy as np, hal
>>> x = hal.asarray(np.random.rand(1, 3, 8, 8).astype(np.float32), device="cpu")
>>> hal.max_pool2d(x, 2).shape
(1, 3, 4, 4)
"""

from hal import errors, reference
from hal.device import Device, backend_status, device, devices, refresh, use_device
from hal.dlpack import from_dlpack
from hal.errors import (
    BackendUnavailable,
    DeviceNotFound,
    HalError,
    KernelCompileError,
    LaunchLimitExceeded,
    OutOfMemory,
    UnsupportedOperation,
)
from hal.graph import Graph, capture
from hal.ops import (
    adaptive_avg_pool2d,
    adaptive_max_pool2d,
    avg_pool2d,
    batch_norm,
    conv2d,
    dequantize,
    max_pool2d,
    quantize,
    relu,
)
from hal.quant import fold_batch_norm
from hal.tensor import Tensor, asarray

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailable",
    "Device",
    "DeviceNotFound",
    "Graph",
    "HalError",
    "KernelCompileError",
    "LaunchLimitExceeded",
    "OutOfMemory",
    "Tensor",
    "UnsupportedOperation",
    "__version__",
    "adaptive_avg_pool2d",
    "adaptive_max_pool2d",
    "asarray",
    "avg_pool2d",
    "backend_status",
    "batch_norm",
    "capture",
    "conv2d",
    "dequantize",
    "device",
    "devices",
    "errors",
    "fold_batch_norm",
    "from_dlpack",
    "max_pool2d",
    "quantize",
    "reference",
    "refresh",
    "relu",
    "use_device",
]
