"""``anydevice check``: the health report of every installed backend.

For each device type it checks, in order: device properties, allocate/free, a bit-exact
host→device→host round trip of every dtype the device claims, copy bandwidth, a matmul and
reductions against a host reference, one training step (Linear → MSE → backward → Adam),
streams and events; with several devices also device-to-device copies and ``all_reduce``.
Each check is isolated: an exception becomes a failed check that names the error and
suggests a fix, and the next check (and the next device type) still runs.

The ``--json`` output is one document described in ``docs/CHECK.md`` (:data:`SCHEMA`).
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json as _json
import os
import platform
import re
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field

import numpy as np

SCHEMA_VERSION = 1
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
UNAVAILABLE = "unavailable"

_CORE_BUG = "report it as an anydevice bug, with the output of `anydevice check --json`"
_BANDWIDTH_BYTES = 16 << 20
_ALLOC_BYTES = 1 << 20


class CheckFailed(Exception):
    """A check found a wrong result: ``detail`` says what, ``hint`` what to do."""

    def __init__(self, detail: str, hint: str = "", metrics: dict | None = None):
        super().__init__(detail)
        self.detail, self.hint, self.metrics = detail, hint, metrics or {}


class CheckSkipped(Exception):
    """A check that does not apply (no float32, a missing optional module)."""


@dataclass
class Target:
    """What one run checks of one device type."""

    type: str
    devices: list
    backend: object
    quick: bool = False

    @property
    def plugin(self) -> str:
        rec = self.backend.record
        label = rec.distribution or rec.name
        return f"{label} {rec.version}" if rec.version else label

    @property
    def first(self):
        return self.devices[0]


@dataclass
class CheckResult:
    name: str
    status: str
    seconds: float
    detail: str = ""
    hint: str = ""
    metrics: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "seconds": round(self.seconds, 6), "detail": self.detail,
                "hint": self.hint, "metrics": _jsonable(self.metrics)}


# --- helpers --------------------------------------------------------------------------------
def _ad():
    import anydevice

    return anydevice


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _where(exc: BaseException) -> str:
    """``folder/file.py:line in function`` of the deepest frame outside the standard library."""
    import sysconfig

    stdlib = sysconfig.get_paths()["stdlib"]
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not (f.filename.startswith(stdlib) and "-packages" not in f.filename)]
    if not frames:
        return ""
    f = frames[-1]
    path = "/".join(f.filename.replace("\\", "/").split("/")[-2:])
    return f"{path}:{f.lineno} in {f.name}"


def _conformance_hint(t: Target, what: str) -> str:
    return (f"{what} on {t.type} differs from the host reference: run `anydevice conformance --device {t.type}` to "
            f"find the op at fault and report it to the plugin ({t.plugin})")


def _hint(exc: BaseException, t: Target) -> str:
    ad = _ad()
    if isinstance(exc, ad.OutOfMemoryError):
        return "free device memory (other processes may hold it) and run the check again"
    if isinstance(exc, ad.DeviceUnavailableError):
        return "the reason above says what is missing; fix it and run the check again"
    if isinstance(exc, ad.DeviceError):
        return (f"the device reported an error: run `anydevice check --device {t.type}` again; if it persists check "
                f"the driver/runtime logs and report it to the plugin ({t.plugin})")
    if isinstance(exc, ad.FallbackError):
        return "an op fell back to the CPU with ANYDEVICE_FALLBACK=error; unset it or implement the kernel"
    return (f"an unexpected error inside anydevice or the plugin ({t.plugin}); report it with the output of "
            f"`anydevice check --device {t.type} --json`")


def _first_mismatch(got: np.ndarray, want: np.ndarray, rtol: float, atol: float):
    bad = ~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    if not bad.any():
        return None
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
    return f"{int(bad.sum())} of {bad.size} values differ, max abs error {err:.3g}; first at {idx}: " \
           f"got {got[idx].item()!r}, expected {want[idx].item()!r} (rtol={rtol}, atol={atol})"


def _compare(t: Target, what: str, got, want, rtol=1e-4, atol=1e-5) -> None:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        raise CheckFailed(f"{what}: got shape {got.shape}, expected {want.shape}", _conformance_hint(t, what))
    msg = _first_mismatch(got, want, rtol, atol)
    if msg:
        raise CheckFailed(f"{what}: {msg}", _conformance_hint(t, what))


def _need_float32(t: Target, dev) -> None:
    if _ad().float32 not in dev.dtypes:
        raise CheckSkipped(f"{dev} does not support float32")


def _stats(dev):
    from .errors import UnsupportedError

    try:
        return _ad().device.memory_stats(dev)
    except UnsupportedError:
        return None


# --- the checks -----------------------------------------------------------------------------
def check_properties(t: Target):
    """Device count and properties of every selected device."""
    props = [_jsonable(_ad().device.get_device_properties(d)) for d in t.devices]
    p0 = props[0]
    mem = p0.get("total_memory")
    name = p0.get("name", str(t.first))
    about = [name] if name != str(t.first) else []
    if isinstance(mem, (int, float)) and mem:
        about.append(_fmt_bytes(mem))
    about.append(_plural(len(p0.get("dtypes", [])), "dtype"))
    detail = f"{_plural(t.backend.count, 'device')} visible; {t.first}: {', '.join(about)}"
    return detail, {"count": t.backend.count, "checked": [str(d) for d in t.devices], "properties": props}


def check_memory(t: Target):
    """Allocate 1 MiB on every selected device, check it reads back as zeros, free it."""
    ad = _ad()
    gc.collect()
    reported = True
    for dev in t.devices:
        d = ad.uint8 if ad.uint8 in dev.dtypes else dev.dtypes[0]
        n = _ALLOC_BYTES // d.itemsize
        before = _stats(dev)
        x = ad.zeros((n,), dtype=d, device=dev)
        during = _stats(dev)
        if np.count_nonzero(x.numpy()):
            raise CheckFailed(f"{dev}: a new zero-filled buffer of {n} {d.name} reads back non-zero",
                              f"the memset/fill path of the plugin ({t.plugin}) is broken")
        del x
        after = _stats(dev)
        if before is None:
            reported = False
            continue
        if during["allocated"] < before["allocated"] + _ALLOC_BYTES:
            raise CheckFailed(f"{dev}: allocated memory grew by {during['allocated'] - before['allocated']} bytes "
                              f"for a {_ALLOC_BYTES}-byte tensor", _CORE_BUG)
        if after["allocated"] > during["allocated"] - _ALLOC_BYTES:
            raise CheckFailed(f"{dev}: freeing a 1 MiB tensor did not lower allocated memory "
                              f"({during['allocated']} -> {after['allocated']} bytes)",
                              _CORE_BUG)
    free, total = t.backend.memory_info(t.first.index)
    stats = "memory statistics match" if reported else f"memory statistics not reported by {t.type}"
    detail = f"1 MiB allocated and freed on {_plural(len(t.devices), 'device')}; {stats}"
    if total:
        detail += f"; {t.first}: {_fmt_bytes(free)} free of {_fmt_bytes(total)}"
    return detail, {"stats_reported": reported, "free_bytes": free, "total_bytes": total}


def _random_host(d, shape, rng) -> np.ndarray:
    n = int(np.prod(shape))
    if d.kind == "bool":
        return rng.integers(0, 2, n).astype(np.bool_).reshape(shape)
    return np.frombuffer(rng.bytes(n * d.itemsize), dtype=d.numpy).reshape(shape).copy()


def check_roundtrip(t: Target):
    """Host → device → host must give back every bit, for every dtype each device claims."""
    ad = _ad()
    rng = np.random.default_rng(1234)
    names = set()
    for dev in t.devices:
        for d in dev.dtypes:
            host = _random_host(d, (3, 37), rng)
            back = ad.asarray(host, dtype=d, device=dev).numpy()
            if back.dtype != host.dtype or back.shape != host.shape:
                raise CheckFailed(f"{dev} {d.name}: round trip gave {back.dtype}{back.shape}, "
                                  f"sent {host.dtype}{host.shape}",
                                  f"the copy_d2h/to_host path of the plugin ({t.plugin}) returns the wrong array")
            if back.tobytes() != host.tobytes():
                diff = np.frombuffer(back.tobytes(), np.uint8) != np.frombuffer(host.tobytes(), np.uint8)
                first = int(np.argmax(diff)) // d.itemsize
                raise CheckFailed(
                    f"{dev} {d.name}: round trip is not bit-exact: {int(diff.sum())} bytes differ, first at element "
                    f"{first} (sent {host.reshape(-1)[first].item()!r}, got {back.reshape(-1)[first].item()!r})",
                    f"copies must preserve every bit (NaN payloads, -0.0, subnormals): fix copy_h2d/copy_d2h in the "
                    f"plugin ({t.plugin})")
            names.add(d.name)
    dts = [d.name for d in ad.dtypes.ALL_DTYPES if d.name in names]
    return (f"{_plural(len(dts), 'dtype')} bit-exact on {_plural(len(t.devices), 'device')}",
            {"dtypes": dts, "devices": len(t.devices)})


def check_bandwidth(t: Target):
    """Copy bandwidth host→device and device→host with a 16 MiB buffer on the first device (best of 3)."""
    ad = _ad()
    dev = t.first
    d = ad.uint8 if ad.uint8 in dev.dtypes else dev.dtypes[0]
    host = np.frombuffer(np.random.default_rng(7).bytes(_BANDWIDTH_BYTES), dtype=np.uint8)
    host = host[: _BANDWIDTH_BYTES // d.itemsize * d.itemsize].view(d.numpy) if d.kind != "bool" else host.astype(bool)
    h2d = d2h = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        x = ad.asarray(host, dtype=d, device=dev)
        ad.device.synchronize(dev)
        t1 = time.perf_counter()
        back = x.numpy()
        t2 = time.perf_counter()
        h2d, d2h = min(h2d, t1 - t0), min(d2h, t2 - t1)
        del x
    if back.tobytes() != host.tobytes():
        raise CheckFailed(f"{dev}: a 16 MiB copy did not come back intact",
                          f"large copies are corrupted: fix copy_h2d/copy_d2h in the plugin ({t.plugin})")
    gbps = lambda s: round(host.nbytes / max(s, 1e-9) / 1e9, 2)  # noqa: E731
    m = {"bytes": host.nbytes, "h2d_gbps": gbps(h2d), "d2h_gbps": gbps(d2h)}
    return f"{dev}: host→device {m['h2d_gbps']} GB/s, device→host {m['d2h_gbps']} GB/s (16 MiB)", m


def check_compute(t: Target):
    """A float32 matmul and reductions (sum, sum over an axis, max) on every device vs a float64 host reference."""
    ad = _ad()
    rng = np.random.default_rng(42)
    a = rng.standard_normal((33, 47)).astype(np.float32)
    b = rng.standard_normal((47, 29)).astype(np.float32)
    ref_mm = (a.astype(np.float64) @ b.astype(np.float64))
    for dev in t.devices:
        _need_float32(t, dev)
        x, y = ad.asarray(a, device=dev), ad.asarray(b, device=dev)
        _compare(t, f"{dev} matmul (33x47 @ 47x29)", (x @ y).numpy(), ref_mm)
        _compare(t, f"{dev} sum", ad.sum(x).numpy(), a.astype(np.float64).sum())
        _compare(t, f"{dev} sum(axis=1)", ad.sum(x, axis=1).numpy(), a.astype(np.float64).sum(axis=1))
        _compare(t, f"{dev} max(axis=0)", ad.max(x, axis=0).numpy(), a.max(axis=0), rtol=0, atol=0)
    return f"matmul, sum and max match the host on {_plural(len(t.devices), 'device')}", {}


def _reference_step(w, b, x, y, lr, betas, eps):
    """One Linear → MSE → Adam step in float64 numpy: (loss, dW, db, new W, new b)."""
    w, b, x, y = (v.astype(np.float64) for v in (w, b, x, y))
    diff = x @ w.T + b - y
    loss = float(np.mean(diff * diff))
    dpred = 2.0 * diff / diff.size
    grads = [dpred.T @ x, dpred.sum(axis=0)]
    new = []
    for p, g in zip((w, b), grads):
        m, v = (1 - betas[0]) * g, (1 - betas[1]) * g * g
        new.append(p - lr * (m / (1 - betas[0])) / (np.sqrt(v / (1 - betas[1])) + eps))
    return loss, grads, new


def check_training(t: Target):
    """One step of Linear(8, 4) → MSE → backward → Adam on the first device vs the same step on the host."""
    from . import nn, optimizer

    ad = _ad()
    dev = t.first
    _need_float32(t, dev)
    rng = np.random.default_rng(3)
    w0 = (rng.standard_normal((4, 8)) * 0.3).astype(np.float32)
    b0 = (rng.standard_normal(4) * 0.1).astype(np.float32)
    xs, ys = rng.standard_normal((16, 8)).astype(np.float32), rng.standard_normal((16, 4)).astype(np.float32)
    lr, betas, eps = 1e-2, (0.9, 0.999), 1e-8
    model = nn.Linear(8, 4, device=dev)
    model.load_state_dict({"weight": w0, "bias": b0})
    opt = optimizer.Adam(model.parameters(), lr=lr, betas=betas, eps=eps)
    loss = nn.mse_loss(model(ad.asarray(xs, device=dev)), ad.asarray(ys, device=dev))
    loss.backward()
    grads = [model.weight.grad.numpy(), model.bias.grad.numpy()]
    opt.step()
    want_loss, want_grads, want_new = _reference_step(w0, b0, xs, ys, lr, betas, eps)
    _compare(t, f"{dev} training loss", loss.numpy(), want_loss)
    _compare(t, f"{dev} weight gradient", grads[0], want_grads[0])
    _compare(t, f"{dev} bias gradient", grads[1], want_grads[1])
    _compare(t, f"{dev} weight after the Adam step", model.weight.numpy(), want_new[0])
    _compare(t, f"{dev} bias after the Adam step", model.bias.numpy(), want_new[1])
    value = float(loss.numpy())
    return f"{dev}: loss {value:.6f}, gradients and Adam update match the host", {"loss": value}


def check_streams(t: Target):
    """A stream, two events and a cross-stream wait on every device; results must be ordered and correct."""
    ad = _ad()
    D = ad.device
    ms = []
    for dev in t.devices:
        d = next((d for d in (ad.int32, ad.float32, ad.int64, ad.float64) if d in dev.dtypes), None)
        if d is None:
            raise CheckSkipped(f"{dev} supports none of int32, float32, int64, float64")
        h = np.arange(64).astype(d.numpy)
        x = ad.asarray(h, dtype=d, device=dev)
        s, default = D.Stream(dev), D.current_stream(dev)
        with D.stream_guard(s):
            if D.current_stream(dev) is not s:
                raise CheckFailed(f"{dev}: stream_guard() did not make the stream current", _CORE_BUG)
            e0, e1 = D.Event(dev), D.Event(dev)
            e0.record()
            y = x + x
            e1.record()
        if D.current_stream(dev) is not default:
            raise CheckFailed(f"{dev}: stream_guard() did not restore the previous stream", _CORE_BUG)
        default.wait_event(e1)
        e1.synchronize()
        if not (e1.query() and s.query()):
            raise CheckFailed(f"{dev}: an event/stream reports unfinished work after synchronize()",
                              f"query_event/query_stream of the plugin ({t.plugin}) must return True once work is done")
        ms.append(e0.elapsed_time(e1))
        s.synchronize()
        _compare(t, f"{dev} x + x on a side stream", y.numpy(), h + h, rtol=0, atol=0)
    if any(not (m >= 0) for m in ms):
        raise CheckFailed(f"elapsed_time() between two events was negative or NaN: {ms}",
                          f"fix elapsed_time in the plugin ({t.plugin})")
    return f"streams, events and waits behave on {_plural(len(t.devices), 'device')}", {"event_ms": max(ms)}


def check_device_copy(t: Target):
    """Copy a tensor around the ring of selected devices (device-to-device), bit-exact."""
    ad = _ad()
    d = ad.float32 if ad.float32 in t.first.dtypes else t.first.dtypes[0]
    host = _random_host(d, (128, 33), np.random.default_rng(5))
    x = ad.asarray(host, dtype=d, device=t.first)
    ring = t.devices[1:] + [t.first]
    for dev in ring:
        src = x.device
        x = x.to(dev)
        if x.device != dev:
            raise CheckFailed(f"Tensor.to({str(dev)!r}) returned a tensor on {x.device}", _CORE_BUG)
        if x.numpy().tobytes() != host.tobytes():
            raise CheckFailed(f"copy {src} -> {dev} changed the data",
                              f"fix copy_p2p/copy_d2d in the plugin ({t.plugin})")
    path = " -> ".join(str(d) for d in [t.first] + ring)
    copies = f"{len(ring)} device-to-device cop{'y' if len(ring) == 1 else 'ies'}"
    return f"{copies} bit-exact ({path})", {"copies": len(ring)}


def check_all_reduce(t: Target):
    """``all_reduce(op="sum")`` of one tensor per selected device; every device must get the sum."""
    ad = _ad()
    try:
        from . import distributed
    except ImportError as e:
        raise CheckSkipped(f"skipped: anydevice.distributed is not available ({e})") from None
    fn = getattr(distributed, "all_reduce", None)
    if fn is None:
        raise CheckSkipped("skipped: anydevice.distributed.all_reduce is not available")
    dev0 = t.first
    d = ad.float32 if ad.float32 in dev0.dtypes else ad.int32
    ts = [ad.full((4, 5), i + 1, dtype=d, device=dev) for i, dev in enumerate(t.devices)]
    res = fn(ts, op="sum")
    outs = list(res) if isinstance(res, (list, tuple)) else ts
    n = len(t.devices)
    want = np.full((4, 5), n * (n + 1) // 2, dtype=d.numpy)
    if len(outs) != n:
        raise CheckFailed(f"all_reduce returned {len(outs)} tensors for {n} devices", _CORE_BUG)
    for dev, o in zip(t.devices, outs):
        if o.device != dev:
            raise CheckFailed(f"all_reduce put the result for {dev} on {o.device}", _CORE_BUG)
        _compare(t, f"all_reduce(sum) result on {dev}", o.numpy(), want)
    return f"all_reduce(sum) over {_plural(n, 'device')} correct", {"devices": n}


#: (name, function, when): when is "always", "full" (skipped by --quick) or "multi" (needs ≥2 devices).
CHECKS = [
    ("properties", check_properties, "always"),
    ("memory", check_memory, "always"),
    ("roundtrip", check_roundtrip, "always"),
    ("bandwidth", check_bandwidth, "full"),
    ("compute", check_compute, "always"),
    ("training", check_training, "full"),
    ("streams", check_streams, "always"),
    ("device_copy", check_device_copy, "multi"),
    ("all_reduce", check_all_reduce, "multi"),
]


def run_one(name: str, fn, t: Target) -> CheckResult:
    """Run one check, turning every outcome into a :class:`CheckResult` (never raises)."""
    from . import dispatch

    fallbacks: set = set()
    devs = {str(d) for d in t.devices}

    def observe(op, device, path, seconds, inputs, out):
        if path == dispatch.FALLBACK and str(device) in devs:
            fallbacks.add(getattr(op, "name", str(op)))

    dispatch.add_observer(observe)
    t0 = time.perf_counter()
    try:
        detail, metrics = fn(t)
        res = CheckResult(name, PASSED, 0.0, detail, "", metrics)
    except CheckSkipped as e:
        res = CheckResult(name, SKIPPED, 0.0, str(e))
    except CheckFailed as e:
        res = CheckResult(name, FAILED, 0.0, e.detail, e.hint, e.metrics)
    except Exception as e:  # noqa: BLE001 - one broken check must not stop the report
        from .errors import UnsupportedError

        where = _where(e)
        detail = f"{type(e).__name__}: {e}" + (f" (raised at {where})" if where else "")
        if isinstance(e, UnsupportedError):
            res = CheckResult(name, SKIPPED, 0.0, f"not supported: {detail}")
        else:
            res = CheckResult(name, FAILED, 0.0, detail, _hint(e, t))
    finally:
        dispatch.remove_observer(observe)
    res.seconds = time.perf_counter() - t0
    if fallbacks:
        res.metrics["cpu_fallback_ops"] = sorted(fallbacks)
        res.detail += f" [ran on the CPU fallback: {', '.join(sorted(fallbacks))}]"
    return res


# --- environment and plugins ----------------------------------------------------------------
def environment() -> dict:
    """Versions of Python, numpy, anydevice and its plugin API, and the ANYDEVICE_* variables."""
    from importlib.metadata import PackageNotFoundError, version

    from .backend import API_VERSION, SUPPORTED_API_VERSIONS

    try:
        pluggy_v = version("pluggy")
    except PackageNotFoundError:
        pluggy_v = None
    return {
        "python": platform.python_version(), "python_executable": sys.executable, "platform": platform.platform(),
        "machine": platform.machine(), "numpy": np.__version__, "pluggy": pluggy_v, "anydevice": _ad().__version__,
        "plugin_api_version": API_VERSION, "supported_plugin_api_versions": list(SUPPORTED_API_VERSIONS),
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("ANYDEVICE_")},
    }


def _plugin_hint(rec) -> str:
    if rec.status == "failed":
        who = rec.distribution or rec.module_path or rec.name
        return f"reinstall or upgrade {who} (pip install --upgrade {who}); the reason above names the problem"
    if rec.status == "skipped" and "API version" in rec.reason:
        return f"install a release of {rec.distribution or rec.name} built for plugin API version(s) " \
               f"{', '.join(map(str, _supported()))}"
    return ""


def _supported():
    from .backend import SUPPORTED_API_VERSIONS

    return SUPPORTED_API_VERSIONS


def plugins() -> list:
    """Every discovered plugin with its status and, for loaded ones, each type's environment facts."""
    from .plugins.manager import LOADED, manager

    manager.load_all()
    out = []
    for rec in list(manager.records):
        d = rec.as_dict()
        d["hint"] = _plugin_hint(rec)
        d["environment"] = {}
        if rec.status == LOADED:
            for ty in rec.types:
                d["environment"][ty] = _environment_of(manager, rec, ty)
        out.append(_jsonable(d))
    return out


