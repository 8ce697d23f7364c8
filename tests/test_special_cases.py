"""The Array API standard's special cases of element-wise functions hold on every local device.

The cases come from one table (``anydevice_conformance.special_cases.TABLE``), transcribed from
the standard's "Special cases" sections; every function of the table is checked at every
floating dtype the device supports, real and complex operands alike.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import anydevice as ad
from anydevice import device as _device
from anydevice import dtypes as _dt
from anydevice.ops.registry import get_op
from anydevice_conformance import special_cases as sc

DEVICES = ("cpu", "npu", "xpu", "dcu", "opencl")
FLOATING = ("float", "complex")


def _dtypes(func: str, device: str) -> list:
    have = set(ad.asarray(0.0, device=device).device.dtypes)
    return [d for d in get_op(func).supported_dtypes if d.kind in FLOATING and d in have]


@pytest.mark.filterwarnings("ignore::anydevice.engine.dispatch.FallbackWarning")
@pytest.mark.parametrize("device", DEVICES)
def test_special_cases_hold(device):
    if not _device.is_available(device):
        pytest.skip(f"{device}: {_device.unavailable_reason(device)}")
    checked = [(f, d) for f in sc.functions() for d in _dtypes(f, device)]
    assert len(checked) >= len(sc.functions())  # every function at some dtype at least
    bad = [m for f, d in checked for m in sc.check(f, device, d)]
    assert not bad, f"{len(bad)} special case(s) differ:\n" + "\n".join(bad[:15])


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
