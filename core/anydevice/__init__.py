"""anydevice: a pluggable hardware-backend abstraction layer for a Python tensor library.

    import anydevice as ad
    ad.set_device("npu:0")
    x = ad.ones((2, 3)) * 2

Backends are plugins discovered from entry points in group ``anydevice.backends``; see
``anydevice.backend`` for the contract and ``anydevice check`` for a health report.
"""
from __future__ import annotations

import math as _math

from . import api as _api
from .api import *  # noqa: F401,F403 - the op functions
from .autograd import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .backend import API_VERSION
from .devices import Device, device_guard, get_device, set_device
from .dtypes import (  # noqa: F401
    DType, bfloat16, can_cast, complex64, complex128, float16, float32, float64, int8, int16, int32, int64,
    isdtype, result_type, uint8, uint16, uint32, uint64,
)
from .dtypes import bool_ as bool  # noqa: A001 - Array API name
from .dispatch import FallbackWarning, fallback_counts
from .errors import (
    AnyDeviceError, DeviceError, DeviceUnavailableError, FallbackError, OutOfMemoryError, PluginError,
    UnsupportedError,
)
from .tensor import Tensor, install_operators as _install_operators

__version__ = "0.1.0"
e, pi, inf, nan, newaxis = _math.e, _math.pi, _math.inf, _math.nan, None

_install_operators()

_LAZY = {"device", "nn", "optimizer", "utils", "profiler", "distributed", "plugins", "cli", "backend", "dispatch"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'anydevice' has no attribute {name!r}")


def __array_namespace_info__():
    from ._info import Info

    return Info()


def finfo(d):
    import numpy as _np

    return _np.finfo(d.dtype.numpy if isinstance(d, Tensor) else _api._dt.dtype(d).numpy)


def iinfo(d):
    import numpy as _np

    return _np.iinfo(d.dtype.numpy if isinstance(d, Tensor) else _api._dt.dtype(d).numpy)
