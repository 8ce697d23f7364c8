"""The cpu backend's C kernels (``_native.c``), where the C extension was built: softmax and
log_softmax of float32 along the last axis of a C-contiguous array and their gradients, one pass
each where numpy needs five calls; float32 <-> float16 conversion (numpy converts element by
element, about 15x slower); and sum, max, min and whole-array var of float32/float64 with
numpy's pairwise sum and formulas (the same bits, without numpy's per-call layers).

Each function returns None where it does not apply (another dtype, axis or layout, or no
extension), and the caller then runs its numpy kernel. ``ANYDEVICE_CPU_NATIVE=0`` turns them off
(``AVAILABLE`` is False then); the tests run both paths."""
from __future__ import annotations

import math
import os

import numpy as np

try:
    from . import _native as _c
except ImportError:  # built without a C compiler: numpy alone
    _c = None
    STATUS = "not built (no C compiler when installed): numpy kernels only"
else:
    STATUS = "built"
if os.environ.get("ANYDEVICE_CPU_NATIVE", "1") == "0":
    _c = None
    STATUS = "off (ANYDEVICE_CPU_NATIVE=0): numpy kernels only"

AVAILABLE = _c is not None
#: the type of the kernels plain(), quiet() and extreme() make (None without the extension)
KERNEL = _c.Kernel if _c is not None else None
_F32, _F16 = np.dtype(np.float32), np.dtype(np.float16)
_empty, _ND = np.empty, np.ndarray


def softmax(x, axis, log: bool):
    """softmax (log: log_softmax) of ``x`` along ``axis``, or None. (The C function checks the
    layout: False where a buffer is not C-contiguous or rows are empty.)"""
    if x.dtype is _F32 and type(x) is _ND and x.ndim and axis == x.ndim - 1 and _c is not None:
        out = _empty(x.shape, _F32)
        if _c.softmax(x, out, x.shape[-1], log):
            return out
    return None


def softmax_grad(g, y, axis, log: bool):
    """The gradient of softmax (log: log_softmax) from its output ``y`` and the output's
    gradient ``g``, or None."""
    if (y.dtype is _F32 and g.dtype is _F32 and type(y) is _ND and type(g) is _ND and y.ndim
            and axis == y.ndim - 1 and g.shape == y.shape and _c is not None):
        if not g.flags.c_contiguous:  # a broadcast gradient (of a sum): one copy beats numpy's passes
            g = np.ascontiguousarray(g)
        out = _empty(y.shape, _F32)
        if _c.softmax_grad(g, y, out, y.shape[-1], log):
            return out
    return None


def convert(x, dtype):
    """``x`` (float32 or float16) converted to ``dtype`` (float16 or float32: numpy's dtype
    instances), or None."""
    dt = x.dtype
    if x.size < 64:  # numpy's own loop is as quick for a few elements
        return None
    if dt is _F32 and dtype is _F16 and _c is not None:
        f = _c.to_f16
    elif dt is _F16 and dtype is _F32 and _c is not None:
        f = _c.to_f32
    else:
        return None
    if type(x) is not _ND:
        return None
    out = _empty(x.shape, dtype)
    if f(x, out):  # False: not C-contiguous
        return out
    if x.flags.c_contiguous:
        return None
    # a broadcast gradient (of a sum): a copy and C beat numpy's strided loop
    return out if f(np.ascontiguousarray(x), out) else None


_F64 = np.dtype(np.float64)
#: the C reductions' op codes
SUM, MAX, MIN = 0, 1, 2


