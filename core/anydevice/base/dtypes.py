"""Data types and the Python Array API type-promotion rules.

A :class:`DType` is a small immutable value object. ``bfloat16`` is backed by
``ml_dtypes`` which is imported only when its numpy dtype is first needed.
"""
from __future__ import annotations

import numpy as np

__all__ = [
    "DType", "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
    "uint64", "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
    "ALL_DTYPES", "dtype", "result_type", "can_cast", "isdtype", "KINDS", "finfo", "iinfo", "finfo_object",
    "iinfo_object",
]


class DType:
    """One element type. Compare with ``==`` or ``is``; instances are singletons."""

    __slots__ = ("name", "kind", "itemsize", "_np")

    def __init__(self, name: str, kind: str, itemsize: int, np_dtype):
        self.name, self.kind, self.itemsize, self._np = name, kind, itemsize, np_dtype

    @property
    def numpy(self) -> np.dtype:
        """The equivalent numpy dtype (bfloat16 comes from ml_dtypes)."""
        if self._np is None:
            import ml_dtypes

            self._np = np.dtype(ml_dtypes.bfloat16)
        return self._np

    @property
    def is_floating(self) -> bool:
        return self.kind == "float"

    @property
    def is_complex(self) -> bool:
        return self.kind == "complex"

    def __repr__(self) -> str:
        return f"anydevice.{self.name}"

    def __reduce__(self):
        return (dtype, (self.name,))


bool_ = DType("bool", "bool", 1, np.dtype(np.bool_))
int8 = DType("int8", "int", 1, np.dtype(np.int8))
int16 = DType("int16", "int", 2, np.dtype(np.int16))
int32 = DType("int32", "int", 4, np.dtype(np.int32))
int64 = DType("int64", "int", 8, np.dtype(np.int64))
uint8 = DType("uint8", "uint", 1, np.dtype(np.uint8))
uint16 = DType("uint16", "uint", 2, np.dtype(np.uint16))
uint32 = DType("uint32", "uint", 4, np.dtype(np.uint32))
uint64 = DType("uint64", "uint", 8, np.dtype(np.uint64))
float16 = DType("float16", "float", 2, np.dtype(np.float16))
bfloat16 = DType("bfloat16", "float", 2, None)
float32 = DType("float32", "float", 4, np.dtype(np.float32))
float64 = DType("float64", "float", 8, np.dtype(np.float64))
complex64 = DType("complex64", "complex", 8, np.dtype(np.complex64))
complex128 = DType("complex128", "complex", 16, np.dtype(np.complex128))

ALL_DTYPES: tuple[DType, ...] = (
    bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
    float16, bfloat16, float32, float64, complex64, complex128,
)
_BY_NAME = {d.name: d for d in ALL_DTYPES}
_BY_NAME["bfloat16"] = bfloat16
_BY_NP = {d._np: d for d in ALL_DTYPES if d._np is not None}

#: Array API ``isdtype`` kinds, as sets of dtypes.
KINDS: dict[str, frozenset] = {
    "bool": frozenset({bool_}),
    "signed integer": frozenset({int8, int16, int32, int64}),
    "unsigned integer": frozenset({uint8, uint16, uint32, uint64}),
    "real floating": frozenset({float16, bfloat16, float32, float64}),
    "complex floating": frozenset({complex64, complex128}),
}
KINDS["integral"] = KINDS["signed integer"] | KINDS["unsigned integer"]
KINDS["numeric"] = KINDS["integral"] | KINDS["real floating"] | KINDS["complex floating"]


def dtype(spec) -> DType:
    """Turn a DType, a name (``"float32"``), a numpy dtype or a Python type into a DType."""
    if isinstance(spec, DType):
        return spec
    if isinstance(spec, str):
        d = _BY_NAME.get(spec)
        if d is None:
            raise TypeError(f"unknown dtype {spec!r}; allowed: {', '.join(_BY_NAME)}")
        return d
    if spec is bool:
        return bool_
    if spec is int:
        return int64
    if spec is float:
        return float32
    if spec is complex:
        return complex64
    try:
        npd = np.dtype(spec)
    except TypeError:
        raise TypeError(f"cannot interpret {spec!r} as a dtype; allowed: {', '.join(_BY_NAME)}") from None
    d = _BY_NP.get(npd)
    if d is None:
        if npd.name == "bfloat16":
            return bfloat16
        kind = {"U": "text", "S": "bytes", "O": "Python objects", "M": "dates", "m": "time deltas"}.get(npd.kind, str(npd))
        raise TypeError(f"{kind} (numpy dtype {npd}) cannot be a tensor element type; allowed: {', '.join(_BY_NAME)}")
    return d


