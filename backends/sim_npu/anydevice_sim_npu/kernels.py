"""Kernels of the simulated devices: one per primitive op, queued on the current stream.

The simulated compute units run numpy over views of device memory, on the stream's worker
thread. Element-wise binary ops use numpy ufuncs writing straight into the output and the
returning calling convention (``out=False``), which lets the dispatcher take its fast path
for same-shape operands; every other op uses ``out=True`` with the math of the cpu backend
(same numpy code, different memory and execution model). ``reshape`` shares the input's
memory (buffers are immutable, so this is safe).

A profile's ``missing_ops`` are left out on purpose: those ops fall back to the cpu, and
composite ops that use them decompose on-device as far as the dispatcher can.
"""
from __future__ import annotations

import numpy as np

from anydevice.ops.registry import broadcast_shapes, get_op, primitives
from anydevice.runtime import DeviceArray, KernelTable
from anydevice_cpu.kernels import power
from anydevice_cpu.kernels_optim import array_kernels

from .runtime import Into, compute, kernel_cost
from .streams import HEAVY_BYTES

_new_array = object.__new__  # a DeviceArray without __init__, as the core's allocating path makes them

#: Binary element-wise ops computed with a ufunc written straight into the output (``pow``: the
#: cpu backend's ``power``, numpy's with integer ** negative integer defined as the registry says).
UFUNCS = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "pow": power, "remainder": np.remainder,
    "floor_divide": np.floor_divide, "equal": np.equal, "less": np.less,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "bitwise_left_shift": np.left_shift, "bitwise_right_shift": np.right_shift,
}
#: Composite ops that get a native kernel anyway because decomposing them is wasteful.
EXTRA = ("matmul",)
#: Composite steps of every training loop (layers, activations, losses, comparisons) with a native
#: kernel on a type whose profile lacks no primitive: decomposed, each would cost an eager step
#: several launches. Element-wise math composites (tanh, expm1, ...) keep decomposing: the simulated
#: devices are where those decompositions are tested. On a type with ``missing_ops`` (xpu) every
#: composite decomposes, as far as the dispatcher can.
#: (Those the cpu backend has kernels for: their math is the cpu's.)
COMMON = ("linear", "relu", "softmax", "log_softmax", "cross_entropy", "mean", "var", "matrix_transpose",
          "expand_dims", "squeeze", "logical_not", "all", "any", "isnan", "isinf", "isfinite",
          # the fused steps of a training step's backward pass, and its label check
          "cross_entropy_grad", "softmax_grad", "log_softmax_grad", "getitem_grad", "index_in_range")
#: The binary ones among them, on the ufunc path of :data:`UFUNCS`.
COMMON_UFUNCS = {
    "greater": np.greater, "greater_equal": np.greater_equal, "less_equal": np.less_equal,
    "not_equal": np.not_equal, "logical_and": np.logical_and, "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
}


def _unary(ufunc):
    def into(out, x):
        ufunc(x, out=out)

    return into


def _linear(out, x, w, b):
    np.matmul(x, w.T, out=out)
    np.add(out, b, out=out)


def _astype_into(out, x, dtype, copy=True):
    out[...] = x  # assignment casts as np.copyto(casting="unsafe") does


#: Rows of one block of a blocked transpose: a plain strided copy of a large matrix misses the
#: cache on nearly every element it writes; a block of rows is written as strips of whole cache
#: lines (32 float32 are two). About 2.3x faster than the plain copy on a 256 x 256 float32, 1.5x
#: on 512 x 512; slower below 64K elements per matrix, where the plain copy stays in the cache.
TILE = 32
TILED = 1 << 16


def _swap_last(out, x):
    """``out[...] = swapaxes(x, -1, -2)``, a block of rows at a time when the matrices are large."""
    n, m = x.shape[-2], x.shape[-1]
    if n * m < TILED or n <= TILE or m <= TILE:
        out[...] = x.swapaxes(-1, -2)
        return
    for i in range(0, n, TILE):
        out[..., i:i + TILE] = x[..., i:i + TILE, :].swapaxes(-1, -2)


