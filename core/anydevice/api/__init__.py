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
from anydevice.ops.registry import all_ops, get_op, normalize_axis

# ops of an extension (op.namespace "linalg", "fft") live in anydevice.linalg / anydevice.fft only
_FUNCTIONS = {op.name: op_function(op) for op in all_ops() if op.namespace is None}
globals().update(_FUNCTIONS)
__all__ = sorted(_FUNCTIONS) + [
    "asarray", "to_tensor", "zeros", "ones", "empty", "zeros_like", "ones_like", "empty_like", "full_like",
    "to_device", "from_dlpack", "moveaxis",
]


def moveaxis(x, source, destination) -> Tensor:
    """Move axes ``source`` (an int or a tuple of ints) to the positions ``destination`` (as many)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"moveaxis(): x must be a Tensor, not {type(x).__name__}")
    src = _axis_list(source, x.ndim, "source")
    dst = _axis_list(destination, x.ndim, "destination")
    if len(src) != len(dst):
        raise ValueError(f"moveaxis(): source {source!r} and destination {destination!r} must name as many axes "
                         f"({len(src)} != {len(dst)})")
    order = [k for k in range(x.ndim) if k not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return _FUNCTIONS["permute_dims"](x, tuple(order))


def _axis_list(axes, ndim: int, what: str) -> list:
    """Distinct axes of a ``ndim``-D tensor, in the order given (errors as every op's axes)."""
    items = (axes,) if not isinstance(axes, (tuple, list)) else axes
    out = [normalize_axis(a, ndim, "moveaxis", what) for a in items]
    if len(set(out)) != len(out):
        raise ValueError(f"moveaxis(): {what} {axes!r} repeats an axis")
    return out


def op(name: str):
    """The registry entry of an op (``anydevice.api.op("add")``)."""
    return get_op(name)
