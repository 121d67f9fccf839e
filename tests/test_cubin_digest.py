"""The digest of one kernel's compiled code (backends/cubin.py) and CUDA's built signature, the
tuner's check that two -D sets build the same kernel, on cubins nvcc builds here (no GPU needed)."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hal.backends import cubin

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (builds cubins, runs nothing)")

_TWO_KERNELS = r"""
extern "C" __global__ void scale(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * SCALE;
}
extern "C" __global__ void shift(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + SHIFT;
}
"""


def _nvcc(source: Path, out: Path, options: list[str], include: Path | None = None) -> bytes:
    cmd = ["nvcc", "-cubin", "-arch=sm_90", *options, "-o", str(out), str(source)]
    if include is not None:
        cmd.insert(1, f"-I{include}")
    subprocess.run(cmd, check=True, capture_output=True)
    return out.read_bytes()


def test_a_macro_only_one_kernel_reads_changes_only_that_kernels_digest(tmp_path):
    src = tmp_path / "two.cu"
    src.write_text(_TWO_KERNELS)
    a = _nvcc(src, tmp_path / "a.cubin", ["-DSCALE=2.0f", "-DSHIFT=1.0f"])
    b = _nvcc(src, tmp_path / "b.cubin", ["-DSCALE=2.0f", "-DSHIFT=3.0f"])
    assert a != b  # the whole cubin differs: no key for "the same kernel"
    assert cubin.kernels(a) == cubin.kernels(b) == ["scale", "shift"]
    assert cubin.kernel_digest(a, "scale") == cubin.kernel_digest(b, "scale")
    assert cubin.kernel_digest(a, "shift") != cubin.kernel_digest(b, "shift")
    assert cubin.kernel_digest(a, "scale") != cubin.kernel_digest(a, "shift")


def test_register_count_and_launch_bounds_reach_the_digest(tmp_path):
    """Only the register budget differs (__launch_bounds__'s minimum blocks): the code and the
    register count the module's attribute table records for the kernel both count."""
    src = tmp_path / "bounds.cu"
    src.write_text(r"""
extern "C" __global__ void __launch_bounds__(256, MINB) chain(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc[24];
    #pragma unroll
    for (int k = 0; k < 24; ++k) acc[k] = x[(i + k * 977) % n];
    float s = 0.f;
    #pragma unroll
    for (int k = 0; k < 24; ++k) s += acc[k] * acc[(k * 7) % 24];
    if (i < n) y[i] = s;
}
""")
    lo = _nvcc(src, tmp_path / "lo.cubin", ["-DMINB=1"])
    hi = _nvcc(src, tmp_path / "hi.cubin", ["-DMINB=8"])
    same = _nvcc(src, tmp_path / "same.cubin", ["-DMINB=1"])
    assert cubin.kernel_digest(lo, "chain") == cubin.kernel_digest(same, "chain")
    assert cubin.kernel_digest(lo, "chain") != cubin.kernel_digest(hi, "chain")


def test_module_constants_count_for_every_kernel(tmp_path):
    """A __constant__ table belongs to no one kernel: a change to it changes every kernel's digest
    (never two kernels called the same when one's data differ); a device function's change only
    the digest of the kernel that calls it."""
    src = tmp_path / "module.cu"
    src.write_text(r"""
__constant__ float table[4] = {1.f, 2.f, 3.f, TV};
__device__ __noinline__ float helper(float v) { return v * HV + 1.f; }
extern "C" __global__ void a(float* y, const float* x) { int i = threadIdx.x; y[i] = helper(x[i]) + table[i & 3]; }
extern "C" __global__ void b(float* y, const float* x) { int i = threadIdx.x; y[i] = x[i] * 2.f; }
""")
    base = _nvcc(src, tmp_path / "base.cubin", ["-DTV=1.f", "-DHV=2.f"])
    helper = _nvcc(src, tmp_path / "helper.cubin", ["-DTV=1.f", "-DHV=5.f"])
    table = _nvcc(src, tmp_path / "table.cubin", ["-DTV=9.f", "-DHV=2.f"])
    assert cubin.kernel_digest(base, "a") != cubin.kernel_digest(helper, "a")
    assert cubin.kernel_digest(base, "b") == cubin.kernel_digest(helper, "b")
    assert cubin.kernel_digest(base, "a") != cubin.kernel_digest(table, "a")
    assert cubin.kernel_digest(base, "b") != cubin.kernel_digest(table, "b")


def test_bad_input_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="ELF64"):
        cubin.kernel_digest(b"not a cubin at all, no ELF header" * 4, "k")
    src = tmp_path / "two.cu"
    src.write_text(_TWO_KERNELS)
    a = _nvcc(src, tmp_path / "a.cubin", ["-DSCALE=2.0f", "-DSHIFT=1.0f"])
    with pytest.raises(ValueError, match="no kernel 'absent'"):
        cubin.kernel_digest(a, "absent")


