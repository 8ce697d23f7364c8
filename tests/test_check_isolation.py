"""``anydevice check`` with misbehaving installed plugins: hangs, crashes, prints; the report still comes out.

Every test runs the real command in a child interpreter with fake distributions on its path
(tests/plugin_dists.py), so plugins are imported by the check's own worker processes.
"""
import json
import re
import time

import pytest
from plugin_dists import make_dist, plugin_source, run_cli, run_python

TIMEOUT = 3   # seconds per stage: long enough for a loaded 2-core machine to start a worker

HANG_IMPORT = "import time\ntime.sleep(600)\n"
HANG_RUNTIME = '''
import time


@hookimpl
def anydevice_create_runtime(device_type):
    if device_type == "hangrt":
        time.sleep(600)
    return HostRuntime()
'''
HANG_COPY = '''
import time

_copy_d2h = HostRuntime.copy_d2h


def copy_d2h(self, index, dst, src, offset):
    if index == 1:
        time.sleep(600)
    _copy_d2h(self, index, dst, src, offset)


HostRuntime.copy_d2h = copy_d2h
'''
CRASH_COPY = '''
import os

_copy_d2h = HostRuntime.copy_d2h


def copy_d2h(self, index, dst, src, offset):
    if dst.nbytes >= 1 << 20:
        os._exit(3)
    _copy_d2h(self, index, dst, src, offset)


HostRuntime.copy_d2h = copy_d2h
'''
CHATTY = '''
import os
import sys

print("chatty: hello from import {")
sys.stderr.write("chatty: warning on stderr\\n")
os.write(1, b"chatty: raw write to fd 1 ]\\n")


@hookimpl
def anydevice_environment(device_type):
    print("chatty: environment hook")
    return {"sdk": "chatty-sdk 1.0"}


_copy_h2d = HostRuntime.copy_h2d


def copy_h2d(self, index, dst, offset, src):
    print(f"chatty: upload of {src.nbytes} bytes to device {index}", "." * 100)
    _copy_h2d(self, index, dst, offset, src)


HostRuntime.copy_h2d = copy_h2d
'''


def _dist(root, name, types, extra=""):
    mod = name.replace("-", "_")
    make_dist(root, name, {t: mod for t in types}, {mod: plugin_source(types, extra=extra)})


def _check(root, *args, **env):
    t0 = time.perf_counter()
    res = run_cli(["check", "--json", *args], root, timeout=60, **env)
    seconds = time.perf_counter() - t0
    assert res.stdout, res.stderr
    return json.loads(res.stdout), res, seconds


def _flat(table: str) -> str:
    """The text of a printed table as one line (cells wrap at any width)."""
    return " ".join(re.sub("[│┃]", " ", table).split())


def _checks(entry):
    return {c["name"]: c for c in entry["checks"]}


def test_hangs_in_import_runtime_and_a_check_time_out_and_the_rest_is_reported(tmp_path):
    _dist(tmp_path, "hang-import", ["hangimp"], HANG_IMPORT)
    _dist(tmp_path, "hang-runtime", ["hangrt", "hangrt2"], HANG_RUNTIME)
    _dist(tmp_path, "hang-copy", ["hangcp"], HANG_COPY)
    report, res, seconds = _check(tmp_path, "--quick", "--timeout", str(TIMEOUT),
                                  "-d", "cpu,hangimp,hangrt,hangrt2,hangcp")
    assert seconds < TIMEOUT + 8, f"took {seconds:.1f} s"
    assert res.returncode == 1 == report["exit_code"]
    devs = report["devices"]
    assert devs["cpu"]["status"] == "passed"
    # the import hang: every type of the plugin, and its plugin row
    imp = devs["hangimp"]
    assert imp["status"] == "timed_out" and imp["stage"] == "import"
    assert "timed out in stage 'import'" in imp["reason"] and "hang_import" in imp["reason"]
    assert f"within {TIMEOUT} s" in imp["reason"] and "--timeout" in imp["hint"]
    row = next(p for p in report["plugins"] if p["distribution"] == "hang-import")
    assert row["status"] == "timed_out" and "import" in row["reason"]
    # the runtime hang: only that type; the plugin's other type is checked by a new worker
    rt = devs["hangrt"]
    assert rt["status"] == "timed_out" and rt["stage"] == "runtime" and "creating the hangrt runtime" in rt["reason"]
    assert devs["hangrt2"]["status"] == "passed"
    # the hang inside a check names the check and the device; the checks after it did not run
    cp = devs["hangcp"]
    mem = _checks(cp)["memory"]
    assert cp["status"] == "timed_out" and cp["stage"] == "memory"
    assert mem["status"] == "timed_out" and mem["failed_on"] == ["hangcp:1"] and "memory check on hangcp:1" in mem["detail"]
    assert _checks(cp)["properties"]["status"] == "passed"
    assert _checks(cp)["compute"]["status"] == "skipped" and "not run" in _checks(cp)["compute"]["detail"]
    assert "could not finish checking hangcp" in cp["verdict"] and "memory check on hangcp:1" in cp["verdict"]


