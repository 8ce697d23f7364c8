""":class:`SyncBatchNorm`: batch normalization with the statistics of the global batch.

In training, every rank sums its slice per channel (the values and their squares, and the count)
and the sums are all-reduced, so each rank normalizes with the mean and variance of the whole
global batch, as one process training on it would. The all_reduce is recorded for autograd: its
gradient is the all_reduce of the gradients, so each rank's input gets the gradient of the global
loss through the shared statistics. Outside training (or in a single process) it is the plain
batch norm. :meth:`SyncBatchNorm.convert_sync_batchnorm` swaps every BatchNorm of a model.
"""
from __future__ import annotations

from anydevice import api as _api
from anydevice.base import dtypes as _dt
from anydevice.engine.graph import Node, is_grad_enabled, no_grad
from anydevice.nn.layers.norm import _BatchNorm

from .collectives import ReduceOp, all_reduce
from .group import get_world_size, is_initialized, resolve

__all__ = ["SyncBatchNorm"]


class _SumOverRanks:
    """The recorded all_reduce(SUM): every rank's output is the sum of every rank's input, so the
    gradient of an input is the sum of every rank's output gradient."""

    name = "all_reduce_sum"
    differentiable = True

    @staticmethod
    def vjp(xp, g, inputs, out, group=None):
        g = g.detach()
        all_reduce(g, ReduceOp.SUM, group=group)
        return (g,)


def sum_over_ranks(x, group=None):
    """``all_reduce(SUM)`` of ``x`` as a new tensor, differentiable (every rank must call backward)."""
    y = x.detach()
    all_reduce(y, ReduceOp.SUM, group=group)   # rebinds y's buffer; x keeps its own
    if x._node is not None and is_grad_enabled():
        y._node = Node(_SumOverRanks, {"group": group}, (None,), None, (x._node,), (x.dtype,))
    return y


class SyncBatchNorm(_BatchNorm):
    """Batch normalization of (N, C, ...) whose training statistics are those of the global batch over
    the ranks of ``process_group`` (default: the world); PyTorch's ``nn.SyncBatchNorm``."""

    _ranks = (2, 3, 4, 5)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, process_group=None, *, dtype=None, device=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, dtype=dtype, device=device)
        self.process_group = process_group

    def forward(self, x):
        if not (self.training and is_initialized()
                and get_world_size(resolve(self.process_group, "SyncBatchNorm")) > 1):
            return super().forward(x)
        if getattr(x, "ndim", None) not in self._ranks or x.shape[1] != self.num_features:
            raise ValueError(f"SyncBatchNorm(): input must be (N, {self.num_features}, ...) with 2 to 5 dimensions, "
                             f"got shape {getattr(x, 'shape', type(x).__name__)}")
        c = self.num_features
        axes = (0,) + tuple(range(2, x.ndim))
        xf = _api.astype(x, _dt.float32) if x.dtype in (_dt.float16, _dt.bfloat16) else x
        count = _api.full((1,), float(x.size // c), dtype=xf.dtype, device=x.device)
        sums = sum_over_ranks(_api.concat([_api.sum(xf, axis=axes), _api.sum(xf * xf, axis=axes), count]),
                              self.process_group)
        total = float(sums[2 * c].item())
        mean = sums[:c] / total
        var = sums[c:2 * c] / total - mean * mean
        if self.track_running_stats:
            self._update_running(mean, var, total)
        mean, var = _api.astype(mean, x.dtype), _api.astype(var, x.dtype)
        w = self.weight if self.weight is not None else _api.ones((c,), dtype=x.dtype, device=x.device)
        b = self.bias if self.bias is not None else _api.zeros((c,), dtype=x.dtype, device=x.device)
        return _api.batch_norm(x, mean, var, w, b, eps=self.eps)

    def _update_running(self, mean, var, total: float) -> None:
        with no_grad():
            self.num_batches_tracked += 1
            m = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked.item())
            rm, rv = self.running_mean, self.running_var
            rm[...] = rm * (1.0 - m) + _api.astype(mean.detach(), rm.dtype) * m
            rv[...] = rv * (1.0 - m) + _api.astype(var.detach(), rv.dtype) * (total / (total - 1)) * m

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """``module`` with every BatchNorm (1d/2d) replaced by a :class:`SyncBatchNorm` holding its
        parameters, buffers and mode (the module itself when it is one)."""
        if isinstance(module, _BatchNorm) and not isinstance(module, cls):
            own = list(module.named_parameters(recurse=False)) + list(module.named_buffers(recurse=False))
            ref = next((t for _, t in own if t.dtype.kind == "float"), None)
            sync = cls(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats,
                       process_group, dtype=None if ref is None else ref.dtype,
                       device=None if ref is None else ref.device)
            with no_grad():
                for name, t in own:
                    getattr(sync, name)._rebind(t.detach())
            sync.train(module.training)
            return sync
        for name, child in list(module.named_children()):
            new = cls.convert_sync_batchnorm(child, process_group)
            if new is not child:
                _replace(module, name, new)
        return module


def _replace(parent, name: str, child) -> None:
    """Put ``child`` in ``parent`` under ``name``: an item of a Sequential/ModuleList/ModuleDict, else an attribute."""
    if hasattr(type(parent), "__setitem__"):
        parent[name if hasattr(parent, "keys") else int(name)] = child
    else:
        setattr(parent, name, child)
