"""The :class:`DataLoader`: batches from a dataset, loaded by background threads, delivered on a device.

    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, generator=g,
                        num_workers=2, device="npu:0")
    for xb, yb in loader:          # xb, yb are on npu:0
        loss = nn.mse_loss(model(xb), yb)

With ``device=`` and ``prefetch=True`` (the default), the copy of batch k+1 to the device is
queued on a side stream (``non_blocking=True``) before batch k is handed out, so it runs while the
step on batch k computes; the consumer's stream waits for a batch's copy (an event) before using it,
and the side stream waits for the consumer's earlier work before each copy, so device memory
freed by the previous step is never overwritten under it.
"""
from __future__ import annotations

import collections
import itertools
import numbers
import queue
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from anydevice.api.device import Stream, current_stream, stream_guard
from anydevice.data.collate import default_collate, default_convert
from anydevice.data.dataset import IterableDataset
from anydevice.data.sampler import BatchSampler, RandomSampler, SequentialSampler, SubsetRandomSampler, _draws
from anydevice.engine.tensor import Tensor
from anydevice.random import Generator
from anydevice.runtime.devices import as_device

__all__ = ["DataLoader", "to_device"]


class DataLoader:
    """Iterate over ``dataset`` in batches.

    - ``batch_size`` samples per batch (``None``: samples one by one, not collated), the last batch
      shorter unless ``drop_last``; ``shuffle=True`` draws a new order each epoch from
      ``generator`` (an :class:`anydevice.Generator`; default: the cpu's default generator);
      ``sampler`` (indices) or ``batch_sampler`` (lists of indices) replace that logic.
    - ``collate_fn`` (default :func:`default_collate`) turns a list of samples into a batch.
    - ``num_workers > 0``: that many background threads read and collate batches, up to
      ``prefetch_factor * num_workers`` ahead; batches still come in sampler order. An
      :class:`IterableDataset` is read by one background thread (its iterator is sequential).
    - ``device``: every tensor of a batch is delivered on that device; ``prefetch`` copies the next
      batch on a side stream while the current one is used (see the module docstring).
    """

    def __init__(self, dataset, batch_size: int | None = 1, shuffle: bool = False, sampler=None, batch_sampler=None,
                 num_workers: int = 0, collate_fn=None, drop_last: bool = False, generator=None,
                 prefetch_factor: int = 2, device=None, prefetch: bool = True):
        who = "DataLoader()"
        for name, v in (("shuffle", shuffle), ("drop_last", drop_last), ("prefetch", prefetch)):
            if not isinstance(v, bool):
                raise TypeError(f"{who}: {name} must be True or False, got {v!r}")
        for name, v, lo in (("num_workers", num_workers, 0), ("prefetch_factor", prefetch_factor, 1)):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
                raise ValueError(f"{who}: {name} must be an int >= {lo}, got {v!r}")
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral)
                                       or batch_size <= 0):
            raise ValueError(f"{who}: batch_size must be a positive int or None, got {batch_size!r}")
        if generator is not None and not isinstance(generator, Generator):
            raise TypeError(f"{who}: generator must be an anydevice.Generator, got {type(generator).__name__}")
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError(f"{who}: collate_fn must be callable, got {type(collate_fn).__name__}")
        self.iterable = isinstance(dataset, IterableDataset)
        if self.iterable and (shuffle or sampler is not None or batch_sampler is not None):
            raise ValueError(f"{who}: an IterableDataset sets its own order; shuffle, sampler and batch_sampler "
                             "are for map-style datasets")
        if not self.iterable and not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
            raise TypeError(f"{who}: dataset must have __getitem__ and __len__ (a Dataset) or be an IterableDataset, "
                            f"got {type(dataset).__name__}")
        if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or drop_last):
            raise ValueError(f"{who}: batch_sampler is mutually exclusive with batch_size, shuffle, sampler and drop_last")
        if sampler is not None and shuffle:
            raise ValueError(f"{who}: sampler is mutually exclusive with shuffle (a sampler sets the order)")
        if batch_size is None and drop_last:
            raise ValueError(f"{who}: drop_last needs a batch_size (batch_size=None loads samples one by one)")
        self.dataset, self.num_workers, self.prefetch_factor = dataset, int(num_workers), int(prefetch_factor)
        self.drop_last, self.generator, self.prefetch = drop_last, generator, prefetch
        self.device = None if device is None else as_device(device)
        self.batch_size = None if batch_sampler is not None else batch_size
        self.collate_fn = collate_fn or (default_collate if batch_size is not None or batch_sampler is not None
                                         else default_convert)
        if not self.iterable:
            if sampler is None:
                sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
            if batch_sampler is None and batch_size is not None:
                batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self._yielded, self._epoch_state, self._resume = 0, None, None

    def __len__(self) -> int:
        if self.iterable:
            n = len(self.dataset)  # TypeError when the dataset has no length, as for any iterable
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)

    # --- iteration --------------------------------------------------------------------------
    def __iter__(self):
        skip, g = 0, self._random_source()
        if self._resume is not None:
            state, self._resume = self._resume, None
            skip = state["batches_yielded"]
            if g is not None and state["generator"] is not None:
                g.set_state(state["generator"])  # the epoch's order is drawn again, as it was
        self._epoch_state = g.get_state() if g is not None else None
        self._yielded = skip
        batches = self._host_batches(skip)
        dev = self.device
        if dev is not None:
            if not self.prefetch or dev.type == "cpu":
                batches = (to_device(b, dev, non_blocking=True) for b in batches)  # queued on the consumer's stream
            else:
                batches = _prefetched(batches, dev)
        return self._counted(batches)

    def _counted(self, batches):
        for b in batches:
            self._yielded += 1
            yield b
        self._yielded, self._epoch_state = 0, None  # the epoch is complete: a resume starts the next one

    def _random_source(self):
        """The generator the sampler draws each epoch's order from (None: the order is not random)."""
        s = self.sampler if self.sampler is not None else getattr(self.batch_sampler, "sampler", None)
        if isinstance(s, (RandomSampler, SubsetRandomSampler)):
            return _draws(s.generator)
        return None

    # --- resuming mid-epoch (training checkpoints) -----------------------------------------------
    def state_dict(self) -> dict:
        """Where iteration stands: the batches handed out so far in the current epoch and the state
        of the sampler's generator when the epoch began (None when no epoch is under way or the
        order is not random). Save it with the model and optimizer; :meth:`load_state_dict` makes
        the next ``iter()`` continue the same epoch with the next batch, in the same order."""
        if self.iterable:
            raise TypeError("DataLoader.state_dict(): an IterableDataset sets its own order; a loader over it "
                            "cannot be resumed (save the dataset's own position instead)")
        return {"batches_yielded": self._yielded, "generator": self._epoch_state}

    def load_state_dict(self, state: dict) -> None:
        """Resume from :meth:`state_dict`: the next ``iter()`` skips the batches already handed out
        (without loading them)."""
        who = "DataLoader.load_state_dict()"
        if self.iterable:
            raise TypeError(f"{who}: a loader over an IterableDataset cannot be resumed")
        if not isinstance(state, Mapping) or set(state) != {"batches_yielded", "generator"}:
            got = sorted(state) if isinstance(state, Mapping) else type(state).__name__
            raise ValueError(f"{who}: expected a dict with keys 'batches_yielded' and 'generator' (from "
                             f"DataLoader.state_dict()), got {got}")
        k = state["batches_yielded"]
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 0 <= k <= len(self):
            raise ValueError(f"{who}: batches_yielded must be an int in 0..{len(self)} (this loader's length), got {k!r}")
        if state["generator"] is not None and self._random_source() is None:
            raise ValueError(f"{who}: the state holds a generator state, but this loader's order is not random")
        self._resume = {"batches_yielded": int(k), "generator": state["generator"]}

    def _fetch(self, index):
        if self.batch_sampler is None:
            return self.collate_fn(self.dataset[index])
        return self.collate_fn([self.dataset[i] for i in index])

    def _host_batches(self, skip: int = 0):
        if self.iterable:
            it = self._iterable_batches()
            return _in_background(it, self.prefetch_factor) if self.num_workers else it
        order = self.batch_sampler if self.batch_sampler is not None else self.sampler
        if skip:
            order = itertools.islice(order, skip, None)  # batches handed out before a resume: indices only
        if not self.num_workers:
            return (self._fetch(i) for i in order)
        return _in_pool(self._fetch, order, self.num_workers, self.prefetch_factor * self.num_workers)

    def _iterable_batches(self):
        if self.batch_size is None:
            for s in self.dataset:
                yield self.collate_fn(s)
            return
        batch = []
        for s in self.dataset:
            batch.append(s)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)

    def __repr__(self) -> str:
        return (f"DataLoader({type(self.dataset).__name__}, batch_size={self.batch_size}, num_workers={self.num_workers}, "
                f"device={self.device}, prefetch={self.prefetch})")


