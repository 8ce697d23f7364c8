"""Nobody takes a device type silently, and plugin records tell the truth.

Discovery tests install fake distributions (tests/plugin_dists.py) next to the real ones in a
child interpreter; record tests register plugins in-process (tests/fakes.py).
"""
import json
import sys

import numpy as np
import pytest
from fakes import FakePlugin, HostRuntime, RaisingPlugin, installed
from plugin_dists import make_dist, plugin_source, run_cli, run_python

import anydevice as ad
from anydevice.backend import DeviceTypeSpec, KernelTable
from anydevice.errors import DeviceUnavailableError, PluginError
from anydevice.plugins import hookimpl
from anydevice.plugins.manager import FAILED, LOADED, READY

SIM = "anydevice-sim-npu"
pytestmark = pytest.mark.filterwarnings("ignore::anydevice.dispatch.FallbackWarning")

#: Child program: resolves each name given on the command line, uses it, and prints one JSON
#: object with the outcome per name, every plugin record, and which watched modules got imported.
REPORT = """
    import json, os, sys
    import anydevice as ad
    from anydevice import _backend
    from anydevice.plugins.manager import manager

    out = {}
    for name in sys.argv[1:]:
        try:
            d = ad.devices.as_device(name)
            out[name] = {"type": d.type, "plugin": d._backend.record.label, "value": ad.ones(2, device=d).tolist()}
        except Exception as e:
            out[name] = {"error": type(e).__name__, "message": str(e), "hint": getattr(e, "hint", "")}
            canon = _backend.canonical_type(name)
            out[name]["reason"] = canon and ad.device.unavailable_reason(canon)
    out["types"] = ad.device.get_all_device_type()
    out["records"] = {r.label: r.as_dict() for r in manager.records}
    out["imported"] = sorted(set(sys.modules) & set(os.environ.get("WATCH", "").split(",")))
    print(json.dumps(out))
"""


