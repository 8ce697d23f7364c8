"""The environment part of the report: versions, and the ``ANYDEVICE_*`` settings without secrets.

Every ``ANYDEVICE_*`` variable is listed by name; its value is shown only for the known settings
below, which hold no secrets. Any other value (a token a vendor SDK reads, a password in a URL)
is shown as :data:`HIDDEN`.
"""
from __future__ import annotations

import os
import platform
import re
import sys

HIDDEN = "<set, value hidden>"

#: Settings of anydevice and of the backends it ships whose values are shown.
SHOWN = (
    "ANYDEVICE_DEVICE", "ANYDEVICE_BACKENDS", "ANYDEVICE_FALLBACK", "ANYDEVICE_KEEP_UNUSABLE",
    "ANYDEVICE_SIM_CONFIG", "ANYDEVICE_SIM_FAULTS",
    "ANYDEVICE_OPENCL_PLATFORM", "ANYDEVICE_OPENCL_DEVICE_TYPE", "ANYDEVICE_OPENCL_CACHE_DIR", "ANYDEVICE_OPENCL_NATIVE",
    "ANYDEVICE_NATIVE_DISPATCH", "ANYDEVICE_CPU_NATIVE",
)
#: Per-type settings: ``ANYDEVICE_<TYPE>_VISIBLE_DEVICES``, ``ANYDEVICE_PLUGIN_<TYPE>``, ``ANYDEVICE_SIM_<TYPE>_PROFILE``.
SHOWN_PATTERN = re.compile(r"ANYDEVICE_(?:[A-Z0-9_]+_VISIBLE_DEVICES|PLUGIN_[A-Z0-9_]+|SIM_[A-Z0-9_]+_PROFILE)")


def shown(name: str) -> bool:
    return name in SHOWN or SHOWN_PATTERN.fullmatch(name) is not None


def settings(environ=None) -> dict:
    """``{name: value}`` of every ``ANYDEVICE_*`` variable, values of unknown ones hidden."""
    environ = os.environ if environ is None else environ
    return {k: (v if shown(k) else HIDDEN) for k, v in sorted(environ.items()) if k.startswith("ANYDEVICE_")}


def environment() -> dict:
    """Versions of Python, numpy, anydevice and its plugin API, and the ANYDEVICE_* settings."""
    from importlib.metadata import PackageNotFoundError, version

    import numpy as np

    import anydevice
    from anydevice.runtime.contract import API_VERSION, SUPPORTED_API_VERSIONS

    try:
        pluggy_v = version("pluggy")
    except PackageNotFoundError:
        pluggy_v = None
    return {
        "python": platform.python_version(), "python_executable": sys.executable, "platform": platform.platform(),
        "machine": platform.machine(), "numpy": np.__version__, "pluggy": pluggy_v, "anydevice": anydevice.__version__,
        "plugin_api_version": API_VERSION, "supported_plugin_api_versions": list(SUPPORTED_API_VERSIONS),
        "env": settings(), "dispatch_hit": _dispatch_hit(),
    }


def _dispatch_hit() -> str:
    """How the dispatcher runs a call-cache hit: its C extension, or Python (and why)."""
    from anydevice.engine import dispatch

    if dispatch._chit is not None:
        return "C (engine/_hit.c)"
    if os.environ.get("ANYDEVICE_NATIVE_DISPATCH", "1") == "0":
        return "Python (ANYDEVICE_NATIVE_DISPATCH=0)"
    return "Python (the C extension was not built: no C compiler when installed)"
