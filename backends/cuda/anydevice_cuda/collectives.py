"""NCCL (``cupy.cuda.nccl``) for cuda: all_reduce across the local GPUs of one process, and the
communicator of ``anydevice.distributed`` across processes (:func:`factory`), when NCCL is installed.

Returns None whenever NCCL cannot do the job (not installed, a dtype NCCL lacks, two buffers
on one GPU) so the core stages the reduction through host memory instead.
"""
from __future__ import annotations

import time
import warnings

import numpy as np

# anydevice dtype name -> NCCL constant name
_NCCL_TYPES = {
    "int8": "NCCL_INT8", "uint8": "NCCL_UINT8", "int32": "NCCL_INT32", "uint32": "NCCL_UINT32",
    "int64": "NCCL_INT64", "uint64": "NCCL_UINT64", "float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32",
    "float64": "NCCL_FLOAT64", "bfloat16": "NCCL_BFLOAT16",
}
_NCCL_OPS = {"sum": "NCCL_SUM", "prod": "NCCL_PROD", "max": "NCCL_MAX", "min": "NCCL_MIN"}
_comms: dict = {}
_UID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES


def nccl_module():
    """``cupy.cuda.nccl`` if NCCL can be loaded, else None (without CuPy's import warning)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from cupy.cuda import nccl
    except Exception:  # noqa: BLE001 - ImportError, or a broken libnccl
        return None
    return nccl if getattr(nccl, "available", False) else None


def nccl_version() -> str | None:
    nccl = nccl_module()
    if nccl is None:
        return None
    try:
        v = int(nccl.get_version())
    except Exception:  # noqa: BLE001
        return "available"
    major, rest = (v // 10000, v % 10000) if v >= 10000 else (v // 1000, v % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def nccl_dtype(nccl, dtype_name: str):
    name = _NCCL_TYPES.get(dtype_name)
    return None if name is None else getattr(nccl, name, None)


def all_reduce(cupy, buffers: list, op: str):
    """One reduced copy per input buffer, each on its input's GPU; None if NCCL cannot do it."""
    nccl = nccl_module()
    if nccl is None or len(buffers) < 2:
        return None
    from anydevice.base import dtypes as _dt

    devices = [int(b.device.id) for b in buffers]
    code = nccl_dtype(nccl, _dt.dtype(buffers[0].dtype).name)
    red = getattr(nccl, _NCCL_OPS.get(op, ""), None)
    if code is None or red is None or len(set(devices)) != len(devices):
        return None
    key = tuple(devices)
    comms = _comms.get(key)
    if comms is None:
        comms = _comms[key] = nccl.NcclCommunicator.initAll(list(devices))
    srcs, outs, streams = [], [], []
    for d, b in zip(devices, buffers):
        with cupy.cuda.Device(d):
            srcs.append(cupy.ascontiguousarray(b))
            outs.append(cupy.empty(b.shape, dtype=b.dtype))
            streams.append(cupy.cuda.get_current_stream())
    nccl.groupStart()
    try:
        for comm, d, src, out, s in zip(comms, devices, srcs, outs, streams):
            with cupy.cuda.Device(d):
                comm.allReduce(src.data.ptr, out.data.ptr, src.size, code, red, s.ptr)
    finally:
        nccl.groupEnd()
    return outs


# --- across processes: the anydevice_collectives hook --------------------------------------------
def factory(runtime):
    """``factory(bootstrap) -> NcclCommunicator`` when NCCL can be loaded, else None (the core uses MPI)."""
    nccl = nccl_module()
    if nccl is None:
        return None
    return lambda bootstrap: NcclCommunicator(runtime.cp, nccl, bootstrap)