def _report(root, *names, **env):
    r = run_python(REPORT, root, timeout=60, args=names, **env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _add_aliases(info, aliases: dict) -> None:
    """Give a fake distribution entry points in group anydevice.aliases (alias -> type)."""
    with open(info / "entry_points.txt", "a") as f:
        f.write("[anydevice.aliases]\n" + "".join(f"{a} = {t}\n" for a, t in aliases.items()))


def _evil_npu(root, name="aaa-evil-npu"):
    """A distribution that also claims npu; its device returns 7 for every value uploaded."""
    make_dist(root, name, {"npu": "evil_npu"}, {"evil_npu": plugin_source(["npu"], fill=7)})


# --- two distributions claiming one device type -------------------------------------------------------
@pytest.mark.parametrize("evil", ["aaa-evil-npu", "zzz-evil-npu"])
def test_two_distributions_claiming_npu_serve_neither(tmp_path, evil):
    _evil_npu(tmp_path, evil)
    out = _report(tmp_path, "npu", "xpu", WATCH="evil_npu")
    first, second = sorted([evil, SIM])
    reason = f"device type 'npu' is claimed by {first} and {second}: set ANYDEVICE_PLUGIN_NPU to one of them"
    npu = out["npu"]
    assert npu["error"] == "DeviceUnavailableError" and reason in npu["message"] and reason in npu["reason"]
    assert f"ANYDEVICE_PLUGIN_NPU={evil}" in npu["hint"] and f"ANYDEVICE_PLUGIN_NPU={SIM}" in npu["hint"]
    for dist in (evil, SIM):
        entry = out["records"][dist]["type_status"]["npu"]
        assert entry["status"] == "conflict" and entry["reason"] == reason
    assert out["records"][evil]["status"] == "conflict" and reason in out["records"][evil]["reason"]
    # the simulator still serves its other types, and the losing module was never imported
    assert out["xpu"] == {"type": "xpu", "plugin": SIM, "value": [1.0, 1.0]}
    assert out["records"][SIM]["status"] == "loaded"
    assert "npu" in out["types"] and out["imported"] == []


@pytest.mark.parametrize("choice", [SIM, "Anydevice_Sim.NPU", "aaa-evil-npu"])
def test_plugin_env_var_picks_the_distribution(tmp_path, choice):
    _evil_npu(tmp_path)
    out = _report(tmp_path, "npu", "xpu", ANYDEVICE_PLUGIN_NPU=choice)
    winner, loser = ("aaa-evil-npu", SIM) if "evil" in choice else (SIM, "aaa-evil-npu")
    assert out["npu"]["plugin"] == winner
    assert out["npu"]["value"] == ([7.0, 7.0] if winner == "aaa-evil-npu" else [1.0, 1.0])
    entry = out["records"][loser]["type_status"]["npu"]
    assert entry["status"] == "skipped"
    assert entry["reason"] == f"'npu' is served by {winner}, chosen by ANYDEVICE_PLUGIN_NPU={choice}"
    assert out["xpu"]["plugin"] == SIM and out["xpu"]["value"] == [1.0, 1.0]


def test_plugin_env_var_naming_neither_keeps_the_conflict(tmp_path):
    _evil_npu(tmp_path)
    out = _report(tmp_path, "npu", ANYDEVICE_PLUGIN_NPU="someone-else")
    assert out["npu"]["error"] == "DeviceUnavailableError"
    assert "(ANYDEVICE_PLUGIN_NPU='someone-else' names none of them)" in out["npu"]["message"]


def test_check_fails_for_the_contested_type(tmp_path):
    _evil_npu(tmp_path)
    r = run_cli(["check", "--device", "npu", "--quick", "--json"], tmp_path, timeout=60)
    assert r.returncode == 1, r.stderr
    entry = json.loads(r.stdout)["devices"]["npu"]
    assert entry["status"] == "unavailable"
    assert "device type 'npu' is claimed by aaa-evil-npu and anydevice-sim-npu" in entry["reason"]


def test_plugins_command_shows_the_conflict(tmp_path):
    _evil_npu(tmp_path)
    r = run_cli(["plugins"], tmp_path, timeout=60, ANYDEVICE_BACKENDS="cpu")
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("npu") and "conflict" in ln)
    assert "claimed by aaa-evil-npu and anydevice-sim-npu" in line
    assert "hint: ANYDEVICE_PLUGIN_NPU=aaa-evil-npu or ANYDEVICE_PLUGIN_NPU=anydevice-sim-npu" in r.stdout


# --- aliases ------------------------------------------------------------------------------------------
def _acme(root):
    """acme-accel provides type 'accel' with alias 'acc' declared in its metadata."""
    info = make_dist(root, "acme-accel", {"accel": "acme_accel"}, {"acme_accel": plugin_source(["accel"], ["acc"])})
    _add_aliases(info, {"acc": "accel"})


def _evil_acc(root):
    """evil-acc declares a device *type* named like acme's alias; its device returns 5 for everything."""
    make_dist(root, "evil-acc", {"acc": "evil_acc"}, {"evil_acc": plugin_source(["acc"], fill=5)})


@pytest.mark.parametrize("order", [("accel", "acc"), ("acc", "accel")])
def test_type_named_like_an_alias_goes_to_no_one(tmp_path, order):
    _acme(tmp_path)
    _evil_acc(tmp_path)
    out = _report(tmp_path, *order, WATCH="evil_acc")
    reason = ("name 'acc' is claimed by acme-accel (alias of 'accel') and evil-acc (device type): "
              "set ANYDEVICE_PLUGIN_ACC to one of them")
    assert out["acc"]["error"] == "DeviceUnavailableError" and reason in out["acc"]["message"]
    assert out["records"]["acme-accel"]["aliases"]["acc"] == {"type": "accel", "status": "conflict", "reason": reason}
    assert out["records"]["evil-acc"]["type_status"]["acc"]["reason"] == reason
    assert out["accel"]["plugin"] == "acme-accel" and out["imported"] == []


@pytest.mark.parametrize("choice, expected", [("acme-accel", ("accel", "acme-accel", [1.0, 1.0])),
                                              ("evil-acc", ("acc", "evil-acc", [5.0, 5.0]))])
