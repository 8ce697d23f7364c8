"""The dispatcher: native kernel, else decomposition, else a visible CPU fallback.

For each (op, device, compute dtype) the first call chooses a *path* and caches it:

1. ``native``: the device's kernel table has a kernel for the op and dtype;
2. ``decomposed``: the op is composite and its decomposition runs on the device using only
   native kernels (tried once; if any op inside it would need the CPU the whole op falls
   back instead, so one call never bounces between host and device op by op);
3. ``fallback``: inputs are copied to the cpu, the op runs there, the result is copied back.
   Every fallback is counted per (op, device) — :func:`fallback_counts` — and, depending on
   ``ANYDEVICE_FALLBACK`` (``warn`` by default, ``silent`` or ``error``), warns once per op
   or raises :class:`~anydevice.errors.FallbackError`.
"""
from __future__ import annotations

import collections
import functools
import keyword
import math
import os
import threading
import time
import warnings

import numpy as np

from anydevice.base import dtypes as _dt
from anydevice.base.errors import FallbackError, OutOfMemoryError, PluginError
from anydevice.engine import autocast as _autocast
from anydevice.engine import graph as _ag
from anydevice.engine.tensor import Tensor, _detached, _new, _wrap
from anydevice.ops import load_all
from anydevice.ops.registry import KEY_TYPES, MAX_SIZE, REQUIRED, all_ops, check_category, fit_scalar, get_op, scalar_value
from anydevice.runtime.allocator import fmt_bytes
from anydevice.runtime.contract import DeviceArray
from anydevice.runtime.devices import Device, as_device

KEY_TYPES.add(Device)  # devices are interned: a validation cache may hold them

NATIVE, DECOMPOSED, FALLBACK = "native", "decomposed", "fallback"
_MODES = ("warn", "silent", "error")


class FallbackWarning(UserWarning):
    """An op ran on the CPU because the device has no kernel and no usable decomposition."""


class _NeedsFallback(Exception):
    pass


_tls = threading.local()
_counts: collections.Counter = collections.Counter()
_warned: set = set()
_counts_lock = threading.Lock()  # guards _counts and _warned: fallbacks may run on many threads
_observers: list = []
#: ``fn(op, inputs, attrs, result, compute)`` after every top-level op while anydevice.jit traces
_tracer = None
_mode = [os.environ.get("ANYDEVICE_FALLBACK", "warn").strip().lower() or "warn"]
if _mode[0] not in _MODES:
    raise ValueError(f"ANYDEVICE_FALLBACK={_mode[0]!r} is not one of {', '.join(_MODES)}")


def set_fallback_mode(mode: str) -> str:
    """Set what happens on a CPU fallback: ``warn`` (once per op), ``silent`` or ``error``. Returns the old mode."""
    if mode not in _MODES:
        raise ValueError(f"fallback mode {mode!r} is not one of {', '.join(_MODES)}")
    old, _mode[0] = _mode[0], mode
    return old


def get_fallback_mode() -> str:
    return _mode[0]


def fallback_counts() -> dict:
    """``{(op, device_string): count}`` of CPU fallbacks in this process."""
    with _counts_lock:
        return dict(_counts)


def reset_fallback_counts() -> None:
    with _counts_lock:
        _counts.clear()
        _warned.clear()


_syncs: collections.Counter = collections.Counter()


def sync_counts() -> dict:
    """``{(op, device_string): count}`` of data-dependent size read-backs (one per call of an op
    with ``data_shape`` whose sizes were not given)."""
    with _counts_lock:
        return dict(_syncs)


def reset_sync_counts() -> None:
    with _counts_lock:
        _syncs.clear()


def _data_shape(op, inputs, attrs, device, in_dtypes) -> dict:
    """Fill the attributes whose sizes depend on the data: ``op.data_shape`` computes them on the
    device (0-d integer tensors), and they are read back in ONE synchronization (counted by
    :func:`sync_counts`); the shape rule and the kernels then see static sizes. Python scalar
    inputs reach the rule as 0-d tensors of the dtype they adopt."""
    if any(not isinstance(x, (Tensor, list)) for x in inputs):
        inputs = [x if isinstance(x, (Tensor, list)) else _scalar_tensor(x, d, device) for x, d in zip(inputs, in_dtypes)]
    with _ag.no_grad():
        need = op.data_shape(xp, inputs, attrs)
        if not need:
            return attrs
        names = list(need)
        vals = [xp.astype(xp.reshape(need[k], ()), _dt.int64) for k in names]
        host = (vals[0] if len(vals) == 1 else xp.stack(vals)).numpy().reshape(-1)  # the read-back
    with _counts_lock:
        _syncs[(op.name, str(device))] += 1
    return {**attrs, **{k: int(v) for k, v in zip(names, host)}}


def add_observer(fn) -> None:
    """Call ``fn(op, device, path, seconds, inputs, out)`` after every top-level op (profiler, tracing)."""
    _observers.append(fn)


def remove_observer(fn) -> None:
    _observers.remove(fn)


def _user_stacklevel() -> int:
    """Stack level of the first frame outside the anydevice package (where the user called)."""
    import sys

    pkg = os.path.dirname(os.path.dirname(__file__))  # the anydevice package
    f, level = sys._getframe(1), 1
    while f is not None and f.f_code.co_filename.startswith(pkg):
        f, level = f.f_back, level + 1
    return level


def _depth() -> int:
    return getattr(_tls, "depth", 0)


# --- argument binding ----------------------------------------------------------------------
_binders: dict = {}


def _binder(op):
    """What binding needs of an op's signature: input names, attribute names, how many attributes
    are positional-only / positional, the required ones (cached per op)."""
    b = _binders.get(op.name)
    if b is None:
        posonly, npos = op.positions
        required = tuple(k for k, v in op.attrs.items() if v is REQUIRED)
        b = _binders[op.name] = (tuple(n.lstrip("*") for n in op.inputs), tuple(op.attrs), posonly, npos, required)
    return b


def _bind_error(op, what: str) -> TypeError:
    sig = op.signature.replace(parameters=[p.replace(annotation=p.empty) for p in op.signature.parameters.values()])
    return TypeError(f"{op.name}(): {what}; the signature is {op.name}{sig}")


