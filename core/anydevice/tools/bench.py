"""``anydevice bench``: side-by-side timings measured in one run (ratios, not absolute promises).

- tiny op: eager ``add`` of two 4-element float32 tensors — anydevice on each selected device,
  numpy, and torch on CPU when torch is installed (benchmark-only, never a test dependency);
- per-op table: add, reductions, matmul, views, concat, where, softmax, astype ... at 16 and 4096
  float32 elements (4×4 and 64×64), forward and forward+backward of ``sum(op(x))``, against numpy
  (forward) and torch, with anydevice's overhead over the device kernel it calls;
- MLP step: the digits perceptron (64-256-10, batch 256, Adam) on each selected device against
  torch, with the final losses side by side;
- jit: the same step compiled with ``anydevice.jit`` (one graph) against its eager form on each
  device and torch eager, with first-compile time and peak memory (:mod:`anydevice.tools.bench_jit`);
- large elementwise: 16M-element float32 add, GB/s counting 12 bytes per element, vs numpy;
- matmul: 1024×1024 float32, GFLOP/s vs numpy.

Every comparison is interleaved (rounds alternate between the contenders, so drift and load hit
all alike) and reported as the median with the min–max over rounds. torch runs with
``torch.set_num_threads(threads)`` and numpy's BLAS with ``threadpoolctl`` at the same count
(``--threads``, default 1); the machine's load average is printed at the start and the end.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

import numpy as np

from anydevice.tools.bench_jit import _torch_step, bench_jit, print_jit


def _best(fn, number, repeat=7):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


def _best_pair(f, g, number, repeat=7):
    """Best per-call time of ``f`` and of ``g``, measured alternately so drift hits both alike."""
    bf = bg = float("inf")
    for _ in range(repeat):
        bf = min(bf, _best(f, number, repeat=1))
        bg = min(bg, _best(g, number, repeat=1))
    return bf, bg


def _interleaved(fns: dict, number: int, rounds: int) -> dict:
    """Per-call seconds of every ``fns[name]()`` over ``rounds`` rounds of ``number`` calls each,
    the contenders taking turns within every round: ``{name: {"median", "min", "max"}}``. A
    function may return a callable, called once after its calls (a device synchronization)."""
    times: dict = {k: [] for k in fns}
    for f in fns.values():  # warm up: plans, caches, first allocations
        _batch(f, max(2, number // 10))
    for _ in range(rounds):
        for k, f in fns.items():
            times[k].append(_batch(f, number) / number)
    return {k: _stats(v) for k, v in times.items()}


def _batch(f, number) -> float:
    t0 = time.perf_counter()
    r = None
    for _ in range(number):
        r = f()
    if callable(r):
        r()
    return time.perf_counter() - t0


def _stats(v) -> dict:
    return {"median": statistics.median(v), "min": min(v), "max": max(v)}


def _sync(t):
    from anydevice.api import device

    device.synchronize(t.device)


#: ``--no-torch`` sets it: leave torch out even where it is installed
_NO_TORCH = [False]


def _torch(threads: int):
    """torch with ``threads`` intra-op threads, or None when it is not installed (or left out)."""
    if _NO_TORCH[0]:
        return None
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    return torch


@contextlib.contextmanager
def _blas_threads(threads: int, notes: list):
    """numpy's BLAS limited to ``threads`` (threadpoolctl), or a note that it could not be."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        notes.append("threadpoolctl is not installed: numpy's BLAS runs with its default thread count")
        yield
        return
    with threadpool_limits(limits=threads):
        yield


def bench_tiny(devices, number=20000):
    import anydevice as ad

    rows = []
    a_np = np.ones(4, np.float32)
    b_np = np.ones(4, np.float32)
    numpy_t = _best(lambda: np.add(a_np, b_np), number)
    rows.append(("numpy add (4 x float32)", numpy_t))
    torch = _torch(1)
    if torch is not None:
        ta, tb = torch.ones(4), torch.ones(4)
        rows.append(("torch CPU add", _best(lambda: torch.add(ta, tb), number)))
    for dev in devices:
        a = ad.ones(4, device=dev)
        b = ad.ones(4, device=dev)
        n = number if dev.startswith("cpu") else max(number // 10, 200)

        def burst(a=a, b=b, n=n):
            for _ in range(n):
                a + b
            _sync(a)  # asynchronous devices: the time includes running the queued work

        burst()
        rows.append((f"anydevice {dev} a + b", _best(burst, 1) / n))
    return rows


# --- the per-op table ------------------------------------------------------------------------
#: label -> (registry op of the kernel, its attributes, anydevice, numpy, torch); each function
#: takes the inputs ``(x, y, cond)`` of one library
def _np_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _np_log_softmax(x):
    s = x - x.max(axis=-1, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=-1, keepdims=True))


