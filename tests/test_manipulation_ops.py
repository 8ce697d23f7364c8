"""The Array API 2024.12 manipulation and creation functions added to the registry (roll, tile,
repeat, diff, tensordot, tril, triu) and the namespace functions over them (meshgrid,
broadcast_arrays, unstack, moveaxis, diff's prepend/append, repeat with a Tensor): values against
numpy on every device, gradients against the reference, clear errors, and dtype keeping in the
matmul decomposition on a backend with primitives only."""
from __future__ import annotations

import numpy as np
import pytest
from test_sorting_sets import primitives_only  # noqa: F401 - the fixture: a backend with only the primitives' kernels

import anydevice as ad
from anydevice.ops.registry import get_op

DEVICES = ["cpu", "npu:0", "xpu:0", "dcu:0", "opencl:0"]
rng = np.random.default_rng(7)
X = rng.standard_normal((3, 4, 5)).astype(np.float32)
#: (op, inputs, attrs): each op on a 3-D float32 tensor (tensordot on two)
CASES = [
    ("roll", [X], {"shift": (2, -1), "axis": (0, 2)}), ("roll", [X], {"shift": 7}),
    ("tile", [X], {"repetitions": (2, 1, 1, 2)}), ("repeat", [X], {"repeats": 3, "axis": 1}),
    ("repeat", [X], {"repeats": 2}), ("diff", [X], {"axis": 1, "n": 2}), ("diff", [X], {}),
    ("tensordot", [X, X[0].T.copy()], {"axes": ((1, 2), (1, 0))}), ("tensordot", [X, X[:1]], {"axes": 0}),
    ("tril", [X], {"k": 1}), ("triu", [X], {"k": -1}),
]


def _ids(c):
    return f"{c[0]}-{c[2]}"


