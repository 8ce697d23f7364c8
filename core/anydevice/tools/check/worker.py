"""The worker side of ``anydevice check``: the stages of some device types, as a stream of events.

A worker runs, for each device type of its job: ``import`` (the plugin module, once per plugin),
``environment`` (the ``anydevice_environment`` hook), ``runtime`` (``anydevice_create_runtime``,
kernel registration, device probes) and then every check. It announces each stage (and, inside
a check, each device) before running it, so the parent knows what was running when a deadline
passed. Events are JSON objects; :func:`serve` writes one per line on a channel that plugins
cannot write to, while everything printed on stdout/stderr goes to a capture file.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import warnings

from anydevice.tools.check.checks import (
    CHECKS,
    SKIPPED,
    UNAVAILABLE,
    CheckResult,
    Target,
    describe,
    jsonable,
    run_one,
    skip_reason,
)

IMPORT, ENVIRONMENT, RUNTIME = "import", "environment", "runtime"


class Channel:
    """Where a worker's events go: ``write(line)`` sends one JSON line, ``position()`` tells how
    much the plugins have printed so far (the parent cuts the captured output at these marks)."""

    def __init__(self, write, position):
        self._write, self._position = write, position

    def send(self, event: dict) -> None:
        self._write(json.dumps(event, allow_nan=False) + "\n")

    def start(self, stage: str, device_type: str | None = None, plugin: str | None = None) -> None:
        self.send({"ev": "start", "stage": stage, "type": device_type, "plugin": plugin, "at": self._position()})

    def device(self, dev) -> None:
        self.send({"ev": "device", "device": str(dev)})

    def done(self) -> None:
        self.send({"ev": "done", "at": self._position()})


@contextlib.contextmanager
def quiet_fallbacks():
    """Fallbacks are reported per check; silence their warnings and the 'error' mode meanwhile."""
    from anydevice.engine import dispatch

    old = dispatch.set_fallback_mode("silent")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dispatch.FallbackWarning)
            yield
    finally:
        dispatch.set_fallback_mode(old)


def plugin_row(rec) -> dict:
    """A plugin's row of the report, from its record (statuses as the plugin manager set them)."""
    d = jsonable(rec.as_dict())
    d["hint"] = _plugin_hint(rec)
    return d


def _plugin_hint(rec) -> str:
    from anydevice.runtime.contract import SUPPORTED_API_VERSIONS

    if rec.status == "failed":
        who = rec.distribution or rec.module_path or rec.name
        return f"reinstall or upgrade {who} (pip install --upgrade {who}); the reason above names the problem"
    if rec.status == "skipped" and "API version" in rec.reason:
        return f"install a release of {rec.distribution or rec.name} built for plugin API version(s) " \
               f"{', '.join(map(str, SUPPORTED_API_VERSIONS))}"
    return ""


def work(job: dict, ch: Channel, quiet: bool = True) -> None:
    """Run a job: ``{"types": [[type, specs or null], ...], "quick": bool}`` or ``{"aliases": true}``.

    ``quiet=False`` leaves fallback warnings to the caller (a thread of a process that silenced them).
    """
    from anydevice.runtime.plugins import PluginRecord, manager

    if job.get("aliases"):
        ch.start(IMPORT)
        manager.load_all()
        ch.send({"ev": "aliases", "aliases": dict(manager.aliases)})
        ch.done()
        return
    manager.discover()
    loaded: set = set()
    with quiet_fallbacks() if quiet else contextlib.nullcontext():
        for ty, specs in job["types"]:
            rec = manager.by_type.get(ty)
            if isinstance(rec, PluginRecord) and id(rec) not in loaded:
                loaded.add(id(rec))
                ch.start(IMPORT, ty, rec.name)
                manager.load_type(ty)
                ch.send({"ev": "plugin", "plugin": plugin_row(rec)})
            try:
                _check_type(ty, specs, bool(job.get("quick")), rec if isinstance(rec, PluginRecord) else None, ch)
                if isinstance(rec, PluginRecord):
                    ch.send({"ev": "plugin", "plugin": plugin_row(rec)})
            except Exception as e:  # noqa: BLE001 - a bug outside any single check still gets a report entry
                ch.send({"ev": "error", "type": ty, "reason": describe(e)})
            ch.send({"ev": "end", "type": ty})
    ch.done()