def _bind(op, args, kwargs):
    """Inputs and attributes from a call, as Python binds ``op.signature``: inputs and the first
    ``posonly`` attributes by position only, keyword-only attributes by keyword only."""
    in_names, names, posonly, npos, required = _binder(op)
    n_in = len(in_names)
    if len(args) < n_in:
        missing = in_names[len(args):]
        given = [n for n in missing if n in kwargs]
        if given:
            raise _bind_error(op, f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} positional-only: pass "
                                  f"{'it' if len(given) == 1 else 'them'} by position, not as a keyword")
        raise _bind_error(op, f"missing required input(s): {', '.join(missing)}")
    inputs, rest = args[:n_in], args[n_in:]
    if len(rest) > npos:
        kw = f" ({', '.join(names[npos:])} keyword-only)" if npos < len(names) else ""
        raise _bind_error(op, f"takes {n_in + npos} positional argument(s){kw} but {len(args)} were given")
    attrs = dict(op.attrs)
    for k, v in zip(names, rest):
        attrs[k] = v
    for k, v in kwargs.items():
        if k not in attrs:
            if k in in_names:
                raise _bind_error(op, f"{k} is positional-only: pass it by position, not as a keyword")
            raise _bind_error(op, f"got an unexpected argument {k!r}")
        j = names.index(k)
        if j < posonly:
            raise _bind_error(op, f"{k} is positional-only: pass it by position, not as a keyword")
        if j < len(rest):
            raise _bind_error(op, f"got multiple values for argument {k!r}")
        attrs[k] = v
    for k in required:
        if attrs[k] is REQUIRED:
            raise _bind_error(op, f"missing required argument {k!r}")
    return inputs, attrs


def _as_tensors(op, inputs):
    """Tensors stay; Python scalars are left for the dtype rule; anything else is an error."""
    out = []
    for name, x in zip(op.inputs, inputs):
        if name.startswith("*"):
            if isinstance(x, Tensor) or not isinstance(x, (list, tuple)):
                raise TypeError(f"{op.name}() expects a list or tuple of tensors for {name[1:]!r}")
            if not x:
                raise ValueError(f"{op.name}() needs at least one tensor in {name[1:]!r}")
            for t in x:
                if not isinstance(t, Tensor):
                    raise TypeError(f"{op.name}() expects tensors in {name[1:]!r}, got {type(t).__name__}")
            out.append(list(x))
        elif isinstance(x, Tensor) or type(x) in (bool, int, float, complex):
            out.append(x)
        else:
            raise TypeError(
                f"{op.name}() expects a Tensor for {name!r}, got {type(x).__name__}; convert it with anydevice.asarray()"
            )
    return out


def _flat(inputs):
    for x in inputs:
        if isinstance(x, list):
            yield from x
        else:
            yield x


# --- the call path -----------------------------------------------------------------------
def call(op, args, kwargs):
    """Run ``op`` on ``args``/``kwargs`` (the public function of every op).

    A call whose inputs are tensors and whose attributes are plain values looks up everything
    validation worked out for the same (devices, dtypes, shapes, attribute values and types) in
    the op's call cache and goes straight to the kernel; any other call, and the first of each
    kind, takes the full path, which fills the cache when it succeeds (errors are never cached)."""
    if op.fast and not kwargs and not _observers:
        r = _try_fast(op, args)
        if r is not None:
            return r
    if not _observers and _tracer is None and not _autocast.regions[0]:
        key = _call_key(args, kwargs)
        if key is not None:
            e = op.plans.get(_CALLS, _EMPTY).get(key)
            if e is not None:
                return e.run(args, key)
            inputs, attrs = _bind(op, args, kwargs)
            return apply(op, _as_tensors(op, inputs), attrs, key)
    inputs, attrs = _bind(op, args, kwargs)
    return apply(op, _as_tensors(op, inputs), attrs)


def call_keyed(op, args: tuple, kwargs: dict, key):
    """:func:`call` with the cache key worked out by the caller (a hashable of descriptors that
    determines every argument's type and value, as :func:`_call_key`'s does; None: uncached)."""
    if key is not None and not _observers and _tracer is None and not _autocast.regions[0]:
        e = op.plans.get(_CALLS, _EMPTY).get(key)
        if e is not None:
            return e.run(args, key)
        inputs, attrs = _bind(op, args, kwargs)
        return apply(op, _as_tensors(op, inputs), attrs, key)
    return call(op, args, kwargs)


def call_inputs(op, args: tuple):
    """Run ``op``, an op without attributes, on ``args`` (tensors or Python scalars): what the
    Tensor operators call once their own fast path declined; cached as :func:`call` is."""
    if not _observers and _tracer is None and not _autocast.regions[0]:
        key = _call_key(args, None)
        if key is not None:
            e = op.plans.get(_CALLS, _EMPTY).get(key)
            if e is not None:
                return e.run(args, key)
            return apply(op, list(args), {}, key)
    return apply(op, list(args), {})


# --- the call cache ------------------------------------------------------------------------------
# ``op.plans[_CALLS]`` maps a call's key to an _Entry; it lives in ``op.plans`` so that whatever
# re-plans an op (``op.plans.clear()``) forgets its calls too. A key holds descriptors only:
# each tensor's KernelContext (one per device), dtype and shape, and every other argument with
# its type (True, 1 and 1.0 are equal in Python, not to validation), never a tensor or a buffer.
_CALLS = None
_EMPTY: dict = {}
_CALLS_MAX = 4096
_KEYABLE = frozenset({type(None), bool, int, str, type(Ellipsis), _dt.DType, Device})
_SEQ_PLAIN = frozenset({type(None), bool, int, str, type(Ellipsis), _dt.DType})
_INTS = frozenset({int})  # also the tag of op functions' keys for (x, tuple of ints): no loop key holds it

# The hit in C (engine/_hit.c), where it was built and ANYDEVICE_NATIVE_DISPATCH is not 0: the
# same keys, the same runners, written out in C; without it the Python forms below run.
_chit = None
_C_MAX = 8  # the most inputs and kernel keywords its runners take
if os.environ.get("ANYDEVICE_NATIVE_DISPATCH", "1") != "0":
    try:
        from anydevice.engine import _hit as _chit
    except ImportError:  # built without a C compiler
        _chit = None
    else:
        _chit.configure(Tensor, Device, globals(), _autocast.regions, _INTS, _KEYABLE, _SEQ_PLAIN, _ag.is_grad_enabled)
_MISS = _chit.MISS if _chit is not None else object()


def _run_keyed(op, args: tuple, key):
    """The cached call of ``op`` under ``key`` (made by the caller as :func:`_call_key` makes
    keys) run on ``args``, or _MISS: not cached, or the call must take the full path."""
    if not _observers and _tracer is None and not _autocast.regions[0]:
        e = op.plans.get(_CALLS, _EMPTY).get(key)
        if e is not None:
            return e.run(args, key)
    return _MISS


run_keyed = _chit.run_keyed if _chit is not None else _run_keyed


