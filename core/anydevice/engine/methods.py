"""Tensor methods that compute through the dispatcher: operators (``a + b``, ``a @ b``, ``a[i]``,
``a += b``), ``reshape``/``sum``/``astype``/``to``/``T``/``backward`` and friends.

:func:`install` attaches them to :class:`~anydevice.engine.tensor.Tensor` once, when
``anydevice`` is imported; the Tensor's data model stays in :mod:`anydevice.engine.tensor`,
below the dispatcher. The binary operators keep a fast path: same dtype, shape and device,
no graph and no observer go straight to the cached kernel.
"""
from __future__ import annotations

import numpy as np

from anydevice.base import dtypes as _dt
from anydevice.engine import autograd as _autograd
from anydevice.engine import dispatch as _dispatch
from anydevice.engine import graph as _ag
from anydevice.engine.creation import asarray
from anydevice.engine.dispatch import _MISS, xp
from anydevice.engine.dispatch import run_keyed as _run_keyed
from anydevice.engine.tensor import Tensor, _new, to_device
from anydevice.ops.indexing import canonical_key
from anydevice.ops.registry import all_ops as _all_ops
from anydevice.ops.registry import get_op, normalize_axis
from anydevice.runtime import streams as _streams
from anydevice.runtime.devices import as_device, register_cache

# --- methods ------------------------------------------------------------------------------------
_permute_dims = get_op("permute_dims")


def _T(self) -> Tensor:
    if len(self.shape) != 2:
        raise ValueError(f"Tensor.T needs a 2-D tensor, this one is {self.ndim}-D; use permute_dims() or mT")
    key = (self.device._ctx, self.dtype, self.shape, _permute_dims) if type(self) is Tensor else None
    return _dispatch.call_keyed(_permute_dims, (self, (1, 0)), {}, key)  # the key stands for axes (1, 0)


def _mT(self) -> Tensor:
    return xp.matrix_transpose(self)


def backward(self, grad=None, retain_graph: bool = False) -> None:
    """Accumulate the gradient of this tensor into every leaf's ``.grad``.

    The graph's saved values are freed afterwards, so a second ``backward()`` through it raises;
    pass ``retain_graph=True`` to keep them for another call."""
    _autograd.backward(self, grad, retain_graph)


def to(self, device=None, dtype=None, non_blocking: bool = False) -> Tensor:
    """Copy to another device and/or dtype (returns ``self`` when nothing changes).

    ``non_blocking=True`` queues a host-to-device copy instead of waiting for it."""
    if isinstance(device, (_dt.DType,)) and dtype is None:
        device, dtype = None, device
    t = self
    if dtype is not None:
        t = xp.astype(t, _dt.dtype(dtype))
    if device is not None:
        dev = as_device(device)
        if dev is not t.device:
            t = to_device(t, dev, non_blocking)
    return t


def _to_device(self, device, /, *, stream=None) -> Tensor:
    """Array API ``to_device``: this tensor on ``device`` (itself when it is already there); a
    ``stream`` of that device queues the copy there instead of on its current stream."""
    dev = as_device(device)
    if stream is None or dev is self.device:
        return to_device(self, dev)
    if not isinstance(stream, _streams.Stream) or stream.device is not dev:
        raise ValueError(f"to_device(): stream must be None or a Stream of {dev}, not {stream!r}")
    old = _streams.current_stream(dev)
    _streams.set_stream(stream)
    try:
        return to_device(self, dev, True)
    finally:
        _streams.set_stream(old)


def cpu(self) -> Tensor:
    return to(self, "cpu")


_astype = get_op("astype")


def astype(self, dtype, copy: bool = True) -> Tensor:
    d = dtype if type(dtype) is _dt.DType else _dt.dtype(dtype)
    if copy is True and type(self) is Tensor:  # the key stands for astype(x, d)
        key = (self.device._ctx, self.dtype, self.shape, _astype, d)
        r = _run_keyed(_astype, (self, d), key)
        return r if r is not _MISS else _dispatch.call_keyed(_astype, (self, d), {}, key)
    return xp.astype(self, d, copy=copy)


def reshape(self, *shape) -> Tensor:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return xp.reshape(self, shape)


# --- indexing -----------------------------------------------------------------------------------
_getitem = get_op("getitem")
_INDEX_PARTS = frozenset({int, type(None)})
_canonical: dict = {}  # (index id, shape) -> canonical key
_c_getitem = _dispatch._chit.getitem if _dispatch._chit is not None else None
_c_binary = _dispatch._chit.binary if _dispatch._chit is not None else None


