"""Gradient clipping: :func:`clip_grad_norm_` and :func:`clip_grad_value_`.

Both work on the gradients' own devices without reading values back to the host: the norm of
all gradients of one device is one reduction over their concatenation, the per-device partial
results travel as 0-d tensors to the first gradient's device, and the scale factor is applied
with ``minimum(max_norm / (total + 1e-6), 1)`` instead of a host-side ``if``.
"""
from __future__ import annotations

import math

from anydevice import api as _api
from anydevice.base import dtypes as _dt
from anydevice.engine.graph import no_grad
from anydevice.engine.tensor import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_"]

_LOW = (_dt.float16, _dt.bfloat16)


def _with_grads(parameters, who: str) -> list:
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    ps = list(parameters)
    for i, p in enumerate(ps):
        if not isinstance(p, Tensor):
            raise TypeError(f"{who}(): parameters[{i}] is a {type(p).__name__}, not a Tensor")
    return [p for p in ps if p.grad is not None]


def _number(who, name, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
        raise TypeError(f"{who}(): {name} must be a number, got {v!r}")
    return float(v)


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False) -> Tensor:
    """Scale the gradients of ``parameters`` in place so that their joint ``norm_type``-norm is at
    most ``max_norm``; returns the norm before clipping (a 0-d float tensor on the first gradient's
    device; 0 when no parameter has a gradient).

    ``norm_type`` is a positive number or ``inf``. ``error_if_nonfinite=True`` raises
    ``RuntimeError`` when the norm is nan or inf (this reads one value back to the host).
    float16/bfloat16 gradients are reduced in float32; each gradient keeps its dtype.
    """
    who = "clip_grad_norm_"
    max_norm, p_ord = _number(who, "max_norm", max_norm), _number(who, "norm_type", norm_type)
    if max_norm < 0 or not p_ord > 0:
        raise ValueError(f"{who}(): max_norm must be >= 0 and norm_type > 0 (or inf), got {max_norm!r} and {norm_type!r}")
    ps = _with_grads(parameters, who)
    if not ps:
        return _api.asarray(0.0)
    with no_grad():
        by_device: dict = {}
        for p in ps:
            g = p.grad
            by_device.setdefault(g.device, []).append(_api.reshape(g.astype(_dt.float32) if g.dtype in _LOW else g, -1))
        home = ps[0].grad.device
        parts = []
        for flat in by_device.values():
            a = _api.abs(flat[0] if len(flat) == 1 else _api.concat(flat))
            part = _api.max(a) if math.isinf(p_ord) else _api.sum(a * a if p_ord == 2 else a ** p_ord)
            parts.append(part.to(home))
        if len(parts) == 1:
            total = parts[0]
        else:
            wide = max((t.dtype for t in parts), key=lambda d: d.itemsize)
            total = (_api.max if math.isinf(p_ord) else _api.sum)(_api.stack([t.astype(wide) for t in parts]))
        if not math.isinf(p_ord):
            total = _api.sqrt(total) if p_ord == 2 else total ** (1.0 / p_ord)
        if error_if_nonfinite and not bool(_api.isfinite(total)):
            raise RuntimeError(f"{who}(): the total norm of order {norm_type} of the gradients is non-finite "
                               f"({float(total)}); pass error_if_nonfinite=False to clip anyway")
        coef = _api.minimum(max_norm / (total + 1e-6), _api.ones_like(total))
        scales = {}
        for p in ps:
            g = p.grad
            key = (g.device, g.dtype)
            if key not in scales:
                scales[key] = coef.to(g.device).astype(g.dtype)
            p.grad = g * scales[key]
    return total


def clip_grad_value_(parameters, clip_value: float) -> None:
    """Clamp every gradient of ``parameters`` in place to ``[-clip_value, clip_value]``."""
    who = "clip_grad_value_"
    v = _number(who, "clip_value", clip_value)
    if v < 0:
        raise ValueError(f"{who}(): clip_value must be >= 0, got {clip_value!r}")
    with no_grad():
        for p in _with_grads(parameters, who):
            p.grad = _api.clip(p.grad, -v, v)
