"""``anydevice.jit.compile``: trace a function once per input signature, then replay its graph."""
from __future__ import annotations

import collections
import contextlib
import functools
import os
import threading
import time
import warnings

import numpy as np

from anydevice.engine import autocast as _autocast
from anydevice.engine import graph as _ag
from anydevice.engine.tensor import Tensor, _wrap
from anydevice.jit import capture as _capture
from anydevice.jit import check as _check
from anydevice.jit import passes as _passes
from anydevice.jit import replay as _replay
from anydevice.jit import state as _state
from anydevice.jit.ir import Graph

__all__ = ["compile", "to_static", "eager", "CompiledFunction", "JitWarning"]

_BACKENDS = ("auto", "eager", "planned")
_PLAIN = (bool, int, float, complex, str, type(None))
_eager = threading.local()


class JitWarning(UserWarning):
    """A compiled function runs eagerly (too many variants) or fell back for one call."""


@contextlib.contextmanager
def eager():
    """Run compiled functions called inside this block eagerly (no tracing, no replay)."""
    prev = getattr(_eager, "on", False)
    _eager.on = True
    try:
        yield
    finally:
        _eager.on = prev


class Variant:
    """One traced graph: its executor, how to feed its inputs and where its results go."""

    __slots__ = ("graph", "run", "feeds", "spec", "statics", "counters", "n_out", "n_wb", "trace_s", "compile_s",
                 "guard", "holds", "roots")

    def __init__(self, graph, run, feeds, spec, statics, counters, trace_s, compile_s):
        self.graph, self.run, self.feeds, self.spec, self.statics = graph, run, feeds, spec, statics
        self.counters, self.trace_s, self.compile_s = counters, trace_s, compile_s
        self.n_out = len(graph.outputs)
        self.n_wb = sum(1 for v, _ in graph.writebacks if v is not None)


def _signature(flat, grad_mode, amp):
    key = []
    for x in flat:
        if isinstance(x, Tensor):
            key.append(_state.tensor_meta(x))
        elif type(x) in _PLAIN:
            key.append((type(x), x))
        else:
            key.append(("obj", id(x)))
    return tuple(key), grad_mode, amp


