"""Process groups over MPI (mpi4py): the world, subgroups, timeouts and work handles.

Every process of a job calls :func:`init_process_group` (under ``mpiexec`` or ``anydevice
launch``). A :class:`ProcessGroup` owns a duplicate of its MPI communicator, so the user's own
MPI traffic never matches ours, and, per device type, the communicator that moves that type's
tensors (a plugin's, see ``anydevice_collectives``, else the host-staged MPI one).

**Timeouts.** Every collective is started non-blocking and polled against the group's deadline;
a peer that exited or hangs makes the others raise :class:`DistributedTimeoutError` instead of
waiting forever. To name the peers that did not arrive, each rank posts a small *arrival notice*
to its peers when it enters a collective: the collective's sequence number and what was called
(collective, dtype, shape, device type and arguments), so ranks that disagree are told which
call differs instead of getting wrong values (or an MPI error, or a hang). After a timeout
the group is broken (later collectives on it raise at once) and the process skips
``MPI_Finalize`` at exit, which could wait on the hung peer; ``mpiexec`` then ends the job.
"""
from __future__ import annotations

import atexit
import os
import time
import zlib
from datetime import timedelta

import numpy as np

from anydevice.base import dtypes as _dt

from . import comms
from . import mpi as _mpi
from .mpi import DistributedError, DistributedTimeoutError, MPIRequest, poll

_NOTICE_TAG = 32000  # arrival notices; user send/recv tags must stay below it
MAX_TAG = _NOTICE_TAG - 1
#: collectives by their code in arrival notices: [seq, collective, dtype, ndim, 4 dims, hash of shape and arguments]
_CODES = ("barrier", "all_reduce", "broadcast", "reduce", "all_gather", "gather", "scatter", "reduce_scatter",
          "all_to_all")
_NOTICE_LEN = 9


def signature(name: str, like=None, args=()) -> np.ndarray:
    """What a rank calls, as sent in its arrival notice: collective, dtype, shape and arguments."""
    shape = tuple(like.shape) if like is not None else ()
    dims = [*shape[:4], *[-1] * (4 - len(shape[:4]))]
    dt = _dt.ALL_DTYPES.index(like.dtype) if like is not None else -1
    h = zlib.crc32(repr((shape, [a for a in args if isinstance(a, (int, str))])).encode())
    return np.array([_CODES.index(name), dt, len(shape), *dims, h], np.int64)


def describe(sig) -> str:
    name = _CODES[int(sig[0])] if 0 <= sig[0] < len(_CODES) else f"collective {int(sig[0])}"
    if sig[1] < 0:
        return f"{name}()"
    nd = int(sig[2])
    dims = ", ".join(str(int(d)) for d in sig[3:3 + min(nd, 4)]) + (", ..." if nd > 4 else "")
    return f"{name}() on {_dt.ALL_DTYPES[int(sig[1])].name}[{dims}]"


_world: list = [None]   # the default ProcessGroup
_finalize = [False]     # whether we initialized MPI and so finalize it at exit
_broken = [False]       # a collective timed out: MPI_Finalize could hang


def mpi():
    """``mpi4py.MPI``, initialized; when we initialized it, it is finalized at exit (unless broken)."""
    MPI, ours = _mpi.load()
    if ours and not _finalize[0]:
        _finalize[0] = True
        atexit.register(_at_exit)
    return MPI


def _at_exit():
    MPI = mpi()
    if not _broken[0]:
        destroy_process_group()
        if not MPI.Is_finalized():
            MPI.Finalize()


def seconds(timeout, where: str) -> float:
    t = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0:
        raise ValueError(f"{where}: timeout must be a positive number of seconds or a datetime.timedelta, "
                         f"got {timeout!r}")
    return float(t)


