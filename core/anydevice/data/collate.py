"""Turning a list of samples into a batch: :func:`default_collate` and :func:`default_convert`."""
from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence

import numpy as np

from anydevice import api as _api
from anydevice.engine.tensor import Tensor

__all__ = ["default_collate", "default_convert"]

_WHAT = "tensors, numpy arrays and scalars, numbers, strings, and dicts, tuples or lists of them"


def default_collate(batch):
    """Stack a list of samples into one batch, recursively.

    Tensors are stacked on their device (a new first dimension); numpy arrays and numpy scalars
    become one cpu tensor of their dtype; Python floats a float64 tensor, ints an int64 tensor,
    bools a bool tensor; strings stay a list; mappings collate per key (into a dict); tuples, named tuples and lists
    collate per position (each sample must have the same length) and keep their type.
    """
    if not isinstance(batch, Sequence) or isinstance(batch, (str, bytes)) or not len(batch):
        raise TypeError(f"default_collate(): batch must be a non-empty list of samples, got {type(batch).__name__}")
    elem = batch[0]
    if isinstance(elem, Tensor):
        _same(batch, Tensor)
        return _api.stack(list(batch))
    if isinstance(elem, (np.ndarray, np.generic)) and not isinstance(elem, (np.str_, np.bytes_)):
        _same(batch, (np.ndarray, np.generic))
        return _api.asarray(np.stack([np.asarray(b) for b in batch]), device="cpu")
    if isinstance(elem, (bool, numbers.Number)) and not isinstance(elem, complex):
        _same(batch, (bool, numbers.Number))
        kinds = {type(b) is bool for b in batch}
        dtype = "bool" if kinds == {True} else "float64" if any(isinstance(b, float) for b in batch) else "int64"
        return _api.asarray(list(batch), dtype=dtype, device="cpu")
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, Mapping):
        _same(batch, Mapping)
        keys = list(elem)
        for i, b in enumerate(batch):
            if set(b) != set(keys):
                raise ValueError(f"default_collate(): sample {i} has keys {sorted(map(str, b))}, sample 0 "
                                 f"{sorted(map(str, keys))}; every dict sample needs the same keys")
        return {k: default_collate([b[k] for b in batch]) for k in keys}
    if isinstance(elem, Sequence):
        _same(batch, Sequence)
        n = len(elem)
        for i, b in enumerate(batch):
            if len(b) != n:
                raise ValueError(f"default_collate(): sample {i} has {len(b)} fields, sample 0 has {n}; "
                                 "every sample needs the same number")
        cols = [default_collate([b[j] for b in batch]) for j in range(n)]
        if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # a named tuple
            return type(elem)(*cols)
        return tuple(cols) if isinstance(elem, tuple) else cols
    raise TypeError(f"default_collate(): cannot batch samples of type {type(elem).__name__}; it batches {_WHAT} "
                    "(pass collate_fn= for others)")


def _same(batch, kinds) -> None:
    for i, b in enumerate(batch):
        if not isinstance(b, kinds) or isinstance(b, (str, bytes)) and kinds is Sequence:
            raise TypeError(f"default_collate(): sample 0 is a {type(batch[0]).__name__} but sample {i} a "
                            f"{type(b).__name__}; samples must have the same structure")


def default_convert(sample):
    """One sample as a batch of one would be, without the new dimension (numpy arrays become cpu
    tensors, containers are converted per element); used when ``batch_size=None``."""
    if isinstance(sample, (np.ndarray, np.generic)) and not isinstance(sample, (np.str_, np.bytes_)):
        return _api.asarray(sample, device="cpu")
    if isinstance(sample, Mapping):
        return {k: default_convert(v) for k, v in sample.items()}
    if isinstance(sample, tuple) and hasattr(sample, "_fields"):
        return type(sample)(*(default_convert(v) for v in sample))
    if isinstance(sample, (list, tuple)):
        return type(sample)(default_convert(v) for v in sample)
    return sample
