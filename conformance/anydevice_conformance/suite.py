"""Selecting devices, ops and dtypes, and running every case into a Report."""
from __future__ import annotations

import json
import re
import time
import warnings
from dataclasses import dataclass

import numpy as np

from . import runner

#: Device properties that tell one device model from another (with any ``*version*`` or ``*driver*`` key).
IDENTITY_KEYS = ("name", "model", "vendor", "platform", "compute_capability", "dtypes")


@dataclass(frozen=True)
class Target:
    """One device to test and the devices it stands for (identical models; itself first)."""

    device: object
    stands_for: tuple
    model: dict


def model_of(dev) -> dict:
    """The identity of ``dev``'s model: the properties in :data:`IDENTITY_KEYS`, and version and
    driver keys. A ``name`` that is only the device string (``npu:3``) is left out; a device kept
    visible although its probe rejected it is a model of its own."""
    try:
        props = dev._backend.properties(dev.index)
    except Exception as e:  # noqa: BLE001 - unknown identity: the device is tested on its own
        return {"device": str(dev), "properties": f"raised {type(e).__name__}: {e}"}
    ident = {k: v for k, v in props.items() if k in IDENTITY_KEYS or "version" in k or "driver" in k}
    if re.fullmatch(rf"{re.escape(dev.type)}:\d+", str(ident.get("name", ""))):
        del ident["name"]
    be = dev._backend
    bad = next((u for u in be.unusable if u.physical == be.phys(dev.index)), None)
    if bad is not None:
        ident["unusable"] = bad.reason
    return ident


def group_devices(devs) -> list:
    """Targets for ``devs``: one per distinct model, represented by its first device."""
    groups: dict = {}
    for d in devs:
        ident = model_of(d)
        key = json.dumps(ident, sort_keys=True, default=str)
        if key in groups:
            groups[key][1].append(str(d))
        else:
            groups[key] = (d, [str(d)], ident)
    return [Target(d, tuple(members), {k: v for k, v in ident.items() if k != "dtypes"})
            for d, members, ident in groups.values()]


def _type_devices(spec) -> list:
    """Every visible device of the type named by ``spec`` (the error of ``as_device`` if none)."""
    from anydevice.devices import as_device

    return list(as_device(spec)._backend.devices)


def resolve_targets(specs) -> list:
    """Device specs to :class:`Target` objects. ``"all"`` and a type without index (``"npu"``)
    cover every distinct model of the type; ``"npu:1"`` (or a Device) is exactly that device."""
    from anydevice import device as _device
    from anydevice.devices import as_device

    if isinstance(specs, str) or not hasattr(specs, "__iter__"):
        specs = [specs]
    out = []
    for s in specs:
        if isinstance(s, str) and s.strip().lower() == "all":
            for t in _device.get_all_device_type():
                if _device.is_available(t) and _device.device_count(t):
                    out += group_devices(_type_devices(t))
        elif isinstance(s, str) and ":" not in s:
            out += group_devices(_type_devices(s))
        else:
            out += group_devices([as_device(s)])
    seen, uniq = set(), []
    for t in out:
        if str(t.device) not in seen:
            seen.add(str(t.device))
            uniq.append(t)
    if not uniq:
        raise ValueError("no device to check: pass device specs like 'cpu' or 'npu:0', or 'all'")
    return uniq


def resolve_devices(specs) -> list:
    """The devices :func:`resolve_targets` tests."""
    return [t.device for t in resolve_targets(specs)]


def not_tested(targets, all_types=False) -> tuple:
    """``(unusable, unavailable)``: devices a probe rejected, of the types of ``targets`` (of every
    type with ``all_types``), and, with ``all_types``, the types that cannot be used here."""
    from anydevice import _backend
    from anydevice import device as _device

    types = list(dict.fromkeys(t.device.type for t in targets))
    unavailable = []
    if all_types:
        for t in _device.get_all_device_type():
            reason = _device.unavailable_reason(t)
            if reason is None:
                types += [t] if t not in types else []
            else:
                unavailable.append({"type": t, "reason": reason, "hint": _backend.unavailable_hint(t)})
    unusable = [dict(type=t, **u) for t in types for u in _device.unusable_devices(t)]
    return unusable, unavailable


def resolve_ops(names=None) -> list:
    from anydevice.ops.registry import all_ops, get_op

    ops = all_ops()
    if not names:
        return ops
    out = []
    for n in names:
        try:
            out.append(get_op(n))
        except KeyError as e:
            raise ValueError(e.args[0]) from None
    return out


def resolve_dtypes(names=None):
    from anydevice import dtypes as _dt

    if not names:
        return None
    return [_dt.dtype(n).name for n in names]


def resolve_checks(names=None):
    if not names:
        return None
    bad = [c for c in names if c not in runner.CHECKS]
    if bad:
        raise ValueError(f"unknown check(s) {', '.join(bad)}; allowed: {', '.join(runner.CHECKS)}")
    return list(names)


def device_info(target: Target) -> dict:
    dev = target.device
    be = dev._backend
    rec = be.record
    return {
        "device": str(dev), "type": dev.type, "plugin": rec.distribution or rec.name,
        "plugin_version": rec.version, "native_ops": len(be.kernels.ops()),
        "dtypes": [d.name for d in dev.dtypes], "stands_for": list(target.stands_for), "model": target.model,
    }


def wants_all(specs) -> bool:
    if isinstance(specs, str) or not hasattr(specs, "__iter__"):
        specs = [specs]
    return any(isinstance(s, str) and s.strip().lower() == "all" for s in specs)


class quiet_run:
    """Silence CPU-fallback warnings and numpy floating-point warnings while the suite runs."""

    def __enter__(self):
        from anydevice import dispatch

        self._mode = dispatch.set_fallback_mode("silent")
        self._err = np.seterr(all="ignore")
        self._warn = warnings.catch_warnings()
        self._warn.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)
        return self

    def __exit__(self, *exc):
        from anydevice import dispatch

        self._warn.__exit__(*exc)
        np.seterr(**self._err)
        dispatch.set_fallback_mode(self._mode)
        return False


def run(devices=("cpu",), ops=None, dtypes=None, checks=None, progress=None, no_fallback=False, compile=False):
    """``compile=True``: every sample runs through ``anydevice.jit.compile`` (traced, then replayed)."""
    from .report import Report

    targets = resolve_targets(devices)
    op_list = resolve_ops(ops)
    dts = resolve_dtypes(dtypes)
    chk = resolve_checks(checks)
    unusable, unavailable = not_tested(targets, wants_all(devices))
    t0 = time.time()
    cases = []
    timings = {}
    runner.COMPILE[0] = bool(compile)
    try:
        with quiet_run():
            for t in targets:
                dev = t.device
                t1 = time.perf_counter()
                for op in op_list:
                    if progress is not None:
                        progress(str(dev), op.name)
                    cases += runner.run_device_op(op, dev, dts, chk)
                timings[str(dev)] = time.perf_counter() - t1
    finally:
        runner.COMPILE[0] = False
    infos = [dict(device_info(t), seconds=round(timings[str(t.device)], 3)) for t in targets]
    return Report(cases, infos, started=t0, seconds=time.time() - t0,
                  selection={"ops": ops and list(ops), "dtypes": dts, "checks": chk, "compile": bool(compile)},
                  unusable=unusable, unavailable=unavailable, no_fallback=no_fallback)