class CompiledFunction:
    """A function traced into graphs: ``.graphs`` (the cached variants), ``.last_graph``,
    ``.stats`` and ``.explain()``."""

    def __init__(self, fn, check: bool, backend: str, max_variants: int, passes):
        if not callable(fn):
            raise TypeError(f"anydevice.jit.compile(): fn must be callable, not {type(fn).__name__}")
        if backend not in _BACKENDS:
            raise ValueError(f"anydevice.jit.compile(): backend must be one of {', '.join(map(repr, _BACKENDS))}, "
                             f"not {backend!r}")
        if isinstance(max_variants, bool) or not isinstance(max_variants, int) or max_variants < 1:
            raise ValueError(f"anydevice.jit.compile(): max_variants must be an int >= 1, not {max_variants!r}")
        unknown = [p for p in (passes or ()) if p not in _passes.PASSES]
        if unknown:
            raise ValueError(f"anydevice.jit.compile(): unknown pass(es) {unknown}; allowed: {list(_passes.PASSES)}")
        self.fn, self.backend, self.max_variants = fn, backend, max_variants
        self.check = bool(check) or os.environ.get("ANYDEVICE_JIT_CHECK", "") not in ("", "0")
        self.passes = list(_passes.PASSES) if passes is None else list(passes)
        self.name = getattr(fn, "__qualname__", None) or type(fn).__name__
        self._variants: collections.OrderedDict = collections.OrderedDict()
        self._recent: list = []  # (key, variant), most recently used first
        self._counter_keys: set = set()
        self._warned = False
        self._changes = 0
        self.last_graph = None
        self.stats = {"calls": 0, "traces": 0, "replays": 0, "eager_calls": 0, "flag_fallbacks": 0,
                      "checks": 0, "trace_s": 0.0, "compile_s": 0.0, "fused_kernels": 0, "nodes": 0}
        functools.update_wrapper(self, fn, updated=())  # name and docstring; never the wrapped object's __dict__

    @property
    def graphs(self) -> list:
        return [v.graph for v in self._variants.values()]

    def explain(self) -> str:
        s = self.stats
        lines = [f"{self.name}: {s['calls']} calls, {s['traces']} traces, {s['replays']} replays, "
                 f"{s['eager_calls']} eager calls, {s['flag_fallbacks']} flag fallbacks; {len(self._variants)} of at "
                 f"most {self.max_variants} variants; backend {self.backend}; passes {', '.join(self.passes) or 'none'}"]
        for k, v in enumerate(self._variants.values()):
            g = v.graph
            plan = g.plan
            mem = (f"; memory: {plan['planned_bytes']} B planned, {plan['unplanned_bytes']} B unplanned, "
                   f"{plan['eager_peak_bytes']} B eager peak" if "planned_bytes" in plan else "")
            lines.append(f"  variant {k}: {len(g.nodes)} nodes, {len(g.inputs)} inputs, {len(g.outputs)} outputs, "
                         f"{len(g.writebacks)} write-backs, {len(g.flags)} flags, {len(g.random)} random draws; "
                         f"traced in {v.trace_s * 1e3:.1f} ms, compiled in {v.compile_s * 1e3:.1f} ms{mem}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<compiled {self.name}: {len(self._variants)} graph(s)>"

    def __get__(self, obj, objtype=None):  # a compiled method binds like a function
        if obj is None:
            return self
        return functools.partial(self.__call__, obj)

    # --- calling ------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        self.stats["calls"] += 1
        if getattr(_eager, "on", False) or _capture.tracing():
            return self.fn(*args, **kwargs)  # inside an outer trace: its ops are the outer graph's
        flat: list = []
        _state.flatten((args, kwargs), flat)
        mode = _autocast.current()
        amp = None if mode is None else (mode.device_type, mode.dtype)
        sig = _signature(flat, _ag.is_grad_enabled(), amp)
        # most recently used first; a guard is a flat list of checks. A list, not the dict: the keys
        # (the state's digest) are long tuples, and iterating an OrderedDict hashes each key
        recent = self._recent
        for k, (key, v) in enumerate(recent):
            if key[0] == sig and v.holds():
                if k:
                    recent.insert(0, recent.pop(k))
                return self._replay(v, args, kwargs, flat)
        roots_guard: list = []
        roots = ([x for x in flat if not isinstance(x, Tensor) and type(x) not in _PLAIN]
                 + _state.roots_of(self.fn, roots_guard))
        pre = _state.walk(roots, guard=roots_guard)
        key = (sig, pre.key_tuple(self._counter_keys))
        if len(self._variants) >= self.max_variants:
            if not self._warned:
                self._warned = True
                warnings.warn(f"anydevice.jit: {self.name} was traced for {self.max_variants} different signatures "
                              f"(max_variants); calls with new signatures run eagerly. Pass a larger max_variants= "
                              f"or keep shapes, dtypes and Python arguments fixed", JitWarning, stacklevel=2)
            self.stats["eager_calls"] += 1
            return self.fn(*args, **kwargs)
        return self._trace(key, args, kwargs, flat, roots, pre)

    def _trace(self, key, args, kwargs, flat, roots, pre):
        before = _capture.slot_states(pre, flat)
        t0 = time.perf_counter()
        tr = _capture.Tracer(Graph(), flat, pre)
        try:
            result = _capture.run_traced(tr, self.fn, args, kwargs)
            post = _state.walk(roots)
            g, spec, statics, change, counters = _capture.finish(tr, self.name, result, flat, pre, before, post)
        except _capture.TraceError:
            _capture.restore(tr, before, pre, flat)
            raise
        t1 = time.perf_counter()
        self.stats["traces"] += 1
        self.stats["trace_s"] += t1 - t0
        if change is not None:  # first calls that build Python state (an optimizer's first step): trace again
            self._changes += 1
            if self._changes > 2:
                _capture.restore(tr, before, pre, flat)
                raise _capture.TraceError(
                    f"{self.name}(): changes the structure of Python state on every call ({change}); a replayed "
                    f"graph cannot repeat that. Keep such state outside the compiled function, or "
                    f"{_capture._EAGER_HINT}")
            return result
        self._changes = 0
        for k, _ref in counters:
            self._counter_keys.add(k)
        g = _passes.run(g, self.passes)
        run = self._executor(g)
        t2 = time.perf_counter()
        self.stats["compile_s"] += t2 - t1
        self.stats["nodes"] = len(g.nodes)
        feeds = _feeds(g, tr)
        v = Variant(g, run, feeds, spec, statics, [ref for _, ref in counters], t1 - t0, t2 - t1)
        v.guard = pre.guard_without(self._counter_keys)
        v.holds = _state.guard_function(v.guard)
        v.roots = roots
        key = (key[0], pre.key_tuple(self._counter_keys)) if counters else key
        old = self._variants.get(key)
        self._variants[key] = v
        self._recent = [(key, v)] + [e for e in self._recent if e[1] is not old]
        self.last_graph = g
        return result

    def _executor(self, g):
        if self.backend != "eager":
            try:
                from anydevice.jit import partition as _partition
            except ImportError:  # the planned executor is not part of this build
                _partition = None
            if _partition is not None:
                run = _partition.build(g, backend=self.backend)
                self.stats["fused_kernels"] += getattr(run, "fused_kernels", 0)
                return run
        return _replay.build(g)

    def _inputs(self, v, flat):
        bufs = []
        for kind, what in v.feeds:
            if kind == "arg":
                bufs.append(flat[what]._buf)
            elif kind == "const":
                bufs.append(what)
            else:
                b = what.read(flat)
                if b is None:
                    raise RuntimeError(f"anydevice.jit: {self.name}(): the captured tensor {what} is gone; "
                                       "it was there when the function was traced")
                bufs.append(b)
        return bufs

    def _execute(self, v, flat, offsets: list):
        """Run the graph; ``offsets`` receives (generator, offset before) for each draw."""
        g = v.graph
        bufs = self._inputs(v, flat)
        for gen, blocks, nodes, _ in g.random:
            offsets.append((gen, gen.offset))
            key, off = gen.reserve(blocks)
            for node, delta in nodes:
                node.attrs["key"], node.attrs["offset"] = key, off + delta
        with _ag.no_grad(), _no_autocast():
            return v.run(bufs)

    def _replay(self, v, args, kwargs, flat):
        g = v.graph
        offsets = []
        try:
            out = self._execute(v, flat, offsets)
            failed = next((what for (fv, expected, what), b in zip(g.flags, out[v.n_out + v.n_wb:])
                           if not _holds(fv, b, expected)), None)
        except Exception as e:  # a kernel refused what a value check would have (an index out of range)
            failed = e
        if failed is not None:  # nothing was written back: undo the draws, run the call as eager does
            for gen, off in reversed(offsets):
                gen.set_state(_gen_state(gen, off))
            self.stats["flag_fallbacks"] += 1
            result = self.fn(*args, **kwargs)
            if isinstance(failed, Exception):
                warnings.warn(f"anydevice.jit: replaying {self.name} failed ({type(failed).__name__}: {failed}) "
                              "where eager execution succeeded; this call ran eagerly", JitWarning, stacklevel=3)
            return result
        if self.check:
            self.stats["checks"] += 1
            for gen, off in reversed(offsets):
                gen.set_state(_gen_state(gen, off))
            expected = self.fn(*args, **kwargs)
            _check.compare(self.name, v, out, expected, flat)
            self._write(v, out, flat, counters=False)  # eager counted the counters already
        else:
            self._write(v, out, flat, counters=True)
        self.stats["replays"] += 1
        return self._outputs(v, out)

    def _write(self, v, out, flat, counters: bool) -> None:
        wb = iter(out[v.n_out:v.n_out + v.n_wb])
        for value, target in v.graph.writebacks:
            target.write(flat, value, None if value is None else next(wb))
        if counters:
            for ref in v.counters:
                ref.set(flat, ref.get(flat) + 1)

    def _outputs(self, v, out):
        vals = iter(v.graph.outputs)
        bufs = iter(out[:v.n_out])
        leaves = []
        for s in v.statics:
            if s is None:
                val = next(vals)
                leaves.append(_wrap(next(bufs), val.shape, val.dtype, val.device))
            else:
                leaves.append(s)
        return _state.unflatten(v.spec, leaves)


def _holds(v, buf, expected) -> bool:
    host = np.asarray(v.device._backend.to_host(buf, v.device.index, v.shape, v.dtype))
    if host.dtype.kind == "b" and host.shape == () and getattr(expected, "shape", None) == ():  # a check verdict
        return bool(host) == bool(expected)
    return bool(np.array_equal(host, expected, equal_nan=host.dtype.kind in "fc"))


def _gen_state(gen, offset):
    return np.array([gen.initial_seed(), offset], dtype="<u8").view(np.uint8)


@contextlib.contextmanager
def _no_autocast():
    if _autocast.current() is None:
        yield
        return
    _autocast.push(None)
    try:
        yield
    finally:
        _autocast.pop()


def _feeds(g, tr) -> list:
    """How to get each graph input's buffer at a replay: ("arg", position among the flat
    arguments), ("const", buffer) or ("target", Target)."""
    arg_pos = [k for k, t in enumerate(tr.args) if isinstance(t, Tensor)]
    src = {v.id: target for v, target, _, _ in tr.sources}
    feeds = []
    for k, v in enumerate(g.inputs):
        if v.const is not None:
            feeds.append(("const", v.const._buf))
        elif k < g.n_args:
            feeds.append(("arg", arg_pos[k]))
        else:
            feeds.append(("target", src[v.id]))
    return feeds


def compile(fn=None, *, check: bool = False, backend: str = "auto", max_variants: int = 8, passes=None):
    """Trace ``fn`` into a graph on its first call for each input signature and replay the graph
    afterwards; usable as ``@compile`` or ``@compile(check=True)``.

    The signature is the argument tensors' shapes, dtypes, devices and ``requires_grad``, the
    Python values among the arguments, the grad mode and the Python state ``fn`` reaches (tensor
    shapes, plain values such as a learning rate or ``module.training``): a new one traces again, up
    to ``max_variants`` graphs (looked up most recently used first); calls with yet another
    signature then run eagerly, with one warning. Python control flow runs once, at trace time; a branch on a tensor's value
    is refused at trace time with the file and line. A whole training step — forward,
    ``backward()``, optimizer step — is one graph: parameter, gradient and optimizer-state updates
    are written back after every replay, and random draws advance their generators as eager does.

    ``check=True`` (or the environment variable ``ANYDEVICE_JIT_CHECK=1``) runs the function
    eagerly alongside every replay and raises when outputs or written-back tensors differ.
    ``backend``: "auto" (the backends' graph compilers and the planned executor when available),
    "planned", or "eager" (replay node by node through the dispatcher). ``passes``: the graph
    passes to run (default all of :data:`anydevice.jit.passes.PASSES`).
    """
    def wrap(f):
        return CompiledFunction(f, check, backend, max_variants, passes)

    return wrap if fn is None else wrap(fn)


to_static = compile
