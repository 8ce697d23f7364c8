"""Element-wise ops, generated from small tables (name → rules).

References run on float64 (complex128) host arrays for floating inputs and on the exact
integer dtype otherwise; they are the oracle and share no code with any kernel.
"""
from __future__ import annotations

import math

import numpy as np

from anydevice.base import dtypes as _dt
from anydevice.ops.registry import (
    Choice,
    Optional,
    Scalar,
    check_category,
    define,
    elementwise_shape,
    partial_vjp,
    same,
    to_bool,
    to_real,
)


def unbroadcast(xp, g, shape):
    """Sum ``g`` down to ``shape`` (the VJP of broadcasting)."""
    if g.shape == tuple(shape):
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and g.shape[lead + i] != 1)
    if axes:
        g = xp.sum(g, axis=axes, keepdims=True)
    return xp.reshape(g, tuple(shape))


def _eshape(name):
    return lambda shapes, attrs: elementwise_shape(shapes, attrs, name)


def unary(name, ref, vjp=None, decomp=None, cat="numeric", rule=None, domain=None, tol=None, diff=True, doc="",
          **kw):
    return define(
        name, inputs=("x",), dtype_rule=(rule or same)(cat), shape_rule=_eshape(name), reference=ref, vjp=vjp,
        decomposition=decomp, category="elementwise", domain=domain, tolerance=tol, differentiable=diff, doc=doc, **kw,
    )


def binary(name, ref, vjp=None, decomp=None, cat="numeric", rule=None, domain=None, tol=None, diff=True, doc="",
           **kw):
    return define(
        name, inputs=("x1", "x2"), dtype_rule=(rule or same)(cat), shape_rule=_eshape(name), reference=ref,
        vjp=vjp, decomposition=decomp, category="elementwise", domain=domain, tolerance=tol, differentiable=diff,
        doc=doc, **kw,
    )


def _full_like(xp, x, v):
    return xp.full_like(x, v)


# --- unary primitives -----------------------------------------------------------------------
unary("negative", np.negative, vjp=lambda xp, g, i, o: (-g,), doc="-x")
unary("abs", np.abs, rule=to_real, vjp=lambda xp, g, i, o: (g * xp.sign(i[0]),), doc="|x|")
unary("exp", np.exp, cat="floating", vjp=lambda xp, g, i, o: (g * o,), domain="exp")
unary("log", np.log, cat="floating", vjp=lambda xp, g, i, o: (g / i[0],), domain="positive")
unary("sqrt", np.sqrt, cat="floating", vjp=lambda xp, g, i, o: (g / (o * 2.0),), domain="positive")
unary("sin", np.sin, cat="floating", vjp=lambda xp, g, i, o: (g * xp.cos(i[0]),))
unary("cos", np.cos, cat="floating", vjp=lambda xp, g, i, o: (-g * xp.sin(i[0]),))
unary("floor", np.floor, cat="real", vjp=lambda xp, g, i, o: (xp.zeros_like(g),))
unary("round", np.round, cat="numeric", vjp=lambda xp, g, i, o: (xp.zeros_like(g),), doc="round half to even")
unary(
    "erf", np.vectorize(math.erf, otypes=[np.float64]), cat="real_floating",
    vjp=lambda xp, g, i, o: (g * xp.exp(-(i[0] * i[0])) * (2.0 / math.sqrt(math.pi)),),
    doc="the error function",
)


# --- complex components (JAX lax's real / imag / complex): what complex decompositions build on -----
def _make_complex_rule(ds, attrs):
    for e in ds:
        check_category("make_complex", "real_floating", e)
    d = _dt.promote(ds[0], ds[1])
    comp = d if d in (_dt.float32, _dt.float64) else _dt.float32  # 16-bit floats widen to float32
    return (comp, comp), (_dt.complex128 if comp is _dt.float64 else _dt.complex64)


_make_complex_rule.category = "real_floating"


def _make_complex_ref(re, im):
    re, im = np.broadcast_arrays(np.asarray(re, np.float64), np.asarray(im, np.float64))
    out = np.empty(re.shape, np.complex128)
    out.real, out.imag = re, im
    return out


unary("real", np.real, cat="numeric", rule=to_real, diff=False,
      doc="the real component (x itself for real x, integers included, as the standard's 2024.12 edition allows)")
unary("imag", np.imag, cat="floating", rule=to_real, diff=False, doc="the imaginary component (0 for real x)")
define("make_complex", inputs=("real", "imag"), dtype_rule=_make_complex_rule, shape_rule=_eshape("make_complex"),
       reference=_make_complex_ref, category="elementwise", differentiable=False,
       doc="real + imag*1j, each component exact (complex64 from float32 and the 16-bit floats, complex128 from float64)")