class ProcessGroup:
    """A set of ranks that run collectives together (``rank``/``size`` are within the group)."""

    def __init__(self, comm, ranks: list, timeout: float, backend: str | None, device_type: str):
        self.comm, self.ranks, self.timeout = comm, list(ranks), timeout
        self.backend, self.device_type = backend, device_type
        self.rank = comm.Get_rank() if comm is not None else -1
        self.size = len(self.ranks)
        self.comms: dict = {}   # device_type -> communicator (a plugin's, or the host-staged one)
        self.seq = 0            # collectives entered on this group
        self.seen = [0] * self.size  # latest arrival notice from each member: its sequence number
        self.seen_sig: list = [None] * self.size  # ... and its signature
        self._notices: list = []     # (request, buffer) of notices in flight
        self.broken: str | None = None
        self.freed = False

    def __repr__(self):
        return f"ProcessGroup(ranks={self.ranks}, backend={self.backend or 'default'})"

    def check(self, name: str) -> None:
        if self.freed:
            raise DistributedError(f"{name}(): the process group (world ranks {self.ranks}) was destroyed; "
                                   f"use another one or call init_process_group() again")
        if self.comm is None:
            raise ValueError(f"{name}(): this rank (world rank {mpi().COMM_WORLD.Get_rank()}) is not a member of the "
                             f"group (world ranks {self.ranks}); only members may call its collectives")
        if self.broken is not None:
            raise DistributedError(f"{name}(): the process group is broken since an earlier failure ({self.broken}); "
                                   f"destroy it and start the job again")

    def arrive(self, sig: np.ndarray) -> int:
        """Enter a collective: post its sequence number and signature to the other members; returns it."""
        self.seq += 1
        MPI = mpi()
        self._notices = [(r, b) for r, b in self._notices if not r.Test()]
        b = np.concatenate([[self.seq], sig]).astype(np.int64)
        for p in range(self.size):
            if p != self.rank:
                self._notices.append((self.comm.Isend([b, MPI.INT64_T], dest=p, tag=_NOTICE_TAG), b))
        self._drain()
        return self.seq

    def _drain(self) -> None:
        MPI = mpi()
        st = MPI.Status()
        while self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=_NOTICE_TAG, status=st):
            src, b = st.Get_source(), np.zeros(_NOTICE_LEN, np.int64)
            self.comm.Recv([b, MPI.INT64_T], source=src, tag=_NOTICE_TAG)
            if b[0] > self.seen[src]:
                self.seen[src], self.seen_sig[src] = int(b[0]), b[1:]

    def missing(self, seq: int) -> list:
        """World ranks of the members whose notice for collective ``seq`` has not arrived."""
        self._drain()
        return [self.ranks[p] for p in range(self.size) if p != self.rank and self.seen[p] < seq]

    def mismatch(self, seq: int, sig: np.ndarray) -> str | None:
        """What a member that entered collective ``seq`` called, when it differs from this rank's call."""
        self._drain()
        for p in range(self.size):
            other = self.seen_sig[p]
            if p != self.rank and self.seen[p] == seq and not np.array_equal(other, sig):
                what = (describe(other) if not np.array_equal(other[:-1], sig[:-1]) else
                        f"{describe(other)} with another device type, root, op or shape beyond 4 dimensions")
                return (f"world rank {self.ranks[p]} called {what} where world rank {self.ranks[self.rank]} called "
                        f"{describe(sig)} (collective #{seq} of the group); every member must call the same "
                        f"collectives in the same order, with one shape, dtype, device type, root and op")
        return None

    def timeout_error(self, name: str, limit: float, seq: int, sig=None, peer=None, where: str = ""):
        """The DistributedTimeoutError of collective ``seq`` (the group is broken from now on)."""
        me = self.ranks[self.rank]
        if peer is not None:
            who = f"world rank {peer} did not take part (it exited, hangs, or called something else)"
        else:
            miss = self.missing(seq)
            who = (f"world rank(s) {miss} did not arrive (they exited, hang, or are still busy with earlier work)"
                   if miss else (self.mismatch(seq, sig) if sig is not None else None) or
                   "every member arrived, so some member called a different collective or passed another shape")
        msg = (f"{name}() timed out after {limit:g} s on world rank {me} in a group of {self.size} "
               f"(world ranks {self.ranks}){where}; {who}")
        self.fail(msg)
        return DistributedTimeoutError(msg)

    def fail(self, msg: str) -> None:
        """Mark the group broken (a collective timed out); plugin communicators may abort their work."""
        self.broken = msg
        _broken[0] = True
        for c in self.comms.values():
            abort = getattr(c, "abort", None)
            if abort is not None:
                try:
                    abort()
                except Exception:  # noqa: BLE001 - the timeout is what the caller must see
                    pass

    def group_rank(self, rank, name: str, arg: str) -> int:
        """The group rank of world rank ``rank`` (``src``/``dst`` arguments are world ranks, as in torch)."""
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)):
            raise TypeError(f"{name}(): {arg} must be an int (a world rank), got {type(rank).__name__}")
        if int(rank) not in self.ranks:
            where = f"0..{self.size - 1}" if self.ranks == list(range(self.size)) else f"one of {self.ranks}"
            raise ValueError(f"{name}(): {arg}={rank} is not a rank of this group of {self.size}; allowed: {where}")
        return self.ranks.index(int(rank))

    def free(self) -> None:
        self.freed = True
        for c in self.comms.values():
            getattr(c, "destroy", lambda: None)()
        self.comms.clear()
        if self.comm is not None and self.broken is None:
            for r, _ in self._notices:
                r.Wait()
            self._notices = []
            self.comm.Free()
        self.comm = None