def _environment_of(manager, rec, device_type: str) -> dict:
    try:
        facts = manager.call(rec, "anydevice_environment", device_type=device_type)
    except Exception as e:  # noqa: BLE001 - a broken hook is reported, never raised
        return {"error": f"anydevice_environment() raised {type(e).__name__}: {e}"}
    if facts is None:
        return {}
    if not isinstance(facts, dict):
        return {"error": f"anydevice_environment() returned {type(facts).__name__}, expected a dict"}
    return facts


# --- selection ------------------------------------------------------------------------------
_SPEC = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?::\s*(\d+)\s*)?$")


def _default_types() -> list:
    types = _ad().device.get_all_device_type()
    return sorted(types, key=lambda t: (t != "cpu", t))


def select(devices=None) -> tuple[dict, dict]:
    """Resolve ``--device`` specs to ``{type: [indices] or None (all)}`` plus ``{spec: error}`` for bad ones."""
    from . import _backend

    if not devices:
        return {t: None for t in _default_types()}, {}
    if isinstance(devices, str):
        devices = [devices]
    chosen: dict = {}
    errors: dict = {}
    for spec in (s.strip() for item in devices for s in str(item).split(",")):
        if not spec:
            continue
        m = _SPEC.match(spec)
        if m is None:
            errors[spec] = (f"invalid device {spec!r}: expected TYPE or TYPE:INDEX with a non-negative integer index, "
                            "e.g. 'npu' or 'npu:1'")
            continue
        canon = _backend.canonical_type(m.group(1).lower())
        if canon is None:
            errors[spec] = _device_error(spec)
            continue
        if m.group(2) is None:
            chosen[canon] = None
        elif _ad().device.unavailable_reason(canon) is not None:
            chosen.setdefault(canon, None)
        else:
            err = _device_error(spec)
            if err:
                errors[spec] = err
            elif chosen.get(canon, []) is not None:
                chosen.setdefault(canon, [])
                if int(m.group(2)) not in chosen[canon]:
                    chosen[canon].append(int(m.group(2)))
    return chosen, errors


