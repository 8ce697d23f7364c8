"""Benchmarks of the cuda backend next to raw CuPy.

    python -m anydevice_cuda.bench OUTDIR [--budget SECONDS] [--device cuda:0]
    python -m anydevice_cuda.bench --summary OUTDIR

The first form writes ``OUTDIR/bench.json`` and ``OUTDIR/bench.md``; the second assembles
``OUTDIR/summary.md`` from what ``scripts/gpu-check`` left in OUTDIR (health check,
conformance, benchmarks, step log). Measured, each section on its own (a failing section is
recorded and the others still run):

- ``tiny_op``: host wall time of a 4-element float32 add (anydevice operator and function, raw
  CuPy), best of 5 loops, synchronized at the end of each loop: the per-op overhead.
- ``matmul``: n x n float32 and bfloat16 for n = 4096 and 8192, TFLOP/s (2n^3 per product) from
  CUDA events, anydevice next to ``cupy.matmul``; one 64 x 64 block checked against float64.
- ``add_bandwidth``: 64M-element float32 add, GB/s counting 12 bytes per element (two reads, one
  write), next to the theoretical peak from the memory clock and bus width of the device.
- ``interop``: DLPack zero-copy both ways with CuPy (and torch when it has CUDA), memory statistics,
  CPU fallbacks seen during the run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import numpy as np


def _best_loop(fn, sync, n=2000, repeats=5) -> float:
    """Seconds per call: best of ``repeats`` loops of ``n`` calls, each ending with ``sync()``."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def _events_cupy(cp, fn, iters, warmup=2) -> float:
    for _ in range(warmup):
        fn()
    cp.cuda.Device().synchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) / 1e3 / iters


def _events_anydevice(ad, dev, fn, iters, warmup=2) -> float:
    for _ in range(warmup):
        fn()
    ad.device.synchronize(dev)
    start, end = ad.device.Event(dev), ad.device.Event(dev)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def _iters_for(seconds_per_call: float, target=0.4, lo=3, hi=200) -> int:
    return int(max(lo, min(hi, target / max(seconds_per_call, 1e-9))))


# --- sections -----------------------------------------------------------------------------------
def tiny_op(ad, cp, dev):
    a = ad.asarray(np.arange(4, dtype=np.float32), device=dev)
    b = ad.asarray(np.ones(4, dtype=np.float32), device=dev)
    ca, cb = cp.asarray(np.arange(4, dtype=np.float32)), cp.asarray(np.ones(4, dtype=np.float32))
    na, nb = np.arange(4, dtype=np.float32), np.ones(4, dtype=np.float32)

    def sync():
        ad.device.synchronize(dev)

    res = {
        "anydevice_operator_us": _best_loop(lambda: a + b, sync) * 1e6,
        "anydevice_function_us": _best_loop(lambda: ad.add(a, b), sync) * 1e6,
        "cupy_operator_us": _best_loop(lambda: ca + cb, sync) * 1e6,
        "cupy_add_us": _best_loop(lambda: cp.add(ca, cb), sync) * 1e6,
        "numpy_host_us": _best_loop(lambda: na + nb, lambda: None) * 1e6,
    }
    res["overhead_ratio"] = res["anydevice_operator_us"] / res["cupy_operator_us"]
    return res


def matmul(ad, cp, dev, sizes, deadline):
    rows = []
    for n in sizes:
        for dname in ("float32", "bfloat16"):
            if time.monotonic() > deadline:
                rows.append({"n": n, "dtype": dname, "skipped": "time budget used up"})
                continue
            try:
                rows.append(_matmul_one(ad, cp, dev, n, dname))
            except Exception as e:  # noqa: BLE001 - recorded, the next size still runs
                rows.append({"n": n, "dtype": dname, "error": f"{type(e).__name__}: {e}"})
            ad.device.empty_cache(dev)
    return rows


