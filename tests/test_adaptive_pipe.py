"""The OpenCL backend's pipelined global pooling (MODE 4: NCHW planes of a build-time size,
a chunk of WG planes staged through registers and local memory while the next chunk's loads
are in flight), forced on each OpenCL device and checked against the float64 oracle: max
with indices on inputs full of ties, NaN and -inf, avg, float32 and float16 (32-bit words of
two halves, planes of odd size starting at odd halves), batches with a partial last chunk and
batches of fewer planes than one chunk. The eligibility rule is checked on fake devices."""

from __future__ import annotations

import types
import zlib

import numpy as np
import pytest
from test_adaptive_flat import _info, _opencl, built, check_avg, check_max, max_input, one_compute_unit  # noqa: F401
from test_forced_params import forced

import hal
from hal import reference
from hal.conformance import compare
from hal.spec import TensorGeometry, adaptive_pool2d_spec
from hal.tensor import poison_outputs
from strategies import random_input

#: work-groups of 32 planes (VEC 4, and VEC 1: float16 words read from a stage of 2-byte
#: vectors, which faulted on the H200 before the stage was declared 16-byte aligned) and 64
#: planes (VEC 8); 2 groups per compute unit on a device of one (see one_compute_unit): each
#: group loops over several chunks, so the register hand-over between chunks runs
PIPE_PARAMS = [{"MODE": 4, "WG": 32, "VEC": 4, "PIPE_GROUPS": 2}, {"MODE": 4, "WG": 64, "VEC": 8, "PIPE_GROUPS": 2},
               {"MODE": 4, "WG": 32, "VEC": 1, "PIPE_GROUPS": 2}]
#: 7x7 and 3x5 (odd: float16 planes start at odd halves on odd lanes), 6x6 (float16 only:
#: float32 lanes 36 words apart conflict 4-way), 1x1 and 2x3
PLANES = [(7, 7), (3, 5), (6, 6), (1, 1), (2, 3)]
#: 3 planes: none in a full chunk; 111: one or three full chunks and a partial one; 1057
#: planes: 16 or 33 full chunks over 2 groups, and a partial one
BATCHES = [(1, 3), (3, 37), (7, 151)]


def _eligible(dtype: str, plane: tuple[int, int]) -> bool:
    from hal.backends.base import fixed_plane_ok

    return fixed_plane_ok(plane[0] * plane[1], np.dtype(dtype).itemsize)


@pytest.mark.parametrize("params", PIPE_PARAMS, ids=lambda p: f"wg{p['WG']}-vec{p['VEC']}")
@pytest.mark.parametrize("batch", BATCHES, ids=lambda b: f"{b[0] * b[1]}planes")
@pytest.mark.parametrize("plane", PLANES, ids=lambda p: f"{p[0]}x{p[1]}")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.usefixtures("one_compute_unit")
def test_adaptive_pipe_matches_oracle(device, kind, dtype, plane, batch, params):
    shape = (*batch, *plane)
    seed = zlib.crc32(repr(("pipe", kind, dtype, plane, batch, params)).encode())
    with forced(device, "adaptive_pool2d", params), built(device) as defines:
        if kind == "max":
            check_max(device, max_input(seed, shape, dtype), 1)
        else:
            check_avg(device, random_input(seed, shape, dtype), 1)
    groups = {d["ADAPTIVE_GROUP"] for d in defines}
    if _eligible(dtype, plane):
        assert groups == {3}, f"the pipe kernels did not run: {defines}"
        assert all(d["PIPE_HW"] == plane[0] * plane[1] for d in defines)
    else:
        assert 3 not in groups, "a plane the bank rule excludes ran the pipe kernels"


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.usefixtures("one_compute_unit")
def test_adaptive_pipe_fused_relu(device, dtype):
    x = random_input(7, (3, 37, 7, 7), dtype)
    with forced(device, "adaptive_pool2d", PIPE_PARAMS[1]), built(device) as defines:
        check_avg(device, x, 1, relu=True)
    assert {d["ADAPTIVE_GROUP"] for d in defines} == {3} and all(d["FUSE_RELU"] == 1 for d in defines)


