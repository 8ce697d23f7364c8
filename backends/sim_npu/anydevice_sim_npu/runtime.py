"""The runtime of the simulated accelerators: device memory, copies, streams, events, errors.

Device memory belongs to the simulated device. ``malloc`` returns an integer address; the
bytes live in a per-device store that host code reaches only through the copy methods
(``peek`` is a debugging aid that deliberately reads without synchronizing). Capacity is
enforced per device; host RAM holds only live allocations, each a lazily committed numpy
byte buffer.

Kernels (:meth:`SimRuntime.launch`) and ``copy_h2d_async``/``copy_d2h_async`` are queued on
a stream and return at once. Synchronous copies, ``memset`` and ``copy_d2d``/``copy_p2p`` run
on the calling thread: the core only ever writes into freshly allocated buffers with them,
and every read first waits for the device's queued work.

A kernel that raises puts its device into an error state (*sticky*, as on CUDA): the
error is raised as :class:`anydevice.DeviceError` at every synchronization point
(``synchronize``, ``copy_d2h``, stream/event sync) and queued kernels are skipped until
:meth:`SimRuntime.reset`. Other devices are unaffected.
"""
from __future__ import annotations

import threading

import numpy as np

from anydevice.base.errors import DeviceError
from anydevice.runtime import Runtime

from .streams import HEAVY_BYTES, Marker, SimEvent, SimStream

DIST = "anydevice-sim-npu"


#: Most numpy views of device memory kept per (shape, dtype), and most (shape, dtype) tables.
VIEW_CACHE_SIZE = 4096
VIEW_TABLES = 1024


class ViewCache:
    """Numpy views of device memory for the element-wise kernels: one table per (shape, dtype),
    keyed by address, shared by the devices of a runtime (their address ranges are disjoint).

    The caching allocator hands the same few chunks out again and again, so element-wise
    kernels on small tensors mostly find their views here instead of building new ones; a
    kernel's plan holds the tables of its operands, so finding a view is one lookup by address.
    Queued kernels take their views from here too (kernels only read their inputs, and only
    this module writes outputs). Freeing
    device memory empties it (:meth:`clear`), so no cached view outlives its memory; since
    ``clear`` also forgets the plans that hold tables (``plans``), no table escapes it.
    """

    def __init__(self, mem: dict):
        self.mem, self.tables, self.plans = mem, {}, []

    def table(self, shape: tuple, dtype) -> dict:
        t = self.tables.get((shape, dtype))
        if t is None:
            if len(self.tables) >= VIEW_TABLES:
                self.clear()
            t = self.tables[(shape, dtype)] = {}
        return t

    def tables_for(self, *keys) -> list:
        """The tables of several (shape, dtype) keys, all still held by this cache."""
        if len(self.tables) + len(keys) > VIEW_TABLES:
            self.clear()
        return [self.table(*k) for k in keys]

    def make(self, table: dict, arr) -> np.ndarray:
        """Build, cache in ``table`` and return the view of ``arr`` (a DeviceArray)."""
        if len(table) >= VIEW_CACHE_SIZE:
            table.clear()
        blk = arr.block
        addr = blk.offset + arr.offset
        v = table[blk.handle + addr] = np.ndarray(arr.shape, arr.dtype._np or arr.dtype.numpy, self.mem[blk.handle], addr)
        return v

    def cached(self, table: dict, arr) -> np.ndarray:
        """The view of ``arr`` from ``table`` (its shape's and dtype's), made on a miss."""
        blk = arr.block
        v = table.get(blk.handle + blk.offset + arr.offset)
        return self.make(table, arr) if v is None else v

    def view(self, arr) -> np.ndarray:
        t = self.table(arr.shape, arr.dtype)
        blk = arr.block
        v = t.get(blk.handle + blk.offset + arr.offset)
        return self.make(t, arr) if v is None else v

    def clear(self) -> None:
        for plans in self.plans:
            plans.clear()
        self.tables.clear()

    def __len__(self) -> int:
        return sum(len(t) for t in self.tables.values())