def test_table_shows_timed_out(tmp_path):
    _dist(tmp_path, "hang-copy", ["hangcp"], HANG_COPY)
    res = run_cli(["check", "--quick", "--timeout", str(TIMEOUT), "-d", "hangcp"], tmp_path, timeout=60, COLUMNS="200")
    assert res.returncode == 1
    flat = _flat(res.stdout)
    assert "timed out" in flat and "memory check on hangcp:1" in flat and "Traceback" not in flat


def test_a_crashing_worker_and_a_chatty_plugin_leave_the_json_intact(tmp_path):
    _dist(tmp_path, "crashy", ["crashy"], CRASH_COPY)
    _dist(tmp_path, "chatty", ["chatty"], CHATTY)
    report, res, _ = _check(tmp_path, "--quick", "-d", "crashy,chatty,cpu")  # json.loads in _check: stdout is clean
    devs = report["devices"]
    crash = devs["crashy"]
    assert crash["status"] == "failed" and crash["stage"] == "memory"
    assert "exited with status 3" in crash["reason"] and "memory check on crashy:0" in crash["reason"]
    assert devs["chatty"]["status"] == "passed" and devs["cpu"]["status"] == "passed"
    assert devs["chatty"]["environment"] == {"sdk": "chatty-sdk 1.0"}
    row = next(p for p in report["plugins"] if p["distribution"] == "chatty")
    said = row["plugin_output"]
    assert "hello from import {" in said and "raw write to fd 1 ]" in said and "warning on stderr" in said
    assert "upload of" in devs["chatty"]["plugin_output"]
    assert "more characters not kept" in devs["chatty"]["plugin_output"]  # truncated, not unbounded
    assert "chatty:" not in res.stderr


def test_the_parent_process_imports_no_plugin_module(tmp_path):
    _dist(tmp_path, "chatty", ["chatty"], CHATTY)
    res = run_python("""
        import json, sys
        import anydevice.check as check
        report = check.run(["chatty", "cpu"], quick=True)
        print(json.dumps({"code": report["exit_code"], "modules": sorted(m for m in sys.modules
                                                                          if m == "chatty" or m.startswith("anydevice_"))}))
    """, tmp_path, timeout=60)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out == {"code": 0, "modules": []}, res.stderr


def test_no_fallback_fails_a_runtime_only_plugin_and_names_the_ops(tmp_path):
    _dist(tmp_path, "bare-npu", ["barenpu"])  # the template registers no kernels
    strict, res, _ = _check(tmp_path, "--quick", "--no-fallback", "-d", "barenpu")
    entry = strict["devices"]["barenpu"]
    assert res.returncode == 1 and entry["status"] == "failed"
    assert {"matmul", "sum", "max"} <= set(entry["fallback_ops"])
    assert "ran on the CPU fallback on barenpu (--no-fallback)" in entry["verdict"] and "matmul" in entry["verdict"]
    assert strict["options"]["no_fallback"] is True
    lenient, res, _ = _check(tmp_path, "--quick", "-d", "barenpu")
    assert res.returncode == 0 and lenient["devices"]["barenpu"]["status"] == "passed"
    assert "matmul" in lenient["devices"]["barenpu"]["fallback_ops"]


PROBE = '''
from anydevice.errors import DeviceUnavailableError

BAD = {bad}


def _count(self):
    return 3


def _probe(self, index):
    if index in BAD:
        raise DeviceUnavailableError(f"compiler cannot build kernels for device {{index}}", hint="install compiler 2.0")


HostRuntime.device_count = _count
HostRuntime.probe = _probe
'''


def test_devices_rejected_by_the_probe_are_listed_and_do_not_fail_the_type(tmp_path):
    _dist(tmp_path, "probed", ["probed"], PROBE.format(bad="{1}"))
    _dist(tmp_path, "allbad", ["allbad"], PROBE.format(bad="{0, 1, 2}"))
    report, res, _ = _check(tmp_path, "--quick", "-d", "probed,allbad")
    probed, allbad = report["devices"]["probed"], report["devices"]["allbad"]
    assert probed["status"] == "passed" and probed["devices"] == ["probed:0", "probed:1"] and probed["count"] == 2
    [u] = probed["unusable"]
    assert u["physical_index"] == 1 and "cannot build kernels for device 1" in u["reason"]
    assert u["hint"] == "install compiler 2.0" and u["device"] == "probed physical device 1"
    assert "left out as unusable" in probed["verdict"]
    assert allbad["status"] == "unavailable" and "no usable device" in allbad["reason"]
    assert "install compiler 2.0" in allbad["hint"]
    assert res.returncode == 1  # allbad was named with --device
    table = run_cli(["check", "--quick", "-d", "probed"], tmp_path, timeout=60, COLUMNS="200")
    assert table.returncode == 0
    flat = _flat(table.stdout)
    assert "unusable" in flat and "probed physical device 1" in flat and "install compiler 2.0" in flat


