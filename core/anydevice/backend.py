"""Kept for existing imports: ``anydevice.backend`` is now ``anydevice.runtime.contract`` (the same module object)."""
import sys

from anydevice.runtime import contract as _module

sys.modules[__name__] = _module
