"""The op registry: every op is defined exactly once, here and in the sibling modules.

An :class:`OpDef` holds everything about an op that does not depend on a device:

- ``inputs``: names of tensor inputs (a leading ``*`` marks one variadic list input);
- ``attrs``: non-tensor parameters with their defaults;
- ``dtype_rule(dtypes, attrs) -> (compute_dtypes, out_dtype)``: Array API promotion;
  inputs are cast to ``compute_dtypes`` before any kernel runs;
- ``shape_rule(shapes, attrs) -> out_shape``: runs without computing anything (meta);
- ``reference(*ndarrays, **attrs)``: the conformance oracle, written independently of
  every kernel and evaluated in float64 / exact integer arithmetic;
- ``vjp(xp, g, inputs, out, **attrs) -> grads``: the gradient rule, in terms of other ops;
- ``decomposition(xp, *inputs, **attrs)``: for composite ops, the same op built from others.
  An op without one is a *primitive*: a backend must implement it natively or it falls
  back to the CPU.

Per-op conformance data sits next to the definition: ``domain`` (which input values are
meaningful), ``tolerance`` overrides with a reason, and ``errors`` (invalid-input cases).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from anydevice.base import dtypes as _dt

_OPS: dict[str, OpDef] = {}


class OpDef:
    __slots__ = (
        "name", "inputs", "variadic", "attrs", "dtype_rule", "shape_rule", "reference", "vjp",
        "decomposition", "category", "doc", "domain", "tolerance", "errors", "dtypes",
        "differentiable", "plans", "fast", "has_device_attr", "samples", "canon", "flops", "check", "dtype_cache",
    )

    def __init__(self, name, inputs, attrs, dtype_rule, shape_rule, reference, vjp=None, decomposition=None,
                 category="", doc="", domain=None, tolerance=None, errors=(), dtypes=None,
                 differentiable=True, samples=None, canon=None, flops=None, check=None):
        self.name, self.inputs, self.attrs = name, tuple(inputs), dict(attrs)
        self.variadic = bool(self.inputs) and self.inputs[0].startswith("*")
        self.dtype_rule, self.shape_rule, self.reference = dtype_rule, shape_rule, reference
        self.vjp, self.decomposition, self.category, self.doc = vjp, decomposition, category, doc
        self.domain, self.tolerance, self.errors = domain, dict(tolerance or {}), tuple(errors)
        self.dtypes = dtypes or getattr(dtype_rule, "category", "all")
        self.canon = canon  # canon(shapes, attrs) -> attrs: normalizes attributes (axes ...)
        self.flops = flops  # flops(shapes, attrs) -> float, for the profiler's cost model
        self.check = check  # check(xp, inputs, attrs): value checks that need data (index bounds)
        self.differentiable = differentiable
        self.samples = samples
        self.has_device_attr = "device" in self.attrs
        self.plans: dict = {}
        self.fast: dict = {}
        self.dtype_cache: dict = {}

    @property
    def primitive(self) -> bool:
        return self.decomposition is None

    @property
    def supported_dtypes(self) -> tuple:
        """Input dtypes the op accepts (for ops with inputs) or may produce (creation ops)."""
        return tuple(d for d in _dt.ALL_DTYPES if d in _allowed(self.dtypes))

    def __repr__(self) -> str:
        kind = "primitive" if self.primitive else "composite"
        return f"<op {self.name} ({kind}, {self.category})>"



def define(name: str, *, inputs=(), attrs=None, dtype_rule, shape_rule, reference, **kw) -> OpDef:
    if name in _OPS:
        raise ValueError(f"op {name!r} is already defined")
    op = OpDef(name, inputs, attrs or {}, dtype_rule, shape_rule, reference, **kw)
    _OPS[name] = op
    return op


def get_op(name: str) -> OpDef:
    op = _OPS.get(name)
    if op is None:
        import difflib

        close = difflib.get_close_matches(name, _OPS, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"no op named {name!r} in the registry{hint}")
    return op


def all_ops() -> list[OpDef]:
    return [_OPS[k] for k in sorted(_OPS)]


def primitives() -> list[OpDef]:
    return [o for o in all_ops() if o.primitive]


# --- dtype rules --------------------------------------------------------------------------
_CATS = {
    "all": _dt.KINDS["numeric"] | _dt.KINDS["bool"],
    "numeric": _dt.KINDS["numeric"],
    "real": _dt.KINDS["numeric"] - _dt.KINDS["complex floating"],
    "integral": _dt.KINDS["integral"],
    "integral_or_bool": _dt.KINDS["integral"] | _dt.KINDS["bool"],
    "floating": _dt.KINDS["real floating"] | _dt.KINDS["complex floating"],
    "real_floating": _dt.KINDS["real floating"],
    "bool": _dt.KINDS["bool"],
    "real_or_bool": (_dt.KINDS["numeric"] - _dt.KINDS["complex floating"]) | _dt.KINDS["bool"],
}
_CAT_TEXT = {
    "all": "any dtype", "numeric": "numeric dtypes", "real": "real-valued numeric dtypes",
    "integral": "integer dtypes", "integral_or_bool": "integer or bool dtypes",
    "floating": "floating-point dtypes", "real_floating": "real floating-point dtypes",
    "bool": "bool", "real_or_bool": "real-valued or bool dtypes",
}


def _allowed(cat) -> frozenset:
    return _CATS[cat] if isinstance(cat, str) else frozenset(cat)


def check_category(opname: str, cat: str, d) -> None:
    if d not in _CATS[cat]:
        raise TypeError(f"{opname}() does not accept dtype {d.name}; it accepts {_CAT_TEXT[cat]}")


def same(cat: str = "all"):
    """Promote all inputs together; the result has the promoted dtype."""

    def rule(ds, attrs):
        d = ds[0]
        for e in ds[1:]:
            d = _dt.promote(d, e)
        return d, d

    rule.category = cat
    return rule


def to_bool(cat: str = "all"):
    """Promote inputs together; the result is bool (comparisons, predicates)."""

    def rule(ds, attrs):
        d = ds[0]
        for e in ds[1:]:
            d = _dt.promote(d, e)
        return d, _dt.bool_

    rule.category = cat
    return rule


def to_real(cat: str = "numeric"):
    """Same as ``same`` but complex results become the matching real dtype (abs)."""

    def rule(ds, attrs):
        d = ds[0]
        out = {_dt.complex64: _dt.float32, _dt.complex128: _dt.float64}.get(d, d)
        return d, out

    rule.category = cat
    return rule


def to_index(cat: str = "real"):
    """Result is the default index dtype, int64 (argmax, argmin)."""

    def rule(ds, attrs):
        return ds[0], _dt.int64

    rule.category = cat
    return rule


def with_indices(opname: str, what: str, cat: str):
    """(values, integer indices) ops: each input keeps its dtype; the result has the values' dtype."""

    def rule(ds, attrs):
        if ds[1].kind not in ("int", "uint"):
            raise TypeError(f"{opname}(): {what} must be an integer tensor, not {ds[1].name}")
        return (ds[0], ds[1]), ds[0]

    rule.category = cat
    return rule


