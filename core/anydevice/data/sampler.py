"""Samplers: which indices a DataLoader reads, in which order, and how they group into batches."""
from __future__ import annotations

import numbers

from anydevice.random import default_generator, randint, randperm

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "BatchSampler"]


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
