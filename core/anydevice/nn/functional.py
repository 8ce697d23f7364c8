"""``anydevice.nn.functional``: the deep-learning functions under torch.nn.functional's names,
argument orders and layouts (channels at axis 1, classes at axis 1 of a loss's input).

Each function is a thin wrapper over the registry ops (``conv2d``, ``max_pool2d``, ``nll_loss``,
...) and the array functions, so it runs, and differentiates, on every device. The wrappers
add what torch's signatures have beyond the ops: unbatched inputs, optional biases and
weights, 1-D convolutions, the loss reductions, running statistics of batch norm.
"""
from __future__ import annotations

import math

from anydevice import api as _api
from anydevice import random as _random
from anydevice.engine.graph import no_grad
from anydevice.engine.tensor import Tensor

__all__ = [
    "relu", "gelu", "sigmoid", "tanh", "silu", "leaky_relu", "elu", "softmax", "log_softmax", "linear",
    "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d",
    "adaptive_avg_pool2d",
    "batch_norm", "group_norm", "layer_norm", "embedding", "dropout", "scaled_dot_product_attention",
    "cross_entropy", "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", "mse_loss", "l1_loss",
    "smooth_l1_loss", "huber_loss", "kl_div",
]


# --- activations -----------------------------------------------------------------------------------
def relu(input: Tensor) -> Tensor:
    return _api.relu(input)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    return _api.gelu(input, approximate=approximate)


def sigmoid(input: Tensor) -> Tensor:
    return _api.sigmoid(input)


def tanh(input: Tensor) -> Tensor:
    return _api.tanh(input)


def silu(input: Tensor) -> Tensor:
    return _api.silu(input)