def to_device(batch, device, non_blocking: bool = False):
    """``batch`` with every tensor in it (nested in dicts, tuples, lists) copied to ``device``."""
    if isinstance(batch, Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        return {k: to_device(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(to_device(v, device, non_blocking) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device, non_blocking) for v in batch)
    return batch


def _prefetched(batches, dev):
    """Yield batches on ``dev``, the copy of each next batch queued on a side stream first."""
    side = Stream(dev)

    def stage(b):
        side.wait_stream(current_stream(dev))  # memory the consumer's queued work reads stays untouched
        with stream_guard(side):
            moved = to_device(b, dev, non_blocking=True)
        return moved, side.record_event()

    nxt = None
    for b in batches:
        staged = stage(b)
        if nxt is not None:
            yield _ready(nxt, dev)
        nxt = staged
    if nxt is not None:
        yield _ready(nxt, dev)


def _ready(staged, dev):
    moved, event = staged
    current_stream(dev).wait_event(event)
    return moved


def _in_pool(fetch, order, workers: int, ahead: int):
    """``fetch(i)`` for every ``i`` of ``order`` on ``workers`` threads, at most ``ahead`` in flight,
    yielded in order (a worker's exception is raised here, at its batch)."""
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="anydevice-data")
    pending: collections.deque = collections.deque()
    try:
        it = iter(order)
        for i in it:
            pending.append(pool.submit(fetch, i))
            if len(pending) >= ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for f in pending:
            f.cancel()
        pool.shutdown(wait=False, cancel_futures=True)


_END = object()


def _in_background(it, ahead: int):
    """The items of ``it``, produced by one background thread at most ``ahead`` items in advance."""
    q: queue.Queue = queue.Queue(maxsize=ahead)
    stop = threading.Event()

    def produce():
        try:
            for item in it:
                while not stop.is_set():
                    try:
                        q.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put((_END, None))
        except BaseException as e:  # noqa: BLE001 - raised in the consumer, at this item
            q.put((_END, e))

    t = threading.Thread(target=produce, name="anydevice-data", daemon=True)
    t.start()
    try:
        while True:
            item, err = q.get()
            if item is _END:
                if err is not None:
                    raise err
                return
            yield item
    finally:
        stop.set()
