"""What a backend plugin implements: a :class:`Runtime` and a table of kernels.

This module is the vendor-facing API. A plugin module (named by an entry point in
group ``anydevice.backends``) implements the hooks in :mod:`anydevice.plugins.hookspecs`;
the central one, ``anydevice_create_runtime``, returns an instance of a
:class:`Runtime` subclass.

Required runtime methods raise ``NotImplementedError`` here. Optional methods are
*absent* from this base class: the core detects them with ``hasattr`` and substitutes
a fallback when a runtime lacks them (see each fallback in :mod:`anydevice._backend`).

Optional methods and the core's substitute when absent:

====================================================  ===========================================
``copy_h2d_async(index, dst, offset, src, stream)``   synchronous ``copy_h2d``
``copy_d2h_async(index, dst, src, offset, stream)``   synchronous ``copy_d2h``
``copy_d2d(index, dst, dst_off, src, src_off, n)``    stage through host memory
``copy_p2p(dst_index, dst, dst_off, src_index,        stage through host memory
src, src_off, n)``
``copy_peer(buf, src_index, dst_index) -> buffer``    own-storage runtimes: stage through host memory
``memset(index, handle, offset, byte, nbytes)``       fill on the host, then ``copy_h2d``
``create_stream(index)`` / ``destroy_stream(s)``      one default stream per device (handle None)
``synchronize_stream(index, s)``                      ``synchronize(index)``
``query_stream(index, s)``                            ``synchronize_stream`` then True
``create_event(index)`` / ``record_event(index,       host-side events that synchronize the stream
event, stream)`` / ``synchronize_event(index, e)``    when recorded
``query_event(index, e)``                             ``synchronize_event`` then True
``stream_wait_event(index, stream, event)``           ``synchronize_event`` (host waits)
``elapsed_time(index, start, end)``                   host timestamps taken at record time
``memory_info(index) -> (free, total)``               capacity unknown: ``(None, None)``
``properties(index) -> dict``                         ``{"name": "<type>:<index>"}``
``dtypes(index) -> iterable of DType``                every anydevice dtype
``empty / from_host / to_host / memory_stats``        the core's caching allocator over
                                                      ``malloc``/``free`` and ``DeviceArray``
``device_time(op, nbytes, flops) -> float``           no simulated device time in the profiler
``start_trace(index)`` / ``stop_trace(index)``        no device timeline in the profiler
``replayable(fn, kwargs) -> fn'``                     a compiled graph calls its planned kernels as they are
``reset(index)``                                      :class:`~anydevice.errors.UnsupportedError`
``probe(index)``                                      every device is assumed usable
====================================================  ===========================================

Device admission: ``probe(index)`` is called once per physical device the first time the type is
used (after ``ANYDEVICE_<TYPE>_VISIBLE_DEVICES`` is applied). It returns None for a usable device
and raises :class:`~anydevice.errors.DeviceUnavailableError` (with ``hint=`` saying what to do)
for one that cannot work, e.g. a compiler that cannot build a kernel for it. Unusable devices are
left out of the visible set, so indices stay dense; ``anydevice check``, ``anydevice plugins``
and the error for an out-of-range index list them with reason and hint.
``ANYDEVICE_KEEP_UNUSABLE=1`` keeps them visible (for driver debugging).

Compiled graphs: ``replayable(fn, kwargs)`` receives a kernel of the runtime's table that a compiled
graph's planned executor calls on every replay with the same keyword arguments, and returns what the
executor calls instead, ``fn'(ctx, *args)`` (the kernel's positional arguments, the attributes bound):
a runtime may record the launches the kernel makes and replay them without its host code, as the
OpenCL backend does (``anydevice_opencl.recording``). Random nodes are never passed (their key and
offset change every replay).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import numpy as np

from anydevice.base.dtypes import DType
from anydevice.base.errors import PluginError

#: The plugin API version of this core. A plugin targeting another version is skipped.
API_VERSION = 1
#: API versions this core accepts from plugins.
SUPPORTED_API_VERSIONS = (1,)


class DeviceTypeSpec(NamedTuple):
    """A device type a plugin provides, returned by ``anydevice_device_types``.

    :param name: the type as users write it (``"npu"``); must equal the entry point's name.
    :param aliases: other spellings (``("gpu",)`` for cuda).
    :param description: one line shown by ``anydevice check``.
    :param dlpack_code: DLPack device type code (kDLExtDev = 12 for custom accelerators).
    """

    name: str
    aliases: tuple = ()
    description: str = ""
    dlpack_code: int = 12


class Block:
    """A piece of device memory handed out by an allocator; freed when garbage collected."""

    __slots__ = ("handle", "offset", "size", "index", "stream", "owner", "__weakref__")

    def __init__(self, handle, offset: int, size: int, index: int, stream=None, owner=None):
        self.handle, self.offset, self.size, self.index = handle, offset, size, index
        self.stream, self.owner = stream, owner

    def __del__(self):
        owner = self.owner
        if owner is not None:
            self.owner = None
            try:
                owner.release(self)
            except Exception:  # interpreter shutdown: nothing left to return memory to
                pass


class DeviceArray:
    """A dense, C-contiguous array in device memory: the buffer type of allocator-backed backends.

    Kernels receive and return these. ``handle`` and ``offset`` locate the first byte in
    the runtime's address space; several arrays may share one :class:`Block` (views made by
    reshape), which is safe because buffers are never written after they are produced.
    """

    __slots__ = ("block", "offset", "shape", "dtype")

    def __init__(self, block: Block, shape: tuple, dtype: DType, offset: int = 0):
        self.block, self.shape, self.dtype, self.offset = block, shape, dtype, offset

    @property
    def handle(self):
        return self.block.handle

    @property
    def byte_offset(self) -> int:
        """Offset of the first element from the start of ``handle``."""
        return self.block.offset + self.offset

    @property
    def index(self) -> int:
        return self.block.index

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def view(self, shape: tuple, dtype: DType | None = None, offset: int = 0) -> DeviceArray:
        """Another array over the same memory (same block), e.g. for reshape."""
        return DeviceArray(self.block, tuple(shape), dtype or self.dtype, self.offset + offset)

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype.name}, device_index={self.index})"


class KernelContext:
    """First argument of every kernel: the runtime, the *physical* device index the runtime
    knows (``index``), and the user-visible :class:`~anydevice.devices.Device` (``device``)."""

    __slots__ = ("runtime", "index", "device", "_backend", "stream", "empty")

    def __init__(self, runtime, index: int, device, backend):
        self.runtime, self.index, self.device, self._backend = runtime, index, device, backend
        #: The runtime's handle of the current stream on this device (None: the default stream);
        #: kept up to date by the core when the current stream changes.
        self.stream = None
        #: ``empty(shape, dtype)``: allocate an output buffer on this device (a DeviceArray). The
        #: core's Backend puts its allocator's own function here (the hot path of every device op).
        self.empty = self._empty

    def _empty(self, shape: tuple, dtype: DType):
        return self._backend.empty(self.device.index, shape if type(shape) is tuple else tuple(shape), dtype)

    def empty_many(self, specs) -> list:
        """Output buffers of ``specs`` (``(shape, dtype)`` pairs, shapes as tuples) from one
        allocation: for results that die together (an optimizer step's new states). The memory
        is released when the last of them is collected."""
        return self._backend.empty_many(self.device.index, specs)


class Kernel(NamedTuple):
    fn: Callable
    dtypes: frozenset | None
    out: bool


class KernelTable:
    """Kernels of one device type, filled by ``anydevice_register_kernels``.

    Calling conventions (``out`` chooses):

    - ``out=False``: ``fn(ctx, *inputs, **attrs) -> buffer``; the kernel allocates its result.
    - ``out=True``: ``fn(ctx, out, *inputs, **attrs) -> None``; the core allocates ``out``
      from the op's shape and dtype rules, and the kernel fills it.

    Inputs arrive already on this device, promoted to the op's compute dtype; an op with a
    variadic input (``concat``) receives it as one list. Kernels must not modify their inputs.
    """

    def __init__(self, device_type: str, plugin: str | None = None):
        self.device_type, self.plugin = device_type, plugin
        self._kernels: dict[str, list[Kernel]] = {}

    def register(self, op: str, fn: Callable | None = None, *, dtypes: Iterable | None = None, out: bool = False):
        """Register ``fn`` for ``op``; usable as a decorator. ``dtypes`` limits it to inputs of those dtypes."""
        if fn is None:
            return lambda f: self.register(op, f, dtypes=dtypes, out=out) or f
        from anydevice.ops.registry import get_op  # validates the op name

        get_op(op)
        if not callable(fn):
            raise PluginError(f"plugin {self.plugin or '?'} registered {fn!r} ({type(fn).__name__}) as the "
                              f"{self.device_type} kernel of op {op!r}; a kernel must be a callable")
        ds = None if dtypes is None else frozenset(_as_dtype(d) for d in dtypes)
        self._kernels.setdefault(op, []).insert(0, Kernel(fn, ds, out))
        return fn

    def lookup(self, op: str, dtype: DType | None) -> Kernel | None:
        for k in self._kernels.get(op, ()):
            if k.dtypes is None or dtype is None or dtype in k.dtypes:
                return k
        return None

    def ops(self) -> list[str]:
        return sorted(self._kernels)

    def __contains__(self, op: str) -> bool:
        return op in self._kernels


def _as_dtype(d) -> DType:
    from anydevice.base.dtypes import dtype

    return dtype(d)


class Runtime:
    """Base class of a backend runtime: memory, copies, streams, events, synchronization.

    Subclass it once per device type and return an instance from
    ``anydevice_create_runtime``. Handles (memory, streams, events) are opaque objects
    of the runtime's choosing. Methods take the device ``index`` explicitly; the core never
    relies on a "current device" inside the runtime.

    Required: :meth:`device_count`, :meth:`malloc`, :meth:`free`, :meth:`copy_h2d`,
    :meth:`copy_d2h`, :meth:`synchronize`. Everything else is optional (module docstring).

    A runtime that keeps its own storage (the cpu backend keeps numpy arrays) defines
    ``empty(index, shape, dtype)``, ``from_host(index, ndarray)`` and ``to_host(buffer)``
    instead of ``malloc``/``free``/copies; the core then uses its buffers as they are.
    """

    #: Minimum allocation granularity used by the core's caching allocator, in bytes.
    alignment: int = 256

    def device_count(self) -> int:
        """Number of devices of this type visible to this process."""
        raise NotImplementedError

    def malloc(self, index: int, nbytes: int) -> Any:
        """Allocate ``nbytes`` of device memory; return an opaque handle.

        Raise ``MemoryError`` when the device is out of memory: the core then frees its
        cache, retries once, and raises :class:`~anydevice.OutOfMemoryError`.
        """
        raise NotImplementedError

    def free(self, index: int, handle: Any) -> None:
        """Release memory returned by :meth:`malloc`."""
        raise NotImplementedError

    def copy_h2d(self, index: int, dst: Any, offset: int, src: np.ndarray) -> None:
        """Copy the bytes of the contiguous host array ``src`` to ``dst`` + ``offset``.

        Ordered after all work queued on the current stream; returns when ``src`` may be reused.
        """
        raise NotImplementedError

    def copy_d2h(self, index: int, dst: np.ndarray, src: Any, offset: int) -> None:
        """Fill the contiguous host array ``dst`` from ``src`` + ``offset``; blocks until done
        (after all queued work), and raises any pending asynchronous device error."""
        raise NotImplementedError

    def synchronize(self, index: int) -> None:
        """Wait for all work on device ``index``; raise a pending asynchronous error if any."""
        raise NotImplementedError
