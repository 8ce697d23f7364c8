"""Which communicator runs each collective, the counted fallback to MPI, and simccl's modelled time.

Usage: ``mpiexec -n N python backends.py OUT_DIR``; each rank writes ``OUT_DIR/rank{r}.json``.
"""
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import anydevice as ad
import anydevice.distributed as dist
from anydevice.runtime.devices import as_device, get_backend

out = Path(sys.argv[1])


def _slow_tensor(values, delay):
    """A tensor on npu:0 produced by a kernel that takes ``delay`` seconds (queued, so returns at once)."""
    from anydevice.engine.tensor import _wrap

    be = get_backend("npu")
    buf = be.empty(0, values.shape, ad.float32)

    def kernel(ctx):
        time.sleep(delay)
        return values

    be.runtime.launch(be.phys(0), be.contexts[0].stream, "slow_kernel", kernel, buf, (), None)
    return _wrap(buf, values.shape, ad.float32, as_device("npu:0"))
dist.init_process_group(timeout=20, device_type="npu")
rank, n = dist.get_rank(), dist.get_world_size()
rep = {"rank": rank, "backend_npu": dist.get_backend()}


def counts():
    return {f"{k[0]}/{k[1]}": v for k, v in dist.fallback_counts().items()}


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    # simccl runs npu's all_reduce: the result is right and nothing is counted
    x = np.arange(1 << 18, dtype=np.float32) * (rank + 1)   # 1 MiB
    t = ad.asarray(x, device="npu:0")
    rt = get_backend("npu").runtime
    ad.device.synchronize("npu:0")
    rt.start_trace(0)
    dist.all_reduce(t)
    trace = rt.stop_trace(0)
    rep["all_reduce_ok"] = bool(np.array_equal(t.numpy(), np.arange(1 << 18, dtype=np.float32) * sum(range(1, n + 1))))
    rep["trace"] = [[name, end - start] for _, name, start, end in trace if name.startswith("simccl")]
    rep["after_all_reduce"] = counts()
    # simccl starts when the device's stream reaches it: the host is not held up by the work queued before
    slow = _slow_tensor(np.array([1.0, 2.0], np.float32) * (rank + 1), delay=0.5)
    start = time.monotonic()
    w = dist.all_reduce(slow, async_op=True)
    rep["async_start_s"] = time.monotonic() - start
    w.wait()
    rep["async_total_s"] = time.monotonic() - start
    rep["async_value"] = slow.tolist()
    # reduce is not simccl's: staged over MPI, counted; a second call counts again, warns no more
    for _ in range(2):
        t = ad.asarray([1.0, 2.0], device="npu:0")
        dist.reduce(t, dst=0)
    rep["reduce_value"] = t.tolist()
    # simccl declines float16 reductions: staged, counted
    h = ad.asarray([1.0, 2.0], dtype=ad.float16, device="npu:0")
    dist.all_reduce(h)
    rep["float16_value"] = h.tolist()
    # xpu has no collectives at all: every call staged and counted
    for _ in range(3):
        x = ad.asarray([rank + 1.0], device="xpu:0")
        dist.all_reduce(x)
    rep["xpu_value"] = x.tolist()
    rep["counts"] = counts()
rep["warnings"] = sorted(str(w.message).split(";")[0] for w in caught
                         if type(w.message).__name__ == "CollectiveFallbackWarning")
# backend="mpi" asked for: npu goes through MPI on purpose, nothing counted
dist.destroy_process_group()
dist.reset_fallback_counts()
dist.init_process_group("mpi", timeout=20, device_type="npu")
t = ad.asarray([1.0], device="npu:0")
dist.all_reduce(t)
rep["mpi_backend"] = dist.get_backend()
rep["mpi_counts"] = counts()
rep["mpi_value"] = t.tolist()
(out / f"rank{rank}.json").write_text(json.dumps(rep))