def _call_key(args, kwargs):
    """The cache key of a call, or None when an argument is not a plain value or a tensor."""
    if not kwargs:  # the commonest calls, made quickly: the keys the loops below make
        n = len(args)
        a = args[0] if n else None
        if type(a) is Tensor:
            if n == 1:
                return (a.device._ctx, a.dtype, a.shape)
            b = args[1]
            tb = type(b)
            if n == 2:
                if tb is Tensor:
                    return (a.device._ctx, a.dtype, a.shape, b.device._ctx, b.dtype, b.shape)
                if tb is tuple and _SEQ_PLAIN.issuperset(ts := tuple(map(type, b))):
                    return (a.device._ctx, a.dtype, a.shape, tb, b, ts)
            elif n == 3 and tb is Tensor and type(c := args[2]) is Tensor:
                return (a.device._ctx, a.dtype, a.shape, b.device._ctx, b.dtype, b.shape, c.device._ctx, c.dtype,
                        c.shape)
        elif n == 1 and type(a) is list and a:  # a list input (concat, stack)
            if len(a) == 2 and type(p := a[0]) is Tensor and type(q := a[1]) is Tensor:
                return (list, 2, p.device._ctx, p.dtype, p.shape, q.device._ctx, q.dtype, q.shape)
            k = [list, len(a)]
            for x in a:
                if type(x) is not Tensor:
                    break
                k += (x.device._ctx, x.dtype, x.shape)
            else:
                return tuple(k)
    k = []
    for a in args:
        t = type(a)
        if t is Tensor:
            k += (a.device._ctx, a.dtype, a.shape)
        elif t in _KEYABLE:
            k += (t, a)
        elif t is tuple and _SEQ_PLAIN.issuperset(ts := tuple(map(type, a))):  # axes, a shape: as _key_part
            k += (t, a, ts)
        elif not _key_part(k, t, a):
            return None
    if kwargs:
        for name, a in kwargs.items():
            k.append(name)
            t = type(a)
            if t in _KEYABLE:
                k += (t, a)
            elif t is Tensor or not _key_part(k, t, a):
                return None
    return tuple(k)


def _key_part(k, t, a) -> bool:
    """Append the key of a sequence (tensors of a list input, or a tuple/list attribute) or of a
    float; False when ``a`` cannot be part of a key."""
    if t is float:
        k += (t, a, math.copysign(1.0, a))  # 0.0 == -0.0, but they are different fill values
        return True
    if t is not tuple and t is not list:
        return False
    if a and type(a[0]) is Tensor:  # a list input: its tensors
        k += (t, len(a))
        for x in a:
            if type(x) is not Tensor:
                return False
            k += (x.device._ctx, x.dtype, x.shape)
        return True
    tag = _seq_tag(a)
    if tag is None:
        return False
    k += (t, tuple(a), tag)
    return True


def _seq_tag(a):
    """The element types of a sequence attribute (nested sequences tagged in turn), or None."""
    ts = tuple(map(type, a))
    if _SEQ_PLAIN.issuperset(ts):
        return ts
    out = []
    for e, t in zip(a, ts):
        if t is tuple or t is list:
            sub = _seq_tag(e)
            if sub is None:
                return None
            out.append((t, sub))
        elif t is float:
            out.append((t, math.copysign(1.0, e)))
        elif t in _KEYABLE:
            out.append(t)
        else:
            return None
    return tuple(out)


class _Entry:
    """What the full path worked out for one kind of call: the inputs' device, the validated
    and canonical attributes, compute and result dtypes, casts, result shape; ``fn`` is the
    kernel when the plan is native (and then ``kw`` the kernel's keywords)."""

    __slots__ = ("device", "attrs", "compute", "casts", "out_shape", "out_dtype", "fn", "out", "kw", "n", "direct",
                 "record", "run")

    def __init__(self, op, device, attrs, compute, casts, out_shape, out_dtype, n):
        self.device, self.attrs, self.compute, self.casts = device, attrs, compute, casts
        self.out_shape, self.out_dtype, self.n = out_shape, out_dtype, n
        plan = op.plans.get((device._ctx, compute[0] if type(compute) is tuple else compute))
        native = plan is not None and plan[0] == NATIVE
        self.fn = plan[1].fn if native else None
        self.out = native and plan[1].out
        self.kw = {k: v for k, v in attrs.items() if k != "device"}
        # the kernel can be called at once: native, one output, no casts, no value check; and
        # also when the graph is recorded, unless the op differentiates through its decomposition
        self.direct = native and casts is None and op.check is None and op.outputs is None
        self.record = self.direct and op.differentiable and (op.vjp is not None or op.decomposition is None)
        self.run = _runner(op, self)  # run(args, key): the hit


def _runner(op, e):
    """The hit of entry ``e`` as one closure: for a direct returning kernel, the kernel called at
    once with the entry's attributes as constants and the result wrapped (:func:`_hit` when the
    graph must be recorded); else :func:`_hit`. The C module's Runner where it is built."""
    slow = functools.partial(_hit, op, e)
    if not e.direct or e.out:
        return slow
    n = -1 if op.variadic else e.n
    grad_on = _ag.is_grad_enabled if op.differentiable else bool  # bool(): False
    oom = functools.partial(_kernel_oom, op, e)
    if _chit is not None and n <= _C_MAX and len(e.kw) <= _C_MAX and all(type(k) is str for k in e.kw):
        return _chit.Runner(slow, e.fn, e.device._ctx, e.device, e.out_shape, e.out_dtype, grad_on, oom,
                            tuple(e.kw), tuple(e.kw.values()), n)
    names = tuple(e.kw) if all(k.isidentifier() and not keyword.iskeyword(k) for k in e.kw) else None
    make = _RUNNERS.get((n, names))
    if make is None:
        make = _RUNNERS[(n, names)] = _runner_factory(n, names)
    return make(slow, e.fn, e.device._ctx, e.device, e.out_shape, e.out_dtype, grad_on, oom, _new, Tensor, e.kw,
                *(e.kw.values() if names else ()))


_RUNNERS: dict = {}  # (inputs, or -1 for one list input; the kernel's keywords, None: as **kw) -> factory


