"""Array API inspection namespace (``anydevice.__array_namespace_info__()``)."""
from __future__ import annotations

from anydevice.base import dtypes as _dt
from anydevice.runtime.devices import as_device, current_device


class Info:
    def capabilities(self) -> dict:
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": None}

    def default_device(self):
        return current_device()

    def devices(self) -> list:
        from anydevice.api.device import get_available_device

        return [as_device(d) for d in get_available_device()]

    def default_dtypes(self, *, device=None) -> dict:
        return {"real floating": _dt.float32, "complex floating": _dt.complex64, "integral": _dt.int64,
                "indexing": _dt.int64}

    def dtypes(self, *, device=None, kind=None) -> dict:
        supported = as_device(device)._backend.dtypes(as_device(device).index)
        out = {d.name: d for d in _dt.ALL_DTYPES if d in supported}
        if kind is not None:
            out = {n: d for n, d in out.items() if _dt.isdtype(d, kind)}
        return out
