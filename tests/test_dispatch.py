import warnings

import numpy as np
import pytest
from fakes import FakePlugin, HostRuntime, installed

import anydevice as ad
from anydevice import dispatch
from anydevice.errors import FallbackError


@pytest.fixture
def zero_kernel_device():
    """A backend with the runtime hooks and zero kernels."""
    with installed(FakePlugin(types=("bare",), runtime=HostRuntime(count=2))):
        old = dispatch.set_fallback_mode("silent")
        dispatch.reset_fallback_counts()
        try:
            yield "bare"
        finally:
            dispatch.set_fallback_mode(old)


def _paths(fn):
    seen = []
    obs = lambda op, dev, path, dt, i, o: seen.append((op.name, str(dev), path))  # noqa: E731
    dispatch.add_observer(obs)
    try:
        fn()
    finally:
        dispatch.remove_observer(obs)
    return seen


def _host_add(ctx, out, a, b):
    rt = ctx.runtime
    x = np.empty(a.shape, a.dtype.numpy)
    y = np.empty(b.shape, b.dtype.numpy)
    rt.copy_d2h(ctx.index, x, a.handle, a.byte_offset)
    rt.copy_d2h(ctx.index, y, b.handle, b.byte_offset)
    rt.copy_h2d(ctx.index, out.handle, out.byte_offset, np.ascontiguousarray(np.add(x, y), dtype=out.dtype.numpy))


def _host_neg(ctx, out, a):
    rt = ctx.runtime
    x = np.empty(a.shape, a.dtype.numpy)
    rt.copy_d2h(ctx.index, x, a.handle, a.byte_offset)
    rt.copy_h2d(ctx.index, out.handle, out.byte_offset, np.negative(x))


def test_order_native_then_decomposition_then_fallback():
    plugin = FakePlugin(types=("part",), kernels={"add": (_host_add, True), "negative": (_host_neg, True)})
    with installed(plugin):
        old = dispatch.set_fallback_mode("silent")
        try:
            x = ad.asarray([1.0, 2.0], device="part")
            y = ad.asarray([0.5, 0.5], device="part")
            seen = _paths(lambda: (ad.add(x, y), ad.subtract(x, y), ad.multiply(x, y)))
        finally:
            dispatch.set_fallback_mode(old)
    assert [(n, p) for n, d, p in seen] == [("add", "native"), ("subtract", "decomposed"), ("multiply", "fallback")]
    assert (ad.subtract(ad.asarray([1.0]), ad.asarray([0.5]))).tolist() == [0.5]


def test_decomposition_needing_cpu_falls_back_as_a_whole():
    plugin = FakePlugin(types=("half",), kernels={"add": (_host_add, True)})  # no negative: subtract can't decompose
    with installed(plugin):
        old = dispatch.set_fallback_mode("silent")
        dispatch.reset_fallback_counts()
        try:
            x = ad.asarray([3.0, 2.0], device="half")
            seen = _paths(lambda: ad.subtract(x, x))
            assert seen[-1][2] == "fallback"
            assert ad.fallback_counts() == {("subtract", "half:0"): 1}
            assert ad.subtract(x, ad.ones_like(x)).tolist() == [2.0, 1.0]
        finally:
            dispatch.set_fallback_mode(old)


def test_fallback_warns_once_per_op_then_counts():
    with installed(FakePlugin(types=("warny",))):
        dispatch.reset_fallback_counts()
        x = ad.asarray([1.0, 2.0], device="warny")  # asarray is a copy, not an op: no fallback yet
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for _ in range(3):
                x * x
        msgs = [str(m.message) for m in w if issubclass(m.category, ad.FallbackWarning)]
        assert len(msgs) == 1 and "multiply is not implemented natively on warny" in msgs[0]
        assert w[0].filename == __file__
        assert ad.fallback_counts()[("multiply", "warny:0")] == 3


def test_fallback_error_mode():
    with installed(FakePlugin(types=("strict",))):
        old = dispatch.set_fallback_mode("error")
        try:
            x = ad.asarray([1.0], device="strict")
            with pytest.raises(FallbackError, match="multiply has no kernel on strict:0"):
                x * x
        finally:
            dispatch.set_fallback_mode(old)
    with pytest.raises(ValueError, match="not one of"):
        dispatch.set_fallback_mode("loud")


