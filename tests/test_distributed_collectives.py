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
         (4, "cpu", "float64,bool"), (4, "npu", "float32,int32")]
if SLOW:
    CASES += [(4, "cpu", "float32,int32,uint8,complex64"), (4, "npu", "bool,float16,bfloat16"), (2, "xpu", "float32,bool"),
              (2, "dcu", "float64,int32,complex128")]


@pytest.mark.parametrize("n,device,dtypes", CASES, ids=[f"{n}x{d}" for n, d, _ in CASES])
def test_every_collective_matches_numpy(tmp_path, n, device, dtypes):
    p, reports = mpirun(n, "collectives.py", device, dtypes, tmp_path)
    assert sorted(reports) == list(range(n)), p.stdout + p.stderr
    for rep in reports.values():
        assert rep["failures"] == [], rep["failures"]
        # every rank checks every collective of every dtype (gather/recv ranks check a few more)
        assert rep["checks"] >= 15 * len(dtypes.split(",")), rep


FAULTS = [("exit", "cpu", 2, ()), ("hang", "npu", 2, ()), ("crash", "cpu", 3, ("-disable-auto-cleanup",))]
if SLOW:
    FAULTS += [("exit", "npu", 4, ()), ("hang", "cpu", 4, ())]


@pytest.mark.parametrize("mode,device,n,flags", FAULTS, ids=[f"{m}-{d}-{n}" for m, d, n, _ in FAULTS])
def test_a_missing_rank_makes_the_others_time_out(tmp_path, mode, device, n, flags):
    """The last rank exits right after init, hangs, or dies; every other rank raises within the 3 s timeout."""
    p, reports = mpirun(n, "faults.py", mode, device, 3, tmp_path, flags=flags, timeout=40)
    assert sorted(reports) == list(range(n - 1)), p.stdout + p.stderr
    for r, rep in reports.items():
        assert rep["error"] == "DistributedTimeoutError", rep
        assert 3.0 <= rep["seconds"] < 4.5, rep
        msg = rep["message"]
        assert msg.startswith(f"all_reduce() timed out after 3 s on world rank {r} in a group of {n}"), msg
        assert f"world rank(s) [{n - 1}] did not arrive" in msg, msg
        # the group is broken afterwards: the next collective fails at once, saying why
        assert rep["after"] == "DistributedError" and rep["after_seconds"] < 0.5, rep
        assert "broken since an earlier failure (all_reduce() timed out" in rep["after_message"]


def test_vendor_collectives_and_the_counted_fallback_to_mpi(tmp_path):
    n = 2
    p, reports = mpirun(n, "backends.py", tmp_path)
    assert sorted(reports) == list(range(n)), p.stdout + p.stderr
    for rep in reports.values():
        # npu's plugin gives simccl: all_reduce runs there, right and uncounted
        assert rep["backend_npu"] == "simccl" and rep["all_reduce_ok"] and rep["after_all_reduce"] == {}
        # its modelled time sits on npu:0's clock: 2 (n-1) steps of 8 us + 2 (n-1)/n of 1 MiB at 50 GB/s
        [(name, seconds)] = rep["trace"]
        assert name == "simccl.all_reduce"
        assert seconds == pytest.approx(2 * (n - 1) * 8e-6 + 2 * (n - 1) / n * (1 << 20) / 50e9, rel=1e-9)
        # an async simccl all_reduce returns at once although the kernel producing its input takes 0.5 s:
        # it starts when the device's stream gets there (a host-staged one would wait for the kernel)
        assert rep["async_start_s"] < 0.25 and rep["async_total_s"] >= 0.5 and rep["async_value"] == [3.0, 6.0], rep
        # reduce (not simccl's), float16 all_reduce (declined) and xpu (no collectives) go through MPI, counted
        assert rep["counts"] == {"reduce/npu": 2, "all_reduce/npu": 1, "all_reduce/xpu": 3}
        assert rep["warnings"] == ["all_reduce() has no xpu collective",
                                   "all_reduce() on npu was declined by its communicator 'simccl' for these tensors",
                                   "reduce() has no npu collective"]  # once each
        assert rep["float16_value"] == [2.0, 4.0] and rep["xpu_value"] == [3.0]
        # backend="mpi" asked for: chosen, not counted
        assert rep["mpi_backend"] == "mpi" and rep["mpi_counts"] == {} and rep["mpi_value"] == [2.0]
    assert reports[0]["reduce_value"] == [2.0, 4.0] and reports[1]["reduce_value"] == [1.0, 2.0]


