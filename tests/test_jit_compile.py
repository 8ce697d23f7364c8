"""The compile hook, partitioning and the planned executor; the backends' graph compilers.

A fake backend claims part of a graph through ``anydevice_compile_graph`` and the rest runs on the
planned executor; a claim that raises or returns garbage is reported (PluginError naming the
plugin and the hook) and the graph still runs. OpenCL fuses element-wise chains (broadcasts,
scalars, casts, a trailing reduction) into single kernels whose results equal eager execution,
with fewer kernel launches (counted at pyopencl and shown by the profiler); the simulated devices
charge a fused chain as one launch; the CUDA compiler's kernels are built (CuPy, no GPU needed).
"""
from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import pytest
from fakes import FakePlugin, HostRuntime, host_kernel, installed

import anydevice as ad
from anydevice import profiler
from anydevice.jit import partition
from anydevice.jit.executor import CompileWarning
from anydevice.plugins import hookimpl
from anydevice.runtime import fusion

RNG = np.random.default_rng(7)


def _np(t):
    return t.numpy() if hasattr(t, "numpy") else t


def _chain_fn(x, b, s):
    """Broadcasts (b over rows), a Python scalar, a cast (s: int32), a comparison, a reduction."""
    y = ad.exp(x * 0.5 + b) - 1.0
    z = ad.where(y > 0.25, y, ad.astype(s, ad.float32) * y)
    return z, ad.sum(z * z, axis=0)


def _inputs(dev):
    x = ad.asarray(RNG.standard_normal((48, 20)).astype(np.float32), device=dev)
    b = ad.asarray(RNG.standard_normal((20,)).astype(np.float32), device=dev)
    s = ad.asarray(RNG.integers(-3, 4, (48, 20)).astype(np.int32), device=dev)
    return x, b, s


# --- a fake backend's claim --------------------------------------------------------------------
class _ClaimingPlugin(FakePlugin):
    """Primitive kernels (the cpu's math on host copies) and a compile hook claiming element-wise
    chains of add/multiply/exp/subtract, run on the host; ``mode`` makes the hook misbehave."""

    OPS = ("add", "multiply", "exp", "subtract")

    def __init__(self, mode="ok"):
        from anydevice.backend import KernelTable
        from anydevice.ops.registry import primitives
        from anydevice_cpu.kernels import register

        cpu = KernelTable("cpu")
        register(cpu)
        self.cpu = cpu
        kernels = {o.name: (host_kernel(cpu.lookup(o.name, None).fn), True) for o in primitives()}
        super().__init__(types=("jitfake",), runtime=HostRuntime(count=1), kernels=kernels)
        self.mode, self.calls, self.seen = mode, 0, []

    @hookimpl
    def anydevice_compile_graph(self, device_type, runtime, graph, kernels):
        if self.mode == "raise":
            raise RuntimeError("compiler exploded")
        if self.mode == "garbage":
            return "not a list"
        found = fusion.chains(graph, lambda n: n.op.name in self.OPS, device_type=device_type)
        claims = []
        for ch in found:
            ins, outs = graph.boundary(ch.ids)
            assert [v.id for v in ins] == [v.id for v in ch.inputs] and [v.id for v in outs] == [v.id for v in ch.outputs]
            self.seen.append([n.op.name for n in ch.nodes])
            claims.append((ch.ids, self._executable(ch)))
        if self.mode == "overlap" and claims:
            claims.append(claims[0])
        if self.mode == "unknown":
            claims.append(({10_000}, claims[0][1]))
        return claims

    def _executable(self, ch):
        def run(ctx, buffers):
            self.calls += 1
            rt = ctx.runtime
            env = {}
            for v, b in zip(ch.inputs, buffers):
                a = np.empty(b.shape, b.dtype.numpy)
                rt.copy_d2h(ctx.index, a, b.handle, b.byte_offset)
                env[v.id] = a
            for n in ch.nodes:
                r = self.cpu.lookup(n.op.name, None).fn(None, *[env[x.id] for x in n.inputs])
                env[n.outputs[0].id] = np.asarray(r, n.outputs[0].dtype.numpy)
            if self.mode == "bad_outputs":
                return [ctx.empty((1,), ch.outputs[0].dtype)]
            if self.mode == "raise_at_run":
                raise ValueError("kernel failed")
            outs = []
            for v in ch.outputs:
                o = ctx.empty(v.shape, v.dtype)
                rt.copy_h2d(ctx.index, o.handle, o.byte_offset, np.ascontiguousarray(env[v.id]))
                outs.append(o)
            return outs

        return run


