"""OpenCL C for complex64 (``float2``) and complex128 (``double2``): the element-wise expressions
:mod:`codegen` merges into its table, and the functions they call.

A complex value is a 2-vector ``(re, im)``, stored interleaved like numpy's. Addition, negation
and rounding are the vector operations; the rest follow C99 Annex G and the Array API standard's
special cases: division by Smith's method with power-of-2 scaling of huge operands and ``abs``
by ``hypot`` (no spurious overflow or underflow: numpy's 3e38+3e38j / 3e38+3e38j is NaN, here 1), ``exp``/``sinh``/``cosh`` split into ``e^(|a|/2)`` twice where ``e^|a|`` alone would
overflow, and the non-finite inputs handled case by case. ``sin`` and ``cos`` are ``sinh`` and
``cosh`` of ``z * 1j`` (an exact rotation), as the standard defines them. ``pow`` is numpy's:
repeated squaring for small integer exponents, else ``exp(y log x)``. Contraction into fused
multiply-adds is off in these functions, so products round as numpy's do.

In the helpers ``C`` is the complex type, ``R`` its component type, ``BIG`` the largest
argument whose ``exp`` is finite (rounded down) and ``QUARTER`` a quarter of the largest value.
"""
from __future__ import annotations

#: op -> {dtype kind: expression}: ``{T}`` is the complex compute type, ``{C}`` the complex
#: type of a real compute type (make_complex)
COMPLEX_EXPR: dict[str, dict[str, str]] = {
    "copy": {"c": "x0"},
    "negative": {"c": "-x0"},
    "add": {"c": "x0 + x1"},
    "subtract": {"c": "x0 - x1"},
    "multiply": {"c": "cmul_{T}(x0, x1)"},
    "square": {"c": "cmul_{T}(x0, x0)"},
    "divide": {"c": "cdiv_{T}(x0, x1)"},
    "reciprocal": {"c": "cdiv_{T}(({T})(1, 0), x0)"},
    "pow": {"c": "cpow_{T}(x0, x1)"},
    "abs": {"c": "cabs_{T}(x0)"},
    "exp": {"c": "cexp_{T}(x0)"},
    "log": {"c": "clog_{T}(x0)"},
    "sqrt": {"c": "csqrt_{T}(x0)"},
    "sin": {"c": "csin_{T}(x0)"},
    "cos": {"c": "ccos_{T}(x0)"},
    "sinh": {"c": "csinh_{T}(x0)"},
    "cosh": {"c": "ccosh_{T}(x0)"},
    "round": {"c": "rint(x0)"},  # each component, half to even
    "real": {"c": "x0.x"},
    "imag": {"c": "x0.y"},
    "conj": {"c": "({T})(x0.x, -x0.y)"},
    "make_complex": {"f": "({C})(x0, x1)"},
    "isnan": {"c": "(isnan(x0.x) || isnan(x0.y))"},
    "isinf": {"c": "(isinf(x0.x) || isinf(x0.y))"},
    "isfinite": {"c": "(isfinite(x0.x) && isfinite(x0.y))"},
    "equal": {"c": "(x0.x == x1.x && x0.y == x1.y)"},
    "not_equal": {"c": "(x0.x != x1.x || x0.y != x1.y)"},
    "where": {"c": "(x0 ? x1 : x2)"},
}
#: ops whose result is the component dtype of their complex input
TO_REAL = frozenset({"abs", "real", "imag"})

