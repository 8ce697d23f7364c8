"""Fault injection: make one simulated device fail an allocation, fail a kernel, or be lost.

Kinds, each firing after ``after`` more operations of its kind on that device:

- ``alloc``: every ``malloc`` fails from then on (the core reports an OutOfMemoryError);
- ``kernel``: the next kernel raises on the device; the DeviceError appears at the next
  synchronization point and the device stays in the error state (sticky);
- ``lost``: the device disappears; every later call on it raises DeviceError. ``after``
  counts allocations, kernel launches and copies.

Other devices and the cpu are never affected. :func:`reset` clears the fault and the error
state. The same faults can be set before start-up with
``ANYDEVICE_SIM_FAULTS="npu:1:kernel:after=3,xpu:0:lost"``. A bad entry makes only its own type
unavailable (an entry whose type is misspelled belongs to the closest type, ``nup`` to npu); an
entry for no simulated type at all is ignored with a warning.
"""
from __future__ import annotations

import difflib
import os
import warnings

from anydevice.base.errors import DeviceUnavailableError

from .plugin import TYPES

KINDS = ("alloc", "kernel", "lost")
ENV = "ANYDEVICE_SIM_FAULTS"
FORM = "TYPE:INDEX:KIND[:after=N], e.g. 'npu:1:kernel:after=3'"
_warned: set = set()


def inject(device: str, kind: str, after: int = 0) -> None:
    """Arm a fault on ``device`` (``"npu:1"``) of ``kind`` after ``after`` more operations."""
    rt, index = _locate(device)
    _arm(rt, index, kind, after, where="inject()")


def clear(device: str) -> None:
    """Disarm pending faults of ``device`` without touching its error state."""
    rt, index = _locate(device)
    rt.chips[index].faults.clear()


def reset(device: str) -> None:
    """Reset ``device``: clear its faults, its sticky error and its lost status."""
    rt, index = _locate(device)
    rt.reset(index)


def parse(spec: str) -> list[tuple[str, int, str, int]]:
    """``"npu:1:kernel:after=3,xpu:0:lost"`` → ``[("npu", 1, "kernel", 3), ("xpu", 0, "lost", 0)]``."""
    return [parse_entry(item) for item in entries(spec)]


def entries(spec: str) -> list[str]:
    return [p.strip() for p in spec.split(",") if p.strip()]


def parse_entry(item: str) -> tuple[str, int, str, int]:
    """One entry ``TYPE:INDEX:KIND[:after=N]``; ValueError naming the entry and the form."""
    parts = [p.strip() for p in item.split(":")]
    after = 0
    ok = len(parts) in (3, 4) and parts[1].isdigit()
    if ok and len(parts) == 4:
        key, _, val = parts[3].partition("=")
        ok = key.strip() == "after" and val.strip().isdigit()
        after = int(val) if ok else 0
    if not ok:
        raise ValueError(f"{ENV}: cannot parse {item!r}; expected {FORM} (kinds: {', '.join(KINDS)})")
    return parts[0].lower(), int(parts[1]), parts[2].lower(), after


def owner(item: str) -> str | None:
    """The simulated type an entry belongs to: its TYPE, or the closest one when misspelled."""
    t = item.split(":", 1)[0].strip().lower()
    return t if t in TYPES else next(iter(difflib.get_close_matches(t, TYPES, n=1)), None)


def apply_env(device_type: str, rt, environ=None) -> None:
    """Arm the faults of ``$ANYDEVICE_SIM_FAULTS`` that belong to ``device_type`` (at runtime
    creation). A bad entry of this type raises DeviceUnavailableError; other types' entries are
    not looked at, so their mistakes do not affect this type."""
    for item in entries((os.environ if environ is None else environ).get(ENV, "")):
        t = owner(item)
        if t is None and item not in _warned:
            _warned.add(item)
            warnings.warn(f"{ENV}: entry {item!r} names no simulated device type (allowed: {', '.join(TYPES)}); "
                          "it is ignored", UserWarning, stacklevel=2)
        if t != device_type:
            continue
        try:
            name, index, kind, after = parse_entry(item)
            if name != device_type:
                raise ValueError(f"{ENV}: entry {item!r}: {name!r} is not a simulated device type "
                                 f"(allowed: {', '.join(TYPES)}); did you mean {device_type!r}?")
            _arm(rt, index, kind, after, where=f"{ENV} entry {item!r}")
        except ValueError as e:
            raise DeviceUnavailableError(str(e), hint=f"fix or unset {ENV} (entries: {FORM})") from None


def _arm(rt, index, kind, after, where):
    if kind not in KINDS:
        raise ValueError(f"{where}: unknown fault kind {kind!r}; allowed: {', '.join(KINDS)}")
    if not isinstance(after, int) or after < 0:
        raise ValueError(f"{where}: after must be a non-negative integer, got {after!r}")
    if not 0 <= index < len(rt.chips):
        raise ValueError(f"{where}: {rt.type}:{index} does not exist ({rt.type} has {len(rt.chips)} device(s))")
    rt.chips[index].faults[kind] = after


def _locate(device):
    from anydevice.runtime.devices import as_device, get_backend

    d = as_device(device)
    rt = d._backend.runtime
    if not hasattr(rt, "chips"):
        raise ValueError(f"{d} is not a simulated device (plugin anydevice-sim-npu provides npu, xpu and dcu)")
    return rt, get_backend(d.type).phys(d.index)
