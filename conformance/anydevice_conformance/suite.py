"""Selecting devices, ops and dtypes, and running every case into a Report."""
from __future__ import annotations

import time
import warnings

import numpy as np

from . import runner


def resolve_devices(specs) -> list:
    """Device specs to Device objects; ``"all"`` is every available device type (index 0)."""
    from anydevice import device as _device
    from anydevice.devices import as_device

    if isinstance(specs, str) or not hasattr(specs, "__iter__"):
        specs = [specs]
    out = []
    for s in specs:
        if isinstance(s, str) and s.strip().lower() == "all":
            for t in _device.get_all_device_type():
                if _device.is_available(t):
                    out.append(as_device(t))
        else:
            out.append(as_device(s))
    seen, uniq = set(), []
    for d in out:
        if str(d) not in seen:
            seen.add(str(d))
            uniq.append(d)
    if not uniq:
        raise ValueError("no device to check: pass device specs like 'cpu' or 'npu:0', or 'all'")
    return uniq


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


def device_info(dev) -> dict:
    be = dev._backend
    rec = be.record
    return {
        "device": str(dev), "type": dev.type, "plugin": rec.distribution or rec.name,
        "plugin_version": rec.version, "native_ops": len(be.kernels.ops()),
        "dtypes": [d.name for d in dev.dtypes],
    }


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


def run(devices=("cpu",), ops=None, dtypes=None, checks=None, progress=None):
    from .report import Report

    devs = resolve_devices(devices)
    op_list = resolve_ops(ops)
    dts = resolve_dtypes(dtypes)
    chk = resolve_checks(checks)
    t0 = time.time()
    cases = []
    timings = {}
    with quiet_run():
        for dev in devs:
            t1 = time.perf_counter()
            for op in op_list:
                if progress is not None:
                    progress(str(dev), op.name)
                cases += runner.run_device_op(op, dev, dts, chk)
            timings[str(dev)] = time.perf_counter() - t1
    infos = [dict(device_info(d), seconds=round(timings[str(d)], 3)) for d in devs]
    return Report(cases, infos, started=t0, seconds=time.time() - t0,
                  selection={"ops": ops and list(ops), "dtypes": dts, "checks": chk})
