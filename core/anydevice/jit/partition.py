"""Partitioning a graph between a backend's compile hook and the planned executor.

:func:`claims` shows the backend's plugin the graph (as a :class:`GraphView`, the duck-typed
object ``anydevice_compile_graph`` documents) and checks what it claims; :func:`schedule` orders
the claimed parts and the remaining nodes so each runs once its inputs exist. A claim the core
cannot use (the hook raised, returned something else than a list of ``(node_ids, executable)``,
overlapping or unknown node ids, a cycle through the rest of the graph) is reported as a
:class:`~anydevice.errors.PluginError` naming the plugin and the hook, as a warning, and its
nodes run on the planned executor instead.
"""
from __future__ import annotations

import numpy as np

from anydevice.engine import dispatch as _dispatch
from anydevice.engine import graph as _ag
from anydevice.engine.tensor import Tensor, _wrap
from anydevice.jit import passes as _passes
from anydevice.jit.executor import HOOK, Claim, CompileWarning, Executable, report
from anydevice.runtime.plugins import manager

__all__ = ["GraphView", "claims", "build", "CompileWarning"]


class GraphView:
    """The graph as a compile hook sees it (``graph.nodes``, ``users``, ``escapes``, ``boundary``)."""

    def __init__(self, graph):
        self.graph, self.nodes, self.inputs, self.outputs = graph, graph.nodes, graph.inputs, graph.outputs
        self._users: dict = {}
        for n in graph.nodes:
            for v in n.input_values():
                lst = self._users.setdefault(v.id, [])
                if not lst or lst[-1] is not n:
                    lst.append(n)
        self._live = graph.live_values()
        self.by_id = {n.id: n for n in graph.nodes}

    def users(self, value) -> list:
        return list(self._users.get(value.id, ()))

    def escapes(self, value) -> bool:
        return value.id in self._live

    def boundary(self, node_ids) -> tuple[list, list]:
        """``(inputs, outputs)`` of the node set (the order the hook's contract gives)."""
        ids = set(node_ids)
        inside = [n for n in self.nodes if n.id in ids]
        produced = {o.id for n in inside for o in n.outputs}
        ins, seen = [], set()
        for n in inside:
            for v in n.input_values():
                if v.id not in produced and v.id not in seen:
                    seen.add(v.id)
                    ins.append(v)
        outs = [o for n in inside for o in n.outputs
                if o.id in self._live or any(u.id not in ids for u in self._users.get(o.id, ()))]
        return ins, outs


def claims(graph, device, view: GraphView | None = None) -> tuple[list, list]:
    """``(claims, errors)``: what ``device``'s plugin claims of ``graph``, checked."""
    be = device._backend
    rec = be.record
    if getattr(rec, "module", None) is None or not manager.implements(rec, HOOK):
        return [], []
    view = view or GraphView(graph)
    label = rec.label
    try:
        res = manager.call(rec, HOOK, device_type=be.type, runtime=be.runtime, graph=view, kernels=be.kernels)
    except Exception as e:  # noqa: BLE001 - a plugin's failure is reported, never fatal
        return [], [report(label, f"raised {type(e).__name__}: {e}")]
    if res is None:
        return [], []
    if not isinstance(res, (list, tuple)):
        return [], [report(label, f"returned {type(res).__name__}, expected a list of (node_ids, executable)")]
    out, errors, taken = [], [], set()
    for k, item in enumerate(res):
        what = _bad_claim(item, view, taken)
        if what:
            errors.append(report(label, f"claim {k}: {what}"))
            continue
        ids = frozenset(item[0])
        other = sorted(i for i in ids if view.by_id[i].outputs and view.by_id[i].outputs[0].device is not device)
        if other:
            errors.append(report(label, f"claim {k}: claims nodes {other[:8]} of another device than {device}"))
            continue
        taken |= ids
        ins, outs = view.boundary(ids)
        out.append(Claim(ids, item[1], ins, outs, label))
    return out, errors


def _bad_claim(item, view: GraphView, taken: set) -> str | None:
    if not isinstance(item, (list, tuple)) or len(item) != 2:
        return f"is {type(item).__name__} {_short(item)}, expected a pair (node_ids, executable)"
    ids, fn = item
    try:
        ids = set(ids)
    except TypeError:
        return f"node_ids is {type(ids).__name__}, expected a collection of node ids"
    if not ids:
        return "claims no node"
    unknown = sorted(i for i in ids if not isinstance(i, int) or i not in view.by_id)
    if unknown:
        return f"names node ids that are not in the graph: {_short(unknown)}"
    if ids & taken:
        return f"claims nodes another claim has: {sorted(ids & taken)[:8]}"
    if not callable(fn):
        return f"executable is {type(fn).__name__}, not callable"
    return None


def _short(x) -> str:
    r = repr(x)
    return r if len(r) <= 60 else r[:57] + "..."




def build(graph, backend: str = "auto") -> Executable:
    """The graph partitioned and planned: ``run = build(graph); run(buffers)`` replays it.

    ``backend="auto"`` asks each device's plugin (``anydevice_compile_graph``) what it runs itself;
    ``"planned"`` skips the hooks; ``"eager"`` runs every node through the dispatcher. Except for
    ``"eager"``, composite nodes that the dispatcher decomposes on their device are first replaced
    by the nodes of their decomposition (:func:`inline_decompositions`), so a backend sees (and can
    fuse) the element-wise work inside ``linear``, ``log_softmax`` or an optimizer's update."""
    if backend != "eager":
        graph = inline_decompositions(graph)
    view = GraphView(graph)
    claimed, errors = [], []
    if backend == "auto":
        for dev in dict.fromkeys(n.outputs[0].device for n in graph.nodes if n.outputs):
            got, errs = claims(graph, dev, view)
            claimed += got
            errors += errs
    return Executable(graph, backend, claimed, errors)


