"""Seeds and generators: the state that makes successive random draws differ.

A :class:`Generator` is a seed and an offset into the Philox stream of that seed (see
:mod:`anydevice.ops.random`). Each draw takes the next blocks of the stream and advances the
offset past them, so the same seed and the same sequence of calls give the same numbers on every
device. Each device has a default generator; :func:`manual_seed` seeds all of them at once.
"""
from __future__ import annotations

import os
import threading

import numpy as np

from anydevice import api as _api
from anydevice.base import dtypes as _dt
from anydevice.engine.tensor import Tensor
from anydevice.ops.random import MASK
from anydevice.runtime.devices import Device, as_device

__all__ = ["Generator", "default_generator", "manual_seed", "seed", "initial_seed", "get_rng_state", "set_rng_state"]

#: The seed of a new generator and of every default generator until :func:`manual_seed` is called.
DEFAULT_SEED = 0
_U64 = 1 << 64
_STATE_BYTES = 16  # seed and offset, each a little-endian uint64


def _check_seed(name: str, value) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}(): seed must be an int, not {type(value).__name__}")
    value = int(value)
    if not -(1 << 63) <= value < _U64:
        raise ValueError(f"{name}(): seed must be in [-2**63, 2**64), got {value}")
    return value % _U64


class Generator:
    """A stream of random numbers: a seed (the Philox key) and an offset (the next 128-bit block).

    ``device`` (None: the current device) is where draws that name no device put their result;
    a generator's numbers are the same whichever device computes them. Drawing from one generator
    in several threads is safe: each draw reserves its own blocks.
    """

    __slots__ = ("_device", "_seed", "_offset", "_lock")

    def __init__(self, device=None):
        self._device: Device = as_device(device)
        self._seed, self._offset = DEFAULT_SEED, 0
        self._lock = threading.Lock()

    @property
    def device(self) -> Device:
        return self._device

    @property
    def offset(self) -> int:
        """The next unused block of the stream."""
        return self._offset

    def manual_seed(self, seed: int) -> Generator:
        """Restart at the beginning of ``seed``'s stream (an int in [-2**63, 2**64); negative seeds
        are taken modulo 2**64). Returns the generator."""
        s = _check_seed("manual_seed", seed)
        with self._lock:
            self._seed, self._offset = s, 0
        return self

    def seed(self) -> int:
        """Reseed from the operating system's entropy; returns the new seed."""
        s = int.from_bytes(os.urandom(8), "little")
        self.manual_seed(s)
        return s

    def initial_seed(self) -> int:
        """The seed this generator was last seeded with."""
        return self._seed

    def get_state(self) -> Tensor:
        """The state as a uint8 tensor of 16 bytes on the cpu (seed, then offset); see :meth:`set_state`."""
        with self._lock:
            raw = np.array([self._seed, self._offset], dtype="<u8").view(np.uint8)
        return _api.asarray(raw, dtype=_dt.uint8, device="cpu")

    def set_state(self, state) -> Generator:
        """Restore a state from :meth:`get_state` (a tensor, numpy array or bytes of 16 uint8)."""
        if isinstance(state, Tensor):
            state = state.numpy()
        elif isinstance(state, (bytes, bytearray)):
            state = np.frombuffer(bytes(state), dtype=np.uint8)
        arr = np.asarray(state)
        if arr.dtype != np.uint8:
            raise TypeError(f"set_state(): the state must be uint8 bytes from get_state(), not dtype {arr.dtype}")
        if arr.size != _STATE_BYTES:
            raise ValueError(f"set_state(): the state must have {_STATE_BYTES} bytes (from get_state()), got {arr.size}")
        s, off = (int(v) for v in np.ascontiguousarray(arr.reshape(-1)).view("<u8"))
        with self._lock:
            self._seed, self._offset = s, off
        return self

    @property
    def key(self) -> tuple:
        """The Philox key: the seed's low and high 32-bit words."""
        return self._seed & MASK, self._seed >> 32

    def reserve(self, blocks: int) -> tuple:
        """(key, offset) for a draw of ``blocks`` blocks, advancing the offset past them."""
        with self._lock:
            off = self._offset
            if off + blocks > _U64:
                raise OverflowError(f"this generator's stream is used up (offset {off} + {blocks} blocks passes "
                                    "2**64); reseed it with manual_seed()")
            self._offset = off + blocks
        return self.key, off

    def __repr__(self) -> str:
        return f"Generator(device='{self._device}', seed={self._seed}, offset={self._offset})"


_defaults: dict[str, Generator] = {}
_global_seed = [DEFAULT_SEED]
_lock = threading.Lock()


def default_generator(device=None) -> Generator:
    """The default generator of ``device`` (None: the current device), created at first use with
    the last seed given to :func:`manual_seed`."""
    dev = as_device(device)
    g = _defaults.get(str(dev))
    if g is None:
        with _lock:
            g = _defaults.get(str(dev))
            if g is None:
                g = _defaults[str(dev)] = Generator(dev).manual_seed(_global_seed[0])
    return g


def manual_seed(seed: int) -> Generator:
    """Seed the default generator of every device, those already used and those used later, with
    ``seed``; returns the current device's. The same seed then gives the same numbers everywhere."""
    s = _check_seed("manual_seed", seed)
    with _lock:
        _global_seed[0] = s
        for g in _defaults.values():
            g.manual_seed(s)
    return default_generator()


def seed(seed: int | None = None) -> int:
    """``seed(n)``: :func:`manual_seed` (Paddle's spelling). ``seed()``: seed every default generator
    from the operating system's entropy. Returns the seed used."""
    s = int.from_bytes(os.urandom(8), "little") if seed is None else _check_seed("seed", seed)
    manual_seed(s)
    return s


def initial_seed(device=None) -> int:
    """The seed of ``device``'s default generator."""
    return default_generator(device).initial_seed()


def get_rng_state(device=None) -> Tensor:
    """The state of ``device``'s default generator (see :meth:`Generator.get_state`)."""
    return default_generator(device).get_state()


def set_rng_state(state, device=None) -> None:
    """Restore ``device``'s default generator from :func:`get_rng_state`."""
    default_generator(device).set_state(state)
