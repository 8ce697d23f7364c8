"""The report of ``anydevice check``, assembled in the parent from the workers' events.

One entry per selected device type (created before any worker starts, so a type whose worker
hangs or dies is still reported), one row per discovered plugin, then a verdict per type and
one for the run.
"""
from __future__ import annotations

from anydevice.tools.check.checks import CHECKS, FAILED, PASSED, SKIPPED, TIMED_OUT, UNAVAILABLE, plural
from anydevice.tools.check.worker import IMPORT, plugin_row

#: At most this many characters of what a plugin printed are kept per plugin and per device type.
OUTPUT_LIMIT = 4000
_CHECK_NAMES = {c[0] for c in CHECKS}
_NOT_REQUESTED = "not selected explicitly, so it does not fail this run"


def _truncate(text: str, limit: int = OUTPUT_LIMIT) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… [{len(text) - limit} more characters not kept]"


def device_list(devices: list, limit: int = 4) -> str:
    """``npu:1, npu:3`` (at most ``limit`` names, then how many more)."""
    shown = ", ".join(devices[:limit])
    return shown + (f" and {len(devices) - limit} more" if len(devices) > limit else "")


class Report:
    def __init__(self, selection: dict, requested: bool, no_fallback: bool, progress=None):
        from anydevice.runtime.plugins import DISCOVERED, PluginRecord, manager

        manager.discover()
        self.no_fallback, self.progress = no_fallback, progress
        self.rows: dict = {}
        for rec in manager.records:
            row = dict(plugin_row(rec), environment={}, hook_errors=[], plugin_output="")
            if rec.status == DISCOVERED and not (set(rec.types) & set(selection)):
                row["reason"] = "not loaded: none of its device types was checked in this run"
            self.rows[rec.name] = row
        recs = {t: manager.by_type.get(t) for t in selection}
        self.owner = {t: r.name for t, r in recs.items() if isinstance(r, PluginRecord)}
        self.entries = {t: self._entry(t, manager.by_type.get(t), requested) for t in selection}
        self.spec_errors: dict = {}
        self.aliases: dict | None = None

    @staticmethod
    def _entry(ty: str, rec, requested: bool) -> dict:
        return {"type": ty, "requested": requested, "status": None, "reason": "", "hint": "",
                "plugin": (rec.distribution or rec.name) if rec else None, "plugin_version": rec.version if rec else None,
                "description": "", "count": 0, "devices": [], "unusable": [], "checks": [], "fallback_ops": [],
                "stage": None, "verdict": "", "environment": {}, "plugin_output": ""}

    # --- events ---------------------------------------------------------------------------
    def started(self, ev: dict) -> None:
        if self.progress is not None and ev.get("stage") in _CHECK_NAMES:
            self.progress(f"checking {ev.get('type')}: {ev['stage']}")

    def apply(self, ev: dict) -> None:
        kind, ty = ev.get("ev"), ev.get("type")
        entry = self.entries.get(ty)
        if kind == "plugin":
            row = ev["plugin"]
            old = self.rows.get(row["name"], {})
            self.rows[row["name"]] = dict(row, environment=old.get("environment", {}),
                                          hook_errors=old.get("hook_errors", []),
                                          plugin_output=old.get("plugin_output", ""))
        elif kind == "aliases":
            self.aliases = ev["aliases"]
        elif kind == "spec_error":
            self.spec_errors[ev["spec"]] = ev["reason"]
        elif entry is not None:
            self._apply_to(entry, kind, ev)

    def _row(self, ty: str) -> dict:
        return self.rows.get(self.owner.get(ty), {"environment": {}, "hook_errors": []})

    def _apply_to(self, entry: dict, kind: str, ev: dict) -> None:
        ty = entry["type"]
        if kind == "env":
            facts = ev["facts"]
            entry["environment"] = facts
            self._row(ty)["environment"][ty] = facts
            if "error" in facts:
                self._row(ty)["hook_errors"].append(f"{ty}: {facts['error']}")
        elif kind == "type":
            fields = dict(ev["fields"])
            if fields.pop("drop", False):
                entry["_drop"] = True
            hook_error = fields.pop("hook_error", None)
            if hook_error:
                self._row(ty)["hook_errors"].append(hook_error)
            entry.update(fields)
        elif kind == "check":
            entry["checks"].append(ev["result"])
        elif kind == "error":
            entry.update(status=FAILED, reason=ev["reason"],
                         hint=f"report it with the output of `anydevice check --device {ty} --json`")

    def add_output(self, owner, text: str) -> None:
        kind, name = owner
        target = self.rows.get(name) if kind == "plugin" else self.entries.get(name)
        if target is not None:
            target["plugin_output"] = _truncate(target.get("plugin_output", "") + text)

    def abandon(self, w, status: str, why: str) -> set:
        """The stage ``w`` was in did not finish (``status`` timed_out or failed); returns the types it ends."""
        todo = [t for t, _ in w.job.types if t not in w.ended and t in self.entries]
        if w.stage == IMPORT or w.stage == "startup":
            hit = [t for t in todo if w.plugin is None or self.owner.get(t) == w.plugin]
            row = self.rows.get(w.plugin)
            if row is not None:
                row.update(status=status, reason=why, hint=_hint(status, row.get("distribution") or w.plugin, hit))
        else:
            hit = [w.type] if w.type in todo else []
        hit = hit or todo  # whatever it was doing, the job does not come back
        for ty in hit:
            self._stop_entry(self.entries[ty], w, status, why)
        return set(hit)

    def _stop_entry(self, entry: dict, w, status: str, why: str) -> None:
        entry.update(status=status, reason=why, stage=w.stage, hint=_hint(status, entry["plugin"], [entry["type"]]))
        if w.stage not in _CHECK_NAMES:
            return
        done = {c["name"] for c in entry["checks"]}
        if w.stage not in done:
            failed_on = [w.device] if w.device else list(entry["devices"])
            entry["checks"].append({
                "name": w.stage, "status": status, "seconds": round(_elapsed(w), 6), "detail": why,
                "hint": entry["hint"], "metrics": {}, "devices": [], "failed_on": failed_on})
        for name, _, _ in CHECKS:
            if name not in done and name != w.stage:
                entry["checks"].append({"name": name, "status": SKIPPED, "seconds": 0.0, "hint": "", "metrics": {},
                                        "detail": f"not run: stage {w.stage!r} did not finish", "devices": [],
                                        "failed_on": []})

    # --- the end --------------------------------------------------------------------------
    def device_entries(self) -> dict:
        out = {}
        for ty, e in self.entries.items():
            if not e.pop("_drop", False):
                out[ty] = self._settle(e)
        return out

    def _settle(self, e: dict) -> dict:
        ops = sorted({op for c in e["checks"] for op in c["metrics"].get("cpu_fallback_ops", [])})
        e["fallback_ops"] = ops
        if e["status"] is None:
            failed = any(c["status"] in (FAILED, TIMED_OUT) for c in e["checks"])
            e["status"] = FAILED if failed or (self.no_fallback and ops) else PASSED
        if e["status"] == UNAVAILABLE and not e["requested"]:
            e["hint"] = f"{e['hint']} ({_NOT_REQUESTED})" if e["hint"] else _NOT_REQUESTED
        e["verdict"] = self._verdict(e)
        return e

    def _verdict(self, e: dict) -> str:
        ty, status, ops = e["type"], e["status"], e["fallback_ops"]
        failed = [c for c in e["checks"] if c["status"] in (FAILED, TIMED_OUT)]
        if status == UNAVAILABLE:
            return f"{ty} is installed but unavailable: {e['reason']}"
        if status == TIMED_OUT:
            return f"anydevice could not finish checking {ty}: {e['reason']}."
        if status == FAILED and not failed and not (self.no_fallback and ops):
            return f"anydevice could not check {ty}: {e['reason']}"
        parts = []
        if failed:
            names = ", ".join(c["name"] for c in failed)
            where = "; ".join(f"{c['name']} {'timed out' if c['status'] == TIMED_OUT else 'failed'} on "
                              f"{device_list(c['failed_on']) or ty}" for c in failed)
            parts.append(f"{len(failed)} of {len(e['checks'])} checks failed ({names}): {where}")
        if self.no_fallback and ops:
            parts.append(f"{plural(len(ops), 'op')} ran on the CPU fallback on {ty} (--no-fallback): {', '.join(ops)}")
        if parts:
            return f"anydevice does NOT work correctly on {ty}: " + "; ".join(parts) + "."
        verdict = f"anydevice works well on {plural(len(e['devices']), ty + ' device')}."
        left_out = [u for u in e["unusable"] if not u.get("kept_visible")]
        if left_out:
            verdict += (f" {plural(len(left_out), 'more device')} left out as unusable: "
                        + "; ".join(f"{u['device']}: {u['reason']}" for u in left_out) + ".")
        return verdict

    def plugin_rows(self) -> list:
        rows = list(self.rows.values())
        for r in rows:
            if r.get("output"):  # what the plugin manager kept of the plugin's prints while setting it up
                r["plugin_output"] = _truncate(r["output"] + r["plugin_output"])
            if r.get("hook_errors"):
                raised = "hooks raised: " + "; ".join(r["hook_errors"])
                r["reason"] = f"{r['reason']}; {raised}" if r.get("reason") else raised
        return rows


def _elapsed(w) -> float:
    import time

    return max(0.0, time.monotonic() - w.stage_started)


def _hint(status: str, plugin, types: list) -> str:
    ty = types[0] if types else "TYPE"
    if status == TIMED_OUT:
        return (f"a call into the plugin ({plugin}) blocked: if the device is only slow, run "
                f"`anydevice check --device {ty} --timeout 120`; otherwise report it to the plugin with the output "
                f"of `anydevice check --device {ty} --json`")
    return (f"the process checking {ty} died inside the plugin ({plugin}); report it to the plugin with the output "
            f"of `anydevice check --device {ty} --json` (plugin_output shows what it printed)")


def overall_verdict(devs: dict, failing: list) -> str:
    ok = [e for e in devs.values() if e["status"] == PASSED]
    if not devs:
        return "no device type was selected"
    if failing:
        return "anydevice has problems: " + " ".join(e["verdict"] for e in failing)
    parts = ", ".join(f"{plural(len(e['devices']), e['type'] + ' device')}" for e in ok)
    return f"anydevice works well on {parts}." if ok else "no device type could be checked"
