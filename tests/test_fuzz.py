"""Property-based tests (hypothesis): the allocator's invariants and the broadcasting shape rule."""
import gc

import numpy as np
from fakes import HostRuntime
from hypothesis import given, settings
from hypothesis import strategies as st

import anydevice as ad
from anydevice.allocator import CachingAllocator
from anydevice.ops.registry import broadcast_shapes

sizes = st.one_of(st.integers(1, 4096), st.integers(60_000, 70_000), st.integers(1 << 20, 5 << 20))
ops = st.lists(st.tuples(st.booleans(), sizes, st.integers(0, 30)), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(ops)
def test_allocator_never_overlaps_and_returns_everything(script):
    rt = HostRuntime(count=1)
    a = CachingAllocator(rt, 0, "fuzz:0")
    live = []
    for alloc, size, pick in script:
        if alloc or not live:
            live.append(a.allocate(size))
        else:
            live.pop(pick % len(live))
            gc.collect()
        spans = sorted((b.handle, b.offset, b.offset + b.size) for b in live)
        for (h1, _, e1), (h2, s2, _) in zip(spans, spans[1:]):
            assert h1 != h2 or e1 <= s2, "two live blocks overlap"
        st_ = a.stats()
        assert st_["allocated"] >= sum(b.size for b in live)
        assert st_["reserved"] == sum(m.nbytes for m in rt.mem.values())
    live.clear()
    gc.collect()
    a.empty_cache()
    assert a.stats()["allocated"] == 0 and a.stats()["reserved"] == 0 and not rt.mem


dims = st.lists(st.integers(0, 3), min_size=0, max_size=4)


@settings(max_examples=200, deadline=None)
@given(dims, dims)
def test_broadcast_rule_matches_numpy(a, b):
    try:
        want = np.broadcast_shapes(tuple(a), tuple(b))
    except ValueError:
        try:
            broadcast_shapes(tuple(a), tuple(b), opname="add")
        except ValueError as e:
            assert "cannot be broadcast" in str(e)
        else:
            raise AssertionError("the shape rule accepted shapes numpy rejects")
        return
    assert broadcast_shapes(tuple(a), tuple(b), opname="add") == want
    x = ad.zeros(tuple(a))
    y = ad.ones(tuple(b))
    assert (x + y).shape == want
