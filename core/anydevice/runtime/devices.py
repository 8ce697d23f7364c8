"""The core's side of devices: one :class:`Backend` per device type wraps a plugin's runtime,
:class:`Device` values name one device, and the current device.

A Backend fills the runtime's optional gaps with fallbacks, owns the caching allocators, the
kernel table, the admitted (probed) devices and the interned :class:`Device` objects.
``get_backend(type)`` creates it on first use. The vendor's side is
:mod:`anydevice.runtime.contract`.

Accepted device strings: ``"cpu"``, ``"<type>"`` (index 0) and ``"<type>:<index>"``; aliases
declared by plugins (``"gpu"`` for cuda) resolve to their type. The current device
starts as ``$ANYDEVICE_DEVICE`` if set, else ``cpu``; ``device_guard`` overrides it for the
calling thread only. The per-thread current streams (:mod:`anydevice.runtime.streams`) are kept
here too, because each device's :class:`KernelContext` reads them.
"""
from __future__ import annotations

import contextlib
import difflib
import numbers
import os
import re
import threading
from typing import NamedTuple

import numpy as np

from anydevice.base import dtypes as _dt
from anydevice.base.errors import DeviceUnavailableError, UnsupportedError
from anydevice.ops import registry as _registry
from anydevice.runtime import allocator as _allocator
from anydevice.runtime.allocator import CachingAllocator
from anydevice.runtime.contract import DeviceArray, KernelContext, KernelTable
from anydevice.runtime.plugins import CONFLICT, DISABLED, FAILED, READY, REFUSED, SKIPPED, UNAVAILABLE, manager

_new_array = object.__new__
_backends: dict[str, Backend] = {}
_unavailable: dict[str, DeviceUnavailableError] = {}
_lock = threading.RLock()


#: Set to 1 to keep devices whose probe failed visible (driver debugging).
KEEP_UNUSABLE_ENV = "ANYDEVICE_KEEP_UNUSABLE"


class UnusableDevice(NamedTuple):
    """A physical device that ``Runtime.probe`` rejected: left out of the visible set."""

    physical: int
    reason: str
    hint: str
    kept: bool = False      # still visible because ANYDEVICE_KEEP_UNUSABLE=1

    def as_dict(self) -> dict:
        return {"physical_index": self.physical, "reason": self.reason, "hint": self.hint, "kept_visible": self.kept}


def visible_env_var(device_type: str) -> str:
    """The variable that restricts visible devices of a type, e.g. ``ANYDEVICE_NPU_VISIBLE_DEVICES``."""
    return f"ANYDEVICE_{device_type.upper()}_VISIBLE_DEVICES"


_core_caches: list = []


def register_cache(drop) -> None:
    """Have ``empty_cache()`` call ``drop(device)`` first: for a higher layer that caches device
    buffers (the engine's scalar operands), so that ``empty_cache()`` returns every byte the core holds."""
    _core_caches.append(drop)


