"""The static-graph figures of ``anydevice bench``: the digits MLP training step (64-256-10, batch
256, Adam; forward, backward and optimizer step as one graph) compiled with ``anydevice.jit``
against its own eager form on each device and against torch CPU eager, all measured in one run,
interleaved (each round runs every contender in turn; median, min and max over rounds).

Also per device: the first-compile time (tracing, passes, partitioning, the backend's graph
compiler, and the first replay, over one eager step's time), the compiled graph's shape (nodes,
fused kernels), and the peak memory of one step, compiled vs eager (the device allocator's peak
above what was allocated before the step; on cpu, numpy's allocations as ``tracemalloc`` sees
them). Both forms start from the same weights and see the same batches; their final losses are
printed side by side.
"""
from __future__ import annotations

import time
import tracemalloc

import numpy as np


def _data(batch: int, notes: list) -> list:
    """The digits (scikit-learn's 8x8 images, scaled to [0, 1]) in batches; seeded random data without it."""
    rng = np.random.default_rng(1)
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        notes.append("scikit-learn is not installed: the jit MLP step trains on random data")
        images, labels = rng.random((1797, 64), dtype=np.float32), rng.integers(0, 10, 1797)
    else:
        digits = load_digits()
        images, labels = (digits.data / 16.0).astype(np.float32), digits.target.astype(np.int64)
    idx = rng.permutation(len(images))[: len(images) // batch * batch].reshape(-1, batch)
    return [(images[i], labels[i]) for i in idx]


class _Step:
    """One training step of an anydevice MLP on ``dev``; ``compiled`` wraps it in ``anydevice.jit``."""

    def __init__(self, ad, dev, weights, data, lr, compiled):
        from anydevice import nn, optim

        self.ad, self.dev = ad, dev
        self.model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).to(dev)
        for p, w in zip(self.model.parameters(), weights):
            p._buf = ad.asarray(w, device=dev)._buf
        self.opt = optim.Adam(self.model.parameters(), lr=lr)
        self.batches = [(ad.asarray(x, device=dev), ad.asarray(y, device=dev)) for x, y in data]
        model, opt, loss_fn = self.model, self.opt, nn.CrossEntropyLoss()

        def step(x, y):  # reaches the model and optimizer only (not this object's batch counter)
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        self.fn = ad.jit.compile(step) if compiled else step
        self.i, self.loss = 0, None

    def __call__(self):
        x, y = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.loss = self.fn(x, y)
        return self.sync

    def sync(self):
        self.ad.device.synchronize(self.dev)


def _torch_step(torch, weights, data, lr):
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    with torch.no_grad():
        for p, w in zip(model.parameters(), weights):
            p.copy_(torch.from_numpy(np.array(w)))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    batches = [(torch.from_numpy(x.copy()), torch.from_numpy(y.copy())) for x, y in data]
    box = {"i": 0, "loss": None}

    def step():
        x, y = batches[box["i"] % len(batches)]
        box["i"] += 1
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        box["loss"] = loss

    step.loss = lambda: float(box["loss"].item())
    return step


def _rounds(fns: dict, steps: int, rounds: int) -> dict:
    times: dict = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            t0 = time.perf_counter()
            for _ in range(steps):
                after = f()
            if callable(after):
                after()
            times[k].append((time.perf_counter() - t0) / steps)
    return {k: {"median": float(np.median(v)), "min": min(v), "max": max(v)} for k, v in times.items()}


def _peak(ad, dev, step) -> int:
    """Peak bytes one step allocates above what was live before it."""
    step()()
    if str(dev).startswith("cpu"):
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        step()()
        peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
        return peak
    ad.device.reset_peak_memory_stats(dev)
    base = ad.device.memory_allocated(dev)
    step()()
    return ad.device.max_memory_allocated(dev) - base