def _device_error(spec: str) -> str | None:
    from .devices import as_device

    try:
        as_device(spec)
    except (ValueError, TypeError, _ad().DeviceUnavailableError) as e:
        return str(e)
    return None


# --- running --------------------------------------------------------------------------------
def check_type(device_type: str, indices=None, quick: bool = False, requested: bool = False, progress=None) -> dict:
    """Check one device type; returns its entry of the report's ``devices`` object."""
    from . import _backend
    from .plugins.manager import manager

    ad = _ad()
    rec = manager.by_type.get(device_type)
    entry = {"type": device_type, "requested": requested, "status": UNAVAILABLE, "reason": "", "hint": "",
             "plugin": (rec.distribution or rec.name) if rec else None, "plugin_version": rec.version if rec else None,
             "description": "", "count": 0, "devices": [], "checks": [], "verdict": ""}
    if rec is not None and rec.specs.get(device_type) is not None:
        entry["description"] = rec.specs[device_type].description
    reason = ad.device.unavailable_reason(device_type)
    if reason is not None:
        entry["reason"] = reason
        entry["hint"] = "" if requested else "not selected explicitly, so it does not fail this run"
        entry["verdict"] = f"{device_type} is installed but unavailable: {reason}"
        return entry
    be = _backend.get_backend(device_type)
    devs = list(be.devices) if indices is None else [be.devices[i] for i in sorted(indices)]
    t = Target(device_type, devs, be, quick)
    entry.update(count=be.count, devices=[str(d) for d in devs])
    for name, fn, when in CHECKS:
        if progress is not None:
            progress(f"checking {device_type}: {name}")
        if when == "full" and quick:
            entry["checks"].append(CheckResult(name, SKIPPED, 0.0, "skipped by --quick").as_dict())
        elif when == "multi" and len(devs) < 2:
            entry["checks"].append(CheckResult(name, SKIPPED, 0.0, f"needs 2 or more {device_type} devices").as_dict())
        else:
            entry["checks"].append(run_one(name, fn, t).as_dict())
    failed = [c["name"] for c in entry["checks"] if c["status"] == FAILED]
    entry["status"] = FAILED if failed else PASSED
    entry["verdict"] = (
        f"anydevice works well on {_plural(len(devs), device_type + ' device')}." if not failed else
        f"anydevice does NOT work correctly on {device_type}: {len(failed)} of {len(entry['checks'])} checks failed "
        f"({', '.join(failed)})."
    )
    return entry


