"""Array kernels of the sorting, searching, scan and set ops (``anydevice.ops.searching``),
written once over an array module: numpy here, CuPy in anydevice-cuda (``array_kernels(cp)``).

Returning convention ``fn(*inputs, **attrs) -> array`` (a tuple for multi-output ops); the
backend wraps each one for its context. float16 and bfloat16 sort and search as float32
(exact); their scans accumulate in float32 and round once, as the decompositions do.
"""
from __future__ import annotations

import numpy as np


def _wide(x):
    return x.astype(np.float32) if x.dtype.kind == "f" and x.dtype.itemsize == 2 or x.dtype.name == "bfloat16" else x


def _bcast(shape_a, shape_b, axis):
    """The shapes of ``a`` and ``b`` broadcast together except along ``axis`` (each keeps its own)."""
    s = np.broadcast_shapes(shape_a[:axis] + (1,) + shape_a[axis + 1:], shape_b[:axis] + (1,) + shape_b[axis + 1:])
    return s[:axis] + (shape_a[axis],) + s[axis + 1:], s[:axis] + (shape_b[axis],) + s[axis + 1:]


def array_kernels(xp) -> dict:
    """``{op name: fn}`` computing with the array module ``xp`` (numpy or CuPy)."""

    def argsort(x, axis, descending, stable):
        x = _wide(x)
        if not descending:
            return xp.argsort(x, axis=axis, kind="stable").astype(np.int64)
        r = xp.argsort(xp.flip(x, axis), axis=axis, kind="stable")
        return (x.shape[axis] - 1 - xp.flip(r, axis)).astype(np.int64)

    def sort(x, axis, descending, stable):
        s = xp.sort(_wide(x), axis=axis, kind="stable")
        return (xp.flip(s, axis) if descending else s).astype(x.dtype)

    def take_along_axis(x, indices, axis):
        sx, si = _bcast(x.shape, indices.shape, axis)
        return xp.take_along_axis(xp.broadcast_to(x, sx), xp.broadcast_to(indices, si).astype(np.int64), axis=axis)

    def scan(fn, identity):
        def k(x, axis, include_initial, dtype=None):
            r = fn(_wide(x), axis=axis).astype(x.dtype)
            if include_initial:
                head = xp.full(r.shape[:axis] + (1,) + r.shape[axis + 1:], identity, dtype=r.dtype)
                r = xp.concatenate([head, r], axis=axis)
            return r

        return k

    def searchsorted(x1, x2, side):
        return xp.searchsorted(_wide(x1), _wide(x2), side=side).astype(np.int64)

    def count_nonzero(x, axis, keepdims):
        return xp.sum(x != 0, axis=axis, keepdims=keepdims, dtype=np.int64)

    return {"argsort": argsort, "sort": sort, "take_along_axis": take_along_axis,
            "cumulative_sum": scan(xp.cumsum, 0), "cumulative_prod": scan(xp.cumprod, 1),
            "searchsorted": searchsorted, "count_nonzero": count_nonzero}


def register(kernels) -> None:
    for name, fn in array_kernels(np).items():
        kernels.register(name, _quiet(fn))


def _quiet(fn):
    def k(ctx, *a, **kw):
        with np.errstate(all="ignore"):
            return fn(*a, **kw)

    return k
