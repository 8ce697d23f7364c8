"""Claims of a compiled OpenCL graph replayed from their recorded launches: once two runs agree,
a replay makes the same allocations and launches with its own buffers and runs none of the
claim's host code; a claim that does other device work, or whose kernel choice is still
changing, keeps running as it is. Results stay eager's bit for bit, wherever the buffers lie."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import anydevice as ad

_reason = ("pyopencl is not installed" if importlib.util.find_spec("pyopencl") is None
           else ad.device.unavailable_reason("opencl"))
pytestmark = pytest.mark.skipif(bool(_reason), reason=f"no usable OpenCL device: {_reason}")
RNG = np.random.default_rng(5)


def _ctx():
    return ad.device.get_backend("opencl").contexts[0]


def _array(a):
    return ad.asarray(a, device="opencl")._buf


def _host(buf, like):
    be = ad.device.get_backend("opencl")
    return np.asarray(be.to_host(buf, 0, like.shape, ad.float32))


def test_a_training_step_replays_recorded_launches_with_the_bits_of_running_its_claims(monkeypatch):
    """The same compiled step twice: one with its claims left unrecorded (they run their host code
    every time), one replaying recorded launches; losses and parameters are equal bit for bit,
    though other allocations in between move every buffer."""
    from anydevice import nn, optim
    from anydevice_opencl import kernels, recording

    made = []
    init = recording.Recorded.__init__
    monkeypatch.setattr(recording.Recorded, "__init__", lambda self, c: (init(self, c), made.append(self))[0])
    # every kernel specialized from the start: a tier switch between the two functions' calls of one
    # step (the counters are shared) would give them other kernels, and other bits, for that step
    monkeypatch.setattr(kernels, "SPECIALIZE_LAUNCHES", 0)
    x = RNG.standard_normal((32, 12)).astype(np.float32)
    y = RNG.integers(0, 5, 32)
    xb, yb = ad.asarray(x, device="opencl"), ad.asarray(y, device="opencl")

    def build():
        ad.manual_seed(3)
        model = nn.Sequential(nn.Linear(12, 40), nn.ReLU(), nn.Linear(40, 5)).to("opencl")
        opt = optim.Adam(model.parameters(), lr=1e-2)
        loss_fn = nn.CrossEntropyLoss()

        def step(xb, yb):
            loss = loss_fn(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss
        return model, ad.jit.compile(step)

    plain_model, plain = build()
    while plain.stats["replays"] == 0:  # traced (an optimizer's first step: twice), claims made
        plain(xb, yb)
    for r in made:
        r.tries = -1  # never recorded
    unrecorded, made[:] = list(made), []
    model, step = build()
    while step.stats["replays"] == 0:
        step(xb, yb)
    assert made and unrecorded
    keep, calls = [], []
    linear = kernels.linear
    monkeypatch.setattr(kernels, "linear", lambda *a, **k: (calls.append(1), linear(*a, **k))[1])
    for i in range(8):
        keep.append(ad.asarray(np.zeros(97 + 31 * i, np.float32), device="opencl"))  # buffers land elsewhere
        want = float(plain(xb, yb).item())
        before = len(calls)
        got = float(step(xb, yb).item())
        assert got == want, (i, got, want)
        if i >= 2:  # recorded: the claim's own host code no longer runs
            assert len(calls) == before, i
    claims = [r for r in made if not getattr(r.claim, "__qualname__", "").startswith("RecordedCall")]  # not native steps
    assert claims and all(r.plan is not None for r in claims), [(r.__name__, r.tries, r.why) for r in claims]
    assert all(r.plan is None for r in unrecorded)
    for a, b in zip(plain_model.parameters(), model.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_a_claim_that_does_other_device_work_is_never_recorded():
    from anydevice_opencl import kernels, recording

    runs = []

    def claim(ctx, bufs):  # a fill, then a launch
        runs.append(1)
        out = ctx.empty((6,), ad.float32)
        ctx.runtime.memset(ctx.index, out.handle, out.byte_offset, 0, out.nbytes, ctx.stream)
        kernels.elementwise(ctx, "add", kernels.View.of(out), [kernels.View.of(bufs[0]), kernels.View.of(bufs[1])],
                            (6,))
        return [out]

    r = recording.Recorded(claim)
    a, b = np.arange(6, dtype=np.float32), np.ones(6, np.float32)
    for _ in range(4):
        out = r(_ctx(), [_array(a), _array(b)])[0]
        np.testing.assert_array_equal(_host(out, a), a + b)
    assert len(runs) == 4 and r.plan is None and r.tries == -1


def test_a_claim_is_recorded_only_once_its_kernel_tier_is_settled(monkeypatch):
    """Small work runs generic-tier kernels for a number of launches, then specialized ones (other
    bits for a matmul): a run that chose a generic kernel is not a plan."""
    from anydevice_opencl import kernels, recording

    monkeypatch.setattr(kernels, "_generic_runs", {})
    monkeypatch.setattr(kernels, "SPECIALIZE_LAUNCHES", 3)

    def claim(ctx, bufs):
        out = ctx.empty((4, 5), ad.float32)
        kernels.matmul(ctx, out, bufs[0], bufs[1])
        return [out]

    r = recording.Recorded(claim)
    a = RNG.standard_normal((4, 3)).astype(np.float32)
    b = RNG.standard_normal((3, 5)).astype(np.float32)
    frozen = []
    for _ in range(8):
        out = r(_ctx(), [_array(a), _array(b)])[0]
        np.testing.assert_allclose(_host(out, np.empty((4, 5))), a @ b, rtol=1e-5, atol=1e-6)
        frozen.append(r.plan is not None)
    assert frozen[:3] == [False] * 3 and frozen[-1], frozen
    assert kernels._generic_runs.get(("mm", "float32", "packed")) == 3


def test_a_planned_kernel_call_is_replayed_from_its_launches():
    """``runtime.replayable``: what a compiled graph's planned executor calls for a native kernel."""
    from anydevice_opencl import kernels

    calls = []

    def mm(ctx, out, a, b):
        calls.append(1)
        kernels.matmul(ctx, out, a, b)

    fn = ad.device.get_backend("opencl").runtime.replayable(mm, {})
    keep = []
    for i in range(5):
        keep.append(_array(np.zeros(50 + 70 * i, np.float32)))  # the next arrays land elsewhere
        a = RNG.standard_normal((32, 16)).astype(np.float32)
        b = RNG.standard_normal((16, 40)).astype(np.float32)
        out = _ctx().empty((32, 40), ad.float32)
        assert fn(_ctx(), out, _array(a), _array(b)) is None
        np.testing.assert_allclose(_host(out, np.empty((32, 40))), a @ b, rtol=1e-5, atol=1e-5)
    assert len(calls) == 2  # two runs that agree, then replays


