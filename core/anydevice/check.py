"""Kept for existing imports: ``anydevice.check`` is now ``anydevice.tools.check`` (the same package)."""
import sys

from anydevice.tools import check as _module

if __name__ == "__main__":  # python -m anydevice.check
    sys.exit(_module.main())
sys.modules[__name__] = _module
