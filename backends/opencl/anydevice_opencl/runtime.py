"""The OpenCL runtime: devices, memory (``cl.Buffer``), queues as streams, markers as events,
and the program cache (in memory, and on disk keyed by source hash and device).

Device indices run over every platform's devices in platform order, then device order, after
the filters ``ANYDEVICE_OPENCL_PLATFORM`` (substring of the platform name, vendor or version,
case-insensitive: ``"pocl 3.1"`` picks one of two PoCLs) and ``ANYDEVICE_OPENCL_DEVICE_TYPE``
(``cpu``, ``gpu``, ``accelerator`` or ``all``). ``ANYDEVICE_OPENCL_VISIBLE_DEVICES`` (handled by
the core) then picks among those, and the probe (:meth:`OpenClRuntime.probe`: build and run a
tiny kernel) leaves out devices whose driver cannot, so ``opencl:0`` is a working device.
"""
from __future__ import annotations

import collections
import ctypes
import hashlib
import os
import resource
import struct
import threading
import time

import numpy as np
import pyopencl as cl

from anydevice.base import dtypes as _dt
from anydevice.base.errors import DeviceError, DeviceUnavailableError
from anydevice.runtime import Runtime

from . import codegen, diagnose

PLATFORM_ENV = "ANYDEVICE_OPENCL_PLATFORM"
DEVICE_TYPE_ENV = "ANYDEVICE_OPENCL_DEVICE_TYPE"
CACHE_ENV = "ANYDEVICE_OPENCL_CACHE_DIR"
BUILD_OPTIONS = ("-cl-fp32-correctly-rounded-divide-sqrt",)
#: added for the generic kernels (small, rarely repeated launches): halves PoCL's per-kernel code generation
GENERIC_OPTIONS = ("-cl-opt-disable",)
_TYPES = {"cpu": cl.device_type.CPU, "gpu": cl.device_type.GPU, "accelerator": cl.device_type.ACCELERATOR}
#: The probe's kernel: every work-item writes a value the host checks.
PROBE_SOURCE = "__kernel void anydevice_probe(__global int *x) { int i = get_global_id(0); x[i] = 3 * i + 1; }"
#: Allocations from this size on are checked against the host memory that can back them (PoCL's CPU device),
#: keeping HOST_RESERVE bytes for the driver's own allocations.
HOST_CHECK_BYTES = 1 << 20
HOST_RESERVE = 64 << 20
#: host-to-device copies up to this size are queued from a private copy instead of blocking
QUEUED_H2D_BYTES = 256 << 10
MAX_QUEUED_H2D = 256  # queued uploads kept in flight before the oldest is waited for


def host_memory_available() -> int | None:
    """Bytes the host can still give this process: the smaller of ``MemAvailable`` and the
    address-space limit (``RLIMIT_AS``) less the process's current size; None when unknown."""
    out = []
    fields = _proc_fields("/proc/meminfo", "MemAvailable")
    if fields:
        out.append(fields[0])
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft != resource.RLIM_INFINITY:
        size = _proc_fields("/proc/self/status", "VmSize")
        out.append(soft - (size[0] if size else 0))
    return min(out) if out else None


def _proc_fields(path: str, key: str) -> list[int]:
    """The ``key: N kB`` values of a /proc file, in bytes."""
    try:
        with open(path) as f:
            return [int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":")]
    except (OSError, ValueError, IndexError):
        return []


