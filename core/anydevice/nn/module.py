""":class:`Module`, the base of every layer: parameters, buffers, sub-modules, train/eval mode,
state dicts, device moves and forward hooks, with PyTorch's names (and Paddle's aliases).

A parameter is a tensor with ``requires_grad=True`` assigned as an attribute (its name stays a
parameter if it is later frozen or set to ``None``); a buffer is a tensor registered with
:meth:`Module.register_buffer`; a sub-module is a :class:`Module` attribute. Names are dotted paths
in attribute order (``"0.weight"`` in a :class:`~anydevice.nn.Sequential`).
"""
from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from anydevice import api as _api
from anydevice.base import dtypes as _dt
from anydevice.engine.graph import no_grad
from anydevice.engine.tensor import Tensor

__all__ = ["Module", "Layer", "LoadResult", "RemovableHandle", "parameter", "Parameter"]


def parameter(data, dtype=None, device=None) -> Tensor:
    """A leaf tensor that requires gradients (host data is copied to ``device``)."""
    t = _api.asarray(data, dtype=dtype, device=device)
    if isinstance(data, Tensor):
        t = t.detach()
    return t.requires_grad_(True)


def Parameter(data, requires_grad: bool = True) -> Tensor:  # noqa: N802 - PyTorch's spelling
    """``nn.Parameter(tensor)`` as in PyTorch: a leaf copy of ``data`` (on its device) that requires
    gradients; assigned as a Module attribute it is a parameter (a plain Tensor, not a subclass).
    With ``requires_grad=False`` it is a plain tensor: register it with :meth:`Module.register_parameter`."""
    t = parameter(data, device=data.device if isinstance(data, Tensor) else None)
    return t if requires_grad else t.requires_grad_(False)


class LoadResult(NamedTuple):
    """What :meth:`Module.load_state_dict` did not match: entries the state lacked, keys it had extra."""

    missing_keys: list
    unexpected_keys: list


class RemovableHandle:
    """Returned by the ``register_*_hook`` methods; :meth:`remove` unregisters the hook."""

    _ids = itertools.count()

    def __init__(self, hooks: dict):
        self._hooks, self.id = hooks, next(self._ids)

    def remove(self) -> None:
        self._hooks.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def _move(t: Tensor, value: Tensor) -> None:
    """Make ``t`` hold ``value`` (any device/dtype), keeping ``t``'s identity (optimizers hold it)."""
    t._buf, t.device, t.dtype, t.shape = value._buf, value.device, value.dtype, value.shape


def _check_name(where: str, name) -> None:
    if not isinstance(name, str) or not name or "." in name:
        raise KeyError(f"{where}: name must be a non-empty str without '.', got {name!r}")