def test_plugin_env_var_picks_who_gets_a_name(tmp_path, choice, expected):
    _acme(tmp_path)
    _evil_acc(tmp_path)
    out = _report(tmp_path, "acc", ANYDEVICE_PLUGIN_ACC=choice)
    assert (out["acc"]["type"], out["acc"]["plugin"], out["acc"]["value"]) == expected


def test_two_distributions_declaring_one_alias(tmp_path):
    _acme(tmp_path)
    info = make_dist(tmp_path, "other-accel", {"accel2": "other_accel"}, {"other_accel": plugin_source(["accel2"])})
    _add_aliases(info, {"acc": "accel2"})
    out = _report(tmp_path, "acc", "accel2")
    reason = "alias 'acc' is claimed by acme-accel and other-accel: set ANYDEVICE_PLUGIN_ACC to one of them"
    assert reason in out["acc"]["message"]
    for dist in ("acme-accel", "other-accel"):
        assert out["records"][dist]["aliases"]["acc"]["reason"] == reason
    assert out["accel2"]["plugin"] == "other-accel"


def test_alias_only_from_the_plugin_that_provides_its_type(tmp_path):
    _acme(tmp_path)
    info = make_dist(tmp_path, "squatter", {"squat": "squat_mod"}, {"squat_mod": plugin_source(["squat"])})
    _add_aliases(info, {"acc2": "accel"})
    out = _report(tmp_path, "acc", "acc2")
    assert out["acc"]["type"] == "accel"
    assert out["acc2"]["error"] == "ValueError" and "unknown device type 'acc2'" in out["acc2"]["message"]
    alias = out["records"]["squatter"]["aliases"]["acc2"]
    assert alias["status"] == "refused" and "which it does not provide" in alias["reason"]


def test_alias_declared_only_in_spec_cannot_take_a_declared_name(tmp_path):
    _evil_acc(tmp_path)
    make_dist(tmp_path, "legacy-accel", {"legacy": "legacy_mod"}, {"legacy_mod": plugin_source(["legacy"], ["acc"])})
    out = _report(tmp_path, "legacy", "acc")
    assert out["legacy"]["plugin"] == "legacy-accel"
    assert out["acc"]["plugin"] == "evil-acc"       # declared in metadata: loading legacy never takes it
    alias = out["records"]["legacy-accel"]["aliases"]["acc"]
    assert alias["status"] == "refused" and "already claimed by evil-acc" in alias["reason"]
    assert "anydevice.aliases" in alias["reason"]
    assert "legacy-accel also declares 'acc'" in out["records"]["evil-acc"]["reason"]


def test_real_cuda_gpu_alias_cannot_be_taken(tmp_path):
    pytest.importorskip("anydevice_cuda", reason="anydevice-cuda is not installed")
    make_dist(tmp_path, "evil-gpu", {"gpu": "evil_gpu"}, {"evil_gpu": plugin_source(["gpu"], fill=3)})
    out = _report(tmp_path, "gpu")
    assert "name 'gpu' is claimed by anydevice-cuda (alias of 'cuda') and evil-gpu (device type)" in out["gpu"]["message"]
    picked = _report(tmp_path, "gpu", ANYDEVICE_PLUGIN_GPU="anydevice-cuda")
    # gpu now names cuda: usable with a GPU, else cuda's own unavailable reason
    assert picked["gpu"].get("type") == "cuda" or picked["gpu"]["message"].startswith("cuda: ")
    assert picked["records"]["evil-gpu"]["type_status"]["gpu"]["status"] == "skipped"


