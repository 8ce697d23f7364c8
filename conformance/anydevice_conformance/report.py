"""The result of a run: JSON with a stable schema, and a self-contained HTML page."""
from __future__ import annotations

import collections
import datetime
import html
import json

from . import SCHEMA_VERSION
from .runner import ANY_DTYPE, FAIL, FORWARD_CHECKS, PASS, SKIPPED, UNSUPPORTED, CaseResult, SampleResult

#: Cell states of the op × device matrix, most severe first.
CELL_STATES = ("fail", "fallback", "decomposed", "native", "pass", "unsupported dtype")
COLORS = {
    "native": "#2e9e5b", "decomposed": "#2f7fd1", "fallback": "#e0a100", "fail": "#d64541",
    "unsupported dtype": "#b9bec6", "pass": "#7bbf8e", "skipped": "#9aa3ad",
}
LEGEND = {
    "native": "every supported dtype passes on the device's own kernel",
    "decomposed": "passes, built from other native ops (the op's decomposition)",
    "fallback": "passes, but runs on the cpu (inputs copied to the host and back)",
    "fail": "at least one check fails: click the cell for the failing cases",
    "unsupported dtype": "the device supports none of the op's dtypes",
}


def _version() -> str:
    try:
        import anydevice

        return anydevice.__version__
    except Exception:  # noqa: BLE001
        return "unknown"