class NcclCommunicator:
    """Collectives between processes, one GPU each, through NCCL (``cupy.cuda.nccl``).

    Rank 0 creates the NCCL unique id and broadcasts it over the bootstrap's MPI communicator;
    then every rank joins the NCCL communicator of the group. Each call queues the NCCL kernel on
    the GPU's current stream and records an event after it: the request is done when the event
    is. Data-movement collectives move bytes (any dtype); reductions of ``bool`` run on its bytes
    (``max``: or, ``min``: and); a dtype NCCL cannot reduce (complex max/min/prod) is declined, so
    the core stages it through MPI, and so are send/recv with a tag (NCCL has none). NCCL has no
    all-to-all: it is one group of sends and receives.
    """

    name = "nccl"

    def __init__(self, cupy, nccl, bootstrap):
        self.cp, self.nccl, self.n, self.rank = cupy, nccl, bootstrap.size, bootstrap.rank
        self.mpi, self.timeout, self.boot = bootstrap.comm, bootstrap.timeout, bootstrap
        self.comms: dict = {}  # GPU id -> NCCL communicator (NCCL binds one to the GPU current at its creation)

    def _comm(self, device_id: int):
        """The NCCL communicator of this process's GPU ``device_id``, created by the first collective on it
        (every rank is in that collective): rank 0's unique id is broadcast over MPI, polled until the timeout."""
        c = self.comms.get(device_id)
        if c is None:
            uid = np.array(self.nccl.get_unique_id() if self.rank == 0 else (0,) * _UID_BYTES, np.int64)
            req, deadline = self.mpi.Ibcast(uid, root=0), time.monotonic() + self.timeout
            while not req.Test():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the NCCL unique id did not arrive from rank 0 within {self.timeout:g} s")
                time.sleep(1e-3)
            with self.cp.cuda.Device(device_id):
                c = self.comms[device_id] = self.nccl.NcclCommunicator(self.n, tuple(int(v) for v in uid), self.rank)
        return c

    def destroy(self):
        for c in self.comms.values():
            c.destroy()
        self.comms.clear()

    def abort(self):
        """After a timeout: NCCL kernels waiting for a dead peer would never finish."""
        for c in self.comms.values():
            c.abort()
        self.comms.clear()

    # --- helpers -------------------------------------------------------------------------------
    def _flat(self, x, reduce_op=None):
        """``(flat input, NCCL dtype, NCCL op or None, view back)``, or None when NCCL cannot do it."""
        cp, nccl = self.cp, self.nccl
        x = cp.ascontiguousarray(x)
        if reduce_op is None or x.dtype == cp.bool_:
            if reduce_op is not None and reduce_op not in ("max", "min"):
                return None
            flat = x.reshape(-1).view(cp.uint8)
            return flat, nccl.NCCL_UINT8, _op(nccl, reduce_op), lambda y, shape: y.view(x.dtype).reshape(shape)
        code = nccl_dtype(nccl, x.dtype.name)
        if code is None and x.dtype.kind == "c" and reduce_op == "sum":  # complex sum: a sum of its parts
            code = nccl_dtype(nccl, x.real.dtype.name)
            flat = x.reshape(-1).view(x.real.dtype)
            return flat, code, _op(nccl, reduce_op), lambda y, shape: y.view(x.dtype).reshape(shape)
        if code is None:
            return None
        return x.reshape(-1), code, _op(nccl, reduce_op), lambda y, shape: y.reshape(shape)

    def _queue(self, x, launch):
        """Queue ``launch(comm, stream_ptr)`` on the current stream of ``x``'s GPU (anydevice's, else
        CuPy's); the request is done when the queued work is."""
        cp = self.cp
        comm = self._comm(x.device.id)
        with cp.cuda.Device(x.device.id):
            stream = self.boot.stream(int(x.device.id)) or cp.cuda.get_current_stream()
            launch(comm, stream.ptr)
            event = cp.cuda.Event(block=False, disable_timing=True)
            event.record(stream)
        return event

    def _empty(self, like, n, dtype):
        with self.cp.cuda.Device(like.device.id):
            return self.cp.empty(n, dtype=dtype)

    # --- collectives ---------------------------------------------------------------------------
    def all_reduce(self, x, op):
        f = self._flat(x, op)
        if f is None:
            return None
        flat, code, red, back = f
        y = self._empty(x, flat.size, flat.dtype)
        ev = self._queue(x, lambda c, s: c.allReduce(flat.data.ptr, y.data.ptr, flat.size, code, red, s))
        return _Request(ev, lambda: back(y, x.shape), flat)

    def reduce(self, x, dst, op):
        f = self._flat(x, op)
        if f is None:
            return None
        flat, code, red, back = f
        y = self._empty(x, flat.size, flat.dtype)
        ev = self._queue(x, lambda c, s: c.reduce(flat.data.ptr, y.data.ptr, flat.size, code, red, dst, s))
        return _Request(ev, (lambda: back(y, x.shape)) if self.rank == dst else None, flat)

    def reduce_scatter(self, x, op):
        f = self._flat(x, op)
        if f is None:
            return None
        flat, code, red, back = f
        y = self._empty(x, flat.size // self.n, flat.dtype)
        ev = self._queue(x, lambda c, s: c.reduceScatter(flat.data.ptr, y.data.ptr, y.size, code, red, s))
        return _Request(ev, lambda: back(y, x.shape[1:]), flat)

    def broadcast(self, x, src):
        flat, code, _, back = self._flat(x)
        y = flat.copy()
        ev = self._queue(x, lambda c, s: c.bcast(y.data.ptr, y.size, code, src, s))
        return _Request(ev, lambda: back(y, x.shape))

    def all_gather(self, x):
        flat, code, _, back = self._flat(x)
        y = self._empty(x, flat.size * self.n, flat.dtype)
        ev = self._queue(x, lambda c, s: c.allGather(flat.data.ptr, y.data.ptr, flat.size, code, s))
        return _Request(ev, lambda: back(y, (self.n, *x.shape)), flat)

    def all_to_all(self, x):
        flat, code, _, back = self._flat(x)
        y = self._empty(x, flat.size, flat.dtype)
        k = flat.size // self.n
        nccl = self.nccl

        def launch(c, s):
            nccl.groupStart()
            try:
                for p in range(self.n):
                    c.send(flat[p * k:].data.ptr, k, code, p, s)
                    c.recv(y[p * k:].data.ptr, k, code, p, s)
            finally:
                nccl.groupEnd()

        ev = self._queue(x, launch)
        return _Request(ev, lambda: back(y, x.shape), flat)

    def send(self, x, dst, tag):
        if tag:
            return None  # NCCL has no tags (messages between two ranks match in order): MPI does it
        flat, code, _, _ = self._flat(x)
        ev = self._queue(x, lambda c, s: c.send(flat.data.ptr, flat.size, code, dst, s))
        return _Request(ev, None, flat)

    def recv(self, like, src, tag):
        if tag:
            return None
        y = self._empty(like, like.shape, like.dtype)
        flat, code, _, _ = self._flat(y)
        ev = self._queue(y, lambda c, s: c.recv(flat.data.ptr, flat.size, code, src, s))
        return _Request(ev, lambda: y)


def _op(nccl, op):
    return None if op is None else getattr(nccl, _NCCL_OPS[op])


class _Request:
    __slots__ = ("event", "out", "keep")

    def __init__(self, event, out, keep=None):
        self.event, self.out, self.keep = event, out, keep  # ``keep``: inputs the GPU reads until done

    def test(self) -> bool:
        return bool(self.event.done)

    def result(self):
        return self.out() if self.out is not None else None
