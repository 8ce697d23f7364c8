"""The OpenCL backend against numpy: every native kernel, its dtypes, broadcasting, reductions,
matmul, movement ops, the program cache, dtype refusal, streams and events; the device probe,
build-failure reports and out-of-memory checks.

Runs on whatever OpenCL device comes first (PoCL's CPU device in CI). Primitives run with
``ANYDEVICE_FALLBACK=error`` so a silent CPU fallback cannot pass a test. Tests marked
``@no_device`` (the failure classifier on sample driver messages) run without any OpenCL.
"""
from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
import warnings

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("anydevice_opencl")

import anydevice as ad  # noqa: E402
from anydevice import dispatch  # noqa: E402
from anydevice.device import Event, Stream, stream_guard  # noqa: E402
from anydevice_opencl import diagnose  # noqa: E402

_reason = ("pyopencl is not installed (pip install anydevice-opencl)" if importlib.util.find_spec("pyopencl") is None
           else ad.device.unavailable_reason("opencl"))
_NO_DEVICE: set[str] = set()


def no_device(test):
    """Mark a test that needs no OpenCL device."""
    _NO_DEVICE.add(test.__name__)
    return test


@pytest.fixture(autouse=True)
def _needs_device(request):
    if _reason and request.function.__name__ not in _NO_DEVICE:
        pytest.skip(f"no usable OpenCL device: {_reason}")

BF16 = np.dtype(ml_dtypes.bfloat16)
RNG = np.random.default_rng(0)
FLOATS = ["float32", "float64", "float16", "bfloat16"]
TOL = {"float16": (2e-3, 1e-3), "bfloat16": (1.6e-2, 1e-2), "float32": (2e-6, 1e-6), "float64": (1e-12, 1e-12)}


@pytest.fixture(autouse=True)
def _no_fallback():
    old = dispatch.set_fallback_mode("error")
    yield
    dispatch.set_fallback_mode(old)


def npd(name):
    return BF16 if name == "bfloat16" else np.dtype(name)


def kind(name) -> str:
    return "f" if name == "bfloat16" else npd(name).kind


def on(a, dtype=None):
    a = np.asarray(a)
    return ad.asarray(a if dtype is None else a.astype(npd(dtype)), device="opencl")


def ref_op(fn, *xs):
    """numpy's result; 16-bit floats computed in float32 and rounded once, as numpy does."""
    d = xs[0].dtype
    with np.errstate(all="ignore"):
        if d in (np.float16, BF16):
            r = fn(*[x.astype(np.float32) for x in xs])
            return r.astype(d) if r.dtype == np.float32 else r
        return fn(*xs)


def check(got, want, dtype=None):
    got = got.numpy() if hasattr(got, "numpy") else np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind == "f" or want.dtype == BF16:
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        rtol, atol = TOL[str(want.dtype)]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
    else:
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want)


def sample(dtype, shape, domain=None):
    d = npd(dtype)
    if d == np.bool_:
        return RNG.random(shape) < 0.5
    if d.kind in "iu":
        info = np.iinfo(d)
        lo, hi = (max(info.min, -50), min(info.max, 50)) if domain != "wide" else (info.min, info.max)
        return RNG.integers(lo, hi, size=shape, endpoint=True).astype(d)
    x = RNG.standard_normal(shape) * 3
    if domain == "positive":
        x = np.abs(x) + 0.1
    return x.astype(d)


_erf = np.vectorize(math.erf, otypes=[np.float64])
UNARY = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos,
    "erf": lambda x: _erf(x).astype(x.dtype), "floor": np.floor, "round": np.round, "abs": np.abs,
    "negative": np.negative,
}
BINARY = {
    "add": np.add, "multiply": np.multiply, "divide": np.divide, "pow": np.power, "maximum": np.maximum,
    "minimum": np.minimum, "remainder": np.remainder, "floor_divide": np.floor_divide, "equal": np.equal,
    "less": np.less, "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "bitwise_left_shift": np.left_shift, "bitwise_right_shift": np.right_shift,
}
NEW_UNARY = {
    "tan": np.tan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "expm1": np.expm1, "log1p": np.log1p,
    "log2": np.log2, "log10": np.log10, "reciprocal": np.reciprocal, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "ceil": np.ceil, "trunc": np.trunc, "square": np.square, "sign": np.sign, "relu": lambda x: np.maximum(x, 0),
    "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite,
}
NEW_BINARY = {
    "subtract": np.subtract, "hypot": np.hypot, "logaddexp": np.logaddexp, "not_equal": np.not_equal,
    "greater": np.greater, "greater_equal": np.greater_equal, "less_equal": np.less_equal,
}
INT_OPS = {"floor", "round", "abs", "negative", "add", "multiply", "pow", "maximum", "minimum", "remainder",
           "floor_divide", "equal", "less", "bitwise_and", "bitwise_or", "bitwise_xor",
           "bitwise_left_shift", "bitwise_right_shift"}
FLOAT_OPS = set(UNARY) | {"add", "multiply", "divide", "pow", "maximum", "minimum", "remainder", "floor_divide",
                          "equal", "less"}


