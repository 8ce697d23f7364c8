"""OpenCL C source generators, and the *families* that group kernels into programs.

A kernel is named by a *spec*, a small tuple whose first item says what it is:

- ``("ew", op, ins, out, mode)``: element-wise ``out = EXPR[op](x0, x1, ...)``; ``op == "copy"``
  with another output dtype is a cast (``astype``) and, on bit types, a strided copy;
- ``("ewg", ins, out)``: the *generic* element-wise kernel of a signature: every op with that
  signature (the op's index in :func:`ewg_ops` is an argument), over 4 strided dims;
- ``("red", kind, in, out, L)``: a reduction with work-groups of ``L``; kinds ``"any"`` (sum,
  prod, max, min) and ``"arg"`` (argmax, argmin) are generic: the kind is an argument;
- ``("vred", kind, dtype, "rows" | "cols")``: a vectorized sum, prod, max or min (in = out dtype);
- ``("mm", dtype, "tiled" | "simple" | "packed")``: matmul (``"pack"``: B into column panels
  for ``"packed"``); ``("take", dtype, idx)``;
  ``("arange", dtype, via)``; ``("philox", "uint8")`` (the random bits, compiled in a program of its own);
- ``("smx", "softmax" | "log_softmax" | "nll" | "ceg" | "nllceg", dtype, L[, labels])``: a work-group of ``L`` per
  row (``"k<K>"``: a work-item per row of K elements, :data:`ROW_FIXED`); ``("smxg", "softmax" | "log_softmax", dtype, L)``: their backward ops; ``("cetot", in, out, L)``: the sum or mean of cross entropy's per-row losses; ``("inrange", dtype)``:
  the flag of index_in_range (programs of their own).

PoCL compiles a program in ~0.4 s (mostly fixed, whatever its size) and code-generates each
kernel lazily at its first launch (~30 ms unoptimized, ~60–100 ms optimized, ~0.7 s for the tiled
matmul). So kernels come in two tiers, each in shared programs (:func:`program_of`): the
*generic* kernels of every dtype (:func:`generic_family`) in one program built without
optimization, which small and one-off launches use, and per dtype a program of *specialized*
kernels (:func:`family`: one per op, dtype and layout), built when a launch is first worth
specializing (see :mod:`kernels`). A spec outside these compiles alone.

Every dtype has a *storage* C type and a *compute* C type. float16 is stored as ``half`` and read
with ``vload_half``/``vstore_half_rte`` (core OpenCL, no ``cl_khr_fp16`` needed); bfloat16 is
stored as ``ushort`` and converted bit-wise. Both compute in ``float`` and round once on store,
which is what numpy and ml_dtypes do. bool is ``uchar`` holding 0 or 1. complex64 and complex128
are ``float2`` and ``double2`` (interleaved, as numpy stores them); their maths is in
:mod:`complex_c`, and complex128 (like float64) exists only with ``cl_khr_fp64``.

Element-wise modes: ``c``/``s`` per input (``"cs"``: input 0 contiguous, input 1 a single
element; the output contiguous), or ``g<nd>``: every operand strided over ``nd`` dims (the host
collapses dims first; stride 0 broadcasts).
"""
from __future__ import annotations

import functools
import re
from typing import NamedTuple

from anydevice.ops.random import PHILOX_M, PHILOX_W, ROUNDS

from .complex_c import COMPLEX_EXPR, TO_REAL, complex_helpers


class CType(NamedTuple):
    storage: str
    compute: str
    kind: str  # "b" bool, "i" signed, "u" unsigned, "f" floating, "c" complex
    bits: int
    lo: str  # identity of max (lowest value)
    hi: str  # identity of min (highest value)


CTYPES = {
    "bool": CType("uchar", "uchar", "b", 8, "0", "1"),
    "int8": CType("char", "char", "i", 8, "SCHAR_MIN", "SCHAR_MAX"),
    "int16": CType("short", "short", "i", 16, "SHRT_MIN", "SHRT_MAX"),
    "int32": CType("int", "int", "i", 32, "INT_MIN", "INT_MAX"),
    "int64": CType("long", "long", "i", 64, "LONG_MIN", "LONG_MAX"),
    "uint8": CType("uchar", "uchar", "u", 8, "0", "UCHAR_MAX"),
    "uint16": CType("ushort", "ushort", "u", 16, "0", "USHRT_MAX"),
    "uint32": CType("uint", "uint", "u", 32, "0", "UINT_MAX"),
    "uint64": CType("ulong", "ulong", "u", 64, "0", "ULONG_MAX"),
    "float16": CType("half", "float", "f", 16, "-INFINITY", "INFINITY"),
    "bfloat16": CType("ushort", "float", "f", 16, "-INFINITY", "INFINITY"),
    "float32": CType("float", "float", "f", 32, "-INFINITY", "INFINITY"),
    "float64": CType("double", "double", "f", 64, "-INFINITY", "INFINITY"),
    # interleaved (re, im), bit-compatible with numpy; the maths is in COMPLEX_HELPERS
    "complex64": CType("float2", "float2", "c", 64, "0", "0"),
    "complex128": CType("double2", "double2", "c", 128, "0", "0"),
}
#: the component type of each complex compute type
REAL_PART = {"float2": "float", "double2": "double"}
#: dtypes that exist only on devices with cl_khr_fp64
FP64_DTYPES = ("float64", "complex128")
BITS = ("uint8", "uint16", "uint32", "uint64")
#: dtype of partial results of a two-stage reduction (wider storage for the 16-bit floats)
PARTIAL = {"float16": "float32", "bfloat16": "float32"}
MAX_RANK = 4  # strided kernels exist for 1..MAX_RANK collapsed dims; the host loops over the rest
REDUCE_LOCAL = (1, 64)
TILE = 64  # matmul: a 16×16 work-group computes a 64×64 block of C, 4×4 per work-item

_BF16 = """
inline float bf2f(ushort h) { return as_float(((uint)h) << 16); }
inline ushort f2bf(float f) {
  uint u = as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (ushort)(u >> 16);
}
"""


def load(dt: str, ptr: str, idx: str) -> str:
    if dt == "float16":
        return f"vload_half({idx}, {ptr})"
    if dt == "bfloat16":
        return f"bf2f({ptr}[{idx}])"
    return f"{ptr}[{idx}]"


def store(dt: str, ptr: str, idx: str, v: str, vt: str = "float") -> str:
    """Store value ``v`` (of C type ``vt`` when it is double or complex) as dtype ``dt``."""
    ct = CTYPES[dt]
    if ct.kind == "c":  # a real value becomes (v, 0); the other complex width converts per component
        if vt == ct.compute:
            return f"{ptr}[{idx}] = ({v});"
        if vt in REAL_PART:
            return f"{ptr}[{idx}] = convert_{ct.storage}({v});"
        r = REAL_PART[ct.compute]
        return f"{ptr}[{idx}] = ({ct.storage})(({r})({v}), ({r})0);"
    if dt == "float16":
        return f"vstore_half_rte(({'double' if vt == 'double' else 'float'})({v}), {idx}, {ptr});"
    if dt == "bfloat16":
        return f"{ptr}[{idx}] = f2bf((float)({v}));"
    if dt == "bool":
        return f"{ptr}[{idx}] = (uchar)(({v}) != 0);"
    return f"{ptr}[{idx}] = {to_storage(dt, v)};"


def to_storage(dt: str, v: str) -> str:
    """``v`` converted to the storage type of real dtype ``dt`` (not bool or a 16-bit float). An
    unsigned target converts through ``long``, so a negative float wraps as numpy's conversion
    does on the cpu (C leaves that case undefined: PoCL saturated); uint64 converts directly from
    values not below 0 (above ``long``'s range)."""
    T = CTYPES[dt].storage
    if dt == "uint64":
        return f"(({v}) < 0 ? (ulong)(long)({v}) : (ulong)({v}))"
    if dt in ("uint8", "uint16", "uint32"):
        return f"({T})(long)({v})"
    return f"({T})({v})"


