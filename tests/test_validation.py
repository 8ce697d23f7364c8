"""Bad input is refused by the registry's schema before any device work: the same exception with the
same message on every device, and the device keeps working afterwards (no sticky error).

Each case is one finding of a bad-input fuzz of the public namespace; every case runs on cpu, npu,
dcu and opencl (skipped where OpenCL is not available).
"""
import inspect
import re

import numpy as np
import pytest

import anydevice as ad
from anydevice.ops.registry import MAX_NDIM, Attr, all_ops, get_op

DEVICES = ["cpu", "npu:0", "dcu:0", "opencl:0"]
REDUCTIONS = ["sum", "prod", "max", "min", "mean", "var", "std", "any", "all", "logsumexp", "argmax", "argmin"]


@pytest.fixture(params=DEVICES)
def dev(request):
    """A device; afterwards it must still work: synchronize raises nothing and an op runs."""
    if not ad.device.is_available(request.param.split(":")[0]):
        pytest.skip(f"{request.param} is not available here")
    yield request.param
    ad.device.synchronize(request.param)
    assert (ad.ones(3, device=request.param) + 1).tolist() == [2.0, 2.0, 2.0]


def f32(dev, *shape):
    return ad.ones(shape, device=dev)


# (id, call on a device, exception type, message regex)
CASES = [
    *[(f"{r} keepdims=None", lambda d, r=r: getattr(ad, r)(f32(d, 2, 3), keepdims=None), TypeError,
       rf"^{r}\(\): keepdims must be True or False, not NoneType None$") for r in REDUCTIONS],
    *[(f"{r} keepdims='yes'", lambda d, r=r: getattr(ad, r)(f32(d, 2, 3), keepdims="yes"), TypeError,
       rf"^{r}\(\): keepdims must be True or False, not str 'yes'$") for r in REDUCTIONS],
    ("ones 65-d", lambda d: ad.ones((1,) * 65, device=d), ValueError,
     r"^ones\(\): shape has 65 dimensions; at most 64 are supported$"),
    ("broadcast_to -5", lambda d: ad.broadcast_to(f32(d, 3), -5), ValueError,
     r"^broadcast_to\(\): negative dimension in shape \(-5,\): -5 \(sizes must be >= 0\)$"),
    ("sum 0-d axis=-1", lambda d: ad.sum(f32(d), axis=-1), ad.AxisError,
     r"^sum\(\): axis -1 is out of range for an array of 0 dimension\(s\) \(a 0-d array has no axes\)$"),
    ("max 0-d axis=0", lambda d: ad.max(f32(d), axis=0), ad.AxisError,
     r"^max\(\): axis 0 is out of range for an array of 0 dimension\(s\)"),
    ("argmax 0-d axis=0", lambda d: ad.argmax(f32(d), axis=0), ad.AxisError, r"^argmax\(\): axis 0 is out of range"),
    ("sum axis 2 of 2-d", lambda d: ad.sum(f32(d, 2, 3), axis=2), ad.AxisError,
     r"^sum\(\): axis 2 is out of range for an array of 2 dimension\(s\) \(allowed: -2..1\)$"),
    ("sum axis='a'", lambda d: ad.sum(f32(d, 2), axis="a"), TypeError,
     r"^sum\(\): axis must be None, an int or a tuple of ints, not str 'a'$"),
    ("full 2**64", lambda d: ad.full((), 2**64, device=d), OverflowError,
     r"^full\(\): fill_value=18446744073709551616 does not fit in int64 \(allowed: -9223372036854775808..9223372036854775807\)$"),
    ("clip uint16 max=-5", lambda d: ad.clip(ad.asarray([1, 2], dtype="uint16", device=d), max=-5), OverflowError,
     r"^clip\(\): max=-5 does not fit in uint16 \(allowed: 0..65535\)$"),
    ("arange -3..3 uint64", lambda d: ad.arange(-3, 3, dtype=ad.uint64, device=d), OverflowError,
     r"^arange\(\): start=-3 does not fit in uint64"),
    ("arange past uint8", lambda d: ad.arange(0, 300, dtype=ad.uint8, device=d), OverflowError,
     r"^arange\(\): the last value \(start \+ \(n - 1\) \* step\)=299 does not fit in uint8"),
    ("arange inf step", lambda d: ad.arange(0, 3, float("inf"), device=d), ValueError,
     r"^arange\(\): step must be a finite Python int or float, not float inf$"),
    ("arange nan stop", lambda d: ad.arange(0, float("nan"), device=d), ValueError,
     r"^arange\(\): stop must be None or a finite Python int or float, not float nan$"),
    ("arange too long", lambda d: ad.arange(0, 1e300, 1e-300, device=d), ValueError,
     r"^arange\(\): start=0, stop=1e\+300, step=1e-300 give more elements than any tensor can have"),
    ("uint8 + 300", lambda d: ad.asarray([1], dtype="uint8", device=d) + 300, OverflowError,
     r"^add\(\): x2=300 does not fit in uint8 \(allowed: 0..255\)$"),
    ("ones_like(3)", lambda d: ad.ones_like(3), TypeError,
     r"^ones_like\(\): x must be a Tensor, not int; use ones\(shape\) to make a tensor from a shape$"),
    ("moveaxis (), 0", lambda d: ad.moveaxis(f32(d, 2, 3), (), 0), ValueError,
     r"^moveaxis\(\): source \(\) and destination 0 must name as many axes \(0 != 1\)$"),
    ("moveaxis 5", lambda d: ad.moveaxis(f32(d, 2, 3), 5, 0), ad.AxisError, r"^moveaxis\(\): source 5 is out of range"),
    ("result_type(np.int8, bool)", lambda d: ad.result_type(np.int8, bool), TypeError,
     r"^result_type\(\): no type promotion between int8 and bool"),
    ("result_type(object())", lambda d: ad.result_type(object()), TypeError,
     r"^result_type\(\): object .* is neither a dtype nor an array"),
    ("finfo(int)", lambda d: ad.finfo(int), TypeError,
     r"^finfo\(\): int64 is not a floating-point dtype; allowed: float16, bfloat16"),
    ("iinfo(float32)", lambda d: ad.iinfo(ad.float32), TypeError, r"^iinfo\(\): float32 is not an integer dtype"),
    ("ones 2**40", lambda d: ad.ones((2**40,), device=d), ad.OutOfMemoryError,
     r"^ones\(\): cannot allocate 4.00 TiB on \S+ for a result of shape \(1099511627776,\) and dtype float32: more than its capacity"),
    ("broadcast_to 2**40", lambda d: ad.broadcast_to(f32(d, 1), (2**40,)), ad.OutOfMemoryError,
     r"^broadcast_to\(\): cannot allocate 4.00 TiB on \S+ for a result of shape \(1099511627776,\)"),
    ("empty, 2**62 x 4", lambda d: ad.zeros((0, 2**62, 4), device=d), ValueError,
     r"^zeros\(\): shape \(0, 4611686018427387904, 4\) is too big"),
    ("shape ('3',)", lambda d: ad.ones(("3",), device=d), TypeError,
     r"^ones\(\): shape must be an int or a tuple of ints, not tuple \('3',\) \(element str '3'\)$"),
    ("shape (3.0,)", lambda d: ad.ones((3.0,), device=d), TypeError, r"\(element float 3.0\)$"),
    ("shape (True, 3)", lambda d: ad.ones((True, 3), device=d), TypeError, r"\(element bool True\)$"),
    ("full shape (True,)", lambda d: ad.full((True,), 1.0, device=d), TypeError,
     r"^full\(\): shape must be an int or a tuple of ints"),
    ("reshape two -1", lambda d: ad.reshape(f32(d, 4), (-1, -1)), ValueError, r"^reshape\(\): shape \(-1, -1\) has more than one -1"),
    ("vecdot broadcasts its axis", lambda d: ad.vecdot(f32(d, 2, 3), f32(d, 1)), ValueError,
     r"^vecdot\(\): axis -1 has different sizes in \(2, 3\) and \(1,\) \(3 != 1\); the contracted axis is not broadcast$"),
    ("vecdot non-negative axis", lambda d: ad.vecdot(f32(d, 2, 3), f32(d, 3), axis=0), ad.AxisError,
     r"^vecdot\(\): axis 0 is not allowed for inputs of shapes \(2, 3\) and \(3,\) \(allowed: -1..-1"),
    ("layer_norm eps=None", lambda d: ad.layer_norm(f32(d, 2, 3), f32(d, 3), f32(d, 3), eps=None), TypeError,
     r"^layer_norm\(\): eps must be a finite number > 0, not NoneType None$"),
    ("layer_norm eps=0", lambda d: ad.layer_norm(f32(d, 2, 3), f32(d, 3), f32(d, 3), eps=0.0), ValueError,
     r"^layer_norm\(\): eps must be a finite number > 0, not float 0.0$"),
    ("cross_entropy reduction", lambda d: ad.cross_entropy(f32(d, 2, 3), ad.asarray([0, 1], device=d), reduction="avg"),
     ValueError, r"^cross_entropy\(\): reduction must be 'mean', 'sum' or 'none', not str 'avg'$"),
    ("var correction=-1", lambda d: ad.var(f32(d, 3), correction=-1), ValueError,
     r"^var\(\): correction must be a finite number >= 0, not int -1$"),
    ("sum dtype='foo'", lambda d: ad.sum(f32(d, 3), dtype="foo"), TypeError, r"^sum\(\): dtype: unknown dtype 'foo'"),
    ("eye n_rows=True", lambda d: ad.eye(True, device=d), TypeError, r"^eye\(\): n_rows must be a non-negative int, not bool True$"),
    ("permute_dims wraps", lambda d: ad.permute_dims(f32(d, 2, 3), (5, 0)), ValueError,
     r"^permute_dims\(\): axes \(5, 0\) is not a permutation of 0..1"),
    ("stack axis 3", lambda d: ad.stack([f32(d, 2), f32(d, 2)], axis=3), ad.AxisError,
     r"^stack\(\): axis 3 is out of range for an array of 2 dimension\(s\)"),
    ("take 0-d", lambda d: ad.take(f32(d), ad.asarray([0], device=d), axis=0), ad.AxisError, r"^take\(\): axis 0 is out of range"),
    ("full_like 300 into uint8", lambda d: ad.full_like(ad.asarray([1], dtype="uint8", device=d), 300), OverflowError,
     r"^full_like\(\): fill_value=300 does not fit in uint8"),
    ("asarray 300 as uint8", lambda d: ad.asarray([300], dtype="uint8", device=d), OverflowError,
     r"^asarray\(\): Python int 300 does not fit in uint8 \(allowed: 0..255\)$"),
    ("asarray 2**64", lambda d: ad.asarray([2**64], device=d), OverflowError, r"^asarray\(\): Python int 18446744073709551616 does not fit in int64"),
    ("softmax over an empty axis", lambda d: ad.softmax(f32(d, 2, 0)), ValueError,
     r"^softmax\(\): axis -1 of shape \(2, 0\) is empty; softmax needs at least one element along its axis$"),
    ("zeros device=3", lambda d: ad.zeros(2, device=3), TypeError, r"^zeros\(\): device: device must be a string"),
    ("arange device=3", lambda d: ad.arange(2, device=3), TypeError, r"^arange\(\): device: device must be a string"),
]


