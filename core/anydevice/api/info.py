"""Array API inspection namespace (``anydevice.__array_namespace_info__()``): what the library can
do and, per device, which dtypes that device really has."""
from __future__ import annotations

from anydevice.base import dtypes as _dt
from anydevice.ops.registry import MAX_NDIM
from anydevice.runtime.devices import as_device, current_device

#: The dtypes anydevice gives Python scalars and index results, on every device that has them.
_DEFAULTS = {"real floating": _dt.float32, "complex floating": _dt.complex64, "integral": _dt.int64,
             "indexing": _dt.int64}


def _device(name: str, device):
    try:
        return current_device() if device is None else as_device(device)
    except (TypeError, ValueError) as e:
        raise type(e)(f"__array_namespace_info__().{name}(): device: {e}") from None


class Info:
    """``capabilities()``, ``default_device()``, ``devices()``, ``default_dtypes(device=)`` and
    ``dtypes(device=, kind=)`` of the Array API inspection namespace."""

    __slots__ = ()

    def capabilities(self) -> dict:
        """Boolean-mask indexing and data-dependent output shapes are supported (each such op
        reads one size back from the device); tensors have at most ``MAX_NDIM`` (64) dimensions."""
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": MAX_NDIM}

    def default_device(self):
        """The current device (``anydevice.set_device`` / ``device_guard``)."""
        return current_device()

    def devices(self) -> list:
        """Every device that is available now (admitted by its plugin), cpu first."""
        from anydevice.api.device import get_available_device

        return [as_device(d) for d in get_available_device()]

    def default_dtypes(self, *, device=None) -> dict:
        """The default dtype of each kind (float32, complex64, int64; indexing int64) that ``device``
        (None: the current one) has; a kind the device has no dtype of (complex on a device without
        complex numbers) is left out rather than named wrongly."""
        dev = _device("default_dtypes", device)
        have = dev._backend.dtypes(dev.index)
        return {k: d for k, d in _DEFAULTS.items() if d in have}

    def dtypes(self, *, device=None, kind=None) -> dict:
        """``{name: dtype}`` of the dtypes ``device`` (None: the current one) supports, optionally
        only those of ``kind`` (a kind name such as ``"real floating"``, a dtype, or a tuple)."""
        dev = _device("dtypes", device)
        supported = dev._backend.dtypes(dev.index)
        out = {d.name: d for d in _dt.ALL_DTYPES if d in supported}
        if kind is not None:
            out = {n: d for n, d in out.items() if _dt.isdtype(d, kind)}
        return out
