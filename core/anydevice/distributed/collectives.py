"""Collectives with torch.distributed's signatures, on tensors of any device.

Each function checks its arguments on this rank first (an anydevice error naming the
collective and the argument), packs its tensors into one buffer, has the group's communicator
for the tensors' device type start the collective (see :mod:`.comms`), and updates the tensors
in place once it completed: a tensor is rebound to its new device buffer, so a leaf that
requires grad is refused while gradients are recorded (wrap the call in ``anydevice.no_grad()``).
``src``/``dst`` are world ranks, as in torch. With ``async_op=True`` the call returns a
:class:`~.group.Work` at once; otherwise it returns when done (``recv`` returns the sender's rank).
All ranks of a group must call the same collectives in the same order with tensors of one
device type.
"""
from __future__ import annotations

import enum

import numpy as np

from anydevice.api import asarray, reshape, stack
from anydevice.api.manipulation import unstack
from anydevice.engine.tensor import Tensor, _wrap

from . import comms
from .group import MAX_TAG, Work, resolve, signature
from .mpi import DistributedError


class ReduceOp(str, enum.Enum):
    """Reduction of ``all_reduce``, ``reduce`` and ``reduce_scatter`` (strings ``"sum"``... work too)."""

    SUM = "sum"
    AVG = "avg"
    MAX = "max"
    MIN = "min"
    PRODUCT = "prod"


_OP_NAMES = {"sum": "sum", "avg": "avg", "mean": "avg", "max": "max", "min": "min", "prod": "prod", "product": "prod"}


def _reduce_op(op, name: str, dtype) -> str:
    key = op.value if isinstance(op, ReduceOp) else op.lower() if isinstance(op, str) else None
    if key not in _OP_NAMES:
        raise ValueError(f"{name}(): op {op!r} is not a reduction; allowed: ReduceOp.SUM, AVG, MAX, MIN, PRODUCT "
                         f"(or 'sum', 'avg', 'max', 'min', 'prod')")
    key = _OP_NAMES[key]
    if dtype.kind == "bool" and key not in ("max", "min"):
        raise TypeError(f"{name}(): op {key!r} does not accept bool tensors; use MAX (any) or MIN (all)")
    if dtype.kind == "complex" and key in ("max", "min"):
        raise TypeError(f"{name}(): op {key!r} is not defined for complex tensors; allowed: SUM, AVG, PRODUCT")
    if key == "avg" and dtype.kind not in ("float", "complex"):
        raise TypeError(f"{name}(): op 'avg' needs a floating tensor, got {dtype.name}; use SUM and divide")
    return key


def _tensor(x, name: str, arg: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}(): {arg} must be an anydevice Tensor, got {type(x).__name__}")
    return x


def _same(x: Tensor, like: Tensor, name: str, arg: str, shape=None) -> None:
    shape = like.shape if shape is None else shape
    if x.dtype is not like.dtype:
        raise TypeError(f"{name}(): {arg} is {x.dtype.name} but the tensor is {like.dtype.name}; every tensor of "
                        f"one collective must have one dtype")
    if x.shape != tuple(shape):
        raise ValueError(f"{name}(): {arg} has shape {list(x.shape)}, expected {list(shape)}")
    if x.device != like.device:
        raise ValueError(f"{name}(): {arg} is on {x.device} but the tensor is on {like.device}; use one device")


def _list(xs, like: Tensor, n: int, name: str, arg: str, shape=None) -> list:
    if not isinstance(xs, (list, tuple)):
        raise TypeError(f"{name}(): {arg} must be a list of tensors, got {type(xs).__name__}")
    if len(xs) != n:
        raise ValueError(f"{name}(): {arg} has {len(xs)} tensors; it needs one per rank of the group ({n})")
    for i, x in enumerate(xs):
        _same(_tensor(x, name, f"{arg}[{i}]"), like, name, f"{arg}[{i}]", shape)
    return list(xs)


def _leaf_ok(ts, name: str) -> None:
    from anydevice.engine.graph import is_grad_enabled

    for t in ts:
        if t.requires_grad and t._node.op is None and is_grad_enabled():
            raise RuntimeError(f"{name}(): a leaf tensor that requires grad cannot be updated in place while "
                               f"gradients are recorded; wrap the call in anydevice.no_grad()")


