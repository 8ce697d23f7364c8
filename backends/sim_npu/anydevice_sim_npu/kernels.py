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
from anydevice_cpu.kernels_optim import returning_kernels

from .runtime import compute, kernel_cost
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
COMMON = ("linear", "relu", "softmax", "log_softmax", "cross_entropy", "cross_entropy_grad", "mean", "var",
          "matrix_transpose", "expand_dims", "squeeze", "logical_not")
#: The binary ones among them, on the ufunc path of :data:`UFUNCS`.
COMMON_UFUNCS = {
    "greater": np.greater, "greater_equal": np.greater_equal, "less_equal": np.less_equal,
    "not_equal": np.not_equal, "logical_and": np.logical_and, "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
}


def register(kernels: KernelTable, views, missing=()) -> None:
    """Fill ``kernels`` (of one runtime, whose :class:`~anydevice_sim_npu.runtime.ViewCache` is ``views``)."""
    cpu = KernelTable("cpu")
    from anydevice_cpu.kernels import register as cpu_register

    cpu_register(cpu)
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
            kernels.register(name, _returning(op, cpu.lookup(name, None).fn, views))
        else:
            kernels.register(name, _queued(op, cpu.lookup(name, None).fn, views), out=True)
    for name, fn in returning_kernels().items():  # optimizer updates: one kernel instead of ~30 decomposed ops
        kernels.register(name, _queued(get_op(name), fn, views), out=True)


def _queued(op, fn, views):
    """``out=True`` kernel: ``out[...] = fn(views of inputs)`` on the current stream, at once when
    it is light and the device idle (:meth:`~anydevice_sim_npu.streams.SimStream.run_now`), else queued.

    The kernel's cost (modelled seconds, heavy) depends only on the shapes and dtypes of its
    buffers and on its attributes: it is kept in ``costs``, with the view tables of the output
    and the inputs (emptied with ``views``).
    """
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


def _returning(op, fn, views):
    """Returning kernel of a registry op with tensor inputs and one result: the result is allocated
    here, from the allocator that holds the first input (the one ``ctx.empty`` would use), and
    computed as :func:`_queued`'s kernels compute theirs, at once or queued.

    What depends only on the inputs' shapes and dtypes and on the attributes is kept in ``plans``:
    the result's shape, dtype and bytes (the op's shape and dtype rules, which the dispatcher
    applied too), the modelled seconds, whether it is heavy, and the view tables of the result and
    the inputs (emptied with ``views``).
    """
    name, plans = op.name, {}
    views.plans.append(plans)

    def kernel(ctx, *inputs, **attrs):
        key = _plan_key(inputs, attrs)
        try:
            p = plans.get(key) if key is not None else None
        except TypeError:  # an unhashable attribute
            p = key = None
        first = inputs[0]
        if type(first) is list:
            first = first[0]
        if p is None:
            p = _result_plan(ctx.runtime, op, inputs, attrs, views, key is not None and all(
                type(x) is not list for x in inputs))
            if key is not None:
                if len(plans) >= 4096:
                    plans.clear()
                plans[key] = p
        shape, dtype, nbytes, cost = p
        out = _new_array(DeviceArray)
        out.block, out.shape, out.dtype, out.offset = first.block.owner.allocate(nbytes, ctx.stream), shape, dtype, 0
        rt, stream = ctx.runtime, ctx.stream
        chip = rt.chips[ctx.index]
        if (cost[1] or chip.faults
                or not (chip.default if stream is None else stream).run_now(name, cost[0], compute, fn, name, out,
                                                                           inputs, attrs, cost[2], views)):
            rt.launch(ctx.index, stream, name, fn, out, inputs, attrs, op, cost)  # heavy, or the device is busy
        return out

    kernel.__name__ = f"sim_{name}"
    return kernel


def _result_plan(rt, op, inputs, attrs, views, tables: bool):
    """(shape, dtype, bytes to allocate, (modelled seconds, heavy, view tables or None)) of a
    :func:`_returning` kernel's result."""
    shapes = [[a.shape for a in x] if type(x) is list else x.shape for x in inputs]
    dtypes = [a.dtype for x in inputs for a in (x if type(x) is list else (x,))]
    shape = tuple(op.shape_rule(shapes, attrs))
    dtype = op.dtype_rule(dtypes, attrs)[1]
    size = dtype.itemsize
    for n in shape:
        size *= n
    out = _new_array(DeviceArray)
    out.shape, out.dtype, out.offset = shape, dtype, 0
    seconds, heavy, _ = kernel_cost(rt, op.name, op, out, inputs, attrs)
    t = views.tables_for((shape, dtype), *[(x.shape, x.dtype) for x in inputs]) if tables else None
    return shape, dtype, size or 1, (seconds, heavy, None if t is None else (t[0], t[1:]))


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
    dtypes: the result's shape, dtype and bytes, the modelled seconds, whether the kernel is
    heavy (moves :data:`~anydevice_sim_npu.streams.HEAVY_BYTES` or more), and the view tables
    (:class:`~anydevice_sim_npu.runtime.ViewCache`) of the operands and the result."""

    __slots__ = ("a_shape", "b_shape", "a_dtype", "b_dtype", "shape", "dtype", "nbytes", "seconds", "heavy",
                 "ta", "tb", "to")

    def __init__(self, runtime, name, rule, a, b, views):
        self.a_shape, self.b_shape, self.a_dtype, self.b_dtype = a.shape, b.shape, a.dtype, b.dtype
        shape = a.shape if a.shape == b.shape else broadcast_shapes(a.shape, b.shape, opname=name)
        dtype = rule([a.dtype, b.dtype], {})[1]
        size = 1
        for n in shape:
            size *= n
        moved = a.nbytes + b.nbytes + size * dtype.itemsize
        self.shape, self.dtype, self.nbytes = shape, dtype, size * dtype.itemsize or 1
        self.seconds, self.heavy = runtime.device_time(name, moved, size), moved >= HEAVY_BYTES
        self.ta, self.tb, self.to = views.tables_for((a.shape, a.dtype), (b.shape, b.dtype), (shape, dtype))


def _binary(op, ufunc, views):
    """Returning kernel for a binary element-wise op (broadcasts, picks the result dtype).

    Its :class:`Plan` per combination of operand shapes and dtypes is kept in ``plans``, and
    the last one per shape of ``a`` in ``last`` (one lookup on the hot path); ``views`` empties
    both whenever it drops its tables. The result comes from the allocator that holds ``a``
    (the one ``ctx.empty`` would use).
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
        out = _new_array(DeviceArray)
        out.block, out.shape, out.dtype, out.offset = a.block.owner.allocate(p.nbytes, ctx.stream), p.shape, p.dtype, 0
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
