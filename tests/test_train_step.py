"""The eager training step's own rules: VJPs that skip gradients nobody needs, linear's VJP,
cross entropy as one op in nn.functional (and its fallback to log_softmax + nll_loss), and the
fused gradient op of cross entropy."""
import numpy as np
import pytest

import anydevice as ad
from anydevice import nn, optim
from anydevice.nn import functional as F
from anydevice_cpu import native

rng = np.random.default_rng(7)


def _grads(f, *arrays, needs=None):
    ts = [ad.asarray(a) for a in arrays]
    for t, n in zip(ts, needs or [True] * len(ts)):
        if n:
            t.requires_grad_()
    f(*ts).backward()
    return [None if t.grad is None else t.grad.numpy() for t in ts]


@pytest.mark.parametrize("xs,bs", [((5, 3), (4,)), ((2, 5, 3), (4,)), ((3,), (4,)), ((5, 3), ())])
def test_linear_vjp_matches_its_decomposition(xs, bs):
    x, w, b = rng.standard_normal(xs), rng.standard_normal((4, 3)), rng.standard_normal(bs)
    mine = _grads(lambda x, w, b: ad.sum(ad.linear(x, w, b) ** 2.0), x, w, b)
    ref = _grads(lambda x, w, b: ad.sum((ad.matmul(x, ad.matrix_transpose(w)) + b) ** 2.0), x, w, b)
    for m, r, a in zip(mine, ref, (x, w, b)):
        assert m.shape == a.shape
        np.testing.assert_allclose(m, r, rtol=1e-12, atol=1e-12)


def test_linear_vjp_only_for_inputs_that_need_it():
    x, w, b = rng.standard_normal((6, 3)), rng.standard_normal((4, 3)), rng.standard_normal(4)
    full = _grads(lambda x, w, b: ad.sum(ad.linear(x, w, b) ** 2.0), x, w, b)
    part = _grads(lambda x, w, b: ad.sum(ad.linear(x, w, b) ** 2.0), x, w, b, needs=[False, True, False])
    assert part[0] is None and part[2] is None
    np.testing.assert_array_equal(part[1], full[1])
    np.testing.assert_allclose(full[1], 2 * (x @ w.T + b).T @ x, rtol=1e-12)


def test_functional_linear_is_the_linear_op_where_it_fits_and_broadcasts_otherwise():
    """F.linear runs the registry's linear op (as nn.Linear does) for a bias of shape (out,) or ()
    and one floating dtype; a bias of another broadcastable shape, or no bias, as matmul (+ add)."""
    from anydevice.engine import dispatch

    x, w = rng.standard_normal((2, 5, 3)), rng.standard_normal((4, 3))
    seen = []

    def watch(op, *a):
        seen.append(op.name)

    for b, ops in ((rng.standard_normal(4), ["linear"]), (np.float64(0.5), ["linear"]),
                   (rng.standard_normal((5, 4)), ["matrix_transpose", "matmul", "add"]), (None, ["matrix_transpose", "matmul"])):
        seen.clear()
        dispatch.add_observer(watch)
        try:
            got = F.linear(ad.asarray(x), ad.asarray(w), None if b is None else ad.asarray(b))
        finally:
            dispatch.remove_observer(watch)
        assert seen == ops, (np.shape(b), seen)
        np.testing.assert_allclose(got.numpy(), x @ w.T + (0 if b is None else b), rtol=1e-12, atol=1e-12)
    mine = _grads(lambda x, w, b: ad.sum(F.linear(x, w, b) ** 2.0), x, w, rng.standard_normal(4))
    assert [m.shape for m in mine] == [(2, 5, 3), (4, 3), (4,)]


def test_partial_vjp_receives_needs():
    from anydevice.ops.registry import get_op

    assert get_op("linear").vjp.partial


