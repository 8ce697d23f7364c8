"""The Array API ``linalg`` extension: ops of namespace ``"linalg"`` (functions of ``anydevice.linalg``).

Primitives (a backend implements them natively, else they run on the CPU): cholesky, inv, solve,
slogdet, eigh, svd, qr, and svdvals / eigvalsh (composite over svd / eigh, native where a backend
has a faster kernel). Everything else decomposes into other ops: det (slogdet), matrix_norm,
vector_norm, trace, diagonal, outer, cross, matrix_power, matrix_rank and pinv.

Results defined only up to a choice are made unique, the same on every backend: each eigenvector
(and each singular vector of U) has its largest-magnitude component real and positive (ties: the
first), V's rows follow U's columns, and qr's R has a real non-negative diagonal
(:func:`canonical_eigh`, :func:`canonical_svd`, :func:`canonical_qr`, shared by kernels and
references). cholesky and eigh read the lower triangle only; their gradients are with respect to
those entries.
"""
from __future__ import annotations

import math

import numpy as np

from anydevice.base import dtypes as _dt
from anydevice.base.errors import AxisError, UnsupportedError

# conformance inputs without importing anydevice.ops.samples (loaded only when samples are asked for)
from anydevice.ops.lazy_samples import sample as _sample
from anydevice.ops.lazy_samples import smooth as _smooth
from anydevice.ops.lazy_samples import values as _values
from anydevice.ops.registry import (
    REQUIRED,
    Attr,
    Axes,
    Bool,
    Choice,
    DType,
    Int,
    Optional,
    Real,
    broadcast_shapes,
    define,
    normalize_axes,
    same,
    to_real,
)
from anydevice.ops.statistical import _acc_rule

_FLOATING = "floating"
_TOL = {"float32": (1e-4, 1e-4), "complex64": (1e-4, 1e-4), "float16": (2e-2, 2e-2), "bfloat16": (8e-2, 8e-2)}


_GRAD = (_dt.float32, _dt.float64)


# --- canonical forms (array-module generic: numpy, CuPy) --------------------------------------------
def _phase(a, v):
    """v / |v| (1 where v is 0)."""
    m = a.abs(v)
    return a.where(m == 0, 1, v / a.where(m == 0, 1, m))


def _pivot_phase(a, vecs):
    """Per column of ``vecs`` (..., m, k): the phase of its largest-magnitude entry, shape (..., 1, k)."""
    if vecs.shape[-2] == 0:
        return a.ones(vecs.shape[:-2] + (1, vecs.shape[-1]), vecs.dtype)
    idx = a.argmax(a.abs(vecs), axis=-2)[..., None, :]
    return _phase(a, a.take_along_axis(vecs, idx, axis=-2))


def canonical_eigh(a, w, v):
    """Eigenvectors with their largest-magnitude component real and positive."""
    return w, v * a.conj(_pivot_phase(a, v))


def canonical_svd(a, u, s, vh):
    """U's columns (the first k = len(s) carry V's rows along) and the extra columns of a full U and
    extra rows of a full Vh each with the largest-magnitude component real and positive."""
    k = s.shape[-1]
    pu = _pivot_phase(a, u)
    rows = a.conj(_pivot_phase(a, a.swapaxes(vh, -1, -2)))  # a row's own phase, for the rows past k
    mult = a.concatenate([pu[..., :k], rows[..., k:]], axis=-1)
    return u * a.conj(pu), s, vh * a.swapaxes(mult, -1, -2)


def canonical_qr(a, q, r):
    """R with a real non-negative diagonal (Q's columns rescaled to match); the extra columns of a
    complete Q with their largest-magnitude component real and positive."""
    k = min(r.shape[-2], r.shape[-1])
    d = a.diagonal(r, axis1=-2, axis2=-1)[..., :k]
    ph = _phase(a, d)[..., None, :]
    if q.shape[-1] > k:
        ph = a.concatenate([ph, a.conj(_pivot_phase(a, q[..., k:]))], axis=-1)
    return q * ph, a.conj(a.swapaxes(ph, -1, -2))[..., : r.shape[-2], :] * r


# --- rules ----------------------------------------------------------------------------------------
def _matrix(op, s, what="x", square=True) -> None:
    if len(s) < 2:
        raise ValueError(f"{op}(): {what} must have at least 2 dimensions (a stack of matrices), not shape {tuple(s)}")
    if square and s[-1] != s[-2]:
        raise ValueError(f"{op}(): {what} must be a stack of square matrices (shape (..., n, n)), not shape {tuple(s)}")


def _square_shape(op):
    def rule(shapes, attrs):
        _matrix(op, shapes[0])
        return tuple(shapes[0])

    return rule


def _real_of(d):
    return {_dt.complex64: _dt.float32, _dt.complex128: _dt.float64}.get(d, d)


def _mT(xp, x):
    return xp.matrix_transpose(x)


def _mH(xp, x):
    return xp.conj(xp.matrix_transpose(x)) if x.dtype.kind == "complex" else xp.matrix_transpose(x)


def _tri(xp, n, device, lower=True, strict=False):
    """Bool mask of the lower (or upper) triangle of an n x n matrix."""
    i = xp.arange(n, dtype=_dt.int64, device=device)
    d = xp.expand_dims(i, axis=-1) - xp.expand_dims(i, axis=0)  # row - column
    d = d if lower else -d
    return d > 0 if strict else d >= 0


def _zeros(xp, x):
    return xp.zeros_like(x)


def _lower_grad(xp, a):
    """The gradient with respect to the lower triangle of a function of the symmetric matrix built
    from it, given the gradient ``a`` with respect to every entry: strict lower a + a^H, diagonal a."""
    n = a.shape[-1]
    s = a + _mH(xp, a)
    diag = xp.eye(n, dtype=_dt.bool_, device=a.device)
    return xp.where(_tri(xp, n, a.device, strict=True), s, xp.where(diag, a, _zeros(xp, a)))