@pytest.mark.parametrize(("layout", "plane", "out"),
                         [("NHWC", (7, 7), 1), ("NCHW", (8, 8), 1), ("NCHW", (7, 7), (2, 3))])
def test_adaptive_pipe_falls_back_where_it_does_not_apply(device, layout, plane, out):
    """MODE 4 for NHWC, for planes the bank rule excludes (8x8 float32: 8-way) or for outputs
    other than 1x1 runs MODE 0's kernels, and right."""
    _opencl(device)
    x = random_input(11, (2, 5, *plane), "float32")
    with forced(device, "adaptive_pool2d", PIPE_PARAMS[0]), built(device) as defines, poison_outputs():
        y = hal.adaptive_avg_pool2d(hal.asarray(x, device=device, layout=layout), out)
    r = compare("adaptive_avg_pool2d", "float32", y.numpy(), reference.adaptive_avg_pool2d(x.astype(np.float64), out))
    assert r.ok, r.detail
    assert defines and all(d["ADAPTIVE_GROUP"] != 3 for d in defines)


def _pipe(info, plane=(7, 7), out=1, layout="NCHW", dtype="float32", **params):
    from hal.backends.opencl import OpenCLBackend

    geom = TensorGeometry(256, 2048, *plane, layout, np.dtype(dtype))  # type: ignore[arg-type]
    spec = adaptive_pool2d_spec("avg", geom, out, False)
    backend = types.SimpleNamespace(info=info)
    backend._adaptive_flat = lambda spec, p: OpenCLBackend._adaptive_flat(backend, spec, p)  # type: ignore[arg-type]
    return OpenCLBackend._adaptive_pipe(backend, spec,  # type: ignore[arg-type]
                                        {"WG": 128, "VEC": 4, "MODE": 4, "HALF_ARITH": 0, **params})


def test_adaptive_pipe_rule():
    """MODE 4 asks for it, and MODE 0 takes it where it would take the flat kernels (GPUs
    other than Mali); NCHW 1x1 outputs of planes the bank rule admits, whose chunk of WG
    planes fits local memory (less the driver's slack)."""
    gpu = _info()  # 48 KB of local memory
    assert _pipe(gpu) == 49 and _pipe(gpu, dtype="float16") == 49 and _pipe(gpu, plane=(6, 6), dtype="float16") == 36
    assert _pipe(gpu, MODE=0) == 49 and not _pipe(gpu, MODE=3) and not _pipe(gpu, MODE=1)
    assert not _pipe(_info(device_type="CPU"), MODE=0) and _pipe(_info(device_type="CPU")) == 49
    assert not _pipe(_info(family="mali"), MODE=0) and not _pipe(_info(emulated_from="mali"), MODE=0)
    assert not _pipe(gpu, layout="NHWC") and not _pipe(gpu, out=(2, 3))
    assert not _pipe(gpu, plane=(6, 6)) and not _pipe(gpu, plane=(8, 8), dtype="float16")  # bank conflicts
    assert not _pipe(gpu, plane=(9, 9))  # over FIXED_PLANE_MAX
    # WG 256: 256 * 49 float32 + 4 = 50,192 bytes > 48 KB - 1 KB; float16 fits
    assert not _pipe(gpu, WG=256) and _pipe(gpu, WG=256, dtype="float16") == 49
    assert not _pipe(_info(local=16384), WG=128)  # 25,104 bytes > 15 KB


def test_adaptive_plans_are_reused_and_dropped_with_the_device_description(device, monkeypatch):
    """The adaptive launcher stores its plan per (spec, parameters): a repeated call builds
    nothing; replacing the backend's DeviceInfo (as the tests that emulate other devices do)
    drops every plan, so none made for the old description is served."""
    from dataclasses import replace

    _opencl(device)
    x = random_input(21, (2, 6, 7, 7), "float32")
    with built(device) as first:
        check_avg(device, x, 1)
    with built(device, drop_plans=False) as again:
        check_avg(device, x, 1)
    assert len(first) <= 1 and again == [], "a repeated call looked its kernel up again"
    monkeypatch.setattr(device.backend, "info", replace(device.backend.info, compute_units=1))
    with built(device, drop_plans=False) as replanned:
        check_avg(device, x, 1)
    assert len(replanned) == 1, "a plan made for the old DeviceInfo was served"
