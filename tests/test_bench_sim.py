"""``benchmarks/bench_sim.py`` runs and prints every row (no timing is asserted: its figures are
ratios for people to read, measured on whatever machine runs them)."""
from __future__ import annotations

import importlib.util
import pathlib

import pytest

pytest.importorskip("anydevice_sim_npu")

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_sim.py"


def _bench_sim():
    spec = importlib.util.spec_from_file_location("bench_sim", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_sim_reports_every_op_on_every_device(capsys):
    rows = _bench_sim().main(["--devices", "npu,dcu", "--rounds", "2", "--n", "20", "--steps", "1"])
    out = capsys.readouterr().out
    names = ("add 4 x float32 (+sync)", "sum 4x4 float32 (+sync)", "MLP step 64-256-10 b256")
    assert [(r[0], r[1]) for r in rows] == [(n, d) for n in names for d in ("cpu", "npu", "dcu")]
    for _name, dev, med, lo, hi, ratio in rows:
        assert 0 < lo <= med <= hi and ratio > 0
        assert (ratio == 1.0) == (dev == "cpu")
    assert out.startswith("load average") and out.count("x cpu (target <= ") == 6
