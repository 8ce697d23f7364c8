"""The graph IR and its passes on small graphs: dead code removed, duplicates merged, constants
folded, memory planned into fewer bytes than one buffer per value; the text dump and DOT export;
replays after each pass still equal eager execution."""
from __future__ import annotations

import numpy as np
import pytest

import anydevice as ad
from anydevice import jit
from anydevice.jit import passes


def _traced(fn, *args, names=()):
    f = jit.compile(fn, passes=list(names), backend="eager")
    expected = fn(*args)
    f(*args)
    return f, f.last_graph, expected


def _ops(g):
    return [n.op.name for n in g.nodes]


def test_dead_code_is_removed():
    def fn(x):
        unused = ad.exp(x)  # noqa: F841 - dead: reaches no output
        return x * 2

    x = ad.asarray([1.0, 2.0])
    f, g, _ = _traced(fn, x)
    assert "exp" in _ops(g)
    passes.dce(g)
    assert _ops(g) == ["multiply"]
    f2, g2, _ = _traced(fn, x, names=["dce"])
    assert "exp" not in _ops(g2)
    assert f2(x).tolist() == [2.0, 4.0]


def test_duplicates_are_merged():
    def fn(x):
        return ad.sin(x) + ad.sin(x)

    x = ad.asarray([0.5, 1.5])
    _, g, expected = _traced(fn, x)
    assert _ops(g).count("sin") == 2
    passes.cse(g)
    passes.dce(g)
    assert _ops(g).count("sin") == 1
    add = g.nodes[-1]
    assert add.inputs[0] is add.inputs[1]
    f, _, _ = _traced(fn, x, names=["cse", "dce"])
    f(x)
    np.testing.assert_array_equal(f(x).numpy(), expected.numpy())


def test_random_draws_are_never_merged():
    def fn(x):
        return x + ad.random.rand(3) + ad.random.rand(3)

    f = jit.compile(fn, backend="eager")
    x = ad.zeros(3)
    f(x)
    a, b = f(x).numpy(), f(x).numpy()
    assert sum(n.op.category == "random" for n in f.last_graph.nodes) >= 2
    assert not np.array_equal(a, b)  # each replay draws anew


def test_constants_are_folded():
    def fn(x):
        c = ad.asarray([1.0, 2.0]) * 3.0 + 1.0  # host data: the same at every call
        return x + ad.exp(c) + ad.zeros(2)

    x = ad.asarray([0.0, 1.0])
    _, g, expected = _traced(fn, x)
    n = len(g.nodes)
    passes.fold_constants(g)
    passes.dce(g)
    assert _ops(g) == ["add", "add"] and len(g.nodes) < n
    assert sum(v.const is not None for v in g.inputs) >= 2
    f, _, _ = _traced(fn, x, names=["fold_constants", "dce"])
    f(x)
    np.testing.assert_array_equal(f(x).numpy(), expected.numpy())


def test_memory_plan_reuses_buffers():
    def fn(x):
        y = ad.exp(x)
        y = ad.sin(y)
        y = ad.cos(y)
        y = ad.tanh(y)
        return y.sum()

    x = ad.ones((64, 64))
    _, g, expected = _traced(fn, x)
    passes.plan_memory(g)
    plan = g.plan
    assert plan["unplanned_bytes"] == 4 * 64 * 64 * 4
    assert plan["planned_bytes"] < plan["unplanned_bytes"]
    assert plan["planned_bytes"] == 64 * 64 * 4  # element-wise ops write in place into one slot
    slots = {v.slot for n in g.nodes for v in n.outputs if v.slot is not None}
    assert slots == {0}
    assert g.outputs[0].slot is None and g.inputs[0].slot is None
    f, _, _ = _traced(fn, x, names=["plan_memory"])
    f(x)
    np.testing.assert_allclose(f(x).numpy(), expected.numpy(), rtol=1e-6)


def test_matmul_never_writes_over_its_input():
    def fn(a, b):
        return ad.matmul(ad.exp(a), b).sum()

    a = ad.ones((8, 8))
    _, g, _ = _traced(fn, a, a)
    passes.plan_memory(g)
    mm = next(n for n in g.nodes if n.op.name == "matmul")
    ins = [v.slot for v in mm.input_values() if v.slot is not None]
    assert mm.outputs[0].slot not in ins


def test_dump_and_dot():
    def fn(a, b):
        return ad.matmul(a, b) + 1.0

    _, g, _ = _traced(fn, ad.ones((256, 64)), ad.ones((64, 10)))
    text = g.dump()
    assert "%0 = arg (arg0) : float32[256,64] @cpu" in text
    assert "%2 = matmul(%0, %1) : float32[256,10] @cpu" in text
    assert text.splitlines()[-1].startswith("return %")
    dot = g.to_dot()
    assert dot.startswith("digraph G {") and dot.rstrip().endswith("}")
    assert 'label="matmul"' in dot and "v0 -> n" in dot
    c = g.copy()
    assert c.dump() == text and c.nodes[0] is not g.nodes[0]
    assert g.users(g.inputs[0]) == [g.nodes[0]]
    assert g.inputs[0].nbytes == 256 * 64 * 4


def test_training_step_dump_lists_writebacks():
    ad.manual_seed(0)
    lin = ad.nn.Linear(3, 2)
    opt = ad.optim.SGD(lin.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad()
        loss = lin(x).sum()
        loss.backward()
        opt.step()
        return loss

    f = jit.compile(step)
    x = ad.ones((2, 3))
    for _ in range(3):
        f(x)
    text = f.last_graph.dump()
    assert "writeback Linear.weight <- %" in text and "writeback Linear.weight.grad <- %" in text


def test_unknown_pass_is_an_error():
    with pytest.raises(ValueError, match="unknown pass.*fold_constants"):
        jit.compile(lambda x: x, passes=["inline"])


def test_a_view_keeps_its_input_alive_in_the_plan():
    def fn(x):
        y = ad.exp(x)
        t = ad.matrix_transpose(y)  # may be a view of y's storage (numpy)
        z = ad.sin(ad.cos(x))  # must not take y's slot while t still reads it
        return (t @ z).sum()

    _, g, _ = _traced(fn, ad.ones((8, 8)))
    passes.plan_memory(g)
    slot = {o.id: o.slot for n in g.nodes for o in n.outputs}
    by_name = {n.op.name: n for n in g.nodes}
    y = by_name["exp"].outputs[0]
    assert slot[by_name["cos"].outputs[0].id] != y.slot and slot[by_name["sin"].outputs[0].id] != y.slot
