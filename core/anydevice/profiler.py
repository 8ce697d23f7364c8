"""Kept for existing imports: ``anydevice.profiler`` is now ``anydevice.tools.profiler`` (the same module object)."""
import sys

from anydevice.tools import profiler as _module

sys.modules[__name__] = _module
