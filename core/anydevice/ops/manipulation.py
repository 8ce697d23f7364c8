"""Shape manipulation and dtype conversion: reshape, permute_dims, broadcast_to, concat, astype
(primitives); stack, squeeze, expand_dims, flip, matrix_transpose, roll, tile, repeat, diff and
tensordot (composites, decomposed into the primitives)."""
from __future__ import annotations

import math

import numpy as np

from anydevice.base import dtypes as _dt
from anydevice.ops.registry import (
    REQUIRED,
    Attr,
    Axes,
    Axis,
    Bool,
    DType,
    Int,
    Ints,
    Optional,
    Shape,
    _is_int,
    broadcast_shapes,
    check_shape,
    define,
    normalize_axes,
    normalize_axis,
    partial_vjp,
    same,
)
from anydevice.ops.statistical import reduced_shape


def _same(cat="all"):
    def rule(ds, attrs):
        return ds[0], ds[0]

    rule.category = cat
    return rule


# --- reshape ------------------------------------------------------------------------------------
def _canon_reshape(shapes, attrs):
    src = shapes[0]
    shape = check_shape(attrs["shape"], "reshape", unknown=True)
    n = math.prod(src)
    if -1 in shape:
        rest = math.prod(s for s in shape if s != -1)
        if rest == 0 or n % rest:
            raise ValueError(f"reshape(): cannot reshape an array of shape {src} ({n} elements) into {shape}")
        shape = tuple(n // rest if s == -1 else s for s in shape)
    if math.prod(shape) != n:
        raise ValueError(f"reshape(): cannot reshape an array of shape {src} ({n} elements) into {shape}")
    return {**attrs, "shape": shape}


define("reshape", positional=1, inputs=("x",), attrs={"shape": Shape(REQUIRED, unknown=True), "copy": Optional(Bool())}, dtype_rule=_same(), canon=_canon_reshape,
       shape_rule=lambda s, a: a["shape"], reference=lambda x, shape, copy=None: np.reshape(x, shape),
       vjp=lambda xp, g, i, o, shape, copy=None: (xp.reshape(g, i[0].shape),), category="manipulation")


# --- permute_dims -------------------------------------------------------------------------------
def _canon_perm(shapes, attrs):
    nd = len(shapes[0])
    axes = tuple(attrs["axes"])
    if len(axes) != nd or sorted(a % nd if nd and -nd <= a < nd else -1 for a in axes) != list(range(nd)):
        raise ValueError(f"permute_dims(): axes {axes} is not a permutation of 0..{nd - 1} (negative axes count "
                         f"from the end)")
    return {"axes": tuple(a % nd for a in axes)}


def _vjp_perm(xp, g, i, o, axes):
    inv = [0] * len(axes)
    for k, a in enumerate(axes):
        inv[a] = k
    return (xp.permute_dims(g, tuple(inv)),)


define("permute_dims", inputs=("x",), attrs={"axes": Ints(REQUIRED)}, dtype_rule=_same(), canon=_canon_perm,
       shape_rule=lambda s, a: tuple(s[0][k] for k in a["axes"]),
       reference=lambda x, axes: np.transpose(x, axes), vjp=_vjp_perm, category="manipulation")


# --- broadcast_to -----------------------------------------------------------------------------------
def _canon_bcast(shapes, attrs):
    shape = check_shape(attrs["shape"], "broadcast_to")
    src = shapes[0]
    if len(src) > len(shape) or broadcast_shapes(src, shape, opname="broadcast_to") != shape:
        raise ValueError(f"broadcast_to(): cannot broadcast shape {src} to {shape}")
    return {"shape": shape}


def _vjp_bcast(xp, g, i, o, shape):
    from anydevice.ops.elementwise import unbroadcast

    return (unbroadcast(xp, g, i[0].shape),)


define("broadcast_to", inputs=("x",), attrs={"shape": Shape(REQUIRED)}, dtype_rule=_same(), canon=_canon_bcast,
       shape_rule=lambda s, a: a["shape"], reference=lambda x, shape: np.broadcast_to(x, shape).copy(),
       vjp=_vjp_bcast, category="manipulation")


# --- concat / stack ------------------------------------------------------------------------------------
def _canon_concat(shapes, attrs):
    shapes = shapes[0]
    axis = attrs["axis"]
    if axis is None:
        return {"axis": None}
    nd = len(shapes[0])
    if nd == 0:
        raise ValueError("concat(): 0-d arrays cannot be concatenated; use stack() or axis=None")
    axis = normalize_axis(axis, nd, "concat")
    for s in shapes[1:]:
        if len(s) != nd or any(a != b for k, (a, b) in enumerate(zip(s, shapes[0])) if k != axis):
            raise ValueError(f"concat(): shapes {tuple(shapes)} differ outside axis {axis}")
    return {"axis": axis}


def _concat_shape(shapes, attrs):
    shapes = shapes[0]
    axis = attrs["axis"]
    if axis is None:
        return (sum(int(np.prod(s, dtype=np.int64)) for s in shapes),)
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return tuple(out)


def _concat_ref(arrays, axis):
    if axis is None:
        return np.concatenate([np.reshape(a, -1) for a in arrays])
    return np.concatenate(arrays, axis=axis)


@partial_vjp
def _vjp_concat(xp, g, i, o, axis, needs=None):
    needs = needs or (True,) * len(i)
    if axis is None:
        g = xp.reshape(g, (-1,))
        grads, start = [], 0
        for x, need in zip(i, needs):
            n = x.size
            grads.append(xp.reshape(g[start:start + n], x.shape) if need else None)
            start += n
        return tuple(grads)
    grads, start = [], 0
    for x, need in zip(i, needs):
        idx = [slice(None)] * g.ndim
        idx[axis] = slice(start, start + x.shape[axis])
        grads.append(g[tuple(idx)] if need else None)
        start += x.shape[axis]
    return tuple(grads)


define("concat", positional=0, inputs=("*arrays",), attrs={"axis": Optional(Int(0), default=0)}, dtype_rule=same(), canon=_canon_concat,
       shape_rule=_concat_shape, reference=_concat_ref, vjp=_vjp_concat, category="manipulation")


def _stack(xp, arrays, axis=0):
    nd = arrays[0].ndim + 1
    axis = normalize_axis(axis, nd, "stack")
    for a in arrays[1:]:
        if a.shape != arrays[0].shape:
            raise ValueError(f"stack(): all arrays must have one shape, got {arrays[0].shape} and {a.shape}")
    return xp.concat([xp.expand_dims(a, axis=axis) for a in arrays], axis=axis)


def _stack_shape(shapes, attrs):
    shapes = shapes[0]
    nd = len(shapes[0]) + 1
    axis = normalize_axis(attrs["axis"], nd, "stack")
    for s in shapes[1:]:
        if s != shapes[0]:
            raise ValueError(f"stack(): all arrays must have one shape, got {shapes[0]} and {s}")
    out = list(shapes[0])
    out.insert(axis, len(shapes))
    return tuple(out)


define("stack", positional=0, inputs=("*arrays",), attrs={"axis": Axis(0, extra=1)}, dtype_rule=same(), shape_rule=_stack_shape,
       reference=lambda arrays, axis=0: np.stack(arrays, axis=axis), decomposition=_stack, category="manipulation")


# --- squeeze / expand_dims / flip / matrix_transpose ----------------------------------------------
def _canon_squeeze(shapes, attrs):
    shape = shapes[0]
    axes = normalize_axes(attrs["axis"], len(shape), "squeeze")
    for a in axes:
        if shape[a] != 1:
            raise ValueError(f"squeeze(): axis {a} has size {shape[a]}, only size-1 axes can be removed")
    return {"axis": axes}


define("squeeze", inputs=("x",), attrs={"axis": Axes(REQUIRED)}, dtype_rule=_same(), canon=_canon_squeeze,
       shape_rule=lambda s, a: reduced_shape(s[0], a["axis"], False),
       reference=lambda x, axis: np.squeeze(x, axis=axis),
       decomposition=lambda xp, x, axis: xp.reshape(x, reduced_shape(x.shape, normalize_axes(axis, x.ndim, "squeeze"), False)),
       category="manipulation")


def _canon_expand(shapes, attrs):
    nd = len(shapes[0]) + 1
    return {"axis": normalize_axis(attrs["axis"], nd, "expand_dims")}


def _expand_shape(shapes, attrs):
    out = list(shapes[0])
    out.insert(attrs["axis"], 1)
    return tuple(out)


define("expand_dims", inputs=("x",), attrs={"axis": Axis(REQUIRED, extra=1)}, dtype_rule=_same(), canon=_canon_expand,
       shape_rule=_expand_shape, reference=lambda x, axis: np.expand_dims(x, axis),
       decomposition=lambda xp, x, axis: xp.reshape(x, _expand_shape([x.shape], {"axis": normalize_axis(axis, x.ndim + 1, "expand_dims")})),
       category="manipulation")


def _flip(xp, x, axis=None):
    axes = normalize_axes(axis, x.ndim, "flip")
    return x[tuple(slice(None, None, -1) if k in axes else slice(None) for k in range(x.ndim))] if x.ndim else x


define("flip", positional=0, inputs=("x",), attrs={"axis": Axes(None)}, dtype_rule=_same(),
       canon=lambda s, a: {"axis": normalize_axes(a["axis"], len(s[0]), "flip")},
       shape_rule=lambda s, a: s[0], reference=lambda x, axis: np.flip(x, axis=axis) if x.ndim else x,
       decomposition=_flip, category="manipulation")


def _mt_shape(shapes, attrs):
    s = shapes[0]
    if len(s) < 2:
        raise ValueError(f"matrix_transpose(): needs at least 2 dimensions, got shape {s}")
    return s[:-2] + (s[-1], s[-2])


define("matrix_transpose", inputs=("x",), dtype_rule=_same(), shape_rule=_mt_shape,
       reference=lambda x: np.swapaxes(x, -1, -2),
       decomposition=lambda xp, x: xp.permute_dims(x, tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)),
       category="linalg")


