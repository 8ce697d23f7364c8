"""The reference interpreter: replay a graph node by node through the dispatcher.

An *executor* is built once per graph, ``build(graph) -> run``, and ``run(input_buffers)`` takes
one buffer per ``graph.inputs`` (constants included) and returns one buffer per
``graph.results()`` (outputs, then write-back values, then flag values). This one calls
``dispatch.apply`` for every node (eager semantics: native kernel, decomposition or fallback), so
it is the ``backend="eager"`` reference other executors are compared with. Random nodes read
their ``key``/``offset`` attributes at run time: the caller sets them before each run.
"""
from __future__ import annotations

from anydevice.engine import dispatch as _dispatch
from anydevice.engine.tensor import _wrap
from anydevice.jit.ir import Value


def build(graph):
    nodes = list(graph.nodes)
    inputs = list(graph.inputs)
    results = graph.results()

    def run(bufs):
        env = {v.id: _wrap(b, v.shape, v.dtype, v.device) for v, b in zip(inputs, bufs)}

        def arg(x):
            if isinstance(x, list):
                return [env[e.id] for e in x]
            return env[x.id] if isinstance(x, Value) else x

        for n in nodes:
            r = _dispatch.apply(n.op, [arg(x) for x in n.inputs], dict(n.attrs))
            for o, t in zip(n.outputs, r if n.op.outputs is not None else (r,)):
                env[o.id] = t
        return [env[v.id]._buf for v in results]

    return run
