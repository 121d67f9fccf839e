"""bfloat16 on the CPU backend: every float op against the float64 oracle, and the kernels'
float32 -> bfloat16 store bit for bit against ml_dtypes on every instruction-set path.

bfloat16 is storage only (kernels_c/hal_prelude.h, ``DTYPE_BF16``): loads widen the 16 bits
to a float, arithmetic is float32, each output is rounded once to nearest even.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
from collections.abc import Iterator
from importlib import resources
from typing import Any

import numpy as np
import pytest

import hal
from hal import reference
from hal.backends import cpu as cpu_backend
from hal.conformance import avg_pool_scale, bn_scale, compare, compare_indices, conv_scale
from hal.dtypes import BFLOAT16
from hal.spec import EltwiseSpec
from hal.tensor import poison_outputs
from hal.tuning.table import Entry, kernel_key, shipped_entries

pytestmark = [pytest.mark.cpu, pytest.mark.skipif(BFLOAT16 is None, reason="ml_dtypes is not installed")]

BF16: Any = BFLOAT16
LAYOUTS = ("NCHW", "NHWC")


@pytest.fixture(scope="module")
def cpu() -> hal.Device:
    """The CPU device (skipped where the backend is unavailable)."""
    try:
        return hal.device("cpu")
    except hal.HalError as exc:
        pytest.skip(str(exc))


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint16)


def _random(seed: int, shape: tuple[int, ...], nan: float = 0.0, mean: float = 0.0) -> np.ndarray:
    """Fresh normal data rounded to bfloat16 (never zeros), optionally with NaNs."""
    rng = np.random.default_rng(seed)
    x = mean + rng.standard_normal(shape)
    if nan:
        x[rng.random(shape) < nan] = np.nan
    return x.astype(np.float32).astype(BF16)


def _check(result: Any) -> None:
    assert result.ok, result.detail


def _run(cpu: hal.Device, fn: Any, x: np.ndarray, layout: str, **kwargs: Any) -> Any:
    with poison_outputs():
        xt = hal.asarray(x, device=cpu, layout=layout)
        assert xt.dtype == BF16
        out = fn(xt, **kwargs)
    first = out[0] if isinstance(out, tuple) else out
    assert first.dtype == BF16 and first.layout == layout
    return out


# ----------------------------------------------------------------------------
# pooling
# ----------------------------------------------------------------------------

MAX_POOL = [
    {"kernel_size": 3, "stride": 2, "padding": 1},
    {"kernel_size": 2, "ceil_mode": True},
    {"kernel_size": (3, 2), "stride": (1, 2), "padding": (1, 0, 0, 1), "dilation": 2},
    {"kernel_size": (2, 4), "stride": 3, "padding": (1, 2), "ceil_mode": True},
    {"kernel_size": 3, "stride": 1, "padding": "same"},
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("indices", [False, True])
def test_max_pool2d(cpu, layout, indices):
    for i, cfg in enumerate(MAX_POOL):
        for shape in ((2, 5, 17, 23), (1, 19, 9, 13)):
            x = _random(10 * i + shape[1], shape)
            out = _run(cpu, hal.max_pool2d, x, layout, return_indices=indices, **cfg)
            ref = reference.max_pool2d(x.astype(np.float64), return_indices=indices, **cfg)
            if indices:
                _check(compare("max_pool2d", BF16, out[0].numpy(), ref[0]))
                _check(compare_indices(out[1].numpy(), ref[1]))
            else:
                _check(compare("max_pool2d", BF16, out.numpy(), ref))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_max_pool2d_nan_and_ties(cpu, layout):
    """NaN propagates (the last NaN's index); among equal values the first one wins."""
    rng = np.random.default_rng(7)
    # few distinct values: many ties inside a window
    x = rng.integers(-3, 4, (2, 11, 13, 17)).astype(np.float32)
    x[rng.random(x.shape) < 0.08] = np.nan
    x = x.astype(BF16)
    for cfg in ({"kernel_size": 3, "stride": 2, "padding": 1}, {"kernel_size": (2, 3), "stride": 1}):
        y, idx = _run(cpu, hal.max_pool2d, x, layout, return_indices=True, **cfg)
        ref, ref_idx = reference.max_pool2d(x.astype(np.float64), return_indices=True, **cfg)
        assert np.isnan(ref).any() and (~np.isnan(ref)).any()
        _check(compare("max_pool2d", BF16, y.numpy(), ref))
        _check(compare_indices(idx.numpy(), ref_idx))
        # a NaN output is bfloat16's quiet NaN, as ml_dtypes writes it
        got = _bits(y.numpy())
        assert set(np.unique(got[np.isnan(ref)]).tolist()) <= {0x7FC0, 0xFFC0}
    y, idx = _run(cpu, hal.adaptive_max_pool2d, x, layout, output_size=(5, 4), return_indices=True)
    ref, ref_idx = reference.adaptive_max_pool2d(x.astype(np.float64), (5, 4), return_indices=True)
    _check(compare("adaptive_max_pool2d", BF16, y.numpy(), ref))
    _check(compare_indices(idx.numpy(), ref_idx))


AVG_POOL = [
    {"kernel_size": 3, "stride": 2, "padding": 1},
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False},
    {"kernel_size": (2, 3), "stride": 1, "divisor_override": 5},
    {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 0, 1, 1), "dilation": 2},
    {"kernel_size": 4, "stride": 3, "padding": 2, "ceil_mode": True},
    {"kernel_size": 3, "stride": 1, "padding": "same", "count_include_pad": False, "relu": True},
]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_avg_pool2d(cpu, layout):
    for i, cfg in enumerate(AVG_POOL):
        for shape in ((2, 5, 17, 23), (1, 19, 9, 13)):
            x = _random(100 + 10 * i + shape[1], shape)
            y = _run(cpu, hal.avg_pool2d, x, layout, **cfg)
            ref_cfg = {k: v for k, v in cfg.items() if k != "relu"}
            ref = reference.avg_pool2d(x.astype(np.float64), **ref_cfg)
            if cfg.get("relu"):
                ref = reference.relu(ref)
            _check(compare("avg_pool2d", BF16, y.numpy(), ref, avg_pool_scale(x.astype(np.float64), **ref_cfg)))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_adaptive_pool2d(cpu, layout):
    for i, (shape, size) in enumerate((((3, 37, 7, 7), 1), ((2, 4, 13, 11), (5, 3)), ((1, 19, 5, 17), (7, 20)),
                                       ((2, 3, 23, 9), (4, 1)))):
        x = _random(200 + i, shape)
        y = _run(cpu, hal.adaptive_avg_pool2d, x, layout, output_size=size)
        ref = reference.adaptive_avg_pool2d(x.astype(np.float64), size)
        _check(compare("adaptive_avg_pool2d", BF16, y.numpy(), ref, 1.0))
        for indices in (False, True):
            out = _run(cpu, hal.adaptive_max_pool2d, x, layout, output_size=size, return_indices=indices)
            mref = reference.adaptive_max_pool2d(x.astype(np.float64), size, return_indices=indices)
            if indices:
                _check(compare("adaptive_max_pool2d", BF16, out[0].numpy(), mref[0]))
                _check(compare_indices(out[1].numpy(), mref[1]))
            else:
                _check(compare("adaptive_max_pool2d", BF16, out.numpy(), mref))