def _environment_of(rec, device_type: str) -> dict:
    from anydevice.runtime.plugins import LOADED, manager

    if rec is None or rec.status != LOADED:
        return {}
    try:
        facts = manager.call(rec, "anydevice_environment", device_type=device_type)
    except Exception as e:  # noqa: BLE001 - a broken hook is reported, never raised
        return {"error": f"anydevice_environment() raised {type(e).__name__}: {e}"}
    if facts is None:
        return {}
    if not isinstance(facts, dict):
        return {"error": f"anydevice_environment() returned {type(facts).__name__}, expected a dict"}
    return jsonable(facts)


def _check_type(ty: str, specs, quick: bool, rec, ch: Channel) -> None:
    from anydevice.base.errors import DeviceUnavailableError
    from anydevice.runtime import devices as _backend

    ch.start(ENVIRONMENT, ty)
    ch.send({"ev": "env", "type": ty, "facts": _environment_of(rec, ty)})
    ch.start(RUNTIME, ty)
    spec = rec.specs.get(ty) if rec is not None else None
    fields = {"description": spec.description if spec is not None else ""}
    try:
        be = _backend.get_backend(ty)
    except DeviceUnavailableError as e:
        cause = e.__cause__
        if cause is not None and not isinstance(cause, DeviceUnavailableError):
            fields["hook_error"] = str(e)
        ch.send({"ev": "type", "type": ty, "fields": dict(fields, status=UNAVAILABLE, reason=str(e),
                                                           hint=getattr(e, "hint", "") or "")})
        return
    devs = _pick(ty, be, specs, ch)
    fields.update(count=be.count, devices=[str(d) for d in devs],
                  unusable=[dict(u.as_dict(), device=f"{ty} physical device {u.physical}") for u in be.unusable],
                  drop=not devs)
    ch.send({"ev": "type", "type": ty, "fields": fields})
    if devs:
        _run_checks(Target(ty, devs, be, quick, on_device=ch.device), ch)


def _pick(ty: str, be, specs, ch: Channel) -> list:
    """The selected devices; ``specs`` is None (all) or ``[[spec, index], ...]``. Bad indices are reported."""
    from anydevice.runtime.devices import as_device

    if specs is None:
        return list(be.devices)
    devs = []
    for spec, index in specs:
        if index < be.count:
            devs.append(be.devices[index])
            continue
        try:
            as_device(f"{ty}:{index}")
        except (ValueError, TypeError) as e:
            ch.send({"ev": "spec_error", "spec": spec, "reason": str(e)})
    return sorted(set(devs), key=lambda d: d.index)


def _run_checks(t: Target, ch: Channel) -> None:
    for name, fn, when in CHECKS:
        ch.start(name, t.type)
        why = skip_reason(t, when)
        res = CheckResult(name, SKIPPED, 0.0, why) if why else run_one(name, fn, t)
        ch.send({"ev": "check", "type": t.type, "result": res.as_dict()})


def serve() -> int:
    """Entry point of a worker process: ``python -m anydevice.tools.check --worker``.

    Jobs arrive one JSON line each on stdin, events leave on stdout, and stderr is a capture
    file. Both channels move to private descriptors first; fd 0 then reads nothing and fd 1
    points at the capture file too, so whatever a plugin prints (from Python or C) lands in the
    capture and never among the events, and nothing a plugin reads can swallow a job.
    """
    jobs = os.fdopen(os.dup(0), "r", encoding="utf-8")
    events = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)

    def write(line: str) -> None:
        events.write(line)
        events.flush()

    def position() -> int:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        try:
            return os.lseek(2, 0, os.SEEK_CUR)
        except OSError:
            return 0

    ch = Channel(write, position)
    for line in jobs:
        if line.strip():
            work(json.loads(line), ch)
    return 0
