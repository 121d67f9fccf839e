"""Conformance: every op on every device against the float64 oracle.

The tolerances here are the single source of truth (``docs/conformance.md``
repeats them and a test keeps the two equal). An output element passes when

    |got - ref| <= atol * scale + rtol * |ref|

where ``scale`` is 1 except for conv2d, where it is the output's
sum of |x| * |w| (the size of the terms that were added up), average pooling,
where it is at least 1 and grows with sum |x| / divisor (see ``avg_pool_scale``), and BatchNorm,
where it grows with |mean| / sigma (see ``bn_scale``). NaN must be NaN
at exactly the places the oracle has NaN; max pooling is exact; indices are exact.
Reference values are computed from the input as rounded to the op's dtype.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from hal import ops, reference
from hal.device import Device
from hal.dtypes import BFLOAT16, as_dtype, is_float
from hal.spec import layout_arg
from hal.tensor import Tensor, asarray, poison_outputs


@dataclass(frozen=True)
class Tolerance:
    """Per op and dtype: ``|got - ref| <= atol * scale + rtol * |ref|``."""

    rtol: float
    atol: float


#: (op family, dtype) -> tolerance. Keep docs/conformance.md equal to this table.
TOLERANCES: dict[tuple[str, str], Tolerance] = {
    ("max_pool", "float32"): Tolerance(0.0, 0.0),
    ("max_pool", "float16"): Tolerance(0.0, 0.0),
    ("avg_pool", "float32"): Tolerance(1e-5, 1e-6),
    ("avg_pool", "float16"): Tolerance(1e-3, 1e-4),
    ("conv2d", "float32"): Tolerance(1e-5, 1e-5),
    ("conv2d", "float16"): Tolerance(1e-3, 1e-4),
    ("batch_norm", "float32"): Tolerance(1e-4, 1e-4),
    ("batch_norm", "float16"): Tolerance(1e-3, 2e-3),
    # bfloat16 keeps 8 significant bits: one rounding is 2^-8 (3.9e-3) relative at most
    ("max_pool", "bfloat16"): Tolerance(0.0, 0.0),
    ("avg_pool", "bfloat16"): Tolerance(8e-3, 8e-4),
    ("conv2d", "bfloat16"): Tolerance(8e-3, 8e-4),
    ("batch_norm", "bfloat16"): Tolerance(8e-3, 1.6e-2),
}

OP_FAMILY = {
    "max_pool2d": "max_pool",
    "adaptive_max_pool2d": "max_pool",
    "avg_pool2d": "avg_pool",
    "adaptive_avg_pool2d": "avg_pool",
    "conv2d": "conv2d",
    "batch_norm": "batch_norm",
}


@dataclass
class Comparison:
    """Outcome of comparing one output against the oracle."""

    ok: bool
    max_error: float
    detail: str = ""


#: outputs at least this large are screened in parallel chunks before the full rule runs
_FAST_MIN = 1 << 20


def _within_plain_bound(got: np.ndarray, ref: np.ndarray, scale: np.ndarray | float, tol: Tolerance) -> float | None:
    """The max error when every element is finite and within ``atol * scale + rtol * |ref|``, else None.

    A pass here implies a pass of the full rule (which only adds NaN/inf matching and a
    half-ulp floor); anything else (NaN, inf, one element over) returns None and the
    caller runs the full rule. Chunks along one axis run on threads: numpy releases the
    GIL in ufuncs, and these arrays are tens of millions of elements in tuning runs.
    """
    from concurrent.futures import ThreadPoolExecutor

    axis = 0 if ref.shape and ref.shape[0] >= 8 else int(np.argmax(ref.shape))
    length = ref.shape[axis] if ref.ndim else 1
    scale_arr = np.asarray(scale, dtype=np.float64)
    slice_scale = scale_arr.ndim == ref.ndim and scale_arr.shape[axis] == length
    workers = max(1, min(16, os.cpu_count() or 1))
    step = max(1, -(-length // (4 * workers)))

    def chunk(start: int) -> tuple[bool, float]:
        idx = [slice(None)] * ref.ndim
        idx[axis] = slice(start, start + step)
        sel = tuple(idx)
        g = np.asarray(got[sel], dtype=np.float64)
        r = np.asarray(ref[sel], dtype=np.float64)
        with np.errstate(invalid="ignore"):  # inf - inf, 0 * inf: NaN, which fails below (the full rule decides)
            err = np.abs(g - r)
            bound = tol.atol * (scale_arr[sel] if slice_scale else scale_arr) + tol.rtol * np.abs(r)
        ok = bool((err <= bound).all())  # NaN anywhere compares False
        return ok, float(err.max()) if ok and err.size else 0.0

    if ref.ndim == 0:
        return None
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(chunk, range(0, length, step)))
    if all(ok for ok, _ in results):
        return max((m for _, m in results), default=0.0)
    return None


def compare(
    op: str, dtype: np.dtype | str, got: np.ndarray, ref: np.ndarray, scale: np.ndarray | float = 1.0
) -> Comparison:
    """Compare a device result with the oracle under the op's tolerance."""
    tol = TOLERANCES[(OP_FAMILY[op], np.dtype(dtype).name)]
    if np.shape(got) == np.shape(ref) and np.size(ref) >= _FAST_MIN:
        fast = _within_plain_bound(np.asarray(got), np.asarray(ref), scale, tol)
        if fast is not None:
            return Comparison(True, fast)
    got64 = np.asarray(got, dtype=np.float64)
    ref64 = np.asarray(ref, dtype=np.float64)
    if got64.shape != ref64.shape:
        return Comparison(False, float("inf"), f"shape {got64.shape} != oracle {ref64.shape}")
    nan_got, nan_ref = np.isnan(got64), np.isnan(ref64)
    if (nan_got != nan_ref).any():
        where = tuple(int(i) for i in np.argwhere(nan_got != nan_ref)[0])
        return Comparison(
            False, float("inf"),
            f"NaN mismatch at {where}: got {got64[where]}, oracle {ref64[where]} "
            f"({int((nan_got & ~nan_ref).sum())} unexpected NaN, {int((nan_ref & ~nan_got).sum())} missing)",
        )
    finite = ~nan_ref
    inf_mismatch = np.isinf(ref64) & finite & (got64 != ref64)
    if inf_mismatch.any():
        where = tuple(int(i) for i in np.argwhere(inf_mismatch)[0])
        return Comparison(False, float("inf"), f"infinity mismatch at {where}")
    fin = finite & ~np.isinf(ref64)
    with np.errstate(invalid="ignore"):  # matched infinities subtract to NaN; masked out by fin
        err = np.where(fin, np.abs(got64 - ref64), 0.0)
    bound = tol.atol * np.asarray(scale, dtype=np.float64) + tol.rtol * np.where(fin, np.abs(ref64), 0.0)
    # never ask for more than correct rounding: half an ulp of the result's dtype (matters for subnormals)
    out_dtype = np.dtype(dtype)
    if is_float(out_dtype):
        with np.errstate(over="ignore", invalid="ignore"):
            half_ulp = 0.5 * np.abs(np.spacing(np.abs(ref64).astype(out_dtype))).astype(np.float64)
        bound = np.maximum(bound, np.where(np.isfinite(half_ulp), half_ulp, 0.0))
    bad = err > bound
    max_error = float(err.max()) if err.size else 0.0
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        return Comparison(
            False, max_error,
            f"{int(bad.sum())} of {bad.size} elements off; first at {where}: got {got64[where]!r}, "
            f"oracle {ref64[where]!r}, allowed {float(np.broadcast_to(bound, err.shape)[where]):.3g}",
        )
    return Comparison(True, max_error)


