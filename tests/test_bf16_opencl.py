"""bfloat16 on the OpenCL backend (``-DDTYPE_BF16=1``: 16-bit words, float arithmetic).

Every float op against the float64 oracle on fresh random inputs (no zeros) with
NaN-poisoned outputs, in both layouts, on the kernel paths that have a storage path of their
own (aligned vector loads and stores, the row bands and strips, the flat and pipe adaptive
kernels, the BatchNorm aligned paths), each forced and checked to have been built; max
pooling's outputs bit for bit (the input element at the returned index, a NaN as the quiet
NaN with its sign); the store's rounding bit for bit against ml_dtypes (ties to even,
overflow to inf, inf, subnormals, NaN); and the parameters a bfloat16 lookup gets from the
tuning tables. Few builds: every test runs a handful of cases per build.
"""

from __future__ import annotations

import zlib
from dataclasses import replace

import numpy as np
import pytest
from test_adaptive_flat import built
from test_forced_params import forced

import hal
from hal import reference
from hal.backends.base import DeviceInfo
from hal.conformance import bn_scale, compare, compare_indices, conv_scale
from hal.dtypes import BFLOAT16
from hal.tensor import poison_outputs

pytestmark = pytest.mark.skipif(BFLOAT16 is None, reason="bfloat16 needs ml_dtypes")

BF16 = BFLOAT16
F32 = np.float32
QNAN = 0x7FC0  # the quiet NaN every bfloat16 store of a NaN writes (with the NaN's sign)


def _opencl(device: hal.Device) -> None:
    if device is None or device.kind != "opencl":
        pytest.skip("the OpenCL backend's bfloat16 kernels")


def _seed(*parts: object) -> int:
    return zlib.crc32(repr(parts).encode())


def _f64(a: np.ndarray) -> np.ndarray:
    """float64 values of a bfloat16 array (NaN included, without ml_dtypes' cast warning)."""
    with np.errstate(invalid="ignore"):
        return a.astype(np.float64)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint16)


def _from_bits(bits: np.ndarray) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint16).view(BF16)


def _canonical(bits: np.ndarray) -> np.ndarray:
    """The bits a bfloat16 store writes for a value that was loaded from ``bits`` unchanged."""
    bits = np.asarray(bits, dtype=np.uint16)
    nan = (bits & 0x7FFF) > 0x7F80
    return np.where(nan, (bits & 0x8000) | QNAN, bits).astype(np.uint16)


def _normal(seed: int, shape: tuple[int, ...], scale: float = 2.0, shift: float = 0.0) -> np.ndarray:
    """Fresh normal values in bfloat16, none of them zero."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * scale + shift).astype(BF16)
    x[x == 0] = BF16.type(0.5)
    return x


def _max_input(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    """Normal values, half of them rounded to integers (equal maxima: the first wins), 4 % NaN
    of either sign with random payloads, signalling ones too (the last wins, stored as the
    quiet NaN with its sign), 3 % -inf and 3 % signed zeros (ties between -0 and +0)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    x = np.where(rng.random(shape) < 0.5, np.round(x), x)
    x[x == 0] = 1.0
    x[rng.random(shape) < 0.03] = -np.inf
    bits = _bits(x.astype(BF16)).copy()
    zeros = rng.random(shape) < 0.03
    bits[zeros] = np.where(rng.random(shape) < 0.5, 0x8000, 0x0000)[zeros]
    nan = rng.random(shape) < 0.04
    payload = rng.integers(1, 0x80, shape).astype(np.uint16)
    sign = np.where(rng.random(shape) < 0.5, 0x8000, 0).astype(np.uint16)
    bits[nan] = (sign | 0x7F80 | payload)[nan]
    return _from_bits(bits)


def _check_max(x: np.ndarray, y: np.ndarray, idx: np.ndarray | None, ref: np.ndarray, ref_idx: np.ndarray) -> None:
    """Max pooling: the oracle's values and indices; with indices, every output's bits are those
    of the input element at its index (a NaN as the quiet NaN with that element's sign)."""
    r = compare("max_pool2d", BF16, y, ref)
    assert r.ok, r.detail
    if idx is None:
        return
    r = compare_indices(idx, ref_idx)
    assert r.ok, r.detail
    planes = _bits(x).reshape(x.shape[0] * x.shape[1], -1)
    taken = np.take_along_axis(planes, idx.reshape(planes.shape[0], -1), axis=1).reshape(y.shape)
    got = _bits(y)
    bad = got != _canonical(taken)
    assert not bad.any(), (f"{int(bad.sum())} outputs differ in their bits; first "
                           f"{hex(int(got[bad][0]))} for input {hex(int(taken[bad][0]))}")


