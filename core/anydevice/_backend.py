"""Kept for existing imports: ``anydevice._backend`` is now ``anydevice.runtime.devices`` (the same module object)."""
import sys

from anydevice.runtime import devices as _module

sys.modules[__name__] = _module
