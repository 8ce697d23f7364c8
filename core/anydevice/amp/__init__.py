"""Automatic mixed precision on any device: :class:`autocast` and :class:`GradScaler`.

Inside ``with anydevice.amp.autocast():`` every op follows its policy, defined once in the
registry (:mod:`anydevice.ops.amp`): matmul, linear, convolutions and attention run in the low
precision dtype; softmax, norms, losses and reductions run in float32; all other ops follow their
inputs. The low dtype is the device's: bfloat16 where the device has it, else float16 (or the
``dtype`` asked for, which the device must support). Parameters stay float32 — the master weights
— and gradients reach them in float32, because the casts are ordinary, differentiable ops.

:class:`GradScaler` scales the loss so that float16 gradients do not underflow, unscales the
gradients before the optimizer step, checks them for inf/NaN on the device (one read-back per
step and device) and skips the step and halves the scale when they are not finite.

Paddle spellings: ``auto_cast(enable=True, custom_white_list=None, custom_black_list=None,
level="O1", dtype="float16")`` and ``GradScaler(init_loss_scaling=...)``.
"""
from __future__ import annotations

import contextlib
import math
import warnings

from anydevice.base import dtypes as _dt
from anydevice.engine import autocast as _state
from anydevice.engine import dispatch as _dispatch
from anydevice.engine.dispatch import xp
from anydevice.engine.graph import no_grad
from anydevice.engine.tensor import Tensor
from anydevice.ops import amp as _policy
from anydevice.ops.registry import get_op
from anydevice.runtime.devices import as_device, current_device

__all__ = ["autocast", "auto_cast", "GradScaler", "low_dtype", "is_autocast_enabled", "get_autocast_dtype",
           "LOW", "FLOAT32", "policy"]

LOW, FLOAT32 = _policy.LOW, _policy.FLOAT32


def policy(op_name: str) -> str | None:
    """The op's policy in the current autocast region (its lists): ``"low"``, ``"float32"`` or None."""
    get_op(op_name)
    mode = _state.current()
    return _policy.policy(op_name, *((mode.low, mode.float32) if mode else (LOW, FLOAT32)))


def low_dtype(device=None):
    """The low-precision dtype autocast uses on ``device`` (default: the current device):
    bfloat16 where the device has it, else float16, else None (the device has neither)."""
    dev = as_device(device) if device is not None else current_device()
    have = set(dev._backend.dtypes(dev.index))
    for d in (_dt.bfloat16, _dt.float16):
        if d in have:
            return d
    return None


def _noop_observer(*args) -> None:
    """Registered while a region's lists name an element-wise op: the dispatcher's same-shape fast
    paths step aside while any observer is registered, so such ops go through the policy too."""


def _names(what: str, names) -> frozenset:
    if names is None:
        return frozenset()
    if isinstance(names, str):
        names = (names,)
    out = set()
    for n in names:
        if not isinstance(n, str):
            raise TypeError(f"autocast(): {what} must hold op names (str), not {type(n).__name__}")
        try:
            get_op(n)
        except KeyError as e:
            raise ValueError(f"autocast(): {what}: {e.args[0]}") from None
        out.add(n)
    return frozenset(out)