def _runner_factory(n: int, names):
    """A function making run closures for kernels of ``n`` inputs and keywords ``names``: the
    kernel call is written out (``fn(ctx, x0, axis=v0, keepdims=v1)``), since unpacking a
    keyword dict costs about as much as the rest of the hit."""
    kws = ", **kw" if names is None else "".join(f", {k}=v{i}" for i, k in enumerate(names))
    if n < 0:
        take = ["bufs = []", "for t in args[0]:", "    if t._node is not None and grad_on():",
                "        return slow(args, key)", "    bufs.append(t._buf)"]
        bufs = ", bufs"
    else:
        xs = [f"x{i}" for i in range(n)]
        take = [f"{x} = args[{i}]" for i, x in enumerate(xs)]
        if xs:
            take += [f"if ({' or '.join(f'{x}._node is not None' for x in xs)}) and grad_on():",
                     "    return slow(args, key)"]
        bufs = "".join(f", {x}._buf" for x in xs)
    params = "".join(f", v{i}" for i in range(len(names or ())))
    src = "\n".join([
        f"def make(slow, fn, ctx, device, shape, dtype, grad_on, oom, _new, Tensor, kw{params}):",
        "    def run(args, key):",
        *(f"        {line}" for line in take),
        "        try:",
        f"            out = fn(ctx{bufs}{kws})",
        "        except MemoryError as err:",
        "            raise oom(err)  # noqa: B904",
        "        t = _new(Tensor)",
        "        t._buf, t.shape, t.dtype, t.device, t._node = out, shape, dtype, device, None",
        "        return t",
        "    return run",
    ])
    ns: dict = {}
    exec(compile(src, f"<anydevice hit path: {n} inputs{kws}>", "exec"), ns)
    return ns["make"]


def _kernel_oom(op, e, err):
    """The error for a kernel's MemoryError: itself when it is anydevice's, else an OutOfMemoryError."""
    if isinstance(err, OutOfMemoryError):
        return err
    oom = _out_of_memory(op, e.device, e.out_shape, e.out_dtype, err)
    oom.__cause__ = err  # as ``raise ... from err``
    return oom


def _store(op, key, entry) -> None:
    calls = op.plans.get(_CALLS)
    if calls is None or len(calls) >= _CALLS_MAX:
        calls = op.plans[_CALLS] = {}  # a new dict: threads reading the old one keep a valid view
    calls[key] = entry


def _hit(op, e, args, key):
    """Run a call whose validation the cache holds: the kernel at once when it can be, else the
    full path's tail (casts, value checks, decomposition or fallback, the graph)."""
    n = e.n
    if e.direct:
        if op.variadic:  # one list input
            ts = args[0]
            bufs, grad = ([t._buf for t in ts],), any(t._node is not None for t in ts)
        elif n == 1:
            x = args[0]
            bufs, grad = (x._buf,), x._node is not None
        elif n == 2:
            x, y = args[0], args[1]
            bufs, grad = (x._buf, y._buf), x._node is not None or y._node is not None
        else:
            bufs = [t._buf for t in args[:n]]
            grad = any(t._node is not None for t in args[:n])
        if not grad or not op.differentiable or not _ag.is_grad_enabled():
            return _run_direct(op, e, bufs)
        if e.record:  # a native kernel (it dispatches nothing, so no no_grad() is needed) and its node
            result = _run_direct(op, e, bufs)
            _record(op, [list(args[0])] if op.variadic else args[:n], e.kw, result)
            return result
    if op.variadic:
        inputs = [list(args[0])]
        tensors = inputs[0]
    else:  # Python scalars among the inputs (then casts are set) become tensors in _finish
        inputs = list(args[:n])
        tensors = inputs if e.casts is None else [t for t in inputs if type(t) is Tensor]
    return _finish(op, inputs, tensors, e.attrs, e.device, e.compute, e.casts, e.out_shape, e.out_dtype,
                   None if e.fn is not None else (key, e))


def _out_of_memory(op, device, out_shape, out_dtype, e) -> OutOfMemoryError:
    what = ", ".join(d.name for d in out_dtype) if type(out_dtype) is tuple else (out_dtype.name if out_dtype else "?")
    return OutOfMemoryError(f"{op.name}(): {device} ran out of memory for a result of shape {out_shape} ({what}): {e}")


def _run_direct(op, e, bufs):
    device = e.device
    try:
        if e.out:
            out = device._backend.empty(device.index, e.out_shape, e.out_dtype)
            e.fn(device._ctx, out, *bufs, **e.kw)
        else:
            out = e.fn(device._ctx, *bufs, **e.kw)
    except MemoryError as err:  # as in _finish
        if isinstance(err, OutOfMemoryError):
            raise
        raise _out_of_memory(op, device, e.out_shape, e.out_dtype, err) from err
    t = _new(Tensor)
    t._buf, t.shape, t.dtype, t.device, t._node = out, e.out_shape, e.out_dtype, device, None
    return t


def _try_fast(op, args):
    """Element-wise ops on same-dtype, same-shape tensors with a cached returning kernel and no graph."""
    x = args[0]
    if type(x) is not Tensor:
        return None
    plan = op.fast.get((x.device._ctx, x.dtype))
    if plan is None:
        return None
    n = len(args)
    if n == 1:
        if x._node is not None and _ag.is_grad_enabled():
            return None
        buf = plan[0](x.device._ctx, x._buf)
    elif n == 2:
        y = args[1]
        if (type(y) is not Tensor or y.dtype is not x.dtype or y.device is not x.device or y.shape != x.shape
                or ((x._node is not None or y._node is not None) and _ag.is_grad_enabled())):
            return None
        buf = plan[0](x.device._ctx, x._buf, y._buf)
    else:
        return None
    return _wrap(buf, x.shape, plan[1], x.device)


