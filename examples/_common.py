"""What the examples share: command-line arguments, the digits data, the training loop and its report."""
from __future__ import annotations

import argparse
import itertools
import os
import time

import numpy as np

import anydevice as ad
from anydevice import nn, optim
from anydevice.data import DataLoader, DistributedSampler, TensorDataset


def arguments(description: str, steps: int, argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--device", default=os.environ.get("ANYDEVICE_DEVICE") or "cpu",
                   help="where to train: cpu, npu:0, xpu:0, dcu:0, opencl:0, cuda:0, ... (default: $ANYDEVICE_DEVICE, "
                        "which `anydevice launch --devices TYPE` sets per process, else cpu)")
    p.add_argument("--steps", type=int, default=steps, help=f"optimizer steps (default {steps})")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights, the dropout masks and the batch order")
    return p.parse_args(argv)


def digits(seed: int):
    """sklearn's 8x8 digits scaled to [0, 1]: (x_train, y_train, x_test, y_test), a 80/20 split drawn from ``seed``."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x, y = (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(0.8 * len(x))
    return x[order[:cut]], y[order[:cut]], x[order[cut:]], y[order[cut:]]


def batches(x, y, batch_size: int, seed: int, device, world: int = 1, rank: int = 0):
    """Endless shuffled batches on ``device`` (a new order every epoch, from ``seed``); with ``world > 1``
    this rank's ``batch_size // world`` samples of each global batch (a DistributedSampler)."""
    ds = TensorDataset(x, y)
    if world == 1:
        loader = DataLoader(ds, batch_size=batch_size, shuffle=True, drop_last=True,
                            generator=ad.Generator().manual_seed(seed), device=device)
        while True:
            yield from loader
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, seed=seed, drop_last=True)
    loader = DataLoader(ds, batch_size=batch_size // world, sampler=sampler, drop_last=True, device=device)
    for epoch in itertools.count():
        sampler.set_epoch(epoch)
        yield from loader


def data_parallel(model, log=print):
    """Under ``anydevice launch`` (``WORLD_SIZE`` > 1): ``(DistributedDataParallel(model), world, rank,
    a log that prints on rank 0 only)``; otherwise ``(model, 1, 0, log)``."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return model, 1, 0, log
    import anydevice.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group()
    rank = dist.get_rank()
    return dist.DistributedDataParallel(model), dist.get_world_size(), rank, log if rank == 0 else _silent


def _silent(*args, **kwargs) -> None:
    pass


def train(model, opt, loss_of, data, steps: int, log=print) -> list:
    """``steps`` optimizer steps of ``loss_of(model, batch)`` over ``data``; returns the loss of every step."""
    model.train()
    losses, every, t0 = [], max(1, steps // 10), time.perf_counter()
    for step in range(1, steps + 1):
        loss = loss_of(model, next(data))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
        if step % every == 0 or step == steps:
            log(f"step {step:5d}  loss {np.mean(losses[-every:]):.4f}  ({time.perf_counter() - t0:.1f} s)")
    return losses


def accuracy(model, x, y, device, batch_size: int = 512) -> float:
    """Fraction of ``argmax(model(x), axis=-1) == y`` (every position of a sequence counts), in eval mode, without recording a graph."""
    model.eval()
    right = 0
    with ad.no_grad():
        for i in range(0, len(x), batch_size):
            pred = model(ad.asarray(x[i:i + batch_size], device=device)).argmax(axis=-1).numpy()
            right += int((pred == y[i:i + batch_size]).sum())
    return right / y.size


def classify_digits(model, device, steps: int, seed: int, lr: float, shape=(64,), log=print) -> dict:
    """Train ``model`` (built from ``seed``, on ``device``) on the digits with Adam and cross entropy;
    returns the loss of every step and the test accuracy."""
    x, y, xt, yt = digits(seed)
    x, xt = x.reshape((-1,) + shape), xt.reshape((-1,) + shape)
    model, world, rank, log = data_parallel(model, log)
    ad.manual_seed(seed + 1)  # dropout draws from the device's default generator: restart them all alike
    opt = optim.Adam(model.parameters(), lr=lr)
    ce = nn.CrossEntropyLoss()
    data = batches(x, y, 64, seed, device, world, rank)
    losses = train(model, opt, lambda m, b: ce(m(b[0]), b[1]), data, steps, log)
    acc = accuracy(model, xt, yt, device)
    log(f"test accuracy {acc:.2%} on {device}")
    return {"losses": losses, "accuracy": acc}
