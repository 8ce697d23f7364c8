"""The cpu backend's C kernels (``anydevice_cpu.native``) against float64 references and the
numpy kernels they stand in for, and the numpy path that runs without them."""
import os
import subprocess
import sys

import numpy as np
import pytest

import anydevice as ad
from anydevice_cpu import kernels as K
from anydevice_cpu import kernels_train as KT
from anydevice_cpu import native

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason="the cpu backend's C kernels are not built")
F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
# rows shorter than the 16 partial sums, of 16, longer, and longer than a block of 4096
SHAPES = [(1,), (5,), (4, 4), (3, 16), (7, 33), (64, 64), (256, 10), (2, 3, 17), (2, 5000), (4097,)]


def _ref(x, log):
    d = x.astype(np.float64)
    d = d - d.max(-1, keepdims=True)
    s = np.exp(d).sum(-1, keepdims=True)
    return d - np.log(s) if log else np.exp(d) / s


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_matches_float64_and_numpy_kernel(shape, log):
    x = (np.random.default_rng(len(shape) + shape[-1]).standard_normal(shape) * 4).astype(np.float32)
    got = native.softmax(x, x.ndim - 1, log)
    assert got is not None and got.dtype == F32 and got.shape == x.shape
    np.testing.assert_allclose(got, _ref(x, log), rtol=2e-6, atol=2e-6 if log else 1e-30)  # log: rounding of x - max
    numpy_kernel = (K._log_softmax if log else K._softmax)(x, x.ndim - 1)
    np.testing.assert_allclose(got, numpy_kernel, rtol=1e-5, atol=1e-6 if log else 1e-30)


def test_softmax_special_values_follow_the_numpy_kernel():
    rows = np.array([[0.0, np.nan, 1.0], [np.inf, 0.0, 1.0], [-np.inf, 0.0, 1.0], [-np.inf, -np.inf, -np.inf],
                     [88.0, 0.0, -200.0], [-100.0, -100.0, -190.0], [3e38, -3e38, 0.0]], np.float32)
    for log, numpy_kernel in ((False, K._softmax), (True, K._log_softmax)):
        with np.errstate(all="ignore"):
            want = numpy_kernel(rows, 1)
        np.testing.assert_array_equal(np.isnan(native.softmax(rows, 1, log)), np.isnan(want))
        np.testing.assert_allclose(native.softmax(rows, 1, log), want, rtol=1e-6, atol=0)


def test_exp_rounds_subnormal_results():
    # one element at 0 and one far below: exp(-k) for k in the float32 subnormal range
    ks = np.arange(87.0, 104.0, 0.37, dtype=np.float32)
    rows = np.stack([np.zeros_like(ks), -ks], axis=1)
    got = native.softmax(rows, 1, False)[:, 1].astype(np.float64)
    want = np.exp(-ks.astype(np.float64))
    ulp = 2.0 ** -149
    assert np.all(np.abs(got - want) <= np.maximum(2 * ulp, 4e-7 * want))


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape", [(4, 4), (64, 64), (256, 10), (3, 5000)])
def test_softmax_grad_matches_numpy_kernel(shape, log):
    rng = np.random.default_rng(shape[-1])
    x = rng.standard_normal(shape).astype(np.float32)
    y = (K._log_softmax if log else K._softmax)(x, x.ndim - 1)
    g = rng.standard_normal(shape).astype(np.float32)
    got = native.softmax_grad(g, y, y.ndim - 1, log)
    want = KT.log_softmax_grad(g, y, y.ndim - 1) if log else KT.softmax_grad(g, y, y.ndim - 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    ones = np.broadcast_to(np.float32(1), shape)  # a sum's gradient: broadcast, not contiguous
    np.testing.assert_allclose(native.softmax_grad(ones, y, y.ndim - 1, log),
                               (np.ones(shape, np.float32) - np.exp(y) * shape[-1]) if log else np.zeros(shape),
                               atol=2e-5)


def test_kernels_decline_what_they_do_not_do():
    x = np.ones((4, 6), np.float32)
    assert native.softmax(x.T, 1, False) is None  # not C-contiguous
    assert native.softmax(x, 0, False) is None  # not the last axis
    assert native.softmax(x.astype(np.float64), 1, False) is None
    assert native.softmax(np.ones((3, 0), np.float32), 1, False) is None
    assert native.convert(x, np.dtype(np.float64)) is None and native.convert(x[:2, :2], F16) is None  # few elements
    big = np.arange(400, dtype=np.float32).reshape(20, 20)
    assert np.array_equal(native.convert(big.T, F16), big.T.astype(np.float16))  # strided: copied first


def test_float16_to_float32_is_exact_for_every_value():
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).reshape(256, 256)
    got = native.convert(h, F32)
    want = h.astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
    portable = np.empty_like(got)  # the loop of CPUs without F16C
    native._c.to_f32(h, portable, True)
    assert np.array_equal(portable[~nan].view(np.uint32), want[~nan].view(np.uint32))


