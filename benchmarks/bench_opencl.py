"""OpenCL backend benchmarks, side by side in one run.

    python benchmarks/bench_opencl.py [--quick]

1. 16M-element float32 add: anydevice opencl vs a minimal hand-written pyopencl kernel vs numpy;
2. 1024x1024 float32 matmul GFLOP/s vs numpy;
3. per-op launch overhead (tiny add) vs a raw pyopencl kernel call;
4. first-op latency in a fresh process: cold caches vs warm (program cache on disk + PoCL's).
"""
from __future__ import annotations

import argparse
import os
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
  long i = get_global_id(0); if (i < n) c[i] = a[i] + b[i]; }"""


def timeit(fn, sync, reps: int) -> float:
    fn()
    sync()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return (time.perf_counter() - t) / reps


def bench_add(n: int, reps: int) -> None:
    a, b = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
    x, y = ad.asarray(a, device=DEV), ad.asarray(b, device=DEV)
    sync = lambda: synchronize(DEV)  # noqa: E731
    t_ad = timeit(lambda: x + y, sync, reps)
    rt = get_backend("opencl").runtime
    q, ctx = rt.queues[0], rt.contexts[0]
    prg = cl.Program(ctx, ADD_SRC).build()
    add = prg.add
    add.set_scalar_arg_dtypes([None, None, None, np.int64])
    mf = cl.mem_flags
    da, db = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a), cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
    dc = cl.Buffer(ctx, mf.WRITE_ONLY, a.nbytes)
    t_cl = timeit(lambda: add(q, (n,), None, da, db, dc, n), q.finish, reps)
    t_np = timeit(lambda: np.add(a, b), lambda: None, reps)
    np.testing.assert_allclose((x + y).numpy(), a + b)
    gbs = lambda t: 3 * a.nbytes / t / 1e9  # noqa: E731
    print(f"add {n / 1e6:.0f}M float32   anydevice {t_ad * 1e3:7.2f} ms ({gbs(t_ad):5.1f} GB/s)   "
          f"raw pyopencl {t_cl * 1e3:7.2f} ms ({gbs(t_cl):5.1f} GB/s)   numpy {t_np * 1e3:7.2f} ms   "
          f"anydevice/raw speed = {t_cl / t_ad:.2f}x")


def bench_matmul(n: int, reps: int) -> None:
    a, b = np.random.rand(n, n).astype(np.float32), np.random.rand(n, n).astype(np.float32)
    x, y = ad.asarray(a, device=DEV), ad.asarray(b, device=DEV)
    t_ad = timeit(lambda: ad.matmul(x, y), lambda: synchronize(DEV), reps)
    t_np = timeit(lambda: a @ b, lambda: None, reps)
    np.testing.assert_allclose(ad.matmul(x, y).numpy(), a @ b, rtol=1e-4, atol=1e-3)
    fl = 2.0 * n ** 3
    print(f"matmul {n}x{n} float32  anydevice {fl / t_ad / 1e9:7.1f} GFLOP/s ({t_ad * 1e3:.1f} ms)   "
          f"numpy {fl / t_np / 1e9:7.1f} GFLOP/s ({t_np * 1e3:.1f} ms)")


def bench_overhead(reps: int) -> None:
    a = np.ones(16, np.float32)
    x = ad.asarray(a, device=DEV)
    t_ad = timeit(lambda: x + x, lambda: synchronize(DEV), reps)
    rt = get_backend("opencl").runtime
    q, ctx = rt.queues[0], rt.contexts[0]
    add = cl.Program(ctx, ADD_SRC).build().add
    add.set_scalar_arg_dtypes([None, None, None, np.int64])
    d = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
    out = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, a.nbytes)
    t_cl = timeit(lambda: add(q, (16,), None, d, d, out, 16), q.finish, reps)
    print(f"launch overhead (16-element add)   anydevice {t_ad * 1e6:6.1f} us/op   raw pyopencl {t_cl * 1e6:6.1f} us/op   "
          f"anydevice extra {max(t_ad - t_cl, 0) * 1e6:.1f} us")


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
          f"warm (anydevice + PoCL caches) {warm[1] * 1e3:6.1f} ms   anydevice disk cache only (off on PoCL) {ours_only[1] * 1e3:6.1f} ms   "
          f"(import + device setup {warm[0] * 1e3:.0f} ms)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = p.parse_args(argv)
    r = 3 if args.quick else 10
    dev = get_backend("opencl").runtime.devices[0]
    print(f"device: {dev.name.strip()} ({dev.platform.name}), {dev.max_compute_units} compute units")
    bench_add(16 * 1024 * 1024, r)
    bench_matmul(1024, max(r // 3, 1))
    bench_overhead(200 if args.quick else 2000)
    bench_first_op()
    return 0


if __name__ == "__main__":
    sys.exit(main())