def _diag_embed(xp, v):
    n = v.shape[-1]
    return xp.expand_dims(v, axis=-1) * xp.eye(n, dtype=v.dtype, device=v.device)


def _lstsq_right(xp, x, r):
    """x @ inv(r) through a solve: (r^H \\ x^H)^H."""
    return _mH(xp, xp.solve(_mH(xp, r), _mH(xp, x)))


def _mm(xp, *ms):
    out = ms[0]
    for m in ms[1:]:
        out = xp.matmul(out, m)
    return out


def _gap_inverse(xp, w, squared=False):
    """F[i, j] = 1 / (w_j - w_i) off the diagonal (w_j^2 - w_i^2 when ``squared``), 0 on it."""
    if squared:
        w = w * w
    e = xp.expand_dims(w, axis=-2) - xp.expand_dims(w, axis=-1)
    n = w.shape[-1]
    eye = xp.eye(n, dtype=_dt.bool_, device=w.device)
    return xp.where(eye, _zeros(xp, e), 1.0 / xp.where(eye, xp.ones_like(e), e))


# --- sample helpers -------------------------------------------------------------------------------------
def _spd(rng, d, shape):
    """Well-conditioned Hermitian positive-definite matrices of dtype d."""
    n = shape[-1]
    a = _values(rng, d, shape) / 3.0
    a64 = a.astype(np.complex128 if d.kind == "complex" else np.float64)
    m = a64 @ np.conj(np.swapaxes(a64, -1, -2)) + n * np.eye(n)
    return m.astype(d.numpy)


def _well(rng, d, shape):
    """Well-conditioned square matrices: values plus a dominant diagonal."""
    a = _values(rng, d, shape).astype(np.complex128 if d.kind == "complex" else np.float64)
    return (a + 4.0 * np.eye(shape[-1])).astype(d.numpy)


def _grad_ok(d) -> bool:
    return d in _GRAD


def _f32(*s):
    return np.zeros(s, np.float32) + 0.5


def _rows(make, rows, grads=()):
    """Samples from (shapes, attrs, desc) rows; ``grads`` rows are marked for gradient checks."""
    def gen(d, rng):
        out = [_sample([make(rng, d, s) for s in sh], dict(a), desc) for sh, a, desc in rows]
        if _grad_ok(d):
            out += [_sample([make(rng, d, s) for s in sh], dict(a), desc, grad=True) for sh, a, desc in grads]
        return out

    return gen


# --- cholesky, inv, solve, det / slogdet ------------------------------------------------------------------
def _cholesky_ref(x, upper=False):
    low = np.linalg.cholesky(x)
    return np.conj(np.swapaxes(low, -1, -2)) if upper else low


def _vjp_cholesky(xp, g, i, o, upper=False):
    low, gl = (_mH(xp, o), _mH(xp, g)) if upper else (o, g)
    n = low.shape[-1]
    p = xp.matmul(_mH(xp, low), gl)
    half = xp.where(xp.eye(n, dtype=_dt.bool_, device=p.device), p * 0.5, p)
    phi = xp.where(_tri(xp, n, p.device), half, _zeros(xp, p))
    s = _lstsq_right(xp, xp.solve(_mH(xp, low), phi), low)  # L^-H phi L^-1
    return (_lower_grad(xp, (s + _mH(xp, s)) * 0.5),)


define("cholesky", inputs=("x",), attrs={"upper": Bool(False)}, positional=0, namespace="linalg",
       dtype_rule=same(_FLOATING), shape_rule=_square_shape("cholesky"), reference=_cholesky_ref, vjp=_vjp_cholesky,
       category="linalg", tolerance=_TOL,
       samples=_rows(_spd, [([(3, 3)], {}, "(3, 3)"), ([(2, 4, 4)], {}, "batch of 2"), ([(3, 3)], {"upper": True}, "upper"),
                            ([(1, 1)], {}, "1x1"), ([(0, 0)], {}, "0x0")],
                     [([(3, 3)], {}, "smooth (3, 3)"), ([(2, 2, 2)], {"upper": True}, "upper, batch")]),
       errors=[([_f32(2, 3)], {}, ValueError, "non-square"), ([_f32(3)], {}, ValueError, "1-D"),
               ([np.asarray([[1.0, 2.0], [2.0, 1.0]], np.float32)], {}, ValueError, "not positive-definite"),
               ([np.eye(2, dtype=np.float32)], {"upper": 1}, TypeError, "upper=1")],
       doc="cholesky(x, /, *, upper=False): the Cholesky factor of Hermitian positive-definite matrices "
           "(lower, or its conjugate transpose); reads the lower triangle")


def _vjp_inv(xp, g, i, o):
    b = _mH(xp, o)
    return (-_mm(xp, b, g, b),)


define("inv", inputs=("x",), namespace="linalg", dtype_rule=same(_FLOATING), shape_rule=_square_shape("inv"),
       reference=lambda x: np.linalg.inv(x), vjp=_vjp_inv, category="linalg", tolerance=_TOL,
       samples=_rows(_well, [([(3, 3)], {}, "(3, 3)"), ([(2, 2, 2)], {}, "batch"), ([(1, 1)], {}, "1x1"),
                             ([(0, 0)], {}, "0x0")], [([(3, 3)], {}, "smooth (3, 3)")]),
       errors=[([_f32(2, 3)], {}, ValueError, "non-square"), ([np.zeros((2, 2), np.float32)], {}, ValueError, "singular")],
       doc="inv(x, /): the inverse of square matrices; a singular matrix raises LinAlgError (a ValueError)")


