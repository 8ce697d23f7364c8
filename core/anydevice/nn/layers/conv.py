"""Convolutions: :class:`Conv1d`, :class:`Conv2d`, :class:`ConvTranspose2d` (PyTorch's arguments,
weight layouts and default initialization)."""
from __future__ import annotations

import math

import anydevice.nn.functional as F
from anydevice.nn.layers.linear import float_dtype, new_weight, positive_int, reset_kaiming
from anydevice.nn.module import Module

__all__ = ["Conv1d", "Conv2d", "ConvTranspose2d"]


def _tuple(layer: str, name: str, v, n: int, low: int) -> tuple:
    vals = (v,) * n if isinstance(v, int) and not isinstance(v, bool) else tuple(v) if isinstance(v, (tuple, list)) else None
    if vals is None or len(vals) != n or any(not isinstance(i, int) or isinstance(i, bool) or i < low for i in vals):
        raise ValueError(f"{layer}(): {name} must be an int >= {low} or a tuple of {n} such ints, got {v!r}")
    return vals


class _ConvNd(Module):
    _dims = 2
    _transposed = False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                 padding_mode="zeros", *, output_padding=0, dtype=None, device=None, rng=None):
        super().__init__()
        name, n = type(self).__name__, self._dims
        self.in_channels = positive_int(name, "in_channels", in_channels)
        self.out_channels = positive_int(name, "out_channels", out_channels)
        self.groups = positive_int(name, "groups", groups)
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{name}(): in_channels ({in_channels}) and out_channels ({out_channels}) must both be "
                             f"divisible by groups ({groups})")
        if padding_mode != "zeros":
            raise ValueError(f"{name}(): padding_mode {padding_mode!r} is not supported; allowed: 'zeros'")
        self.kernel_size = _tuple(name, "kernel_size", kernel_size, n, 1)
        self.stride = _tuple(name, "stride", stride, n, 1)
        self.dilation = _tuple(name, "dilation", dilation, n, 1)
        if isinstance(padding, str):
            if padding not in ("same", "valid") or self._transposed:
                raise ValueError(f"{name}(): padding {padding!r} is not supported; allowed: 'same', 'valid' or ints"
                                 if not self._transposed else f"{name}(): padding must be ints, not {padding!r}")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ValueError(f"{name}(): padding='same' needs stride 1, got stride {stride!r}")
            self.padding = padding
        else:
            self.padding = _tuple(name, "padding", padding, n, 0)
        self.output_padding = _tuple(name, "output_padding", output_padding, n, 0)
        d = float_dtype(name, dtype)
        shape = ((in_channels, out_channels // groups) if self._transposed else (out_channels, in_channels // groups))
        self.weight = new_weight(shape + self.kernel_size, d, device)
        self.register_parameter("bias", new_weight((out_channels,), d, device) if bias else None)
        reset_kaiming(self, shape[1] * math.prod(self.kernel_size), rng)  # fan_in as PyTorch computes it

    def _check_input(self, x) -> None:
        n = self._dims
        if getattr(x, "ndim", None) not in (n + 1, n + 2):
            layout = "(N, C, L)" if n == 1 else "(N, C, H, W)"
            raise ValueError(f"{type(self).__name__}(): input must be {n + 1}-D (C, ...) or {n + 2}-D {layout}, got "
                             f"shape {getattr(x, 'shape', type(x).__name__)}")
        c = x.shape[-n - 1]
        if c != self.in_channels:
            raise ValueError(f"{type(self).__name__}(): input has {c} channels (shape {x.shape}) but the layer "
                             f"expects in_channels={self.in_channels}")

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self._dims:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._dims:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        return s + ("" if self.bias is not None else ", bias=False")


class Conv1d(_ConvNd):
    """1-D convolution of (N, C, L) or (C, L); weight (out, in / groups, k)."""

    _dims = 1

    def forward(self, x):
        self._check_input(x)
        return F.conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class Conv2d(_ConvNd):
    """2-D convolution of (N, C, H, W) or (C, H, W); weight (out, in / groups, kh, kw); ``padding``
    an int, a pair, ``"same"`` or ``"valid"``. Initialized as PyTorch's (uniform ±1/sqrt(fan_in))."""

    def forward(self, x):
        self._check_input(x)
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class ConvTranspose2d(_ConvNd):
    """Transposed 2-D convolution; weight (in, out / groups, kh, kw)."""

    _transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros", *, dtype=None, device=None, rng=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, padding_mode,
                         output_padding=output_padding, dtype=dtype, device=device, rng=rng)

    def forward(self, x):
        self._check_input(x)
        return F.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding, self.output_padding,
                                  self.groups, self.dilation)
