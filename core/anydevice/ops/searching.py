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
    if x.ndim == 1:  # (sort, unique): one take, negative indices counted from the end
        n = x.shape[0]
        return xp.take(x, xp.where(xp.less(indices, 0), xp.add(indices, n), indices) if indices.dtype.kind == "int"
                       else indices, axis=0)
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
    """Hillis-Steele scan: log2(n) rounds of ``y = step(y, y shifted by s)`` (identity shifted in).
    A bool accumulator (``dtype=bool``) combines as numpy's bool sum and product do: or, and."""
    def dec(xp, x, axis, include_initial, dtype=None):
        y, n, s = x, x.shape[axis], 1
        op, ident = step(xp), identity
        if y.dtype == _dt.bool_:
            op, ident = (xp.logical_or, False) if identity == 0 else (xp.logical_and, True)
        while s < n:
            head = xp.full(_key_shape(y.shape, axis, s), ident, dtype=y.dtype, device=y.device)
            y = op(y, xp.concat([head, _slice(xp, y, axis, 0, n - s)], axis=axis))
            s *= 2
        if include_initial:
            y = xp.concat([xp.full(_key_shape(y.shape, axis, 1), ident, dtype=y.dtype, device=y.device), y], axis=axis)
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
        if d.kind == "bool" and name == "cumulative_sum":
            out.append(Sample([values(rng, d, (2, 7))], {"axis": 1, "dtype": _dt.bool_}, "dtype=bool (a running or)"))
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


# --- data-dependent shapes: nonzero (argwhere), unique_*, boolean masks, repeat ------------------
def _positions(xp, keep, size):
    """The first ``size`` positions where the 1-D bool ``keep`` is True, ascending: a stable
    argsort of the negated mask puts them first, in order (the compaction of every op below)."""
    return xp.getitem(xp.argsort(xp.logical_not(keep)), key=(("s", 0, 1, size),))


def _need_size(count):
    """A data_shape rule: ``{"size": count(xp, *inputs)}`` unless the caller gave ``size``."""
    def rule(xp, inputs, attrs):
        return {} if attrs["size"] is not None else {"size": count(xp, *inputs)}

    return rule


def _check_size(name, size, most):
    if size is not None and size > most:
        raise ValueError(f"{name}(): size {size} is more than the {most} element(s) there are (allowed: 0..{most})")


def _argwhere_shape(shapes, attrs):
    x = tuple(shapes[0])
    if not x:
        raise ValueError("argwhere(): x must have at least one dimension (a 0-d array has no indices)")
    _check_size("argwhere", attrs["size"], _prod(x))
    return (attrs["size"], len(x))


def _argwhere(xp, x, size):
    pos = _positions(xp, xp.reshape(_mask(xp, x), (-1,)), size)
    cols = [xp.remainder(xp.floor_divide(pos, _prod(x.shape[k + 1:])), n) for k, n in enumerate(x.shape)]
    return xp.stack(cols, axis=1)


def _argwhere_samples(d, rng):
    from anydevice.ops.samples import Sample, values

    def sparse(*shape):
        v = values(rng, d, shape)
        return np.where(rng.random(shape) < 0.5, np.zeros((), d.numpy), v).astype(d.numpy)

    out = [Sample([sparse(9)], {}, "1-D"), Sample([sparse(3, 4)], {}, "(3, 4)"), Sample([sparse(2, 3, 2)], {}, "3-D"),
           Sample([np.zeros((2, 3), d.numpy)], {}, "all zero"), Sample([np.ones((2, 2), d.numpy)], {}, "none zero"),
           Sample([sparse(0, 3)], {}, "empty"), Sample([sparse(4, 4)], {"size": 2}, "size=2: the first two")]
    if d.kind == "float":
        out.append(Sample([np.asarray([0.0, np.nan, -0.0, np.inf]).astype(d.numpy)], {}, "NaN counts, -0 does not"))
    return out


def _padded(keep, size):
    """Flat positions of ``keep``'s True elements, then (a ``size`` beyond their count) of its
    False ones, in order: the first ``size`` of a stable sort of ~keep."""
    return np.argsort(~np.asarray(keep, bool).reshape(-1), kind="stable")[:size]


def _argwhere_ref(x, size=None):
    x = np.asarray(x)
    if size is None:
        return np.argwhere(x).astype(np.int64)
    pos = _padded(x != 0, size)
    return np.stack(np.unravel_index(pos, x.shape), axis=1).astype(np.int64).reshape(-1, x.ndim)