@pytest.mark.parametrize("call,exc,msg", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_the_same_way_everywhere(dev, call, exc, msg):
    with pytest.raises(exc) as info:
        call(dev)
    assert re.search(msg, str(info.value)), str(info.value)
    assert type(info.value).__module__.startswith(("anydevice", "builtins")), type(info.value)


@pytest.mark.parametrize("call", [c[1] for c in CASES if c[2] is not ad.OutOfMemoryError], ids=[c[0] for c in CASES if c[2] is not ad.OutOfMemoryError])
def test_message_is_identical_on_every_device(call):
    messages = {}
    for d in DEVICES:
        if not ad.device.is_available(d.split(":")[0]):
            continue
        with pytest.raises(Exception) as info:
            call(d)
        messages[d] = (type(info.value), str(info.value))
    assert len(set(messages.values())) == 1, messages


def test_opencl_no_longer_accepts_a_bad_keepdims():
    """It used to return 3.0 for sum(keepdims=None) and [0 0] silently was the only right answer by luck."""
    if not ad.device.is_available("opencl"):
        pytest.skip("no OpenCL device")
    with pytest.raises(TypeError, match="keepdims must be True or False"):
        ad.sum(ad.ones(3, device="opencl:0"), keepdims=None)


# --- integer ** negative integer: defined, the same on every device -----------------------------------
BASES = [2, 3, 1, -1, -1, 0, -2, 5, -7]
EXPS = [-1, -2, -3, -2, -3, -1, 3, 0, -1]
WANT = [0, 0, 1, 1, -1, 0, -8, 1, 0]


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_integer_power_of_a_negative_exponent_is_the_truncated_reciprocal(dev, dtype):
    x = ad.asarray(BASES, dtype=dtype, device=dev)
    y = ad.asarray(EXPS, dtype=dtype, device=dev)
    assert (x ** y).tolist() == WANT
    assert ad.pow(x, y).tolist() == WANT
    assert (ad.asarray([2, 3], dtype=dtype, device=dev) ** -1).tolist() == [0, 0]  # the fast path with a scalar
    assert (ad.asarray([1, -1], dtype=dtype, device=dev) ** -3).tolist() == [1, -1]
    assert get_op("pow").reference(np.asarray(BASES, dtype), np.asarray(EXPS, dtype)).tolist() == WANT


def test_pow_documents_the_integer_rule():
    assert "truncated reciprocal" in get_op("pow").doc and "truncated reciprocal" in ad.pow.__doc__


# --- what is still accepted ---------------------------------------------------------------------------
def test_valid_spellings_still_work(dev):
    x = ad.ones((2, 3), device=dev)
    assert ad.sum(x, axis=np.int64(1), keepdims=np.bool_(True)).shape == (2, 1)
    assert ad.sum(x, axis=[0, 1]).item() == 6.0  # a list of axes
    assert ad.sum(ad.ones((), device=dev), axis=()).item() == 1.0  # the only axes of a 0-d array
    assert ad.ones(np.int32(3), device=dev).shape == (3,)
    assert ad.zeros([2, np.int64(2)], device=dev).shape == (2, 2)
    assert ad.full((2,), np.float32(1.5), device=dev).tolist() == [1.5, 1.5]
    assert ad.arange(5, 0, -1, dtype="uint8", device=dev).tolist() == [5, 4, 3, 2, 1]  # a negative uint step
    assert ad.arange(0, 256, dtype="uint8", device=dev).shape == (256,)  # stop itself need not fit
    assert ad.clip(ad.asarray([1, 9], dtype="uint16", device=dev), max=5).tolist() == [1, 5]
    assert ad.vecdot(ad.ones((3, 2), device=dev), ad.ones((3, 2), device=dev), axis=-2).tolist() == [3.0, 3.0]
    assert ad.softmax(ad.ones((), device=dev)).item() == 1.0  # 0-d softmax: axis -1 as for 1-D
    assert ad.moveaxis(ad.ones((2, 3, 4), device=dev), (0, 1), (2, 0)).shape == (3, 4, 2)
    assert ad.result_type(ad.int8, ad.int16, 1) is ad.int16 and ad.result_type(x, 1.0) is ad.float32
    assert ad.finfo(ad.bfloat16).bits == 16 and ad.iinfo(x.astype("uint8")).max == 255
    h = ad.ones((2,), dtype="bfloat16", device=dev)
    for _ in range(2):  # the second time through the operator's fast path
        assert (h * 2**63).tolist() == [2.0**63] * 2  # a Python int beyond int64 for a bfloat16 tensor
    assert ad.clip(h, max=2**63).tolist() == [1.0, 1.0] and ad.full((), 2**63, dtype="bfloat16", device=dev).item() == 2.0**63
    if dev in ("cpu", "dcu:0"):  # devices with complex64
        assert ad.make_complex(2**31, ad.ones((), dtype="float16", device=dev)).item().real == float("inf")  # as float16


def test_axis_error_is_a_value_error_and_an_index_error():
    assert issubclass(ad.AxisError, ValueError) and issubclass(ad.AxisError, IndexError)


# --- the schema itself -----------------------------------------------------------------------------------
UNTYPED = {("getitem", "key"), ("setitem", "key"), ("getitem_grad", "key")}  # canonical index keys: the canon checks them


def test_every_attribute_of_every_op_is_typed():
    untyped = [(op.name, k) for op in all_ops() for k, a in op.schema.items() if type(a) is Attr]
    assert set(untyped) <= UNTYPED, sorted(set(untyped) - UNTYPED)


def test_signature_comes_from_the_schema():
    sig = get_op("sum").signature
    assert str(sig) == ("(x, /, *, axis: 'int | tuple[int, ...] | None' = None, dtype: 'DType | None' = None, "
                        "keepdims: 'bool' = False)")
    assert list(inspect.signature(lambda x, /, *, axis=None, dtype=None, keepdims=False: 0).parameters) == list(sig.parameters)
    p = get_op("full").signature.parameters
    assert p["shape"].annotation == "int | tuple[int, ...]" and p["fill_value"].annotation == "bool | int | float | complex"


def test_validation_normalizes_and_caches_per_value_type():
    op = get_op("sum")
    a = op.validate({"axis": [1, -2], "keepdims": np.bool_(True), "dtype": "int64"}, [(2, 3)], [ad.float32])
    assert a == {"axis": (0, 1), "keepdims": True, "dtype": ad.int64} and type(a["keepdims"]) is bool
    assert op.validate({"axis": None, "keepdims": True, "dtype": None}, [(2,)], [ad.float32])["keepdims"] is True
    with pytest.raises(TypeError, match="keepdims must be True or False, not int 1"):  # 1 == True, but not cached as it
        op.validate({"axis": None, "keepdims": 1, "dtype": None}, [(2,)], [ad.float32])


def test_max_ndim_is_numpy_s():
    assert MAX_NDIM == 64
    assert ad.ones((1,) * 64).ndim == 64


def test_a_numpy_memory_error_becomes_out_of_memory(monkeypatch):
    """A kernel's own allocation failing (numpy on cpu) is anydevice's OutOfMemoryError, naming the op."""
    def refuse(*a, **k):
        raise MemoryError("Unable to allocate 4.00 KiB")

    monkeypatch.setattr(np, "full", refuse)
    monkeypatch.setattr(np, "zeros", refuse)  # the cpu kernel of a zero fill
    with pytest.raises(ad.OutOfMemoryError, match=r"^full\(\): cpu:0 ran out of memory for a result of shape \(1000,\)"):
        ad.zeros((1000,))
    monkeypatch.undo()
    assert ad.zeros((2,)).tolist() == [0.0, 0.0]


def test_nothing_reaches_the_device_before_validation(monkeypatch):
    """A refused call uploads nothing and launches no kernel (the scalar operand is checked before it
    becomes a device tensor, the attributes before the kernel is queued)."""
    from anydevice.runtime import devices as _devices

    t = ad.asarray([1, 2], dtype="uint8", device="npu:0")
    be = _devices.get_backend("npu")
    work = []
    from anydevice_sim_npu.streams import SimStream  # small kernels on an idle device run at once

    for obj, name in ((be, "from_host"), (be.runtime, "launch"), (be.runtime, "launch_ufunc"), (SimStream, "run_now")):
        real = getattr(obj, name)
        monkeypatch.setattr(obj, name, lambda *a, _real=real, _name=name, **k: work.append(_name) or _real(*a, **k))
    for bad in (lambda: ad.add(t, 300), lambda: ad.sum(t, keepdims=None), lambda: ad.sum(t, axis=1),
                lambda: ad.full((2,), 2**64, device="npu:0"), lambda: ad.ones((1,) * 65, device="npu:0")):
        with pytest.raises((TypeError, ValueError, OverflowError)):
            bad()
    assert work == []
    assert ad.sum(t).item() == 3 and work  # a valid call does reach the device
