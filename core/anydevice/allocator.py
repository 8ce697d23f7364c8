"""Kept for existing imports: ``anydevice.allocator`` is now ``anydevice.runtime.allocator`` (the same module object)."""
import sys

from anydevice.runtime import allocator as _module

sys.modules[__name__] = _module
