"""The Array API standard's special cases of element-wise functions hold on every local device.

The cases come from one table (``anydevice_conformance.special_cases.TABLE``), transcribed from
the standard's "Special cases" sections (2024.12); every function of the table is checked at every
floating dtype the device supports, real and complex operands alike, and so are the array
object's operators that the standard gives special cases (``__add__``, ``__truediv__``, ``__pow__``,
...: the same tables), with tensors on both sides, with a Python float on either side and in place.
Where a device departs from a case for a reason, :data:`KNOWN` says so; the check requires the
departures to be exactly those, so the list cannot grow (or go stale) silently.
"""
from __future__ import annotations

import math
import operator
import re

import numpy as np
import pytest

import anydevice as ad
from anydevice import device as _device
from anydevice import dtypes as _dt
from anydevice.ops.registry import get_op
from anydevice_conformance import special_cases as sc

DEVICES = ("cpu", "npu", "xpu", "dcu", "opencl")
FLOATING = ("float", "complex")

#: The array object's operators with special cases in the standard -> the function whose table
#: they follow, and the operator.
OPERATORS = {
    "__abs__": ("abs", operator.abs), "__add__": ("add", operator.add), "__sub__": ("subtract", operator.sub),
    "__mul__": ("multiply", operator.mul), "__truediv__": ("divide", operator.truediv),
    "__floordiv__": ("floor_divide", operator.floordiv), "__mod__": ("remainder", operator.mod),
    "__pow__": ("pow", operator.pow), "__eq__": ("equal", operator.eq), "__ne__": ("not_equal", operator.ne),
}
#: In-place forms (the same special cases; the tensor is rebound to the result).
IN_PLACE = {"__iadd__": ("add", operator.iadd), "__isub__": ("subtract", operator.isub),
            "__imul__": ("multiply", operator.imul), "__itruediv__": ("divide", operator.itruediv),
            "__ifloordiv__": ("floor_divide", operator.ifloordiv), "__imod__": ("remainder", operator.imod),
            "__ipow__": ("pow", operator.ipow)}

#: Special cases a device does not follow, and why: (call, device type, dtype) -> reason. The
#: departures found must be exactly these.
KNOWN: dict = {}


def _dtypes(func: str, device: str) -> list:
    have = set(ad.asarray(0.0, device=device).device.dtypes)
    return [d for d in get_op(func).supported_dtypes if d.kind in FLOATING and d in have]


def _scalar_side(op, right: bool):
    """``op(tensor, x)`` (``right``) or ``op(x, tensor)`` with a Python float x: the cases grouped by
    that operand's value (its sign bit and NaN's included), one call per value."""
    def call(a, b):
        t, s_ = (a, b) if right else (b, a)
        tv, sv = t.numpy(), s_.numpy()
        out = None
        bits = sv.view(f"u{sv.dtype.itemsize}")
        for key in np.unique(bits):
            idx = np.flatnonzero(bits == key)
            x = float(sv[idx[0]])
            part = ad.asarray(tv[idx], device=t.device)
            r = (op(part, x) if right else op(x, part)).numpy()
            out = np.empty(tv.shape, r.dtype) if out is None else out
            out[idx] = r
        return out

    return call


def _departures(device) -> dict:
    """(call, device type, dtype) -> message of every special case the device does not follow."""
    checked = [(f, f, None, d) for f in sc.functions() for d in _dtypes(f, device)]
    assert len(checked) >= len(sc.functions())  # every function at some dtype at least
    checked += [(f, name, op, d) for name, (f, op) in OPERATORS.items() for d in _dtypes(f, device)]
    f32 = [d for d in _dtypes("add", device) if d is _dt.float32]
    for name, (f, op) in {**OPERATORS, **IN_PLACE}.items():
        if name == "__abs__":
            continue
        checked += [(f, f"{name}(tensor, float)", _scalar_side(op, True), d) for d in f32]
        checked += [(f, f"{name}(float, tensor)", _scalar_side(op, False), d) for d in f32 if name in OPERATORS]
    checked += [(f, name, op, d) for name, (f, op) in IN_PLACE.items() for d in f32]
    out = {}
    for f, label, call, d in checked:
        for m in sc.check(f, device, d, call=call, label=label):
            call_text = re.match(r"(.*?\)) on ", m).group(1)
            out[(call_text, device, d.name)] = m
    return out


