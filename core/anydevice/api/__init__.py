"""The functional namespace: every registry op as a function, plus array creation from data."""
from __future__ import annotations

from anydevice.api import manipulation as _manipulation
from anydevice.engine.creation import (
    asarray,
    empty,
    empty_like,
    from_dlpack,
    full_like,
    ones,
    ones_like,
    to_tensor,
    zeros,
    zeros_like,
)
from anydevice.engine.dispatch import op_function
from anydevice.engine.tensor import Tensor, to_device  # noqa: F401 - re-exported
from anydevice.ops.registry import all_ops, get_op

# ops of an extension (op.namespace "linalg", "fft") live in anydevice.linalg / anydevice.fft only
_FUNCTIONS = {op.name: op_function(op) for op in all_ops() if op.namespace is None}
globals().update(_FUNCTIONS)
__all__ = sorted(set(_FUNCTIONS) - set(_manipulation.__all__)) + [
    "asarray", "to_tensor", "zeros", "ones", "empty", "zeros_like", "ones_like", "empty_like", "full_like",
    "to_device", "from_dlpack", *_manipulation.__all__,
]
# functions over the ops with variadic results, optional tensors or a device move (repeat, diff and
# astype replace the op functions of the same name: they accept more)
globals().update({name: getattr(_manipulation, name) for name in _manipulation.__all__})


def op(name: str):
    """The registry entry of an op (``anydevice.api.op("add")``)."""
    return get_op(name)
