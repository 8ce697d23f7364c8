"""Fused optimizer updates: one op per update rule (``adam_update``, ``sgd_update``,
``rmsprop_update``, ``adagrad_update``), so a backend can run a whole parameter's step as one
kernel instead of a dozen element-wise ops.

Every update op takes ``(param, grad, <state>..., step)`` and returns the new values of all of
them: ``(param, <state>..., step)`` with ``step + 1``. Everything that changes from one step to
the next is a tensor input (the step count is a 0-d float32 tensor and the bias corrections are
computed from it on the device), so a captured training step replays exactly; the
hyper-parameters (``lr``, betas, ...) are attributes. A state the options leave unused
(``momentum_buffer`` without momentum, ``max_exp_avg_sq`` without amsgrad) may be any tensor of
the param's dtype, usually a 0-d placeholder, and is returned unchanged.

Parameters, gradients and states share one dtype, float32 or float64 (the optimizers keep
float32 master weights for float16 and bfloat16 parameters). The ops are not differentiable.
Each has a float64 numpy reference and a decomposition into element-wise ops, so every backend
runs them on its own device; the cpu backend has fused numpy kernels.
"""
from __future__ import annotations

import math

import numpy as np

from anydevice.base import dtypes as _dt
from anydevice.ops.lazy_samples import sample as _sample
from anydevice.ops.lazy_samples import values as _values
from anydevice.ops.registry import Attr, Bool, Real, define

__all__ = ["UPDATES"]


class _Unit(Attr):
    """A finite number in [0, 1) (a decay rate such as Adam's betas)."""

    __slots__ = ()
    annotation = "float"

    def check(self, ctx, name, v):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            self.fail(ctx, name, v)
        v = float(v)
        if not 0.0 <= v < 1.0:
            self.fail(ctx, name, v, ValueError)
        return v

    def allowed(self) -> str:
        return "a number in [0, 1)"


def _lr():
    return Real(1e-3, lo=0.0, open=True)


def _nonneg(default=0.0):
    return Real(default, lo=0.0)


# --- rules shared by every update op -----------------------------------------------------------
def _rules(name, states, used):
    """Dtype and shape rules of ``name(param, grad, *states, step)``; ``used(attrs)`` says which
    states the options read (the others are passed through whatever their shape)."""
    names = ("param", "grad", *states)

    def dtype_rule(ds, attrs):
        d = ds[0]
        for n, x in zip(names[1:], ds[1:-1]):
            if x is not d:
                raise TypeError(f"{name}(): {n} is {x.name} but param is {d.name}; the gradient and every state "
                                "must have the param's dtype")
        if ds[-1] is not _dt.float32:
            raise TypeError(f"{name}(): step must be a 0-d float32 tensor (the number of steps taken), "
                            f"not {ds[-1].name}")
        return (d,) * len(names) + (_dt.float32,), (d,) * (len(names) - 1) + (_dt.float32,)

    def shape_rule(shapes, attrs):
        p = tuple(shapes[0])
        flags = (True, *used(attrs))
        for n, s, need in zip(names[1:], shapes[1:-1], flags):
            if need and tuple(s) != p:
                raise ValueError(f"{name}(): {n} has shape {tuple(s)} but param has shape {p}; they must be equal")
        if tuple(shapes[-1]) != ():
            raise ValueError(f"{name}(): step must be a 0-d tensor, got shape {tuple(shapes[-1])}")
        return (p, *(tuple(s) for s in shapes[2:-1]), ())

    return dtype_rule, shape_rule


def _errors(n_states):
    f32 = np.ones((2, 3), np.float32)
    step = np.zeros((), np.float32)
    st = [f32] * n_states
    return [
        ([f32, np.ones(3, np.float32), *st, step], {}, ValueError, "grad shape differs from param"),
        ([f32.astype(np.float16)] * (2 + n_states) + [step], {}, TypeError, "float16 param"),
        ([f32, f32.astype(np.float64), *st, step], {}, TypeError, "grad of another dtype"),
        ([f32, f32, *st, np.zeros(1, np.float32)], {}, ValueError, "step not 0-d"),
        ([f32, f32, *st, np.zeros((), np.float64)], {}, TypeError, "float64 step"),
        ([f32, f32, *st, step], {"lr": -1.0}, ValueError, "negative lr"),
    ]


