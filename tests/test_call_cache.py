"""The dispatcher's call cache: a repeated call reuses what validation worked out for the same
devices, dtypes, shapes and attribute values, and behaves exactly as the first call did."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import anydevice as ad
from anydevice import amp
from anydevice.engine import dispatch
from anydevice.ops.registry import get_op

DEVICES = ["cpu", "npu"]


def _calls(name):
    return get_op(name).plans.get(None) or {}


def _x(device, shape=(3, 4), dtype=np.float32, seed=0):
    a = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return a, ad.asarray(a, device=device)


CASES = {
    "sum": (lambda x, y: ad.sum(x), lambda a, b: a.sum()),
    "sum_axis": (lambda x, y: ad.sum(x, axis=0, keepdims=True), lambda a, b: a.sum(axis=0, keepdims=True)),
    "max_neg_axis": (lambda x, y: ad.max(x, axis=-1), lambda a, b: a.max(axis=-1)),
    "mean": (lambda x, y: ad.mean(x, axis=(0, 1)), lambda a, b: a.mean()),
    "reshape_list": (lambda x, y: ad.reshape(x, [4, 3]), lambda a, b: a.reshape(4, 3)),
    "permute": (lambda x, y: x.T, lambda a, b: a.T),
    "slice": (lambda x, y: x[1:3], lambda a, b: a[1:3]),
    "concat": (lambda x, y: ad.concat([x, y], axis=1), lambda a, b: np.concatenate([a, b], axis=1)),
    "where": (lambda x, y: ad.where(x > y, x, y), lambda a, b: np.where(a > b, a, b)),
    "matmul": (lambda x, y: x @ ad.permute_dims(y, (1, 0)), lambda a, b: a @ b.T),
    "astype": (lambda x, y: ad.astype(x, ad.int32), lambda a, b: a.astype(np.int32)),
    "softmax": (lambda x, y: ad.softmax(x, axis=-1),
                lambda a, b: np.exp(a - a.max(-1, keepdims=True)) / np.exp(a - a.max(-1, keepdims=True)).sum(-1, keepdims=True)),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_repeated_calls_give_what_the_first_gave(device, case):
    fn, ref = CASES[case]
    a, x = _x(device)
    b, y = _x(device, seed=1)
    first = fn(x, y).numpy()
    again = [fn(x, y).numpy() for _ in range(3)]
    np.testing.assert_allclose(first, ref(a, b), rtol=1e-5, atol=1e-6)
    for r in again:
        assert r.dtype == first.dtype and r.shape == first.shape
        np.testing.assert_array_equal(r, first)


def test_a_repeated_call_is_served_by_the_cache():
    _, x = _x("cpu", (2, 5))
    ad.sum(x, axis=1)
    n = len(_calls("sum"))
    ad.sum(x, axis=1)
    ad.sum(x, axis=1)
    assert len(_calls("sum")) == n  # no new kind of call, so no new entry
    ad.sum(x, axis=0)
    assert len(_calls("sum")) == n + 1


def test_errors_are_raised_on_every_call_and_never_cached():
    _, x = _x("cpu")
    ad.sum(x, axis=1)
    for _ in range(3):
        with pytest.raises(ad.AxisError, match=r"sum\(\): axis 5 is out of range"):
            ad.sum(x, axis=5)
        with pytest.raises(TypeError, match="not bool True"):  # True == 1, but not an axis
            ad.sum(x, axis=True)
        with pytest.raises(TypeError, match="not float 1.0"):
            ad.sum(x, axis=1.0)
    assert ad.sum(x, axis=1).shape == (3,)


def test_list_and_tuple_attributes_with_bools_inside_are_told_apart():
    _, x = _x("cpu")
    assert ad.permute_dims(x, (1, 0)).shape == (4, 3)
    with pytest.raises(TypeError):
        ad.permute_dims(x, (True, 0))
    assert ad.reshape(x, [2, 6]).shape == ad.reshape(x, (2, 6)).shape == (2, 6)


def test_the_sign_of_a_zero_fill_value_is_kept():
    dev = ad.asarray(0.0).device
    for _ in range(2):
        assert not np.signbit(ad.full((2,), 0.0, device=dev).numpy()).any()
        assert np.signbit(ad.full((2,), -0.0, device=dev).numpy()).all()
        assert not np.signbit(ad.full((2,), 0.0).numpy()).any()


def test_cache_keys_hold_descriptors_only():
    _, x = _x("npu")
    _, y = _x("npu", seed=1)
    for _ in range(2):
        ad.concat([x, y])
        ad.where(x > y, x, y)
        (x @ ad.permute_dims(y, (1, 0))).numpy()

    def flat(v):
        if isinstance(v, (tuple, list)):
            for e in v:
                yield from flat(e)
        else:
            yield v

    for name in ("concat", "where", "matmul", "permute_dims", "greater"):
        keys = list(_calls(name))
        assert keys, name
        for k in keys:
            assert not any(isinstance(v, (ad.Tensor, np.ndarray)) or hasattr(v, "block") for v in flat(k)), (name, k)


def test_replanning_an_op_forgets_its_calls():
    _, x = _x("cpu")
    ad.sum(x)
    assert _calls("sum")
    get_op("sum").plans.clear()
    assert not _calls("sum")
    np.testing.assert_allclose(ad.sum(x).numpy(), x.numpy().sum(), rtol=1e-6)


def test_the_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(dispatch, "_CALLS_MAX", 8)
    x = ad.arange(24, dtype=ad.float32)
    shapes = [(a, 24 // a) for a in (1, 2, 3, 4, 6, 8, 12, 24)] * 3
    for s in shapes:
        assert ad.reshape(x, s).shape == s
    assert 0 < len(_calls("reshape")) <= 8


def test_observers_see_every_call_after_the_cache_is_warm():
    _, x = _x("cpu")
    for _ in range(2):
        ad.sum(x)
        _ = x.T
    seen = []

    def observe(op, device, path, seconds, inputs, out):
        seen.append(op.name)

    dispatch.add_observer(observe)
    try:
        for _ in range(3):
            ad.sum(x)
            _ = x.T
    finally:
        dispatch.remove_observer(observe)
    assert seen == ["sum", "permute_dims"] * 3


def test_autocast_casts_after_the_cache_is_warm():
    _, x = _x("cpu", (4, 4))
    for _ in range(2):
        assert ad.matmul(x, x).dtype is ad.float32
    with amp.autocast("cpu", dtype=ad.bfloat16):
        assert ad.matmul(x, x).dtype is ad.bfloat16
    assert ad.matmul(x, x).dtype is ad.float32


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_are_recorded_after_the_cache_is_warm(device):
    a, x = _x(device)
    b, y = _x(device, seed=1)
    for _ in range(2):
        ad.sum(ad.exp(x) * y)  # no graph: warms the cache
    x.requires_grad = True
    for _ in range(2):
        x.grad = None
        ad.sum(ad.exp(x) * y).backward()
        np.testing.assert_allclose(x.grad.numpy(), np.exp(a) * b, rtol=1e-5)
    with ad.no_grad():
        assert ad.exp(x)._node is None


def test_casts_and_value_checks_run_on_every_call():
    x = ad.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    i = ad.asarray(np.array([0, 1], dtype=np.int32))
    bad = ad.asarray(np.array([0, 7], dtype=np.int32))
    for _ in range(3):
        np.testing.assert_array_equal(ad.take(x, i, axis=1).numpy(), [[0, 1], [3, 4]])
        with pytest.raises(IndexError, match="out of"):
            ad.take(x, bad, axis=1)
        r = ad.asarray([1, 2], dtype=ad.int8) + ad.asarray([300, 400], dtype=ad.int64)  # int8 cast to int64
        assert r.dtype is ad.int64 and r.tolist() == [301, 402]


def test_threads_share_the_cache():
    _, x = _x("cpu", (8, 8))
    ref = ad.sum(x, axis=0).numpy()
    errors = []

    def work():
        try:
            for _ in range(200):
                np.testing.assert_array_equal(ad.sum(x, axis=0).numpy(), ref)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors


def test_python_scalar_inputs_are_checked_and_converted_on_every_call():
    i = ad.asarray([1, 2], dtype=ad.int8)
    x = ad.asarray(np.arange(4, dtype=np.float32))
    x.requires_grad = True
    for _ in range(3):
        assert (i + 3).tolist() == [4, 5] and (i + 3).dtype is ad.int8
        with pytest.raises(OverflowError, match="does not fit in int8"):
            i + 200  # noqa: B018 - the operator raises
        with pytest.raises(TypeError, match="Python bool cannot be combined"):
            ad.add(i, True)
        x.grad = None
        y = ad.sum(x * 2.0 + 1)
        y.backward()
        assert y.item() == 16.0 and x.grad.tolist() == [2.0] * 4
        assert np.signbit(ad.multiply(ad.asarray([1.0]), -0.0).numpy()).all()


def test_a_kernel_out_of_memory_on_a_cached_call_is_anydevices_error(monkeypatch):
    x = ad.ones((3, 5))
    ad.sum(x)
    ad.sum(x)
    entry = _calls("sum")[dispatch._call_key((x,), {})]

    def no_memory(ctx, *a, **k):
        raise MemoryError("no room")

    monkeypatch.setattr(entry, "fn", no_memory)
    monkeypatch.setattr(entry, "run", dispatch._runner(ad.api.op("sum"), entry))  # the hit, built on the kernel
    with pytest.raises(ad.OutOfMemoryError, match=r"sum\(\): cpu:0 ran out of memory for a result of shape \(\) \(float32\)"):
        ad.sum(x)


@pytest.mark.parametrize("order", [1, -1])
def test_equal_fill_values_of_other_types_keep_their_dtypes(order):
    # False == 0 == 0.0 == -0.0 == 0j: the cached dtype rule must tell them apart, in any order
    values = [False, 0, 0.0, -0.0, 0j, True, 1, 1.0][::order]
    want = {bool: ad.bool, int: ad.int64, float: ad.float32, complex: ad.complex64}
    for _ in range(2):
        for v in values:
            t = ad.full((2,), v)
            assert t.dtype == want[type(v)], (v, t.dtype)
            assert t.tolist() == [v, v]
    assert np.signbit(ad.full((2,), -0.0).numpy()).all() and not np.signbit(ad.full((2,), 0.0).numpy()).any()
