"""Counter-based random ops: Philox-4x32-10 bits and the distributions drawn from them.

Every op here is a pure function of its attributes: ``key`` (two 32-bit words: the seed),
``offset`` (where the op starts reading the stream, in 128-bit blocks) and the distribution's
parameters. One call therefore gives the same bits on every device. The state that makes
successive draws differ lives in :class:`anydevice.random.Generator`, which hands out offsets and
advances them by :func:`stream_blocks` per draw.

**The stream.** Block ``i`` of a call is Philox-4x32-10 (Salmon, Moraes, Dror, Shaw, SC 2011) of the
128-bit counter ``offset + i`` (four 32-bit words, least significant first) under ``key``; its four
output words are words ``4i .. 4i+3`` of the call. How each op turns words into values, with
exact integer steps or single correctly rounded float operations, so that native kernels and
the decompositions agree bit for bit:

- ``philox_bits``: the stream's bits as the integer dtype (little-endian: 8- and 16-bit values
  take 4 and 2 per word, low bits first; a 64-bit value takes two words, the first one low);
- ``random_uniform``: ``u = k * 2**-m`` with ``k`` the top ``m`` bits of a word (m = 24 for
  float32, 11 for float16, 8 for bfloat16) or, for float64, ``(w0 >> 5) * 2**26 + (w1 >> 6)``
  from two words (m = 53); then ``u * (high - low) + low`` in the dtype (float32 for the 16-bit
  floats, rounded once);
- ``random_normal``: Box–Muller on pairs of those uniforms (m = 24, or 53 for float64), the first
  shifted into (0, 1]: ``sqrt(log(u1) * -2) * (cos, sin)(u2 * 2pi) * std + mean``. log, sqrt,
  cos and sin are each device's own, so devices agree to a few ulp, not bit for bit;
- ``random_randint``: Lemire's multiply-shift without rejection: ``low + (w * r) >> 32`` for a range
  ``r = high - low <= 2**32`` (each value's probability is off by less than ``r / 2**32`` of itself),
  ``low + (x * r) >> 64`` with ``x`` from two words for wider ranges (up to ``2**63``);
- ``random_permutation``: ``0 .. n-1`` ordered by (word, index), one word per index.

**Decompositions** compute with int64 tensors only: words are values below ``2**32``, each
32 x 32-bit product is split into 16-bit halves so that nothing overflows, and no op shifts left.
So every device with int64 runs them on the device, including those without uint32 or uint64.
The distributions read their words through ``philox_bits``, so a backend that implements that
one op natively speeds up all of them.

**Kernels.** :func:`array_kernels` builds native kernels for any numpy-like array module (numpy on
the cpu, CuPy on cuda); the references are separate, plain implementations (the oracle).
"""
from __future__ import annotations

import math

import numpy as np

from anydevice.base import dtypes as _dt
from anydevice.ops.registry import Device, DType, Int, Ints, Scalar, Shape, define

MASK = 0xFFFFFFFF
PHILOX_M = (0xD2511F53, 0xCD9E8D57)  # round multipliers
PHILOX_W = (0x9E3779B9, 0xBB67AE85)  # key increments (Weyl sequence)
ROUNDS = 10
_U64 = 1 << 64
_MANT = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8}  # uniform bits per dtype
_TWO_PI = 2.0 * math.pi


