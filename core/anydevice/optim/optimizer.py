"""The optimizer base class: parameter groups, per-parameter state, state dicts.

Every update is one fused registry op per parameter (``adam_update``, ``sgd_update``, ... in
:mod:`anydevice.ops.optim`) on the parameter's own device, run under :func:`anydevice.no_grad`:
a native kernel where the backend has one, else its decomposition into element-wise ops, so one
implementation serves every backend. Updates rebind each parameter to a new buffer, so tensors
computed from a parameter before the step keep their values.

Everything that changes from step to step is a tensor: the per-parameter ``step`` count is a 0-d
float32 tensor that the update op advances, and the bias corrections are computed from it on the
device, so a captured training step replays exactly. The hyper-parameters (``lr``, ``betas``, ...)
are attributes of the op: a scheduler that changes ``lr`` makes a captured step re-trace.

State follows its parameter: after ``Module.to(device)`` the next :meth:`Optimizer.step` moves the
parameter's state to the new device. float16 and bfloat16 parameters keep float32 state and a
float32 master copy of their values (``state[p]["master_param"]``); the parameter receives the
master rounded to its dtype after each step.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from anydevice import api as _api
from anydevice.base import dtypes as _dt
from anydevice.engine.graph import enable_grad, no_grad
from anydevice.engine.tensor import Tensor

__all__ = ["Optimizer"]

_LOW = (_dt.float16, _dt.bfloat16)


class Optimizer:
    """Holds parameter groups and per-parameter state; subclasses name their update op (``_op``),
    its state inputs (``_states``) and the op's options for a group (:meth:`_options`).

    ``params`` is an iterable of tensors (or a Module), or of dicts ``{"params": [...], **options}``
    whose options override ``defaults`` for that group.
    """

    #: option name -> check (``_positive``, ``_non_negative``, ``_unit``, ...); subclasses fill it
    _checks: dict = {}
    #: the update op's function: ``_op(param, grad, *states, step, **options) -> (param, *states, step)``
    _op = None
    #: names of the op's state inputs, in order
    _states: tuple = ()

    def __init__(self, params, defaults: dict):
        self.defaults = dict(defaults)
        self.param_groups: list[dict] = []
        self.state: dict = {}  # parameter -> {name: value}
        self.step_count = 0
        self._written: dict = {}  # low-precision parameter -> the buffer the last step gave it
        self._unused: dict = {}  # (device, dtype) -> the 0-d tensor passed for a state the options leave unused
        if hasattr(params, "parameters") and callable(params.parameters):
            params = params.parameters()
        if isinstance(params, Tensor):
            raise TypeError(f"{self._who()}: params must be an iterable of tensors or of dicts, not one Tensor; "
                            "wrap it in a list")
        groups = list(params)
        if not groups:
            raise ValueError(f"{self._who()}: got an empty parameter list")
        if not isinstance(groups[0], Mapping):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def _who(self) -> str:
        return f"{type(self).__name__}()"

    # --- groups ---------------------------------------------------------------------------
    def add_param_group(self, param_group: Mapping) -> None:
        """Add a group ``{"params": [...], **options}``; missing options take the defaults."""
        who = f"{type(self).__name__}.add_param_group()"
        if not isinstance(param_group, Mapping) or "params" not in param_group:
            raise TypeError(f"{who}: a parameter group is a dict with a 'params' list, got {type(param_group).__name__}")
        params = param_group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        if not params:
            raise ValueError(f"{who}: group {len(self.param_groups)} has an empty parameter list")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for i, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise TypeError(f"{who}: parameter {i} is a {type(p).__name__}, not a Tensor")
            if not p.requires_grad:
                raise ValueError(f"{who}: parameter {i} ({p.dtype.name}{list(p.shape)} on {p.device}) does not require "
                                 "grad; set requires_grad=True or leave it out")
            if not p.is_leaf:
                raise ValueError(f"{who}: parameter {i} is not a leaf tensor (it was computed from others); "
                                 "optimize the leaves, e.g. x.detach().requires_grad_()")
            if p.dtype.kind != "float":
                raise TypeError(f"{who}: parameter {i} is {p.dtype.name}; optimizers update real floating tensors")
            if id(p) in seen:
                raise ValueError(f"{who}: parameter {i} appears in more than one parameter group (or twice)")
            seen.add(id(p))
        unknown = [k for k in param_group if k != "params" and k not in self.defaults]
        if unknown:
            raise TypeError(f"{who}: unknown option(s) {unknown}; {type(self).__name__} takes {sorted(self.defaults)}")
        group = {"params": params, **self.defaults, **{k: v for k, v in param_group.items() if k != "params"}}
        self._validate(group, who)
        self.param_groups.append(group)

    def _validate(self, group: dict, who: str) -> None:
        for name, check in self._checks.items():
            group[name] = check(name, group[name], who)

    # --- learning rate (Paddle's names) ---------------------------------------------------------
    def get_lr(self) -> float:
        """The learning rate of the first parameter group."""
        return self.param_groups[0]["lr"]

    def set_lr(self, value: float) -> None:
        """Set the learning rate of every parameter group."""
        v = _positive("lr", value, f"{type(self).__name__}.set_lr()")
        for g in self.param_groups:
            g["lr"] = v

    # --- stepping -----------------------------------------------------------------------
    def step(self, closure=None):
        """Apply one update to every parameter that has a gradient.

        ``closure`` (optional) re-evaluates the model and returns the loss; it runs with gradients
        enabled before the update, and its result is returned.
        """
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        self.step_count += 1
        with no_grad():
            for group in self.param_groups:
                options, used = self._options(group), self._used(group)
                for p in group["params"]:
                    g = p.grad
                    if g is None:
                        continue
                    if g.device is not p.device:
                        raise ValueError(f"{type(self).__name__}.step(): gradient on {g.device} but parameter on "
                                         f"{p.device}; compute the loss on the parameter's device")
                    st = self.state.get(p)
                    if st is None:
                        st = self.state[p] = {"step": _api.zeros((), dtype=_dt.float32, device=p.device)}
                    self._step_one(p, g, st, group, options, used)
        return loss

    def _step_one(self, p: Tensor, g: Tensor, st: dict, group: dict, options: dict, used: tuple) -> None:
        dev = p.device
        step = st["step"]
        if type(step) is not Tensor or step.device is not dev:  # moved with its parameter, or an older state's int
            step = self._follow(p, st)
        dt = p.dtype
        low = dt is _dt.float16 or dt is _dt.bfloat16
        if low:
            w = self._master(p, st)
            g = g.astype(_dt.float32)
        else:
            if "master_param" in st:
                del st["master_param"]
            w = p
        states = []
        for n, u in zip(self._states, used):
            x = st.get(n) if u else self._placeholder(w)
            if x is None:
                x = st[n] = self._initial(n, w, group)
            states.append(x)
        out = self._op(w, g, *states, step, **options)
        for n, u, x in zip(self._states, used, out[1:]):
            if u:
                st[n] = x
        st["step"] = out[-1]
        w = out[0]
        if low:
            st["master_param"] = w
            w = w.astype(dt)
            self._written[p] = w._buf
        p._rebind(w)

    @staticmethod
    def _follow(p: Tensor, st: dict) -> Tensor:
        """Move ``p``'s state to ``p``'s device (all of it moves together) and make its step count
        a tensor; returns the step."""
        dev = p.device
        for k, v in st.items():
            if isinstance(v, Tensor) and v.device is not dev:
                st[k] = v.to(dev)
        if not isinstance(st["step"], Tensor):
            st["step"] = _step_tensor(st["step"], p)
        return st["step"]

    def _placeholder(self, w: Tensor) -> Tensor:
        key = (id(w.device), id(w.dtype))  # devices and dtypes live as long as the process
        t = self._unused.get(key)
        if t is None:
            t = self._unused[key] = _api.zeros((), dtype=w.dtype, device=w.device)
        return t

    def _initial(self, name: str, w: Tensor, group: dict) -> Tensor:
        """The value of state ``name`` before the first step (zeros; Adagrad starts elsewhere)."""
        return _api.zeros_like(w)

    def _options(self, group: dict) -> dict:
        """The update op's attributes for parameter group ``group``."""
        raise NotImplementedError

    def _used(self, group: dict) -> tuple:
        """Which of :attr:`_states` the options of ``group`` read (the others are never kept)."""
        return (True,) * len(self._states)

    def _master(self, p: Tensor, st: dict) -> Tensor:
        """The float32 copy of low-precision ``p``, made afresh when ``p`` was changed elsewhere."""
        m = st.get("master_param")
        if m is None or self._written.get(p) is not p._buf and m.device is p.device:
            # new, or ``p`` was set by someone else since the last step (moved state was moved above)
            m = p.detach().astype(_dt.float32)
        return m

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget every parameter's gradient (``set_to_none=False``: set it to zeros instead)."""
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none or p.grad is None:
                    p.clear_grad()
                else:
                    p.grad = _api.zeros_like(p.grad)

    clear_grad = zero_grad

    # --- state dicts --------------------------------------------------------------------
    def state_dict(self) -> dict:
        """``{"state": {index: {...}}, "param_groups": [{..., "params": [indices]}]}`` (PyTorch's layout).

        Parameters are numbered in group order; state values are the tensors themselves (on the
        parameter's device) and the per-parameter ``step`` is an int (read back from its tensor).
        ``anydevice.save`` writes it.
        """
        index: dict = {}
        groups = []
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            packed["params"] = [index.setdefault(id(p), len(index)) for p in g["params"]]
            groups.append(packed)
        state = {index[id(p)]: {k: _step_int(v) if k == "step" else v for k, v in st.items()}
                 for p, st in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: Mapping) -> None:
        """Restore what :meth:`state_dict` gave (this optimizer's groups must have the same sizes).

        State tensors (or numpy arrays) go to their parameter's device; floating ones take the
        parameter's dtype (float32 for float16/bfloat16 parameters). Everything is checked and
        converted before anything changes.
        """
        who = f"{type(self).__name__}.load_state_dict()"
        if not isinstance(state_dict, Mapping) or not {"state", "param_groups"} <= set(state_dict):
            raise TypeError(f"{who}: expected a mapping with 'state' and 'param_groups' (as state_dict() gives)")
        saved = list(state_dict["param_groups"])
        if len(saved) != len(self.param_groups):
            raise ValueError(f"{who}: the state has {len(saved)} parameter groups, this optimizer {len(self.param_groups)}")
        by_index, groups = {}, []
        for i, (mine, theirs) in enumerate(zip(self.param_groups, saved)):
            if len(theirs["params"]) != len(mine["params"]):
                raise ValueError(f"{who}: group {i} has {len(theirs['params'])} parameters in the state but "
                                 f"{len(mine['params'])} in this optimizer")
            by_index.update(zip(theirs["params"], mine["params"]))
            group = {**mine, **{k: v for k, v in theirs.items() if k != "params"}}
            self._validate(group, who)
            groups.append(group)
        state = {}
        for k, st in dict(state_dict["state"]).items():
            p = by_index.get(int(k))
            if p is None:
                raise KeyError(f"{who}: state for parameter {k!r}, but the groups name only {sorted(by_index)}")
            state[p] = {n: _step_tensor(v, p) if n == "step" else _state_value(v, p) for n, v in st.items()}
        self.param_groups, self.state = groups, state
        self._written = {p: p._buf for p in state if "master_param" in state[p]}

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            opts = ", ".join(f"{k}={v}" for k, v in g.items() if k != "params")
            lines.append(f"  group {i}: {len(g['params'])} parameters, {opts}")
        return "\n".join(lines + [")"])


