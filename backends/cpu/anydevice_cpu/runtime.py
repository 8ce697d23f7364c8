"""The cpu runtime keeps its own storage: buffers are numpy arrays (or numpy scalars for 0-d)."""
from __future__ import annotations

import os

import numpy as np


class CpuRuntime:
    def device_count(self) -> int:
        return 1

    def synchronize(self, index: int) -> None:
        pass

    def empty(self, index, shape, dtype):
        return np.empty(shape, dtype=dtype.numpy)

    def from_host(self, index, arr):
        return np.array(arr, copy=True)

    def to_host(self, buf):
        return np.asarray(buf)

    def properties(self, index):
        return {"name": "cpu", "cores": os.cpu_count()}

    def memory_info(self, index):
        try:
            pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
            avail = os.sysconf("SC_AVPHYS_PAGES")
            return (avail * size, pages * size)
        except (ValueError, OSError, AttributeError):
            return (None, None)

    def dlpack(self, buf, *, stream=None, max_version=None, dl_device=None, copy=None):
        arr = np.array(buf, copy=True)
        return arr.__dlpack__() if max_version is None else arr.__dlpack__(max_version=max_version)
