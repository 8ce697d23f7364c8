"""Kept for existing imports: ``anydevice.optimizer`` is now ``anydevice.optim`` (the same module object)."""
import sys

from anydevice import optim as _module

sys.modules[__name__] = _module