UNARY_CASES = ([(op, "float32") for op in sorted(UNARY)] + [(op, "int32") for op in ("abs", "floor", "negative", "round")]
               + [(op, d) for op in ("exp", "round") for d in ("float64", "float16", "bfloat16")])


@pytest.mark.parametrize("op,dtype", UNARY_CASES)
def test_unary(op, dtype):
    x = sample(dtype, (3, 37), "positive" if op in ("log", "sqrt") else None)
    if kind(dtype) == "f":
        x[0, :4] = np.array([0.5, 1.5, 2.5, -2.5], dtype=x.dtype)  # round half to even
    check(getattr(ad, op)(on(x)), ref_op(UNARY[op], x))


def _binary_inputs(op, dtype, shape1=(4, 33), shape2=(4, 33)):
    a, b = sample(dtype, shape1), sample(dtype, shape2)
    if op == "pow":
        if kind(dtype) in "iu":
            a, b = sample(dtype, shape1) % 5, np.abs(sample(dtype, shape2)) % 4
        else:
            a = np.abs(a) + 0.1
    if op in ("bitwise_left_shift", "bitwise_right_shift"):
        bits = npd(dtype).itemsize * 8
        b = (np.arange(np.prod(shape2)).reshape(shape2) % (bits + 3)).astype(npd(dtype))  # includes >= width
    return a, b


BINARY_CASES = ([(op, "float32") for op in sorted(BINARY) if op in FLOAT_OPS]
                + [(op, "int32") for op in sorted(BINARY) if op in INT_OPS]
                + [(op, "bool") for op in ("equal", "less", "bitwise_and", "bitwise_or", "bitwise_xor")]
                + [(op, d) for op in ("multiply", "floor_divide", "remainder", "maximum")
                   for d in ("float64", "float16", "bfloat16")]
                + [(op, d) for op in ("floor_divide", "remainder", "bitwise_left_shift", "bitwise_right_shift")
                   for d in ("int8", "uint8", "uint32", "int64")])


@pytest.mark.parametrize("op,dtype", BINARY_CASES)
def test_binary(op, dtype):
    k = kind(dtype)
    a, b = _binary_inputs(op, dtype)
    if op in ("remainder", "floor_divide") and k in "fiu":
        b.flat[:3] = 0  # numpy: integers give 0, floats give nan/inf
    if op in ("remainder", "floor_divide", "divide") and k == "f":
        a.flat[3:6] = np.array([-0.0, 7.0, -7.0], dtype=a.dtype)
        b.flat[3:6] = np.array([3.0, -2.0, 2.0], dtype=a.dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(getattr(ad, op)(on(a), on(b)), ref_op(BINARY[op], a, b))


@pytest.mark.parametrize("dtype", ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                                   "float16", "bfloat16", "float32", "float64"])
def test_every_dtype(dtype):
    a, b = sample(dtype, (2, 9)), sample(dtype, (2, 9))
    check(ad.equal(on(a), on(b)), np.equal(a, b))
    if dtype != "bool":
        check(ad.add(on(a), on(b)), ref_op(np.add, a, b))


def test_integer_division_edges():
    a = np.array([-128, -128, 7, -7, 7, -7, 0], np.int8)
    b = np.array([-1, 1, -2, 2, 0, -3, 5], np.int8)
    with np.errstate(all="ignore"):
        check(ad.floor_divide(on(a), on(b)), np.floor_divide(a, b))
        check(ad.remainder(on(a), on(b)), np.remainder(a, b))
    big = np.array([np.iinfo(np.int64).min, 2**62, -(2**40)], np.int64)
    check(ad.floor_divide(on(big), on(np.array([-1, 3, 7], np.int64))), np.floor_divide(big, [-1, 3, 7]))


@pytest.mark.parametrize("shapes", [((4, 1, 5), (3, 1)), ((1,), (2, 3)), ((2, 3, 4), (4,)), ((), (3, 2)),
                                    ((5, 1, 1, 6), (1, 4, 3, 1))])
def test_broadcasting(shapes):
    a, b = sample("float32", shapes[0]), sample("float32", shapes[1])
    check(ad.add(on(a), on(b)), a + b)
    check(ad.maximum(on(b), on(a)), np.maximum(b, a))


def test_python_scalars_and_nan_propagation():
    x = np.array([1.0, np.nan, -np.inf, 3.0, -0.0], np.float32)
    y = np.array([np.nan, 2.0, 1.0, 3.0, 0.0], np.float32)
    check(ad.maximum(on(x), on(y)), np.maximum(x, y))
    check(ad.minimum(on(x), on(y)), np.minimum(x, y))
    check(on(x) * 2.0 + 1.0, x * np.float32(2.0) + np.float32(1.0))


def test_where():
    c = RNG.random((3, 4)) < 0.5
    a, b = sample("int16", (3, 4)), sample("int16", (1, 4))
    check(ad.where(on(c), on(a), on(b)), np.where(c, a, b))
    f = sample("bfloat16", (4,))
    check(ad.where(on(c), on(f), on(f[:1])), np.where(c, f, f[:1]))


ASTYPE_CASES = ([(s, d) for s in ("float64", "float16", "bfloat16", "int8", "int64", "uint16", "bool")
                 for d in ("float32", "int32", "bool")]
                + [("float32", d) for d in ("float16", "bfloat16", "float64", "int64", "uint8", "int8")]
                + [("float64", "float16"), ("bfloat16", "float16"), ("int64", "float64"), ("bool", "bfloat16")])