def compare_indices(got: np.ndarray, ref: np.ndarray) -> Comparison:
    """Pooling indices must match exactly."""
    if got.shape != ref.shape:
        return Comparison(False, float("inf"), f"indices shape {got.shape} != oracle {ref.shape}")
    bad = got != ref
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        return Comparison(False, float("inf"), f"{int(bad.sum())} indices differ; first at {where}: "
                                               f"got {got[where]}, oracle {ref[where]}")
    return Comparison(True, 0.0)


def bn_scale(x: np.ndarray, weight: np.ndarray | None, eps: float, training: bool,
             running_mean: np.ndarray | None = None, running_var: np.ndarray | None = None) -> np.ndarray:
    """BatchNorm tolerance scale per channel: ``1 + 4 * 2**-24 * |mean| * |weight| / (sigma * atol_f32)``.

    A kernel may hold the channel mean in float32 (cuDNN does): that costs up to half an
    ulp of the mean, ``|mean| * 2**-24`` before normalisation, an error the input itself
    already carries at that magnitude. Cancellation (E[x^2] - E[x]^2) costs orders of
    magnitude more and still fails.
    """
    x = np.asarray(x, dtype=np.float64)
    if training or running_mean is None or running_var is None:
        mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    else:
        mean, var = np.asarray(running_mean, np.float64), np.asarray(running_var, np.float64)
    gamma = np.ones_like(mean) if weight is None else np.abs(np.asarray(weight, np.float64))
    atol = TOLERANCES[("batch_norm", "float32")].atol
    scale = 1.0 + 4.0 * 2.0**-24 * np.abs(mean) * gamma / np.sqrt(var + eps) / atol
    return scale[None, :, None, None]


