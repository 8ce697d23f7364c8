"""Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay."""
from __future__ import annotations

from anydevice import api as _api
from anydevice.optim.optimizer import Optimizer, _flag, _non_negative, _positive

__all__ = ["SGD"]


class SGD(Optimizer):
    """PyTorch's SGD: ``g += weight_decay * p``; with momentum, ``buf = g`` at the first step, then
    ``buf = momentum * buf + (1 - dampening) * g``, and ``g = g + momentum * buf`` (Nesterov) or
    ``g = buf``; finally ``p -= lr * g``: one ``sgd_update`` op per parameter."""

    _checks = {"lr": _positive, "momentum": _non_negative, "dampening": _non_negative,
               "weight_decay": _non_negative, "nesterov": _flag}
    _op = staticmethod(_api.sgd_update)
    _states = ("momentum_buffer",)

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False):
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": dampening,
                                  "weight_decay": weight_decay, "nesterov": nesterov})

    def _validate(self, group, who):
        super()._validate(group, who)
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError(f"{who}: nesterov=True needs momentum > 0 and dampening = 0, got momentum="
                             f"{group['momentum']} and dampening={group['dampening']}")

    def _options(self, group):
        return {k: group[k] for k in ("lr", "momentum", "dampening", "weight_decay", "nesterov")}

    def _used(self, group):
        return (group["momentum"] != 0.0,)
