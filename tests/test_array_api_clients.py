"""Real Array API clients on every device: scikit-learn (``array_api_dispatch=True``) and SciPy
(``SCIPY_ARRAY_API=1``, set in conftest.py before either is imported) run on anydevice tensors and
agree with their own numpy results.

Optional extras: each test skips, with the reason, when its package is absent (CI installs them).
What was tried and what works is recorded in docs/ARRAY_API.md.
"""
from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

import anydevice as ad

sklearn = pytest.importorskip("sklearn", reason="scikit-learn is not installed (pip install scikit-learn)")
scipy = pytest.importorskip("scipy", reason="SciPy is not installed (pip install scipy)")

_ocl = ad.device.unavailable_reason("opencl")
DEVICES = ["cpu", "npu", "dcu", pytest.param("opencl", marks=pytest.mark.skipif(_ocl is not None, reason=str(_ocl)))]


def _data(n=60, f=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, f)) @ rng.normal(size=(f, f)) + rng.normal(size=f)
    y = (X[:, 0] + 0.5 * X[:, 1] > np.median(X[:, 0] + 0.5 * X[:, 1])).astype(np.int64)
    y[::7] = 2  # three classes
    return X.astype(np.float32), y


def _host(r):
    return r.numpy() if isinstance(r, ad.Tensor) else np.asarray(r)


def _on(device, a):
    return ad.asarray(a, device=device)


@pytest.fixture(autouse=True)
def _dispatch():
    assert os.environ.get("SCIPY_ARRAY_API") == "1", "conftest.py sets SCIPY_ARRAY_API=1 before SciPy is imported"
    with sklearn.config_context(array_api_dispatch=True), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # sklearn's notes on solver choice under array API dispatch
        yield


def _fit_both(make, fit, device, X, *rest):
    """(result on ``device``, result of the same estimator on numpy)."""
    got = fit(make(), _on(device, X), *[_on(device, r) for r in rest])
    with sklearn.config_context(array_api_dispatch=False):
        want = fit(make(), X, *rest)
    return got, want


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("solver", ["full", "randomized"])
def test_pca(device, solver):
    from sklearn.decomposition import PCA

    X, _ = _data()
    got, want = _fit_both(lambda: PCA(3, svd_solver=solver, random_state=0, power_iteration_normalizer="QR")
                          if solver == "randomized" else PCA(3, svd_solver=solver),
                          lambda m, Xa: (m.fit_transform(Xa), m.explained_variance_), device, X)
    assert isinstance(got[0], ad.Tensor) and str(got[0].device) == str(ad.asarray(1, device=device).device)
    # components are defined up to sign: compare absolute values
    np.testing.assert_allclose(np.abs(_host(got[0])), np.abs(want[0]), rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(_host(got[1]), want[1], rtol=2e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_linear_discriminant_analysis(device):
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    X, y = _data()
    got, want = _fit_both(lambda: LinearDiscriminantAnalysis(solver="svd"),
                          lambda m, Xa, ya: (m.fit(Xa, ya).predict(Xa), m.predict_proba(Xa)), device, X, y)
    np.testing.assert_array_equal(_host(got[0]), want[0])
    np.testing.assert_allclose(_host(got[1]), want[1], rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_ridge(device):
    from sklearn.linear_model import Ridge

    X, _ = _data()
    t = (X @ np.arange(1, 7, dtype=np.float32)).astype(np.float32)
    got, want = _fit_both(lambda: Ridge(alpha=0.5, solver="svd"), lambda m, Xa, ta: (m.fit(Xa, ta).predict(Xa), m.coef_),
                          device, X, t)
    np.testing.assert_allclose(_host(got[0]), want[0], rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(_host(got[1]), want[1], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("scaler", ["StandardScaler", "MinMaxScaler"])
def test_scalers(device, scaler):
    from sklearn import preprocessing

    X, _ = _data()
    got, want = _fit_both(getattr(preprocessing, scaler), lambda m, Xa: (m.fit_transform(Xa), m.inverse_transform(m.transform(Xa))),
                          device, X)
    np.testing.assert_allclose(_host(got[0]), want[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_host(got[1]), X, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_label_encoder(device):
    from sklearn.preprocessing import LabelEncoder

    y = np.array([5, 3, 5, 9, 3, 3, 7], dtype=np.int64)
    got, want = _fit_both(LabelEncoder, lambda m, ya: (m.fit_transform(ya), m.classes_), device, y)
    np.testing.assert_array_equal(_host(got[0]), want[0])
    np.testing.assert_array_equal(_host(got[1]), want[1])


METRICS = [
    ("accuracy_score", "labels"), ("zero_one_loss", "labels"), ("confusion_matrix", "labels"),
    ("mean_squared_error", "values"), ("mean_absolute_error", "values"), ("r2_score", "values"),
    ("mean_absolute_percentage_error", "values"), ("explained_variance_score", "values"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,kind", METRICS, ids=[m for m, _ in METRICS])
def test_metrics(device, name, kind):
    from sklearn import metrics

    rng = np.random.default_rng(1)
    if kind == "labels":
        a, b = rng.integers(0, 3, 40), rng.integers(0, 3, 40)
    else:
        a = rng.normal(size=40).astype(np.float32) + 3
        b = (a + rng.normal(scale=0.3, size=40)).astype(np.float32)
    fn = getattr(metrics, name)
    got = fn(_on(device, a), _on(device, b))
    want = fn(a, b)
    np.testing.assert_allclose(np.asarray(_host(got), np.float64), np.asarray(want, np.float64), rtol=1e-4, atol=1e-6)


SPECIAL = ["erf", "erfc", "expit", "logit", "log_ndtr", "ndtr", "gammaln", "xlogy", "entr", "rel_entr"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", SPECIAL)
def test_scipy_special(device, name):
    import scipy.special as sp

    rng = np.random.default_rng(2)
    x = rng.uniform(0.05, 0.95, size=32).astype(np.float32)
    fn = getattr(sp, name)
    args = (x, x[::-1].copy()) if name in ("xlogy", "rel_entr") else (x,)
    got = fn(*[_on(device, a) for a in args])
    assert isinstance(got, ad.Tensor), f"scipy.special.{name} did not return an anydevice tensor"
    np.testing.assert_allclose(_host(got), fn(*args), rtol=1e-4, atol=1e-6)


FFT = ["fft", "ifft", "rfft", "irfft", "fftn", "fftshift", "ifftshift"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", FFT)
def test_scipy_fft(device, name):
    import scipy.fft as sf

    if device == "npu" and name in ("fft", "ifft", "fftn", "rfft", "irfft"):
        pytest.skip("npu has no complex dtypes; these transforms produce or take complex64")
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 8)).astype(np.float32)
    fn = getattr(sf, name)
    got = fn(_on(device, x))
    assert isinstance(got, ad.Tensor), f"scipy.fft.{name} did not return an anydevice tensor"
    np.testing.assert_allclose(_host(got), fn(x), rtol=1e-4, atol=1e-4)