# --- the built-in cpu -----------------------------------------------------------------------------------
@pytest.mark.parametrize("env", [{}, {"ANYDEVICE_PLUGIN_CPU": "evil-cpu"}])
def test_nobody_takes_cpu(tmp_path, env):
    make_dist(tmp_path, "evil-cpu", {"cpu": "evil_cpu"}, {"evil_cpu": plugin_source(["cpu"], fill=9)})
    out = _report(tmp_path, "cpu", WATCH="evil_cpu", **env)
    assert out["cpu"] == {"type": "cpu", "plugin": "anydevice", "value": [1.0, 1.0]}
    rec = out["records"]["evil-cpu"]
    assert rec["type_status"]["cpu"] == {"status": "refused", "hint": rec["type_status"]["cpu"]["hint"],
                                         "reason": "'cpu' is built into anydevice; evil-cpu may not provide it"}
    assert rec["status"] == "skipped" and "built into anydevice" in rec["reason"]
    assert out["imported"] == []


# --- a plugin whose import hangs --------------------------------------------------------------------------
def test_a_hanging_plugin_import_does_not_hang_names_or_listing(tmp_path):
    make_dist(tmp_path, "slow-vendor", {"slowdev": "slow_plugin"}, {"slow_plugin": "import time\ntime.sleep(600)\n"})
    _acme(tmp_path)
    code = """
        import json, sys, time
        import anydevice as ad
        from anydevice import _backend
        t0 = time.perf_counter()
        try:
            ad.set_device("nosuch")
        except ValueError as e:
            msg = str(e)
        out = {"message": msg, "types": ad.device.get_all_device_type(), "acc": _backend.canonical_type("acc"),
               "unknown": _backend.canonical_type("nosuch2"), "count": ad.device.device_count("nosuch"),
               "imported": [m for m in ("slow_plugin", "acme_accel") if m in sys.modules],
               "seconds": time.perf_counter() - t0}
        print(json.dumps(out))
    """
    r = run_python(code, tmp_path, timeout=20)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["message"].startswith("unknown device type 'nosuch'. Available: cpu")
    assert "Installed, not loaded yet: " in out["message"] and "slowdev" in out["message"]
    assert "slowdev" in out["types"] and out["acc"] == "accel" and out["unknown"] is None and out["count"] == 0
    assert out["imported"] == [] and out["seconds"] < 10


# --- records tell the truth -------------------------------------------------------------------------------
def test_create_runtime_raising_marks_the_type_failed():
    with installed(RaisingPlugin(RuntimeError("vendor init exploded"), types=("boomdev",)), name="boom-plugin") as rec:
        with pytest.raises(DeviceUnavailableError, match="raised in anydevice_create_runtime"):
            ad.devices.as_device("boomdev")
        status, reason = rec.type_status["boomdev"]
        assert status == FAILED and "anydevice_create_runtime()" in reason
        assert "RuntimeError: vendor init exploded" in reason and "boom-plugin" in reason
        assert rec.status == FAILED and rec.as_dict()["type_status"]["boomdev"]["status"] == "failed"
        assert "report this to the vendor of boom-plugin" in rec.hints["boomdev"]


class HalfBroken(FakePlugin):
    """Two types; creating the runtime of 'halfbad' raises."""

    @hookimpl
    def anydevice_create_runtime(self, device_type):
        if device_type == "halfbad":
            raise OSError("libvendor.so: cannot open shared object file")
        return HostRuntime()


def test_one_failed_type_leaves_the_others_serving():
    with installed(HalfBroken(types=("halfgood", "halfbad")), name="half-plugin") as rec:
        assert ad.ones(2, device="halfgood").tolist() == [1.0, 1.0]
        with pytest.raises(DeviceUnavailableError, match="libvendor.so"):
            ad.ones(2, device="halfbad")
        assert rec.type_status["halfgood"] == (READY, "")
        assert rec.type_status["halfbad"][0] == FAILED and "OSError" in rec.type_status["halfbad"][1]
        assert rec.status == LOADED and "libvendor.so" in rec.reason


class KernelRaising(FakePlugin):
    @hookimpl
    def anydevice_register_kernels(self, device_type, runtime, kernels):
        raise KeyError("no such kernel library")


class KernelNotCallable(FakePlugin):
    @hookimpl
    def anydevice_register_kernels(self, device_type, runtime, kernels):
        kernels.register("add", "vendor_add_f32")


