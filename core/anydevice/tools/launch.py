"""``anydevice launch``: run a training script as N processes per node, on ``mpiexec``.

    anydevice launch --nproc-per-node 2 --devices npu examples/mlp_digits.py --steps 100

Each process runs the script under :mod:`anydevice.tools._rank`, which sets ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE`` from what ``mpiexec`` tells it and, with
``--devices TYPE``, ``ANYDEVICE_DEVICE=TYPE:{local_rank}`` (one device per process; read back with
``anydevice.distributed.get_device()``). ``anydevice.distributed.init_process_group()`` reads them.

- A rank that raises prints its traceback, records it, and exits with status 1; ``mpiexec`` then
  stops the other ranks, and the launcher ends with that rank's status and repeats its error (the
  first rank that failed) at the end of the output.
- SIGINT and SIGTERM sent to the launcher go to ``mpiexec``, which passes them to every rank; a job
  still running 5 s later is killed.
- ``--timeout S`` bounds the whole job: past it the job is stopped and the launcher exits with 124.
- Several nodes: ``--hosts a,b`` or ``--hostfile FILE`` hand mpiexec's host list over
  (``-hosts`` / ``-f``), with ``--nproc-per-node`` processes on each (docs/DISTRIBUTED.md).

The ``mpiexec`` is the one next to this interpreter (the ``mpich`` wheel, ``pip install
anydevice[mpi]``), else the first on ``PATH``.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from anydevice.tools import _rank

#: Seconds between the forwarded signal (or the timeout's SIGTERM) and SIGKILL.
KILL_AFTER = 5.0
TIMEOUT_STATUS = 124
#: Default seconds the other ranks keep running after one failed.
GRACE = 2.0


def find_mpiexec() -> str:
    """The ``mpiexec`` next to ``sys.executable`` (a virtual environment's ``mpich`` wheel), else on ``PATH``."""
    found = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    if not found:
        raise FileNotFoundError(
            "anydevice launch: no mpiexec next to this Python or on PATH; install an MPI from the package "
            "registry with `pip install 'anydevice[mpi]'` (the mpich wheel brings mpiexec)")
    return found


def _hosts(args) -> int:
    """How many nodes the host list names (1 without one)."""
    if args.hosts:
        return len([h for h in args.hosts.split(",") if h.strip()])
    if args.hostfile:
        with open(args.hostfile) as f:
            return max(1, len([ln for ln in f if ln.split("#")[0].strip()]))
    return 1


def command(args, run_dir: str) -> list:
    """The ``mpiexec`` command line of a job (``args`` as :func:`parser` parses them)."""
    n = args.nproc_per_node * (args.nnodes or _hosts(args))
    cmd = [find_mpiexec(), "-n", str(n), "-ppn", str(args.nproc_per_node), "-disable-auto-cleanup"]
    if args.hosts:
        cmd += ["-hosts", args.hosts]
    if args.hostfile:
        cmd += ["-f", args.hostfile]
    cmd += ["-genv", _rank.RUN_DIR, run_dir, "-genv", _rank.LOCAL_WORLD, str(args.nproc_per_node)]
    if args.devices:
        cmd += ["-genv", _rank.DEVICES, args.devices]
    return cmd + [sys.executable, _rank.__file__, args.script, *args.script_args]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="anydevice launch",
        description="Run a script as --nproc-per-node processes (per node) with RANK, LOCAL_RANK, WORLD_SIZE and "
                    "LOCAL_WORLD_SIZE set, one device each with --devices. The exit status is the first failed "
                    "rank's (124 on --timeout).")
    p.add_argument("--nproc-per-node", type=_positive_int, required=True, metavar="N", help="processes per node")
    p.add_argument("--devices", metavar="TYPE",
                   help="give process LOCAL_RANK the device TYPE:LOCAL_RANK (ANYDEVICE_DEVICE); e.g. npu, cuda")
    p.add_argument("--timeout", type=_positive_float, metavar="S", help="stop the job after S seconds (exit 124)")
    p.add_argument("--grace", type=_non_negative_float, default=GRACE, metavar="S",
                   help=f"after a rank fails, give the others S seconds to report (their collectives time out) "
                        f"before stopping them (default {GRACE:g})")
    p.add_argument("--hosts", metavar="H1,H2", help="comma separated host names (mpiexec -hosts)")
    p.add_argument("--hostfile", metavar="FILE", help="a file of host names, one a line (mpiexec -f)")
    p.add_argument("--nnodes", type=_positive_int, metavar="M",
                   help="number of nodes (default: the number of hosts named, else 1)")
    p.add_argument("script", help="the Python script every process runs")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments")
    return p


