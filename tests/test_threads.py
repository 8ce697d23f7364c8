"""Thread safety: the caching allocator, plan caches and fallback counters under 8 threads that
switch every microsecond; device_guard and stream_guard are per thread; results equal a serial run.

The allocator stress loop runs for ANYDEVICE_THREADS_SECONDS (default 0.5 s); set it higher to soak."""
from __future__ import annotations

import gc
import os
import queue
import sys
import threading
import time
import traceback
import warnings

import numpy as np
import pytest
from fakes import HostRuntime

import anydevice as ad
from anydevice.allocator import CachingAllocator
from anydevice.device import Stream, current_stream, set_stream, stream_guard
from anydevice.ops.registry import get_op
from anydevice.runtime import devices as _backend
from anydevice.runtime.contract import KernelContext
from anydevice.runtime.streams import default_stream

pytest.importorskip("anydevice_sim_npu")

THREADS = 8
SECONDS = float(os.environ.get("ANYDEVICE_THREADS_SECONDS", "0.5"))
DEVICES = ["cpu", "npu"]


@pytest.fixture(autouse=True)
def fast_switching():
    """Threads switch every microsecond (instead of 5 ms) so races show up; restored afterwards."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def barrier(parties):
    return threading.Barrier(parties, timeout=30)


def run_threads(fn, n=THREADS, timeout=60.0, barriers=()):
    """Run ``fn(i)`` on ``n`` threads started together; returns their results in order and
    re-raises the first exception any of them raised (breaking ``barriers``, so that no one
    waits for a thread that failed)."""
    start = barrier(n)
    results, errors = [None] * n, []

    def body(i):
        try:
            start.wait()
            results[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 - reported to the test below
            errors.append(e)
            for b in barriers:
                b.abort()

    ts = [threading.Thread(target=body, args=(i,), name=f"worker-{i}") for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout)
    assert not any(t.is_alive() for t in ts), "a thread hung"
    if errors:  # the cause, not a barrier that broke because of it
        raise next((e for e in errors if not isinstance(e, threading.BrokenBarrierError)), errors[0])
    return results


def concurrently(work, main):
    """Run ``work(i, inside, done)`` on 8 threads; once all of them passed ``inside.wait()``,
    run ``main()`` here, then let them pass ``done.wait()``. Returns ``main()``'s result and the
    workers' results; a failure on any side breaks the barriers and is raised here."""
    inside, done = barrier(THREADS + 1), barrier(THREADS + 1)
    box = {}

    def workers():
        try:
            box["results"] = run_threads(lambda i: work(i, inside, done), barriers=(inside, done))
        except BaseException as e:  # noqa: BLE001 - re-raised below
            box["error"] = e

    t = threading.Thread(target=workers)
    t.start()
    try:
        inside.wait()
        mine = main()
        done.wait()
    except BaseException as e:
        where = stacks() if isinstance(e, threading.BrokenBarrierError) else ""
        inside.abort()
        done.abort()
        t.join(60)
        if "error" in box and not isinstance(box["error"], threading.BrokenBarrierError):
            raise box["error"] from None
        if where:
            raise AssertionError(f"the threads did not all arrive within 30 s:\n{where}") from None
        raise
    t.join(60)
    assert not t.is_alive(), "a worker hung"
    if "error" in box:
        raise box["error"]
    return mine, box["results"]


def stacks() -> str:
    """Where every thread of this process is now (for a test that times out)."""
    return "\n".join(f"thread {tid}:\n" + "".join(traceback.format_stack(f)) for tid, f in sys._current_frames().items())


def settle(dev):
    """Wait for queued device work, then collect what it released (stream workers hold buffers)."""
    ad.device.synchronize(dev)
    gc.collect()


# --- the caching allocator -------------------------------------------------------------------
def free_bytes(a: CachingAllocator) -> int:
    return (sum(e[0] for lst in a._free.values() for e in lst)
            + sum(c.size for lst in a._quick.values() for c in lst))


