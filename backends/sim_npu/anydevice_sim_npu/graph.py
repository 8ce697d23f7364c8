"""The simulated devices' graph compiler (hook ``anydevice_compile_graph``).

Each chain of element-wise nodes of a captured graph (:func:`anydevice.runtime.fusion.chains`,
with a trailing reduction when there is one) is replayed as ONE queued kernel: the same numpy
math as the eager kernels, node after node, each result converted to its node's dtype (as an
eager kernel's output buffer would hold it), so results equal eager execution. The cost model
charges the chain as one launch: one launch latency, and the bytes crossing the chain's border
(intermediates never reach device memory), which is what fusing buys on real hardware.
"""
from __future__ import annotations

import functools

import numpy as np

from anydevice.runtime import KernelTable
from anydevice.runtime.fusion import chains


@functools.cache
def _cpu() -> KernelTable:
    from anydevice_cpu.kernels import register

    table = KernelTable("cpu")
    register(table)
    return table


def _compute(node):
    c = node.compute
    return c[0] if type(c) is tuple else c


class ChainKernel:
    """``executable(ctx, buffers) -> buffers``: the chain's nodes as one queued kernel."""

    def __init__(self, chain):
        self.chain = chain
        self.name = "fused[" + "+".join(n.op.name for n in chain.nodes) + "]"
        cpu = _cpu()
        self.steps = []
        for n in chain.nodes:
            fn = cpu.lookup(n.op.name, _compute(n)).fn
            kw = {k: v for k, v in n.attrs.items() if k != "device"}
            self.steps.append((fn, n.inputs, kw, n.outputs[0]))
        self.slots = [v.id for v in chain.inputs]
        self.results = [v.id for v in chain.outputs]
        self.outs = [(tuple(v.shape), v.dtype) for v in chain.outputs]

    def compute(self, ctx, *arrays):
        """The chain on numpy views of its inputs (runs on the stream's worker)."""
        env = dict(zip(self.slots, arrays))
        for fn, inputs, kw, out in self.steps:
            args = [env[x.id] if hasattr(x, "producer") else x for x in inputs]
            r = fn(None, *args, **kw)
            want = out.dtype._np or out.dtype.numpy
            env[out.id] = r if getattr(r, "dtype", None) == want and np.shape(r) == out.shape else \
                np.asarray(np.broadcast_to(np.asarray(r).astype(want, copy=False), out.shape))
        res = tuple(env[i] for i in self.results)
        return res if len(res) > 1 else res[0]

    def __call__(self, ctx, buffers):
        outs = [ctx.empty(s, d) for s, d in self.outs]
        out = tuple(outs) if len(outs) > 1 else outs[0]
        ctx.runtime.launch(ctx.index, ctx.stream, self.name, self.compute, out, list(buffers), {}, None)
        return outs


def compile_graph(device_type, runtime, graph, kernels):
    """One :class:`ChainKernel` per chain whose every node has a kernel on this device type."""
    cpu = _cpu()

    def accept(node):
        c = _compute(node)
        return kernels.lookup(node.op.name, c) is not None and cpu.lookup(node.op.name, c) is not None

    found = chains(graph, accept, accept, device_type=device_type)
    return [(ch.ids, ChainKernel(ch)) for ch in found] or None
