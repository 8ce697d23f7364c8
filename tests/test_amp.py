"""Mixed precision: the per-op policy of the registry under autocast, on every device, and
GradScaler's dynamic loss scaling with one read-back per step."""
from __future__ import annotations

import numpy as np
import pytest

import anydevice as ad
from anydevice import amp

DEVICES = ["cpu", "npu", "xpu", "dcu"] + (["opencl"] if ad.device.unavailable_reason("opencl") is None else [])


def _t(a, device, dtype=ad.float32, grad=False):
    t = ad.asarray(np.asarray(a, np.float32), dtype=dtype, device=device)
    return t.requires_grad_(True) if grad else t


@pytest.mark.parametrize("device", DEVICES)
def test_policy_low_float32_and_follow(device):
    x, w = _t(np.ones((4, 4)), device), _t(np.eye(4), device, grad=True)
    low = amp.low_dtype(device)
    assert low in (ad.bfloat16, ad.float16)
    with amp.autocast(device.split(":")[0] if device != "opencl" else "opencl"):
        y = ad.matmul(x, w)          # low
        s = ad.softmax(y)            # float32 (its input is low)
        z = y + 1.0                  # follows its input
        m = ad.mean(y)               # a reduction: float32
        assert amp.is_autocast_enabled() and amp.get_autocast_dtype() is low
    assert (y.dtype, s.dtype, z.dtype, m.dtype) == (low, ad.float32, low, ad.float32)
    np.testing.assert_allclose(s.numpy(), np.full((4, 4), 0.25), rtol=1e-6)
    ad.sum(s * _t(np.arange(16).reshape(4, 4), device)).backward()
    assert w.grad.dtype is ad.float32  # master weights get float32 gradients through the casts
    assert not amp.is_autocast_enabled()


def test_low_dtype_follows_the_device_and_explicit_dtype_is_checked():
    assert amp.low_dtype("cpu") is ad.bfloat16  # bfloat16 where present
    with amp.autocast("cpu", dtype=ad.float16):
        assert ad.matmul(ad.ones((2, 2)), ad.ones((2, 2))).dtype is ad.float16
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        amp.autocast("cpu", dtype=ad.float64)


def test_disabled_region_nested_and_decorator():
    x = ad.ones((3, 3))

    @amp.autocast("cpu")
    def f(a):
        with amp.autocast("cpu", enabled=False):
            inner = ad.matmul(a, a)
        return ad.matmul(a, a), inner

    outer, inner = f(x)
    assert (outer.dtype, inner.dtype) == (ad.bfloat16, ad.float32)


def test_only_the_regions_device_type_is_cast():
    with amp.autocast("npu"):
        assert ad.matmul(ad.ones((2, 2)), ad.ones((2, 2))).dtype is ad.float32  # cpu tensors untouched
        a = ad.ones((2, 2), device="npu")
        assert ad.matmul(a, a).dtype is amp.low_dtype("npu")


def test_float64_is_never_cast():
    a = ad.ones((2, 2), dtype=ad.float64)
    with amp.autocast("cpu"):
        assert ad.matmul(a, a).dtype is ad.float64


def test_custom_lists_override_the_registry_lists():
    a = ad.ones((2, 2))
    with amp.autocast("cpu", custom_black_list=["matmul"], custom_white_list=["exp", "add"]):
        assert ad.matmul(a, a).dtype is ad.float32
        assert ad.exp(a).dtype is ad.bfloat16
        assert (a + a).dtype is ad.bfloat16  # the operators' fast path steps aside for listed element-wise ops
        assert amp.policy("exp") == "low" and amp.policy("matmul") == "float32"
    assert (a + a).dtype is ad.float32
    with pytest.raises(ValueError, match="no op named 'matmull'"):
        amp.autocast("cpu", custom_white_list=["matmull"])
    with pytest.raises(ValueError, match="both"):
        amp.autocast("cpu", custom_white_list=["exp"], custom_black_list=["exp"])


