"""Namespace functions of the Array API built from registry ops: those with a variable number of
results (``meshgrid``, ``broadcast_arrays``, ``unstack``), optional tensor arguments (``diff``'s
``prepend``/``append``), a Tensor-or-int argument (``repeat``) or a device move (``astype``)."""
from __future__ import annotations

import functools
import inspect

from anydevice.engine.dispatch import op_function
from anydevice.engine.tensor import Tensor, to_device
from anydevice.ops.registry import broadcast_shapes, get_op, normalize_axis

__all__ = ["meshgrid", "broadcast_arrays", "unstack", "repeat", "diff", "astype", "moveaxis"]


def _op(name):
    return op_function(get_op(name))


def _checked(fn):
    """``fn`` whose wrong calls raise an anydevice TypeError naming the function and showing the
    signature (as the op functions do); a right call costs nothing more than calling ``fn``."""
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TypeError:  # binding the arguments tells a wrong call from an error inside fn
            try:
                sig.bind(*args, **kwargs)
            except TypeError as bad:
                raise TypeError(f"{fn.__name__}(): {bad}; the signature is {fn.__name__}{sig}") from None
            raise

    return wrapper


def _tensors(name: str, arrays) -> list:
    """The arguments as Tensors on one device; TypeError / ValueError naming ``name`` otherwise."""
    for k, a in enumerate(arrays):
        if not isinstance(a, Tensor):
            raise TypeError(f"{name}(): argument {k} must be a Tensor, not {type(a).__name__}")
        if a.device is not arrays[0].device:
            raise ValueError(f"{name}(): arrays are on different devices, {arrays[0].device} and {a.device}; "
                             f"move them to one device with .to() first")
    return list(arrays)


@_checked
def meshgrid(*arrays: Tensor, indexing: str = "xy") -> list[Tensor]:
    """Coordinate matrices from 1-D arrays: the i-th result holds ``arrays[i]`` along its axis,
    broadcast to the shape of all of them. ``indexing="xy"`` (Cartesian) swaps the first two axes
    of that shape, ``"ij"`` (matrix) keeps the order. All arrays must share one dtype."""
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid(): indexing must be 'xy' or 'ij', not {indexing!r}")
    arrays = _tensors("meshgrid", arrays)
    for k, a in enumerate(arrays):
        if a.ndim != 1:
            raise ValueError(f"meshgrid(): every array must be 1-D; argument {k} has shape {a.shape}")
        if a.dtype is not arrays[0].dtype:
            raise TypeError(f"meshgrid(): every array must have one dtype; got {arrays[0].dtype.name} and "
                            f"{a.dtype.name} (convert with astype() first)")
    shape = [a.shape[0] for a in arrays]
    axes = list(range(len(arrays)))
    if indexing == "xy" and len(arrays) > 1:
        shape[0], shape[1] = shape[1], shape[0]
        axes[0], axes[1] = 1, 0
    out = []
    for a, ax in zip(arrays, axes):
        view = [1] * len(arrays)
        view[ax] = a.shape[0]
        out.append(_op("broadcast_to")(_op("reshape")(a, tuple(view)), tuple(shape)))
    return out


@_checked
def broadcast_arrays(*arrays: Tensor) -> list[Tensor]:
    """The arrays broadcast against each other (one shape, Array API broadcasting)."""
    arrays = _tensors("broadcast_arrays", arrays)
    if not arrays:
        return []
    shape = broadcast_shapes(*[a.shape for a in arrays], opname="broadcast_arrays")
    return [_op("broadcast_to")(a, shape) for a in arrays]


@_checked
def unstack(x: Tensor, /, *, axis: int = 0) -> tuple[Tensor, ...]:
    """The slices of ``x`` along ``axis``, as a tuple of ``x.shape[axis]`` arrays of one dimension less."""
    if not isinstance(x, Tensor):
        raise TypeError(f"unstack(): x must be a Tensor, not {type(x).__name__}")
    axis = normalize_axis(axis, x.ndim, "unstack")
    lead = (slice(None),) * axis
    return tuple(x[lead + (k,)] for k in range(x.shape[axis]))


@_checked
def repeat(x: Tensor, repeats: int | Tensor, /, *, axis: int | None = None) -> Tensor:
    """Each element of ``x`` repeated along ``axis`` (None: of the flattened array): ``repeats``
    times (a non-negative int), or ``repeats[i]`` times for element i (a 1-D integer Tensor of one
    count per element, or of one count for all)."""
    if isinstance(repeats, Tensor):
        try:
            op = get_op("repeat_tensor")
        except KeyError:
            raise TypeError("repeat(): repeats as a Tensor is not supported by this build; pass a Python int") from None
        return op_function(op)(x, repeats, axis=axis)
    return _op("repeat")(x, repeats, axis=axis)


@_checked
def diff(x: Tensor, /, *, axis: int = -1, n: int = 1, prepend: Tensor | None = None,
         append: Tensor | None = None) -> Tensor:
    """The n-th forward difference along ``axis``: ``out[i] = x[i + 1] - x[i]``, applied ``n`` times.
    ``prepend`` / ``append`` (Tensors of ``x``'s shape except along ``axis``) are concatenated to
    ``x`` before the differences are taken."""
    if (prepend is not None or append is not None) and isinstance(x, Tensor):
        if x.ndim == 0:
            raise ValueError("diff(): x must have at least one dimension, got a 0-d array")
        ax = normalize_axis(axis, x.ndim, "diff")
        parts = [x]
        for what, t in (("prepend", prepend), ("append", append)):
            if t is None:
                continue
            if not isinstance(t, Tensor):
                raise TypeError(f"diff(): {what} must be None or a Tensor, not {type(t).__name__}")
            if t.ndim != x.ndim or any(a != b for k, (a, b) in enumerate(zip(t.shape, x.shape)) if k != ax):
                raise ValueError(f"diff(): {what} has shape {t.shape}; it must match x's shape {x.shape} except "
                                 f"along axis {ax}")
            parts.insert(0 if what == "prepend" else len(parts), t)
        x = _op("concat")(parts, axis=ax)
    return _op("diff")(x, axis=axis, n=n)


@_checked
def astype(x: Tensor, dtype, /, *, copy: bool = True, device=None) -> Tensor:
    """``x`` converted to ``dtype`` (float to int truncates; out-of-range values are undefined),
    then moved to ``device`` when one is given. ``copy=False`` returns ``x`` itself when nothing
    changes."""
    out = _op("astype")(x, dtype, copy=copy)
    return out if device is None else to_device(out, device)


@_checked
def moveaxis(x: Tensor, source, destination, /) -> Tensor:
    """Move axes ``source`` (an int or a tuple of ints) to the positions ``destination`` (as many);
    the other axes keep their order."""
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
    return _op("permute_dims")(x, tuple(order))


def _axis_list(axes, ndim: int, what: str) -> list:
    """Distinct axes of a ``ndim``-D tensor, in the order given (errors as every op's axes)."""
    items = (axes,) if not isinstance(axes, (tuple, list)) else axes
    out = [normalize_axis(a, ndim, "moveaxis", what) for a in items]
    if len(set(out)) != len(out):
        raise ValueError(f"moveaxis(): {what} {axes!r} repeats an axis")
    return out