# --- element-wise maths: one C expression per (op, kind); x0, x1, x2 are the inputs -----------
# {T} is the compute type, {W} its bit width, {F} the literal suffix ("f" for float).
_ALL = "biuf"
EXPR: dict[str, dict[str, str]] = {
    "copy": {_ALL: "x0"},
    "negative": {"iuf": "-x0"},
    "abs": {"f": "fabs(x0)", "i": "(x0 < 0 ? -x0 : x0)", "u": "x0"},
    "exp": {"f": "exp(x0)"}, "log": {"f": "vlog_{T}_{T}(x0)"}, "sqrt": {"f": "sqrt(x0)"},
    "sin": {"f": "sin(x0)"}, "cos": {"f": "cos(x0)"}, "tan": {"f": "tan(x0)"}, "erf": {"f": "erf(x0)"},
    "sinh": {"f": "sinh(x0)"}, "cosh": {"f": "cosh(x0)"}, "tanh": {"f": "tanh(x0)"},
    "expm1": {"f": "expm1(x0)"}, "log1p": {"f": "log1p(x0)"}, "log2": {"f": "log2(x0)"}, "log10": {"f": "log10(x0)"},
    "reciprocal": {"f": "(1.0{F} / x0)"},
    "sigmoid": {"f": "(1.0{F} / (1.0{F} + exp(-x0)))"},
    "gelu": {"f": "(0.5{F} * x0 * (1.0{F} + erf(x0 * 0.70710678118654752{F})))"},
    # 0.5 x (1 + tanh(y)) as x / (1 + e^(-2y)): 1 + tanh(y) cancels for negative x, and a tanh that
    # stops one ulp short of -1 turned gelu(-65504) into -1.95e-3 instead of -0
    "gelu_tanh": {"f": "(x0 / (1.0{F} + exp(-1.5957691216057307{F} * (x0 + 0.044715{F} * x0 * x0 * x0))))"},
    "real": {"fiu": "x0"},  # the real part of a real number (complex: COMPLEX_EXPR)
    "imag": {"f": "(({T})0 * (x0 != x0))"},  # +0, NaN included
    "floor": {"f": "floor(x0)", "iu": "x0"},
    "ceil": {"f": "ceil(x0)", "iu": "x0"},
    "trunc": {"f": "trunc(x0)", "iu": "x0"},
    "round": {"f": "rint(x0)", "iu": "x0"},  # rint: round half to even
    "square": {"iuf": "x0 * x0"},
    "sign": {"f": "(x0 > 0 ? ({T})1 : (x0 < 0 ? ({T})-1 : (isnan(x0) ? x0 : ({T})0)))",
             "i": "(x0 > 0 ? ({T})1 : (x0 < 0 ? ({T})-1 : ({T})0))", "u": "(x0 > 0 ? ({T})1 : ({T})0)"},
    "relu": {"f": "((x0 >= 0 || isnan(x0)) ? x0 : ({T})0)", "i": "(x0 >= 0 ? x0 : ({T})0)", "u": "x0"},
    "isnan": {"f": "isnan(x0)", "iu": "0"},
    "isinf": {"f": "isinf(x0)", "iu": "0"},
    "isfinite": {"f": "isfinite(x0)", "iu": "1"},
    "logical_not": {"b": "!x0"},
    "bitwise_invert": {"iu": "~x0", "b": "!x0"},
    "add": {"iuf": "x0 + x1"},
    "subtract": {"iuf": "x0 - x1"},
    "multiply": {"iuf": "x0 * x1"},
    "divide": {"f": "x0 / x1"},
    "pow": {"f": "pow(x0, x1)", "i": "ipow_{T}(x0, x1)", "u": "upow_{T}(x0, x1)"},
    "hypot": {"f": "hypot(x0, x1)"},
    "logaddexp": {"f": "logaddexp_{T}(x0, x1)"},
    "maximum": {"f": "((x0 >= x1 || isnan(x0)) ? x0 : x1)", "iu": "(x0 >= x1 ? x0 : x1)"},
    "minimum": {"f": "((x0 <= x1 || isnan(x0)) ? x0 : x1)", "iu": "(x0 <= x1 ? x0 : x1)"},
    "remainder": {"f": "fmod_py_{T}(x0, x1)", "i": "imod_py_{T}(x0, x1)", "u": "(x1 == 0 ? 0 : x0 % x1)"},
    "floor_divide": {"f": "fdiv_py_{T}(x0, x1)", "i": "idiv_py_{T}(x0, x1)", "u": "(x1 == 0 ? 0 : x0 / x1)"},
    "equal": {_ALL: "(x0 == x1)"},
    "not_equal": {_ALL: "(x0 != x1)"},
    "less": {_ALL: "(x0 < x1)"},
    "less_equal": {_ALL: "(x0 <= x1)"},
    "greater": {_ALL: "(x0 > x1)"},
    "greater_equal": {_ALL: "(x0 >= x1)"},
    "logical_and": {"b": "(x0 && x1)"},
    "logical_or": {"b": "(x0 || x1)"},
    "logical_xor": {"b": "(x0 != x1)"},
    "bitwise_and": {"biu": "(x0 & x1)"},
    "bitwise_or": {"biu": "(x0 | x1)"},
    "bitwise_xor": {"biu": "(x0 ^ x1)"},
    # numpy: shifting by the bit width or more gives 0 (or -1 for a negative signed right shift)
    "bitwise_left_shift": {"iu": "(((ulong)x1) < {W} ? ({T})(x0 << x1) : ({T})0)"},
    "bitwise_right_shift": {"i": "(((ulong)x1) < {W} ? ({T})(x0 >> x1) : ({T})(x0 < 0 ? -1 : 0))",
                            "u": "(((ulong)x1) < {W} ? ({T})(x0 >> x1) : ({T})0)"},
    "where": {_ALL: "(x0 ? x1 : x2)"},
    "acos": {"f": "acos(x0)"}, "asin": {"f": "asin(x0)"}, "atan": {"f": "atan(x0)"},
    "acosh": {"f": "acosh(x0)"}, "asinh": {"f": "asinh(x0)"}, "atanh": {"f": "atanh(x0)"},
    "atan2": {"f": "atan2(x0, x1)"}, "copysign": {"f": "copysign(x0, x1)"}, "signbit": {"f": "signbit(x0)"},
    # the neighbour within the dtype itself ({S}, the storage type, tells float16 from bfloat16)
    "nextafter": {"f": "nextafter_{S}_{T}(x0, x1)"},
}
#: ops whose result is bool whatever the input dtype
BOOL_OUT = frozenset({"equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
                      "isnan", "isinf", "isfinite", "signbit"})
for _op, _by_kind in COMPLEX_EXPR.items():  # complex64/complex128 (kind "c"), and make_complex
    EXPR.setdefault(_op, {}).update(_by_kind)
_COMPLEX_OF = {"float": "float2", "double": "double2"}
_COMPONENT = {"complex64": "float32", "complex128": "float64"}

# Helpers named in EXPR, instantiated per compute type T (Python floor semantics, as numpy).
HELPERS = {
    "ipow": """inline T ipow_T(T a, T b) {
  if (b < 0) return a == 1 ? (T)1 : (a == -1 ? (T)((b & 1) ? -1 : 1) : (T)0);
  T r = 1; while (b) { if (b & 1) r = (T)(r * a); a = (T)(a * a); b >>= 1; } return r; }""",
    "upow": """inline T upow_T(T a, T b) {
  T r = 1; while (b) { if (b & 1) r = (T)(r * a); a = (T)(a * a); b >>= 1; } return r; }""",
    "fmod_py": """inline T fmod_py_T(T a, T b) {
  T m = fmod(a, b);
  if (b == 0) return m;
  if (m != 0) { if ((b < 0) != (m < 0)) m += b; } else m = copysign((T)0, b);
  return m; }""",
    "fdiv_py": """inline T fdiv_py_T(T a, T b) {
  if (b == 0) return a / b;
  T m = fmod(a, b), d = (a - m) / b;
  if (m != 0 && ((b < 0) != (m < 0))) d -= 1;
  if (d == 0) return copysign((T)0, a / b);
  T f = floor(d); if (d - f > (T)0.5) f += 1;
  return f; }""",
    "imod_py": """inline T imod_py_T(T a, T b) {
  if (b == 0 || b == -1) return 0;
  T r = a % b; if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }""",
    "idiv_py": """inline T idiv_py_T(T a, T b) {
  if (b == 0) return 0;
  if (b == -1) return (T)(0UL - (ulong)a);
  T q = a / b; if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1; return q; }""",
    # float log, as PoCL's own is not vectorized (7x slower over an array, and a row kernel that
    # calls it runs scalar): x = 2^k (1 + f), 1 + f in [sqrt(2)/2, sqrt(2)), and with s = f / (2 + f)
    # log(1 + f) = f - f^2/2 + s (f^2/2 + R(s^2)), R the minimax polynomial of FreeBSD's logf
    # (under 1 ulp: 0.79 ulp at most over every 97th float, against PoCL's 0.60 and numpy's 3.1)
    "vlog_float": """inline T vlog_float_T(T x) {
  #pragma OPENCL FP_CONTRACT OFF
  uint ix = as_uint(x);
  int sub = ix < 0x00800000u;
  ix = sub ? as_uint(x * 0x1p25f) : ix;
  uint iy = ix + (0x3f800000u - 0x3f3504f3u);
  int k = (int)(iy >> 23) - 127 - (sub ? 25 : 0);
  T f = as_float((iy & 0x007fffffu) + 0x3f3504f3u) - 1.0f;
  T s = f / (2.0f + f), z = s * s, w = z * z;
  T r = z * (0x1.555554p-1f + w * 0x1.23d3dcp-2f) + w * (0x1.999c26p-2f + w * 0x1.f13c4cp-3f);
  T hf = 0.5f * f * f, dk = (T)k;
  T y = dk * 0x1.62e3p-1f - ((hf - (s * (hf + r) + dk * 0x1.2fefa2p-17f)) - f);
  y = x == 0.0f ? -INFINITY : y;
  y = (x < 0.0f || isnan(x)) ? NAN : y;
  return x == INFINITY ? x : y; }""",
    "vlog_double": "inline T vlog_double_T(T x) { return log(x); }",
    "nextafter_float": "inline T nextafter_float_T(T a, T b) { return nextafter(a, b); }",
    "nextafter_double": "inline T nextafter_double_T(T a, T b) { return nextafter(a, b); }",
    # 16-bit floats (held exactly in a float): step the 16-bit pattern, away from 0 or toward it
    "nextafter_half": """inline T nextafter_half_T(T a, T b) {
  if (isnan(a) || isnan(b)) return a + b;
  if (a == b) return b;
  ushort h = b > 0 ? 0x0001 : 0x8001;
  if (a != 0) { vstore_half_rte(a, 0, (__private half*)&h); h = (b > a) == (a > 0) ? h + 1 : h - 1; }
  return vload_half(0, (__private const half*)&h); }""",
    "nextafter_ushort": """inline T nextafter_ushort_T(T a, T b) {
  if (isnan(a) || isnan(b)) return a + b;
  if (a == b) return b;
  ushort h = b > 0 ? 0x0001 : 0x8001;
  if (a != 0) { h = f2bf(a); h = (b > a) == (a > 0) ? h + 1 : h - 1; }
  return bf2f(h); }""",
    "logaddexp": """inline T logaddexp_T(T a, T b) {
  if (a == b) return a + log((T)2);
  T d = a - b;
  if (d > 0) return a + log1p(exp(-d));
  if (d <= 0) return b + log1p(exp(d));
  return d; }""",
}


