"""anydevice.profiler: per-op counts, host time, and modelled device time."""
from __future__ import annotations

import numpy as np
import pytest

import anydevice as ad
from anydevice import dispatch
from anydevice.profiler import cost_inputs, profile


def test_counts_and_host_time_on_cpu():
    x = ad.ones((8, 8))
    with profile() as prof:
        for _ in range(3):
            y = ad.add(x, x)
        z = ad.matmul(y, x)
    assert prof["add"].count == 3 and prof["matmul"].count == 1
    assert prof["add"].host_time > 0 and prof["add"].device_time is None  # cpu has no cost model
    assert prof["matmul"].flops == 2 * 8 * 8 * 8
    assert prof["add"].nbytes == 3 * (3 * 64 * 4)
    assert "add" in prof and "sum" not in prof
    assert z.shape == (8, 8)
    with pytest.raises(KeyError, match="'sum' was not called while profiling; recorded: add, matmul"):
        prof["sum"]


def test_observer_is_removed_and_profiles_nest():
    n = len(dispatch._observers)
    with profile() as outer:
        ad.ones((2,)) + 1
        with profile() as inner:
            ad.exp(ad.ones((2,)))
    assert len(dispatch._observers) == n
    assert "exp" in outer and "exp" in inner and "add" not in inner
    ad.exp(ad.ones((2,)))
    assert inner["exp"].count == 1


def test_only_top_level_ops_are_recorded():
    x = ad.ones((4, 3))
    with profile() as prof:
        ad.var(x, axis=0)  # composite: its decomposition's ops are not listed separately
    assert prof.ops() == {"var"}


def test_table_lists_every_op():
    with profile() as prof:
        ad.sqrt(ad.ones((3,)))
    text = prof.table()
    assert "sqrt" in text and "calls" in text and "total host" in text


# --- with the simulated devices' cost model ---------------------------------------------------
sim = pytest.importorskip("anydevice_sim_npu")


def test_device_time_follows_the_cost_model():
    rt = ad.devices.as_device("npu:0")._backend.runtime
    p = rt.profile
    a = ad.ones((64, 128), device="npu:0")
    b = ad.ones((128, 32), device="npu:0")
    big = ad.ones((1 << 16,), device="npu:0")
    with profile() as prof:
        c = a @ b
        d = big + big
    flops = 2 * 64 * 128 * 32
    nbytes = (64 * 128 + 128 * 32 + 64 * 32) * 4
    assert prof["matmul"].device_time == pytest.approx(p.launch_latency + max(flops / p.peak_flops, nbytes / p.bandwidth))
    add_bytes = 3 * (1 << 16) * 4
    assert prof["add"].device_time == pytest.approx(p.launch_latency + add_bytes / p.bandwidth)
    assert prof.total_device_time == pytest.approx(prof["matmul"].device_time + prof["add"].device_time)
    assert "device" in prof.table() and "modelled" in prof.table()
    assert c[0, 0].item() == 128 and d[0].item() == 2


def test_profiler_agrees_with_the_device_timeline():
    """The simulated stream clock (Event.elapsed_time) and the profiler use one cost model."""
    from anydevice.device import Event

    x = ad.ones((1 << 15,), device="npu:1")
    start, end = Event("npu:1"), Event("npu:1")
    with profile() as prof:
        start.record()
        y = ad.multiply(x, x)
        end.record()
    assert start.elapsed_time(end) == pytest.approx(prof["multiply"].device_time * 1e3)
    assert y[0].item() == 1


def test_fallback_ops_have_no_device_time():
    old = dispatch.set_fallback_mode("silent")
    try:
        x = ad.asarray([0.5, 1.0], device="xpu:0")  # the xpu profile has no native erf
        with profile() as prof:
            ad.erf(x)
        s = prof["erf"]
        assert s.path == "fallback" and s.device_time is None and s.count == 1
    finally:
        dispatch.set_fallback_mode(old)


def test_cost_inputs_counts_variadic_inputs():
    xs = [ad.ones((2, 3)), ad.ones((4, 3))]
    out = ad.concat(xs, axis=0)
    from anydevice.ops.registry import get_op

    nbytes, flops = cost_inputs(get_op("concat"), [xs], out)
    assert nbytes == (6 + 12 + 18) * 4 and flops == 18
    assert np.asarray(out).shape == (6, 3)


@pytest.mark.parametrize("device", ["cpu", "npu"])
def test_profiles_a_training_step_with_multi_output_updates(device):
    """An optimizer step runs multi-output ops (adam_update gives a tuple of results): the profiler
    counts their bytes over every result instead of failing on the tuple."""
    from anydevice import nn, optim

    model = nn.Linear(4, 3).to(device)
    opt = optim.Adam(model.parameters(), lr=1e-2)
    x = ad.ones((2, 4), device=device)
    with profile() as prof:
        ad.sum(model(x)).backward()
        opt.step()
    s = prof["adam_update"]
    assert s.count == 2  # the weight and the bias
    w, b = model.weight, model.bias
    # each call reads and writes parameter, gradient, two moments (four buffers in, at least three out)
    assert s.nbytes >= 7 * (w.size + b.size) * 4
