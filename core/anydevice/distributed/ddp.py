"""Data-parallel training: :class:`DistributedDataParallel` (PyTorch's name; Paddle's ``DataParallel``).

    dist.init_process_group()                        # under `anydevice launch` or mpiexec
    model = DistributedDataParallel(make_model().to(dist.get_device()))
    for x, y in loader:                              # a DistributedSampler gives each rank its share
        loss = loss_fn(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step() # the gradients are the average over every rank

- At construction the parameters and buffers of rank 0 are broadcast to every rank, so all start
  equal. With ``broadcast_buffers=True`` (the default) buffers (BatchNorm's running statistics) are
  broadcast from rank 0 again before each forward in training mode; the batch statistics a
  BatchNorm normalizes with are still each rank's own.
- Gradients are averaged in **buckets**: the parameters, in reverse order (roughly the order
  backward produces their gradients), are grouped into buckets of at most ``bucket_cap_mb`` MiB of
  one dtype. Each parameter has a post-accumulate-grad hook; when every gradient of a bucket is
  ready, the bucket is flattened into one tensor and its ``all_reduce`` is started asynchronously
  (buckets start in bucket order on every rank, so the collectives match), while backward goes on
  computing the other gradients. When the last bucket has started, backward waits for all of
  them and writes the averages back into each ``.grad``.
- :meth:`no_sync` skips the reduction: gradients accumulate locally, and the first backward
  outside it averages the accumulated sums (gradient accumulation over several micro-batches).
- ``find_unused_parameters=True``: after each forward the graph is searched for the parameters
  it does not reach; they count as ready with a zero gradient, so the buckets still complete.
  Without it, a parameter that gets no gradient leaves the reduction unfinished, and the next
  forward raises naming it.
"""
from __future__ import annotations

import contextlib
import numbers

from anydevice import api as _api
from anydevice.engine.graph import is_grad_enabled, no_grad
from anydevice.engine.tensor import Tensor

from .collectives import ReduceOp, all_reduce, broadcast
from .group import get_world_size, resolve

__all__ = ["DistributedDataParallel", "DataParallel"]

_MB = 1 << 20


class _Bucket:
    """Parameters whose gradients are reduced as one flat tensor."""

    __slots__ = ("params", "ready", "work", "flat")

    def __init__(self, params: list):
        self.params, self.ready, self.work, self.flat = params, 0, None, None


