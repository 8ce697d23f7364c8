"""Suite-wide checks: device memory on the simulated devices returns to where it was after each test.

A test that deliberately keeps device memory (a cache it fills, a module-level tensor) opts out
with ``@pytest.mark.keeps_device_memory``. Only backends created in this process are looked at,
so tests that never touch a simulated device pay nothing but a dictionary lookup.
"""
from __future__ import annotations

import gc
import os

import pytest

# SciPy and scikit-learn read this when first imported: their Array API dispatch (tests of real clients)
os.environ.setdefault("SCIPY_ARRAY_API", "1")

from anydevice.api import device as _device_api
from anydevice.base.errors import DeviceError
from anydevice.runtime import devices as _devices

SIMULATED = ("npu", "xpu", "dcu")
pytest_plugins = ["pytester"]


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "keeps_device_memory: the test deliberately keeps device memory; skip the leak check"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call" and report.failed:
        item._call_failed = True  # its traceback keeps the test's tensors alive: no leak check then
    return report


def _allocated() -> dict:
    """``{device: (backend, bytes allocated)}`` for the simulated devices created so far, once their
    queued work is done (a queued kernel keeps its buffers alive)."""
    out = {}
    for name in SIMULATED:
        be = _devices._backends.get(name)
        if be is None or be.own_storage:
            continue
        for d in be.devices:
            try:
                _device_api.synchronize(d)
            except DeviceError:  # a sticky error the test left on purpose: its queue cannot be waited for
                continue
            out[d] = (be, _device_api.memory_allocated(d))
    return out


def _leaks(before: dict) -> dict:
    gc.collect()
    leaks = {}
    for d, (be, now) in _allocated().items():
        was = before[d][1] if d in before and before[d][0] is be else 0
        if now > was:
            _device_api.empty_cache(d)  # the core's own caches (scalar operands) are not leaks
            now = _device_api.memory_allocated(d)
            if now > was:
                leaks[str(d)] = (was, now)
    return leaks


@pytest.fixture(autouse=True)
def _device_memory_returns(request):
    if request.node.get_closest_marker("keeps_device_memory"):
        yield
        return
    before = _allocated()
    yield
    if getattr(request.node, "_call_failed", False) or not (before or any(n in _devices._backends for n in SIMULATED)):
        return
    leaks = _leaks(before)
    if leaks:
        pytest.fail(
            "device memory was not returned after the test: "
            + "; ".join(f"{d}: {was} -> {now} bytes allocated" for d, (was, now) in leaks.items())
            + " (free the tensors, or mark the test keeps_device_memory if it keeps them on purpose)",
            pytrace=False,
        )
