"""The autocast region of the current thread, as the dispatcher sees it.

:mod:`anydevice.amp` opens regions; :func:`cast_inputs` is called by the dispatcher for every op
while one is open and casts the op's floating inputs on the region's device type as the op's
policy (:mod:`anydevice.ops.amp`) says. Casts are ordinary ``astype`` ops, so autograd carries
gradients back to the inputs' own dtypes (float32 master weights stay float32).
"""
from __future__ import annotations

import threading

from anydevice.base import dtypes as _dt
from anydevice.ops import amp as _policy

_tls = threading.local()
#: ``[n]``: regions open on all threads together; the dispatcher's call cache is skipped while
#: any is open (changed under ``_lock`` only)
regions = [0]
_lock = threading.Lock()
_CASTABLE = (_dt.float16, _dt.bfloat16, _dt.float32)


class Mode:
    """An open region: the device type, its low dtype and the policy lists in force."""

    __slots__ = ("device_type", "dtype", "low", "float32")

    def __init__(self, device_type: str, dtype, low=_policy.LOW, float32=_policy.FLOAT32):
        self.device_type, self.dtype, self.low, self.float32 = device_type, dtype, low, float32


def current():
    """The innermost open region's Mode, or None (also None inside ``autocast(enabled=False)``)."""
    stack = getattr(_tls, "stack", None)
    return stack[-1] if stack else None


def push(mode) -> None:
    stack = getattr(_tls, "stack", None)
    if stack is None:
        stack = _tls.stack = []
    stack.append(mode)
    with _lock:
        regions[0] += 1


def pop() -> None:
    _tls.stack.pop()
    with _lock:
        regions[0] -= 1


def cast_inputs(op, inputs, mode, astype):
    """``inputs`` with floating tensors of ``mode``'s device type cast as ``op``'s policy says
    (the same list when nothing changes)."""
    kind = _policy.policy(op.name, mode.low, mode.float32)
    if kind is None:
        return inputs
    target = mode.dtype if kind == _policy.LOW_KIND else _dt.float32

    def one(t):
        d = getattr(t, "dtype", None)
        if d in _CASTABLE and d is not target and t.device.type == mode.device_type:
            return astype(t, target)
        return t

    return [[one(t) for t in x] if isinstance(x, list) else one(x) for x in inputs]