# --- astype ---------------------------------------------------------------------------------------------
def _astype_rule(ds, attrs):
    out = _dt.dtype(attrs["dtype"])
    if ds[0].kind == "complex" and out.kind != "complex":
        raise TypeError(f"astype(): casting {ds[0].name} to {out.name} would discard the imaginary part")
    return ds[0], out


_astype_rule.category = "all"


def _astype_ref(x, dtype, copy=True):
    d = _dt.dtype(dtype)
    if x.dtype.kind == "c" and d.kind != "complex":
        raise TypeError("astype(): casting complex to a real dtype discards the imaginary part; use real() first")
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(d.numpy)


def _vjp_astype(xp, g, i, o, dtype, copy=True):
    return (xp.astype(g, i[0].dtype) if i[0].dtype.kind in ("float", "complex") else None,)


def _canon_astype(shapes, attrs):
    return {"dtype": _dt.dtype(attrs["dtype"]), "copy": attrs["copy"]}


define("astype", positional=(1, 1), inputs=("x",), attrs={"dtype": DType(REQUIRED, required=True), "copy": Bool(True)}, dtype_rule=_astype_rule, canon=_canon_astype,
       shape_rule=lambda s, a: s[0], reference=_astype_ref, vjp=_vjp_astype, category="manipulation",
       domain="astype", doc="convert to another dtype (float to int truncates; out-of-range values are undefined)")


