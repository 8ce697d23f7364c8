"""Containers: :class:`Sequential` (applied in order), :class:`ModuleList`, :class:`ModuleDict`."""
from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping

from anydevice.nn.module import Module

__all__ = ["Sequential", "ModuleList", "ModuleDict"]


def _checked(where: str, i, m) -> Module:
    if not isinstance(m, Module):
        raise TypeError(f"{where}: item {i!r} is a {type(m).__name__}, not a Module")
    return m


class _Indexed(Module):
    """Sub-modules held under the names "0", "1", ... (the state-dict keys PyTorch uses)."""

    def __init__(self, modules: Iterable = ()):
        super().__init__()
        self._items: list = []
        for m in modules:
            self.append(m)

    def _sync(self) -> None:
        for k in [k for k in vars(self) if k.isdigit()]:
            object.__delattr__(self, k)
        for i, m in enumerate(self._items):
            object.__setattr__(self, str(i), m)

    def _index(self, idx) -> int:
        n = len(self._items)
        i = operator.index(idx)
        if not -n <= i < n:
            raise IndexError(f"{type(self).__name__} index {idx} is out of range for {n} modules")
        return i % n

    def append(self, module: Module):
        self._items.append(_checked(f"{type(self).__name__}.append()", len(self._items), module))
        self._sync()
        return self

    def extend(self, modules: Iterable):
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        self._items.insert(index, _checked(f"{type(self).__name__}.insert()", index, module))
        self._sync()

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self):
        return iter(self._items)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(self._items[idx]) if type(self) is ModuleList else type(self)(*self._items[idx])
        return self._items[self._index(idx)]

    def __setitem__(self, idx, module: Module) -> None:
        self._items[self._index(idx)] = _checked(f"{type(self).__name__}[{idx}] =", idx, module)
        self._sync()

    def __delitem__(self, idx) -> None:
        if isinstance(idx, slice):
            del self._items[idx]
        else:
            del self._items[self._index(idx)]
        self._sync()

    def named_children(self):
        seen = set()
        for i, m in enumerate(self._items):
            if id(m) not in seen:
                seen.add(id(m))
                yield str(i), m


class Sequential(_Indexed):
    """Applies its modules in order: ``Sequential(Linear(4, 8), ReLU(), Linear(8, 1))``. Indexable,
    sliceable (a slice is a new Sequential sharing the modules), ``len()``, ``append``."""

    def __init__(self, *modules: Module):
        if len(modules) == 1 and isinstance(modules[0], Mapping):
            raise TypeError("Sequential(): pass the modules as arguments; use ModuleDict for named modules")
        for i, m in enumerate(modules):
            if not isinstance(m, Module):
                raise TypeError(f"Sequential(): argument {i} is a {type(m).__name__}, not a Module")
        super().__init__(modules)

    def forward(self, x):
        for m in self._items:
            x = m(x)
        return x


class ModuleList(_Indexed):
    """A list of modules whose parameters the parent sees (``"0.weight"``, ...); no forward of its own."""

    def __init__(self, modules: Iterable | None = None):
        super().__init__(modules or ())

    def __add__(self, other) -> ModuleList:
        return ModuleList([*self, *other])


class ModuleDict(Module):
    """A dict of modules keyed by name, in insertion order; no forward of its own."""

    def __init__(self, modules: Mapping | Iterable | None = None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def update(self, modules) -> None:
        items = modules.items() if isinstance(modules, Mapping) else modules
        for k, m in items:
            self[k] = m

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, _checked("ModuleDict", key, module))

    def __getitem__(self, key: str) -> Module:
        v = vars(self).get(key) if isinstance(key, str) else None
        if not isinstance(v, Module):
            raise KeyError(f"ModuleDict has no module {key!r}; its keys are {list(self.keys())}")
        return v

    def __delitem__(self, key: str) -> None:
        self[key]
        delattr(self, key)

    def __contains__(self, key) -> bool:
        return isinstance(key, str) and isinstance(vars(self).get(key), Module)

    def __len__(self) -> int:
        return sum(1 for _ in self.named_children())

    def __iter__(self):
        return iter(self.keys())

    def keys(self) -> list:
        return [k for k, _ in self.named_children()]

    def values(self) -> list:
        return [m for _, m in self.named_children()]

    def items(self) -> list:
        return list(self.named_children())

    def pop(self, key: str) -> Module:
        m = self[key]
        del self[key]
        return m