def test_mixed_devices_error_names_both(zero_kernel_device):
    a = ad.ones(2)
    b = ad.ones(2, device="bare:1")
    with pytest.raises(ValueError, match="different devices, cpu:0 and bare:1"):
        a + b


def test_unsupported_dtype_error():
    rt = HostRuntime(count=1, dtypes=(ad.float32, ad.int32, ad.bool))
    with installed(FakePlugin(types=("narrow",), runtime=rt)):
        with pytest.raises(TypeError, match=r"narrow:0 does not support dtype float64; it supports: bool, int32, float32"):
            ad.asarray(np.zeros(2, np.float64), device="narrow")
        x = ad.asarray([1, 2], dtype="int32", device="narrow")
        with pytest.raises(TypeError, match="does not support dtype int64"):
            ad.argmax(x)  # result dtype int64 is refused before any work


def test_dtype_category_errors():
    with pytest.raises(TypeError, match=r"log\(\) does not accept dtype int64; it accepts floating-point dtypes"):
        ad.log(ad.asarray([1, 2]))
    with pytest.raises(TypeError, match="no type promotion between int64 and float32"):
        ad.asarray([1]) + ad.asarray([1.0])
    with pytest.raises(TypeError, match="Python float cannot be combined with a int64"):
        ad.asarray([1]) + 0.5
    with pytest.raises(TypeError, match=r"unexpected argument 'axes'; the signature is sum\(x, /, \*, axis=None, dtype=None, keepdims=False\)"):
        ad.sum(ad.ones(2), axes=0)
    with pytest.raises(ValueError, match="cannot be broadcast"):
        ad.ones((2, 3)) + ad.ones((4,))
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        ad.sum(ad.ones((2, 3)), axis=2)


OPS_ON_DEVICE = [
    lambda x, y, i: x + y, lambda x, y, i: x - y, lambda x, y, i: x * y, lambda x, y, i: x / (y + 3.0),
    lambda x, y, i: ad.exp(x), lambda x, y, i: ad.tanh(x), lambda x, y, i: ad.sqrt(ad.abs(x)),
    lambda x, y, i: ad.sum(x, axis=1), lambda x, y, i: ad.mean(x), lambda x, y, i: ad.max(x, axis=0),
    lambda x, y, i: ad.argmax(x, axis=1), lambda x, y, i: ad.var(x, axis=1), lambda x, y, i: ad.std(x),
    lambda x, y, i: ad.matmul(x, ad.permute_dims(y, (1, 0))), lambda x, y, i: ad.reshape(x, (4, 3)),
    lambda x, y, i: ad.concat([x, y], axis=0), lambda x, y, i: ad.stack([x, y]), lambda x, y, i: ad.flip(x, axis=1),
    lambda x, y, i: x[1:, ::2], lambda x, y, i: ad.take(x, i, axis=1), lambda x, y, i: ad.where(x > y, x, y),
    lambda x, y, i: ad.clip(x, min=-0.5, max=0.5), lambda x, y, i: ad.softmax(x), lambda x, y, i: ad.log_softmax(x),
    lambda x, y, i: ad.cross_entropy(x, ad.asarray([0, 3, 1], device=x.device)), lambda x, y, i: ad.gelu(x),
    lambda x, y, i: ad.sigmoid(x), lambda x, y, i: ad.relu(x),
    lambda x, y, i: ad.layer_norm(x, ad.ones((4,), device=x.device), ad.zeros((4,), device=x.device)),
    lambda x, y, i: ad.linear(x, y, ad.ones((3,), device=x.device)) if False else ad.linear(x, ad.ones((2, 4), device=x.device), ad.zeros((2,), device=x.device)),
    lambda x, y, i: ad.astype(x, ad.float16), lambda x, y, i: ad.squeeze(ad.expand_dims(x, axis=0), axis=0),
    lambda x, y, i: ad.broadcast_to(x[0], (2, 4)), lambda x, y, i: ad.eye(3, device=x.device),
    lambda x, y, i: ad.arange(5, device=x.device), lambda x, y, i: ad.linspace(0.0, 1.0, 5, device=x.device),
    lambda x, y, i: ad.zeros_like(x), lambda x, y, i: ad.full((2,), 7, device=x.device),
    lambda x, y, i: ad.logsumexp(x, axis=1), lambda x, y, i: ad.any(x > 0), lambda x, y, i: ad.all(x > -5),
    lambda x, y, i: ad.prod(x, axis=0), lambda x, y, i: ad.min(x), lambda x, y, i: ad.argmin(x),
    lambda x, y, i: ad.floor(x), lambda x, y, i: ad.ceil(x), lambda x, y, i: ad.sin(x) + ad.cos(y),
    lambda x, y, i: ad.maximum(x, y), lambda x, y, i: ad.minimum(x, y), lambda x, y, i: x ** 2.0,
    lambda x, y, i: ad.equal(x, y), lambda x, y, i: ad.not_equal(x, y), lambda x, y, i: x <= y,
    lambda x, y, i: ad.isnan(x / x), lambda x, y, i: ad.sign(x), lambda x, y, i: ad.erf(x),
]


