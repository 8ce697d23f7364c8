"""The ``anydevice`` command: ``check`` (health report), ``conformance`` (numerical parity),
``bench`` (side-by-side benchmarks), ``plugins`` (what was discovered)."""
from __future__ import annotations

import contextlib
import importlib
import os
import sys

_COMMANDS = {
    "check": ("anydevice.tools.check", "health diagnostics for every installed backend"),
    "conformance": ("anydevice_conformance.cli", "run the conformance suite against devices"),
    "bench": ("anydevice.tools.bench", "benchmarks printed side by side"),
    "plugins": ("anydevice.tools.cli", "list discovered backend plugins and their status"),
    "launch": ("anydevice.tools.launch", "run a script as N processes per node (data-parallel training)"),
}


def _usage() -> str:
    lines = ["usage: anydevice <command> [options]", "", "commands:"]
    lines += [f"  {name:<12} {doc}" for name, (_, doc) in _COMMANDS.items()]
    lines += ["", "Run 'anydevice <command> --help' for a command's options."]
    return "\n".join(lines)


def plugins_main(argv) -> int:
    """``anydevice plugins [--json]``: every discovered plugin; per device type its status, reason,
    hint and the devices its probe rejected; what the plugin printed while loading."""
    import json

    if "--json" in argv:
        with _stdout_to_stderr():   # nothing but the JSON document goes to stdout
            report = _plugin_report()
        print(json.dumps(report, indent=2))
        return 0
    for r in _plugin_report():
        print(_plugin_text(r))
    return 0


def _plugin_report() -> list:
    from anydevice.runtime import devices as _backend
    from anydevice.runtime.plugins import LOADED, READY, UNAVAILABLE, manager

    manager.load_all()
    out = []
    for rec in list(manager.records):
        for t in rec.types:
            if rec.type_status.get(t, ("",))[0] in (LOADED, READY, UNAVAILABLE):
                _backend.unavailable_reason(t)   # sets the type up, so its status is final
        d = rec.as_dict()
        for t, entry in d["type_status"].items():
            entry["unusable_devices"] = [u.as_dict() for u in _backend.unusable_devices(t)] if t in rec.types else []
        out.append(d)
    return out


def _plugin_text(r: dict) -> str:
    title = " ".join(filter(None, [r["distribution"] or r["name"], r["version"]]))
    lines = [f"{title} ({r['module'] or 'no module'}): {r['status']}"]
    if r["reason"] and not r["type_status"]:
        lines.append(f"  {r['reason']}")
    for t, e in r["type_status"].items():
        lines.append(f"  {t:<10} {e['status']:<12} {e['reason']}".rstrip())
        if e["hint"]:
            lines.append(f"  {'':<10} {'':<12} hint: {e['hint']}")
        for u in e["unusable_devices"]:
            kept = ", kept visible" if u["kept_visible"] else ""
            hint = f" (hint: {u['hint']})" if u["hint"] else ""
            lines.append(f"  {'':<10} unusable physical device {u['physical_index']}{kept}: {u['reason']}{hint}")
    for a, e in r["aliases"].items():
        lines.append(f"  alias {a} -> {e['type']}: {e['status']} {e['reason']}".rstrip())
    if r["output"].strip():
        lines.append("  printed while loading:")
        lines += [f"    | {line}" for line in r["output"].rstrip().splitlines()]
    return "\n".join(lines)


@contextlib.contextmanager
def _stdout_to_stderr():
    """Send what is written to stdout, by Python code or by native vendor libraries, to stderr."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd not in _COMMANDS:
        import difflib

        close = difflib.get_close_matches(cmd, _COMMANDS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        print(f"anydevice: unknown command {cmd!r}.{hint}\n\n{_usage()}", file=sys.stderr)
        return 2
    if cmd == "plugins":
        return plugins_main(rest)
    mod = importlib.import_module(_COMMANDS[cmd][0])
    return int(mod.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
