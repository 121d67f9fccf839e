"""BatchNorm on every device against the float64 oracle."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from test_forced_params import _kernels_built, forced

import hal
from hal import reference
from hal.conformance import bn_scale, compare
from hal.tensor import poison_outputs
from strategies import SETTINGS, SIMULATOR, dtypes, layouts, random_input, seeds, shapes


def _params(seed, c):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(c).astype(np.float32), rng.uniform(0.5, 2, c).astype(np.float32),
            rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32))


@SETTINGS
@given(shape=shapes(max_hw=24), dtype=dtypes, layout=layouts, seed=seeds, training=st.booleans(),
       affine=st.booleans(), momentum=st.sampled_from([0.1, 0.0, 1.0, 0.37]), eps=st.sampled_from([1e-5, 1e-3]))
def test_batch_norm(device, shape, dtype, layout, seed, training, affine, momentum, eps):
    n, c, h, w = shape
    if training and n * h * w == 1:
        return  # rejected (tested in test_errors)
    x = random_input(seed, shape, dtype)
    rm, rv, weight, bias = _params(seed + 1, c)
    if not affine:
        weight = bias = None
    ref_rm, ref_rv = rm.astype(np.float64), rv.astype(np.float64)
    ref = reference.batch_norm(x.astype(np.float64), ref_rm, ref_rv, weight, bias, training, momentum, eps)
    with poison_outputs():
        y = hal.batch_norm(hal.asarray(x, device=device, layout=layout), rm, rv, weight, bias, training, momentum, eps)
    r = compare("batch_norm", dtype, y.numpy(), ref, bn_scale(x, weight, eps, training, rm, rv))
    assert r.ok, r.detail
    for got, want in ((rm, ref_rm), (rv, ref_rv)):
        r = compare("batch_norm", "float32", got, want)
        assert r.ok, r.detail


@SETTINGS
@given(shape=shapes(max_hw=12, max_c=9), layout=layouts, seed=seeds)
def test_batch_norm_large_mean_small_planes(device, shape, layout, seed):
    """Mean 1e4, std 1, at shapes like conformance's (a few hundred values per channel, as
    many threads as values): statistics merged in float32 without centring keep only about
    1e-3 of the mean, which CUDA's did until session 5 (conformance caught it on the H200)."""
    assume(shape[0] * shape[2] * shape[3] > 1)  # training needs two values per channel
    x = random_input(seed, shape, "float32", mean=1e4)
    c = shape[1]
    rm, rv = np.zeros(c, np.float32), np.ones(c, np.float32)
    ref_rm, ref_rv = rm.astype(np.float64), rv.astype(np.float64)
    ref = reference.batch_norm(x.astype(np.float64), ref_rm, ref_rv, training=True)
    with poison_outputs():
        y = hal.batch_norm(hal.asarray(x, device=device, layout=layout), rm, rv, training=True)
    r = compare("batch_norm", "float32", y.numpy(), ref, bn_scale(x, None, 1e-5, True))
    assert r.ok, r.detail
    assert compare("batch_norm", "float32", rm, ref_rm).ok


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_batch_norm_no_cancellation(device, layout):
    """Mean 1e4, std 1: E[x^2] - E[x]^2 in float32 would lose every digit of the variance."""
    x = random_input(1, (8, 5, 33, 31), "float32", mean=1e4)
    rm, rv = np.zeros(5, np.float32), np.ones(5, np.float32)
    ref_rm, ref_rv = rm.astype(np.float64), rv.astype(np.float64)
    ref = reference.batch_norm(x.astype(np.float64), ref_rm, ref_rv, training=True)
    y = hal.batch_norm(hal.asarray(x, device=device, layout=layout), rm, rv, training=True)
    scale = bn_scale(x, None, 1e-5, True)
    assert scale.max() < 30  # the float32 mean allowance stays far below what cancellation costs
    r = compare("batch_norm", "float32", y.numpy(), ref, scale)
    assert r.ok, r.detail
    r = compare("batch_norm", "float32", rv, ref_rv)
    assert r.ok, r.detail


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_batch_norm_outlier_first_values(device, layout):
    """Every channel's first element at 1e3 among N(0.5, 2) values, so that a statistics pass
    whose sums pivot on the first value of a run meets the outlier there (CUDA's shifted sums
    did until session 45: M2 good to only about n (n + 1) eps / 2). The batch variance, read
    through momentum 1 as the running variance, within 2e-5 of the float64 one; y as conformance
    checks it."""
    rng = np.random.default_rng(45)
    shape = (2, 8, 24, 20) if SIMULATOR else (4, 8, 48, 40)
    x64 = rng.standard_normal(shape) * 2.0 + 0.5
    x64[0, :, 0, 0] = 1e3
    x = x64.astype(np.float32)
    c = shape[1]
    rm, rv = np.zeros(c, np.float32), np.ones(c, np.float32)
    ref_rm, ref_rv = rm.astype(np.float64), rv.astype(np.float64)
    ref = reference.batch_norm(x.astype(np.float64), ref_rm, ref_rv, training=True, momentum=1.0)
    with poison_outputs():
        y = hal.batch_norm(hal.asarray(x, device=device, layout=layout), rm, rv, training=True, momentum=1.0)
    r = compare("batch_norm", "float32", y.numpy(), ref, bn_scale(x, None, 1e-5, True))
    assert r.ok, r.detail
    err = np.abs(rv.astype(np.float64) - ref_rv) / ref_rv
    assert err.max() < 2e-5, f"running variance off by {err.max():.3g} of itself"


