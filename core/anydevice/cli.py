"""The ``anydevice`` command: ``check`` (health report), ``conformance`` (numerical parity),
``bench`` (side-by-side benchmarks), ``plugins`` (what was discovered)."""
from __future__ import annotations

import importlib
import sys

_COMMANDS = {
    "check": ("anydevice.check", "health diagnostics for every installed backend"),
    "conformance": ("anydevice_conformance.cli", "run the conformance suite against devices"),
    "bench": ("anydevice.bench", "benchmarks printed side by side"),
    "plugins": ("anydevice.cli", "list discovered backend plugins and their status"),
}


def _usage() -> str:
    lines = ["usage: anydevice <command> [options]", "", "commands:"]
    lines += [f"  {name:<12} {doc}" for name, (_, doc) in _COMMANDS.items()]
    lines += ["", "Run 'anydevice <command> --help' for a command's options."]
    return "\n".join(lines)


def plugins_main(argv) -> int:
    import json

    from .plugins.manager import manager

    manager.load_all()
    recs = [r.as_dict() for r in manager.records]
    if "--json" in argv:
        print(json.dumps(recs, indent=2))
    else:
        for r in recs:
            print(f"{r['name']:<32} {','.join(r['device_types']):<16} {r['status']:<10} {r['reason']}")
    return 0


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
