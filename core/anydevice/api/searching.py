"""Public functions of the searching and set ops whose Array API signature is not one registry op:
``searchsorted`` with a ``sorter`` tensor, ``nonzero`` (a tuple of index arrays) and the
``unique_*`` functions (named tuples with the standard's field names)."""
from __future__ import annotations

from collections import namedtuple

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




def nonzero(x, /) -> tuple:
    """The indices of the non-zero elements of ``x``, one int64 array per dimension (row-major
    order). Their number is counted on the device and read back once (``argwhere``)."""
    if isinstance(x, Tensor) and x.ndim == 0:
        raise ValueError("nonzero(): x must have at least one dimension (a 0-d array has no indices)")
    idx = xp.argwhere(x)
    return tuple(xp.getitem(idx, key=(slice(None), k)) for k in range(idx.shape[1]))


UniqueAllResult = namedtuple("UniqueAllResult", ["values", "indices", "inverse_indices", "counts"])
UniqueCountsResult = namedtuple("UniqueCountsResult", ["values", "counts"])
UniqueInverseResult = namedtuple("UniqueInverseResult", ["values", "inverse_indices"])


def unique_all(x, /, *, size=None) -> UniqueAllResult:
    """Sorted distinct values of ``x`` (NaNs distinct), the flat index of each one's first
    occurrence, the index of every element's value (x's shape) and how often each occurs."""
    return UniqueAllResult(*xp.unique_all(x, size=size))


def unique_counts(x, /, *, size=None) -> UniqueCountsResult:
    """Sorted distinct values of ``x`` (NaNs distinct) and how often each occurs."""
    return UniqueCountsResult(*xp.unique_counts(x, size=size))


def unique_inverse(x, /, *, size=None) -> UniqueInverseResult:
    """Sorted distinct values of ``x`` (NaNs distinct) and the index of every element's value."""
    return UniqueInverseResult(*xp.unique_inverse(x, size=size))


__all__ = ["searchsorted", "nonzero", "unique_all", "unique_counts", "unique_inverse"]
