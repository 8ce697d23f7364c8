"""Creation ops: ``full`` and ``arange`` (primitives), ``eye`` and ``linspace`` (composites).

They take no tensor input; the ``device`` attribute says where the result lives
(None: the current device). ``zeros``, ``ones``, ``empty`` and the ``*_like`` functions
in :mod:`anydevice.api` are spelled with ``full``.
"""
from __future__ import annotations

import math

import numpy as np

from anydevice.base import dtypes as _dt
from anydevice.ops.registry import define


def _scalar_dtype(v):
    if isinstance(v, bool):
        return _dt.bool_
    if isinstance(v, int):
        return _dt.int64
    if isinstance(v, float):
        return _dt.float32
    if isinstance(v, complex):
        return _dt.complex64
    raise TypeError(f"expected a Python bool, int, float or complex scalar, got {type(v).__name__}")


def _shape(shape, name):
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    if isinstance(shape, (str, bytes)):
        raise TypeError(f"{name}(): shape must be an int or a sequence of ints, not {shape!r}")
    try:
        shape = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise TypeError(f"{name}(): shape must be an int or a sequence of ints, not {shape!r}") from None
    if any(s < 0 for s in shape):
        raise ValueError(f"{name}(): negative dimension in shape {shape}")
    return shape


def _full_rule(ds, attrs):
    d = attrs["dtype"]
    d = _dt.dtype(d) if d is not None else _scalar_dtype(attrs["fill_value"])
    if not _dt.scalar_dtype_ok(attrs["fill_value"], d) and not isinstance(attrs["fill_value"], (np.generic,)):
        raise TypeError(f"full(): fill value {attrs['fill_value']!r} does not fit dtype {d.name} (Array API rules)")
    return d, d


_full_rule.category = "all"


def _full_ref(shape, fill_value, dtype, device=None):
    return np.full(shape, fill_value, dtype=_dt.dtype(dtype).numpy)


define("full", attrs={"shape": (), "fill_value": 0, "dtype": None, "device": None}, dtype_rule=_full_rule,
       canon=lambda s, a: {**a, "shape": _shape(a["shape"], "full"), "dtype": _full_rule([], a)[1]},
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
    return {**attrs, "start": start, "stop": stop, "step": step, "dtype": _arange_rule([], attrs)[1]}


def _arange_len(start, stop, step):
    return max(0, math.ceil((stop - start) / step))


define("arange", attrs={"start": 0, "stop": None, "step": 1, "dtype": None, "device": None},
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


def _canon_eye(shapes, attrs):
    for name in ("n_rows", "n_cols"):
        v = attrs[name]
        if v is not None and (not isinstance(v, int) or v < 0):
            raise ValueError(f"eye(): {name} must be a non-negative int, not {v!r}")
    return attrs


define("eye", attrs={"n_rows": 0, "n_cols": None, "k": 0, "dtype": None, "device": None}, dtype_rule=_eye_rule,
       canon=_canon_eye,
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


def _canon_linspace(shapes, attrs):
    if not isinstance(attrs["num"], int) or attrs["num"] < 0:
        raise ValueError(f"linspace(): num must be a non-negative int, not {attrs['num']!r}")
    return attrs


define("linspace", attrs={"start": 0.0, "stop": 1.0, "num": 50, "dtype": None, "device": None, "endpoint": True},
       dtype_rule=_linspace_rule, canon=_canon_linspace, shape_rule=lambda s, a: (a["num"],),
       reference=lambda start, stop, num, dtype=None, device=None, endpoint=True: np.linspace(start, stop, num, endpoint=endpoint),
       decomposition=_linspace, category="creation", differentiable=False)
