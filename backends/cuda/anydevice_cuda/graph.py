"""The CUDA graph compiler (hook ``anydevice_compile_graph``): each chain of element-wise nodes of a
captured graph (:func:`anydevice.runtime.fusion.chains`) becomes one CuPy ``ElementwiseKernel``;
a trailing reduction whose intermediates stay inside the chain makes it one ``ReductionKernel``
(the chain is its ``map_expr``). CuPy compiles each kernel with NVRTC at its first launch and
caches it on disk.

Each node is one C statement converting its result to the node's dtype, as the eager kernel's
output would hold it; ``:data:`EXPR``` lists what is fused (float16/bfloat16 and complex values,
and ops without an entry, stay with the planned executor). Inputs are broadcast to the chain's
shape by ``cupy.broadcast_to`` (views), so any broadcast works. The module does not import CuPy
until a graph is compiled.
"""
from __future__ import annotations

import re

import numpy as np

from anydevice.runtime.fusion import chains, reduce_axes

#: C type of each dtype a chain may hold
CTYPE = {"bool": "bool", "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
         "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
         "uint64": "unsigned long long", "float32": "float", "float64": "double"}
_F = ("float32", "float64")
_NUM = tuple(d for d in CTYPE if d != "bool")
_ALL = tuple(CTYPE)

#: op -> (dtypes it takes, C expression over x0, x1, x2); comparisons give bool
EXPR = {
    "add": (_NUM, "x0 + x1"), "subtract": (_NUM, "x0 - x1"), "multiply": (_NUM, "x0 * x1"),
    "divide": (_F, "x0 / x1"), "negative": (_NUM, "-x0"), "square": (_NUM, "x0 * x0"),
    "reciprocal": (_F, "1 / x0"), "exp": (_F, "exp(x0)"), "log": (_F, "log(x0)"), "sqrt": (_F, "sqrt(x0)"),
    "tanh": (_F, "tanh(x0)"), "sin": (_F, "sin(x0)"), "cos": (_F, "cos(x0)"), "expm1": (_F, "expm1(x0)"),
    "log1p": (_F, "log1p(x0)"), "erf": (_F, "erf(x0)"), "pow": (_F, "pow(x0, x1)"),
    "abs": (_F, "fabs(x0)"), "sigmoid": (_F, "1 / (1 + exp(-x0))"),
    "relu": (_F, "((x0 >= 0 || isnan(x0)) ? x0 : 0)"),
    "maximum": (_F, "((x0 >= x1 || isnan(x0)) ? x0 : x1)"), "minimum": (_F, "((x0 <= x1 || isnan(x0)) ? x0 : x1)"),
    "equal": (_ALL, "x0 == x1"), "not_equal": (_ALL, "x0 != x1"), "less": (_ALL, "x0 < x1"),
    "less_equal": (_ALL, "x0 <= x1"), "greater": (_ALL, "x0 > x1"), "greater_equal": (_ALL, "x0 >= x1"),
    "logical_not": (("bool",), "!x0"), "logical_and": (("bool",), "x0 && x1"), "logical_or": (("bool",), "x0 || x1"),
    "where": (_ALL, "x0 ? x1 : x2"), "astype": (_ALL, "x0"), "broadcast_to": (_ALL, "x0"),
}
#: reduction -> (CuPy reduce_expr over a and b, identity, post_map_expr)
REDUCE = {"sum": ("a + b", "0", "y = a"), "prod": ("a * b", "1", "y = a"),
          "max": ("(a >= b || isnan((double)a)) ? a : b", None, "y = a"),
          "min": ("(a <= b || isnan((double)a)) ? a : b", None, "y = a"),
          "mean": ("a + b", "0", "y = a / ((double)_in_ind.size() / _out_ind.size())")}
_ARG = re.compile(r"\bx(\d)\b")
#: no contraction into fused multiply-adds: each node rounds as its own eager launch would
OPTIONS = ("--fmad=false",)


def _data_dtype(node) -> str:
    """The dtype the expression computes in (the compute dtype; where: its result's)."""
    if node.op.name in ("where", "astype", "broadcast_to"):
        return node.outputs[0].dtype.name
    c = node.compute
    return (c[-1] if isinstance(c, tuple) else c).name if c is not None else node.outputs[0].dtype.name


def accept(node) -> bool:
    e = EXPR.get(node.op.name)
    if e is None or node.op.name not in ("astype", "broadcast_to") and set(node.attrs) - {"device"}:
        return False
    names = [node.outputs[0].dtype.name] + [x.dtype.name for x in node.inputs if hasattr(x, "dtype")]
    return all(n in CTYPE for n in names) and _data_dtype(node) in e[0]


def accept_reduction(node) -> bool:
    names = (node.outputs[0].dtype.name, node.inputs[0].dtype.name)
    return node.op.name in REDUCE and all(n in CTYPE for n in names) and (node.op.name != "mean" or names[0] in _F)


def _literal(x, dt: str) -> str:
    if dt == "bool":
        return "true" if x else "false"
    if dt in _F:
        f = float(x)
        return f"(({CTYPE[dt]}){f!r})" if f == f and abs(f) != float("inf") else f"(({CTYPE[dt]})({'0.0/0.0' if f != f else ('1.0/0.0' if f > 0 else '-1.0/0.0')}))"
    return f"(({CTYPE[dt]}){int(x)}LL)"


def _convert(dt: str, e: str) -> str:
    return f"(({e}) != 0)" if dt == "bool" else f"(({CTYPE[dt]})({e}))"