def _run(group, name: str, like: Tensor, x: Tensor | None, finish, *args, peer=None, targets=(), async_op=False):
    """Start collective ``name`` as the communicator method ``args[0]`` (its arguments: packed input ``x``,
    then ``args[1:]``); return its Work, or wait for it and return what ``finish`` returned."""
    g = resolve(group, name)
    g.check(name)
    _leaf_ok(targets, name)
    dev = like.device
    sig = None
    if peer is None:
        sig = signature(args[0], like, (dev.type, *args[1:]))
        seq = g.arrive(sig)
    else:
        seq = g.seq
    comm, staged = comms.engine(g, dev.type, args[0])
    req = _start(g, comm, staged, x, args)
    if req is None:  # the plugin's communicator declined this call (a dtype it lacks, ...)
        comms.count(args[0], dev.type, getattr(comm, "name", type(comm).__name__))
        comm, staged = comms.host(g), True
        req = _start(g, comm, staged, x, args)

    def done(y):
        if y is None:
            return finish(None)
        t = asarray(y, dtype=like.dtype, device=dev) if staged else _wrap(y, tuple(y.shape), like.dtype, dev)
        return finish(t)

    w = Work(g, name, req, done, seq, peer, sig)
    if async_op:
        w.is_completed()  # one test now: MPI progresses only inside its calls, so small messages leave at once
        return w
    w.wait()
    return w.value


def _start(g, comm, staged: bool, x, args):
    def buffer(v):  # a tensor becomes its device buffer, or for the host-staged path a host copy
        if type(v) is Tensor:
            return v.numpy() if staged else v._buf
        if type(v) is _Like:
            return v.host() if staged else v.t._buf
        return v

    try:
        return getattr(comm, args[0])(buffer(x), *map(buffer, args[1:]))
    except (DistributedError, TypeError, ValueError):
        raise
    except Exception as e:  # an MPI error (mpi4py.MPI.Exception) or a plugin communicator's
        msg = f"{args[0]}() failed to start on {getattr(comm, 'name', comm)}: {type(e).__name__}: {e}"
        g.fail(msg)
        raise DistributedError(msg) from e


class _Like:
    """A tensor whose buffer only shows a collective the shape, dtype and device of a result (recv,
    scatter): the host-staged path then gets an empty host array instead of a copy of its values."""

    __slots__ = ("t",)

    def __init__(self, t: Tensor):
        self.t = t

    def host(self):
        return np.empty(self.t.shape, self.t.dtype.numpy)


def _rebind(t: Tensor, value: Tensor) -> None:
    t._buf = value._buf if value.shape == t.shape else reshape(value, t.shape)._buf


def _avg(t, op, n):
    return (t / n).astype(t.dtype) if op == "avg" and t is not None else t


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op: bool = False):
    """Reduce ``tensor`` element-wise over the group; every rank gets the result in ``tensor``.

    Called with a list or tuple of tensors (one per device of one type, in one process) it is
    :func:`anydevice.distributed.all_reduce_devices` and returns the list of results.
    """
    if isinstance(tensor, (list, tuple)):
        from .devices import all_reduce_devices

        return all_reduce_devices(tensor, op.value if isinstance(op, ReduceOp) else op)
    t = _tensor(tensor, "all_reduce", "tensor")
    key = _reduce_op(op, "all_reduce", t.dtype)
    n = resolve(group, "all_reduce").size
    mop = "sum" if key == "avg" else key
    return _run(group, "all_reduce", t, t, lambda r: _rebind(t, _avg(r, key, n)), "all_reduce", mop,
                targets=(t,), async_op=async_op)


def broadcast(tensor, src: int, group=None, async_op: bool = False):
    """Give every rank ``src``'s ``tensor`` (in place)."""
    t = _tensor(tensor, "broadcast", "tensor")
    s = resolve(group, "broadcast").group_rank(src, "broadcast", "src")
    return _run(group, "broadcast", t, t, lambda r: _rebind(t, r), "broadcast", s, targets=(t,), async_op=async_op)


def reduce(tensor, dst: int, op=ReduceOp.SUM, group=None, async_op: bool = False):
    """Reduce ``tensor`` over the group into rank ``dst``'s ``tensor`` (the others' stay as they are)."""
    t = _tensor(tensor, "reduce", "tensor")
    key = _reduce_op(op, "reduce", t.dtype)
    g = resolve(group, "reduce")
    d = g.group_rank(dst, "reduce", "dst")

    def finish(r):
        if r is not None:
            _rebind(t, _avg(r, key, g.size))

    return _run(group, "reduce", t, t, finish, "reduce", d, "sum" if key == "avg" else key,
                targets=(t,) if d == g.rank else (), async_op=async_op)


