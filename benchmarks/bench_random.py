"""Random numbers: ``anydevice.rand`` next to numpy's generator, in one run.

    python benchmarks/bench_random.py [--n 1048576] [--reps 15] [--device cpu]

Times, interleaved rep by rep, ``anydevice.rand((n,))`` (float32, Philox-4x32-10 on ``--device``),
the raw stream (``philox_bits``: uint32 on the cpu, int32 elsewhere; results of other devices are
read back to the host),
``numpy.random.default_rng().random(n)`` (float64, the default) and ``.random(n, dtype=float32)``.
Prints the median and the best time of each, and the ratio of medians to numpy's float64.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import anydevice as ad


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1 << 20)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--device", default="cpu")
    a = p.parse_args(argv)
    rng = np.random.default_rng()
    host = a.device == "cpu"
    cases = {
        "anydevice.rand float32": lambda: ad.rand((a.n,), device=a.device) if host else ad.rand((a.n,), device=a.device).numpy(),
        "anydevice philox_bits uint32": lambda: ad.philox_bits((a.n,), key=(1, 2), device=a.device) if host else
        ad.philox_bits((a.n,), key=(1, 2), dtype=ad.int32, device=a.device).numpy(),
        "numpy default_rng().random float64": lambda: rng.random(a.n),
        "numpy default_rng().random float32": lambda: rng.random(a.n, dtype=np.float32),
    }
    for fn in cases.values():  # warm up (first kernel launches, allocator)
        fn()
    times = {k: [] for k in cases}
    for _ in range(a.reps):
        for k, fn in cases.items():
            times[k].append(_timed(fn))
    base = statistics.median(times["numpy default_rng().random float64"])
    print(f"n = {a.n}, device {a.device}, {a.reps} reps (median / best, ms; ratio of medians to numpy float64)")
    for k, ts in times.items():
        med = statistics.median(ts)
        print(f"  {k:36s} {med * 1e3:8.2f} / {min(ts) * 1e3:8.2f}   x{med / base:5.2f}")


if __name__ == "__main__":
    main()
