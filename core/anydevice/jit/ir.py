"""The graph IR: registry ops applied to values of known shape, dtype and device.

One IR serves every backend. A :class:`Graph` lists its :class:`Node` objects in topological
order; each node applies a registry op (``node.op``, an ``OpDef``) with attributes to input
:class:`Value` objects (or plain Python scalars) and produces output values. Values that no node
produces are the graph's inputs: the function's arguments first, then tensors captured from
outside (parameters, optimizer state), or folded constants (``value.const``).

``graph.writebacks`` lists ``(value, target)`` pairs: after each replay the core rebinds each
target (a parameter's buffer, a leaf's gradient, an optimizer-state entry) to the replayed value,
so a training step's updates land where eager execution would put them. ``graph.flags`` are the
library's value checks (index bounds, GradScaler's inf/NaN test) recorded as values that must
read back as they did at trace time; they are read once after each replay.
"""
from __future__ import annotations

import math

__all__ = ["Value", "Node", "Graph"]


class Value:
    """A tensor-valued edge of the graph."""

    __slots__ = ("id", "shape", "dtype", "device", "producer", "index", "const", "name", "slot")

    def __init__(self, id: int, shape: tuple, dtype, device, producer=None, index: int = 0, const=None, name=None):
        self.id, self.shape, self.dtype, self.device = id, tuple(shape), dtype, device
        self.producer, self.index, self.const, self.name = producer, index, const, name
        self.slot = None  # storage slot assigned by memory planning (passes.plan_memory)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def type_str(self) -> str:
        return f"{self.dtype.name}[{','.join(str(s) for s in self.shape)}] @{self.device.type}"

    def __repr__(self) -> str:
        return f"%{self.id}"


class Node:
    """One registry op applied to values (and plain Python scalars) with attributes."""

    __slots__ = ("id", "op", "inputs", "attrs", "outputs", "compute")

    def __init__(self, id: int, op, inputs: tuple, attrs: dict, outputs: tuple = (), compute=None):
        self.id, self.op, self.inputs, self.attrs = id, op, tuple(inputs), dict(attrs)
        self.outputs, self.compute = tuple(outputs), compute

    def input_values(self):
        """The Values among the inputs (variadic lists flattened), in order."""
        for x in self.inputs:
            if isinstance(x, list):
                yield from x
            elif isinstance(x, Value):
                yield x

    def __repr__(self) -> str:
        return f"<Node {self.id} {self.op.name}>"


def _arg(x) -> str:
    if isinstance(x, list):
        return "[" + ", ".join(_arg(e) for e in x) + "]"
    return repr(x)


def _attr(v) -> str:
    name = getattr(v, "name", None)
    if isinstance(name, str) and not isinstance(v, (str, tuple)):
        return name  # a dtype, a device type
    return repr(v)