def apply(op, inputs, attrs, key=None):
    """The full path: validate, cast, run, wrap, record. ``key``: the call's cache key
    (:func:`call`); when the call succeeds, what it validated is cached under it."""
    mode = _autocast.current()
    if mode is not None:  # an autocast region: the op's policy may cast its floating inputs first
        inputs = _autocast.cast_inputs(op, inputs, mode, _astype)
        key = None
    flat = list(_flat(inputs)) if op.variadic else inputs
    tensors = []
    scalars = False
    for x in flat:
        if isinstance(x, Tensor):
            tensors.append(x)
        else:
            scalars = True
    if tensors:
        device = tensors[0].device
        for t in tensors:
            if t.device is not device:
                raise ValueError(
                    f"{op.name}(): inputs are on different devices, {device} and {t.device}; move them to one "
                    f"device with .to() first (anydevice never copies between devices implicitly)"
                )
    else:
        if key is not None and type(attrs.get("device")) is not Device:
            key = None  # a device given by name, or the current one: resolved again on every call
        device = _device_attr(op, attrs.get("device"))
    if op.has_device_attr:
        attrs["device"] = device

    # validation, before any device work: attributes (the registry's schema), dtypes (promote,
    # check the category), canon and the shape rule, the size of the result
    in_dtypes = (_input_dtypes(op, flat, tensors) if scalars else [t.dtype for t in flat]) if flat else []
    shapes = [[t.shape for t in x] if isinstance(x, list) else getattr(x, "shape", ()) for x in inputs]
    if op.schema:
        attrs = op.validate(attrs, shapes, in_dtypes)
    if flat or op.has_device_attr:
        compute, out_dtype = _dtypes_of(op, in_dtypes, attrs)
    else:
        compute = out_dtype = None
    if op.has_device_attr and "dtype" in attrs:
        attrs["dtype"] = out_dtype
    be = device._backend
    multi = op.outputs is not None
    for od in (out_dtype if multi else (out_dtype,)):
        if od is not None and od not in be.dtypes(device.index):
            if _depth() > 0:  # a step of a decomposition needs a dtype this device lacks: the whole op falls back
                raise _NeedsFallback(op.name)
            be.check_dtype(device.index, od)
    if op.data_shape is not None:  # sizes that depend on the data: computed on the device, read back once
        attrs = _data_shape(op, inputs, attrs, device, in_dtypes)
    if op.canon is not None:
        attrs = op.canon(shapes, attrs)
    out_shape = op.shape_rule(shapes, attrs)
    if multi:
        out_shape = tuple(tuple(s) for s in out_shape)
        for s_, d_ in zip(out_shape, out_dtype):
            check_size(op.name, s_, d_, device)
    elif out_dtype is not None:
        check_size(op.name, out_shape, out_dtype, device)

    # cast inputs to the compute dtype (``casts``: None when none is needed)
    casts = None
    if compute is not None:
        per = compute if type(compute) is tuple else None
        if scalars or (any(d is not c for d, c in zip(in_dtypes, per)) if per else
                       any(d is not compute for d in in_dtypes)):
            casts = in_dtypes
    if key is not None and op.data_shape is not None:
        key = None  # data-dependent sizes are read back on every call
    if key is not None:
        key = (key, _Entry(op, device, attrs, compute, casts, out_shape, out_dtype, len(flat) if not op.variadic else 1))
    return _finish(op, inputs, tensors, attrs, device, compute, casts, out_shape, out_dtype, key)


def _finish(op, inputs, tensors, attrs, device, compute, casts, out_shape, out_dtype, store):
    """The full path after validation: casts to the compute dtype, value checks that need data
    (index bounds), the plan, the result as a Tensor, the graph, the observers. ``store``:
    ``(key, entry)`` to cache once the call succeeded."""
    multi = op.outputs is not None
    if casts is not None:
        inputs = _cast_inputs(op, inputs, compute, device, casts)
    if type(compute) is tuple:
        compute = compute[0]
    if op.check is not None:
        op.check(xp, inputs, attrs)

    needs_grad = (
        op.differentiable and any(t._node is not None for t in tensors) and _ag.is_grad_enabled()
    )
    through_decomp = needs_grad and op.vjp is None and op.decomposition is not None
    t0 = time.perf_counter() if _observers and _depth() == 0 and not getattr(_tls, "quiet", False) else None
    try:
        if through_decomp:
            result = _decompose(op, inputs, attrs, device, compute, out_dtype)
            path = DECOMPOSED
        elif needs_grad:
            with _ag.no_grad():
                result, path = _execute(op, inputs, attrs, device, compute, out_shape, out_dtype)
        else:
            result, path = _execute(op, inputs, attrs, device, compute, out_shape, out_dtype)
    except MemoryError as e:  # a kernel's own allocation (numpy on cpu): anydevice's OutOfMemoryError
        if isinstance(e, OutOfMemoryError):
            raise
        raise _out_of_memory(op, device, out_shape, out_dtype, e) from e
    if multi:
        result = _wrap_outputs(result, out_shape, out_dtype, device, tensors, path == DECOMPOSED and not through_decomp)
    elif not isinstance(result, Tensor):
        result = _wrap(result, out_shape, out_dtype, device)
    elif path == DECOMPOSED and any(result is t for t in tensors):  # e.g. positive(x) = x: never alias an input
        result = _wrap(result._buf, result.shape, result.dtype, result.device, result._node if through_decomp else None)
    if needs_grad and not through_decomp:
        _record(op, inputs, attrs, result)
    if t0 is not None:
        dt = time.perf_counter() - t0
        for obs in list(_observers):
            obs(op, device, path, dt, inputs, result)
    if _tracer is not None and _depth() == 0 and not getattr(_tls, "quiet", False):
        _tracer(op, inputs, attrs, result, compute)
    if store is not None:
        key, entry = store
        if entry.fn is None and path == NATIVE:  # this call made the plan: the entry takes its kernel
            entry = _Entry(op, device, entry.attrs, entry.compute, entry.casts, out_shape, out_dtype, entry.n)
        elif op.plans.get(_CALLS, _EMPTY).get(key) is entry:
            return result
        _store(op, key, entry)
    return result


_PLAIN = (type(None), bool, int, float, complex, str, _dt.DType, type(Ellipsis))


def _wrap_outputs(result, out_shape, out_dtype, device, tensors, fresh) -> tuple:
    """The tuple of a multi-output op as Tensors; ``fresh``: a decomposition's outputs never alias
    an input (and carry no graph of their own)."""
    out = []
    for r, s_, d_ in zip(result, out_shape, out_dtype):
        if not isinstance(r, Tensor):
            r = _wrap(r, s_, d_, device)
        elif fresh and (r._node is not None or any(r is t for t in tensors)):
            r = _wrap(r._buf, r.shape, r.dtype, r.device)
        out.append(r)
    return tuple(out)


def _plain(v) -> bool:
    """A value a cache key may hold: no tensor or other object that could keep memory alive."""
    t = type(v)
    if t is tuple:
        return all(_plain(e) for e in v)
    return t in _PLAIN or t is Device


def _device_attr(op, spec, name=None):
    """The ``device`` attribute resolved to a Device; errors name the op (or ``name``)."""
    try:
        return as_device(spec)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{name or op.name}(): device: {e}") from None


_capacity: dict = {}
#: Results up to this many bytes skip the capacity check.
_SMALL_BYTES = 1 << 24


def check_size(name: str, shape, dtype, device) -> None:
    """Refuse a result before allocating it: OutOfMemoryError when its byte size exceeds what
    ``device`` reports (``memory_info``' total) or any tensor can have (2**63 - 1 bytes);
    ValueError for an empty shape whose other dimensions alone are that large (as numpy)."""
    n = 1
    for s in shape:
        n *= s
    if n * dtype.itemsize <= _SMALL_BYTES:
        if n == 0 and len(shape) > 1:
            _check_empty_size(name, shape, dtype)
        return
    total = _capacity.get(device)
    if total is None:
        try:
            total = device._backend.memory_info(device.index)[1]
        except Exception:  # a runtime that cannot say: only the hard limit applies
            total = None
        total = _capacity[device] = total or MAX_SIZE
    nbytes = n * dtype.itemsize
    if nbytes > min(total, MAX_SIZE):
        limit = "more than any tensor can have" if nbytes > MAX_SIZE else f"more than its capacity ({fmt_bytes(total)})"
        raise OutOfMemoryError(f"{name}(): cannot allocate {fmt_bytes(nbytes)} on {device} for a result of shape "
                               f"{tuple(shape)} and dtype {dtype.name}: {limit}")


