"""The deep-learning ops: softmax, log_softmax, cross_entropy, nll_loss, layer_norm, group_norm,
batch_norm (with given statistics), linear, conv2d, conv_transpose2d, conv2d_weight_grad, max_pool2d,
avg_pool2d, adaptive_avg_pool2d, embedding, leaky_relu, silu and elu. All composites, built from
the array ops so every device runs them; a backend may register fused kernels for them (the cpu
has the convolutions). ``anydevice.nn.functional`` wraps them under torch's names and layouts."""
from __future__ import annotations

import math

import numpy as np

from anydevice.ops.registry import (
    Attr,
    Bool,
    Choice,
    Int,
    Optional,
    Real,
    _is_int,
    check_category,
    check_index_range,
    define,
    get_op,
    normalize_axis,
    partial_vjp,
    same,
    with_indices,
)


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
    return (xp.softmax_grad(g, o, axis=axis),)


def _softmax_grad(xp, g, out, axis=-1):
    if out.ndim == 0:
        return xp.zeros_like(g)
    return out * (g - xp.sum(g * out, axis=axis, keepdims=True))


def _softmax_grad_ref(g, out, axis=-1):
    if out.ndim == 0:
        return np.zeros_like(g)
    return out * (g - np.sum(g * out, axis=axis, keepdims=True))


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
    return (xp.log_softmax_grad(g, o, axis=axis),)


def _log_softmax_grad(xp, g, out, axis=-1):
    if out.ndim == 0:
        return xp.zeros_like(g)
    return g - xp.exp(out) * xp.sum(g, axis=axis, keepdims=True)


def _log_softmax_grad_ref(g, out, axis=-1):
    if out.ndim == 0:
        return np.zeros_like(g)
    return g - np.exp(out) * np.sum(g, axis=axis, keepdims=True)


def _grad_shape(name):
    def rule(shapes, attrs):
        if tuple(shapes[0]) != tuple(shapes[1]):
            raise ValueError(f"{name}(): grad of shape {tuple(shapes[0])} and out of shape {tuple(shapes[1])} must "
                             f"have one shape")
        return tuple(shapes[0])

    return rule


def _sm_grad_samples(d, rng):
    from anydevice.ops.samples import Sample, values

    return [Sample([values(rng, d, (4, 5)), values(rng, d, (4, 5))], {"axis": a}, f"(4, 5), axis={a}")
            for a in (-1, 0)] + [Sample([values(rng, d, (2, 3, 4)), values(rng, d, (2, 3, 4))], {"axis": 1},
                                        "(2, 3, 4), axis=1"),
                                 Sample([values(rng, d, ()), values(rng, d, ())], {}, "0-d: no gradient")]


def _define_grad(name, decomposition, reference, doc):
    """The backward op of ``name`` (softmax, log_softmax): its gradient from the output's."""
    define(f"{name}_grad", inputs=("grad", "out"), attrs={"axis": Int(-1)}, dtype_rule=same("real_floating"),
           canon=_canon_axis(f"{name}_grad"), shape_rule=_grad_shape(f"{name}_grad"), reference=reference,
           decomposition=decomposition, differentiable=False, category="nn", tolerance=_TOL, samples=_sm_grad_samples,
           errors=[([np.ones((2, 3), np.float32), np.ones(3, np.float32)], {}, ValueError, "grad and out shapes")],
           doc=doc)