def _index_id(key):
    """A hashable that stands for a basic index (ints, slices of ints, None, ``...`` and tuples
    of them; bools and anything else: None), for caching its canonical form."""
    t = type(key)
    if t is int:
        return key
    if t is slice:
        a, b, c = key.start, key.stop, key.step
        if type(a) in _INDEX_PARTS and type(b) in _INDEX_PARTS and type(c) in _INDEX_PARTS:
            return ("s", a, b, c)
        return None
    if t is not tuple:
        return None
    out = ["t"]
    for k in key:
        tk = type(k)
        if tk is int or k is None or k is Ellipsis:
            out.append(k)
        elif tk is slice and type(k.start) in _INDEX_PARTS and type(k.stop) in _INDEX_PARTS and \
                type(k.step) in _INDEX_PARTS:
            out.append(("s", k.start, k.stop, k.step))
        else:
            return None
    return tuple(out)


def getitem(x, key, /):
    """``x[key]``: an integer-tensor key gathers rows (``take``), anything else is a static key."""
    if _c_getitem is not None and (r := _c_getitem(_getitem, x, key)) is not _MISS:
        return r  # the cached basic index below, in C
    kid = _index_id(key) if type(x) is Tensor else None
    if kid is not None:  # a basic index: its canonical form and the call are cached per shape
        shape = x.shape
        k = (x.device._ctx, x.dtype, shape, _getitem, kid)
        r = _run_keyed(_getitem, (x,), k)  # the entry holds the canonical key
        if r is not _MISS:
            return r
        ck = _canonical.get((kid, shape))
        if ck is None:
            ck = canonical_key(key, shape)
            if len(_canonical) >= 4096:
                _canonical.clear()
            _canonical[(kid, shape)] = ck
        return _dispatch.call_keyed(_getitem, (x,), {"key": ck}, k)
    if isinstance(key, Tensor) and key.ndim == 1 and key.dtype.kind in ("int", "uint"):
        return xp.take(x, key, axis=0)
    mask = _mask_key(key)
    if mask is not None:  # x[mask]: the count is read back once (a data-dependent shape)
        return xp.getitem_mask(x, mask)
    return xp.getitem(x, key=canonical_key(key, x.shape))


def _mask_key(key):
    """The bool tensor of a mask index (``x[mask]``, ``x[(mask,)]``), else None."""
    if isinstance(key, tuple) and len(key) == 1:
        key = key[0]
    return key if isinstance(key, Tensor) and key.dtype is _dt.bool_ else None


def setitem(x, key, value):
    """A copy of ``x`` with ``x[key] = value``; ``Tensor.__setitem__`` rebinds ``x`` to it."""
    mask = _mask_key(key)
    k = canonical_key(key, x.shape) if mask is None else None
    if not isinstance(value, Tensor) and type(value) not in (bool, int, float, complex):
        value = asarray(value, dtype=x.dtype, device=x.device)
    if mask is not None:
        return xp.setitem_mask(x, mask, value)
    return xp.setitem(x, value, key=k)


def _setitem_method(self, key, value, /) -> None:
    self._rebind(setitem(self, key, value))


# --- operators --------------------------------------------------------------------------------
_SCALARS = (int, float, bool, complex)
_scalar_bufs: dict = {}


def _scalar_buf(t: Tensor, v):
    """A cached 0-d buffer holding ``v`` in ``t``'s dtype on ``t``'s device (None: not allowed).

    Kept per current stream (the calling thread's): a buffer is only ever read by work queued on
    the stream it was allocated on, so when the cache drops it, its memory is reused in that
    stream's order and never under a kernel of another stream that still reads it."""
    ctx = t.device._ctx
    key = (ctx, ctx.stream, t.dtype, type(v), v)
    buf = _scalar_bufs.get(key)
    if buf is None:
        if not _dt.scalar_dtype_ok(v, t.dtype) or v != v or (v == 0 and type(v) is float):
            return None  # invalid here (the slow path explains), NaN, or a signed zero: not cached
        try:
            arr = np.asarray(v, dtype=t.dtype.numpy)
        except (OverflowError, TypeError):  # out of range, or an int bfloat16 cannot convert: the slow path
            return None
        if len(_scalar_bufs) > 512:
            _scalar_bufs.clear()
        buf = _scalar_bufs[key] = t.device._backend.from_host(t.device.index, arr, t.dtype)
    return buf


def _type_name(x) -> str:
    t = type(x)
    return t.__name__ if t is Tensor else f"{t.__module__.split('.')[0]}.{t.__name__}"


