"""Bad-input fuzz of the public namespace (hypothesis), every drawn case on every device at once.

Each case calls one public function: a registry op (``anydevice.<op>``) or one of asarray, zeros,
ones, empty, full_like, zeros_like, ones_like, empty_like, moveaxis, result_type, finfo, iinfo, with
inputs of any dtype and of small, 0-d and empty shapes (values in the op's domain, or NaN/±inf),
Python scalars, wrong Python types, and attribute values of the right kind and of every wrong kind
(None, strings, floats, NaN, huge ints, bools, nested tuples, 65 dimensions, sizes of 2**40 and up).
The same case then runs on cpu, npu:0, dcu:0 and opencl:0 (those available) and must:

- give a result equal to the reference (``op.reference`` on the numpy inputs, within the op's
  conformance tolerance; numpy's function for the creation helpers), or raise a documented
  exception *raised by anydevice*: an instance of TypeError, ValueError, IndexError,
  OverflowError or OutOfMemoryError whose traceback's last frame is inside the ``anydevice``
  package (not numpy, a backend or the driver);
- behave the same on every device that supports the case's dtypes (the same exception type, or
  a result everywhere);
- leave every device usable: ``anydevice.device.synchronize(dev)`` raises nothing afterwards.

Time budget: ``ANYDEVICE_FUZZ_SECONDS`` seconds per device, **15 by default**, shared by the four
shards of :func:`test_fuzz_public_namespace` (with 4 devices: 60 s in all, about 15 s per shard).
Set it higher locally for a longer run. Outcome counts per device are written to
``reports/fuzz_api.json`` (and one file per shard under ``reports/fuzz_api/``).
"""
from __future__ import annotations

import collections
import json
import math
import operator
import os
import time
import traceback
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import anydevice as ad
from anydevice.base import dtypes as _dt
from anydevice.engine import dispatch as _dispatch
from anydevice.ops import registry as R
from anydevice.ops.samples import Sample, specials, values
from anydevice.runtime.devices import as_device
from anydevice_conformance import runner as _runner
from anydevice_conformance import tolerances as _tol

DEVICES = [d for d in ("cpu", "npu:0", "dcu:0", "opencl:0") if ad.device.is_available(d.split(":")[0])]
SECONDS = float(os.environ.get("ANYDEVICE_FUZZ_SECONDS", "15")) * len(DEVICES)
SHARDS = 4
DOCUMENTED = (TypeError, ValueError, IndexError, OverflowError, ad.OutOfMemoryError)
PACKAGE = os.path.dirname(ad.__file__) + os.sep
REPORTS = Path(__file__).resolve().parent.parent / "reports"

OPS = [op for op in R.all_ops()]
HELPERS = ["asarray", "zeros", "ones", "empty", "full_like", "zeros_like", "ones_like", "empty_like", "moveaxis",
           "result_type", "finfo", "iinfo"]
SHAPES = [(), (0,), (3,), (2, 3), (1, 3), (2, 1), (2, 0, 3), (4, 1, 2)]
HUGE = [2**40, 2**62, 2**63, 2**64]  # beyond any device: refused before allocating


