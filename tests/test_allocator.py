import gc

import numpy as np
import pytest
from fakes import FakePlugin, HostRuntime, installed

import anydevice as ad
from anydevice.allocator import SMALL_SEGMENT, CachingAllocator

K = 1024


def test_small_blocks_split_one_segment_and_best_fit_reuses():
    rt = HostRuntime(count=1)
    a = CachingAllocator(rt, 0, "fake:0")
    b1 = a.allocate(100 * K)
    b2 = a.allocate(300 * K)
    b3 = a.allocate(100 * K)
    assert rt.mallocs == 1, "all fit in one 2 MiB segment"
    assert b1.handle == b2.handle == b3.handle and b2.offset == 100 * K
    st = a.stats()
    assert st["reserved"] == SMALL_SEGMENT and st["allocated"] == 500 * K
    off2 = b2.offset
    del b2
    gc.collect()
    b4 = a.allocate(250 * K)
    assert b4.offset == off2, "best fit: the freed 300 KiB chunk is the smallest that fits, and is split"
    b5 = a.allocate(50 * K)
    assert b5.offset == off2 + 250 * K, "the split-off remainder is reused"
    assert rt.mallocs == 1


def test_tiny_blocks_are_recycled_by_exact_size():
    rt = HostRuntime(count=1)
    a = CachingAllocator(rt, 0, "fake:0")
    b = a.allocate(16)
    off = b.offset
    del b
    gc.collect()
    assert a.stats()["allocated"] == 0
    assert a.allocate(16).offset == off and rt.mallocs == 1


def test_free_chunks_merge_and_empty_cache_returns_segments():
    rt = HostRuntime(count=1)
    a = CachingAllocator(rt, 0, "fake:0")
    blocks = [a.allocate(100 * K) for _ in range(4)] + [a.allocate(16) for _ in range(3)]
    del blocks
    gc.collect()
    assert a.stats()["allocated"] == 0
    big = a.allocate(400 * K)
    assert big.offset == 0, "the four freed neighbours were merged back into one chunk"
    del big
    gc.collect()
    assert a.empty_cache() == SMALL_SEGMENT, "tiny cached chunks are merged back too"
    assert rt.frees == 1 and a.stats()["reserved"] == 0


def test_large_allocations_and_peaks():
    rt = HostRuntime(count=1)
    a = CachingAllocator(rt, 0, "fake:0")
    b = a.allocate(3 << 20)
    assert a.stats()["reserved"] == 4 << 20
    del b
    gc.collect()
    st = a.stats()
    assert st["allocated"] == 0 and st["max_allocated"] >= 3 << 20
    a.reset_peak()
    assert a.stats()["max_allocated"] == 0


def test_oom_frees_cache_retries_then_raises_with_figures():
    rt = HostRuntime(count=1, capacity=8 << 20)
    a = CachingAllocator(rt, 0, "fake:0")
    keep = a.allocate(4 << 20)
    tmp = a.allocate(2 << 20)
    del tmp
    gc.collect()
    # 4 MiB live + 2 MiB cached: a new 4 MiB segment only fits after the cache is emptied
    again = a.allocate(4 << 20)
    assert again is not None and rt.frees >= 1
    with pytest.raises(ad.OutOfMemoryError) as e:
        a.allocate(6 << 20)
    msg = str(e.value)
    assert "Cannot allocate 6.00 MiB on fake:0" in msg and "8.00 MiB allocated" in msg
    assert "capacity 8.00 MiB" in msg
    del keep, again


def test_device_memory_api_through_a_backend():
    rt = HostRuntime(count=2, capacity=64 << 20)
    with installed(FakePlugin(types=("memdev",), runtime=rt)):
        before = ad.device.memory_allocated("memdev:1")
        x = ad.asarray(np.zeros((256, 256), np.float32), device="memdev:1")
        assert ad.device.memory_allocated("memdev:1") - before == 256 * 256 * 4
        assert ad.device.memory_allocated("memdev:0") == 0
        del x
        gc.collect()
        assert ad.device.memory_allocated("memdev:1") == before
        assert ad.device.memory_reserved("memdev:1") > 0
        assert ad.device.empty_cache("memdev:1") > 0
        assert ad.device.memory_reserved("memdev:1") == 0
        with pytest.raises(ad.OutOfMemoryError, match="on memdev:0"):
            ad.zeros(((64 << 20) + 1,), dtype=ad.uint8, device="memdev:0")
        y = ad.ones((4,), device="memdev:0")  # the device still works after an OOM
        assert y.tolist() == [1.0] * 4


def test_cpu_memory_stats_are_explicitly_unsupported():
    with pytest.raises(ad.UnsupportedError, match="does not report allocator statistics"):
        ad.device.memory_allocated("cpu")


