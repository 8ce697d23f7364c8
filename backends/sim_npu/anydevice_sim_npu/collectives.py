"""``simccl``: collectives across processes for the simulated npu and dcu (the ``anydevice_collectives`` hook).

The simulated xpu has none, so its tensors go through the core's host-staged MPI path (counted).

Each call queues the collective's start on the device's current stream and returns: when the
stream gets there (after the kernels queued before it), the input's bytes are taken out of the
simulated device memory and mpi4py's non-blocking collective starts moving them between the
processes (over the communicator the core bootstraps), while the host and the stream go on. Once
the core's polling sees it done, the copy of the result into a new device buffer is queued on that
stream; it carries the collective's modelled time on the device's clock (``stop_trace`` shows it
as ``simccl.<collective>``): ring algorithms on the profile's interconnect,
``steps * link_latency + bytes moved per device / link_bandwidth``:

- all_reduce: ``2 (n - 1)`` steps moving ``2 (n - 1) / n`` of the buffer;
- all_gather: ``n - 1`` steps moving the ``n - 1`` other ranks' parts;
- reduce_scatter, all_to_all: ``n - 1`` steps moving ``(n - 1) / n`` of the input;
- broadcast: ``ceil(log2 n)`` steps moving the buffer once.

Collectives start on every rank in the order they were called, whichever device or stream runs
them (a ticket each). Reductions of float16/bfloat16 are declined (MPI has no such types), so the
core stages them; reduce, gather, scatter, send and recv are not provided: the core stages those too.
"""
from __future__ import annotations

import math
import threading

import numpy as np

from .runtime import _Copy
from .streams import Marker

TYPES = ("npu", "dcu")


def factory(runtime):
    """The communicator factory of ``runtime``'s type, or None for a type without collectives."""
    if runtime.type not in TYPES:
        return None
    return lambda bootstrap: SimCommunicator(runtime, bootstrap)


class SimCommunicator:
    name = "simccl"

    def __init__(self, runtime, bootstrap):
        from mpi4py import MPI

        self.rt, self.comm, self.n, self.boot = runtime, bootstrap.comm, bootstrap.size, bootstrap
        self.MPI = MPI
        self.turn = self.tickets = 0  # collectives start on every rank in call order, whichever stream runs them
        self.cond = threading.Condition()

    def seconds(self, steps: int, nbytes: float) -> float:
        p = self.rt.profile
        return steps * p.link_latency + nbytes / p.link_bandwidth

    def _mop(self, dtype, op: str):
        """The MPI op reducing ``dtype`` (bool: on its bytes), or None to decline (float16, bfloat16)."""
        MPI = self.MPI
        if dtype.name in ("float16", "bfloat16"):
            return None
        if dtype.name == "bool":
            return {"max": MPI.LOR, "min": MPI.LAND}[op]
        return {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}[op]

    def _queue(self, name, buf, out_shape, cost, start):
        """Queue the collective's start on ``buf``'s device, after the work queued before it.

        When the stream reaches it (at once when it is idle), the input's bytes are taken out of
        device memory and ``start(a, y)`` starts the MPI collective from ``a`` into the host array
        ``y``; the host and the stream go on meanwhile (the request's ``test()`` polls MPI).
        """
        rt = self.rt
        chip = rt.chips[buf.index]
        chip.check()
        stream = rt._stream(chip, self.boot.stream(buf))
        p = _Pending(self, name, buf, np.empty(out_shape, buf.dtype.numpy), cost, stream)
        with self.cond:
            ticket, self.tickets = self.tickets, self.tickets + 1

        def begin(s):
            with self.cond:
                while self.turn != ticket:
                    self.cond.wait()
                try:
                    if chip.error is None and not chip.lost:
                        a = np.array(rt.view(buf), copy=True) if buf.size else np.empty(buf.shape, buf.dtype.numpy)
                        p.keep, p.req = a, start(a, p.host)
                except BaseException as e:  # noqa: BLE001 - raised by the request's test()
                    p.error = e
                finally:
                    p.started = True
                    self.turn += 1
                    self.cond.notify_all()

        if stream.idle():  # nothing queued before it: start now, on this thread
            begin(stream)
        else:
            stream.submit(Marker(begin))  # a marker runs even when the device failed: the turn must pass
        return p

    def all_reduce(self, buf, op):
        mop = self._mop(buf.dtype, op)
        if mop is None:
            return None
        cost = self.seconds(2 * (self.n - 1), 2 * (self.n - 1) / self.n * buf.nbytes)
        return self._queue("all_reduce", buf, buf.shape, cost,
                           lambda a, y: self.comm.Iallreduce(_flat(a), _flat(y), mop))

    def reduce_scatter(self, buf, op):
        mop = self._mop(buf.dtype, op)
        if mop is None:
            return None
        cost = self.seconds(self.n - 1, (self.n - 1) / self.n * buf.nbytes)
        return self._queue("reduce_scatter", buf, buf.shape[1:], cost,
                           lambda a, y: self.comm.Ireduce_scatter_block(_flat(a), _flat(y), mop))

    def broadcast(self, buf, src):
        cost = self.seconds(math.ceil(math.log2(self.n)) if self.n > 1 else 0, buf.nbytes)

        def start(a, y):
            y[...] = a
            return self.comm.Ibcast(_bytes(y), root=src)

        return self._queue("broadcast", buf, buf.shape, cost, start)

    def all_gather(self, buf):
        cost = self.seconds(self.n - 1, (self.n - 1) * buf.nbytes)
        return self._queue("all_gather", buf, (self.n, *buf.shape), cost,
                           lambda a, y: self.comm.Iallgather(_bytes(a), _bytes(y)))

    def all_to_all(self, buf):
        cost = self.seconds(self.n - 1, (self.n - 1) / self.n * buf.nbytes)
        return self._queue("all_to_all", buf, buf.shape, cost, lambda a, y: self.comm.Ialltoall(_bytes(a), _bytes(y)))


def _bytes(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1).view(np.uint8)


def _flat(a: np.ndarray) -> np.ndarray:
    """What MPI reduces: the elements (bool as its bytes, reduced with logical or/and)."""
    return _bytes(a) if a.dtype == np.bool_ else a.reshape(-1)


class _Pending:
    """One collective: queued, then started by its device's stream, then moved by MPI; its result
    is queued into device memory on that stream, charged with the modelled time."""

    __slots__ = ("comm", "name", "like", "host", "cost", "stream", "req", "keep", "started", "error")

    def __init__(self, comm, name, like, host, cost, stream):
        self.comm, self.name, self.like, self.host, self.cost, self.stream = comm, name, like, host, cost, stream
        self.req = self.keep = self.error = None
        self.started = False

    def test(self) -> bool:
        if not self.started:
            return False
        if self.error is not None:
            raise self.error
        if self.req is None:  # the device failed before the collective could start
            self.comm.rt.chips[self.like.index].check()
            raise RuntimeError(f"simccl.{self.name}: the device failed before the collective started")
        return self.req.Test()

    def result(self):
        rt, h = self.comm.rt, self.host
        out = self.comm.boot.allocate(self.like, h.shape, self.like.dtype)
        data = _bytes(np.ascontiguousarray(h))
        self.stream.submit(_Copy(f"simccl.{self.name}", rt.mem[out.handle], out.byte_offset, data, self.cost))
        return out
