"""The simulated accelerators next to the cpu backend, side by side in one run.

    python benchmarks/bench_sim.py [--devices npu,xpu,dcu] [--rounds 9] [--steps 20] [--ops]
                                   [--clock wall|process]

1. tiny ops: ``a + b`` of two 4-element float32 tensors and ``sum`` of a 4x4 one, per op,
   *including* running the queued work (a synchronize ends every burst);
2. one MLP training step: 64-256-10 perceptron, batch 256, cross entropy, Adam (the model of
   ``examples/mlp_digits.py``), synchronized at the end of each burst of steps;
3. with ``--ops``: the common ops on a 16x16 float32 (reductions, softmax, views and copies), each
   as a ratio to ``a + b`` on the same device in the same rounds: what a device adds per op beyond
   its cheapest kernel.

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


#: what burst() reads: wall seconds, or with ``--clock process`` the CPU seconds of this process
#: (every thread of it, stream workers included), steadier on a machine others load
CLOCK = [time.perf_counter]


def burst(fn, dev: str, n: int) -> float:
    """Seconds per call of ``fn`` over ``n`` calls, queued work included."""
    clock = CLOCK[0]
    t0 = clock()
    for _ in range(n):
        r = fn()
    ad.device.synchronize(dev)
    t = (clock() - t0) / n
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


#: op name -> f(x, y) of two 16x16 float32 tensors
OPS = {
    "add": lambda x, y: x + y, "sum": lambda x, y: ad.sum(x), "sum(axis=0)": lambda x, y: ad.sum(x, axis=0),
    "max": lambda x, y: ad.max(x), "mean": lambda x, y: ad.mean(x), "var": lambda x, y: ad.var(x),
    "softmax": lambda x, y: ad.softmax(x, axis=-1), "log_softmax": lambda x, y: ad.log_softmax(x, axis=-1),
    "permute_dims": lambda x, y: ad.permute_dims(x, (1, 0)), "x[1:3]": lambda x, y: x[1:3],
    "concat": lambda x, y: ad.concat([x, y]), "where": lambda x, y: ad.where(x > y, x, y),
    "astype": lambda x, y: x.astype(ad.float16), "matmul": lambda x, y: x @ y,
}


def op_costs(devices: list[str], n: int, rounds: int) -> list[tuple]:
    """Per-call seconds of every op of :data:`OPS` on every device (bursts of ``n`` calls and a
    synchronize, interleaved); rows (op, dev, median, lo, hi, ratio to the device's add)."""
    rng = np.random.default_rng(0)
    host = [rng.standard_normal((16, 16)).astype(np.float32) for _ in range(2)]
    args = {dev: [ad.asarray(h, device=dev) for h in host] for dev in devices}
    times = {(op, dev): [] for op in OPS for dev in devices}
    for f in OPS.values():  # warm up: plans, caches, first allocations
        for dev in devices:
            burst(lambda f=f, a=args[dev]: f(*a), dev, max(1, n // 10))
    for _ in range(rounds):
        for op, f in OPS.items():
            for dev in devices:
                times[(op, dev)].append(burst(lambda f=f, a=args[dev]: f(*a), dev, n))
    rows = []
    for op in OPS:
        for dev in devices:
            t = times[(op, dev)]
            med = statistics.median(t)
            rows.append((op, dev, med, min(t), max(t), med / statistics.median(times[("add", dev)])))
    return rows


def report_ops(rows: list[tuple]) -> None:
    for op, dev, med, lo, hi, ratio in rows:
        print(f"{op:<28} {dev:<6} {med * 1e6:9.2f} us  [{lo * 1e6:8.2f} - {hi * 1e6:8.2f}]   {ratio:5.2f}x {dev} add")


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
    p.add_argument("--ops", action="store_true", help="only the per-op costs next to add (section 3)")
    p.add_argument("--clock", choices=("wall", "process"), default="wall",
                   help="wall time, or the CPU time of this process (steadier on a loaded machine)")
    args = p.parse_args(argv)
    CLOCK[0] = time.perf_counter if args.clock == "wall" else time.process_time
    devices = ["cpu"] + [d.strip() for d in args.devices.split(",") if d.strip()]
    print(f"load average {os.getloadavg()[0]:.2f}; median of {args.rounds} interleaved rounds [min - max]; "
          f"{args.clock} time")
    if args.ops:
        rows = op_costs(devices, args.n, args.rounds)
        report_ops(rows)
        return rows
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
