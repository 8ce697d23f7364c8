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

from anydevice.ops.linalg_ext import canonical_eigh, canonical_qr, canonical_svd
from anydevice_cpu.kernels_linalg import composites, frequencies  # array-module generic: the cpu's, on CuPy

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
        **composites(cp),
    }
    out = {name: _in_float32(cp, fn) for name, fn in t.items()}
    return {**out, **frequencies(cp)}


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
