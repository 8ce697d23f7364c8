"""``anydevice conformance``: run the suite against devices and print a summary.

Exit status: 0 when every case passes (unsupported dtypes are not failures), 1 when a case
fails or, with ``--no-fallback``, an op ran through the CPU fallback, 2 for a usage error
(unknown device, op, dtype or check).
"""
from __future__ import annotations

import argparse
import sys


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="anydevice conformance",
        description="Check devices against the op registry: result dtypes and shapes, values against the "
                    "reference, gradients against finite differences, error parity with the cpu, and the "
                    "execution path (native, decomposed, fallback) of every op.",
    )
    p.add_argument("--device", "-d", action="append", metavar="DEVICE",
                   help="device to check: a type (npu: one device of each distinct model of the type), one "
                        "device (npu:1), or 'all' (every distinct model of every available type); repeatable; "
                        "default: cpu")
    p.add_argument("--op", action="append", metavar="NAME", help="only this op (repeatable)")
    p.add_argument("--dtype", action="append", metavar="NAME", help="only this dtype (repeatable)")
    p.add_argument("--check", action="append", metavar="NAME",
                   help="only this check: dtype, shape, values, grad, errors (repeatable)")
    p.add_argument("--no-fallback", action="store_true",
                   help="fail the run when any op runs through the CPU fallback on a tested device")
    p.add_argument("--compile", action="store_true",
                   help="run every sample through anydevice.jit.compile (traced once, the result from a replay of "
                        "the graph) and compare that with the reference")
    p.add_argument("--json", metavar="PATH", help="write the JSON report here")
    p.add_argument("--html", metavar="PATH", help="write the HTML report here")
    p.add_argument("--max-failures", type=int, default=25, metavar="N",
                   help="failing cases listed on the terminal (default 25; all are in the reports)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    from rich.console import Console

    from . import suite

    console = Console(stderr=False, highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, 120)  # logs and pipes: keep the summary table readable
    err = Console(stderr=True, highlight=False)
    try:
        targets = suite.resolve_targets(args.device or ["cpu"])
        ops = suite.resolve_ops(args.op)
        suite.resolve_dtypes(args.dtype)
        suite.resolve_checks(args.check)
    except (ValueError, TypeError) as e:
        err.print(f"[red]anydevice conformance:[/red] {_esc(e)}", markup=True)
        return 2
    except Exception as e:  # noqa: BLE001 - e.g. DeviceUnavailableError
        err.print(f"[red]anydevice conformance:[/red] {type(e).__name__}: {_esc(e)}", markup=True)
        return 2

    report = _run_with_progress(len(targets), ops, args, err)
    _print_summary(console, report, args.max_failures)
    if args.json:
        report.write_json(args.json)
        console.print(f"JSON report: {args.json}")
    if args.html:
        report.write_html(args.html)
        console.print(f"HTML report: {args.html}")
    return 0 if report.ok else 1


def _esc(e) -> str:
    from rich.markup import escape

    return escape(str(e))


def _run_with_progress(n_devices, ops, args, err):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from . import suite

    total = n_devices * len(ops)
    show = not args.quiet and err.is_terminal
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True, disable=not show) as bar:
        task = bar.add_task("conformance", total=total)
        state = {"n": 0}

        def progress(device, op):
            if state["n"]:
                bar.advance(task)
            state["n"] += 1
            bar.update(task, description=f"{device} {op:<20}")

        report = suite.run(devices=args.device or ["cpu"], ops=[o.name for o in ops], dtypes=args.dtype,
                           checks=args.check, progress=progress, no_fallback=args.no_fallback, compile=args.compile)
        bar.advance(task)
    return report


def _print_summary(console, report, max_failures: int) -> None:
    from rich.markup import escape
    from rich.table import Table

    from .runner import FAIL, PASS, SKIPPED, UNSUPPORTED

    t = Table(title=f"anydevice conformance ({report.anydevice_version}): cases, and ops by path",
              title_justify="left")
    for col in ("device", "devices", "pass", "fail", "unsupported", "skipped", "native", "decomposed", "fallback",
                "failing ops", "time"):
        t.add_column(col, justify="left" if col == "device" else "right")
    for d in report.devices:
        c, p = report.counts(d["device"]), report.paths(d["device"])
        t.add_row(d["device"], str(len(report.stands_for(d["device"]))), str(c[PASS]), f"[red]{c[FAIL]}[/red]" if c[FAIL] else "0",
                  str(c[UNSUPPORTED]), str(c[SKIPPED]), str(p["native"]), str(p["decomposed"]), str(p["fallback"]),
                  str(p["fail"]), f"{d.get('seconds', 0):.1f} s")
    console.print(t)
    _print_not_tested(console, report)
    fails = report.failures()
    for c in fails[:max_failures]:
        console.print(f"[red]FAIL[/red] {escape(c.id)} [dim](path {c.path or '-'})[/dim]: {escape(c.message)}", markup=True,
                      highlight=False, soft_wrap=True)
    if len(fails) > max_failures:
        console.print(f"... and {len(fails) - max_failures} more failing case(s); see --json or --html")
    if report.no_fallback:
        for f in report.fallbacks():
            console.print(f"[red]FALLBACK[/red] {escape(f['device'])} {escape(f['op'])} ran on the CPU "
                          f"({escape(', '.join(f['dtypes']))})", markup=True, highlight=False, soft_wrap=True)
    color = "green" if report.ok else "red"
    console.print(f"{len(report.cases)} cases in {report.seconds:.1f} s: [{color}]{escape(report.verdict())}[/{color}]",
                  markup=True)


def _print_not_tested(console, report) -> None:
    from rich.markup import escape

    for d in report.devices:
        if len(report.stands_for(d["device"])) > 1:
            console.print(escape(report.label(d["device"])), highlight=False, soft_wrap=True)

    for u in report.unusable:
        kept = "kept visible, tested" if u.get("kept_visible") else "not tested"
        hint = f" ({u['hint']})" if u.get("hint") else ""
        console.print(f"[yellow]UNUSABLE[/yellow] {escape(u['type'])} physical device {u['physical_index']} ({kept}): "
                      f"{escape(u['reason'] + hint)}", markup=True, highlight=False, soft_wrap=True)
    for u in report.unavailable:
        console.print(f"[dim]not available: {escape(u['reason'])}[/dim]", markup=True, highlight=False, soft_wrap=True)


if __name__ == "__main__":
    sys.exit(main())