def _op_table(ad, torch):
    return {
        "add": ("add", {}, lambda x, y, c: x + y, lambda x, y, c: np.add(x, y), lambda x, y, c: x + y),
        "sum": ("sum", {}, lambda x, y, c: ad.sum(x), lambda x, y, c: np.sum(x), lambda x, y, c: x.sum()),
        "sum(axis=0)": ("sum", {"axis": 0}, lambda x, y, c: ad.sum(x, axis=0), lambda x, y, c: np.sum(x, axis=0),
                        lambda x, y, c: x.sum(0)),
        "max": ("max", {}, lambda x, y, c: ad.max(x), lambda x, y, c: np.max(x), lambda x, y, c: x.max()),
        "mean": ("mean", {}, lambda x, y, c: ad.mean(x), lambda x, y, c: np.mean(x), lambda x, y, c: x.mean()),
        "var": ("var", {}, lambda x, y, c: ad.var(x), lambda x, y, c: np.var(x),
                lambda x, y, c: x.var(correction=0)),
        "matmul": ("matmul", {}, lambda x, y, c: x @ y, lambda x, y, c: x @ y, lambda x, y, c: x @ y),
        "reshape": ("reshape", {"shape": (-1,)}, lambda x, y, c: ad.reshape(x, (-1,)),
                    lambda x, y, c: np.reshape(x, (-1,)), lambda x, y, c: x.reshape(-1)),
        "permute_dims": ("permute_dims", {"axes": (1, 0)}, lambda x, y, c: ad.permute_dims(x, (1, 0)),
                         lambda x, y, c: np.transpose(x, (1, 0)), lambda x, y, c: x.permute(1, 0)),
        "x[1:3]": ("getitem", {"key": slice(1, 3)}, lambda x, y, c: x[1:3], lambda x, y, c: x[1:3],
                   lambda x, y, c: x[1:3]),
        "concat": ("concat", {}, lambda x, y, c: ad.concat([x, y]), lambda x, y, c: np.concatenate([x, y]),
                   lambda x, y, c: torch.cat([x, y])),
        "where": ("where", {}, lambda x, y, c: ad.where(c, x, y), lambda x, y, c: np.where(c, x, y),
                  lambda x, y, c: torch.where(c, x, y)),
        "softmax": ("softmax", {"axis": -1}, lambda x, y, c: ad.softmax(x, axis=-1), lambda x, y, c: _np_softmax(x),
                    lambda x, y, c: x.softmax(-1)),
        "log_softmax": ("log_softmax", {"axis": -1}, lambda x, y, c: ad.log_softmax(x, axis=-1),
                        lambda x, y, c: _np_log_softmax(x), lambda x, y, c: x.log_softmax(-1)),
        "astype": ("astype", {"dtype": ad.float16}, lambda x, y, c: x.astype(ad.float16),
                   lambda x, y, c: x.astype(np.float16), lambda x, y, c: x.half()),
    }


#: ops whose numpy and torch forms need several kernels (softmax: max, subtract, exp, sum, divide)
COMPOSITES = ("mean", "var", "softmax", "log_softmax")


def _kernel_call(name, attrs, inputs):
    """A direct call of ``inputs[0]``'s device kernel for op ``name`` on the inputs' own buffers,
    with the attributes the dispatcher would pass (validated and normalized), or None when the
    device has no native kernel (the op is decomposed or falls back)."""
    from anydevice.ops.indexing import canonical_key
    from anydevice.ops.registry import get_op

    op = get_op(name)
    x = inputs[0][0] if isinstance(inputs[0], list) else inputs[0]
    dev = x.device
    kernel = dev._backend.kernels.lookup(name, x.dtype)
    if kernel is None or kernel.out:
        return None
    flat = [t for i in inputs for t in (i if isinstance(i, list) else [i])]
    shapes = [[t.shape for t in i] if isinstance(i, list) else i.shape for i in inputs]
    given = dict(attrs)
    if name == "getitem":
        given["key"] = canonical_key(given["key"], x.shape)
    a = {**op.attrs, **given}
    if op.schema:
        a = op.validate(a, shapes, [t.dtype for t in flat])
    if op.canon is not None:
        a = op.canon(shapes, a)
    a.pop("device", None)
    bufs = [[t._buf for t in i] if isinstance(i, list) else i._buf for i in inputs]
    fn, ctx = kernel.fn, dev._ctx
    return lambda: fn(ctx, *bufs, **a)