# ----------------------------------------------------------------------------
# conv2d, batch_norm, relu
# ----------------------------------------------------------------------------

#: (input shape, weight shape, bias, keyword arguments)
CONVS: list[tuple[tuple[int, int, int, int], tuple[int, int, int, int], bool, dict[str, Any]]] = [
    ((2, 7, 11, 13), (9, 7, 3, 3), True, {"padding": 1}),
    ((1, 5, 12, 9), (6, 5, 3, 3), False, {"stride": 2, "padding": "same"}),
    ((2, 12, 10, 11), (12, 1, 3, 3), True, {"padding": 1, "groups": 12}),
    ((1, 6, 9, 17), (12, 1, 3, 3), False, {"stride": (1, 2), "padding": (1, 0, 2, 1), "groups": 6}),
    ((1, 6, 14, 12), (9, 2, 5, 3), True, {"padding": (2, 1), "dilation": 2, "groups": 3}),
    ((3, 17, 5, 6), (19, 17, 1, 1), True, {}),
    ((1, 3, 19, 23), (5, 3, 4, 2), True, {"stride": 3, "padding": (0, 2, 1, 0)}),
]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_conv2d(cpu, layout):
    for i, (shape, wshape, has_bias, cfg) in enumerate(CONVS):
        rng = np.random.default_rng(300 + i)
        x = _random(300 + i, shape)
        w = rng.standard_normal(wshape).astype(np.float32).astype(BF16)
        bias = rng.standard_normal(wshape[0]).astype(np.float32) if has_bias else None
        with poison_outputs():
            y = hal.conv2d(hal.asarray(x, device=cpu, layout=layout), hal.asarray(w, device=cpu), bias, **cfg)
        assert y.dtype == BF16 and y.layout == layout
        x64, w64 = x.astype(np.float64), w.astype(np.float64)
        b64 = None if bias is None else bias.astype(np.float64)
        ref = reference.conv2d(x64, w64, b64, **cfg)
        _check(compare("conv2d", BF16, y.numpy(), ref, conv_scale(x64, w64, b64, **cfg)))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("training", "running", "affine", "relu", "mean"), [
    (True, True, True, False, 0.0),
    (True, False, True, False, 0.0),
    (True, True, False, True, 0.0),
    (False, True, True, False, 0.0),
    (False, True, False, True, 0.0),
    (True, True, True, False, 300.0),
])
def test_batch_norm(cpu, layout, training, running, affine, relu, mean):
    shape = (3, 19, 7, 9)
    c = shape[1]
    x = _random(400 + c, shape, mean=mean)
    rng = np.random.default_rng(401)
    rm = rng.standard_normal(c).astype(np.float32) if running else None
    rv = rng.uniform(0.5, 2.0, c).astype(np.float32) if running else None
    weight = rng.standard_normal(c).astype(np.float32) if affine else None
    bias = rng.standard_normal(c).astype(np.float32) if affine else None
    rm_ref = None if rm is None else rm.astype(np.float64)
    rv_ref = None if rv is None else rv.astype(np.float64)
    scale = bn_scale(x.astype(np.float64), weight, 1e-5, training, rm, rv)
    y = _run(cpu, hal.batch_norm, x, layout, running_mean=rm, running_var=rv, weight=weight, bias=bias,
             training=training, momentum=0.3, relu=relu)
    ref = reference.batch_norm(x.astype(np.float64), rm_ref, rv_ref, weight, bias, training, 0.3)
    if relu:
        ref = reference.relu(ref)
    _check(compare("batch_norm", BF16, y.numpy(), ref, scale))
    if rm is not None and rv is not None and rm_ref is not None and rv_ref is not None:
        _check(compare("batch_norm", np.dtype(np.float32), rm, rm_ref))
        _check(compare("batch_norm", np.dtype(np.float32), rv, rv_ref))