def test_an_argument_two_arrays_could_hold_is_placed_by_the_next_run():
    """An int64 array in the same buffer can seem to hold a float32 argument (its offset read in
    8-byte units): the plan keeps both candidates, and a run with the buffers elsewhere keeps the
    one that places the argument in both runs."""
    import pyopencl as cl

    from anydevice.runtime.contract import DeviceArray
    from anydevice_opencl import recording

    buf = _ctx().empty((4096,), ad.float32).handle
    assert type(buf) is cl.Buffer

    class Block:
        def __init__(self, offset):
            self.handle, self.offset = buf, offset

    launcher = object()

    def run(x_bytes):
        x = DeviceArray(Block(x_bytes), (64,), ad.float32)
        lab = DeviceArray(Block(512), (256,), ad.int64)
        r = object.__new__(recording._Run)
        r.arrays, r.allocs, r.results, r.outs = [x, lab], [], [], []
        r.clean, r.impure = True, False
        r.launches = [(launcher, (64,), (64,), [buf, x_bytes // 4, 7])]
        return r

    plan = run(1024).plan(2)
    assert [c for _, c in plan[0][4]] == [[(0, 0), (1, 192)]]  # x itself, or lab 192 elements in
    assert recording._final(plan) is None
    narrowed = recording._narrow(plan, run(2048))  # x moved, lab did not: only x places it
    assert recording._final(narrowed)[0][4] == [(0, 0, 0)]
    assert recording._narrow(plan, run(1024))[0][4] == plan[0][4]  # the same places: both remain
    moved = run(2048)
    moved.launches[0][3][2] = 8  # another constant argument: not the same launch
    assert recording._narrow(plan, moved) is None
