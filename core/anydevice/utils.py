"""Utilities for users: :func:`run_check`, the Python entry of ``anydevice check``."""
from __future__ import annotations

__all__ = ["run_check"]


def run_check(devices=None, quick: bool = False, json: bool = False) -> dict:
    """Check that anydevice works on this machine and print the report.

    :param devices: device types or devices to check (``"npu"``, ``["npu:0", "cpu"]``); by default
        every installed type. A type that is installed but unavailable fails the check only when
        it was named here.
    :param quick: skip the bandwidth and training checks.
    :param json: print one JSON document (schema in ``docs/CHECK.md``) instead of tables.
    :return: the report as a dict; ``report["exit_code"]`` is 0 when every selected check passed.

    >>> import anydevice
    >>> report = anydevice.utils.run_check(quick=True)  # doctest: +SKIP
    anydevice works well on 1 cpu device.
    """
    from anydevice.tools.check import _report

    if devices is not None and not isinstance(devices, (str, list, tuple)):
        raise TypeError(f"run_check(): devices must be a string or a list of strings, not {type(devices).__name__}")
    return _report(devices, bool(quick), bool(json))
