"""Optimizers: :class:`SGD` (with momentum) and :class:`Adam`.

They are device-agnostic: every update is a few tensor ops on the parameter's own device,
run under :func:`anydevice.no_grad`. Updates rebind each parameter to a new buffer
(``p -= ...``), so tensors computed from a parameter before the step keep their values.
"""
from __future__ import annotations

import math

from anydevice import api as _api
from anydevice.engine.autograd import no_grad
from anydevice.engine.tensor import Tensor

__all__ = ["Optimizer", "SGD", "Adam"]


class Optimizer:
    """Holds a list of parameters; subclasses implement :meth:`_update`."""

    def __init__(self, params, lr: float):
        if hasattr(params, "parameters") and callable(params.parameters):
            params = params.parameters()
        self.params = list(params)
        if not self.params:
            raise ValueError(f"{type(self).__name__}(): got an empty parameter list")
        for i, p in enumerate(self.params):
            if not isinstance(p, Tensor):
                raise TypeError(f"{type(self).__name__}(): parameter {i} is a {type(p).__name__}, not a Tensor")
            if not p.requires_grad:
                raise ValueError(
                    f"{type(self).__name__}(): parameter {i} ({p.dtype.name}{list(p.shape)} on {p.device}) does not "
                    "require grad; set requires_grad=True or leave it out"
                )
        self.lr = _positive("lr", lr, type(self).__name__)
        self.state: list[dict] = [{} for _ in self.params]
        self.step_count = 0

    def step(self) -> None:
        """Apply one update to every parameter that has a gradient."""
        self.step_count += 1
        with no_grad():
            for p, st in zip(self.params, self.state):
                g = p.grad
                if g is None:
                    continue
                if g.device != p.device:
                    raise ValueError(
                        f"{type(self).__name__}.step(): gradient on {g.device} but parameter on {p.device}")
                self._update(p, g, st)

    def _update(self, p: Tensor, g: Tensor, state: dict) -> None:
        raise NotImplementedError

    def zero_grad(self) -> None:
        """Forget every parameter's gradient (the next backward() starts from zero)."""
        for p in self.params:
            p.clear_grad()

    clear_grad = zero_grad

    def __repr__(self) -> str:
        return f"{type(self).__name__}(lr={self.lr}, {len(self.params)} parameters)"


class SGD(Optimizer):
    """``buf = momentum * buf + g``; ``p -= lr * buf`` (plain ``p -= lr * g`` when momentum is 0).

    ``weight_decay`` adds ``weight_decay * p`` to the gradient first.
    """

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, weight_decay: float = 0.0):
        super().__init__(params, lr)
        self.momentum = _non_negative("momentum", momentum, "SGD")
        self.weight_decay = _non_negative("weight_decay", weight_decay, "SGD")

    def _update(self, p, g, state):
        if self.weight_decay:
            g = g + self.weight_decay * p
        if self.momentum:
            buf = state.get("momentum")
            buf = g if buf is None else self.momentum * buf + g
            state["momentum"] = buf
            g = buf
        p -= self.lr * g


class Adam(Optimizer):
    """Adam (Kingma & Ba): bias-corrected first and second moment estimates.

    ``m = b1*m + (1-b1)*g``, ``v = b2*v + (1-b2)*g*g``,
    ``p -= lr * (m / (1-b1**t)) / (sqrt(v / (1-b2**t)) + eps)``.
    ``weight_decay`` adds ``weight_decay * p`` to the gradient (L2 penalty).
    """

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0):
        super().__init__(params, lr)
        try:
            b1, b2 = (float(b) for b in betas)
        except (TypeError, ValueError):
            raise ValueError(f"Adam(): betas must be a pair of floats in [0, 1), got {betas!r}") from None
        for name, b in (("betas[0]", b1), ("betas[1]", b2)):
            if not 0.0 <= b < 1.0:
                raise ValueError(f"Adam(): {name} must be in [0, 1), got {b!r}")
        self.betas = (b1, b2)
        self.eps = _non_negative("eps", eps, "Adam")
        self.weight_decay = _non_negative("weight_decay", weight_decay, "Adam")

    def _update(self, p, g, state):
        b1, b2 = self.betas
        if self.weight_decay:
            g = g + self.weight_decay * p
        t = state["t"] = state.get("t", 0) + 1
        m, v = state.get("m"), state.get("v")
        m = (1 - b1) * g if m is None else b1 * m + (1 - b1) * g
        v = (1 - b2) * (g * g) if v is None else b2 * v + (1 - b2) * (g * g)
        state["m"], state["v"] = m, v
        m_hat = m / (1 - b1 ** t)
        v_hat = v / (1 - b2 ** t)
        p -= self.lr * m_hat / (_api.sqrt(v_hat) + self.eps)


def _positive(name, v, who):
    v = _number(name, v, who)
    if not v > 0:
        raise ValueError(f"{who}(): {name} must be > 0, got {v!r}")
    return v


def _non_negative(name, v, who):
    v = _number(name, v, who)
    if not v >= 0:
        raise ValueError(f"{who}(): {name} must be >= 0, got {v!r}")
    return v


def _number(name, v, who) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise TypeError(f"{who}(): {name} must be a finite number, got {v!r}")
    return float(v)
