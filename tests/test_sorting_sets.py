"""Sorting, searching, scans, set functions and data-dependent shapes on every device, against numpy."""
from __future__ import annotations

import numpy as np
import pytest

import anydevice as ad

DEVICES = ["cpu", "npu", "xpu", "dcu"] + (["opencl"] if ad.device.unavailable_reason("opencl") is None else [])
rng = np.random.default_rng(7)


def _on(a, dev, dtype=None):
    return ad.asarray(np.asarray(a), dtype=dtype, device=dev)


def _ties(*shape):
    x = rng.integers(0, 5, size=shape).astype(np.float32)
    x.flat[:: 7] = np.nan
    return x


# --- sorting and searching -------------------------------------------------------------------------
@pytest.mark.parametrize("dev", DEVICES)
def test_argsort_and_sort_match_numpy_stable_with_nans(dev):
    x = _ties(4, 9)
    for axis in (-1, 0):
        want = np.argsort(x, axis=axis, kind="stable")
        assert np.array_equal(ad.argsort(_on(x, dev), axis=axis).numpy(), want)
        np.testing.assert_array_equal(ad.sort(_on(x, dev), axis=axis).numpy(), np.sort(x, axis=axis))
    # descending keeps equal elements in their original order; NaNs come first
    got = ad.argsort(_on(x, dev), descending=True).numpy()
    flip = x.shape[1] - 1 - np.flip(np.argsort(np.flip(x, 1), axis=1, kind="stable"), 1)
    assert np.array_equal(got, flip)
    row = x[0]
    keys = [(0, 0) if np.isnan(v) else (1, -v) for v in row]
    assert got[0].tolist() == sorted(range(len(row)), key=lambda i: keys[i])


@pytest.mark.parametrize("dev", DEVICES)
def test_sort_integers_and_bools(dev):
    i = rng.integers(-50, 50, size=(3, 40)).astype(np.int32)
    assert np.array_equal(ad.sort(_on(i, dev)).numpy(), np.sort(i))
    b = rng.random(17) < 0.5
    assert np.array_equal(ad.argsort(_on(b, dev)).numpy(), np.argsort(b, kind="stable"))


@pytest.mark.parametrize("dev", DEVICES)
def test_sort_keeps_the_order_of_signed_zeros(dev):
    x = np.array([0.0, -0.0, 1.0, -0.0, 0.0, -1.0], np.float32)
    got = ad.sort(_on(x, dev)).numpy()
    assert np.signbit(got).tolist() == np.signbit(np.sort(x, kind="stable")).tolist() == [True, False, True, True, False, False]
    assert np.signbit(ad.unique_values(_on(x, dev)).numpy()).tolist() == [True, False, False]  # the first of each run


