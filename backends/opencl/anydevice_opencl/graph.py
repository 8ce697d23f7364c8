"""The OpenCL graph compiler (hook ``anydevice_compile_graph``): each chain of element-wise nodes
of a captured graph (:func:`anydevice.runtime.fusion.chains`: broadcasts, casts, Python scalars,
and an optional trailing ``sum``/``prod``/``max``/``min``/``mean``) becomes ONE generated kernel.

The expressions are those of the eager kernels (:data:`codegen.EXPR`), so each intermediate is
computed, and converted to its dtype, exactly as an eager launch would store it; only reductions
may differ in the last bits (summation order). Shapes and strides are baked into the source
(a graph variant has static shapes); every chain of one graph is compiled in one program (PoCL's
~0.4 s per build is paid once per graph). float16/bfloat16 (eager rounds them after every op)
and complex values are left to the planned executor, as are nodes without an expression.
"""
from __future__ import annotations

import re

import numpy as np
import pyopencl as cl

from anydevice.runtime.fusion import chains, reduce_axes

from . import codegen
from .kernels import _bstrides, _cstrides
from .runtime import BUILD_OPTIONS, Launcher

DTYPES = frozenset(d for d, c in codegen.CTYPES.items() if c.kind in "biuf" and d not in ("float16", "bfloat16"))
LOCAL = 128  # work-items per group of an element-wise chain
RED_LOCAL = 64  # work-items per output element of a reduction over many elements
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
    return f"({codegen.CTYPES[dt].storage})({e})"


def _index(strides, coords) -> str:
    terms = [f"{c} * {s}L" for c, s in zip(coords, strides) if s]
    return " + ".join(terms) or "0"