def _check_empty_size(name: str, shape, dtype) -> None:
    n = dtype.itemsize
    for s in shape:
        n *= s or 1
    if n > MAX_SIZE:
        raise ValueError(f"{name}(): shape {tuple(shape)} is too big: its non-zero dimensions times the item size "
                         f"exceed {MAX_SIZE} bytes, even though it is empty")


def _types_of(values) -> tuple:
    """The types of ``values``, a sequence's element types with it (``(1, 2.0)`` is not ``(1, 2)``)."""
    return tuple((t, _types_of(v)) if (t := type(v)) is tuple or t is list else t for v in values)


def _dtypes_of(op, in_dtypes, attrs):
    """The op's dtype rule and category check, cached per (input dtypes, attribute values) when
    every attribute value is plain (never a tensor: a cache must not keep device memory alive)."""
    values = tuple(attrs.values())
    if _plain(values):  # with the values' types: False == 0 == 0.0 == 0j, but their dtypes differ
        key = (tuple(in_dtypes), values, _types_of(values))
        hit = op.dtype_cache.get(key)
    else:
        key = hit = None
    if hit is not None:
        return hit
    compute, out_dtype = op.dtype_rule(in_dtypes, attrs)
    if compute is not None:
        check_category(op.name, op.dtypes, compute[0] if type(compute) is tuple else compute)
    if key is not None:
        if len(op.dtype_cache) > 1024:
            op.dtype_cache.clear()
        op.dtype_cache[key] = (compute, out_dtype)
    return compute, out_dtype


def _input_dtypes(op, flat, tensors):
    if not tensors:
        raise TypeError(f"{op.name}() needs at least one Tensor input, got only Python scalars")
    ref = tensors[0].dtype
    if ref is _dt.bool_:
        ref = next((t.dtype for t in tensors if t.dtype is not _dt.bool_), ref)
    out = []
    for name, x in zip(op.inputs, flat):
        if not isinstance(x, Tensor):
            if type(x) is complex and ref.kind == "float":  # the complex dtype of that precision
                out.append(_dt.complex_of(ref))
                continue
            if not _dt.scalar_dtype_ok(x, ref):
                raise TypeError(
                    f"{op.name}(): a Python {type(x).__name__} cannot be combined with a {ref.name} tensor "
                    f"(Array API rules); use a tensor of a matching dtype or astype()"
                )
            if type(x) is int:
                fit_scalar(op.name, name, x, ref)  # OverflowError before any device work
            out.append(ref)
        else:
            out.append(x.dtype)
    return out


def _cast_inputs(op, inputs, compute, device, in_dtypes=()):
    """Inputs in the compute dtypes; a Python scalar is first rounded to the dtype it adopted
    (``in_dtypes``: the tensor's, Array API rules), then converted, as a tensor input would be."""
    if compute is None:
        return inputs
    per = compute if type(compute) is tuple else (compute,) * len(inputs)
    adopted = list(in_dtypes) if not op.variadic and len(in_dtypes) == len(inputs) else [None] * len(inputs)
    out = []
    for x, c, a in zip(inputs, per, adopted):
        if isinstance(x, list):
            out.append([t if t.dtype is c else _astype(t, c) for t in x])
        elif type(x) is Tensor or isinstance(x, Tensor):
            out.append(x if x.dtype is c else _astype(x, c))
        else:
            out.append(_scalar_tensor(x, c, device, a))
    return out


def _astype(t, d):
    return apply(get_op("astype"), [t], {"dtype": d, "copy": True})


def _scalar_tensor(value, d, device, adopted=None):
    be = device._backend
    host = _dt_np_scalar(value, adopted or d)
    if adopted is not None and adopted is not d:
        with np.errstate(all="ignore"):
            host = host.astype(d.numpy)
    return _wrap(be.from_host(device.index, host, d), (), d, device)


def _dt_np_scalar(value, d):
    if type(value) is int and d.kind in ("float", "complex"):
        value = float(value)  # bfloat16 (ml_dtypes) cannot convert a Python int beyond int64
    try:
        with np.errstate(over="ignore"):  # a float beyond the dtype's range rounds to ±inf (IEEE 754)
            return np.asarray(value, dtype=d.numpy)
    except OverflowError:
        raise OverflowError(f"Python scalar {value!r} does not fit in {d.name}") from None


# --- choosing and running a path ---------------------------------------------------------------
def _execute(op, inputs, attrs, device, compute, out_shape, out_dtype):
    key = (device._ctx, compute)
    plan = op.plans.get(key)
    if plan is None:
        plan = _plan(op, device, compute)
        if plan[0] == NATIVE:   # the plan is cached only once its kernel returned a buffer of this device
            out = _run_kernel(plan[1], device, inputs, attrs, out_shape, out_dtype)
            if not plan[1].out:
                for b in (out if op.outputs is not None else (out,)):
                    _check_result(op, plan[1], device, b)
            op.plans[key] = plan
            return out, NATIVE
        # setdefault: a thread that found the decomposition needs the CPU may have cached the
        # fallback meanwhile; an older plan must not overwrite it
        plan = op.plans.setdefault(key, plan)
    path, kernel = plan
    if path == NATIVE:
        if key not in op.fast and op.category == "elementwise" and not op.attrs and not kernel.out and all(
            getattr(x, "dtype", None) is compute for x in inputs
        ):
            op.fast[key] = (kernel.fn, out_dtype)
        return _run_kernel(kernel, device, inputs, attrs, out_shape, out_dtype), NATIVE
    depth = _depth()
    if path == DECOMPOSED and op.outputs is None and 0 in out_shape:
        # an empty result holds nothing to compute, but the decomposition's intermediates may be
        # huge (an FFT of length 2**40 over an empty batch): the result alone, as a native kernel
        # or the CPU would give it, so every device answers alike
        return op_function(get_op("full"))(tuple(out_shape), _coerce("full", 0, out_dtype), dtype=out_dtype,
                                           device=device), DECOMPOSED
    if path == DECOMPOSED:
        # a decomposition may need the CPU for some attribute values only (gelu's erf form on a
        # device without erf, not its tanh form): such a fallback is remembered per attribute values
        akey = ((key, tuple(attrs.values()), _types_of(attrs.values())) if op.attrs and all(_plain(v) for v in attrs.values())
                else None)
        if akey is not None and akey in op.plans:
            return _fallback(op, inputs, attrs, device), FALLBACK
        if depth > 0:
            return _decompose(op, inputs, attrs, device, compute, out_dtype), DECOMPOSED
        _tls.depth = 1
        try:
            return _decompose(op, inputs, attrs, device, compute, out_dtype), DECOMPOSED
        except _NeedsFallback:
            if akey is None:
                op.plans[key] = (FALLBACK, None)
            else:
                if len(op.plans) > 1024:
                    op.plans.clear()
                op.plans[akey] = (FALLBACK, None)
        finally:
            _tls.depth = 0
    elif depth > 0:
        raise _NeedsFallback(op.name)
    return _fallback(op, inputs, attrs, device), FALLBACK


