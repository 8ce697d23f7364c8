"""``anydevice check``: the health report of every installed backend.

For each device type it checks, in order: device properties, allocate/free, a bit-exact
host→device→host round trip of every dtype the device claims, copy bandwidth, a matmul and
reductions against a host reference, one training step (Linear → MSE → backward → Adam),
streams and events; with several devices also device-to-device copies and ``all_reduce``.
The report lists the collective backends (``mpi``, ``nccl``); ``--distributed N`` then launches N
processes per device type for a barrier, an all_reduce per dtype and the all_reduce bandwidth
(:mod:`.distributed`).

Each plugin's device types are checked in a worker process of their own, several at once; the
plugin import, the runtime creation and every check (per device) must finish within
``timeout`` seconds, or the stage is reported as timed out and the rest of the report still
comes out. Each check is isolated: an exception becomes a failed check that names the error,
the failing devices, and a fix.

The ``--json`` output is one document described in ``docs/CHECK.md`` (:data:`SCHEMA`).
"""
from __future__ import annotations

import argparse
import json as _json
import math
import sys
import time

from anydevice.tools.check import distributed as _distributed
from anydevice.tools.check import environment as _environment
from anydevice.tools.check.checks import (
    CHECKS,
    FAILED,
    PASSED,
    SKIPPED,
    TIMED_OUT,
    UNAVAILABLE,
    CheckFailed,
    CheckResult,
    CheckSkipped,
    Target,
    run_one,
)
from anydevice.tools.check.render import render
from anydevice.tools.check.report import Report, overall_verdict
from anydevice.tools.check.runner import DEFAULT_TIMEOUT, Job, Runner
from anydevice.tools.check.schema import SCHEMA, SCHEMA_VERSION
from anydevice.tools.check.selection import select
from anydevice.tools.check.worker import quiet_fallbacks
from anydevice.tools.launch import int_at_least

__all__ = ["run", "main", "render", "SCHEMA", "SCHEMA_VERSION", "CHECKS", "DEFAULT_TIMEOUT", "CheckFailed",
           "CheckSkipped", "CheckResult", "Target", "run_one", "PASSED", "FAILED", "SKIPPED", "UNAVAILABLE",
           "TIMED_OUT"]


def run(devices=None, quick: bool = False, progress=None, *, timeout: float = DEFAULT_TIMEOUT,
        no_fallback: bool = False, in_process: bool = False, distributed: int | None = None) -> dict:
    """Run the whole health check; returns the report (see :data:`SCHEMA`). Never raises for a device problem.

    :param devices: device types or devices (``"npu"``, ``["npu:1", "cpu"]``); default: every installed type.
    :param quick: skip the bandwidth and training checks.
    :param progress: gets ``start(number of checks)`` and then ``step(description)`` before each check.
    :param timeout: seconds each stage (plugin import, runtime creation, each check on each device) may take.
    :param no_fallback: fail a device type on which any op ran through the CPU fallback.
    :param in_process: run every check in this process (no hang can then be abandoned; for debugging a plugin).
    :param distributed: also run ``distributed`` processes per device type (barrier, all_reduce per dtype,
        bandwidth; :mod:`.distributed`) on cpu and every type that passed.
    """
    t0 = time.perf_counter()
    timeout = _valid_timeout(timeout)
    if distributed is not None and (isinstance(distributed, bool) or not isinstance(distributed, int)
                                    or distributed < 2):
        raise ValueError(f"anydevice check: distributed must be a number of processes >= 2, not {distributed!r}")
    devices = [devices] if isinstance(devices, str) else list(devices or [])
    env = _environment.environment()
    found: dict = {}
    selection, errors = select(devices, lambda: found.setdefault("aliases", _aliases(timeout, in_process)))
    report = Report(selection, bool(devices), no_fallback, progress and progress.step)
    if progress is not None:
        progress.start(len(selection) * len(CHECKS))
    with quiet_fallbacks():
        Runner(report, timeout, quick).run(_jobs(selection, in_process))
    devs = report.device_entries()
    for spec, err in {**report.spec_errors, **errors}.items():
        devs[spec] = _bad_spec(spec, err)
    failing = [e for e in devs.values()
               if e["status"] in (FAILED, TIMED_OUT) or (e["status"] == UNAVAILABLE and e["requested"])]
    dist = _distributed_stage(devs, distributed, timeout) if distributed else None
    failing += [e for e in (dist or {}).get("types", {}).values() if e["status"] in (FAILED, TIMED_OUT)]
    return {
        "schema_version": SCHEMA_VERSION,
        "options": {"devices": devices or None, "quick": quick, "timeout": timeout, "no_fallback": no_fallback,
                    "in_process": in_process, "distributed": distributed},
        "collectives": _distributed.backends(devs), "distributed": dist,
        "environment": env, "plugins": report.plugin_rows(), "devices": devs,
        "verdict": overall_verdict(devs, failing), "exit_code": 1 if failing or not devs else 0,
        "seconds": round(time.perf_counter() - t0, 3),
    }


def _distributed_stage(devs: dict, nproc: int, timeout: float) -> dict:
    """The multi-process stage on cpu and every device type that passed its checks."""
    types = sorted({"cpu"} | {t for t, e in devs.items() if e["status"] == PASSED}, key=lambda t: (t != "cpu", t))
    return _distributed.run(types, nproc, timeout, {t: e["count"] for t, e in devs.items()})