def int_at_least(lo: int, what: str = "a positive integer"):
    """An argparse ``type=``: an int >= ``lo``, else a usage error saying ``expected {what}``."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = lo - 1
        if v < lo:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return v

    return parse


_positive_int = int_at_least(1)


def _non_negative_float(text: str) -> float:
    return 0.0 if text.strip() in ("0", "0.0") else _positive_float(text)


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = 0.0
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return v


def main(argv=None) -> int:
    """``anydevice launch --nproc-per-node N [--devices TYPE] [--timeout S] script.py args...``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    if args.hosts and args.hostfile:
        print("anydevice launch: give --hosts or --hostfile, not both", file=sys.stderr)
        return 2
    if not os.path.isfile(args.script):
        print(f"anydevice launch: no such script {args.script!r}", file=sys.stderr)
        return 2
    try:
        return run(args)
    except FileNotFoundError as e:
        print(str(e), file=sys.stderr)
        return 2


def run(args, stdout=None, stderr=None) -> int:
    """Run the job; returns its exit status (and reports a failed rank's error on stderr)."""
    err = stderr or sys.stderr
    with tempfile.TemporaryDirectory(prefix="anydevice-launch-") as run_dir:
        proc = subprocess.Popen(command(args, run_dir), stdout=stdout, stderr=stderr, start_new_session=True)
        with _forwarding(proc) as signalled:
            rc, timed_out = _wait(proc, args, run_dir, signalled)
        failures = _rank.failures(run_dir)
    if timed_out:
        print(f"anydevice launch: the job ran past --timeout {args.timeout:g} s and was stopped", file=err)
        return TIMEOUT_STATUS
    if failures:
        rank, status, text = failures[0]
        others = f" (ranks that failed: {', '.join(str(f[0]) for f in failures)})" if len(failures) > 1 else ""
        print(f"anydevice launch: rank {rank} failed with exit status {status}{others}:\n{text.rstrip()}", file=err)
        return status or 1
    if rc:
        how = f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}"
        print(f"anydevice launch: the job ended with {how}", file=err)
        return 128 - rc if rc < 0 else rc
    return 0


def _wait(proc, args, run_dir: str, signalled: list):
    """Wait for mpiexec: ``(status, timed_out)``. Stops the job ``--grace`` s after a rank failed or died
    (MPI leaves the others running), and kills it :data:`KILL_AFTER` s after a forwarded signal."""
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    failed_at = None
    while True:
        try:
            return proc.wait(timeout=0.1), False
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if deadline is not None and now > deadline:
            _stop(proc, signal.SIGTERM)
            return proc.wait(), True
        if signalled and now - signalled[0] > KILL_AFTER:
            _kill(proc)
        if failed_at is None and _a_rank_failed(run_dir):
            failed_at = now
        if failed_at is not None and now - failed_at >= args.grace:
            _stop(proc, signal.SIGTERM)


def _a_rank_failed(run_dir: str) -> bool:
    """A rank recorded a failure, or one of this host's ranks is gone without saying how it ended."""
    if _rank.failures(run_dir):
        return True
    for rank, pid in _rank.running(run_dir).items():
        try:
            os.kill(pid, 0)
            continue
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        if rank in _rank.running(run_dir):   # it did not just finish
            _rank.record_death(run_dir, rank)
            return True
    return False


def _stop(proc, sig) -> None:
    """Send ``sig`` to mpiexec; SIGKILL the whole job if it is still there :data:`KILL_AFTER` seconds later."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)
    try:
        proc.wait(timeout=KILL_AFTER)
    except subprocess.TimeoutExpired:
        _kill(proc)


def _kill(proc) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def _forwarding(proc):
    """While the job runs, SIGINT and SIGTERM received here go to mpiexec (which forwards them to the
    ranks); yields the list that gets the time of the first one."""
    signalled: list = []

    def forward(sig, _frame):
        signalled[:] = signalled or [time.monotonic()]
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)

    main = threading.current_thread() is threading.main_thread()
    saved = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        yield signalled
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
        if proc.poll() is None:
            _stop(proc, signal.SIGTERM)


if __name__ == "__main__":
    sys.exit(main())
