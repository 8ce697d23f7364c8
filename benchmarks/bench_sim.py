"""The simulated accelerators next to the cpu backend, side by side in one run.

    python benchmarks/bench_sim.py [--devices npu,xpu,dcu] [--rounds 9] [--steps 20]

1. tiny ops: ``a + b`` of two 4-element float32 tensors and ``sum`` of a 4x4 one, per op,
   *including* running the queued work (a synchronize ends every burst);
2. one MLP training step: 64-256-10 perceptron, batch 256, cross entropy, Adam (the model of
   ``examples/mlp_digits.py``), synchronized at the end of each burst of steps.

Devices are measured in turn within every round (interleaved), so load drift hits all of them
alike; each figure is the median over the rounds, with the min-max range, and the ratio is to
the cpu backend measured in the same rounds. Unset OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE when
comparing absolute figures to numpy.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import anydevice as ad
from anydevice import nn, optim


def tiny_add(dev: str):
    a = ad.asarray([1.0, 2.0, 3.0, 4.0], device=dev)
    b = ad.asarray([0.5, 0.5, 0.5, 0.5], device=dev)
    return (lambda: a + b), (lambda c: c.tolist() == [1.5, 2.5, 3.5, 4.5])


def tiny_sum(dev: str):
    x = ad.asarray(np.arange(16, dtype=np.float32).reshape(4, 4), device=dev)
    return (lambda: ad.sum(x)), (lambda c: float(c.item()) == 120.0)


def mlp_step(dev: str, batch: int = 256):
    """One Adam step of the digits perceptron on a fixed random batch (the data stays on the device)."""
    ad.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).to(dev)
    opt = optim.Adam(model.parameters(), lr=3e-3)
    ce = nn.CrossEntropyLoss()
    rng = np.random.default_rng(0)
    x = ad.asarray(rng.random((batch, 64), dtype=np.float32), device=dev)
    y = ad.asarray(rng.integers(0, 10, batch), device=dev)

    def step():
        loss = ce(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return step, (lambda loss: np.isfinite(float(loss.item())))


def burst(fn, dev: str, n: int) -> float:
    """Seconds per call of ``fn`` over ``n`` calls, queued work included."""
    t0 = time.perf_counter()
    for _ in range(n):
        r = fn()
    ad.device.synchronize(dev)
    t = (time.perf_counter() - t0) / n
    burst.last = r
    return t


def compare(name: str, make, devices: list[str], n: int, rounds: int) -> list[tuple]:
    """Interleaved medians of ``make(dev)``'s callable on every device; rows (name, dev, median, lo, hi, ratio)."""
    fns = {}
    for dev in devices:
        fn, ok = make(dev)
        burst(fn, dev, max(1, n // 10))  # warm caches and start the stream workers
        if not ok(burst.last):
            raise AssertionError(f"{name} on {dev} gave a wrong result")
        fns[dev] = fn
    times = {dev: [] for dev in devices}
    for _ in range(rounds):
        for dev in devices:
            times[dev].append(burst(fns[dev], dev, n))
    base = statistics.median(times[devices[0]])
    rows = []
    for dev in devices:
        t = times[dev]
        med = statistics.median(t)
        rows.append((name, dev, med, min(t), max(t), med / base))
    return rows


def report(rows: list[tuple], target: float) -> None:
    for name, dev, med, lo, hi, ratio in rows:
        mark = "" if dev == "cpu" else f"   {ratio:5.2f}x cpu (target <= {target:g}x)"
        print(f"{name:<28} {dev:<6} {med * 1e6:9.2f} us  [{lo * 1e6:8.2f} - {hi * 1e6:8.2f}]{mark}")


def main(argv=None) -> list[tuple]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", default="npu,xpu,dcu", help="simulated devices to put next to the cpu")
    p.add_argument("--rounds", type=int, default=9, help="interleaved rounds (median, min-max over them)")
    p.add_argument("--n", type=int, default=2000, help="tiny ops per burst")
    p.add_argument("--steps", type=int, default=20, help="MLP steps per burst")
    args = p.parse_args(argv)
    devices = ["cpu"] + [d.strip() for d in args.devices.split(",") if d.strip()]
    print(f"load average {os.getloadavg()[0]:.2f}; median of {args.rounds} interleaved rounds [min - max]")
    rows = []
    for name, make, n, target in (("add 4 x float32 (+sync)", tiny_add, args.n, 3.0),
                                  ("sum 4x4 float32 (+sync)", tiny_sum, args.n, 3.0),
                                  ("MLP step 64-256-10 b256", mlp_step, args.steps, 1.5)):
        r = compare(name, make, devices, n, args.rounds)
        report(r, target)
        rows += r
    return rows


if __name__ == "__main__":
    main()
