"""anydevice.linalg: the Array API linear-algebra extension on every device, against numpy."""
from __future__ import annotations

import inspect

import array_api_strict
import numpy as np
import pytest

import anydevice as ad
from anydevice.engine import dispatch

la = ad.linalg
DEVICES = [d for d in ("cpu", "npu:0", "xpu:0", "dcu:0", "opencl:0") if ad.device.is_available(d.split(":")[0])]
NAMES = ["cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matmul", "matrix_norm", "matrix_power",
         "matrix_rank", "matrix_transpose", "outer", "pinv", "qr", "slogdet", "solve", "svd", "svdvals", "tensordot",
         "trace", "vecdot", "vector_norm"]
rng = np.random.default_rng(7)
A = rng.uniform(-1, 1, (3, 3)) + 3 * np.eye(3)  # well conditioned
SPD = A @ A.T
B = rng.uniform(-1, 1, (3, 2))
V = rng.uniform(-1, 1, (2, 3))


@pytest.fixture(autouse=True)
def _quiet():
    old = dispatch.set_fallback_mode("silent")  # factorizations fall back on OpenCL (documented)
    yield
    dispatch.set_fallback_mode(old)


def on(x, dev, dtype=ad.float32):
    return ad.asarray(np.asarray(x), dtype=dtype, device=dev)


def close(got, want, tol=2e-4):
    np.testing.assert_allclose(np.asarray(got.numpy(), np.float64), want, rtol=tol, atol=tol)


# --- the namespace --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [n for n in NAMES if hasattr(ad.linalg, n)])
def test_signature_matches_the_standard(name):
    want = inspect.signature(getattr(array_api_strict.linalg, name)).parameters
    got = inspect.signature(getattr(la, name)).parameters
    assert [(p.name, p.kind) for p in got.values()] == [(p.name, p.kind) for p in want.values()]


def test_every_function_of_the_extension_is_there_and_not_in_the_main_namespace():
    missing = [n for n in NAMES if not hasattr(la, n) and n != "tensordot"]
    assert not missing
    for name in ("cholesky", "det", "inv", "svd", "eigh", "qr", "slogdet", "trace", "vector_norm", "outer", "cross"):
        assert not hasattr(ad, name) or name in ("matmul",), name
    import anydevice.linalg

    assert anydevice.linalg is la and la.matmul is ad.matmul


def test_results_are_named_tuples_with_the_standards_fields():
    x = on(SPD, "cpu")
    assert la.eigh(x)._fields == ("eigenvalues", "eigenvectors")
    assert la.qr(x)._fields == ("Q", "R")
    assert la.slogdet(x)._fields == ("sign", "logabsdet")
    assert la.svd(x)._fields == ("U", "S", "Vh")


# --- values on every device ------------------------------------------------------------------------
CASES = [
    ("cholesky", [SPD], {}, lambda x: np.linalg.cholesky(x)),
    ("cholesky", [SPD], {"upper": True}, lambda x: np.linalg.cholesky(x).T),
    ("inv", [A], {}, np.linalg.inv),
    ("solve", [A, B], {}, np.linalg.solve),
    ("solve", [A, B[:, 0]], {}, np.linalg.solve),
    ("det", [A], {}, np.linalg.det),
    ("eigvalsh", [SPD], {}, np.linalg.eigvalsh),
    ("svdvals", [B], {}, lambda x: np.linalg.svd(x, compute_uv=False)),
    ("matrix_norm", [B], {}, np.linalg.norm),
    ("matrix_norm", [B], {"ord": "nuc"}, lambda x: np.linalg.norm(x, "nuc")),
    ("matrix_norm", [A], {"ord": -np.inf}, lambda x: np.linalg.norm(x, -np.inf)),
    ("vector_norm", [V], {"axis": 1, "ord": 3}, lambda x: np.linalg.norm(x, 3, axis=1)),
    ("vector_norm", [V * 1e30], {}, lambda x: np.linalg.norm(x.astype(np.float64))),
    ("matrix_power", [A, 3], {}, lambda x, n: np.linalg.matrix_power(x, n)),
    ("matrix_power", [A, -2], {}, lambda x, n: np.linalg.matrix_power(x, n)),
    ("matrix_rank", [np.outer(V[0], V[1])], {"rtol": 1e-4}, lambda x: np.linalg.matrix_rank(x, rtol=1e-4)),
    ("pinv", [B], {}, np.linalg.pinv),
    ("trace", [A], {"offset": 1}, lambda x: np.trace(x, 1)),
    ("diagonal", [B], {"offset": -1}, lambda x: np.diagonal(x, -1)),
    ("outer", [V[0], V[1]], {}, np.outer),
    ("cross", [V, V[::-1]], {}, np.cross),
]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_values_match_numpy(dev, case):
    name, args, kw, ref = case
    ins = [on(a, dev) if isinstance(a, np.ndarray) else a for a in args]
    want = ref(*[a.astype(np.float32).astype(np.float64) if isinstance(a, np.ndarray) else a for a in args])
    close(getattr(la, name)(*ins, **kw), np.asarray(want, np.float64), 1e-4 * max(1.0, float(np.abs(want).max())))


