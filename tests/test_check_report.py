"""``anydevice check`` report contents with in-process fake plugins: failing devices named, unusable
devices, --no-fallback, a short table, hidden settings, and a hang abandoned in a thread."""
import io
import json
import re
import threading
import time

import numpy as np
import pytest
from fakes import FakePlugin, HostRuntime, installed

from anydevice import check
from anydevice.check.environment import settings
from anydevice.errors import DeviceUnavailableError


def _host(ctx, buf):
    out = np.empty(buf.shape, buf.dtype.numpy)
    ctx.runtime.copy_d2h(ctx.index, out, buf.handle, buf.byte_offset)
    return out


def _matmul_wrong_on_device_1(ctx, a, b):
    res = _host(ctx, a) @ _host(ctx, b) + (0.25 if ctx.index == 1 else 0.0)
    buf = ctx.empty(res.shape, a.dtype)
    ctx.runtime.copy_h2d(ctx.index, buf.handle, buf.byte_offset, np.ascontiguousarray(res, a.dtype.numpy))
    return buf


GENERATED = "\n".join(f"__kernel void k{i}(__global float* x) {{ x[get_global_id(0)] *= {i}; }}" for i in range(300))


def _compiler_error(ctx, x, axis=None, keepdims=False, dtype=None):
    raise RuntimeError(f"kernel build failed: error: use of undeclared identifier 'y'\n{GENERATED}")


def _checks(entry):
    return {c["name"]: c for c in entry["checks"]}


def test_a_failure_names_the_failing_device_not_the_type():
    plugin = FakePlugin(types=("badone",), runtime=HostRuntime(count=3),
                        kernels={"matmul": (_matmul_wrong_on_device_1, False)})
    with installed(plugin, types=["badone"]):
        report = check.run(["badone"], quick=True)
    entry = report["devices"]["badone"]
    comp = _checks(entry)["compute"]
    assert comp["status"] == "failed" and comp["failed_on"] == ["badone:1"]
    assert comp["detail"].startswith("failed on badone:1: badone:1 matmul") and "max abs error 0.25" in comp["detail"]
    assert [(o["device"], o["status"]) for o in comp["devices"]] == [
        ("badone:0", "passed"), ("badone:1", "failed"), ("badone:2", "passed")]
    assert "compute failed on badone:1" in entry["verdict"]
    assert _checks(entry)["roundtrip"]["status"] == "passed" and len(_checks(entry)["roundtrip"]["devices"]) == 3


class ProbingRuntime(HostRuntime):
    def __init__(self, bad):
        super().__init__(count=3)
        self.bad = set(bad)

    def probe(self, index):
        if index in self.bad:
            raise DeviceUnavailableError(f"firmware of device {index} is too old", hint="update the firmware")


def test_unusable_devices_are_listed_and_a_type_without_usable_ones_is_unavailable():
    with installed(FakePlugin(types=("half",), runtime=ProbingRuntime({2})), types=["half"]), \
            installed(FakePlugin(types=("none",), runtime=ProbingRuntime({0, 1, 2})), name="none", types=["none"]):
        report = check.run(["half", "none"], quick=True)
        out = io.StringIO()
        from rich.console import Console

        check.render(report, Console(file=out, width=200))
    half, none = report["devices"]["half"], report["devices"]["none"]
    assert half["status"] == "passed" and half["devices"] == ["half:0", "half:1"]
    assert [(u["physical_index"], u["hint"]) for u in half["unusable"]] == [(2, "update the firmware")]
    assert none["status"] == "unavailable" and "no usable device" in none["reason"] and none["hint"] == "update the firmware"
    table = out.getvalue()
    assert "half physical device 2: firmware of device 2 is too old" in table and "→ update the firmware" in table


