"""numpy kernels of the inverse trigonometric and hyperbolic functions, atan2, copysign,
nextafter and signbit (the Array API's element-wise functions beyond the core set).

The transcendental ones compute float16 and bfloat16 in float32 and round once, as the other
cpu kernels do; copysign, nextafter and signbit work on the dtype itself (they are exact, and
nextafter's neighbour is one of the dtype's own values).
"""
from __future__ import annotations

import numpy as np


def _nextafter(a, b):
    """numpy's nextafter, but x2 where x1 == x2 (numpy's float16 loop returns x1: -0 for (-0, +0))."""
    return np.where(a == b, b, np.nextafter(a, b))


#: op name -> (numpy function, wrapper): "half" computes 16-bit floats in float32, "plain" as they are
TABLE = {
    "acos": (np.arccos, "half"), "asin": (np.arcsin, "half"), "atan": (np.arctan, "half"),
    "acosh": (np.arccosh, "half"), "asinh": (np.arcsinh, "half"), "atanh": (np.arctanh, "half"),
    "atan2": (np.arctan2, "half"), "copysign": (np.copysign, "plain"), "nextafter": (_nextafter, "plain"),
    "signbit": (np.signbit, "plain"),
}


def register(kernels, wrap) -> None:
    """Register :data:`TABLE` with the cpu backend's wrappers ``wrap`` (name -> wrapper)."""
    for name, (fn, how) in TABLE.items():
        kernels.register(name, wrap[how](fn))
