"""Array kernels of roll, tile, repeat, diff, tensordot, tril and triu for numpy (this backend)
and CuPy (the cuda backend registers ``array_kernels(cupy)``). They receive the attributes as the
registry's canon leaves them: ``roll``'s shift and axis as tuples (an int shift with axis None),
``tensordot``'s axes as a pair of tuples."""
from __future__ import annotations

import numpy as np

_HALF = ("float16", "bfloat16")


def array_kernels(xp) -> dict:
    """``{op name: fn(*arrays, **attrs)}`` computing with the array module ``xp``."""

    def tensordot(a, b, axes):
        dt = a.dtype
        if dt.name in _HALF:  # one rounding at the end, as the other backends' matmul
            a, b = a.astype(np.float32), b.astype(np.float32)
        return xp.tensordot(a, b, axes=(list(axes[0]), list(axes[1]))).astype(dt, copy=False)

    return {
        "roll": lambda x, shift, axis: xp.roll(x, shift, axis=axis).reshape(x.shape),  # numpy makes a 0-d x 1-D
        "tile": lambda x, repetitions: xp.tile(x, repetitions),
        "repeat": lambda x, repeats, axis: xp.repeat(x, repeats, axis=axis),
        "diff": lambda x, axis, n: xp.diff(x, n=n, axis=axis),
        "tensordot": tensordot,
        "tril": lambda x, k: xp.tril(x, k),
        "triu": lambda x, k: xp.triu(x, k),
    }


def _contiguous(fn):
    def k(ctx, *a, **kw):
        r = fn(*a, **kw)
        return r if r.flags.c_contiguous else np.ascontiguousarray(r)  # (which would make a 0-d result 1-D)

    return k


def register(kernels) -> None:
    for name, fn in array_kernels(np).items():
        kernels.register(name, _contiguous(fn))
