"""What each process of ``anydevice launch`` runs first: ``python _rank.py script.py args...``.

Run as a file (so anydevice is not imported before the environment is set), it reads this
process's place in the job from ``mpiexec`` (MPICH's ``PMI_RANK``, ``PMI_SIZE``,
``MPI_LOCALRANKID``, ``MPI_LOCALNRANKS``, or Open MPI's ``OMPI_COMM_WORLD_*``), sets ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE`` and, when the launcher was given
``--devices TYPE``, ``ANYDEVICE_DEVICE=TYPE:LOCAL_RANK``, then runs the script as ``__main__``.

A script that raises (or exits with a non-zero status) has its error written to the launcher's
run directory, so the launcher can repeat it, and the process ends at once with status 1 (or
the script's status) without waiting in MPI's finalization for peers that may never come.
"""
from __future__ import annotations

import os
import sys
import traceback

RUN_DIR = "ANYDEVICE_LAUNCH_DIR"
DEVICES = "ANYDEVICE_LAUNCH_DEVICES"
LOCAL_WORLD = "LOCAL_WORLD_SIZE"
_PLACES = (  # (rank, size, local rank, local size) as each MPI names them
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
)


def place(environ) -> dict:
    """``{RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE}`` (as strings) of this process."""
    for rank, size, local, local_size in _PLACES:
        if rank in environ and size in environ:
            per_node = int(environ.get(local_size) or environ.get(LOCAL_WORLD) or environ[size])
            lr = environ.get(local) or str(int(environ[rank]) % per_node)
            return {"RANK": environ[rank], "WORLD_SIZE": environ[size], "LOCAL_RANK": lr,
                    "LOCAL_WORLD_SIZE": str(per_node)}
    return {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}


def failures(run_dir: str) -> list:
    """``[(rank, exit status, error text)]`` of the ranks that failed, in the order they failed."""
    found = []
    for name in os.listdir(run_dir):
        if name.startswith("failed-") and name.endswith(".txt"):
            path = os.path.join(run_dir, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                status, _, text = f.read().partition("\n")
            found.append((os.path.getmtime(path), int(name[7:-4]), int(status or 1), text))
    return [f[1:] for f in sorted(found)]


def running(run_dir: str) -> dict:
    """``{rank: pid}`` of the ranks on this host that started and have not finished."""
    names = set(os.listdir(run_dir))
    out = {}
    for name in names:
        if name.startswith("started-"):
            rank, pid = name[8:].split("-")
            if f"ended-{rank}" not in names and f"failed-{rank}.txt" not in names:
                out[int(rank)] = int(pid)
    return out


def record_death(run_dir: str, rank: int) -> None:
    """What the launcher records for a rank that vanished without an error (a signal, ``os._exit``)."""
    _note(f"failed-{rank}.txt", "1\nthe process ended without an error message or exit status (killed by a "
          "signal, the out-of-memory killer, or os._exit)", run_dir)


def _note(name: str, text: str = "", run_dir: str | None = None) -> None:
    run_dir = run_dir or os.environ.get(RUN_DIR)
    if run_dir and os.path.isdir(run_dir):
        tmp = os.path.join(run_dir, f".{name}.tmp")   # hidden until complete: listings skip dot files
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, os.path.join(run_dir, name))


def _record(rank: str, status: int, text: str) -> None:
    _note(f"failed-{rank}.txt", f"{status}\n{text}")


def main(argv) -> None:
    import runpy

    os.environ.update(place(os.environ))
    if os.environ.get(DEVICES):
        os.environ["ANYDEVICE_DEVICE"] = f"{os.environ[DEVICES]}:{os.environ['LOCAL_RANK']}"
    script = argv[0]
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    rank = os.environ["RANK"]
    _note(f"started-{rank}-{os.getpid()}")
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if status:
            _record(rank, status, f"{script} exited with status {status}" + (
                f": {e.code}" if not isinstance(e.code, int) else ""))
            _exit(status)
    except BaseException:
        text = traceback.format_exc()
        sys.stderr.write(f"[rank {rank}] {text}")
        _record(rank, 1, text)
        _exit(1)
    _note(f"ended-{rank}")


def _exit(status: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    main(sys.argv[1:])