def test_relu(cpu):
    """hal.relu and the eltwise kernel in place: exact (max(x, 0), NaN kept), vector steps and tails."""
    x = _random(500, (3, 5, 17, 23), nan=0.05)
    want = np.where(x.astype(np.float32) < 0, np.float32(0), x.astype(np.float32)).astype(BF16)
    for layout in LAYOUTS:
        y = _run(cpu, hal.relu, x, layout)
        np.testing.assert_array_equal(_bits(y.numpy()), _bits(want))
    backend = cpu.backend
    buf = backend.upload(x.view(np.uint16))
    backend.eltwise(EltwiseSpec("relu", x.size, BF16), buf, buf, {})
    np.testing.assert_array_equal(np.asarray(buf).view(np.uint16).reshape(x.shape), _bits(want))


# ----------------------------------------------------------------------------
# the store's rounding, bit for bit
# ----------------------------------------------------------------------------


def _crafted_targets() -> np.ndarray:
    """float32 values whose bfloat16 rounding is a corner case, then random bit patterns."""
    words = [
        0x3F808000, 0x3F818000, 0xBF808000, 0xBF818000,  # ties: to even, down and up
        0x3F808001, 0x3F807FFF, 0x3F80FFFF, 0x3FFFFFFF,  # just above / below a tie; carries
        0x7F800000, 0xFF800000,  # infinities
        0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF812345, 0x7FFFFFFF, 0x7FA00000,  # NaNs (quiet, signalling)
        0x7F7F0000, 0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF, 0xFF7F8000, 0xFF7FFFFF,  # largest finite, overflow
        0x00000001, 0x00008000, 0x00008001, 0x00018000, 0x00400000, 0x007FFFFF,  # subnormals
        0x80008000, 0x80018000, 0x807FFFFF, 0x00800000, 0x00000000, 0x80000000,
    ]
    rng = np.random.default_rng(600)
    random_words = rng.integers(0, 2**32, 1040 - len(words), dtype=np.uint64).astype(np.uint32)
    return np.concatenate([np.array(words, np.uint32), random_words]).view(np.float32)


def _isas() -> list[str]:
    best = cpu_backend.detected_isa()
    return list(cpu_backend.ISAS[cpu_backend.ISAS.index(best):])