# --- roll / tile / repeat / diff / tensordot (Array API 2024.12) ----------------------------------------
def table(name, rows):
    """Conformance samples from a table (:func:`anydevice.ops.samples.table`), loaded when asked for."""
    def gen(d, rng):
        from anydevice.ops.samples import table as make

        return make(name, rows)(d, rng)

    return gen


def _idx(ndim: int, axis: int, sl: slice) -> tuple:
    return tuple(sl if k == axis else slice(None) for k in range(ndim))


class IntOrInts(Attr):
    """An int or a tuple (or list) of ints (roll's shift and axis); normalized to a tuple."""

    __slots__ = ()
    annotation = "int | tuple[int, ...]"

    def check(self, ctx, name, v):
        if _is_int(v):
            return (int(v),)
        if not isinstance(v, (tuple, list)) or not all(_is_int(e) for e in v):
            self.fail(ctx, name, v)
        return tuple(int(e) for e in v)

    def allowed(self) -> str:
        return "an int or a tuple of ints"


def _canon_roll(shapes, attrs):
    shift, axis, nd = attrs["shift"], attrs["axis"], len(shapes[0])
    shift = (shift,) if _is_int(shift) else tuple(shift)  # the schema's form (samples and callers may pass raw values)
    axis = (axis,) if _is_int(axis) else axis
    if axis is None:
        if len(shift) != 1:
            raise ValueError(f"roll(): shift {shift} needs a tuple axis of as many axes (axis=None rolls the "
                             f"flattened array by one int)")
        return {"shift": shift[0], "axis": None}
    axis = tuple(normalize_axis(a, nd, "roll") for a in axis)
    if len(shift) == 1:
        shift = shift * len(axis)
    if len(shift) != len(axis):
        raise ValueError(f"roll(): shift {shift} and axis {axis} must have as many elements")
    return {"shift": shift, "axis": axis}


