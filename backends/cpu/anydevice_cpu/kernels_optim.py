"""Fused array kernels of the optimizer updates (``adam_update``, ``sgd_update``,
``rmsprop_update``, ``adagrad_update``; :mod:`anydevice.ops.optim`), for numpy and, through
:func:`array_kernels`, for any array module with numpy's ``out=`` ufuncs (the cuda backend's CuPy).

Each writes its results straight into the ``out`` buffers the core allocated, using them as
scratch space on the way, so a step of Adam costs one temporary instead of a dozen. The order of
the roundings is that of the element-wise formulation, so a step gives the same bits as the
unfused ops did. The bias corrections come from the step count in float64: on the host here (the
0-d step buffer is host memory), on the device elsewhere (a 0-d array, so no synchronization).
"""
from __future__ import annotations

import math

import numpy as np


def array_kernels(xp, host_step: bool = True) -> dict:
    """op name -> ``fn(out, *inputs, **attrs)`` over array module ``xp``; ``host_step``: the step
    count may be read as a Python float (host memory), else it stays a 0-d array of ``xp``."""

    def count(step, out):
        """The new step count, written to ``out``: a float (host) or a 0-d float64 array."""
        if host_step:
            t = float(step) + 1.0
        else:
            t = step.astype(xp.float64) + 1.0
        out[...] = t
        return t

    def scalar(v, like):
        """``v`` (a float or a 0-d float64 array) as a multiplier of ``like``'s dtype."""
        return v if host_step else v.astype(like.dtype)

    root = math.sqrt if host_step else xp.sqrt

    def keep(out, x):
        """An unused state goes back unchanged."""
        xp.copyto(out, x)

    def adam_update(out, p, g, m, v, vmax, step, *, lr, beta1, beta2, eps, weight_decay, decoupled, amsgrad):
        po, mo, vo, vmo, so = out
        t = count(step, so)
        if weight_decay and decoupled:
            p = xp.multiply(p, 1.0 - lr * weight_decay)
        elif weight_decay:
            g = g + weight_decay * p
        xp.multiply(g, 1.0 - beta1, out=po)            # po: scratch
        xp.multiply(m, beta1, out=mo)
        xp.add(mo, po, out=mo)
        xp.multiply(g, g, out=vo)
        xp.multiply(vo, 1.0 - beta2, out=vo)
        xp.multiply(v, beta2, out=po)
        xp.add(po, vo, out=vo)
        if amsgrad:
            xp.maximum(vmax, vo, out=vmo)
        else:
            keep(vmo, vmax)
        xp.sqrt(vmo if amsgrad else vo, out=po)       # po: the denominator
        xp.divide(po, scalar(root(1.0 - beta2 ** t), po), out=po)
        xp.add(po, eps, out=po)
        xp.divide(xp.multiply(mo, scalar(lr / (1.0 - beta1 ** t), mo)), po, out=po)
        xp.subtract(p, po, out=po)

    def sgd_update(out, p, g, buf, step, *, lr, momentum, dampening, weight_decay, nesterov):
        po, bo, so = out
        count(step, so)
        if weight_decay:
            g = g + weight_decay * p
        if momentum:
            damp = 1.0 - dampening
            xp.multiply(buf, momentum, out=bo)
            xp.add(bo, xp.multiply(g, damp) if damp != 1.0 else g, out=bo)
            if host_step:
                if float(step) == 0.0:
                    xp.copyto(bo, g)           # the first step takes the gradient itself
            else:
                xp.copyto(bo, xp.where(step == 0.0, g, bo))
            if nesterov:
                xp.multiply(bo, momentum, out=po)
                xp.add(g, po, out=po)
                g = po
            else:
                g = bo
        else:
            keep(bo, buf)
        xp.multiply(g, lr, out=po)
        xp.subtract(p, po, out=po)

    def rmsprop_update(out, p, g, s, a, buf, step, *, lr, alpha, eps, weight_decay, momentum, centered):
        po, so_, ao, bo, to = out
        count(step, to)
        if weight_decay:
            g = g + weight_decay * p
        xp.multiply(g, g, out=so_)
        xp.multiply(so_, 1.0 - alpha, out=so_)
        xp.multiply(s, alpha, out=po)
        xp.add(po, so_, out=so_)
        if centered:
            xp.multiply(g, 1.0 - alpha, out=po)
            xp.multiply(a, alpha, out=ao)
            xp.add(ao, po, out=ao)
            xp.multiply(ao, ao, out=po)
            xp.subtract(so_, po, out=po)
            xp.sqrt(po, out=po)
        else:
            keep(ao, a)
            xp.sqrt(so_, out=po)
        xp.add(po, eps, out=po)
        xp.divide(g, po, out=po)                       # po: the update
        if momentum:
            xp.multiply(buf, momentum, out=bo)
            xp.add(bo, po, out=bo)
            xp.multiply(bo, lr, out=po)
        else:
            keep(bo, buf)
            xp.multiply(po, lr, out=po)
        xp.subtract(p, po, out=po)

    def adagrad_update(out, p, g, s, step, *, lr, lr_decay, weight_decay, eps):
        po, so_, to = out
        t = count(step, to)
        if weight_decay:
            g = g + weight_decay * p
        clr = lr / ((t - 1.0) * lr_decay + 1.0)
        xp.multiply(g, g, out=so_)
        xp.add(s, so_, out=so_)
        xp.sqrt(so_, out=po)
        xp.add(po, eps, out=po)
        xp.divide(xp.multiply(g, scalar(clr, g)), po, out=po)
        xp.subtract(p, po, out=po)

    return {f.__name__: f for f in (adam_update, sgd_update, rmsprop_update, adagrad_update)}


def returning_kernels(xp=np) -> dict:
    """The update kernels in the returning convention, ``fn(ctx, *inputs, **attrs) -> tuple`` of
    new arrays, for a backend that copies results into its own buffers (a queued kernel of the
    simulated devices): each output is shaped like its input (the param, the states, the step)."""
    def returning(fn):
        def k(ctx, *inputs, **attrs):
            out = tuple(xp.empty_like(x) for x in (inputs[0], *inputs[2:]))
            with np.errstate(all="ignore"):
                fn(out, *inputs, **attrs)
            return out

        k.__name__ = k.__qualname__ = fn.__name__
        return k

    return {name: returning(fn) for name, fn in array_kernels(xp).items()}


def _quiet(fn):
    def k(ctx, out, *a, **kw):
        with np.errstate(all="ignore"):  # inf and NaN gradients propagate as in the element-wise ops
            fn(out, *a, **kw)

    k.__name__ = k.__qualname__ = fn.__name__
    return k


def register(kernels) -> None:
    for name, fn in array_kernels(np).items():
        kernels.register(name, _quiet(fn), out=True)
