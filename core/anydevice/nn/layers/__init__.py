"""The layers of :mod:`anydevice.nn`, one module per family; import them from ``anydevice.nn``."""