def _ce_pair(logits, labels, **kw):
    """(fused F.cross_entropy, log_softmax + nll_loss) values and logits gradients."""
    out = []
    for fused in (True, False):
        x = ad.asarray(logits).requires_grad_()
        y = ad.asarray(labels)
        if fused:
            loss = F.cross_entropy(x, y, **kw)
        else:
            loss = F.nll_loss(F.log_softmax(x, dim=1 if x.ndim > 1 else 0), y, **kw)
        ad.sum(loss).backward()
        out.append((loss.numpy(), x.grad.numpy()))
    return out


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(8, 5), (3, 5, 4)])
def test_cross_entropy_matches_log_softmax_nll(reduction, shape):
    logits = rng.standard_normal(shape).astype(np.float32)
    labels = rng.integers(0, shape[1], (shape[0],) + shape[2:])
    (lf, gf), (ln, gn) = _ce_pair(logits, labels, reduction=reduction)
    np.testing.assert_allclose(lf, ln, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(gf, gn, rtol=1e-5, atol=1e-6)


def test_cross_entropy_ignore_index_still_skips():
    logits = rng.standard_normal((6, 4)).astype(np.float32)
    labels = np.asarray([0, -100, 3, 2, -100, 1])
    (lf, gf), (ln, gn) = _ce_pair(logits, labels)
    np.testing.assert_allclose(lf, ln, rtol=1e-6)
    np.testing.assert_allclose(gf, gn, rtol=1e-5, atol=1e-7)
    assert np.all(gf[[1, 4]] == 0)
    keep = labels != -100
    lsm = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    np.testing.assert_allclose(lf, -lsm[keep, labels[keep]].mean(), rtol=1e-5)


def test_cross_entropy_ignore_index_in_range():
    logits = rng.standard_normal((5, 3)).astype(np.float32)
    labels = np.asarray([0, 1, 2, 1, 0])
    (lf, _), (ln, _) = _ce_pair(logits, labels, ignore_index=1)
    np.testing.assert_allclose(lf, ln, rtol=1e-6)


def test_cross_entropy_bad_label_names_nll_loss_as_before():
    x = ad.asarray(rng.standard_normal((3, 4)).astype(np.float32))
    with pytest.raises(IndexError, match=r"nll_loss\(\): label 4 is out of range for 4 classes"):
        F.cross_entropy(x, ad.asarray([0, 4, 1]))
    with pytest.raises(ValueError, match="nll_loss"):
        F.cross_entropy(x, ad.asarray([0, 1]))


def _ce_grad_ref(logits, labels, g, reduction):
    x = logits.astype(np.float64)
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    p -= labels[..., None] == np.arange(x.shape[-1])
    if reduction == "none":
        return p * np.asarray(g, np.float64)[..., None]
    return p * float(g) / (max(labels.size, 1) if reduction == "mean" else 1)


@pytest.mark.parametrize("device", ["cpu", "npu"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_grad_op(device, reduction):
    logits = rng.standard_normal((2, 3, 5)).astype(np.float32)
    labels = np.asarray([[0, 4, 9], [-1, 2, 1]])  # out-of-range labels have no one-hot entry
    g = rng.standard_normal((2, 3)).astype(np.float32) if reduction == "none" else np.float32(1.5)
    r = ad.cross_entropy_grad(ad.asarray(logits, device=device), ad.asarray(labels, device=device),
                              ad.asarray(g, device=device), reduction=reduction)
    assert r.shape == logits.shape and r.dtype == ad.float32
    np.testing.assert_allclose(r.numpy(), _ce_grad_ref(logits, labels, g, reduction), rtol=1e-5, atol=1e-6)


def test_cross_entropy_grad_errors():
    x, y = ad.zeros((2, 3)), ad.asarray([0, 1])
    with pytest.raises(ValueError, match=r"cross_entropy_grad\(\): grad of shape \(2,\)"):
        ad.cross_entropy_grad(x, y, ad.ones(2))
    with pytest.raises(TypeError, match=r"cross_entropy_grad\(\): grad must have the dtype"):
        ad.cross_entropy_grad(x, y, ad.ones((), dtype=ad.float64))
    with pytest.raises(TypeError, match="cross_entropy_grad"):
        ad.cross_entropy_grad(x, ad.zeros(2), ad.ones(()))


def test_mlp_step_trains():
    ad.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = optim.Adam(model.parameters(), lr=1e-2)
    x = ad.asarray(rng.standard_normal((64, 16)).astype(np.float32))
    y = ad.asarray(rng.integers(0, 4, 64))
    losses = []
    for _ in range(30):
        loss = nn.CrossEntropyLoss()(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    assert model[0].weight.grad.shape == (32, 16)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_cross_entropy_grad_cpu_kernel_equals_decomposition(dtype):
    logits = rng.standard_normal((3, 5, 4)).astype(dtype)
    x = ad.permute_dims(ad.asarray(logits), (0, 2, 1))  # classes last through a view, as nn.functional does
    labels = ad.asarray(rng.integers(0, 5, (3, 4)))
    g = ad.asarray(np.asarray(0.75, dtype))
    from anydevice.engine.dispatch import xp
    from anydevice.ops.registry import get_op

    cpu = ad.cross_entropy_grad(x, labels, g)
    decomposed = get_op("cross_entropy_grad").decomposition(xp, x, labels, g)
    assert cpu.dtype == decomposed.dtype == x.dtype
    np.testing.assert_allclose(cpu.numpy().astype(np.float64), decomposed.numpy().astype(np.float64),
                               rtol=1e-2 if dtype == "float16" else 1e-6, atol=1e-3 if dtype == "float16" else 1e-7)


_PARTIAL = {
    "add": lambda x, y: x + y[0],
    "multiply": lambda x, y: x * y,
    "divide": lambda x, y: x / (y * y + 1.0),
    "matmul": lambda x, y: x @ y,
    "where": lambda x, y: ad.where(x > y, x, y),
    "concat": lambda x, y: ad.concat([x, y, x], axis=0),
    "concat(axis=None)": lambda x, y: ad.concat([y, x], axis=None),
    "max": lambda x, y: ad.max(x * y, axis=1),
    "var": lambda x, y: ad.var(x + y, axis=0, keepdims=True),
    "mean": lambda x, y: ad.mean(x * y),
}


@pytest.mark.parametrize("name", sorted(_PARTIAL))
@pytest.mark.parametrize("needs", [(True, False), (False, True)])
def test_vjps_skip_inputs_without_grad(name, needs):
    """Each input's gradient is the same whether or not the other input requires one."""
    f = _PARTIAL[name]
    x, y = rng.standard_normal((3, 3)), rng.standard_normal((3, 3))
    loss = lambda x, y: ad.sum(f(x, y) ** 2.0)  # noqa: E731
    full = _grads(loss, x, y)
    part = _grads(loss, x, y, needs=list(needs))
    for p, q, n in zip(part, full, needs):
        if n:
            np.testing.assert_array_equal(p, q)
        else:
            assert p is None


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_grads_cpu_kernel_equals_decomposition(name, dtype, axis):
    from anydevice.engine.dispatch import xp
    from anydevice.ops.registry import get_op

    x = ad.asarray(rng.standard_normal((3, 6)).astype(dtype))
    out = getattr(ad, name)(x, axis=axis)
    g = ad.asarray(rng.standard_normal((3, 6)).astype(dtype))
    cpu = getattr(ad, f"{name}_grad")(g, out, axis=axis)
    if dtype == "float16":  # the dispatcher computes half decompositions in float32 and rounds once
        up = get_op(f"{name}_grad").decomposition(xp, g.astype(ad.float32), out.astype(ad.float32), axis=axis)
        decomposed = up.astype(ad.float16)
    else:
        decomposed = get_op(f"{name}_grad").decomposition(xp, g, out, axis=axis)
    assert cpu.dtype == decomposed.dtype == x.dtype and cpu.shape == x.shape
    if name == "log_softmax" and dtype != "float64" and axis == -1 and native.AVAILABLE:
        # the cpu backend's C kernel evaluates exp(out) with its own vectorized exp (within 2 ulp
        # of numpy's, which the decomposition calls); the rest is the same arithmetic
        tol = 1e-6 if dtype == "float32" else 2e-3
        np.testing.assert_allclose(cpu.numpy(), decomposed.numpy(), rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(cpu.numpy(), decomposed.numpy())


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_grads_match_numeric_gradient(name):
    x = rng.standard_normal((2, 5))
    w = rng.standard_normal((2, 5))
    f = lambda t: ad.sum(getattr(ad, name)(t, axis=1) * ad.asarray(w))  # noqa: E731
    (g,) = _grads(f, x)
    eps, num = 1e-6, np.zeros_like(x)
    for k in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[k] = eps
        num[k] = (f(ad.asarray(x + d)).item() - f(ad.asarray(x - d)).item()) / (2 * eps)
    np.testing.assert_allclose(g, num, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", ["softmax_grad", "log_softmax_grad"])
def test_softmax_grads_errors(name):
    with pytest.raises(ValueError, match=rf"{name}\(\): grad of shape \(2, 3\) and out of shape \(3,\)"):
        getattr(ad, name)(ad.ones((2, 3)), ad.ones(3))
    with pytest.raises(ValueError, match=name):
        getattr(ad, name)(ad.ones((2, 3)), ad.ones((2, 3)), axis=2)
    assert np.all(getattr(ad, name)(ad.ones(()), ad.ones(())).numpy() == 0)


_KEYS = [((4, 5), (slice(1, 3),)), ((4, 5), (slice(None), slice(None, None, -2))), ((3,), (1,)),
         ((3, 4, 5), (None, 0, slice(1, None), -1)), ((3, 4), (Ellipsis, 2))]


@pytest.mark.parametrize("shape,key", _KEYS, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32", "bool"])
def test_getitem_grad_cpu_kernel_equals_decomposition(shape, key, dtype):
    from anydevice.engine.dispatch import xp
    from anydevice.ops.indexing import canonical_key
    from anydevice.ops.registry import get_op

    ck = canonical_key(key, shape)
    g = ad.asarray(np.asarray(rng.standard_normal(np.zeros(shape)[key].shape) * 3)).astype(getattr(ad, dtype))
    cpu = ad.getitem_grad(g, shape=shape, key=key)
    decomposed = get_op("getitem_grad").decomposition(xp, g, shape, ck)
    assert cpu.dtype == g.dtype and cpu.shape == shape
    np.testing.assert_array_equal(cpu.numpy(), decomposed.numpy())
    want = np.zeros(shape, g.numpy().dtype)
    want[key] = g.numpy()
    np.testing.assert_array_equal(cpu.numpy(), want)


def test_getitem_backward_and_errors():
    x = rng.standard_normal((4, 5))
    (g,) = _grads(lambda t: ad.sum(t[1:3, ::2] * 3.0) + ad.sum(t[-1] ** 2.0), x)
    want = np.zeros((4, 5))
    want[1:3, ::2] = 3.0
    want[-1] = 2 * x[-1]
    np.testing.assert_allclose(g, want)
    with pytest.raises(ValueError, match=r"getitem_grad\(\): grad of shape \(2, 5\) does not fit x\[key\] of shape \(3, 5\)"):
        ad.getitem_grad(ad.ones((2, 5)), shape=(4, 5), key=(slice(0, 3),))
    with pytest.raises(IndexError, match="out of bounds"):
        ad.getitem_grad(ad.ones(5), shape=(4, 5), key=(7,))


@pytest.mark.parametrize("dtype", ["int64", "int8", "uint8", "uint64"])
@pytest.mark.parametrize("low,high", [(0, 6), (0, 5), (1, 6), (-300, 300), (-1, 1 << 70)])
def test_index_in_range_cpu_kernel_equals_decomposition(dtype, low, high):
    from anydevice.engine.dispatch import xp
    from anydevice.ops.registry import get_op

    x = ad.asarray(np.asarray([[3, 0, 5], [1, 4, 2]], dtype))
    for t in (x, x[:0]):
        cpu = ad.index_in_range(t, low=low, high=high)
        decomposed = get_op("index_in_range").decomposition(xp, t, low, high)
        want = t.size == 0 or (low <= 0 and high > 5)
        assert cpu.dtype == ad.bool and cpu.shape == () and bool(cpu) is bool(decomposed) is want


def test_index_checks_name_the_bad_value():
    x = ad.ones((3, 4))
    with pytest.raises(IndexError, match=r"cross_entropy\(\): label -1 is out of range for 4 classes \(allowed: 0..3\)"):
        ad.cross_entropy(x, ad.asarray([0, -1, 2]))
    with pytest.raises(IndexError, match=r"take\(\): index 5 is out of range"):
        ad.take(x, ad.asarray([5]), axis=1)
    with pytest.raises(TypeError, match=r"index_in_range\(\) does not accept dtype float32"):
        ad.index_in_range(x, low=0, high=1)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int32"])
def test_relu_grad_cpu_kernel_equals_decomposition(dtype):
    from anydevice.engine.dispatch import xp
    from anydevice.ops.registry import get_op

    x = ad.asarray(np.asarray([[-1.5, 0.0, 2.0], [3.0, -0.0, np.nan if dtype.startswith("f") else 1]]).astype(
        np.float32)).astype(getattr(ad, dtype))
    g = ad.asarray(np.asarray([[1.0, -2.0, -3.0], [np.inf, 5.0, -6.0]]).astype(np.float32)).astype(getattr(ad, dtype)) \
        if dtype != "int32" else ad.asarray(np.asarray([[1, -2, -3], [4, 5, -6]], np.int32))
    cpu = ad.relu_grad(g, x)
    decomposed = get_op("relu_grad").decomposition(xp, g, x)
    assert cpu.dtype == g.dtype
    np.testing.assert_array_equal(cpu.numpy(), decomposed.numpy())
    (gx,) = _grads(lambda t: ad.sum(ad.relu(t) * ad.asarray([1.0, 2.0, 3.0])), np.asarray([-1.0, 0.0, 4.0]))
    np.testing.assert_array_equal(gx, [0.0, 0.0, 3.0])


def test_cross_entropy_of_an_empty_batch_is_a_quiet_nan():
    import warnings

    x = ad.zeros((0, 3)).requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss = F.cross_entropy(x, ad.asarray(np.zeros(0, np.int64)))
        loss.backward()
    assert np.isnan(loss.item()) and x.grad.shape == (0, 3)
