"""The op registry: every op is defined exactly once, here and in the sibling modules.

An :class:`OpDef` holds everything about an op that does not depend on a device:

- ``inputs``: names of tensor inputs (a leading ``*`` marks one variadic list input);
- ``attrs``: non-tensor parameters, each an :class:`Attr` giving its default, its type and its
  domain (``Bool(False)``, ``Axes()``, ``Shape()``, ...; a plain value is a default that any
  value may replace). :meth:`OpDef.validate` checks and normalizes them before any device work,
  the same way for every device; ``op.attrs`` maps each name to its default and
  ``op.signature`` is the op's :class:`inspect.Signature`;
- ``dtype_rule(dtypes, attrs) -> (compute_dtypes, out_dtype)``: Array API promotion;
  inputs are cast to ``compute_dtypes`` before any kernel runs;
- ``shape_rule(shapes, attrs) -> out_shape``: runs without computing anything (meta);
- ``reference(*ndarrays, **attrs)``: the conformance oracle, written independently of
  every kernel and evaluated in float64 / exact integer arithmetic;
- ``vjp(xp, g, inputs, out, **attrs) -> grads``: the gradient rule, in terms of other ops; one
  marked ``vjp.partial = True`` also receives ``needs`` (one bool per input, False where the
  input requires no gradient) and returns None for those (:func:`partial_vjp`);
- ``outputs``: names of the outputs of a multi-output op (``("eigenvalues", "eigenvectors")``);
  then the dtype rule returns ``(compute, (dtype_1, ...))``, the shape rule, the reference and
  the decomposition a tuple, and the VJP receives ``g`` and ``out`` as tuples;
- ``decomposition(xp, *inputs, **attrs)``: for composite ops, the same op built from others.
  An op without one is a *primitive*: a backend must implement it natively or it falls
  back to the CPU.

Per-op conformance data sits next to the definition: ``domain`` (which input values are
meaningful), ``tolerance`` overrides with a reason, and ``errors`` (invalid-input cases).
"""
from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from anydevice.base import dtypes as _dt
from anydevice.base.errors import AxisError

_OPS: dict[str, OpDef] = {}


