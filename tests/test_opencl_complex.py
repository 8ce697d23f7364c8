"""complex64 and complex128 on the OpenCL backend against numpy and the cpu backend.

Values of every complex-accepting element-wise op (native or decomposed on the device), the
standard's special values (inf and NaN components, signed zeros), no spurious overflow in
division and abs, reductions, matmul, movement ops, casts and creation. complex128 needs
cl_khr_fp64: without it the device does not offer the dtype and those tests skip. The primitives
run with ``ANYDEVICE_FALLBACK=error``, so a CPU fallback cannot pass a test.
"""
from __future__ import annotations

import importlib.util
import itertools
import math

import numpy as np
import pytest

pytest.importorskip("anydevice_opencl")

import anydevice as ad  # noqa: E402
from anydevice import dispatch  # noqa: E402

_reason = ("pyopencl is not installed (pip install anydevice-opencl)" if importlib.util.find_spec("pyopencl") is None
           else ad.device.unavailable_reason("opencl"))
pytestmark = pytest.mark.skipif(bool(_reason), reason=f"no usable OpenCL device: {_reason}")
TOL = {"complex64": 2e-6, "complex128": 1e-13}
RNG = np.random.default_rng(7)


def _has(dtype: str) -> bool:
    return not _reason and any(d.name == dtype for d in ad.device.get_backend("opencl").dtypes(0))


@pytest.fixture(params=["complex64", "complex128"])
def cdt(request):
    if not _has(request.param):
        pytest.skip(f"{request.param} needs cl_khr_fp64, which this OpenCL device lacks")
    return request.param


@pytest.fixture(autouse=True)
def _no_fallback():
    old = dispatch.set_fallback_mode("error")
    yield
    dispatch.set_fallback_mode(old)


def on(a):
    return ad.asarray(np.asarray(a), device="opencl")


def sample(dtype, shape, scale=1.0):
    return ((RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)) * scale).astype(dtype)


def close(got, want, dtype, tol=None):
    got = got.numpy() if hasattr(got, "numpy") else got
    assert got.dtype == np.asarray(want).dtype, (got.dtype, np.asarray(want).dtype)
    np.testing.assert_allclose(got, want, rtol=tol or TOL[dtype], atol=(tol or TOL[dtype]) * 1e-3)


def test_dtypes_follow_fp64():
    rt = ad.device.get_backend("opencl").runtime
    names = [d.name for d in rt.dtypes(0)]
    assert "complex64" in names
    assert ("complex128" in names) == rt.has_fp64(0) == ("cl_khr_fp64" in rt.devices[0].extensions)


def test_no_fp64_means_no_complex128(monkeypatch):
    """A device without cl_khr_fp64 offers neither float64 nor complex128, and its programs
    never name double2."""
    from anydevice_opencl import codegen

    rt = ad.device.get_backend("opencl").runtime
    monkeypatch.setattr(type(rt), "has_fp64", lambda self, index: False)
    names = [d.name for d in rt.dtypes(0)]
    assert "complex64" in names and "complex128" not in names and "float64" not in names
    src = codegen.program_source(codegen.program_specs(("generic",), False), False)
    assert "float2" in src and "double2" not in src and "double" not in src.replace("double2", "")


UNARY = {
    "negative": np.negative, "positive": np.positive, "abs": np.abs, "sqrt": np.sqrt, "exp": np.exp,
    "log": np.log, "log2": np.log2, "log10": np.log10, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "square": np.square, "conj": np.conj,
    "real": np.real, "imag": np.imag, "round": np.round, "isfinite": np.isfinite, "isinf": np.isinf,
    "isnan": np.isnan, "reciprocal": lambda x: np.divide(1, x), "expm1": np.expm1,
    "log1p": lambda x: np.log(1 + x.astype(np.complex128)).astype(x.dtype),
    "acos": np.arccos, "asin": np.arcsin, "atan": np.arctan, "acosh": np.arccosh, "asinh": np.arcsinh,
    "atanh": np.arctanh,
    "sign": lambda x: np.where(x == 0, 0, x / np.where(x == 0, 1, np.abs(x))).astype(x.dtype),
}
BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
          "pow": np.power, "equal": np.equal, "not_equal": np.not_equal}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_values(op, cdt):
    x = sample(cdt, (4, 33), 0.8)
    x[0, :3] = [0, 1, -2.5]
    tol = 3e-5 if cdt == "complex64" and op in ("tan", "tanh", "expm1", "log1p", "sign") else None
    with np.errstate(all="ignore"):
        want = UNARY[op](x)
    close(getattr(ad, op)(on(x)), want, cdt, tol)
    close(getattr(ad, op)(on(x)[:, ::3]), want[:, ::3], cdt, tol)  # strided


