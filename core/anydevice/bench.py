"""Kept for existing imports: ``anydevice.bench`` is now ``anydevice.tools.bench`` (the same module object)."""
import sys

from anydevice.tools import bench as _module

sys.modules[__name__] = _module
