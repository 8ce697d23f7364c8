"""Sample inputs of every op, generated from its category and domain: the conformance inputs.

``samples(op, dtype, rng)`` returns a short list of :class:`Sample` (numpy inputs of ``dtype``
plus attributes) chosen by rules keyed by ``op.category`` (elementwise, reduction,
manipulation, indexing, creation, linalg, nn) and ``op.domain`` (which values are
meaningful: ``"positive"``, ``"nonzero_divisor"``, ``"pow"``, ``"shift"``, ...). Each rule
covers regular values, broadcasting, 0-d and empty tensors, large and tiny magnitudes,
NaN / ±Inf / −0.0 for floating dtypes, and non-default attributes. Ops whose attributes
depend on shapes (reshape, getitem, ...) have a small per-op table instead.

Samples flagged ``grad=True`` keep every value away from points where the op is not
smooth (integers for floor, ties for max, zero for abs), so a finite-difference gradient
of the reference is meaningful there.

``error_samples(op)`` returns invalid calls (bad shapes, axes, dtypes, attributes) with the
exception type every device must raise. An op may override either list with its own
``samples=`` / ``errors=`` data in ``define()``.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from anydevice.base import dtypes as _dt
from anydevice.ops.registry import _allowed

__all__ = ["Sample", "ErrorSample", "samples", "error_samples", "rng_for", "values"]


@dataclass
class Sample:
    """One valid call: ``op(*inputs, **attrs)``; a variadic input is a list of arrays."""

    inputs: list
    attrs: dict = field(default_factory=dict)
    desc: str = ""
    grad: bool = False  # values lie where the op is smooth: usable for gradient checks

    @property
    def shapes(self) -> list:
        return [[tuple(a.shape) for a in x] if isinstance(x, list) else tuple(x.shape) for x in self.inputs]


@dataclass
class ErrorSample:
    """One invalid call and the exception type it must raise on every device."""

    inputs: list
    attrs: dict
    exc: type
    desc: str

    @property
    def shapes(self) -> list:
        return [[tuple(a.shape) for a in x] if isinstance(x, list) else tuple(x.shape) for x in self.inputs]


def rng_for(op_name: str, dtype_name: str, salt: str = "") -> np.random.Generator:
    """A generator seeded from the op and dtype names: samples are the same on every run."""
    return np.random.default_rng(zlib.crc32(f"{op_name}/{dtype_name}/{salt}".encode()))


# --- values -----------------------------------------------------------------------------------
_FLOAT_RANGE = {
    "positive": (0.1, 5.0), "unit": (-0.9, 0.9), "exp": (-3.0, 3.0), "prod": (0.5, 1.5),
    "astype": (0.0, 50.0), "pow_base": (0.1, 3.0), "pow_exp": (-2.0, 2.0),
}
_INT_RANGE = {
    "shift_x": (0, 16), "shift_n": (0, 4), "pow_base": (-3, 4), "pow_exp": (0, 4), "prod": (-2, 3),
    "astype": (0, 50), "positive": (1, 10),
}
_NONZERO = ("nonzero", "nonzero_divisor")
#: Magnitudes that are large for the dtype but leave room for a few operations.
_BIG = {"float16": 1e4, "bfloat16": 1e30, "float32": 1e30, "float64": 1e200}
#: The smallest normal number of each floating dtype.
_TINY = {"float16": 6.104e-05, "bfloat16": 1.1755e-38, "float32": 1.1755e-38, "float64": 2.2251e-308}


def values(rng, d: _dt.DType, shape, domain=None) -> np.ndarray:
    """Random values of dtype ``d`` meaningful for ``domain`` (see module docstring)."""
    shape = tuple(shape)
    if d.kind == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    if d.kind in ("int", "uint"):
        lo, hi = _INT_RANGE.get(domain, (-5, 6))
        if d.kind == "uint":
            lo = max(lo, 0)
        v = rng.integers(lo, hi, size=shape)
        if domain in _NONZERO:
            v = np.where(v == 0, 1, v)
        return np.asarray(v).astype(d.numpy)
    lo, hi = _FLOAT_RANGE.get(domain, (-3.0, 3.0))
    v = rng.uniform(lo, hi, size=shape)
    if domain in _NONZERO:
        v = np.where(np.abs(v) < 0.25, np.copysign(0.5, v), v)
    if d.kind == "complex":
        v = v + 1j * rng.uniform(lo, hi, size=shape)
    return np.asarray(v).astype(d.numpy)


def smooth(rng, d: _dt.DType, shape, domain=None) -> np.ndarray:
    """Values at least 0.1 away from integers, half-integers and each other's sign flips."""
    shape = tuple(shape)
    mag = rng.choice([0.7, 1.2, 1.7, 2.2], size=shape) + rng.uniform(-0.08, 0.08, size=shape)
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    if domain in ("positive", "pow_base", "prod", "astype"):
        sign = np.ones(shape)
    v = sign * mag
    if domain == "unit":
        v = v * 0.4
    return np.asarray(v).astype(d.numpy)


#: Tiny magnitudes where formulas like exp(x) - 1 lose their relative accuracy.
_SMALL = (1e-8, -1e-6, 1e-4, -1e-3)


def _extremes(d: _dt.DType) -> tuple:
    """(smallest subnormal, smallest normal, largest finite) of a floating dtype."""
    info = np.finfo(d.numpy) if d.name != "bfloat16" else None
    if info is None:
        return 9.183549615799121e-41, _TINY[d.name], 3.3895313892515355e38
    return float(info.smallest_subnormal), float(info.smallest_normal), float(info.max)


