"""Optimizers against numpy re-implementations of PyTorch's update rules; groups, state dicts,
state that follows its parameter across devices, float16 parameters, errors."""
import math

import numpy as np
import pytest

import anydevice as ad
from anydevice import nn, optim

DEVICES = ["cpu", "npu", "xpu", "dcu"] + (["opencl"] if ad.device.unavailable_reason("opencl") is None else [])
STEPS = 6


def _targets(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in ((4, 3), (3,))], [rng.standard_normal(s) for s in ((4, 3), (3,))]


def _loss(params, targets, scales):
    """sum(scale * (p - target)**2) over the parameters: gradient 2 * scale * (p - target)."""
    total = None
    for p, t, s in zip(params, targets, scales):
        d = p - ad.asarray(t.astype(np.float32), device=p.device)
        term = (d * d * ad.asarray(s.astype(np.float32), device=p.device)).sum()
        total = term if total is None else total + term
    return total


def _run(cls, kw, device="cpu", steps=STEPS, dtype=ad.float32):
    starts, targets = _targets()
    scales = [np.abs(t) + 0.5 for t in targets]
    params = [nn.parameter(s.astype(np.float32), dtype=dtype, device=device) for s in starts]
    opt = cls(params, **kw)
    for _ in range(steps):
        opt.zero_grad()
        _loss(params, targets, scales).backward()
        opt.step()
    return [p.numpy().astype(np.float64) for p in params], opt


