"""The safetensors file layout: write one atomically, validate a header, read tensors one by one.

A file is an 8-byte little-endian header length ``N``, ``N`` bytes of JSON (an object: each tensor's
name -> ``{"dtype", "shape", "data_offsets": [begin, end]}``, plus an optional ``"__metadata__"``
object of strings), then the data: each tensor's little-endian bytes at ``begin..end`` counted from
the end of the header. Offsets cover the data exactly, without gaps or overlaps.
"""
from __future__ import annotations

import json
import math
import os
import sys

import numpy as np

from anydevice.base import dtypes as _dt
from anydevice.base.errors import CheckpointError

MAX_HEADER = 100_000_000  # the limit the safetensors library itself enforces
_CODES = {_dt.bool_: "BOOL", _dt.uint8: "U8", _dt.int8: "I8", _dt.int16: "I16", _dt.uint16: "U16",
          _dt.float16: "F16", _dt.bfloat16: "BF16", _dt.int32: "I32", _dt.uint32: "U32", _dt.float32: "F32",
          _dt.float64: "F64", _dt.int64: "I64", _dt.uint64: "U64"}
_PAIRS = {_dt.complex64: _dt.float32, _dt.complex128: _dt.float64}  # stored as (..., 2) real pairs
_FROM_CODE = {c: d for d, c in _CODES.items()} | {"C64": _dt.complex64}
_LITTLE = sys.byteorder == "little"


def _max_ndim() -> int:
    try:
        np.empty((0,) * 64)
        return 64  # numpy 2
    except ValueError:
        return 32


MAX_NDIM = _max_ndim()


def code_of(d) -> tuple[str, bool]:
    """The safetensors dtype code an anydevice dtype is written as, and whether it is a real pair."""
    return (_CODES[_PAIRS[d]], True) if d in _PAIRS else (_CODES[d], False)


def dtype_of(code: str):
    """The anydevice dtype a safetensors dtype code reads as."""
    return _FROM_CODE[code]


def stored_as(d, code: str, shape: tuple):
    """The shape of ``d`` data stored as ``code[shape]`` (complex as real pairs: the last axis, 2,
    dropped), or None when ``code`` cannot hold ``d``."""
    if _FROM_CODE.get(code) is d:
        return tuple(shape)
    if d in _PAIRS and code == _CODES[_PAIRS[d]] and shape and shape[-1] == 2:
        return tuple(shape[:-1])
    return None


# --- writing ---------------------------------------------------------------------------------
def write(path, items, metadata: dict) -> None:
    """Write ``items`` — ``(name, dtype code, file shape, nbytes, read)``, ``read()`` giving the
    host array — to ``path`` atomically: a temporary file in the same folder, fsync, then
    ``os.replace``. On any failure the temporary file is removed and ``path`` is untouched."""
    items = sorted(items, key=lambda it: -_FROM_CODE[it[1]].itemsize)  # keeps every tensor aligned
    header, at = {"__metadata__": metadata}, 0
    for name, code, shape, nbytes, _ in items:
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": [at, at + nbytes]}
        at += nbytes
    head = json.dumps(header, separators=(",", ":"), allow_nan=False).encode()
    head += b" " * (-len(head) % 8)
    path = os.fspath(path)
    folder, base = os.path.split(os.path.abspath(path))
    tmp = os.path.join(folder, f".{base}.{os.urandom(6).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb", buffering=0) as f:
            f.write(len(head).to_bytes(8, "little") + head)
            for name, _, _, nbytes, read in items:
                arr = np.ascontiguousarray(read())
                if not _LITTLE and arr.dtype.itemsize > 1:
                    arr = arr.byteswap()
                if arr.nbytes != nbytes:
                    raise RuntimeError(f"anydevice.save(): tensor {name!r} read back {arr.nbytes} bytes, expected {nbytes}")
                _write_all(f, arr.reshape(-1).view(np.uint8))
                del arr
            _datasync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_folder(folder)


_datasync = getattr(os, "fdatasync", os.fsync)  # data and size, not timestamps (fsync where absent)


def _write_all(f, view) -> None:
    mv = memoryview(view)
    while mv:
        n = f.write(mv)
        mv = mv[n:]


