"""Streams and events of the simulated devices.

Each stream is a FIFO of work items run in order, one at a time. Items are callables
``item(stream)``, or, for the hot path of element-wise kernels, plain tuples
``(name, ufunc, out, a, b, plan)`` run inline (no call, views of device memory from the
device's view cache). Kernels are skipped while their device is in an error state, but
markers (event records, sync points) always run, so nothing waiting on them can hang. A
stream keeps a *simulated clock*: the sum of the cost-model times of the kernels it ran;
events capture it, and ``elapsed_time`` is the difference. While the device is traced
(``start_trace``) each kernel and copy leaves its ``(stream, name, start, end)`` there.

Who runs the items: like a driver's command buffer, launches gather in the stream's pending
list. Heavy items (moving at least :data:`HEAVY_BYTES`, or doing many flops), markers (event
records, sync points) and copies wake the stream's own daemon worker thread (started on first
use), which runs everything pending, so big kernels overlap with the host; so do a query of
the stream and every :data:`BATCH` light items. A host that waits for the stream runs the
pending items itself, unless the worker is running the stream. A light kernel of known, quick
math (element-wise, or a registry kernel) launched while its device has nothing queued runs at
once on the launching thread (:meth:`SimStream.elementwise`, :meth:`SimStream.run_now`). Host
and worker threads share the interpreter lock, so handing a tiny kernel to another thread costs
more than running it; whoever runs them, a stream's items run one at a time and in order, under
its ``_runner`` lock, with the same clock and the same sticky errors.
"""
from __future__ import annotations

import collections
import contextvars
import queue
import threading

import numpy as np


def _quiet_context():
    """A context in which numpy ignores floating-point errors, or None where numpy keeps its error
    state per thread instead of in a context variable (numpy < 2). Running a ufunc in it
    (``Context.run``) costs a tenth of ``with np.errstate(all="ignore")``."""
    before = np.geterr()
    ctx = contextvars.copy_context()
    ctx.run(np.seterr, all="ignore")
    if np.geterr() != before:  # the setting leaked out of the context: undo it and do without
        np.seterr(**before)
        return None
    return ctx


