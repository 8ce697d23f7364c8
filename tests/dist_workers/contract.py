"""The anydevice_collectives contract from a plugin's side, with in-process fake plugins.

Usage: ``mpiexec -n 2 python contract.py OUT_DIR``; each rank writes ``OUT_DIR/rank{r}.json``.
``fakeccl`` (type ``fake``) runs all_reduce itself over the bootstrap's MPI communicator on the
fake runtime's memory and declines float64; the other plugins break the contract in one way each.
"""
import json
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ for fakes.py

from fakes import FakePlugin, HostRuntime, installed  # noqa: E402

import anydevice as ad  # noqa: E402
import anydevice.distributed as dist  # noqa: E402
from anydevice.plugins import hookimpl  # noqa: E402

out = Path(sys.argv[1])


class FakeComm:
    name = "fakeccl"

    def __init__(self, rt, boot):
        from mpi4py import MPI

        self.rt, self.boot, self.MPI, self.calls = rt, boot, MPI, []

    def all_reduce(self, x, op):
        if x.dtype.name == "float64":
            return None  # declined: the core stages it
        self.calls.append(("all_reduce", op, self.boot.rank, self.boot.size))
        a = self.rt.mem[x.handle][x.byte_offset:x.byte_offset + x.nbytes].view(x.dtype.numpy).copy()
        y = np.empty_like(a)
        req = self.boot.comm.Iallreduce(a, y, {"sum": self.MPI.SUM, "max": self.MPI.MAX}[op])
        comm = self

        class Request:
            def test(self):
                return req.Test()

            def result(self):
                o = comm.boot.allocate(x, x.shape, x.dtype)
                comm.rt.copy_h2d(o.index, o.handle, o.byte_offset, y)
                return o

        return Request()


class CollectivePlugin(FakePlugin):
    def __init__(self, make, **kw):
        super().__init__(**kw)
        self.make = make

    @hookimpl
    def anydevice_collectives(self, device_type, runtime):
        return self.make(runtime)


def raising_hook(runtime):
    raise RuntimeError("no interconnect driver")


def raising_factory(runtime):
    def factory(boot):
        raise OSError("link down")

    return factory


rep = {}
dist.init_process_group(timeout=20)
rank = dist.get_rank()
made = []
plugin = CollectivePlugin(lambda rt: (lambda boot: made.append(FakeComm(rt, boot)) or made[-1]), types=("fake",),
                          runtime=HostRuntime())
with installed(plugin, name="fake-ccl-plugin"), warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    t = ad.asarray([1.0, 2.0], device="fake:0") * (rank + 1)
    dist.all_reduce(t)
    rep["sum"] = t.tolist()
    d = ad.asarray([1.0, 2.0], dtype=ad.float64, device="fake:0")
    dist.all_reduce(d, op="max")
    rep["float64"] = d.tolist()
    rep["calls"] = made[0].calls
    rep["counts"] = {f"{k[0]}/{k[1]}": v for k, v in dist.fallback_counts().items()}
    rep["warnings"] = [str(w.message).split(";")[0] for w in caught if "collective" in type(w.message).__name__.lower()]
for key, make in (("hook_raises", raising_hook), ("factory_raises", raising_factory)):
    with installed(CollectivePlugin(make, types=("broken",), runtime=HostRuntime()), name="broken-ccl-plugin"):
        try:
            dist.all_reduce(ad.asarray([1.0], device="broken:0"))
            rep[key] = ["no error", ""]
        except Exception as e:  # noqa: BLE001 - reported to the test
            rep[key] = [type(e).__name__, str(e)]
dist.destroy_process_group()
made.clear()
with installed(plugin, name="fake-ccl-plugin"):
    try:  # a backend asked for by name that the device type's plugin does not give
        dist.init_process_group("nccl", timeout=20, device_type="fake")
        rep["wrong_name"] = ["no error", ""]
    except Exception as e:  # noqa: BLE001
        rep["wrong_name"] = [type(e).__name__, str(e)]
    dist.init_process_group("fakeccl", timeout=20, device_type="fake")
    rep["backend"] = dist.get_backend()
rep["rank"] = rank
(out / f"rank{rank}.json").write_text(json.dumps(rep))
