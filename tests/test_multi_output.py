"""Multi-output ops: one registry entry whose rules, kernels, decomposition and VJP deal in tuples."""
from __future__ import annotations

import numpy as np
import pytest

import anydevice as ad
from anydevice.engine import dispatch
from anydevice.ops import registry
from anydevice.ops.registry import same
from anydevice.runtime.devices import as_device


def _vjp(xp, g, i, o):
    gs, gc = g
    (x,) = i
    return (gs * xp.cos(x) - gc * xp.sin(x),)


@pytest.fixture
def sincos():
    """A test op with two outputs (sin, cos), defined for the test and removed afterwards."""
    def rule(ds, attrs):
        c, _ = same("real_floating")(ds, attrs)
        return c, (c, c)

    op = registry.define(
        "test_sincos", inputs=("x",), outputs=("sin", "cos"), dtype_rule=rule,
        shape_rule=lambda shapes, attrs: (shapes[0], shapes[0]),
        reference=lambda x: (np.sin(x), np.cos(x)), vjp=_vjp,
        decomposition=lambda xp, x: (xp.sin(x), xp.cos(x)), category="test", dtypes="real_floating",
    )
    tables = []
    yield op, tables
    registry._OPS.pop("test_sincos", None)
    for t in tables:
        t._kernels.pop("test_sincos", None)


def _run(op, *args, **kw):
    return dispatch.call(op, args, kw)


def _x(device, dtype=ad.float32):
    return ad.asarray(np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3), dtype=dtype, device=device)


@pytest.mark.parametrize("device", ["cpu", "npu", "dcu"])
def test_decomposed_outputs_are_a_tuple_with_rules_applied(sincos, device):
    op, _ = sincos
    s, c = _run(op, _x(device))
    assert (s.shape, c.shape, s.dtype, c.dtype, str(s.device)) == ((2, 3), (2, 3), ad.float32, ad.float32, str(as_device(device)))
    xs = np.linspace(-2, 2, 6).reshape(2, 3)
    np.testing.assert_allclose(s.numpy(), np.sin(xs), rtol=1e-6)
    np.testing.assert_allclose(c.numpy(), np.cos(xs), rtol=1e-6)


def test_native_kernels_both_conventions(sincos):
    op, tables = sincos
    cpu, npu = as_device("cpu"), as_device("npu:0")
    calls = []

    def returning(ctx, x):
        calls.append("returning")
        return np.sin(x) + 1, np.cos(x) + 1  # +1 proves the kernel, not the decomposition, ran

    cpu._backend.kernels.register("test_sincos", returning)
    tables.append(cpu._backend.kernels)
    s, c = _run(op, _x("cpu"))
    assert calls == ["returning"]
    np.testing.assert_allclose(s.numpy() - 1, np.sin(np.linspace(-2, 2, 6).reshape(2, 3)), rtol=1e-5, atol=1e-6)

    seen = []

    def filling(ctx, out, x):  # writes each given result buffer through the device's own out= kernel
        seen.append(type(out).__name__)
        assert isinstance(out, tuple) and len(out) == 2
        full = npu._backend.kernels.lookup("full", ad.float32)
        assert full.out
        full.fn(ctx, out[0], shape=x.shape, fill_value=7.0, dtype=ad.float32)
        full.fn(ctx, out[1], shape=x.shape, fill_value=-3.0, dtype=ad.float32)

    npu._backend.kernels.register("test_sincos", filling, out=True)
    tables.append(npu._backend.kernels)
    a, b = _run(op, _x("npu"))
    assert seen == ["tuple"]
    np.testing.assert_array_equal(a.numpy(), np.full((2, 3), 7.0, np.float32))
    np.testing.assert_array_equal(b.numpy(), np.full((2, 3), -3.0, np.float32))


def test_gradients_of_one_and_of_both_outputs(sincos):
    op, _ = sincos
    xs = np.linspace(-2, 2, 6).reshape(2, 3)
    for device in ("cpu", "npu"):
        x = _x(device).requires_grad_(True)
        s, c = _run(op, x)
        ad.sum(s * 2.0).backward()
        np.testing.assert_allclose(x.grad.numpy(), 2 * np.cos(xs), rtol=1e-5)

        x = _x(device).requires_grad_(True)
        s, c = _run(op, x)
        ad.sum(s + c * 3.0).backward()
        np.testing.assert_allclose(x.grad.numpy(), np.cos(xs) - 3 * np.sin(xs), rtol=1e-5, atol=1e-6)


def test_second_backward_through_a_used_multi_output_graph_raises(sincos):
    op, _ = sincos
    x = _x("cpu").requires_grad_(True)
    s, c = _run(op, x)
    y = ad.sum(s + c)
    y.backward()
    with pytest.raises(RuntimeError, match="already used"):
        y.backward()


def test_half_precision_decomposition_rounds_each_output_once(sincos):
    op, _ = sincos
    s, c = _run(op, _x("cpu", ad.float16))
    assert (s.dtype, c.dtype) == (ad.float16, ad.float16)
    x16 = np.linspace(-2, 2, 6, dtype=np.float32).astype(np.float16).reshape(2, 3)
    np.testing.assert_array_equal(c.numpy(), np.cos(x16.astype(np.float32)).astype(np.float16))


def test_cpu_fallback_returns_every_output_on_the_device(sincos):
    op, tables = sincos
    cpu = as_device("cpu")
    cpu._backend.kernels.register("test_sincos", lambda ctx, x: (np.sin(x), np.cos(x)))
    tables.append(cpu._backend.kernels)
    op.decomposition = None  # a primitive with a cpu kernel only
    op.plans.clear()
    prev = dispatch.set_fallback_mode("silent")
    try:
        s, c = _run(op, _x("npu"))
    finally:
        dispatch.set_fallback_mode(prev)
    assert str(s.device) == str(c.device) == "npu:0"
    np.testing.assert_allclose(c.numpy(), np.cos(np.linspace(-2, 2, 6).reshape(2, 3)), rtol=1e-6)
    assert dispatch.fallback_counts()[("test_sincos", "npu:0")] >= 1


def test_conformance_checks_every_output_values_and_grads(sincos):
    """The conformance runner compares each output with the reference, and the gradient of the
    sum over outputs with finite differences; a kernel wrong in one output fails the values check."""
    from anydevice.ops.samples import Sample
    from anydevice_conformance.runner import run_op

    op, tables = sincos
    op.samples = lambda d, rng: [Sample([np.linspace(-1, 1, 5).astype(d.numpy)], {}, "line", grad=True)]
    results = {r.check: r for r in run_op(op, "npu:0", "float32")}
    assert {k: r.status for k, r in results.items()} == {"dtype": "pass", "shape": "pass", "values": "pass", "grad": "pass"}, [r.message for r in results.values()]

    npu = as_device("npu:0")

    def sin(ctx, x):  # the device's sin kernel, in whichever convention it has
        k = npu._backend.kernels.lookup("sin", ad.float32)
        if not k.out:
            return k.fn(ctx, x)
        out = ctx.empty(x.shape, ad.float32)
        k.fn(ctx, out, x)
        return out

    def wrong(ctx, x):  # right sin, wrong cos
        return sin(ctx, x), sin(ctx, x)

    npu._backend.kernels.register("test_sincos", wrong)
    tables.append(npu._backend.kernels)
    op.plans.clear()
    results = {r.check: r for r in run_op(op, "npu:0", "float32", checks=("values",))}
    assert results["values"].status == "fail" and "output cos" in results["values"].message
