"""``anydevice bench --quick --json`` runs and reports every section (no timing is asserted: the
figures are ratios for people to read, measured on whatever machine runs them)."""
from __future__ import annotations

import json
import math
import sys

from anydevice.tools import bench


def test_bench_quick_json_has_every_section(capsys):
    had_torch = "torch" in sys.modules
    assert bench.main(["--quick", "--json", "--device", "cpu", "--no-torch"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {"load", "threads", "devices", "notes", "tiny_add_seconds", "ops", "mlp_step", "add16m_gbs",
            "matmul1024_gflops"} <= set(report)
    assert report["devices"] == ["cpu:0"] and report["threads"] == 1
    assert len(report["load"]["start"]) == 3 and len(report["load"]["end"]) == 3
    rows = {(r["op"], r["size"]) for r in report["ops"]}
    for op in ("add", "sum", "sum(axis=0)", "max", "mean", "var", "matmul", "reshape", "permute_dims", "x[1:3]",
               "concat", "where", "softmax", "log_softmax", "astype"):
        assert {(op, 16), (op, 4096)} <= rows
    for r in report["ops"]:
        fwd = r["forward"]
        assert {"anydevice", "numpy", "kernel"} <= set(fwd) and "anydevice" in r["backward"]
        for s in (*fwd.values(), *r["backward"].values()):
            assert 0 < s["min"] <= s["median"] <= s["max"]
    step = report["mlp_step"]["anydevice cpu:0"]
    assert 0 < step["median"] and math.isfinite(step["final_loss"]) and step["final_loss"] < 2.31  # below log(10)
    assert any("torch left out" in n for n in report["notes"])
    assert had_torch or "torch" not in sys.modules  # --no-torch never imports it


def test_bench_only_runs_the_sections_asked_for(capsys):
    assert bench.main(["--quick", "--json", "--device", "cpu", "--no-torch", "--only", "mlp"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ops"] == [] and report["tiny_add_seconds"] == {} and report["add16m_gbs"] == {}
    assert list(report["mlp_step"]) == ["anydevice cpu:0"]
