"""Chains of element-wise nodes in a captured graph: what a backend's graph compiler fuses.

A backend's ``anydevice_compile_graph`` hook (:mod:`anydevice.runtime.hookspecs`) receives a
duck-typed graph; :func:`chains` groups its element-wise nodes into :class:`Chain` objects that
each can run as one kernel: every node of a chain computes a result of the chain's iteration
``shape`` (inputs from outside the chain may be smaller and broadcast, or Python scalars), and a
chain may end with one reduction (``sum``, ``prod``, ``max``, ``min``, ``mean``) of its last
value. Chains are convex: no path leaves a chain and comes back, so each runs at once.
``broadcast_to`` is part of a chain for free (reading its input broadcast is what every node
does anyway). The backend says which nodes it can compute (``accept``); the rest stay outside.
"""
from __future__ import annotations

ELEMENTWISE_EXTRA = ("astype", "broadcast_to")
REDUCTIONS = ("sum", "prod", "max", "min", "mean")


class Chain:
    """Nodes (graph order) that run as one kernel over ``shape``; ``reduction`` ends it or is None
    (``reductions``: it and the sibling reductions of the same axes, when :func:`chains` was
    asked for them); ``epilogue``: element-wise nodes after the reductions, over their result's
    shape (only when :func:`chains` was asked for them)."""

    __slots__ = ("nodes", "shape", "reduction", "reductions", "inputs", "outputs", "epilogue")

    def __init__(self, nodes, shape, reduction, inputs, outputs, epilogue=(), reductions=None):
        self.nodes, self.shape, self.reduction = nodes, shape, reduction
        self.reductions = list(reductions) if reductions is not None else [] if reduction is None else [reduction]
        self.inputs, self.outputs, self.epilogue = inputs, outputs, list(epilogue)

    @property
    def ids(self) -> frozenset:
        return frozenset(n.id for n in self.nodes)

    def __repr__(self) -> str:
        red = f" -> {self.reduction.op.name}" if self.reduction is not None else ""
        return f"<Chain {'+'.join(n.op.name for n in self.elementwise)}{red} over {self.shape}>"

    @property
    def elementwise(self) -> list:
        """The element-wise nodes before the reduction (all of them when there is none)."""
        return [n for n in self.nodes if n not in self.reductions and n not in self.epilogue]


def is_elementwise(node) -> bool:
    """An element-wise node (its op's category, or a cast or broadcast) without variadic inputs."""
    return ((node.op.category == "elementwise" or node.op.name in ELEMENTWISE_EXTRA) and len(node.outputs) == 1
            and not any(isinstance(x, list) for x in node.inputs))


def reduce_axes(node) -> tuple:
    """The axes a reduction node reduces (normalized, sorted)."""
    nd = len(node.inputs[0].shape)
    axis = node.attrs.get("axis")
    if axis is None:
        return tuple(range(nd))
    axis = (axis,) if isinstance(axis, int) else axis
    return tuple(sorted(a + nd if a < 0 else a for a in axis))


