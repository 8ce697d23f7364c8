"""Reverse-mode automatic differentiation over the registry's VJP rules.

The graph is recorded as ops run: a result of a differentiable op whose inputs require
gradients gets a :class:`Node` holding the op's inputs (their immutable buffers) and the
op's VJP. ``backward()`` walks the graph in reverse topological order. Buffers are never
modified after they are produced, so in-place updates of a tensor after it was used
cannot corrupt saved values.
"""
from __future__ import annotations

import contextlib
import functools
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
    """One recorded op application (``op`` is None for a leaf that requires grad)."""

    __slots__ = ("op", "attrs", "inputs", "out", "parents", "in_dtypes", "grad", "retain")

    def __init__(self, op=None, attrs=None, inputs=(), out=None, parents=(), in_dtypes=()):
        self.op, self.attrs, self.inputs, self.out = op, attrs, inputs, out
        self.parents, self.in_dtypes = parents, in_dtypes
        self.grad = None
        self.retain = False

    @property
    def is_leaf(self) -> bool:
        return self.op is None


def _toposort(root: Node) -> list:
    order, seen, stack = [], set(), [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for p in node.parents:
            if p is not None and id(p) not in seen:
                stack.append((p, False))
    return order[::-1]


def backward(tensor, grad=None) -> None:
    """Accumulate d(tensor)/d(leaf) into every leaf's ``.grad``."""
    from . import api
    from .tensor import Tensor

    node = tensor._node
    if node is None:
        raise RuntimeError(
            "backward(): this tensor does not require grad and has no graph; set requires_grad=True on "
            "the inputs before computing it (and not inside no_grad())"
        )
    if grad is None:
        if tensor.size != 1:
            raise RuntimeError(
                f"backward(): grad can be omitted only for a single-element output, this one has shape {tensor.shape}; "
                "pass grad= of the same shape"
            )
        grad = api.ones_like(tensor)
    elif not isinstance(grad, Tensor):
        grad = api.asarray(grad, dtype=tensor.dtype, device=tensor.device)
    if grad.shape != tensor.shape:
        raise ValueError(f"backward(): grad has shape {grad.shape}, the tensor has {tensor.shape}")
    grads = {id(node): grad}
    with no_grad():
        for n in _toposort(node):
            g = grads.pop(id(n), None)
            if g is None:
                continue
            if n.op is None or n.retain:
                n.grad = g if n.grad is None else n.grad + g
                if n.op is None:
                    continue
            in_grads = n.op.vjp(g, n.inputs, n.out, **n.attrs)
            if not isinstance(in_grads, (tuple, list)):
                in_grads = (in_grads,)
            for p, gi, dt in zip(n.parents, in_grads, n.in_dtypes):
                if p is None or gi is None:
                    continue
                if gi.dtype is not dt:
                    gi = api.astype(gi, dt)
                prev = grads.get(id(p))
                grads[id(p)] = gi if prev is None else prev + gi


def grad_enabled_decorator(fn):
    @functools.wraps(fn)
    def wrapper(*a, **k):
        with no_grad():
            return fn(*a, **k)

    return wrapper
