"""Reductions: sum, prod, max, min, argmax, argmin (primitives) and mean, var, std, all, any, logsumexp."""
from __future__ import annotations

import numpy as np

from anydevice.base import dtypes as _dt
from anydevice.ops.registry import Axes, Axis, Bool, DType, Optional, Real, define, normalize_axes, normalize_axis


def _canon_axes(name, empty_ok=True):
    def canon(shapes, attrs):
        shape = shapes[0]
        attrs = dict(attrs)
        attrs["axis"] = normalize_axes(attrs["axis"], len(shape), name)  # None: every axis
        if not empty_ok and any(shape[a] == 0 for a in attrs["axis"]) or (not empty_ok and not attrs["axis"] and 0 in shape):
            raise ValueError(f"{name}() of an empty array has no identity; reduce over non-empty axes only")
        return attrs

    return canon


def reduced_shape(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def _rshape(shapes, attrs):
    return reduced_shape(shapes[0], attrs["axis"], attrs["keepdims"])


_ACC = {_dt.bool_: _dt.int64, _dt.int8: _dt.int64, _dt.int16: _dt.int64, _dt.int32: _dt.int64,
        _dt.uint8: _dt.uint64, _dt.uint16: _dt.uint64, _dt.uint32: _dt.uint64}


def _acc_rule(cat, name="sum"):
    def rule(ds, attrs):
        from anydevice.ops.registry import check_category

        check_category(name, cat, ds[0])  # the input, not only the accumulation dtype
        d = attrs.get("dtype")
        d = _dt.dtype(d) if d is not None else _ACC.get(ds[0], ds[0])
        return d, d

    rule.category = cat
    return rule


def _same_rule(cat):
    def rule(ds, attrs):
        return ds[0], ds[0]

    rule.category = cat
    return rule


def expand_to(xp, g, x, axes, keepdims):
    """Broadcast a reduced gradient back to ``x``'s shape."""
    return xp.broadcast_to(keep_axes(xp, g, x, axes, keepdims), x.shape)


def keep_axes(xp, g, x, axes, keepdims):
    """A reduced gradient with the reduced axes kept (size 1), so that it broadcasts against ``x``
    (one reduced over leading axes only, or to 0-d, broadcasts as it is)."""
    if keepdims or g.ndim == 0 or tuple(axes) == tuple(range(len(axes))):
        return g
    return xp.reshape(g, reduced_shape(x.shape, axes, True))


def _vjp_sum(xp, g, i, o, axis, keepdims, dtype=None):
    return (expand_to(xp, g, i[0], axis, keepdims),)


def _vjp_prod(xp, g, i, o, axis, keepdims, dtype=None):
    x = i[0]
    return (expand_to(xp, g, x, axis, keepdims) * expand_to(xp, o, x, axis, keepdims) / x,)


def _vjp_extreme(xp, g, i, o, axis, keepdims):
    x = i[0]
    mask = xp.astype(xp.equal(x, keep_axes(xp, o, x, axis, keepdims)), g.dtype)
    count = xp.sum(mask, axis=axis, keepdims=True)
    return (mask * (keep_axes(xp, g, x, axis, keepdims) / count),)  # the ties share the gradient


def _ref_reduce(fn):
    def ref(x, axis, keepdims, dtype=None):
        return fn(x, axis=axis, keepdims=keepdims)

    return ref


def _flops(shapes, attrs):
    n = 1
    for s in shapes[0]:
        n *= s
    return n


_AX = {"axis": Axes(None), "keepdims": Bool(False)}
_AX_DTYPE = {"axis": Axes(None), "dtype": DType(), "keepdims": Bool(False)}  # the standard's order
define("sum", positional=0, inputs=("x",), attrs=_AX_DTYPE, dtype_rule=_acc_rule("all"),
       shape_rule=_rshape, reference=_ref_reduce(np.sum), vjp=_vjp_sum, canon=_canon_axes("sum"),
       category="reduction", flops=_flops, tolerance={"float32": (1e-5, 1e-4)}, dtypes="all",
       doc="sum over axes; integers accumulate in int64/uint64")
define("prod", positional=0, inputs=("x",), attrs=_AX_DTYPE, dtype_rule=_acc_rule("numeric", "prod"), shape_rule=_rshape,
       reference=_ref_reduce(np.prod), vjp=_vjp_prod, canon=_canon_axes("prod"), category="reduction",
       flops=_flops, domain="prod", tolerance={"float32": (1e-4, 1e-4)}, dtypes="numeric")
define("max", positional=0, inputs=("x",), attrs=_AX, dtype_rule=_same_rule("real"), shape_rule=_rshape,
       reference=_ref_reduce(np.max), vjp=_vjp_extreme, canon=_canon_axes("max", empty_ok=False),
       category="reduction", flops=_flops)
define("min", positional=0, inputs=("x",), attrs=_AX, dtype_rule=_same_rule("real"), shape_rule=_rshape,
       reference=_ref_reduce(np.min), vjp=_vjp_extreme, canon=_canon_axes("min", empty_ok=False),
       category="reduction", flops=_flops)


def _canon_arg(name):
    def canon(shapes, attrs):
        shape = shapes[0]
        if attrs["axis"] is not None:
            attrs = {**attrs, "axis": normalize_axis(attrs["axis"], len(shape), name)}
            if shape[attrs["axis"]] == 0:
                raise ValueError(f"{name}() of an empty axis is undefined")
        elif 0 in shape:
            raise ValueError(f"{name}() of an empty array is undefined")
        return attrs

    return canon


def _argshape(shapes, attrs):
    shape, axis = shapes[0], attrs["axis"]
    if axis is None:
        return (1,) * len(shape) if attrs["keepdims"] else ()
    return reduced_shape(shape, (axis,), attrs["keepdims"])


def _argref(fn):
    def ref(x, axis, keepdims):
        r = fn(x, axis=axis, keepdims=keepdims) if axis is not None else fn(x.reshape(-1))
        if axis is None and keepdims:
            r = np.reshape(r, (1,) * x.ndim)
        return np.asarray(r, dtype=np.int64)

    return ref


def _index_rule(ds, attrs):
    return ds[0], _dt.int64


_index_rule.category = "real"
_ARG = {"axis": Optional(Axis()), "keepdims": Bool(False)}
define("argmax", positional=0, inputs=("x",), attrs=_ARG, dtype_rule=_index_rule, shape_rule=_argshape,
       reference=_argref(np.argmax), canon=_canon_arg("argmax"), category="reduction", differentiable=False,
       doc="index of the first maximum (flattened when axis is None)")
define("argmin", positional=0, inputs=("x",), attrs=_ARG, dtype_rule=_index_rule, shape_rule=_argshape,
       reference=_argref(np.argmin), canon=_canon_arg("argmin"), category="reduction", differentiable=False)


# --- composites -----------------------------------------------------------------------------------
def _count(shape, axes):
    n = 1
    for a in axes:
        n *= shape[a]
    return n


def _mean(xp, x, axis, keepdims):
    return xp.sum(x, axis=axis, keepdims=keepdims) / float(_count(x.shape, axis))


def _vjp_mean(xp, g, i, o, axis, keepdims):
    return (expand_to(xp, g / float(max(_count(i[0].shape, axis), 1)), i[0], axis, keepdims),)


_float_rule = _same_rule("floating")
define("mean", positional=0, inputs=("x",), attrs=_AX, dtype_rule=_float_rule, shape_rule=_rshape,
       reference=_ref_reduce(np.mean), vjp=_vjp_mean, decomposition=_mean, canon=_canon_axes("mean"),
       category="reduction", flops=_flops, tolerance={"float32": (1e-5, 1e-4)})


def _var(xp, x, axis, keepdims, correction=0.0):
    n = _count(x.shape, axis)
    m = xp.mean(x, axis=axis, keepdims=True)
    d = x - m
    if x.dtype.kind == "complex":
        sq = xp.real(d * xp.conj(d)) if hasattr(xp, "conj") else d * d
    else:
        sq = d * d
    return xp.sum(sq, axis=axis, keepdims=keepdims) / float(max(n - correction, 0))


def _var_vjp(xp, g, i, o, axis, keepdims, correction=0.0):
    x = i[0]
    n = _count(x.shape, axis)
    d = x - xp.mean(x, axis=axis, keepdims=True)
    return (keep_axes(xp, g, x, axis, keepdims) * d * (2.0 / max(n - correction, 1e-300)),)


def _var_ref(x, axis, keepdims, correction=0.0):
    return np.var(x, axis=axis, keepdims=keepdims, ddof=correction)


def _std_ref(x, axis, keepdims, correction=0.0):
    return np.std(x, axis=axis, keepdims=keepdims, ddof=correction)


def _std_vjp(xp, g, i, o, axis, keepdims, correction=0.0):
    (dv,) = _var_vjp(xp, g, i, o, axis, keepdims, correction)
    return (dv / (expand_to(xp, o, i[0], axis, keepdims) * 2.0),)


_CORR = {"axis": Axes(None), "correction": Real(0.0, lo=0), "keepdims": Bool(False)}


def _canon_corr(name):
    axes = _canon_axes(name)

    def canon(shapes, attrs):  # a float correction: kernels never see an int beyond a C long
        out = axes(shapes, attrs)
        return {**out, "correction": float(out["correction"])}

    return canon


define("var", positional=0, inputs=("x",), attrs=_CORR, dtype_rule=_same_rule("real_floating"), shape_rule=_rshape,
       reference=_var_ref, vjp=_var_vjp, decomposition=_var, canon=_canon_corr("var"), category="reduction",
       flops=_flops, tolerance={"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2)})
define("std", positional=0, inputs=("x",), attrs=_CORR, dtype_rule=_same_rule("real_floating"), shape_rule=_rshape,
       reference=_std_ref, vjp=_std_vjp, decomposition=lambda xp, x, axis, keepdims, correction=0.0: xp.sqrt(xp.var(x, axis=axis, keepdims=keepdims, correction=correction)),
       canon=_canon_corr("std"), category="reduction", flops=_flops, tolerance={"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2)})


def _bool_rule(ds, attrs):
    return ds[0], _dt.bool_


_bool_rule.category = "all"


def _nonzero_count(xp, x, axis, keepdims):
    nz = xp.not_equal(x, xp.zeros_like(x)) if x.dtype is not _dt.bool_ else x
    return xp.sum(xp.astype(nz, _dt.int64), axis=axis, keepdims=keepdims)


define("any", positional=0, inputs=("x",), attrs=_AX, dtype_rule=_bool_rule, shape_rule=_rshape,
       reference=_ref_reduce(np.any), canon=_canon_axes("any"), category="reduction", differentiable=False,
       decomposition=lambda xp, x, axis, keepdims: xp.greater(_nonzero_count(xp, x, axis, keepdims), 0))
define("all", positional=0, inputs=("x",), attrs=_AX, dtype_rule=_bool_rule, shape_rule=_rshape,
       reference=_ref_reduce(np.all), canon=_canon_axes("all"), category="reduction", differentiable=False,
       decomposition=lambda xp, x, axis, keepdims: xp.equal(_nonzero_count(xp, x, axis, keepdims), _count(x.shape, axis)))


def _logsumexp(xp, x, axis, keepdims):
    m = xp.max(x, axis=axis, keepdims=True)
    m = xp.where(xp.isinf(m), xp.zeros_like(m), m)
    s = xp.log(xp.sum(xp.exp(x - m), axis=axis, keepdims=True)) + m
    return s if keepdims else xp.reshape(s, reduced_shape(x.shape, axis, False))


def _lse_ref(x, axis, keepdims):
    m = np.max(x, axis=axis, keepdims=True)
    r = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return r if keepdims else np.squeeze(r, axis=axis)


def _lse_vjp(xp, g, i, o, axis, keepdims):
    x = i[0]
    return (expand_to(xp, g, x, axis, keepdims) * xp.exp(x - expand_to(xp, o, x, axis, keepdims)),)


define("logsumexp", positional=0, inputs=("x",), attrs=_AX, dtype_rule=_same_rule("real_floating"), shape_rule=_rshape,
       reference=_lse_ref, vjp=_lse_vjp, decomposition=_logsumexp, canon=_canon_axes("logsumexp", empty_ok=False),
       category="reduction", flops=_flops)
