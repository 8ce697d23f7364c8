"""Sorting, searching, scans and set functions (Array API 2024.12), and ops whose result shape
depends on the data.

``argsort`` is the one sorting primitive (stable; NaNs sort last ascending and first descending,
as ``n - 1 - flip(argsort(flip(x)))`` gives). Everything else decomposes into existing
primitives, so a backend that implements only the primitives runs all of it on its device:

- ``sort`` = ``take_along_axis(x, argsort(x))``; ``take_along_axis`` is one ``take`` of
  flattened offsets; ``cumulative_sum`` / ``cumulative_prod`` are a log-step scan (slices,
  ``concat`` and ``add`` / ``multiply``); ``searchsorted`` counts comparisons;
- data-dependent ops (``argwhere``, ``unique_*``, ``getitem_mask``, ``setitem_mask``,
  ``repeat_tensor``) define ``data_shape``: it computes the sizes on the device (a count), the
  dispatcher reads them back in one synchronization and fills the ``size`` attribute; then the
  shape rule and the kernels see a static shape. The compaction is a stable ``argsort`` of the
  negated mask (the positions of the kept elements come first, in order).

A caller that knows a size passes it (``size=``): no synchronization, and the first ``size``
results are returned.
"""
from __future__ import annotations

import math

import numpy as np

from anydevice.base import dtypes as _dt
from anydevice.ops.elementwise import unbroadcast
from anydevice.ops.registry import (
    Axes,
    Axis,
    Bool,
    Choice,
    DType,
    Int,
    Optional,
    broadcast_shapes,
    check_index_range,
    define,
    normalize_axes,
    normalize_axis,
    with_indices,
)
from anydevice.ops.statistical import _acc_rule, reduced_shape

_I64 = _dt.int64
_SIZE = Optional(Int(0, lo=0))


def _prod(shape) -> int:
    return math.prod(shape)


def _key(shape, axis, start, stop) -> tuple:
    """The canonical getitem key of ``x[..., start:stop, ...]`` along ``axis``."""
    return tuple(("s", start, 1, stop - start) if k == axis else ("s", 0, 1, n) for k, n in enumerate(shape))


def _slice(xp, x, axis, start, stop):
    return xp.getitem(x, key=_key(x.shape, axis, start, stop))


def _arange(xp, n, like):
    return xp.arange(0, n, dtype=_I64, device=like.device)


def _mask(xp, x):
    """``x != 0`` (bool tensors as they are)."""
    return x if x.dtype is _dt.bool_ else xp.not_equal(x, 0)


def _rule(cat, out=None):
    def rule(ds, attrs):
        return ds[0], out or ds[0]

    rule.category = cat
    return rule


def _numeric_ref(x):
    """A float64 / exact-integer copy of a reference input."""
    x = np.asarray(x)
    return x.astype(np.float64) if x.dtype.kind == "f" or x.dtype.name == "bfloat16" else x


# --- argsort and sort -----------------------------------------------------------------------------
def _row_order(row, descending):
    """Stable order of a Python list: NaN last ascending, first descending (the spec's flip rule)."""
    def nan(v):
        return isinstance(v, float) and v != v

    if descending:
        return sorted(range(len(row)), key=lambda i: (0, 0) if nan(row[i]) else (1, -row[i]))
    return sorted(range(len(row)), key=lambda i: (1, 0) if nan(row[i]) else (0, row[i]))


def _argsort_ref(x, axis=-1, descending=False, stable=True):
    x = np.moveaxis(_numeric_ref(x), axis, -1)
    out = np.empty(x.shape, np.int64)
    for idx in np.ndindex(x.shape[:-1]):
        out[idx] = _row_order(x[idx].tolist(), descending)
    return np.moveaxis(out, -1, axis)


def _sort_ref(x, axis=-1, descending=False, stable=True):
    return np.take_along_axis(np.asarray(x), _argsort_ref(x, axis, descending), axis=axis)


def _sort(xp, x, axis, descending, stable):
    return xp.take_along_axis(x, xp.argsort(x, axis=axis, descending=descending, stable=stable), axis=axis)