def test_allocator_hands_out_disjoint_memory_under_threads():
    """Blocks are allocated, written, checked and freed on 8 threads; some are freed by another
    thread (as a stream worker or a garbage collection on any thread does). A corrupted free list
    shows as an exception, as two live blocks that overlap, or as figures that do not add up."""
    rt = HostRuntime(count=1)
    a = CachingAllocator(rt, 0, "fake:0")
    streams = [None, object()]
    handoff: queue.SimpleQueue = queue.SimpleQueue()
    sizes = [16, 200, 4 << 10, 60 << 10, 100 << 10, 700 << 10, 3 << 20]

    def fill(b, tag):
        rt.mem[b.handle][b.offset:b.offset + b.size] = tag

    def intact(b, tag):
        return bool((rt.mem[b.handle][b.offset:b.offset + b.size] == tag).all())

    def work(i):
        rng = np.random.default_rng(i)
        live, n = [], 0
        deadline = time.perf_counter() + SECONDS
        while time.perf_counter() < deadline or n < 300:
            n += 1
            b = a.allocate(int(rng.choice(sizes)), streams[n % 2])
            tag = (i * 31 + n) % 251 + 1
            fill(b, tag)
            live.append((b, tag))
            if len(live) > 12:
                b, tag = live.pop(int(rng.integers(len(live))))
                assert intact(b, tag), "another thread was handed memory of a live block"
                if n % 3 == 0:
                    handoff.put(b)  # freed on whichever thread takes it
                del b
            while n % 5 == 0 and not handoff.empty():
                try:
                    handoff.get_nowait()  # dropped here: released on this thread
                except queue.Empty:
                    break
            if n % 97 == 0:
                a.empty_cache()
            if n % 53 == 0:
                st = a.stats()
                assert 0 <= st["allocated"] <= st["reserved"] <= st["max_reserved"]
        assert all(intact(b, tag) for b, tag in live)
        return live

    kept = [blk for r in run_threads(work) for blk in r]
    while not handoff.empty():
        handoff.get()
    st = a.stats()
    assert st["allocated"] == sum(b.chunk.size for b, _ in kept)
    assert st["reserved"] == st["allocated"] + free_bytes(a), "every byte is either live or in a free list"
    assert st["num_allocs"] >= THREADS * 300
    del kept
    gc.collect()
    a.empty_cache()
    st = a.stats()
    assert (st["allocated"], st["reserved"], st["segments"]) == (0, 0, 0)
    assert rt.mallocs == rt.frees and rt.mem == {}, "every segment went back to the runtime"


