"""Paddle-style device API: listing devices, properties, synchronization, streams, events,
memory statistics. Every function takes a device spec (``"npu:1"``, a Device, or None for
the current device)."""
from __future__ import annotations

import contextlib

from anydevice.base.errors import DeviceUnavailableError
from anydevice.runtime import devices as _backend
from anydevice.runtime import streams as _streams
from anydevice.runtime.devices import Device, as_device, current_device, device_guard, get_backend, get_device, set_device
from anydevice.runtime.plugins import manager
from anydevice.runtime.streams import Event, Stream

__all__ = [
    "Device", "Event", "Stream", "set_device", "get_device", "device_guard", "get_all_device_type",
    "get_all_custom_device_type", "get_available_device", "device_count", "get_device_properties",
    "synchronize", "current_stream", "set_stream", "stream_guard", "memory_allocated", "max_memory_allocated",
    "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats", "memory_stats", "empty_cache",
    "is_available", "unavailable_reason", "unusable_devices",
]


def get_all_device_type() -> list[str]:
    """Every device type some plugin provides, available or not."""
    manager.discover()
    return sorted(manager.by_type)


def get_all_custom_device_type() -> list[str]:
    """Device types provided by plugins other than the ones shipped with anydevice itself."""
    manager.discover()
    return sorted(t for t, r in manager.by_type.items() if r.distribution != "anydevice")


def is_available(device_type: str) -> bool:
    return unavailable_reason(device_type) is None


def unavailable_reason(device_type: str) -> str | None:
    """Why a device type cannot be used here, or None when it can."""
    return _backend.unavailable_reason(device_type)


def unusable_devices(device_type: str) -> list[dict]:
    """Devices of ``device_type`` that its runtime's probe rejected, each as
    ``{"physical_index", "reason", "hint", "kept_visible"}``. They are not in the visible set
    (unless ``ANYDEVICE_KEEP_UNUSABLE=1``), so indices of the usable ones stay dense."""
    from anydevice.runtime.devices import canonical_type

    t = canonical_type(device_type) or device_type
    return [u.as_dict() for u in _backend.unusable_devices(t)]


def get_available_device() -> list[str]:
    """Every usable device as ``"type:index"`` strings."""
    out = []
    for t in get_all_device_type():
        try:
            be = get_backend(t)
        except DeviceUnavailableError:
            continue
        out += [str(d) for d in be.devices]
    return out


def device_count(device_type: str | None = None) -> int:
    """Number of visible devices of a type (0 when it is unavailable)."""
    from anydevice.runtime.devices import canonical_type

    t = canonical_type(device_type) if device_type else current_device().type
    if t is None:
        return 0
    try:
        return get_backend(t).count
    except DeviceUnavailableError:
        return 0


def get_device_properties(device=None) -> dict:
    d = as_device(device)
    return d._backend.properties(d.index)


def synchronize(device=None) -> None:
    d = as_device(device)
    d._backend.synchronize(d.index)


def current_stream(device=None) -> Stream:
    """The stream the calling thread queues new work on ``device`` on."""
    return _streams.current_stream(device)


def set_stream(stream: Stream) -> Stream:
    """Make ``stream`` current on its device for the calling thread; returns the previous one.

    As ``torch.cuda.set_stream``, this is per thread: other threads keep their current stream,
    and a thread that never set one (one started later too) uses the device's default stream."""
    if not isinstance(stream, Stream):
        raise TypeError(f"set_stream(): stream must be an anydevice.Stream, not {type(stream).__name__}; "
                        f"make one with anydevice.device.Stream(device)")
    prev = _streams.current_stream(stream.device)
    _streams.set_stream(stream)
    return prev


@contextlib.contextmanager
def stream_guard(stream: Stream):
    """Make ``stream`` current on its device for the calling thread until the block exits."""
    prev = set_stream(stream)
    try:
        yield stream
    finally:
        set_stream(prev)


def memory_stats(device=None) -> dict:
    d = as_device(device)
    return d._backend.memory_stats(d.index)


def memory_allocated(device=None) -> int:
    return memory_stats(device)["allocated"]


def max_memory_allocated(device=None) -> int:
    return memory_stats(device)["max_allocated"]


def memory_reserved(device=None) -> int:
    return memory_stats(device)["reserved"]


def max_memory_reserved(device=None) -> int:
    return memory_stats(device)["max_reserved"]


def reset_peak_memory_stats(device=None) -> None:
    d = as_device(device)
    be = d._backend
    if be.own_storage:
        be.memory_stats(d.index)  # raises the explicit "not supported" error
        if be.has("reset_peak_memory_stats"):
            be.runtime.reset_peak_memory_stats(be.phys(d.index))
        return
    be.allocators[d.index].reset_peak()


def empty_cache(device=None) -> int:
    """Return cached, unused device memory to the runtime; returns the bytes released."""
    d = as_device(device)
    return d._backend.empty_cache(d.index)
