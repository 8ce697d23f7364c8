"""Kept for existing imports: ``anydevice.plugins.manager`` is now ``anydevice.runtime.plugins`` (the same module object)."""
import sys

from anydevice.runtime import plugins as _module

sys.modules[__name__] = _module
