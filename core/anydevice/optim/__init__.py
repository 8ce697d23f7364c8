"""Optimizers with PyTorch's update rules and defaults, and learning-rate schedulers.

    opt = anydevice.optim.AdamW(model.parameters(), lr=1e-3)
    sched = anydevice.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=100)
    loss.backward(); opt.step(); opt.zero_grad(); sched.step()

They are device-agnostic: every update is a few tensor ops on the parameter's own device (see
:mod:`anydevice.optim.optimizer`: parameter groups, state dicts, state that follows its parameter,
float32 master weights for float16/bfloat16 parameters).
"""
from __future__ import annotations

from anydevice.optim import lr_scheduler
from anydevice.optim.adagrad import Adagrad
from anydevice.optim.adam import Adam, AdamW
from anydevice.optim.optimizer import Optimizer
from anydevice.optim.rmsprop import RMSprop
from anydevice.optim.sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler"]
