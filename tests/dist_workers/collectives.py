"""Every collective on one device type against numpy, run by every rank of an mpiexec job.

Usage: ``mpiexec -n N python collectives.py DEVICE_TYPE DTYPE,DTYPE,... OUT_DIR``. Each rank
computes what every rank holds (the data depends only on the rank), so it knows each expected
result; it writes ``OUT_DIR/rank{r}.json`` with the number of checks, the failures and the
collective fallback counts.
"""
import json
import os
import sys
import traceback

import numpy as np

import anydevice as ad
import anydevice.distributed as dist

dev_type, dtypes, out_dir = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
dist.init_process_group(timeout=20, device_type=dev_type)
rank, n = dist.get_rank(), dist.get_world_size()
dev = f"{dev_type}:{rank % ad.device.device_count(dev_type)}"  # one device per rank where there are enough
checks, failures = [0], []
UFUNC = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def data(r, dt, shape=(2, 3)):
    a = np.arange(int(np.prod(shape))).reshape(shape) + 1 + r
    if dt == "bool":
        return a % 2 == 0
    if dt.startswith(("float", "bfloat")):
        return (a + 0.25 * r).astype(getattr(ad, dt).numpy)
    if dt.startswith("complex"):
        return (a + 0.25j * (r + 1)).astype(dt)
    return a.astype(dt)


def tensor(a, dt):
    return ad.asarray(a, dtype=getattr(ad, dt), device=dev)


def check(what, got, want, dt):
    checks[0] += 1
    got = got.numpy() if hasattr(got, "numpy") else got
    tol = {"float16": 2e-3, "bfloat16": 2e-2, "float32": 1e-6, "complex64": 1e-6}.get(dt, 1e-12)
    ok = got.shape == want.shape and (np.array_equal(got, want) if dt in ("bool",) or "int" in dt else
                                      np.allclose(got.astype(np.complex128), want.astype(np.complex128), rtol=tol,
                                                  atol=tol))
    if not ok:
        failures.append(f"{what} [{dt}] on rank {rank}: got {got.tolist()}, want {want.tolist()}")


def reduced(op, dt, rows=None):
    xs = [data(q, dt) if rows is None else rows(q) for q in range(n)]
    if op == "avg":
        return (np.sum(np.stack(xs).astype(np.complex128), axis=0) / n).astype(xs[0].dtype)
    acc = np.array(xs[0], copy=True)
    for x in xs[1:]:
        acc = UFUNC[op](acc, x).astype(acc.dtype)
    return acc


def ops_for(dt):
    return ["max", "min"] if dt == "bool" else ["sum", "avg", "max", "min", "prod"] if "float" in dt else \
        ["sum", "avg", "prod"] if "complex" in dt else ["sum", "max", "min", "prod"]


def run(dt):
    mine = data(rank, dt)
    for op in ops_for(dt):
        t = tensor(mine, dt)
        dist.all_reduce(t, op=op)
        check(f"all_reduce {op}", t, reduced(op, dt), dt)
    some = "sum" if "complex" in dt else "max"  # a reduction every dtype here has
    t = tensor(mine, dt)
    w = dist.all_reduce(t, op=some, async_op=True)
    w.wait()
    check("all_reduce async", t, reduced(some, dt), dt)
    assert w.is_completed()
    t = tensor(mine, dt)
    dist.broadcast(t, src=n - 1)
    check("broadcast", t, data(n - 1, dt), dt)
    for op in ("max",) if dt == "bool" else ("sum",) if "complex" in dt else ("sum", "max"):
        t = tensor(mine, dt)
        dist.reduce(t, dst=0, op=op)
        check(f"reduce {op}", t, reduced(op, dt) if rank == 0 else mine, dt)
    outs = [tensor(np.zeros_like(mine), dt) for _ in range(n)]
    dist.all_gather(outs, tensor(mine, dt))
    for q in range(n):
        check(f"all_gather[{q}]", outs[q], data(q, dt), dt)
    for shape in ((n, *mine.shape), (n * mine.shape[0], mine.shape[1])):
        out = tensor(np.zeros(shape, mine.dtype), dt)
        dist.all_gather_into_tensor(out, tensor(mine, dt))
        check(f"all_gather_into_tensor {shape}", out, np.stack([data(q, dt) for q in range(n)]).reshape(shape), dt)
    rows = lambda q: data(q * n + rank, dt)  # noqa: E731 - rank q's input_list[rank]
    op = "max" if dt == "bool" else "sum"
    out = tensor(np.zeros_like(mine), dt)
    dist.reduce_scatter(out, [tensor(data(rank * n + i, dt), dt) for i in range(n)], op=op)
    check("reduce_scatter", out, reduced(op, dt, rows), dt)
    out = tensor(np.zeros_like(mine), dt)
    big = np.concatenate([data(rank * n + i, dt) for i in range(n)])
    dist.reduce_scatter_tensor(out, tensor(big, dt), op=op)
    check("reduce_scatter_tensor", out, reduced(op, dt, rows), dt)
    outs = [tensor(np.zeros_like(mine), dt) for _ in range(n)]
    dist.all_to_all(outs, [tensor(data(rank * 10 + j, dt), dt) for j in range(n)])
    for q in range(n):
        check(f"all_to_all[{q}]", outs[q], data(q * 10 + rank, dt), dt)
    big = np.concatenate([data(rank * 10 + j, dt) for j in range(n)])
    out = tensor(np.zeros_like(big), dt)
    dist.all_to_all_single(out, tensor(big, dt))
    check("all_to_all_single", out, np.concatenate([data(q * 10 + rank, dt) for q in range(n)]), dt)
    t = tensor(np.zeros_like(mine), dt)
    dist.scatter(t, [tensor(data(100 + i, dt), dt) for i in range(n)] if rank == 0 else None, src=0)
    check("scatter", t, data(100 + rank, dt), dt)
    dst = n - 1
    outs = [tensor(np.zeros_like(mine), dt) for _ in range(n)] if rank == dst else None
    dist.gather(tensor(mine, dt), outs, dst=dst)
    if rank == dst:
        for q in range(n):
            check(f"gather[{q}]", outs[q], data(q, dt), dt)
    if n == 1:
        return
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    t = tensor(np.zeros_like(mine), dt)
    ws = [dist.isend(tensor(mine, dt), nxt, tag=3), dist.irecv(t, prv, tag=3)]
    for w in ws:
        w.wait()
    check("isend/irecv ring", t, data(prv, dt), dt)
    if rank % 2 == 0 and rank + 1 < n:
        dist.send(tensor(mine, dt), rank + 1)
    elif rank % 2 == 1:
        t = tensor(np.zeros_like(mine), dt)
        src = dist.recv(t, rank - 1)
        check("send/recv", t, data(rank - 1, dt), dt)
        checks[0] += 1
        if src != rank - 1:
            failures.append(f"recv returned {src}, expected {rank - 1}")