class Module:
    """Base class of layers. Subclasses call ``super().__init__()``, set parameters, buffers and
    sub-modules as attributes and implement :meth:`forward`; calling the module runs the forward
    pre-hooks, ``forward`` and the forward hooks."""

    training: bool = True

    def __init__(self) -> None:
        object.__setattr__(self, "training", True)

    # --- attribute bookkeeping ---------------------------------------------------------------
    def _meta(self, key: str):
        d = self.__dict__
        v = d.get(key)
        if v is None:
            v = d[key] = {}
        return v

    def __setattr__(self, name: str, value) -> None:
        buffers = self.__dict__.get("_buffers")
        if buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"{type(self).__name__}: buffer {name!r} must be a Tensor or None, "
                                f"not {type(value).__name__}")
        elif isinstance(value, Tensor) and value.requires_grad:
            self._meta("_params")[name] = True
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        for key in ("_params", "_buffers"):
            self.__dict__.get(key, {}).pop(name, None)
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Tensor | None) -> None:
        """Add ``param`` (a tensor that requires grad, or None) as parameter ``name``."""
        _check_name("register_parameter()", name)
        if param is not None and not (isinstance(param, Tensor) and param.requires_grad):
            raise TypeError(f"register_parameter(): {name!r} must be a Tensor that requires grad "
                            f"(nn.parameter(data)) or None, not {type(param).__name__}")
        self._meta("_params")[name] = True
        object.__setattr__(self, name, param)

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Add a tensor that is state but not a parameter (BatchNorm's running mean): moved by
        :meth:`to`, saved by :meth:`state_dict` unless ``persistent=False``."""
        _check_name("register_buffer()", name)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer(): {name!r} must be a Tensor or None, not {type(tensor).__name__}")
        if name in self.__dict__.get("_params", {}):
            raise KeyError(f"register_buffer(): {name!r} is already a parameter of {type(self).__name__}")
        self._meta("_buffers")[name] = bool(persistent)
        object.__setattr__(self, name, tensor)

    def add_module(self, name: str, module: Module | None) -> None:
        _check_name("add_module()", name)
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module(): {name!r} must be a Module or None, not {type(module).__name__}")
        object.__setattr__(self, name, module)

    register_module = add_module

    # --- traversal ---------------------------------------------------------------------------
    def named_children(self):
        """``(name, module)`` of the direct sub-modules (attributes, and modules in list/tuple attributes)."""
        seen = set()
        for name, v in vars(self).items():
            items = [(name, v)] if isinstance(v, Module) else (
                [(f"{name}.{i}", m) for i, m in enumerate(v) if isinstance(m, Module)] if isinstance(v, (list, tuple))
                else [])
            for n, m in items:
                if id(m) not in seen:
                    seen.add(id(m))
                    yield n, m

    def children(self):
        return (m for _, m in self.named_children())

    def named_modules(self, memo: set | None = None, prefix: str = "", remove_duplicate: bool = True):
        """``(dotted name, module)`` of this module and every sub-module, depth first, each once."""
        memo = set() if memo is None else memo
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self.named_children():
            yield from m.named_modules(memo, f"{prefix}.{name}" if prefix else name, remove_duplicate)

    def modules(self):
        return (m for _, m in self.named_modules())

    def _named_members(self, kind: str, prefix: str, recurse: bool):
        seen = set()
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mp, m in mods:
            names = m.__dict__.get(kind, {})
            for name, v in vars(m).items():
                if name in names and isinstance(v, Tensor) and id(v) not in seen:
                    seen.add(id(v))
                    yield (f"{mp}.{name}" if mp else name), v

    def named_parameters(self, prefix: str = "", recurse: bool = True):
        """``(dotted name, tensor)`` for every parameter, depth-first in attribute order, each once."""
        return self._named_members("_params", prefix, recurse)

    def parameters(self, recurse: bool = True) -> list:
        return [p for _, p in self.named_parameters(recurse=recurse)]

    def named_buffers(self, prefix: str = "", recurse: bool = True):
        return self._named_members("_buffers", prefix, recurse)

    def buffers(self, recurse: bool = True) -> list:
        return [b for _, b in self.named_buffers(recurse=recurse)]

    def apply(self, fn) -> Module:
        """Call ``fn(module)`` on every sub-module (children first) and on ``self``; returns ``self``."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # --- modes and gradients -----------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        """Set training mode (Dropout drops, BatchNorm uses and updates batch statistics) recursively."""
        if not isinstance(mode, bool):
            raise TypeError(f"train(): mode must be a bool, not {type(mode).__name__}")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        """Evaluation mode: ``train(False)``."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Freeze (``False``) or unfreeze every parameter; returns ``self``."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            p.clear_grad()

    clear_gradients = clear_grad = zero_grad

    # --- device and dtype --------------------------------------------------------------------
    def to(self, device=None, dtype=None) -> Module:
        """Move every parameter and buffer to ``device`` and cast floating ones to ``dtype``;
        returns ``self``. Tensors keep their identity (an optimizer built earlier still holds
        them) and gradients follow their parameter."""
        if isinstance(device, _dt.DType):
            device, dtype = None, device
        if dtype is not None and _dt.dtype(dtype).kind != "float":
            raise TypeError(f"Module.to(): parameters must stay real floating, not {_dt.dtype(dtype).name}")
        with no_grad():
            for t in self.parameters() + self.buffers():
                cast = dtype if t.dtype.kind == "float" else None
                grad = t.grad
                _move(t, t.detach().to(device).to(dtype=cast))  # the device first: it may lack the old dtype
                if grad is not None:
                    t.grad = grad.to(device).to(dtype=cast)
        return self

    def cpu(self) -> Module:
        return self.to("cpu")

    def float(self) -> Module:
        return self.to(dtype=_dt.float32)

    def double(self) -> Module:
        return self.to(dtype=_dt.float64)

    def half(self) -> Module:
        return self.to(dtype=_dt.float16)

    # --- state -------------------------------------------------------------------------------
    def _state_tensors(self) -> dict:
        out = {}
        for mp, m in self.named_modules():
            persistent = m.__dict__.get("_buffers", {})
            for name, t in itertools.chain(m.named_parameters(recurse=False), m.named_buffers(recurse=False)):
                if name in persistent and not persistent[name]:
                    continue
                out.setdefault(f"{mp}.{name}" if mp else name, t)
        return out

    def state_dict(self) -> OrderedDict:
        """``{name: numpy array}`` of every parameter and persistent buffer (host copies)."""
        return OrderedDict((n, t.numpy()) for n, t in self._state_tensors().items())

    def load_state_dict(self, state: Mapping, strict: bool = True) -> LoadResult:
        """Set parameters and buffers from ``state`` (``{name: numpy array or Tensor}``, as
        :meth:`state_dict` or :func:`anydevice.load` give), keeping each one's device and dtype.

        ``strict=True``: a missing or unexpected key is a ``KeyError`` listing all of them (and any
        shape mismatch); ``strict=False`` loads the names both sides have. A shape mismatch is a
        ``ValueError`` naming the key and both shapes. Every value is checked and converted before
        anything is set, so on an error the module is unchanged. Returns the missing and
        unexpected keys.
        """
        if not isinstance(state, Mapping):
            raise TypeError(f"load_state_dict(): state must be a mapping of names to arrays, not {type(state).__name__}")
        own = self._state_tensors()
        values = {n: v if isinstance(v, Tensor) else np.asarray(v) for n, v in state.items() if n in own}
        missing, unexpected = [n for n in own if n not in state], [k for k in state if k not in own]
        shapes = [f"{n} has shape {own[n].shape} in the model but {tuple(v.shape)} in the state"
                  for n, v in values.items() if tuple(v.shape) != own[n].shape]
        if strict and (missing or unexpected):
            raise KeyError(f"load_state_dict(): missing keys {missing}, unexpected keys {unexpected}"
                           + "".join(f"; {s}" for s in shapes) + f"; the model's keys are {list(own)}; nothing was loaded")
        if shapes:
            raise ValueError(f"load_state_dict(): {'; '.join(shapes)}; nothing was loaded")
        new = {n: _api.asarray(v, dtype=own[n].dtype, device=own[n].device) for n, v in values.items()}
        for n, v in new.items():
            _move(own[n], v)
            own[n].clear_grad()
        return LoadResult(missing, unexpected)

    set_state_dict = load_state_dict

    # --- calling -----------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not implement forward()")

    def __call__(self, *args, **kwargs):
        pre, post = self.__dict__.get("_forward_pre_hooks"), self.__dict__.get("_forward_hooks")
        if not pre and not post:
            return self.forward(*args, **kwargs)
        for hook in list((pre or {}).values()):
            r = hook(self, args)
            if r is not None:
                args = r if isinstance(r, tuple) else (r,)
        out = self.forward(*args, **kwargs)
        for hook in list((post or {}).values()):
            r = hook(self, args, out)
            if r is not None:
                out = r
        return out

    def _add_hook(self, kind: str, hook) -> RemovableHandle:
        if not callable(hook):
            raise TypeError(f"register{kind[:-1]}(): hook must be callable, not {type(hook).__name__}")
        hooks = self._meta(kind)
        handle = RemovableHandle(hooks)
        hooks[handle.id] = hook
        return handle

    def register_forward_pre_hook(self, hook) -> RemovableHandle:
        """``hook(module, args)`` before ``forward``; a non-None result replaces the arguments."""
        return self._add_hook("_forward_pre_hooks", hook)

    def register_forward_hook(self, hook) -> RemovableHandle:
        """``hook(module, args, output)`` after ``forward``; a non-None result replaces the output."""
        return self._add_hook("_forward_hooks", hook)

    # --- printing ----------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        kids = list(self.named_children())
        if not kids:
            return f"{type(self).__name__}({self.extra_repr()})"
        lines = [f"  ({n}): " + repr(m).replace("\n", "\n  ") for n, m in kids]
        head = self.extra_repr()
        return f"{type(self).__name__}(" + (f"\n  {head}" if head else "") + "\n" + "\n".join(lines) + "\n)"


Layer = Module
