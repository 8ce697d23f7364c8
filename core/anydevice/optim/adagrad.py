"""Adagrad (Duchi, Hazan & Singer)."""
from __future__ import annotations

from anydevice import api as _api
from anydevice.optim.optimizer import Optimizer, _non_negative, _positive

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    """PyTorch's Adagrad: ``g += weight_decay * p``, ``clr = lr / (1 + (t-1) * lr_decay)``,
    ``sum += g*g`` (from ``initial_accumulator_value``), ``p -= clr * g / (sqrt(sum) + eps)``."""

    _checks = {"lr": _positive, "lr_decay": _non_negative, "weight_decay": _non_negative,
               "initial_accumulator_value": _non_negative, "eps": _non_negative}

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0, eps: float = 1e-10):
        super().__init__(params, {"lr": lr, "lr_decay": lr_decay, "weight_decay": weight_decay,
                                  "initial_accumulator_value": initial_accumulator_value, "eps": eps})

    def _update(self, w, g, state, group):
        if group["weight_decay"]:
            g = g + group["weight_decay"] * w
        clr = group["lr"] / (1.0 + (state["step"] - 1) * group["lr_decay"])
        s = state.get("sum")
        init = group["initial_accumulator_value"]
        s = state["sum"] = (g * g + init if init else g * g) if s is None else s + g * g
        return w - clr * g / (_api.sqrt(s) + group["eps"])
