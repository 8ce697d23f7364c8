"""``anydevice bench``: side-by-side timings measured in one run (ratios, not absolute promises).

- tiny op: eager ``add`` of two 4-element float32 tensors — anydevice on each available device,
  numpy, and torch on CPU when torch is installed (benchmark-only, never a test dependency);
- large elementwise: 16M-element float32 add, GB/s counting 12 bytes per element, vs numpy;
- matmul: 1024×1024 float32, GFLOP/s vs numpy.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def _best(fn, number, repeat=7):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


def _best_pair(f, g, number, repeat=7):
    """Best per-call time of ``f`` and of ``g``, measured alternately so drift hits both alike."""
    bf = bg = float("inf")
    for _ in range(repeat):
        bf = min(bf, _best(f, number, repeat=1))
        bg = min(bg, _best(g, number, repeat=1))
    return bf, bg


def _sync(t):
    from anydevice.api import device

    device.synchronize(t.device)


def bench_tiny(devices, number=20000):
    import anydevice as ad

    rows = []
    a_np = np.ones(4, np.float32)
    b_np = np.ones(4, np.float32)
    numpy_t = _best(lambda: np.add(a_np, b_np), number)
    rows.append(("numpy add (4 x float32)", numpy_t))
    try:
        import torch

        torch.set_num_threads(1)
        ta, tb = torch.ones(4), torch.ones(4)
        rows.append(("torch CPU add", _best(lambda: torch.add(ta, tb), number)))
    except ImportError:
        pass
    for dev in devices:
        a = ad.ones(4, device=dev)
        b = ad.ones(4, device=dev)
        n = number if dev.startswith("cpu") else max(number // 10, 200)

        def burst(a=a, b=b, n=n):
            for _ in range(n):
                a + b
            _sync(a)  # asynchronous devices: the time includes running the queued work

        burst()
        rows.append((f"anydevice {dev} a + b", _best(burst, 1) / n))
    return rows


def bench_large(dev="cpu", n=16 * 1024 * 1024):
    import anydevice as ad

    a_np = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    b_np = a_np.copy()
    a, b = ad.asarray(a_np, device=dev), ad.asarray(b_np, device=dev)

    def step():
        _sync(a + b)

    step()
    t_np, t_ad = _best_pair(lambda: np.add(a_np, b_np), step, 3)
    return 12 * n / t_np / 1e9, 12 * n / t_ad / 1e9


def bench_matmul(dev="cpu", n=1024):
    import anydevice as ad

    a_np = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    a = ad.asarray(a_np, device=dev)

    def step():
        _sync(a @ a)

    step()
    t_np, t_ad = _best_pair(lambda: a_np @ a_np, step, 3)
    return 2 * n ** 3 / t_np / 1e9, 2 * n ** 3 / t_ad / 1e9


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="anydevice bench", description=__doc__.split("\n")[0])
    p.add_argument("--device", action="append", help="devices for the tiny-op table (default: one of each available type)")
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    args = p.parse_args(argv)
    from anydevice.api import device

    devs = args.device or [f"{t}:0" for t in device.get_all_device_type() if device.is_available(t)]
    number = 2000 if args.quick else 20000
    tiny = bench_tiny(devs, number)
    base = dict(tiny)["numpy add (4 x float32)"]
    torch_t = dict(tiny).get("torch CPU add")
    large = bench_large("cpu", 4 * 1024 * 1024 if args.quick else 16 * 1024 * 1024)
    mm = bench_matmul("cpu")
    if args.json:
        print(json.dumps({"tiny_add_seconds": dict(tiny), "add16m_gbs": {"numpy": large[0], "anydevice_cpu": large[1]},
                          "matmul1024_gflops": {"numpy": mm[0], "anydevice_cpu": mm[1]}}, indent=2))
        return 0
    cpu_t = dict(tiny).get("anydevice cpu:0 a + b")
    print("tiny op (eager add, 4 x float32)")
    for name, t in tiny:
        extra = f"   {t / torch_t:5.2f}x torch" if torch_t else ""
        extra += f"   {t / cpu_t:5.2f}x anydevice cpu" if cpu_t else ""
        print(f"  {name:<34} {t * 1e6:8.2f} us   {t / base:5.2f}x numpy{extra}")
    print(f"16M-element float32 add:  numpy {large[0]:6.1f} GB/s   anydevice cpu {large[1]:6.1f} GB/s   ratio {large[1] / large[0]:.2f}")
    print(f"1024x1024 float32 matmul: numpy {mm[0]:6.1f} GFLOP/s   anydevice cpu {mm[1]:6.1f} GFLOP/s   ratio {mm[1] / mm[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