def async_handles():
    """Several collectives in flight at once, completed by polling and by waits in reverse order."""
    import time

    base = data(rank, "float32")
    ts = [tensor(base * (i + 1), "float32") for i in range(3)]
    ws = [dist.all_reduce(t, async_op=True) for t in ts]
    outs = [tensor(np.zeros_like(base), "float32") for _ in range(n)]
    ws.append(dist.all_gather(outs, tensor(base, "float32"), async_op=True))
    b = tensor(base, "float32")
    ws.append(dist.broadcast(b, src=0, async_op=True))
    deadline = time.monotonic() + 10
    while not ws[1].is_completed() and time.monotonic() < deadline:
        time.sleep(0.001)
    checks[0] += 1
    if not ws[1].is_completed():
        failures.append("is_completed() never became true")
    for w in reversed(ws):
        checks[0] += 1
        if w.wait(timeout=10) is not True:
            failures.append("wait() did not return True")
    for i, t in enumerate(ts):
        check(f"async all_reduce {i}", t, reduced("sum", "float32") * (i + 1), "float32")
    for q in range(n):
        check(f"async all_gather[{q}]", outs[q], data(q, "float32"), "float32")
    check("async broadcast", b, data(0, "float32"), "float32")


def subgroup():
    members = sorted({0, n - 1})
    g = dist.new_group(members)
    if rank not in members:
        checks[0] += 1
        if dist.get_rank(g) != -1:
            failures.append(f"non-member rank {rank} has group rank {dist.get_rank(g)}")
        return
    t = tensor(data(rank, "float32"), "float32")
    dist.all_reduce(t, group=g)
    check("new_group all_reduce", t, sum(data(q, "float32") for q in members), "float32")
    t = tensor(data(rank, "float32"), "float32")
    dist.broadcast(t, src=n - 1, group=g)
    check("new_group broadcast", t, data(n - 1, "float32"), "float32")
    checks[0] += 1
    if (dist.get_rank(g), dist.get_world_size(g)) != (members.index(rank), len(members)):
        failures.append(f"group rank/size {dist.get_rank(g)}/{dist.get_world_size(g)} on world rank {rank}")
    dist.destroy_process_group(g)


expected = os.environ.get("ANYDEVICE_EXPECT_BACKEND")
if expected and dist.get_backend() != expected:
    failures.append(f"backend {dist.get_backend()!r}, expected {expected!r}")
try:
    for dt in dtypes:
        run(dt)
    async_handles()
    subgroup()
    dist.barrier()
except Exception:  # noqa: BLE001 - reported to the test
    failures.append(traceback.format_exc())
report = {"rank": rank, "size": n, "checks": checks[0], "failures": failures, "backend": dist.get_backend(),
          "fallbacks": [[k[0], k[1], v] for k, v in sorted(dist.fallback_counts().items())]}
with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
    json.dump(report, f)
sys.exit(1 if failures else 0)
