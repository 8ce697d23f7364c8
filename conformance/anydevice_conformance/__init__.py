"""anydevice conformance suite: checks a backend plugin against the op registry.

Three ways to run it, all over the same checks (see ``docs/CONFORMANCE.md``):

- the command ``anydevice conformance --device npu`` (summary table, ``--json``, ``--html``);
- pytest: ``pytest --pyargs anydevice_conformance --anydevice-device=npu`` (one test per
  op × dtype × check; ``--anydevice-xfail=FILE`` marks known failures);
- Python::

      import anydevice_conformance as adc
      report = adc.run(devices=["npu"], ops=["add", "matmul"])
      assert report.ok, report.verdict()
      report.write_html("conformance.html")

This module imports nothing heavy: the pytest plugin loads it in every pytest run.
"""
from __future__ import annotations

__all__ = ["run", "Report", "CaseResult", "SampleResult", "CHECKS", "SCHEMA_VERSION"]

#: Version of the JSON report layout (see docs/CONFORMANCE.md); bumped on incompatible changes.
SCHEMA_VERSION = 1
CHECKS = ("dtype", "shape", "values", "grad", "errors")


def run(devices=("cpu",), ops=None, dtypes=None, checks=None, progress=None, no_fallback=False):
    """Run the suite and return a :class:`~anydevice_conformance.report.Report`.

    :param devices: device specs: a type (``"npu"``: one device of each distinct model of the
        type, see ``Report.stands_for``), one device (``"npu:1"``, a Device), or ``"all"`` (every
        distinct model of every available type).
    :param ops: op names (default: every op in the registry).
    :param dtypes: dtype names to restrict to (default: each op's supported dtypes).
    :param checks: check names to restrict to (default: all of :data:`CHECKS`).
    :param progress: optional ``callable(device, op_name)`` called before each op runs.
    :param no_fallback: ``report.ok`` is False when an op ran through the CPU fallback on a
        tested device (``report.fallbacks()`` lists them).
    """
    from .suite import run as _run

    return _run(devices=devices, ops=ops, dtypes=dtypes, checks=checks, progress=progress, no_fallback=no_fallback)


def __getattr__(name):
    if name == "Report":
        from .report import Report

        return Report
    if name in ("CaseResult", "SampleResult"):
        from . import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'anydevice_conformance' has no attribute {name!r}")
