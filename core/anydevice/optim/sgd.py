"""Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay."""
from __future__ import annotations

from anydevice.optim.optimizer import Optimizer, _flag, _non_negative, _positive

__all__ = ["SGD"]


class SGD(Optimizer):
    """PyTorch's SGD: ``g += weight_decay * p``; with momentum, ``buf = g`` at the first step, then
    ``buf = momentum * buf + (1 - dampening) * g``, and ``g = g + momentum * buf`` (Nesterov) or
    ``g = buf``; finally ``p -= lr * g``."""

    _checks = {"lr": _positive, "momentum": _non_negative, "dampening": _non_negative,
               "weight_decay": _non_negative, "nesterov": _flag}

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False):
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": dampening,
                                  "weight_decay": weight_decay, "nesterov": nesterov})

    def _validate(self, group, who):
        super()._validate(group, who)
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError(f"{who}: nesterov=True needs momentum > 0 and dampening = 0, got momentum="
                             f"{group['momentum']} and dampening={group['dampening']}")

    def _update(self, w, g, state, group):
        if group["weight_decay"]:
            g = g + group["weight_decay"] * w
        mu = group["momentum"]
        if mu:
            buf = state.get("momentum_buffer")
            damp = 1.0 - group["dampening"]
            buf = g if buf is None else mu * buf + (damp * g if damp != 1.0 else g)
            state["momentum_buffer"] = buf
            g = g + mu * buf if group["nesterov"] else buf
        return w - group["lr"] * g
