"""Collectives across the devices of one type inside one process.

``all_reduce_devices(tensors, op)`` (also ``anydevice.distributed.all_reduce`` called with a list)
takes one tensor per device (all of one device type, shape and
dtype) and returns, for each device, a new tensor holding the element-wise reduction of
all of them. It calls the plugin's ``anydevice_all_reduce`` hook when the plugin has one
(an interconnect), else stages the tensors through host memory. Results do not record
gradients.
"""
from __future__ import annotations

import numpy as np

OPS = ("sum", "max", "min", "prod")
_UFUNCS = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}


def all_reduce_devices(tensors: list, op: str = "sum") -> list:
    """Reduce ``tensors`` (one per device of one type) element-wise; every device gets the result.

    :param tensors: a list of tensors on distinct devices of one device type, one shape, one dtype.
    :param op: ``"sum"``, ``"max"``, ``"min"`` or ``"prod"``.
    :return: a list of new tensors, ``result[i]`` on ``tensors[i].device``.
    """
    from anydevice.engine.tensor import _wrap
    from anydevice.runtime.plugins import manager

    _validate(tensors, op)
    first = tensors[0]
    be = first.device._backend
    bufs = [t._buf for t in tensors]
    res = None
    if be.record.module is not None and manager.implements(be.record, "anydevice_all_reduce"):
        res = manager.call(be.record, "anydevice_all_reduce", device_type=be.type, runtime=be.runtime,
                           buffers=bufs, op=op)
        if res is not None and len(res) != len(tensors):
            raise RuntimeError(
                f"plugin {be.record.distribution or be.record.name}: anydevice_all_reduce() returned "
                f"{len(res)} buffers for {len(tensors)} devices"
            )
    if res is None:
        return _through_host(tensors, op)
    return [_wrap(b, first.shape, first.dtype, t.device) for b, t in zip(res, tensors)]


def _through_host(tensors, op):
    from anydevice.api import asarray

    arrays = [t.numpy() for t in tensors]
    acc = np.array(arrays[0], copy=True)
    with np.errstate(all="ignore"):
        for a in arrays[1:]:
            _UFUNCS[op](acc, a, out=acc, casting="unsafe")
    return [asarray(acc, dtype=t.dtype, device=t.device) for t in tensors]


def _validate(tensors, op):
    from anydevice.engine.tensor import Tensor

    if op not in OPS:
        raise ValueError(f"all_reduce(): unknown op {op!r}; allowed: {', '.join(OPS)}")
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise TypeError("all_reduce() expects a non-empty list of tensors, one per device")
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"all_reduce() expects tensors, got {type(t).__name__}")
    first = tensors[0]
    seen = set()
    for t in tensors:
        if t.device.type != first.device.type:
            raise ValueError(
                f"all_reduce(): tensors must be on devices of one type, got {first.device} and {t.device}; "
                f"copy them to one device type with .to() first"
            )
        if t.shape != first.shape or t.dtype is not first.dtype:
            raise ValueError(
                f"all_reduce(): every tensor must have the same shape and dtype, got "
                f"{first.dtype.name}{list(first.shape)} on {first.device} and {t.dtype.name}{list(t.shape)} on {t.device}"
            )
        if t.device in seen:
            raise ValueError(f"all_reduce(): {t.device} appears twice; pass one tensor per device")
        seen.add(t.device)
    if first.dtype.kind == "bool" and op in ("sum", "prod"):
        raise TypeError(f"all_reduce(): op {op!r} does not accept bool tensors; use 'max' (any) or 'min' (all)")


__all__ = ["all_reduce_devices", "OPS"]
