"""The checks of ``anydevice check``, run on one device type inside a worker.

Each check gets a :class:`Target` (the type, the selected devices, the backend) and returns
``(detail, metrics)``; it raises :class:`CheckFailed` for a wrong result and
:class:`CheckSkipped` when it does not apply. Checks that loop over devices do so through
:func:`each_device`, which records one outcome per device, so a failure names the devices that
failed. :func:`run_one` turns every outcome, exceptions included, into a :class:`CheckResult`.
"""
from __future__ import annotations

import gc
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
UNAVAILABLE, TIMED_OUT = "unavailable", "timed_out"

_CORE_BUG = "report it as an anydevice bug, with the output of `anydevice check --json`"
_BANDWIDTH_BYTES = 16 << 20
_ALLOC_BYTES = 1 << 20


class CheckFailed(Exception):
    """A check found a wrong result: ``detail`` says what, ``hint`` what to do, ``devices`` on which devices."""

    def __init__(self, detail: str, hint: str = "", metrics: dict | None = None, devices=None):
        super().__init__(detail)
        self.detail, self.hint, self.metrics = detail, hint, metrics or {}
        self.devices = [str(d) for d in devices] if devices else []


class CheckSkipped(Exception):
    """A check that does not apply (no float32, a missing optional module)."""


def _ignore(device) -> None:
    return None


@dataclass
class Target:
    """What one run checks of one device type. ``on_device`` is told which device a check is on."""

    type: str
    devices: list
    backend: object
    quick: bool = False
    on_device: object = _ignore
    outcomes: list = field(default_factory=list)

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
    devices: list = field(default_factory=list)      # per-device outcomes of checks that loop over devices
    failed_on: list = field(default_factory=list)    # devices the failure concerns

    def as_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "seconds": round(self.seconds, 6), "detail": self.detail,
                "hint": self.hint, "metrics": jsonable(self.metrics), "devices": self.devices,
                "failed_on": self.failed_on}


# --- helpers --------------------------------------------------------------------------------
def _ad():
    import anydevice

    return anydevice


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def where(exc: BaseException) -> str:
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


def describe(exc: BaseException) -> str:
    """``ExceptionType: message (raised at file.py:line in fn)``."""
    at = where(exc)
    return f"{type(exc).__name__}: {exc}" + (f" (raised at {at})" if at else "")


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


def _outcome(exc: BaseException, t: Target) -> tuple[str, str, str]:
    """(status, detail, hint) of an exception raised by a check."""
    from anydevice.base.errors import UnsupportedError

    if isinstance(exc, CheckSkipped):
        return SKIPPED, str(exc), ""
    if isinstance(exc, CheckFailed):
        return FAILED, exc.detail, exc.hint
    if isinstance(exc, UnsupportedError):
        return SKIPPED, f"not supported: {describe(exc)}", ""
    return FAILED, describe(exc), _hint(exc, t)


def each_device(t: Target, fn) -> list:
    """Run ``fn(device)`` on every selected device; returns what it returned on each.

    Records one outcome per device in ``t.outcomes``; raises :class:`CheckFailed` naming the failing
    devices if any failed, or :class:`CheckSkipped` if it applied to none.
    """
    values = []
    for dev in t.devices:
        t.on_device(dev)
        try:
            values.append(fn(dev))
            status, detail, hint = PASSED, "", ""
        except Exception as e:  # noqa: BLE001 - one device's failure must not hide the others'
            status, detail, hint = _outcome(e, t)
        t.outcomes.append({"device": str(dev), "status": status, "detail": detail, "hint": hint})
    mine = t.outcomes[-len(t.devices):]
    failed = [o for o in mine if o["status"] == FAILED]
    if failed:
        names = ", ".join(o["device"] for o in failed)
        more = f" (and {plural(len(failed) - 1, 'more failure')}: see devices in --json)" if len(failed) > 1 else ""
        raise CheckFailed(f"failed on {names}: {failed[0]['detail']}{more}", failed[0]["hint"],
                          devices=[o["device"] for o in failed])
    if all(o["status"] == SKIPPED for o in mine):
        raise CheckSkipped(mine[0]["detail"])
    return values


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


def _need_float32(dev) -> None:
    if _ad().float32 not in dev.dtypes:
        raise CheckSkipped(f"{dev} does not support float32")


def _stats(dev):
    from anydevice.base.errors import UnsupportedError

    try:
        return _ad().device.memory_stats(dev)
    except UnsupportedError:
        return None


def fmt_bytes(n) -> str:
    from anydevice.runtime.allocator import fmt_bytes as fmt

    return fmt(n)


def jsonable(v):
    """``v`` with only JSON types; non-finite floats become strings (strict JSON)."""
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [jsonable(x) for x in v]
    if isinstance(v, (np.generic,)):
        v = v.item()
    if isinstance(v, float) and not np.isfinite(v):
        return str(v)
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    return str(v)


