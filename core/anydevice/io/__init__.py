"""Checkpoints: :func:`save` and :func:`load` of nested structures of tensors, in safetensors files.

    anydevice.save({"model": model.state_dict(), "optim": opt.state, "step": 1200}, "ckpt.safetensors")
    state = anydevice.load("ckpt.safetensors", map_location="cpu")

Tensors are the file's tensors (any safetensors reader opens it); the structure around them is
JSON in the header's ``__metadata__`` (see :mod:`anydevice.io.structure`). Nothing is pickled, so
loading a file never runs code from it. docs/CHECKPOINTS.md describes the format.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping

import numpy as np

from anydevice.api import asarray
from anydevice.base import dtypes as _dt
from anydevice.base.errors import CheckpointError
from anydevice.data import DataLoader  # noqa: F401 - Paddle's paddle.io.DataLoader
from anydevice.engine.tensor import Tensor
from anydevice.io import format as _fmt
from anydevice.io.structure import Decoder, Encoder
from anydevice.runtime.devices import Device, as_device

__all__ = ["save", "load", "CheckpointError", "FORMAT_VERSION"]

FORMAT_VERSION = "1"
_KEY, _VERSION_KEY = "anydevice", "anydevice.format"


def save(obj, path) -> None:
    """Write ``obj`` to ``path`` (a ``str`` or ``os.PathLike``) as a safetensors file.

    ``obj`` is a nested structure of dicts, lists, tuples, None, bools, ints, floats (inf and nan
    included), strings, anydevice Tensors (any device; dtype, device and ``requires_grad`` are
    kept) and numpy arrays or scalars (loaded back as numpy). Dict keys may be None, bools,
    numbers, strings or tuples of them. An object that appears twice is stored once.

    The structure is checked before the file is opened (``TypeError`` naming the offending
    location). Tensors are copied to the host one at a time while the file is written, so the
    extra host memory is about the largest tensor. The write is atomic: a temporary file in the
    same folder, fsync, ``os.replace``; if anything fails (a device read, a full disk) the
    temporary file is removed and an existing file at ``path`` is left as it was.
    """
    enc = Encoder()
    try:
        tree = enc.encode(obj)
    except RecursionError:
        raise ValueError("anydevice.save(): obj is nested too deeply for a checkpoint (Python's recursion limit)") from None
    metadata = {_VERSION_KEY: FORMAT_VERSION, _KEY: _json(tree)}
    _fmt.write(path, [_item(name, v) for name, v in enc.arrays], metadata)


def _json(tree) -> str:
    return json.dumps(tree, separators=(",", ":"), allow_nan=False, ensure_ascii=False)


def _item(name: str, v):
    if isinstance(v, Tensor):
        code, pair = _fmt.code_of(v.dtype)
        read = lambda: _host(v)  # noqa: E731
        shape, d = v.shape, v.dtype
    else:
        arr = np.asarray(v)
        shape, d = arr.shape, _dt.dtype(arr.dtype)
        code, pair = _fmt.code_of(d)
        read = lambda: arr  # noqa: E731
    nbytes = d.itemsize
    for s in shape:
        nbytes *= s
    return name, code, tuple(shape) + ((2,) if pair else ()), nbytes, (lambda: _real_pairs(read(), pair))


def _host(t: Tensor) -> np.ndarray:
    """The tensor's values on the host, only to be read: a cpu tensor's own buffer (buffers never
    change once made, so nothing is copied), else a fresh copy from the device."""
    be = t.device._backend
    return be.to_host(t._buf, t.device.index, t.shape, t.dtype)


def _real_pairs(arr: np.ndarray, pair: bool) -> np.ndarray:
    arr = np.ascontiguousarray(arr)
    return arr.reshape(arr.shape + (1,)).view(arr.real.dtype) if pair else arr


def load(path, map_location=None):
    """Read a checkpoint written by :func:`save` (or any safetensors file: then a ``{name: Tensor}``
    dict in file order, on cpu unless ``map_location`` says otherwise).

    ``map_location`` places each tensor:

    - ``None``: the device it was saved from, which must exist here;
    - a :class:`Device` or a string (``"cpu"``, ``"dcu:1"``): every tensor goes there;
    - a mapping ``{saved device: new device}``: keys are device strings (``"npu:0"``) or types
      (``"npu"``); tensors from devices it does not name stay where they were saved;
    - a callable ``f(saved_device: str) -> device``: its answer (None keeps the saved device).

    Numpy arrays come back as numpy arrays whatever ``map_location`` says.

    The whole header is validated first — offsets, sizes, dtypes, the structure, and that every
    tensor's target device exists and supports its dtype — so a truncated, corrupt or hostile file
    raises :class:`CheckpointError` (naming the file and the problem) before any data is read.
    Tensors are then read one at a time: peak extra memory is about the largest tensor.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        meta, entries, data_at = _fmt.read_header(f, path)
        fail = lambda problem: CheckpointError(path, problem)  # noqa: E731
        dec = Decoder({e.name: (e.code, e.shape) for e in entries}, _fmt.stored_as, fail)
        tree = _structure(meta, entries, dec, fail)
        places = _placements(dec.refs, map_location, fail)
        values = {}
        f.seek(data_at)
        for e in sorted(entries, key=lambda e: e.begin):
            arr = _fmt.read_array(f, e, path)
            tag, d, _, flag = dec.refs[e.name]
            if arr.dtype != d.numpy:  # complex from real pairs
                arr = arr.view(d.numpy).reshape(arr.shape[:-1])
            if tag == "$ndarray":
                values[e.name] = arr[()] if flag else arr
                continue
            t = asarray(arr, dtype=d, device=places[e.name])
            del arr
            values[e.name] = t.requires_grad_(True) if flag else t
    dec.values = values
    return dec.decode(tree)