@pytest.mark.parametrize("dev", DEVICES)
def test_factorizations_rebuild_the_matrix_and_are_the_same_everywhere(dev):
    x = on(SPD, dev)
    w, v = la.eigh(x)
    close(v @ (ad.expand_dims(w, axis=-1) * la.matrix_transpose(v)), SPD, 1e-3)
    u, s, vh = la.svd(on(B, dev), full_matrices=False)
    close((u * ad.expand_dims(s, axis=0)) @ vh, B)
    q, r = la.qr(on(B, dev))
    close(q @ r, B)
    assert (np.diagonal(r.numpy()) >= 0).all()
    sign, logabs = la.slogdet(on(A, dev))
    close(sign * ad.exp(logabs), np.linalg.det(A.astype(np.float32)), 1e-3)
    ref = la.eigh(on(SPD, "cpu")).eigenvectors.numpy()
    np.testing.assert_allclose(v.numpy(), ref, atol=1e-4)  # the same sign choice on every device


# --- gradients against finite differences (float64 on the cpu) -----------------------------------------------
def _fd(f, x, h=1e-6):
    g = np.zeros_like(x)
    for j in np.ndindex(x.shape):
        xp_, xm = x.copy(), x.copy()
        xp_[j] += h
        xm[j] -= h
        g[j] = (f(xp_) - f(xm)) / (2 * h)
    return g


def _lower(x):
    return np.tril(x) + np.tril(x, -1).T


GRADS = [
    ("inv", lambda t: la.inv(t), lambda x: np.linalg.inv(x), A),
    ("det", lambda t: la.det(t), np.linalg.det, A),
    ("slogdet", lambda t: la.slogdet(t).logabsdet, lambda x: np.linalg.slogdet(x)[1], A),
    ("solve", lambda t: la.solve(t, ad.asarray(B)), lambda x: np.linalg.solve(x, B), A),
    ("cholesky", lambda t: la.cholesky(t), lambda x: np.linalg.cholesky(_lower(x)), SPD),
    ("eigh", lambda t: la.eigh(t).eigenvectors, lambda x: _eigvecs(_lower(x)), SPD),
    ("eigvalsh", lambda t: la.eigvalsh(t), lambda x: np.linalg.eigvalsh(_lower(x)), SPD),
    ("svd", lambda t: la.svd(t, full_matrices=False).U, lambda x: _svd_u(x), B),
    ("svdvals", lambda t: la.svdvals(t), lambda x: np.linalg.svd(x, compute_uv=False), B),
    ("qr", lambda t: la.qr(t).Q, lambda x: _qr_q(x), B),
    ("matrix_norm", lambda t: la.matrix_norm(t, ord="nuc"), lambda x: np.linalg.norm(x, "nuc"), B),
    ("vector_norm", lambda t: la.vector_norm(t, ord=3), lambda x: np.linalg.norm(x.ravel(), 3), V),
    ("pinv", lambda t: la.pinv(t), np.linalg.pinv, B),
    ("matrix_power", lambda t: la.matrix_power(t, -2), lambda x: np.linalg.matrix_power(x, -2), A),
]


def _eigvecs(x):
    v = np.linalg.eigh(x)[1]
    return v * np.sign(v[np.argmax(np.abs(v), axis=0), range(v.shape[1])])


