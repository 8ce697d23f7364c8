"""``check=True``: compare a replay with eager execution of the same call.

Values are compared as the conformance suite compares an op with its oracle,
``|replayed - eager| <= atol + rtol * |eager|`` with NaN matching NaN, integers and booleans
exactly; the tolerances are wider than one op's because a graph chains many ops whose rounding
may differ once fused.
"""
from __future__ import annotations

import numpy as np

from anydevice.base.errors import AnyDeviceError
from anydevice.engine.tensor import Tensor
from anydevice.jit import state as _state

#: dtype name -> (rtol, atol)
TOLERANCE = {"float16": (1e-2, 1e-3), "bfloat16": (5e-2, 1e-2), "float32": (1e-4, 1e-6),
             "float64": (1e-9, 1e-12), "complex64": (1e-4, 1e-6), "complex128": (1e-9, 1e-12)}


class CheckError(AnyDeviceError):
    """A replayed graph gave a different result than eager execution."""


def _host(buf, v) -> np.ndarray:
    return np.asarray(v.device._backend.to_host(buf, v.device.index, v.shape, v.dtype))


def _close(a: np.ndarray, e: np.ndarray, dtype) -> tuple:
    if a.shape != e.shape:
        return False, f"shape {a.shape} vs {e.shape}"
    tol = TOLERANCE.get(dtype.name)
    if tol is None:
        bad = a != e
        return not bad.any(), f"{int(bad.sum())} of {a.size} elements differ"
    rtol, atol = tol
    a64, e64 = a.astype(np.complex128 if dtype.kind == "complex" else np.float64), e.astype(
        np.complex128 if dtype.kind == "complex" else np.float64)
    nan = (np.isnan(a64) & np.isnan(e64)) | (a64 == e64)  # equal infinities too (inf - inf is NaN)
    with np.errstate(invalid="ignore"):
        err = np.where(nan, 0.0, np.abs(a64 - e64))
    bad = ~(err <= atol + rtol * np.abs(e64)) & ~nan
    worst = float(np.nanmax(err)) if err.size else 0.0
    return not bad.any(), f"{int(bad.sum())} of {a.size} elements beyond rtol={rtol}, atol={atol} (max |error| {worst:.3g})"


def compare(name: str, variant, out: list, expected, flat) -> None:
    """Raise :class:`CheckError` unless the replay's outputs and write-backs match eager's
    (``expected``: what the eager call returned; the eager call has updated the state)."""
    g = variant.graph
    leaves: list = []
    _state.flatten(expected, leaves)
    tensors = [x for x in leaves if isinstance(x, Tensor)]
    problems = []
    for k, (v, b, t) in enumerate(zip(g.outputs, out, tensors)):
        ok, why = _close(_host(b, v), t.numpy(), v.dtype)
        if not ok:
            problems.append(f"output {k} ({v.type_str()}): {why}")
    wb = iter(out[variant.n_out:variant.n_out + variant.n_wb])
    for v, target in g.writebacks:
        got = None if v is None else next(wb)
        eager_buf = target.read(flat)
        if v is None or eager_buf is None:
            if (v is None) != (eager_buf is None):
                problems.append(f"{target}: {'None' if v is None else 'a tensor'} after the replay, "
                                f"{'None' if eager_buf is None else 'a tensor'} after eager execution")
            continue
        ok, why = _close(_host(got, v), _host(eager_buf, v), v.dtype)
        if not ok:
            problems.append(f"{target} ({v.type_str()}): {why}")
    if problems:
        raise CheckError(f"anydevice.jit check: {name}() replayed differs from eager execution:\n  "
                         + "\n  ".join(problems[:10]) + ("\n  ..." if len(problems) > 10 else ""))
