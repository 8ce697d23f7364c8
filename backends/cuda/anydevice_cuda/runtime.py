"""The cuda runtime: buffers are CuPy arrays, memory comes from CuPy's pool.

Storage choice. This runtime keeps its own storage (``empty``/``from_host``/``to_host``)
instead of handing raw allocations to the core's caching allocator. Every kernel is a
CuPy function and CuPy allocates its results from its own memory pool, which is already a
stream-aware caching allocator; going through the core's allocator would mean copying each
result into a block the core handed out, or wrapping foreign pointers, for no gain. So
buffers are ``cupy.ndarray`` objects (possibly views: buffers are never written after they
are produced), and ``memory_stats`` reads the pool's counters. Peaks are exact when the pool
is CuPy's active allocator (a thin wrapper around its ``malloc`` records them); if the
process installed another allocator they are sampled whenever statistics are read.
"""
from __future__ import annotations

import numpy as np

from anydevice.base import dtypes as _dt

from .diagnose import version_text


def bfloat16_support(cupy) -> str | None:
    """None when this CuPy stores and computes bfloat16, else the reason it cannot."""
    major = int(cupy.__version__.split(".")[0])
    if major < 14:
        return f"bfloat16 needs CuPy >= 14 (installed: {cupy.__version__}); pip install -U cupy-cuda12x"
    npv = tuple(int(p) for p in np.__version__.split(".")[:3] if p.isdigit())
    if npv < (2, 1, 2):
        return f"bfloat16 on CuPy needs NumPy >= 2.1.2 (installed: {np.__version__})"
    return None


