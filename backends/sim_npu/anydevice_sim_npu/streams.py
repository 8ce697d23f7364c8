"""Streams and events of the simulated devices.

Each stream is a FIFO of work items run in order by its own daemon worker thread, started
when the stream is first used. Items are callables ``item(stream)``, or, for the hot path of
element-wise kernels, plain tuples ``(name, ufunc, out, a, b, seconds)`` that the worker runs inline
(no call, views of device memory from the device's view cache). The worker skips kernels
while its device is in an error state but always runs markers (event records, sync
points), so nothing waiting on them can hang. A stream keeps a *simulated clock*: the sum
of the cost-model times of the kernels it ran; events capture it, and ``elapsed_time``
is the difference. While the device is traced (``start_trace``) each kernel and copy leaves its
``(stream, name, start, end)`` there.

Host and worker threads share the interpreter lock, so every step of the worker costs the
host thread time as well: the worker loop is kept as short as the model allows.
"""
from __future__ import annotations

import queue
import threading

import numpy as np

_STOP = object()


class SimEvent:
    """An event handle. ``flag`` is replaced at each record, so waiters wait for the record
    that was most recent when they started waiting (CUDA semantics)."""

    __slots__ = ("flag", "clock", "recorded")

    def __init__(self):
        self.flag, self.clock, self.recorded = None, 0.0, False


class Marker:
    """A non-kernel work item: runs even when the device is in an error state."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, stream):
        self.fn(stream)


class SimStream:
    """One in-order queue of work on one simulated device."""

    def __init__(self, chip, sid: int):
        self.chip, self.id = chip, sid
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = None
        self.submitted = self.done = 0
        self.clock = 0.0

    def __repr__(self):
        return f"<sim stream {self.id} of {self.chip.name}>"

    def submit(self, item) -> None:
        if self._thread is None:
            self._start()
        self.submitted += 1
        self._q.put(item)

    def _start(self):
        with self.chip.lock:
            if self._thread is None:
                t = threading.Thread(target=self._run, name=f"{self.chip.name}-stream{self.id}", daemon=True)
                t.start()
                self._thread = t

    def _run(self):
        get, chip, view = self._q.get, self.chip, self.chip.view
        np.seterr(all="ignore")  # per thread: device math does not warn, like the cpu kernels
        while True:
            item = get()
            start = self.clock
            try:
                if type(item) is tuple:  # element-wise kernel (name, ufunc, out, a, b, seconds)
                    if chip.error is None:
                        item[1](view(item[3]), view(item[4]), out=view(item[2]))
                        self.clock += item[5]
                elif item is _STOP:
                    return
                elif type(item) is Marker or chip.error is None:
                    item(self)
            except BaseException as e:  # noqa: BLE001 - recorded, raised at the next sync point
                chip.fail(self, item[0] if type(item) is tuple else getattr(item, "name", "work item"), e)
            finally:
                if chip.trace is not None and type(item) is not Marker and item is not _STOP:
                    chip.trace.append((self.id, item[0] if type(item) is tuple else item.name, start, self.clock))
                item = None
                self.done += 1

    def idle(self) -> bool:
        return self.done >= self.submitted

    def wait(self) -> None:
        """Block until everything submitted so far has run (errors are not raised here)."""
        if self._thread is None or self.idle():
            return
        done = threading.Lock()
        done.acquire()
        self.submitted += 1
        self._q.put(Marker(lambda s: done.release()))
        done.acquire()

    def record(self, event: SimEvent) -> None:
        flag = threading.Event()
        event.flag, event.recorded = flag, True

        def mark(s):
            event.clock = s.clock
            flag.set()

        self.submit(Marker(mark))

    def wait_event(self, event: SimEvent) -> None:
        flag = event.flag
        if flag is None or flag.is_set():
            if flag is not None:
                self.submit(Marker(lambda s: setattr(s, "clock", max(s.clock, event.clock))))
            return

        def waiter(s):
            while not flag.wait(0.05):
                if s.chip.error is not None:
                    return
            s.clock = max(s.clock, event.clock)

        self.submit(Marker(waiter))

    def stop(self) -> None:
        if self._thread is not None:
            self._q.put(_STOP)
