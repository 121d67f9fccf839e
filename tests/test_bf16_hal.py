"""bfloat16 in the op layer: the dtype, transfers, PyTorch's tensors, and backends without it.

The kernels' bfloat16 paths are checked per backend (tests/test_bf16_<backend>.py) and by the
conformance matrix; these tests hold what the op layer promises on every device.
"""

from __future__ import annotations

import numpy as np
import pytest

import hal
from hal.conformance import DEFAULT_DTYPES, run_case
from hal.dtypes import BFLOAT16, FLOAT_DTYPES, as_dtype, transferable
from hal.errors import HalTypeError, UnsupportedOperation

ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 needs ml_dtypes")

BF16 = np.dtype(ml_dtypes.bfloat16)


def _words(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values).view(np.uint16)


def test_the_dtype_is_ml_dtypes_bfloat16():
    assert BFLOAT16 == BF16
    assert BF16 in FLOAT_DTYPES
    assert as_dtype("bfloat16") == BF16
    assert as_dtype("torch.bfloat16") == BF16
    assert "bfloat16" in DEFAULT_DTYPES
    assert transferable(np.zeros(3, BF16)).dtype == np.uint16
    assert transferable(np.zeros(3, np.float16)).dtype == np.float16


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_round_trip_keeps_every_bit(device, layout):
    rng = np.random.default_rng()
    words = rng.integers(0, 1 << 16, (2, 3, 5, 7), dtype=np.uint16)
    x = words.view(BF16)  # every pattern: NaNs with payloads, infinities, subnormals, -0
    t = hal.asarray(x, device=device, layout=layout)
    assert t.dtype == BF16
    back = t.numpy()
    assert back.dtype == BF16
    np.testing.assert_array_equal(_words(back), words)


def test_float32_input_rounds_to_nearest_even(device):
    # 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even one (1.0);
    # 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: ties go to 1 + 2^-6
    values = np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 3.0e38, np.inf, np.nan], np.float32)
    t = hal.asarray(values.reshape(1, 1, 1, -1), device=device, dtype="bfloat16")
    np.testing.assert_array_equal(_words(t.numpy()).ravel(), _words(values.astype(BF16)))
    assert t.numpy().astype(np.float32).ravel()[:3].tolist() == [1.0, 1 + 2**-6, -1.0]


def test_torch_bfloat16_tensors_come_in_through_the_host(device):
    torch = pytest.importorskip("torch")
    src = torch.randn(2, 3, 4, 5, dtype=torch.bfloat16)
    t = hal.asarray(src, device=device)
    assert t.dtype == BF16
    np.testing.assert_array_equal(t.numpy().astype(np.float32), src.float().numpy())
    assert src.dtype == torch.bfloat16  # the caller's tensor is untouched


def test_bfloat16_has_no_cuda_array_interface(device):
    t = hal.asarray(np.ones((1, 1, 2, 2), np.float32), device=device, dtype="bfloat16")
    assert not hasattr(t, "__cuda_array_interface__")


def test_a_backend_without_bfloat16_refuses_it(device, monkeypatch):
    monkeypatch.setattr(type(device.backend), "bfloat16", False)
    x = hal.asarray(np.random.default_rng().standard_normal((1, 2, 5, 5)), device=device, dtype="bfloat16")
    for call in (lambda: hal.max_pool2d(x, 2), lambda: hal.avg_pool2d(x, 2),
                 lambda: hal.adaptive_avg_pool2d(x, 1), lambda: hal.relu(x),
                 lambda: hal.batch_norm(x, None, None, training=True),
                 lambda: hal.conv2d(x, np.ones((2, 2, 3, 3), np.float32))):
        with pytest.raises(UnsupportedOperation, match="bfloat16 is not implemented on the"):
            call()
    case = next(c for c in hal.conformance.CASES if c.op == "max_pool2d")
    result = run_case(case, device, "bfloat16", "NCHW", np.random.default_rng())
    assert result.skipped and "bfloat16 not implemented" in result.skipped


def test_unknown_dtype_names_are_refused():
    with pytest.raises(HalTypeError, match="dtype: expected a dtype name"):
        as_dtype("bfloat8")


def test_quantize_and_fold_take_bfloat16(device):
    from hal.quant import fold_batch_norm

    x = np.random.default_rng().standard_normal((1, 2, 5, 7)).astype(BF16)
    # bfloat16 widens to float32 exactly: it quantizes as its float32 values do (ONNX: x / scale in float32)
    want = hal.quantize(x.astype(np.float32), 0.05, 3, dtype="int8").numpy()
    assert len(np.unique(want)) > 10
    for source in (x, hal.asarray(x, device=device)):
        q = hal.quantize(source, 0.05, 3, dtype="int8")
        np.testing.assert_array_equal(q.numpy(), want)
    w, _ = fold_batch_norm(np.ones((2, 2, 3, 3), BF16), None, np.zeros(2), np.full(2, 4.0))
    assert w.dtype == np.float32 and np.allclose(w, 1 / np.sqrt(4.0 + 1e-5))


def test_bfloat16_calls_reuse_their_plan(device):
    from hal import ops

    x = hal.asarray(np.random.default_rng().standard_normal((1, 3, 9, 9)), device=device, dtype="bfloat16")
    hal.max_pool2d(x, 3, 2, 1)
    assert any(k[0] is ops._max_pool2d_plan and k[4] == BF16 for k in ops._PLANS if isinstance(k, tuple))


class _FakeCudaArray:
    """What PyTorch's int16 view of a bfloat16 CUDA tensor exports: int16 words and a device pointer."""

    def __init__(self, shape: tuple[int, ...], strides: tuple[int, ...] | None, typestr: str = "<i2") -> None:
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (0xBEEF00, False),
                                         "strides": strides, "version": 3}


class _WrappingBackend:
    def wrap(self, pointer: int, nbytes: int, owner: object) -> tuple[int, int]:
        return (pointer, nbytes)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_cuda_words_are_read_as_bfloat16_without_a_copy(layout):
    """The import path that tests/test_dlpack.py drives with PyTorch on a GPU, checked here without one:
    int16 words read as bfloat16 keep their pointer, shape and layout; a dtype of another size is refused."""
    from types import SimpleNamespace

    from hal.tensor import _from_cuda_interface

    n, c, h, w = 2, 6, 9, 11
    strides = None if layout == "NCHW" else (h * w * c * 2, 2, w * c * 2, c * 2)
    dev = SimpleNamespace(backend=_WrappingBackend(), kind="cuda")
    t = _from_cuda_interface(_FakeCudaArray((n, c, h, w), strides), dev, None, layout, BF16)
    assert t is not None and t.dtype == BF16 and t.layout == layout and t.shape == (n, c, h, w)
    assert t.buffer == (0xBEEF00, n * c * h * w * 2)
    assert _from_cuda_interface(_FakeCudaArray((n, c, h, w), strides), dev, "bfloat16", layout, BF16) is not None
    assert _from_cuda_interface(_FakeCudaArray((n, c, h, w), strides), dev, "float16", layout, BF16) is None
    assert _from_cuda_interface(_FakeCudaArray((n, c, h, w), strides, "<f4"), dev, None, layout, BF16) is None
    with pytest.raises(HalTypeError, match="int16"):  # without the reinterpretation, int16 is no hal dtype
        _from_cuda_interface(_FakeCudaArray((n, c, h, w), strides), dev, None, layout)