def _sort_samples(kind):
    def gen(d, rng):
        from anydevice.ops.samples import Sample, smooth, values

        def ties(*shape):
            v = rng.integers(0, 4, size=shape)
            return np.asarray(v > 1 if d.kind == "bool" else v).astype(d.numpy)

        out = [Sample([values(rng, d, (7,))], {}, "(7,)"),
               Sample([ties(3, 6)], {}, "(3, 6) with ties"),
               Sample([ties(3, 6)], {"axis": 0}, "(3, 6) with ties, axis=0"),
               Sample([ties(2, 3, 5)], {"descending": True}, "descending, ties keep their order"),
               Sample([ties(4, 3)], {"axis": 0, "descending": True, "stable": False}, "descending, axis=0, stable=False"),
               Sample([values(rng, d, (0,))], {}, "empty"), Sample([values(rng, d, (2, 0))], {}, "empty rows")]
        if d.kind == "float":
            sp = np.asarray([1.0, np.nan, -0.0, np.inf, 0.0, -np.inf, np.nan, -2.5]).astype(d.numpy)
            out += [Sample([sp], {}, "NaN, ±inf, ±0"), Sample([sp], {"descending": True}, "NaN, ±inf, ±0 descending")]
        if kind == "sort" and d in (_dt.float32, _dt.float64):
            out += [Sample([smooth(rng, d, (3, 5))], {}, "smooth", grad=True),
                    Sample([smooth(rng, d, (4, 3))], {"axis": 0, "descending": True}, "smooth, axis=0, descending",
                           grad=True)]
        return out

    return gen


def _sort_errors(name):
    x = np.zeros((2, 3), np.float32)
    return [([x], {"axis": 2}, ValueError, "axis 2 of a 2-D array"), ([x], {"axis": 1.0}, TypeError, "float axis"),
            ([np.float32(1.0)], {}, ValueError, "0-d input (no axis)"),
            ([x], {"descending": 1}, TypeError, "descending=1")]


_SORT_ATTRS = {"axis": Axis(-1), "descending": Bool(False), "stable": Bool(True)}
define("argsort", inputs=("x",), attrs=_SORT_ATTRS, positional=0, dtype_rule=_rule("real_or_bool", _I64),
       shape_rule=lambda s, a: s[0], reference=_argsort_ref, category="searching", differentiable=False,
       samples=_sort_samples("argsort"), errors=_sort_errors("argsort"),
       doc="argsort(x, /, *, axis=-1, descending=False, stable=True): indices that sort x along axis (always "
           "stable; NaNs last, or first when descending)")
define("sort", inputs=("x",), attrs=_SORT_ATTRS, positional=0, dtype_rule=_rule("real_or_bool"),
       shape_rule=lambda s, a: s[0], reference=_sort_ref, decomposition=_sort, category="searching",
       samples=_sort_samples("sort"), errors=_sort_errors("sort"),
       doc="sort(x, /, *, axis=-1, descending=False, stable=True): x sorted along axis (NaNs last ascending)")


# --- take_along_axis ------------------------------------------------------------------------------
def _tal_shape(shapes, attrs):
    x, i = shapes
    a = attrs["axis"]
    if len(i) != len(x):
        raise ValueError(f"take_along_axis(): indices must have as many dimensions as x ({len(x)}), "
                         f"not {len(i)} (shape {tuple(i)})")
    rest = broadcast_shapes(tuple(x[:a] + x[a + 1:]), tuple(i[:a] + i[a + 1:]), opname="take_along_axis")
    return rest[:a] + (i[a],) + rest[a:]


def _tal_parts(xp, x, indices, axis):
    """(P, m, Q) blocks of the broadcast indices as non-negative int64, and the output shape."""
    out = _tal_shape([x.shape, indices.shape], {"axis": axis})
    n = x.shape[axis]
    i3 = xp.reshape(xp.broadcast_to(xp.astype(indices, _I64), out), (_prod(out[:axis]), out[axis], _prod(out[axis + 1:])))
    return xp.where(xp.less(i3, 0), xp.add(i3, n), i3), out