class Chip:
    """State of one simulated device."""

    def __init__(self, device_type: str, index: int, profile, views: ViewCache):
        self.name, self.index, self.capacity = f"{device_type}:{index}", index, profile.memory
        self.profile = profile
        self.lock = threading.Lock()
        self.store: dict[int, np.ndarray] = {}
        self.views = views  # of every device of the type
        self.view = views.view
        self.used = 0
        self._next = (index + 1) << 48  # each device has its own address range
        self.streams: list[SimStream] = []
        self.default = self.new_stream()
        self.error: DeviceError | None = None
        self.lost = False
        self.faults: dict[str, int] = {}   # kind -> operations left before it fires
        self.trace: list | None = None     # (stream id, name, start, end) of each item run, while tracing

    def new_stream(self) -> SimStream:
        s = SimStream(self, len(self.streams))
        self.streams.append(s)
        return s

    def fail(self, stream, what: str, exc: BaseException) -> None:
        if self.error is None:
            self.error = DeviceError(
                f"{self.name} ({DIST}): {what} failed on stream {stream.id}: {type(exc).__name__}: {exc}. "
                f"The device stays in this error state until it is reset with "
                f"anydevice_sim_npu.reset('{self.name}')"
            )
            self.error.__cause__ = exc

    def check(self) -> None:
        """Raise the sticky error, if any (every synchronization point calls this)."""
        if self.lost:
            raise DeviceError(f"{self.name} ({DIST}) is lost (injected fault); reset it with "
                              f"anydevice_sim_npu.reset('{self.name}')")
        if self.error is not None:
            raise self.error

    def tick(self, kind: str) -> bool:
        """Count one operation against pending faults; True when a fault of ``kind`` fires now."""
        f = self.faults
        if not f:
            return False
        if "lost" in f:
            f["lost"] -= 1
            if f["lost"] < 0:
                self.lost = True
                self.check()
        if kind in f and kind != "lost":
            f[kind] -= 1
            return f[kind] < 0
        return False

    def busy(self, stream) -> bool:
        """Another stream than ``stream`` has work queued or running."""
        return any(s.busy() for s in self.streams if s is not stream)

    def drain(self) -> None:
        for s in list(self.streams):
            s.wait()