def expr_for(op: str, dt: str) -> str | None:
    """The C expression of ``op`` on compute dtype ``dt``, or None if the kind is not covered."""
    ct = CTYPES[dt]
    base = REAL_PART.get(ct.compute, ct.compute)
    for kinds, e in EXPR[op].items():
        if ct.kind in kinds:
            return (e.replace("{T}", ct.compute).replace("{W}", str(ct.bits)).replace("{S}", ct.storage).replace("{R}", base)
                    .replace("{C}", _COMPLEX_OF.get(base, "")).replace("{F}", "f" if base == "float" else ""))
    return None


@functools.cache
def arity(op: str) -> int:
    return 1 + max(int(k) for k in re.findall(r"x(\d)", next(iter(EXPR[op].values()))))


def ew_signature(op: str, dt: str) -> tuple:
    """(input dtypes, output dtype) of ``op`` computing in ``dt``, as the op's dtype rule gives."""
    ins = ("bool", dt, dt) if op == "where" else (dt,) * arity(op)
    if op == "make_complex":
        return ins, "complex128" if dt == "float64" else "complex64"
    return ins, "bool" if op in BOOL_OUT else _COMPONENT.get(dt, dt) if op in TO_REAL else dt


def value_type(op: str, ins: tuple, out: str) -> str:
    """The C type of ``op``'s expression: the input's compute type for a cast, else the result's."""
    return CTYPES[ins[-1] if op == "copy" else out].compute


def _helpers(expr: str, T: str) -> str:
    return "\n".join(src.replace("_T(", f"_{T}(").replace("T ", f"{T} ").replace("(T)", f"({T})")
                     for name, src in HELPERS.items() if f"{name}_{T}(" in expr)


def _index(name: str, mode: str, nd: int) -> str:
    if mode == "c":
        return f"{name}_o + i"
    if mode == "s":
        return f"{name}_o"
    return f"{name}_o" + "".join(f" + c{d} * {name}_s{d}" for d in range(nd))


def _params(name: str, dt: str, mode: str, nd: int, const: bool) -> str:
    q = "const " if const else ""
    p = f"__global {q}{CTYPES[dt].storage}* {name}, long {name}_o"
    if mode == "g":
        p += "".join(f", long {name}_s{d}" for d in range(nd))
    return p


#: ops whose expression means the same on 16-wide vectors (IEEE operations, bit-identical per lane)
VECTOR_OPS = frozenset({"add", "subtract", "multiply", "divide", "negative"})
VECTOR_DTYPES = ("float32", "float64")
EW_WIDTH = 16


def ew_width(spec: tuple) -> int:
    """Elements per work-item of an ``"ew"`` spec: :data:`EW_WIDTH` for the :data:`VECTOR_OPS` on
    contiguous or single-element operands of one float dtype, else 1."""
    _, op, ins, out, mode = spec
    return EW_WIDTH if op in VECTOR_OPS and mode[0] != "g" and out in VECTOR_DTYPES and set(ins) == {out} else 1


def _elementwise(name: str, op: str, ins: tuple, out: str, mode: str) -> str:
    """``out[idx] = expr(x0, ...)`` for ``i < n``; contiguous ops of :func:`ew_width` 16 with
    ``vload16``/``vstore16`` (each work-item 16 elements, the tail one by one).

    Arguments: out, out_o[, out_s*], then per input pk, pk_o[, pk_s*], then [n0..n{nd-1},] n.
    """
    if ew_width(("ew", op, ins, out, mode)) > 1:
        return _elementwise_vector(name, op, ins, out, mode)
    expr = expr_for(op, ins[-1])
    T = value_type(op, ins, out)
    nd = int(mode[1:]) if mode[0] == "g" else 0
    modes = ["g"] * len(ins) if nd else list(mode)
    omode = "g" if nd else "c"
    params = [_params("out", out, omode, nd, False)]
    params += [_params(f"p{k}", dt, m, nd, True) for k, (dt, m) in enumerate(zip(ins, modes))]
    params += [f"long n{d}" for d in range(nd)]
    body = _grid_index(nd) if nd else ["  long i = get_global_id(0);", "  if (i >= n) return;"]
    for k, (dt, m) in enumerate(zip(ins, modes)):
        body.append(f"  {CTYPES[dt].compute} x{k} = {load(dt, f'p{k}', _index(f'p{k}', m, nd))};")
    body.append("  " + store(out, "out", _index("out", omode, nd), expr, T))
    return f"__kernel void {name}(" + ", ".join(params) + ", long n) {\n" + "\n".join(body) + "\n}\n"


def _grid_index(nd: int) -> list:
    """Index ``c0..c{nd-1}`` of a strided kernel from an up-to-3-D range (see :func:`grid`), the
    innermost dim first; 4 dims share range dim 2 (one division per work-item)."""
    ids = [f"c{nd - 1 - d}" for d in range(min(nd, 3))]
    lines = [f"  long {c} = get_global_id({d});" for d, c in enumerate(ids)]
    if nd == 4:
        lines[-1] = "  long z = get_global_id(2); if (z >= n0 * n1) return; long c1 = z % n1, c0 = z / n1;"
    bounds = [f"{c} >= n{c[1:]}" for c in ids[:2 if nd == 4 else 3]]
    return lines + [f"  if ({' || '.join(bounds)}) return;"]


