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
