"""Which communicator moves a device type's tensors in a group, and the counted fallback to MPI.

Per device type, a group asks the type's plugin once (``anydevice_collectives``); the
communicator it gives runs every collective it has a method for. A collective it lacks (or
declines by returning None), and every collective of a vendor type whose plugin gives none,
runs through the host-staged MPI communicator instead: counted per (collective, device type)
in :func:`fallback_counts` and warned once, like op fallbacks (``ANYDEVICE_FALLBACK`` applies).
The ``cpu`` type's own communicator is the MPI one, so it is never counted.
"""
from __future__ import annotations

import collections
import sys
import threading
import time
import warnings

from anydevice.base.errors import FallbackError

from .mpi import DistributedError, HostCommunicator, poll

_HOST = "<host>"
_counts: collections.Counter = collections.Counter()
_warned: set = set()
_lock = threading.Lock()


class CollectiveFallbackWarning(UserWarning):
    """A collective on a device type ran through host memory over MPI, not the plugin's communicator."""


CollectiveFallbackWarning.__module__ = "anydevice.distributed"


def fallback_counts() -> dict:
    """``{(collective, device_type): count}`` of collectives staged through the host in this process."""
    with _lock:
        return dict(_counts)


def reset_fallback_counts() -> None:
    with _lock:
        _counts.clear()
        _warned.clear()


class Bootstrap:
    """What a plugin's communicator factory receives (see the ``anydevice_collectives`` hookspec)."""

    def __init__(self, group, comm, backend):
        self.rank, self.size, self.timeout, self.comm = group.rank, group.size, group.timeout, comm
        self._backend = backend

    def allocate(self, like, shape: tuple, dtype):
        """A new buffer of ``shape`` and ``dtype`` on the device of buffer ``like``."""
        be = self._backend
        return be.empty(be.physical.index(like.index), tuple(shape), dtype)

    def stream(self, like):
        """The runtime's handle of the current stream on the device of buffer ``like`` (or of physical
        device index ``like``, for runtimes whose buffers are their own arrays); None: the default."""
        be = self._backend
        return be.contexts[be.physical.index(like if isinstance(like, int) else like.index)].stream


def host(group) -> HostCommunicator:
    c = group.comms.get(_HOST)
    if c is None:
        c = group.comms[_HOST] = HostCommunicator(group.comm)
    return c


def communicator(group, device_type: str, name: str):
    """The group's communicator for ``device_type`` (created on first use, on every member at once)."""
    c = group.comms.get(device_type)
    if c is None:
        c = group.comms[device_type] = _create(group, device_type, name)
    return c


def _create(group, device_type: str, name: str):
    from anydevice.runtime.devices import get_backend
    from anydevice.runtime.plugins import manager

    if group.backend == "mpi":
        return host(group)
    be = get_backend(device_type)
    rec = be.record
    plugin = rec.distribution or rec.name
    factory = None
    if rec.module is not None and manager.implements(rec, "anydevice_collectives"):
        try:
            factory = manager.call(rec, "anydevice_collectives", device_type=device_type, runtime=be.runtime)
        except Exception as e:
            raise DistributedError(f"{name}(): plugin {plugin}: anydevice_collectives({device_type!r}) raised "
                                   f"{type(e).__name__}: {e}") from e
    if factory is None:
        if group.backend is not None:
            raise DistributedError(
                f"{name}(): backend {group.backend!r} has no communicator for device type {device_type!r} "
                f"(plugin {plugin} provides none); use backend=None or 'mpi'")
        return host(group)
    comm = _dup(group, name, device_type)
    try:
        c = factory(Bootstrap(group, comm, be))
    except Exception as e:
        raise DistributedError(f"{name}(): plugin {plugin}: the communicator factory of anydevice_collectives"
                               f"({device_type!r}) raised {type(e).__name__}: {e}") from e
    cname = getattr(c, "name", None)
    if group.backend is not None and cname != group.backend:
        raise DistributedError(f"{name}(): backend {group.backend!r} was asked for, but device type {device_type!r} "
                               f"provides {cname!r} (plugin {plugin}); use backend=None or 'mpi'")
    return c


def _dup(group, name: str, device_type: str):
    comm, req = group.comm.Idup()
    if not poll(req.Test, time.monotonic() + group.timeout):
        raise group.timeout_error(name, group.timeout, group.seq, where=f" setting up its {device_type} communicator")
    return comm


def engine(group, device_type: str, name: str):
    """``(communicator, staged)`` for collective ``name``: the plugin's, or the host one (``staged``)."""
    c = communicator(group, device_type, name)
    if type(c) is HostCommunicator:
        if group.backend is None and device_type != "cpu":
            count(name, device_type)
        return c, True
    if hasattr(c, name):
        return c, False
    count(name, device_type)
    return host(group), True


def count(name: str, device_type: str, declined_by: str | None = None) -> None:
    from anydevice.engine.dispatch import get_fallback_mode

    what = (f"{name}() has no {device_type} collective" if declined_by is None else
            f"{name}() on {device_type} was declined by its communicator {declined_by!r} for these tensors")
    mode = get_fallback_mode()
    if mode == "error":
        raise FallbackError(f"{what} and would be staged through host memory over MPI; set ANYDEVICE_FALLBACK=warn "
                            f"to allow it")
    key = (name, device_type)
    with _lock:
        _counts[key] += 1
        first = key not in _warned
        _warned.add(key)
    if first and mode == "warn":
        warnings.warn(f"{what}; staging it through host memory over MPI. "
                      f"Set ANYDEVICE_FALLBACK=silent to hide this, or =error to forbid it.",
                      CollectiveFallbackWarning, stacklevel=_user_stacklevel())


def _user_stacklevel() -> int:
    """The stack level of the first frame outside anydevice.distributed (where the user called)."""
    f, level = sys._getframe(1), 1
    while f is not None and f.f_globals.get("__name__", "").startswith(__package__):
        f, level = f.f_back, level + 1
    return level
