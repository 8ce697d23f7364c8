"""Datasets: map-style (:class:`Dataset`: ``len`` and ``[i]``) and iterable (:class:`IterableDataset`),
and the helpers that build one from others."""
from __future__ import annotations

import bisect
import math
import numbers

from anydevice.random import default_generator, randperm

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset", "random_split"]


class Dataset:
    """A map-style dataset: subclasses implement ``__getitem__(index)`` and ``__len__()``."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} does not implement __getitem__")

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class IterableDataset:
    """A stream of samples: subclasses implement ``__iter__()``."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} does not implement __iter__")


class TensorDataset(Dataset):
    """Sample ``i`` is ``tuple(t[i] for t in tensors)``; every tensor has the same first dimension."""

    def __init__(self, *tensors):
        if not tensors:
            raise ValueError("TensorDataset(): give at least one tensor")
        for i, t in enumerate(tensors):
            if not hasattr(t, "shape") or len(t.shape) == 0:
                raise TypeError(f"TensorDataset(): argument {i} must be a tensor or array with a first dimension, "
                                f"got {type(t).__name__}{'' if not hasattr(t, 'shape') else ' of shape ()'}")
        n = {t.shape[0] for t in tensors}
        if len(n) != 1:
            raise ValueError(f"TensorDataset(): the tensors' first dimensions differ: {[t.shape[0] for t in tensors]}")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, [int(i) for i in indices]

    def __getitem__(self, index):
        if isinstance(index, (list, tuple)):
            return [self.dataset[self.indices[i]] for i in index]
        return self.dataset[self.indices[index]]

    def __len__(self) -> int:
        return len(self.indices)


class ConcatDataset(Dataset):
    """The samples of several map-style datasets, one after the other."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset(): give at least one dataset")
        for i, d in enumerate(self.datasets):
            if isinstance(d, IterableDataset):
                raise TypeError(f"ConcatDataset(): dataset {i} is an IterableDataset; only map-style datasets concatenate")
        self.cumulative_sizes, total = [], 0
        for d in self.datasets:
            total += len(d)
            self.cumulative_sizes.append(total)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, index):
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"ConcatDataset: index {index} is out of range for {n} samples")
        index %= n
        k = bisect.bisect_right(self.cumulative_sizes, index)
        return self.datasets[k][index - (self.cumulative_sizes[k - 1] if k else 0)]


def random_split(dataset, lengths, generator=None) -> list[Subset]:
    """Split ``dataset`` into non-overlapping :class:`Subset` s of the given ``lengths`` (ints summing
    to ``len(dataset)``, or fractions summing to 1: floors, the remainder dealt round-robin, as
    PyTorch does), from one permutation drawn with ``generator`` (an :class:`anydevice.Generator`;
    default: the cpu's default generator, so :func:`anydevice.manual_seed` fixes the split)."""
    n = len(dataset)
    lengths = list(lengths)
    if lengths and all(isinstance(x, float) for x in lengths) and math.isclose(sum(lengths), 1.0) and sum(lengths) <= 1:
        counts = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if not all(isinstance(x, numbers.Integral) and not isinstance(x, bool) and x >= 0 for x in lengths) \
            or sum(lengths) != n:
        raise ValueError(f"random_split(): lengths must be non-negative ints summing to len(dataset) = {n}, or "
                         f"fractions summing to 1; got {lengths}")
    g = generator if generator is not None else default_generator("cpu")
    perm = randperm(n, generator=g, device=g.device).numpy().tolist()
    out, start = [], 0
    for k in lengths:
        out.append(Subset(dataset, perm[start:start + k]))
        start += k
    return out
