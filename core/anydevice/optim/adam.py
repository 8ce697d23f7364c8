"""Adam (Kingma & Ba) with the L2 penalty or, in AdamW, decoupled weight decay (Loshchilov & Hutter)."""
from __future__ import annotations

import math

from anydevice import api as _api
from anydevice.optim.optimizer import Optimizer, _betas, _flag, _non_negative, _positive

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """PyTorch's Adam: ``g += weight_decay * p`` (L2), ``m = b1*m + (1-b1)*g``, ``v = b2*v + (1-b2)*g*g``
    (both start at zero), ``v_max = max(v_max, v)`` with ``amsgrad``, and
    ``p -= lr / (1-b1**t) * m / (sqrt(v) / sqrt(1-b2**t) + eps)``."""

    _checks = {"lr": _positive, "betas": _betas, "eps": _non_negative, "weight_decay": _non_negative,
               "amsgrad": _flag}
    _decoupled = False

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 amsgrad: bool = False):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "amsgrad": amsgrad})

    def _update(self, w, g, state, group):
        lr, (b1, b2), wd, t = group["lr"], group["betas"], group["weight_decay"], state["step"]
        if wd and self._decoupled:
            w = w * (1.0 - lr * wd)
        elif wd:
            g = g + wd * w
        m, v = state.get("exp_avg"), state.get("exp_avg_sq")
        m = (1.0 - b1) * g if m is None else b1 * m + (1.0 - b1) * g
        v = (1.0 - b2) * (g * g) if v is None else b2 * v + (1.0 - b2) * (g * g)
        state["exp_avg"], state["exp_avg_sq"] = m, v
        if group["amsgrad"]:
            vmax = state.get("max_exp_avg_sq")
            v = state["max_exp_avg_sq"] = v if vmax is None else _api.maximum(vmax, v)
        denom = _api.sqrt(v) / math.sqrt(1.0 - b2 ** t) + group["eps"]
        return w - (lr / (1.0 - b1 ** t)) * m / denom


class AdamW(Adam):
    """Adam with decoupled weight decay: ``p *= 1 - lr * weight_decay`` before the Adam step
    (default ``weight_decay=1e-2``, as in PyTorch)."""

    _decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 amsgrad: bool = False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)
