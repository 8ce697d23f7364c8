"""``anydevice conformance``: run the suite against devices and print a summary.

Exit status: 0 when every case passes (unsupported dtypes are not failures), 1 when a case
fails, 2 for a usage error (unknown device, op, dtype or check).
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
                   help="device to check, e.g. npu or npu:1 (repeatable; 'all' = every available device type; "
                        "default: cpu)")
    p.add_argument("--op", action="append", metavar="NAME", help="only this op (repeatable)")
    p.add_argument("--dtype", action="append", metavar="NAME", help="only this dtype (repeatable)")
    p.add_argument("--check", action="append", metavar="NAME",
                   help="only this check: dtype, shape, values, grad, errors (repeatable)")
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
        devices = suite.resolve_devices(args.device or ["cpu"])
        ops = suite.resolve_ops(args.op)
        suite.resolve_dtypes(args.dtype)
        suite.resolve_checks(args.check)
    except (ValueError, TypeError) as e:
        err.print(f"[red]anydevice conformance:[/red] {_esc(e)}", markup=True)
        return 2
    except Exception as e:  # noqa: BLE001 - e.g. DeviceUnavailableError
        err.print(f"[red]anydevice conformance:[/red] {type(e).__name__}: {_esc(e)}", markup=True)
        return 2

    report = _run_with_progress(devices, ops, args, err)
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


def _run_with_progress(devices, ops, args, err):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from . import suite

    total = len(devices) * len(ops)
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

        report = suite.run(devices=devices, ops=[o.name for o in ops], dtypes=args.dtype, checks=args.check,
                           progress=progress)
        bar.advance(task)
    return report


def _print_summary(console, report, max_failures: int) -> None:
    from rich.markup import escape
    from rich.table import Table

    from .runner import FAIL, PASS, SKIPPED, UNSUPPORTED

    t = Table(title=f"anydevice conformance ({report.anydevice_version}): cases, and ops by path",
              title_justify="left")
    for col in ("device", "pass", "fail", "unsupported", "skipped", "native", "decomposed", "fallback",
                "failing ops", "time"):
        t.add_column(col, justify="left" if col == "device" else "right")
    for d in report.devices:
        c, p = report.counts(d["device"]), report.paths(d["device"])
        t.add_row(d["device"], str(c[PASS]), f"[red]{c[FAIL]}[/red]" if c[FAIL] else "0",
                  str(c[UNSUPPORTED]), str(c[SKIPPED]), str(p["native"]), str(p["decomposed"]), str(p["fallback"]),
                  str(p["fail"]), f"{d.get('seconds', 0):.1f} s")
    console.print(t)
    fails = report.failures()
    for c in fails[:max_failures]:
        console.print(f"[red]FAIL[/red] {escape(c.id)} [dim](path {c.path or '-'})[/dim]: {escape(c.message)}", markup=True,
                      highlight=False, soft_wrap=True)
    if len(fails) > max_failures:
        console.print(f"... and {len(fails) - max_failures} more failing case(s); see --json or --html")
    verdict = "[green]all cases pass[/green]" if report.ok else f"[red]{len(fails)} failing case(s)[/red]"
    console.print(f"{len(report.cases)} cases in {report.seconds:.1f} s: {verdict}", markup=True)


if __name__ == "__main__":
    sys.exit(main())
