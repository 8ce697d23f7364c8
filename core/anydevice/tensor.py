"""The Tensor: a device buffer with a shape, a dtype, a device and (optionally) a graph node.

Semantics, identical on every backend:

- **Values, not aliases.** No op result aliases another tensor observably: a buffer is
  never modified after it is produced, so backends may share memory between a tensor and
  a reshape of it without anyone noticing.
- **In-place updates rebind.** ``x[i] = v``, ``x += y`` compute a new buffer and make ``x``
  refer to it; other tensors computed from ``x`` earlier keep their values. A result's dtype
  must equal ``x.dtype`` (Array API rule for in-place operators).
- **Host copies.** ``.numpy()``, ``np.asarray(t)``, ``.item()`` and ``.tolist()`` return new
  host objects; changing them never changes the tensor. They synchronize with the device.
"""
from __future__ import annotations

import math

import numpy as np

from . import autograd as _ag
from . import dispatch as _dispatch
from . import dtypes as _dt

_new = object.__new__


class Tensor:
    """An n-dimensional array on one device. Build one with :func:`anydevice.asarray` and friends."""

    __slots__ = ("_buf", "shape", "dtype", "device", "_node", "__weakref__")
    __array_priority__ = 1000

    def __init__(self, *args, **kwargs):
        raise TypeError(
            "Tensor cannot be constructed directly; use anydevice.asarray(data, dtype=..., device=...), "
            "anydevice.to_tensor(...), zeros(), ones(), full() or arange()"
        )

    # --- basic properties -------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def place(self):
        """Paddle-style alias of :attr:`device`."""
        return self.device

    @property
    def T(self) -> "Tensor":
        if self.ndim != 2:
            raise ValueError(f"Tensor.T needs a 2-D tensor, this one is {self.ndim}-D; use permute_dims() or mT")
        return _api().permute_dims(self, (1, 0))

    @property
    def mT(self) -> "Tensor":
        return _api().matrix_transpose(self)

    # --- autograd ---------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self._node is not None

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if value:
            if self._node is not None:
                return
            if self.dtype.kind not in ("float", "complex"):
                raise TypeError(f"only floating-point tensors can require gradients, this one is {self.dtype.name}")
            self._node = _ag.Node()
        else:
            if self._node is not None and self._node.op is not None:
                raise RuntimeError("requires_grad=False can only be set on a leaf tensor; use .detach()")
            self._node = None

    def requires_grad_(self, value: bool = True) -> "Tensor":
        self.requires_grad = value
        return self

    @property
    def stop_gradient(self) -> bool:
        """Paddle-style inverse of :attr:`requires_grad`."""
        return not self.requires_grad

    @stop_gradient.setter
    def stop_gradient(self, value: bool) -> None:
        self.requires_grad = not value

    @property
    def is_leaf(self) -> bool:
        return self._node is None or self._node.op is None

    @property
    def grad(self):
        n = self._node
        return None if n is None else n.grad

    @grad.setter
    def grad(self, value) -> None:
        if self._node is None:
            raise RuntimeError("cannot set .grad on a tensor that does not require grad")
        self._node.grad = value

    def retain_grad(self) -> None:
        if self._node is None:
            raise RuntimeError("retain_grad() on a tensor that does not require grad")
        self._node.retain = True

    def backward(self, grad=None) -> None:
        _ag.backward(self, grad)

    def detach(self) -> "Tensor":
        return _detached(self)

    def clear_grad(self) -> None:
        if self._node is not None:
            self._node.grad = None

    # --- host access ------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """A new host array with this tensor's values (synchronizes with the device)."""
        be = self.device._backend
        arr = be.to_host(self._buf, self.device.index, self.shape, self.dtype)
        if be.own_storage:
            arr = np.array(arr, dtype=self.dtype.numpy, copy=True)
        return arr

    def __array__(self, dtype=None, copy=None):
        if copy is False:
            raise ValueError("anydevice tensors cannot be viewed as numpy arrays without a copy (copy=False)")
        a = self.numpy()
        return a if dtype is None else a.astype(dtype, copy=False)

    def item(self):
        if self.size != 1:
            raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ValueError(
                f"the truth value of a tensor with {self.size} elements is ambiguous; use any() or all()"
            )
        return bool(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __complex__(self) -> complex:
        return complex(self.item())

    def __index__(self) -> int:
        if self.dtype.kind not in ("int", "uint") or self.ndim != 0:
            raise TypeError(f"only 0-d integer tensors can be used as an index, not {self.ndim}-D {self.dtype.name}")
        return int(self.item())

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", prefix="Tensor(")
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"Tensor({body}, dtype={self.dtype.name}, device={self.device}{grad})"

    __str__ = __repr__

    def __hash__(self):
        return id(self)

    def __array_namespace__(self, api_version=None):
        import anydevice

        return anydevice

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        be = self.device._backend
        fn = getattr(be.runtime, "dlpack", None)
        if fn is not None:
            return fn(self._buf, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)
        if dl_device is not None and tuple(dl_device)[0] != 1:
            raise BufferError(f"{self.device} cannot export DLPack to device {dl_device}")
        if copy is False and self.device.type != "cpu":
            raise BufferError(f"{self.device} cannot export DLPack without a copy; pass copy=None or copy=True")
        arr = self.numpy()
        return arr.__dlpack__() if max_version is None else arr.__dlpack__(max_version=max_version)

    def __dlpack_device__(self):
        fn = getattr(self.device._backend.runtime, "dlpack_device", None)
        if fn is not None:
            return fn(self._buf)
        return (1, 0)

    # --- conversion ---------------------------------------------------------------------
    def to(self, device=None, dtype=None, non_blocking: bool = False) -> "Tensor":
        """Copy to another device and/or dtype (returns ``self`` when nothing changes).

        ``non_blocking=True`` queues a host-to-device copy instead of waiting for it."""
        from .devices import as_device

        if isinstance(device, (_dt.DType,)) and dtype is None:
            device, dtype = None, device
        t = self
        if dtype is not None:
            t = _api().astype(t, _dt.dtype(dtype))
        if device is not None:
            dev = as_device(device)
            if dev is not t.device:
                t = _api().to_device(t, dev, non_blocking)
        return t

    to_device = to

    def cpu(self) -> "Tensor":
        return self.to("cpu")

    def astype(self, dtype, copy: bool = True) -> "Tensor":
        return _api().astype(self, _dt.dtype(dtype), copy=copy)

    def reshape(self, *shape) -> "Tensor":
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return _api().reshape(self, shape)

    def sum(self, axis=None, keepdims=False):
        return _api().sum(self, axis=axis, keepdims=keepdims)

    def mean(self, axis=None, keepdims=False):
        return _api().mean(self, axis=axis, keepdims=keepdims)

    def max(self, axis=None, keepdims=False):
        return _api().max(self, axis=axis, keepdims=keepdims)

    def min(self, axis=None, keepdims=False):
        return _api().min(self, axis=axis, keepdims=keepdims)

    # --- indexing -----------------------------------------------------------------------
    def __getitem__(self, key):
        from .ops import indexing

        return indexing.getitem(self, key)

    def __setitem__(self, key, value) -> None:
        from .ops import indexing

        result = indexing.setitem(self, key, value)
        self._rebind(result)

    def _rebind(self, result: "Tensor") -> None:
        if result.dtype is not self.dtype or result.shape != self.shape:
            raise TypeError(
                f"in-place update would change {self.dtype.name}{list(self.shape)} into "
                f"{result.dtype.name}{list(result.shape)}; in-place results must keep dtype and shape"
            )
        if self._node is not None and self._node.op is None and _ag.is_grad_enabled():
            raise RuntimeError(
                "a leaf tensor that requires grad cannot be updated in place while gradients are recorded; "
                "wrap the update in anydevice.no_grad()"
            )
        self._buf = result._buf
        if result._node is not None:
            self._node = result._node


def _api():
    from . import api

    return api


def _wrap(buf, shape, dtype, device, node=None) -> Tensor:
    t = _new(Tensor)
    t._buf, t.shape, t.dtype, t.device, t._node = buf, shape, dtype, device, node
    return t


def _detached(x):
    if not isinstance(x, Tensor):
        return x
    return _wrap(x._buf, x.shape, x.dtype, x.device)


_dispatch._late(Tensor, _wrap, _detached)


# --- operators --------------------------------------------------------------------------------
_SCALARS = (int, float, bool, complex)
_scalar_bufs: dict = {}


def _scalar_buf(t: "Tensor", v):
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
    from .ops.registry import get_op

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
    from .ops.registry import get_op

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


def install_operators() -> None:
    for dunder, name in _BINARY.items():
        setattr(Tensor, f"__{dunder}__", _binop(name))
        setattr(Tensor, f"__r{dunder}__", _binop(name, reflected=True))
        setattr(Tensor, f"__i{dunder}__", _inplace(name))
    for dunder, name in _COMPARE.items():
        setattr(Tensor, f"__{dunder}__", _binop(name))
    for dunder, name in _UNARY.items():
        setattr(Tensor, f"__{dunder}__", _unop(name))