def test_float32_to_float16_rounds_as_numpy():
    bits = np.arange(0, 2 ** 32, 65537 * 3, dtype=np.uint64).astype(np.uint32)
    edges = np.array([0x477FEFFF, 0x477FF000, 0x477FE000, 0x33000000, 0x33000001, 0x387FFFFF, 0x38800000,
                      0x38FFFFFF, 0x7F800000, 0x7FC00000, 0x00000001, 0x3F801000, 0x3F803000], np.uint32)
    f = np.concatenate([bits, edges, edges | 0x80000000]).view(np.float32)
    f = np.concatenate([f, np.zeros(-f.size % 8, np.float32)])
    with np.errstate(all="ignore"):
        want = f.astype(np.float16)
    got = native.convert(f, F16)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))
    portable = np.empty_like(got)  # the loop of CPUs without F16C rounds the same
    native._c.to_f16(f, portable, True)
    assert np.array_equal(portable[~nan].view(np.uint16), want[~nan].view(np.uint16))


def test_ops_use_them_and_differentiate():
    x = ad.asarray(np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)).requires_grad_()
    y = ad.softmax(x, axis=-1)
    np.testing.assert_allclose(y.numpy(), _ref(x.numpy(), False), rtol=2e-6)
    ad.sum(y * y).backward()
    p = y.numpy().astype(np.float64)
    g = 2 * p
    np.testing.assert_allclose(x.grad.numpy(), p * (g - (g * p).sum(-1, keepdims=True)), atol=1e-6)
    h = x.detach().astype(ad.float16)
    assert h.dtype == ad.float16 and np.array_equal(h.numpy(), x.numpy().astype(np.float16))


