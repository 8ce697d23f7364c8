"""The simulated accelerators (plugin anydevice-sim-npu): memory, streams, events, errors,
capacity, dtypes, multi-device, faults, and numerical parity with the cpu."""
from __future__ import annotations

import json
import threading
import time
import warnings

import numpy as np
import pytest

pytest.importorskip("anydevice_sim_npu")

import anydevice as ad  # noqa: E402
from anydevice.device import Event, Stream, stream_guard  # noqa: E402
from anydevice.engine.tensor import _wrap  # noqa: E402
from anydevice.runtime import devices  # noqa: E402
from anydevice.runtime import devices as _backend
from anydevice_sim_npu import faults, profiles  # noqa: E402

MiB = 1 << 20
SMALL = {"npu": {"count": 4, "memory": "64MiB"}, "xpu": {"count": 2, "memory": "64MiB"},
         "dcu": {"count": 2, "memory": "64MiB"}}


@pytest.fixture(scope="module", autouse=True)
def small_profiles():
    """Fresh npu/xpu/dcu runtimes with small profiles for this module, restored afterwards."""
    mp = pytest.MonkeyPatch()
    for t, table in SMALL.items():
        mp.setenv(profiles.env_var(t), json.dumps(table))
    mp.delenv("ANYDEVICE_SIM_FAULTS", raising=False)
    mp.delenv("ANYDEVICE_SIM_CONFIG", raising=False)
    fresh_runtimes()
    yield
    mp.undo()
    fresh_runtimes()


def fresh_runtimes():
    """Drop the simulated types' runtimes (and cached devices): the next use creates them anew."""
    for t in SMALL:
        _backend.forget(t)
    devices._reset_cache()


@pytest.fixture(autouse=True)
def healthy_devices():
    """Every test starts and ends with all simulated devices out of any error state."""
    yield
    for t in SMALL:
        rt = _backend.get_backend(t).runtime
        for i in range(rt.device_count()):
            rt.reset(i)


def runtime(t="npu"):
    return _backend.get_backend(t).runtime


def launch(device, fn, shape=(4,), dtype=ad.float32, stream=None):
    """Queue a custom kernel ``fn() -> ndarray`` producing a new tensor on ``device``."""
    dev = devices.as_device(device)
    be = dev._backend
    buf = be.empty(dev.index, shape, dtype)
    handle = dev._ctx.stream if stream is None else stream.handle
    be.runtime.launch(be.phys(dev.index), handle, "test_kernel", lambda ctx: fn(), buf, (), None)
    return _wrap(buf, shape, dtype, dev)


def slow(device, values, delay=0.3, stream=None):
    arr = np.asarray(values, np.float32)

    def fn():
        time.sleep(delay)
        return arr

    return launch(device, fn, arr.shape, stream=stream)


def raw(t: ad.Tensor) -> np.ndarray:
    """Device bytes as they are right now, without synchronizing (what a missing sync would see)."""
    b = t._buf
    data = runtime(t.device.type).peek(b.index, b.handle, b.byte_offset, b.nbytes)
    return np.frombuffer(data, t.dtype.numpy).reshape(t.shape)


# --- profiles ------------------------------------------------------------------------------
def test_profiles_env_json_and_config_file(tmp_path):
    p = profiles.load_profile("npu", {"ANYDEVICE_SIM_NPU_PROFILE": '{"count": 2, "memory": 1073741824}'})
    assert (p.count, p.memory) == (2, 1 << 30) and "float64" not in p.dtypes
    cfg = tmp_path / "sim.toml"
    cfg.write_text('[xpu]\ncount = 3\nmemory = "128MiB"\npeak_flops = 1e12\n')
    p = profiles.load_profile("xpu", {"ANYDEVICE_SIM_CONFIG": str(cfg)})
    assert (p.count, p.memory, p.peak_flops) == (3, 128 * MiB, 1e12) and "erf" in p.missing_ops
    with pytest.raises(ValueError, match="unknown profile field.*'cores'.*allowed"):
        profiles.load_profile("dcu", {"ANYDEVICE_SIM_DCU_PROFILE": '{"cores": 4}'})
    with pytest.raises(ValueError, match="not valid JSON"):
        profiles.load_profile("dcu", {"ANYDEVICE_SIM_DCU_PROFILE": "count=4"})