def specials(d: _dt.DType) -> np.ndarray:
    """NaN, ±Inf, ±0, ordinary values, tiny magnitudes (1e-8 ... 1e-3), the smallest normal and
    subnormal numbers, a large magnitude and the dtype's max and min (the first seven values keep
    their places: NaN, +Inf, -Inf, -0, +0, 1, -2.5)."""
    sub, tiny, top = _extremes(d)
    big = _BIG[d.name]
    v = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -2.5, *_SMALL, tiny, -tiny, sub, -sub, -big, big, top, -top]
    return np.asarray(v, dtype=np.float64).astype(d.numpy)


def complex_grid(d: _dt.DType) -> np.ndarray:
    """Finite complex values whose parts are each ±0, tiny (1e-8 ... 1e-3), ordinary, large or the
    component dtype's max: where |z| over- or underflows and where cancellation costs accuracy."""
    top = _extremes(_dt.float32 if d is _dt.complex64 else _dt.float64)[2]
    parts = np.asarray([0.0, -0.0, 1e-8, -1e-4, 1e-3, 1.0, -2.5, _BIG["float32" if d is _dt.complex64 else "float64"], top])
    a, b = np.meshgrid(parts, parts)
    out = np.empty(a.size, d.numpy)
    out.real, out.imag = a.reshape(-1), b.reshape(-1)
    return out


def _input_domain(op, k: int, n: int):
    dom = op.domain
    if dom == "nonzero_divisor":
        return "nonzero_divisor" if k == n - 1 else None
    if dom == "shift":
        return "shift_x" if k == 0 else "shift_n"
    if dom == "pow":
        return "pow_base" if k == 0 else "pow_exp"
    return dom


def _arrays(op, d, shapes, rng, fn=values):
    return [fn(rng, d, s, _input_domain(op, k, len(shapes))) for k, s in enumerate(shapes)]


def _is_float(d) -> bool:
    return d.kind == "float"


# --- elementwise ------------------------------------------------------------------------------
#: Ops whose results never overflow for any integer input (selections, comparisons, bitwise).
_EXACT_INT = {"maximum", "minimum", "bitwise_and", "bitwise_or", "bitwise_xor", "where", "clip"}


def _elementwise(op, d, rng):
    n = len(op.inputs)
    if op.name == "where":
        return _where(op, d, rng)
    shapes = {1: [((2, 3),), ((),), ((0, 3),), ((5, 7),)],
              2: [((2, 3), (2, 3)), ((2, 1, 3), (4, 3)), ((), (3,)), ((0, 3), (3,))]}[n]
    names = ["regular", "0-d", "empty", "odd length"] if n == 1 else ["regular", "broadcast", "0-d with 1-D", "empty"]
    out = [Sample(_arrays(op, d, s, rng), {}, f"{nm} {' and '.join(map(str, s))}") for s, nm in zip(shapes, names)]
    if _is_float(d):
        sp = specials(d)
        if n == 1:
            out.append(Sample([sp], {}, _SPECIALS))
            if op.name == "gelu":
                out.append(Sample([sp], {"approximate": "tanh"}, f"approximate='tanh', {_SPECIALS}"))
        else:
            k = len(sp)
            out.append(Sample([sp.reshape(k, 1), sp.reshape(1, k)], {}, f"all pairs of {_SPECIALS}"))
    elif d.kind == "complex" and n == 1:
        grid = complex_grid(d)
        if op.name == "square":  # x * x overflows in a part (inf - inf) beyond sqrt(max), as the standard's formula does
            grid = grid[np.maximum(np.abs(grid.real), np.abs(grid.imag)) < 1e15]
        out.append(Sample([grid], {}, "parts ±0, tiny (1e-8 ... 1e-3), ordinary, large and max"))
    elif d.kind in ("int", "uint") and (op.name in _EXACT_INT or op.dtype_rule([d] * n, {})[1] is _dt.bool_):
        info = np.iinfo(d.numpy)
        ext = np.asarray([info.min, info.max, 0, 1, info.max - 1], dtype=d.numpy)
        out.append(Sample([ext] if n == 1 else [ext.reshape(-1, 1), ext.reshape(1, -1)], {},
                          "integer extremes"))
    if op.name == "clip":
        out = _clip_attrs(out, d)
    if op.name == "gelu":
        out.append(Sample([values(rng, d, (2, 3))], {"approximate": "tanh"}, "approximate='tanh'"))
    if op.differentiable and d in _GRAD_DTYPES:
        g = Sample(_arrays(op, d, [(2, 3)] * n, rng, smooth), {}, "smooth values (2, 3)", grad=True)
        if op.name == "clip":
            g.attrs = {"min": -1.0, "max": 1.0}
        if op.name == "gelu":
            out.append(Sample([smooth(rng, d, (2, 3))], {"approximate": "tanh"}, "smooth, approximate='tanh'", grad=True))
        out.append(g)
    return out


_SPECIALS = "NaN, ±Inf, ±0, tiny (1e-8 ... 1e-3), subnormal, smallest normal, large and max magnitudes"


def elementwise(op, d, rng) -> list:
    """The category's samples of element-wise ``op`` at ``d``, for ops whose ``samples=`` adds to them."""
    return [s for s in _elementwise(op, d, rng) if _valid(op, s)]


