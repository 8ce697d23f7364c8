"""numpy kernels of the linalg and fft extensions (registered by :func:`anydevice_cpu.kernels.register`).

Factorizations that fail (a singular matrix, one that is not positive-definite) return NaN, as
other backends' libraries do; ``anydevice.linalg`` turns that into a LinAlgError. float16 and
bfloat16 are computed in float32 and rounded back.
"""
from __future__ import annotations

import numpy as np

from anydevice.ops.linalg_ext import canonical_eigh, canonical_qr, canonical_svd, power_by_squaring

_LOW = ("float16", "bfloat16")


def _kernel(fn):
    """A returning kernel: inputs in float32 when they are half precision, results rounded back."""

    def k(ctx, *xs, **kw):
        dt = xs[0].dtype
        if dt.name in _LOW:
            xs = [np.asarray(x, np.float32) for x in xs]
        with np.errstate(all="ignore"):
            r = fn(*xs, **kw)
        def back(e):  # (matrix_rank's counts stay int64)
            e = np.asarray(e)
            return e.astype(dt) if dt.name in _LOW and e.dtype.kind == "f" else e

        return tuple(back(e) for e in r) if isinstance(r, tuple) else back(r)

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
        if x.size == 0:  # zero padding only: all zeros (numpy's irfft and hfft of an empty input read uninitialized memory)
            r = np.zeros_like(r)
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


def composites(cp) -> dict:
    """Kernels of the ops that also decompose, for the array module ``cp`` (numpy, CuPy): one library call (or a
    few) instead of many small ops."""

    def vector_norm(x, axis, keepdims, ord):
        a = cp.abs(x)
        if ord == float("inf"):
            return a.max(axis=axis, keepdims=keepdims)
        if ord == -float("inf"):
            return a.min(axis=axis, keepdims=keepdims)
        if ord == 0:
            return (a != 0).sum(axis=axis, keepdims=keepdims).astype(a.dtype)
        if ord == 1 or a.size == 0:
            return a.sum(axis=axis, keepdims=keepdims)
        m = a.max(axis=axis, keepdims=True)
        m = cp.where(m == 0, 1, m)
        r = m * ((a / m) ** ord).sum(axis=axis, keepdims=True) ** (1.0 / ord)
        return r if keepdims else (r.reshape(()) if axis is None else r.squeeze(axis=axis))

    def matrix_norm(x, keepdims, ord):
        if ord in ("nuc", 2, -2):
            sv = cp.linalg.svd(x, compute_uv=False)
            r = sv.sum(-1) if ord == "nuc" else (sv.max(-1) if ord == 2 else sv.min(-1))
        elif ord == "fro":
            r = vector_norm(x, (-2, -1), False, 2)
        else:
            col = cp.abs(x).sum(axis=-2 if abs(ord) == 1 else -1)
            r = col.max(-1) if ord > 0 else col.min(-1)
        return r[..., None, None] if keepdims else r

    def rtol_of(x, rtol):
        return max(x.shape[-2:]) * float(np.finfo(np.finfo(x.dtype).dtype).eps) if rtol is None else rtol

    def matrix_rank(x, rtol):
        if min(x.shape[-2:]) == 0:
            return cp.zeros(x.shape[:-2], np.int64)
        sv = cp.linalg.svd(x, compute_uv=False)
        return (sv > rtol_of(x, rtol) * sv.max(-1, keepdims=True)).sum(-1).astype(np.int64)

    def pinv(x, rtol):
        if min(x.shape[-2:]) == 0:
            return cp.zeros(x.shape[:-2] + x.shape[-2:][::-1], x.dtype)
        u, sv, vh = cp.linalg.svd(x, full_matrices=False)
        keep = sv > rtol_of(x, rtol) * sv.max(-1, keepdims=True)
        inv = cp.where(keep, 1 / cp.where(keep, sv, 1), 0).astype(x.dtype)
        return cp.matmul(cp.conj(cp.swapaxes(vh, -1, -2)) * inv[..., None, :], cp.conj(cp.swapaxes(u, -1, -2)))

    def matrix_power(x, n):
        if n == 0:
            return cp.broadcast_to(cp.eye(x.shape[-1], dtype=x.dtype), x.shape).copy()
        return power_by_squaring(cp.matmul, cp.linalg.inv(x), -n) if n < 0 else power_by_squaring(cp.matmul, x, n)

    return {
        "vector_norm": vector_norm, "matrix_norm": matrix_norm, "matrix_rank": matrix_rank, "pinv": pinv,
        "matrix_power": matrix_power, "outer": cp.outer, "cross": lambda a, b, axis: cp.cross(a, b, axis=axis),
        "trace": lambda x, offset, dtype=None: cp.trace(x, offset=offset, axis1=-2, axis2=-1, dtype=x.dtype),
        "diagonal": lambda x, offset: cp.diagonal(x, offset=offset, axis1=-2, axis2=-1).copy(),
        # a 0-d array has nothing to shift (numpy's roll refuses an empty list of shifts)
        "fftshift": lambda x, axes: cp.fft.fftshift(x, axes=axes) if x.ndim else x.copy(),
        "ifftshift": lambda x, axes: cp.fft.ifftshift(x, axes=axes) if x.ndim else x.copy(),
    }


def frequencies(cp) -> dict:
    """fftfreq and rfftfreq for the array module ``cp`` (computed in float64, rounded once)."""
    return {n: (lambda n, d, dtype, _f=getattr(cp.fft, n): _f(n, d=d).astype(dtype.numpy)) for n in ("fftfreq", "rfftfreq")}


def register(kernels) -> None:
    for name, fn in {**TABLE, **composites(np)}.items():
        kernels.register(name, _kernel(fn))
    for name, fn in frequencies(np).items():
        kernels.register(name, lambda ctx, _f=fn, **kw: _f(**kw))