@contextlib.contextmanager
def _quiet_fallbacks():
    """Fallbacks are reported per check; silence their warnings and the 'error' mode meanwhile."""
    from . import dispatch

    old = dispatch.set_fallback_mode("silent")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dispatch.FallbackWarning)
            yield
    finally:
        dispatch.set_fallback_mode(old)


def run(devices=None, quick: bool = False, progress=None) -> dict:
    """Run the whole health check; returns the report (see :data:`SCHEMA`). Never raises for a device problem.

    ``progress``, when given, gets ``start(number of checks)`` and then ``step(description)`` before each check.
    """
    t0 = time.perf_counter()
    devices = [devices] if isinstance(devices, str) else list(devices or [])
    env = environment()
    plugs = plugins()
    selection, errors = select(devices)
    explicit = bool(devices)
    report_devices = {}
    if progress is not None:
        progress.start(len(selection) * len(CHECKS))
    with _quiet_fallbacks():
        for ty, idx in selection.items():
            report_devices[ty] = _check_type_safely(ty, idx, quick, explicit, progress and progress.step)
            report_devices[ty]["environment"] = _type_environment(plugs, ty)
    for spec, err in errors.items():
        report_devices[spec] = {
            "type": spec, "requested": True, "status": UNAVAILABLE, "reason": err,
            "hint": "run `anydevice check` without --device to list every installed device type",
            "plugin": None, "plugin_version": None, "description": "", "count": 0, "devices": [], "checks": [],
            "verdict": f"{spec}: {err}", "environment": {},
        }
    failing = [e for e in report_devices.values()
               if e["status"] == FAILED or (e["status"] == UNAVAILABLE and e["requested"])]
    code = 1 if failing or not report_devices else 0
    return {
        "schema_version": SCHEMA_VERSION, "options": {"devices": devices or None, "quick": quick},
        "environment": env, "plugins": plugs, "devices": report_devices,
        "verdict": _verdict(report_devices, failing), "exit_code": code,
        "seconds": round(time.perf_counter() - t0, 3),
    }


