"""anydevice.distributed across processes: mpiexec jobs of the workers in tests/dist_workers/.

Each job is a few seconds; ANYDEVICE_SLOW=1 adds the 4-process jobs of every device type.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py")
WORKERS = Path(__file__).parent / "dist_workers"
MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
SLOW = os.environ.get("ANYDEVICE_SLOW") == "1"
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec (pip install 'anydevice[mpi]')")


def mpirun(n: int, worker: str, *args, timeout: float = 60, flags=(), env=None):
    """Run ``worker`` on ``n`` ranks; returns (completed process, {rank: report})."""
    out = Path(args[-1]) if args else None
    e = dict(os.environ, PYTHONWARNINGS="ignore", ANYDEVICE_FALLBACK="warn", **(env or {}))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "ANYDEVICE_DEVICE"):
        e.pop(k, None)
    p = subprocess.run([MPIEXEC, *flags, "-n", str(n), sys.executable, str(WORKERS / worker), *map(str, args)],
                       capture_output=True, text=True, timeout=timeout, env=e)
    reports = {}
    if out is not None:
        for f in sorted(out.glob("rank*.json")):
            r = json.loads(f.read_text())
            reports[r["rank"]] = r
    return p, reports


CASES = [(2, "cpu", "float32,float64,int32,bool"), (2, "npu", "float32,int32,bool,float16,bfloat16"),
         (4, "cpu", "float32,int32,bool")]
if SLOW:
    CASES += [(4, "npu", "float32,int32,bool,float16"), (2, "xpu", "float32,bool"), (2, "dcu", "float64,int32")]


@pytest.mark.parametrize("n,device,dtypes", CASES, ids=[f"{n}x{d}" for n, d, _ in CASES])
def test_every_collective_matches_numpy(tmp_path, n, device, dtypes):
    p, reports = mpirun(n, "collectives.py", device, dtypes, tmp_path)
    assert sorted(reports) == list(range(n)), p.stdout + p.stderr
    for r, rep in reports.items():
        assert rep["failures"] == [], rep["failures"]
        # every rank checks every collective of every dtype (gather/recv ranks check a few more)
        assert rep["checks"] >= 15 * len(dtypes.split(",")), rep
