"""The OpenCL linear kernel (``x @ w.T + b``): the weight packed from its transpose and the bias
added by the matmul as it stores, checked against numpy and bit for bit against the
decomposition's kernels on the device (transposing copy, matmul, add) on both tiers; 1-D and
batched inputs, a 0-d bias, empty shapes; the cpu's errors; gradients."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("anydevice_opencl")

from opencl_support import has_dtype, needs_opencl, no_fallback, spy_launches  # noqa: E402, F401

import anydevice as ad  # noqa: E402

pytestmark = [needs_opencl, pytest.mark.usefixtures("no_fallback")]
RNG = np.random.default_rng(5)


def on(a):
    return ad.asarray(np.asarray(a), device="opencl")


CASES = [((256, 64), 256, True), ((256, 256), 10, True), ((3, 7, 50), 33, True), ((64,), 100, True),
         ((300, 40), 70, False), ((200, 100), 1, True), ((2, 3), 4, True), ((9, 31), 65, True)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("xs,n,vector_bias", CASES)
def test_matches_numpy_and_the_decomposition_bit_for_bit(xs, n, vector_bias, dtype):
    if not has_dtype(dtype):
        pytest.skip(f"the OpenCL device has no {dtype}")
    x = RNG.standard_normal(xs).astype(dtype)
    w = RNG.standard_normal((n, xs[-1])).astype(dtype)
    b = RNG.standard_normal((n,) if vector_bias else ()).astype(dtype)
    want = x.astype(np.float64) @ w.T.astype(np.float64) + b
    for _ in range(3):  # small work: the generic tier first, specialized from the 32nd launch
        got = ad.linear(on(x), on(w), on(b))
        parts = ad.matmul(on(x), ad.matrix_transpose(on(w))) + on(b)
        assert got.shape == want.shape and got.dtype == parts.dtype
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4 * np.sqrt(xs[-1]))
        np.testing.assert_array_equal(got.numpy(), parts.numpy())


def test_large_float32_takes_the_packed_path(monkeypatch):
    seen = spy_launches(monkeypatch)
    x, w, b = (RNG.standard_normal(s).astype(np.float32) for s in ((128, 64), (96, 64), (96,)))
    got = ad.linear(on(x), on(w), on(b)).numpy()
    assert [s[2] for s in seen] == ["packt", "packedb"], seen
    np.testing.assert_allclose(got, x @ w.T + b, rtol=1e-4, atol=1e-4)


def test_empty_shapes():
    for xs, n in (((0, 5), 4), ((5, 0), 4), ((3, 5), 0)):
        x, w, b = np.ones(xs, np.float32), np.ones((n, xs[-1]), np.float32), np.full((n,), 2.0, np.float32)
        got = ad.linear(on(x), on(w), on(b)).numpy()
        np.testing.assert_array_equal(got, x @ w.T + b)


def test_float16_still_decomposes_in_float32():
    x, w, b = (RNG.standard_normal(s).astype(np.float16) for s in ((40, 30), (20, 30), (20,)))
    got = ad.linear(on(x), on(w), on(b))
    cpu = ad.linear(ad.asarray(x), ad.asarray(w), ad.asarray(b))
    assert got.dtype == cpu.dtype
    np.testing.assert_allclose(got.numpy().astype(np.float32), cpu.numpy().astype(np.float32), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("shapes", [((4, 3), (5, 4), (5,)), ((4, 3), (5, 3), (4,)), ((4, 3), (5,), (5,))])
def test_errors_as_on_the_cpu(shapes):
    arrays = [np.zeros(s, np.float32) for s in shapes]
    with pytest.raises(ValueError) as on_cpu:
        ad.linear(*[ad.asarray(a) for a in arrays])
    with pytest.raises(ValueError) as on_cl:
        ad.linear(*[on(a) for a in arrays])
    assert str(on_cl.value) == str(on_cpu.value)


def test_gradients_match_cpu():
    x, w, b = (RNG.standard_normal(s).astype(np.float32) for s in ((64, 48), (40, 48), (40,)))
    g = RNG.standard_normal((64, 40)).astype(np.float32)
    grads = []
    for dev in ("cpu", "opencl"):
        ts = [ad.asarray(a, device=dev) for a in (x, w, b)]
        for t in ts:
            t.requires_grad_(True)
        ad.sum(ad.linear(*ts) * ad.asarray(g, device=dev)).backward()
        grads.append([t.grad.numpy() for t in ts])
    for got, want in zip(grads[1], grads[0]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