def _samples(states, rows):
    """Samples from (shape, attrs, step, desc) rows; a state marked in ``states`` holds positive
    values (a running mean of squares, above any squared running mean of a sample)."""
    def gen(d, rng):
        out = []
        for shape, attrs, step, desc in rows:
            p, g = _values(rng, d, shape), _values(rng, d, shape)
            st = [(np.abs(_values(rng, d, shape)) * 0.1 + 0.2 if pos else _values(rng, d, shape) * 0.1).astype(d.numpy)
                  for pos in states]
            out.append(_sample([p, g, *st, np.asarray(step, np.float32)], dict(attrs), desc))
        return out

    return gen


def _step_ref(step):
    return np.asarray(step) + 1.0


def _pow_minus_one(xp, b, t):
    """``b**t - 1`` (minus the bias correction ``1 - b**t``) on the device from the step tensor
    ``t`` (``b`` a Python float in [0, 1)); a Python float for ``b = 0``.

    The decompositions use only primitives that devices run on their fast paths (multiply, add,
    divide by tensors or Python scalars; exp, log) and fold signs into the scalars, so no
    ``subtract`` (a composite) appears. Where ``1 - b >= 0.1`` the plain ``exp(t log b) - 1`` is
    accurate to 6e-7; closer to 1 it cancels (float32 ``1 - 0.999**1`` would be off by 1e-5), so
    Kahan's form ``(u - 1) * x / log(u)``, ``u = exp(x)``, ``x = t log b`` is used, accurate to a few
    ulps without expm1 (which devices without it decompose into a dozen ops); ``x`` stays above
    -80 so ``u`` is a normal number (``b**t`` is then below 2e-35: the correction is 1)."""
    if b == 0.0:
        return -1.0
    lb = math.log(b)
    if b <= 0.9:
        return xp.exp(t * lb) + -1.0
    x = xp.maximum(t * lb, -80.0)
    u = xp.exp(x)
    e = (u + -1.0) * (x / xp.log(u))
    if abs(lb) < 1e-6:  # u may round to 1 (0 / 0): there b**t - 1 is x to float32 precision
        e = xp.where(u == 1.0, x, e)
    return e


def _as_compute(xp, t, like):
    return t if t.dtype is like.dtype else xp.astype(t, like.dtype)


# --- Adam / AdamW ------------------------------------------------------------------------------
def _adam_used(a):
    return (True, True, a["amsgrad"])


def _adam_ref(p, g, m, v, vmax, step, *, lr, beta1, beta2, eps, weight_decay, decoupled, amsgrad):
    t = _step_ref(step)
    if weight_decay and decoupled:
        p = p * (1.0 - lr * weight_decay)
    elif weight_decay:
        g = g + weight_decay * p
    m = beta1 * m + (1.0 - beta1) * g
    v = beta2 * v + (1.0 - beta2) * g * g
    if amsgrad:
        vmax = np.maximum(vmax, v)
    denom = np.sqrt(vmax if amsgrad else v) / np.sqrt(1.0 - beta2 ** t) + eps
    return p - lr / (1.0 - beta1 ** t) * m / denom, m, v, vmax, t


def _adam_dec(xp, p, g, m, v, vmax, step, *, lr, beta1, beta2, eps, weight_decay, decoupled, amsgrad):
    t = step + 1.0
    tc = _as_compute(xp, t, p)
    if weight_decay and decoupled:
        p = p * (1.0 - lr * weight_decay)
    elif weight_decay:
        g = g + weight_decay * p
    m = beta1 * m + (1.0 - beta1) * g
    v = beta2 * v + (1.0 - beta2) * (g * g)
    if amsgrad:
        vmax = xp.maximum(vmax, v)
    e2 = _pow_minus_one(xp, beta2, tc)
    denom = xp.sqrt(vmax if amsgrad else v) / (xp.sqrt(e2 * -1.0) if not isinstance(e2, float) else 1.0) + eps
    # p - (lr / (1 - b1**t)) * m / denom, the sign folded into the step size (negation is exact)
    return p + (m * (lr / _pow_minus_one(xp, beta1, tc))) / denom, m, v, vmax, t


_ADAM_ATTRS = {"lr": _lr(), "beta1": _Unit(0.9), "beta2": _Unit(0.999), "eps": _nonneg(1e-8),
               "weight_decay": _nonneg(), "decoupled": Bool(False), "amsgrad": Bool(False)}