@pytest.fixture
def stream_threshold() -> Iterator[Any]:
    """A setter for the kernels' streaming-store threshold, restored afterwards."""
    libs: list[ctypes.CDLL] = []

    def set_threshold(lib: ctypes.CDLL, nbytes: int) -> None:
        libs.append(lib)
        lib.hal_set_stream_threshold(nbytes)

    yield set_threshold
    for lib in libs:
        lib.hal_set_stream_threshold(cpu_backend.stream_threshold())


@pytest.mark.parametrize("isa", _isas())
def test_store_rounding_bit_exact(cpu, isa, stream_threshold):
    """batch_norm_apply computes y = fma(x - 0, -0.0, shift) = shift exactly (x = 1): each channel's
    shift is a crafted float32 and the stored bfloat16 must be ml_dtypes' rounding of it, through the
    vector stores, the streaming stores and the scalar tails of every ISA path."""
    backend = cpu_backend.CpuBackend(dataclasses.replace(cpu.info, arch=cpu_backend.ARCH_OF_ISA[isa]))
    assert backend.isa == isa
    targets = _crafted_targets()
    with np.errstate(invalid="ignore", over="ignore"):
        expected = targets.astype(BF16).view(np.uint16)
    # the cases exercise what they claim: ties both ways, NaN, inf, overflow, subnormal results
    assert expected[0] == 0x3F80 and expected[1] == 0x3F82 and expected[18] == 0x7F80 and expected[25] == 0x0002
    for layout in LAYOUTS:
        lib = backend._lib("batch_norm", "batch_norm.c", BF16, layout, {})
        for count, stream in ((1037, False), (1040, False), (1040, True)):
            shift = np.ascontiguousarray(targets[:count])
            c, hw = count, 37
            scale = np.full(c, -0.0, np.float32)
            hi = np.zeros(c, np.float32)
            lo = np.full(c, -0.0, np.float32)  # (-0) * (-0) = +0: shift - 0 keeps every shift, -0 and NaN included
            x = np.full(c * hw, 0x3F80, np.uint16)  # 1.0
            y = np.asarray(backend.allocate(2 * (c * hw + 64))).view(np.uint16)  # 64-byte aligned
            y[:] = 0x7FC1  # poison, with guards on both sides
            out = y[32:32 + c * hw]  # still 64-byte aligned, for the streaming stores
            stream_threshold(lib, 1 if stream else cpu_backend.stream_threshold())
            lib.batch_norm_apply(x.ctypes.data, out.ctypes.data, scale.ctypes.data, shift.ctypes.data, 1, c, hw,
                                 hi.ctypes.data, lo.ctypes.data)
            got = out.reshape(c, hw) if layout == "NCHW" else out.reshape(hw, c).T
            bad = np.argwhere(got != expected[:count, None])
            assert bad.size == 0, (
                f"{isa} {layout} stream={stream}: float32 {targets[bad[0][0]].view(np.uint32):#010x} stored as "
                f"{got[tuple(bad[0])]:#06x}, ml_dtypes gives {expected[bad[0][0]]:#06x} ({len(bad)} wrong)")
            assert (y[:32] == 0x7FC1).all() and (y[32 + c * hw:] == 0x7FC1).all()


