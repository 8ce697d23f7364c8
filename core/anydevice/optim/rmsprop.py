"""RMSprop (Hinton), optionally centered (Graves) and with momentum."""
from __future__ import annotations

from anydevice import api as _api
from anydevice.optim.optimizer import Optimizer, _flag, _non_negative, _positive

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """PyTorch's RMSprop: ``g += weight_decay * p``, ``s = alpha*s + (1-alpha)*g*g`` (from zero);
    centered: ``a = alpha*a + (1-alpha)*g`` and ``avg = sqrt(s - a*a) + eps``, else ``sqrt(s) + eps``;
    with momentum ``buf = momentum*buf + g/avg`` (from zero) and ``p -= lr*buf``, else ``p -= lr*g/avg``:
    one ``rmsprop_update`` op per parameter."""

    _checks = {"lr": _positive, "alpha": _non_negative, "eps": _non_negative, "weight_decay": _non_negative,
               "momentum": _non_negative, "centered": _flag}
    _op = staticmethod(_api.rmsprop_update)
    _states = ("square_avg", "grad_avg", "momentum_buffer")

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
                 momentum: float = 0.0, centered: bool = False):
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps": eps, "weight_decay": weight_decay,
                                  "momentum": momentum, "centered": centered})

    def _options(self, group):
        return {k: group[k] for k in ("lr", "alpha", "eps", "weight_decay", "momentum", "centered")}

    def _used(self, group):
        return (True, group["centered"], group["momentum"] != 0.0)