def bench_jit(devices, steps=20, rounds=7, threads=1, notes=None, torch=None, batch=256, lr=3e-3) -> dict:
    """``{device: {"eager", "compiled": timing stats, "first_compile_s", "eager_step_s", "nodes",
    "fused_kernels", "peak_bytes": {"eager", "compiled"}, "final_loss": {...}}, "torch": stats}``."""
    import anydevice as ad

    notes = notes if notes is not None else []
    data = _data(batch, notes)
    w = np.random.default_rng(0)
    weights = [w.uniform(-1 / 8, 1 / 8, (256, 64)), w.uniform(-1 / 8, 1 / 8, 256),
               w.uniform(-1 / 16, 1 / 16, (10, 256)), w.uniform(-1 / 16, 1 / 16, 10)]
    weights = [a.astype(np.float32) for a in weights]
    out, fns = {}, {}
    for dev in devices:
        eager = _Step(ad, dev, weights, data, lr, compiled=False)
        comp = _Step(ad, dev, weights, data, lr, compiled=True)
        t0 = time.perf_counter()
        while comp.fn.stats["replays"] == 0 and comp.i < 8:  # trace (an optimizer's first step: twice), then a replay
            comp()()
        first = time.perf_counter() - t0
        for _ in range(comp.i):  # as many eager steps (the same batches, so the losses compare), the last timed
            t0 = time.perf_counter()
            eager()()
        eager_step = time.perf_counter() - t0
        st = comp.fn.stats
        out[dev] = {"first_compile_s": first, "eager_step_s": eager_step, "nodes": st.get("nodes"),
                    "fused_kernels": st.get("fused_kernels"), "trace_s": st.get("trace_s"), "compile_s": st.get("compile_s"),
                    "peak_bytes": {"eager": _peak(ad, dev, eager), "compiled": _peak(ad, dev, comp)}}
        fns[f"{dev} eager"], fns[f"{dev} compiled"] = eager, comp
    if torch is not None:
        fns["torch"] = _torch_step(torch, weights, data, lr)
        for _ in range(max((fns[f"{d} eager"].i for d in devices), default=0)):  # as many steps as ours so far
            fns["torch"]()
    for f in fns.values():  # warm-up
        for _ in range(3):
            after = f()
        if callable(after):
            after()
    res = _rounds(fns, steps, rounds)
    for dev in devices:
        e, c = fns[f"{dev} eager"], fns[f"{dev} compiled"]
        out[dev].update(eager=res[f"{dev} eager"], compiled=res[f"{dev} compiled"],
                        final_loss={"eager": float(e.loss.item()), "compiled": float(c.loss.item())})
    if torch is not None:
        out["torch"] = {**res["torch"], "threads": threads, "final_loss": fns["torch"].loss()}
    return out


def print_jit(res: dict) -> None:
    """The figures as a table: per device, compiled vs eager, and compiled vs torch on cpu."""
    tt = res.get("torch")
    head = f"jit: MLP training step (64-256-10, batch 256, Adam) as one graph{'' if tt is None else ', vs torch CPU eager at ' + str(tt['threads']) + ' thread(s)'}"
    print(head)
    if tt is not None:
        print(f"  {'torch CPU eager':<22} {tt['median'] * 1e6:9.1f} us/step   final loss {tt['final_loss']:.4f}")
    for dev, r in res.items():
        if dev == "torch":
            continue
        e, c = r["eager"]["median"], r["compiled"]["median"]
        vs = f"   {c / tt['median']:5.2f}x torch" if tt is not None and dev.startswith("cpu") else ""
        print(f"  {dev + ' eager':<22} {e * 1e6:9.1f} us/step   final loss {r['final_loss']['eager']:.4f}")
        print(f"  {dev + ' compiled':<22} {c * 1e6:9.1f} us/step   final loss {r['final_loss']['compiled']:.4f}"
              f"   {c / e:5.2f}x eager{vs}   ({r['nodes']} nodes, {r['fused_kernels']} fused kernels)")
        pk = r["peak_bytes"]
        print(f"  {'':<22} first compile {r['first_compile_s'] * 1e3:8.1f} ms ({r['first_compile_s'] / r['eager_step_s']:.0f}x "
              f"an eager step)   peak memory per step {pk['compiled'] / 1e6:.2f} MB compiled vs {pk['eager'] / 1e6:.2f} MB eager")
