"""Native numpy kernels for every op in the registry.

Kernels use the returning convention ``fn(ctx, *inputs, **attrs) -> ndarray``. float16 and
bfloat16 math that numpy does slowly or imprecisely runs in float32 and is rounded back.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from anydevice.ops.indexing import to_numpy_key
from anydevice.ops.random import array_kernels as _random_kernels

from . import kernels_elementwise2 as _elementwise2
from . import kernels_linalg as _linalg
from . import kernels_manipulation as _manipulation
from . import kernels_nn as _nn
from . import kernels_optim as _optim
from . import kernels_sorting as _sorting
from . import native as _native

_HALF: set = set()


def _half_dtypes() -> set:
    if not _HALF:
        import ml_dtypes

        _HALF.update({np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)})
    return _HALF


try:  # numpy >= 2 keeps np.errstate's state in a context variable: setting it to a prebuilt
    # "ignore" state costs a quarter of entering np.errstate(all="ignore"), which builds it anew
    from numpy._core._multiarray_umath import _extobj_contextvar as _fp_state
    from numpy._core._multiarray_umath import _make_extobj

    _IGNORE = _make_extobj(all="ignore")
except (ImportError, AttributeError, TypeError):  # older numpy: np.errstate itself
    _fp_state = None


def _quiet(fn):
    """``fn`` with numpy's floating-point warnings silenced (IEEE results, no warnings)."""
    if _fp_state is None:
        def k(ctx, *a, **kw):
            with np.errstate(all="ignore"):
                return fn(*a, **kw)

        return k
    set_, reset = _fp_state.set, _fp_state.reset

    def k(ctx, *a, **kw):
        token = set_(_IGNORE)
        try:
            return fn(*a, **kw)
        finally:
            reset(token)

    return k


def _to(x, dt):
    """``x`` as an array of ``dt`` (float32 <-> float16 in C where it can)."""
    r = _native.convert(x, dt) if type(x) is np.ndarray else None
    return np.asarray(x, dt) if r is None else r


def _half_via_f32(fn):
    """Run ``fn`` in float32 for float16/bfloat16 inputs and cast the result back (floating-point
    warnings silenced, as :func:`_quiet`)."""

    def half(a, kw, dt):
        a = [[_to(t, _F32) for t in x] if isinstance(x, list) else
             (_to(x, _F32) if np.asarray(x).dtype == dt else x) for x in a]
        r = np.asarray(fn(*a, **kw))
        return _to(r, dt) if r.dtype == np.float32 else r

    quiet_half = _quiet(half)
    if _fp_state is None:
        quiet = _quiet(fn)

        def k(ctx, *a, **kw):
            x0 = a[0][0] if isinstance(a[0], list) else a[0]
            dt = x0.dtype
            if dt in (_HALF or _half_dtypes()):
                return quiet_half(ctx, a, kw, dt)
            return quiet(ctx, *a, **kw)

        return k
    set_, reset = _fp_state.set, _fp_state.reset

    def k(ctx, *a, **kw):
        x0 = a[0][0] if isinstance(a[0], list) else a[0]
        dt = x0.dtype
        if dt in (_HALF or _half_dtypes()):
            return quiet_half(ctx, a, kw, dt)
        token = set_(_IGNORE)
        try:
            return fn(*a, **kw)
        finally:
            reset(token)

    return k


def _ufunc_kernel(fn, half: bool):
    """The "quiet" (``half``: "half") kernel of a numpy ufunc without attributes, its inputs
    taken by position: one call deep, no argument tuple or keyword dict per call."""
    generic = (_half_via_f32 if half else _quiet)(fn)
    if _fp_state is None or fn.nin not in (1, 2):
        return generic
    set_, reset = _fp_state.set, _fp_state.reset

    if fn.nin == 1:
        def k(ctx, x):
            if half and x.dtype in (_HALF or _half_dtypes()):
                return generic(ctx, x)
            token = set_(_IGNORE)
            try:
                return fn(x)
            finally:
                reset(token)
    else:
        def k(ctx, a, b):
            if half and a.dtype in (_HALF or _half_dtypes()):
                return generic(ctx, a, b)
            token = set_(_IGNORE)
            try:
                return fn(a, b)
            finally:
                reset(token)
    c = _native.quiet(fn, generic, _half_dtypes if half else None, _HALF, _fp_state, _IGNORE)  # k, in C
    return k if c is None else c