@pytest.mark.parametrize("dev", DEVICES)
def test_take_along_axis_broadcasts_and_counts_negative_indices(dev):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    idx = rng.integers(-3, 3, size=(1, 5, 4))
    got = ad.take_along_axis(_on(x, dev), _on(idx, dev), axis=1).numpy()
    want = np.take_along_axis(np.broadcast_to(x, (2, 3, 4)), np.broadcast_to(idx, (2, 5, 4)), axis=1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dev", DEVICES)
def test_cumulative_sum_and_prod(dev):
    x = rng.uniform(0.5, 1.5, size=(3, 21)).astype(np.float32)
    np.testing.assert_allclose(ad.cumulative_sum(_on(x, dev), axis=1).numpy(), np.cumsum(x, axis=1), rtol=1e-5)
    got = ad.cumulative_prod(_on(x, dev), axis=0, include_initial=True).numpy()
    np.testing.assert_allclose(got, np.concatenate([np.ones((1, 21)), np.cumprod(x, axis=0)]), rtol=1e-5)
    i = rng.integers(-9, 9, size=30).astype(np.int8)
    got = ad.cumulative_sum(_on(i, dev))
    assert got.dtype == ad.int64 and np.array_equal(got.numpy(), np.cumsum(i, dtype=np.int64))
    assert ad.cumulative_sum(_on(i, dev), dtype=ad.int32).dtype == ad.int32


@pytest.mark.parametrize("dev", DEVICES)
def test_searchsorted_both_sides_nan_and_sorter(dev):
    a = np.array([-np.inf, -1.0, 0.0, 0.0, 2.0, np.inf, np.nan], np.float32)
    v = np.array([[np.nan, 0.0, 3.0], [-np.inf, 2.0, -5.0]], np.float32)
    for side in ("left", "right"):
        assert np.array_equal(ad.searchsorted(_on(a, dev), _on(v, dev), side=side).numpy(), np.searchsorted(a, v, side))
    u = rng.permutation(a)
    sorter = np.argsort(u, kind="stable")
    got = ad.searchsorted(_on(u, dev), _on(v, dev), sorter=_on(sorter, dev)).numpy()
    assert np.array_equal(got, np.searchsorted(u, v, sorter=sorter))


@pytest.mark.parametrize("dev", DEVICES)
def test_count_nonzero(dev):
    x = np.array([[0.0, np.nan, -0.0], [1.0, 0.0, 2.0]], np.float32)
    assert ad.count_nonzero(_on(x, dev)).item() == 3
    assert np.array_equal(ad.count_nonzero(_on(x, dev), axis=1, keepdims=True).numpy(), [[1], [2]])


def _numeric_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


@pytest.mark.parametrize("dev", DEVICES)
def test_gradients_of_sort_scans_and_take_along_axis(dev):
    x = rng.uniform(0.5, 2.0, size=(3, 5))
    idx = rng.integers(-5, 5, size=(3, 7))
    cases = [
        (lambda t: ad.sort(t, axis=1, descending=True), lambda a: -np.sort(-a, axis=1)),
        (lambda t: ad.cumulative_sum(t, axis=1, include_initial=True),
         lambda a: np.concatenate([np.zeros((3, 1)), np.cumsum(a, axis=1)], axis=1)),
        (lambda t: ad.cumulative_prod(t, axis=0), lambda a: np.cumprod(a, axis=0)),
        (lambda t: ad.take_along_axis(t, _on(idx, dev), axis=1), lambda a: np.take_along_axis(a, idx, axis=1)),
    ]
    for fn, ref in cases:
        w = rng.standard_normal(ref(x).shape)
        t = _on(x, dev, ad.float32)
        t.requires_grad_(True)
        ad.sum(ad.multiply(fn(t), _on(w, dev, ad.float32))).backward()
        want = _numeric_grad(lambda a, ref=ref, w=w: float(np.sum(ref(a) * w)), x.astype(np.float32).astype(np.float64))
        np.testing.assert_allclose(t.grad.numpy(), want, rtol=1e-4, atol=1e-5)


# --- errors ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dev", DEVICES)
def test_errors_name_the_op_the_argument_and_what_is_allowed(dev):
    x = _on(np.zeros((2, 3), np.float32), dev)
    with pytest.raises(ad.AxisError, match=r"argsort\(\): axis 2 is out of range .*allowed: -2\.\.1"):
        ad.argsort(x, axis=2)
    with pytest.raises(ValueError, match=r"cumulative_sum\(\): axis is required for a 2-D array"):
        ad.cumulative_sum(x)
    with pytest.raises(IndexError, match=r"take_along_axis\(\): index 3 is out of range for axis 1 with size 3"):
        ad.take_along_axis(x, _on(np.full((2, 1), 3), dev), axis=1)
    with pytest.raises(TypeError, match=r"take_along_axis\(\): indices must be an integer tensor, not float32"):
        ad.take_along_axis(x, x)
    with pytest.raises(ValueError, match=r"searchsorted\(\): x1 must be 1-D"):
        ad.searchsorted(x, x)
    a = _on(np.arange(4.0, dtype=np.float32), dev)
    with pytest.raises(ValueError, match=r"searchsorted\(\): sorter must have the shape of x1 \(4,\), not \(3,\)"):
        ad.searchsorted(a, a, sorter=_on(np.arange(3), dev))
    with pytest.raises(TypeError, match=r"searchsorted\(\): sorter must be an integer tensor"):
        ad.searchsorted(a, a, sorter=a)


# --- data-dependent shapes ---------------------------------------------------------------------------
def _sparse(*shape):
    x = rng.integers(-2, 3, size=shape).astype(np.float32)
    x[x == 2] = np.nan
    return x


def _synced(fn):
    """fn's result and the read-backs of data-dependent sizes it caused, per op."""
    from anydevice.engine import dispatch

    dispatch.reset_sync_counts()
    out = fn()
    return out, {op: n for (op, _), n in dispatch.sync_counts().items()}


@pytest.mark.parametrize("dev", DEVICES)
def test_nonzero_and_mask_indexing_match_numpy_with_one_read_back(dev):
    x = _sparse(3, 5)
    got, syncs = _synced(lambda: ad.nonzero(_on(x, dev)))
    assert syncs == {"argwhere": 1}
    assert len(got) == 2 and all(np.array_equal(g.numpy(), w) for g, w in zip(got, np.nonzero(x)))
    t = _on(x, dev)
    got, syncs = _synced(lambda: t[t > 0])
    assert syncs == {"getitem_mask": 1} and np.array_equal(got.numpy(), x[x > 0])
    got, syncs = _synced(lambda: t[_on(x[:, 0] != 0, dev)])  # a mask over the first axis selects rows
    assert syncs == {"getitem_mask": 1}
    np.testing.assert_array_equal(got.numpy(), x[x[:, 0] != 0])
    t2 = _on(x, dev)
    _, syncs = _synced(lambda: t2.__setitem__(ad.isnan(t2), -7.0))  # a broadcast value needs no count
    want = x.copy()
    want[np.isnan(want)] = -7.0
    assert syncs == {} and np.array_equal(t2.numpy(), want)
    k = int(np.sum(want < 0))
    _, syncs = _synced(lambda: t2.__setitem__(t2 < 0, _on(np.arange(k, dtype=np.float32), dev)))
    want[want < 0] = np.arange(k)
    assert syncs == {"setitem_mask": 1} and np.array_equal(t2.numpy(), want)


@pytest.mark.parametrize("dev", DEVICES)
def test_unique_functions_nans_distinct_sorted_named_fields(dev):
    x = np.array([[2.0, np.nan, -0.0, 2.0], [np.nan, 5.0, 0.0, 2.0]], np.float32)
    r, syncs = _synced(lambda: ad.unique_all(_on(x, dev)))
    assert syncs == {"unique_all": 1}
    assert r._fields == ("values", "indices", "inverse_indices", "counts")
    np.testing.assert_array_equal(r.values.numpy(), [0.0, 2.0, 5.0, np.nan, np.nan])
    assert r.indices.numpy().tolist() == [2, 0, 5, 1, 4]
    assert r.counts.numpy().tolist() == [2, 3, 1, 1, 1]
    assert np.array_equal(r.inverse_indices.numpy(), [[1, 3, 0, 1], [4, 2, 0, 1]])
    assert np.array_equal(r.values.numpy()[r.inverse_indices.numpy()], x, equal_nan=True)
    c = ad.unique_counts(_on(x, dev))
    assert c._fields == ("values", "counts") and c.counts.numpy().tolist() == [2, 3, 1, 1, 1]
    i = ad.unique_inverse(_on(x, dev))
    assert i._fields == ("values", "inverse_indices") and np.array_equal(i.inverse_indices.numpy(), r.inverse_indices.numpy())
    v = rng.integers(-4, 4, size=50).astype(np.int16)
    assert np.array_equal(ad.unique_values(_on(v, dev)).numpy(), np.unique(v))


@pytest.mark.parametrize("dev", DEVICES)
def test_repeat_with_a_tensor_of_repeats(dev):
    x = rng.standard_normal((2, 3)).astype(np.float32)
    r = np.array([2, 0, 3])
    got, syncs = _synced(lambda: ad.repeat_tensor(_on(x, dev), _on(r, dev), axis=1))
    assert syncs == {"repeat_tensor": 1} and np.array_equal(got.numpy(), np.repeat(x, r, axis=1))
    assert np.array_equal(ad.repeat_tensor(_on(x, dev), _on(np.array([2]), dev)).numpy(), np.repeat(x, 2))
    with pytest.raises(ValueError, match=r"repeat_tensor\(\): repeats must be non-negative"):
        ad.repeat_tensor(_on(x, dev), _on(np.array([1, -1, 2]), dev), axis=1)


def test_a_given_size_needs_no_read_back():
    x = _sparse(20)
    got, syncs = _synced(lambda: ad.argwhere(_on(x, "npu"), size=3))
    assert syncs == {} and np.array_equal(got.numpy(), np.argwhere(x)[:3])
    got, syncs = _synced(lambda: ad.unique_values(_on(x, "npu"), size=2))
    assert syncs == {} and np.array_equal(got.numpy(), np.unique(x)[:2])


@pytest.mark.parametrize("dev", DEVICES)
def test_gradient_of_mask_indexing(dev):
    x = rng.uniform(0.5, 2.0, size=(3, 4)).astype(np.float32)
    m = x > 1.0
    t = _on(x, dev)
    t.requires_grad_(True)
    w = rng.standard_normal(int(m.sum())).astype(np.float32)
    ad.sum(ad.multiply(t[_on(m, dev)], _on(w, dev))).backward()
    want = np.zeros_like(x)
    want[m] = w
    np.testing.assert_array_equal(t.grad.numpy(), want)
    v = _on(np.float32([3.0]), dev)
    v.requires_grad_(True)
    u = ad.multiply(_on(x, dev), 1.0)
    u[_on(m, dev)] = v
    ad.sum(ad.multiply(u, _on(np.arange(12, dtype=np.float32).reshape(3, 4), dev))).backward()
    assert v.grad.numpy().tolist() == [float(np.arange(12).reshape(3, 4)[m].sum())]


@pytest.mark.parametrize("dev", DEVICES)
def test_mask_errors(dev):
    x = _on(np.zeros((2, 3), np.float32), dev)
    with pytest.raises(IndexError, match=r"getitem_mask\(\): a boolean mask of shape \(3,\) does not match .*\(2, 3\)"):
        x[_on(np.ones(3, bool), dev)]
    with pytest.raises(TypeError, match=r"getitem_mask\(\): mask must be a bool tensor, not int8"):
        ad.getitem_mask(x, _on(np.ones((2, 3), np.int8), dev))
    with pytest.raises(ValueError, match=r"setitem_mask\(\): value of shape \(4,\) for 6 selected element\(s\)"):
        x[_on(np.ones((2, 3), bool), dev)] = _on(np.ones(4, np.float32), dev)
    with pytest.raises(IndexError, match=r"unsupported index a bool tensor of shape \(2, 3\).*or a boolean mask"):
        x[x > 0, 0]  # a mask only as the whole index
    with pytest.raises(ValueError, match=r"nonzero\(\): x must have at least one dimension"):
        ad.nonzero(_on(np.float32(1.0), dev))
    with pytest.raises(ValueError, match=r"unique_values\(\): size 4 is more than the 3 element"):
        ad.unique_values(_on(np.ones(3, np.float32), dev), size=4)


def test_capabilities_say_so():
    caps = ad.__array_namespace_info__().capabilities()
    assert caps["boolean indexing"] is True and caps["data-dependent shapes"] is True


# --- a backend with only the primitives runs all of it on its device ----------------------------------
@pytest.fixture
def primitives_only():
    from fakes import primitives_only as installed_primitives_only

    with installed_primitives_only("prim") as dev:
        yield dev


def test_primitives_only_backend_runs_everything_on_device(primitives_only):
    from anydevice.engine import dispatch

    dev = primitives_only
    x = _sparse(4, 6)
    t = _on(x, dev)
    assert all(np.array_equal(g.numpy(), w) for g, w in zip(ad.nonzero(t), np.nonzero(x)))
    r = ad.unique_all(t)
    u = np.unique(x[~np.isnan(x)])
    assert np.array_equal(r.values.numpy(), np.concatenate([u, np.full(int(np.isnan(x).sum()), np.nan)]), equal_nan=True)
    assert np.array_equal(r.values.numpy()[r.inverse_indices.numpy()], x, equal_nan=True)
    assert np.array_equal(t[t > 0].numpy(), x[x > 0])
    t[ad.isnan(t)] = 0.0
    assert np.array_equal(t.numpy(), np.nan_to_num(x, nan=0.0))
    assert np.array_equal(ad.sort(t, axis=0).numpy(), np.sort(np.nan_to_num(x), axis=0))
    np.testing.assert_allclose(ad.cumulative_sum(t, axis=1).numpy(), np.cumsum(np.nan_to_num(x), axis=1))
    s = np.sort(x[0])
    assert np.array_equal(ad.searchsorted(_on(s, dev), t[1]).numpy(), np.searchsorted(s, np.nan_to_num(x)[1]))
    assert np.array_equal(ad.repeat_tensor(t[0], _on(np.arange(6), dev)).numpy(), np.repeat(np.nan_to_num(x)[0], np.arange(6)))
    assert not [k for k in dispatch.fallback_counts() if k[1].startswith("prim")]


@pytest.mark.skipif("opencl" not in DEVICES, reason="no OpenCL device")
def test_opencl_runs_everything_on_device_with_a_native_argsort():
    from anydevice.engine import dispatch

    x = _ties(5, 33)
    paths = []
    obs = lambda op, dev, path, dt, i, o: paths.append((op.name, path))  # noqa: E731
    old = dispatch.set_fallback_mode("error")
    dispatch.add_observer(obs)
    try:
        t = _on(x, "opencl")
        for axis in (0, 1):
            for desc in (False, True):
                got = ad.argsort(t, axis=axis, descending=desc).numpy()
                want = np.argsort(x, axis=axis, kind="stable") if not desc else \
                    x.shape[axis] - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
                assert np.array_equal(got, want)
        for x2, axis in ((_ties(2, 2500), 1), (rng.integers(-9, 9, size=(3000, 2)).astype(np.int16), 0)):  # bitonic
            for desc in (False, True):
                got = ad.argsort(_on(x2, "opencl"), axis=axis, descending=desc).numpy()
                want = np.argsort(x2, axis=axis, kind="stable") if not desc else \
                    x2.shape[axis] - 1 - np.flip(np.argsort(np.flip(x2, axis), axis=axis, kind="stable"), axis)
                assert np.array_equal(got, want)
        assert np.array_equal(ad.unique_values(t).numpy(), np.unique(x[~np.isnan(x)]).tolist() + [np.nan] * int(np.isnan(x).sum()),
                              equal_nan=True)
        assert np.array_equal(t[t > 2].numpy(), x[x > 2])
    finally:
        dispatch.remove_observer(obs)
        dispatch.set_fallback_mode(old)
    assert ("argsort", "native") in paths and not [p for p in paths if p[1] == "fallback"]
