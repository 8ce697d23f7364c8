"""anydevice.random: one Philox-4x32-10 stream, the same numbers on every local device.

Bits, uniforms, integers, Bernoulli and dropout masks, permutations and multinomial draws are
compared bit for bit between cpu (native kernels), the simulated npu, xpu and dcu (the int64
decompositions; xpu has no uint32 or uint64) and OpenCL (the decompositions through a real OpenCL
compiler, with a native ``philox_bits`` kernel); normals, which go through each device's log,
sqrt, cos and sin, within ``NORMAL_ULP``. Every device runs with the CPU fallback forbidden.
"""
from __future__ import annotations

import math
import re
import threading

import numpy as np
import pytest

import anydevice as ad
from anydevice.engine import dispatch
from anydevice.ops import random as R
from anydevice.ops.registry import get_op

DEVICES = ["cpu", "npu", "xpu", "dcu"] + (["opencl"] if ad.device.unavailable_reason("opencl") is None else [])
OPS = ("philox_bits", "random_uniform", "random_normal", "random_randint", "random_permutation")
#: Largest difference between a device's normals and the cpu's, in units in the last place (measured over
#: 2**20 draws: 3 for float32 and float64 on PoCL; 0 on the simulated devices, which share numpy's math).
NORMAL_ULP = 4

# Random123's known-answer vectors for Philox-4x32-10: counter, key, output.
KAT = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
       ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
       ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]


@pytest.fixture(autouse=True)
def no_fallback():
    old = dispatch.set_fallback_mode("error")
    yield
    dispatch.set_fallback_mode(old)
    ad.manual_seed(ad.random.DEFAULT_SEED)


def _bits(t) -> np.ndarray:
    """A tensor's values as raw bytes (exact comparison, NaN and -0.0 included)."""
    a = t.numpy()
    return np.ascontiguousarray(a).view(np.uint8)


def _has(dev, d) -> bool:
    return d in ad.asarray(0, device=dev).device.dtypes


# --- the generator of bits -------------------------------------------------------------------------
@pytest.mark.parametrize("ctr, key, want", KAT)
def test_reference_philox_gives_the_known_answers(ctr, key, want):
    assert tuple(int(v) for v in R.philox4x32(np.array([ctr]), key)[0]) == want


@pytest.mark.parametrize("n, key, offset", [(1, (0, 0), 0), (4099, (3, 4), (1 << 32) - 700), (77, (5, 6), (1 << 64) - 20)])
def test_numpy_kernel_matches_the_reference_across_chunks(n, key, offset):
    kernel = R.array_kernels(np, chunk=64)["philox_bits"]  # many passes, counters crossing 2**32
    assert np.array_equal(kernel((n,), key, offset, ad.uint32), R.reference_words(n, key, offset).astype(np.uint32))


@pytest.mark.parametrize("dev", DEVICES)
def test_bits_are_the_known_answer_on_every_device(dev):
    got = ad.philox_bits((4,), key=(0, 0), offset=0, dtype=ad.int32, device=dev)  # int32: xpu has no uint32
    assert np.array_equal(got.numpy(), np.array(KAT[0][2], np.uint32).view(np.int32))
    # 64-bit values take two words, low word first; bytes are the words' little-endian bytes
    w = R.reference_words(8, (9, 10), (1 << 32) - 1).astype(np.uint32)
    assert np.array_equal(ad.philox_bits((4,), key=(9, 10), offset=(1 << 32) - 1, dtype=ad.int64, device=dev).numpy(),
                          w.view(np.int64))
    assert np.array_equal(ad.philox_bits((2, 4), key=(9, 10), offset=(1 << 32) - 1, dtype=ad.int8, device=dev).numpy(),
                          w[:2].view(np.int8).reshape(2, 4))


