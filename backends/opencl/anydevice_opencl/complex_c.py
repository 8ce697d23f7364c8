"""OpenCL C for complex64 (``float2``) and complex128 (``double2``): the element-wise expressions
:mod:`codegen` merges into its table, and the functions they call.

A complex value is a 2-vector ``(re, im)``, stored interleaved like numpy's. Addition, negation
and rounding are the vector operations; the rest follow C99 Annex G and the Array API standard's
special cases: division by Smith's method with power-of-2 scaling of huge operands and ``abs``
by ``hypot`` (no spurious overflow or underflow: numpy's 3e38+3e38j / 3e38+3e38j is NaN, here 1), ``exp``/``sinh``/``cosh`` split into ``e^(|a|/2)`` twice where ``e^|a|`` alone would
overflow, and the non-finite inputs handled case by case. ``sin`` and ``cos`` are ``sinh`` and
``cosh`` of ``z * 1j`` (an exact rotation), as the standard defines them. ``pow`` is numpy's:
repeated squaring for small integer exponents, else ``exp(y log x)``. Contraction into fused
multiply-adds is off in these functions, so products round as written. The inverse functions
(acos, asin, atan and their hyperbolic twins) use Kahan's formulas through ``csqrt`` (acos, asinh;
asin, acosh and atan, atanh by exact rotations and conjugations), which keep the branch cuts'
signed zeros and full accuracy, with the asymptotic ``log(2z)`` and ``1/z`` for huge ``|z|``.

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
    "acos": {"c": "cacos_{T}(x0)"}, "asin": {"c": "casin_{T}(x0)"}, "atan": {"c": "catan_{T}(x0)"},
    "acosh": {"c": "cacosh_{T}(x0)"}, "asinh": {"c": "casinh_{T}(x0)"}, "atanh": {"c": "catanh_{T}(x0)"},
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
inline C csin_C(C z) {  /* NaN + inf j for an infinite b and a non-finite a (the sign is open; glibc's) */
  if (isinf(z.y) && !isfinite(z.x)) return (C)(NAN, INFINITY);
  C w = csinh_C((C)(-z.y, z.x)); return (C)(w.y, -w.x); }
inline C ccos_C(C z) { return ccosh_C((C)(-z.y, z.x)); }
inline C cpow_C(C x, C y) {
  if (y.x == 0 && y.y == 0) return (C)(1, 0);
  if (x.x == 0 && x.y == 0) return y.x > 0 ? (C)(0, 0) : (C)(NAN, NAN);  /* numpy: 0 for a positive real part */
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
inline C casinh_C(C z) {
  #pragma OPENCL FP_CONTRACT OFF
  R a = fabs(z.x), b = fabs(z.y), re, im;
  if (!isfinite(a) || !isfinite(b)) {
    if (isinf(a)) { re = a; im = isnan(b) ? b : isinf(b) ? K_PI4 : 0; }
    else if (isinf(b)) { re = b; im = isnan(a) ? a : K_PI2; }
    else if (isnan(a)) { re = a; im = b == 0 ? b : (R)NAN; }
    else { re = NAN; im = NAN; }
  } else if (fmax(a, b) > K_ZLARGE) {  /* log(2z), first quadrant */
    C l = clog_C((C)(a, b)); re = l.x + K_LN2; im = l.y;
  } else {  /* -1j asin(1j z), asin(w) by Kahan: atan2(re w, re(s1 s2)) + asinh(im(conj(s1) s2)) j */
    C s1 = csqrt_C((C)(1 + b, -a)), s2 = csqrt_C((C)(1 - b, a));
    re = asinh(s1.x * s2.y - s1.y * s2.x);
    im = -atan2(-b, s1.x * s2.x - s1.y * s2.y);
  }
  return (C)(copysign(re, z.x), copysign(im, z.y)); }
inline C cacos_C(C z) {
  #pragma OPENCL FP_CONTRACT OFF
  R a = z.x, b = fabs(z.y), re, im;  /* for b >= 0 (im <= 0); conj(z) gives the conjugate */
  if (!isfinite(a) || !isfinite(b)) {
    im = INFINITY;
    if (isinf(a)) re = isnan(b) ? b : isinf(b) ? (a > 0 ? K_PI4 : K_3PI4) : (a > 0 ? 0 : K_PI);
    else if (isinf(b)) re = isnan(a) ? a : K_PI2;
    else { re = isnan(a) || a != 0 ? (R)NAN : K_PI2; im = NAN; }
  } else if (fmax(fabs(a), b) > K_ZLARGE) {
    C l = clog_C((C)(a, b)); re = atan2(b, a); im = l.x + K_LN2;
  } else {  /* Kahan: 2 atan2(re s1, re s2) - asinh(im(conj(s2) s1)) j, s1 = sqrt(1 - z), s2 = sqrt(1 + z) */
    C s1 = csqrt_C((C)(1 - a, -b)), s2 = csqrt_C((C)(1 + a, b));
    re = 2 * atan2(s1.x, s2.x);
    im = -asinh(s2.x * s1.y - s2.y * s1.x);
  }
  return (C)(re, copysign(im, -z.y)); }
inline C cacosh_C(C z) { C w = cacos_C(z); return signbit(w.y) ? (C)(-w.y, w.x) : (C)(w.y, -w.x); }
inline C catanh_C(C z) {
  #pragma OPENCL FP_CONTRACT OFF
  R a = fabs(z.x), b = fabs(z.y), re, im;
  if (!isfinite(a) || !isfinite(b)) {
    if (isinf(b)) { re = 0; im = K_PI2; }
    else if (isinf(a)) { re = 0; im = isnan(b) ? b : K_PI2; }
    else if (a == 0) { re = a; im = b; }
    else { re = NAN; im = NAN; }
  } else if (fmax(a, b) > K_ZLARGE) {  /* 1/z + pi/2 j */
    re = cdiv_C((C)(1, 0), (C)(a, b)).x; im = K_PI2;
  } else {
    re = (R)0.25 * log1p(4 * a / ((1 - a) * (1 - a) + b * b));
    im = (R)0.5 * atan2(2 * b, (1 - a) * (1 + a) - b * b);
  }
  return (C)(copysign(re, z.x), copysign(im, z.y)); }
inline C casin_C(C z) { C w = casinh_C((C)(-z.y, z.x)); return (C)(w.y, -w.x); }
inline C catan_C(C z) { C w = catanh_C((C)(-z.y, z.x)); return (C)(w.y, -w.x); }
"""
#: per complex type: R, BIG, QUARTER, TINY (below it csqrt scales up by 2^(2 SHIFT)), SHIFT, and
#: K_ZLARGE, beyond which the inverse functions take their asymptotic forms (log(2z), 1/z: exact
#: to 1/|z|^2, below the rounding, and Kahan's products would overflow near the largest values)
_CONSTANTS = {
    "float2": ("float", "88.0f", "8.5e37f", "1e-30f", "24", "1e6f"),
    "double2": ("double", "709.0", "4.4e307", "1e-300", "54", "1e10"),
}
_PI = {"K_PI": "3.14159265358979323846", "K_PI2": "1.57079632679489661923", "K_PI4": "0.78539816339744830962",
       "K_3PI4": "2.35619449019234492885", "K_LN2": "0.69314718055994530942"}


def complex_helpers(c: str) -> str:
    """:data:`COMPLEX_HELPERS` for complex type ``c`` (``float2`` or ``double2``)."""
    r, big, quarter, tiny, shift, large = _CONSTANTS[c]
    f = "f" if r == "float" else ""
    src = COMPLEX_HELPERS
    names = {"QUARTER": quarter, "BIG": big, "TINY": tiny, "SHIFT": shift, "K_ZLARGE": large,
             **{k: f"(R){v}{f}" for k, v in _PI.items()}}
    for k in sorted(names, key=len, reverse=True):  # K_PI4 before K_PI
        src = src.replace(k, names[k])
    src = src.replace("_C(", f"_{c}(").replace("(C)", f"({c})").replace("C ", f"{c} ")
    return src.replace("(R)", f"({r})").replace("R ", f"{r} ")