_STOP = object()
_GO = object()  # token: the worker runs everything pending
#: Items moving at least this many bytes go to the worker at once.
HEAVY_BYTES = 4 << 20
#: Light items gathered before the worker is woken for them.
BATCH = 256


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
        self._q: queue.SimpleQueue = queue.SimpleQueue()  # tokens for the worker: _GO or _STOP
        self._pending = collections.deque()  # items not yet run, oldest first
        self._runner = threading.Lock()  # held by the one thread running this stream's items
        self._quiet = _quiet_context()  # entered only by the runner
        self._light = 0  # items queued since a run of the pending list last began
        self._thread = None
        self.submitted = self.done = 0
        self.clock = 0.0

    def __repr__(self):
        return f"<sim stream {self.id} of {self.chip.name}>"

    def submit(self, item, heavy: bool = True) -> None:
        """Queue ``item``; a light one (``heavy=False``) may run in a batch with later ones."""
        self.submitted += 1
        self._pending.append(item)
        n = self._light
        self._light = n + 1
        if heavy or n >= BATCH:  # else the batch waits for a host that waits, or for more
            self._wake()

    def elementwise(self, name: str, ufunc, out, a, b, plan) -> None:
        """``ufunc(a, b, out=out)`` on DeviceArrays, with ``plan`` a
        :class:`~anydevice_sim_npu.kernels.Plan`: run at once on this thread when it is light and
        the device is idle (as :meth:`run_now` says), else queued."""
        chip = self.chip
        if (plan.heavy or self._pending or chip.error is not None or chip.trace is not None or self._quiet is None
                or len(chip.streams) > 1 and chip.busy(self) or not self._runner.acquire(False)):
            self.submit((name, ufunc, out, a, b, plan), plan.heavy)
            return
        try:  # the stream's only runner now, and nothing queued before this is still pending
            blk = a.block
            va = plan.ta.get(blk.handle + blk.offset + a.offset)
            if va is None:
                va = chip.views.make(plan.ta, a)
            blk = b.block
            vb = plan.tb.get(blk.handle + blk.offset + b.offset)
            if vb is None:
                vb = chip.views.make(plan.tb, b)
            blk = out.block
            vo = plan.to.get(blk.handle + blk.offset)
            if vo is None:
                vo = chip.views.make(plan.to, out)
            self._quiet.run(ufunc, va, vb, out=vo)  # device math does not warn (nor does it on the worker)
            self.clock += plan.seconds
        except BaseException as e:  # noqa: BLE001 - recorded, raised at the next sync point
            chip.fail(self, name, e)
        finally:
            self._runner.release()

    def run_now(self, name: str, seconds: float, fn, *args) -> bool:
        """``fn(*args)`` (a kernel of known, quick math; ``name`` for errors), at once on this
        thread with ``seconds`` on the clock, when the device is idle; False, with nothing done,
        when it is not.

        Idle: nothing queued on any of the device's streams and nobody running this one (this
        thread becomes its runner), no error or trace to keep. Work queued on another stream is
        left to run first, as it tends to when every kernel is queued."""
        chip = self.chip  # the test is inlined here and in elementwise(): the hot path of every small kernel
        if (self._pending or chip.error is not None or chip.trace is not None or self._quiet is None
                or len(chip.streams) > 1 and chip.busy(self) or not self._runner.acquire(False)):
            return False
        try:
            self._quiet.run(fn, *args)  # device math does not warn (nor does it on the worker)
            self.clock += seconds
        except BaseException as e:  # noqa: BLE001 - recorded, raised at the next sync point
            chip.fail(self, name, e)
        finally:
            self._runner.release()
        return True

    def _wake(self) -> None:
        if self._thread is None:
            self._start()
        self._q.put(_GO)

    def run_pending(self) -> bool:
        """Run what is pending on the calling thread, unless another thread is running this
        stream's items (then nothing is done and False returned)."""
        if not self._runner.acquire(False):
            return False
        try:
            with np.errstate(all="ignore"):  # device math does not warn (nor does it on the worker)
                self._drain()
        finally:
            self._runner.release()
        return True

    def _start(self):
        with self.chip.lock:
            if self._thread is None:
                t = threading.Thread(target=self._run, name=f"{self.chip.name}-stream{self.id}", daemon=True)
                t.start()
                self._thread = t

    def _run(self):
        get, runner = self._q.get, self._runner
        np.seterr(all="ignore")  # per thread
        while get() is not _STOP:
            with runner:
                self._drain()

    def _drain(self):
        """Run the pending items in order (the caller holds ``_runner``, so only it pops)."""
        self._light = 0  # before the first pop: an item queued from now on is seen, or counted anew
        pending, chip = self._pending, self.chip
        popleft, views = pending.popleft, chip.views
        while pending:
            item = popleft()
            start = self.clock
            try:
                if type(item) is tuple:  # element-wise kernel (name, ufunc, out, a, b, plan)
                    if chip.error is None:
                        _, ufunc, out, a, b, plan = item
                        ufunc(views.cached(plan.ta, a), views.cached(plan.tb, b), out=views.cached(plan.to, out))
                        self.clock += plan.seconds
                elif type(item) is Marker or chip.error is None:
                    item(self)
            except BaseException as e:  # noqa: BLE001 - recorded, raised at the next sync point
                chip.fail(self, item[0] if type(item) is tuple else getattr(item, "name", "work item"), e)
            if chip.trace is not None and type(item) is not Marker:
                chip.trace.append((self.id, item[0] if type(item) is tuple else item.name, start, self.clock))
            self.done += 1
        item = None  # noqa: F841 - drop the last item's buffers now

    def idle(self) -> bool:
        if self.done >= self.submitted:
            return True
        if self._pending and not self._runner.locked():
            self._wake()  # a poller must see the work finish, without running it here
        return False

    def busy(self) -> bool:
        """Work is queued here or running."""
        return bool(self._pending) or self._runner.locked()

    def wait(self) -> None:
        """Block until everything submitted so far has run (errors are not raised here)."""
        if self.done >= self.submitted or self.run_pending() and self.done >= self.submitted:
            return
        done = threading.Lock()  # another thread is running this stream: wait behind a marker
        done.acquire()
        self.submit(Marker(lambda s: done.release()))
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
        if self._thread is not None or self._pending:
            self._wake()  # what is pending still runs
            self._q.put(_STOP)