def _fsync_folder(folder: str) -> None:
    """Make the rename itself durable (POSIX); folders cannot be opened for this on Windows."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- reading ---------------------------------------------------------------------------------
class Entry:
    """One tensor as the header declares it."""

    __slots__ = ("name", "code", "shape", "begin", "end")

    def __init__(self, name, code, shape, begin, end):
        self.name, self.code, self.shape, self.begin, self.end = name, code, shape, begin, end


def _no_constants(c):
    raise ValueError(f"{c} is not JSON")


def _unique_keys(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"the key {k!r} appears twice")
        out[k] = v
    return out


def parse_json(text, what: str, fail):
    """Strict JSON (no NaN/Infinity, no repeated keys) or ``fail``'s error naming ``what``."""
    try:
        return json.loads(text, parse_constant=_no_constants, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise fail(f"the {what} is nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, our own checks, too many digits
        raise fail(f"the {what} is not valid JSON: {e}") from None


def read_header(f, path: str) -> tuple[dict, list[Entry], int]:
    """Validate the whole header of the open file ``f``: ``(metadata, entries in file order,
    offset of the data)``. Raises :class:`CheckpointError` naming ``path`` and the problem."""
    fail = lambda problem: CheckpointError(path, problem)
    size = os.fstat(f.fileno()).st_size
    if size < 8:
        raise fail(f"the file is {size} bytes, shorter than the 8-byte header length (truncated, or not safetensors)")
    n = int.from_bytes(f.read(8), "little")
    if n > MAX_HEADER:
        raise fail(f"the header length is {n} bytes, over the {MAX_HEADER}-byte limit (corrupt, or not safetensors)")
    if 8 + n > size:
        raise fail(f"the header length ({n} bytes) runs past the end of the {size}-byte file (truncated?)")
    header = parse_json(f.read(n), "header", fail)
    if not isinstance(header, dict):
        raise fail(f"the header is a JSON {type(header).__name__}, not an object")
    meta = header.pop("__metadata__", None)
    if meta is None:
        meta = {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise fail("the header's __metadata__ must be an object of strings")
    data = size - 8 - n
    entries = [_entry(name, info, data, fail) for name, info in header.items()]
    at, prev = 0, None
    for e in sorted(entries, key=lambda e: (e.begin, e.end)):
        if e.begin < at:
            raise fail(f"tensors {prev.name!r} (bytes {prev.begin}..{prev.end}) and {e.name!r} "
                       f"(bytes {e.begin}..{e.end}) overlap")
        if e.begin > at:
            raise fail(f"bytes {at}..{e.begin} of the data belong to no tensor (offsets must leave no gap)")
        at, prev = e.end, e
    if at != data:
        raise fail(f"the file has {data - at} bytes after its last tensor (offsets must cover the data exactly)")
    return meta, entries, 8 + n


def _entry(name, info, data: int, fail) -> Entry:
    at = f"tensor {name!r}"
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise fail(f"{at} must be an object with exactly dtype, shape and data_offsets")
    code, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
    d = _FROM_CODE.get(code) if isinstance(code, str) else None
    if d is None:
        raise fail(f"{at} has unknown dtype {code!r}; anydevice reads {', '.join(_FROM_CODE)}")
    if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
        raise fail(f"{at} has shape {shape!r}; a shape is a list of non-negative ints")
    if len(shape) > MAX_NDIM:
        raise fail(f"{at} has {len(shape)} dimensions; at most {MAX_NDIM} are allowed")
    if not (isinstance(offs, list) and len(offs) == 2 and all(type(o) is int for o in offs) and 0 <= offs[0] <= offs[1]):
        raise fail(f"{at} has data_offsets {offs!r}; they must be [begin, end] with 0 <= begin <= end")
    begin, end = offs
    if end > data:
        raise fail(f"{at} ends at data byte {end}, past the end of the file's {data} data bytes (truncated?)")
    nbytes = math.prod(shape) * d.itemsize
    if end - begin != nbytes:
        raise fail(f"{at} is {code}{shape} ({nbytes} bytes) but its data_offsets span {end - begin} bytes")
    return Entry(name, code, tuple(shape), begin, end)


def read_array(f, e: Entry, path: str) -> np.ndarray:
    """The tensor's bytes read into a new host array of its stored dtype and shape (``f`` positioned
    at its first byte)."""
    d = _FROM_CODE[e.code]
    buf = np.empty(e.end - e.begin, np.uint8)
    got = f.readinto(memoryview(buf)) if buf.nbytes else 0
    if got != buf.nbytes:
        raise CheckpointError(path, f"tensor {e.name!r}: read {got} of {buf.nbytes} bytes (the file changed?)")
    arr = buf.view(d.numpy).reshape(e.shape)
    if not _LITTLE and d.itemsize > 1:
        arr = arr.byteswap()
    if d is _dt.bool_ and buf.size and buf.max() > 1:
        raise CheckpointError(path, f"tensor {e.name!r} is BOOL but holds bytes other than 0 and 1")
    return arr
