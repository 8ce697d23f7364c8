"""A minimal layer API: :class:`Module`, :class:`Linear`, :class:`ReLU`, :class:`Sequential`, :class:`MSELoss`.

Enough to write and train small models on any device::

    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to("npu:0")
    opt = anydevice.optimizer.Adam(model.parameters(), lr=1e-3)
    loss = nn.mse_loss(model(x), y)
    loss.backward(); opt.step(); opt.zero_grad()

Parameters are ordinary tensors with ``requires_grad=True``, held as module attributes.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from anydevice import api as _api
from anydevice import random as _random
from anydevice.base import dtypes as _dt
from anydevice.engine.tensor import Tensor
from anydevice.nn import utils  # noqa: F401 - anydevice.nn.utils.clip_grad_norm_

__all__ = ["Module", "Linear", "ReLU", "Sequential", "MSELoss", "mse_loss", "parameter"]


def parameter(data, dtype=None, device=None) -> Tensor:
    """A leaf tensor that requires gradients (host data is copied to ``device``)."""
    t = _api.asarray(data, dtype=dtype, device=device)
    if isinstance(data, Tensor):
        t = t.detach()
    return t.requires_grad_(True)


class Module:
    """Base class of layers. Subclasses set parameters and sub-modules as attributes and
    implement :meth:`forward`; calling the module calls ``forward``."""

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not implement forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def named_children(self):
        for name, v in vars(self).items():
            if isinstance(v, Module):
                yield name, v
            elif isinstance(v, (list, tuple)):
                for i, m in enumerate(v):
                    if isinstance(m, Module):
                        yield f"{name}.{i}", m

    def named_parameters(self, prefix: str = ""):
        """``(dotted name, tensor)`` for every parameter, depth-first in attribute order."""
        for name, v in vars(self).items():
            if isinstance(v, Tensor) and v.requires_grad:
                yield prefix + name, v
        for name, m in self.named_children():
            yield from m.named_parameters(f"{prefix}{name}.")

    def parameters(self) -> list:
        return [p for _, p in self.named_parameters()]

    def to(self, device=None, dtype=None) -> Module:
        """Move (and/or cast) every parameter; returns ``self``.

        Parameters keep their identity (an optimizer built earlier still holds them), their
        gradients are cleared.
        """
        if dtype is not None and _dt.dtype(dtype).kind != "float":
            raise TypeError(f"Module.to(): parameters must stay real floating, not {_dt.dtype(dtype).name}")
        for p in self.parameters():
            _move(p, p.detach().to(device, dtype))
        return self

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.clear_grad()

    clear_gradients = zero_grad

    def state_dict(self) -> dict:
        """``{name: numpy array}`` of every parameter (host copies)."""
        return {n: p.numpy() for n, p in self.named_parameters()}

    def load_state_dict(self, state: dict, strict: bool = True) -> LoadResult:
        """Set parameters from ``state`` (``{name: numpy array or Tensor}``, as :meth:`state_dict` or
        :func:`anydevice.load` give), keeping each parameter's device and dtype.

        ``strict=True``: a missing or unexpected key is a ``KeyError`` listing all of them (and any
        shape mismatch); ``strict=False`` loads the names both sides have. A shape mismatch is a
        ``ValueError`` naming the key and both shapes. Every value is checked and converted before
        any parameter is set, so on an error the module is unchanged. Returns the missing and
        unexpected keys.
        """
        if not isinstance(state, Mapping):
            raise TypeError(f"load_state_dict(): state must be a mapping of names to arrays, not {type(state).__name__}")
        params = dict(self.named_parameters())
        values = {n: v if isinstance(v, Tensor) else np.asarray(v) for n, v in state.items() if n in params}
        missing, unexpected = [n for n in params if n not in state], [k for k in state if k not in params]
        shapes = [f"{n} has shape {params[n].shape} in the model but {tuple(v.shape)} in the state"
                  for n, v in values.items() if tuple(v.shape) != params[n].shape]
        if strict and (missing or unexpected):
            raise KeyError(f"load_state_dict(): missing keys {missing}, unexpected keys {unexpected}"
                           + "".join(f"; {s}" for s in shapes) + f"; the model's keys are {list(params)}; nothing was loaded")
        if shapes:
            raise ValueError(f"load_state_dict(): {'; '.join(shapes)}; nothing was loaded")
        new = {n: _api.asarray(v, dtype=params[n].dtype, device=params[n].device) for n, v in values.items()}
        for n, v in new.items():
            _move(params[n], v)
        return LoadResult(missing, unexpected)

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={m!r}" for n, m in self.named_children())
        return f"{type(self).__name__}({self.extra_repr()}{', ' if inner and self.extra_repr() else ''}{inner})"

    def extra_repr(self) -> str:
        return ""


class LoadResult(NamedTuple):
    """What :meth:`Module.load_state_dict` did not match: parameters the state lacked, keys it had extra."""

    missing_keys: list
    unexpected_keys: list


def _move(p: Tensor, value: Tensor) -> None:
    """Make parameter ``p`` hold ``value`` (any device/dtype), clearing its gradient."""
    p._buf, p.device, p.dtype, p.shape = value._buf, value.device, value.dtype, value.shape
    p.clear_grad()


class Linear(Module):
    """``y = x @ weight.T + bias`` with ``weight`` of shape ``(out_features, in_features)``.

    Weights start uniform in ``±1/sqrt(in_features)`` (the usual default), drawn from ``rng``: an
    :class:`anydevice.random.Generator`, by default the default generator of ``device`` (so
    :func:`anydevice.manual_seed` fixes them, with the same values on every device), or a
    ``numpy.random.Generator`` (drawn in float64).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, dtype=None, device=None, rng=None):
        for n, v in (("in_features", in_features), ("out_features", out_features)):
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"Linear(): {n} must be a positive int, got {v!r}")
        self.in_features, self.out_features = in_features, out_features
        d = _dt.dtype(dtype) if dtype is not None else _dt.float32
        if d.kind != "float":
            raise TypeError(f"Linear(): parameters must be a real floating dtype, not {d.name}")
        bound = 1.0 / math.sqrt(in_features)
        self.weight = parameter(_init_uniform(rng, bound, (out_features, in_features), d, device), dtype=d, device=device)
        self.bias = parameter(_init_uniform(rng, bound, (out_features,), d, device), dtype=d, device=device) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        if self.bias is None:
            return _api.matmul(x, _api.matrix_transpose(self.weight))
        return _api.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def _init_uniform(rng, bound: float, shape: tuple, d, device):
    """Initial values from ``rng`` (None: ``device``'s default generator), computed on the cpu: a
    generator's numbers are the same on every device, so this needs no kernel of ``device``."""
    if isinstance(rng, np.random.Generator):
        return rng.uniform(-bound, bound, shape)
    g = rng if rng is not None else _random.default_generator(device)
    return _random.uniform(-bound, bound, shape, generator=g, dtype=d, device="cpu")


class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return _api.relu(x)


class Sequential(Module):
    """Applies its modules in order."""

    def __init__(self, *modules: Module):
        for i, m in enumerate(modules):
            if not isinstance(m, Module):
                raise TypeError(f"Sequential(): argument {i} is a {type(m).__name__}, not a Module")
        self.layers = list(modules)

    def forward(self, x):
        for m in self.layers:
            x = m(x)
        return x


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
        self.reduction = reduction

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return mse_loss(input, target, self.reduction)
