"""OpenCL argsort: a stable rank by counting, one work-item per element.

Element ``j`` of a row goes to position ``#{k : x[k] before x[j]}``, where ``a`` (at ``k``) is
before ``b`` (at ``j``) when it sorts strictly before it or equals it and ``k < j`` (stable).
NaNs sort last ascending and first descending, and equal each other, as on the cpu. O(n^2) work
per row of n, in parallel over every element: meant for the short rows of the data-dependent
ops and moderate sorts. ``sort`` and the set functions then run on the device through their
decompositions (``take_along_axis`` / ``take``).
"""
from __future__ import annotations

from . import codegen
from .kernels import LOCAL, _launch, _off, _prod


def _argsort_source(name: str, dt: str, order: str) -> str:
    """``("argsort", dtype, "asc" | "desc")``: out[p, rank, q] = j for x[p, j, q] (rows of n, stride post)."""
    ct = codegen.CTYPES[dt]
    T = ct.compute
    if ct.kind == "f":
        def less(u, v):
            return f"(!isnan({u}) && (isnan({v}) || {u} < {v}))"
        eq = "(a == b || (isnan(a) && isnan(b)))"
    else:
        def less(u, v):
            return f"({u} < {v})"
        eq = "(a == b)"
    strict = less("a", "b") if order == "asc" else less("b", "a")
    return (f"__kernel void {name}(__global long* out, long out_o, __global const {ct.storage}* x, long x_o,\n"
            "       long n, long post, long total) {\n"
            "  long i = get_global_id(0); if (i >= total) return;\n"
            "  long q = i % post, j = (i / post) % n, p = i / (post * n), base = x_o + p * n * post + q;\n"
            f"  {T} b = {codegen.load(dt, 'x', 'base + j * post')};\n"
            "  long r = 0;\n"
            "  for (long k = 0; k < n; k++) {\n"
            f"    {T} a = {codegen.load(dt, 'x', 'base + k * post')};\n"
            f"    r += ({strict} || ({eq} && k < j)) ? 1 : 0;\n"
            "  }\n"
            "  out[out_o + (p * n + r) * post + q] = j;\n}\n")


codegen.SOURCES["argsort"] = _argsort_source


def argsort(ctx, out, x, axis, descending, stable):
    if out.size == 0:
        return
    args = [out.handle, _off(out), x.handle, _off(x), x.shape[axis], _prod(x.shape[axis + 1:]), out.size]
    spec = ("argsort", x.dtype.name, "desc" if descending else "asc")
    _launch(ctx, spec, (-(-out.size // LOCAL) * LOCAL,), (LOCAL,), args)


def register(kernels, runtime) -> None:
    kernels.register("argsort", argsort, dtypes=[d for d, c in codegen.CTYPES.items() if c.kind in "biuf"], out=True)