def _fake_fn(x, w):
    h = ad.matmul(x, w)             # not claimed: the planned executor
    y = ad.exp(h * 0.5) + h         # claimed: one chain of multiply, exp, add
    return ad.sum(y - 1.0, axis=1), y


def _fake_inputs():
    x = RNG.standard_normal((8, 5)).astype(np.float32)
    w = RNG.standard_normal((5, 6)).astype(np.float32)
    return x, w


def test_compile_hook_partitions_a_graph_between_claim_and_planned_executor():
    plugin = _ClaimingPlugin()
    with installed(plugin, name="jitfake-plugin"):
        xh, wh = _fake_inputs()
        x, w = ad.asarray(xh, device="jitfake"), ad.asarray(wh, device="jitfake")
        want = [_np(t) for t in _fake_fn(x, w)]
        f = ad.jit.compile(_fake_fn)
        for _ in range(3):
            got = [_np(t) for t in f(x, w)]
            for g_, w_ in zip(got, want):
                np.testing.assert_allclose(g_, w_, rtol=1e-6)
        run = partition.build(f.last_graph)
        assert run.stats["fused_kernels"] == 1 and run.stats["claimed_nodes"] == 4, run.stats
        st = run.stats  # the rest (matmul, sum) on the planned executor: native kernels or the dispatcher
        assert st["native"] >= 1 and st["native"] + st["dispatched"] + st["claimed_nodes"] == st["nodes"]
        assert plugin.seen and plugin.seen[0][:3] == ["multiply", "exp", "add"] and len(plugin.seen[0]) == 4
        assert plugin.calls >= 2  # the claim ran on replays
        assert "x" in run.source  # the replay function calls the claimed part


@pytest.mark.parametrize("mode", ["raise", "garbage", "overlap", "unknown", "bad_outputs", "raise_at_run"])
def test_a_failing_claim_is_a_plugin_error_and_the_graph_still_runs(mode):
    plugin = _ClaimingPlugin(mode)
    with installed(plugin, name="jitfake-plugin"):
        xh, wh = _fake_inputs()
        x, w = ad.asarray(xh, device="jitfake"), ad.asarray(wh, device="jitfake")
        want = [_np(t) for t in _fake_fn(x, w)]
        f = ad.jit.compile(_fake_fn)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            got = [[_np(t) for t in f(x, w)] for _ in range(3)]
            run = partition.build(f.last_graph)
            run(_buffers(f.last_graph, x, w))
        msgs = [str(r.message) for r in rec if issubclass(r.category, CompileWarning)]
        assert msgs, f"no CompileWarning for {mode}"
        assert all("jitfake-plugin" in m and "anydevice_compile_graph()" in m for m in msgs), msgs
        assert run.errors and all(isinstance(e, ad.errors.PluginError) for e in run.errors)
        for g in got:
            for g_, w_ in zip(g, want):
                np.testing.assert_allclose(g_, w_, rtol=1e-6)
        if mode in ("overlap", "unknown"):
            assert run.stats["fused_kernels"] == 1  # the good claim is kept
        else:
            st = run.stats
            assert st["fused_kernels"] == 0 and st["native"] + st["dispatched"] == st["nodes"] == len(run.graph.nodes)


def _buffers(g, *args):
    return [a._buf for a in args] + [v.const._buf if v.const is not None else None for v in g.inputs[len(args):]]