def _step_int(v) -> int:
    return int(v.item()) if isinstance(v, Tensor) else int(v)


def _step_tensor(v, p: Tensor) -> Tensor:
    """The step count (an int, a number, a 0-d array or tensor) as a 0-d float32 tensor on ``p``'s device."""
    if isinstance(v, Tensor):
        v = v.item()
    return _api.asarray(float(np.asarray(v)), dtype=_dt.float32, device=p.device)


def _state_value(v, p: Tensor):
    if not isinstance(v, (Tensor, np.ndarray)):
        return v
    d = _dt.dtype(v.dtype) if isinstance(v, Tensor) else None
    dtype = None
    if d is None or d.kind == "float":
        dtype = _dt.float32 if p.dtype in _LOW else p.dtype
    t = _api.asarray(v, dtype=dtype, device=p.device)
    return t.detach() if isinstance(v, Tensor) else t


# --- option checks (name, value, who) -> value ---------------------------------------------
def _number(name, v, who) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise TypeError(f"{who}: {name} must be a finite number, got {v!r}")
    return float(v)


def _positive(name, v, who):
    v = _number(name, v, who)
    if not v > 0:
        raise ValueError(f"{who}: {name} must be > 0, got {v!r}")
    return v


def _non_negative(name, v, who):
    v = _number(name, v, who)
    if not v >= 0:
        raise ValueError(f"{who}: {name} must be >= 0, got {v!r}")
    return v


def _unit(name, v, who):
    """A number in [0, 1)."""
    v = _number(name, v, who)
    if not 0.0 <= v < 1.0:
        raise ValueError(f"{who}: {name} must be in [0, 1), got {v!r}")
    return v


def _betas(name, v, who):
    try:
        b1, b2 = v
    except (TypeError, ValueError):
        raise ValueError(f"{who}: {name} must be a pair of floats in [0, 1), got {v!r}") from None
    return (_unit(f"{name}[0]", b1, who), _unit(f"{name}[1]", b2, who))


def _flag(name, v, who):
    if not isinstance(v, bool):
        raise TypeError(f"{who}: {name} must be True or False, got {v!r}")
    return v
