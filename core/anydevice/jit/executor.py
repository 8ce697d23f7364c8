"""The planned executor: a captured graph replayed without per-op dispatch.

:class:`Executable` resolves everything once, when a graph variant is compiled: each backend's
claims (:mod:`anydevice.jit.partition`, the ``anydevice_compile_graph`` hook), and for every other
node the native kernel the dispatcher would pick (``backend.kernels.lookup(op, compute)``), its
attributes, its pre-made scalar buffers and, for ``out=True`` kernels, the output shape and dtype.
It then writes the replay as one straight-line Python function (kept in ``source`` for
``explain()``): a call per kernel, a call per claimed part, ``del`` after each value's last use
(so intermediates are freed as early as in eager mode). Nodes without a native kernel run through
``dispatch.apply`` -- decomposition and CPU fallback as in eager mode -- and are counted in
``stats["dispatched"]``. An op's value check (index and label bounds) is not run again: capture
recorded its ops as nodes and its host read-back as one of the graph's flags, read after the replay.

The first replay runs interpreted: each claimed part's results are checked (count, shape, dtype);
a part that raises or returns the wrong buffers is reported (a PluginError naming the plugin and
the hook, as a warning) and its nodes are planned like the rest. While the profiler (or any
dispatcher observer) is attached, replays run interpreted and report every kernel (path
``"compiled"``) and every claimed part (path ``"fused"``, one row per launch) to the observers.

Buffers follow the core's invariant: a value's buffer is never written after it was produced, so
kernels that return views of their inputs (``reshape``) stay correct.
"""
from __future__ import annotations

import heapq
import time
import warnings

from anydevice.base.errors import PluginError
from anydevice.engine import dispatch
from anydevice.engine import graph as _ag
from anydevice.engine.tensor import _wrap

BACKENDS = ("auto", "planned", "eager")
HOOK = "anydevice_compile_graph"


class CompileWarning(UserWarning):
    """A backend's graph compiler failed; the graph runs on the planned executor instead."""


class Claim:
    """Nodes a backend runs itself: ``executable(ctx, buffers) -> buffers`` over the boundary."""

    __slots__ = ("ids", "executable", "inputs", "outputs", "plugin", "checked")

    def __init__(self, ids, executable, inputs, outputs, plugin):
        self.ids, self.executable, self.inputs, self.outputs, self.plugin = ids, executable, inputs, outputs, plugin
        self.checked = False

    def __repr__(self) -> str:
        return f"<Claim of {self.plugin}: {len(self.ids)} nodes, {len(self.inputs)} in, {len(self.outputs)} out>"


def report(plugin: str, what: str) -> PluginError:
    """The PluginError of a failed claim, also issued as a :class:`CompileWarning`."""
    err = PluginError(f"plugin {plugin}: {HOOK}() {what}; those nodes run on the planned executor instead")
    warnings.warn(str(err), CompileWarning, stacklevel=3)
    return err


class FusedOp:
    """What the profiler sees for one claimed part: a name, its element count as flops."""

    __slots__ = ("name", "attrs", "flops", "_work")

    def __init__(self, claim, nodes):
        self.name = "fused[" + "+".join(n.op.name for n in nodes) + "]"
        self.attrs = {}
        self._work = float(sum(_size(o.shape) for n in nodes for o in n.outputs))
        self.flops = lambda shapes, attrs: self._work


