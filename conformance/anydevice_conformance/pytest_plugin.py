"""pytest plugin of the conformance suite (entry point ``pytest11``: ``anydevice_conformance``).

Run it with::

    pytest --pyargs anydevice_conformance --anydevice-device=npu [-n auto]

One test per op × dtype × check, with ids like ``npu:0-add-float32-values`` (the ``id`` of the
JSON report). Known failures are marked xfail by listing their ids, or glob patterns such as
``npu:0-*-float64-*``, in a file given to ``--anydevice-xfail=FILE`` (one per line, ``#``
comments) or with ``--anydevice-xfail-id=PATTERN``.

A device type (``--anydevice-device=opencl``) or ``all`` tests one device of each distinct model;
the terminal summary says which devices each one stands for, and which were left out as
unusable. With ``--anydevice-no-fallback`` a dtype, shape or values case whose op ran through the
CPU fallback fails.

Without ``--anydevice-device`` the plugin does nothing: this module is loaded by every pytest
run in an environment where anydevice is installed, so it imports nothing heavy.
"""
from __future__ import annotations

import fnmatch

import pytest

_CACHE: dict = {}


def pytest_addoption(parser):
    g = parser.getgroup("anydevice", "anydevice conformance suite (pytest --pyargs anydevice_conformance)")
    g.addoption("--anydevice-device", action="append", default=[], metavar="DEVICE",
                help="device to check: a type (one device of each distinct model), one device (npu:1), or 'all' "
                     "(every distinct model of every available type); repeatable")
    g.addoption("--anydevice-op", action="append", default=[], metavar="NAME", help="only this op (repeatable)")
    g.addoption("--anydevice-dtype", action="append", default=[], metavar="NAME", help="only this dtype (repeatable)")
    g.addoption("--anydevice-check", action="append", default=[], metavar="NAME",
                help="only this check: dtype, shape, values, grad, errors (repeatable)")
    g.addoption("--anydevice-xfail", action="append", default=[], metavar="FILE",
                help="file of case ids or glob patterns expected to fail, one per line ('#' starts a comment)")
    g.addoption("--anydevice-xfail-id", action="append", default=[], metavar="PATTERN",
                help="a case id or glob pattern expected to fail (repeatable)")
    g.addoption("--anydevice-xfail-strict", action="store_true",
                help="a listed case that passes fails the run (to keep the list short)")
    g.addoption("--anydevice-no-fallback", action="store_true",
                help="a case whose op ran through the CPU fallback fails")


def read_xfail_file(path) -> list:
    """Patterns of an xfail file: one id or glob per line; blank lines and ``#`` comments ignored."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                out.append(line)
    return out


def pytest_generate_tests(metafunc):
    if "anydevice_case" not in metafunc.fixturenames:
        return
    cfg = metafunc.config
    devices = cfg.getoption("--anydevice-device")
    if not devices:
        metafunc.parametrize("anydevice_case", [pytest.param(None, id="no-device", marks=pytest.mark.skip(
            reason="pass --anydevice-device=TYPE to run the anydevice conformance suite"))])
        return
    from . import suite
    from .runner import case_id, plan

    try:
        targets = suite.resolve_targets(devices)
        ops = suite.resolve_ops(cfg.getoption("--anydevice-op"))
        dtypes = suite.resolve_dtypes(cfg.getoption("--anydevice-dtype"))
        checks = suite.resolve_checks(cfg.getoption("--anydevice-check"))
    except Exception as e:  # noqa: BLE001 - a usage error: stop with the message
        raise pytest.UsageError(f"anydevice conformance: {e}") from None
    patterns = list(cfg.getoption("--anydevice-xfail-id"))
    for path in cfg.getoption("--anydevice-xfail"):
        patterns += read_xfail_file(path)
    strict = cfg.getoption("--anydevice-xfail-strict")
    no_fallback = cfg.getoption("--anydevice-no-fallback")
    params = []
    for t in targets:
        for op, dtype, check in plan(ops, dtypes, checks):
            cid = case_id(str(t.device), op.name, dtype, check)
            marks = ()
            hit = next((p for p in patterns if fnmatch.fnmatchcase(cid, p)), None)
            if hit is not None:
                marks = (pytest.mark.xfail(reason=f"listed as a known failure ({hit})", strict=strict),)
            params.append(pytest.param((str(t.device), op.name, dtype, check, no_fallback), id=cid, marks=marks))
    metafunc.parametrize("anydevice_case", params)


def run_case(case) -> None:
    """Run (or reuse) the checks of one op × dtype and report one of them to pytest."""
    from anydevice.ops.registry import get_op

    from . import runner, suite

    device, opname, dtype, check, no_fallback = case
    key = (device, opname, dtype)
    results = _CACHE.get(key)
    if results is None:
        op = get_op(opname)
        with suite.quiet_run():
            if dtype == runner.ANY_DTYPE:
                cases = [runner.run_errors(op, device)]
            else:
                cases = runner.run_op(op, device, dtype)
        results = _CACHE[key] = {c.check: c for c in cases}
    c = results[check]
    if c.status == runner.UNSUPPORTED:
        pytest.skip(f"unsupported dtype: {c.message}")
    if c.status == runner.SKIPPED:
        pytest.skip(c.message)
    if c.status == runner.FAIL:
        pytest.fail(f"{c.id} (path {c.path or '-'}): {c.message}", pytrace=False)
    if no_fallback and c.path == "fallback" and c.check in runner.FORWARD_CHECKS:
        pytest.fail(f"{c.id}: {opname} ran through the CPU fallback on {device} at {dtype} (--anydevice-no-fallback)",
                    pytrace=False)


def pytest_terminal_summary(terminalreporter, config):
    """Which devices each tested device stands for, and the devices not tested."""
    devices = config.getoption("--anydevice-device")
    if not devices:
        return
    from . import suite
    from .report import span

    try:
        targets = suite.resolve_targets(devices)
    except Exception:  # noqa: BLE001 - already reported as a usage error
        return
    unusable, unavailable = suite.not_tested(targets, suite.wants_all(devices))
    tr = terminalreporter
    lines = [f"{t.device} stands for {span(t.stands_for)}" for t in targets if len(t.stands_for) > 1]
    lines += [f"unusable, not tested: {u['type']} physical device {u['physical_index']}: {u['reason']}"
              + (f" ({u['hint']})" if u["hint"] else "") for u in unusable if not u["kept_visible"]]
    lines += [f"not available: {u['reason']}" for u in unavailable]
    if lines:
        tr.write_sep("-", "anydevice conformance devices")
        for line in lines:
            tr.write_line(line)