def _call(name, tensors, attrs):
    """``anydevice.<name>`` with its positional-only attributes passed by position."""
    posonly = list(get_op(name).schema)[:get_op(name).positions[0]]
    return getattr(ad, name)(*tensors, *[attrs[k] for k in posonly], **{k: v for k, v in attrs.items() if k not in posonly})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_values_against_numpy_on_every_device(device, case):
    name, arrays, attrs = case
    op = get_op(name)
    got = _call(name, [ad.asarray(a, device=device) for a in arrays], attrs)
    want = op.reference(*[a.astype(np.float64) for a in arrays], **op.canon([a.shape for a in arrays], {**op.attrs, **attrs})
                        if op.canon else {**op.attrs, **attrs})
    assert str(got.device).split(":")[0] == device.split(":")[0] and got.dtype is ad.float32
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_gradients_are_the_transposed_linear_map(case):
    """Every one of these ops is linear in each input: the gradient of sum(f(x) * w) is f's
    transpose applied to w, which the reference gives element by element (exact in float64)."""
    name, arrays, attrs = case
    op = get_op(name)
    xs = [ad.asarray(a.astype(np.float64)) for a in arrays]
    for x in xs:
        x.requires_grad = True
    out = _call(name, xs, attrs)
    w = rng.standard_normal(out.shape)
    ad.sum(out * ad.asarray(w)).backward()
    base = [a.astype(np.float64) for a in arrays]
    cattrs = op.canon([a.shape for a in arrays], {**op.attrs, **attrs}) if op.canon else {**op.attrs, **attrs}
    for k, x in enumerate(xs):
        want = np.empty(base[k].size)
        for i in range(base[k].size):  # the other inputs fixed, input k the i-th unit vector
            unit = np.zeros(base[k].size)
            unit[i] = 1.0
            args = [unit.reshape(base[k].shape) if j == k else b for j, b in enumerate(base)]
            want[i] = np.sum(op.reference(*args, **cattrs) * w)
        np.testing.assert_allclose(x.grad.numpy().ravel(), want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("device", ["cpu", "npu:0", "opencl:0"])
def test_meshgrid_broadcast_arrays_unstack(device):
    a, b, c = (np.arange(n, dtype=np.float32) for n in (2, 3, 4))
    ta, tb, tc = (ad.asarray(v, device=device) for v in (a, b, c))
    for indexing in ("xy", "ij"):
        got = ad.meshgrid(ta, tb, tc, indexing=indexing)
        assert isinstance(got, list)
        for g, w in zip(got, np.meshgrid(a, b, c, indexing=indexing)):
            assert g.shape == w.shape and np.array_equal(g.numpy(), w)
    assert ad.meshgrid() == [] and ad.meshgrid(ta)[0].tolist() == a.tolist()
    x, y = ad.broadcast_arrays(ad.asarray(np.ones((2, 1), np.float32), device=device), tc)
    assert x.shape == y.shape == (2, 4) and np.array_equal(y.numpy(), np.broadcast_to(c, (2, 4)))
    t = ad.asarray(X, device=device)
    for axis in (0, 1, -1):
        parts = ad.unstack(t, axis=axis)
        assert isinstance(parts, tuple) and len(parts) == X.shape[axis]
        assert all(np.array_equal(p.numpy(), np.take(X, i, axis=axis)) for i, p in enumerate(parts))


def test_namespace_functions_errors():
    a = ad.arange(3)
    with pytest.raises(ValueError, match=r"meshgrid\(\): indexing must be 'xy' or 'ij', not 'xz'"):
        ad.meshgrid(a, indexing="xz")
    with pytest.raises(ValueError, match=r"meshgrid\(\): every array must be 1-D; argument 1 has shape \(2, 2\)"):
        ad.meshgrid(a, ad.ones((2, 2), dtype=ad.int64))
    with pytest.raises(TypeError, match=r"meshgrid\(\): every array must have one dtype; got int64 and float32"):
        ad.meshgrid(a, ad.ones(2))
    with pytest.raises(ValueError, match=r"different devices, cpu:0 and npu:0"):
        ad.broadcast_arrays(a, ad.arange(3, device="npu:0"))
    with pytest.raises(ValueError, match=r"broadcast_arrays: shapes \(3,\), \(2,\) cannot be broadcast"):
        ad.broadcast_arrays(a, ad.arange(2))
    with pytest.raises(ValueError, match=r"unstack\(\): axis 1 is out of range"):
        ad.unstack(a, axis=1)
    with pytest.raises(TypeError, match=r"unstack\(\): x must be a Tensor"):
        ad.unstack([1, 2])


def test_diff_prepend_append_and_errors():
    x = np.asarray([[1.0, 4.0, 9.0], [2.0, 3.0, 5.0]], np.float32)
    p, q = np.zeros((2, 1), np.float32), np.full((2, 2), 7.0, np.float32)
    got = ad.diff(ad.asarray(x), prepend=ad.asarray(p), append=ad.asarray(q), n=2)
    assert np.array_equal(got.numpy(), np.diff(x, n=2, prepend=p, append=q))
    got = ad.diff(ad.asarray(x), axis=0, append=ad.asarray(x[:1]))
    assert np.array_equal(got.numpy(), np.diff(x, axis=0, append=x[:1]))
    assert ad.diff(ad.asarray(x), n=0).tolist() == x.tolist() and ad.diff(ad.asarray(x), n=5).shape == (2, 0)
    with pytest.raises(ValueError, match=r"diff\(\): prepend has shape \(3, 1\); it must match x's shape \(2, 3\) "
                                         r"except along axis 1"):
        ad.diff(ad.asarray(x), prepend=ad.zeros((3, 1)))
    with pytest.raises(ValueError, match=r"diff\(\): axis -1 is out of range for an array of 0 dimension\(s\) \(a 0-d array has no axes\)"):
        ad.diff(ad.asarray(1.0))
    with pytest.raises(TypeError, match=r"diff\(\): append must be None or a Tensor, not list"):
        ad.diff(ad.asarray(x), append=[1.0])
    with pytest.raises(ValueError, match=r"diff\(\): n must be a non-negative int"):
        ad.diff(ad.asarray(x), n=-1)


def test_repeat_int_and_tensor():
    x = ad.asarray([[1, 2], [3, 4]])
    assert ad.repeat(x, 2, axis=0).tolist() == np.repeat([[1, 2], [3, 4]], 2, axis=0).tolist()
    assert ad.repeat(x, ad.asarray([1, 0, 2, 1])).tolist() == np.repeat([1, 2, 3, 4], [1, 0, 2, 1]).tolist()
    assert ad.repeat(x, ad.asarray([2, 1]), axis=1).tolist() == np.repeat([[1, 2], [3, 4]], [2, 1], axis=1).tolist()
    with pytest.raises(ValueError, match=r"repeat\(\): repeats must be a non-negative int, not int -1"):
        ad.repeat(x, -1)
    with pytest.raises(TypeError, match=r"repeat\(\): too many positional arguments; the signature is repeat\(x: .Tensor., repeats"):
        ad.repeat(x, 2, 0)


def test_op_errors_name_the_argument():
    x = ad.ones((2, 3))
    with pytest.raises(ValueError, match=r"roll\(\): shift \(1, 2\) and axis \(0,\) must have as many elements"):
        ad.roll(x, (1, 2), axis=0)
    with pytest.raises(ValueError, match=r"roll\(\): shift \(1, 2\) needs a tuple axis"):
        ad.roll(x, (1, 2))
    with pytest.raises(TypeError, match=r"roll\(\): shift must be an int or a tuple of ints, not float 1.5"):
        ad.roll(x, 1.5)
    with pytest.raises(ValueError, match=r"tile\(\): repetitions \(2, -1\) must be non-negative"):
        ad.tile(x, (2, -1))
    with pytest.raises(TypeError, match=r"tile\(\): repetitions must be a tuple of ints, not int 2"):
        ad.tile(x, 2)
    with pytest.raises(ValueError, match=r"tensordot\(\): axis 1 of x1 \(2, 3\) and axis 0 of x2 \(2, 3\) differ in size"):
        ad.tensordot(x, x, axes=1)
    with pytest.raises(ValueError, match=r"tensordot\(\): axes must be a non-negative int or a pair of sequences"):
        ad.tensordot(x, x, axes=-1)
    with pytest.raises(ValueError, match=r"tril\(\): x must have at least 2 dimensions"):
        ad.tril(ad.ones(3))
    with pytest.raises(TypeError, match=r"triu\(\): k must be an int, not float 0.5"):
        ad.triu(x, k=0.5)


def test_integer_dtypes_and_tril_of_ints():
    a = rng.integers(-5, 5, size=(3, 4)).astype(np.int8)
    got = ad.tril(ad.asarray(a), k=-1)
    assert got.dtype is ad.int8 and np.array_equal(got.numpy(), np.tril(a, -1))
    t = ad.tensordot(ad.asarray(a), ad.asarray(a), axes=((0,), (0,)))
    assert t.dtype is ad.int8 and np.array_equal(t.numpy(), np.tensordot(a, a, axes=((0,), (0,))).astype(np.int8))


def test_int8_matmul_keeps_its_dtype_on_a_primitives_only_backend(primitives_only):  # noqa: F811
    a = rng.integers(-100, 100, size=(3, 5)).astype(np.int8)
    b = rng.integers(-100, 100, size=(5, 2)).astype(np.int8)
    got = ad.matmul(ad.asarray(a, device=primitives_only), ad.asarray(b, device=primitives_only))
    assert got.dtype is ad.int8  # the decomposition's sum no longer widens to int64
    want = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int8)  # wraps modulo 2**8, as numpy's int8 matmul
    assert np.array_equal(got.numpy(), want) and np.array_equal(want, a @ b)
    v = ad.vecdot(ad.asarray(a, device=primitives_only), ad.asarray(a, device=primitives_only))
    assert v.dtype is ad.int8 and np.array_equal(v.numpy(), np.sum(a * a, axis=-1, dtype=np.int8))


