"""The report as tables: environment line, plugins, checks per device type, verdicts.

Cells stay short: a failure shows the first line of its detail (at most :data:`CELL_LINES`
lines of the column) and its hint; the rest is in ``--json``. Generated source or a compiler
log inside an error message therefore never floods the table.
"""
from __future__ import annotations

import re

from anydevice.tools.check.checks import FAILED, PASSED, SKIPPED, TIMED_OUT, UNAVAILABLE

CELL_LINES = 3
MORE = "… (full detail in --json)"
#: Unusable devices listed per type; more are counted.
UNUSABLE_ROWS = 3
_WHERE = re.compile(r" \(raised at [^()\n]*\)")
_LABEL = {TIMED_OUT: "timed out"}
_STYLE = {PASSED: "green", FAILED: "bold red", SKIPPED: "yellow", UNAVAILABLE: "dim", TIMED_OUT: "bold red",
          "unusable": "yellow", "loaded": "green", "failed": "bold red", "conflict": "bold red", "skipped": "yellow",
          "disabled": "dim", "discovered": "dim"}


def short(text: str, width: int, lines: int = CELL_LINES) -> str:
    """The first line of ``text`` within about ``lines`` lines of ``width`` columns, keeping where it was raised."""
    first, _, rest = text.strip().partition("\n")
    if not rest.strip() and len(first) <= width * lines:
        return first
    at = _WHERE.search(text)
    tail = at.group(0) if at and at.group(0) not in first else ""
    limit = width * lines - len(MORE) - 1
    if limit - len(tail) < 30:
        tail = ""
    return first[: max(limit - len(tail), 10)].rstrip() + tail + f" {MORE}"


def _status(s: str, T):
    return T(_LABEL.get(s, s), style=_STYLE.get(s, ""))


def render(report: dict, console=None) -> None:
    """Print the report as tables: environment, plugins, checks per device type, verdicts."""
    from rich.console import Console
    from rich.text import Text as T  # plain text cells: no markup, no emoji codes (":x:")

    c = console or Console()
    e = report["environment"]
    c.print(T(f"anydevice {e['anydevice']} (plugin API {e['plugin_api_version']}) · Python {e['python']} · "
              f"numpy {e['numpy']} · {e['platform']}", style="bold"))
    if e.get("dispatch_hit"):
        c.print(T(f"dispatch hit path: {e['dispatch_hit']}"))
    if e["env"]:
        c.print(T("environment: " + " ".join(f"{k}={v}" for k, v in e["env"].items())))
    width = max(30, c.width - 44)
    c.print(_plugins_table(report, width, T))
    c.print(_checks_table(report, width, T))
    if report.get("collectives"):
        c.print(T("collective backends:\n" + "\n".join(
            f"  {b['name']}: {'available' if b['available'] else 'unavailable'} ({b['detail']})"
            for b in report["collectives"])))
    if report.get("distributed"):
        c.print(_distributed_table(report["distributed"], width, T))
    for d in report["devices"].values():
        style = {PASSED: "green", FAILED: "bold red", TIMED_OUT: "bold red"}.get(
            d["status"], "red" if d["requested"] else "dim")
        c.print(T(short(d["verdict"], c.width, 4), style=style))
    c.print(T(f"checked in {report['seconds']:.1f} s; exit status {report['exit_code']}"))


def _plugins_table(report: dict, width: int, T):
    from rich.table import Table

    pt = Table(title="plugins", title_justify="left")
    for col in ("plugin", "version", "types", "status", "reason"):
        pt.add_column(col, overflow="fold")
    for p in report["plugins"]:
        reason = short(p["reason"], width, 3) + (f" → {short(p['hint'], width)}" if p["hint"] else "")
        if p.get("plugin_output"):
            reason += f" [printed {len(p['plugin_output'])} characters: plugin_output in --json]"
        pt.add_row(T(p["distribution"] or p["name"]), T(str(p["version"] or "")), T(", ".join(p["device_types"])),
                   _status(p["status"], T), T(reason))
    return pt


