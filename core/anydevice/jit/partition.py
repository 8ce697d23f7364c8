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
    ``"planned"`` skips the hooks; ``"eager"`` runs every node through the dispatcher."""
    view = GraphView(graph)
    claimed, errors = [], []
    if backend == "auto":
        for dev in dict.fromkeys(n.outputs[0].device for n in graph.nodes if n.outputs):
            got, errs = claims(graph, dev, view)
            claimed += got
            errors += errs
    return Executable(graph, backend, claimed, errors, view.by_id)
