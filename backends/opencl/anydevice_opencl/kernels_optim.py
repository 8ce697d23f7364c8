"""Generated OpenCL kernels of the optimizer updates (``adam_update``, ``sgd_update``,
``rmsprop_update``, ``adagrad_update``; :mod:`anydevice.ops.optim`): one launch per parameter
instead of the two dozen of their decompositions (Adam of a parameter above :data:`ADAM_SPLIT`
elements: two, see :func:`adam_update`).

Every work-item reads the 0-d step count, so nothing is read back: the bias corrections are
computed on the device (in double where the device has it, else in float with ``expm1``), the
first work-item writes the new step count and the states the options leave unused. The
element-wise math is rounded in the order of the cpu kernels (``FP_CONTRACT OFF``: no fused
multiply-adds) and the scalars the cpu multiplies by are passed in the parameter's type, so a step
gives the cpu's bits (tested: tests/test_opencl_optim.py). One program per
device and parameter dtype, built at the first update.
"""
from __future__ import annotations

import struct
import threading

import numpy as np
import pyopencl as cl

from .runtime import BUILD_OPTIONS, Launcher

LOCAL = 128
_CTYPE = {"float32": "float", "float64": "double"}

#: the element-wise part of Adam, after the step's scalars ``s1`` (lr over the first moment's bias
#: correction) and ``r2`` (the root of the second's): shared by the one-launch kernel and
#: the second launch of the two-launch form (:func:`adam_update`). ``e1``/``e2`` are the betas in
#: the parameter's type, as the cpu's element-wise products round them.
_ADAM = """
    if (!amsgrad && i < x_n) xo[xo_o + i] = x[x_o + i];
    if (i >= n) return;
    T pp = p[p_o + i], gg = g[g_o + i];
    if (wd != 0) { if (decoupled) pp = pp * decay; else gg = gg + wd * pp; }
    T mm = m[m_o + i] * e1 + gg * c1;
    T vv = (gg * gg) * c2 + v[v_o + i] * e2;
    T den = vv;
    if (amsgrad) { den = maxnan(x[x_o + i], vv); xo[xo_o + i] = den; }
    den = sqrt(den) / r2 + eps;
    mo[mo_o + i] = mm; vo[vo_o + i] = vv;
    po[po_o + i] = pp - (mm * s1) / den;"""