def _solve_shape(shapes, attrs):
    a, b = shapes
    _matrix("solve", a, "x1")
    if len(b) == 1:
        if b[0] != a[-1]:
            raise ValueError(f"solve(): x2 of shape {tuple(b)} does not match x1 of shape {tuple(a)} ({b[0]} != {a[-1]})")
        return tuple(a[:-1])
    _matrix("solve", b, "x2", square=False)
    if b[-2] != a[-1]:
        raise ValueError(f"solve(): x2 of shape {tuple(b)} does not match x1 of shape {tuple(a)} "
                         f"(x2 needs {a[-1]} rows, has {b[-2]})")
    return broadcast_shapes(a[:-2], b[:-2], opname="solve") + (a[-1], b[-1])


def _vjp_solve(xp, g, i, o):
    from anydevice.ops.elementwise import unbroadcast

    a, b = i
    vec = b.ndim == 1
    g2, x2 = (xp.expand_dims(g, axis=-1), xp.expand_dims(o, axis=-1)) if vec else (g, o)
    gb = xp.solve(_mH(xp, a), g2)
    ga = -xp.matmul(gb, _mH(xp, x2))
    if vec:
        gb = xp.squeeze(gb, axis=-1)
    return unbroadcast(xp, ga, a.shape), unbroadcast(xp, gb, b.shape)


def _solve_samples(d, rng):
    rows = [([(3, 3), (3, 2)], "(3, 3) \\ (3, 2)"), ([(3, 3), (3,)], "1-D right-hand side"),
            ([(2, 3, 3), (3, 1)], "batched x1, broadcast x2"), ([(2, 2), (0, 2, 3)], "empty batch")]
    out = [_sample([_well(rng, d, sh[0]), _values(rng, d, sh[1])], {}, desc) for sh, desc in rows]
    if _grad_ok(d):
        out.append(_sample([_well(rng, d, (3, 3)), _smooth(rng, d, (3, 2))], {}, "smooth", grad=True))
        out.append(_sample([_well(rng, d, (2, 2)), _smooth(rng, d, (2,))], {}, "smooth 1-D", grad=True))
    return out


define("solve", inputs=("x1", "x2"), namespace="linalg", dtype_rule=same(_FLOATING), shape_rule=_solve_shape,
       reference=lambda a, b: np.linalg.solve(a, b), vjp=_vjp_solve, category="linalg", tolerance=_TOL,
       samples=_solve_samples,
       errors=[([_f32(2, 3), _f32(2)], {}, ValueError, "non-square x1"), ([_f32(3, 3), _f32(2)], {}, ValueError, "x2 size"),
               ([np.zeros((2, 2), np.float32), _f32(2)], {}, ValueError, "singular")],
       doc="solve(x1, x2, /): x with x1 @ x = x2 (x2 of shape (..., M, K), or (M,) for one vector)")


def _slogdet_rule(ds, attrs):
    d, _ = same(_FLOATING)(ds, attrs)
    return d, (d, _real_of(d))


def _slogdet_ref(x):
    sign, logabsdet = np.linalg.slogdet(x)
    return sign, logabsdet


def _vjp_slogdet(xp, g, i, o):
    gs, gl = g
    sign, _ = o
    (a,) = i
    c = gl
    if a.dtype.kind == "complex":
        c = xp.make_complex(gl, -xp.imag(xp.conj(gs) * sign))
    c = xp.expand_dims(xp.expand_dims(c, axis=-1), axis=-1)
    return (c * _mH(xp, xp.inv(a)),)


define("slogdet", inputs=("x",), outputs=("sign", "logabsdet"), namespace="linalg", dtype_rule=_slogdet_rule,
       shape_rule=lambda s, a: (_square_shape("slogdet")(s, a)[:-2],) * 2, reference=_slogdet_ref, vjp=_vjp_slogdet,
       category="linalg", tolerance=_TOL, dtypes=_FLOATING,
       samples=_rows(_well, [([(3, 3)], {}, "(3, 3)"), ([(2, 2, 2)], {}, "batch"), ([(0, 0)], {}, "0x0")],
                     [([(3, 3)], {}, "smooth")]),
       errors=[([_f32(2, 3)], {}, ValueError, "non-square")],
       doc="slogdet(x, /) -> (sign, logabsdet): the sign (a unit complex number for complex x) and the log of "
           "the absolute value of the determinant")


def _det(xp, x):
    sign, logabs = xp.slogdet(x)
    return sign * xp.exp(xp.astype(logabs, sign.dtype) if sign.dtype.kind == "complex" else logabs)


def _vjp_det(xp, g, i, o):
    (a,) = i
    c = g * (xp.conj(o) if o.dtype.kind == "complex" else o)
    return (xp.expand_dims(xp.expand_dims(c, axis=-1), axis=-1) * _mH(xp, xp.inv(a)),)


define("det", inputs=("x",), namespace="linalg", dtype_rule=same(_FLOATING),
       shape_rule=lambda s, a: _square_shape("det")(s, a)[:-2], reference=lambda x: np.linalg.det(x), vjp=_vjp_det,
       decomposition=_det, category="linalg", tolerance=_TOL,
       samples=_rows(_well, [([(3, 3)], {}, "(3, 3)"), ([(2, 2, 2)], {}, "batch"), ([(1, 1)], {}, "1x1")],
                     [([(3, 3)], {}, "smooth")]),
       errors=[([_f32(2, 3)], {}, ValueError, "non-square"), ([_f32(3)], {}, ValueError, "1-D")],
       doc="det(x, /): the determinant (through slogdet)")


# --- eigh, eigvalsh, svd, svdvals, qr -------------------------------------------------------------------
def _eigh_rule(ds, attrs):
    d, _ = same(_FLOATING)(ds, attrs)
    return d, (_real_of(d), d)


def _eigh_ref(x):
    w, v = np.linalg.eigh(x)
    return canonical_eigh(np, w, v)


