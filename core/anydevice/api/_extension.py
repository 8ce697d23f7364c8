"""The functions of an extension namespace (``anydevice.linalg``, ``anydevice.fft``): the registry
ops whose ``namespace`` names it, as the main namespace's functions are made from the others."""
from __future__ import annotations

import functools

from anydevice.engine.dispatch import op_function, xp
from anydevice.engine.tensor import Tensor
from anydevice.ops.registry import all_ops, get_op


def ops(namespace: str) -> list:
    return [op for op in all_ops() if op.namespace == namespace]


def main_function(name: str):
    """The main namespace's function ``name`` (None when the registry has no such op there)."""
    try:
        op = get_op(name)
    except KeyError:
        return None
    return op_function(op) if op.namespace is None else None


def functions(namespace: str, module: str, results=None, checked=None, error=None) -> dict:
    """``{name: function}`` of the namespace's ops; ``results`` maps multi-output ops to the named tuple
    they return, ``checked`` maps ops to the message of ``error`` raised when a finite input gives a
    non-finite result (a singular matrix, one that is not positive-definite)."""
    out = {}
    for op in ops(namespace):
        fn = op_function(op)
        if results and op.name in results:
            fn = _named(fn, results[op.name])
        if checked and op.name in checked:
            fn = _checked(fn, op.name, checked[op.name], error)
        fn.__module__ = module
        fn.__signature__ = op.signature
        fn.op = op
        out[op.name] = fn
    return out


def _named(fn, result):
    @functools.wraps(fn)
    def named(*args, **kwargs):
        return result(*fn(*args, **kwargs))

    return named


def _finite(t) -> bool:
    return t.size == 0 or t.dtype.kind not in ("float", "complex") or bool(xp.all(xp.isfinite(t)))


def _checked(fn, name, message, error):
    @functools.wraps(fn)
    def checked(*args, **kwargs):
        out = fn(*args, **kwargs)
        if not _finite(out) and all(_finite(a) for a in args if isinstance(a, Tensor)):
            raise error(f"{name}(): {message}")
        return out

    return checked