class Backend:
    """Core-side state of one device type."""

    def __init__(self, device_type: str, record, spec, runtime, kernels: KernelTable):
        self.type, self.record, self.spec, self.runtime, self.kernels = device_type, record, spec, runtime, kernels
        self._has = {n for n in dir(runtime) if not n.startswith("_") and callable(getattr(runtime, n, None))}
        self.own_storage = {"empty", "from_host", "to_host"} <= self._has
        total = int(runtime.device_count())
        self.unusable: list[UnusableDevice] = []
        self.physical = self._admit(self._visible(total))
        self.count = len(self.physical)
        self.devices = [Device(device_type, i, self) for i in range(self.count)]
        self.allocators = [CachingAllocator(runtime, p, f"{device_type}:{i}") for i, p in enumerate(self.physical)]
        self._default: list = [None] * self.count     # default Stream per device, made on first use
        self._dtypes = [None] * self.count
        self.contexts = [KernelContext(runtime, p, self.devices[i], self) for i, p in enumerate(self.physical)]
        for d, c in zip(self.devices, self.contexts):
            d._ctx = c
        #: per device, its allocator's ``empty(shape, dtype)``, also its context's ``empty``
        self._empties = [] if self.own_storage else [self._allocating(i, c) for i, c in enumerate(self.contexts)]
        for c, e in zip(self.contexts, self._empties):
            c.empty = e
        self.plans: dict = {}

    def _visible(self, total: int) -> list[int]:
        env = os.environ.get(visible_env_var(self.type))
        if env is None or env.strip() == "":
            return list(range(total))
        out = []
        for part in env.split(","):
            part = part.strip()
            if not part.isdigit() or int(part) >= total:
                raise DeviceUnavailableError(
                    f"{visible_env_var(self.type)}={env!r} names device {part!r}, but {self.type} has "
                    f"{total} device(s) (indices 0..{total - 1})"
                )
            out.append(int(part))
        return out

    def _admit(self, physical: list[int]) -> list[int]:
        """Ask the runtime's optional ``probe`` about each device; leave out the unusable ones."""
        if "probe" not in self._has:
            return physical
        keep = os.environ.get(KEEP_UNUSABLE_ENV, "").strip() not in ("", "0")
        admitted = []
        for p in physical:
            try:
                self.runtime.probe(p)
            except DeviceUnavailableError as e:
                self.unusable.append(UnusableDevice(p, str(e), getattr(e, "hint", "") or "", keep))
                if not keep:
                    continue
            except Exception as e:  # noqa: BLE001 - a probe that crashes rejects its device, with the cause
                reason = f"probe({p}) of plugin {self.record.name} raised {type(e).__name__}: {e}"
                self.unusable.append(UnusableDevice(p, reason, "report this to the plugin's vendor", keep))
                if not keep:
                    continue
            admitted.append(p)
        return admitted

    def unusable_summary(self) -> str:
        """One line per unusable device, for error messages."""
        return "; ".join(f"physical device {u.physical}: {u.reason}" + (f" ({u.hint})" if u.hint else "")
                         for u in self.unusable)

    def has(self, method: str) -> bool:
        return method in self._has

    def phys(self, index: int) -> int:
        return self.physical[index]

    # --- dtypes -----------------------------------------------------------------------
    def dtypes(self, index: int = 0) -> frozenset:
        d = self._dtypes[index]
        if d is None:
            d = frozenset(self.runtime.dtypes(self.phys(index))) if self.has("dtypes") else frozenset(_dt.ALL_DTYPES)
            self._dtypes[index] = d
        return d

    def check_dtype(self, index: int, dtype) -> None:
        if dtype not in self.dtypes(index):
            names = ", ".join(d.name for d in _dt.ALL_DTYPES if d in self.dtypes(index))
            raise TypeError(f"{self.type}:{index} does not support dtype {dtype.name}; it supports: {names}")

    # --- memory -----------------------------------------------------------------------
    def empty(self, index: int, shape: tuple, dtype):
        if self.own_storage:
            return self.runtime.empty(self.phys(index), shape, dtype)
        return self._empties[index](shape, dtype)

    def _allocating(self, index: int, ctx):
        """Device ``index``'s ``ctx.empty``: its allocator's block as a DeviceArray, in one call
        (the hot path of every device op)."""
        allocate = self.allocators[index].allocate

        def empty(shape, dtype):
            if type(shape) is not tuple:
                shape = tuple(shape)
            n = dtype.itemsize
            for s in shape:
                n *= s
            a = _new_array(DeviceArray)  # skip __init__
            a.block, a.shape, a.dtype, a.offset = allocate(n or 1, ctx.stream), shape, dtype, 0
            return a

        c = _allocator._native  # the same in C (runtime/_alloc.c), with this for shapes that are not tuples
        return empty if c is None else c.Empty(allocate, ctx, DeviceArray, empty)

    def empty_many(self, index: int, specs) -> list:
        """Arrays of ``specs`` (``(shape, dtype)`` pairs) carved from ONE allocation, each at an
        aligned offset: one allocator call for a kernel's many results. The memory is released
        when the last of them is collected (keep it for results that die together)."""
        if self.own_storage:
            return [self.runtime.empty(self.phys(index), s, d) for s, d in specs]
        alloc = self.allocators[index]
        align, offs, n = alloc.align, [], 0
        for shape, dtype in specs:
            offs.append(n)
            m = dtype.itemsize
            for s in shape:
                m *= s
            n += -(-max(m, 1) // align) * align
        block = alloc.allocate(n or 1, self.contexts[index].stream)
        out = []
        for (shape, dtype), off in zip(specs, offs):
            a = _new_array(DeviceArray)
            a.block, a.shape, a.dtype, a.offset = block, shape, dtype, off
            out.append(a)
        return out

    def from_host(self, index: int, arr: np.ndarray, dtype, non_blocking: bool = False):
        """Upload a host array. ``non_blocking`` queues the copy on the current stream and returns
        at once when the runtime has ``copy_h2d_async`` (the array must not change afterwards:
        anydevice's own host buffers never do); otherwise the copy is synchronous."""
        self.check_dtype(index, dtype)
        arr = np.asarray(arr, dtype=dtype.numpy, order="C")
        if self.own_storage:
            return self.runtime.from_host(self.phys(index), arr)
        buf = self.empty(index, arr.shape, dtype)
        if arr.nbytes:
            if non_blocking and self.has("copy_h2d_async"):
                self.runtime.copy_h2d_async(self.phys(index), buf.handle, buf.byte_offset, arr,
                                            self.contexts[index].stream)
            else:
                self.runtime.copy_h2d(self.phys(index), buf.handle, buf.byte_offset, arr)
        return buf

    def to_host(self, buf, index: int, shape: tuple, dtype) -> np.ndarray:
        if self.own_storage:
            return self.runtime.to_host(buf)
        out = np.empty(shape, dtype=dtype.numpy)
        if out.nbytes:
            self.runtime.copy_d2h(self.phys(index), out, buf.handle, buf.byte_offset)
        return out

    def fill(self, index: int, shape: tuple, dtype, value):
        """A new buffer filled with ``value`` (memset for zero bytes, else host fill + copy)."""
        if not self.own_storage and self.has("memset") and value == 0:
            buf = self.empty(index, shape, dtype)
            if buf.nbytes:
                self.runtime.memset(self.phys(index), buf.handle, buf.byte_offset, 0, buf.nbytes)
            return buf
        return self.from_host(index, np.full(shape, value, dtype=dtype.numpy), dtype)

    def copy_to(self, buf, src_index: int, dst_backend: Backend, dst_index: int, shape, dtype,
                non_blocking: bool = False):
        """Copy a buffer to another device (same type: d2d/p2p; else through host). ``non_blocking``
        applies to the host-to-device leg; reading a device into host memory always completes first."""
        if dst_backend is self and not self.own_storage:
            out = self.empty(dst_index, shape, dtype)
            n = out.nbytes
            if n == 0:
                return out
            rt, ps, pd = self.runtime, self.phys(src_index), self.phys(dst_index)
            if ps == pd and self.has("copy_d2d"):
                rt.copy_d2d(ps, out.handle, out.byte_offset, buf.handle, buf.byte_offset, n)
                return out
            if ps != pd and self.has("copy_p2p"):
                rt.copy_p2p(pd, out.handle, out.byte_offset, ps, buf.handle, buf.byte_offset, n)
                return out
            host = self.to_host(buf, src_index, shape, dtype)
            rt.copy_h2d(pd, out.handle, out.byte_offset, host)
            return out
        if dst_backend is self and self.own_storage and src_index == dst_index:
            return buf
        if dst_backend is self and self.own_storage and self.has("copy_peer"):
            return self.runtime.copy_peer(buf, self.phys(src_index), self.phys(dst_index))
        host = self.to_host(buf, src_index, shape, dtype)
        return dst_backend.from_host(dst_index, host, dtype, non_blocking=non_blocking)

    def memory_stats(self, index: int) -> dict:
        if self.own_storage:
            if self.has("memory_stats"):
                return dict(self.runtime.memory_stats(self.phys(index)))
            raise UnsupportedError(
                f"{self.type} keeps its own memory and does not report allocator statistics "
                f"(its runtime has no memory_stats())"
            )
        return self.allocators[index].stats()

    def empty_cache(self, index: int) -> int:
        for drop in _core_caches:  # device memory the core itself keeps (e.g. scalar operands) goes first
            drop(self.devices[index])
        if self.own_storage:
            return int(self.runtime.empty_cache(self.phys(index))) if self.has("empty_cache") else 0
        self.synchronize(index)
        return self.allocators[index].empty_cache()

    def memory_info(self, index: int):
        if self.has("memory_info"):
            return tuple(self.runtime.memory_info(self.phys(index)))
        return (None, None)

    def synchronize_stream(self, index: int, handle) -> None:
        if handle is not None and self.has("synchronize_stream"):
            self.runtime.synchronize_stream(self.phys(index), handle)
        else:
            self.runtime.synchronize(self.phys(index))

    def synchronize(self, index: int) -> None:
        self.runtime.synchronize(self.phys(index))

    def properties(self, index: int) -> dict:
        props = {"name": f"{self.type}:{index}"}
        if self.has("properties"):
            props.update(self.runtime.properties(self.phys(index)))
        free, total = self.memory_info(index)
        props.setdefault("total_memory", total)
        props["dtypes"] = [d.name for d in _dt.ALL_DTYPES if d in self.dtypes(index)]
        props["native_ops"] = len(self.kernels.ops())
        return props


# --- lookup --------------------------------------------------------------------------
def canonical_type(name: str) -> str | None:
    """The device type ``name`` denotes (aliases resolved), or None if unknown. Reads package
    metadata only: no plugin is imported to look a name up. A contested name is returned as it
    is; using it raises the conflict."""
    manager.discover()
    if name in manager.by_type or name in manager.contested:
        return name
    return manager.aliases.get(name)


def get_backend(device_type: str) -> Backend:
    """The backend of a canonical device type; raises DeviceUnavailableError with the reason."""
    be = _backends.get(device_type)
    if be is not None:
        return be
    with _lock:
        be = _backends.get(device_type)
        if be is not None:
            return be
        if device_type in _unavailable:
            e = _unavailable[device_type]
            raise DeviceUnavailableError(str(e), hint=getattr(e, "hint", ""))
        try:
            be = _create(device_type)
        except DeviceUnavailableError as e:
            _unavailable[device_type] = e
            raise
        _backends[device_type] = be
        return be


#: More devices than this from ``Runtime.device_count()`` is taken for garbage.
MAX_DEVICES = 4096


class _PluginFault(DeviceUnavailableError):
    """The plugin broke its contract (raised in a hook, returned garbage): its type is marked failed."""


def _create(device_type: str) -> Backend:
    rec = manager.load_type(device_type)
    if rec is None:
        raise DeviceUnavailableError(f"no plugin provides device type {device_type!r}")
    status, reason = rec.type_status.get(device_type, (rec.status, rec.reason))
    if status in (CONFLICT, REFUSED):
        raise DeviceUnavailableError(f"{device_type}: {reason}", hint=rec.hints.get(device_type, ""))
    if not rec.can_set_up(device_type):
        raise DeviceUnavailableError(f"{device_type}: plugin {rec.label} {status}: {reason}",
                                     hint=rec.hints.get(device_type, ""))
    try:
        with manager.capture(rec):
            be = _set_up(rec, device_type)
    except DeviceUnavailableError as e:
        hint = e.hint or (f"report this to the vendor of {rec.label}, or upgrade it" if isinstance(e, _PluginFault)
                          else "")
        manager.mark(rec, device_type, FAILED if isinstance(e, _PluginFault) else UNAVAILABLE, str(e), hint)
        raise DeviceUnavailableError(str(e), hint=hint) from e.__cause__
    manager.mark(rec, device_type, READY)
    return be


def _set_up(rec, device_type: str) -> Backend:
    """Create the runtime and kernel table of ``device_type``, checking what the plugin returns."""
    who = f"plugin {rec.label}"
    try:
        runtime = manager.call(rec, "anydevice_create_runtime", device_type=device_type)
    except DeviceUnavailableError as e:
        raise DeviceUnavailableError(f"{device_type}: {e}", hint=getattr(e, "hint", "")) from e
    except Exception as e:  # noqa: BLE001 - a broken plugin must not break the core
        raise _PluginFault(f"{device_type}: {who} raised in anydevice_create_runtime(): {type(e).__name__}: {e}") from e
    if runtime is None:
        raise _PluginFault(f"{device_type}: {who} returned no runtime from anydevice_create_runtime()")
    for req in ("device_count", "synchronize"):
        if not callable(getattr(runtime, req, None)):
            raise _PluginFault(f"{device_type}: runtime of {who} lacks required method {req}()")
    _check_count(device_type, who, runtime)
    kernels = KernelTable(device_type, plugin=rec.label)
    try:
        manager.call(rec, "anydevice_register_kernels", device_type=device_type, runtime=runtime, kernels=kernels)
    except DeviceUnavailableError as e:
        raise DeviceUnavailableError(f"{device_type}: {e}", hint=getattr(e, "hint", "")) from e
    except Exception as e:  # noqa: BLE001
        raise _PluginFault(f"{device_type}: {who} raised in anydevice_register_kernels(): {type(e).__name__}: {e}") from e
    try:
        be = Backend(device_type, rec, rec.specs[device_type], runtime, kernels)
    except DeviceUnavailableError:
        raise
    except Exception as e:  # noqa: BLE001
        raise _PluginFault(f"{device_type}: {who} failed during setup: {type(e).__name__}: {e}") from e
    if be.count == 0 and be.unusable:
        hint = next((u.hint for u in be.unusable if u.hint), "")
        raise DeviceUnavailableError(
            f"{device_type}: no usable device ({len(be.unusable)} found, all rejected): {be.unusable_summary()}",
            hint=hint)
    if be.count == 0:
        raise DeviceUnavailableError(f"{device_type}: the runtime reports no devices")
    return be


def _check_count(device_type: str, who: str, runtime) -> None:
    try:
        n = runtime.device_count()
    except DeviceUnavailableError as e:
        raise DeviceUnavailableError(f"{device_type}: {e}", hint=getattr(e, "hint", "")) from e
    except Exception as e:  # noqa: BLE001
        raise _PluginFault(f"{device_type}: device_count() of {who} raised {type(e).__name__}: {e}") from e
    if not isinstance(n, numbers.Integral) or isinstance(n, bool) or not 0 <= n <= MAX_DEVICES:
        raise _PluginFault(f"{device_type}: device_count() of {who} returned {n!r} ({type(n).__name__}); "
                           f"expected an int from 0 to {MAX_DEVICES}")


def known_state(device_type: str) -> tuple[str, str]:
    """``("available" | "unavailable" | "not loaded", reason)`` for a type, importing no plugin module
    but the core's own (whose import cannot hang)."""
    if device_type in _backends:
        return "available", ""
    if device_type in _unavailable:
        return "unavailable", str(_unavailable[device_type])
    rec = manager.by_type.get(device_type)
    status, reason = rec.type_status.get(device_type, (rec.status, rec.reason)) if rec is not None else ("", "")
    if status in (FAILED, SKIPPED, DISABLED, CONFLICT, REFUSED):
        return "unavailable", f"{device_type}: {reason}"
    if rec is not None and rec.distribution == "anydevice":
        why = unavailable_reason(device_type)
        return ("unavailable", why) if why else ("available", "")
    return "not loaded", ""


def forget(device_type: str | None = None) -> None:
    """Drop created backends (tests, and ``reset`` after a lost device)."""
    with _lock:
        for t in [device_type] if device_type else list(_backends) + list(_unavailable):
            _backends.pop(t, None)
            _unavailable.pop(t, None)
    _registry.forget_devices()


def unavailable_hint(device_type: str) -> str:
    """What to do about an unavailable type ('' when available or no hint was given)."""
    try:
        get_backend(device_type)
    except DeviceUnavailableError as e:
        return getattr(e, "hint", "") or ""
    return ""


def unusable_devices(device_type: str) -> list[UnusableDevice]:
    """Devices of an available type that its probe rejected ([] when the type is unavailable)."""
    try:
        return list(get_backend(device_type).unusable)
    except DeviceUnavailableError:
        return []


def unavailable_reason(device_type: str) -> str | None:
    try:
        get_backend(device_type)
    except DeviceUnavailableError as e:
        return str(e)
    return None


# --- Device values and the current device ----------------------------------------------------
_SPEC = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?::\s*(\d+)\s*)?$")


