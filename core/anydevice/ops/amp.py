"""Mixed-precision policy of every op, in one place: which ops autocast runs in the low
precision dtype, which it runs in float32, and (all others) which follow their inputs.

- ``LOW``: ops whose speed comes from matrix units (matmul, linear, convolutions, attention);
  autocast casts their floating inputs to the low dtype (bfloat16 or float16).
- ``FLOAT32``: ops whose accuracy needs the range or the precision of float32 — softmax, norms,
  losses and reductions; autocast casts their half-precision inputs to float32.
- every other op runs in the dtype its inputs promote to.

Ops are named here; names of ops a build does not define are ignored. Users override the
lists per autocast region (``anydevice.amp.autocast(custom_white_list=..., custom_black_list=...)``).
"""
from __future__ import annotations

LOW = frozenset({
    "matmul", "linear", "tensordot", "conv1d", "conv2d", "conv_transpose2d", "conv2d_input_grad",
    "conv2d_weight_grad", "scaled_dot_product_attention", "bilinear",
})
FLOAT32 = frozenset({
    # softmax and normalization
    "softmax", "log_softmax", "logsumexp", "layer_norm", "group_norm", "batch_norm",
    # losses
    "cross_entropy", "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", "mse_loss", "l1_loss",
    "smooth_l1_loss", "huber_loss", "kl_div",
    # reductions and norms
    "sum", "mean", "var", "std", "prod", "cumulative_sum", "cumulative_prod", "vector_norm", "matrix_norm",
})
LOW_KIND, FLOAT32_KIND = "low", "float32"


def policy(name: str, low=LOW, float32=FLOAT32):
    """``"low"``, ``"float32"`` or None (follow the inputs) for the op ``name``."""
    if name in low:
        return LOW_KIND
    if name in float32:
        return FLOAT32_KIND
    return None