def _vjp_eigh(xp, g, i, o):
    gw, gv = g
    w, v = o
    inner = _diag_embed(xp, xp.astype(gw, v.dtype)) + xp.astype(_gap_inverse(xp, w), v.dtype) * xp.matmul(_mH(xp, v), gv)
    a = _mm(xp, v, inner, _mH(xp, v))
    return (_lower_grad(xp, (a + _mH(xp, a)) * 0.5),)


def _sym(rng, d, shape):
    a = _values(rng, d, shape).astype(np.complex128 if d.kind == "complex" else np.float64)
    return ((a + np.conj(np.swapaxes(a, -1, -2))) / 2).astype(d.numpy)


_EIG_ROWS = [([(3, 3)], {}, "(3, 3)"), ([(2, 4, 4)], {}, "batch"), ([(1, 1)], {}, "1x1"), ([(0, 0)], {}, "0x0")]

define("eigh", inputs=("x",), outputs=("eigenvalues", "eigenvectors"), namespace="linalg", dtype_rule=_eigh_rule,
       shape_rule=lambda s, a: (_square_shape("eigh")(s, a)[:-1], tuple(s[0])), reference=_eigh_ref, vjp=_vjp_eigh,
       category="linalg", tolerance=_TOL, dtypes=_FLOATING, samples=_rows(_sym, _EIG_ROWS, [([(3, 3)], {}, "smooth")]),
       errors=[([_f32(2, 3)], {}, ValueError, "non-square")],
       doc="eigh(x, /) -> (eigenvalues, eigenvectors) of Hermitian matrices (ascending; reads the lower triangle)")


def _vjp_eigvalsh(xp, g, i, o):
    _, v = xp.eigh(i[0])
    a = _mm(xp, v, _diag_embed(xp, xp.astype(g, v.dtype)), _mH(xp, v))
    return (_lower_grad(xp, (a + _mH(xp, a)) * 0.5),)


define("eigvalsh", inputs=("x",), namespace="linalg", dtype_rule=to_real(_FLOATING),
       shape_rule=lambda s, a: _square_shape("eigvalsh")(s, a)[:-1], reference=lambda x: np.linalg.eigvalsh(x),
       vjp=_vjp_eigvalsh, decomposition=lambda xp, x: xp.eigh(x)[0], category="linalg", tolerance=_TOL,
       samples=_rows(_sym, _EIG_ROWS, [([(3, 3)], {}, "smooth")]),
       errors=[([_f32(2, 3)], {}, ValueError, "non-square")], doc="eigvalsh(x, /): eigenvalues of Hermitian matrices")


def _svd_shape(shapes, attrs):
    s = shapes[0]
    _matrix("svd", s, square=False)
    m, n = s[-2:]
    k = min(m, n)
    b = tuple(s[:-2])
    if attrs["full_matrices"]:
        return b + (m, m), b + (k,), b + (n, n)
    return b + (m, k), b + (k,), b + (k, n)


def _svd_rule(ds, attrs):
    d, _ = same(_FLOATING)(ds, attrs)
    return d, (d, _real_of(d), d)


def _svd_ref(x, full_matrices=True):
    u, s, vh = np.linalg.svd(x, full_matrices=full_matrices)
    return canonical_svd(np, u, s, vh)


def _vjp_svd(xp, g, i, o, full_matrices=True):
    (a,) = i
    gu, gs, gvh = g
    u, s, vh = o
    m, n = a.shape[-2:]
    k = min(m, n)
    if full_matrices and m != n:
        u, gu = u[..., :, :k], gu[..., :, :k]
        vh, gvh = vh[..., :k, :], gvh[..., :k, :]
    v, gv = _mH(xp, vh), _mH(xp, gvh)
    f = xp.astype(_gap_inverse(xp, s, squared=True), a.dtype)
    sm = _diag_embed(xp, xp.astype(s, a.dtype))
    uu, vv = xp.matmul(_mH(xp, u), gu), xp.matmul(_mH(xp, v), gv)
    inner = (_mm(xp, f * (uu - _mH(xp, uu)), sm) + _diag_embed(xp, xp.astype(gs, a.dtype))
             + _mm(xp, sm, f * (vv - _mH(xp, vv))))
    out = _mm(xp, u, inner, vh)
    sinv = _diag_embed(xp, xp.astype(1.0 / s, a.dtype))
    if m > k:
        out = out + _mm(xp, gu - _mm(xp, u, _mH(xp, u), gu), sinv, vh)
    if n > k:
        out = out + _mm(xp, u, sinv, _mH(xp, gv - _mm(xp, v, _mH(xp, v), gv)))
    return (out,)


def _svd_samples(d, rng):
    rows = [((3, 3), True, "(3, 3)"), ((4, 3), False, "tall, reduced"), ((2, 3), False, "wide, reduced"),
            ((3, 2), True, "tall, full"), ((2, 3, 2), False, "batch"), ((0, 2), False, "empty")]
    out = [_sample([_values(rng, d, s)], {"full_matrices": f}, desc) for s, f, desc in rows]
    if _grad_ok(d):
        out += [_sample([_smooth(rng, d, s)], {"full_matrices": f}, "smooth " + desc, grad=True)
                for s, f, desc in (((3, 3), True, "square"), ((4, 2), False, "tall"), ((2, 3), False, "wide"))]
    return out


define("svd", inputs=("x",), outputs=("U", "S", "Vh"), attrs={"full_matrices": Bool(True)}, positional=0,
       namespace="linalg", dtype_rule=_svd_rule, shape_rule=_svd_shape, reference=_svd_ref, vjp=_vjp_svd,
       category="linalg", tolerance=_TOL, dtypes=_FLOATING, samples=_svd_samples,
       errors=[([_f32(3)], {}, ValueError, "1-D")],
       doc="svd(x, /, *, full_matrices=True) -> (U, S, Vh): x = U @ diag(S) @ Vh, S descending")