class SimRuntime(Runtime):
    """Runtime of one simulated device type (``npu``, ``xpu`` or ``dcu``)."""

    alignment = 256

    def __init__(self, device_type: str, profile):
        self.type, self.profile = device_type, profile
        self.mem: dict[int, np.ndarray] = {}  # address -> bytes, for every device (addresses are unique)
        self.views = ViewCache(self.mem)
        self.chips = [Chip(device_type, i, profile, self.views) for i in range(profile.count)]

    # --- required -------------------------------------------------------------------
    def device_count(self) -> int:
        return len(self.chips)

    def malloc(self, index: int, nbytes: int) -> int:
        chip = self.chips[index]
        chip.check()
        if chip.tick("alloc"):
            raise MemoryError(f"{chip.name}: allocation of {nbytes} bytes failed (injected fault)")
        if chip.used + nbytes > chip.capacity:
            # Queued kernels keep their buffers alive; let them finish so the core's retry
            # (after emptying its cache) sees every buffer that is really free.
            chip.drain()
            raise MemoryError(f"{chip.name}: {nbytes} bytes requested, {chip.capacity - chip.used} of "
                              f"{chip.capacity} free")
        with chip.lock:
            addr = chip._next
            chip._next += -(-nbytes // 4096) * 4096
            chip.store[addr] = self.mem[addr] = np.zeros(nbytes, np.uint8)  # calloc: committed on first touch
            chip.used += nbytes
        return addr

    def free(self, index: int, handle: int) -> None:
        chip = self.chips[index]
        with chip.lock:
            mem = chip.store.pop(handle)
            del self.mem[handle]
            chip.used -= mem.nbytes
            self.views.clear()  # no cached view may keep freed memory alive

    def copy_h2d(self, index: int, dst: int, offset: int, src: np.ndarray) -> None:
        chip = self.chips[index]
        chip.check()
        chip.tick("copy")
        b = src.reshape(-1).view(np.uint8)
        chip.store[dst][offset:offset + b.nbytes] = b

    def copy_d2h(self, index: int, dst: np.ndarray, src: int, offset: int) -> None:
        chip = self.chips[index]
        chip.tick("copy")
        chip.drain()
        chip.check()
        b = dst.reshape(-1).view(np.uint8)
        b[...] = chip.store[src][offset:offset + b.nbytes]

    def synchronize(self, index: int) -> None:
        chip = self.chips[index]
        chip.drain()
        chip.check()

    # --- memory and copies ------------------------------------------------------------
    def memset(self, index: int, handle: int, offset: int, byte: int, nbytes: int) -> None:
        chip = self.chips[index]
        chip.check()
        chip.store[handle][offset:offset + nbytes] = byte

    def copy_d2d(self, index, dst, dst_off, src, src_off, n) -> None:
        self.copy_p2p(index, dst, dst_off, index, src, src_off, n)

    def copy_p2p(self, dst_index, dst, dst_off, src_index, src, src_off, n) -> None:
        s, d = self.chips[src_index], self.chips[dst_index]
        s.tick("copy")
        s.drain()
        s.check()
        d.check()
        d.store[dst][dst_off:dst_off + n] = s.store[src][src_off:src_off + n]

    def copy_h2d_async(self, index, dst, offset, src, stream) -> None:
        chip = self.chips[index]
        chip.check()
        data = np.array(src, copy=True).reshape(-1).view(np.uint8)  # the host may reuse src at once
        mem = chip.store[dst]
        self._stream(chip, stream).submit(_Copy("copy_h2d_async", mem, offset, data, chip.profile.transfer_time(data.nbytes)))

    def copy_d2h_async(self, index, dst, src, offset, stream) -> None:
        chip = self.chips[index]
        chip.check()
        out = dst.reshape(-1).view(np.uint8)
        mem = chip.store[src][offset:offset + out.nbytes]
        self._stream(chip, stream).submit(_Copy("copy_d2h_async", out, 0, mem, chip.profile.transfer_time(mem.nbytes)))

    def memory_info(self, index: int):
        c = self.chips[index]
        return (c.capacity - c.used, c.capacity)

    def peek(self, index: int, handle: int, offset: int, nbytes: int) -> bytes:
        """Device bytes as they are *now*, without waiting for queued work (debugging only)."""
        return self.chips[index].store[handle][offset:offset + nbytes].tobytes()

    # --- kernels ----------------------------------------------------------------------
    def launch(self, index: int, stream, name: str, fn, out, inputs, attrs, op=None, cost=None) -> None:
        """Queue ``out[...] = fn(None, *views(inputs), **attrs)`` on ``stream``; returns at once.

        ``out`` and ``inputs`` are DeviceArrays (or lists of them); the queued item keeps
        them alive until it has run, so their memory cannot be reused under it. ``cost`` is
        ``(modelled seconds, heavy, view tables)`` when the caller knows it (:func:`kernel_cost`;
        the tables of the :class:`ViewCache`: ``(output's, (each input's, ...))``, the output's a
        tuple of one per output for a multi-output op, or None).
        """
        chip = self.chips[index]
        if chip.faults and chip.tick("kernel"):
            fn = _injected(chip)
        seconds, heavy, tables = kernel_cost(self, name, op, out, inputs, attrs) if cost is None else cost
        (chip.default if stream is None else stream).submit(_Kernel(name, fn, out, inputs, attrs, seconds, self, tables),
                                                            heavy)

    def launch_ufunc(self, index: int, stream, name: str, ufunc, out, a, b, plan) -> None:
        """``ufunc(view(a), view(b), out=view(out))``: the fast path of element-wise kernels.

        ``plan`` (a :class:`~anydevice_sim_npu.kernels.Plan`) is what depends only on the operands'
        shapes and dtypes: the modelled seconds, whether the kernel is heavy, and the view tables
        of ``a``, ``b`` and ``out``. The stream runs a light one at once when it has nothing else
        to do, else queues it as a plain tuple.
        """
        chip = self.chips[index]
        s = chip.default if stream is None else stream
        if chip.faults and chip.tick("kernel"):
            s.submit(_Kernel(name, _injected(chip), out, (a, b), None, plan.seconds, self, None))
        else:
            s.elementwise(name, ufunc, out, a, b, plan)

    def view(self, arr) -> np.ndarray:
        """A numpy view of a DeviceArray's bytes (used by kernels on the stream worker)."""
        blk = arr.block
        return np.ndarray(arr.shape, arr.dtype._np or arr.dtype.numpy, self.mem[blk.handle], blk.offset + arr.offset)

    def device_time(self, op: str, nbytes: int, flops: float) -> float:
        """Simulated seconds of ``op`` moving ``nbytes`` and doing ``flops`` (roofline model)."""
        return self.profile.device_time(nbytes, flops)

    # --- streams and events -------------------------------------------------------------
    def _stream(self, chip, handle) -> SimStream:
        return chip.default if handle is None else handle

    def create_stream(self, index: int) -> SimStream:
        chip = self.chips[index]
        with chip.lock:
            return chip.new_stream()

    def destroy_stream(self, index: int, stream: SimStream) -> None:
        stream.stop()
        chip = self.chips[index]
        with chip.lock:
            if stream in chip.streams:
                chip.streams.remove(stream)

    def synchronize_stream(self, index: int, stream) -> None:
        chip = self.chips[index]
        self._stream(chip, stream).wait()
        chip.check()

    def query_stream(self, index: int, stream) -> bool:
        chip = self.chips[index]
        chip.check()
        return self._stream(chip, stream).idle()

    def create_event(self, index: int) -> SimEvent:
        return SimEvent()

    def record_event(self, index: int, event: SimEvent, stream) -> None:
        chip = self.chips[index]
        if chip.lost:
            chip.check()
        self._stream(chip, stream).record(event)

    def synchronize_event(self, index: int, event: SimEvent) -> None:
        if event.flag is not None:
            event.flag.wait()
        self.chips[index].check()

    def query_event(self, index: int, event: SimEvent) -> bool:
        self.chips[index].check()
        return event.flag is None or event.flag.is_set()

    def stream_wait_event(self, index: int, stream, event: SimEvent) -> None:
        self._stream(self.chips[index], stream).wait_event(event)

    def start_trace(self, index: int) -> None:
        """Record every kernel and copy that runs on device ``index`` from now on (see :meth:`stop_trace`)."""
        self.chips[index].trace = []

    def stop_trace(self, index: int) -> list:
        """What ran since :meth:`start_trace`, once queued work is done: ``(stream id, name, start,
        end)`` per kernel or copy, in seconds of the streams' simulated clocks."""
        chip = self.chips[index]
        chip.drain()
        out, chip.trace = chip.trace or [], None
        return out

    def elapsed_time(self, index: int, start: SimEvent, end: SimEvent) -> float:
        """Milliseconds of *simulated* device time between two recorded events."""
        for e in (start, end):
            if not e.recorded:
                raise ValueError("elapsed_time() needs both events recorded first")
            self.synchronize_event(index, e)
        return (end.clock - start.clock) * 1e3

    # --- device facts -------------------------------------------------------------------
    def properties(self, index: int) -> dict:
        p = self.profile
        return {"name": f"{self.type}:{index}", "model": p.name, "total_memory": p.memory,
                "peak_flops": p.peak_flops, "memory_bandwidth": p.bandwidth,
                "launch_latency_s": p.launch_latency, "streams": len(self.chips[index].streams),
                "plugin": DIST}

    def dtypes(self, index: int):
        from anydevice.base import dtypes as _dt

        names = set(self.profile.dtypes)
        return [d for d in _dt.ALL_DTYPES if not names or d.name in names]

    def reset(self, index: int) -> None:
        """Clear the error state, pending faults and lost status of one device.

        Queued work is skipped or completed first; allocations and their contents are kept
        (buffers written by skipped kernels hold undefined values).
        """
        chip = self.chips[index]
        if chip.error is None and not chip.lost:
            chip.error = DeviceError(f"{chip.name} is being reset")  # skip queued kernels
        chip.lost = False
        chip.drain()
        chip.faults.clear()
        chip.error = None

    # --- collectives --------------------------------------------------------------------
    def all_reduce(self, buffers: list, op: str, allocate) -> list:
        """Reduce ``buffers`` (one per device) over the simulated interconnect.

        ``allocate(i, shape, dtype)`` returns a new DeviceArray on the device of ``buffers[i]``.
        """
        chips = [self.chips[b.index] for b in buffers]
        for c in chips:
            c.tick("copy")
            c.drain()
            c.check()
        ufunc = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}[op]
        acc = np.array(self.view(buffers[0]), copy=True)
        for b in buffers[1:]:
            ufunc(acc, self.view(b), out=acc, casting="unsafe")
        outs = []
        for i, b in enumerate(buffers):
            o = allocate(i, b.shape, b.dtype)
            if o.nbytes:
                self.view(o)[...] = acc
            outs.append(o)
        return outs


