"""Per-op profiling for every backend.

    import anydevice as ad
    with ad.profiler.profile() as prof:
        y = model(x)
    prof.print()                 # a table, heaviest first
    prof["matmul"].device_time   # seconds, summed over calls and devices

For each top-level op call (ops run inside another op's decomposition are part of it) the
profiler records the count, the host time spent in the call and, when the device's runtime
has ``device_time(op, nbytes, flops)``, the simulated or modelled device time. ``nbytes``
is the bytes read and written (inputs + output); ``flops`` comes from the op's
``OpDef.flops(shapes, attrs)`` when it defines one, else the output's element count.
On asynchronous backends host time is the launch cost, not the execution time.

``profile(timeline=True)`` also collects what ran on each device, when its runtime can trace
(``start_trace`` / ``stop_trace``; the simulated devices do): ``prof.timeline`` is a list of
:class:`TimelineEvent` (device, stream, kernel or copy name, start and end in seconds of the
device's clock), so overlap between streams, e.g. a copy running during a kernel, can be seen.
Devices of a type first used inside the block are not traced.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
from typing import NamedTuple

from anydevice.engine import dispatch
from anydevice.runtime import devices as _devices


@dataclasses.dataclass
class OpStats:
    """Totals of one (op, device, path)."""

    op: str
    device: str
    path: str
    count: int = 0
    host_time: float = 0.0
    device_time: float | None = None
    nbytes: int = 0
    flops: float = 0.0

    @property
    def host_mean(self) -> float:
        return self.host_time / self.count if self.count else 0.0


class TimelineEvent(NamedTuple):
    """One kernel or copy on a device's stream; ``start``/``end`` in seconds of the device clock."""

    device: str
    stream: int
    name: str
    start: float
    end: float

    def overlaps(self, other: TimelineEvent) -> bool:
        """Whether the two ran at the same time for a moment (same device clock)."""
        return self.device == other.device and self.start < other.end and other.start < self.end


class ProfileResult:
    """What :func:`profile` collected; filled while the ``with`` block runs."""

    def __init__(self):
        self.stats: dict[tuple, OpStats] = {}
        self.timeline: list[TimelineEvent] = []

    def rows(self) -> list[OpStats]:
        """Stats, heaviest first (by device time where known, else host time)."""
        return sorted(self.stats.values(), key=lambda s: (-(s.device_time or 0.0), -s.host_time, s.op))

    def __getitem__(self, op: str) -> OpStats:
        """The totals of ``op`` over every device and path."""
        rows = [s for s in self.stats.values() if s.op == op]
        if not rows:
            raise KeyError(f"op {op!r} was not called while profiling; recorded: {', '.join(sorted(self.ops())) or 'none'}")
        dts = [s.device_time for s in rows if s.device_time is not None]
        return OpStats(op, ",".join(sorted({s.device for s in rows})), ",".join(sorted({s.path for s in rows})),
                       sum(s.count for s in rows), sum(s.host_time for s in rows), sum(dts) if dts else None,
                       sum(s.nbytes for s in rows), sum(s.flops for s in rows))

    def __contains__(self, op: str) -> bool:
        return op in self.ops()

    def ops(self) -> set:
        return {s.op for s in self.stats.values()}

    @property
    def total_host_time(self) -> float:
        return sum(s.host_time for s in self.stats.values())

    @property
    def total_device_time(self) -> float | None:
        dts = [s.device_time for s in self.stats.values() if s.device_time is not None]
        return sum(dts) if dts else None

    def table(self, limit: int | None = None) -> str:
        """The stats as a text table."""
        from rich.console import Console
        from rich.table import Table

        t = Table(title="anydevice profile")
        for col in ("op", "device", "path", "calls", "host ms", "host us/call", "device ms", "MB", "MFLOP"):
            t.add_column(col, justify="left" if col in ("op", "device", "path") else "right")
        for s in self.rows()[:limit]:
            dev = "-" if s.device_time is None else f"{s.device_time * 1e3:.4f}"
            t.add_row(s.op, s.device, s.path, str(s.count), f"{s.host_time * 1e3:.3f}", f"{s.host_mean * 1e6:.1f}",
                      dev, f"{s.nbytes / 1e6:.3f}", f"{s.flops / 1e6:.3f}")
        dtot = self.total_device_time
        t.caption = (f"total host {self.total_host_time * 1e3:.3f} ms"
                     + ("" if dtot is None else f", device {dtot * 1e3:.4f} ms (modelled)"))
        buf = io.StringIO()
        Console(file=buf, width=120, color_system=None).print(t)
        return buf.getvalue()

    def print(self, limit: int | None = None) -> None:
        print(self.table(limit))

    def __repr__(self) -> str:
        return f"<ProfileResult {len(self.stats)} rows, host {self.total_host_time * 1e3:.3f} ms>"

    # --- the observer -------------------------------------------------------------------
    def _observe(self, op, device, path, seconds, inputs, out) -> None:
        key = (op.name, str(device), path)
        s = self.stats.get(key)
        if s is None:
            s = self.stats[key] = OpStats(op.name, str(device), path)
        nbytes, flops = cost_inputs(op, inputs, out)
        s.count += 1
        s.host_time += seconds
        s.nbytes += nbytes
        s.flops += flops
        be = device._backend
        if path != dispatch.FALLBACK and be.has("device_time"):
            t = float(be.runtime.device_time(op.name, nbytes, flops))
            s.device_time = (s.device_time or 0.0) + t


def cost_inputs(op, inputs, out) -> tuple[int, float]:
    """``(nbytes, flops)`` of one op call, as the cost model sees it."""
    outs = out if type(out) is tuple else (out,)  # a multi-output op (the optimizer updates) gives a tuple
    shapes, nbytes = [], sum(o.size * o.dtype.itemsize for o in outs)
    for x in inputs:
        if isinstance(x, list):
            shapes.append([t.shape for t in x])
            nbytes += sum(t.size * t.dtype.itemsize for t in x)
        else:
            shapes.append(x.shape)
            nbytes += x.size * x.dtype.itemsize
    flops = op.flops(shapes, dict(op.attrs)) if op.flops is not None else sum(o.size for o in outs)
    return nbytes, float(flops)


@contextlib.contextmanager
def profile(timeline: bool = False):
    """Collect per-op statistics while the block runs; yields a :class:`ProfileResult`.

    ``timeline=True``: also trace the devices that can be traced (see the module docstring)."""
    result = ProfileResult()
    traced = _start_traces() if timeline else []
    dispatch.add_observer(result._observe)
    try:
        yield result
    finally:
        dispatch.remove_observer(result._observe)
        for dev in traced:
            be = dev._backend
            result.timeline += [TimelineEvent(str(dev), *e) for e in be.runtime.stop_trace(be.phys(dev.index))]
        result.timeline.sort(key=lambda e: (e.device, e.start, e.end))


def _start_traces() -> list:
    out = []
    for be in list(_devices._backends.values()):
        if be is not None and getattr(be, "runtime", None) is not None and be.has("start_trace"):
            for dev in be.devices:
                be.runtime.start_trace(be.phys(dev.index))
                out.append(dev)
    return out


__all__ = ["profile", "ProfileResult", "OpStats", "TimelineEvent", "cost_inputs"]
