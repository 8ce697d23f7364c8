"""Claims of a compiled graph replayed from their recorded launches.

A claim (:mod:`graph`) runs host code on every replay: it works out grid sizes, picks kernels,
allocates, builds argument lists. For a graph whose shapes are fixed that work repeats
identically, and on a small training step it costs more host time than the launches themselves.
:class:`Recorded` runs a claim normally, noting what it did (its allocations and every
:class:`runtime.Launcher` call), until two consecutive runs agree: the launches of the second are
those the first predicts with the second's buffers put in. From then on a replay makes the same
allocations and the same launches with its own buffers, and nothing else.

A buffer argument (a ``cl.Buffer`` followed by its element offset) is placed on the claim's array
that holds it; where arrays of other item sizes in the same buffer could each hold it (the offset
read in their units), later runs, with their buffers elsewhere, keep the one that places it in
every run, and the claim is recorded once one is left.

A claim is never recorded when a run did anything else with the device (a copy, a fill, a host
read: :data:`_IMPURE`), passed a buffer without its offset after it or outside its arrays, or
returned something other than its allocations; a run that chose a generic-tier kernel (that
choice changes after some launches: :func:`kernels._specialize`) is not recorded, and later runs
are. Such claims keep running as they are; ``Recorded.why`` says why.
"""
from __future__ import annotations

import threading

import pyopencl as cl

from anydevice.runtime.contract import DeviceArray

from . import kernels as _kernels
from . import runtime as _runtime

#: runtime methods that make a run unrecordable (work on the device that is not a Launcher call)
_IMPURE = ("memset", "fill", "copy_d2d", "copy_h2d", "copy_h2d_async", "copy_d2h", "copy_d2h_async",
           "to_host", "from_host", "copy_p2p", "copy_peer", "synchronize", "synchronize_stream")
#: runs after which a claim whose launches still change is left unrecorded
MAX_TRIES = 64


class _Context:
    """The KernelContext of a recorded run: the same device, noting each allocation call."""

    __slots__ = ("runtime", "index", "device", "stream", "_ctx", "allocs")

    def __init__(self, ctx):
        self.runtime, self.index, self.device, self.stream, self._ctx = ctx.runtime, ctx.index, ctx.device, ctx.stream, ctx
        self.allocs: list = []  # (specs, arrays) per allocation call

    def empty(self, shape, dtype):
        a = self._ctx.empty(shape, dtype)
        self.allocs.append(((tuple(a.shape), dtype), [a]))
        return a

    def empty_many(self, specs):
        arrs = self._ctx.empty_many(specs)
        self.allocs.append((list(specs), arrs))
        return arrs


class _Run:
    """What one run of a claim did: its arrays (inputs, then allocations in order), allocation
    calls, launches ``(launcher, gsize, lsize, args)`` and results (indices into the arrays)."""

    __slots__ = ("arrays", "allocs", "launches", "results", "outs", "clean", "impure", "why")

    def __init__(self, claim, ctx, buffers):
        rec, rt = _Context(ctx), ctx.runtime
        launches: list = []
        impure = [False]

        def flagged(name):
            real = getattr(rt, name)

            def call(*a, **k):
                impure[0] = True
                return real(*a, **k)
            return call

        patched = [n for n in _IMPURE if hasattr(rt, n)]
        generic = _kernels._generic_runs
        before = (id(generic), sum(generic.values()))
        for n in patched:
            setattr(rt, n, flagged(n))  # instance attributes: shadow the methods for this run only
        _runtime._recording[0] = (threading.get_ident(), launches)
        try:
            outs = claim(rec, buffers)
        finally:
            _runtime._recording[0] = None
            for n in patched:
                delattr(rt, n)
        generic = _kernels._generic_runs
        self.impure = impure[0]
        self.clean = not impure[0] and (id(generic), sum(generic.values())) == before
        self.arrays = list(buffers) + [a for _, arrs in rec.allocs for a in arrs]
        self.allocs = [specs for specs, _ in rec.allocs]
        self.launches = launches
        where = {id(a): j for j, a in enumerate(self.arrays)}
        self.results = [where.get(id(o)) for o in outs]
        self.outs = outs

    def plan(self, n_in: int):
        """The launches as templates ``(launcher, gsize, lsize, args, refs)``, ``refs`` the
        ``(position, candidates)`` of each buffer argument (its offset right after it), the
        candidates the ``(array index, element delta)`` that place it. Arrays of other item sizes
        in the same buffer can each seem to hold an argument (its offset read in their units):
        later runs, whose buffers lie elsewhere, narrow the candidates (:func:`_narrow`). None
        where an argument cannot be placed."""
        self.why = "other device work" if self.impure else "a generic-tier kernel" if not self.clean else None
        if not self.clean:
            return None
        if any(r is None or r < n_in for r in self.results):
            self.why = "a result that is not one of its allocations"
            return None
        arrays = self.arrays
        if not all(type(a) is DeviceArray for a in arrays):
            self.why = "an input that is not a DeviceArray"
            return None
        by_handle: dict = {}
        for j, a in enumerate(arrays):
            by_handle.setdefault(id(a.block.handle), []).append(j)
        out = []
        for launcher, gsize, lsize, args in self.launches:
            refs = []
            for i, x in enumerate(args):
                if type(x) is not cl.Buffer:
                    continue
                if i + 1 >= len(args) or type(args[i + 1]) is not int:
                    self.why = f"argument {i} of {launcher.kernel.function_name}: a buffer without its offset"
                    return None
                o = args[i + 1]
                hits = []
                for j in by_handle.get(id(x), ()):
                    a = arrays[j]
                    d = o - _kernels._off(a)
                    if 0 <= d <= max(a.size - 1, 0):
                        hits.append((j, d))
                if not hits:
                    self.why = f"argument {i} of {launcher.kernel.function_name}: none of its arrays"
                    return None
                refs.append((i, hits))
            out.append((launcher, gsize, lsize, list(args), refs))
        return out