@pytest.mark.filterwarnings("ignore::anydevice.engine.dispatch.FallbackWarning")
@pytest.mark.parametrize("device", DEVICES)
def test_special_cases_hold(device):
    if not _device.is_available(device):
        pytest.skip(f"{device}: {_device.unavailable_reason(device)}")
    bad = _departures(device)
    known = {k for k in KNOWN if k[1] == device}
    new = [m for k, m in bad.items() if k not in known]
    assert not new, f"{len(new)} special case(s) differ:\n" + "\n".join(new[:15])
    gone = sorted(known - set(bad))
    assert not gone, f"listed in KNOWN but now followed (remove them): {gone}"


def test_every_table_function_is_an_op_with_cases():
    for func in sc.functions():
        op = get_op(func)  # KeyError names a misspelled function
        kinds = {d.kind for d in op.supported_dtypes}
        n = len(sc.cases(func, False)) + (len(sc.cases(func, True)) if "complex" in kinds else 0)
        assert n > 0, f"{func}: no probe input matches any of its rows"


def test_every_row_matches_some_probe():
    """A row no probe value falls in would check nothing."""
    dead = [r.text for r in sc.ROWS if not any(r.text in t for c in sc.cases(r.func, r.complex) for t, _ in c.wants)]
    assert not dead, f"no probe input matches {dead}"


def _materialize(e: sc.Expect) -> list:
    """Concrete values a component expectation allows (both signs where the sign is open)."""
    v = e.value
    if isinstance(v, bool) or math.isnan(v) or e.signed or not (math.isinf(v) or v == 0):
        return [v]
    return [abs(v), -abs(v)]


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_rows_that_meet_agree(complex_):
    """Where several rows (or symmetries, or "as if" relations) apply to one input, some result
    satisfies all of them: the transcription has no contradictions."""
    for func in sc.functions():
        for c in sc.cases(func, complex_):
            candidates = []
            for _, alts in c.wants:
                for alt in alts:
                    if len(alt) == 1:
                        candidates += _materialize(alt[0])
                    else:
                        candidates += [complex(r, i) for r in _materialize(alt[0]) for i in _materialize(alt[1])]
            ok = any(all(sc._satisfies(v, alts, 1e-12) for _, alts in c.wants) for v in candidates)
            assert ok, f"{func}{c.args}: rows disagree: {[t for t, _ in c.wants]}"


def test_table_reads_the_standards_wording():
    """Spot checks of the parsing: sign handling, "as if", symmetries and expressions."""
    want = {t: alts for c in sc.cases("expm1", False) if c.args[0] == 0 and math.copysign(1, c.args[0]) < 0
            for t, alts in c.wants}
    assert [a[0].text() for alts in want.values() for a in alts] == ["-0"]
    # cos(z) as cosh(z * 1j): cos(+inf + 0j) takes cosh's row for (a = -0, b = +inf): NaN + 0j, sign open
    (case,) = [c for c in sc.cases("cos", True) if c.args[0] == complex(math.inf, 0.0)
               and math.copysign(1, c.args[0].imag) > 0]
    assert any("cos as if cosh" in t for t, _ in case.wants)
    # exp(+inf + 2.5j) is +inf * cis(2.5): -inf + inf j
    (case,) = [c for c in sc.cases("exp", True) if c.args[0] == complex(math.inf, 2.5)]
    (alts,) = [a for t, a in case.wants if t == "exp: a=+inf b=finite≠0 -> +inf*cos(b), +inf*sin(b)"]
    assert [e.value for e in alts[0]] == [-math.inf, math.inf]


def test_a_wrong_result_is_reported(monkeypatch):
    """The check fails where a device is wrong: tanh that loses the sign of -0 (the old
    decomposition 1 - 2 / (e^(2x) + 1)), run on the npu, which decomposes tanh."""
    op = get_op("tanh")
    monkeypatch.setattr(op, "decomposition", lambda xp, x: 1.0 - 2.0 / (xp.exp(x * 2.0) + 1.0))
    bad = sc.check("tanh", "npu", _dt.float32)
    assert any(m.startswith("tanh(-0) on npu:0 (float32) = +0; the standard says -0") for m in bad), bad