class autocast(contextlib.ContextDecorator):  # noqa: N801 - torch's spelling
    """Run the ops of a region in mixed precision (a context manager and a decorator).

    ``device_type``: the type whose tensors are cast (default: the current device's type);
    ``dtype``: the low dtype (default :func:`low_dtype` of that type's device 0);
    ``enabled=False`` turns autocast off inside an enclosing region;
    ``custom_white_list`` / ``custom_black_list``: op names to run in the low dtype / in float32
    in this region, in addition to (and taking precedence over) the registry's lists.
    """

    def __init__(self, device_type: str | None = None, dtype=None, enabled: bool = True, cache_enabled=None, *,
                 custom_white_list=None, custom_black_list=None):
        if not isinstance(enabled, bool):
            raise TypeError(f"autocast(): enabled must be a bool, not {type(enabled).__name__}")
        if device_type is not None and not isinstance(device_type, str):
            raise TypeError(f"autocast(): device_type must be a device type such as 'cpu' or 'npu', not "
                            f"{type(device_type).__name__}")
        dev = as_device(device_type.split(":")[0]) if device_type is not None else current_device()
        self.device_type = dev.type
        white, black = _names("custom_white_list", custom_white_list), _names("custom_black_list", custom_black_list)
        both = white & black
        if both:
            raise ValueError(f"autocast(): {', '.join(sorted(both))} in both custom_white_list and custom_black_list")
        self.low = (LOW - black) | white
        self.float32 = (FLOAT32 - white) | black
        self._fast_ops = any(get_op(n).category == "elementwise" for n in white | black)
        self.enabled = enabled
        if enabled:
            if dtype is None:
                d = low_dtype(dev)
                if d is None:
                    warnings.warn(f"autocast(): {dev.type} has neither bfloat16 nor float16; the region runs in the "
                                  f"inputs' dtypes (autocast disabled)", UserWarning, stacklevel=2)
                    self.enabled = False
            else:
                d = _dt.dtype(dtype)
                if d not in (_dt.float16, _dt.bfloat16):
                    raise ValueError(f"autocast(): dtype must be float16 or bfloat16, not {d.name}")
                dev._backend.check_dtype(dev.index, d)
            self.dtype = d
        else:
            self.dtype = None

    def __enter__(self):
        _state.push(_state.Mode(self.device_type, self.dtype, self.low, self.float32) if self.enabled else None)
        if self.enabled and self._fast_ops:
            _dispatch.add_observer(_noop_observer)
        return self

    def __exit__(self, *exc):
        if self.enabled and self._fast_ops:
            _dispatch.remove_observer(_noop_observer)
        _state.pop()
        return False


def auto_cast(enable: bool = True, custom_white_list=None, custom_black_list=None, level: str = "O1",
              dtype="float16", use_promote: bool = True):
    """Paddle's spelling of :class:`autocast` (level ``"O1"``: the per-op lists; ``"O2"`` is not offered)."""
    if level != "O1":
        raise ValueError(f"auto_cast(): level {level!r} is not supported; anydevice offers 'O1' (per-op lists, "
                         f"float32 master weights)")
    return autocast(None, dtype, enable, custom_white_list=custom_white_list, custom_black_list=custom_black_list)


def is_autocast_enabled() -> bool:
    return _state.current() is not None


def get_autocast_dtype():
    """The low dtype of the innermost open region, or None."""
    mode = _state.current()
    return mode.dtype if mode is not None else None


def _params(optimizer):
    groups = getattr(optimizer, "param_groups", None)
    if groups is not None:
        return [p for g in groups for p in g["params"]]
    params = getattr(optimizer, "params", None)
    if params is None:
        raise TypeError(f"GradScaler: {type(optimizer).__name__} has neither param_groups nor params")
    return list(params)


