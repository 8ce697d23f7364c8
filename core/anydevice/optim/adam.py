"""Adam (Kingma & Ba) with the L2 penalty or, in AdamW, decoupled weight decay (Loshchilov & Hutter)."""
from __future__ import annotations

from anydevice import api as _api
from anydevice.optim.optimizer import Optimizer, _betas, _flag, _non_negative, _positive

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """PyTorch's Adam: ``g += weight_decay * p`` (L2), ``m = b1*m + (1-b1)*g``, ``v = b2*v + (1-b2)*g*g``
    (both start at zero), ``v_max = max(v_max, v)`` with ``amsgrad``, and
    ``p -= lr / (1-b1**t) * m / (sqrt(v) / sqrt(1-b2**t) + eps)``: one ``adam_update`` op per parameter."""

    _checks = {"lr": _positive, "betas": _betas, "eps": _non_negative, "weight_decay": _non_negative,
               "amsgrad": _flag}
    _decoupled = False
    _op = staticmethod(_api.adam_update)
    _states = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 amsgrad: bool = False):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "amsgrad": amsgrad})

    def _options(self, group):
        (b1, b2) = group["betas"]
        return {"lr": group["lr"], "beta1": b1, "beta2": b2, "eps": group["eps"],
                "weight_decay": group["weight_decay"], "decoupled": self._decoupled, "amsgrad": group["amsgrad"]}

    def _used(self, group):
        return (True, True, group["amsgrad"])


class AdamW(Adam):
    """Adam with decoupled weight decay: ``p *= 1 - lr * weight_decay`` before the Adam step
    (default ``weight_decay=1e-2``, as in PyTorch)."""

    _decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 amsgrad: bool = False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)