# --- decompositions inlined -----------------------------------------------------------------------
def _decomposed_here(node) -> bool:
    """Whether eager mode runs ``node`` through its decomposition on its device (no native kernel,
    and the dispatcher did not plan a CPU fallback for it), so inlining changes nothing it computes."""
    op = node.op
    if op.decomposition is None or op.data_shape is not None or not node.outputs:
        return False
    dev = node.outputs[0].device
    c = node.compute[0] if type(node.compute) is tuple else node.compute
    if dev._backend.kernels.lookup(op.name, c) is not None:
        return False
    key = (dev._ctx, c)
    plan = op.plans.get(key)  # none cached: the op ran with gradients, through its decomposition
    if plan is not None and plan[0] != _dispatch.DECOMPOSED:
        return False
    try:
        return not (op.attrs and (key, tuple(node.attrs.values())) in op.plans)  # a fallback for these attributes
    except TypeError:  # an unhashable attribute value: never planned per value
        return True


def inline_decompositions(graph, rounds: int = 4):
    """A copy of ``graph`` where each node :func:`_decomposed_here` is replaced by the ops its
    decomposition runs (traced once on the node's input shapes), repeated for nested composite ops;
    ``graph`` itself when there is none. Random nodes keep their attribute dicts (the caller sets
    their key and offset before each replay)."""
    random_ids = {n.id for _, _, ns, _ in getattr(graph, "random", ()) for n, _ in ns}
    if not any(_decomposed_here(n) and n.id not in random_ids for n in graph.nodes):
        return graph
    g = graph.copy()
    originals = {n.id: n for n in graph.nodes}
    for n in g.nodes:
        if n.id in random_ids:
            n.attrs = originals[n.id].attrs
    for _ in range(rounds):
        subst, nodes = {}, []
        for node in list(g.nodes):
            sub = _trace(g, node) if node.id not in random_ids and _decomposed_here(node) else None
            if sub is None:
                nodes.append(node)
                continue
            nodes += sub[0]
            subst.update({o.id: v for o, v in zip(node.outputs, sub[1])})
        g.nodes = nodes
        _passes._substitute(g, subst)
        if not subst:
            break
    # the decompositions' constants (an arange, a full) folded, repeats merged, and their own value
    # checks dropped (the graph's flags hold those of the ops they replaced)
    for p in (_passes.fold_constants, _passes.cse, _passes.dce):
        g = p(g)
    return g


def _trace(g, node):
    """``(nodes, output values)`` of ``node``'s decomposition, or None when it cannot be traced
    (anything raised, a random draw inside, an output that is neither traced nor an input)."""
    dev = node.outputs[0].device
    values, recorded = {}, []
    ins = []
    for x in node.inputs:
        if isinstance(x, list):
            ins.append([_placeholder(v, values) for v in x])
        elif hasattr(x, "producer"):
            ins.append(_placeholder(x, values))
        else:
            ins.append(x)

    def tracer(op, inputs, attrs, result, compute):
        recorded.append((op, inputs, dict(attrs), result, compute))

    old = _dispatch._tracer
    _dispatch._tracer = tracer
    _dispatch.add_observer(_quiet_observer)  # no fast path: every op reaches the tracer
    try:
        with _ag.no_grad():
            c = node.compute[0] if type(node.compute) is tuple else node.compute
            outd = tuple(o.dtype for o in node.outputs) if node.op.outputs is not None else node.outputs[0].dtype
            r = _dispatch._decompose(node.op, ins, dict(node.attrs), dev, c, outd)
    except Exception:  # noqa: BLE001 - the node stays as it is (dispatched at replay)
        return None
    finally:
        _dispatch._tracer = old
        _dispatch.remove_observer(_quiet_observer)
    nodes = []
    for op, inputs, attrs, result, compute in recorded:
        # a random draw, sizes read from the (placeholder) data, or a value check the node's own
        # check (a flag of the graph) does not stand for: the node stays whole
        if op.category == "random" or "key" in attrs or op.data_shape is not None or \
                op.check is not None and node.op.check is None:
            return None
        vin = tuple(_value_of(g, x, values) for x in inputs)
        res = result if isinstance(result, tuple) else (result,)
        n = g.add_node(op, vin, attrs, [(t.shape, t.dtype, t.device) for t in res], compute)
        g.nodes.pop()  # the caller places it
        for t, v in zip(res, n.outputs):
            values[id(t)] = (v, t)
        nodes.append(n)
    res = r if isinstance(r, tuple) else (r,)
    outs = [values.get(id(t), (None,))[0] for t in res]
    if any(v is None for v in outs) or len(outs) != len(node.outputs):
        return None
    if any(o.shape != v.shape or o.dtype is not v.dtype for o, v in zip(node.outputs, outs)):
        return None
    return nodes, outs


def _quiet_observer(*args) -> None:
    pass


def _placeholder(v, values):
    """A tensor standing for value ``v`` while its node's decomposition is traced: the constant
    itself, else zeros of its shape, dtype and device."""
    if v.const is not None:
        t = v.const
    else:
        be = v.device._backend
        t = _wrap(be.from_host(v.device.index, np.zeros(v.shape, v.dtype.numpy), v.dtype), v.shape, v.dtype, v.device)
    values[id(t)] = (v, t)
    return t


def _value_of(g, x, values):
    if isinstance(x, list):
        return [_value_of(g, e, values) for e in x]
    if not isinstance(x, Tensor):
        return x
    hit = values.get(id(x))
    if hit is not None:
        return hit[0]
    v = g.new_value(x.shape, x.dtype, x.device, const=x)  # made inside the decomposition from host data
    values[id(x)] = (v, x)
    return v
