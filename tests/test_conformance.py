"""The conformance suite catches what it exists to catch.

Test backends are registered in-process over host memory (a Runtime with malloc/free and
copies). Each carries one deliberately wrong kernel, and exactly the matching check must fail
with a message that says what is wrong; a backend without kernels runs everything through
the CPU fallback. The whole suite passes on cpu.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import fakes
import numpy as np
import pytest

import anydevice as ad
import anydevice_conformance as adc
from anydevice import _backend, devices
from anydevice import dtypes as _dt
from anydevice.backend import API_VERSION, DeviceTypeSpec, Runtime
from anydevice.errors import DeviceUnavailableError
from anydevice.ops.registry import all_ops, get_op
from anydevice.ops.samples import error_samples, samples
from anydevice.plugins import hookimpl
from anydevice.plugins.manager import manager
from anydevice_conformance import cli
from anydevice_conformance.report import Report
from anydevice_conformance.runner import FAIL, PASS, SKIPPED, UNSUPPORTED, planned_checks


# --- a test backend over host memory ----------------------------------------------------------
class HostRuntime(Runtime):
    """Device memory is numpy byte arrays; copies are slices."""

    def device_count(self):
        return 1

    def malloc(self, index, nbytes):
        return np.empty(nbytes, np.uint8)

    def free(self, index, handle):
        pass

    def copy_h2d(self, index, dst, offset, src):
        src = np.array(src, order="C")
        dst[offset:offset + src.nbytes] = src.reshape(-1).view(np.uint8)

    def copy_d2h(self, index, dst, src, offset):
        dst.reshape(-1).view(np.uint8)[:] = src[offset:offset + dst.nbytes]

    def synchronize(self, index):
        pass


class NoFloat64Runtime(HostRuntime):
    """No double precision, like many accelerators."""

    def dtypes(self, index):
        return [d for d in _dt.ALL_DTYPES if d not in (_dt.float64, _dt.complex128)]


def to_host(ctx, a):
    out = np.empty(a.shape, a.dtype.numpy)
    ctx.runtime.copy_d2h(ctx.index, out, a.handle, a.byte_offset)
    return out


def to_device(ctx, arr, dtype=None):
    arr = np.array(arr, order="C")  # keeps 0-d (np.ascontiguousarray would make it 1-d)
    buf = ctx.empty(arr.shape, dtype or _dt.dtype(arr.dtype))
    if arr.nbytes:
        ctx.runtime.copy_h2d(ctx.index, buf.handle, buf.byte_offset, arr)
    return buf


class Plugin:
    def __init__(self, name, runtime, register=None):
        self.name, self.runtime, self.register = name, runtime, register

    @hookimpl
    def anydevice_api_version(self):
        return API_VERSION

    @hookimpl
    def anydevice_device_types(self):
        return [DeviceTypeSpec(self.name, description="conformance test device")]

    @hookimpl
    def anydevice_create_runtime(self, device_type):
        return self.runtime

    @hookimpl
    def anydevice_register_kernels(self, device_type, runtime, kernels):
        if self.register:
            self.register(kernels)


def wrong_kernels(kernels):
    f32 = [_dt.float32]

    @kernels.register("sqrt", dtypes=f32)
    def sqrt(ctx, x):  # beyond tolerance: 1e-4 relative
        return to_device(ctx, np.sqrt(to_host(ctx, x)) * np.float32(1 + 1e-4))

    @kernels.register("floor", dtypes=f32)
    def floor(ctx, x):  # wrong dtype: a float64 buffer
        return to_device(ctx, np.floor(to_host(ctx, x)).astype(np.float64))

    @kernels.register("abs", dtypes=f32)
    def abs_(ctx, x):  # wrong shape: flattened
        return to_device(ctx, np.abs(to_host(ctx, x)).reshape(-1))

    @kernels.register("cos", dtypes=f32)
    def cos(ctx, x):  # wrong, and used by the VJP of sin (which falls back and is right forward)
        return to_device(ctx, np.cos(to_host(ctx, x)) * np.float32(1.5))

    @kernels.register("cross_entropy", dtypes=f32)
    def cross_entropy(ctx, logits, labels, reduction):  # right values, wrong error type for bad labels
        z, y = to_host(ctx, logits).astype(np.float64), to_host(ctx, labels)
        if y.size and (y.min() < 0 or y.max() >= z.shape[-1]):
            raise ValueError("label out of range")
        lsm = z - z.max(-1, keepdims=True)
        lsm = lsm - np.log(np.exp(lsm).sum(-1, keepdims=True))
        nll = -np.take_along_axis(lsm, y[..., None], axis=-1)[..., 0]
        nll = nll if reduction == "none" else (nll.sum() if reduction == "sum" else nll.mean())
        return to_device(ctx, np.asarray(nll, np.float32))


@pytest.fixture(scope="module")
def test_devices():
    regs = [
        manager.register(Plugin("cfbad", HostRuntime(), wrong_kernels), name="cfbad", types=["cfbad"]),
        manager.register(Plugin("cfnone", NoFloat64Runtime()), name="cfnone", types=["cfnone"]),
    ]
    yield
    for rec in regs:
        manager.unregister(rec)
        _backend.forget(rec.types[0] if rec.types else None)
    devices._reset_cache()


def statuses(report, op, dtype="float32"):
    return {c.check: c.status for c in report.find(op=op, dtype=dtype)}


# --- each deliberately wrong kernel fails exactly its check ---------------------------------------
@pytest.fixture(scope="module")
def bad_report(test_devices):
    # The core checks label bounds before any kernel runs; lift that check here so the deliberately
    # wrong kernel sees the bad labels and the suite must notice the wrong exception type.
    op = get_op("cross_entropy")
    saved, op.check = op.check, None
    try:
        return adc.run(devices=["cfbad"], ops=["sqrt", "floor", "abs", "sin", "cos", "cross_entropy"], dtypes=["float32"])
    finally:
        op.check = saved


def test_beyond_tolerance_fails_values_only(bad_report):
    assert statuses(bad_report, "sqrt") == {"dtype": PASS, "shape": PASS, "values": FAIL, "grad": PASS}
    (c,) = bad_report.find(op="sqrt", check="values")
    # element-wise ops are compared relatively: atol is float32's smallest normal number
    assert "values differ within rtol=1.3e-06, atol=1.17549e-38" in c.message and "got" in c.message
    assert c.path == "native" and c.max_rel_err == pytest.approx(1e-4, rel=0.05)


def test_wrong_dtype_fails_dtype_only(bad_report):
    assert statuses(bad_report, "floor") == {"dtype": FAIL, "shape": PASS, "values": SKIPPED, "grad": PASS}
    (c,) = bad_report.find(op="floor", check="dtype")
    assert "result dtype is float64 (the kernel's buffer), expected float32" in c.message


def test_wrong_shape_fails_shape_only(bad_report):
    assert statuses(bad_report, "abs") == {"dtype": PASS, "shape": FAIL, "values": SKIPPED, "grad": PASS}
    (c,) = bad_report.find(op="abs", check="shape")
    assert "result shape is (6,), expected (2, 3)" in c.message


def test_wrong_vjp_primitive_fails_grad_only(bad_report):
    assert statuses(bad_report, "sin") == {"dtype": PASS, "shape": PASS, "values": PASS, "grad": FAIL}
    (c,) = bad_report.find(op="sin", check="grad")
    assert c.path == "fallback"
    assert "gradient of input 0" in c.message and "differ from finite differences" in c.message
    assert statuses(bad_report, "cos")["values"] == FAIL


def test_wrong_error_type_fails_errors_only(bad_report):
    assert statuses(bad_report, "cross_entropy") == {"dtype": PASS, "shape": PASS, "values": PASS, "grad": PASS}
    (c,) = bad_report.find(op="cross_entropy", check="errors")
    assert c.status == FAIL and bad_report.find(op="cross_entropy", dtype="float32")[0].path == "native"
    assert "cfbad:0 raised ValueError: label out of range, expected IndexError like cpu" in c.message
    assert [c.status for o in ("sqrt", "abs") for c in bad_report.find(op=o, check="errors")] == [PASS, PASS]
    assert not bad_report.ok


# --- a backend without kernels: everything falls back, nothing fails ---------------------------
def test_zero_kernels_all_fallback(test_devices):
    report = adc.run(devices=["cfnone"], no_fallback=True)
    assert report.cases_ok, [c.id + ": " + c.message for c in report.failures()][:10]
    cells = {op: report.cell(op, "cfnone:0") for op in report.ops()}
    # positive(x) = x is the one decomposition that needs no kernel at all (its half-precision cases
    # still fall back: decompositions compute half in float32, and the casts need kernels)
    other = {k: v for k, v in cells.items() if v != "fallback"}
    assert other in ({}, {"positive": "decomposed"})
    assert report.paths("cfnone:0")["fallback"] == len(all_ops()) - len(other)
    forward = [c for c in report.cases if c.check != "errors" and c.status == PASS]
    # identity decompositions (positive; ceil and trunc of integers; conj of real numbers) run no
    # kernel: "decomposed"
    assert {c.op for c in forward if c.path != "fallback"} == {"positive", "ceil", "trunc", "conj"}
    assert all(c.path == "fallback" for c in forward if c.dtype.startswith("float") and c.op not in ("positive", "conj"))
    # float64 is not supported by this device: reported as such, not as a failure
    f64 = report.find(dtype="float64") + report.find(dtype="complex128")
    assert f64 and all(c.status == UNSUPPORTED for c in f64)
    assert "does not support float64" in f64[0].message
    # the no-fallback gate fails the run, naming every op that ran on the cpu
    fell = {f["op"] for f in report.fallbacks()}
    assert not report.ok and fell == {op for op, v in cells.items() if v == "fallback"}
    assert report.verdict() == f"{len(fell)} op(s) ran through the CPU fallback on 1 device(s) (no-fallback)"


# --- cpu passes everything -------------------------------------------------------------------
@pytest.fixture(scope="module")
def cpu_report():
    return adc.run(devices=["cpu"])


def test_cpu_passes_every_op(cpu_report):
    assert cpu_report.ok, [c.id + ": " + c.message for c in cpu_report.failures()][:10]
    assert set(cpu_report.ops()) == {o.name for o in all_ops()}
    assert {c.path for c in cpu_report.cases if c.check != "errors"} == {"native"}
    checks = {c.check for c in cpu_report.cases}
    assert checks == {"dtype", "shape", "values", "grad", "errors"}


def test_samples_cover_every_op_and_dtype():
    for op in all_ops():
        if op.inputs:
            assert error_samples(op), op.name
        for d in op.supported_dtypes:
            ss = samples(op, d)
            assert ss, (op.name, d.name)
            if "grad" in planned_checks(op, d.name):
                assert any(s.grad for s in ss), (op.name, d.name)
    add = samples(get_op("add"), _dt.float32)
    descs = " ".join(s.desc for s in add)
    assert "broadcast" in descs and "0-d" in descs and "empty" in descs and "NaN" in descs


# --- reports ------------------------------------------------------------------------------------
def test_json_schema_and_roundtrip(cpu_report, tmp_path):
    p = tmp_path / "r.json"
    cpu_report.write_json(p)
    d = json.loads(p.read_text())
    assert d["schema_version"] == 1 and d["anydevice_version"] == ad.__version__
    assert d["devices"][0]["device"] == "cpu:0" and d["devices"][0]["counts"]["fail"] == 0
    case = next(c for c in d["cases"] if c["op"] == "add" and c["dtype"] == "float32" and c["check"] == "values")
    for k in ("op", "device", "dtype", "check", "status", "path", "message", "max_abs_err", "max_rel_err",
              "input_shapes", "samples", "id"):
        assert k in case
    assert case["id"] == "cpu:0-add-float32-values" and case["path"] == "native"
    back = Report.read_json(p)
    assert len(back.cases) == len(cpu_report.cases) and back.ok


def test_html_is_self_contained(bad_report, tmp_path):
    p = tmp_path / "r.html"
    bad_report.write_html(p)
    page = p.read_text()
    assert "http://" not in page and "https://" not in page and "<script src" not in page
    for word in ("native", "decomposed", "fallback", "unsupported dtype", "Totals per device", "Failing cases"):
        assert word in page
    assert "cfbad:0-cross_entropy-any-errors" in page and "result shape is (6,)" in page


# --- the command line ---------------------------------------------------------------------------
def test_cli_exit_codes_and_reports(tmp_path, capsys, test_devices):
    j, h = tmp_path / "c.json", tmp_path / "c.html"
    assert cli.main(["--device", "cpu", "--op", "add", "--op", "sum", "--json", str(j), "--html", str(h), "-q"]) == 0
    out = capsys.readouterr().out
    assert "all cases pass" in out and j.exists() and h.exists()
    assert cli.main(["--device", "cfbad", "--op", "abs", "--dtype", "float32", "-q"]) == 1
    assert "FAIL cfbad:0-abs-float32-shape" in capsys.readouterr().out
    assert cli.main(["--device", "nosuchdevice", "-q"]) == 2
    assert cli.main(["--op", "addd", "-q"]) == 2
    assert "did you mean add" in capsys.readouterr().err


# --- the pytest plugin --------------------------------------------------------------------------
def _pytest(*args):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs",
                        "anydevice_conformance", *args], capture_output=True, text=True, env=env, cwd="/tmp")
    return r.returncode, r.stdout + r.stderr


def test_pytest_plugin(tmp_path):
    rc, out = _pytest()
    assert rc == 0 and "1 skipped" in out  # nothing runs without --anydevice-device
    xf = tmp_path / "xfail.txt"
    xf.write_text("# known failures\ncpu:0-add-float32-values  # listed on purpose\n")
    rc, out = _pytest("--anydevice-device=cpu", "--anydevice-op=add", "--anydevice-dtype=float32",
                      f"--anydevice-xfail={xf}", "--anydevice-xfail-strict")
    assert "test_conformance[cpu:0-add-float32-values]" in out
    assert "4 passed" in out and "1 failed" in out and "XPASS(strict)" in out  # the listed case passes
    rc, out = _pytest("--anydevice-device=cpu", "--anydevice-op=add", "-n", "2")
    assert rc == 0 and "passed" in out and "failed" not in out


# --- one row per distinct device model ------------------------------------------------------------
class ModelsRuntime(fakes.HostRuntime):
    """Six physical devices: 0 and 3 are one model; 4 has another driver, 5 lacks float64, 1 is
    another name; the probe rejects 2."""

    NAMES = {0: "Alpha", 1: "Beta", 2: "Alpha", 3: "Alpha", 4: "Alpha", 5: "Alpha"}

    def __init__(self):
        super().__init__(count=6)

    def properties(self, index):
        return {"name": self.NAMES[index], "driver_version": "2.0" if index == 4 else "1.0",
                "total_memory": 1 << 30, "serial": f"SN{index}"}

    def dtypes(self, index):
        return [d for d in _dt.ALL_DTYPES if index != 5 or d.name not in ("float64", "complex128")]

    def probe(self, index):
        if index == 2:
            raise DeviceUnavailableError("firmware too old on device 2", hint="update the firmware")


@pytest.fixture
def models_device():
    with fakes.installed(fakes.FakePlugin(types=("cfmodels",), runtime=ModelsRuntime()), name="cfmodels"):
        yield "cfmodels"


def test_type_spec_tests_one_device_per_model(models_device, tmp_path, capsys):
    report = adc.run(devices=["cfmodels"], ops=["add"], dtypes=["float32"])
    rows = {d["device"]: d["stands_for"] for d in report.devices}
    # visible cfmodels:0..4 are physical 0, 1, 3, 4, 5; cfmodels:2 (physical 3) is the model of cfmodels:0
    assert rows == {"cfmodels:0": ["cfmodels:0", "cfmodels:2"], "cfmodels:1": ["cfmodels:1"],
                    "cfmodels:3": ["cfmodels:3"], "cfmodels:4": ["cfmodels:4"]}
    assert {c.device for c in report.cases} == set(rows)  # identical devices are not tested again
    assert report.devices[0]["model"] == {"name": "Alpha", "driver_version": "1.0"}
    assert report.label("cfmodels:0") == "cfmodels:0 (stands for cfmodels:0, cfmodels:2)"
    [u] = report.unusable
    assert u == {"type": "cfmodels", "physical_index": 2, "reason": "firmware too old on device 2",
                 "hint": "update the firmware", "kept_visible": False}
    assert report.ok  # an unusable device is listed, not a failure

    p = tmp_path / "r.json"
    report.write_json(p)
    d = json.loads(p.read_text())
    assert d["devices"][0]["stands_for"] == ["cfmodels:0", "cfmodels:2"] and d["unusable"] == [u]
    back = Report.read_json(p)
    assert back.stands_for("cfmodels:0") == ["cfmodels:0", "cfmodels:2"] and back.unusable == [u]
    page = report.to_html()
    assert "cfmodels:0, cfmodels:2" in page and "Devices not tested" in page and "firmware too old" in page
    assert "Alpha · driver_version 1.0 &middot; 15 dtypes" in page and "Alpha · driver_version 1.0 &middot; 13 dtypes" in page

    assert cli.main(["--device", "cfmodels", "--op", "add", "--dtype", "float32", "-q"]) == 0
    out = capsys.readouterr().out
    assert "cfmodels:0 (stands for cfmodels:0, cfmodels:2)" in out and "cfmodels:3 " in out
    assert "UNUSABLE cfmodels physical device 2 (not tested): firmware too old on device 2 (update the firmware)" in out


def test_indexed_spec_tests_exactly_that_device(models_device):
    report = adc.run(devices=["cfmodels:2"], ops=["add"], dtypes=["float32"])
    assert [(d["device"], d["stands_for"]) for d in report.devices] == [("cfmodels:2", ["cfmodels:2"])]
    assert {c.device for c in report.cases} == {"cfmodels:2"} and report.label("cfmodels:2") == "cfmodels:2"
    assert report.devices[0]["model"] == {"name": "Alpha", "driver_version": "1.0"}  # physical device 3


def test_kept_unusable_device_is_a_model_of_its_own(monkeypatch):
    monkeypatch.setenv("ANYDEVICE_KEEP_UNUSABLE", "1")
    with fakes.installed(fakes.FakePlugin(types=("cfkept",), runtime=ModelsRuntime()), name="cfkept"):
        report = adc.run(devices=["cfkept"], ops=["add"], dtypes=["float32"])
    rows = {d["device"]: d["stands_for"] for d in report.devices}
    assert rows["cfkept:0"] == ["cfkept:0", "cfkept:3"] and rows["cfkept:2"] == ["cfkept:2"]
    assert report.unusable[0]["kept_visible"] is True


def test_all_groups_identical_sim_devices(models_device):
    report = adc.run(devices=["all"], ops=["add"], dtypes=["float32"])
    rows = {d["device"]: d["stands_for"] for d in report.devices}
    n = ad.device.device_count("npu")
    assert n > 1 and rows["npu:0"] == [f"npu:{i}" for i in range(n)]  # the simulator's chips are one model
    assert report.label("npu:0") == f"npu:0 (stands for npu:0..npu:{n - 1})"
    assert rows["cfmodels:0"] == ["cfmodels:0", "cfmodels:2"] and "cfmodels:2" not in rows
    assert [u["physical_index"] for u in report.unusable] == [2]
    assert {u["type"] for u in report.unavailable} == {t for t in ad.device.get_all_device_type()
                                                     if not ad.device.is_available(t)}


# --- --no-fallback ----------------------------------------------------------------------------------
def test_no_fallback_fails_naming_ops_and_dtypes(test_devices, capsys):
    argv = ["--device", "cfnone", "--op", "add", "--op", "sin", "--op", "positive", "--dtype", "float32", "-q"]
    assert cli.main(argv) == 0  # without the gate a runtime-only plugin passes
    assert "all cases pass" in capsys.readouterr().out
    assert cli.main(argv + ["--no-fallback"]) == 1
    out = capsys.readouterr().out
    assert "FALLBACK cfnone:0 add ran on the CPU (float32)" in out and "FALLBACK cfnone:0 sin" in out
    assert "positive" not in out.split("FALLBACK", 1)[1]  # positive(x) = x decomposes without a kernel
    assert "2 op(s) ran through the CPU fallback on 1 device(s) (no-fallback)" in out


def test_no_fallback_on_sim_devices(tmp_path, capsys):
    """The npu has a kernel or decomposition for every op; the xpu deliberately lacks erf, round and
    bitwise_left_shift (and gelu decomposes through erf), so exactly those fall back."""
    missing = _backend.get_backend("xpu").runtime.profile.missing_ops
    assert set(missing) == {"erf", "round", "bitwise_left_shift"}
    report = adc.run(devices=["xpu"], no_fallback=True)
    assert report.cases_ok and not report.ok
    fb = {f["op"]: f["dtypes"] for f in report.fallbacks()}
    assert {f["device"] for f in report.fallbacks()} == {"xpu:0"}
    assert set(fb) == set(missing) | {"gelu"}
    assert "erf" in repr(get_op("gelu").decomposition.__code__.co_names)
    xpu_float = [d.name for d in devices.as_device("xpu").dtypes if d.kind == "float"]
    assert sorted(fb["erf"]) == sorted(xpu_float)
    d = json.loads(report.to_json())
    assert d["no_fallback"] is True and d["ok"] is False
    assert {f["op"] for f in d["fallbacks"]} == set(fb)
    page = report.to_html()
    assert "CPU fallbacks (4 op(s))" in page and "not allowed (no-fallback)" in page
    assert cli.main(["--device", "npu", "--no-fallback", "-q"]) == 0
    assert "all cases pass, no CPU fallback" in capsys.readouterr().out


def test_pytest_plugin_no_fallback_and_devices_summary():
    n = ad.device.device_count("xpu")
    rc, out = _pytest("--anydevice-device=xpu", "--anydevice-op=erf", "--anydevice-op=add",
                      "--anydevice-dtype=float32", "--anydevice-no-fallback")
    assert rc == 1 and "3 failed, 7 passed" in out, out[-2000:]  # erf's dtype, shape and values cases
    assert "xpu:0-erf-float32-values: erf ran through the CPU fallback on xpu:0 at float32" in out
    assert "xpu:0-add-float32" not in out.split("short test summary", 1)[1]
    assert f"xpu:0 stands for xpu:0..xpu:{n - 1}" in out