# --- values of the right kind and of every wrong kind ---------------------------------------------------
JUNK = st.sampled_from([
    None, "yes", "", 1.5, math.nan, math.inf, -1, 0, 2**64, -(2**63) - 1, (), [], [0], (0, 0), {}, b"x", True,
    False, 1j, np.int64(1), np.float32(2.0), np.bool_(True), object(), np.zeros(2), (1.5,), ("a",), (None,),
])
small_int = st.integers(-4, 5)
dims = st.one_of(st.integers(0, 4), st.sampled_from(HUGE), st.sampled_from([-1, -5]))
shape_value = st.one_of(
    st.tuples(), st.lists(st.integers(0, 4), max_size=4).map(tuple), st.lists(dims, max_size=4).map(tuple),
    st.integers(0, 5), st.sampled_from(HUGE), st.just((1,) * 65), st.just((1,) * 64), st.just((2,) * 64),
    st.lists(st.sampled_from([3, 3.0, "3", True, np.int32(2), None]), min_size=1, max_size=3).map(tuple),
    st.lists(st.integers(0, 3), max_size=3),
)
axes_value = st.one_of(small_int, st.none(), st.lists(small_int, max_size=3).map(tuple), st.lists(small_int, max_size=2))
scalar_value = st.one_of(
    st.integers(-5, 300), st.sampled_from([2**31, 2**63, 2**64, -(2**63), -(2**64), 2**2000]), st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True, width=64), st.sampled_from([0.5, -2.5, 1e300, 1e-300, -0.0]),
    st.complex_numbers(max_magnitude=10, allow_nan=False), st.sampled_from([np.int8(3), np.float16(1.5), np.uint64(7)]),
)
small_scalar = st.one_of(st.integers(-3, 3), st.floats(-3, 3), st.booleans())
dtype_value = st.one_of(
    st.sampled_from(_dt.ALL_DTYPES), st.sampled_from([d.name for d in _dt.ALL_DTYPES]),
    st.sampled_from([None, int, float, bool, complex, np.float64, np.int8, "float128", "int", 5, "U"]),
)
index_key = st.one_of(
    small_int, st.none(), st.just(Ellipsis), st.sampled_from([slice(None), slice(1, None), slice(None, None, -1),
                                                                 slice(0, 10, 2), slice(None, None, 0)]),
    st.lists(st.one_of(small_int, st.none(), st.just(Ellipsis), st.just(slice(None))), max_size=3).map(tuple),
)


def attr_strategy(kind: R.Attr):
    if isinstance(kind, R.Optional):
        return st.one_of(st.none(), attr_strategy(kind.kind))
    good = {
        R.Bool: st.sampled_from([True, False, np.bool_(True)]),
        R.Int: st.one_of(small_int, st.sampled_from([2**40, 2**63, -(2**63), 10, 100])),
        R.Axis: small_int, R.Axes: axes_value, R.Shape: shape_value, R.Scalar: scalar_value,
        R.Ints: st.one_of(st.permutations([0, 1]).map(tuple), st.permutations([0, 1, 2]).map(tuple),
                          st.lists(small_int, max_size=3).map(tuple)),
        R.Real: st.one_of(st.floats(-1, 10), st.sampled_from([0.0, 1e-5, -1.0, math.nan, math.inf, 0, 1])),
        R.DType: dtype_value,
    }.get(type(kind))
    if isinstance(kind, R.Choice):
        good = st.one_of(st.sampled_from(kind.choices), st.sampled_from(["avg", "NONE", ""]))
    if good is None:  # getitem/setitem keys (the canon checks them)
        good = index_key
    return st.one_of(good, good, JUNK)  # mostly the right kind


# --- cases: templates materialized on each device ----------------------------------------------------------
class T:
    """A tensor input: numpy values of one dtype, made on each device."""

    __slots__ = ("arr", "dtype")

    def __init__(self, arr, dtype):
        self.arr, self.dtype = arr, dtype

    def __repr__(self):
        return f"T({self.dtype.name}{list(self.arr.shape)})"


class DEV:
    """The device under test (the ``device`` argument)."""

    def __repr__(self):
        return "DEV"


def make(x, dev):
    if isinstance(x, T):
        return ad.asarray(x.arr, dtype=x.dtype, device=dev)
    if isinstance(x, DEV):
        return dev
    if isinstance(x, list):
        return [make(e, dev) for e in x]
    return x


def tensors_of(x):
    if isinstance(x, T):
        yield x
    elif isinstance(x, (list, tuple)):
        for e in x:
            yield from tensors_of(e)
    elif isinstance(x, dict):
        for e in x.values():
            yield from tensors_of(e)