# --- numpy re-implementations of PyTorch's formulas (float64) ---------------------------------------
def _np_sgd(p, g, st, t, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
    g = g + weight_decay * p
    if momentum:
        st["buf"] = g.copy() if t == 1 else momentum * st["buf"] + (1 - dampening) * g
        g = g + momentum * st["buf"] if nesterov else st["buf"]
    return p - lr * g


def _np_adam(p, g, st, t, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, decoupled=False):
    b1, b2 = betas
    if decoupled:
        p = p * (1 - lr * weight_decay)
    else:
        g = g + weight_decay * p
    st["m"] = b1 * st.get("m", 0.0) + (1 - b1) * g
    st["v"] = b2 * st.get("v", 0.0) + (1 - b2) * g * g
    v = st["v"]
    if amsgrad:
        v = st["vmax"] = np.maximum(st.get("vmax", 0.0), v)
    denom = np.sqrt(v) / math.sqrt(1 - b2 ** t) + eps
    return p - lr / (1 - b1 ** t) * st["m"] / denom


def _np_adamw(p, g, st, t, weight_decay=1e-2, **kw):
    return _np_adam(p, g, st, t, weight_decay=weight_decay, decoupled=True, **kw)


def _np_rmsprop(p, g, st, t, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False):
    g = g + weight_decay * p
    st["sq"] = alpha * st.get("sq", 0.0) + (1 - alpha) * g * g
    avg = st["sq"]
    if centered:
        st["ga"] = alpha * st.get("ga", 0.0) + (1 - alpha) * g
        avg = avg - st["ga"] ** 2
    avg = np.sqrt(avg) + eps
    if momentum:
        st["buf"] = momentum * st.get("buf", 0.0) + g / avg
        return p - lr * st["buf"]
    return p - lr * g / avg


def _np_adagrad(p, g, st, t, lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10):
    g = g + weight_decay * p
    clr = lr / (1 + (t - 1) * lr_decay)
    st["sum"] = st.get("sum", initial_accumulator_value) + g * g
    return p - clr * g / (np.sqrt(st["sum"]) + eps)


def _np_run(rule, kw, steps=STEPS):
    starts, targets = _targets()
    scales = [np.abs(t) + 0.5 for t in targets]
    ps = [s.astype(np.float32).astype(np.float64) for s in starts]
    states = [{} for _ in ps]
    for t in range(1, steps + 1):
        ps = [rule(p, 2 * s * (p - tg.astype(np.float32)), st, t, **kw)
              for p, s, tg, st in zip(ps, [sc.astype(np.float32) for sc in scales], targets, states)]
    return ps


CASES = [
    (optim.SGD, _np_sgd, {"lr": 0.05}),
    (optim.SGD, _np_sgd, {"lr": 0.05, "momentum": 0.9}),
    (optim.SGD, _np_sgd, {"lr": 0.05, "momentum": 0.8, "dampening": 0.3, "weight_decay": 0.1}),
    (optim.SGD, _np_sgd, {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    (optim.Adam, _np_adam, {"lr": 0.1}),
    (optim.Adam, _np_adam, {"lr": 0.1, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.05, "amsgrad": True}),
    (optim.AdamW, _np_adamw, {"lr": 0.1, "weight_decay": 0.1}),
    (optim.AdamW, _np_adamw, {"lr": 0.1}),
    (optim.RMSprop, _np_rmsprop, {"lr": 0.01}),
    (optim.RMSprop, _np_rmsprop, {"lr": 0.01, "alpha": 0.9, "momentum": 0.5, "centered": True, "weight_decay": 0.1}),
    (optim.Adagrad, _np_adagrad, {"lr": 0.1}),
    (optim.Adagrad, _np_adagrad, {"lr": 0.1, "lr_decay": 0.05, "weight_decay": 0.1, "initial_accumulator_value": 0.2}),
]


@pytest.mark.parametrize("cls, rule, kw", CASES, ids=[f"{c.__name__}-{i}" for i, (c, _, _) in enumerate(CASES)])
def test_optimizer_matches_numpy_formulas(cls, rule, kw):
    got, opt = _run(cls, kw)
    want = _np_run(rule, kw)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)
    assert all(st["step"] == STEPS for st in opt.state.values())


def test_defaults_are_pytorchs():
    p = [nn.parameter([1.0])]
    assert optim.SGD(p).defaults == {"lr": 1e-3, "momentum": 0.0, "dampening": 0.0, "weight_decay": 0.0,
                                     "nesterov": False}
    assert optim.Adam(p).defaults["betas"] == (0.9, 0.999) and optim.Adam(p).defaults["eps"] == 1e-8
    assert optim.AdamW(p).defaults["weight_decay"] == 1e-2 and optim.Adam(p).defaults["weight_decay"] == 0.0
    assert optim.RMSprop(p).defaults["lr"] == 1e-2 and optim.RMSprop(p).defaults["alpha"] == 0.99
    assert optim.Adagrad(p).defaults["eps"] == 1e-10


@pytest.mark.parametrize("device", DEVICES[1:])
@pytest.mark.parametrize("cls, kw", [(optim.SGD, {"lr": 0.05, "momentum": 0.9, "nesterov": True}),
                                     (optim.Adam, {"lr": 0.1, "amsgrad": True}),
                                     (optim.RMSprop, {"lr": 0.01, "centered": True, "momentum": 0.5})],
                         ids=["SGD", "Adam", "RMSprop"])
def test_every_device_follows_the_same_trajectory(device, cls, kw):
    cpu, _ = _run(cls, kw)
    dev, _ = _run(cls, kw, device=device)
    for a, b in zip(dev, cpu):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_param_groups_have_their_own_options_and_add_param_group():
    a, b, c = nn.parameter([1.0, 2.0]), nn.parameter([3.0]), nn.parameter([4.0])
    opt = optim.SGD([{"params": [a], "lr": 0.5}, {"params": [b], "momentum": 0.9}], lr=0.1)
    assert [g["lr"] for g in opt.param_groups] == [0.5, 0.1]
    assert [g["momentum"] for g in opt.param_groups] == [0.0, 0.9]
    opt.add_param_group({"params": c, "lr": 1.0})
    for p in (a, b, c):
        (p * p).sum().backward()
    opt.step()
    np.testing.assert_allclose(a.numpy(), [1.0 - 0.5 * 2, 2.0 - 0.5 * 4])
    np.testing.assert_allclose(b.numpy(), [3.0 - 0.1 * 6])
    np.testing.assert_allclose(c.numpy(), [4.0 - 1.0 * 8])
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})
    with pytest.raises(TypeError, match="unknown option.*'betas'"):
        opt.add_param_group({"params": [nn.parameter([1.0])], "betas": (0.9, 0.9)})
    assert opt.get_lr() == 0.5
    opt.set_lr(0.01)
    assert [g["lr"] for g in opt.param_groups] == [0.01] * 3


