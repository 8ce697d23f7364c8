"""Normalization: :class:`BatchNorm1d`, :class:`BatchNorm2d` (running statistics as buffers),
:class:`LayerNorm`, :class:`GroupNorm`."""
from __future__ import annotations

import numpy as np

import anydevice.nn.functional as F
from anydevice import api as _api
from anydevice.base import dtypes as _dt
from anydevice.engine.graph import no_grad
from anydevice.nn.layers.linear import float_dtype, positive_int
from anydevice.nn.module import Module, parameter

__all__ = ["BatchNorm1d", "BatchNorm2d", "LayerNorm", "GroupNorm"]


def _affine(layer: Module, shape: tuple, on: bool, d, device) -> None:
    layer.register_parameter("weight", parameter(np.ones(shape), dtype=d, device=device) if on else None)
    layer.register_parameter("bias", parameter(np.zeros(shape), dtype=d, device=device) if on else None)


class _BatchNorm(Module):
    _ranks: tuple = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, *, dtype=None, device=None):
        super().__init__()
        name = type(self).__name__
        self.num_features = positive_int(name, "num_features", num_features)
        if momentum is not None and (isinstance(momentum, bool) or not isinstance(momentum, (int, float))
                                     or not 0.0 <= momentum <= 1.0):
            raise ValueError(f"{name}(): momentum must be a number in [0, 1] or None (a cumulative average), "
                             f"got {momentum!r}")
        self.eps, self.momentum, self.affine = eps, momentum, affine
        self.track_running_stats = track_running_stats
        d = float_dtype(name, dtype)
        _affine(self, (num_features,), affine, d, device)
        if track_running_stats:
            self.register_buffer("running_mean", _api.zeros((num_features,), dtype=d, device=device))
            self.register_buffer("running_var", _api.ones((num_features,), dtype=d, device=device))
            self.register_buffer("num_batches_tracked", _api.zeros((), dtype=_dt.int64, device=device))
        else:
            for b in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(b, None)

    def forward(self, x):
        name = type(self).__name__
        if getattr(x, "ndim", None) not in self._ranks:
            raise ValueError(f"{name}(): input must be {' or '.join(f'{r}-D' for r in self._ranks)} "
                             f"(N, C{', L' if 3 in self._ranks else ''}{', H, W' if 4 in self._ranks else ''}), "
                             f"got shape {getattr(x, 'shape', type(x).__name__)}")
        if x.shape[1] != self.num_features:
            raise ValueError(f"{name}(): input has {x.shape[1]} channels (shape {x.shape}) but num_features="
                             f"{self.num_features}")
        momentum = self.momentum
        if self.training and self.track_running_stats:
            with no_grad():
                self.num_batches_tracked += 1
            if momentum is None:  # the cumulative moving average
                momentum = 1.0 / float(self.num_batches_tracked.item())
        batch_stats = self.training or not self.track_running_stats
        update = self.training and self.track_running_stats
        return F.batch_norm(x, self.running_mean if update or not batch_stats else None,
                            self.running_var if update or not batch_stats else None, self.weight, self.bias,
                            batch_stats, 0.0 if momentum is None else momentum, self.eps)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            with no_grad():
                for b, v in (("running_mean", 0), ("running_var", 1), ("num_batches_tracked", 0)):
                    t = getattr(self, b)
                    t[...] = v

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalization of (N, C) or (N, C, L). Training normalizes with the batch's statistics
    and updates ``running_mean``/``running_var`` (unbiased) by ``momentum``; eval uses them."""

    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalization of (N, C, H, W); see :class:`BatchNorm1d`."""

    _ranks = (4,)


class LayerNorm(Module):
    """Normalizes over the trailing ``normalized_shape`` axes, then scales and shifts (elementwise_affine)."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True, *,
                 dtype=None, device=None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        for i, n in enumerate(shape):
            positive_int("LayerNorm", f"normalized_shape[{i}]", n)
        self.normalized_shape, self.eps, self.elementwise_affine = shape, eps, elementwise_affine
        d = float_dtype("LayerNorm", dtype)
        _affine(self, shape, elementwise_affine, d, device)
        if elementwise_affine and not bias:
            self.bias = None

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class GroupNorm(Module):
    """Normalizes (N, C, ...) over groups of ``num_channels / num_groups`` channels, then a per-channel affine."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, *, dtype=None,
                 device=None):
        super().__init__()
        positive_int("GroupNorm", "num_groups", num_groups)
        positive_int("GroupNorm", "num_channels", num_channels)
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm(): num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        _affine(self, (num_channels,), affine, float_dtype("GroupNorm", dtype), device)

    def forward(self, x):
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"