@st.composite
def tensor(draw, op=None, k=0, n=1):
    d = draw(st.sampled_from(_dt.ALL_DTYPES))
    shape = draw(st.sampled_from(SHAPES))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dom = None if op is None else _input_domain(op, k, n)
    arr = values(rng, d, shape, dom)
    if d.kind == "float" and _specials_ok(op) and draw(st.integers(0, 4)) == 0:  # NaN, ±inf, ±0, tiny, huge
        sp = specials(d)
        arr = rng.choice(sp, size=shape).astype(d.numpy) if shape else np.asarray(rng.choice(sp)).astype(d.numpy)
    return T(np.asarray(arr), d)


#: Reductions whose float32 intermediate (a product, a square) overflows where float64's does not.
_SQUARING = ("prod", "var", "std", "mean", "logsumexp")


def _specials_ok(op) -> bool:
    """Whether NaN/±inf/huge values are compared with the float64 reference as conformance does: not
    for products and squares (a float32 partial result overflows where float64's does not) nor for
    linear algebra and nn ops."""
    return op is None or (op.category in ("elementwise", "reduction", "manipulation", "indexing", "creation")
                          and op.name not in _SQUARING)


def _input_domain(op, k, n):
    from anydevice.ops.samples import _input_domain as dom

    return dom(op, k, n)


@st.composite
def operand(draw, op, k, n):
    pick = draw(st.integers(0, 9))
    if pick < 7:
        return draw(tensor(op, k, n))
    if pick < 9:  # a Python scalar: small ones where big magnitudes only measure float32 rounding (pow, exp)
        return draw(small_scalar if op.domain in ("pow", "exp", "prod", "unit") else scalar_value)
    return draw(JUNK)


@st.composite
def op_case(draw, op):
    n = len(op.inputs)
    args = []
    for k, name in enumerate(op.inputs):
        if name.startswith("*"):
            pick = draw(st.integers(0, 9))
            if pick < 8:
                first = draw(tensor(op))
                same = draw(st.booleans())  # arrays of one dtype and shape mostly, else anything
                rest = [T(first.arr.copy(), first.dtype) if same else draw(tensor(op)) for _ in range(draw(st.integers(0, 2)))]
                args.append([first] + rest)
            else:
                args.append(draw(st.one_of(st.just([]), tensor(op), JUNK)))
        else:
            args.append(draw(operand(op, k, n)))
    kwargs = {}
    for name, kind in op.schema.items():
        if isinstance(kind, R.Device):
            kwargs[name] = DEV() if draw(st.integers(0, 9)) else draw(st.sampled_from([3, "nosuch", "npu:99", "cpu:x"]))
        elif draw(st.booleans()):
            kwargs[name] = draw(attr_strategy(kind))
    return args, kwargs


@st.composite
def helper_case(draw, name):
    dev = DEV()
    if name == "asarray":
        obj = draw(st.one_of(
            tensor().map(lambda t: t.arr), st.lists(scalar_value, max_size=3), scalar_value,
            st.lists(st.lists(st.integers(-3, 3), min_size=2, max_size=2), max_size=2), JUNK, st.just([[1], [2, 3]])))
        return [obj], {"dtype": draw(st.one_of(st.none(), dtype_value)), "device": dev}
    if name in ("zeros", "ones", "empty"):
        return [draw(shape_value)], {"dtype": draw(st.one_of(st.none(), dtype_value)), "device": dev}
    x = draw(st.one_of(tensor(), tensor(), JUNK))
    if name.endswith("_like"):
        args = [x] + ([draw(scalar_value)] if name == "full_like" else [])
        return args, {"dtype": draw(st.one_of(st.none(), dtype_value))}
    if name == "moveaxis":
        return [x, draw(axes_value), draw(axes_value)], {}
    if name == "result_type":
        return draw(st.lists(st.one_of(tensor(), st.sampled_from(_dt.ALL_DTYPES), scalar_value, dtype_value, JUNK),
                             max_size=3)), {}
    return [draw(st.one_of(tensor(), st.sampled_from(_dt.ALL_DTYPES), dtype_value, JUNK))], {}