def _svd_u(x):
    u = np.linalg.svd(x, full_matrices=False)[0]
    return u * np.sign(u[np.argmax(np.abs(u), axis=0), range(u.shape[1])])


def _qr_q(x):
    q, r = np.linalg.qr(x)
    return q * np.sign(np.diagonal(r))


@pytest.mark.parametrize("name,fn,ref,x0", GRADS, ids=[g[0] for g in GRADS])
def test_gradients_match_finite_differences(name, fn, ref, x0):
    w = rng.uniform(-1, 1, np.shape(ref(x0)))
    t = ad.asarray(x0, dtype=ad.float64)
    t.requires_grad_(True)
    out = fn(t)
    out.backward(ad.asarray(w, dtype=ad.float64))
    want = _fd(lambda x: float(np.sum(w * ref(x))), x0.copy())
    np.testing.assert_allclose(t.grad.numpy(), want, rtol=1e-5, atol=1e-6)


# --- errors, the same on every device --------------------------------------------------------------------
ERRORS = [
    (lambda d: la.inv(on(B, d)), ValueError, r"inv\(\): x must be a stack of square matrices"),
    (lambda d: la.det(on(B, d)), ValueError, r"det\(\): x must be a stack of square matrices"),
    (lambda d: la.cholesky(on(B, d)), ValueError, r"cholesky\(\): x must be a stack of square matrices"),
    (lambda d: la.cholesky(on([[1.0, 2.0], [2.0, 1.0]], d)), ad.errors.LinAlgError, r"cholesky\(\): x is not positive-definite"),
    (lambda d: la.inv(on(np.ones((2, 2)), d)), ad.errors.LinAlgError, r"inv\(\): x is singular"),
    (lambda d: la.solve(on(np.zeros((2, 2)), d), on([1.0, 2.0], d)), ad.errors.LinAlgError, r"solve\(\): x1 is singular"),
    (lambda d: la.solve(on(A, d), on([1.0, 2.0], d)), ValueError, r"solve\(\): x2 of shape \(2,\) does not match"),
    (lambda d: la.matrix_norm(on(B, d), ord="max"), ValueError, r"matrix_norm\(\): ord must be 'fro', 'nuc'"),
    (lambda d: la.vector_norm(on(V, d), ord="fro"), TypeError, r"vector_norm\(\): ord must be an int or a float"),
    (lambda d: la.qr(on(B, d), mode="r"), ValueError, r"qr\(\): mode must be 'reduced' or 'complete'"),
    (lambda d: la.cross(on(B, d), on(B, d)), ValueError, r"cross\(\): axis -1 must have size 3"),
    (lambda d: la.inv(ad.asarray(np.eye(2, dtype=np.int32), device=d)), TypeError, r"inv\(\) does not accept dtype int32"),
]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("k", range(len(ERRORS)))
def test_errors_name_the_op_and_what_is_allowed(dev, k):
    call, exc, msg = ERRORS[k]
    with pytest.raises(exc, match=msg):
        call(dev)


def test_linalg_error_is_a_value_error_and_a_nan_input_is_not_an_error():
    assert issubclass(ad.errors.LinAlgError, ValueError)
    out = la.inv(ad.asarray(np.array([[np.nan, 0.0], [0.0, 1.0]])))
    assert np.isnan(out.numpy()).any()


def test_qr_gradient_of_a_wide_matrix_says_it_is_unsupported():
    t = ad.asarray(V, dtype=ad.float64)
    t.requires_grad_(True)
    with pytest.raises(ad.UnsupportedError, match=r"qr\(\): gradients are implemented for"):
        ad.sum(la.qr(t).R).backward()


@pytest.mark.parametrize("device", DEVICES)
def test_vector_norm_of_an_order_beyond_int64_is_its_float_order(device):
    """An int order past 2**53 is taken as its float (numpy takes no int beyond int64): the norm
    tends to the largest magnitude, computed without overflow."""
    x = np.array([0.5, -2.0, 1.5], np.float32)
    got = la.vector_norm(ad.asarray(x, device=device), ord=2 ** 64).numpy()
    np.testing.assert_allclose(got, 2.0, rtol=1e-6)
    np.testing.assert_array_equal(got, la.vector_norm(ad.asarray(x, device=device), ord=float(2 ** 64)).numpy())