def _take_along_axis(xp, x, indices, axis):
    i3, out = _tal_parts(xp, x, indices, axis)
    n, (P, _, Q) = x.shape[axis], i3.shape
    xb = xp.broadcast_to(x, out[:axis] + (n,) + out[axis + 1:])
    off = xp.add(xp.add(xp.multiply(i3, Q), xp.reshape(xp.multiply(_arange(xp, P, x), n * Q), (P, 1, 1))),
                 xp.reshape(_arange(xp, Q, x), (1, 1, Q)))
    return xp.reshape(xp.take(xp.reshape(xb, (-1,)), xp.reshape(off, (-1,)), axis=0), out)


def _vjp_take_along_axis(xp, g, i, o, axis):
    """Scatter-add along the axis as a one-hot contraction (memory P * m * n * Q)."""
    x, idx = i
    i3, out = _tal_parts(xp, x, idx, axis)
    n, (P, m, Q) = x.shape[axis], i3.shape
    hot = xp.equal(xp.reshape(i3, (P, m, 1, Q)), xp.reshape(_arange(xp, n, x), (1, 1, n, 1)))
    gx = xp.sum(xp.multiply(xp.astype(hot, g.dtype), xp.reshape(g, (P, m, 1, Q))), axis=1)
    return unbroadcast(xp, xp.reshape(gx, out[:axis] + (n,) + out[axis + 1:]), x.shape), None


def _check_tal(xp, inputs, attrs):
    x, idx = inputs
    n = x.shape[attrs["axis"]]
    check_index_range(xp, "take_along_axis", "index", idx, -n, n, f"for axis {attrs['axis']} with size {n}")


def _tal_ref(x, indices, axis=-1):
    out = _tal_shape([x.shape, indices.shape], {"axis": axis})
    n = x.shape[axis]
    xb = np.broadcast_to(x, out[:axis] + (n,) + out[axis + 1:])
    return np.take_along_axis(xb, np.broadcast_to(indices, out).astype(np.int64), axis=axis)


def _tal_samples(d, rng):
    from anydevice.ops.samples import Sample, smooth, values

    def idx(n, *shape, dt=np.int64):
        return rng.integers(-n, n, size=shape).astype(dt)

    out = [Sample([values(rng, d, (3, 4)), idx(4, 3, 5)], {}, "(3, 4), indices (3, 5), negative ones too"),
           Sample([values(rng, d, (3, 4)), idx(3, 2, 4)], {"axis": 0}, "axis=0"),
           Sample([values(rng, d, (2, 3, 4)), idx(3, 1, 2, 4)], {"axis": 1}, "broadcast indices (1, 2, 4), axis=1"),
           Sample([values(rng, d, (6,)), idx(6, 6, dt=np.int32)], {}, "1-D, int32 indices"),
           Sample([values(rng, d, (3, 4)), idx(4, 3, 0)], {}, "empty indices")]
    if d in (_dt.float32, _dt.float64):
        out.append(Sample([smooth(rng, d, (3, 4)), idx(4, 3, 6)], {}, "smooth, repeated indices", grad=True))
    return out


define("take_along_axis", inputs=("x", "indices"), attrs={"axis": Axis(-1)}, positional=0,
       dtype_rule=with_indices("take_along_axis", "indices", "all"), shape_rule=_tal_shape, reference=_tal_ref,
       canon=lambda s, a: {"axis": normalize_axis(a["axis"], len(s[0]), "take_along_axis")},
       vjp=_vjp_take_along_axis, decomposition=_take_along_axis, check=_check_tal, category="searching",
       samples=_tal_samples,
       errors=[([np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32)], {}, TypeError, "float indices"),
               ([np.zeros((2, 3), np.float32), np.zeros(3, np.int64)], {}, ValueError, "1-D indices for a 2-D x"),
               ([np.zeros((2, 3), np.float32), np.zeros((3, 3), np.int64)], {}, ValueError, "(3, 3) with (2, 3)"),
               ([np.zeros((2, 3), np.float32), np.full((2, 1), 3, np.int64)], {}, IndexError, "index 3 for size 3"),
               ([np.zeros((2, 3), np.float32), np.zeros((2, 1), np.int64)], {"axis": 2}, ValueError, "axis 2")],
       doc="take_along_axis(x, indices, /, *, axis=-1): out[..., j, ...] = x[..., indices[..., j, ...], ...] "
           "(other axes broadcast; negative indices count from the end)")