#: Python operators and the registry op each stands for (their fast path skips the dispatcher).
OPERATORS = {"add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide", "floordiv": "floor_divide",
             "mod": "remainder", "pow": "pow", "matmul": "matmul", "and_": "bitwise_and", "or_": "bitwise_or",
             "xor": "bitwise_xor", "lshift": "bitwise_left_shift", "rshift": "bitwise_right_shift", "eq": "equal",
             "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal"}


@st.composite
def operator_case(draw):
    fn = draw(st.sampled_from(sorted(OPERATORS)))
    op = R.get_op(OPERATORS[fn])
    a = draw(tensor(op, 0, 2))
    b = draw(st.one_of(tensor(op, 1, 2), st.just(T(a.arr.copy(), a.dtype)),  # same dtype and shape: the fast path
                       small_scalar if op.domain == "pow" else scalar_value))
    args = [a, b] if draw(st.booleans()) or not isinstance(b, T) else [b, a]
    if not isinstance(args[0], T) and not isinstance(args[1], T):
        args = [a, b]
    return f"operator.{fn}", op, args, {}


@st.composite
def case(draw):
    if draw(st.integers(0, 3)) == 0:
        return draw(operator_case())
    if draw(st.integers(0, 5)) == 0:
        name = draw(st.sampled_from(HELPERS))
        args, kwargs = draw(helper_case(name))
        return name, None, args, kwargs
    op = draw(st.sampled_from(OPS))
    args, kwargs = draw(op_case(op))
    return op.name, op, args, kwargs


# --- running one case everywhere -----------------------------------------------------------------------------
def raised_by_anydevice(e: BaseException) -> bool:
    frames = traceback.extract_tb(e.__traceback__)
    return bool(frames) and frames[-1].filename.startswith(PACKAGE)


def device_dtypes(dev):
    d = as_device(dev)
    return set(d._backend.dtypes(d.index))


def run_on(name, args, kwargs, dev):
    """('ok', host array or value, dtype, shape) | ('exc', exception) | ('unsupported', why)."""
    try:
        a, kw = make(args, dev), make(kwargs, dev)
    except Exception as e:  # noqa: BLE001 - the input itself cannot live on this device
        return ("unsupported", f"making the inputs: {type(e).__name__}: {e}")
    try:
        fn = getattr(operator, name.split(".")[1]) if name.startswith("operator.") else _public(name)
        out = fn(*a, **kw)
        if isinstance(out, tuple) and out and all(isinstance(o, ad.Tensor) for o in out):  # a multi-output op
            return ("ok", tuple(o.numpy() for o in out), tuple(o.dtype for o in out), tuple(tuple(o.shape) for o in out))
        if isinstance(out, ad.Tensor):
            return ("ok", out.numpy(), out.dtype, tuple(out.shape))
        return ("ok", out, None, None)
    except Exception as e:  # noqa: BLE001 - classified by the caller
        if isinstance(e, TypeError) and "does not support dtype" in str(e):
            return ("unsupported", str(e))
        return ("exc", e)


def _public(name):
    """What users call: anydevice.<name>, or anydevice.linalg / anydevice.fft.<name> for those extensions' ops."""
    op = R._OPS.get(name)
    return getattr(getattr(ad, op.namespace) if op is not None and op.namespace else ad, name)


def _adopted(x, ref):
    """The dtype a Python scalar takes beside a tensor of dtype ``ref`` (Array API 2024.12: a complex
    scalar with a real floating tensor gives the complex dtype of that precision)."""
    if type(x) is complex and ref is not None and ref.kind == "float":
        return _dt.complex128 if ref is _dt.float64 else _dt.complex64
    return ref


