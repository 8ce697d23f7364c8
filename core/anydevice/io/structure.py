"""The JSON encoding of a checkpoint's structure, kept in the safetensors header's ``__metadata__``.

JSON itself carries ``null``, ``true``/``false``, ints, finite floats, strings, lists and
objects whose keys are strings. Everything else is a *tagged* object, ``{"$tag": payload}``
with exactly one key:

==============================================  ==============================================
Python value                                    JSON
==============================================  ==============================================
``None``, ``bool``, ``int``, ``str``            themselves (ints of any size)
finite ``float``                                a JSON number (written with ``repr``: exact)
``inf``, ``-inf``, ``nan``                      ``{"$float": "inf" | "-inf" | "nan"}``
``list``                                        a JSON array
``tuple``                                       ``{"$tuple": [...]}``
``dict`` with ``str`` keys, none starting "$"   a JSON object
any other ``dict`` (int keys, ...)              ``{"$dict": [[key, value], ...]}`` (keys: None,
                                                bools, numbers, strings, tuples of them)
``Tensor``                                      ``{"$tensor": {"name", "dtype", "device"
                                                [, "requires_grad": true]}}``
``numpy.ndarray`` / numpy scalar                ``{"$ndarray": {"name", "dtype"[, "scalar": true]}}``
==============================================  ==============================================

``name`` is the array's key among the file's tensors. A value that appears several times
(the same object) is stored once and every reference to it loads as one object.
"""
from __future__ import annotations

import math

import numpy as np

from anydevice.base import dtypes as _dt
from anydevice.engine.tensor import Tensor

_FLOATS = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
_ALLOWED = ("dicts, lists, tuples, None, bools, ints, floats, strings, anydevice Tensors and numpy arrays; "
            "dict keys: None, bools, numbers, strings or tuples of them")


def where(path: tuple) -> str:
    """``obj['model'][0]``: a readable location in the structure."""
    return "obj" + "".join(f"[{k!r}]" for k in path)


class Encoder:
    """Turns a structure into JSON; collects its arrays as ``(name, value)`` in :attr:`arrays`."""

    def __init__(self, reserved=("__metadata__",)):
        self.arrays: list[tuple[str, object]] = []
        self._names, self._by_id, self._active = set(reserved), {}, set()

    def encode(self, obj, path: tuple = (), key: bool = False):
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, (Tensor, np.ndarray, np.generic)):
            if key:
                raise TypeError(f"anydevice.save(): a dict key in {where(path)} is an array; {_ALLOWED}")
            return self._array(obj, path)
        if isinstance(obj, int):
            return int(obj)
        if isinstance(obj, float):
            return float(obj) if math.isfinite(obj) else {"$float": "nan" if obj != obj else ("inf" if obj > 0 else "-inf")}
        if isinstance(obj, (list, tuple, dict)):
            if key and not isinstance(obj, tuple):
                raise TypeError(f"anydevice.save(): a dict key in {where(path)} is a {type(obj).__name__}; {_ALLOWED}")
            if id(obj) in self._active:
                raise ValueError(f"anydevice.save(): {where(path)} contains itself; a checkpoint must be a tree")
            self._active.add(id(obj))
            try:
                return self._container(obj, path, key)
            finally:
                self._active.discard(id(obj))
        what = f"a dict key in {where(path)}" if key else where(path)
        raise TypeError(f"anydevice.save(): {what} is a {type(obj).__module__}.{type(obj).__qualname__}, "
                        f"which a checkpoint cannot hold; allowed: {_ALLOWED}")

    def _container(self, obj, path, key):
        if isinstance(obj, list):
            return [self.encode(v, path + (i,)) for i, v in enumerate(obj)]
        if isinstance(obj, tuple):
            return {"$tuple": [self.encode(v, path if key else path + (i,), key) for i, v in enumerate(obj)]}
        if all(isinstance(k, str) and not k.startswith("$") for k in obj):
            return {k: self.encode(v, path + (k,)) for k, v in obj.items()}
        return {"$dict": [[self.encode(k, path, key=True), self.encode(v, path + (k,))] for k, v in obj.items()]}

    def _array(self, obj, path):
        known = self._by_id.get(id(obj))
        if known is not None:
            return known[1]
        name = self._name(path)
        if isinstance(obj, Tensor):
            ref = {"name": name, "dtype": obj.dtype.name, "device": str(obj.device)}
            if obj.requires_grad:
                ref["requires_grad"] = True
            ref = {"$tensor": ref}
        else:
            try:
                d = _dt.dtype(obj.dtype)
            except TypeError as e:
                raise TypeError(f"anydevice.save(): {where(path)}: {e}") from None
            ref = {"$ndarray": {"name": name, "dtype": d.name, **({"scalar": True} if isinstance(obj, np.generic) else {})}}
        self._by_id[id(obj)] = (obj, ref)  # holding obj keeps its id from being reused meanwhile
        self.arrays.append((name, obj))
        return ref

    def _name(self, path) -> str:
        base = ".".join(str(k) for k in path) or "_"
        name, n = base, 1
        while name in self._names:
            n += 1
            name = f"{base}#{n}"
        self._names.add(name)
        return name


