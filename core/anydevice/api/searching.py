"""Public functions of the searching and set ops whose Array API signature is not one registry op:
``searchsorted`` with a ``sorter`` tensor."""
from __future__ import annotations

from anydevice.engine.dispatch import xp
from anydevice.engine.tensor import Tensor


def searchsorted(x1, x2, /, *, side="left", sorter=None) -> Tensor:
    """Insertion indices of ``x2`` into the 1-D ``x1`` sorted ascending, or into
    ``take(x1, sorter)`` when ``sorter`` (integer indices that sort ``x1``) is given."""
    if sorter is not None:
        if not isinstance(sorter, Tensor):
            raise TypeError(f"searchsorted(): sorter must be None or an integer tensor, not {type(sorter).__name__}")
        if sorter.dtype.kind not in ("int", "uint"):
            raise TypeError(f"searchsorted(): sorter must be an integer tensor, not {sorter.dtype.name}")
        if isinstance(x1, Tensor) and sorter.shape != x1.shape:
            raise ValueError(f"searchsorted(): sorter must have the shape of x1 {x1.shape}, not {sorter.shape}")
        x1 = xp.take(x1, sorter, axis=0)
    return xp.searchsorted(x1, x2, side=side)


__all__ = ["searchsorted"]
