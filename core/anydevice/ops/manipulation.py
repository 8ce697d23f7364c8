"""Shape manipulation and dtype conversion: reshape, permute_dims, broadcast_to, concat, astype
(primitives); stack, squeeze, expand_dims, flip, matrix_transpose (composites)."""
from __future__ import annotations

import math

import numpy as np

from anydevice.base import dtypes as _dt
from anydevice.ops.registry import (
    Axes,
    Axis,
    Bool,
    DType,
    Int,
    Ints,
    Optional,
    Shape,
    broadcast_shapes,
    check_shape,
    define,
    normalize_axes,
    normalize_axis,
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


define("reshape", inputs=("x",), attrs={"shape": Shape(unknown=True), "copy": Optional(Bool())}, dtype_rule=_same(), canon=_canon_reshape,
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


define("permute_dims", inputs=("x",), attrs={"axes": Ints(())}, dtype_rule=_same(), canon=_canon_perm,
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


define("broadcast_to", inputs=("x",), attrs={"shape": Shape()}, dtype_rule=_same(), canon=_canon_bcast,
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


def _vjp_concat(xp, g, i, o, axis):
    if axis is None:
        g = xp.reshape(g, (-1,))
        grads, start = [], 0
        for x in i:
            n = x.size
            grads.append(xp.reshape(g[start:start + n], x.shape))
            start += n
        return tuple(grads)
    grads, start = [], 0
    for x in i:
        idx = [slice(None)] * g.ndim
        idx[axis] = slice(start, start + x.shape[axis])
        grads.append(g[tuple(idx)])
        start += x.shape[axis]
    return tuple(grads)


define("concat", inputs=("*arrays",), attrs={"axis": Optional(Int(0), default=0)}, dtype_rule=same(), canon=_canon_concat,
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


define("stack", inputs=("*arrays",), attrs={"axis": Axis(0, extra=1)}, dtype_rule=same(), shape_rule=_stack_shape,
       reference=lambda arrays, axis=0: np.stack(arrays, axis=axis), decomposition=_stack, category="manipulation")


# --- squeeze / expand_dims / flip / matrix_transpose ----------------------------------------------
def _canon_squeeze(shapes, attrs):
    shape = shapes[0]
    axes = normalize_axes(attrs["axis"], len(shape), "squeeze")
    for a in axes:
        if shape[a] != 1:
            raise ValueError(f"squeeze(): axis {a} has size {shape[a]}, only size-1 axes can be removed")
    return {"axis": axes}


define("squeeze", inputs=("x",), attrs={"axis": Axes(None)}, dtype_rule=_same(), canon=_canon_squeeze,
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


define("expand_dims", inputs=("x",), attrs={"axis": Axis(0, extra=1)}, dtype_rule=_same(), canon=_canon_expand,
       shape_rule=_expand_shape, reference=lambda x, axis: np.expand_dims(x, axis),
       decomposition=lambda xp, x, axis: xp.reshape(x, _expand_shape([x.shape], {"axis": normalize_axis(axis, x.ndim + 1, "expand_dims")})),
       category="manipulation")


def _flip(xp, x, axis=None):
    axes = normalize_axes(axis, x.ndim, "flip")
    return x[tuple(slice(None, None, -1) if k in axes else slice(None) for k in range(x.ndim))] if x.ndim else x


define("flip", inputs=("x",), attrs={"axis": Axes(None)}, dtype_rule=_same(),
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


define("astype", inputs=("x",), attrs={"dtype": DType(required=True), "copy": Bool(True)}, dtype_rule=_astype_rule, canon=_canon_astype,
       shape_rule=lambda s, a: s[0], reference=_astype_ref, vjp=_vjp_astype, category="manipulation",
       domain="astype", doc="convert to another dtype (float to int truncates; out-of-range values are undefined)")
