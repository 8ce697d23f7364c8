"""Samplers: which indices a DataLoader reads, in which order, and how they group into batches."""
from __future__ import annotations

import math
import numbers
import os

from anydevice.random import Generator, default_generator, randint, randperm

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "BatchSampler",
           "DistributedSampler"]


class Sampler:
    """Yields dataset indices; subclasses implement ``__iter__`` (and ``__len__`` when known)."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} does not implement __iter__")


class SequentialSampler(Sampler):
    """``0, 1, ..., len(data_source) - 1``."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


def _draws(generator):
    return generator if generator is not None else default_generator("cpu")


class RandomSampler(Sampler):
    """A new random permutation each epoch (``replacement=True``: ``num_samples`` independent draws),
    from ``generator`` (an :class:`anydevice.Generator`; default: the cpu's default generator)."""

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None, generator=None):
        self.data_source, self.replacement, self.generator = data_source, bool(replacement), generator
        if num_samples is not None and (not isinstance(num_samples, numbers.Integral) or num_samples <= 0):
            raise ValueError(f"RandomSampler(): num_samples must be a positive int, got {num_samples!r}")
        if num_samples is not None and not replacement:
            raise ValueError("RandomSampler(): num_samples needs replacement=True (a permutation has len(data) samples)")
        self._num_samples = num_samples

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n, g = len(self.data_source), _draws(self.generator)
        if self.replacement:
            idx = randint(0, n, (self.num_samples,), generator=g, device=g.device)
        else:
            idx = randperm(n, generator=g, device=g.device)
        return iter(idx.numpy().tolist())

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given ``indices`` in a new random order each epoch."""

    def __init__(self, indices, generator=None):
        self.indices, self.generator = list(indices), generator

    def __iter__(self):
        g = _draws(self.generator)
        order = randperm(len(self.indices), generator=g, device=g.device).numpy().tolist()
        return iter([self.indices[i] for i in order])

    def __len__(self) -> int:
        return len(self.indices)


class BatchSampler(Sampler):
    """Groups the indices of ``sampler`` into lists of ``batch_size`` (the last one shorter unless
    ``drop_last``)."""

    def __init__(self, sampler, batch_size: int, drop_last: bool = False):
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size <= 0:
            raise ValueError(f"BatchSampler(): batch_size must be a positive int, got {batch_size!r}")
        if not isinstance(drop_last, bool):
            raise TypeError(f"BatchSampler(): drop_last must be True or False, got {drop_last!r}")
        self.sampler, self.batch_size, self.drop_last = sampler, int(batch_size), drop_last

    def __iter__(self):
        batch = []
        for i in self.sampler:
            batch.append(i)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


#: Where the world size and this process's rank are read from when not given: the launcher's
#: variables, then MPICH's and Open MPI's (a plain ``mpiexec``).
_WORLD_ENV = (("WORLD_SIZE", "RANK"), ("PMI_SIZE", "PMI_RANK"), ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"))


def _world_from_env() -> tuple:
    for size, rank in _WORLD_ENV:
        if size in os.environ and rank in os.environ:
            return int(os.environ[size]), int(os.environ[rank])
    return 1, 0


def _count(who: str, name: str, v, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
        raise ValueError(f"{who}: {name} must be an int >= {lo}, got {v!r}")
    return int(v)


class DistributedSampler(Sampler):
    """The share of ``dataset`` one of ``num_replicas`` processes reads (PyTorch's
    ``torch.utils.data.DistributedSampler``): every process gets ``len(self)`` indices, together
    every index of the dataset.

    - ``num_replicas`` / ``rank``: default from the environment the launcher sets (``WORLD_SIZE``,
      ``RANK``; under a plain ``mpiexec`` MPICH's ``PMI_SIZE``/``PMI_RANK`` or Open MPI's), else 1 and 0.
    - ``shuffle``: a permutation drawn from ``seed + epoch`` (the same on every process; call
      :meth:`set_epoch` at the start of each epoch for a new order), else ``0, 1, 2, ...``.
    - The order is cut into ``num_replicas`` interleaved shares (process ``r`` takes positions
      ``r, r + num_replicas, ...``). When ``len(dataset)`` is not a multiple of ``num_replicas``,
      ``drop_last=False`` repeats the first indices of the order to fill the last round (a few
      samples are seen twice per epoch) and ``drop_last=True`` drops the tail of the order instead.
    """

    def __init__(self, dataset, num_replicas: int | None = None, rank: int | None = None, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False):
        who = "DistributedSampler()"
        for name, v in (("shuffle", shuffle), ("drop_last", drop_last)):
            if not isinstance(v, bool):
                raise TypeError(f"{who}: {name} must be True or False, got {v!r}")
        env_size, env_rank = _world_from_env()
        self.num_replicas = _count(who, "num_replicas", env_size if num_replicas is None else num_replicas, 1)
        self.rank = _count(who, "rank", env_rank if rank is None else rank, 0)
        if self.rank >= self.num_replicas:
            raise ValueError(f"{who}: rank must be in [0, {self.num_replicas - 1}] for num_replicas="
                             f"{self.num_replicas}, got {self.rank}")
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise TypeError(f"{who}: seed must be an int, got {seed!r}")
        self.dataset, self.shuffle, self.seed, self.drop_last, self.epoch = dataset, shuffle, int(seed), drop_last, 0
        n = len(dataset)
        if drop_last and n % self.num_replicas:
            self.num_samples = n // self.num_replicas
        else:
            self.num_samples = math.ceil(n / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def set_epoch(self, epoch: int) -> None:
        """Draw the next ``__iter__``'s order from ``seed + epoch`` (call it with the same epoch on every process)."""
        if isinstance(epoch, bool) or not isinstance(epoch, numbers.Integral):
            raise TypeError(f"DistributedSampler.set_epoch(): epoch must be an int, got {epoch!r}")
        self.epoch = int(epoch)

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle and n:
            g = Generator("cpu").manual_seed(self.seed + self.epoch)
            order = randperm(n, generator=g, device="cpu").numpy().tolist()
        else:
            order = list(range(n))
        if self.total_size > n and order:   # fill the last round with the first indices (again)
            order += (order * math.ceil(self.total_size / n))[: self.total_size - n]
        order = order[: self.total_size]
        return iter(order[self.rank: self.total_size: self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples
