"""Kept for existing imports: ``anydevice.dispatch`` is now ``anydevice.engine.dispatch`` (the same module object)."""
import sys

from anydevice.engine import dispatch as _module

sys.modules[__name__] = _module
