"""The random functions: each reserves blocks of a generator's stream and calls a random op of
the registry (:mod:`anydevice.ops.random`) with that generator's key and offset.

Arguments are checked here, before anything is drawn, so a bad call never advances a generator.
"""
from __future__ import annotations

from anydevice import api as _api
from anydevice.base import dtypes as _dt
from anydevice.engine.tensor import Tensor
from anydevice.ops import random as _ops
from anydevice.ops.registry import broadcast_shapes
from anydevice.random.generator import Generator, default_generator
from anydevice.runtime.devices import as_device

__all__ = ["rand", "uniform", "randn", "normal", "standard_normal", "randint", "randperm", "bernoulli", "dropout",
           "multinomial"]


def _source(name: str, generator, device):
    """(generator, device) of a draw: ``device``, else the generator's, else the current device."""
    if generator is not None and not isinstance(generator, Generator):
        raise TypeError(f"{name}(): generator must be an anydevice.random.Generator, not {type(generator).__name__}")
    dev = as_device(device) if device is not None or generator is None else generator.device
    return (generator if generator is not None else default_generator(dev)), dev


def _draw(op: str, name: str, generator, device, **attrs) -> Tensor:
    g, dev = _source(name, generator, device)
    key, offset = g.reserve(_ops.stream_blocks(op, attrs))
    return getattr(_api, op)(**attrs, key=key, offset=offset, device=dev)


def _size(name: str, size) -> tuple:
    """``f(2, 3)``, ``f((2, 3))`` and ``f([2, 3])`` name the same shape."""
    if len(size) == 1 and not isinstance(size[0], (int,)) and hasattr(size[0], "__len__"):
        size = size[0]
    return _ops.check_shape(name, tuple(size))


def _uniform(name, low, high, shape, generator, dtype, device) -> Tensor:
    d = _ops.check_dtype(name, dtype, _dt.float32, "float")
    low, high = _ops.check_bounds(name, low, high)
    return _draw("random_uniform", name, generator, device, shape=_ops.check_shape(name, shape), low=low, high=high,
                 dtype=d)


def rand(*size, generator: Generator | None = None, dtype=None, device=None) -> Tensor:
    """Uniform numbers in [0, 1) of shape ``size`` (``rand(2, 3)`` or ``rand((2, 3))``); float32 by default.

    Bit-identical on every device for one generator state: float32 values are multiples of 2**-24
    (float16: 2**-11, bfloat16: 2**-8, float64: 2**-53).
    """
    return _uniform("rand", 0.0, 1.0, _size("rand", size), generator, dtype, device)


def uniform(low=0.0, high=1.0, shape=(), *, generator: Generator | None = None, dtype=None, device=None) -> Tensor:
    """Uniform numbers in [low, high): ``u * (high - low) + low`` in the dtype, ``u`` as in :func:`rand`
    (rounding may give ``high`` itself when ``high - low`` is not a power of two)."""
    return _uniform("uniform", low, high, shape, generator, dtype, device)


def _normal(name, mean, std, shape, generator, dtype, device) -> Tensor:
    d = _ops.check_dtype(name, dtype, _dt.float32, "float")
    mean, std = _ops.check_real(name, "mean", mean), _ops.check_real(name, "std", std)
    if std < 0:
        raise ValueError(f"{name}(): std must be non-negative, got {std}")
    return _draw("random_normal", name, generator, device, shape=_ops.check_shape(name, shape), mean=mean, std=std,
                 dtype=d)


def randn(*size, generator: Generator | None = None, dtype=None, device=None) -> Tensor:
    """Standard normal numbers of shape ``size`` (Box–Muller on :func:`rand`'s uniforms)."""
    return _normal("randn", 0.0, 1.0, _size("randn", size), generator, dtype, device)


def standard_normal(shape=(), dtype=None, device=None, *, generator: Generator | None = None) -> Tensor:
    """Paddle's name for :func:`randn` with a shape argument."""
    return _normal("standard_normal", 0.0, 1.0, shape, generator, dtype, device)


