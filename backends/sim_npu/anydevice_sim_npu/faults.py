"""Fault injection: make one simulated device fail an allocation, fail a kernel, or be lost.

Kinds, each firing after ``after`` more operations of its kind on that device:

- ``alloc``: every ``malloc`` fails from then on (the core reports an OutOfMemoryError);
- ``kernel``: the next kernel raises on the device; the DeviceError appears at the next
  synchronization point and the device stays in the error state (sticky);
- ``lost``: the device disappears; every later call on it raises DeviceError. ``after``
  counts allocations, kernel launches and copies.

Other devices and the cpu are never affected. :func:`reset` clears the fault and the error
state. The same faults can be set before start-up with
``ANYDEVICE_SIM_FAULTS="npu:1:kernel:after=3,xpu:0:lost"``.
"""
from __future__ import annotations

import os

KINDS = ("alloc", "kernel", "lost")
ENV = "ANYDEVICE_SIM_FAULTS"


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
    out = []
    for item in filter(None, (p.strip() for p in spec.split(","))):
        parts = item.split(":")
        try:
            if len(parts) not in (3, 4) or not parts[1].isdigit():
                raise ValueError
            after = 0
            if len(parts) == 4:
                key, _, val = parts[3].partition("=")
                if key.strip() != "after" or not val.strip().isdigit():
                    raise ValueError
                after = int(val)
        except ValueError:
            raise ValueError(f"{ENV}: cannot parse {item!r}; expected TYPE:INDEX:KIND[:after=N], "
                             f"e.g. 'npu:1:kernel:after=3' (kinds: {', '.join(KINDS)})") from None
        out.append((parts[0].strip().lower(), int(parts[1]), parts[2].strip().lower(), after))
    return out


def apply_env(device_type: str, rt, environ=None) -> None:
    """Arm the faults of ``$ANYDEVICE_SIM_FAULTS`` that concern ``device_type`` (at runtime creation)."""
    spec = (os.environ if environ is None else environ).get(ENV, "")
    for t, index, kind, after in parse(spec):
        if t == device_type:
            _arm(rt, index, kind, after, where=ENV)


def _arm(rt, index, kind, after, where):
    if kind not in KINDS:
        raise ValueError(f"{where}: unknown fault kind {kind!r}; allowed: {', '.join(KINDS)}")
    if not isinstance(after, int) or after < 0:
        raise ValueError(f"{where}: after must be a non-negative integer, got {after!r}")
    if not 0 <= index < len(rt.chips):
        raise ValueError(f"{where}: {rt.type}:{index} does not exist ({rt.type} has {len(rt.chips)} device(s))")
    rt.chips[index].faults[kind] = after


def _locate(device):
    from anydevice._backend import get_backend
    from anydevice.devices import as_device

    d = as_device(device)
    rt = d._backend.runtime
    if not hasattr(rt, "chips"):
        raise ValueError(f"{d} is not a simulated device (plugin anydevice-sim-npu provides npu, xpu and dcu)")
    return rt, get_backend(d.type).phys(d.index)