def _roll(xp, x, shift, axis=None):
    if axis is None:
        return xp.reshape(_roll(xp, xp.reshape(x, (-1,)), (shift,), (0,)), x.shape)
    for s, a in zip(shift, axis):
        n = x.shape[a]
        k = s % n if n else 0
        if k:
            x = xp.concat([x[_idx(x.ndim, a, slice(n - k, None))], x[_idx(x.ndim, a, slice(0, n - k))]], axis=a)
    return x


def _vjp_roll(xp, g, i, o, shift, axis=None):
    back = -shift if axis is None else tuple(-s for s in shift)
    return (xp.roll(g, back, axis=axis),)


define("roll", positional=1, inputs=("x",), attrs={"shift": IntOrInts(REQUIRED), "axis": Optional(IntOrInts())},
       dtype_rule=_same(), canon=_canon_roll, shape_rule=lambda s, a: s[0],
       reference=lambda x, shift, axis=None: np.roll(x, shift, axis=axis).reshape(np.shape(x)), vjp=_vjp_roll, decomposition=_roll,
       category="manipulation", doc="roll elements along axes (axis=None: of the flattened array); elements "
                                    "shifted past the end come back at the start",
       samples=table("roll", [
           ([(2, 5)], {"shift": 2, "axis": 1}, "(2, 5), shift 2 along axis 1"),
           ([(2, 5)], {"shift": -3}, "axis=None (flattened), shift -3"),
           ([(2, 3, 4)], {"shift": (1, -5), "axis": (0, 2)}, "two axes, shift larger than the size"),
           ([(3, 4)], {"shift": 1, "axis": (0, 1)}, "one shift for two axes"),
           ([(3,)], {"shift": (1, 1), "axis": (0, 0)}, "a repeated axis adds its shifts"),
           ([()], {"shift": 4}, "0-d"), ([(0, 3)], {"shift": 1, "axis": 0}, "empty")]),
       errors=[([np.ones((2, 3), np.float32)], {"shift": (1, 2), "axis": 0}, ValueError, "two shifts, one axis"),
               ([np.ones((2, 3), np.float32)], {"shift": 1, "axis": 2}, ValueError, "axis out of range"),
               ([np.ones((2, 3), np.float32)], {"shift": 1.5}, TypeError, "float shift")])


def _tile_dims(shape, reps):
    nd = max(len(shape), len(reps))
    return (1,) * (nd - len(shape)) + tuple(shape), (1,) * (nd - len(reps)) + tuple(reps)


def _canon_tile(shapes, attrs):
    reps = attrs["repetitions"]
    if any(r < 0 for r in reps):
        raise ValueError(f"tile(): repetitions {reps} must be non-negative ints")
    return attrs


def _tile_shape(shapes, attrs):
    shape, reps = _tile_dims(shapes[0], attrs["repetitions"])
    return tuple(s * r for s, r in zip(shape, reps))


def _tile(xp, x, repetitions):
    shape, reps = _tile_dims(x.shape, repetitions)
    y = xp.reshape(x, tuple(v for s in shape for v in (1, s)))
    y = xp.broadcast_to(y, tuple(v for r, s in zip(reps, shape) for v in (r, s)))
    return xp.reshape(y, tuple(r * s for r, s in zip(reps, shape)))


def _vjp_tile(xp, g, i, o, repetitions):
    shape, reps = _tile_dims(i[0].shape, repetitions)
    g = xp.reshape(g, tuple(v for r, s in zip(reps, shape) for v in (r, s)))
    return (xp.reshape(xp.sum(g, axis=tuple(range(0, 2 * len(shape), 2))), i[0].shape),)


