"""OpenCL C source generators: one for element-wise work (maths, casts, strided copies), one for
reductions, one for matmul, plus small ones for take and arange.

Every dtype has a *storage* C type and a *compute* C type. float16 is stored as ``half`` and read
with ``vload_half``/``vstore_half_rte`` (core OpenCL, no ``cl_khr_fp16`` needed); bfloat16 is
stored as ``ushort`` and converted bit-wise. Both compute in ``float`` and round once on store,
which is what numpy and ml_dtypes do. bool is ``uchar`` holding 0 or 1.

Operand access modes: ``c`` contiguous (``off + i``), ``s`` a single element (``off``), ``g``
strided over the output index (``off + sum(coord_d * stride_d)``; stride 0 broadcasts).
"""
from __future__ import annotations

from typing import NamedTuple


class CType(NamedTuple):
    storage: str
    compute: str
    kind: str  # "b" bool, "i" signed, "u" unsigned, "f" floating
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
}
#: dtype of partial results of a two-stage reduction (wider storage for the 16-bit floats)
PARTIAL = {"float16": "float32", "bfloat16": "float32"}

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
    """Store value ``v`` (of C type ``vt`` when it is double) as dtype ``dt``."""
    if dt == "float16":
        return f"vstore_half_rte(({'double' if vt == 'double' else 'float'})({v}), {idx}, {ptr});"
    if dt == "bfloat16":
        return f"{ptr}[{idx}] = f2bf((float)({v}));"
    if dt == "bool":
        return f"{ptr}[{idx}] = (uchar)(({v}) != 0);"
    return f"{ptr}[{idx}] = ({CTYPES[dt].storage})({v});"


def preamble(dtypes) -> str:
    dtypes = set(dtypes)
    out = []
    if "float64" in dtypes:
        out.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    if "bfloat16" in dtypes:
        out.append(_BF16)
    return "\n".join(out) + "\n"


# --- element-wise maths: one C expression per (op, kind); x0, x1, x2 are the inputs -----------
_ALL = "biuf"
EXPR: dict[str, dict[str, str]] = {
    "copy": {_ALL: "x0"},
    "negative": {"iuf": "-x0"},
    "abs": {"f": "fabs(x0)", "i": "(x0 < 0 ? -x0 : x0)", "u": "x0"},
    "exp": {"f": "exp(x0)"}, "log": {"f": "log(x0)"}, "sqrt": {"f": "sqrt(x0)"},
    "sin": {"f": "sin(x0)"}, "cos": {"f": "cos(x0)"}, "erf": {"f": "erf(x0)"},
    "floor": {"f": "floor(x0)", "iu": "x0"},
    "round": {"f": "rint(x0)", "iu": "x0"},  # rint: round half to even
    "add": {"iuf": "x0 + x1"},
    "multiply": {"iuf": "x0 * x1"},
    "divide": {"f": "x0 / x1"},
    "pow": {"f": "pow(x0, x1)", "i": "ipow_{T}(x0, x1)", "u": "upow_{T}(x0, x1)"},
    "maximum": {"f": "((x0 >= x1 || isnan(x0)) ? x0 : x1)", "iu": "(x0 >= x1 ? x0 : x1)"},
    "minimum": {"f": "((x0 <= x1 || isnan(x0)) ? x0 : x1)", "iu": "(x0 <= x1 ? x0 : x1)"},
    "remainder": {"f": "fmod_py_{T}(x0, x1)", "i": "imod_py_{T}(x0, x1)", "u": "(x1 == 0 ? 0 : x0 % x1)"},
    "floor_divide": {"f": "fdiv_py_{T}(x0, x1)", "i": "idiv_py_{T}(x0, x1)", "u": "(x1 == 0 ? 0 : x0 / x1)"},
    "equal": {_ALL: "(x0 == x1)"},
    "less": {_ALL: "(x0 < x1)"},
    "bitwise_and": {"biu": "(x0 & x1)"},
    "bitwise_or": {"biu": "(x0 | x1)"},
    "bitwise_xor": {"biu": "(x0 ^ x1)"},
    # numpy: shifting by the bit width or more gives 0 (or -1 for a negative signed right shift)
    "bitwise_left_shift": {"iu": "(((ulong)x1) < {W} ? ({T})(x0 << x1) : ({T})0)"},
    "bitwise_right_shift": {"i": "(((ulong)x1) < {W} ? ({T})(x0 >> x1) : ({T})(x0 < 0 ? -1 : 0))",
                            "u": "(((ulong)x1) < {W} ? ({T})(x0 >> x1) : ({T})0)"},
    "where": {_ALL: "(x0 ? x1 : x2)"},
}

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
}


def expr_for(op: str, dt: str) -> str | None:
    """The C expression of ``op`` on compute dtype ``dt``, or None if the kind is not covered."""
    ct = CTYPES[dt]
    for kinds, e in EXPR[op].items():
        if ct.kind in kinds:
            return e.replace("{T}", ct.compute).replace("{W}", str(ct.bits))
    return None


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