def reference(name, op, args, kwargs, outcome):
    """None when the result equals the reference, else what differs."""
    _, got, dtype, shape = outcome
    if op is None:
        return _helper_reference(name, args, kwargs, got, dtype, shape)
    flat = [x for x in args]
    tensors = [t for t in tensors_of(flat)]
    ref_dt = next((t.dtype for t in tensors if t.dtype is not _dt.bool_), tensors[0].dtype if tensors else None)
    inputs = [[t.arr for t in x] if isinstance(x, list) else
              (x.arr if isinstance(x, T) else _dispatch._dt_np_scalar(x, _adopted(x, ref_dt))) for x in flat]
    shapes = [[tuple(a.shape) for a in x] if isinstance(x, list) else tuple(x.shape) for x in inputs]
    in_dtypes = [_dt.dtype(a.dtype) for x in inputs for a in (x if isinstance(x, list) else [x])]
    attrs = {**op.attrs, **{k: (None if isinstance(v, DEV) else v) for k, v in kwargs.items()}}
    attrs = op.validate(attrs, shapes, in_dtypes)
    attrs.pop("device", None)
    ex = _runner.expected(op, Sample(inputs, attrs, "fuzz"))
    if op.outputs is None:
        bad = _compare(op, in_dtypes, got, dtype, shape, ex.dtype, ex.shape, ex.ref)
        if bad is not None and op.name in SUMMATIONS and _within_summation_error(op, inputs, attrs, got, ex):
            return None
        return bad
    bad = (_compare(op, in_dtypes, *e) for e in zip(got, dtype, shape, ex.dtype, ex.shape, ex.ref))  # each output
    return next((b for b in bad if b is not None), None)


#: Ops that add up their input: their float results depend on the order of the additions.
SUMMATIONS = ("sum", "mean", "cumulative_sum")


def _within_summation_error(op, inputs, attrs, got, ex) -> bool:
    """Whether ``got`` is within the error bound of a floating-point sum of ``inputs`` in any order:
    ``n * eps * sum(|x|)`` in the accumulation precision (float32 for the 16-bit floats), plus the
    rounding of the result; where ``sum(|x|)`` overflows that precision, any inf or NaN. (The
    float64 reference is one order among many: with values from 1e-8 to 1e38 it absorbs terms
    another order keeps.)"""
    x = np.asarray(inputs[0])
    if x.dtype.kind != "f" and x.dtype.name != "bfloat16":
        return False
    absx = np.abs(x.astype(np.float64))
    ab = np.asarray(_runner.expected(op, Sample([absx.astype(x.dtype)], attrs, "fuzz |x|")).ref, np.float64)
    acc = np.float32 if x.dtype.itemsize < 4 else x.dtype
    fin = np.finfo(acc)
    g, r = np.asarray(got).astype(np.float64), np.asarray(ex.ref, np.float64)
    n = max(x.size, 1)
    bound = n * float(fin.eps) * ab + 2 * float(ml_dtypes.finfo(x.dtype).eps) * np.abs(r) + float(fin.tiny)
    overflow = ab > float(fin.max) / 2
    ok = np.where(overflow, ~np.isfinite(g) | (np.abs(g - r) <= bound), np.abs(g - r) <= bound)
    ok |= np.isnan(g) & np.isnan(r)
    return bool(np.all(ok))


def _compare(op, in_dtypes, got, dtype, shape, ex_dtype, ex_shape, ex_ref):
    if dtype is not ex_dtype or shape != ex_shape:
        return f"result {dtype.name}{list(shape)}, reference {ex_dtype.name}{list(ex_shape)}"
    first = in_dtypes[0].name if in_dtypes else ex_dtype.name
    tol = _tol.for_op(op, first, ex_dtype.name)
    ok, mabs, mrel, nbad, at = _tol.compare(got, ex_ref, tol, _tol.signed_zeros(op, ex_dtype))
    return None if ok else f"{nbad} values differ (first at {at}: {np.asarray(got)[at]!r} vs {np.asarray(ex_ref)[at]!r})"


