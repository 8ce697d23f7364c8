"""The deep-learning ops and ``anydevice.nn.functional``: values against the registry's float64
references, hand-computed cases and numpy formulas; gradients against finite differences; the
same results on cpu, npu, xpu, dcu and OpenCL with the CPU fallback forbidden; clear errors."""
from __future__ import annotations

import math

import numpy as np
import pytest

import anydevice as ad
import anydevice.nn.functional as F
from anydevice.engine import dispatch
from anydevice.ops.registry import get_op
from anydevice.ops.samples import error_samples

DEVICES = ["cpu", "npu", "xpu", "dcu"] + (["opencl"] if ad.device.unavailable_reason("opencl") is None else [])
OPS = ["conv2d", "conv_transpose2d", "conv2d_weight_grad", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
       "batch_norm", "group_norm", "embedding", "leaky_relu", "silu", "elu", "nll_loss"]


@pytest.fixture(autouse=True)
def no_fallback():
    old = dispatch.set_fallback_mode("error")
    yield
    dispatch.set_fallback_mode(old)


def _rng(seed=0):
    return np.random.default_rng(seed)


def _t(a, dev, grad=False, dtype=None):
    t = ad.asarray(np.asarray(a), device=dev, dtype=dtype)
    return t.requires_grad_(True) if grad else t


def _ref(name, *arrays, **attrs):
    """The registry's float64 reference, with the op's attributes normalized as a call does."""
    op = get_op(name)
    shapes = [a.shape for a in arrays]
    a = op.validate({**op.attrs, **attrs}, shapes, [ad.asarray(x).dtype for x in arrays])
    a = op.canon(shapes, a) if op.canon else a
    return np.asarray(op.reference(*arrays, **a))


