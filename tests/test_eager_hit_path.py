"""The eager hit path: a cached call runs its entry's prebuilt closure; keys made by the quick
forms equal the general loop's, attributes of different types stay apart, gradients are recorded
whenever an input needs them, and bad input gets the same error on every call and device."""
from __future__ import annotations

import numpy as np
import pytest

import anydevice as ad
from anydevice.engine import dispatch

DEVICES = ["cpu", "npu"]


def _t(shape=(3, 4), seed=0, device="cpu", dtype=np.float32):
    return ad.asarray(np.random.default_rng(seed).standard_normal(shape).astype(dtype), device=device)


def _loop_key(args):
    """The key of ``args`` as the general loop makes it: two keyword arguments take the call past
    every quick form, and their six trailing parts are dropped."""
    k = dispatch._call_key(args, {"p": None, "q": None})
    return k[:-6]


@pytest.mark.parametrize("form", ["x", "x,y", "x,shape", "c,x,y", "list", "list_of_one", "list_of_three"])
def test_the_quick_keys_are_the_general_loops(form):
    x, y = _t(), _t(seed=1)
    c = x > y
    args = {"x": (x,), "x,y": (x, y), "x,shape": (x, (4, -1)), "c,x,y": (c, x, y), "list": ([x, y],),
            "list_of_one": ([x],), "list_of_three": ([x, y, x],)}[form]
    assert dispatch._call_key(args, {}) == _loop_key(args)


def test_op_functions_hit_the_entries_the_full_path_stored(monkeypatch):
    """Op functions key a lone tensor (and one keyword attribute) inline: a warm call never
    reaches dispatch.call, whose keys filled the cache."""
    x = _t()
    calls = [lambda: ad.sum(x), lambda: ad.sum(x, axis=0), lambda: ad.softmax(x, axis=-1),
             lambda: ad.reshape(x, (4, 3)), lambda: ad.concat([x, x])]
    for f in calls:
        f()
    seen = []
    real = dispatch.call
    monkeypatch.setattr(dispatch, "call", lambda op, a, k: seen.append(op.name) or real(op, a, k))
    for f in calls:
        f()
    assert seen == []
    with pytest.raises(TypeError):
        ad.sum(x, axis=1.5)  # a float attribute: keyed by the loop, and refused
    assert seen == ["sum"]


def test_lists_that_are_not_all_tensors_are_keyed_by_the_loop_or_not_at_all():
    x = _t()
    assert dispatch._call_key(([x, 1.0],), {}) is None
    assert dispatch._call_key(([],), {}) == (list, (), ())


@pytest.mark.parametrize("device", DEVICES)
def test_attributes_of_another_type_get_their_own_validation(device):
    x = _t(device=device)
    for _ in range(3):
        assert ad.sum(x, axis=0).shape == (4,)
        with pytest.raises(TypeError, match=r"sum\(\).*axis"):
            ad.sum(x, axis=0.0)
        assert ad.reshape(x, (4, 3)).shape == (4, 3)
        with pytest.raises(TypeError, match=r"reshape\(\)"):
            ad.reshape(x, (4.0, 3))


@pytest.mark.parametrize("device", DEVICES)
def test_tuples_of_bools_are_not_tuples_of_ints(device):
    x = _t(device=device)
    for _ in range(3):  # (1, 0) == (True, False) in Python: the keys must still tell them apart
        assert ad.permute_dims(x, (1, 0)).shape == (4, 3)
        with pytest.raises(TypeError, match=r"permute_dims\(\): axes must be a tuple of ints"):
            ad.permute_dims(x, (True, False))
        assert ad.reshape(x, (1, 12)).shape == (1, 12)
        with pytest.raises(TypeError, match=r"reshape\(\): shape must be"):
            ad.reshape(x, (True, 12))


