"""anydevice: a pluggable hardware-backend abstraction layer for a Python tensor library.

    import anydevice as ad
    ad.set_device("npu:0")
    x = ad.ones((2, 3)) * 2

Backends are plugins discovered from entry points in group ``anydevice.backends``; see
``anydevice.backend`` for the contract and ``anydevice check`` for a health report.
"""
from __future__ import annotations

import math as _math
import sys as _sys

from anydevice.api import *  # noqa: F401,F403 - the op functions and creation
from anydevice.api import fft, linalg  # noqa: F401 - the Array API extensions (anydevice.linalg, anydevice.fft)
from anydevice.api.searching import nonzero, searchsorted, unique_all, unique_counts, unique_inverse  # noqa: F401
from anydevice.base import dtypes as _dt
from anydevice.base.dtypes import (
    DType,
    bfloat16,
    can_cast,
    complex64,
    complex128,
    finfo,
    float16,
    float32,
    float64,
    iinfo,
    int8,
    int16,
    int32,
    int64,
    isdtype,
    result_type,
    uint8,
    uint16,
    uint32,
    uint64,
)
from anydevice.base.dtypes import bool_ as bool  # noqa: A001 - Array API name
from anydevice.base.errors import (
    AnyDeviceError,
    AxisError,
    CheckpointError,
    DeviceError,
    DeviceUnavailableError,
    FallbackError,
    OutOfMemoryError,
    PluginError,
    UnsupportedError,
)
from anydevice.engine import methods as _methods
from anydevice.engine.dispatch import FallbackWarning, fallback_counts
from anydevice.engine.graph import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from anydevice.engine.tensor import Tensor
from anydevice.io import load, save
from anydevice.random import *  # noqa: F403 - Generator, seeding and the random functions
from anydevice.runtime.contract import API_VERSION
from anydevice.runtime.devices import Device, device_guard, get_device, set_device

__version__ = "0.1.0"
e, pi, inf, nan, newaxis = _math.e, _math.pi, _math.inf, _math.nan, None

_methods.install()


#: The version of the Python Array API standard this namespace implements.
__array_api_version__ = "2024.12"
_API_VERSIONS = ("2021.12", "2022.12", "2023.12", "2024.12")


def _array_namespace(self, /, *, api_version=None):
    """The Array API namespace of this tensor: the ``anydevice`` package. ``api_version`` (None:
    the newest) may name any version from 2021.12 to 2024.12; others raise ValueError."""
    if api_version is not None and api_version not in _API_VERSIONS:
        raise ValueError(f"__array_namespace__(): api_version {api_version!r} is not supported; allowed: None, "
                         f"{', '.join(repr(v) for v in _API_VERSIONS)}")
    return _sys.modules[__name__]


Tensor.__array_namespace__ = _array_namespace  # this package is the tensors' Array API namespace
_sys.modules[f"{__name__}.linalg"], _sys.modules[f"{__name__}.fft"] = linalg, fft  # import anydevice.linalg

_LAZY = {"amp", "data", "device", "nn", "optim", "optimizer", "utils", "profiler", "distributed", "plugins", "cli", "backend",
         "dispatch", "runtime", "engine", "api", "ops", "tools", "check", "bench", "dtypes", "errors", "devices",
         "_backend", "jit"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    if name == "compile":  # anydevice.compile is anydevice.jit.compile
        import importlib

        return importlib.import_module(f"{__name__}.jit").compile
    raise AttributeError(f"module 'anydevice' has no attribute {name!r}")


def __array_namespace_info__():
    """The Array API inspection namespace: capabilities(), default_device(), devices(),
    default_dtypes(device=) and dtypes(device=, kind=) of what each device really has."""
    from anydevice.api.info import Info

    return Info()

