"""Decompositions are as accurate as the reference where formulas usually go wrong.

The simulated npu, xpu and dcu implement primitives only, so expm1, log1p, tanh, sinh, cosh and the
others below run as decompositions there. Near 0 the textbook formulas (exp(x) - 1, log(1 + x),
1 - 2 / (e^2x + 1), (e^x - e^-x) / 2) lose all relative accuracy and the sign of -0; these tests
hold the decompositions to the conformance tolerance of their dtype, relative all the way down,
and show that the conformance suite fails a backend that runs the old formulas.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import anydevice as ad
import anydevice_conformance as adc
from anydevice import dispatch
from anydevice import dtypes as _dt
from anydevice.ops.registry import get_op, primitives
from anydevice.plugins import hookimpl
from anydevice.runtime import API_VERSION, DeviceTypeSpec, KernelTable
from anydevice_conformance import tolerances
from anydevice_conformance.runner import FAIL, PASS

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

SIM = ("npu", "xpu", "dcu")
TINY = np.concatenate([np.logspace(-8, -3, 11), -np.logspace(-8, -3, 11)])
#: tiny magnitudes, ±0, ordinary and large values
VALUES = np.concatenate([TINY, [0.0, -0.0, 0.03, -0.4, 0.9, -1.7, 2.5, -6.0, 15.0, -30.0, 80.0]])
REAL_OPS = ("expm1", "log1p", "tanh", "sinh", "cosh", "tan", "log2", "log10", "sigmoid", "gelu")
#: the formulas these decompositions replaced: each must fail conformance on values
OLD = {
    "expm1": lambda xp, x: xp.subtract(xp.exp(x), 1.0),
    "log1p": lambda xp, x: xp.log(xp.add(x, 1.0)),
    "tanh": lambda xp, x: 1.0 - 2.0 / (xp.exp(x * 2.0) + 1.0),
    "sinh": lambda xp, x: (xp.exp(x) - xp.exp(-x)) * 0.5,
}


class _Paths:
    def __init__(self):
        self.paths = set()

    def __call__(self, op, device, path, seconds, inputs, out):
        self.paths.add((op.name, path))


def _run(name, x, device, **attrs):
    # plans are kept per (device, dtype), not per attribute: gelu's erf form falls back on xpu (no
    # erf kernel) and would take its tanh form along; plan afresh
    get_op(name).plans.clear()
    rec = _Paths()
    dispatch.add_observer(rec)
    try:
        got = getattr(ad, name)(ad.asarray(x, device=device), **attrs).numpy()
    finally:
        dispatch.remove_observer(rec)
    return got, {p for n, p in rec.paths if n == name}


def _dtypes(device, kinds=("float",)):
    return [d for d in ad.asarray(0.0, device=device).device.dtypes if d.kind in kinds]


def _inputs(name, d):
    x = {"log1p": np.concatenate([VALUES[VALUES > -1], [-0.5, -0.999]]),
         "log2": np.abs(VALUES) + 1.0, "log10": np.concatenate([np.abs(VALUES), 1.0 + TINY])}.get(name, VALUES)
    return np.asarray(x, np.float64).astype(d.numpy)


def _check(name, x, got, attrs=None):
    """Max relative error of ``got`` against the reference, signed zeros included."""
    op = get_op(name)
    d = _dt.dtype(x.dtype)
    want = np.asarray(op.reference(x.astype(np.float64), **(attrs or {}))).astype(d.numpy)
    rtol = tolerances.for_op(op, d.name)[0]
    atol = tolerances.for_op(op, d.name)[1]
    g, w = got.astype(np.float64), want.astype(np.float64)
    err = np.abs(g - w)
    bad = ~((err <= atol + rtol * np.abs(w)) | (g == w) | (np.isnan(g) & np.isnan(w)))
    bad |= (w == 0) & (np.signbit(g) != np.signbit(w))
    where = [f"{name}({x[i]!r}) = {got[i]!r}, reference {want[i]!r}" for i in np.flatnonzero(bad)[:5]]
    assert not bad.any(), f"{int(bad.sum())} of {x.size} values off at rtol={rtol:g}: " + "; ".join(where)
    with np.errstate(all="ignore"):
        return float(np.max(np.where(w != 0, err / np.abs(w), 0.0)))


@pytest.mark.parametrize("name", REAL_OPS)
@pytest.mark.parametrize("device", SIM)
def test_decompositions_accurate_near_zero(device, name):
    attrs = {"approximate": "tanh"} if name == "gelu" else {}  # (erf, which gelu needs otherwise, is missing on xpu)
    for d in _dtypes(device):
        x = _inputs(name, d)
        got, paths = _run(name, x, device, **attrs)
        assert paths == {"decomposed"}, f"{name} on {device} ran {paths}, not its decomposition"
        _check(name, x, got, attrs)


@pytest.mark.parametrize("device", SIM)
def test_signed_zeros_kept(device):
    """f(-0) = -0 and f(+0) = +0 for the odd functions (and log1p, expm1), as the standard says."""
    for name in ("expm1", "log1p", "tanh", "sinh", "tan", "gelu"):
        for d in _dtypes(device):
            got, _ = _run(name, np.asarray([-0.0, 0.0], d.numpy), device)
            assert np.signbit(got.astype(np.float32)).tolist() == [True, False], f"{name} {d.name} on {device}: {got}"


@pytest.mark.parametrize("device", ("xpu", "dcu"))
def test_complex_decompositions_accurate_near_zero(device):
    """Complex tanh, sinh, cosh, tan, expm1 and log1p of tiny |z|: relative to |result|."""
    parts = np.concatenate([TINY[::4], [0.3, -1.1]])
    a, b = np.meshgrid(parts, parts)
    for d in _dtypes(device, ("complex",)):
        z = (a + 1j * b).reshape(-1).astype(d.numpy)
        rtol = tolerances.DEFAULT[d.name][0]
        for name in ("tanh", "sinh", "cosh", "tan", "expm1", "log1p", "log2", "sign"):
            got, paths = _run(name, z, device)
            assert paths == {"decomposed"}, (name, paths)
            want = np.asarray(get_op(name).reference(z.astype(np.complex128)))
            rel = np.abs(got - want) / np.abs(want)
            assert rel.max() <= rtol, f"{name} {d.name} on {device}: rel err {rel.max():.3g} at {z[rel.argmax()]}"


@pytest.mark.parametrize("device", ("cpu",) + SIM + ("opencl",))
def test_gelu_tanh_tail(device):
    """gelu(x, approximate='tanh') for very negative x is a tiny negative number or -0, never the
    -1.95e-3 that 0.5 x (1 + tanh(y)) gives when tanh stops one ulp short of -1."""
    if not ad.device.is_available(device):
        pytest.skip(f"{device} is not available here")
    for d in _dtypes(device):
        x = np.asarray([-65504.0, -1e4, -100.0, -12.0, -9.0, -5.0, -3.0], np.float64).astype(d.numpy)
        got, _ = _run("gelu", x, device, approximate="tanh")
        _check("gelu", x, got, {"approximate": "tanh"})
        g = got.astype(np.float32)
        assert np.all(np.signbit(g)) and np.all(g[:3] == 0), (d.name, got)  # -0 from x = -100 on


@pytest.mark.parametrize("device", ("cpu",) + SIM + ("opencl",))
def test_softmax_of_a_non_finite_scalar(device):
    if not ad.device.is_available(device):
        pytest.skip(f"{device} is not available here")
    for v, sm, lsm in ((math.nan, math.nan, math.nan), (math.inf, math.nan, math.nan), (2.0, 1.0, 0.0)):
        x = ad.asarray(np.float32(v), device=device)
        assert np.array_equal(ad.softmax(x).numpy(), np.float32(sm), equal_nan=True), (device, v)
        assert np.array_equal(ad.log_softmax(x).numpy(), np.float32(lsm), equal_nan=True), (device, v)


# --- the conformance suite fails the old formulas ---------------------------------------------------
class PrimitivesOnly:
    """A backend over host memory with the cpu's kernels for primitive ops only: every composite op
    runs its registry decomposition, as on the simulated accelerators."""

    @hookimpl
    def anydevice_api_version(self):
        return API_VERSION

    @hookimpl
    def anydevice_device_types(self):
        return [DeviceTypeSpec("cfprim", description="primitive kernels only")]

    @hookimpl
    def anydevice_create_runtime(self, device_type):
        from anydevice_cpu.runtime import CpuRuntime

        return CpuRuntime()

    @hookimpl
    def anydevice_register_kernels(self, device_type, runtime, kernels):
        from anydevice_cpu.kernels import register

        cpu = KernelTable("cpu")
        register(cpu)
        for op in primitives():
            k = cpu.lookup(op.name, None)
            kernels.register(op.name, k.fn, out=k.out)


@pytest.fixture(scope="module")
def cfprim():
    import fakes

    with fakes.installed(PrimitivesOnly(), name="cfprim", types=["cfprim"]):
        yield "cfprim"


def _values_case(name, dtype):
    (case,) = adc.run(devices=["cfprim"], ops=[name], dtypes=[dtype], checks=["values"]).cases
    return case


@pytest.mark.parametrize("name", sorted(OLD))
def test_conformance_fails_the_old_formula(cfprim, name, monkeypatch):
    for dtype in ("float32", "float64"):
        case = _values_case(name, dtype)
        assert (case.status, case.path) == (PASS, "decomposed"), case.message
    monkeypatch.setattr(get_op(name), "decomposition", OLD[name])
    for dtype in ("float32", "float64"):
        case = _values_case(name, dtype)
        assert case.status == FAIL and case.path == "decomposed", f"{name} {dtype}: {case.status} {case.message}"
        failed = [r.desc for r in case.samples if r.status == FAIL]
        assert any("tiny (1e-8 ... 1e-3)" in f or "special cases" in f for f in failed), failed
