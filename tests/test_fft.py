"""anydevice.fft: the Array API Fourier-transform extension on every device, against numpy."""
from __future__ import annotations

import inspect

import array_api_strict
import numpy as np
import pytest

import anydevice as ad
from anydevice.engine import dispatch
from anydevice.ops.registry import get_op

F = ad.fft
DEVICES = [d for d in ("cpu", "npu:0", "xpu:0", "dcu:0", "opencl:0") if ad.device.is_available(d.split(":")[0])]
NAMES = ["fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft", "fftfreq", "rfftfreq",
         "fftshift", "ifftshift"]
rng = np.random.default_rng(3)
X = rng.uniform(-1, 1, (3, 6))
Z = X + 1j * rng.uniform(-1, 1, (3, 6))


@pytest.fixture(autouse=True)
def _quiet():
    old = dispatch.set_fallback_mode("silent")
    yield
    dispatch.set_fallback_mode(old)


def _supports(dev, dtype):
    d = ad.runtime.devices.as_device(dev)
    return dtype in d._backend.dtypes(d.index)


def close(got, want, tol=2e-4):
    np.testing.assert_allclose(got.numpy(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", NAMES)
def test_signature_matches_the_standard_and_stays_out_of_the_main_namespace(name):
    want = inspect.signature(getattr(array_api_strict.fft, name)).parameters
    got = inspect.signature(getattr(F, name)).parameters
    assert [(p.name, p.kind) for p in got.values()] == [(p.name, p.kind) for p in want.values()]
    assert getattr(ad, name, F) is F  # absent from the main namespace (anydevice.fft is the module)
    assert get_op(name).namespace == "fft"


CASES = [
    ("fft", Z, {}), ("fft", Z, {"n": 4, "axis": 0, "norm": "ortho"}), ("ifft", Z, {"n": 8, "norm": "forward"}),
    ("fftn", Z, {}), ("ifftn", Z, {"s": (2, 5), "axes": (0, 1), "norm": "ortho"}), ("rfft", X, {}), ("rfft", X, {"n": 7, "axis": 0}),
    ("irfft", Z, {}), ("irfft", Z, {"n": 5, "norm": "ortho"}), ("rfftn", X, {"axes": (1, 0)}),
    ("irfftn", Z, {"s": (3, 8), "axes": (0, 1)}), ("hfft", Z, {"n": 7}), ("ihfft", X, {"norm": "forward"}),
    ("fftshift", X, {}), ("ifftshift", X, {"axes": 1}),
]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_values_match_numpy(dev, case):
    name, x, kw = case
    complex_in = np.iscomplexobj(x)
    dtype = ad.complex64 if complex_in else ad.float32
    if not _supports(dev, dtype) or not _supports(dev, ad.complex64):
        pytest.skip(f"{dev} has no {dtype.name} / complex64")
    x32 = x.astype(np.complex64 if complex_in else np.float32)
    got = getattr(F, name)(ad.asarray(x32, device=dev), **kw)
    want = getattr(np.fft, name)(x32.astype(np.complex128 if complex_in else np.float64), **kw)
    assert got.shape == want.shape
    close(got, want, 1e-4 * max(1.0, float(np.abs(want).max())))


@pytest.mark.parametrize("dev", DEVICES)
def test_frequencies_and_roundtrip(dev):
    close(F.fftfreq(7, d=0.5, device=dev), np.fft.fftfreq(7, d=0.5))
    close(F.rfftfreq(8, device=dev), np.fft.rfftfreq(8))
    assert F.fftfreq(4, device=dev).dtype is ad.float32 and F.fftfreq(4, dtype=ad.float16, device=dev).dtype is ad.float16
    x = ad.asarray(X.astype(np.float32), device=dev)
    close(F.ifftshift(F.fftshift(x)), X.astype(np.float32), 0)
    if _supports(dev, ad.complex64):
        close(F.irfft(F.rfft(x), n=6), X)


def test_the_dft_decomposition_matches_the_native_kernel():
    """The on-device path of a backend without an FFT (real matrix products) against numpy's FFT."""
    from anydevice.engine.dispatch import xp

    op = get_op("fft")
    z = ad.asarray(Z)
    for kw in ({"n": 6, "axis": 1, "norm": "backward"}, {"n": 9, "axis": 0, "norm": "ortho"}):
        close(op.decomposition(xp, z, **kw), np.fft.fft(Z, **kw), 1e-10)
    r = get_op("irfft").decomposition(xp, z, n=10, axis=1, norm="forward")
    close(r, np.fft.irfft(Z, n=10, norm="forward"), 1e-10)


# --- gradients: a real loss L = Re(sum(conj(G) * y)), d/dRe(x) + i d/dIm(x) ---------------------------------
def _fd(f, x, h=1e-6):
    g = np.zeros(x.shape, np.complex128 if np.iscomplexobj(x) else np.float64)
    for j in np.ndindex(x.shape):
        for unit in ((1, 1j) if np.iscomplexobj(x) else (1,)):
            e = np.zeros(x.shape, x.dtype)
            e[j] = unit * h
            g[j] += unit * (f(x + e) - f(x - e)) / (2 * h)
    return g


GRADS = [("fft", Z, {"n": 8}), ("ifft", Z, {"n": 4, "norm": "ortho"}), ("rfft", X, {"n": 5}),
         ("irfft", Z, {"n": 9}), ("irfft", Z[:, :4], {"norm": "forward"}), ("hfft", Z, {"n": 6}),
         ("ihfft", X, {"norm": "ortho"}), ("fftn", Z, {"s": (2, 7), "axes": (0, 1)}), ("rfftn", X, {}), ("irfftn", Z, {"s": (4, 6), "axes": (0, 1)}),
         ("fftshift", X, {})]


@pytest.mark.parametrize("name,x,kw", GRADS, ids=[f"{g[0]}-{i}" for i, g in enumerate(GRADS)])
def test_gradients_match_finite_differences(name, x, kw):
    ref = getattr(np.fft, name)
    shape = ref(x, **kw).shape
    g = rng.uniform(-1, 1, shape) + (1j * rng.uniform(-1, 1, shape) if np.iscomplexobj(ref(x, **kw)) else 0)
    t = ad.asarray(x)
    t.requires_grad_(True)
    out = getattr(F, name)(t, **kw)
    out.backward(ad.asarray(g, dtype=out.dtype))
    want = _fd(lambda v: float(np.real(np.sum(np.conj(g) * ref(v, **kw)))), x.copy())
    np.testing.assert_allclose(t.grad.numpy(), want, rtol=1e-6, atol=1e-6)


# --- errors, the same on every device ---------------------------------------------------------------------
ERRORS = [
    (lambda d: F.fft(ad.asarray(X.astype(np.float32), device=d)), TypeError, r"fft\(\) does not accept dtype float32"),
    (lambda d: F.rfft(ad.asarray(Z.astype(np.complex64), device=d)), TypeError, r"rfft\(\) does not accept dtype complex64"),
    (lambda d: F.rfft(ad.asarray(X.astype(np.float32), device=d), n=0), ValueError, r"rfft\(\): n must be >= 1"),
    (lambda d: F.rfft(ad.asarray(X.astype(np.float32), device=d), axis=2), ValueError, r"rfft\(\): axis 2 is out of range"),
    (lambda d: F.rfft(ad.asarray(X.astype(np.float32), device=d), norm="none"), ValueError,
     r"rfft\(\): norm must be 'backward', 'ortho' or 'forward'"),
    (lambda d: F.rfftn(ad.asarray(X.astype(np.float32), device=d), axes=(0, 0)), ValueError, r"rfftn\(\): axes .* repeat"),
    (lambda d: F.rfftn(ad.asarray(X.astype(np.float32), device=d), s=(2,), axes=(0, 1)), ValueError,
     r"rfftn\(\): s \(2,\) and axes \(0, 1\) must have the same length"),
    (lambda d: F.fftfreq(0, device=d), ValueError, r"fftfreq\(\): n must be an int >= 1"),
    (lambda d: F.fftfreq(4, d=0.0, device=d), ValueError, r"fftfreq\(\): d must not be 0"),
    (lambda d: F.fftfreq(4, dtype=ad.int32, device=d), TypeError, r"fftfreq\(\) does not accept dtype int32"),
]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("k", range(len(ERRORS)))
def test_errors_name_the_op_and_what_is_allowed(dev, k):
    call, exc, msg = ERRORS[k]
    if not _supports(dev, ad.complex64):
        pytest.skip(f"{dev} has no complex64")
    with pytest.raises(exc, match=msg):
        call(dev)


@pytest.mark.parametrize("dev", DEVICES)
def test_an_empty_batch_with_a_huge_length_is_empty_everywhere(dev):
    # the result holds nothing, so no device may build the decomposition's 2**40-long intermediates
    if not _supports(dev, ad.complex64):
        pytest.skip(f"{dev} has no complex dtypes")
    x = ad.zeros((2, 0, 3), dtype=ad.complex64, device=dev)
    r = ad.fft.hfft(x, n=2 ** 40)
    assert r.shape == (2, 0, 2 ** 40) and r.dtype == ad.float32 and r.device == ad.device.as_device(dev)
    assert ad.fft.irfft(x, n=2 ** 40).shape == (2, 0, 2 ** 40)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("name,kw", [("irfft", {"n": 1}), ("irfft", {"n": 6}), ("hfft", {"n": 5}),
                                     ("irfftn", {"s": (3, 4), "axes": (0, 1)}), ("fft", {"n": 3}), ("rfft", {"n": 4})])
def test_an_empty_input_padded_to_a_length_transforms_to_zeros(dev, name, kw):
    # numpy's irfft and hfft of an empty input read uninitialized memory: the padded input is all zeros
    if not _supports(dev, ad.complex64):
        pytest.skip(f"{dev} has no complex dtypes")
    real = name in ("rfft",)
    shape = (0, 0) if name == "irfftn" else (0,)
    x = ad.zeros(shape, dtype=ad.float32 if real else ad.complex64, device=dev)
    for _ in range(3):  # fresh memory each time, so garbage would show
        r = getattr(ad.fft, name)(x, **kw)
        want = getattr(np.fft, name)(np.zeros(shape, np.float32 if real else np.complex64), **kw)
        assert r.shape == want.shape and r.dtype.name == ("float32" if name in ("irfft", "hfft", "irfftn") else "complex64")
        assert np.all(r.numpy() == 0), r.numpy()