def isdtype(dtype: DType, kind) -> bool:
    """Array API ``isdtype``: whether ``dtype`` is of ``kind`` (a dtype, a kind name such as
    ``"real floating"`` or ``"integral"``, or a tuple of them)."""
    if not isinstance(dtype, DType):
        raise TypeError(f"isdtype(): dtype must be an anydevice dtype, not {type(dtype).__name__} {dtype!r}")
    if isinstance(kind, tuple):
        return any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, DType):
        return dtype is kind
    if not isinstance(kind, str):
        raise TypeError(f"isdtype(): kind must be a dtype, a kind name or a tuple of them, not {type(kind).__name__}")
    if kind not in KINDS:
        raise ValueError(f"isdtype(): unknown dtype kind {kind!r}; allowed: {', '.join(KINDS)}")
    return dtype in KINDS[kind]


# --- promotion -------------------------------------------------------------------------
# Lattice of the Array API standard, plus float16/bfloat16 which promote to float32.
_SIGNED = [int8, int16, int32, int64]
_UNSIGNED = [uint8, uint16, uint32, uint64]
_PROMO: dict[tuple[DType, DType], DType] = {(bool_, bool_): bool_}


def _fill():
    for group in (_SIGNED, _UNSIGNED, [float32, float64], [complex64, complex128]):
        for a in group:
            for b in group:
                _PROMO[a, b] = max(a, b, key=lambda d: d.itemsize)
    for u in _UNSIGNED[:3]:
        for s in _SIGNED:
            w = max(s.itemsize, 2 * u.itemsize)
            _PROMO[u, s] = _PROMO[s, u] = {2: int16, 4: int32, 8: int64}[w]
    # uint64 with a signed integer is undefined in the standard: no entry.
    for f, c in ((float32, complex64), (float32, complex128), (float64, complex64), (float64, complex128)):
        out = complex128 if (f is float64 or c is complex128) else complex64
        _PROMO[f, c] = _PROMO[c, f] = out
    for h in (float16, bfloat16):
        _PROMO[h, h] = h
        for f in (float32, float64):
            _PROMO[h, f] = _PROMO[f, h] = f
        for c in (complex64, complex128):
            _PROMO[h, c] = _PROMO[c, h] = c
    _PROMO[float16, bfloat16] = _PROMO[bfloat16, float16] = float32


_fill()


def promote(a: DType, b: DType) -> DType:
    """Promote two dtypes; ``TypeError`` naming both when the standard defines no result."""
    if a is b:
        return a
    r = _PROMO.get((a, b))
    if r is None:
        raise TypeError(
            f"no type promotion between {a.name} and {b.name}: the Array API standard only promotes "
            f"within a kind (bool, integers, floating), so convert one side with astype()"
        )
    return r


def result_type(*arrays_and_dtypes) -> DType:
    """Array API ``result_type`` over dtypes (anything :func:`dtype` accepts), arrays (their
    ``dtype``) and Python scalars: a scalar takes the others' dtype where the standard allows it
    (bool with bool; int with integer and floating dtypes; float with floating ones; complex with
    complex ones, and with a real floating dtype it gives the complex dtype of that precision)."""
    ds, scalars = [], []
    for a in arrays_and_dtypes:
        if type(a) in (bool, int, float, complex):
            scalars.append(a)
        else:
            ds.append(_operand_dtype("result_type", a))
    if not ds:
        raise TypeError("result_type() needs at least one dtype or array (Python scalars alone have no dtype)")
    out = ds[0]
    for d in ds[1:]:
        try:
            out = promote(out, d)
        except TypeError as e:
            raise TypeError(f"result_type(): {e}") from None
    for v in scalars:
        if type(v) is complex and out.kind == "float":
            out = complex_of(out)
        elif not scalar_dtype_ok(v, out):
            raise TypeError(f"result_type(): a Python {type(v).__name__} cannot combine with {out.name} "
                            f"(Array API rules: {_SCALAR_KINDS[type(v)]})")
    return out


def complex_of(d: DType) -> DType:
    """The complex dtype a Python complex scalar gives with real floating dtype ``d`` (the Array
    API's rule, 2024.12: the same precision; float16 and bfloat16, outside the standard, give
    complex64 as numpy does)."""
    return complex128 if d is float64 else complex64


_SCALAR_KINDS = {bool: "a bool combines only with bool", int: "an int combines with integer and floating dtypes",
                 float: "a float combines with floating dtypes", complex: "a complex combines with floating dtypes"}


