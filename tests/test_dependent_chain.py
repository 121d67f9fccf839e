"""A chain of dependent ops enqueued without a synchronize, on every device.

Each op reads the output the op before it wrote, and buffers freed along the way are
handed to later outputs. On the CUDA backend with programmatic dependent launch, a
kernel's blocks start while the kernel ahead of it finishes, and only the wait at its
entry (``HAL_PDL_ENTRY``) keeps it from reading an unfinished input or overwriting a
buffer that is still being read: a missing wait shows here as a wrong result.
"""

from __future__ import annotations

import numpy as np

import hal
from hal import reference
from hal.conformance import TOLERANCES
from hal.tensor import poison_outputs
from strategies import random_input


def _chain(ops: object, x: object, steps: list[tuple[str, dict]]) -> object:
    """Run ``steps`` on ``x`` with ``ops`` (``hal`` or ``reference``), each on the last output."""
    y = x
    for name, kwargs in steps:
        y = getattr(ops, name)(y, **kwargs)
    return y


def test_chain_of_dependent_ops_matches_the_oracle(device):
    shape, c = (4, 24, 80, 88), 24
    rng = np.random.default_rng(17)
    mean, var = rng.standard_normal(c), rng.random(c) + 0.5
    gamma, beta = rng.random(c) + 0.5, rng.standard_normal(c)
    dw = rng.standard_normal((c, 1, 3, 3)) / 3
    bn = {"running_mean": mean, "running_var": var, "weight": gamma, "bias": beta}
    steps = [
        ("max_pool2d", {"kernel_size": 3, "stride": 1, "padding": 1}),
        ("batch_norm", bn),
        ("avg_pool2d", {"kernel_size": 3, "stride": 1, "padding": 1}),
        ("conv2d", {"weight": dw, "padding": 1, "groups": c}),
        ("max_pool2d", {"kernel_size": 2, "stride": 1}),
        ("batch_norm", bn),
        ("avg_pool2d", {"kernel_size": 3, "stride": 1, "padding": 1, "count_include_pad": False}),
    ] * 3 + [("adaptive_avg_pool2d", {"output_size": 5})]
    x = random_input(5, shape, "float32")
    want = _chain(reference, x.astype(np.float64), [(n, {k: np.asarray(v, np.float64) if isinstance(v, np.ndarray)
                                                          else v for k, v in kw.items()}) for n, kw in steps])
    dev_steps = []
    for name, kw in steps:  # the parameter arrays on the device, uploaded before the chain starts
        dev_steps.append((name, {k: hal.asarray(v.astype(np.float32), device=device) if isinstance(v, np.ndarray)
                                 else v for k, v in kw.items()}))
    with poison_outputs():
        got = _chain(hal, hal.asarray(x, device=device), dev_steps).numpy()  # one synchronize, at the end
    tol = TOLERANCES[("conv2d", "float32")]
    err = np.abs(got.astype(np.float64) - want)
    bound = 8 * (tol.atol + tol.rtol * np.abs(want))  # 22 ops, each within its own tolerance
    assert np.isfinite(got).all() and (err <= bound).all(), float((err / bound).max())