class Program:
    """The source of one chain's kernel and how to launch it."""

    def __init__(self, chain, name: str):
        self.chain, self.name = chain, name
        shape = chain.shape
        red = chain.reduction
        self.n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        self.inputs = [v for v in chain.inputs]
        self.outputs = list(chain.outputs)
        if red is not None:
            axes = reduce_axes(red)
            kept = [d for d in range(len(shape)) if d not in axes]
            self.m = int(np.prod([shape[d] for d in kept], dtype=np.int64)) if kept else 1
            self.k = int(np.prod([shape[d] for d in axes], dtype=np.int64)) if axes else 1
            self.local = RED_LOCAL if self.k >= 4 * RED_LOCAL else 1
            self.axes, self.kept = axes, kept
        self.source = self._source()

    # the per-element body: loads of the inputs it reads, one statement per node
    def _body(self, coords, lin, indent="  ", nodes=None, shape=None, names=None) -> tuple[list, list, dict]:
        """Statements computing ``nodes`` (default: the element-wise nodes before the reduction) at
        coordinates ``coords`` of ``shape`` (linear index ``lin``), and the stores of the values
        among them that leave the chain."""
        shape = self.chain.shape if shape is None else shape
        nodes = self.chain.elementwise if nodes is None else nodes
        names, lines = dict(names or {}), []
        index = {v.id: k for k, v in enumerate(self.inputs)}
        for node in nodes:
            for v in node.input_values() if hasattr(node, "input_values") else ():
                k = index.get(v.id)
                if k is None or v.id in names:
                    continue
                dt = v.dtype.name
                idx = lin if tuple(v.shape) == tuple(shape) else _index(_bstrides(v.shape, shape), coords)
                names[v.id] = f"i{k}"
                lines.append(f"{indent}{codegen.CTYPES[dt].storage} i{k} = {codegen.load(dt, f'p{k}', f'p{k}_o + ' + idx)};")
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
        return ", ".join(ps)

    def _source(self) -> str:
        shape, nd = self.chain.shape, len(self.chain.shape)
        coords = [f"c{d}" for d in range(nd)]
        if self.chain.reduction is None:
            head = [f"__kernel void {self.name}({self._params()}) {{",
                    f"  long i = get_global_id(0); if (i >= {self.n}L) return;", "  long r = i;"]
            for d in reversed(range(nd)):
                head.append(f"  long c{d} = r % {shape[d]}L; r /= {shape[d]}L;")
            lines, stores, _ = self._body(coords, "i")
            return "\n".join(head + lines + stores) + "\n}\n"
        return self._reduction_source(shape, coords)

    def _reduction_source(self, shape, coords) -> str:
        red, L = self.chain.reduction, self.local
        kind = "sum" if red.op.name == "mean" else red.op.name
        out_dt = red.outputs[0].dtype.name
        c = red.compute
        acc_dt = (c[-1] if isinstance(c, tuple) else c).name if c is not None else out_dt
        if kind in ("sum", "prod"):
            acc_dt = out_dt
        ct = codegen.CTYPES[acc_dt]
        T = ct.compute
        comb, ident = codegen._COMBINE[kind]
        if ct.kind not in "f" and kind in codegen._COMBINE_INT:
            comb = codegen._COMBINE_INT[kind]
        ident = ident.format(lo=ct.lo, hi=ct.hi)
        cs = _cstrides(shape)
        head = [f"__kernel __attribute__((reqd_work_group_size({L}, 1, 1)))",
                f"void {self.name}({self._params()}) {{",
                "  long g = get_group_id(0); int l = get_local_id(0);",
                f"  {T} acc = ({T})({ident});", "  long r = g;"]
        for d in reversed(self.kept):
            head.append(f"  long c{d} = r % {shape[d]}L; r /= {shape[d]}L;")
        head.append(f"  for (long kk = l; kk < {self.k}L; kk += {L}) {{")
        head.append("    long s = kk;")
        for d in reversed(self.axes):
            head.append(f"    long c{d} = s % {shape[d]}L; s /= {shape[d]}L;")
        lin = _index(cs, coords)
        head.append(f"    long i = {lin};")
        lines, stores, names = self._body(coords, "i", "    ")
        src = red.inputs[0]
        x = names[src.id] if src.dtype.name == acc_dt else _convert(acc_dt, names[src.id])
        body = lines + stores + [f"    {{ {T} a = acc, b = ({T})({x}); acc = ({T})({comb}); }}", "  }"]
        tail = []
        if L > 1:
            tail += [f"  __local {T} sh[{L}]; sh[l] = acc; barrier(CLK_LOCAL_MEM_FENCE);",
                     f"  for (int w = {L} / 2; w > 0; w >>= 1) {{",
                     f"    if (l < w) {{ {T} a = sh[l], b = sh[l + w]; sh[l] = ({T})({comb}); }}",
                     "    barrier(CLK_LOCAL_MEM_FENCE); }", "  acc = sh[0];"]
        res = f"acc / ({T}){self.k}" if red.op.name == "mean" else "acc"
        ro = red.outputs[0]
        tail.append("  if (l != 0) return;")
        tail.append(f"  {codegen.CTYPES[out_dt].storage} v{ro.id} = {_convert(out_dt, res)};")
        j = self.outputs.index(ro) if ro in self.outputs else None
        if j is not None:
            tail.append(f"  {codegen.store(out_dt, f'q{j}', f'q{j}_o + g', f'v{ro.id}')}")
        if self.chain.epilogue:  # element-wise work on the result, at its coordinates
            rshape = tuple(ro.shape)
            tail.append("  r = g;")
            for d in reversed(range(len(rshape))):
                tail.append(f"  long e{d} = r % {rshape[d]}L; r /= {rshape[d]}L;")
            lines, stores, _ = self._body([f"e{d}" for d in range(len(rshape))], "g", "  ", self.chain.epilogue,
                                          rshape, {ro.id: f"v{ro.id}"})
            tail += lines + stores
        return "\n".join(head + body + tail) + "\n}\n"

    def launch_size(self, cap: int) -> tuple:
        if self.chain.reduction is not None:
            return (self.m * self.local,), (self.local,)
        local = min(LOCAL, cap)
        return (-(-self.n // local) * local,), (local,)


def _off(a) -> int:
    return a.byte_offset // a.dtype.itemsize


class FusedKernel:
    """``executable(ctx, buffers) -> buffers`` of one chain: allocates the outputs, one launch.
    The program of the graph is built at the first run (on the device that runs it)."""

    def __init__(self, program: Program, built):
        self.program, self.built = program, built
        self.launcher = self.gsize = self.lsize = None
        self.outs = [(tuple(o.shape), o.dtype) for o in program.outputs]
        self.__name__ = program.name

    def __call__(self, ctx, buffers):
        rt = ctx.runtime
        if self.launcher is None:
            self.gsize, self.lsize = self.program.launch_size(rt.devices[ctx.index].max_work_group_size)
            self.launcher = Launcher(cl.Kernel(self.built(ctx), self.program.name))
        outs = [ctx.empty(s, d) for s, d in self.outs]
        args = []
        for o in outs:
            args += [o.handle, _off(o)]
        for b in buffers:
            args += [b.handle, _off(b)]
        self.launcher(rt.queue(ctx.index, ctx.stream), self.gsize, self.lsize, args)
        return outs


_counter = [0]


def compile_graph(device_type, runtime, graph, kernels):
    """The claims of one graph: its fusible chains, each a :class:`FusedKernel`; None if none.
    (A float64 value exists only on a device with cl_khr_fp64, so the graph's dtypes tell.)"""
    found = chains(graph, _accept(True), _accept_reduction(True), device_type=device_type, epilogue=True)
    if not found:
        return None
    _counter[0] += 1
    programs = [Program(ch, f"fused{_counter[0]}_{k}") for k, ch in enumerate(found)]
    exprs = " ".join(p.source for p in programs)
    helpers = [codegen._helpers(exprs, t) for t in sorted({c.compute for c in codegen.CTYPES.values()})]
    body = [h for h in helpers if h] + [p.source for p in programs]
    cache: dict = {}

    def built(ctx):
        prg = cache.get(ctx.index)
        if prg is None:
            head = ["#pragma OPENCL EXTENSION cl_khr_fp64 : enable"] if runtime.has_fp64(ctx.index) else []
            head.append("#pragma OPENCL FP_CONTRACT OFF")  # as separate launches: no fused multiply-add
            src = "\n".join(head + body)
            prg = cache[ctx.index] = runtime.programs._program(runtime, ctx.index, src, BUILD_OPTIONS, ctx.device)
        return prg

    return [(p.chain.ids, FusedKernel(p, built)) for p in programs]
