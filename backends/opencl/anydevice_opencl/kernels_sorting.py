"""OpenCL argsort, stable, NaNs last ascending and first descending (and equal to each other),
as on the cpu. Element ``a`` (at ``k``) is before ``b`` (at ``j``) when it sorts strictly before
it, or equals it and ``k < j``: a total order, so any sorting network gives the stable result.

- rows up to :data:`RANK_MAX`: a rank by counting, one work-item per element (element ``j`` goes
  to ``#{k : x[k] before x[j]}``), one launch;
- longer rows: a bitonic sort of index arrays padded to a power of two (padding sorts last),
  ``log2(m) (log2(m) + 1) / 2`` launches for rows of ``m``, then one that writes the result.

``sort`` and the set functions then run on the device through their decompositions.
"""
from __future__ import annotations

from . import codegen
from .kernels import _DTYPES, LOCAL, _launch, _off, _prod

#: Longest rows sorted by counting (O(n^2) work per row); longer ones take the bitonic network.
RANK_MAX = 2048


def _order(dt: str, order: str) -> tuple:
    """C expressions ``strict(u, v)`` (u sorts strictly before v) and ``eq`` (a equals b)."""
    if codegen.CTYPES[dt].kind == "f":
        def less(u, v):
            return f"(!isnan({u}) && (isnan({v}) || {u} < {v}))"
        eq = "(a == b || (isnan(a) && isnan(b)))"
    else:
        def less(u, v):
            return f"({u} < {v})"
        eq = "(a == b)"
    return (less if order == "asc" else lambda u, v: less(v, u)), eq


def _argsort_source(name: str, dt: str, order: str) -> str:
    """``("argsort", dtype, "asc" | "desc")``: out[p, rank, q] = j for x[p, j, q] (rows of n, stride post)."""
    ct = codegen.CTYPES[dt]
    strict, eq = _order(dt, order)
    return (f"__kernel void {name}(__global long* out, long out_o, __global const {ct.storage}* x, long x_o,\n"
            "       long n, long post, long total) {\n"
            "  long i = get_global_id(0); if (i >= total) return;\n"
            "  long q = i % post, j = (i / post) % n, p = i / (post * n), base = x_o + p * n * post + q;\n"
            f"  {ct.compute} b = {codegen.load(dt, 'x', 'base + j * post')};\n"
            "  long r = 0;\n"
            "  for (long k = 0; k < n; k++) {\n"
            f"    {ct.compute} a = {codegen.load(dt, 'x', 'base + k * post')};\n"
            f"    r += ({strict('a', 'b')} || ({eq} && k < j)) ? 1 : 0;\n"
            "  }\n"
            "  out[out_o + (p * n + r) * post + q] = j;\n}\n")


def _bitonic_source(name: str, dt: str, order: str) -> str:
    """``("bitonic", dtype, "asc" | "desc")``, one kernel in three modes over index rows of npow:
    0 fills them with 0..npow-1, 1 runs the compare-exchange step (k, j) of the network, 2 writes
    the first n of each row to out[p, r, q]."""
    ct = codegen.CTYPES[dt]
    strict, eq = _order(dt, order)
    return (f"__kernel void {name}(long mode, __global long* out, long out_o, __global long* idx, long idx_o,\n"
            f"       __global const {ct.storage}* x, long x_o, long n, long post, long npow, long k, long j, long total) {{\n"
            "  long g = get_global_id(0); if (g >= total) return;\n"
            "  if (mode == 0) { idx[idx_o + g] = g % npow; return; }\n"
            "  if (mode == 2) {\n"
            "    long r = g % n, row = g / n;\n"
            "    out[out_o + ((row / post) * n + r) * post + row % post] = idx[idx_o + row * npow + r]; return;\n  }\n"
            "  long i = g % npow, row = g / npow, l = i ^ j;\n"
            "  if (l <= i) return;\n"
            "  long base = x_o + (row / post) * n * post + row % post, pi = idx_o + row * npow + i, pl = idx_o + row * npow + l;\n"
            "  long ia = idx[pi], ib = idx[pl];\n"
            "  int after;  /* element ia sorts after element ib */\n"
            "  if (ia >= n || ib >= n) after = ia >= n && (ib < n || ia > ib);\n"
            "  else {\n"
            f"    {ct.compute} a = {codegen.load(dt, 'x', 'base + ia * post')}, b = {codegen.load(dt, 'x', 'base + ib * post')};\n"
            f"    after = {strict('b', 'a')} || ({eq} && ib < ia);\n"
            "  }\n"
            "  if (((i & k) == 0) == (after != 0)) { idx[pi] = ib; idx[pl] = ia; }\n}\n")


codegen.SOURCES["argsort"] = _argsort_source
codegen.SOURCES["bitonic"] = _bitonic_source


def _groups(n: int) -> tuple:
    return (-(-n // LOCAL) * LOCAL,)


def argsort(ctx, out, x, axis, descending, stable):
    if out.size == 0:
        return
    n, post, order = x.shape[axis], _prod(x.shape[axis + 1:]), "desc" if descending else "asc"
    if n <= RANK_MAX:
        _launch(ctx, ("argsort", x.dtype.name, order), _groups(out.size), (LOCAL,),
                [out.handle, _off(out), x.handle, _off(x), n, post, out.size])
        return
    rows, npow = out.size // n, 1 << (n - 1).bit_length()
    idx = ctx.empty((rows * npow,), _DTYPES["int64"])
    spec = ("bitonic", x.dtype.name, order)

    def step(mode, k, j, total):
        _launch(ctx, spec, _groups(total), (LOCAL,), [mode, out.handle, _off(out), idx.handle, _off(idx), x.handle,
                                                      _off(x), n, post, npow, k, j, total])

    step(0, 0, 0, rows * npow)
    k = 2
    while k <= npow:
        j = k // 2
        while j:
            step(1, k, j, rows * npow)
            j //= 2
        k *= 2
    step(2, 0, 0, rows * n)


def register(kernels, runtime) -> None:
    kernels.register("argsort", argsort, dtypes=[d for d, c in codegen.CTYPES.items() if c.kind in "biuf"], out=True)
