import numpy as np
import pytest

import anydevice as ad

rng = np.random.default_rng(1)


def numeric_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp) - f(xm)) / (2 * eps)
    return g


CASES = {
    "tanh·matmul": lambda x, w: ad.sum(ad.tanh(ad.matmul(x, w))),
    "softmax": lambda x, w: ad.sum(ad.softmax(x, axis=-1) * ad.arange(4, dtype=ad.float64)),
    "log_softmax": lambda x, w: ad.sum(ad.log_softmax(x, axis=0) ** 2.0),
    "cross_entropy": lambda x, w: ad.cross_entropy(x, ad.asarray([0, 3, 1])),
    "layer_norm": lambda x, w: ad.sum(ad.layer_norm(x, ad.ones(4, dtype=ad.float64) * 1.5, ad.zeros(4, dtype=ad.float64)) * x),
    "gelu": lambda x, w: ad.sum(ad.gelu(x)),
    "var/std": lambda x, w: ad.var(x, axis=1).sum() + ad.std(x),
    "broadcast": lambda x, w: ad.sum((x + ad.sum(x, axis=0, keepdims=True)) * x[0]),
    "max": lambda x, w: ad.sum(ad.max(x, axis=1)),
    "indexing": lambda x, w: ad.sum(x[1:, ::2] * 3.0) + ad.sum(ad.take(x, ad.asarray([2, 2, 0]), axis=0)),
    "concat/stack": lambda x, w: ad.sum(ad.concat([x, x * 2.0], axis=1) ** 2.0) + ad.sum(ad.stack([x, x])),
    "where/clip": lambda x, w: ad.sum(ad.where(x > 0, x * x, -x) + ad.clip(x, min=-0.5, max=0.5)),
    "linear": lambda x, w: ad.sum(ad.linear(x, ad.permute_dims(w, (1, 0)), ad.ones(2, dtype=ad.float64)) ** 2.0),
    "exp/log/sqrt": lambda x, w: ad.sum(ad.log(ad.exp(x) + 1.0) + ad.sqrt(x * x + 1.0)),
    "sigmoid/relu": lambda x, w: ad.sum(ad.sigmoid(x) * ad.relu(x)),
    "reshape/permute": lambda x, w: ad.sum(ad.reshape(ad.permute_dims(x, (1, 0)), (2, 6)) * ad.arange(12, dtype=ad.float64).reshape((2, 6))),
    "mean/divide": lambda x, w: ad.mean(x / (ad.abs(x) + 1.0)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_gradients_match_finite_differences(name):
    f = CASES[name]
    x0 = rng.standard_normal((3, 4))
    w0 = rng.standard_normal((4, 2))
    x = ad.asarray(x0)
    w = ad.asarray(w0)
    x.requires_grad = True
    w.requires_grad = True
    out = f(x, w)
    out.backward()
    gx = numeric_grad(lambda a: f(ad.asarray(a), ad.asarray(w0)).item(), x0)
    np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-5, atol=1e-6)
    if w.grad is not None:
        gw = numeric_grad(lambda a: f(ad.asarray(x0), ad.asarray(a)).item(), w0)
        np.testing.assert_allclose(w.grad.numpy(), gw, rtol=1e-5, atol=1e-6)


def test_no_grad_and_leaf_rules():
    x = ad.ones(3)
    x.requires_grad = True
    with ad.no_grad():
        y = x * 2.0
    assert not y.requires_grad
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.sum().backward()
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad cannot be updated in place"):
        x += 1.0
    with ad.no_grad():
        x -= 0.5  # optimizer-style update
    assert x.tolist() == [0.5] * 3 and x.requires_grad
    with pytest.raises(TypeError, match="only floating-point tensors"):
        ad.asarray([1, 2]).requires_grad = True
    z = x * 3.0
    z.retain_grad()
    (z * z).sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), 2 * z.numpy())
    x.stop_gradient = True
    assert not x.requires_grad


def test_grads_accumulate_and_in_place_after_use_is_safe():
    x = ad.asarray([1.0, 2.0])
    x.requires_grad = True
    y = x * x
    y2 = y * 1.0
    y += 10.0  # rebinding y after y2 used its old value
    (y2.sum() + y.sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0])
    (x * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [7.0, 11.0])


def test_mixed_dtype_grad_keeps_input_dtype():
    a = ad.ones(2, dtype=ad.float32)
    b = ad.ones(2, dtype=ad.float64)
    a.requires_grad = True
    (a * b).sum().backward()
    assert a.grad.dtype is ad.float32
