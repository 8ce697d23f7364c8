"""The cpu graph compiler (hook ``anydevice_compile_graph``).

Each chain of element-wise nodes of a captured graph (:func:`anydevice.runtime.fusion.chains`,
with its trailing reduction) runs as ONE generated Python function: the same numpy calls as the
eager kernels, node after node, but each ufunc writes with ``out=`` into a buffer chosen once:

- a value used only inside the chain lives in a *scratch* buffer that is allocated once and
  reused by every replay; a node may write in place into the scratch of an input that dies there
  (same shape and dtype: a ufunc reads each element before it writes it);
- a value that leaves the chain gets a new buffer at every replay (the caller may keep it).

Only nodes whose eager kernel is this backend's own numpy ufunc (or ``relu``, a cast) take the
``out=`` form, and only when numpy resolves the ufunc to exactly the node's dtypes and no input
is float16/bfloat16 (those run through float32 eagerly); every other node of a chain calls its
eager kernel. Floating-point warnings are silenced exactly for the nodes whose eager kernels
silence them, so results and warnings are those of eager execution.

Scratch buffers come from a pool: a replay takes a set (or makes one when another thread holds
them all) and puts it back, so concurrent replays of one graph never share scratch, and no
buffer a replay returns is one the next replay writes.
"""
from __future__ import annotations

import numpy as np

from anydevice.runtime.fusion import REDUCTIONS, chains, reduce_axes

from . import kernels as _k
from . import native as _native

#: op -> (ufunc, silenced): ops whose cpu kernel is ``ufunc(*inputs)`` for dtypes other than the
#: 16-bit floats; ``silenced``: the kernel runs with floating-point warnings off
UFUNCS = {name: (fn, how != "plain") for name, (fn, how) in _k._TABLE.items()
          if isinstance(fn, np.ufunc) and how in ("plain", "quiet", "half")}
_KMOD = _k.__name__


def _own(fn) -> bool:
    """Whether ``fn`` is one of kernels.py's own kernels (a Python function, or the C form of
    its calling layer), not one a plugin or a test registered over it."""
    return getattr(fn, "__module__", None) == _KMOD or (_native.KERNEL is not None and type(fn) is _native.KERNEL)


def _np(dt):
    return dt.numpy


def _compute(node):
    c = node.compute
    return c[0] if type(c) is tuple else c


def _half(node) -> bool:
    half = _k._HALF or _k._half_dtypes()
    return any(_np(v.dtype) in half for v in (*node.input_values(), *node.outputs))


def _out_form(node, kernels):
    """``(ufunc, silenced, extra)`` when ``node`` can write into a given buffer exactly as its eager
    kernel computes (``extra``: a constant second operand, for relu), ``("cast", False, None)`` for a
    cast copyto reproduces, else None."""
    k = kernels.lookup(node.op.name, _compute(node))
    if k is None or k.out or not _own(k.fn) or _half(node) or node.attrs.get("device"):
        return None
    ins = list(node.input_values())
    out = node.outputs[0]
    name = node.op.name
    if name == "astype":
        src, dst = _np(ins[0].dtype), _np(out.dtype)
        if src.kind in "biuf" and dst.kind in "biuf" and not (src.kind == "f" and dst.kind in "iu"):
            return ("cast", False, None)
        return None
    if name == "relu":
        zero = np.zeros((), _np(out.dtype))
        return (np.maximum, False, zero) if _resolves(np.maximum, [ins[0].dtype, out.dtype], out) else None
    entry = UFUNCS.get(name)
    if entry is None or node.attrs or entry[0].nin != len(ins) or entry[0].nout != 1:
        return None
    return (entry[0], entry[1], None) if _resolves(entry[0], [v.dtype for v in ins], out) else None


def _resolves(uf, dtypes, out) -> bool:
    """Whether numpy runs ``uf`` on these input dtypes with no cast, giving ``out``'s dtype."""
    ins = tuple(_np(d) for d in dtypes)
    try:
        got = uf.resolve_dtypes(ins + (None,))
    except (TypeError, ValueError):
        return False
    return tuple(got[:-1]) == ins and got[-1] == _np(out.dtype)


