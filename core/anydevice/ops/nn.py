"""What a small training step needs beyond element-wise ops: softmax, log_softmax, cross_entropy,
layer_norm, linear. All composites; a backend may register fused kernels for them."""
from __future__ import annotations

import numpy as np

from anydevice.ops.registry import Choice, Int, Real, check_index_range, define, normalize_axis, same, with_indices


def _canon_axis(name):
    """A 0-d input counts as 1-D here (axis 0 or -1), as in torch: its softmax is 1. The axis must
    not be empty (its maximum has no identity, as for max and logsumexp)."""

    def canon(shapes, attrs):
        shape = shapes[0]
        axis = normalize_axis(attrs["axis"], max(len(shape), 1), name)
        if shape and shape[axis] == 0:
            raise ValueError(f"{name}(): axis {attrs['axis']} of shape {shape} is empty; {name} needs at least one "
                             f"element along its axis")
        return {**attrs, "axis": axis}

    return canon


def _softmax(xp, x, axis=-1):
    if x.ndim == 0:  # e^(x - x) / e^(x - x): 1, or NaN for NaN and ±inf
        e = xp.exp(x - x)
        return e / e
    e = xp.exp(x - xp.max(x, axis=axis, keepdims=True))
    return e / xp.sum(e, axis=axis, keepdims=True)


def _softmax_ref(x, axis=-1):
    if x.ndim == 0:
        return np.exp(x - x) / np.exp(x - x)
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _softmax_vjp(xp, g, i, o, axis=-1):
    if o.ndim == 0:
        return (xp.zeros_like(g),)
    return (o * (g - xp.sum(g * o, axis=axis, keepdims=True)),)


def _log_softmax(xp, x, axis=-1):
    if x.ndim == 0:  # 0, or NaN for NaN and ±inf
        s = x - x
        return s - xp.log(xp.exp(s))
    m = xp.max(x, axis=axis, keepdims=True)
    s = x - m
    return s - xp.log(xp.sum(xp.exp(s), axis=axis, keepdims=True))


def _log_softmax_ref(x, axis=-1):
    if x.ndim == 0:
        return (x - x) - np.log(np.exp(x - x))
    m = np.max(x, axis=axis, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))


def _log_softmax_vjp(xp, g, i, o, axis=-1):
    if o.ndim == 0:
        return (xp.zeros_like(g),)
    return (g - xp.exp(o) * xp.sum(g, axis=axis, keepdims=True),)