class Graph:
    """Inputs, nodes in topological order, outputs, write-backs and value-check flags."""

    def __init__(self):
        self.inputs: list = []       # arguments first, then captured external tensors (and constants)
        self.outputs: list = []
        self.nodes: list = []
        self.writebacks: list = []   # (Value, target): rebind an external tensor / gradient / state entry
        self.flags: list = []        # (Value, expected host value, what): value checks read after a replay
        self.plan: dict = {}         # memory plan: {"slots": {...}, "planned_bytes": n, "eager_bytes": n}
        self.n_args = 0              # how many of ``inputs`` are function arguments
        self.random: list = []       # (generator, blocks, [(node, offset delta)], trace offset): draws to redo
        self._next_id = 0
        self._next_node = 0

    # --- building -----------------------------------------------------------------------
    def new_value(self, shape, dtype, device, producer=None, index=0, const=None, name=None) -> Value:
        v = Value(self._next_id, shape, dtype, device, producer, index, const, name)
        self._next_id += 1
        return v

    def add_node(self, op, inputs, attrs, outs, compute=None) -> Node:
        """Append a node whose outputs are ``outs``: ``(shape, dtype, device)`` per output."""
        node = Node(self._next_node, op, inputs, attrs, (), compute)
        self._next_node += 1
        node.outputs = tuple(self.new_value(s, d, dev, node, k) for k, (s, d, dev) in enumerate(outs))
        self.nodes.append(node)
        return node

    # --- queries ------------------------------------------------------------------------
    def users(self, value: Value) -> list:
        """The nodes that read ``value``, in order."""
        return [n for n in self.nodes if any(x is value for x in n.input_values())]

    def results(self) -> list:
        """What an executor returns, in this order: the outputs, the write-back values (targets
        that clear a gradient have none), the flag values."""
        return (list(self.outputs) + [v for v, _ in self.writebacks if v is not None]
                + [v for v, *_ in self.flags])

    def live_values(self) -> set:
        """Ids of values read by outputs, write-backs and flags (what must survive)."""
        return {v.id for v in self.results()}

    # --- text and graphviz --------------------------------------------------------------
    def dump(self) -> str:
        """One line per input, node and output: ``%5 = matmul(%3, %4) : float32[256,10] @cpu``."""
        lines = []
        for k, v in enumerate(self.inputs):
            kind = "arg" if k < self.n_args else ("const" if v.const is not None else "capture")
            label = f" ({v.name})" if v.name else ""
            lines.append(f"{v!r} = {kind}{label} : {v.type_str()}")
        for n in self.nodes:
            args = [_arg(x) for x in n.inputs] + [f"{k}={_attr(a)}" for k, a in n.attrs.items()]
            lhs = ", ".join(repr(o) for o in n.outputs)
            types = ", ".join(o.type_str() for o in n.outputs)
            lines.append(f"{lhs} = {n.op.name}({', '.join(args)}) : {types}")
        for v, target in self.writebacks:
            lines.append(f"writeback {target} <- {'None' if v is None else repr(v)}")
        for v, expected, what in self.flags:
            lines.append(f"flag {v!r} == {expected!r} ({what})")
        lines.append("return " + ", ".join(repr(v) for v in self.outputs))
        return "\n".join(lines)

    def to_dot(self) -> str:
        """The graph in graphviz DOT: an ellipse per input, a box per node, edges labelled by type."""
        out = ["digraph G {", "  rankdir=TB;", '  node [fontname="monospace"];']
        src = {}
        for k, v in enumerate(self.inputs):
            kind = "arg" if k < self.n_args else ("const" if v.const is not None else "capture")
            out.append(f'  v{v.id} [shape=ellipse, label="%{v.id} {kind}\\n{v.type_str()}"];')
            src[v.id] = f"v{v.id}"
        for n in self.nodes:
            out.append(f'  n{n.id} [shape=box, label="{n.op.name}"];')
            for x in n.input_values():
                if x.id in src:
                    out.append(f'  {src[x.id]} -> n{n.id} [label="%{x.id}"];')
            for o in n.outputs:
                src[o.id] = f"n{n.id}"
        for j, v in enumerate(self.outputs):
            out.append(f'  out{j} [shape=doublecircle, label="out {j}"];')
            if v.id in src:
                out.append(f'  {src[v.id]} -> out{j} [label="%{v.id}"];')
        for j, (v, target) in enumerate(self.writebacks):
            label = str(target).replace('"', "'")
            out.append(f'  wb{j} [shape=note, label="{label}"];')
            if v is not None and v.id in src:
                out.append(f'  {src[v.id]} -> wb{j} [style=dashed];')
        out.append("}")
        return "\n".join(out)

    # --- copying ------------------------------------------------------------------------
    def copy(self) -> Graph:
        """An independent graph with new Value and Node objects (same ids, ops, constants, targets)."""
        g = Graph()
        g.n_args, g._next_id, g._next_node, g.plan = self.n_args, self._next_id, self._next_node, dict(self.plan)
        vmap: dict = {}

        def val(v):
            nv = vmap.get(v.id)
            if nv is None:
                nv = vmap[v.id] = Value(v.id, v.shape, v.dtype, v.device, None, v.index, v.const, v.name)
                nv.slot = v.slot
            return nv

        def conv(x):
            if isinstance(x, list):
                return [conv(e) for e in x]
            return val(x) if isinstance(x, Value) else x

        g.inputs = [val(v) for v in self.inputs]
        for n in self.nodes:
            nn = Node(n.id, n.op, tuple(conv(x) for x in n.inputs), n.attrs, (), n.compute)
            outs = []
            for o in n.outputs:
                no = val(o)
                no.producer = nn
                outs.append(no)
            nn.outputs = tuple(outs)
            g.nodes.append(nn)
        g.outputs = [val(v) for v in self.outputs]
        g.writebacks = [(None if v is None else val(v), t) for v, t in self.writebacks]
        nodes = {n.id: n for n in g.nodes}
        g.random = [(gen, b, [(nodes[n.id], d) for n, d in ns if n.id in nodes], o) for gen, b, ns, o in self.random]
        g.flags = [(val(v), e, w) for v, e, w in self.flags]
        return g

    def __repr__(self) -> str:
        return f"<Graph: {len(self.inputs)} inputs, {len(self.nodes)} nodes, {len(self.outputs)} outputs, " \
               f"{len(self.writebacks)} writebacks>"