define("argwhere", inputs=("x",), attrs={"size": _SIZE}, positional=0, dtype_rule=_rule("all", _I64),
       shape_rule=_argwhere_shape, reference=_argwhere_ref, decomposition=_argwhere,
       data_shape=_need_size(lambda xp, x: xp.count_nonzero(x)), category="searching", differentiable=False,
       samples=_argwhere_samples,
       errors=[([np.float32(1.0)], {}, ValueError, "0-d input"), ([np.ones(3, np.float32)], {"size": 4}, ValueError,
                                                                 "size 4 of 3 elements")],
       doc="argwhere(x, /, *, size=None): (n, x.ndim) int64 indices of the non-zero elements, row-major "
           "(anydevice.nonzero splits them per dimension); size=None counts them on the device (one read-back); a "
           "given size keeps the first size, continuing with the zero elements' indices in order beyond the count")


# unique: sort the flattened x (stable), mark where a run of equal values starts (NaN != NaN: every
# NaN starts its own), compact the starts; counts are the distances between starts
def _starts(xp, s):
    n = s.shape[0]
    head = xp.full((min(n, 1),), True, dtype=_dt.bool_, device=s.device)
    if n <= 1:
        return head
    return xp.concat([head, xp.not_equal(_slice(xp, s, 0, 1, n), _slice(xp, s, 0, 0, n - 1))], axis=0)


def _unique_count(xp, x):
    return xp.sum(xp.astype(_starts(xp, xp.sort(xp.reshape(x, (-1,)))), _I64))


def _unique_parts(xp, x, size):
    v = xp.reshape(x, (-1,))
    n = v.shape[0]
    order = xp.argsort(v)
    s = xp.take(v, order, axis=0)
    b = _starts(xp, s)
    pos = _positions(xp, b, size)
    values = xp.take(s, pos, axis=0)
    indices = xp.take(order, pos, axis=0)
    last = xp.concat([_slice(xp, b, 0, min(1, n), n), xp.full((min(n, 1),), True, dtype=_dt.bool_, device=x.device)], axis=0)
    counts = xp.add(xp.subtract(_positions(xp, last, size), pos), 1)  # a run ends where the next one starts
    gid = xp.subtract(xp.cumulative_sum(xp.astype(b, _I64)), 1)
    inverse = xp.reshape(xp.take(gid, xp.argsort(order), axis=0), x.shape)
    return values, indices, inverse, counts


def _unique_ref(x, size=None):
    flat = _numeric_ref(x).reshape(-1)
    row = flat.tolist()
    order = _row_order(row, False)
    values, indices, counts, inverse = [], [], [], np.zeros(len(row), np.int64)
    for i in order:
        v = row[i]
        if not values or not (v == values[-1]):  # a NaN never equals the previous value
            values.append(v)
            indices.append(i)
            counts.append(0)
        counts[-1] += 1
        inverse[i] = len(values) - 1
    k = len(values) if size is None else size
    return (np.asarray(values, flat.dtype)[:k], np.asarray(indices, np.int64)[:k],
            inverse.reshape(np.shape(x)), np.asarray(counts, np.int64)[:k])


def _unique_samples(d, rng):
    from anydevice.ops.samples import Sample

    def few(*shape):
        v = rng.integers(0, 4, size=shape)
        return np.asarray(v > 1 if d.kind == "bool" else v).astype(d.numpy)

    out = [Sample([few(10)], {}, "1-D with repeats"), Sample([few(3, 4)], {}, "(3, 4)"), Sample([few(0, 2)], {}, "empty"),
           Sample([few()], {}, "0-d"), Sample([few(12)], {"size": 1}, "size=1: the smallest")]
    if d.kind == "float":
        out.append(Sample([np.asarray([2.0, np.nan, -0.0, 2.0, np.nan, np.inf, 0.0]).astype(d.numpy)], {},
                          "NaNs are distinct, -0 == 0"))
    return out


def _unique_shape(name, outputs):
    def rule(shapes, attrs):
        n = _prod(shapes[0])
        _check_size(name, attrs["size"], n)
        k = (attrs["size"],)
        shape = {"values": k, "indices": k, "counts": k, "inverse_indices": tuple(shapes[0])}
        return shape[outputs[0]] if len(outputs) == 1 else tuple(shape[o] for o in outputs)

    return rule


