"""Comparison tolerances: ``|actual - expected| <= atol + rtol * |expected|``, NaN matches NaN.

Defaults are torch.testing's (see docs/CONFORMANCE.md). An op overrides them for a dtype with
``tolerance={"float32": (rtol, atol)}`` in its ``define()`` call, next to the reason.
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


def for_op(op, dtype_name: str, out_name: str | None = None):
    """(rtol, atol) for ``op`` at ``dtype_name`` (override first), or None when exact."""
    for name in (dtype_name, out_name):
        if name and name in op.tolerance:
            return tuple(op.tolerance[name])
    name = out_name or dtype_name
    return DEFAULT.get(name)


def compare(actual: np.ndarray, expected: np.ndarray, tol) -> tuple:
    """Compare two host arrays of one shape.

    Returns ``(ok, max_abs_err, max_rel_err, n_bad, first_bad_index)``; errors are over
    elements where both sides are finite. ``tol`` None means exact equality.
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
        wide = np.complex128 if "c" in (a.dtype.kind, e.dtype.kind) else np.float64
        a, e = a.astype(wide), e.astype(wide)
        with np.errstate(all="ignore"):
            both_nan = np.isnan(a) & np.isnan(e)
            equal = a == e  # also equal infinities
            errs = np.abs(a - e)
            close = errs <= atol + rtol * np.abs(e)
        bad = ~(both_nan | equal | close)
        finite = np.isfinite(a) & np.isfinite(e)
    fe = np.where(finite, errs, 0.0)
    max_abs = float(fe.max()) if fe.size else 0.0
    with np.errstate(all="ignore"):
        rel = np.where(finite & (np.abs(e) > 0), fe / np.abs(e), np.where(fe > 0, np.inf, 0.0))
    max_rel = float(rel.max()) if rel.size else 0.0
    n_bad = int(bad.sum())
    first = tuple(int(i) for i in np.argwhere(bad)[0]) if n_bad else None
    return n_bad == 0, max_abs, max_rel, n_bad, first