# --- arguments: checked the same way by the ops and by anydevice.random's functions ----------------
def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_real(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def check_shape(name: str, shape) -> tuple:
    """``shape`` (an int or a sequence of ints) as a tuple of non-negative Python ints."""
    dims = (shape,) if _is_int(shape) else shape
    if not isinstance(dims, (tuple, list)) or not all(_is_int(s) for s in dims):
        raise TypeError(f"{name}(): shape must be an int or a tuple of ints, not {shape!r}")
    if any(s < 0 for s in dims):
        raise ValueError(f"{name}(): negative dimension in shape {tuple(dims)} (sizes must be >= 0)")
    return tuple(int(s) for s in dims)


def check_key(name: str, key) -> tuple:
    """``key`` as a pair of Python ints in [0, 2**32)."""
    if not isinstance(key, (tuple, list)) or len(key) != 2 or not all(_is_int(k) for k in key):
        raise TypeError(f"{name}(): key must be a pair of ints (two 32-bit words), not {key!r}")
    if not all(0 <= k <= MASK for k in key):
        raise ValueError(f"{name}(): key words must be in [0, 2**32), got {tuple(int(k) for k in key)}")
    return int(key[0]), int(key[1])


def check_offset(name: str, offset, blocks: int) -> int:
    """``offset`` as a Python int such that ``offset + blocks <= 2**64`` (the counter range)."""
    if not _is_int(offset):
        raise TypeError(f"{name}(): offset must be an int (a counter of 128-bit blocks), not {type(offset).__name__}")
    if not 0 <= offset <= _U64 - blocks:
        raise ValueError(f"{name}(): offset must be in [0, 2**64 - {blocks}] for a draw of {blocks} block(s), got {offset}")
    return int(offset)


def check_dtype(name: str, dtype, default, kind: str):
    """``dtype`` (None: ``default``) as a DType of ``kind`` (``"float"``: real floating, ``"int"``: integer)."""
    d = _dt.dtype(dtype) if dtype is not None else default
    ok = d.kind == "float" if kind == "float" else d.kind in ("int", "uint")
    if not ok:
        allowed = "a real floating dtype (float16, bfloat16, float32, float64)" if kind == "float" else \
            "an integer dtype (int8 .. int64, uint8 .. uint64)"
        raise TypeError(f"{name}(): dtype must be {allowed}, not {d.name}")
    return d


def check_real(name: str, what: str, v) -> float:
    """A finite Python float from an int or float argument."""
    if not _is_real(v):
        raise TypeError(f"{name}(): {what} must be a real number, not {type(v).__name__}")
    f = float(v)
    if not math.isfinite(f):
        raise ValueError(f"{name}(): {what} must be finite, got {f}")
    return f


def check_bounds(name: str, low, high) -> tuple:
    """(low, high) as finite floats with ``low < high`` and a finite ``high - low``."""
    lo, hi = check_real(name, "low", low), check_real(name, "high", high)
    if not lo < hi:
        raise ValueError(f"{name}(): low must be less than high, got low={lo}, high={hi}")
    if not math.isfinite(hi - lo):
        raise ValueError(f"{name}(): high - low must be finite, got low={lo}, high={hi}")
    return lo, hi


def check_int_range(name: str, low, high, d) -> tuple:
    """(low, high) as ints with ``low < high``, both ends in ``d`` and in int64, ``high - low <= 2**63``."""
    for what, v in (("low", low), ("high", high)):
        if not _is_int(v):
            raise TypeError(f"{name}(): {what} must be an int, not {type(v).__name__}")
    low, high = int(low), int(high)
    if not low < high:
        raise ValueError(f"{name}(): low must be less than high, got low={low}, high={high}")
    info = np.iinfo(d.numpy)
    lo_ok, hi_ok = max(int(info.min), -(1 << 63)), min(int(info.max), (1 << 63) - 1)
    if low < lo_ok or high - 1 > hi_ok:
        raise ValueError(f"{name}(): values in [{low}, {high}) do not fit {d.name}; allowed: low >= {lo_ok}, "
                         f"high <= {hi_ok + 1}")
    if high - low > 1 << 63:
        raise ValueError(f"{name}(): high - low must be at most 2**63, got {high - low}")
    return low, high


def check_count(name: str, what: str, n, d=None) -> int:
    """A non-negative int below 2**31 (and, with ``d``, whose values ``0 .. n-1`` fit ``d``)."""
    if not _is_int(n):
        raise TypeError(f"{name}(): {what} must be an int, not {type(n).__name__}")
    n = int(n)
    if n < 0:
        raise ValueError(f"{name}(): {what} must be non-negative, got {n}")
    top = (1 << 31) - 1 if d is None else min((1 << 31) - 1, int(np.iinfo(d.numpy).max) + 1)
    if n > top:
        raise ValueError(f"{name}(): {what} must be at most {top}{f' for dtype {d.name}' if d is not None else ''}, got {n}")
    return n


# --- how much of the stream each op reads ---------------------------------------------------------
def _size(shape) -> int:
    return math.prod(shape)


def _words(name: str, a: dict) -> int:
    if name == "random_permutation":
        return a["n"]
    n = _size(a["shape"])
    if name == "philox_bits":
        return -(-n * a["dtype"].itemsize // 4)
    if name == "random_uniform":
        return n * (2 if a["dtype"] is _dt.float64 else 1)
    if name == "random_normal":
        return 2 * (-(-n // 2)) * (2 if a["dtype"] is _dt.float64 else 1)
    if name == "random_randint":
        return n * (2 if a["high"] - a["low"] > 1 << 32 else 1)
    raise KeyError(f"{name!r} is not a random op")


def stream_blocks(name: str, attrs: dict) -> int:
    """How many 128-bit blocks of the stream op ``name`` reads with (canonical) ``attrs``: a
    generator advances its offset by this much per draw."""
    return -(-_words(name, attrs) // 4)


# --- the reference: a plain Philox-4x32-10 on uint64 arrays (the conformance oracle) ---------------
def philox4x32(counters, key) -> np.ndarray:
    """Philox-4x32-10 of each row of ``counters`` (m x 4 words) under ``key`` (2 words): m x 4 uint64."""
    c = [np.asarray(counters, dtype=np.uint64).reshape(-1, 4)[:, j] for j in range(4)]
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    m0, m1, mask = np.uint64(PHILOX_M[0]), np.uint64(PHILOX_M[1]), np.uint64(MASK)
    for r in range(ROUNDS):
        if r:
            k0, k1 = (k0 + np.uint64(PHILOX_W[0])) & mask, (k1 + np.uint64(PHILOX_W[1])) & mask
        p0, p1 = c[0] * m0, c[2] * m1
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & mask, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & mask]
    return np.stack(c, axis=1)


def reference_words(n: int, key, offset: int) -> np.ndarray:
    """The first ``n`` words of the stream at ``offset`` (uint64 array)."""
    blocks = [offset + i for i in range(-(-n // 4))]
    ctr = np.array([[b & MASK, b >> 32, 0, 0] for b in blocks], dtype=np.uint64).reshape(-1, 4)
    return philox4x32(ctr, key).reshape(-1)[:n]


def _ref_ints(w, m):
    """Integers of ``m`` random bits from uint64 words (m = 53: from pairs of words)."""
    if m == 53:
        return (w[0::2] >> np.uint64(5)) * np.uint64(1 << 26) + (w[1::2] >> np.uint64(6))
    return w >> np.uint64(32 - m)


def _compute(d):
    return _dt.float64 if d is _dt.float64 else _dt.float32


def _bits_ref(shape, key, offset, dtype, device=None):
    w = reference_words(_words("philox_bits", {"shape": shape, "dtype": dtype}), key, offset)
    return w.astype("<u4").view(dtype.numpy.newbyteorder("<"))[:_size(shape)].astype(dtype.numpy).reshape(shape)


def _uniform_ref(shape, low, high, key, offset, dtype, device=None):
    m, c = _MANT[dtype.name], _compute(dtype).numpy
    k = _ref_ints(reference_words(_words("random_uniform", {"shape": shape, "dtype": dtype}), key, offset), m)
    u = k.astype(c) * c.type(2.0 ** -m)  # exact
    return (u * c.type(high - low) + c.type(low)).astype(dtype.numpy).reshape(shape)


def _normal_ref(shape, mean, std, key, offset, dtype, device=None):
    n = _size(shape)
    c = _compute(dtype)
    m = _MANT[c.name]
    k = _ref_ints(reference_words(_words("random_normal", {"shape": shape, "dtype": dtype}), key, offset), m)
    u1 = (k[0::2] + np.uint64(1)).astype(np.float64) * 2.0 ** -m
    u2 = k[1::2].astype(np.float64) * 2.0 ** -m
    t = (u2.astype(c.numpy) * c.numpy.type(_TWO_PI)).astype(np.float64)  # the angle as rounded in the dtype
    r = np.sqrt(-2.0 * np.log(u1))
    z = np.stack([r * np.cos(t), r * np.sin(t)], axis=-1).reshape(-1)[:n]
    return (z * std + mean).astype(dtype.numpy).reshape(shape)


def _randint_ref(shape, low, high, key, offset, dtype, device=None):
    r = high - low
    w = [int(x) for x in reference_words(_words("random_randint", {"shape": shape, "low": low, "high": high}), key, offset)]
    if r <= 1 << 32:
        v = [(x * r) >> 32 for x in w]
    else:
        v = [(((hi << 32) | lo) * r) >> 64 for hi, lo in zip(w[0::2], w[1::2])]
    return np.array([low + x for x in v], dtype=dtype.numpy).reshape(shape)


def _permutation_ref(n, key, offset, dtype, device=None):
    w = reference_words(n, key, offset)
    return np.lexsort((np.arange(n), w)).astype(dtype.numpy)


# --- decompositions: int64 tensor math that every device with int64 runs ---------------------------
def _pair(xp, e, v0: int, v1: int):
    """The (2, 1) int64 tensor [[v0], [v1]] from ``e`` = [[0], [1]]."""
    return e * (v1 - v0) + v0


def _mulhilo(xp, a, mh, ml):
    """(hi, lo) 32-bit halves of ``a * m`` for int64 ``a`` in [0, 2**32) and ``m = mh * 2**16 + ml``."""
    t = a * mh  # < 2**48
    s = xp.bitwise_and(t, 0xFFFF) * 65536 + a * ml  # a*m = (t >> 16) * 2**32 + s, s < 2**49
    return xp.bitwise_right_shift(t, 16) + xp.bitwise_right_shift(s, 32), xp.bitwise_and(s, MASK)


def stream_words(xp, n: int, key, offset: int, device):
    """The first ``n`` (> 0) words of the stream at ``offset`` as an int64 tensor of values in [0, 2**32).

    The counter words 0 and 2 of all blocks form one (2, blocks) tensor, words 1 and 3 another,
    so each round is a few whole-tensor ops.
    """
    blocks, i64 = -(-n // 4), _dt.int64
    lo = xp.arange(offset & MASK, (offset & MASK) + blocks, dtype=i64, device=device)
    zero = xp.zeros_like(lo)
    a = xp.stack([xp.bitwise_and(lo, MASK), zero])  # counter words 0, 2
    b = xp.stack([xp.bitwise_right_shift(lo, 32) + (offset >> 32), zero])  # counter words 1, 3
    e = xp.reshape(xp.arange(2, dtype=i64, device=device), (2, 1))
    mh = _pair(xp, e, PHILOX_M[0] >> 16, PHILOX_M[1] >> 16)
    ml = _pair(xp, e, PHILOX_M[0] & 0xFFFF, PHILOX_M[1] & 0xFFFF)
    k, inc = _pair(xp, e, *key), _pair(xp, e, *PHILOX_W)
    for r in range(ROUNDS):
        if r:
            k = xp.bitwise_and(k + inc, MASK)
        hi, lo = _mulhilo(xp, a, mh, ml)
        a = xp.bitwise_xor(xp.bitwise_xor(xp.flip(hi, axis=0), b), k)  # (hi1 ^ c1 ^ k0, hi0 ^ c3 ^ k1)
        b = xp.flip(lo, axis=0)  # (lo1, lo0)
    out = xp.reshape(xp.stack([a[0], b[0], a[1], b[1]], axis=-1), (4 * blocks,))
    return out if 4 * blocks == n else out[:n]


def _stream(xp, n: int, key, offset: int, device):
    """The first ``n`` words as non-negative int64, read through ``philox_bits`` as int32 bits (a
    dtype every device holds): a device's native ``philox_bits`` kernel serves every random op."""
    w = xp.philox_bits((n,), key=key, offset=offset, dtype=_dt.int32, device=device)
    return xp.bitwise_and(xp.astype(w, _dt.int64), MASK)


def _ints(xp, w, m: int):
    """Integers of ``m`` random bits from int64 words (m = 53: from pairs of words)."""
    if m == 53:
        p = xp.reshape(w, (-1, 2))
        return xp.bitwise_right_shift(p[:, 0], 5) * (1 << 26) + xp.bitwise_right_shift(p[:, 1], 6)
    return xp.bitwise_right_shift(w, 32 - m)


def _signed(xp, v, bits: int):
    """Non-negative ``bits``-bit values read as two's complement."""
    half = 1 << (bits - 1)
    return xp.where(xp.greater_equal(v, half), v - (1 << bits), v)


def _empty(xp, shape, dtype, device):
    return xp.full(shape, 0, dtype=dtype, device=device)


def _bits(xp, shape, key, offset, dtype, device=None):
    n = _size(shape)
    if n == 0:
        return _empty(xp, shape, dtype, device)
    bits = 8 * dtype.itemsize
    w = stream_words(xp, _words("philox_bits", {"shape": shape, "dtype": dtype}), key, offset, device)
    if bits == 64:
        p = xp.reshape(w, (-1, 2))
        v = _signed(xp, p[:, 1], 32) * (1 << 32) + p[:, 0]  # the 64-bit pattern as an int64
    elif bits == 32:
        v = _signed(xp, w, 32) if dtype.kind == "int" else w
    else:
        parts = [xp.bitwise_and(xp.bitwise_right_shift(w, bits * j), (1 << bits) - 1) for j in range(32 // bits)]
        v = xp.reshape(xp.stack(parts, axis=-1), (-1,))[:n]
        v = _signed(xp, v, bits) if dtype.kind == "int" else v
    return xp.reshape(xp.astype(v, dtype), shape)


def _unit(xp, k, m: int, c):
    """``k * 2**-m`` in dtype ``c`` (exact)."""
    return xp.astype(k, c) * 2.0 ** -m


def _finish(xp, r, shape, dtype):
    return xp.reshape(r if r.dtype is dtype else xp.astype(r, dtype), shape)


def _uniform(xp, shape, low, high, key, offset, dtype, device=None):
    if _size(shape) == 0:
        return _empty(xp, shape, dtype, device)
    m = _MANT[dtype.name]
    w = _stream(xp, _words("random_uniform", {"shape": shape, "dtype": dtype}), key, offset, device)
    u = _unit(xp, _ints(xp, w, m), m, _compute(dtype))
    return _finish(xp, u * (high - low) + low, shape, dtype)


def _normal(xp, shape, mean, std, key, offset, dtype, device=None):
    n = _size(shape)
    if n == 0:
        return _empty(xp, shape, dtype, device)
    c = _compute(dtype)
    m = _MANT[c.name]
    w = _stream(xp, _words("random_normal", {"shape": shape, "dtype": dtype}), key, offset, device)
    k = xp.reshape(_ints(xp, w, m), (-1, 2))
    u1, u2 = _unit(xp, k[:, 0] + 1, m, c), _unit(xp, k[:, 1], m, c)
    r, t = xp.sqrt(xp.log(u1) * -2.0), u2 * _TWO_PI
    z = xp.reshape(xp.stack([r * xp.cos(t), r * xp.sin(t)], axis=-1), (-1,))
    return _finish(xp, (z if z.shape[0] == n else z[:n]) * std + mean, shape, dtype)


def _mulhi(xp, x, r: int):
    """``(x * r) >> 32`` for int64 ``x`` in [0, 2**32) and an int ``0 <= r < 2**32``."""
    return _mulhilo(xp, x, r >> 16, r & 0xFFFF)[0]


def _randint(xp, shape, low, high, key, offset, dtype, device=None):
    if _size(shape) == 0:
        return _empty(xp, shape, dtype, device)
    r = high - low
    w = _stream(xp, _words("random_randint", {"shape": shape, "low": low, "high": high}), key, offset, device)
    if r <= 1 << 32:
        v = w if r == 1 << 32 else _mulhi(xp, w, r)
    else:  # (x * r) >> 64 for x = xh * 2**32 + xl, r = rh * 2**32 + rl, from 32 x 32-bit products
        p = xp.reshape(w, (-1, 2))
        xh, xl, rh, rl = p[:, 0], p[:, 1], r >> 32, r & MASK
        h1, l1 = _mulhilo(xp, xh, rl >> 16, rl & 0xFFFF)
        h2, l2 = _mulhilo(xp, xl, rh >> 16, rh & 0xFFFF)
        v = xh * rh + h1 + h2 + xp.bitwise_right_shift(l1 + l2 + _mulhi(xp, xl, rl), 32)
    return _finish(xp, v + low, shape, dtype)


def _bitonic_sort(xp, x):
    """Ascending sort of a 1-D int64 tensor whose length is a power of two, by a sorting network
    of minimum/maximum over reshaped halves (each merge starts by comparing mirrored elements)."""
    p = x.shape[0]
    k = 2
    while k <= p:
        y = xp.reshape(x, (p // k, 2, k // 2))
        a, b = y[:, 0], xp.flip(y[:, 1], axis=-1)
        x = xp.reshape(xp.stack([xp.minimum(a, b), xp.flip(xp.maximum(a, b), axis=-1)], axis=1), (p,))
        j = k // 4
        while j >= 1:
            y = xp.reshape(x, (p // (2 * j), 2, j))
            a, b = y[:, 0], y[:, 1]
            x = xp.reshape(xp.stack([xp.minimum(a, b), xp.maximum(a, b)], axis=1), (p,))
            j //= 2
        k *= 2
    return x


def _permutation(xp, n, key, offset, dtype, device=None):
    if n == 0:
        return _empty(xp, (0,), dtype, device)
    w = _stream(xp, n, key, offset, device)
    keys = w * (1 << 31) + xp.arange(n, dtype=_dt.int64, device=device)  # distinct, below 2**63 - 1
    p = 1 << (n - 1).bit_length()
    if p > n:
        keys = xp.concat([keys, xp.full((p - n,), (1 << 63) - 1, dtype=_dt.int64, device=device)])
    s = _bitonic_sort(xp, keys)
    return xp.astype(xp.bitwise_and(s if p == n else s[:n], (1 << 31) - 1), dtype)


# --- native kernels for numpy-like array modules (numpy, CuPy) ------------------------------------
def array_kernels(mod, chunk: int | None = None) -> dict:
    """``{op name: kernel(**attrs) -> array}`` computing with the array module ``mod``.

    ``chunk``: blocks per pass of the Philox rounds (numpy: small passes stay in the cache;
    None: one pass, for GPUs). Nothing touches the device until a kernel runs. ``philox_bits``
    reinterprets the uint32 words as its dtype: the host (or device) must be little-endian.
    """
    u64, u32 = mod.uint64, mod.uint32

    def words(n, key, offset):
        # Rows 0 and 1 of ``a`` are counter words 0 and 2, of ``b`` words 1 and 3, as uint64 (every
        # operand contiguous along the rows: reversing the two rows keeps the inner loops fast).
        mults = mod.asarray([[PHILOX_M[0]], [PHILOX_M[1]]], dtype=u64)
        keys = [mod.asarray([[(key[0] + r * PHILOX_W[0]) & MASK], [(key[1] + r * PHILOX_W[1]) & MASK]], dtype=u64)
                for r in range(ROUNDS)]
        blocks = -(-n // 4)
        out = mod.empty((blocks, 4), dtype=u32)
        step = max(1, blocks if chunk is None else chunk)
        for s in range(0, blocks, step):
            c = min(step, blocks - s)
            ctr = mod.arange(c, dtype=u64) + u64(offset + s)
            a, b = mod.zeros((2, c), dtype=u64), mod.zeros((2, c), dtype=u64)
            a[0], b[0] = ctr & MASK, ctr >> 32
            p, h = mod.empty((2, c), dtype=u64), mod.empty((2, c), dtype=u64)
            for r in range(ROUNDS):
                mod.multiply(a, mults, out=p)  # (c0 * M0, c2 * M1), exact below 2**64
                mod.right_shift(p, 32, out=h)
                mod.bitwise_xor(h[::-1], b, out=a)  # (hi1 ^ c1, hi0 ^ c3) ...
                mod.bitwise_xor(a, keys[r], out=a)  # ... ^ (k0, k1)
                mod.bitwise_and(p[::-1], MASK, out=b)  # (lo1, lo0)
            out[s:s + c, 0], out[s:s + c, 1], out[s:s + c, 2], out[s:s + c, 3] = a[0], b[0], a[1], b[1]
        return out.reshape(-1)[:n]

    def ints(w, m):
        if m == 53:
            w = w.astype(u64)
            return (w[0::2] >> 5) * (1 << 26) + (w[1::2] >> 6)
        return w >> (32 - m)

    def unit(k, m, c):
        return mod.multiply(k, c.type(2.0 ** -m), dtype=c)  # k < 2**m: converted exactly

    def finish(r, shape, dtype):
        return r.astype(dtype.numpy, copy=False).reshape(shape)

    def bits(shape, key, offset, dtype):
        w = words(_words("philox_bits", {"shape": shape, "dtype": dtype}), key, offset)
        return w.view(dtype.numpy)[:_size(shape)].reshape(shape)

    def uniform(shape, low, high, key, offset, dtype):
        m, c = _MANT[dtype.name], _compute(dtype).numpy
        u = unit(ints(words(_words("random_uniform", {"shape": shape, "dtype": dtype}), key, offset), m), m, c)
        if (low, high) != (0.0, 1.0):  # u * 1 + 0 is u itself (u >= +0): skipped
            u = u * c.type(high - low) + c.type(low)
        return finish(u, shape, dtype)

    def normal(shape, mean, std, key, offset, dtype):
        n, c = _size(shape), _compute(dtype).numpy
        m = _MANT[c.name]
        k = ints(words(_words("random_normal", {"shape": shape, "dtype": dtype}), key, offset), m).reshape(-1, 2)
        u1, u2 = unit(k[:, 0] + 1, m, c), unit(k[:, 1], m, c)
        r, t = mod.sqrt(mod.log(u1) * c.type(-2.0)), u2 * c.type(_TWO_PI)
        z = mod.stack([r * mod.cos(t), r * mod.sin(t)], axis=-1).reshape(-1)[:n]
        return finish(z * c.type(std) + c.type(mean), shape, dtype)

    def randint(shape, low, high, key, offset, dtype):
        r = high - low
        w = words(_words("random_randint", {"shape": shape, "low": low, "high": high}), key, offset).astype(u64)
        if r <= 1 << 32:
            v = w if r == 1 << 32 else (w * u64(r)) >> 32
        else:
            xh, xl, rh, rl = w[0::2], w[1::2], u64(r >> 32), u64(r & MASK)
            p1, p2, p3 = xh * rl, xl * rh, xl * rl
            v = xh * rh + (p1 >> 32) + (p2 >> 32) + (((p1 & MASK) + (p2 & MASK) + (p3 >> 32)) >> 32)
        return finish(v.astype(mod.int64) + mod.int64(low), shape, dtype)

    def permutation(n, key, offset, dtype):
        keys = words(n, key, offset).astype(mod.int64) * (1 << 31) + mod.arange(n, dtype=mod.int64)
        return (mod.sort(keys) & ((1 << 31) - 1)).astype(dtype.numpy)

    return {"philox_bits": bits, "random_uniform": uniform, "random_normal": normal, "random_randint": randint,
            "random_permutation": permutation}


# --- definitions ---------------------------------------------------------------------------------
def _rule(default, cat):
    def rule(ds, attrs):
        d = _dt.dtype(attrs["dtype"]) if attrs.get("dtype") is not None else default
        return d, d

    rule.category = cat
    return rule


def _canon(name, kind, default, extra=None):
    """Checks the attributes and returns them normalized (shape tuple, key ints, dtype, floats)."""

    def canon(shapes, attrs):
        a = dict(attrs)
        a["dtype"] = check_dtype(name, a.get("dtype"), default, kind)
        if "shape" in a:
            a["shape"] = check_shape(name, a["shape"])
        if extra is not None:
            a = extra(a)
        a["key"] = check_key(name, a["key"])
        a["offset"] = check_offset(name, a["offset"], stream_blocks(name, a))
        return a

    return canon


def _uniform_args(a):
    a["low"], a["high"] = check_bounds("random_uniform", a["low"], a["high"])
    return a


def _normal_args(a):
    a["mean"], a["std"] = check_real("random_normal", "mean", a["mean"]), check_real("random_normal", "std", a["std"])
    if a["std"] < 0:
        raise ValueError(f"random_normal(): std must be non-negative, got {a['std']}")
    return a


def _randint_args(a):
    a["low"], a["high"] = check_int_range("random_randint", a["low"], a["high"], a["dtype"])
    return a


def _permutation_args(a):
    a["n"] = check_count("random_permutation", "n", a["n"], a["dtype"])
    return a


_KEYS = [((0, 0), 0, "key 0, offset 0"), ((0x243F6A88, 0x85A308D3), 7, "key of pi digits, offset 7"),
         ((MASK, MASK), (1 << 32) - 2, "all-ones key, counter crossing 2**32"),
         ((12345, 0), _U64 - 64, "counter near 2**64")]


def _samples(make):
    """The op's samples at dtype ``d``, each with the next key and offset of :data:`_KEYS`."""
    def gen(d, rng):
        from anydevice.ops.samples import Sample  # conformance data: loaded when asked for

        rows = make(d)
        return [Sample([], {**a, "key": _KEYS[i % len(_KEYS)][0], "offset": _KEYS[i % len(_KEYS)][1], "dtype": d},
                       f"{desc}; {_KEYS[i % len(_KEYS)][2]}") for i, (a, desc) in enumerate(rows)]

    return gen


def _shapes(*extra):
    return lambda d: [({"shape": (4,), **dict(extra)}, "(4,)"), ({"shape": (3, 5)}, "(3, 5)"),
                      ({"shape": ()}, "0-d"), ({"shape": (0, 3)}, "empty (0, 3)")]


def _errors(name, good, bad_dtype):
    return [
        ([], {**good, "key": (1, 2, 3)}, TypeError, "a key of three words"),
        ([], {**good, "key": (1 << 32, 0)}, ValueError, "a key word of 2**32"),
        ([], {**good, "offset": -1}, ValueError, "negative offset"),
        ([], {**good, "offset": _U64}, ValueError, "offset past the counter range"),
        ([], {**good, "dtype": bad_dtype}, TypeError, f"dtype {bad_dtype.name}"),
    ] + ([([], {**good, "shape": (2, -1)}, ValueError, "negative dimension")] if "shape" in good else [])


def _wide_range(d):
    """The dtype's whole range, or for 64-bit dtypes a range of 2**63 (the widest allowed)."""
    if d.itemsize == 8:
        return {"low": -(1 << 62), "high": 1 << 62} if d.kind == "int" else {"low": 0, "high": 1 << 63}
    info = np.iinfo(d.numpy)
    return {"low": int(info.min), "high": int(info.max) + 1}


# Types in the schema; the canon checks the domains (key words, counter room, bounds for the dtype).
_BASE = {"key": Ints((0, 0)), "offset": Int(0), "dtype": DType(), "device": Device()}
_REAL = Scalar(0.0, kinds=(int, float))
_EXACT = {d: (0.0, 0.0) for d in _MANT}  # float results are exact: compared bit for bit

define("philox_bits", attrs={"shape": Shape(), **_BASE}, dtype_rule=_rule(_dt.uint32, "integral"),
       canon=_canon("philox_bits", "int", _dt.uint32), shape_rule=lambda s, a: a["shape"], reference=_bits_ref,
       decomposition=_bits, category="random", differentiable=False, samples=_samples(_shapes()),
       errors=_errors("philox_bits", {"shape": (4,), "dtype": _dt.int32}, _dt.float32),
       doc="philox_bits(shape, key, offset, dtype=uint32): the Philox-4x32-10 stream's raw bits as an integer dtype")

define("random_uniform", attrs={"shape": Shape(), "low": _REAL, "high": Scalar(1.0, kinds=(int, float)), **_BASE},
       dtype_rule=_rule(_dt.float32, "real_floating"), canon=_canon("random_uniform", "float", _dt.float32, _uniform_args),
       shape_rule=lambda s, a: a["shape"], reference=_uniform_ref, decomposition=_uniform, category="random",
       differentiable=False, tolerance=_EXACT,
       samples=_samples(lambda d: _shapes()(d) + [({"shape": (7,), "low": -2.5, "high": 4.0}, "low -2.5, high 4")]),
       errors=_errors("random_uniform", {"shape": (4,)}, _dt.int32) + [
           ([], {"shape": (2,), "low": 1.0, "high": 1.0}, ValueError, "low == high"),
           ([], {"shape": (2,), "low": 0.0, "high": math.inf}, ValueError, "infinite high")],
       doc="random_uniform(shape, low, high, key, offset, dtype=float32): uniform floats in [low, high)")

# Box–Muller through the device's log, sqrt, cos and sin: against the float64 reference, float32
# results measured within 4 ulp (numpy) and 3 ulp (PoCL) over 2**20 draws; rtol 1e-6 is ~8 ulp.
define("random_normal", attrs={"shape": Shape(), "mean": _REAL, "std": Scalar(1.0, kinds=(int, float)), **_BASE},
       dtype_rule=_rule(_dt.float32, "real_floating"), canon=_canon("random_normal", "float", _dt.float32, _normal_args),
       shape_rule=lambda s, a: a["shape"], reference=_normal_ref, decomposition=_normal, category="random",
       differentiable=False,
       tolerance={"float32": (1e-6, 1e-6), "float64": (1e-13, 1e-13), "float16": (1e-3, 1e-3), "bfloat16": (8e-3, 8e-3)},
       samples=_samples(lambda d: _shapes()(d) + [({"shape": (5,), "mean": -1.0, "std": 3.0}, "odd size, mean -1, std 3")]),
       errors=_errors("random_normal", {"shape": (4,)}, _dt.int64) + [
           ([], {"shape": (2,), "std": -1.0}, ValueError, "negative std")],
       doc="random_normal(shape, mean, std, key, offset, dtype=float32): normal floats (Box–Muller)")

define("random_randint", attrs={"shape": Shape(), "low": Scalar(0, kinds=(int, float)), "high": Scalar(2, kinds=(int, float)), **_BASE}, dtype_rule=_rule(_dt.int64, "integral"),
       canon=_canon("random_randint", "int", _dt.int64, _randint_args), shape_rule=lambda s, a: a["shape"],
       reference=_randint_ref, decomposition=_randint, category="random", differentiable=False,
       samples=_samples(lambda d: [
           ({"shape": (6,), "low": 0, "high": 10}, "[0, 10)"), ({"shape": (2, 3), **({"low": -3, "high": 4} if d.kind == "int" else {"low": 3, "high": 10})}, "a small range"),
           ({"shape": (), "low": 5, "high": 6}, "0-d, one value"), ({"shape": (0,), "low": 0, "high": 3}, "empty"),
           ({"shape": (5,), **_wide_range(d)}, "the widest range of the dtype")]),
       errors=_errors("random_randint", {"shape": (4,), "low": 0, "high": 5}, _dt.float32) + [
           ([], {"shape": (2,), "low": 3, "high": 3}, ValueError, "low == high"),
           ([], {"shape": (2,), "low": 0, "high": 300, "dtype": _dt.uint8}, ValueError, "300 into uint8"),
           ([], {"shape": (2,), "low": 0.5, "high": 3}, TypeError, "a float bound")],
       doc="random_randint(shape, low, high, key, offset, dtype=int64): integers in [low, high)")

define("random_permutation", attrs={"n": Scalar(0, kinds=(int, float)), **_BASE}, dtype_rule=_rule(_dt.int64, "integral"),
       canon=_canon("random_permutation", "int", _dt.int64, _permutation_args), shape_rule=lambda s, a: (a["n"],),
       reference=_permutation_ref, decomposition=_permutation, category="random", differentiable=False,
       samples=_samples(lambda d: [({"n": 10}, "n=10"), ({"n": 1}, "n=1"), ({"n": 0}, "n=0"),
                                   ({"n": 64 if d.itemsize == 1 else 100}, "n not a power of two")]),
       errors=[([], {"n": -1}, ValueError, "negative n"), ([], {"n": 2.0}, TypeError, "float n"),
               ([], {"n": 300, "dtype": _dt.int8}, ValueError, "n=300 for int8"),
               ([], {"n": 3, "dtype": _dt.float32}, TypeError, "dtype float32")],
       doc="random_permutation(n, key, offset, dtype=int64): a random ordering of 0 .. n-1")