@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_values(op, cdt):
    a, b = sample(cdt, (3, 40)), sample(cdt, (3, 40))
    if op in ("equal", "not_equal"):
        b[:, ::2] = a[:, ::2]
    if op == "pow":
        b[0, :8] = np.arange(-3, 5)  # integer exponents: repeated squaring
    with np.errstate(all="ignore"):
        close(getattr(ad, op)(on(a), on(b)), BINARY[op](a, b), cdt, 1e-5 if cdt == "complex64" else None)
        close(getattr(ad, op)(on(a), on(b[:1, :1])), BINARY[op](a, b[:1, :1]), cdt, 1e-5 if cdt == "complex64" else None)
        # a Python complex scalar adopts the tensor's dtype
        close(getattr(ad, op)(on(a), 0.5 - 2j), BINARY[op](a, np.asarray(0.5 - 2j, cdt)), cdt,
              1e-5 if cdt == "complex64" else None)


def test_make_complex_and_parts(cdt):
    real = {"complex64": np.float32, "complex128": np.float64}[cdt]
    re, im = RNG.standard_normal(50).astype(real), RNG.standard_normal(50).astype(real)
    re[:3], im[:3] = [-0.0, np.inf, np.nan], [np.nan, -0.0, np.inf]
    z = ad.make_complex(on(re), on(im))
    assert z.dtype.name == cdt
    np.testing.assert_array_equal(ad.real(z).numpy(), re)
    np.testing.assert_array_equal(ad.imag(z).numpy(), im)
    assert np.signbit(ad.real(z).numpy()[0]) and np.signbit(ad.imag(z).numpy()[1])


# --- special values ----------------------------------------------------------------------------
PARTS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 0.5, 2.5, -2.5]


def _grid(dtype):
    return np.array([complex(a, b) for a, b in itertools.product(PARTS, PARTS)], np.complex128).astype(dtype)


def _same_class(got, want):
    """Component by component: both NaN, or equal with the same sign (zeros and infinities)."""
    bad = []
    for g, w in zip(np.atleast_1d(got).astype(np.complex128), np.atleast_1d(want).astype(np.complex128)):
        for p, q in ((g.real, w.real), (g.imag, w.imag)):
            if math.isnan(p) and math.isnan(q):
                continue
            if math.isnan(p) != math.isnan(q) or math.isinf(p) != math.isinf(q):
                bad.append((g, w))
            elif (p == 0 or math.isinf(p)) and (p != q or math.copysign(1, p) != math.copysign(1, q)):
                bad.append((g, w))
            elif math.isfinite(p) and abs(p - q) > 1e-5 * max(abs(p), abs(q), 1e-30):
                bad.append((g, w))
    return bad


@pytest.mark.parametrize("op", ["abs", "exp", "log", "sqrt", "sin", "cos", "sinh", "cosh", "expm1", "log2", "log10",
                                "isnan", "isinf", "isfinite", "reciprocal", "negative", "conj", "round",
                                "acos", "asin", "atan", "acosh", "asinh", "atanh"])
def test_special_values_as_cpu(op, cdt):
    """Every (re, im) pair of inf, NaN, ±0 and ordinary parts gives what the cpu gives (numpy,
    C99 Annex G), the sign of zeros and infinities included."""
    z = _grid(cdt)
    with np.errstate(all="ignore"):
        want = getattr(ad, op)(ad.asarray(z, device="cpu")).numpy()
        got = getattr(ad, op)(on(z)).numpy()
    assert got.dtype == want.dtype
    bad = _same_class(got, want)
    assert not bad, f"{op}: {len(bad)} of {z.size} differ, e.g. got {bad[0][0]}, cpu {bad[0][1]}"


