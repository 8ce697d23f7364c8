"""Host side of the OpenCL kernels: pick a specialization, fetch the cached program, launch.

Every kernel uses the ``out=True`` convention (the core allocates the result) except
``reshape``, which returns a view of its input's block. Element-wise ops come from the
:data:`codegen.EXPR` table; movement ops (permute_dims, broadcast_to, getitem, setitem,
concat) are one strided copy. Ops not registered here run through their decompositions
or the CPU fallback.
"""
from __future__ import annotations

import numpy as np
import pyopencl as cl

from anydevice.ops.indexing import key_shape

from . import codegen

_BITS = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}  # bit-copy dtype by element size
ELEMENTWISE = [op for op in codegen.EXPR if op != "copy"]
REDUCTIONS = ("sum", "prod", "max", "min", "argmax", "argmin")
LOCAL = 128  # work-group size of element-wise launches


# --- launching -----------------------------------------------------------------------------------
def _launch(ctx, key, make_source, gsize, lsize, args):
    rt, i = ctx.runtime, ctx.index
    k = rt.programs.kernel(rt.contexts[i], rt.devices[i], key, make_source)
    if getattr(k, "_ad_typed", None) is None:
        k.set_scalar_arg_dtypes([None if isinstance(a, cl.MemoryObjectHolder) else
                                 (type(a) if isinstance(a, np.generic) else np.int64) for a in args])
        k._ad_typed = True
    k(rt.queue(i, ctx.stream), gsize, lsize, *args)


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _off(a) -> int:
    """Element offset of a DeviceArray inside its cl.Buffer."""
    return a.byte_offset // a.dtype.itemsize


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


class View:
    """An operand of the element-wise generator: buffer, element offset, strides (None: contiguous)."""

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


def _collapse(shape, views):
    """Drop size-1 dims and merge neighbours that every strided operand walks contiguously."""
    g = [v for v in views if v.mode == "g"]
    dims = []
    for d, n in enumerate(shape):
        if n == 1:
            continue
        st = [v.strides[d] for v in g]
        if dims and all(p == s * n for p, s in zip(dims[-1][1], st)):
            dims[-1] = (dims[-1][0] * n, st)
        else:
            dims.append((n, st))
    dims = dims or [(1, [0] * len(g))]
    for k, v in enumerate(g):
        v.strides = [st[k] for _, st in dims]
    return [n for n, _ in dims]