def check_index_range(xp, opname: str, what: str, idx, low: int, high: int, where: str) -> None:
    """IndexError unless every value of the tensor ``idx`` is in [low, high) (reduced on the device)."""
    if idx.size == 0:
        return
    lo, hi = int(xp.min(idx)), int(xp.max(idx))
    if lo < low or hi >= high:
        raise IndexError(
            f"{opname}(): {what} {lo if lo < low else hi} is out of range {where} (allowed: {low}..{high - 1})"
        )


def dtype_category(rule) -> str:
    return getattr(rule, "category", "all")


# --- shape rules --------------------------------------------------------------------------
def broadcast_shapes(*shapes, opname: str = "op") -> tuple:
    """Array API broadcasting; ValueError naming the op and the shapes."""
    if len(shapes) == 2 and shapes[0] == shapes[1]:
        return shapes[0]
    nd = max(len(s) for s in shapes)
    out = []
    for i in range(nd):
        d = 1
        for s in shapes:
            k = len(s) - nd + i
            if k < 0:
                continue
            e = s[k]
            if e == d or e == 1:
                continue
            if d == 1:
                d = e
            else:
                raise ValueError(
                    f"{opname}: shapes {', '.join(str(tuple(s)) for s in shapes)} cannot be broadcast together"
                )
        out.append(d)
    return tuple(out)


def elementwise_shape(shapes, attrs, opname="op"):
    if len(shapes) == 1:
        return shapes[0]
    return broadcast_shapes(*shapes, opname=opname)


def normalize_axis(axis: int, ndim: int, opname: str) -> int:
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TypeError(f"{opname}: axis must be an int, not {type(axis).__name__}")
    if not -ndim <= axis < max(ndim, 1) or (ndim == 0 and axis not in (0, -1)):
        raise ValueError(f"{opname}: axis {axis} is out of range for an array of {ndim} dimension(s)")
    return axis % ndim if ndim else 0


def normalize_axes(axis, ndim: int, opname: str) -> tuple:
    """None → all axes; int or tuple → sorted unique non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int) and not isinstance(axis, bool):
        axis = (axis,)
    if not isinstance(axis, (tuple, list)):
        raise TypeError(f"{opname}: axis must be None, an int or a tuple of ints, not {type(axis).__name__}")
    out = []
    for a in axis:
        if not (-ndim <= a < ndim) if ndim else a not in (0, -1):
            raise ValueError(f"{opname}: axis {a} is out of range for an array of {ndim} dimension(s)")
        a = a % ndim if ndim else 0
        if a in out:
            raise ValueError(f"{opname}: axis {a} appears twice in {tuple(axis)}")
        out.append(a)
    return tuple(sorted(out))


Sample = Callable[..., Any]