def _helper_reference(name, args, kwargs, got, dtype, shape):
    if name in ("asarray", "zeros", "ones", "empty"):
        obj = args[0]
        want = (np.asarray(obj) if name == "asarray" else
                (np.ones if name == "ones" else np.zeros)(obj, dtype=np.float64))
        if tuple(want.shape) != shape:
            return f"shape {shape}, numpy {want.shape}"
        return None if np.array_equal(np.asarray(got, np.complex128 if dtype.kind == "complex" else np.float64),
                                      want.astype(dtype.numpy).astype(np.complex128 if dtype.kind == "complex"
                                                                      else np.float64), equal_nan=True) else "values"
    if name.endswith("_like"):
        x = args[0]
        fill = {"zeros_like": 0, "ones_like": 1, "empty_like": 0}.get(name, args[-1])
        fill = _dispatch._coerce(name, R.scalar_value(fill), dtype)  # the fill value in the dtype's kind
        want = np.full(x.arr.shape, np.asarray(fill, np.complex128 if dtype.kind == "complex" else None)).astype(dtype.numpy)
        return None if shape == x.arr.shape and np.array_equal(np.asarray(got, want.dtype), want, equal_nan=True) else "values"
    if name == "moveaxis":
        want = np.moveaxis(args[0].arr, args[1], args[2])
        return None if np.array_equal(got, want, equal_nan=True) else "values"
    if name in ("finfo", "iinfo"):
        d = R._dt._operand_dtype(name, args[0].dtype if isinstance(args[0], T) else args[0])
        want = (ml_dtypes.finfo if name == "finfo" else np.iinfo)(d.numpy)
        return None if (got.bits, got.max, got.min) == (want.bits, want.max, want.min) else "limits"
    if name == "result_type":
        ds = [a.dtype if isinstance(a, T) else a for a in args if not isinstance(a, (bool, int, float, complex))]
        if got not in [_dt.dtype(d) if not isinstance(d, _dt.DType) else d for d in ds if isinstance(d, (_dt.DType, str, type))] \
                and all(isinstance(d, _dt.DType) and d is not _dt.bfloat16 for d in ds) and ds:
            want = _dt.dtype(np.result_type(*[d.numpy for d in ds]))
            if any(type(a) is complex for a in args):
                want = _adopted(0j, want)
            return None if want is got else f"{got.name}, numpy {want.name}"
    return None


COUNTS: dict = collections.defaultdict(collections.Counter)
#: Ops whose results are known to miss the reference for some inputs, and why. Their mismatches are
#: counted (``inaccurate`` in the report) instead of failing, until the op is fixed.
KNOWN_INACCURATE = {
    "logaddexp": "its decomposition m + log(e^(a-m) + e^(b-m)) cancels when the result is near 0 (~15 ulp in float32)",
}


#: Preconditions the standard puts on an input (results are undefined otherwise): the case is
#: made to meet them. searchsorted's x1 must be sorted (a native binary search and the counting
#: decomposition give different answers for an unsorted x1).
#: A ``size=`` given to an op of data-dependent size is one the caller knows: at most the number of
#: results (a larger one pads, which the standard leaves open).
PRECONDITIONS = {
    "searchsorted": lambda args: [T(np.sort(args[0].arr, axis=-1), args[0].dtype), *args[1:]]
    if args and isinstance(args[0], T) and args[0].arr.ndim else args,
}
_COUNTS = {"argwhere": np.count_nonzero, "nonzero": np.count_nonzero,
           **{f"unique_{k}": (lambda a: np.unique(a, equal_nan=False).size) for k in ("all", "counts", "inverse", "values")}}


