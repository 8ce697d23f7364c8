"""Tracing: run a function eagerly once, recording every top-level registry op into a Graph.

While tracing, ``anydevice.engine.dispatch`` calls :meth:`Tracer.on_op` after each top-level op
(ops inside a decomposition are part of the op that ran them). Tensors the trace did not produce
are the graph's inputs: the call's argument tensors, tensors captured from the state the function
reaches (parameters, optimizer state, leaf gradients: read again at every replay through their
reference) and constants (tensors made from host data during the trace). Reading a tensor's value
on the host (``.item()``, ``.numpy()``, ``bool(t)``, ``float(t)``, ``.tolist()``) is refused in the
user's code; inside anydevice's own value checks it becomes a *flag* (the value must read the same
after a replay). Random draws record which generator they advanced, so a replay draws anew.
"""
from __future__ import annotations

import os
import sys
import threading
import weakref

import numpy as np

from anydevice.base.errors import AnyDeviceError
from anydevice.engine import dispatch as _dispatch
from anydevice.engine import graph as _ag
from anydevice.engine.tensor import Tensor, _wrap
from anydevice.jit import state as _state
from anydevice.jit.ir import Graph
from anydevice.random.generator import Generator
from anydevice.runtime.devices import Backend

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the anydevice package
_TENSOR_PY = os.path.join(_PKG, "engine", "tensor.py")
_JIT = os.path.dirname(os.path.abspath(__file__))

_active = threading.local()


class TraceError(AnyDeviceError):
    """A compiled function does something a static graph cannot represent."""


_EAGER_HINT = ("run this function eagerly instead: do not compile it, or call it inside "
               "anydevice.jit.eager(), or move that code out of the compiled function")


def tracing() -> bool:
    """Whether this thread is tracing a function now."""
    return getattr(_active, "tracer", None) is not None