# ----------------------------------------------------------------------------
# pool2d
# ----------------------------------------------------------------------------

#: forced pool2d paths: (layout, parameters, the LOCAL_TILE build it must reach)
POOL_PATHS = [
    ("NCHW", {"LOCAL_TILE": 0, "INTERIOR": 1, "VEC": 4, "FIXED_WINDOW": 1}, 0),
    ("NCHW", {"LOCAL_TILE": 0, "INTERIOR": 0, "VEC": 8, "FIXED_WINDOW": 0}, 0),
    ("NCHW", {"LOCAL_TILE": 1, "FIXED_WINDOW": 1}, 1),
    ("NCHW", {"LOCAL_TILE": 2, "BAND_KB": 4}, 2),
    ("NCHW", {"LOCAL_TILE": 3, "VEC": 8, "STRIP_ROWS": 2}, 3),
    ("NCHW", {"WG": 128, "LOCAL_TILE": 3, "VEC": 8, "STRIP_ROWS": 2}, 3),  # the sm_90 bfloat16 entries' (session 41)
    ("NCHW", {"WG": 128, "LOCAL_TILE": 3}, 3),  # the sm_90 NCHW 3x3 max entry, measured on an H100 (session 42)
    ("NHWC", {"VEC": 4}, 0),
    ("NHWC", {"VEC": 8, "FIXED_WINDOW": 0}, 0),
    ("NHWC", {"WG": 128, "VEC": 8}, 0),
]
#: (kind, arguments, fused ReLU); the windows of stride 2 are the ones the row strips take
POOL_CASES = [
    ("max", {"kernel_size": 3, "stride": 2, "padding": 1, "return_indices": True}, False),
    ("max", {"kernel_size": 3, "stride": 2, "padding": 1}, False),
    ("max", {"kernel_size": (2, 3), "stride": (1, 2), "padding": (1, 0), "dilation": (2, 1), "ceil_mode": True,
             "return_indices": True}, False),
    ("avg", {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False}, True),
    ("avg", {"kernel_size": 2, "stride": 2}, False),
    ("avg", {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 0, 1, 1), "dilation": (1, 2),
             "divisor_override": 5}, False),
]


def _shapes(layout: str, strips: bool) -> list[tuple[int, int, int, int]]:
    if strips:  # the row strips need IW % VEC == 0
        return [(2, 3, 13, 24)]
    # NHWC: channel vectors that are whole and aligned (16) and ones that are not (5)
    return [(2, 5, 17, 23)] if layout == "NCHW" else [(2, 5, 17, 23), (1, 16, 11, 13)]


def _run_pool(device: hal.Device, x: np.ndarray, kind: str, kwargs: dict, relu: bool, layout: str) -> None:
    xt = hal.asarray(x, device=device, layout=layout)
    x64 = _f64(x)
    indices = kwargs.get("return_indices", False)
    with poison_outputs():
        if kind == "max":
            out = hal.max_pool2d(xt, **kwargs)
        else:
            out = hal.avg_pool2d(xt, **kwargs, relu=relu)
    if kind == "max":
        y, idx = (out[0].numpy(), out[1].numpy()) if indices else (out.numpy(), None)
        ref, ref_idx = reference.max_pool2d(x64, **{**kwargs, "return_indices": True})
        _check_max(x, y, idx, ref, ref_idx)
        return
    ref = reference.avg_pool2d(x64, **kwargs)
    if relu:
        ref = reference.relu(ref)
    scale = np.maximum(reference.avg_pool2d(np.abs(x64), **kwargs), 1.0)
    r = compare("avg_pool2d", BF16, out.numpy(), ref, scale)
    assert r.ok, (x.shape, kwargs, r.detail)