class OpDef:
    __slots__ = (
        "name", "inputs", "variadic", "attrs", "dtype_rule", "shape_rule", "reference", "vjp",
        "decomposition", "category", "doc", "domain", "tolerance", "errors", "dtypes",
        "differentiable", "plans", "fast", "has_device_attr", "samples", "canon", "flops", "check", "dtype_cache",
        "schema", "valid_cache", "positional", "outputs", "normalize", "namespace",
        "data_shape",
    )

    def __init__(self, name, inputs, attrs, dtype_rule, shape_rule, reference, vjp=None, decomposition=None,
                 category="", doc="", domain=None, tolerance=None, errors=(), dtypes=None,
                 differentiable=True, samples=None, canon=None, flops=None, check=None, positional=None,
                 outputs=None, normalize=None, namespace=None, data_shape=None):
        self.name, self.inputs = name, tuple(inputs)
        # how many attributes may be passed by position (the rest are keyword-only); None: all of them
        self.positional = positional
        # multi-output ops name their outputs; the rules, the reference, kernels and the VJP then
        # deal in tuples (one entry per output). ``normalize(arrays) -> arrays`` makes results that
        # are defined up to a choice (signs of eigenvectors) comparable, for conformance.
        self.outputs = tuple(outputs) if outputs else None
        self.normalize = normalize
        # data_shape(xp, inputs, attrs) -> {attr: 0-d integer tensor}: sizes that depend on the data,
        # computed on the device; the dispatcher reads them back at once and fills those attributes
        self.data_shape = data_shape
        # an extension's ops ("linalg", "fft") are functions of anydevice.<namespace>, not of anydevice
        self.namespace = namespace
        self.schema = {k: v if isinstance(v, Attr) else Attr(v) for k, v in attrs.items()}
        self.attrs = {k: a.default for k, a in self.schema.items()}
        self.valid_cache: dict = {}
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

    @property
    def positions(self) -> tuple:
        """``(posonly, npos)``: the first ``posonly`` attributes are positional-only, the first
        ``npos`` may be passed by position, the rest are keyword-only (``positional=N`` means
        ``(0, N)``, ``positional=(M, N)`` says both, None: every attribute by position or keyword)."""
        p = self.positional
        if p is None:
            return 0, len(self.schema)
        return tuple(p) if isinstance(p, tuple) else (0, p)

    @property
    def signature(self) -> inspect.Signature:
        """Inputs (positional-only) then attributes, with defaults (none for :data:`REQUIRED`
        ones), kinds from :attr:`positions` and the schema's annotations, e.g.
        ``(x, /, *, axis: 'int | tuple[int, ...] | None' = None, keepdims: 'bool' = False)``."""
        P = inspect.Parameter
        ps = [P(n.lstrip("*"), P.POSITIONAL_ONLY) for n in self.inputs]
        posonly, npos = self.positions
        for j, (k, a) in enumerate(self.schema.items()):
            kind = P.POSITIONAL_ONLY if j < posonly else P.POSITIONAL_OR_KEYWORD if j < npos else P.KEYWORD_ONLY
            ps.append(P(k, kind, default=a.default, annotation=a.annotation))
        return inspect.Signature(ps)

    def validate(self, attrs: dict, in_shapes, in_dtypes) -> dict:
        """Check every attribute against the schema and return them normalized (a new dict).

        Raises TypeError (wrong Python type), ValueError or :class:`~anydevice.errors.AxisError`
        (a value outside the domain) or OverflowError (a Python int the target dtype cannot hold),
        naming the op, the argument, what was wrong and what is allowed. Results are cached per
        (attribute values and their types, input shapes, input dtypes).
        """
        if not self.schema:
            return attrs
        key = _attr_key(attrs, in_shapes, in_dtypes, self.variadic)
        hit = self.valid_cache.get(key) if key is not None else None
        if hit is not None:
            return dict(hit)
        ctx = _Ctx(self.name, in_shapes, in_dtypes, attrs)
        out = dict(attrs)
        for late in (False, True):
            for k, a in self.schema.items():
                if a.late is late:
                    out[k] = ctx.attrs[k] = a.check(ctx, k, attrs[k])
        if key is not None:
            if len(self.valid_cache) > 1024:
                self.valid_cache.clear()
            self.valid_cache[key] = out
        return dict(out)

    def __repr__(self) -> str:
        kind = "primitive" if self.primitive else "composite"
        return f"<op {self.name} ({kind}, {self.category})>"



def partial_vjp(vjp: Callable) -> Callable:
    """Mark ``vjp`` as taking ``needs=`` (one bool per input): backward() then asks it only for
    the gradients of inputs that require one, and it returns None for the others."""
    vjp.partial = True
    return vjp


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


