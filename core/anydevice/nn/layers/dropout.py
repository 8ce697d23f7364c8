"""Regularization and lookup: :class:`Dropout`, :class:`Embedding`."""
from __future__ import annotations

import anydevice.nn.functional as F
import anydevice.nn.init as init
from anydevice import random as _random
from anydevice.engine.graph import no_grad
from anydevice.nn.layers.linear import float_dtype, new_weight, positive_int
from anydevice.nn.module import Module

__all__ = ["Dropout", "Embedding"]


class Dropout(Module):
    """In training, zeroes each element with probability ``p`` and scales the rest by ``1 / (1 - p)``;
    in eval, the identity. Masks come from ``generator`` (by default the input device's default
    generator), so one seed drops the same elements on every device."""

    def __init__(self, p: float = 0.5, inplace: bool = False, *, generator=None):
        super().__init__()
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout(): p must be a probability in [0, 1], got {p!r}")
        self.p, self.generator = float(p), generator

    def forward(self, x):
        return _random.dropout(x, self.p, self.training, generator=self.generator)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class Embedding(Module):
    """A lookup table ``weight`` (num_embeddings, embedding_dim), initialized N(0, 1); the row
    ``padding_idx`` starts at zero and gets no gradient."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, *, dtype=None,
                 device=None, generator=None):
        super().__init__()
        self.num_embeddings = positive_int("Embedding", "num_embeddings", num_embeddings)
        self.embedding_dim = positive_int("Embedding", "embedding_dim", embedding_dim)
        if padding_idx is not None:
            if isinstance(padding_idx, bool) or not isinstance(padding_idx, int) or not (
                    -num_embeddings <= padding_idx < num_embeddings):
                raise ValueError(f"Embedding(): padding_idx must be an int in [-{num_embeddings}, {num_embeddings}), "
                                 f"got {padding_idx!r}")
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        self.weight = init.normal_(new_weight((num_embeddings, embedding_dim), float_dtype("Embedding", dtype), device),
                                   generator=generator)
        if padding_idx is not None:
            with no_grad():
                self.weight[padding_idx] = 0.0

    def forward(self, x):
        return F.embedding(x, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}" + (
            f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")
