"""Learning-rate schedulers with PyTorch's formulas.

    sched = StepLR(opt, step_size=30, gamma=0.1)
    for epoch in range(100):
        train(...); sched.step()

Each scheduler sets ``group["lr"]`` of its optimizer's groups from the group's ``initial_lr``
(its lr when the first scheduler was built) and the scheduler's epoch counter, in closed form;
construction performs the first step (epoch 0). ``get_last_lr()`` is what the last step set;
``state_dict()`` / ``load_state_dict()`` save and restore the counters (not the optimizer, nor
lambdas). :class:`ReduceLROnPlateau` instead lowers the lr when a metric stops improving.
"""
from __future__ import annotations

import bisect
import math
import numbers

from anydevice.optim.optimizer import Optimizer

__all__ = ["LRScheduler", "StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "LinearLR", "OneCycleLR",
           "LambdaLR", "SequentialLR", "ReduceLROnPlateau"]


def _optimizer(opt, who: str) -> Optimizer:
    if not isinstance(opt, Optimizer):
        raise TypeError(f"{who}(): optimizer must be an anydevice.optim optimizer (SGD, Adam, ...), got "
                        f"{type(opt).__name__}; build the optimizer first and pass it to the scheduler")
    return opt


def _num(who, name, v, lo=None, hi=None, lo_open=False, integer=False):
    ok = isinstance(v, numbers.Integral if integer else numbers.Real) and not isinstance(v, bool)
    if ok and not integer:
        ok = math.isfinite(v)
    if ok and lo is not None:
        ok = v > lo if lo_open else v >= lo
    if ok and hi is not None:
        ok = v <= hi
    if not ok:
        kind = "an int" if integer else "a finite number"
        rng = "" if lo is None else f" {'>' if lo_open else '>='} {lo}" + ("" if hi is None else f" and <= {hi}")
        raise ValueError(f"{who}(): {name} must be {kind}{rng}, got {v!r}")
    return v


class LRScheduler:
    """Base class: subclasses implement :meth:`_lr_at` (the closed form of one group's lr)."""

    def __init__(self, optimizer, last_epoch: int = -1):
        who = type(self).__name__
        self.optimizer = _optimizer(optimizer, who)
        _num(who, "last_epoch", last_epoch, lo=-1, integer=True)
        for i, g in enumerate(self.optimizer.param_groups):
            if last_epoch == -1:
                g.setdefault("initial_lr", g["lr"])
            elif "initial_lr" not in g:
                raise KeyError(f"{who}(): resuming at last_epoch={last_epoch} needs 'initial_lr' in parameter group "
                               f"{i}; load the scheduler's state_dict instead, or start at last_epoch=-1")
        self.base_lrs = [g["initial_lr"] for g in self.optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def _lr_at(self, base_lr: float, epoch: int, group_index: int) -> float:
        raise NotImplementedError

    def get_lr(self) -> list[float]:
        """The lr of every group at the current epoch."""
        return [self._lr_at(b, self.last_epoch, i) for i, b in enumerate(self.base_lrs)]

    def get_last_lr(self) -> list[float]:
        """The lr of every group as the last :meth:`step` set it."""
        return list(self._last_lr)

    def step(self) -> None:
        """Advance one epoch (or iteration) and set the groups' lr."""
        self.last_epoch += 1
        self._apply()

    def _apply(self) -> None:
        self._last_lr = self.get_lr()
        for g, lr in zip(self.optimizer.param_groups, self._last_lr):
            g["lr"] = lr

    def state_dict(self) -> dict:
        """The scheduler's counters and settings (not the optimizer, nor callables)."""
        return {k: v for k, v in vars(self).items() if k != "optimizer" and not callable(v)
                and not (isinstance(v, list) and any(callable(f) or isinstance(f, LRScheduler) for f in v))}

    def load_state_dict(self, state_dict: dict) -> None:
        unknown = [k for k in state_dict if k not in vars(self)]
        if unknown:
            raise KeyError(f"{type(self).__name__}.load_state_dict(): unknown keys {unknown}; expected "
                           f"{sorted(self.state_dict())}")
        vars(self).update(state_dict)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(last_epoch={self.last_epoch}, lr={self._last_lr})"


class StepLR(LRScheduler):
    """``base_lr * gamma ** (epoch // step_size)``."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size = _num("StepLR", "step_size", step_size, lo=0, lo_open=True, integer=True)
        self.gamma = _num("StepLR", "gamma", gamma, lo=0)
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, base_lr, epoch, i):
        return base_lr * self.gamma ** (epoch // self.step_size)


class MultiStepLR(LRScheduler):
    """``base_lr * gamma ** (number of milestones <= epoch)``."""

    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        self.milestones = sorted(_num("MultiStepLR", "milestones[]", m, lo=0, integer=True) for m in milestones)
        self.gamma = _num("MultiStepLR", "gamma", gamma, lo=0)
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, base_lr, epoch, i):
        return base_lr * self.gamma ** bisect.bisect_right(self.milestones, epoch)


class ExponentialLR(LRScheduler):
    """``base_lr * gamma ** epoch``."""

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = _num("ExponentialLR", "gamma", gamma, lo=0)
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, base_lr, epoch, i):
        return base_lr * self.gamma ** epoch


class CosineAnnealingLR(LRScheduler):
    """``eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2`` (SGDR without restarts)."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        self.T_max = _num("CosineAnnealingLR", "T_max", T_max, lo=0, lo_open=True, integer=True)
        self.eta_min = _num("CosineAnnealingLR", "eta_min", eta_min, lo=0)
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, base_lr, epoch, i):
        return self.eta_min + (base_lr - self.eta_min) * (1 + math.cos(math.pi * epoch / self.T_max)) / 2


