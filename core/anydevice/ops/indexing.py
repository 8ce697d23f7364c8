"""Indexing: ``getitem`` and ``setitem`` (basic indexing) and ``take`` (primitives).

A basic index is canonicalized to one entry per input axis plus inserted axes:
``("s", start, step, length)`` for a slice, ``("i", k)`` for an integer (the axis is
dropped), ``("n",)`` for ``None`` (a new axis of size 1). Kernels receive that tuple as
the ``key`` attribute; :func:`to_numpy_key` turns it into a numpy index.
"""
from __future__ import annotations

import numpy as np

from anydevice.base import dtypes as _dt
from anydevice.ops.registry import (
    REQUIRED,
    Attr,
    Axis,
    Int,
    Optional,
    Shape,
    check_category,
    check_index_range,
    define,
    normalize_axis,
    with_indices,
)


def _is_canonical(key) -> bool:
    return isinstance(key, tuple) and all(
        isinstance(e, tuple) and e and e[0] in ("s", "i", "n") for e in key
    ) and (len(key) > 0)


def canonical_key(key, shape) -> tuple:
    if _is_canonical(key) and sum(1 for e in key if e[0] != "n") == len(shape):
        return key
    if not isinstance(key, tuple):
        key = (key,)
    n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if n_real > len(shape):
        raise IndexError(f"too many indices: {n_real} for a tensor of {len(shape)} dimension(s)")
    out, axis = [], 0
    for k in key:
        if k is Ellipsis:
            for _ in range(len(shape) - n_real):
                out.append(("s", 0, 1, shape[axis]))
                axis += 1
        elif k is None:
            out.append(("n",))
        elif isinstance(k, slice):
            start, stop, step = k.indices(shape[axis])
            out.append(("s", start, step, len(range(start, stop, step))))
            axis += 1
        elif isinstance(k, (int, np.integer)) and not isinstance(k, bool) or _is_int_scalar_tensor(k):
            i = int(k)
            if not -shape[axis] <= i < shape[axis]:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {shape[axis]}")
            out.append(("i", i % shape[axis]))
            axis += 1
        else:
            what = f"a {k.dtype.name} tensor of shape {k.shape}" if hasattr(k, "shape") and hasattr(k, "dtype") \
                else f"{k!r} ({type(k).__name__})"
            raise IndexError(
                f"unsupported index {what}: use integers, slices, None, '...', or alone a 1-D integer tensor "
                f"(gather along axis 0 with take()) or a boolean mask (x[mask])"
            )
    while axis < len(shape):
        out.append(("s", 0, 1, shape[axis]))
        axis += 1
    return tuple(out)


def _is_int_scalar_tensor(k):
    """A 0-d integer array (any array type with ``ndim`` and an anydevice ``dtype``)."""
    return getattr(k, "ndim", None) == 0 and getattr(getattr(k, "dtype", None), "kind", None) in ("int", "uint")


def to_numpy_key(key) -> tuple:
    out = []
    for e in key:
        if e[0] == "s":
            _, start, step, n = e
            stop = start + step * n
            out.append(slice(start, stop if stop >= 0 else None, step))
        elif e[0] == "i":
            out.append(e[1])
        else:
            out.append(None)
    return tuple(out)


def key_shape(key) -> tuple:
    return tuple(1 if e[0] == "n" else e[3] for e in key if e[0] != "i")


def _same(ds, attrs):
    return ds[0], ds[0]


_same.category = "all"


def _getitem_ref(x, key):
    return np.array(x[to_numpy_key(key)])


def _vjp_getitem(xp, g, i, o, key):
    return (xp.getitem_grad(g, shape=i[0].shape, key=key),)


def _getitem_grad(xp, g, shape, key):
    zero = {"bool": False, "int": 0, "uint": 0, "float": 0.0, "complex": 0j}[g.dtype.kind]
    return xp.setitem(xp.full(shape, zero, dtype=g.dtype, device=g.device), g, key=key)


def _getitem_grad_ref(g, shape, key):
    y = np.zeros(shape, g.dtype)
    y[to_numpy_key(key)] = g
    return y


