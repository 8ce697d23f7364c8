"""DataLoader prefetch: step time with and without copying the next batch on a side stream.

    python benchmarks/bench_dataloader.py [--device npu:0] [--batches 20] [--batch 256] [--features 1024]
                                          [--layers 2] [--workers 0]

Each step multiplies a batch ``(batch, features)`` float32 by ``--layers`` weight matrices on
``--device``. The device time per step comes from the profiler's device timeline (the simulated
devices' cost model: kernels by roofline, host-to-device copies by the host link's bandwidth): the
span from the first copy to the last kernel, divided by the number of batches. Host time is the
wall-clock time of the loop, including the final synchronization. Prints both, side by side,
for ``prefetch=False`` (the copy queued on the compute stream) and ``prefetch=True``.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import anydevice as ad
from anydevice.data import DataLoader, TensorDataset
from anydevice.tools.profiler import profile


def run(device: str, prefetch: bool, batches: int, batch: int, features: int, layers: int, workers: int) -> tuple:
    rng = np.random.default_rng(0)
    ds = TensorDataset(rng.standard_normal((batch * batches, features)).astype(np.float32))
    ws = [ad.asarray(rng.standard_normal((features, features)).astype(np.float32) / features ** 0.5, device=device)
          for _ in range(layers)]
    loader = DataLoader(ds, batch_size=batch, device=device, prefetch=prefetch, num_workers=workers)
    ad.device.synchronize(device)
    t0 = time.perf_counter()
    with profile(timeline=True) as prof:
        for (xb,) in loader:
            y = xb
            for w in ws:
                y = ad.matmul(y, w)
        ad.device.synchronize(device)
    host = time.perf_counter() - t0
    dev = str(ad.asarray([0], device=device).device)
    tl = [e for e in prof.timeline if e.device == dev]
    modelled = (max(e.end for e in tl) - min(e.start for e in tl)) / batches if tl else float("nan")
    copy = sum(e.end - e.start for e in tl if e.name.startswith("copy")) / batches if tl else float("nan")
    return modelled, copy, host / batches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="npu:0")
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--features", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--workers", type=int, default=0)
    a = ap.parse_args()
    args = (a.batches, a.batch, a.features, a.layers, a.workers)
    run(a.device, True, 2, *args[1:])  # warm-up: plans, kernels, allocator
    rows = [(pf, *run(a.device, pf, *args)) for pf in (False, True)]
    print(f"{a.device}: {a.batches} batches of {a.batch}x{a.features} float32, {a.layers} matmuls per step")
    print(f"{'prefetch':>9} | {'device us/step':>14} | {'copy us/step':>12} | {'host ms/step':>12}")
    for pf, modelled, copy, host in rows:
        print(f"{str(pf):>9} | {modelled * 1e6:14.1f} | {copy * 1e6:12.1f} | {host * 1e3:12.2f}")
    (_, off, _, _), (_, on, _, _) = rows
    print(f"modelled step time with prefetch: {on / off:.2f}x of without")


if __name__ == "__main__":
    main()
