"""``--device`` values → the device types (and indices) to check, without importing any plugin.

Type names come from the plugins' entry-point names. Aliases (``gpu``) are declared by the
plugins themselves, so a name that is no type is looked up by one worker that loads every
plugin (``aliases``); indices are checked by the type's worker, which knows the device count.
"""
from __future__ import annotations

import difflib
import re

_SPEC = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?::\s*(\d+)\s*)?$")


def default_types() -> list:
    """Every installed device type, cpu first."""
    from anydevice.runtime.plugins import manager

    manager.discover()
    return sorted(manager.by_type, key=lambda t: (t != "cpu", t))


def select(devices, aliases) -> tuple[dict, dict]:
    """Resolve ``--device`` specs to ``{type: None (all) or [[spec, index], ...]}`` plus ``{spec: error}``.

    ``aliases()`` returns the plugins' aliases ``{alias: type}``; it is called only for a name that
    is not a device type.
    """
    if not devices:
        return {t: None for t in default_types()}, {}
    chosen: dict = {}
    errors: dict = {}
    for spec in (s.strip() for item in devices for s in str(item).split(",")):
        if not spec:
            continue
        m = _SPEC.match(spec)
        if m is None:
            errors[spec] = (f"invalid device {spec!r}: expected TYPE or TYPE:INDEX with a non-negative integer index, "
                            "e.g. 'npu' or 'npu:1'")
            continue
        canon, error = _resolve(m.group(1).lower(), aliases)
        if canon is None:
            errors[spec] = error
        elif m.group(2) is None:
            chosen[canon] = None
        elif chosen.get(canon, []) is not None:
            chosen.setdefault(canon, []).append([spec, int(m.group(2))])
    return chosen, errors


def _resolve(name: str, aliases) -> tuple[str | None, str]:
    from anydevice.runtime.plugins import manager

    manager.discover()
    if name in manager.by_type:
        return name, ""
    contest = getattr(manager, "contested", {}).get(name)
    if contest is not None:
        return None, f"{contest.reason} ({contest.hint})"
    known = dict(manager.aliases)
    if name not in known:
        known.update(aliases())
    if name in known and known[name] in manager.by_type:
        return known[name], ""
    types = sorted(manager.by_type)
    msg = f"unknown device type {name!r}. Installed device types: {', '.join(types) or 'none'}"
    if known:
        msg += " (aliases: " + ", ".join(f"{a} -> {t}" for a, t in sorted(known.items())) + ")"
    close = difflib.get_close_matches(name, types + list(known), n=1)
    if close:
        msg += f". Did you mean {close[0]!r}?"
    return None, msg
