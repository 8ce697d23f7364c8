"""Linear algebra: matmul (composite, with a broadcast-multiply-sum decomposition that backends
override with a native kernel) and vecdot."""
from __future__ import annotations

import numpy as np

from anydevice.base.errors import AxisError
from anydevice.ops.registry import Int, broadcast_shapes, define, partial_vjp, same


def _mm_shape(shapes, attrs):
    a, b = shapes
    if not a or not b:
        raise ValueError(f"matmul(): 0-d operands are not allowed (shapes {a} and {b})")
    ka = a[-1]
    kb = b[0] if len(b) == 1 else b[-2]
    if ka != kb:
        raise ValueError(f"matmul(): inner dimensions differ: {a} @ {b} ({ka} != {kb})")
    batch = broadcast_shapes(a[:-2], b[:-2], opname="matmul") if len(a) > 1 and len(b) > 1 else (a[:-2] if len(b) == 1 else b[:-2])
    out = tuple(batch)
    if len(a) > 1:
        out += (a[-2],)
    if len(b) > 1:
        out += (b[-1],)
    return out


def _matmul(xp, a, b):
    a2 = xp.expand_dims(a, axis=0) if a.ndim == 1 else a
    b2 = xp.expand_dims(b, axis=1) if b.ndim == 1 else b
    prod = xp.expand_dims(a2, axis=-1) * xp.expand_dims(b2, axis=-3)  # (..., m, k, n)
    out = xp.sum(prod, axis=-2, dtype=prod.dtype)  # integers keep their dtype (sum would widen to int64)
    if a.ndim == 1:
        out = xp.squeeze(out, axis=-2)
    if b.ndim == 1:
        out = xp.squeeze(out, axis=-1)
    return out


@partial_vjp
def _vjp_matmul(xp, g, i, o, needs=(True, True)):
    from anydevice.ops.elementwise import unbroadcast

    a, b = i
    a2 = xp.expand_dims(a, axis=0) if a.ndim == 1 else a
    b2 = xp.expand_dims(b, axis=1) if b.ndim == 1 else b
    g2 = g
    if a.ndim == 1:
        g2 = xp.expand_dims(g2, axis=-2)
    if b.ndim == 1:
        g2 = xp.expand_dims(g2, axis=-1)
    ga = gb = None
    if needs[0]:
        ga = xp.matmul(g2, xp.matrix_transpose(b2))
        ga = unbroadcast(xp, xp.squeeze(ga, axis=-2) if a.ndim == 1 else ga, a.shape)
    if needs[1]:
        gb = xp.matmul(xp.matrix_transpose(a2), g2)
        gb = unbroadcast(xp, xp.squeeze(gb, axis=-1) if b.ndim == 1 else gb, b.shape)
    return ga, gb


def _flops(shapes, attrs):
    a, b = shapes
    out = _mm_shape(shapes, attrs)
    n = 1
    for s in out:
        n *= s
    return 2.0 * n * a[-1]


define("matmul", inputs=("x1", "x2"), dtype_rule=same("numeric"), shape_rule=_mm_shape,
       reference=lambda a, b: np.matmul(a, b), vjp=_vjp_matmul, decomposition=_matmul, category="linalg",
       flops=_flops, tolerance={"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2)},
       doc="matrix product with Array API broadcasting and 1-D promotion")


def _vecdot_shape(shapes, attrs):
    """The contracted axis counts from the end (Array API: in [-N, -1] for N = min(x1.ndim, x2.ndim));
    both inputs must have it, with one size (it is not broadcast); the other axes broadcast."""
    a, b = shapes
    axis, n = attrs["axis"], min(len(a), len(b))
    if not -n <= axis < 0:
        raise AxisError(f"vecdot(): axis {axis} is not allowed for inputs of shapes {a} and {b} (allowed: "
                        f"{-n}..-1 when both have dimensions; the axis counts from the last dimension)"
                        if n else f"vecdot(): 0-d inputs {a} and {b} have no axis to contract")
    if a[axis] != b[axis]:
        raise ValueError(f"vecdot(): axis {axis} has different sizes in {a} and {b} ({a[axis]} != {b[axis]}); "
                         f"the contracted axis is not broadcast")
    s = broadcast_shapes(a[:len(a) + axis] + a[len(a) + axis + 1:], b[:len(b) + axis] + b[len(b) + axis + 1:],
                         opname="vecdot")
    return s


def _vecdot(xp, a, b, axis=-1):
    if a.dtype.kind == "complex":
        a = xp.conj(a)
    return xp.sum(a * b, axis=axis, dtype=a.dtype)


define("vecdot", positional=0, inputs=("x1", "x2"), attrs={"axis": Int(-1)}, dtype_rule=same("numeric"), shape_rule=_vecdot_shape,
       reference=lambda a, b, axis=-1: np.sum(np.conj(a) * b, axis=axis), doc="dot products of vectors along axis "
       "(counted from the end): sum(conj(x1) * x2), the other axes broadcast",
       decomposition=_vecdot, category="linalg",
       errors=[([np.ones((3, 2), np.float32), np.ones((3, 2), np.float32)], {"axis": 0}, ValueError, "a non-negative axis"),
               ([np.ones((2, 3), np.float32), np.ones((2, 1), np.float32)], {}, ValueError, "the contracted axis broadcast")],
       tolerance={"float32": (1e-5, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2)})  # half: a dot product, like matmul
