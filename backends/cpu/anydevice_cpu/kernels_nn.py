"""Native kernels of the deep-learning ops, written against an array module ``xp`` (numpy here;
the cuda backend passes CuPy): convolutions as im2col (one strided view of the windows, one
copy) and one BLAS matmul per group, the transposed convolution scattering its columns back
with one strided add per kernel tap, pooling as reductions over the window view."""
from __future__ import annotations

import math


def _pad(xp, x, p, value=0.0):
    """x (N, C, H, W) with p = (top, bottom, left, right) added; a negative amount crops."""
    h, w = x.shape[2:]
    x = x[:, :, max(-p[0], 0):h - max(-p[1], 0), max(-p[2], 0):w - max(-p[3], 0)]
    q = tuple(max(e, 0) for e in p)
    if any(q):
        x = xp.pad(x, ((0, 0), (0, 0), (q[0], q[1]), (q[2], q[3])), constant_values=value)
    return x


def _windows(xp, x, k, stride, dilation, out):
    """(N, C, Ho, Wo, kh, kw) strided view of the (already padded) x: the window of every output."""
    s = x.strides
    return xp.lib.stride_tricks.as_strided(
        x, tuple(x.shape[:2]) + tuple(out) + tuple(k),
        (s[0], s[1], s[2] * stride[0], s[3] * stride[1], s[2] * dilation[0], s[3] * dilation[1]))


def _cols(v):
    """(N, C * kh * kw, Ho * Wo) columns of windows v (a copy), channel-major like the weight."""
    n, c, ho, wo, kh, kw = v.shape
    return v.transpose(0, 1, 4, 5, 2, 3).reshape(n, c * kh * kw, ho * wo)


def _out_len(n, lo, hi, k, s, d):
    return (n + lo + hi - d * (k - 1) - 1) // s + 1


# Stride-1 convolutions image by image on a flat frame: the image (C, Hf, Wf), padded, flattened,
# so that kernel tap (i, j) is a shift of i * d * Wf + j * d along the flat axis. Every output
# position (h, w) with h < Ho, w < Wo reads inside the image; positions past Wo wrap into the next
# row and are thrown away. Each tap is then a contiguous slice: the columns of one image are plain
# copies (small enough to stay in the cache) and the product one matmul per group.
def _shifts(k, d, wf):
    return [i * d[0] * wf + j * d[1] for i in range(k[0]) for j in range(k[1])]


def _fill_cols(cols, flat, shifts, m):
    """cols (C, taps, m) as a (C * taps, m) matrix: row (c, t) is flat[c, shift_t:shift_t + m]."""
    for t, s in enumerate(shifts):
        cols[:, t] = flat[:, s:s + m]
    return cols.reshape(-1, m)


class _Frame:
    """A zeroed (C, Hf * Wf + tail) buffer and its (C, Hf, Wf) image view."""

    def __init__(self, xp, c, shape, dtype, tail=0):
        self.flat = xp.zeros((c, shape[0] * shape[1] + tail), dtype=dtype)
        self.img = self.flat[:, :shape[0] * shape[1]].reshape(c, shape[0], shape[1])
        self.size = shape[0] * shape[1]