def _size(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


class _Group:
    __slots__ = ("nodes", "shape", "preds", "closed", "reduction", "reductions", "epilogue", "after")

    def __init__(self, shape):
        self.nodes, self.shape, self.preds, self.closed, self.reduction = [], shape, set(), False, None
        self.reductions = []
        self.epilogue, self.after = [], set()  # nodes after the reduction, the value ids they may read


def _depends(start, target) -> bool:
    """Whether group ``target`` is upstream of group ``start`` (``start`` itself excluded)."""
    seen, todo = set(), list(start.preds)
    while todo:
        g = todo.pop()
        if g is target:
            return True
        if id(g) not in seen:
            seen.add(id(g))
            todo.extend(g.preds)
    return False


def chains(graph, accept, accept_reduction=None, min_nodes: int = 2, device_type: str | None = None,
           epilogue: bool = False, siblings: bool = False) -> list:
    """The fusible chains of ``graph`` (only nodes on ``device_type`` when given; every node of a
    chain is on one device): element-wise nodes ``accept(node)`` allows, grouped with
    their producers when the result has the same shape and grouping keeps every chain convex;
    a reduction ``accept_reduction(node)`` allows may end the chain that produces its input.
    Chains of fewer than ``min_nodes`` nodes (``broadcast_to`` not counted) are left out.
    ``epilogue=True``: element-wise nodes over the reduction's result shape that read it (a
    ``log`` of a sum, a mean's division) join the chain after its reduction. ``siblings=True``:
    more reductions of the same axes and result shape over a value of the chain (a ``min`` and a
    ``max``) join it, and a reduction of a value from outside any chain starts a chain (of
    reductions of that value, then their epilogue)."""
    group_of: dict = {}  # value id -> group of its producer (every node gets a group)
    seeds: dict = {}  # value id -> the chain its reductions start (siblings=True)
    groups = []
    for node in graph.nodes:
        ins = [x for x in node.input_values()] if hasattr(node, "input_values") else _values(node.inputs)
        producers = [group_of.get(v.id) for v in ins]
        target = None
        here = device_type is None or node.outputs and node.outputs[0].device.type == device_type
        if not here:
            pass
        elif is_elementwise(node) and accept(node) and _size(node.outputs[0].shape):
            shape = tuple(node.outputs[0].shape)
            for g in producers:
                if g is not None and not g.closed and g.shape == shape and _may_join(g, producers):
                    if target is None:
                        target = g
                    elif g is not target and _may_merge(target, g, groups):  # one chain from two
                        _merge(target, g, groups, group_of)
            if target is None and epilogue:
                target = _epilogue_group(node, ins, producers, shape)
                if target is not None:
                    target.epilogue.append(node)
                    target.after.update(o.id for o in node.outputs)
            if target is None:
                target = _Group(shape)
                groups.append(target)
        elif (accept_reduction is not None and node.op.name in REDUCTIONS and len(ins) == 1
              and _size(node.outputs[0].shape) and _size(ins[0].shape) and accept_reduction(node)):
            target = _reduction_group(node, ins[0], producers[0], seeds.get(ins[0].id), siblings)
            if target is None and siblings:
                target = seeds[ins[0].id] = _Group(tuple(ins[0].shape))
                groups.append(target)
            if target is not None:
                target.closed, target.reduction = True, target.reduction or node
                target.reductions.append(node)
                target.after.update(o.id for o in node.outputs)
        if target is None:  # a node outside any chain: a group of its own, closed
            target = _Group(None)
            target.closed = True
        target.nodes.append(node)
        target.preds.update(g for g in producers if g is not None and g is not target)
        for o in node.outputs:
            group_of[o.id] = target
    order = {n.id: k for k, n in enumerate(graph.nodes)}
    out = []
    for g in groups:
        if g.nodes is None:  # merged into another
            continue
        g.nodes.sort(key=lambda n: order[n.id])
        if sum(n.op.name != "broadcast_to" for n in g.nodes) < min_nodes:
            continue
        ids = {n.id for n in g.nodes}
        inputs, outputs = graph.boundary(ids)
        out.append(Chain(g.nodes, g.shape, g.reduction, inputs, outputs, g.epilogue, g.reductions))
    return out


def _reduction_group(node, value, g, seeded, siblings: bool):
    """The group reduction ``node`` of ``value`` (produced in group ``g``) joins, or None: the open
    group of ``value``'s shape that produced it, or (``siblings``) the chain of an earlier
    reduction of the same axes and result shape over a value of its element-wise part, or the
    chain that reductions of ``value`` from outside started."""
    shape = tuple(value.shape)
    if g is not None and not g.closed and g.shape == shape:
        return g
    if not siblings:
        return None
    for c in (g, seeded):
        if c is not None and c.nodes is not None and c.reduction is not None and c.shape == shape and \
                (c is seeded or value.id not in c.after) and reduce_axes(node) == reduce_axes(c.reduction) and \
                tuple(node.outputs[0].shape) == tuple(c.reduction.outputs[0].shape):
            return c
    return None


def _may_join(g, producers) -> bool:
    """A node reading from ``producers`` may join ``g`` unless one of its other inputs depends on ``g``."""
    return not any(p is not None and p is not g and _depends(p, g) for p in producers)


def _epilogue_group(node, ins, producers, shape):
    """The chain ``node`` may end (after its reduction), or None: it reads that chain only
    through the reduction's result or earlier epilogue nodes, its shape is the result's, and no
    other input depends on the chain."""
    for g in producers:
        if g is not None and g.reduction is not None and g.nodes is not None and \
                tuple(g.reduction.outputs[0].shape) == shape and _may_join(g, producers):
            mine = [v for v, p in zip(ins, producers) if p is g]
            if mine and all(v.id in g.after for v in mine):
                return g
    return None


def _may_merge(a, b, groups) -> bool:
    """Two open groups may become one unless a path leaves one and enters the other."""
    for x, y in ((a, b), (b, a)):
        if any(p is not x and (_depends(p, x) or p is x) for p in y.preds if p is not x):
            return False
    return True


def _merge(a, b, groups, group_of) -> None:
    """Group ``b`` joins ``a``: its nodes, its producers, and whoever depended on it."""
    a.nodes += b.nodes
    a.preds |= {p for p in b.preds if p is not a}
    for g in groups:
        if b in g.preds:
            g.preds.discard(b)
            if g is not a:
                g.preds.add(a)
    for k, g in list(group_of.items()):
        if g is b:
            group_of[k] = a
    b.nodes, b.closed = None, True


def _values(inputs):
    for x in inputs:
        if isinstance(x, list):
            yield from x
        elif hasattr(x, "shape") and hasattr(x, "producer"):
            yield x