def test_small_profile_is_in_effect():
    assert ad.device.device_count("npu") == 4 and ad.device.device_count("xpu") == 2
    assert ad.device.get_device_properties("npu:3")["total_memory"] == 64 * MiB


# --- memory ----------------------------------------------------------------------------------
def test_device_memory_is_opaque_and_accounted():
    rt = runtime()
    free0, total = rt.memory_info(2)
    h = rt.malloc(2, 1000)
    assert isinstance(h, int) and not isinstance(h, np.ndarray)
    assert rt.memory_info(2) == (free0 - 1000, total)
    rt.copy_h2d(2, h, 8, np.arange(4, dtype=np.float32))
    out = np.empty(4, np.float32)
    rt.copy_d2h(2, out, h, 8)
    assert out.tolist() == [0, 1, 2, 3]
    rt.free(2, h)
    assert rt.memory_info(2) == (free0, total)
    assert rt.memory_info(3)[0] == total - sum(m.nbytes for m in rt.chips[3].store.values())


def test_reshape_shares_device_memory():
    x = ad.arange(12, dtype=ad.float32, device="npu:0")
    y = ad.reshape(x, (3, 4))
    assert y._buf.block is x._buf.block
    np.testing.assert_array_equal(y.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4))


def test_out_of_memory_message_and_recovery():
    big = (6 * MiB,)  # 24 MiB of float32; the device holds 64 MiB
    a = ad.zeros(big, device="npu:1")
    b = ad.ones(big, device="npu:1")
    with pytest.raises(ad.OutOfMemoryError, match=r"Cannot allocate 24\.00 MiB on npu:1: .*device capacity 64\.00 MiB \(16\.00 MiB free\)"):
        ad.ones(big, device="npu:1")
    assert ad.ones((4,), device="npu:2").sum().item() == 4  # other devices unaffected
    del a
    c = ad.full(big, 2.0, device="npu:1")  # memory freed by a is reused
    assert c[-1].item() == 2.0 and b[0].item() == 1.0


def test_unsupported_dtype_is_refused_clearly():
    with pytest.raises(TypeError, match="npu:0 does not support dtype float64; it supports: .*float32"):
        ad.asarray(np.zeros(3), device="npu:0")
    x = ad.ones((3,), device="npu:0")
    with pytest.raises(TypeError, match="npu:0 does not support dtype complex64"):
        x.astype(ad.complex64)
    with pytest.raises(TypeError, match="xpu:0 does not support dtype complex128"):
        ad.asarray(np.zeros(2, np.complex128), device="xpu:0")
    assert ad.asarray(np.ones(3), device="dcu:0").astype(ad.complex128).sum().item() == 3


# --- streams, events, synchronization --------------------------------------------------------
def test_launch_returns_at_once_and_host_reads_synchronize():
    t0 = time.perf_counter()
    y = slow("npu:0", [7, 7, 7, 7], delay=0.6)
    assert time.perf_counter() - t0 < 0.3  # queued, not run (generous margin for loaded machines)
    assert not np.array_equal(raw(y), [7, 7, 7, 7])  # a read without synchronization sees stale bytes
    assert y.tolist() == [7, 7, 7, 7]  # copy_d2h waits for the queued kernel
    assert time.perf_counter() - t0 >= 0.6


def test_ordering_within_a_stream():
    y = slow("npu:0", [1, 2, 3, 4], delay=0.2)
    z = (y * 10 + 1) - y  # queued behind the slow kernel on the same stream
    assert z.tolist() == [10, 19, 28, 37]


