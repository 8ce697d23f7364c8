"""``anydevice check --distributed N``: the JSON figures and correctness flags of the multi-process stage,
and the collective backends every report lists (no timing asserts)."""
from __future__ import annotations

import json

import jsonschema
import pytest

import anydevice.distributed as dist
from anydevice import check
from anydevice.tools.check import distributed as stage

needs_mpi = pytest.mark.skipif(not dist.is_available(), reason="needs mpi4py (pip install 'anydevice[mpi]')")


@needs_mpi
def test_two_processes_on_cpu_and_npu(capsys):
    code = check.main(["--device", "cpu", "--device", "npu", "--quick", "--distributed", "2", "--json"])
    report = json.loads(capsys.readouterr().out)
    jsonschema.validate(report, check.SCHEMA)
    assert code == 0 and report["exit_code"] == 0 and report["options"]["distributed"] == 2
    d = report["distributed"]
    assert d["world_size"] == 2 and list(d["types"]) == ["cpu", "npu"]
    assert d["types"]["cpu"]["communicator"] == "mpi"
    assert d["types"]["npu"]["communicator"] == "simccl"        # the simulated npu's vendor collectives
    for ty, entry in d["types"].items():
        assert entry["status"] == "passed", entry["detail"]
        stages = {s["name"]: s for s in entry["stages"]}
        assert list(stages) == list(stage.STAGES)
        assert all(s["status"] == "passed" and s["seconds"] >= 0 for s in stages.values())
        assert stages["init"]["metrics"] == {"world_size": 2, "device": "cpu:0" if ty == "cpu" else "npu:0"}
        flags = stages["all_reduce"]["metrics"]["dtypes"]
        assert {"float32", "int32", "int64", "float16"} <= set(flags) and all(flags.values())
        assert stages["barrier"]["metrics"]["latency_us"] > 0
        rows = stages["bandwidth"]["metrics"]["sizes"]
        assert [r["bytes"] for r in rows] == list(stage.SIZES)
        for r in rows:
            assert r["algbw_gbps"] == pytest.approx(r["bytes"] / r["seconds"] / 1e9)
            assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 2 * (2 - 1) / 2)
        assert "dtypes correct" in entry["detail"] and "busbw" in entry["detail"]
    names = {b["name"]: b for b in report["collectives"]}
    assert names["mpi"]["available"] and "mpi4py" in names["mpi"]["detail"] and "mpiexec" in names["mpi"]["detail"]
    assert names["nccl"]["device_types"] == ["cuda"]


def test_every_report_lists_the_collective_backends_and_no_distributed_stage(capsys):
    assert check.main(["--device", "cpu", "--quick", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    jsonschema.validate(report, check.SCHEMA)
    assert report["distributed"] is None and report["options"]["distributed"] is None
    assert [b["name"] for b in report["collectives"]] == ["mpi", "nccl"]
    assert next(b for b in report["collectives"] if b["name"] == "mpi")["available"] == dist.is_available()


def test_the_table_shows_the_backends(capsys):
    assert check.main(["--device", "cpu", "--quick"]) == 0
    assert "collective backends:\n  mpi: " in capsys.readouterr().out


def test_too_few_devices_is_skipped_and_bad_counts_refused(capsys):
    out = stage.run(["opencl"], 3, 5.0, {"opencl": 2})
    entry = out["types"]["opencl"]
    assert entry["status"] == "skipped" and entry["detail"] == "needs 3 opencl devices, 2 visible"
    assert check.main(["--distributed", "1"]) == 2
    assert "expected a number of processes >= 2, got '1'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="distributed must be a number of processes >= 2"):
        check.run(["cpu"], quick=True, distributed=1)


@needs_mpi
def test_a_rank_whose_device_is_lost_fails_its_type_naming_the_stage(monkeypatch):
    monkeypatch.setenv("ANYDEVICE_SIM_FAULTS", "npu:1:lost:after=30")   # npu:1 disappears in the all_reduce stage
    out = stage.run(["npu"], 2, 3.0, {"npu": 8})
    jsonschema.validate(out, check.SCHEMA["properties"]["distributed"])
    entry = out["types"]["npu"]
    assert entry["status"] == "failed"
    assert entry["detail"].startswith("the 2-process job failed (exit status 1) in stage all_reduce")
    assert "npu:1 (anydevice-sim-npu) is lost (injected fault)" in entry["detail"]
    assert [(s["name"], s["status"]) for s in entry["stages"]] == [("init", "passed"), ("barrier", "passed"),
                                                                    ("all_reduce", "running")]


def test_without_mpi_every_type_fails_saying_why(monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "which", lambda *a, **k: None)         # no mpiexec anywhere
    out = stage.run(["cpu", "npu"], 2, 5.0, {"npu": 8})
    for entry in out["types"].values():
        assert entry["status"] == "failed" and "unusable here" in entry["detail"]
        assert "pip install 'anydevice[mpi]'" in entry["detail"]