def statements(chain) -> tuple[list, dict]:
    """One C statement per element-wise node of ``chain``; inputs are named ``i0, i1, ...``."""
    names = {v.id: f"i{k}" for k, v in enumerate(chain.inputs)}
    lines = []
    for node in chain.elementwise:
        data = _data_dtype(node)
        args = []
        for j, x in enumerate(node.inputs):
            want = "bool" if node.op.name == "where" and j == 0 else data if node.op.name != "astype" else None
            if hasattr(x, "dtype"):
                e = names[x.id]
                args.append(e if want is None or x.dtype.name == want else _convert(want, e))
            else:
                args.append(_literal(x, want or data))
        expr = _ARG.sub(lambda m, a=args: f"({a[int(m.group(1))]})", EXPR[node.op.name][1])
        o = node.outputs[0]
        names[o.id] = f"v{o.id}"
        lines.append(f"{CTYPE[o.dtype.name]} v{o.id} = {_convert(o.dtype.name, expr)};")
    return lines, names


def elementwise_outputs(chain) -> list:
    """What the element-wise kernel writes: the values leaving the chain, and a trailing
    reduction's input (the reduction then runs as a second launch)."""
    outs = [v for v in chain.outputs if v.producer is not chain.reduction]
    if chain.reduction is not None and chain.reduction.inputs[0] not in outs:
        outs.append(chain.reduction.inputs[0])
    return outs


def elementwise_source(chain) -> tuple[str, str, str]:
    """``(in_params, out_params, operation)`` of the chain's ``cupy.ElementwiseKernel``."""
    lines, names = statements(chain)
    outs = elementwise_outputs(chain)
    ins = ", ".join(f"{v.dtype.name} i{k}" for k, v in enumerate(chain.inputs))
    out = ", ".join(f"{v.dtype.name} q{j}" for j, v in enumerate(outs))
    ops = " ".join(lines + [f"q{j} = {names[v.id]};" for j, v in enumerate(outs)])
    return ins, out, ops


def reduction_source(chain, name: str) -> tuple:
    """``(in_params, out_params, map_expr, reduce_expr, post_map_expr, identity, preamble)`` of the
    chain's ``cupy.ReductionKernel`` (the chain is a device function of the inputs)."""
    lines, names = statements(chain)
    red = chain.reduction
    src, out = red.inputs[0], red.outputs[0].dtype.name
    acc = out if red.op.name in ("sum", "prod", "mean") else src.dtype.name
    params = ", ".join(f"{CTYPE[v.dtype.name]} i{k}" for k, v in enumerate(chain.inputs))
    preamble = (f"__device__ {CTYPE[acc]} {name}_map({params}) {{ " + " ".join(lines)
                + f" return {_convert(acc, names[src.id])}; }}")
    call = f"{name}_map(" + ", ".join(f"i{k}" for k in range(len(chain.inputs))) + ")"
    reduce_expr, ident, post = REDUCE[red.op.name]
    if ident is None:  # max starts from the lowest value of the type, min from the highest
        lo = red.op.name == "max"
        if acc in _F:
            ident = "-1.0 / 0.0" if lo else "1.0 / 0.0"
        else:
            info = np.iinfo(acc) if acc != "bool" else None
            ident = ("false" if lo else "true") if info is None else \
                f"(({CTYPE[acc]}){info.min if lo else info.max}{'ULL' if info.min == 0 else 'LL'})"
    ins = ", ".join(f"{v.dtype.name} i{k}" for k, v in enumerate(chain.inputs))
    return ins, f"{out} y", call, reduce_expr, post, ident, preamble


class FusedKernel:
    """``executable(ctx, buffers) -> buffers`` of one chain (CuPy arrays in and out)."""

    def __init__(self, chain, name: str):
        self.chain, self.name = chain, name
        self.shape = tuple(chain.shape)
        red = chain.reduction
        self.reduce_only = red is not None and chain.outputs == [red.outputs[0]]
        self.kernel = None

    def _build(self):
        import cupy as cp

        if self.reduce_only:
            ins, out, mp, rd, post, ident, pre = reduction_source(self.chain, self.name)
            return cp.ReductionKernel(ins, out, mp, rd, post, ident, self.name, preamble=pre, options=OPTIONS)
        return cp.ElementwiseKernel(*elementwise_source(self.chain), self.name, options=OPTIONS)

    def __call__(self, ctx, buffers):
        from .kernels import _call

        return _call(ctx, self._run, (buffers,), {})

    def _run(self, buffers):
        import cupy as cp

        if self.kernel is None:
            self.kernel = self._build()
        xs = [cp.broadcast_to(b, self.shape) for b in buffers]
        red = self.chain.reduction
        if self.reduce_only:
            return [self.kernel(*xs, axis=reduce_axes(red), keepdims=bool(red.attrs.get("keepdims", False)))]
        rs = self.kernel(*xs)
        rs = list(rs) if isinstance(rs, tuple) else [rs]
        by_id = {v.id: r for v, r in zip(elementwise_outputs(self.chain), rs)}
        if red is not None:  # the reduction after the element-wise kernel: a second launch
            by_id[red.outputs[0].id] = _reduce(cp, red, by_id[red.inputs[0].id])
        return [by_id[v.id] for v in self.chain.outputs]


def _reduce(cp, node, x):
    fn = {"sum": cp.sum, "prod": cp.prod, "max": cp.max, "min": cp.min, "mean": cp.mean}[node.op.name]
    return fn(x, axis=reduce_axes(node), keepdims=bool(node.attrs.get("keepdims", False))).astype(
        node.outputs[0].dtype.name, copy=False)


_counter = [0]


def compile_graph(device_type, runtime, graph, kernels):
    """One :class:`FusedKernel` per fusible chain of ``graph``; None when there is none."""
    found = chains(graph, accept, accept_reduction, device_type=device_type)
    _counter[0] += 1
    return [(ch.ids, FusedKernel(ch, f"anydevice_fused{_counter[0]}_{k}")) for k, ch in enumerate(found)] or None