def _size(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _device_of(node):
    if node.outputs:
        return node.outputs[0].device
    return next(node.input_values()).device


def _compute0(node):
    c = node.compute
    return c[0] if type(c) is tuple else c


def _kw(attrs) -> dict:
    """A node's attributes as its kernel takes them (no ``device``)."""
    return {a: v for a, v in attrs.items() if a != "device"}


class _Scalar:
    """A Python scalar input of a node, as the 0-d buffer the dispatcher would have made of it."""

    __slots__ = ("name", "buf")
    _count = [0]

    def __init__(self, buf):
        _Scalar._count[0] += 1
        self.name, self.buf = f"p{_Scalar._count[0]}", buf


def _scalar_buffers(node, dev):
    """The node's inputs with each Python scalar made a 0-d buffer of its compute dtype (after
    rounding to the dtype it adopts, the tensors' own, as :func:`dispatch.apply` does); None when
    that cannot be resolved here (the node is then dispatched)."""
    if all(hasattr(x, "producer") or isinstance(x, list) for x in node.inputs):
        return node.inputs
    vals = [v for v in node.input_values()]
    c = node.compute
    if not vals or c is None or node.op.variadic:
        return None
    ref = next((v.dtype for v in vals if v.dtype.name != "bool"), vals[0].dtype)
    out = []
    for j, x in enumerate(node.inputs):
        if hasattr(x, "producer"):
            out.append(x)
            continue
        want = c[j] if type(c) is tuple else c
        try:
            out.append(_Scalar(dispatch._scalar_tensor(x, want, dev, ref)._buf))
        except (TypeError, ValueError, OverflowError):
            return None
    return tuple(out)


class _Dispatched:
    """A node run through ``dispatch.apply`` (eager semantics), buffers in and out."""

    __slots__ = ("op", "attrs", "specs", "device", "multi")

    def __init__(self, node):
        self.op, self.attrs, self.device = node.op, node.attrs, _device_of(node)
        self.specs = [_spec(x) for x in node.inputs]
        self.multi = node.op.outputs is not None

    def __call__(self, *bufs):
        it = iter(bufs)
        ins = [_tensor(s, it) for s in self.specs]
        with _ag.no_grad():
            r = dispatch.apply(self.op, ins, dict(self.attrs))
        return tuple(t._buf for t in r) if self.multi else r._buf


def _spec(x):
    if isinstance(x, list):
        return [(v.shape, v.dtype, v.device) for v in x]
    if hasattr(x, "producer"):
        return (x.shape, x.dtype, x.device)
    return ("scalar", x)


def _tensor(spec, it):
    if isinstance(spec, list):
        return [_wrap(next(it), *s) for s in spec]
    if spec[0] == "scalar":
        return spec[1]
    return _wrap(next(it), *spec)


class Executable:
    """One graph variant planned for its devices, with the parts backends claimed
    (:func:`anydevice.jit.partition.build` makes one); ``run(buffers)`` replays it.

    ``buffers``: one per ``graph.inputs`` (constants included). Returns one buffer per
    ``graph.results()``: the outputs, then the write-back values, then the flag values.
    ``backend``: ``"auto"``/``"planned"`` (native kernels called directly), ``"eager"`` (every node
    through the dispatcher).
    """

    def __init__(self, graph, backend: str = "auto", claimed=(), errors=()):
        if backend not in BACKENDS:
            raise ValueError(f"anydevice.jit.compile(): backend {backend!r} is not one of {', '.join(BACKENDS)}")
        t0 = time.perf_counter()
        self.graph, self.backend = graph, backend
        self.errors: list = list(errors)
        self.items, errs = schedule(graph, list(claimed))
        self.errors += errs
        self._ns: dict = {}
        self._random = {n.id for _, _, nodes, _ in getattr(graph, "random", ()) for n, _ in nodes}
        self._plan()
        self.compile_time = time.perf_counter() - t0

    def __call__(self, buffers: list) -> list:
        return self.run(buffers)

    @property
    def fused_kernels(self) -> int:
        return self.stats["fused_kernels"]

    def explain(self) -> str:
        """How the graph runs: the counts, each claimed part, the errors, the replay function."""
        st = self.stats
        lines = [f"{st['nodes']} nodes: {st['native']} native kernels called directly, {st['dispatched']} through the "
                 f"dispatcher, {st['claimed_nodes']} in {st['fused_kernels']} parts claimed by backends"]
        for s in self.steps:
            if s[0] == "claim":
                c = s[1]
                lines.append(f"  {s[3].name} ({c.plugin}): {len(c.inputs)} inputs, {len(c.outputs)} outputs")
            elif s[0] == "dispatch":
                lines.append(f"  dispatched: {s[1].op.name} on {s[2]}")
        lines += [f"  error: {e}" for e in self.errors]
        return "\n".join(lines) + "\n" + self.source

    # --- planning -----------------------------------------------------------------------
    def _plan(self) -> None:
        """Resolve every item (kernel, attributes, scalars), then write the replay function."""
        self.steps = [self._step(it) for it in self.items]
        self.stats = {"nodes": len(self.graph.nodes), "native": sum(s[0] == "native" for s in self.steps),
                      "dispatched": sum(s[0] == "dispatch" for s in self.steps),
                      "fused_kernels": sum(s[0] == "claim" for s in self.steps),
                      "claimed_nodes": sum(len(s[1].ids) for s in self.steps if s[0] == "claim"),
                      "plugin_errors": len(self.errors)}
        self.source, self._replay = self._generate()
        self._interpreted = any(s[0] == "claim" and not s[1].checked for s in self.steps)

    def _step(self, item):
        if isinstance(item, Claim):
            nodes = [n for n in self.graph.nodes if n.id in item.ids]
            return ("claim", item, _device_of(nodes[0]), FusedOp(item, nodes))
        node = item
        dev = _device_of(node)
        k = None if self.backend == "eager" or node.op.data_shape is not None else \
            dev._backend.kernels.lookup(node.op.name, _compute0(node))
        ins = _scalar_buffers(node, dev) if k is not None else None
        if ins is None:
            return ("dispatch", node, dev, _Dispatched(node))
        return ("native", node, dev, k, _kw(node.attrs), node.id in self._random, ins)

    def _name(self, v) -> str:
        if isinstance(v, _Scalar):
            self._ns[v.name] = v.buf
            return v.name
        if v.const is not None:
            name = f"c{v.id}"
            self._ns[name] = v.const._buf
            return name
        return f"v{v.id}"

    def _args(self, inputs) -> str:
        parts = []
        for x in inputs:
            if isinstance(x, list):
                parts.append("[" + ", ".join(self._name(v) for v in x) + "]")
            else:
                parts.append(self._name(x))
        return ", ".join(parts)

    def _generate(self):
        ns, g = self._ns, self.graph
        live = g.live_values()
        last = {}
        for k, s in enumerate(self.steps):
            for v in self._reads(s):
                last[v.id] = k
        lines = ["def replay(args):"]
        for j, v in enumerate(g.inputs):
            if v.const is None:
                lines.append(f"    v{v.id} = args[{j}]")
        ctxs: dict = {}
        for k, s in enumerate(self.steps):
            dev = s[2]
            cx = ctxs.setdefault(dev, f"ctx{len(ctxs)}")
            ns[cx] = dev._ctx
            lines += self._emit(k, s, cx)
            dead = [f"v{v.id}" for v in dict.fromkeys(self._reads(s)) if last.get(v.id) == k and v.id not in live
                    and v.const is None]
            if dead:
                lines.append("    del " + ", ".join(dead))
        outs = g.results()
        lines.append("    return [" + ", ".join(self._name(v) for v in outs) + "]")
        src = "\n".join(lines) + "\n"
        exec(compile(src, f"<anydevice.jit replay of {len(g.nodes)} nodes>", "exec"), ns)  # noqa: S102
        return src, ns["replay"]

    def _reads(self, s):
        if s[0] == "claim":
            return list(s[1].inputs)
        return list(s[1].input_values())

    def _emit(self, k, s, cx) -> list:
        ns = self._ns
        if s[0] == "claim":
            claim = s[1]
            ns[f"x{k}"] = claim.executable
            outs = "".join(f"v{o.id}, " for o in claim.outputs)
            call = f"x{k}({cx}, [{self._args(claim.inputs)}])"
            return [f"    {outs} = {call}" if outs else f"    {call}"]
        node = s[1]
        outs = ", ".join(f"v{o.id}" for o in node.outputs)
        if s[0] == "dispatch":
            ns[f"d{k}"] = s[3]
            vals = [x for x in node.inputs if hasattr(x, "producer") or isinstance(x, list)]
            return [f"    {outs}{',' if len(node.outputs) > 1 else ''} = d{k}({self._args(vals)})"]
        kern, kw = s[3], s[4]
        ns[f"k{k}"] = kern.fn
        args = self._args(s[6])
        extra = f", **a{k}" if kw else ""
        if kw:
            ns[f"a{k}"] = kw
        if s[5]:  # a random node: its key and offset attributes are set before each replay
            ns["_kw"], ns[f"n{k}"] = _kw, node.attrs
            extra = f", **_kw(n{k})"
        elif s[2]._backend.has("replayable"):  # the runtime may record this call and replay its launches
            ns[f"k{k}"], extra = s[2]._backend.runtime.replayable(kern.fn, kw), ""
        if not kern.out:
            return [f"    {outs}{',' if len(node.outputs) > 1 else ''} = k{k}({cx}{', ' if args else ''}{args}{extra})"]
        dev = s[2]
        be = dev._backend
        be_name = f"e{dev.type}{dev.index}"
        # a runtime that keeps its own storage allocates itself (what Backend.empty calls)
        ns[be_name] = be.runtime.empty if be.own_storage else be.empty
        index = be.phys(dev.index) if be.own_storage else dev.index
        allocs = []
        for o in node.outputs:
            ns[f"s{o.id}"] = (o.shape, o.dtype)
            allocs.append(f"{be_name}({index}, *s{o.id})")
        if len(node.outputs) == 1:
            return [f"    {outs} = {allocs[0]}", f"    k{k}({cx}, {outs}{', ' if args else ''}{args}{extra})"]
        return [f"    t{k} = ({', '.join(allocs)})", f"    k{k}({cx}, t{k}{', ' if args else ''}{args}{extra})",
                f"    {outs} = t{k}"]

    # --- running ------------------------------------------------------------------------
    def run(self, buffers: list) -> list:
        """Replay the graph on ``buffers`` (see the class docstring)."""
        if self._interpreted or dispatch._observers:
            return self._interpret(buffers)
        return self._replay(buffers)

    def _interpret(self, buffers: list) -> list:
        """One replay item by item: checks unchecked claims, reports to the dispatcher's observers."""
        g, env = self.graph, {}
        for v, b in zip(g.inputs, buffers):
            env[v.id] = b if b is not None or v.const is None else v.const._buf
        observe = list(dispatch._observers)
        for s in self.steps:
            t0 = time.perf_counter()
            if s[0] == "claim" and not self._run_claim(s, env):
                return self._replan(buffers)
            if s[0] != "claim":
                self._run_node(s, env)
            if observe and s[0] != "dispatch":
                self._observe(observe, s, env, time.perf_counter() - t0)
        if self._interpreted:
            for s in self.steps:
                if s[0] == "claim":
                    s[1].checked = True
            self._interpreted = False
        outs = g.results()
        return [env[v.id] if v.const is None else v.const._buf for v in outs]

    def _get(self, env, x):
        if isinstance(x, list):
            return [self._get(env, e) for e in x]
        if isinstance(x, _Scalar):
            return x.buf
        return x.const._buf if x.const is not None else env[x.id]

    def _run_node(self, s, env) -> None:
        node = s[1]
        if s[0] == "dispatch":
            vals = [x for x in node.inputs if hasattr(x, "producer") or isinstance(x, list)]
            r = s[3](*[self._get(env, x) for x in vals])
        else:
            kern, kw, dev = s[3], _kw(node.attrs) if s[5] else s[4], s[2]
            bufs = [self._get(env, x) for x in s[6]]
            if kern.out:
                be = dev._backend
                r = tuple(be.empty(dev.index, o.shape, o.dtype) for o in node.outputs)
                kern.fn(dev._ctx, r if len(r) > 1 else r[0], *bufs, **kw)
            else:
                r = kern.fn(dev._ctx, *bufs, **kw)
        if len(node.outputs) == 1 and not (s[0] == "native" and s[3].out):
            r = (r,)
        for o, b in zip(node.outputs, r):
            env[o.id] = b

    def _run_claim(self, s, env) -> bool:
        claim, dev = s[1], s[2]
        ins = [self._get(env, v) for v in claim.inputs]
        if claim.checked:
            outs = claim.executable(dev._ctx, ins)
        else:
            try:
                outs = claim.executable(dev._ctx, ins)
                what = _bad_outputs(outs, claim.outputs)
            except Exception as e:  # noqa: BLE001 - reported, then the nodes run planned
                what = f"raised {type(e).__name__}: {e}"
            if what:
                self.errors.append(report(claim.plugin, f"executable {_fn_name(claim.executable)} {what}"))
                self._rejected = claim
                return False
        for v, b in zip(claim.outputs, outs):
            env[v.id] = b
        return True

    def _replan(self, buffers):
        """Drop the claim that failed, plan its nodes like the rest, and replay from the start."""
        bad = self._rejected
        claimed = [it for it in self.items if isinstance(it, Claim) and it is not bad]
        self.items, _ = schedule(self.graph, claimed)
        self._ns = {}
        self._plan()
        self.stats["plugin_errors"] = len(self.errors)
        return self.run(buffers)

    def _observe(self, observers, s, env, seconds) -> None:
        dev = s[2]
        if s[0] == "claim":
            claim = s[1]
            ins = [_wrap(self._get(env, v), v.shape, v.dtype, v.device) for v in claim.inputs]
            outs = [_wrap(env[v.id], v.shape, v.dtype, v.device) for v in claim.outputs]
            op, path, out = s[3], "fused", outs[0] if outs else None
            ins += outs[1:]
        else:
            node = s[1]
            ins = [[_wrap(self._get(env, e), e.shape, e.dtype, e.device) for e in x] if isinstance(x, list)
                   else _wrap(self._get(env, x), x.shape, x.dtype, x.device) for x in node.inputs]
            o = node.outputs[0]
            op, path, out = node.op, "compiled", _wrap(env[o.id], o.shape, o.dtype, o.device)
        if out is None:
            return
        for obs in observers:
            obs(op, dev, path, seconds, ins, out)


def _fn_name(fn) -> str:
    return f"{getattr(fn, '__module__', None) or '?'}.{getattr(fn, '__qualname__', None) or type(fn).__name__}"


def _bad_outputs(outs, values) -> str | None:
    if not isinstance(outs, (list, tuple)):
        return f"returned {type(outs).__name__}, expected a list of {len(values)} buffers"
    if len(outs) != len(values):
        return f"returned {len(outs)} buffers for the {len(values)} values leaving its part"
    for b, v in zip(outs, values):
        shape, dt = getattr(b, "shape", None), getattr(getattr(b, "dtype", None), "name", None)
        if shape is None or tuple(shape) != tuple(v.shape) or dt != v.dtype.name:
            return (f"returned {type(b).__name__} of shape {shape} and dtype {dt} for %{v.id}, "
                    f"expected shape {tuple(v.shape)} and dtype {v.dtype.name}")
    return None


def schedule(graph, claimed: list) -> tuple[list, list]:
    """``(items, errors)``: the nodes not claimed and the claims, in an order where each runs
    after what it reads (graph order where possible); claims that would make a cycle are rejected."""
    errors = []
    while True:
        items, stuck = _order(graph, claimed)
        if not stuck:
            return items, errors
        bad = [c for c in claimed if any(c is s for s in stuck)]
        errors += [report(c.plugin, f"claims nodes {sorted(c.ids)[:8]} that are not convex (a path leaves them "
                                    "and comes back)") for c in bad]
        claimed = [c for c in claimed if all(c is not b for b in bad)]


def _order(graph, claimed: list) -> tuple[list, list]:
    owner = {}
    for c in claimed:
        for i in c.ids:
            owner[i] = c
    items, key, pos = [], {}, {}
    for k, n in enumerate(graph.nodes):
        it = owner.get(n.id, n)
        if id(it) not in key:
            key[id(it)] = len(items)
            items.append(it)
        pos[n.id] = k
    producer = {o.id: owner.get(n.id, n) for n in graph.nodes for o in n.outputs}
    deps = {id(it): set() for it in items}
    users: dict = {id(it): set() for it in items}
    for n in graph.nodes:
        it = owner.get(n.id, n)
        for v in n.input_values():
            p = producer.get(v.id)
            if p is not None and p is not it:
                deps[id(it)].add(id(p))
                users[id(p)].add(id(it))
    ready = [(key[id(it)], id(it)) for it in items if not deps[id(it)]]
    heapq.heapify(ready)
    by = {id(it): it for it in items}
    done = []
    while ready:
        _, i = heapq.heappop(ready)
        done.append(by[i])
        for u in users[i]:
            deps[u].discard(i)
            if not deps[u]:
                heapq.heappush(ready, (key[u], u))
    if len(done) == len(items):
        return done, []
    left = {id(it) for it in done}
    return done, [it for it in items if id(it) not in left]
