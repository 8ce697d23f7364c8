"""Kept for existing imports: the plugin contract now lives in :mod:`anydevice.runtime`.

``from anydevice.plugins import hookimpl`` keeps working (and stays the documented spelling);
``anydevice.plugins.hookspecs`` and ``anydevice.plugins.manager`` are the modules
:mod:`anydevice.runtime.hookspecs` and :mod:`anydevice.runtime.plugins`.
"""
from anydevice.runtime.markers import hookimpl, hookspec

__all__ = ["hookspec", "hookimpl"]
