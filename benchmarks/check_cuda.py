"""Correctness check of the CUDA backend against hal's float64 oracle (needs an NVIDIA GPU).

Every kernel path (tiles, vector paths, the contract's one-thread-per-output kernels,
tensor cores), float32 and float16, NCHW and NHWC, odd shapes, every padding form,
ceil_mode, dilation, NaN inputs and ties, misaligned foreign buffers, running
statistics, plus the runtime: out-of-memory, compile errors, another thread, PyTorch
tensors in the same process. Fresh random inputs for every case; outputs are filled
with NaN (indices with INT64_MIN) before each launch, so an unwritten element fails.

    python3 benchmarks/check_cuda.py [--quick] [--out DIR]

Prints one line per failure and a summary; exits 1 if anything failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from hal import reference as ref
from hal import spec as S
from hal.backends.cuda import CudaBackend, CudaBuffer
from hal.errors import KernelCompileError, OutOfMemory

RESULTS: list[dict[str, Any]] = []
CONV_MATCH = ""  # --match: run only the conv, adaptive and batch_norm cases whose name contains this (e.g. "dw pipe")
PROGRESS = False  # --progress: print every case as it ends, so a run cut by a time limit shows where it was

#: the code-changing parameter sets the checks use (built in parallel up front)
CHECK_BUILDS: dict[str, list[dict[str, int]]] = {
    "pool2d": [{}, {"POOL_THREADS": 128}, {"POOL_THREADS": 512}, {"POOL_SPLIT": 1}],
    "adaptive_pool2d": [{}, {"ADAPT_GSTAGES": 2}, {"ADAPT_GSTAGES": 4, "ADAPT_THREADS": 512},
                        {"ADAPT_GSTAGES": 2, "ADAPT_VSPLIT_U": 1},
                        {"ADAPT_GSTAGES": 3, "ADAPT_VSPLIT_U": 2, "ADAPT_THREADS": 128}, {"ADAPT_VSPLIT_U": 4}],
    "conv2d": [{}, {"CONV_SIMT_CI": 4}],
    "batch_norm": [{}, {"BN_THREADS": 128, "BN_UNROLL": 2, "BN_L2_HINT": 0}, {"BN_THREADS": 512, "BN_UNROLL": 8},
                   {"BN_UNROLL": 8}, {"BN_UNROLL": 2}, {"BN_INFER_OCC": 2048}, {"BN_INFER_EARLY": 1},
                   {"BN_INFER_EARLY": 1, "BN_THREADS": 128, "BN_UNROLL": 2}],
    "eltwise": [{}],
}


def record(name: str, ok: bool, detail: str = "") -> None:
    """Remember one check's outcome (printed at once when it failed)."""
    RESULTS.append({"name": name, "ok": bool(ok), "detail": detail})
    if not ok:
        print(f"FAIL {name}: {detail}", flush=True)
    elif PROGRESS:
        print(f"ok {name}", flush=True)


def phys(a: np.ndarray, layout: str) -> np.ndarray:
    """Logical NCHW -> physical layout."""
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1) if layout == "NHWC" else a)


def logical(a: np.ndarray, layout: str) -> np.ndarray:
    """Physical layout -> logical NCHW."""
    return a.transpose(0, 3, 1, 2) if layout == "NHWC" else a