class Device:
    """One device: a type (``"npu"``) and an index. Instances are interned; compare with ``==``."""

    __slots__ = ("type", "index", "_backend", "_ctx", "_str")

    def __init__(self, type: str, index: int, backend):
        self.type, self.index, self._backend, self._ctx = type, index, backend, None
        self._str = f"{type}:{index}"

    def __str__(self) -> str:
        return self._str

    def __repr__(self) -> str:
        return f"device('{self._str}')"

    def __eq__(self, other) -> bool:
        if isinstance(other, Device):
            return self._str == other._str
        if isinstance(other, str):
            try:
                return as_device(other)._str == self._str
            except (ValueError, DeviceUnavailableError):
                return False
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._str)

    def __reduce__(self):
        return (as_device, (self._str,))

    @property
    def dtypes(self):
        """The dtypes this device supports."""
        s = self._backend.dtypes(self.index)
        return tuple(d for d in _dt.ALL_DTYPES if d in s)


def _unknown_type_error(name: str) -> ValueError:
    """Lists what is installed from entry-point names and what is already known; imports no plugin."""
    manager.discover()
    states: dict[str, list] = {"available": [], "unavailable": [], "not loaded": []}
    for t in sorted(manager.by_type):
        state, reason = known_state(t)
        states[state].append((t, reason))
    msg = f"unknown device type {name!r}. Available: {', '.join(t for t, _ in states['available']) or 'none'}"
    if manager.aliases:
        msg += " (aliases: " + ", ".join(f"{a} -> {t}" for a, t in sorted(manager.aliases.items())) + ")"
    if states["unavailable"]:
        msg += ". Installed but unavailable: " + "; ".join(r for _, r in states["unavailable"])
    if states["not loaded"]:
        msg += ". Installed, not loaded yet: " + ", ".join(t for t, _ in states["not loaded"])
    close = difflib.get_close_matches(name, list(manager.by_type) + list(manager.aliases), n=1)
    if close:
        msg += f". Did you mean {close[0]!r}?"
    return ValueError(msg)