def test_zero_grad_sets_none_or_zeros():
    p = nn.parameter([1.0, 2.0])
    opt = optim.SGD([p], lr=0.1)
    (p * 3.0).sum().backward()
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(p.grad.numpy(), [0.0, 0.0])
    opt.clear_grad()
    assert p.grad is None


@pytest.mark.parametrize("cls, kw", [(optim.SGD, {"lr": 0.05, "momentum": 0.9}), (optim.Adam, {"lr": 0.1}),
                                     (optim.RMSprop, {"lr": 0.01, "centered": True, "momentum": 0.5}),
                                     (optim.Adagrad, {"lr": 0.1})], ids=["SGD", "Adam", "RMSprop", "Adagrad"])
def test_state_dict_round_trip_resumes_the_same_trajectory(cls, kw, tmp_path):
    starts, targets = _targets(1)
    scales = [np.abs(t) + 0.5 for t in targets]

    def train(params, opt, n):
        for _ in range(n):
            opt.zero_grad()
            _loss(params, targets, scales).backward()
            opt.step()

    params = [nn.parameter(s.astype(np.float32)) for s in starts]
    opt = cls(params, **kw)
    train(params, opt, 3)
    sd = opt.state_dict()
    assert set(sd) == {"state", "param_groups"} and sorted(sd["state"]) == [0, 1]
    assert sd["param_groups"][0]["params"] == [0, 1] and sd["state"][0]["step"] == 3
    ad.save({"params": [p.detach() for p in params], "optim": sd}, tmp_path / "ckpt.safetensors")
    ck = ad.load(tmp_path / "ckpt.safetensors")
    resumed = [nn.parameter(t) for t in ck["params"]]
    opt2 = cls(resumed, lr=0.5)
    opt2.load_state_dict(ck["optim"])
    assert opt2.param_groups[0]["lr"] == kw["lr"]
    train(params, opt, 3)
    train(resumed, opt2, 3)
    for a, b in zip(params, resumed):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_load_state_dict_checks_the_groups():
    opt = optim.Adam([nn.parameter([1.0]), nn.parameter([2.0])])
    other = optim.Adam([nn.parameter([1.0])])
    with pytest.raises(ValueError, match="group 0 has 1 parameters in the state but 2"):
        opt.load_state_dict(other.state_dict())
    with pytest.raises(TypeError, match="'state' and 'param_groups'"):
        opt.load_state_dict({"state": {}})


def test_moving_model_and_optimizer_between_devices_mid_training_matches_staying_put():
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((8, 5)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32)
    w = {"weight": rng.standard_normal((2, 5)).astype(np.float32), "bias": np.zeros(2, np.float32)}

    def train(plan):
        m = nn.Linear(5, 2)
        m.load_state_dict(w)
        opt = optim.Adam(m.parameters(), lr=0.05)
        for dev in plan:
            m.to(dev)
            loss = nn.mse_loss(m(ad.asarray(x, device=dev)), ad.asarray(y, device=dev))
            loss.backward()
            opt.step()
            opt.zero_grad()
            assert all(t.device == m.weight.device for st in opt.state.values() for t in st.values()
                       if isinstance(t, ad.Tensor))
        return m.weight.numpy(), m.bias.numpy()

    stay = train(["cpu"] * 6)
    moved = train(["cpu", "cpu", "npu", "npu", "dcu", "dcu"])
    for a, b in zip(moved, stay):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [ad.float16, ad.bfloat16])