class LinearLR(LRScheduler):
    """Warm-up: ``base_lr * (start_factor + (end_factor - start_factor) * min(epoch, total_iters) / total_iters)``."""

    def __init__(self, optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0, total_iters: int = 5,
                 last_epoch: int = -1):
        self.start_factor = _num("LinearLR", "start_factor", start_factor, lo=0, hi=1, lo_open=True)
        self.end_factor = _num("LinearLR", "end_factor", end_factor, lo=0, hi=1)
        self.total_iters = _num("LinearLR", "total_iters", total_iters, lo=0, lo_open=True, integer=True)
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, base_lr, epoch, i):
        f = self.start_factor + (self.end_factor - self.start_factor) * min(epoch, self.total_iters) / self.total_iters
        return base_lr * f


class LambdaLR(LRScheduler):
    """``base_lr * lr_lambda(epoch)``; ``lr_lambda`` is one function or one per group."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        n = len(_optimizer(optimizer, "LambdaLR").param_groups)
        fs = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * n
        if len(fs) != n or not all(callable(f) for f in fs):
            raise TypeError(f"LambdaLR(): lr_lambda must be a function or a list of {n} functions (one per "
                            f"parameter group), got {lr_lambda!r}")
        self.lr_lambdas = fs
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, base_lr, epoch, i):
        return base_lr * self.lr_lambdas[i](epoch)


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith & Topin), per step: from ``max_lr / div_factor`` up to ``max_lr`` over
    the first ``pct_start`` of ``total_steps``, then down to ``initial_lr / final_div_factor``
    (``three_phase``: back to the initial lr first), annealing by cosine or linearly.
    With ``cycle_momentum`` the momentum (or Adam's ``betas[0]``) moves the opposite way between
    ``max_momentum`` and ``base_momentum``. Stepping past ``total_steps`` is an error."""

    def __init__(self, optimizer, max_lr, total_steps: int | None = None, epochs: int | None = None,
                 steps_per_epoch: int | None = None, pct_start: float = 0.3, anneal_strategy: str = "cos",
                 cycle_momentum: bool = True, base_momentum: float = 0.85, max_momentum: float = 0.95,
                 div_factor: float = 25.0, final_div_factor: float = 1e4, three_phase: bool = False,
                 last_epoch: int = -1):
        who = "OneCycleLR"
        opt = _optimizer(optimizer, who)
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError(f"{who}(): give total_steps, or both epochs and steps_per_epoch")
            total_steps = _num(who, "epochs", epochs, lo=0, lo_open=True, integer=True) * _num(
                who, "steps_per_epoch", steps_per_epoch, lo=0, lo_open=True, integer=True)
        self.total_steps = _num(who, "total_steps", total_steps, lo=0, lo_open=True, integer=True)
        _num(who, "pct_start", pct_start, lo=0, hi=1)
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"{who}(): anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        self.anneal_strategy = anneal_strategy
        n = len(opt.param_groups)
        max_lrs = list(max_lr) if isinstance(max_lr, (list, tuple)) else [max_lr] * n
        if len(max_lrs) != n:
            raise ValueError(f"{who}(): max_lr has {len(max_lrs)} values for {n} parameter groups")
        t = self.total_steps
        ends = ([pct_start * t - 1, 2 * pct_start * t - 2, t - 1] if three_phase else [pct_start * t - 1, t - 1])
        keys = ([("initial_lr", "max_lr"), ("max_lr", "initial_lr"), ("initial_lr", "min_lr")] if three_phase
                else [("initial_lr", "max_lr"), ("max_lr", "min_lr")])
        moms = ([("max_momentum", "base_momentum"), ("base_momentum", "max_momentum"), ("max_momentum", "max_momentum")]
                if three_phase else [("max_momentum", "base_momentum"), ("base_momentum", "max_momentum")])
        self.phases = [{"end_step": float(e), "lr": k, "momentum": m} for e, k, m in zip(ends, keys, moms)]
        self.cycle_momentum = bool(cycle_momentum)
        if last_epoch == -1:
            for g, m in zip(opt.param_groups, max_lrs):
                _num(who, "max_lr", m, lo=0, lo_open=True)
                g["initial_lr"] = m / div_factor
                g["max_lr"], g["min_lr"] = m, g["initial_lr"] / final_div_factor
        if self.cycle_momentum:
            if not all("momentum" in g or "betas" in g for g in opt.param_groups):
                raise ValueError(f"{who}(): cycle_momentum=True needs an optimizer with 'momentum' or 'betas' "
                                 f"({type(opt).__name__} has neither); pass cycle_momentum=False")
            if last_epoch == -1:
                for g in opt.param_groups:
                    g["max_momentum"], g["base_momentum"] = max_momentum, base_momentum
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start, end, pct):
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def _phase(self, step):
        start = 0.0
        for i, ph in enumerate(self.phases):
            if step <= ph["end_step"] or i == len(self.phases) - 1:
                return ph, (step - start) / (ph["end_step"] - start)
            start = ph["end_step"]

    def get_lr(self):
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"OneCycleLR.step(): called {step} times for total_steps={self.total_steps}; "
                             "raise total_steps (or epochs / steps_per_epoch)")
        ph, pct = self._phase(step)
        lrs = []
        for g in self.optimizer.param_groups:
            lrs.append(self._anneal(g[ph["lr"][0]], g[ph["lr"][1]], pct))
            if self.cycle_momentum:
                m = self._anneal(g[ph["momentum"][0]], g[ph["momentum"][1]], pct)
                if "betas" in g:
                    g["betas"] = (m, g["betas"][1])
                else:
                    g["momentum"] = m
        return lrs