define("tile", positional=(1, 1), inputs=("x",), attrs={"repetitions": Ints(REQUIRED)}, dtype_rule=_same(),
       canon=_canon_tile, shape_rule=_tile_shape, reference=lambda x, repetitions: np.tile(x, repetitions),
       vjp=_vjp_tile, decomposition=_tile, category="manipulation",
       doc="x repeated as blocks: repetitions[i] copies along axis i (the shorter of x.shape and repetitions "
           "is padded with leading 1s)",
       samples=table("tile", [
           ([(2, 3)], {"repetitions": (2, 2)}, "(2, 3) tiled (2, 2)"),
           ([(3,)], {"repetitions": (2, 1, 3)}, "more repetitions than dimensions"),
           ([(2, 3, 2)], {"repetitions": (2,)}, "fewer repetitions than dimensions"),
           ([()], {"repetitions": (3,)}, "0-d"), ([(2, 3)], {"repetitions": (0, 1)}, "zero repetitions"),
           ([(2, 3)], {"repetitions": ()}, "no repetitions")]),
       errors=[([np.ones((2, 3), np.float32)], {"repetitions": (2, -1)}, ValueError, "negative repetitions"),
               ([np.ones((2, 3), np.float32)], {"repetitions": 2}, TypeError, "an int, not a tuple")])


def _repeat_shape(shapes, attrs):
    s, r, axis = shapes[0], attrs["repeats"], attrs["axis"]
    if axis is None:
        return (math.prod(s) * r,)
    return s[:axis] + (s[axis] * r,) + s[axis + 1:]


def _repeat(xp, x, repeats, axis=None):
    if axis is None:
        x, axis = xp.reshape(x, (-1,)), 0
    s = x.shape
    y = xp.broadcast_to(xp.expand_dims(x, axis=axis + 1), s[:axis + 1] + (repeats,) + s[axis + 1:])
    return xp.reshape(y, s[:axis] + (s[axis] * repeats,) + s[axis + 1:])


def _vjp_repeat(xp, g, i, o, repeats, axis=None):
    s = i[0].shape
    if axis is None:
        return (xp.reshape(xp.sum(xp.reshape(g, (math.prod(s), repeats)), axis=1), s),)
    return (xp.sum(xp.reshape(g, s[:axis] + (s[axis], repeats) + s[axis + 1:]), axis=axis + 1),)


define("repeat", positional=(1, 1), inputs=("x",), attrs={"repeats": Int(REQUIRED, lo=0), "axis": Optional(Axis())},
       dtype_rule=_same(), shape_rule=_repeat_shape,
       reference=lambda x, repeats, axis=None: np.repeat(x, repeats, axis=axis), vjp=_vjp_repeat,
       decomposition=_repeat, category="manipulation",
       doc="each element repeated ``repeats`` times along axis (axis=None: of the flattened array)",
       samples=table("repeat", [
           ([(2, 3)], {"repeats": 2, "axis": 1}, "(2, 3), 2 along axis 1"),
           ([(2, 3)], {"repeats": 3}, "axis=None (flattened)"), ([(2, 3)], {"repeats": 2, "axis": -2}, "axis -2"),
           ([(2, 3)], {"repeats": 0, "axis": 0}, "zero repeats"), ([()], {"repeats": 2}, "0-d"),
           ([(0, 2)], {"repeats": 2, "axis": 1}, "empty")]),
       errors=[([np.ones((2, 3), np.float32)], {"repeats": -1}, ValueError, "negative repeats"),
               ([np.ones((2, 3), np.float32)], {"repeats": 2, "axis": 2}, ValueError, "axis out of range"),
               ([np.ones((2, 3), np.float32)], {"repeats": 1.5}, TypeError, "float repeats")])


def _canon_diff(shapes, attrs):
    if not shapes[0]:
        raise ValueError("diff(): x must have at least one dimension, got a 0-d array")
    axis = normalize_axis(attrs["axis"], len(shapes[0]), "diff")
    # n beyond the axis length gives the same empty result as n equal to it (and never loops n times)
    return {**attrs, "axis": axis, "n": min(attrs["n"], shapes[0][axis])}


