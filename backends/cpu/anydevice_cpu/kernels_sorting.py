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

    def values_sort(x, axis):
        """Sorted values as a stable sort gives them: equal values differ in bits only for -0 and
        0 (NaN payloads aside), so the faster unstable sort serves unless x holds a -0."""
        x = _wide(x)
        exact = x.dtype.kind != "f" or not bool(xp.any(xp.signbit(x) & (x == 0)))
        return xp.sort(x, axis=axis, kind=None if exact else "stable")

    def sort(x, axis, descending, stable):
        s = values_sort(x, axis)
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

    def positions(keep, size):
        """The compaction of the decompositions (a stable argsort of ~keep, first ``size``) in O(n)."""
        pos = xp.flatnonzero(keep)[:size]
        return pos if pos.size == size else xp.concatenate([pos, xp.flatnonzero(~keep)[:size - pos.size]])

    def argwhere(x, size):
        pos = positions((x != 0).reshape(-1), size)
        return xp.stack(xp.unravel_index(pos, x.shape), axis=1).astype(np.int64).reshape(-1, x.ndim)

    def unique_all(x, size):
        v = x.reshape(-1)
        n = v.size
        order = xp.argsort(_wide(v), kind="stable")
        s = v[order]
        start, last = xp.ones(n, bool), xp.ones(n, bool)
        start[1:] = s[1:] != s[:-1]  # NaN != NaN: every NaN is a value of its own
        last[:-1] = start[1:]
        pos = positions(start, size)
        inverse = xp.empty(n, np.int64)
        inverse[order] = xp.cumsum(start) - 1
        return s[pos], order[pos].astype(np.int64), inverse.reshape(x.shape), (positions(last, size) - pos + 1).astype(np.int64)

    def getitem_mask(x, mask, size):
        m = mask.reshape(-1)
        return x.reshape((m.size,) + x.shape[mask.ndim:])[positions(m, size)]

    def setitem_mask(x, mask, value, size=None):
        y = x.copy()
        rest = x.ndim - mask.ndim
        y[mask] = value.reshape(value.shape[1:]) if value.ndim == rest + 1 and value.shape[0] == 1 else value
        return y

    def repeat_tensor(x, repeats, axis, size):
        if axis is None:
            x, axis = x.reshape(-1), 0
        r = xp.broadcast_to(repeats.reshape(-1).astype(np.int64), (x.shape[axis],))
        out = xp.repeat(x, r, axis=axis)
        if size > out.shape[axis]:
            raise IndexError(f"repeat_tensor(): size {size} is more than the {out.shape[axis]} repeated elements")
        return xp.take(out, xp.arange(size), axis=axis)

    def unique_counts(x, size):  # no argsort needed: the sorted values alone (stable: -0 and 0 as unique_all)
        s = values_sort(x.reshape(-1), 0).astype(x.dtype)
        start, last = xp.ones(s.size, bool), xp.ones(s.size, bool)
        start[1:] = s[1:] != s[:-1]
        last[:-1] = start[1:]
        pos = positions(start, size)
        return s[pos], (positions(last, size) - pos + 1).astype(np.int64)

    return {"argwhere": argwhere, "unique_all": unique_all, "unique_values": lambda x, size: unique_counts(x, size)[0],
            "unique_counts": unique_counts, "unique_inverse": lambda x, size: unique_all(x, size)[::2],
            "getitem_mask": getitem_mask, "setitem_mask": setitem_mask, "repeat_tensor": repeat_tensor,
            "argsort": argsort, "sort": sort, "take_along_axis": take_along_axis,
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