class Work:
    """The handle of an asynchronous collective (``async_op=True``): ``wait()``, ``is_completed()``.

    The tensors it updates hold their results once ``wait()`` returned (or ``is_completed()``
    returned True).
    """

    def __init__(self, group: ProcessGroup, name: str, request, finish, seq: int, peer: int | None = None,
                 sig=None):
        self.group, self.name, self.request, self.finish = group, name, request, finish
        self.seq, self.peer, self.sig, self.done, self.value = seq, peer, sig, False, None

    def _test(self) -> bool:
        try:
            return self.request.test()
        except Exception as e:  # an MPI error (a message longer than expected, ...) or a plugin's
            g = self.group
            why = g.mismatch(self.seq, self.sig) if self.sig is not None else None
            msg = (f"{self.name}() failed on world rank {g.ranks[g.rank]} in a group of {g.size}: "
                   f"{why or f'{type(e).__name__}: {e}'}")
            g.fail(msg)
            raise DistributedError(msg) from e

    def is_completed(self) -> bool:
        if not self.done and self._test():
            self._complete()
        return self.done

    def wait(self, timeout=None) -> bool:
        """Block until the collective completed (then True); :class:`DistributedTimeoutError` after
        ``timeout`` seconds (default: the group's timeout)."""
        if self.done:
            return True
        limit = self.group.timeout if timeout is None else seconds(timeout, f"{self.name}().wait()")
        if not poll(self._test, time.monotonic() + limit):
            self._timed_out(limit)
        self._complete()
        return True

    def _complete(self):
        self.done = True
        why = self.group.mismatch(self.seq, self.sig) if self.sig is not None else None
        if why is not None:  # the collective matched in MPI, but its data would be wrong
            raise DistributedError(f"{self.name}(): {why}")
        self.value = self.finish(self.request.result())

    def _timed_out(self, limit: float):
        raise self.group.timeout_error(self.name, limit, self.seq, self.sig, peer=self.peer)


def _env_int(name: str):
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"init_process_group(): environment variable {name}={raw!r} is not an integer") from None


def _agree(name: str, given, env, actual: int) -> None:
    for value, where in ((given, f"{name}={given}"), (env, f"environment variable {name.upper()}={env}")):
        if value is not None and value != actual:
            raise ValueError(f"init_process_group(): {where} but MPI says this process is {name} {actual}; start "
                             f"every process with mpiexec (or anydevice launch), which sets both consistently")


def init_process_group(backend: str | None = None, *, timeout=timedelta(seconds=60), rank: int | None = None,
                       world_size: int | None = None, device_type: str | None = None) -> None:
    """Join the job's default process group (every process calls it).

    :param backend: ``None`` (per device type: the plugin's collectives, else ``"nccl"`` for
        cuda, else ``"mpi"``), ``"mpi"`` (host-staged MPI for every device type) or the name of a
        plugin's communicator (``"nccl"``, ``"simccl"``) for the device types that provide it.
    :param timeout: how long any collective may take (``timedelta`` or seconds).
    :param rank: this process's rank; checked against MPI's (and ``RANK``).
    :param world_size: the number of processes; checked against MPI's (and ``WORLD_SIZE``).
    :param device_type: the device type that :func:`get_backend` reports and whose communicator is
        set up now (default: the type of ``ANYDEVICE_DEVICE``, else ``cpu``); tensors of other types
        get theirs when a collective first meets them.
    """
    if _world[0] is not None:
        raise RuntimeError("init_process_group(): the default process group is already initialized; "
                           "call destroy_process_group() first")
    if backend is not None and not (isinstance(backend, str) and backend.isidentifier()):
        raise ValueError(f"init_process_group(): backend must be None, 'mpi', 'nccl' or a plugin communicator's "
                         f"name, got {backend!r}")
    limit = seconds(timeout, "init_process_group()")
    dtype_ = device_type or os.environ.get("ANYDEVICE_DEVICE", "cpu").split(":")[0]
    MPI = mpi()
    world = MPI.COMM_WORLD
    _agree("rank", rank, _env_int("RANK"), world.Get_rank())
    _agree("world_size", world_size, _env_int("WORLD_SIZE"), world.Get_size())
    comm, req = world.Idup()
    if not poll(req.Test, time.monotonic() + limit):
        _broken[0] = True
        raise DistributedTimeoutError(
            f"init_process_group() timed out after {limit:g} s on rank {world.Get_rank()} of {world.Get_size()}: "
            f"not every process called it")
    g = ProcessGroup(comm, list(range(world.Get_size())), limit, backend, dtype_)
    try:  # the default device type's communicator now: a backend it cannot have fails here, on every rank
        comms.communicator(g, dtype_, "init_process_group")
        barrier(g)
    except BaseException:
        g.free()
        raise
    _world[0] = g