def _valid_timeout(timeout) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (timeout > 0 and math.isfinite(timeout)):
        raise ValueError(f"anydevice check: timeout must be a positive number of seconds, not {timeout!r}")
    return float(timeout)


def _jobs(selection: dict, in_process: bool) -> list:
    """One job per plugin installed as a distribution; plugins registered in this process run here."""
    from importlib.metadata import entry_points

    from anydevice.runtime.plugins import GROUP, manager

    installed = {(ep.name.strip().lower(), ep.value) for ep in entry_points(group=GROUP)}
    groups: dict = {}
    local = []
    for ty, specs in selection.items():
        rec = manager.by_type.get(ty)
        if in_process or (ty, getattr(rec, "module_path", None)) not in installed:
            local.append((ty, specs))
        else:
            groups.setdefault(rec.name, (rec, []))[1].append((ty, specs))
    # Plugins with more types first; the core's own (cpu, quick to check) last, to fill a gap.
    order = sorted(groups.values(), key=lambda g: ((g[0].distribution or "").lower() == "anydevice", -len(g[1])))
    return [Job(types) for _, types in order] + ([Job(local, in_process=True)] if local else [])


def _aliases(timeout: float, in_process: bool) -> dict:
    """``{alias: type}`` declared by every plugin (loading them all, in a worker unless ``in_process``)."""
    from anydevice.runtime.plugins import manager

    if in_process:
        manager.load_all()
        return dict(manager.aliases)
    report = Report({}, True, False)
    Runner(report, timeout, False).run([Job([], aliases=True)])
    return report.aliases or {}


def _bad_spec(spec: str, err: str) -> dict:
    return {"type": spec, "requested": True, "status": UNAVAILABLE, "reason": err,
            "hint": "run `anydevice check` without --device to list every installed device type",
            "plugin": None, "plugin_version": None, "description": "", "count": 0, "devices": [], "unusable": [],
            "checks": [], "fallback_ops": [], "stage": None, "verdict": f"{spec}: {err}", "environment": {},
            "plugin_output": ""}


# --- command line -----------------------------------------------------------------------------
def _seconds(text: str) -> float:
    try:
        return _valid_timeout(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}") from None


def main(argv=None) -> int:
    """``anydevice check [--device TYPE[:N] ...] [--json] [--quick] [--timeout S] [--no-fallback]
    [--distributed N]``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv == ["--worker"]:
        from anydevice.tools.check.worker import serve

        return serve()
    p = argparse.ArgumentParser(
        prog="anydevice check",
        description="Check that every installed anydevice backend works: memory, copies, compute, training, "
                    "streams, and multi-device copies. Exit status 0 when every selected check passes, 1 otherwise.")
    p.add_argument("--device", "-d", action="append", metavar="TYPE[:N]",
                   help="check only this device type or device (repeatable, or comma separated); "
                        "default: every installed type (unavailable ones are listed without failing the run)")
    p.add_argument("--json", action="store_true", help="print one JSON document (schema in docs/CHECK.md)")
    p.add_argument("--quick", action="store_true", help="skip the bandwidth and training checks")
    p.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT, metavar="S",
                   help=f"seconds each stage may take: plugin import, runtime creation, each check on each device "
                        f"(default {DEFAULT_TIMEOUT:g}); a stage that overruns is reported as timed out")
    p.add_argument("--no-fallback", action="store_true",
                   help="fail a device type on which any op ran through the CPU fallback during the checks")
    p.add_argument("--distributed", type=int_at_least(2, "a number of processes >= 2"), metavar="N",
                   help="also launch N processes per device type (cpu and each type that passed): barrier, "
                        "all_reduce of every dtype, all_reduce bandwidth (algbw, busbw) per message size")
    p.add_argument("--in-process", action="store_true",
                   help="run every check in this process, one type after the other (for debugging a plugin; "
                        "a hang cannot be abandoned)")
    try:
        args = p.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    return _report(args.device, args.quick, args.json, timeout=args.timeout, no_fallback=args.no_fallback,
                   in_process=args.in_process, distributed=args.distributed)["exit_code"]


def _report(devices, quick: bool, as_json: bool, stream=None, **options) -> dict:
    """Run the check and print it (JSON or tables, with a progress bar on a terminal)."""
    out = stream or sys.stdout
    if as_json:
        report = run(devices, quick, **options)
        out.write(_json.dumps(report, indent=2, allow_nan=False) + "\n")
        return report
    from rich.console import Console

    console = Console(file=out)
    report = _run_with_progress(devices, quick, console, options) if console.is_terminal else \
        run(devices, quick, **options)
    render(report, console)
    return report


class _Progress:
    """Feeds a rich progress bar: ``start(total)`` once, then ``step(description)`` per check."""

    def __init__(self, bar):
        self.bar, self.task = bar, bar.add_task("discovering plugins", total=None)

    def start(self, total: int) -> None:
        self.bar.update(self.task, total=total)

    def step(self, description: str) -> None:
        self.bar.update(self.task, description=description, advance=1)


def _run_with_progress(devices, quick, console, options) -> dict:
    """Run with a transient progress bar (only used when stdout is a terminal)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

    cols = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*cols, console=console, transient=True) as bar:
        return run(devices, quick, progress=_Progress(bar), **options)