def _erf(x):
    # math.erf per element: correctly rounded in float64 (a polynomial approximation is off by ~1e-7)
    x64 = np.asarray(x, np.float64)
    y = np.vectorize(math.erf, otypes=[np.float64])(x64) if x64.size else x64
    return y.astype(np.asarray(x).dtype)


def _astype(ctx, x, dtype, copy=True):
    if type(x) is not np.ndarray:
        x = np.asarray(x)
    to = dtype.numpy
    r = _native.convert(x, to)  # float32 <-> float16
    if r is not None:
        return r
    # numpy's casts warn on overflow (float64 -> float32, float32 -> float16) and on NaN to an
    # integer; device math does not (nor does the C conversion, nor any other backend)
    if _fp_state is None:
        with np.errstate(all="ignore"):
            return _cast(x, dtype, to)
    token = _fp_state.set(_IGNORE)
    try:
        return _cast(x, dtype, to)
    finally:
        _fp_state.reset(token)


def _cast(x, dtype, to):
    if dtype.kind in ("int", "uint") and x.dtype.kind == "f":
        return np.trunc(x).astype(to)  # toward zero, as C casts
    return x.astype(to)


@functools.lru_cache(maxsize=4096)
def _numpy_key(key):
    return to_numpy_key(key)


def _setitem(x, value, key):
    y = np.array(x, copy=True)
    y[_numpy_key(key)] = value
    return y


def _full(shape, fill_value, dtype):
    t = type(fill_value)  # zeros (not -0.0) from np.zeros: 3-4x cheaper than np.full's fill
    if (t is int or t is bool or t is float) and fill_value == 0 and (t is not float or math.copysign(1.0, fill_value) > 0):
        return np.zeros(shape, dtype.numpy)
    return np.full(shape, fill_value, dtype=dtype.numpy)


def _take(x, indices, axis):
    return np.take(np.asarray(x), indices, axis=axis)


def _arange(start, stop, step, dtype):
    n = max(0, math.ceil((stop - start) / step))
    if dtype.kind == "float":
        return (start + step * np.arange(n, dtype=np.float64)).astype(dtype.numpy)
    return np.arange(start, start + n * step, step, dtype=dtype.numpy)[:n]


def _argreduce(fn):
    def k(x, axis, keepdims):
        x = np.asarray(x)
        if axis is None:
            r = fn(x.reshape(-1))
            return np.full((1,) * x.ndim if keepdims else (), r, dtype=np.int64)
        return fn(x, axis=axis, keepdims=keepdims).astype(np.int64)

    return k


# np.max and np.sum are these reductions behind a Python layer
_MAX, _SUM = np.maximum.reduce, np.add.reduce


_MIN = np.minimum.reduce

# numpy reduces along a short last axis slowly (a 64 x 64 row max costs four times an exp of
# all 4096 elements). float32 softmax and log_softmax along short last rows therefore subtract
# one maximum, the whole array's (none while it is small), and sum the rows as a matrix-vector
# product with ones. That is the per-row formula exactly as long as no row sum is tiny, which
# would mean a row far below the array's largest element: such calls, and NaN or infinities,
# take the per-row maximum as before.
_SHORT_ROW = 1024
_F32 = np.dtype(np.float32)
_FEW = 512  # below this many elements the per-row formula's fewer numpy calls cost less
_ONES: dict = {}


def _short_rows(x, axis):
    """``x`` as a (rows, n) float32 matrix when ``axis`` is its last axis, rows are short, the
    array is not tiny and its layout is C-contiguous, else None."""
    nd = x.ndim
    if x.size < _FEW or x.dtype is not _F32 or axis != nd - 1 or x.shape[-1] > _SHORT_ROW or not x.flags.c_contiguous:
        return None  # (a float32 dtype that is not numpy's own instance just takes the per-row path)
    return x if nd == 2 else x.reshape(-1, x.shape[-1])


def _row_ones(n):
    v = _ONES.get(n)
    if v is None:
        v = _ONES[n] = np.ones(n, np.float32)
    return v