def _matmul_one(ad, cp, dev, n, dname):
    rng = cp.random.default_rng(0)
    a = ad.from_dlpack(rng.standard_normal((n, n), dtype=cp.float32), device=dev)
    b = ad.from_dlpack(rng.standard_normal((n, n), dtype=cp.float32), device=dev)
    if dname != "float32":
        a, b = a.astype(getattr(ad, dname)), b.astype(getattr(ad, dname))
    ra, rb = a._buf, b._buf  # the same device arrays, for raw CuPy
    flops = 2.0 * n ** 3
    t1 = _events_cupy(cp, lambda: cp.matmul(ra, rb), 1, warmup=1)
    iters = _iters_for(t1)
    t_ad = _events_anydevice(ad, dev, lambda: a @ b, iters)
    t_cp = _events_cupy(cp, lambda: cp.matmul(ra, rb), iters)
    c = (a @ b)[0:64, 0:64].numpy().astype(np.float64)
    ref = a[0:64, :].numpy().astype(np.float64) @ b[:, 0:64].numpy().astype(np.float64)
    err = float(np.max(np.abs(c - ref)) / max(np.max(np.abs(ref)), 1e-30))
    return {"n": n, "dtype": dname, "iters": iters, "anydevice_tflops": flops / t_ad / 1e12,
            "cupy_tflops": flops / t_cp / 1e12, "ratio": t_cp / t_ad, "max_rel_error_64x64": err}


def add_bandwidth(ad, cp, dev, props, n=1 << 26):
    a = ad.from_dlpack(cp.random.default_rng(1).standard_normal(n, dtype=cp.float32), device=dev)
    b = ad.full((n,), 1.0, dtype=ad.float32, device=dev)
    ra, rb = a._buf, b._buf
    nbytes = 12.0 * n
    t1 = _events_cupy(cp, lambda: ra + rb, 1, warmup=1)
    iters = _iters_for(t1, target=0.3)
    t_ad = _events_anydevice(ad, dev, lambda: a + b, iters)
    t_cp = _events_cupy(cp, lambda: ra + rb, iters)
    peak = props.get("peak_bandwidth_gbs")
    ad_gbs, cp_gbs = nbytes / t_ad / 1e9, nbytes / t_cp / 1e9
    ok = bool(np.allclose((a + b)[:1024].numpy(), ra[:1024].get() + 1.0))
    return {"elements": n, "iters": iters, "anydevice_gbs": ad_gbs, "cupy_gbs": cp_gbs,
            "theoretical_gbs": peak, "anydevice_pct_of_peak": 100 * ad_gbs / peak if peak else None,
            "cupy_pct_of_peak": 100 * cp_gbs / peak if peak else None, "correct": ok}


def interop(ad, cp, dev):
    from anydevice import dispatch

    out = {}
    t = ad.arange(0, 1024, dtype=ad.float32, device=dev)
    c = cp.from_dlpack(t)
    out["dlpack_device"] = list(t.__dlpack_device__())
    out["to_cupy_zero_copy"] = c.data.ptr == t._buf.data.ptr
    back = ad.from_dlpack(c, device=dev)
    out["from_cupy_zero_copy"] = back._buf.data.ptr == c.data.ptr
    out["roundtrip_equal"] = back.tolist() == list(range(1024))
    try:
        import torch

        if torch.cuda.is_available():
            tt = torch.from_dlpack(t)
            out["to_torch_zero_copy"] = tt.data_ptr() == t._buf.data.ptr
            out["from_torch_zero_copy"] = ad.from_dlpack(tt, device=dev)._buf.data.ptr == tt.data_ptr()
        else:
            out["torch"] = "installed without CUDA"
    except ImportError:
        out["torch"] = "not installed"
    before = ad.device.memory_allocated(dev)
    big = ad.zeros((16 << 20,), dtype=ad.float32, device=dev)  # 64 MiB
    out["memory_allocated_delta_mib"] = (ad.device.memory_allocated(dev) - before) / 2 ** 20
    out["max_memory_allocated_mib"] = ad.device.max_memory_allocated(dev) / 2 ** 20
    out["memory_stats"] = ad.device.memory_stats(dev)
    del big
    out["cpu_fallbacks"] = {f"{op}@{d}": k for (op, d), k in dispatch.fallback_counts().items() if d.startswith("cuda")}
    return out