def discover() -> list:
    """The usable ``cl.Device`` objects, in index order; DeviceUnavailableError says why none."""
    try:
        platforms = cl.get_platforms()
    except cl.Error as e:
        platforms, err = [], e
    else:
        err = None
    if not platforms:
        f = diagnose.classify(f"no OpenCL platform ({err})" if err else "no OpenCL platform")
        raise DeviceUnavailableError("pyopencl found no OpenCL platform (no ICD is installed)"
                                     + (f": {err}" if err else ""), hint=f.hint)
    want = os.environ.get(PLATFORM_ENV, "").strip().lower()
    kind = os.environ.get(DEVICE_TYPE_ENV, "all").strip().lower() or "all"
    if kind != "all" and kind not in _TYPES:
        raise DeviceUnavailableError(f"{DEVICE_TYPE_ENV}={kind!r} is not one of cpu, gpu, accelerator, all")
    names = [f"{p.name} ({p.vendor}, {p.version})" for p in platforms]
    chosen = [p for p in platforms if not want or any(want in t.lower() for t in (p.name, p.vendor, p.version))]
    if not chosen:
        raise DeviceUnavailableError(f"{PLATFORM_ENV}={want!r} matches no OpenCL platform; found: {', '.join(names)}")
    devices = []
    for p in chosen:
        try:
            devices += [d for d in p.get_devices() if kind == "all" or d.type & _TYPES[kind]]
        except cl.Error:  # a platform with no device of any type raises DEVICE_NOT_FOUND
            continue
    if not devices:
        raise DeviceUnavailableError(f"no OpenCL device of type {kind!r} on platform(s) {', '.join(names)}")
    return devices


class _Event:
    """A marker event slot: ``record_event`` fills it."""

    __slots__ = ("cl",)

    def __init__(self):
        self.cl = None


