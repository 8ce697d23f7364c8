"""anydevice.distributed: process groups and collectives across processes, as torch.distributed.

Start every process with ``anydevice launch`` (or ``mpiexec``), then::

    import anydevice.distributed as dist
    dist.init_process_group()            # reads RANK / WORLD_SIZE, or MPI's own
    dist.all_reduce(t)                   # t updated in place on every rank

Process groups run over MPI (mpi4py, :mod:`.group`); a device type's tensors move through its
plugin's communicator when it provides one (the ``anydevice_collectives`` hook: ``nccl`` for
cuda, ``simccl`` for the simulated npu and dcu), else through host memory over MPI, counted in
:func:`fallback_counts` and warned once. Every collective has the group's timeout: a peer that
exited or hangs gives :class:`DistributedTimeoutError`, never a hang.

Inside one process, ``all_reduce(list_of_tensors, op)`` (one tensor per device of one type)
keeps its old meaning: it is :func:`all_reduce_devices`, which returns a list of new tensors.
"""
from __future__ import annotations

import os

from .collectives import (
    ReduceOp,
    all_gather,
    all_gather_into_tensor,
    all_reduce,
    all_to_all,
    all_to_all_single,
    broadcast,
    gather,
    irecv,
    isend,
    recv,
    reduce,
    reduce_scatter,
    reduce_scatter_tensor,
    scatter,
    send,
)
from .comms import CollectiveFallbackWarning, fallback_counts, reset_fallback_counts
from .ddp import DataParallel, DistributedDataParallel
from .devices import OPS, all_reduce_devices
from .group import (
    DistributedError,
    DistributedTimeoutError,
    ProcessGroup,
    Work,
    barrier,
    destroy_process_group,
    get_backend,
    get_rank,
    get_world_size,
    init_process_group,
    is_initialized,
    new_group,
)
from .mpi import is_available
from .sync_batchnorm import SyncBatchNorm


def get_device():
    """This process's device: ``ANYDEVICE_DEVICE`` (set by ``anydevice launch --devices``), else ``cpu``."""
    from anydevice.runtime.devices import as_device

    return as_device(os.environ.get("ANYDEVICE_DEVICE", "").strip() or "cpu")


__all__ = ["ReduceOp", "all_gather", "all_gather_into_tensor", "all_reduce", "all_to_all", "all_to_all_single",
           "broadcast", "gather", "irecv", "isend", "recv", "reduce", "reduce_scatter", "reduce_scatter_tensor",
           "scatter", "send", "CollectiveFallbackWarning", "fallback_counts", "reset_fallback_counts", "OPS",
           "all_reduce_devices", "DistributedError", "DistributedTimeoutError", "ProcessGroup", "Work", "barrier",
           "destroy_process_group", "get_backend", "get_rank", "get_world_size", "init_process_group",
           "is_initialized", "new_group", "is_available", "get_device", "DistributedDataParallel", "DataParallel",
           "SyncBatchNorm"]