def _structure(meta: dict, entries, dec: Decoder, fail):
    """The structure's JSON, validated (every reference resolved, every tensor referenced)."""
    if _KEY not in meta:  # a plain safetensors file: {name: tensor}, saved "on cpu"
        tree = {"$dict": [[e.name, {"$tensor": {"name": e.name, "dtype": _fmt.dtype_of(e.code).name, "device": "cpu"}}]
                          for e in entries]}
        dec.decode(tree)
        return tree
    version = meta.get(_VERSION_KEY)
    if version != FORMAT_VERSION:
        raise fail(f"the file is anydevice checkpoint format {version!r}; this anydevice reads format {FORMAT_VERSION!r}")
    tree = _fmt.parse_json(meta[_KEY], "structure metadata", fail)
    try:
        dec.decode(tree)
    except RecursionError:
        raise fail("the structure metadata is nested too deeply") from None
    unused = [e.name for e in entries if e.name not in dec.refs]
    if unused:
        raise fail(f"tensors {unused[:5]} are in the file but not in its structure metadata")
    return tree


def _placements(refs: dict, map_location, fail) -> dict:
    """``{tensor name: Device}``, or an error before any data is read."""
    resolve = _resolver(map_location)
    seen, out = {}, {}
    for name, (tag, d, saved, _) in refs.items():
        if tag != "$tensor":
            continue
        dev = seen.get(saved)
        if dev is None:
            dev = seen[saved] = resolve(saved, fail)
        if d not in dev.dtypes:
            raise fail(f"tensor {name!r} is {d.name}, which {dev} does not support (it supports "
                       f"{', '.join(x.name for x in dev.dtypes)}); choose another device with map_location")
        out[name] = dev
    return out


def _resolver(map_location) -> Callable:
    if map_location is None:
        return _saved_device
    if isinstance(map_location, (Device, str)):
        dev = _given(map_location, "map_location")
        return lambda saved, fail: dev
    if isinstance(map_location, Mapping):
        table = {str(k): v for k, v in map_location.items()}

        def mapped(saved, fail):
            for k in (saved, saved.split(":")[0]):
                if k in table:
                    return _given(table[k], f"map_location[{k!r}]")
            return _saved_device(saved, fail)

        return mapped
    if callable(map_location):

        def called(saved, fail):
            spec = map_location(saved)
            return _saved_device(saved, fail) if spec is None else _given(spec, f"map_location({saved!r})")

        return called
    raise TypeError(f"anydevice.load(): map_location must be None, a Device, a device string, a mapping "
                    f"{{saved device: new device}} or a callable, not {type(map_location).__name__}")


def _given(spec, what: str) -> Device:
    try:
        return as_device(spec)
    except (TypeError, ValueError) as e:
        raise type(e)(f"anydevice.load(): {what} is {spec!r}: {e}") from None


def _saved_device(saved: str, fail) -> Device:
    try:
        return as_device(saved)
    except (TypeError, ValueError, RuntimeError) as e:
        raise fail(f"its tensors were saved on {saved}, which cannot be used here ({e}); pass map_location, e.g. "
                   f"map_location='cpu' or map_location={{{saved!r}: 'cpu'}}") from None
