"""OpenCL backend benchmarks, side by side in one run (contenders interleaved round by round;
each figure is the median over rounds with the min–max of the per-round ratio).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_opencl.py [--quick] [--only NAME ...]

1. ``add``: 16M-element float32 add: anydevice vs a scalar and a float4 hand-written pyopencl kernel, and numpy;
2. ``matmul``: 1024² and 2048² float32 matmul GFLOP/s vs numpy (OpenBLAS on the same cores);
3. ``reduce``: a 16M sum, and sums along each axis of 4096², vs numpy;
4. ``launch``: per-op launch overhead (16-element add) vs a raw pyopencl kernel call;
5. ``mlp``: the digits MLP training step (64-256-10, batch 256, Adam) on opencl vs the cpu backend;
6. ``first``: first-op latency in a fresh process: cold caches vs warm (program cache on disk + PoCL's);
7. ``ops``: per-call time of softmax, log_softmax, cross_entropy, mean, var, permute_dims, x[1:3] and
   linear on a (64, 64) float32 array, each as a multiple of a same-size add (interleaved).

numpy's BLAS is slowed by OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE where they are set: unset both
for this command. The machine's load average is printed before and after.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyopencl as cl

import anydevice as ad
from anydevice.device import get_backend, synchronize

DEV = "opencl:0"
ADD_SRC = """__kernel void add(__global const float* a, __global const float* b, __global float* c, long n) {
  long i = get_global_id(0); if (i < n) c[i] = a[i] + b[i]; }
__kernel void add4(__global const float4* a, __global const float4* b, __global float4* c) {
  long i = get_global_id(0); c[i] = a[i] + b[i]; }"""


def sync_ad():
    synchronize(DEV)


def interleaved(fns: dict, calls: int, rounds: int, clock=time.perf_counter) -> dict:
    """Per-call seconds of each ``fns[name] = (fn, sync)`` in every round (``calls`` calls, then
    ``sync()``), the contenders taking turns within a round: ``{name: [seconds per round]}``;
    ``clock=time.thread_time`` counts the calling thread's CPU time instead of wall time."""
    for fn, sync in fns.values():  # warm-up: kernels built, plans and buffers cached
        fn()
        sync()
    out: dict = {k: [] for k in fns}
    for _ in range(rounds):
        for k, (fn, sync) in fns.items():
            sync()
            t = clock()
            for _ in range(calls):
                fn()
            sync()
            out[k].append((clock() - t) / calls)
    return out


def ratio(times: dict, num: str, den: str) -> str:
    """``median (min–max)`` of the per-round ratio ``times[num] / times[den]``."""
    r = [a / b for a, b in zip(times[num], times[den])]
    return f"{statistics.median(r):.2f}× ({min(r):.2f}–{max(r):.2f})"


def med(v) -> float:
    return statistics.median(v)


def _raw(src: str):
    rt = get_backend("opencl").runtime
    return rt.queues[0], rt.contexts[0], cl.Program(rt.contexts[0], src).build()


