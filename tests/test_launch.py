"""``anydevice launch``: the ranks' environment, a failed or vanished rank, --timeout, signals, bad arguments."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from anydevice.tools import _rank, launch

pytestmark = pytest.mark.skipif(not launch.shutil.which("mpiexec", path=os.path.dirname(sys.executable))
                                and not launch.shutil.which("mpiexec"), reason="no mpiexec (pip install mpich)")


def _script(tmp_path, body: str, name: str = "job.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def _launch(*argv, timeout: float = 60) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "anydevice.tools.cli", "launch", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_every_rank_gets_its_place_and_device(tmp_path):
    job = _script(tmp_path, """
        import os, sys
        keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "ANYDEVICE_DEVICE")
        print(" ".join(os.environ.get(k, "-") for k in keys), sys.argv[1:], __name__, flush=True)
    """)
    r = _launch("--nproc-per-node", "2", "--devices", "npu", job, "--steps", "3")
    assert r.returncode == 0, r.stderr
    lines = sorted(r.stdout.splitlines())
    assert lines == ["0 0 2 2 npu:0 ['--steps', '3'] __main__", "1 1 2 2 npu:1 ['--steps', '3'] __main__"]
    r = _launch("--nproc-per-node", "2", job)
    assert sorted(r.stdout.splitlines())[1].startswith("1 1 2 2 - ")


def test_the_rank_device_is_the_default_device(tmp_path):
    job = _script(tmp_path, """
        import os
        import anydevice as ad
        print(os.environ["RANK"], ad.asarray([1.0]).device, flush=True)
    """)
    r = _launch("--nproc-per-node", "2", "--devices", "npu", job)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["0 npu:0", "1 npu:1"]


def test_a_failed_rank_stops_the_job_and_its_error_is_shown(tmp_path):
    job = _script(tmp_path, """
        import os, time
        if os.environ["RANK"] == "1":
            raise ValueError("rank one cannot read its shard")
        time.sleep(60)
    """)
    t0 = time.monotonic()
    r = _launch("--nproc-per-node", "2", "--grace", "0.5", job)
    assert time.monotonic() - t0 < 30          # rank 0 would sleep 60 s: it was stopped
    assert r.returncode == 1
    summary = r.stderr[r.stderr.index("anydevice launch:"):]
    assert "rank 1 failed with exit status 1" in summary and "ValueError: rank one cannot read its shard" in summary


def test_a_rank_that_vanishes_or_exits_with_a_status(tmp_path):
    job = _script(tmp_path, """
        import os, sys, time
        if os.environ["RANK"] == "0":
            time.sleep(0.3)
            os._exit(9)
        if os.environ["RANK"] == "1" and len(sys.argv) > 1:
            sys.exit(7)
        time.sleep(60)
    """)
    r = _launch("--nproc-per-node", "2", "--grace", "0.5", job)
    assert r.returncode == 1 and "rank 0 failed" in r.stderr and "without an error message" in r.stderr
    r = _launch("--nproc-per-node", "2", "--grace", "0.5", job, "exit")
    assert r.returncode == 7 and "rank 1 failed with exit status 7" in r.stderr


def test_timeout_stops_the_job_with_status_124(tmp_path):
    job = _script(tmp_path, "import time\ntime.sleep(60)\n")
    t0 = time.monotonic()
    r = _launch("--nproc-per-node", "2", "--timeout", "1.5", job)
    assert r.returncode == launch.TIMEOUT_STATUS and "ran past --timeout 1.5 s" in r.stderr
    assert time.monotonic() - t0 < 20


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_reach_every_rank(tmp_path, sig):
    job = _script(tmp_path, """
        import os, signal, sys, time
        def stop(s, _frame):
            os.write(1, f"rank {os.environ['RANK']} got {signal.Signals(s).name}\\n".encode())  # one write: no interleaving
            sys.exit(3)
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        print("ready", flush=True)
        time.sleep(60)
    """)
    p = subprocess.Popen([sys.executable, "-m", "anydevice.tools.cli", "launch", "--nproc-per-node", "2", job],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = ""  # mpiexec forwards both ranks' output through one pipe: their lines can arrive joined
    while seen.count("ready") < 2 and (line := p.stdout.readline()):
        seen += line
    assert seen.replace("\n", "") == "readyready", seen
    p.send_signal(sig)
    out, err = p.communicate(timeout=30)
    got = sorted(line for line in out.splitlines() if line.startswith("rank"))   # mpiexec says what it does too
    assert got == [f"rank 0 got {sig.name}", f"rank 1 got {sig.name}"]
    assert p.returncode == 3 and "exited with status 3" in err


def test_bad_arguments(tmp_path, capsys):
    assert launch.main(["--nproc-per-node", "0", "x.py"]) == 2
    assert "expected a positive integer, got '0'" in capsys.readouterr().err
    assert launch.main(["--nproc-per-node", "2", str(tmp_path / "missing.py")]) == 2
    assert "no such script" in capsys.readouterr().err
    assert launch.main(["--nproc-per-node", "2", "--timeout", "-1", "x.py"]) == 2
    assert "positive number of seconds" in capsys.readouterr().err
    job = _script(tmp_path, "pass\n")
    assert launch.main(["--nproc-per-node", "1", "--hosts", "a", "--hostfile", "f", job]) == 2
    assert "not both" in capsys.readouterr().err


def test_host_lists_become_mpiexec_arguments(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node-a:8\n# spare\nnode-b:8\n\n")
    args = launch.parser().parse_args(["--nproc-per-node", "8", "--hostfile", str(hostfile), "train.py", "--lr", "1"])
    cmd = launch.command(args, "/run")
    assert cmd[1:6] == ["-n", "16", "-ppn", "8", "-disable-auto-cleanup"]
    assert cmd[cmd.index("-f") + 1] == str(hostfile) and cmd[-3:] == ["train.py", "--lr", "1"]
    args = launch.parser().parse_args(["--nproc-per-node", "2", "--hosts", "a,b,c", "--devices", "npu", "t.py"])
    cmd = launch.command(args, "/run")
    assert cmd[cmd.index("-n") + 1] == "6" and cmd[cmd.index("-hosts") + 1] == "a,b,c"
    assert cmd[cmd.index(_rank.DEVICES) + 1] == "npu"
    args = launch.parser().parse_args(["--nproc-per-node", "2", "t.py", "--timeout", "5", "--devices", "x"])
    assert (args.timeout, args.devices, args.script_args) == (None, None, ["--timeout", "5", "--devices", "x"])


def test_place_from_each_mpi():
    assert _rank.place({"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}) == \
        {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    assert _rank.place({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}) == \
        {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}
    assert _rank.place({}) == {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}


@pytest.mark.parametrize("devices", ["npu", "cpu"])
def test_the_mlp_example_trains_data_parallel_and_only_rank_0_prints(devices):
    example = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "mlp_digits.py")
    r = subprocess.run([sys.executable, "-m", "anydevice.tools.cli", "launch", "--nproc-per-node", "2",
                        *(["--devices", devices] if devices != "cpu" else []), "--timeout", "120", example,
                        "--steps", "10"], capture_output=True, text=True, timeout=180,
                       env=dict(os.environ, ANYDEVICE_FALLBACK="silent"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [ln.split()[1] for ln in lines if ln.startswith("step")] == [str(i) for i in range(1, 11)]
    where = "npu:0" if devices == "npu" else "cpu"
    assert [ln for ln in lines if ln.startswith("test accuracy")] == [next(ln for ln in lines if "accuracy" in ln)]
    assert lines[-1].endswith(f"on {where}")