@pytest.mark.parametrize("device", DEVICES)
def test_the_same_errors_on_every_call(device):
    x, y = _t(device=device), _t((3, 5), seed=1, device=device)
    msgs = set()
    for _ in range(3):
        assert ad.concat([x, x]).shape == (6, 4)
        with pytest.raises(ValueError) as e1:
            ad.concat([x, y])
        with pytest.raises(ValueError) as e2:
            ad.where(x > 0, x, y)
        with pytest.raises(TypeError) as e3:
            ad.where(x, x, x)
        with pytest.raises(ValueError) as e4:
            ad.softmax(x, axis=2)
        msgs.add((str(e1.value), str(e2.value), str(e3.value), str(e4.value)))
    assert len(msgs) == 1
    m1, m2, m3, m4 = msgs.pop()
    assert "concat()" in m1 and "where" in m2 and "where()" in m3 and "softmax()" in m4
    assert "axis" in m4


CALLS = {
    "one": (lambda x, y: ad.sum(x * y, axis=0), 2),
    "two": (lambda x, y: ad.matmul(x, ad.permute_dims(y, (1, 0))), 2),
    "three": (lambda x, y: ad.where(y > 0, x, y), 2),
    "variadic": (lambda x, y: ad.concat([x, y]), 2),
    "attrs": (lambda x, y: ad.softmax(x, axis=-1) * y, 2),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(CALLS))
def test_gradients_are_recorded_after_calls_without_them(device, case):
    f, _ = CALLS[case]
    xn = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    y = _t(seed=3, device=device)
    plain = ad.asarray(xn, device=device)
    for _ in range(3):  # fills the cache with calls that record nothing
        r = f(plain, y)
        assert not r.requires_grad
    x = ad.asarray(xn, device=device).requires_grad_()
    out = f(x, y)
    assert out.requires_grad
    ad.sum(out).backward()
    assert x.grad is not None and x.grad.shape == (3, 4)
    with ad.no_grad():
        assert not f(x, y).requires_grad
    np.testing.assert_allclose(f(x, y).numpy(), r.numpy(), rtol=1e-6, atol=1e-7)


def test_an_op_without_gradients_takes_the_direct_path_with_a_graph_input():
    x = _t().requires_grad_()
    for _ in range(3):
        r = ad.argmax(x, axis=1)
        assert not r.requires_grad and r.tolist() == np.argmax(x.detach().numpy(), axis=1).tolist()


# --- the cpu kernels' formulations for short rows and whole-array variances ---------------------
def _close(op_name, got, x64, **attrs):
    from anydevice.ops.registry import get_op

    op = get_op(op_name)
    rtol, atol = op.tolerance.get("float32", (1.3e-6, 1e-5))
    with np.errstate(all="ignore"):
        ref = op.reference(x64, **attrs)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, equal_nan=True)