def elementwise(expr: str, ins: list, out: tuple, nd: int) -> str:
    """Kernel ``k``: ``out[idx] = expr(x0, x1, ...)`` for ``i < n`` over an ``nd``-D index space.

    :param ins: ``[(dtype, mode), ...]``; :param out: ``(dtype, mode)``.
    Arguments: out, out_o[, out_s*], then per input pk, pk_o[, pk_s*], then n0..n{nd-1}, n.
    """
    T = CTYPES[ins[-1][0]].compute if ins else CTYPES[out[0]].compute
    params = [_params("out", out[0], out[1], nd, False)]
    params += [_params(f"p{k}", dt, m, nd, True) for k, (dt, m) in enumerate(ins)]
    strided = out[1] == "g" or any(m == "g" for _, m in ins)
    if strided:
        params += [f"long n{d}" for d in range(nd)]
    body = ["  long i = get_global_id(0);", "  if (i >= n) return;"]
    if strided:
        body.append("  long r = i;")
        for d in reversed(range(nd)):
            body.append(f"  long c{d} = r % n{d}; r /= n{d};" if d else f"  long c{d} = r;")
    for k, (dt, m) in enumerate(ins):
        body.append(f"  {CTYPES[dt].compute} x{k} = {load(dt, f'p{k}', _index(f'p{k}', m, nd))};")
    body.append("  " + store(out[0], "out", _index("out", out[1], nd), expr, T))
    dts = [out[0]] + [dt for dt, _ in ins]
    return (preamble(dts) + _helpers(expr, T) + "\n__kernel void k(" + ", ".join(params) + ", long n) {\n"
            + "\n".join(body) + "\n}\n")


# --- reductions --------------------------------------------------------------------------------
_COMBINE = {
    "sum": ("a + b", "0"),
    "prod": ("a * b", "1"),
    "max": ("((a >= b || isnan(a)) ? a : b)", "{lo}"),
    "min": ("((a <= b || isnan(a)) ? a : b)", "{hi}"),
}
_COMBINE_INT = {"max": "(a >= b ? a : b)", "min": "(a <= b ? a : b)"}


def reduction(kind: str, in_dt: str, out_dt: str, local: int) -> str:
    """Kernel ``k``: one work-group per output element (row ``g / P``, chunk ``g % P``).

    Element (m, k) of the input is at ``x_o + m*sm + k*sk``; the group reduces k in
    ``[p*C, min(K, p*C + C))`` with a strided loop, then a tree in local memory.
    ``argmax``/``argmin`` keep (value, index) pairs; ties and NaNs pick the first index.
    """
    ct = CTYPES[in_dt]
    T = ct.compute if kind not in ("sum", "prod") else CTYPES[out_dt].compute
    head = (preamble([in_dt, out_dt]) + f"#define L {local}\n__kernel __attribute__((reqd_work_group_size(L, 1, 1)))\n"
            f"void k(__global {CTYPES[out_dt].storage}* out, long out_o, __global const {ct.storage}* x, long x_o,\n"
            "       long K, long sm, long sk, long P, long C) {\n"
            "  long g = get_group_id(0); int l = get_local_id(0);\n"
            "  long m = g / P, k0 = (g % P) * C, k1 = min(K, k0 + C);\n"
            "  __global const " + ct.storage + "* xp = x;\n  long base = x_o + m * sm;\n")
    if kind in ("argmax", "argmin"):
        cmp = ">" if kind == "argmax" else "<"
        nan = "isnan(v) && !isnan(best)" if ct.kind == "f" else "0"
        keep = "isnan(best)" if ct.kind == "f" else "0"
        better = (f"inline int better({T} v, long vi, {T} best, long bi) {{\n"
                  f"  if (bi < 0) return 1; if (vi < 0) return 0;\n"
                  f"  if ({nan}) return 1; if ({keep}) return {'isnan(v) && vi < bi' if ct.kind == 'f' else '0'};\n"
                  f"  if (v {cmp} best) return 1; if (v == best) return vi < bi; return 0; }}\n")
        body = (f"  {T} best = 0; long bi = -1;\n"
                f"  for (long kk = k0 + l; kk < k1; kk += L) {{ {T} v = {load(in_dt, 'xp', 'base + kk * sk')};\n"
                "    if (better(v, kk, best, bi)) { best = v; bi = kk; } }\n"
                f"  __local {T} sv[L]; __local long si[L]; sv[l] = best; si[l] = bi;\n"
                "  barrier(CLK_LOCAL_MEM_FENCE);\n"
                "  for (int s = L / 2; s > 0; s >>= 1) {\n"
                "    if (l < s && better(sv[l + s], si[l + s], sv[l], si[l])) { sv[l] = sv[l + s]; si[l] = si[l + s]; }\n"
                "    barrier(CLK_LOCAL_MEM_FENCE); }\n"
                f"  if (l == 0) {store(out_dt, 'out', 'out_o + g', 'si[0]')}\n}}\n")
        return head.replace("__kernel", better + "__kernel", 1) + body
    comb, ident = _COMBINE[kind]
    if ct.kind != "f" and kind in _COMBINE_INT:
        comb = _COMBINE_INT[kind]
    ident = ident.format(lo=ct.lo, hi=ct.hi)
    fn = f"inline {T} comb({T} a, {T} b) {{ return ({T})({comb}); }}\n"
    body = (f"  {T} acc = ({T})({ident});\n"
            f"  for (long kk = k0 + l; kk < k1; kk += L) acc = comb(acc, ({T}){load(in_dt, 'xp', 'base + kk * sk')});\n"
            f"  __local {T} sh[L]; sh[l] = acc;\n  barrier(CLK_LOCAL_MEM_FENCE);\n"
            "  for (int s = L / 2; s > 0; s >>= 1) {\n    if (l < s) sh[l] = comb(sh[l], sh[l + s]);\n"
            "    barrier(CLK_LOCAL_MEM_FENCE); }\n"
            f"  if (l == 0) {store(out_dt, 'out', 'out_o + g', 'sh[0]')}\n}}\n")
    return head.replace("__kernel", fn + "__kernel", 1) + body