unary("conj", np.conj, cat="numeric", diff=False,
      decomp=lambda xp, x: xp.make_complex(xp.real(x), -xp.imag(x)) if x.dtype.kind == "complex" else x,
      doc="the complex conjugate (x itself for real x)")

# --- unary composites ------------------------------------------------------------------------
unary("positive", np.positive, vjp=lambda xp, g, i, o: (g,), decomp=lambda xp, x: x)
unary("square", np.square, vjp=lambda xp, g, i, o: (g * i[0] * 2.0,), decomp=lambda xp, x: xp.multiply(x, x))
unary("ceil", np.ceil, cat="real", vjp=lambda xp, g, i, o: (xp.zeros_like(g),),
      decomp=lambda xp, x: xp.negative(xp.floor(xp.negative(x))) if x.dtype.kind == "float" else x)
unary("trunc", np.trunc, cat="real", vjp=lambda xp, g, i, o: (xp.zeros_like(g),),
      decomp=lambda xp, x: xp.where(xp.less(x, 0), xp.ceil(x), xp.floor(x)) if x.dtype.kind == "float" else x)
unary("expm1", lambda x: _expm1_ref(x), cat="floating", vjp=lambda xp, g, i, o: (g * (o + 1.0),),
      decomp=lambda xp, x: _expm1(xp, x), domain="exp")
unary("log1p", lambda x: _log1p_ref(x), cat="floating", vjp=lambda xp, g, i, o: (g / (i[0] + 1.0),),
      decomp=lambda xp, x: _log1p(xp, x), domain="positive")
unary("log2", np.log2, cat="floating", vjp=lambda xp, g, i, o: (g / (i[0] * math.log(2.0)),),
      decomp=lambda xp, x: _log_scaled(xp, x, 1.0 / math.log(2.0)), domain="positive")
unary("log10", np.log10, cat="floating", vjp=lambda xp, g, i, o: (g / (i[0] * math.log(10.0)),),
      decomp=lambda xp, x: _log_scaled(xp, x, 1.0 / math.log(10.0)), domain="positive")
unary("tan", np.tan, cat="floating", vjp=lambda xp, g, i, o: (g * (o * o + 1.0),),
      decomp=lambda xp, x: _tan(xp, x), domain="unit")
unary("sinh", np.sinh, cat="floating", vjp=lambda xp, g, i, o: (g * xp.cosh(i[0]),),
      decomp=lambda xp, x: _sinh(xp, x), domain="exp")
unary("cosh", np.cosh, cat="floating", vjp=lambda xp, g, i, o: (g * xp.sinh(i[0]),),
      decomp=lambda xp, x: _cosh(xp, x), domain="exp")
unary("tanh", np.tanh, cat="floating", vjp=lambda xp, g, i, o: (g * (1.0 - o * o),),
      decomp=lambda xp, x: _tanh(xp, x))
unary("reciprocal", lambda x: np.divide(1.0, x), cat="floating", vjp=lambda xp, g, i, o: (-g * o * o,),
      decomp=lambda xp, x: xp.divide(1.0, x), domain="nonzero")
unary("sign", lambda x: _sign_ref(x), vjp=lambda xp, g, i, o: (xp.zeros_like(g),),
      decomp=lambda xp, x: _sign(xp, x))
# complex operands test each component (|x| overflows for large finite x: 3e38+3e38j is finite)
unary("isnan", np.isnan, rule=to_bool, diff=False,
      decomp=lambda xp, x: _either_part(xp, xp.isnan, xp.logical_or, x) if x.dtype.kind == "complex" else xp.not_equal(x, x))
unary("isinf", np.isinf, rule=to_bool, diff=False,
      decomp=lambda xp, x: _either_part(xp, xp.isinf, xp.logical_or, x) if x.dtype.kind == "complex" else
      xp.equal(xp.abs(x), math.inf) if x.dtype.kind == "float" else xp.zeros_like(x, dtype=_dt.bool_))
unary("isfinite", np.isfinite, rule=to_bool, diff=False,
      decomp=lambda xp, x: _either_part(xp, xp.isfinite, xp.logical_and, x) if x.dtype.kind == "complex" else
      xp.logical_not(xp.logical_or(xp.isnan(x), xp.isinf(x))))
unary("logical_not", np.logical_not, cat="bool", diff=False, decomp=lambda xp, x: xp.equal(x, False))
unary("bitwise_invert", np.invert, cat="integral_or_bool", diff=False,
      decomp=lambda xp, x: xp.logical_not(x) if x.dtype is _dt.bool_ else xp.bitwise_xor(x, xp.full_like(x, -1) if x.dtype.kind == "int" else xp.full_like(x, (1 << (8 * x.dtype.itemsize)) - 1)))


def _sign(xp, x):
    if x.dtype.kind == "uint":
        return xp.astype(xp.greater(x, 0), x.dtype)
    if x.dtype.kind == "complex":
        return _csign(xp, x)
    one, zero = xp.ones_like(x), xp.zeros_like(x)
    s = xp.where(xp.greater(x, 0), one, xp.where(xp.less(x, 0), -one, zero))
    if x.dtype.kind == "float":
        s = xp.where(xp.isnan(x), x, s)
    return s


