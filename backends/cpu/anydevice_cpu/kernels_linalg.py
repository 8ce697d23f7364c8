"""numpy kernels of the linalg and fft extensions (registered by :func:`anydevice_cpu.kernels.register`).

Factorizations that fail (a singular matrix, one that is not positive-definite) return NaN, as
other backends' libraries do; ``anydevice.linalg`` turns that into a LinAlgError. float16 and
bfloat16 are computed in float32 and rounded back.
"""
from __future__ import annotations

import numpy as np

from anydevice.ops.linalg_ext import canonical_eigh, canonical_qr, canonical_svd

_LOW = ("float16", "bfloat16")


def _kernel(fn):
    """A returning kernel: inputs in float32 when they are half precision, results rounded back."""

    def k(ctx, *xs, **kw):
        dt = xs[0].dtype
        if dt.name in _LOW:
            xs = [np.asarray(x, np.float32) for x in xs]
        with np.errstate(all="ignore"):
            r = fn(*xs, **kw)
        if isinstance(r, tuple):
            return tuple(np.asarray(e).astype(dt) if dt.name in _LOW else np.asarray(e) for e in r)
        return np.asarray(r).astype(dt) if dt.name in _LOW else np.asarray(r)

    return k


def _or_nan(fn, shape_of):
    """fn, or NaN of the result's shape when numpy finds the matrix singular / not positive-definite."""

    def k(*xs, **kw):
        try:
            return fn(*xs, **kw)
        except np.linalg.LinAlgError:
            return np.full(shape_of(*xs), np.nan, dtype=np.result_type(*xs))

    return k


def _cholesky(x, upper=False):
    low = np.linalg.cholesky(x)
    return np.conj(np.swapaxes(low, -1, -2)) if upper else low


def _solve_shape(a, b):
    if b.ndim == 1:
        return a.shape[:-1]
    return np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + b.shape[-2:]


def _fft_kernel(name):
    fn = getattr(np.fft, name)
    real_out = name in ("irfft", "hfft", "irfftn")

    def k(x, **kw):
        r = fn(x, **kw)
        real = np.finfo(x.dtype).dtype if x.dtype.kind == "c" else x.dtype
        return r.astype(real if real_out else np.result_type(real, np.complex64))

    return k


TABLE = {
    "cholesky": _or_nan(_cholesky, lambda x: x.shape),
    "inv": _or_nan(np.linalg.inv, lambda x: x.shape),
    "solve": _or_nan(np.linalg.solve, _solve_shape),
    "det": np.linalg.det,
    "slogdet": lambda x: tuple(np.linalg.slogdet(x)),
    "eigh": lambda x: canonical_eigh(np, *np.linalg.eigh(x)),
    "eigvalsh": np.linalg.eigvalsh,
    "svd": lambda x, full_matrices: canonical_svd(np, *np.linalg.svd(x, full_matrices=full_matrices)),
    "svdvals": lambda x: np.linalg.svd(x, compute_uv=False),
    "qr": lambda x, mode: canonical_qr(np, *np.linalg.qr(x, mode=mode)),
    **{n: _fft_kernel(n) for n in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fftn", "ifftn", "rfftn", "irfftn")},
}


def register(kernels) -> None:
    for name, fn in TABLE.items():
        kernels.register(name, _kernel(fn))