class SequentialLR(LRScheduler):
    """Runs ``schedulers[i]`` from epoch ``milestones[i-1]`` on, restarting its epoch count at 0 there."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch: int = -1):
        opt = _optimizer(optimizer, "SequentialLR")
        self.schedulers = list(schedulers)
        if not self.schedulers or any(s.optimizer is not opt for s in self.schedulers):
            raise ValueError("SequentialLR(): schedulers must be a non-empty list of schedulers of this same optimizer")
        self.milestones = [_num("SequentialLR", "milestones[]", m, lo=1, integer=True) for m in milestones]
        if len(self.milestones) != len(self.schedulers) - 1 or self.milestones != sorted(self.milestones):
            raise ValueError(f"SequentialLR(): need {len(self.schedulers) - 1} increasing milestones for "
                             f"{len(self.schedulers)} schedulers, got {list(milestones)}")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        i = bisect.bisect_right(self.milestones, self.last_epoch)
        s = self.schedulers[i]
        s.last_epoch = self.last_epoch - (self.milestones[i - 1] if i else 0)
        s._apply()
        return s.get_last_lr()

    def state_dict(self):
        sd = super().state_dict()
        sd["_schedulers"] = [s.state_dict() for s in self.schedulers]
        return sd

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        for s, sd in zip(self.schedulers, state_dict.pop("_schedulers", [])):
            s.load_state_dict(sd)
        super().load_state_dict(state_dict)


class ReduceLROnPlateau:
    """Multiply the lr by ``factor`` when ``metrics`` (passed to :meth:`step`) has not improved for
    more than ``patience`` epochs; then wait ``cooldown`` epochs. ``mode`` "min" or "max";
    ``threshold_mode`` "rel" (better than ``best * (1 -/+ threshold)``) or "abs"; never below
    ``min_lr`` (one value or one per group); changes smaller than ``eps`` are skipped."""

    def __init__(self, optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0, min_lr=0.0,
                 eps: float = 1e-8):
        who = "ReduceLROnPlateau"
        self.optimizer = _optimizer(optimizer, who)
        if mode not in ("min", "max"):
            raise ValueError(f"{who}(): mode must be 'min' or 'max', got {mode!r}")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"{who}(): threshold_mode must be 'rel' or 'abs', got {threshold_mode!r}")
        _num(who, "factor", factor, lo=0, lo_open=True)
        if factor >= 1.0:
            raise ValueError(f"{who}(): factor must be < 1 (the lr is multiplied by it), got {factor!r}")
        n = len(self.optimizer.param_groups)
        self.min_lrs = list(min_lr) if isinstance(min_lr, (list, tuple)) else [min_lr] * n
        if len(self.min_lrs) != n:
            raise ValueError(f"{who}(): min_lr has {len(self.min_lrs)} values for {n} parameter groups")
        self.mode, self.threshold_mode, self.factor = mode, threshold_mode, float(factor)
        self.patience = _num(who, "patience", patience, lo=0, integer=True)
        self.cooldown = _num(who, "cooldown", cooldown, lo=0, integer=True)
        self.threshold, self.eps = _num(who, "threshold", threshold, lo=0), _num(who, "eps", eps, lo=0)
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = self.cooldown_counter = 0
        self.last_epoch = 0
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def _better(self, a: float) -> bool:
        t, best = self.threshold, self.best
        if self.mode == "min":
            return a < (best * (1 - t) if self.threshold_mode == "rel" else best - t)
        return a > (best * (1 + t) if self.threshold_mode == "rel" else best + t)

    def step(self, metrics) -> None:
        """Record this epoch's metric (a number or a 0-d tensor: one host read)."""
        current = float(metrics)
        self.last_epoch += 1
        if self._better(current):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for g, lo in zip(self.optimizer.param_groups, self.min_lrs):
                new = max(g["lr"] * self.factor, lo)
                if g["lr"] - new > self.eps:
                    g["lr"] = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    get_last_lr = LRScheduler.get_last_lr
    state_dict = LRScheduler.state_dict
    load_state_dict = LRScheduler.load_state_dict