def _diff_shape(shapes, attrs):
    s, a = shapes[0], attrs["axis"]
    return s[:a] + (max(s[a] - attrs["n"], 0),) + s[a + 1:]


def _diff(xp, x, axis=-1, n=1):
    for _ in range(n):
        m = x.shape[axis]
        x = x[_idx(x.ndim, axis, slice(1, None))] - x[_idx(x.ndim, axis, slice(0, max(m - 1, 0)))]
    return x


def _vjp_diff(xp, g, i, o, axis=-1, n=1):
    x = i[0]
    if x.shape[axis] <= n:  # an empty result: no element of x reached it
        return (xp.zeros_like(x),)
    for _ in range(n):  # d/dx_j of (x_{j} - x_{j-1}) terms: g_{j-1} - g_j (zero outside)
        pad = list(g.shape)
        pad[axis] = 1
        z = xp.full(tuple(pad), 0, dtype=g.dtype, device=g.device)
        g = xp.concat([z, g], axis=axis) - xp.concat([g, z], axis=axis)
    return (g,)


define("diff", positional=0, inputs=("x",), attrs={"axis": Axis(-1), "n": Int(1, lo=0)}, dtype_rule=_same("numeric"),
       canon=_canon_diff, shape_rule=_diff_shape, reference=lambda x, axis=-1, n=1: np.diff(x, n=n, axis=axis),
       vjp=_vjp_diff, decomposition=_diff, category="manipulation",
       doc="n-th forward difference along axis: out[i] = x[i + 1] - x[i], applied n times (prepend/append "
           "values are concatenated to x first)",
       samples=table("diff", [
           ([(2, 5)], {}, "(2, 5), last axis"), ([(4, 3)], {"axis": 0, "n": 2}, "axis 0, n=2"),
           ([(6,)], {"n": 3}, "n=3"), ([(3,)], {"n": 0}, "n=0 (x itself)"), ([(3,)], {"n": 5}, "n beyond the size"),
           ([(0, 3)], {"axis": 0}, "empty")]),
       errors=[([np.ones((), np.float32)], {}, ValueError, "0-d x"),
               ([np.ones((2, 3), np.float32)], {"n": -1}, ValueError, "negative n"),
               ([np.ones((2, 3), np.float32)], {"axis": 2}, ValueError, "axis out of range")])


class TensordotAxes(Attr):
    """tensordot's axes: a non-negative int N (the last N axes of x1 with the first N of x2) or
    two sequences of as many ints; normalized to a pair of tuples of ints."""

    __slots__ = ()
    annotation = "int | tuple[Sequence[int], Sequence[int]]"

    def check(self, ctx, name, v):
        if _is_int(v):
            n = int(v)
            if n < 0:
                self.fail(ctx, name, v, ValueError)
            return n
        ok = (isinstance(v, (tuple, list)) and len(v) == 2
              and all(isinstance(a, (tuple, list)) and all(_is_int(e) for e in a) for a in v))
        if not ok:
            self.fail(ctx, name, v)
        return tuple(tuple(int(e) for e in a) for a in v)

    def allowed(self) -> str:
        return "a non-negative int or a pair of sequences of ints"


def _canon_tensordot(shapes, attrs):
    s1, s2 = shapes
    axes = attrs["axes"]
    if type(axes) is int:
        if axes > min(len(s1), len(s2)):
            raise ValueError(f"tensordot(): axes={axes} is more than the dimensions of {s1} and {s2}")
        a1, a2 = tuple(range(len(s1) - axes, len(s1))), tuple(range(axes))
    else:
        a1 = tuple(normalize_axis(a, len(s1), "tensordot", "axes[0]") for a in axes[0])
        a2 = tuple(normalize_axis(a, len(s2), "tensordot", "axes[1]") for a in axes[1])
        if len(a1) != len(a2):
            raise ValueError(f"tensordot(): axes {axes} name {len(a1)} axes of x1 but {len(a2)} of x2")
        for what, a in (("axes[0]", a1), ("axes[1]", a2)):
            if len(set(a)) != len(a):
                raise ValueError(f"tensordot(): {what} {a} repeats an axis")
    for p, q in zip(a1, a2):
        if s1[p] != s2[q]:
            raise ValueError(f"tensordot(): axis {p} of x1 {s1} and axis {q} of x2 {s2} differ in size "
                             f"({s1[p]} != {s2[q]})")
    return {"axes": (a1, a2)}