def test_synchronize_and_stream_query():
    s = Stream("npu:1")
    y = slow("npu:1", [5, 5, 5, 5], delay=0.2, stream=s)
    assert not s.query()
    s.synchronize()
    assert s.query()
    assert np.array_equal(raw(y), [5, 5, 5, 5])


def test_events_order_work_across_streams():
    s1, s2 = Stream("npu:0"), Stream("npu:0")
    y = slow("npu:0", [1234.5] * 4, delay=0.3, stream=s1)
    ev = s1.record_event()
    assert not ev.query()
    s2.wait_event(ev)
    with stream_guard(s2):
        z = y + 1
    done = Event("npu:0")
    done.record(s2)
    done.synchronize()
    assert ev.query() and np.array_equal(raw(z), [1235.5] * 4)


def test_missing_stream_wait_is_observable():
    s1, s2 = Stream("npu:0"), Stream("npu:0")
    y = slow("npu:0", [4321.25] * 4, delay=0.3, stream=s1)
    with stream_guard(s2):
        z = y + 1  # no wait_event: s2 runs ahead of s1 and reads y before it is written
    s2.synchronize()
    assert not np.array_equal(raw(z), [4322.25] * 4)
    s1.synchronize()


def test_elapsed_time_is_the_modelled_time_of_the_work_between():
    rt = runtime()
    x = ad.ones((1 << 18,), device="npu:0")
    start, end = Event("npu:0"), Event("npu:0")
    start.record()
    y = x + x
    end.record()
    expected = rt.device_time("add", 3 * x.size * 4, x.size) * 1e3
    assert start.elapsed_time(end) == pytest.approx(expected)
    assert y[0].item() == 2


def test_elementwise_fast_path_models_broadcast_and_scalars():
    rt = runtime()
    x = ad.arange(12, dtype=ad.float32, device="npu:1").reshape((3, 4))
    row = ad.asarray([1.0, 2.0, 3.0, 4.0], device="npu:1")
    start, end = Event("npu:1"), Event("npu:1")
    start.record()
    y = x * row
    end.record()
    expected = rt.device_time("multiply", (12 + 4 + 12) * 4, 12) * 1e3
    assert start.elapsed_time(end) == pytest.approx(expected)
    np.testing.assert_array_equal(y.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4) * [1, 2, 3, 4])
    assert (x + 0.5).numpy()[2].tolist() == [8.5, 9.5, 10.5, 11.5]  # a Python scalar: a 0-d operand
    assert (x < 5).dtype == ad.bool and (x < 5).numpy().sum() == 5


def test_cached_views_never_outlive_device_memory():
    chip = runtime().chips[3]
    free0 = chip.capacity - chip.used
    x = ad.ones((1000,), device="npu:3")
    for _ in range(3):
        x = x + x  # the queued kernels' views go into the device's view cache
    assert x[999].item() == 8 and chip.views
    del x
    ad.device.empty_cache("npu:3")
    assert not chip.views and chip.capacity - chip.used == free0


# --- asynchronous errors ---------------------------------------------------------------------
def _boom():
    raise ValueError("boom")


def test_kernel_error_is_sticky_until_reset():
    y = launch("npu:2", _boom)
    z = y + 1  # queued after the failure: skipped
    for _ in range(2):
        with pytest.raises(ad.DeviceError, match=r"npu:2 .*test_kernel failed on stream 0: ValueError: boom"):
            ad.device.synchronize("npu:2")
    with pytest.raises(ad.DeviceError, match="reset"):
        z.numpy()
    assert ad.ones((2,), device="npu:3").tolist() == [1, 1]  # other devices keep working
    assert (ad.ones((2,)) + 1).tolist() == [2, 2]
    ad.device.synchronize("npu:3")
    faults.reset("npu:2")
    assert (ad.ones((2,), device="npu:2") * 3).tolist() == [3, 3]


