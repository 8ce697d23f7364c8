"""CuPy kernels for every op in the registry.

Kernels use the returning convention ``fn(ctx, *inputs, **attrs) -> cupy.ndarray``. Each one
runs on ``ctx``'s device and on its current stream (``with stream:``), so CuPy launches the
work there and takes its result memory from the pool of that stream.

Precision policy for float16 and bfloat16 (CuPy >= 14 stores bfloat16 via ``ml_dtypes``):

- ops marked ``"half"`` below (transcendentals, reductions, normalizations, ``linear``) run in float32 and
  are rounded back, as on the cpu backend, so they match the float32 reference to one rounding;
- the rest (arithmetic, comparisons, data movement, matmul on cuBLAS with float32 accumulation)
  run natively. If CuPy cannot run one of them on bfloat16 (no loop, a compile error, cuBLAS
  refusing the type on an old GPU) the op is redone in float32 and remembered (:data:`F32_ONLY`).
"""
from __future__ import annotations

import math

import cupy as cp
import numpy as np

from anydevice.base.errors import OutOfMemoryError
from anydevice.ops.indexing import to_numpy_key
from anydevice.ops.random import array_kernels as _random_kernels
from anydevice_cpu.kernels_manipulation import array_kernels as _manipulation_kernels
from anydevice_cpu.kernels_nn import table as _nn_table  # the deep-learning ops, on CuPy
from anydevice_cpu.kernels_sorting import array_kernels as _sorting_kernels
from anydevice_cuda import kernels_elementwise2 as _elementwise2  # (absolute: tests load this file alone)
from anydevice_cuda import kernels_optim as _optim
from anydevice_cuda.kernels_linalg import table as _linalg_table  # the linalg and fft extensions

_BF16 = None
try:
    import ml_dtypes

    _BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a dependency of anydevice
    pass
_HALF = tuple(d for d in (np.dtype(np.float16), _BF16) if d is not None)
_F32 = np.dtype(np.float32)

#: Ops found unable to run natively on bfloat16 in this process; they run in float32 instead.
F32_ONLY: set = set()

#: Ops of the registry deliberately without a cuda kernel, with the reason (none today).
INTENTIONALLY_ABSENT: dict = {}

_OOM = cp.cuda.memory.OutOfMemoryError