def _unique_dtypes(outputs):
    def rule(ds, attrs):
        out = tuple(ds[0] if o == "values" else _I64 for o in outputs)
        return ds[0], out[0] if len(outputs) == 1 else out

    rule.category = "real_or_bool"
    return rule


_PARTS = ("values", "indices", "inverse_indices", "counts")
_UNIQUE = {"unique_values": ("values",), "unique_counts": ("values", "counts"),
           "unique_inverse": ("values", "inverse_indices"), "unique_all": _PARTS}


def _select(outputs, fn):
    def pick(*a, **kw):
        parts = dict(zip(_PARTS, fn(*a, **kw)))
        return parts[outputs[0]] if len(outputs) == 1 else tuple(parts[o] for o in outputs)

    return pick


for _name, _outs in _UNIQUE.items():
    define(_name, inputs=("x",), attrs={"size": _SIZE}, positional=0, dtype_rule=_unique_dtypes(_outs),
           shape_rule=_unique_shape(_name, _outs), reference=_select(_outs, _unique_ref),
           decomposition=_select(_outs, _unique_parts), data_shape=_need_size(_unique_count),
           outputs=_outs if len(_outs) > 1 else None, category="searching", differentiable=False,
           samples=_unique_samples,
           errors=[([np.ones(3, np.float32)], {"size": 4}, ValueError, "size 4 of 3 elements"),
                   ([np.ones(3, np.float32)], {"size": -1}, ValueError, "negative size")],
           doc=f"{_name}(x, /, *, size=None): the distinct values of x, sorted (NaNs distinct, last)"
               + (f", with {', '.join(_outs[1:])}" if len(_outs) > 1 else "")
               + "; size=None counts them on the device (one read-back)")


# boolean masks: x[mask] gathers the kept rows in order; its VJP gathers g back by rank
def _mask_rule(name):
    def rule(ds, attrs):
        if ds[1] is not _dt.bool_:
            raise TypeError(f"{name}(): mask must be a bool tensor, not {ds[1].name} (integer index arrays: use take)")
        return (ds[0], ds[1]), ds[0]

    rule.category = "all"
    return rule


def _mask_split(name, x, m):
    if tuple(x[:len(m)]) != tuple(m):
        raise IndexError(f"{name}(): a boolean mask of shape {tuple(m)} does not match the indexed tensor's shape "
                         f"{tuple(x)} (the mask's shape must equal the tensor's first {len(m)} dimension(s))")
    return _prod(m), tuple(x[len(m):])


def _getmask_shape(shapes, attrs):
    n, rest = _mask_split("getitem_mask", *shapes)
    _check_size("getitem_mask", attrs["size"], n)
    return (attrs["size"],) + rest


def _getitem_mask(xp, x, mask, size):
    n, rest = _mask_split("getitem_mask", x.shape, mask.shape)
    return xp.take(xp.reshape(x, (n,) + rest), _positions(xp, xp.reshape(mask, (-1,)), size), axis=0)


def _vjp_getitem_mask(xp, g, i, o, size):
    x, mask = i
    n, rest = _mask_split("getitem_mask", x.shape, mask.shape)
    m = xp.reshape(mask, (-1,))
    rank = xp.subtract(xp.cumulative_sum(xp.astype(m, _I64)), 1)
    keep = xp.logical_and(m, xp.less(rank, size))
    if size == 0:
        return xp.zeros_like(x), None
    rank = xp.where(keep, rank, 0)
    gx = xp.where(xp.reshape(keep, (n,) + (1,) * len(rest)), xp.take(g, rank, axis=0), 0.0 if g.dtype.kind == "float" else 0)
    return xp.reshape(gx, x.shape), None


def _getmask_ref(x, mask, size=None):
    x, mask = np.asarray(x), np.asarray(mask, bool)
    if size is None:
        return x[mask]
    return x.reshape((mask.size,) + x.shape[mask.ndim:])[_padded(mask, size)]


