"""The OpenCL mean and var kernels: the decompositions' kernels called in their order without a
dispatch per step, so results are bit-equal to the decomposition on the device and close to
numpy's; axes, keepdims, corrections, 0-d and empty inputs; the cpu's errors."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("anydevice_opencl")

from opencl_support import count_launches, has_dtype, needs_opencl, no_fallback, spy_launches  # noqa: E402, F401

import anydevice as ad  # noqa: E402
from anydevice.engine.dispatch import xp  # noqa: E402
from anydevice.ops.registry import get_op  # noqa: E402

pytestmark = [needs_opencl, pytest.mark.usefixtures("no_fallback")]
RNG = np.random.default_rng(3)


def _axes(axis, nd):
    if axis is None:
        return tuple(range(nd))
    return tuple(sorted(a % nd for a in ((axis,) if isinstance(axis, int) else axis)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,axis", [((16, 16), None), ((64, 64), 0), ((3, 5, 7), -1), ((3, 5, 7), (0, 2)),
                                        ((1000,), None), ((300, 300), 1), ((), None), ((0, 4), 0), ((5, 0), 1)])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("tier", ["generic", "specialized"])
def test_bit_equal_to_the_decomposition_and_close_to_numpy(shape, axis, keepdims, dtype, tier, monkeypatch):
    from anydevice_opencl import kernels

    if not has_dtype(dtype):
        pytest.skip(f"the OpenCL device has no {dtype}")
    big = 1 << 62  # one tier for the whole test: a switch between the two calls would change the bits
    monkeypatch.setattr(kernels, "SPECIALIZE_LAUNCHES", big if tier == "generic" else 0)
    monkeypatch.setattr(kernels, "SPECIALIZE_ELEMENTS", big if tier == "generic" else 0)
    x = RNG.standard_normal(shape).astype(dtype)
    t = ad.asarray(x, device="opencl")
    ax = _axes(axis, len(shape))
    with warnings.catch_warnings():  # numpy's warnings for empty slices and no degrees of freedom
        warnings.simplefilter("ignore", RuntimeWarning)
        for corr in (0.0, 1.0, 0.5):
            m = ad.mean(t, axis=axis, keepdims=keepdims)
            v = ad.var(t, axis=axis, keepdims=keepdims, correction=corr)
            np.testing.assert_array_equal(m.numpy(), get_op("mean").decomposition(xp, t, ax, keepdims).numpy())
            np.testing.assert_array_equal(v.numpy(), get_op("var").decomposition(xp, t, ax, keepdims, corr).numpy())
            want_m = np.mean(x.astype(np.float64), axis=axis, keepdims=keepdims)
            want_v = np.var(x.astype(np.float64), axis=axis, keepdims=keepdims, ddof=corr)
            assert m.shape == want_m.shape and v.shape == want_v.shape and m.dtype == v.dtype == t.dtype
            np.testing.assert_allclose(m.numpy(), want_m, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(v.numpy(), want_v, rtol=1e-4, atol=1e-5)


def test_launches_of_var(monkeypatch):
    t = ad.asarray(RNG.standard_normal((50, 40)).astype(np.float32), device="opencl")
    launches = count_launches(monkeypatch)
    ad.var(t, axis=1).numpy()
    assert launches() == 6  # sum, divide (the mean), subtract, multiply, sum, divide


def test_float16_still_decomposes_in_float32():
    x = RNG.standard_normal((40, 30)).astype(np.float16)
    for f in (ad.mean, ad.var):
        got, cpu = f(ad.asarray(x, device="opencl"), axis=0), f(ad.asarray(x), axis=0)
        assert got.dtype == cpu.dtype
        np.testing.assert_allclose(got.numpy().astype(np.float32), cpu.numpy().astype(np.float32), rtol=1e-2, atol=1e-3)


@pytest.mark.parametrize("fn,kw", [(ad.mean, {"axis": 2}), (ad.var, {"axis": (0, 0)}), (ad.var, {"correction": "x"}),
                                   (ad.mean, {"axis": 1.5})])
def test_errors_as_on_the_cpu(fn, kw):
    x = np.zeros((3, 4), np.float32)
    with pytest.raises(Exception) as on_cpu:
        fn(ad.asarray(x), **kw)
    with pytest.raises(type(on_cpu.value)) as on_cl:
        fn(ad.asarray(x, device="opencl"), **kw)
    assert str(on_cl.value) == str(on_cpu.value)


def test_gradients_match_cpu():
    x = RNG.standard_normal((20, 7)).astype(np.float32)
    grads = []
    for dev in ("cpu", "opencl"):
        t = ad.asarray(x, device=dev)
        t.requires_grad_(True)
        (ad.sum(ad.var(t, axis=0, correction=1.0)) + ad.mean(t * t)).backward()
        grads.append(t.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-6)