def test_secret_values_never_appear_in_json_or_table(tmp_path):
    env = {"ANYDEVICE_API_TOKEN": "s3cret", "ANYDEVICE_FALLBACK": "warn", "ANYDEVICE_NPU_VISIBLE_DEVICES": "0,1"}
    report, res, _ = _check(None, "--quick", "-d", "cpu", **env)
    assert "s3cret" not in res.stdout and "s3cret" not in res.stderr
    shown = report["environment"]["env"]
    assert shown["ANYDEVICE_API_TOKEN"] == "<set, value hidden>"
    assert shown["ANYDEVICE_FALLBACK"] == "warn" and shown["ANYDEVICE_NPU_VISIBLE_DEVICES"] == "0,1"
    table = run_cli(["check", "--quick", "-d", "cpu"], None, timeout=60, COLUMNS="200", **env)
    assert "s3cret" not in table.stdout + table.stderr
    assert "ANYDEVICE_API_TOKEN=<set, value hidden>" in _flat(table.stdout) and "ANYDEVICE_FALLBACK=warn" in table.stdout


BROKEN_HOOKS = '''
@hookimpl
def anydevice_environment(device_type):
    raise ValueError("no sdk version file")


@hookimpl
def anydevice_create_runtime(device_type):
    raise RuntimeError("driver handshake failed")
'''


def test_plugin_rows_show_the_real_status_reason_and_hooks_that_raised(tmp_path):
    make_dist(tmp_path, "broken-import", {"brokimp": "broken_import"},
              {"broken_import": "raise ImportError('vendor sdk libfoo.so not found')\n"})
    _dist(tmp_path, "broken-hooks", ["brokhook"], BROKEN_HOOKS)
    _dist(tmp_path, "future-api", ["futapi"], "\n@hookimpl\ndef anydevice_api_version():\n    return 99\n")
    report, res, _ = _check(tmp_path, "--quick")
    rows = {p["distribution"]: p for p in report["plugins"]}
    imp = rows["broken-import"]
    assert imp["status"] == "failed" and "vendor sdk libfoo.so not found" in imp["reason"]
    assert "pip install --upgrade broken-import" in imp["hint"]
    hooks = rows["broken-hooks"]
    assert "anydevice_environment() raised ValueError: no sdk version file" in hooks["reason"]
    assert "driver handshake failed" in hooks["reason"]
    assert len(hooks["hook_errors"]) == 2
    assert rows["future-api"]["status"] == "skipped" and "API version 99" in rows["future-api"]["reason"]
    devs = report["devices"]
    assert devs["brokhook"]["status"] == "unavailable" and "driver handshake failed" in devs["brokhook"]["reason"]
    assert devs["brokimp"]["status"] == "unavailable" and devs["futapi"]["status"] == "unavailable"
    assert devs["cpu"]["status"] == "passed" and res.returncode == 0  # none was named with --device
    table = run_cli(["check", "--quick"], tmp_path, timeout=60, COLUMNS="250")
    assert "vendor sdk libfoo.so not found" in _flat(table.stdout) and "hooks raised" in _flat(table.stdout)


def test_two_distributions_claiming_one_type_are_both_shown(tmp_path):
    _dist(tmp_path, "dup-one", ["dupdev"])
    make_dist(tmp_path, "dup-two", {"dupdev": "dup_two"}, {"dup_two": plugin_source(["dupdev"])})
    report, res, _ = _check(tmp_path, "--quick", "-d", "cpu")
    rows = {p["distribution"]: p for p in report["plugins"]}
    for name in ("dup-one", "dup-two"):
        assert rows[name]["status"] in ("conflict", "skipped"), rows[name]
        assert "dupdev" in rows[name]["reason"]
    assert res.returncode == 0


@pytest.mark.parametrize("value", ["0", "-1", "soon", "inf"])
def test_bad_timeout_is_a_usage_error(value, capsys):
    from anydevice import check

    assert check.main(["--timeout", value]) == 2
    assert "--timeout" in capsys.readouterr().err


def test_bad_timeout_argument_of_run():
    from anydevice import check

    with pytest.raises(ValueError, match="timeout must be a positive number of seconds, not 0"):
        check.run(["cpu"], timeout=0)
