"""Checkpoint throughput: anydevice.save / anydevice.load next to the raw safetensors library.

    python benchmarks/bench_checkpoint.py [--mib 512] [--tensors 32] [--reps 5] [--dir DIR] [--device cpu]

Writes a checkpoint of ``--tensors`` float32 tensors (``--mib`` in all) on ``--device`` and times,
interleaved rep by rep: ``anydevice.save`` (atomic: temporary file, fsync, rename),
``safetensors.numpy.save_file`` of the same arrays already on the host (no fsync), the same
followed by an fsync (what a durable raw write costs), ``anydevice.load``, and
``safetensors.numpy.load_file`` (with every page read, since it maps the file lazily). Prints
medians in GB/s and the anydevice/raw ratios. The files are read from the page cache, as a
resumed job usually does.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import safetensors.numpy as st

import anydevice as ad


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _raw_durable(arrays: dict, path: str) -> None:
    st.save_file(arrays, path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _raw_load(path: str) -> None:
    for a in st.load_file(path).values():
        a.sum(dtype=np.float32)  # touch every page: load_file maps the file, reads happen on access


def _ad_load(path: str) -> None:
    ad.load(path, map_location=DEVICE)


def main() -> None:
    global DEVICE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--tensors", type=int, default=32)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dir", default=None, help="folder for the files (default: a temporary folder)")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    DEVICE = args.device
    n = args.mib * (1 << 20) // 4 // args.tensors
    rng = np.random.default_rng(0)
    arrays = {f"layer{i}.weight": rng.standard_normal(n, dtype=np.float32) for i in range(args.tensors)}
    tensors = {k: ad.asarray(v, device=DEVICE) for k, v in arrays.items()}
    nbytes = sum(a.nbytes for a in arrays.values())
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        p_ad, p_raw = os.path.join(d, "anydevice.safetensors"), os.path.join(d, "raw.safetensors")
        cases = {
            "anydevice.save": lambda: ad.save(tensors, p_ad),
            "safetensors save_file": lambda: st.save_file(arrays, p_raw),
            "safetensors save_file+fsync": lambda: _raw_durable(arrays, p_raw),
            "anydevice.load": lambda: _ad_load(p_ad),
            "safetensors load_file": lambda: _raw_load(p_raw),
        }
        for fn in cases.values():  # warm-up: files exist, page cache and allocator warm
            fn()
        times = {k: [] for k in cases}
        for _ in range(args.reps):
            for k, fn in cases.items():
                times[k].append(_timed(fn))
        back = ad.load(p_ad, map_location=DEVICE)
        assert all(np.array_equal(back[k].numpy(), v) for k, v in arrays.items()), "anydevice.load read back wrong data"
    med = {k: statistics.median(v) for k, v in times.items()}
    gbs = {k: nbytes / t / 1e9 for k, t in med.items()}
    print(f"{args.tensors} x {n * 4 / 2**20:.0f} MiB float32 on {DEVICE} ({nbytes / 2**20:.0f} MiB), "
          f"median of {args.reps} interleaved reps")
    for k in cases:
        print(f"  {k:30s} {med[k] * 1e3:8.1f} ms  {gbs[k]:6.2f} GB/s")
    print(f"  save: anydevice/raw = {gbs['anydevice.save'] / gbs['safetensors save_file']:.2f}x "
          f"(vs raw+fsync {gbs['anydevice.save'] / gbs['safetensors save_file+fsync']:.2f}x)   "
          f"load: anydevice/raw = {gbs['anydevice.load'] / gbs['safetensors load_file']:.2f}x")


DEVICE = "cpu"

if __name__ == "__main__":
    main()