_HALF = (_dt.float16, _dt.bfloat16)


def _decompose(op, inputs, attrs, device, compute, out_dtype):
    """Run ``op``'s decomposition; half-precision math runs in float32 (when the device has it)
    and is rounded once at the end, as native kernels do, instead of rounding every step."""
    if compute not in _HALF or op.has_device_attr or _dt.float32 not in device._backend.dtypes(device.index):
        return op.decomposition(xp, *inputs, **attrs)
    up = [[_astype(t, _dt.float32) if t.dtype is compute else t for t in x] if isinstance(x, list)
          else (_astype(x, _dt.float32) if x.dtype is compute else x) for x in inputs]
    r = op.decomposition(xp, *up, **attrs)
    if op.outputs is not None:
        return tuple(_astype(e, d) if e.dtype is not d else e for e, d in zip(r, out_dtype))
    return _astype(r, out_dtype) if r.dtype is not out_dtype else r


def _plan(op, device, compute):
    k = device._backend.kernels.lookup(op.name, compute)
    if k is not None:
        return (NATIVE, k)
    if op.decomposition is not None:
        return (DECOMPOSED, None)
    return (FALLBACK, None)


def _run_kernel(kernel, device, inputs, attrs, out_shape, out_dtype):
    bufs = [[t._buf for t in x] if isinstance(x, list) else x._buf for x in inputs]
    kw = attrs if not attrs or "device" not in attrs else {k: v for k, v in attrs.items() if k != "device"}
    ctx = device._ctx
    if kernel.out:
        be = device._backend
        if type(out_dtype) is tuple:  # a multi-output op: one buffer per output
            out = tuple(be.empty(device.index, s, d) for s, d in zip(out_shape, out_dtype))
        else:
            out = be.empty(device.index, out_shape, out_dtype)
        kernel.fn(ctx, out, *bufs, **kw)
        return out
    return kernel.fn(ctx, *bufs, **kw)


def _check_result(op, kernel, device, buf) -> None:
    """A returning kernel must give a buffer of its own device: a DeviceArray from that device's
    allocator, or for runtimes that keep their own storage an array (with shape and dtype)."""
    be = device._backend
    if be.own_storage:
        if hasattr(buf, "shape") and hasattr(buf, "dtype"):
            return
        expected = f"an array of the {device.type} runtime"
    else:
        if isinstance(buf, DeviceArray) and getattr(buf.block, "owner", None) is be.allocators[device.index]:
            return
        expected = f"a DeviceArray allocated on {device} (ctx.empty(shape, dtype))"
        if isinstance(buf, DeviceArray):
            expected += ", not memory of another device"
    fn = kernel.fn
    name = f"{getattr(fn, '__module__', None) or '?'}.{getattr(fn, '__qualname__', None) or repr(fn)}"
    raise PluginError(f"kernel {name}() of op {op.name!r} on {device} (plugin {be.record.label}) returned "
                      f"{_short(buf)} ({type(buf).__name__}); expected {expected}")


def _short(x) -> str:
    r = repr(x)
    return r if len(r) <= 60 else r[:57] + "..."


def _fallback(op, inputs, attrs, device):
    cpu = as_device("cpu")
    if device is cpu:
        raise NotImplementedError(
            f"op {op.name!r} has no kernel on cpu and no decomposition; the cpu backend must implement every primitive"
        )
    mode = _mode[0]
    with _counts_lock:
        _counts[(op.name, str(device))] += 1
        first = (op.name, device.type) not in _warned
        if mode == "warn" and first:
            _warned.add((op.name, device.type))
    if mode == "error":
        raise FallbackError(
            f"{op.name} has no kernel on {device} (plugin {device._backend.record.distribution or device._backend.record.name}) "
            f"and would fall back to the CPU; set ANYDEVICE_FALLBACK=warn to allow it"
        )
    if mode == "warn" and first:
        warnings.warn(
            f"{op.name} is not implemented natively on {device.type}; running it on the CPU (inputs copied to the "
            f"host and back). Set ANYDEVICE_FALLBACK=silent to hide this, or =error to forbid it.",
            FallbackWarning, stacklevel=_user_stacklevel(),
        )
    host_in = [[t.to(cpu) for t in x] if isinstance(x, list) else x.to(cpu) for x in inputs]
    host_attrs = dict(attrs)
    if op.has_device_attr:
        host_attrs["device"] = cpu
    saved, quiet = _depth(), getattr(_tls, "quiet", False)
    _tls.depth, _tls.quiet = 0, True
    try:
        with _ag.no_grad():
            res = apply(op, host_in, host_attrs)
    finally:
        _tls.depth, _tls.quiet = saved, quiet
    if op.outputs is not None:
        return tuple(r.to(device) for r in res)
    return res.to(device)


def _record(op, inputs, attrs, result):
    """Record ``result``'s node. ``attrs`` are kept as they are when they hold no ``device``
    (the call cache's kernel keywords); nothing mutates a node's attributes."""
    flat = list(_flat(inputs)) if op.variadic else inputs
    multi = op.outputs is not None
    saved, parents = [], []
    for x in flat:
        if type(x) is Tensor:
            t = _new(Tensor)
            t._buf, t.shape, t.dtype, t.device, t._node = x._buf, x.shape, x.dtype, x.device, None
            saved.append(t)
            parents.append(x._node)
        else:
            saved.append(_detached(x))
            parents.append(x._node if isinstance(x, Tensor) else None)
    node = _ag.Node(
        op, {k: v for k, v in attrs.items() if k != "device"} if "device" in attrs else attrs, tuple(saved),
        tuple(_detached(r) for r in result) if multi else _detached(result),
        tuple(parents), tuple(x.dtype for x in flat),
    )
    if multi:  # each output gets a node that routes its gradient to its slot of the op's node
        for k, r in enumerate(result):
            r._node = _ag.Node(_ag.OutputOf(op, k, len(result)), {}, (), None, (node,), (None,))
    else:
        result._node = node


# --- op functions and the engine's namespace ----------------------------------------------------
_functions: dict = {}