class Report:
    """All cases of one run, with summaries and writers."""

    def __init__(self, cases, devices, started=None, seconds=0.0, selection=None, anydevice_version=None,
                 unusable=(), unavailable=(), no_fallback=False):
        self.cases: list[CaseResult] = list(cases)
        self.devices: list[dict] = list(devices)
        self.started = started
        self.seconds = seconds
        self.selection = selection or {}
        self.anydevice_version = anydevice_version or _version()
        self.unusable: list[dict] = list(unusable)          # devices a probe rejected: not tested
        self.unavailable: list[dict] = list(unavailable)    # device types that cannot be used here
        self.no_fallback = no_fallback                      # a CPU fallback fails the run

    # --- queries --------------------------------------------------------------------------
    @property
    def ok(self) -> bool:
        """True when no case failed (unsupported dtypes are not failures) and, with
        ``no_fallback``, no op ran through the CPU fallback."""
        return self.cases_ok and not (self.no_fallback and self.fallbacks())

    @property
    def cases_ok(self) -> bool:
        return not any(c.status == FAIL for c in self.cases)

    def fallbacks(self) -> list:
        """``[{"device", "op", "dtypes"}]``: ops whose forward checks ran through the CPU fallback."""
        by = {}
        for c in self.cases:
            if c.path == "fallback" and c.check in FORWARD_CHECKS:
                dts = by.setdefault((c.device, c.op), [])
                if c.dtype not in dts:
                    dts.append(c.dtype)
        return [{"device": d, "op": o, "dtypes": dts} for (d, o), dts in by.items()]

    def verdict(self) -> str:
        """``all cases pass``, or what failed: cases, and (with ``no_fallback``) ops on the CPU."""
        bad = []
        if not self.cases_ok:
            bad.append(f"{len(self.failures())} failing case(s)")
        fb = self.fallbacks() if self.no_fallback else []
        if fb:
            ops, devs = {f["op"] for f in fb}, {f["device"] for f in fb}
            bad.append(f"{len(ops)} op(s) ran through the CPU fallback on {len(devs)} device(s) (no-fallback)")
        return "; ".join(bad) or ("all cases pass" + (", no CPU fallback" if self.no_fallback else ""))

    def stands_for(self, device: str) -> list:
        """The devices the row of ``device`` stands for (identical models tested once)."""
        info = next((d for d in self.devices if d["device"] == device), {})
        return list(info.get("stands_for") or [device])

    def label(self, device: str) -> str:
        """``npu:0``, or ``opencl:1 (stands for opencl:1, opencl:3)`` when it stands for others."""
        members = self.stands_for(device)
        return device if members == [device] else f"{device} (stands for {span(members)})"

    def failures(self) -> list:
        return [c for c in self.cases if c.status == FAIL]

    def find(self, op=None, device=None, dtype=None, check=None, status=None) -> list:
        return [c for c in self.cases if (op is None or c.op == op) and (device is None or c.device == device)
                and (dtype is None or c.dtype == dtype) and (check is None or c.check == check)
                and (status is None or c.status == status)]

    def counts(self, device=None) -> dict:
        """``{status: n}`` over all cases (of one device)."""
        c = collections.Counter(x.status for x in self.cases if device is None or x.device == device)
        return {s: c.get(s, 0) for s in (PASS, FAIL, UNSUPPORTED, SKIPPED)}

    def ops(self) -> list:
        return list(dict.fromkeys(c.op for c in self.cases))

    def cell(self, op: str, device: str) -> str:
        """The matrix state of ``op`` on ``device``: fail, a path, pass or unsupported dtype."""
        cs = [c for c in self.cases if c.op == op and c.device == device]
        return _cell_state(cs)

    def paths(self, device: str) -> dict:
        """``{state: number of ops}`` for one device (the matrix column totals)."""
        by_op = collections.defaultdict(list)
        for c in self.cases:
            if c.device == device:
                by_op[c.op].append(c)
        n = collections.Counter(_cell_state(cs) for cs in by_op.values())
        return {s: n.get(s, 0) for s in CELL_STATES}

    # --- JSON -----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "anydevice_version": self.anydevice_version,
            "created": datetime.datetime.fromtimestamp(self.started or 0, datetime.timezone.utc).isoformat(),
            "seconds": round(self.seconds, 3),
            "selection": self.selection,
            "devices": [dict(d, counts=self.counts(d["device"]), ops=self.paths(d["device"])) for d in self.devices],
            "ok": self.ok,
            "no_fallback": self.no_fallback,
            "fallbacks": self.fallbacks(),
            "unusable": self.unusable,
            "unavailable": self.unavailable,
            "cases": [_case_dict(c) for c in self.cases],
        }

    def to_json(self) -> str:
        """The report as JSON: one top-level field per line, one case per line (fast to write and to diff)."""
        d = self.to_dict()
        cases = d.pop("cases")
        lines = [f" {json.dumps(k)}: {json.dumps(v, default=str)}," for k, v in d.items()]
        body = ",\n".join(json.dumps(c, default=str) for c in cases)
        return "{\n" + "\n".join(lines) + f'\n "cases": [\n{body}\n ]\n}}\n'


    def write_json(self, path) -> None:
        _parent(path)
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_json())

    @classmethod
    def from_dict(cls, d: dict) -> Report:
        cases = []
        for c in d["cases"]:
            c = dict(c)
            c.pop("id", None)
            c["samples"] = [SampleResult(**s) for s in c.get("samples", [])]
            cases.append(CaseResult(**c))
        devices = [{k: v for k, v in x.items() if k not in ("counts", "ops")} for x in d["devices"]]
        started = datetime.datetime.fromisoformat(d["created"]).timestamp()
        return cls(cases, devices, started, d.get("seconds", 0.0), d.get("selection"), d.get("anydevice_version"),
                   d.get("unusable", ()), d.get("unavailable", ()), d.get("no_fallback", False))

    @classmethod
    def read_json(cls, path) -> Report:
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))

    # --- HTML -----------------------------------------------------------------------------
    def to_html(self) -> str:
        return _html(self)

    def write_html(self, path) -> None:
        _parent(path)
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_html())

    def __repr__(self) -> str:
        c = self.counts()
        return f"<Report {len(self.cases)} cases on {len(self.devices)} device(s): {c[PASS]} pass, {c[FAIL]} fail>"


def span(members) -> str:
    """``npu:0..npu:7`` for runs of three or more consecutive indices, else the list."""
    parts, run = [], []
    for m in list(members) + [None]:
        if m is not None and run and m == _successor(run[-1]):
            run.append(m)
            continue
        parts += [f"{run[0]}..{run[-1]}"] if len(run) >= 3 else run
        run = [m]
    return ", ".join(parts)