_cache: dict[str, Device] = {}


def as_device(spec=None) -> Device:
    """Resolve a device spec (Device, string, or None for the current device) to a Device."""
    if spec is None:
        return current_device()
    if isinstance(spec, Device):
        return spec
    d = _cache.get(spec) if isinstance(spec, str) else None
    if d is not None:
        return d
    if not isinstance(spec, str):
        raise TypeError(f"device must be a string like 'cpu' or 'npu:0' or a Device, not {type(spec).__name__}")
    m = _SPEC.match(spec)
    if m is None:
        raise ValueError(
            f"invalid device string {spec!r}: expected 'type' or 'type:index' with a non-negative "
            f"integer index, e.g. 'cpu', 'npu', 'npu:1'"
        )

    name, idx = m.group(1).lower(), int(m.group(2) or 0)
    canon = canonical_type(name)
    if canon is None:
        raise _unknown_type_error(name)
    be = get_backend(canon)
    if idx >= be.count:
        msg = (f"device {canon}:{idx} does not exist: {canon} has {be.count} device(s) here "
               f"(indices 0..{be.count - 1})")
        left_out = [u for u in be.unusable if not u.kept]
        if left_out:
            msg += (f"; {len(left_out)} more {'was' if len(left_out) == 1 else 'were'} left out as unusable: "
                    f"{be.unusable_summary()}. Set ANYDEVICE_KEEP_UNUSABLE=1 to keep them visible")
        raise ValueError(msg)
    d = be.devices[idx]
    _cache[spec] = d
    return d


