"""``anydevice check``: plugin statuses, failing devices, selection, exit status, output and JSON schema."""
import json
import pathlib
import re

import numpy as np
import pytest
from fakes import FakePlugin, HostRuntime, installed

import anydevice as ad
from anydevice import check
from anydevice.plugins import hookimpl
from anydevice.plugins.manager import PluginRecord, manager
from anydevice.runtime import devices
from anydevice.runtime import devices as _backend

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "CHECK.md"


# --- fake kernels ------------------------------------------------------------------------------
def _host(ctx, buf):
    out = np.empty(buf.shape, buf.dtype.numpy)
    ctx.runtime.copy_d2h(ctx.index, out, buf.handle, buf.byte_offset)
    return out


def _upload(ctx, arr, dtype):
    buf = ctx.empty(arr.shape, dtype)
    ctx.runtime.copy_h2d(ctx.index, buf.handle, buf.byte_offset, np.ascontiguousarray(arr, dtype.numpy))
    return buf


def wrong_matmul(ctx, a, b):
    return _upload(ctx, _host(ctx, a) @ _host(ctx, b) + 0.5, a.dtype)


def exploding_sum(ctx, x, axis=None, keepdims=False, dtype=None):
    raise RuntimeError("vendor kernel exploded")


class EnvPlugin(FakePlugin):
    """A plugin with environment facts whose runtime may be unavailable."""

    def __init__(self, *a, unavailable=None, **k):
        super().__init__(*a, **k)
        self.unavailable = unavailable

    @hookimpl
    def anydevice_create_runtime(self, device_type):
        if self.unavailable:
            raise ad.DeviceUnavailableError(self.unavailable)
        return HostRuntime(count=2)

    @hookimpl
    def anydevice_environment(self, device_type):
        return {"sdk": "fake-sdk 1.2", "driver": None}


def _devices(report, name):
    return report["devices"][name]


def _checks(entry):
    return {c["name"]: c for c in entry["checks"]}


def _validate(report):
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(report, check.SCHEMA)
    json.dumps(report, allow_nan=False)  # strict JSON


# --- cpu and the CLI ---------------------------------------------------------------------------
def test_cpu_full_check_passes_and_json_matches_the_schema(capsys):
    code = check.main(["--device", "cpu", "--json"])
    report = json.loads(capsys.readouterr().out)
    _validate(report)
    assert code == 0 and report["exit_code"] == 0
    cpu = _devices(report, "cpu")
    assert cpu["status"] == "passed" and cpu["count"] == 1 and cpu["devices"] == ["cpu:0"]
    checks = _checks(cpu)
    assert [c["name"] for c in cpu["checks"]] == [c[0] for c in check.CHECKS]
    for name in ("properties", "memory", "roundtrip", "bandwidth", "compute", "training", "streams"):
        assert checks[name]["status"] == "passed", checks[name]
    assert checks["device_copy"]["status"] == "skipped" and "needs 2" in checks["device_copy"]["detail"]
    assert checks["bandwidth"]["metrics"]["h2d_gbps"] > 0 and checks["bandwidth"]["metrics"]["d2h_gbps"] > 0
    assert "not reported" in checks["memory"]["detail"]  # cpu raises UnsupportedError for memory_stats
    assert len(checks["roundtrip"]["metrics"]["dtypes"]) == len(ad.dtypes.ALL_DTYPES)
    assert cpu["verdict"] == "anydevice works well on 1 cpu device."
    env = report["environment"]
    assert env["anydevice"] == ad.__version__ and env["plugin_api_version"] == ad.backend.API_VERSION
    cpu_plugin = next(p for p in report["plugins"] if p["device_types"] == ["cpu"])
    assert cpu_plugin["status"] == "loaded" and "numpy" in cpu_plugin["environment"]["cpu"]
    assert cpu["environment"] == cpu_plugin["environment"]["cpu"]


def test_quick_skips_bandwidth_and_training(capsys):
    assert check.main(["-d", "cpu", "--quick", "--json"]) == 0
    checks = _checks(_devices(json.loads(capsys.readouterr().out), "cpu"))
    assert checks["bandwidth"]["status"] == checks["training"]["status"] == "skipped"
    assert checks["bandwidth"]["detail"] == "skipped by --quick"


