"""The host-staged MPI communicator: moves host copies of tensors with mpi4py's non-blocking calls.

It works for every device type (the core copies tensors to host memory and back) and is the
reference for what a plugin's communicator does (see the ``anydevice_collectives`` hookspec):
each method starts one collective and returns a request with ``test()`` and ``result()``.
Reductions of ``float16``/``bfloat16`` are computed in float32 (MPI has no such types) and
rounded once; ``bool`` reduces with ``max`` (logical or) and ``min`` (logical and).
"""
from __future__ import annotations

import sys
import time

import numpy as np

from anydevice.base.errors import AnyDeviceError


class DistributedError(AnyDeviceError):
    """A collective could not run (bad group, broken group, MPI failure)."""


class DistributedTimeoutError(DistributedError):
    """A collective did not complete within its group's timeout."""


DistributedError.__module__ = DistributedTimeoutError.__module__ = "anydevice.distributed"  # where users meet them


def poll(test, deadline: float) -> bool:
    """Call ``test()`` until it is true (True) or the deadline passed (False): in a tight loop for the
    first 100 us, then sleeping between tests (20 us, growing to 0.5 ms) so that peers sharing the
    CPU cores can run."""
    if test():
        return True
    start = time.monotonic()
    pause = 2e-5
    while not test():
        now = time.monotonic()
        if now > deadline:
            return test()
        if now - start >= 1e-4:
            time.sleep(pause)
            pause = min(pause * 1.25, 5e-4)
    return True


def load():
    """``(mpi4py.MPI, ours)``: the initialized MPI module, and whether this call imported it (then
    MPI_Finalize is ours to call at exit: ``mpi4py.rc.finalize`` is turned off)."""
    if "mpi4py.MPI" in sys.modules:
        return sys.modules["mpi4py.MPI"], False
    try:
        import mpi4py
    except ImportError as e:
        raise DistributedError(
            "anydevice.distributed needs mpi4py and an MPI library for process groups; install them with "
            "pip install 'anydevice[mpi]' (mpi4py and the mpich wheel, which brings mpiexec)") from e
    mpi4py.rc.finalize = False
    from mpi4py import MPI

    return MPI, True


def is_available() -> bool:
    """Whether process groups can be created here (mpi4py is importable)."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


class MPIRequest:
    """MPI requests as a communicator request: ``test()`` until true, then ``result()`` once."""

    __slots__ = ("reqs", "out", "keep")

    def __init__(self, reqs, out=None, keep=None):
        self.reqs = reqs if isinstance(reqs, list) else [reqs]
        self.out, self.keep = out, keep  # ``keep``: buffers MPI reads until completion

    def test(self) -> bool:
        return all(r.Test() for r in self.reqs)

    def result(self):
        return self.out() if callable(self.out) else self.out


def raw(x: np.ndarray) -> np.ndarray:
    """The bytes of ``x`` (MPI moves every dtype, bfloat16 and complex included, as bytes)."""
    return np.ascontiguousarray(x).reshape(-1).view(np.uint8)


def typed(b: np.ndarray, shape, dtype) -> np.ndarray:
    return b.view(dtype).reshape(shape)


class HostCommunicator:
    """Collectives over one MPI communicator on host arrays (``x``: a numpy array)."""

    name = "mpi"

    def __init__(self, comm):
        self.comm = comm
        self.MPI = sys.modules["mpi4py.MPI"]
        self.size = comm.Get_size()

    def _reducible(self, x: np.ndarray, op: str):
        """``(flat array, MPI op, back)``: what MPI reduces, and ``back(y, shape)`` making its result ``x``'s dtype."""
        MPI = self.MPI
        if x.dtype == np.bool_:
            return raw(x), {"max": MPI.LOR, "min": MPI.LAND}[op], lambda y, shape: y.view(np.bool_).reshape(shape)
        mop = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}[op]
        a = np.ascontiguousarray(x, np.float32 if x.dtype.name in ("float16", "bfloat16") else x.dtype).reshape(-1)
        return a, mop, lambda y, shape: y.astype(x.dtype, copy=False).reshape(shape)

    def all_reduce(self, x, op):
        a, mop, back = self._reducible(x, op)
        y = np.empty_like(a)
        return MPIRequest(self.comm.Iallreduce(a, y, mop), lambda: back(y, x.shape), a)

    def reduce(self, x, dst, op):
        a, mop, back = self._reducible(x, op)
        root = self.comm.Get_rank() == dst
        y = np.empty_like(a) if root else None
        return MPIRequest(self.comm.Ireduce(a, y, mop, root=dst), (lambda: back(y, x.shape)) if root else None, a)

    def reduce_scatter(self, x, op):
        a, mop, back = self._reducible(x, op)
        y = np.empty(a.size // self.size, a.dtype)
        return MPIRequest(self.comm.Ireduce_scatter_block(a, y, mop), lambda: back(y, x.shape[1:]), a)

    def broadcast(self, x, src):
        b = raw(x).copy()
        return MPIRequest(self.comm.Ibcast(b, root=src), lambda: typed(b, x.shape, x.dtype))

    def all_gather(self, x):
        b = raw(x)
        y = np.empty(b.size * self.size, np.uint8)
        return MPIRequest(self.comm.Iallgather(b, y), lambda: typed(y, (self.size, *x.shape), x.dtype), b)

    def gather(self, x, dst):
        b = raw(x)
        root = self.comm.Get_rank() == dst
        y = np.empty(b.size * self.size, np.uint8) if root else None
        out = (lambda: typed(y, (self.size, *x.shape), x.dtype)) if root else None
        return MPIRequest(self.comm.Igather(b, y, root=dst), out, b)

    def scatter(self, x, src, like):
        y = np.empty_like(raw(like))
        b = raw(x) if x is not None else None
        return MPIRequest(self.comm.Iscatter(b, y, root=src), lambda: typed(y, like.shape, like.dtype), b)

    def all_to_all(self, x):
        b = raw(x)
        y = np.empty_like(b)
        return MPIRequest(self.comm.Ialltoall(b, y), lambda: typed(y, x.shape, x.dtype), b)

    def send(self, x, dst, tag):
        b = raw(x)
        return MPIRequest(self.comm.Isend(b, dest=dst, tag=tag), None, b)

    def recv(self, like, src, tag):
        y = np.empty_like(raw(like))
        return MPIRequest(self.comm.Irecv(y, source=src, tag=tag), lambda: typed(y, like.shape, like.dtype))


__all__ = ["DistributedError", "DistributedTimeoutError", "poll", "HostCommunicator", "MPIRequest", "load", "is_available"]
