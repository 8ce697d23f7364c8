"""The OpenCL graph compiler (hook ``anydevice_compile_graph``): each chain of element-wise nodes
of a captured graph (:func:`anydevice.runtime.fusion.chains`: broadcasts, casts, Python scalars,
and an optional trailing ``sum``/``prod``/``max``/``min``/``mean``) becomes ONE generated kernel.

The expressions are those of the eager kernels (:data:`codegen.EXPR`), so each intermediate is
computed, and converted to its dtype, exactly as an eager launch would store it; only reductions
may differ in the last bits (summation order). Sizes and strides are kernel arguments, so the
source depends only on the chain's structure (ops, dtypes, rank, which inputs broadcast along
which dims, the reduced dims, the reduction's layout); a kernel is named by a digest of its
source and kept in the runtime's program cache, so every graph, variant and shape with that
structure reuses one build, and the kernels a graph still lacks are built in one program at its
first run (PoCL's ~0.1-0.4 s per build paid once; PoCL's own cache keeps builds across
processes). float16/bfloat16 (eager rounds them after every op) and complex values are left to
the planned executor, as are nodes without an expression.
"""
from __future__ import annotations

import hashlib
import re

import numpy as np
import pyopencl as cl

from anydevice.runtime.fusion import chains, reduce_axes

from . import codegen
from . import kernels as _kernels
from . import kernels_optim as _optim
from .kernels import _bstrides, _cstrides
from .recording import Recorded
from .runtime import BUILD_OPTIONS, Launcher

DTYPES = frozenset(d for d, c in codegen.CTYPES.items() if c.kind in "biuf" and d not in ("float16", "bfloat16"))
LOCAL = 128  # work-items per group of an element-wise chain
RED_LOCAL = 64  # work-items per output element of a reduction over many elements
RED_SPLIT = 64  # ... when it has fewer output elements than this (else a work-item per output element)
#: adjacent output elements per work-item of a reduction that keeps the last dim (columns): the
#: work-item's inner loop along them reads contiguous memory, which PoCL vectorizes (a work-item per
#: column kept in step by a barrier per row ran 3-4x slower)
COLUMN_BLOCK = 32
_NAME = "@KERNEL@"  # the kernel's name in its source until the source is named by its digest
_ARG = re.compile(r"\bx(\d)\b")


# --- which nodes a chain may hold --------------------------------------------------------------
def _expr_op(node) -> str | None:
    """The :data:`codegen.EXPR` entry computing ``node`` (``copy`` for a cast), or None."""
    name = node.op.name
    if name == "astype":
        return "copy"
    if name == "broadcast_to":
        return "copy"
    if name == "gelu":
        return "gelu_tanh" if node.attrs.get("approximate", "none") == "tanh" else "gelu"
    if node.attrs and set(node.attrs) - {"device"}:
        return None
    return name if name in codegen.EXPR else None


def _signature(node, fp64: bool):
    """``(input dtypes, output dtype)`` of the expression computing ``node``, or None."""
    op = _expr_op(node)
    out = node.outputs[0].dtype.name
    if op is None or out not in DTYPES or not fp64 and out in codegen.FP64_DTYPES:
        return None
    vals = [x for x in node.inputs if hasattr(x, "dtype")]
    if any(v.dtype.name not in DTYPES for v in vals):
        return None
    if op == "copy":
        src = node.inputs[0].dtype.name
        return ((src,), out)
    if op == "where":
        data = out
    else:
        c = node.compute
        data = (c[-1] if isinstance(c, tuple) else c).name if c is not None else out
    if data not in DTYPES or codegen.expr_for(op, data) is None:
        return None
    ins, o = codegen.ew_signature(op, data)
    return (ins, o) if o == out and len(ins) == len(node.inputs) else None


def _accept(fp64: bool):
    return lambda node: _signature(node, fp64) is not None


def _accept_reduction(fp64: bool):
    def ok(node):
        out, src = node.outputs[0].dtype.name, node.inputs[0].dtype.name
        c = node.compute
        comp = (c[-1] if isinstance(c, tuple) else c).name if c is not None else src
        if out not in DTYPES or src not in DTYPES or comp not in DTYPES or not fp64 and "float64" in (out, comp):
            return False
        return node.op.name != "mean" or codegen.CTYPES[out].kind == "f"
    return ok