def _operand_dtype(name: str, a) -> DType:
    """The dtype of a dtype-like or array-like argument; TypeError naming ``name`` otherwise."""
    if isinstance(a, DType):
        return a
    d = getattr(a, "dtype", None)
    if isinstance(d, DType):
        return d
    try:
        if a is None:
            raise TypeError("None")
        return dtype(a if d is None or isinstance(a, type) else d)
    except TypeError as e:
        if isinstance(a, str):
            raise TypeError(f"{name}(): {e}") from None
        raise TypeError(f"{name}(): {type(a).__name__} {a!r} is neither a dtype nor an array; allowed: "
                        f"{', '.join(_BY_NAME)} (or their names), tensors") from None


class finfo_object:  # noqa: N801 - the Array API's name
    """Limits of a floating-point dtype as Python floats: ``bits``, ``eps``, ``max``, ``min``,
    ``smallest_normal``; ``dtype`` is the real dtype they describe (float32 for complex64)."""

    __slots__ = ("bits", "eps", "max", "min", "smallest_normal", "dtype")

    def __init__(self, bits: int, eps: float, max: float, min: float, smallest_normal: float, dtype: DType):  # noqa: A002
        self.bits, self.eps, self.max, self.min = bits, eps, max, min
        self.smallest_normal, self.dtype = smallest_normal, dtype

    def __repr__(self) -> str:
        return (f"finfo(bits={self.bits}, eps={self.eps!r}, max={self.max!r}, min={self.min!r}, "
                f"smallest_normal={self.smallest_normal!r}, dtype={self.dtype.name})")


class iinfo_object:  # noqa: N801 - the Array API's name
    """Limits of an integer dtype as Python ints: ``bits``, ``max``, ``min``; ``dtype``."""

    __slots__ = ("bits", "max", "min", "dtype")

    def __init__(self, bits: int, max: int, min: int, dtype: DType):  # noqa: A002
        self.bits, self.max, self.min, self.dtype = bits, max, min, dtype

    def __repr__(self) -> str:
        return f"iinfo(bits={self.bits}, max={self.max}, min={self.min}, dtype={self.dtype.name})"


_REAL_OF = {"complex64": "float32", "complex128": "float64"}


def finfo(type, /) -> finfo_object:  # noqa: A002 - the Array API parameter name
    """Machine limits of a floating-point dtype (or a tensor's), as Python floats. For a complex
    dtype they are those of its real and imaginary parts. TypeError for other dtypes."""
    d = _operand_dtype("finfo", type)
    if d.kind not in ("float", "complex"):
        raise TypeError(f"finfo(): {d.name} is not a floating-point dtype; allowed: "
                        f"{', '.join(x.name for x in ALL_DTYPES if x.kind in ('float', 'complex'))} (iinfo() is for integers)")
    real = _BY_NAME[_REAL_OF.get(d.name, d.name)]
    if real is bfloat16:
        import ml_dtypes

        f = ml_dtypes.finfo(ml_dtypes.bfloat16)
    else:
        f = np.finfo(real.numpy)
    return finfo_object(int(f.bits), float(f.eps), float(f.max), float(f.min), float(f.smallest_normal), real)


def iinfo(type, /) -> iinfo_object:  # noqa: A002 - the Array API parameter name
    """Machine limits of an integer dtype (or a tensor's), as Python ints. TypeError for other dtypes."""
    d = _operand_dtype("iinfo", type)
    if d.kind not in ("int", "uint"):
        raise TypeError(f"iinfo(): {d.name} is not an integer dtype; allowed: "
                        f"{', '.join(x.name for x in ALL_DTYPES if x.kind in ('int', 'uint'))} (finfo() is for floating point)")
    i = np.iinfo(d.numpy)
    return iinfo_object(int(i.bits), int(i.max), int(i.min), d)


def can_cast(from_, to, /) -> bool:
    """True when ``from_`` (a dtype or an array) promotes to the dtype ``to`` without losing
    information (Array API type promotion)."""
    to = _operand_dtype("can_cast", to)
    return _PROMO.get((_operand_dtype("can_cast", from_), to)) is to


def scalar_dtype_ok(value, d: DType) -> bool:
    """Whether a Python scalar may combine with an array of dtype ``d`` (Array API rules)."""
    t = type(value)
    if t is bool:
        return d is bool_
    if t is int:
        return d.kind in ("int", "uint", "float", "complex")
    if t is float:
        return d.kind in ("float", "complex")
    if t is complex:
        return d.kind == "complex"
    return False