def test_batch_norm_running_tensors_on_device(device):
    """Running statistics held as device tensors are updated in place on the device."""
    x = random_input(2, (4, 3, 5, 6), "float32")
    rm, rv, _, _ = _params(3, 3)
    rm_t, rv_t = hal.asarray(rm, device=device), hal.asarray(rv, device=device)
    ref_rm, ref_rv = rm.astype(np.float64), rv.astype(np.float64)
    reference.batch_norm(x.astype(np.float64), ref_rm, ref_rv, training=True, momentum=0.3)
    hal.batch_norm(hal.asarray(x, device=device), rm_t, rv_t, training=True, momentum=0.3)
    assert compare("batch_norm", "float32", rm_t.numpy(), ref_rm).ok
    assert compare("batch_norm", "float32", rv_t.numpy(), ref_rv).ok
    np.testing.assert_array_equal(rm, _params(3, 3)[0])  # the host copy was not touched


def test_batch_norm_large_channel_plane(device):
    """Per-channel reduction over more values than any work-group, with odd tails."""
    x = random_input(4, (3, 7, 97, 89), "float32", mean=3.0)
    rm, rv = np.zeros(7, np.float32), np.ones(7, np.float32)
    for layout in ("NCHW", "NHWC"):
        a, b = rm.copy(), rv.copy()
        ref_rm, ref_rv = rm.astype(np.float64), rv.astype(np.float64)
        ref = reference.batch_norm(x.astype(np.float64), ref_rm, ref_rv, training=True)
        y = hal.batch_norm(hal.asarray(x, device=device, layout=layout), a, b, training=True)
        assert compare("batch_norm", "float32", y.numpy(), ref).ok
        assert compare("batch_norm", "float32", b, ref_rv).ok


def test_tolerance_rejects_cancellation():
    """The mean-1e4 bound is meaningful: E[x^2] - E[x]^2 in float32 fails it."""
    x = random_input(1, (8, 5, 33, 31), "float32", mean=1e4)
    ref = reference.batch_norm(x.astype(np.float64), None, None, training=True)
    mean = x.mean(axis=(0, 2, 3), dtype=np.float32)
    naive_var = (x * x).mean(axis=(0, 2, 3), dtype=np.float32) - mean * mean
    naive = (x - mean[None, :, None, None]) / np.sqrt(np.abs(naive_var)[None, :, None, None] + 1e-5)
    assert not compare("batch_norm", "float32", naive, ref, bn_scale(x, None, 1e-5, True)).ok


