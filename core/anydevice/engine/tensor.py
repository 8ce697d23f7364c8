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
- **Explicit numpy interop.** An operator between a tensor and a numpy array (either side,
  in place too) raises a TypeError naming ``anydevice.asarray(arr, device=t.device)``; numpy
  scalars act as Python scalars of their kind. ``np.asarray(t)`` is the way to the host.
- **No pickling.** Tensors are device memory: ``pickle`` raises and names ``anydevice.save``;
  ``copy.copy``/``copy.deepcopy`` give independent tensors. Devices and dtypes pickle by name.
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from anydevice.engine import graph as _ag
from anydevice.runtime.devices import as_device

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

    def requires_grad_(self, value: bool = True) -> Tensor:
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

    def register_post_accumulate_grad_hook(self, hook):
        """Call ``hook(tensor)`` each time a ``backward()`` has added to this leaf's ``.grad``
        (PyTorch's name; data-parallel training starts a gradient's all-reduce from it).
        Returns a handle whose ``remove()`` unregisters it."""
        if self._node is None or self._node.op is not None:
            raise RuntimeError("register_post_accumulate_grad_hook(): only a leaf tensor that requires grad has an "
                               "accumulated gradient; set requires_grad=True on a leaf (not on a computed tensor)")
        if not callable(hook):
            raise TypeError(f"register_post_accumulate_grad_hook(): hook must be callable, got {type(hook).__name__}")
        return _GradHook(self, hook)

    def detach(self) -> Tensor:
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

    def __reduce_ex__(self, protocol):
        raise TypeError(
            f"anydevice tensors cannot be pickled (this one is {self.dtype.name}{list(self.shape)} on {self.device}): "
            "anydevice offers no pickle format for device memory. Save tensors (and structures of them) with "
            "anydevice.save(obj, path) and read them with anydevice.load(path), or one tensor with "
            "np.save(path, t.numpy()) and anydevice.asarray(np.load(path), device=...)"
        )

    def __copy__(self) -> Tensor:
        return self.__deepcopy__({})

    def __deepcopy__(self, memo) -> Tensor:
        """A new tensor with the same values (buffers are immutable, so it may share this one's);
        a leaf that requires grad gives a new leaf that requires grad, with a copy of ``.grad``."""
        if not self.is_leaf:
            raise RuntimeError(
                "copy.copy()/copy.deepcopy() of a tensor computed in a recorded graph is not supported; "
                "copy t.detach() instead (or a leaf tensor)"
            )
        out = _wrap(self._buf, self.shape, self.dtype, self.device)
        if self._node is not None:
            out._node = _ag.Node()
            g = self._node.grad
            out._node.grad = None if g is None else _detached(g)
        memo[id(self)] = out
        return out

    def __dlpack__(self, /, *, stream=None, max_version=None, dl_device=None, copy=None):
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

    def _rebind(self, result: Tensor) -> None:
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



def _wrap(buf, shape, dtype, device, node=None) -> Tensor:
    t = _new(Tensor)
    t._buf, t.shape, t.dtype, t.device, t._node = buf, shape, dtype, device, node
    return t


class _GradHook:
    """A registered post-accumulate-grad hook; holds its tensor weakly (no reference cycle)."""

    __slots__ = ("node", "call")

    def __init__(self, tensor: Tensor, hook):
        ref = weakref.ref(tensor)
        self.node = tensor._node
        self.call = lambda: hook(ref())
        self.node.hooks = (self.node.hooks or []) + [self.call]

    def remove(self) -> None:
        hooks = [h for h in self.node.hooks or () if h is not self.call]
        self.node.hooks = hooks or None


def _detached(x):
    if not isinstance(x, Tensor):
        return x
    return _wrap(x._buf, x.shape, x.dtype, x.device)



class _ToDevice:
    """Autograd rule of a device copy: the gradient goes back to the source device."""

    name = "to_device"

    @staticmethod
    def vjp(xp, g, inputs, out, src=None):
        return (to_device(g, src),)


def to_device(x: Tensor, device, non_blocking: bool = False) -> Tensor:
    """Copy ``x`` to ``device`` (returns ``x`` if it is already there).

    ``non_blocking=True`` lets a host-to-device copy be queued on the destination's current
    stream (when its runtime can); results are the same, only the host may return sooner.
    """
    dev = as_device(device)
    if dev is x.device:
        return x
    src = x.device
    buf = src._backend.copy_to(x._buf, src.index, dev._backend, dev.index, x.shape, x.dtype, non_blocking)
    out = _wrap(buf, x.shape, x.dtype, dev)
    if x._node is not None and _ag.is_grad_enabled():
        out._node = _ag.Node(_ToDevice, {"src": src}, (None,), None, (x._node,), (x.dtype,))
    return out