def bench_add(n: int, rounds: int) -> None:
    a, b = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
    x, y = ad.asarray(a, device=DEV), ad.asarray(b, device=DEV)
    q, ctx, prg = _raw(ADD_SRC)
    add, add4 = cl.Kernel(prg, "add"), cl.Kernel(prg, "add4")
    mf = cl.mem_flags
    da, db = (cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=h) for h in (a, b))
    dc = cl.Buffer(ctx, mf.WRITE_ONLY, a.nbytes)
    add.set_args(da, db, dc, np.int64(n))
    add4.set_args(da, db, dc)
    t = interleaved({"anydevice": (lambda: x + y, sync_ad),
                     "raw scalar": (lambda: cl.enqueue_nd_range_kernel(q, add, (n,), None), q.finish),
                     "raw float4": (lambda: cl.enqueue_nd_range_kernel(q, add4, (n // 4,), None), q.finish),
                     "numpy": (lambda: np.add(a, b), lambda: None)}, 3, rounds)
    np.testing.assert_array_equal((x + y).numpy(), a + b)
    gbs = {k: f"{3 * a.nbytes / med(v) / 1e9:5.1f} GB/s" for k, v in t.items()}
    print(f"add {n / 2 ** 20:.0f}M float32: " + "   ".join(f"{k} {s}" for k, s in gbs.items()))
    print(f"    anydevice speed vs the float4 kernel {ratio(t, 'raw float4', 'anydevice')}, "
          f"vs the scalar kernel {ratio(t, 'raw scalar', 'anydevice')}, vs numpy {ratio(t, 'numpy', 'anydevice')}")


def bench_matmul(n: int, rounds: int) -> None:
    a, b = np.random.rand(n, n).astype(np.float32), np.random.rand(n, n).astype(np.float32)
    x, y = ad.asarray(a, device=DEV), ad.asarray(b, device=DEV)
    np.testing.assert_allclose(ad.matmul(x, y).numpy(), a @ b, rtol=1e-4, atol=1e-3)
    t = interleaved({"anydevice": (lambda: ad.matmul(x, y), sync_ad), "numpy": (lambda: a @ b, lambda: None)},
                    1, rounds)
    fl = 2.0 * n ** 3
    print(f"matmul {n}² float32: anydevice {fl / med(t['anydevice']) / 1e9:6.1f} GFLOP/s   numpy "
          f"{fl / med(t['numpy']) / 1e9:6.1f} GFLOP/s   anydevice speed vs numpy {ratio(t, 'numpy', 'anydevice')}")


def bench_reduce(rounds: int) -> None:
    a = np.random.rand(16 * 2 ** 20).astype(np.float32)
    x = ad.asarray(a, device=DEV)
    m, y = a.reshape(4096, 4096), ad.reshape(x, (4096, 4096))
    cases = {"sum 16M": (lambda: ad.sum(x), lambda: a.sum()),
             "sum(axis=0) 4096²": (lambda: ad.sum(y, axis=0), lambda: m.sum(axis=0)),
             "sum(axis=1) 4096²": (lambda: ad.sum(y, axis=1), lambda: m.sum(axis=1))}
    np.testing.assert_allclose(float(ad.sum(x).numpy()), a.sum(dtype=np.float64), rtol=1e-5)
    np.testing.assert_allclose(ad.sum(y, axis=0).numpy(), m.sum(axis=0), rtol=1e-4)
    for name, (mine, theirs) in cases.items():
        t = interleaved({"anydevice": (mine, sync_ad), "numpy": (theirs, lambda: None)}, 3, rounds)
        print(f"{name:18s} float32: anydevice {med(t['anydevice']) * 1e3:6.2f} ms   numpy {med(t['numpy']) * 1e3:6.2f} ms"
              f"   anydevice speed vs numpy {ratio(t, 'numpy', 'anydevice')}")


def bench_launch(calls: int, rounds: int) -> None:
    a = np.ones(16, np.float32)
    x = ad.asarray(a, device=DEV)
    q, ctx, prg = _raw(ADD_SRC)
    add = cl.Kernel(prg, "add")
    add.set_scalar_arg_dtypes([None, None, None, np.int64])
    d = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
    out = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, a.nbytes)
    fns = {"anydevice": (lambda: x + x, sync_ad), "raw": (lambda: add(q, (16,), None, d, d, out, 16), q.finish)}
    t = interleaved(fns, calls, rounds)
    c = interleaved(fns, calls, rounds, clock=time.thread_time)
    print(f"launch overhead (16-element add): anydevice {med(t['anydevice']) * 1e6:5.1f} µs/op   raw pyopencl "
          f"{med(t['raw']) * 1e6:5.1f} µs/op   anydevice/raw time {ratio(t, 'anydevice', 'raw')}")
    print(f"    host thread CPU per op: anydevice {med(c['anydevice']) * 1e6:5.1f} µs   raw {med(c['raw']) * 1e6:5.1f} µs"
          f"   anydevice/raw {ratio(c, 'anydevice', 'raw')}")


def bench_mlp(steps: int, rounds: int) -> None:
    from anydevice.tools.bench import bench_mlp as mlp

    try:  # the cpu backend at one BLAS thread, as torch is measured (PoCL keeps its threads)
        from threadpoolctl import threadpool_limits
    except ImportError:
        print("    (threadpoolctl is not installed: numpy's BLAS keeps its default thread count)")
        res = mlp(["cpu", "opencl"], steps=steps, rounds=rounds, threads=1)
    else:
        with threadpool_limits(limits=1):
            res = mlp(["cpu", "opencl"], steps=steps, rounds=rounds, threads=1)
    cells = [f"{k} {v['median'] * 1e6:7.0f} µs ({v['min'] * 1e6:.0f}–{v['max'] * 1e6:.0f}), loss {v['final_loss']:.5f}"
             for k, v in res.items()]
    cpu, cl_ = res["anydevice cpu"]["median"], res["anydevice opencl"]["median"]
    print("MLP step (digits 64-256-10, batch 256, Adam): " + ";  ".join(cells))
    print(f"    opencl/cpu step time {cl_ / cpu:.2f}×")


def bench_ops(calls: int, rounds: int) -> None:
    a = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    x, w = ad.asarray(a, device=DEV), ad.asarray(a[:32], device=DEV)
    b, lab = ad.asarray(a[0, :32], device=DEV), ad.asarray(np.arange(64) % 64, device=DEV)
    cases = {"add": lambda: x + x, "softmax": lambda: ad.softmax(x), "log_softmax": lambda: ad.log_softmax(x),
             "cross_entropy": lambda: ad.cross_entropy(x, lab), "mean": lambda: ad.mean(x), "var": lambda: ad.var(x),
             "permute_dims": lambda: ad.permute_dims(x, (1, 0)), "x[1:3]": lambda: x[1:3],
             "linear": lambda: ad.linear(x, w, b)}
    t = interleaved({k: (f, sync_ad) for k, f in cases.items()}, calls, rounds)
    print(f"per-op (64x64 float32), µs per call and time as a multiple of an add ({med(t['add']) * 1e6:.1f} µs):")
    print("    " + ";  ".join(f"{k} {med(v) * 1e6:.1f} µs {ratio(t, k, 'add')}" for k, v in t.items() if k != "add"))


FIRST_OP = """
import time; t0 = time.perf_counter()
import anydevice as ad, numpy as np
x = ad.asarray(np.arange(1000, dtype=np.float32), device="opencl"); t1 = time.perf_counter()
y = (x * 2.0 + x).numpy(); t2 = time.perf_counter()
print(f"{t1 - t0:.4f} {t2 - t1:.4f}")
"""


def first_op(env) -> tuple:
    out = subprocess.run([sys.executable, "-c", FIRST_OP], env=env, capture_output=True, text=True, check=True)
    return tuple(float(v) for v in out.stdout.split())


def bench_first_op() -> None:
    with tempfile.TemporaryDirectory() as ours, tempfile.TemporaryDirectory() as pocl, \
            tempfile.TemporaryDirectory() as pocl2:
        env = {**os.environ, "ANYDEVICE_OPENCL_CACHE_DIR": ours, "POCL_CACHE_DIR": pocl}
        cold = first_op(env)
        warm = first_op(env)
        ours_only = first_op({**env, "POCL_CACHE_DIR": pocl2})
    print(f"first op (x*2+x, 2 kernels) in a new process: cold caches {cold[1] * 1e3:7.1f} ms   "
          f"warm (anydevice + PoCL caches) {warm[1] * 1e3:6.1f} ms   anydevice disk cache only (off on PoCL) "
          f"{ours_only[1] * 1e3:6.1f} ms   (import + device setup {warm[0] * 1e3:.0f} ms)")


SECTIONS = ("add", "matmul", "reduce", "launch", "mlp", "first", "ops")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer rounds")
    p.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="run these sections")
    args = p.parse_args(argv)
    r = 5 if args.quick else 9
    dev = get_backend("opencl").runtime.devices[0]
    print(f"device: {dev.name.strip()} ({dev.platform.name}, {dev.platform.version}), "
          f"{dev.max_compute_units} compute units; load average {os.getloadavg()[0]:.2f}")
    run = {"add": lambda: bench_add(16 * 2 ** 20, r),
           "matmul": lambda: [bench_matmul(n, r) for n in (1024, 2048)],
           "reduce": lambda: bench_reduce(r),
           "launch": lambda: bench_launch(200 if args.quick else 1000, r),
           "mlp": lambda: bench_mlp(10 if args.quick else 20, r),
           "first": bench_first_op,
           "ops": lambda: bench_ops(50 if args.quick else 200, r)}
    for name in args.only:
        run[name]()
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
