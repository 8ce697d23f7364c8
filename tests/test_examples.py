"""The example trainings (examples/*.py) for a few steps on every local device: no CPU fallback
(xpu only for the ops its profile deliberately lacks), the same loss curve as on the cpu within
float32 rounding. ANYDEVICE_EXAMPLE_STEPS lengthens the runs (3 steps by default)."""
import importlib
import os
import pathlib
import sys

import numpy as np
import pytest

from anydevice import fallback_counts
from anydevice.engine import dispatch

pytest.importorskip("sklearn", reason="the digits examples load sklearn's digits")
threadpoolctl = pytest.importorskip("threadpoolctl")

ROOT = pathlib.Path(__file__).resolve().parents[1]
STEPS = int(os.environ.get("ANYDEVICE_EXAMPLE_STEPS", "3"))
EXAMPLES = ["mlp_digits", "cnn_digits", "transformer_lm"]
DEVICES = ["npu:0", "xpu:0", "dcu:0", "opencl:0"]
XPU_LACKS = {"erf", "round", "bitwise_left_shift"}  # the simulated xpu profile's missing ops
_cpu_runs: dict = {}


def _example(name):
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "examples"))


def _run(name, device):
    """One run with no CPU fallback allowed (on xpu: only for the ops it lacks); returns (result, fallen-back ops)."""
    before = fallback_counts()
    old = dispatch.set_fallback_mode("silent" if device.startswith("xpu") else "error")
    try:
        with threadpoolctl.threadpool_limits(1):  # tiny matrices: BLAS threads only contend on a busy machine
            result = _example(name).run(device, STEPS, seed=0, log=lambda *a: None)
    finally:
        dispatch.set_fallback_mode(old)
    fell = {op for (op, dev), n in fallback_counts().items() if dev == device and n > before.get((op, dev), 0)}
    return result, fell


def _cpu(name):
    if name not in _cpu_runs:
        _cpu_runs[name] = _run(name, "cpu")[0]
    return _cpu_runs[name]


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_trains_on_the_cpu(name):
    res = _cpu(name)
    assert len(res["losses"]) == STEPS and all(np.isfinite(res["losses"]))
    assert res["losses"][-1] < res["losses"][0]  # Adam on a fresh network: the loss goes down within 3 steps
    assert 0.0 <= res["accuracy"] <= 1.0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", EXAMPLES)
def test_example_loss_curve_agrees_across_devices(name, device):
    res, fell = _run(name, device)
    assert fell <= (XPU_LACKS if device.startswith("xpu") else set()), f"{name} fell back to the CPU on {device}: {fell}"
    np.testing.assert_allclose(res["losses"], _cpu(name)["losses"], rtol=2e-4, atol=2e-5,
                               err_msg=f"{name}: loss curve on {device} vs cpu")
    differ = round(abs(res["accuracy"] - _cpu(name)["accuracy"]) * 360)  # test digits classified differently
    assert differ <= 2, f"{name}: {differ} of 360 test digits differ on {device}"  # at most a couple of borderline ones


def test_example_arguments_and_data():
    common = _example("_common")
    a = common.arguments("x", 7, ["--device", "npu:0", "--steps", "2", "--seed", "5"])
    assert (a.device, a.steps, a.seed) == ("npu:0", 2, 5)
    assert common.arguments("x", 7, []).steps == 7
    x, y, xt, yt = common.digits(0)
    assert x.shape == (1437, 64) and xt.shape == (360, 64) and x.max() <= 1.0 and set(np.unique(y)) == set(range(10))
    text = (ROOT / "examples" / "data" / "lighthouse.txt").read_text(encoding="utf-8")
    assert 3000 < len(text) < 10000