#: op -> ("outputs | inputs | scalars | integers", body): the last output and input are the step
#: counts, scalars marked ``*`` are of type ``S`` (what the step's scalars are computed in), the
#: others of ``T`` (the parameter's); ``i`` indexes the element; ``bias(b, t)`` is 1 - b**t. A
#: state the options leave unused (any size ``<name>_n``) is copied through unchanged.
_BODIES = {
    "adam_update": ("po mo vo xo so | p g m v x st | *lr *b1 *b2 eps wd c1 c2 decay e1 e2 | decoupled amsgrad x_n", """
    __local S sc[2];  /* the step's scalars, once per work-group */
    if (get_local_id(0) == 0) { S t = (S)tf; sc[0] = adam_s1(lr, b1, t); sc[1] = adam_r2(b2, t); }
    barrier(CLK_LOCAL_MEM_FENCE);
    T s1 = (T)sc[0], r2 = (T)sc[1];""" + _ADAM),
    # the two-launch form of adam_update (large parameters: a work-group barrier keeps PoCL from
    # vectorizing a kernel, which then runs several times slower): one work-item computes the
    # step's scalars into sc, then the element-wise part reads them (and no step count)
    "adam_scalars": ("sc so | st | *lr *b1 *b2 | ", """
    if (i == 0) { S t = (S)tf; sc[sc_o] = (T)adam_s1(lr, b1, t); sc[sc_o + 1] = (T)adam_r2(b2, t); }"""),
    "adam_apply": ("po mo vo xo | p g m v x sc | eps wd c1 c2 decay e1 e2 | decoupled amsgrad x_n", """
    T s1 = sc[sc_o], r2 = sc[sc_o + 1];""" + _ADAM),
    "sgd_update": ("po bo so | p g b st | lr mu damp wd | nesterov usemu b_n", """
    if (!usemu && i < b_n) bo[bo_o + i] = b[b_o + i];
    if (i >= n) return;
    T pp = p[p_o + i], gg = g[g_o + i];
    if (wd != 0) gg = gg + wd * pp;
    if (usemu) {
        T bb = b[b_o + i] * mu + (damp != 1 ? gg * damp : gg);
        if (tf == 1.0f) bb = gg;
        bo[bo_o + i] = bb;
        gg = nesterov ? gg + bb * mu : bb;
    }
    po[po_o + i] = pp - gg * lr;"""),
    "rmsprop_update": ("po so ao bo to | p g s a b st | lr alpha eps wd mu c | centered usemu a_n b_n", """
    if (!centered && i < a_n) ao[ao_o + i] = a[a_o + i];
    if (!usemu && i < b_n) bo[bo_o + i] = b[b_o + i];
    if (i >= n) return;
    T pp = p[p_o + i], gg = g[g_o + i];
    if (wd != 0) gg = gg + wd * pp;
    T ss = s[s_o + i] * alpha + (gg * gg) * c;
    so[so_o + i] = ss;
    T den;
    if (centered) { T aa = a[a_o + i] * alpha + gg * c; ao[ao_o + i] = aa; den = sqrt(ss - aa * aa); }
    else den = sqrt(ss);
    T u = gg / (den + eps);
    if (usemu) { u = b[b_o + i] * mu + u; bo[bo_o + i] = u; }
    po[po_o + i] = pp - u * lr;"""),
    "adagrad_update": ("po so to | p g s st | *lr *decay wd eps | ", """
    T clr = (T)(lr / (((S)tf - 1) * decay + 1));
    if (i >= n) return;
    T pp = p[p_o + i], gg = g[g_o + i];
    if (wd != 0) gg = gg + wd * pp;
    T ss = s[s_o + i] + gg * gg;
    so[so_o + i] = ss;
    po[po_o + i] = pp - (gg * clr) / (sqrt(ss) + eps);"""),
}


def _signature(name):
    """(outputs, inputs, scalars as (name, of type S), flags) of ``name``'s kernel."""
    outs, ins, scalars, flags = (part.split() for part in _BODIES[name][0].split("|"))
    return outs, ins, [(k.lstrip("*"), k.startswith("*")) for k in scalars], flags


def _kernel_source(name: str, T: str) -> str:
    outs, ins, scalars, flags = _signature(name)
    counts = ins[-1] == "st"  # adam_apply has no step count (adam_scalars wrote it)
    step_out = outs[-1] if counts else None
    params = [f"__global {'float' if k == step_out else 'T'}* {k}, long {k}_o" for k in outs]
    params += [f"__global const {'float' if k == 'st' else 'T'}* {k}, long {k}_o" for k in ins]
    params += ["long n"] + [f"{'S' if wide else 'T'} {k}" for k, wide in scalars] + [f"long {k}" for k in flags]
    head = f"__kernel void anydevice_{name}_{T}({', '.join(params)}) {{\n    long i = get_global_id(0);"
    if counts:
        head += f"\n    float tf = st[st_o] + 1.0f;\n    if (i == 0) {step_out}[{step_out}_o] = tf;"
    return head + _BODIES[name][1] + "\n}\n"


def program_source(T: str, fp64: bool) -> str:
    """The four update kernels for parameters of C type ``T``; the step's scalars in double when
    the device has it."""
    S = "double" if fp64 else "float"
    pre = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if fp64 or T == "double" else ""
    bias = ("1.0 - pow(b, t)" if fp64 else "-expm1(t * log(b))")
    pre += (f"#pragma OPENCL FP_CONTRACT OFF\n#define T {T}\n#define S {S}\n"
            f"static S bias(S b, S t) {{ return b == 0 ? (S)1 : {bias}; }}\n"
            "static T maxnan(T a, T b) { return a != a ? a : (b != b ? b : (a > b ? a : b)); }\n"
            "/* Adam's step scalars at step t: lr over the first moment's bias correction, the root of the second's */\n"
            "static S adam_s1(S lr, S b1, S t) { return lr / bias(b1, t); }\n"
            "static S adam_r2(S b2, S t) { return sqrt(bias(b2, t)); }\n")
    return pre + "".join(_kernel_source(name, T) for name in _BODIES)