def test_event_synchronize_raises_a_pending_error():
    launch("npu:2", _boom)
    ev = Event("npu:2")
    ev.record()
    with pytest.raises(ad.DeviceError, match="boom"):
        ev.synchronize()


# --- multiple devices -----------------------------------------------------------------------
def test_p2p_copy_and_independent_memory():
    rt = runtime()
    x = ad.arange(6, dtype=ad.float32, device="npu:0") * 2
    used1 = rt.chips[1].used
    y = x.to("npu:1")
    assert y.device == "npu:1" and y.tolist() == [0, 2, 4, 6, 8, 10]
    assert y._buf.index == 1 and y._buf.handle != x._buf.handle
    assert rt.chips[1].used >= used1
    z = slow("npu:2", [3, 3, 3, 3], delay=0.2).to("npu:3")  # p2p waits for the source's queued work
    assert z.tolist() == [3, 3, 3, 3]


def test_all_reduce_through_the_plugin_hook(monkeypatch):
    def no_staging(*a):
        raise AssertionError("all_reduce staged through the host instead of using the plugin hook")

    monkeypatch.setattr(ad.distributed.devices, "_through_host", no_staging)
    ts = [ad.asarray([1.0, -2.0, 3.0], device=f"npu:{i}") * (i + 1) for i in range(4)]
    out = ad.distributed.all_reduce(ts, op="sum")
    assert [str(t.device) for t in out] == ["npu:0", "npu:1", "npu:2", "npu:3"]
    for t in out:
        assert t.tolist() == [10.0, -20.0, 30.0]
    assert ad.distributed.all_reduce(ts[:2], op="max")[1].tolist() == [2.0, -2.0, 6.0]
    assert ad.distributed.all_reduce(ts[:3], op="prod")[0].tolist() == [6.0, -48.0, 162.0]


def test_all_reduce_through_host_without_hook():
    out = ad.distributed.all_reduce([ad.asarray([1.0, 5.0])], op="min")
    assert out[0].device == "cpu" and out[0].tolist() == [1.0, 5.0]


def test_all_reduce_errors():
    a, b = ad.ones((3,), device="npu:0"), ad.ones((3,), device="npu:1")
    with pytest.raises(ValueError, match="devices of one type, got npu:0 and dcu:0"):
        ad.distributed.all_reduce([a, ad.ones((3,), device="dcu:0")])
    with pytest.raises(ValueError, match=r"same shape and dtype.*float32\[3\] on npu:0 and float32\[2\] on npu:1"):
        ad.distributed.all_reduce([a, ad.ones((2,), device="npu:1")])
    with pytest.raises(ValueError, match="npu:0 appears twice"):
        ad.distributed.all_reduce([a, a])
    with pytest.raises(ValueError, match="unknown op 'mean'"):
        ad.distributed.all_reduce([a, b], op="mean")


# --- fault injection --------------------------------------------------------------------------
def test_fault_kernel_after_k():
    x = ad.ones((4,), device="npu:1")
    faults.inject("npu:1", "kernel", after=2)
    y = (x + 1) * 2  # two kernels: fine
    assert y.tolist() == [4, 4, 4, 4]
    z = y - 1  # the third fails
    with pytest.raises(ad.DeviceError, match="npu:1 .*failed.*injected kernel fault"):
        z.numpy()
    assert (ad.ones((4,), device="npu:0") + 1).sum().item() == 8
    faults.reset("npu:1")
    assert (ad.ones((4,), device="npu:1") - 1).tolist() == [0, 0, 0, 0]


def test_fault_alloc():
    ad.ones((4,), device="xpu:1")
    faults.inject("xpu:1", "alloc")
    with pytest.raises(ad.OutOfMemoryError, match="xpu:1") as info:
        ad.ones((4 * MiB,), device="xpu:1")  # needs a new segment from the runtime
    assert "injected" in str(info.value.__cause__)
    assert ad.ones((4 * MiB,), device="xpu:0").shape == (4 * MiB,)
    faults.reset("xpu:1")
    assert ad.ones((4 * MiB,), device="xpu:1")[0].item() == 1