@pytest.fixture(scope="module")
def cubins(tmp_path_factory):
    """One folder of builds for the module's tests (several build the same -D sets)."""
    return tmp_path_factory.mktemp("cubins")


@pytest.fixture()
def planner(monkeypatch, cubins):
    """tools/cuda_emu's H200 planning backend, its builds made by nvcc here (PyCUDA's compile is
    nvcc with these options; PyCUDA needs a GPU to import here)."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import cuda_emu
    finally:
        sys.path.pop(0)
    from hal.backends import cuda

    def nvcc_build(file, defines, arch):
        name = file + "_" + "_".join(f"{k}{v}" for k, v in sorted(defines.items()))
        if (cubins / f"{name}.cubin").is_file():
            return (cubins / f"{name}.cubin").read_bytes()
        return _nvcc(ROOT / "kernels_cu" / file, cubins / f"{name}.cubin",
                     cuda.CudaBackend.compile_options(defines), ROOT / "kernels_cu")

    monkeypatch.setattr(cuda, "build_cubin", nvcc_build)
    backend = cuda_emu.h200_backend()
    monkeypatch.setattr(backend, "prebuild", lambda specs, sets: 0)  # its parallel builds need PyCUDA
    return backend


def test_cuda_built_signature_tells_the_same_kernel_from_another(planner):
    """BatchNorm training (float32 NHWC): BN_INFER_OCC shapes only the inference kernels' code, so
    its sets launch the same compiled kernels though their -D sets (launch signatures) differ;
    BN_PIVOT_N changes the statistics kernels' code."""
    from hal.tuning import workloads

    (wl,) = [w for w in workloads.select(["batch_norm"]) if w.name == "bn train"]
    spec = wl.spec_for(wl.shape("tiny"), "float32", "NHWC")
    base, other_infer, no_pivot = {}, {"BN_INFER_OCC": 1024}, {"BN_PIVOT_N": 0}
    assert planner.launch_signature(spec, base) != planner.launch_signature(spec, other_infer)
    built = planner.built_signature(spec, base)
    assert built is not None
    assert planner.built_signature(spec, other_infer) == built
    assert planner.built_signature(spec, no_pivot) != built


def test_cuda_built_signature_is_unknown_where_a_build_fails(planner, monkeypatch):
    """A set whose build fails has no built signature (the tuner then evaluates it, and the evaluation
    reports the compiler's error) rather than an exception out of the tuner's loop."""
    from hal.backends import cuda
    from hal.tuning import workloads

    def failing_build(file, defines, arch):
        raise RuntimeError("nvcc: error")

    monkeypatch.setattr(cuda, "build_cubin", failing_build)
    (wl,) = [w for w in workloads.select(["batch_norm"]) if w.name == "bn train"]
    assert planner.built_signature(wl.spec_for(wl.shape("tiny"), "float32", "NHWC"), {}) is None


def test_the_tuners_screen_finds_the_parameters_a_cuda_workload_uses(planner):
    """BatchNorm training (float32 NHWC) screened as ``hal tune`` screens CUDA's drawn spaces: the
    inference kernels' parameters change nothing there, the statistics kernels' do."""
    import types

    from hal.tuning import tuner, workloads

    (wl,) = [w for w in workloads.select(["batch_norm"]) if w.name == "bn train"]
    full = planner.schemas()["batch_norm"]
    assert full.size() > tuner.ENUMERATED_UP_TO  # drawn, so screened
    # three of its parameters, two values each (four builds of batch_norm.cu): the test's time, not the
    # screen's reach
    other = {"BN_INFER_OCC": 1024, "BN_INFER_EARLY": 1, "BN_STATS_SUMS": 0}
    schema = dataclasses.replace(full, constraints=(), params=tuple(
        dataclasses.replace(p, values=(p.default, other[p.name]), untuned=()) for p in full.params if p.name in other))
    device = types.SimpleNamespace(backend=planner, info=planner.info)
    screen = tuner.screen_parameters(device, wl, "tiny", "float32", "NHWC", schema, schema.defaults())
    assert screen is not None
    assert {"BN_INFER_OCC", "BN_INFER_EARLY"}.isdisjoint(screen.relevant), screen.relevant
    assert screen.relevant == {"BN_STATS_SUMS"}, screen.relevant
    signatures = {planner.built_signature(wl.spec_for(wl.shape("tiny"), "float32", "NHWC"), v)
                  for v in screen.variants}
    assert len(signatures) == len(screen.variants)  # one variant per distinct kernel