class Launcher:
    """A kernel and the arguments it was last launched with: only changed arguments are set
    (``clSetKernelArg`` per argument is cheaper than pyopencl's full ``set_args``). Python ints
    are ``long`` arguments; they and numpy scalars go in as their bytes (:data:`_SET_BYTES`: about
    50x cheaper than ``Kernel.set_arg``, which probes the type of any non-buffer argument)."""

    __slots__ = ("kernel", "last", "put", "set", "owner", "native", "arrays")

    def __init__(self, kernel: cl.Kernel):
        self.kernel, self.last, self.owner = kernel, [], None
        self.put, self.set = getattr(kernel, _SET_BYTES, None), kernel.set_arg
        c = native_launch()
        #: the C launch (``_launch.c``), None without it; ``arrays`` is its method when present
        self.native = c.Launch(self, kernel, self._arrays_py) if c is not None else None
        self.arrays = self.native.arrays if self.native is not None else self._arrays_py

    def __call__(self, queue, gsize, lsize, args) -> None:
        rec = _recording[0]
        if rec is not None and rec[0] == threading.get_ident():  # a compiled graph's claim being recorded
            rec[1].append((self, gsize, lsize, list(args)))
        last, put = self.last, self.put
        if self.owner is not None and self.owner is self.native:  # the C launch set them: ``last`` is stale
            last.clear()
        self.owner = None
        if len(last) != len(args):
            last[:] = [None] * len(args)
        i = 0
        for a in args:
            b = last[i]
            if a is not b:
                if type(a) is int:
                    if type(b) is not int or a != b:
                        put(i, _LONG(a)) if put is not None else self.set(i, np.int64(a))
                        last[i] = a
                else:
                    put(i, a.tobytes()) if put is not None and type(a) is not _BUFFER else self.set(i, a)
                    last[i] = a
            i += 1
        cl.enqueue_nd_range_kernel(queue, self.kernel, gsize, lsize)

    def _arrays_py(self, queue, gsize, lsize, arrays, n: int) -> None:
        """A launch whose arguments are each of ``arrays`` (device arrays) as its buffer and its
        element offset, then ``n``: :meth:`__call__` without building the argument list (the
        hot path of every element-wise op). ``arrays`` is this, or the C launch that does the
        same and comes back here for what it does not handle."""
        rec = _recording[0]
        if rec is not None and rec[0] == threading.get_ident():
            args = []
            for a in arrays:
                b = a.block
                args += (b.handle, (b.offset + a.offset) // a.dtype.itemsize)
            rec[1].append((self, gsize, lsize, args + [n]))
        last, put, set_ = self.last, self.put, self.set
        if self.owner is not None and self.owner is self.native:
            last.clear()
        self.owner = None
        k = 2 * len(arrays)
        if len(last) != k + 1:
            last[:] = [None] * (k + 1)
        i = 0
        for a in arrays:
            b = a.block
            h = b.handle
            if last[i] is not h:
                set_(i, h)
                last[i] = h
            i += 1
            o = (b.offset + a.offset) // a.dtype.itemsize
            if last[i] != o:
                put(i, _LONG(o)) if put is not None else set_(i, np.int64(o))
                last[i] = o
            i += 1
        if last[k] != n:
            put(k, _LONG(n)) if put is not None else set_(k, np.int64(n))
            last[k] = n
        cl.enqueue_nd_range_kernel(queue, self.kernel, gsize, lsize)

    def replay(self, queue, template, arrays) -> None:
        """A recorded launch (:mod:`recording`): ``template`` is ``(launcher, gsize, lsize, args,
        refs)``, ``refs`` the ``(position, array index, element delta)`` of its buffer arguments,
        each followed by its offset. When this template made the kernel's last launch, only the
        buffers and offsets of ``arrays`` that differ from that launch's are set."""
        _, gsize, lsize, args, refs = template
        if self.owner is not template:  # another launch came between: every argument
            self(queue, gsize, lsize, _template_args(template, arrays))
            self.owner = template
            return
        last, put, set_ = self.last, self.put, self.set
        for i, j, d in refs:
            a = arrays[j]
            b = a.block
            h = b.handle
            if last[i] is not h:
                set_(i, h)
                last[i] = h
            o = (b.offset + a.offset) // a.dtype.itemsize + d
            if last[i + 1] != o:
                put(i + 1, _LONG(o)) if put is not None else set_(i + 1, np.int64(o))
                last[i + 1] = o
        cl.enqueue_nd_range_kernel(queue, self.kernel, gsize, lsize)


def _template_args(template, arrays) -> list:
    """The launch arguments of a recorded launch (:meth:`Launcher.replay`) with ``arrays`` put in."""
    _, _, _, args, refs = template
    args = list(args)
    for i, j, d in refs:
        a = arrays[j]
        b = a.block
        args[i] = b.handle
        args[i + 1] = (b.offset + a.offset) // a.dtype.itemsize + d
    return args


#: ``(thread id, launch list)`` of the claim being recorded (:mod:`recording`), else None
_recording: list = [None]
NATIVE_ENV = "ANYDEVICE_OPENCL_NATIVE"
_native: list = []  # [the configured _launch module or None, its status line], once looked up


def native_launch():
    """The C launch module (``_launch.c``) set up with the OpenCL loader pyopencl uses, or None:
    not built, ``ANYDEVICE_OPENCL_NATIVE=0``, or no loader found among the process's mapped files."""
    if not _native:
        _native[:] = _find_native()
    return _native[0]


def native_status() -> str:
    native_launch()
    return _native[1]


def _find_native() -> tuple:
    if os.environ.get(NATIVE_ENV, "1").strip() == "0":
        return None, f"off ({NATIVE_ENV}=0): launches through pyopencl"
    try:
        from . import _launch
    except ImportError:
        return None, "not built (no C compiler at install): launches through pyopencl"
    path = _loader_path()
    if path is None:
        return None, "pyopencl's OpenCL loader not found among the mapped files: launches through pyopencl"
    try:
        lib = ctypes.CDLL(path)
        _launch.configure(*(ctypes.cast(getattr(lib, f), ctypes.c_void_p).value
                            for f in ("clSetKernelArg", "clEnqueueNDRangeKernel")), _recording)
    except (OSError, AttributeError, ValueError) as e:
        return None, f"the OpenCL loader {os.path.basename(path)} is unusable ({e}): launches through pyopencl"
    return _launch, f"C (_launch.c, through {os.path.basename(path)})"


def _loader_path() -> str | None:
    """The OpenCL loader (``libOpenCL*``) that pyopencl's extension loaded, from /proc/self/maps:
    the one inside pyopencl's folder (its wheel's own) before any other mapped one."""
    found = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split(None, 5)[-1].strip()
                if os.path.basename(path).startswith("libOpenCL") and path not in found and os.path.isfile(path):
                    found.append(path)
    except OSError:
        return None
    home = os.path.dirname(os.path.dirname(cl.__file__))
    found.sort(key=lambda p: not p.startswith(os.path.join(home, "pyopencl")))
    return found[0] if found else None
#: pyopencl's Kernel method that sets an argument from a bytes-like value (absent: ``set_arg``)
_SET_BYTES = "_set_arg_buf"
_LONG = struct.Struct("<q").pack
_BUFFER = cl.Buffer


class ProgramCache:
    """Kernels by spec (see :mod:`codegen`), built once: memory dict → disk
    (``<dir>/<sha256>.bin``) → compile.

    A spec of a shared program (:func:`codegen.program_of`: the generic kernels of all dtypes,
    or one dtype's specialized kernels) comes from that program, built at its first use; any
    other spec gets a program of its own. Generic kernels build with :data:`GENERIC_OPTIONS`
    too. The disk key hashes the source, build options, platform, device and driver versions.
    ``ANYDEVICE_OPENCL_CACHE_DIR`` moves the folder (default ``~/.cache/anydevice/opencl``);
    set it to ``off`` to disable the disk cache.
    """

    def __init__(self):
        self.kernels: dict = {}  # (device index, spec) -> Launcher
        self.programs: dict = {}  # (device index, program key or spec) -> cl.Program
        self.stats = {"memory_hits": 0, "disk_hits": 0, "builds": 0}
        self._lock = threading.Lock()

    @staticmethod
    def folder() -> str | None:
        d = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "anydevice", "opencl")
        return None if d.lower() in ("off", "0", "none") else d

    def kernel(self, rt: OpenClRuntime, index: int, spec: tuple, device=None) -> Launcher:
        """The kernel of ``spec`` on (physical) device ``index``, its program built on first use;
        ``device`` (the user-visible device) names it in a build failure."""
        k = self.kernels.get((index, spec))
        if k is not None:
            self.stats["memory_hits"] += 1
            return k
        with self._lock:
            fp64 = rt.has_fp64(index)
            shared = codegen.program_of(spec, fp64)
            key = shared or spec
            prg = self.programs.get((index, key))
            if prg is None:
                src = codegen.program_source(codegen.program_specs(shared, fp64) if shared else [spec], fp64)
                opts = BUILD_OPTIONS + (GENERIC_OPTIONS if codegen.is_generic(spec) else ())
                prg = self.programs[(index, key)] = self._program(rt, index, src, opts, device)
            k = self.kernels[(index, spec)] = Launcher(cl.Kernel(prg, codegen.name(spec)))
        return k

    @staticmethod
    def keeps_binaries(dev: cl.Device) -> bool:
        """False on PoCL: it caches builds itself (``POCL_CACHE_DIR``), and reading a program's
        binary makes it code-generate every kernel of the program (seconds for a family)."""
        return "portable computing language" not in dev.platform.name.lower()

    def _program(self, rt: OpenClRuntime, index: int, src: str, options: tuple, device=None) -> cl.Program:
        ctx, dev, opts = rt.contexts[index], rt.devices[index], list(options)
        ident = "\n".join([src, " ".join(opts), dev.platform.name, dev.platform.version, dev.name,
                           dev.driver_version, cl.VERSION_TEXT])
        folder = self.folder() if self.keeps_binaries(dev) else None
        path = os.path.join(folder, hashlib.sha256(ident.encode()).hexdigest() + ".bin") if folder else None
        if path and os.path.exists(path):
            try:
                with open(path, "rb") as f:
                    prg = cl.Program(ctx, [dev], [f.read()]).build(options=opts)
                self.stats["disk_hits"] += 1
                return prg
            except (cl.Error, OSError):
                pass  # stale or foreign binary: rebuild from source below
        prg = rt.build(index, src, opts, device)
        self.stats["builds"] += 1
        if path:
            try:
                os.makedirs(folder, exist_ok=True)
                tmp = f"{path}.{os.getpid()}.tmp"
                with open(tmp, "wb") as f:
                    f.write(prg.get_info(cl.program_info.BINARIES)[0])
                os.replace(tmp, path)
            except OSError:
                pass
        return prg