#: ndim -> the permutation that swaps the last two axes
_SWAPS = {n: (*range(n - 2), n - 1, n - 2) for n in range(2, 65)}


def _permute_into(out, x, axes):
    if axes == _SWAPS.get(len(axes)):
        _swap_last(out, x)
    else:
        out[...] = x.transpose(axes)


def _reduce(ufunc, with_dtype):
    if with_dtype:  # sum and prod: in the input's dtype (numpy would widen small integers)
        def into(out, x, axis, keepdims, dtype=None):
            ufunc.reduce(x, axis=axis, keepdims=keepdims, dtype=x.dtype, out=out)
    else:
        def into(out, x, axis, keepdims):
            ufunc.reduce(x, axis=axis, keepdims=keepdims, out=out)
    return into


def _concat_into(out, arrays, axis):
    if axis is None:
        arrays = [a.reshape(-1) for a in arrays]
        axis = 0
    np.concatenate(arrays, axis=axis, out=out)


def _where_into(out, c, a, b):
    np.copyto(out, b)
    np.copyto(out, a, where=c)


_ZERO = {}


def _relu(out, x):
    z = _ZERO.get(x.dtype)
    if z is None:
        z = _ZERO[x.dtype] = np.zeros((), x.dtype)
    np.maximum(x, z, out=out)


#: Kernels that write their result straight into device memory (:class:`~anydevice_sim_npu.runtime.Into`)
#: instead of returning a temporary that is then copied there: the same numpy calls as the cpu
#: backend's kernels, with ``out=`` (so the same bits). Used for every dtype but float16 and
#: bfloat16 (the cpu's kernels compute those in float32), and ``astype`` (for every dtype) only
#: where it is a plain cast (not float to integer, which the cpu truncates first).
INTO = {
    "matmul": lambda out, a, b: np.matmul(a, b, out=out), "linear": _linear, "relu": _relu,
    **{name: _unary(f) for name, f in {
        "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "negative": np.negative, "abs": np.abs,
        "sin": np.sin, "cos": np.cos, "floor": np.floor, "logical_not": np.logical_not}.items()},
    "astype": _astype_into, "matrix_transpose": _swap_last, "permute_dims": _permute_into,
    "sum": _reduce(np.add, True), "prod": _reduce(np.multiply, True), "max": _reduce(np.maximum, False),
    "min": _reduce(np.minimum, False), "concat": _concat_into, "where": _where_into,
}


def _labels_in_range(fn):
    """cross_entropy's cpu kernel, for which a label outside the classes counts as class 0 instead
    of raising. Eager calls never pass one (the op's value check raises first); a replayed graph
    reads its checks' flags after running and discards what ran, but a device kernel that raised
    would leave its device in the error state."""
    def kernel(ctx, logits, labels, **attrs):
        try:
            return fn(ctx, logits, labels, **attrs)
        except IndexError:
            c = logits.shape[-1]
            return fn(ctx, logits, np.where((labels >= 0) & (labels < c), labels, 0), **attrs)

    return kernel


#: Registry kernels the simulated devices wrap: the cpu's, made total over their inputs' values.
TOTAL = {"cross_entropy": _labels_in_range}


def _into(name, fn, into, out_dtype, in_dtypes, attrs):
    """The kernel a plan runs: ``Into(into)`` where it computes what ``fn`` computes, else ``fn``."""
    if into is None or name != "astype" and any(d.name in ("float16", "bfloat16") for d in (out_dtype, *in_dtypes)):
        return fn  # (the cpu's astype casts 16-bit floats directly, as assignment does)
    if name == "astype" and out_dtype.kind in ("int", "uint") and in_dtypes[0].kind == "float":
        return fn
    return Into(into)