def tensor_work(dev, i, steps):
    """Element-wise ops, reductions and matmuls on tensors of varied sizes: the allocator's
    hot path; tensor operands only (no cached scalar buffers stay behind)."""
    rng = np.random.default_rng(i)
    out = []
    for k in range(steps):
        n = int(rng.integers(1, 400)) * (1 if k % 7 else 300)
        h = rng.standard_normal(n).astype(np.float32)
        x = ad.asarray(h, device=dev)
        y = (x * x + x) - x
        m = ad.matmul(x[:1].reshape((1, 1)), y[:1].reshape((1, 1)))
        out.append((ad.sum(y).item(), m.item(), y[n // 2].item()))
    return out


@pytest.mark.parametrize("dev", DEVICES)
def test_ops_under_threads_match_a_serial_run_and_return_all_memory(dev):
    steps = 60
    d = ad.devices.as_device(dev)
    serial = [tensor_work(dev, i, steps) for i in range(THREADS)]
    settle(dev)
    tracked = not d._backend.own_storage  # cpu keeps its own (numpy) memory
    if tracked:
        ad.device.empty_cache(dev)
        before = ad.device.memory_stats(dev)
    threaded = run_threads(lambda i: tensor_work(dev, i, steps))
    assert threaded == serial
    if tracked:
        settle(dev)
        a = d._backend.allocators[d.index]
        st = ad.device.memory_stats(dev)
        assert st["reserved"] == st["allocated"] + free_bytes(a)
        ad.device.empty_cache(dev)
        after = ad.device.memory_stats(dev)
        assert (after["allocated"], after["reserved"], after["segments"]) == (
            before["allocated"], before["reserved"], before["segments"])


def scalar_work(dev, i, steps):
    """Operators with Python scalars (the engine's cached scalar buffers) and decompositions."""
    x = ad.asarray(np.linspace(-1, 1, 33, dtype=np.float32) * (i + 1), device=dev)
    out = []
    for k in range(steps):
        y = (x * 0.5 + float(k % 5)) / 3.0 - 1
        z = ad.softmax(y, axis=0) if k % 2 else ad.logsumexp(y, axis=0)
        out.append((y.numpy().tolist(), z.numpy().tolist()))
    return out


@pytest.mark.parametrize("dev", DEVICES)
def test_scalar_operands_and_decompositions_under_threads_match_a_serial_run(dev):
    serial = [scalar_work(dev, i, 40) for i in range(THREADS)]
    assert run_threads(lambda i: scalar_work(dev, i, 40)) == serial


# --- plan caches and fallback counters ---------------------------------------------------------
def test_fallbacks_are_counted_exactly_and_warned_once_under_threads():
    """xpu has no round kernel: every call falls back, counted once per call on any thread."""
    x = ad.asarray([0.4, 1.6, -2.5, 3.5], device="xpu:0")
    calls = 50
    ad.dispatch.reset_fallback_counts()
    old = ad.dispatch.set_fallback_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            outs = run_threads(lambda i: [ad.round(x).numpy().tolist() for _ in range(calls)])
    finally:
        ad.dispatch.set_fallback_mode(old)
    assert all(o == [[0.0, 2.0, -2.0, 4.0]] * calls for o in outs)
    assert ad.fallback_counts()[("round", "xpu:0")] == THREADS * calls
    fallback = [w for w in seen if issubclass(w.category, ad.FallbackWarning) and "round" in str(w.message)]
    assert len(fallback) == 1, [str(w.message) for w in fallback]


def test_first_calls_on_many_threads_settle_on_one_plan():
    """gelu decomposes through erf, which xpu lacks: the first calls, racing on 8 threads, must
    leave the op on the CPU fallback (not on a decomposition retried and abandoned every call)."""
    x = ad.asarray(np.linspace(-2, 2, 9, dtype=np.float32), device="xpu:0")
    ref = ad.gelu(ad.asarray(np.linspace(-2, 2, 9, dtype=np.float32))).numpy()
    get_op("gelu").plans.clear()  # as if gelu had never run
    old = ad.dispatch.set_fallback_mode("silent")
    try:
        outs = run_threads(lambda i: ad.gelu(x).numpy())
        paths = []

        def observe(op, device, path, seconds, inputs, out):
            paths.append((op.name, path))

        ad.dispatch.add_observer(observe)
        try:
            ad.gelu(x)
        finally:
            ad.dispatch.remove_observer(observe)
    finally:
        ad.dispatch.set_fallback_mode(old)
    for o in outs:
        np.testing.assert_allclose(o, ref, rtol=1e-6)
    assert paths == [("gelu", "fallback")]


# --- per-thread current device -----------------------------------------------------------------
def test_device_guard_affects_only_its_own_thread():
    devs = ["cpu:0", "npu:0", "npu:1", "xpu:0"]

    def work(i, inside, done):
        mine = devs[i % len(devs)]
        with ad.device_guard(mine):
            inside.wait()
            seen = set()
            for _ in range(200):
                seen.add(str(ad.zeros((2,)).device))
                seen.add(ad.get_device())
            done.wait()
        return seen, ad.get_device()

    # while every worker is inside its guard, this thread still makes tensors on its own device
    mains, results = concurrently(work, lambda: {str(ad.ones((1,)).device) for _ in range(200)})
    assert mains == {"cpu:0"}
    for i, (seen, after) in enumerate(results):
        assert seen == {devs[i % len(devs)]}
        assert after == "cpu:0"


def test_set_device_is_the_process_default_and_a_guard_overrides_it_per_thread():
    def later():
        box = []
        t = threading.Thread(target=lambda: box.append((ad.get_device(), str(ad.zeros((1,)).device))))
        t.start()
        t.join(10)
        return box[0]

    assert ad.get_device() == "cpu:0"
    ad.set_device("npu:1")
    try:
        assert later() == ("npu:1", "npu:1"), "a thread started later sees the process default"
        with ad.device_guard("xpu:0"):
            assert later() == ("npu:1", "npu:1"), "another thread's guard is not inherited"
            ad.set_device("npu:0")  # inside a guard: this thread's device until the guard exits
            assert ad.get_device() == "npu:0" and later() == ("npu:1", "npu:1")
        assert ad.get_device() == "npu:1"
    finally:
        ad.set_device("cpu")
    assert ad.get_device() == "cpu:0" and later() == ("cpu:0", "cpu:0")


# --- per-thread current stream -----------------------------------------------------------------
def block_stream(t):
    """The stream handle a tensor's memory was allocated on (None: the default stream)."""
    return t._buf.block.stream


@pytest.mark.parametrize("dev", DEVICES)
def test_stream_guard_affects_only_its_own_thread(dev):
    d = ad.devices.as_device(dev)
    default = default_stream(d)
    own = [Stream(d) for _ in range(THREADS)]
    allocator_backed = not d._backend.own_storage

    def work(i, inside, done):
        s = own[i]
        x = ad.arange(64, dtype=ad.float32, device=d)
        ad.device.synchronize(d)  # x was queued on the default stream: other streams read it only once it ran
        with stream_guard(s):
            inside.wait()
            ok = 0
            for k in range(100):
                y = x * 2 + k
                assert current_stream(d) is s
                assert d._ctx.stream is s.handle
                if allocator_backed:
                    assert block_stream(y) is s.handle
                ok += float(ad.sum(y).item()) == 64 * 63 + 64 * k
            done.wait()
        assert current_stream(d) is default
        return ok

    def main():  # every worker is inside its stream_guard now
        for _ in range(100):
            assert current_stream(d) is default and d._ctx.stream is None
            z = ad.ones((16,), device=d) + ad.ones((16,), device=d)
            if allocator_backed:
                assert block_stream(z) is None

    _, results = concurrently(work, main)
    assert results == [100] * THREADS


def test_set_stream_is_per_thread_and_threads_start_on_the_default_stream():
    d = ad.devices.as_device("npu:0")
    s = Stream(d)

    def in_new_thread(fn):
        box = []
        t = threading.Thread(target=lambda: box.append(fn()))
        t.start()
        t.join(10)
        return box[0]

    prev = set_stream(s)
    try:
        assert current_stream(d) is s
        assert in_new_thread(lambda: current_stream(d)) is default_stream(d)
        assert in_new_thread(lambda: block_stream(ad.ones((4,), device=d) + 1)) is None
        assert block_stream(ad.ones((4,), device=d) + 1) is s.handle
    finally:
        set_stream(prev)
    assert current_stream(d) is default_stream(d)


def test_a_thread_that_ends_with_its_own_stream_leaves_no_trace():
    """A worker that sets a stream and never restores it: once it ends, kernels read the default
    stream from a plain slot again (the per-thread lookup costs only while a thread needs it)."""
    d = ad.devices.as_device("npu:0")
    s = Stream(d)
    t = threading.Thread(target=lambda: set_stream(s))
    t.start()
    t.join(10)
    gc.collect()
    assert type(d._ctx) is KernelContext and d._ctx.stream is None
    assert current_stream(d) is default_stream(d)


def test_set_stream_refuses_what_is_not_a_stream():
    with pytest.raises(TypeError, match=r"set_stream\(\): stream must be an anydevice.Stream, not str"):
        set_stream("npu:0")


def test_kernel_context_stream_is_read_only_while_threads_override_it():
    d = ad.devices.as_device("npu:0")
    with stream_guard(Stream(d)):
        with pytest.raises(AttributeError, match="set_stream"):
            d._ctx.stream = object()
    assert _backend.thread_stream(d._ctx) is None
