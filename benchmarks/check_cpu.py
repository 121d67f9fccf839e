"""Check every CPU kernel against the float64 oracle, on every ISA path this CPU has.

Method: fresh random inputs (normal; NaNs for max pooling) at shapes that are
multiples of nothing, outputs poisoned with NaN (indices with -7) before the
launch, random padding forms / ceil_mode / dilation / groups /
count_include_pad / divisor_override, fused ReLU (a quarter of the cases), both
layouts, both dtypes, and a random
valid parameter set from the backend schema per case (the tuning tables may
serve any). Launchers are called directly (no op layer), once per ISA path:
avx512, avx2 and generic are all tried where the CPU supports them.
Tolerances are ``hal.conformance``'s.

    .venv/bin/python benchmarks/check_cpu.py [--cases 200] [--isa avx2] [--seed 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from dataclasses import replace

import numpy as np

from hal import reference
from hal.backends.cpu import ARCH_OF_ISA, ISAS, CpuBackend, detected_isa
from hal.conformance import compare, compare_indices
from hal.errors import HalValueError
from hal.spec import EltwiseSpec, TensorGeometry, adaptive_pool2d_spec, batch_norm_spec, conv2d_spec, pool2d_spec


def to_layout(x: np.ndarray, layout: str) -> np.ndarray:
    """Logical NCHW -> physical layout (contiguous)."""
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1) if layout == "NHWC" else x)


def from_layout(x: np.ndarray, layout: str) -> np.ndarray:
    """Physical layout -> logical NCHW."""
    return x.transpose(0, 3, 1, 2) if layout == "NHWC" else x


def compare_out(op: str, dtype: np.dtype, got: np.ndarray, ref: np.ndarray, scale: object = 1.0) -> object:
    """hal.conformance.compare; for float16 a result equal (within tolerance) to the
    oracle rounded to float16 also passes: a float16 output in the subnormal range
    cannot come closer than half a subnormal step (2**-25), which atol * scale does
    not cover when the scale is tiny."""
    res = compare(op, dtype, got, ref, scale)
    if not res.ok and dtype == np.float16:
        alt = compare(op, dtype, got, ref.astype(np.float16).astype(np.float64), scale)
        if alt.ok:
            return alt
    return res


def relu(ref: np.ndarray) -> np.ndarray:
    """The oracle's ReLU: v < 0 -> 0, NaN kept."""
    return np.where(ref < 0, 0.0, ref)


def phys(shape: tuple[int, int, int, int], layout: str) -> tuple[int, ...]:
    """Physical shape of a logical NCHW shape."""
    n, c, h, w = shape
    return (n, h, w, c) if layout == "NHWC" else shape