def _vjp_svdvals(xp, g, i, o):
    u, _, vh = xp.svd(i[0], full_matrices=False)
    return (_mm(xp, u, _diag_embed(xp, xp.astype(g, u.dtype)), vh),)


def _svdvals_shape(shapes, attrs):
    s = shapes[0]
    _matrix("svdvals", s, square=False)
    return tuple(s[:-2]) + (min(s[-2:]),)


define("svdvals", inputs=("x",), namespace="linalg", dtype_rule=to_real(_FLOATING), shape_rule=_svdvals_shape,
       reference=lambda x: np.linalg.svd(x, compute_uv=False), vjp=_vjp_svdvals,
       decomposition=lambda xp, x: xp.svd(x, full_matrices=False)[1], category="linalg", tolerance=_TOL,
       samples=_rows(_values, [([(3, 3)], {}, "(3, 3)"), ([(4, 2)], {}, "tall"), ([(2, 2, 3)], {}, "batch, wide"),
                              ([(0, 3)], {}, "empty")], [([(3, 2)], {}, "smooth")]),
       errors=[([_f32(3)], {}, ValueError, "1-D")], doc="svdvals(x, /): singular values, descending")


def _qr_shape(shapes, attrs):
    s = shapes[0]
    _matrix("qr", s, square=False)
    m, n = s[-2:]
    b = tuple(s[:-2])
    if attrs["mode"] == "complete":
        return b + (m, m), b + (m, n)
    k = min(m, n)
    return b + (m, k), b + (k, n)


def _qr_ref(x, mode="reduced"):
    q, r = np.linalg.qr(x, mode=mode)
    return canonical_qr(np, q, r)


def _vjp_qr(xp, g, i, o, mode="reduced"):
    gq, gr = g
    q, r = o
    m, n = i[0].shape[-2:]
    if m < n or (mode == "complete" and m != n):
        raise UnsupportedError(f"qr(): gradients are implemented for mode='reduced' with M >= N and for square "
                               f"matrices, not for shape {i[0].shape} with mode={mode!r}")
    mm = xp.matmul(r, _mH(xp, gr)) - xp.matmul(_mH(xp, gq), q)
    low = xp.where(_tri(xp, n, mm.device, strict=True), mm, _zeros(xp, mm))
    eye = xp.eye(n, dtype=_dt.bool_, device=mm.device)
    copyltu = low + _mH(xp, low) + xp.where(eye, mm, _zeros(xp, mm))
    return (_lstsq_right(xp, gq + xp.matmul(q, copyltu), _mH(xp, r)),)


def _qr_samples(d, rng):
    rows = [((3, 3), "reduced"), ((4, 3), "reduced"), ((2, 3), "reduced"), ((3, 2), "complete"),
            ((2, 3, 2), "reduced"), ((0, 3), "reduced")]
    out = [_sample([_well(rng, d, s) if s[0] == s[1] else _values(rng, d, s)], {"mode": m}, f"{s}, {m}") for s, m in rows]
    if _grad_ok(d):
        out += [_sample([_well(rng, d, (3, 3))], {}, "smooth square", grad=True),
                _sample([_smooth(rng, d, (4, 2))], {}, "smooth tall", grad=True)]
    return out


define("qr", inputs=("x",), outputs=("Q", "R"), attrs={"mode": Choice("reduced", ("reduced", "complete"))},
       positional=0, namespace="linalg", dtype_rule=lambda ds, a: (ds[0], (ds[0], ds[0])), shape_rule=_qr_shape,
       reference=_qr_ref, vjp=_vjp_qr, category="linalg", tolerance=_TOL, dtypes=_FLOATING, samples=_qr_samples,
       errors=[([_f32(2, 3)], {"mode": "r"}, ValueError, "mode 'r'"), ([_f32(3)], {}, ValueError, "1-D")],
       doc="qr(x, /, *, mode='reduced') -> (Q, R): x = Q @ R, R with a real non-negative diagonal")


# --- norms ------------------------------------------------------------------------------------------------
class _VectorOrd(Attr):
    """A norm order: an int or float, ±inf included (not NaN, not a bool)."""

    __slots__ = ()
    annotation = "int | float"

    def check(self, ctx, name, v):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            self.fail(ctx, name, v)
        if math.isnan(v):
            self.fail(ctx, name, v, ValueError)
        if isinstance(v, (int, np.integer)) and abs(int(v)) < 2 ** 53:
            return int(v)
        return float(v)  # an int beyond 2**53 means its float (numpy takes no int beyond int64)

    def allowed(self) -> str:
        return "an int or a float (inf and -inf included)"


class _MatrixOrd(Attr):
    """'fro', 'nuc', 1, -1, 2, -2, inf or -inf."""

    __slots__ = ()
    annotation = "int | float | str"
    CHOICES = ("fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf)

    def check(self, ctx, name, v):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (str, int, float, np.integer, np.floating)):
            self.fail(ctx, name, v)
        if v not in self.CHOICES:
            self.fail(ctx, name, v, ValueError)
        return v if isinstance(v, str) else (int(v) if math.isfinite(v) else float(v))

    def allowed(self) -> str:
        return "'fro', 'nuc', 1, -1, 2, -2, inf or -inf"