def test_paddle_spelling():
    with amp.auto_cast(custom_black_list={"matmul"}):
        assert ad.matmul(ad.ones((2, 2)), ad.ones((2, 2))).dtype is ad.float32
    with pytest.raises(ValueError, match="O2"):
        amp.auto_cast(level="O2")


class _SGD:
    """The smallest optimizer GradScaler drives (param_groups, step)."""

    def __init__(self, params, lr):
        self.param_groups = [{"params": list(params), "lr": lr}]
        self.steps = 0

    def step(self):
        self.steps += 1


@pytest.mark.parametrize("device", ["cpu", "npu", "dcu"])
def test_grad_scaler_skips_non_finite_steps_and_backs_off(device, monkeypatch):
    w = _t(np.ones(3), device, grad=True)
    opt = _SGD([w], 0.1)
    scaler = amp.GradScaler(init_scale=1024.0, growth_interval=2)
    reads = []
    orig = ad.Tensor.item

    def counting_item(self):
        reads.append(1)
        return orig(self)

    monkeypatch.setattr(ad.Tensor, "item", counting_item)

    loss = ad.sum(w * 2.0)
    scaler.scale(loss).backward()
    np.testing.assert_allclose(w.grad.numpy(), np.full(3, 2048.0))
    reads.clear()
    scaler.step(opt)
    assert len(reads) == 1  # one read-back of the on-device inf/NaN flag
    np.testing.assert_allclose(w.grad.numpy(), np.full(3, 2.0))  # unscaled before the step
    assert opt.steps == 1
    scaler.update()
    assert scaler.get_scale() == 1024.0

    w.grad = None
    loss = ad.sum(w * float("inf"))
    scaler.scale(loss).backward()
    scaler.step(opt)
    assert opt.steps == 1  # skipped
    scaler.update()
    assert scaler.get_scale() == 512.0

    for _ in range(2):  # two finite steps in a row: the scale grows
        w.grad = None
        scaler.scale(ad.sum(w)).backward()
        scaler.step(opt)
        scaler.update()
    assert scaler.get_scale() == 1024.0 and opt.steps == 3

    state = scaler.state_dict()
    other = amp.GradScaler()
    other.load_state_dict(state)
    assert other.state_dict() == state


def test_grad_scaler_errors():
    with pytest.raises(ValueError, match="growth_factor"):
        amp.GradScaler(growth_factor=0.5)
    with pytest.raises(ValueError, match="init_scale"):
        amp.GradScaler(init_scale=-1)
    s = amp.GradScaler()
    w = ad.ones(2).requires_grad_(True)
    ad.sum(s.scale(w)).backward()
    opt = _SGD([w], 0.1)
    s.unscale_(opt)
    with pytest.raises(RuntimeError, match="already called"):
        s.unscale_(opt)


@pytest.mark.parametrize("device", ["cpu", "npu", "dcu"])
def test_mixed_precision_training_matches_float32(device):
    """A small regression trained under autocast with GradScaler ends close to float32 training,
    on every device, and its parameters stay float32."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, 8)).astype(np.float32)
    y = (X @ rng.normal(size=(8, 1))).astype(np.float32)
    results = {}
    for mixed in (False, True):
        w = _t(np.zeros((8, 1)), device, grad=True)
        Xd, yd = _t(X, device), _t(y, device)
        scaler = amp.GradScaler(init_scale=256.0)
        for _ in range(60):
            w.grad = None
            with amp.autocast(device, enabled=mixed):
                loss = ad.mean(ad.square(ad.matmul(Xd, w) - yd))
            assert loss.dtype is ad.float32
            scaler.scale(loss).backward()
            with ad.no_grad():
                scaler.unscale_(_Holder(w))
                w2 = w - 0.05 * w.grad
            scaler.update()
            w = w2.detach().requires_grad_(True)
        assert w.dtype is ad.float32
        results[mixed] = float(ad.mean(ad.square(ad.matmul(Xd, w) - yd)).item())
    assert results[True] < 0.05 and abs(results[True] - results[False]) < 0.02, results


class _Holder:
    def __init__(self, p):
        self.param_groups = [{"params": [p]}]
