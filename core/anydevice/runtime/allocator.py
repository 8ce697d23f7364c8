"""The caching allocator every backend gets on top of its raw ``malloc``/``free``.

Device memory is taken from the runtime in *segments* and handed out as *chunks*:
best fit over the free chunks (smallest that fits), splitting the remainder off, and
merging neighbours when chunks are freed. Requests up to 1 MiB share 2 MiB segments;
larger ones get a segment of their own rounded up to 2 MiB, which later requests may split.
Freed chunks of at most 64 KiB first wait in exact-size lists, so the many tiny tensors of an
eager program are recycled without searching; ``empty_cache()`` and the out-of-memory retry
merge them back.
Segments belong to the stream that was current when they were taken, so memory freed on
one stream is reused only by work queued behind it on the same stream.

``empty_cache()`` returns segments with no live chunk to the runtime. When ``malloc``
fails the allocator empties its cache, retries once, then raises
:class:`~anydevice.OutOfMemoryError` with the request, the allocator's figures and the
device's capacity.

Thread safety: one lock per allocator guards its free lists, segments and figures
(``allocate``, ``empty_cache``, ``stats``, ``reset_peak``). Freeing never takes it: a block
collected on any thread (a stream worker, a thread in the middle of ``allocate``) only appends
its chunk to a deque, and the next call under the lock merges the queued chunks back.
"""
from __future__ import annotations

import bisect
import collections
import itertools
import os
import threading

from anydevice.base.errors import OutOfMemoryError
from anydevice.runtime.contract import Block

SMALL_LIMIT = 1 << 20
QUICK_LIMIT = 64 << 10  # freed chunks up to this size wait in exact-size lists for fast reuse
SMALL_SEGMENT = 2 << 20
LARGE_ROUND = 2 << 20


def fmt_bytes(n) -> str:
    if n is None:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024


class _Segment:
    __slots__ = ("handle", "size", "stream", "live", "small")

    def __init__(self, handle, size, stream, small):
        self.handle, self.size, self.stream, self.live, self.small = handle, size, stream, 0, small


class _Chunk:
    __slots__ = ("seg", "offset", "size", "free", "prev", "next", "id")
    _ids = itertools.count()

    def __init__(self, seg, offset, size):
        self.seg, self.offset, self.size = seg, offset, size
        self.free, self.prev, self.next = True, None, None
        self.id = next(self._ids)

    def key(self):
        return (self.size, self.id)


class _AllocBlock(Block):
    """A block carved from a segment; returns its chunk to the allocator's queue when collected."""

    __slots__ = ("chunk",)

    def __del__(self):
        try:
            self.owner._pending.append(self.chunk)
        except Exception:  # interpreter shutdown
            pass


_new_block = object.__new__
# The C form of allocate()'s reuse branch (_alloc.c), where it was built and ANYDEVICE_NATIVE_DISPATCH
# (which turns off the core's C hot paths) is not 0.
_native = None
if os.environ.get("ANYDEVICE_NATIVE_DISPATCH", "1") != "0":
    try:
        from anydevice.runtime import _alloc as _native
    except ImportError:
        pass