def _check_type_safely(ty, idx, quick, requested, progress) -> dict:
    try:
        return check_type(ty, idx, quick, requested, progress)
    except Exception as e:  # noqa: BLE001 - a bug outside any single check still gets a report entry
        where = _where(e)
        detail = f"{type(e).__name__}: {e}" + (f" (raised at {where})" if where else "")
        return {"type": ty, "requested": requested, "status": FAILED, "reason": detail,
                "hint": f"report it with the output of `anydevice check --device {ty} --json`", "plugin": None,
                "plugin_version": None, "description": "", "count": 0, "devices": [], "checks": [],
                "verdict": f"anydevice could not check {ty}: {detail}"}


def _type_environment(plugs: list, device_type: str) -> dict:
    for p in plugs:
        if device_type in p["environment"]:
            return p["environment"][device_type]
    return {}


def _verdict(devs: dict, failing: list) -> str:
    ok = [e for e in devs.values() if e["status"] == PASSED]
    if not devs:
        return "no device type was selected"
    if failing:
        return "anydevice has problems: " + " ".join(e["verdict"] for e in failing)
    parts = ", ".join(f"{_plural(len(e['devices']), e['type'] + ' device')}" for e in ok)
    return f"anydevice works well on {parts}." if ok else "no device type could be checked"