def _inputs_of(label, x, y, c):
    """The op's tensor inputs in registry order, for a direct kernel call."""
    if label in ("add", "matmul"):
        return [x, y]
    if label == "concat":
        return [[x, y]]
    if label == "where":
        return [c, x, y]
    return [x]


def bench_ops(devices, number=1000, rounds=7, threads=1, sizes=(4, 64)) -> list:
    """Rows of the per-op table: per device, size and op, per-call seconds of anydevice, numpy,
    torch and the bare kernel (forward), and of anydevice and torch forward+backward."""
    import anydevice as ad

    torch = _torch(threads)
    table = _op_table(ad, torch)
    rows = []
    rng = np.random.default_rng(0)
    for n in sizes:
        host = [rng.standard_normal((n, n)).astype(np.float32) for _ in range(2)]
        host.append(host[0] > host[1])
        theirs = [torch.from_numpy(v.copy()) for v in host] if torch is not None else None
        for dev in devices:
            mine = [ad.asarray(v, device=dev) for v in host]
            for label, entry in table.items():
                res, res_b = _one_op(ad, torch, dev, label, entry, mine, host, theirs, number, rounds)
                rows.append({"device": dev, "size": n * n, "op": label, "forward": res, "backward": res_b,
                             "composite": label in COMPOSITES})
    return rows


def _one_op(ad, torch, dev, label, entry, mine, host, theirs, number, rounds):
    name, attrs, f_ad, f_np, f_t = entry
    sync = (lambda: _sync(mine[0])) if not dev.startswith("cpu") else None
    fwd = {"anydevice": _then(lambda: f_ad(*mine), sync)}
    kernel = _kernel_call(name, attrs, _inputs_of(label, *mine))
    if kernel is not None:
        fwd["kernel"] = _then(kernel, sync)
    if dev.startswith("cpu"):
        fwd["numpy"] = lambda: f_np(*host)
    if torch is not None:
        fwd["torch"] = lambda: f_t(*theirs)
    bwd = {"anydevice": _ad_backward(ad, f_ad, host[0], mine, dev, sync)}
    if torch is not None:
        bwd["torch"] = _torch_backward(torch, f_t, host[0], theirs)
    return _interleaved(fwd, number, rounds), _interleaved(bwd, max(number // 4, 10), rounds)


def _then(f, sync):
    if sync is None:
        return f
    return lambda: (f(), sync)[1]


def _ad_backward(ad, f, xn, mine, dev, sync):
    x = ad.asarray(xn, device=dev).requires_grad_()

    def step():
        ad.sum(f(x, *mine[1:])).backward()
        x.grad = None
        return sync

    return step


def _torch_backward(torch, f, xn, theirs):
    x = torch.from_numpy(xn.copy()).requires_grad_()

    def step():
        f(x, *theirs[1:]).sum().backward()
        x.grad = None

    return step


# --- the MLP training step ---------------------------------------------------------------------
def _digits(batch: int, notes: list):
    """Batches of the 8x8 digits (sklearn) scaled to [0, 1], in a shuffled order; random data without sklearn."""
    rng = np.random.default_rng(0)
    try:
        from sklearn.datasets import load_digits

        d = load_digits()
        x, y = (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)
    except ImportError:
        notes.append("scikit-learn is not installed: the MLP step trains on random data")
        x = rng.random((1797, 64), dtype=np.float32)
        y = rng.integers(0, 10, 1797)
    order = rng.permutation(len(x))
    return [(x[order[i:i + batch]], y[order[i:i + batch]]) for i in range(0, len(x) - batch + 1, batch)]


def bench_mlp(devices, steps=20, rounds=7, threads=1, notes=None, batch=256, lr=3e-3) -> dict:
    """Per-step seconds of the digits MLP (64-256-10, Adam) on each device and in torch, from the
    same initial weights and batches, and the final loss of each (the same number of steps)."""
    import anydevice as ad
    from anydevice import nn, optim

    notes = notes if notes is not None else []
    data = _digits(batch, notes)
    fns, losses = {}, {}
    for dev in devices:
        fns[f"anydevice {dev}"] = _ad_mlp(ad, nn, optim, data, dev, lr, losses)
    ad.manual_seed(0)
    weights = [p.numpy() for p in _mlp(nn).parameters()]
    torch = _torch(threads)
    if torch is not None:
        fns["torch"] = _torch_mlp(torch, weights, data, lr, losses)
    res = _interleaved(fns, steps, rounds)
    return {name: {**res[name], "final_loss": losses[name]()} for name in fns}


def _mlp(nn):
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))