@pytest.mark.parametrize("plugin, words", [
    (KernelRaising(types=("krdev",)), ["anydevice_register_kernels()", "KeyError", "no such kernel library"]),
    (KernelNotCallable(types=("krdev",)), ["anydevice_register_kernels()", "PluginError", "plugin kernel-plugin",
                                           "'vendor_add_f32'", "op 'add'", "must be a callable"]),
])
def test_register_kernels_failure_marks_the_type_failed(plugin, words):
    with installed(plugin, name="kernel-plugin") as rec:
        with pytest.raises(DeviceUnavailableError) as e:
            ad.devices.as_device("krdev")
        for w in words:
            assert w in str(e.value) and w in rec.type_status["krdev"][1]
        assert rec.status == FAILED


def test_kernel_table_refuses_non_callables():
    with pytest.raises(PluginError, match=r"plugin acme registered 3 \(int\) as the npu kernel of op 'exp'"):
        KernelTable("npu", plugin="acme").register("exp", 3)


class Unmarked(FakePlugin):
    """Overrides a required hook but forgets @hookimpl on it."""

    def anydevice_create_runtime(self, device_type):
        return HostRuntime()


class UnmarkedKernels(FakePlugin):
    def anydevice_register_kernels(self, device_type, runtime, kernels):
        pass


def test_hook_without_the_marker_is_named():
    with installed(Unmarked(types=("unmarked",)), name="forgetful") as rec:
        assert rec.status == FAILED
        assert ("plugin forgetful defines anydevice_create_runtime() but without the "
                "@anydevice.plugins.hookimpl marker") in rec.reason
    with installed(UnmarkedKernels(types=("unmk",)), name="forgetful2") as rec:
        assert ad.ones(1, device="unmk").tolist() == [1.0]
        assert rec.status == LOADED
        assert "defines anydevice_register_kernels() but without the @anydevice.plugins.hookimpl marker, so it " \
               "is never called" in rec.reason


class Answers(FakePlugin):
    def __init__(self, version=1, specs=None, count=2, **kw):
        super().__init__(**kw)
        self.version, self.specs, self.count = version, specs, count

    @hookimpl
    def anydevice_api_version(self):
        return self.version

    @hookimpl
    def anydevice_device_types(self):
        return self.specs if self.specs is not None else super().anydevice_device_types()

    @hookimpl
    def anydevice_create_runtime(self, device_type):
        rt = HostRuntime()
        rt.device_count = lambda: self.count
        return rt


@pytest.mark.parametrize("plugin, expected", [
    (Answers(version="1"), "anydevice_api_version() of plugin answers returned '1' (str); expected an int such as 1"),
    (Answers(version=True), "anydevice_api_version() of plugin answers returned True (bool)"),
    (Answers(specs=DeviceTypeSpec("ansdev")), "anydevice_device_types() of plugin answers returned one DeviceTypeSpec "
                                              "('ansdev'); expected a list of DeviceTypeSpec"),
    (Answers(specs=["ansdev"]), "returned 'ansdev' in its list; expected DeviceTypeSpec"),
    (Answers(specs=[DeviceTypeSpec("ans-dev")]), "a DeviceTypeSpec named 'ans-dev'; a device type is a word"),
])
def test_garbage_from_setup_hooks_fails_the_plugin(plugin, expected):
    with installed(plugin, name="answers", types=["ansdev"]) as rec:
        assert rec.status == FAILED and expected in rec.reason
        with pytest.raises(DeviceUnavailableError, match="plugin answers failed"):
            ad.devices.as_device("ansdev")


@pytest.mark.parametrize("count", ["3", True, 2.7, -1, 5000, None])
def test_garbage_device_count_makes_the_type_unavailable(count):
    with installed(Answers(count=count, types=("cntdev",)), name="counting") as rec:
        expected = f"device_count() of plugin counting returned {count!r} ({type(count).__name__}); expected an int " \
                   f"from 0 to 4096"
        with pytest.raises(DeviceUnavailableError) as e:
            ad.devices.as_device("cntdev")
        assert expected in str(e.value) and expected in ad.device.unavailable_reason("cntdev")
        assert rec.type_status["cntdev"][0] == FAILED


