"""Conv2d forward + backward on the cpu: anydevice next to torch, one thread each, in one run.

    python benchmarks/bench_conv.py [--batch 64] [--reps 10] [--torch-python PATH]

The layer: input (batch, 16, 32, 32), weight (32, 16, 3, 3), bias, padding 1, float32. One step
is ``y = conv2d(x, w, b)`` and ``y.backward(g)`` (gradients of x, w and b). torch is imported
if this interpreter has it, else run in ``--torch-python`` (or ``$BENCH_TORCH_PYTHON``), an
interpreter that has it; without either only anydevice's figure is printed. Steps of the two
libraries alternate rep by rep; prints the median and best time of each and the ratio of medians.
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # one thread, before numpy loads BLAS
    os.environ[_v] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

_TORCH_STEP = """
import json, sys, time
import numpy as np
import torch
torch.set_num_threads(1)
n, reps = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(0)
x = torch.tensor(rng.standard_normal((n, 16, 32, 32), dtype=np.float32), requires_grad=True)
w = torch.tensor(rng.standard_normal((32, 16, 3, 3), dtype=np.float32), requires_grad=True)
b = torch.tensor(rng.standard_normal(32, dtype=np.float32), requires_grad=True)
g = torch.tensor(rng.standard_normal((n, 32, 32, 32), dtype=np.float32))
def step():
    x.grad = w.grad = b.grad = None
    torch.nn.functional.conv2d(x, w, b, padding=1).backward(g)
step()
for line in sys.stdin:  # one timed step per line, so the caller can interleave
    t = time.perf_counter(); step(); print(json.dumps(time.perf_counter() - t), flush=True)
"""


def _anydevice_step(n):
    import anydevice as ad
    import anydevice.nn.functional as F

    rng = np.random.default_rng(0)
    x = ad.asarray(rng.standard_normal((n, 16, 32, 32), dtype=np.float32)).requires_grad_(True)
    w = ad.asarray(rng.standard_normal((32, 16, 3, 3), dtype=np.float32)).requires_grad_(True)
    b = ad.asarray(rng.standard_normal(32, dtype=np.float32)).requires_grad_(True)
    g = ad.asarray(rng.standard_normal((n, 32, 32, 32), dtype=np.float32))

    def step():
        for t in (x, w, b):
            t.clear_grad()
        with ad.enable_grad():
            F.conv2d(x, w, b, padding=1).backward(g)
        return w.grad.numpy()  # wait for the result

    return step


class _TorchProcess:
    def __init__(self, python, n, reps):
        self.p = subprocess.Popen([python, "-c", _TORCH_STEP, str(n), str(reps)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})

    def step(self) -> float:
        self.p.stdin.write("\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def _torch_timer(n, reps, python):
    try:
        import torch  # noqa: F401
    except ImportError:
        if not python:
            return None
        return _TorchProcess(python, n, reps)
    return _TorchProcess(sys.executable, n, reps)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--torch-python", default=os.environ.get("BENCH_TORCH_PYTHON"))
    a = p.parse_args(argv)
    step = _anydevice_step(a.batch)
    step()  # warm-up: plans, caches
    torch = _torch_timer(a.batch, a.reps, a.torch_python)
    ours, theirs = [], []
    for _ in range(a.reps):
        t = time.perf_counter()
        step()
        ours.append(time.perf_counter() - t)
        if torch is not None:
            theirs.append(torch.step())
    if torch is not None:
        torch.close()
    print(f"Conv2d forward + backward, input ({a.batch}, 16, 32, 32), 16 -> 32 channels, 3x3, padding 1, "
          f"float32, one thread, {a.reps} reps")
    print(f"{'':12} {'median ms':>10} {'best ms':>10}")
    print(f"{'anydevice':12} {statistics.median(ours) * 1e3:10.1f} {min(ours) * 1e3:10.1f}")
    if theirs:
        print(f"{'torch':12} {statistics.median(theirs) * 1e3:10.1f} {min(theirs) * 1e3:10.1f}")
        print(f"anydevice / torch (medians): {statistics.median(ours) / statistics.median(theirs):.2f}x")
    else:
        print("torch is not installed here (pass --torch-python or set BENCH_TORCH_PYTHON): no comparison")


if __name__ == "__main__":
    main()
