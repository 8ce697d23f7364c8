"""The functional namespace: every registry op as a function, plus array creation from data."""
from __future__ import annotations

import numpy as np

from . import autograd as _ag
from . import dtypes as _dt
from .devices import as_device
from .ops import _load_all
from .ops.registry import _OPS, get_op
from .tensor import Tensor, _wrap

_load_all()
__all__ = sorted(_OPS) + [
    "asarray", "to_tensor", "zeros", "ones", "empty", "zeros_like", "ones_like", "empty_like", "full_like",
    "to_device", "from_dlpack", "moveaxis",
]
globals().update(_OPS)


def _infer_dtype(arr: np.ndarray, obj) -> _dt.DType:
    if isinstance(obj, (np.ndarray, np.generic)):
        return _dt.dtype(arr.dtype)
    # Python data: default float is float32, default complex complex64 (like torch/paddle)
    return {np.dtype(np.float64): _dt.float32, np.dtype(np.complex128): _dt.complex64}.get(arr.dtype) or _dt.dtype(arr.dtype)


def asarray(obj, dtype=None, device=None, copy=None) -> Tensor:
    """Create a tensor from a Tensor, a numpy array, a Python scalar or nested sequence.

    Python floats become float32 and Python ints int64 unless ``dtype`` says otherwise;
    numpy arrays keep their dtype.
    """
    dev = as_device(device)
    d = _dt.dtype(dtype) if dtype is not None else None
    if isinstance(obj, Tensor):
        t = obj if d is None or obj.dtype is d else astype(obj, d)
        return t if device is None else t.to(dev)
    if hasattr(obj, "__dlpack__") and not isinstance(obj, (np.ndarray, np.generic)) and type(obj).__module__.split(".")[0] in ("cupy", "torch"):
        obj = np.from_dlpack(obj) if getattr(obj, "__dlpack_device__", lambda: (1, 0))()[0] == 1 else obj
    try:
        arr = np.asarray(obj)
    except (ValueError, TypeError) as e:
        raise TypeError(f"asarray(): cannot convert {type(obj).__name__} to a tensor: {e}") from None
    if arr.dtype == object:
        raise TypeError(f"asarray(): cannot convert {type(obj).__name__} to a tensor (ragged or non-numeric data)")
    if d is None:
        d = _infer_dtype(arr, obj)
    if arr.dtype.kind == "c" and d.kind != "complex":
        raise TypeError(f"asarray(): complex data cannot become {d.name}")
    be = dev._backend
    return _wrap(be.from_host(dev.index, arr, d), tuple(arr.shape), d, dev)


to_tensor = asarray


def from_dlpack(x, *, device=None, copy=None) -> Tensor:
    """Import any DLPack producer (host memory is copied to the target device)."""
    fn = getattr(as_device(device)._backend.runtime, "from_dlpack", None)
    if fn is not None and device is not None:
        dev = as_device(device)
        buf, shape, d = fn(dev.index, x)
        return _wrap(buf, shape, d, dev)
    return asarray(np.from_dlpack(x), device=device)


def zeros(shape, dtype=None, device=None) -> Tensor:
    return full(shape, 0.0 if dtype is None else _zero(dtype), dtype=dtype or _dt.float32, device=device)


def ones(shape, dtype=None, device=None) -> Tensor:
    return full(shape, 1.0 if dtype is None else _one(dtype), dtype=dtype or _dt.float32, device=device)


def empty(shape, dtype=None, device=None) -> Tensor:
    """Like zeros(): anydevice never exposes uninitialized memory."""
    return zeros(shape, dtype=dtype, device=device)


def _zero(d):
    d = _dt.dtype(d)
    return {"bool": False, "int": 0, "uint": 0, "float": 0.0, "complex": 0j}[d.kind]


def _one(d):
    d = _dt.dtype(d)
    return {"bool": True, "int": 1, "uint": 1, "float": 1.0, "complex": 1 + 0j}[d.kind]


def full_like(x, fill_value, dtype=None, device=None) -> Tensor:
    d = _dt.dtype(dtype) if dtype is not None else x.dtype
    if isinstance(fill_value, (int, float, bool, complex)):
        fill_value = _coerce(fill_value, d)
    return full(x.shape, fill_value, dtype=d, device=device if device is not None else x.device)


def _coerce(v, d):
    k = d.kind
    if k == "bool":
        return bool(v)
    if k in ("int", "uint"):
        if isinstance(v, float) and not v.is_integer():
            raise TypeError(f"full_like(): {v!r} does not fit dtype {d.name}")
        return int(v)
    if k == "float":
        if isinstance(v, complex):
            raise TypeError(f"full_like(): {v!r} does not fit dtype {d.name}")
        return float(v)
    return complex(v)


def zeros_like(x, dtype=None, device=None) -> Tensor:
    return full_like(x, 0, dtype=dtype, device=device)


def ones_like(x, dtype=None, device=None) -> Tensor:
    return full_like(x, 1, dtype=dtype, device=device)


def empty_like(x, dtype=None, device=None) -> Tensor:
    return zeros_like(x, dtype=dtype, device=device)


class _ToDevice:
    """Autograd rule of a device copy: the gradient goes back to the source device."""

    name = "to_device"

    @staticmethod
    def vjp(g, inputs, out, src=None):
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


def moveaxis(x, source: int, destination: int) -> Tensor:
    nd = x.ndim
    source, destination = source % nd, destination % nd
    order = [k for k in range(nd) if k != source]
    order.insert(destination, source)
    return permute_dims(x, tuple(order))  # noqa: F821 - generated from the registry


def op(name: str):
    """The registry entry of an op (``anydevice.api.op("add")``)."""
    return get_op(name)
