"""The functional namespace: every registry op as a function, plus array creation from data."""
from __future__ import annotations

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

_FUNCTIONS = {op.name: op_function(op) for op in all_ops()}
globals().update(_FUNCTIONS)
__all__ = sorted(_FUNCTIONS) + [
    "asarray", "to_tensor", "zeros", "ones", "empty", "zeros_like", "ones_like", "empty_like", "full_like",
    "to_device", "from_dlpack", "moveaxis",
]


def moveaxis(x, source: int, destination: int) -> Tensor:
    nd = x.ndim
    source, destination = source % nd, destination % nd
    order = [k for k in range(nd) if k != source]
    order.insert(destination, source)
    return _FUNCTIONS["permute_dims"](x, tuple(order))


def op(name: str):
    """The registry entry of an op (``anydevice.api.op("add")``)."""
    return get_op(name)
