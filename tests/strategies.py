"""Hypothesis strategies for op configurations: shapes that are multiples of nothing."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from hal.dtypes import BFLOAT16

#: examples per property test; raise with HAL_TEST_EXAMPLES for a longer fuzz
EXAMPLES = int(os.environ.get("HAL_TEST_EXAMPLES", "25"))

#: set by tools/opencl_oclgrind.py: the device interprets every work-item (seconds per megabyte), so
#: the few tests that size a tensor for a GPU's grid take a smaller one of the same kind instead
SIMULATOR = os.environ.get("HAL_TEST_SIMULATOR") == "1"

SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
    derandomize=False,
)

#: the float dtypes; bfloat16 where ml_dtypes is installed (a bare GPU machine may lack it)
FLOAT_NAMES = ["float32", "float16", *(["bfloat16"] if BFLOAT16 is not None else [])]
dtypes = st.sampled_from(FLOAT_NAMES)
layouts = st.sampled_from(["NCHW", "NHWC"])
seeds = st.integers(0, 2**32 - 1)


@st.composite
def shapes(draw: st.DrawFn, max_hw: int = 40, max_c: int = 130) -> tuple[int, int, int, int]:
    """(N, C, H, W): batch 1 to 3, channels 1 to max_c, spatial 1 to max_hw."""
    n = draw(st.integers(1, 3))
    c = draw(st.one_of(st.integers(1, 9), st.integers(1, max_c)))
    h = draw(st.integers(1, max_hw))
    w = draw(st.integers(1, max_hw))
    return (n, c, h, w)


def padding_forms(max_pad: int = 3) -> st.SearchStrategy[Any]:
    """Every padding form: int, (ph, pw), (top, bottom, left, right), 'valid', 'same'."""
    p = st.integers(0, max_pad)
    return st.one_of(
        p,
        st.tuples(p, p),
        st.tuples(p, p, p, p),
        st.sampled_from(["valid", "same"]),
    )


def random_input(seed: int, shape: tuple[int, ...], dtype: str, nan_fraction: float = 0.0,
                 mean: float = 0.0) -> np.ndarray:
    """Fresh random normal data (never zeros), optionally with NaNs, in ``dtype``."""
    rng = np.random.default_rng(seed)
    x = mean + rng.standard_normal(shape)
    if nan_fraction:
        x[rng.random(shape) < nan_fraction] = np.nan
    return x.astype(dtype)


def pool_oracle(kind: str, x: np.ndarray, **cfg: Any) -> Any:
    """The float64 oracle of ``kind`` ("max" or "avg") pooling of ``x``; a drawn
    configuration the spec rejects (a window wholly in the padding) is discarded."""
    from hypothesis import assume

    from hal import reference
    from hal.errors import HalValueError

    fn = reference.max_pool2d if kind == "max" else reference.avg_pool2d
    try:
        return fn(x.astype(np.float64), **cfg)
    except HalValueError:
        assume(False)