# --- driver -----------------------------------------------------------------------------------
def run(outdir: str, budget: float = 150.0, device: str = "cuda:0", sizes=(4096, 8192)) -> dict:
    import anydevice as ad

    os.makedirs(outdir, exist_ok=True)
    deadline = time.monotonic() + budget
    report: dict = {"device": device, "sections": {}}
    reason = ad.device.unavailable_reason("cuda")
    if reason:
        report["unavailable"] = reason
        return _write(outdir, report)
    import cupy as cp

    from anydevice.runtime.devices import as_device

    from .plugin import environment

    d = as_device(device)
    props = ad.device.get_device_properties(d)
    report["properties"], report["environment"] = _jsonable(props), environment()
    with cp.cuda.Device(d._backend.phys(d.index)):  # raw CuPy runs on the same GPU
        for name, fn in (("tiny_op", lambda: tiny_op(ad, cp, device)),
                         ("matmul", lambda: matmul(ad, cp, device, sizes, deadline)),
                         ("add_bandwidth", lambda: add_bandwidth(ad, cp, device, props)),
                         ("interop", lambda: interop(ad, cp, device))):
            t0 = time.monotonic()
            try:
                report["sections"][name] = fn()
            except Exception as e:  # noqa: BLE001 - one broken section must not hide the others
                report["sections"][name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
            report["sections"][name + "_seconds"] = round(time.monotonic() - t0, 2)
    return _write(outdir, report)


def _jsonable(x):
    return json.loads(json.dumps(x, default=str))


def _write(outdir, report):
    with open(os.path.join(outdir, "bench.json"), "w") as f:
        json.dump(_jsonable(report), f, indent=2)
    with open(os.path.join(outdir, "bench.md"), "w") as f:
        f.write(bench_markdown(report))
    return report


def _f(x, digits=2):
    return "—" if x is None else (f"{x:.{digits}f}" if isinstance(x, float) else str(x))


def bench_markdown(report: dict) -> str:
    if "unavailable" in report:
        return f"## Benchmarks\n\nNot run: {report['unavailable']}\n"
    p, s = report.get("properties", {}), report.get("sections", {})
    lines = ["## Benchmarks", "", f"Device: {p.get('name')} (compute capability {p.get('compute_capability')}, "
             f"{p.get('multiprocessors')} SMs, {_f((p.get('total_memory') or 0) / 2 ** 30, 1)} GiB)", ""]
    t = s.get("tiny_op", {})
    if "error" in t:
        lines += [f"Tiny op: error {t['error']}", ""]
    elif t:
        lines += ["### Tiny op (4-element float32 add, µs per op)", "", "| anydevice `a + b` | anydevice `add()` | "
                  "cupy `a + b` | cupy `add()` | numpy (host) | anydevice / cupy |", "|---|---|---|---|---|---|",
                  f"| {_f(t['anydevice_operator_us'])} | {_f(t['anydevice_function_us'])} | {_f(t['cupy_operator_us'])} | "
                  f"{_f(t['cupy_add_us'])} | {_f(t['numpy_host_us'])} | {_f(t['overhead_ratio'])}x |", ""]
    m = s.get("matmul")
    if isinstance(m, dict) and "error" in m:
        lines += [f"Matmul: error {m['error']}", ""]
    elif m:
        lines += ["### Matmul (TFLOP/s)", "", "| n | dtype | anydevice | cupy.matmul | anydevice/cupy | rel. error |",
                  "|---|---|---|---|---|---|"]
        for r in m:
            note = r.get("error") or r.get("skipped")
            lines.append(f"| {r['n']} | {r['dtype']} | " + (f"{note} | | | |" if note else
                         f"{_f(r['anydevice_tflops'], 1)} | {_f(r['cupy_tflops'], 1)} | {_f(r['ratio'])} | "
                         f"{r['max_rel_error_64x64']:.1e} |"))
        lines.append("")
    b = s.get("add_bandwidth", {})
    if "error" in b:
        lines += [f"Add bandwidth: error {b['error']}", ""]
    elif b:
        lines += ["### Elementwise add, 64M float32 (GB/s, 12 bytes/element)", "",
                  "| anydevice | cupy | theoretical peak | anydevice % of peak | correct |", "|---|---|---|---|---|",
                  f"| {_f(b['anydevice_gbs'], 0)} | {_f(b['cupy_gbs'], 0)} | {_f(b['theoretical_gbs'], 0)} | "
                  f"{_f(b['anydevice_pct_of_peak'], 0)} | {b['correct']} |", ""]
    i = s.get("interop", {})
    if i:
        keep = {k: v for k, v in i.items() if k not in ("memory_stats", "traceback")}
        lines += ["### Interop and memory", "", "```", json.dumps(keep, indent=1, default=str), "```", ""]
    return "\n".join(lines)


# --- summary.md ---------------------------------------------------------------------------------
def _load(outdir, name):
    try:
        with open(os.path.join(outdir, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def summary(outdir: str) -> str:
    """Write OUTDIR/summary.md from the files of one gpu-check run; returns its text."""
    lines = ["# anydevice cuda: GPU check", ""]
    steps = os.path.join(outdir, "steps.tsv")
    if os.path.exists(steps):
        lines += ["| step | exit | seconds |", "|---|---|---|"]
        with open(steps) as f:
            for row in f:
                parts = row.rstrip("\n").split("\t")
                if len(parts) == 3:
                    lines.append(f"| {parts[0]} | {parts[1]} | {parts[2]} |")
        lines.append("")
    env = _load(outdir, "environment.json")
    if env:
        lines += ["## Environment", "", "```", json.dumps(env, indent=1), "```", ""]
    smi = os.path.join(outdir, "nvidia-smi.txt")
    if os.path.exists(smi):
        with open(smi) as f:
            lines += ["```", "".join(f.readlines()[:14]).rstrip(), "```", ""]
    lines += _check_lines(_load(outdir, "check.json")) + _conformance_lines(_load(outdir, "conformance.json"))
    bench = _load(outdir, "bench.json")
    lines.append(bench_markdown(bench) if bench else "## Benchmarks\n\nNo bench.json (see gpu-check.log).\n")
    text = "\n".join(lines)
    with open(os.path.join(outdir, "summary.md"), "w") as f:
        f.write(text)
    return text


def _check_lines(check):
    if not check:
        return ["## Health check", "", "No check.json (see gpu-check.log).", ""]
    out = ["## Health check", "", f"Verdict: {check.get('verdict')}", ""]
    for t, d in (check.get("devices") or {}).items():
        out.append(f"- **{t}**: {d.get('status')} {d.get('reason') or ''}".rstrip())
        for c in d.get("checks") or []:
            if isinstance(c, dict):
                out.append(f"  - {c.get('name')}: {c.get('status')} {c.get('detail') or ''}".rstrip()[:300])
    return out + [""]


def _conformance_lines(conf):
    if not isinstance(conf, dict):
        return ["## Conformance", "", "No conformance.json (see gpu-check.log).", ""]
    out = ["## Conformance", "", f"All passed: {conf.get('ok')}", ""]
    for d in conf.get("devices") or []:
        out.append(f"- {d.get('device')}: cases {d.get('counts')}; ops by path {d.get('ops')}")
    fails = [c for c in conf.get("cases") or [] if c.get("status") == "fail"]
    if fails:
        out += ["", f"{len(fails)} failing case(s) (first 40):", "", "| op | dtype | check | message |", "|---|---|---|---|"]
        for c in fails[:40]:
            msg = str(c.get("message", "")).replace("|", "\\|").replace("\n", " ")[:200]
            out.append(f"| {c.get('op')} | {c.get('dtype')} | {c.get('check')} | {msg} |")
    return out + ["", "Full report: conformance.html / conformance.json", ""]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m anydevice_cuda.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("outdir")
    p.add_argument("--summary", action="store_true", help="only assemble OUTDIR/summary.md")
    p.add_argument("--budget", type=float, default=150.0, help="seconds for the matmul sizes (default 150)")
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--sizes", default="4096,8192", help="matmul sizes, comma separated")
    a = p.parse_args(argv)
    if a.summary:
        print(summary(a.outdir))
        return 0
    report = run(a.outdir, a.budget, a.device, tuple(int(s) for s in a.sizes.split(",") if s))
    print(bench_markdown(report))
    if "unavailable" in report:
        return 1
    return 1 if any(isinstance(v, dict) and "error" in v for v in report["sections"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