def _exp_rows(x2, top, floor):
    """``(y, e, s)``: ``y = x2 - c``, ``e = exp(y)`` and its row sums ``s``, where ``c`` is 0 when
    x2's largest element is at most ``top`` and that element otherwise; None when that element
    is NaN or +inf, or a row sum is below ``floor`` (a row far below the largest element)."""
    m = _MAX(x2, axis=None) if x2.size else 0.0
    if not m <= top:
        if not m < np.inf:  # NaN or +inf
            return None
        x2 = x2 - m
    e = np.exp(x2)
    s = e @ _row_ones(x2.shape[1])
    if s.size and not _MIN(s) >= floor:
        return None
    return x2, e, s


def _softmax(x, axis):
    if x.ndim == 0:  # 1, or NaN for NaN and ±inf
        return np.exp(x - x) / np.exp(x - x)
    x2 = _short_rows(x, axis)
    if x2 is not None:  # exp(x) of elements at most 60 stays finite; rows summing to 1e-30 lose nothing
        r = _exp_rows(x2, 60.0, 1e-30)
        if r is not None:
            _, e, s = r
            e /= s[:, None]
            return e if x.ndim == 2 else e.reshape(x.shape)
    e = np.exp(x - _MAX(x, axis=axis, keepdims=True))
    e /= _SUM(e, axis=axis, keepdims=True)
    return e


def _log_softmax(x, axis):
    if x.ndim == 0:  # 0, or NaN for NaN and ±inf
        return (x - x) - np.log(np.exp(x - x))
    x2 = _short_rows(x, axis)
    if x2 is not None:  # |y| and |log(s)| stay below ~16 + log(n): their rounding stays below 1e-5
        r = _exp_rows(x2, 16.0, 1e-7)
        if r is not None:
            y, e, s = r
            y = np.subtract(y, np.log(s)[:, None], out=e)  # e's buffer, no longer needed
            return y if x.ndim == 2 else y.reshape(x.shape)
    s = x - _MAX(x, axis=axis, keepdims=True)
    return s - np.log(_SUM(np.exp(s), axis=axis, keepdims=True))


def _rows_kernel(fn, log):
    """softmax's or log_softmax's kernel: the C kernel where it applies (float32 along the last
    axis of a C-contiguous array), else ``fn`` through :func:`_half_via_f32`."""
    generic, native = _half_via_f32(fn), _native.softmax

    def k(ctx, x, axis):
        r = native(x, axis, log)
        return generic(ctx, x, axis=axis) if r is None else r

    return k


def _cross_entropy(logits, labels, reduction):
    x2 = _short_rows(logits, logits.ndim - 1)
    if x2 is not None and reduction != "none":  # log(sum(exp(y))) - y[label] per row, from _exp_rows
        r = _exp_rows(x2, 16.0, 1e-7)
        lab = labels.reshape(-1)
        if r is not None and lab.size and _MIN(lab) >= 0 and _MAX(lab) < x2.shape[1]:  # else the error below
            y, _, s = r
            picked = y.reshape(-1)[np.arange(0, y.size, y.shape[1]) + lab]
            nll = np.subtract(np.log(s), picked, out=s)
            return np.asarray(nll.sum() if reduction == "sum" else nll.mean(), dtype=logits.dtype)
    lsm = _log_softmax(logits, logits.ndim - 1)
    nll = -np.take_along_axis(lsm, labels[..., None].astype(np.intp), axis=-1)[..., 0]
    if reduction == "none":
        return nll
    return np.asarray(nll.sum() if reduction == "sum" else nll.mean(), dtype=lsm.dtype)


def _layer_norm(x, weight, bias, eps):
    axes = tuple(range(x.ndim - weight.ndim, x.ndim))
    m = x.mean(axis=axes, keepdims=True)
    d = x - m
    v = (d * d).mean(axis=axes, keepdims=True)
    return (d / np.sqrt(v + np.asarray(eps, x.dtype)) * weight + bias).astype(x.dtype)


def _gelu(x, approximate):
    # x / (1 + e^(-2y)) and 0.5 x erfc(-x/√2): 1 + tanh(y) and 1 + erf(...) cancel for negative x
    if approximate == "tanh":
        y = np.asarray(-2 * math.sqrt(2 / math.pi), x.dtype) * (x + np.asarray(0.044715, x.dtype) * x * x * x)
        return x / (1 + np.exp(y))
    x64 = np.asarray(x, np.float64)
    erfc = np.vectorize(math.erfc, otypes=[np.float64])(-x64 / math.sqrt(2.0)) if x64.size else x64
    return (0.5 * x64 * erfc).astype(np.asarray(x).dtype)