def _same(x, y) -> bool:
    if type(x) is not type(y):
        return False
    if type(x) is cl.Buffer:
        return x is y
    return x == y if type(x) in (int, float) else x.tobytes() == y.tobytes() if hasattr(x, "tobytes") else x == y


def _narrow(plan, run: _Run):
    """``plan`` (from earlier runs) with each argument's candidates cut to those that also place
    it in ``run``; None unless every launch is the same kernel, grid and other arguments and
    every argument keeps a candidate."""
    if len(plan) != len(run.launches):
        return None
    arrays, out = run.arrays, []
    for (launcher, gsize, lsize, targs, refs), (launcher2, gsize2, lsize2, args) in zip(plan, run.launches):
        if launcher is not launcher2 or gsize != gsize2 or lsize != lsize2 or len(targs) != len(args):
            return None
        placed = set()
        new = []
        for i, cands in refs:
            h, o = args[i], args[i + 1]
            keep = [(j, d) for j, d in cands
                    if arrays[j].block.handle is h and _kernels._off(arrays[j]) + d == o]
            if not keep:
                return None
            new.append((i, keep))
            placed.update((i, i + 1))
        if not all(_same(a, b) for k, (a, b) in enumerate(zip(targs, args)) if k not in placed):
            return None
        out.append((launcher, gsize, lsize, targs, new))
    return out


def _final(plan):
    """A narrowed plan whose every argument has one candidate, as :meth:`runtime.Launcher.replay`
    takes it (refs ``(position, array index, delta)``); None while some argument has several."""
    if any(len(c) != 1 for t in plan for _, c in t[4]):
        return None
    return [(launcher, gsize, lsize, args, [(i, *c[0]) for i, c in refs])
            for launcher, gsize, lsize, args, refs in plan]


class Recorded:
    """A claim replayed from its recorded launches once two consecutive runs agree (see the
    module's text); until then, or when it cannot be recorded, the claim itself runs."""

    __slots__ = ("claim", "plan", "allocs", "results", "tries", "last", "why", "__name__")

    def __init__(self, claim):
        self.claim, self.plan, self.last, self.tries = claim, None, None, 0
        self.why = None  # why the claim is not recorded, once it never will be
        self.allocs = self.results = None
        self.__name__ = getattr(claim, "__name__", type(claim).__name__)

    def __getattr__(self, name):  # the claim's own attributes (a fused kernel's program, ...)
        if name == "claim":
            raise AttributeError(name)
        return getattr(self.claim, name)

    def __call__(self, ctx, buffers):
        plan = self.plan
        if plan is not None:
            return self._replay(ctx, buffers, plan)
        if self.tries < 0 or self.tries >= MAX_TRIES:
            return self.claim(ctx, buffers)
        self.tries += 1
        run = _Run(self.claim, ctx, buffers)
        last, n_in = self.last, len(buffers)
        if last is not None and last[0] == n_in and last[1] == run.allocs and last[2] == run.results and run.clean:
            narrowed = _narrow(last[3], run)
            if narrowed is not None:
                final = _final(narrowed)
                if final is not None:
                    self.plan, self.allocs, self.results, self.last = final, run.allocs, run.results, None
                else:  # an argument still has several candidates: the next runs tell
                    self.last = (n_in, run.allocs, run.results, narrowed)
                return run.outs
        plan = run.plan(n_in)
        if plan is None and (run.clean or run.impure):  # other device work, or a buffer no plan can place:
            self.tries, self.why = -1, run.why          # this claim stays as it is
        self.last = None if plan is None else (n_in, run.allocs, run.results, plan)
        return run.outs

    def _replay(self, ctx, buffers, plan):
        arrays = list(buffers)
        for specs in self.allocs:
            if type(specs) is tuple:
                arrays.append(ctx.empty(*specs))
            else:
                arrays += ctx.empty_many(specs)
        q = ctx.runtime.queue(ctx.index, ctx.stream)
        for t in plan:
            t[0].replay(q, t, arrays)
        return [arrays[j] for j in self.results]


class RecordedCall:
    """A planned kernel call of a compiled graph (``runtime.replayable``): the kernel's positional
    arguments are a :class:`Recorded` claim's inputs, what it returns (nothing, an array or a
    tuple of them) its results."""

    __slots__ = ("rec", "form", "__name__")

    def __init__(self, fn, kwargs: dict):
        def claim(ctx, bufs):
            r = fn(ctx, *bufs, **kwargs)
            self.form = "none" if r is None else "tuple" if type(r) in (tuple, list) else "one"
            return [] if r is None else list(r) if type(r) in (tuple, list) else [r]

        self.rec, self.form = Recorded(claim), None
        self.__name__ = self.rec.__name__ = getattr(fn, "__name__", "kernel")

    def __call__(self, ctx, *args):
        outs = self.rec(ctx, list(args))
        form = self.form
        return None if form == "none" else outs[0] if form == "one" else tuple(outs)