def grid(dims: list, tile: int) -> tuple:
    """(global, local) sizes of a strided kernel over collapsed ``dims``: the two innermost dims in
    ``tile`` × ``tile`` work-groups (2-D tiles: no index division, and a transpose reads and writes
    whole cache lines per group), the rest along range dim 2."""
    inner = list(reversed(dims[-2:]))
    g = [-(-d // tile) * tile for d in inner]
    if len(dims) > 2:
        outer = 1
        for d in dims[:-2]:
            outer *= d
        g.append(outer)
    return tuple(g), tuple([tile] * len(inner) + [1] * (len(g) - len(inner)))


def _elementwise_vector(name: str, op: str, ins: tuple, out: str, mode: str) -> str:
    T, W = CTYPES[out].storage, EW_WIDTH
    expr = expr_for(op, out)
    params = [_params("out", out, "c", 0, False)] + [_params(f"p{k}", dt, "c", 0, True) for k, dt in enumerate(ins)]
    vec = " ".join(f"{T}{W} x{k} = " + (f"vload{W}(0, p{k} + p{k}_o + i0);" if m == "c" else f"({T}{W})(p{k}[p{k}_o]);")
                   for k, m in enumerate(mode))
    one = " ".join(f"{T} x{k} = p{k}[{_index(f'p{k}', m, 0)}];" for k, m in enumerate(mode))
    return (f"__kernel void {name}(" + ", ".join(params) + ", long n) {\n"
            f"  long i0 = get_global_id(0) * {W}; if (i0 >= n) return;\n"
            f"  if (i0 + {W} <= n) {{ {vec} vstore{W}({expr}, 0, out + out_o + i0); return; }}\n"
            f"  for (long i = i0; i < n; i++) {{ {one} out[out_o + i] = {expr}; }}\n}}\n")


def ew_modes(n_inputs: int) -> list:
    """The element-wise modes a family compiles for an op with ``n_inputs`` inputs."""
    extra = ["cs", "sc"] if n_inputs == 2 else []
    return ["c" * n_inputs] + extra + [f"g{d}" for d in range(1, MAX_RANK + 1)]


# --- reductions --------------------------------------------------------------------------------
_COMBINE = {
    "sum": ("a + b", "0"),
    "prod": ("a * b", "1"),
    "max": ("((a >= b || isnan(a)) ? a : b)", "{lo}"),
    "min": ("((a <= b || isnan(a)) ? a : b)", "{hi}"),
}
_COMBINE_INT = {"max": "(a >= b ? a : b)", "min": "(a <= b ? a : b)"}
#: complex sum and prod (max and min do not take complex: their slots of the generic kernel hold a)
_COMBINE_COMPLEX = {"sum": ("a + b", "0"), "prod": ("cmul_{T}(a, b)", "({T})(1, 0)"), "max": ("a", "0"), "min": ("a", "0")}
REDUCTIONS = ("sum", "prod", "max", "min", "argmax", "argmin")


def _reduction(name: str, kind: str, in_dt: str, out_dt: str, local: int) -> str:
    """One work-group per output element (row ``g / P``, chunk ``g % P``).

    Element (m, k) of the input is at ``x_o + m*sm + k*sk``; the group reduces k in
    ``[p*C, min(K, p*C + C))`` with a strided loop, then a tree in local memory.
    ``argmax``/``argmin`` keep (value, index) pairs; ties and NaNs pick the first index.
    ``kind == "any"`` (sum, prod, max, min) and ``"arg"`` (argmax, argmin) are the generic
    kernels: the kind is then an ``int kind`` argument indexing those tuples.
    """
    ct = CTYPES[in_dt]
    T = ct.compute if kind not in ("sum", "prod", "any") else CTYPES[out_dt].compute
    L = local
    generic = kind in ("any", "arg")
    head = (f"__kernel __attribute__((reqd_work_group_size({L}, 1, 1)))\n"
            f"void {name}(__global {CTYPES[out_dt].storage}* out, long out_o, __global const {ct.storage}* x, long x_o,\n"
            f"       {'int kind, ' if generic else ''}long K, long sm, long sk, long P, long C) {{\n"
            "  long g = get_group_id(0); int l = get_local_id(0);\n"
            "  long m = g / P, k0 = (g % P) * C, k1 = min(K, k0 + C);\n"
            "  long base = x_o + m * sm;\n")
    if kind in ("argmax", "argmin", "arg"):
        cmp = {"argmax": "v > best", "argmin": "v < best", "arg": "(kind ? v < best : v > best)"}[kind]
        nan = "isnan(v) && !isnan(best)" if ct.kind == "f" else "0"
        keep = "isnan(best)" if ct.kind == "f" else "0"
        k_, kp = ("kind, ", "int kind, ") if generic else ("", "")
        better = (f"inline int better_{name}({kp}{T} v, long vi, {T} best, long bi) {{\n"
                  f"  if (bi < 0) return 1; if (vi < 0) return 0;\n"
                  f"  if ({nan}) return 1; if ({keep}) return {'isnan(v) && vi < bi' if ct.kind == 'f' else '0'};\n"
                  f"  if ({cmp}) return 1; if (v == best) return vi < bi; return 0; }}\n")
        body = (f"  {T} best = 0; long bi = -1;\n"
                f"  for (long kk = k0 + l; kk < k1; kk += {L}) {{ {T} v = {load(in_dt, 'x', 'base + kk * sk')};\n"
                f"    if (better_{name}({k_}v, kk, best, bi)) {{ best = v; bi = kk; }} }}\n"
                f"  __local {T} sv[{L}]; __local long si[{L}]; sv[l] = best; si[l] = bi;\n"
                "  barrier(CLK_LOCAL_MEM_FENCE);\n"
                f"  for (int s = {L} / 2; s > 0; s >>= 1) {{\n"
                f"    if (l < s && better_{name}({k_}sv[l + s], si[l + s], sv[l], si[l])) {{ sv[l] = sv[l + s]; si[l] = si[l + s]; }}\n"
                "    barrier(CLK_LOCAL_MEM_FENCE); }\n"
                f"  if (l == 0) {store(out_dt, 'out', 'out_o + g', 'si[0]')}\n}}\n")
        return better + head + body
    kinds = REDUCTIONS[:4] if generic else (kind,)
    combs, idents = [], []
    for kd in kinds:
        if ct.kind == "c":
            comb, ident = (e.replace("{T}", T) for e in _COMBINE_COMPLEX[kd])
        else:
            comb, ident = _COMBINE[kd]
        combs.append(_COMBINE_INT[kd] if ct.kind not in "fc" and kd in _COMBINE_INT else comb)
        idents.append(ident.format(lo=ct.lo, hi=ct.hi))
    if generic:
        fn = (f"inline {T} comb_{name}(int kind, {T} a, {T} b) {{\n  switch (kind) {{\n"
              + "".join(f"  case {c}: return ({T})({e});\n" for c, e in enumerate(combs)) + "  }\n  return a; }\n"
              + f"inline {T} ident_{name}(int kind) {{\n  switch (kind) {{\n"
              + "".join(f"  case {c}: return ({T})({e});\n" for c, e in enumerate(idents)) + "  }\n  return 0; }\n")
        k_, ident = "kind, ", f"ident_{name}(kind)"
    else:
        fn = f"inline {T} comb_{name}({T} a, {T} b) {{ return ({T})({combs[0]}); }}\n"
        k_, ident = "", f"({T})({idents[0]})"
    body = (f"  {T} acc = {ident};\n"
            f"  for (long kk = k0 + l; kk < k1; kk += {L}) acc = comb_{name}({k_}acc, ({T}){load(in_dt, 'x', 'base + kk * sk')});\n"
            f"  __local {T} sh[{L}]; sh[l] = acc;\n  barrier(CLK_LOCAL_MEM_FENCE);\n"
            f"  for (int s = {L} / 2; s > 0; s >>= 1) {{\n    if (l < s) sh[l] = comb_{name}({k_}sh[l], sh[l + s]);\n"
            "    barrier(CLK_LOCAL_MEM_FENCE); }\n"
            f"  if (l == 0) {store(out_dt, 'out', 'out_o + g', 'sh[0]', T)}\n}}\n")
    return fn + head + body



#: dtypes of the vectorized reductions (:func:`_vreduction`); 16-bit floats, bool and complex keep ``"red"``
VRED_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64")
VRED_COLS = 256  # columns of a "cols" work-item (sixteen 16-wide accumulators: 1 KiB of float32 per row)
_VCOMBINE = {"sum": "((a) + (b))", "prod": "((a) * (b))",
             "max": "select((b), (a), ((a) >= (b)) | ((a) != (a)))", "min": "select((b), (a), ((a) <= (b)) | ((a) != (a)))"}
_VCOMBINE_INT = {"max": "max((a), (b))", "min": "min((a), (b))"}


def _vreduction(name: str, kind: str, dt: str, layout: str) -> str:
    """Sum, prod, max or min of ``dt`` with 16-wide vector loads and no local memory; one kernel
    per layout, each work-item independent (PoCL runs the work-items of a group in turn):

    - ``"rows"``: element (i, k) at ``x_o + i*sm + k``; work-item g reduces chunk ``g % P`` (of C
      elements) of row ``g / P`` into ``out[g]`` with two vector accumulators, then a tree of halves;
    - ``"cols"``: element (i, k) at ``x_o + i + k*sk``; work-item g owns VRED_COLS adjacent outputs
      (block ``g % nj``) over chunk ``g / nj`` of k and writes ``out[(g / nj) * M + i]``; the last,
      partial block goes 16 columns at a time, then one by one.

    The identity and the comparison (NaN wins, as numpy) are those of :data:`_COMBINE` (macros
    ``VC_`` for vectors, ``SC_`` for scalars). Arguments: out, out_o, x, x_o, M, K, stride, P, C."""
    ct = CTYPES[dt]
    T = ct.compute
    comb = (_VCOMBINE_INT.get(kind) if ct.kind in "iu" else None) or _VCOMBINE[kind]
    ident = f"({T})({_COMBINE[kind][1].format(lo=ct.lo, hi=ct.hi)})"
    scomb = _COMBINE_INT[kind] if ct.kind in "iu" and kind in _COMBINE_INT else _COMBINE[kind][0]
    head = (f"#define VC_{name}(a, b) {comb}\n#define SC_{name}(a, b) ({T})({scomb})\n"
            f"__kernel void {name}(__global {T}* out, long out_o, __global const {T}* x, long x_o,\n"
            "       long M, long K, long st, long P, long C) {\n  long g = get_global_id(0);\n")
    v, sv = f"VC_{name}", f"SC_{name}"
    if layout == "rows":
        return head + (
            "  if (g >= M * P) return;\n"
            "  long k0 = (g % P) * C, k1 = min(K, k0 + C), kk = k0;\n"
            f"  __global const {T}* p = x + x_o + (g / P) * st;\n"
            f"  {T}16 a0 = {ident}, a1 = {ident}; {T} s = {ident};\n"
            f"  for (; kk + 32 <= k1; kk += 32) {{ a0 = {v}(a0, vload16(0, p + kk)); a1 = {v}(a1, vload16(0, p + kk + 16)); }}\n"
            f"  for (; kk + 16 <= k1; kk += 16) a0 = {v}(a0, vload16(0, p + kk));\n"
            f"  for (; kk < k1; kk++) s = {sv}(s, p[kk]);\n"
            f"  a0 = {v}(a0, a1); {T}8 a8 = {v}(a0.lo, a0.hi); {T}4 a4 = {v}(a8.lo, a8.hi); {T}2 a2 = {v}(a4.lo, a4.hi);\n"
            f"  out[out_o + g] = {sv}(s, {sv}(a2.x, a2.y));\n}}\n")
    W, R = VRED_COLS, range(VRED_COLS // 16)
    return head + (
        f"  long nj = (M + {W - 1}) / {W}; if (g >= nj * P) return;\n"
        f"  long j0 = (g % nj) * {W}, p = g / nj, k0 = p * C, k1 = min(K, k0 + C);\n"
        f"  __global const {T}* q = x + x_o; __global {T}* o = out + out_o + p * M;\n"
        f"  if (j0 + {W} <= M) {{\n    {T}16 " + ", ".join(f"a{r} = {ident}" for r in R) + ";\n"
        "    for (long kk = k0; kk < k1; kk++) {\n"
        f"      __global const {T}* r = q + kk * st + j0;\n      "
        + " ".join(f"a{r} = {v}(a{r}, vload16(0, r + {16 * r}));" for r in R) + "\n    }\n    "
        + " ".join(f"vstore16(a{r}, 0, o + j0 + {16 * r});" for r in R) + "\n    return;\n  }\n"
        "  long j = j0;\n"
        f"  for (; j + 16 <= M; j += 16) {{\n    {T}16 a = {ident};\n"
        f"    for (long kk = k0; kk < k1; kk++) a = {v}(a, vload16(0, q + kk * st + j));\n"
        "    vstore16(a, 0, o + j);\n  }\n"
        "  for (; j < M; j++) {\n"
        f"    {T} s = {ident};\n    for (long kk = k0; kk < k1; kk++) s = {sv}(s, q[kk * st + j]);\n"
        "    o[j] = s;\n  }\n}\n")


# --- matmul ------------------------------------------------------------------------------------
def _mul(T: str, a: str, b: str) -> str:
    """``a * b`` in C type ``T`` (complex: :data:`complex_c.COMPLEX_HELPERS`' cmul)."""
    return f"cmul_{T}({a}, {b})" if T in REAL_PART else f"{a} * {b}"


def _matmul(name: str, dt: str) -> str:
    """``c[z] = a[z] @ b[z]`` (M×K @ K×N), register-blocked: a 16×16 work-group owns a 64×64 block
    of C; work-item (lc, lr) computes rows ``lr + 16i`` and columns ``lc + 16j`` (i, j < 4), so
    neighbouring work-items touch neighbouring columns (vectorizable across the work-group).
    Tiles of 64×16 of A and 16×64 of B go through local memory; loads outside the matrices read 0,
    so every shape works. Global size (ceil(N/64)*16, ceil(M/64)*16, batch); ``sa``/``sb`` are batch
    strides (0 broadcasts)."""
    ct = CTYPES[dt]
    T, S = ct.compute, ct.storage
    R = range(4)
    acc = "\n".join(f"  {T} " + ", ".join(f"c{i}{j} = 0" for j in R) + ";" for i in R)
    loads = "\n".join(
        f"    As[lr + {16 * i}][lc] = (r0 + lr + {16 * i} < M && t + lc < K) ? {load(dt, 'a', f'ab + (r0 + lr + {16 * i}) * K + t + lc')} : ({T})0;\n"
        f"    Bs[lr][lc + {16 * i}] = (t + lr < K && c0 + lc + {16 * i} < N) ? {load(dt, 'b', f'bb + (t + lr) * N + c0 + lc + {16 * i}')} : ({T})0;"
        for i in R)
    inner = ("      " + " ".join(f"{T} a{i} = As[lr + {16 * i}][kk];" for i in R) + "\n"
             + "      " + " ".join(f"{T} b{j} = Bs[kk][lc + {16 * j}];" for j in R) + "\n"
             + "\n".join("      " + " ".join(f"c{i}{j} = ({T})(c{i}{j} + {_mul(T, f'a{i}', f'b{j}')});" for j in R)
                         for i in R))
    stores = "\n".join(
        f"  if (r0 + lr + {16 * i} < M && c0 + lc + {16 * j} < N) "
        + store(dt, "c", f"cb + (r0 + lr + {16 * i}) * N + c0 + lc + {16 * j}", f"c{i}{j}", T)
        for i in R for j in R)
    return (f"__kernel __attribute__((reqd_work_group_size(16, 16, 1)))\n"
            f"void {name}(__global {S}* c, long c_o, __global const {S}* a, long a_o,\n"
            f"       __global const {S}* b, long b_o, long M, long N, long K, long sa, long sb) {{\n"
            "  int lc = get_local_id(0), lr = get_local_id(1);\n"
            "  long z = get_global_id(2), r0 = get_group_id(1) * 64, c0 = get_group_id(0) * 64;\n"
            f"  long ab = a_o + z * sa, bb = b_o + z * sb, cb = c_o + z * M * N;\n"
            f"  __local {T} As[64][17]; __local {T} Bs[16][65];\n{acc}\n"
            "  for (long t = 0; t < K; t += 16) {\n" + loads + "\n"
            "    barrier(CLK_LOCAL_MEM_FENCE);\n"
            "    for (int kk = 0; kk < 16; kk++) {\n" + inner + "\n    }\n"
            "    barrier(CLK_LOCAL_MEM_FENCE);\n  }\n" + stores + "\n}\n")


#: float32 matmul blocking (:func:`_matmul_packed`): a work-item computes MM_ROWS rows × MM_COLS
#: columns of C (MM_COLS / 16 float16 accumulators per row); work-groups of MM_GROUP along the rows
MM_ROWS, MM_COLS, MM_GROUP = 8, 32, 16
MM_PACK_GROUP = 64  # work-group size (rows of B) of the packing kernel
MM_NARROW = 16  # panel width of the float32 matmul when B has at most this many columns


def _matmul_pack(name: str, dt: str, cols: int = 0) -> str:
    """B (K×N, batch stride ``sb``) into panels of MM_COLS columns, ``bp[z][p][k][j] = B[k, p*W + j]``
    (0 beyond N), so the matmul reads each panel contiguously instead of one page per k.
    Work-item (k, p) copies row k of panel p of every batch with 16-wide loads and stores;
    global size (ceil(K / MM_PACK_GROUP) * MM_PACK_GROUP, panels), groups of (MM_PACK_GROUP, 1).
    ``cols``: panels of that many columns instead (:data:`MM_NARROW`)."""
    T, W = CTYPES[dt].storage, cols or MM_COLS
    full = " ".join(f"vstore16(vload16(0, s + {16 * j}), 0, d + {16 * j});" for j in range(W // 16))
    return (f"__kernel void {name}(__global {T}* bp, long bp_o, __global const {T}* b, long b_o,\n"
            "       long N, long K, long sb, long nb) {\n"
            f"  long k = get_global_id(0), p = get_global_id(1), c0 = p * {W}; if (k >= K) return;\n"
            f"  long total = get_global_size(1) * K * {W};\n"
            "  for (long z = 0; z < nb; z++) {\n"
            f"    __global const {T}* s = b + b_o + z * sb + k * N + c0;\n"
            f"    __global {T}* d = bp + bp_o + z * total + (p * K + k) * {W};\n"
            f"    if (c0 + {W} <= N) {{ {full} }}\n"
            f"    else for (long j = 0; j < {W}; j++) d[j] = c0 + j < N ? s[j] : ({T})0;\n  }}\n}}\n")


def _matmul_pack_t(name: str, dt: str, cols: int = 0) -> str:
    """``("mm", dt, "packt")``: the panels of :func:`_matmul_pack` from B given transposed (W of
    N×K: ``B[k, j] = W[j, k]``, as linear's weight), so ``x @ W.T`` needs no transposing copy.
    Work-item (k, p) fills row k of panel p; global size as the pack kernel's, one batch. The loops
    are unrolled (PoCL vectorizes across work-items only where a work-item holds no loop: 2x).
    ``cols``: panels of that many columns instead (:data:`MM_NARROW`)."""
    T, W = CTYPES[dt].storage, cols or MM_COLS
    unroll = f'_Pragma("unroll") for (long j = 0; j < {W}; j++)'
    return (f"__kernel void {name}(__global {T}* bp, long bp_o, __global const {T}* w, long w_o, long N, long K) {{\n"
            f"  long k = get_global_id(0), p = get_global_id(1), c0 = p * {W}; if (k >= K) return;\n"
            f"  __global const {T}* s = w + w_o + c0 * K + k; __global {T}* d = bp + bp_o + (p * K + k) * {W};\n"
            f"  if (c0 + {W} <= N) {{ {unroll} d[j] = s[j * K]; }}\n"
            f"  else {{ {unroll} d[j] = c0 + j < N ? s[j * K] : ({T})0; }}\n}}\n")


def _matmul_packed(name: str, dt: str, bias: bool = False, ta: bool = False, relu: bool = False,
                   cols: int = 0, linear: bool = True) -> str:
    """``c[z] = a[z] @ b[z]`` from B packed by :func:`_matmul_pack` (panel stride ``ps = K*W``, row
    stride ``ks = W``) or read in place when N is a multiple of W (``ps = W``, ``ks = N``).

    Work-group g computes panel ``g % P`` for the MM_GROUP row blocks of group row ``g / P``: its
    work-items share the panel, and consecutive groups sweep the panels over the same rows of A
    (which stay in cache: A is read once, not once per panel). A work-item computes MM_ROWS rows ×
    MM_COLS columns as a register-blocked micro-kernel (one broadcast of A per row and k,
    ``vload16`` of the panel, fused multiply-adds); rows past M read row M-1 and store nothing, so
    any shape works. Global size (group rows * P * MM_GROUP, 1, batch), groups of (MM_GROUP, 1, 1).
    ``bias`` (``"packedb"``, linear): each result then adds ``bias[(c0 + j) * bs]`` (``bs`` 0: one
    value for all), as a separate add would round it; extra arguments bias, bias_o, bs.
    ``ta`` (``"packedta"``): A is given transposed (K×M, ``A[r, k] = a[k * M + r]``: the graph
    compiler's ``matmul(matrix_transpose(x), y)``), so no transposing copy is made. ``relu``
    (``"packedbr"``, with ``bias``: the graph compiler's ``relu(linear(...))``): each result is also
    stored through relu (:data:`EXPR`'s, NaN kept) into ``r`` (extra arguments r, r_o). ``cols``
    (a spec's fourth item): panels of that many columns (:data:`MM_NARROW` for a narrow B: the
    same sums, half the work on 16 columns). ``relu`` without ``linear`` (``"packedr"``): only the
    relu is stored, into ``c`` (no r arguments): the linear result nothing else reads."""
    W = cols or MM_COLS
    T, R, V = CTYPES[dt].storage, range(MM_ROWS), range(W // 16)
    rows = "\n".join(f"  __global const {T}* a{i} = a + ab + min(r0 + {i}, M - 1){'' if ta else ' * K'};" for i in R)
    at = "k * M" if ta else "k"
    acc = "\n".join(f"  {T}16 " + ", ".join(f"c{i}_{j} = 0" for j in V) + ";" for i in R)
    body = ("    " + " ".join(f"{T}16 b{j} = vload16(0, bk + {16 * j});" for j in V) + "\n"
            + "\n".join(f"    {{ {T}16 av = ({T}16)(a{i}[{at}]); "
                         + " ".join(f"c{i}_{j} = fma(av, b{j}, c{i}_{j});" for j in V) + " }" for i in R))
    def st16(i, j):  # the stores of result vector (i, j)
        y = f"c{i}_{j}{' + v' + str(j) if bias else ''}"
        if not relu:
            return f"vstore16({y}, 0, cr + {i} * N + {16 * j});"
        r = f"select(({T}16)0, y, (y >= 0) | isnan(y))"
        if not linear:
            return f"{{ {T}16 y = {y}; vstore16({r}, 0, cr + {i} * N + {16 * j}); }}"
        return (f"{{ {T}16 y = {y}; vstore16(y, 0, cr + {i} * N + {16 * j}); "
                f"vstore16({r}, 0, rr + {i} * N + {16 * j}); }}")
    r1 = f"(y >= 0 || isnan(y)) ? y : ({T})0"
    one = (f"cr[@I@ * N + j] = t[j]{' + bv[(c0 + j) * bs]' if bias else ''};" if not relu else
           f"{{ {T} y = t[j] + bv[(c0 + j) * bs]; cr[@I@ * N + j] = y; rr[@I@ * N + j] = {r1}; }}" if linear else
           f"{{ {T} y = t[j] + bv[(c0 + j) * bs]; cr[@I@ * N + j] = {r1}; }}")
    full = "\n".join(f"    if (r0 + {i} < M) {{ " + " ".join(st16(i, j) for j in V) + " }" for i in R)
    part = "\n".join(f"    if (r0 + {i} < M) {{ " + " ".join(f"vstore16(c{i}_{j}, 0, t + {16 * j});" for j in V)
                      + f" for (long j = 0; j < N - c0; j++) {one.replace('@I@', str(i))} }}"
                      for i in R)
    if bias:
        full = ("    " + " ".join(f"{T}16 v{j} = bs ? vload16(0, bv + c0 + {16 * j}) : ({T}16)(bv[0]);" for j in V)
                + "\n" + full)
    extra = f", __global const {T}* bias, long bias_o, long bs" if bias else ""
    extra += f", __global {T}* r, long r_o" if relu and linear else ""
    head = f"  __global const {T}* bv = bias + bias_o;\n" if bias else ""
    return (f"__kernel void {name}(__global {T}* c, long c_o, __global const {T}* a, long a_o,\n"
            f"       __global const {T}* bp, long bp_o, long M, long N, long K, long sa, long sb, long ps, long ks{extra}) {{\n"
            + head +
            f"  long P = (N + {W - 1}) / {W}, gr = get_group_id(0), p = gr % P, z = get_global_id(2), c0 = p * {W};\n"
            f"  long r0 = ((gr / P) * {MM_GROUP} + get_local_id(0)) * {MM_ROWS};\n"
            "  if (r0 >= M) return;\n"
            f"  long ab = a_o + z * sa;\n  __global const {T}* bpan = bp + bp_o + z * sb + p * ps;\n"
            f"{rows}\n{acc}\n"
            f"  for (long k = 0; k < K; k++) {{\n    __global const {T}* bk = bpan + k * ks;\n{body}\n  }}\n"
            f"  __global {T}* cr = c + c_o + z * M * N + r0 * N + c0;\n"
            + (f"  __global {T}* rr = r + r_o + z * M * N + r0 * N + c0;\n" if relu and linear else "") +
            f"  if (c0 + {W} <= N) {{\n{full}\n  }} else {{\n    {T} t[{W}];\n{part}\n  }}\n}}\n")

# --- softmax / log_softmax ---------------------------------------------------------------------
SOFTMAX_DTYPES = ("float16", "bfloat16", "float32", "float64")
SOFTMAX_LOCAL = (1, 64)  # work-items per row: 1 for short rows, else a work-group per row
#: rows of up to ROW_FIXED elements take kernels of their own length (L slot ``"k<K>"``): a work-item
#: per row, its loops over the row unrolled. PoCL vectorizes a kernel across work-items only where
#: the work-item holds no loop: a loop over 10 elements costs 3-4x the unrolled form.
ROW_FIXED = 16


def _row_form(local) -> tuple:
    """``(L, K)`` of a row kernel's L slot: an int L (K None: the row length is an argument), or
    ``"k<K>"``, a work-item per row of exactly K elements."""
    return (1, int(local[1:])) if isinstance(local, str) else (local, None)


def _fixed_rows(src: str, k: int | None) -> str:
    """A work-item-per-row kernel with the row length the constant ``k`` (the argument, still
    passed, is ignored) and its loops over the row unrolled; ``src`` itself when ``k`` is None."""
    if k is None:
        return src
    return (src.replace(" long K, long inner", " long K_, long inner", 1)
            .replace("const int l = 0;", f"const int l = 0; const long K = {k};", 1)
            .replace("  for (long k = l; k < K;", '  _Pragma("unroll") for (long k = l; k < K;'))


def _softmax(name: str, kind: str, dt: str, local: int, lab_dt: str | None = None, out_dt: str | None = None) -> str:
    """``("smx", kind, dtype, L[, label dtype[, result dtype]])``: one work-group of ``L`` per row, the cpu's
    formulas in the compute type (16-bit floats in float, rounded once on store): ``m = max(x)``
    (NaN wins, as the max reduction), ``s = x - m``, ``lse = log(sum(exp(s)))``, then per kind

    - ``"softmax"``: ``exp(s) / sum(exp(s))``; ``"log_softmax"``: ``s - lse``;
    - ``"nll"``: ``out[g] = -(s[y] - lse)`` at the row's label ``y`` (NaN for a label outside
      [0, K), which the op's check rules out before), stored as the result dtype;
    - ``"ceg"`` (cross_entropy_grad): ``(softmax - onehot(y)) * scale``, the scale being
      ``grad[g * gs]``, divided by ``nd`` when ``nd > 0`` (reduction 'mean');
    - ``"nllceg"``: both from one max and one sum of exps (the graph compiler's pair of a loss and
      its gradient): the row losses into ``out`` as ``"nll"``, the gradient into ``gout`` as
      ``"ceg"`` (extra arguments gout, gout_o after ceg's).

    Row ``g`` of ``K`` elements at ``x_o + (g / inner) * K * inner + g % inner``, stride ``inner``
    (the elements after the axis). Arguments: out, out_o, x, x_o, K, inner[, lab, lab_o[, grad,
    grad_o, gs, nd]], R."""
    (L, fixed), T, S = _row_form(local), CTYPES[dt].compute, CTYPES[dt].storage
    ld = load(dt, "x", "b + k * inner")
    tree = ("  for (int w = {L} / 2; w > 0; w >>= 1) {{\n"
            "    if (l < w) {{ {T} a = sh[l], c = sh[l + w]; sh[l] = {comb}; }}\n"
            "    barrier(CLK_LOCAL_MEM_FENCE); }}\n")
    od = out_dt or dt
    params = f"__global {CTYPES[od].storage}* out, long out_o, __global const {S}* x, long x_o, long K, long inner"
    if lab_dt is not None:
        params += f", __global const {CTYPES[lab_dt].storage}* lab, long lab_o"
    if kind in ("ceg", "nllceg"):
        params += f", __global const {S}* gr, long gr_o, long gs, long nd"
    if kind == "nllceg":
        params += f", __global {S}* gout, long gout_o"
    # where the result is stored in the compute type, the sum's pass keeps each exp(x - m) in the
    # result (the last pass reads it back: one exp per element, the same values)
    dst, base = ("gout", "gout_o + r") if kind == "nllceg" else ("out", "o")
    keep = kind in ("softmax", "ceg", "nllceg") and CTYPES[dt].storage == T
    ex = f"{dst}[{base} + k * inner]" if keep else "exp(v - m)"
    if kind == "softmax":
        last = f"  for (long k = l; k < K; k += {L}) {{ {T} v = {ld}; {store(dt, 'out', 'o + k * inner', f'{ex} / tot', T)} }}\n"
    elif kind == "log_softmax":
        last = f"  for (long k = l; k < K; k += {L}) {{ {T} v = {ld}; {store(dt, 'out', 'o + k * inner', '(v - m) - lse', T)} }}\n"
    else:
        nll = ("  if (l == 0) { long y = (long)lab[lab_o + g]; "
               f"{T} r = NAN; if (y >= 0 && y < K) {{ long k = y; {T} v = {ld}; r = -((v - m) - lse); }}\n"
               f"    {store(od, 'out', 'out_o + g', 'r', T)} }}\n")
        ceg = (f"  long y = (long)lab[lab_o + g]; {T} sc = gs ? {load(dt, 'gr', 'gr_o + g')} : {load(dt, 'gr', 'gr_o')};\n"
               f"  if (nd > 0) sc = sc / ({T})nd;\n"
               f"  for (long k = l; k < K; k += {L}) {{ {T} v = {ld}; {T} p = {ex} / tot; if (k == y) p = p - ({T})1;\n"
               f"    {store(dt, dst, f'{base} + k * inner', 'p * sc', T)} }}\n")
        last = {"nll": nll, "ceg": ceg, "nllceg": nll + ceg}[kind]
    loops = (f"  {T} m = -INFINITY;\n"
             f"  for (long k = l; k < K; k += {L}) {{ {T} v = {ld}; m = (m >= v || isnan(m)) ? m : v; }}\n"
             "@MAX@"
             f"  {T} acc = 0;\n"
             + (f"  for (long k = l; k < K; k += {L}) {{ {T} e = exp({ld} - m); acc += e; {dst}[{base} + k * inner] = e; }}\n"
                if keep else f"  for (long k = l; k < K; k += {L}) acc += exp({ld} - m);\n") +
             "@SUM@")
    if L == 1:  # a row per work-item, rows side by side in work-groups of any size
        body = loops.replace("@MAX@", "").replace("@SUM@", "") + f"  {T} tot = acc, lse = vlog_{T}_{T}(tot);\n"
        return _fixed_rows(f"__kernel void {name}({params}, long R) {{\n"
                           "  long g = get_global_id(0); if (g >= R) return; const int l = 0;\n"
                           "  long r = (g / inner) * K * inner + g % inner, b = x_o + r, o = out_o + r;\n"
                           + body + last + "}\n", fixed)
    body = (loops.replace("@MAX@", "  sh[l] = m; barrier(CLK_LOCAL_MEM_FENCE);\n"
                          + tree.format(L=L, T=T, comb="(a >= c || isnan(a)) ? a : c")
                          + "  m = sh[0]; barrier(CLK_LOCAL_MEM_FENCE);\n")
            .replace("@SUM@", "  sh[l] = acc; barrier(CLK_LOCAL_MEM_FENCE);\n" + tree.format(L=L, T=T, comb="a + c")))
    return (f"__kernel __attribute__((reqd_work_group_size({L}, 1, 1)))\n"
            f"void {name}({params}, long R) {{\n"
            "  long g = get_group_id(0); int l = get_local_id(0);\n"
            "  long r = (g / inner) * K * inner + g % inner, b = x_o + r, o = out_o + r;\n"
            f"  __local {T} sh[{L}];\n"
            + body + f"  {T} tot = sh[0], lse = vlog_{T}_{T}(tot);\n" + last + "}\n")


def _softmax_grad(name: str, kind: str, dt: str, local: int) -> str:
    """``("smxg", "softmax" | "log_softmax", dtype, L)``: the backward ops from the output ``o``
    and its gradient ``g``, rows laid out as :func:`_softmax`'s: ``o * (g - sum(g * o))`` or
    ``g - exp(o) * sum(g)`` (the decompositions' formulas). Arguments: out, out_o, g, g_o, K,
    inner, o, o_o, R."""
    (L, fixed), T, S = _row_form(local), CTYPES[dt].compute, CTYPES[dt].storage
    lg, lo = load(dt, "x", "b + k * inner"), load(dt, "y", "c + k * inner")
    term = f"{lg} * {lo}" if kind == "softmax" else lg
    res = "v * (u - tot)" if kind == "softmax" else "u - exp(v) * tot"
    head = (f"void {name}(__global {S}* out, long out_o, __global const {S}* x, long x_o, long K, long inner,\n"
            f"       __global const {S}* y, long y_o, long R) {{\n")
    rows = "  long r = (g / inner) * K * inner + g % inner, b = x_o + r, c = y_o + r, o = out_o + r;\n"
    acc = f"  {T} acc = 0;\n  for (long k = l; k < K; k += {L}) acc += {term};\n"
    last = (f"  for (long k = l; k < K; k += {L}) {{ {T} u = {lg}, v = {lo}; "
            f"{store(dt, 'out', 'o + k * inner', res, T)} }}\n}}\n")
    if L == 1:
        return _fixed_rows(f"__kernel {head}  long g = get_global_id(0); if (g >= R) return; const int l = 0;\n"
                           + rows + acc + f"  {T} tot = acc;\n" + last, fixed)
    return (f"__kernel __attribute__((reqd_work_group_size({L}, 1, 1)))\n{head}"
            "  long g = get_group_id(0); int l = get_local_id(0);\n" + rows + f"  __local {T} sh[{L}];\n" + acc
            + "  sh[l] = acc; barrier(CLK_LOCAL_MEM_FENCE);\n"
            f"  for (int w = {L} / 2; w > 0; w >>= 1) {{ if (l < w) sh[l] = sh[l] + sh[l + w]; barrier(CLK_LOCAL_MEM_FENCE); }}\n"
            f"  {T} tot = sh[0];\n" + last)


def _ce_total(name: str, in_dt: str, out_dt: str, local: int, lab_dt: str | None = None) -> str:
    """``("cetot", in, out, L[, labels])``: one work-group of ``L`` sums the ``n`` per-row losses and
    stores the sum, or the sum divided by ``n`` when ``mean``. Arguments: out, out_o, x, x_o, n, mean.
    With a labels dtype (the graph compiler's claim of the label check with the loss) it also
    stores, as a bool, whether every label is in [0, K) (what ``index_in_range`` gives); extra
    arguments flag, flag_o, lab, lab_o, K."""
    T, L = CTYPES[out_dt].compute, local
    params = (f"__global {CTYPES[out_dt].storage}* out, long out_o, __global const {CTYPES[in_dt].storage}* x,"
              " long x_o, long n, long mean")
    check = ""
    if lab_dt is not None:
        params += f", __global uchar* flag, long flag_o, __global const {CTYPES[lab_dt].storage}* lab, long lab_o, long K"
        check = (f"  int ok = 1; for (long k = l; k < n; k += {L}) {{ long y = (long)lab[lab_o + k]; ok &= (y >= 0 && y < K); }}\n"
                 f"  __local int fl[{L}]; fl[l] = ok; barrier(CLK_LOCAL_MEM_FENCE);\n"
                 f"  for (int w = {L} / 2; w > 0; w >>= 1) {{ if (l < w) fl[l] = fl[l] & fl[l + w]; barrier(CLK_LOCAL_MEM_FENCE); }}\n"
                 "  if (l == 0) flag[flag_o] = (uchar)fl[0];\n")
    return (f"__kernel __attribute__((reqd_work_group_size({L}, 1, 1)))\n"
            f"void {name}({params}) {{\n"
            f"  int l = get_local_id(0); {T} acc = 0;\n"
            f"  for (long k = l; k < n; k += {L}) acc += ({T}){load(in_dt, 'x', 'x_o + k')};\n"
            f"  __local {T} sh[{L}]; sh[l] = acc; barrier(CLK_LOCAL_MEM_FENCE);\n"
            f"  for (int w = {L} / 2; w > 0; w >>= 1) {{ if (l < w) sh[l] = sh[l] + sh[l + w]; barrier(CLK_LOCAL_MEM_FENCE); }}\n"
            f"  if (l == 0) {{ {T} t = sh[0]; if (mean) t = t / ({T})n; {store(out_dt, 'out', 'out_o', 't', T)} }}\n"
            + check + "}\n")


def _in_range(name: str, dt: str) -> str:
    """``("inrange", dtype)``: clears the flag ``*out`` (filled with 1 first) where ``x[i]`` is
    below ``lo`` (when ``clo``) or not below ``hi`` (when ``chi``); every writer writes 0. The
    bounds come in the dtype's own type (the host keeps those beyond its range out).
    Arguments: out, out_o, x, x_o, n, lo, hi, clo, chi."""
    S = CTYPES[dt].storage
    return (f"__kernel void {name}(__global uchar* out, long out_o, __global const {S}* x, long x_o, long n,\n"
            f"       {S} lo, {S} hi, long clo, long chi) {{\n"
            "  long i = get_global_id(0); if (i >= n) return;\n"
            f"  {S} v = x[x_o + i];\n"
            "  if ((clo && v < lo) || (chi && v >= hi)) out[out_o] = 0;\n}\n")


# --- take / arange -----------------------------------------------------------------------------
def _take(name: str, dt: str, idx_dt: str) -> str:
    """``out[p, j, q] = x[p, idx[j] (negative: + n), q]``. take's value check (index_in_range)
    has ruled out indices outside [-n, n) before; one that is (a compiled graph's replay, whose
    check flag is compared only afterwards) reads element 0 instead of memory past the array.

    ``dt`` is a bit-copy dtype (uint8/16/32/64 of the element's size)."""
    ct, it = CTYPES[dt], CTYPES[idx_dt]
    return (f"__kernel void {name}(__global {ct.storage}* out, long out_o, __global const {ct.storage}* x,"
            f" long x_o, __global const {it.storage}* idx, long idx_o,\n"
            "       long n, long nidx, long post, long total) {\n"
            "  long i = get_global_id(0); if (i >= total) return;\n"
            "  long q = i % post, j = (i / post) % nidx, p = i / (post * nidx);\n"
            "  long kk = (long)idx[idx_o + j]; if (kk < 0) kk += n;\n"
            "  if (kk < 0 || kk >= n) kk = 0;\n"
            "  out[out_o + i] = x[x_o + (p * n + kk) * post + q];\n}\n")


def _arange(name: str, dt: str, via: str) -> str:
    """``out[i] = start + step * i`` computed in ``via`` (double, float or long), then stored."""
    return (f"__kernel void {name}(__global {CTYPES[dt].storage}* out, long out_o, {via} start, {via} step, long n) {{\n"
            f"  long i = get_global_id(0); if (i >= n) return;\n"
            f"  {store(dt, 'out', 'out_o + i', f'start + step * ({via})i', via)}\n}}\n")


def _philox(name: str) -> str:
    """Philox-4x32-10 of counter ``offset + i`` (``anydevice.ops.random``): one 128-bit block per
    work-item, stored as the words' little-endian bytes (so it serves every integer dtype)."""
    (m0, m1), (w0, w1) = PHILOX_M, PHILOX_W
    return (f"__kernel void {name}(__global uchar* out, long out_o, long nbytes, long k0, long k1, long off_lo,"
            " long off_hi) {\n"
            "  long i = get_global_id(0), base = i * 16; if (base >= nbytes) return;\n"
            "  ulong ctr = ((ulong)off_hi << 32) + (ulong)off_lo + (ulong)i;\n"
            "  uint c0 = (uint)ctr, c1 = (uint)(ctr >> 32), c2 = 0, c3 = 0, a = (uint)k0, b = (uint)k1;\n"
            f"  for (int r = 0; r < {ROUNDS}; r++) {{\n"
            f"    if (r) {{ a += {w0:#x}u; b += {w1:#x}u; }}\n"
            f"    uint h0 = mul_hi({m0:#x}u, c0), l0 = {m0:#x}u * c0, h1 = mul_hi({m1:#x}u, c2), l1 = {m1:#x}u * c2;\n"
            "    c0 = h1 ^ c1 ^ a; c1 = l1; c2 = h0 ^ c3 ^ b; c3 = l0;\n  }\n"
            "  uint w[4] = {c0, c1, c2, c3};\n"
            "  __global uchar* p = out + out_o + base;\n"
            "  long m = nbytes - base < 16 ? nbytes - base : 16;\n"
            "  for (long j = 0; j < m; j++) p[j] = (uchar)(w[j >> 2] >> (8 * (j & 3)));\n}\n")


# --- generic kernels: one per signature, the op (or reduction kind) as an argument -------------
@functools.cache
def ewg_ops(ins: tuple, out: str) -> tuple:
    """The ops a generic element-wise kernel of signature ``ins -> out`` serves; an op's code is
    its index here. Unary signatures include ``copy`` (a cast, or a strided copy)."""
    dt = ins[-1]
    ops = [op for op in EXPR if op != "copy" and expr_for(op, dt) is not None and ew_signature(op, dt) == (ins, out)]
    cast = len(ins) == 1 and (CTYPES[dt].kind != "c" or CTYPES[out].kind == "c")
    return tuple((["copy"] if cast else []) + sorted(ops))


def _generic_elementwise(name: str, ins: tuple, out: str) -> str:
    """``out = EXPR[ops[op]](x0, ...)`` over 4 strided dims (the host pads collapsed dims with
    size-1 ones), so one kernel serves every op of the signature in every layout.

    Arguments: op, out, out_o, out_s0..3, then per input pk, pk_o, pk_s0..3, then n0..n3, n.
    """
    nd = MAX_RANK
    params = ["int op", _params("out", out, "g", nd, False)]
    params += [_params(f"p{k}", dt, "g", nd, True) for k, dt in enumerate(ins)]
    params += [f"long n{d}" for d in range(nd)]
    body = ["  long i = get_global_id(0);", "  if (i >= n) return;", "  long r = i;"]
    for d in reversed(range(nd)):
        body.append(f"  long c{d} = r % n{d}; r /= n{d};" if d else f"  long c{d} = r;")
    for k, dt in enumerate(ins):
        body.append(f"  {CTYPES[dt].compute} x{k} = {load(dt, f'p{k}', _index(f'p{k}', 'g', nd))};")
    body.append("  switch (op) {")
    for code, op in enumerate(ewg_ops(ins, out)):
        T = value_type(op, ins, out)
        body.append(f"  case {code}: {store(out, 'out', _index('out', 'g', nd), expr_for(op, ins[-1]), T)} break;")
    body.append("  }")
    return f"__kernel void {name}(" + ", ".join(params) + ", long n) {\n" + "\n".join(body) + "\n}\n"


def _matmul_simple(name: str, dt: str) -> str:
    """One work-item per element of C, summing over k in order (as the tiled kernel does);
    groups of 8×8, global size (ceil(N/8)*8, ceil(M/8)*8, batch)."""
    T, S = CTYPES[dt].compute, CTYPES[dt].storage
    prod = _mul(T, load(dt, "a", "ab + k"), load(dt, "b", "bb + k * N"))
    return (f"__kernel __attribute__((reqd_work_group_size(8, 8, 1)))\n"
            f"void {name}(__global {S}* c, long c_o, __global const {S}* a, long a_o,\n"
            f"       __global const {S}* b, long b_o, long M, long N, long K, long sa, long sb) {{\n"
            "  long col = get_global_id(0), row = get_global_id(1), z = get_global_id(2);\n"
            "  if (col >= N || row >= M) return;\n"
            "  long ab = a_o + z * sa + row * K, bb = b_o + z * sb + col;\n"
            f"  {T} acc = 0;\n"
            f"  for (long k = 0; k < K; k++) acc = ({T})(acc + {prod});\n"
            f"  {store(dt, 'c', 'c_o + z * M * N + row * N + col', 'acc', T)}\n}}\n")


# --- specs, families and programs --------------------------------------------------------------
def name(spec: tuple) -> str:
    """The kernel's C name: the spec's items joined by ``_`` (unique within any program)."""
    return "_".join("_".join(p) if isinstance(p, tuple) else str(p) for p in spec)


def home(spec: tuple) -> str:
    """The dtype whose programs may hold ``spec``."""
    kind = spec[0]
    if kind == "ew":
        return spec[2][-1]
    if kind == "ewg":
        return spec[1][-1]
    if kind in ("red", "vred"):
        return spec[2]
    return spec[1]


def is_generic(spec: tuple) -> bool:
    """True for the kernels of a dtype's *generic* program (shape-, layout- and op-generic)."""
    kind = spec[0]
    return (kind == "ewg" or kind == "red" and spec[1] in ("any", "arg") or kind == "mm" and spec[2] == "simple"
            or kind in ("take", "arange") and spec[-1] == "generic")


def kernel_source(spec: tuple) -> str:
    kind, n = spec[0], name(spec)
    if kind == "ew":
        return _elementwise(n, *spec[1:])
    if kind == "ewg":
        return _generic_elementwise(n, *spec[1:])
    if kind == "red":
        return _reduction(n, *spec[1:])
    if kind == "vred":
        return _vreduction(n, *spec[1:])
    if kind == "mm":
        cols = {"cols": spec[3]} if len(spec) > 3 else {}  # ("mm", dt, kind, columns): narrow panels
        if spec[2] in ("packedb", "packedta", "packedbr", "packedr"):
            return _matmul_packed(n, spec[1], bias=spec[2] != "packedta", ta=spec[2] == "packedta",
                                  relu=spec[2] in ("packedbr", "packedr"), linear=spec[2] != "packedr", **cols)
        return {"simple": _matmul_simple, "tiled": _matmul, "pack": _matmul_pack, "packt": _matmul_pack_t,
                "packed": _matmul_packed}[spec[2]](n, spec[1], **cols)
    if kind == "take":
        return _take(n, *spec[1:3])
    if kind == "arange":
        return _arange(n, *spec[1:3])
    if kind == "philox":
        return _philox(n)
    if kind in SOURCES:
        return SOURCES[kind](n, *spec[1:])
    raise ValueError(f"unknown kernel spec {spec!r}")


#: Source generators of the kernel kinds that compile in programs of their own, ``kind -> fn(name,
#: *spec[1:])``: the row kernels here, and those other modules add (``kernels_sorting``: ``"argsort"``).
SOURCES: dict = {"smx": _softmax, "cetot": _ce_total, "smxg": _softmax_grad, "inrange": _in_range}


def _cast_targets(dt: str, fp64: bool) -> list:
    """The dtypes ``dt`` casts to: every one the device has (complex only to complex)."""
    return [d for d in CTYPES if (fp64 or d not in FP64_DTYPES) and (CTYPES[dt].kind != "c" or CTYPES[d].kind == "c")]


def _reduce_kinds(dt: str) -> tuple:
    return ("sum", "prod") if CTYPES[dt].kind == "c" else REDUCTIONS[:4]


def _reduce_outs(dt: str) -> list:
    return sorted({dt, PARTIAL.get(dt, dt)} | ({"float16", "bfloat16"} if dt == "float32" else set()))


@functools.cache
def generic_family(dt: str, fp64: bool) -> frozenset:
    """The specs of ``dt``'s generic program: one element-wise kernel per signature (casts to
    every dtype included), the two generic reductions per output dtype, a simple matmul, and
    take (bit types) and arange (their specs end with ``"generic"``). Small and rarely repeated
    launches run these."""
    sigs = {ew_signature(op, dt) for op in EXPR if op != "copy" and expr_for(op, dt) is not None}
    sigs |= {((dt,), d) for d in _cast_targets(dt, fp64)}
    specs = [("ewg", ins, out) for ins, out in sigs]
    specs += [("red", "any", dt, o, REDUCE_LOCAL[-1]) for o in _reduce_outs(dt)]
    if CTYPES[dt].kind != "c":
        specs.append(("red", "arg", dt, "int64", REDUCE_LOCAL[-1]))
    if dt != "bool":
        specs.append(("mm", dt, "simple"))
    specs += [s + ("generic",) for s in _take_arange(dt, fp64)]
    return frozenset(specs)


def _take_arange(dt: str, fp64: bool) -> list:
    vias = ["long"] if CTYPES[dt].kind in "iu" else []
    specs = [("arange", dt, v) for v in vias + ["float"] + (["double"] if fp64 else [])] if CTYPES[dt].kind != "c" else []
    return specs + ([("take", dt, i) for i in ("int32", "int64")] if _is_bits(dt) else [])


def _is_bits(dt: str) -> bool:
    """Whether ``dt`` serves bit copies (complex128 for 16-byte elements: no 128-bit integer)."""
    return dt in BITS or dt == "complex128"


@functools.cache
def family(dt: str, fp64: bool) -> frozenset:
    """The specs of ``dt``'s specialized program: every element-wise op in every mode, casts to
    every dtype, (bit types) strided copies and take, each reduction kind per work-group size,
    the fast matmuls, and arange. Large or often repeated launches run these."""
    specs = []
    for op in EXPR:
        if op != "copy" and expr_for(op, dt) is not None:
            ins, out = ew_signature(op, dt)
            specs += [("ew", op, ins, out, m) for m in ew_modes(len(ins))]
    specs += [("ew", "copy", (dt,), d, "c") for d in _cast_targets(dt, fp64)]
    if _is_bits(dt):
        specs += [("ew", "copy", (dt,), dt, m) for m in ew_modes(1)[1:]]
    specs += [("red", k, dt, o, L) for k in _reduce_kinds(dt) for o in _reduce_outs(dt) for L in REDUCE_LOCAL]
    if dt in VRED_DTYPES:
        specs += [("vred", k, dt, lay) for k in REDUCTIONS[:4] for lay in ("rows", "cols")]
    if CTYPES[dt].kind != "c":
        specs += [("red", k, dt, "int64", L) for k in REDUCTIONS[4:] for L in REDUCE_LOCAL]
    if dt != "bool":
        specs.append(("mm", dt, "tiled"))
    if dt == "float32":  # (float64 stays tiled: double8/16 trip PoCL's x86 ABI handling without AVX-512)
        specs += [("mm", dt, "pack"), ("mm", dt, "packed"), ("mm", dt, "packt"), ("mm", dt, "packedb"),
                  ("mm", dt, "packedta"), ("mm", dt, "packedbr"), ("mm", dt, "packedr")]
    return frozenset(specs + _take_arange(dt, fp64))


def program_of(spec: tuple, fp64: bool) -> tuple | None:
    """The key of the shared program holding ``spec``: ``("generic",)`` (one program for the
    generic kernels of every dtype: its source costs little next to PoCL's fixed ~0.4 s per
    build, and kernels are code-generated only when first launched), ``("special", dtype)``,
    or None when the spec compiles in a program of its own."""
    dt = home(spec)
    if dt not in CTYPES or not fp64 and dt in FP64_DTYPES:
        return None
    if is_generic(spec):
        return ("generic",) if spec in generic_family(dt, fp64) else None
    return ("special", dt) if spec in family(dt, fp64) else None


def program_specs(key: tuple, fp64: bool) -> frozenset:
    """The specs of the shared program ``key`` (see :func:`program_of`)."""
    if key[0] == "special":
        return family(key[1], fp64)
    return frozenset().union(*(generic_family(d, fp64) for d in CTYPES if fp64 or d not in FP64_DTYPES))


def program_source(specs, fp64: bool) -> str:
    """One program holding ``specs`` (sorted, so the source and its disk-cache key are stable)."""
    specs = sorted(specs, key=name)
    kernels = [kernel_source(s) for s in specs]
    exprs = " ".join(k for k in kernels)
    helpers = [_helpers(exprs, t) for t in sorted({c.compute for c in CTYPES.values()})]
    helpers += [complex_helpers(c) for c in REAL_PART if c in exprs and (fp64 or c != "double2")]
    head = ["#pragma OPENCL EXTENSION cl_khr_fp64 : enable"] if fp64 else []
    return "\n".join(head + [_BF16] + [h for h in helpers if h] + kernels)