def _td_free(ndim, axes):
    return tuple(k for k in range(ndim) if k not in axes)


def _td_shape(shapes, attrs):
    (s1, s2), (a1, a2) = shapes, attrs["axes"]
    return tuple(s1[k] for k in _td_free(len(s1), a1)) + tuple(s2[k] for k in _td_free(len(s2), a2))


def _td_operands(xp, x1, x2, axes):
    """x1 as an (M, K) matrix, x2 as (K, N): free axes first (x1) or last (x2), contracted ones in order."""
    a1, a2 = axes
    f1, f2 = _td_free(x1.ndim, a1), _td_free(x2.ndim, a2)
    k = math.prod(x1.shape[p] for p in a1)
    m, n = math.prod(x1.shape[p] for p in f1), math.prod(x2.shape[p] for p in f2)
    a = xp.reshape(xp.permute_dims(x1, f1 + a1), (m, k))
    b = xp.reshape(xp.permute_dims(x2, a2 + f2), (k, n))
    return a, b, f1, f2


def _tensordot(xp, x1, x2, axes=2):
    a, b, f1, f2 = _td_operands(xp, x1, x2, axes)
    return xp.reshape(xp.matmul(a, b), tuple(x1.shape[p] for p in f1) + tuple(x2.shape[p] for p in f2))


def _inverse(perm):
    inv = [0] * len(perm)
    for k, p in enumerate(perm):
        inv[p] = k
    return tuple(inv)


def _vjp_tensordot(xp, g, i, o, axes=2):
    x1, x2 = i
    a, b, f1, f2 = _td_operands(xp, x1, x2, axes)
    g = xp.reshape(g, (a.shape[0], b.shape[1]))
    ga = xp.reshape(xp.matmul(g, xp.matrix_transpose(b)), tuple(x1.shape[p] for p in f1 + axes[0]))
    gb = xp.reshape(xp.matmul(xp.matrix_transpose(a), g), tuple(x2.shape[p] for p in axes[1] + f2))
    return xp.permute_dims(ga, _inverse(f1 + axes[0])), xp.permute_dims(gb, _inverse(axes[1] + f2))


define("tensordot", positional=0, inputs=("x1", "x2"), attrs={"axes": TensordotAxes(2)}, dtype_rule=same("numeric"),
       canon=_canon_tensordot, shape_rule=_td_shape,
       reference=lambda x1, x2, axes=2: np.tensordot(x1, x2, axes=axes if type(axes) is int else [list(a) for a in axes]),
       vjp=_vjp_tensordot, decomposition=_tensordot, category="linalg",
       tolerance={"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2)},
       doc="sum of products over the given axes of x1 and x2 (a permute, reshape and matmul)",
       samples=table("tensordot", [
           ([(2, 3, 4), (3, 4, 5)], {}, "axes=2"), ([(2, 3), (3, 4)], {"axes": 1}, "axes=1 (matmul)"),
           ([(2, 3), (4, 5)], {"axes": 0}, "axes=0 (outer product)"),
           ([(3, 2, 4), (4, 3)], {"axes": ((0, 2), (1, 0))}, "explicit axes, out of order"),
           ([(3, 2), (2, 3)], {"axes": ((-1,), (0,))}, "negative axis"),
           ([(0, 3), (3, 2)], {"axes": 1}, "empty")]),
       errors=[([np.ones((2, 3), np.float32), np.ones((4, 2), np.float32)], {"axes": 1}, ValueError, "sizes differ"),
               ([np.ones((2, 3), np.float32), np.ones((3,), np.float32)], {"axes": 3}, ValueError, "axes beyond ndim"),
               ([np.ones((2, 3), np.float32), np.ones((3, 2), np.float32)], {"axes": ((1, 0), (0,))}, ValueError,
                "2 axes of x1, 1 of x2"),
               ([np.ones((2, 3), np.float32), np.ones((3, 2), np.float32)], {"axes": -1}, ValueError, "negative axes"),
               ([np.ones((2, 3), np.float32), np.ones((3, 2), np.float32)], {"axes": 1.0}, TypeError, "float axes")])
