"""Loss modules: each holds its options and calls the function of :mod:`anydevice.nn.functional`
of the same name (``CrossEntropyLoss(label_smoothing=0.1)(logits, target)`` is
``F.cross_entropy(logits, target, label_smoothing=0.1)``)."""
from __future__ import annotations

import inspect

import anydevice.nn.functional as F
from anydevice.nn.module import Module

__all__ = ["CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss", "MSELoss", "L1Loss", "SmoothL1Loss",
           "HuberLoss", "KLDivLoss"]


class _Loss(Module):
    _fn = None  # the functional, as a staticmethod
    _options: tuple = ()  # its keyword arguments after (input, target), in order

    def __init__(self, *args, **kwargs):
        super().__init__()
        name = type(self).__name__
        if len(args) > len(self._options):
            raise TypeError(f"{name}() takes at most {len(self._options)} positional arguments ({', '.join(self._options)}), "
                            f"got {len(args)}")
        defaults = {k: p.default for k, p in inspect.signature(self._fn).parameters.items() if k in self._options}
        given = dict(zip(self._options, args))
        for k, v in kwargs.items():
            if k not in defaults:
                raise TypeError(f"{name}() got an unexpected argument {k!r}; it takes {', '.join(self._options)}")
            if k in given:
                raise TypeError(f"{name}() got {k!r} twice")
            given[k] = v
        for k in self._options:
            v = given.get(k, defaults[k])
            if k in ("weight", "pos_weight") and v is not None:
                self.register_buffer(k, v)  # moved by to() with the module
            else:
                setattr(self, k, v)

    def forward(self, input, target):
        return type(self)._fn(input, target, **{k: getattr(self, k) for k in self._options})

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={getattr(self, k)!r}" for k in self._options if not k.endswith("weight"))


def _loss(name: str, fn, options: tuple, doc: str) -> type:
    return type(name, (_Loss,), {"_fn": staticmethod(fn), "_options": options, "__doc__": doc, "__module__": __name__})


CrossEntropyLoss = _loss("CrossEntropyLoss", F.cross_entropy, ("weight", "ignore_index", "reduction", "label_smoothing"),
                         "Softmax cross entropy of logits (N, C, ...) against class indices or probabilities.")
NLLLoss = _loss("NLLLoss", F.nll_loss, ("weight", "ignore_index", "reduction"),
                "Negative log likelihood of log-probabilities (N, C, ...) at class indices (N, ...).")
BCELoss = _loss("BCELoss", F.binary_cross_entropy, ("weight", "reduction"), "Binary cross entropy of probabilities.")
BCEWithLogitsLoss = _loss("BCEWithLogitsLoss", F.binary_cross_entropy_with_logits, ("weight", "reduction", "pos_weight"),
                          "Binary cross entropy of logits (stable); ``pos_weight`` scales the positive term.")
MSELoss = _loss("MSELoss", F.mse_loss, ("reduction",), "Squared error.")
L1Loss = _loss("L1Loss", F.l1_loss, ("reduction",), "Absolute error.")
SmoothL1Loss = _loss("SmoothL1Loss", F.smooth_l1_loss, ("reduction", "beta"),
                     "Quadratic below ``beta``, linear above (divided by ``beta``).")
HuberLoss = _loss("HuberLoss", F.huber_loss, ("reduction", "delta"), "Quadratic below ``delta``, linear above.")
KLDivLoss = _loss("KLDivLoss", F.kl_div, ("reduction", "log_target"),
                  "Kullback-Leibler divergence of log-probabilities ``input`` from ``target``.")
