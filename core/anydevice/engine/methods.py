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
from anydevice.engine.dispatch import xp
from anydevice.engine.tensor import Tensor, _new, to_device
from anydevice.ops.indexing import canonical_key
from anydevice.ops.registry import get_op
from anydevice.runtime.devices import as_device


# --- methods ------------------------------------------------------------------------------------
def _T(self) -> Tensor:
    if self.ndim != 2:
        raise ValueError(f"Tensor.T needs a 2-D tensor, this one is {self.ndim}-D; use permute_dims() or mT")
    return xp.permute_dims(self, (1, 0))


def _mT(self) -> Tensor:
    return xp.matrix_transpose(self)


def backward(self, grad=None) -> None:
    """Accumulate the gradient of this tensor into every leaf's ``.grad``."""
    _autograd.backward(self, grad)


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


def cpu(self) -> Tensor:
    return to(self, "cpu")


def astype(self, dtype, copy: bool = True) -> Tensor:
    return xp.astype(self, _dt.dtype(dtype), copy=copy)


def reshape(self, *shape) -> Tensor:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return xp.reshape(self, shape)


def _sum(self, axis=None, keepdims=False):
    return xp.sum(self, axis=axis, keepdims=keepdims)


def _mean(self, axis=None, keepdims=False):
    return xp.mean(self, axis=axis, keepdims=keepdims)


def _max(self, axis=None, keepdims=False):
    return xp.max(self, axis=axis, keepdims=keepdims)


def _min(self, axis=None, keepdims=False):
    return xp.min(self, axis=axis, keepdims=keepdims)


# --- indexing -----------------------------------------------------------------------------------
def getitem(x, key):
    """``x[key]``: an integer-tensor key gathers rows (``take``), anything else is a static key."""
    if isinstance(key, Tensor) and key.ndim == 1 and key.dtype.kind in ("int", "uint"):
        return xp.take(x, key, axis=0)
    if isinstance(key, Tensor) and key.dtype is _dt.bool_:
        raise IndexError("boolean mask indexing is not supported (data-dependent shape); use where()")
    return xp.getitem(x, key=canonical_key(key, x.shape))


def setitem(x, key, value):
    """A copy of ``x`` with ``x[key] = value``; ``Tensor.__setitem__`` rebinds ``x`` to it."""
    k = canonical_key(key, x.shape)
    if not isinstance(value, Tensor) and type(value) not in (bool, int, float, complex):
        value = asarray(value, dtype=x.dtype, device=x.device)
    return xp.setitem(x, value, key=k)


def _setitem_method(self, key, value) -> None:
    self._rebind(setitem(self, key, value))


# --- operators --------------------------------------------------------------------------------
_SCALARS = (int, float, bool, complex)
_scalar_bufs: dict = {}


def _scalar_buf(t: Tensor, v):
    """A cached 0-d buffer holding ``v`` in ``t``'s dtype on ``t``'s device (None: not allowed)."""
    key = (t.device._ctx, t.dtype, type(v), v)
    buf = _scalar_bufs.get(key)
    if buf is None:
        if not _dt.scalar_dtype_ok(v, t.dtype) or v != v or (v == 0 and type(v) is float):
            return None  # invalid here (the slow path explains), NaN, or a signed zero: not cached
        try:
            arr = np.asarray(v, dtype=t.dtype.numpy)
        except OverflowError:
            return None
        if len(_scalar_bufs) > 512:
            _scalar_bufs.clear()
        buf = _scalar_bufs[key] = t.device._backend.from_host(t.device.index, arr, t.dtype)
    return buf


def _binop(opname: str, reflected: bool = False):


    op = get_op(opname)
    fast = op.fast
    apply = _dispatch.apply
    observers = _dispatch._observers

    def fwd(self, other):
        t_other = type(other)
        if t_other is Tensor:
            plan = fast.get((self.device._ctx, self.dtype))
            if (plan is not None and other.dtype is self.dtype and other.device is self.device
                    and self.shape == other.shape and not observers
                    and (self._node is None and other._node is None or not _ag.is_grad_enabled())):
                t = _new(Tensor)
                t._buf = plan[0](self.device._ctx, self._buf, other._buf)
                t.shape, t.dtype, t.device, t._node = self.shape, plan[1], self.device, None
                return t
        elif t_other in _SCALARS:
            plan = fast.get((self.device._ctx, self.dtype))
            if plan is not None and not observers and (self._node is None or not _ag.is_grad_enabled()):
                buf = _scalar_buf(self, other)
                if buf is not None:
                    t = _new(Tensor)
                    t._buf = plan[0](self.device._ctx, self._buf, buf)
                    t.shape, t.dtype, t.device, t._node = self.shape, plan[1], self.device, None
                    return t
        elif not isinstance(other, Tensor):
            return NotImplemented
        return apply(op, [self, other], {})

    def rev(self, other):
        if type(other) in _SCALARS:
            plan = fast.get((self.device._ctx, self.dtype))
            if plan is not None and not observers and (self._node is None or not _ag.is_grad_enabled()):
                buf = _scalar_buf(self, other)
                if buf is not None:
                    t = _new(Tensor)
                    t._buf = plan[0](self.device._ctx, buf, self._buf)
                    t.shape, t.dtype, t.device, t._node = self.shape, plan[1], self.device, None
                    return t
        elif not isinstance(other, Tensor):
            return NotImplemented
        return apply(op, [other, self], {})

    return rev if reflected else fwd


def _inplace(opname: str):
    fwd = _binop(opname)

    def inplace(self, other):
        result = fwd(self, other)
        if result is NotImplemented:
            return NotImplemented
        self._rebind(result)
        return self

    return inplace


def _unop(opname: str):


    op = get_op(opname)

    def f(self):
        return _dispatch.apply(op, [self], {})

    return f


_BINARY = {
    "add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide", "floordiv": "floor_divide",
    "mod": "remainder", "pow": "pow", "matmul": "matmul", "and": "bitwise_and", "or": "bitwise_or",
    "xor": "bitwise_xor", "lshift": "bitwise_left_shift", "rshift": "bitwise_right_shift",
}
_COMPARE = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal"}
_UNARY = {"neg": "negative", "pos": "positive", "abs": "abs", "invert": "bitwise_invert"}


_METHODS = {
    "backward": backward, "to": to, "to_device": to, "cpu": cpu, "astype": astype, "reshape": reshape,
    "sum": _sum, "mean": _mean, "max": _max, "min": _min, "__getitem__": getitem, "__setitem__": _setitem_method,
}
_PROPERTIES = {"T": _T, "mT": _mT}


def install() -> None:
    """Attach the methods and operators to Tensor (idempotent)."""
    for name, fn in _METHODS.items():
        setattr(Tensor, name, fn)
    for name, fn in _PROPERTIES.items():
        setattr(Tensor, name, property(fn))
    for dunder, name in _BINARY.items():
        setattr(Tensor, f"__{dunder}__", _binop(name))
        setattr(Tensor, f"__r{dunder}__", _binop(name, reflected=True))
        setattr(Tensor, f"__i{dunder}__", _inplace(name))
    for dunder, name in _COMPARE.items():
        setattr(Tensor, f"__{dunder}__", _binop(name))
    for dunder, name in _UNARY.items():
        setattr(Tensor, f"__{dunder}__", _unop(name))