def forget_devices() -> None:
    """Drop what every op cached per device (plans, calls, validated attributes holding devices):
    called when the core drops its backends or devices, so no cache hands out a stale device."""
    for op in list(_OPS.values()):
        op.plans = {}
        op.fast = {}
        op.valid_cache = {}
        op.dtype_cache = {}


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
    "complex_floating": _dt.KINDS["complex floating"],
    "float32_64": frozenset({_dt.float32, _dt.float64}),
}
_CAT_TEXT = {
    "all": "any dtype", "numeric": "numeric dtypes", "real": "real-valued numeric dtypes",
    "integral": "integer dtypes", "integral_or_bool": "integer or bool dtypes",
    "floating": "floating-point dtypes", "real_floating": "real floating-point dtypes",
    "bool": "bool", "real_or_bool": "real-valued or bool dtypes",
    "complex_floating": "complex floating-point dtypes", "float32_64": "float32 and float64",
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
    if idx.dtype.kind in ("int", "uint"):  # one op, and one read-back of one flag
        ok = xp.index_in_range(idx, low=low, high=high)
    else:
        ok = xp.logical_and(xp.greater_equal(xp.min(idx), low), xp.less(xp.max(idx), high))
    if bool(ok):
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


def normalize_axis(axis: int, ndim: int, opname: str, what: str = "axis") -> int:
    """A non-negative axis; TypeError unless an int, AxisError unless in [-ndim, ndim) (Array API:
    a 0-d array has no axis, so every int is out of range for it)."""
    if not _is_int(axis):
        raise TypeError(f"{opname}(): {what} must be an int, not {_show(axis)}")
    if not -ndim <= axis < ndim:
        allowed = f"allowed: {-ndim}..{ndim - 1}" if ndim else "a 0-d array has no axes"
        raise AxisError(f"{opname}(): {what} {axis} is out of range for an array of {ndim} dimension(s) ({allowed})")
    return int(axis) % ndim


def normalize_axes(axis, ndim: int, opname: str, what: str = "axis") -> tuple:
    """None → all axes; int or tuple → sorted unique non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if _is_int(axis):
        axis = (axis,)
    if not isinstance(axis, (tuple, list)):
        raise TypeError(f"{opname}(): {what} must be None, an int or a tuple of ints, not {_show(axis)}")
    out = []
    for a in axis:
        if not _is_int(a):
            raise TypeError(f"{opname}(): {what} must be None, an int or a tuple of ints, not {_show(axis)} "
                            f"(element {_show(a)})")
        a = normalize_axis(a, ndim, opname, what)
        if a in out:
            raise ValueError(f"{opname}(): {what} {a} appears twice in {tuple(axis)}")
        out.append(a)
    return tuple(sorted(out))


# --- the attribute schema -------------------------------------------------------------------------
#: Most dimensions a tensor may have (numpy's limit).
MAX_NDIM = 64
#: Largest size of one dimension, and of a tensor in bytes (numpy's ``intp``).
MAX_SIZE = 2 ** 63 - 1


def _is_int(v) -> bool:
    """A Python or numpy integer, not a bool."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _show(v) -> str:
    r = repr(v)
    return f"{type(v).__name__} {r if len(r) <= 40 else r[:37] + '...'}"


#: The default of an attribute the caller must give (``squeeze``'s axis): the signature shows none.
REQUIRED = inspect.Parameter.empty

#: Types of attribute values a validation cache key may hold (never a tensor: a cache must not
#: keep device memory alive). The engine adds its Device class.
KEY_TYPES = {type(None), bool, int, float, complex, str, type(Ellipsis), _dt.DType}


class _Unkeyed(Exception):
    pass


def _tag(v):
    t = type(v)
    if t is tuple or t is list:
        return t, tuple(_tag(e) for e in v)
    if t not in KEY_TYPES:
        raise _Unkeyed
    if t is float or t is complex:  # 0.0 == -0.0: the sign of a zero is part of the key
        return t, repr(v)
    return t, v


def _attr_key(attrs, in_shapes, in_dtypes, variadic=False):
    """A cache key that tells ``True`` from ``1`` and ``1.0`` and ``0.0`` from ``-0.0`` (equal in
    Python): the values, their types (nested tuples tagged element by element), the input shapes
    and dtypes; None when a value is not of :data:`KEY_TYPES`."""
    values = tuple(attrs.values())
    types = tuple(map(type, values))
    if float in types or complex in types or not KEY_TYPES.issuperset(types):
        try:
            values = tuple(_tag(v) for v in values)
        except _Unkeyed:
            return None
    shapes = tuple(map(tuple, in_shapes)) if variadic else tuple(in_shapes)  # shapes hold ints only
    return values, types, shapes, tuple(in_dtypes)


class _Ctx:
    """What an attribute check may look at: the op's name, input shapes and dtypes, attributes."""

    __slots__ = ("op", "shapes", "dtypes", "attrs", "nullable")

    def __init__(self, op, shapes, dtypes, attrs):
        self.op, self.shapes, self.dtypes, self.attrs = op, shapes, dtypes, dict(attrs)
        self.nullable = False

    @property
    def ndim(self) -> int:
        s = self.shapes[0] if self.shapes else ()
        return len(s[0]) if isinstance(s, list) else len(s)


class Attr:
    """An attribute: its default, what it accepts (``annotation``, ``allowed``) and ``check``.

    The base class accepts any value (an op whose canon checks the attribute itself, like
    ``getitem``'s key). Subclasses check type and domain and return the normalized value;
    ``late`` ones run after the others (a scalar that must fit the ``dtype`` attribute).
    """

    __slots__ = ("default",)
    annotation = "object"
    late = False

    def __init__(self, default=None):
        self.default = default

    def check(self, ctx, name, v):
        return v

    def fail(self, ctx, name, v, exc=TypeError, why=""):
        allowed = f"None or {self.allowed()}" if ctx.nullable else self.allowed()
        raise exc(f"{ctx.op}(): {name} must be {allowed}{why}, not {_show(v)}")

    def allowed(self) -> str:
        return "any value"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.default!r})"