def normal(mean=0.0, std=1.0, shape=(), *, generator: Generator | None = None, dtype=None, device=None) -> Tensor:
    """Normal numbers ``z * std + mean``. ``mean`` and ``std`` are numbers, or floating tensors that
    broadcast with each other and ``shape`` (the result takes their dtype and device)."""
    if not isinstance(mean, Tensor) and not isinstance(std, Tensor):
        return _normal("normal", mean, std, shape, generator, dtype, device)
    ts = [t for t in (mean, std) if isinstance(t, Tensor)]
    for what, v in (("mean", mean), ("std", std)):
        if isinstance(v, Tensor) and v.dtype.kind != "float":
            raise TypeError(f"normal(): {what} must be a real floating tensor, not {v.dtype.name}")
        if not isinstance(v, Tensor):
            _ops.check_real("normal", what, v)
    if isinstance(std, Tensor) and std.size and float(_api.min(std)) < 0:
        raise ValueError("normal(): std must be non-negative everywhere")
    out = broadcast_shapes(_ops.check_shape("normal", shape), *[t.shape for t in ts], opname="normal")
    d = dtype if dtype is not None else ts[0].dtype
    z = _normal("normal", 0.0, 1.0, out, generator, d, ts[0].device if device is None else device)
    return z * std + mean


def randint(low=0, high=None, shape=(), *, generator: Generator | None = None, dtype=None, device=None) -> Tensor:
    """Integers in [low, high) (int64 by default). ``randint(high, shape)`` (PyTorch) and
    ``randint(low, high, shape)`` both work; ``high=None`` means [0, low).

    Lemire's multiply-shift without rejection: for a range ``r`` up to 2**32 each value's
    probability is within ``r / 2**32`` of itself of 1/r; wider ranges use 64 random bits."""
    if isinstance(high, (tuple, list)) and shape == ():
        low, high, shape = 0, low, high
    elif high is None:
        low, high = 0, low
    d = _ops.check_dtype("randint", dtype, _dt.int64, "int")
    low, high = _ops.check_int_range("randint", low, high, d)
    return _draw("random_randint", "randint", generator, device, shape=_ops.check_shape("randint", shape), low=low,
                 high=high, dtype=d)


def randperm(n, *, generator: Generator | None = None, dtype=None, device=None) -> Tensor:
    """A random permutation of ``0 .. n-1`` (int64 by default): the indices sorted by random 32-bit keys."""
    d = _ops.check_dtype("randperm", dtype, _dt.int64, "int")
    return _draw("random_permutation", "randperm", generator, device, n=_ops.check_count("randperm", "n", n, d), dtype=d)


def _probability(name: str, p) -> float:
    p = _ops.check_real(name, "p", p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name}(): p must be a probability in [0, 1], got {p}")
    return p


def _unit_dtype(d):
    """Uniforms compared with probabilities of dtype ``d``: float64 for float64, else float32."""
    return _dt.float64 if d is _dt.float64 else _dt.float32


def _check_unit_tensor(name: str, what: str, t: Tensor) -> None:
    if t.size and not (float(_api.min(t)) >= 0.0 and float(_api.max(t)) <= 1.0):
        raise ValueError(f"{name}(): {what} must hold probabilities in [0, 1]; got values in "
                         f"[{float(_api.min(t))}, {float(_api.max(t))}]")


def bernoulli(p, shape=None, *, generator: Generator | None = None, dtype=None, device=None) -> Tensor:
    """1 with probability ``p``, else 0: ``uniform < p``.

    ``p`` is a number (then ``shape``, default ``()``, and ``dtype``, default float32, say what to
    draw) or a real floating tensor of probabilities (the result has its shape, device and, by
    default, dtype). ``dtype`` may be bool. The uniforms are float32 (float64 for a float64 ``p``).
    """
    if isinstance(p, Tensor):
        if p.dtype.kind != "float":
            raise TypeError(f"bernoulli(): p must be a real floating tensor of probabilities, not {p.dtype.name}")
        if shape is not None and tuple(shape) != p.shape:
            raise ValueError(f"bernoulli(): shape {tuple(shape)} differs from the shape {p.shape} of p")
        if device is not None and as_device(device) != p.device:
            raise ValueError(f"bernoulli(): p is on {p.device}, not on {as_device(device)}; move it with .to()")
        _check_unit_tensor("bernoulli", "p", p)
        out = _dt.dtype(dtype) if dtype is not None else p.dtype
        c = _unit_dtype(p.dtype)
        u = _uniform("bernoulli", 0.0, 1.0, p.shape, generator, c, p.device)
        return _api.astype(_api.less(u, p if p.dtype is c else _api.astype(p, c)), out)
    p = _probability("bernoulli", p)
    out = _dt.dtype(dtype) if dtype is not None else _dt.float32
    u = _uniform("bernoulli", 0.0, 1.0, () if shape is None else shape, generator, _unit_dtype(out), device)
    return _api.astype(_api.less(u, p), out)


