"""Element-wise ops, generated from small tables (name → rules).

References run on float64 (complex128) host arrays for floating inputs and on the exact
integer dtype otherwise; they are the oracle and share no code with any kernel.
"""
from __future__ import annotations

import math

import numpy as np

from anydevice.base import dtypes as _dt
from anydevice.ops.registry import Choice, Optional, Scalar, define, elementwise_shape, same, to_bool, to_real


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


def unary(name, ref, vjp=None, decomp=None, cat="numeric", rule=None, domain=None, tol=None, diff=True, doc=""):
    return define(
        name, inputs=("x",), dtype_rule=(rule or same)(cat), shape_rule=_eshape(name), reference=ref, vjp=vjp,
        decomposition=decomp, category="elementwise", domain=domain, tolerance=tol, differentiable=diff, doc=doc,
    )


def binary(name, ref, vjp=None, decomp=None, cat="numeric", rule=None, domain=None, tol=None, diff=True, doc=""):
    return define(
        name, inputs=("x1", "x2"), dtype_rule=(rule or same)(cat), shape_rule=_eshape(name), reference=ref,
        vjp=vjp, decomposition=decomp, category="elementwise", domain=domain, tolerance=tol, differentiable=diff,
        doc=doc,
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

# --- unary composites ------------------------------------------------------------------------
unary("positive", np.positive, vjp=lambda xp, g, i, o: (g,), decomp=lambda xp, x: x)
unary("square", np.square, vjp=lambda xp, g, i, o: (g * i[0] * 2.0,), decomp=lambda xp, x: xp.multiply(x, x))
unary("ceil", np.ceil, cat="real", vjp=lambda xp, g, i, o: (xp.zeros_like(g),),
      decomp=lambda xp, x: xp.negative(xp.floor(xp.negative(x))) if x.dtype.kind == "float" else x)
unary("trunc", np.trunc, cat="real", vjp=lambda xp, g, i, o: (xp.zeros_like(g),),
      decomp=lambda xp, x: xp.where(xp.less(x, 0), xp.ceil(x), xp.floor(x)) if x.dtype.kind == "float" else x)
unary("expm1", np.expm1, cat="floating", vjp=lambda xp, g, i, o: (g * (o + 1.0),),
      decomp=lambda xp, x: xp.subtract(xp.exp(x), 1.0), domain="exp")
unary("log1p", np.log1p, cat="floating", vjp=lambda xp, g, i, o: (g / (i[0] + 1.0),),
      decomp=lambda xp, x: xp.log(xp.add(x, 1.0)), domain="positive")
unary("log2", np.log2, cat="floating", vjp=lambda xp, g, i, o: (g / (i[0] * math.log(2.0)),),
      decomp=lambda xp, x: xp.multiply(xp.log(x), 1.0 / math.log(2.0)), domain="positive")
unary("log10", np.log10, cat="floating", vjp=lambda xp, g, i, o: (g / (i[0] * math.log(10.0)),),
      decomp=lambda xp, x: xp.multiply(xp.log(x), 1.0 / math.log(10.0)), domain="positive")
unary("tan", np.tan, cat="floating", vjp=lambda xp, g, i, o: (g * (o * o + 1.0),),
      decomp=lambda xp, x: xp.divide(xp.sin(x), xp.cos(x)), domain="unit")
unary("sinh", np.sinh, cat="floating", vjp=lambda xp, g, i, o: (g * xp.cosh(i[0]),),
      decomp=lambda xp, x: (xp.exp(x) - xp.exp(-x)) * 0.5, domain="exp")
unary("cosh", np.cosh, cat="floating", vjp=lambda xp, g, i, o: (g * xp.sinh(i[0]),),
      decomp=lambda xp, x: (xp.exp(x) + xp.exp(-x)) * 0.5, domain="exp")
unary("tanh", np.tanh, cat="floating", vjp=lambda xp, g, i, o: (g * (1.0 - o * o),),
      decomp=lambda xp, x: 1.0 - 2.0 / (xp.exp(x * 2.0) + 1.0))
unary("reciprocal", np.reciprocal, cat="floating", vjp=lambda xp, g, i, o: (-g * o * o,),
      decomp=lambda xp, x: xp.divide(1.0, x), domain="nonzero")
unary("sign", np.sign, vjp=lambda xp, g, i, o: (xp.zeros_like(g),),
      decomp=lambda xp, x: _sign(xp, x))
unary("isnan", np.isnan, rule=to_bool, diff=False, decomp=lambda xp, x: xp.not_equal(x, x))
unary("isinf", np.isinf, rule=to_bool, diff=False,
      decomp=lambda xp, x: xp.equal(xp.abs(x), math.inf) if x.dtype.kind in ("float", "complex") else xp.zeros_like(x, dtype=_dt.bool_))
unary("isfinite", np.isfinite, rule=to_bool, diff=False,
      decomp=lambda xp, x: xp.logical_not(xp.logical_or(xp.isnan(x), xp.isinf(x))))
unary("logical_not", np.logical_not, cat="bool", diff=False, decomp=lambda xp, x: xp.equal(x, False))
unary("bitwise_invert", np.invert, cat="integral_or_bool", diff=False,
      decomp=lambda xp, x: xp.logical_not(x) if x.dtype is _dt.bool_ else xp.bitwise_xor(x, xp.full_like(x, -1) if x.dtype.kind == "int" else xp.full_like(x, (1 << (8 * x.dtype.itemsize)) - 1)))


def _sign(xp, x):
    if x.dtype.kind == "uint":
        return xp.astype(xp.greater(x, 0), x.dtype)
    if x.dtype.kind == "complex":  # x / |x| (comparisons are real-only)
        return xp.where(xp.equal(x, 0), x, x / xp.abs(x))
    one, zero = xp.ones_like(x), xp.zeros_like(x)
    s = xp.where(xp.greater(x, 0), one, xp.where(xp.less(x, 0), -one, zero))
    if x.dtype.kind == "float":
        s = xp.where(xp.isnan(x), x, s)
    return s


# --- activations (element-wise) --------------------------------------------------------------
unary("relu", lambda x: np.maximum(x, 0), cat="real", vjp=lambda xp, g, i, o: (g * xp.astype(xp.greater(i[0], 0), g.dtype),),
      decomp=lambda xp, x: xp.maximum(x, xp.zeros_like(x)))
unary("sigmoid", lambda x: 1.0 / (1.0 + np.exp(-x)), cat="real_floating", vjp=lambda xp, g, i, o: (g * o * (1.0 - o),),
      decomp=lambda xp, x: 1.0 / (xp.exp(-x) + 1.0))


def _gelu_ref(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def _gelu(xp, x, approximate="none"):
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
        return x * 0.5 * (xp.tanh(inner) + 1.0)
    return x * 0.5 * (xp.erf(x * (1.0 / math.sqrt(2.0))) + 1.0)


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
       shape_rule=_eshape("gelu"), reference=_gelu_ref, vjp=_gelu_vjp, decomposition=_gelu,
       category="elementwise", doc="Gaussian error linear unit")


# --- binary primitives -----------------------------------------------------------------------
def _vjp_add(xp, g, i, o):
    return unbroadcast(xp, g, i[0].shape), unbroadcast(xp, g, i[1].shape)


def _vjp_mul(xp, g, i, o):
    return unbroadcast(xp, g * i[1], i[0].shape), unbroadcast(xp, g * i[0], i[1].shape)


def _vjp_div(xp, g, i, o):
    return unbroadcast(xp, g / i[1], i[0].shape), unbroadcast(xp, -g * o / i[1], i[1].shape)


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


# --- where / clip ------------------------------------------------------------------------------
def _where_rule(ds, attrs):
    if ds[0] is not _dt.bool_:
        raise TypeError(f"where(): condition must be bool, not {ds[0].name}")
    d = _dt.promote(ds[1], ds[2])
    return (_dt.bool_, d, d), d


_where_rule.category = "all"


def _vjp_where(xp, g, i, o):
    c, x, y = i
    z = xp.zeros_like(g)
    return None, unbroadcast(xp, xp.where(c, g, z), x.shape), unbroadcast(xp, xp.where(c, z, g), y.shape)


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