_TOL = {"float32": (1e-5, 1e-5), "float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2)}  # half: sums accumulate in the dtype
define("softmax", inputs=("x",), attrs={"axis": Int(-1)}, dtype_rule=same("real_floating"), canon=_canon_axis("softmax"),
       shape_rule=lambda s, a: s[0], reference=_softmax_ref, vjp=_softmax_vjp, decomposition=_softmax,
       category="nn", tolerance=_TOL)
define("log_softmax", inputs=("x",), attrs={"axis": Int(-1)}, dtype_rule=same("real_floating"),
       canon=_canon_axis("log_softmax"), shape_rule=lambda s, a: s[0], reference=_log_softmax_ref,
       vjp=_log_softmax_vjp, decomposition=_log_softmax, category="nn", tolerance=_TOL)


# --- cross_entropy --------------------------------------------------------------------------------
_ce_rule = with_indices("cross_entropy", "labels", "real_floating")


def _ce_shape(shapes, attrs):
    logits, labels = shapes
    if len(logits) < 1 or tuple(logits[:-1]) != tuple(labels):
        raise ValueError(
            f"cross_entropy(): logits of shape {logits} need labels of shape {tuple(logits[:-1])}, got {labels}"
        )
    return tuple(labels) if attrs["reduction"] == "none" else ()


def _onehot(xp, labels, n, dtype):
    classes = xp.arange(n, dtype=labels.dtype, device=labels.device)
    return xp.astype(xp.equal(xp.expand_dims(labels, axis=-1), classes), dtype)


def _cross_entropy(xp, logits, labels, reduction="mean"):
    nll = -xp.sum(xp.log_softmax(logits, axis=-1) * _onehot(xp, labels, logits.shape[-1], logits.dtype), axis=-1)
    if reduction == "none":
        return nll
    return xp.sum(nll) if reduction == "sum" else xp.mean(nll)


def _ce_ref(logits, labels, reduction="mean"):
    n = logits.shape[-1]
    if labels.size and (labels.min() < 0 or labels.max() >= n):
        raise IndexError(f"cross_entropy(): labels must be in [0, {n})")
    lsm = _log_softmax_ref(logits, -1)
    nll = -np.take_along_axis(lsm, labels[..., None].astype(np.int64), axis=-1)[..., 0]
    return nll if reduction == "none" else (nll.sum() if reduction == "sum" else nll.mean())


def _ce_vjp(xp, g, i, o, reduction="mean"):
    logits, labels = i
    p = xp.softmax(logits, axis=-1) - _onehot(xp, labels, logits.shape[-1], logits.dtype)
    if reduction == "none":
        return p * xp.expand_dims(g, axis=-1), None
    scale = g if reduction == "sum" else g / float(max(labels.size, 1))
    return p * scale, None


def _check_labels(xp, inputs, attrs):
    """Out-of-range labels are an IndexError on every backend (checked on the device, then read back)."""
    logits, labels = inputs
    n = logits.shape[-1]
    check_index_range(xp, "cross_entropy", "label", labels, 0, n, f"for {n} classes")


define("cross_entropy", inputs=("logits", "labels"), attrs={"reduction": Choice("mean", ("mean", "sum", "none"))}, dtype_rule=_ce_rule, check=_check_labels,
       shape_rule=_ce_shape, reference=_ce_ref, vjp=_ce_vjp, decomposition=_cross_entropy, category="nn",
       domain="labels", tolerance=_TOL,
       doc="softmax cross entropy of logits (..., C) against integer labels (...)")


# --- layer_norm / linear ----------------------------------------------------------------------------
def _ln_shape(shapes, attrs):
    x, w, b = shapes
    k = len(w)
    if w != b or tuple(x[len(x) - k:]) != tuple(w) or k == 0:
        raise ValueError(f"layer_norm(): weight {w} and bias {b} must equal the trailing dimensions of x {x}")
    return x


def _ln_axes(x, w):
    return tuple(range(x.ndim - w.ndim, x.ndim))


def _layer_norm(xp, x, weight, bias, eps=1e-5):
    axes = _ln_axes(x, weight)
    m = xp.mean(x, axis=axes, keepdims=True)
    d = x - m
    v = xp.mean(d * d, axis=axes, keepdims=True)
    return d / xp.sqrt(v + eps) * weight + bias


def _ln_ref(x, weight, bias, eps=1e-5):
    axes = tuple(range(x.ndim - weight.ndim, x.ndim))
    m = x.mean(axis=axes, keepdims=True)
    v = ((x - m) ** 2).mean(axis=axes, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * weight + bias


define("layer_norm", inputs=("x", "weight", "bias"), attrs={"eps": Real(1e-5, lo=0, open=True)}, dtype_rule=same("real_floating"),
       shape_rule=_ln_shape, reference=_ln_ref, decomposition=_layer_norm, category="nn",
       tolerance={"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2)}, doc="normalize over the trailing weight.ndim dimensions")


def _lin_shape(shapes, attrs):
    x, w, b = shapes
    if len(w) != 2 or not x or x[-1] != w[1] or tuple(b) not in ((w[0],), ()):
        raise ValueError(f"linear(): x {x}, weight {w} (out, in) and bias {b} (out,) do not fit")
    return tuple(x[:-1]) + (w[0],)


define("linear", inputs=("x", "weight", "bias"), dtype_rule=same("real_floating"), shape_rule=_lin_shape,
       reference=lambda x, w, b: x @ w.T + b, decomposition=lambda xp, x, w, b: xp.matmul(x, xp.matrix_transpose(w)) + b,
       category="nn", tolerance={"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2)}, doc="x @ weight.T + bias, weight of shape (out, in)")