def _mixing_error(expr: str, other) -> TypeError:
    return TypeError(
        f"{expr}: anydevice does not combine tensors with {_type_name(other)} implicitly (the "
        "result would leave the device and the autograd graph); convert it first with "
        "anydevice.asarray(arr, device=t.device), or compute on the host with np.asarray(t). "
        "Operands can be tensors and Python or numpy scalars (or 0-d numpy arrays)"
    )


def _numpy_scalar(x):
    """A numpy bool/int/float/complex scalar as the Python scalar of its kind (None otherwise):
    operators treat ``np.float32(2)`` like ``2.0``. A 0-d numpy array counts as a scalar too,
    since numpy itself turns a scalar into one before comparing it (``np.float32(2) < t``)."""
    if isinstance(x, (np.generic, np.ndarray)) and x.ndim == 0 and x.dtype.kind in "biufc":
        v = x.item()
        if type(v) in _SCALARS:
            return v
    return None


def _operand(other, left: bool, symbol: str):
    """``other`` as an operator operand (a Tensor or a Python scalar); NotImplemented lets Python
    try ``other``'s operator; arrays of other libraries raise."""
    if isinstance(other, Tensor):
        return other
    v = _numpy_scalar(other)
    if v is not None:
        return v
    if isinstance(other, (np.ndarray, np.generic)) or hasattr(other, "__array__") or hasattr(
            other, "__array_interface__"):
        name = _type_name(other)
        raise _mixing_error(f"Tensor {symbol} {name}" if left else f"{name} {symbol} Tensor", other)
    return NotImplemented


def _drop_scalar_bufs(device) -> None:
    """Forget the cached scalar buffers of ``device`` (``empty_cache()`` calls this first)."""
    ctx = device._ctx
    for key in [k for k in list(_scalar_bufs) if k[0] is ctx]:
        _scalar_bufs.pop(key, None)


register_cache(_drop_scalar_bufs)


def _binop(opname: str, reflected: bool = False, symbol: str = ""):


    op = get_op(opname)  # op.fast and op.plans are read per call: dropping devices replaces them
    apply = _dispatch.call_inputs
    observers = _dispatch._observers

    def fwd(self, other, /):
        t_other = type(other)
        if t_other is Tensor and _c_binary is not None and (r := _c_binary(op, self, other)) is not _MISS:
            return r  # the Tensor-Tensor branch below, in C
        if t_other is not Tensor and t_other not in _SCALARS:
            other = _operand(other, True, symbol)
            if other is NotImplemented:
                return NotImplemented
            t_other = type(other)
        if t_other is Tensor:
            ctx = self.device._ctx
            plan = op.fast.get((ctx, self.dtype))
            if (plan is not None and other.dtype is self.dtype and other.device is self.device
                    and self.shape == other.shape and not observers
                    and (self._node is None and other._node is None or not _ag.is_grad_enabled())):
                t = _new(Tensor)
                t._buf = plan[0](ctx, self._buf, other._buf)
                t.shape, t.dtype, t.device, t._node = self.shape, plan[1], self.device, None
                return t
            if plan is None and type(self) is Tensor:  # matmul, mixed shapes: the call cache at once, keyed as call_inputs keys
                key = (ctx, self.dtype, self.shape, other.device._ctx, other.dtype, other.shape)
                r = _run_keyed(op, (self, other), key)
                if r is not _MISS:
                    return r
        elif t_other in _SCALARS:
            plan = op.fast.get((self.device._ctx, self.dtype))
            if plan is not None and not observers and (self._node is None or not _ag.is_grad_enabled()):
                buf = _scalar_buf(self, other)
                if buf is not None:
                    t = _new(Tensor)
                    t._buf = plan[0](self.device._ctx, self._buf, buf)
                    t.shape, t.dtype, t.device, t._node = self.shape, plan[1], self.device, None
                    return t
        return apply(op, (self, other))

    def rev(self, other, /):
        if type(other) not in _SCALARS:
            other = _operand(other, False, symbol)
            if other is NotImplemented:
                return NotImplemented
        if type(other) in _SCALARS:
            plan = op.fast.get((self.device._ctx, self.dtype))
            if plan is not None and not observers and (self._node is None or not _ag.is_grad_enabled()):
                buf = _scalar_buf(self, other)
                if buf is not None:
                    t = _new(Tensor)
                    t._buf = plan[0](self.device._ctx, buf, self._buf)
                    t.shape, t.dtype, t.device, t._node = self.shape, plan[1], self.device, None
                    return t
        return apply(op, (other, self))

    return rev if reflected else fwd