def dropout(x: Tensor, p: float = 0.5, training: bool = True, *, generator: Generator | None = None) -> Tensor:
    """Zero each element of ``x`` with probability ``p`` and scale the others by ``1 / (1 - p)``
    (while ``training``; otherwise ``x`` itself). The kept elements are those whose uniform is
    ``>= p``; gradients flow through the kept ones."""
    if not isinstance(x, Tensor) or x.dtype.kind != "float":
        what = x.dtype.name if isinstance(x, Tensor) else type(x).__name__
        raise TypeError(f"dropout(): x must be a real floating tensor, not {what}")
    p = _probability("dropout", p)
    if not isinstance(training, bool):
        raise TypeError(f"dropout(): training must be a bool, not {type(training).__name__}")
    if not training or p == 0.0:
        return x
    u = _uniform("dropout", 0.0, 1.0, x.shape, generator, _unit_dtype(x.dtype), x.device)
    scale = 1.0 / (1.0 - p) if p < 1.0 else 0.0
    mask = _api.where(_api.greater_equal(u, p), _api.full_like(x, scale), _api.zeros_like(x))
    return x * mask


def _scan(x: Tensor) -> Tensor:
    """Inclusive prefix sums along the last axis, added in one fixed order (log2(n) steps)."""
    n, s = x.shape[-1], 1
    while s < n:
        pad = _api.zeros(x.shape[:-1] + (s,), dtype=x.dtype, device=x.device)
        x = x + _api.concat([pad, x[..., :n - s]], axis=-1)
        s *= 2
    return x


def _pick(p: Tensor, u: Tensor) -> Tensor:
    """Category per uniform: rows of ``p`` (R, C), ``u`` (R, S) -> (R, S) int64 by inverse CDF."""
    cdf = _scan(p)
    t = u * cdf[:, -1:]
    count = _api.sum(_api.astype(_api.less_equal(_api.expand_dims(cdf, axis=1), _api.expand_dims(t, axis=2)),
                                 _dt.int64), axis=-1)
    c = p.shape[-1]
    last = (c - 1) - _api.argmax(_api.astype(_api.flip(_api.greater(p, 0.0), axis=-1), _dt.int32), axis=-1)
    return _api.minimum(count, _api.expand_dims(last, axis=-1))  # t == total picks the last positive category


def multinomial(probs: Tensor, num_samples: int = 1, replacement: bool = False, *,
                generator: Generator | None = None) -> Tensor:
    """Category indices drawn with weights ``probs`` (C,) or (R, C) (non-negative, not all zero in a
    row): int64 of shape (num_samples,) or (R, num_samples). Without ``replacement`` a category is
    drawn at most once per row.

    Inverse CDF with prefix sums added in a fixed order, so the indices are the same on every device.
    """
    if not isinstance(probs, Tensor) or probs.dtype.kind != "float":
        what = probs.dtype.name if isinstance(probs, Tensor) else type(probs).__name__
        raise TypeError(f"multinomial(): probs must be a real floating tensor, not {what}")
    if probs.ndim not in (1, 2) or probs.shape[-1] == 0:
        raise ValueError(f"multinomial(): probs must have shape (C,) or (R, C) with C >= 1, got {probs.shape}")
    if not _ops._is_int(num_samples) or num_samples < 1:
        raise ValueError(f"multinomial(): num_samples must be a positive int, got {num_samples!r}")
    if not isinstance(replacement, bool):
        raise TypeError(f"multinomial(): replacement must be a bool, not {type(replacement).__name__}")
    c = _unit_dtype(probs.dtype)
    p = _api.reshape(probs if probs.dtype is c else _api.astype(probs, c), (-1, probs.shape[-1]))
    if not bool(_api.all(_api.isfinite(p))) or float(_api.min(p)) < 0:
        raise ValueError("multinomial(): probs must be finite and non-negative")
    positive = _api.sum(_api.astype(_api.greater(p, 0.0), _dt.int64), axis=-1)
    least = int(_api.min(positive))
    if least == 0:
        raise ValueError("multinomial(): every row of probs needs a positive weight")
    if not replacement and num_samples > least:
        raise ValueError(f"multinomial(): cannot draw {num_samples} samples without replacement from a row with "
                         f"{least} positive weight(s)")
    rows = p.shape[0]
    u = _uniform("multinomial", 0.0, 1.0, (rows, int(num_samples)), generator, c, probs.device)
    if replacement:
        out = _pick(p, u)
    else:
        cats, picks = _api.arange(p.shape[-1], dtype=_dt.int64, device=p.device), []
        for s in range(int(num_samples)):
            k = _pick(p, u[:, s:s + 1])
            picks.append(k)
            p = _api.where(_api.equal(cats, k), _api.zeros_like(p), p)
        out = _api.concat(picks, axis=-1)
    return out if probs.ndim == 2 else _api.reshape(out, (int(num_samples),))