def _fmt_bytes(n) -> str:
    from .allocator import fmt_bytes

    return fmt_bytes(n)


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (np.generic,)):
        v = v.item()
    if isinstance(v, float) and not np.isfinite(v):
        return str(v)
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    return str(v)


# --- output ---------------------------------------------------------------------------------
_STYLE = {PASSED: "green", FAILED: "bold red", SKIPPED: "yellow", UNAVAILABLE: "dim", "loaded": "green",
          "failed": "bold red", "skipped": "yellow", "disabled": "dim", "discovered": "dim"}


def render(report: dict, console=None) -> None:
    """Print the report as tables: environment, plugins, checks per device type, verdicts."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text as T  # plain text cells: no markup, no emoji codes (":x:")

    c = console or Console()
    e = report["environment"]
    c.print(T(f"anydevice {e['anydevice']} (plugin API {e['plugin_api_version']}) · Python {e['python']} · "
              f"numpy {e['numpy']} · {e['platform']}", style="bold"))
    if e["env"]:
        c.print(T("environment: " + " ".join(f"{k}={v}" for k, v in e["env"].items())))
    pt = Table(title="plugins", title_justify="left")
    for col in ("plugin", "version", "types", "status", "reason"):
        pt.add_column(col, overflow="fold")
    for p in report["plugins"]:
        reason = p["reason"] + (f" → {p['hint']}" if p["hint"] else "")
        pt.add_row(T(p["distribution"] or p["name"]), T(str(p["version"] or "")), T(", ".join(p["device_types"])),
                   T(p["status"], style=_STYLE.get(p["status"], "")), T(reason))
    c.print(pt)
    ct = Table(title="checks", title_justify="left")
    for col, kw in (("type", {}), ("check", {}), ("result", {}), ("time", {"justify": "right"}),
                    ("detail", {"overflow": "fold"})):
        ct.add_column(col, **kw)
    for i, d in enumerate(report["devices"].values()):
        if i:
            ct.add_section()
        if d["status"] == UNAVAILABLE or not d["checks"]:
            tail = f" → {d['hint']}" if d["hint"] else ""
            style = "bold red" if d["requested"] or d["status"] == FAILED else _STYLE[UNAVAILABLE]
            ct.add_row(T(d["type"]), "", T(d["status"], style=style), "", T(d["reason"] + tail))
            continue
        seen: dict = {}
        for k, chk in enumerate(d["checks"]):
            detail = chk["detail"] + (f"\n→ {chk['hint']}" if chk["hint"] else "")
            if chk["status"] == FAILED and detail in seen:
                detail = f"same error as {seen[detail]}"
            elif chk["status"] == FAILED:
                seen[detail] = chk["name"]
            ct.add_row(T(d["type"] if k == 0 else ""), chk["name"], T(chk["status"], style=_STYLE[chk["status"]]),
                       f"{chk['seconds'] * 1e3:.0f} ms", T(detail))
    c.print(ct)
    for d in report["devices"].values():
        style = {PASSED: "green", FAILED: "bold red"}.get(d["status"], "red" if d["requested"] else "dim")
        c.print(T(d["verdict"], style=style))
    c.print(T(f"checked in {report['seconds']:.1f} s; exit status {report['exit_code']}"))


class _Progress:
    """Feeds a rich progress bar: ``start(total)`` once, then ``step(description)`` per check."""

    def __init__(self, bar):
        self.bar, self.task = bar, bar.add_task("discovering plugins", total=None)

    def start(self, total: int) -> None:
        self.bar.update(self.task, total=total)

    def step(self, description: str) -> None:
        self.bar.update(self.task, description=description, advance=1)


def _run_with_progress(devices, quick, console) -> dict:
    """Run with a transient progress bar (only used when stdout is a terminal)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

    cols = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*cols, console=console, transient=True) as bar:
        return run(devices, quick, progress=_Progress(bar))


