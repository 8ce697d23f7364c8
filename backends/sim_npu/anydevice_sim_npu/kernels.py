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
from anydevice.runtime import KernelTable
from anydevice_cpu.kernels import power

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


def register(kernels: KernelTable, missing=()) -> None:
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
            kernels.register(name, _binary(op, UFUNCS[name]))
        else:
            kernels.register(name, _queued(op, cpu.lookup(name, None).fn), out=True)


def _queued(op, fn):
    """``out=True`` kernel: queue ``out[...] = fn(views of inputs)`` on the current stream."""
    name = op.name

    def kernel(ctx, out, *inputs, **attrs):
        ctx.runtime.launch(ctx.index, ctx.stream, name, fn, out, inputs, attrs, op)

    kernel.__name__ = f"sim_{name}"
    return kernel


def _binary(op, ufunc):
    """Returning kernel for a binary element-wise op (broadcasts, picks the result dtype).

    What depends only on the operands' dtypes and shapes -- result shape and dtype, and the
    modelled device time -- is worked out once per combination and kept in ``plans`` (one
    table per runtime, since each backend registers its own kernels).
    """
    name, rule, plans = op.name, op.dtype_rule, {}

    def kernel(ctx, a, b):
        key = (a.dtype, b.dtype, a.shape, b.shape)
        plan = plans.get(key)
        if plan is None:
            plan = plans[key] = _plan(ctx, name, rule, a, b)
            if len(plans) > 4096:
                plans.clear()
        out = ctx.empty(plan[0], plan[1])
        ctx.runtime.launch_ufunc(ctx.index, ctx.stream, name, ufunc, out, a, b, plan[2])
        return out

    kernel.__name__ = f"sim_{name}"
    return kernel


def _plan(ctx, name, rule, a, b):
    """(result shape, result dtype, modelled seconds) of a binary element-wise kernel."""
    shape = a.shape if a.shape == b.shape else broadcast_shapes(a.shape, b.shape, opname=name)
    dtype = rule([a.dtype, b.dtype], {})[1]
    size = 1
    for n in shape:
        size *= n
    nbytes = a.nbytes + b.nbytes + size * dtype.itemsize
    return shape, dtype, ctx.runtime.device_time(name, nbytes, size)


def _reshape(ctx, x, shape, copy=None):
    return x.view(shape)