@pytest.mark.parametrize("src,dst", ASTYPE_CASES)
def test_astype(src, dst):
    x = sample(src, (50,))
    if kind(src) == "f":
        x[:6] = np.array([2.7, -2.7, 0.5, -0.0, 1e4, 3.25], dtype=x.dtype)  # float -> int truncates toward 0
        if kind(dst) in "iu":  # out-of-range float -> int is undefined: stay in range
            x = np.clip(x.astype(np.float32), 0 if kind(dst) == "u" else -100, 100).astype(x.dtype)
    check(ad.astype(on(x), dst), x.astype(npd(dst)))


@pytest.mark.parametrize("dtype", ["float32", "float16", "int16"])
def test_more_native_elementwise(dtype):
    """Ops that also have decompositions run natively (computed once in float for 16-bit floats)."""
    kernels = ad.device.get_backend("opencl").kernels
    x = sample(dtype, (3, 11), "positive" if dtype != "int16" else None)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32)
    for op, fn in NEW_UNARY.items():
        if kind(dtype) == "i" and op not in ("ceil", "trunc", "square", "sign", "relu", "isnan", "isinf", "isfinite"):
            continue
        assert kernels.lookup(op, ad.dtypes.dtype(dtype)) is not None, op
        check(getattr(ad, op)(on(x)), ref_op(fn, x))
        if kind(dtype) == "f":
            v = special.astype(npd(dtype))
            check(getattr(ad, op)(on(v)), ref_op(fn, v))
    y = sample(dtype, (3, 11))
    for op, fn in NEW_BINARY.items():
        if kind(dtype) == "i" and op in ("hypot", "logaddexp"):
            continue
        check(getattr(ad, op)(on(x), on(y)), ref_op(fn, x, y))
        check(getattr(ad, op)(on(y), on(y[:1])), ref_op(fn, y, y[:1]))  # strided (broadcast) mode
    if kind(dtype) == "f":
        a, b = special.astype(npd(dtype))[:, None], special.astype(npd(dtype))[None, :]
        check(ad.hypot(on(a), on(b)), ref_op(np.hypot, *np.broadcast_arrays(a, b)))
        check(ad.logaddexp(on(a), on(b)), ref_op(np.logaddexp, *np.broadcast_arrays(a, b)))
        for approx in ("none", "tanh"):
            got = ad.gelu(on(x), approximate=approx).numpy().astype(np.float64)
            xs = x.astype(np.float64)
            want = (0.5 * xs * (1 + np.tanh(math.sqrt(2 / math.pi) * (xs + 0.044715 * xs ** 3))) if approx == "tanh"
                    else 0.5 * xs * (1 + _erf(xs / math.sqrt(2))))
            np.testing.assert_allclose(got, want, rtol=TOL[dtype][0] * 2, atol=TOL[dtype][1])
    else:
        check(ad.bitwise_invert(on(x)), np.invert(x))
        b1, b2 = RNG.random(8) < 0.5, RNG.random(8) < 0.5
        for op, fn in (("logical_and", np.logical_and), ("logical_or", np.logical_or),
                       ("logical_xor", np.logical_xor)):
            check(getattr(ad, op)(on(b1), on(b2)), fn(b1, b2))
        check(ad.logical_not(on(b1)), ~b1)


def test_scalar_operands_and_high_rank_strides():
    x = sample("float32", (7, 5))
    check(2.0 - on(x), np.float32(2.0) - x)  # one input is a single element: "sc" mode
    check(on(x) / 4.0, x / np.float32(4.0))
    y = sample("int32", (2, 3, 2, 3, 2, 3))  # six dims that do not collapse: leading dims loop on the host
    perm = (5, 0, 4, 1, 3, 2)
    check(ad.permute_dims(on(y), perm), np.transpose(y, perm))
    check(on(y)[:, ::2, :, ::-1, :, 1:] + on(y[:1, :1, :, :1, :, 1:]), y[:, ::2, :, ::-1, :, 1:] + y[:1, :1, :, :1, :, 1:])


# --- kernel tiers: generic first, specialized when large or hot ---------------------------------------
def _spy_launches(monkeypatch):
    """The specs launched through ``kernels._launch`` from now on (with a fresh tier counter)."""
    from anydevice_opencl import kernels as K

    monkeypatch.setattr(K, "_generic_runs", {})
    seen, launch = [], K._launch
    monkeypatch.setattr(K, "_launch", lambda ctx, spec, *a: (seen.append(spec), launch(ctx, spec, *a))[1])
    return seen


