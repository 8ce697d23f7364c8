"""The op registry and the definitions of every op (one module per Array API category).

Importing this package defines every op; :mod:`anydevice.ops.registry` holds them.
"""
from anydevice.ops import (  # noqa: F401
    creation,
    elementwise,
    fft,
    indexing,
    linalg,
    linalg_ext,
    manipulation,
    nn,
    optim,
    random,
    searching,
    statistical,
)


def load_all() -> None:
    """Every op is defined when this package is imported; kept for callers that say so explicitly."""