def avg_pool_scale(x: np.ndarray, **kwargs: Any) -> np.ndarray:
    """``max(1, avg_pool2d(|x|))`` per output element: the average pooling tolerance's scale.

    With the default divisors this is 1 for O(1) data; a ``divisor_override`` smaller than
    the window (down to 1: a window sum) makes the output a sum whose float32 rounding
    follows the terms, not the result, which cancellation can make small.
    """
    scale = reference.avg_pool2d(np.abs(np.nan_to_num(np.asarray(x, dtype=np.float64))), **kwargs)
    return np.maximum(scale, 1.0)


def conv_scale(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, **kwargs: Any) -> np.ndarray:
    """Sum of |x| * |w| per output element (plus |bias|): the conv tolerance's scale."""
    scale = reference.conv2d(np.abs(x), np.abs(w), None, **kwargs)
    if bias is not None:
        scale = scale + np.abs(bias)[None, :, None, None]
    return np.maximum(scale, 1e-30)


# ----------------------------------------------------------------------------
# the case matrix
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One op call with fixed geometry; inputs are drawn fresh each run."""

    op: str
    name: str
    shape: tuple[int, int, int, int]
    kwargs: dict[str, Any] = field(default_factory=dict)
    weight_shape: tuple[int, int, int, int] | None = None
    bias: bool = False
    nan: bool = False
    #: this fraction of x set to NaN, +Inf and -Inf in turn (at least one of each): NaN and the
    #: infinities must come out where the oracle has them (a kernel that multiplies an Inf by a
    #: structural zero, as CUDA's opt-in tensor-core depthwise does, makes NaN of finite outputs)
    specials: float = 0.0
    big_mean: bool = False
    quick: bool = True
    #: quantized conv only: QLinearConv (int8/uint8 out) rather than ConvInteger (int32 out)
    linear: bool = False


CASES: tuple[Case, ...] = (
    Case("max_pool2d", "3x3/2 pad1", (2, 5, 17, 23), {"kernel_size": 3, "stride": 2, "padding": 1}),
    Case("max_pool2d", "2x2/2 ceil indices", (1, 3, 9, 13), {"kernel_size": 2, "ceil_mode": True,
                                                            "return_indices": True}),
    Case("max_pool2d", "3x2 dil2 pad(1,0,0,1)", (2, 4, 15, 11),
         {"kernel_size": (3, 2), "stride": (1, 2), "padding": (1, 0, 0, 1), "dilation": 2}, quick=False),
    Case("max_pool2d", "3x3 same NaN indices", (1, 7, 10, 12),
         {"kernel_size": 3, "stride": 2, "padding": "same", "return_indices": True}, nan=True),
    Case("max_pool2d", "3x3/2 pad1 C16 NaN", (2, 16, 9, 11), {"kernel_size": 3, "stride": 2, "padding": 1}, nan=True),
    Case("avg_pool2d", "3x3/2 pad1", (2, 5, 17, 23), {"kernel_size": 3, "stride": 2, "padding": 1}),
    Case("avg_pool2d", "3x3/2 pad1 C16", (2, 16, 9, 11), {"kernel_size": 3, "stride": 2, "padding": 1}),
    Case("avg_pool2d", "3x3/2 pad1 ceil exclude-pad", (1, 3, 12, 15),
         {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False}),
    Case("avg_pool2d", "2x3 divisor 5", (2, 3, 9, 10), {"kernel_size": (2, 3), "stride": 1,
                                                         "divisor_override": 5}, quick=False),
    Case("avg_pool2d", "5x5/3 pad3 valid ceil", (1, 6, 19, 21), {"kernel_size": 5, "stride": 3,
                                                               "padding": 3, "ceil_mode": True}, quick=False),
    Case("avg_pool2d", "3x3/2 pad1 C16 NaN and inf", (2, 16, 9, 11), {"kernel_size": 3, "stride": 2, "padding": 1},
         specials=0.02),
    Case("adaptive_avg_pool2d", "global", (3, 37, 7, 7), {"output_size": 1}),
    Case("adaptive_avg_pool2d", "global NaN and inf", (3, 37, 7, 7), {"output_size": 1}, specials=0.003),
    Case("adaptive_avg_pool2d", "5x3 from 13x11", (2, 4, 13, 11), {"output_size": (5, 3)}),
    Case("adaptive_max_pool2d", "4x6 indices NaN", (2, 5, 9, 14), {"output_size": (4, 6), "return_indices": True},
         nan=True),
    Case("conv2d", "3x3 pad1 bias", (2, 7, 11, 13), {"padding": 1}, weight_shape=(9, 7, 3, 3), bias=True),
    Case("conv2d", "3x3/2 same", (1, 5, 12, 9), {"stride": 2, "padding": "same"}, weight_shape=(6, 5, 3, 3)),
    Case("conv2d", "3x3 pad1 NaN and inf", (2, 7, 11, 13), {"padding": 1}, weight_shape=(9, 7, 3, 3), bias=True,
         specials=0.005),
    Case("conv2d", "depthwise 3x3", (2, 12, 10, 11), {"padding": 1, "groups": 12}, weight_shape=(12, 1, 3, 3),
         bias=True),
    Case("conv2d", "depthwise 3x3 NaN and inf", (2, 12, 10, 11), {"padding": 1, "groups": 12},
         weight_shape=(12, 1, 3, 3), bias=True, specials=0.01),
    Case("conv2d", "grouped dil2 5x3", (1, 6, 14, 12), {"padding": (2, 1), "dilation": 2, "groups": 3},
         weight_shape=(9, 2, 5, 3), quick=False),
    Case("conv2d", "1x1", (3, 17, 5, 6), {}, weight_shape=(10, 17, 1, 1), bias=True, quick=False),
    Case("batch_norm", "inference", (2, 6, 7, 9), {"training": False}),
    Case("batch_norm", "inference NaN and inf", (2, 6, 7, 9), {"training": False}, specials=0.02),
    Case("batch_norm", "training", (3, 5, 6, 7), {"training": True, "momentum": 0.2}),
    Case("batch_norm", "training mean 1e4", (4, 3, 8, 9), {"training": True}, big_mean=True),
)


@dataclass
class CaseResult:
    """One (device, op case, dtype, layout) outcome."""

    device: str
    op: str
    case: str
    dtype: str
    layout: str
    ok: bool
    max_error: float
    detail: str
    seconds: float
    #: why the case did not run on this device (a backend without the feature); '' when it ran
    skipped: str = ""


def add_specials(x: np.ndarray, fraction: float, rng: np.random.Generator) -> None:
    """Set ``fraction`` of ``x`` (at least three values, at most all) to NaN, +Inf and -Inf in turn, in place."""
    flat = x.reshape(-1)  # a view of a contiguous array: the writes land in x
    where = rng.choice(flat.size, min(flat.size, max(3, int(flat.size * fraction))), replace=False)
    flat[where] = np.resize(np.array([np.nan, np.inf, -np.inf]), where.size)


def _inputs(case: Case, rng: np.random.Generator, dtype: np.dtype) -> dict[str, np.ndarray]:
    x = rng.standard_normal(case.shape)
    if case.big_mean:
        x = 1e4 + x
    if case.nan:
        mask = rng.random(case.shape) < 0.05
        x[mask] = np.nan
    if case.specials:
        add_specials(x, case.specials, rng)
    arrays = {"x": x.astype(dtype)}
    if case.weight_shape is not None:
        arrays["weight"] = rng.standard_normal(case.weight_shape).astype(dtype)
        if case.bias:
            arrays["bias"] = rng.standard_normal(case.weight_shape[0]).astype(dtype)
    if case.op == "batch_norm":
        c = case.shape[1]
        arrays["running_mean"] = rng.standard_normal(c).astype(np.float32)
        arrays["running_var"] = rng.uniform(0.5, 2.0, c).astype(np.float32)
        arrays["weight"] = rng.standard_normal(c).astype(np.float32)
        arrays["bias"] = rng.standard_normal(c).astype(np.float32)
    return arrays


def run_case(case: Case, dev: Device, dtype: str, layout: str, rng: np.random.Generator) -> CaseResult:
    """Run one case on one device and compare with the oracle."""
    start = time.perf_counter()
    if dtype == "bfloat16" and not type(dev.backend).bfloat16:
        why = f"{dev.kind} backend: bfloat16 not implemented"
        return CaseResult(dev.id, case.op, case.name, dtype, layout, True, 0.0, "", 0.0, skipped=why)
    dt = as_dtype(dtype)
    arrays = _inputs(case, rng, dt)
    x = arrays["x"]
    try:
        with poison_outputs():
            xt = asarray(x, device=dev, layout=layout_arg(layout))
            result = _run_op(case, xt, arrays, dev)
        with np.errstate(invalid="ignore", over="ignore"):  # the oracle of NaN and infinities: inf - inf is NaN
            checks = _check(case, dt, x, arrays, result)
    except Exception as exc:  # a crash is a failure of this case, not of the run
        checks = [Comparison(False, float("inf"), f"{type(exc).__name__}: {exc}")]
    ok = all(c.ok for c in checks)
    detail = "; ".join(c.detail for c in checks if not c.ok)
    return CaseResult(dev.id, case.op, case.name, dtype, layout, ok, max(c.max_error for c in checks), detail,
                      time.perf_counter() - start)


def _run_op(case: Case, xt: Tensor, arrays: dict[str, np.ndarray], dev: Device) -> dict[str, Any]:
    fn: Callable[..., Any] = getattr(ops, case.op)
    if case.op == "conv2d":
        out = fn(xt, asarray(arrays["weight"], device=dev), arrays.get("bias"), **case.kwargs)
        return {"y": out.numpy()}
    if case.op == "batch_norm":
        rm, rv = arrays["running_mean"].copy(), arrays["running_var"].copy()
        out = fn(xt, rm, rv, arrays["weight"], arrays["bias"], **case.kwargs)
        return {"y": out.numpy(), "running_mean": rm, "running_var": rv}
    out = fn(xt, **case.kwargs)
    if isinstance(out, tuple):
        return {"y": out[0].numpy(), "indices": out[1].numpy()}
    return {"y": out.numpy()}


def _check(case: Case, dt: np.dtype, x: np.ndarray, arrays: dict[str, np.ndarray], result: dict[str, Any]) -> list[
        Comparison]:
    x64 = x.astype(np.float64)
    ref_fn: Callable[..., Any] = getattr(reference, case.op)
    if case.op == "conv2d":
        w64 = arrays["weight"].astype(np.float64)
        b64 = arrays["bias"].astype(np.float64) if "bias" in arrays else None
        ref = ref_fn(x64, w64, b64, **case.kwargs)
        return [compare(case.op, dt, result["y"], ref, conv_scale(x64, w64, b64, **case.kwargs))]
    if case.op == "batch_norm":
        rm = arrays["running_mean"].astype(np.float64)
        rv = arrays["running_var"].astype(np.float64)
        scale = bn_scale(x64, arrays["weight"], 1e-5, case.kwargs.get("training", False),
                         arrays["running_mean"], arrays["running_var"])
        ref = ref_fn(x64, rm, rv, arrays["weight"], arrays["bias"], **case.kwargs)
        checks = [compare(case.op, dt, result["y"], ref, scale)]
        # running statistics are float32 in every dtype
        checks.append(compare(case.op, np.dtype(np.float32), result["running_mean"], rm))
        checks.append(compare(case.op, np.dtype(np.float32), result["running_var"], rv))
        return checks
    ref = ref_fn(x64, **case.kwargs)
    if case.op == "avg_pool2d":
        return [compare(case.op, dt, result["y"], ref, avg_pool_scale(x64, **case.kwargs))]
    if isinstance(ref, tuple):
        checks = [compare(case.op, dt, result["y"], ref[0])]
        if case.nan:
            # indices of windows without NaN must match; a NaN window may report any NaN's index
            ok_mask = ~np.isnan(ref[0])
            checks.append(compare_indices(result["indices"][ok_mask], ref[1][ok_mask]))
        else:
            checks.append(compare_indices(result["indices"], ref[1]))
        return checks
    return [compare(case.op, dt, result["y"], ref)]


# ----------------------------------------------------------------------------
# int8 / uint8 (ONNX semantics): integers in, the quantized oracle, exact answers
# ----------------------------------------------------------------------------

QUANT_DTYPES = ("int8", "uint8")


#: the int8/uint8 cases: pooling keeps the input's zero point; conv is QLinearConv
#: (``linear``: int8/uint8 out, per-output-channel weight scales) or ConvInteger (int32 out)
QUANT_CASES: tuple[Case, ...] = (
    Case("max_pool2d", "3x3/2 pad1", (2, 5, 17, 23), {"kernel_size": 3, "stride": 2, "padding": 1}),
    Case("max_pool2d", "2x2/2 ceil", (1, 3, 9, 13), {"kernel_size": 2, "ceil_mode": True}),
    Case("max_pool2d", "3x3/2 pad1 C16 NaN", (2, 16, 9, 11), {"kernel_size": 3, "stride": 2, "padding": 1}, nan=True),
    Case("avg_pool2d", "3x3/2 pad1", (2, 5, 17, 23), {"kernel_size": 3, "stride": 2, "padding": 1}),
    Case("avg_pool2d", "3x3/2 pad1 C16", (2, 16, 9, 11), {"kernel_size": 3, "stride": 2, "padding": 1}),
    Case("avg_pool2d", "3x3/2 pad1 ceil exclude-pad", (1, 3, 12, 15),
         {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False}),
    Case("conv2d", "3x3 pad1 QLinearConv per-channel bias", (2, 7, 11, 13), {"padding": 1},
         weight_shape=(9, 7, 3, 3), bias=True, linear=True),
    Case("conv2d", "depthwise 3x3 ConvInteger", (2, 12, 10, 11), {"padding": 1, "groups": 12},
         weight_shape=(12, 1, 3, 3)),
    Case("conv2d", "3x3/2 grouped QLinearConv", (1, 6, 12, 9), {"stride": 2, "padding": 1, "groups": 3},
         weight_shape=(6, 2, 3, 3), bias=True, linear=True, quick=False),
)

#: QLinearConv requantizes in float32 on the devices: at a tie it may land one step from
#: the float64 oracle; pooling and ConvInteger are exact
_QLINEAR_STEPS = 1


def run_quant_case(case: Case, dev: Device, dtype: str, layout: str, rng: np.random.Generator) -> CaseResult:
    """Run one quantized case on one device against the quantized oracle."""
    from dataclasses import replace

    from hal import spec as S

    start = time.perf_counter()
    flag = "quantized_conv" if case.op == "conv2d" else "quantized_pooling"
    if not getattr(type(dev.backend), flag):
        why = f"{dev.kind} backend: {flag.replace('_', ' ')} not implemented"
        return CaseResult(dev.id, case.op, case.name, dtype, layout, True, 0.0, "", 0.0, skipped=why)
    dt = np.dtype(dtype)
    info = np.iinfo(dt)
    q = rng.integers(info.min, info.max + 1, case.shape).astype(dt)
    zp = int(rng.integers(info.min, info.max + 1))
    geom = S.TensorGeometry(*case.shape, "NCHW", dt)  # type: ignore[arg-type]
    kw = case.kwargs
    steps = 0
    try:
        if case.op == "conv2d":
            assert case.weight_shape is not None
            c_out = case.weight_shape[0]
            w = rng.integers(info.min, info.max + 1, case.weight_shape).astype(dt)
            w_scale = rng.uniform(0.01, 0.05, c_out)
            w_zp = rng.integers(info.min // 4, info.max // 4 + 1, c_out)
            bias = rng.integers(-5000, 5000, c_out).astype(np.int32) if case.bias else None
            with poison_outputs():
                xt = asarray(q, device=dev, layout=layout_arg(layout), scale=0.03, zero_point=zp)
                wt = asarray(w, device=dev, scale=w_scale, zero_point=w_zp)
                extra: dict[str, Any] = {"output_scale": 0.5, "output_zero_point": 3} if case.linear else {}
                got = ops.conv2d(xt, wt, bias, **kw, **extra).numpy()
            conv = S.conv2d_spec(geom, case.weight_shape, case.bias, (c_out,), kw.get("stride", 1),
                                 kw.get("padding", 0), kw.get("dilation", 1), kw.get("groups", 1))
            out_dtype = dt if case.linear else np.dtype(np.int32)
            qspec = S.QConv2dSpec(conv, dt, out_dtype, zp, 3 if case.linear else 0, True)
            multiplier = 0.03 * w_scale / 0.5 if case.linear else None
            want = reference.qconv2d_from_spec(qspec, q, w, bias, w_zp, multiplier)
            steps = _QLINEAR_STEPS if case.linear else 0
        else:
            kind: Literal["max", "avg"] = "max" if case.op == "max_pool2d" else "avg"
            with poison_outputs():
                xt = asarray(q, device=dev, layout=layout_arg(layout), scale=0.1, zero_point=zp)
                out = getattr(ops, case.op)(xt, **kw)
                got = out.numpy()
            spec = S.pool2d_spec(kind, geom, kw["kernel_size"], kw.get("stride"), kw.get("padding", 0),
                                 kw.get("dilation", 1), kw.get("ceil_mode", False),
                                 kw.get("count_include_pad", True), kw.get("divisor_override"), False)
            if kind == "avg":
                spec = replace(spec, zero_point=zp)
            want = reference.quantized_pool2d_from_spec(spec, q)[0]
            if out.zero_point != zp or out.scale != 0.1:
                raise AssertionError(f"output scale/zero point {out.scale}/{out.zero_point}, expected 0.1/{zp}")
        if got.dtype != want.dtype or got.shape != want.shape:
            raise AssertionError(f"got {got.dtype}{got.shape}, expected {want.dtype}{want.shape}")
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
        err = float(diff.max()) if diff.size else 0.0
        check = Comparison(err <= steps, err, "" if err <= steps else
                           f"{int((diff > steps).sum())} elements off by up to {int(err)} (allowed {steps})")
    except Exception as exc:  # a crash is a failure of this case, not of the run
        check = Comparison(False, float("inf"), f"{type(exc).__name__}: {exc}")
    return CaseResult(dev.id, case.op, case.name, dtype, layout, check.ok, check.max_error, check.detail,
                      time.perf_counter() - start)


#: what ``hal conformance`` runs without ``--dtype`` (bfloat16 where ml_dtypes is installed)
DEFAULT_DTYPES: tuple[str, ...] = ("float32", "float16", *(("bfloat16",) if BFLOAT16 is not None else ()), "int8")


def iter_matrix(
    devices: Iterable[Device],
    quick: bool = False,
    seed: int | None = None,
    dtypes: Iterable[str] = DEFAULT_DTYPES,
    layouts: Iterable[str] = ("NCHW", "NHWC"),
) -> Iterator[tuple[int, CaseResult]]:
    """Yield (total, result) for every device x case x dtype x layout (int8/uint8: the quantized cases)."""
    seed = int.from_bytes(os.urandom(4), "little") if seed is None else seed
    rng = np.random.default_rng(seed)
    cases = [c for c in CASES if c.quick or not quick]
    qcases = [c for c in QUANT_CASES if c.quick or not quick]
    plan = [(d, c, dt, lay) for d in devices for dt in dtypes for c in (qcases if dt in QUANT_DTYPES else cases)
            for lay in layouts]
    for dev, case, dt, lay in plan:
        run = run_quant_case if dt in QUANT_DTYPES else run_case
        yield len(plan), run(case, dev, dt, lay, rng)
