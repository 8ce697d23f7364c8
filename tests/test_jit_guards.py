"""A compiled function's guard as a generated function (jit/state.py:guard_function): the same
verdict as the reference :func:`holds` for every change of the state it describes."""
from __future__ import annotations

import math
import types

import numpy as np
import pytest

import anydevice as ad
from anydevice.jit import state


def _state():
    w = ad.asarray(np.ones((3, 2), np.float32))
    obj = types.SimpleNamespace(weight=w, lr=0.5, nan=math.nan, flags=[True, "x"], extra={"k": 1})
    return obj, state.walk([obj])


CHANGES = {
    "nothing": lambda o: None,
    "a plain value": lambda o: setattr(o, "lr", 0.25),
    "a plain value's type": lambda o: setattr(o, "lr", 1),
    "NaN stays NaN": lambda o: setattr(o, "nan", float("nan")),
    "NaN becomes a number": lambda o: setattr(o, "nan", 1.0),
    "a tensor's shape": lambda o: setattr(o, "weight", ad.asarray(np.ones((2, 3), np.float32))),
    "another tensor of the same kind": lambda o: setattr(o, "weight", ad.asarray(np.zeros((3, 2), np.float32))),
    "a tensor replaced by a number": lambda o: setattr(o, "weight", 3.0),
    "a list's size": lambda o: o.flags.append(False),
    "a list replaced": lambda o: setattr(o, "flags", [True, "x"]),
    "a dict entry removed": lambda o: o.extra.pop("k"),
    "an attribute removed": lambda o: delattr(o, "lr"),
    "an attribute added": lambda o: setattr(o, "new", 1),
    "a gradient appears": lambda o: setattr(o.weight, "requires_grad", True),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_generated_guard_agrees_with_holds(change):
    obj, w = _state()
    fn = state.guard_function(w.guard)
    assert fn() and state.holds(w.guard)
    try:
        CHANGES[change](obj)
    except (AttributeError, TypeError, ValueError):
        pytest.skip(f"{change}: not possible on this tensor")
    assert fn() == state.holds(w.guard)
    if change in ("nothing", "NaN stays NaN", "another tensor of the same kind"):
        assert fn()
    else:
        assert not fn(), change


def test_an_empty_guard_holds():
    assert state.guard_function([])() is True