@pytest.mark.forced_params
@pytest.mark.parametrize(("layout", "params", "tile"), POOL_PATHS,
                         ids=[f"{lay}-{'-'.join(f'{k}{v}' for k, v in p.items())}" for lay, p, _ in POOL_PATHS])
def test_bf16_pool2d_paths(device, layout, params, tile):
    _opencl(device)
    strips = tile == 3
    with forced(device, "pool2d", params), built(device) as defines:
        for shape in _shapes(layout, strips):
            for i, (kind, kwargs, relu) in enumerate(POOL_CASES):
                seed = _seed(layout, params, shape, i)
                x = _max_input(seed, shape) if kind == "max" else _normal(seed, shape)
                _run_pool(device, x, kind, kwargs, relu, layout)
    assert defines and all(d.get("DTYPE_BF16") == 1 and d["DTYPE_HALF"] == 0 for d in defines), defines
    assert not any("HALF_RAW" in d or d.get("HALF_ARITH") for d in defines), defines
    # the path asked for was built (the others are its fall-backs for the cases it does not take)
    assert any(d["LOCAL_TILE"] == tile for d in defines), (tile, defines)


# ----------------------------------------------------------------------------
# adaptive_pool2d
# ----------------------------------------------------------------------------

#: forced adaptive paths: (layout, parameters, the ADAPTIVE_GROUP build it must reach, GVEC_U built)
ADAPTIVE_PATHS = [
    ("NCHW", {"MODE": 1, "VEC": 4}, 0, 0),
    ("NCHW", {"MODE": 2, "VEC": 8}, 1, 0),
    ("NCHW", {"MODE": 3, "WG": 32, "VEC": 4}, 2, 0),
    ("NCHW", {"MODE": 4, "WG": 32, "VEC": 4, "PIPE_GROUPS": 2}, 3, 0),
    ("NHWC", {"MODE": 1, "VEC": 8}, 0, 0),
    ("NHWC", {"MODE": 2, "VEC": 4}, 1, 0),
    ("NHWC", {"MODE": 1, "VEC": 4, "GVEC_U": 8}, 0, 8),
    ("NHWC", {"WG": 128, "MODE": 1, "GVEC_U": 8}, 0, 8),  # the sm_90 NHWC global average entry (session 42)
]
#: (shape, output size): 141 planes of 7x7 and 45 of 3x5 give the pipe kernels (WG 32) full chunks
#: staged as 32-bit words (odd plane sizes: a plane starts mid-word on odd work-items) and a
#: partial last chunk; NHWC with channel vectors whole (16, 24) and not (5, 45)
ADAPTIVE_CASES = {
    "NCHW": [((2, 5, 17, 23), (3, 4)), ((3, 47, 7, 7), 1), ((1, 45, 3, 5), 1), ((2, 3, 13, 11), (2, 5))],
    "NHWC": [((2, 5, 17, 23), (3, 4)), ((2, 24, 7, 7), 1), ((1, 45, 9, 10), 1), ((2, 16, 13, 11), (4, 3))],
}


@pytest.fixture
def one_compute_unit(device, monkeypatch):
    """Launch geometry as on one compute unit, so that the pipe kernels' groups (PIPE_GROUPS per
    compute unit) each loop over several chunks, the next one's loads in flight."""
    _opencl(device)
    monkeypatch.setattr(device.backend, "info", replace(device.backend.info, compute_units=1))


@pytest.mark.forced_params
@pytest.mark.parametrize(("layout", "params", "group", "gvec"), ADAPTIVE_PATHS,
                         ids=[f"{lay}-{'-'.join(f'{k}{v}' for k, v in p.items())}" for lay, p, _, _ in ADAPTIVE_PATHS])
