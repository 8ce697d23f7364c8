"""The cpu graph compiler (anydevice_cpu/graph.py): chains of element-wise nodes run as one
generated numpy function writing into reused scratch buffers; results equal eager execution,
and nothing a replay returns is a buffer the next replay writes."""
from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

import anydevice as ad
from anydevice import nn, optim

RNG = np.random.default_rng(7)


def _t(a, dtype=None):
    return ad.asarray(np.asarray(a, dtype=dtype), device="cpu")


def _chain(x, b, m):
    """Element-wise work over one shape (a broadcast bias, a cast, a comparison) ending in a sum."""
    y = ad.exp(x * 0.5 + b) - 1.0
    z = ad.astype(y > 0.25, ad.float32) * m * y
    return z * z + y, ad.sum(z, axis=0)


def _inputs(n=32, dtype=np.float32):
    return (_t(RNG.standard_normal((n, 16)), dtype), _t(RNG.standard_normal(16), dtype),
            _t(RNG.standard_normal((n, 16)), dtype))


def _parts(f):
    """The executable of ``f``'s graph and the parts the cpu backend claimed in it."""
    run = next(v.run for v in f._variants.values() if v.graph is f.last_graph)
    return run, [s[1].executable for s in run.steps if s[0] == "claim"]


def test_a_chain_runs_as_one_part_with_scratch_buffers_and_eager_results():
    f = ad.jit.compile(_chain)
    for _ in range(3):
        args = _inputs()
        got, want = f(*args), _chain(*args)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.numpy(), w.numpy())
    run, parts = _parts(f)
    assert run.stats["fused_kernels"] == 1 and run.stats["native"] == 0, run.explain()
    src = parts[0].source
    assert "out=s[0]" in src and "_pool.pop()" in src, src  # intermediates in scratch, written in place
    assert f.stats["replays"] == 2


def test_returned_values_never_alias_scratch_of_a_later_replay():
    f = ad.jit.compile(_chain)
    args = _inputs()
    f(*args)
    first = f(*args)  # a replay
    kept = [t.numpy().copy() for t in first]
    bufs = [t._buf for t in first]
    for _ in range(3):  # later replays on other inputs
        f(*_inputs())
    for t, k, b in zip(first, kept, bufs):
        assert t._buf is b
        np.testing.assert_array_equal(t.numpy(), k)
    _, parts = _parts(f)
    scratch = {id(a) for p in parts for s in p.pool for a in s}
    assert scratch and not scratch & {id(b) for b in bufs}


def test_a_training_steps_loss_is_unchanged_by_the_next_replay():
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()

    @ad.jit.compile
    def step(x, y):
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    batches = [(_t(RNG.standard_normal((16, 8)), np.float32), _t(RNG.integers(0, 4, 16))) for _ in range(6)]
    losses = [step(x, y) for x, y in batches[:4]]
    assert step.stats["replays"] >= 1
    kept = [float(v.item()) for v in losses]
    grads = [p.grad.numpy().copy() for p in model.parameters()]
    held = [p.grad for p in model.parameters()]
    for x, y in batches[4:]:
        step(x, y)
    assert [float(v.item()) for v in losses] == kept
    for g, k in zip(held, grads):  # gradients a user kept from an earlier step stay as they were
        np.testing.assert_array_equal(g.numpy(), k)


def test_threads_replaying_one_graph_get_their_own_scratch():
    f = ad.jit.compile(_chain)
    args = _inputs(64)
    f(*args), f(*args)
    cases = [_inputs(64) for _ in range(4)]
    want = [[w.numpy() for w in _chain(*a)] for a in cases]
    errors, start = [], threading.Barrier(len(cases))

    def work(k):
        start.wait()
        for _ in range(30):
            got = [g.numpy() for g in f(*cases[k])]
            if not all(np.array_equal(g, w) for g, w in zip(got, want[k])):
                errors.append(k)
                return

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int32])
def test_other_dtypes_give_eager_results(dtype):
    def fn(x, b, m):
        return (x * b + m) * m - x, ad.maximum(x, m) + b

    f = ad.jit.compile(fn)
    for _ in range(3):
        raw = [RNG.integers(-5, 6, (8, 16)), RNG.integers(-5, 6, 16), RNG.integers(-5, 6, (8, 16))]
        args = [_t(a, dtype) for a in raw]
        for g, w in zip(f(*args), fn(*args)):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g.numpy(), w.numpy())
    run, parts = _parts(f)
    assert run.stats["claimed_nodes"] + run.stats["native"] == len(run.graph.nodes)
    if dtype is np.float16:  # 16-bit floats compute through float32 in their eager kernels
        assert all("out=" not in p.source for p in parts)


def test_warnings_are_those_of_eager_execution(monkeypatch):
    monkeypatch.delenv("ANYDEVICE_JIT_CHECK", raising=False)  # check mode runs each call eagerly too

    def fn(x, y):
        big = x * y          # overflows: numpy warns, as the eager multiply does
        return ad.log(big - x) / y, big + 1.0   # log of a negative and 1/0: silenced, as eagerly

    x, y = _t([[3e38, -1.0, 2.0]], np.float32), _t([[10.0, 0.0, 1.0]], np.float32)

    def caught(g):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            out = [t.numpy() for t in g(x, y)]
        return out, sorted(str(m.message) for m in w if issubclass(m.category, RuntimeWarning))

    f = ad.jit.compile(fn)
    caught(f)  # traced
    (want, ww), (got, wg) = caught(fn), caught(f)
    assert f.stats["replays"] == 1 and _parts(f)[1], f.explain()
    assert wg == ww and any("overflow" in m for m in ww), (wg, ww)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_a_failing_part_falls_back_to_eager_with_eagers_error():
    def fn(x, i):
        return ad.take(ad.exp(x) * 2.0 + 1.0, i, axis=0)

    x = _t(RNG.standard_normal((4, 3)), np.float32)
    f = ad.jit.compile(fn)
    f(x, _t([0, 1])), f(x, _t([2, 3]))
    with pytest.raises(IndexError) as compiled_err:
        f(x, _t([0, 9]))
    with pytest.raises(IndexError) as eager_err:
        fn(x, _t([0, 9]))
    assert str(compiled_err.value) == str(eager_err.value)
    assert "take" in str(eager_err.value)
