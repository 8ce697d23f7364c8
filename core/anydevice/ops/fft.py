"""The Array API ``fft`` extension: ops of namespace ``"fft"`` (functions of ``anydevice.fft``).

fft, ifft, rfft and irfft decompose into a discrete Fourier transform written as real matrix
products with cos / sin tables built on the device (O(n^2) per transform: a correct on-device
path for a backend without an FFT kernel; backends with one register it and override it). The
others compose those: fftn / ifftn / rfftn / irfftn transform one axis after another, hfft and
ihfft are irfft / rfft of the conjugate, fftshift / ifftshift are two slices and a concat, and
fftfreq / rfftfreq an arange.

Complex gradients follow the usual convention for a real loss L: the gradient of a complex
tensor z is dL/dRe(z) + i dL/dIm(z); the gradient of a real input is real.
"""
from __future__ import annotations

import math

import numpy as np

from anydevice.base import dtypes as _dt

# conformance inputs without importing anydevice.ops.samples (loaded only when samples are asked for)
from anydevice.ops.lazy_samples import sample as _sample
from anydevice.ops.lazy_samples import smooth as _smooth
from anydevice.ops.lazy_samples import values as _values
from anydevice.ops.registry import (
    REQUIRED,
    Attr,
    Axes,
    Choice,
    Device,
    DType,
    Int,
    Optional,
    Real,
    define,
    normalize_axis,
)

_NORM = Choice("backward", ("backward", "ortho", "forward"))
_DUAL = {"backward": "forward", "forward": "backward", "ortho": "ortho"}
_COMPLEX = {_dt.float32: _dt.complex64, _dt.float64: _dt.complex128}
_REAL = {v: k for k, v in _COMPLEX.items()}
_TOL = {"float32": (1e-4, 1e-4), "complex64": (1e-4, 1e-4), "float64": (1e-10, 1e-10), "complex128": (1e-10, 1e-10)}




def _scale(n: int, norm: str, inverse: bool) -> float:
    if norm == "ortho":
        return 1.0 / math.sqrt(n)
    return 1.0 / n if (norm == "forward") != inverse else 1.0


# --- rules ------------------------------------------------------------------------------------------
def _rule(kind_in: str, kind_out: str):
    """dtype rule of a transform: ``kind_in`` is the input category ("complex_floating" or
    "float32_64"), ``kind_out`` "complex" or "real"."""

    def rule(ds, attrs):
        d = ds[0]
        out = _COMPLEX.get(d, d) if kind_out == "complex" else _REAL.get(d, d)
        return d, out

    rule.category = kind_in
    return rule


def _n_of(op, s, attrs, default):
    axis = normalize_axis(attrs["axis"], len(s), op)
    n = attrs["n"]
    if n is None:
        n = default(s[axis])
    if n < 1:
        raise ValueError(f"{op}(): n must be >= 1, not {n} (the default 2 * (m - 1) needs an input axis of size "
                         f"m >= 2)" if attrs["n"] is None else f"{op}(): n must be >= 1, not {n}")
    return axis, n


_DEFAULT_N = {"fft": lambda m: m, "ifft": lambda m: m, "rfft": lambda m: m, "ihfft": lambda m: m,
              "irfft": lambda m: 2 * (m - 1), "hfft": lambda m: 2 * (m - 1)}