class Optional(Attr):
    """None or what ``kind`` accepts (default None)."""

    __slots__ = ("kind",)

    def __init__(self, kind: Attr, default=None):
        super().__init__(default)
        self.kind = kind

    @property
    def annotation(self):
        return f"{self.kind.annotation} | None"

    @property
    def late(self):
        return self.kind.late

    def check(self, ctx, name, v):
        if v is None:
            return None
        ctx.nullable = True
        try:
            return self.kind.check(ctx, name, v)
        finally:
            ctx.nullable = False

    def allowed(self) -> str:
        return f"None or {self.kind.allowed()}"


class Bool(Attr):
    __slots__ = ()
    annotation = "bool"

    def check(self, ctx, name, v):
        if isinstance(v, (bool, np.bool_)):
            return bool(v)
        self.fail(ctx, name, v)

    def allowed(self) -> str:
        return "True or False"


class Int(Attr):
    """An int (numpy integers too, never a bool) in [lo, hi]."""

    __slots__ = ("lo", "hi")
    annotation = "int"

    def __init__(self, default=0, lo=None, hi=None):
        super().__init__(default)
        self.lo, self.hi = lo, hi

    def check(self, ctx, name, v):
        if not _is_int(v):
            self.fail(ctx, name, v)
        v = int(v)
        if (self.lo is not None and v < self.lo) or (self.hi is not None and v > self.hi):
            self.fail(ctx, name, v, ValueError)
        return v

    def allowed(self) -> str:
        if self.lo is not None and self.hi is not None:
            return f"an int in {self.lo}..{self.hi}"
        if self.lo is not None:
            return "a non-negative int" if self.lo == 0 else f"an int >= {self.lo}"
        return "an int"


class Axis(Attr):
    """One axis of the first input, in [-n, n) for ``n = ndim + extra`` (``extra=1``: a new axis,
    as in expand_dims and stack); normalized to a non-negative int."""

    __slots__ = ("extra",)
    annotation = "int"

    def __init__(self, default=0, extra=0):
        super().__init__(default)
        self.extra = extra

    def check(self, ctx, name, v):
        return normalize_axis(v, ctx.ndim + self.extra, ctx.op, name)

    def allowed(self) -> str:
        return "an int"


class Axes(Attr):
    """None, an int or a tuple of distinct ints, each an axis of the first input; normalized to a
    sorted tuple of non-negative axes (None stays None: the op says what it means)."""

    __slots__ = ()
    annotation = "int | tuple[int, ...] | None"

    def check(self, ctx, name, v):
        return None if v is None else normalize_axes(v, ctx.ndim, ctx.op, name)

    def allowed(self) -> str:
        return "None, an int or a tuple of ints"


class Ints(Attr):
    """A tuple of ints (a list is accepted), at most MAX_NDIM of them (permute_dims' axes)."""

    __slots__ = ()
    annotation = "tuple[int, ...]"

    def check(self, ctx, name, v):
        if not isinstance(v, (tuple, list)) or not all(_is_int(e) for e in v):
            self.fail(ctx, name, v)
        if len(v) > MAX_NDIM:
            self.fail(ctx, name, v, ValueError, f" (at most {MAX_NDIM})")
        return tuple(int(e) for e in v)

    def allowed(self) -> str:
        return "a tuple of ints"


class Shape(Attr):
    """A shape: an int or a tuple (or list) of ints, each in 0..MAX_SIZE (numpy integers yes,
    bools, floats and strings no), at most MAX_NDIM of them; ``unknown=True`` also allows one -1
    (reshape). Normalized to a tuple of Python ints."""

    __slots__ = ("unknown",)
    annotation = "int | tuple[int, ...]"

    def __init__(self, default=(), unknown=False):
        super().__init__(default)
        self.unknown = unknown

    def check(self, ctx, name, v):
        return check_shape(v, ctx.op, name, self.unknown)

    def allowed(self) -> str:
        return "an int or a tuple of ints"