def _table(title: str, what: str, sections, T):
    """A table of ``(name, [(what, status, time, detail)])`` sections: type, what, result, time, detail."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col, kw in (("type", {}), (what, {}), ("result", {}), ("time", {"justify": "right"}),
                    ("detail", {"overflow": "fold"})):
        t.add_column(col, **kw)
    for i, (name, rows) in enumerate(sections):
        if i:
            t.add_section()
        for k, (item, status, ms, detail) in enumerate(rows):
            t.add_row(T(name if k == 0 else ""), item, _status(status, T), ms, T(detail))
    return t


def _checks_table(report: dict, width: int, T):
    return _table("checks", "check", ((d["type"], _type_rows(d, width)) for d in report["devices"].values()), T)


def _distributed_table(dist: dict, width: int, T):
    """One row per device type and stage of ``--distributed``: status, time, what it measured."""
    def rows(d):
        out = [(s["name"], s["status"], f"{s['seconds'] * 1e3:.0f} ms", s["detail"] or _stage_cell(s))
               for s in d["stages"]]
        if d["status"] != PASSED or not out:
            out.append(("job", d["status"], f"{d['seconds'] * 1e3:.0f} ms", short(d["detail"], width, 4)))
        return out

    sections = ((f"{d['type']} ({d['communicator']})" if d["communicator"] else d["type"], rows(d))
                for d in dist["types"].values())
    return _table(f"distributed: {dist['world_size']} processes per device type", "stage", sections, T)


def _stage_cell(s: dict) -> str:
    m = s["metrics"]
    if s["name"] == "barrier":
        return f"{m['latency_us']:.0f} us per barrier"
    if s["name"] == "all_reduce":
        return f"sum and max correct for {', '.join(m['dtypes'])}"
    if s["name"] == "bandwidth":
        return "; ".join(f"{_size(r['bytes'])}: {r['seconds'] * 1e6:.0f} us, algbw {r['algbw_gbps']:.3f} GB/s, "
                         f"busbw {r['busbw_gbps']:.3f} GB/s" for r in m["sizes"])
    return f"{m.get('world_size')} ranks, rank 0 on {m.get('device')}"


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def _type_rows(d: dict, width: int) -> list:
    """``(check, status, time, detail)`` rows of one device type."""
    if d["status"] == UNAVAILABLE or not d["checks"]:
        tail = f"\n→ {short(d['hint'], width)}" if d["hint"] else ""
        status = d["status"] if d["status"] in (UNAVAILABLE, TIMED_OUT) or d["requested"] else UNAVAILABLE
        rows = [("", status, "", short(d["reason"], width, 3) + tail)]
    else:
        rows, seen, hints = [], {}, set()
        for chk in d["checks"]:
            detail = _check_cell(chk, width, hints)
            if chk["status"] in (FAILED, TIMED_OUT) and detail in seen:
                detail = f"same error as {seen[detail]}"
            elif chk["status"] in (FAILED, TIMED_OUT):
                seen[detail] = chk["name"]
            rows.append((chk["name"], chk["status"], f"{chk['seconds'] * 1e3:.0f} ms", detail))
    rows += _unusable_rows(d, width)
    if d.get("fallback_ops") and d["status"] == FAILED and "--no-fallback" in d["verdict"]:
        rows.append(("fallback", FAILED, "", short("ran on the CPU fallback (--no-fallback): "
                                                   + ", ".join(d["fallback_ops"]), width, 3)))
    if d.get("plugin_output"):
        rows.append(("output", "", "", f"the plugin printed {len(d['plugin_output'])} characters "
                                       "(plugin_output in --json)"))
    return rows


def _check_cell(chk: dict, width: int, hints: set) -> str:
    """A check's detail; a failure's hint only the first time it comes up for the type."""
    if chk["status"] not in (FAILED, TIMED_OUT):
        return short(chk["detail"], width, 4)
    hint = "" if not chk["hint"] or chk["hint"] in hints else f"\n→ {short(chk['hint'], width, 4)}"
    hints.add(chk["hint"])
    return short(chk["detail"], width) + hint


def _unusable_rows(d: dict, width: int) -> list:
    unusable = d.get("unusable") or []
    rows = [("unusable", "unusable", "", short(f"{u['device']}: {u['reason']}", width)
             + (f"\n→ {short(u['hint'], width)}" if u["hint"] else "")) for u in unusable[:UNUSABLE_ROWS]]
    if len(unusable) > UNUSABLE_ROWS:
        rows.append(("unusable", "unusable", "", f"and {len(unusable) - UNUSABLE_ROWS} more {MORE}"))
    return rows
