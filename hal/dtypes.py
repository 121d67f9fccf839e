"""The element types hal knows, and how each is named to kernels."""

from __future__ import annotations

import numpy as np

from hal.errors import HalTypeError

#: dtypes every float op accepts (fp16 is storage only: kernels accumulate in fp32).
FLOAT_DTYPES: tuple[np.dtype, ...] = (np.dtype(np.float32), np.dtype(np.float16))

#: dtypes a Tensor may hold (quantized and index types included).
TENSOR_DTYPES: tuple[np.dtype, ...] = (
    *FLOAT_DTYPES,
    np.dtype(np.int8),
    np.dtype(np.uint8),
    np.dtype(np.int32),
    np.dtype(np.int64),
)

#: name used in -D macros and tuning keys.
DTYPE_NAMES: dict[np.dtype, str] = {
    np.dtype(np.float32): "float32",
    np.dtype(np.float16): "float16",
    np.dtype(np.int8): "int8",
    np.dtype(np.uint8): "uint8",
    np.dtype(np.int32): "int32",
    np.dtype(np.int64): "int64",
}


def as_dtype(value: object, argument: str = "dtype") -> np.dtype:
    """Normalise ``value`` (a numpy dtype, type or name) to a supported numpy dtype."""
    try:
        dtype = np.dtype(value)  # type: ignore[call-overload]
    except TypeError as exc:
        raise HalTypeError(f"{argument}: expected a dtype name such as 'float32', got {value!r}") from exc
    if dtype not in TENSOR_DTYPES:
        names = ", ".join(DTYPE_NAMES[d] for d in TENSOR_DTYPES)
        raise HalTypeError(f"{argument}: expected one of {names}, got {dtype.name}")
    return dtype


def require_float(dtype: np.dtype, argument: str) -> None:
    """Raise unless ``dtype`` is one of the float dtypes ops compute in."""
    if dtype not in FLOAT_DTYPES:
        raise HalTypeError(f"{argument}: expected dtype float32 or float16, got {dtype.name}")