ERRORS = {
    "uninitialized": ("RuntimeError", "all_reduce(): the default process group is not initialized; call "
                      "anydevice.distributed.init_process_group() first"),
    "uninitialized_rank": ("RuntimeError", "get_rank(): the default process group is not initialized"),
    "bad_timeout": ("ValueError", "init_process_group(): timeout must be a positive number of seconds"),
    "bad_backend": ("DistributedError", "init_process_group(): backend 'gloo' has no communicator for device type "
                    "'cpu' (plugin anydevice provides none); use backend=None or 'mpi'"),
    "init_twice": ("RuntimeError", "init_process_group(): the default process group is already initialized"),
    "gather_list_length": ("ValueError", "all_gather(): tensor_list has 1 tensors; it needs one per rank of the group (2)"),
    "gather_list_shape": ("ValueError", "all_gather(): tensor_list[1] has shape [3], expected [2]"),
    "gather_list_dtype": ("TypeError", "all_gather(): tensor_list[1] is int32 but the tensor is float32"),
    "into_tensor_dtype": ("TypeError", "all_gather_into_tensor(): output_tensor is int32 but the other tensor is float32"),
    "into_tensor_shape": ("ValueError", "all_gather_into_tensor(): output_tensor has shape [3, 2]; with 2 ranks and a "
                          "[2] tensor it must be [2, 2] or [4]"),
    "src_out_of_range": ("ValueError", "broadcast(): src=2 is not a rank of this group of 2; allowed: 0..1"),
    "src_negative": ("ValueError", "broadcast(): src=-1 is not a rank of this group of 2"),
    "src_not_int": ("TypeError", "broadcast(): src must be an int (a world rank), got str"),
    "dst_out_of_range": ("ValueError", "reduce(): dst=5 is not a rank of this group of 2"),
    "bool_sum": ("TypeError", "all_reduce(): op 'sum' does not accept bool tensors; use MAX (any) or MIN (all)"),
    "int_avg": ("TypeError", "all_reduce(): op 'avg' needs a floating tensor, got int32"),
    "unknown_op": ("ValueError", "all_reduce(): op 'median' is not a reduction; allowed: ReduceOp.SUM, AVG"),
    "not_a_tensor": ("TypeError", "all_reduce(): tensor must be an anydevice Tensor, got ndarray"),
    "send_to_self": ("ValueError", "a rank cannot send to itself"),
    "tag_range": ("ValueError", "send(): tag must be an int in 0..31999, got 1000000"),
    "split_sizes": ("ValueError", "all_to_all_single(): input_split_sizes=[1, 3]; only equal splits ([2, 2])"),
    "new_group_ranks": ("ValueError", "new_group(): ranks [0, 5] must be distinct world ranks in 0..1"),
    "grad_leaf": ("RuntimeError", "all_reduce(): a leaf tensor that requires grad cannot be updated in place while "
                  "gradients are recorded; wrap the call in anydevice.no_grad()"),
}


COMMON = ("uninitialized", "uninitialized_rank", "bad_timeout", "bad_backend", "init_twice")


def test_bad_input_names_the_collective_and_the_argument(tmp_path):
    """The same errors, with the same messages, for tensors of every device type."""
    p, reports = mpirun(2, "errors.py", "cpu,npu", tmp_path)
    assert sorted(reports) == [0, 1], p.stdout + p.stderr
    for r, rep in reports.items():
        common = rep["common"]
        assert common["initialized_after_bad_backend"] is False
        assert sorted(rep["devices"]) == ["cpu", "npu"]
        for device, cases in rep["devices"].items():
            for name, (etype, text) in ERRORS.items():
                got = (common if name in COMMON else cases)[name]
                assert got[0] == etype and text in got[1], (r, device, name, got)
            assert cases["grad_leaf_no_grad"] == [2.0, 4.0]  # under no_grad the update is allowed, as in torch
    for device in ("cpu", "npu"):
        assert reports[0]["devices"][device]["scatter_list"][1] == (
            "scatter(): scatter_list has 1 tensors; it needs one per rank of the group (2)")
        assert reports[1]["devices"][device]["scatter_list"][1].startswith(
            "scatter(): scatter_list is only given on the source rank 0")
        assert reports[1]["devices"][device]["non_member"] == [
            "ValueError", "all_reduce(): this rank (world rank 1) is not a member of the group (world ranks [0]); "
            "only members may call its collectives"]
        # ranks that disagree with each other: each names the other's call and its own
        for me, other in ((0, 1), (1, 0)):
            cases = reports[me]["devices"][device]
            mine, theirs = ("float32", "int32") if me == 0 else ("int32", "float32")
            assert cases["cross_rank_dtype"] == ["DistributedError", (
                f"all_reduce(): world rank {other} called all_reduce() on {theirs}[2] where world rank {me} called "
                f"all_reduce() on {mine}[2] (collective #1 of the group); every member must call the same "
                f"collectives in the same order, with one shape, dtype, device type, root and op")]
            assert cases["cross_rank_shape"][0] == "DistributedError"
            assert f"world rank {other} called all_reduce() on float32[{2 + other}] where world rank {me} called " \
                   f"all_reduce() on float32[{2 + me}]" in cases["cross_rank_shape"][1]


def test_the_collectives_hook_contract_with_fake_plugins(tmp_path):
    p, reports = mpirun(2, "contract.py", tmp_path)
    assert sorted(reports) == [0, 1], p.stdout + p.stderr
    for r, rep in reports.items():
        # the plugin's communicator ran the float32 all_reduce (bootstrap: group rank and size) ...
        assert rep["sum"] == [3.0, 6.0] and rep["calls"] == [["all_reduce", "sum", r, 2]]
        # ... and declined float64, which the core staged over MPI, counted and warned once
        assert rep["float64"] == [1.0, 2.0] and rep["counts"] == {"all_reduce/fake": 1}
        assert rep["warnings"] == ["all_reduce() on fake was declined by its communicator 'fakeccl' for these tensors"]
        assert rep["hook_raises"] == ["DistributedError", "all_reduce(): plugin broken-ccl-plugin: "
                                      "anydevice_collectives('broken') raised RuntimeError: no interconnect driver"]
        assert rep["factory_raises"] == ["DistributedError", "all_reduce(): plugin broken-ccl-plugin: the communicator "
                                         "factory of anydevice_collectives('broken') raised OSError: link down"]
        assert rep["wrong_name"] == ["DistributedError", "init_process_group(): backend 'nccl' was asked for, but "
                                     "device type 'fake' provides 'fakeccl' (plugin fake-ccl-plugin); use backend=None "
                                     "or 'mpi'"]
        assert rep["backend"] == "fakeccl"
