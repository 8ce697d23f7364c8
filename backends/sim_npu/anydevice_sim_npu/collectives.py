"""``simccl``: collectives across processes for the simulated npu and dcu (the ``anydevice_collectives`` hook).

The simulated xpu has none, so its tensors go through the core's host-staged MPI path (counted).

Each call waits for the device's queued work, takes the bytes of the input buffer out of the
simulated device memory, moves them between the processes with mpi4py's non-blocking collectives
(over the communicator the core bootstraps), and queues the copy of the result into a new device
buffer on the device's default stream. That queued copy carries the collective's modelled time on
the device's clock (``stop_trace`` shows it as ``simccl.<collective>``): ring algorithms on the
profile's interconnect, ``steps * link_latency + bytes moved per device / link_bandwidth``:

- all_reduce: ``2 (n - 1)`` steps moving ``2 (n - 1) / n`` of the buffer;
- all_gather, reduce_scatter, all_to_all: ``n - 1`` steps moving ``(n - 1) / n`` of the larger buffer;
- broadcast: ``ceil(log2 n)`` steps moving the buffer once.

Reductions of float16/bfloat16 are declined (MPI has no such types), so the core stages them.
reduce, gather, scatter, send and recv are not provided: the core stages those too.
"""
from __future__ import annotations

import math

import numpy as np

from .runtime import _Copy

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

        self.rt, self.comm, self.n, self.allocate = runtime, bootstrap.comm, bootstrap.size, bootstrap.allocate
        self.MPI = MPI

    def seconds(self, steps: int, nbytes: float) -> float:
        p = self.rt.profile
        return steps * p.link_latency + nbytes / p.link_bandwidth

    def _read(self, buf) -> np.ndarray:
        chip = self.rt.chips[buf.index]
        chip.drain()
        chip.check()
        return np.array(self.rt.view(buf), copy=True) if buf.size else np.empty(buf.shape, buf.dtype.numpy)

    def _mop(self, a: np.ndarray, op: str):
        MPI = self.MPI
        if a.dtype == np.bool_:
            return a.view(np.uint8), {"max": MPI.LOR, "min": MPI.LAND}[op]
        if a.dtype.name in ("float16", "bfloat16"):
            return None, None
        return a, {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}[op]

    def all_reduce(self, buf, op):
        a, mop = self._mop(self._read(buf), op)
        if a is None:
            return None
        y = np.empty_like(a)
        cost = self.seconds(2 * (self.n - 1), 2 * (self.n - 1) / self.n * a.nbytes)
        return _Pending(self, "all_reduce", buf, self.comm.Iallreduce(a.reshape(-1), y.reshape(-1), mop), y, cost)

    def reduce_scatter(self, buf, op):
        a, mop = self._mop(self._read(buf), op)
        if a is None:
            return None
        y = np.empty_like(a[0])
        cost = self.seconds(self.n - 1, (self.n - 1) / self.n * a.nbytes)
        return _Pending(self, "reduce_scatter", buf, self.comm.Ireduce_scatter_block(a.reshape(-1), y.reshape(-1), mop),
                        y, cost)

    def broadcast(self, buf, src):
        a = self._read(buf)
        cost = self.seconds(math.ceil(math.log2(self.n)) if self.n > 1 else 0, a.nbytes)
        return _Pending(self, "broadcast", buf, self.comm.Ibcast(_bytes(a), root=src), a, cost)

    def all_gather(self, buf):
        a = self._read(buf)
        y = np.empty((self.n, *a.shape), a.dtype)
        cost = self.seconds(self.n - 1, (self.n - 1) / self.n * y.nbytes)
        return _Pending(self, "all_gather", buf, self.comm.Iallgather(_bytes(a), _bytes(y)), y, cost, a)

    def all_to_all(self, buf):
        a = self._read(buf)
        y = np.empty_like(a)
        cost = self.seconds(self.n - 1, (self.n - 1) / self.n * a.nbytes)
        return _Pending(self, "all_to_all", buf, self.comm.Ialltoall(_bytes(a), _bytes(y)), y, cost, a)


def _bytes(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1).view(np.uint8)


class _Pending:
    """One collective in flight: MPI moves host bytes; the result is then queued into device memory."""

    __slots__ = ("comm", "name", "like", "req", "host", "cost", "keep")

    def __init__(self, comm, name, like, req, host, cost, keep=None):
        self.comm, self.name, self.like, self.req, self.host, self.cost, self.keep = comm, name, like, req, host, cost, keep

    def test(self) -> bool:
        return self.req.Test()

    def result(self):
        rt, h = self.comm.rt, self.host
        out = self.comm.allocate(self.like, h.shape, self.like.dtype)
        chip = rt.chips[out.index]
        data = _bytes(np.ascontiguousarray(h))
        chip.default.submit(_Copy(f"simccl.{self.name}", rt.mem[out.handle], out.byte_offset, data, self.cost))
        return out