def table(xp) -> dict:
    """op name -> (kernel, "half"): every kernel computes float16/bfloat16 in float32."""

    def conv2d(x, w, stride, padding, dilation, groups):
        n, o, (cg, kh, kw) = x.shape[0], w.shape[0], w.shape[1:]
        ho = _out_len(x.shape[2], padding[0], padding[1], kh, stride[0], dilation[0])
        wo = _out_len(x.shape[3], padding[2], padding[3], kw, stride[1], dilation[1])
        if stride == (1, 1) and min(padding) >= 0:
            hf, wf = x.shape[2] + padding[0] + padding[1], x.shape[3] + padding[2] + padding[3]
            shifts, og, h, wd = _shifts((kh, kw), dilation, wf), o // groups, x.shape[2], x.shape[3]
            fr = _Frame(xp, x.shape[1], (hf, wf), x.dtype, tail=shifts[-1])
            cols = xp.empty((cg, len(shifts), fr.size), dtype=x.dtype)
            out = xp.empty((n, o, ho, wo), dtype=x.dtype)
            for i in range(n):
                fr.img[:, padding[0]:padding[0] + h, padding[2]:padding[2] + wd] = x[i]
                for g in range(groups):
                    y = xp.matmul(w[g * og:(g + 1) * og].reshape(og, -1),
                                  _fill_cols(cols, fr.flat[g * cg:(g + 1) * cg], shifts, fr.size))
                    out[i, g * og:(g + 1) * og] = y.reshape(og, hf, wf)[:, :ho, :wo]
            return out
        v = _windows(xp, _pad(xp, x, padding), (kh, kw), stride, dilation, (ho, wo))
        og = o // groups
        out = xp.empty((n, o, ho * wo), dtype=x.dtype)
        for g in range(groups):
            out[:, g * og:(g + 1) * og] = xp.matmul(w[g * og:(g + 1) * og].reshape(og, -1),
                                                    _cols(v[:, g * cg:(g + 1) * cg]))
        return out.reshape(n, o, ho, wo)

    def conv2d_weight_grad(x, grad, kernel_size, stride, padding, dilation, groups):
        n, o, ho, wo = grad.shape
        cg, og = x.shape[1] // groups, o // groups
        if stride == (1, 1):
            hf, wf = x.shape[2] + padding[0] + padding[1], x.shape[3] + padding[2] + padding[3]
            shifts, h, wd = _shifts(kernel_size, dilation, wf), x.shape[2], x.shape[3]
            fr = _Frame(xp, x.shape[1], (hf, wf), x.dtype, tail=shifts[-1])
            gr = _Frame(xp, o, (hf, wf), x.dtype)  # zeros where the frame's positions are not outputs
            cols = xp.empty((cg, len(shifts), fr.size), dtype=x.dtype)
            out = xp.zeros((o, cg * len(shifts)), dtype=x.dtype)
            for i in range(n):
                fr.img[:, padding[0]:padding[0] + h, padding[2]:padding[2] + wd] = x[i]
                gr.img[:, :ho, :wo] = grad[i]
                for g in range(groups):
                    out[g * og:(g + 1) * og] += xp.matmul(
                        gr.flat[g * og:(g + 1) * og], _fill_cols(cols, fr.flat[g * cg:(g + 1) * cg], shifts, fr.size).T)
            return out.reshape((o, cg) + tuple(kernel_size))
        v = _windows(xp, _pad(xp, x, padding), kernel_size, stride, dilation, (ho, wo))
        g2 = grad.reshape(n, o, ho * wo)
        out = xp.empty((o, cg * kernel_size[0] * kernel_size[1]), dtype=x.dtype)
        for g in range(groups):
            out[g * og:(g + 1) * og] = xp.tensordot(g2[:, g * og:(g + 1) * og], _cols(v[:, g * cg:(g + 1) * cg]),
                                                    axes=([0, 2], [0, 2]))
        return out.reshape((o, cg) + tuple(kernel_size))

    def conv_transpose2d(x, w, stride, padding, output_padding, dilation, groups):
        (n, cin, h, wd), (_, og, kh, kw) = x.shape, w.shape
        (sh, sw), (dh, dw), p = stride, dilation, padding
        ho = (h - 1) * sh - p[0] - p[1] + dh * (kh - 1) + output_padding[0] + 1
        wo = (wd - 1) * sw - p[2] - p[3] + dw * (kw - 1) + output_padding[1] + 1
        hf, wf = max((h - 1) * sh + dh * (kh - 1) + 1, p[0] + ho), max((wd - 1) * sw + dw * (kw - 1) + 1, p[2] + wo)
        cg = cin // groups
        if stride == (1, 1):  # per image: the columns of every tap, scattered back by contiguous adds
            shifts = _shifts((kh, kw), dilation, wf)
            src = _Frame(xp, cin, (hf, wf), x.dtype)
            dst = _Frame(xp, og * groups, (hf, wf), x.dtype, tail=shifts[-1])
            out = xp.empty((n, og * groups, ho, wo), dtype=x.dtype)
            for i in range(n):
                src.img[:, :h, :wd] = x[i]
                dst.flat[...] = 0
                for g in range(groups):
                    wt, acc = w[g * cg:(g + 1) * cg].reshape(cg, -1).T, dst.flat[g * og:(g + 1) * og]
                    cols = xp.matmul(wt, src.flat[g * cg:(g + 1) * cg]).reshape(og, len(shifts), src.size)
                    for t, s in enumerate(shifts):
                        acc[:, s:s + src.size] += cols[:, t]
                out[i] = dst.img[:, p[0]:p[0] + ho, p[2]:p[2] + wo]
            return out
        full = xp.zeros((n, og * groups, hf, wf), dtype=x.dtype)
        x2 = x.reshape(n, cin, h * wd)
        for g in range(groups):
            cols = xp.matmul(w[g * cg:(g + 1) * cg].reshape(cg, og * kh * kw).T, x2[:, g * cg:(g + 1) * cg])
            cols = cols.reshape(n, og, kh, kw, h, wd)
            dst = full[:, g * og:(g + 1) * og]
            for i in range(kh):
                for j in range(kw):
                    dst[:, :, i * dh:i * dh + sh * (h - 1) + 1:sh, j * dw:j * dw + sw * (wd - 1) + 1:sw] += cols[:, :, i, j]
        return xp.ascontiguousarray(full[:, :, p[0]:p[0] + ho, p[2]:p[2] + wo])

    def _pool_view(x, kernel_size, stride, padding, dilation, ceil_mode, value):
        out = []
        for i in range(2):
            n, k, s, p, d = x.shape[2 + i], kernel_size[i], stride[i], padding[i], dilation[i]
            num = n + 2 * p - d * (k - 1) - 1
            m = (-(-num // s) if ceil_mode else num // s) + 1
            out.append(m - 1 if ceil_mode and (m - 1) * s >= n + p else m)
        need = [(out[i] - 1) * stride[i] + dilation[i] * (kernel_size[i] - 1) + 1 for i in range(2)]
        pads = (padding[0], need[0] - x.shape[2] - padding[0], padding[1], need[1] - x.shape[3] - padding[1])
        return _windows(xp, _pad(xp, x, pads, value), kernel_size, stride, dilation, out), pads

    def max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode):
        return _pool_view(x, kernel_size, stride, padding, dilation, ceil_mode, -math.inf)[0].max(axis=(4, 5))

    def avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad, dilation=(1, 1)):
        v, pads = _pool_view(x, kernel_size, stride, padding, dilation, ceil_mode, 0.0)
        ones = xp.ones((1, 1) + tuple(x.shape[2:]), dtype=x.dtype)
        if count_include_pad:  # the padding counts, the ceil-mode overhang after it does not
            ones = xp.pad(ones, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2), constant_values=1.0)
            ones = _pad(xp, ones, (0, pads[1] - padding[0], 0, pads[3] - padding[1]))
        else:
            ones = _pad(xp, ones, pads)
        count = _windows(xp, ones, kernel_size, stride, dilation, v.shape[2:4]).sum(axis=(4, 5))
        return v.sum(axis=(4, 5)) / count

    def adaptive_avg_pool2d(x, output_size):
        for axis, m in ((2, output_size[0]), (3, output_size[1])):
            n = x.shape[axis]
            if m == n:
                continue
            key = (slice(None),) * axis
            x = xp.concatenate([x[key + (slice(i * n // m, -(-(i + 1) * n // m)),)].mean(axis=axis, keepdims=True)
                                for i in range(m)], axis=axis)
        return xp.ascontiguousarray(x)

    def _channel(v, ndim):
        return v.reshape((1, -1) + (1,) * (ndim - 2))

    def batch_norm(x, mean, var, weight, bias, eps):
        scale = weight / xp.sqrt(var + xp.asarray(eps, x.dtype))
        return (x - _channel(mean, x.ndim)) * _channel(scale, x.ndim) + _channel(bias, x.ndim)

    def group_norm(x, weight, bias, num_groups, eps):
        y = x.reshape(x.shape[0], num_groups, -1)
        d = y - y.mean(axis=2, keepdims=True)
        y = (d / xp.sqrt((d * d).mean(axis=2, keepdims=True) + xp.asarray(eps, x.dtype))).reshape(x.shape)
        return y * _channel(weight, x.ndim) + _channel(bias, x.ndim)

    def embedding(weight, indices, padding_idx=None):
        return xp.take(weight, indices.reshape(-1), axis=0).reshape(tuple(indices.shape) + (weight.shape[1],))

    def nll_loss(lp, labels, weight, ignore_index, reduction):
        keep = labels != ignore_index
        safe = xp.where(keep, labels, 0).astype(xp.int64)
        wy = xp.take(weight, safe) * keep.astype(lp.dtype)
        loss = -xp.take_along_axis(lp, safe[..., None], axis=-1)[..., 0] * wy
        if reduction == "none":
            return loss
        total = loss.sum()
        return xp.asarray(total if reduction == "sum" else total / wy.sum(), dtype=lp.dtype)

    return {
        "conv2d": (conv2d, "half"), "conv2d_weight_grad": (conv2d_weight_grad, "half"),
        "conv_transpose2d": (conv_transpose2d, "half"), "max_pool2d": (max_pool2d, "half"),
        "avg_pool2d": (avg_pool2d, "half"), "adaptive_avg_pool2d": (adaptive_avg_pool2d, "half"),
        "batch_norm": (batch_norm, "half"), "group_norm": (group_norm, "half"), "embedding": (embedding, "half"),
        "leaky_relu": (lambda x, negative_slope: xp.where(x > 0, x, x * negative_slope), "half"),
        "silu": (lambda x: x * (1 / (1 + xp.exp(-x))), "half"),
        "elu": (lambda x, alpha: xp.where(x > 0, x, alpha * xp.expm1(xp.minimum(x, 0))), "half"),
        "nll_loss": (nll_loss, "half"),
    }


def register(kernels, wrap) -> None:
    """Register the numpy kernels with the cpu backend's wrappers ``wrap`` (name -> wrapper)."""
    import numpy as np

    for name, (fn, how) in table(np).items():
        kernels.register(name, wrap[how](fn))