def test_tiers_generic_then_specialized(monkeypatch):
    from anydevice_opencl import kernels as K

    seen = _spy_launches(monkeypatch)
    a, b = sample("float32", (3, 5)), sample("float32", (1, 5))
    for _ in range(K.SPECIALIZE_LAUNCHES + 1):  # broadcast: every launch goes through the tier choice
        check(ad.hypot(on(a), on(b)), ref_op(np.hypot, a, b))
    assert [s[0] for s in seen] == ["ewg"] * K.SPECIALIZE_LAUNCHES + ["ew"], seen[-2:]
    assert seen[0] == ("ewg", ("float32", "float32"), "float32") and seen[-1][:2] == ("ew", "hypot")
    seen.clear()
    big = sample("float32", (3, K.SPECIALIZE_ELEMENTS))  # large work: specialized at once
    check(ad.hypot(on(big), on(big[:1])), ref_op(np.hypot, big, big[:1]))
    check(ad.sum(on(a), axis=1), a.sum(axis=1))
    check(ad.argmax(on(a), axis=0), np.argmax(a, axis=0))
    np.testing.assert_allclose(ad.matmul(on(a), on(a.T)).numpy(), a @ a.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ad.sum(on(big), axis=1).numpy(), big.sum(axis=1), rtol=1e-5, atol=1e-4)
    assert [s[:3] for s in seen] == [("ew", "hypot", ("float32", "float32")), ("red", "any", "float32"),
                                     ("red", "arg", "float32"), ("mm", "float32", "simple"), ("vred", "sum", "float32")]


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_specialized_elementwise(dtype, monkeypatch):
    """Every element-wise op on its specialized kernels: contiguous, one scalar operand, strided."""
    from anydevice_opencl import codegen
    from anydevice_opencl import kernels as K

    monkeypatch.setattr(K, "SPECIALIZE_ELEMENTS", 0)
    seen = _spy_launches(monkeypatch)
    for op, fn in {**UNARY, **NEW_UNARY}.items():
        if codegen.expr_for(op, dtype) is None or dtype == "int32" and op in ("round", "floor"):
            continue
        x = sample(dtype, (3, 11), "positive" if op in ("log", "sqrt", "log2", "log10", "log1p") else None)
        check(getattr(ad, op)(on(x)), ref_op(fn, x))
    for op, fn in {**BINARY, **NEW_BINARY}.items():
        if codegen.expr_for(op, dtype) is None:
            continue
        a, b = _binary_inputs(op, dtype, (3, 11), (3, 11))
        b = np.where(b == 0, 1, b).astype(b.dtype) if op in ("remainder", "floor_divide", "divide") else b
        with np.errstate(all="ignore"):
            check(getattr(ad, op)(on(a), on(b)), ref_op(fn, a, b))  # cc
            check(getattr(ad, op)(on(a), on(b[:1, :1])), ref_op(fn, a, b[:1, :1]))  # cs
            check(getattr(ad, op)(on(a[:, ::2]), on(b[:1, ::2])), ref_op(fn, a[:, ::2], b[:1, ::2]))  # g2
    assert seen and all(s[0] == "ew" for s in seen), {s[0] for s in seen}
    for name, fn in (("sum", np.sum), ("max", np.max), ("min", np.min)):
        for shape in ((5, 6), (3, 40)):  # work-groups of 1 and of 64
            x = sample(dtype, shape)
            got = getattr(ad, name)(on(x), axis=1)
            want = fn(x.astype(np.int64) if dtype == "int32" and name == "sum" else x, axis=1)
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
            check(ad.argmin(on(x), axis=1), np.argmin(x, axis=1))


# --- reductions ------------------------------------------------------------------------------------
AXES = [None, 0, 1, 2, (0, 2), (0, 1), (1, 2), ()]


@pytest.mark.parametrize("axis,dtype", [(a, "float32") for a in AXES] + [(a, "int32") for a in (None, 1, (0, 2))])
def test_reductions_axes(axis, dtype):
    x = sample(dtype, (5, 6, 7))
    for name, fn in (("sum", np.sum), ("prod", np.prod), ("max", np.max), ("min", np.min)):
        if name == "prod":
            x = (x % 3 + 1).astype(x.dtype) if dtype == "int32" else (np.abs(x) % 1.5 + 0.5).astype(x.dtype)
        got = getattr(ad, name)(on(x), axis=axis, keepdims=axis == (0, 2))
        want = fn(x.astype(np.int64) if dtype == "int32" and name in ("sum", "prod") else x, axis=axis,
                  keepdims=axis == (0, 2))
        if dtype == "float32" and name in ("sum", "prod"):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
        else:
            check(got, want)


@pytest.mark.parametrize("dtype", ["float32", "float16", "uint8", "int64"])
def test_argmax_argmin(dtype):
    x = sample(dtype, (6, 9))
    x[2, 3] = x[2, 7] = x.max()  # ties pick the first index
    for axis in (None, 0, 1):
        check(ad.argmax(on(x), axis=axis), np.argmax(x, axis=axis))
        check(ad.argmin(on(x), axis=axis, keepdims=True), np.argmin(x, axis=axis, keepdims=True))


def test_reduction_nan_and_empty():
    x = np.array([[1.0, np.nan, 3.0], [np.nan, 5.0, np.nan], [1.0, 2.0, 0.0]], np.float32)
    check(ad.max(on(x), axis=1), np.max(x, axis=1))
    check(ad.min(on(x), axis=0), np.min(x, axis=0))
    check(ad.argmax(on(x), axis=1), np.argmax(x, axis=1))
    e = np.zeros((3, 0), np.float32)
    check(ad.sum(on(e), axis=1), np.sum(e, axis=1))
    check(ad.prod(on(e), axis=1), np.prod(e, axis=1))