_programs: dict = {}
_lock = threading.Lock()


def _launcher(ctx, name: str, dt: str) -> Launcher:
    rt = ctx.runtime
    key = (id(rt), ctx.index, dt)
    prog = _programs.get(key)
    if prog is None:
        with _lock:
            prog = _programs.get(key)
            if prog is None:
                src = program_source(_CTYPE[dt], rt.has_fp64(ctx.index))
                prg = rt.build(ctx.index, src, BUILD_OPTIONS)
                prog = _programs[key] = {n: Launcher(cl.Kernel(prg, f"anydevice_{n}_{_CTYPE[dt]}")) for n in _BODIES}
    return prog[name]


def _buf(a) -> list:
    b = a.block
    return [b.handle, (b.offset + a.offset) // a.dtype.itemsize]


def _run(ctx, name, out, inputs, scalars, ints, like=None) -> None:
    """Launch ``name`` over the elements of ``like`` (default: the first input, the parameter)."""
    p = inputs[0] if like is None else like
    dt = p.dtype.name
    n = p.size
    vals = scalars.values()
    key = (name, dt, ctx.runtime.has_fp64(ctx.index), struct.pack(f"{len(vals)}d", *vals), ints)  # bits: -0.0, NaN
    tail = _TAILS.get(key)
    if tail is None:  # the same scalar objects at every step: the launcher leaves them set
        S = np.float64 if key[2] else np.float32
        T = p.dtype.numpy.type
        tail = [(S if wide else T)(scalars[k]) for k, wide in _signature(name)[2]] + [int(f) for f in ints]
        if len(_TAILS) >= 1024:
            _TAILS.clear()
        _TAILS[key] = tail
    args = [a for o in out for a in _buf(o)] + [a for x in inputs for a in _buf(x)] + [n] + tail
    g = -(-max(n, 1, *ints) // LOCAL) * LOCAL
    _launcher(ctx, name, dt)(ctx.runtime.queue(ctx.index, ctx.stream), (g,), (LOCAL,), args)


_TAILS: dict = {}  # (kernel, dtype, fp64, scalars' bits, flags) -> the scalar and flag arguments


#: parameters of more elements than this take Adam's two-launch form (adam_scalars, adam_apply)
ADAM_SPLIT = 4 * LOCAL


def _adam_elementwise(lr, beta1, beta2, eps, weight_decay) -> dict:
    """The scalars of Adam's element-wise part (:data:`_ADAM`), by their names in the kernels."""
    return {"eps": eps, "wd": weight_decay, "c1": 1.0 - beta1, "c2": 1.0 - beta2,
            "decay": 1.0 - lr * weight_decay, "e1": beta1, "e2": beta2}


def adam_update(ctx, out, p, g, m, v, x, step, *, lr, beta1, beta2, eps, weight_decay, decoupled, amsgrad):
    """One launch for a small parameter; a larger one first computes the step's scalars in one
    work-item, so that the element-wise launch needs no work-group barrier."""
    ew = _adam_elementwise(lr, beta1, beta2, eps, weight_decay)
    flags = (decoupled, amsgrad, x.size)
    if max(p.size, x.size) <= ADAM_SPLIT:
        _run(ctx, "adam_update", out, (p, g, m, v, x, step), {"lr": lr, "b1": beta1, "b2": beta2, **ew}, flags)
        return
    sc = ctx.empty((2,), p.dtype)
    _run(ctx, "adam_scalars", (sc, out[4]), (step,), {"lr": lr, "b1": beta1, "b2": beta2}, (), like=sc)
    _run(ctx, "adam_apply", out[:4], (p, g, m, v, x, sc), ew, flags)


def sgd_update(ctx, out, p, g, b, step, *, lr, momentum, dampening, weight_decay, nesterov):
    _run(ctx, "sgd_update", out, (p, g, b, step),
         {"lr": lr, "mu": momentum, "damp": 1.0 - dampening, "wd": weight_decay}, (nesterov, momentum != 0.0, b.size))


def rmsprop_update(ctx, out, p, g, s, a, b, step, *, lr, alpha, eps, weight_decay, momentum, centered):
    _run(ctx, "rmsprop_update", out, (p, g, s, a, b, step),
         {"lr": lr, "alpha": alpha, "eps": eps, "wd": weight_decay, "mu": momentum, "c": 1.0 - alpha},
         (centered, momentum != 0.0, a.size, b.size))


def adagrad_update(ctx, out, p, g, s, step, *, lr, lr_decay, weight_decay, eps):
    _run(ctx, "adagrad_update", out, (p, g, s, step),
         {"lr": lr, "decay": lr_decay, "wd": weight_decay, "eps": eps}, ())


def register(kernels, runtime) -> None:
    for fn in (adam_update, sgd_update, rmsprop_update, adagrad_update):
        kernels.register(fn.__name__, fn, dtypes=list(_CTYPE), out=True)


# --- Adam over several parameters (the graph compiler's claim) ----------------------------------
_MULTI_OUT, _MULTI_IN = ("po", "mo", "vo", "xo"), ("p", "g", "m", "v", "x")
#: parameters of at most this many elements share one element-wise launch in :func:`adam_multi`
#: (selecting a parameter's pointers per work-group halves PoCL's throughput: larger ones keep
#: their own launch)
MULTI_SHARED = 4096


def multi_source(kind: str, count: int, T: str, fp64: bool) -> str:
    """``kind`` ``"scalars"``: one work-item computes the step count and the two scalars of each
    of ``count`` parameters (``sc[2t]``, ``sc[2t + 1]``, as ``adam_scalars``); ``"apply"``: the
    element-wise part (:data:`_ADAM`) of ``count`` parameters, the work-groups split between them
    at ``G1..`` (group ranges: each parameter's pointers are selected once per work-group)."""
    pre = program_source(T, fp64).split("__kernel", 1)[0]
    if kind == "scalars":
        sp = [f"__global float* so{t}, long so{t}_o, __global const float* st{t}, long st{t}_o" for t in range(count)]
        return pre + (f"__kernel void anydevice_adam_multi_scalars_{count}_{T}(__global T* sc, long sc_o, {', '.join(sp)}, "
                      f"S lr, S b1, S b2) {{\n  if (get_global_id(0) != 0) return;\n"
                      + "".join(f"  {{ float tf = st{t}[st{t}_o] + 1.0f; so{t}[so{t}_o] = tf; S t = (S)tf;\n"
                                f"    sc[sc_o + {2 * t}] = (T)adam_s1(lr, b1, t); sc[sc_o + {2 * t + 1}] = (T)adam_r2(b2, t); }}\n"
                                for t in range(count)) + "}\n")
    params = []
    for t in range(count):
        params += [f"__global T* {k}{t}, long {k}{t}_o" for k in _MULTI_OUT]
        params += [f"__global const T* {k}{t}, long {k}{t}_o" for k in _MULTI_IN]
        params += [f"long n{t}, long xn{t}"] + ([f"long G{t}"] if t else [])
    params += ["__global const T* sc, long sc_o", "T eps, T wd, T c1, T c2, T decay, T e1, T e2, long decoupled, long amsgrad"]

    def pick(fmt: str) -> str:  # parameter t's fmt.format(t=t), by the work-group's range
        e = fmt.format(t=count - 1)
        for t in range(count - 2, -1, -1):
            e = f"(grp < G{t + 1} ? {fmt.format(t=t)} : {e})"
        return e

    sel = ["  long grp = get_group_id(0);"]
    sel += [f"  __global T* {k} = {pick(k + '{t}')}; long {k}_o = {pick(k + '{t}_o')};" for k in _MULTI_OUT]
    sel += [f"  __global const T* {k} = {pick(k + '{t}')}; long {k}_o = {pick(k + '{t}_o')};" for k in _MULTI_IN]
    start = "0" if count == 1 else pick("G{t}").replace("G0", "0")
    sel += [f"  long n = {pick('n{t}')}, x_n = {pick('xn{t}')}, tt = {pick('{t}')};",
            f"  long i = get_global_id(0) - {start} * {LOCAL};",
            "  T s1 = sc[sc_o + 2 * tt], r2 = sc[sc_o + 2 * tt + 1];"]
    return pre + (f"__kernel void anydevice_adam_multi_{count}_{T}({', '.join(params)}) {{\n" + "\n".join(sel)
                  + _ADAM + "\n}\n")


_multi: dict = {}


def _multi_launcher(ctx, kind: str, count: int, dt: str) -> Launcher:
    rt = ctx.runtime
    key = (id(rt), ctx.index, dt, kind, count)
    got = _multi.get(key)
    if got is None:
        with _lock:
            got = _multi.get(key)
            if got is None:
                T = _CTYPE[dt]
                prg = rt.build(ctx.index, multi_source(kind, count, T, rt.has_fp64(ctx.index)), BUILD_OPTIONS)
                name = f"anydevice_adam_multi_{'scalars_' if kind == 'scalars' else ''}{count}_{T}"
                got = _multi[key] = Launcher(cl.Kernel(prg, name))
    return got


def adam_multi(ctx, outs: list, ins: list, *, lr, beta1, beta2, eps, weight_decay, decoupled, amsgrad) -> None:
    """``adam_update`` of several parameters of one dtype and the same options: ``outs[t]`` the
    five results of parameter ``t`` (param, exp_avg, exp_avg_sq, max_exp_avg_sq, step), ``ins[t]``
    its six inputs. One launch computes every parameter's step count and scalars, one the
    element-wise part of those up to :data:`MULTI_SHARED` elements, and each larger parameter
    has its own ``adam_apply`` launch: the bits of one ``adam_update`` per parameter."""
    p0 = ins[0][0]
    dt = p0.dtype.name
    size = [max(i[0].size, i[4].size) for i in ins]
    order = sorted(range(len(ins)), key=lambda t: size[t] > MULTI_SHARED)  # shared ones first (stable)
    shared = [t for t in order if size[t] <= MULTI_SHARED]
    T = p0.dtype.numpy.type
    S = np.float64 if ctx.runtime.has_fp64(ctx.index) else np.float32
    q = ctx.runtime.queue(ctx.index, ctx.stream)
    sc = ctx.empty((2 * len(ins),), p0.dtype)
    args = _buf(sc)
    for t in order:
        args += _buf(outs[t][4]) + _buf(ins[t][5])
    _multi_launcher(ctx, "scalars", len(ins), dt)(q, (1,), (1,), args + [S(lr), S(beta1), S(beta2)])
    ew = _adam_elementwise(lr, beta1, beta2, eps, weight_decay)
    tail = [T(ew[k]) for k, _ in _signature("adam_apply")[2]] + [int(decoupled), int(amsgrad)]
    sc_h, sc_o = _buf(sc)
    for j, t in enumerate(order[len(shared):], start=len(shared)):  # a large parameter: adam_apply
        a = [x for o in outs[t][:4] for x in _buf(o)] + [x for i in ins[t][:5] for x in _buf(i)]
        a += [sc_h, sc_o + 2 * j, ins[t][0].size] + tail + [ins[t][4].size]
        _launcher(ctx, "adam_apply", dt)(q, (-(-size[t] // LOCAL) * LOCAL,), (LOCAL,), a)
    if not shared:
        return
    args, groups = [], 0
    for j, t in enumerate(shared):
        for x in list(outs[t][:4]) + list(ins[t][:5]):
            args += _buf(x)
        args += [ins[t][0].size, ins[t][4].size] + ([groups] if j else [])
        groups += -(-max(size[t], 1) // LOCAL)
    _multi_launcher(ctx, "apply", len(shared), dt)(q, (groups * LOCAL,), (LOCAL,), args + [sc_h, sc_o] + tail)
