"""Creation ops: ``full`` and ``arange`` (primitives), ``eye`` and ``linspace`` (composites).

They take no tensor input; the ``device`` attribute says where the result lives
(None: the current device). ``zeros``, ``ones``, ``empty`` and the ``*_like`` functions
in :mod:`anydevice.api` are spelled with ``full``.
"""
from __future__ import annotations

import math

import numpy as np

from anydevice.base import dtypes as _dt
from anydevice.ops.registry import (
    MAX_SIZE,
    REQUIRED,
    Bool,
    Device,
    DType,
    Int,
    Optional,
    Scalar,
    Shape,
    check_shape,
    default_dtype,
    define,
    fit_scalar,
)


def _full_rule(ds, attrs):
    d = attrs["dtype"]
    d = _dt.dtype(d) if d is not None else default_dtype(attrs["fill_value"])
    return d, d


_full_rule.category = "all"


def _full_ref(shape, fill_value, dtype, device=None):
    return np.full(shape, fill_value, dtype=_dt.dtype(dtype).numpy)


define("full", positional=2, attrs={"shape": Shape(REQUIRED), "fill_value": Scalar(REQUIRED, fits="dtype"), "dtype": DType(), "device": Device()},
       dtype_rule=_full_rule, canon=lambda s, a: {**a, "shape": check_shape(a["shape"], "full"), "dtype": _full_rule([], a)[1]},
       shape_rule=lambda s, a: a["shape"], reference=_full_ref, category="creation", differentiable=False)


def _arange_rule(ds, attrs):
    vals = [attrs["start"], attrs["stop"], attrs["step"]]
    d = attrs["dtype"]
    if d is not None:
        return _dt.dtype(d), _dt.dtype(d)
    d = _dt.float32 if any(isinstance(v, float) for v in vals) else _dt.int64
    return d, d


_arange_rule.category = "real"


def _canon_arange(shapes, attrs):
    start, stop, step = attrs["start"], attrs["stop"], attrs["step"]
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError("arange(): step must not be zero")
    d = _arange_rule([], attrs)[1]
    try:
        n = _arange_len(start, stop, step)
    except OverflowError:
        n = math.inf
    if n > MAX_SIZE:
        raise ValueError(f"arange(): start={_short(start)}, stop={_short(stop)}, step={_short(step)} give more elements "
                         f"than any tensor can have ({MAX_SIZE})")
    if d.kind in ("int", "uint"):  # integer results: integer arguments, and every value fits the dtype
        for name, v in (("start", start), ("stop", stop), ("step", step)):
            if type(v) is not int:
                fit_scalar("arange", name, v, d)
        if n:
            fit_scalar("arange", "start", start, d)
            fit_scalar("arange", "the last value (start + (n - 1) * step)", start + (n - 1) * step, d)
    return {**attrs, "start": start, "stop": stop, "step": step, "dtype": d}


def _short(v) -> str:
    r = repr(v)
    return r if len(r) <= 24 else f"{r[:10]}...{r[-6:]}"


def _arange_len(start, stop, step):
    return max(0, math.ceil((stop - start) / step))


_REAL = Scalar(0, kinds=(int, float), finite=True)
define("arange", positional=(1, 3), attrs={"start": Scalar(REQUIRED, kinds=(int, float), finite=True), "stop": Optional(_REAL), "step": Scalar(1, kinds=(int, float), finite=True),
                        "dtype": DType(), "device": Device()},
       dtype_rule=_arange_rule, canon=_canon_arange,
       shape_rule=lambda s, a: (_arange_len(a["start"], a["stop"], a["step"]),),
       reference=lambda start, stop, step, dtype, device=None: (start + step * np.arange(_arange_len(start, stop, step), dtype=np.float64)).astype(_dt.dtype(dtype).numpy) if _dt.dtype(dtype).kind == "float" else np.arange(start, stop, step).astype(_dt.dtype(dtype).numpy),
       category="creation", differentiable=False, doc="start + step * i for i in range(ceil((stop - start) / step))")


def _eye_rule(ds, attrs):
    d = _dt.dtype(attrs["dtype"]) if attrs["dtype"] is not None else _dt.float32
    return d, d


_eye_rule.category = "all"


def _eye(xp, n_rows, n_cols=None, k=0, dtype=None, device=None):
    n_cols = n_rows if n_cols is None else n_cols
    r = xp.reshape(xp.arange(n_rows, device=device), (n_rows, 1))
    c = xp.reshape(xp.arange(n_cols, device=device), (1, n_cols))
    return xp.astype(xp.equal(r + k, c), _eye_rule([], {"dtype": dtype})[1])


def _eye_ref(n_rows, n_cols=None, k=0, dtype=None, device=None):
    return np.eye(n_rows, n_cols, k=k, dtype=_eye_rule([], {"dtype": dtype})[1].numpy)