def test_low_precision_params_keep_float32_state_and_master_weights(dtype):
    got, opt = _run(optim.Adam, {"lr": 1e-3}, steps=20, dtype=dtype)
    want = _np_run(_np_adam, {"lr": 1e-3}, steps=20)
    tol = 1e-3 if dtype == ad.float16 else 8e-3
    for g, w in zip(got, want):
        assert np.isfinite(g).all()
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    st = next(iter(opt.state.values()))
    assert st["exp_avg"].dtype == ad.float32 and st["master_param"].dtype == ad.float32


def test_float16_adam_with_tiny_gradients_stays_finite():
    p = nn.parameter(np.full(4, 1.0, np.float16))
    opt = optim.Adam([p])
    for _ in range(3):
        p.grad = ad.asarray(np.full(4, 1e-5, np.float16))  # g*g underflows in float16
        opt.step()
    assert np.isfinite(p.numpy()).all() and (p.numpy() < 1.0).all()


def test_master_copy_is_refreshed_when_the_parameter_is_set_elsewhere():
    p = nn.parameter(np.ones(2, np.float16))
    opt = optim.SGD([p], lr=0.5)
    p.grad = ad.ones(2, dtype=ad.float16)
    opt.step()
    with ad.no_grad():
        p[...] = ad.full((2,), 4.0, dtype=ad.float16)
    p.grad = ad.ones(2, dtype=ad.float16)
    opt.step()
    np.testing.assert_array_equal(p.numpy(), [3.5, 3.5])


def test_errors_name_the_optimizer_and_what_is_allowed():
    p = nn.parameter([1.0])
    with pytest.raises(ValueError, match=r"Adam\(\): got an empty parameter list"):
        optim.Adam([])
    with pytest.raises(ValueError, match=r"parameter 0 \(float32\[2\] on cpu:0\) does not require grad"):
        optim.SGD([ad.ones(2)])
    with pytest.raises(ValueError, match="not a leaf"):
        optim.SGD([p * 2.0])
    with pytest.raises(TypeError, match="not one Tensor"):
        optim.SGD(p)
    with pytest.raises(ValueError, match="lr must be > 0, got -1.0"):
        optim.AdamW([p], lr=-1)
    with pytest.raises(ValueError, match=r"betas\[0\] must be in \[0, 1\), got 1.5"):
        optim.Adam([p], betas=(1.5, 0.9))
    with pytest.raises(ValueError, match="betas must be a pair"):
        optim.Adam([p], betas=0.9)
    with pytest.raises(TypeError, match="momentum must be a finite number"):
        optim.RMSprop([p], momentum=float("nan"))
    with pytest.raises(ValueError, match="nesterov=True needs momentum > 0"):
        optim.SGD([p], nesterov=True)
    with pytest.raises(TypeError, match="centered must be True or False"):
        optim.RMSprop([p], centered="yes")
    q = nn.parameter([1.0], device="npu")
    q.grad = ad.ones(1)
    with pytest.raises(ValueError, match="gradient on cpu:0 but parameter on npu:0"):
        optim.SGD([q]).step()


def test_closure_is_evaluated_with_grad_and_returned():
    p = nn.parameter([2.0])
    opt = optim.SGD([p], lr=0.25)

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    with ad.no_grad():
        loss = opt.step(closure)
    assert float(loss) == 4.0
    np.testing.assert_allclose(p.numpy(), [1.0])


def test_old_import_path_is_the_same_module():
    from anydevice import optimizer

    assert optimizer.AdamW is optim.AdamW