def test_numpy_path_without_them():
    code = ("import numpy as np, anydevice as ad; from anydevice_cpu import native; assert not native.AVAILABLE; "
            "x = ad.asarray(np.arange(12, dtype=np.float32).reshape(3, 4)); "
            "print(float(ad.sum(ad.softmax(x, axis=-1))), x.astype(ad.float16).dtype)")
    env = dict(os.environ, ANYDEVICE_CPU_NATIVE="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["3.0", "anydevice.float16"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reductions_give_numpys_bits(dtype):
    rng = np.random.default_rng(3)
    for n in (1, 7, 8, 9, 16, 127, 128, 129, 1000, 4096, 100_003):  # numpy's pairwise blocking
        x = rng.standard_normal(n).astype(dtype)
        assert native.reduce(x, None, False, native.SUM) == np.add.reduce(x)
    for shape in ((4, 4), (3, 5, 7), (1000, 3), (2, 1, 130)):
        x = rng.standard_normal(shape).astype(dtype)
        for axis in [None, *range(len(shape)), tuple(range(len(shape)))]:
            for keepdims in (False, True):
                for op, ufunc in ((native.SUM, np.add), (native.MAX, np.maximum), (native.MIN, np.minimum)):
                    got = native.reduce(x, axis, keepdims, op)
                    want = ufunc.reduce(x, axis=axis, keepdims=keepdims)
                    assert got.shape == np.shape(want) and got.dtype == x.dtype
                    np.testing.assert_array_equal(got, want)


def test_extremes_return_nan_and_others_decline():
    x = np.arange(40, dtype=np.float32).reshape(4, 10)
    x[2, 3] = np.nan
    assert np.isnan(native.reduce(x, None, False, native.MAX))
    assert np.isnan(native.reduce(x, None, False, native.MIN))
    np.testing.assert_array_equal(np.isnan(native.reduce(x, 1, False, native.MAX)), [False, False, True, False])
    np.testing.assert_array_equal(np.isnan(native.reduce(x, 0, False, native.MIN)), np.arange(10) == 3)
    assert native.reduce(np.zeros((0, 3), np.float32), 0, False, native.MAX) is None  # numpy's error
    assert native.reduce(np.zeros((3, 4, 5), np.float32), (0, 2), False, native.SUM) is None
    assert native.reduce(np.zeros((3, 4), np.int64), None, False, native.SUM) is None
    assert native.reduce(np.zeros((3, 4), np.float32).T, None, False, native.SUM) is None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_var_std_and_mean_of_whole_arrays_give_numpys_bits(dtype):
    rng = np.random.default_rng(5)
    for shape in ((1,), (4, 4), (7,), (9,), (130,), (64, 64), (3, 5, 7), (100_003,)):
        x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
        for correction in (0, 1):
            if correction >= x.size:
                continue
            v = native.var(x, correction)
            assert type(v) is dtype and v == np.var(x, ddof=correction)
            assert K._std(x, None, False, correction) == np.std(x, ddof=correction)
        m = K._mean(x, None, False)
        assert type(m) is dtype and m == np.mean(x)
    assert native.var(np.ones(3, dtype), 3) is None  # no degrees of freedom left: numpy's warning and NaN
    assert native.var(np.ones((3, 4), dtype).T, 0) is None


# --- the kernel call wrappers (plain, quiet, extreme) -------------------------------------------
def _extreme_cases():
    rng = np.random.default_rng(7)
    for dtype in (np.float32, np.float64):
        for shape in [(), (1,), (5,), (4, 4), (3, 1, 5), (2, 3, 70)]:
            x = rng.standard_normal(shape).astype(dtype)
            nd = len(shape)
            for axis in [None, tuple(range(nd))] + [(a,) for a in range(nd)] + list(range(-nd, nd)):
                for keepdims in (False, True):
                    yield x, axis, keepdims


@pytest.mark.parametrize("ufunc, op", [(np.maximum, native.MAX), (np.minimum, native.MIN)])
def test_the_c_extremes_give_numpys_values_shapes_and_dtypes(ufunc, op):
    k = K._extreme(ufunc, op)
    assert type(k).__name__ == "Kernel"  # the C form
    for x, axis, keepdims in _extreme_cases():
        want = ufunc.reduce(x, axis=axis, keepdims=keepdims)
        for got in (k(None, x, axis, keepdims), k(None, x, axis=axis, keepdims=keepdims)):
            assert type(got) is np.ndarray and got.dtype == x.dtype and got.shape == np.shape(want)
            np.testing.assert_array_equal(got, want)


def test_the_c_extremes_hand_everything_else_to_numpy():
    k = K._extreme(np.maximum, native.MAX)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for args, want in [((x.T, None, False), 11.0), ((x.astype(np.float16), 0, False), [8, 9, 10, 11]),
                       ((x.astype(np.int32), None, False), 11), ((x, (0, 1, 0), False), None),
                       ((x, 0, 1), [[8, 9, 10, 11]]), ((x[:, ::2], 1, False), [2, 6, 10]),
                       ((np.array([np.nan, 1.0], np.float32), None, False), np.nan)]:
        if want is None:  # numpy's own error for a repeated axis
            with pytest.raises(ValueError):
                k(None, *args)
            continue
        np.testing.assert_array_equal(k(None, *args), want)
    with pytest.raises(ValueError):  # numpy's: no identity for an empty max
        k(None, np.zeros((0, 3), np.float32), 0, False)


def test_quiet_kernels_silence_floating_point_warnings_and_restore_the_state():
    import warnings

    k = K._ufunc_kernel(np.multiply, False)
    assert type(k).__name__ == "Kernel"
    big = np.full(3, 3e38, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isinf(k(None, big, big)).all()  # no RuntimeWarning
        before = np.geterr()
        with pytest.raises(ValueError):  # numpy's error for mismatched shapes, the state restored after it
            k(None, big, np.ones(2, np.float32))
        assert np.geterr() == before
    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        np.multiply(big, big)  # the caller's own state is untouched
    h = K._ufunc_kernel(np.multiply, True)  # float16 inputs: computed in float32 (the generic path)
    a = np.array([300.0, 2.0], np.float16)
    assert h(None, a, a).dtype == np.float16 and h(None, a, a).tolist() == [np.inf, 4.0]


def test_plain_kernels_pass_positions_and_keywords_through():
    seen = []
    k = K._plain(lambda *a, **kw: seen.append((a, kw)) or 5)
    assert type(k).__name__ == "Kernel"
    assert k("ctx", 1, 2, axis=0) == 5 and seen == [((1, 2), {"axis": 0})]
    with pytest.raises(TypeError):
        k()
    np.testing.assert_array_equal(K._TABLE["concat"][0]([np.ones(2), np.zeros((1, 2))], axis=None), [1, 1, 0, 0])


def test_the_c_where_kernel_selects_numpys_bits():
    from anydevice.runtime.devices import get_backend

    k = get_backend("cpu").kernels.lookup("where", ad.float32).fn
    assert type(k).__name__ == "Kernel" and "where" in repr(k)
    rng = np.random.default_rng(8)
    odd = np.array([np.nan, -0.0, np.inf, -np.inf, 1e-45], np.float32)
    odd[0] = np.frombuffer(np.uint32(0x7FC00123).tobytes(), np.float32)[0]  # a NaN payload is kept
    cases = []
    for dt in ("float32", "float64", "float16", "int8", "uint16", "int32", "int64", "bool", "complex64"):
        for shape in ((), (0,), (1,), (7,), (4, 4), (3, 5, 2), (70000,)):
            x = (rng.standard_normal(shape) * 9).astype(dt)
            y = (rng.standard_normal(shape) * 9).astype(dt)
            cases.append((rng.standard_normal(shape) > 0, x, y))
    m = rng.standard_normal((4, 6)) > 0
    a, b = rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal((4, 6)).astype(np.float32)
    cases += [(np.array([True, False, True, False, True]), odd, odd[::-1].copy()),
              (m, a, b[0]), (m[0], a, b), (m, a.T.copy().T, b), (m, a, b.T.copy().T[:, ::-1]),  # broadcasts, strides
              (m.astype(np.int8), a, b), (m, a, b.astype(np.float64)), (m, a.astype(">f4"), b.astype(">f4")),
              (m, np.float32(2), b)]
    for c, x, y in cases:
        got, want = k(None, c, x, y), np.where(c, x, y)
        assert type(got) is np.ndarray and got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()
    with pytest.raises(ValueError):  # numpy's error for shapes that do not broadcast
        k(None, m, a, np.ones(5, np.float32))


def test_the_c_astype_kernel_is_the_python_one():
    k = K._TABLE["astype"][0]
    assert type(k).__name__ == "Kernel"
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((70, 33)) * 1e3).astype(np.float32)
    x[0, :4] = [np.nan, np.inf, -np.inf, 7e4]  # float16 overflows to inf
    cases = [(x, ad.float16), (K._astype(None, x, ad.float16), ad.float32), (x.T, ad.float16),
             (x[:2, :3], ad.float16), (x, ad.int32), (x, ad.bfloat16), (x, ad.float64),
             (x.astype(np.float64), ad.float16), (np.float32(2.5), ad.float16), (x.astype(">f4"), ad.float16)]
    for a, d in cases:
        for got in (k(None, a, d), k(None, a, dtype=d, copy=True)):
            want = K._astype(None, a, d)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)