def test_division_and_abs_do_not_overflow(cdt):
    """Huge and subnormal operands whose results are ordinary numbers (numpy's own complex
    division gives NaN and inf for the first two)."""
    big = {"complex64": 3e38, "complex128": 1.5e308}[cdt]
    sub = {"complex64": 1e-39, "complex128": 1e-310}[cdt]
    z = np.array([complex(big, big), complex(sub, 0), complex(big, 0), complex(sub, sub), complex(2, -1)], cdt)
    w = np.array([complex(big, big), complex(sub, 0), complex(1, 1), complex(sub, -sub), complex(big, big)], cdt)
    want = np.array([1, 1, complex(big / 2, -big / 2), 1j, complex(1 / (2 * big), -3 / (2 * big))], np.complex128)
    close(ad.divide(on(z), on(w)), want.astype(cdt), cdt, 1e-6)
    half = np.array([complex(big / 2, big / 2), complex(sub, sub), complex(3 * sub, 4 * sub)], cdt)
    close(ad.abs(on(half)), np.array([big / math.sqrt(2), sub * math.sqrt(2), 5 * sub]).astype(np.abs(half).dtype),
          cdt, 1e-6 if cdt == "complex128" else 3e-6)
    assert np.all(np.isfinite(ad.sqrt(on(z)).numpy())) and np.all(np.isfinite(ad.log(on(z)).numpy()))


def test_division_by_zero_as_numpy(cdt):
    z = np.array([1 + 0j, 1 + 1j, 0j, -2 + 3j], cdt)
    with np.errstate(all="ignore"):
        want = np.divide(z, np.zeros(4, cdt))
    assert not _same_class(ad.divide(on(z), on(np.zeros(4, cdt))).numpy(), want)


# --- reductions, matmul -----------------------------------------------------------------------
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2)])
def test_reductions(axis, cdt):
    x = sample(cdt, (3, 50, 4), 0.5) + 1
    close(ad.sum(on(x), axis=axis), np.sum(x, axis=axis), cdt, 1e-5 if cdt == "complex64" else None)
    close(ad.prod(on(x), axis=axis), np.prod(x, axis=axis), cdt, 1e-4 if cdt == "complex64" else 1e-11)
    close(ad.mean(on(x), axis=axis), np.mean(x, axis=axis), cdt, 1e-5 if cdt == "complex64" else None)


def test_long_sum(cdt):
    x = sample(cdt, (2, 40000))
    close(ad.sum(on(x), axis=1), x.astype(np.complex128).sum(axis=1).astype(cdt), cdt,
          1e-4 if cdt == "complex64" else 1e-11)
    assert bool(ad.all(ad.equal(on(x), on(x))).item()) and not bool(ad.any(ad.not_equal(on(x), on(x))).item())


@pytest.mark.parametrize("shapes", [((5, 7), (7, 3)), ((2, 70, 65), (65, 66)), ((7,), (7, 4)), ((3, 6), (6,))])
def test_matmul(shapes, cdt):
    a, b = sample(cdt, shapes[0]), sample(cdt, shapes[1])
    want = (a.astype(np.complex128) @ b.astype(np.complex128)).astype(cdt)
    np.testing.assert_allclose(ad.matmul(on(a), on(b)).numpy(), want, rtol=1e-5 if cdt == "complex64" else 1e-12,
                               atol=1e-4 if cdt == "complex64" else 1e-12)


def test_matmul_specialized(cdt, monkeypatch):
    from anydevice_opencl import kernels as K

    monkeypatch.setattr(K, "SPECIALIZE_ELEMENTS", 0)
    a, b = sample(cdt, (33, 20)), sample(cdt, (20, 17))
    got = ad.matmul(on(a), on(b)).numpy()
    assert got.dtype == np.dtype(cdt)
    # a dot product's rounding error scales with the sum of its terms' magnitudes, not with its result (which
    # can cancel to near zero): bound each element by tol * (|a| @ |b|)
    bound = (1e-5 if cdt == "complex64" else 1e-12) * (np.abs(a).astype(np.float64) @ np.abs(b))
    err = np.abs(got.astype(np.complex128) - a.astype(np.complex128) @ b)
    assert (err <= bound).all(), (err / bound).max()
    x = sample(cdt, (40, 9))
    close(ad.exp(on(x)), np.exp(x), cdt)
    close(ad.sum(on(x), axis=0), x.sum(axis=0), cdt, 1e-5 if cdt == "complex64" else None)