# --- accurate decompositions -------------------------------------------------------------------
# Built from primitives only, as accurate (relative error, signed zeros, special values) as the
# native kernels they stand in for. Complex operands work on the components (real, imag,
# make_complex), the way C99 defines these functions, so no NaN leaks from one part to the other.
_HYPERBOLIC_BIG = 20.0  # |x| beyond which e^-|x| is below the rounding of e^|x| (float64 included)


def _keep_zero(xp, x, r):
    """``r``, but ``x`` itself where ``x`` is ±0 (f(±0) = ±0 for odd functions)."""
    return xp.where(xp.equal(x, 0.0), x, r)


def _odd(xp, x, r):
    """Extend ``r`` = f(|x|) of an odd function to negative ``x``, keeping ±0 and NaN."""
    return _keep_zero(xp, x, xp.where(xp.less(x, 0.0), -r, r))


def _expm1(xp, x):
    """exp(x) - 1 without cancellation for tiny |x|: with u = exp(x), (u - 1) * x / log(u) cancels the
    rounding error of u (Kahan); u == 1 means expm1(x) = x (and keeps -0)."""
    if x.dtype.kind == "complex":
        return _cexpm1(xp, x)
    u = xp.exp(x)
    um1 = u - 1.0
    edge = xp.logical_or(xp.equal(u, 0.0), xp.isinf(u))  # exp under- or overflowed: -1 or +inf
    safe = xp.where(xp.logical_or(edge, xp.equal(um1, 0.0)), xp.full_like(u, 2.0), u)
    r = xp.where(xp.equal(um1, 0.0), x, um1 * (x / xp.log(safe)))
    return xp.where(edge, um1, r)


def _cexpm1(xp, z):
    """expm1(a + bj) = (expm1(a)cos(b) - 2sin²(b/2)) + e^a sin(b) j; non-finite z: exp(z) - 1."""
    a, b = xp.real(z), xp.imag(z)
    s = xp.sin(b * 0.5)
    re = xp.expm1(a) * xp.cos(b) - s * s * 2.0
    im = _keep_zero(xp, b, xp.exp(a) * xp.sin(b))  # b = ±0: ±0 even when e^a overflows
    return xp.where(xp.isfinite(z), xp.make_complex(re, im), xp.exp(z) - 1.0)


def _log1p(xp, x):
    """log(1 + x) without cancellation for tiny |x|: with u = 1 + x, log(u) * x / (u - 1) (Higham)."""
    if x.dtype.kind == "complex":
        return _clog1p(xp, x)
    u = x + 1.0
    d = u - 1.0
    safe = xp.where(xp.logical_or(xp.equal(d, 0.0), xp.isinf(d)), xp.ones_like(d), d)
    r = xp.where(xp.equal(d, 0.0), x, xp.log(u) * (x / safe))
    return xp.where(xp.isinf(d), xp.log(u), r)


def _clog1p(xp, z):
    a, b = xp.real(z), xp.imag(z)
    u = xp.make_complex(a + 1.0, b)
    d = xp.make_complex(xp.real(u) - 1.0, b)  # exactly u - 1
    zero = xp.equal(d, 0)
    ratio = z / xp.where(zero, xp.ones_like(d), d)
    small = xp.logical_and(xp.isfinite(z), xp.less(xp.abs(z), 0.5))
    r = xp.where(small, xp.log(u) * ratio, xp.log(u))
    return xp.where(zero, z, r)


def _log_scaled(xp, x, k):
    """log(x) * k (log2, log10); complex: each component scaled, so ±inf and NaN parts stay put."""
    lx = xp.log(x)
    if x.dtype.kind == "complex":
        return xp.make_complex(xp.real(lx) * k, xp.imag(lx) * k)
    return lx * k


def _times_j(xp, z):
    """z * 1j, exact on each component."""
    return xp.make_complex(-xp.imag(z), xp.real(z))


def _times_minus_j(xp, z):
    return xp.make_complex(xp.imag(z), -xp.real(z))


def _sinh(xp, x):
    if x.dtype.kind == "complex":  # sinh(z) = -1j * sin(z * 1j)
        return _times_minus_j(xp, xp.sin(_times_j(xp, x)))
    ax = xp.abs(x)
    t = xp.expm1(ax)
    e = xp.exp(ax * 0.5)  # large |x|: e^|x| / 2 as (e^(|x|/2) / 2) * e^(|x|/2), no early overflow
    r = xp.where(xp.greater(ax, _HYPERBOLIC_BIG), e * 0.5 * e, (t + t / (t + 1.0)) * 0.5)
    return _odd(xp, x, r)