# --- cumulative_sum / cumulative_prod ------------------------------------------------------------
def _canon_scan(name):
    def canon(shapes, attrs):
        if attrs["axis"] is None:
            nd = len(shapes[0])
            if nd != 1:
                raise ValueError(f"{name}(): axis is required for a {nd}-D array (axis=None only for 1-D arrays)")
            return {**attrs, "axis": 0}
        return {**attrs, "axis": normalize_axis(attrs["axis"], len(shapes[0]), name)}

    return canon


def _scan_shape(shapes, attrs):
    s = list(shapes[0])
    s[attrs["axis"]] += bool(attrs["include_initial"])
    return tuple(s)


def _scan(step, identity):
    """Hillis-Steele scan: log2(n) rounds of ``y = step(y, y shifted by s)`` (identity shifted in)."""
    def dec(xp, x, axis, include_initial, dtype=None):
        y, n, s = x, x.shape[axis], 1
        while s < n:
            head = xp.full(_key_shape(y.shape, axis, s), identity, dtype=y.dtype, device=y.device)
            y = step(xp)(y, xp.concat([head, _slice(xp, y, axis, 0, n - s)], axis=axis))
            s *= 2
        if include_initial:
            y = xp.concat([xp.full(_key_shape(y.shape, axis, 1), identity, dtype=y.dtype, device=y.device), y], axis=axis)
        return y

    return dec


def _key_shape(shape, axis, n):
    return tuple(n if k == axis else d for k, d in enumerate(shape))


def _rev_cumsum(xp, g, axis):
    return xp.flip(xp.cumulative_sum(xp.flip(g, axis=axis), axis=axis), axis=axis)


def _vjp_cumsum(xp, g, i, o, axis, include_initial, dtype=None):
    if include_initial:
        g = _slice(xp, g, axis, 1, g.shape[axis])
    return (_rev_cumsum(xp, g, axis),)


def _vjp_cumprod(xp, g, i, o, axis, include_initial, dtype=None):
    if include_initial:
        g, o = _slice(xp, g, axis, 1, g.shape[axis]), _slice(xp, o, axis, 1, o.shape[axis])
    return (xp.divide(_rev_cumsum(xp, xp.multiply(g, o), axis), i[0]),)


def _scan_ref(fn, identity):
    def ref(x, axis, include_initial=False, dtype=None):
        x = np.asarray(x)
        wide = np.complex128 if x.dtype.kind == "c" else np.float64 if x.dtype.kind == "f" else (
            dtype.numpy if dtype is not None else np.uint64 if x.dtype.kind == "u" else np.int64)
        with np.errstate(all="ignore"):
            r = fn(x.astype(wide), axis=axis)
        if include_initial:
            r = np.concatenate([np.full(_key_shape(r.shape, axis, 1), identity, dtype=r.dtype), r], axis=axis)
        return r

    return ref


def _scan_samples(name):
    def gen(d, rng):
        from anydevice.ops.samples import Sample, smooth, values

        dom = "prod" if name == "cumulative_prod" else None
        out = [Sample([values(rng, d, (9,), dom)], {}, "(9,), axis=None"),
               Sample([values(rng, d, (3, 5), dom)], {"axis": 1}, "(3, 5), axis=1"),
               Sample([values(rng, d, (4, 3), dom)], {"axis": 0, "include_initial": True}, "axis=0, include_initial"),
               Sample([values(rng, d, (2, 17), dom)], {"axis": -1}, "17 long (5 rounds)"),
               Sample([values(rng, d, (0,), dom)], {"include_initial": True}, "empty, include_initial"),
               Sample([values(rng, d, (2, 0), dom)], {"axis": 1}, "empty axis")]
        if d.kind in ("int", "bool"):
            out.append(Sample([values(rng, d, (6,), dom)], {"dtype": _dt.int32}, "dtype=int32"))
        if d.kind == "float":
            out.append(Sample([np.asarray([1.0, np.nan, 2.0, np.inf, -np.inf]).astype(d.numpy)], {}, "NaN, ±inf"))
        if d in (_dt.float32, _dt.float64):
            pos = "positive" if dom else None
            out += [Sample([smooth(rng, d, (3, 4), pos)], {"axis": 1}, "smooth", grad=True),
                    Sample([smooth(rng, d, (5, 2), pos)], {"axis": 0, "include_initial": True}, "smooth, include_initial",
                           grad=True)]
        return out

    return gen


