"""CuPy kernels of the linalg and fft extensions: ``table(cp)`` maps op names to kernels computing
with the array module ``cp`` (CuPy; the tests pass a numpy stand-in).

cholesky and eigh read the lower triangle (as on the cpu), made explicit so the result does not
depend on which triangle cuSOLVER reads. A failed factorization gives NaN (cuSOLVER's info is
turned into an error where CuPy can, then into NaN); ``anydevice.linalg`` raises LinAlgError for
it. float16 and bfloat16 are computed in float32 and rounded back.
"""
from __future__ import annotations

import contextlib

import numpy as np

from anydevice.ops.linalg_ext import canonical_eigh, canonical_qr, canonical_svd, power_by_squaring

_FFT = ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fftn", "ifftn", "rfftn", "irfftn")
def table(cp) -> dict:
    def raising():
        errstate = getattr(__import__("cupyx"), "errstate", None)
        return errstate(linalg="raise") if errstate is not None else contextlib.nullcontext()

    def lower(x):
        low = cp.tril(x)
        return low + cp.conj(cp.swapaxes(cp.tril(x, -1), -1, -2))

    def nan_on_failure(fn, shape_of):
        def k(*xs, **kw):
            try:
                with raising():
                    return fn(*xs, **kw)
            except np.linalg.LinAlgError:
                return cp.full(shape_of(*xs), cp.nan, dtype=xs[0].dtype)
            except getattr(cp.linalg, "LinAlgError", np.linalg.LinAlgError):
                return cp.full(shape_of(*xs), cp.nan, dtype=xs[0].dtype)

        return k

    def cholesky(x, upper=False):
        low = cp.linalg.cholesky(lower(x))
        return cp.conj(cp.swapaxes(low, -1, -2)) if upper else low

    def solve_shape(a, b):
        return a.shape[:-1] if b.ndim == 1 else np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + b.shape[-2:]

    def solve(a, b):
        if b.ndim == 1:
            return cp.linalg.solve(a, cp.broadcast_to(b[:, None], a.shape[:-1] + (1,)))[..., 0]
        shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        return cp.linalg.solve(cp.broadcast_to(a, shape + a.shape[-2:]), cp.broadcast_to(b, shape + b.shape[-2:]))

    def fft(name):
        fn = getattr(cp.fft, name)
        real_out = name in ("irfft", "hfft", "irfftn")

        def k(x, **kw):
            r = fn(x, **kw)
            real = np.dtype(np.float32) if x.dtype in (np.complex64, np.float32) else np.dtype(np.float64)
            return r.astype(real if real_out else np.result_type(real, np.complex64))

        return k

    t = {
        "cholesky": nan_on_failure(cholesky, lambda x: x.shape),
        "inv": nan_on_failure(cp.linalg.inv, lambda x: x.shape),
        "solve": nan_on_failure(solve, solve_shape),
        "det": cp.linalg.det,
        "slogdet": lambda x: tuple(cp.linalg.slogdet(x)),
        "eigh": lambda x: canonical_eigh(cp, *cp.linalg.eigh(lower(x))),
        "eigvalsh": lambda x: cp.linalg.eigvalsh(lower(x)),
        "svd": lambda x, full_matrices: canonical_svd(cp, *cp.linalg.svd(x, full_matrices=full_matrices)),
        "svdvals": lambda x: cp.linalg.svd(x, compute_uv=False),
        "qr": lambda x, mode: canonical_qr(cp, *cp.linalg.qr(x, mode=mode)),
        **{n: fft(n) for n in _FFT},
        **_composites(cp),
    }
    out = {name: _in_float32(cp, fn) for name, fn in t.items()}
    for name in ("fftfreq", "rfftfreq"):
        out[name] = lambda n, d, dtype, _f=getattr(cp.fft, name): _f(n, d=d).astype(dtype.numpy)
    return out


def _composites(cp) -> dict:
    """Kernels of ops that also decompose: one CuPy call (or a few) instead of many small launches."""

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
        "fftshift": lambda x, axes: cp.fft.fftshift(x, axes=axes),
        "ifftshift": lambda x, axes: cp.fft.ifftshift(x, axes=axes),
    }


def _in_float32(cp, fn):
    """fn with half-precision inputs computed in float32 and its results rounded back."""

    def k(*xs, **kw):
        dt = xs[0].dtype
        if dt.itemsize > 2 or dt.kind == "c":
            return fn(*xs, **kw)
        r = fn(*[x.astype(np.float32) for x in xs], **kw)

        def back(e):
            return e.astype(dt) if e.dtype.kind == "f" else e  # (matrix_rank counts stay int64)

        return tuple(back(e) for e in r) if isinstance(r, tuple) else back(r)

    return k
