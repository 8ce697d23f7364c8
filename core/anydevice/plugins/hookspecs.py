"""Kept for existing imports: ``anydevice.plugins.hookspecs`` is now ``anydevice.runtime.hookspecs`` (the same module object)."""
import sys

from anydevice.runtime import hookspecs as _module

sys.modules[__name__] = _module