def test_zero_kernel_backend_runs_whole_surface_via_fallback(zero_kernel_device):
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((3, 4)).astype(np.float32)
    ys = rng.standard_normal((3, 4)).astype(np.float32)
    idx = np.array([3, 0, 1])
    cpu = [ad.asarray(xs), ad.asarray(ys), ad.asarray(idx)]
    dev = [ad.asarray(a, device="bare:1") for a in (xs, ys, idx)]
    for k, f in enumerate(OPS_ON_DEVICE):
        want, got = f(*cpu), f(*dev)
        assert got.device == "bare:1", k
        assert got.dtype is want.dtype and got.shape == want.shape, k
        np.testing.assert_allclose(got.numpy().astype(np.float64), want.numpy().astype(np.float64),
                                   rtol=1e-5, atol=1e-6, err_msg=f"case {k}")
    counts = ad.fallback_counts()
    assert counts and all(dev == "bare:1" for _, dev in counts)


def test_fallback_keeps_autograd_working(zero_kernel_device):
    w = ad.asarray([[1.0, -2.0], [0.5, 3.0]], device="bare")
    w.requires_grad = True
    x = ad.asarray([[1.0, 2.0]], device="bare")
    loss = ad.sum(ad.tanh(ad.matmul(x, w)))
    loss.backward()
    wc = ad.asarray(w.numpy())
    wc.requires_grad = True
    ad.sum(ad.tanh(ad.matmul(ad.asarray([[1.0, 2.0]]), wc))).backward()
    assert w.grad.device == "bare:0"
    np.testing.assert_allclose(w.grad.numpy(), wc.grad.numpy(), rtol=1e-6)


def test_gradient_flows_back_across_a_device_copy(zero_kernel_device):
    x = ad.asarray([1.0, -2.0, 3.0])
    x.requires_grad = True
    y = x.to("bare:1")
    loss = ad.sum(y * y)
    loss.backward()
    assert x.grad.device == "cpu:0"
    np.testing.assert_allclose(x.grad.numpy(), [2.0, -4.0, 6.0])


def test_decomposition_needing_a_missing_dtype_falls_back_whole():
    # isinf(complex64) decomposes through abs() -> float32; a device without float32 must fall back
    rt = HostRuntime(count=1, dtypes=(ad.complex64, ad.bool))
    kernels = {"abs": (lambda ctx, out, x: None, True), "equal": (lambda ctx, out, a, b: None, True)}
    with installed(FakePlugin(types=("nof32",), runtime=rt, kernels=kernels)):
        old = dispatch.set_fallback_mode("silent")
        try:
            x = ad.asarray(np.array([1 + 1j, np.inf + 0j], np.complex64), device="nof32")
            seen = _paths(lambda: ad.isinf(x))
            assert seen[-1] == ("isinf", "nof32:0", "fallback")
            assert ad.isinf(x).tolist() == [False, True]
        finally:
            dispatch.set_fallback_mode(old)
