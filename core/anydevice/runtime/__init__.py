"""The runtime layer: the vendor contract, plugin discovery, and the core's side of devices.

Vendors import from here (or from the long-standing paths ``anydevice.backend`` and
``anydevice.plugins``, kept as aliases)::

    from anydevice.runtime import API_VERSION, DeviceTypeSpec, Runtime, hookimpl

Modules: :mod:`~anydevice.runtime.contract` (what a plugin implements: ``Runtime``,
``DeviceArray``, ``KernelTable``), :mod:`~anydevice.runtime.hookspecs` (the hooks),
:mod:`~anydevice.runtime.plugins` (discovery and per-plugin records),
:mod:`~anydevice.runtime.devices` (what the core builds around a runtime: ``Backend``,
``Device``, the current device), :mod:`~anydevice.runtime.streams`,
:mod:`~anydevice.runtime.allocator`. Importing this package stays cheap: pluggy loads only
when a hook marker is first used.
"""
from __future__ import annotations

from anydevice.runtime.contract import (
    API_VERSION,
    SUPPORTED_API_VERSIONS,
    Block,
    DeviceArray,
    DeviceTypeSpec,
    Kernel,
    KernelContext,
    KernelTable,
    Runtime,
)

__all__ = ["API_VERSION", "SUPPORTED_API_VERSIONS", "Block", "DeviceArray", "DeviceTypeSpec", "Kernel",
           "KernelContext", "KernelTable", "Runtime", "hookimpl", "hookspec"]


def __getattr__(name):
    if name in ("hookimpl", "hookspec"):
        from anydevice.runtime import markers

        return getattr(markers, name)
    raise AttributeError(f"module 'anydevice.runtime' has no attribute {name!r}")