def _cosh(xp, x):
    if x.dtype.kind == "complex":  # cosh(z) = cos(z * 1j)
        return xp.cos(_times_j(xp, x))
    ax = xp.abs(x)
    e = xp.exp(ax * 0.5)
    return xp.where(xp.greater(ax, _HYPERBOLIC_BIG), e * 0.5 * e, (xp.exp(ax) + xp.exp(-ax)) * 0.5)


def _tanh(xp, x):
    if x.dtype.kind == "complex":
        return _ctanh(xp, x)
    t = xp.expm1(xp.abs(x) * -2.0)  # tanh|x| = -t / (t + 2), no cancellation for tiny |x|
    return _odd(xp, x, -t / (t + 2.0))


def _ctanh(xp, z):
    """Kahan's tanh(a + bj): with t = tan(b), s = sinh(a), beta = 1 + t², rho = sqrt(1 + s²), it is
    (beta rho s + t j) / (1 + beta s²); ±1 + 0j once |a| is large."""
    a, b = xp.real(z), xp.imag(z)
    t = xp.tan(b)
    s = xp.sinh(a)
    beta = t * t + 1.0
    den = beta * s * s + 1.0
    re = beta * xp.sqrt(s * s + 1.0) * s / den
    im = t / den
    big = xp.logical_and(xp.greater(xp.abs(a), _HYPERBOLIC_BIG), xp.logical_or(xp.isfinite(b), xp.isinf(a)))
    re = xp.where(big, xp.where(xp.less(a, 0.0), xp.full_like(a, -1.0), xp.ones_like(a)), re)
    im = xp.where(big, xp.zeros_like(b), im)
    return xp.make_complex(_keep_zero(xp, a, re), _keep_zero(xp, b, im))


def _tan(xp, x):
    if x.dtype.kind == "complex":  # tan(z) = -1j * tanh(z * 1j)
        return _times_minus_j(xp, xp.tanh(_times_j(xp, x)))
    return xp.divide(xp.sin(x), xp.cos(x))


def _csign(xp, z):
    """z / |z| computed on components scaled by max(|a|, |b|) (no overflow); 0 for 0, NaN + NaN j
    when a part is NaN, and an infinite part counts as ±1 against finite ones."""
    a, b = xp.real(z), xp.imag(z)
    inf = xp.logical_or(xp.isinf(a), xp.isinf(b))
    zero = xp.zeros_like(a)
    a = xp.where(inf, xp.where(xp.isinf(a), xp.sign(a), zero), a)
    b = xp.where(inf, xp.where(xp.isinf(b), xp.sign(b), zero), b)
    m = xp.maximum(xp.abs(a), xp.abs(b))
    m = xp.where(xp.equal(m, 0.0), xp.ones_like(m), m)
    a, b = a / m, b / m
    r = xp.sqrt(a * a + b * b)
    out = xp.where(xp.equal(z, 0), xp.zeros_like(z), xp.make_complex(a / r, b / r))
    return xp.where(xp.isnan(z), xp.full_like(z, complex(math.nan, math.nan)), out)


def _either_part(xp, test, combine, z):
    return combine(test(xp.real(z)), test(xp.imag(z)))


def _expm1_ref(x):
    """numpy's expm1, with its complex special values fixed: exp(z) - 1 where z is not finite (numpy
    gives NaN + NaN j), and an exact zero imaginary part where b is ±0 (numpy: inf * 0 = NaN)."""
    r = np.expm1(x)
    if np.iscomplexobj(x):
        r = np.where(np.isfinite(x), r, np.exp(x) - 1)
        r = np.where(np.imag(x) == 0, _make_complex_ref(np.real(r), np.imag(x)), r)
    return r


def _sign_ref(x):
    """sign; complex: cos(θ) + sin(θ) j with θ = angle(x), which neither overflows nor gives a NaN
    part for an infinite one (numpy's x / |x| does both), 0 at 0 and NaN + NaN j for a NaN part."""
    if not np.iscomplexobj(x):
        return np.sign(x)
    t = np.angle(x)
    r = np.where(x == 0, 0j, _make_complex_ref(np.cos(t), np.sin(t)))
    return np.where(np.isnan(x), complex(np.nan, np.nan), r)


def _log1p_ref(x):
    """log1p; complex |x| < 0.5 as 0.5 log1p(2a + a² + b²) + atan2(b, 1 + a) j (numpy's complex log1p
    is log(1 + x), which loses tiny x), else log((1 + a) + bj)."""
    if not np.iscomplexobj(x):
        return np.log1p(x)
    a, b = np.real(x), np.imag(x)
    small = _make_complex_ref(0.5 * np.log1p(a * (2.0 + a) + b * b), np.arctan2(b, 1.0 + a))
    return np.where(np.abs(x) < 0.5, small, np.log(_make_complex_ref(1.0 + a, b)))  # 1 + x would lose b = -0