_adam_dtype, _adam_shape = _rules("adam_update", ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"), _adam_used)


# --- SGD ---------------------------------------------------------------------------------------
def _sgd_used(a):
    return (a["momentum"] != 0.0,)


def _sgd_ref(p, g, buf, step, *, lr, momentum, dampening, weight_decay, nesterov):
    if weight_decay:
        g = g + weight_decay * p
    if momentum:
        buf = g if float(step) == 0.0 else momentum * buf + (1.0 - dampening) * g
        g = g + momentum * buf if nesterov else buf
    return p - lr * g, buf, _step_ref(step)


def _sgd_dec(xp, p, g, buf, step, *, lr, momentum, dampening, weight_decay, nesterov):
    if weight_decay:
        g = g + weight_decay * p
    if momentum:
        damp = 1.0 - dampening
        buf = xp.where(step == 0.0, g, momentum * buf + (damp * g if damp != 1.0 else g))  # the first step: g
        g = g + momentum * buf if nesterov else buf
    return p + g * -lr, buf, step + 1.0


_SGD_ATTRS = {"lr": _lr(), "momentum": _nonneg(), "dampening": _nonneg(), "weight_decay": _nonneg(),
              "nesterov": Bool(False)}
_sgd_dtype, _sgd_shape = _rules("sgd_update", ("momentum_buffer",), _sgd_used)


# --- RMSprop -----------------------------------------------------------------------------------
def _rmsprop_used(a):
    return (True, a["centered"], a["momentum"] != 0.0)


def _rmsprop_ref(p, g, s, a, buf, step, *, lr, alpha, eps, weight_decay, momentum, centered):
    g = g + weight_decay * p if weight_decay else g
    s = alpha * s + (1.0 - alpha) * g ** 2
    a = alpha * a + (1.0 - alpha) * g if centered else a
    upd = g / (np.sqrt(s - a ** 2 if centered else s) + eps)
    buf = momentum * buf + upd if momentum else buf
    return p - lr * (buf if momentum else upd), s, a, buf, _step_ref(step)


def _rmsprop_dec(xp, p, g, s, a, buf, step, *, lr, alpha, eps, weight_decay, momentum, centered):
    if weight_decay:
        g = g + weight_decay * p
    s = alpha * s + (1.0 - alpha) * (g * g)
    avg = s
    if centered:
        a = alpha * a + (1.0 - alpha) * g
        avg = s + (a * a) * -1.0
    upd = g / (xp.sqrt(avg) + eps)
    if momentum:
        buf = upd = momentum * buf + upd
    return p + upd * -lr, s, a, buf, step + 1.0


_RMSPROP_ATTRS = {"lr": _lr(), "alpha": _Unit(0.99), "eps": _nonneg(1e-8), "weight_decay": _nonneg(),
                  "momentum": _nonneg(), "centered": Bool(False)}
_rmsprop_dtype, _rmsprop_shape = _rules("rmsprop_update", ("square_avg", "grad_avg", "momentum_buffer"),
                                        _rmsprop_used)


# --- Adagrad -----------------------------------------------------------------------------------
def _adagrad_ref(p, g, s, step, *, lr, lr_decay, weight_decay, eps):
    t = _step_ref(step)
    if weight_decay:
        g = g + weight_decay * p
    clr = lr / (1.0 + (t - 1.0) * lr_decay)
    s = s + g * g
    return p - clr * g / (np.sqrt(s) + eps), s, t


def _adagrad_dec(xp, p, g, s, step, *, lr, lr_decay, weight_decay, eps):
    t = step + 1.0
    if weight_decay:
        g = g + weight_decay * p
    nclr = -lr / (_as_compute(xp, step, p) * lr_decay + 1.0) if lr_decay else -lr  # minus the decayed lr
    s = s + g * g
    return p + (g * nclr) / (xp.sqrt(s) + eps), s, t


_ADAGRAD_ATTRS = {"lr": Real(1e-2, lo=0.0, open=True), "lr_decay": _nonneg(), "weight_decay": _nonneg(),
                  "eps": _nonneg(1e-10)}
_adagrad_dtype, _adagrad_shape = _rules("adagrad_update", ("sum",), lambda a: (True,))

# the tolerance of a chain of a dozen roundings, a square root and two divisions
_TOL = {"float32": (2e-5, 1e-6), "float64": (1e-10, 1e-12)}

_SHAPES = [((3, 4), {}, 0.0, "first step"), ((5,), {}, 9.0, "step 10"), ((), {}, 2.0, "0-d"),
           ((0, 3), {}, 1.0, "empty")]

define("adam_update", inputs=("param", "grad", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"),
       outputs=("param", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"), attrs=_ADAM_ATTRS, positional=0,
       dtype_rule=_adam_dtype, shape_rule=_adam_shape, reference=_adam_ref, decomposition=_adam_dec,
       category="optim", differentiable=False, dtypes="float32_64", tolerance=_TOL, errors=_errors(3),
       samples=_samples((False, True, True), _SHAPES + [
           ((4, 3), {"weight_decay": 0.1}, 3.0, "L2 weight decay"),
           ((4, 3), {"weight_decay": 0.1, "decoupled": True}, 3.0, "decoupled weight decay (AdamW)"),
           ((4, 3), {"amsgrad": True}, 5.0, "amsgrad"),
           ((6,), {"beta1": 0.0, "beta2": 0.5, "lr": 0.1}, 1.0, "beta1 0"),
           ((24, 32), {}, 4.0, "768 elements"),
           ((24, 32), {"amsgrad": True, "weight_decay": 0.1}, 6.0, "768 elements, amsgrad")]),
       doc="adam_update(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, *, lr, beta1, beta2, eps, "
           "weight_decay, decoupled, amsgrad) -> the same, one step of Adam (AdamW with decoupled=True; "
           "max_exp_avg_sq is read only with amsgrad)")

define("sgd_update", inputs=("param", "grad", "momentum_buffer", "step"), outputs=("param", "momentum_buffer", "step"),
       attrs=_SGD_ATTRS, positional=0, dtype_rule=_sgd_dtype, shape_rule=_sgd_shape, reference=_sgd_ref,
       decomposition=_sgd_dec, category="optim", differentiable=False, dtypes="float32_64", tolerance=_TOL,
       errors=_errors(1),
       samples=_samples((False,), _SHAPES + [
           ((4, 3), {"momentum": 0.9}, 0.0, "momentum, first step"),
           ((4, 3), {"momentum": 0.9, "dampening": 0.5}, 0.0, "dampening, first step"),
           ((4, 3), {"momentum": 0.9, "dampening": 0.5}, 4.0, "dampening"),
           ((4, 3), {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01}, 4.0, "nesterov, weight decay")]),
       doc="sgd_update(param, grad, momentum_buffer, step, *, lr, momentum, dampening, weight_decay, nesterov) "
           "-> (param, momentum_buffer, step): one step of SGD (the buffer is read only with momentum)")

define("rmsprop_update", inputs=("param", "grad", "square_avg", "grad_avg", "momentum_buffer", "step"),
       outputs=("param", "square_avg", "grad_avg", "momentum_buffer", "step"), attrs=_RMSPROP_ATTRS, positional=0,
       dtype_rule=_rmsprop_dtype, shape_rule=_rmsprop_shape, reference=_rmsprop_ref, decomposition=_rmsprop_dec,
       category="optim", differentiable=False, dtypes="float32_64", tolerance=_TOL, errors=_errors(3),
       samples=_samples((True, False, False), _SHAPES + [
           ((4, 3), {"momentum": 0.9, "weight_decay": 0.01}, 3.0, "momentum, weight decay"),
           ((4, 3), {"centered": True}, 3.0, "centered (square_avg above grad_avg**2)")]),
       doc="rmsprop_update(param, grad, square_avg, grad_avg, momentum_buffer, step, *, lr, alpha, eps, "
           "weight_decay, momentum, centered) -> the same: one step of RMSprop (grad_avg is read only when "
           "centered, momentum_buffer only with momentum)")

define("adagrad_update", inputs=("param", "grad", "sum", "step"), outputs=("param", "sum", "step"),
       attrs=_ADAGRAD_ATTRS, positional=0, dtype_rule=_adagrad_dtype, shape_rule=_adagrad_shape,
       reference=_adagrad_ref, decomposition=_adagrad_dec, category="optim", differentiable=False,
       dtypes="float32_64", tolerance=_TOL, errors=_errors(1),
       samples=_samples((True,), _SHAPES + [((4, 3), {"lr_decay": 0.1, "weight_decay": 0.01}, 3.0, "lr decay")]),
       doc="adagrad_update(param, grad, sum, step, *, lr, lr_decay, weight_decay, eps) -> (param, sum, step): "
           "one step of Adagrad")

#: the update ops, by optimizer
UPDATES = {"adam": "adam_update", "sgd": "sgd_update", "rmsprop": "rmsprop_update", "adagrad": "adagrad_update"}