_OUT_LEN = {"fft": lambda n: n, "ifft": lambda n: n, "irfft": lambda n: n, "hfft": lambda n: n,
            "rfft": lambda n: n // 2 + 1, "ihfft": lambda n: n // 2 + 1}


def _canon1(op):
    def canon(shapes, attrs):
        s = shapes[0]
        if len(s) == 0:
            raise ValueError(f"{op}(): x must have at least one dimension, not a 0-d array")
        axis, n = _n_of(op, s, attrs, _DEFAULT_N[op])
        return {**attrs, "axis": axis, "n": n}

    return canon


def _shape1(op):
    def rule(shapes, attrs):
        s = list(shapes[0])
        s[attrs["axis"]] = _OUT_LEN[op](attrs["n"])
        return tuple(s)

    return rule


class _Sizes(Attr):
    """None or a sequence of ints (fftn's ``s`` and ``axes``), normalized to a tuple."""

    __slots__ = ()
    annotation = "Sequence[int] | None"

    def check(self, ctx, name, v):
        if v is None:
            return None
        if not isinstance(v, (tuple, list)) or not all(isinstance(e, (int, np.integer)) and not isinstance(e, bool)
                                                       for e in v):
            self.fail(ctx, name, v)
        return tuple(int(e) for e in v)

    def allowed(self) -> str:
        return "None or a sequence of ints"


def _canon_n(op, inverse_real=False):
    """s and axes made concrete: axes (non-negative, distinct) and one size per axis."""

    def canon(shapes, attrs):
        shape, s, axes = shapes[0], attrs["s"], attrs["axes"]
        nd = len(shape)
        if axes is None:
            axes = tuple(range(nd)) if s is None else tuple(range(nd - len(s), nd))
        axes = tuple(normalize_axis(a, nd, op, "axes") for a in axes)
        if len(set(axes)) != len(axes):
            raise ValueError(f"{op}(): axes {attrs['axes']} repeat an axis")
        if s is None:
            s = tuple(shape[a] for a in axes)
            if inverse_real and axes:
                s = s[:-1] + (2 * (shape[axes[-1]] - 1),)
        elif len(s) != len(axes):
            raise ValueError(f"{op}(): s {tuple(s)} and axes {axes} must have the same length")
        for k in s:
            if k < 1:
                raise ValueError(f"{op}(): every size in s must be >= 1, not {tuple(s)}")
        if not axes and op in ("rfftn", "irfftn"):
            raise ValueError(f"{op}(): needs at least one axis")
        return {**attrs, "s": tuple(s), "axes": axes}

    return canon


def _shape_n(half=False):
    def rule(shapes, attrs):
        out = list(shapes[0])
        for a, n in zip(attrs["axes"], attrs["s"]):
            out[a] = n
        if half and attrs["axes"]:
            out[attrs["axes"][-1]] = attrs["s"][-1] // 2 + 1
        return tuple(out)

    return rule


# --- the DFT as matrix products ------------------------------------------------------------------------
def _fit(xp, x, n, axis):
    """x cut or zero-padded to length n along ``axis``."""
    m = x.shape[axis]
    if m == n:
        return x
    if m > n:
        return xp.getitem(x, key=(slice(None),) * axis + (slice(0, n),))
    pad = list(x.shape)
    pad[axis] = n - m
    return xp.concat([x, xp.full(tuple(pad), 0, dtype=x.dtype, device=x.device)], axis=axis)


def _tables(xp, rows, cols, period, sign, dtype, device, scale=1.0):
    """cos and sign * sin of 2 pi r c / period (r < rows, c < cols), r c reduced mod period first."""
    r = xp.arange(rows, dtype=_dt.int64, device=device)
    c = xp.arange(cols, dtype=_dt.int64, device=device)
    rc = xp.remainder(xp.expand_dims(r, axis=-1) * xp.expand_dims(c, axis=0), period)
    ang = xp.astype(rc, dtype) * (2.0 * math.pi / period)
    return xp.cos(ang) * scale, xp.sin(ang) * (sign * scale)


def _last(xp, x, axis):
    nd = x.ndim
    if axis == nd - 1:
        return x, lambda y: y
    perm = tuple(k for k in range(nd) if k != axis) + (axis,)
    back = tuple(perm.index(k) for k in range(nd))
    return xp.permute_dims(x, perm), lambda y: xp.permute_dims(y, back)


def _dft(xp, x, n, axis, inverse, norm):
    """fft / ifft of a complex x along ``axis`` through real matrix products."""
    x, back = _last(xp, _fit(xp, x, n, axis), axis)
    re, im = xp.real(x), xp.imag(x)
    c, s = _tables(xp, n, n, n, 1.0 if inverse else -1.0, re.dtype, x.device, _scale(n, norm, inverse))
    return back(xp.make_complex(xp.matmul(re, c) - xp.matmul(im, s), xp.matmul(re, s) + xp.matmul(im, c)))


def _rdft(xp, x, n, axis, norm):
    """rfft of a real x: the first n // 2 + 1 coefficients."""
    x, back = _last(xp, _fit(xp, x, n, axis), axis)
    c, s = _tables(xp, n, n // 2 + 1, n, -1.0, x.dtype, x.device, _scale(n, norm, False))
    return back(xp.make_complex(xp.matmul(x, c), xp.matmul(x, s)))


def _irdft(xp, x, n, axis, norm):
    """irfft: the real signal of length n whose spectrum's first n // 2 + 1 entries are x."""
    h = n // 2 + 1
    x, back = _last(xp, _fit(xp, x, h, axis), axis)
    re, im = xp.real(x), xp.imag(x)
    c, s = _tables(xp, h, n, n, 1.0, re.dtype, x.device)
    w = xp.expand_dims(_weights(xp, h, n, re.dtype, x.device) * _scale(n, norm, True), axis=-1)
    return back(xp.matmul(re, c * w) - xp.matmul(im, s * w))


def _weights(xp, h, n, dtype, device):
    """1 for the first coefficient (and the last for an even n), 2 for the others (their mirror image)."""
    j = xp.arange(h, dtype=_dt.int64, device=device)
    one = (j == 0) | ((j == h - 1) & (n % 2 == 0))
    return xp.where(one, xp.full((h,), 1.0, dtype=dtype, device=device), xp.full((h,), 2.0, dtype=dtype, device=device))


# --- VJPs -----------------------------------------------------------------------------------------------
def _vjp_fft(inverse):
    def vjp(xp, g, i, o, n, axis, norm):
        m = i[0].shape[axis]
        f = xp.fft if inverse else xp.ifft
        return (_fit(xp, f(g, n=n, axis=axis, norm=_DUAL[norm]), m, axis),)

    return vjp


def _vjp_rfft(xp, g, i, o, n, axis, norm):
    m = i[0].shape[axis]
    full = _fit(xp, g, n, axis)
    return (_fit(xp, xp.real(xp.ifft(full, n=n, axis=axis, norm=_DUAL[norm])), m, axis),)


def _vjp_irfft(xp, g, i, o, n, axis, norm):
    m = i[0].shape[axis]
    h = n // 2 + 1
    r = xp.rfft(g, n=n, axis=axis, norm=_DUAL[norm])
    shape = [1] * r.ndim
    shape[axis] = h
    w = xp.reshape(_weights(xp, h, n, g.dtype, g.device), tuple(shape))
    return (_fit(xp, r * xp.astype(w, r.dtype), m, axis),)


def _vjp_hfft(xp, g, i, o, n, axis, norm):
    (gx,) = _vjp_irfft(xp, g, i, o, n, axis, _DUAL[norm])
    return (xp.conj(gx),)


def _vjp_ihfft(xp, g, i, o, n, axis, norm):
    return _vjp_rfft(xp, xp.conj(g), i, o, n, axis, _DUAL[norm])


# --- samples ------------------------------------------------------------------------------------------------
def _complex_of(d):
    return _COMPLEX.get(d, d)


def _fft_samples(op, real_in):
    def gen(d, rng):
        rows = [((8,), {}, "(8,)"), ((2, 5), {}, "(2, 5), odd length"), ((3, 4), {"axis": 0}, "axis=0"),
                ((6,), {"n": 4}, "n=4 (cut)"), ((5,), {"n": 8}, "n=8 (padded)"), ((2, 6), {"norm": "ortho"}, "ortho"),
                ((7,), {"norm": "forward"}, "forward"), ((1,), {}, "length 1") if op not in ("irfft", "hfft") else
                ((2,), {}, "length 2"), ((0, 4), {}, "empty batch")]
        out = [_sample([_values(rng, d, s)], a, desc) for s, a, desc in rows]
        if real_in and d in (_dt.float32, _dt.float64):
            out += [_sample([_smooth(rng, d, s)], a, "smooth " + desc, grad=True)
                    for s, a, desc in (((6,), {}, "(6,)"), ((2, 5), {"n": 4, "norm": "ortho"}, "n=4, ortho"),
                                       ((3, 2), {"axis": 0, "n": 5, "norm": "forward"}, "axis 0, n=5, forward"))]
        return out

    return gen


def _errors1(op, good):
    bad = np.ones(4, np.complex64 if good == "float" else np.float32)
    ok = np.ones(4, np.float32 if good == "float" else np.complex64)
    return [([ok], {"n": 0}, ValueError, "n=0"), ([ok], {"n": 2.5}, TypeError, "float n"),
            ([ok], {"axis": 1}, ValueError, "axis out of range"), ([ok], {"norm": "none"}, ValueError, "norm 'none'"),
            ([bad], {}, TypeError, f"{bad.dtype} input"), ([np.ones((), ok.dtype)], {}, ValueError, "0-d input")]


_ATTRS1 = {"n": Optional(Int()), "axis": Int(-1), "norm": _NORM}


def _fft1(name, kind_in, kind_out, decomposition, vjp, doc):
    real_in = kind_in == "float32_64"
    define(name, inputs=("x",), attrs=dict(_ATTRS1), positional=0, namespace="fft",
           dtype_rule=_rule(kind_in, kind_out), canon=_canon1(name), shape_rule=_shape1(name),
           reference=lambda x, n, axis, norm: getattr(np.fft, name)(x, n=n, axis=axis, norm=norm),
           decomposition=decomposition, vjp=vjp, category="fft", tolerance=_TOL,
           samples=_fft_samples(name, real_in), errors=_errors1(name, "float" if real_in else "complex"), doc=doc)


_fft1("fft", "complex_floating", "complex", lambda xp, x, n, axis, norm: _dft(xp, x, n, axis, False, norm),
      _vjp_fft(False), "fft(x, /, *, n=None, axis=-1, norm='backward'): the one-dimensional discrete Fourier transform")
_fft1("ifft", "complex_floating", "complex", lambda xp, x, n, axis, norm: _dft(xp, x, n, axis, True, norm),
      _vjp_fft(True), "ifft(x, /, *, n=None, axis=-1, norm='backward'): the inverse of fft")
_fft1("rfft", "float32_64", "complex", lambda xp, x, n, axis, norm: _rdft(xp, x, n, axis, norm), _vjp_rfft,
      "rfft(x, /, *, n=None, axis=-1, norm='backward'): fft of a real signal, the n // 2 + 1 non-negative frequencies")
_fft1("irfft", "complex_floating", "real", lambda xp, x, n, axis, norm: _irdft(xp, x, n, axis, norm), _vjp_irfft,
      "irfft(x, /, *, n=None, axis=-1, norm='backward'): the inverse of rfft (n defaults to 2 * (m - 1))")
_fft1("hfft", "complex_floating", "real",
      lambda xp, x, n, axis, norm: xp.irfft(xp.conj(x), n=n, axis=axis, norm=_DUAL[norm]), _vjp_hfft,
      "hfft(x, /, *, n=None, axis=-1, norm='backward'): fft of a signal with Hermitian symmetry (a real spectrum)")
_fft1("ihfft", "float32_64", "complex",
      lambda xp, x, n, axis, norm: xp.conj(xp.rfft(x, n=n, axis=axis, norm=_DUAL[norm])), _vjp_ihfft,
      "ihfft(x, /, *, n=None, axis=-1, norm='backward'): the inverse of hfft")


# --- n-dimensional transforms ----------------------------------------------------------------------------------
def _fftn(one):
    def dec(xp, x, s, axes, norm):
        for a, n in zip(axes, s):
            x = getattr(xp, one)(x, n=n, axis=a, norm=norm)
        return x

    return dec


def _rfftn(xp, x, s, axes, norm):
    x = xp.rfft(x, n=s[-1], axis=axes[-1], norm=norm)
    for a, n in zip(axes[:-1], s[:-1]):
        x = xp.fft(x, n=n, axis=a, norm=norm)
    return x


def _irfftn(xp, x, s, axes, norm):
    for a, n in zip(axes[:-1], s[:-1]):
        x = xp.ifft(x, n=n, axis=a, norm=norm)
    return xp.irfft(x, n=s[-1], axis=axes[-1], norm=norm)


def _nd_samples(real_in):
    def gen(d, rng):
        rows = [((3, 4), {}, "(3, 4)"), ((2, 3, 4), {"axes": (0, 2)}, "axes (0, 2)"), ((4, 4), {"s": (3, 6)}, "s (3, 6)"),
                ((2, 4, 3), {"s": (4, 2), "axes": (2, 0), "norm": "ortho"}, "s and axes, ortho"),
                ((3, 4), {"norm": "forward"}, "forward")]
        out = [_sample([_values(rng, d, s)], a, desc) for s, a, desc in rows]
        if real_in and d in (_dt.float32, _dt.float64):
            out.append(_sample([_smooth(rng, d, (3, 4))], {"s": (2, 5)}, "smooth, s (2, 5)", grad=True))
        return out

    return gen


def _errors_n(good):
    ok = np.ones((2, 4), np.float32 if good == "float" else np.complex64)
    return [([ok], {"axes": (0, 0)}, ValueError, "repeated axis"), ([ok], {"s": (0, 2)}, ValueError, "size 0 in s"),
            ([ok], {"s": (2,), "axes": (0, 1)}, ValueError, "s and axes of different lengths"),
            ([ok], {"axes": (2,)}, ValueError, "axis out of range"), ([ok], {"s": 3}, TypeError, "s=3")]


def _fftn_op(name, kind_in, kind_out, dec, ref, half=False, inverse_real=False):
    real_in = kind_in == "float32_64"
    define(name, inputs=("x",), attrs={"s": _Sizes(None), "axes": _Sizes(None), "norm": _NORM}, positional=0,
           namespace="fft", dtype_rule=_rule(kind_in, kind_out), canon=_canon_n(name, inverse_real),
           shape_rule=_shape_n(half), reference=lambda x, s, axes, norm: ref(x, s=s, axes=axes, norm=norm),
           decomposition=dec, category="fft", tolerance=_TOL, samples=_nd_samples(real_in),
           errors=_errors_n("float" if real_in else "complex"),
           doc=f"{name}(x, /, *, s=None, axes=None, norm='backward'): {ref.__name__} over several axes")


_fftn_op("fftn", "complex_floating", "complex", _fftn("fft"), np.fft.fftn)
_fftn_op("ifftn", "complex_floating", "complex", _fftn("ifft"), np.fft.ifftn)
_fftn_op("rfftn", "float32_64", "complex", _rfftn, np.fft.rfftn, half=True)
_fftn_op("irfftn", "complex_floating", "real", _irfftn, np.fft.irfftn, inverse_real=True)


# --- shifts and frequencies ------------------------------------------------------------------------------------
def _shift(inverse):
    def dec(xp, x, axes=None):
        for a in range(x.ndim) if axes is None else axes:
            n = x.shape[a]
            k = (n + 1) // 2 if inverse else n // 2  # the roll, as a cut at n - k
            if n < 2 or k == 0:
                continue
            cut = n - k
            head = xp.getitem(x, key=(slice(None),) * a + (slice(0, cut),))
            tail = xp.getitem(x, key=(slice(None),) * a + (slice(cut, n),))
            x = xp.concat([tail, head], axis=a)
        return x

    return dec


def _shift_samples(d, rng):
    rows = [((8,), {}, "(8,)"), ((5,), {}, "odd length"), ((3, 4), {"axes": 0}, "axes=0"), ((3, 4), {"axes": (0, 1)}, "both"),
            ((0, 3), {}, "empty")]
    out = [_sample([_values(rng, d, s)], a, desc) for s, a, desc in rows]
    if d in (_dt.float32, _dt.float64):
        out.append(_sample([_smooth(rng, d, (3, 5))], {}, "smooth", grad=True))
    return out


for _name, _inv, _ref in (("fftshift", False, np.fft.fftshift), ("ifftshift", True, np.fft.ifftshift)):
    define(_name, inputs=("x",), attrs={"axes": Axes(None)}, positional=0, namespace="fft",
           dtype_rule=lambda ds, a: (ds[0], ds[0]), dtypes="floating", shape_rule=lambda s, a: tuple(s[0]),
           reference=lambda x, axes=None, _r=_ref: _r(x, axes=axes) if np.ndim(x) else np.array(x, copy=True),
           decomposition=_shift(_inv), category="fft",
           samples=_shift_samples, errors=[([np.ones(4, np.int32)], {}, TypeError, "int32 input"),
                                           ([np.ones(4, np.float32)], {"axes": 1}, ValueError, "axis out of range")],
           doc=f"{_name}(x, /, *, axes=None): {'undo fftshift' if _inv else 'move the zero frequency to the centre'}")


def _freq_rule(ds, attrs):
    d = attrs["dtype"]
    d = _dt.dtype(d) if d is not None else _dt.float32
    return d, d


_freq_rule.category = "real_floating"


def _freq_canon(name):
    def canon(shapes, attrs):
        if attrs["d"] == 0:
            raise ValueError(f"{name}(): d must not be 0")
        return {**attrs, "dtype": _freq_rule([], attrs)[1]}

    return canon


def _fftfreq(xp, n, d=1.0, dtype=None, device=None):
    k = xp.arange(n, dtype=_dt.int64, device=device)
    k = xp.where(k < (n + 1) // 2, k, k - n)
    return xp.astype(k, dtype) / (float(d) * n)


def _rfftfreq(xp, n, d=1.0, dtype=None, device=None):
    return xp.astype(xp.arange(n // 2 + 1, dtype=_dt.int64, device=device), dtype) / (float(d) * n)


def _freq_samples(d, rng):
    return [_sample([], {"n": n, "d": dd, "dtype": d}, f"n={n}, d={dd}") for n, dd in ((8, 1.0), (5, 0.1), (1, 2.0), (7, -0.5))]


for _name, _dec, _len in (("fftfreq", _fftfreq, lambda n: n), ("rfftfreq", _rfftfreq, lambda n: n // 2 + 1)):
    define(_name, attrs={"n": Int(REQUIRED, lo=1), "d": Real(1.0), "dtype": DType(), "device": Device()},
           positional=(1, 1), namespace="fft", dtype_rule=_freq_rule, canon=_freq_canon(_name),
           shape_rule=lambda s, a, _l=_len: (_l(a["n"]),),
           reference=lambda n, d=1.0, dtype=None, device=None, _f=getattr(np.fft, _name): _f(n, d=d),
           decomposition=_dec, category="fft", differentiable=False, samples=_freq_samples,
           errors=[([], {"n": 0}, ValueError, "n=0"), ([], {"n": 4, "d": 0.0}, ValueError, "d=0"),
                   ([], {"n": 4, "dtype": _dt.int32}, TypeError, "int32 dtype"), ([], {"n": 2.0}, TypeError, "float n")],
           doc=f"{_name}(n, /, *, d=1.0, dtype=None, device=None): the sample frequencies of "
               f"{'rfft' if _name == 'rfftfreq' else 'fft'} for a window of n samples spaced d apart")
