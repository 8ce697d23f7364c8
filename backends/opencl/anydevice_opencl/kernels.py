"""Host side of the OpenCL kernels: pick a kernel spec, fetch it from the program cache, launch.

Element-wise ops come from the :data:`codegen.EXPR` table and allocate their own result
(``out=False``), so the core's fast path calls them directly; the other ops use the ``out=True``
convention, except ``reshape``, which returns a view of its input's block. Movement ops
(permute_dims, broadcast_to, getitem, setitem, concat) are one strided copy. Ops not registered
here run through their decompositions or the CPU fallback.

Two tiers of kernels (PoCL code-generates each kernel at its first launch, ~30–100 ms): a launch
first runs a *generic* kernel (one per dtype signature, the op or reduction kind an argument,
any layout up to 4 strided dims; built without optimization), and switches to the *specialized*
kernel of its exact op, dtype and layout once it is large (:data:`SPECIALIZE_ELEMENTS`) or has
run :data:`SPECIALIZE_LAUNCHES` times. Tests and one-off calls then compile a few kernels,
and hot loops and big arrays still get the fast ones. Both tiers compute the same expressions;
floating-point sums may differ in the last bits (another summation order).
"""
from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from anydevice.base import dtypes as _dt
from anydevice.ops.indexing import key_shape

from . import codegen
from . import runtime as _runtime

_BITS = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64", 16: "complex128"}  # bit-copy dtype by element size
#: element-wise ops registered natively (``gelu_tanh`` is gelu's ``approximate="tanh"`` form)
ELEMENTWISE = [op for op in codegen.EXPR if op not in ("copy", "gelu_tanh")]
LOCAL = 128  # work-group size of element-wise launches (fixed: PoCL compiles per work-group size)
_DTYPES = {d: _dt.dtype(d) for d in codegen.CTYPES}
SPECIALIZE_ELEMENTS = 4096  # work (elements; m*n*k for matmul) from which a launch is specialized at once
SPECIALIZE_LAUNCHES = 32  # generic launches of one specialized spec before it is compiled
_generic_runs: dict = {}  # specialized spec -> launches that ran a generic kernel instead
_CODES = [np.int32(i) for i in range(64)]  # op/kind codes of generic kernels (shared objects: no re-set)


def _specialize(spec, work: int) -> bool:
    """Whether a launch of ``spec`` doing ``work`` runs the specialized kernel (else a generic one)."""
    if work >= SPECIALIZE_ELEMENTS:
        return True
    n = _generic_runs.get(spec, 0)
    if n >= SPECIALIZE_LAUNCHES:
        return True
    _generic_runs[spec] = n + 1
    return False


def _specialized(spec, work: int) -> bool:
    """Whether a launch of ``spec`` doing ``work`` would run the specialized kernel (counts nothing)."""
    return work >= SPECIALIZE_ELEMENTS or _generic_runs.get(spec, 0) >= SPECIALIZE_LAUNCHES


def _tiered(spec, work: int) -> tuple:
    """``spec``, or its generic twin (same source, unoptimized build) — for take and arange."""
    return spec if _specialize(spec, work) else spec + ("generic",)


# --- launching -----------------------------------------------------------------------------------
def _launch(ctx, spec, gsize, lsize, args) -> None:
    rt = ctx.runtime
    run = rt.programs.kernels.get((ctx.index, spec)) or rt.programs.kernel(rt, ctx.index, spec, ctx.device)
    run(ctx.stream if ctx.stream is not None else rt.queues[ctx.index], gsize, lsize, args)


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _off(a) -> int:
    """Element offset of a DeviceArray inside its cl.Buffer."""
    return (a.block.offset + a.offset) // a.dtype.itemsize


def _cstrides(shape) -> list:
    out, s = [], 1
    for d in reversed(shape):
        out.append(s)
        s *= d
    return out[::-1]


def _bstrides(shape, target) -> list:
    """Strides that read an array of ``shape`` broadcast to ``target`` (0 on broadcast dims)."""
    st = [0] * (len(target) - len(shape)) + _cstrides(shape)
    padded = (1,) * (len(target) - len(shape)) + tuple(shape)
    return [0 if p == 1 and t != 1 else s for p, t, s in zip(padded, target, st)]


def _broadcast_shape(shapes) -> tuple:
    if len(shapes) == 2:  # the common cases: equal shapes, or one operand 0-d
        a, b = shapes
        if a == b or not b:
            return tuple(a)
        if not a:
            return tuple(b)
    nd = max(len(s) for s in shapes)
    out = []
    for d in range(nd):
        sizes = {s[d - nd + len(s)] for s in shapes if d - nd + len(s) >= 0} - {1}
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


class View:
    """An operand of an element-wise launch: buffer, element offset, strides (None: contiguous,
    ``"s"``: one element broadcast), dtype name."""

    __slots__ = ("handle", "off", "strides", "dtype")

    def __init__(self, handle, off, strides, dtype: str):
        self.handle, self.off, self.strides, self.dtype = handle, off, strides, dtype

    @classmethod
    def of(cls, a, target=None, dtype=None):
        """``a`` read over ``target`` (broadcasting), or as itself."""
        strides = None if target is None or tuple(a.shape) == tuple(target) else _bstrides(a.shape, target)
        if strides is not None and a.size == 1:
            strides = "s"
        return cls(a.handle, _off(a), strides, dtype or a.dtype.name)

    @property
    def mode(self) -> str:
        return "c" if self.strides is None else "s" if self.strides == "s" else "g"

    def full_strides(self, shape) -> list:
        return _cstrides(shape) if self.strides is None else [0] * len(shape) if self.strides == "s" else self.strides


def _collapse(shape, strides):
    """Drop size-1 dims and merge neighbours that every operand walks contiguously."""
    dims = []
    for d, n in enumerate(shape):
        if n == 1:
            continue
        st = [s[d] for s in strides]
        if dims and all(p == s * n for p, s in zip(dims[-1][1], st)):
            dims[-1] = (dims[-1][0] * n, st)
        else:
            dims.append((n, st))
    dims = dims or [(1, [0] * len(strides))]
    return [n for n, _ in dims], [[st[k] for _, st in dims] for k in range(len(strides))]


