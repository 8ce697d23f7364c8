""":class:`MultiheadAttention` (PyTorch's parameters, masks and layouts)."""
from __future__ import annotations

import math

import numpy as np

import anydevice.nn.init as init
from anydevice import api as _api
from anydevice import random as _random
from anydevice.nn.layers.linear import Linear, float_dtype, new_weight, positive_int
from anydevice.nn.module import Module

__all__ = ["MultiheadAttention"]


class MultiheadAttention(Module):
    """``num_heads`` attention heads over ``embed_dim // num_heads`` features each.

    ``forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False)`` returns ``(output, weights)``: inputs are
    (L, N, E), or (N, L, E) with ``batch_first=True``, or unbatched (L, E). As in PyTorch, a bool
    ``attn_mask`` (L, S) or (N * num_heads, L, S) and a bool ``key_padding_mask`` (N, S) are True
    where attention is *not* allowed; float masks are added to the scores. ``weights`` (N, L, S)
    (averaged over heads, else (N, num_heads, L, S)) is None when ``need_weights=False``.
    ``in_proj_weight`` starts xavier-uniform, the biases at zero (PyTorch's initialization).
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 batch_first: bool = False, *, dtype=None, device=None):
        super().__init__()
        positive_int("MultiheadAttention", "embed_dim", embed_dim)
        positive_int("MultiheadAttention", "num_heads", num_heads)
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention(): embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
            raise ValueError(f"MultiheadAttention(): dropout must be a probability in [0, 1), got {dropout!r}")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.dropout, self.batch_first = float(dropout), batch_first
        d = float_dtype("MultiheadAttention", dtype)
        self.in_proj_weight = init.xavier_uniform_(new_weight((3 * embed_dim, embed_dim), d, device))
        self.register_parameter("in_proj_bias", new_weight((3 * embed_dim,), d, device) if bias else None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=d, device=device)
        if bias:
            init.zeros_(self.out_proj.bias)

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True, attn_mask=None,
                average_attn_weights: bool = True, is_causal: bool = False):
        unbatched = query.ndim == 2
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise ValueError(f"MultiheadAttention(): query, key and value must all be 3-D (batched) or 2-D, got shapes "
                             f"{query.shape}, {key.shape}, {value.shape}")
        if unbatched:
            query, key, value = (_api.expand_dims(t, axis=0) for t in (query, key, value))
        elif not self.batch_first:
            query, key, value = (_api.permute_dims(t, (1, 0, 2)) for t in (query, key, value))
        n, L, e = query.shape
        s = key.shape[1]
        if e != self.embed_dim or key.shape[2] != e or value.shape[2] != e or key.shape[:2] != value.shape[:2]:
            raise ValueError(f"MultiheadAttention(): embed_dim is {self.embed_dim}; got query {query.shape}, key "
                             f"{key.shape}, value {value.shape} (batch first)")
        w, b = self.in_proj_weight, self.in_proj_bias
        proj = [_api.linear(t, w[i * e:(i + 1) * e], b[i * e:(i + 1) * e]) if b is not None else
                _api.matmul(t, _api.matrix_transpose(w[i * e:(i + 1) * e])) for i, t in enumerate((query, key, value))]
        q, k, v = (_api.permute_dims(_api.reshape(t, (n, t.shape[1], self.num_heads, self.head_dim)), (0, 2, 1, 3))
                   for t in proj)
        scores = _api.matmul(q, _api.matrix_transpose(k)) * (1.0 / math.sqrt(self.head_dim))  # (n, h, L, S)
        mask = self._mask(attn_mask, key_padding_mask, is_causal, n, L, s, scores)
        if mask is not None:
            scores = scores + mask
        p = _api.softmax(scores, axis=-1)
        if self.dropout and self.training:
            p = _random.dropout(p, self.dropout)
        out = _api.reshape(_api.permute_dims(_api.matmul(p, v), (0, 2, 1, 3)), (n, L, e))
        out = self.out_proj(out)
        if unbatched:
            out = _api.squeeze(out, axis=0)
        elif not self.batch_first:
            out = _api.permute_dims(out, (1, 0, 2))
        if not need_weights:
            return out, None
        weights = _api.mean(p, axis=1) if average_attn_weights else p
        return out, (_api.squeeze(weights, axis=0) if unbatched else weights)

    def _mask(self, attn_mask, key_padding_mask, is_causal, n, L, s, scores):
        """One additive float mask broadcastable to (n, heads, L, S), or None."""
        out = None
        if attn_mask is None and is_causal:
            causal = np.where(np.tri(L, s, dtype=bool), 0.0, -np.inf)
            attn_mask = _api.asarray(causal, dtype=scores.dtype, device=scores.device)
        if attn_mask is not None:
            if attn_mask.shape not in ((L, s), (n * self.num_heads, L, s)):
                raise ValueError(f"MultiheadAttention(): attn_mask must have shape {(L, s)} or "
                                 f"{(n * self.num_heads, L, s)}, got {attn_mask.shape}")
            out = self._additive(attn_mask, scores)
            if out.ndim == 3:
                out = _api.reshape(out, (n, self.num_heads, L, s))
        if key_padding_mask is not None:
            if key_padding_mask.shape != (n, s):
                raise ValueError(f"MultiheadAttention(): key_padding_mask must have shape {(n, s)}, got "
                                 f"{key_padding_mask.shape}")
            kp = _api.reshape(self._additive(key_padding_mask, scores), (n, 1, 1, s))
            out = kp if out is None else out + kp
        return out

    @staticmethod
    def _additive(mask, scores):
        if mask.dtype.kind == "bool":
            inf = _api.full(mask.shape, -math.inf, dtype=scores.dtype, device=scores.device)
            return _api.where(mask, inf, _api.zeros(mask.shape, dtype=scores.dtype, device=scores.device))
        return _api.astype(mask, scores.dtype)

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, batch_first={self.batch_first}"