def test_bf16_adaptive_paths(device, one_compute_unit, layout, params, group, gvec):
    with forced(device, "adaptive_pool2d", params), built(device) as defines:
        for i, (shape, out) in enumerate(ADAPTIVE_CASES[layout]):
            seed = _seed(layout, params, shape, out)
            xm = _max_input(seed, shape)
            xt = hal.asarray(xm, device=device, layout=layout)
            with poison_outputs():
                y, idx = hal.adaptive_max_pool2d(xt, out, return_indices=True)
                y_noidx = hal.adaptive_max_pool2d(xt, out)
            ref, ref_idx = reference.adaptive_max_pool2d(_f64(xm), out, return_indices=True)
            _check_max(xm, y.numpy(), idx.numpy(), ref, ref_idx)
            _check_max(xm, y_noidx.numpy(), None, ref, ref_idx)
            xa = _normal(seed + 1, shape, shift=0.25)
            relu = i % 2 == 1
            with poison_outputs():
                ya = hal.adaptive_avg_pool2d(hal.asarray(xa, device=device, layout=layout), out, relu=relu)
            ref = reference.adaptive_avg_pool2d(xa.astype(np.float64), out)
            r = compare("adaptive_avg_pool2d", BF16, ya.numpy(), reference.relu(ref) if relu else ref)
            assert r.ok, (shape, out, r.detail)
    assert defines and all(d.get("DTYPE_BF16") == 1 and d["DTYPE_HALF"] == 0 for d in defines), defines
    assert not any("HALF_RAW" in d or d.get("HALF_ARITH") for d in defines), defines
    assert any(d["ADAPTIVE_GROUP"] == group and d.get("GVEC_U", 0) == gvec for d in defines), defines


# ----------------------------------------------------------------------------
# conv2d
# ----------------------------------------------------------------------------

CONV_PATHS = [{"ALGO": 1, "VEC": 4}, {"ALGO": 1, "VEC": 8}, {"ALGO": 2, "TILE": 16, "TK": 8}, {"ALGO": 2, "TILE": 64}]
#: (input shape, weight shape, bias, arguments): dense with bias, depthwise with stride, dilation
#: and asymmetric padding, grouped with a fused ReLU, a strided 1x1
CONV_CASES = [
    ((2, 5, 17, 23), (7, 5, 3, 3), True, {"padding": 1}, False),
    ((2, 5, 17, 23), (5, 1, 3, 3), False, {"stride": 2, "padding": (1, 2, 0, 1), "dilation": 2, "groups": 5},
     False),
    ((1, 6, 13, 11), (9, 2, 3, 2), True, {"stride": (2, 1), "padding": (1, 0), "groups": 3}, True),
    ((2, 5, 9, 15), (4, 5, 1, 1), True, {"stride": 2}, False),
]