def check_shape(v, opname: str, name: str = "shape", unknown: bool = False) -> tuple:
    """The :class:`Shape` rule as a function (creation functions outside the registry use it)."""
    dims = (v,) if _is_int(v) else v
    if not isinstance(dims, (tuple, list)):
        raise TypeError(f"{opname}(): {name} must be an int or a tuple of ints, not {_show(v)}")
    for e in dims:
        if not _is_int(e):
            raise TypeError(f"{opname}(): {name} must be an int or a tuple of ints, not {_show(v)} "
                            f"(element {_show(e)})")
    dims = tuple(int(e) for e in dims)
    if len(dims) > MAX_NDIM:
        raise ValueError(f"{opname}(): {name} has {len(dims)} dimensions; at most {MAX_NDIM} are supported")
    low = -1 if unknown else 0
    for e in dims:
        if e < low:
            allowed = "sizes must be >= 0 with at most one -1" if unknown else "sizes must be >= 0"
            raise ValueError(f"{opname}(): negative dimension in {name} {dims}: {e} ({allowed})")
        if e > MAX_SIZE:
            raise ValueError(f"{opname}(): dimension {e} in {name} is larger than the largest supported size {MAX_SIZE}")
    if unknown and dims.count(-1) > 1:
        raise ValueError(f"{opname}(): {name} {dims} has more than one -1 (sizes must be >= 0 with at most one -1)")
    return dims


_SCALAR_TYPES = {bool: "bool", int: "int", float: "float", complex: "complex"}


def scalar_value(v, kinds=(bool, int, float, complex)):
    """A Python scalar of one of ``kinds`` (numpy scalars become Python ones), else None."""
    if isinstance(v, np.generic) and not isinstance(v, (np.str_, np.bytes_, np.void, np.datetime64, np.timedelta64)):
        v = v.item()
    if type(v) in kinds:
        return v
    if isinstance(v, numbers.Number) and not isinstance(v, bool):
        for k in kinds:  # a subclass of int or float (an IntEnum, ...)
            if k is not bool and isinstance(v, k):
                return k(v)
    return None


def fit_scalar(opname: str, name: str, v, d) -> None:
    """TypeError when the Python scalar ``v`` cannot combine with dtype ``d`` (Array API kinds),
    OverflowError when ``d`` cannot hold it (integer dtypes; ints beyond float64 for floats)."""
    if not _dt.scalar_dtype_ok(v, d):
        raise TypeError(f"{opname}(): {name}={v!r} (a Python {type(v).__name__}) cannot be used with dtype {d.name} "
                        f"(Array API rules: {_SCALAR_RULE[d.kind]})")
    if type(v) is int:
        if d.kind in ("int", "uint"):
            info = np.iinfo(d.numpy)
            if not int(info.min) <= v <= int(info.max):
                raise OverflowError(f"{opname}(): {name}={_digits(v)} does not fit in {d.name} "
                                    f"(allowed: {info.min}..{info.max})")
        else:
            try:
                float(v)
            except OverflowError:
                raise OverflowError(f"{opname}(): {name}={_digits(v)} is too large for any floating-point dtype") from None


def _digits(v: int) -> str:
    r = str(v)
    return r if len(r) <= 40 else f"{r[:12]}...{r[-6:]} ({len(r)} digits)"


_SCALAR_RULE = {
    "bool": "a bool dtype takes only bools", "int": "an integer dtype takes only ints",
    "uint": "an integer dtype takes only ints", "float": "a floating-point dtype takes ints and floats",
    "complex": "a complex dtype takes ints, floats and complexes",
}


