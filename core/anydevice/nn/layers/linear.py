"""Linear layers and shape helpers: :class:`Linear`, :class:`Bilinear`, :class:`Identity`, :class:`Flatten`,
:class:`Unflatten`."""
from __future__ import annotations

import math

import numpy as np

import anydevice.nn.init as init
from anydevice import api as _api
from anydevice import random as _random
from anydevice.base import dtypes as _dt
from anydevice.nn.module import Module, parameter

__all__ = ["Linear", "Bilinear", "Identity", "Flatten", "Unflatten", "positive_int", "float_dtype", "new_weight"]


def positive_int(layer: str, name: str, v) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise ValueError(f"{layer}(): {name} must be a positive int, got {v!r}")
    return v


def float_dtype(layer: str, dtype):
    d = _dt.dtype(dtype) if dtype is not None else _dt.float32
    if d.kind != "float":
        raise TypeError(f"{layer}(): parameters must be a real floating dtype, not {d.name}")
    return d


def new_weight(shape: tuple, d, device, rng=None, bound: float | None = None):
    """A parameter of ``shape`` on ``device``, uniform in ``±bound`` when given (drawn from ``rng``:
    an :class:`anydevice.random.Generator`, a ``numpy.random.Generator``, or None for the device's
    default generator), else zeros."""
    if bound is None:
        return parameter(np.zeros(shape), dtype=d, device=device)
    if isinstance(rng, np.random.Generator):
        return parameter(rng.uniform(-bound, bound, shape), dtype=d, device=device)
    p = parameter(np.zeros(shape), dtype=d, device=device)
    g = rng if rng is not None else _random.default_generator(device)
    return init.uniform_(p, -bound, bound, generator=g)


def reset_kaiming(layer: Module, fan_in: int, rng=None) -> None:
    """PyTorch's default of Linear and Conv: weight kaiming_uniform(a=sqrt(5)), i.e. uniform in
    ``±1/sqrt(fan_in)``, bias uniform in ``±1/sqrt(fan_in)``."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    for name in ("weight", "bias"):
        p = getattr(layer, name, None)
        if p is not None:
            setattr(layer, name, new_weight(p.shape, p.dtype, p.device, rng, bound))


class Linear(Module):
    """``y = x @ weight.T + bias`` with ``weight`` of shape ``(out_features, in_features)``.

    Weights and bias start uniform in ``±1/sqrt(in_features)`` (PyTorch's kaiming_uniform with
    a=sqrt(5)), drawn from ``rng``: an :class:`anydevice.random.Generator`, by default the default
    generator of ``device`` (so :func:`anydevice.manual_seed` fixes them, with the same values on
    every device), or a ``numpy.random.Generator`` (drawn in float64).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, dtype=None, device=None, rng=None):
        super().__init__()
        self.in_features = positive_int("Linear", "in_features", in_features)
        self.out_features = positive_int("Linear", "out_features", out_features)
        d = float_dtype("Linear", dtype)
        self.weight = new_weight((out_features, in_features), d, device)
        self.register_parameter("bias", new_weight((out_features,), d, device) if bias else None)
        reset_kaiming(self, in_features, rng)

    def forward(self, x):
        if self.bias is None:
            return _api.matmul(x, _api.matrix_transpose(self.weight))
        return _api.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Bilinear(Module):
    """``y[..., k] = x1 @ weight[k] @ x2 + bias[k]``; weight ``(out, in1, in2)``, init ``±1/sqrt(in1)``."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True, *, dtype=None,
                 device=None, rng=None):
        super().__init__()
        dims = [positive_int("Bilinear", n, v) for n, v in
                (("in1_features", in1_features), ("in2_features", in2_features), ("out_features", out_features))]
        self.in1_features, self.in2_features, self.out_features = dims
        d = float_dtype("Bilinear", dtype)
        bound = 1.0 / math.sqrt(in1_features)
        self.weight = new_weight((out_features, in1_features, in2_features), d, device, rng, bound)
        self.register_parameter("bias", new_weight((out_features,), d, device, rng, bound) if bias else None)

    def forward(self, x1, x2):
        # (..., 1, 1, in1) @ (out, in1, in2) -> (..., out, 1, in2); times x2 summed over in2
        t = _api.matmul(_api.expand_dims(_api.expand_dims(x1, axis=-2), axis=-2), self.weight)
        y = _api.sum(_api.squeeze(t, axis=-2) * _api.expand_dims(x2, axis=-2), axis=-1)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class Identity(Module):
    """Returns its input (constructor arguments are ignored, as PyTorch's)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        return x


class Flatten(Module):
    """Merges the axes ``start_dim`` .. ``end_dim`` (by default all but the batch axis)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Splits axis ``dim`` into ``unflattened_size``."""

    def __init__(self, dim: int, unflattened_size: tuple):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x):
        d = self.dim % x.ndim if -x.ndim <= self.dim < x.ndim else self.dim
        if not 0 <= d < x.ndim:
            raise ValueError(f"Unflatten(): dim {self.dim} is out of range for a {x.ndim}-D input")
        return _api.reshape(x, x.shape[:d] + self.unflattened_size + x.shape[d + 1:])