@pytest.mark.parametrize("isa", _isas())
def test_load_store_every_pattern(cpu, isa, stream_threshold):
    """eltwise_relu over all 65536 bfloat16 words: every load widens exactly and every store gives
    ml_dtypes' bits (negative values 0, -0 kept, every NaN the quiet NaN with its sign), through the
    vector loop, the scalar tail, the streaming stores and in place, on every ISA path."""
    backend = cpu_backend.CpuBackend(dataclasses.replace(cpu.info, arch=cpu_backend.ARCH_OF_ISA[isa]))
    words = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    f32 = words.view(BF16).astype(np.float32)
    assert (f32.view(np.uint32) == words.astype(np.uint32) << 16).all()  # what "exact" means
    with np.errstate(invalid="ignore"):
        want = np.where(f32 < 0, np.float32(0), f32).astype(BF16).view(np.uint16)
    lib = backend._lib("eltwise", "eltwise.c", BF16, "NCHW", {}, relu=True)
    for count, stream, in_place in ((words.size - 3, False, False), (words.size, True, False),
                                    (words.size - 5, False, True)):
        x = np.asarray(backend.allocate(2 * (count + 1))).view(np.uint16)[1:]  # misaligned: a scalar head
        x[:] = words[:count]
        y = x if in_place else np.asarray(backend.allocate(2 * count)).view(np.uint16)
        if not in_place:
            y[:] = 0x7FC1
        stream_threshold(lib, 1 if stream else cpu_backend.stream_threshold())
        lib.eltwise_relu(x.ctypes.data, y.ctypes.data, count)
        bad = np.flatnonzero(y != want[:count])
        assert bad.size == 0, (f"{isa} stream={stream} in_place={in_place}: {words[bad[0]]:#06x} -> "
                               f"{y[bad[0]]:#06x}, ml_dtypes gives {want[bad[0]]:#06x} ({bad.size} wrong)")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_avg_pool_ties_round_to_even(cpu, layout):
    """The mean of two neighbouring bfloat16 values is exactly halfway between them: the store
    must round it to the even one (half of the pairs round down, half up), subnormals included."""
    rng = np.random.default_rng(700)
    words = rng.integers(0, 0x7F00, 2 * 389, dtype=np.int64).astype(np.uint16)  # finite, sum cannot overflow
    words[:8] = [0x0001, 0x0002, 0x0003, 0x0080, 0x3F80, 0x3F81, 0x7E80, 0x4000]
    words |= rng.integers(0, 2, words.size).astype(np.uint16) << 15  # either sign
    a = words
    b = np.where((a & 0x7F) == 0x7F, a - 1, a + 1).astype(np.uint16)  # the neighbour in the same binade
    pairs = np.stack([a, b], axis=-1).reshape(1, 1, -1).view(BF16)  # (1, 1, 2 * count) as bfloat16
    x = np.repeat(pairs.reshape(1, 1, 1, -1), 3, axis=1)  # 3 channels, one row
    f32 = pairs.astype(np.float32).reshape(-1, 2)
    exact = (f32[:, 0] + f32[:, 1]) * np.float32(0.5)  # exact: both operands have 8 significant bits
    want = exact.astype(BF16).view(np.uint16)
    truncated = exact.view(np.uint32) >> 16
    assert (want != truncated).any() and (want == truncated).any()  # ties went both ways
    y = _run(cpu, hal.avg_pool2d, x, layout, kernel_size=(1, 2), stride=(1, 2))
    got = _bits(y.numpy()).reshape(3, -1)
    for ch in range(3):
        np.testing.assert_array_equal(got[ch], want)


# ----------------------------------------------------------------------------
# tuning tables
# ----------------------------------------------------------------------------


def test_tuning_lookup_bfloat16(cpu):
    """No cpu.json entry names bfloat16; an entry keyed to float32 or float16 never applies to it
    (stale ones included: their key would match once re-measured), and what serves a bfloat16 call
    (the schema defaults, or an entry that names no dtype) is valid on this device."""
    from hal import spec as S

    raw = json.loads((resources.files("hal.tuning") / "tables" / "cpu.json").read_text(encoding="utf-8"))
    keyed = 0
    for item in raw["entries"]:
        key = dict(item["key"])
        assert key.get("dtype") != "bfloat16"
        if "dtype" in key:
            keyed += 1
            entry = Entry(item["level"], item["match"], item["kernel"], tuple(sorted(key.items())),
                          tuple(sorted(item["params"].items())), item["provenance"], "test")
            assert entry.applies(item["kernel"], key)
            assert not entry.applies(item["kernel"], {**key, "dtype": "bfloat16"})
    assert keyed, "the table has no dtype-keyed entry left: this check no longer checks anything"
    shipped = {e.source: e for e in shipped_entries("cpu")}
    geom = hal.asarray(_random(800, (2, 5, 17, 23)), device=cpu).geometry()
    specs = [
        S.pool2d_spec("max", geom, 3, 2, 1, 1, False, True, None, False),
        S.pool2d_spec("avg", geom, 3, 2, 1, 1, False, True, None, False),
        S.adaptive_pool2d_spec("avg", geom, 1, False),
        S.conv2d_spec(geom, (9, 5, 3, 3), True, (9,), 1, 1, 1, 1),
        S.conv2d_spec(geom, (5, 1, 3, 3), False, None, 1, 1, 1, 5),
        S.batch_norm_spec(geom, True, 0.1, 1e-5, True),
    ]
    for spec in specs:
        kernel, key = kernel_key(spec)
        assert key["dtype"] == "bfloat16"
        resolved = cpu.tuner.resolve(kernel, key)
        schema = cpu.tuner.schemas[kernel]
        assert schema.validate(dict(resolved.params), cpu.info) is None
        if resolved.level == "default":
            assert dict(resolved.params) == schema.defaults()
        else:  # only an entry that names no dtype may serve bfloat16
            entry = shipped.get(resolved.source)
            assert entry is not None and entry.applies(kernel, key) and "dtype" not in dict(entry.key), resolved