def test_empty_many_carves_aligned_disjoint_arrays_from_one_allocation():
    """KernelContext.empty_many: one allocator call for results that die together; the memory
    goes back when the last of them is collected."""
    ad.device.empty_cache("npu")
    dev = ad.zeros((1,), device="npu:0").device
    ctx, be = dev._ctx, dev._backend
    before = be.allocators[dev.index].stats()
    specs = [((3, 5), ad.float32), ((), ad.int64), ((0,), ad.float32), ((70,), ad.float16)]
    arrs = ctx.empty_many(specs)
    assert [(a.shape, a.dtype) for a in arrs] == specs
    assert len({id(a.block) for a in arrs}) == 1
    align = be.allocators[dev.index].align
    spans = [(a.byte_offset, a.byte_offset + max(a.nbytes, 1)) for a in arrs]
    assert all(lo % align == 0 for lo, _ in spans)
    assert all(spans[k][1] <= spans[k + 1][0] for k in range(len(spans) - 1))
    st = be.allocators[dev.index].stats()
    assert st["num_allocs"] == before["num_allocs"] + 1
    for k, a in enumerate(arrs):  # each array holds its own values
        if a.nbytes:
            be.runtime.copy_h2d(dev.index, a.handle, a.byte_offset, np.full(a.shape, k + 1, a.dtype.numpy))
    for k, a in enumerate(arrs):
        if a.nbytes:
            got = np.asarray(be.to_host(a, dev.index, a.shape, a.dtype))
            assert (got == k + 1).all()
    del a
    held = be.allocators[dev.index].stats()["allocated"]
    del arrs[:3]
    gc.collect()
    assert be.allocators[dev.index].stats()["allocated"] == held  # one array still holds the block
    arrs.clear()
    gc.collect()
    assert be.allocators[dev.index].stats()["allocated"] < held


def test_the_chunk_freed_last_is_taken_back_in_one_step_on_its_stream_only():
    """allocate()'s first branch (in C where ``runtime/_alloc.c`` is built): the chunk freed last,
    when the request rounds to its size on its stream; every other request takes the lock."""
    from anydevice.runtime import allocator as mod

    rt = HostRuntime(count=1)
    a = CachingAllocator(rt, 0, "fake:0")
    assert (type(a.allocate).__name__ == "Allocate") == (mod._native is not None)
    s1, s2 = object(), object()
    b = a.allocate(1000, s1)
    handle, offset = b.handle, b.offset
    del b
    assert len(a._pending) == 1
    c = a.allocate(900, s1)  # rounds to the same 1 KiB chunk
    assert (c.handle, c.offset, c.size, c.index, c.stream, c.owner) == (handle, offset, 900, 0, s1, a)
    assert type(c) is mod._AllocBlock and not a._pending
    del c
    d = a.allocate(1000, s2)  # another stream: not that chunk, which stays queued (nothing lost)
    assert d.stream is s2 and d.handle != handle
    e = a.allocate(5000, s1)  # another size: the same
    assert e.size == 5000 and (e.handle, e.offset) != (handle, offset)
    st = a.stats()
    assert st["num_allocs"] == 4 and st["allocated"] == d.chunk.size + e.chunk.size
    del d, e
    gc.collect()
    assert a.stats()["allocated"] == 0
    assert a.allocate(1000).stream is None  # the stream defaults to None on both paths
    with pytest.raises(TypeError):
        a.allocate("1000")  # the Python path's own error for a bad size


def test_a_contexts_empty_makes_the_same_arrays_in_c_and_python():
    """``ctx.empty`` (``_alloc.Empty`` where ``runtime/_alloc.c`` is built) against the Python
    function it stands in for, which also takes the shapes that are not tuples of ints."""
    from anydevice.runtime import allocator as mod
    from anydevice.runtime.contract import DeviceArray
    from anydevice.runtime.devices import get_backend

    be = get_backend("npu")
    ctx = be.contexts[0]
    c = ctx.empty
    assert (type(c).__name__ == "Empty") == (mod._native is not None)
    python = getattr(c, "fallback", c)
    for shape, dtype in [((3, 4), ad.float32), ((), ad.int8), ((0, 5), ad.float64), ([2, 3], ad.int16),
                         ((np.int64(2), 3), ad.float32), ((7,), ad.bool)]:
        for make in (c, python):
            a = make(shape, dtype)
            assert type(a) is DeviceArray and a.shape == tuple(int(s) for s in shape) and type(a.shape) is tuple
            assert a.dtype is dtype and a.offset == 0 and a.block.owner is be.allocators[0]
            assert a.block.size == max(int(np.prod(a.shape)) * dtype.itemsize, 1) and a.block.stream is ctx.stream
    before = be.allocators[0].stats()["allocated"]
    for make in (c, python):
        with pytest.raises(ad.OutOfMemoryError):
            make((1 << 40, 1 << 20), ad.float32)
    assert be.allocators[0].stats()["allocated"] == before