def _linspace(start, stop, num, dtype, endpoint):
    return np.linspace(start, stop, num, endpoint=endpoint).astype(dtype.numpy)


def _eye(n_rows, n_cols, k, dtype):
    return np.eye(n_rows, n_cols, k=k, dtype=dtype.numpy)


def _sign(x):
    if not np.iscomplexobj(x):
        return np.sign(x)
    # cos(θ) + sin(θ) j: numpy's x / |x| overflows for large parts and gives NaN a zero or ±1 part
    t = np.angle(x)
    r = np.where(x == 0, np.zeros((), x.dtype), np.cos(t) + np.sin(t) * np.asarray(1j, x.dtype))
    return np.where(np.isnan(x), np.asarray(complex(np.nan, np.nan), x.dtype), r).astype(x.dtype)


def _expm1(x):
    """numpy's expm1, but complex special values as exp(z) - 1 (numpy's gives NaN + NaN j for most)."""
    r = np.expm1(x)
    if np.iscomplexobj(x):
        r = np.where(np.isfinite(x), r, np.exp(x) - np.asarray(1, r.dtype))
        r = np.where(np.imag(x) == 0, _make_complex(np.real(r), np.imag(x)), r)  # not inf * sin(0) = NaN
    return r


def _log1p(x):
    """numpy's log1p; complex |x| < 0.5 as 0.5 log1p(2a + a² + b²) + atan2(b, 1 + a) j (numpy's
    complex log1p is log(1 + x), which loses tiny x)."""
    if not np.iscomplexobj(x):
        return np.log1p(x)
    a, b = np.real(x), np.imag(x)
    small = _make_complex(0.5 * np.log1p(a * (2 + a) + b * b), np.arctan2(b, 1 + a))
    return np.where(np.abs(x) < 0.5, small, np.log(_make_complex(1 + a, b))).astype(x.dtype)  # 1 + x loses b = -0


def _make_complex(re, im):
    re, im = np.broadcast_arrays(np.asarray(re), np.asarray(im))
    out = np.empty(re.shape, np.complex128 if re.dtype == np.float64 else np.complex64)
    out.real, out.imag = re, im
    return out


def _var(x, axis, keepdims, correction):
    """np.var; of a whole float32 or float64 array in C where it can (numpy's formula and bits:
    :func:`native.var`), else a float32 variance of a whole contiguous array of at most 2**20
    elements as np.var computes it (the mean, the deviations, their squares summed, divided by
    n - correction), the sum of squares one BLAS dot product instead of a multiply and a sum
    (beyond that size numpy's pairwise sum keeps the rounding smaller, and the call's overhead no
    longer matters)."""
    n = x.size
    whole = _whole(x, axis)
    if whole:
        v = _native.var(x, correction)
        if v is not None:
            return np.reshape(v, (1,) * x.ndim) if keepdims else v
    if not whole or x.dtype is not _F32 or not correction < n <= 1 << 20 or not x.flags.c_contiguous:
        return np.var(x, axis=axis, keepdims=keepdims, ddof=correction)
    d = np.subtract(x.reshape(-1), np.float32(_SUM(x, axis=None) / np.intp(n)))
    v = np.dot(d, d)
    v = v.dtype.type(v / (n - correction))
    return np.reshape(v, (1,) * x.ndim) if keepdims else v


def _whole(x, axis) -> bool:
    """Does ``axis`` reduce all of ``x``? (canon lists every axis once)"""
    return axis is None or (type(axis) is tuple and len(axis) == x.ndim)


def _std(x, axis, keepdims, correction):
    if _whole(x, axis):
        v = _native.var(x, correction)  # np.std is the square root of np.var, rounded in its dtype
        if v is not None:
            v = np.sqrt(v)
            return np.reshape(v, (1,) * x.ndim) if keepdims else v
    return np.std(x, axis=axis, keepdims=keepdims, ddof=correction)


# Reductions call the ufunc's reduce, as np.sum / np.max do, without their Python layers.
def _sum(x, axis, keepdims, dtype=None):
    r = _native.reduce(x, axis, keepdims, _native.SUM)  # float32/float64 (16-bit floats arrive as float32)
    return np.add.reduce(x, axis=axis, keepdims=keepdims, dtype=x.dtype) if r is None else r  # numpy would widen small ints