def _successor(device: str) -> str:
    t, _, i = device.rpartition(":")
    return f"{t}:{int(i) + 1}" if i.isdigit() else ""


def _case_dict(c: CaseResult) -> dict:
    d = c.to_dict()
    d["seconds"] = round(d["seconds"], 5)
    return d


def _cell_state(cs) -> str:
    if not cs:
        return "unsupported dtype"
    if any(c.status == FAIL for c in cs):
        return "fail"
    real = [c for c in cs if c.dtype != ANY_DTYPE]
    if real and all(c.status == UNSUPPORTED for c in real):
        return "unsupported dtype"
    paths = {c.path for c in real if c.status == PASS and c.check in FORWARD_CHECKS}
    for p in ("fallback", "decomposed", "native"):
        if p in paths:
            return p
    return "pass"


# --- the page -------------------------------------------------------------------------------------
_CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d2329;background:#fafbfc}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
.meta{color:#5c6670;margin-bottom:12px}.ok{color:#2e9e5b;font-weight:600}.bad{color:#d64541;font-weight:600}
table{border-collapse:collapse;background:#fff}th,td{border:1px solid #dde1e5;padding:4px 8px;text-align:left}
th{background:#f1f3f5;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
.legend span.sw{display:inline-block;width:14px;height:14px;border-radius:3px;vertical-align:-2px;margin-right:6px}
.legend div{margin:3px 0}
.matrix td.cell{min-width:120px;color:#fff;font-weight:600;cursor:default;white-space:nowrap;padding:3px 6px}
.matrix td.cell .chips{display:block;line-height:8px;margin-top:1px}
.matrix td.cell a{color:#fff;text-decoration:underline}
.matrix td.op{font-family:ui-monospace,Menlo,Consolas,monospace}.matrix td.cat{color:#5c6670}
.chip{display:inline-block;width:6px;height:6px;margin-right:1px;border-radius:1px;border:1px solid rgba(0,0,0,.28)}
.controls{margin:8px 0}.controls input[type=text]{padding:4px 8px;width:220px}
details{background:#fff;border:1px solid #dde1e5;border-left:4px solid #d64541;margin:6px 0;padding:6px 10px}
details summary{cursor:pointer}details code,td code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
.msg{white-space:pre-wrap;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
tr.hidden,details.hidden{display:none}
"""

_JS = """
function applyFilter(){
  var q=document.getElementById('q').value.toLowerCase(), only=document.getElementById('onlyfail').checked;
  document.querySelectorAll('.matrix tbody tr').forEach(function(r){
    var hit=r.dataset.op.indexOf(q)>=0 && (!only || r.dataset.fail==='1');
    r.classList.toggle('hidden',!hit);});
}
function openCases(key){
  document.querySelectorAll('details[data-key="'+key+'"]').forEach(function(d){d.open=true;});
}
document.addEventListener('DOMContentLoaded',function(){
  document.getElementById('q').addEventListener('input',applyFilter);
  document.getElementById('onlyfail').addEventListener('change',applyFilter);
  document.querySelectorAll('a[data-key]').forEach(function(a){a.addEventListener('click',function(){openCases(a.dataset.key);});});
  if(location.hash){openCases(decodeURIComponent(location.hash.slice(1)));}
});
"""


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _err(v) -> str:
    return "" if v is None else f"{v:.3g}"


def _key(op, dev) -> str:
    return f"{op}@{dev}".replace(":", "_")


def _html(r: Report) -> str:
    from anydevice.ops.registry import get_op

    devs = [d["device"] for d in r.devices]
    ok = r.ok
    created = datetime.datetime.fromtimestamp(r.started or 0).strftime("%Y-%m-%d %H:%M:%S")
    out = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
           "<title>anydevice conformance report</title>", f"<style>{_CSS}</style><script>{_JS}</script></head><body>",
           "<h1>anydevice conformance report</h1>",
           f"<div class='meta'>anydevice {_e(r.anydevice_version)} &middot; {_e(created)} &middot; "
           f"{len(r.cases)} cases in {r.seconds:.1f} s &middot; "
           + f"<span class='{'ok' if ok else 'bad'}'>{_e(r.verdict())}</span></div>"]

    # totals per device
    out.append("<h2>Totals per device</h2><table><tr><th>device</th><th>stands for</th><th>model</th>"
               "<th>plugin</th><th>native kernels</th>"
               "<th>pass</th><th>fail</th><th>unsupported dtype</th><th>skipped</th>"
               "<th>ops native</th><th>decomposed</th><th>fallback</th><th>failing ops</th><th>time</th></tr>")
    for d in r.devices:
        c, p = r.counts(d["device"]), r.paths(d["device"])
        out.append(
            f"<tr><td><b>{_e(d['device'])}</b></td><td>{_e(span(r.stands_for(d['device'])))}</td>"
            f"<td>{_e(model_text(d.get('model')))} &middot; {len(d.get('dtypes') or ())} dtypes</td><td>{_e(d.get('plugin'))} {_e(d.get('plugin_version') or '')}</td>"
            f"<td class='num'>{d.get('native_ops', '')}</td><td class='num'>{c[PASS]}</td>"
            f"<td class='num'>{c[FAIL]}</td><td class='num'>{c[UNSUPPORTED]}</td><td class='num'>{c[SKIPPED]}</td>"
            f"<td class='num'>{p['native']}</td><td class='num'>{p['decomposed']}</td><td class='num'>{p['fallback']}</td>"
            f"<td class='num'>{p['fail']}</td><td class='num'>{d.get('seconds', 0):.1f} s</td></tr>")
    out.append("</table>")
    out += _html_not_tested(r) + _html_fallbacks(r)

    # legend
    out.append("<h2>Legend</h2><div class='legend'>")
    for k, text in LEGEND.items():
        out.append(f"<div><span class='sw' style='background:{COLORS[k]}'></span><b>{_e(k)}</b> &mdash; {_e(text)}</div>")
    out.append("<div>Small squares under a cell's label: one per dtype the op takes, colored the same way "
               "(hover for the dtype).</div></div>")

    # matrix
    by = collections.defaultdict(list)
    for c in r.cases:
        by[(c.op, c.device)].append(c)
    out.append("<h2>Op &times; device</h2><div class='controls'><input id='q' type='text' placeholder='filter ops'> "
               "<label><input id='onlyfail' type='checkbox'> only failing ops</label></div>")
    out.append("<table class='matrix'><thead><tr><th>op</th><th>category</th>"
               + "".join(f"<th title='{_e(r.label(d))}'>{_e(d)}</th>" for d in devs) + "</tr></thead><tbody>")
    for op in r.ops():
        try:
            cat = get_op(op).category
        except KeyError:
            cat = ""
        states = {d: _cell_state(by[(op, d)]) for d in devs}
        anyfail = any(s == "fail" for s in states.values())
        row = [f"<tr data-op='{_e(op)}' data-fail='{1 if anyfail else 0}'><td class='op'>{_e(op)}</td><td class='cat'>{_e(cat)}</td>"]
        for d in devs:
            st = states[d]
            chips = "".join(_chip(dt, cs) for dt, cs in _by_dtype(by[(op, d)]))
            label = _e(st)
            if st == "fail":
                nf = sum(1 for c in by[(op, d)] if c.status == FAIL)
                label = f"<a href='#{_e(_key(op, d))}' data-key='{_e(_key(op, d))}'>fail ({nf})</a>"
            row.append(f"<td class='cell' style='background:{COLORS.get(st, '#888')}'>{label}<span class='chips'>{chips}</span></td>")
        out.append("".join(row) + "</tr>")
    out.append("</tbody></table>")

    # drill-down
    fails = r.failures()
    out.append(f"<h2>Failing cases ({len(fails)})</h2>")
    if not fails:
        out.append("<p>None.</p>")
    seen = set()
    for c in fails:
        key = _key(c.op, c.device)
        anchor = "" if key in seen else f" id='{_e(key)}'"
        seen.add(key)
        out.append(f"<details{anchor} data-key='{_e(key)}'><summary><b>{_e(c.op)}</b> &middot; {_e(c.device)} &middot; "
                   f"{_e(c.dtype)} &middot; <b>{_e(c.check)}</b> &middot; path {_e(c.path or '-')} &mdash; "
                   f"<span class='msg'>{_e(c.message[:300])}</span></summary>")
        out.append(f"<p>case id <code>{_e(c.id)}</code> &middot; input shapes <code>{_e(c.input_shapes)}</code> &middot; "
                   f"max abs err {_err(c.max_abs_err) or '-'} &middot; max rel err {_err(c.max_rel_err) or '-'}</p>")
        out.append("<table><tr><th>sample</th><th>input shapes</th><th>status</th><th>max abs err</th>"
                   "<th>max rel err</th><th>message</th></tr>")
        for s in c.samples:
            if s.status == PASS:
                continue
            out.append(f"<tr><td>{_e(s.desc)}</td><td><code>{_e(s.input_shapes)}</code></td><td>{_e(s.status)}</td>"
                       f"<td class='num'>{_err(s.max_abs_err)}</td><td class='num'>{_err(s.max_rel_err)}</td>"
                       f"<td class='msg'>{_e(s.message)}</td></tr>")
        out.append("</table></details>")
    out.append("</body></html>")
    return "\n".join(out)


def _html_not_tested(r: Report) -> list:
    if not r.unusable and not r.unavailable:
        return []
    out = ["<h2>Devices not tested</h2><table><tr><th>device</th><th>reason</th><th>hint</th></tr>"]
    for u in r.unusable:
        where = f"{u['type']} physical device {u['physical_index']}" + (" (kept visible)" if u.get("kept_visible") else "")
        out.append(f"<tr><td>{_e(where)}</td><td class='msg'>{_e(u['reason'])}</td><td>{_e(u.get('hint', ''))}</td></tr>")
    for u in r.unavailable:
        out.append(f"<tr><td>{_e(u['type'])} (every device)</td><td class='msg'>{_e(u['reason'])}</td>"
                   f"<td>{_e(u.get('hint', ''))}</td></tr>")
    out.append("</table>")
    return out


def _html_fallbacks(r: Report) -> list:
    fb = r.fallbacks()
    if not fb:
        return []
    gate = " &mdash; <span class='bad'>not allowed (no-fallback)</span>" if r.no_fallback else ""
    out = [f"<h2>CPU fallbacks ({len({f['op'] for f in fb})} op(s)){gate}</h2><table><tr><th>device</th><th>op</th><th>dtypes</th></tr>"]
    for f in fb:
        out.append(f"<tr><td>{_e(f['device'])}</td><td><code>{_e(f['op'])}</code></td><td>{_e(', '.join(f['dtypes']))}</td></tr>")
    out.append("</table>")
    return out


def model_text(model) -> str:
    """One line for a device's identity properties: the model or name first, then ``key value`` pairs."""
    if not model:
        return ""
    first = model.get("model") or model.get("name") or ""
    rest = [f"{k} {v}" for k, v in model.items() if v is not None and v != first]
    return " · ".join([str(first)] * bool(first) + rest)


def _by_dtype(cases):
    groups = collections.OrderedDict()
    for c in cases:
        if c.dtype != ANY_DTYPE:
            groups.setdefault(c.dtype, []).append(c)
    return groups.items()


def _chip(dtype, cases) -> str:
    st = _cell_state(cases)
    return f"<span class='chip' title='{_e(dtype)}: {_e(st)}' style='background:{COLORS.get(st, '#888')}'></span>"


def _parent(path) -> None:
    """Create the folder a report is written into."""
    import os

    folder = os.path.dirname(os.fspath(path))
    if folder:
        os.makedirs(folder, exist_ok=True)