def test_composite_nodes_are_inlined_and_nodes_without_a_kernel_are_dispatched(monkeypatch):
    monkeypatch.delenv("ANYDEVICE_JIT_CHECK", raising=False)  # counts launches: check mode runs each call eagerly too
    from anydevice.engine import dispatch

    def fn(x):
        return ad.mean(ad.exp(x) * x, axis=1)  # mean is composite: its decomposition's nodes are replayed

    plugin = _ClaimingPlugin()
    del plugin.kernels["exp"]  # no kernel and no decomposition: the CPU fallback, as in eager mode
    old = dispatch.set_fallback_mode("silent")
    try:
        with installed(plugin, name="jitfake-plugin"):
            x = ad.asarray(RNG.standard_normal((6, 4)).astype(np.float32), device="jitfake")
            want = fn(x).numpy()
            f = ad.jit.compile(fn, backend="planned")
            f(x)
            before = dispatch.fallback_counts().get(("exp", "jitfake:0"), 0)
            np.testing.assert_allclose(f(x).numpy(), want, rtol=1e-6)
            assert dispatch.fallback_counts().get(("exp", "jitfake:0"), 0) == before + 1  # counted on replay
            run = partition.build(f.last_graph, backend="planned")
            names = [n.op.name for n in run.graph.nodes]
            assert "mean" in [n.op.name for n in f.last_graph.nodes] and "mean" not in names and "sum" in names
            assert run.stats["dispatched"] == 1 and run.stats["native"] == len(names) - 1, run.stats
    finally:
        dispatch.set_fallback_mode(old)


def test_graph_view_boundary_orders_inputs_by_first_use_and_outputs_by_production():
    x, b, s = _inputs("cpu")
    f = ad.jit.compile(_chain_fn)
    f(x, b, s)
    g = f.last_graph
    view = partition.GraphView(g)
    ids = [n.id for n in g.nodes]
    ins, outs = view.boundary(ids)
    assert {v.id for v in outs} == {v.id for v in g.outputs}
    first = []
    for n in g.nodes:
        first += [v.id for v in n.input_values() if v.producer is None and v.id not in first]
    assert [v.id for v in ins] == first


# --- OpenCL: fused kernels -----------------------------------------------------------------------
_cl_reason = ("pyopencl is not installed" if importlib.util.find_spec("pyopencl") is None
              else ad.device.unavailable_reason("opencl"))
needs_opencl = pytest.mark.skipif(bool(_cl_reason), reason=f"no usable OpenCL device: {_cl_reason}")


def _cl_fns():
    def bcast_scalar_cast(x, b, s):
        return _chain_fn(x, b, s)

    def reductions(x, b, s):
        y = ad.maximum(x, 0.0) * b
        lse = ad.log(ad.sum(ad.exp(-y), axis=1, keepdims=True)) * 0.5  # element-wise work after the reduction
        return (ad.max(y * 2.0, axis=1), ad.mean(ad.exp(-y), axis=(0, 1)), ad.sum(y + 1.0, axis=1, keepdims=True),
                lse - ad.reshape(b[:1], (1, 1)))

    def ints_and_bools(x, b, s):
        m = (s > 0) & (s < 3)  # bool logic on int32
        t = ad.where(m, s * 2, -s)  # int arithmetic
        return t, ad.astype(t, ad.float32) + x

    bcast_scalar_cast.reduced, reductions.reduced, ints_and_bools.reduced = {1}, {0, 1, 2, 3}, set()
    return [bcast_scalar_cast, reductions, ints_and_bools]