class GradScaler:
    """Dynamic loss scaling.

    ``scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()`` — ``step`` unscales
    the gradients (unless :meth:`unscale_` already did), skips ``optimizer.step()`` when any gradient
    is inf or NaN, and :meth:`update` then multiplies the scale by ``backoff_factor``; after
    ``growth_interval`` finite steps in a row it multiplies it by ``growth_factor``.
    """

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True, *, init_loss_scaling: float | None = None):
        if init_loss_scaling is not None:  # Paddle's name
            init_scale = init_loss_scaling
        for name, v, ok, allowed in (("init_scale", init_scale, lambda v: v > 0, "> 0"),
                                     ("growth_factor", growth_factor, lambda v: v > 1, "> 1"),
                                     ("backoff_factor", backoff_factor, lambda v: 0 < v < 1, "in (0, 1)")):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not ok(v):
                raise ValueError(f"GradScaler(): {name} must be a finite number {allowed}, not {v!r}")
        if isinstance(growth_interval, bool) or not isinstance(growth_interval, int) or growth_interval < 1:
            raise ValueError(f"GradScaler(): growth_interval must be an int >= 1, not {growth_interval!r}")
        self._scale = float(init_scale)
        self.growth_factor, self.backoff_factor = float(growth_factor), float(backoff_factor)
        self.growth_interval, self.enabled = growth_interval, bool(enabled)
        self._growth_tracker = 0
        self._unscaled: dict = {}   # id(optimizer) -> found_inf (bool), once unscaled this step
        self._found_inf_step = False

    # --- the training-step API ---------------------------------------------------------------------
    def scale(self, outputs):
        """``outputs`` (a tensor, or a list/tuple of tensors) multiplied by the current scale."""
        if not self.enabled:
            return outputs
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        if not isinstance(outputs, Tensor):
            raise TypeError(f"GradScaler.scale(): expected a Tensor, not {type(outputs).__name__}")
        return outputs * self._scale

    def unscale_(self, optimizer) -> None:
        """Divide the optimizer's gradients by the scale, in place, and check them for inf/NaN on
        their devices (the result is read back once, in :meth:`step`)."""
        if not self.enabled:
            return
        if id(optimizer) in self._unscaled:
            raise RuntimeError("GradScaler.unscale_() was already called for this optimizer since the last update()")
        inv = 1.0 / self._scale
        flags = {}
        with no_grad():
            for p in _params(optimizer):
                g = p.grad
                if g is None:
                    continue
                g = g * inv if g.dtype.kind in ("float", "complex") else g
                p.grad = g
                bad = xp.logical_not(xp.all(xp.isfinite(g)))
                key = g.device
                flags[key] = bad if key not in flags else xp.logical_or(flags[key], bad)
        self._unscaled[id(optimizer)] = flags

    def step(self, optimizer, *args, **kwargs):
        """``optimizer.step()`` unless a gradient is inf or NaN; returns what the step returns (or None)."""
        if not self.enabled:
            return optimizer.step(*args, **kwargs)
        if id(optimizer) not in self._unscaled:
            self.unscale_(optimizer)
        flags = self._unscaled[id(optimizer)]
        found = False
        if not isinstance(flags, bool):
            found = any(bool(f.item()) for f in flags.values())  # one read-back per device
            self._unscaled[id(optimizer)] = found
        else:
            found = flags
        self._found_inf_step = self._found_inf_step or found
        if found:
            return None
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale: float | None = None) -> None:
        """Adjust the scale after the step(s) of one iteration."""
        if not self.enabled:
            return
        if new_scale is not None:
            if isinstance(new_scale, Tensor):
                new_scale = float(new_scale.item())
            if not (isinstance(new_scale, (int, float)) and math.isfinite(new_scale) and new_scale > 0):
                raise ValueError(f"GradScaler.update(): new_scale must be a finite number > 0, not {new_scale!r}")
            self._scale = float(new_scale)
        elif self._found_inf_step:
            self._scale *= self.backoff_factor
            self._growth_tracker = 0
        elif self._unscaled:
            self._growth_tracker += 1
            if self._growth_tracker == self.growth_interval:
                self._scale *= self.growth_factor
                self._growth_tracker = 0
        self._unscaled.clear()
        self._found_inf_step = False

    # --- inspection and checkpoints ------------------------------------------------------------------
    def get_scale(self) -> float:
        return self._scale if self.enabled else 1.0

    def is_enabled(self) -> bool:
        return self.enabled

    def state_dict(self) -> dict:
        if not self.enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self.growth_factor, "backoff_factor": self.backoff_factor,
                "growth_interval": self.growth_interval, "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state: dict) -> None:
        if not self.enabled:
            return
        missing = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"} - set(state)
        if missing:
            raise KeyError(f"GradScaler.load_state_dict(): missing {', '.join(sorted(missing))}")
        self._scale = float(state["scale"])
        self.growth_factor, self.backoff_factor = float(state["growth_factor"]), float(state["backoff_factor"])
        self.growth_interval, self._growth_tracker = int(state["growth_interval"]), int(state["_growth_tracker"])

    def __repr__(self) -> str:
        return f"GradScaler(scale={self._scale:g}, growth_interval={self.growth_interval}, enabled={self.enabled})"