def leaky_relu(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    return _api.leaky_relu(input, negative_slope=negative_slope)


def elu(input: Tensor, alpha: float = 1.0) -> Tensor:
    return _api.elu(input, alpha=alpha)


def softmax(input: Tensor, dim: int = -1) -> Tensor:
    return _api.softmax(input, axis=dim)


def log_softmax(input: Tensor, dim: int = -1) -> Tensor:
    return _api.log_softmax(input, axis=dim)


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``input @ weight.T + bias``, weight (out_features, in_features). With a bias of shape
    (out_features,) or () and one real floating dtype throughout, the registry's ``linear`` op
    (as ``nn.Linear``: one op, its own gradient, the backends' fused kernels); any other bias
    broadcasts as an add."""
    if (bias is not None and isinstance(input, Tensor) and isinstance(weight, Tensor) and isinstance(bias, Tensor)
            and input.ndim >= 1 and weight.ndim == 2 and tuple(bias.shape) in ((weight.shape[0],), ())
            and input.dtype == weight.dtype == bias.dtype and input.dtype.kind == "float"):
        return _api.linear(input, weight, bias)
    y = _api.matmul(input, _api.matrix_transpose(weight))
    return y if bias is None else y + bias


# --- shapes ----------------------------------------------------------------------------------------
def _tensor(name: str, what: str, v) -> Tensor:
    if not isinstance(v, Tensor):
        raise TypeError(f"{name}(): {what} must be a Tensor, not {type(v).__name__}")
    return v


def _batched(name: str, x, ndim: int, layout: str):
    """(x with a batch axis, whether one was added); ValueError unless x has ndim - 1 or ndim axes."""
    x = _tensor(name, "input", x)
    if x.ndim not in (ndim - 1, ndim):
        unbatched = "(" + layout[4:] if layout.startswith("(N, ") else layout
        raise ValueError(f"{name}(): input must be {ndim - 1}-D {unbatched} or {ndim}-D {layout}, got shape "
                         f"{tuple(x.shape)}")
    return (x, False) if x.ndim == ndim else (_api.expand_dims(x, axis=0), True)


def _unbatch(y, added: bool):
    return _api.squeeze(y, axis=0) if added else y


def _add_bias(name: str, y, bias, ndim: int):
    if bias is None:
        return y
    bias = _tensor(name, "bias", bias)
    if tuple(bias.shape) != (y.shape[1],):
        raise ValueError(f"{name}(): bias must have shape ({y.shape[1]},) (one value per output channel), got "
                         f"{tuple(bias.shape)}")
    return y + _api.reshape(bias, (1, -1) + (1,) * (ndim - 2))


def _pair(v, fill):
    """An int becomes (fill, v) for the 1-D forms (a height of one); tuples of one int likewise."""
    if isinstance(v, str):
        return v
    if isinstance(v, (tuple, list)) and len(v) == 1:
        v = v[0]
    return (fill, v) if isinstance(v, int) and not isinstance(v, bool) else v


# --- convolution -----------------------------------------------------------------------------------
def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """2-D cross-correlation: input (N, C, H, W) or (C, H, W), weight (out, C / groups, kh, kw).
    ``padding``: an int, (ph, pw), (top, bottom, left, right), ``"same"`` or ``"valid"``."""
    x, added = _batched("conv2d", input, 4, "(N, C, H, W)")
    y = _api.conv2d(x, _tensor("conv2d", "weight", weight), stride=stride, padding=padding, dilation=dilation,
                    groups=groups)
    return _unbatch(_add_bias("conv2d", y, bias, 4), added)


def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """1-D cross-correlation: input (N, C, L) or (C, L), weight (out, C / groups, k); a conv2d of height one."""
    x, added = _batched("conv1d", input, 3, "(N, C, L)")
    weight = _tensor("conv1d", "weight", weight)
    if weight.ndim != 3:
        raise ValueError(f"conv1d(): weight must be 3-D (out_channels, in_channels / groups, k), got shape "
                         f"{tuple(weight.shape)}")
    if isinstance(padding, (tuple, list)) and len(padding) == 2:  # (left, right)
        padding = (0, 0) + tuple(padding)
    y = _api.conv2d(_api.expand_dims(x, axis=2), _api.expand_dims(weight, axis=2), stride=_pair(stride, 1),
                    padding=_pair(padding, 0), dilation=_pair(dilation, 1), groups=groups)
    return _unbatch(_add_bias("conv1d", _api.squeeze(y, axis=2), bias, 3), added)


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
                     output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """Transposed 2-D convolution (the gradient of conv2d with respect to its input): input
    (N, C, H, W) or (C, H, W), weight (C, out / groups, kh, kw)."""
    x, added = _batched("conv_transpose2d", input, 4, "(N, C, H, W)")
    y = _api.conv_transpose2d(x, _tensor("conv_transpose2d", "weight", weight), stride=stride, padding=padding,
                              output_padding=output_padding, dilation=dilation, groups=groups)
    return _unbatch(_add_bias("conv_transpose2d", y, bias, 4), added)


def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
                     output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """Transposed 1-D convolution: input (N, C, L) or (C, L), weight (C, out / groups, k)."""
    x, added = _batched("conv_transpose1d", input, 3, "(N, C, L)")
    weight = _tensor("conv_transpose1d", "weight", weight)
    if weight.ndim != 3:
        raise ValueError(f"conv_transpose1d(): weight must be 3-D (in_channels, out_channels / groups, k), got shape "
                         f"{tuple(weight.shape)}")
    y = _api.conv_transpose2d(_api.expand_dims(x, axis=2), _api.expand_dims(weight, axis=2), stride=_pair(stride, 1),
                              padding=_pair(padding, 0), output_padding=_pair(output_padding, 0),
                              dilation=_pair(dilation, 1), groups=groups)
    return _unbatch(_add_bias("conv_transpose1d", _api.squeeze(y, axis=2), bias, 3), added)


# --- pooling ---------------------------------------------------------------------------------------
def _pool(name, input, kernel_size, stride, **attrs):
    """The pooling op ``name`` of input (N, C, H, W) or (C, H, W); stride None (or empty): the kernel size."""
    x, added = _batched(name, input, 4, "(N, C, H, W)")
    stride = None if stride in (None, [], ()) else stride
    return _unbatch(getattr(_api, name)(x, kernel_size=kernel_size, stride=stride, **attrs), added)


def max_pool2d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor:
    if return_indices is not False:
        raise ValueError("max_pool2d(): return_indices=True is not supported; allowed: False")
    return _pool("max_pool2d", input, kernel_size, stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)


def avg_pool2d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override=None) -> Tensor:
    if divisor_override is not None:
        raise ValueError("avg_pool2d(): divisor_override is not supported; allowed: None")
    return _pool("avg_pool2d", input, kernel_size, stride, padding=padding, ceil_mode=ceil_mode,
                 count_include_pad=count_include_pad)


def _pool1d(name, input, kernel_size, stride, padding, **attrs):
    """A 1-D pooling of input (N, C, L) or (C, L) as the 2-D one over a height of one."""
    x, added = _batched(name, input, 3, "(N, C, L)")
    y = _pool(name.replace("1d", "2d"), _api.expand_dims(x, axis=2), _pair(kernel_size, 1),
              None if stride in (None, [], ()) else _pair(stride, 1), padding=_pair(padding, 0), **attrs)
    return _unbatch(_api.squeeze(y, axis=2), added)


def max_pool1d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False) -> Tensor:
    return _pool1d("max_pool1d", input, kernel_size, stride, padding, dilation=_pair(dilation, 1), ceil_mode=ceil_mode)


def avg_pool1d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    return _pool1d("avg_pool1d", input, kernel_size, stride, padding, ceil_mode=ceil_mode,
                   count_include_pad=count_include_pad)


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """Mean over torch's adaptive bins; ``output_size`` an int or (oh, ow), None keeping that size."""
    x, added = _batched("adaptive_avg_pool2d", input, 4, "(N, C, H, W)")
    if isinstance(output_size, (tuple, list)) and len(output_size) == 2:
        output_size = tuple(x.shape[2 + i] if s is None else s for i, s in enumerate(output_size))
    return _unbatch(_api.adaptive_avg_pool2d(x, output_size=output_size), added)


# --- normalization ---------------------------------------------------------------------------------
def _affine_defaults(x, weight, bias, c):
    if weight is None:
        weight = _api.full((c,), 1.0, dtype=x.dtype, device=x.device)
    if bias is None:
        bias = _api.full((c,), 0.0, dtype=x.dtype, device=x.device)
    return weight, bias


def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None, weight: Tensor | None = None,
               bias: Tensor | None = None, training: bool = False, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Batch normalization over every axis but 1 (channels) of input (N, C, ...).

    ``training``: normalize with the batch's mean and (biased) variance and, when running
    statistics are given, update them in place as torch does:
    ``running = (1 - momentum) * running + momentum * batch`` (the unbiased variance for
    ``running_var``); the update is computed on the tensors' device and never recorded for
    autograd. Otherwise normalize with ``running_mean`` and ``running_var``."""
    x = _tensor("batch_norm", "input", input)
    if x.ndim < 2:
        raise ValueError(f"batch_norm(): input must have at least 2 dimensions (N, C, ...), got shape {tuple(x.shape)}")
    if not isinstance(training, bool):
        raise TypeError(f"batch_norm(): training must be a bool, not {type(training).__name__}")
    c = x.shape[1]
    weight, bias = _affine_defaults(x, weight, bias, c)
    if not training:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm(): running_mean and running_var are required when training=False")
        return _api.batch_norm(x, running_mean, running_var, weight, bias, eps=eps)
    axes = (0,) + tuple(range(2, x.ndim))
    n = x.size // max(c, 1)
    if n <= 1:
        raise ValueError(f"batch_norm(): training needs more than one value per channel, got input shape "
                         f"{tuple(x.shape)}")
    mean = _api.mean(x, axis=axes)
    var = _api.var(x, axis=axes)
    if running_mean is not None or running_var is not None:
        if not isinstance(momentum, (int, float)) or isinstance(momentum, bool) or not 0.0 <= momentum <= 1.0:
            raise ValueError(f"batch_norm(): momentum must be a number in [0, 1], not {momentum!r}")
        with no_grad():
            if running_mean is not None:
                running_mean[...] = running_mean * (1.0 - momentum) + _api.astype(mean.detach(), running_mean.dtype) * momentum
            if running_var is not None:
                unbiased = _api.astype(var.detach(), running_var.dtype) * (n / (n - 1))
                running_var[...] = running_var * (1.0 - momentum) + unbiased * momentum
    return _api.batch_norm(x, mean, var, weight, bias, eps=eps)


def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    x = _tensor("group_norm", "input", input)
    if x.ndim < 2:
        raise ValueError(f"group_norm(): input must have at least 2 dimensions (N, C, ...), got shape {tuple(x.shape)}")
    weight, bias = _affine_defaults(x, weight, bias, x.shape[1])
    return _api.group_norm(x, weight, bias, num_groups=num_groups, eps=eps)


def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    x = _tensor("layer_norm", "input", input)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not shape or tuple(x.shape[x.ndim - len(shape):]) != shape:
        raise ValueError(f"layer_norm(): normalized_shape {shape} must equal the trailing dimensions of the input "
                         f"{tuple(x.shape)}")
    if weight is None:
        weight = _api.full(shape, 1.0, dtype=x.dtype, device=x.device)
    if bias is None:
        bias = _api.full(shape, 0.0, dtype=x.dtype, device=x.device)
    return _api.layer_norm(x, weight, bias, eps=eps)


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """Rows of weight (num_embeddings, dim) at the integer indices ``input``; the ``padding_idx``
    row gets no gradient."""
    return _api.embedding(_tensor("embedding", "weight", weight), _tensor("embedding", "input", input),
                          padding_idx=padding_idx)


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """:func:`anydevice.random.dropout` (the device's default generator)."""
    if inplace is not False:
        raise ValueError("dropout(): inplace=True is not supported (tensors are values); allowed: False")
    return _random.dropout(input, p, training)


# --- attention -------------------------------------------------------------------------------------
def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None) -> Tensor:
    """``softmax(q @ k.T * scale + mask) @ v`` over q (..., L, E), k (..., S, E), v (..., S, Ev).

    ``attn_mask``: bool (True = attend) or float (added), broadcast to (..., L, S); ``is_causal``:
    position i attends to positions j <= i; ``scale`` defaults to 1 / sqrt(E). A row that may
    attend nowhere is NaN, as in torch."""
    name = "scaled_dot_product_attention"
    q, k, v = (_tensor(name, w, t) for w, t in (("query", query), ("key", key), ("value", value)))
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise ValueError(f"{name}(): query, key and value need at least 2 dimensions (..., L, E), got shapes "
                         f"{tuple(q.shape)}, {tuple(k.shape)} and {tuple(v.shape)}")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"{name}(): query (..., L, E) {tuple(q.shape)}, key (..., S, E) {tuple(k.shape)} and value "
                         f"(..., S, Ev) {tuple(v.shape)} do not fit")
    if is_causal and attn_mask is not None:
        raise ValueError(f"{name}(): pass either attn_mask or is_causal=True, not both")
    s = _api.matmul(q, _api.matrix_transpose(k)) * (1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if is_causal:
        rows = _api.reshape(_api.arange(q.shape[-2], device=q.device), (-1, 1))
        attn_mask = _api.less_equal(_api.reshape(_api.arange(k.shape[-2], device=q.device), (1, -1)), rows)
    if attn_mask is not None:
        attn_mask = _tensor(name, "attn_mask", attn_mask)
        if attn_mask.dtype.kind == "bool":
            s = _api.where(attn_mask, s, -math.inf)
        else:
            s = s + attn_mask
    p = _api.softmax(s, axis=-1)
    if dropout_p:
        p = _random.dropout(p, dropout_p)
    return _api.matmul(p, v)


# --- losses ----------------------------------------------------------------------------------------
_REDUCTIONS = ("mean", "sum", "none")


def _reduction(name: str, reduction, allowed=_REDUCTIONS) -> str:
    if reduction not in allowed:
        raise ValueError(f"{name}(): reduction must be {', '.join(map(repr, allowed))}, not {reduction!r}")
    return reduction


def _reduce(loss, reduction: str):
    if reduction == "none":
        return loss
    return _api.sum(loss) if reduction == "sum" else _api.mean(loss)


def _same_shape(name: str, input, target):
    input, target = _tensor(name, "input", input), _tensor(name, "target", target)
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(f"{name}(): input has shape {tuple(input.shape)} and target {tuple(target.shape)}; they must "
                         f"match")
    return input, target


def _classes_last(name: str, x):
    """Move the class axis 1 of (N, C, d1, ...) last; a 1-D input is one sample of C classes."""
    x = _tensor(name, "input", x)
    if x.ndim == 0:
        raise ValueError(f"{name}(): input must be (C,), (N, C) or (N, C, d1, ...), got a 0-d tensor")
    return x if x.ndim <= 2 else _api.permute_dims(x, (0,) + tuple(range(2, x.ndim)) + (1,))


def _class_weight(name: str, x, weight):
    c = x.shape[-1]
    if weight is None:
        return _api.full((c,), 1.0, dtype=x.dtype, device=x.device)
    weight = _tensor(name, "weight", weight)
    if tuple(weight.shape) != (c,):
        raise ValueError(f"{name}(): weight must have shape ({c},) (one value per class), got {tuple(weight.shape)}")
    return weight


def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """Negative log likelihood of log-probabilities input (N, C, ...) at integer target (N, ...);
    'mean' divides by the total weight of the targets not ignored."""
    _reduction("nll_loss", reduction)
    lp = _classes_last("nll_loss", input)
    return _api.nll_loss(lp, _tensor("nll_loss", "target", target), _class_weight("nll_loss", lp, weight),
                         ignore_index=ignore_index, reduction=reduction)


def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Softmax cross entropy of logits input (N, C, ...) against class indices (N, ...) or class
    probabilities (the input's shape), with torch's weight, ignore_index and label_smoothing."""
    _reduction("cross_entropy", reduction)
    if not isinstance(label_smoothing, (int, float)) or isinstance(label_smoothing, bool) or \
            not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy(): label_smoothing must be a number in [0, 1], not {label_smoothing!r}")
    logits = _classes_last("cross_entropy", input)
    target = _tensor("cross_entropy", "target", target)
    if weight is None and not label_smoothing and _fused_ce(logits, target, ignore_index):
        try:  # one op: log_softmax and nll forward, softmax - onehot backward
            return _api.cross_entropy(logits, target, reduction=reduction)
        except IndexError:  # a label equal to ignore_index, or out of range: nll_loss skips or names it
            pass
    lp = _api.log_softmax(logits, axis=-1)
    w = _class_weight("cross_entropy", lp, weight)
    c, eps = lp.shape[-1], float(label_smoothing)
    if target.dtype.kind == "float":  # class probabilities
        if tuple(target.shape) != tuple(input.shape):
            raise ValueError(f"cross_entropy(): class probabilities must have the input's shape {tuple(input.shape)}, "
                             f"got {tuple(target.shape)}")
        t = _classes_last("cross_entropy", target)
        if eps:
            t = t * (1.0 - eps) + eps / c
        return _reduce(-_api.sum(lp * t * w, axis=-1), reduction)
    nll = _api.nll_loss(lp, target, w, ignore_index=ignore_index, reduction=reduction)
    if not eps:
        return nll
    keep = _api.astype(_api.not_equal(target, ignore_index), lp.dtype)
    smooth = -_api.sum(lp * w, axis=-1) * keep
    if reduction == "none":
        smooth_r = smooth
    elif reduction == "sum":
        smooth_r = _api.sum(smooth)
    else:  # the same denominator as the nll term: the weight of the targets kept
        safe = _api.where(_api.equal(target, ignore_index), _api.zeros_like(target), target)
        smooth_r = _api.sum(smooth) / _api.sum(_api.take(w, _api.reshape(safe, (-1,)), axis=0) * _api.reshape(keep, (-1,)))
    return nll * (1.0 - eps) + smooth_r * (eps / c)


def _fused_ce(logits, target, ignore_index) -> bool:
    """Whether the cross_entropy op computes what log_softmax and nll_loss would: class indices of
    the logits' leading shape, at least one, and an ignore_index no label in range can equal."""
    c = logits.shape[-1]
    return (logits.dtype.kind == "float" and target.dtype.kind in ("int", "uint")
            and tuple(target.shape) == tuple(logits.shape[:-1]) and isinstance(ignore_index, int)
            and not 0 <= ignore_index < c and target.size > 0)  # an empty batch: nll_loss's quiet NaN


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                         reduction: str = "mean") -> Tensor:
    """``-(t log p + (1 - t) log(1 - p))`` of probabilities p in [0, 1] (the logs clamped at -100, as torch)."""
    _reduction("binary_cross_entropy", reduction)
    p, t = _same_shape("binary_cross_entropy", input, target)
    if p.size:
        lo, hi = float(_api.min(p)), float(_api.max(p))
        if not (0.0 <= lo and hi <= 1.0):
            raise ValueError(f"binary_cross_entropy(): input must hold probabilities in [0, 1], got values in "
                             f"[{lo}, {hi}]")
    loss = -(t * _api.maximum(_api.log(p), -100.0) + (1.0 - t) * _api.maximum(_api.log1p(-p), -100.0))
    return _reduce(loss if weight is None else loss * weight, reduction)


def _softplus(x):
    """log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|)."""
    return _api.maximum(x, 0.0) + _api.log1p(_api.exp(-_api.abs(x)))


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                     reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """binary_cross_entropy(sigmoid(input), target) computed stably from the logits; ``pos_weight``
    scales the positive term (per class, broadcast along the last axis)."""
    _reduction("binary_cross_entropy_with_logits", reduction)
    x, t = _same_shape("binary_cross_entropy_with_logits", input, target)
    pos = t * _softplus(-x)
    if pos_weight is not None:
        pos = pos * pos_weight
    loss = pos + (1.0 - t) * _softplus(x)
    return _reduce(loss if weight is None else loss * weight, reduction)


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    _reduction("mse_loss", reduction)
    x, t = _same_shape("mse_loss", input, target)
    d = x - t
    return _reduce(d * d, reduction)


def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    _reduction("l1_loss", reduction)
    x, t = _same_shape("l1_loss", input, target)
    return _reduce(_api.abs(x - t), reduction)


def _quadratic_then_linear(name, input, target, reduction, k, scale):
    """0.5 d^2 for |d| < k, else k (|d| - k / 2); everything times ``scale`` (1 / beta for smooth L1)."""
    _reduction(name, reduction)
    if not isinstance(k, (int, float)) or isinstance(k, bool) or not k >= 0:
        raise ValueError(f"{name}(): {'beta' if name == 'smooth_l1_loss' else 'delta'} must be a number >= 0, "
                         f"not {k!r}")
    x, t = _same_shape(name, input, target)
    a = _api.abs(x - t)
    if k == 0:
        return _reduce(a, reduction)
    loss = _api.where(_api.less(a, k), (a * a) * 0.5, (a - 0.5 * k) * k)
    return _reduce(loss * scale if scale != 1 else loss, reduction)


def smooth_l1_loss(input: Tensor, target: Tensor, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """0.5 d^2 / beta for |d| < beta, else |d| - beta / 2 (beta = 0: the L1 loss)."""
    return _quadratic_then_linear("smooth_l1_loss", input, target, reduction, beta, 1.0 / beta if beta else 1.0)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0) -> Tensor:
    """0.5 d^2 for |d| <= delta, else delta (|d| - delta / 2)."""
    return _quadratic_then_linear("huber_loss", input, target, reduction, delta, 1.0)


def kl_div(input: Tensor, target: Tensor, reduction: str = "mean", log_target: bool = False) -> Tensor:
    """``target * (log(target) - input)`` of log-probabilities input (0 where target is 0);
    ``log_target``: target holds log-probabilities. 'batchmean' divides the sum by the batch size."""
    _reduction("kl_div", reduction, _REDUCTIONS + ("batchmean",))
    x, t = _same_shape("kl_div", input, target)
    if log_target:
        loss = _api.exp(t) * (t - x)
    else:
        pos = _api.greater(t, 0.0)
        safe = _api.where(pos, t, 1.0)
        loss = _api.where(pos, t * (_api.log(safe) - x), _api.zeros_like(t) * x)
    if reduction == "batchmean":
        return _api.sum(loss) / float(x.shape[0] if x.ndim else 1)
    return _reduce(loss, reduction)
