"""Comparison tolerances: ``|actual - expected| <= atol + rtol * |expected|``, NaN matches NaN.

Defaults are torch.testing's (see docs/CONFORMANCE.md). An op overrides them for a dtype with
``tolerance={"float32": (rtol, atol)}`` in its ``define()`` call, next to the reason.

Element-wise ops are compared relatively all the way down: their absolute tolerance is the
dtype's smallest normal number (:data:`TINY`), so expm1(1e-8) must be 1e-8 to ``rtol`` and not
merely within 1e-5 of it, while a subnormal result may still flush to zero. Where the reference
of an element-wise op is ±0, the sign bit must match too (except for :data:`UNSIGNED_ZERO`).
Complex values are compared component by component (NaN, infinities and equal parts exactly,
finite parts within ``atol + rtol * |expected|``), so NaN + 0j does not pass for NaN + NaN j.
"""
from __future__ import annotations

import numpy as np

#: dtype name -> (rtol, atol) of forward results; integers and bool compare exactly.
DEFAULT = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
    "complex64": (1.3e-6, 1e-5),
    "complex128": (1e-7, 1e-7),
}

#: dtype name -> (rtol, atol) of gradients against central finite differences of the
#: float64 reference. The device computes the VJP in the dtype itself, through several ops.
GRAD = {
    "float32": (1e-3, 1e-4),
    "float64": (1e-5, 1e-6),
}

EXACT_KINDS = ("b", "i", "u")

#: dtype name -> the smallest normal number: the absolute tolerance of element-wise ops.
TINY = {"float16": 6.103515625e-05, "bfloat16": 1.1754943508222875e-38, "float32": 1.1754943508222875e-38,
        "float64": 2.2250738585072014e-308, "complex64": 1.1754943508222875e-38,
        "complex128": 2.2250738585072014e-308}

#: Element-wise ops whose sign of a zero result the standard leaves open (choosing between -0 and
#: +0 as the maximum; sign(±0) "is 0"), with relu and clip, which select like maximum and minimum.
UNSIGNED_ZERO = frozenset({"maximum", "minimum", "clip", "relu", "sign"})


def for_op(op, dtype_name: str, out_name: str | None = None):
    """(rtol, atol) for ``op`` at ``dtype_name`` (override first), or None when exact."""
    for name in (dtype_name, out_name):
        if name and name in op.tolerance:
            return tuple(op.tolerance[name])
    name = out_name or dtype_name
    tol = DEFAULT.get(name)
    if tol is not None and op.category == "elementwise":
        return tol[0], TINY[name]
    return tol


def signed_zeros(op, out_dtype) -> bool:
    """Whether ``op``'s ±0 results must carry the reference's sign (real floating element-wise ops)."""
    return op.category == "elementwise" and op.name not in UNSIGNED_ZERO and getattr(out_dtype, "kind", "") == "float"


def compare(actual: np.ndarray, expected: np.ndarray, tol, signed: bool = False) -> tuple:
    """Compare two host arrays of one shape.

    Returns ``(ok, max_abs_err, max_rel_err, n_bad, first_bad_index)``; errors are over
    elements where both sides are finite. ``tol`` None means exact equality; ``signed`` also
    requires the sign bit of the reference's zeros.
    """
    a, e = np.asarray(actual), np.asarray(expected)
    if a.size == 0:
        return True, 0.0, 0.0, 0, None
    if tol is None or (a.dtype.kind in EXACT_KINDS and e.dtype.kind in EXACT_KINDS):
        bad = a != e
        errs = np.abs(a.astype(np.float64) - e.astype(np.float64)) if a.dtype.kind != "b" else bad.astype(np.float64)
        finite = np.ones(a.shape, bool)
    else:
        rtol, atol = tol
        cplx = "c" in (a.dtype.kind, e.dtype.kind)
        a, e = a.astype(np.complex128 if cplx else np.float64), e.astype(np.complex128 if cplx else np.float64)
        with np.errstate(all="ignore"):
            if cplx:  # each part on its own; the bound scales with the expected modulus of the finite parts
                parts = [(a.real, e.real), (a.imag, e.imag)]
                scale = np.hypot(np.where(np.isfinite(e.real), e.real, 0.0), np.where(np.isfinite(e.imag), e.imag, 0.0))
            else:
                parts, scale = [(a, e)], np.abs(e)
            good = np.ones(a.shape, bool)
            for pa, pe in parts:
                good &= (np.isnan(pa) & np.isnan(pe)) | (pa == pe) | (np.abs(pa - pe) <= atol + rtol * scale)
            errs = np.abs(a - e)
        bad = ~good
        if signed and not cplx:
            bad |= (e == 0) & (np.signbit(a) != np.signbit(e))
        finite = np.isfinite(a) & np.isfinite(e)
    fe = np.where(finite, errs, 0.0)
    max_abs = float(fe.max()) if fe.size else 0.0
    with np.errstate(all="ignore"):
        rel = np.where(finite & (np.abs(e) > 0), fe / np.abs(e), np.where(fe > 0, np.inf, 0.0))
    max_rel = float(rel.max()) if rel.size else 0.0
    n_bad = int(bad.sum())
    first = tuple(int(i) for i in np.argwhere(bad)[0]) if n_bad else None
    return n_bad == 0, max_abs, max_rel, n_bad, first