_TOL = {"float32": (1e-5, 1e-5), "float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2)}  # half: sums accumulate in the dtype
define("softmax", inputs=("x",), attrs={"axis": Int(-1)}, dtype_rule=same("real_floating"), canon=_canon_axis("softmax"),
       shape_rule=lambda s, a: s[0], reference=_softmax_ref, vjp=_softmax_vjp, decomposition=_softmax,
       category="nn", tolerance=_TOL)
define("log_softmax", inputs=("x",), attrs={"axis": Int(-1)}, dtype_rule=same("real_floating"),
       canon=_canon_axis("log_softmax"), shape_rule=lambda s, a: s[0], reference=_log_softmax_ref,
       vjp=_log_softmax_vjp, decomposition=_log_softmax, category="nn", tolerance=_TOL)
_define_grad("softmax", _softmax_grad, _softmax_grad_ref,
             "the gradient of softmax from its output's: out * (grad - sum(grad * out, axis))")
_define_grad("log_softmax", _log_softmax_grad, _log_softmax_grad_ref,
             "the gradient of log_softmax from its output's: grad - exp(out) * sum(grad, axis)")


# --- cross_entropy --------------------------------------------------------------------------------
_ce_rule = with_indices("cross_entropy", "labels", "real_floating")
_ceg_labels = with_indices("cross_entropy_grad", "labels", "real_floating")


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
    return xp.cross_entropy_grad(logits, labels, g, reduction=reduction), None


def _cross_entropy_grad(xp, logits, labels, g, reduction="mean"):
    p = xp.softmax(logits, axis=-1) - _onehot(xp, labels, logits.shape[-1], logits.dtype)
    if reduction == "none":
        return p * xp.expand_dims(g, axis=-1)
    scale = g if reduction == "sum" else g / float(max(labels.size, 1))
    return p * scale


def _ceg_ref(logits, labels, g, reduction="mean"):
    p = _softmax_ref(logits, -1)
    p = p - (labels[..., None] == np.arange(logits.shape[-1]))
    if reduction == "none":
        return p * g[..., None]
    return p * (g if reduction == "sum" else g / max(labels.size, 1))


def _ceg_rule(ds, attrs):
    compute, d = _ceg_labels(ds[:2], attrs)
    if ds[2] is not d:
        raise TypeError(f"cross_entropy_grad(): grad must have the dtype of the logits ({d.name}), got {ds[2].name}")
    return (*compute, d), d


_ceg_rule.category = "real_floating"


def _per_label(name, what, x, labels, attrs) -> tuple:
    """The labels' shape for reduction='none', else (); ValueError unless the labels have the
    leading shape of ``x`` (..., C)."""
    if len(x) < 1 or tuple(x[:-1]) != tuple(labels):
        raise ValueError(f"{name}(): {what} of shape {tuple(x)} (..., C) need labels of shape "
                         f"{tuple(x[:-1])}, got {tuple(labels)}")
    return tuple(labels) if attrs["reduction"] == "none" else ()


def _ceg_shape(shapes, attrs):
    logits, labels, g = shapes
    want = _per_label("cross_entropy_grad", "logits", logits, labels, attrs)
    if tuple(g) != want:
        raise ValueError(f"cross_entropy_grad(): grad of shape {tuple(g)} for reduction={attrs['reduction']!r} "
                         f"must have shape {want}")
    return tuple(logits)


def _ceg_samples(d, rng):
    from anydevice.ops.samples import Sample, values

    lab = np.asarray([0, 3, 1, 4], np.int64)
    out = [Sample([values(rng, d, (4, 5)), lab, values(rng, d, ())], {"reduction": r}, f"(4, 5), reduction={r!r}")
           for r in ("mean", "sum")]
    out.append(Sample([values(rng, d, (2, 3, 5)), np.asarray([[0, 1, 2], [1, 1, 4]], np.int64), values(rng, d, (2, 3))],
                      {"reduction": "none"}, "batched, reduction='none'"))
    out.append(Sample([values(rng, d, (3, 4)), np.asarray([-1, 4, 2], np.int64), values(rng, d, ())], {},
                      "labels out of range have no one-hot entry"))
    return out


def _check_labels(xp, inputs, attrs):
    """Out-of-range labels are an IndexError on every backend (checked on the device, then read back)."""
    logits, labels = inputs
    n = logits.shape[-1]
    check_index_range(xp, "cross_entropy", "label", labels, 0, n, f"for {n} classes")


define("cross_entropy", inputs=("logits", "labels"), attrs={"reduction": Choice("mean", ("mean", "sum", "none"))}, dtype_rule=_ce_rule, check=_check_labels,
       shape_rule=_ce_shape, reference=_ce_ref, vjp=_ce_vjp, decomposition=_cross_entropy, category="nn",
       domain="labels", tolerance=_TOL,
       doc="softmax cross entropy of logits (..., C) against integer labels (...)")
define("cross_entropy_grad", inputs=("logits", "labels", "grad"),
       attrs={"reduction": Choice("mean", ("mean", "sum", "none"))}, dtype_rule=_ceg_rule, shape_rule=_ceg_shape,
       reference=_ceg_ref, decomposition=_cross_entropy_grad, differentiable=False, category="nn", tolerance=_TOL,
       samples=_ceg_samples,
       errors=[([np.zeros((2, 3), np.float32), np.asarray([0, 1], np.int64), np.ones(2, np.float32)], {}, ValueError,
                "grad (2,) for reduction='mean'"),
               ([np.zeros((2, 3), np.float32), np.zeros(2, np.float32), np.ones((), np.float32)], {}, TypeError,
                "float labels")],
       doc="the gradient of cross_entropy with respect to its logits: (softmax(logits) - onehot(labels)) times "
           "grad (divided by the number of labels for 'mean'); a label outside [0, C) has no one-hot entry")


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


@partial_vjp
def _linear_vjp(xp, g, i, o, needs=(True, True, True)):
    """grad x = g @ weight, grad weight = g.T @ x (over every leading axis), grad bias = g summed
    down to the bias' shape; only those of inputs that require a gradient."""
    x, w, b = i
    gx = xp.matmul(g, w) if needs[0] else None
    gw = gb = None
    if needs[1]:
        g2, x2 = (g, x) if g.ndim == 2 else (xp.reshape(g, (-1, w.shape[0])), xp.reshape(x, (-1, w.shape[1])))
        gw = xp.matmul(xp.matrix_transpose(g2), x2)
    if needs[2]:
        gb = xp.sum(g, axis=tuple(range(g.ndim - b.ndim))) if b.ndim else xp.sum(g)
    return gx, gw, gb


define("linear", inputs=("x", "weight", "bias"), dtype_rule=same("real_floating"), shape_rule=_lin_shape,
       reference=lambda x, w, b: x @ w.T + b, decomposition=lambda xp, x, w, b: xp.matmul(x, xp.matrix_transpose(w)) + b,
       vjp=_linear_vjp,
       category="nn", tolerance={"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2)}, doc="x @ weight.T + bias, weight of shape (out, in)")


# --- convolution ----------------------------------------------------------------------------------
# Layout NCHW; weight (out, in / groups, kh, kw) for conv2d and (in, out / groups, kh, kw) for
# conv_transpose2d, as in torch. ``padding`` is normalized to (top, bottom, left, right) so that
# "same" with an even kernel (more padding after than before) is one case of the general rule.
# The decompositions are im2col from strided slices + matmul (conv2d, its weight gradient) and
# zero insertion + a stride-1 conv2d of the flipped kernel (conv_transpose2d): every device runs
# them with getitem, concat, reshape, permute_dims and matmul.
class _Pair(Attr):
    """An int or a tuple of ``n`` ints, each >= ``lo``; normalized to a tuple of 2 (or ``n``) ints.
    ``words`` also allows these strings (conv2d's padding='same' / 'valid')."""

    __slots__ = ("lo", "n", "words")

    def __init__(self, default, lo=1, n=(2,), words=()):
        super().__init__(default)
        self.lo, self.n, self.words = lo, tuple(n), tuple(words)

    annotation = "int | tuple[int, int]"

    def check(self, ctx, name, v):
        if type(v) is str and self.words:
            if v in self.words:
                return v
            self.fail(ctx, name, v, ValueError)
        vals = (v,) * 2 if _is_int(v) else v
        if not isinstance(vals, (tuple, list)) or not all(_is_int(e) for e in vals) or len(vals) not in (2, *self.n):
            self.fail(ctx, name, v)
        if any(e < self.lo for e in vals):
            self.fail(ctx, name, v, ValueError)
        return tuple(int(e) for e in vals)

    def allowed(self) -> str:
        sizes = " or ".join(str(k) for k in sorted({2, *self.n}))
        what = "a positive int" if self.lo == 1 else "a non-negative int"
        words = "".join(f", {w!r}" for w in self.words)
        return f"{what} or a tuple of {sizes} of them{words}"


_STRIDE = _Pair((1, 1))
_PAD = _Pair((0, 0, 0, 0), lo=0, n=(4,))
_CONV_ATTRS = {"stride": _STRIDE, "padding": _Pair((0, 0, 0, 0), lo=0, n=(4,), words=("same", "valid")),
               "dilation": _Pair((1, 1)), "groups": Int(1, lo=1)}


def _pad4(p):
    p = _pair(p)
    return p if len(p) == 4 else (p[0], p[0], p[1], p[1])


def _pair(v):
    return (int(v),) * 2 if _is_int(v) else tuple(v)


def _pairs(attrs, *names):
    """The attributes as tuples (canon also runs on attributes the schema has not normalized)."""
    return {**attrs, **{k: _pair(attrs[k]) for k in names}}


def _out_len(name, n, lo, hi, k, s, d, axis):
    span = d * (k - 1) + 1
    if n + lo + hi < span:
        raise ValueError(f"{name}(): the kernel spans {span} along the {axis} axis (size {k}, dilation {d}), more "
                         f"than the padded input's {n + lo + hi} ({n} + padding {lo} + {hi})")
    return (n + lo + hi - span) // s + 1


def _check_rank(name, what, shape, layout):
    if len(shape) != 4:
        raise ValueError(f"{name}(): {what} must be 4-D {layout}, got shape {tuple(shape)}")


def _check_groups(name, what, channels, groups):
    if channels % groups:
        raise ValueError(f"{name}(): {what} ({channels}) must be divisible by groups ({groups})")


def _conv_canon(shapes, attrs):
    x, w = shapes
    attrs = _pairs(attrs, "stride", "dilation")
    _check_rank("conv2d", "input", x, "(N, C, H, W)")
    _check_rank("conv2d", "weight", w, "(out_channels, in_channels / groups, kh, kw)")
    g = attrs["groups"]
    _check_groups("conv2d", "in_channels", x[1], g)
    _check_groups("conv2d", "out_channels", w[0], g)
    if x[1] // g != w[1]:
        raise ValueError(f"conv2d(): input has {x[1]} channels, so with groups={g} the weight needs {x[1] // g} "
                         f"input channels per group, got weight of shape {tuple(w)}")
    p = attrs["padding"]
    if p == "valid":
        p = (0, 0, 0, 0)
    elif p == "same":
        if attrs["stride"] != (1, 1):
            raise ValueError(f"conv2d(): padding='same' needs stride 1, got stride {attrs['stride']}")
        p = ()
        for k, d in zip(w[2:], attrs["dilation"]):
            total = d * (k - 1)
            p += (total // 2, total - total // 2)
    return {**attrs, "padding": _pad4(p)}


def _conv_shape(shapes, attrs):
    (n, _, h, w_), wt = shapes
    (sh, sw), p, (dh, dw) = attrs["stride"], attrs["padding"], attrs["dilation"]
    return (n, wt[0], _out_len("conv2d", h, p[0], p[1], wt[2], sh, dh, "H"),
            _out_len("conv2d", w_, p[2], p[3], wt[3], sw, dw, "W"))


def _zeros(xp, x, shape):
    return xp.full(tuple(shape), 0.0, dtype=x.dtype, device=x.device)


def _pad_hw(xp, x, p, value=0.0):
    """x (N, C, H, W) with p = (top, bottom, left, right) rows and columns of ``value`` added
    (a negative amount removes rows or columns)."""
    h, w = x.shape[2:]
    if min(p) < 0:
        x = x[:, :, max(-p[0], 0):h - max(-p[1], 0), max(-p[2], 0):w - max(-p[3], 0)]
    top, bottom, left, right = (max(e, 0) for e in p)
    if top or bottom:
        n, c, _, w = x.shape
        parts = [xp.full((n, c, k, w), value, dtype=x.dtype, device=x.device) for k in (top, bottom)]
        x = xp.concat([a for a in (parts[0], x, parts[1]) if a.shape[2]], axis=2)
    if left or right:
        n, c, h, _ = x.shape
        parts = [xp.full((n, c, h, k), value, dtype=x.dtype, device=x.device) for k in (left, right)]
        x = xp.concat([a for a in (parts[0], x, parts[1]) if a.shape[3]], axis=3)
    return x


def _taps(x, k, s, d, out):
    """The (N, C, Ho, Wo) strided slices of x, one per kernel tap, row by row."""
    (kh, kw), (sh, sw), (dh, dw), (ho, wo) = k, s, d, out
    return [x[:, :, i * dh:i * dh + sh * (ho - 1) + 1:sh, j * dw:j * dw + sw * (wo - 1) + 1:sw]
            for i in range(kh) for j in range(kw)]


def _im2col(xp, x, k, stride, padding, dilation, out, groups):
    """(N, G, C/G * kh * kw, Ho * Wo) columns, channel-major then tap (the weight's order)."""
    n, c = x.shape[:2]
    taps = _taps(_pad_hw(xp, x, padding), k, stride, dilation, out)
    cols = xp.stack(taps, axis=2)  # (N, C, kh*kw, Ho, Wo)
    return xp.reshape(cols, (n, groups, (c // groups) * k[0] * k[1], out[0] * out[1]))


def _conv2d(xp, x, w, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    n, o = x.shape[0], w.shape[0]
    ho, wo = _conv_shape([x.shape, w.shape], {"stride": stride, "padding": padding, "dilation": dilation})[2:]
    cols = _im2col(xp, x, w.shape[2:], stride, padding, dilation, (ho, wo), groups)
    wm = xp.reshape(w, (groups, o // groups, -1))
    return xp.reshape(xp.matmul(wm, cols), (n, o, ho, wo))


def _conv_ref(x, w, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """Sum over kernel taps of einsum(window, weight tap), group by group, in float64."""
    (sh, sw), (dh, dw), p = stride, dilation, padding
    xpad = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p[0], p[1]), (p[2], p[3])))
    n, o, (cg, kh, kw) = x.shape[0], w.shape[0], w.shape[1:]
    ho = (xpad.shape[2] - dh * (kh - 1) - 1) // sh + 1
    wo = (xpad.shape[3] - dw * (kw - 1) - 1) // sw + 1
    og = o // groups
    out = np.zeros((n, o, ho, wo))
    for g in range(groups):
        xs, ws = xpad[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og].astype(np.float64)
        for i in range(kh):
            for j in range(kw):
                win = xs[:, :, i * dh:i * dh + sh * (ho - 1) + 1:sh, j * dw:j * dw + sw * (wo - 1) + 1:sw]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", win, ws[:, :, i, j])
    return out


def _output_paddings(x, g, k, s, p, d):
    """The output_padding that makes conv_transpose2d of a conv2d's output (shape g) give back the
    shape x of its input (the rows a stride skipped at the end)."""
    return tuple(x[2 + i] - ((g[2 + i] - 1) * s[i] - p[2 * i] - p[2 * i + 1] + d[i] * (k[i] - 1) + 1) for i in range(2))


def _conv_vjp(xp, g, i, o, stride, padding, dilation, groups):
    x, w = i
    kh, kw = w.shape[2:]
    op = _output_paddings(x.shape, g.shape, (kh, kw), stride, padding, dilation)
    gx = xp.conv_transpose2d(g, w, stride=stride, padding=padding, output_padding=op, dilation=dilation, groups=groups)
    gw = xp.conv2d_weight_grad(x, g, kernel_size=(kh, kw), stride=stride, padding=padding, dilation=dilation,
                               groups=groups)
    return gx, gw


def _conv_flops(shapes, attrs):
    x, w = shapes
    return 2.0 * x[0] * w[0] * w[1] * w[2] * w[3] * x[2] * x[3] / (attrs["stride"][0] * attrs["stride"][1])


def _conv_samples(rows):
    """Samples from rows of (shapes, attrs, description); a row marked 'grad' is smooth."""
    def gen(d, rng):
        from anydevice.ops.samples import _GRAD_DTYPES, Sample, smooth, values

        out = []
        for shapes, attrs, desc, grad in rows:
            if grad and d not in _GRAD_DTYPES:
                continue
            out.append(Sample([(smooth if grad else values)(rng, d, s) for s in shapes], dict(attrs), desc, grad=grad))
        return out

    return gen


_CONV_TOL = {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2)}  # sums of products
_conv_rows = [
    ([(2, 3, 5, 5), (4, 3, 3, 3)], {}, "(2, 3, 5, 5) * (4, 3, 3, 3)", False),
    ([(1, 2, 6, 7), (2, 2, 3, 2)], {"stride": 2, "padding": 1}, "stride 2, padding 1, 3x2 kernel", False),
    ([(1, 4, 5, 5), (4, 2, 3, 3)], {"groups": 2, "dilation": 2, "padding": 2}, "groups 2, dilation 2", False),
    ([(1, 2, 4, 5), (3, 2, 2, 2)], {"padding": "same"}, "padding 'same', even kernel", False),
    ([(1, 2, 4, 4), (3, 2, 1, 1)], {"stride": (2, 1), "padding": (0, 1, 2, 0)}, "1x1, asymmetric padding", False),
    ([(0, 2, 4, 4), (3, 2, 3, 3)], {}, "empty batch", False),
    ([(1, 2, 4, 4), (2, 2, 2, 2)], {"stride": 2, "padding": 1}, "smooth, stride 2", True),
    ([(1, 2, 4, 3), (2, 1, 2, 2)], {"groups": 2, "dilation": (1, 2), "padding": (1, 1)}, "smooth, groups, dilation", True),
]
_conv_errors = [
    ([np.ones((3, 5, 5), np.float32), np.ones((4, 3, 3, 3), np.float32)], {}, ValueError, "3-D input"),
    ([np.ones((1, 3, 5, 5), np.float32), np.ones((4, 2, 3, 3), np.float32)], {}, ValueError, "channels 3 vs 2"),
    ([np.ones((1, 4, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)], {"groups": 2}, ValueError,
     "out channels not divisible by groups"),
    ([np.ones((1, 3, 2, 2), np.float32), np.ones((4, 3, 3, 3), np.float32)], {}, ValueError, "kernel larger than input"),
    ([np.ones((1, 3, 5, 5), np.float32), np.ones((4, 3, 3, 3), np.float32)], {"stride": 0}, ValueError, "stride 0"),
    ([np.ones((1, 3, 5, 5), np.float32), np.ones((4, 3, 3, 3), np.float32)], {"padding": "full"}, ValueError,
     "unknown padding word"),
    ([np.ones((1, 3, 5, 5), np.float32), np.ones((4, 3, 3, 3), np.float32)], {"padding": "same", "stride": 2},
     ValueError, "'same' with stride 2"),
]
define("conv2d", inputs=("x", "weight"), attrs=_CONV_ATTRS, dtype_rule=same("real_floating"), canon=_conv_canon,
       shape_rule=_conv_shape, reference=_conv_ref, vjp=_conv_vjp, decomposition=_conv2d, category="nn",
       flops=_conv_flops, tolerance=_CONV_TOL, samples=_conv_samples(_conv_rows), errors=_conv_errors,
       doc="2-D cross-correlation of x (N, C, H, W) with weight (out, C / groups, kh, kw)")


# conv_transpose2d: the adjoint of conv2d (its input gradient), weight (in, out / groups, kh, kw)
def _convt_canon(shapes, attrs):
    x, w = shapes
    attrs = _pairs(attrs, "stride", "dilation", "output_padding")
    _check_rank("conv_transpose2d", "input", x, "(N, C, H, W)")
    _check_rank("conv_transpose2d", "weight", w, "(in_channels, out_channels / groups, kh, kw)")
    g = attrs["groups"]
    _check_groups("conv_transpose2d", "in_channels", x[1], g)
    if x[1] != w[0]:
        raise ValueError(f"conv_transpose2d(): input has {x[1]} channels but the weight of shape {tuple(w)} "
                         f"expects {w[0]} (weight is (in_channels, out_channels / groups, kh, kw))")
    for op, s in zip(attrs["output_padding"], attrs["stride"]):
        if op >= s:
            raise ValueError(f"conv_transpose2d(): output_padding {attrs['output_padding']} must be smaller than the "
                             f"stride {attrs['stride']} in each dimension")
    return {**attrs, "padding": _pad4(attrs["padding"])}


def _convt_len(n, k, s, lo, hi, d, op, axis):
    out = (n - 1) * s - lo - hi + d * (k - 1) + op + 1
    if out < 0:
        raise ValueError(f"conv_transpose2d(): padding {lo} + {hi} leaves a negative output size {out} along the "
                         f"{axis} axis")
    return out


def _convt_shape(shapes, attrs):
    (n, _, h, w_), wt = shapes
    s, p, d, op = attrs["stride"], attrs["padding"], attrs["dilation"], attrs["output_padding"]
    return (n, wt[1] * attrs["groups"], _convt_len(h, wt[2], s[0], p[0], p[1], d[0], op[0], "H"),
            _convt_len(w_, wt[3], s[1], p[2], p[3], d[1], op[1], "W"))


def _insert_zeros(xp, x, s, axis):
    """s - 1 zeros between neighbours along ``axis`` (2 or 3) of x (N, C, H, W)."""
    n = x.shape[axis]
    if s == 1 or n == 0:
        return x
    z = _zeros(xp, x, x.shape)
    y = xp.stack([x] + [z] * (s - 1), axis=axis + 1)
    shape = list(x.shape)
    shape[axis] = n * s
    y = xp.reshape(y, tuple(shape))
    return y[:, :, :(n - 1) * s + 1] if axis == 2 else y[:, :, :, :(n - 1) * s + 1]


def _conv_transpose2d(xp, x, w, stride=(1, 1), padding=(0, 0, 0, 0), output_padding=(0, 0), dilation=(1, 1), groups=1):
    cin, og, kh, kw = w.shape
    z = _insert_zeros(xp, _insert_zeros(xp, x, stride[0], 2), stride[1], 3)
    eh, ew = dilation[0] * (kh - 1), dilation[1] * (kw - 1)
    pads = (eh - padding[0], eh - padding[1] + output_padding[0], ew - padding[2], ew - padding[3] + output_padding[1])
    # the stride-1 conv's padding, made non-negative by cropping z first
    z = _pad_hw(xp, z, tuple(min(e, 0) for e in pads))
    wt = xp.reshape(w, (groups, cin // groups, og, kh, kw))
    wt = xp.reshape(xp.permute_dims(wt, (0, 2, 1, 3, 4)), (groups * og, cin // groups, kh, kw))
    wt = xp.flip(wt, axis=(2, 3))
    return xp.conv2d(z, wt, stride=(1, 1), padding=tuple(max(e, 0) for e in pads), dilation=dilation, groups=groups)


def _convt_ref(x, w, stride=(1, 1), padding=(0, 0, 0, 0), output_padding=(0, 0), dilation=(1, 1), groups=1):
    """Scatter: out[n, o, h*s + i*d - p, w*s + j*d - p] += x[n, c, h, w] * weight[c, o, i, j], in float64."""
    (n, cin, h, wd), (_, og, kh, kw) = x.shape, w.shape
    (sh, sw), (dh, dw), p = stride, dilation, padding
    ho, wo = _convt_shape([x.shape, w.shape], {"stride": stride, "padding": padding, "dilation": dilation,
                                               "output_padding": output_padding, "groups": groups})[2:]
    full = np.zeros((n, og * groups, max((h - 1) * sh + dh * (kh - 1) + 1, p[0] + ho),
                     max((wd - 1) * sw + dw * (kw - 1) + 1, p[2] + wo)))
    cg = cin // groups
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    for g in range(groups):
        xs, ws = x64[:, g * cg:(g + 1) * cg], w64[g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                full[:, g * og:(g + 1) * og, i * dh:i * dh + sh * (h - 1) + 1:sh, j * dw:j * dw + sw * (wd - 1) + 1:sw] += \
                    np.einsum("nchw,co->nohw", xs, ws[:, :, i, j])
    return full[:, :, p[0]:p[0] + ho, p[2]:p[2] + wo]


def _convt_vjp(xp, g, i, o, stride, padding, output_padding, dilation, groups):
    x, w = i
    gx = xp.conv2d(g, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
    gw = xp.conv2d_weight_grad(g, x, kernel_size=w.shape[2:], stride=stride, padding=padding, dilation=dilation,
                               groups=groups)
    return gx, gw


_convt_rows = [
    ([(2, 3, 4, 4), (3, 2, 3, 3)], {}, "(2, 3, 4, 4), weight (3, 2, 3, 3)", False),
    ([(1, 2, 3, 4), (2, 3, 3, 2)], {"stride": 2, "padding": 1, "output_padding": 1}, "stride 2, output_padding 1", False),
    ([(1, 4, 3, 3), (4, 1, 2, 2)], {"groups": 2, "dilation": 2}, "groups 2, dilation 2", False),
    ([(1, 2, 3, 3), (2, 2, 3, 3)], {"padding": (2, 0, 1, 3)}, "asymmetric padding larger than the kernel", False),
    ([(0, 2, 3, 3), (2, 2, 2, 2)], {}, "empty batch", False),
    ([(1, 2, 3, 3), (2, 2, 2, 2)], {"stride": 2, "padding": 1, "output_padding": 1}, "smooth, stride 2", True),
    ([(1, 2, 2, 3), (2, 1, 2, 3)], {"groups": 2, "dilation": (2, 1)}, "smooth, groups, dilation", True),
]
_f = np.float32
_convt_errors = [
    ([np.ones((3, 4, 4), _f), np.ones((3, 2, 3, 3), _f)], {}, ValueError, "3-D input"),
    ([np.ones((1, 3, 4, 4), _f), np.ones((2, 2, 3, 3), _f)], {}, ValueError, "3 channels for a weight of 2"),
    ([np.ones((1, 2, 4, 4), _f), np.ones((2, 2, 3, 3), _f)], {"stride": 2, "output_padding": 2}, ValueError,
     "output_padding not below stride"),
    ([np.ones((1, 3, 4, 4), _f), np.ones((3, 2, 3, 3), _f)], {"groups": 2}, ValueError, "3 channels in 2 groups"),
]
define("conv_transpose2d", inputs=("x", "weight"),
       attrs={"stride": _STRIDE, "padding": _PAD, "output_padding": _Pair((0, 0), lo=0), "dilation": _Pair((1, 1)),
              "groups": Int(1, lo=1)},
       dtype_rule=same("real_floating"), canon=_convt_canon, shape_rule=_convt_shape, reference=_convt_ref,
       vjp=_convt_vjp, decomposition=_conv_transpose2d, category="nn", tolerance=_CONV_TOL,
       samples=_conv_samples(_convt_rows), errors=_convt_errors,
       doc="transposed 2-D convolution (the adjoint of conv2d); weight (in, out / groups, kh, kw)")


# conv2d_weight_grad: d conv2d / d weight, contracted with the output gradient g
def _cwg_canon(shapes, attrs):
    x, g = shapes
    attrs = _pairs(attrs, "kernel_size", "stride", "dilation")
    _check_rank("conv2d_weight_grad", "input", x, "(N, C, H, W)")
    _check_rank("conv2d_weight_grad", "grad", g, "(N, out_channels, Ho, Wo)")
    _check_groups("conv2d_weight_grad", "in_channels", x[1], attrs["groups"])
    _check_groups("conv2d_weight_grad", "out_channels", g[1], attrs["groups"])
    return {**attrs, "padding": _pad4(attrs["padding"])}


def _cwg_shape(shapes, attrs):
    x, g = shapes
    (kh, kw), gr = attrs["kernel_size"], attrs["groups"]
    want = _conv_shape([x, (g[1], x[1] // gr, kh, kw)], attrs)
    if tuple(g) != want:
        raise ValueError(f"conv2d_weight_grad(): a conv2d of input {tuple(x)} with a {kh}x{kw} kernel gives "
                         f"{want}, but grad has shape {tuple(g)}")
    return (g[1], x[1] // gr, kh, kw)


def _conv2d_weight_grad(xp, x, g, kernel_size=(1, 1), stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    n, o, ho, wo = g.shape
    cols = _im2col(xp, x, kernel_size, stride, padding, dilation, (ho, wo), groups)  # (N, G, K, L)
    cols = xp.reshape(xp.permute_dims(cols, (1, 0, 3, 2)), (groups, n * ho * wo, -1))  # (G, N*L, K)
    gm = xp.reshape(xp.permute_dims(xp.reshape(g, (n, groups, o // groups, ho * wo)), (1, 2, 0, 3)),
                    (groups, o // groups, n * ho * wo))
    return xp.reshape(xp.matmul(gm, cols), (o, x.shape[1] // groups) + tuple(kernel_size))


def _cwg_ref(x, g, kernel_size=(1, 1), stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    (sh, sw), (dh, dw), p, (kh, kw) = stride, dilation, padding, kernel_size
    xpad = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p[0], p[1]), (p[2], p[3])))
    n, o, ho, wo = g.shape
    cg, og = x.shape[1] // groups, o // groups
    out = np.zeros((o, cg, kh, kw))
    for gr in range(groups):
        xs, gs = xpad[:, gr * cg:(gr + 1) * cg], g[:, gr * og:(gr + 1) * og].astype(np.float64)
        for i in range(kh):
            for j in range(kw):
                win = xs[:, :, i * dh:i * dh + sh * (ho - 1) + 1:sh, j * dw:j * dw + sw * (wo - 1) + 1:sw]
                out[gr * og:(gr + 1) * og, :, i, j] = np.einsum("nchw,nohw->oc", win, gs)
    return out


def _cwg_vjp(xp, gg, i, o, kernel_size, stride, padding, dilation, groups):
    x, g = i
    op = _output_paddings(x.shape, g.shape, kernel_size, stride, padding, dilation)
    gx = xp.conv_transpose2d(g, gg, stride=stride, padding=padding, output_padding=op, dilation=dilation, groups=groups)
    return gx, xp.conv2d(x, gg, stride=stride, padding=padding, dilation=dilation, groups=groups)


_cwg_rows = [
    ([(2, 3, 5, 5), (2, 4, 3, 3)], {"kernel_size": (3, 3)}, "(2, 3, 5, 5), grad (2, 4, 3, 3)", False),
    ([(1, 2, 6, 7), (1, 2, 3, 4)], {"kernel_size": (3, 2), "stride": 2, "padding": 1}, "stride 2, padding 1", False),
    ([(1, 4, 5, 5), (1, 4, 5, 5)], {"kernel_size": (3, 3), "groups": 2, "dilation": 2, "padding": 2}, "groups, dilation",
     False),
    ([(1, 2, 4, 4), (1, 2, 3, 3)], {"kernel_size": (2, 2), "stride": 2, "padding": 1}, "smooth, stride 2", True),
]
define("conv2d_weight_grad", inputs=("x", "grad"),
       attrs={"kernel_size": _Pair((1, 1)), "stride": _STRIDE, "padding": _PAD, "dilation": _Pair((1, 1)),
              "groups": Int(1, lo=1)},
       dtype_rule=same("real_floating"), canon=_cwg_canon, shape_rule=_cwg_shape, reference=_cwg_ref, vjp=_cwg_vjp,
       decomposition=_conv2d_weight_grad, category="nn", tolerance=_CONV_TOL, samples=_conv_samples(_cwg_rows),
       errors=[([np.ones((1, 2, 4, 4), _f), np.ones((1, 3, 3, 3), _f)], {"kernel_size": 3}, ValueError,
                "grad (1, 3, 3, 3) for a (1, 3, 2, 2) result")],
       doc="the gradient of conv2d with respect to its weight: x (N, C, H, W), grad (N, out, Ho, Wo)")


# --- pooling --------------------------------------------------------------------------------------
# max / mean over the stacked window slices of the padded input (max pads with -inf, so padding
# never wins); ceil_mode adds the overhang after the last row and column that a window may cover.
def _pool_len(name, n, k, s, p, d, ceil, axis):
    span = d * (k - 1) + 1
    if 2 * p > span:
        raise ValueError(f"{name}(): padding {p} must be at most half the window ({span} along the {axis} axis, "
                         f"kernel {k}, dilation {d})")
    if n + 2 * p < span:
        raise ValueError(f"{name}(): the window spans {span} along the {axis} axis, more than the padded input's "
                         f"{n + 2 * p}")
    out = (-(-(n + 2 * p - span) // s) if ceil else (n + 2 * p - span) // s) + 1
    if ceil and (out - 1) * s >= n + p:  # the last window must start inside the input or its left padding
        out -= 1
    return out


def _pool_canon(name):
    def canon(shapes, attrs):
        _check_rank(name, "input", shapes[0], "(N, C, H, W)")
        k = _pair(attrs["kernel_size"])
        s = k if attrs["stride"] is None else _pair(attrs["stride"])
        return {**attrs, "kernel_size": k, "stride": s, "padding": _pair(attrs["padding"]),
                "dilation": _pair(attrs.get("dilation", 1))}

    return canon


def _pool_out(name, shape, a):
    return tuple(_pool_len(name, shape[2 + i], a["kernel_size"][i], a["stride"][i], a["padding"][i], a["dilation"][i],
                           a["ceil_mode"], "HW"[i]) for i in range(2))


def _pool_shape(name):
    def rule(shapes, attrs):
        return tuple(shapes[0][:2]) + _pool_out(name, shapes[0], attrs)

    return rule


def _pool_pads(shape, a, out):
    """(top, bottom, left, right): the padding, and after it the ceil-mode overhang (or a crop)."""
    k, s, p, d = a["kernel_size"], a["stride"], a["padding"], a["dilation"]
    need = [(out[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 for i in range(2)]
    return (p[0], need[0] - shape[2] - p[0], p[1], need[1] - shape[3] - p[1])


def _pool_taps(xp, x, a, value, out):
    padded = _pad_hw(xp, x, _pool_pads(x.shape, a, out), value)
    return xp.stack(_taps(padded, a["kernel_size"], a["stride"], a["dilation"], out), axis=2)


def _max_pool2d(xp, x, kernel_size=1, stride=None, padding=0, dilation=1, ceil_mode=False):
    a = {"kernel_size": kernel_size, "stride": stride, "padding": padding, "dilation": dilation, "ceil_mode": ceil_mode}
    out = _pool_out("max_pool2d", x.shape, a)
    return xp.max(_pool_taps(xp, x, a, -math.inf, out), axis=2)


def _pool_windows_ref(x, a, value, clip):
    """Every window of x as a list of (i, j, block); ``clip``: windows cut to [0, n + clip)."""
    k, s, p, d = a["kernel_size"], a["stride"], a["padding"], a["dilation"]
    out = _pool_out("pool", x.shape, a)
    for i in range(out[0]):
        for j in range(out[1]):
            r0, c0 = i * s[0] - p[0], j * s[1] - p[1]
            rows = [r0 + t * d[0] for t in range(k[0])]
            cols = [c0 + t * d[1] for t in range(k[1])]
            yield i, j, rows, cols


def _max_pool_ref(x, kernel_size=1, stride=None, padding=0, dilation=1, ceil_mode=False):
    a = {"kernel_size": kernel_size, "stride": stride, "padding": padding, "dilation": dilation, "ceil_mode": ceil_mode}
    h, w = x.shape[2:]
    res = np.empty(x.shape[:2] + _pool_out("max_pool2d", x.shape, a))
    for i, j, rows, cols in _pool_windows_ref(x, a, -np.inf, 0):
        rr = [r for r in rows if 0 <= r < h]
        cc = [c for c in cols if 0 <= c < w]
        res[:, :, i, j] = x[:, :, rr][:, :, :, cc].astype(np.float64).max(axis=(2, 3))
    return res


def _avg_pool2d(xp, x, kernel_size=1, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                dilation=(1, 1)):
    a = {"kernel_size": kernel_size, "stride": stride, "padding": padding, "dilation": dilation, "ceil_mode": ceil_mode}
    out = _pool_out("avg_pool2d", x.shape, a)
    total = xp.sum(_pool_taps(xp, x, a, 0.0, out), axis=2)
    # how many elements each window averages: ones over the input (and its padding when counted)
    ones = xp.full((1, 1) + tuple(x.shape[2:]), 1.0, dtype=x.dtype, device=x.device)
    if count_include_pad:
        ones = _pad_hw(xp, ones, (padding[0], padding[0], padding[1], padding[1]), 1.0)
        pads = _pool_pads(x.shape, a, out)
        ones = _pad_hw(xp, ones, (0, pads[1] - padding[0], 0, pads[3] - padding[1]))
        count = xp.sum(xp.stack(_taps(ones, a["kernel_size"], a["stride"], a["dilation"], out), axis=2), axis=2)
    else:
        count = xp.sum(_pool_taps(xp, ones, a, 0.0, out), axis=2)
    return total / count


def _avg_pool_ref(x, kernel_size=1, stride=None, padding=0, ceil_mode=False, count_include_pad=True, dilation=(1, 1)):
    a = {"kernel_size": kernel_size, "stride": stride, "padding": padding, "dilation": dilation, "ceil_mode": ceil_mode}
    h, w = x.shape[2:]
    res = np.empty(x.shape[:2] + _pool_out("avg_pool2d", x.shape, a))
    for i, j, rows, cols in _pool_windows_ref(x, a, 0.0, 0):
        rr = [r for r in rows if 0 <= r < h]
        cc = [c for c in cols if 0 <= c < w]
        if count_include_pad:  # padded positions count, the ceil-mode overhang beyond the padding does not
            n = sum(1 for r in rows if r < h + padding[0]) * sum(1 for c in cols if c < w + padding[1])
        else:
            n = len(rr) * len(cc)
        res[:, :, i, j] = x[:, :, rr][:, :, :, cc].astype(np.float64).sum(axis=(2, 3)) / n
    return res


def _pool_samples(rows):
    return _conv_samples([([s], a, desc, grad) for s, a, desc, grad in rows])


_POOL_ATTRS = {"kernel_size": _Pair((1, 1)), "stride": Optional(_Pair((1, 1))), "padding": _Pair((0, 0), lo=0)}
_maxpool_rows = [
    ((2, 3, 6, 6), {"kernel_size": 2}, "2x2, stride 2", False),
    ((1, 2, 7, 5), {"kernel_size": 3, "stride": 2, "padding": 1}, "3x3, stride 2, padding 1", False),
    ((1, 2, 7, 7), {"kernel_size": (2, 3), "stride": 2, "ceil_mode": True}, "ceil_mode", False),
    ((1, 1, 7, 7), {"kernel_size": 2, "dilation": 2, "stride": 1}, "dilation 2", False),
    ((0, 2, 4, 4), {"kernel_size": 2}, "empty batch", False),
    ((1, 2, 5, 5), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}, "smooth, ceil_mode, padding", True),
]
_x4 = np.ones((1, 2, 4, 4), np.float32)
define("max_pool2d", inputs=("x",), attrs={**_POOL_ATTRS, "dilation": _Pair((1, 1)), "ceil_mode": Bool(False)},
       dtype_rule=same("real_floating"), canon=_pool_canon("max_pool2d"), shape_rule=_pool_shape("max_pool2d"),
       reference=_max_pool_ref, decomposition=_max_pool2d, category="nn", samples=_pool_samples(_maxpool_rows),
       errors=[([np.ones((2, 4, 4), np.float32)], {"kernel_size": 2}, ValueError, "3-D input"),
               ([_x4], {"kernel_size": 2, "padding": 2}, ValueError, "padding more than half the window"),
               ([_x4], {"kernel_size": 0}, ValueError, "kernel_size 0"),
               ([_x4], {"kernel_size": 5}, ValueError, "window larger than the input")],
       doc="the maximum over each window of x (N, C, H, W); stride defaults to kernel_size")

_avgpool_rows = [
    ((2, 3, 6, 6), {"kernel_size": 2}, "2x2, stride 2", False),
    ((1, 2, 7, 5), {"kernel_size": 3, "stride": 2, "padding": 1}, "padding counted", False),
    ((1, 2, 7, 5), {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False}, "padding not counted",
     False),
    ((1, 2, 6, 7), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}, "ceil_mode with padding", False),
    ((1, 2, 5, 5), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}, "smooth, ceil_mode", True),
]
define("avg_pool2d", inputs=("x",), attrs={**_POOL_ATTRS, "ceil_mode": Bool(False), "count_include_pad": Bool(True)},
       dtype_rule=same("real_floating"), canon=_pool_canon("avg_pool2d"), shape_rule=_pool_shape("avg_pool2d"),
       reference=_avg_pool_ref, decomposition=_avg_pool2d, category="nn", samples=_pool_samples(_avgpool_rows),
       tolerance=_TOL,
       errors=[([np.ones((4, 4), np.float32)], {"kernel_size": 2}, ValueError, "2-D input"),
               ([_x4], {"kernel_size": 2, "stride": 0}, ValueError, "stride 0")],
       doc="the mean over each window of x (N, C, H, W); count_include_pad: padded zeros count")


def _adaptive_canon(shapes, attrs):
    _check_rank("adaptive_avg_pool2d", "input", shapes[0], "(N, C, H, W)")
    return {**attrs, "output_size": _pair(attrs["output_size"])}


def _bins(n, m):
    """torch's adaptive bins: [floor(i n / m), ceil((i + 1) n / m)) for i < m."""
    return [(i * n // m, -(-(i + 1) * n // m)) for i in range(m)]


def _adaptive_avg_pool2d(xp, x, output_size=(1, 1)):
    for axis, m in ((2, output_size[0]), (3, output_size[1])):
        n = x.shape[axis]
        if m == n:
            continue
        key = (slice(None),) * axis
        x = xp.concat([xp.mean(x[key + (slice(a, b),)], axis=axis, keepdims=True) for a, b in _bins(n, m)], axis=axis)
    return x


def _adaptive_ref(x, output_size=(1, 1)):
    (h, w), (oh, ow) = x.shape[2:], output_size
    res = np.empty(x.shape[:2] + (oh, ow))
    for i, (r0, r1) in enumerate(_bins(h, oh)):
        for j, (c0, c1) in enumerate(_bins(w, ow)):
            res[:, :, i, j] = x[:, :, r0:r1, c0:c1].astype(np.float64).mean(axis=(2, 3))
    return res


define("adaptive_avg_pool2d", inputs=("x",), attrs={"output_size": _Pair((1, 1))}, dtype_rule=same("real_floating"),
       canon=_adaptive_canon, shape_rule=lambda s, a: tuple(s[0][:2]) + a["output_size"], reference=_adaptive_ref,
       decomposition=_adaptive_avg_pool2d, category="nn", tolerance=_TOL,
       samples=_pool_samples([((2, 3, 6, 6), {"output_size": 1}, "global average", False),
                              ((1, 2, 7, 5), {"output_size": (3, 2)}, "uneven bins (7 -> 3, 5 -> 2)", False),
                              ((1, 2, 3, 3), {"output_size": 5}, "more bins than rows (overlapping)", False),
                              ((1, 2, 5, 4), {"output_size": (2, 3)}, "smooth", True)]),
       errors=[([np.ones((4, 4), np.float32)], {"output_size": 2}, ValueError, "2-D input"),
               ([_x4], {"output_size": 0}, ValueError, "output_size 0")],
       doc="the mean over torch's adaptive bins, giving output_size (oh, ow)")


# --- normalization with given statistics, group_norm ----------------------------------------------
def _bn_shape(shapes, attrs):
    x, *stats = shapes
    if len(x) < 2:
        raise ValueError(f"batch_norm(): input must have at least 2 dimensions (N, C, ...), got shape {tuple(x)}")
    for name, s in zip(("mean", "var", "weight", "bias"), stats):
        if tuple(s) != (x[1],):
            raise ValueError(f"batch_norm(): {name} must have shape ({x[1]},) for an input of {x[1]} channels "
                             f"(shape {tuple(x)}), got {tuple(s)}")
    return x


def _per_channel(xp, v, ndim):
    return xp.reshape(v, (1, -1) + (1,) * (ndim - 2))


def _batch_norm(xp, x, mean, var, weight, bias, eps=1e-5):
    scale = weight / xp.sqrt(var + eps)
    return (x - _per_channel(xp, mean, x.ndim)) * _per_channel(xp, scale, x.ndim) + _per_channel(xp, bias, x.ndim)


def _bn_ref(x, mean, var, weight, bias, eps=1e-5):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * weight.reshape(shape) + bias.reshape(shape)


def _bn_samples(d, rng):
    from anydevice.ops.samples import _GRAD_DTYPES, Sample, smooth, values

    def row(shape, fn, desc, grad=False):
        c = shape[1]
        var = (np.abs(fn(rng, d, (c,))) + 0.5).astype(d.numpy)
        return Sample([fn(rng, d, shape), fn(rng, d, (c,)), var, fn(rng, d, (c,)), fn(rng, d, (c,))], {}, desc,
                      grad=grad)

    out = [row((2, 3, 4, 4), values, "(2, 3, 4, 4)"), row((4, 3), values, "(N, C) input"),
           row((2, 2, 5), values, "(N, C, L) input")]
    out.append(Sample(out[0].inputs, {"eps": 1e-3}, "eps=1e-3"))
    if d in _GRAD_DTYPES:
        out.append(row((2, 2, 3), smooth, "smooth", grad=True))
    return out


define("batch_norm", inputs=("x", "mean", "var", "weight", "bias"), attrs={"eps": Real(1e-5, lo=0, open=True)},
       dtype_rule=same("real_floating"), shape_rule=_bn_shape, reference=_bn_ref, decomposition=_batch_norm,
       category="nn", tolerance=_CONV_TOL, samples=_bn_samples,
       errors=[([np.ones((2, 3, 4), _f)] + [np.ones(2, _f)] * 4, {}, ValueError, "statistics for 2 of 3 channels"),
               ([np.ones(3, _f)] * 5, {}, ValueError, "1-D input")],
       doc="(x - mean) / sqrt(var + eps) * weight + bias per channel (axis 1) with the given statistics")


def _gn_canon(shapes, attrs):
    x, w, b = shapes
    g = attrs["num_groups"]
    if len(x) < 2:
        raise ValueError(f"group_norm(): input must have at least 2 dimensions (N, C, ...), got shape {tuple(x)}")
    _check_groups("group_norm", "channels", x[1], g)
    if tuple(w) != (x[1],) or tuple(b) != (x[1],):
        raise ValueError(f"group_norm(): weight and bias must have shape ({x[1]},), got {tuple(w)} and {tuple(b)}")
    return attrs


def _group_norm(xp, x, weight, bias, num_groups=1, eps=1e-5):
    n, c = x.shape[:2]
    y = xp.reshape(x, (n, num_groups, -1))
    d = y - xp.mean(y, axis=2, keepdims=True)
    v = xp.mean(d * d, axis=2, keepdims=True)
    y = xp.reshape(d / xp.sqrt(v + eps), x.shape)
    return y * _per_channel(xp, weight, x.ndim) + _per_channel(xp, bias, x.ndim)


def _gn_ref(x, weight, bias, num_groups=1, eps=1e-5):
    n, c = x.shape[:2]
    out = np.empty(x.shape)
    per = c // num_groups
    for g in range(num_groups):
        blk = x[:, g * per:(g + 1) * per].astype(np.float64)
        axes = tuple(range(1, x.ndim))
        out[:, g * per:(g + 1) * per] = (blk - blk.mean(axis=axes, keepdims=True)) / np.sqrt(
            blk.var(axis=axes, keepdims=True) + eps)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return out * weight.reshape(shape) + bias.reshape(shape)


def _gn_samples(d, rng):
    from anydevice.ops.samples import _GRAD_DTYPES, Sample, smooth, values

    rows = [((2, 4, 3, 3), 2, values, "(2, 4, 3, 3), 2 groups", False), ((3, 6), 3, values, "(N, C), 3 groups", False),
            ((2, 4, 5), 4, values, "one channel per group", False), ((2, 4, 3), 1, values, "one group", False),
            ((2, 4, 3), 2, smooth, "smooth", True)]
    return [Sample([fn(rng, d, s), fn(rng, d, s[1:2]), fn(rng, d, s[1:2])], {"num_groups": g}, desc, grad=grad)
            for s, g, fn, desc, grad in rows if not grad or d in _GRAD_DTYPES]


define("group_norm", inputs=("x", "weight", "bias"), attrs={"num_groups": Int(1, lo=1), "eps": Real(1e-5, lo=0, open=True)},
       dtype_rule=same("real_floating"), canon=_gn_canon, shape_rule=lambda s, a: s[0], reference=_gn_ref,
       decomposition=_group_norm, category="nn", tolerance=_CONV_TOL, samples=_gn_samples,
       errors=[([np.ones((2, 6, 3), _f), np.ones(6, _f), np.ones(6, _f)], {"num_groups": 4}, ValueError,
                "6 channels in 4 groups"),
               ([np.ones((2, 6, 3), _f), np.ones(3, _f), np.ones(6, _f)], {"num_groups": 3}, ValueError,
                "weight (3,) for 6 channels")],
       doc="normalize each group of channels of x (N, C, ...) over the group and the spatial axes")


# --- embedding ------------------------------------------------------------------------------------
_emb_rule = with_indices("embedding", "indices", "real_floating")


def _emb_canon(shapes, attrs):
    w, idx = shapes
    if len(w) != 2:
        raise ValueError(f"embedding(): weight must be 2-D (num_embeddings, embedding_dim), got shape {tuple(w)}")
    p = attrs["padding_idx"]
    if p is not None:
        if not -w[0] <= p < w[0]:
            raise ValueError(f"embedding(): padding_idx {p} is out of range for {w[0]} embeddings "
                             f"(allowed: {-w[0]}..{w[0] - 1})")
        attrs = {**attrs, "padding_idx": p % w[0]}
    return attrs


def _embedding(xp, weight, indices, padding_idx=None):
    flat = xp.reshape(indices, (-1,))
    return xp.reshape(xp.take(weight, flat, axis=0), tuple(indices.shape) + (weight.shape[1],))


def _emb_ref(weight, indices, padding_idx=None):
    if indices.size and (indices.min() < 0 or indices.max() >= weight.shape[0]):
        raise IndexError(f"embedding(): indices must be in [0, {weight.shape[0]})")
    return weight.astype(np.float64)[indices.astype(np.int64)]


def _emb_vjp(xp, g, i, o, padding_idx=None):
    weight, indices = i
    flat = xp.reshape(indices, (-1,))
    g2 = xp.reshape(g, (-1, weight.shape[1]))
    if padding_idx is not None:  # the padding row gets no gradient
        g2 = g2 * xp.astype(xp.expand_dims(xp.not_equal(flat, padding_idx), axis=1), g2.dtype)
    gw = get_op("take").vjp(xp, g2, (weight, flat), None, axis=0)[0]
    return gw, None


def _emb_check(xp, inputs, attrs):
    weight, indices = inputs
    n = weight.shape[0]
    check_index_range(xp, "embedding", "index", indices, 0, n, f"for {n} embeddings")


def _emb_samples(d, rng):
    from anydevice.ops.samples import _GRAD_DTYPES, Sample, smooth, values

    idx = np.asarray([[0, 2, 4], [4, 1, 0]], np.int64)
    out = [Sample([values(rng, d, (5, 3)), idx], {}, "(2, 3) indices into (5, 3)"),
           Sample([values(rng, d, (5, 2)), np.asarray(3, np.int64)], {}, "0-d index"),
           Sample([values(rng, d, (5, 2)), np.zeros((0,), np.int64)], {}, "no indices"),
           Sample([values(rng, d, (5, 3)), idx], {"padding_idx": 0}, "padding_idx 0")]
    if d in _GRAD_DTYPES:
        # (padding_idx is left out here: its row gets no gradient, which finite differences cannot show)
        out.append(Sample([smooth(rng, d, (5, 3)), idx], {}, "smooth, repeated indices", grad=True))
    return out


define("embedding", inputs=("weight", "indices"), attrs={"padding_idx": Optional(Int())}, dtype_rule=_emb_rule,
       canon=_emb_canon, shape_rule=lambda s, a: tuple(s[1]) + (s[0][1],), reference=_emb_ref, vjp=_emb_vjp,
       decomposition=_embedding, check=_emb_check, category="nn", samples=_emb_samples,
       errors=[([np.ones((5, 2), _f), np.asarray([0, 5], np.int64)], {}, IndexError, "index 5 of 5 embeddings"),
               ([np.ones((5, 2), _f), np.asarray([0.0], _f)], {}, TypeError, "float indices"),
               ([np.ones(5, _f), np.asarray([0], np.int64)], {}, ValueError, "1-D weight"),
               ([np.ones((5, 2), _f), np.asarray([0], np.int64)], {"padding_idx": 5}, ValueError, "padding_idx 5")],
       doc="embedding(weight, indices): rows of weight (num_embeddings, dim) picked by integer indices; the padding_idx row gets no gradient")


# --- activations ----------------------------------------------------------------------------------
def _act_samples(name, extra):
    """The element-wise samples (special values, 0-d, empty, smooth) plus ``extra`` attributes."""
    def gen(d, rng):
        from anydevice.ops.samples import Sample, _elementwise, values

        out = _elementwise(get_op(name), d, rng)
        for attrs in extra:
            out.append(Sample([values(rng, d, (2, 3))], dict(attrs), f"(2, 3), {attrs}"))
            out += [Sample(s.inputs, dict(attrs), f"{s.desc}, {attrs}", grad=True) for s in out if s.grad and not s.attrs]
        return out

    return gen


def _positive(xp, x):
    return xp.greater(x, xp.zeros_like(x))


define("leaky_relu", inputs=("x",), attrs={"negative_slope": Real(0.01)}, dtype_rule=same("real_floating"),
       shape_rule=lambda s, a: s[0], reference=lambda x, negative_slope=0.01: np.where(x > 0, x, x * negative_slope),
       vjp=lambda xp, g, i, o, negative_slope=0.01: (xp.where(_positive(xp, i[0]), g, g * negative_slope),),
       decomposition=lambda xp, x, negative_slope=0.01: xp.where(_positive(xp, x), x, x * negative_slope),
       category="nn", samples=_act_samples("leaky_relu", [{"negative_slope": 0.2}]),
       errors=[([np.ones(3, _f)], {"negative_slope": "0.1"}, TypeError, "a string slope"),
               ([np.ones(3, _f)], {"negative_slope": math.nan}, ValueError, "a NaN slope")],
       doc="x where x > 0, else negative_slope * x")


def _silu_vjp(xp, g, i, o):
    s = xp.sigmoid(i[0])
    return (g * s * (1.0 + i[0] * (1.0 - s)),)


define("silu", inputs=("x",), dtype_rule=same("real_floating"), shape_rule=lambda s, a: s[0],
       reference=lambda x: x * (1.0 / (1.0 + np.exp(-x))), vjp=_silu_vjp,
       decomposition=lambda xp, x: x * xp.sigmoid(x), category="nn", samples=_act_samples("silu", []),
       tolerance={"float32": (1e-5, 1e-6), "float16": (2e-3, 1e-3), "bfloat16": (1e-2, 8e-3)},
       doc="x * sigmoid(x) (swish)")

define("elu", inputs=("x",), attrs={"alpha": Real(1.0)}, dtype_rule=same("real_floating"), shape_rule=lambda s, a: s[0],
       reference=lambda x, alpha=1.0: np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0))),
       vjp=lambda xp, g, i, o, alpha=1.0: (xp.where(_positive(xp, i[0]), g, g * (o + alpha)),),
       decomposition=lambda xp, x, alpha=1.0: xp.where(_positive(xp, x), x, alpha * xp.expm1(xp.minimum(x, xp.zeros_like(x)))),
       category="nn", samples=_act_samples("elu", [{"alpha": 0.5}]),
       errors=[([np.ones(3, _f)], {"alpha": math.inf}, ValueError, "an infinite alpha")],
       tolerance={"float32": (1e-5, 1e-6), "float16": (2e-3, 1e-3), "bfloat16": (1e-2, 8e-3)},
       doc="x where x > 0, else alpha * (exp(x) - 1)")


# --- nll_loss -------------------------------------------------------------------------------------
def _nll_rule(ds, attrs):
    if ds[1].kind not in ("int", "uint"):
        raise TypeError(f"nll_loss(): labels must be an integer tensor, not {ds[1].name}")
    check_category("nll_loss", "real_floating", ds[0])
    d = _promote_same(ds[0], ds[2], "nll_loss", "weight")
    return (d, ds[1], d), d


def _promote_same(a, b, opname, what):
    if a is not b:
        raise TypeError(f"{opname}(): {what} must have the dtype of the input ({a.name}), got {b.name}")
    return a


_nll_rule.category = "real_floating"


def _nll_shape(shapes, attrs):
    lp, labels, w = shapes
    out = _per_label("nll_loss", "log_probs", lp, labels, attrs)
    if tuple(w) != (lp[-1],):
        raise ValueError(f"nll_loss(): weight must have shape ({lp[-1]},) for {lp[-1]} classes, got {tuple(w)}")
    return out


def _nll_loss(xp, lp, labels, weight, ignore_index=-100, reduction="mean"):
    keep = xp.astype(xp.not_equal(labels, ignore_index), lp.dtype)
    onehot = _onehot(xp, labels, lp.shape[-1], lp.dtype)
    wy = xp.sum(onehot * weight, axis=-1) * keep
    loss = -xp.sum(lp * onehot, axis=-1) * wy
    if reduction == "none":
        return loss
    return xp.sum(loss) if reduction == "sum" else xp.sum(loss) / xp.sum(wy)


def _nll_ref(lp, labels, weight, ignore_index=-100, reduction="mean"):
    loss, wsum = np.zeros(labels.shape), 0.0
    for k in np.ndindex(labels.shape):
        y = int(labels[k])
        if y == ignore_index:
            continue
        if not 0 <= y < lp.shape[-1]:
            raise IndexError(f"nll_loss(): label {y} out of range")
        loss[k] = -float(lp[k + (y,)]) * float(weight[y])
        wsum += float(weight[y])
    if reduction == "none":
        return loss
    return np.asarray(loss.sum() if reduction == "sum" else (loss.sum() / wsum if wsum else np.nan))


def _nll_check(xp, inputs, attrs):
    lp, labels, _ = inputs
    n, ig = lp.shape[-1], attrs["ignore_index"]
    if labels.size:
        labels = xp.where(xp.equal(labels, ig), xp.zeros_like(labels), labels)
    check_index_range(xp, "nll_loss", "label", labels, 0, n, f"for {n} classes (ignore_index={ig} is skipped)")


def _nll_samples(d, rng):
    from anydevice.ops.samples import _GRAD_DTYPES, Sample, smooth, values

    lab = np.asarray([0, 3, 1, 4], np.int64)
    w = np.asarray([1.0, 0.5, 2.0, 1.5, 0.25]).astype(d.numpy)
    out = [Sample([values(rng, d, (4, 5)), lab, w], {"reduction": r}, f"(4, 5) weighted, reduction={r!r}")
           for r in ("mean", "sum", "none")]
    out.append(Sample([values(rng, d, (4, 5)), np.asarray([0, -100, 2, -100], np.int64), w], {},
                      "ignore_index -100 skipped"))
    out.append(Sample([values(rng, d, (2, 3, 5)), np.asarray([[0, 1, 2], [1, 1, 4]], np.int64), w],
                      {"ignore_index": 1, "reduction": "none"}, "batched, ignore_index 1 (a class)"))
    if d in _GRAD_DTYPES:
        out.append(Sample([smooth(rng, d, (4, 5)), lab, np.abs(smooth(rng, d, (5,)))], {"ignore_index": 3}, "smooth",
                          grad=True))
    return out


define("nll_loss", inputs=("log_probs", "labels", "weight"),
       attrs={"ignore_index": Int(-100), "reduction": Choice("mean", ("mean", "sum", "none"))},
       dtype_rule=_nll_rule, shape_rule=_nll_shape, reference=_nll_ref, decomposition=_nll_loss, check=_nll_check,
       category="nn", tolerance=_TOL, samples=_nll_samples,
       errors=[([np.zeros((2, 3), _f), np.asarray([0, 3], np.int64), np.ones(3, _f)], {}, IndexError,
                "label 3 of 3 classes"),
               ([np.zeros((2, 3), _f), np.asarray([0, 1], np.int64), np.ones(2, _f)], {}, ValueError,
                "weight (2,) for 3 classes"),
               ([np.zeros((2, 3), _f), np.zeros(2, _f), np.ones(3, _f)], {}, TypeError, "float labels"),
               ([np.zeros((2, 3), _f), np.zeros(3, np.int64), np.ones(3, _f)], {}, ValueError, "labels (3,) for (2, 3)")],
       doc="negative log likelihood of log_probs (..., C) at integer labels (...), weighted per class; "
           "mean divides by the total weight of the labels kept")