def test_fault_lost_device():
    x = ad.ones((4,), device="dcu:1")
    faults.inject("dcu:1", "lost", after=2)
    x = (x + x) * x  # two kernel launches (no new segment is needed): fine
    with pytest.raises(ad.DeviceError, match=r"dcu:1 \(anydevice-sim-npu\) is lost"):
        x + x  # the launch itself fails: a lost device refuses every call
    with pytest.raises(ad.DeviceError, match="lost"):
        ad.ones((4,), device="dcu:1").numpy()
    assert (ad.ones((4,), device="dcu:0") * 2).tolist() == [2, 2, 2, 2]
    assert ad.ones((2,)).tolist() == [1, 1]
    faults.reset("dcu:1")
    assert (ad.ones((4,), device="dcu:1") + 1).tolist() == [2, 2, 2, 2]


def test_fault_env_spec():
    assert faults.parse("npu:1:kernel:after=3, xpu:0:lost") == [("npu", 1, "kernel", 3), ("xpu", 0, "lost", 0)]
    with pytest.raises(ValueError, match="expected TYPE:INDEX:KIND"):
        faults.parse("npu:kernel")
    rt = runtime("npu")
    with pytest.raises(ad.DeviceUnavailableError, match="unknown fault kind 'oops'; allowed: alloc, kernel, lost"):
        faults.apply_env("npu", rt, {"ANYDEVICE_SIM_FAULTS": "npu:0:oops"})
    faults.apply_env("npu", rt, {"ANYDEVICE_SIM_FAULTS": "npu:3:kernel:after=0,xpu:0:lost"})
    assert rt.chips[3].faults == {"kernel": 0} and not runtime("xpu").chips[0].faults
    with pytest.raises(ad.DeviceError, match="injected kernel fault"):
        (ad.ones((2,), device="npu:3") + 1).numpy()


@pytest.mark.parametrize("spec, message", [
    ("npu:x:kernel", "cannot parse 'npu:x:kernel'; expected TYPE:INDEX:KIND"),
    ("nup:1:kernel", "'nup' is not a simulated device type \\(allowed: npu, xpu, dcu\\); did you mean 'npu'"),
    ("npu:1:kernal,xpu:0:kernel", "entry 'npu:1:kernal': unknown fault kind 'kernal'; allowed: alloc, kernel, lost"),
    ("npu:9:lost", "entry 'npu:9:lost': npu:9 does not exist \\(npu has 4 device"),
])
def test_fault_env_mistake_affects_only_its_own_type(monkeypatch, spec, message):
    monkeypatch.setenv("ANYDEVICE_SIM_FAULTS", spec)
    fresh_runtimes()
    try:
        assert not ad.device.is_available("npu")
        with pytest.raises(ad.DeviceUnavailableError, match=message):
            ad.ones(2, device="npu")
        assert "fix or unset ANYDEVICE_SIM_FAULTS" in _backend.unavailable_hint("npu")
        assert (ad.ones(2, device="dcu:1") + 1).tolist() == [2, 2]
        x = ad.ones(2, device="xpu:0") + 1
        if "xpu:0:kernel" in spec:  # the other type's valid entry still takes effect
            with pytest.raises(ad.DeviceError, match="injected kernel fault"):
                x.tolist()
        else:
            assert x.tolist() == [2, 2]
    finally:
        monkeypatch.delenv("ANYDEVICE_SIM_FAULTS")
        fresh_runtimes()


def test_fault_env_entry_for_no_simulated_type_is_ignored_with_a_warning():
    rt = runtime("npu")
    with pytest.warns(UserWarning, match="entry 'cuda:0:lost' names no simulated device type \\(allowed: npu, xpu, dcu"):
        faults.apply_env("npu", rt, {"ANYDEVICE_SIM_FAULTS": "cuda:0:lost,npu:2:alloc"})
    assert rt.chips[2].faults == {"alloc": 0}
    rt.reset(2)