# --- hand-computed cases --------------------------------------------------------------------------
@pytest.mark.parametrize("dev", DEVICES)
def test_small_cases_by_hand(dev):
    x = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3)
    ones = np.ones((1, 1, 2, 2), np.float32)
    # 2x2 window sums of [[0 1 2] [3 4 5] [6 7 8]]
    np.testing.assert_array_equal(F.conv2d(_t(x, dev), _t(ones, dev)).numpy(), [[[[8, 12], [20, 24]]]])
    np.testing.assert_array_equal(F.conv2d(_t(x, dev), _t(ones, dev), stride=2, padding=1).numpy(),
                                  [[[[0, 3], [9, 24]]]])
    np.testing.assert_array_equal(F.max_pool2d(_t(x, dev), 2, stride=1).numpy(), [[[[4, 5], [7, 8]]]])
    np.testing.assert_array_equal(F.max_pool2d(_t(x, dev), 2, ceil_mode=True).numpy(), [[[[4, 5], [7, 8]]]])
    np.testing.assert_allclose(F.avg_pool2d(_t(x, dev), 2, padding=1, count_include_pad=False).numpy(),
                               [[[[0, 1.5], [4.5, 6]]]])
    np.testing.assert_allclose(F.avg_pool2d(_t(x, dev), 2, padding=1).numpy(), [[[[0, 0.75], [2.25, 6]]]])
    np.testing.assert_allclose(F.adaptive_avg_pool2d(_t(x, dev), 1).numpy(), [[[[4.0]]]])
    # the transposed conv of a single 1 at (0, 0), stride 2: the kernel placed at the top left
    k = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    one = np.zeros((1, 1, 2, 2), np.float32)
    one[0, 0, 0, 0] = 1
    np.testing.assert_array_equal(F.conv_transpose2d(_t(one, dev), _t(k, dev), stride=2).numpy()[0, 0],
                                  [[0, 1, 0, 0], [2, 3, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    logits = np.log(np.asarray([[0.5, 0.25, 0.25]], np.float32))
    np.testing.assert_allclose(F.cross_entropy(_t(logits, dev), _t(np.asarray([0]), dev)).item(), math.log(2), rtol=1e-6)
    np.testing.assert_allclose(F.leaky_relu(_t(np.asarray([-2.0, 3.0], np.float32), dev), 0.5).numpy(), [-1, 3])


# --- values against the references, on every device -------------------------------------------------
def _cases(rng):
    """(name, function of tensors, numpy inputs, expected float64 result)."""
    x = rng.standard_normal((2, 4, 6, 5))
    w = rng.standard_normal((6, 2, 3, 3))
    b = rng.standard_normal(6)
    wt = rng.standard_normal((4, 3, 3, 2))
    x1, w1 = rng.standard_normal((2, 3, 9)), rng.standard_normal((4, 3, 3))
    conv = _ref("conv2d", x, w, groups=2, padding=1, stride=(2, 1)) + b.reshape(1, -1, 1, 1)
    conv1 = _ref("conv2d", x1[:, :, None], w1[:, :, None], padding="same", dilation=(1, 2))[:, :, 0]
    yield "conv2d groups, bias", lambda a, c, d: F.conv2d(a, c, d, stride=(2, 1), padding=1, groups=2), [x, w, b], conv
    yield "conv2d unbatched", lambda a, c: F.conv2d(a, c, groups=2), [x[0], w], _ref("conv2d", x[:1], w, groups=2)[0]
    yield "conv1d same, dilation", lambda a, c: F.conv1d(a, c, padding="same", dilation=2), [x1, w1], conv1
    yield "conv_transpose2d", lambda a, c, d: F.conv_transpose2d(a, c, d, stride=2, padding=1, output_padding=1), \
        [x, wt, b[:3]], _ref("conv_transpose2d", x, wt, stride=2, padding=1, output_padding=1) + b[:3].reshape(1, -1, 1, 1)
    yield "conv_transpose1d", lambda a, c: F.conv_transpose1d(a, c, stride=2, padding=1, output_padding=1), \
        [x1, w1.transpose(1, 0, 2)], _ref("conv_transpose2d", x1[:, :, None], w1.transpose(1, 0, 2)[:, :, None],
                                          stride=(1, 2), padding=(0, 1), output_padding=(0, 1))[:, :, 0]
    yield "max_pool1d", lambda a: F.max_pool1d(a, 3, 2, 1, ceil_mode=True), [x1], \
        _ref("max_pool2d", x1[:, :, None], kernel_size=(1, 3), stride=(1, 2), padding=(0, 1), ceil_mode=True)[:, :, 0]
    yield "avg_pool1d unbatched", lambda a: F.avg_pool1d(a, 2), [x1[0]], x1[0, :, :8].reshape(3, 4, 2).mean(-1)
    yield "max_pool2d unbatched", lambda a: F.max_pool2d(a, 3, 2, 1), [x[0]], _ref("max_pool2d", x[:1], kernel_size=3, stride=2, padding=1)[0]
    yield "avg_pool2d ceil", lambda a: F.avg_pool2d(a, 2, ceil_mode=True), [x], _ref("avg_pool2d", x, kernel_size=2, ceil_mode=True)
    yield "adaptive_avg_pool2d (None, 2)", lambda a: F.adaptive_avg_pool2d(a, (None, 2)), [x], \
        _ref("adaptive_avg_pool2d", x, output_size=(6, 2))
    g_, bb = rng.standard_normal(4), rng.standard_normal(4)
    yield "group_norm", lambda a, c, d: F.group_norm(a, 2, c, d), [x, g_, bb], _ref("group_norm", x, g_, bb, num_groups=2)
    xm = x - x.mean(axis=(0, 2, 3), keepdims=True)
    bn = xm / np.sqrt((xm ** 2).mean(axis=(0, 2, 3), keepdims=True) + 1e-5) * g_.reshape(1, -1, 1, 1) + bb.reshape(1, -1, 1, 1)
    yield "batch_norm training", lambda a, c, d: F.batch_norm(a, None, None, c, d, training=True), [x, g_, bb], bn
    ln = (x - x.mean(axis=(2, 3), keepdims=True)) / np.sqrt(x.var(axis=(2, 3), keepdims=True) + 1e-5)
    yield "layer_norm", lambda a: F.layer_norm(a, (6, 5)), [x], ln
    emb, idx = rng.standard_normal((7, 3)), np.asarray([[1, 6, 1], [0, 2, 5]])
    yield "embedding", lambda e, i: F.embedding(i, e), [emb, idx], emb[idx]
    v = rng.standard_normal((3, 5))
    yield "silu", F.silu, [v], v / (1 + np.exp(-v))
    yield "elu", lambda a: F.elu(a, 0.7), [v], np.where(v > 0, v, 0.7 * (np.exp(v) - 1))
    q, k, vv = rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 5, 2))
    s = q @ k.transpose(0, 2, 1) / math.sqrt(3)
    mask = rng.random((4, 5)) < 0.7
    mask[:, 0] = True

    def attend(s):
        e = np.exp(s - s.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ vv

    yield "sdpa", F.scaled_dot_product_attention, [q, k, vv], attend(s)
    yield "sdpa bool mask", lambda a, c, d, m: F.scaled_dot_product_attention(a, c, d, attn_mask=m), [q, k, vv, mask], \
        attend(np.where(mask, s, -np.inf))
    yield "sdpa causal, scale", lambda a, c, d: F.scaled_dot_product_attention(a, c[:, :4], d[:, :4], is_causal=True, scale=0.3), \
        [q, k, vv], _attend_causal(q, k[:, :4], vv[:, :4], 0.3)
    fm = rng.standard_normal((4, 5))
    yield "sdpa float mask", lambda a, c, d, m: F.scaled_dot_product_attention(a, c, d, attn_mask=m), [q, k, vv, fm], attend(s + fm)
    yield from _loss_cases(rng)


def _attend_causal(q, k, v, scale):
    out = np.empty(q.shape[:-1] + (v.shape[-1],))
    for i in range(q.shape[1]):  # row i sees keys 0..i
        s = (q[:, i:i + 1] @ k[:, :i + 1].transpose(0, 2, 1)) * scale
        e = np.exp(s - s.max(-1, keepdims=True))
        out[:, i] = ((e / e.sum(-1, keepdims=True)) @ v[:, :i + 1])[:, 0]
    return out


def _lsm(z, axis):
    return z - z.max(axis, keepdims=True) - np.log(np.exp(z - z.max(axis, keepdims=True)).sum(axis, keepdims=True))


def _loss_cases(rng):
    z = rng.standard_normal((5, 4))
    y = np.asarray([0, 3, -100, 1, 3])
    w = np.asarray([0.5, 1.0, 2.0, 1.5])
    lp = _lsm(z, 1)
    kept = [i for i in range(5) if y[i] != -100]
    nll_w = -sum(lp[i, y[i]] * w[y[i]] for i in kept) / sum(w[y[i]] for i in kept)
    yield "cross_entropy weight, ignore", lambda a, t, c: F.cross_entropy(a, t, c), [z, y, w], nll_w
    eps = 0.2
    smooth = -sum((lp[i] * w).sum() for i in kept) / sum(w[y[i]] for i in kept)
    yield "cross_entropy label_smoothing", lambda a, t, c: F.cross_entropy(a, t, c, label_smoothing=eps), [z, y, w], \
        (1 - eps) * nll_w + eps / 4 * smooth
    z3, y3 = rng.standard_normal((2, 4, 3)), rng.integers(0, 4, (2, 3))  # (N, C, d1)
    per = -np.take_along_axis(_lsm(z3, 1), y3[:, None], axis=1)[:, 0]
    yield "cross_entropy (N, C, d) none", lambda a, t: F.cross_entropy(a, t, reduction="none"), [z3, y3], per
    pr = np.exp(_lsm(rng.standard_normal((5, 4)), 1))
    yield "cross_entropy probabilities", lambda a, t: F.cross_entropy(a, t, label_smoothing=0.1), [z, pr], \
        -((pr * 0.9 + 0.025) * lp).sum(1).mean()
    yield "nll_loss sum", lambda a, t: F.nll_loss(a, t, reduction="sum"), [lp, y], -sum(lp[i, y[i]] for i in kept)
    p = 1 / (1 + np.exp(-z))
    tt = rng.random((5, 4))
    bce = -(tt * np.log(p) + (1 - tt) * np.log(1 - p))
    yield "binary_cross_entropy", F.binary_cross_entropy, [p, tt], bce.mean()
    pw = np.asarray([1.0, 2.0, 0.5, 3.0])
    yield "bce_with_logits pos_weight", lambda a, t, c: F.binary_cross_entropy_with_logits(a, t, pos_weight=c, reduction="sum"), \
        [z, tt, pw], (-(pw * tt * np.log(p) + (1 - tt) * np.log(1 - p))).sum()
    d = z - tt
    yield "mse_loss", F.mse_loss, [z, tt], (d * d).mean()
    yield "l1_loss none", lambda a, t: F.l1_loss(a, t, reduction="none"), [z, tt], np.abs(d)
    yield "smooth_l1_loss beta", lambda a, t: F.smooth_l1_loss(a, t, beta=0.5), [z, tt], \
        np.where(np.abs(d) < 0.5, 0.5 * d * d / 0.5, np.abs(d) - 0.25).mean()
    yield "huber_loss delta", lambda a, t: F.huber_loss(a, t, delta=0.5, reduction="sum"), [z, tt], \
        np.where(np.abs(d) <= 0.5, 0.5 * d * d, 0.5 * (np.abs(d) - 0.25)).sum()
    q = np.exp(_lsm(rng.standard_normal((5, 4)), 1))
    q[0, 1] = 0.0
    kl = np.where(q > 0, q * (np.log(np.where(q > 0, q, 1)) - lp), 0.0)
    yield "kl_div batchmean", lambda a, t: F.kl_div(a, t, reduction="batchmean"), [lp, q], kl.sum() / 5
    yield "kl_div log_target", lambda a, t: F.kl_div(a, t, log_target=True, reduction="sum"), [lp, _lsm(z, 1)], \
        (np.exp(_lsm(z, 1)) * (_lsm(z, 1) - lp)).sum()


_CASES = list(_cases(_rng(1)))


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("case", _CASES, ids=[c[0] for c in _CASES])
def test_values_against_references(case, dev):
    _, fn, inputs, want = case
    args = [_t(a, dev, dtype="float32" if a.dtype.kind == "f" else None) for a in inputs]
    got = fn(*args)
    assert str(got.device).startswith(dev)
    np.testing.assert_allclose(got.numpy(), want, rtol=2e-4, atol=2e-5)


# --- gradients ------------------------------------------------------------------------------------
_GRAD_CASES = [
    ("conv2d", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=(1, 0), dilation=(1, 2), groups=2),
     [(1, 4, 5, 6), (4, 2, 2, 2), (4,)]),
    ("conv1d", lambda x, w: F.conv1d(x, w, padding="same"), [(2, 2, 5), (3, 2, 3)]),
    ("conv_transpose2d", lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=1, groups=2),
     [(1, 4, 3, 2), (4, 1, 3, 2)]),
    ("max_pool2d", lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), [(1, 2, 5, 6)]),
    ("avg_pool2d", lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), [(1, 2, 5, 6)]),
    ("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (2, 4)), [(1, 2, 5, 6)]),
    ("batch_norm training", lambda x, g, b: F.batch_norm(x, None, None, g, b, training=True), [(3, 2, 2, 2), (2,), (2,)]),
    ("group_norm", lambda x, g, b: F.group_norm(x, 2, g, b), [(2, 4, 3), (4,), (4,)]),
    ("silu, elu, leaky_relu", lambda x: F.silu(x) * F.elu(x, 0.5) + F.leaky_relu(x, 0.2), [(3, 4)]),
    ("sdpa causal", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), [(2, 3, 2), (2, 3, 2), (2, 3, 4)]),
    ("cross_entropy smoothing", lambda z: F.cross_entropy(z, ad.asarray([2, 0, 1], device=z.device), label_smoothing=0.1),
     [(3, 4)]),
    ("bce_with_logits", lambda z, t: F.binary_cross_entropy_with_logits(z, t), [(3, 4), (3, 4)]),
    ("smooth_l1, huber", lambda a, b: F.smooth_l1_loss(a, b, beta=0.7) + F.huber_loss(a, b, delta=1.3), [(3, 4), (3, 4)]),
]