def test_terminal_report_is_readable(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    assert check.main(["--device", "cpu", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "anydevice works well on 1 cpu device." in out
    assert "roundtrip" in out and "exit status 0" in out and "Traceback" not in out


def test_cli_usage_errors():
    assert check.main(["--help"]) == 0
    assert check.main(["--no-such-option"]) == 2


def test_unknown_and_malformed_devices_fail_with_a_suggestion(capsys):
    assert check.main(["--device", "cpx", "--device", "cpu:x", "--device", "cpu:7", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    _validate(report)
    assert "Did you mean 'cpu'?" in report["devices"]["cpx"]["reason"]
    assert "TYPE:INDEX" in report["devices"]["cpu:x"]["reason"]
    assert "does not exist" in report["devices"]["cpu:7"]["reason"]
    assert all(e["status"] == "unavailable" and e["requested"] for e in report["devices"].values())


def test_json_schema_is_documented():
    text = DOC.read_text()
    block = re.search(r"```json\n(.*?)\n```", text, re.S)
    assert block, "docs/CHECK.md must contain the JSON schema in a ```json block"
    assert json.loads(block.group(1)) == json.loads(json.dumps(check.SCHEMA))


def test_run_check_python_entry(capsys):
    report = ad.utils.run_check(devices="cpu", quick=True)
    assert report["exit_code"] == 0 and "works well on 1 cpu device" in capsys.readouterr().out
    report = ad.utils.run_check(devices=["cpu"], quick=True, json=True)
    assert json.loads(capsys.readouterr().out)["verdict"] == report["verdict"]
    with pytest.raises(TypeError, match="devices must be"):
        ad.utils.run_check(devices=3)


# --- plugin statuses ---------------------------------------------------------------------------
def test_loaded_plugin_with_two_devices_and_environment_facts():
    with installed(EnvPlugin(types=("okfake",)), name="okfake-plugin", types=["okfake"]):
        report = check.run(["okfake", "cpu"])
    _validate(report)
    assert report["exit_code"] == 0
    plug = next(p for p in report["plugins"] if p["name"] == "okfake-plugin")
    assert plug["status"] == "loaded" and plug["environment"] == {"okfake": {"sdk": "fake-sdk 1.2", "driver": None}}
    entry = _devices(report, "okfake")
    assert entry["status"] == "passed" and entry["count"] == 2 and entry["environment"]["sdk"] == "fake-sdk 1.2"
    checks = _checks(entry)
    assert all(c["status"] == "passed" for n, c in checks.items() if n != "all_reduce"), checks
    assert "okfake:0 -> okfake:1 -> okfake:0" in checks["device_copy"]["detail"]
    assert checks["memory"]["metrics"]["stats_reported"] is True
    # no kernels at all: every op ran on the CPU fallback, and the report says so
    assert "matmul" in checks["compute"]["metrics"]["cpu_fallback_ops"]
    assert entry["verdict"] == "anydevice works well on 2 okfake devices."
    assert list(report["devices"]) == ["okfake", "cpu"]


def test_select_single_device_index():
    with installed(EnvPlugin(types=("okfake",)), types=["okfake"]):
        report = check.run(["okfake:1"], quick=True)
    entry = _devices(report, "okfake")
    assert entry["devices"] == ["okfake:1"] and entry["count"] == 2
    assert _checks(entry)["device_copy"]["status"] == "skipped"


def test_environment_is_reported_even_when_the_runtime_cannot_be_created(monkeypatch):
    plugin = EnvPlugin(types=("nodriver",), unavailable="fake-sdk is installed but no driver was found")
    with installed(plugin, name="nodriver-plugin", types=["nodriver"]):
        monkeypatch.setattr(check.selection, "default_types", lambda: ["cpu", "nodriver"])
        report = check.run(quick=True)
        explicit = check.run(["nodriver"], quick=True)
    _validate(report)
    entry = _devices(report, "nodriver")
    assert entry["status"] == "unavailable" and "no driver was found" in entry["reason"]
    assert entry["environment"] == {"sdk": "fake-sdk 1.2", "driver": None}
    assert not entry["requested"] and report["exit_code"] == 0  # listed, but does not fail the run
    assert explicit["exit_code"] == 1 and _devices(explicit, "nodriver")["requested"]


def test_plugin_skipped_for_api_version(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "400")
    with installed(FakePlugin(types=("future",), api_version=99), name="future-plugin", types=["future"]):
        monkeypatch.setattr(check.selection, "default_types", lambda: ["cpu", "future"])
        report = check.run(quick=True)
        assert check.main(["--device", "future", "--quick"]) == 1
    out = capsys.readouterr().out
    _validate(report)
    plug = next(p for p in report["plugins"] if p["name"] == "future-plugin")
    assert plug["status"] == "skipped" and plug["api_version"] == 99 and "API version 99" in plug["reason"]
    assert "built for plugin API version" in plug["hint"]
    assert _devices(report, "future")["status"] == "unavailable" and report["exit_code"] == 0
    assert "future" in out and "unavailable" in out and "Traceback" not in out


def test_plugin_whose_import_fails():
    rec = PluginRecord("anydevice_gone.plugin", "anydevice_gone_vendor_xyz.plugin", "anydevice-gone", "0.3")
    manager.discover()
    manager.records.append(rec)
    manager._claim(rec, "gonedev")
    try:
        report = check.run(["gonedev", "cpu"], quick=True)
    finally:
        manager.unregister(rec)
        _backend.forget("gonedev")
        devices._reset_cache()
    _validate(report)
    plug = next(p for p in report["plugins"] if p["name"] == "anydevice_gone.plugin")
    assert plug["status"] == "failed" and "ModuleNotFoundError" in plug["reason"]
    assert "pip install --upgrade anydevice-gone" in plug["hint"]
    entry = _devices(report, "gonedev")
    assert entry["status"] == "unavailable" and "import of anydevice_gone_vendor_xyz.plugin failed" in entry["reason"]
    assert report["exit_code"] == 1 and _devices(report, "cpu")["status"] == "passed"


def test_plugin_with_no_devices():
    with installed(FakePlugin(types=("empty",), runtime=HostRuntime(count=0)), types=["empty"]):
        report = check.run(["empty", "cpu"], quick=True)
    entry = _devices(report, "empty")
    assert entry["status"] == "unavailable" and "reports no devices" in entry["reason"]
    assert entry["checks"] == [] and report["exit_code"] == 1


# --- failing devices ---------------------------------------------------------------------------
def test_wrong_kernel_fails_compute_and_other_types_are_still_checked(capsys):
    plugin = FakePlugin(types=("badmath",), kernels={"matmul": (wrong_matmul, False)})
    with installed(plugin, name="badmath-plugin", types=["badmath"]):
        code = check.main(["-d", "badmath", "-d", "cpu", "--json"])
    report = json.loads(capsys.readouterr().out)
    _validate(report)
    assert code == 1 == report["exit_code"]
    entry = _devices(report, "badmath")
    comp = _checks(entry)["compute"]
    assert entry["status"] == "failed" and comp["status"] == "failed"
    assert "badmath:0 matmul" in comp["detail"] and "max abs error 0.5" in comp["detail"]
    assert "anydevice conformance --device badmath" in comp["hint"]
    assert _checks(entry)["roundtrip"]["status"] == "passed"
    # linear's backward computes the weight gradient with the same wrong matmul, so training fails too
    assert "2 of 9 checks failed (compute, training)" in entry["verdict"]
    assert "badmath:0 weight gradient: 32 of 32 values differ" in _checks(entry)["training"]["detail"]
    assert _devices(report, "cpu")["status"] == "passed"
    assert "badmath" in report["verdict"]


def test_raising_kernel_is_reported_with_type_message_and_location(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # keep table cells on one line
    plugin = FakePlugin(types=("boomsum",), kernels={"sum": (exploding_sum, False)})
    with installed(plugin, name="boomsum-plugin", types=["boomsum"]):
        code = check.main(["-d", "boomsum,cpu", "--quick"])
    out = capsys.readouterr().out
    assert code == 1
    assert "RuntimeError: vendor kernel exploded" in out
    assert "test_check.py" in out and "exploding_sum" in out  # where it was raised
    assert "report it with the output of" in out
    assert "Traceback" not in out
    assert "anydevice works well on 1 cpu device." in out
    assert "anydevice does NOT work correctly on boomsum" in out


def test_check_restores_fallback_mode_and_observers():
    from anydevice import dispatch

    old = dispatch.set_fallback_mode("error")
    try:
        with installed(FakePlugin(types=("nokern",)), types=["nokern"]):
            report = check.run(["nokern"], quick=True)
        assert report["exit_code"] == 0  # fallbacks are reported, not fatal, during the check
        assert dispatch.get_fallback_mode() == "error" and not dispatch._observers
    finally:
        dispatch.set_fallback_mode(old)


def test_sim_npu_injected_kernel_fault_fails_only_that_device(monkeypatch):
    pytest.importorskip("anydevice_sim_npu.faults")
    monkeypatch.setenv("ANYDEVICE_SIM_FAULTS", "npu:1:kernel")  # read by the worker that checks npu
    report = check.run(["npu", "cpu"], quick=True)
    entry = _devices(report, "npu")
    if entry["status"] == "unavailable":
        pytest.skip("npu is unavailable here")
    assert report["exit_code"] == 1 and entry["status"] == "failed"
    failed = [c for c in entry["checks"] if c["status"] == "failed"]
    assert failed and "DeviceError" in failed[0]["detail"] and "npu:1" in failed[0]["detail"]
    assert "the device reported an error" in failed[0]["hint"]
    assert all(c["failed_on"] == ["npu:1"] for c in failed if c["devices"])  # per-device checks name npu:1 only
    outcomes = {o["device"]: o["status"] for o in failed[0]["devices"]}
    assert outcomes["npu:1"] == "failed" and outcomes["npu:0"] == "passed"
    assert "failed on npu:1" in entry["verdict"]
    assert _devices(report, "cpu")["status"] == "passed"


class LossyRuntime(HostRuntime):
    """Device → host copies lose the last byte of every buffer longer than 64 bytes."""

    def copy_d2h(self, index, dst, src, offset):
        super().copy_d2h(index, dst, src, offset)
        b = dst.reshape(-1).view(np.uint8)
        if b.nbytes > 64:
            b[-1] ^= 0x01


def test_corrupting_copy_fails_roundtrip_with_the_first_bad_element():
    with installed(FakePlugin(types=("lossy",), runtime=LossyRuntime(count=1)), types=["lossy"]):
        report = check.run(["lossy"], quick=True)
    rt = _checks(_devices(report, "lossy"))["roundtrip"]
    assert rt["status"] == "failed" and report["exit_code"] == 1
    assert "lossy:0 bool: round trip is not bit-exact: 1 bytes differ, first at element 110" in rt["detail"]
    assert "fix copy_h2d/copy_d2h" in rt["hint"]


def test_progress_hooks_are_called_per_check():
    class Recorder:
        def __init__(self):
            self.total, self.steps = None, []

        def start(self, total):
            self.total = total

        def step(self, description):
            self.steps.append(description)

    rec = Recorder()
    check.run(["cpu"], quick=True, progress=rec)
    assert rec.total == len(check.CHECKS)
    assert rec.steps == [f"checking cpu: {name}" for name, _, _ in check.CHECKS]


def test_an_error_outside_any_check_still_gives_a_report(monkeypatch, capsys):
    def broken_target(*a, **k):
        raise KeyError("core state went missing")

    monkeypatch.setattr(check.worker, "Target", broken_target)  # only this process sees it: check in-process
    assert check.main(["--device", "cpu", "--json", "--in-process"]) == 1
    report = json.loads(capsys.readouterr().out)
    _validate(report)
    cpu = _devices(report, "cpu")
    assert cpu["status"] == "failed" and "KeyError: 'core state went missing'" in cpu["reason"]
    assert report["options"]["devices"] == ["cpu"]