def test_moveaxis_matches_numpy_for_tuples_of_axes():
    x = np.arange(120.0).reshape(2, 3, 4, 5)
    t = ad.asarray(x)
    for src, dst in [((0, 1), (2, 0)), ((0, -1), (-1, 0)), ((3, 1, 0), (0, 1, 2)), (2, 0), ((), ())]:
        assert np.array_equal(ad.moveaxis(t, src, dst).numpy(), np.moveaxis(x, src, dst)), (src, dst)
    with pytest.raises(ValueError, match=r"moveaxis\(\): source \(0, 1\) and destination \(0,\) must name as many axes"):
        ad.moveaxis(t, (0, 1), (0,))
    with pytest.raises(ValueError, match=r"moveaxis\(\): source \(0, 0\) repeats an axis"):
        ad.moveaxis(t, (0, 0), (1, 2))


@pytest.mark.parametrize("device", ["cpu", "opencl:0", "dcu:0"])
def test_vecdot_complex_and_axis_rules(device):
    a = (rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3))).astype(np.complex64)
    b = (rng.standard_normal((3,)) + 1j * rng.standard_normal((3,))).astype(np.complex64)
    got = ad.vecdot(ad.asarray(a, device=device), ad.asarray(b, device=device))
    np.testing.assert_allclose(got.numpy(), np.sum(np.conj(a) * b, axis=-1), rtol=1e-5)
    x = ad.ones((4, 3, 2), device=device)
    assert ad.vecdot(x, ad.ones((3, 1), device=device), axis=-2).shape == (4, 2)
    with pytest.raises(ValueError, match=r"vecdot\(\): axis 0 is not allowed for inputs of shapes \(4, 3, 2\) and "
                                         r"\(3, 2\) \(allowed: -2..-1"):
        ad.vecdot(x, ad.ones((3, 2), device=device), axis=0)
    with pytest.raises(ValueError, match=r"vecdot\(\): axis -1 has different sizes in \(2, 3\) and \(2, 1\)"):
        ad.vecdot(ad.ones((2, 3), device=device), ad.ones((2, 1), device=device))


@pytest.mark.parametrize("device", ["cpu", "npu"])
def test_diff_with_n_beyond_the_axis_is_empty_at_once(device):
    """A huge n (as a fuzzer draws) gives the empty result n = len gives, without looping n times."""
    import time

    t0 = time.perf_counter()
    r = ad.diff(ad.ones((3, 4), device=device), axis=0, n=10 ** 12)
    assert r.shape == (0, 4) and time.perf_counter() - t0 < 5