# --- source generation -------------------------------------------------------------------------
def _literal(value, dt: str, adopted: str) -> str:
    """A Python scalar as a C literal of dtype ``dt``, rounded first to the dtype it adopts."""
    with np.errstate(all="ignore"):
        v = np.asarray(value, dtype=np.dtype(adopted) if adopted != "bool" else np.bool_).astype(
            np.bool_ if dt == "bool" else np.dtype(dt))
    ct = codegen.CTYPES[dt]
    if ct.kind == "b":
        return "1" if v else "0"
    if ct.kind == "f":
        f = float(v)
        if f != f:
            return "NAN"
        if f in (float("inf"), float("-inf")):
            return "INFINITY" if f > 0 else "-INFINITY"
        return f"({ct.compute}){f.hex()}" + ("f" if dt == "float32" else "")
    i = int(v)
    if ct.kind == "i" and i == -(1 << (ct.bits - 1)):
        return f"({ct.storage})({i + 1} - 1)"
    return f"({ct.storage}){i}{'UL' if ct.kind == 'u' else 'L'}"


def _convert(dt: str, e: str) -> str:
    """``e`` converted to dtype ``dt`` as an eager kernel's store would (see :func:`codegen.store`)."""
    if dt == "bool":
        return f"(uchar)(({e}) != 0)"
    if dt in ("float16", "bfloat16") or codegen.CTYPES[dt].kind == "c":
        return f"({codegen.CTYPES[dt].storage})({e})"
    return codegen.to_storage(dt, e)


def _index(coords, strides, arg) -> str:
    """The offset of coordinates ``coords`` with the nonzero ``strides``, each a kernel argument
    named by ``arg(d, stride)``, but the last: 1 in every C-contiguous layout, broadcast or not,
    and written as 1 so that the compiler sees consecutive work-items read consecutive elements."""
    last = len(coords) - 1
    terms = [coords[d] if d == last else f"{coords[d]} * {arg(d, s)}" for d, s in enumerate(strides) if s]
    return " + ".join(terms) or "0"