# --- matmul ------------------------------------------------------------------------------------
def matmul(dt: str, tile: int) -> str:
    """Tiled matmul ``c[z] = a[z] @ b[z]`` (M×K @ K×N), tiles of ``tile``² in local memory.

    Global size (ceil(N/TS)*TS, ceil(M/TS)*TS, batch); ``sa``/``sb`` are batch strides (0 broadcasts).
    """
    ct = CTYPES[dt]
    T = ct.compute
    return (preamble([dt]) + f"#define TS {tile}\n"
            "__kernel __attribute__((reqd_work_group_size(TS, TS, 1)))\n"
            f"void k(__global {ct.storage}* c, long c_o, __global const {ct.storage}* a, long a_o,\n"
            f"       __global const {ct.storage}* b, long b_o, long M, long N, long K, long sa, long sb) {{\n"
            "  int lc = get_local_id(0), lr = get_local_id(1);\n"
            "  long col = get_global_id(0), row = get_global_id(1), z = get_global_id(2);\n"
            f"  __local {T} As[TS][TS + 1]; __local {T} Bs[TS][TS + 1];\n"
            f"  {T} acc = 0; long ab = a_o + z * sa, bb = b_o + z * sb;\n"
            "  for (long t = 0; t < K; t += TS) {\n"
            f"    As[lr][lc] = (row < M && t + lc < K) ? {load(dt, 'a', 'ab + row * K + t + lc')} : ({T})0;\n"
            f"    Bs[lr][lc] = (t + lr < K && col < N) ? {load(dt, 'b', 'bb + (t + lr) * N + col')} : ({T})0;\n"
            "    barrier(CLK_LOCAL_MEM_FENCE);\n"
            f"    for (int kk = 0; kk < TS; kk++) acc = ({T})(acc + As[lr][kk] * Bs[kk][lc]);\n"
            "    barrier(CLK_LOCAL_MEM_FENCE);\n  }\n"
            f"  if (row < M && col < N) {store(dt, 'c', 'c_o + z * M * N + row * N + col', 'acc')}\n}}\n")


# --- take / arange -----------------------------------------------------------------------------
def take(dt: str, idx_dt: str) -> str:
    """``out[p, j, q] = x[p, idx[j] (negative: + n), q]``; an out-of-range index sets ``*bad``.

    ``dt`` is a bit-copy dtype (uint8/16/32/64 of the element's size)."""
    ct, it = CTYPES[dt], CTYPES[idx_dt]
    return (f"__kernel void k(__global {ct.storage}* out, long out_o, __global const {ct.storage}* x,"
            f" long x_o, __global const {it.storage}* idx, long idx_o, __global int* bad,\n"
            "       long n, long nidx, long post, long total) {\n"
            "  long i = get_global_id(0); if (i >= total) return;\n"
            "  long q = i % post, j = (i / post) % nidx, p = i / (post * nidx);\n"
            "  long kk = (long)idx[idx_o + j]; if (kk < 0) kk += n;\n"
            "  if (kk < 0 || kk >= n) { *bad = 1; kk = 0; }\n"
            "  out[out_o + i] = x[x_o + (p * n + kk) * post + q];\n}\n")


def arange(dt: str, via: str) -> str:
    """``out[i] = start + step * i`` computed in ``via`` (double, float or long), then stored."""
    return (preamble([dt, "float64" if via == "double" else dt])
            + f"__kernel void k(__global {CTYPES[dt].storage}* out, long out_o, {via} start, {via} step, long n) {{\n"
            f"  long i = get_global_id(0); if (i >= n) return;\n"
            f"  {store(dt, 'out', 'out_o + i', f'start + step * ({via})i', via)}\n}}\n")