class OpenClRuntime(Runtime):
    """One ``cl.Context`` and one default in-order queue per device; streams are extra queues."""

    alignment = 256

    def __init__(self):
        self.devices = discover()
        self.contexts = [cl.Context([d]) for d in self.devices]
        props = cl.command_queue_properties.PROFILING_ENABLE
        self.queues = [cl.CommandQueue(c, d, properties=props) for c, d in zip(self.contexts, self.devices)]
        self.streams = [{} for _ in self.devices]  # id -> queue created by create_stream
        self.allocated = [0] * len(self.devices)
        self.programs = ProgramCache()
        self.pending = [collections.deque() for _ in self.devices]  # queued small uploads (their events)
        # read once: a device property query and a split of the extension string cost ~5 us per call
        self.fp64 = ["cl_khr_fp64" in d.extensions.split() for d in self.devices]

    # --- devices ---------------------------------------------------------------------------
    def device_count(self) -> int:
        return len(self.devices)

    def describe(self, index: int, device=None) -> str:
        """``opencl:N (device, platform, driver version)``; N is ``device``'s index when given,
        else the physical one."""
        d = self.devices[index]
        return (f"{device or f'opencl:{index}'} ({d.name.strip()} on {d.platform.name.strip()}, "
                f"driver {d.driver_version.strip()})")

    def build(self, index: int, src: str, options=(), device=None) -> cl.Program:
        """Build ``src`` for device ``index``. A failure raises DeviceError with the compiler's
        own error lines and the path of the saved source (never the source itself)."""
        dev = self.devices[index]
        try:
            return cl.Program(self.contexts[index], src).build(options=list(options), devices=[dev], cache_dir=False)
        except cl.Error as e:
            path = diagnose.save_source(src)
            f = diagnose.classify(str(e), dev.platform.version, diagnose.cpu_model(dev.name), source=path)
            raise DeviceError(f"{self.describe(index, device)} failed to build a generated program:\n  "
                              + "\n  ".join(f.lines or [str(e).splitlines()[0]])
                              + f"\nsource saved as {path}\nhint: {f.hint}") from e

    def replayable(self, fn, kwargs: dict):
        """A compiled graph's planned call of ``fn``: recorded, then replayed from its launches
        (:class:`recording.RecordedCall`)."""
        from .recording import RecordedCall

        return RecordedCall(fn, kwargs)

    def probe(self, index: int) -> None:
        """Admission: build and run :data:`PROBE_SOURCE` once; DeviceUnavailableError (reason
        naming the device, hint from :func:`diagnose.classify`) when the driver cannot."""
        dev, n = self.devices[index], 64
        try:
            prg = cl.Program(self.contexts[index], PROBE_SOURCE).build(devices=[dev], cache_dir=False)
            buf = cl.Buffer(self.contexts[index], cl.mem_flags.READ_WRITE, 4 * n)
            prg.anydevice_probe(self.queues[index], (n,), None, buf)
            got = np.empty(n, np.int32)
            cl.enqueue_copy(self.queues[index], got, buf, is_blocking=True)
            buf.release()
        except cl.Error as e:
            f = diagnose.classify(str(e), dev.platform.version, diagnose.cpu_model(dev.name), source="<probe kernel>")
            raise DeviceUnavailableError(f"{self.describe(index)} cannot build and run a test kernel: "
                                         + "; ".join(f.lines or [str(e).splitlines()[0]]), hint=f.hint) from e
        if not np.array_equal(got, 3 * np.arange(n, dtype=np.int32) + 1):
            raise DeviceUnavailableError(f"{self.describe(index)} ran a test kernel and returned wrong values",
                                         hint="update the OpenCL driver, or pick another platform with "
                                              "ANYDEVICE_OPENCL_PLATFORM")

    def queue(self, index: int, stream=None) -> cl.CommandQueue:
        return stream if stream is not None else self.queues[index]

    def properties(self, index: int) -> dict:
        d = self.devices[index]
        return {
            "name": d.name.strip(), "vendor": d.vendor.strip(), "platform": d.platform.name,
            "device_type": cl.device_type.to_string(d.type), "opencl_version": d.version,
            "driver_version": d.driver_version, "compute_units": d.max_compute_units,
            "max_clock_mhz": d.max_clock_frequency, "total_memory": d.global_mem_size,
            "max_allocation": d.max_mem_alloc_size, "local_memory": d.local_mem_size,
            "max_work_group_size": d.max_work_group_size,
            "extensions": sorted(d.extensions.split()),
        }

    def memory_info(self, index: int):
        """OpenCL cannot query free memory: free = total − what this process allocated, and no
        more than the host can back for a CPU device (whose memory is host memory)."""
        total = self.devices[index].global_mem_size
        free = max(total - self.allocated[index], 0)
        host = host_memory_available() if self.devices[index].type & cl.device_type.CPU else None
        return (free if host is None else max(min(free, host), 0), total)

    def dtypes(self, index: int):
        """bool, integers, float16, bfloat16, float32 and complex64 everywhere; float64 and
        complex128 with cl_khr_fp64."""
        fp64 = self.has_fp64(index)
        return [d for d in _dt.ALL_DTYPES if d.name in codegen.CTYPES and (fp64 or d.name not in codegen.FP64_DTYPES)]

    def has_fp64(self, index: int) -> bool:
        return self.fp64[index]

    # --- memory ----------------------------------------------------------------------------
    def malloc(self, index: int, nbytes: int):
        """A ``cl.Buffer``; MemoryError for what the device (or, for a CPU device, the host) cannot
        hold, checked here because PoCL allocates lazily and aborts the process when it fails."""
        d = self.devices[index]
        if nbytes > d.max_mem_alloc_size:
            raise MemoryError(f"{nbytes} bytes exceed the device's largest allocation ({d.max_mem_alloc_size} bytes)")
        if self.allocated[index] + nbytes > d.global_mem_size:
            raise MemoryError(f"{nbytes} bytes exceed the device's memory ({d.global_mem_size} bytes, "
                              f"{self.allocated[index]} allocated)")
        if nbytes >= HOST_CHECK_BYTES and d.type & cl.device_type.CPU:
            host = host_memory_available()
            if host is not None and nbytes + HOST_RESERVE > host:
                raise MemoryError(f"{nbytes} bytes exceed the host memory that can back this CPU device ({host} bytes: "
                                  "the smaller of MemAvailable and the address-space limit less this process's size)")
        try:
            buf = cl.Buffer(self.contexts[index], cl.mem_flags.READ_WRITE, nbytes)
        except cl.Error as e:
            raise MemoryError(str(e)) from e
        self.allocated[index] += nbytes
        return buf

    def free(self, index: int, handle) -> None:
        self.allocated[index] -= handle.size
        handle.release()

    def _after_streams(self, index: int) -> None:
        """Order a default-queue transfer after work on the other queues (nothing to do without streams)."""
        for q in list(self.streams[index].values()):
            q.finish()

    def copy_h2d(self, index, dst, offset, src) -> None:
        """Up to :data:`QUEUED_H2D_BYTES`: from a private copy of ``src``, queued without waiting
        (a blocking write on an in-order queue waits for all queued work: a Python scalar turned
        into a tensor would stall the host once per op); larger copies block."""
        self._after_streams(index)
        if src.nbytes > QUEUED_H2D_BYTES:
            cl.enqueue_copy(self.queues[index], dst, src, dst_offset=offset, is_blocking=True)
            return
        pending = self.pending[index]
        pending.append(cl.enqueue_copy(self.queues[index], dst, src.copy(), dst_offset=offset, is_blocking=False))
        while pending and (len(pending) > MAX_QUEUED_H2D
                           or pending[0].command_execution_status == cl.command_execution_status.COMPLETE):
            pending.popleft().wait()  # the event holds the host copy until the device has read it

    def copy_d2h(self, index, dst, src, offset) -> None:
        self._after_streams(index)
        cl.enqueue_copy(self.queues[index], dst, src, src_offset=offset, is_blocking=True)

    def copy_h2d_async(self, index, dst, offset, src, stream) -> None:
        cl.enqueue_copy(self.queue(index, stream), dst, src, dst_offset=offset, is_blocking=False)

    def copy_d2h_async(self, index, dst, src, offset, stream) -> None:
        cl.enqueue_copy(self.queue(index, stream), dst, src, src_offset=offset, is_blocking=False)

    def copy_d2d(self, index, dst, dst_off, src, src_off, n, stream=None) -> None:
        cl.enqueue_copy(self.queue(index, stream), dst, src, dst_offset=dst_off, src_offset=src_off, byte_count=n)

    def memset(self, index, handle, offset, byte, nbytes, stream=None) -> None:
        cl.enqueue_fill_buffer(self.queue(index, stream), handle, np.uint8(byte), offset, nbytes)

    def fill(self, index, handle, offset, pattern: np.ndarray, nbytes, stream=None) -> None:
        cl.enqueue_fill_buffer(self.queue(index, stream), handle, pattern, offset, nbytes)

    def synchronize(self, index: int) -> None:
        self.queues[index].finish()
        self._after_streams(index)
        self.pending[index].clear()

    # --- streams and events ----------------------------------------------------------------
    def create_stream(self, index: int):
        q = cl.CommandQueue(self.contexts[index], self.devices[index],
                            properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.streams[index][id(q)] = q
        return q

    def destroy_stream(self, index: int, stream) -> None:
        stream.finish()
        self.streams[index].pop(id(stream), None)

    def synchronize_stream(self, index: int, stream) -> None:
        self.queue(index, stream).finish()

    def query_stream(self, index: int, stream) -> bool:
        """True when all work queued so far is done. A fresh marker is processed by the driver
        asynchronously even on an idle queue, so give it up to 2 ms to report before answering."""
        q = self.queue(index, stream)
        ev = cl.enqueue_marker(q)
        q.flush()
        deadline = time.perf_counter() + 2e-3
        while ev.command_execution_status != cl.command_execution_status.COMPLETE:
            if time.perf_counter() > deadline:
                return False
            time.sleep(0)
        return True

    def create_event(self, index: int):
        return _Event()

    def record_event(self, index: int, event: _Event, stream) -> None:
        event.cl = cl.enqueue_marker(self.queue(index, stream))
        self.queue(index, stream).flush()

    def synchronize_event(self, index: int, event: _Event) -> None:
        if event.cl is not None:
            event.cl.wait()

    def query_event(self, index: int, event: _Event) -> bool:
        return event.cl is None or event.cl.command_execution_status == cl.command_execution_status.COMPLETE

    def stream_wait_event(self, index: int, stream, event: _Event) -> None:
        if event.cl is not None:
            cl.enqueue_barrier(self.queue(index, stream), wait_for=[event.cl])

    def elapsed_time(self, index: int, start: _Event, end: _Event) -> float:
        """Milliseconds between two recorded markers (device profiling clock)."""
        end.cl.wait()
        return (end.cl.profile.end - start.cl.profile.end) * 1e-6
