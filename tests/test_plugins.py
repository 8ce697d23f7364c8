import subprocess
import sys
import textwrap

import pytest
from fakes import FakePlugin, RaisingPlugin, installed

import anydevice as ad
from anydevice.plugins.manager import FAILED, LOADED, SKIPPED, PluginRecord, manager


def test_cpu_discovered_through_entry_point():
    manager.discover()
    rec = manager.by_type["cpu"]
    assert rec.module_path == "anydevice_cpu.plugin" and rec.distribution == "anydevice"
    ad.zeros(1)
    assert rec.status == LOADED


def test_incompatible_api_version_is_skipped():
    with installed(FakePlugin(types=("future",), api_version=99), types=["future"]) as rec:
        assert rec.status == SKIPPED
        assert "API version 99" in rec.reason
        with pytest.raises(ad.DeviceUnavailableError, match="API version 99"):
            ad.zeros(1, device="future")
    assert ad.zeros(1).device.type == "cpu"


def test_plugin_raising_inside_hook_is_isolated():
    with installed(RaisingPlugin(RuntimeError("segfault-ish vendor failure"), types=("boom",))):
        with pytest.raises(ad.DeviceUnavailableError, match="raised in anydevice_create_runtime.*segfault-ish"):
            ad.devices.as_device("boom")
        assert (ad.ones(2) + 1).tolist() == [2.0, 2.0]


def test_duplicate_device_type_claim_is_skipped():
    with installed(FakePlugin(types=("dup",)), name="first"):
        with installed(FakePlugin(types=("dup",)), name="second") as rec2:
            assert rec2.status == SKIPPED
            assert "already provided by first" in rec2.reason
            assert manager.by_type["dup"].name == "first"


def test_import_failure_is_recorded(monkeypatch):
    rec = PluginRecord("anydevice_missing_vendor.plugin", "anydevice_missing_vendor.plugin", "anydevice-missing", "0.0")
    manager.discover()
    manager.records.append(rec)
    manager._claim(rec, "missingdev")
    try:
        with pytest.raises(ad.DeviceUnavailableError, match="import of anydevice_missing_vendor.plugin failed"):
            ad.devices.as_device("missingdev")
        assert rec.status == FAILED and "ModuleNotFoundError" in rec.reason
        assert ad.zeros(1).tolist() == [0.0]
    finally:
        manager.unregister(rec)
        ad._backend.forget("missingdev")


def test_missing_required_hook_fails_clearly():
    class NoRuntime:
        from anydevice.plugins import hookimpl

        @hookimpl
        def anydevice_api_version(self):
            return 1

        @hookimpl
        def anydevice_device_types(self):
            from anydevice.backend import DeviceTypeSpec

            return [DeviceTypeSpec("halfdone")]

    with installed(NoRuntime()) as rec:
        assert rec.status == FAILED
        assert "anydevice_create_runtime" in rec.reason


def _run(code, **env):
    import os

    e = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e, timeout=120)


def test_import_is_lazy():
    r = _run("""
        import sys, anydevice
        heavy = [m for m in ("pluggy", "pyopencl", "cupy", "anydevice_cpu", "anydevice_sim_npu", "anydevice_opencl",
                             "anydevice_cuda", "ml_dtypes", "importlib.metadata") if m in sys.modules]
        print(heavy)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_env_restricts_plugins():
    r = _run("""
        import anydevice
        from anydevice.plugins.manager import manager
        manager.discover()
        print(sorted((t, r.status) for t, r in manager.by_type.items()))
    """, ANYDEVICE_BACKENDS="cpu")
    assert r.returncode == 0, r.stderr
    for item in eval(r.stdout):
        assert item[0] == "cpu" or item[1] == "disabled"


def test_hookspec_validation_names_plugin():
    class BadSig:
        from anydevice.plugins import hookimpl

        @hookimpl
        def anydevice_create_runtime(self, device_type, extra_arg):
            return None

    with installed(BadSig(), types=["badsig"]) as rec:
        assert rec.status == FAILED
        assert "extra_arg" in rec.reason or "anydevice_create_runtime" in rec.reason