class CudaRuntime:
    """Memory, copies, streams, events and device facts for every visible NVIDIA GPU."""

    def __init__(self, cupy):
        self.cp = cupy
        self.count = cupy.cuda.runtime.getDeviceCount()
        self.multi = self.count > 1
        self.pool = cupy.get_default_memory_pool()
        self.peak_used = [0] * self.count
        self.peak_total = [0] * self.count
        self.allocs = [0] * self.count
        self.tracking = self._track_pool()
        self.bf16_reason = bfloat16_support(cupy)
        self._props: dict = {}

    # --- required -------------------------------------------------------------------------
    def device_count(self) -> int:
        return self.count

    def synchronize(self, index: int) -> None:
        self.cp.cuda.Device(index).synchronize()

    def dtypes(self, index: int):
        return tuple(d for d in _dt.ALL_DTYPES if d is not _dt.bfloat16 or self.bf16_reason is None)

    # --- own storage ------------------------------------------------------------------------
    def empty(self, index, shape, dtype):
        with self.cp.cuda.Device(index):
            return self.cp.empty(shape, dtype=dtype.numpy)

    def from_host(self, index, arr):
        with self.cp.cuda.Device(index):
            return self.cp.asarray(arr)

    def to_host(self, buf):
        with self.cp.cuda.Device(buf.device.id):
            return buf.get()

    def copy_peer(self, buf, src_index: int, dst_index: int):
        """A copy of ``buf`` (on ``src_index``) on GPU ``dst_index``, GPU to GPU (cudaMemcpyPeerAsync).

        Ordered after the work queued on both devices' current streams, and before what is queued later."""
        cp = self.cp
        with cp.cuda.Device(src_index):
            src = cp.ascontiguousarray(buf)
            s_src = cp.cuda.get_current_stream()
        with cp.cuda.Device(dst_index):
            out = cp.empty(buf.shape, dtype=buf.dtype)
            s_dst = cp.cuda.get_current_stream()
            if not src.nbytes:
                return out
            ready = s_dst.record()
        with cp.cuda.Device(src_index):
            s_src.wait_event(ready)
            out.data.copy_from_device_async(src.data, src.nbytes, s_src)
            done = s_src.record()
        with cp.cuda.Device(dst_index):
            s_dst.wait_event(done)
        return out

    # --- memory statistics -------------------------------------------------------------------
    def _track_pool(self) -> bool:
        """Wrap the pool's malloc to record per-device peaks; False if another allocator is active."""
        cp, pool = self.cp, self.pool
        if cp.cuda.get_allocator() != pool.malloc:
            return False
        peak_used, peak_total, allocs = self.peak_used, self.peak_total, self.allocs

        def malloc(nbytes):
            mem = pool.malloc(nbytes)
            d = mem.device_id
            used, total = pool.used_bytes(), pool.total_bytes()
            if used > peak_used[d]:
                peak_used[d] = used
            if total > peak_total[d]:
                peak_total[d] = total
            allocs[d] += 1
            return mem

        cp.cuda.set_allocator(malloc)
        return True

    def memory_stats(self, index: int) -> dict:
        with self.cp.cuda.Device(index):
            used, total = self.pool.used_bytes(), self.pool.total_bytes()
        self.peak_used[index] = max(self.peak_used[index], used)
        self.peak_total[index] = max(self.peak_total[index], total)
        return {
            "allocated": used, "reserved": total, "max_allocated": self.peak_used[index],
            "max_reserved": self.peak_total[index], "num_allocs": self.allocs[index],
            "peaks": "exact" if self.tracking else "sampled",
        }

    def reset_peak_memory_stats(self, index: int) -> None:
        with self.cp.cuda.Device(index):
            self.peak_used[index], self.peak_total[index] = self.pool.used_bytes(), self.pool.total_bytes()

    def empty_cache(self, index: int) -> int:
        with self.cp.cuda.Device(index):
            before = self.pool.total_bytes()
            self.pool.free_all_blocks()
            return before - self.pool.total_bytes()

    def memory_info(self, index: int):
        with self.cp.cuda.Device(index):
            free, total = self.cp.cuda.runtime.memGetInfo()
        return int(free), int(total)

    # --- facts --------------------------------------------------------------------------------
    def properties(self, index: int) -> dict:
        p = self._props.get(index)
        if p is None:
            p = self._props[index] = self._read_properties(index)
        return dict(p)

    def _read_properties(self, index: int) -> dict:
        rt = self.cp.cuda.runtime
        raw = rt.getDeviceProperties(index)
        name = raw["name"].decode() if isinstance(raw["name"], bytes) else str(raw["name"])

        def attr(n):
            try:
                return int(rt.deviceGetAttribute(getattr(rt, f"cudaDevAttr{n}"), index))
            except Exception:  # noqa: BLE001 - attribute missing in this CUDA version
                return None

        mem_khz, bus = attr("MemoryClockRate"), attr("GlobalMemoryBusWidth")
        props = {
            "name": name, "vendor": "NVIDIA", "compute_capability": f"{raw['major']}.{raw['minor']}",
            "total_memory": int(raw["totalGlobalMem"]), "multiprocessors": int(raw["multiProcessorCount"]),
            "clock_mhz": (attr("ClockRate") or 0) / 1e3 or None, "memory_clock_mhz": (mem_khz or 0) / 1e3 or None,
            "memory_bus_width_bits": bus,
            # DDR: two transfers per memory clock; bus width in bits
            "peak_bandwidth_gbs": round(2 * mem_khz * 1e3 * bus / 8 / 1e9, 1) if mem_khz and bus else None,
            "cuda_runtime": version_text(rt.runtimeGetVersion()), "cuda_driver": version_text(rt.driverGetVersion()),
            "cupy": self.cp.__version__, "bfloat16": self.bf16_reason or "supported",
        }
        return props

    # --- streams and events ---------------------------------------------------------------------
    def create_stream(self, index: int):
        with self.cp.cuda.Device(index):
            return self.cp.cuda.Stream(non_blocking=False)  # ordered with the default stream

    def synchronize_stream(self, index: int, stream) -> None:
        stream.synchronize()

    def query_stream(self, index: int, stream) -> bool:
        return bool(stream.done)

    def create_event(self, index: int):
        with self.cp.cuda.Device(index):
            return self.cp.cuda.Event()

    def record_event(self, index: int, event, stream) -> None:
        with self.cp.cuda.Device(index):
            event.record(stream)  # None: the current (default) stream

    def synchronize_event(self, index: int, event) -> None:
        event.synchronize()

    def query_event(self, index: int, event) -> bool:
        return bool(event.done)

    def stream_wait_event(self, index: int, stream, event) -> None:
        with self.cp.cuda.Device(index):
            (stream or self.cp.cuda.get_current_stream()).wait_event(event)

    def elapsed_time(self, index: int, start, end) -> float:
        end.synchronize()
        return float(self.cp.cuda.get_elapsed_time(start, end))

    # --- DLPack -----------------------------------------------------------------------------------
    def dlpack(self, buf, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export ``buf`` zero-copy (CuPy's own ``__dlpack__``; CUDA device code 2)."""
        kw = {k: v for k, v in (("stream", stream), ("max_version", max_version), ("dl_device", dl_device),
                                ("copy", copy)) if v is not None}
        with self.cp.cuda.Device(buf.device.id):
            return buf.__dlpack__(**kw)

    def dlpack_device(self, buf):
        return (2, buf.device.id)

    def from_dlpack(self, index: int, x):
        """Import a DLPack producer onto GPU ``index``: zero-copy when it already lives there."""
        cp = self.cp
        dev = x.__dlpack_device__() if hasattr(x, "__dlpack_device__") else (2, index)
        if int(dev[0]) == 1:
            buf = self.from_host(index, np.ascontiguousarray(np.from_dlpack(x)))
        else:
            with cp.cuda.Device(int(dev[1])):
                buf = cp.from_dlpack(x)
            if buf.device.id != index:
                buf = self.copy_peer(buf, buf.device.id, index)
        return buf, tuple(buf.shape), _dt.dtype(buf.dtype)
