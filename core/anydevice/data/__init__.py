"""Data loading: datasets, samplers, collation and the :class:`DataLoader` (PyTorch's
``torch.utils.data``; Paddle's ``paddle.io.DataLoader`` is :class:`anydevice.io.DataLoader`)."""
from __future__ import annotations

from anydevice.data.collate import default_collate, default_convert
from anydevice.data.dataloader import DataLoader, to_device
from anydevice.data.dataset import ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset, random_split
from anydevice.data.sampler import (
    BatchSampler,
    DistributedSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
)

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset", "random_split",
           "Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "BatchSampler",
           "DistributedSampler",
           "default_collate", "default_convert", "DataLoader", "to_device"]