# --- the checks -----------------------------------------------------------------------------
def check_properties(t: Target):
    """Device count and properties of every selected device."""
    props = each_device(t, lambda d: jsonable(_ad().device.get_device_properties(d)))
    p0 = props[0]
    mem = p0.get("total_memory")
    name = p0.get("name", str(t.first))
    about = [name] if name != str(t.first) else []
    if isinstance(mem, (int, float)) and mem:
        about.append(fmt_bytes(mem))
    about.append(plural(len(p0.get("dtypes", [])), "dtype"))
    detail = f"{plural(t.backend.count, 'device')} visible; {t.first}: {', '.join(about)}"
    return detail, {"count": t.backend.count, "checked": [str(d) for d in t.devices], "properties": props}


def _memory_on(t: Target, dev) -> bool:
    """1 MiB zero-filled on ``dev``, read back, freed; True when the device reports allocator statistics."""
    ad = _ad()
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
        return False
    if during["allocated"] < before["allocated"] + _ALLOC_BYTES:
        raise CheckFailed(f"{dev}: allocated memory grew by {during['allocated'] - before['allocated']} bytes "
                          f"for a {_ALLOC_BYTES}-byte tensor", _CORE_BUG)
    if after["allocated"] > during["allocated"] - _ALLOC_BYTES:
        raise CheckFailed(f"{dev}: freeing a 1 MiB tensor did not lower allocated memory "
                          f"({during['allocated']} -> {after['allocated']} bytes)", _CORE_BUG)
    return True


def check_memory(t: Target):
    """Allocate 1 MiB on every selected device, check it reads back as zeros, free it."""
    gc.collect()
    reported = all(each_device(t, lambda dev: _memory_on(t, dev)))
    free, total = t.backend.memory_info(t.first.index)
    stats = "memory statistics match" if reported else f"memory statistics not reported by {t.type}"
    detail = f"1 MiB allocated and freed on {plural(len(t.devices), 'device')}; {stats}"
    if total:
        detail += f"; {t.first}: {fmt_bytes(free)} free of {fmt_bytes(total)}"
    return detail, {"stats_reported": reported, "free_bytes": free, "total_bytes": total}


def _random_host(d, shape, rng) -> np.ndarray:
    n = int(np.prod(shape))
    if d.kind == "bool":
        return rng.integers(0, 2, n).astype(np.bool_).reshape(shape)
    return np.frombuffer(rng.bytes(n * d.itemsize), dtype=d.numpy).reshape(shape).copy()


def _roundtrip_on(t: Target, dev, rng) -> list:
    ad = _ad()
    for d in dev.dtypes:
        host = _random_host(d, (3, 37), rng)
        back = ad.asarray(host, dtype=d, device=dev).numpy()
        if back.dtype != host.dtype or back.shape != host.shape:
            raise CheckFailed(f"{dev} {d.name}: round trip gave {back.dtype}{back.shape}, sent {host.dtype}{host.shape}",
                              f"the copy_d2h/to_host path of the plugin ({t.plugin}) returns the wrong array")
        if back.tobytes() != host.tobytes():
            diff = np.frombuffer(back.tobytes(), np.uint8) != np.frombuffer(host.tobytes(), np.uint8)
            first = int(np.argmax(diff)) // d.itemsize
            raise CheckFailed(
                f"{dev} {d.name}: round trip is not bit-exact: {int(diff.sum())} bytes differ, first at element "
                f"{first} (sent {host.reshape(-1)[first].item()!r}, got {back.reshape(-1)[first].item()!r})",
                f"copies must preserve every bit (NaN payloads, -0.0, subnormals): fix copy_h2d/copy_d2h in the "
                f"plugin ({t.plugin})")
    return [d.name for d in dev.dtypes]


def check_roundtrip(t: Target):
    """Host → device → host must give back every bit, for every dtype each device claims."""
    rng = np.random.default_rng(1234)
    names = {n for got in each_device(t, lambda dev: _roundtrip_on(t, dev, rng)) for n in got}
    dts = [d.name for d in _ad().dtypes.ALL_DTYPES if d.name in names]
    return (f"{plural(len(dts), 'dtype')} bit-exact on {plural(len(t.devices), 'device')}",
            {"dtypes": dts, "devices": len(t.devices)})


def check_bandwidth(t: Target):
    """Copy bandwidth host→device and device→host with a 16 MiB buffer on the first device (best of 3)."""
    ad = _ad()
    dev = t.first
    t.on_device(dev)
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


def _compute_on(t: Target, dev, a, b) -> None:
    ad = _ad()
    _need_float32(dev)
    x, y = ad.asarray(a, device=dev), ad.asarray(b, device=dev)
    _compare(t, f"{dev} matmul (33x47 @ 47x29)", (x @ y).numpy(), a.astype(np.float64) @ b.astype(np.float64))
    _compare(t, f"{dev} sum", ad.sum(x).numpy(), a.astype(np.float64).sum())
    _compare(t, f"{dev} sum(axis=1)", ad.sum(x, axis=1).numpy(), a.astype(np.float64).sum(axis=1))
    _compare(t, f"{dev} max(axis=0)", ad.max(x, axis=0).numpy(), a.max(axis=0), rtol=0, atol=0)