def _mask_samples(d, rng):
    from anydevice.ops.samples import Sample, smooth, values

    def m(*shape):
        return rng.random(shape) < 0.5

    out = [Sample([values(rng, d, (3, 4)), m(3, 4)], {}, "mask of x's shape"),
           Sample([values(rng, d, (3, 4)), m(3)], {}, "mask of the first axis: rows"),
           Sample([values(rng, d, (2, 3)), np.zeros((2, 3), bool)], {}, "nothing kept"),
           Sample([values(rng, d, (0, 2)), m(0)], {}, "empty"),
           Sample([values(rng, d, (6,)), np.ones(6, bool)], {"size": 3}, "size=3: the first three")]
    if d in (_dt.float32, _dt.float64):
        out.append(Sample([smooth(rng, d, (4, 3)), m(4, 3)], {}, "smooth", grad=True))
    return out


define("getitem_mask", inputs=("x", "mask"), attrs={"size": _SIZE}, positional=0, dtype_rule=_mask_rule("getitem_mask"),
       shape_rule=_getmask_shape, reference=_getmask_ref, decomposition=_getitem_mask, vjp=_vjp_getitem_mask,
       data_shape=_need_size(lambda xp, x, mask: xp.sum(xp.astype(mask, _I64))), category="searching",
       samples=_mask_samples,
       errors=[([np.ones((2, 3), np.float32), np.ones((3, 2), bool)], {}, IndexError, "mask (3, 2) for (2, 3)"),
               ([np.ones((2, 3), np.float32), np.ones((2, 3), np.int32)], {}, TypeError, "an int32 mask")],
       doc="getitem_mask(x, mask, /, *, size=None): x[mask] for a bool mask over x's leading dimensions "
           "(Tensor.__getitem__ uses it); size=None counts the kept elements on the device (one read-back); a given "
           "size keeps the first size, continuing with the unselected elements in order beyond the count")


def _setmask_rule(ds, attrs):
    x, m, v = ds
    if m is not _dt.bool_:
        raise TypeError(f"setitem_mask(): mask must be a bool tensor, not {m.name}")
    if _dt.promote(x, v) is not x:
        raise TypeError(f"setitem_mask(): cannot assign a {v.name} value into a {x.name} tensor without changing its dtype")
    return (x, m, x), x


_setmask_rule.category = "all"


def _per_element(v, rest) -> bool:
    """Whether ``value`` has one row per selected element (its first dimension, more than 1)."""
    return len(v) == len(rest) + 1 and v[0] != 1


def _setmask_shape(shapes, attrs):
    x, m, v = (tuple(e) for e in shapes)
    _, rest = _mask_split("setitem_mask", x, m)
    lead = v[:1] if _per_element(v, rest) else ()
    if lead and attrs["size"] is not None and lead[0] != attrs["size"]:
        raise ValueError(f"setitem_mask(): value of shape {v} for {attrs['size']} selected element(s) (allowed: a "
                         f"value that broadcasts to {(attrs['size'],) + rest})")
    t = v[1:] if len(v) == len(rest) + 1 else v  # (a first dimension of 1 broadcasts over the elements)
    try:
        if len(t) > len(rest) or broadcast_shapes(t, rest, opname="setitem_mask") != rest:
            raise ValueError
    except ValueError:
        raise ValueError(f"setitem_mask(): value of shape {v} cannot be broadcast to the selected elements' shape "
                         f"(n,) + {rest}") from None
    return x


def _setmask_size(xp, inputs, attrs):
    x, mask, v = inputs
    _, rest = _mask_split("setitem_mask", x.shape, mask.shape)
    if attrs["size"] is not None or not _per_element(getattr(v, "shape", ()), rest):
        return {}
    return {"size": xp.sum(xp.astype(mask, _I64))}


def _rows(xp, x, mask):
    n, rest = _mask_split("setitem_mask", x.shape, mask.shape)
    m = xp.reshape(mask, (-1,))
    return n, rest, m, xp.reshape(m, (n,) + (1,) * len(rest))


def _setitem_mask(xp, x, mask, value, size=None):
    n, rest, m, mb = _rows(xp, x, mask)
    if _per_element(value.shape, rest):  # value row k goes to the k-th selected element: a gather by rank
        rank = xp.where(m, xp.subtract(xp.cumulative_sum(xp.astype(m, _I64)), 1), 0)
        value = xp.take(value, rank, axis=0) if value.shape[0] else xp.zeros_like(xp.reshape(x, (n,) + rest))
    elif len(value.shape) == len(rest) + 1:
        value = xp.reshape(value, value.shape[1:])
    return xp.reshape(xp.where(mb, value, xp.reshape(x, (n,) + rest)), x.shape)


