"""Initialization of parameters in place, with PyTorch's names and formulas.

Every draw comes from :mod:`anydevice.random` (the Philox stream): ``generator=`` picks the
generator, by default the default generator of the tensor's device. Numbers are drawn on the cpu
and copied to the tensor's device, so one seed gives the same weights on every device and no
device needs a kernel for it. Each function returns its tensor.
"""
from __future__ import annotations

import math

import numpy as np

from anydevice import api as _api
from anydevice import random as _random
from anydevice.base import dtypes as _dt
from anydevice.engine.graph import no_grad
from anydevice.engine.tensor import Tensor

__all__ = ["calculate_gain", "uniform_", "normal_", "constant_", "zeros_", "ones_", "xavier_uniform_",
           "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "trunc_normal_", "eye_",
           "_calculate_fan_in_and_fan_out"]

_LINEAR = ("linear", "identity", "sigmoid", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d")


def calculate_gain(nonlinearity: str, param=None) -> float:
    """The recommended gain for ``nonlinearity``: 1 (linear, conv, sigmoid), 5/3 (tanh), sqrt(2)
    (relu), sqrt(2 / (1 + slope**2)) (leaky_relu, slope ``param``, default 0.01), 3/4 (selu)."""
    if nonlinearity in _LINEAR:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "selu":
        return 3.0 / 4
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise TypeError(f"calculate_gain(): param (the negative slope) must be a number, not {type(slope).__name__}")
        return math.sqrt(2.0 / (1 + slope ** 2))
    raise ValueError(f"calculate_gain(): unsupported nonlinearity {nonlinearity!r}; use one of "
                     f"{', '.join(_LINEAR + ('tanh', 'relu', 'leaky_relu', 'selu'))}")


def _check(name: str, t) -> Tensor:
    if not isinstance(t, Tensor):
        raise TypeError(f"{name}(): tensor must be an anydevice Tensor, not {type(t).__name__}")
    if t.dtype.kind != "float":
        raise TypeError(f"{name}(): tensor must be real floating, not {t.dtype.name}")
    return t


def _calculate_fan_in_and_fan_out(t: Tensor, name: str = "init") -> tuple:
    """(fan_in, fan_out) of a weight of shape ``(out, in, *kernel)``."""
    if t.ndim < 2:
        raise ValueError(f"{name}(): fan in and fan out need a tensor of at least 2 dimensions, got shape {t.shape}")
    rf = math.prod(t.shape[2:])
    return t.shape[1] * rf, t.shape[0] * rf


def _fan(t: Tensor, mode: str, name: str) -> int:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"{name}(): mode must be 'fan_in' or 'fan_out', not {mode!r}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(t, name)
    return fan_in if mode == "fan_in" else fan_out


def _draw_dtype(t: Tensor):
    return t.dtype if t.dtype in (_dt.float32, _dt.float64) else _dt.float32


def _assign(t: Tensor, values) -> Tensor:
    """Write ``values`` (a cpu Tensor or a numpy array) into ``t``, keeping its identity, device and dtype."""
    with no_grad():
        v = _api.asarray(values, dtype=t.dtype, device=t.device)
    t._buf = v._buf
    return t


def _gen(t: Tensor, generator):
    return generator if generator is not None else _random.default_generator(t.device)


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    """Fill with numbers uniform in ``[a, b)``."""
    _check("uniform_", tensor)
    if not a <= b:
        raise ValueError(f"uniform_(): a must be <= b, got a={a}, b={b}")
    return _assign(tensor, _random.uniform(a, b, tensor.shape, generator=_gen(tensor, generator),
                                           dtype=_draw_dtype(tensor), device="cpu"))


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    """Fill with normal numbers of mean ``mean`` and standard deviation ``std``."""
    _check("normal_", tensor)
    if not std >= 0:
        raise ValueError(f"normal_(): std must be >= 0, got {std}")
    return _assign(tensor, _random.normal(mean, std, tensor.shape, generator=_gen(tensor, generator),
                                          dtype=_draw_dtype(tensor), device="cpu"))


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0,
                  generator=None) -> Tensor:
    """Fill with normal numbers conditioned on ``[a, b]`` (absolute bounds, as PyTorch's): values
    outside are redrawn from the generator until every one lies inside."""
    _check("trunc_normal_", tensor)
    if not std > 0 or not a < b:
        raise ValueError(f"trunc_normal_(): need std > 0 and a < b, got std={std}, a={a}, b={b}")
    if (a - mean) / std > 6 or (b - mean) / std < -6:
        raise ValueError(f"trunc_normal_(): [a, b] = [{a}, {b}] lies more than 6 std from the mean {mean}")
    g, n = _gen(tensor, generator), tensor.size
    out = np.empty(0)
    while out.size < n:
        draw = _random.normal(mean, std, (max(n, 16),), generator=g, dtype=_dt.float64, device="cpu").numpy()
        out = np.concatenate([out, draw[(draw >= a) & (draw <= b)]])
    return _assign(tensor, out[:n].reshape(tensor.shape))


def constant_(tensor: Tensor, val: float) -> Tensor:
    _check("constant_", tensor)
    return _assign(tensor, np.full(tensor.shape, val, dtype=np.float64))


def zeros_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 0.0)


def ones_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 1.0)


def eye_(tensor: Tensor) -> Tensor:
    """The identity matrix in a 2-D tensor."""
    _check("eye_", tensor)
    if tensor.ndim != 2:
        raise ValueError(f"eye_(): tensor must be 2-D, got shape {tensor.shape}")
    return _assign(tensor, np.eye(*tensor.shape))


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Uniform in ``±gain * sqrt(6 / (fan_in + fan_out))`` (Glorot and Bengio, 2010)."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(_check("xavier_uniform_", tensor), "xavier_uniform_")
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Normal with std ``gain * sqrt(2 / (fan_in + fan_out))``."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(_check("xavier_normal_", tensor), "xavier_normal_")
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def kaiming_uniform_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                     generator=None) -> Tensor:
    """Uniform in ``±gain * sqrt(3 / fan)`` (He et al., 2015), ``gain = calculate_gain(nonlinearity, a)``."""
    fan = _fan(_check("kaiming_uniform_", tensor), mode, "kaiming_uniform_")
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / fan)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                    generator=None) -> Tensor:
    """Normal with std ``gain / sqrt(fan)``."""
    fan = _fan(_check("kaiming_normal_", tensor), mode, "kaiming_normal_")
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan), generator)