def _clip_attrs(out, d):
    f = (lambda v: v) if d.kind in ("float", "complex") else int
    lo, hi = (f(-1.0), f(1.0)) if d.kind != "uint" else (1, 3)
    attrs = [{"min": lo, "max": hi}, {"max": hi}, {"min": lo}, {"min": lo, "max": hi}, {"min": lo, "max": hi}]
    for s, a in zip(out, attrs):
        s.attrs = dict(a)
        s.desc += f", {', '.join(f'{k}={v}' for k, v in a.items())}"
    return out


def _where(op, d, rng):
    def c(shape):
        return np.asarray(rng.random(shape) < 0.5)

    out = [
        Sample([c((2, 3)), values(rng, d, (2, 3)), values(rng, d, (2, 3))], {}, "regular (2, 3)"),
        Sample([c((2, 1)), values(rng, d, (3,)), values(rng, d, (2, 3))], {}, "broadcast (2, 1), (3,), (2, 3)"),
        Sample([c(()), values(rng, d, ()), values(rng, d, ())], {}, "0-d"),
        Sample([c((0, 3)), values(rng, d, (0, 3)), values(rng, d, (3,))], {}, "empty (0, 3)"),
    ]
    if _is_float(d):
        sp = specials(d)
        out.append(Sample([c(sp.shape), sp, sp[::-1].copy()], {}, "NaN, ±Inf, ±0"))
    if d in _GRAD_DTYPES:
        out.append(Sample([c((2, 3)), smooth(rng, d, (2, 3)), smooth(rng, d, (1, 3))], {}, "smooth, broadcast", grad=True))
    return out


# --- reductions -------------------------------------------------------------------------------
def _reduction(op, d, rng):
    dom = op.domain
    x = values(rng, d, (2, 3, 4), dom)
    cases = [
        ({}, x, "all axes (2, 3, 4)"),
        ({"axis": 1, "keepdims": True}, x, "axis=1, keepdims=True"),
        ({"axis": (0, 2)}, x, "axis=(0, 2)"),
        ({"axis": -1}, x, "axis=-1 (negative)"),
        ({}, values(rng, d, (), dom), "0-d"),
        ({"axis": 0}, values(rng, d, (0, 3), dom), "empty (0, 3), axis=0"),
        ({"axis": 1}, values(rng, d, (5, 7), dom), "odd sizes (5, 7), axis=1"),
    ]
    if op.name in ("argmax", "argmin"):
        cases[1] = ({"keepdims": True}, x, "axis=None, keepdims=True")
        cases[2] = ({"axis": 1}, x, "axis=1")
    if "correction" in op.attrs:
        cases.append(({"axis": 1, "correction": 1.0}, x, "axis=1, correction=1"))
    if "dtype" in op.attrs and d.kind in ("int", "uint"):
        cases.append(({"axis": 0, "dtype": d}, x, f"axis=0, dtype={d.name}"))
    if _is_float(d):
        sp = specials(d)
        if op.name in ("argmax", "argmin"):
            sp = sp[~np.isnan(sp.astype(np.float64))]
        elif op.domain == "prod":
            sp = sp[[0, 1, 3, 5, 6]]
        cases.append(({}, sp, "NaN, ±Inf, ±0, tiny and large magnitudes"))
    out = [Sample([a], attrs, desc) for attrs, a, desc in cases]
    if op.differentiable and d in _GRAD_DTYPES:
        xs = smooth(rng, d, (2, 3, 4), dom)
        out.append(Sample([xs], {"axis": (0, 2), "keepdims": True}, "smooth, axis=(0, 2), keepdims=True", grad=True))
        out.append(Sample([smooth(rng, d, (3, 4), dom)], {}, "smooth, all axes", grad=True))
    return out


# --- manipulation -----------------------------------------------------------------------------
def _shape_samples(table):
    """Per-op table rows: (input shapes, attrs, description)."""

    def gen(op, d, rng):
        out = []
        for shapes, attrs, desc in table:
            if shapes and isinstance(shapes[0], list):
                arrs = [[values(rng, d, s, op.domain) for s in shapes[0]]]
            else:
                arrs = [values(rng, d, s, op.domain) for s in shapes]
            out.append(Sample(arrs, dict(attrs), desc))
        if op.differentiable and d in _GRAD_DTYPES:
            shapes, attrs, desc = table[0]
            if shapes and isinstance(shapes[0], list):
                arrs = [[smooth(rng, d, s) for s in shapes[0]]]
            else:
                arrs = [smooth(rng, d, s) for s in shapes]
            out.append(Sample(arrs, dict(attrs), f"smooth, {desc}", grad=True))
        return out

    return gen


def table(name: str, rows) -> callable:
    """``samples=`` for an op's own ``define()``: rows of (input shapes, attrs, description) as in
    the per-op tables here, values from the op's domain, plus a smooth gradient sample of the first
    row for differentiable ops."""

    def gen(d, rng):
        from anydevice.ops.registry import get_op

        op = get_op(name)
        return [s for s in _shape_samples(rows)(op, d, rng) if _valid(op, s)]

    return gen