def test_a_nan_part_is_reported(monkeypatch):
    """Complex cosh as (e^z + e^-z) / 2 puts NaN into parts the standard fixes (NaN + 0j)."""
    op = get_op("cosh")
    monkeypatch.setattr(op, "decomposition", lambda xp, x: (xp.exp(x) + xp.exp(-x)) * 0.5)
    bad = sc.check("cosh", "dcu", _dt.complex64)
    assert any(m.startswith("cosh(NaN + +0j) on dcu:0 (complex64) = NaN + NaNj") for m in bad), bad


def test_isfinite_of_large_complex_parts():
    """3e38 + 3e38j is finite although |z| overflows float32."""
    for dev in ("cpu", "xpu", "dcu"):
        z = ad.asarray(np.asarray([3e38 + 3e38j, complex(math.inf, 1.0), complex(1.0, math.nan)], np.complex64),
                       device=dev)
        assert ad.isfinite(z).numpy().tolist() == [True, False, False], dev
        assert ad.isinf(z).numpy().tolist() == [False, True, False], dev


@pytest.mark.parametrize("device", DEVICES)
def test_pow_of_one_half_with_a_python_float(device):
    """x ** 0.5 is pow, not sqrt: (-inf) ** 0.5 is +inf and (-0) ** 0.5 is +0 (numpy's scalar
    exponent shortcut gives NaN and -0; the cpu and simulated kernels correct it)."""
    if not _device.is_available(device):
        pytest.skip(f"{device}: {_device.unavailable_reason(device)}")
    for d in (_dt.float16, _dt.bfloat16, _dt.float32):
        t = ad.asarray(np.asarray([-np.inf, -0.0, 4.0], np.float64).astype(d.numpy), device=device)
        got = np.asarray((t ** 0.5).numpy(), np.float64)
        assert got.tolist() == [math.inf, 0.0, 2.0] and not np.signbit(got[1]), (device, d.name, got)


def test_an_operator_with_a_python_float_is_checked():
    """The operator cases run the operator itself: one that takes ``x ** 0.5`` as sqrt(x) is caught."""
    def shortcut(t, x):
        return ad.sqrt(t) if x == 0.5 else t ** x

    bad = sc.check("pow", "cpu", _dt.float32, call=_scalar_side(shortcut, True), label="__pow__(tensor, float)")
    assert any(m.startswith("__pow__(tensor, float)(-inf, 0.5) on cpu:0 (float32) = -NaN") for m in bad), bad
    assert any(m.startswith("__pow__(tensor, float)(-0, 0.5) on cpu:0 (float32) = -0") for m in bad), bad


def test_nan_sign_bits_are_read_and_checked():
    """copysign and signbit tell NaN's sign bit apart: a copysign that reads only x2 < 0 (so -0 and a
    NaN with the sign bit count as positive) is reported for both."""
    assert any(math.isnan(c.args[0]) and math.copysign(1.0, c.args[0]) < 0 for c in sc.cases("signbit", False))

    def by_comparison(a, b):
        return ad.where(ad.less(b, 0.0), -ad.abs(a), ad.abs(a))

    bad = sc.check("copysign", "cpu", _dt.float32, call=by_comparison)
    assert any("x2=NaN-" in m for m in bad) and any("x2=-0" in m for m in bad), bad


#: clip's special cases (its bounds are Python scalars here): (what the standard says, x, min, max);
#: each result is NaN.
CLIP_NAN = (("x_i is NaN", math.nan, -1.0, 1.0), ("x_i is NaN, no bounds", math.nan, None, None),
            ("min_i is NaN", 0.5, math.nan, 1.0), ("min_i is NaN, no max", -3.0, math.nan, None),
            ("max_i is NaN", 0.5, -1.0, math.nan), ("max_i is NaN, no min", 3.0, None, math.nan))


@pytest.mark.parametrize("device", DEVICES)
def test_clip_special_cases(device):
    if not _device.is_available(device):
        pytest.skip(f"{device}: {_device.unavailable_reason(device)}")
    for d in [d for d in _dtypes("clip", device) if d.kind == "float"]:
        for text, x, lo, hi in CLIP_NAN:
            got = ad.clip(ad.asarray(np.asarray([x], np.float64).astype(d.numpy), device=device), min=lo, max=hi)
            assert np.isnan(np.asarray(got.numpy(), np.float64)).all(), (device, d.name, text, got.numpy())
