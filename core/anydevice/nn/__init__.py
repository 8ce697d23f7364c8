"""Layers, containers, losses and initialization with PyTorch's names (``nn.Layer`` is Paddle's
name of :class:`Module`); the math is :mod:`anydevice.nn.functional`, so every layer runs, and
differentiates, on every device::

    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to("npu:0")
    opt = anydevice.optimizer.Adam(model.parameters(), lr=1e-3)
    loss = nn.mse_loss(model(x), y)
    loss.backward(); opt.step(); opt.zero_grad()

Parameters are ordinary tensors with ``requires_grad=True``, held as module attributes.
"""
from __future__ import annotations

from anydevice.nn import functional, init, utils  # noqa: F401 - utils: nn.utils.clip_grad_norm_, clip_grad_value_
from anydevice.nn.container import ModuleDict, ModuleList, Sequential
from anydevice.nn.functional import mse_loss
from anydevice.nn.layers.activation import GELU, LeakyReLU, LogSoftmax, ReLU, Sigmoid, SiLU, Softmax, Tanh
from anydevice.nn.layers.attention import MultiheadAttention
from anydevice.nn.layers.conv import Conv1d, Conv2d, ConvTranspose2d
from anydevice.nn.layers.dropout import Dropout, Embedding
from anydevice.nn.layers.linear import Bilinear, Flatten, Identity, Linear, Unflatten
from anydevice.nn.layers.loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from anydevice.nn.layers.norm import BatchNorm1d, BatchNorm2d, GroupNorm, LayerNorm
from anydevice.nn.layers.pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from anydevice.nn.module import Layer, LoadResult, Module, Parameter, RemovableHandle, parameter

__all__ = [
    "Module", "Layer", "LoadResult", "RemovableHandle", "parameter", "Parameter", "init", "functional",
    "Sequential", "ModuleList", "ModuleDict",
    "Linear", "Bilinear", "Identity", "Flatten", "Unflatten",
    "Conv1d", "Conv2d", "ConvTranspose2d", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d",
    "BatchNorm1d", "BatchNorm2d", "LayerNorm", "GroupNorm", "Dropout", "Embedding", "MultiheadAttention",
    "ReLU", "LeakyReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "Softmax", "LogSoftmax",
    "CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss",
    "KLDivLoss", "mse_loss",
]