def _getitem_grad_shape(shapes, attrs):
    want = key_shape(attrs["key"])
    if tuple(shapes[0]) != want:
        raise ValueError(f"getitem_grad(): grad of shape {tuple(shapes[0])} does not fit x[key] of shape {want} "
                         f"(x of shape {attrs['shape']})")
    return attrs["shape"]


def _getitem_grad_samples(d, rng):
    from anydevice.ops.samples import _GRAD_DTYPES, Sample, values

    cases = [((4, 5), (slice(1, 3),)), ((4, 5), (slice(None), slice(None, None, 2))), ((3, 4), (1,)),
             ((2, 3, 4), (None, 0, slice(1, None), -1)), ((3,), ())]
    out = []
    for shape, key in cases:
        ck = canonical_key(key, shape)
        out.append(Sample([values(rng, d, key_shape(ck))], {"shape": shape, "key": ck}, f"{shape}[{key}]",
                          grad=d in _GRAD_DTYPES))  # linear in grad: any values
    return out


def _canon_key(shapes, attrs):
    return {"key": canonical_key(attrs["key"], shapes[0])}


define("getitem", inputs=("x",), attrs={"key": Attr(())}, dtype_rule=_same, canon=_canon_key, shape_rule=lambda s, a: key_shape(a["key"]),
       reference=_getitem_ref, vjp=_vjp_getitem, category="indexing",
       doc="basic indexing x[key] with a canonical key (see module docstring)")
define("getitem_grad", inputs=("grad",), attrs={"shape": Shape(), "key": Attr(())}, dtype_rule=_same,
       canon=lambda shapes, a: {"shape": a["shape"], "key": canonical_key(a["key"], a["shape"])},
       shape_rule=_getitem_grad_shape, reference=_getitem_grad_ref, decomposition=_getitem_grad,
       vjp=lambda xp, g, i, o, shape, key: (xp.getitem(g, key=key),), category="indexing",
       samples=_getitem_grad_samples,
       errors=[([np.ones((2, 5), np.float32)], {"shape": (4, 5), "key": (slice(0, 3),)}, ValueError,
                "grad (2, 5) for x[0:3] of shape (3, 5)")],
       doc="the gradient of x[key]: zeros of x's shape with grad at key (getitem's VJP in one op)")


def _setitem_rule(ds, attrs):
    x, v = ds
    if _dt._PROMO.get((x, v)) is not x:
        raise TypeError(f"cannot assign a {v.name} value into a {x.name} tensor without changing its dtype")
    return x, x


_setitem_rule.category = "all"


def _setitem_shape(shapes, attrs):
    x, v = shapes
    target = key_shape(attrs["key"])
    from anydevice.ops.registry import broadcast_shapes

    if len(v) > len(target) or broadcast_shapes(v, target, opname="setitem") != target:
        raise ValueError(f"setitem: value of shape {v} cannot be broadcast to the indexed shape {target}")
    return x


def _setitem_ref(x, value, key):
    y = np.array(x, copy=True)
    y[to_numpy_key(key)] = value
    return y


def _vjp_setitem(xp, g, i, o, key):
    from anydevice.ops.elementwise import unbroadcast

    gx = xp.setitem(g, xp.zeros_like(g[to_numpy_key(key)]), key=key)
    gv = unbroadcast(xp, xp.getitem(g, key=key), i[1].shape)
    return gx, gv


define("setitem", inputs=("x", "value"), attrs={"key": Attr(())}, dtype_rule=_setitem_rule, canon=_canon_key, shape_rule=_setitem_shape,
       reference=_setitem_ref, vjp=_vjp_setitem, category="indexing",
       doc="a copy of x with x[key] = value (Tensor.__setitem__ rebinds x to it)")


# --- index_in_range (the value check of ops that take indices) ------------------------------------
def _in_range_rule(ds, attrs):
    check_category("index_in_range", "integral", ds[0])
    return ds[0], _dt.bool_


_in_range_rule.category = "integral"