def test_no_fallback_on_a_zero_kernel_backend():
    with installed(FakePlugin(types=("nokern",)), types=["nokern"]):
        strict = check.run(["nokern"], quick=True, no_fallback=True)
        lenient = check.run(["nokern"], quick=True)
    entry = strict["devices"]["nokern"]
    assert strict["exit_code"] == 1 and entry["status"] == "failed"
    assert {"matmul", "sum", "max", "add"} <= set(entry["fallback_ops"])
    assert "on nokern (--no-fallback): " in entry["verdict"] and "matmul" in strict["verdict"]
    assert lenient["exit_code"] == 0 and lenient["devices"]["nokern"]["fallback_ops"] == entry["fallback_ops"]


def test_a_compiler_error_takes_a_few_lines_of_the_table_and_all_of_the_json(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    plugin = FakePlugin(types=("clbad",), runtime=HostRuntime(count=2), kernels={"sum": (_compiler_error, False)})
    with installed(plugin, types=["clbad"]):
        assert check.main(["-d", "clbad"]) == 1
        table = capsys.readouterr().out
        report = check.run(["clbad"])
    rows = [line for line in table.splitlines() if line.startswith("│")]
    start = next(i for i, line in enumerate(rows) if line.startswith("│ clbad"))
    assert len(rows) - start <= 30, "\n".join(rows[start:])
    flat = " ".join(re.sub("[│┃]", " ", table).split())  # cells wrap: read the table's text as one line
    assert "RuntimeError: kernel build failed" in flat and "full detail in --json" in flat
    assert "__kernel void" not in flat and "Traceback" not in flat
    comp = _checks(report["devices"]["clbad"])["compute"]
    assert "__kernel void k299(" in comp["detail"] and comp["failed_on"] == ["clbad:0", "clbad:1"]


def test_settings_show_known_values_and_hide_the_rest():
    env = {"ANYDEVICE_API_TOKEN": "s3cret", "ANYDEVICE_DEVICE": "npu:1", "ANYDEVICE_XPU_VISIBLE_DEVICES": "1",
           "ANYDEVICE_PLUGIN_NPU": "anydevice-sim-npu", "ANYDEVICE_SIM_DCU_PROFILE": '{"count": 2}',
           "ANYDEVICE_OPENCL_PLATFORM": "Portable", "ANYDEVICE_REGISTRY_PASSWORD": "hunter2", "HOME": "/root"}
    assert settings(env) == {
        "ANYDEVICE_API_TOKEN": "<set, value hidden>", "ANYDEVICE_DEVICE": "npu:1",
        "ANYDEVICE_OPENCL_PLATFORM": "Portable", "ANYDEVICE_PLUGIN_NPU": "anydevice-sim-npu",
        "ANYDEVICE_REGISTRY_PASSWORD": "<set, value hidden>", "ANYDEVICE_SIM_DCU_PROFILE": '{"count": 2}',
        "ANYDEVICE_XPU_VISIBLE_DEVICES": "1"}


class StuckRuntime(HostRuntime):
    """Device 0's copies to the host wait until the test releases them."""

    def __init__(self, release):
        super().__init__(count=1)
        self.release = release

    def copy_d2h(self, index, dst, src, offset):
        self.release.wait(60)
        super().copy_d2h(index, dst, src, offset)


def test_an_in_process_hang_is_abandoned_after_the_timeout():
    release = threading.Event()
    try:
        with installed(FakePlugin(types=("stuck",), runtime=StuckRuntime(release)), types=["stuck"]):
            t0 = time.perf_counter()
            report = check.run(["stuck", "cpu"], quick=True, timeout=3)
            seconds = time.perf_counter() - t0
    finally:
        release.set()
    stuck = report["devices"]["stuck"]
    assert seconds < 3 + 6
    assert stuck["status"] == "timed_out" and stuck["stage"] == "memory" and "memory check on stuck:0" in stuck["reason"]
    assert report["devices"]["cpu"]["status"] == "passed" and report["exit_code"] == 1
    json.dumps(report, allow_nan=False)


@pytest.mark.parametrize("bad", [0, -2.5, float("nan"), "20", True])
def test_run_refuses_a_bad_timeout(bad):
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):
        check.run(["cpu"], timeout=bad)