def register(kernels: KernelTable, views, missing=()) -> None:
    """Fill ``kernels`` (of one runtime, whose :class:`~anydevice_sim_npu.runtime.ViewCache` is ``views``)."""
    cpu = KernelTable("cpu")
    from anydevice_cpu.plugin import anydevice_register_kernels as cpu_register

    cpu_register("cpu", None, cpu)  # every kernel the cpu backend has (its hook ignores the runtime)
    ufuncs = UFUNCS if missing else {**UFUNCS, **COMMON_UFUNCS}
    common = [] if missing else [n for n in COMMON if n in cpu]
    names = [o.name for o in primitives()] + list(EXTRA) + list(ufuncs) + common
    for name in dict.fromkeys(names):
        if name in missing:
            continue
        op = get_op(name)
        if name == "reshape":
            kernels.register(name, _reshape)
        elif name in ufuncs:
            kernels.register(name, _binary(op, ufuncs[name], views))
        elif op.outputs is None and op.inputs and not op.has_device_attr:
            fn = cpu.lookup(name, None).fn
            kernels.register(name, _returning(op, TOTAL[name](fn) if name in TOTAL else fn, views, INTO.get(name)))
        else:
            kernels.register(name, _queued(op, cpu.lookup(name, None).fn, views), out=True)
    for name, fn in array_kernels(np).items():  # optimizer updates: one kernel instead of ~30 decomposed ops
        kernels.register(name, _queued(get_op(name), None, views, Into(fn)), out=True)


def _queued(op, fn, views, into=None):
    """``out=True`` kernel: ``out[...] = fn(views of inputs)`` on the current stream, at once when
    it is light and the device idle (:meth:`~anydevice_sim_npu.streams.SimStream.run_now`), else queued.

    The kernel's cost (modelled seconds, heavy) depends only on the shapes and dtypes of its
    buffers and on its attributes: it is kept in ``costs``, with the view tables of the output
    and the inputs (emptied with ``views``). ``into`` (an :class:`~anydevice_sim_npu.runtime.Into`
    computing what ``fn`` computes, or None) is run instead of ``fn`` for every dtype.
    """
    fn = fn if into is None else into
    name, costs = op.name, {}
    views.plans.append(costs)

    def kernel(ctx, out, *inputs, **attrs):
        rt = ctx.runtime
        key = _cost_key(out, inputs, attrs)
        try:
            cost = costs.get(key) if key is not None else None
        except TypeError:  # an unhashable attribute
            cost = key = None
        if cost is None:
            cost = kernel_cost(rt, name, op, out, inputs, attrs)
            if key is not None:
                if len(costs) >= 4096:
                    costs.clear()
                outs = out if type(out) is tuple else (out,)
                t = views.tables_for(*[(o.shape, o.dtype) for o in outs], *[(x.shape, x.dtype) for x in inputs])
                n = len(outs)
                cost = costs[key] = (*cost[:2], (tuple(t[:n]) if type(out) is tuple else t[0], t[n:]))
        chip, stream = rt.chips[ctx.index], ctx.stream
        if (cost[1] or chip.faults
                or not (chip.default if stream is None else stream).run_now(name, cost[0], compute, fn, name, out,
                                                                           inputs, attrs, cost[2], views)):
            rt.launch(ctx.index, stream, name, fn, out, inputs, attrs, op, cost)  # heavy, or the device is busy

    kernel.__name__ = f"sim_{name}"
    return kernel