def _in_range(xp, idx, low, high):
    """min(idx) >= low and max(idx) < high, a bound beyond the dtype's range holding for every value."""
    info = np.iinfo(idx.dtype.numpy)
    if idx.size == 0 or (low <= info.min and high > info.max):
        return xp.full((), True, dtype=_dt.bool_, device=idx.device)
    oks = ([xp.greater_equal(xp.min(idx), low)] if low > info.min else []) + \
        ([xp.less(xp.max(idx), high)] if high <= info.max else [])
    return oks[0] if len(oks) == 1 else xp.logical_and(*oks)


def _in_range_ref(idx, low, high):
    return np.asarray(idx.size == 0 or (int(idx.min()) >= low and int(idx.max()) < high))


def _in_range_samples(d, rng):
    from anydevice.ops.samples import Sample

    info = np.iinfo(d.numpy)
    v = np.asarray([[3, 0, 5], [1, 4, 2]], d.numpy)
    return [Sample([v], {"low": 0, "high": 6}, "in range"), Sample([v], {"low": 0, "high": 5}, "a value at high"),
            Sample([v], {"low": 1, "high": 6}, "a value below low"), Sample([v[:0]], {"low": 0, "high": 1}, "empty"),
            Sample([v], {"low": int(info.min) - 1, "high": int(info.max) + 1}, "bounds beyond the dtype's range")]


define("index_in_range", inputs=("x",), attrs={"low": Int(REQUIRED), "high": Int(REQUIRED)}, dtype_rule=_in_range_rule,
       shape_rule=lambda s, a: (), reference=_in_range_ref, decomposition=_in_range, differentiable=False,
       category="indexing", samples=_in_range_samples,
       errors=[([np.zeros(3, np.float32)], {"low": 0, "high": 1}, TypeError, "float indices")],
       doc="whether every value of the integer tensor x lies in [low, high) (true when x is empty): the value "
           "check of the ops that take indices or labels, one flag read back")


# --- take -----------------------------------------------------------------------------------------
_take_rule = with_indices("take", "indices", "all")


def _canon_take(shapes, attrs):
    x, idx = shapes
    if len(idx) != 1:
        raise ValueError(f"take(): indices must be 1-D, got shape {idx}")
    axis = attrs["axis"]
    if axis is None:
        if len(x) != 1:
            raise ValueError(f"take(): axis is required for a {len(x)}-D tensor")
        axis = 0
    return {"axis": normalize_axis(axis, len(x), "take")}


def _take_shape(shapes, attrs):
    x, idx = shapes
    a = attrs["axis"]
    return x[:a] + (idx[0],) + x[a + 1:]


def _take_ref(x, indices, axis):
    n = x.shape[axis]
    if indices.size and (indices.min() < -n or indices.max() >= n):
        raise IndexError(f"take(): index out of range for axis {axis} with size {n}")
    return np.take(x, indices, axis=axis)


def _vjp_take(xp, g, i, o, axis):
    x, idx = i
    n = x.shape[axis]
    # one-hot (len(idx) x n) contracted with g along axis: device-agnostic scatter-add
    onehot = xp.astype(xp.equal(xp.expand_dims(xp.remainder(idx, n) if idx.dtype.kind == "int" else idx, axis=1),
                              xp.expand_dims(xp.arange(n, dtype=idx.dtype, device=idx.device), axis=0)), g.dtype)
    perm = tuple(k for k in range(g.ndim) if k != axis) + (axis,)
    gx = xp.matmul(xp.permute_dims(g, perm), onehot)
    inv = [0] * g.ndim
    for k, p in enumerate(perm):
        inv[p] = k
    return xp.permute_dims(gx, tuple(inv)), None


def _check_take(xp, inputs, attrs):
    """Out-of-range indices are an IndexError on every backend (checked on the device, then read back)."""
    x, idx = inputs
    n = x.shape[attrs["axis"]]
    check_index_range(xp, "take", "index", idx, -n, n, f"for axis {attrs['axis']} with size {n}")


define("take", positional=0, inputs=("x", "indices"), attrs={"axis": Optional(Axis())}, dtype_rule=_take_rule, canon=_canon_take, check=_check_take,
       shape_rule=_take_shape, reference=_take_ref, vjp=_vjp_take, category="indexing", domain="take",
       doc="gather along one axis; negative indices count from the end")