# --- the same seed, the same numbers -----------------------------------------------------------------
def _draws(dev):
    ad.manual_seed(20240607)
    out = [ad.rand(1000, device=dev), ad.uniform(-2.0, 3.0, (33,), dtype=ad.float16, device=dev),
           ad.rand(3, 7, dtype=ad.bfloat16, device=dev), ad.randint(-5, 1000, (257,), device=dev),
           ad.randint(-(1 << 61), 1 << 61, (9,), device=dev), ad.randint(0, 256, (40,), dtype=ad.uint8, device=dev),
           ad.randperm(100, device=dev), ad.randperm(7, dtype=ad.int32, device=dev),
           ad.bernoulli(0.3, (100,), dtype=ad.bool, device=dev),
           ad.bernoulli(ad.asarray(np.linspace(0, 1, 50), dtype=ad.float32, device=dev)),
           ad.multinomial(ad.asarray([[0.1, 0.0, 0.6, 0.3], [1.0, 1.0, 1.0, 1.0]], device=dev), 3),
           ad.multinomial(ad.asarray([0.2, 0.5, 0.0, 0.3], device=dev), 20, replacement=True)]
    offset = ad.random.default_generator(dev).offset
    if _has(dev, ad.float64):
        out.append(ad.rand(5, dtype=ad.float64, device=dev))
    return out, offset


@pytest.mark.parametrize("dev", DEVICES[1:])
def test_same_seed_same_bits_on_every_device(dev):
    want, want_offset = _draws("cpu")
    got, offset = _draws(dev)
    assert offset == want_offset
    for g, w in zip(got, want):
        assert g.device == ad.asarray(0, device=dev).device and g.dtype is w.dtype and g.shape == w.shape
        assert np.array_equal(_bits(g), _bits(w)), (g.dtype, g.shape)


@pytest.mark.parametrize("dev", DEVICES[1:])
def test_normals_agree_within_the_ulp_bound(dev):
    dtypes = [ad.float32] + ([ad.float64] if _has(dev, ad.float64) else [])
    for d in dtypes:
        ad.manual_seed(5)
        want = ad.randn(20001, dtype=d, device="cpu").numpy()
        ad.manual_seed(5)
        got = ad.randn(20001, dtype=d, device=dev).numpy()
        ulp = np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(want))
        assert ulp.max() <= NORMAL_ULP, (d, ulp.max())
        assert np.isfinite(want).all() and np.abs(want).max() < 6.0  # |z| <= sqrt(-2 log 2**-24) ~ 5.77


def test_half_normals_are_rounded_float32_normals():
    ad.manual_seed(8)
    z32 = ad.randn(999).numpy()
    ad.manual_seed(8)
    assert np.array_equal(ad.randn(999, dtype=ad.float16).numpy(), z32.astype(np.float16))


@pytest.mark.parametrize("dev", DEVICES[1:])
def test_dropout_masks_and_gradients_match_across_devices(dev):
    x = np.random.default_rng(0).uniform(-1, 1, (64, 48)).astype(np.float32)
    outs = []
    for d in ("cpu", dev):
        ad.manual_seed(11)
        t = ad.asarray(x, device=d).requires_grad_(True)
        y = ad.dropout(t, p=0.3)
        ad.sum(y).backward()
        outs.append((y.numpy(), t.grad.numpy()))
    (y0, g0), (y1, g1) = outs
    assert np.array_equal(_bits_np(y0), _bits_np(y1)) and np.array_equal(g0, g1)
    kept = g0 != 0
    assert np.allclose(g0[kept], 1 / 0.7) and np.array_equal(y0[~kept], np.zeros((~kept).sum(), np.float32))
    assert abs(kept.mean() - 0.7) < 0.03
    t = ad.asarray(x, device=dev)
    assert ad.dropout(t, 0.3, training=False) is t and ad.dropout(t, 0.0) is t
    assert not ad.dropout(t, 1.0).numpy().any()


def _bits_np(a):
    return np.ascontiguousarray(a).view(np.uint8)


# --- what the numbers are --------------------------------------------------------------------------
def test_uniform_values_are_exact_multiples_and_below_one():
    for d, m in ((ad.float32, 24), (ad.float16, 11), (ad.bfloat16, 8), (ad.float64, 53)):
        u = ad.rand(20000, dtype=d).numpy().astype(np.float64)
        k = u * 2.0 ** m
        assert (u >= 0).all() and (u < 1).all() and np.array_equal(k, np.floor(k)), d
        assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005, d
    v = ad.uniform(-3.0, 5.0, (20000,)).numpy()
    assert v.min() >= -3.0 and v.max() <= 5.0 and abs(v.mean() - 1.0) < 0.1