def elementwise(ctx, name: str, expr: str, out: View, ins: list, shape) -> None:
    """Launch ``out = expr(ins)`` over ``shape`` (one kernel per dtypes × modes × rank)."""
    n = _prod(shape)
    if n == 0:
        return
    views = [out] + ins
    dims = _collapse(shape, views) if any(v.mode == "g" for v in views) else [n]
    nd = len(dims)
    sig = tuple((v.dtype, v.mode) for v in ins)
    key = ("ew", name, expr, (out.dtype, out.mode), sig, nd)
    args = []
    for v in views:
        args += [v.handle, v.off] + (list(v.strides) if v.mode == "g" else [])
    if any(v.mode == "g" for v in views):
        args += dims
    args.append(n)
    gsize = -(-n // LOCAL) * LOCAL
    _launch(ctx, key, lambda: codegen.elementwise(expr, list(sig), (out.dtype, out.mode), nd), (gsize,), None, args)


def copy(ctx, dst: View, src: View, shape) -> None:
    """Strided copy of bits (dtype-agnostic: uses an unsigned type of the element size)."""
    elementwise(ctx, "copy", "x0", dst, [src], shape)


def _bits(a) -> str:
    return _BITS[a.dtype.itemsize]


def _materialize(ctx, a, shape, strides, off):
    out = ctx.empty(tuple(shape), a.dtype)
    copy(ctx, View(out.handle, _off(out), None, _bits(a)), View(a.handle, off, list(strides), _bits(a)), shape)
    return out


# --- element-wise ------------------------------------------------------------------------------
def _elementwise_kernel(op: str):
    def kernel(ctx, out, *xs):
        expr = codegen.expr_for(op, xs[-1].dtype.name)
        shape = out.shape
        if all(x.shape == shape for x in xs):  # fast path: contiguous operands of one shape
            n = out.size
            if n == 0:
                return
            sig = [(x.dtype.name, "c") for x in xs]
            args = [out.handle, _off(out)]
            for x in xs:
                args += [x.handle, _off(x)]
            args.append(n)
            key = ("ew", op, expr, (out.dtype.name, "c"), tuple(sig), 1)
            make = lambda: codegen.elementwise(expr, sig, (out.dtype.name, "c"), 1)  # noqa: E731
            _launch(ctx, key, make, (-(-n // LOCAL) * LOCAL,), None, args)
            return
        elementwise(ctx, op, expr, View.of(out), [View.of(x, shape) for x in xs], shape)

    kernel.__name__ = f"opencl_{op}"
    return kernel


def astype(ctx, out, x, dtype, copy=True):
    elementwise(ctx, "astype", "x0", View.of(out), [View.of(x)], out.shape)


# --- reductions --------------------------------------------------------------------------------
def _local(ctx, k: int) -> int:
    cap = ctx.runtime.devices[ctx.index].max_work_group_size
    want = 1 if k <= 16 else 64
    return min(want, 1 << (cap.bit_length() - 1))


def _run_reduce(ctx, kind, out_h, out_o, out_dt, x_h, x_o, x_dt, m, k, sm, sk, chunks=1):
    lsize = _local(ctx, -(-k // chunks))
    key = ("red", kind, x_dt, out_dt, lsize)
    c = -(-k // chunks) if k else 0
    args = [out_h, out_o, x_h, x_o, k, sm, sk, chunks, c]
    _launch(ctx, key, lambda: codegen.reduction(kind, x_dt, out_dt, lsize), (m * chunks * lsize,), (lsize,), args)


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
    if kind in ("argmax", "argmin") or m > 64 or k < 16384:
        _run_reduce(ctx, kind, out.handle, _off(out), od, x_h, x_o, xd, m, k, sm, sk)
        return
    # few long rows: partial results per chunk, then reduce the partials
    chunks = min(256, -(-k // 8192))
    from anydevice.dtypes import dtype as _dtype

    part = ctx.empty((m * chunks,), _dtype(codegen.PARTIAL.get(od, od)))
    _run_reduce(ctx, kind, part.handle, _off(part), part.dtype.name, x_h, x_o, xd, m, k, sm, sk, chunks)
    _run_reduce(ctx, kind, out.handle, _off(out), od, part.handle, _off(part), part.dtype.name, m, chunks, chunks, 1)


def _reduce_kernel(kind: str):
    def kernel(ctx, out, x, axis, keepdims, dtype=None):
        if kind in ("argmax", "argmin"):
            axis = tuple(range(len(x.shape))) if axis is None else (axis,)
        reduce(ctx, kind, out, x, tuple(axis))

    kernel.__name__ = f"opencl_{kind}"
    return kernel


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


def matmul(ctx, out, a, b) -> None:
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
    a, sa = _operand(ctx, a, (m, k), batch)
    b, sb = _operand(ctx, b, (k, n), batch)
    cap = ctx.runtime.devices[ctx.index].max_work_group_size
    ts = 16 if cap >= 256 else 8
    dt = a.dtype.name
    gsize = (-(-n // ts) * ts, -(-m // ts) * ts, _prod(batch))
    args = [out.handle, _off(out), a.handle, _off(a), b.handle, _off(b), m, n, k, sa, sb]
    _launch(ctx, ("mm", dt, ts), lambda: codegen.matmul(dt, ts), gsize, (ts, ts, 1), args)


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
    rt, i = ctx.runtime, ctx.index
    bad = ctx.empty((1,), _dtype_int32())
    rt.memset(i, bad.handle, bad.byte_offset, 0, 4, ctx.stream)
    post = _prod(x.shape[axis + 1:])
    dt, it = _bits(x), indices.dtype.name
    args = [out.handle, _off(out), x.handle, _off(x), indices.handle, _off(indices), bad.handle, n, nidx, post, out.size]
    g = -(-out.size // LOCAL) * LOCAL
    _launch(ctx, ("take", dt, it), lambda: codegen.take(dt, it), (g,), (LOCAL,), args)
    flag = np.zeros(1, np.int32)
    cl.enqueue_copy(rt.queue(i, ctx.stream), flag, bad.handle, src_offset=bad.byte_offset, is_blocking=True)
    if flag[0]:
        raise IndexError(f"take(): an index is out of range for axis {axis} with size {n} (on {ctx.device})")


def _dtype_int32():
    from anydevice import dtypes

    return dtypes.int32


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
    _launch(ctx, ("arange", dtype.name, via), lambda: codegen.arange(dtype.name, via), (g,), (LOCAL,), args)


# --- registration ------------------------------------------------------------------------------
def register(kernels, runtime) -> None:
    """Fill the kernel table; each element-wise op only for the dtype kinds it has an expression for."""
    for op in ELEMENTWISE:
        dts = [d for d in codegen.CTYPES if codegen.expr_for(op, d) is not None]
        kernels.register(op, _elementwise_kernel(op), dtypes=dts, out=True)
    for kind in REDUCTIONS:
        kernels.register(kind, _reduce_kernel(kind), dtypes=list(codegen.CTYPES), out=True)
    kernels.register("astype", astype, dtypes=list(codegen.CTYPES), out=True)
    kernels.register("matmul", matmul, dtypes=[d for d in codegen.CTYPES if d != "bool"], out=True)
    kernels.register("reshape", reshape, out=False)
    for name, fn in (("getitem", getitem), ("setitem", setitem), ("permute_dims", permute_dims),
                     ("broadcast_to", broadcast_to), ("concat", concat), ("take", take),
                     ("full", full), ("arange", arange)):
        kernels.register(name, fn, out=True)
