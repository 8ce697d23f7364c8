"""Streams and events on any device, and the current stream of each device.

The current stream is per thread, as in CUDA and PyTorch: ``set_stream`` and ``stream_guard``
change it for the calling thread only, and every other thread (one started later too) queues
its work on the device's default stream until it sets a stream of its own.

A runtime without streams gets one default stream per device (handle None); one without events
gets host-side events that synchronize the stream when recorded (see the optional-method table
in :mod:`anydevice.runtime.contract`).
"""
from __future__ import annotations

import threading
import time

from anydevice.runtime.devices import as_device, set_thread_stream, thread_stream

_lock = threading.Lock()


class Stream:
    """An ordered queue of work on one device (the runtime's stream, or its default stream)."""

    __slots__ = ("device", "handle", "_owned", "__weakref__")

    def __init__(self, device=None, *, _handle=None, _default=False):
        self.device = as_device(device)
        be = self.device._backend
        self._owned = not _default and be.has("create_stream")
        self.handle = _handle if _default or not self._owned else be.runtime.create_stream(be.phys(self.device.index))

    def synchronize(self) -> None:
        be = self.device._backend
        be.synchronize_stream(self.device.index, self.handle)

    def query(self) -> bool:
        be, i = self.device._backend, self.device.index
        if be.has("query_stream"):
            return bool(be.runtime.query_stream(be.phys(i), self.handle))
        self.synchronize()
        return True

    def wait_event(self, event: Event) -> None:
        be, i = self.device._backend, self.device.index
        if be.has("stream_wait_event") and event._handle is not None:
            be.runtime.stream_wait_event(be.phys(i), self.handle, event._handle)
        else:
            event.synchronize()

    def wait_stream(self, other: Stream) -> None:
        ev = Event(self.device)
        ev.record(other)
        self.wait_event(ev)

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event(self.device)
        event.record(self)
        return event

    def __del__(self):
        try:
            if self._owned and self.handle is not None and hasattr(self.device._backend.runtime, "destroy_stream"):
                be = self.device._backend
                be.runtime.destroy_stream(be.phys(self.device.index), self.handle)
        except Exception:
            pass

    def __repr__(self) -> str:
        kind = "default stream" if not self._owned else f"stream {self.handle!r}"
        return f"<anydevice.Stream {kind} on {self.device}>"


class Event:
    """A marker in a stream: record it, then wait for it or time between two events."""

    __slots__ = ("device", "_handle", "_host_time", "_recorded")

    def __init__(self, device=None, enable_timing: bool = True):
        self.device = as_device(device)
        be = self.device._backend
        self._handle = be.runtime.create_event(be.phys(self.device.index)) if be.has("create_event") else None
        self._host_time = None
        self._recorded = False

    def record(self, stream: Stream | None = None) -> None:
        be, i = self.device._backend, self.device.index
        stream = stream or current_stream(self.device)
        if self._handle is not None and be.has("record_event"):
            be.runtime.record_event(be.phys(i), self._handle, stream.handle)
        else:
            stream.synchronize()
        self._host_time = time.perf_counter()
        self._recorded = True

    def synchronize(self) -> None:
        be, i = self.device._backend, self.device.index
        if self._handle is not None and be.has("synchronize_event"):
            be.runtime.synchronize_event(be.phys(i), self._handle)

    def query(self) -> bool:
        be, i = self.device._backend, self.device.index
        if self._handle is not None and be.has("query_event"):
            return bool(be.runtime.query_event(be.phys(i), self._handle))
        self.synchronize()
        return True

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds between this event and ``end`` (both recorded)."""
        if not (self._recorded and end._recorded):
            raise ValueError("elapsed_time() needs both events recorded first")
        be, i = self.device._backend, self.device.index
        if self._handle is not None and be.has("elapsed_time"):
            return float(be.runtime.elapsed_time(be.phys(i), self._handle, end._handle))
        end.synchronize()
        return (end._host_time - self._host_time) * 1e3

    def __repr__(self) -> str:
        return f"<anydevice.Event on {self.device}>"



def default_stream(device) -> Stream:
    """The default stream of ``device`` (made on first use)."""
    d = as_device(device)
    be = d._backend
    s = be._default[d.index]
    if s is None:
        with _lock:
            s = be._default[d.index]
            if s is None:
                s = be._default[d.index] = Stream(d, _default=True)
    return s


def current_stream(device=None) -> Stream:
    """The stream that work on ``device`` is queued on by the calling thread."""
    d = as_device(device)
    return thread_stream(d._ctx) or default_stream(d)


def set_stream(stream: Stream | None, device=None) -> None:
    """Make ``stream`` current on its device for the calling thread (None: back to the default
    stream of ``device``). Other threads keep their own current stream; a thread that never set
    one queues on the default stream, as in PyTorch."""
    d = stream.device if stream is not None else as_device(device)
    if stream is not None and stream is d._backend._default[d.index]:
        stream = None
    set_thread_stream(d._ctx, stream)