def all_gather(tensor_list, tensor, group=None, async_op: bool = False):
    """``tensor_list[i]`` becomes rank ``i``'s ``tensor`` (group ranks), on every rank."""
    t = _tensor(tensor, "all_gather", "tensor")
    outs = _list(tensor_list, t, resolve(group, "all_gather").size, "all_gather", "tensor_list")

    def finish(r):
        for o, v in zip(outs, unstack(r)):
            _rebind(o, v)

    return _run(group, "all_gather", t, t, finish, "all_gather", targets=outs, async_op=async_op)


def _rows(n: int, like: Tensor, big: Tensor, name: str, arg: str):
    """The shape ``(n, *like.shape)`` of ``big``, which may also be concatenated: ``(n * d0, ...)``."""
    if big.dtype is not like.dtype:
        raise TypeError(f"{name}(): {arg} is {big.dtype.name} but the other tensor is {like.dtype.name}; "
                        f"both must have one dtype")
    if big.device != like.device:
        raise ValueError(f"{name}(): {arg} is on {big.device} but the other tensor is on {like.device}")
    stacked = (n, *like.shape)
    cat = (n * like.shape[0], *like.shape[1:]) if like.shape else None
    if big.shape not in (stacked, cat):
        allowed = f"{list(stacked)}" + (f" or {list(cat)}" if cat else "")
        raise ValueError(f"{name}(): {arg} has shape {list(big.shape)}; with {n} ranks and a {list(like.shape)} "
                         f"tensor it must be {allowed}")
    return stacked


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op: bool = False):
    """``output_tensor`` (``(world, *shape)`` or concatenated ``(world * d0, ...)``) gets every rank's input."""
    out = _tensor(output_tensor, "all_gather_into_tensor", "output_tensor")
    t = _tensor(input_tensor, "all_gather_into_tensor", "input_tensor")
    _rows(resolve(group, "all_gather_into_tensor").size, t, out, "all_gather_into_tensor", "output_tensor")
    return _run(group, "all_gather_into_tensor", t, t, lambda r: _rebind(out, r), "all_gather",
                targets=(out,), async_op=async_op)


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op: bool = False):
    """``output`` on rank ``i`` becomes the reduction over ranks of their ``input_list[i]``."""
    out = _tensor(output, "reduce_scatter", "output")
    key = _reduce_op(op, "reduce_scatter", out.dtype)
    g = resolve(group, "reduce_scatter")
    ins = _list(input_list, out, g.size, "reduce_scatter", "input_list")
    return _run(group, "reduce_scatter", out, stack(ins), lambda r: _rebind(out, _avg(r, key, g.size)),
                "reduce_scatter", "sum" if key == "avg" else key, targets=(out,), async_op=async_op)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op: bool = False):  # noqa: A002
    """Like :func:`reduce_scatter` with the inputs in one tensor ``(world, *shape)`` or ``(world * d0, ...)``."""
    out = _tensor(output, "reduce_scatter_tensor", "output")
    x = _tensor(input, "reduce_scatter_tensor", "input")
    key = _reduce_op(op, "reduce_scatter_tensor", out.dtype)
    g = resolve(group, "reduce_scatter_tensor")
    shape = _rows(g.size, out, x, "reduce_scatter_tensor", "input")
    return _run(group, "reduce_scatter_tensor", out, reshape(x, shape), lambda r: _rebind(out, _avg(r, key, g.size)),
                "reduce_scatter", "sum" if key == "avg" else key, targets=(out,), async_op=async_op)


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op: bool = False):
    """``output_tensor_list[j]`` on rank ``i`` becomes rank ``j``'s ``input_tensor_list[i]`` (equal shapes)."""
    n = resolve(group, "all_to_all").size
    if not isinstance(input_tensor_list, (list, tuple)) or not input_tensor_list:
        raise TypeError(f"all_to_all(): input_tensor_list must be a non-empty list of tensors, got "
                        f"{type(input_tensor_list).__name__}")
    first = _tensor(input_tensor_list[0], "all_to_all", "input_tensor_list[0]")
    ins = _list(input_tensor_list, first, n, "all_to_all", "input_tensor_list")
    outs = _list(output_tensor_list, first, n, "all_to_all", "output_tensor_list")

    def finish(r):
        for o, v in zip(outs, unstack(r)):
            _rebind(o, v)

    return _run(group, "all_to_all", first, stack(ins), finish, "all_to_all", targets=outs, async_op=async_op)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None,  # noqa: A002
                      async_op: bool = False):
    """:func:`all_to_all` on the equal row blocks of one tensor: ``output``'s block ``j`` is rank ``j``'s block ``i``.

    Only equal splits are supported: ``*_split_sizes`` must be None or all ``input.shape[0] // world``.
    """
    out = _tensor(output, "all_to_all_single", "output")
    x = _tensor(input, "all_to_all_single", "input")
    n = resolve(group, "all_to_all_single").size
    if not x.shape or x.shape[0] % n:
        raise ValueError(f"all_to_all_single(): input has shape {list(x.shape)}; its first dimension must be a "
                         f"multiple of the group size ({n})")
    _same(out, x, "all_to_all_single", "output")
    for arg, sizes in (("output_split_sizes", output_split_sizes), ("input_split_sizes", input_split_sizes)):
        if sizes is not None and list(sizes) != [x.shape[0] // n] * n:
            raise ValueError(f"all_to_all_single(): {arg}={list(sizes)!r}; only equal splits "
                             f"({[x.shape[0] // n] * n}) are supported")
    blocks = reshape(x, (n, x.shape[0] // n, *x.shape[1:]))
    return _run(group, "all_to_all_single", x, blocks, lambda r: _rebind(out, r), "all_to_all", targets=(out,),
                async_op=async_op)


def scatter(tensor, scatter_list=None, src: int = 0, group=None, async_op: bool = False):
    """Rank ``i``'s ``tensor`` becomes ``src``'s ``scatter_list[i]`` (``scatter_list`` only on ``src``)."""
    t = _tensor(tensor, "scatter", "tensor")
    g = resolve(group, "scatter")
    s = g.group_rank(src, "scatter", "src")
    x = None
    if g.rank == s:
        x = stack(_list(scatter_list, t, g.size, "scatter", "scatter_list"))
    elif scatter_list:
        raise ValueError(f"scatter(): scatter_list is only given on the source rank {src}; pass None on the others")
    return _run(group, "scatter", t, x, lambda r: _rebind(t, r), "scatter", s, _Like(t), targets=(t,),
                async_op=async_op)


def gather(tensor, gather_list=None, dst: int = 0, group=None, async_op: bool = False):
    """``dst``'s ``gather_list[i]`` becomes rank ``i``'s ``tensor`` (``gather_list`` only on ``dst``)."""
    t = _tensor(tensor, "gather", "tensor")
    g = resolve(group, "gather")
    d = g.group_rank(dst, "gather", "dst")
    outs = []
    if g.rank == d:
        outs = _list(gather_list, t, g.size, "gather", "gather_list")
    elif gather_list:
        raise ValueError(f"gather(): gather_list is only given on the destination rank {dst}; pass None on the others")

    def finish(r):
        for o, v in zip(outs, unstack(r) if r is not None else ()):
            _rebind(o, v)

    return _run(group, "gather", t, t, finish, "gather", d, targets=outs, async_op=async_op)


def _peer(g, rank, name: str, arg: str, tag) -> int:
    p = g.group_rank(rank, name, arg)
    if p == g.rank:
        raise ValueError(f"{name}(): {arg}={rank} is this rank; a rank cannot {name} to itself")
    if isinstance(tag, bool) or not isinstance(tag, int) or not 0 <= tag <= MAX_TAG:
        raise ValueError(f"{name}(): tag must be an int in 0..{MAX_TAG}, got {tag!r}")
    return p


def isend(tensor, dst: int, group=None, tag: int = 0) -> Work:
    """Start sending ``tensor`` to world rank ``dst``; returns a Work."""
    t = _tensor(tensor, "send", "tensor")
    g = resolve(group, "send")
    d = _peer(g, dst, "send", "dst", tag)
    return _run(group, "send", t, t, lambda r: None, "send", d, tag, peer=g.ranks[d], async_op=True)


def irecv(tensor, src: int, group=None, tag: int = 0) -> Work:
    """Start receiving into ``tensor`` from world rank ``src``; returns a Work."""
    t = _tensor(tensor, "recv", "tensor")
    g = resolve(group, "recv")
    s = _peer(g, src, "recv", "src", tag)

    def finish(r):
        _rebind(t, r)
        return g.ranks[s]

    return _run(group, "recv", t, _Like(t), finish, "recv", s, tag, peer=g.ranks[s], targets=(t,), async_op=True)


def send(tensor, dst: int, group=None, tag: int = 0) -> None:
    isend(tensor, dst, group, tag).wait()


def recv(tensor, src: int, group=None, tag: int = 0) -> int:
    """Receive into ``tensor`` from world rank ``src``; returns ``src``."""
    w = irecv(tensor, src, group, tag)
    w.wait()
    return w.value


__all__ = ["ReduceOp", "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
           "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "scatter", "gather", "send", "recv", "isend",
           "irecv"]