# --- gradient clipping ----------------------------------------------------------------------------
def _with_grads(grads, devices=None, dtype=ad.float32):
    ps = []
    for i, g in enumerate(grads):
        dev = devices[i] if devices else "cpu"
        p = nn.parameter(np.zeros_like(g), dtype=dtype, device=dev)
        p.grad = ad.asarray(g, dtype=dtype, device=dev)
        ps.append(p)
    return ps


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_grad_norm_matches_numpy(norm_type, max_norm):
    rng = np.random.default_rng(5)
    grads = [rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (5,), ())]
    ps = _with_grads(grads, ["cpu", "npu", "cpu"])
    flat = np.concatenate([g.reshape(-1) for g in grads]).astype(np.float64)
    want = np.abs(flat).max() if math.isinf(norm_type) else (np.abs(flat) ** norm_type).sum() ** (1 / norm_type)
    total = nn.utils.clip_grad_norm_(ps, max_norm, norm_type)
    assert total.shape == () and total.device == ps[0].device
    np.testing.assert_allclose(float(total), want, rtol=1e-5)
    coef = min(max_norm / (want + 1e-6), 1.0)
    for p, g in zip(ps, grads):
        assert p.grad.dtype == ad.float32 and p.grad.device == p.device
        np.testing.assert_allclose(p.grad.numpy(), g * coef, rtol=1e-5, atol=1e-7)


def test_clip_grad_norm_reads_nothing_back_and_keeps_low_precision_dtypes(monkeypatch):
    ps = _with_grads([np.full(4, 300.0), np.full(3, 400.0)], ["npu", "npu"], dtype=ad.float16)
    rt = ps[0].device._backend.runtime
    reads = []
    monkeypatch.setattr(rt, "copy_d2h", lambda *a: reads.append(a))
    total = nn.utils.clip_grad_norm_(ps, 1.0)  # the float16 sum of squares would overflow: reduced in float32
    assert reads == []
    monkeypatch.undo()
    assert total.dtype == ad.float32
    np.testing.assert_allclose(float(total), math.sqrt(4 * 300.0 ** 2 + 3 * 400.0 ** 2), rtol=1e-6)
    assert all(p.grad.dtype == ad.float16 for p in ps)
    np.testing.assert_allclose(ps[0].grad.numpy(), 300.0 / float(total), rtol=1e-3)


def test_clip_grad_norm_errors_and_edge_cases():
    assert float(nn.utils.clip_grad_norm_([nn.parameter([1.0])], 1.0)) == 0.0  # no gradients
    ps = _with_grads([np.array([np.inf, 1.0], np.float32)])
    with pytest.raises(RuntimeError, match="total norm of order 2.0 of the gradients is non-finite"):
        nn.utils.clip_grad_norm_(ps, 1.0, error_if_nonfinite=True)
    with pytest.raises(ValueError, match="norm_type > 0"):
        nn.utils.clip_grad_norm_(ps, 1.0, norm_type=0)
    with pytest.raises(TypeError, match=r"parameters\[0\] is a list"):
        nn.utils.clip_grad_norm_([[1.0]], 1.0)


def test_clip_grad_value_():
    ps = _with_grads([np.array([-3.0, 0.5, 2.0], np.float32)], ["dcu"])
    nn.utils.clip_grad_value_(ps, 1.0)
    np.testing.assert_array_equal(ps[0].grad.numpy(), [-1.0, 0.5, 1.0])
    with pytest.raises(ValueError, match="clip_value must be >= 0"):
        nn.utils.clip_grad_value_(ps, -1.0)


# --- the fused update ops -------------------------------------------------------------------------
CAPTURE_CASES = [(optim.Adam, {"lr": 0.1}), (optim.AdamW, {"lr": 0.1, "amsgrad": True}),
                 (optim.SGD, {"lr": 0.05, "momentum": 0.8, "dampening": 0.3}),
                 (optim.RMSprop, {"lr": 0.01, "centered": True, "momentum": 0.5}),
                 (optim.Adagrad, {"lr": 0.1, "lr_decay": 0.05})]


