"""The op registry and the definitions of every op (one module per Array API category).

Importing this package defines every op; :mod:`anydevice.ops.registry` holds them.
"""
from anydevice.ops import creation, elementwise, indexing, linalg, manipulation, nn, random, statistical  # noqa: F401


def load_all() -> None:
    """Every op is defined when this package is imported; kept for callers that say so explicitly."""