def phys_shape(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """Physical shape of a logical NCHW shape."""
    n, c, h, w = shape
    return (n, h, w, c) if layout == "NHWC" else (n, c, h, w)


class Dev:
    """Upload/download helpers around one backend, with optional misaligned placement."""

    def __init__(self, be: CudaBackend) -> None:
        self.be = be

    def put(self, a: np.ndarray, offset: int = 0) -> CudaBuffer:
        """Upload ``a``; with ``offset`` bytes of shift inside a larger allocation (a foreign-like view)."""
        if offset == 0:
            return self.be.upload(a)
        host = np.ascontiguousarray(a)
        raw = np.zeros(host.nbytes + offset + 64, np.uint8)
        raw[offset : offset + host.nbytes] = host.view(np.uint8).reshape(-1)
        base = self.be.upload(raw)
        return self.be.wrap(base.ptr + offset, host.nbytes, base)

    def poison(self, shape: tuple[int, ...], dtype: Any, offset: int = 0) -> CudaBuffer:
        """A buffer of ``shape`` full of NaN (floats) or INT64_MIN (indices)."""
        dt = np.dtype(dtype)
        fill = np.nan if dt.kind == "f" else np.iinfo(dt).min
        return self.put(np.full(shape, fill, dt), offset)

    def get(self, buf: CudaBuffer, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """Download ``buf`` as an array of ``shape``."""
        out = np.empty(shape, np.dtype(dtype))
        self.be.download(buf, out)
        return out


def geometry(shape: tuple[int, int, int, int], layout: str, dtype: Any) -> S.TensorGeometry:
    """TensorGeometry of a logical shape."""
    n, c, h, w = shape
    return S.TensorGeometry(n, c, h, w, layout, np.dtype(dtype))  # type: ignore[arg-type]


def rand(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any, kind: str = "normal") -> np.ndarray:
    """Fresh random input (never zeros); 'ties' draws small integers so windows tie."""
    if kind == "ties":
        return rng.integers(-3, 4, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


# ----------------------------------------------------------------------------------
# pooling
# ----------------------------------------------------------------------------------


def check_pool(
    dev: Dev, rng: np.random.Generator, name: str, shape: tuple[int, int, int, int], dtype: Any, layout: str,
    kind: str, kernel: Any, stride: Any, padding: Any, dilation: Any = 1, ceil_mode: bool = False,
    count_include_pad: bool = True, divisor: int | None = None, indices: bool = False, params: dict | None = None,
    data: str = "normal", nan_frac: float = 0.0, offset: int = 0,
) -> None:
    """One pool2d launch against the oracle."""
    full = f"pool2d[{name} {kind} {np.dtype(dtype).name} {layout}]"
    try:
        sp = S.pool2d_spec(kind, geometry(shape, layout, dtype), kernel, stride, padding, dilation, ceil_mode,
                           count_include_pad, divisor, indices)
        x = rand(rng, shape, dtype, data)
        if nan_frac:
            x[rng.random(shape) < nan_frac] = np.nan
        want, want_i = ref.pool2d_from_spec(sp, x.astype(np.float64))
        xb = dev.put(phys(x, layout), offset)
        oshape = phys_shape(sp.out_shape, layout)
        yb = dev.poison(oshape, dtype, offset)
        ib = dev.poison(oshape, np.int64) if indices else None
        dev.be.pool2d(sp, xb, yb, ib, params or {})
        got = logical(dev.get(yb, oshape, dtype), layout)
        ok, detail = compare(got, want, dtype, exact=(kind == "max"))
        if ok and indices:
            got_i = logical(dev.get(ib, oshape, np.int64), layout)
            bad = np.argwhere(got_i != want_i)
            ok = bad.size == 0
            if not ok:
                k = tuple(bad[0])
                detail = f"index mismatch at {k}: got {got_i[k]} want {want_i[k]} ({len(bad)} bad)"
        record(full, ok, detail)
    except Exception as exc:
        record(full, False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")


def compare(got: np.ndarray, want: np.ndarray, dtype: Any, exact: bool = False,
            scale: np.ndarray | None = None, rtol: float | None = None) -> tuple[bool, str]:
    """Compare with the oracle: NaN where the oracle has NaN only; else within the dtype's tolerance."""
    dt = np.dtype(dtype)
    got64 = got.astype(np.float64)
    nan_w, nan_g = np.isnan(want), np.isnan(got64)
    if (nan_w != nan_g).any():
        k = tuple(np.argwhere(nan_w != nan_g)[0])
        return False, f"NaN pattern differs at {k}: got {got64[k]} want {want[k]} ({int((nan_w != nan_g).sum())} bad)"
    m = ~nan_w
    if exact:
        w = want.astype(dt).astype(np.float64)
        bad = m & (got64 != w)
        if bad.any():
            k = tuple(np.argwhere(bad)[0])
            return False, f"value at {k}: got {got64[k]!r} want {w[k]!r} ({int(bad.sum())} bad)"
        return True, ""
    tol = rtol if rtol is not None else (2e-5 if dt == np.float32 else 2e-3)
    base = scale if scale is not None else np.maximum(np.abs(want), 1.0)
    # float16 outputs are rounded once more on the store: below 2^-14 (subnormal) their spacing
    # is 2^-24, more than a relative tolerance of tiny values allows
    atol = 2.0**-24 if dt == np.float16 else 0.0
    err = np.abs(got64 - want)
    bad = m & (err > tol * base + atol)
    if bad.any():
        k = tuple(np.argwhere(bad)[0])
        return False, (f"value at {k}: got {got64[k]!r} want {want[k]!r} (tol {tol * base[k] + atol:.3g}, "
                       f"{int(bad.sum())} bad)")
    return True, ""


def first_mismatch(got: np.ndarray, want: np.ndarray, what: str) -> str:
    """'' where ``got`` equals ``want`` exactly, else the first element that differs and how many do."""
    bad = np.argwhere(got != want)
    if not bad.size:
        return ""
    k = tuple(int(i) for i in bad[0])
    return f"{what}: at {k} got {got[k]} want {want[k]} ({len(bad)} bad)"


def check_qpool(
    dev: Dev, rng: np.random.Generator, name: str, shape: tuple[int, int, int, int], dtype: Any, layout: str,
    kind: str, kernel: Any, stride: Any, padding: Any, dilation: Any = 1, ceil_mode: bool = False,
    count_include_pad: bool = True, divisor: int | None = None, indices: bool = False, zero_point: int = 0,
    offset: int = 0,
) -> None:
    """One int8/uint8 pool2d launch against the quantized oracle, exactly, twice: the output
    poisoned with the dtype's minimum, then its maximum (no NaN in integers), so an unwritten
    element fails one of the two."""
    dt = np.dtype(dtype)
    full = f"qpool2d[{name} {kind} {dt.name} {layout}]"
    try:
        sp = S.pool2d_spec(kind, geometry(shape, layout, dt), kernel, stride, padding, dilation, ceil_mode,
                           count_include_pad, divisor, indices)
        if kind == "avg":
            sp = dataclasses.replace(sp, zero_point=zero_point)
        info = np.iinfo(dt)
        x = rng.integers(info.min, info.max + 1, shape).astype(dt)
        want, want_i = ref.quantized_pool2d_from_spec(sp, x)
        xb = dev.put(phys(x, layout), offset)
        oshape = phys_shape(sp.out_shape, layout)
        detail = ""
        for fill in (info.min, info.max):
            yb = dev.put(np.full(oshape, fill, dt), offset)
            ib = dev.poison(oshape, np.int64) if indices else None
            dev.be.pool2d(sp, xb, yb, ib, {})
            detail = first_mismatch(logical(dev.get(yb, oshape, dt), layout), want, f"poison {fill}")
            if not detail and ib is not None:
                detail = first_mismatch(logical(dev.get(ib, oshape, np.int64), layout), want_i, f"poison {fill}")
            if detail:
                break
        record(full, not detail, detail)
    except Exception as exc:
        record(full, False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")


def check_qconv(
    dev: Dev, rng: np.random.Generator, name: str, shape: tuple[int, int, int, int], cout: int, k: Any,
    layout: str, x_dtype: Any, w_dtype: Any, out_dtype: Any, stride: Any = 1, padding: Any = 0,
    dilation: Any = 1, groups: int = 1, bias: bool = True,
) -> None:
    """One quantized conv launch (quant_conv2d.cu) against reference.qconv2d_from_spec, exactly
    (the kernel requantizes in double, as the oracle), the output poisoned twice: with two
    different fill values an unwritten element fails one of the runs."""
    out = np.dtype(out_dtype)
    full = f"qconv2d[{name} {np.dtype(x_dtype).name}x{np.dtype(w_dtype).name}->{out.name} {layout}]"
    try:
        kh, kw = (k, k) if isinstance(k, int) else k
        wshape = (cout, shape[1] // groups, kh, kw)
        conv = S.conv2d_spec(geometry(shape, layout, x_dtype), wshape, False, None, stride, padding, dilation, groups)
        xi, wi = np.iinfo(x_dtype), np.iinfo(w_dtype)
        yzp = 0 if out == np.int32 else int(rng.integers(np.iinfo(out).min, np.iinfo(out).max + 1))
        sp = S.QConv2dSpec(conv, np.dtype(w_dtype), out, int(rng.integers(xi.min, xi.max + 1)), yzp, True)
        x = rng.integers(xi.min, xi.max + 1, shape).astype(x_dtype)
        w = rng.integers(wi.min, wi.max + 1, wshape).astype(w_dtype)
        b = rng.integers(-20000, 20000, cout).astype(np.int32) if bias else None
        wz = rng.integers(wi.min, wi.max + 1, cout).astype(np.int32)
        m = None if out == np.int32 else (rng.random(cout) * 4e-3 + 1e-4).astype(np.float32)
        want = ref.qconv2d_from_spec(sp, x, w, b, wz, m)
        oshape = phys_shape(conv.out_shape, layout)
        detail = ""
        fills = (-7, 1 << 20) if out == np.int32 else (np.iinfo(out).min, np.iinfo(out).max)
        for fill in fills:
            yb = dev.put(np.full(oshape, fill, out))
            dev.be.qconv2d(sp, dev.put(phys(x, layout)), dev.put(w), dev.put(b) if b is not None else None, yb,
                           dev.put(wz), dev.put(m) if m is not None else None, {})
            detail = first_mismatch(logical(dev.get(yb, oshape, out), layout), want, f"fill {fill}")
            if detail:
                break
        record(full, not detail, detail)
    except Exception as exc:
        record(full, False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")


def qconv_cases(dev: Dev, rng: np.random.Generator, quick: bool) -> None:
    """int8/uint8 conv: every input x weight x output type, both layouts, groups, stride,
    padding, dilation, with and without bias; C_out per group a multiple of 4 (qconv2d_co4) and
    not (qconv2d)."""
    types = [(np.int8, np.int8), (np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.uint8)]
    outs = (np.int32, np.int8, np.uint8)
    for (xd, wd), out, layout in itertools.product(types if not quick else types[:2], outs, ("NCHW", "NHWC")):
        c = dict(layout=layout, x_dtype=xd, w_dtype=wd, out_dtype=out)
        check_qconv(dev, rng, "3x3", (2, 8, 9, 11), 6, 3, padding=1, **c)
        check_qconv(dev, rng, "3x3 co4", (2, 8, 9, 11), 8, 3, padding=1, **c)  # qconv2d_co4
        check_qconv(dev, rng, "groups co4", (1, 6, 7, 10), 8, 3, stride=(1, 2), padding=(0, 1), groups=2, **c)
        check_qconv(dev, rng, "groups s2", (1, 6, 10, 7), 4, (2, 3), stride=2, padding=(1, 0), groups=2,
                    bias=False, **c)
        check_qconv(dev, rng, "depthwise dil", (2, 5, 9, 9), 5, 3, padding=2, dilation=2, groups=5, **c)
    check_qconv(dev, rng, "large", (8, 32, 30, 30), 32, 3, "NHWC", np.uint8, np.int8, np.uint8, padding=1)
    # dense 3x3 stride 1 with C_in % 16 == 0 (<= 64; NCHW: W % 16 == 0): qconv2d_k3_tc on tensor
    # cores. Every type pair and output on full and partial 8x32 tiles with C_out over 64 and no
    # multiple of 8, then C_in 16 and 32, asymmetric, no and wide padding (NCHW: the staged rows'
    # column shifts 15, 0 and 13), more tiles than blocks (grid-stride, both buffers)
    for layout in ("NHWC", "NCHW"):
        w2 = 48 if layout == "NCHW" else 45
        for (xd, wd), out in itertools.product(types, outs):
            c = dict(layout=layout, x_dtype=xd, w_dtype=wd, out_dtype=out)
            check_qconv(dev, rng, "tc 64->64", (2, 64, 32, 32), 64, 3, padding=1, **c)
            check_qconv(dev, rng, "tc 48->70", (3, 48, 13, w2), 70, 3, padding=1, **c)
        for (xd, wd) in types:
            c = dict(layout=layout, x_dtype=xd, w_dtype=wd, out_dtype=np.int8)
            check_qconv(dev, rng, "tc 16->8 asym", (2, 16, 17, 32), 8, 3, padding=(0, 2, 1, 0), **c)
            check_qconv(dev, rng, "tc 32->24 valid", (2, 32, 9, 32), 24, 3, padding=0, bias=False, **c)
            check_qconv(dev, rng, "tc 16->20 pad3", (2, 16, 11, 16), 20, 3, padding=3, **c)
            check_qconv(dev, rng, "tc many tiles", (20, 64, 24, 48), 72, 3, padding=1, **c)


def quant_suite(dev: Dev, rng: np.random.Generator, quick: bool) -> None:
    """int8/uint8 pooling (quant_pool2d.cu): both layouts, every padding form, ceil_mode, dilation,
    every divisor rule, indices, zero points across the range, misaligned buffers. Without
    indices, widths that are multiples of 4 take the NCHW row kernels (3x3/2, 2x2/2, 3x3/1;
    OW 12 and 20 end in a partial group of 8; widths 48, 16 and 64 end in a ceil_mode 3x3/2
    window starting at the last column) and channels that are multiples of 4 or 16 the NHWC
    vector kernels; the rest, and every call with indices, one thread per output. Then the
    int8/uint8 conv cases (quant_conv2d.cu, qconv_cases)."""
    shapes = [(2, 5, 13, 11), (1, 16, 9, 24), (2, 4, 10, 40), (1, 8, 9, 48)]
    if not quick:
        shapes += [(3, 3, 17, 8), (1, 32, 7, 36), (2, 3, 6, 16)]
    windows = [  # kernel, stride, padding, dilation, ceil_mode
        (3, 2, 1, 1, False), (3, 2, 1, 1, True), (2, 2, 0, 1, True), (3, 1, 1, 2, False),
        ((2, 3), (1, 2), (1, 0), 1, True),
        # over quant_pool2d.cu's 9 taps loaded at once: its general loop
        (4, 2, 2, 1, True), ((5, 3), (2, 1), (2, 1), 1, False),
    ]
    for dtype in (np.int8, np.uint8):
        info = np.iinfo(dtype)
        for layout in ("NCHW", "NHWC"):
            for shape in shapes:
                for kernel, stride, padding, dilation, ceil in windows:
                    w = dict(kernel=kernel, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil)
                    c = dict(dtype=dtype, layout=layout, **w)
                    check_qpool(dev, rng, f"{shape}", shape, kind="max", indices=True, **c)
                    check_qpool(dev, rng, f"{shape}", shape, kind="max", **c)
                    for include_pad, divisor in ((True, None), (False, None), (True, 5)):
                        zp = int(rng.integers(info.min, info.max + 1))
                        check_qpool(dev, rng, f"{shape} pad={include_pad} div={divisor} zp={zp}", shape, kind="avg",
                                    count_include_pad=include_pad, divisor=divisor, zero_point=zp, **c)
            check_qpool(dev, rng, "misaligned", (1, 7, 9, 10), dtype, layout, "avg", 3, 2, 1, zero_point=3,
                        offset=1)
            # 4-byte aligned, not 16: NHWC C16 takes the 4-channel kernel; odd offsets the scalar one
            for offset in (4, 1):
                check_qpool(dev, rng, f"offset {offset}", (2, 16, 9, 12), dtype, layout, "max", 3, 2, 1, offset=offset)
                check_qpool(dev, rng, f"offset {offset}", (2, 16, 9, 12), dtype, layout, "avg", 3, 2, 1,
                            zero_point=-5 if dtype == np.int8 else 7, count_include_pad=False, offset=offset)
            # many threads per launch: the grid-stride loops of every fast kernel
            for kernel, stride in ((3, 2), (2, 2), (3, 1)):
                check_qpool(dev, rng, "large", (8, 64, 60, 64), dtype, layout, "max", kernel, stride, kernel // 2)
                check_qpool(dev, rng, "large", (8, 64, 60, 64), dtype, layout, "avg", kernel, stride, kernel // 2,
                            zero_point=9)
    qconv_cases(dev, rng, quick)


def pool_suite(dev: Dev, rng: np.random.Generator, quick: bool) -> None:
    """pool2d cases."""
    for dtype in (np.float32, np.float16):
        for layout in ("NCHW", "NHWC"):
            c = dict(dtype=dtype, layout=layout)
            check_pool(dev, rng, "3x3s2p1 odd", (3, 5, 17, 23), kind="max", kernel=3, stride=2, padding=1,
                       indices=True, **c)
            check_pool(dev, rng, "3x3s2p1 odd", (3, 5, 17, 23), kind="avg", kernel=3, stride=2, padding=1, **c)
            check_pool(dev, rng, "3x3s2p1 C64", (2, 64, 30, 29), kind="max", kernel=3, stride=2, padding=1, **c)
            check_pool(dev, rng, "3x3s2p1 C64 idx", (2, 64, 30, 29), kind="max", kernel=3, stride=2, padding=1,
                       indices=True, **c)
            check_pool(dev, rng, "3x3s2p1 C64", (2, 64, 30, 29), kind="avg", kernel=3, stride=2, padding=1,
                       count_include_pad=False, **c)
            check_pool(dev, rng, "2x2s2 C130", (2, 130, 18, 21), kind="max", kernel=2, stride=2, padding=0,
                       indices=True, **c)
            check_pool(dev, rng, "2x2s2 ceil", (1, 16, 19, 21), kind="avg", kernel=2, stride=2, padding=0,
                       ceil_mode=True, **c)
            check_pool(dev, rng, "ties", (2, 8, 16, 15), kind="max", kernel=3, stride=2, padding=1, indices=True,
                       data="ties", **c)
            check_pool(dev, rng, "nan", (2, 8, 16, 15), kind="max", kernel=3, stride=2, padding=1, indices=True,
                       nan_frac=0.05, **c)
            check_pool(dev, rng, "nan k2", (2, 8, 16, 16), kind="max", kernel=2, stride=2, padding=0, indices=True,
                       nan_frac=0.1, **c)
            check_pool(dev, rng, "split", (2, 5, 37, 41), kind="max", kernel=3, stride=2, padding=1, indices=True,
                       nan_frac=0.02, params={"POOL_SPLIT": 1}, **c)
            check_pool(dev, rng, "split", (1, 3, 70, 67), kind="avg", kernel=2, stride=2, padding=0,
                       params={"POOL_SPLIT": 1, "POOL_SMEM_KB": 8}, **c)
            check_pool(dev, rng, "asym pads dil2", (2, 9, 19, 17), kind="max", kernel=(3, 2), stride=(2, 1),
                       padding=(2, 0, 1, 1), dilation=(2, 3), indices=True, **c)
            check_pool(dev, rng, "asym pads dil2", (2, 9, 19, 17), kind="avg", kernel=(3, 2), stride=(2, 1),
                       padding=(2, 0, 1, 1), dilation=(2, 3), **c)
            check_pool(dev, rng, "same", (1, 7, 13, 11), kind="avg", kernel=4, stride=3, padding="same",
                       count_include_pad=True, **c)
            check_pool(dev, rng, "divisor", (1, 12, 13, 11), kind="avg", kernel=3, stride=2, padding=1, divisor=5,
                       **c)
            check_pool(dev, rng, "ceil incl pad", (2, 4, 14, 13), kind="avg", kernel=3, stride=2, padding=1,
                       ceil_mode=True, **c)
            check_pool(dev, rng, "1x1 plane", (3, 17, 1, 1), kind="max", kernel=1, stride=1, padding=0,
                       indices=True, **c)
            check_pool(dev, rng, "band tiles", (2, 3, 70, 97), kind="max", kernel=3, stride=2, padding=1,
                       indices=True, params={"POOL_SMEM_KB": 8, "POOL_TILE_H": 2}, **c)
            check_pool(dev, rng, "band tiles", (2, 3, 70, 97), kind="avg", kernel=3, stride=2, padding=1,
                       params={"POOL_SMEM_KB": 8, "POOL_TILE_H": 4, "POOL_THREADS": 128}, **c)
            check_pool(dev, rng, "band k5s1", (1, 2, 66, 81), kind="max", kernel=5, stride=1, padding=2,
                       indices=True, params={"POOL_SMEM_KB": 8, "POOL_TILE_H": 8}, **c)
            check_pool(dev, rng, "nhwc chunks", (2, 96, 21, 19), kind="max", kernel=3, stride=2, padding=1,
                       indices=True, params={"POOL_SMEM_KB": 8, "POOL_TILE_W": 4, "POOL_TILE_H": 2}, **c)
            check_pool(dev, rng, "misaligned", (2, 16, 15, 14), kind="max", kernel=3, stride=2, padding=1,
                       indices=True, offset=2 * np.dtype(dtype).itemsize, **c)
            check_pool(dev, rng, "misaligned", (2, 16, 15, 14), kind="avg", kernel=2, stride=2, padding=0,
                       offset=np.dtype(dtype).itemsize, **c)
            # float16 NCHW average pooling from half2 words (POOL_H2AVG): even widths, odd output widths,
            # both word parities (offsets), NaN, ceil_mode, count_include_pad off, divisor, bands, old path
            es = np.dtype(dtype).itemsize
            check_pool(dev, rng, "h2avg nan", (3, 5, 17, 22), kind="avg", kernel=3, stride=2, padding=1,
                       count_include_pad=False, nan_frac=0.05, **c)
            check_pool(dev, rng, "h2avg ceil", (2, 7, 15, 20), kind="avg", kernel=3, stride=2, padding=1,
                       ceil_mode=True, **c)
            check_pool(dev, rng, "h2avg divisor", (1, 6, 13, 18), kind="avg", kernel=3, stride=2, padding=1,
                       divisor=7, offset=3 * es, **c)
            check_pool(dev, rng, "h2avg k2 ceil", (2, 9, 19, 22), kind="avg", kernel=2, stride=2, padding=0,
                       ceil_mode=True, nan_frac=0.05, offset=es, **c)
            check_pool(dev, rng, "h2avg bands", (2, 3, 70, 96), kind="avg", kernel=3, stride=2, padding=1,
                       params={"POOL_SMEM_KB": 8, "POOL_TILE_H": 4}, offset=5 * es, **c)
            check_pool(dev, rng, "h2avg off", (2, 16, 15, 14), kind="avg", kernel=3, stride=2, padding=1,
                       offset=es, **c)
            check_pool(dev, rng, "h2avg old path", (2, 5, 17, 22), kind="avg", kernel=3, stride=2, padding=1,
                       params={"POOL_H2AVG": 0}, **c)
            for reg in ({"POOL_ROWS": 2}, {"POOL_ROWS": 4}, {"POOL_NCOLS": 2}, {"POOL_NCOLS": 4}):
                check_pool(dev, rng, f"regs {reg}", (3, 24, 37, 40), kind="max", kernel=3, stride=2, padding=1,
                           nan_frac=0.03, params=reg, **c)
                check_pool(dev, rng, f"regs {reg}", (3, 24, 37, 40), kind="avg", kernel=3, stride=2, padding=1,
                           count_include_pad=False, params=reg, **c)
                check_pool(dev, rng, f"regs {reg} divisor ceil", (2, 8, 19, 32), kind="avg", kernel=3, stride=2,
                           padding=0, ceil_mode=True, divisor=5, params=reg, **c)
                check_pool(dev, rng, f"regs {reg} k2 ceil", (2, 16, 21, 24), kind="max", kernel=2, stride=2,
                           padding=0, ceil_mode=True, params=reg, **c)
                check_pool(dev, rng, f"regs {reg} misaligned", (2, 16, 15, 16), kind="avg", kernel=3, stride=2,
                           padding=1, offset=np.dtype(dtype).itemsize, params=reg, **c)
            if not quick:
                check_pool(dev, rng, "big", (4, 32, 56, 56), kind="max", kernel=3, stride=2, padding=1,
                           indices=True, **c)
                check_pool(dev, rng, "512 threads", (2, 24, 33, 35), kind="avg", kernel=3, stride=1, padding=1,
                           params={"POOL_THREADS": 512, "POOL_TILE_W": 16}, **c)


def check_adaptive(
    dev: Dev, rng: np.random.Generator, name: str, shape: tuple[int, int, int, int], out: tuple[int, int],
    kind: str, dtype: Any, layout: str, indices: bool, params: dict | None = None, offset: int = 0,
    nan_frac: float = 0.0,
) -> None:
    """One adaptive_pool2d launch against the oracle (values, NaN pattern, indices)."""
    if CONV_MATCH and not any(m in name for m in CONV_MATCH.split("|")):
        return
    full = f"adaptive[{name} {kind}{' idx' if indices else ''} {np.dtype(dtype).name} {layout}]"
    try:
        sp = S.adaptive_pool2d_spec(kind, geometry(shape, layout, dtype), out, indices)
        x = rand(rng, shape, dtype)
        if nan_frac:
            x[rng.random(shape) < nan_frac] = np.nan
        want, want_i = ref.pool2d_from_spec(sp, x.astype(np.float64))
        xb = dev.put(phys(x, layout), offset)
        oshape = phys_shape(sp.out_shape, layout)
        yb = dev.poison(oshape, dtype, offset)
        ib = dev.poison(oshape, np.int64) if indices else None
        dev.be.adaptive_pool2d(sp, xb, yb, ib, params or {})
        got = logical(dev.get(yb, oshape, dtype), layout)
        ok, detail = compare(got, want, dtype, exact=(kind == "max"))
        if ok and ib is not None:
            gi = logical(dev.get(ib, oshape, np.int64), layout)
            if (gi != want_i).any():
                ok, detail = False, f"indices differ ({int((gi != want_i).sum())} bad)"
        record(full, ok, detail)
    except Exception as exc:
        record(full, False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")


def adaptive_suite(dev: Dev, rng: np.random.Generator, quick: bool) -> None:
    """adaptive_pool2d cases."""
    cases = [
        ("global 7x7", (4, 64, 7, 7), (1, 1)),
        ("odd", (2, 3, 17, 23), (5, 7)),
        ("identity", (2, 6, 13, 15), (13, 15)),
        ("grow", (2, 3, 5, 5), (7, 9)),
        ("C130", (2, 130, 9, 10), (3, 4)),
        ("large bins", (1, 3, 200, 180), (1, 2)),
        ("nhwc vsplit", (3, 256, 9, 11), (2, 3)),
        ("nhwc global C64", (5, 64, 13, 12), (1, 1)),
    ]
    # global pooling without indices: NCHW adaptive_pool2d_*_gflat (ADAPT_GSTAGES buffers per
    # warp; a plane count that is no multiple of 32, odd plane sizes, the float16 fallback to
    # two buffers at 19x23) and NHWC adaptive_pool2d_*_vsplit (ADAPT_VSPLIT_U loads in flight:
    # bins smaller than one round, partial channel chunks, 256 channel vectors)
    gcases = [
        ("g odd planes", (3, 37, 5, 5), {}),
        ("g C72 5x3", (2, 72, 5, 3), {}),
        ("g C2048 7x7", (3, 2048, 7, 7), {}),
        ("g 19x23", (2, 40, 19, 23), {}),
        ("g 1x1 image", (3, 24, 1, 1), {}),
        ("g stages 4", (3, 37, 5, 5), {"ADAPT_GSTAGES": 4, "ADAPT_THREADS": 512}),
        ("g stages 2 U1", (2, 72, 9, 7), {"ADAPT_GSTAGES": 2, "ADAPT_VSPLIT_U": 1}),
        ("g stages 3 U2 128", (2, 72, 9, 7), {"ADAPT_GSTAGES": 3, "ADAPT_VSPLIT_U": 2, "ADAPT_THREADS": 128}),
        ("g U4", (5, 64, 13, 12), {"ADAPT_VSPLIT_U": 4}),
        # the fixed-plane build (ADAPT_GHW): even planes (6x6 fixed for float16 only, 2x3 for
        # both) and 8x8, which stays on the runtime loop (all lanes in one bank)
        ("g 6x6", (2, 40, 6, 6), {}),
        ("g 2x3", (3, 45, 2, 3), {}),
        ("g 8x8", (2, 33, 8, 8), {}),
    ]
    for dtype in (np.float32, np.float16):
        for layout in ("NCHW", "NHWC"):
            c = dict(dtype=dtype, layout=layout)
            for name, shape, out in cases:
                for kind in ("avg", "max"):
                    check_adaptive(dev, rng, name, shape, out, kind, indices=kind == "max", **c)
            for name, shape, params in gcases:
                for kind, idx in (("avg", False), ("max", False), ("max", True)):
                    check_adaptive(dev, rng, name, shape, (1, 1), kind, indices=idx, params=params, **c)
            # NHWC global pooling with a thread per (image, channel vector) (adaptive_pool2d_*_gvec, where
            # those number at least 256 per multiprocessor): 7x7 (a partial last batch of loads), 5x3 with
            # 16 and 4 loads in flight, a 1x1 image, NaN inputs; indices stay on vsplit
            ggv = (136, 2048)
            for name, shape, params in (("gvec 7x7", (*ggv, 7, 7), {}), ("gvec 5x3 U16", (*ggv, 5, 3),
                                        {"ADAPT_GVEC_U": 16}), ("gvec 3x4 U4 512", (*ggv, 3, 4),
                                        {"ADAPT_GVEC_U": 4, "ADAPT_THREADS": 512}), ("gvec 1x1", (*ggv, 1, 1), {})):
                for kind, idx in (("avg", False), ("max", False), ("max", True)):
                    check_adaptive(dev, rng, name, shape, (1, 1), kind, indices=idx, params=params, **c)
            for kind, idx in (("avg", False), ("max", False)):
                check_adaptive(dev, rng, "gvec nan", (*ggv, 7, 7), (1, 1), kind, indices=idx, nan_frac=0.01, **c)
            # ADAPT_GVEC_S lanes per pair (slices of the pixels, combined by shuffles): 257 channel
            # vectors per image (float16; 514 float32) and odd N, so no pair count is a multiple of
            # 32 and the last warp is partial; pixel counts no multiple of S, 3 and 1 pixels (empty
            # slices); 67 images: float16 gvec only through S x pairs; 2111 x 2056 x 1 x 3: more
            # threads than the grid holds on 132 SMs (float32 S 2 and 4, float16 S 4), so warps
            # walk the grid-stride loop; NaN inputs
            if layout == "NHWC":
                ggs = (135, 2056)
                for name, shape, params in (
                        ("gvec S2 7x7", (*ggs, 7, 7), {"ADAPT_GVEC_S": 2}),
                        ("gvec S4 5x3 U4", (*ggs, 5, 3), {"ADAPT_GVEC_S": 4, "ADAPT_GVEC_U": 4}),
                        ("gvec S4 7x7 U16 128", (*ggs, 7, 7), {"ADAPT_GVEC_S": 4, "ADAPT_GVEC_U": 16,
                                                              "ADAPT_THREADS": 128}),
                        ("gvec S2 3x3 512", (*ggs, 3, 3), {"ADAPT_GVEC_S": 2, "ADAPT_THREADS": 512}),
                        ("gvec S4 1x3", (*ggs, 1, 3), {"ADAPT_GVEC_S": 4}),
                        ("gvec S2 1x1", (*ggs, 1, 1), {"ADAPT_GVEC_S": 2}),
                        ("gvec S2 67 images", (67, 2056, 7, 7), {"ADAPT_GVEC_S": 2}),
                        ("gvec S2 grid-stride", (2111, 2056, 1, 3), {"ADAPT_GVEC_S": 2}),
                        ("gvec S4 grid-stride", (2111, 2056, 1, 3), {"ADAPT_GVEC_S": 4})):
                    for kind in ("avg", "max"):
                        check_adaptive(dev, rng, name, shape, (1, 1), kind, indices=False, params=params, **c)
                for s in (2, 4):
                    for kind in ("avg", "max"):
                        check_adaptive(dev, rng, f"gvec nan S{s}", (*ggs, 7, 7), (1, 1), kind, indices=False,
                                       nan_frac=0.01, params={"ADAPT_GVEC_S": s}, **c)
            for kind, idx in (("avg", False), ("max", False), ("max", True)):
                check_adaptive(dev, rng, "g nan", (3, 64, 7, 7), (1, 1), kind, indices=idx, nan_frac=0.01, **c)
                check_adaptive(dev, rng, "g misaligned", (3, 64, 7, 7), (1, 1), kind, indices=idx,
                               offset=2 * np.dtype(dtype).itemsize, **c)


# ----------------------------------------------------------------------------------
# convolution
# ----------------------------------------------------------------------------------


def check_conv(
    dev: Dev, rng: np.random.Generator, name: str, shape: tuple[int, int, int, int], cout: int, k: Any, dtype: Any,
    layout: str, stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
    params: dict | None = None, offset: int = 0, relu: bool = False, w_offset: int = 0, expect: str = "",
) -> None:
    """One conv2d launch against the oracle (tolerance relative to sum |x||w|); `relu` fuses ReLU;
    `offset` shifts x and y, `w_offset` the weights, that many bytes off their allocation's alignment;
    `expect`: a kernel the launch plan must contain (else the case fails even where the result is right)."""
    full = f"conv2d[{name} {np.dtype(dtype).name} {layout}]"
    if CONV_MATCH and not any(m in name for m in CONV_MATCH.split("|")):
        return
    try:
        kh, kw = (k, k) if isinstance(k, int) else k
        wshape = (cout, shape[1] // groups, kh, kw)
        sp = S.conv2d_spec(geometry(shape, layout, dtype), wshape, bias, (cout,) if bias else None, stride, padding,
                           dilation, groups)
        x = rand(rng, shape, dtype)
        w = (rng.standard_normal(wshape) / np.sqrt(np.prod(wshape[1:]))).astype(dtype)
        b = rng.standard_normal(cout).astype(np.float32) if bias else None
        scale = ref.conv2d_from_spec(sp, np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)),
                                     None if b is None else np.abs(b))
        sp = dataclasses.replace(sp, relu=relu)
        want = ref.conv2d_from_spec(sp, x.astype(np.float64), w.astype(np.float64), b)
        xb = dev.put(phys(x, layout), offset)
        wb = dev.put(w, w_offset)
        bb = dev.put(b) if b is not None else None
        oshape = phys_shape(sp.out_shape, layout)
        yb = dev.poison(oshape, dtype, offset)
        dev.be.conv2d(sp, xb, wb, bb, yb, params or {})
        got = logical(dev.get(yb, oshape, dtype), layout)
        if np.dtype(dtype) == np.float32:
            ok, detail = compare(got, want, dtype, scale=np.maximum(scale, 1e-30), rtol=1e-5)
        else:
            ok, detail = compare(got, want, dtype, scale=scale + np.abs(want), rtol=1.5e-3)
        if expect:
            plan = dev.be._plan_conv2d(sp, params or {}, int(xb) % 16 == 0 and int(yb) % 16 == 0, int(wb) % 16 == 0)
            if expect not in [launch.kernel for launch in plan]:
                ok, detail = False, f"planned {[launch.kernel for launch in plan]}, not {expect}; {detail}"
        record(full, ok, detail)
    except Exception as exc:
        record(full, False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")


def conv_suite(dev: Dev, rng: np.random.Generator, quick: bool) -> None:
    """conv2d cases (dense 3x3 -> SIMT/tensor cores, depthwise tiles, generic)."""
    for dtype in (np.float32, np.float16):
        for layout in ("NCHW", "NHWC"):
            c = dict(dtype=dtype, layout=layout)
            check_conv(dev, rng, "3x3 64->64", (2, 64, 32, 32), 64, 3, padding=1, **c)
            check_conv(dev, rng, "3x3 64->64 nobias", (1, 64, 12, 40), 64, 3, padding=1, bias=False, **c)
            check_conv(dev, rng, "3x3 5->7 odd", (3, 5, 17, 23), 7, 3, padding=1, **c)
            check_conv(dev, rng, "3x3 16->130", (1, 16, 9, 35), 130, 3, padding=(0, 2, 1, 0), **c)
            check_conv(dev, rng, "3x3 70->20 valid", (2, 70, 11, 13), 20, 3, padding=0, **c)
            check_conv(dev, rng, "3x3 simt ci4", (2, 13, 10, 33), 24, 3, padding=1, params={"CONV_SIMT_CI": 4}, **c)
            check_conv(dev, rng, "3x3 no tc", (2, 24, 10, 17), 40, 3, padding=1, params={"CONV_TC": 0}, **c)
            # the pipelined NHWC float16 kernel (CONV_TC=2; other dtypes and layouts fall back): full and
            # partial 8x32 tiles, C_in below 64 and not a multiple of 16, C_out not a multiple of 8 or over 64,
            # asymmetric and no padding, more tiles than blocks (both buffers, grid-stride), unaligned -> fallback
            tc2 = {"CONV_TC": 2}
            check_conv(dev, rng, "3x3 tc pipe 64->64", (2, 64, 32, 32), 64, 3, padding=1, params=tc2, **c)
            check_conv(dev, rng, "3x3 tc pipe 56->70", (3, 56, 13, 45), 70, 3, padding=1, params=tc2, **c)
            check_conv(dev, rng, "3x3 tc pipe 40->64 asym", (2, 40, 17, 33), 64, 3, padding=(0, 2, 1, 0),
                       params=tc2, **c)
            check_conv(dev, rng, "3x3 tc pipe 8->16", (2, 8, 9, 35), 16, 3, padding=1, bias=False, params=tc2, **c)
            check_conv(dev, rng, "3x3 tc pipe valid", (2, 64, 11, 13), 24, 3, padding=0, params=tc2, **c)
            check_conv(dev, rng, "3x3 tc pipe many tiles", (18, 64, 24, 40), 72, 3, padding=1, params=tc2, **c)
            check_conv(dev, rng, "3x3 tc pipe misaligned", (2, 16, 10, 11), 16, 3, padding=1, offset=4, params=tc2,
                       **c)
            # CONV_TC=3 (float16, weights streamed 32 channels at a time; NHWC C_in % 8 == 0, NCHW W % 8 == 0;
            # else as CONV_TC=2): C_in over 64 and not a multiple of 32, 8 chunks and 3 output-channel tiles,
            # C_in below 32, 1x1, widths 16, 32 and 40 (NCHW) and 35, 33, 9 (NHWC only)
            tc3 = {"CONV_TC": 3}
            check_conv(dev, rng, "3x3 tc wide 72->70", (2, 72, 9, 16), 70, 3, padding=1, params=tc3, **c)
            check_conv(dev, rng, "3x3 tc wide 136->64 asym", (1, 136, 10, 35), 64, 3, padding=(0, 2, 1, 0),
                       params=tc3, **c)
            check_conv(dev, rng, "3x3 tc wide 256->130", (2, 256, 12, 33), 130, 3, padding=1, params=tc3, **c)
            check_conv(dev, rng, "3x3 tc wide 24->8", (2, 24, 7, 9), 8, 3, padding=1, bias=False, params=tc3, **c)
            check_conv(dev, rng, "1x1 tc wide 264->130", (2, 264, 9, 40), 130, 1, params=tc3, **c)
            check_conv(dev, rng, "1x1 tc wide pad1", (1, 16, 5, 7), 24, 1, padding=1, params=tc3, **c)
            check_conv(dev, rng, "3x3 tc wide 136->64 w40", (1, 136, 10, 40), 64, 3, padding=(0, 2, 1, 0),
                       params=tc3, **c)
            check_conv(dev, rng, "3x3 tc wide pad3 w16", (1, 40, 7, 16), 24, 3, padding=3, params=tc3, **c)
            check_conv(dev, rng, "1x1 tc wide 264->130 w32", (2, 264, 9, 32), 130, 1, params=tc3, **c)
            # deeper pipelines (TC_WIDE_STAGES 3, 4; 4 with 3x3 does not fit and serves the next kernel),
            # many tiles per block (more tiles than multiprocessors), CONV_TC=2 past 64 input channels
            for st in (3, 4):
                tcs = {"CONV_TC": 3, "TC_WIDE_STAGES": st}
                check_conv(dev, rng, f"3x3 tc wide stages{st}", (2, 136, 12, 40), 70, 3, padding=1, params=tcs, **c)
                check_conv(dev, rng, f"1x1 tc wide stages{st}", (2, 264, 9, 40), 130, 1, params=tcs, **c)
                check_conv(dev, rng, f"1x1 tc wide stages{st} many tiles", (9, 96, 40, 72), 64, 1, params=tcs,
                           **c)
            check_conv(dev, rng, "3x3 tc wide stages3 many tiles", (9, 96, 40, 72), 64, 3, padding=1,
                       params={"CONV_TC": 3, "TC_WIDE_STAGES": 3}, **c)
            check_conv(dev, rng, "3x3 tc2 wide 96->70", (2, 96, 9, 40), 70, 3, padding=1, params=tc2, **c)
            for st in (2, 3):  # the 1x1 kernel built for two blocks per SM (TC_WIDE_K1_BLOCKS)
                k1b = {"CONV_TC": 3, "TC_WIDE_STAGES": st, "TC_WIDE_K1_BLOCKS": 2}
                check_conv(dev, rng, f"1x1 tc wide 2 blocks stages{st} many tiles", (9, 96, 40, 72), 64, 1,
                           params=k1b, **c)
                check_conv(dev, rng, f"1x1 tc wide 2 blocks stages{st}", (2, 264, 9, 40), 130, 1, params=k1b, **c)
            check_conv(dev, rng, "1x1 tc2 wide 96->70", (2, 96, 9, 40), 70, 1, params=tc2, **c)
            # TC_WIDE_ROWS 4 (session 42: 4 x 32 tiles of 4 warps, what the 99 KiB parts get past 64 input
            # channels): partial row tiles (13 and 10 output rows), chunks and output tiles, asymmetric padding,
            # three stages over many tiles, 1x1; float16 must plan the streamed-weight kernel
            r4 = {"CONV_TC": 3, "TC_WIDE_ROWS": 4}
            e3, e1 = ({"expect": "conv2d_k3_tc_wide"}, {"expect": "conv2d_k1_tc_wide"}) if dtype == np.float16 \
                else ({}, {})
            check_conv(dev, rng, "3x3 tc wide rows4 136->70", (2, 136, 13, 40), 70, 3, padding=1, params=r4, **c, **e3)
            check_conv(dev, rng, "3x3 tc wide rows4 72->64 asym", (1, 72, 10, 40), 64, 3, padding=(0, 2, 1, 0),
                       params=r4, **c, **e3)
            check_conv(dev, rng, "3x3 tc wide rows4 stages3 many tiles", (9, 96, 40, 72), 64, 3, padding=1,
                       params={**r4, "TC_WIDE_STAGES": 3}, **c, **e3)
            check_conv(dev, rng, "1x1 tc wide rows4 264->130", (2, 264, 9, 40), 130, 1, params=r4, **c, **e1)
            check_conv(dev, rng, "3x3 tc wide rows4 stages1 136->70", (2, 136, 13, 40), 70, 3, padding=1,
                       params={**r4, "TC_WIDE_STAGES": 1}, **c, **e3)
            # NCHW: widths that are multiples of 8 (C_in any), padding 3 (the rows' column shift 5)
            check_conv(dev, rng, "3x3 tc pipe 20->70 w40", (3, 20, 13, 40), 70, 3, padding=1, params=tc2, **c)
            check_conv(dev, rng, "3x3 tc pipe pad3", (2, 24, 11, 16), 32, 3, padding=3, params=tc2, **c)
            check_conv(dev, rng, "3x3 tc pipe asym w24", (2, 64, 17, 24), 64, 3, padding=(0, 2, 1, 0), bias=False,
                       params=tc2, **c)
            check_conv(dev, rng, "1x1 16->24", (2, 16, 9, 9), 24, 1, **c)
            check_conv(dev, rng, "2x3 asym", (2, 8, 11, 12), 16, (2, 3), padding=(1, 0, 2, 1), **c)
            check_conv(dev, rng, "dw 3x3", (2, 32, 17, 19), 32, 3, padding=1, groups=32, **c)
            check_conv(dev, rng, "dw 3x3 nobias C6", (2, 6, 17, 19), 6, 3, padding=1, groups=6, bias=False, **c)
            check_conv(dev, rng, "dw 3x3 s2", (2, 24, 17, 20), 24, 3, stride=2, padding=1, groups=24, **c)
            check_conv(dev, rng, "dw 5x5 d2", (1, 16, 23, 21), 16, 5, padding=4, dilation=2, groups=16, **c)
            check_conv(dev, rng, "dw bands", (1, 8, 80, 90), 8, 3, padding=1, groups=8,
                       params={"DW_SMEM_KB": 8, "DW_TILE_H": 4}, **c)
            check_conv(dev, rng, "dw x2 mult", (2, 4, 9, 10), 8, 3, padding=1, groups=4, **c)
            check_conv(dev, rng, "grouped g4", (2, 16, 9, 11), 12, 3, stride=2, padding=1, groups=4, **c)
            check_conv(dev, rng, "grouped g8 3x3", (2, 64, 13, 19), 64, 3, padding=1, groups=8, **c)
            check_conv(dev, rng, "grouped g32 cog4", (2, 128, 9, 37), 128, 3, padding=1, groups=32, **c)
            for tc_rows in (4, 16, 32):  # float16: the grouped tensor-core kernels (others: the tiled one)
                check_conv(dev, rng, f"grouped tc rows{tc_rows}", (2, 64, 37, 41), 64, 3, padding=1, groups=8,
                           params={"GRP_TC": 1, "GRP_TC_ROWS": tc_rows}, **c)
            check_conv(dev, rng, "grouped tc16 cig13 2x3", (2, 26, 11, 37), 26, (2, 3), padding=(1, 0, 0, 2),
                       groups=2, params={"GRP_TC": 1}, **c)
            check_conv(dev, rng, "dense 7x7 s2 stem", (2, 3, 37, 41), 16, 7, stride=2, padding=3, **c)
            if dtype == np.float16:
                # the implicit GEMM for stems (CONV_IM2COL, conv2d_im2col_tc, session 26): K = C_in KH KW
                # padded to 16 (147 -> 160), rows of 2 segments with a partial one, C_out over 64 (a partial
                # second chunk), more tiles than warps, asymmetric padding, dilation, K = 256, a misaligned
                # output (the scalar stores), fused ReLU, the benchmark's shape
                im2 = {"params": {"CONV_IM2COL": 1}, "expect": "conv2d_im2col_tc", **c}
                check_conv(dev, rng, "im2col 7x7 s2 stem 3->70", (3, 3, 37, 75), 70, 7, stride=2, padding=3, **im2)
                check_conv(dev, rng, "im2col 7x7 s2 many tiles relu", (8, 3, 224, 224), 64, 7, stride=2,
                           padding=3, relu=True, **im2)
                check_conv(dev, rng, "im2col 3x3 s2 asym nobias", (2, 5, 13, 35), 16, 3, stride=2,
                           padding=(0, 2, 1, 0), bias=False, **im2)
                check_conv(dev, rng, "im2col 5x3 dil2 s(1,2)", (2, 4, 17, 40), 24, (5, 3), stride=(1, 2),
                           dilation=2, padding=2, **im2)
                check_conv(dev, rng, "im2col K=256 4x4 16->8", (1, 16, 9, 11), 8, 4, padding=1, **im2)
                check_conv(dev, rng, "im2col 7x7 s2 misaligned", (2, 3, 21, 40), 24, 7, stride=2, padding=3,
                           offset=2, **im2)
            if dtype == np.float32:
                # the implicit GEMM on CUDA cores (CONV_IM2COL in float32, conv2d_im2col_simt, session 27): the
                # stem (K 147: a partial k stage), C_out over 64 (K1S_BN 64 and 128 tiles, a partial one), pixel
                # tiles across images, asymmetric padding, dilation, K past 256 with K1S_BK 16, K % 4 == 0 (the
                # weights' float4 loads) and a misaligned output, fused ReLU, the benchmark's shapes
                ims = {"params": {"CONV_IM2COL": 1}, "expect": "conv2d_im2col_simt", **c}
                check_conv(dev, rng, "im2col simt 7x7 s2 stem 3->70", (3, 3, 37, 75), 70, 7, stride=2, padding=3,
                           **ims)
                check_conv(dev, rng, "im2col simt 7x7 s2 stem relu", (8, 3, 224, 224), 64, 7, stride=2, padding=3,
                           relu=True, **ims)
                check_conv(dev, rng, "im2col simt 3x3 s2 asym nobias", (2, 5, 13, 35), 16, 3, stride=2,
                           padding=(0, 2, 1, 0), bias=False, **ims)
                check_conv(dev, rng, "im2col simt 5x3 dil2 s(1,2)", (2, 4, 17, 40), 24, (5, 3), stride=(1, 2),
                           dilation=2, padding=2, **ims)
                check_conv(dev, rng, "im2col simt 3x3 s2 64->128", (2, 64, 56, 56), 128, 3, stride=2, padding=1,
                           **ims)
                check_conv(dev, rng, "im2col simt 3x3 s2 40->136 bk16", (3, 40, 19, 71), 136, 3, stride=2,
                           padding=1, **{**ims, "params": {"CONV_IM2COL": 1, "K1S_BK": 16}})
                check_conv(dev, rng, "im2col simt 3x3 K%4 misaligned", (2, 12, 17, 23), 70, 3, padding=1,
                           offset=4, w_offset=4, **ims)
                # a table of 3060 k: shared memory past the 48 KiB default (added after session 27's device calls)
                check_conv(dev, rng, "im2col simt 3x3 K=3060 bk16", (1, 340, 5, 6), 24, 3, padding=1,
                           **{**ims, "params": {"CONV_IM2COL": 1, "K1S_BK": 16}})
            # dense 3x3 stride 2 (float16 NHWC: conv2d_k3s2_tc_wide, session 21): partial 32-channel chunks
            # and 64-channel output tiles, odd and even sizes (the patch's last column inside or past the
            # image), asymmetric and zero padding, no bias, more tiles than blocks, a misaligned buffer
            check_conv(dev, rng, "3x3 s2 64->128", (2, 64, 56, 56), 128, 3, stride=2, padding=1, **c)
            check_conv(dev, rng, "3x3 s2 40->70 odd", (3, 40, 19, 71), 70, 3, stride=2, padding=1, **c)
            check_conv(dev, rng, "3x3 s2 24->8 asym", (2, 24, 18, 33), 8, 3, stride=2, padding=(0, 2, 1, 0),
                       bias=False, **c)
            check_conv(dev, rng, "3x3 s2 136->64 valid", (2, 136, 17, 66), 64, 3, stride=2, padding=0, **c)
            check_conv(dev, rng, "3x3 s2 many tiles", (40, 32, 40, 72), 64, 3, stride=2, padding=1, **c)
            check_conv(dev, rng, "3x3 s2 misaligned", (2, 16, 10, 11), 16, 3, stride=2, padding=1, offset=4, **c)
            for st in (3, 4):  # stage counts whose shared memory does not fit: the next kernel serves
                check_conv(dev, rng, f"3x3 s2 stages{st}", (2, 64, 21, 35), 72, 3, stride=2, padding=1,
                           params={"TC_WIDE_STAGES": st}, **c)
            # TC_WIDE_ROWS 4 (session 42; sm_80's stride 2): 4 x 32 tiles of 4 warps, 7 and 10 row tiles
            s4 = {"params": {"TC_WIDE_ROWS": 4}, **c}
            x3, x1 = ({"expect": "conv2d_k3s2_tc_wide"}, {"expect": "conv2d_k1s2_tc_wide"}) if dtype == np.float16 \
                else ({}, {})
            check_conv(dev, rng, "3x3 s2 rows4 64->128", (2, 64, 56, 56), 128, 3, stride=2, padding=1, **s4, **x3)
            check_conv(dev, rng, "3x3 s2 rows4 40->70 odd", (3, 40, 19, 71), 70, 3, stride=2, padding=1, **s4, **x3)
            check_conv(dev, rng, "1x1 s2 rows4 256->130", (2, 256, 28, 29), 130, 1, stride=2, **s4, **x1)
            # one stage (TC_WIDE_STAGES 1, the 99 KiB parts' 3x3 stride 2): the next stage loads after the mma
            s1 = {"params": {"TC_WIDE_ROWS": 4, "TC_WIDE_STAGES": 1}, **c}
            check_conv(dev, rng, "3x3 s2 rows4 stages1 64->128", (2, 64, 56, 56), 128, 3, stride=2, padding=1, **s1,
                       **x3)
            check_conv(dev, rng, "3x3 s2 rows4 stages1 40->70 odd", (3, 40, 19, 71), 70, 3, stride=2, padding=1,
                       **s1, **x3)
            # 1x1 stride 2 (conv2d_k1s2_tc_wide): only even patch rows and columns are copied
            check_conv(dev, rng, "1x1 s2 256->130", (2, 256, 28, 29), 130, 1, stride=2, **c)
            check_conv(dev, rng, "1x1 s2 40->24 pad1", (3, 40, 13, 70), 24, 1, stride=2, padding=1, bias=False, **c)
            check_conv(dev, rng, "1x1 s2 many tiles", (30, 64, 56, 56), 128, 1, stride=2, **c)
            check_conv(dev, rng, "1x1 s2 stages3 2 blocks", (2, 72, 20, 66), 64, 1, stride=2,
                       params={"TC_WIDE_STAGES": 3, "TC_WIDE_K1_BLOCKS": 2}, **c)
            # the 1x1 GEMM kernel (CONV_K1_GEMM, conv2d_k1_gemm, session 22; float16, NCHW between two
            # transposes; float32 serves the other kernels): M = N*OH*OW no multiple of 128, C_out % 8 != 0
            # (scalar stores) and over 128 (several N tiles), C_in 40 (a partial 32-channel stage) and 264,
            # stride 2 with padding 1, asymmetric padding and stride (2, 1), ReLU, no bias, more tiles than
            # one wave, the benchmark's shapes, K1G_BN 64 / 128 x K1G_STAGES 2 / 3 / 4, and C_in % 8 != 0 or a
            # misaligned buffer or weight (the other kernels serve)
            k1g = {"CONV_K1_GEMM": 1}
            check_conv(dev, rng, "k1g 256->64", (4, 256, 28, 29), 64, 1, params=k1g, **c)
            check_conv(dev, rng, "k1g 40->70 odd", (3, 40, 13, 17), 70, 1, params=k1g, **c)
            check_conv(dev, rng, "k1g 264->130 relu", (2, 264, 9, 40), 130, 1, params=k1g, relu=True, **c)
            check_conv(dev, rng, "k1g 16->24 pad1 nobias", (2, 16, 9, 9), 24, 1, padding=1, bias=False, params=k1g,
                       **c)
            check_conv(dev, rng, "k1g s2 pad1 40->70", (3, 40, 13, 70), 70, 1, stride=2, padding=1, params=k1g, **c)
            check_conv(dev, rng, "k1g s2 256->130 odd relu", (2, 256, 28, 29), 130, 1, stride=2, params=k1g,
                       relu=True, **c)
            check_conv(dev, rng, "k1g s(2,1) asym", (2, 24, 18, 33), 24, 1, stride=(2, 1), padding=(0, 2, 1, 0),
                       bias=False, params=k1g, **c)
            check_conv(dev, rng, "k1g many tiles", (30, 64, 56, 56), 128, 1, params=k1g, **c)
            if dtype == np.float16:  # the benchmark's shapes (float32 would time the oracle and the CUDA cores)
                check_conv(dev, rng, "k1g 32x256x56x56 256->64", (32, 256, 56, 56), 64, 1, params=k1g, **c)
                check_conv(dev, rng, "k1g s2 32x256x56x56 256->512", (32, 256, 56, 56), 512, 1, stride=2,
                           params=k1g, **c)
            for bn in (64, 128):
                for st in (2, 3, 4):
                    k1gv = {**k1g, "K1G_BN": bn, "K1G_STAGES": st}
                    check_conv(dev, rng, f"k1g bn{bn} stages{st} 136->72", (2, 136, 19, 23), 72, 1, params=k1gv, **c)
                    check_conv(dev, rng, f"k1g bn{bn} stages{st} s2 pad1 40->70", (2, 40, 19, 23), 70, 1, stride=2,
                               padding=1, params=k1gv, relu=True, **c)
            check_conv(dev, rng, "k1g ci12", (2, 12, 10, 11), 20, 1, params=k1g, **c)
            check_conv(dev, rng, "k1g misaligned", (2, 16, 10, 11), 16, 1, offset=4, params=k1g, **c)
            check_conv(dev, rng, "k1g s2 misaligned", (2, 16, 10, 11), 16, 1, stride=2, padding=1, offset=4,
                       params=k1g, **c)
            check_conv(dev, rng, "k1g misaligned weights", (2, 16, 10, 11), 24, 1, w_offset=8, params=k1g, **c)
            # its persistent variants (K1G_PERSIST 1, 2: conv2d_k1_gemm_persist(_cs), a grid of 2 (BN 128) or 3
            # (BN 64) blocks an SM walking the tiles, the next tile's stages issued under this one's epilogue;
            # not measured yet): tiles that span images, a partial last tile, C_out % 8 != 0 (scalar stores),
            # C_in 40 and 264, stride 2 with padding, ReLU, no bias, more tiles than blocks with a block's N tile
            # changing between its tiles (5 N tiles), K1G_BN 64 / 128 x K1G_STAGES 2 / 3 / 4, the benchmark's
            # shapes; a misaligned y (scalar stores) and C_in % 8 != 0 (the other kernels serve)
            for pv in (1, 2):
                k1gp = {**k1g, "K1G_PERSIST": pv}
                check_conv(dev, rng, f"k1g persist{pv} 40->70 odd", (3, 40, 13, 17), 70, 1, params=k1gp, **c)
                check_conv(dev, rng, f"k1g persist{pv} 264->130 relu", (2, 264, 9, 40), 130, 1, params=k1gp,
                           relu=True, **c)
                check_conv(dev, rng, f"k1g persist{pv} s2 pad1 40->70 nobias", (3, 40, 13, 70), 70, 1, stride=2,
                           padding=1, bias=False, params=k1gp, **c)
                check_conv(dev, rng, f"k1g persist{pv} many tiles", (30, 64, 56, 56), 256, 1, params=k1gp, **c)
                check_conv(dev, rng, f"k1g persist{pv} 5 N tiles", (8, 40, 37, 41), 600, 1, params=k1gp, relu=True,
                           **c)
                check_conv(dev, rng, f"k1g persist{pv} bn64 5 N tiles", (8, 40, 37, 41), 300, 1,
                           params={**k1gp, "K1G_BN": 64}, **c)
                for bn in (64, 128):
                    for st in (2, 3, 4):
                        check_conv(dev, rng, f"k1g persist{pv} bn{bn} stages{st} 136->72 many tiles",
                                   (12, 136, 19, 23), 72, 1, params={**k1gp, "K1G_BN": bn, "K1G_STAGES": st}, **c)
                if dtype == np.float16:  # the benchmark's shapes
                    check_conv(dev, rng, f"k1g persist{pv} 32x64x56x56 64->256", (32, 64, 56, 56), 256, 1,
                               params=k1gp, **c)
                    check_conv(dev, rng, f"k1g persist{pv} 32x256x56x56 256->64", (32, 256, 56, 56), 64, 1,
                               params=k1gp, **c)
                    check_conv(dev, rng, f"k1g persist{pv} s2 32x256x56x56 256->512", (32, 256, 56, 56), 512, 1,
                               stride=2, params=k1gp, **c)
                check_conv(dev, rng, f"k1g persist{pv} misaligned", (2, 16, 10, 11), 16, 1, offset=4, params=k1gp,
                           **c)
                check_conv(dev, rng, f"k1g persist{pv} ci12", (2, 12, 10, 11), 20, 1, params=k1gp, **c)
            # the NCHW 1x1 GEMM without transposes (CONV_K1_NCHW, conv2d_k1_gemm_nchw, session 24; float16 NCHW
            # stride 1 without padding; NHWC, float32 and the rest serve the other kernels): pixels over the
            # batch (7x8 and 9x16 images: tiles that span images, a partial last tile), C_in 40 (a partial
            # 32-channel stage) and 264, C_out 70 (a partial channel tile), 136 and 24 / 64 (K1N_BM narrowed to
            # 64), ReLU, no bias, more tiles than one wave, the benchmark's shapes, K1N_BM 64 / 128 x
            # K1N_STAGES 2 / 3 / 4, with CONV_K1_GEMM on too (this kernel first), and C_in % 8 != 0, H*W % 8 !=
            # 0, stride 2, padding or a misaligned buffer or weight (the other kernels serve)
            k1n = {"CONV_K1_NCHW": 1}
            check_conv(dev, rng, "k1n 256->64", (4, 256, 28, 32), 64, 1, params=k1n, **c)
            check_conv(dev, rng, "k1n 40->70 7x8", (3, 40, 7, 8), 70, 1, params=k1n, **c)
            check_conv(dev, rng, "k1n 264->136 relu 9x16", (2, 264, 9, 16), 136, 1, params=k1n, relu=True, **c)
            check_conv(dev, rng, "k1n 104->24 nobias", (3, 104, 7, 8), 24, 1, bias=False, params=k1n, **c)
            check_conv(dev, rng, "k1n many tiles", (30, 64, 56, 56), 256, 1, params=k1n, **c)
            check_conv(dev, rng, "k1n with k1g", (2, 40, 9, 16), 70, 1, params={**k1n, "CONV_K1_GEMM": 1}, **c)
            if dtype == np.float16:  # the benchmark's shapes
                check_conv(dev, rng, "k1n 32x256x56x56 256->64", (32, 256, 56, 56), 64, 1, params=k1n, **c)
                check_conv(dev, rng, "k1n 32x64x56x56 64->256", (32, 64, 56, 56), 256, 1, params=k1n, **c)
            for bm in (64, 128):
                for st in (2, 3, 4):
                    k1nv = {**k1n, "K1N_BM": bm, "K1N_STAGES": st}
                    check_conv(dev, rng, f"k1n bm{bm} stages{st} 136->72", (2, 136, 19, 24), 72, 1, params=k1nv,
                               **c)
                    check_conv(dev, rng, f"k1n bm{bm} stages{st} 40->130 relu", (3, 40, 7, 8), 130, 1, params=k1nv,
                               relu=True, **c)
            check_conv(dev, rng, "k1n ci12", (2, 12, 8, 8), 20, 1, params=k1n, **c)
            check_conv(dev, rng, "k1n hw%8", (2, 16, 9, 9), 24, 1, params=k1n, **c)
            check_conv(dev, rng, "k1n s2", (2, 16, 16, 16), 24, 1, stride=2, params=k1n, **c)
            check_conv(dev, rng, "k1n pad1", (2, 16, 8, 8), 24, 1, padding=1, params=k1n, **c)
            check_conv(dev, rng, "k1n misaligned", (2, 16, 8, 8), 16, 1, offset=4, params=k1n, **c)
            check_conv(dev, rng, "k1n misaligned weights", (2, 16, 8, 8), 24, 1, w_offset=8, params=k1n, **c)
            # other strides and paddings: x's sampled pixels (sample_planes, into a workspace), then the stride-1
            # GEMM (session 25): stride 2 with and without padding, (2, 1) with asymmetric padding, 3, padding
            # alone (whole rows and columns of zeros), C_in 264, ReLU, no bias, persistent, the benchmark's shape,
            # each required to plan the sampling kernel; OH*OW % 8 != 0 (the transposing path serves). NCHW only
            # (NHWC's GEMM takes strides itself)
            if dtype == np.float16 and layout == "NCHW":
                smp = {**c, "expect": "sample_planes"}
                check_conv(dev, rng, "k1n sampled s2 pad1 40->70", (3, 40, 13, 17), 70, 1, stride=2, padding=1,
                           params=k1n, **smp)
                check_conv(dev, rng, "k1n sampled s(2,1) asym", (2, 24, 18, 31), 24, 1, stride=(2, 1),
                           padding=(0, 2, 1, 0), bias=False, params=k1n, **smp)
                check_conv(dev, rng, "k1n sampled s2 264->136 relu", (2, 264, 32, 30), 136, 1, stride=2,
                           params=k1n, relu=True, **smp)
                check_conv(dev, rng, "k1n sampled pad2 nobias", (2, 40, 8, 8), 24, 1, padding=2, bias=False,
                           params=k1n, **smp)
                check_conv(dev, rng, "k1n sampled s3", (2, 16, 24, 24), 40, 1, stride=3, params=k1n, **smp)
                check_conv(dev, rng, "k1n sampled s2 oh*ow%8", (2, 16, 18, 18), 24, 1, stride=2, params=k1n,
                           expect="layout_transpose", **c)
                for pv in (0, 1, 2):
                    check_conv(dev, rng, f"k1n sampled persist{pv} s2 many tiles", (30, 64, 56, 56), 256, 1,
                               stride=2, params={**k1n, "K1N_PERSIST": pv}, **smp)
                check_conv(dev, rng, "k1n sampled 32x256x56x56 s2 256->512", (32, 256, 56, 56), 512, 1, stride=2,
                           params={**k1n, "K1N_PERSIST": 1}, **smp)
                # K1N_SAMPLE 1 (sample_planes_rows8): a warp's 8 rows crossing planes, a partial last block, OW
                # past 32 and 64 (several column passes), padding, stride (2, 1) and 3, the benchmark's shape
                k1r, rows8 = {**k1n, "K1N_SAMPLE": 1}, {**c, "expect": "sample_planes_rows8"}
                check_conv(dev, rng, "k1n sampled rows8 s2 pad1 40->70", (3, 40, 13, 17), 70, 1, stride=2,
                           padding=1, params=k1r, **rows8)
                check_conv(dev, rng, "k1n sampled rows8 s(2,1) asym wide", (3, 24, 18, 71), 24, 1, stride=(2, 1),
                           padding=(0, 2, 1, 0), bias=False, params=k1r, **rows8)
                check_conv(dev, rng, "k1n sampled rows8 s3 264->136", (2, 264, 24, 24), 136, 1, stride=3,
                           params={**k1r, "K1N_PERSIST": 1}, relu=True, **rows8)
                check_conv(dev, rng, "k1n sampled rows8 pad2 wide", (1, 8, 8, 134), 24, 1, padding=2, params=k1r,
                           **rows8)
                check_conv(dev, rng, "k1n sampled rows8 32x256x56x56 s2 256->512", (32, 256, 56, 56), 512, 1,
                           stride=2, params={**k1r, "K1N_PERSIST": 1}, **rows8)
            # its persistent variants (K1N_PERSIST 1, 2: conv2d_k1_gemm_nchw_persist(_cs), a grid of 2 (BM 128) or
            # 3 (BM 64) blocks an SM walking the tiles, the next tile's stages issued under this one's epilogue;
            # not measured yet): tiles that span images, a partial last tile, C_in 40 and 264, C_out 70, 136 and
            # 24, ReLU, no bias, more tiles than blocks with a block's channel tile changing between its tiles
            # (5 channel tiles), K1N_BM 64 / 128 x K1N_STAGES 2 / 3 / 4, the benchmark's shapes
            for pv in (1, 2):
                k1np = {**k1n, "K1N_PERSIST": pv}
                check_conv(dev, rng, f"k1n persist{pv} 40->70 7x8", (3, 40, 7, 8), 70, 1, params=k1np, **c)
                check_conv(dev, rng, f"k1n persist{pv} 264->136 relu 9x16", (2, 264, 9, 16), 136, 1, params=k1np,
                           relu=True, **c)
                check_conv(dev, rng, f"k1n persist{pv} 104->24 nobias", (3, 104, 7, 8), 24, 1, bias=False,
                           params=k1np, **c)
                check_conv(dev, rng, f"k1n persist{pv} many tiles", (30, 64, 56, 56), 256, 1, params=k1np, **c)
                check_conv(dev, rng, f"k1n persist{pv} 5 channel tiles", (16, 40, 37, 40), 600, 1, params=k1np,
                           relu=True, **c)
                check_conv(dev, rng, f"k1n persist{pv} bm64 5 channel tiles", (16, 40, 37, 40), 300, 1,
                           params={**k1np, "K1N_BM": 64}, **c)
                for bm in (64, 128):
                    for st in (2, 3, 4):
                        check_conv(dev, rng, f"k1n persist{pv} bm{bm} stages{st} 136->72 many tiles",
                                   (12, 136, 19, 24), 72, 1, params={**k1np, "K1N_BM": bm, "K1N_STAGES": st}, **c)
                if dtype == np.float16:  # the benchmark's shapes
                    check_conv(dev, rng, f"k1n persist{pv} 32x64x56x56 64->256", (32, 64, 56, 56), 256, 1,
                               params=k1np, **c)
                    check_conv(dev, rng, f"k1n persist{pv} 32x256x56x56 256->64", (32, 256, 56, 56), 64, 1,
                               params=k1np, **c)
            # the float32 1x1 SGEMM (CONV_K1_SIMT, conv2d_k1_simt, session 23; both layouts natively, float16
            # serves other kernels): M = N*OH*OW no multiple of 128 (tiles that span images), C_in 37 / 38 / 39
            # (scalar loads along k) and 40 / 264 (float4 loads), C_out 70 (scalar NHWC stores), 72 / 130 / 512,
            # 24 and 64 (the 64-wide tile), stride 1, 2 and (2, 1), padding 0, 1, asymmetric and after the
            # image only (NCHW: no float4 pixel loads), ReLU, no bias, K1S_BN 64 / 128 x K1S_BK 8 / 16, more
            # tiles than one wave, the benchmark's shapes, and misaligned x, y or weights (scalar paths)
            if dtype == np.float32:
                k1s = {"CONV_K1_SIMT": 1}
                check_conv(dev, rng, "k1s 256->64", (4, 256, 28, 29), 64, 1, params=k1s, **c)
                check_conv(dev, rng, "k1s 37->70 odd", (3, 37, 13, 17), 70, 1, params=k1s, **c)
                check_conv(dev, rng, "k1s 38->72 relu", (2, 38, 9, 40), 72, 1, params=k1s, relu=True, **c)
                check_conv(dev, rng, "k1s 264->130 relu", (2, 264, 9, 40), 130, 1, params=k1s, relu=True, **c)
                check_conv(dev, rng, "k1s 39->24 pad1 nobias", (2, 39, 9, 9), 24, 1, padding=1, bias=False,
                           params=k1s, **c)
                check_conv(dev, rng, "k1s 16->70 pad after", (2, 16, 8, 8), 70, 1, padding=(0, 1, 0, 1), params=k1s,
                           **c)
                check_conv(dev, rng, "k1s s2 pad1 40->70", (3, 40, 13, 70), 70, 1, stride=2, padding=1, params=k1s,
                           **c)
                check_conv(dev, rng, "k1s s2 256->130 odd relu", (2, 256, 28, 29), 130, 1, stride=2, params=k1s,
                           relu=True, **c)
                check_conv(dev, rng, "k1s s(2,1) asym", (2, 37, 18, 33), 24, 1, stride=(2, 1), padding=(0, 2, 1, 0),
                           bias=False, params=k1s, **c)
                check_conv(dev, rng, "k1s many tiles", (30, 64, 56, 56), 128, 1, params=k1s, **c)
                check_conv(dev, rng, "k1s 32x256x56x56 256->64", (32, 256, 56, 56), 64, 1, params=k1s, **c)
                check_conv(dev, rng, "k1s s2 32x256x56x56 256->512", (32, 256, 56, 56), 512, 1, stride=2,
                           params=k1s, **c)
                for bn in (64, 128):
                    for bk in (8, 16):
                        k1sv = {**k1s, "K1S_BN": bn, "K1S_BK": bk}
                        check_conv(dev, rng, f"k1s bn{bn} bk{bk} 136->72", (2, 136, 19, 24), 72, 1, params=k1sv, **c)
                        check_conv(dev, rng, f"k1s bn{bn} bk{bk} s2 pad1 37->136", (2, 37, 19, 23), 136, 1, stride=2,
                                   padding=1, params=k1sv, relu=True, **c)
                check_conv(dev, rng, "k1s misaligned", (2, 16, 10, 12), 16, 1, offset=4, params=k1s, **c)
                check_conv(dev, rng, "k1s s2 misaligned", (2, 16, 10, 11), 16, 1, stride=2, padding=1, offset=4,
                           params=k1s, **c)
                check_conv(dev, rng, "k1s misaligned weights", (2, 16, 10, 12), 24, 1, w_offset=4, params=k1s, **c)
            check_conv(dev, rng, "grouped g4 one thread per output", (2, 16, 9, 11), 12, 3, stride=2, padding=1,
                       groups=4, params={"GRP_TILED": 0}, **c)
            check_conv(dev, rng, "generic dil s2", (2, 6, 15, 14), 5, 3, stride=(2, 1), padding="same",
                       dilation=(1, 2), **c)
            check_conv(dev, rng, "misaligned", (2, 16, 10, 11), 16, 3, padding=1, offset=4, **c)
            check_conv(dev, rng, "dw misaligned", (2, 16, 10, 11), 16, 3, padding=1, groups=16, offset=4, **c)
            # NHWC float16 depthwise with 4 channels per thread (DW_HALF4): C 24 (3 threads per pixel),
            # channel chunks (small budget), nobias, and the 8-channel path
            check_conv(dev, rng, "dw C24 odd", (3, 24, 13, 17), 24, 3, padding=1, groups=24, **c)
            check_conv(dev, rng, "dw chunks", (2, 72, 11, 9), 72, 3, padding=1, groups=72, bias=False,
                       params={"DW_SMEM_KB": 8, "DW_TILE_W": 4, "DW_TILE_H": 2}, **c)
            check_conv(dev, rng, "dw half8", (2, 40, 13, 15), 40, 3, padding=1, groups=40,
                       params={"DW_HALF4": 0}, **c)
            # the register kernels (session 5): NCHW row strips (width a multiple of 16 bytes), NHWC walks
            for reg in ({"DW_ROWS": 2}, {"DW_ROWS": 4}, {"DW_COLS": 2}, {"DW_COLS": 4}, {"DW_COLS": 8},
                        *({"DW_COLS": m, "DW_CROWS": r} for m in (2, 4) for r in (4, 8)),
                        {"DW_ROWS": 2, "DW_SHFL": 1}, {"DW_ROWS": 4, "DW_SHFL": 1}):
                check_conv(dev, rng, f"dw regs {reg}", (2, 24, 19, 32), 24, 3, padding=1, groups=24, params=reg, **c)
                check_conv(dev, rng, f"dw regs {reg} asym", (3, 20, 13, 16), 20, 3, padding=(1, 0, 0, 1),
                           groups=20, bias=False, params=reg, **c)
                check_conv(dev, rng, f"dw regs {reg} misaligned", (2, 16, 10, 16), 16, 3, padding=1, groups=16,
                           offset=4, params=reg, **c)
            # the row strips with halos by shuffles (DW_SHFL, padding 1): a warp that is a whole plane
            # (32 x 32 float16 with 4 rows), rows crossing warps and planes, rows of 32 lanes or more
            if layout == "NCHW":
                for rows in (2, 4):
                    for shape in ((2, 8, 32, 32), (1, 6, 30, 40), (1, 3, 9, 264)):
                        check_conv(dev, rng, f"dw shfl rows{rows} {shape}", shape, shape[1], 3, padding=1,
                                   groups=shape[1], params={"DW_ROWS": rows, "DW_SHFL": 1, "CONV_THREADS": 128},
                                   **c)
                    # the persistent grid: 132 x 5 blocks, several items a thread at these sizes
                    for shape in ((16, 128, 32, 32), (4, 96, 30, 40), (2, 64, 9, 264)):
                        check_conv(dev, rng, f"dw shfl persist rows{rows} {shape}", shape, shape[1], 3, padding=1,
                                   groups=shape[1], params={"DW_ROWS": rows, "DW_SHFL": 2, "CONV_THREADS": 128},
                                   **c)
            # the pipelined depthwise kernel (DW_PIPE, NHWC, C a multiple of 16 bytes): shapes no multiple of
            # a tile, padding 0, 1, 2 and asymmetric, partial 128-byte channel slices (C24, C40, C72, C136),
            # no bias, and a shape with several tiles per persistent block ("many tiles")
            if layout == "NHWC":
                for rows, cols in ((4, 1), (8, 1), (16, 1), (4, 2), (8, 2), (16, 2)):  # DW_PIPE_COLS 2: 2 columns
                    pipe = {"DW_PIPE": rows, "DW_PIPE_COLS": cols}
                    tag = f"{rows}x{cols}" if cols > 1 else f"{rows}"
                    check_conv(dev, rng, f"dw pipe{tag} C24 pad0", (3, 24, 13, 17), 24, 3, padding=0, groups=24,
                               params=pipe, **c)
                    check_conv(dev, rng, f"dw pipe{tag} C72 pad1", (3, 72, 17, 33), 72, 3, padding=1, groups=72,
                               params=pipe, **c)
                    check_conv(dev, rng, f"dw pipe{tag} C40 pad2 nobias", (2, 40, 13, 13), 40, 3, padding=2,
                               groups=40, bias=False, params=pipe, **c)
                    check_conv(dev, rng, f"dw pipe{tag} C136 asym", (2, 136, 9, 35), 136, 3, padding=(2, 0, 0, 1),
                               groups=136, params=pipe, **c)
                    check_conv(dev, rng, f"dw pipe{tag} many tiles", (16, 64, 64, 70), 64, 3, padding=1, groups=64,
                               params=pipe, **c)
            # NCHW float16 depthwise 3x3/1 output pairs from half2 words (DW_H2): even widths, odd output
            # widths, both word parities (offsets, pads), asymmetric pads, bands, and the float path
            es = np.dtype(dtype).itemsize
            check_conv(dev, rng, "dw h2", (3, 7, 13, 22), 7, 3, padding=1, groups=7, **c)
            check_conv(dev, rng, "dw h2 off", (2, 5, 9, 18), 5, 3, padding=1, groups=5, offset=es, **c)
            check_conv(dev, rng, "dw h2 valid", (2, 6, 11, 20), 6, 3, padding=0, groups=6, bias=False, **c)
            check_conv(dev, rng, "dw h2 asym", (2, 6, 11, 20), 6, 3, padding=(0, 2, 1, 0), groups=6, offset=3 * es,
                       **c)
            check_conv(dev, rng, "dw h2 bands", (1, 3, 70, 96), 3, 3, padding=1, groups=3,
                       params={"DW_SMEM_KB": 8, "DW_TILE_H": 4}, offset=es, **c)
            check_conv(dev, rng, "dw h2 old path", (2, 7, 13, 22), 7, 3, padding=1, groups=7, params={"DW_H2": 0}, **c)
            # float16 NCHW depthwise 3x3/1 on tensor cores (DW_TC; the other dtype and layout fall back):
            # a warp per 16 x 32 tile, widths multiples of 8 but not of 32, heights not of 16, padding
            # 0 / 1 / asymmetric, odd output widths (scalar stores), many tiles, misaligned (falls back)
            for tc in ({"DW_TC": 1}, {"DW_TC": 2}):  # a warp a tile; persistent warps
                t = f"dw-tc{tc['DW_TC']}"
                check_conv(dev, rng, t, (2, 5, 21, 40), 5, 3, padding=1, groups=5, params=tc, **c)
                check_conv(dev, rng, f"{t} pad0 nobias", (1, 3, 17, 72), 3, 3, padding=0, groups=3, bias=False,
                           params=tc, **c)
                check_conv(dev, rng, f"{t} asym", (2, 4, 33, 8), 4, 3, padding=(2, 0, 1, 0), groups=4, params=tc,
                           **c)
                check_conv(dev, rng, f"{t} odd out width", (1, 2, 9, 64), 2, 3, padding=(1, 1, 1, 0), groups=2,
                           params=tc, **c)
                check_conv(dev, rng, f"{t} many tiles", (16, 64, 64, 112), 64, 3, padding=1, groups=64, params=tc,
                           **c)
                check_conv(dev, rng, f"{t} misaligned", (2, 16, 10, 16), 16, 3, padding=1, groups=16, offset=es,
                           params=tc, **c)
            if not quick:
                check_conv(dev, rng, "3x3 32->64 big", (4, 32, 28, 45), 64, 3, padding=1, **c)


# ----------------------------------------------------------------------------------
# batch norm
# ----------------------------------------------------------------------------------


def check_bn(
    dev: Dev, rng: np.random.Generator, name: str, shape: tuple[int, int, int, int], dtype: Any, layout: str,
    training: bool, affine: bool = True, running: bool = True, mean: float = 0.0, std: float = 1.0,
    params: dict | None = None, offset: int = 0, nan_frac: float = 0.0, kernel: str | None = None,
) -> None:
    """One batch_norm launch against the oracle, running statistics included (NaN inputs: inference only).
    ``kernel``: the case fails unless the call launched that kernel (and a cooperative launch the
    driver refuses is an error here, not the op's warning and fallback)."""
    full = f"batch_norm[{name} {'train' if training else 'infer'} {np.dtype(dtype).name} {layout}]"
    if CONV_MATCH and not any(m in name for m in CONV_MATCH.split("|")):
        return
    try:
        c = shape[1]
        sp = S.batch_norm_spec(geometry(shape, layout, dtype), training, 0.1, 1e-5, running)
        chan_mean = mean + rng.standard_normal(c)
        x = (chan_mean[None, :, None, None] + std * rng.standard_normal(shape)).astype(dtype)
        if nan_frac:
            x[rng.random(shape) < nan_frac] = np.nan
        wt = rng.uniform(0.5, 1.5, c).astype(np.float32) if affine else None
        bs = rng.standard_normal(c).astype(np.float32) if affine else None
        rm = rng.standard_normal(c).astype(np.float32) if running else None
        rv = rng.uniform(0.5, 2.0, c).astype(np.float32) if running else None
        rm64 = None if rm is None else rm.astype(np.float64)
        rv64 = None if rv is None else rv.astype(np.float64)
        want = ref.batch_norm_from_spec(sp, x.astype(np.float64), rm64, rv64, wt, bs)
        xb = dev.put(phys(x, layout), offset)
        yb = dev.poison(phys_shape(shape, layout), dtype, offset)
        bufs = [None if a is None else dev.put(a) for a in (wt, bs, rm, rv)]
        launched: list[str] = []
        run = dev.be._run

        def recording(plan: Any, buffers: Any) -> None:
            launched.extend(launch.kernel for launch in plan)
            run(plan, buffers)

        dev.be._run = recording  # an instance attribute over the method, removed again below
        try:
            with warnings.catch_warnings():
                if kernel:
                    warnings.simplefilter("error", RuntimeWarning)
                dev.be.batch_norm(sp, xb, yb, bufs[0], bufs[1], bufs[2], bufs[3], params or {})
        finally:
            del dev.be._run
        if kernel and kernel not in launched:
            record(full, False, f"{kernel} not launched (launched: {launched})")
            return
        got = logical(dev.get(yb, phys_shape(shape, layout), dtype), layout)
        # input representation bound: x is known to eps * |x|, scaled by |scale|
        xs = np.abs(np.nan_to_num(x.astype(np.float64)))
        var = x.astype(np.float64).var(axis=(0, 2, 3)) if training else rv.astype(np.float64)
        sc = (1.0 if wt is None else np.abs(wt.astype(np.float64))) / np.sqrt(var + 1e-5)
        epsd = 6e-8 if np.dtype(dtype) == np.float32 else 1e-3
        tol_abs = 4 * epsd * xs.max(axis=(0, 2, 3)) * sc + (1e-5 if np.dtype(dtype) == np.float32 else 2e-3)
        err = np.abs(got.astype(np.float64) - want)
        bound = tol_abs[None, :, None, None] * np.maximum(1.0, np.abs(want))
        nan_w = np.isnan(want)  # NaN inputs: NaN exactly there
        ok = bool((np.isnan(got) == nan_w).all() and (np.isfinite(got) | nan_w).all()
                  and (err[~nan_w] <= bound[~nan_w]).all())
        detail = "" if ok else (
            f"max err {np.nanmax(err):.3g} (bound {bound.min():.3g}..{bound.max():.3g}), nan {np.isnan(got).sum()}"
        )
        if ok and training and running:
            grm = dev.get(bufs[2], (c,), np.float32)
            grv = dev.get(bufs[3], (c,), np.float32)
            # relative to the update's terms (0.9 * old + 0.1 * batch mean), not to the result:
            # where they cancel, float32 storage of a ~1e-3 result is off by the terms' ulp
            batch_mean = np.abs(np.nan_to_num(x.astype(np.float64)).mean(axis=(0, 2, 3)))
            terms = 0.9 * np.abs(rm.astype(np.float64)) + 0.1 * batch_mean
            e1 = np.abs(grm - rm64) / np.maximum(np.maximum(np.abs(rm64), terms), 1e-3 * max(1.0, abs(mean)))
            e2 = np.abs(grv - rv64) / np.abs(rv64)
            if e1.max() > 2e-5 or e2.max() > 2e-4:
                ok, detail = False, f"running stats off: mean rel {e1.max():.3g}, var rel {e2.max():.3g}"
        record(full, ok, detail)
    except Exception as exc:
        record(full, False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")


def bn_suite(dev: Dev, rng: np.random.Generator, quick: bool) -> None:
    """batch_norm cases (vector and scalar paths, several slabs, large means)."""
    for dtype in (np.float32, np.float16):
        for layout in ("NCHW", "NHWC"):
            c = dict(dtype=dtype, layout=layout)
            for training in (True, False):
                check_bn(dev, rng, "16x64x32x32", (16, 64, 32, 32), training=training, **c)
                check_bn(dev, rng, "odd 3x5x7x9", (3, 5, 7, 9), training=training, **c)
                check_bn(dev, rng, "C130", (4, 130, 6, 5), training=training, **c)
                check_bn(dev, rng, "no affine", (4, 24, 8, 8), training=training, affine=False, **c)
                check_bn(dev, rng, "misaligned", (4, 24, 8, 8), training=training, offset=2 * np.dtype(dtype).itemsize,
                         **c)
                check_bn(dev, rng, "params", (8, 40, 12, 12), training=training,
                         params={"BN_THREADS": 128, "BN_UNROLL": 2, "BN_BLOCKS_PER_SM": 1, "BN_L2_HINT": 0}, **c)
                check_bn(dev, rng, "params 512", (8, 40, 12, 12), training=training,
                         params={"BN_THREADS": 512, "BN_UNROLL": 8, "BN_BLOCKS_PER_SM": 8}, **c)
            # flat inference: NHWC with C / vector width dividing the block takes
            # batch_norm_infer_flat_reg (C64, C8, C2048 float16, HW = 1), the rest
            # batch_norm_infer_flat; vector counts no multiple of the tile, NaN inputs
            for name, shape in (("reg C64 odd", (3, 64, 5, 7)), ("reg C8", (5, 8, 3, 3)), ("C2048", (3, 2048, 1, 3)),
                                ("reg HW1", (7, 32, 1, 1)), ("flat C24", (3, 24, 5, 3)), ("C16 HW1", (9, 16, 1, 1))):
                check_bn(dev, rng, name, shape, training=False, **c)
                check_bn(dev, rng, name + " nan", shape, training=False, nan_frac=0.02, **c)
            for params in ({"BN_FLAT_REG": 0}, {"BN_UNROLL": 8}, {"BN_UNROLL": 2}, {"BN_INFER_OCC": 2048},
                           {"BN_THREADS": 128, "BN_UNROLL": 2, "BN_L2_HINT": 0},
                           {"BN_THREADS": 512, "BN_UNROLL": 8}, {"BN_INFER_TILES": 1},
                           {"BN_INFER_TILES": 1, "BN_THREADS": 128, "BN_UNROLL": 2}, {"BN_INFER_EARLY": 1},
                           {"BN_INFER_EARLY": 1, "BN_INFER_TILES": 1, "BN_THREADS": 128, "BN_UNROLL": 2}):
                check_bn(dev, rng, f"reg params {params}", (3, 64, 5, 7), training=False, params=params, **c)
                if "BN_INFER_TILES" in params or "BN_INFER_EARLY" in params:  # the shared-memory table kernel too
                    check_bn(dev, rng, f"flat params {params}", (3, 24, 4, 10), training=False, params=params, **c)
            # BN_INFER_EARLY with persistent blocks that walk several tiles (the next tile's loads at the
            # end of each one), both kernels (NHWC C64: registers; FLAT_REG 0: the shared table), NaN inputs
            for params in ({"BN_INFER_EARLY": 1, "BN_THREADS": 128, "BN_UNROLL": 2},
                           {"BN_INFER_EARLY": 1, "BN_THREADS": 128, "BN_UNROLL": 2, "BN_FLAT_REG": 0},
                           {"BN_INFER_EARLY": 1, "BN_UNROLL": 8, "BN_BLOCKS_PER_SM": 2}):
                check_bn(dev, rng, f"early tiles {params}", (64, 64, 32, 36), training=False, nan_frac=0.001,
                         params=params, **c)
            check_bn(dev, rng, "misaligned nan", (3, 64, 5, 7), training=False, nan_frac=0.02,
                     offset=2 * np.dtype(dtype).itemsize, **c)
            if layout == "NCHW":  # training without the finalize launch: 1, 2-32 and > 32 slabs
                for name, shape, params in (
                        ("merged", (16, 64, 32, 32), {"BN_APPLY_MERGE": 1}),
                        ("merged odd", (3, 5, 7, 9), {"BN_APPLY_MERGE": 1, "BN_BLOCKS_PER_SM": 2}),
                        ("merged 200 slabs", (64, 3, 40, 40), {"BN_APPLY_MERGE": 1, "BN_THREADS": 128,
                                                               "BN_UNROLL": 2, "BN_BLOCKS_PER_SM": 32}),
                        ("merged misaligned", (4, 24, 8, 8), {"BN_APPLY_MERGE": 1, "BN_L2_HINT": 0})):
                    check_bn(dev, rng, name, shape, training=True, params=params,
                             offset=2 * np.dtype(dtype).itemsize if "misaligned" in name else 0, **c)
                check_bn(dev, rng, "merged no running", (4, 24, 8, 8), training=True, running=False,
                         params={"BN_APPLY_MERGE": 1}, **c)
            if layout == "NHWC":  # training in one cooperative launch (batch_norm_train_fused)
                fz = {"BN_FUSED": 1}
                fk = "batch_norm_train_fused"
                for name, shape, params in (
                        ("fused", (16, 64, 32, 32), fz),
                        ("fused C24 odd pixels", (3, 24, 7, 9), fz),
                        ("fused C40", (8, 40, 13, 11), fz),
                        ("fused C2048 1x1", (64, 2048, 1, 1), fz),
                        ("fused C2048 7x7", (16, 2048, 7, 7), fz),
                        ("fused 1 image (blocks without pixels)", (1, 8, 5, 7), fz),
                        ("fused regs 0", (16, 64, 32, 32), {**fz, "BN_FUSED_REGS": 0}),
                        ("fused regs 12", (16, 64, 17, 31), {**fz, "BN_FUSED_REGS": 12}),
                        ("fused regs 4 threads 256", (16, 64, 17, 31), {**fz, "BN_FUSED_REGS": 4,
                                                                        "BN_FUSED_THREADS": 256}),
                        ("fused threads 1024", (16, 40, 17, 31), {**fz, "BN_FUSED_REGS": 4, "BN_FUSED_THREADS": 1024}),
                        # the sm_90 entries' sets (float32 512 / 12, float16 256 / 12) at the benchmark's size
                        ("fused 512 regs 12 256x64x32x32", (256, 64, 32, 32), {**fz, "BN_FUSED_REGS": 12}),
                        ("fused 256 regs 12 256x64x32x32", (256, 64, 32, 32), {**fz, "BN_FUSED_REGS": 12,
                                                                               "BN_FUSED_THREADS": 256}),
                        # every block merging every channel (BN_FUSED_FIN 1: one grid barrier); C2048 is past the
                        # planner's 128 KiB of partials and keeps two barriers
                        ("fused fin1", (16, 64, 32, 32), {**fz, "BN_FUSED_FIN": 1}),
                        ("fused fin1 C40", (8, 40, 13, 11), {**fz, "BN_FUSED_FIN": 1}),
                        ("fused fin1 1 image", (1, 8, 5, 7), {**fz, "BN_FUSED_FIN": 1}),
                        ("fused fin1 C2048 (two barriers)", (16, 2048, 7, 7), {**fz, "BN_FUSED_FIN": 1}),
                        ("fused fin1 512 regs 12 256x64x32x32", (256, 64, 32, 32),
                         {**fz, "BN_FUSED_FIN": 1, "BN_FUSED_REGS": 12}),
                        ("fused fin1 256 regs 12 256x64x32x32", (256, 64, 32, 32),
                         {**fz, "BN_FUSED_FIN": 1, "BN_FUSED_REGS": 12, "BN_FUSED_THREADS": 256}),
                        # the benchmark's size: float32 re-reads a third of x (on-chip: registers and shared memory)
                        ("fused 256x64x32x32", (256, 64, 32, 32), fz)):
                    check_bn(dev, rng, name, shape, training=True, params=params, kernel=fk, **c)
                check_bn(dev, rng, "fused no running", (4, 24, 8, 8), training=True, running=False, params=fz,
                         kernel=fk, **c)
                check_bn(dev, rng, "fused fin1 no running", (4, 24, 8, 8), training=True, running=False,
                         params={**fz, "BN_FUSED_FIN": 1}, kernel=fk, **c)
                check_bn(dev, rng, "fused no affine", (4, 24, 8, 8), training=True, affine=False, params=fz,
                         kernel=fk, **c)
                check_bn(dev, rng, "fused C5 (two-pass)", (3, 5, 7, 9), training=True, params=fz,
                         kernel="batch_norm_stats", **c)
                check_bn(dev, rng, "fused misaligned (two-pass)", (4, 24, 8, 8), training=True, params=fz,
                         offset=2 * np.dtype(dtype).itemsize, kernel="batch_norm_stats", **c)
                if dtype == np.float32:
                    check_bn(dev, rng, "fused mean 1e4 std 1", (8, 16, 20, 20), training=True, mean=1e4, std=1.0,
                             params=fz, kernel=fk, **c)
            check_bn(dev, rng, "no running", (4, 24, 8, 8), training=True, running=False, **c)
            check_bn(dev, rng, "1 image", (1, 8, 5, 7), training=True, **c)
            check_bn(dev, rng, "C2048 1x1", (64, 2048, 1, 1), training=True, **c)
            if dtype == np.float32:
                check_bn(dev, rng, "mean 1e4 std 1", (8, 16, 20, 20), training=True, mean=1e4, std=1.0, **c)


# ----------------------------------------------------------------------------------
# runtime
# ----------------------------------------------------------------------------------


def runtime_suite(dev: Dev, rng: np.random.Generator) -> None:
    """Out-of-memory, compile errors, threads, generic kernels, PyTorch interop."""
    be = dev.be
    try:
        be.allocate(1 << 50)
        record("runtime[oom raises]", False, "no error for 1 PiB")
    except OutOfMemory as exc:
        record("runtime[oom raises]", "1125899906842624" in str(exc), str(exc))
    except Exception as exc:
        record("runtime[oom raises]", False, f"{type(exc).__name__}: {exc}")
    try:
        buf = be.upload(np.arange(10, dtype=np.float32))
        out = np.empty(10, np.float32)
        be.download(buf, out)
        record("runtime[usable after oom]", bool((out == np.arange(10)).all()))
    except Exception as exc:
        record("runtime[usable after oom]", False, f"{type(exc).__name__}: {exc}")
    try:
        be._module("pool2d.cu", (("DTYPE_HALF", 0), ("HAL_COMPILE_ERROR_TEST", 1), ("LAYOUT_NHWC", 0)))
        record("runtime[compile error]", False, "no error")
    except KernelCompileError as exc:
        record("runtime[compile error]", "HAL_COMPILE_ERROR_TEST" in exc.log and exc.file == "pool2d.cu",
               str(exc)[:300])
    except Exception as exc:
        record("runtime[compile error]", False, f"{type(exc).__name__}: {exc}")

    # another thread, no context of its own
    errors: list[str] = []

    def worker() -> None:
        try:
            check_pool(dev, np.random.default_rng(7), "thread", (2, 8, 11, 12), np.float32, "NCHW", "max", 3, 2, 1,
                       indices=True)
        except Exception as exc:  # pragma: no cover
            errors.append(str(exc))

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    record("runtime[other thread]", not errors, "; ".join(errors))

    # the contract's one-thread-per-output kernels on their own
    for dtype in (np.int8, np.uint8):
        for layout in ("NCHW", "NHWC"):
            check_qpool(dev, rng, "one", (2, 5, 9, 10), dtype, layout, "max", 3, 2, 1, indices=True)
            zp = -3 if dtype == np.int8 else 130
            check_qpool(dev, rng, "one", (2, 5, 9, 10), dtype, layout, "avg", 3, 2, 1, zero_point=zp)
    be.force_generic = True
    try:
        for dtype in (np.float32, np.float16):
            for layout in ("NCHW", "NHWC"):
                c = dict(dtype=dtype, layout=layout)
                check_pool(dev, rng, "generic", (2, 9, 13, 11), kind="max", kernel=3, stride=2, padding=1,
                           indices=True, **c)
                check_pool(dev, rng, "generic", (2, 9, 13, 11), kind="avg", kernel=(2, 3), stride=(1, 2),
                           padding=(1, 0, 1, 1), dilation=(2, 1), count_include_pad=False, **c)
                check_conv(dev, rng, "generic 3x3", (2, 9, 13, 11), 10, 3, padding=1, **c)
                check_conv(dev, rng, "generic dw", (2, 9, 13, 11), 9, 3, padding=1, groups=9, **c)
                qdt = np.int8 if dtype == np.float32 else np.uint8
                check_qpool(dev, rng, "generic", (2, 16, 9, 12), qdt, layout, "max", 3, 2, 1)
                check_qpool(dev, rng, "generic", (2, 16, 9, 12), qdt, layout, "avg", 3, 2, 1, zero_point=5)
                for kind in ("avg", "max"):
                    full = f"adaptive[generic {kind} {np.dtype(dtype).name} {layout}]"
                    sp = S.adaptive_pool2d_spec(kind, geometry((2, 5, 11, 13), layout, dtype), (4, 5), kind == "max")
                    x = rand(rng, (2, 5, 11, 13), dtype)
                    want, _ = ref.pool2d_from_spec(sp, x.astype(np.float64))
                    yb = dev.poison(phys_shape(sp.out_shape, layout), dtype)
                    ib = dev.poison(phys_shape(sp.out_shape, layout), np.int64) if kind == "max" else None
                    be.adaptive_pool2d(sp, dev.put(phys(x, layout)), yb, ib, {})
                    got = logical(dev.get(yb, phys_shape(sp.out_shape, layout), dtype), layout)
                    record(full, *compare(got, want, dtype, exact=kind == "max"))
    finally:
        be.force_generic = False

    # eltwise ReLU, in place and not, aligned and not
    for dtype in (np.float32, np.float16):
        for count, offset, inplace in ((1000003, 0, False), (77, 2 * np.dtype(dtype).itemsize, True)):
            name = f"eltwise[relu {np.dtype(dtype).name} n={count} off={offset} inplace={inplace}]"
            try:
                x = rand(rng, (count,), dtype)
                x[::97] = np.nan
                xb = dev.put(x, offset)
                yb = xb if inplace else dev.poison((count,), dtype)
                be.eltwise(S.EltwiseSpec("relu", count, np.dtype(dtype)), xb, yb, {})
                got = dev.get(yb, (count,), dtype)
                record(name, *compare(got, ref.relu(x), dtype, exact=True))
            except Exception as exc:
                record(name, False, f"{type(exc).__name__}: {exc}")

    # contract entry point batch_norm_apply (y = x * scale + shift), launched by hand
    try:
        from hal.backends.cuda import Launch

        for layout in ("NCHW", "NHWC"):
            x = rand(rng, (2, 5, 3, 7), np.float32)
            sc = rng.standard_normal(5).astype(np.float32)
            sh = rng.standard_normal(5).astype(np.float32)
            want = x * sc[None, :, None, None] + sh[None, :, None, None]
            yb = dev.poison(phys_shape(x.shape, layout), np.float32)
            defines = be.compile_defines("batch_norm", np.dtype(np.float32), layout, {})
            launch = Launch("batch_norm.cu", defines, "batch_norm_apply", "PPPPiii", (4, 1, 1), (256, 1, 1), 0,
                            ("x", "y", "s", "t", 2, 5, 21))
            be._run((launch,), {"x": dev.put(phys(x, layout)), "y": yb, "s": dev.put(sc), "t": dev.put(sh)})
            got = logical(dev.get(yb, phys_shape(x.shape, layout), np.float32), layout)
            record(f"batch_norm_apply[contract {layout}]", *compare(got, want.astype(np.float64), np.float32))
    except Exception as exc:
        record("batch_norm_apply[contract]", False, f"{type(exc).__name__}: {exc}")

    # PyTorch in the same process: its tensors wrapped without copies, its default stream
    try:
        import torch
        import torch.nn.functional as F

        if torch.cuda.is_available():
            xt = torch.randn(4, 32, 40, 40, device="cuda")
            for layout in ("NCHW", "NHWC"):
                xin = xt.contiguous(memory_format=torch.channels_last) if layout == "NHWC" else xt
                yt = torch.full((4, 32, 20, 20), float("nan"), device="cuda")
                if layout == "NHWC":
                    yt = yt.contiguous(memory_format=torch.channels_last)
                sp = S.pool2d_spec("max", geometry((4, 32, 40, 40), layout, np.float32), 3, 2, 1, 1, False, True,
                                   None, False)
                xin2 = xin * 2.0  # queued on PyTorch's stream right before hal's kernel
                xw = be.wrap(xin2.data_ptr(), xin2.numel() * 4, xin2)
                be.pool2d(sp, xw, be.wrap(yt.data_ptr(), yt.numel() * 4, yt), None, {})
                want_t = F.max_pool2d(xin2, 3, 2, 1)  # queued after: must see hal's result ordered too
                be.synchronize()
                torch.cuda.synchronize()
                ok = torch.equal(yt, want_t)
                record(f"runtime[torch interop {layout}]", bool(ok), "" if ok else "differs from F.max_pool2d")
        else:
            record("runtime[torch interop]", False, "torch sees no GPU")
    except ImportError:
        record("runtime[torch interop]", True, "torch not installed: skipped")
    except Exception as exc:
        record("runtime[torch interop]", False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}")


def one_suite(dev: Dev, rng: np.random.Generator) -> None:
    """One small launch of every kernel entry point (for compute-sanitizer)."""
    be = dev.be
    for dtype in (np.float32, np.float16):
        for layout in ("NCHW", "NHWC"):
            c = dict(dtype=dtype, layout=layout)
            check_pool(dev, rng, "one k3s2", (2, 16, 15, 14), kind="max", kernel=3, stride=2, padding=1,
                       indices=True, **c)
            check_pool(dev, rng, "one k3s2", (2, 16, 15, 14), kind="max", kernel=3, stride=2, padding=1, **c)
            check_pool(dev, rng, "one k3s2", (2, 16, 15, 14), kind="avg", kernel=3, stride=2, padding=1, **c)
            check_pool(dev, rng, "one k2s2", (1, 8, 16, 18), kind="max", kernel=2, stride=2, padding=0,
                       indices=True, **c)
            check_pool(dev, rng, "one k2s2", (1, 8, 16, 18), kind="max", kernel=2, stride=2, padding=0, **c)
            check_pool(dev, rng, "one k2s2", (1, 8, 16, 18), kind="avg", kernel=2, stride=2, padding=0, **c)
            check_pool(dev, rng, "one g", (2, 8, 13, 11), kind="max", kernel=(2, 3), stride=(1, 2), padding=1,
                       indices=True, **c)
            check_pool(dev, rng, "one g", (2, 8, 13, 11), kind="avg", kernel=(2, 3), stride=(1, 2), padding=1, **c)
            check_pool(dev, rng, "one bands", (1, 2, 66, 70), kind="max", kernel=3, stride=2, padding=1,
                       params={"POOL_SMEM_KB": 8, "POOL_TILE_H": 2}, **c)
            check_pool(dev, rng, "one misaligned", (1, 8, 9, 10), kind="max", kernel=3, stride=2, padding=1,
                       offset=2 * np.dtype(dtype).itemsize, **c)
            check_pool(dev, rng, "one h2avg", (1, 8, 9, 10), kind="avg", kernel=3, stride=2, padding=1,
                       offset=np.dtype(dtype).itemsize, nan_frac=0.05, **c)
            check_pool(dev, rng, "one h2avg k2", (1, 8, 9, 14), kind="avg", kernel=2, stride=2, padding=0,
                       ceil_mode=True, **c)
            # the register kernels (session 5): NCHW row strips, NHWC walks (each ignores the other layout)
            for reg in ({"POOL_ROWS": 2}, {"POOL_ROWS": 4}, {"POOL_NCOLS": 2}, {"POOL_NCOLS": 4}):
                check_pool(dev, rng, f"one {reg}", (2, 16, 15, 16), kind="max", kernel=3, stride=2, padding=1,
                           nan_frac=0.05, params=reg, **c)
                check_pool(dev, rng, f"one {reg}", (2, 16, 15, 16), kind="avg", kernel=3, stride=2, padding=1,
                           ceil_mode=True, params=reg, **c)
                check_pool(dev, rng, f"one {reg} k2", (1, 8, 9, 24), kind="max", kernel=2, stride=2, padding=0,
                           ceil_mode=True, params=reg, **c)
                check_pool(dev, rng, f"one {reg} k2", (1, 8, 9, 24), kind="avg", kernel=2, stride=2, padding=1,
                           params=reg, **c)
            for name, shape, out in (("global", (2, 16, 7, 7), (1, 1)), ("large bins", (1, 2, 60, 70), (1, 1)),
                                     ("global gvec", (136, 2048, 2, 3), (1, 1))):
                for kind, with_idx in (("max", True), ("max", False), ("avg", False)):
                    sp = S.adaptive_pool2d_spec(kind, geometry(shape, layout, dtype), out, with_idx)
                    x = rand(rng, shape, dtype)
                    want, _ = ref.pool2d_from_spec(sp, x.astype(np.float64))
                    oshape = phys_shape(sp.out_shape, layout)
                    yb = dev.poison(oshape, dtype)
                    ib = dev.poison(oshape, np.int64) if with_idx else None
                    be.adaptive_pool2d(sp, dev.put(phys(x, layout)), yb, ib, {})
                    got = logical(dev.get(yb, oshape, dtype), layout)
                    record(f"adaptive[one {name} {kind}{' idx' if with_idx else ''} {np.dtype(dtype).name} {layout}]",
                           *compare(got, want, dtype, exact=kind == "max"))
            check_conv(dev, rng, "one 3x3", (1, 16, 9, 35), 70, 3, padding=1, **c)
            check_conv(dev, rng, "one 3x3 simt", (1, 16, 9, 35), 70, 3, padding=1, params={"CONV_TC": 0}, **c)
            check_conv(dev, rng, "one 3x3 tc pipe", (2, 24, 9, 35), 70, 3, padding=1, params={"CONV_TC": 2}, **c)
            check_conv(dev, rng, "one 3x3 tc pipe w16", (2, 20, 9, 16), 70, 3, padding=1, params={"CONV_TC": 2}, **c)
            check_conv(dev, rng, "one 3x3 tc wide", (1, 72, 9, 16), 70, 3, padding=1, params={"CONV_TC": 3}, **c)
            check_conv(dev, rng, "one 3x3 tc wide stages3", (1, 72, 9, 16), 70, 3, padding=1,
                       params={"CONV_TC": 3, "TC_WIDE_STAGES": 3}, **c)
            check_conv(dev, rng, "one 1x1 tc wide stages4", (1, 72, 9, 16), 70, 1,
                       params={"CONV_TC": 3, "TC_WIDE_STAGES": 4}, **c)
            check_conv(dev, rng, "one 1x1 k1g s2 pad1", (2, 40, 17, 19), 70, 1, stride=2, padding=1,
                       params={"CONV_K1_GEMM": 1}, **c)
            check_conv(dev, rng, "one 1x1 k1n", (3, 40, 7, 8), 70, 1, params={"CONV_K1_NCHW": 1}, relu=True, **c)
            check_conv(dev, rng, "one 1x1 k1n sampled s2 pad1", (3, 40, 13, 17), 70, 1, stride=2, padding=1,
                       params={"CONV_K1_NCHW": 1}, **c)
            check_conv(dev, rng, "one 1x1 k1n sampled rows8 s(2,1) asym", (3, 24, 18, 71), 24, 1, stride=(2, 1),
                       padding=(0, 2, 1, 0), params={"CONV_K1_NCHW": 1, "K1N_SAMPLE": 1}, **c)
            # the implicit GEMMs for stems (float16 on tensor cores, float32 on CUDA cores); two C_out chunks,
            # a partial row segment (a warp walks one tile here: the emulator covers warps that walk several)
            check_conv(dev, rng, "one 7x7 s2 im2col", (2, 3, 100, 130), 70, 7, stride=2, padding=3,
                       params={"CONV_IM2COL": 1}, **c)
            # the persistent GEMMs with more tiles than one SM's blocks, for compute-sanitizer's racecheck
            check_conv(dev, rng, "one 1x1 k1g persist", (8, 40, 37, 41), 300, 1,
                       params={"CONV_K1_GEMM": 1, "K1G_PERSIST": 1}, **c)
            check_conv(dev, rng, "one 1x1 k1n persist", (16, 40, 37, 40), 300, 1,
                       params={"CONV_K1_NCHW": 1, "K1N_PERSIST": 1}, relu=True, **c)
            if dtype == np.float32:  # the float32 1x1 SGEMM: float4 loads, then scalar loads and gathers
                check_conv(dev, rng, "one 1x1 k1s", (2, 40, 8, 12), 72, 1, params={"CONV_K1_SIMT": 1}, **c)
                check_conv(dev, rng, "one 1x1 k1s s2 pad1", (2, 37, 17, 19), 70, 1, stride=2, padding=1,
                           params={"CONV_K1_SIMT": 1}, relu=True, **c)
            for pf in (128, 256):  # the input copies' L2 prefetch hint (TC_WIDE_L2PF)
                check_conv(dev, rng, f"one 3x3 tc wide l2pf{pf}", (1, 72, 9, 16), 70, 3, padding=1,
                           params={"CONV_TC": 3, "TC_WIDE_L2PF": pf}, **c)
            check_conv(dev, rng, "one dw k3s1", (2, 16, 10, 11), 16, 3, padding=1, groups=16, **c)
            check_conv(dev, rng, "one dw k3s1 C24", (1, 24, 7, 9), 24, 3, padding=1, groups=24, **c)
            for reg in ({"DW_ROWS": 2}, {"DW_ROWS": 4}, {"DW_COLS": 2}, {"DW_COLS": 4}, {"DW_COLS": 8},
                        *({"DW_COLS": m, "DW_CROWS": r} for m in (2, 4) for r in (4, 8)),
                        {"DW_ROWS": 2, "DW_SHFL": 1}, {"DW_ROWS": 4, "DW_SHFL": 1},
                        {"DW_ROWS": 2, "DW_SHFL": 2}, {"DW_ROWS": 4, "DW_SHFL": 2}):
                check_conv(dev, rng, f"one dw {reg}", (2, 16, 11, 16), 16, 3, padding=1, groups=16, params=reg, **c)
                check_conv(dev, rng, f"one dw {reg} asym", (1, 8, 7, 24), 8, 3, padding=(0, 1, 1, 0), groups=8,
                           bias=False, params=reg, **c)
            if layout == "NHWC":  # the pipelined depthwise kernels (DW_PIPE), each once
                for rows in (4, 8, 16):
                    for cols in (1, 2):
                        check_conv(dev, rng, f"one dw pipe{rows}x{cols}", (2, 24, 11, 17), 24, 3, padding=1,
                                   groups=24, params={"DW_PIPE": rows, "DW_PIPE_COLS": cols}, **c)
            check_conv(dev, rng, "one dw k3s1 h2", (1, 8, 7, 10), 8, 3, padding=1, groups=8,
                       offset=np.dtype(dtype).itemsize, **c)
            check_conv(dev, rng, "one dw g", (2, 16, 10, 11), 16, 3, stride=2, padding=1, groups=16, **c)
            check_conv(dev, rng, "one generic", (2, 6, 10, 11), 4, 3, stride=2, padding=1, groups=2,
                       params={"GRP_TILED": 0}, **c)
            # the register-tiled direct kernels (session 19): 3x3 stride 1 and the general one
            check_conv(dev, rng, "one tiled k3s1", (2, 16, 10, 11), 16, 3, padding=1, groups=2,
                       params={"GRP_CIC": 4}, **c)
            check_conv(dev, rng, "one tiled g", (2, 6, 10, 11), 4, 3, stride=2, padding=1, groups=2, **c)
            check_conv(dev, rng, "one grouped tc", (2, 16, 10, 35), 16, 3, padding=1, groups=2,
                       params={"GRP_TC": 1}, **c)
            check_conv(dev, rng, "one dw-tc1", (2, 5, 21, 40), 5, 3, padding=1, groups=5, params={"DW_TC": 1}, **c)
            check_conv(dev, rng, "one dw-tc2", (2, 5, 21, 40), 5, 3, padding=1, groups=5, params={"DW_TC": 2}, **c)
            for training in (True, False):
                check_bn(dev, rng, "one", (4, 16, 6, 8), training=training, **c)
                # NHWC inference: C16 above takes batch_norm_infer_flat_reg, C24 batch_norm_infer_flat
                check_bn(dev, rng, "one flat", (3, 24, 5, 3), training=training, **c)
                check_bn(dev, rng, "one scalar", (3, 5, 3, 3), training=training, **c)
            for kernel, shape in (("", (4, 16, 6, 8)), (" flat", (3, 24, 5, 8))):  # both flat kernels, NHWC
                check_bn(dev, rng, f"one early{kernel}", shape, training=False, params={"BN_INFER_EARLY": 1}, **c)
            if layout == "NHWC":  # one cooperative launch each: a block a channel, and every block every channel
                for fin in (0, 1):
                    check_bn(dev, rng, f"one fused fin{fin}", (4, 16, 6, 8), training=True,
                             params={"BN_FUSED": 1, "BN_FUSED_FIN": fin}, kernel="batch_norm_train_fused", **c)
            if layout == "NCHW":
                check_bn(dev, rng, "one merged", (4, 16, 6, 8), training=True, params={"BN_APPLY_MERGE": 1}, **c)
    for dtype in (np.int8, np.uint8):
        for layout in ("NCHW", "NHWC"):
            check_qpool(dev, rng, "one", (2, 5, 9, 10), dtype, layout, "max", 3, 2, 1, indices=True)
            zp = -3 if dtype == np.int8 else 130
            check_qpool(dev, rng, "one", (2, 5, 9, 10), dtype, layout, "avg", 3, 2, 1, zero_point=zp)
            # the fast kernels: NCHW rows and rows_b (width 13) k3s2, k2s2, k3s1; NHWC vec16 (C 16)
            # and vec4 (C 4)
            for kernel, stride in ((3, 2), (2, 2), (3, 1)):
                for shape in ((2, 16, 9, 12), (2, 4, 7, 20), (2, 3, 7, 32), (2, 3, 7, 13)):
                    check_qpool(dev, rng, "one fast", shape, dtype, layout, "max", kernel, stride, 1)
                    check_qpool(dev, rng, "one fast", shape, dtype, layout, "avg", kernel, stride, 1, zero_point=zp)
            for out in (np.int32, np.int8, np.uint8):
                check_qconv(dev, rng, "one", (2, 4, 6, 7), 5, 3, layout, dtype, np.int8, out, padding=1)
                check_qconv(dev, rng, "one co4", (2, 4, 6, 7), 8, 3, layout, dtype, np.int8, out, padding=1)
                check_qconv(dev, rng, "one tc", (2, 32, 9, 32), 70, 3, layout, dtype, np.int8, out, padding=1)
    be.force_generic = True
    try:
        for dtype in (np.float32, np.float16):
            for layout in ("NCHW", "NHWC"):
                c = dict(dtype=dtype, layout=layout)
                check_pool(dev, rng, "one generic", (2, 5, 9, 8), kind="max", kernel=3, stride=2, padding=1,
                           indices=True, **c)
                check_pool(dev, rng, "one generic", (2, 5, 9, 8), kind="avg", kernel=3, stride=2, padding=1, **c)
                check_conv(dev, rng, "one generic dw", (2, 5, 9, 8), 5, 3, padding=1, groups=5, **c)
    finally:
        be.force_generic = False


def tiled_suite(dev: Dev, rng: np.random.Generator) -> None:
    """The register-tiled direct conv kernels alone (for a short sanitizer run): both variants,
    both layouts (NHWC with and without 4-channel vectors), several staged chunks, the register
    caps of the sm_90 table (GRP_OCC), a partial output-channel chunk."""
    for dtype in (np.float32, np.float16):
        for layout in ("NCHW", "NHWC"):
            c = dict(dtype=dtype, layout=layout)
            check_conv(dev, rng, "tiled k3s1 g8", (2, 64, 13, 19), 64, 3, padding=1, groups=8, **c)
            check_conv(dev, rng, "tiled k3s1 stages", (2, 24, 10, 11), 24, 3, padding=1, groups=2,
                       params={"GRP_CIC": 8, "GRP_OCC": 1024, "GRP_PIX": 2}, **c)
            check_conv(dev, rng, "tiled k3s1 cig6 scalar", (2, 12, 10, 11), 18, 3, padding=1, groups=2,
                       params={"GRP_OCC": 1024}, **c)
            check_conv(dev, rng, "tiled g s2", (2, 6, 10, 11), 4, 3, stride=2, padding=1, groups=2, **c)
            check_conv(dev, rng, "tiled g 7x7 s2", (1, 3, 23, 29), 16, 7, stride=2, padding=3,
                       params={"CONV_THREADS": 128}, **c)
            if dtype == np.float16:  # the grouped tensor-core kernels (GRP_TC)
                check_conv(dev, rng, "grouped tc8", (2, 64, 13, 37), 64, 3, padding=1, groups=8,
                           params={"GRP_TC": 1, "GRP_TC_ROWS": 8}, **c)
                check_conv(dev, rng, "grouped tc16 odd", (1, 30, 9, 35), 30, 3, padding=(0, 2, 1, 0), groups=2,
                           params={"GRP_TC": 1}, **c)


def main(argv: list[str] | None = None) -> int:
    """Run every check; print failures and a summary."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer and smaller cases")
    ap.add_argument("--out", default="", help="folder for check_cuda.json")
    ap.add_argument("--only", default="",
                    help="suites: pool,adaptive,conv,bn,runtime,quant,one (one launch per kernel), "
                         "tiled (the tiled direct conv alone)")
    ap.add_argument("--match", default="",
                    help="conv, adaptive and batch_norm cases: only those whose name contains this (alternatives "
                         "split by |)")
    ap.add_argument("--prebuild", default="",
                    help="JSON list of conv2d parameter sets to build in parallel up front, plain and with fused ReLU "
                         "(the checks otherwise build each new set when they first launch it, one at a time)")
    ap.add_argument("--progress", action="store_true", help="print every case as it ends, not only failures")
    args = ap.parse_args(argv)
    global CONV_MATCH, PROGRESS
    CONV_MATCH, PROGRESS = args.match, args.progress
    probe = CudaBackend.probe()
    print(probe.reason, flush=True)
    if not probe.available:
        return 2
    be = CudaBackend(probe.devices[0])
    dev = Dev(be)
    t0 = time.time()
    keys = []
    for family, variants in CHECK_BUILDS.items():
        for dtype in (np.float32, np.float16):
            for layout in ("NCHW", "NHWC"):
                for params in variants:
                    keys.append((CudaBackend.family_file(family),
                                 CudaBackend.compile_defines(family, np.dtype(dtype), layout, params)))
                if family == "conv2d":
                    for params in json.loads(args.prebuild or "[]"):
                        for relu in (False, True):
                            keys.append((CudaBackend.family_file(family),
                                         CudaBackend.compile_defines(family, np.dtype(dtype), layout, params, relu)))
    print(f"built {be.build_all(keys)} modules in {time.time() - t0:.1f} s", flush=True)
    rng = np.random.default_rng(int(time.time()))
    suites: dict[str, Callable[[], None]] = {
        "pool": lambda: pool_suite(dev, rng, args.quick),
        "adaptive": lambda: adaptive_suite(dev, rng, args.quick),
        "conv": lambda: conv_suite(dev, rng, args.quick),
        "bn": lambda: bn_suite(dev, rng, args.quick),
        "runtime": lambda: runtime_suite(dev, rng),
        "quant": lambda: quant_suite(dev, rng, args.quick),
        "one": lambda: one_suite(dev, rng),
        "tiled": lambda: tiled_suite(dev, rng),
    }
    wanted = [s for s in args.only.split(",") if s] or [s for s in suites if s != "one"]
    for name in wanted:
        t0 = time.time()
        before = len(RESULTS)
        suites[name]()
        done = RESULTS[before:]
        print(f"{name}: {sum(r['ok'] for r in done)}/{len(done)} passed in {time.time() - t0:.1f} s", flush=True)
    failed = [r for r in RESULTS if not r["ok"]]
    print(f"check_cuda: {len(RESULTS) - len(failed)}/{len(RESULTS)} passed", flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "check_cuda.json").write_text(json.dumps(RESULTS, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