_MANIP = {
    "reshape": [
        ([(2, 3, 4)], {"shape": (4, 6)}, "(2, 3, 4) -> (4, 6)"),
        ([(2, 3, 4)], {"shape": (-1,)}, "(2, 3, 4) -> (-1,)"),
        ([(2, 3, 4)], {"shape": (2, -1, 2)}, "(2, 3, 4) -> (2, -1, 2)"),
        ([()], {"shape": (1, 1)}, "0-d -> (1, 1)"),
        ([(0, 3)], {"shape": (3, 0)}, "empty (0, 3) -> (3, 0)"),
    ],
    "permute_dims": [
        ([(2, 3, 4)], {"axes": (2, 0, 1)}, "(2, 3, 4), axes=(2, 0, 1)"),
        ([(2, 3, 4)], {"axes": (-1, 0, 1)}, "negative axes (-1, 0, 1)"),
        ([()], {"axes": ()}, "0-d"),
        ([(0, 3)], {"axes": (1, 0)}, "empty (0, 3)"),
    ],
    "broadcast_to": [
        ([(3, 1)], {"shape": (2, 3, 4)}, "(3, 1) -> (2, 3, 4)"),
        ([()], {"shape": (2, 2)}, "0-d -> (2, 2)"),
        ([(0, 1)], {"shape": (0, 3)}, "empty (0, 1) -> (0, 3)"),
        ([(2, 3)], {"shape": (2, 3)}, "same shape"),
    ],
    "concat": [
        ([[(2, 3), (1, 3)]], {"axis": 0}, "(2, 3) and (1, 3), axis=0"),
        ([[(2, 3), (2, 1), (2, 2)]], {"axis": -1}, "three arrays, axis=-1"),
        ([[(2, 3), (4,)]], {"axis": None}, "axis=None flattens"),
        ([[(0, 3), (2, 3)]], {"axis": 0}, "with an empty array"),
    ],
    "stack": [
        ([[(2, 3), (2, 3)]], {"axis": 0}, "two (2, 3), axis=0"),
        ([[(2, 3), (2, 3), (2, 3)]], {"axis": -1}, "three (2, 3), axis=-1"),
        ([[(), ()]], {"axis": 0}, "0-d arrays"),
        ([[(0, 2), (0, 2)]], {"axis": 1}, "empty arrays, axis=1"),
    ],
    "squeeze": [
        ([(1, 3, 1)], {"axis": (0, 2)}, "(1, 3, 1), axis=(0, 2)"),
        ([(2, 1)], {"axis": -1}, "(2, 1), axis=-1"),
        ([(1,)], {"axis": 0}, "(1,) -> 0-d"),
        ([(0, 1)], {"axis": 1}, "empty (0, 1)"),
    ],
    "expand_dims": [
        ([(2, 3)], {"axis": 0}, "(2, 3), axis=0"),
        ([(2, 3)], {"axis": -1}, "(2, 3), axis=-1"),
        ([(2, 3)], {"axis": 1}, "(2, 3), axis=1"),
        ([()], {"axis": 0}, "0-d"),
        ([(0, 3)], {"axis": 2}, "empty (0, 3)"),
    ],
    "flip": [
        ([(2, 3, 4)], {}, "(2, 3, 4), all axes"),
        ([(2, 3, 4)], {"axis": 1}, "axis=1"),
        ([(2, 3, 4)], {"axis": (0, -1)}, "axis=(0, -1)"),
        ([()], {}, "0-d"),
        ([(0, 3)], {"axis": 1}, "empty (0, 3)"),
    ],
    "matrix_transpose": [
        ([(2, 3)], {}, "(2, 3)"),
        ([(2, 3, 4)], {}, "batched (2, 3, 4)"),
        ([(0, 2)], {}, "empty (0, 2)"),
    ],
}


def _astype(op, d, rng):
    targets = [_dt.float32, _dt.int32, _dt.bool_, d, _dt.float64, _dt.uint8]
    out, seen = [], set()
    for t in targets:
        if t in seen or (d.kind == "complex" and t.kind != "complex"):
            continue
        seen.add(t)
        out.append(Sample([values(rng, d, (2, 3), "astype")], {"dtype": t}, f"(2, 3) to {t.name}"))
    if d.kind == "complex":
        out.append(Sample([values(rng, d, (2, 3), "astype")], {"dtype": _dt.complex128}, "(2, 3) to complex128"))
    out.append(Sample([values(rng, d, (), "astype")], {"dtype": _dt.float32 if d.kind != "complex" else d}, "0-d"))
    out.append(Sample([values(rng, d, (0, 2), "astype")], {"dtype": _dt.int64 if d.kind != "complex" else d}, "empty (0, 2)"))
    if _is_float(d):
        sp = specials(d)[:7]
        out.append(Sample([sp], {"dtype": _dt.float64}, "NaN, ±Inf, ±0 to float64"))
    if d in _GRAD_DTYPES:
        out.append(Sample([smooth(rng, d, (2, 3))], {"dtype": _dt.float64}, "smooth to float64", grad=True))
    return out


# --- indexing -------------------------------------------------------------------------------
_GETITEM = [
    ((3, 4, 5), (1,), "x[1]"),
    ((3, 4, 5), (slice(None, None, -1), slice(1, 3)), "x[::-1, 1:3]"),
    ((3, 4, 5), (Ellipsis, None, -1), "x[..., None, -1]"),
    ((3, 4, 5), (slice(0, 3, 2), 2, slice(None, None, 3)), "x[0:3:2, 2, ::3]"),
    ((3, 4, 5), (slice(2, 2),), "empty result x[2:2]"),
    ((), (None,), "0-d x[None]"),
    ((), (Ellipsis,), "0-d x[...]"),
]