def _vector_norm(xp, x, axis=None, keepdims=False, ord=2):
    a = xp.abs(x)
    kw = {"axis": axis, "keepdims": keepdims}
    if ord == math.inf:
        return xp.max(a, **kw)
    if ord == -math.inf:
        return xp.min(a, **kw)
    if ord == 0:
        return xp.sum(xp.astype(a != 0, a.dtype), **kw)
    if ord == 1:
        return xp.sum(a, **kw)
    if a.size == 0:
        return xp.sum(a, **kw)
    m = xp.max(a, axis=axis, keepdims=True)  # scaled by the largest magnitude: no overflow or underflow
    safe = xp.where(m == 0, xp.ones_like(m), m)
    u = a / safe
    p = xp.sum(u * u, axis=axis, keepdims=True) if ord == 2 else xp.sum(xp.pow(u, float(ord)), axis=axis, keepdims=True)
    r = safe * (xp.sqrt(p) if ord == 2 else xp.pow(p, 1.0 / ord))
    return r if keepdims else (xp.reshape(r, ()) if axis is None else xp.squeeze(r, axis=axis))


def _vector_norm_ref(x, axis=None, keepdims=False, ord=2):
    return np.linalg.vector_norm(x, axis=axis, keepdims=keepdims, ord=ord)


def _vn_canon(shapes, attrs):
    axis = attrs["axis"]
    return attrs if axis is None else {**attrs, "axis": normalize_axes(axis, len(shapes[0]), "vector_norm")}


def _vn_shape(shapes, attrs):
    s, axis = shapes[0], attrs["axis"]
    axes = range(len(s)) if axis is None else axis
    if attrs["keepdims"]:
        return tuple(1 if k in axes else e for k, e in enumerate(s))
    return tuple(e for k, e in enumerate(s) if k not in axes)


def _norm_samples(d, rng):
    rows = [((2, 3), {}, "(2, 3)"), ((2, 3), {"axis": 1, "ord": 1}, "axis=1, ord=1"),
            ((2, 3, 2), {"axis": (0, 2), "keepdims": True}, "axes (0, 2), keepdims"),
            ((4,), {"ord": math.inf}, "ord=inf"), ((4,), {"ord": -math.inf}, "ord=-inf"), ((4,), {"ord": 0}, "ord=0"),
            ((3,), {"ord": 3.5}, "ord=3.5"), ((3,), {"ord": -1}, "ord=-1"), ((), {}, "0-d"), ((0, 3), {"axis": 0}, "empty")]
    out = [_sample([_values(rng, d, s, "nonzero")], a, desc) for s, a, desc in rows]
    big = {"float16": 1e4, "bfloat16": 1e30, "float32": 1e30, "float64": 1e200}.get(_real_of(d).name)
    if big:
        out.append(_sample([(_values(rng, d, (3,), "nonzero") * big).astype(d.numpy)], {}, "large magnitudes (no overflow)"))
    if _grad_ok(d):
        out += [_sample([_smooth(rng, d, (2, 3))], a, "smooth " + desc, grad=True)
                for a, desc in (({}, "ord=2"), ({"axis": 0, "ord": 3}, "ord=3"), ({"ord": 1}, "ord=1"))]
    return out


define("vector_norm", inputs=("x",), attrs={"axis": Axes(None), "keepdims": Bool(False), "ord": _VectorOrd(2)},
       positional=0, namespace="linalg", dtype_rule=to_real(_FLOATING), shape_rule=_vn_shape, canon=_vn_canon,
       reference=_vector_norm_ref, decomposition=_vector_norm, category="linalg", tolerance=_TOL,
       samples=_norm_samples,
       errors=[([_f32(3)], {"ord": "fro"}, TypeError, "ord='fro'"), ([_f32(3)], {"ord": math.nan}, ValueError, "ord=nan"),
               ([_f32(2, 3)], {"axis": 2}, ValueError, "axis out of range")],
       doc="vector_norm(x, /, *, axis=None, keepdims=False, ord=2): the p-norm over axes (all axes for None)")


def _matrix_norm(xp, x, keepdims=False, ord="fro"):
    if ord == "fro":
        return xp.vector_norm(x, axis=(-2, -1), keepdims=keepdims)
    if ord in ("nuc", 2, -2):
        s = xp.svdvals(x)
        r = xp.sum(s, axis=-1) if ord == "nuc" else (xp.max(s, axis=-1) if ord == 2 else xp.min(s, axis=-1))
    else:
        inner = -2 if abs(ord) == 1 else -1
        col = xp.sum(xp.abs(x), axis=inner)
        r = xp.max(col, axis=-1) if ord > 0 else xp.min(col, axis=-1)
    return xp.expand_dims(xp.expand_dims(r, axis=-1), axis=-1) if keepdims else r


def _matrix_norm_ref(x, keepdims=False, ord="fro"):
    return np.linalg.matrix_norm(x, keepdims=keepdims, ord=ord)


def _mn_shape(shapes, attrs):
    s = shapes[0]
    _matrix("matrix_norm", s, square=False)
    return tuple(s[:-2]) + ((1, 1) if attrs["keepdims"] else ())


define("matrix_norm", inputs=("x",), attrs={"keepdims": Bool(False), "ord": _MatrixOrd("fro")}, positional=0,
       namespace="linalg", dtype_rule=to_real(_FLOATING), shape_rule=_mn_shape, reference=_matrix_norm_ref,
       decomposition=_matrix_norm, category="linalg", tolerance=_TOL,
       samples=_rows(_values, [([(2, 3)], {"ord": o}, f"ord={o!r}") for o in _MatrixOrd.CHOICES]
                     + [([(2, 2, 3)], {"keepdims": True}, "batch, keepdims")],
                     [([(3, 2)], {"ord": o}, f"smooth, ord={o!r}") for o in ("fro", "nuc", 2, math.inf)]),
       errors=[([_f32(2, 3)], {"ord": "max"}, ValueError, "ord='max'"), ([_f32(2, 3)], {"ord": 3}, ValueError, "ord=3"),
               ([_f32(3)], {}, ValueError, "1-D")],
       doc="matrix_norm(x, /, *, keepdims=False, ord='fro'): a matrix norm over the last two axes")