def _vjp_setitem_mask(xp, g, i, o, size=None):
    x, mask, value = i
    n, rest, m, mb = _rows(xp, x, mask)
    g2 = xp.reshape(g, (n,) + rest)
    gx = xp.reshape(xp.where(mb, xp.zeros_like(g2), g2), x.shape)
    if _per_element(value.shape, rest):
        gv = xp.getitem_mask(g2, m, size=value.shape[0])
    else:
        gv = xp.sum(xp.where(mb, g2, xp.zeros_like(g2)), axis=0, keepdims=len(value.shape) == len(rest) + 1)
    return gx, None, unbroadcast(xp, gv, value.shape)


def _setmask_ref(x, mask, value, size=None):
    y = np.array(x, copy=True)
    y[np.asarray(mask, bool)] = value
    return y


def _setmask_samples(d, rng):
    from anydevice.ops.samples import Sample, smooth, values

    m = np.asarray([[True, False, True, False], [False, False, True, True], [True, True, False, False]])
    out = [Sample([values(rng, d, (3, 4)), m, values(rng, d, ())], {}, "a 0-d value everywhere"),
           Sample([values(rng, d, (3, 4)), m, values(rng, d, (6,))], {}, "one value per selected element"),
           Sample([values(rng, d, (3, 4)), m[:, 0], values(rng, d, (4,))], {}, "rows, one row value for all"),
           Sample([values(rng, d, (3, 4)), m[:, 0], values(rng, d, (2, 4))], {}, "rows, one value row each"),
           Sample([values(rng, d, (3, 4)), np.zeros((3, 4), bool), values(rng, d, (0,))], {}, "nothing selected")]
    if d in (_dt.float32, _dt.float64):
        out += [Sample([smooth(rng, d, (3, 4)), m, smooth(rng, d, (6,))], {}, "smooth, per element", grad=True),
                Sample([smooth(rng, d, (3, 4)), m[:, 0], smooth(rng, d, (1, 4))], {}, "smooth, broadcast row", grad=True)]
    return out


define("setitem_mask", inputs=("x", "mask", "value"), attrs={"size": _SIZE}, positional=0, dtype_rule=_setmask_rule,
       shape_rule=_setmask_shape, reference=_setmask_ref, decomposition=_setitem_mask, vjp=_vjp_setitem_mask,
       data_shape=_setmask_size, category="searching", samples=_setmask_samples,
       errors=[([np.ones((2, 3), np.float32), np.ones((3,), bool), np.float32(1)], {}, IndexError, "mask (3,) for (2, 3)"),
               ([np.ones((2, 3), np.float32), np.ones((2, 3), bool), np.ones(4, np.float32)], {}, ValueError,
                "4 values for 6 selected elements"),
               ([np.ones((2, 3), np.float32), np.ones((2, 3), np.int8), np.float32(1)], {}, TypeError, "an int8 mask"),
               ([np.ones((2, 3), np.float32), np.ones((2, 3), bool), np.float64(1)], {}, TypeError, "float64 into float32")],
       doc="setitem_mask(x, mask, value, /, *, size=None): a copy of x with x[mask] = value (Tensor.__setitem__ "
           "uses it); a value with one row per selected element has its count checked (one read-back)")


# repeat with a tensor of repeats: output j comes from the element whose cumulative count passes j
def _repeat_canon(shapes, attrs):
    x, r = shapes
    if attrs["axis"] is None and len(x) != 1:
        x = (_prod(x),)
    n = x[0 if attrs["axis"] is None else attrs["axis"]]
    if len(r) > 1 or (len(r) == 1 and r[0] not in (1, n)):
        raise ValueError(f"repeat_tensor(): repeats must be 0-d or 1-D of length 1 or {n} (the size of the repeated "
                         f"axis), not of shape {tuple(r)}")
    if attrs["size"] is not None and attrs["size"] < 0:
        raise ValueError("repeat_tensor(): repeats must be non-negative (a negative count was found)")
    return attrs


def _repeat_shape(shapes, attrs):
    x = tuple(shapes[0])
    if attrs["axis"] is None:
        return (attrs["size"],)
    a = attrs["axis"]
    return x[:a] + (attrs["size"],) + x[a + 1:]


def _repeat_counts(xp, x, repeats, axis):
    n = x.size if axis is None else x.shape[axis]
    return xp.broadcast_to(xp.reshape(xp.astype(repeats, _I64), (-1,)), (n,))


