"""In-process fake backends for tests: a runtime over host memory, registered without packaging."""
from __future__ import annotations

import contextlib

import numpy as np

from anydevice.backend import API_VERSION, DeviceTypeSpec, Runtime
from anydevice.plugins import hookimpl
from anydevice.plugins.manager import manager
from anydevice.runtime import devices as _backend


class HostRuntime(Runtime):
    """Device memory simulated by numpy byte arrays; optional capacity per device."""

    def __init__(self, count=2, capacity=None, dtypes=None):
        self.count, self.capacity, self._dtypes = count, capacity, dtypes
        self.mem, self.used, self._next = {}, [0] * count, 1
        self.mallocs = self.frees = 0

    def device_count(self):
        return self.count

    def malloc(self, index, nbytes):
        if self.capacity is not None and self.used[index] + nbytes > self.capacity:
            raise MemoryError(f"fake device {index} is full")
        h = self._next
        self._next += 1
        self.mem[h] = np.zeros(nbytes, np.uint8)
        self.used[index] += nbytes
        self.mallocs += 1
        return h

    def free(self, index, handle):
        self.used[index] -= self.mem.pop(handle).nbytes
        self.frees += 1

    def copy_h2d(self, index, dst, offset, src):
        b = np.ascontiguousarray(src).reshape(-1).view(np.uint8)
        self.mem[dst][offset:offset + b.nbytes] = b

    def copy_d2h(self, index, dst, src, offset):
        b = dst.reshape(-1).view(np.uint8)
        b[:] = self.mem[src][offset:offset + b.nbytes]

    def synchronize(self, index):
        pass

    def memory_info(self, index):
        cap = self.capacity
        return (None if cap is None else cap - self.used[index], cap)

    if True:  # dtypes() only when restricted, to exercise the "all dtypes" default otherwise
        def dtypes(self, index):
            from anydevice import dtypes as d

            return self._dtypes if self._dtypes is not None else d.ALL_DTYPES


class FakePlugin:
    """A plugin object with the required hooks; ``kernels`` maps op name -> (fn, out)."""

    def __init__(self, types=("fake",), runtime=None, kernels=None, api_version=API_VERSION, aliases=()):
        self.types, self.runtime, self.kernels = types, runtime, kernels or {}
        self.api_version, self.aliases = api_version, aliases

    @hookimpl
    def anydevice_api_version(self):
        return self.api_version

    @hookimpl
    def anydevice_device_types(self):
        return [DeviceTypeSpec(t, aliases=self.aliases) for t in self.types]

    @hookimpl
    def anydevice_create_runtime(self, device_type):
        return self.runtime if self.runtime is not None else HostRuntime()

    @hookimpl
    def anydevice_register_kernels(self, device_type, runtime, kernels):
        for name, (fn, out) in self.kernels.items():
            kernels.register(name, fn, out=out)


@contextlib.contextmanager
def installed(plugin, name="fake-plugin", types=None):
    """Register ``plugin`` in-process for the duration of the block."""
    from anydevice import devices

    rec = manager.register(plugin, name=name, types=list(types) if types is not None else None)
    try:
        yield rec
    finally:
        manager.unregister(rec)
        for t in rec.types:
            _backend.forget(t)
        devices._reset_cache()


class RaisingPlugin(FakePlugin):
    """A plugin whose ``anydevice_create_runtime`` raises ``exc``."""

    def __init__(self, exc, **kw):
        super().__init__(**kw)
        self.exc = exc

    @hookimpl
    def anydevice_create_runtime(self, device_type):
        raise self.exc


def host_kernel(fn):
    """An ``out=True`` kernel of a fake device that computes with a cpu kernel on host copies of its
    inputs (one output buffer, or a tuple of them for a multi-output op)."""
    def k(ctx, out, *bufs, **attrs):
        rt = ctx.runtime

        def host(b):
            if isinstance(b, list):
                return [host(e) for e in b]
            a = np.empty(b.shape, b.dtype.numpy)
            rt.copy_d2h(ctx.index, a, b.handle, b.byte_offset)
            return a

        r = fn(None, *[host(b) for b in bufs], **attrs)
        for o, v in zip(out, r) if isinstance(out, tuple) else ((out, r),):
            rt.copy_h2d(ctx.index, o.handle, o.byte_offset, np.ascontiguousarray(v, dtype=o.dtype.numpy))

    return k


@contextlib.contextmanager
def primitives_only(device_type: str):
    """A device type whose plugin implements exactly the registry's primitives (the cpu's math on
    host copies), with the CPU fallback forbidden while it is installed."""
    from anydevice.backend import KernelTable
    from anydevice.engine import dispatch
    from anydevice.ops.registry import primitives
    from anydevice_cpu.kernels import register

    cpu = KernelTable("cpu")
    register(cpu)
    kernels = {o.name: (host_kernel(cpu.lookup(o.name, None).fn), True) for o in primitives()}
    with installed(FakePlugin(types=(device_type,), runtime=HostRuntime(count=1), kernels=kernels)):
        old = dispatch.set_fallback_mode("error")  # any CPU fallback raises
        try:
            yield device_type
        finally:
            dispatch.set_fallback_mode(old)