def check_case(name, op, args, kwargs):
    if name in PRECONDITIONS:
        args = PRECONDITIONS[name](list(args))
    if name in _COUNTS and isinstance(kwargs.get("size"), int) and args and isinstance(args[0], T):
        kwargs = {**kwargs, "size": min(kwargs["size"], int(_COUNTS[name](args[0].arr)))}
    outcomes = {}
    for dev in DEVICES:
        oc = run_on(name, args, kwargs, dev)
        try:
            ad.device.synchronize(dev)
        except Exception as e:  # noqa: BLE001
            raise AssertionError(f"{name}{args!r} {kwargs!r} left {dev} unusable: {type(e).__name__}: {e}") from e
        used = {t.dtype for t in tensors_of([args, kwargs])}
        if oc[0] != "unsupported" and not used <= device_dtypes(dev):
            oc = ("unsupported", "an input dtype")
        outcomes[dev] = oc
        key = oc[0] if oc[0] != "exc" else f"exc:{type(oc[1]).__name__}"
        COUNTS[dev][key] += 1
    what = f"{name}(*{args!r}, **{kwargs!r})"
    kinds = {}
    for dev, oc in outcomes.items():
        if oc[0] == "exc":
            e = oc[1]
            assert isinstance(e, DOCUMENTED), f"{what} on {dev}: undocumented {type(e).__name__}: {e}"
            assert raised_by_anydevice(e), (f"{what} on {dev}: {type(e).__name__} not raised by anydevice: {e}\n"
                                            + "".join(traceback.format_tb(e.__traceback__)[-3:]))
            kinds[dev] = type(e)
        elif oc[0] == "ok":
            kinds[dev] = "result"
            bad = reference(name, op, args, kwargs, oc)
            if bad is not None and op is not None and op.name in KNOWN_INACCURATE and bad.endswith(")"):
                COUNTS[dev]["inaccurate"] += 1
                continue
            assert bad is None, f"{what} on {dev}: the result differs from the reference: {bad}"
    assert len(set(kinds.values())) <= 1, f"{what}: devices disagree: {kinds}"


@pytest.fixture(autouse=True)
def _quiet_fallbacks():
    old = _dispatch.set_fallback_mode("silent")
    yield
    _dispatch.set_fallback_mode(old)


#: In CI (``CI`` set) the batches draw from fixed seeds 0, 1, 2, ... so a run can be repeated exactly;
#: elsewhere every run draws new cases.
FIXED_SEEDS = bool(os.environ.get("CI"))
#: ... and at most this many batches per shard, seeds that have been run here before.
CI_MAX_BATCHES = 120


def _one_batch(batch: int) -> None:
    @settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(case())
    def run(c):
        check_case(*c)

    (seed(batch)(run) if FIXED_SEEDS else run)()


@pytest.mark.parametrize("shard", range(SHARDS))
def test_fuzz_public_namespace(shard):
    """Runs batches of hypothesis examples until this shard's share of the budget is spent."""
    COUNTS.clear()
    end = time.monotonic() + SECONDS / SHARDS
    batches = 0
    while time.monotonic() < end and not (FIXED_SEEDS and batches >= CI_MAX_BATCHES):
        _one_batch(shard * 100_000 + batches)
        batches += 1
    total = {dev: dict(c) for dev, c in COUNTS.items()}
    out = REPORTS / "fuzz_api"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"shard-{shard}.json").write_text(json.dumps({"seconds": SECONDS / SHARDS, "counts": total}, indent=1))
    merged = collections.defaultdict(collections.Counter)
    for f in out.glob("shard-*.json"):
        for dev, c in json.loads(f.read_text())["counts"].items():
            merged[dev].update(c)
    (REPORTS / "fuzz_api.json").write_text(json.dumps({dev: dict(c) for dev, c in merged.items()}, indent=1))
    print(f"fuzz shard {shard}: {batches} batches;", json.dumps(total))
    assert all(sum(c.values()) > 0 for c in COUNTS.values()) and set(COUNTS) == set(DEVICES)