def main(argv=None) -> int:
    """``anydevice check [--device TYPE[:N] ...] [--json] [--quick]``; returns the exit status."""
    p = argparse.ArgumentParser(
        prog="anydevice check",
        description="Check that every installed anydevice backend works: memory, copies, compute, training, "
                    "streams, and multi-device copies. Exit status 0 when every selected check passes, 1 otherwise.")
    p.add_argument("--device", "-d", action="append", metavar="TYPE[:N]",
                   help="check only this device type or device (repeatable, or comma separated); "
                        "default: every installed type (unavailable ones are listed without failing the run)")
    p.add_argument("--json", action="store_true", help="print one JSON document (schema in docs/CHECK.md)")
    p.add_argument("--quick", action="store_true", help="skip the bandwidth and training checks")
    try:
        args = p.parse_args(sys.argv[1:] if argv is None else list(argv))
    except SystemExit as e:
        return int(e.code or 0)
    return _report(args.device, args.quick, args.json)["exit_code"]


def _report(devices, quick: bool, as_json: bool, stream=None) -> dict:
    out = stream or sys.stdout
    if as_json:
        report = run(devices, quick)
        out.write(_json.dumps(report, indent=2, allow_nan=False) + "\n")
        return report
    from rich.console import Console

    console = Console(file=out)
    report = _run_with_progress(devices, quick, console) if console.is_terminal else run(devices, quick)
    render(report, console)
    return report