def _returning(op, fn, views, into=None):
    """Returning kernel of a registry op with tensor inputs and one result: the result is allocated
    here (``ctx.empty``) and computed as :func:`_queued`'s kernels compute theirs, at once or queued.

    What depends only on the inputs' shapes and dtypes and on the attributes is kept in ``plans``:
    the result's shape and dtype (the op's shape and dtype rules, which the dispatcher
    applied too), the modelled seconds, whether it is heavy, the view tables of the result and
    the inputs (emptied with ``views``), and which kernel runs: ``fn``, or ``into`` (``fn`` writing
    into the result, see :data:`INTO`) where that gives the same bits.
    """
    name, plans = op.name, {}
    views.plans.append(plans)

    def kernel(ctx, *inputs, **attrs):
        key = _plan_key(inputs, attrs)
        try:
            p = plans.get(key) if key is not None else None
        except TypeError:  # an unhashable attribute
            p = key = None
        if p is None:
            p = _result_plan(ctx.runtime, op, fn, into, inputs, attrs, views, key is not None and all(
                type(x) is not list for x in inputs))
            if key is not None:
                if len(plans) >= 4096:
                    plans.clear()
                plans[key] = p
        shape, dtype, cost, run = p
        out = ctx.empty(shape, dtype)
        rt, stream = ctx.runtime, ctx.stream
        chip = rt.chips[ctx.index]
        if (cost[1] or chip.faults
                or not (chip.default if stream is None else stream).run_now(name, cost[0], compute, run, name, out,
                                                                           inputs, attrs, cost[2], views)):
            rt.launch(ctx.index, stream, name, run, out, inputs, attrs, op, cost)  # heavy, or the device is busy
        return out

    def unary(ctx, x, **attrs):  # kernel() for the common case of one tensor input, one call shallower
        try:
            p = plans.get((x.shape, x.dtype, *attrs.items()) if attrs else (x.shape, x.dtype))
        except TypeError:  # an unhashable attribute
            return kernel(ctx, x, **attrs)
        if p is None:
            return kernel(ctx, x, **attrs)
        shape, dtype, cost, run = p
        stream = ctx.stream
        out = ctx.empty(shape, dtype)
        rt = ctx.runtime
        chip = rt.chips[ctx.index]
        if (cost[1] or chip.faults
                or not (chip.default if stream is None else stream).run_now(name, cost[0], compute, run, name, out,
                                                                           (x,), attrs, cost[2], views)):
            rt.launch(ctx.index, stream, name, run, out, (x,), attrs, op, cost)
        return out

    kernel.__name__ = unary.__name__ = f"sim_{name}"
    return unary if len(op.inputs) == 1 and not op.variadic else kernel


def _result_plan(rt, op, fn, into, inputs, attrs, views, tables: bool):
    """(shape, dtype, (modelled seconds, heavy, view tables or None), kernel) of a
    :func:`_returning` kernel's result."""
    shapes = [[a.shape for a in x] if type(x) is list else x.shape for x in inputs]
    dtypes = [a.dtype for x in inputs for a in (x if type(x) is list else (x,))]
    shape = tuple(op.shape_rule(shapes, attrs))
    dtype = op.dtype_rule(dtypes, attrs)[1]
    out = _new_array(DeviceArray)
    out.shape, out.dtype, out.offset = shape, dtype, 0
    seconds, heavy, _ = kernel_cost(rt, op.name, op, out, inputs, attrs)
    t = views.tables_for((shape, dtype), *[(x.shape, x.dtype) for x in inputs]) if tables else None
    return (shape, dtype, (seconds, heavy, None if t is None else (t[0], t[1:])),
            _into(op.name, fn, into, dtype, dtypes, attrs))


def _plan_key(inputs, attrs):
    """What a returning kernel's plan depends on (lists of inputs included); as :func:`_cost_key`."""
    if len(inputs) == 1:
        x = inputs[0]
        if type(x) is list:
            return (tuple([(a.shape, a.dtype) for a in x]), *attrs.items()) if attrs else (tuple([(a.shape, a.dtype) for a in x]),)
        return (x.shape, x.dtype, *attrs.items()) if attrs else (x.shape, x.dtype)
    key = []
    for x in inputs:
        if type(x) is list:
            key.append(tuple([(a.shape, a.dtype) for a in x]))
        else:
            key += (x.shape, x.dtype)
    if attrs:
        key += attrs.items()
    return tuple(key)


