"""One rank of a data-parallel job (tests/test_ddp.py): ``ddp_worker.py MODE OUT DATA``.

Every rank trains on its slice of the same global batches (``DATA``, an .npz written with
:func:`global_batches`); rank 0 writes
``OUT`` (an .npz): the global loss of every step (the mean of the ranks' losses) and the final
parameters. The device is ``anydevice.distributed.get_device()`` (``--devices`` of the launcher).
"""
from __future__ import annotations

import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import anydevice as ad  # noqa: E402
import anydevice.distributed as dist  # noqa: E402
from anydevice import nn, optim  # noqa: E402

GLOBAL_BATCH = 32


def global_batches(steps: int, shape=(64,), seed: int = 0):
    """``(x, y)``: ``steps`` batches of the digits, the same on every rank and in the single-process reference."""
    from examples import _common

    x, y, _, _ = _common.digits(seed)
    order = np.random.default_rng(seed).permutation(len(x))
    idx = np.stack([order[(s * GLOBAL_BATCH) % (len(x) - GLOBAL_BATCH):][:GLOBAL_BATCH] for s in range(steps)])
    return x[idx].reshape(idx.shape + shape), y[idx]


def load(path: str, shape) -> list:
    """The batches :func:`global_batches` wrote to ``path`` (the ranks do not import scikit-learn)."""
    with np.load(path) as d:
        x, y = d["x"], d["y"]
    return [(xb.reshape((-1,) + shape), yb) for xb, yb in zip(x, y)]


def model(kind: str, device):
    from examples import cnn_digits, mlp_digits

    ad.manual_seed(0)
    net = (mlp_digits if kind == "mlp" else cnn_digits).model(device)
    if kind == "cnn_sync":   # without dropout (its masks are drawn per rank): comparable step for step
        net[11].p = 0.0
    return net


def train(net, batches, device, rank: int = 0, world: int = 1, lr: float = 3e-3, opt_kind: str = "adam"):
    """Adam (or SGD) on cross entropy over each rank's slice; returns the losses of this rank."""
    opt = optim.Adam(net.parameters(), lr=lr) if opt_kind == "adam" else optim.SGD(net.parameters(), lr=lr)
    ce = nn.CrossEntropyLoss()
    ad.manual_seed(1)
    losses = []
    for xb, yb in batches:
        per = len(xb) // world
        xs = ad.asarray(xb[rank * per:(rank + 1) * per], device=device)
        ys = ad.asarray(yb[rank * per:(rank + 1) * per], device=device)
        loss = ce(net(xs), ys)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
    return losses


def params(net) -> dict:
    return {n: p.numpy() for n, p in net.named_parameters()}


def _global_mean(values, device) -> np.ndarray:
    t = ad.asarray(np.asarray(values, dtype=np.float64), device="cpu")
    dist.all_reduce(t, dist.ReduceOp.AVG)
    return t.numpy()


def main(mode: str, out: str, data: str) -> None:
    dist.init_process_group(timeout=30)
    rank, world, device = dist.get_rank(), dist.get_world_size(), dist.get_device()
    result = {}
    if mode in ("mlp", "cnn", "cnn_sync"):
        net = model(mode, device)
        if mode == "cnn_sync":
            net = dist.SyncBatchNorm.convert_sync_batchnorm(net)
        net = dist.DistributedDataParallel(net, bucket_cap_mb=0.05)
        ready_at_launch = []                      # how many gradients were ready when each bucket started
        launch = net._launch
        net._launch = lambda b: (ready_at_launch.append(len(net._ready)), launch(b))
        shape = (64,) if mode == "mlp" else (1, 8, 8)
        losses = train(net, load(data, shape), device, rank, world, lr=3e-3 if mode == "mlp" else 2e-3)
        result = {"losses": _global_mean(losses, device), "buckets": np.array(len(net._buckets)),
                  "ready_at_launch": np.array(ready_at_launch[-len(net._buckets):]), **params(net.module)}
    elif mode == "no_sync":
        result = _no_sync(rank, world, device, load(data, (64,))[0])
    elif mode == "unused":
        result = _unused(rank, world, device)
    if rank == 0:
        np.savez(out, **result)
    dist.destroy_process_group()


def _no_sync(rank, world, device, batch) -> dict:
    """Two micro-batches per rank, the first under no_sync(): the averaged gradient of the whole global
    batch, and the first micro-batch's gradients (still local) of every rank."""
    net = dist.DistributedDataParallel(model("mlp", device))
    xb, yb = batch
    ce = nn.CrossEntropyLoss()
    per = len(xb) // world
    mine = slice(rank * per, (rank + 1) * per)
    xs, ys = xb[mine], yb[mine]
    half = per // 2
    with net.no_sync():
        (ce(net(ad.asarray(xs[:half], device=device)), ad.asarray(ys[:half], device=device)) / 2).backward()
    local = net.module[0].weight.grad.numpy()
    gathered = [ad.zeros(local.shape, device=device) for _ in range(world)]
    dist.all_gather(gathered, ad.asarray(local, device=device))
    (ce(net(ad.asarray(xs[half:], device=device)), ad.asarray(ys[half:], device=device)) / 2).backward()
    return {"local_after_no_sync": np.stack([g.numpy() for g in gathered]),
            **{"grad." + n: p.grad.numpy() for n, p in net.module.named_parameters()}}


class _TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.used, self.unused = nn.Linear(4, 2), nn.Linear(4, 2)

    def forward(self, x):
        return self.used(x)


def _unused(rank, world, device) -> dict:
    """With find_unused_parameters the step completes (the unused head's gradient is zero); without it
    the next forward raises naming the unused parameters."""
    ad.manual_seed(0)
    x = ad.asarray(np.full((2, 4), rank + 1.0, dtype=np.float32), device=device)
    net = dist.DistributedDataParallel(_TwoHeads().to(device), find_unused_parameters=True)
    net(x).sum().backward()
    res = {"used_grad": net.module.used.weight.grad.numpy(),
           "unused_grad": net.module.unused.weight.grad.numpy()}
    try:
        dist.DistributedDataParallel(_TwoHeads().to(device), device_ids=[7])
        res["device_ids_error"] = np.array("")
    except ValueError as e:
        res["device_ids_error"] = np.array(str(e))
    alias = dist.DataParallel(_TwoHeads().to(device), device_ids=[device])
    res["alias"] = np.array(repr(alias).split("(")[0])
    strict = dist.DistributedDataParallel(_TwoHeads().to(device))
    strict(x).sum().backward()
    try:
        strict(x)
        res["error"] = np.array("")
    except RuntimeError as e:
        res["error"] = np.array(str(e))
    return res


if __name__ == "__main__":
    main(*sys.argv[1:4])