def test_long_reductions_two_stage():
    x = RNG.standard_normal(300_001).astype(np.float32)
    np.testing.assert_allclose(ad.sum(on(x)).numpy(), x.astype(np.float64).sum(), rtol=1e-5, atol=1e-3)
    check(ad.max(on(x)), x.max())
    i = RNG.integers(-1000, 1000, size=(2, 70_000)).astype(np.int64)
    check(ad.sum(on(i), axis=1), i.sum(axis=1))
    h = RNG.random(40_000).astype(np.float16)
    np.testing.assert_allclose(float(ad.sum(on(h)).numpy()), h.astype(np.float64).sum(), rtol=2e-3)
    b = RNG.random((3, 20_000)) < 0.5
    check(ad.sum(on(b), axis=1), b.sum(axis=1))


# --- matmul ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shapes", [((5, 7), (7, 3)), ((33, 17), (17, 45)), ((2, 3, 20), (20, 5)),
                                    ((2, 1, 3, 4), (1, 5, 4, 6)), ((4,), (4, 3)), ((3, 4), (4,)), ((4,), (4,)),
                                    ((3, 0), (0, 2)), ((64, 64), (64, 64)), ((130, 70), (70, 129)),
                                    ((3, 65, 17), (1, 17, 66)), ((2, 16, 24), (24, 40))])
def test_matmul_float32(shapes):
    a, b = sample("float32", shapes[0]), sample("float32", shapes[1])
    np.testing.assert_allclose(ad.matmul(on(a), on(b)).numpy(), a @ b, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", ["int32", "float64", "bfloat16"])
def test_matmul_dtypes(dtype):
    a, b = sample(dtype, (19, 23)), sample(dtype, (23, 18))
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(BF16) if dtype == "bfloat16" else a @ b
    if dtype == "bfloat16":
        np.testing.assert_allclose(ad.matmul(on(a), on(b)).numpy().astype(np.float32), want.astype(np.float32),
                                   rtol=2e-2, atol=2e-1)
    else:
        check(ad.matmul(on(a), on(b)), want)


# --- movement and creation ---------------------------------------------------------------------------
def test_reshape_shares_the_block():
    x = on(sample("float32", (4, 6)))
    y = ad.reshape(x, (2, 12))
    assert y._buf.block is x._buf.block
    check(y, x.numpy().reshape(2, 12))


def test_permute_broadcast_getitem():
    x = sample("int16", (3, 4, 5))
    check(ad.permute_dims(on(x), (2, 0, 1)), np.transpose(x, (2, 0, 1)))
    check(ad.broadcast_to(on(x[:, :1]), (2, 3, 4, 5)), np.broadcast_to(x[:, :1], (2, 3, 4, 5)))
    t = on(x)
    for key in [(1,), (slice(None, None, -1), 2), (Ellipsis, slice(1, 4, 2)), (None, 0, slice(None), None),
                (slice(5, 1, -2), slice(None), -1), (slice(2, 2),)]:
        check(t[key], x[key])
    h = sample("float16", (4, 5))
    check(on(h)[::2, ::-1], h[::2, ::-1])


def test_setitem():
    x = sample("float32", (4, 5))
    t = on(x)
    t[1:3, ::2] = on(np.float32([7, 8, 9]))
    t[0] = 5.0
    t[..., -1] = on(np.arange(4, dtype=np.float32))
    want = x.copy()
    want[1:3, ::2] = [7, 8, 9]
    want[0] = 5.0
    want[..., -1] = np.arange(4)
    check(t, want)


@pytest.mark.parametrize("axis", [0, 1, 2, None])
def test_concat(axis):
    xs = [sample("uint8", (2, 3, 4)), sample("uint8", (2, 3, 4)), sample("uint8", (2, 3, 4))]
    if axis is not None:
        shp = list(xs[1].shape)
        shp[axis] = 1
        xs[1] = sample("uint8", tuple(shp))
    want = np.concatenate([x.reshape(-1) for x in xs]) if axis is None else np.concatenate(xs, axis=axis)
    check(ad.concat([on(x) for x in xs], axis=axis), want)


def test_take():
    x = sample("float64", (4, 6))
    idx = np.array([0, -1, 3, 3], np.int64)
    check(ad.take(on(x), on(idx), axis=1), np.take(x, idx, axis=1))
    check(ad.take(on(x), on(idx.astype(np.int32)), axis=0), np.take(x, idx, axis=0))
    with pytest.raises(IndexError, match="out of range"):
        ad.take(on(x), on(np.array([0, 9], np.int64)), axis=1).numpy()


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "float16", "bfloat16", "uint8"])
def test_full_and_arange(dtype):
    value = True if dtype == "bool" else 3 if npd(dtype).kind in "iu" else 2.5
    check(ad.full((3, 5), value, dtype=dtype, device="opencl"), np.full((3, 5), value, dtype=npd(dtype)))
    if dtype != "bool":
        check(ad.arange(2, 17, 3, dtype=dtype, device="opencl"), np.arange(2, 17, 3).astype(npd(dtype)))
    check(ad.arange(0.5, 3.0, 0.25, device="opencl"), (0.5 + 0.25 * np.arange(10)).astype(np.float32))


