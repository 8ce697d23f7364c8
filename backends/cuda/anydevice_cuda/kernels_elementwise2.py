"""CuPy kernels of the inverse trigonometric and hyperbolic functions, atan2, copysign, nextafter
and signbit, mirroring the cpu backend's numpy ones.

The transcendental ones run 16-bit floats in float32 (``"half"``); copysign, nextafter and
signbit stay in the dtype (``"native"``). float16 and bfloat16 take them on their bit patterns,
which needs no 16-bit arithmetic from CuPy and keeps NaN's sign bit. :func:`table` builds them
over the CuPy module it is given (the cuda kernels' own, which tests replace with a numpy stand-in).
"""
from __future__ import annotations

import numpy as np

_F32 = np.dtype(np.float32)


def table(cp) -> dict:
    """op name -> (function, how): "half" computes 16-bit floats in float32, "native" in the dtype."""

    def _bits16(x):
        """The uint16 pattern of a 16-bit float (float16, bfloat16), else None."""
        return x.view(cp.uint16) if x.dtype.itemsize == 2 else None

    def _copysign(a, b):
        ua, ub = _bits16(a), _bits16(b)
        if ua is None or ub is None:
            return cp.copysign(a, b)
        return ((ua & 0x7FFF) | (ub & 0x8000)).astype(cp.uint16).view(a.dtype)

    def _signbit(x):
        u = _bits16(x)
        return cp.signbit(x) if u is None else (u >> 15).astype(cp.bool_)

    def _nextafter(a, b):
        """x2 where x1 == x2, else the neighbour of x1 toward x2: 16-bit floats step their pattern by
        one (toward or away from 0) in integers."""
        a, b = cp.broadcast_arrays(a, b)
        ua, ub = _bits16(a), _bits16(b)
        if ua is None:
            return cp.where(a == b, b, cp.nextafter(a, b))
        fa, fb = a.astype(_F32), b.astype(_F32)  # exact
        step = cp.where((fb > fa) == (fa > 0), 1, -1)
        moved = ua.astype(cp.int32) + step
        smallest = cp.where(fb > 0, 0x0001, 0x8001)  # ±(smallest subnormal) away from ±0
        bits = cp.where(fa == 0, smallest, moved)
        bits = cp.where(fa == fb, ub.astype(cp.int32), bits)
        bits = cp.where(cp.isnan(fa) | cp.isnan(fb), 0x7FC0, bits)  # NaN
        return bits.astype(cp.uint16).view(a.dtype)

    return {
        "acos": (cp.arccos, "half"), "asin": (cp.arcsin, "half"), "atan": (cp.arctan, "half"),
        "acosh": (cp.arccosh, "half"), "asinh": (cp.arcsinh, "half"), "atanh": (cp.arctanh, "half"),
        "atan2": (cp.arctan2, "half"), "copysign": (_copysign, "native"), "nextafter": (_nextafter, "native"),
        "signbit": (_signbit, "native"),
    }