def _getitem(op, d, rng):
    out = [Sample([values(rng, d, s)], {"key": k}, desc) for s, k, desc in _GETITEM]
    if d in _GRAD_DTYPES:
        out.append(Sample([smooth(rng, d, (3, 4, 5))], {"key": (slice(None, None, -1), slice(1, 3))},
                          "smooth, x[::-1, 1:3]", grad=True))
    return out


_SETITEM = [
    ((3, 4), (4,), (1,), "x[1] = v (4,)"),
    ((3, 4), (1, 2), (slice(None), slice(0, 2)), "x[:, 0:2] = v (1, 2) broadcast"),
    ((3, 4), (), (2, -1), "x[2, -1] = 0-d v"),
    ((3, 4), (2,), (slice(None, None, 2), 1), "x[::2, 1] = v (2,)"),
    ((0, 4), (4,), (slice(None),), "empty x"),
]


def _setitem(op, d, rng):
    out = [Sample([values(rng, d, xs), values(rng, d, vs)], {"key": k}, desc) for xs, vs, k, desc in _SETITEM]
    if d in _GRAD_DTYPES:
        out.append(Sample([smooth(rng, d, (3, 4)), smooth(rng, d, (1, 2))], {"key": (slice(None), slice(0, 2))},
                          "smooth, x[:, 0:2] = v", grad=True))
    return out


def _take(op, d, rng):
    def idx(*v):
        return np.asarray(v, dtype=np.int64)

    out = [
        Sample([values(rng, d, (3, 4)), idx(0, 2, -1, 0)], {"axis": 0}, "(3, 4), indices [0, 2, -1, 0], axis=0"),
        Sample([values(rng, d, (3, 4)), idx(3, 1)], {"axis": -1}, "(3, 4), indices [3, 1], axis=-1"),
        Sample([values(rng, d, (5,)), idx(4, 4, 0)], {}, "1-D, axis=None"),
        Sample([values(rng, d, (3, 4)), idx()], {"axis": 1}, "empty indices"),
        Sample([values(rng, d, (2, 3)), np.asarray([1, 0], dtype=np.int32)], {"axis": 0}, "int32 indices"),
    ]
    if d in _GRAD_DTYPES:
        out.append(Sample([smooth(rng, d, (3, 4)), idx(0, 2, -1, 0)], {"axis": 0}, "smooth, repeated indices", grad=True))
    return out


# --- creation -------------------------------------------------------------------------------
def _fill(d, k=0):
    if d.kind == "bool":
        return (True, False)[k % 2]
    if d.kind in ("int", "uint"):
        return (7, 0)[k % 2]
    if d.kind == "float":
        return (-1.5, float("nan"), float("inf"))[k % 3]
    return (1.5 - 2j, 0j)[k % 2]


def _creation(op, d, rng):
    D = {"dtype": d}
    if op.name == "full":
        rows = [({"shape": (2, 3), "fill_value": _fill(d)}, "(2, 3)"), ({"shape": (), "fill_value": _fill(d, 1)}, "0-d"),
                ({"shape": (0, 4), "fill_value": _fill(d)}, "empty (0, 4)"), ({"shape": 5, "fill_value": _fill(d, 2)}, "int shape 5")]
    elif op.name == "arange":
        if d.kind == "float":
            rows = [({"start": 0.5, "stop": 3.0, "step": 0.5}, "0.5 to 3 step 0.5"), ({"start": 4.0}, "stop only"),
                    ({"start": 2.0, "stop": -1.0, "step": -0.75}, "negative step"), ({"start": 1.0, "stop": 1.0}, "empty")]
        else:
            rows = [({"start": 0, "stop": 10, "step": 3}, "0 to 10 step 3"), ({"start": 5}, "stop only"),
                    ({"start": 1, "stop": 1}, "empty")]
            if d.kind == "int":
                rows.append(({"start": 10, "stop": -2, "step": -4}, "negative step"))
    elif op.name == "eye":
        rows = [({"n_rows": 3}, "3x3"), ({"n_rows": 2, "n_cols": 4, "k": 1}, "2x4, k=1"),
                ({"n_rows": 3, "n_cols": 2, "k": -1}, "3x2, k=-1"), ({"n_rows": 0}, "0x0")]
    elif op.name == "linspace":
        rows = [({"start": 0.0, "stop": 1.0, "num": 5}, "0 to 1, 5 points"),
                ({"start": -1.0, "stop": 1.0, "num": 4, "endpoint": False}, "endpoint=False"),
                ({"start": 2.0, "stop": 3.0, "num": 1}, "one point"), ({"start": 0.0, "stop": 1.0, "num": 0}, "no points")]
    else:
        raise NotImplementedError(f"no sample rule for creation op {op.name!r}; give it samples= in define()")
    return [Sample([], {**a, **D}, desc) for a, desc in rows]


# --- linalg and nn ----------------------------------------------------------------------------
def _matmul(op, d, rng):
    rows = [
        ([(2, 3), (3, 4)], "(2, 3) @ (3, 4)"), ([(3,), (3, 2)], "1-D @ 2-D"), ([(2, 3), (3,)], "2-D @ 1-D"),
        ([(4,), (4,)], "1-D @ 1-D"), ([(2, 1, 2, 3), (3, 3, 2)], "batch broadcast"), ([(0, 3), (3, 2)], "empty rows"),
        ([(2, 0), (0, 3)], "empty inner dimension"),
    ]
    out = [Sample([values(rng, d, s, "prod" if d.kind in ("int", "uint") else None) for s in sh], {}, desc) for sh, desc in rows]
    if d in _GRAD_DTYPES:
        out.append(Sample([smooth(rng, d, (2, 3)), smooth(rng, d, (3, 2))], {}, "smooth (2, 3) @ (3, 2)", grad=True))
        out.append(Sample([smooth(rng, d, (2, 2, 3)), smooth(rng, d, (3,))], {}, "smooth batched @ 1-D", grad=True))
    return out


