"""Data-parallel training: DistributedSampler's partitions; DistributedDataParallel (multi-process jobs
run with ``mpiexec`` over tests/dist_workers/ddp_worker.py) against single-process training."""
from __future__ import annotations

import pytest

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
    import numpy as np

    ds = TensorDataset(np.arange(10, dtype=np.float32))
    got = []
    for r in range(2):
        loader = DataLoader(ds, batch_size=2, sampler=DistributedSampler(ds, num_replicas=2, rank=r, shuffle=False))
        got.append([b[0].numpy().tolist() for b in loader])
    assert got == [[[0, 2], [4, 6], [8]], [[1, 3], [5, 7], [9]]]