class DistributedDataParallel:
    """Wrap ``module`` so that ``backward()`` averages its gradients over the ranks of ``process_group``
    (default: the world). See the module docstring for what happens when.

    :param module: the model (an :class:`anydevice.nn.Module`, or anything with ``parameters()``,
        ``named_parameters()``, ``buffers()`` and a ``__call__``), already on this rank's device.
    :param device_ids: ``None``, or a one-entry list naming this rank's device (``[local_rank]``,
        ``["npu:1"]``); it must be the device the parameters are on.
    :param bucket_cap_mb: the most MiB of gradients in one bucket (one all_reduce).
    :param broadcast_buffers: broadcast rank 0's buffers before each training forward.
    :param find_unused_parameters: look for parameters a forward does not use (see above).
    """

    def __init__(self, module, device_ids=None, bucket_cap_mb: float = 25, broadcast_buffers: bool = True,
                 find_unused_parameters: bool = False, process_group=None, output_device=None, dim: int = 0):
        who = "DistributedDataParallel()"
        for name, v in (("broadcast_buffers", broadcast_buffers), ("find_unused_parameters", find_unused_parameters)):
            if not isinstance(v, bool):
                raise TypeError(f"{who}: {name} must be True or False, got {v!r}")
        if isinstance(bucket_cap_mb, bool) or not isinstance(bucket_cap_mb, numbers.Real) or not bucket_cap_mb > 0:
            raise ValueError(f"{who}: bucket_cap_mb must be a positive number of MiB, got {bucket_cap_mb!r}")
        for name in ("parameters", "named_parameters", "buffers"):
            if not callable(getattr(module, name, None)):
                raise TypeError(f"{who}: module must be an anydevice.nn.Module (it has no {name}()), "
                                f"got {type(module).__name__}")
        self.module = module
        self.process_group = resolve(process_group, "DistributedDataParallel")
        self.world_size = get_world_size(self.process_group)
        self.broadcast_buffers, self.find_unused_parameters = broadcast_buffers, find_unused_parameters
        self.bucket_cap_mb = float(bucket_cap_mb)
        named = _unique(module.named_parameters())
        self._params = [p for _, p in named if p.requires_grad]
        self._names = {id(p): n for n, p in named}
        self.device = _one_device(self._params, device_ids, who)
        with no_grad():
            for t in self._params + list(module.buffers()):
                broadcast(t, 0, group=self.process_group)
        self._buckets = _buckets(self._params, self.bucket_cap_mb * _MB)
        self._bucket_of = {id(p): b for b in self._buckets for p in b.params}
        self._hooks = [p.register_post_accumulate_grad_hook(self._grad_ready) for p in self._params]
        self._require_sync = True      # no_sync() clears it
        self._syncing = False          # the current forward's backward reduces
        self._launched = 0             # buckets started in this backward
        self._ready: set = set()       # id of the parameters whose gradient arrived in this step

    # --- what users call ------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        self._check_previous_step()
        if self.broadcast_buffers and self.world_size > 1 and getattr(self.module, "training", True):
            with no_grad():
                for b in self.module.buffers():
                    broadcast(b, 0, group=self.process_group)
        out = self.module(*args, **kwargs)
        self._syncing = self._require_sync and is_grad_enabled() and self.world_size > 1
        self._reset()
        if self._syncing and self.find_unused_parameters:
            reached = _reachable(out)
            for p in self._params:
                if id(p._node) not in reached:
                    self._grad_ready(p)
        return out

    @contextlib.contextmanager
    def no_sync(self):
        """Forwards inside do not reduce their gradients: they accumulate in ``.grad`` on each rank,
        and the next backward of a forward outside averages the sums."""
        prev, self._require_sync = self._require_sync, False
        try:
            yield
        finally:
            self._require_sync = prev

    def parameters(self, recurse: bool = True) -> list:
        return self.module.parameters(recurse)

    def named_parameters(self, *args, **kwargs):
        return self.module.named_parameters(*args, **kwargs)

    def buffers(self, recurse: bool = True) -> list:
        return self.module.buffers(recurse)

    def state_dict(self, *args, **kwargs):
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, *args, **kwargs):
        return self.module.load_state_dict(*args, **kwargs)

    def train(self, mode: bool = True):
        self.module.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.module.zero_grad(set_to_none)

    def __repr__(self) -> str:
        return (f"DistributedDataParallel(world_size={self.world_size}, buckets={len(self._buckets)}, "
                f"module={self.module!r})")

    # --- the reduction ----------------------------------------------------------------------
    def _reset(self) -> None:
        for b in self._buckets:
            b.ready, b.work, b.flat = 0, None, None
        self._launched, self._ready = 0, set()

    def _grad_ready(self, p) -> None:
        """A parameter's gradient is final for this backward: start every bucket that is complete, in order."""
        if not self._syncing:
            return
        if id(p) in self._ready:
            self._syncing = False
            raise RuntimeError(
                f"DistributedDataParallel: parameter {self._names.get(id(p), '?')} got a second gradient in one "
                "step (a second backward through the same forward); run a forward per backward, or accumulate "
                "under no_sync()")
        self._ready.add(id(p))
        self._bucket_of[id(p)].ready += 1
        for b in self._buckets[:self._launched]:   # let MPI progress the reductions already started
            b.work.is_completed()
        while self._launched < len(self._buckets) and \
                self._buckets[self._launched].ready == len(self._buckets[self._launched].params):
            self._launch(self._buckets[self._launched])
            self._launched += 1
        if self._launched == len(self._buckets):
            self._finish()

    def _launch(self, b: _Bucket) -> None:
        grads = [_api.reshape(p.grad, (-1,)) if p.grad is not None else _api.zeros((p.size,), dtype=p.dtype,
                                                                                     device=p.device)
                 for p in b.params]
        b.flat = _api.concat(grads) if len(grads) > 1 else grads[0]
        b.work = all_reduce(b.flat, ReduceOp.SUM, group=self.process_group, async_op=True)

    def _finish(self) -> None:
        scale = 1.0 / self.world_size
        for b in self._buckets:
            b.work.wait()
            avg = b.flat * scale
            at = 0
            for p in b.params:
                p.grad = _api.reshape(avg[at: at + p.size], p.shape)
                at += p.size
        self._syncing = False
        self._reset()

    def _check_previous_step(self) -> None:
        if self._syncing and self._ready:
            waiting = [self._names.get(id(p), "?") for p in self._params if id(p) not in self._ready]
            self._syncing = False
            raise RuntimeError(
                "DistributedDataParallel: the previous backward did not finish reducing gradients: some parameters "
                f"got no gradient ({', '.join(waiting[:8])}{', ...' if len(waiting) > 8 else ''}); pass "
                "find_unused_parameters=True when a forward does not use every parameter")


#: Paddle's name.
DataParallel = DistributedDataParallel


def _unique(named) -> list:
    seen, out = set(), []
    for n, p in named:
        if id(p) not in seen:
            seen.add(id(p))
            out.append((n, p))
    return out


def _one_device(params: list, device_ids, who: str):
    devices = {p.device for p in params}
    if len(devices) > 1:
        raise ValueError(f"{who}: the module's parameters are on several devices ({', '.join(map(str, devices))}); "
                         "data-parallel training needs one device per rank: move the module with .to(device)")
    device = next(iter(devices), None)
    if device_ids is not None:
        if not isinstance(device_ids, (list, tuple)) or len(device_ids) != 1:
            raise ValueError(f"{who}: device_ids must be None or a one-entry list (this rank's device), "
                             f"got {device_ids!r}")
        want = device_ids[0]
        index = want if isinstance(want, int) else getattr(want, "index", None)
        if device is not None and (index != device.index or (not isinstance(want, int) and str(want) != str(device))):
            raise ValueError(f"{who}: device_ids={device_ids!r} does not name the device the parameters are on "
                             f"({device}); move the module there first or pass device_ids=None")
    return device


def _buckets(params: list, cap_bytes: float) -> list:
    """Buckets of at most ``cap_bytes`` of one dtype, the parameters taken in reverse order."""
    buckets, current, size = [], [], 0
    for p in reversed(params):
        nbytes = p.size * p.dtype.itemsize
        if current and (size + nbytes > cap_bytes or p.dtype is not current[0].dtype):
            buckets.append(_Bucket(current))
            current, size = [], 0
        current.append(p)
        size += nbytes
    if current:
        buckets.append(_Bucket(current))
    return buckets


def _reachable(out) -> set:
    """``id`` of every graph node the tensors in ``out`` (a tensor, or a list/tuple/dict of them) depend on."""
    stack = [t._node for t in _tensors(out) if t._node is not None]
    seen = set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        stack.extend(p for p in n.parents if p is not None)
    return seen


def _tensors(out):
    if isinstance(out, Tensor):
        yield out
    elif isinstance(out, (list, tuple)):
        for o in out:
            yield from _tensors(o)
    elif isinstance(out, dict):
        for o in out.values():
            yield from _tensors(o)