def _vecdot(op, d, rng):
    rows = [([(2, 3), (2, 3)], {}, "(2, 3) . (2, 3)"), ([(2, 3), (3,)], {}, "broadcast (2, 3) . (3,)"),
            ([(3, 2), (3, 2)], {"axis": -2}, "axis=-2"), ([(4, 3, 2), (3, 1)], {"axis": -2}, "axis=-2, broadcast"), ([(0, 3), (0, 3)], {}, "empty")]
    out = [Sample([values(rng, d, s) for s in sh], a, desc) for sh, a, desc in rows]
    if d in _GRAD_DTYPES:
        out.append(Sample([smooth(rng, d, (2, 3)), smooth(rng, d, (3,))], {}, "smooth, broadcast", grad=True))
    return out


def _softmax(op, d, rng):
    out = [
        Sample([values(rng, d, (2, 5))], {}, "(2, 5), axis=-1"),
        Sample([values(rng, d, (2, 5))], {"axis": 0}, "(2, 5), axis=0"),
        Sample([values(rng, d, ())], {}, "0-d"),
        Sample([values(rng, d, (0, 3))], {}, "empty (0, 3)"),
        Sample([np.asarray([1000.0, 0.0, -1000.0, 999.0]).astype(d.numpy)], {}, "large magnitudes (stability)"),
        Sample([np.asarray([0.0, -np.inf, 1.0]).astype(d.numpy)], {}, "-inf logit"),
        Sample([np.asarray(np.nan).astype(d.numpy)], {}, "0-d NaN"),
        Sample([np.asarray([[np.nan, 1.0, 2.0], [np.inf, 0.0, 1.0]]).astype(d.numpy)], {}, "NaN and +inf in a row"),
    ]
    if d in _GRAD_DTYPES:
        out.append(Sample([smooth(rng, d, (2, 4))], {"axis": 0}, "smooth, axis=0", grad=True))
    return out


def _cross_entropy(op, d, rng):
    def lab(*shape, n):
        return rng.integers(0, n, size=shape).astype(np.int64)

    out = [Sample([values(rng, d, (4, 5)), lab(4, n=5)], {"reduction": r}, f"(4, 5), reduction={r!r}")
           for r in ("mean", "sum", "none")]
    out.append(Sample([values(rng, d, (2, 3, 4)), lab(2, 3, n=4)], {"reduction": "none"}, "batched (2, 3, 4)"))
    out.append(Sample([values(rng, d, (3,)), np.asarray(1, dtype=np.int64)], {}, "one row (3,), 0-d label"))
    if d in _GRAD_DTYPES:
        out.append(Sample([smooth(rng, d, (3, 4)), lab(3, n=4)], {}, "smooth, mean", grad=True))
        out.append(Sample([smooth(rng, d, (3, 4)), lab(3, n=4)], {"reduction": "none"}, "smooth, none", grad=True))
    return out


def _layer_norm(op, d, rng):
    rows = [([(2, 3, 4), (4,), (4,)], {}, "(2, 3, 4) over the last axis"),
            ([(2, 3, 4), (3, 4), (3, 4)], {"eps": 1e-3}, "over the last two axes, eps=1e-3"),
            ([(0, 4), (4,), (4,)], {}, "empty batch")]
    out = [Sample([values(rng, d, s) for s in sh], a, desc) for sh, a, desc in rows]
    if d in _GRAD_DTYPES:
        out.append(Sample([smooth(rng, d, s) for s in ((2, 4), (4,), (4,))], {}, "smooth (2, 4)", grad=True))
    return out


def _linear(op, d, rng):
    rows = [([(2, 3), (4, 3), (4,)], "(2, 3), weight (4, 3)"), ([(3,), (2, 3), (2,)], "1-D input"),
            ([(2, 2, 3), (4, 3), ()], "batched, 0-d bias"), ([(0, 3), (4, 3), (4,)], "empty batch")]
    out = [Sample([values(rng, d, s) for s in sh], {}, desc) for sh, desc in rows]
    if d in _GRAD_DTYPES:
        out.append(Sample([smooth(rng, d, s) for s in ((2, 3), (4, 3), (4,))], {}, "smooth", grad=True))
    return out


_GRAD_DTYPES = (_dt.float32, _dt.float64)

_PER_OP = {
    **{name: _shape_samples(t) for name, t in _MANIP.items()},
    "astype": _astype, "getitem": _getitem, "setitem": _setitem, "take": _take,
    "matmul": _matmul, "vecdot": _vecdot, "softmax": _softmax, "log_softmax": _softmax,
    "cross_entropy": _cross_entropy, "layer_norm": _layer_norm, "linear": _linear,
}
_BY_CATEGORY = {"elementwise": _elementwise, "reduction": _reduction, "creation": _creation}


