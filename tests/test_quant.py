"""int8/uint8 quantization: ONNX semantics, every device that implements it, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import hal
from hal import reference
from hal.errors import HalValueError
from hal.quant import dequantize_array, qparams, quantize_array
from hal.spec import QConv2dSpec, TensorGeometry, conv2d_spec, pool2d_spec
from hal.tensor import poison_outputs
from strategies import SETTINGS, layouts, padding_forms, seeds

qdtypes = st.sampled_from(["int8", "uint8"])


def _needs(device, flag):
    if not getattr(type(device.backend), flag):
        pytest.skip(f"{device.kind} backend: {flag.replace('_', ' ')} not implemented")


def test_quantize_rounds_half_to_even_and_saturates():
    q = qparams(0.5, 1, np.dtype(np.int8))
    x = np.array([0.25, 0.75, 1.25, -0.25, 100.0, -100.0], np.float32)  # x / 0.5 = .5, 1.5, 2.5, -.5, 200, -200
    np.testing.assert_array_equal(quantize_array(x, q, np.dtype(np.int8)), [1, 3, 3, 1, 127, -128])
    np.testing.assert_array_equal(dequantize_array(np.array([1, 3], np.int8), q), [0.0, 1.0])


def test_quantize_saturates_before_converting_to_integers():
    """Values past the range, +-inf and a tiny scale give the range's ends, NaN the zero point (session 25: a
    cast to int64 before the clip turned 1e20 and +inf into -128)."""
    x = np.array([1e20, np.inf, -np.inf, np.nan, 1.0], np.float32)
    np.testing.assert_array_equal(quantize_array(x, qparams(1.0, 3, np.dtype(np.int8)), np.dtype(np.int8)),
                                  [127, 127, -128, 3, 4])
    np.testing.assert_array_equal(quantize_array(x, qparams(1.0, 128, np.dtype(np.uint8)), np.dtype(np.uint8)),
                                  [255, 255, 0, 128, 129])
    np.testing.assert_array_equal(hal.quantize(np.ones(2, np.float32), 1e-30, device="cpu").numpy(), [127, 127])


def test_quantize_takes_per_channel_zero_points_with_one_scale():
    w = np.random.default_rng(2).standard_normal((4, 3, 3, 3)).astype(np.float32)
    q = hal.quantize(w, 0.1, zero_point=[0, 1, 2, 3], device="cpu")
    np.testing.assert_array_equal(q.zero_point, [0, 1, 2, 3])
    np.testing.assert_array_equal(q.numpy()[2], np.clip(np.rint(w[2] / np.float32(0.1)) + 2, -128, 127))


def test_quantize_matches_torch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32) * 3
    for dt, tdt, zp in (("int8", torch.qint8, -3), ("uint8", torch.quint8, 128)):
        want = torch.quantize_per_tensor(torch.from_numpy(x), 0.037, zp, tdt).int_repr().numpy()
        got = quantize_array(x, qparams(0.037, zp, np.dtype(dt)), np.dtype(dt))
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "call,arg",
    [
        (lambda: hal.quantize(np.ones((1, 1, 2, 2)), 0.0, 0, device="cpu"), "scale"),
        (lambda: hal.quantize(np.ones((1, 1, 2, 2)), -1.0, 0, device="cpu"), "scale"),
        (lambda: hal.quantize(np.ones((1, 1, 2, 2)), 0.1, 200, device="cpu"), "zero_point"),
        (lambda: hal.quantize(np.ones((1, 1, 2, 2)), 0.1, -1, dtype="uint8", device="cpu"), "zero_point"),
        (lambda: hal.quantize(np.ones((3, 1, 2, 2)), [0.1, 0.2], 0, device="cpu"), "scale"),
        (lambda: hal.quantize(np.ones((2, 1, 2, 2)), [0.1, 0.2], [0, 1, 2], device="cpu"), "zero_point"),
        (lambda: hal.asarray(np.ones((1, 1, 2, 2), np.int8), device="cpu", scale=0.0, zero_point=0), "scale"),
        (lambda: hal.avg_pool2d(hal.asarray(np.ones((1, 1, 4, 4), np.int8), device="cpu"), 2), "input"),
        (lambda: hal.conv2d(hal.quantize(np.ones((1, 2, 4, 4)), 0.1, 0, device="cpu"),
                            np.ones((3, 2, 3, 3), np.float32)), "weight"),
        (lambda: hal.conv2d(hal.quantize(np.ones((1, 2, 4, 4)), 0.1, 0, device="cpu"),
                            hal.quantize(np.ones((3, 2, 3, 3)), [0.1, 0.2, 0.3], [0, 0], device="cpu")), "zero_point"),
        (lambda: hal.conv2d(hal.quantize(np.ones((1, 2, 4, 4)), 0.1, 0, device="cpu"),
                            hal.quantize(np.ones((3, 2, 3, 3)), 0.1, 0, device="cpu"),
                            np.ones(3, np.float32)), "bias"),
        (lambda: hal.dequantize(hal.asarray(np.ones((1, 1, 2, 2), np.float32), device="cpu")), "q"),
        (lambda: hal.quantize(np.ones(2, np.float32), 1e-50, device="cpu"), "scale"),  # 0 in float32
        (lambda: hal.quantize(np.ones(2, np.float32), 1e300, device="cpu"), "scale"),  # inf in float32
        (lambda: hal.quantize(np.ones(2, np.float32), "abc", device="cpu"), "scale"),
        (lambda: hal.quantize(np.ones(2, np.float32), 0.1, dtype="foo", device="cpu"), "dtype"),
        (lambda: hal.quantize(np.ones((1, 1, 2, 2)), 0.1, [0, 1], device="cpu"), "zero_point"),
        # fused ReLU is float only: refused on quantized data rather than ignored (session 25)
        (lambda: hal.max_pool2d(hal.quantize(-np.ones((1, 1, 4, 4)), 0.1, 3, device="cpu"), 2, relu=True), "relu"),
        (lambda: hal.avg_pool2d(hal.quantize(-np.ones((1, 1, 4, 4)), 0.1, 3, device="cpu"), 2, relu=True), "relu"),
        (lambda: hal.conv2d(hal.quantize(np.ones((1, 2, 4, 4)), 0.1, 0, device="cpu"),
                            hal.quantize(np.ones((3, 2, 3, 3)), 0.1, 0, device="cpu"), output_scale=0.1, relu=True),
         "relu"),
        (lambda: hal.conv2d(hal.asarray(np.ones((1, 2, 4, 4), np.float32), device="cpu"),
                            np.ones((3, 2, 3, 3), np.float32), output_dtype="int8"), "output_dtype"),
        (lambda: hal.conv2d(hal.quantize(np.ones((1, 2, 4, 4)), 0.1, 0, device="cpu"),
                            hal.quantize(np.ones((3, 2, 3, 3)), 0.1, 0, device="cpu"), output_scale=0.1,
                            output_dtype="float32"), "output_dtype"),
        (lambda: hal.conv2d(hal.quantize(np.ones((1, 2, 4, 4)), 0.1, 0, device="cpu"),
                            hal.quantize(np.ones((3, 2, 3, 3)), 0.1, 0, device="cpu"), output_scale=0.1,
                            output_dtype="foo"), "output_dtype"),
        (lambda: hal.fold_batch_norm(np.ones((2, 1, 1, 1)), None, np.zeros(2), np.ones(2), eps=float("nan")), "eps"),
        (lambda: hal.fold_batch_norm(np.ones((2, 1, 1, 1)), None, np.zeros(2), np.ones(2), eps=-1e-6), "eps"),
        (lambda: hal.fold_batch_norm(hal.quantize(np.ones((2, 1, 1, 1)), 0.1, device="cpu"), None, np.zeros(2),
                                     np.ones(2)), "weight"),
    ],
)
def test_bad_quantization_arguments(call, arg):
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    assert str(info.value).startswith(arg), str(info.value)


def test_fold_batch_norm_equals_conv_then_bn():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 7, 6))
    w, b = rng.standard_normal((5, 4, 3, 3)), rng.standard_normal(5)
    mean, var = rng.standard_normal(5), rng.uniform(0.5, 2, 5)
    gamma, beta = rng.standard_normal(5), rng.standard_normal(5)
    fw, fb = hal.fold_batch_norm(w, b, mean, var, gamma, beta, 1e-5)
    want = reference.batch_norm(reference.conv2d(x, w, b, padding=1), mean, var, gamma, beta, False, 0.1, 1e-5)
    np.testing.assert_allclose(reference.conv2d(x, fw.astype(np.float64), fb.astype(np.float64), padding=1), want,
                               rtol=1e-5, atol=1e-5)


@SETTINGS
@given(shape=st.tuples(st.integers(1, 2), st.integers(1, 20), st.integers(1, 19), st.integers(1, 19)),
       k=st.integers(1, 4), stride=st.integers(1, 3), padding=padding_forms(2), ceil=st.booleans(),
       kind=st.sampled_from(["max", "avg"]), dtype=qdtypes, layout=layouts, seed=seeds,
       include_pad=st.booleans())
def test_quantized_pooling(device, shape, k, stride, padding, ceil, kind, dtype, layout, seed, include_pad):
    _needs(device, "quantized_pooling")
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    q = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    zp = int(rng.integers(info.min, info.max + 1))
    geom = TensorGeometry(*shape, "NCHW", np.dtype(dtype))
    try:
        spec = pool2d_spec(kind, geom, k, stride, padding, 1, ceil, include_pad, None, False)
    except HalValueError:
        assume(False)
    if kind == "avg":
        from dataclasses import replace
        spec = replace(spec, zero_point=zp)
    want, _ = reference.quantized_pool2d_from_spec(spec, q)
    qt = hal.asarray(q, device=device, layout=layout, scale=0.1, zero_point=zp)
    with poison_outputs():
        if kind == "max":
            y = hal.max_pool2d(qt, k, stride, padding, ceil_mode=ceil)
        else:
            y = hal.avg_pool2d(qt, k, stride, padding, ceil_mode=ceil, count_include_pad=include_pad)
    assert y.dtype == np.dtype(dtype) and y.scale == 0.1 and y.zero_point == zp
    np.testing.assert_array_equal(y.numpy(), want)


@SETTINGS
@given(n=st.integers(1, 2), groups=st.sampled_from([1, 1, 2, 3]), cin=st.integers(1, 5), cout=st.integers(1, 5),
       hw=st.tuples(st.integers(1, 12), st.integers(1, 12)), k=st.integers(1, 3), stride=st.integers(1, 2),
       padding=padding_forms(1), xdt=qdtypes, wdt=qdtypes, per_channel=st.booleans(), bias=st.booleans(),
       linear=st.booleans(), layout=layouts, seed=seeds)
def test_quantized_conv(device, n, groups, cin, cout, hw, k, stride, padding, xdt, wdt, per_channel, bias, linear,
                        layout, seed):
    _needs(device, "quantized_conv")
    rng = np.random.default_rng(seed)
    c_in, c_out = cin * groups, cout * groups
    xi, wi = np.iinfo(xdt), np.iinfo(wdt)
    x = rng.integers(xi.min, xi.max + 1, (n, c_in, *hw)).astype(xdt)
    w = rng.integers(wi.min, wi.max + 1, (c_out, cin, k, k)).astype(wdt)
    x_zp = int(rng.integers(xi.min, xi.max + 1))
    w_scale = rng.uniform(0.01, 0.05, c_out) if per_channel else 0.02
    w_zp = rng.integers(wi.min // 4, wi.max // 4 + 1, c_out) if per_channel else int(rng.integers(-3, 4)) % (wi.max + 1)
    b = rng.integers(-5000, 5000, c_out).astype(np.int32) if bias else None
    try:
        conv = conv2d_spec(TensorGeometry(n, c_in, *hw, "NCHW", np.dtype(xdt)), w.shape, bias, (c_out,), stride,
                           padding, 1, groups)
    except HalValueError:
        assume(False)
    xt = hal.asarray(x, device=device, layout=layout, scale=0.03, zero_point=x_zp)
    wt = hal.asarray(w, device=device, scale=w_scale, zero_point=w_zp)
    w_zp_arr = np.broadcast_to(np.asarray(w_zp, np.int64), (c_out,))
    kw = {"stride": stride, "padding": padding, "groups": groups}
    with poison_outputs():
        if linear:
            y = hal.conv2d(xt, wt, b, output_scale=0.5, output_zero_point=3, **kw)
        else:
            y = hal.conv2d(xt, wt, b, **kw)
    out_dtype = np.dtype(xdt) if linear else np.dtype(np.int32)
    multiplier = 0.03 * np.broadcast_to(np.asarray(w_scale, np.float64), (c_out,)) / 0.5 if linear else None
    spec = QConv2dSpec(conv, np.dtype(wdt), out_dtype, x_zp, 3 if linear else 0, per_channel)
    want = reference.qconv2d_from_spec(spec, x, w, b, w_zp_arr, multiplier)
    got = y.numpy()
    assert got.dtype == out_dtype
    if linear:  # float32 requantization may land one step off the float64 oracle at a tie
        assert np.abs(got.astype(np.int64) - want.astype(np.int64)).max() <= 1
        assert y.scale == 0.5 and y.zero_point == 3
    else:
        np.testing.assert_array_equal(got, want)