class Program:
    """The source of one chain's kernel and how to launch it. Sizes and strides are ``long``
    arguments (:attr:`scalars`, in order), so chains of one structure (ops, dtypes, rank, which
    inputs broadcast along which dims, reduced dims) share one source; the kernel is named by a
    digest of it."""

    def __init__(self, chain):
        self.chain = chain
        red = chain.reduction
        self.n = int(np.prod(chain.shape, dtype=np.int64)) if chain.shape else 1
        self.inputs = list(chain.inputs)
        self.outputs = list(chain.outputs)
        self.scalars: dict = {}  # argument name -> value
        self.grid = None  # (last dim, the one before, the product of the others) of a 3-d launch
        reads = {v.id for n in chain.elementwise + chain.reductions for v in n.input_values()}
        read = [v for v in self.inputs if v.id in reads]
        reduced = set(reduce_axes(red)) if red is not None else set()
        self.shape, strides, flags = _collapse(tuple(chain.shape), [_bstrides(v.shape, chain.shape) for v in read], reduced)
        self.strides = {v.id: st for v, st in zip(read, strides)}  # in the collapsed dims
        shape = self.shape
        if red is not None:
            axes = [d for d, f in enumerate(flags) if f]
            kept = [d for d in range(len(shape)) if d not in axes]
            self.m = int(np.prod([shape[d] for d in kept], dtype=np.int64)) if kept else 1
            self.k = int(np.prod([shape[d] for d in axes], dtype=np.int64)) if axes else 1
            # a work-group per output when there are few outputs to share a long reduction; else a work-item
            self.local = RED_LOCAL if self.k >= 4 * RED_LOCAL and self.m < RED_SPLIT else 1
            self.axes, self.kept = axes, kept
            self.columns = self.local == 1 and len(shape) - 1 not in axes  # the last dim is kept
        body = self._source()
        self.name = "fused_" + hashlib.sha256(body.encode()).hexdigest()[:20]
        self.source = body.replace(_NAME, self.name)

    def _arg(self, name: str, value: int) -> str:
        self.scalars[name] = int(value)
        return name

    def _coords(self, prefix: str, dims, shape, var: str, indent: str, sizes: str) -> list:
        """Statements splitting ``var`` into coordinates ``prefix{d}`` of ``dims`` (last fastest)."""
        out, dims = [], list(dims)
        for j, d in enumerate(reversed(dims)):
            if j == len(dims) - 1:
                out.append(f"{indent}long {prefix}{d} = {var};")
            else:
                s = self._arg(f"{sizes}{d}", shape[d])
                out.append(f"{indent}long {prefix}{d} = {var} % {s}; {var} /= {s};")
        return out

    # the per-element body: loads of the inputs it reads, one statement per node
    def _body(self, coords, lin, indent="  ", nodes=None, shape=None, names=None, tag="a",
              reads=()) -> tuple[list, list, dict]:
        """Statements computing ``nodes`` (default: the element-wise nodes before the reduction) at
        coordinates ``coords`` of ``shape`` (linear index ``lin``), and the stores of the values
        among them that leave the chain; ``tag`` names the stride arguments of this context."""
        shape = self.shape if shape is None else shape
        nodes = self.chain.elementwise if nodes is None else nodes
        names, lines = dict(names or {}), []
        index = {v.id: k for k, v in enumerate(self.inputs)}
        for node in list(nodes) + [None]:
            vals = list(reads) if node is None else node.input_values() if hasattr(node, "input_values") else ()
            for v in vals:
                k = index.get(v.id)
                if k is None or v.id in names:
                    continue
                dt = v.dtype.name
                st = self.strides[v.id] if tag == "a" else _bstrides(v.shape, shape)
                if st == _cstrides(shape):
                    idx = lin
                else:
                    idx = _index(coords, st, lambda d, s, k=k: self._arg(f"p{k}_{tag}{d}", s))
                names[v.id] = f"i{k}"
                lines.append(f"{indent}{codegen.CTYPES[dt].storage} i{k} = {codegen.load(dt, f'p{k}', f'p{k}_o + ' + idx)};")
            if node is None:
                break
            ins, out = _signature(node, True)
            args = []
            vals = [x for x in node.inputs if hasattr(x, "dtype")]
            adopted = next((v.dtype.name for v in vals if v.dtype.name != "bool"), vals[0].dtype.name if vals else out)
            for x, want in zip(node.inputs, ins):
                if hasattr(x, "dtype"):
                    e = names[x.id]
                    args.append(e if x.dtype.name == want else _convert(want, e))
                else:
                    args.append(_literal(x, want, adopted))
            op = _expr_op(node)
            expr = codegen.expr_for(op, ins[-1])
            expr = _ARG.sub(lambda m, a=args: f"({a[int(m.group(1))]})", expr)
            o = node.outputs[0]
            names[o.id] = f"v{o.id}"
            lines.append(f"{indent}{codegen.CTYPES[out].storage} v{o.id} = {_convert(out, expr)};")
        mine = {o.id for n in nodes for o in n.outputs}
        stores = [f"{indent}{codegen.store(o.dtype.name, f'q{j}', f'q{j}_o + {lin}', names[o.id])}"
                  for j, o in enumerate(self.outputs) if o.id in mine]
        return lines, stores, names

    def _params(self) -> str:
        ps = [f"__global {codegen.CTYPES[o.dtype.name].storage}* q{j}, long q{j}_o" for j, o in enumerate(self.outputs)]
        ps += [f"__global const {codegen.CTYPES[v.dtype.name].storage}* p{k}, long p{k}_o"
               for k, v in enumerate(self.inputs)]
        ps += [f"long {s}" for s in self.scalars]
        return ", ".join(ps)

    def _source(self) -> str:
        shape, nd = self.shape, len(self.shape)
        coords = [f"c{d}" for d in range(nd)]
        if self.chain.reduction is not None:
            return self._reduction_source(shape, coords)
        if nd >= 2 and any(st != _cstrides(shape) for st in self.strides.values()):
            return self._grid_source(shape, coords)
        n = self._arg("size_n", self.n)
        lines, stores, _ = self._body(coords, "i")
        head = [f"  long i = get_global_id(0); if (i >= {n}) return;"] + (["  long c0 = i;"] if nd == 1 else [])
        return f"__kernel void {_NAME}({self._params()}) {{\n" + "\n".join(head + lines + stores) + "\n}\n"

    def _grid_source(self, shape, coords) -> str:
        """A chain that reads some input broadcast: a 2-d or 3-d launch gives the coordinates of
        the last two dims (no division by a size that is not a constant); dims before them share
        the third (split by division when there are several)."""
        nd = len(shape)
        s1, s2 = self._arg(f"s{nd - 1}", shape[nd - 1]), self._arg(f"s{nd - 2}", shape[nd - 2])
        head = [f"  long c{nd - 1} = get_global_id(0); if (c{nd - 1} >= {s1}) return;",
                f"  long c{nd - 2} = get_global_id(1);"]
        row = f"c{nd - 2}"
        if nd > 2:
            head += ["  long r = get_global_id(2);"] + self._coords("c", range(nd - 2), shape, "r", "  ", "s")
            row = f"(get_global_id(2) * {s2} + c{nd - 2})"
        head.append(f"  long i = {row} * {s1} + c{nd - 1};")
        self.grid = (shape[-1], shape[-2], int(np.prod(shape[:-2], dtype=np.int64)))
        lines, stores, _ = self._body(coords, "i")
        return f"__kernel void {_NAME}({self._params()}) {{\n" + "\n".join(head + lines + stores) + "\n}\n"

    @staticmethod
    def _accumulator(red) -> tuple:
        """``(C type, combine expression over a and b, identity, accumulator dtype)`` of a reduction."""
        kind = "sum" if red.op.name == "mean" else red.op.name
        out_dt = red.outputs[0].dtype.name
        c = red.compute
        acc_dt = (c[-1] if isinstance(c, tuple) else c).name if c is not None else out_dt
        if kind in ("sum", "prod"):
            acc_dt = out_dt
        ct = codegen.CTYPES[acc_dt]
        comb, ident = codegen._COMBINE[kind]
        if ct.kind not in "f" and kind in codegen._COMBINE_INT:
            comb = codegen._COMBINE_INT[kind]
        return ct.compute, comb, ident.format(lo=ct.lo, hi=ct.hi), acc_dt

    def _reduction_source(self, shape, coords) -> str:
        """The chain's reductions (one, or several of the same axes: one accumulator each), then
        its epilogue at the result's coordinates."""
        reds, L = self.chain.reductions, self.local
        accs = [self._accumulator(r) for r in reds]
        m, k = self._arg("size_m", self.m), self._arg("size_k", self.k)
        init = [f"  {T} acc{j} = ({T})({ident});" for j, (T, _, ident, _) in enumerate(accs)]
        if L > 1:  # a work-group of L per output element, a tree over its partial results
            head = ["  long g = get_group_id(0); int l = get_local_id(0);"] + init + ["  long r = g;"]
            loop = f"  for (long kk = l; kk < {k}; kk += {L}) {{"
        elif self.columns:  # a work-item per COLUMN_BLOCK adjacent output elements, a row of them per step
            V = COLUMN_BLOCK
            head = [f"  long g0 = get_global_id(0) * {V}; if (g0 >= {m}) return;",
                    f"  int jn = {m} - g0 < {V} ? (int)({m} - g0) : {V};"]
            head += [f"  {T} av{j}[{V}]; for (int jj = 0; jj < {V}; jj++) av{j}[jj] = ({T})({ident});"
                     for j, (T, _, ident, _) in enumerate(accs)]
            loop = f"  for (long kk = 0; kk < {k}; kk++) {{"
        else:  # a work-item per output element
            head = [f"  long g = get_global_id(0); if (g >= {m}) return;"] + init + ["  long r = g;"]
            loop = f"  for (long kk = 0; kk < {k}; kk++) {{"
        ind = "      " if self.columns else "    "
        kept = self._coords("c", self.kept, shape, "r", ind, "s") if self.kept else []
        head += kept if not self.columns else []
        head += [loop, "    long s = kk;"] + self._coords("c", self.axes, shape, "s", "    ", "s")
        if self.columns:  # the inner loop runs along a row: contiguous, so the compiler vectorizes it
            head += ["    for (int jj = 0; jj < jn; jj++) {", "      long r = g0 + jj;"] + kept
            head += [f"      {T} acc{j} = av{j}[jj];" for j, (T, _, _, _) in enumerate(accs)]
        cs = _cstrides(shape)
        head.append(f"{ind}long i = {_index(coords, cs, lambda d, s: self._arg(f't{d}', s))};")
        lines, stores, names = self._body(coords, "i", ind, reads=[r.inputs[0] for r in reds])
        body = lines + stores
        for j, (red, (T, comb, _, acc_dt)) in enumerate(zip(reds, accs)):
            src = red.inputs[0]
            x = names[src.id] if src.dtype.name == acc_dt else _convert(acc_dt, names[src.id])
            body.append(f"{ind}{{ {T} a = acc{j}, b = ({T})({x}); acc{j} = ({T})({comb}); }}")
        if self.columns:
            body += [f"      av{j}[jj] = acc{j};" for j in range(len(accs))] + ["    }"]
        body.append("  }")
        tail = []
        if self.columns:  # the results, one output element after the other
            body += ["  for (int jj = 0; jj < jn; jj++) {", "  long g = g0 + jj, r = g;"]
            body += [f"  {T} acc{j} = av{j}[jj];" for j, (T, _, _, _) in enumerate(accs)]
        if L > 1:
            for j, (T, comb, _, _) in enumerate(accs):
                tail += [f"  __local {T} sh{j}[{L}]; sh{j}[l] = acc{j}; barrier(CLK_LOCAL_MEM_FENCE);",
                         f"  for (int w = {L} / 2; w > 0; w >>= 1) {{",
                         f"    if (l < w) {{ {T} a = sh{j}[l], b = sh{j}[l + w]; sh{j}[l] = ({T})({comb}); }}",
                         "    barrier(CLK_LOCAL_MEM_FENCE); }", f"  acc{j} = sh{j}[0];"]
            tail.append("  if (l != 0) return;")
        results = {}
        for j, (red, (T, _, _, _)) in enumerate(zip(reds, accs)):
            res = f"acc{j} / ({T}){k}" if red.op.name == "mean" else f"acc{j}"
            ro, out_dt = red.outputs[0], red.outputs[0].dtype.name
            results[ro.id] = f"v{ro.id}"
            tail.append(f"  {codegen.CTYPES[out_dt].storage} v{ro.id} = {_convert(out_dt, res)};")
            if ro in self.outputs:
                q = self.outputs.index(ro)
                tail.append(f"  {codegen.store(out_dt, f'q{q}', f'q{q}_o + g', f'v{ro.id}')}")
        if self.chain.epilogue:  # element-wise work on the results, at their coordinates
            rshape = tuple(reds[0].outputs[0].shape)
            ecoords = [f"e{d}" for d in range(len(rshape))]
            lines, stores, _ = self._body(ecoords, "g", "  ", self.chain.epilogue, rshape, results, "e")
            tail += ["  r = g;"] + self._coords("e", range(len(rshape)), rshape, "r", "  ", "es")
            tail += lines + stores
        if self.columns:
            tail.append("  }")
        attr = f"__attribute__((reqd_work_group_size({L}, 1, 1))) " if L > 1 else ""
        return (f"__kernel {attr}void {_NAME}({self._params()}) {{\n" + "\n".join(head + body + tail) + "\n}\n")

    def launch_size(self, cap: int) -> tuple:
        if self.chain.reduction is not None and self.local > 1:
            return (self.m * self.local,), (self.local,)
        if self.chain.reduction is not None and self.columns:
            return (-(-self.m // COLUMN_BLOCK),), (1,)
        local = min(LOCAL, cap)
        if self.grid is not None:  # the last dim padded to work-groups no wider than it needs
            last, rows, rest = self.grid
            local = min(local, 1 << (last - 1).bit_length())
            return (-(-last // local) * local, rows, rest), (local, 1, 1)
        n = self.m if self.chain.reduction is not None else self.n
        return (-(-n // local) * local,), (local,)


def _collapse(shape, strides, reduced) -> tuple:
    """``(shape, strides, reduced flags)`` with dims of size 1 dropped and adjacent dims merged
    where every stride list runs on across them and both are reduced or both kept: chains that
    differ only there (a sum over axes (1, 2) of (2, 3, 4), over axis 1 of (2, 12)) share a source."""
    out, sts, flags, last = [], [[] for _ in strides], [], None
    for d, size in enumerate(shape):
        if size == 1:
            continue
        r = d in reduced
        if out and flags[-1] == r and all(st[last] == st[d] * size for st in strides):
            out[-1] *= size
            for j, st in enumerate(strides):
                sts[j][-1] = st[d]
        else:
            out.append(size)
            flags.append(r)
            for j, st in enumerate(strides):
                sts[j].append(st[d])
        last = d
    return tuple(out), sts, flags


def _off(a) -> int:
    return a.byte_offset // a.dtype.itemsize


class FusedKernel:
    """``executable(ctx, buffers) -> buffers`` of one chain: allocates the outputs, one launch.
    The kernel is built at the first run (on the device that runs it)."""

    def __init__(self, program: Program, built):
        self.program, self.built = program, built
        self.launcher = self.gsize = self.lsize = None
        self.outs = [(tuple(o.shape), o.dtype) for o in program.outputs]
        self.scalars = list(program.scalars.values())
        self.__name__ = program.name

    def __call__(self, ctx, buffers):
        rt = ctx.runtime
        if self.launcher is None:
            self.gsize, self.lsize = self.program.launch_size(rt.devices[ctx.index].max_work_group_size)
            self.launcher = Launcher(cl.Kernel(self.built(ctx, self.program.name), self.program.name))
        outs = [ctx.empty(s, d) for s, d in self.outs]
        args = []
        for o in outs:
            args += [o.handle, _off(o)]
        for b in buffers:
            args += [b.handle, _off(b)]
        self.launcher(rt.queue(ctx.index, ctx.stream), self.gsize, self.lsize, args + self.scalars)
        return outs


def _builder(runtime, programs: list):
    """``built(ctx, name) -> cl.Program`` holding kernel ``name``: the first call on a device
    builds, in ONE program, every kernel of ``programs`` the device does not hold yet (kernels
    are kept in the runtime's program cache by name, i.e. by source: a chain of the same structure
    in another graph or variant, at any shape, reuses the build; PoCL's own cache keeps it across
    processes, the source being the same)."""
    cache = runtime.programs

    def built(ctx, name):
        key = (ctx.index, ("fused", name))
        prg = cache.programs.get(key)
        if prg is not None:
            return prg
        with cache._lock:
            todo = {p.name: p.source for p in programs if (ctx.index, ("fused", p.name)) not in cache.programs}
            if todo:
                exprs = " ".join(todo.values())
                helpers = [codegen._helpers(exprs, t) for t in sorted({c.compute for c in codegen.CTYPES.values()})]
                head = ["#pragma OPENCL EXTENSION cl_khr_fp64 : enable"] if runtime.has_fp64(ctx.index) else []
                head.append("#pragma OPENCL FP_CONTRACT OFF")  # as separate launches: no fused multiply-add
                src = "\n".join(head + [h for h in helpers if h] + [todo[n] for n in sorted(todo)])
                prg = cache._program(runtime, ctx.index, src, BUILD_OPTIONS, ctx.device)
                for n in todo:
                    cache.programs[(ctx.index, ("fused", n))] = prg
        return cache.programs[key]

    return built


def _boundary(graph, ids) -> tuple[dict, list]:
    """``(position of each input value's id among the claim's inputs, the claim's outputs)``."""
    ins, outs = graph.boundary(ids)
    return {v.id: j for j, v in enumerate(ins)}, outs


class TransposedMatmul:
    """``matmul(matrix_transpose(x), y)`` of 2-D float32 values as one launch that reads x by
    columns (:func:`kernels.matmul_transposed_a`) instead of a transposing copy and a matmul."""

    def __init__(self, slots, shape, dtype):
        self.slots, self.shape, self.dtype = slots, shape, dtype  # slots: (x, y) positions in the inputs
        self.__name__ = "matmul_transposed_a"

    def __call__(self, ctx, buffers):
        out = ctx.empty(self.shape, self.dtype)
        _kernels.matmul_transposed_a(ctx, out, buffers[self.slots[0]], buffers[self.slots[1]])
        return [out]


def _transposed_matmuls(graph, taken: set) -> list:
    """``(node ids, TransposedMatmul)`` for each float32 ``matmul(matrix_transpose(x), y)`` of 2-D
    values whose transpose nothing else reads."""
    out = []
    for node in graph.nodes:
        if node.op.name != "matmul" or node.id in taken:
            continue
        a, b = node.inputs[0], node.inputs[1]
        t = a.producer
        if t is None or t.id in taken or t.op.name not in ("matrix_transpose", "permute_dims"):
            continue
        x = t.inputs[0]
        if t.op.name == "permute_dims" and tuple(t.attrs.get("axes", ())) != (1, 0):
            continue
        vals = (x, a, b, node.outputs[0])
        if any(len(v.shape) != 2 or v.dtype.name != "float32" for v in vals):
            continue
        if graph.escapes(a) or [u.id for u in graph.users(a)] != [node.id]:
            continue
        ids = [t.id, node.id]
        pos, _ = _boundary(graph, ids)
        out.append((ids, TransposedMatmul((pos[x.id], pos[b.id]), tuple(node.outputs[0].shape),
                                          node.outputs[0].dtype)))
        taken.update(ids)
    return out


class LinearRelu:
    """``relu(linear(x, w, b))`` of float32 values as the packed matmul storing the relu, and the
    linear result too where something else reads it (:func:`kernels.linear` with ``relu_out``)."""

    def __init__(self, slots, outs, keep):
        # slots: (x, w, b) in the inputs; outs: (shape, dtype) of linear, relu; keep: the positions
        # in outs of the results the claim returns, in order
        self.slots, self.outs, self.keep = slots, outs, keep
        self.__name__ = "linear_relu"

    def __call__(self, ctx, buffers):
        if 0 in self.keep:  # the linear result is read beyond the relu: both are stored
            res = [ctx.empty(s, d) for s, d in self.outs]
            _kernels.linear(ctx, res[0], *(buffers[i] for i in self.slots), relu_out=res[1])
        else:  # only the relu (its gradient reads the relu's output)
            res = [None, ctx.empty(*self.outs[1])]
            _kernels.linear(ctx, None, *(buffers[i] for i in self.slots), relu_out=res[1])
        return [res[j] for j in self.keep]


def _linear_relus(graph, taken: set) -> list:
    """``(node ids, LinearRelu)`` for each float32 linear a relu reads."""
    out = []
    for node in graph.nodes:
        if node.op.name != "linear" or node.id in taken or len(node.inputs) != 3:
            continue
        y = node.outputs[0]
        if any(not hasattr(v, "dtype") or v.dtype.name != "float32" for v in (*node.inputs, y)):
            continue
        relu = next((u for u in graph.users(y) if u.op.name == "relu" and u.id not in taken), None)
        if relu is None or relu.outputs[0].dtype.name != "float32":
            continue
        ids = [node.id, relu.id]
        pos, outs = _boundary(graph, ids)
        where = {y.id: 0, relu.outputs[0].id: 1}
        out.append((ids, LinearRelu([pos[v.id] for v in node.inputs],
                                    [(tuple(v.shape), v.dtype) for v in (y, relu.outputs[0])],
                                    [where[o.id] for o in outs])))
        taken.update(ids)
    return out


class LossAndGradient:
    """``cross_entropy(x, y)`` and ``cross_entropy_grad(x, y, g)`` of the same logits and labels
    (a training step's loss and the start of its backward pass) as one row launch: one max and
    one sum of exps per row serve both (:func:`kernels.cross_entropy` with ``grad``); with the
    labels' check ``index_in_range(y, low=0, high=classes)``, its flag comes from the loss's total
    launch instead of a fill and a launch of its own."""

    def __init__(self, slots, reduction, outs, keep):
        # slots: (x, y, g) in the inputs; outs: (shape, dtype) of loss, gradient[, flag]; keep:
        # the positions in outs of the results the claim returns, in order
        self.slots, self.reduction, self.outs, self.keep = slots, reduction, outs, keep
        self.__name__ = "cross_entropy_and_grad"

    def __call__(self, ctx, buffers):
        res = [ctx.empty(s, d) for s, d in self.outs]
        x, y, g = (buffers[i] for i in self.slots)
        _kernels.cross_entropy(ctx, res[0], x, y, self.reduction, grad=g, grad_out=res[1],
                               flag=res[2] if len(res) > 2 else None)
        return [res[j] for j in self.keep]


def _loss_and_gradients(graph, taken: set) -> list:
    """``(node ids, LossAndGradient)`` for each cross_entropy whose logits and labels a
    cross_entropy_grad of the same reduction also reads, its upstream gradient an input or a
    constant (so it cannot depend on the loss), with the index_in_range check of those labels
    against the classes where the graph has one."""
    out = []
    grads = [n for n in graph.nodes if n.op.name == "cross_entropy_grad" and n.id not in taken]
    for ce in graph.nodes:
        if ce.op.name != "cross_entropy" or ce.id in taken or ce.inputs[0].dtype.name not in codegen.SOFTMAX_DTYPES:
            continue
        x, y = ce.inputs[0], ce.inputs[1]
        for gn in grads:
            g = gn.inputs[2]
            if (gn.id in taken or gn.inputs[0].id != x.id or gn.inputs[1].id != y.id or g.producer is not None
                    or gn.attrs.get("reduction") != ce.attrs.get("reduction")):
                continue
            mine = [ce.outputs[0], gn.outputs[0]]
            chk = next((n for n in graph.nodes if n.op.name == "index_in_range" and n.id not in taken
                        and n.inputs[0].id == y.id and n.attrs.get("low") == 0
                        and n.attrs.get("high") == x.shape[-1]), None)
            if chk is not None:
                mine.append(chk.outputs[0])
            ids = ([chk.id] if chk is not None else []) + [ce.id, gn.id]
            pos, outs = _boundary(graph, ids)
            where = {v.id: j for j, v in enumerate(mine)}
            if not outs or any(o.id not in where for o in outs):
                continue
            out.append((ids, LossAndGradient((pos[x.id], pos[y.id], pos[g.id]), ce.attrs.get("reduction", "mean"),
                                             [(tuple(v.shape), v.dtype) for v in mine], [where[o.id] for o in outs])))
            taken.update(ids)
            break
    return out


class MultiAdam:
    """The ``adam_update`` nodes of one graph with the same options and parameter dtype (a
    training step's optimizer step) as two launches for all of them
    (:func:`kernels_optim.adam_multi`) instead of one or two per parameter."""

    def __init__(self, slots, outs, keep, attrs):
        # slots[t]: positions of node t's six inputs in the claim's inputs; outs[t]: its five
        # (shape, dtype); keep: (t, k) of the results the claim returns, in order
        self.slots, self.outs, self.keep, self.attrs = slots, outs, keep, attrs
        self.specs, self.per = [o for os in outs for o in os], len(outs[0])
        self.__name__ = f"adam_update x{len(slots)}"

    def __call__(self, ctx, buffers):
        # one allocation for every result: a step's parameters and states are replaced together
        flat, k = ctx.empty_many(self.specs), self.per
        res = [flat[t * k:(t + 1) * k] for t in range(len(self.outs))]
        _optim.adam_multi(ctx, res, [[buffers[j] for j in sl] for sl in self.slots], **self.attrs)
        return [res[t][k] for t, k in self.keep]


def _ancestors(node) -> set:
    """Ids of the nodes ``node`` depends on."""
    seen, todo = set(), [node]
    while todo:
        for v in todo.pop().input_values():
            p = v.producer
            if p is not None and p.id not in seen:
                seen.add(p.id)
                todo.append(p)
    return seen


def _multi_adams(graph, taken: set, fp64: bool) -> list:
    """``(node ids, MultiAdam)`` for each set of two or more ``adam_update`` nodes of one device,
    parameter dtype and options, none depending on another."""
    groups: dict = {}
    for node in graph.nodes:
        if node.op.name != "adam_update" or node.id in taken:
            continue
        p = node.inputs[0]
        if p.dtype.name not in ("float32", "float64") or (p.dtype.name == "float64" and not fp64):
            continue
        key = (p.device, p.dtype.name, tuple(sorted(node.attrs.items())))
        groups.setdefault(key, []).append(node)
    out = []
    for nodes in groups.values():
        picked: list = []
        for node in nodes:  # graph order: a later node is never an ancestor of an earlier one
            if not {n.id for n in picked} & _ancestors(node):
                picked.append(node)
        if len(picked) < 2:
            continue
        ids = [n.id for n in picked]
        pos, outs = _boundary(graph, ids)
        where = {o.id: (t, k) for t, n in enumerate(picked) for k, o in enumerate(n.outputs)}
        out.append((ids, MultiAdam([[pos[v.id] for v in n.inputs] for n in picked],
                                   [[(tuple(o.shape), o.dtype) for o in n.outputs] for n in picked],
                                   [where[o.id] for o in outs], dict(picked[0].attrs))))
        taken.update(ids)
    return out


def compile_graph(device_type, runtime, graph, kernels):
    """The claims of one graph: its fusible chains, each a :class:`FusedKernel`, its
    transposed-operand matmuls (:class:`TransposedMatmul`) and linear-relu pairs
    (:class:`LinearRelu`) where the device runs the packed matmul, its loss-and-gradient pairs
    (:class:`LossAndGradient`) and its optimizer steps (:class:`MultiAdam`); None if none. (A
    float64 value exists only on a device with cl_khr_fp64, so the graph's dtypes tell.)"""
    packed = all(_kernels.takes_packed(runtime, i) for i in range(runtime.device_count()))
    taken: set = set()
    first = _linear_relus(graph, taken) if packed else []  # before chains, which would take the relu
    ew, red = _accept(True), _accept_reduction(True)
    found = chains(graph, lambda n: n.id not in taken and ew(n), lambda n: n.id not in taken and red(n),
                   device_type=device_type, epilogue=True, siblings=True)
    programs = [Program(ch) for ch in found]
    built = _builder(runtime, programs)
    claims = first + [(p.chain.ids, FusedKernel(p, built)) for p in programs]
    taken.update(i for ids, _ in claims for i in ids)
    if packed:
        claims += _transposed_matmuls(graph, taken)
    claims += _loss_and_gradients(graph, taken)
    fp64 = all(runtime.has_fp64(i) for i in range(runtime.device_count()))
    claims += _multi_adams(graph, taken, fp64)
    return [(ids, Recorded(c)) for ids, c in claims] or None
