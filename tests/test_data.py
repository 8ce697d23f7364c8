"""anydevice.data: datasets, samplers, collation, the DataLoader (workers, device=, prefetch overlap)."""
import collections
import threading
import time

import numpy as np
import pytest

import anydevice as ad
from anydevice.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    IterableDataset,
    SequentialSampler,
    Subset,
    TensorDataset,
    default_collate,
    random_split,
)
from anydevice.tools.profiler import profile

X = np.arange(40, dtype=np.float32).reshape(10, 4)
Y = np.arange(10, dtype=np.int64)


def _ds():
    return TensorDataset(ad.asarray(X), ad.asarray(Y))


def _values(loader):
    return [tuple(t.numpy().tolist() for t in b) for b in loader]


class Squares(Dataset):
    """Sample i is a dict; reading it records the reading thread."""

    def __init__(self, n=23):
        self.n, self.threads = n, set()

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.threads.add(threading.current_thread().name)
        return {"x": np.full(3, i * i, np.float32), "i": i, "name": f"s{i}"}


class Count(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(range(self.n))


# --- datasets and splitting -------------------------------------------------------------------------
def test_tensor_dataset_subset_and_errors():
    ds = _ds()
    assert len(ds) == 10
    x, y = ds[3]
    assert x.numpy().tolist() == X[3].tolist() and int(y) == 3
    sub = Subset(ds, [7, 2])
    assert len(sub) == 2 and int(sub[0][1]) == 7
    with pytest.raises(ValueError, match=r"first dimensions differ: \[10, 3\]"):
        TensorDataset(ad.asarray(X), ad.zeros(3))
    with pytest.raises(TypeError, match="argument 0 must be a tensor or array with a first dimension"):
        TensorDataset(5)


def test_random_split_is_seeded_by_an_anydevice_generator():
    ds = Squares(20)
    a = [s.indices for s in random_split(ds, [0.5, 0.3, 0.2], generator=ad.Generator().manual_seed(3))]
    b = [s.indices for s in random_split(ds, [10, 6, 4], generator=ad.Generator().manual_seed(3))]
    c = [s.indices for s in random_split(ds, [10, 6, 4], generator=ad.Generator().manual_seed(4))]
    assert a == b and a != c
    assert [len(s) for s in a] == [10, 6, 4] and sorted(sum(a, [])) == list(range(20))
    ad.manual_seed(11)
    d = [s.indices for s in random_split(ds, [10, 10])]
    ad.manual_seed(11)
    assert [s.indices for s in random_split(ds, [10, 10])] == d
    assert [len(s) for s in random_split(Squares(7), [0.5, 0.5])] == [4, 3]
    with pytest.raises(ValueError, match=r"summing to len\(dataset\) = 20.*got \[5, 5\]"):
        random_split(ds, [5, 5])


# --- collate ------------------------------------------------------------------------------------------
def test_default_collate_tuples_dicts_numbers_arrays_tensors():
    Point = collections.namedtuple("Point", "x y")
    batch = [({"a": np.ones(2, np.float32) * i, "b": i, "c": "t"}, ad.full((3,), float(i)), Point(i * 0.5, True))
             for i in range(4)]
    out = default_collate(batch)
    assert isinstance(out, tuple) and len(out) == 3
    d, t, p = out
    assert set(d) == {"a", "b", "c"} and d["c"] == ["t"] * 4
    assert d["a"].shape == (4, 2) and d["a"].dtype == ad.float32 and d["a"].numpy()[3].tolist() == [3.0, 3.0]
    assert d["b"].dtype == ad.int64 and d["b"].numpy().tolist() == [0, 1, 2, 3]
    assert t.shape == (4, 3) and t.numpy()[2].tolist() == [2.0, 2.0, 2.0]
    assert isinstance(p, Point) and p.x.dtype == ad.float64 and p.y.dtype == ad.bool
    assert default_collate([np.float32(1.5), np.float32(2)]).dtype == ad.float32
    assert isinstance(default_collate([[1, 2], [3, 4]]), list)


def test_default_collate_errors_say_what_is_allowed():
    with pytest.raises(TypeError, match="cannot batch samples of type object; it batches tensors, numpy arrays"):
        default_collate([object(), object()])
    with pytest.raises(TypeError, match="sample 0 is a dict but sample 1 a int"):
        default_collate([{"a": 1}, 2])
    with pytest.raises(ValueError, match="sample 1 has 3 fields, sample 0 has 2"):
        default_collate([(1, 2), (1, 2, 3)])
    with pytest.raises(ValueError, match=r"sample 1 has keys \['b'\], sample 0 \['a'\]"):
        default_collate([{"a": 1}, {"b": 1}])
    with pytest.raises(TypeError, match="non-empty list of samples"):
        default_collate([])


# --- the loader -----------------------------------------------------------------------------------------
def test_batches_in_order_and_drop_last():
    got = _values(DataLoader(_ds(), batch_size=4))
    assert [len(b[1]) for b in got] == [4, 4, 2] and got[0][1] == [0, 1, 2, 3] and got[2][0] == X[8:].tolist()
    dl = DataLoader(_ds(), batch_size=4, drop_last=True)
    assert len(dl) == 2 and [b[1] for b in _values(dl)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert len(DataLoader(_ds(), batch_size=4)) == 3


def test_shuffle_is_deterministic_under_a_seed_and_new_each_epoch():
    def orders(seed, epochs=2):
        dl = DataLoader(_ds(), batch_size=3, shuffle=True, generator=ad.Generator().manual_seed(seed))
        return [sum((b[1] for b in _values(dl)), []) for _ in range(epochs)]

    a, b = orders(5), orders(5)
    assert a == b and a[0] != a[1] and sorted(a[0]) == list(range(10)) and orders(6) != a
    ad.manual_seed(1)
    c = _values(DataLoader(_ds(), batch_size=3, shuffle=True))
    ad.manual_seed(1)
    assert _values(DataLoader(_ds(), batch_size=3, shuffle=True)) == c


def test_workers_give_the_same_batches_in_the_same_order():
    ds = Squares()
    plain = list(DataLoader(ds, batch_size=4, shuffle=True, generator=ad.Generator().manual_seed(2)))
    ds2 = Squares()
    threaded = list(DataLoader(ds2, batch_size=4, shuffle=True, generator=ad.Generator().manual_seed(2),
                               num_workers=3, prefetch_factor=1))
    assert len(plain) == len(threaded) == 6
    for a, b in zip(plain, threaded):
        assert a["i"].numpy().tolist() == b["i"].numpy().tolist() and a["name"] == b["name"]
        np.testing.assert_array_equal(a["x"].numpy(), b["x"].numpy())
    assert ds.threads == {threading.current_thread().name}
    assert ds2.threads and all(t.startswith("anydevice-data") for t in ds2.threads)


def test_a_worker_error_is_raised_at_its_batch():
    class Bad(Squares):
        def __getitem__(self, i):
            if i == 9:
                raise KeyError("sample 9 is corrupt")
            return super().__getitem__(i)

    it = iter(DataLoader(Bad(), batch_size=4, num_workers=2))
    assert next(it)["i"].numpy().tolist() == [0, 1, 2, 3]
    assert next(it)["i"].numpy().tolist() == [4, 5, 6, 7]
    with pytest.raises(KeyError, match="sample 9 is corrupt"):
        next(it)


def test_iterable_dataset_batches_with_and_without_a_worker():
    plain = [b.numpy().tolist() for b in DataLoader(Count(7), batch_size=3)]
    assert plain == [[0, 1, 2], [3, 4, 5], [6]]
    threaded = [b.numpy().tolist() for b in DataLoader(Count(7), batch_size=3, num_workers=2, drop_last=True)]
    assert threaded == plain[:2]
    assert [int(b) for b in DataLoader(Count(3), batch_size=None)] == [0, 1, 2]


def test_samplers_and_collate_fn():
    bs = BatchSampler(SequentialSampler(range(5)), 2, drop_last=False)
    assert list(bs) == [[0, 1], [2, 3], [4]] and len(bs) == 3
    dl = DataLoader(Squares(5), batch_sampler=[[4, 0], [2]], collate_fn=lambda s: [d["i"] for d in s])
    assert list(dl) == [[4, 0], [2]] and len(dl) == 2
    dl = DataLoader(Squares(4), sampler=[3, 1], batch_size=None)
    assert [d["i"] for d in dl] == [3, 1] and isinstance(next(iter(dl))["x"], ad.Tensor)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="batch_sampler is mutually exclusive with batch_size, shuffle"):
        DataLoader(_ds(), batch_sampler=[[0]], batch_size=2)
    with pytest.raises(ValueError, match="sampler is mutually exclusive with shuffle"):
        DataLoader(_ds(), sampler=[0], shuffle=True)
    with pytest.raises(ValueError, match="an IterableDataset sets its own order"):
        DataLoader(Count(3), shuffle=True)
    with pytest.raises(ValueError, match="batch_size must be a positive int or None, got 0"):
        DataLoader(_ds(), batch_size=0)
    with pytest.raises(ValueError, match="num_workers must be an int >= 0, got -1"):
        DataLoader(_ds(), num_workers=-1)
    with pytest.raises(TypeError, match="generator must be an anydevice.Generator, got Generator"):
        DataLoader(_ds(), shuffle=True, generator=np.random.default_rng(0))
    with pytest.raises(TypeError, match="dataset must have __getitem__ and __len__"):
        DataLoader(5)
    with pytest.raises(ValueError, match="unknown device type"):
        DataLoader(_ds(), device="nodevice")


def test_paddle_alias():
    assert ad.io.DataLoader is DataLoader


# --- device delivery and prefetch ---------------------------------------------------------------------------
@pytest.mark.parametrize("device", ["npu", "dcu", "opencl"])
@pytest.mark.parametrize("prefetch", [True, False])
def test_device_delivers_the_same_batches_on_the_device(device, prefetch):
    if device == "opencl" and ad.device.unavailable_reason("opencl") is not None:
        pytest.skip(ad.device.unavailable_reason("opencl"))
    host = _values(DataLoader(_ds(), batch_size=4))
    dl = DataLoader(_ds(), batch_size=4, device=device, prefetch=prefetch, num_workers=1)
    target = ad.asarray([0], device=device).device
    got = []
    for xb, yb in dl:
        assert xb.device == yb.device == target
        got.append((xb.numpy().tolist(), yb.numpy().tolist()))
    assert got == host


def _train(prefetch, batches=6):
    rng = np.random.default_rng(0)
    ds = TensorDataset(ad.asarray(rng.standard_normal((64 * batches, 512)).astype(np.float32)))
    w = ad.asarray(rng.standard_normal((512, 512)).astype(np.float32) / 32, device="npu:0")
    loader = DataLoader(ds, batch_size=64, device="npu:0", prefetch=prefetch)
    outs = []
    with profile(timeline=True) as prof:
        for (xb,) in loader:
            y = xb
            for _ in range(3):
                y = ad.matmul(y, w)
            outs.append(y)
    host = [o.numpy() for o in outs]
    tl = [e for e in prof.timeline if e.device == "npu:0"]
    copies = [e for e in tl if e.name == "copy_h2d_async"]
    steps = [[e for e in tl if e.name == "matmul"][3 * k:3 * k + 3] for k in range(batches)]
    return host, copies, steps


def test_prefetch_overlaps_the_copy_of_the_next_batch_with_the_current_step():
    host, copies, steps = _train(prefetch=True)
    assert len(copies) == 6 and all(len(s) == 3 for s in steps)
    compute_stream = steps[0][0].stream
    assert {c.stream for c in copies} != {compute_stream}  # copies run on a side stream
    for k in range(5):
        step_k = steps[k]
        assert any(copies[k + 1].overlaps(m) for m in step_k), (k, copies[k + 1], step_k)
        assert step_k[0].start >= copies[k].end  # the step waited for its own batch's copy
    base_host, base_copies, base_steps = _train(prefetch=False)
    for k in range(6):  # without prefetch the copies share the compute stream: nothing overlaps
        assert not any(base_copies[k].overlaps(m) for s in base_steps for m in s)
    span = lambda cs, ss: max(m.end for s in ss for m in s) - min(c.start for c in cs)
    assert span(copies, steps) < 0.85 * span(base_copies, base_steps)
    for a, b in zip(host, base_host):
        np.testing.assert_array_equal(a, b)



def test_leaving_a_threaded_epoch_early_stops_its_workers():
    class Counted(Squares):
        reads = 0

        def __getitem__(self, i):
            type(self).reads += 1
            return super().__getitem__(i)

    ds = Counted(200)
    it = iter(DataLoader(ds, batch_size=2, num_workers=2, prefetch_factor=2))
    assert next(it)["i"].numpy().tolist() == [0, 1]
    it.close()
    time.sleep(0.05)
    assert Counted.reads <= 2 * (1 + 2 * 2)  # the batch handed out and at most the 4 in flight