def _scan_errors(name):
    x = np.ones((2, 3), np.float32)
    return [([x], {}, ValueError, "axis=None for a 2-D array"), ([x], {"axis": 2}, ValueError, "axis 2"),
            ([np.float32(1.0)], {}, ValueError, "0-d input"), ([x], {"axis": 0, "include_initial": "yes"}, TypeError,
                                                                "include_initial='yes'")]


_SCAN = {"axis": Optional(Axis()), "dtype": DType(), "include_initial": Bool(False)}
_TOL = {"float32": (1e-5, 1e-4), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)}
define("cumulative_sum", inputs=("x",), attrs=_SCAN, positional=0, dtype_rule=_acc_rule("all", "cumulative_sum"),
       canon=_canon_scan("cumulative_sum"), shape_rule=_scan_shape, reference=_scan_ref(np.cumsum, 0),
       vjp=_vjp_cumsum, decomposition=_scan(lambda xp: xp.add, 0), category="searching", tolerance=_TOL,
       samples=_scan_samples("cumulative_sum"), errors=_scan_errors("cumulative_sum"),
       doc="cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False): running sums along axis "
           "(integers accumulate in int64/uint64 as sum does)")
define("cumulative_prod", inputs=("x",), attrs=_SCAN, positional=0, dtype_rule=_acc_rule("numeric", "cumulative_prod"),
       canon=_canon_scan("cumulative_prod"), shape_rule=_scan_shape, reference=_scan_ref(np.cumprod, 1),
       vjp=_vjp_cumprod, decomposition=_scan(lambda xp: xp.multiply, 1), category="searching", tolerance=_TOL,
       domain="prod", samples=_scan_samples("cumulative_prod"), errors=_scan_errors("cumulative_prod"),
       doc="cumulative_prod(x, /, *, axis=None, dtype=None, include_initial=False): running products along axis")


# --- searchsorted ---------------------------------------------------------------------------------
def _ss_rule(ds, attrs):
    d = _dt.promote(ds[0], ds[1])
    return (d, d), _I64


_ss_rule.category = "real"


def _ss_shape(shapes, attrs):
    if len(shapes[0]) != 1:
        raise ValueError(f"searchsorted(): x1 must be 1-D, not of shape {tuple(shapes[0])}")
    return tuple(shapes[1])


def _searchsorted(xp, x1, x2, side):
    """Count the elements of x1 before each x2 (NaN sorts last: left counts a < v, right a <= v)."""
    a = xp.reshape(x1, x1.shape + (1,) * x2.ndim)
    v = xp.expand_dims(x2, axis=0)
    if side == "left":
        hit = xp.less(a, v)
        if x1.dtype.kind == "float":
            hit = xp.logical_or(hit, xp.logical_and(xp.isnan(v), xp.logical_not(xp.isnan(a))))
    else:
        hit = xp.less_equal(a, v)
        if x1.dtype.kind == "float":
            hit = xp.logical_or(hit, xp.isnan(v))
    return xp.sum(xp.astype(hit, _I64), axis=0)


def _ss_ref(x1, x2, side="left"):
    order = _row_order(np.asarray(x1).tolist(), False)
    s = [float(v) if isinstance(v, float) else v for v in np.asarray(x1).tolist()]
    s = [s[i] for i in order]

    def less(a, b):  # NaN greatest, NaNs equal
        return (a == a) and (b != b or a < b)

    out = np.empty(np.shape(x2), np.int64)
    for idx, v in np.ndenumerate(np.asarray(x2)):
        v = v.item()
        out[idx] = sum(1 for a in s if (less(a, v) if side == "left" else not less(v, a)))
    return out