def test_distributions_have_the_right_statistics():
    z = ad.normal(2.0, 3.0, (40000,)).numpy()
    assert abs(z.mean() - 2.0) < 0.05 and abs(z.std() - 3.0) < 0.05
    assert abs(np.mean(np.abs(z - 2.0) < 3.0) - 0.6827) < 0.01  # one sigma
    k = ad.randint(-3, 4, (70000,)).numpy()
    counts = np.bincount(k + 3, minlength=7)
    assert k.min() == -3 and k.max() == 3 and np.abs(counts / 10000 - 1).max() < 0.05
    wide = ad.randint(0, 1 << 40, (20000,)).numpy()
    assert wide.max() >= 1 << 39 and abs(wide.mean() / (1 << 40) - 0.5) < 0.01
    assert abs(ad.bernoulli(0.25, (40000,)).numpy().mean() - 0.25) < 0.01
    p = ad.asarray([0.1, 0.0, 0.6, 0.3])
    freq = np.bincount(ad.multinomial(p, 30000, replacement=True).numpy(), minlength=4) / 30000
    assert freq[1] == 0 and np.abs(freq - [0.1, 0.0, 0.6, 0.3]).max() < 0.015


def test_permutations_and_sampling_without_replacement():
    for n in (0, 1, 2, 10, 257):
        assert sorted(ad.randperm(n).numpy().tolist()) == list(range(n))
    perms = {tuple(ad.randperm(4).numpy()) for _ in range(200)}
    assert len(perms) == 24  # every ordering of 4 shows up
    rows = ad.multinomial(ad.asarray([[1.0, 1.0, 0.0, 1.0, 1.0]] * 50), 4).numpy()
    assert all(sorted(r) == [0, 1, 3, 4] for r in rows.tolist())
    first = np.bincount(ad.multinomial(ad.asarray([[0.7, 0.2, 0.1]] * 3000), 2)[:, 0].numpy(), minlength=3) / 3000
    assert np.abs(first - [0.7, 0.2, 0.1]).max() < 0.03


# --- generators ------------------------------------------------------------------------------------
def test_generator_state_round_trips_and_offsets_count_blocks():
    g = ad.Generator("npu:0").manual_seed(9)
    assert g.device == "npu:0" and g.initial_seed() == 9 and g.offset == 0
    state = g.get_state()
    assert state.dtype is ad.uint8 and state.shape == (16,) and str(state.device) == "cpu:0"
    a = [ad.rand(10, generator=g), ad.randn(5, generator=g), ad.randint(0, 7, (3,), generator=g)]
    assert [x.device for x in a] == [g.device] * 3
    assert g.offset == 3 + 2 + 1  # 10 words, 6 words (pairs), 3 words: in blocks of 4
    g.set_state(state)
    b = [ad.rand(10, generator=g), ad.randn(5, generator=g), ad.randint(0, 7, (3,), generator=g)]
    assert all(np.array_equal(x.numpy(), y.numpy()) for x, y in zip(a, b))
    g.set_state(bytes(state.numpy()))  # bytes work too
    assert g.offset == 0 and g.initial_seed() == 9
    c = ad.rand(10, generator=g, device="cpu")  # another device: the same numbers
    assert str(c.device) == "cpu:0" and np.array_equal(c.numpy(), a[0].numpy())


def test_default_generators_per_device_and_global_seeding():
    ad.manual_seed(3)
    s = ad.get_rng_state("cpu")
    x = ad.rand(4, device="cpu")
    y = ad.rand(4, device="npu")  # the npu's generator did not move when the cpu's did
    assert np.array_equal(x.numpy(), y.numpy())
    ad.set_rng_state(s, "cpu")
    assert np.array_equal(ad.rand(4, device="cpu").numpy(), x.numpy())
    assert ad.initial_seed("dcu") == 3 and ad.manual_seed(-1).initial_seed() == (1 << 64) - 1
    assert ad.seed(3) == 3 and np.array_equal(ad.rand(4, device="xpu").numpy(), x.numpy())
    fresh = ad.seed()
    assert isinstance(fresh, int) and ad.initial_seed("cpu") == fresh
    assert not np.array_equal(ad.rand(4).numpy(), x.numpy())
    with ad.device_guard("npu:1"):
        assert ad.rand(2).device == "npu:1" and ad.random.default_generator().device == "npu:1"


