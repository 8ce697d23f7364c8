"""Learning-rate schedulers: each lr sequence against its closed form; state dicts; errors."""
import math

import numpy as np
import pytest

from anydevice import nn, optim
from anydevice.optim import lr_scheduler as L

N = 25


def _opt(lr=0.1, cls=optim.SGD, **kw):
    return cls([{"params": [nn.parameter([1.0])]}, {"params": [nn.parameter([2.0])], "lr": lr / 10}], lr=lr, **kw)


def _lrs(sched, n=N, metrics=None):
    out = [sched.get_last_lr()]
    for i in range(n - 1):
        sched.step() if metrics is None else sched.step(metrics[i])
        out.append(sched.get_last_lr())
        assert [g["lr"] for g in sched.optimizer.param_groups] == out[-1]
    return np.array(out)


def _closed(f, bases=(0.1, 0.01), n=N):
    return np.array([[f(b, t) for b in bases] for t in range(n)])


CASES = {
    "StepLR": (lambda o: L.StepLR(o, step_size=4, gamma=0.5), lambda b, t: b * 0.5 ** (t // 4)),
    "MultiStepLR": (lambda o: L.MultiStepLR(o, milestones=[10, 3, 7], gamma=0.1),
                    lambda b, t: b * 0.1 ** sum(t >= m for m in (3, 7, 10))),
    "ExponentialLR": (lambda o: L.ExponentialLR(o, gamma=0.9), lambda b, t: b * 0.9 ** t),
    "CosineAnnealingLR": (lambda o: L.CosineAnnealingLR(o, T_max=10, eta_min=0.001),
                          lambda b, t: 0.001 + (b - 0.001) * (1 + math.cos(math.pi * t / 10)) / 2),
    "LinearLR": (lambda o: L.LinearLR(o, start_factor=0.25, total_iters=8),
                 lambda b, t: b * (0.25 + 0.75 * min(t, 8) / 8)),
    "LambdaLR": (lambda o: L.LambdaLR(o, lambda e: 1 / (1 + e)), lambda b, t: b / (1 + t)),
}


@pytest.mark.parametrize("name", CASES)
def test_schedule_matches_its_closed_form(name):
    make, f = CASES[name]
    np.testing.assert_allclose(_lrs(make(_opt())), _closed(f), rtol=1e-12)


def _one_cycle(t, total=20, max_lr=1.0, pct=0.3, div=25.0, final=1e4, three=False):
    lo = max_lr / div
    cos = lambda a, b, p: b + (a - b) / 2 * (math.cos(math.pi * p) + 1)
    e1 = pct * total - 1
    if three:
        e2 = 2 * pct * total - 2
        if t <= e1:
            return cos(lo, max_lr, t / e1)
        if t <= e2:
            return cos(max_lr, lo, (t - e1) / (e2 - e1))
        return cos(lo, lo / final, (t - e2) / (total - 1 - e2))
    return cos(lo, max_lr, t / e1) if t <= e1 else cos(max_lr, lo / final, (t - e1) / (total - 1 - e1))


@pytest.mark.parametrize("three", [False, True])
def test_one_cycle_lr_and_momentum(three):
    opt = _opt(cls=optim.SGD, momentum=0.9)
    s = L.OneCycleLR(opt, max_lr=[1.0, 0.1], total_steps=20, three_phase=three)
    got = _lrs(s, 20)
    want = np.array([[_one_cycle(t, three=three), _one_cycle(t, max_lr=0.1, three=three)] for t in range(20)])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got[:, 0].max() == pytest.approx(1.0) and got[-1, 0] == pytest.approx(1.0 / 25 / 1e4)
    with pytest.raises(ValueError, match="called 21 times for total_steps=20"):
        s.step()
        s.step()
    a = optim.Adam([nn.parameter([1.0])])
    L.OneCycleLR(a, max_lr=0.01, epochs=2, steps_per_epoch=5)
    assert a.param_groups[0]["betas"] == (0.95, 0.999)  # momentum starts at max_momentum


def test_one_cycle_linear_anneal():
    opt = _opt()
    s = L.OneCycleLR(opt, max_lr=1.0, total_steps=11, pct_start=0.5, anneal_strategy="linear", cycle_momentum=False)
    got = _lrs(s, 11)[:, 0]
    np.testing.assert_allclose(got[:5], 0.04 + (1.0 - 0.04) * np.arange(5) / 4.5, rtol=1e-12)
    assert got[-1] == pytest.approx(0.04 / 1e4)


def test_sequential_warmup_then_cosine():
    opt = _opt()
    warm = L.LinearLR(opt, start_factor=0.1, total_iters=5)
    cos = L.CosineAnnealingLR(opt, T_max=15)
    s = L.SequentialLR(opt, [warm, cos], milestones=[5])
    got = _lrs(s, 20)
    want = _closed(lambda b, t: b * (0.1 + 0.9 * t / 5) if t < 5 else b * (1 + math.cos(math.pi * (t - 5) / 15)) / 2,
                   n=20)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_reduce_on_plateau():
    opt = _opt(lr=1.0)
    s = L.ReduceLROnPlateau(opt, factor=0.5, patience=2, cooldown=1, min_lr=[0.3, 0.0])
    metrics = [5, 4, 4, 4, 4, 4, 4, 4, 3, 3, 3, 3]
    got = _lrs(s, len(metrics) + 1, metrics)[1:, 0]
    # bad epochs after the best (4 at epoch 2): 3 bad -> halve at epoch 5; 1 cooldown epoch, then
    # 3 more bad -> epoch 9 would halve, but 3 at epoch 9 is better; 3 bad after it -> epoch 12: min_lr 0.3
    np.testing.assert_allclose(got, [1, 1, 1, 1, .5, .5, .5, .5, .5, .5, .5, .3])
    m = L.ReduceLROnPlateau(_opt(lr=1.0), mode="max", threshold=0.5, threshold_mode="abs", patience=0)
    _lrs(m, 4, [1.0, 1.4, 1.6])
    assert m.get_last_lr()[0] == pytest.approx(0.1) and m.best == 1.6


@pytest.mark.parametrize("name", list(CASES) + ["OneCycleLR", "ReduceLROnPlateau", "SequentialLR"])
def test_state_dict_round_trip_continues_the_sequence(name):
    def make(o):
        if name == "OneCycleLR":
            return L.OneCycleLR(o, max_lr=1.0, total_steps=30)
        if name == "ReduceLROnPlateau":
            return L.ReduceLROnPlateau(o, patience=1)
        if name == "SequentialLR":
            return L.SequentialLR(o, [L.LinearLR(o, total_iters=4), L.ExponentialLR(o, 0.8)], milestones=[4])
        return CASES[name][0](o)

    metrics = [3.0, 2.0, 2.5, 2.5, 2.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0] * 2
    plateau = name == "ReduceLROnPlateau"
    a_opt = _opt()
    a = make(a_opt)
    _lrs(a, 7, metrics if plateau else None)
    sd, opt_sd = a.state_dict(), a_opt.state_dict()
    assert "optimizer" not in sd and not any(callable(v) for v in sd.values())
    b_opt = _opt(lr=0.7)
    b = make(b_opt)
    b_opt.load_state_dict(opt_sd)
    b.load_state_dict(sd)
    rest = metrics[6:] if plateau else None
    np.testing.assert_array_equal(_lrs(a, 10, rest), _lrs(b, 10, rest))


def test_schedulers_need_an_optimizer():
    with pytest.raises(TypeError, match=r"StepLR\(\): optimizer must be an anydevice.optim optimizer.*got NoneType; "
                                        "build the optimizer first"):
        L.StepLR(None, step_size=3)
    with pytest.raises(TypeError, match=r"ReduceLROnPlateau\(\): optimizer must be.*got list"):
        L.ReduceLROnPlateau([nn.parameter([1.0])])
    with pytest.raises(KeyError, match="needs 'initial_lr' in parameter group 0"):
        L.ExponentialLR(_opt(), gamma=0.9, last_epoch=3)
    with pytest.raises(ValueError, match=r"StepLR\(\): step_size must be an int > 0, got 0"):
        L.StepLR(_opt(), step_size=0)
    with pytest.raises(ValueError, match="anneal_strategy must be 'cos' or 'linear'"):
        L.OneCycleLR(_opt(), max_lr=1.0, total_steps=5, anneal_strategy="exp")
    with pytest.raises(ValueError, match="give total_steps, or both epochs and steps_per_epoch"):
        L.OneCycleLR(_opt(), max_lr=1.0)
    with pytest.raises(ValueError, match="cycle_momentum=True needs an optimizer with 'momentum' or 'betas'"):
        L.OneCycleLR(optim.Adagrad([nn.parameter([1.0])]), max_lr=1.0, total_steps=5)
    with pytest.raises(TypeError, match="one per parameter group"):
        L.LambdaLR(_opt(), [lambda e: 1.0])
    with pytest.raises(ValueError, match="factor must be < 1"):
        L.ReduceLROnPlateau(_opt(), factor=2.0)
