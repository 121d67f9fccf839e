"""The shape function: padding forms, PyTorch's output-size rule, ceil_mode edge."""

from __future__ import annotations

import numpy as np
import pytest

from hal.errors import HalValueError
from hal.spec import TensorGeometry, adaptive_bins, pool2d_spec, resolve_padding, same_pads, window_output_size


def geom(h, w, c=3, n=1, layout="NCHW"):
    return TensorGeometry(n, c, h, w, layout, np.dtype(np.float32))


def test_padding_forms():
    assert resolve_padding(1, (9, 9), (3, 3), (1, 1), (1, 1)) == (1, 1, 1, 1)
    assert resolve_padding((1, 2), (9, 9), (3, 3), (1, 1), (1, 1)) == (1, 1, 2, 2)
    assert resolve_padding((0, 1, 2, 3), (9, 9), (3, 3), (1, 1), (1, 1)) == (0, 1, 2, 3)
    assert resolve_padding("valid", (9, 9), (3, 3), (1, 1), (1, 1)) == (0, 0, 0, 0)


@pytest.mark.parametrize("size", range(1, 20))
@pytest.mark.parametrize("stride", [1, 2, 3])
@pytest.mark.parametrize("kernel", [1, 2, 3, 4])
def test_same_gives_ceil_size_odd_pixel_at_end(size, stride, kernel):
    top, bottom = same_pads(size, kernel, stride, 1)
    assert bottom - top in (0, 1)
    assert window_output_size(size, kernel, stride, top, bottom, 1, False) == -(-size // stride)


def test_ceil_mode_drops_window_starting_in_padding():
    # 5 wide, kernel 2, stride 2, pad 1: floor 3, ceil would give 4 but the 4th starts in the right padding
    assert window_output_size(5, 2, 2, 1, 1, 1, False) == 3
    assert window_output_size(5, 2, 2, 1, 1, 1, True) == 3
    assert window_output_size(6, 3, 2, 0, 0, 1, True) == 3
    assert window_output_size(6, 3, 2, 0, 0, 1, False) == 2


def test_adaptive_bins_integer_math():
    assert adaptive_bins(10, 3) == [(0, 4), (3, 7), (6, 10)]
    assert adaptive_bins(5, 5) == [(i, i + 1) for i in range(5)]
    assert adaptive_bins(3, 5) == [(0, 1), (0, 2), (1, 2), (1, 3), (2, 3)]


def test_pool_padding_beyond_half_kernel_accepted_when_windows_overlap():
    spec = pool2d_spec("max", geom(5, 5), 3, 1, 2, 1, False, True, None, False)
    assert spec.out_h == 7
    with pytest.raises(HalValueError, match="padding"):
        pool2d_spec("max", geom(5, 5), 2, 1, 2, 1, False, True, None, False)


def test_stride_defaults_to_kernel():
    spec = pool2d_spec("avg", geom(9, 12), (3, 4), None, 0, 1, False, True, None, False)
    assert spec.stride == (3, 4) and (spec.out_h, spec.out_w) == (3, 3)