def check_compute(t: Target):
    """A float32 matmul and reductions (sum, sum over an axis, max) on every device vs a float64 host reference."""
    rng = np.random.default_rng(42)
    a = rng.standard_normal((33, 47)).astype(np.float32)
    b = rng.standard_normal((47, 29)).astype(np.float32)
    each_device(t, lambda dev: _compute_on(t, dev, a, b))
    return f"matmul, sum and max match the host on {plural(len(t.devices), 'device')}", {}


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
    from anydevice import nn
    from anydevice import optim as optimizer

    ad = _ad()
    dev = t.first
    t.on_device(dev)
    _need_float32(dev)
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


def _streams_on(t: Target, dev) -> float:
    """A side stream under stream_guard, two events, a cross-stream wait on ``dev``; returns the event time."""
    ad = _ad()
    D = ad.device
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
    ms = e0.elapsed_time(e1)
    s.synchronize()
    _compare(t, f"{dev} x + x on a side stream", y.numpy(), h + h, rtol=0, atol=0)
    if not ms >= 0:
        raise CheckFailed(f"{dev}: elapsed_time() between two events was negative or NaN: {ms}",
                          f"fix elapsed_time in the plugin ({t.plugin})")
    return ms


def check_streams(t: Target):
    """A stream, two events and a cross-stream wait on every device; results must be ordered and correct."""
    ms = [m for m in each_device(t, lambda dev: _streams_on(t, dev)) if m is not None]
    return f"streams, events and waits behave on {plural(len(t.devices), 'device')}", {"event_ms": max(ms)}


def check_device_copy(t: Target):
    """Copy a tensor around the ring of selected devices (device-to-device), bit-exact."""
    ad = _ad()
    d = ad.float32 if ad.float32 in t.first.dtypes else t.first.dtypes[0]
    host = _random_host(d, (128, 33), np.random.default_rng(5))
    x = ad.asarray(host, dtype=d, device=t.first)
    ring = t.devices[1:] + [t.first]
    for dev in ring:
        t.on_device(dev)
        src = x.device
        x = x.to(dev)
        if x.device != dev:
            raise CheckFailed(f"Tensor.to({str(dev)!r}) returned a tensor on {x.device}", _CORE_BUG, devices=[dev])
        if x.numpy().tobytes() != host.tobytes():
            raise CheckFailed(f"copy {src} -> {dev} changed the data",
                              f"fix copy_p2p/copy_d2d in the plugin ({t.plugin})", devices=[src, dev])
    path = " -> ".join(str(d) for d in [t.first] + ring)
    copies = f"{len(ring)} device-to-device cop{'y' if len(ring) == 1 else 'ies'}"
    return f"{copies} bit-exact ({path})", {"copies": len(ring)}


def check_all_reduce(t: Target):
    """``all_reduce(op="sum")`` of one tensor per selected device; every device must get the sum."""
    ad = _ad()
    try:
        from anydevice import distributed
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
            raise CheckFailed(f"all_reduce put the result for {dev} on {o.device}", _CORE_BUG, devices=[dev])
        try:
            _compare(t, f"all_reduce(sum) result on {dev}", o.numpy(), want)
        except CheckFailed as e:
            raise CheckFailed(e.detail, e.hint, devices=[dev]) from None
    return f"all_reduce(sum) over {plural(n, 'device')} correct", {"devices": n}


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
#: Checks that use only the first selected device: a failure there is that device's.
FIRST_DEVICE_ONLY = ("bandwidth", "training")


def skip_reason(t: Target, when: str) -> str | None:
    if when == "full" and t.quick:
        return "skipped by --quick"
    if when == "multi" and len(t.devices) < 2:
        return f"needs 2 or more {t.type} devices"
    return None


def run_one(name: str, fn, t: Target) -> CheckResult:
    """Run one check, turning every outcome into a :class:`CheckResult` (never raises)."""
    from anydevice.engine import dispatch

    fallbacks: set = set()
    devs = {str(d) for d in t.devices}

    def observe(op, device, path, seconds, inputs, out):
        if path == dispatch.FALLBACK and str(device) in devs:
            fallbacks.add(getattr(op, "name", str(op)))

    t.outcomes = []
    dispatch.add_observer(observe)
    t0 = time.perf_counter()
    try:
        detail, metrics = fn(t)
        res = CheckResult(name, PASSED, 0.0, detail, "", metrics)
    except Exception as e:  # noqa: BLE001 - one broken check must not stop the report
        status, detail, hint = _outcome(e, t)
        res = CheckResult(name, status, 0.0, detail, hint, getattr(e, "metrics", {}))
        if status == FAILED:
            res.failed_on = getattr(e, "devices", []) or _concerned(name, t)
    finally:
        dispatch.remove_observer(observe)
    res.seconds = time.perf_counter() - t0
    res.devices = list(t.outcomes)
    if fallbacks:
        res.metrics["cpu_fallback_ops"] = sorted(fallbacks)
        res.detail += f" [ran on the CPU fallback: {', '.join(sorted(fallbacks))}]"
    return res


def _concerned(name: str, t: Target) -> list:
    """The devices a failure that did not name its device concerns."""
    return [str(t.first)] if name in FIRST_DEVICE_ONLY else [str(d) for d in t.devices]
