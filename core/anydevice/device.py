"""Kept for existing imports: ``anydevice.device`` is now ``anydevice.api.device`` (the same module object)."""
import sys

from anydevice.api import device as _module

sys.modules[__name__] = _module