def op_function(op):
    """The public function of a registry op: binds arguments and dispatches (cached per op)."""
    fn = _functions.get(op.name)
    lookup = _chit.lookup if _chit is not None else None
    if fn is None:
        def fn(*args, **kwargs):  # call()'s cache hit, one frame shallower
            if lookup is not None and (r := lookup(op, args, kwargs)) is not _MISS:
                return r
            if not op.fast and not _observers and _tracer is None and not _autocast.regions[0]:
                if len(args) == 1 and type(a := args[0]) is Tensor and len(kwargs) < 2:  # as _call_key keys it
                    if not kwargs:
                        key = (a.device._ctx, a.dtype, a.shape)
                    else:
                        (name, v), = kwargs.items()
                        t = type(v)
                        key = (a.device._ctx, a.dtype, a.shape, name, t, v) if t in _KEYABLE else _call_key(args, kwargs)
                elif (len(args) == 2 and not kwargs and type(a := args[0]) is Tensor and type(b := args[1]) is tuple
                      and _INTS.issuperset(map(type, b))):  # a shape or axes of ints: a key of its own form
                    key = (a.device._ctx, a.dtype, a.shape, _INTS, b)
                    try:
                        e = op.plans[_CALLS][key]
                    except KeyError:
                        return call_keyed(op, args, kwargs, key)  # stored under this key
                    return e.run(args, key)
                else:
                    key = _call_key(args, kwargs)
                if key is not None:
                    try:  # subscripts: cheaper than two .get() calls when the call is cached
                        e = op.plans[_CALLS][key]
                    except KeyError:
                        e = None
                    if e is not None:
                        return e.run(args, key)
            return call(op, args, kwargs)

        fn.__name__ = fn.__qualname__ = op.name
        fn.__doc__ = op_doc(op)
        fn.__signature__ = op.signature
        fn.__module__ = "anydevice"
        fn.op = op
        _functions[op.name] = fn
    return fn


def op_doc(op) -> str:
    """The docstring of an op's function, from its registry entry: what it computes, its
    parameters (inputs with the dtypes they accept, attributes with what they allow), the result
    and how devices run it."""
    lines = [(op.doc or f"The {op.name} op.").strip(), "", "Parameters", "----------"]
    for n in op.inputs:
        what = "a list or tuple of Tensors" if n.startswith("*") else "Tensor (or a Python scalar)"
        lines += [f"{n.lstrip('*')} : {what}", f"    dtypes: {', '.join(d.name for d in op.supported_dtypes)}"]
    for k, a in op.schema.items():
        default = "required" if a.default is REQUIRED else f"default {a.default!r}"
        lines += [f"{k} : {a.annotation}, {default}", f"    {a.allowed()}"]
    outs = ", ".join(op.outputs) if getattr(op, "outputs", None) else "one Tensor"
    kind = ("a primitive: backends implement it natively, else it runs on the CPU" if op.primitive
            else "a composite: devices without a native kernel run its decomposition into other ops")
    lines += ["", "Returns", "-------", f"{outs} ({op.category or 'op'}; {kind}).",
              "", f"Registry entry: anydevice.api.op({op.name!r})."]
    return "\n".join(lines)


def full_like(x, /, fill_value, *, dtype=None, device=None) -> Tensor:
    """A tensor of ``x``'s shape filled with ``fill_value`` (dtype and device default to ``x``'s)."""
    return _like("full_like", x, fill_value, dtype, device)


def _like(name, x, fill_value, dtype, device) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}(): x must be a Tensor, not {type(x).__name__}; "
                        f"use {name.replace('_like', '')}(shape) to make a tensor from a shape")
    try:
        d = _dt.dtype(dtype) if dtype is not None else x.dtype
    except TypeError as e:
        raise TypeError(f"{name}(): dtype: {e}") from None
    v = scalar_value(fill_value)
    if v is None:
        raise TypeError(f"{name}(): fill_value must be a Python number, not {type(fill_value).__name__}")
    v = _coerce(name, v, d)
    fit_scalar(name, "fill_value", v, d)
    dev = x.device if device is None else _device_attr(get_op("full"), device, name)
    return op_function(get_op("full"))(x.shape, v, dtype=d, device=dev)


def _coerce(name, v, d):
    """Python scalars become the dtype's kind (``zeros_like(int_x)`` fills with the int 0)."""
    k = d.kind
    if k == "bool":
        return bool(v)
    if k in ("int", "uint"):
        if isinstance(v, complex) or (isinstance(v, float) and not v.is_integer()):
            raise TypeError(f"{name}(): fill_value {v!r} does not fit in {d.name} (an integer dtype)")
        return int(v)
    if k == "float":
        if isinstance(v, complex):
            raise TypeError(f"{name}(): fill_value {v!r} does not fit in {d.name} (a real dtype)")
        return float(v)
    return complex(v)


#: 0 and 1 as ``_coerce`` makes them for each dtype kind
_ZERO = {"bool": False, "int": 0, "uint": 0, "float": 0.0, "complex": 0j}
_ONE = {"bool": True, "int": 1, "uint": 1, "float": 1.0, "complex": 1 + 0j}


def zeros_like(x, /, *, dtype=None, device=None) -> Tensor:
    """A tensor of zeros of ``x``'s shape (dtype and device default to ``x``'s)."""
    if dtype is None and device is None and type(x) is Tensor:  # nothing to check: x's own
        return _full(x.shape, _ZERO[x.dtype.kind], dtype=x.dtype, device=x.device)
    return _like("zeros_like", x, 0, dtype, device)


def ones_like(x, /, *, dtype=None, device=None) -> Tensor:
    """A tensor of ones of ``x``'s shape (dtype and device default to ``x``'s)."""
    if dtype is None and device is None and type(x) is Tensor:
        return _full(x.shape, _ONE[x.dtype.kind], dtype=x.dtype, device=x.device)
    return _like("ones_like", x, 1, dtype, device)


def _full(*args, **kwargs):
    return call(get_op("full"), args, kwargs)


class Namespace:
    """The array namespace that decompositions, VJPs and value checks compute with
    (``decomposition(xp, x)``): every registry op as a function, plus ``full_like``,
    ``zeros_like`` and ``ones_like``. The same functions back the public ``anydevice``
    namespace, so an op computes the same way whichever path calls it."""

    full_like = staticmethod(full_like)
    zeros_like = staticmethod(zeros_like)
    ones_like = staticmethod(ones_like)

    def __init__(self):
        load_all()
        for op in all_ops():
            setattr(self, op.name, op_function(op))

    def __repr__(self) -> str:
        return "<anydevice engine namespace>"


#: The namespace passed to every decomposition, VJP and value check.
xp = Namespace()