class Scalar(Attr):
    """A Python number of ``kinds`` (numpy scalars too). ``finite`` refuses NaN and ±inf;
    ``fits="x"`` checks it against the first input's dtype, ``fits="dtype"`` against the
    ``dtype`` attribute (else the value's default dtype: int64, float32, ...), see
    :func:`fit_scalar`."""

    __slots__ = ("kinds", "finite", "fits")

    def __init__(self, default=0, kinds=(bool, int, float, complex), finite=False, fits=None):
        super().__init__(default)
        self.kinds, self.finite, self.fits = tuple(kinds), finite, fits

    @property
    def annotation(self):
        return " | ".join(_SCALAR_TYPES[k] for k in self.kinds)

    @property
    def late(self):
        return self.fits is not None

    def check(self, ctx, name, v):
        s = scalar_value(v, self.kinds)
        if s is None:
            self.fail(ctx, name, v)
        if self.finite and not _finite(s):
            self.fail(ctx, name, v, ValueError)
        d = None
        if self.fits == "x" and ctx.dtypes:
            d = ctx.dtypes[0]
        elif self.fits == "dtype":
            d = ctx.attrs.get("dtype") or default_dtype(s)
        if d is not None:
            fit_scalar(ctx.op, name, s, d)
            if type(s) is int and d.kind in ("float", "complex"):
                s = float(s)  # every backend converts a float; some cannot convert a Python int beyond int64
        return s

    def allowed(self) -> str:
        names = [_SCALAR_TYPES[k] for k in self.kinds]
        text = "number" if len(names) == 4 else _or(names)
        return f"a {'finite ' if self.finite else ''}Python {text}"


def _finite(s) -> bool:
    """Python ints are finite (however large); floats and complexes unless NaN or ±inf."""
    if type(s) is complex:
        return math.isfinite(s.real) and math.isfinite(s.imag)
    return type(s) is not float or math.isfinite(s)


def default_dtype(v):
    """The dtype a Python scalar gets by default: bool, int64, float32 or complex64."""
    return {bool: _dt.bool_, int: _dt.int64, float: _dt.float32, complex: _dt.complex64}[type(v)]


class Real(Attr):
    """A finite int or float (never a bool) above ``lo`` (``open=True``: strictly above)."""

    __slots__ = ("lo", "open")
    annotation = "float"

    def __init__(self, default=0.0, lo=None, open=False):
        super().__init__(default)
        self.lo, self.open = lo, open

    def check(self, ctx, name, v):
        s = scalar_value(v, (int, float))
        if s is None:
            self.fail(ctx, name, v)
        if not _finite(s) or (self.lo is not None and (s <= self.lo if self.open else s < self.lo)):
            self.fail(ctx, name, v, ValueError)
        return s

    def allowed(self) -> str:
        if self.lo is None:
            return "a finite number"
        return f"a finite number {'>' if self.open else '>='} {self.lo}"


class Choice(Attr):
    """One of a few strings."""

    __slots__ = ("choices",)

    def __init__(self, default, choices):
        super().__init__(default)
        self.choices = tuple(choices)

    @property
    def annotation(self):
        return "str"

    def check(self, ctx, name, v):
        if type(v) is not str:
            self.fail(ctx, name, v)
        if v not in self.choices:
            self.fail(ctx, name, v, ValueError)
        return v

    def allowed(self) -> str:
        return _or([repr(c) for c in self.choices])


def _or(words) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


class DType(Attr):
    """A dtype (an anydevice dtype, its name, a numpy dtype or bool/int/float/complex),
    normalized to the anydevice dtype; ``required=True`` refuses None."""

    __slots__ = ("required",)

    def __init__(self, default=None, required=False):
        super().__init__(default)
        self.required = required

    @property
    def annotation(self):
        return "DType" if self.required else "DType | None"

    def check(self, ctx, name, v):
        if v is None:
            if self.required:
                raise TypeError(f"{ctx.op}(): {name} is required; allowed: {', '.join(d.name for d in _dt.ALL_DTYPES)}")
            return None
        try:
            return _dt.dtype(v)
        except TypeError as e:
            raise TypeError(f"{ctx.op}(): {name}: {e}") from None

    def allowed(self) -> str:
        return "a dtype" if self.required else "None or a dtype"


class Device(Attr):
    """A device: None (the current device), a string like ``'npu:0'`` or a Device. The engine
    resolves it (the registry knows no devices) before the schema runs."""

    __slots__ = ()
    annotation = "Device | str | None"

    def allowed(self) -> str:
        return "None, a device string or a Device"


Sample = Callable[..., Any]