# ---- vector paths of the OpenCL kernels, forced ---------------------------------------
# batch_norm.cl takes aligned vector loads/stores where the shape guarantees them (NCHW:
# H*W % VEC == 0, NHWC: C % VEC == 0) and element-aligned code otherwise; the tuning
# tables choose VEC. Each shape below takes a different mix of branches for VEC 4 and 8.
VECTOR_PATH_SHAPES = [
    (2, 8, 4, 6),  # HW 24, C 8: aligned for VEC 4 and 8 in both layouts
    (3, 12, 5, 7),  # HW 35: NCHW unaligned; C 12: NHWC aligned for VEC 4, not 8
    (2, 5, 6, 6),  # HW 36: NCHW aligned for VEC 4, not 8; C 5: NHWC unaligned
    (2, 16, 3, 3),  # C 16: NHWC with fewer than 16 lanes (VEC 4: 4, VEC 8: 2)
    (3, 130, 7, 7),  # HW 49; C 130: several NHWC channel tiles, a partial last vector
    (2, 3, 16, 16),  # C 3: one NHWC lane; HW 256 aligned
    (3, 40, 1, 1),  # HW 1: each NCHW step crosses many planes; C 40 aligned for 4 and 8
    (5, 24, 17, 19),  # several batches of four vectors per work-item, odd tails
]


def _opencl_only(device):
    if device.kind != "opencl":
        pytest.skip("OpenCL batch_norm parameters (VEC)")


def _check_bn(device, shape, dtype, layout, training, relu, seed, mean=3.0):
    """One call against the float64 oracle, outputs NaN-poisoned, running statistics checked."""
    c = shape[1]
    x = random_input(seed, shape, dtype, mean=mean)
    rm, rv, weight, bias = _params(seed + 1, c)
    ref_rm, ref_rv = rm.astype(np.float64), rv.astype(np.float64)
    ref = reference.batch_norm(x.astype(np.float64), ref_rm, ref_rv, weight, bias, training, 0.1, 1e-5)
    if relu:
        ref = reference.relu(ref)
    with poison_outputs():
        y = hal.batch_norm(hal.asarray(x, device=device, layout=layout), rm, rv, weight, bias, training, 0.1, 1e-5,
                           relu=relu)
    got = y.numpy()
    assert not np.isnan(got).any(), f"{shape} {dtype} {layout}: unwritten (poisoned) outputs"
    r = compare("batch_norm", dtype, got, ref, bn_scale(x, weight, 1e-5, training, rm, rv))
    assert r.ok, f"{shape} {dtype} {layout} training={training} relu={relu}: {r.detail}"
    for name, got_s, want in (("running_mean", rm, ref_rm), ("running_var", rv, ref_rv)):
        r = compare("batch_norm", "float32", got_s, want)
        assert r.ok, f"{shape} {dtype} {layout} {name}: {r.detail}"


@pytest.mark.forced_params
@pytest.mark.parametrize("vec", [1, 4, 8])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_batch_norm_vector_paths(device, vec, layout, dtype):
    """Aligned and element-aligned branches of every kernel (stats, finalize, apply, infer),
    training with running statistics and inference, with and without fused ReLU."""
    _opencl_only(device)
    with forced(device, "batch_norm", {"VEC": vec}):
        for i, shape in enumerate(VECTOR_PATH_SHAPES):
            for training in (True, False):
                _check_bn(device, shape, dtype, layout, training, relu=(i + training) % 2 == 1, seed=100 * i + vec)


@pytest.mark.forced_params
def test_batch_norm_training_builds_vec1_for_planes_below_a_vector(device):
    """NCHW training with H*W < VEC builds VEC 1 (no plane holds a whole vector; Intel's CPU
    compiler evaluated the aligned branch's WG / (HW / VEC) there and died of SIGFPE), and
    H*W >= VEC keeps the table's VEC; both against the oracle."""
    _opencl_only(device)
    cases = [((3, 5, 1, 1), 1), ((2, 6, 2, 3), 1), ((2, 4, 3, 3), 8)]
    for dtype in ("float32", "float16"):
        for i, (shape, want_vec) in enumerate(cases):
            with forced(device, "batch_norm", {"VEC": 8}), \
                    _kernels_built(device, ("batch_norm.cl",), lambda f, d: d["VEC"]) as built:
                _check_bn(device, shape, dtype, "NCHW", True, relu=False, seed=40 + i)
            assert built and set(built) == {want_vec}, (shape, dtype, built)


