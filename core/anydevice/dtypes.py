"""Kept for existing imports: ``anydevice.dtypes`` is now ``anydevice.base.dtypes`` (the same module object)."""
import sys

from anydevice.base import dtypes as _module

sys.modules[__name__] = _module
