"""The OpenCL index_in_range kernel (the value check of take, embedding, cross_entropy and
nll_loss): one fill and one launch; every integer dtype, values at and beyond the bounds, bounds
beyond the dtype's range, empty inputs; the errors of the ops that use it, as on the cpu."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("anydevice_opencl")

from opencl_support import needs_opencl, no_fallback, spy_launches  # noqa: E402, F401

import anydevice as ad  # noqa: E402

pytestmark = [needs_opencl, pytest.mark.usefixtures("no_fallback")]
RNG = np.random.default_rng(9)
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


def _both(x, low, high):
    got = bool(ad.index_in_range(ad.asarray(x, device="opencl"), low=low, high=high))
    want = bool(ad.index_in_range(ad.asarray(x), low=low, high=high))
    return got, want


@pytest.mark.parametrize("dtype", INTS)
def test_matches_cpu_at_the_bounds(dtype):
    info = np.iinfo(dtype)
    x = RNG.integers(0, min(int(info.max), 100), 1000).astype(dtype)
    lo, hi = int(x.min()), int(x.max())
    for low, high in [(lo, hi + 1), (lo, hi), (lo + 1, hi + 1), (lo - 1, hi + 2), (0, 1), (hi + 1, hi + 5),
                      (int(info.min) - 5, int(info.max) + 5), (int(info.min), int(info.max)),
                      (int(info.max) + 1, int(info.max) + 9), (int(info.min) - 9, int(info.min))]:
        got, want = _both(x, low, high)
        assert got == want == (x.size == 0 or (int(x.min()) >= low and int(x.max()) < high)), (low, high)


def test_extreme_values_of_the_widest_types():
    x = np.array([0, 2**64 - 1], np.uint64)
    assert _both(x, 0, 2**64) == (True, True)
    assert _both(x, 0, 2**64 - 1) == (False, False)
    y = np.array([-2**63, 2**63 - 1], np.int64)
    assert _both(y, -2**63, 2**63) == (True, True)
    assert _both(y, -2**63 + 1, 2**63) == (False, False)
    assert _both(y, -2**63, 2**63 - 1) == (False, False)


def test_empty_is_in_range():
    for low, high in ((0, 1), (5, 0), (2**70, 2**71)):
        assert _both(np.zeros(0, np.int64), low, high) == (True, True)


def test_one_launch(monkeypatch):
    seen = spy_launches(monkeypatch)
    x = ad.asarray(RNG.integers(0, 10, 5000), device="opencl")
    assert bool(ad.index_in_range(x, low=0, high=10)) and not bool(ad.index_in_range(x, low=0, high=9))
    assert [s[0] for s in seen] == ["inrange", "inrange"], seen


@pytest.mark.parametrize("call", [lambda d: ad.cross_entropy(ad.zeros((3, 4), device=d), ad.asarray([0, 4, 1], device=d)),
                                  lambda d: ad.take(ad.zeros(5, device=d), ad.asarray([0, -6], device=d)),
                                  lambda d: ad.take(ad.zeros(5, device=d), ad.asarray([5], device=d))])
def test_errors_of_the_ops_that_check(call):
    with pytest.raises(IndexError) as on_cpu:
        call("cpu")
    with pytest.raises(IndexError) as on_cl:
        call("opencl")
    assert str(on_cl.value) == str(on_cpu.value)