def _grads(fn, arrays, dev, dtype):
    ts = [_t(a, dev, grad=True, dtype=dtype) for a in arrays]
    with ad.enable_grad():
        out = fn(*ts)
        g = np.asarray(_rng(7).uniform(-1, 1, out.shape))
        out.backward(ad.asarray(g, dtype=out.dtype, device=out.device))
    return [t.grad.numpy().astype(np.float64) for t in ts], g


@pytest.mark.parametrize("case", _GRAD_CASES, ids=[c[0] for c in _GRAD_CASES])
def test_grads_match_finite_differences(case):
    _, fn, shapes = case
    rng = _rng(3)
    arrays = [rng.standard_normal(s) for s in shapes]
    got, g = _grads(fn, arrays, "cpu", "float64")

    def f(arrs):
        return float(np.sum(g * fn(*[ad.asarray(a) for a in arrs]).numpy()))

    for k, a in enumerate(arrays):
        want = np.zeros_like(a)
        for j in np.ndindex(a.shape):
            h = 1e-6
            hi = [x.copy() for x in arrays]
            lo = [x.copy() for x in arrays]
            hi[k][j] += h
            lo[k][j] -= h
            want[j] = (f(hi) - f(lo)) / (2 * h)
        np.testing.assert_allclose(got[k], want, rtol=1e-5, atol=1e-6, err_msg=f"input {k}")