@needs_opencl
@pytest.mark.parametrize("fn", _cl_fns(), ids=lambda f: f.__name__)
def test_opencl_fused_results_equal_eager(fn):
    x, b, s = _inputs("opencl")
    want = [_np(t) for t in fn(x, b, s)]
    f = ad.jit.compile(fn)
    for _ in range(2):
        got = [_np(t) for t in f(x, b, s)]
    run = partition.build(f.last_graph)
    assert run.stats["fused_kernels"] >= 1 and not run.errors, (run.stats, run.errors)
    for k, (g_, w_) in enumerate(zip(got, want)):
        assert g_.dtype == w_.dtype and g_.shape == w_.shape
        if k in fn.reduced:  # another summation order; element-wise results are bit-identical
            np.testing.assert_allclose(g_, w_, rtol=2e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(g_, w_)


@needs_opencl
def test_opencl_fused_graph_launches_fewer_kernels_and_the_profiler_shows_it(monkeypatch):
    monkeypatch.delenv("ANYDEVICE_JIT_CHECK", raising=False)  # counts launches: check mode runs each call eagerly too
    from opencl_support import count_launches

    x, b, s = _inputs("opencl")
    f = ad.jit.compile(_chain_fn)
    f(x, b, s), f(x, b, s)  # traced, then replayed once
    launches = count_launches(monkeypatch)
    _chain_fn(x, b, s)[1].numpy()
    eager = launches()
    f(x, b, s)[1].numpy()
    compiled = launches() - eager
    assert 0 < compiled < eager, (compiled, eager)
    with profiler.profile() as prof:
        _chain_fn(x, b, s)
    eager_rows = sum(r.count for r in prof.rows())
    with profiler.profile() as prof:
        f(x, b, s)
    rows = prof.rows()
    fused = [r for r in rows if r.path == "fused"]
    assert fused and all(r.op.startswith("fused[") for r in fused)
    assert sum(r.count for r in rows) < eager_rows


# --- simulated devices: a fused chain is one launch -----------------------------------------------
def test_sim_npu_charges_a_fused_chain_as_one_launch(monkeypatch):
    monkeypatch.delenv("ANYDEVICE_JIT_CHECK", raising=False)  # counts launches: check mode runs each call eagerly too
    x, b, s = _inputs("npu")
    want = [_np(t) for t in _chain_fn(x, b, s)]
    f = ad.jit.compile(_chain_fn)
    f(x, b, s)
    got = [_np(t) for t in f(x, b, s)]
    for g_, w_ in zip(got, want):
        np.testing.assert_array_equal(g_, w_)
    with profiler.profile(timeline=True) as prof:
        _chain_fn(x, b, s)[1].numpy()
    eager_kernels = [e for e in prof.timeline if not e.name.startswith("copy")]
    eager_time = prof.total_device_time
    with profiler.profile(timeline=True) as prof:
        f(x, b, s)[1].numpy()
    kernels = [e for e in prof.timeline if not e.name.startswith("copy")]
    assert any(e.name.startswith("fused[") for e in kernels)
    assert len(kernels) < len(eager_kernels), ([e.name for e in kernels], [e.name for e in eager_kernels])
    assert prof.total_device_time < eager_time
    clock = sum(e.end - e.start for e in kernels)
    assert clock < sum(e.end - e.start for e in eager_kernels)


# --- CUDA: the kernels CuPy would compile (built without a GPU) ------------------------------------
def test_cuda_graph_compiler_builds_cupy_kernels_for_each_chain():
    pytest.importorskip("anydevice_cuda")
    cp = pytest.importorskip("cupy")
    from anydevice_cuda import graph as cg

    x, b, s = _inputs("cpu")

    def fn(x, b):
        return ad.sum(ad.exp(x * 2.0 + b), axis=1)  # one chain ending in a reduction

    for f_, args in ((_chain_fn, (x, b, s)), (fn, (x, b))):
        f = ad.jit.compile(f_)
        f(*args)
        claims = cg.compile_graph(None, None, partition.GraphView(f.last_graph), None)
        assert claims, f_.__name__
        for ids, k in claims:
            assert ids == k.chain.ids
            built = k._build()
            assert isinstance(built, (cp.ElementwiseKernel, cp.ReductionKernel))
            if k.reduce_only:
                ins, out, mp, rd, post, ident, pre = cg.reduction_source(k.chain, k.name)
                assert "exp(" in pre and rd == "a + b" and out == "float32 y"
            else:
                ins, out, ops = cg.elementwise_source(k.chain)
                assert ops.count(";") >= len(k.chain.elementwise)
                assert "i0" in ops and "float32 q0" in out


# --- the bench figures ---------------------------------------------------------------------------
def test_bench_jit_reports_compiled_and_eager_steps_with_equal_losses():
    from anydevice.tools.bench_jit import bench_jit

    res = bench_jit(["cpu", "npu"], steps=2, rounds=2)
    for dev in ("cpu", "npu"):
        r = res[dev]
        assert 0 < r["compiled"]["min"] <= r["compiled"]["median"] and 0 < r["eager"]["median"]
        assert r["final_loss"]["compiled"] == r["final_loss"]["eager"]  # the same steps, the same numbers
        assert r["first_compile_s"] > 0 and r["nodes"] > 10 and r["peak_bytes"]["compiled"] > 0  # 4 updates, 2 layers
    assert res["npu"]["fused_kernels"] > 0 and "torch" not in res


@needs_opencl
def test_opencl_fuses_nodes_with_python_scalar_inputs():
    """The IR allows plain Python scalars as node inputs (capture makes them constants): the fused
    kernel writes them as literals of the dtype they adopt, as eager mode converts them."""
    from anydevice.jit.ir import Graph
    from anydevice.ops.registry import get_op

    x = ad.asarray(RNG.standard_normal((5, 7)).astype(np.float32), device="opencl")
    k = ad.asarray(RNG.integers(-9, 9, (5, 7)).astype(np.int32), device="opencl")
    g = Graph()
    vx, vk = g.new_value(x.shape, x.dtype, x.device), g.new_value(k.shape, k.dtype, k.device)
    g.inputs, g.n_args = [vx, vk], 2
    dev, f32, i32 = x.device, ad.float32, ad.int32
    a = g.add_node(get_op("multiply"), (vx, 0.1), {}, [((5, 7), f32, dev)], f32).outputs[0]
    b = g.add_node(get_op("add"), (a, -3), {}, [((5, 7), f32, dev)], f32).outputs[0]
    r = g.add_node(get_op("remainder"), (vk, 4), {}, [((5, 7), i32, dev)], i32).outputs[0]
    m = g.add_node(get_op("multiply"), (r, -2), {}, [((5, 7), i32, dev)], i32).outputs[0]
    c = g.add_node(get_op("maximum"), (b, 1e30), {}, [((5, 7), f32, dev)], f32).outputs[0]
    g.outputs = [c, m]
    run = partition.build(g)
    assert run.stats["fused_kernels"] == 2 and run.stats["claimed_nodes"] == 5, run.explain()
    planned = partition.build(g, backend="planned")  # the scalars as pre-made 0-d buffers, kernels called directly
    assert planned.stats["native"] == 5 and planned.stats["dispatched"] == 0, planned.explain()
    want = [ad.maximum(x * 0.1 + (-3), 1e30).numpy(), (ad.remainder(k, 4) * -2).numpy()]
    for r in (run, planned):
        for buf, v, w in zip(r([x._buf, k._buf]), g.outputs, want):
            np.testing.assert_array_equal(ad.engine.tensor._wrap(buf, v.shape, v.dtype, v.device).numpy(), w)


@pytest.mark.parametrize("backend", ["planned", "auto"])
def test_the_profiler_sees_every_planned_kernel_of_a_replay_on_cpu(backend):
    x, b, s = _inputs("cpu")
    f = ad.jit.compile(_chain_fn, backend=backend)
    f(x, b, s)
    want = [_np(t) for t in f(x, b, s)]
    with profiler.profile() as prof:
        got = [_np(t) for t in f(x, b, s)]
    run = partition.build(f.last_graph, backend=backend)
    rows = [r for r in prof.rows() if r.path == "compiled"]
    fused = [r for r in prof.rows() if r.path == "fused"]
    assert sum(r.count for r in rows) == run.stats["native"]
    assert sum(r.count for r in fused) == run.stats["fused_kernels"]
    assert run.stats["native"] + run.stats["claimed_nodes"] == len(run.graph.nodes)
    if backend == "planned":
        assert {r.op for r in rows} >= {"exp", "where", "sum"} and not fused
    else:  # the cpu graph compiler runs the chain as one part
        assert run.stats["fused_kernels"] == 1 and "where" in fused[0].op
    for g_, w_ in zip(got, want):  # the interpreted replay computes what the generated one does
        np.testing.assert_array_equal(g_, w_)
