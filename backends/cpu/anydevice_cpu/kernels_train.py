"""Native numpy kernels of the training step's fused backward ops: the gradient of cross entropy
with respect to its logits in one pass (softmax, minus one at each label, times the scale), and
those of softmax and log_softmax from their outputs and of relu, and that of basic indexing (zeros with the
gradient at the key); and the range check of indices in one pass each for the minimum and maximum."""
from __future__ import annotations

import functools

import numpy as np

from anydevice.ops.indexing import to_numpy_key

from . import native as _native
from .kernels import _softmax

_MAX, _MIN, _SUM = np.maximum.reduce, np.minimum.reduce, np.add.reduce


def cross_entropy_grad(logits, labels, grad, reduction):
    c = logits.shape[-1]
    if c == 0 or logits.size == 0:
        return np.zeros(logits.shape, logits.dtype)
    p = _native.softmax(logits, logits.ndim - 1, False)
    if p is None:
        p = _softmax(logits, logits.ndim - 1)  # short rows: one maximum and matrix-vector row sums
    p = np.ascontiguousarray(p)  # logits with classes moved last keep numpy's order: rows must be a view
    flat, lab = p.reshape(-1), labels.reshape(-1)
    if _MIN(lab) >= 0 and _MAX(lab) < c:  # each row's label, as a flat index
        at = np.arange(0, flat.size, c) + lab
    else:  # a label out of range has no one-hot entry
        ok = np.flatnonzero((lab >= 0) & (lab < c))
        at = ok * c + lab[ok]
    flat[at] -= 1
    if reduction == "none":
        p *= grad[..., None]
    else:
        p *= grad if reduction == "sum" else grad / max(labels.size, 1)
    return p


def softmax_grad(g, out, axis):
    if out.ndim == 0:
        return np.zeros_like(g)
    r = _native.softmax_grad(g, out, axis, False)
    if r is not None:
        return r
    t = np.multiply(g, out)  # out * (g - sum(g * out)), each step into one buffer
    s = _SUM(t, axis=axis, keepdims=True)
    np.subtract(g, s, out=t)
    t *= out
    return t


def log_softmax_grad(g, out, axis):
    if out.ndim == 0:
        return np.zeros_like(g)
    r = _native.softmax_grad(g, out, axis, True)
    if r is not None:
        return r
    e = np.exp(out)  # g - exp(out) * sum(g), into one buffer
    e *= _SUM(g, axis=axis, keepdims=True)
    np.subtract(g, e, out=e)
    return e


@functools.lru_cache(maxsize=1024)
def _numpy_key(key):
    return to_numpy_key(key)


def getitem_grad(ctx, g, shape, key):
    y = np.zeros(shape, g.dtype)
    y[_numpy_key(key)] = g
    return y


def index_in_range(ctx, x, low, high):
    return np.bool_(x.size == 0 or (int(np.minimum.reduce(x, axis=None)) >= low
                                    and int(np.maximum.reduce(x, axis=None)) < high))


def relu_grad(g, x):
    m = np.greater(x, 0).astype(g.dtype)  # numpy multiplies a float by a bool through a slower cast loop
    if m.shape != np.shape(g):  # grad broadcasts against x
        return np.multiply(g, m)
    m *= g
    return m


def register(kernels, wrap) -> None:
    """Register the kernels with the cpu backend's wrappers ``wrap`` (name -> wrapper)."""
    for name, fn in (("cross_entropy_grad", cross_entropy_grad), ("softmax_grad", softmax_grad),
                     ("log_softmax_grad", log_softmax_grad), ("relu_grad", relu_grad)):
        kernels.register(name, wrap["half"](fn))
    kernels.register("getitem_grad", getitem_grad)
    kernels.register("index_in_range", index_in_range)
