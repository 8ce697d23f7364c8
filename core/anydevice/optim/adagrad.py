"""Adagrad (Duchi, Hazan & Singer)."""
from __future__ import annotations

from anydevice import api as _api
from anydevice.optim.optimizer import Optimizer, _non_negative, _positive

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    """PyTorch's Adagrad: ``g += weight_decay * p``, ``clr = lr / (1 + (t-1) * lr_decay)``,
    ``sum += g*g`` (from ``initial_accumulator_value``), ``p -= clr * g / (sqrt(sum) + eps)``:
    one ``adagrad_update`` op per parameter."""

    _checks = {"lr": _positive, "lr_decay": _non_negative, "weight_decay": _non_negative,
               "initial_accumulator_value": _non_negative, "eps": _non_negative}
    _op = staticmethod(_api.adagrad_update)
    _states = ("sum",)

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0, eps: float = 1e-10):
        super().__init__(params, {"lr": lr, "lr_decay": lr_decay, "weight_decay": weight_decay,
                                  "initial_accumulator_value": initial_accumulator_value, "eps": eps})

    def _options(self, group):
        return {k: group[k] for k in ("lr", "lr_decay", "weight_decay", "eps")}

    def _initial(self, name, w, group):
        return _api.full_like(w, group["initial_accumulator_value"])