# --- movement, casts, creation --------------------------------------------------------------------
def test_movement_ops_copy_bits(cdt):
    x = sample(cdt, (4, 5, 6))
    x[0, 0, 0] = complex(math.nan, -0.0)
    t = on(x)
    np.testing.assert_array_equal(t.numpy().view(np.uint8), x.view(np.uint8))
    np.testing.assert_array_equal(t[1:, ::2, -1].numpy(), x[1:, ::2, -1])
    np.testing.assert_array_equal(ad.permute_dims(t, (2, 0, 1)).numpy(), np.transpose(x, (2, 0, 1)))
    np.testing.assert_array_equal(ad.broadcast_to(t[:, :1], (4, 3, 6)).numpy(), np.broadcast_to(x[:, :1], (4, 3, 6)))
    np.testing.assert_array_equal(ad.concat([t, t[:1]], axis=0).numpy(), np.concatenate([x, x[:1]]))
    np.testing.assert_array_equal(ad.concat([t, t[:, :2]], axis=1).numpy(), np.concatenate([x, x[:, :2]], axis=1))
    np.testing.assert_array_equal(ad.take(t, on(np.array([3, 0, -1])), axis=1).numpy(), np.take(x, [3, 0, -1], axis=1))
    np.testing.assert_array_equal(ad.reshape(t, (20, 6)).numpy(), x.reshape(20, 6))
    cond = RNG.random((4, 5, 6)) < 0.5
    np.testing.assert_array_equal(ad.where(on(cond), t, t * 2).numpy(), np.where(cond, x, x * 2))
    u = on(x)
    u[1, 2] = on(np.full(6, 1 - 1j, cdt))
    y = x.copy()
    y[1, 2] = 1 - 1j
    np.testing.assert_array_equal(u.numpy(), y)
    assert np.array_equal(t.numpy()[0, 0, 0:1].view(np.uint8), x[0, 0, 0:1].view(np.uint8))  # NaN payload, -0


def test_casts(cdt):
    other = "complex64" if cdt == "complex128" else ("complex128" if _has("complex128") else "complex64")
    x = sample(cdt, (3, 7))
    close(ad.astype(on(x), other), x.astype(other), other, 1e-6 if "complex64" in (cdt, other) else None)
    for src in ["bool", "int8", "uint16", "int32", "int64", "float16", "bfloat16", "float32"] + (
            ["float64"] if _has("float64") else []):
        if src == "bfloat16":
            import ml_dtypes

            r = np.array([1.5, -2.0, 0.0, 3.25], ml_dtypes.bfloat16)
        else:
            r = np.array([1, 0, 1, 1] if src == "bool" else [1.5, 2, 0, 3.25]).astype(src)
        got = ad.astype(ad.asarray(r, device="opencl"), cdt).numpy()
        np.testing.assert_array_equal(got, r.astype(np.float32).astype(cdt))
    with pytest.raises(TypeError, match="imaginary part"):
        ad.astype(on(x), "float32")


def test_full_and_zeros(cdt):
    np.testing.assert_array_equal(ad.full((3, 2), 1.5 - 2j, dtype=cdt, device="opencl").numpy(),
                                  np.full((3, 2), 1.5 - 2j, cdt))
    np.testing.assert_array_equal(ad.zeros((4,), dtype=cdt, device="opencl").numpy(), np.zeros(4, cdt))
    np.testing.assert_array_equal(ad.ones_like(on(sample(cdt, (2,)))).numpy(), np.ones(2, cdt))


def test_promotion_with_real_tensors(cdt):
    """float16 + complex64 and friends promote as the registry says, and compute on the device."""
    x = sample(cdt, (9,))
    f = np.linspace(-2, 2, 9).astype(np.float16)
    got = ad.add(on(x), ad.asarray(f, device="opencl"))
    want = ad.add(ad.asarray(x, device="cpu"), ad.asarray(f, device="cpu"))
    assert got.dtype == want.dtype
    close(got, want.numpy(), got.dtype.name)


def test_gradients_as_cpu(cdt):
    """Backward through complex ops on the device gives the cpu's gradients."""
    x = sample(cdt, (6,))
    grads = []
    for dev in ("cpu", "opencl"):
        t = ad.asarray(x, device=dev)
        t.requires_grad = True
        y = ad.sum(ad.abs(ad.multiply(t, ad.exp(t)) / (t + 2.0)))
        y.backward()
        grads.append(t.grad.numpy())
    assert np.all(np.abs(grads[0]) > 0)
    close(grads[1], grads[0], cdt, 1e-5 if cdt == "complex64" else 1e-12)