def _ad_mlp(ad, nn, optim, data, dev, lr, losses):
    ad.manual_seed(0)  # the same initial weights on every device (drawn on the cpu, then moved)
    model = _mlp(nn).to(dev)
    opt = optim.Adam(model.parameters(), lr=lr)
    ce = nn.CrossEntropyLoss()
    batches = [(ad.asarray(x, device=dev), ad.asarray(y, device=dev)) for x, y in data]
    state = {"i": 0, "loss": None}

    def step():
        xb, yb = batches[state["i"] % len(batches)]
        state["i"] += 1
        loss = ce(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        state["loss"] = loss
        return sync

    def sync():
        _sync(state["loss"])

    losses[f"anydevice {dev}"] = lambda: float(state["loss"].item())
    return step


def _torch_mlp(torch, weights, data, lr, losses):
    step = _torch_step(torch, weights, data, lr)  # the same torch step the jit section times
    losses["torch"] = step.loss
    return step


def bench_large(dev="cpu", n=16 * 1024 * 1024):
    import anydevice as ad

    a_np = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    b_np = a_np.copy()
    a, b = ad.asarray(a_np, device=dev), ad.asarray(b_np, device=dev)

    def step():
        _sync(a + b)

    step()
    t_np, t_ad = _best_pair(lambda: np.add(a_np, b_np), step, 3)
    return 12 * n / t_np / 1e9, 12 * n / t_ad / 1e9


def bench_matmul(dev="cpu", n=1024):
    import anydevice as ad

    a_np = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    a = ad.asarray(a_np, device=dev)

    def step():
        _sync(a @ a)

    step()
    t_np, t_ad = _best_pair(lambda: a_np @ a_np, step, 3)
    return 2 * n ** 3 / t_np / 1e9, 2 * n ** 3 / t_ad / 1e9


# --- the report -------------------------------------------------------------------------------------
def _load() -> list:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:  # not available on this platform
        return []


def _us(s: dict) -> str:
    return f"{s['median'] * 1e6:8.2f} ({s['min'] * 1e6:.2f}-{s['max'] * 1e6:.2f})"


def _ratio(a: dict, b: dict | None) -> str:
    return f"{a['median'] / b['median']:5.2f}x" if b else "    -"


def _print_ops(rows) -> None:
    print("per-op table: median (min-max) us per call; ratios of medians; overhead = anydevice - kernel")
    head = f"  {'device':<9} {'n':>5} {'op':<13} {'anydevice':>24} {'kernel':>24} {'overhead':>9} {'numpy':>24} " \
           f"{'torch':>24} {'/torch':>7} {'fwd+bwd':>26} {'torch fwd+bwd':>26} {'/torch':>7}"
    print(head)
    for r in rows:
        f, b = r["forward"], r["backward"]
        k, npy, t = f.get("kernel"), f.get("numpy"), f.get("torch")
        over = f"{(f['anydevice']['median'] - k['median']) * 1e6:9.2f}" if k else f"{'-':>9}"
        print(f"  {r['device']:<9} {r['size']:>5} {r['op']:<13} {_us(f['anydevice']):>24} "
              f"{_us(k) if k else '-':>24} {over} {_us(npy) if npy else '-':>24} {_us(t) if t else '-':>24} "
              f"{_ratio(f['anydevice'], t):>7} {_us(b['anydevice']):>26} "
              f"{_us(b['torch']) if 'torch' in b else '-':>26} {_ratio(b['anydevice'], b.get('torch')):>7}")


def _print_mlp(res, threads) -> None:
    print(f"MLP step (digits 64-256-10, batch 256, Adam; {threads} thread(s)): median (min-max) us per step")
    torch_t = res.get("torch")
    cpu = next((v for k, v in res.items() if k.startswith("anydevice cpu")), None)
    for name, s in res.items():
        extra = f"   {_ratio(s, torch_t)} torch" if torch_t and name != "torch" else ""
        extra += f"   {_ratio(s, cpu)} anydevice cpu" if cpu and name.startswith("anydevice") and s is not cpu else ""
        print(f"  {name:<20} {_us(s):>26}   final loss {s['final_loss']:.6f}{extra}")


def _print_tiny(tiny) -> None:
    base = dict(tiny)["numpy add (4 x float32)"]
    torch_t = dict(tiny).get("torch CPU add")
    cpu_t = dict(tiny).get("anydevice cpu:0 a + b")
    print("tiny op (eager add, 4 x float32)")
    for name, t in tiny:
        extra = f"   {t / torch_t:5.2f}x torch" if torch_t else ""
        extra += f"   {t / cpu_t:5.2f}x anydevice cpu" if cpu_t else ""
        print(f"  {name:<34} {t * 1e6:8.2f} us   {t / base:5.2f}x numpy{extra}")


#: the sections of the report, in the order they run (``--only`` picks some)
SECTIONS = ("tiny", "ops", "mlp", "jit", "large", "matmul")


def _devices(spec) -> list:
    from anydevice.api import device

    if not spec:
        return [f"{t}:0" for t in device.get_all_device_type() if device.is_available(t)]
    out = []
    for s in spec:
        out += [d.strip() for d in s.split(",") if d.strip()]
    return [d if ":" in d else f"{d}:0" for d in out]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="anydevice bench", description=__doc__.split("\n")[0])
    p.add_argument("--device", action="append",
                   help="devices, comma-separated or repeated: cpu,npu,dcu,opencl (default: one of each available type)")
    p.add_argument("--quick", action="store_true", help="fewer repetitions and smaller sizes (CI)")
    p.add_argument("--threads", type=int, default=1, help="torch's intra-op threads and numpy's BLAS threads (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--no-torch", action="store_true", help="leave torch out even where it is installed")
    p.add_argument("--only", help=f"comma-separated sections to run (default all): {','.join(SECTIONS)}")
    args = p.parse_args(argv)
    _NO_TORCH[0] = args.no_torch
    notes: list = []
    only = set(SECTIONS) if not args.only else {s.strip() for s in args.only.split(",")}
    if only - set(SECTIONS):
        p.error(f"--only: unknown section(s) {sorted(only - set(SECTIONS))}; choose from {', '.join(SECTIONS)}")
    load_start = _load()
    devs = _devices(args.device)
    quick = args.quick
    tiny, ops, mlp, jit, large, mm = [], [], {}, {}, None, None
    with _blas_threads(args.threads, notes):
        if "tiny" in only:
            tiny = bench_tiny(devs, 2000 if quick else 20000)
        if "ops" in only:
            ops = bench_ops(devs, 30 if quick else 1000, 3 if quick else 7, args.threads)
        if "mlp" in only:
            mlp = bench_mlp(devs, 3 if quick else 20, 3 if quick else 7, args.threads, notes)
        if "jit" in only:
            jit = bench_jit(devs, 3 if quick else 20, 3 if quick else 7, args.threads, notes, torch=_torch(args.threads))
        if "large" in only:
            large = bench_large("cpu", 1024 * 1024 if quick else 16 * 1024 * 1024)
        if "matmul" in only:
            mm = bench_matmul("cpu", 256 if quick else 1024)
    if _torch(args.threads) is None:
        notes.append("torch left out (--no-torch)" if args.no_torch else
                     "torch is not installed (pip install anydevice[bench]): no torch columns")
    load_end = _load()
    if args.json:
        print(json.dumps({"load": {"start": load_start, "end": load_end}, "threads": args.threads, "devices": devs,
                          "notes": notes, "tiny_add_seconds": dict(tiny), "ops": ops, "mlp_step": mlp, "jit_mlp_step": jit,
                          "add16m_gbs": {"numpy": large[0], "anydevice_cpu": large[1]} if large else {},
                          "matmul1024_gflops": {"numpy": mm[0], "anydevice_cpu": mm[1]} if mm else {}}, indent=2))
        return 0
    print(f"load average at start: {load_start}   threads: {args.threads}")
    if tiny:
        _print_tiny(tiny)
    if ops:
        _print_ops(ops)
    if mlp:
        _print_mlp(mlp, args.threads)
    if jit:
        print_jit(jit)
    if large:
        size = "1M" if quick else "16M"
        print(f"{size}-element float32 add:  numpy {large[0]:6.1f} GB/s   anydevice cpu {large[1]:6.1f} GB/s   "
              f"ratio {large[1] / large[0]:.2f}")
    if mm:
        n = 256 if quick else 1024
        print(f"{n}x{n} float32 matmul: numpy {mm[0]:6.1f} GFLOP/s   anydevice cpu {mm[1]:6.1f} GFLOP/s   "
              f"ratio {mm[1] / mm[0]:.2f}")
    for note in notes:
        print(f"note: {note}")
    print(f"load average at end: {load_end}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
