"""A minimal layer API: :class:`Module`, :class:`Linear`, :class:`ReLU`, :class:`Sequential`, :class:`MSELoss`.

Enough to write and train small models on any device::

    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to("npu:0")
    opt = anydevice.optimizer.Adam(model.parameters(), lr=1e-3)
    loss = nn.mse_loss(model(x), y)
    loss.backward(); opt.step(); opt.zero_grad()

Parameters are ordinary tensors with ``requires_grad=True``, held as module attributes.
"""
from __future__ import annotations

from anydevice import api as _api
from anydevice.engine.tensor import Tensor
from anydevice.nn import init, utils  # noqa: F401 - utils: anydevice.nn.utils.clip_grad_norm_
from anydevice.nn.container import ModuleDict, ModuleList, Sequential
from anydevice.nn.layers.linear import Bilinear, Flatten, Identity, Linear, Unflatten
from anydevice.nn.module import Layer, LoadResult, Module, RemovableHandle, parameter

__all__ = ["Module", "Layer", "LoadResult", "RemovableHandle", "parameter", "init", "Sequential", "ModuleList",
           "ModuleDict", "Linear", "Bilinear", "Identity", "Flatten", "Unflatten", "ReLU", "MSELoss", "mse_loss"]


class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return _api.relu(x)


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """Squared error between ``input`` and ``target``, averaged (``"mean"``), summed or per element (``"none"``)."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"mse_loss(): reduction must be 'mean', 'sum' or 'none', not {reduction!r}")
    if input.shape != target.shape:
        raise ValueError(f"mse_loss(): input has shape {input.shape}, target {target.shape}; they must match")
    d = input - target
    sq = d * d
    if reduction == "none":
        return sq
    return _api.sum(sq) if reduction == "sum" else _api.mean(sq)


class MSELoss(Module):
    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return mse_loss(input, target, self.reduction)