def test_threads_drawing_from_one_generator_get_disjoint_blocks():
    g = ad.Generator("cpu").manual_seed(4)
    rows: list = []

    def work():
        for _ in range(50):
            rows.append(tuple(ad.rand(8, generator=g).numpy()))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    g.manual_seed(4)
    sequential = {tuple(ad.rand(8, generator=g).numpy()) for _ in range(200)}
    assert len(rows) == 200 and set(rows) == sequential and g.offset == 400


def test_bad_call_does_not_advance_the_generator():
    g = ad.Generator("cpu")
    for bad in (lambda: ad.rand(-1, generator=g), lambda: ad.randint(5, 5, (2,), generator=g),
                lambda: ad.bernoulli(2.0, (3,), generator=g)):
        with pytest.raises(ValueError):
            bad()
    assert g.offset == 0


# --- nn -----------------------------------------------------------------------------------------
def test_linear_initialization_is_fixed_by_the_seed_on_every_device():
    weights = []
    for dev in DEVICES:
        ad.manual_seed(42)
        m = ad.nn.Linear(6, 3, device=dev)
        assert m.weight.device == ad.asarray(0, device=dev).device and m.weight.requires_grad
        weights.append((m.weight.numpy(), m.bias.numpy()))
    for w, b in weights[1:]:
        assert np.array_equal(w, weights[0][0]) and np.array_equal(b, weights[0][1])
    bound = 1 / math.sqrt(6)
    assert np.abs(weights[0][0]).max() <= bound and len(np.unique(weights[0][0])) == 18
    ad.manual_seed(43)
    assert not np.array_equal(ad.nn.Linear(6, 3).weight.numpy(), weights[0][0])
    g = ad.Generator().manual_seed(42)
    assert np.array_equal(ad.nn.Linear(6, 3, rng=g).weight.numpy(), weights[0][0])
    host = ad.nn.Linear(6, 3, rng=np.random.default_rng(0)).weight.numpy()  # numpy generators still work
    assert np.array_equal(host, np.random.default_rng(0).uniform(-bound, bound, (3, 6)).astype(np.float32))


# --- errors ---------------------------------------------------------------------------------------
BAD = [
    (lambda d: ad.randperm(-1, device=d), ValueError, r"randperm\(\): n must be non-negative"),
    (lambda d: ad.randperm(3.0, device=d), TypeError, r"randperm\(\): n must be an int"),
    (lambda d: ad.randperm(200, dtype=ad.int8, device=d), ValueError, r"n must be at most 128 for dtype int8"),
    (lambda d: ad.bernoulli(1.5, (2,), device=d), ValueError, r"bernoulli\(\): p must be a probability in \[0, 1\]"),
    (lambda d: ad.bernoulli(ad.asarray([0.5, -0.1], device=d)), ValueError, r"p must hold probabilities in \[0, 1\]"),
    (lambda d: ad.bernoulli(ad.asarray([1, 0], device=d)), TypeError, r"p must be a real floating tensor"),
    (lambda d: ad.dropout(ad.ones(3, device=d), p=-0.5), ValueError, r"dropout\(\): p must be a probability"),
    (lambda d: ad.dropout(ad.ones(3, dtype=ad.int32, device=d)), TypeError, r"x must be a real floating tensor"),
    (lambda d: ad.uniform(1.0, 1.0, (2,), device=d), ValueError, r"uniform\(\): low must be less than high"),
    (lambda d: ad.randint(4, 2, (2,), device=d), ValueError, r"randint\(\): low must be less than high"),
    (lambda d: ad.randint(0, 300, (2,), dtype=ad.uint8, device=d), ValueError, r"do not fit uint8"),
    (lambda d: ad.randint(0, 1 << 64, (2,), device=d), ValueError, r"do not fit int64"),
    (lambda d: ad.rand(2, dtype=ad.int32, device=d), TypeError, r"rand\(\): dtype must be a real floating dtype"),
    (lambda d: ad.randint(0, 5, (2,), dtype=ad.float32, device=d), TypeError, r"randint\(\): dtype must be an integer"),
    (lambda d: ad.randn(2, -3, device=d), ValueError, r"randn\(\): negative dimension"),
    (lambda d: ad.normal(0.0, -1.0, (2,), device=d), ValueError, r"normal\(\): std must be non-negative"),
    (lambda d: ad.multinomial(ad.asarray([0.0, 0.0], device=d)), ValueError, r"every row of probs needs a positive"),
    (lambda d: ad.multinomial(ad.asarray([0.5, 0.5], device=d), 3), ValueError, r"cannot draw 3 samples without"),
    (lambda d: ad.multinomial(ad.asarray([0.5, -1.0], device=d)), ValueError, r"finite and non-negative"),
    (lambda d: ad.rand(2, generator=np.random.default_rng(), device=d), TypeError, r"generator must be an anydevice"),
    (lambda d: ad.Generator(d).manual_seed(1.5), TypeError, r"manual_seed\(\): seed must be an int"),
    (lambda d: ad.Generator(d).manual_seed(1 << 64), ValueError, r"seed must be in \[-2\*\*63, 2\*\*64\)"),
    (lambda d: ad.Generator(d).set_state(np.zeros(8, np.uint8)), ValueError, r"must have 16 bytes"),
    (lambda d: ad.Generator(d).set_state(np.zeros(16, np.int32)), TypeError, r"must be uint8"),
    (lambda d: ad.random_uniform((2,), key=(1 << 32, 0), device=d), ValueError, r"random_uniform\(\): key words"),
    (lambda d: ad.random_normal((2,), offset=-1, device=d), ValueError, r"random_normal\(\): offset must be in"),
]