def world(name: str = "collective") -> ProcessGroup:
    g = _world[0]
    if g is None:
        raise RuntimeError(f"{name}(): the default process group is not initialized; call "
                           f"anydevice.distributed.init_process_group() first (in every process of the job)")
    return g


def resolve(group, name: str) -> ProcessGroup:
    g = world(name) if group is None else group
    if not isinstance(g, ProcessGroup):
        raise TypeError(f"{name}(): group must be a ProcessGroup from new_group() or None, got {type(g).__name__}")
    return g


def is_initialized() -> bool:
    return _world[0] is not None


def get_rank(group=None) -> int:
    """This process's rank in ``group`` (-1 when it is not a member)."""
    return resolve(group, "get_rank").rank


def get_world_size(group=None) -> int:
    return resolve(group, "get_world_size").size


def get_backend(group=None) -> str:
    """The backend that moves the group's tensors of its device type (``"mpi"``, ``"nccl"``, a plugin's name)."""
    g = resolve(group, "get_backend")
    return comms.communicator(g, g.device_type, "get_backend").name


def barrier(group=None, async_op: bool = False):
    """Wait until every member of ``group`` reached the barrier (a timeout raises)."""
    g = resolve(group, "barrier")
    g.check("barrier")
    sig = signature("barrier")
    seq = g.arrive(sig)
    w = Work(g, "barrier", MPIRequest(g.comm.Ibarrier()), lambda _: None, seq, sig=sig)
    return w if async_op else w.wait() and None


def new_group(ranks=None, timeout=None, backend: str | None = None) -> ProcessGroup:
    """A group of some world ranks; every process of the world calls it, members or not (as in torch).

    :param ranks: world ranks of the members (default: all); the group ranks follow their order sorted.
    :param timeout: the group's collective timeout (default: the world's).
    """
    w = world("new_group")
    w.check("new_group")
    members = list(range(w.size)) if ranks is None else ranks
    if not isinstance(members, (list, tuple, range)) or not all(
            isinstance(r, (int, np.integer)) and not isinstance(r, bool) for r in members):
        raise TypeError(f"new_group(): ranks must be a list of ints (world ranks), got {ranks!r}")
    members = sorted(int(r) for r in members)
    bad = [r for r in members if not 0 <= r < w.size]
    if bad or len(set(members)) != len(members) or not members:
        raise ValueError(f"new_group(): ranks {ranks!r} must be distinct world ranks in 0..{w.size - 1}, at least one")
    limit = w.timeout if timeout is None else seconds(timeout, "new_group()")
    barrier(w)  # everyone is here, so the blocking group creation below cannot hang
    comm = None
    if w.rank in members:
        comm = w.comm.Create_group(w.comm.Get_group().Incl(members))
    return ProcessGroup(comm, members, limit, backend if backend is not None else w.backend, w.device_type)


def destroy_process_group(group=None) -> None:
    """Release ``group`` (default: the world and everything built on it)."""
    if group is not None:
        group.free()
        return
    g, _world[0] = _world[0], None
    if g is not None:
        g.free()


__all__ = ["DistributedError", "DistributedTimeoutError", "ProcessGroup", "Work", "init_process_group",
           "is_initialized", "get_rank", "get_world_size", "get_backend", "barrier", "new_group",
           "destroy_process_group"]