# --- per-thread state: the current device and the current streams -------------------------
class _Overrides(dict):
    """One thread's current streams, ``KernelContext -> Stream``; when the thread ends (its
    thread-local state is dropped) its contexts no longer wait for it."""

    def __del__(self):
        try:
            for ctx in list(self):
                _count_override(ctx, -1)
        except Exception:  # interpreter shutdown
            pass


class _ThreadState(threading.local):
    devices: list | None = None      # this thread's device_guard stack, innermost last
    streams: _Overrides | None = None


_local = _ThreadState()
_default_device: list[Device] = []   # the process-wide current device (set_device outside any guard)
_overrides: dict = {}                # KernelContext -> number of threads with a current stream of their own
_overrides_lock = threading.RLock()  # not _lock: a stream guard never waits for another type's plugin set-up


class _ThreadStreamContext(KernelContext):
    """A KernelContext whose ``stream`` is the calling thread's current stream on its device.

    A device's context takes this class only while some thread has a current stream other than
    the default one there: reading a plain slot costs a tenth of this property, and kernels read
    ``ctx.stream`` on every launch. The slot itself always holds the default stream (None).
    """

    __slots__ = ()

    @property
    def stream(self):
        mine = _local.streams
        if mine:
            s = mine.get(self)
            if s is not None:
                return s.handle
        return None

    @stream.setter
    def stream(self, value):
        if value is not None:
            raise AttributeError("KernelContext.stream is the caller's current stream; change it with "
                                 "anydevice.device.set_stream() or stream_guard()")
        _slot_stream.__set__(self, None)


