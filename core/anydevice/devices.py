"""Device value objects, device strings, and the current device.

Accepted strings: ``"cpu"``, ``"<type>"`` (index 0) and ``"<type>:<index>"``; aliases
declared by plugins (``"gpu"`` for cuda) resolve to their type. The current device
starts as ``$ANYDEVICE_DEVICE`` if set, else ``cpu``.
"""
from __future__ import annotations

import contextlib
import difflib
import os
import re

from .errors import DeviceUnavailableError

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
        from . import dtypes as _dt

        s = self._backend.dtypes(self.index)
        return tuple(d for d in _dt.ALL_DTYPES if d in s)


def _unknown_type_error(name: str) -> ValueError:
    """Lists what is installed from entry-point names and what is already known; imports no plugin."""
    from . import _backend
    from .plugins.manager import manager

    manager.discover()
    states: dict[str, list] = {"available": [], "unavailable": [], "not loaded": []}
    for t in sorted(manager.by_type):
        state, reason = _backend.known_state(t)
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
    from . import _backend

    name, idx = m.group(1).lower(), int(m.group(2) or 0)
    canon = _backend.canonical_type(name)
    if canon is None:
        raise _unknown_type_error(name)
    be = _backend.get_backend(canon)
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


_current: list[Device] = []


def current_device() -> Device:
    if not _current:
        _current.append(as_device(os.environ.get("ANYDEVICE_DEVICE") or "cpu"))
    return _current[-1]


def set_device(device) -> Device:
    """Make ``device`` the default for new tensors; returns the Device."""
    d = as_device(device)
    if _current:
        _current[-1] = d
    else:
        _current.append(d)
    return d


def get_device() -> str:
    """The current device as a string, e.g. ``"npu:0"``."""
    return str(current_device())


@contextlib.contextmanager
def device_guard(device):
    """Temporarily make ``device`` the current device."""
    d = as_device(device)
    current_device()
    _current.append(d)
    try:
        yield d
    finally:
        _current.pop()


def _reset_cache() -> None:
    _cache.clear()
    _current.clear()
