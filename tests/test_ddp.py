"""Data-parallel training: DistributedSampler's partitions; DistributedDataParallel (multi-process jobs
run with ``mpiexec`` over tests/dist_workers/ddp_worker.py) against single-process training."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import anydevice as ad
import anydevice.distributed as dist
from anydevice import nn
from anydevice.data import DataLoader, DistributedSampler, TensorDataset


class _Range:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


def _shares(n, replicas, **kw):
    return [list(DistributedSampler(_Range(n), num_replicas=replicas, rank=r, **kw)) for r in range(replicas)]


@pytest.mark.parametrize("n,replicas", [(10, 4), (12, 4), (3, 4), (7, 1), (1, 2), (0, 3)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_every_index_once_padded_to_equal_shares(n, replicas, shuffle):
    shares = _shares(n, replicas, shuffle=shuffle)
    per = -(-n // replicas)
    assert [len(s) for s in shares] == [per] * replicas
    assert all(len(DistributedSampler(_Range(n), num_replicas=replicas, rank=r)) == per for r in range(replicas))
    seen = sorted(i for s in shares for i in s)
    assert sorted(set(seen)) == list(range(n))                       # every index, in some share
    assert len(seen) - n == per * replicas - n                       # exactly the padding repeats
    if not shuffle and n:
        order = list(range(n)) * (1 + per * replicas // n)
        assert shares[0] == order[0: per * replicas: replicas]       # interleaved, padded from the start


@pytest.mark.parametrize("n,replicas", [(10, 4), (12, 4), (3, 4), (9, 2)])
def test_drop_last_drops_the_tail_and_repeats_nothing(n, replicas):
    shares = _shares(n, replicas, shuffle=True, seed=3, drop_last=True)
    per = n // replicas
    assert [len(s) for s in shares] == [per] * replicas
    flat = [i for s in shares for i in s]
    assert len(set(flat)) == len(flat) == per * replicas


def test_set_epoch_reshuffles_alike_on_every_rank_and_the_seed_counts():
    def epoch(e, seed=0):
        out = []
        for r in range(3):
            s = DistributedSampler(_Range(30), num_replicas=3, rank=r, seed=seed)
            s.set_epoch(e)
            out.append(list(s))
        return out

    e0, e1 = epoch(0), epoch(1)
    assert e0 == epoch(0)                                            # deterministic
    assert e0 != e1 and e0 != epoch(0, seed=1)
    for shares in (e0, e1):
        assert sorted(i for s in shares for i in s) == list(range(30))   # still a partition
    assert _shares(30, 3, shuffle=False)[0] == list(range(0, 30, 3))


def test_world_from_the_environment(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    s = DistributedSampler(_Range(8), shuffle=False)
    assert (s.num_replicas, s.rank, list(s)) == (4, 2, [2, 6])
    for k in ("WORLD_SIZE", "RANK"):
        monkeypatch.delenv(k)
    monkeypatch.setenv("PMI_SIZE", "2")
    monkeypatch.setenv("PMI_RANK", "1")
    assert list(DistributedSampler(_Range(4), shuffle=False)) == [1, 3]


def test_bad_arguments_name_what_is_allowed():
    with pytest.raises(ValueError, match=r"rank must be in \[0, 1\] for num_replicas=2, got 2"):
        DistributedSampler(_Range(4), num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="num_replicas must be an int >= 1, got 0"):
        DistributedSampler(_Range(4), num_replicas=0, rank=0)
    with pytest.raises(TypeError, match="shuffle must be True or False"):
        DistributedSampler(_Range(4), num_replicas=1, rank=0, shuffle=1)
    with pytest.raises(TypeError, match="epoch must be an int"):
        DistributedSampler(_Range(4), num_replicas=1, rank=0).set_epoch(1.5)


def test_feeds_a_dataloader():
    ds = TensorDataset(np.arange(10, dtype=np.float32))
    got = []
    for r in range(2):
        loader = DataLoader(ds, batch_size=2, sampler=DistributedSampler(ds, num_replicas=2, rank=r, shuffle=False))
        got.append([b[0].numpy().tolist() for b in loader])
    assert got == [[[0, 2], [4, 6], [8]], [[1, 3], [5, 7], [9]]]


# --- DistributedDataParallel: multi-process jobs ----------------------------------------------------------
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_WORKER = os.path.join(_ROOT, "tests", "dist_workers", "ddp_worker.py")
_SLOW = os.environ.get("ANYDEVICE_SLOW") == "1"
needs_mpi = pytest.mark.skipif(not dist.is_available() or not (
    shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")),
    reason="needs mpi4py and mpiexec (pip install 'anydevice[mpi]')")


def _worker():
    sys.path.insert(0, os.path.dirname(_WORKER))
    try:
        import ddp_worker
    finally:
        sys.path.remove(os.path.dirname(_WORKER))
    return ddp_worker


W = _worker()


@pytest.fixture(scope="module")
def digits_batches(tmp_path_factory):
    """20 global batches of the digits, in an .npz the ranks read."""
    x, y = W.global_batches(20)
    path = tmp_path_factory.mktemp("ddp") / "batches.npz"
    np.savez(path, x=x, y=y)
    return str(path)


def _job(nproc: int, device: str, mode: str, data: str, tmp_path) -> dict:
    out = tmp_path / f"{mode}-{nproc}-{device}.npz"
    cmd = [sys.executable, "-m", "anydevice.tools.cli", "launch", "--nproc-per-node", str(nproc), "--timeout", "120"]
    cmd += ["--devices", device] if device != "cpu" else []
    r = subprocess.run(cmd + [_WORKER, mode, str(out), data], capture_output=True, text=True, timeout=180,
                       env=dict(os.environ, ANYDEVICE_FALLBACK="silent"))
    assert r.returncode == 0, r.stdout + r.stderr
    with np.load(out) as d:
        return {k: d[k] for k in d.files}


def _reference(kind: str, device: str, data: str):
    shape = (64,) if kind == "mlp" else (1, 8, 8)
    net = W.model(kind, device)
    losses = W.train(net, W.load(data, shape), device, lr=3e-3 if kind == "mlp" else 2e-3)
    return np.array(losses), W.params(net)


MLP_JOBS = [(2, "cpu"), (4, "npu")] + ([(4, "cpu"), (2, "npu"), (2, "xpu")] if _SLOW else [])


@needs_mpi
@pytest.mark.parametrize("nproc,device", MLP_JOBS)
def test_mlp_under_ddp_equals_single_process_training_on_the_global_batch(nproc, device, digits_batches, tmp_path):
    got = _job(nproc, device, "mlp", digits_batches, tmp_path)
    losses, params = _reference("mlp", device if device == "cpu" else f"{device}:0", digits_batches)
    assert int(got["buckets"]) > 1                                   # several buckets, so several all_reduces
    n_params = len(params)
    assert got["ready_at_launch"][0] < n_params                      # the first started during backward
    assert list(got["ready_at_launch"]) == sorted(got["ready_at_launch"])
    np.testing.assert_allclose(got["losses"], losses, rtol=1e-5, atol=2e-6)
    assert losses[-1] < losses[0] - 0.5                              # it trained
    for name, p in params.items():
        np.testing.assert_allclose(got[name], p, rtol=1e-5, atol=1e-6, err_msg=name)


CNN_JOBS = [(2, "npu")] + ([(4, "cpu")] if _SLOW else [])


@needs_mpi
@pytest.mark.parametrize("nproc,device", CNN_JOBS)
def test_cnn_under_ddp_follows_single_process_training(nproc, device, digits_batches, tmp_path):
    """BatchNorm normalizes each rank's slice with that slice's statistics and the dropout masks are
    drawn per rank, so the CNN is not bit-for-bit the single-process run: over 20 steps the losses
    stay within 0.15 on average (measured about 0.05 with 2 and 4 ranks) and end within 0.25."""
    got = _job(nproc, device, "cnn", digits_batches, tmp_path)
    losses, _ = _reference("cnn", "cpu", digits_batches)
    assert np.mean(np.abs(got["losses"] - losses)) < 0.15
    assert abs(np.mean(got["losses"][-5:]) - np.mean(losses[-5:])) < 0.25
    assert np.mean(got["losses"][-5:]) < np.mean(got["losses"][:5]) - 0.3


@needs_mpi
def test_cnn_with_sync_batchnorm_equals_single_process_training(digits_batches, tmp_path):
    """SyncBatchNorm normalizes with the global batch's statistics and sends gradients back through
    them, so the CNN (dropout off: its masks are drawn per rank) trains as one process on the global
    batch does, within float32 rounding. The convolutions' biases are left out: BatchNorm subtracts
    their channel mean, so their gradient is zero up to rounding, which Adam turns into steps of
    about lr in either direction in both runs."""
    got = _job(2, "npu", "cnn_sync", digits_batches, tmp_path)
    net = W.model("cnn_sync", "cpu")
    losses = W.train(net, W.load(digits_batches, (1, 8, 8)), "cpu", lr=2e-3)
    np.testing.assert_allclose(got["losses"], losses, rtol=1e-5, atol=2e-6)
    for name, p in W.params(net).items():
        if name not in ("0.bias", "4.bias"):
            np.testing.assert_allclose(got[name], p, rtol=1e-5, atol=2e-6, err_msg=name)


def test_convert_sync_batchnorm_keeps_weights_and_is_batchnorm_in_one_process():
    ad.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Sequential(nn.Flatten(), nn.BatchNorm1d(16)))
    with ad.no_grad():
        net[1].weight[...] = ad.asarray([1.0, 2.0, 3.0, 4.0])
    x = ad.asarray(np.random.default_rng(0).random((5, 1, 4, 4), dtype=np.float32))
    want = net(x).numpy()
    sync = dist.SyncBatchNorm.convert_sync_batchnorm(net)
    assert sync is net and type(net[1]) is dist.SyncBatchNorm and type(net[2][1]) is dist.SyncBatchNorm
    assert net[1].weight.numpy().tolist() == [1.0, 2.0, 3.0, 4.0] and net[1].weight.requires_grad
    assert int(net[1].num_batches_tracked.item()) == 1
    np.testing.assert_allclose(net(x).numpy(), want, rtol=1e-6)   # no process group: plain batch norm


@needs_mpi
def test_no_sync_accumulates_locally_and_the_next_backward_averages_the_sums(digits_batches, tmp_path):
    got = _job(2, "cpu", "no_sync", digits_batches, tmp_path)
    (xb, yb), = W.load(digits_batches, (64,))[:1]
    ce = nn.CrossEntropyLoss()
    net = W.model("mlp", "cpu")
    ce(net(ad.asarray(xb)), ad.asarray(yb)).backward()            # the global batch at once
    for name, p in net.named_parameters():
        np.testing.assert_allclose(got["grad." + name], p.grad.numpy(), rtol=1e-5, atol=1e-7, err_msg=name)
    local = got["local_after_no_sync"]                               # each rank's first micro-batch only
    for rank in range(2):
        net = W.model("mlp", "cpu")
        part = slice(rank * 16, rank * 16 + 8)
        (ce(net(ad.asarray(xb[part])), ad.asarray(yb[part])) / 2).backward()
        np.testing.assert_allclose(local[rank], net[0].weight.grad.numpy(), rtol=1e-5, atol=1e-7)
    assert np.abs(local[0] - local[1]).max() > 1e-3                  # not reduced inside no_sync()


@needs_mpi
def test_unused_parameters(digits_batches, tmp_path):
    got = _job(2, "npu", "unused", digits_batches, tmp_path)
    np.testing.assert_array_equal(got["used_grad"], np.full((2, 4), 3.0))   # (2 * 1 + 2 * 2) / 2
    np.testing.assert_array_equal(got["unused_grad"], np.zeros((2, 4)))
    assert "did not finish reducing gradients" in str(got["error"]) and "unused.weight, unused.bias" in str(got["error"])
    assert "find_unused_parameters=True" in str(got["error"])
    assert "device_ids=[7] does not name the device the parameters are on (npu:0)" in str(got["device_ids_error"])
    assert str(got["alias"]) == "DistributedDataParallel"


def test_bad_module_and_bucket_size():
    with pytest.raises(TypeError, match="module must be an anydevice.nn.Module"):
        dist.DistributedDataParallel(object())
    with pytest.raises(ValueError, match="bucket_cap_mb must be a positive number"):
        dist.DistributedDataParallel(nn.Linear(2, 2), bucket_cap_mb=0)


def test_post_accumulate_grad_hook():
    w = ad.asarray([1.0, 2.0])
    w.requires_grad = True
    seen = []
    h = w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.numpy().tolist()))
    ((w * w).sum() + w.sum()).backward()           # w is used twice: one call, after both contributions
    assert seen == [[3.0, 5.0]]
    h.remove()
    w.sum().backward()
    assert seen == [[3.0, 5.0]] and w.grad.numpy().tolist() == [4.0, 6.0]
    with pytest.raises(RuntimeError, match="only a leaf tensor that requires grad"):
        (w * 2).register_post_accumulate_grad_hook(print)
    with pytest.raises(TypeError, match="hook must be callable"):
        w.register_post_accumulate_grad_hook(3)


def test_gradients_are_ready_from_the_last_layer_to_the_first():
    """Each leaf's hook runs right after its last use in backward(), so buckets (last layers first) can start
    while the earlier layers' gradients are still being computed."""
    ad.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    order = []
    for name, p in net.named_parameters():
        p.register_post_accumulate_grad_hook(lambda t, name=name: order.append(name))
    net(ad.ones((3, 4))).sum().backward()
    assert order == ["4.bias", "4.weight", "2.bias", "2.weight", "0.bias", "0.weight"]


def test_buckets_hold_parameters_in_reverse_order_up_to_the_cap():
    from anydevice.distributed.ddp import _buckets

    ps = [ad.zeros((256,)), ad.zeros((256,)), ad.zeros((512,)), ad.zeros((10,), dtype=ad.float64)]
    got = [[next(i for i, q in enumerate(ps) if q is p) for p in b.params] for b in _buckets(ps, 2048)]
    assert got == [[3], [2], [1, 0]]                    # a dtype change and the 2 KiB cap start new buckets
