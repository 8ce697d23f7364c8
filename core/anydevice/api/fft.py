"""``anydevice.fft``: the Array API Fourier-transform extension (registry ops of ``anydevice.ops.fft``)."""
from __future__ import annotations

from anydevice.api import _extension

globals().update(_extension.functions("fft", __name__))
__all__ = sorted(op.name for op in _extension.ops("fft"))
