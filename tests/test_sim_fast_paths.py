"""The simulated devices' eager fast paths: native kernels of the common composites, registry
kernels that allocate their own result, cost plans kept per shapes. Results equal the cpu
backend's bit for bit, the modelled time is the cost model's, and bad input raises what it
raises on the cpu."""
from __future__ import annotations

import numpy as np
import pytest

import anydevice as ad
from anydevice import nn
from anydevice.nn import functional as F
from anydevice.profiler import profile

sim = pytest.importorskip("anydevice_sim_npu")
from anydevice_sim_npu import faults  # noqa: E402
from anydevice_sim_npu.kernels import COMMON, COMMON_UFUNCS  # noqa: E402

RNG = np.random.default_rng(7)
X = RNG.standard_normal((6, 5)).astype(np.float32)
Y = RNG.standard_normal((6, 5)).astype(np.float32)
W = RNG.standard_normal((3, 5)).astype(np.float32)
B = RNG.standard_normal(3).astype(np.float32)
LABELS = np.array([0, 2, 1, 4, 3, 0])

#: name -> f(x, y, w, b, labels) over tensors of one device
CASES = {
    "linear": lambda x, y, w, b, t: ad.linear(x, w, b),
    "relu": lambda x, y, w, b, t: F.relu(x),
    "softmax": lambda x, y, w, b, t: ad.softmax(x, axis=-1),
    "log_softmax": lambda x, y, w, b, t: ad.log_softmax(x, axis=0),
    "cross_entropy": lambda x, y, w, b, t: F.cross_entropy(x, t),
    "mean": lambda x, y, w, b, t: ad.mean(x, axis=1, keepdims=True),
    "var": lambda x, y, w, b, t: ad.var(x, correction=1),
    "matrix_transpose": lambda x, y, w, b, t: ad.matrix_transpose(x),
    "expand_dims": lambda x, y, w, b, t: ad.expand_dims(x, axis=1),
    "squeeze": lambda x, y, w, b, t: ad.squeeze(ad.expand_dims(x, axis=0), axis=0),
    "greater": lambda x, y, w, b, t: x > y,
    "greater_equal": lambda x, y, w, b, t: x >= 0.0,
    "not_equal": lambda x, y, w, b, t: ad.not_equal(x, y[0]),
    "logical_and": lambda x, y, w, b, t: ad.logical_and(x > 0, y > 0),
    "logical_not": lambda x, y, w, b, t: ad.logical_not(x > y),
    "any": lambda x, y, w, b, t: ad.any(x > 1.0, axis=0), "all": lambda x, y, w, b, t: ad.all(x > -3.0),
    "isnan": lambda x, y, w, b, t: ad.isnan(ad.log(x)), "isinf": lambda x, y, w, b, t: ad.isinf(x / 0.0),
    "isfinite": lambda x, y, w, b, t: ad.isfinite(ad.log(x)),
    # primitives through the kernels that allocate their own result
    "sum": lambda x, y, w, b, t: ad.sum(x, axis=0),
    "max": lambda x, y, w, b, t: ad.max(x),
    "permute_dims": lambda x, y, w, b, t: ad.permute_dims(x, (1, 0)),
    "getitem": lambda x, y, w, b, t: x[1:4, ::2],
    "concat": lambda x, y, w, b, t: ad.concat([x, y, x], axis=1),
    "where": lambda x, y, w, b, t: ad.where(x > y, x, y),
    "astype": lambda x, y, w, b, t: x.astype(ad.float16),
    "exp": lambda x, y, w, b, t: ad.exp(x),
    "matmul": lambda x, y, w, b, t: x @ ad.matrix_transpose(w),
}


def _run(dev, f):
    args = [ad.asarray(v, device=dev) for v in (X, Y, W, B, LABELS)]
    return f(*args).numpy()


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("device", ["npu", "dcu", "xpu"])
def test_results_are_the_cpu_backends_bit_for_bit(device, name):
    want, got = _run("cpu", CASES[name]), _run(device, CASES[name])
    assert got.dtype == want.dtype and got.shape == want.shape
    if device == "xpu" and name in COMMON:  # decomposed there: other roundings
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    else:
        assert got.tobytes() == want.tobytes(), f"{name} on {device}: {got} != {want}"


def _path(device, name):
    with profile() as prof:
        _run(device, CASES[name])
    return prof[name].path


@pytest.mark.parametrize("name", sorted(set(COMMON) | set(COMMON_UFUNCS)))
def test_common_composites_are_native_on_npu_and_dcu_and_decompose_on_xpu(name):
    be = {t: ad.devices.as_device(f"{t}:0")._backend for t in ("npu", "dcu", "xpu")}
    cpu = ad.devices.as_device("cpu")._backend.kernels  # the kernels the simulated devices borrow their math from
    if name not in cpu:
        pytest.skip(f"the cpu backend's kernel table has no {name}")
    assert name in be["npu"].kernels and name in be["dcu"].kernels
    assert name not in be["xpu"].kernels  # its profile lacks primitives: composites decompose there
    if name in CASES:
        assert _path("npu", name) == "native"
        assert _path("xpu", name) == "decomposed"