def _inplace(opname: str, symbol: str = ""):
    fwd = _binop(opname, symbol=symbol)

    def inplace(self, other, /):
        result = fwd(self, other)
        if result is NotImplemented:
            return NotImplemented
        self._rebind(result)
        return self

    return inplace


# --- numpy's ufuncs ------------------------------------------------------------------------------
_UFUNC_OPS = {
    "add": "add", "subtract": "subtract", "multiply": "multiply", "divide": "divide", "floor_divide": "floor_divide",
    "remainder": "remainder", "power": "pow", "matmul": "matmul", "bitwise_and": "bitwise_and",
    "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor", "left_shift": "bitwise_left_shift",
    "right_shift": "bitwise_right_shift", "equal": "equal", "not_equal": "not_equal", "less": "less",
    "less_equal": "less_equal", "greater": "greater", "greater_equal": "greater_equal",
}


def _ufunc_operand(x):
    if isinstance(x, Tensor) or type(x) in _SCALARS:
        return x
    return _numpy_scalar(x)


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    """numpy calls this for ``ndarray ⊕ Tensor``, ``np.float32(2) * t`` and ``np.add(...)``.

    The operators' ufuncs on tensors and scalars compute on the device like the Tensor
    operators; anything involving a numpy array, or another ufunc, raises a TypeError that
    says how to convert (numpy never turns a tensor into a host array on its own)."""
    name = getattr(ufunc, "__name__", str(ufunc))
    opname = _UFUNC_OPS.get(name)
    if method == "__call__" and not kwargs and opname is not None and len(inputs) == 2:
        args = [_ufunc_operand(x) for x in inputs]
        if all(a is not None for a in args):
            return _dispatch.apply(get_op(opname), args, {})
    arrays = [x for x in inputs if _ufunc_operand(x) is None]
    what = ", ".join(_type_name(x) for x in inputs)
    call = f"numpy.{name}()" if method == "__call__" else f"numpy.{name}.{method}()"
    if arrays:
        expr = f"{call} on ({what})"
        if opname is not None and method == "__call__":
            expr += f" (what `ndarray {_OP_SYMBOLS[opname]} Tensor` calls)"
        raise _mixing_error(expr, arrays[0])
    fix = f"anydevice.{name}(t) on the device, or " if hasattr(xp, name) and method == "__call__" else ""
    raise TypeError(
        f"{call} does not compute on anydevice tensors (got {what}{', out=' if 'out' in kwargs else ''}); use "
        f"{fix}numpy on a host copy: np.{name}(np.asarray(t))"
    )


def _unop(opname: str):


    op = get_op(opname)
    call = _dispatch.call_inputs

    def f(self):
        return call(op, (self,))

    return f


_BINARY = {
    "add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide", "floordiv": "floor_divide",
    "mod": "remainder", "pow": "pow", "matmul": "matmul", "and": "bitwise_and", "or": "bitwise_or",
    "xor": "bitwise_xor", "lshift": "bitwise_left_shift", "rshift": "bitwise_right_shift",
}
_COMPARE = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal"}
_UNARY = {"neg": "negative", "pos": "positive", "abs": "abs", "invert": "bitwise_invert"}
_SYMBOLS = {
    "add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%", "pow": "**", "matmul": "@",
    "and": "&", "or": "|", "xor": "^", "lshift": "<<", "rshift": ">>",
    "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
}
_OP_SYMBOLS = {op: _SYMBOLS[dunder] for dunder, op in {**_BINARY, **_COMPARE}.items()}


# --- op methods generated from the registry -----------------------------------------------------
# Every op whose first input is a tensor becomes a method (``t.exp()``, ``t.argmax(axis=1)``,
# ``t.maximum(u)``) unless Tensor already has that name or the op is listed here; PyTorch's
# ``dim=``/``keepdim=`` keywords are accepted for ``axis=``/``keepdims=``.
_NOT_METHODS = {"getitem", "setitem", "where", "real", "imag", "linear", "layer_norm", "cross_entropy"}
# name -> (op, how the method's arguments become the op's: None passes them through)
_ALIASES = {
    "view": ("reshape", "dims"), "permute": ("permute_dims", "dims"), "unsqueeze": ("expand_dims", None),
    "expand": ("broadcast_to", "dims"), "clamp": ("clip", None), "neg": ("negative", None),
    "sub": ("subtract", None), "mul": ("multiply", None), "div": ("divide", None), "eq": ("equal", None),
    "ne": ("not_equal", None), "lt": ("less", None), "le": ("less_equal", None), "gt": ("greater", None),
    "ge": ("greater_equal", None), "logical_not": ("logical_not", None),
}
_KEYWORDS = {"dim": "axis", "keepdim": "keepdims"}
_CASTS = {"float": _dt.float32, "double": _dt.float64, "half": _dt.float16, "bfloat16": _dt.bfloat16,
          "long": _dt.int64, "int": _dt.int32, "short": _dt.int16, "bool": _dt.bool_}