@pytest.mark.forced_params
@pytest.mark.parametrize("vec", [4, 8])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_batch_norm_half_raw(device, vec, layout):
    """float16 aligned vectors as raw 16-bit words (HALF_RAW, hal_ldrawN / hal_strawN):
    the same shapes and branches as the vector-path test, training and inference."""
    _opencl_only(device)
    with forced(device, "batch_norm", {"VEC": vec, "HALF_RAW": 1}):
        for i, shape in enumerate(VECTOR_PATH_SHAPES):
            for training in (True, False):
                _check_bn(device, shape, "float16", layout, training, relu=(i + training) % 2 == 0,
                          seed=500 + 10 * i + vec)


#: (shape, VEC, WG) for INFER_LOOP: C / VEC divides WG (the loop runs: C 8, 32 and 64, odd
#: pixel counts, over 2 and 132 compute units: many vectors per work-item, a partial last
#: batch of four), or does not (the plain kernel serves: C 24 / VEC 8, C 130, C 12 / VEC 8)
INFER_LOOP_CASES = [((2, 8, 4, 6), 4, 32), ((5, 32, 17, 19), 8, 32), ((3, 64, 9, 11), 4, 64),
                    ((3, 64, 9, 11), 8, 256), ((5, 24, 17, 19), 8, 64), ((3, 130, 7, 7), 4, 64),
                    ((3, 12, 5, 7), 8, 32)]