class CachingAllocator:
    """Best-fit caching allocator for one device (``runtime``, ``index``)."""

    def __init__(self, runtime, index: int, device_name: str):
        self.runtime, self.index, self.device_name = runtime, index, device_name
        self.align = max(int(getattr(runtime, "alignment", 256)), 1)
        self._gran = max(self.align, 512)
        self._free: dict = collections.defaultdict(list)  # (stream, small) -> sorted [(size, id, chunk)]
        self._segments: list[_Segment] = []
        self._pending = collections.deque()  # chunks released by __del__ (any thread), merged under the lock
        self._lock = threading.Lock()
        self._quick: dict = collections.defaultdict(list)  # (stream, size) -> freed small chunks
        self.allocated = self.reserved = 0
        self.peak_allocated = self.peak_reserved = 0
        self.num_allocs = self.num_segments_taken = self.num_ooms = 0
        self._reused = itertools.count()  # chunks taken back without the lock: next() is atomic
        self._reused_seen = 0  # values of _reused that stats() drew to read it
        if _native is not None:  # allocate() with its first branch (the chunk freed last taken back) in C
            self.allocate = _native.Allocate(self, type(self).allocate.__get__(self), _AllocBlock)

    # --- public -----------------------------------------------------------------------
    def allocate(self, nbytes: int, stream=None) -> Block:
        g = self._gran
        size = -(-nbytes // g) * g if nbytes > g else g
        pending = self._pending
        chunk = None
        if pending:
            # An eager program mostly frees a chunk and asks for one of the same size: the chunk
            # freed last is taken back as it is, without the lock (deque.pop is atomic, so one
            # caller gets it, and it never stopped counting as allocated).
            try:
                chunk = pending.pop()
            except IndexError:  # another thread took it
                pass
            else:
                if chunk.size == size and chunk.seg.stream is stream:
                    next(self._reused)
                else:
                    pending.append(chunk)
                    chunk = None
        if chunk is None:
            lock = self._lock
            lock.acquire()  # acquire/release, not `with`: this is the hot path of every device op
            try:
                if pending:
                    self._drain()
                quick = self._quick.get((stream, size)) if size <= QUICK_LIMIT else None
                chunk = quick.pop() if quick else self._take(size, nbytes, stream)
                self.allocated += chunk.size
                if self.allocated > self.peak_allocated:
                    self.peak_allocated = self.allocated
                self.num_allocs += 1
            finally:
                lock.release()
        b = _new_block(_AllocBlock)
        b.handle, b.offset, b.size, b.index, b.stream, b.owner, b.chunk = (
            chunk.seg.handle, chunk.offset, nbytes, self.index, stream, self, chunk)
        return b

    def _take(self, size, nbytes, stream):
        small = size <= SMALL_LIMIT
        chunk = self._best_fit(stream, small, size)
        if chunk is None:
            seg_size = SMALL_SEGMENT if small else self._round_large(size)
            seg = self._new_segment(seg_size, nbytes, stream, small)
            chunk = _Chunk(seg, 0, seg_size)
        else:
            self._remove_free(stream, small, chunk)
        self._split(chunk, size, stream, small)
        chunk.free = False
        chunk.seg.live += 1
        return chunk

    def release(self, block: Block) -> None:
        """Called from ``Block.__del__``; only queues the chunk (safe from any thread)."""
        self._pending.append(block.chunk)

    def empty_cache(self) -> int:
        """Return wholly free segments to the runtime; returns the bytes released."""
        with self._lock:
            return self._empty_cache()

    def stats(self) -> dict:
        with self._lock:
            self._drain()
            self._reused_seen += 1  # reading the counter draws one value
            reused = next(self._reused) - self._reused_seen + 1
            return {
                "allocated": self.allocated, "reserved": self.reserved,
                "max_allocated": self.peak_allocated, "max_reserved": self.peak_reserved,
                "segments": len(self._segments), "num_allocs": self.num_allocs + reused, "num_ooms": self.num_ooms,
            }

    def reset_peak(self) -> None:
        with self._lock:
            self._drain()
            self.peak_allocated, self.peak_reserved = self.allocated, self.reserved

    # --- internals (callers hold the lock) --------------------------------------------
    def _empty_cache(self) -> int:
        self._drain()
        for lst in self._quick.values():
            while lst:
                self._merge_free(lst.pop())
        freed = 0
        keep = []
        for seg in self._segments:
            if seg.live == 0:
                self._forget_segment(seg)
                self.runtime.free(self.index, seg.handle)
                self.reserved -= seg.size
                freed += seg.size
            else:
                keep.append(seg)
        self._segments = keep
        return freed

    def _round(self, n: int) -> int:
        a = self._gran
        return -(-n // a) * a if n > a else a

    @staticmethod
    def _round_large(n: int) -> int:
        return -(-n // LARGE_ROUND) * LARGE_ROUND

    def _best_fit(self, stream, small, size):
        lst = self._free.get((stream, small))
        if not lst:
            return None
        i = bisect.bisect_left(lst, (size, -1))
        return lst[i][2] if i < len(lst) else None

    def _add_free(self, stream, small, chunk):
        bisect.insort(self._free[(stream, small)], (chunk.size, chunk.id, chunk))

    def _remove_free(self, stream, small, chunk):
        lst = self._free[(stream, small)]
        i = bisect.bisect_left(lst, (chunk.size, chunk.id))
        del lst[i]

    def _split(self, chunk, size, stream, small):
        rest = chunk.size - size
        if rest >= (self._round(1) if small else SMALL_LIMIT):
            tail = _Chunk(chunk.seg, chunk.offset + size, rest)
            tail.prev, tail.next = chunk, chunk.next
            if chunk.next is not None:
                chunk.next.prev = tail
            chunk.next = tail
            chunk.size = size
            self._add_free(stream, small, tail)

    def _new_segment(self, seg_size, requested, stream, small):
        try:
            handle = self.runtime.malloc(self.index, seg_size)
        except MemoryError:
            self._empty_cache()
            try:
                handle = self.runtime.malloc(self.index, seg_size)
            except MemoryError as e:
                self.num_ooms += 1
                raise OutOfMemoryError(self._oom_message(requested)) from e
        seg = _Segment(handle, seg_size, stream, small)
        self._segments.append(seg)
        self.reserved += seg_size
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        self.num_segments_taken += 1
        return seg

    def _oom_message(self, requested):
        free = total = None
        info = getattr(self.runtime, "memory_info", None)
        if info is not None:
            try:
                free, total = info(self.index)
            except Exception:
                pass
        return (
            f"Cannot allocate {fmt_bytes(requested)} on {self.device_name}: "
            f"{fmt_bytes(self.allocated)} allocated by tensors, {fmt_bytes(self.reserved)} reserved by the "
            f"caching allocator, device capacity {fmt_bytes(total)} ({fmt_bytes(free)} free). "
            f"Free tensors you no longer need or use smaller batches."
        )

    def _drain(self):
        pending, quick = self._pending, self._quick
        while pending:  # one freed chunk per op on the hot path: kept free of calls
            try:
                chunk = pending.popleft()
            except IndexError:  # the lock-free path of allocate() in another thread took the last one
                break
            size = chunk.size
            self.allocated -= size
            if size <= QUICK_LIMIT:
                quick[(chunk.seg.stream, size)].append(chunk)
            else:
                self._merge_free(chunk)

    def _merge_free(self, chunk):
        seg = chunk.seg
        small = seg.small
        chunk.free = True
        seg.live -= 1
        for nb in (chunk.prev, chunk.next):
            if nb is not None and nb.free:
                self._remove_free(seg.stream, small, nb)
                if nb is chunk.prev:
                    nb.size += chunk.size
                    nb.next = chunk.next
                    if chunk.next is not None:
                        chunk.next.prev = nb
                    chunk = nb
                else:
                    chunk.size += nb.size
                    chunk.next = nb.next
                    if nb.next is not None:
                        nb.next.prev = chunk
        self._add_free(seg.stream, small, chunk)

    def _forget_segment(self, seg):
        lst = self._free.get((seg.stream, seg.small), [])
        lst[:] = [e for e in lst if e[2].seg is not seg]
