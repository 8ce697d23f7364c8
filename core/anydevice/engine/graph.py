"""The recorded graph: grad mode (per thread) and :class:`Node`.

The dispatcher records a :class:`Node` for each differentiable op whose inputs require
gradients: the op, its inputs (their immutable buffers), its output. Buffers are never
modified after they are produced, so in-place updates of a tensor after it was used
cannot corrupt saved values. :mod:`anydevice.engine.autograd` walks the graph.
"""
from __future__ import annotations

import contextlib
import threading

_state = threading.local()


def is_grad_enabled() -> bool:
    return getattr(_state, "enabled", True)


def set_grad_enabled(mode: bool) -> None:
    _state.enabled = bool(mode)


class _GradMode(contextlib.ContextDecorator):
    def __init__(self, mode: bool):
        self.mode = mode

    def __enter__(self):
        self.prev = is_grad_enabled()
        _state.enabled = self.mode

    def __exit__(self, *exc):
        _state.enabled = self.prev
        return False


def no_grad(fn=None):
    """Context manager (or decorator) that stops recording the graph."""
    if callable(fn):
        return _GradMode(False)(fn)
    return _GradMode(False)


def enable_grad(fn=None):
    if callable(fn):
        return _GradMode(True)(fn)
    return _GradMode(True)


class Node:
    """One recorded op application (``op`` is None for a leaf that requires grad).

    ``inputs`` and ``out`` are the values saved for the op's VJP; ``backward()`` sets both to
    None once it has used them (unless ``retain_graph=True``), which returns their memory and
    marks the node as used. A leaf's ``hooks`` (None or a list) are called in order, with no
    argument, right after a ``backward()`` accumulated its ``grad``."""

    __slots__ = ("op", "attrs", "inputs", "out", "parents", "in_dtypes", "grad", "retain", "hooks")

    def __init__(self, op=None, attrs=None, inputs=(), out=None, parents=(), in_dtypes=()):
        self.op, self.attrs, self.inputs, self.out = op, attrs, inputs, out
        self.parents, self.in_dtypes = parents, in_dtypes
        self.grad = None
        self.retain = False
        self.hooks = None   # a leaf's callables, each called after backward() added to its grad

    @property
    def is_leaf(self) -> bool:
        return self.op is None


class OutputOf:
    """The op of the node each output of a multi-output op carries: its VJP places the output's
    gradient in slot ``index`` of the op's :class:`Parts`, so gradients of several outputs meet
    at the op's own node."""

    __slots__ = ("op", "index", "n", "name")
    differentiable = True

    def __init__(self, op, index: int, n: int):
        self.op, self.index, self.n = op, index, n
        self.name = f"{op.name}[{op.outputs[index]}]"

    def vjp(self, xp, g, inputs, out):
        parts = [None] * self.n
        parts[self.index] = g
        return (Parts(parts),)


class Parts:
    """Gradients of the outputs of one multi-output op (None where an output got none)."""

    __slots__ = ("items",)
    dtype = None

    def __init__(self, items):
        self.items = list(items)

    def __add__(self, other: Parts) -> Parts:
        return Parts([a if b is None else b if a is None else a + b for a, b in zip(self.items, other.items)])

    def filled(self, xp, outs) -> tuple:
        """One gradient per output: zeros for outputs that got none."""
        return tuple(xp.zeros_like(o) if g is None else g for g, o in zip(self.items, outs))
