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


def register(kernels: KernelTable, views, missing=()) -> None:
    """Fill ``kernels`` (of one runtime, whose :class:`~anydevice_sim_npu.runtime.ViewCache` is ``views``)."""
    cpu = KernelTable("cpu")
    from anydevice_cpu.kernels import register as cpu_register

    cpu_register(cpu)
    names = [o.name for o in primitives()] + list(EXTRA) + [n for n in UFUNCS if n not in EXTRA]
    for name in dict.fromkeys(names):
        if name in missing:
            continue
        op = get_op(name)
        if name == "reshape":
            kernels.register(name, _reshape)
        elif name in UFUNCS:
            kernels.register(name, _binary(op, UFUNCS[name], views))
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
                t = views.tables_for((out.shape, out.dtype), *[(x.shape, x.dtype) for x in inputs])
                cost = costs[key] = (*cost[:2], (t[0], t[1:]))
        chip, stream = rt.chips[ctx.index], ctx.stream
        if (cost[1] or chip.faults
                or not (chip.default if stream is None else stream).run_now(name, cost[0], compute, fn, name, out,
                                                                           inputs, attrs, cost[2], views)):
            rt.launch(ctx.index, stream, name, fn, out, inputs, attrs, op, cost)  # heavy, or the device is busy

    kernel.__name__ = f"sim_{name}"
    return kernel


def _cost_key(out, inputs, attrs):
    """What a queued kernel's cost depends on; None when that is not worth building (list or
    multi-output operands). An attribute that is not hashable makes it unusable as a key."""
    if type(out) is tuple:
        return None
    if len(inputs) == 1:  # the common case, without a loop
        x = inputs[0]
        if type(x) is list:
            return None
        return (out.shape, out.dtype, x.shape, x.dtype, *attrs.items()) if attrs else (out.shape, out.dtype, x.shape, x.dtype)
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