def samples(op, dtype, rng=None) -> list:
    """Valid sample calls of ``op`` with data inputs of ``dtype`` (see the module docstring).

    Samples that the op's own attribute and shape rules reject (an empty reduction of an
    op without identity, ...) are dropped, so every returned sample is a valid call.
    """
    d = _dt.dtype(dtype)
    if d not in _allowed(op.dtypes):
        return []
    rng = rng if rng is not None else rng_for(op.name, d.name)
    if callable(op.samples):
        return list(op.samples(d, rng))
    gen = _PER_OP.get(op.name) or _BY_CATEGORY.get(op.category)
    if gen is None:
        raise NotImplementedError(
            f"no sample rule for op {op.name!r} (category {op.category!r}); give it samples= in define()"
        )
    return [s for s in gen(op, d, rng) if _valid(op, s)]


def _valid(op, s: Sample) -> bool:
    attrs = {**op.attrs, **s.attrs}
    shapes = s.shapes
    try:
        if op.canon is not None:
            attrs = op.canon(shapes, attrs)
        op.shape_rule(shapes, attrs)
    except (ValueError, TypeError, IndexError):
        return False
    return True


# --- error samples -------------------------------------------------------------------------
def _f32(*shape):
    return np.zeros(shape, dtype=np.float32) + 0.5


def _typed(d, *shape):
    return np.ones(shape, dtype=d.numpy)


def _bad_dtype(op):
    """A dtype outside the op's dtype category, or None when the op takes every dtype."""
    allowed = _allowed(op.dtypes)
    for d in (_dt.bool_, _dt.int32, _dt.float32, _dt.complex64):
        if d not in allowed:
            return d
    return None


_ERRORS = {
    "reshape": [([_f32(2, 3)], {"shape": (4, 2)}, ValueError, "6 elements into (4, 2)"),
                ([_f32(2, 3)], {"shape": (-1, -1)}, ValueError, "two -1 in the target shape")],
    "permute_dims": [([_f32(2, 3)], {"axes": (0, 0)}, ValueError, "axes not a permutation"),
                     ([_f32(2, 3)], {"axes": (0,)}, ValueError, "too few axes")],
    "broadcast_to": [([_f32(2, 3)], {"shape": (3, 3)}, ValueError, "(2, 3) to (3, 3)"),
                     ([_f32(2, 3)], {"shape": (3,)}, ValueError, "fewer dimensions")],
    "concat": [([[_f32(2, 3), _f32(2, 4)]], {"axis": 0}, ValueError, "shapes differ outside the axis"),
               ([[_f32(2, 3), _f32(2, 3)]], {"axis": 2}, ValueError, "axis out of range"),
               ([[_f32(), _f32()]], {"axis": 0}, ValueError, "0-d arrays")],
    "stack": [([[_f32(2, 3), _f32(3, 2)]], {"axis": 0}, ValueError, "different shapes"),
              ([[_f32(2), _f32(2)]], {"axis": 3}, ValueError, "axis out of range")],
    "squeeze": [([_f32(2, 3)], {"axis": 0}, ValueError, "axis of size 2"),
                ([_f32(1, 3)], {"axis": 2}, ValueError, "axis out of range")],
    "expand_dims": [([_f32(2, 3)], {"axis": 3}, ValueError, "axis out of range")],
    "flip": [([_f32(2, 3)], {"axis": 2}, ValueError, "axis out of range"),
             ([_f32(2, 3)], {"axis": (0, 0)}, ValueError, "repeated axis")],
    "matrix_transpose": [([_f32(3)], {}, ValueError, "1-D input")],
    "astype": [([np.ones((2,), np.complex64)], {"dtype": _dt.float32}, TypeError, "complex to real"),
               ([_f32(2)], {"dtype": "float128"}, TypeError, "unknown dtype name")],
    "getitem": [([_f32(2, 3)], {"key": (2,)}, IndexError, "index 2 out of bounds for size 2"),
                ([_f32(2, 3)], {"key": (0, 0, 0)}, IndexError, "too many indices"),
                ([_f32(2, 3)], {"key": (Ellipsis, 0, Ellipsis)}, IndexError, "two ellipses"),
                ([_f32(2, 3)], {"key": (1.5,)}, IndexError, "float index")],
    "setitem": [([_f32(2, 3), _f32(2)], {"key": (0,)}, ValueError, "value (2,) into (3,)"),
                ([_f32(2, 3), _f32(3)], {"key": (5,)}, IndexError, "index out of bounds"),
                ([_f32(2, 3), np.ones(3, np.float64)], {"key": (0,)}, TypeError, "float64 value into float32")],
    "take": [([_f32(4), np.asarray([0, 4], np.int64)], {}, IndexError, "index 4 out of range for size 4"),
             ([_f32(4), np.asarray([-5], np.int64)], {}, IndexError, "index -5 out of range for size 4"),
             ([_f32(4), np.asarray([0.0], np.float32)], {}, TypeError, "float indices"),
             ([_f32(4), np.zeros((2, 2), np.int64)], {}, ValueError, "2-D indices"),
             ([_f32(2, 3), np.asarray([0], np.int64)], {}, ValueError, "axis missing for a 2-D tensor")],
    "full": [([], {"shape": (-1, 2), "fill_value": 1.0}, ValueError, "negative dimension"),
             ([], {"shape": (2,), "fill_value": 1.5, "dtype": _dt.int32}, TypeError, "1.5 into int32")],
    "arange": [([], {"start": 0, "stop": 5, "step": 0}, ValueError, "step 0")],
    "eye": [([], {"n_rows": -1}, ValueError, "negative n_rows")],
    "linspace": [([], {"start": 0.0, "stop": 1.0, "num": -1}, ValueError, "negative num"),
                 ([], {"start": 0.0, "stop": 1.0, "num": 3, "dtype": _dt.int32}, TypeError, "integer dtype")],
    "matmul": [([_f32(2, 3), _f32(2, 3)], {}, ValueError, "inner dimensions 3 != 2"),
               ([_f32(), _f32(3)], {}, ValueError, "0-d operand"),
               ([_f32(2, 2, 3), _f32(3, 3, 2)], {}, ValueError, "batch dimensions do not broadcast")],
    "vecdot": [([_f32(2, 3), _f32(2, 4)], {}, ValueError, "vector sizes differ")],
    "cross_entropy": [
        ([_f32(4, 5), np.zeros(3, np.int64)], {}, ValueError, "labels (3,) for logits (4, 5)"),
        ([_f32(4, 5), np.zeros(4, np.float32)], {}, TypeError, "float labels"),
        ([_f32(4, 5), np.zeros(4, np.int64)], {"reduction": "avg"}, ValueError, "unknown reduction"),
        ([_f32(2, 3), np.asarray([0, 3], np.int64)], {}, IndexError, "label 3 out of range for 3 classes"),
    ],
    "layer_norm": [([_f32(2, 3), _f32(2), _f32(2)], {}, ValueError, "weight (2,) for x (2, 3)"),
                   ([_f32(2, 3), _f32(3), _f32(2)], {}, ValueError, "weight and bias differ")],
    "linear": [([_f32(2, 3), _f32(4, 2), _f32(4)], {}, ValueError, "in-features 3 != 2"),
               ([_f32(2, 3), _f32(4, 3), _f32(3)], {}, ValueError, "bias (3,) for 4 outputs")],
    "gelu": [([_f32(3)], {"approximate": "fast"}, ValueError, "unknown approximate")],
    "softmax": [([_f32(2, 3)], {"axis": 2}, ValueError, "axis out of range")],
    "log_softmax": [([_f32(2, 3)], {"axis": -3}, ValueError, "axis out of range")],
    "where": [([np.ones(3, np.int32), _f32(3), _f32(3)], {}, TypeError, "integer condition"),
              ([np.ones(3, bool), _f32(2), _f32(3)], {}, ValueError, "shapes (2,) and (3,)")],
    "clip": [([np.ones(3, np.int32)], {"min": 0.5}, TypeError, "float bound for an integer tensor"),
             ([_f32(3)], {"min": 0.5 + 1j}, TypeError, "complex bound")],
}