def _cost_key(out, inputs, attrs):
    """What a queued kernel's cost depends on; None when that is not worth building (list
    operands). An attribute that is not hashable makes it unusable as a key."""
    if type(out) is tuple:  # a multi-output op (an optimizer update)
        key = [tuple([(o.shape, o.dtype) for o in out])]
    elif len(inputs) == 1:  # the common case, without a loop
        x = inputs[0]
        if type(x) is list:
            return None
        return (out.shape, out.dtype, x.shape, x.dtype, *attrs.items()) if attrs else (out.shape, out.dtype, x.shape, x.dtype)
    else:
        key = [out.shape, out.dtype]
    for x in inputs:
        if type(x) is list:
            return None
        key += (x.shape, x.dtype)
    if attrs:
        key += attrs.items()
    return tuple(key)


class Plan:
    """What a binary element-wise kernel needs that depends only on its operands' shapes and
    dtypes: the result's shape and dtype, the modelled seconds, whether the kernel is
    heavy (moves :data:`~anydevice_sim_npu.streams.HEAVY_BYTES` or more), and the view tables
    (:class:`~anydevice_sim_npu.runtime.ViewCache`) of the operands and the result."""

    __slots__ = ("a_shape", "b_shape", "a_dtype", "b_dtype", "shape", "dtype", "seconds", "heavy", "ta", "tb", "to")

    def __init__(self, runtime, name, rule, a, b, views):
        self.a_shape, self.b_shape, self.a_dtype, self.b_dtype = a.shape, b.shape, a.dtype, b.dtype
        shape = a.shape if a.shape == b.shape else broadcast_shapes(a.shape, b.shape, opname=name)
        dtype = rule([a.dtype, b.dtype], {})[1]
        size = 1
        for n in shape:
            size *= n
        moved = a.nbytes + b.nbytes + size * dtype.itemsize
        self.shape, self.dtype = shape, dtype
        self.seconds, self.heavy = runtime.device_time(name, moved, size), moved >= HEAVY_BYTES
        self.ta, self.tb, self.to = views.tables_for((a.shape, a.dtype), (b.shape, b.dtype), (shape, dtype))


def _binary(op, ufunc, views):
    """Returning kernel for a binary element-wise op (broadcasts, picks the result dtype).

    Its :class:`Plan` per combination of operand shapes and dtypes is kept in ``plans``, and
    the last one per shape of ``a`` in ``last`` (one lookup on the hot path); ``views`` empties
    both whenever it drops its tables. The result comes from ``ctx.empty``.
    """
    name, rule, plans, last = op.name, op.dtype_rule, {}, {}
    views.plans += (plans, last)

    def find(ctx, a, b):
        key = (a.shape, b.shape, a.dtype, b.dtype)
        p = plans.get(key)
        if p is None:
            if len(plans) >= 4096:
                plans.clear()
                last.clear()
            p = plans[key] = Plan(ctx.runtime, name, rule, a, b, views)
        last[a.shape] = p
        return p

    def kernel(ctx, a, b):
        p = last.get(a.shape)
        if p is None or p.b_shape != b.shape or p.a_dtype is not a.dtype or p.b_dtype is not b.dtype:
            p = find(ctx, a, b)
        out = ctx.empty(p.shape, p.dtype)
        rt, stream = ctx.runtime, ctx.stream
        chip = rt.chips[ctx.index]
        if chip.faults:
            rt.launch_ufunc(ctx.index, stream, name, ufunc, out, a, b, p)
        else:
            (chip.default if stream is None else stream).elementwise(name, ufunc, out, a, b, p)
        return out

    kernel.__name__ = f"sim_{name}"
    return kernel


def _reshape(ctx, x, shape, copy=None):
    return x.view(shape)