COMPLEX_HELPERS = """
inline C cmul_C(C x, C y) {
  #pragma OPENCL FP_CONTRACT OFF
  return (C)(x.x * y.x - x.y * y.y, x.x * y.y + x.y * y.x); }
inline C cdiv_C(C x, C y) {
  #pragma OPENCL FP_CONTRACT OFF
  R k = 1;
  if (fmax(fabs(x.x), fabs(x.y)) > QUARTER) { x *= (R)0.25; k = 4; }
  if (fmax(fabs(y.x), fabs(y.y)) > QUARTER) { y *= (R)0.25; k *= (R)0.25; }
  R c = y.x, d = y.y, ac = fabs(c), ad = fabs(d);
  if (ac >= ad) {
    if (ac == 0 && ad == 0) return (C)(x.x / ac, x.y / ad);
    R t = d / c, s = c + d * t;
    return (C)((x.x + x.y * t) / s * k, (x.y - x.x * t) / s * k);
  }
  R t = c / d, s = d + c * t;
  return (C)((x.x * t + x.y) / s * k, (x.y * t - x.x) / s * k); }
inline R cabs_C(C z) { return (isinf(z.x) || isinf(z.y)) ? (R)INFINITY : hypot(z.x, z.y); }
inline C cexp_C(C z) {
  #pragma OPENCL FP_CONTRACT OFF
  R a = z.x, b = z.y;
  if (isnan(a)) return (C)(a, b == 0 ? b : (R)NAN);
  if (b == 0) return (C)(exp(a), b);
  if (isinf(a)) {
    if (!isfinite(b)) return a > 0 ? (C)(a, b - b) : (C)(0, isinf(b) ? copysign((R)0, b) : (R)0);
    R c = cos(b), s = sin(b);
    return a > 0 ? (C)(a * c, a * s) : (C)(copysign((R)0, c), copysign((R)0, s));
  }
  if (!isfinite(b)) return (C)(NAN, NAN);
  R c = cos(b), s = sin(b);
  if (a < BIG) { R e = exp(a); return (C)(e * c, e * s); }
  R h = exp(a * (R)0.5);
  return (C)((h * c) * h, (h * s) * h); }
inline C clog_C(C z) {
  #pragma OPENCL FP_CONTRACT OFF
  R a = z.x, b = z.y, im = atan2(b, a);
  if (isinf(a) || isinf(b)) return (C)(INFINITY, im);
  if (isnan(a) || isnan(b)) return (C)(NAN, NAN);
  R hi = fmax(fabs(a), fabs(b)), lo = fmin(fabs(a), fabs(b));
  if (hi >= (R)0.5 && hi <= (R)2) return (C)((R)0.5 * log1p((hi - 1) * (hi + 1) + lo * lo), im);
  if (hi == 0) return (C)(-INFINITY, im);
  R r = lo / hi;
  return (C)(log(hi) + (R)0.5 * log1p(r * r), im); }
inline C csqrt_C(C z) {
  #pragma OPENCL FP_CONTRACT OFF
  R a = z.x, b = z.y;
  if (isinf(b)) return (C)(INFINITY, b);
  if (isnan(a)) return (C)(a, a);
  if (isinf(a)) {
    if (isnan(b)) return a > 0 ? (C)(a, b) : (C)(b, INFINITY);
    return a > 0 ? (C)(a, copysign((R)0, b)) : (C)(0, copysign((R)INFINITY, b));
  }
  if (isnan(b)) return (C)(b, b);
  if (a == 0 && b == 0) return (C)(0, b);
  R s = 1;
  if (fabs(a) > QUARTER || fabs(b) > QUARTER) { a *= (R)0.25; b *= (R)0.25; s = 2; }
  else if (fabs(a) < TINY && fabs(b) < TINY) { a = ldexp(a, 2 * SHIFT); b = ldexp(b, 2 * SHIFT); s = ldexp((R)1, -SHIFT); }
  R t = sqrt((fabs(a) + hypot(a, b)) * (R)0.5);
  if (a >= 0) return (C)(t * s, b / (t * 2) * s);
  return (C)(fabs(b) / (t * 2) * s, copysign(t * s, b)); }
inline C csinh_C(C z) {
  #pragma OPENCL FP_CONTRACT OFF
  R a = z.x, b = z.y;
  if (isfinite(a) && isfinite(b)) {
    if (b == 0) return (C)(sinh(a), b);
    R c = cos(b), s = sin(b);
    if (fabs(a) < BIG) return (C)(sinh(a) * c, cosh(a) * s);
    R h = exp(fabs(a) * (R)0.5), k = copysign(h * (R)0.5, a);
    return (C)((k * c) * h, (h * (R)0.5 * s) * h);
  }
  if (a == 0) return (C)(a, b - b);
  if (b == 0) return (C)(a, b);
  if (isinf(a)) return isfinite(b) ? (C)(a * cos(b), (R)INFINITY * sin(b)) : (C)(INFINITY, b - b);
  return (C)(NAN, NAN); }
inline C ccosh_C(C z) {
  #pragma OPENCL FP_CONTRACT OFF
  R a = z.x, b = z.y;
  if (isfinite(a) && isfinite(b)) {
    if (b == 0) return (C)(cosh(a), copysign((R)0, a) * b);
    R c = cos(b), s = sin(b);
    if (fabs(a) < BIG) return (C)(cosh(a) * c, sinh(a) * s);
    R h = exp(fabs(a) * (R)0.5), k = copysign(h * (R)0.5, a);
    return (C)((h * (R)0.5 * c) * h, (k * s) * h);
  }
  if (a == 0) return (C)(b - b, 0);
  if (b == 0) return isnan(a) ? (C)(a, b) : (C)(fabs(a), copysign((R)0, a) * b);
  if (isinf(a)) return isfinite(b) ? (C)((R)INFINITY * cos(b), a * sin(b)) : (C)(INFINITY, b - b);
  return (C)(NAN, NAN); }
inline C csin_C(C z) { C w = csinh_C((C)(-z.y, z.x)); return (C)(w.y, -w.x); }
inline C ccos_C(C z) { return ccosh_C((C)(-z.y, z.x)); }
inline C cpow_C(C x, C y) {
  if (y.x == 0 && y.y == 0) return (C)(1, 0);
  if (x.x == 0 && x.y == 0) return (y.x > 0 && y.y == 0) ? (C)(0, 0) : (C)(NAN, NAN);
  if (y.y == 0 && y.x == rint(y.x) && fabs(y.x) < 100) {
    int n = (int)fabs(y.x), first = 1;
    C r = (C)(1, 0), p = x;
    while (n) {
      if (n & 1) { r = first ? p : cmul_C(r, p); first = 0; }
      n >>= 1;
      if (n) p = cmul_C(p, p);
    }
    return y.x < 0 ? cdiv_C((C)(1, 0), r) : r;
  }
  return cexp_C(cmul_C(y, clog_C(x))); }
"""
#: per complex type: R, BIG, QUARTER, TINY (below it csqrt scales up by 2^(2 SHIFT)), SHIFT
_CONSTANTS = {
    "float2": ("float", "88.0f", "8.5e37f", "1e-30f", "24"),
    "double2": ("double", "709.0", "4.4e307", "1e-300", "54"),
}


def complex_helpers(c: str) -> str:
    """:data:`COMPLEX_HELPERS` for complex type ``c`` (``float2`` or ``double2``)."""
    r, big, quarter, tiny, shift = _CONSTANTS[c]
    src = COMPLEX_HELPERS
    for k, v in (("QUARTER", quarter), ("BIG", big), ("TINY", tiny), ("SHIFT", shift)):
        src = src.replace(k, v)
    src = src.replace("_C(", f"_{c}(").replace("(C)", f"({c})").replace("C ", f"{c} ")
    return src.replace("(R)", f"({r})").replace("R ", f"{r} ")