def test_the_matmul_kernel_gives_numpys_bits_without_warnings():
    import warnings

    from anydevice.runtime.devices import get_backend

    k = get_backend("cpu").kernels.lookup("matmul", ad.float32).fn
    rng = np.random.default_rng(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for dt in (np.float32, np.float64, np.float16, np.int32):
            for m, n, p in [(1, 1, 1), (4, 4, 4), (3, 5, 7), (64, 64, 64), (256, 64, 10), (1, 300, 1)]:
                a = (rng.standard_normal((m, n)) * 3).astype(dt)
                b = (rng.standard_normal((n, p)) * 3).astype(dt)
                for x, y in [(a, b), (np.asfortranarray(a), b), (a, a.T)]:
                    if x.shape[1] != y.shape[0]:
                        continue
                    want = K._ufunc_kernel(np.matmul, True)(None, x, y)
                    got = k(None, x, y)
                    assert got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8))
        big = np.full((4, 4), 3e38, np.float32)
        assert np.isinf(k(None, big, big)).all()  # overflow: inf, no RuntimeWarning
        batch = rng.standard_normal((2, 3, 4)).astype(np.float32)
        np.testing.assert_array_equal(k(None, batch, batch[0].T.copy()), np.matmul(batch, batch[0].T.copy()))


def test_the_c_concat_kernel_is_numpys():
    from anydevice.runtime.devices import get_backend

    k = get_backend("cpu").kernels.lookup("concat", None).fn
    assert type(k).__name__ == "Kernel"
    rng = np.random.default_rng(1)
    for dt in (np.float32, np.float64, np.float16, np.int8, np.int64, np.complex64, np.bool_):
        a = (rng.standard_normal((3, 4, 5)) * 5).astype(dt)
        b = (rng.standard_normal((3, 2, 5)) * 5).astype(dt)
        for arrays, axis in [([a, a], 0), ([a, b], 1), ([a, b], -2), ([a, a, a], 2), ([a], 0), ([a[:, :0], b], 1),
                             ([a.transpose(1, 0, 2).copy(), a.transpose(1, 0, 2)], 1), ([a, a], None),
                             ((a, a), 2), ([a[0], a[1]], 0)]:
            want = np.concatenate(arrays, axis=axis)
            for got in (k(None, arrays, axis=axis), k(None, arrays, axis)):
                assert got.dtype == want.dtype and got.shape == want.shape
                np.testing.assert_array_equal(got, want)
    for arrays, axis in [([np.ones((2, 3)), np.ones((2, 4))], 0), ([np.ones((2, 3)), np.ones(3)], 0),
                         ([np.ones(3)], 5), ([np.ones(())], 0)]:
        with pytest.raises(Exception) as theirs:
            np.concatenate(arrays, axis=axis)
        with pytest.raises(theirs.type):  # numpy's own error, from numpy
            k(None, arrays, axis=axis)
    mixed = k(None, [np.ones(3, np.float32), np.ones(3)], axis=0)  # numpy's promotion
    assert mixed.dtype == np.float64
    objects = k(None, [np.array([1, None], object)] * 2, axis=0)
    assert objects.tolist() == [1, None, 1, None]
