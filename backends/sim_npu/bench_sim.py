"""Tiny-op overhead of the simulated npu next to the cpu, measured in one run.

    python backends/sim_npu/bench_sim.py [--n 20000] [--device npu:0]

Times ``a + b`` on 4-element float32 tensors, including a final synchronize on the device
(the queued kernels are part of the cost), and prints microseconds per op and the ratio.
"""
from __future__ import annotations

import argparse
import time


def tiny_add_us(device: str, n: int = 20000, repeats: int = 5) -> float:
    """Best-of-``repeats`` microseconds per 4-element float32 add on ``device`` (synchronized)."""
    import anydevice as ad

    a = ad.asarray([1.0, 2.0, 3.0, 4.0], device=device)
    b = ad.asarray([0.5, 0.5, 0.5, 0.5], device=device)
    for _ in range(1000):
        c = a + b
    ad.device.synchronize(device)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            c = a + b
        ad.device.synchronize(device)
        best = min(best, (time.perf_counter() - t0) / n)
    assert c.tolist() == [1.5, 2.5, 3.5, 4.5]
    return best * 1e6


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--device", default="npu:0")
    args = p.parse_args(argv)
    cpu = tiny_add_us("cpu", args.n)
    dev = tiny_add_us(args.device, args.n)
    print(f"tiny add (4 x float32): cpu {cpu:.2f} us/op, {args.device} {dev:.2f} us/op, "
          f"ratio {dev / cpu:.2f}x (target <= 3x)")
    return {"cpu_us": cpu, "device_us": dev, "ratio": dev / cpu}


if __name__ == "__main__":
    main()