class ChainFunction:
    """``executable(ctx, buffers) -> buffers``: one chain as a generated numpy function
    (``source`` holds it)."""

    def __init__(self, chain, kernels):
        self.chain = chain
        self.name = "fused[" + "+".join(n.op.name for n in chain.nodes) + "]"
        self.pool: list = []
        self._shapes: list = []   # (shape, dtype) per scratch slot
        self.source, self._fn = self._generate(kernels)

    def _generate(self, kernels):
        ch = self.chain
        ns = {"_pool": self.pool, "_fresh": self._fresh, "_empty": np.empty, "_copyto": np.copyto,
              "_fp": _k._fp_state, "_IGNORE": getattr(_k, "_IGNORE", None), "_errstate": np.errstate}
        names = {v.id: f"a{j}" for j, v in enumerate(ch.inputs)}
        leaving = {v.id for v in ch.outputs}
        forms = {n.id: _out_form(n, kernels) if n is not ch.reduction else None for n in ch.nodes}
        users: dict = {}
        for n in ch.nodes:
            for v in n.input_values():
                users.setdefault(v.id, []).append(n)
        # a value may live in scratch when it stays inside the chain and only out= forms or a
        # reduction over some axis read it (another kernel's result may be a view of its input)
        safe = {n.id for n in ch.nodes if forms[n.id] or (n is ch.reduction and reduce_axes(n))}
        scratchable = {o.id for n in ch.nodes if forms[n.id] for o in n.outputs
                       if o.id not in leaving and all(u.id in safe for u in users.get(o.id, ()))}
        last = {}
        for k, n in enumerate(ch.nodes):
            for v in n.input_values():
                last[v.id] = k
        body, free, slot_of = [], {}, {}
        for k, n in enumerate(ch.nodes):
            o = n.outputs[0]
            form = forms[n.id]
            dying = [v for v in dict.fromkeys(n.input_values()) if last.get(v.id) == k and v.id in slot_of]
            if form is not None:
                for v in dying:  # in place: an element-wise ufunc may write over an input it reads
                    free.setdefault((tuple(v.shape), v.dtype), []).append(slot_of[v.id])
            args = ", ".join(names[v.id] if hasattr(v, "producer") else repr(v) for v in n.inputs)
            if form is None:
                ns[f"k{k}"] = kernels.lookup(n.op.name, _compute(n)).fn
                kw = {a: b for a, b in n.attrs.items() if a != "device"}
                if kw:
                    ns[f"w{k}"] = kw
                names[o.id] = f"v{o.id}"
                body.append(f"    v{o.id} = k{k}(ctx, {args}{f', **w{k}' if kw else ''})")
            else:
                if o.id in scratchable:
                    pool = free.get((tuple(o.shape), o.dtype))
                    slot = pool.pop() if pool else self._new_slot(o)
                    slot_of[o.id] = slot
                    names[o.id] = f"s[{slot}]"
                else:
                    names[o.id] = f"v{o.id}"
                    ns[f"t{o.id}"] = (tuple(o.shape), _np(o.dtype))
                    body.append(f"    v{o.id} = _empty(*t{o.id})")
                body += self._call(k, form, args, names[o.id], ns)
            if form is None:
                for v in dying:
                    free.setdefault((tuple(v.shape), v.dtype), []).append(slot_of[v.id])
        lines = ["def part(ctx, bufs):", f"    {''.join(names[v.id] + ', ' for v in ch.inputs)}= bufs"]
        if self._shapes:
            lines += ["    try:", "        s = _pool.pop()", "    except IndexError:", "        s = _fresh()"]
        lines += body
        if self._shapes:
            lines.append("    _pool.append(s)")
        lines.append("    return [" + ", ".join(names[v.id] for v in ch.outputs) + "]")
        src = "\n".join(lines) + "\n"
        exec(compile(src, f"<anydevice_cpu {self.name}>", "exec"), ns)  # noqa: S102
        return src, ns["part"]

    def _new_slot(self, v) -> int:
        self._shapes.append((tuple(v.shape), _np(v.dtype)))
        return len(self._shapes) - 1

    def _fresh(self) -> list:
        return [np.empty(s, d) for s, d in self._shapes]

    @staticmethod
    def _call(k, form, args, dst, ns) -> list:
        uf, silenced, extra = form
        if uf == "cast":
            line = f"_copyto({dst}, {args}, casting='unsafe')"
        else:
            ns[f"u{k}"] = uf
            if extra is not None:
                ns[f"z{k}"] = extra
                args += f", z{k}"
            line = f"u{k}({args}, out={dst})"
        if not silenced:
            return [f"    {line}"]
        if ns["_fp"] is None:
            return ["    with _errstate(all='ignore'):", f"        {line}"]
        return ["    tok = _fp.set(_IGNORE)", "    try:", f"        {line}", "    finally:", "        _fp.reset(tok)"]

    def __call__(self, ctx, buffers):
        return self._fn(ctx, buffers)


def compile_graph(device_type, runtime, graph, kernels):
    """One :class:`ChainFunction` per chain of this device type with at least one ``out=`` form."""
    def accept(node):
        return (kernels.lookup(node.op.name, _compute(node)) is not None
                and all(hasattr(x, "producer") for x in node.inputs))

    def accept_reduction(node):
        return node.op.name in REDUCTIONS and accept(node)

    claims = []
    for ch in chains(graph, accept, accept_reduction, device_type=device_type):
        if any(n is not ch.reduction and _out_form(n, kernels) for n in ch.nodes):
            claims.append((ch.ids, ChainFunction(ch, kernels)))
    return claims or None
