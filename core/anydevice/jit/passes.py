"""Graph passes: dead-code elimination, common-subexpression elimination, constant folding and
memory planning. Each takes a :class:`~anydevice.jit.ir.Graph` and changes it in place."""
from __future__ import annotations

from anydevice.engine import dispatch as _dispatch
from anydevice.engine import graph as _ag
from anydevice.engine.tensor import _wrap
from anydevice.jit.ir import Value

__all__ = ["PASSES", "run", "dce", "cse", "fold_constants", "plan_memory"]


def _random_nodes(g) -> set:
    return {n.id for _, _, nodes, _ in g.random for n, _ in nodes}


def _substitute(g, sub: dict) -> None:
    """Replace every use of value ``id`` by ``sub[id]`` (nodes, outputs, write-backs, flags)."""
    if not sub:
        return

    def s(x):
        if isinstance(x, list):
            return [s(e) for e in x]
        return sub.get(x.id, x) if isinstance(x, Value) else x

    for n in g.nodes:
        n.inputs = tuple(s(x) for x in n.inputs)
    g.outputs = [s(v) for v in g.outputs]
    g.writebacks = [(None if v is None else s(v), t) for v, t in g.writebacks]
    g.flags = [(s(v), e, w) for v, e, w in g.flags]


def dce(g):
    """Remove nodes none of whose outputs reach an output, a write-back or a flag."""
    live = g.live_values()
    keep = []
    for n in reversed(g.nodes):
        if any(o.id in live for o in n.outputs):
            keep.append(n)
            live.update(v.id for v in n.input_values())
    removed = len(g.nodes) - len(keep)
    g.nodes = keep[::-1]
    if removed:
        kept = {n.id for n in g.nodes}
        g.random = [(gen, b, [(n, d) for n, d in ns if n.id in kept], o) for gen, b, ns, o in g.random]
    return g


def _frozen(v):
    if isinstance(v, (list, tuple)):
        return tuple(_frozen(e) for e in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _frozen(e)) for k, e in v.items()))
    hash(v)
    return (type(v), v)


def _key(n):
    ins = []
    for x in n.inputs:
        if isinstance(x, list):
            ins.append(tuple(e.id for e in x))
        elif isinstance(x, Value):
            ins.append(x.id)
        else:
            ins.append((type(x), x))
    try:
        return (n.op.name, tuple(ins), _frozen(n.attrs), n.compute)
    except TypeError:  # an unhashable attribute value: leave the node alone
        return None


def cse(g):
    """Merge nodes that apply the same op to the same inputs with the same attributes (random
    draws excepted: each draws its own numbers)."""
    seen: dict = {}
    sub: dict = {}
    rand = _random_nodes(g)
    keep = []
    for n in g.nodes:
        if sub:
            n.inputs = tuple(_sub1(x, sub) for x in n.inputs)
        k = None if n.id in rand or n.op.category == "random" else _key(n)
        first = seen.get(k) if k is not None else None
        if first is not None:
            for a, b in zip(n.outputs, first.outputs):
                sub[a.id] = b
            continue
        if k is not None:
            seen[k] = n
        keep.append(n)
    g.nodes = keep
    _substitute(g, sub)
    return g


def _sub1(x, sub):
    if isinstance(x, list):
        return [sub.get(e.id, e) for e in x]
    return sub.get(x.id, x) if isinstance(x, Value) else x


def fold_constants(g):
    """Evaluate, once, nodes whose inputs are all constants (or that have no inputs, like
    ``zeros``), random draws excepted; their outputs become constant inputs of the graph."""
    rand = _random_nodes(g)
    keep = []
    sub: dict = {}
    for n in g.nodes:
        if sub:
            n.inputs = tuple(_sub1(x, sub) for x in n.inputs)
        vals = list(n.input_values())
        if n.id in rand or n.op.category == "random" or not all(v.const is not None for v in vals):
            keep.append(n)
            continue

        def arg(x):
            if isinstance(x, list):
                return [e.const for e in x]
            return x.const if isinstance(x, Value) else x

        with _ag.no_grad():
            r = _dispatch.apply(n.op, [arg(x) for x in n.inputs], dict(n.attrs))
        for o, t in zip(n.outputs, r if n.op.outputs is not None else (r,)):
            c = g.new_value(o.shape, o.dtype, o.device, const=_wrap(t._buf, t.shape, t.dtype, t.device),
                            name=f"folded {n.op.name}")
            g.inputs.append(c)
            sub[o.id] = c
    g.nodes = keep
    _substitute(g, sub)
    return g


#: ops whose kernels may return a view of their input (numpy on cpu does)
VIEWS = frozenset({"reshape", "permute_dims", "matrix_transpose", "expand_dims", "squeeze", "broadcast_to",
                   "getitem", "flip", "moveaxis", "swapaxes", "real", "imag", "astype", "unstack", "diagonal"})


def plan_memory(g):
    """Assign storage slots: a value whose last use is node k lends its slot to an output of a
    later node (of node k itself for element-wise ops, which may write in place) with the same
    device, dtype and byte size; an input of a view-like op (:data:`VIEWS`: its kernel may return
    a view) lives as long as the view. Graph inputs, constants and results keep their own buffers
    (slot None). ``g.plan`` reports ``planned_bytes`` (all slots), ``unplanned_bytes`` (one buffer
    per intermediate value) and ``eager_peak_bytes`` (intermediates alive at once when each is
    freed after its last use, as reference counting does)."""
    results = g.live_values()
    last: dict = {}
    for k, n in enumerate(g.nodes):
        for v in n.input_values():
            last[v.id] = k
    for n in reversed(g.nodes):  # a view's storage is its input's: the input lives as long as the view
        if n.op.name in VIEWS:
            end = max((last.get(o.id, -1) for o in n.outputs), default=-1)
            for v in n.input_values():
                last[v.id] = max(last.get(v.id, -1), end)
    free: dict = {}       # (device, dtype, nbytes) -> [slot]
    slot_bytes: list = []
    slots: dict = {}
    unplanned = live = peak = 0
    for v in g.inputs:
        v.slot = None
    for k, n in enumerate(g.nodes):
        dying = [v for v in n.input_values() if last.get(v.id) == k and v.slot is not None]
        inplace = n.op.category == "elementwise"
        if inplace:
            _release(dying, free)
        for o in n.outputs:
            o.slot = None
            if o.id in results or o.id not in last:
                continue
            nb = o.nbytes
            unplanned += nb
            live += nb
            peak = max(peak, live)
            pool = free.get((o.device, o.dtype, nb))
            if pool:
                o.slot = pool.pop()
            else:
                o.slot = len(slot_bytes)
                slot_bytes.append(nb)
            slots[o.id] = o.slot
        if not inplace:
            _release(dying, free)
        for v in {id(v): v for v in n.input_values() if last.get(v.id) == k and v.slot is not None}.values():
            live -= v.nbytes
    g.plan = {"slots": slots, "slot_bytes": slot_bytes, "planned_bytes": sum(slot_bytes),
              "unplanned_bytes": unplanned, "eager_peak_bytes": peak}
    return g


def _release(values, free) -> None:
    done = set()
    for v in values:
        if v.id in done:
            continue
        done.add(v.id)
        free.setdefault((v.device, v.dtype, v.nbytes), []).append(v.slot)


#: name -> pass, in the order :func:`run` applies them by default
PASSES = {"fold_constants": fold_constants, "cse": cse, "dce": dce, "plan_memory": plan_memory}


def run(g, names=None):
    for name in (PASSES if names is None else names):
        g = PASSES[name](g)
    return g