def test_modelled_time_of_returning_and_multi_output_kernels_is_the_cost_model():
    rt = ad.devices.as_device("npu:0")._backend.runtime
    p = rt.profile
    x = ad.ones((64, 32), device="npu:0")
    with profile() as prof:
        for _ in range(3):  # the first call builds the plan, the others reuse it
            ad.sum(x, axis=0)
            ad.permute_dims(x, (1, 0))
    nb = (64 * 32 + 32) * 4
    assert prof["sum"].count == 3
    assert prof["sum"].device_time == pytest.approx(3 * (p.launch_latency + max(64 * 32 / p.peak_flops,
                                                                                 nb / p.bandwidth)))
    assert prof["permute_dims"].device_time == pytest.approx(3 * (p.launch_latency + 2 * 64 * 32 * 4 / p.bandwidth))


def test_event_timeline_of_an_adam_step_is_the_sum_of_its_kernels():
    """Adam's update (one kernel, several outputs) keeps its cost per shapes; the stream clock
    still advances by the profiler's modelled time, step after step."""
    from anydevice.device import Event

    ad.manual_seed(0)
    model = nn.Linear(8, 4).to("npu:2")
    opt = ad.optim.Adam(model.parameters(), lr=1e-2)
    x = ad.ones((5, 8), device="npu:2")
    for _ in range(2):
        model(x).sum().backward()
        opt.step()
    rt = ad.devices.as_device("npu:2")._backend.runtime
    rt.start_trace(2)
    for _ in range(2):
        opt.step()
    trace = rt.stop_trace(2)
    upd = [(end - start) for _, name, start, end in trace if name == "adam_update"]
    assert len(upd) == 4
    assert upd[0] == pytest.approx(upd[2]) and upd[1] == pytest.approx(upd[3])
    start, end = Event("npu:2"), Event("npu:2")
    start.record()
    opt.step()
    end.record()
    assert start.elapsed_time(end) == pytest.approx((upd[0] + upd[1]) * 1e3)


def _errors(device):
    x = ad.asarray(X, device=device)
    out = []
    for f in (lambda: ad.sum(x, axis=2), lambda: ad.permute_dims(x, (0, 0)), lambda: ad.concat([x, x[:, :2]]),
              lambda: ad.linear(x, ad.asarray(W[:, :4], device=device)), lambda: ad.softmax(x, axis=3),
              lambda: ad.squeeze(x, axis=0), lambda: F.cross_entropy(x, ad.asarray(LABELS[:5], device=device)),
              lambda: F.cross_entropy(x, ad.asarray(LABELS + 3, device=device))):
        with pytest.raises((ValueError, TypeError, IndexError)) as e:
            f()
        out.append((type(e.value), str(e.value).replace(str(x.device), "DEVICE")))
    return out


def test_bad_input_raises_what_the_cpu_raises():
    want = _errors("cpu")
    for device in ("npu", "dcu", "xpu"):
        assert _errors(device) == want, device


def test_a_failing_returning_kernel_is_sticky_until_reset():
    x = ad.asarray(X, device="npu:3")
    faults.inject("npu:3", "kernel", after=0)
    y = ad.sum(x, axis=0)  # the kernel fails on the device; the host learns at the next sync
    with pytest.raises(ad.DeviceError, match="injected"):
        y.numpy()
    faults.reset("npu:3")
    assert ad.sum(ad.asarray(X, device="npu:3"), axis=0).numpy().tobytes() == ad.sum(ad.asarray(X), axis=0).numpy().tobytes()


def test_results_survive_freed_memory_and_reused_chunks():
    """Plans hold view tables; freeing device memory empties them, so later results stay right."""
    for i in range(3):
        a = ad.asarray(X + i, device="npu:4")
        s = ad.sum(a, axis=1)
        t = ad.permute_dims(a, (1, 0))
        del a
        assert s.numpy().tobytes() == ad.sum(ad.asarray(X + i), axis=1).numpy().tobytes()
        assert t.numpy().tobytes() == np.ascontiguousarray((X + i).T).tobytes()