def _dtype_failures() -> tuple:
    errs = [TypeError, NotImplementedError]
    try:
        from cupy.cuda.compiler import CompileException

        errs.append(CompileException)
    except ImportError:  # pragma: no cover
        pass
    try:
        from cupy_backends.cuda.libs.cublas import CUBLASError

        errs.append(CUBLASError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(errs)


_DTYPE_FAILURES = _dtype_failures()
_RETRY = (_OOM,) + _DTYPE_FAILURES


# --- running on the right device and stream ------------------------------------------------
def _call(ctx, fn, a, kw):
    s = ctx.stream
    if not ctx.runtime.multi:
        if s is None:
            return fn(*a, **kw)
        with s:
            return fn(*a, **kw)
    with cp.cuda.Device(ctx.index):
        if s is None:
            return fn(*a, **kw)
        with s:
            return fn(*a, **kw)


def _launch(name, fn):
    """A kernel running ``fn`` on ctx's device and stream; out of memory frees the cache and retries once."""

    def kernel(ctx, *a, **kw):
        try:
            return _call(ctx, fn, a, kw)
        except _OOM:
            ctx.runtime.empty_cache(ctx.index)
            try:
                return _call(ctx, fn, a, kw)
            except _OOM as e:
                raise OutOfMemoryError(
                    f"{name} on cuda:{ctx.index} ran out of GPU memory even after releasing the cached blocks "
                    f"(plugin anydevice-cuda): {e}. Free tensors, use smaller batches, or check other processes "
                    f"with nvidia-smi"
                ) from e

    kernel.__name__ = f"cuda_{name}"
    return kernel


def _launch_binary(name, fn, impl):
    """The hot path of binary ufuncs (``a + b``): call CuPy directly when no device or stream
    switch is needed; anything unusual (out of memory, a bfloat16 gap) takes the full path."""
    slow = _launch(name, impl)

    def kernel(ctx, a, b):
        if ctx.runtime.multi or ctx.stream is not None:
            return slow(ctx, a, b)
        try:
            return fn(a, b)
        except _RETRY:
            return slow(ctx, a, b)

    kernel.__name__ = f"cuda_{name}"
    return kernel


# --- float16 / bfloat16 -----------------------------------------------------------------------
def _first(a):
    x = a[0] if a else None
    return x[0] if isinstance(x, list) and x else x


def _up(x, dt):
    if isinstance(x, list):
        return [_up(t, dt) for t in x]
    return x.astype(_F32) if isinstance(x, cp.ndarray) and x.dtype == dt else x


def _half_via_f32(fn):
    """Run ``fn`` in float32 for float16/bfloat16 inputs and round the result back."""

    def k(*a, **kw):
        x0 = _first(a)
        dt = getattr(x0, "dtype", None)
        if dt is None or dt not in _HALF:
            return fn(*a, **kw)
        r = fn(*[_up(x, dt) for x in a], **kw)
        return r.astype(dt) if r.dtype == _F32 else r

    return k


def _uses_bf16(a, kw) -> bool:
    if _BF16 is None:
        return False
    if getattr(kw.get("dtype"), "name", None) == "bfloat16":
        return True
    return any(getattr(t, "dtype", None) == _BF16 for x in a for t in (x if isinstance(x, list) else (x,)))


def _bf16_guard(name, fn):
    """Native first; if CuPy cannot do ``name`` on bfloat16, redo it in float32 from then on."""
    via = _half_via_f32(fn)

    def k(*a, **kw):
        if name in F32_ONLY and _uses_bf16(a, kw):
            return _bf16_in_f32(via, a, kw)
        try:
            return fn(*a, **kw)
        except _DTYPE_FAILURES:
            if not _uses_bf16(a, kw):
                raise
            F32_ONLY.add(name)
            return _bf16_in_f32(via, a, kw)

    return k


def _bf16_in_f32(via, a, kw):
    d = kw.get("dtype")
    if getattr(d, "name", None) == "bfloat16":  # creation ops: make float32, then round
        from anydevice.base import dtypes as _dt

        return via(*a, **{**kw, "dtype": _dt.float32}).astype(_BF16)
    return via(*a, **kw)


# --- op implementations ------------------------------------------------------------------------
_consts: dict = {}


def _const(value, dtype):
    """A cached 0-d device array (immutable, so safe to share) on the current device."""
    key = (cp.cuda.runtime.getDevice(), dtype, type(value), repr(value))  # repr: NaN and -0.0 as keys
    c = _consts.get(key)
    if c is None:
        if len(_consts) > 256:
            _consts.clear()
        c = _consts[key] = cp.full((), value, dtype=dtype)
    return c


def _keep_ints(fn):
    """floor/ceil/trunc/round: integers and bools are already integral."""

    def k(x):
        return x if x.dtype.kind in "biu" else fn(x)

    return k


def _float_pred(fn, value):
    """isnan/isinf/isfinite: constant for integer and bool inputs (CuPy has no integer loops)."""

    def k(x):
        if x.dtype.kind in "biu":
            return cp.full(x.shape, value, dtype=np.bool_)
        return fn(x)

    return k


def _sign(x):
    if x.dtype.kind != "c":
        return cp.sign(x)
    # cos(θ) + sin(θ) j: x / |x| overflows for large parts and gives NaN a zero or ±1 part
    t = cp.angle(x)
    r = cp.where(x == 0, cp.zeros((), x.dtype), _make_complex(cp.cos(t), cp.sin(t)))
    return cp.where(cp.isnan(x), cp.asarray(complex(np.nan, np.nan), x.dtype), r)


def _make_complex(re, im):
    re, im = cp.broadcast_arrays(cp.asarray(re), cp.asarray(im))
    out = cp.empty(re.shape, np.complex128 if re.dtype == np.float64 else np.complex64)
    out.real, out.imag = re, im
    return out


def _expm1(x):
    """expm1; complex special values as exp(z) - 1, and an exact zero imaginary part for b = ±0."""
    r = cp.expm1(x)
    if x.dtype.kind == "c":
        r = cp.where(cp.isfinite(x), r, cp.exp(x) - 1)
        r = cp.where(cp.imag(x) == 0, _make_complex(cp.real(r), cp.imag(x)), r)
    return r


def _log1p(x):
    """log1p; complex |x| < 0.5 as 0.5 log1p(2a + a² + b²) + atan2(b, 1 + a) j (log(1 + x) loses tiny x)."""
    if x.dtype.kind != "c":
        return cp.log1p(x)
    a, b = cp.real(x), cp.imag(x)
    small = _make_complex(0.5 * cp.log1p(a * (2 + a) + b * b), cp.arctan2(b, 1 + a))
    return cp.where(cp.abs(x) < 0.5, small, cp.log(_make_complex(1 + a, b))).astype(x.dtype)


_erf_ufunc = None
try:
    from cupyx.scipy.special import erf as _erf_ufunc
except ImportError:  # pragma: no cover - cupyx ships with cupy
    pass
_erf_kernel = cp.ElementwiseKernel("T x", "T y", "y = erf(x)", "anydevice_erf")
_sigmoid_kernel = cp.ElementwiseKernel("T x", "T y", "y = 1 / (1 + exp(-x))", "anydevice_sigmoid")


def _erf(x):
    return _erf_ufunc(x) if _erf_ufunc is not None else _erf_kernel(x)


def _sigmoid(x):
    return _sigmoid_kernel(x) if x.dtype.kind == "f" else 1 / (1 + cp.exp(-x))


def _relu(x):
    return cp.maximum(x, _const(0, x.dtype))


def _gelu(x, approximate):
    if approximate == "tanh":  # x / (1 + e^(-2y)): 1 + tanh(y) cancels for negative x
        return x / (1 + cp.exp(-2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))
    return 0.5 * x * (1 + _erf(x * (1 / math.sqrt(2.0))))


def _astype(x, dtype, copy=True):
    if dtype.kind in ("int", "uint") and x.dtype.kind == "f":
        return cp.trunc(x).astype(dtype.numpy)
    return x.astype(dtype.numpy, copy=False)  # buffers are immutable: sharing is unobservable


def _getitem(x, key):
    return x[to_numpy_key(key)]


def _setitem(x, value, key):
    y = x.copy()
    y[to_numpy_key(key)] = value
    return y


def _index_in_range(x, low, high):  # one flag on the device: the caller reads it back
    info, ok = np.iinfo(x.dtype), cp.asarray(True)
    if x.size and low > info.min:  # a bound beyond the dtype's range holds for every value
        ok = ok & (x.min() >= low)
    if x.size and high <= info.max:
        ok = ok & (x.max() < high)
    return ok


def _getitem_grad(g, shape, key):
    y = cp.zeros(shape, g.dtype)
    y[to_numpy_key(key)] = g
    return y


def _take(x, indices, axis):
    n = x.shape[axis]
    if indices.size:  # CuPy's take wraps out-of-range indices instead of raising
        i = indices.astype(np.int64, copy=False)
        if n == 0 or bool(cp.any((i < -n) | (i >= n))):
            raise IndexError(f"take(): index out of range for axis {axis} with size {n} (on cuda)")
    return cp.take(x, indices, axis=axis)


def _concat(arrays, axis):
    if axis is None:
        return cp.concatenate([a.reshape(-1) for a in arrays])
    return cp.concatenate(arrays, axis=axis)


def _arange(start, stop, step, dtype):
    n = max(0, math.ceil((stop - start) / step))
    if dtype.kind == "float":
        return (start + step * cp.arange(n, dtype=np.float64)).astype(dtype.numpy)
    return cp.arange(start, start + n * step, step, dtype=dtype.numpy)[:n]


def _argreduce(fn):
    def k(x, axis, keepdims):
        if axis is None:
            r = fn(x.reshape(-1))
            return r.astype(np.int64).reshape((1,) * x.ndim if keepdims else ())
        return fn(x, axis=axis, keepdims=keepdims).astype(np.int64, copy=False)

    return k


def _reduce(fn):
    def k(x, axis, keepdims, dtype=None):
        return fn(x, axis=axis, keepdims=keepdims)

    return k


def _accumulate(fn):
    """sum/prod: the input already has the accumulation dtype; keep it (CuPy would widen small ints)."""

    def k(x, axis, keepdims, dtype=None):
        return fn(x, axis=axis, keepdims=keepdims, dtype=x.dtype)

    return k


def _var(x, axis, keepdims, correction):
    n = 1
    for a in axis:
        n *= x.shape[a]
    d = x - cp.mean(x, axis=axis, keepdims=True)
    sq = d.real * d.real + d.imag * d.imag if d.dtype.kind == "c" else d * d
    return cp.sum(sq, axis=axis, keepdims=keepdims) / max(n - correction, 0)


def _std(x, axis, keepdims, correction):
    return cp.sqrt(_var(x, axis, keepdims, correction))


def _logsumexp(x, axis, keepdims):
    m = cp.max(x, axis=axis, keepdims=True)
    m = cp.where(cp.isinf(m), cp.zeros((), m.dtype), m)
    r = cp.log(cp.sum(cp.exp(x - m), axis=axis, keepdims=True)) + m
    return r if keepdims else cp.squeeze(r, axis=axis)


def _softmax(x, axis):
    if x.ndim == 0:  # 1, or NaN for NaN and ±inf
        return cp.exp(x - x) / cp.exp(x - x)
    e = cp.exp(x - cp.max(x, axis=axis, keepdims=True))
    return e / cp.sum(e, axis=axis, keepdims=True)


def _log_softmax(x, axis):
    if x.ndim == 0:  # 0, or NaN for NaN and ±inf
        return (x - x) - cp.log(cp.exp(x - x))
    s = x - cp.max(x, axis=axis, keepdims=True)
    return s - cp.log(cp.sum(cp.exp(s), axis=axis, keepdims=True))


def _cross_entropy(logits, labels, reduction):
    n = logits.shape[-1]
    if labels.size:  # CuPy's gathers do not check bounds
        k = labels.astype(np.int64, copy=False)
        if n == 0 or bool(cp.any((k < 0) | (k >= n))):
            raise IndexError(f"cross_entropy(): labels must be in [0, {n}) (on cuda)")
    lsm = _log_softmax(logits, -1)
    nll = -cp.take_along_axis(lsm, labels[..., None].astype(np.int64), axis=-1)[..., 0]
    if reduction == "none":
        return nll
    return (nll.sum() if reduction == "sum" else nll.mean()).astype(lsm.dtype)


def _cross_entropy_grad(logits, labels, grad, reduction):
    p = _softmax(logits, -1) - (labels[..., None] == cp.arange(logits.shape[-1])).astype(logits.dtype)
    if reduction == "none":
        return p * grad[..., None]
    return p * (grad if reduction == "sum" else grad / max(labels.size, 1))


def _softmax_grad(g, out, axis):
    return cp.zeros_like(g) if out.ndim == 0 else out * (g - cp.sum(g * out, axis=axis, keepdims=True))


def _log_softmax_grad(g, out, axis):
    return cp.zeros_like(g) if out.ndim == 0 else g - cp.exp(out) * cp.sum(g, axis=axis, keepdims=True)


def _layer_norm(x, weight, bias, eps):
    axes = tuple(range(x.ndim - weight.ndim, x.ndim))
    m = x.mean(axis=axes, keepdims=True)
    d = x - m
    v = (d * d).mean(axis=axes, keepdims=True)
    return (d / cp.sqrt(v + eps) * weight + bias).astype(x.dtype)


def _clip(x, min=None, max=None):
    if min is not None:
        x = cp.maximum(x, _const(min, x.dtype))
    if max is not None:
        x = cp.minimum(x, _const(max, x.dtype))
    return x


def _power(a, b):
    """Integer ** negative integer as the registry's pow defines it (the truncated reciprocal:
    1 for base 1, 1 or -1 for base -1 by the exponent's parity, else 0), without a sync."""
    if a.dtype.kind != "i":
        return cp.power(a, b)
    neg = b < 0
    r = cp.power(a, cp.where(neg, 0, b).astype(b.dtype))
    rec = cp.where(a == 1, 1, cp.where(a == -1, cp.where(b % 2 != 0, -1, 1), 0)).astype(a.dtype)
    return cp.where(neg, rec, r)


def _linspace(start, stop, num, dtype, endpoint):
    return cp.linspace(start, stop, num, endpoint=endpoint).astype(dtype.numpy)


def _matmul(a, b):
    r = cp.matmul(a, b)
    return r if r.dtype == a.dtype else r.astype(a.dtype)


def _flip(x, axis):
    return cp.flip(x, axis=axis) if x.ndim else x


# op name -> (implementation, precision). "half": float16/bfloat16 computed in float32;
# "native": the input dtype itself (bfloat16 falls back to float32 if CuPy refuses it).
TABLE = {
    "add": (cp.add, "native"), "subtract": (cp.subtract, "native"), "multiply": (cp.multiply, "native"),
    "divide": (cp.divide, "native"), "pow": (_power, "half"), "maximum": (cp.maximum, "native"),
    "minimum": (cp.minimum, "native"), "remainder": (cp.remainder, "half"),
    "floor_divide": (cp.floor_divide, "half"), "equal": (cp.equal, "native"), "not_equal": (cp.not_equal, "native"),
    "less": (cp.less, "native"), "less_equal": (cp.less_equal, "native"), "greater": (cp.greater, "native"),
    "greater_equal": (cp.greater_equal, "native"), "bitwise_and": (cp.bitwise_and, "native"),
    "bitwise_or": (cp.bitwise_or, "native"), "bitwise_xor": (cp.bitwise_xor, "native"),
    "bitwise_left_shift": (cp.left_shift, "native"), "bitwise_right_shift": (cp.right_shift, "native"),
    "logical_and": (cp.logical_and, "native"), "logical_or": (cp.logical_or, "native"),
    "logical_xor": (cp.logical_xor, "native"), "hypot": (cp.hypot, "half"), "logaddexp": (cp.logaddexp, "half"),
    "negative": (cp.negative, "native"), "positive": (cp.positive, "native"), "abs": (cp.abs, "native"),
    "exp": (cp.exp, "half"), "expm1": (_expm1, "half"), "log": (cp.log, "half"), "log1p": (_log1p, "half"),
    "log2": (cp.log2, "half"), "log10": (cp.log10, "half"), "sqrt": (cp.sqrt, "half"), "square": (cp.square, "native"),
    "sin": (cp.sin, "half"), "cos": (cp.cos, "half"), "tan": (cp.tan, "half"), "sinh": (cp.sinh, "half"),
    "cosh": (cp.cosh, "half"), "tanh": (cp.tanh, "half"), "floor": (_keep_ints(cp.floor), "native"),
    "ceil": (_keep_ints(cp.ceil), "native"), "trunc": (_keep_ints(cp.trunc), "native"),
    "round": (_keep_ints(cp.rint), "native"), "sign": (_sign, "native"), "reciprocal": (lambda x: cp.divide(1, x), "half"),
    "real": (lambda x: cp.real(x).copy(), "native"), "imag": (lambda x: cp.imag(x).copy(), "native"),
    "conj": (cp.conj, "native"), "make_complex": (_make_complex, "native"),
    "isnan": (_float_pred(cp.isnan, False), "native"), "isinf": (_float_pred(cp.isinf, False), "native"),
    "isfinite": (_float_pred(cp.isfinite, True), "native"), "logical_not": (cp.logical_not, "native"),
    "bitwise_invert": (cp.invert, "native"), "erf": (_erf, "half"), "relu": (_relu, "native"),
    "sigmoid": (_sigmoid, "half"), "gelu": (_gelu, "half"), "where": (cp.where, "native"), "clip": (_clip, "half"),
    "sum": (_accumulate(cp.sum), "half"), "prod": (_accumulate(cp.prod), "half"), "max": (_reduce(cp.max), "native"),
    "min": (_reduce(cp.min), "native"), "argmax": (_argreduce(cp.argmax), "native"),
    "argmin": (_argreduce(cp.argmin), "native"), "mean": (_reduce(cp.mean), "half"), "var": (_var, "half"),
    "std": (_std, "half"), "any": (_reduce(cp.any), "native"), "all": (_reduce(cp.all), "native"),
    "logsumexp": (_logsumexp, "half"), "matmul": (_matmul, "native"),
    "vecdot": (lambda a, b, axis: cp.sum(cp.conj(a) * b, axis=axis, dtype=a.dtype), "half"),
    "matrix_transpose": (lambda x: cp.swapaxes(x, -1, -2), "native"),
    "reshape": (lambda x, shape, copy=None: cp.reshape(x, shape), "native"),
    "permute_dims": (lambda x, axes: cp.transpose(x, axes), "native"),
    "broadcast_to": (lambda x, shape: cp.broadcast_to(x, shape), "native"), "concat": (_concat, "native"),
    "stack": (lambda arrays, axis: cp.stack(arrays, axis=axis), "native"),
    "squeeze": (lambda x, axis: cp.squeeze(x, axis=axis), "native"),
    "expand_dims": (lambda x, axis: cp.expand_dims(x, axis), "native"), "flip": (_flip, "native"),
    "astype": (_astype, "native"), "getitem": (_getitem, "native"), "setitem": (_setitem, "native"),
    "getitem_grad": (_getitem_grad, "native"), "index_in_range": (_index_in_range, "native"),
    "take": (_take, "native"),
    "full": (lambda shape, fill_value, dtype: cp.full(shape, fill_value, dtype=dtype.numpy), "native"),
    "arange": (_arange, "native"), "eye": (lambda n_rows, n_cols, k, dtype: cp.eye(n_rows, n_cols, k=k, dtype=dtype.numpy), "native"),
    "linspace": (_linspace, "native"), "softmax": (_softmax, "half"), "log_softmax": (_log_softmax, "half"),
    "cross_entropy": (_cross_entropy, "half"), "cross_entropy_grad": (_cross_entropy_grad, "half"),
    "softmax_grad": (_softmax_grad, "half"), "log_softmax_grad": (_log_softmax_grad, "half"),
    "relu_grad": (lambda g, x: g * (x > 0), "half"),
    "layer_norm": (_layer_norm, "half"),
    "linear": (lambda x, w, b: cp.matmul(x, w.T) + b, "half"),
}

TABLE.update(_nn_table(cp))
TABLE.update(_elementwise2.table(cp))
_BINARY_UFUNCS = {n for n, (f, how) in TABLE.items() if how == "native" and isinstance(f, cp.ufunc) and f.nin == 2}


def register(kernels) -> None:
    """Register every entry of :data:`TABLE`, and the random ops' kernels of
    :func:`anydevice.ops.random.array_kernels`, into an :class:`anydevice.backend.KernelTable`."""
    for name, (fn, how) in TABLE.items():
        impl = _half_via_f32(fn) if how == "half" else _bf16_guard(name, fn)
        if name in _BINARY_UFUNCS:
            kernels.register(name, _launch_binary(name, fn, impl))
        else:
            kernels.register(name, _launch(name, impl))
    for name, fn in _random_kernels(cp).items():  # exact integer and single-rounding steps: no float32 redo
        kernels.register(name, _launch(name, fn))
    for name, fn in _sorting_kernels(cp).items():  # the cpu backend's array kernels, on CuPy
        kernels.register(name, _launch(name, fn))
    for name, fn in _linalg_table(cp).items():
        kernels.register(name, _launch(name, fn))
    for name, fn in _manipulation_kernels(cp).items():  # roll ... triu: the cpu backend's array kernels, on CuPy
        kernels.register(name, _launch(name, fn))
    _optim.register(kernels, _launch, cp)