class Checker:
    """Runs random cases on one backend instance and counts failures."""

    def __init__(self, backend: CpuBackend, rng: np.random.Generator) -> None:
        self.be = backend
        self.rng = rng
        self.fails: list[str] = []
        self.count = 0
        schemas = backend.schemas()
        self.candidates = {
            k: [p for p in s.candidates() if s.validate(p, backend.info) is None] for k, s in schemas.items()
        }

    def params(self, kernel: str) -> dict[str, int]:
        """A random valid parameter set."""
        cands = self.candidates[kernel]
        return cands[int(self.rng.integers(len(cands)))]

    def fail(self, what: str) -> None:
        """Record a failure."""
        self.fails.append(what)

    def shape(self, max_hw: int = 40) -> tuple[int, int, int, int]:
        """Random (N, C, H, W)."""
        r = self.rng
        c = int(r.integers(1, 10)) if r.random() < 0.5 else int(r.integers(1, 131))
        return (int(r.integers(1, 4)), c, int(r.integers(1, max_hw + 1)), int(r.integers(1, max_hw + 1)))

    def padding(self) -> object:
        """Any padding form."""
        r = self.rng
        form = int(r.integers(5))
        if form == 0:
            return int(r.integers(0, 4))
        if form == 1:
            return (int(r.integers(0, 4)), int(r.integers(0, 4)))
        if form == 2:
            return tuple(int(v) for v in r.integers(0, 4, 4))
        return ["valid", "same"][form - 3]

    def dtype_layout(self) -> tuple[np.dtype, str]:
        """Random dtype and layout."""
        return (np.dtype([np.float32, np.float16][int(self.rng.integers(2))]),
                ["NCHW", "NHWC"][int(self.rng.integers(2))])

    def output(self, shape: tuple[int, ...], dtype: np.dtype) -> object:
        """A NaN-poisoned output buffer."""
        return self.be.upload(np.full(shape, np.nan, dtype=dtype))

    def read(self, buf: object, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """Download a buffer."""
        out = np.empty(shape, dtype=dtype)
        self.be.download(buf, out)
        return out

    # -- pooling ---------------------------------------------------------------------
    def pool(self, adaptive: bool) -> None:
        """One random (adaptive) pooling case."""
        r = self.rng
        kind = ["max", "avg"][int(r.integers(2))]
        dtype, layout = self.dtype_layout()
        shape = self.shape()
        geom = TensorGeometry(*shape, layout, dtype)
        idx_wanted = kind == "max" and bool(r.integers(2))
        try:
            if adaptive:
                out_size = (int(r.integers(1, shape[2] + 3)), int(r.integers(1, shape[3] + 3)))
                if r.random() < 0.2:
                    out_size = (1, 1)
                spec = adaptive_pool2d_spec(kind, geom, out_size, idx_wanted)
                desc = f"adaptive {kind} out={out_size}"
            else:
                k = (int(r.integers(1, 6)), int(r.integers(1, 6)))
                stride = None if r.random() < 0.2 else (int(r.integers(1, 4)), int(r.integers(1, 4)))
                dil = (1, 1) if r.random() < 0.5 else (int(r.integers(1, 4)), int(r.integers(1, 4)))
                pad = self.padding()
                ceil = bool(r.integers(2))
                cip = bool(r.integers(2))
                div = None if r.random() < 0.7 else int(r.integers(1, 31))
                spec = pool2d_spec(kind, geom, k, stride, pad, dil, ceil, cip, div, idx_wanted)
                desc = f"{kind} k={k} s={stride} d={dil} pad={pad} ceil={ceil} cip={cip} div={div}"
        except HalValueError:
            return
        fuse = r.random() < 0.25
        spec = replace(spec, relu=fuse)
        desc += f" relu={fuse}"
        self.count += 1
        x = r.standard_normal(shape).astype(dtype)
        if kind == "max" and r.random() < 0.4:
            x[r.random(shape) < 0.1] = np.nan
        if kind == "max" and r.random() < 0.2:
            x = np.round(x).astype(dtype)  # ties: the first maximum must win
        ref, ref_idx = reference.pool2d_from_spec(spec, x.astype(np.float64))
        if fuse:
            ref = relu(ref)
        oshape = phys(spec.out_shape, layout)
        xb = self.be.upload(to_layout(x, layout))
        yb = self.output(oshape, dtype)
        ib = self.be.upload(np.full(oshape, -7, dtype=np.int64)) if idx_wanted else None
        params = self.params("adaptive_pool2d" if adaptive else "pool2d")
        if adaptive:
            self.be.adaptive_pool2d(spec, xb, yb, ib, params)
        else:
            self.be.pool2d(spec, xb, yb, ib, params)
        got = from_layout(self.read(yb, oshape, dtype), layout)
        op = ("adaptive_" if adaptive else "") + ("max_pool2d" if kind == "max" else "avg_pool2d")
        scale = 1.0
        if kind == "avg":  # hal.conformance.avg_pool_scale, from the spec: divisor overrides down to 1
            abs_avg = reference.pool2d_from_spec(replace(spec, relu=False), np.abs(x.astype(np.float64)))[0]
            scale = np.maximum(abs_avg, 1.0)
        res = compare_out(op, dtype, got, ref.astype(dtype) if kind == "max" else ref, scale)
        tag = f"{op} {desc} {shape} {layout} {dtype.name} {params}"
        if not res.ok:
            self.fail(f"{tag}: {res.detail}")
        if idx_wanted:
            gi = from_layout(self.read(ib, oshape, np.dtype(np.int64)), layout)
            keep = ~np.isnan(ref)
            ri = compare_indices(gi[keep], ref_idx[keep])
            nan_ok = np.array_equal(gi[~keep], ref_idx[~keep])  # the last NaN's index, as the oracle
            if not ri.ok or not nan_ok:
                self.fail(f"{tag} indices: {ri.detail or 'NaN-window index differs'}")

    # -- convolution -----------------------------------------------------------------
    def conv(self) -> None:
        """One random convolution case."""
        r = self.rng
        dtype, layout = self.dtype_layout()
        n, c, h, w = self.shape(max_hw=24)
        mode = int(r.integers(4))
        if mode == 0:  # depthwise
            groups, cout = c, c * int(r.integers(1, 3)) if r.random() < 0.3 else c
        elif mode == 1:  # grouped
            groups = int(r.choice([g for g in range(1, c + 1) if c % g == 0]))
            cout = groups * int(r.integers(1, 5))
        else:
            groups, cout = 1, int(r.integers(1, 70))
        kh, kw = int(r.integers(1, 6)), int(r.integers(1, 6))
        stride = (int(r.integers(1, 4)), int(r.integers(1, 4)))
        dil = (1, 1) if r.random() < 0.6 else (int(r.integers(1, 3)), int(r.integers(1, 3)))
        pad = self.padding()
        has_bias = bool(r.integers(2))
        geom = TensorGeometry(n, c, h, w, layout, dtype)
        try:
            spec = conv2d_spec(geom, (cout, c // groups, kh, kw), has_bias, (cout,) if has_bias else None,
                               stride, pad, dil, groups)
        except HalValueError:
            return
        if spec.out_h < 1 or spec.out_w < 1:
            return
        fuse = r.random() < 0.25
        spec = replace(spec, relu=fuse)
        self.count += 1
        x = r.standard_normal((n, c, h, w)).astype(dtype)
        wt = (r.standard_normal(spec.weight_shape) / np.sqrt(kh * kw * c // groups)).astype(dtype)
        bias = r.standard_normal(cout).astype(np.float32) if has_bias else None
        ref = reference.conv2d_from_spec(spec, x.astype(np.float64), wt.astype(np.float64), bias)
        if fuse:
            ref = relu(ref)
        scale = reference.conv2d_from_spec(spec, np.abs(x.astype(np.float64)), np.abs(wt.astype(np.float64)),
                                           None if bias is None else np.abs(bias))
        oshape = phys(spec.out_shape, layout)
        yb = self.output(oshape, dtype)
        params = self.params("conv2d")
        self.be.conv2d(spec, self.be.upload(to_layout(x, layout)), self.be.upload(wt),
                       None if bias is None else self.be.upload(bias), yb, params)
        got = from_layout(self.read(yb, oshape, dtype), layout)
        res = compare_out("conv2d", dtype, got, ref, scale)
        if not res.ok:
            self.fail(f"conv2d {(n, c, h, w)} w={spec.weight_shape} g={groups} s={stride} d={dil} pad={pad} "
                      f"bias={has_bias} relu={fuse} {layout} {dtype.name} {params}: {res.detail}")

    # -- batch norm ------------------------------------------------------------------
    def batch_norm(self, big_mean: bool = False) -> None:
        """One random BatchNorm case (mean 1e4, std 1 when big_mean)."""
        r = self.rng
        dtype, layout = self.dtype_layout()
        if big_mean:
            dtype = np.dtype(np.float32)
        shape = self.shape(max_hw=48)
        training = bool(r.integers(2)) or big_mean
        if training and shape[0] * shape[2] * shape[3] == 1:
            return
        c = shape[1]
        affine = bool(r.integers(2))
        running = bool(r.integers(2)) or not training
        momentum = float(r.choice([0.1, 0.0, 1.0, 0.37]))
        eps = float(r.choice([1e-5, 1e-3]))
        spec = batch_norm_spec(TensorGeometry(*shape, layout, dtype), training, momentum, eps, running)
        fuse = r.random() < 0.25
        spec = replace(spec, relu=fuse)
        self.count += 1
        x = ((1e4 if big_mean else r.standard_normal()) + r.standard_normal(shape)).astype(dtype)
        weight = r.standard_normal(c).astype(np.float32) if affine else None
        bias = r.standard_normal(c).astype(np.float32) if affine else None
        rm = r.standard_normal(c).astype(np.float32) if running else None
        rv = r.uniform(0.5, 2, c).astype(np.float32) if running else None
        ref_rm = None if rm is None else rm.astype(np.float64)
        ref_rv = None if rv is None else rv.astype(np.float64)
        ref = reference.batch_norm_from_spec(spec, x.astype(np.float64), ref_rm, ref_rv, weight, bias)
        if fuse:
            ref = relu(ref)
        rmb = None if rm is None else self.be.upload(rm)
        rvb = None if rv is None else self.be.upload(rv)
        yb = self.output(phys(shape, layout), dtype)
        params = self.params("batch_norm")
        self.be.batch_norm(spec, self.be.upload(to_layout(x, layout)), yb,
                           None if weight is None else self.be.upload(weight),
                           None if bias is None else self.be.upload(bias), rmb, rvb, params)
        got = from_layout(self.read(yb, phys(shape, layout), dtype), layout)
        tag = (f"batch_norm {shape} train={training} affine={affine} relu={fuse} big_mean={big_mean} "
               f"{layout} {dtype.name} {params}")
        res = compare_out("batch_norm", dtype, got, ref)
        if not res.ok:
            self.fail(f"{tag}: {res.detail}")
        if training and running:
            for buf, want, what in ((rmb, ref_rm, "running_mean"), (rvb, ref_rv, "running_var")):
                res = compare("batch_norm", "float32", self.read(buf, (c,), np.dtype(np.float32)), want)
                if not res.ok:
                    self.fail(f"{tag} {what}: {res.detail}")


    # -- elementwise -----------------------------------------------------------------
    def eltwise(self) -> None:
        """One ReLU case, in place or not, NaNs included."""
        r = self.rng
        dtype = np.dtype([np.float32, np.float16][int(r.integers(2))])
        count = int(r.integers(1, 200000))
        x = r.standard_normal(count).astype(dtype)
        x[r.random(count) < 0.05] = np.nan
        self.count += 1
        xb = self.be.upload(x)
        yb = xb if r.random() < 0.5 else self.output((count,), dtype)
        self.be.eltwise(EltwiseSpec("relu", count, dtype), xb, yb, self.params("eltwise"))
        got = self.read(yb, (count,), dtype)
        res = compare("max_pool2d", dtype, got, relu(x.astype(np.float64)))  # exact
        if not res.ok:
            self.fail(f"eltwise relu count={count} {dtype.name}: {res.detail}")


def main() -> int:
    """Run the checks; exit status 1 on any failure."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=150, help="cases per kernel family and ISA")
    parser.add_argument("--isa", choices=ISAS, action="append", help="ISA path(s) to check (default: all supported)")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    args = parser.parse_args()
    probe = CpuBackend.probe()
    if not probe.available:
        print(probe.reason)
        return 1
    info = probe.devices[0]
    best = detected_isa()
    isas = args.isa or [i for i in ISAS if ISAS.index(i) >= ISAS.index(best)]
    print(f"device: {info.name}; ISA paths: {', '.join(isas)}; seed {args.seed}")
    total_fail = 0
    for isa in isas:
        backend = CpuBackend(dataclasses.replace(info, arch=ARCH_OF_ISA[isa]))
        chk = Checker(backend, np.random.default_rng(args.seed))
        start = time.perf_counter()
        for _ in range(args.cases):
            chk.pool(adaptive=False)
            chk.pool(adaptive=True)
            chk.conv()
            chk.batch_norm()
            chk.eltwise()
        for _ in range(max(args.cases // 10, 3)):
            chk.batch_norm(big_mean=True)
        print(f"{isa}: {chk.count} cases, {len(chk.fails)} failures ({time.perf_counter() - start:.1f} s)")
        for line in chk.fails[:15]:
            print("  FAIL", line)
        total_fail += len(chk.fails)
    return 1 if total_fail else 0


if __name__ == "__main__":
    sys.exit(main())