def error_samples(op) -> list:
    """Invalid calls of ``op`` and the exception type they must raise (on every device)."""
    out = [ErrorSample(list(e[0]), dict(e[1]), e[2], e[3]) for e in _ERRORS.get(op.name, ())]
    if op.name not in _ERRORS and op.category in ("elementwise", "reduction") and op.inputs:
        out += _generic_errors(op)
    bad = _bad_dtype(op)
    if bad is not None and op.inputs and op.name not in ("astype",):
        n = len(op.inputs)
        ins = [_typed(bad, 3) for _ in range(n)]
        if op.name == "where":
            ins[0] = np.ones(3, bool)
        if op.name in ("take", "cross_entropy"):
            ins = [_typed(bad, 2, 3) if op.name == "cross_entropy" else _typed(bad, 3), np.zeros(2, np.int64)]
            ins[1] = ins[1][:1] if op.name == "take" else ins[1]
        if op.name in ("layer_norm", "linear"):
            ins = [_typed(bad, 2, 3), _typed(bad, 3), _typed(bad, 3)] if op.name == "layer_norm" else \
                  [_typed(bad, 2, 3), _typed(bad, 4, 3), _typed(bad, 4)]
        if op.category == "linalg" and op.name == "matmul":
            ins = [_typed(bad, 2, 3), _typed(bad, 3, 2)]
        out.append(ErrorSample(ins, {}, TypeError, f"{bad.name} input (outside the op's dtype category)"))
    for e in op.errors or ():
        out.append(e if isinstance(e, ErrorSample) else ErrorSample(*e))
    return out


def _generic_errors(op):
    if op.category == "reduction":
        return [ErrorSample([_f32(2, 3)], {"axis": 2}, ValueError, "axis 2 of a 2-D array"),
                ErrorSample([_f32(2, 3)], {"axis": -3}, ValueError, "axis -3 of a 2-D array")] + (
            [ErrorSample([_f32(2, 3)], {"axis": (0, 0)}, ValueError, "repeated axis")]
            if op.name not in ("argmax", "argmin") else
            [ErrorSample([_f32(0, 3)], {}, ValueError, "empty array")])
    if len(op.inputs) == 2:
        allowed = _allowed(op.dtypes)
        d = next(d for d in (_dt.float32, _dt.int32, _dt.bool_) if d in allowed)
        out = [ErrorSample([_typed(d, 2, 3), _typed(d, 4)], {}, ValueError, "shapes (2, 3) and (4,) do not broadcast")]
        if _dt.int32 in allowed and _dt.float32 in allowed:
            out.append(ErrorSample([_typed(_dt.int32, 3), _typed(_dt.float32, 3)], {}, TypeError,
                                   "int32 with float32 (no promotion across kinds)"))
        return out
    return []
