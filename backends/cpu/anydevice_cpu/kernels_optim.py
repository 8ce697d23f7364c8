"""Fused numpy kernels of the optimizer updates (``adam_update``, ``sgd_update``,
``rmsprop_update``, ``adagrad_update``; :mod:`anydevice.ops.optim`).

Each writes its results straight into the ``out`` buffers the core allocated, using them as
scratch space on the way, so a step of Adam costs one temporary instead of a dozen. The step
count is read from its 0-d buffer (host memory) and the bias corrections are computed from it in
float64. The order of the roundings is that of the element-wise formulation, so a step gives the
same bits as the unfused ops did.
"""
from __future__ import annotations

import math

import numpy as np


def _keep(out, x):
    """An unused state goes back unchanged."""
    np.copyto(out, x)


def adam_update(ctx, out, p, g, m, v, vmax, step, *, lr, beta1, beta2, eps, weight_decay, decoupled, amsgrad):
    po, mo, vo, vmo, so = out
    t = float(step) + 1.0
    so[...] = t
    if weight_decay and decoupled:
        p = np.multiply(p, 1.0 - lr * weight_decay)
    elif weight_decay:
        g = g + weight_decay * p
    np.multiply(g, 1.0 - beta1, out=po)            # po: scratch
    np.multiply(m, beta1, out=mo)
    np.add(mo, po, out=mo)
    np.multiply(g, g, out=vo)
    np.multiply(vo, 1.0 - beta2, out=vo)
    np.multiply(v, beta2, out=po)
    np.add(po, vo, out=vo)
    if amsgrad:
        np.maximum(vmax, vo, out=vmo)
    else:
        _keep(vmo, vmax)
    np.sqrt(vmo if amsgrad else vo, out=po)       # po: the denominator
    np.divide(po, math.sqrt(1.0 - beta2 ** t), out=po)
    np.add(po, eps, out=po)
    np.divide(np.multiply(mo, lr / (1.0 - beta1 ** t)), po, out=po)
    np.subtract(p, po, out=po)


def sgd_update(ctx, out, p, g, buf, step, *, lr, momentum, dampening, weight_decay, nesterov):
    po, bo, so = out
    first = float(step) == 0.0
    so[...] = float(step) + 1.0
    if weight_decay:
        g = g + weight_decay * p
    if momentum:
        if first:
            np.copyto(bo, g)
        else:
            np.multiply(buf, momentum, out=bo)
            damp = 1.0 - dampening
            np.add(bo, np.multiply(g, damp) if damp != 1.0 else g, out=bo)
        if nesterov:
            np.multiply(bo, momentum, out=po)
            np.add(g, po, out=po)
            g = po
        else:
            g = bo
    else:
        _keep(bo, buf)
    np.multiply(g, lr, out=po)
    np.subtract(p, po, out=po)


def rmsprop_update(ctx, out, p, g, s, a, buf, step, *, lr, alpha, eps, weight_decay, momentum, centered):
    po, so_, ao, bo, to = out
    to[...] = float(step) + 1.0
    if weight_decay:
        g = g + weight_decay * p
    np.multiply(g, g, out=so_)
    np.multiply(so_, 1.0 - alpha, out=so_)
    np.multiply(s, alpha, out=po)
    np.add(po, so_, out=so_)
    if centered:
        np.multiply(g, 1.0 - alpha, out=po)
        np.multiply(a, alpha, out=ao)
        np.add(ao, po, out=ao)
        np.multiply(ao, ao, out=po)
        np.subtract(so_, po, out=po)
        np.sqrt(po, out=po)
    else:
        _keep(ao, a)
        np.sqrt(so_, out=po)
    np.add(po, eps, out=po)
    np.divide(g, po, out=po)                       # po: the update
    if momentum:
        np.multiply(buf, momentum, out=bo)
        np.add(bo, po, out=bo)
        np.multiply(bo, lr, out=po)
    else:
        _keep(bo, buf)
        np.multiply(po, lr, out=po)
    np.subtract(p, po, out=po)


def adagrad_update(ctx, out, p, g, s, step, *, lr, lr_decay, weight_decay, eps):
    po, so_, to = out
    t = float(step) + 1.0
    to[...] = t
    if weight_decay:
        g = g + weight_decay * p
    clr = lr / (1.0 + (t - 1.0) * lr_decay)
    np.multiply(g, g, out=so_)
    np.add(s, so_, out=so_)
    np.sqrt(so_, out=po)
    np.add(po, eps, out=po)
    np.divide(np.multiply(g, clr), po, out=po)
    np.subtract(p, po, out=po)


def _quiet(fn):
    def k(ctx, out, *a, **kw):
        with np.errstate(all="ignore"):  # inf and NaN gradients propagate as in the element-wise ops
            fn(ctx, out, *a, **kw)

    k.__name__ = k.__qualname__ = fn.__name__
    return k


def register(kernels) -> None:
    for fn in (adam_update, sgd_update, rmsprop_update, adagrad_update):
        kernels.register(fn.__name__, _quiet(fn), out=True)