@pytest.mark.parametrize("dev", [d for d in DEVICES if d != "cpu"])
def test_grads_the_same_on_every_device(dev):
    rng = _rng(4)
    for name, fn, shapes in _GRAD_CASES:
        arrays = [rng.standard_normal(s) for s in shapes]
        want, _ = _grads(fn, arrays, "cpu", "float64")
        got, _ = _grads(fn, arrays, dev, "float32")
        for k, (a, b) in enumerate(zip(got, want)):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4, err_msg=f"{name} input {k} on {dev}")


@pytest.mark.parametrize("dev", DEVICES)
def test_embedding_padding_row_gets_no_gradient(dev):
    w = _t(_rng().standard_normal((4, 3)), dev, grad=True, dtype="float32")
    idx = _t(np.asarray([[0, 2, 2], [3, 0, 1]]), dev)
    with ad.enable_grad():
        F.embedding(idx, w, padding_idx=2).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [[2, 2, 2], [1, 1, 1], [0, 0, 0], [1, 1, 1]])


@pytest.mark.parametrize("dev", DEVICES)
def test_batch_norm_running_statistics(dev):
    rng = _rng(5)
    x = rng.standard_normal((4, 3, 2, 2)).astype(np.float32) * 2 + 1
    rm, rv = _t(np.zeros(3, np.float32), dev), _t(np.ones(3, np.float32), dev)
    F.batch_norm(_t(x, dev), rm, rv, training=True, momentum=0.25)
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3), ddof=1)
    np.testing.assert_allclose(rm.numpy(), 0.25 * mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rv.numpy(), 0.75 + 0.25 * var, rtol=1e-5)
    assert str(rm.device).startswith(dev)
    y = F.batch_norm(_t(x, dev), rm, rv, training=False).numpy()  # eval: the running statistics
    want = (x - rm.numpy().reshape(1, 3, 1, 1)) / np.sqrt(rv.numpy().reshape(1, 3, 1, 1) + 1e-5)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dev", DEVICES)