@pytest.mark.forced_params
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("params", CONV_PATHS, ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
def test_bf16_conv2d_paths(device, layout, params):
    _opencl(device)
    with forced(device, "conv2d", params), built(device) as defines:
        for i, (shape, wshape, has_bias, kwargs, relu) in enumerate(CONV_CASES):
            seed = _seed(layout, params, i)
            x = _normal(seed, shape)
            w = _normal(seed + 1, wshape, scale=0.5)
            b = np.random.default_rng(seed + 2).standard_normal(wshape[0]).astype(F32) if has_bias else None
            with poison_outputs():
                y = hal.conv2d(hal.asarray(x, device=device, layout=layout), w, b, relu=relu, **kwargs)
            x64, w64 = x.astype(np.float64), w.astype(np.float64)
            b64 = None if b is None else b.astype(np.float64)
            ref = reference.conv2d(x64, w64, b64, **kwargs)
            r = compare("conv2d", BF16, y.numpy(), reference.relu(ref) if relu else ref,
                        conv_scale(x64, w64, b64, **kwargs))
            assert r.ok, (shape, wshape, kwargs, r.detail)
    assert defines and all(d.get("DTYPE_BF16") == 1 and d["DTYPE_HALF"] == 0 for d in defines), defines
    assert all(d["CONV_ALGO"] == params["ALGO"] for d in defines), defines


# ----------------------------------------------------------------------------
# batch_norm
# ----------------------------------------------------------------------------

BN_PATHS = [{"VEC": 4}, {"VEC": 8, "INFER_LOOP": 1}, {"VEC": 1, "WG": 32}, {"WG": 256, "VEC": 8}, {"WG": 128},
            # the sm_90 entries measured on an H100 (session 42): NHWC inference, NCHW training
            {"WG": 256, "INFER_LOOP": 1}, {"WG": 128, "VEC": 8}]
#: NCHW planes of 391 (no whole vectors: the element paths) and 48 (VEC-aligned) elements;
#: NHWC channels 5 (element paths) and 8 (aligned; inference's channel loop)
BN_SHAPES = {"NCHW": [(2, 5, 17, 23), (3, 4, 8, 6)], "NHWC": [(2, 5, 17, 23), (3, 8, 5, 7)]}
#: (training, running statistics given, weight and bias given, fused ReLU)
BN_CASES = [(True, True, True, False), (True, False, False, True), (False, True, True, False),
            (False, True, False, True)]


@pytest.mark.forced_params
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("params", BN_PATHS, ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
def test_bf16_batch_norm_paths(device, layout, params):
    _opencl(device)
    with forced(device, "batch_norm", params), built(device) as defines:
        for shape in BN_SHAPES[layout]:
            c = shape[1]
            for i, (training, running, affine, relu) in enumerate(BN_CASES):
                seed = _seed(layout, params, shape, i)
                rng = np.random.default_rng(seed)
                x = _normal(seed, shape, scale=1.5, shift=3.0)
                rm = (rng.standard_normal(c) + 3.0).astype(F32) if running else None
                rv = rng.uniform(0.5, 2.0, c).astype(F32) if running else None
                w = rng.uniform(0.5, 1.5, c).astype(F32) if affine else None
                b = rng.standard_normal(c).astype(F32) if affine else None
                rm_dev, rv_dev = (None, None) if rm is None else (rm.copy(), rv.copy())
                with poison_outputs():
                    y = hal.batch_norm(hal.asarray(x, device=device, layout=layout), rm_dev, rv_dev, w, b,
                                       training=training, relu=relu)
                x64 = _f64(x)
                rm64 = None if rm is None else rm.astype(np.float64)
                rv64 = None if rv is None else rv.astype(np.float64)
                ref = reference.batch_norm(x64, rm64, rv64, w, b, training=training)
                scale = bn_scale(x64, w, 1e-5, training, rm, rv)
                r = compare("batch_norm", BF16, y.numpy(), reference.relu(ref) if relu else ref, scale)
                assert r.ok, (shape, training, running, affine, relu, r.detail)
                if training and running:  # float32 in every dtype, updated in place
                    for got, want in ((rm_dev, rm64), (rv_dev, rv64)):
                        r = compare("batch_norm", F32, got, want)
                        assert r.ok, ("running statistics", shape, r.detail)
    assert defines and all(d.get("DTYPE_BF16") == 1 and d["DTYPE_HALF"] == 0 for d in defines), defines
    assert not any("HALF_RAW" in d for d in defines), defines
    if params.get("INFER_LOOP") and layout == "NHWC":
        assert any(d.get("BN_INFER_LOOP") for d in defines), defines


# ----------------------------------------------------------------------------
# eltwise (ReLU): exact, so bit for bit
# ----------------------------------------------------------------------------


@pytest.mark.forced_params
@pytest.mark.parametrize("params", [{"VEC": 1}, {"VEC": 4}, {"VEC": 8}], ids=lambda p: f"VEC{p['VEC']}")
def test_bf16_relu(device, params):
    _opencl(device)
    for layout in ("NCHW", "NHWC"):
        x = _max_input(_seed("relu", layout, params), (2, 5, 17, 23))  # NaN, -inf, signed zeros
        bits = _bits(x).copy()
        bits[0, 0, 0, :4] = (0x7F80, 0x7F7F, 0x0001, 0x8001)  # inf, the largest finite, subnormals
        x = _from_bits(bits)
        with forced(device, "eltwise", params), poison_outputs():
            y = hal.relu(hal.asarray(x, device=device, layout=layout))
        # v < 0 ? 0 : v keeps -0 and NaN (as the quiet NaN with its sign); float32 -> ml_dtypes likewise
        x32 = x.astype(F32)
        with np.errstate(invalid="ignore"):  # ml_dtypes warns on casting NaN
            want = _bits(np.where(x32 < 0, F32(0), x32).astype(BF16))
        got = _bits(y.numpy())
        assert (got == want).all(), (layout, np.argwhere(got != want)[:3])


# ----------------------------------------------------------------------------
# the store's rounding, bit for bit against ml_dtypes
# ----------------------------------------------------------------------------


def _f32(bits: list[int]) -> np.ndarray:
    return np.array(bits, dtype=np.uint32).view(F32)


#: float32 values whose bfloat16 rounding the stores must get right (ml_dtypes' bits)
ROUNDING = _f32([
    0x3F808000, 0x3F818000, 0xBF808000, 0xBF818000,  # ties: to the even neighbour (down, up)
    0x3F807FFF, 0x3F808001, 0xC0A17FFF, 0xC0A18001,  # just below and above a tie
    0x3FFFFFFF, 0x3FFF8000, 0x7EFF8000,  # a carry into the exponent
    0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF, 0xFF7FFFFF, 0xFF7F8000,  # the largest bfloat16, or inf
    0x7F800000, 0xFF800000,  # inf stays inf
    0x00800000, 0x80800000, 0x00808000, 0x00818000,  # the smallest normals
    0x42C80000, 0x3DCCCCCD, 0xC2F6E979, 0x4479FFFF, 0x3EAAAAAB, 0x477FE000,  # ordinary values
])
#: float32 subnormals: exact where the device keeps them (CL_FP_DENORM), else flushed to zero
SUBNORMAL = _f32([0x00000001, 0x00008000, 0x00018000, 0x007FFFFF, 0x80408000, 0x00400001, 0x80018001])
#: NaNs of both signs, quiet and signalling, with payloads: a quiet NaN, 0x7fc0 up to the sign
#: (arithmetic may drop a NaN's sign: NVIDIA returns the canonical NaN)
NANS = _f32([0x7FC00000, 0xFFC00001, 0x7F800001, 0xFF812345, 0x7FFFFFFF])


def _keeps_denormals(device: hal.Device) -> bool:
    try:
        import pyopencl as cl

        return bool(device.backend._rt.device.single_fp_config & cl.device_fp_config.DENORM)
    except Exception:  # no way to ask: expect them kept
        return True


@pytest.mark.forced_params
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("params", CONV_PATHS, ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
def test_bf16_store_rounding(device, layout, params):
    """A 1x1 conv with zero weights stores its float32 bias: one output channel per value, 7
    outputs per row (a whole vector and a scalar tail at VEC 4; NHWC vectors over the channels),
    every store's bits against ml_dtypes' conversion of the same float32."""
    _opencl(device)
    values = np.concatenate([ROUNDING, SUBNORMAL, NANS])
    k = values.size
    x = np.abs(_normal(_seed("round", layout), (1, 3, 2, 7))) + BF16.type(0.5)  # positive: 0 * x is +0
    w = np.zeros((k, 3, 1, 1), dtype=BF16)
    with forced(device, "conv2d", params), poison_outputs():
        y = hal.conv2d(hal.asarray(x, device=device, layout=layout), w, values)
    got = _bits(y.numpy())[0].reshape(k, -1)
    with np.errstate(invalid="ignore"):
        want = _bits(values.astype(BF16))
    n_round, n_sub = ROUNDING.size, SUBNORMAL.size
    exact = got[:n_round] == want[:n_round, None]
    assert exact.all(), [(hex(int(values.view(np.uint32)[i])), hex(int(got[i, 0])), hex(int(want[i])))
                         for i in np.argwhere(~exact.all(axis=1))[:, 0]]
    sub_got, sub_want = got[n_round:n_round + n_sub], want[n_round:n_round + n_sub, None]
    if _keeps_denormals(device):
        assert (sub_got == sub_want).all(), (sub_got[:, 0], sub_want[:, 0])
    else:  # flushed: a zero of the value's sign, or the exact rounding
        sub_sign = (values.view(np.uint32)[n_round:n_round + n_sub, None] >> 16) & 0x8000
        assert ((sub_got == sub_want) | (sub_got == sub_sign)).all(), (sub_got[:, 0], sub_want[:, 0])
    nan_got = got[n_round + n_sub:]
    assert ((nan_got & 0x7FFF) == QNAN).all(), [hex(int(v)) for v in nan_got[:, 0]]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_bf16_avg_pool_ties(device, layout):
    """1x2 average pooling of bfloat16 pairs: neighbours (their float32 mean is a tie, which
    goes to the even one), random pairs (exact float32 sums, rounded once) and pairs far apart,
    bit for bit against ml_dtypes' rounding of numpy's float32 mean."""
    _opencl(device)
    rng = np.random.default_rng(_seed("ties", layout))
    n, c, h, pairs = 2, 5, 3, 13
    a = _normal(_seed("ties-a", layout), (n, c, h, pairs), scale=10.0)
    kind = rng.integers(0, 3, a.shape)
    nxt = _from_bits(_bits(a) + 1)  # the next bfloat16 away from zero: a tie in float32
    other = _normal(_seed("ties-b", layout), a.shape, scale=10.0)
    far = (a.astype(F32) * F32(3.0e-4)).astype(BF16)
    b = np.where(kind == 0, nxt, np.where(kind == 1, other, far))
    x = np.stack([a, b], axis=-1).reshape(n, c, h, 2 * pairs)
    with poison_outputs():
        y = hal.avg_pool2d(hal.asarray(x, device=device, layout=layout), (1, 2), stride=(1, 2))
    mean32 = (a.astype(F32) + b.astype(F32)) / F32(2)
    want = _bits(mean32.astype(BF16))
    got = _bits(y.numpy())
    assert (got == want).all(), (np.argwhere(got != want)[:3], got[got != want][:3], want[got != want][:3])
    # the ties really were ties: half of them rounded down, half up
    ties = kind == 0
    assert ties.sum() > 20 and (want[ties] == _bits(a)[ties]).any() and (want[ties] == _bits(nxt)[ties]).any()


def test_bf16_max_pool_nan_propagation(device):
    """Windows full of NaN (both signs, quiet and signalling payloads) and -inf: the last NaN of
    a window wins, index and sign, in both layouts, for pool2d and adaptive pooling at the
    parameters the tables serve."""
    _opencl(device)
    rng = np.random.default_rng(_seed("nan"))
    shape = (2, 6, 9, 11)
    bits = _bits(_normal(_seed("nan-x"), shape)).copy()
    nan = rng.random(shape) < 0.4
    payload = rng.integers(1, 0x80, shape).astype(np.uint16)
    sign = np.where(rng.random(shape) < 0.5, 0x8000, 0).astype(np.uint16)
    bits[nan] = (sign | 0x7F80 | payload)[nan]
    bits[rng.random(shape) < 0.2] = 0xFF80
    x = _from_bits(bits)
    x64 = _f64(x)
    for layout in ("NCHW", "NHWC"):
        xt = hal.asarray(x, device=device, layout=layout)
        with poison_outputs():
            y, idx = hal.max_pool2d(xt, 3, stride=2, padding=1, return_indices=True)
            ya, idxa = hal.adaptive_max_pool2d(xt, (2, 3), return_indices=True)
        ref, ref_idx = reference.max_pool2d(x64, 3, stride=2, padding=1, return_indices=True)
        assert np.isnan(ref).mean() > 0.5  # most windows hold a NaN
        _check_max(x, y.numpy(), idx.numpy(), ref, ref_idx)
        ref, ref_idx = reference.adaptive_max_pool2d(x64, (2, 3), return_indices=True)
        _check_max(x, ya.numpy(), idxa.numpy(), ref, ref_idx)


# ----------------------------------------------------------------------------
# -D sets and tuning lookups
# ----------------------------------------------------------------------------


@pytest.mark.forced_params
def test_bf16_defines_and_half_params(device):
    """bfloat16 builds carry DTYPE_BF16=1 and DTYPE_HALF=0 and never HALF_RAW, even when it is
    asked for (it is float16's); float32 and float16 builds carry no DTYPE_BF16, so their -D
    sets (and the driver caches keyed on them) are as before."""
    _opencl(device)
    x = _normal(_seed("defines"), (1, 8, 6, 8), shift=1.0)
    seen: dict[str, list[dict[str, int]]] = {}
    for dtype in ("bfloat16", "float32", "float16"):
        xd = x.astype(dtype)
        with built(device) as defines:
            for layout in ("NCHW", "NHWC"):
                xt = hal.asarray(xd, device=device, layout=layout)
                with forced(device, "pool2d", {"HALF_RAW": 1, "VEC": 4}):
                    hal.max_pool2d(xt, 2, stride=2)
                with forced(device, "adaptive_pool2d", {"HALF_RAW": 1, "VEC": 4, "MODE": 1}):
                    hal.adaptive_avg_pool2d(xt, (2, 3))
                with forced(device, "batch_norm", {"HALF_RAW": 1, "VEC": 4}):
                    hal.batch_norm(xt, None, None, training=True)
        seen[dtype] = defines
    assert all(d.get("DTYPE_BF16") == 1 and d["DTYPE_HALF"] == 0 and "HALF_RAW" not in d for d in seen["bfloat16"])
    assert all("DTYPE_BF16" not in d for d in seen["float32"] + seen["float16"])
    assert any(d.get("HALF_RAW") == 1 for d in seen["float16"])  # float16 did take it: the check can fail
    # apart from the dtype macro, bfloat16 builds what float32 builds
    strip = [{k: v for k, v in d.items() if k != "DTYPE_BF16"} for d in seen["bfloat16"]]
    assert strip == seen["float32"]


def test_bf16_tuning_lookups_serve_only_bfloat16_or_dtype_free_entries(device):
    """The only entries that name bfloat16 are sm_90's (session 41: float16's parameters without HALF_RAW;
    sessions 42-43: measured for bfloat16 on an H100, or saying they are not); so a bfloat16 lookup gets the
    schema defaults, an entry that names no dtype (the vendor-guided WG/VEC entries) or such a bfloat16 entry,
    on this device and under every emulated profile; never a float16 or float32 entry; what serves is valid
    on the device."""
    _opencl(device)
    import json
    from importlib import resources

    from hal.backends.opencl import PROFILES, SCHEMAS
    from hal.tuning.table import Tuner

    raw = json.loads((resources.files("hal.tuning") / "tables" / "opencl.json").read_text(encoding="utf-8"))
    bf16_entries = [e for e in raw["entries"] if e.get("key", {}).get("dtype") == "bfloat16"]
    assert bf16_entries and all(
        e["level"] == "arch" and e["match"] == "sm_90" and "HALF_RAW" not in e["params"]
        and ("not measured" in e["provenance"] or e["provenance"].startswith("measured on NVIDIA H100"))
        for e in bf16_entries)
    keys = {
        "pool2d": {"kind": "max", "kernel": "3x3", "stride": "2x2", "dilation": "1x1", "n": 32, "c": 64, "h": 128,
                   "w": 128},
        "adaptive_pool2d": {"kind": "avg", "n": 256, "c": 2048, "h": 8, "w": 8, "out_h": 1, "out_w": 1},
        "conv2d": {"kernel": "3x3", "stride": "1x1", "dilation": "1x1", "groups": "dense", "n": 32, "c": 64,
                   "k": 64, "h": 64, "w": 64},
        "batch_norm": {"mode": "train", "n": 32, "c": 64, "h": 64, "w": 64},
        "eltwise": {"op": "relu", "n": 1 << 20},
    }
    infos: list[DeviceInfo] = [device.info]
    infos += [replace(device.info, vendor=v, arch_family=f, arch=a) for v, f, a in PROFILES.values()]
    served_entries = 0
    for info in infos:
        tuner = Tuner(info, SCHEMAS)
        for kernel, key in keys.items():
            for layout in ("NCHW", "NHWC"):
                full = {**key, "dtype": "bfloat16"} if kernel == "eltwise" else {**key, "dtype": "bfloat16",
                                                                                  "layout": layout}
                got = tuner.resolve(kernel, full)
                assert SCHEMAS[kernel].validate({**SCHEMAS[kernel].defaults(), **got.params}, info) is None
                if got.source.startswith("shipped:"):
                    entry = raw["entries"][int(got.source.rsplit("#", 1)[1])]
                    assert entry.get("key", {}).get("dtype", "bfloat16") == "bfloat16", (info.arch, kernel, entry)
                    assert "measured on" not in entry["provenance"] or "not measured" in entry["provenance"] \
                        or entry["key"].get("dtype") == "bfloat16"
                    served_entries += 1
                else:
                    assert got.level in ("default", "user"), (info.arch, kernel, got)
    assert served_entries  # the profiles' vendor-guided entries did serve: the check above ran


def test_bf16_flag_and_dtype_names():
    """The backend says it serves bfloat16; bfloat16 keys are named as hal names the dtype."""
    from hal.backends.opencl import OpenCLBackend

    assert OpenCLBackend.bfloat16 is True
    assert np.dtype("bfloat16") == BF16 and BF16.name == "bfloat16"