def elementwise(ctx, op: str, out: View, ins: list, shape) -> None:
    """Launch ``out = EXPR[op](ins)`` over ``shape``: contiguous (``c``/``s`` per input) when the
    output is contiguous and the inputs are, else strided over the collapsed dims; the generic
    kernel of the signature until the launch is worth specializing (:func:`_specialize`)."""
    n = _prod(shape)
    if n == 0:
        return
    local = min(LOCAL, ctx.runtime.devices[ctx.index].max_work_group_size)
    dts = tuple(v.dtype for v in ins)
    modes = "".join(v.mode for v in ins)
    contiguous = out.mode == "c" and "g" not in modes and (len(ins) == 2 and modes != "ss" or "s" not in modes)
    if not _specialize(("ew", op, dts, out.dtype, modes if contiguous else "g"), n):
        _generic(ctx, op, out, ins, shape)
        return
    if contiguous:
        args = [out.handle, out.off]
        for v in ins:
            args += [v.handle, v.off]
        spec = ("ew", op, dts, out.dtype, modes)
        _launch(ctx, spec, (_items(n, codegen.ew_width(spec), local),), (local,), args + [n])
        return
    _launch_strided(ctx, ("ew", op, dts, out.dtype), [], out, ins, shape, local, pad=False)


def _items(n: int, width: int, local: int) -> int:
    """Global size for ``n`` elements, ``width`` per work-item, in groups of ``local``."""
    items = -(-n // width)
    return -(-items // local) * local


def _generic(ctx, op: str, out: View, ins: list, shape) -> None:
    """``out = EXPR[op](ins)`` by the generic kernel of the signature (any layout)."""
    dts = tuple(v.dtype for v in ins)
    code = _ewg_code(dts, out.dtype, op)
    local = min(LOCAL, ctx.runtime.devices[ctx.index].max_work_group_size)
    _launch_strided(ctx, ("ewg", dts, out.dtype), [code], out, ins, shape, local, pad=True)


@functools.cache
def _ewg_code(ins: tuple, out: str, op: str):
    """The op code argument of ``op`` in the generic kernel of signature ``ins -> out``."""
    return _CODES[codegen.ewg_ops(ins, out).index(op)]


def _launch_strided(ctx, spec, head, out: View, ins: list, shape, local: int, pad: bool) -> None:
    """Launch a strided element-wise kernel (``spec`` + ``g<rank>`` unless ``pad``, which pads
    the collapsed dims to :data:`codegen.MAX_RANK`) once per index of dims beyond that rank.
    The layout's plan (:func:`_strided_plan`) is cached per spec, shape and operand strides."""
    views = [out] + ins
    key = (ctx.index, spec, pad, tuple(shape),
           tuple(tuple(v.strides) if type(v.strides) is list else v.strides for v in views))
    plan = _STRIDED.get(key)
    if plan is None:
        plan = _strided_plan(ctx, spec, views, shape, local, pad)
        if len(_STRIDED) >= _STRIDED_MAX:
            _STRIDED.clear()
        _STRIDED[key] = plan
    spec, lead, full, strides, tail, gsize, lsize = plan
    for idx in itertools.product(*[range(d) for d in lead]) if lead else ((),):  # one launch per leading index
        args = list(head)
        for v, fs, st in zip(views, full, strides):
            args.append(v.handle)
            args.append(v.off + sum(i * s for i, s in zip(idx, fs)) if lead else v.off)
            args += st
        _launch(ctx, spec, gsize, lsize, args + tail)


_STRIDED: dict = {}  # (device, spec, pad, shape, operand strides) -> _strided_plan
_STRIDED_MAX = 4096


def _strided_plan(ctx, spec, views, shape, local: int, pad: bool) -> tuple:
    """(spec, leading dims, each operand's strides over them, each operand's strides over the
    kernel's dims, the kernel's dims and element count, global and local sizes)."""
    dims, strides = _collapse(shape, [v.full_strides(shape) for v in views])
    nlead = max(len(dims) - codegen.MAX_RANK, 0)
    lead, dims = dims[:nlead], dims[nlead:]
    extra = codegen.MAX_RANK - len(dims) if pad else 0
    if not pad:
        spec = spec + (f"g{len(dims)}",)
    dims = [1] * extra + dims
    n = _prod(dims)
    gsize, lsize = ((-(-n // local) * local,), (local,)) if pad else codegen.grid(dims, _tile(ctx))
    return (spec, lead, [st[:nlead] for st in strides], [[0] * extra + st[nlead:] for st in strides],
            dims + [n], gsize, lsize)


def _tile(ctx) -> int:
    """Side of the 2-D work-groups of strided kernels: 16 where the device allows 256 work-items."""
    cap = ctx.runtime.devices[ctx.index].max_work_group_size
    return 16 if cap >= 256 else 8 if cap >= 64 else 1


def copy(ctx, dst: View, src: View, shape) -> None:
    """Strided copy of bits (dtype-agnostic: uses an unsigned type of the element size). A
    layout's specialized launch is planned once (:class:`_CopyPlan`); the generic tier, contiguous
    copies and copies of more than :data:`codegen.MAX_RANK` collapsed dims go through
    :func:`elementwise`."""
    key = (ctx.index, src.dtype, dst.dtype, tuple(shape), _skey(dst.strides), _skey(src.strides))
    p = _COPIES.get(key)
    if p is None:
        if len(_COPIES) >= _STRIDED_MAX:
            _COPIES.clear()
        p = _COPIES[key] = _CopyPlan(ctx, dst, src, shape)
    run = p.run
    if run is None:
        if p.strided is None:
            elementwise(ctx, "copy", dst, [src], shape)
            return
        if not _specialize(p.tier, p.n):
            _generic(ctx, "copy", dst, [src], shape)
            return
        run = p.run = ctx.runtime.programs.kernel(ctx.runtime, ctx.index, p.strided[0], ctx.device)
    _, _, _, (dst_st, src_st), tail, gsize, lsize = p.strided
    run(ctx.stream if ctx.stream is not None else ctx.runtime.queues[ctx.index], gsize, lsize,
        [dst.handle, dst.off, *dst_st, src.handle, src.off, *src_st, *tail])


def _skey(strides):
    return tuple(strides) if type(strides) is list else strides


class _CopyPlan:
    """A strided copy's layout: its element count, the tier counter's spec, and the
    :func:`_strided_plan` of its specialized kernel (None: contiguous, empty or more than
    MAX_RANK collapsed dims, left to :func:`elementwise`), its Launcher once specialized."""

    __slots__ = ("n", "tier", "strided", "run")

    def __init__(self, ctx, dst: View, src: View, shape):
        self.n, self.run, self.strided = _prod(shape), None, None
        self.tier = ("ew", "copy", (src.dtype,), dst.dtype, "g")
        if self.n and not (dst.mode == "c" and src.mode == "c"):
            local = min(LOCAL, ctx.runtime.devices[ctx.index].max_work_group_size)
            plan = _strided_plan(ctx, ("ew", "copy", (src.dtype,), dst.dtype), [dst, src], shape, local, pad=False)
            if not plan[1]:  # no leading dims beyond the kernel's
                self.strided = plan


_COPIES: dict = {}  # (device, dtypes, shape, strides) -> _CopyPlan


def _bits(a) -> str:
    return _BITS[a.dtype.itemsize]


def _materialize(ctx, a, shape, strides, off):
    out = ctx.empty(tuple(shape), a.dtype)
    copy(ctx, View(out.handle, _off(out), None, _bits(a)), View(a.handle, off, list(strides), _bits(a)), shape)
    return out


# --- element-wise ------------------------------------------------------------------------------
def _elementwise_kernel(op: str):
    # (context, first and last input dtypes, approximate) -> _EwPlan; the op's signature fixes the
    # other inputs' dtypes
    plans: dict = {}
    hot: list = []  # [the C hot path (_launch.Elementwise)] when there is one

    def plan(ctx, xs, approximate):
        name = "gelu_tanh" if op == "gelu" and approximate == "tanh" else op
        out_dt = codegen.ew_signature(op, xs[-1].dtype.name)[1]
        spec = ("ew", name, tuple(x.dtype.name for x in xs), out_dt, "c" * len(xs))
        local = min(LOCAL, ctx.runtime.devices[ctx.index].max_work_group_size)
        p = plans[(ctx, xs[0].dtype, xs[-1].dtype, approximate)] = _EwPlan(spec, _DTYPES[out_dt], local)
        return p

    def kernel(ctx, *xs, approximate="none"):
        x0 = xs[0]
        p = plans.get((ctx, x0.dtype, xs[-1].dtype, approximate)) or plan(ctx, xs, approximate)
        shape = x0.shape
        if len(xs) == 1 or xs[1].shape == shape and (len(xs) == 2 or xs[2].shape == shape):  # one shape
            out = ctx.empty(shape, p.out_dt)
            n = math.prod(shape)
            if n:
                run = p.run
                if run is None:
                    if not _specialize(p.spec, n):
                        _generic(ctx, p.spec[1], View.of(out), [View.of(x) for x in xs], shape)
                        return out
                    run = p.run = ctx.runtime.programs.kernel(ctx.runtime, ctx.index, p.spec, ctx.device)
                    if hot and approximate == "none" and run.native is not None and _runtime._recording[0] is None:
                        hot[0].add(ctx, x0.dtype, xs[-1].dtype, p.out_dt, p.lsize, p.grids,
                                   ctx.runtime.queues[ctx.index], run.native)
                run.arrays(ctx.stream if ctx.stream is not None else ctx.runtime.queues[ctx.index],
                           p.grids.get(n) or p.grid(n), p.lsize, (out, *xs), n)
            return out
        shape = _broadcast_shape([x.shape for x in xs])
        out = ctx.empty(shape, p.out_dt)
        elementwise(ctx, p.spec[1], View.of(out), [View.of(x, shape) for x in xs], shape)
        return out

    def unary(ctx, x, approximate="none"):  # the hot path of a specialized launch, spelled out
        p = plans.get((ctx, x.dtype, x.dtype, approximate))
        run = p.run if p is not None else None
        if run is None:
            return kernel(ctx, x, approximate=approximate)
        shape = x.shape
        out = ctx.empty(shape, p.out_dt)
        n = math.prod(shape)
        if n:
            run.arrays(ctx.stream if ctx.stream is not None else ctx.runtime.queues[ctx.index],
                       p.grids.get(n) or p.grid(n), p.lsize, (out, x), n)
        return out

    def binary(ctx, x, y, approximate="none"):
        p = plans.get((ctx, x.dtype, y.dtype, approximate))
        run = p.run if p is not None else None
        shape = x.shape
        if run is None or y.shape != shape:
            return kernel(ctx, x, y, approximate=approximate)
        out = ctx.empty(shape, p.out_dt)
        n = math.prod(shape)
        if n:
            run.arrays(ctx.stream if ctx.stream is not None else ctx.runtime.queues[ctx.index],
                       p.grids.get(n) or p.grid(n), p.lsize, (out, x, y), n)
        return out

    arity = codegen.arity(op)
    fn = {1: unary, 2: binary}.get(arity, kernel)
    fn.__name__ = f"opencl_{op}"
    c = _runtime.native_launch()
    if c is None or fn is kernel:
        return fn
    hot.append(c.Elementwise(fn, arity))  # the same-shape hot path in C; kernel() adds each specialized launch
    return hot[0]


class _EwPlan:
    """An element-wise op's contiguous launch on one device for one signature: its spec, result
    dtype, work-group size, Launcher (once specialized), elements per work-item, and the global
    sizes of the element counts seen (at most 64 kept)."""

    __slots__ = ("spec", "out_dt", "local", "lsize", "run", "width", "grids")

    def __init__(self, spec, out_dt, local):
        self.spec, self.out_dt, self.local, self.lsize, self.run = spec, out_dt, local, (local,), None
        self.width, self.grids = codegen.ew_width(spec), {}

    def grid(self, n: int) -> tuple:
        g = (_items(n, self.width, self.local),)
        if len(self.grids) < 64:
            self.grids[n] = g
        return g


def astype(ctx, out, x, dtype, copy=True):
    elementwise(ctx, "copy", View.of(out), [View.of(x)], out.shape)


# --- reductions --------------------------------------------------------------------------------
def _local(ctx, k: int) -> int:
    cap = ctx.runtime.devices[ctx.index].max_work_group_size
    want = codegen.REDUCE_LOCAL[0] if k <= 16 else codegen.REDUCE_LOCAL[-1]
    return min(want, 1 << (cap.bit_length() - 1))


def _run_reduce(ctx, kind, out_h, out_o, out_dt, x_h, x_o, x_dt, m, k, sm, sk, chunks=1):
    lsize = _local(ctx, -(-k // chunks))
    c = -(-k // chunks) if k else 0
    args = [out_h, out_o, x_h, x_o, k, sm, sk, chunks, c]
    _launch(ctx, ("red", kind, x_dt, out_dt, lsize), (m * chunks * lsize,), (lsize,), args)


def reduce(ctx, kind: str, out, x, axes: tuple) -> None:
    """Reduce ``x`` over ``axes`` into ``out`` (contiguous, kept dims in order)."""
    shape, nd = x.shape, len(x.shape)
    kept = [d for d in range(nd) if d not in axes]
    m, k = _prod(shape[d] for d in kept), _prod(shape[d] for d in axes)
    if m == 0:
        return
    x_h, x_o = x.handle, _off(x)
    if tuple(axes) == tuple(range(nd - len(axes), nd)):
        sm, sk = k, 1
    elif tuple(axes) == tuple(range(len(axes))):
        sm, sk = 1, m
    else:  # move reduced axes last with one strided copy
        perm = kept + list(axes)
        st = _cstrides(shape)
        t = _materialize(ctx, x, [shape[d] for d in perm], [st[d] for d in perm], x_o)
        x_h, x_o, sm, sk = t.handle, _off(t), k, 1
    xd, od = x.dtype.name, out.dtype.name
    arg = kind in ("argmax", "argmin")
    generic = ("red", "arg" if arg else "any", xd, od, codegen.REDUCE_LOCAL[-1])
    if (ctx.runtime.devices[ctx.index].max_work_group_size >= generic[-1]
            and generic in codegen.generic_family(xd, ctx.runtime.has_fp64(ctx.index))
            and not _specialize(("red", kind, xd, od), m * k)):
        code = _CODES[(("argmax", "argmin") if arg else codegen.REDUCTIONS[:4]).index(kind)]
        args = [out.handle, _off(out), x_h, x_o, code, k, sm, sk, 1, k]
        _launch(ctx, generic, (m * generic[-1],), (generic[-1],), args)
        return
    if not arg and xd == od and xd in codegen.VRED_DTYPES:
        _vreduce(ctx, kind, out, x_h, x_o, xd, m, k, sm, sk)
        return
    if arg or m > 64 or k < 16384:
        _run_reduce(ctx, kind, out.handle, _off(out), od, x_h, x_o, xd, m, k, sm, sk)
        return
    # few long rows: partial results per chunk, then reduce the partials
    chunks = min(256, -(-k // 8192))
    part = ctx.empty((m * chunks,), _DTYPES[codegen.PARTIAL.get(od, od)])
    _run_reduce(ctx, kind, part.handle, _off(part), part.dtype.name, x_h, x_o, xd, m, k, sm, sk, chunks)
    _run_reduce(ctx, kind, out.handle, _off(out), od, part.handle, _off(part), part.dtype.name, m, chunks, chunks, 1)


def _vreduce(ctx, kind, out, x_h, x_o, dt, m, k, sm, sk) -> None:
    """:func:`codegen._vreduction` over rows (``sk == 1``) or columns (``sm == 1``); few outputs
    split k into chunks (enough work-items for every core), whose partials one more launch reduces."""
    if sk == 1:
        lay, items, st = "rows", m, sm
        chunks = 1 if m >= 64 else max(1, min(-(-k // 8192), 256 // m))
    else:
        lay, items, st = "cols", -(-m // codegen.VRED_COLS), sk
        chunks = 1 if items >= 32 else max(1, min(-(-k // 256), 64 // items))
    dst = out if chunks == 1 else ctx.empty((chunks * m,), _DTYPES[dt])
    c = -(-k // chunks)
    n = items * chunks
    _launch(ctx, ("vred", kind, dt, lay), (-(-n // 16) * 16,), (16,),
            [dst.handle, _off(dst), x_h, x_o, m, k, st, chunks, c])
    if chunks > 1:  # rows: partials (m, chunks); cols: partials (chunks, m)
        _vreduce(ctx, kind, out, dst.handle, _off(dst), dt, m, chunks, *((chunks, 1) if lay == "rows" else (1, m)))


def _reduce_kernel(kind: str):
    def kernel(ctx, out, x, axis, keepdims, dtype=None):
        if kind in ("argmax", "argmin"):
            axis = tuple(range(len(x.shape))) if axis is None else (axis,)
        reduce(ctx, kind, out, x, tuple(axis))

    kernel.__name__ = f"opencl_{kind}"
    return kernel


# --- softmax / log_softmax / cross entropy -----------------------------------------------------------
def _row_local(ctx, k: int):
    """The L slot of the ``"smx"`` kernels' specs: a work-item per row for rows up to 64 (of
    their own length, ``"k<K>"``, up to :data:`codegen.ROW_FIXED`), else a work-group of 64."""
    if 0 < k <= codegen.ROW_FIXED:
        return f"k{k}"
    local = codegen.SOFTMAX_LOCAL[0 if k <= 64 else -1]
    return local if local <= ctx.runtime.devices[ctx.index].max_work_group_size else 1


def _rows(ctx, spec, rows: int, local, args) -> None:
    """Launch an ``"smx"`` kernel over ``rows`` rows: a work-group per row, or (``local`` 1 or
    ``"k<K>"``) a work-item per row in groups of up to :data:`LOCAL`."""
    if local == 1 or type(local) is str:
        ls = min(LOCAL, ctx.runtime.devices[ctx.index].max_work_group_size)
        _launch(ctx, spec, (-(-rows // ls) * ls,), (ls,), args + [rows])
    else:
        _launch(ctx, spec, (rows * local,), (local,), args + [rows])


def _softmax_kernel(kind: str):
    def kernel(ctx, out, x, axis=-1):
        if out.size == 0:
            return
        shape = tuple(x.shape) or (1,)
        k, inner = shape[axis], _prod(shape[axis + 1:])
        local = _row_local(ctx, k)
        _rows(ctx, ("smx", kind, x.dtype.name, local), out.size // k, local,
              [out.handle, _off(out), x.handle, _off(x), k, inner])

    kernel.__name__ = f"opencl_{kind}"
    return kernel


def _softmax_grad_kernel(kind: str):
    def kernel(ctx, out, g, o, axis=-1):
        if out.size == 0:
            return
        if not o.shape:  # a 0-d softmax is constant: no gradient
            ctx.runtime.memset(ctx.index, out.handle, out.byte_offset, 0, out.nbytes, ctx.stream)
            return
        k, inner = o.shape[axis], _prod(o.shape[axis + 1:])
        local = _row_local(ctx, k)
        _rows(ctx, ("smxg", kind, o.dtype.name, local), out.size // k, local,
              [out.handle, _off(out), g.handle, _off(g), k, inner, o.handle, _off(o)])

    kernel.__name__ = f"opencl_{kind}_grad"
    return kernel


def cross_entropy(ctx, out, logits, labels, reduction="mean", grad=None, grad_out=None, flag=None):
    """Per-row losses (:func:`codegen._softmax` ``"nll"``), into ``out`` for reduction 'none',
    else summed (and divided for 'mean') by one more launch (:func:`codegen._ce_total`).
    With ``grad`` and ``grad_out``: also ``cross_entropy_grad(logits, labels, grad)`` into
    ``grad_out``, in the same row launch (``"nllceg"``; the graph compiler's pair). With ``flag``:
    also ``index_in_range(labels, low=0, high=classes)`` into it, by the total's launch (by
    :func:`index_in_range` for 'none')."""
    rows, k = labels.size, logits.shape[-1]
    dt = logits.dtype.name
    dst = out if reduction == "none" else ctx.empty((rows,), _DTYPES[codegen.PARTIAL.get(dt, dt)])
    if rows:
        local = _row_local(ctx, k)
        args = [dst.handle, _off(dst), logits.handle, _off(logits), k, 1, labels.handle, _off(labels)]
        kind = "nll"
        if grad is not None and grad_out.size:
            kind = "nllceg"
            args += _ceg_args(grad, reduction, rows) + [grad_out.handle, _off(grad_out)]
        _rows(ctx, ("smx", kind, dt, local, labels.dtype.name, dst.dtype.name), rows, local, args)
    if reduction == "none":
        if flag is not None:
            index_in_range(ctx, flag, labels, 0, k)
        return
    local = _row_local(ctx, 65)
    args = [out.handle, _off(out), dst.handle, _off(dst), rows, int(reduction == "mean")]
    if flag is None:
        _launch(ctx, ("cetot", dst.dtype.name, dt, local), (local,), (local,), args)
        return
    _launch(ctx, ("cetot", dst.dtype.name, dt, local, labels.dtype.name), (local,), (local,),
            args + [flag.handle, _off(flag), labels.handle, _off(labels), k])


def cross_entropy_grad(ctx, out, logits, labels, grad, reduction="mean"):
    """``(softmax(logits) - onehot(labels)) * grad`` (divided by the number of labels for
    'mean') in one launch (:func:`codegen._softmax` ``"ceg"``)."""
    if out.size == 0:
        return
    rows, k = labels.size, logits.shape[-1]
    local = _row_local(ctx, k)
    _rows(ctx, ("smx", "ceg", logits.dtype.name, local, labels.dtype.name), rows, local,
          [out.handle, _off(out), logits.handle, _off(logits), k, 1, labels.handle, _off(labels)]
          + _ceg_args(grad, reduction, rows))


def _ceg_args(grad, reduction: str, rows: int) -> list:
    """The gradient arguments of a ``"ceg"``/``"nllceg"`` launch: the upstream gradient (one
    value, or one per row for 'none'), its stride and the 'mean' divisor (0: none)."""
    return [grad.handle, _off(grad), int(reduction == "none"), max(rows, 1) if reduction == "mean" else 0]


# --- mean / var: the decompositions' kernels, called without dispatching each ----------------------
_DIVIDE, _SUBTRACT, _MULTIPLY = (_elementwise_kernel(op) for op in ("divide", "subtract", "multiply"))


def _sum(ctx, x, axes: tuple, keepdims: bool):
    shape = tuple(1 if d in axes else n for d, n in enumerate(x.shape) if keepdims or d not in axes)
    out = ctx.empty(shape, x.dtype)
    reduce(ctx, "sum", out, x, axes)
    return out


def _scalar(ctx, value: float, dtype):
    """A 0-d array of ``dtype`` holding ``value`` (as the dispatcher turns a Python float into
    one), filled on the device."""
    out = ctx.empty((), dtype)
    key = (dtype, value, math.copysign(1.0, value))
    pattern = _PATTERNS.get(key)
    if pattern is None:
        pattern = np.array(value, dtype=dtype.numpy).reshape(1).view(_BITS[dtype.itemsize])
        if len(_PATTERNS) < 256:
            _PATTERNS[key] = pattern
    ctx.runtime.fill(ctx.index, out.handle, out.byte_offset, pattern, dtype.itemsize, ctx.stream)
    return out


_PATTERNS: dict = {}  # (dtype, value, sign) -> the fill pattern of a 0-d array holding value


def mean(ctx, x, axis, keepdims):
    """``sum(x) / count``: the decomposition's sum and divide kernels (results bit-equal to it)."""
    return _DIVIDE(ctx, _sum(ctx, x, tuple(axis), keepdims), _scalar(ctx, float(_prod(x.shape[a] for a in axis)), x.dtype))


def var(ctx, x, axis, keepdims, correction=0.0):
    """``sum((x - mean(x))**2) / (count - correction)``: the decomposition's kernels in its order."""
    axis = tuple(axis)
    n = _prod(x.shape[a] for a in axis)
    d = _SUBTRACT(ctx, x, mean(ctx, x, axis, True))
    return _DIVIDE(ctx, _sum(ctx, _MULTIPLY(ctx, d, d), axis, keepdims), _scalar(ctx, float(max(n - correction, 0)), x.dtype))


# --- matmul ------------------------------------------------------------------------------------
def _operand(ctx, a, shape2, batch):
    """(array, batch stride) of ``a`` read as ``batch + shape2``; a broadcast batch is materialized.

    The returned array must stay referenced until the kernel is queued (its memory is reused after).
    """
    mat = shape2[0] * shape2[1]
    own = tuple(a.shape[:-2]) if len(a.shape) > 2 else ()
    if _prod(own) == 1:
        return a, 0
    if (1,) * (len(batch) - len(own)) + own == tuple(batch):
        return a, mat
    full = tuple(batch) + tuple(shape2)
    return _materialize(ctx, a, full, _bstrides(tuple(a.shape), full), _off(a)), mat


def _matmul_packed(ctx, out, a, sa, b, sb, m, n, k, batch, ta=False) -> None:
    """float32 ``out = a @ b`` by :func:`codegen._matmul_packed`. B is packed into column panels
    first (once when its batch is broadcast: ``sb == 0``), except a B of whole panels small enough
    (:data:`UNPACKED_B_BYTES`) that its rows stay in cache and a few pages: it is read in place.
    ``ta``: ``a`` holds A transposed (K×M)."""
    w, narrow = _panels(n)
    mm = ("mm", "float32", "packedta" if ta else "packed") + narrow
    panels = -(-n // w)
    g, blocks = codegen.MM_GROUP, -(-m // codegen.MM_ROWS)
    grid = (-(-blocks // g) * panels * g, 1, batch)
    head = [out.handle, _off(out), a.handle, _off(a)]
    if n % w == 0 and k * n * 4 <= UNPACKED_B_BYTES:
        _launch(ctx, mm, grid, (g, 1, 1), head + [b.handle, _off(b), m, n, k, sa, sb, w, n])
        return
    total, nb = panels * k * w, batch if sb else 1
    bp = ctx.empty((nb * total,), _DTYPES["float32"])
    lk = codegen.MM_PACK_GROUP
    _launch(ctx, ("mm", "float32", "pack") + narrow, (-(-k // lk) * lk, panels), (lk, 1),
            [bp.handle, _off(bp), b.handle, _off(b), n, k, sb, nb])
    _launch(ctx, mm, grid, (g, 1, 1), head + [bp.handle, _off(bp), m, n, k, sa, total if sb else 0, k * w, w])


def _panels(n: int) -> tuple:
    """(panel width, spec suffix) of the packed matmul for B of ``n`` columns: :data:`codegen.MM_NARROW`
    columns (suffix ``(width,)``) when B is that narrow, else :data:`codegen.MM_COLS` (no suffix)."""
    return (codegen.MM_NARROW, (codegen.MM_NARROW,)) if n <= codegen.MM_NARROW else (codegen.MM_COLS, ())


def matmul_transposed_a(ctx, out, at, b) -> None:
    """float32 ``out = at.T @ b`` of 2-D ``at`` (K×M) and ``b`` (K×N). Work eager would run on the
    packed kernel: that kernel reading A by columns, without transposing ``at`` first (the same
    sums in the same order); smaller work: eager's kernels (the transposing copy, then
    :func:`matmul`). The caller checks the device takes the packed kernels (:func:`takes_packed`)."""
    k, m = at.shape
    n = b.shape[1]
    if out.size == 0:
        return
    if k == 0 or not _specialized(("mm", "float32", "packed"), m * n * k):
        a = ctx.empty((m, k), at.dtype)
        permute_dims(ctx, a, at, (1, 0))
        matmul(ctx, out, a, b)
        return
    _matmul_packed(ctx, out, at, 0, b, 0, m, n, k, 1, ta=True)


def takes_packed(runtime, index: int) -> bool:
    """Whether device ``index`` runs the packed float32 matmul (work-groups of its packing kernel)."""
    return runtime.devices[index].max_work_group_size >= codegen.MM_PACK_GROUP


UNPACKED_B_BYTES = 256 << 10  # float32 matmul reads a B of whole panels up to this size without packing


def matmul(ctx, out, a, b) -> None:
    """Small or rarely repeated: :func:`codegen._matmul_simple`; else float32:
    :func:`codegen._matmul_packed`; any other dtype: the register-blocked tiled kernel
    (:func:`codegen._matmul`)."""
    ash = (1,) + tuple(a.shape) if len(a.shape) == 1 else tuple(a.shape)
    bsh = tuple(b.shape) + (1,) if len(b.shape) == 1 else tuple(b.shape)
    m, k, n = ash[-2], ash[-1], bsh[-1]
    nb = max(len(ash), len(bsh)) - 2
    pa, pb = (1,) * (nb - len(ash) + 2) + ash[:-2], (1,) * (nb - len(bsh) + 2) + bsh[:-2]
    batch = tuple(max(x, y) for x, y in zip(pa, pb))
    if out.size == 0:
        return
    if k == 0:
        ctx.runtime.memset(ctx.index, out.handle, out.byte_offset, 0, out.nbytes, ctx.stream)
        return
    cap = ctx.runtime.devices[ctx.index].max_work_group_size
    a, sa = _operand(ctx, a, (m, k), batch)
    b, sb = _operand(ctx, b, (k, n), batch)
    args = [out.handle, _off(out), a.handle, _off(a), b.handle, _off(b), m, n, k, sa, sb]
    dt = a.dtype.name
    fast = "packed" if dt == "float32" and cap >= codegen.MM_PACK_GROUP else "tiled"
    if cap >= 64 and not _specialize(("mm", dt, fast), m * n * k * _prod(batch)):
        _launch(ctx, ("mm", dt, "simple"), (-(-n // 8) * 8, -(-m // 8) * 8, _prod(batch)), (8, 8, 1), args)
        return
    if fast == "packed":
        _matmul_packed(ctx, out, a, sa, b, sb, m, n, k, _prod(batch))
        return
    if 2128 * a.dtype.itemsize > ctx.runtime.devices[ctx.index].local_mem_size:  # the tiles (complex128: 34 KiB)
        _launch(ctx, ("mm", dt, "simple"), (-(-n // 8) * 8, -(-m // 8) * 8, _prod(batch)), (8, 8, 1), args)
        return
    if cap < 256:
        raise RuntimeError(f"matmul on {ctx.device} needs work-groups of 256 (the device allows {cap}); "
                           "run it on the cpu or another OpenCL device")
    t = codegen.TILE
    gsize = (-(-n // t) * 16, -(-m // t) * 16, _prod(batch))
    _launch(ctx, ("mm", dt, "tiled"), gsize, (16, 16, 1), args)


def linear(ctx, out, x, w, b, relu_out=None):
    """``x @ w.T + b``. float32 work worth specializing: W packed straight from its transpose
    (:func:`codegen._matmul_pack_t`), then the packed matmul adding the bias as it stores (two
    launches); otherwise the decomposition's kernels (transposing copy, matmul, broadcast add).
    float32 and float64 only: 16-bit floats decompose in float32 and round once. ``relu_out``
    (the graph compiler's ``relu(linear(...))``): also ``relu`` of the result, stored by the
    packed matmul as it stores the result (else by the relu kernel after it); with ``out`` None,
    only the relu is stored (``"packedr"``: nothing reads the linear result)."""
    dst = out if out is not None else relu_out
    if dst.size == 0:
        return
    n, k = w.shape
    m = dst.size // n
    cap = ctx.runtime.devices[ctx.index].max_work_group_size
    if (x.dtype.name == "float32" and k and cap >= codegen.MM_PACK_GROUP
            and _specialize(("mm", "float32", "packed"), m * n * k)):
        (cw, narrow), lk, g = _panels(n), codegen.MM_PACK_GROUP, codegen.MM_GROUP
        panels = -(-n // cw)
        bp = ctx.empty((panels * k * cw,), x.dtype)
        _launch(ctx, ("mm", "float32", "packt") + narrow, (-(-k // lk) * lk, panels), (lk, 1),
                [bp.handle, _off(bp), w.handle, _off(w), n, k])
        blocks = -(-m // codegen.MM_ROWS)
        grid = (-(-blocks // g) * panels * g, 1, 1)
        kind = "packedb" if relu_out is None else "packedr" if out is None else "packedbr"
        tail = [relu_out.handle, _off(relu_out)] if kind == "packedbr" else []
        _launch(ctx, ("mm", "float32", kind) + narrow, grid, (g, 1, 1),
                [dst.handle, _off(dst), x.handle, _off(x), bp.handle, _off(bp), m, n, k, 0, 0, k * cw,
                 cw, b.handle, _off(b), len(b.shape)] + tail)
        return
    if out is None:
        out = ctx.empty(tuple(relu_out.shape), relu_out.dtype)
    wt = ctx.empty((k, n), w.dtype)
    permute_dims(ctx, wt, w, (1, 0))
    mm = ctx.empty(tuple(out.shape), out.dtype)
    matmul(ctx, mm, x, wt)
    shape = tuple(out.shape)
    elementwise(ctx, "add", View.of(out), [View.of(mm, shape), View.of(b, shape)], shape)
    if relu_out is not None:
        elementwise(ctx, "relu", View.of(relu_out), [View.of(out)], shape)


# --- movement ----------------------------------------------------------------------------------
def reshape(ctx, x, shape, copy=None):
    return x.view(tuple(shape))


def _strided(shape, base_off, ops) -> tuple:
    """(offset, strides, shape) of ``x[key]`` for a C-contiguous array of ``shape``."""
    st, off, ost, osh, ax = _cstrides(shape), base_off, [], [], 0
    for e in ops:
        if e[0] == "s":
            off += e[1] * st[ax]
            ost.append(e[2] * st[ax])
            osh.append(e[3])
            ax += 1
        elif e[0] == "i":
            off += e[1] * st[ax]
            ax += 1
        else:
            ost.append(0)
            osh.append(1)
    return off, ost, osh


def getitem(ctx, out, x, key):
    if out.size == 0:
        return
    off, st, sh = _strided(x.shape, _off(x), key)
    copy(ctx, View(out.handle, _off(out), None, _bits(x)), View(x.handle, off, st, _bits(x)), sh)


def setitem(ctx, out, x, value, key):
    if out.nbytes:
        ctx.runtime.copy_d2d(ctx.index, out.handle, out.byte_offset, x.handle, x.byte_offset, out.nbytes, ctx.stream)
    target = key_shape(key)
    if _prod(target) == 0:
        return
    off, st, sh = _strided(out.shape, _off(out), key)
    copy(ctx, View(out.handle, off, st, _bits(x)), View.of(value, target, _bits(x)), sh)


def permute_dims(ctx, out, x, axes):
    st = _cstrides(x.shape)
    copy(ctx, View.of(out, dtype=_bits(x)), View(x.handle, _off(x), [st[a] for a in axes], _bits(x)), out.shape)


def broadcast_to(ctx, out, x, shape):
    copy(ctx, View.of(out, dtype=_bits(x)), View.of(x, out.shape, _bits(x)), out.shape)


def concat(ctx, out, arrays, axis):
    """Pieces that are contiguous runs of ``out`` (axis None, or nothing before ``axis``) are plain
    copies; otherwise each piece is a strided copy into its slab."""
    rt, i, size = ctx.runtime, ctx.index, out.dtype.itemsize
    outer = 1 if axis is None else _prod(out.shape[:axis])
    start = 0
    for a in arrays:
        if a.size == 0:
            continue
        if outer == 1:  # each piece is one contiguous run of the output
            rt.copy_d2d(i, out.handle, out.byte_offset + start * size, a.handle, a.byte_offset, a.nbytes, ctx.stream)
            start += a.size
            continue
        ost = _cstrides(out.shape)
        dst = View(out.handle, _off(out) + start * ost[axis], ost, _bits(a))
        copy(ctx, dst, View.of(a, dtype=_bits(a)), a.shape)
        start += a.shape[axis]


def take(ctx, out, x, indices, axis):
    n, nidx = x.shape[axis], indices.shape[0]
    if nidx and n == 0:
        raise IndexError(f"take(): index out of range for axis {axis} with size 0 (on {ctx.device})")
    if out.size == 0:
        return
    post = _prod(x.shape[axis + 1:])  # the op's check has read back that every index is in range
    args = [out.handle, _off(out), x.handle, _off(x), indices.handle, _off(indices), n, nidx, post, out.size]
    g = -(-out.size // LOCAL) * LOCAL
    _launch(ctx, _tiered(("take", _bits(x), indices.dtype.name), out.size), (g,), (LOCAL,), args)


def index_in_range(ctx, out, x, low, high):
    """Whether every value of ``x`` is in [low, high): ``out`` filled with 1, then one launch
    clears it at any value outside (:func:`codegen._in_range`); bounds beyond the dtype's range
    hold for every value, and a range that excludes the whole dtype fails any non-empty ``x``."""
    info = np.iinfo(x.dtype.numpy)
    rt = ctx.runtime
    if x.size and (low > info.max or high <= info.min):
        rt.memset(ctx.index, out.handle, out.byte_offset, 0, 1, ctx.stream)
        return
    rt.memset(ctx.index, out.handle, out.byte_offset, 1, 1, ctx.stream)
    clo, chi = low > info.min, high <= info.max
    if not x.size or not (clo or chi):
        return
    t = x.dtype.numpy.type
    g = -(-x.size // LOCAL) * LOCAL
    _launch(ctx, ("inrange", x.dtype.name), (g,), (LOCAL,),
            [out.handle, _off(out), x.handle, _off(x), x.size, t(low if clo else 0), t(high if chi else 0), int(clo), int(chi)])


# --- creation ----------------------------------------------------------------------------------
def full(ctx, out, shape, fill_value, dtype):
    if out.nbytes == 0:
        return
    pattern = np.array(fill_value, dtype=dtype.numpy).reshape(1).view(_BITS[dtype.itemsize])
    ctx.runtime.fill(ctx.index, out.handle, out.byte_offset, pattern, out.nbytes, ctx.stream)


def arange(ctx, out, start, stop, step, dtype):
    n = out.size
    if n == 0:
        return
    if dtype.kind == "float" or isinstance(start, float) or isinstance(step, float):
        via, cast = ("double", np.float64) if ctx.runtime.has_fp64(ctx.index) else ("float", np.float32)
    else:
        via, cast = "long", np.int64
    args = [out.handle, _off(out), cast(start), cast(step), n]
    g = -(-n // LOCAL) * LOCAL
    _launch(ctx, _tiered(("arange", dtype.name, via), n), (g,), (LOCAL,), args)


def philox_bits(ctx, out, shape, key, offset, dtype):
    """The random stream's bytes straight into ``out`` (any integer dtype: the same bytes)."""
    if out.nbytes == 0:
        return
    local = min(LOCAL, ctx.runtime.devices[ctx.index].max_work_group_size)
    blocks = -(-out.nbytes // 16)
    args = [out.handle, out.byte_offset, out.nbytes, key[0], key[1], offset & 0xFFFFFFFF, offset >> 32]
    _launch(ctx, ("philox", "uint8"), (-(-blocks // local) * local,), (local,), args)


# --- registration ------------------------------------------------------------------------------
def register(kernels, runtime) -> None:
    """Fill the kernel table; each element-wise op only for the dtype kinds it has an expression for."""
    for op in ELEMENTWISE:
        dts = [d for d in codegen.CTYPES if codegen.expr_for(op, d) is not None]
        kernels.register(op, _elementwise_kernel(op), dtypes=dts, out=False)
    for kind in codegen.REDUCTIONS:
        dts = [d for d in codegen.CTYPES if codegen.CTYPES[d].kind != "c" or kind in ("sum", "prod")]
        kernels.register(kind, _reduce_kernel(kind), dtypes=dts, out=True)
    kernels.register("astype", astype, dtypes=list(codegen.CTYPES), out=True)
    for name, fn in (("mean", mean), ("var", var)):  # 16-bit floats decompose in float32
        kernels.register(name, fn, dtypes=["float32", "float64"], out=False)
    kernels.register("matmul", matmul, dtypes=[d for d in codegen.CTYPES if d != "bool"], out=True)
    kernels.register("linear", linear, dtypes=["float32", "float64"], out=True)  # 16-bit: decomposed in float32
    kernels.register("reshape", reshape, out=False)
    for name, fn in (("getitem", getitem), ("setitem", setitem), ("permute_dims", permute_dims),
                     ("broadcast_to", broadcast_to), ("concat", concat), ("take", take),
                     ("full", full), ("arange", arange)):
        kernels.register(name, fn, out=True)
    for kind in ("softmax", "log_softmax"):
        kernels.register(kind, _softmax_kernel(kind), dtypes=codegen.SOFTMAX_DTYPES, out=True)
        kernels.register(f"{kind}_grad", _softmax_grad_kernel(kind), dtypes=codegen.SOFTMAX_DTYPES, out=True)
    kernels.register("index_in_range", index_in_range, dtypes=[d for d, c in codegen.CTYPES.items() if c.kind in "iu"],
                     out=True)
    kernels.register("cross_entropy", cross_entropy, dtypes=codegen.SOFTMAX_DTYPES, out=True)
    kernels.register("cross_entropy_grad", cross_entropy_grad, dtypes=codegen.SOFTMAX_DTYPES, out=True)
    kernels.register("philox_bits", philox_bits, dtypes=[d for d, c in codegen.CTYPES.items() if c.kind in "iu"],
                     out=True)