@pytest.mark.parametrize("cls, kw", CAPTURE_CASES, ids=[c.__name__ for c, _ in CAPTURE_CASES])
def test_every_step_calls_one_update_op_whose_attributes_never_change(cls, kw):
    """What changes from step to step reaches the update op as a tensor (the step count, the
    bias corrections computed from it), so a captured step replays like eager."""
    calls = []
    params = [nn.parameter(s.astype(np.float32)) for s in _targets()[0]]
    opt = cls(params, **kw)
    op = opt._op

    def recording(*args, **attrs):
        calls.append((args, attrs))
        return op(*args, **attrs)

    opt._op = recording
    starts, targets = _targets()
    for _ in range(4):
        opt.zero_grad()
        _loss(params, targets, [np.ones_like(t) for t in targets]).backward()
        opt.step()
    assert len(calls) == 4 * len(params)
    assert all(attrs == calls[0][1] for _, attrs in calls)
    assert all(isinstance(a, ad.Tensor) for args, _ in calls for a in args)
    for st in opt.state.values():
        step = st["step"]
        assert isinstance(step, ad.Tensor) and step.shape == () and step.dtype == ad.float32 and step.item() == 4.0


def test_states_the_options_leave_unused_are_not_kept():
    p = nn.parameter([1.0, 2.0])
    for opt, unused in ((optim.Adam([p]), "max_exp_avg_sq"), (optim.SGD([p]), "momentum_buffer"),
                        (optim.RMSprop([p]), "grad_avg")):
        (p * p).sum().backward()
        opt.step()
        p.clear_grad()
        assert unused not in opt.state[p]


@pytest.mark.parametrize("saved_step", [3, 3.0, np.int64(3), "tensor"])
def test_state_dicts_with_int_or_tensor_steps_load_and_resume(saved_step):
    starts, targets = _targets(2)
    scales = [np.ones_like(t) for t in targets]

    def train(params, opt, n):
        for _ in range(n):
            opt.zero_grad()
            _loss(params, targets, scales).backward()
            opt.step()

    params = [nn.parameter(s.astype(np.float32)) for s in starts]
    opt = optim.Adam(params, lr=0.1)
    train(params, opt, 3)
    sd = opt.state_dict()
    assert all(type(st["step"]) is int and st["step"] == 3 for st in sd["state"].values())
    old = {"param_groups": sd["param_groups"],
           "state": {k: {**st, "step": ad.asarray(3.0) if saved_step == "tensor" else saved_step}
                     for k, st in sd["state"].items()}}
    resumed = [nn.parameter(p.numpy()) for p in params]
    opt2 = optim.Adam(resumed, lr=0.1)
    opt2.load_state_dict(old)
    train(params, opt, 2)
    train(resumed, opt2, 2)
    for a, b in zip(params, resumed):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert all(st["step"].item() == 5.0 for st in opt2.state.values())


def test_update_ops_name_the_argument_that_is_wrong():
    p, g = ad.ones((2, 3)), ad.ones((2, 3))
    step = ad.zeros((), dtype=ad.float32)
    with pytest.raises(ValueError, match=r"adam_update\(\): grad has shape \(3,\) but param has shape \(2, 3\)"):
        ad.adam_update(p, ad.ones(3), p, p, p, step)
    with pytest.raises(TypeError, match=r"sgd_update\(\): step must be a 0-d float32 tensor"):
        ad.sgd_update(p, g, p, ad.zeros((), dtype=ad.int32))
    with pytest.raises(ValueError, match=r"rmsprop_update\(\): alpha must be a number in \[0, 1\)"):
        ad.rmsprop_update(p, g, p, p, p, step, alpha=1.0)
    with pytest.raises(TypeError, match=r"adagrad_update\(\) does not accept dtype float16"):
        h = p.astype(ad.float16)
        ad.adagrad_update(h, h, h, step)
    new_p, new_sum, new_step = ad.adagrad_update(p, g, p, step, lr=0.5)
    assert new_step.item() == 1.0 and p.numpy().tolist() == [[1.0] * 3] * 2  # inputs are never changed