# --- activations (element-wise) --------------------------------------------------------------
unary("relu", lambda x: np.maximum(x, 0), cat="real", vjp=lambda xp, g, i, o: (xp.relu_grad(g, i[0]),),
      decomp=lambda xp, x: xp.maximum(x, xp.zeros_like(x)))


def _relu_grad_samples(d, rng):
    from anydevice.ops.samples import Sample, values

    x = values(rng, d, (4, 5))
    x.flat[:3] = 0  # x = 0 passes no gradient
    return [Sample([values(rng, d, (4, 5)), x], {}, "(4, 5)"), Sample([values(rng, d, (5,)), x], {}, "grad broadcast")]


binary("relu_grad", lambda g, x: g * (x > 0), cat="real", samples=_relu_grad_samples, diff=False,
       decomp=lambda xp, g, x: g * xp.astype(xp.greater(x, 0), g.dtype),
       doc="the gradient of relu: grad where x > 0, else grad * 0")
unary("sigmoid", lambda x: 1.0 / (1.0 + np.exp(-x)), cat="real_floating", vjp=lambda xp, g, i, o: (g * o * (1.0 - o),),
      decomp=lambda xp, x: 1.0 / (xp.exp(-x) + 1.0))


def _gelu_ref(x, approximate="none"):
    # 0.5 x (1 + tanh(y)) = x / (1 + e^(-2y)) and 0.5 x (1 + erf(x/√2)) = 0.5 x erfc(-x/√2): the
    # same functions without the cancellation of 1 + tanh and 1 + erf in the negative tail
    if approximate == "tanh":
        return x / (1.0 + np.exp(-2.0 * math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    erfc = np.vectorize(math.erfc, otypes=[np.float64])
    return 0.5 * x * erfc(-x / math.sqrt(2.0))


def _gelu(xp, x, approximate="none"):
    if approximate == "tanh":  # x * sigmoid(2y): 1 + tanh(y) would cancel (and round to a wrong tiny value)
        inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
        return x / (xp.exp(inner * -2.0) + 1.0)
    return x * 0.5 * (xp.erf(x * (1.0 / math.sqrt(2.0))) + 1.0)


#: 0.5 x (1 + erf(x/√2)) cancels in the negative tail, as every erf-based kernel does (numpy, torch):
#: its error is about |x| eps / 2 absolute, not relative, below gelu(-2) ~ -0.045.
_GELU_TOL = {"float32": (1.3e-6, 1e-6), "bfloat16": (1.6e-2, 1e-6)}  # (bfloat16 computes in float32)


def _gelu_vjp(xp, g, i, o, approximate="none"):
    x = i[0]
    if approximate == "tanh":
        k = math.sqrt(2.0 / math.pi)
        t = xp.tanh((x + x * x * x * 0.044715) * k)
        d = 0.5 * (t + 1.0) + x * 0.5 * (1.0 - t * t) * k * (x * x * (3 * 0.044715) + 1.0)
        return (g * d,)
    cdf = (xp.erf(x * (1.0 / math.sqrt(2.0))) + 1.0) * 0.5
    pdf = xp.exp(x * x * -0.5) * (1.0 / math.sqrt(2.0 * math.pi))
    return (g * (cdf + x * pdf),)


define("gelu", inputs=("x",), attrs={"approximate": Choice("none", ("none", "tanh"))}, dtype_rule=same("real_floating"),
       shape_rule=_eshape("gelu"), reference=_gelu_ref, vjp=_gelu_vjp, decomposition=_gelu, tolerance=_GELU_TOL,
       category="elementwise", doc="Gaussian error linear unit")


# --- binary primitives -----------------------------------------------------------------------
@partial_vjp
def _vjp_add(xp, g, i, o, needs=(True, True)):
    return (unbroadcast(xp, g, i[0].shape) if needs[0] else None,
            unbroadcast(xp, g, i[1].shape) if needs[1] else None)


@partial_vjp
def _vjp_mul(xp, g, i, o, needs=(True, True)):
    return (unbroadcast(xp, g * i[1], i[0].shape) if needs[0] else None,
            unbroadcast(xp, g * i[0], i[1].shape) if needs[1] else None)


@partial_vjp
def _vjp_div(xp, g, i, o, needs=(True, True)):
    return (unbroadcast(xp, g / i[1], i[0].shape) if needs[0] else None,
            unbroadcast(xp, -g * o / i[1], i[1].shape) if needs[1] else None)


def _vjp_pow(xp, g, i, o):
    x, y = i
    dx = g * y * xp.pow(x, y - 1.0)
    safe = xp.where(xp.greater(x, 0), x, xp.ones_like(x))
    dy = g * o * xp.where(xp.greater(x, 0), xp.log(safe), xp.zeros_like(x))
    return unbroadcast(xp, dx, x.shape), unbroadcast(xp, dy, y.shape)


def _vjp_select(pick_first):
    def vjp(xp, g, i, o):
        m = xp.astype(pick_first(xp, i[0], i[1]), g.dtype)
        return unbroadcast(xp, g * m, i[0].shape), unbroadcast(xp, g * (1.0 - m), i[1].shape)

    return vjp


def _vjp_rem(xp, g, i, o):
    return unbroadcast(xp, g, i[0].shape), unbroadcast(xp, -g * xp.floor_divide(i[0], i[1]), i[1].shape)


binary("add", np.add, vjp=_vjp_add, cat="numeric")
binary("multiply", np.multiply, vjp=_vjp_mul, cat="numeric")
binary("divide", np.divide, vjp=_vjp_div, cat="floating", domain="nonzero_divisor")
def _pow_ref(x1, x2):
    """x1 ** x2; for integers a negative exponent gives the truncated reciprocal of x1 ** -x2."""
    x1, x2 = np.broadcast_arrays(np.asarray(x1), np.asarray(x2))
    if x1.dtype.kind != "i":
        return np.power(x1, x2)
    neg = x2 < 0
    out = np.power(x1, np.where(neg, 0, x2).astype(x2.dtype))
    odd = (x2 % 2) != 0
    rec = np.where(x1 == 1, 1, np.where(x1 == -1, np.where(odd, -1, 1), 0)).astype(x1.dtype)
    return np.where(neg, rec, out)


binary("pow", _pow_ref, vjp=_vjp_pow, cat="numeric", domain="pow",
       doc="x1 ** x2. Integer x1 ** negative x2 is the truncated reciprocal of x1 ** -x2 on every device: "
           "1 for x1 == 1, 1 or -1 for x1 == -1 (even or odd x2), 0 otherwise (x1 == 0 included)")
binary("maximum", np.maximum, vjp=_vjp_select(lambda xp, a, b: xp.greater_equal(a, b)), cat="real")
binary("minimum", np.minimum, vjp=_vjp_select(lambda xp, a, b: xp.less_equal(a, b)), cat="real")
binary("remainder", np.remainder, vjp=_vjp_rem, cat="real", domain="nonzero_divisor")
binary("floor_divide", np.floor_divide, cat="real", diff=False, domain="nonzero_divisor")
binary("equal", np.equal, rule=to_bool, cat="all", diff=False)
binary("less", np.less, rule=to_bool, cat="real_or_bool", diff=False)
binary("bitwise_and", np.bitwise_and, cat="integral_or_bool", diff=False)
binary("bitwise_or", np.bitwise_or, cat="integral_or_bool", diff=False)
binary("bitwise_xor", np.bitwise_xor, cat="integral_or_bool", diff=False)
binary("bitwise_left_shift", np.left_shift, cat="integral", diff=False, domain="shift")
binary("bitwise_right_shift", np.right_shift, cat="integral", diff=False, domain="shift")

# --- binary composites -----------------------------------------------------------------------
binary("subtract", np.subtract, cat="numeric", vjp=lambda xp, g, i, o: (unbroadcast(xp, g, i[0].shape), unbroadcast(xp, -g, i[1].shape)),
       decomp=lambda xp, a, b: xp.add(a, xp.negative(b)))
binary("not_equal", np.not_equal, rule=to_bool, cat="all", diff=False,
       decomp=lambda xp, a, b: xp.logical_not(xp.equal(a, b)))
binary("greater", np.greater, rule=to_bool, cat="real_or_bool", diff=False, decomp=lambda xp, a, b: xp.less(b, a))
binary("less_equal", np.less_equal, rule=to_bool, cat="real_or_bool", diff=False,
       decomp=lambda xp, a, b: xp.logical_or(xp.less(a, b), xp.equal(a, b)))
binary("greater_equal", np.greater_equal, rule=to_bool, cat="real_or_bool", diff=False,
       decomp=lambda xp, a, b: xp.logical_or(xp.less(b, a), xp.equal(a, b)))
binary("logical_and", np.logical_and, cat="bool", diff=False, decomp=lambda xp, a, b: xp.bitwise_and(a, b))
binary("logical_or", np.logical_or, cat="bool", diff=False, decomp=lambda xp, a, b: xp.bitwise_or(a, b))
binary("logical_xor", np.logical_xor, cat="bool", diff=False, decomp=lambda xp, a, b: xp.bitwise_xor(a, b))
def _hypot(xp, a, b):
    """max·sqrt(1 + (min/max)²): no overflow for large inputs; inf wins over NaN (IEEE 754)."""
    ax, ay = xp.abs(a), xp.abs(b)
    hi, lo = xp.maximum(ax, ay), xp.minimum(ax, ay)
    r = lo / xp.where(xp.equal(hi, 0.0), xp.ones_like(hi), hi)
    out = hi * xp.sqrt(r * r + 1.0)
    return xp.where(xp.logical_or(xp.isinf(ax), xp.isinf(ay)), xp.full_like(out, math.inf), out)


binary("hypot", np.hypot, cat="real_floating", vjp=lambda xp, g, i, o: (unbroadcast(xp, g * i[0] / o, i[0].shape), unbroadcast(xp, g * i[1] / o, i[1].shape)),
       decomp=_hypot, domain="nonzero")
binary("logaddexp", np.logaddexp, cat="real_floating",
       decomp=lambda xp, a, b: _logaddexp(xp, a, b))


def _logaddexp(xp, a, b):
    m = xp.maximum(a, b)
    m = xp.where(xp.isinf(m), xp.zeros_like(m), m)
    return m + xp.log(xp.exp(a - m) + xp.exp(b - m))


# --- inverse trigonometric and hyperbolic functions, atan2, copysign, nextafter, signbit ----------
# The inverse functions are primitives: every backend has them natively (numpy, CuPy, OpenCL C
# builtins), complex ones with C99's branch cuts and special values; formulas through log and sqrt
# would lose both. 16-bit floats compute in float32 and round once.
def _one_minus_x_squared(xp, x):
    return (1.0 - x) * (x + 1.0)  # no cancellation near |x| = 1 (1 - x is exact there)


def _samples(name, extra=None, shift=None):
    """The default element-wise samples of op ``name``, real inputs moved by ``shift`` (acosh: into
    [1, inf)), plus ``extra(d)`` -> [(list of inputs, description)] where the op is delicate."""
    def gen(d, rng):
        from anydevice.ops import samples as _s  # conformance data: loaded when asked for
        from anydevice.ops.registry import get_op

        out = _s.elementwise(get_op(name), d, rng)
        if shift is not None and d.kind == "float":
            for s in out:
                if not s.desc.startswith("NaN"):
                    s.inputs = [shift(np.asarray(x)).astype(x.dtype) for x in s.inputs]
        for inputs, desc in (extra(d) if extra is not None and d.kind == "float" else ()):
            with np.errstate(over="ignore"):  # huge magnitudes are inf in the 16-bit floats
                out.append(_s.Sample([np.asarray(x, np.float64).astype(d.numpy) for x in inputs], {}, desc))
        return out

    return gen


def _near_one(d):
    return [([[1.0, -1.0, 0.999, -0.999, 0.99999, -0.99999, 0.5, -0.5, 1e-4, -1e-6]], "near ±1, ±0.5 and tiny")]


def _wide(*vals):
    return lambda d: [([list(vals)], "tiny, large and huge magnitudes")]


def _bad_kind(name, n, kind):
    """An input of a dtype outside the op's category: TypeError on every device."""
    x = np.ones(3, np.int32 if kind == "int" else np.complex64)
    allowed = "floating-point" if kind == "int" else "real floating-point"
    return [([x] * n, {}, TypeError, f"{name} of {x.dtype.name} input ({allowed} dtypes only)")]


def _inverse(name, ref, vjp, domain=None, extra=None, shift=None, doc=""):
    unary(name, ref, cat="floating", vjp=vjp, domain=domain, samples=_samples(name, extra, shift),
          errors=_bad_kind(name, 1, "int"), doc=doc)


_inverse("acos", np.arccos, lambda xp, g, i, o: (-g / xp.sqrt(_one_minus_x_squared(xp, i[0])),), "unit", _near_one,
         doc="the principal value of the inverse cosine, in [0, π] (complex: C99's branch cuts)")
_inverse("asin", np.arcsin, lambda xp, g, i, o: (g / xp.sqrt(_one_minus_x_squared(xp, i[0])),), "unit", _near_one,
         doc="the principal value of the inverse sine, in [-π/2, π/2]")
_inverse("atan", np.arctan, lambda xp, g, i, o: (g / (i[0] * i[0] + 1.0),), extra=_wide(1e-8, -1e-4, 1e10, -1e30),
         doc="the principal value of the inverse tangent, in [-π/2, π/2]")
_inverse("acosh", np.arccosh, lambda xp, g, i, o: (g / xp.sqrt((i[0] - 1.0) * (i[0] + 1.0)),), "positive",
         _wide(1.0, 1.0001, 1.5, 1e10, 1e30), shift=lambda x: np.abs(x) + 1.0,
         doc="the inverse hyperbolic cosine (real x >= 1)")
_inverse("asinh", np.arcsinh, lambda xp, g, i, o: (g / xp.sqrt(i[0] * i[0] + 1.0),),
         extra=_wide(1e-8, -1e-4, 0.5, 1e10, -1e30), doc="the inverse hyperbolic sine")
_inverse("atanh", np.arctanh, lambda xp, g, i, o: (g / _one_minus_x_squared(xp, i[0]),), "unit", _near_one,
         doc="the inverse hyperbolic tangent (real |x| <= 1)")


def _vjp_atan2(xp, g, i, o):
    y, x = i
    r2 = y * y + x * x
    return unbroadcast(xp, g * x / r2, y.shape), unbroadcast(xp, -g * y / r2, x.shape)


def _copysign(xp, x1, x2):
    m = xp.abs(x1)
    return xp.where(xp.signbit(x2), -m, m)


def _vjp_copysign(xp, g, i, o):
    x1, x2 = i
    flip = xp.logical_xor(xp.signbit(x1), xp.signbit(x2))  # the result is x1 or -x1
    return unbroadcast(xp, xp.where(flip, -g, g), x1.shape), unbroadcast(xp, xp.zeros_like(g * x2), x2.shape)


def _nextafter_ref(x1, x2, *, out_dtype):
    """The neighbour of x1 toward x2 among the values of the result dtype (float64 inputs here)."""
    a, b = np.asarray(x1).astype(out_dtype.numpy), np.asarray(x2).astype(out_dtype.numpy)
    return np.where(a == b, b, np.nextafter(a, b))  # x2 where equal (numpy's float16 gives x1: -0 for (-0, +0))


def _signed_nans(d):
    return [([[-math.nan, math.nan, -0.0, 0.0, -math.inf, math.inf, -1e-30, 1e-30]], "NaN of either sign, ±0, ±inf")]


_EXACT = {d: (0.0, 0.0) for d in ("float16", "bfloat16", "float32", "float64")}
binary("atan2", np.arctan2, cat="real_floating", vjp=_vjp_atan2, samples=_samples("atan2"),
       errors=_bad_kind("atan2", 2, "complex"),
       doc="the angle of the point (x2, x1) in radians, in [-π, π] (the quadrant from both signs)")
binary("copysign", np.copysign, cat="real_floating", vjp=_vjp_copysign, decomp=_copysign,
       samples=_samples("copysign"), errors=_bad_kind("copysign", 2, "complex"), tol=_EXACT,
       doc="|x1| with the sign bit of x2 (NaN's sign bit included)")
binary("nextafter", _nextafter_ref, cat="real_floating", diff=False, tol=_EXACT, samples=_samples("nextafter"),
       errors=_bad_kind("nextafter", 2, "complex"),
       doc="the next value of the result dtype after x1 in the direction of x2 (x2 itself where they are equal)")
unary("signbit", np.signbit, cat="real_floating", rule=to_bool, diff=False,
      samples=_samples("signbit", _signed_nans), errors=_bad_kind("signbit", 1, "complex"),
      doc="whether the sign bit is set (-0, negative numbers, NaN with the sign bit)")


# --- where / clip ------------------------------------------------------------------------------
def _where_rule(ds, attrs):
    if ds[0] is not _dt.bool_:
        raise TypeError(f"where(): condition must be bool, not {ds[0].name}")
    d = _dt.promote(ds[1], ds[2])
    return (_dt.bool_, d, d), d


_where_rule.category = "all"


@partial_vjp
def _vjp_where(xp, g, i, o, needs=(False, True, True)):
    c, x, y = i
    z = xp.zeros_like(g)
    return (None, unbroadcast(xp, xp.where(c, g, z), x.shape) if needs[1] else None,
            unbroadcast(xp, xp.where(c, z, g), y.shape) if needs[2] else None)


define("where", inputs=("condition", "x1", "x2"), dtype_rule=_where_rule, shape_rule=_eshape("where"),
       reference=np.where, vjp=_vjp_where, category="elementwise", doc="condition ? x1 : x2")


_clip_rule = same("real")  # the bounds are Python scalars that must fit x's dtype (the schema checks)
_BOUND = Optional(Scalar(None, fits="x"))


def _clip(xp, x, min=None, max=None):
    if min is not None:
        x = xp.maximum(x, min if isinstance(min, type(x)) else xp.full_like(x, min))
    if max is not None:
        x = xp.minimum(x, max if isinstance(max, type(x)) else xp.full_like(x, max))
    return x


def _clip_ref(x, min=None, max=None):
    if min is not None:
        x = np.maximum(x, min)
    if max is not None:
        x = np.minimum(x, max)
    return x


def _clip_vjp(xp, g, i, o, min=None, max=None):
    x = i[0]
    keep = xp.ones_like(x, dtype=_dt.bool_)
    if min is not None:
        keep = xp.logical_and(keep, xp.greater_equal(x, min))
    if max is not None:
        keep = xp.logical_and(keep, xp.less_equal(x, max))
    return (xp.where(keep, g, xp.zeros_like(g)),)


define("clip", inputs=("x",), attrs={"min": _BOUND, "max": _BOUND}, dtype_rule=_clip_rule, shape_rule=_eshape("clip"),
       reference=_clip_ref, vjp=_clip_vjp, decomposition=_clip, category="elementwise",
       doc="limit values to [min, max] (Python scalars as bounds)")
