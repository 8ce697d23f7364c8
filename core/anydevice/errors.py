"""Kept for existing imports: ``anydevice.errors`` is now ``anydevice.base.errors`` (the same module object)."""
import sys

from anydevice.base import errors as _module

sys.modules[__name__] = _module
