"""Kept for existing imports: ``anydevice.cli`` is now ``anydevice.tools.cli`` (the same module object)."""
import sys

from anydevice.tools import cli as _module

sys.modules[__name__] = _module
