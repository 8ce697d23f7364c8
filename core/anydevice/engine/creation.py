"""Tensors from data: ``asarray`` (host data, numpy arrays, DLPack producers), ``zeros``,
``ones``, ``empty`` and the ``*_like`` family."""
from __future__ import annotations

import numpy as np

from anydevice.base import dtypes as _dt
from anydevice.engine.dispatch import _like, check_size, full_like, ones_like, xp, zeros_like
from anydevice.engine.tensor import Tensor, _wrap
from anydevice.ops.registry import check_shape
from anydevice.runtime.devices import as_device

__all__ = ["asarray", "to_tensor", "from_dlpack", "zeros", "ones", "empty", "zeros_like", "ones_like", "empty_like",
           "full_like"]


def _infer_dtype(arr: np.ndarray, obj) -> _dt.DType:
    if isinstance(obj, (np.ndarray, np.generic)):
        return _dt.dtype(arr.dtype)
    # Python data: default float is float32, default complex complex64 (like torch/paddle)
    return {np.dtype(np.float64): _dt.float32, np.dtype(np.complex128): _dt.complex64}.get(arr.dtype) or _dt.dtype(arr.dtype)


def asarray(obj, /, *, dtype=None, device=None, copy=None) -> Tensor:
    """Create a tensor from a Tensor, a numpy array, a Python scalar or nested sequence.

    Python floats become float32 and Python ints int64 unless ``dtype`` says otherwise;
    numpy arrays keep their dtype.

    ``copy=True`` always gives a new tensor; ``copy=None`` returns a Tensor ``obj`` itself when it
    already has the dtype and device asked for; ``copy=False`` does the same or raises. Host data
    (numpy arrays, lists, DLPack producers) is always copied to the device, never aliased (buffers
    are immutable), so ``copy=False`` raises ``ValueError`` for it.
    """
    dev = _device_arg("asarray", device)
    d = _dtype_arg("asarray", dtype)
    if isinstance(obj, Tensor):
        return _from_tensor(obj, obj.dtype if d is None else d, obj.device if device is None else dev, copy)
    if copy is False:
        raise ValueError(
            f"asarray(copy=False): a {type(obj).__module__}.{type(obj).__name__} cannot become a tensor without a "
            "copy (anydevice never aliases memory it does not own, which keeps tensor buffers immutable); "
            "pass copy=None or copy=True"
        )
    if hasattr(obj, "__dlpack__") and not isinstance(obj, (np.ndarray, np.generic)) and type(obj).__module__.split(".")[0] in ("cupy", "torch"):
        obj = np.from_dlpack(obj) if getattr(obj, "__dlpack_device__", lambda: (1, 0))()[0] == 1 else obj
    try:
        arr = np.asarray(obj)
    except (ValueError, TypeError) as e:
        raise TypeError(f"asarray(): cannot convert {type(obj).__name__} to a tensor: {e}") from None
    if arr.dtype == object:
        _check_python_ints(arr.ravel(), None)
        raise TypeError(f"asarray(): cannot convert {type(obj).__name__} to a tensor (ragged or non-numeric data)")
    python_data = not isinstance(obj, (np.ndarray, np.generic))
    if d is None:
        try:
            d = _infer_dtype(arr, obj)
        except TypeError as e:
            raise TypeError(f"asarray(): {e}") from None
        if python_data and arr.dtype == np.uint64:  # numpy's choice for ints above int64's range
            d = _dt.int64
    if python_data and arr.dtype.kind in "iu" and d.kind in ("int", "uint") and arr.size:
        _check_python_ints((arr.min(), arr.max()), d)
    if arr.dtype.kind == "c" and d.kind != "complex":
        raise TypeError(f"asarray(): complex data cannot become {d.name}")
    be = dev._backend
    return _wrap(be.from_host(dev.index, arr, d), tuple(arr.shape), d, dev)


def _from_tensor(x: Tensor, d, dev, copy) -> Tensor:
    if copy is False and (d is not x.dtype or dev is not x.device):
        raise ValueError(
            f"asarray(copy=False): the tensor is {x.dtype.name} on {x.device}; making it {d.name} on {dev} needs a "
            "copy; pass copy=None or copy=True"
        )
    t = x
    if d is not x.dtype or (copy and dev is x.device):
        t = xp.astype(x, d, copy=True)  # an op, so a copy of a tensor in a graph stays differentiable
    return t if dev is t.device else t.to(dev)


to_tensor = asarray


def from_dlpack(x, /, *, device=None, copy=None) -> Tensor:
    """Import any DLPack producer (host memory is copied to the target device)."""
    fn = getattr(as_device(device)._backend.runtime, "from_dlpack", None)
    if fn is not None and device is not None:
        dev = as_device(device)
        buf, shape, d = fn(dev.index, x)
        return _wrap(buf, shape, d, dev)
    return asarray(np.from_dlpack(x), device=device)


def zeros(shape, *, dtype=None, device=None) -> Tensor:
    """A tensor of zeros of ``shape`` (an int or a tuple of ints); dtype float32 and the current device by default."""
    return _filled("zeros", shape, _ZERO, dtype, device)


def ones(shape, *, dtype=None, device=None) -> Tensor:
    """A tensor of ones of ``shape`` (an int or a tuple of ints); dtype float32 and the current device by default."""
    return _filled("ones", shape, _ONE, dtype, device)


def empty(shape, *, dtype=None, device=None) -> Tensor:
    """Like zeros(): anydevice never exposes uninitialized memory."""
    return _filled("empty", shape, _ZERO, dtype, device)


_ZERO = {"bool": False, "int": 0, "uint": 0, "float": 0.0, "complex": 0j}
_ONE = {"bool": True, "int": 1, "uint": 1, "float": 1.0, "complex": 1 + 0j}


def empty_like(x, /, *, dtype=None, device=None) -> Tensor:
    """Like zeros_like(): a tensor of ``x``'s shape (anydevice never exposes uninitialized memory)."""
    return _like("empty_like", x, 0, dtype, device)


def _filled(name, shape, fill, dtype, device) -> Tensor:
    """zeros/ones/empty: arguments checked under the function's own name, the size before allocating."""
    d = _dtype_arg(name, dtype) or _dt.float32
    shape = check_shape(shape, name)
    dev = _device_arg(name, device)
    check_size(name, shape, d, dev)
    return xp.full(shape, fill[d.kind], dtype=d, device=dev)


def _dtype_arg(name, dtype):
    try:
        return None if dtype is None else _dt.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"{name}(): dtype: {e}") from None


def _device_arg(name, device):
    try:
        return as_device(device)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{name}(): device: {e}") from None


def _check_python_ints(values, d) -> None:
    """OverflowError for a Python int that ``d`` (None: int64, the default) cannot hold."""
    d = d or _dt.int64
    info = np.iinfo(d.numpy)
    for v in values:
        if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and not info.min <= int(v) <= info.max:
            hint = "" if d is not _dt.int64 or int(v) > int(np.iinfo(np.uint64).max) or v < 0 else "; pass dtype=uint64"
            raise OverflowError(f"asarray(): Python int {int(v)} does not fit in {d.name} "
                                f"(allowed: {info.min}..{info.max}){hint}")