SHAPES = [(64, 64), (3, 1000), (8, 3, 40), (1024, 1), (2, 1025)]


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("offset", [0.0, 40.0, -300.0])
def test_softmax_along_short_rows_matches_the_reference(name, shape, offset):
    rng = np.random.default_rng(len(shape) + abs(int(offset)))
    x = (rng.standard_normal(shape) * 8 + offset).astype(np.float32)
    x[0, ..., 0] += 50  # one row far above the others: those rows take the per-row maximum
    for xs in (x, x - x[0, ..., 0].max() + 10):
        got = getattr(ad, name)(ad.asarray(xs), axis=-1)
        assert got.dtype is ad.float32 and got.shape == shape
        _close(name, got.numpy(), xs.astype(np.float64), axis=-1)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_special_values_are_the_per_row_formulas(name):
    x = np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32)
    x[1, 3], x[4, :] = np.nan, -np.inf
    x[7, 2], x[9, 9] = np.inf, -np.inf
    got = getattr(ad, name)(ad.asarray(x), axis=-1).numpy()
    _close(name, got, x.astype(np.float64), axis=-1)
    assert np.isnan(got[1]).all() and np.isnan(got[4]).all() and np.isnan(got[7]).all()
    assert np.isfinite(got[10]).all()
    on_npu = getattr(ad, name)(ad.asarray(x, device="npu"), axis=-1).numpy()
    np.testing.assert_allclose(got, on_npu, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("dtype", [ad.float16, ad.bfloat16])
def test_softmax_of_half_precision_rows(dtype):
    x = np.random.default_rng(1).standard_normal((32, 64)).astype(np.float32)
    got = ad.softmax(ad.asarray(x, dtype=dtype), axis=-1)
    assert got.dtype is dtype
    np.testing.assert_allclose(ad.astype(got, ad.float32).numpy(), ad.softmax(ad.asarray(x), axis=-1).numpy(),
                               rtol=2e-2, atol=2e-3)


@pytest.mark.parametrize("shape", [(64, 64), (4097,), (2, 3, 5, 7), ((1 << 20) + 1,)])
@pytest.mark.parametrize("correction", [0.0, 1.0, 2])
@pytest.mark.parametrize("keepdims", [False, True])
def test_whole_array_variance(shape, correction, keepdims):
    x = (np.random.default_rng(2).standard_normal(shape) * 3 + 100).astype(np.float32)
    got = ad.var(ad.asarray(x), correction=correction, keepdims=keepdims)
    assert got.dtype is ad.float32 and got.shape == ((1,) * len(shape) if keepdims else ())
    np.testing.assert_allclose(got.numpy(), np.var(x.astype(np.float64), ddof=correction, keepdims=keepdims),
                               rtol=1e-4, atol=1e-4)
    npu = ad.var(ad.asarray(x, device="npu"), correction=correction, keepdims=keepdims).numpy()
    np.testing.assert_allclose(got.numpy(), npu, rtol=1e-5)


def test_variance_special_cases_are_numpys():
    one = ad.asarray(np.ones(1, np.float32))
    assert np.isnan(ad.var(one, correction=1).item())  # n - correction = 0: NaN, as np.var
    inf = ad.asarray(np.array([1.0, np.inf, 2.0], np.float32))
    assert np.isnan(ad.var(inf).item())
    for v in ([2e19, -2e19] * 8, [3e38] * 16, [3e38, -3e38] * 8):  # squares overflow; the mean overflows
        x = np.array(v, np.float32)
        with np.errstate(all="ignore"):
            want = np.var(x)
        np.testing.assert_array_equal(ad.var(ad.asarray(x)).numpy(), want)
    with pytest.raises(ValueError, match=r"var\(\)"):
        ad.var(one, axis=3)


@pytest.fixture
def keyword_op():
    """A test op whose attribute is named like a Python keyword, with a cpu kernel that counts its calls."""
    from anydevice.ops import registry
    from anydevice.runtime.devices import as_device

    op = registry.define("test_shift_by", inputs=("x",), attrs={"lambda": registry.Int(1)},
                         dtype_rule=registry.same("real_floating"), shape_rule=lambda s, a: s[0],
                         reference=lambda x, **kw: x + kw["lambda"], category="test", dtypes="real_floating")
    seen = []

    def kernel(ctx, x, **kw):
        seen.append(kw)
        return x + np.asarray(kw["lambda"], x.dtype)

    table = as_device("cpu")._backend.kernels
    table.register("test_shift_by", kernel)
    yield op, seen
    registry._OPS.pop("test_shift_by", None)
    table._kernels.pop("test_shift_by", None)


def test_attributes_named_like_keywords_reach_the_kernel_on_every_hit(keyword_op):
    op, seen = keyword_op
    x = ad.asarray(np.arange(3, dtype=np.float32))
    for k in (1, 2, 2, 5, 5):
        r = dispatch.call(op, (x,), {"lambda": k})
        assert r.tolist() == [k, k + 1, k + 2] and r.dtype is ad.float32
    assert seen == [{"lambda": k} for k in (1, 2, 2, 5, 5)]
    runs = [e.run for e in op.plans[dispatch._CALLS].values()]
    if dispatch._chit is not None:  # the C runner passes keywords by name, whatever the name
        assert all(type(r) is dispatch._chit.Runner for r in runs)
    else:
        assert dispatch._RUNNERS.get((1, None)) is not None  # the kernel got its attributes as **kw


def test_operators_keep_their_fast_path_after_devices_are_dropped():
    from anydevice.engine import methods
    from anydevice.ops import registry

    registry.forget_devices()  # every op gets new plan and fast tables
    x = _t((8,), seed=4)
    for _ in range(3):
        y = x * 2.75
    np.testing.assert_array_equal(y.numpy(), x.numpy() * np.float32(2.75))
    assert registry.get_op("multiply").fast, "the element-wise fast table is filled again"
    assert any(k[0] is x.device._ctx and k[-1] == 2.75 for k in methods._scalar_bufs), \
        "the operator took its fast path (which caches the scalar operand)"


# --- the C hit (engine/_hit.c) ------------------------------------------------------------------
needs_c = pytest.mark.skipif(dispatch._chit is None, reason="the dispatcher's C hit is not built")


def _op_function_key(args, kwargs):
    """The key an op function makes in Python for ``args``/``kwargs``."""
    if (len(args) == 2 and not kwargs and type(args[0]) is ad.Tensor and type(args[1]) is tuple
            and all(type(v) is int for v in args[1])):
        a = args[0]
        return (a.device._ctx, a.dtype, a.shape, dispatch._INTS, args[1])
    return dispatch._call_key(args, kwargs)


def _same(k, p):
    """Equal keys whose parts have equal types (True == 1 in Python, not in a key)."""
    return k == p and [type(v) for v in k] == [type(v) for v in p]


@needs_c
@pytest.mark.parametrize("form", [
    "x", "x,y", "c,x,y", "x,shape", "x,()", "x,(True,1)", "list", "tuple_of_tensors", "list_of_one", "x,0", "x,0.0",
    "x,-0.0", "x,None", "x,str", "x,dtype", "x,device", "x,Ellipsis", "axis=0", "axis=(0,1)", "axis,keepdims",
    "fill=1.5", "shape=(4,-1)"])
def test_the_c_keys_are_the_python_keys(form):
    x, y = _t(), _t(seed=1)
    c = x > y
    args, kwargs = {
        "x": ((x,), {}), "x,y": ((x, y), {}), "c,x,y": ((c, x, y), {}), "x,shape": ((x, (4, -1)), {}),
        "x,()": ((x, ()), {}), "x,(True,1)": ((x, (True, 1)), {}), "list": (([x, y],), {}),
        "tuple_of_tensors": (((x, y),), {}), "list_of_one": (([x],), {}), "x,0": ((x, 0), {}),
        "x,0.0": ((x, 0.0), {}), "x,-0.0": ((x, -0.0), {}), "x,None": ((x, None), {}), "x,str": ((x, "mean"), {}),
        "x,dtype": ((x, ad.float16), {}), "x,device": ((x, x.device), {}), "x,Ellipsis": ((x, ...), {}),
        "axis=0": ((x,), {"axis": 0}), "axis=(0,1)": ((x,), {"axis": (0, 1)}),
        "axis,keepdims": ((x,), {"axis": -1, "keepdims": True}), "fill=1.5": ((x,), {"fill_value": 1.5}),
        "shape=(4,-1)": ((x,), {"shape": (4, -1)}),
    }[form]
    k = dispatch._chit.key(args, kwargs or None)
    assert k is not None and _same(k, _op_function_key(args, kwargs))


@needs_c
@pytest.mark.parametrize("form", ["x,[0,1]", "x,complex", "tensor keyword", "x,object", "x,nested", "[]"])
def test_calls_the_c_hit_cannot_key_take_the_python_path(form):
    x = _t()
    args, kwargs = {"x,[0,1]": ((x, [0, 1]), {}), "x,complex": ((x, 1j), {}), "tensor keyword": ((x,), {"w": x}),
                    "x,object": ((x, object()), {}), "x,nested": ((x, ((0, 1), 2)), {}), "[]": (([],), {})}[form]
    assert dispatch._chit.key(args, kwargs or None) is None
    assert dispatch._chit.lookup(ad.sum.op, args, kwargs or None) is dispatch._MISS


@needs_c
def test_the_c_lookup_leaves_observers_tracers_and_autocast_to_python(monkeypatch):
    x = _t()
    ad.sum(x)  # cached
    assert dispatch._chit.lookup(ad.sum.op, (x,), None) is not dispatch._MISS
    dispatch.add_observer(lambda *a, **k: None)
    try:
        assert dispatch._chit.lookup(ad.sum.op, (x,), None) is dispatch._MISS
    finally:
        dispatch._observers.clear()
    old, dispatch._tracer = dispatch._tracer, (lambda *a: None)
    try:
        assert dispatch._chit.lookup(ad.sum.op, (x,), None) is dispatch._MISS
    finally:
        dispatch._tracer = old
    from anydevice import amp

    with amp.autocast("cpu", dtype=ad.bfloat16):
        assert dispatch._chit.lookup(ad.sum.op, (x,), None) is dispatch._MISS
    ad.exp(x)
    assert dispatch._chit.lookup(ad.exp.op, (x,), None) is not dispatch._MISS
    monkeypatch.setattr(ad.exp.op, "fast", {(x.device._ctx, x.dtype): None})
    assert dispatch._chit.lookup(ad.exp.op, (x,), None) is dispatch._MISS  # element-wise fast paths: their own


@needs_c
def test_c_runners_are_collected_with_their_entries():
    import gc

    def count():
        gc.collect()
        return sum(type(o) is dispatch._chit.Runner for o in gc.get_objects())

    x = _t()
    ad.reshape(x, (12,))
    ad.reshape(x, (2, 6))
    runs = [e.run for e in ad.reshape.op.plans[dispatch._CALLS].values()]
    assert len(runs) == 2 and all(type(r) is dispatch._chit.Runner for r in runs)
    before = count()
    del runs
    ad.reshape.op.plans.clear()  # the entries, their runners and the runners' paths back to them: cycles
    assert count() == before - 2


@needs_c
@pytest.mark.parametrize("key", [1, -1, slice(1, 3), slice(None, None, 2), (1, 2), (slice(1, 3), None), (..., 1),
                                 (1, ...), (), (None,), True, (True,), slice(1.0, 2), slice(True, 2), [1], (0, [1]),
                                 slice(np.int64(1), 3), np.int64(1), "a"], ids=repr)
def test_the_c_index_ids_are_the_python_ones(key):
    from anydevice.engine import methods

    want, got = methods._index_id(key), dispatch._chit.index_id(key)
    assert got == want and type(got) is type(want) and repr(got) == repr(want)


@needs_c
def test_the_c_operator_hit_records_graphs_and_leaves_observers_to_python():
    x, y = _t(), _t(seed=1)
    for _ in range(3):  # the first calls fill the plans and the cache
        x + y, x @ _t((4, 3)), x[1:3]
    assert dispatch._chit.binary(ad.add.op, x, y) is not dispatch._MISS
    assert dispatch._chit.getitem(ad.api.op("getitem"), x, slice(1, 3)) is not dispatch._MISS
    np.testing.assert_array_equal((x + y).numpy(), x.numpy() + y.numpy())
    np.testing.assert_array_equal(x[1:3].numpy(), x.numpy()[1:3])
    w = _t().requires_grad_()
    ad.sum((w + y) * w[0:1]).backward()  # both hits defer to the recording path when a graph is needed
    want = y.numpy()[0:1] + 2 * w.numpy()[0:1]
    np.testing.assert_allclose(w.grad.numpy()[1:], np.broadcast_to(w.numpy()[0:1], (2, 4)), rtol=1e-6)
    np.testing.assert_allclose(w.grad.numpy()[0], want[0] + (w.numpy() + y.numpy())[1:].sum(0), rtol=1e-5)
    seen = []
    dispatch.add_observer(lambda *a, **k: seen.append(1))
    try:
        assert dispatch._chit.binary(ad.add.op, x, y) is dispatch._MISS
        assert dispatch._chit.getitem(ad.api.op("getitem"), x, slice(1, 3)) is dispatch._MISS
        x + y
        x[1:3]
    finally:
        dispatch._observers.clear()
    assert len(seen) == 2
    assert dispatch._chit.binary(ad.add.op, x, 2.0) is dispatch._MISS  # scalars: the operator's own path