def test_ops_under_warnings_as_errors():
    """numpy 2.4 deprecates a positional ``out``; under -W error that must not become a device error."""
    a, b = np.array([1.0, -2.0, 3.0], np.float32), np.array([0.5, 4.0, -1.0], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x, y = ad.asarray(a, device="npu:0"), ad.asarray(b, device="npu:0")
        got = [ad.maximum(x, y), ad.minimum(x, y), x + y, x * y, ad.max(x), ad.sum(y), ad.relu(x)]
        got = [t.numpy() for t in got]
    want = [np.maximum(a, b), np.minimum(a, b), a + b, a * b, a.max(), b.sum(), np.maximum(a, 0)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w)


# --- kernels and fallbacks --------------------------------------------------------------------
def test_xpu_missing_primitives_fall_back_to_cpu():
    old = ad.dispatch.set_fallback_mode("silent")
    try:
        before = ad.fallback_counts().get(("erf", "xpu:0"), 0)
        x = ad.asarray([0.0, 0.5, -1.0], device="xpu:0")
        np.testing.assert_allclose(ad.erf(x).numpy(), [0.0, 0.5204999, -0.8427008], rtol=1e-5)
        assert ad.fallback_counts()[("erf", "xpu:0")] == before + 1
        assert "erf" not in _backend.get_backend("xpu").kernels and "erf" in _backend.get_backend("npu").kernels
    finally:
        ad.dispatch.set_fallback_mode(old)


def test_every_primitive_has_a_native_kernel_on_npu():
    from anydevice.ops.registry import primitives

    table = _backend.get_backend("npu").kernels
    assert [o.name for o in primitives() if o.name not in table] == []


def test_host_threads_share_a_device():
    results = {}

    def work(i):
        x = ad.full((64,), float(i), device="npu:0")
        results[i] = ((x * 2).sum()).item()

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert results == {i: 128.0 * i for i in range(4)}


# --- end to end -------------------------------------------------------------------------------
def _train(device, steps=5):
    rng = np.random.default_rng(0)
    X = ad.asarray(rng.standard_normal((16, 8)).astype(np.float32), device=device)
    T = ad.asarray(rng.standard_normal((16, 4)).astype(np.float32), device=device)
    W = ad.asarray((rng.standard_normal((4, 8)) * 0.1).astype(np.float32), device=device).requires_grad_()
    b = ad.zeros((4,), device=device).requires_grad_()
    losses = []
    for _ in range(steps):
        loss = ((ad.linear(X, W, b) - T) ** 2).mean()
        loss.backward()
        with ad.no_grad():
            W -= 0.1 * W.grad
            b -= 0.1 * b.grad
        W.clear_grad()
        b.clear_grad()
        losses.append(loss.item())
    return losses


def test_training_loop_matches_cpu():
    ref = _train("cpu")
    assert ref[-1] < ref[0]
    for dev in ("npu:0", "xpu:0", "dcu:0"):
        np.testing.assert_allclose(_train(dev), ref, rtol=1e-5, atol=1e-6)


def test_non_blocking_upload_is_queued_behind_earlier_work():
    slow("npu:0", [0, 0, 0, 0], delay=0.6)
    values = [1.125, -2.25, 3.375, -4.5]  # values no earlier test leaves in recycled device memory
    host = ad.asarray(values)
    t0 = time.perf_counter()
    y = host.to("npu:0", non_blocking=True)
    assert time.perf_counter() - t0 < 0.3, "the copy was queued, not waited for"
    assert not np.array_equal(raw(y), values)
    assert y.tolist() == values
    z = host.to("npu:1")  # blocking by default: the bytes are there on return
    assert np.array_equal(raw(z), values)