def user_frame():
    """The innermost frame outside the anydevice package (the user's code)."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_PKG):
        f = f.f_back
    return f


def where(f=None) -> str:
    f = f or user_frame()
    if f is None:
        return "<unknown>"
    line = ""
    try:
        import linecache

        line = linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
    except Exception:  # source not available
        pass
    return f"{f.f_code.co_filename}:{f.f_lineno}" + (f" ({line})" if line else "")


class Tracer:
    def __init__(self, graph: Graph, args: list, pre: _state.Walk):
        self.graph, self.args, self.pre = graph, args, pre
        self.thread = threading.get_ident()
        self.env: dict = {}      # id(buffer) -> (Value, buffer): keeps the buffers alive (ids stay unique)
        self.sources: list = []  # per captured input: (Value, Target to read it from, weakref or None)
        self.by_buf: dict = {}   # id(buffer) -> Target, for tensors reached by the walk
        self.copies: dict = {}   # id(copied buffer) -> True: device copies made during the trace
        self.draws: list = []    # (generator, key, offset, blocks)
        self.random: list = []   # (generator, blocks, [(node, offset delta)])
        for k, t in enumerate(args):
            if isinstance(t, Tensor):
                v = graph.new_value(t.shape, t.dtype, t.device, name=f"arg{k}")
                graph.inputs.append(v)
                self.env.setdefault(id(t._buf), (v, t._buf))
        graph.n_args = len(graph.inputs)
        refs = [(_state.ArgRef(k), t) for k, t in enumerate(args) if isinstance(t, Tensor)]
        refs += list(pre.slots.values())
        for ref, t in refs:
            self.by_buf.setdefault(id(t._buf), _state.Target(ref, "buf"))
            n = t._node
            if n is not None and n.op is None and n.grad is not None:
                self.by_buf.setdefault(id(n.grad._buf), _state.Target(ref, "grad"))

    # --- values -------------------------------------------------------------------------
    def value(self, t: Tensor):
        e = self.env.get(id(t._buf))
        if e is not None:
            return e[0]
        if id(t._buf) in self.copies:
            raise TraceError(f"{where()}: a device copy (.to() / to_device()) inside a compiled function is not "
                             f"captured: copy the tensors before calling it, or {_EAGER_HINT}")
        target = self.by_buf.get(id(t._buf))
        name = str(target) if target is not None else None
        v = self.graph.new_value(t.shape, t.dtype, t.device, name=name)
        self.graph.inputs.append(v)
        self.env[id(t._buf)] = (v, t._buf)
        if target is None:  # no walk reached it: a tensor object of its own (a constant once it dies)
            self.sources.append([v, None, weakref.ref(t), t._buf])
        else:
            self.sources.append([v, target, None, t._buf])
        return v

    def _input(self, x):
        if isinstance(x, list):
            return [self.value(e) for e in x]
        if isinstance(x, Tensor):
            return self.value(x)
        return x

    # --- the dispatcher's hook ------------------------------------------------------------
    def on_op(self, op, inputs, attrs, result, compute) -> None:
        if threading.get_ident() != self.thread:
            return
        outs = result if op.outputs is not None else (result,)
        known = [self.env.get(id(r._buf)) for r in outs]
        if all(e is not None and e[0].shape == r.shape and e[0].dtype is r.dtype for e, r in zip(known, outs)):
            # an op that ran as its decomposition at the top level (it has no VJP and gradients are
            # recorded): its ops are nodes already, and replaying those gives eager's exact values
            return
        ins = tuple(self._input(x) for x in inputs)
        clean = attrs if op.has_device_attr or "device" not in attrs else {k: v for k, v in attrs.items() if k != "device"}
        node = self.graph.add_node(op, ins, clean, [(r.shape, r.dtype, r.device) for r in outs], compute)
        for r, v in zip(outs, node.outputs):
            self.env[id(r._buf)] = (v, r._buf)
        if "offset" in clean and "key" in clean and op.category == "random":
            self._random_node(node)

    def _random_node(self, node) -> None:
        key, off = tuple(node.attrs["key"]), node.attrs["offset"]
        for gen, gkey, goff, blocks in reversed(self.draws):
            if gkey == key and goff <= off < goff + max(blocks, 1):
                for entry in self.random:
                    if entry[0] is gen and entry[3] == goff:
                        entry[2].append((node, off - goff))
                        return
                self.random.append((gen, blocks, [(node, off - goff)], goff))
                return
        # an explicit key and offset (no generator drew them): the same numbers at every call, as eager

    # --- host reads -------------------------------------------------------------------------
    def on_read(self, t: Tensor, arr: np.ndarray) -> None:
        f = sys._getframe(2)
        while f is not None and f.f_code.co_filename == _TENSOR_PY:
            f = f.f_back
        inside = f is not None and f.f_code.co_filename.startswith(_PKG) and not f.f_code.co_filename.startswith(_JIT)
        if not inside:
            raise TraceError(
                f"{where(f)}: reads a tensor's value on the host (.item(), .numpy(), .tolist(), bool(), float(), "
                f"int() or an `if` on a tensor) inside a compiled function. A graph is traced once and replayed "
                f"without running Python, so its control flow and Python-side results cannot depend on tensor "
                f"values; {_EAGER_HINT}")
        if f.f_code.co_name == "_data_shape" and f.f_code.co_filename.endswith(os.path.join("engine", "dispatch.py")):
            op = f.f_locals.get("op")
            name = getattr(op, "name", "an op")
            raise TraceError(
                f"{where()}: {name}() has a result shape that depends on the data, which a static graph cannot "
                f"hold; pass its size= (when the op takes one) or {_EAGER_HINT}")
        e = self.env.get(id(t._buf))
        v = e[0] if e is not None else self.value(t)
        if v.const is None:
            self.graph.flags.append((v, np.array(arr, copy=True), f"{f.f_code.co_name} ({os.path.basename(f.f_code.co_filename)})"))

    def on_copy(self, buf) -> None:
        if threading.get_ident() == self.thread:
            self.copies[id(buf)] = True

    def on_draw(self, gen, key, off, blocks) -> None:
        if threading.get_ident() == self.thread:
            self.draws.append((gen, tuple(key), off, blocks))


def _noop_observer(*a) -> None:
    pass


class _Patches:
    """Route host reads, device copies and random draws through the active tracer."""

    def __init__(self, tracer: Tracer):
        self.tracer = tracer

    def __enter__(self):
        tr = self.tracer
        self.numpy, self.copy_to, self.reserve = Tensor.numpy, Backend.copy_to, Generator.reserve
        numpy, copy_to, reserve = self.numpy, self.copy_to, self.reserve

        def traced_numpy(t):
            arr = numpy(t)
            if threading.get_ident() == tr.thread and getattr(_active, "tracer", None) is tr:
                tr.on_read(t, arr)
            return arr

        def traced_copy_to(be, buf, *a, **k):
            out = copy_to(be, buf, *a, **k)
            tr.on_copy(out)
            return out

        def traced_reserve(gen, blocks):
            key, off = reserve(gen, blocks)
            tr.on_draw(gen, key, off, blocks)
            return key, off

        Tensor.numpy, Backend.copy_to, Generator.reserve = traced_numpy, traced_copy_to, traced_reserve
        _active.tracer = tr
        _dispatch._tracer = tr.on_op
        _dispatch.add_observer(_noop_observer)
        return self

    def __exit__(self, *exc):
        _dispatch.remove_observer(_noop_observer)
        _dispatch._tracer = None
        _active.tracer = None
        Tensor.numpy, Backend.copy_to, Generator.reserve = self.numpy, self.copy_to, self.reserve
        return False


_trace_lock = threading.Lock()


def run_traced(tr: Tracer, fn, args, kwargs):
    """Run ``fn`` once while ``tr`` records; returns its result."""
    with _trace_lock, _Patches(tr):
        return fn(*args, **kwargs)


def restore(tr: Tracer, before: dict, pre: _state.Walk, flat_args) -> None:
    """Undo what a refused trace changed: the slots and Python values it reached, the generators
    it drew from."""
    for gen, _, off, _ in reversed(tr.draws):
        gen.set_state(np.array([gen.initial_seed(), off], dtype="<u8").view(np.uint8))
    pre.put_back()
    for ref, t, buf, grad in before.values():
        try:
            if not isinstance(ref, (_state.ArgRef, _state.ObjRef)) and ref.get(flat_args) is not t:
                ref.set(flat_args, t)
            t._buf = buf
            n = t._node
            if n is not None and n.op is None:
                n.grad = grad
        except Exception:  # a container that no longer takes the key: leave it
            pass
    for ref, v in pre.scalars.values():
        try:
            if ref.get(flat_args) != v:
                ref.set(flat_args, v)
        except Exception:
            pass


def slot_states(w: _state.Walk, flat_args) -> dict:
    """key -> (ref, tensor, its buffer, its leaf gradient): the slots a trace may change."""
    slots = dict(w.slots)
    for k, t in enumerate(flat_args):
        if isinstance(t, Tensor):
            slots[("arg", k)] = (_state.ArgRef(k), t)
    return {key: (ref, t, t._buf, _leaf_grad(t)) for key, (ref, t) in slots.items()}


def _leaf_grad(t):
    n = t._node
    return n.grad if n is not None and n.op is None else None


def finish(tr: Tracer, fn_name: str, result, flat_args, pre: _state.Walk, before: dict, post: _state.Walk):
    """Outputs, write-backs and guards of a finished trace. Returns (graph, out_spec, statics,
    structure_change, counters): ``statics`` are the non-tensor outputs (None where a tensor goes),
    ``counters`` the Python ints the function counts up by one."""
    g = tr.graph
    leaves: list = []
    spec = _state.flatten(result, leaves)
    statics = []
    for k, x in enumerate(leaves):
        if isinstance(x, Tensor):
            n = x._node
            if n is not None and n.op is not None and n.inputs is not None and _ag.is_grad_enabled():
                raise TraceError(
                    f"{fn_name}(): output {k} ({x.dtype.name}{list(x.shape)}) requires grad and its graph was not used "
                    "by backward() inside the function: a compiled function returns tensors without autograd "
                    "history. Call backward() (and the optimizer step) inside the compiled function, or compute "
                    "under anydevice.no_grad()")
            g.outputs.append(tr.value(x))
            statics.append(None)
        else:
            statics.append(x)
    change = None
    after = slot_states(post, flat_args)
    done = set()  # a tensor reached through several slots (a module and an optimizer) is written once
    for key, (ref, t, buf, grad) in after.items():
        old = before.get(key)
        if old is None:
            change = change or f"{ref} appeared"
            continue
        _, t0, buf0, grad0 = old
        if t is not t0:
            g.writebacks.append((tr.value(t), _state.Target(ref, "obj")))
            continue
        if id(t) in done:
            continue
        done.add(id(t))
        if buf is not buf0:
            g.writebacks.append((tr.value(t), _state.Target(ref, "buf")))
        if grad is not grad0:
            if grad is None:
                g.writebacks.append((None, _state.Target(ref, "clear")))
            else:
                g.writebacks.append((tr.value(grad), _state.Target(ref, "grad")))
    for key, old in before.items():
        if key not in after:
            change = change or f"{old[0]} disappeared"
    for src in tr.sources:  # captured tensors no walk reached: rebound, or constants once gone
        v, _, wr, buf0 = src
        if wr is None:
            continue
        t = wr()
        if t is None:
            v.const = _wrap(buf0, v.shape, v.dtype, v.device)
            continue
        src[1] = _state.Target(_state.ObjRef(t), "buf")
        if t._buf is not buf0:
            g.writebacks.append((tr.value(t), src[1]))
    counters = []
    for key, (ref, val) in post.scalars.items():
        old = pre.scalars.get(key)
        if old is None:
            change = change or f"{ref} appeared"
            continue
        if type(old[1]) is type(val) and (old[1] == val or val != val and old[1] != old[1]):  # NaN stays NaN
            continue
        if type(val) is int and type(old[1]) is int and val == old[1] + 1:
            counters.append((key, ref))
            continue
        raise TraceError(
            f"{fn_name}(): changes Python state {ref} from {old[1]!r} to {val!r} while it runs; a replayed graph "
            "cannot repeat Python-side changes (only integer counters that count up by one are replayed). Keep "
            f"that state as a tensor, update it outside the compiled function, or {_EAGER_HINT}")
    if change is None:
        lens = {e[0]: e[1] for e in pre.digest if e[0][1] is None}
        for e in post.digest:
            if e[0][1] is None and e[0] in lens and lens[e[0]] != e[1]:
                change = f"a container changed size ({lens[e[0]]} -> {e[1]} entries)"
                break
    g.random = tr.random
    return g, spec, statics, change, counters
