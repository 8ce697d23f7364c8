"""RMSprop (Hinton), optionally centered (Graves) and with momentum."""
from __future__ import annotations

from anydevice import api as _api
from anydevice.optim.optimizer import Optimizer, _flag, _non_negative, _positive

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """PyTorch's RMSprop: ``g += weight_decay * p``, ``s = alpha*s + (1-alpha)*g*g`` (from zero);
    centered: ``a = alpha*a + (1-alpha)*g`` and ``avg = sqrt(s - a*a) + eps``, else ``sqrt(s) + eps``;
    with momentum ``buf = momentum*buf + g/avg`` (from zero) and ``p -= lr*buf``, else ``p -= lr*g/avg``."""

    _checks = {"lr": _positive, "alpha": _non_negative, "eps": _non_negative, "weight_decay": _non_negative,
               "momentum": _non_negative, "centered": _flag}

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
                 momentum: float = 0.0, centered: bool = False):
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps": eps, "weight_decay": weight_decay,
                                  "momentum": momentum, "centered": centered})

    def _update(self, w, g, state, group):
        alpha, mu = group["alpha"], group["momentum"]
        if group["weight_decay"]:
            g = g + group["weight_decay"] * w
        s = state.get("square_avg")
        s = state["square_avg"] = (1.0 - alpha) * (g * g) if s is None else alpha * s + (1.0 - alpha) * (g * g)
        if group["centered"]:
            a = state.get("grad_avg")
            a = state["grad_avg"] = (1.0 - alpha) * g if a is None else alpha * a + (1.0 - alpha) * g
            s = s - a * a
        step = g / (_api.sqrt(s) + group["eps"])
        if mu:
            buf = state.get("momentum_buffer")
            step = state["momentum_buffer"] = step if buf is None else mu * buf + step
        return w - group["lr"] * step