def _ss_samples(d, rng):
    from anydevice.ops.samples import Sample, values

    s = np.sort(values(rng, d, (8,)))
    out = [Sample([s, values(rng, d, (5,))], {}, "left"), Sample([s, values(rng, d, (2, 3))], {"side": "right"}, "right, 2-D"),
           Sample([s, s[[0, 3, 7]]], {"side": "left"}, "values equal to x1's, left"),
           Sample([s, s[[0, 3, 7]]], {"side": "right"}, "values equal to x1's, right"),
           Sample([s, values(rng, d, ())], {}, "0-d x2"), Sample([s[:0], values(rng, d, (3,))], {}, "empty x1")]
    if d.kind == "float":
        sn = np.asarray([-np.inf, -1.0, 0.0, 0.0, 2.0, np.inf, np.nan, np.nan]).astype(d.numpy)
        probe = np.asarray([np.nan, np.inf, -0.0, 5.0, -np.inf]).astype(d.numpy)
        out += [Sample([sn, probe], {}, "NaN, ±inf in both, left"), Sample([sn, probe], {"side": "right"}, "... right")]
    return out


define("searchsorted", inputs=("x1", "x2"), attrs={"side": Choice("left", ("left", "right"))}, positional=0,
       dtype_rule=_ss_rule, shape_rule=_ss_shape, reference=_ss_ref, decomposition=_searchsorted, category="searching",
       differentiable=False, samples=_ss_samples,
       errors=[([np.zeros((2, 2), np.float32), np.zeros(3, np.float32)], {}, ValueError, "2-D x1"),
               ([np.zeros(3, np.float32), np.zeros(3, np.float32)], {"side": "middle"}, ValueError, "side='middle'")],
       doc="searchsorted(x1, x2, /, *, side='left'): insertion indices of x2 into the sorted 1-D x1 "
           "(anydevice.searchsorted also takes sorter=)")


# --- count_nonzero --------------------------------------------------------------------------------
def _count_nonzero(xp, x, axis, keepdims):
    return xp.sum(xp.astype(_mask(xp, x), _I64), axis=axis, keepdims=keepdims)


def _cnz_ref(x, axis, keepdims):
    return np.asarray(np.count_nonzero(x, axis=axis, keepdims=keepdims), np.int64)


def _cnz_samples(d, rng):
    from anydevice.ops.samples import Sample, values

    def sparse(*shape):
        v = values(rng, d, shape)
        return np.where(rng.random(shape) < 0.5, np.zeros((), d.numpy), v).astype(d.numpy)

    out = [Sample([sparse(3, 4)], {}, "(3, 4), every axis"), Sample([sparse(3, 4)], {"axis": 1}, "axis=1"),
           Sample([sparse(2, 3, 4)], {"axis": (0, 2), "keepdims": True}, "axes (0, 2), keepdims"),
           Sample([sparse()], {}, "0-d"), Sample([sparse(0, 3)], {"axis": 0}, "empty axis")]
    if d.kind == "float":
        out.append(Sample([np.asarray([np.nan, -0.0, 0.0, np.inf]).astype(d.numpy)], {}, "NaN counts, -0 does not"))
    return out


define("count_nonzero", inputs=("x",), attrs={"axis": Axes(None), "keepdims": Bool(False)}, positional=0,
       dtype_rule=_rule("all", _I64), canon=lambda s, a: {**a, "axis": normalize_axes(a["axis"], len(s[0]), "count_nonzero")},
       shape_rule=lambda s, a: reduced_shape(s[0], a["axis"], a["keepdims"]), reference=_cnz_ref,
       decomposition=_count_nonzero, category="searching", differentiable=False, samples=_cnz_samples,
       errors=[([np.zeros((2, 3), np.float32)], {"axis": 2}, ValueError, "axis 2"),
               ([np.zeros((2, 3), np.float32)], {"axis": (1, 1)}, ValueError, "repeated axis")],
       doc="count_nonzero(x, /, *, axis=None, keepdims=False): how many elements are not zero (int64)")