#: JSON Schema (draft 2020-12) of the ``--json`` document; docs/CHECK.md explains each field.
SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "anydevice check report",
    "type": "object",
    "required": ["schema_version", "options", "environment", "plugins", "devices", "verdict", "exit_code", "seconds"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "options": {
            "type": "object", "required": ["devices", "quick"],
            "properties": {"devices": {"type": ["array", "null"], "items": {"type": "string"}},
                           "quick": {"type": "boolean"}},
        },
        "environment": {
            "type": "object",
            "required": ["python", "numpy", "anydevice", "plugin_api_version", "supported_plugin_api_versions", "env"],
            "properties": {
                "python": {"type": "string"}, "numpy": {"type": "string"}, "anydevice": {"type": "string"},
                "plugin_api_version": {"type": "integer"},
                "supported_plugin_api_versions": {"type": "array", "items": {"type": "integer"}},
                "env": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "plugins": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "module", "distribution", "version", "device_types", "status", "reason",
                             "api_version", "hint", "environment"],
                "properties": {
                    "name": {"type": "string"}, "module": {"type": ["string", "null"]},
                    "distribution": {"type": ["string", "null"]}, "version": {"type": ["string", "null"]},
                    "device_types": {"type": "array", "items": {"type": "string"}},
                    "status": {"enum": ["discovered", "loaded", "skipped", "failed", "disabled"]},
                    "reason": {"type": "string"}, "hint": {"type": "string"},
                    "api_version": {},
                    "environment": {"type": "object", "additionalProperties": {"type": "object"}},
                },
            },
        },
        "devices": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["type", "requested", "status", "reason", "hint", "plugin", "plugin_version", "description",
                             "count", "devices", "checks", "verdict", "environment"],
                "properties": {
                    "type": {"type": "string"}, "requested": {"type": "boolean"},
                    "status": {"enum": [PASSED, FAILED, UNAVAILABLE]},
                    "reason": {"type": "string"}, "hint": {"type": "string"},
                    "plugin": {"type": ["string", "null"]}, "plugin_version": {"type": ["string", "null"]},
                    "description": {"type": "string"}, "count": {"type": "integer", "minimum": 0},
                    "devices": {"type": "array", "items": {"type": "string"}},
                    "checks": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["name", "status", "seconds", "detail", "hint", "metrics"],
                            "properties": {
                                "name": {"enum": [c[0] for c in CHECKS]},
                                "status": {"enum": [PASSED, FAILED, SKIPPED]},
                                "seconds": {"type": "number", "minimum": 0},
                                "detail": {"type": "string"}, "hint": {"type": "string"},
                                "metrics": {"type": "object"},
                            },
                        },
                    },
                    "verdict": {"type": "string"}, "environment": {"type": "object"},
                },
            },
        },
        "verdict": {"type": "string"},
        "exit_code": {"enum": [0, 1]},
        "seconds": {"type": "number", "minimum": 0},
    },
}


if __name__ == "__main__":
    sys.exit(main())