class _Kernel:
    """A queued out=True kernel and its modelled time."""

    __slots__ = ("name", "fn", "out", "inputs", "attrs", "seconds", "rt", "tables")

    def __init__(self, name, fn, out, inputs, attrs, seconds, rt, tables=None):
        self.name, self.fn, self.out, self.inputs, self.attrs, self.seconds, self.rt, self.tables = (
            name, fn, out, inputs, attrs, seconds, rt, tables)

    def __call__(self, stream):
        compute(self.fn, self.name, self.out, self.inputs, self.attrs, self.tables, self.rt.views)
        stream.clock += self.seconds


class Into:
    """A kernel that writes its result into the views of its output buffers,
    ``fn(out, *views of inputs, **attrs)`` (``out``: a view, or a list of them for a multi-output
    op), instead of returning new arrays that :func:`compute` copies there. Outputs are fresh
    buffers, so they never overlap an input."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn


def compute(fn, name, out, inputs, attrs, tables, views) -> None:
    """``out[...] = fn(None, *views of inputs, **attrs)``, or ``fn.fn(views of out, *views of
    inputs, **attrs)`` for an :class:`Into` kernel, on whichever thread runs the stream.
    ``tables`` (see :meth:`SimRuntime.launch`) may be None."""
    multi = type(out) is tuple  # a multi-output op: one buffer per output
    if tables is not None:  # DeviceArray outputs and inputs, with their tables known
        cached, tabs = views.cached, tables[1]
        if multi:
            o = [cached(t, b) for t, b in zip(tables[0], out)]
        else:
            table, blk = tables[0], out.block
            o = table.get(blk.handle + blk.offset + out.offset)
            if o is None:
                o = views.make(table, out)
        if len(inputs) == 1:  # the common case, without a call
            x, t = inputs[0], tabs[0]
            blk = x.block
            v = t.get(blk.handle + blk.offset + x.offset)
            args = (views.make(t, x) if v is None else v,)
        else:
            args = [cached(t, x) for t, x in zip(tabs, inputs)]
    else:
        view = views.view
        args = [[view(a) for a in x] if type(x) is list else view(x) for x in inputs]
        o = tuple(view(b) for b in out) if multi else view(out)
    if type(fn) is Into:
        fn.fn(o, *args, **attrs)
        return
    r = fn(None, *args, **attrs) if attrs else fn(None, *args)
    for oe, re in zip(o, r) if multi else ((o, r),):
        if re is not oe:
            shape = getattr(re, "shape", None)  # an array or a numpy scalar
            if shape is None:
                shape = np.shape(re)
            if shape != oe.shape:
                raise ValueError(f"kernel {name} produced shape {shape}, expected {oe.shape}")
            oe[...] = re  # assignment casts as np.copyto(casting="unsafe") does


#: Kernels doing at least this many flops go to the worker at once, as heavy ones.
HEAVY_FLOPS = 1 << 26


def kernel_cost(rt, name, op, out, inputs, attrs):
    """(modelled seconds, heavy, None) of one kernel, from the bytes of its inputs and outputs and
    the op's flops; heavy: at least :data:`~anydevice_sim_npu.streams.HEAVY_BYTES` or :data:`HEAVY_FLOPS`.
    (None: no view tables; see :meth:`SimRuntime.launch`.)"""
    outs = out if type(out) is tuple else (out,)
    nbytes, shapes = sum(b.nbytes for b in outs), []
    for x in inputs:
        if type(x) is list:
            nbytes += sum(a.nbytes for a in x)
            shapes.append([a.shape for a in x])
        else:
            nbytes += x.nbytes
            shapes.append(x.shape)
    fl = getattr(op, "flops", None)
    flops = fl(shapes, attrs or {}) if fl is not None else sum(b.size for b in outs)
    return rt.device_time(name, nbytes, flops), nbytes >= HEAVY_BYTES or flops >= HEAVY_FLOPS, None


class _Copy:
    __slots__ = ("name", "dst", "off", "src", "seconds")

    def __init__(self, name, dst, off, src, seconds):
        self.name, self.dst, self.off, self.src, self.seconds = name, dst, off, src, seconds

    def __call__(self, stream):
        self.dst[self.off:self.off + self.src.nbytes] = self.src
        stream.clock += self.seconds


def _injected(chip):
    def fail(ctx, *a, **kw):
        if chip.lost:
            raise DeviceError(f"{chip.name} was lost")
        raise RuntimeError("injected kernel fault")

    return fail


__all__ = ["SimRuntime", "Chip", "Marker", "Into"]
