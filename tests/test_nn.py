"""hal.nn: layers, fusion, state dicts, the cnn16 demo and hal bench on every device."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from hal import nn, reference
from hal.cli import main
from hal.conformance import compare
from hal.errors import HalValueError


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_relu_keeps_nan(device, layout):
    x = _x((2, 3, 5, 7))
    x[0, 1, 2, 3] = np.nan
    y = hal.relu(hal.asarray(x, device=device, layout=layout)).numpy()
    r = compare("max_pool2d", "float32", y, reference.relu(x))
    assert r.ok, r.detail


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_fused_relu_equals_unfused(device, dtype, layout):
    x = _x((2, 6, 11, 13)).astype(dtype)
    x[1, 4, 5, 6] = np.nan  # ReLU keeps NaN, in every epilogue
    w = (_x((5, 6, 3, 3), 1) * 0.2).astype(dtype)
    wd = (_x((6, 1, 3, 3), 4) * 0.3).astype(dtype)
    b = _x((5,), 2)
    xt = hal.asarray(x, device=device, layout=layout)
    x64 = x.astype(np.float64)
    cases = [
        ("conv2d", hal.conv2d(xt, hal.asarray(w, device=device), b, padding=1, relu=True),
         reference.conv2d(x64, w.astype(np.float64), b.astype(np.float64), padding=1)),
        ("conv2d", hal.conv2d(xt, hal.asarray(wd, device=device), None, padding=1, groups=6, relu=True),
         reference.conv2d(x64, wd.astype(np.float64), None, padding=1, groups=6)),
        ("max_pool2d", hal.max_pool2d(xt, 3, 2, 1, relu=True), reference.max_pool2d(x64, 3, 2, 1)),
        ("avg_pool2d", hal.avg_pool2d(xt, 3, 2, 1, relu=True), reference.avg_pool2d(x64, 3, 2, 1)),
        ("adaptive_avg_pool2d", hal.adaptive_avg_pool2d(xt, 1, relu=True), reference.adaptive_avg_pool2d(x64, 1)),
        ("batch_norm", hal.batch_norm(xt, np.zeros(6, np.float32), np.ones(6, np.float32), relu=True),
         reference.batch_norm(x64, np.zeros(6), np.ones(6))),
    ]
    for op, got, want in cases:
        scale = 1.0
        if op == "conv2d":
            from hal.conformance import conv_scale
            depthwise = got.shape[1] == 6
            scale = (conv_scale(x64, wd.astype(np.float64), None, padding=1, groups=6) if depthwise
                     else conv_scale(x64, w.astype(np.float64), b.astype(np.float64), padding=1))
        r = compare(op, dtype, got.numpy(), reference.relu(want), scale)
        assert r.ok, (op, r.detail)


def test_fused_network_equals_unfused_network(device):
    net = nn.cnn16(seed=1)
    fused = net.fused()
    assert len(fused) < len(net)  # BN folded and ReLU fused away
    x = _x((2, 1, 32, 32), 3)
    with hal.use_device(device):
        a = nn.run_on(net, x, device)
        b = nn.run_on(fused, x, device)
    ref = net.reference(x.astype(np.float64)).reshape(2, -1)
    scale = np.abs(ref).max()
    assert np.abs(a - ref).max() <= 1e-3 * scale
    assert np.abs(b - ref).max() <= 1e-3 * scale


def test_state_dict_round_trip_and_errors(tmp_path):
    net = nn.cnn16(seed=2)
    path = tmp_path / "w.npz"
    net.save_npz(path)
    other = nn.cnn16(seed=3)
    other.load_npz(path)
    for k, v in net.parameters().items():
        np.testing.assert_array_equal(other.parameters()[k], v)
    state = net.parameters()
    bad = dict(state)
    bad["0.weight"] = np.zeros((3, 3, 3, 3), np.float32)
    with pytest.raises(HalValueError, match=r"'0\.weight' has shape"):
        other.load_state_dict(bad)
    missing = {k: v for k, v in state.items() if k != "1.running_var"}
    with pytest.raises(HalValueError, match=r"missing key '1\.running_var'"):
        other.load_state_dict(missing)
    with pytest.raises(HalValueError, match="unexpected key 'extra'"):
        other.load_state_dict({**state, "extra": np.zeros(1)})


def test_loads_a_pytorch_state_dict():
    torch = pytest.importorskip("torch")
    tnet = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                               torch.nn.MaxPool2d(2), torch.nn.AdaptiveAvgPool2d(1))
    with torch.no_grad():
        tnet[1].running_mean.uniform_(-1, 1)
        tnet[1].running_var.uniform_(0.5, 2)
    tnet.eval()
    hnet = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                         nn.AdaptiveAvgPool2d(1))
    hnet.load_state_dict(tnet.state_dict())
    x = _x((2, 3, 8, 8), 4)
    want = tnet(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(hnet.reference(x.astype(np.float64)), want, rtol=1e-4, atol=1e-5)


def test_demo_quick_agrees_everywhere(capsys):
    pytest.importorskip("sklearn")
    assert main(["demo", "cnn16", "--quick"]) == 0
    out = capsys.readouterr().out
    for d in hal.devices():
        assert f"{d.id}:" in out
    assert "DISAGREES" not in out


def test_demo_quick_agrees_in_bfloat16(capsys):
    pytest.importorskip("sklearn")
    pytest.importorskip("ml_dtypes")
    assert main(["demo", "cnn16", "--quick", "--dtype", "bfloat16", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "limit 8e-02" in out and "DISAGREES" not in out


def test_demo_fails_loudly_when_a_device_disagrees(monkeypatch, capsys):
    pytest.importorskip("sklearn")
    from hal import demo

    real = demo.run_device

    def broken(net, fused, x, ref, dev, dtype, layout, repeats):
        return real(net, fused, x, ref * 1.5 + 1.0, dev, dtype, layout, repeats)

    monkeypatch.setattr(demo, "run_device", broken)
    assert main(["demo", "cnn16", "--quick", "--device", "cpu"]) == 1
    assert "DISAGREES" in capsys.readouterr().out


def test_bench_quick_runs(capsys, tmp_path):
    out = tmp_path / "bench.json"
    assert main(["bench", "--all", "--quick", "--no-torch", "--dtype", "float32", "--json", str(out)]) == 0
    import json
    rows = json.loads(out.read_text())
    assert {r["device"] for r in rows} == {d.id for d in hal.devices()}
    assert all(r["ms"] > 0 and r["gbps"] > 0 for r in rows)


def test_layers_take_arrays_and_name_bad_arguments():
    """Session 25's audit: a layer called on a numpy array (numpy 2 arrays carry a .device string) raised an
    AttributeError; bad layer arguments raised ZeroDivisionError / TypeError; a non-mapping state dict an
    AttributeError."""
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    layer = nn.Conv2d(3, 4, 3)
    np.testing.assert_allclose(layer(x).numpy(), layer(hal.asarray(x)).numpy())
    for make, arg in ((lambda: nn.Conv2d(3, 4, 0), "kernel_size"), (lambda: nn.Conv2d(3, 4, 3.0), "kernel_size"),
                      (lambda: nn.Conv2d(3, 4, 3, groups=2), "groups"), (lambda: nn.Conv2d(0, 4, 3), "in_channels"),
                      (lambda: nn.Sequential(layer).load_state_dict([1, 2]), "state_dict")):
        with pytest.raises((ValueError, TypeError)) as info:
            make()
        assert str(info.value).startswith(arg), str(info.value)