class Decoder:
    """Validates (``values=None``) or rebuilds (``values={name: loaded array}``) a decoded structure.

    ``tensors`` maps each file tensor's name to its ``(dtype code, shape)``; ``fail(problem)``
    returns the exception to raise. Validation records every reference in :attr:`refs`
    (``name -> (kind, anydevice dtype, device string or None, requires_grad, scalar)``).
    """

    def __init__(self, tensors: dict, stored_as, fail):
        self.tensors, self.stored_as, self.fail = tensors, stored_as, fail
        self.refs: dict[str, tuple] = {}
        self.values = None

    def decode(self, j, path: tuple = (), key: bool = False):
        if j is None or isinstance(j, (bool, str, int, float)):
            return j
        if isinstance(j, list):
            if key:
                raise self.fail(f"the metadata has a list as a dict key in {where(path)}")
            return [self.decode(v, path + (i,)) for i, v in enumerate(j)]
        if not isinstance(j, dict):
            raise self.fail(f"the metadata holds a {type(j).__name__} at {where(path)}")
        tags = [k for k in j if k.startswith("$")]
        if not tags:
            if key:
                raise self.fail(f"the metadata has a dict as a dict key in {where(path)}")
            return {k: self.decode(v, path + (k,)) for k, v in j.items()}
        if len(j) != 1:
            raise self.fail(f"the metadata at {where(path)} mixes the type tag {tags[0]!r} with other keys")
        tag, payload = next(iter(j.items()))
        rule = _TAGS.get(tag)
        if rule is None:
            raise self.fail(f"the metadata encodes an unknown type {tag!r} at {where(path)}; "
                            f"known: {', '.join(_TAGS)}")
        if key and tag in ("$tensor", "$ndarray"):
            raise self.fail(f"the metadata has an array as a dict key in {where(path)}")
        return rule(self, payload, path, key)

    def _tuple(self, payload, path, key):
        if not isinstance(payload, list):
            raise self.fail(f"the metadata's $tuple at {where(path)} is not a list")
        return tuple(self.decode(v, path + (i,), key) for i, v in enumerate(payload))

    def _dict(self, payload, path, key):
        if key or not isinstance(payload, list) or not all(isinstance(p, list) and len(p) == 2 for p in payload):
            raise self.fail(f"the metadata's $dict at {where(path)} is not a list of [key, value] pairs")
        out = {}
        for k, v in payload:
            k = self.decode(k, path, key=True)
            out[k] = self.decode(v, path + (k,))
        return out

    def _float(self, payload, path, key):
        if payload not in _FLOATS:
            raise self.fail(f"the metadata's $float at {where(path)} is {payload!r}; allowed: {', '.join(_FLOATS)}")
        return _FLOATS[payload]

    def _tensor(self, payload, path, key):
        return self._array("$tensor", payload, path, {"name", "dtype", "device", "requires_grad"})

    def _ndarray(self, payload, path, key):
        return self._array("$ndarray", payload, path, {"name", "dtype", "scalar"})

    def _array(self, tag, p, path, fields):
        at = f"the metadata's {tag} at {where(path)}"
        if not isinstance(p, dict) or not {"name", "dtype"} <= set(p) <= fields:
            raise self.fail(f"{at} must be an object with keys {sorted(fields)} (name and dtype required)")
        name, dname, device = p["name"], p["dtype"], p.get("device")
        flag = p.get("requires_grad", False) if tag == "$tensor" else p.get("scalar", False)
        if not isinstance(name, str) or not isinstance(dname, str) or not isinstance(flag, bool):
            raise self.fail(f"{at} has a name, dtype or flag of the wrong type")
        if tag == "$tensor" and not isinstance(device, str):
            raise self.fail(f"{at} names no device (a string like 'npu:0')")
        if name not in self.tensors:
            raise self.fail(f"{at} refers to tensor {name!r}, which is not in the file")
        d = next((x for x in _dt.ALL_DTYPES if x.name == dname), None)
        if d is None:
            raise self.fail(f"{at} has unknown dtype {dname!r}; known: {', '.join(x.name for x in _dt.ALL_DTYPES)}")
        code, shape = self.tensors[name]
        if self.stored_as(d, code, shape) is None:
            raise self.fail(f"tensor {name!r} is stored as {code}{list(shape)}, which cannot hold {dname} data")
        if tag == "$tensor" and flag and d.kind not in ("float", "complex"):
            raise self.fail(f"{at} asks for requires_grad on {dname}; only floating tensors can require gradients")
        if tag == "$ndarray" and flag and self.stored_as(d, code, shape) != ():
            raise self.fail(f"{at} is a numpy scalar but tensor {name!r} has shape {list(shape)}")
        ref = (tag, d, device, flag)
        if self.refs.setdefault(name, ref) != ref:
            raise self.fail(f"tensor {name!r} is referenced twice with different dtypes, devices or flags")
        return None if self.values is None else self.values[name]


_TAGS = {"$tuple": Decoder._tuple, "$dict": Decoder._dict, "$float": Decoder._float,
         "$tensor": Decoder._tensor, "$ndarray": Decoder._ndarray}