_slot_stream = KernelContext.__dict__["stream"]


def _count_override(ctx, delta: int) -> None:
    with _overrides_lock:
        n = _overrides.get(ctx, 0) + delta
        if n > 0:
            _overrides[ctx] = n
        else:
            _overrides.pop(ctx, None)
        ctx.__class__ = _ThreadStreamContext if n > 0 else KernelContext


def thread_stream(ctx):
    """The Stream the calling thread made current on ``ctx``'s device (None: the default stream)."""
    mine = _local.streams
    return mine.get(ctx) if mine else None


def set_thread_stream(ctx, stream) -> None:
    """Make ``stream`` the calling thread's current stream on ``ctx``'s device (None: the default)."""
    mine = _local.streams
    if mine is None:
        mine = _local.streams = _Overrides()
    had = ctx in mine
    if stream is None:
        if had:
            del mine[ctx]
            _count_override(ctx, -1)
        return
    mine[ctx] = stream
    if not had:
        _count_override(ctx, +1)


def current_device() -> Device:
    """The calling thread's current device: its innermost ``device_guard``, else the process default."""
    stack = _local.devices
    if stack:
        return stack[-1]
    if not _default_device:
        d = as_device(os.environ.get("ANYDEVICE_DEVICE") or "cpu")
        with _lock:
            if not _default_device:
                _default_device.append(d)
    return _default_device[0]


def set_device(device) -> Device:
    """Make ``device`` the default for new tensors; returns the Device.

    Outside any ``device_guard`` this sets the process-wide default, which every thread without a
    guard of its own sees (threads started later too). Inside a ``device_guard`` it changes the
    calling thread's device until that guard exits, as in PyTorch."""
    d = as_device(device)
    stack = _local.devices
    if stack:
        stack[-1] = d
    else:
        _default_device[:] = [d]
    return d


def get_device() -> str:
    """The current device as a string, e.g. ``"npu:0"``."""
    return str(current_device())


@contextlib.contextmanager
def device_guard(device):
    """Make ``device`` the current device of the calling thread until the block exits; other
    threads keep theirs."""
    d = as_device(device)
    stack = _local.devices
    if stack is None:
        stack = _local.devices = []
    stack.append(d)
    try:
        yield d
    finally:
        stack.pop()


def _reset_cache() -> None:
    _cache.clear()
    _default_device.clear()
    _local.devices = None
    _registry.forget_devices()