def test_numpy_device_count_is_accepted():
    with installed(Answers(count=np.int64(3), types=("npcnt",))):
        assert ad.device.device_count("npcnt") == 3


def returns_host_array(ctx, a, b):
    return np.zeros(3, np.float32)


def returns_other_device(ctx, a, b):
    return ctx._backend.empty(1 - ctx.device.index, a.shape, a.dtype)


@pytest.mark.parametrize("kernel, expected", [
    (returns_host_array, r"returned array\(\[0\., 0\., 0\.\], dtype=float32\) \(ndarray\); expected a DeviceArray "
                        r"allocated on badk:0"),
    (returns_other_device, r"returned DeviceArray\(shape=\(3,\), dtype=float32, device_index=1\) \(DeviceArray\); "
                          r"expected a DeviceArray allocated on badk:0 .*, not memory of another device"),
])
def test_kernel_returning_a_foreign_buffer_is_named(kernel, expected):
    with installed(FakePlugin(types=("badk",), kernels={"add": (kernel, False)}), name="badk-plugin"):
        x = ad.ones(3, device="badk")
        for call in (lambda: ad.add(x, x), lambda: x + x):   # refused every time, not only on the first call
            with pytest.raises(PluginError, match=f"kernel test_plugin_trust.{kernel.__name__}\\(\\) of op 'add' "
                                                  f"on badk:0 \\(plugin badk-plugin\\) {expected}"):
                call()


# --- anydevice plugins -------------------------------------------------------------------------------------
NOISY = plugin_source(["noisydev"], extra='''
    import os
    print("hello from the noisy import")


    class ProbingRuntime(HostRuntime):
        def probe(self, index):
            if index == 1:
                from anydevice.errors import DeviceUnavailableError
                raise DeviceUnavailableError("compiler cannot build for device 1", hint="install compiler 2.0")


    @hookimpl
    def anydevice_create_runtime(device_type):
        print("creating the noisy runtime")
        os.write(1, b"native library noise\\n")
        return ProbingRuntime(count=3)
''')


def test_plugins_command_shows_types_unusable_devices_and_output(tmp_path):
    make_dist(tmp_path, "noisy-vendor", {"noisydev": "noisy_plugin"}, {"noisy_plugin": NOISY})
    r = run_cli(["plugins", "--json"], tmp_path, timeout=60, ANYDEVICE_BACKENDS="noisydev")
    assert r.returncode == 0, r.stderr
    rec = next(p for p in json.loads(r.stdout) if p["distribution"] == "noisy-vendor")   # stdout is only JSON
    entry = rec["type_status"]["noisydev"]
    assert entry["status"] == "ready" and rec["status"] == "loaded"
    assert entry["unusable_devices"] == [{"physical_index": 1, "reason": "compiler cannot build for device 1",
                                          "hint": "install compiler 2.0", "kept_visible": False}]
    assert "hello from the noisy import" in rec["output"] and "creating the noisy runtime" in rec["output"]
    text = run_cli(["plugins"], tmp_path, timeout=60, ANYDEVICE_BACKENDS="noisydev")
    assert text.returncode == 0, text.stderr
    assert "noisy-vendor 1.0 (noisy_plugin): loaded" in text.stdout
    assert ("unusable physical device 1: compiler cannot build for device 1 (hint: install compiler 2.0)"
            in text.stdout)
    assert "| hello from the noisy import" in text.stdout


def test_plugin_output_is_kept_off_the_terminal(capsys):
    class Chatty(FakePlugin):
        @hookimpl
        def anydevice_create_runtime(self, device_type):
            print("vendor banner v1.0")
            print("vendor warning", file=sys.stderr)
            return HostRuntime()

    with installed(Chatty(types=("chatty",))) as rec:
        ad.ones(1, device="chatty")
        assert "vendor banner v1.0" in rec.output and "vendor warning" in rec.output
    captured = capsys.readouterr()
    assert "vendor" not in captured.out and "vendor" not in captured.err