define("eye", positional=(2, 2), attrs={"n_rows": Int(REQUIRED, lo=0), "n_cols": Optional(Int(0, lo=0)), "k": Int(0), "dtype": DType(),
                     "device": Device()}, dtype_rule=_eye_rule,
       shape_rule=lambda s, a: (a["n_rows"], a["n_rows"] if a["n_cols"] is None else a["n_cols"]),
       reference=_eye_ref, decomposition=_eye, category="creation", differentiable=False)


def _linspace_rule(ds, attrs):
    d = _dt.dtype(attrs["dtype"]) if attrs["dtype"] is not None else _dt.float32
    if d.kind not in ("float", "complex"):
        raise TypeError(f"linspace(): dtype must be floating, not {d.name}")
    return d, d


_linspace_rule.category = "floating"


def _linspace(xp, start, stop, num, dtype=None, device=None, endpoint=True):
    d = _linspace_rule([], {"dtype": dtype})[1]
    div = (num - 1) if endpoint else num
    step = (stop - start) / div if div > 0 else 0.0
    real = {_dt.complex64: _dt.float32, _dt.complex128: _dt.float64}.get(d, d)  # arange is real-valued only
    i = xp.arange(num, dtype=real, device=device)
    out = i * step + start
    if endpoint and num > 1:
        out = xp.where(xp.equal(i, float(num - 1)), xp.full_like(out, stop), out)
    return out if out.dtype is d else xp.astype(out, d)


_NUMBER = Scalar(REQUIRED, kinds=(int, float, complex))
define("linspace", positional=(2, 3), attrs={"start": _NUMBER, "stop": _NUMBER, "num": Int(REQUIRED, lo=0),
                          "dtype": DType(), "device": Device(), "endpoint": Bool(True)},
       dtype_rule=_linspace_rule, shape_rule=lambda s, a: (a["num"],),
       reference=lambda start, stop, num, dtype=None, device=None, endpoint=True: np.linspace(start, stop, num, endpoint=endpoint),
       decomposition=_linspace, category="creation", differentiable=False)


# --- tril / triu ------------------------------------------------------------------------------------------
def _tri_shape(name):
    def rule(shapes, attrs):
        if len(shapes[0]) < 2:
            raise ValueError(f"{name}(): x must have at least 2 dimensions (a stack of matrices), got shape {shapes[0]}")
        return shapes[0]

    return rule


def _tri_canon(shapes, attrs):
    """A k beyond every row or column selects everything or nothing, as k at the matrix's edge does
    (kernels never see a k that C integers cannot hold)."""
    s = shapes[0]
    if len(s) < 2:
        return attrs
    return {**attrs, "k": max(-s[-2], min(s[-1], attrs["k"]))}


def _tri(lower: bool):
    def decomposition(xp, x, k=0):
        m, n = x.shape[-2:]
        r = xp.reshape(xp.arange(m, device=x.device), (m, 1)) + k
        c = xp.reshape(xp.arange(n, device=x.device), (1, n))
        return xp.where(xp.greater_equal(r, c) if lower else xp.less_equal(r, c), x, xp.zeros_like(x))

    return decomposition


def _tri_samples(name):
    def gen(d, rng):
        from anydevice.ops.samples import table

        return table(name, [([(4, 4)], {}, "(4, 4)"), ([(3, 5)], {"k": 1}, "(3, 5), k=1"),
                            ([(5, 3)], {"k": -2}, "(5, 3), k=-2"), ([(2, 3, 3)], {"k": 7}, "stack, k beyond the size"),
                            ([(3, 3)], {"k": -7}, "k below every row"), ([(0, 3)], {}, "empty")])(d, rng)

    return gen


for _name, _lower in (("tril", True), ("triu", False)):
    define(_name, positional=0, inputs=("x",), attrs={"k": Int(0)}, dtype_rule=lambda ds, a: (ds[0], ds[0]),
           shape_rule=_tri_shape(_name), canon=_tri_canon, reference=(lambda x, k=0: np.tril(x, k)) if _lower else (lambda x, k=0: np.triu(x, k)),
           vjp=(lambda xp, g, i, o, k=0: (xp.tril(g, k=k),)) if _lower else (lambda xp, g, i, o, k=0: (xp.triu(g, k=k),)),
           decomposition=_tri(_lower), category="manipulation", samples=_tri_samples(_name),
           doc=f"the {'lower' if _lower else 'upper'} triangle of each matrix: elements {'on and below' if _lower else 'on and above'} "
               f"the k-th diagonal, zeros elsewhere (k > 0 is above the main diagonal)",
           errors=[([np.ones(3, np.float32)], {}, ValueError, "1-D x"),
                   ([np.ones((2, 2), np.float32)], {"k": 0.5}, TypeError, "float k")])
