"""The element types hal knows, and how each is named to kernels."""

from __future__ import annotations

import numpy as np

from hal.errors import HalTypeError

try:  # bfloat16 has no numpy type of its own; ml_dtypes (JAX's, ONNX's) gives it one
    import ml_dtypes as _ml_dtypes
except ImportError:  # pragma: no cover - ml_dtypes is a dependency; a bare install still runs fp32/fp16
    _ml_dtypes = None  # type: ignore[assignment]

#: numpy's dtype for bfloat16 (ml_dtypes), or None where ml_dtypes is not installed.
BFLOAT16: np.dtype | None = np.dtype(_ml_dtypes.bfloat16) if _ml_dtypes is not None else None

#: dtypes every float op accepts. float16 and bfloat16 are storage only: kernels load them,
#: compute and accumulate in float32, and round once when they store.
FLOAT_DTYPES: tuple[np.dtype, ...] = (
    np.dtype(np.float32), np.dtype(np.float16), *((BFLOAT16,) if BFLOAT16 is not None else ()))

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
if BFLOAT16 is not None:
    DTYPE_NAMES[BFLOAT16] = "bfloat16"

#: the float dtypes' names, as error messages list them ("float32, float16 or bfloat16").
FLOAT_NAMES = ", ".join(DTYPE_NAMES[d] for d in FLOAT_DTYPES[:-1]) + " or " + DTYPE_NAMES[FLOAT_DTYPES[-1]]


def is_bfloat16(dtype: object) -> bool:
    """Whether ``dtype`` is bfloat16 (False where ml_dtypes is not installed)."""
    return BFLOAT16 is not None and dtype == BFLOAT16


#: FLOAT_DTYPES as a set: the ops' per-call checks test membership in it
FLOAT_DTYPE_SET: frozenset[np.dtype] = frozenset(FLOAT_DTYPES)


def is_float(dtype: object) -> bool:
    """Whether ``dtype`` is one of the float dtypes ops compute in (numpy's float64 excluded)."""
    try:
        return dtype in FLOAT_DTYPE_SET
    except TypeError:  # unhashable: not a dtype
        return False


def is_float_data(dtype: np.dtype) -> bool:
    """Whether host data of ``dtype`` holds floats of any width (numpy's float kinds, bfloat16):
    what parameters and weights may be given in, before hal converts them."""
    return dtype.kind == "f" or is_bfloat16(dtype)


def transferable(array: np.ndarray) -> np.ndarray:
    """``array`` as something the buffer protocol can export: bfloat16 arrays cannot be
    (numpy has no buffer format for them), so they travel as their 16-bit words."""
    return array.view(np.uint16) if is_bfloat16(array.dtype) else array


def as_dtype(value: object, argument: str = "dtype") -> np.dtype:
    """Normalise ``value`` (a numpy dtype, type or name) to a supported numpy dtype."""
    if isinstance(value, str) and value == "bfloat16" and BFLOAT16 is None:
        raise HalTypeError(f"{argument}: bfloat16 needs the ml_dtypes package (pip install ml_dtypes)")
    if BFLOAT16 is not None and str(value) == "torch.bfloat16":
        return BFLOAT16
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
    if not is_float(dtype):
        raise HalTypeError(f"{argument}: expected dtype {FLOAT_NAMES}, got {dtype.name}")