@pytest.mark.forced_params
@pytest.mark.parametrize("compute_units", [2, 132])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_batch_norm_infer_loop(device, monkeypatch, dtype, compute_units):
    """NHWC inference with INFER_LOOP: each work-item loops over the vectors of its channels
    (the launcher caps the grid at 8 groups per compute unit), checked against the oracle
    with NaN-poisoned outputs, with and without fused ReLU; and the build it asked for."""
    from hal.backends.opencl import _bn_infer_loop

    _opencl_only(device)
    backend = device.backend
    monkeypatch.setattr(backend, "info", dataclasses.replace(backend.info, compute_units=compute_units))
    for i, (shape, vec, wg) in enumerate(INFER_LOOP_CASES):
        params = {"VEC": vec, "WG": wg, "INFER_LOOP": 1, "HALF_RAW": int(dtype == "float16")}
        spec = hal.spec.batch_norm_spec(hal.asarray(np.zeros(shape, dtype), device=device, layout="NHWC").geometry(),
                                        False, 0.1, 1e-5, True)
        loops = _bn_infer_loop(spec, {**device.tuner.schemas["batch_norm"].defaults(), **params})
        assert loops == (shape[1] % vec == 0 and wg % (shape[1] // vec) == 0)
        with forced(device, "batch_norm", params):
            _check_bn(device, shape, dtype, "NHWC", False, relu=i % 2 == 1, seed=900 + 10 * i + vec)


@pytest.mark.forced_params
@pytest.mark.parametrize("wg", [32, 256])
@pytest.mark.parametrize("vec", [1, 4, 8])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_batch_norm_gpu_grid(device, monkeypatch, wg, vec, layout):
    """The statistics grid a 132-unit GPU gets (many chunks per channel, finalize merging
    each channel's partials with several work-items, several channels per group), on
    whatever device runs the test: only the launcher's geometry depends on the unit count. On a
    simulator (Oclgrind) the 64-channel tensor has 4x9x7 planes instead of 4x32x32 (the same
    channels per group) and the 64x64 planes are left to the 61x67 ones (the same many chunks per
    channel, and a tail): 71 % fewer elements (the 12 cases took 150 s of its CPU time)."""
    _opencl_only(device)
    backend = device.backend
    extras = tuple((k, "GPU" if k == "device_type" else v) for k, v in backend.info.extras)
    monkeypatch.setattr(backend, "info", dataclasses.replace(backend.info, compute_units=132, extras=extras))
    shapes = [(4, 5, 61, 67), (4, 64, 9, 7), (4, 130, 7, 7), (64, 3, 8, 8)] if SIMULATOR else \
        [(4, 5, 64, 64), (4, 5, 61, 67), (4, 64, 32, 32), (4, 130, 7, 7), (64, 3, 8, 8)]
    with forced(device, "batch_norm", {"WG": wg, "VEC": vec}):
        for i, shape in enumerate(shapes):
            for dtype in ("float32", "float16"):
                _check_bn(device, shape, dtype, layout, True, relu=i % 2 == 1, seed=7 * i + vec)


@pytest.mark.forced_params
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("vec", [1, 4, 8])
def test_batch_norm_vector_paths_no_cancellation(device, layout, vec):
    """Mean 1e4, std 1 through each vector width (the batch merge keeps the centring)."""
    _opencl_only(device)
    x = random_input(5, (4, 8, 12, 12), "float32", mean=1e4)
    rm, rv = np.zeros(8, np.float32), np.ones(8, np.float32)
    ref_rm, ref_rv = rm.astype(np.float64), rv.astype(np.float64)
    ref = reference.batch_norm(x.astype(np.float64), ref_rm, ref_rv, training=True)
    with forced(device, "batch_norm", {"VEC": vec}), poison_outputs():
        y = hal.batch_norm(hal.asarray(x, device=device, layout=layout), rm, rv, training=True)
    r = compare("batch_norm", "float32", y.numpy(), ref, bn_scale(x, None, 1e-5, True))
    assert r.ok, r.detail
    r = compare("batch_norm", "float32", rv, ref_rv)
    assert r.ok, r.detail


@pytest.mark.parametrize("params", [{"BN_INFER_TILES": 1}, {"BN_INFER_TILES": 1, "BN_THREADS": 128, "BN_UNROLL": 2},
                                    {"BN_INFER_TILES": 1, "BN_FLAT_REG": 0, "BN_UNROLL": 8}],
                         ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_cuda_batch_norm_infer_tiles(device, params, layout, dtype):
    """CUDA flat inference with a block per tile (BN_INFER_TILES) instead of one persistent
    wave: every vector written once, at vector counts that are not multiples of a tile."""
    if device.kind != "cuda":
        pytest.skip("CUDA batch_norm parameters (BN_INFER_TILES)")
    with forced(device, "batch_norm", params):
        for i, shape in enumerate([*VECTOR_PATH_SHAPES, (7, 64, 12, 20)]):
            _check_bn(device, shape, dtype, layout, training=False, relu=i % 2 == 1, seed=300 + i)


@pytest.mark.parametrize("params", [{"BN_INFER_EARLY": 1}, {"BN_INFER_EARLY": 1, "BN_FLAT_REG": 0},
                                    {"BN_INFER_EARLY": 1, "BN_INFER_TILES": 1, "BN_THREADS": 128, "BN_UNROLL": 2}],
                         ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_cuda_batch_norm_infer_early(device, params, layout, dtype):
    """CUDA flat inference with the first tile's loads issued before the channel constants
    (BN_INFER_EARLY): every vector written once, persistent blocks walking several tiles
    (the 64-image shape) as well as one."""
    if device.kind != "cuda":
        pytest.skip("CUDA batch_norm parameters (BN_INFER_EARLY)")
    with forced(device, "batch_norm", params):
        for i, shape in enumerate([*VECTOR_PATH_SHAPES, (7, 64, 12, 20), (64, 64, 32, 36)]):
            _check_bn(device, shape, dtype, layout, training=False, relu=i % 2 == 1, seed=500 + i)


@pytest.mark.parametrize("params", [{"BN_APPLY_MERGE": 1}, {"BN_APPLY_MERGE": 1, "BN_THREADS": 128, "BN_UNROLL": 2,
                                                             "BN_BLOCKS_PER_SM": 32},
                                    {"BN_APPLY_MERGE": 1, "BN_L2_HINT": 0, "BN_BLOCKS_PER_SM": 2}],
                         ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_cuda_batch_norm_apply_merged(device, params, dtype):
    """CUDA NCHW training without the finalize launch (BN_APPLY_MERGE): each apply block merges
    its channel's partials. Slab counts from 1 to past one warp's 32 (the merge loops), planes
    aligned and not, large means (the pivot), running statistics updated once."""
    if device.kind != "cuda":
        pytest.skip("CUDA batch_norm parameters (BN_APPLY_MERGE)")
    with forced(device, "batch_norm", params):
        for i, shape in enumerate([*VECTOR_PATH_SHAPES, (7, 64, 12, 20), (64, 3, 40, 40), (33, 2, 17, 19)]):
            _check_bn(device, shape, dtype, "NCHW", training=True, relu=i % 2 == 1, seed=400 + i,
                      mean=3.0 if i % 3 else 1e3)