# --- runtime: cache, dtypes, streams -------------------------------------------------------------------
def test_program_cache_families_and_disk(tmp_path, monkeypatch):
    from anydevice_opencl.runtime import ProgramCache

    rt = ad.device.get_backend("opencl").runtime
    x = on(np.arange(10, dtype=np.int16))
    check(x * x, np.arange(10, dtype=np.int16) ** 2)
    before = dict(rt.programs.stats)
    check(ad.maximum(ad.subtract(x, x), ad.max(x)), np.full(10, 9, np.int16))  # one generic program has them all
    assert rt.programs.stats["builds"] == before["builds"]
    # the disk layer (off on PoCL, which caches builds itself): a spec outside any family builds alone
    monkeypatch.setenv("ANYDEVICE_OPENCL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ProgramCache, "keeps_binaries", staticmethod(lambda dev: True))
    spec = ("ew", "add", ("int16", "int16"), "int16", "ss")
    first, second = ProgramCache(), ProgramCache()
    assert first.kernel(rt, 0, spec).kernel.function_name == "ew_add_int16_int16_int16_ss"
    assert first.stats["builds"] == 1 and len(list(tmp_path.glob("*.bin"))) == 1
    second.kernel(rt, 0, spec)
    assert second.stats == {"memory_hits": 0, "disk_hits": 1, "builds": 0}
    second.kernel(rt, 0, spec)
    assert second.stats["memory_hits"] == 1


def test_dtype_support_and_refusal(monkeypatch):
    be = ad.device.get_backend("opencl")
    names = {d.name for d in be.runtime.dtypes(0)}
    assert {"bool", "int8", "uint64", "float16", "bfloat16", "float32"} <= names
    assert "complex64" in names
    fp64 = "cl_khr_fp64" in be.runtime.devices[0].extensions
    assert ("float64" in names) == fp64 and ("complex128" in names) == fp64
    monkeypatch.setattr(type(be.runtime), "has_fp64", lambda self, i: False)
    assert not {"float64", "complex128"} & {d.name for d in be.runtime.dtypes(0)}


def test_streams_events_and_properties():
    d = on(np.ones(4, np.float32)).device
    props = ad.device.get_device_properties(d)
    assert props["total_memory"] > 0 and props["compute_units"] >= 1 and "float32" in props["dtypes"]
    s = Stream(d)
    start, end = Event(d), Event(d)
    with stream_guard(s):
        start.record()
        y = on(np.arange(1000, dtype=np.float32))
        z = y * 2.0
        end.record()
    end.synchronize()
    assert end.query() and start.elapsed_time(end) >= 0.0
    s2 = Stream(d)
    s2.wait_event(end)
    s2.synchronize()
    check(z, np.arange(1000, dtype=np.float32) * 2)
    free, total = ad.device.get_backend("opencl").memory_info(0)
    assert 0 <= free <= total


def test_environment_hook_and_no_platform(monkeypatch):
    from anydevice_opencl import plugin, runtime

    env = plugin.anydevice_environment("opencl")
    assert env["pyopencl"] and env["devices"]
    monkeypatch.setattr(runtime.cl, "get_platforms", lambda: [])
    with pytest.raises(ad.DeviceUnavailableError, match="found no OpenCL platform") as e:
        runtime.discover()
    assert "apt-get install pocl-opencl-icd" in e.value.hint and "conda-forge" in e.value.hint
    monkeypatch.undo()
    monkeypatch.setenv("ANYDEVICE_OPENCL_PLATFORM", "no-such-vendor")
    with pytest.raises(ad.DeviceUnavailableError, match="matches no OpenCL platform"):
        runtime.discover()
    first = runtime.cl.get_platforms()[0]
    monkeypatch.setenv("ANYDEVICE_OPENCL_PLATFORM", first.version)  # the version string selects too
    assert runtime.discover()[0].platform.version == first.version


# --- failure classifier (sample driver messages; no device needed) ---------------------------------------
POCL30 = "OpenCL 3.0 PoCL 3.0-rc2  Linux, Release, RELOC, LLVM 14.0.6, SLEEF, DISTRO, POCL_DEBUG"
ZEN_CPUINFO = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9B45 128-Core Processor\nflags\t\t: fpu\n"
VALID_CPUS = "note: valid target CPU values are: " + ", ".join(f"cpu{i}" for i in range(80))
ZEN_BUILD = (
    "clBuildProgram failed: BUILD_PROGRAM_FAILURE - clBuildProgram failed: BUILD_PROGRAM_FAILURE - "
    "clBuildProgram failed: BUILD_PROGRAM_FAILURE\n\nBuild on <pyopencl.Device 'pthread-AMD EPYC 9B45 128-Core "
    "Processor' on 'Portable Computing Language' at 0x55d0c3a0>:\n\nerror: unknown target CPU 'generic'\n"
    f"{VALID_CPUS}\nDevice pthread-AMD EPYC 9B45 128-Core Processor failed to build the program, log: "
    "error: unknown target CPU 'generic'\n\n(options: -I /venv/site-packages/pyopencl/cl)")
SYNTAX_BUILD = (
    "clBuildProgram failed: BUILD_PROGRAM_FAILURE - clBuildProgram failed: BUILD_PROGRAM_FAILURE\n\n"
    "Build on <pyopencl.Device 'pthread-Intel(R) Xeon(R) Processor' on 'Portable Computing Language' at 0x5565>:\n\n"
    "warning: /home/u/.cache/pocl/kcache/tempfile_iiFE0c.cl:3:9: unused variable 'k'\n"
    "error: /home/u/.cache/pocl/kcache/tempfile_iiFE0c.cl:1:44: use of undeclared identifier 'y'\n"
    "error: /home/u/.cache/pocl/kcache/tempfile_iiFE0c.cl:2:28: expected expression\n"
    "Device pthread-Intel(R) Xeon(R) Processor failed to build the program\n\n(options: -I /x/pyopencl/cl)")


@no_device
def test_diagnose_unknown_target_cpu():
    cpu = diagnose.cpu_model("pthread-AMD EPYC 9B45", cpuinfo=ZEN_CPUINFO)
    f = diagnose.classify(ZEN_BUILD, POCL30, cpu)
    assert f.kind == "unknown-cpu"
    assert f.lines[0] == "error: unknown target CPU 'generic'" and len(f.lines) == 2
    assert f.lines[1].startswith("note: valid target CPU values are: cpu0") and len(f.lines[1]) == diagnose.MAX_LINE
    assert f.hint.startswith("PoCL 3.0-rc2 (LLVM 14) does not know this CPU (AMD EPYC 9B45 128-Core Processor); "
                             "install a newer PoCL, e.g. your distribution's pocl-opencl-icd >= 3.1")
    assert "apt-get install pocl-opencl-icd" in f.hint and "conda install -c conda-forge pocl" in f.hint


@no_device
def test_diagnose_compiler_error_lines_and_other_classes():
    f = diagnose.classify(SYNTAX_BUILD, POCL30, source="/c/anydevice/opencl-failed/ab12.cl")
    assert f.kind == "compiler" and "update the driver" in f.hint
    assert f.lines == ["error: /c/anydevice/opencl-failed/ab12.cl:1:44: use of undeclared identifier 'y'",
                       "error: /c/anydevice/opencl-failed/ab12.cl:2:28: expected expression",
                       "warning: /c/anydevice/opencl-failed/ab12.cl:3:9: unused variable 'k'"]
    many = "\n".join(f"error: line {i}" for i in range(20))
    assert diagnose.compiler_lines(many) == [f"error: line {i}" for i in range(diagnose.MAX_LINES)]
    oor = diagnose.classify("clEnqueueNDRangeKernel failed: OUT_OF_RESOURCES", POCL30)
    assert oor.kind == "out-of-resources" and oor.lines == [] and "free memory" in oor.hint
    none = diagnose.classify("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")
    assert none.kind == "no-platform" and "OpenCL ICD" in none.hint and "pocl-opencl-icd" in none.hint


@no_device
def test_diagnose_versions_and_cpu_model():
    assert diagnose.pocl_version(POCL30) == ("3.0-rc2", "14")
    assert diagnose.pocl_version("OpenCL 3.0 PoCL 3.1+debian  Linux, None+Asserts, RELOC, SPIR, LLVM 15.0.6") == (
        "3.1+debian", "15")
    assert diagnose.pocl_version("OpenCL 1.2 pocl 1.8, None+Asserts, LLVM 11.1.0, RELOC") == ("1.8", "11")
    assert diagnose.pocl_version("OpenCL 3.0 CUDA 12.4.89") == (None, None)
    f = diagnose.classify("error: unknown target CPU 'generic'", "OpenCL 3.0 CUDA 12.4.89", "")
    assert f.hint.startswith("PoCL (unknown version) does not know this CPU (model unknown)")
    assert diagnose.cpu_model("pthread-AMD Ryzen 9 7950X", cpuinfo="") == "AMD Ryzen 9 7950X"


# --- admission: the probe ------------------------------------------------------------------------------
def test_probe_admits_working_devices():
    be = ad.device.get_backend("opencl")
    assert be.count >= 1 and not {u.physical for u in be.unusable} & set(be.physical)
    for i, p in enumerate(be.physical):
        be.runtime.probe(p)  # raises for a device that cannot build and run the kernel
        check(on(np.arange(5, dtype=np.int32)).to(f"opencl:{i}") * 3, np.arange(5, dtype=np.int32) * 3)


def test_probe_failure_names_the_device_and_says_what_to_do(monkeypatch):
    from anydevice_opencl import runtime

    rt = ad.device.get_backend("opencl").runtime
    p = ad.device.get_backend("opencl").physical[0]
    dev = rt.devices[p]
    monkeypatch.setattr(runtime, "PROBE_SOURCE", "#error unknown target CPU 'generic'\n" + runtime.PROBE_SOURCE)
    with pytest.raises(ad.DeviceUnavailableError) as e:
        rt.probe(p)
    reason = str(e.value)
    assert reason.startswith(f"opencl:{p} ({dev.name.strip()} on {dev.platform.name.strip()}, "
                             f"driver {dev.driver_version.strip()}) cannot build and run a test kernel: ")
    assert "unknown target CPU 'generic'" in reason and "Build on <" not in reason
    pocl, llvm = diagnose.pocl_version(dev.platform.version)
    if pocl:
        assert e.value.hint.startswith(f"PoCL {pocl} (LLVM {llvm}) does not know this CPU ({diagnose.cpu_model(dev.name)})")
    assert "pocl-opencl-icd" in e.value.hint


PROBE_CHILD = """
import json, anydevice as ad
from anydevice_opencl import runtime
good, real = runtime.PROBE_SOURCE, runtime.OpenClRuntime.probe
def probe(self, index):  # physical device 0's compiler cannot build anything
    runtime.PROBE_SOURCE = "#error unknown target CPU 'generic'\\n" + good if index == 0 else good
    return real(self, index)
runtime.OpenClRuntime.probe = probe
be = ad.device.get_backend("opencl")
x = (ad.arange(4, dtype=ad.int32, device="opencl:0") * 2).tolist()
print(json.dumps({"count": be.count, "total": be.runtime.device_count(), "physical": be.physical, "x": x,
                  "unusable": ad.device.unusable_devices("opencl")}))
"""


def test_unusable_device_leaves_the_visible_set():
    """Two PoCL devices (POCL_DEVICES), the first rejected: opencl:0 is the second and works."""
    import json

    if "portable computing language" not in ad.device.get_backend("opencl").runtime.devices[0].platform.name.lower():
        pytest.skip("needs PoCL first (POCL_DEVICES makes two devices)")
    env = {**os.environ, "POCL_DEVICES": "pthread basic", "ANYDEVICE_OPENCL_PLATFORM": "",
           "ANYDEVICE_OPENCL_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, "-c", PROBE_CHILD], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["count"] == out["total"] - 1 and out["physical"][0] == 1 and out["x"] == [0, 2, 4, 6]
    [u] = out["unusable"]
    assert u["physical_index"] == 0 and u["reason"].startswith("opencl:0 (")
    assert "unknown target CPU 'generic'" in u["reason"] and "does not know this CPU" in u["hint"]


# --- build failures outside the probe -----------------------------------------------------------------
BROKEN = "/* generated-marker-7f3a */\n__kernel void k(__global float *x) { x[0] = anydevice_undefined_name; }\n"


def test_build_failure_shows_compiler_lines_and_saves_the_source(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    rt = ad.device.get_backend("opencl").runtime
    p = ad.device.get_backend("opencl").physical[0]
    with pytest.raises(ad.DeviceError) as e:
        rt.build(p, BROKEN, device="opencl:0")
    msg, dev = str(e.value), rt.devices[p]
    assert msg.startswith(f"opencl:0 ({dev.name.strip()} on {dev.platform.name.strip()}, driver "
                          f"{dev.driver_version.strip()}) failed to build a generated program:")
    assert "anydevice_undefined_name" in msg and "generated-marker-7f3a" not in msg and "Build on <" not in msg
    [saved] = (tmp_path / "anydevice" / "opencl-failed").glob("*.cl")
    assert saved.read_text() == BROKEN and f"source saved as {saved}" in msg
    assert len(msg.splitlines()) <= diagnose.MAX_LINES + 3


def test_program_cache_build_failure_names_the_user_visible_device(tmp_path, monkeypatch):
    from anydevice_opencl import codegen
    from anydevice_opencl.runtime import ProgramCache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(codegen, "program_source", lambda specs, fp64: BROKEN)
    be = ad.device.get_backend("opencl")
    spec = ("ew", "add", ("int16", "int16"), "int16", "ss")
    with pytest.raises(ad.DeviceError, match=r"^opencl:0 \(.*failed to build a generated program:\n.*anydevice_undefined_name"):
        ProgramCache().kernel(be.runtime, be.physical[0], spec, be.devices[0])


# --- out of memory before the driver aborts -----------------------------------------------------------
OOM_CHILD = """
import resource, sys, anydevice as ad
which = sys.argv[1]
ad.ones(4, device="opencl:0").numpy()  # the driver is up
if which == "host":  # leave the process 256 MiB of address space, then ask for 512 MiB
    size = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (size + (256 << 20), resource.getrlimit(resource.RLIMIT_AS)[1]))
    n = 1 << 28
else:
    n = 1 << 31
try:
    ad.ones(n, dtype=ad.uint16, device="opencl:0").numpy()
    print("allocated")
except ad.OutOfMemoryError as e:
    print("OutOfMemoryError:", e)
if which == "host":
    print("after:", ad.arange(1 << 20, dtype=ad.int32, device="opencl:0")[-1].item())
"""


@pytest.mark.parametrize("which", ["huge", "host"])
def test_allocation_beyond_what_can_be_backed_is_out_of_memory(which):
    """Under a 4 GiB address-space limit, 4 GiB (huge) or more than is left (host) is a clean
    OutOfMemoryError, not a driver abort; smaller allocations still work afterwards."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))

    r = subprocess.run([sys.executable, "-c", OOM_CHILD, which], capture_output=True, text=True, timeout=120,
                       preexec_fn=limit)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert r.stdout.startswith("OutOfMemoryError: Cannot allocate ") and "on opencl:0" in r.stdout
    if which == "host":
        assert r.stdout.splitlines()[-1] == f"after: {(1 << 20) - 1}"