def _op_method(name: str, opname: str, args_as=None):
    op = get_op(opname)
    fn = _dispatch.op_function(op)

    def method(self, *args, **kwargs):
        if kwargs:
            kwargs = {_KEYWORDS.get(k, k) if _KEYWORDS.get(k) in op.schema else k: v for k, v in kwargs.items()}
        if args_as == "dims" and not (len(args) == 1 and isinstance(args[0], (tuple, list))):
            args = (args,)  # t.permute(1, 0) as t.permute((1, 0))
        return fn(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``t.{name}(...)`` is ``anydevice.{opname}(t, ...)``.\n\n{fn.__doc__}"
    return method


def _cast(d):
    def method(self) -> Tensor:
        return xp.astype(self, d, copy=False)

    return method


def _flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge the axes ``start_dim`` .. ``end_dim`` into one (a 0-d tensor becomes 1-D)."""
    if self.ndim == 0:
        return xp.reshape(self, (1,))
    s, e = normalize_axis(start_dim, self.ndim, "flatten", "start_dim"), normalize_axis(end_dim, self.ndim, "flatten",
                                                                                        "end_dim")
    if s > e:
        raise ValueError(f"flatten(): start_dim {start_dim} comes after end_dim {end_dim} for a {self.ndim}-D tensor")
    return xp.reshape(self, self.shape[:s] + (int(np.prod(self.shape[s:e + 1])),) + self.shape[e + 1:])


def _transpose(self, dim0: int, dim1: int) -> Tensor:
    """Swap two axes."""
    a, b = (normalize_axis(d, self.ndim, "transpose", n) for d, n in ((dim0, "dim0"), (dim1, "dim1")))
    order = list(range(self.ndim))
    order[a], order[b] = b, a
    return xp.permute_dims(self, tuple(order))


def _squeeze(self, axis=None, dim=None) -> Tensor:
    """Drop axes of length 1: all of them by default, else ``axis`` (``dim``), as PyTorch."""
    axis = dim if axis is None else axis
    if axis is None:
        axis = tuple(i for i, n in enumerate(self.shape) if n == 1)
    return xp.squeeze(self, axis=axis)


def _clone(self) -> Tensor:
    """A copy that stays in the graph (gradients flow back to ``self``)."""
    return xp.astype(self, self.dtype, copy=True)


def _generated_methods() -> dict:
    out = {}
    for op in _all_ops():
        if op.inputs and not op.variadic and op.name not in _NOT_METHODS:
            out[op.name] = _op_method(op.name, op.name)
    for name, (opname, args_as) in _ALIASES.items():
        out[name] = _op_method(name, opname, args_as)
    out.update({name: _cast(d) for name, d in _CASTS.items()})
    out.update(flatten=_flatten, transpose=_transpose, squeeze=_squeeze, clone=_clone,
               dim=lambda self: self.ndim, numel=lambda self: self.size)
    return out


_METHODS = {
    "backward": backward, "to": to, "to_device": _to_device, "cpu": cpu, "astype": astype, "reshape": reshape,
    "__getitem__": getitem, "__setitem__": _setitem_method,
}
_PROPERTIES = {"T": _T, "mT": _mT}


def install() -> None:
    """Attach the methods and operators to Tensor (idempotent)."""
    for name, fn in _generated_methods().items():
        if name not in _METHODS and (name not in vars(Tensor) or getattr(vars(Tensor)[name], "_generated", False)):
            fn._generated = True
            setattr(Tensor, name, fn)
    for name, fn in _METHODS.items():
        setattr(Tensor, name, fn)
    for name, fn in _PROPERTIES.items():
        setattr(Tensor, name, property(fn))
    for dunder, name in _BINARY.items():
        sym = _SYMBOLS[dunder]
        setattr(Tensor, f"__{dunder}__", _binop(name, symbol=sym))
        setattr(Tensor, f"__r{dunder}__", _binop(name, reflected=True, symbol=sym))
        setattr(Tensor, f"__i{dunder}__", _inplace(name, symbol=sym + "="))
    for dunder, name in _COMPARE.items():
        setattr(Tensor, f"__{dunder}__", _binop(name, symbol=_SYMBOLS[dunder]))
    Tensor.__array_ufunc__ = _array_ufunc
    for dunder, name in _UNARY.items():
        setattr(Tensor, f"__{dunder}__", _unop(name))