def _repeat_size(xp, inputs, attrs):
    if attrs["size"] is not None:
        return {}
    r = _repeat_counts(xp, *inputs, attrs["axis"])
    if r.shape[0] == 0:
        return {"size": xp.sum(r)}
    return {"size": xp.where(xp.less(xp.min(r), 0), -1, xp.sum(r))}  # -1: a negative count (the canon says so)


def _repeat_check(xp, inputs, attrs):
    """With a given ``size``: a negative count is a ValueError and a size beyond the repeated
    elements an IndexError on every backend (one verdict computed on the device, read back)."""
    size = attrs["size"]
    if size is None:  # the size is the sum, computed and checked by _repeat_size and the canon
        return
    r = _repeat_counts(xp, *inputs, attrs["axis"])
    if r.shape[0] == 0:
        total = 0
    else:
        if bool(xp.logical_and(xp.greater_equal(xp.min(r), 0), xp.greater_equal(xp.sum(r), size))):
            return
        if int(xp.min(r)) < 0:
            raise ValueError("repeat_tensor(): repeats must be non-negative (a negative count was found)")
        total = int(xp.sum(r))
    if size > total:
        raise IndexError(f"repeat_tensor(): size {size} is more than the {total} repeated elements")


def _repeat(xp, x, repeats, axis, size):
    if axis is None:
        x, axis = xp.reshape(x, (-1,)), 0
    c = xp.cumulative_sum(_repeat_counts(xp, x, repeats, axis))
    src = xp.searchsorted(c, _arange(xp, size, x), side="right")
    return xp.take(x, src, axis=axis)


def _repeat_ref(x, repeats, axis=None, size=None):
    r = np.asarray(repeats).reshape(-1).astype(np.int64)  # numpy refuses uint64 counts (no safe cast to intp)
    out = np.repeat(np.asarray(x), r if r.size != 1 else int(r[0]), axis=axis)
    return out if size is None else np.take(out, np.arange(size), axis=0 if axis is None else axis)  # the first size


def _repeat_samples(d, rng):
    from anydevice.ops.samples import Sample, smooth, values

    def reps(n, dt=np.int64):
        return rng.integers(0, 3, size=n).astype(dt)

    out = [Sample([values(rng, d, (5,)), reps(5)], {}, "1-D"), Sample([values(rng, d, (2, 3)), reps(3)], {"axis": 1}, "axis=1"),
           Sample([values(rng, d, (2, 3)), reps(6, np.int32)], {}, "axis=None flattens, int32 repeats"),
           Sample([values(rng, d, (3, 2)), np.asarray([2])], {"axis": 0}, "one count for every row"),
           Sample([values(rng, d, (3,)), np.zeros(3, np.int64)], {}, "all zero")]
    if d in (_dt.float32, _dt.float64):
        out.append(Sample([smooth(rng, d, (3, 2)), np.asarray([1, 3, 2])], {"axis": 0}, "smooth", grad=True))
    return out


define("repeat_tensor", inputs=("x", "repeats"), attrs={"axis": Optional(Axis()), "size": Optional(Int(0))},
       positional=1, dtype_rule=with_indices("repeat_tensor", "repeats", "all"), canon=_repeat_canon, check=_repeat_check,
       shape_rule=_repeat_shape, reference=_repeat_ref, decomposition=_repeat, data_shape=_repeat_size,
       category="searching", samples=_repeat_samples,
       errors=[([np.ones(3, np.float32), np.asarray([1, -1, 2])], {}, ValueError, "a negative count"),
               ([np.ones(3, np.float32), np.asarray([3, -1, 2])], {"size": 2}, ValueError, "a negative count"),
               ([np.ones(3, np.float32), np.asarray([1, 1, 2])], {"size": 5}, IndexError, "size 5 is more than the 4"),
               ([np.ones(3, np.float32), np.asarray([1, 2])], {}, ValueError, "2 counts for 3 elements"),
               ([np.ones(3, np.float32), np.asarray([1.0, 2.0, 1.0], np.float32)], {}, TypeError, "float repeats")],
       doc="repeat_tensor(x, repeats, axis=None, /, *, size=None): each element repeated repeats[i] times (the "
           "Tensor case of repeat); size=None sums repeats on the device (one read-back); a given size keeps the "
           "first size results (more than the sum is an IndexError)")