def test_dropout_reexported(dev):
    x = _t(np.ones((50, 40), np.float32), dev)
    assert F.dropout(x, 0.5, training=False) is x
    y = F.dropout(x, p=0.5).numpy()
    assert set(np.unique(y)) <= {0.0, 2.0} and 0.4 < (y == 0).mean() < 0.6


@pytest.mark.parametrize("dev", DEVICES)
def test_a_small_cnn_learns(dev):
    rng = _rng(6)
    x = _t(rng.standard_normal((8, 1, 6, 6)), dev, dtype="float32")
    y = _t(np.asarray([0, 1] * 4), dev)
    w1 = _t(rng.standard_normal((4, 1, 3, 3)) * 0.5, dev, grad=True, dtype="float32")
    w2 = _t(rng.standard_normal((2, 16)) * 0.3, dev, grad=True, dtype="float32")
    losses = []
    for _ in range(10):
        with ad.enable_grad():
            h = F.max_pool2d(F.relu(F.conv2d(x, w1, padding=1)), 3)  # (8, 4, 2, 2)
            loss = F.cross_entropy(F.linear(ad.reshape(h, (8, 16)), w2), y)
            loss.backward()
        losses.append(loss.item())
        with ad.no_grad():
            for p in (w1, w2):
                p[...] = p - 0.3 * p.grad
                p.clear_grad()
    assert losses[-1] < 0.7 * losses[0], losses