def reduce(x, axis, keepdims, op: int):
    """sum (op SUM), max or min of a float32 or float64 C-contiguous ``x`` over ``axis`` (None,
    one axis, or a tuple of one or of every axis), or None (other dtypes, several but not all
    axes, empty reductions: numpy's identity or error)."""
    dt = x.dtype
    if (dt is not _F32 and dt is not _F64) or type(x) is not _ND or _c is None:
        return None
    if axis is None and not keepdims:  # the common case, spelled out
        out = _empty((), dt)
        return out if x.size and _c.reduce(x, out, 1, x.size, 1, op, dt is _F64) else None
    key = (x.shape, axis, keepdims)
    g = _GEOMETRY.get(key)
    if g is None:
        g = _geometry(x.shape, axis, keepdims)
        if len(_GEOMETRY) > 4096:
            _GEOMETRY.clear()
        _GEOMETRY[key] = g
    if g is None:
        return None
    oshape, outer, k, inner = g
    out = _empty(oshape, dt)
    return out if _c.reduce(x, out, outer, k, inner, op, dt is _F64) else None


_GEOMETRY: dict = {}  # (shape, axis, keepdims) -> _geometry(...)


def _geometry(shape, axis, keepdims):
    """``(result shape, outer, k, inner)`` of reducing ``shape`` over ``axis`` as (outer, k,
    inner), or None where :func:`reduce` does not apply."""
    nd = len(shape)
    if axis is None or (type(axis) is tuple and len(axis) == nd):
        outer, k, inner = 1, math.prod(shape), 1
        oshape = (1,) * nd if keepdims else ()
    else:
        if type(axis) is tuple:
            if len(axis) != 1:
                return None
            axis = axis[0]
        if type(axis) is not int or not -nd <= axis < nd:
            return None
        a = axis % nd
        outer, k, inner = math.prod(shape[:a]), shape[a], math.prod(shape[a + 1:])
        oshape = shape[:a] + (1,) + shape[a + 1:] if keepdims else shape[:a] + shape[a + 1:]
    if not k or not outer or not inner:
        return None
    return oshape, outer, k, inner


def var(x, correction):
    """np.var of the whole of ``x`` (float32 or float64, C-contiguous, more elements than
    ``correction``), with numpy's bits, as a numpy scalar; or None."""
    dt = x.dtype
    if (dt is not _F32 and dt is not _F64) or type(x) is not _ND or _c is None or not correction < x.size:
        return None
    v = _c.var(x, float(correction), dt is _F64)
    return None if v is None else dt.type(v)


# --- kernel call wrappers: the calling layer of a kernel in C, or None (the caller keeps its own)
def plain(fn):
    """The kernel ``k(ctx, *a, **kw) = fn(*a, **kw)``."""
    return _c.plain(fn) if _c is not None else None


def quiet(fn, generic, halves, half_set, var, ignore):
    """The kernel ``k(ctx, *inputs) = fn(*inputs)`` with numpy's floating-point warnings off (the
    context variable ``var`` set to ``ignore`` around the call); ``generic(ctx, ...)`` runs
    keyword calls and, unless ``halves`` is None, 16-bit float inputs (those in ``half_set``,
    which ``halves()`` fills)."""
    return _c.quiet(fn, generic, halves, half_set, var, ignore) if _c is not None else None


def extreme(op: int, generic):
    """The max (op MAX) or min (MIN) kernel ``k(ctx, x, axis, keepdims)``: as :func:`reduce`
    for float32/float64 C-contiguous arrays over every axis or one, ``generic`` otherwise."""
    return _c.extreme(op, generic, _empty, _ND) if _c is not None else None


def astype(generic):
    """The astype kernel ``k(ctx, x, dtype, copy=True)``: :func:`convert`'s float32 <-> float16
    in C for C-contiguous arrays, ``generic`` for everything else (strided inputs included)."""
    return _c.astype(generic, _empty, _ND, _F16, _F32) if _c is not None else None


def where(generic):
    """The where kernel ``k(ctx, cond, x, y)``: a bool condition over two C-contiguous arrays of
    one dtype and one shape selected in C, ``generic`` for everything else (broadcasts included)."""
    return _c.where(generic, _empty, _ND) if _c is not None else None


def concat(generic):
    """The concat kernel ``k(ctx, arrays, axis)``: C-contiguous arrays of one dtype joined along
    an int axis in C (row copies), ``generic`` for everything else."""
    return _c.concat(generic, _empty, _ND) if _c is not None else None