@pytest.mark.parametrize("dev", DEVICES)
def test_bad_input_is_a_clear_error_on_every_device(dev):
    wrong = []
    for call, exc, msg in BAD:
        try:
            call(dev)
            wrong.append(f"{msg}: nothing raised")
        except exc as e:
            if not re.search(msg, str(e)):
                wrong.append(f"{msg}: {type(e).__name__}: {e}")
        except Exception as e:  # noqa: BLE001 - reported with the others
            wrong.append(f"{msg}: {type(e).__name__}: {e}")
    assert not wrong, "\n".join(wrong)


# --- the registry ops through the conformance runner -------------------------------------------------
@pytest.mark.parametrize("dev", ["cpu", "xpu"] + (["opencl"] if "opencl" in DEVICES else []))
def test_conformance_of_the_random_ops(dev):
    """Values against the registry's reference (exact but for normals) and error parity; the full
    set of dtypes and devices is in ``anydevice conformance --device all``."""
    runner = pytest.importorskip("anydevice_conformance.runner")
    dtypes = ["float32", "float16", "int64", "int32", "uint8"]
    cases = [c for name in OPS for c in runner.run_device_op(get_op(name), dev, dtypes=dtypes)]
    failed = [f"{c.id}: {c.message}" for c in cases if c.status == "fail"]
    assert not failed, "\n".join(failed[:5])
    passed = {(c.op, c.dtype) for c in cases if c.status == "pass" and c.check == "values"}
    assert ("random_uniform", "float32") in passed and ("random_randint", "int64") in passed
    paths = {(c.op, c.path) for c in cases if c.status == "pass" and c.check == "values"}
    native = set(OPS) if dev == "cpu" else {"philox_bits"} if dev == "opencl" else set()
    assert paths == {(op, "native" if op in native else "decomposed") for op in OPS}


@pytest.mark.parametrize("dev", DEVICES)
def test_int64_decomposition_of_the_stream_on_every_device(dev):
    """What a device without a philox_bits kernel runs (cpu and OpenCL have kernels: run it anyway)."""
    for n, key, offset in ((13, (5, 6), (1 << 32) - 2), (64, (R.MASK, R.MASK), (1 << 64) - 16)):
        got = R.stream_words(dispatch.xp, n, key, offset, ad.asarray(0, device=dev).device)
        assert got.dtype is ad.int64 and np.array_equal(got.numpy(), R.reference_words(n, key, offset).astype(np.int64))