@pytest.mark.parametrize("shape", [(3, 5), (130, 70), (64, 65), (1, 300), (256, 256), (300, 257), (2, 260, 270)])
def test_transposes_of_large_matrices_are_exact(shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    a = ad.asarray(x, device="npu")
    want = np.ascontiguousarray(np.swapaxes(x, -1, -2))
    assert ad.matrix_transpose(a).numpy().tobytes() == want.tobytes()
    axes = tuple(range(len(shape) - 2)) + (len(shape) - 1, len(shape) - 2)
    assert ad.permute_dims(a, axes).numpy().tobytes() == want.tobytes()
    rev = tuple(reversed(range(len(shape))))
    assert ad.permute_dims(a, rev).numpy().tobytes() == np.ascontiguousarray(x.transpose(rev)).tobytes()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32", "complex64", "bool"])
def test_kernels_writing_into_device_memory_match_the_cpu_in_every_dtype(dtype):
    d = getattr(ad, dtype)
    x = ad.asarray((RNG.standard_normal((33, 17)) * 5).astype(np.float32)).astype(d)
    w = ad.asarray((RNG.standard_normal((9, 17)) * 5).astype(np.float32)).astype(d)
    cases = {"relu": lambda x, w: F.relu(x), "matmul": lambda x, w: x @ ad.matrix_transpose(w),
             "astype_i32": lambda x, w: x.astype(ad.int32), "astype_f32": lambda x, w: x.astype(ad.float32),
             "negative": lambda x, w: -x, "abs": lambda x, w: ad.abs(x), "exp": lambda x, w: ad.exp(x),
             "linear": lambda x, w: ad.linear(x, w, w[:, 0]), "sum": lambda x, w: ad.sum(x),
             "sum_axis": lambda x, w: ad.sum(x, axis=0, keepdims=True), "prod": lambda x, w: ad.prod(x, axis=1),
             "max": lambda x, w: ad.max(x, axis=(0, 1)), "min": lambda x, w: ad.min(x, axis=-1),
             "concat": lambda x, w: ad.concat([x, w], axis=0), "concat_flat": lambda x, w: ad.concat([x, w], axis=None),
             "where": lambda x, w: ad.where(x > x[0], x, x[:1])}
    for dev in ("npu", "dcu"):
        if d not in ad.devices.as_device(dev)._backend.dtypes(0):
            continue  # npu has no complex dtypes
        xs, ws = x.to(dev), w.to(dev)
        for name, f in cases.items():
            try:
                want = f(x, w).numpy()
            except TypeError:  # the op does not take this dtype: the device must refuse it alike
                with pytest.raises(TypeError):
                    f(xs, ws)
                continue
            got = f(xs, ws).numpy()
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (name, dev, dtype)


def test_adam_steps_equal_the_cpus_bit_for_bit():
    def run(dev):
        ad.manual_seed(3)
        model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 3)).to(dev)
        opt = ad.optim.Adam(model.parameters(), lr=1e-2, weight_decay=1e-3, amsgrad=True)
        x = ad.asarray(X[:, :4].repeat(3, axis=1), device=dev)
        for _ in range(3):
            opt.zero_grad()
            F.cross_entropy(model(x), ad.asarray(LABELS % 3, device=dev)).backward()
            opt.step()
        return [p.numpy().tobytes() for p in model.parameters()]

    want = run("cpu")
    assert run("npu") == want and run("dcu") == want


def test_a_replayed_cross_entropy_with_a_bad_label_leaves_the_device_usable():
    """The replay runs before its label check's flag is read: the native kernel must not fault."""
    from anydevice import jit

    logits = ad.asarray(X, device="npu:5")
    f = jit.compile(lambda lg, y: F.cross_entropy(lg, y))
    good = ad.asarray(LABELS, device="npu:5")
    f(logits, good)
    f(logits, good)
    with pytest.raises(IndexError, match="label"):
        f(logits, ad.asarray(LABELS + 2, device="npu:5"))
    assert f(logits, good).numpy().tobytes() == F.cross_entropy(ad.asarray(X), ad.asarray(LABELS)).numpy().tobytes()


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "getitem", "cross_entropy", "linear", "relu", "mean", "var"])
def test_gradients_equal_the_cpus_bit_for_bit(name):
    """Backward passes run the fused gradient ops natively too (softmax_grad, getitem_grad, ...)."""
    scale = RNG.standard_normal(np.asarray(CASES[name](*[ad.asarray(v) for v in (X, Y, W, B, LABELS)])).shape)

    def grad(dev):
        x = ad.asarray(X, device=dev).requires_grad_()
        out = CASES[name](x, *[ad.asarray(v, device=dev) for v in (Y, W, B, LABELS)])
        ad.sum(out * ad.asarray(scale.astype(np.float32), device=dev)).backward()
        return x.grad.numpy().tobytes()

    want = grad("cpu")
    assert grad("npu") == want and grad("dcu") == want


def test_bench_sim_per_op_section_puts_every_op_next_to_add(capsys):
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_sim.py"
    spec = importlib.util.spec_from_file_location("bench_sim", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = mod.main(["--ops", "--devices", "npu", "--rounds", "2", "--n", "5", "--clock", "process"])
    assert [(r[0], r[1]) for r in rows] == [(op, d) for op in mod.OPS for d in ("cpu", "npu")]
    assert all(r[5] == 1.0 for r in rows if r[0] == "add") and all(0 < r[3] <= r[2] <= r[4] for r in rows)
    out = capsys.readouterr().out
    assert "process time" in out and out.count("x npu add") == len(mod.OPS)
