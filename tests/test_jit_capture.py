"""Static-graph capture (anydevice.jit.compile): whole training steps replayed as one graph.

The MLP and CNN of the examples train a few steps with Adam or SGD, once eagerly and once
compiled (forward, backward and the optimizer step in one graph): the losses of every step, the
parameters, the BatchNorm running statistics and the optimizer state must equal eager's. OpenCL
is compared within float32 rounding: PoCL's parallel reductions vary by an ulp between two eager
runs already. Also: a new shape traces again; bounded variants; data-dependent control flow,
host reads, data-dependent shapes and Python-side state are refused at trace time naming the
line (and leave the state untouched); value checks become flags that raise eager's error.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import anydevice as ad
from anydevice import jit, nn, optim
from examples import _common, cnn_digits, mlp_digits

DEVICES = ["cpu", "npu:0", "dcu:0", "opencl:0"]
STEPS = 4


@pytest.fixture(scope="module")
def digits():
    x, y, _, _ = _common.digits(0)
    return x[:STEPS * 32], y[:STEPS * 32]


def _same(a, b, dev):
    a, b = np.asarray(a), np.asarray(b)
    if dev.startswith("opencl"):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(a, b)


def _train(dev, model_of, opt_of, data, compiled, backend="auto", shape=(64,)):
    ad.manual_seed(0)
    model = model_of(dev)
    opt = opt_of(model.parameters())
    ce = nn.CrossEntropyLoss()

    def step(xb, yb):
        opt.zero_grad()
        loss = ce(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    fn = jit.compile(step, backend=backend) if compiled else step
    ad.manual_seed(1)  # dropout masks
    x, y = data
    losses = []
    for k in range(STEPS):
        xb = ad.asarray(x[k * 32:(k + 1) * 32].reshape((-1,) + shape), device=dev)
        losses.append(fn(xb, ad.asarray(y[k * 32:(k + 1) * 32], device=dev)).numpy())
    return losses, model, opt, fn


def _compare(dev, eager, compiled):
    (la, ma, oa, _), (lb, mb, ob, fn) = eager, compiled
    assert fn.stats["replays"] >= STEPS - 2, fn.explain()  # the first steps trace, the others replay
    for a, b in zip(la, lb):
        _same(a, b, dev)
    for p, q in zip(ma.parameters(), mb.parameters()):
        _same(p.numpy(), q.numpy(), dev)
        _same(p.grad.numpy(), q.grad.numpy(), dev)
    for p, q in zip(ma.buffers(), mb.buffers()):
        _same(p.numpy(), q.numpy(), dev)
    sa, sb = oa.state_dict()["state"], ob.state_dict()["state"]
    assert sa.keys() == sb.keys()
    for k in sa:
        for name, v in sa[k].items():
            w = sb[k][name]
            _same(v.numpy() if hasattr(v, "numpy") else v, w.numpy() if hasattr(w, "numpy") else w, dev)
    assert oa.step_count == ob.step_count == STEPS


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("opt", ["adam", "sgd"])
def test_mlp_training_step_replays_like_eager(dev, opt, digits):
    opt_of = ((lambda p: optim.Adam(p, lr=3e-3)) if opt == "adam"
              else (lambda p: optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-4)))
    eager = _train(dev, mlp_digits.model, opt_of, digits, False)
    compiled = _train(dev, mlp_digits.model, opt_of, digits, True)
    _compare(dev, eager, compiled)
    g = compiled[3].last_graph
    ops = {n.op.name for n in g.nodes}
    assert {"matmul", "cross_entropy", f"{opt}_update"} <= ops  # forward, backward and update in one graph
    assert any(str(t).endswith(".grad") for _, t in g.writebacks)


@pytest.mark.parametrize("dev", DEVICES)
def test_cnn_training_step_with_batchnorm_and_dropout(dev, digits):
    """Dropout draws anew at every replay (its generator advances as eager's does); BatchNorm's
    running statistics are written back."""
    # A conv bias followed by BatchNorm has a gradient of pure rounding noise, which Adam turns into
    # steps of about lr: on OpenCL, whose fused kernels round differently from its eager ones, that
    # noise would be compared; SGD keeps it at the size of the noise.
    opt_of = ((lambda p: optim.SGD(p, lr=0.05, momentum=0.9)) if dev.startswith("opencl")
              else (lambda p: optim.Adam(p, lr=2e-3)))
    eager = _train(dev, cnn_digits.model, opt_of, digits, False, shape=(1, 8, 8))
    compiled = _train(dev, cnn_digits.model, opt_of, digits, True, shape=(1, 8, 8))
    _compare(dev, eager, compiled)
    assert compiled[3].last_graph.random, "the dropout draw is recorded"
    assert ad.random.default_generator(dev).offset > 0


def test_new_shape_traces_again_and_variants_are_bounded():
    f = jit.compile(lambda x, k: (x * k).sum(axis=0), max_variants=2)
    a = ad.ones((3, 2))
    assert f(a, 2.0).tolist() == [6.0, 6.0]
    assert f(a, 2.0).tolist() == [6.0, 6.0]
    assert f.stats["traces"] == 1 and f.stats["replays"] == 1
    assert f(ad.ones((4, 2)), 2.0).tolist() == [8.0, 8.0]  # a new shape
    assert f.stats["traces"] == 2 and len(f.graphs) == 2
    with pytest.warns(jit.JitWarning, match="max_variants"):
        assert f(a, 3.0).tolist() == [9.0, 9.0]  # a new Python value, beyond the bound: eager
    assert f.stats["eager_calls"] == 1
    assert f(ad.ones((4, 2)), 2.0).tolist() == [8.0, 8.0]
    assert f.stats["replays"] == 2


def test_a_changed_learning_rate_traces_again():
    ad.manual_seed(0)
    w = nn.Linear(3, 1)
    opt = optim.SGD(w.parameters(), lr=0.1)
    x = ad.ones((2, 3))

    @jit.compile
    def step(x):
        opt.zero_grad()
        loss = w(x).sum()
        loss.backward()
        opt.step()
        return loss

    for _ in range(3):
        step(x)
    traces = step.stats["traces"]
    opt.set_lr(0.01)
    before = w.weight.numpy()
    step(x)
    assert step.stats["traces"] == traces + 1
    np.testing.assert_allclose(before - w.weight.numpy(), 0.01 * 2.0, rtol=1e-6)  # d(sum)/dw = 2 per weight


def _line_of(fn, text):
    import inspect

    lines, start = inspect.getsourcelines(fn)
    return start + next(k for k, line in enumerate(lines) if text in line)


def test_host_reads_are_refused_naming_the_line_and_state_is_untouched():
    ad.manual_seed(0)
    w = nn.Linear(3, 1)
    opt = optim.SGD(w.parameters(), lr=0.1)
    log = []

    def step(x):
        opt.zero_grad()
        loss = (w(x) * ad.random.rand(2, 1)).sum()
        loss.backward()
        opt.step()
        log.append(loss.item())
        return loss

    before, offset = w.weight.numpy(), ad.random.default_generator().offset
    f = jit.compile(step)
    with pytest.raises(jit.TraceError, match=rf"test_jit_capture.py:{_line_of(step, 'log.append')}.*log.append"
                                             r".*\.item\(\).*eager"):
        f(ad.ones((2, 3)))
    np.testing.assert_array_equal(w.weight.numpy(), before)  # the refused call changed nothing
    assert w.weight.grad is None and opt.step_count == 0 and ad.random.default_generator().offset == offset


def test_in_place_updates_of_arguments_are_written_back():
    @jit.compile
    def fn(x, acc):
        acc += x * 2  # rebinds acc: a write-back to the caller's tensor
        return acc.sum()

    acc = ad.zeros(3)
    for k in range(3):
        assert fn(ad.ones(3), acc).item() == 6.0 * (k + 1)
    assert acc.tolist() == [6.0, 6.0, 6.0] and fn.stats["replays"] == 2


@pytest.mark.parametrize("read", ["if", "float", "numpy", "tolist"])
def test_data_dependent_control_flow_is_refused(read):
    def fn(x):
        s = x.sum()
        if read == "if":
            if s > 0:
                return x
            return -x
        if read == "float":
            return x * float(s)
        if read == "numpy":
            return x * s.numpy()
        return x * len(s.reshape(1).tolist())

    with pytest.raises(jit.TraceError, match=r"test_jit_capture.py:\d+.*host.*anydevice.jit.eager"):
        jit.compile(fn)(ad.ones(3))
    with jit.eager():  # the suggested way out runs it as written
        assert jit.compile(fn)(ad.ones(3)).shape == (3,)


def test_data_dependent_shape_is_refused():
    f = jit.compile(lambda x: ad.nonzero(x > 0)[0])
    with pytest.raises(jit.TraceError, match=r"test_jit_capture.py:\d+.*argwhere\(\) has a result shape that depends "
                                             r"on the data.*size="):
        f(ad.asarray([1.0, -1.0, 2.0]))


def test_python_state_that_changes_is_refused():
    class Meter:
        total = 0.0

    m = Meter()
    m.total = 0.0

    def fn(x):
        m.total = m.total + 0.5  # Python-side state a replay cannot repeat
        return x * 2

    with pytest.raises(jit.TraceError, match=r"Meter.total from 0.0 to 0.5"):
        jit.compile(fn)(ad.ones(2))
    assert m.total == 0.0


def test_integer_counters_are_replayed():
    class Counter:
        pass

    c = Counter()
    c.n = 0

    @jit.compile
    def fn(x):
        c.n += 1
        return x + 1

    for _ in range(4):
        fn(ad.ones(2))
    assert fn.stats["replays"] == 3 and c.n == 4


def test_outputs_that_need_autograd_are_refused():
    w = ad.ones(3)
    w.requires_grad = True
    with pytest.raises(jit.TraceError, match="requires grad.*backward\\(\\) inside"):
        jit.compile(lambda x: x * w)(ad.ones(3))
    with ad.no_grad():
        assert jit.compile(lambda x: x * w)(ad.ones(3)).tolist() == [1.0, 1.0, 1.0]


def test_device_copies_inside_are_refused():
    with pytest.raises(jit.TraceError, match="device copy"):
        jit.compile(lambda x: (x.to("npu:0") * 2).sum())(ad.ones(3))


@pytest.mark.parametrize("dev", ["cpu", "npu:0"])
def test_value_checks_become_flags_raising_eagers_error(dev):
    """cross_entropy's label bound is checked on the device; a replay reads one flag and a bad
    label raises the IndexError eager execution raises."""
    logits = ad.zeros((4, 3), device=dev)
    f = jit.compile(lambda lg, y: nn.functional.cross_entropy(lg, y))
    good = ad.asarray([0, 1, 2, 1], device=dev)
    f(logits, good)
    f(logits, good)
    assert f.stats["replays"] == 1 and len(f.last_graph.flags) == 1
    with pytest.raises(IndexError) as eager_err:
        nn.functional.cross_entropy(logits, ad.asarray([0, 1, 3, 1], device=dev))
    with pytest.raises(IndexError) as replay_err:
        f(logits, ad.asarray([0, 1, 3, 1], device=dev))
    assert str(replay_err.value) == str(eager_err.value)
    assert f.stats["flag_fallbacks"] == 1


def test_check_mode_compares_with_eager(monkeypatch):
    ad.manual_seed(0)
    w = nn.Linear(4, 2)
    opt = optim.Adam(w.parameters(), lr=0.01)

    def step(x):
        opt.zero_grad()
        loss = (w(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    f = jit.compile(step, check=True)
    x = ad.ones((3, 4))
    for _ in range(4):
        f(x)
    assert f.stats["checks"] == 2 and f.stats["replays"] == 2
    variant = next(iter(f._variants.values()))
    run = variant.run
    variant.run = lambda bufs: [ad.asarray(np.full(1, 7.0, np.float32)).reshape(())._buf] + run(bufs)[1:]
    with pytest.raises(jit.CheckError, match="output 0"):
        f(x)
    monkeypatch.setenv("ANYDEVICE_JIT_CHECK", "1")
    assert jit.compile(step).check


def test_compile_as_decorator_and_aliases():
    @jit.compile(backend="eager")
    def f(x):
        return {"y": x + 1, "n": 3}

    a = ad.ones(2)
    assert f(a)["y"].tolist() == [2.0, 2.0] and f(a)["n"] == 3
    assert jit.to_static is jit.compile and ad.compile is jit.compile
    assert "variant 0" in f.explain() and f.last_graph is f.graphs[0]
    with pytest.raises(ValueError, match="backend must be one of"):
        jit.compile(lambda x: x, backend="tpu")
    with pytest.raises(ValueError, match="max_variants"):
        jit.compile(lambda x: x, max_variants=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert jit.compile(lambda x: x * 2, passes=[])(a).tolist() == [2.0, 2.0]


def test_autocast_and_gradscaler_inf_flag(digits):
    """Under autocast with a GradScaler, the inf/NaN test of the gradients is a flag: a replay
    whose gradients overflow is discarded and the step runs eagerly (skipped, scale halved)."""
    from anydevice import amp

    dev = "npu:0"
    x, y = digits

    def run(compiled):
        ad.manual_seed(0)
        model = mlp_digits.model(dev)
        opt = optim.SGD(model.parameters(), lr=0.1)
        scaler = amp.GradScaler(init_scale=1024.0, growth_interval=100)
        ce = nn.CrossEntropyLoss()

        def step(xb, yb):
            opt.zero_grad()
            with amp.autocast(dev):
                loss = ce(model(xb), yb)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            return loss

        fn = jit.compile(step) if compiled else step
        losses = []
        for k in range(6):
            xb = x[k * 16:(k + 1) * 16].copy()
            if k == 4:
                xb[0, 0] = np.inf  # this step's gradients overflow
            losses.append(fn(ad.asarray(xb, device=dev), ad.asarray(y[k * 16:(k + 1) * 16], device=dev)).numpy())
        return losses, model, scaler, fn

    la, ma, sa, _ = run(False)
    lb, mb, sb, fn = run(True)
    np.testing.assert_array_equal(np.array(la), np.array(lb))
    for p, q in zip(ma.parameters(), mb.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    assert sa.get_scale() == sb.get_scale() == 512.0 and sa._growth_tracker == sb._growth_tracker == 1
    assert fn.stats["flag_fallbacks"] == 1 and fn.stats["replays"] >= 2
    assert any("__init__" in what for _, _, what in fn.graphs[0].flags)  # GradScaler's test, in amp


@pytest.mark.parametrize("dev", ["cpu", "npu:0"])
def test_conformance_compile_mode(dev, monkeypatch):
    """``anydevice conformance --compile``: samples traced, the replay compared with the oracle."""
    from anydevice_conformance import runner, suite

    made = []
    real = jit.compile

    def spy(fn, **kw):
        made.append(real(fn, **kw))
        return made[-1]

    monkeypatch.setattr(jit, "compile", spy)
    report = suite.run(devices=[dev], ops=["add", "matmul", "sum", "take", "cross_entropy", "where", "concat"],
                       dtypes=["float32", "int64"], compile=True)
    assert report.ok, [c.message for c in report.failures()][:3]
    assert report.selection["compile"] is True and runner.COMPILE[0] is False
    traced = [f for f in made if f.stats["traces"]]  # (error-parity samples raise while tracing)
    assert len(traced) > 20 and all(f.stats["replays"] == 1 for f in traced)  # one trace, then one replay


def test_compiled_module_for_inference_retraces_on_mode_change():
    """A Module compiled as it is: eval and train mode are separate graphs (``training`` is part
    of the guard); in train mode BatchNorm's running statistics are written back like eager's."""
    def build():
        ad.manual_seed(0)
        return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                             nn.Linear(4 * 8 * 8, 3))

    eager, m = build(), build()
    f = jit.compile(m)
    x = ad.asarray(np.random.default_rng(0).standard_normal((5, 1, 8, 8)).astype(np.float32))
    with ad.no_grad():
        for mode in (False, True):
            eager.train(mode)
            m.train(mode)
            for _ in range(3):
                np.testing.assert_array_equal(f(x).numpy(), eager(x).numpy())
    assert f.stats["traces"] == 2 and f.stats["replays"] == 4
    for a, b in zip(eager.buffers(), m.buffers()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert f.explain().startswith("Sequential: 6 calls, 2 traces, 4 replays")


def test_python_state_growing_every_call_is_refused():
    history = []

    @jit.compile
    def fn(x):
        y = x * 2
        history.append(y)  # a container that grows at every call: no graph can repeat that
        return y

    fn(ad.ones(2))
    fn(ad.ones(2))  # a first call may build state (an optimizer's first step): traced again
    with pytest.raises(jit.TraceError, match=r"changes the structure of Python state on every call.*list"):
        fn(ad.ones(2))
    assert fn.stats["replays"] == 0 and len(history) == 2