def _prod(x, axis, keepdims, dtype=None):
    return np.multiply.reduce(x, axis=axis, keepdims=keepdims, dtype=x.dtype)


def _extreme(ufunc, op):
    """The kernel of max (``np.maximum``) or min: float32 and float64 in C where they can."""
    reduce, native = ufunc.reduce, _native.reduce

    def k(ctx, x, axis, keepdims):
        r = native(x, axis, keepdims, op)
        return reduce(x, axis=axis, keepdims=keepdims) if r is None else r

    c = _native.extreme(op, k)  # the common case without Python frames
    return k if c is None else c


def _reduction(fn, ufunc):
    """The kernel of sum or prod: ``_half_via_f32(fn)``, with the common case (not a 16-bit
    float) one call deep."""
    generic = _half_via_f32(fn)
    if _fp_state is None:
        return generic
    reduce, set_, reset = ufunc.reduce, _fp_state.set, _fp_state.reset

    native = _native.reduce if ufunc is np.add else None

    def k(ctx, x, axis, keepdims, dtype=None):
        dt = x.dtype
        if native is not None:  # float32 and float64 sums in C (numpy's pairwise sum, its bits)
            r = native(x, axis, keepdims, _native.SUM)
            if r is not None:
                return r
        if dt in (_HALF or _half_dtypes()):
            return generic(ctx, x, axis=axis, keepdims=keepdims)
        token = set_(_IGNORE)
        try:
            return reduce(x, axis=axis, keepdims=keepdims, dtype=dt)
        finally:
            reset(token)

    return k


def _mean(x, axis, keepdims):
    """np.mean of a floating array: the sum divided by the count as np.mean divides (by an intp,
    so float32 results round from float64 as numpy's do); np.mean itself for other dtypes and
    empty reductions (its NaN and warning)."""
    if x.dtype.kind not in "fc":
        return np.mean(x, axis=axis, keepdims=keepdims)
    if axis is None:
        n = x.size
    else:
        n = 1
        for a in (axis,) if type(axis) is int else axis:
            n *= x.shape[a]
    if n == 0:
        return np.mean(x, axis=axis, keepdims=keepdims)
    r = _native.reduce(x, axis, keepdims, _native.SUM)
    if r is None:
        r = np.add.reduce(x, axis=axis, keepdims=keepdims)
    elif not r.ndim:  # np.mean's float64 division by the count, rounded to the dtype, without the ufunc
        return r.dtype.type(float(r) / n)
    if type(r) is np.ndarray:
        return np.true_divide(r, np.intp(n), out=r, casting="unsafe")
    return r.dtype.type(r / np.intp(n))


def _logsumexp(x, axis, keepdims):
    m = _MAX(x, axis=axis, keepdims=True)
    m = np.where(np.isinf(m), 0, m)
    r = np.log(_SUM(np.exp(x - m), axis=axis, keepdims=True)) + m
    return r if keepdims else np.squeeze(r, axis=axis)


def _logaddexp(a, b):
    return np.logaddexp(a, b)