# --- trace, diagonal, outer, cross, matrix_power ----------------------------------------------------------
def _diag_len(m, n, offset):
    return max(0, min(m, n - offset) if offset >= 0 else min(m + offset, n))


def _diagonal(xp, x, offset=0):
    m, n = x.shape[-2:]
    k = _diag_len(m, n, offset)
    flat = xp.reshape(x, tuple(x.shape[:-2]) + (m * n,))
    start = 0 if k == 0 else (offset if offset >= 0 else -offset * n)
    idx = xp.arange(start, stop=start + k * (n + 1), step=n + 1, dtype=_dt.int64, device=x.device)
    return xp.take(flat, idx, axis=-1)


def _diagonal_shape(op):
    def rule(shapes, attrs):
        s = shapes[0]
        _matrix(op, s, square=False)
        return tuple(s[:-2]) + (() if op == "trace" else (_diag_len(s[-2], s[-1], attrs["offset"]),))

    return rule


def _clamp_offset(shapes, attrs):
    """An offset beyond the matrix gives the same empty diagonal as one at its edge (kernels never
    see an offset C integers cannot hold)."""
    s = shapes[0]
    if len(s) < 2:
        return attrs
    return {**attrs, "offset": max(-s[-2], min(s[-1], attrs["offset"]))}


_DIAG_ROWS = [([(3, 4)], {}, "(3, 4)"), ([(3, 4)], {"offset": 1}, "offset 1"), ([(2, 4, 3)], {"offset": -2}, "offset -2"),
              ([(2, 3)], {"offset": 5}, "offset past the end"), ([(0, 3)], {}, "empty")]

define("diagonal", inputs=("x",), attrs={"offset": Int(0)}, positional=0, namespace="linalg",
       dtype_rule=same("all"), shape_rule=_diagonal_shape("diagonal"), canon=_clamp_offset,
       reference=lambda x, offset=0: np.diagonal(x, offset=offset, axis1=-2, axis2=-1).copy(),
       decomposition=_diagonal, category="linalg",
       samples=_rows(_values, _DIAG_ROWS, [([(3, 3)], {"offset": -1}, "smooth")]),
       errors=[([_f32(3)], {}, ValueError, "1-D"), ([_f32(2, 2)], {"offset": 1.0}, TypeError, "float offset")],
       doc="diagonal(x, /, *, offset=0): the diagonal of the last two axes (offset > 0: above it)")

define("trace", inputs=("x",), attrs={"offset": Int(0), "dtype": DType()}, positional=0, namespace="linalg",
       dtype_rule=_acc_rule("numeric", "trace"), shape_rule=_diagonal_shape("trace"), canon=_clamp_offset,
       reference=lambda x, offset=0, dtype=None: np.trace(x, offset=offset, axis1=-2, axis2=-1),
       decomposition=lambda xp, x, offset=0, dtype=None: xp.sum(xp.diagonal(x, offset=offset), axis=-1, dtype=x.dtype),
       category="linalg", samples=_rows(_values, _DIAG_ROWS, [([(3, 3)], {}, "smooth")]),
       errors=[([_f32(3)], {}, ValueError, "1-D")],
       doc="trace(x, /, *, offset=0, dtype=None): the sum of a diagonal of the last two axes")


def _outer_shape(shapes, attrs):
    a, b = shapes
    if len(a) != 1 or len(b) != 1:
        raise ValueError(f"outer(): x1 and x2 must be 1-D, not shapes {tuple(a)} and {tuple(b)}")
    return (a[0], b[0])


define("outer", inputs=("x1", "x2"), namespace="linalg", dtype_rule=same("numeric"), shape_rule=_outer_shape,
       reference=lambda a, b: np.outer(a, b),
       decomposition=lambda xp, a, b: xp.expand_dims(a, axis=-1) * xp.expand_dims(b, axis=0), category="linalg",
       samples=_rows(_values, [([(3,), (4,)], {}, "(3,) and (4,)"), ([(0,), (2,)], {}, "empty")],
                     [([(3,), (2,)], {}, "smooth")]),
       errors=[([_f32(2, 2), _f32(2)], {}, ValueError, "2-D x1")], doc="outer(x1, x2, /): the outer product of two vectors")


def _cross_shape(shapes, attrs):
    a, b = shapes
    s = broadcast_shapes(a, b, opname="cross")
    axis, n = attrs["axis"], min(len(a), len(b))
    if not -n <= axis < 0:
        raise AxisError(f"cross(): axis {axis} is not an axis of both inputs {tuple(a)} and {tuple(b)} (allowed: {-n}..-1)")
    if a[axis] != 3 or b[axis] != 3:
        raise ValueError(f"cross(): axis {axis} must have size 3 in both inputs, not shapes {tuple(a)} and {tuple(b)}")
    return s


def _cross(xp, a, b, axis=-1):
    rest = (slice(None),) * (-axis - 1)

    def part(t, k):
        return xp.getitem(t, key=(Ellipsis, k) + rest)

    a0, a1, a2 = (part(a, k) for k in range(3))
    b0, b1, b2 = (part(b, k) for k in range(3))
    return xp.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=axis)


define("cross", inputs=("x1", "x2"), attrs={"axis": Int(-1)}, positional=0, namespace="linalg",
       dtype_rule=same("numeric"), shape_rule=_cross_shape,
       reference=lambda a, b, axis=-1: np.cross(a, b, axis=axis), decomposition=_cross, category="linalg",
       samples=_rows(_values, [([(3,), (3,)], {}, "(3,)"), ([(2, 3), (3,)], {}, "broadcast"),
                              ([(3, 2), (3, 2)], {"axis": -2}, "axis=-2"), ([(0, 3), (0, 3)], {}, "empty")],
                     [([(2, 3), (2, 3)], {}, "smooth")]),
       errors=[([_f32(2), _f32(2)], {}, ValueError, "size 2"), ([_f32(3), _f32(3)], {"axis": 0}, ValueError, "axis 0")],
       doc="cross(x1, x2, /, *, axis=-1): the cross product of 3-element vectors (axis counts from the end)")