# --- errors ---------------------------------------------------------------------------------------
_f = np.float32
_ERRORS = [
    (lambda d: F.conv2d(_t(np.ones((5, 5), _f), d), _t(np.ones((1, 1, 3, 3), _f), d)), ValueError,
     r"conv2d\(\): input must be 3-D \(C, H, W\) or 4-D \(N, C, H, W\), got shape \(5, 5\)"),
    (lambda d: F.conv2d(_t(np.ones((1, 3, 5, 5), _f), d), _t(np.ones((2, 2, 3, 3), _f), d)), ValueError,
     r"conv2d\(\): input has 3 channels, so with groups=1 the weight needs 3 input channels"),
    (lambda d: F.conv2d(_t(np.ones((1, 3, 5, 5), _f), d), _t(np.ones((2, 1, 3, 3), _f), d), groups=2), ValueError,
     r"conv2d\(\): in_channels \(3\) must be divisible by groups \(2\)"),
    (lambda d: F.conv2d(_t(np.ones((1, 2, 5, 5), _f), d), _t(np.ones((2, 2, 3, 3), _f), d), stride=0), ValueError,
     r"conv2d\(\): stride must be a positive int"),
    (lambda d: F.conv2d(_t(np.ones((1, 2, 5, 5), _f), d), _t(np.ones((2, 2, 3, 3), _f), d), _t(np.ones(3, _f), d)),
     ValueError, r"conv2d\(\): bias must have shape \(2,\)"),
    (lambda d: F.conv1d(_t(np.ones((1, 2, 5, 5), _f), d), _t(np.ones((2, 2, 3), _f), d)), ValueError,
     r"conv1d\(\): input must be 2-D \(C, L\) or 3-D \(N, C, L\)"),
    (lambda d: F.max_pool2d(_t(np.ones((1, 1, 4, 4), _f), d), 2, padding=2), ValueError,
     r"max_pool2d\(\): padding 2 must be at most half the window"),
    (lambda d: F.cross_entropy(_t(np.ones((2, 3), _f), d), _t(np.asarray([0, 3]), d)), IndexError,
     r"nll_loss\(\): label 3 is out of range for 3 classes"),
    (lambda d: F.cross_entropy(_t(np.ones((2, 3), _f), d), _t(np.asarray([0, 1]), d), reduction="avg"), ValueError,
     r"cross_entropy\(\): reduction must be 'mean', 'sum', 'none', not 'avg'"),
    (lambda d: F.nll_loss(_t(np.ones((2, 3), _f), d), _t(np.asarray([0, 1]), d), _t(np.ones(2, _f), d)), ValueError,
     r"nll_loss\(\): weight must have shape \(3,\)"),
    (lambda d: F.binary_cross_entropy(_t(np.asarray([0.5, 1.5], _f), d), _t(np.ones(2, _f), d)), ValueError,
     r"binary_cross_entropy\(\): input must hold probabilities in \[0, 1\]"),
    (lambda d: F.mse_loss(_t(np.ones(3, _f), d), _t(np.ones(2, _f), d)), ValueError,
     r"mse_loss\(\): input has shape \(3,\) and target \(2,\)"),
    (lambda d: F.kl_div(_t(np.ones(3, _f), d), _t(np.ones(3, _f), d), reduction="avg"), ValueError,
     r"kl_div\(\): reduction must be 'mean', 'sum', 'none', 'batchmean'"),
    (lambda d: F.embedding(_t(np.asarray([4]), d), _t(np.ones((4, 2), _f), d)), IndexError,
     r"embedding\(\): index 4 is out of range for 4 embeddings"),
    (lambda d: F.group_norm(_t(np.ones((2, 6, 3), _f), d), 4), ValueError,
     r"group_norm\(\): channels \(6\) must be divisible by groups \(4\)"),
    (lambda d: F.scaled_dot_product_attention(*[_t(np.ones((2, 3), _f), d)] * 2, _t(np.ones((4, 3), _f), d)),
     ValueError, r"scaled_dot_product_attention\(\): query .* do not fit"),
    (lambda d: F.batch_norm(_t(np.ones((1, 3), _f), d), None, None, training=True), ValueError,
     r"batch_norm\(\): training needs more than one value per channel"),
]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("k", range(len(_ERRORS)))
def test_clear_errors_on_every_device(k, dev):
    call, exc, pattern = _ERRORS[k]
    with pytest.raises(exc, match=pattern):
        call(dev)


def test_ops_have_their_rules():
    for name in OPS:
        op = get_op(name)
        assert op.decomposition is not None and op.reference is not None and callable(op.samples), name
        assert error_samples(op), name