def power(a, b, out=None):
    """numpy's power with integer ** negative integer defined as the registry's pow says: the
    truncated reciprocal (1 for base 1, 1 or -1 for base -1 by the exponent's parity, else 0)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind != "i" or not (b < 0).any():
        r = np.power(a, b, out=out)
        if b.size == 1 and a.dtype.kind == "f" and b.reshape(-1)[0] == 0.5:
            # numpy takes x ** 0.5 as sqrt(x): NaN for -inf and -0 for -0, where pow gives +inf and +0
            r = np.where((a == 0) | (a == -np.inf), np.abs(a), r)
            if out is not None:
                out[...] = r
                return out
        return r
    neg = b < 0
    r = np.power(a, np.where(neg, 0, b).astype(b.dtype))
    rec = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 != 0, -1, 1), 0)).astype(a.dtype)
    r = np.where(neg, rec, r)
    if out is None:
        return r
    out[...] = r
    return out


def _clip(x, min=None, max=None):
    if min is not None:
        x = np.maximum(x, np.asarray(min, dtype=np.asarray(x).dtype))
    if max is not None:
        x = np.minimum(x, np.asarray(max, dtype=np.asarray(x).dtype))
    return x


# op name -> (implementation, wrapper). Wrappers: "plain" (fast, no error-state change),
# "quiet" (numpy floating warnings silenced), "half" (float16/bfloat16 computed in float32),
# "reduce" (sum and prod: "half", one call deep for other dtypes), "ctx" (a kernel as it is: takes
# ctx first, one call deep).
_TABLE = {
    "add": (np.add, "plain"), "subtract": (np.subtract, "plain"), "multiply": (np.multiply, "plain"),
    "divide": (np.divide, "quiet"), "pow": (power, "quiet"), "maximum": (np.maximum, "plain"),
    "minimum": (np.minimum, "plain"), "remainder": (np.remainder, "quiet"),
    "floor_divide": (np.floor_divide, "quiet"), "equal": (np.equal, "plain"), "not_equal": (np.not_equal, "plain"),
    "less": (np.less, "plain"), "less_equal": (np.less_equal, "plain"), "greater": (np.greater, "plain"),
    "greater_equal": (np.greater_equal, "plain"), "bitwise_and": (np.bitwise_and, "plain"),
    "bitwise_or": (np.bitwise_or, "plain"), "bitwise_xor": (np.bitwise_xor, "plain"),
    "bitwise_left_shift": (np.left_shift, "plain"), "bitwise_right_shift": (np.right_shift, "plain"),
    "logical_and": (np.logical_and, "plain"), "logical_or": (np.logical_or, "plain"),
    "logical_xor": (np.logical_xor, "plain"), "hypot": (np.hypot, "half"), "logaddexp": (_logaddexp, "half"),
    "negative": (np.negative, "plain"), "positive": (np.positive, "plain"), "abs": (np.abs, "plain"),
    "exp": (np.exp, "half"), "expm1": (_expm1, "half"), "log": (np.log, "half"), "log1p": (_log1p, "half"),
    "log2": (np.log2, "half"), "log10": (np.log10, "half"), "sqrt": (np.sqrt, "half"), "square": (np.square, "quiet"),
    "sin": (np.sin, "half"), "cos": (np.cos, "half"), "tan": (np.tan, "half"), "sinh": (np.sinh, "half"),
    "cosh": (np.cosh, "half"), "tanh": (np.tanh, "half"), "floor": (np.floor, "plain"), "ceil": (np.ceil, "plain"),
    "trunc": (np.trunc, "plain"), "round": (np.round, "plain"), "sign": (_sign, "plain"),
    "real": (lambda x: np.real(x).copy(), "plain"), "imag": (lambda x: np.imag(x).copy(), "plain"),
    "conj": (np.conj, "plain"), "make_complex": (_make_complex, "plain"),
    "reciprocal": (lambda x: np.divide(np.ones((), np.asarray(x).dtype), x), "quiet"), "isnan": (np.isnan, "plain"), "isinf": (np.isinf, "plain"),
    "isfinite": (np.isfinite, "plain"), "logical_not": (np.logical_not, "plain"), "bitwise_invert": (np.invert, "plain"),
    "erf": (_erf, "half"), "relu": (lambda x: np.maximum(x, np.zeros((), np.asarray(x).dtype)), "plain"),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), "half"), "gelu": (_gelu, "half"),
    "where": (np.where, "plain"), "clip": (_clip, "quiet"),
    "sum": (_sum, "reduce"), "prod": (_prod, "reduce"), "max": (_extreme(np.maximum, _native.MAX), "ctx"),
    "min": (_extreme(np.minimum, _native.MIN), "ctx"),
    "argmax": (_argreduce(np.argmax), "plain"), "argmin": (_argreduce(np.argmin), "plain"),
    "mean": (_mean, "half"), "var": (_var, "half"),
    "std": (_std, "half"), "any": (lambda x, axis, keepdims: np.any(x, axis=axis, keepdims=keepdims), "plain"),
    "all": (lambda x, axis, keepdims: np.all(x, axis=axis, keepdims=keepdims), "plain"), "logsumexp": (_logsumexp, "half"),
    "matmul": (np.matmul, "half"), "vecdot": (lambda a, b, axis: np.sum(np.conj(a) * b, axis=axis, dtype=np.asarray(a).dtype), "half"),
    "matrix_transpose": (lambda x: np.swapaxes(x, -1, -2), "plain"),
    "reshape": (lambda ctx, x, shape, copy=None: x.reshape(shape), "ctx"),
    "permute_dims": (lambda ctx, x, axes: x.transpose(axes), "ctx"),
    "broadcast_to": (lambda x, shape: np.broadcast_to(x, shape), "plain"), "concat": (np.concatenate, "plain"),  # axis=None: flattened
    "stack": (lambda arrays, axis: np.stack(arrays, axis=axis), "plain"),
    "squeeze": (lambda x, axis: np.squeeze(x, axis=axis), "plain"),
    "expand_dims": (lambda x, axis: np.expand_dims(x, axis), "plain"),
    "flip": (lambda x, axis: np.flip(x, axis=axis) if np.ndim(x) else x, "plain"), "astype": (_native.astype(_astype) or _astype, "ctx"),
    "getitem": (lambda ctx, x, key: np.asarray(x)[_numpy_key(key)], "ctx"), "setitem": (_setitem, "plain"), "take": (_take, "plain"),
    "full": (_full, "plain"),
    "arange": (_arange, "plain"), "eye": (_eye, "plain"), "linspace": (_linspace, "plain"),
    "softmax": (_softmax, "rows"), "log_softmax": (_log_softmax, "rows"), "cross_entropy": (_cross_entropy, "half"),
    "layer_norm": (_layer_norm, "half"), "linear": (lambda x, w, b: np.matmul(x, w.T) + b, "half"),
}


def _matmul():
    """matmul's kernel: two float32/float64 matrices that are not views through ``ndarray.dot``,
    the same BLAS call as ``np.matmul`` (the same bits) without the ufunc layers, warnings
    silenced as the quiet kernel silences them; the quiet ufunc kernel otherwise (batches,
    vectors, other dtypes, views: ``dot`` may take a view and its base, ``a @ a.T``, as a
    symmetric product with other rounding)."""
    generic = _ufunc_kernel(np.matmul, True)
    dot = _native.quiet(np.ndarray.dot, generic, None, _HALF, _fp_state, _IGNORE) if _fp_state is not None else None
    if dot is None:  # no C kernels (or an old numpy): the quiet ufunc kernel for every call
        return generic
    f32, f64, nd = np.dtype(np.float32), np.dtype(np.float64), np.ndarray

    def k(ctx, a, b):
        if (type(a) is nd and type(b) is nd and a.ndim == 2 and b.ndim == 2 and a.base is None and b.base is None
                and a.dtype is b.dtype and (a.dtype is f32 or a.dtype is f64)):
            return dot(ctx, a, b)
        return generic(ctx, a, b)

    return k


def _plain(fn):
    def k(ctx, *a, **kw):
        return fn(*a, **kw)

    c = _native.plain(fn)  # k, in C
    return k if c is None else c


_WRAP = {"plain": _plain, "quiet": _quiet, "half": _half_via_f32}


def _fast_binary(fn):
    def k(ctx, a, b):
        return fn(a, b)

    c = _native.plain(fn)  # k, in C
    return k if c is None else c


def register(kernels) -> None:
    for name, (fn, how) in _TABLE.items():
        if name == "matmul":
            kernels.register(name, _matmul())
        elif name in ("concat", "where"):
            generic = _plain(fn)
            kernels.register(name, getattr(_native, name)(generic) or generic)
        elif how == "plain" and isinstance(fn, np.ufunc) and fn.nin == 2:
            kernels.register(name, _fast_binary(fn))
        elif how in ("quiet", "half") and isinstance(fn, np.ufunc):
            kernels.register(name, _ufunc_kernel(fn, how == "half"))
        elif how == "ctx":
            kernels.register(name, fn)
        elif how == "rows":
            kernels.register(name, _rows_kernel(fn, name == "log_softmax"))
        elif how == "reduce":
            kernels.register(name, _reduction(fn, {"sum": np.add, "prod": np.multiply}[name]))
        else:
            kernels.register(name, _WRAP[how](fn))
    for name, fn in _random_kernels(np, chunk=1 << 14).items():  # Philox rounds in cache-sized passes
        kernels.register(name, _plain(fn))
    _nn.register(kernels, _WRAP)
    _sorting.register(kernels)
    _elementwise2.register(kernels, _WRAP)
    _linalg.register(kernels)
    _manipulation.register(kernels)
    _optim.register(kernels)