def power_by_squaring(matmul, x, n: int):
    """x multiplied by itself n >= 1 times with O(log n) products (array-module generic)."""
    out, base = None, x
    while n:
        if n & 1:
            out = base if out is None else matmul(out, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return out


def _matrix_power(xp, x, n):
    m = x.shape[-1]
    if n == 0:
        return xp.broadcast_to(xp.eye(m, dtype=x.dtype, device=x.device), x.shape) + xp.zeros_like(x)
    return power_by_squaring(xp.matmul, xp.inv(x), -n) if n < 0 else power_by_squaring(xp.matmul, x, n)


define("matrix_power", inputs=("x",), attrs={"n": Int(REQUIRED)}, positional=(1, 1), namespace="linalg",
       dtype_rule=same(_FLOATING), shape_rule=_square_shape("matrix_power"),
       reference=lambda x, n: np.linalg.matrix_power(x, n), decomposition=_matrix_power, category="linalg",
       tolerance=_TOL,
       samples=_rows(_well, [([(3, 3)], {"n": k}, f"n={k}") for k in (0, 1, 2, 5, -1, -2)] +
                     [([(2, 2, 2)], {"n": 3}, "batch, n=3")],
                     [([(2, 2)], {"n": 3}, "smooth, n=3"), ([(2, 2)], {"n": -2}, "smooth, n=-2")]),
       errors=[([_f32(2, 3)], {"n": 2}, ValueError, "non-square"), ([_f32(2, 2)], {"n": 1.5}, TypeError, "n=1.5")],
       doc="matrix_power(x, n, /): x multiplied by itself n times (n < 0: of its inverse; n = 0: the identity)")


# --- matrix_rank, pinv ------------------------------------------------------------------------------------------
def _default_rtol(x):
    return max(x.shape[-2:]) * float(np.finfo(_real_of(x.dtype).numpy).eps)


def _matrix_rank(xp, x, rtol=None):
    if min(x.shape[-2:]) == 0:
        return xp.full(tuple(x.shape[:-2]), 0, dtype=_dt.int64, device=x.device)
    s = xp.svdvals(x)
    tol = (_default_rtol(x) if rtol is None else rtol) * xp.max(s, axis=-1, keepdims=True)
    return xp.sum(xp.astype(s > tol, _dt.int64), axis=-1)


def _rank_rule(ds, attrs):
    d, _ = same(_FLOATING)(ds, attrs)
    return d, _dt.int64


_rank_rule.category = _FLOATING


def _low_rank(rng, d, shape):
    a = _values(rng, d, shape[:-1] + (1,)).astype(np.float64 if d.kind == "float" else np.complex128)
    b = _values(rng, d, shape[:-2] + (1, shape[-1])).astype(a.dtype)
    return (a @ b + np.eye(*shape[-2:]) * (np.arange(shape[-1]) < 1)).astype(d.numpy)


define("matrix_rank", inputs=("x",), attrs={"rtol": Optional(Real(lo=0.0))}, positional=0, namespace="linalg",
       dtype_rule=_rank_rule, shape_rule=lambda s, a: _mn_shape(s, {"keepdims": False}),
       reference=lambda x, rtol=None: np.asarray(np.linalg.matrix_rank(x, rtol=rtol)), decomposition=_matrix_rank,
       category="linalg", differentiable=False,
       samples=lambda d, rng: [_sample([_well(rng, d, (3, 3))], {}, "full rank"),
                                     _sample([_well(rng, d, (2, 3, 3))], {"rtol": 1e-3}, "batch, rtol"),
                                     _sample([_low_rank(rng, d, (3, 3))], {"rtol": 1e-3}, "rank 2, rtol 1e-3")],
       errors=[([_f32(3)], {}, ValueError, "1-D"), ([_f32(2, 2)], {"rtol": -1.0}, ValueError, "negative rtol")],
       doc="matrix_rank(x, /, *, rtol=None): the number of singular values above rtol * the largest "
           "(rtol None: max(M, N) * eps of x's dtype; a float only, not an array)")


def _pinv(xp, x, rtol=None):
    m, n = x.shape[-2:]
    if min(m, n) == 0:
        return xp.zeros_like(_mT(xp, x))
    u, s, vh = xp.svd(x, full_matrices=False)
    keep = s > (_default_rtol(x) if rtol is None else rtol) * xp.max(s, axis=-1, keepdims=True)
    inv_s = xp.where(keep, 1.0 / xp.where(keep, s, xp.ones_like(s)), xp.zeros_like(s))
    return xp.matmul(_mH(xp, vh) * xp.expand_dims(xp.astype(inv_s, x.dtype), axis=-2), _mH(xp, u))


define("pinv", inputs=("x",), attrs={"rtol": Optional(Real(lo=0.0))}, positional=0, namespace="linalg",
       dtype_rule=same(_FLOATING), shape_rule=lambda s, a: _svdvals_shape(s, a)[:-1] + (s[0][-1], s[0][-2]),
       reference=lambda x, rtol=None: np.linalg.pinv(x, rtol=rtol), decomposition=_pinv, category="linalg",
       tolerance=_TOL,
       samples=_rows(_well, [([(3, 3)], {}, "(3, 3)"), ([(2, 2, 2)], {}, "batch")], [([(2, 2)], {}, "smooth")])
       , errors=[([_f32(3)], {}, ValueError, "1-D")],
       doc="pinv(x, /, *, rtol=None): the Moore-Penrose pseudo-inverse (through svd)")
