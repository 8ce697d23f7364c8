"""anydevice.nn: Module bookkeeping, containers, hooks, state dicts, init, layers' train/eval
semantics against numpy, and the Tensor methods generated from the registry."""
import math

import numpy as np
import pytest

import anydevice as ad
from anydevice import nn
from anydevice.nn import init

LOCAL = ["cpu", "npu:0", "xpu:0", "dcu:0", "opencl:0"]


def _np(t):
    return np.asarray(t.numpy(), dtype=np.float64)


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.ReLU()])
        self.head = nn.Sequential(nn.Linear(4, 2))
        self.register_buffer("steps", ad.zeros((), dtype=ad.int64))
        self.register_buffer("scratch", ad.zeros(2), persistent=False)

    def forward(self, x):
        x = self.fc(x)
        for m in self.blocks:
            x = m(x)
        return self.head(x)


# --- Module bookkeeping -----------------------------------------------------------------------
def test_names_follow_pytorch_and_shared_modules_count_once():
    net = _Net()
    assert [n for n, _ in net.named_parameters()] == [
        "fc.weight", "fc.bias", "blocks.0.weight", "blocks.0.bias", "head.0.weight", "head.0.bias"]
    assert [n for n, _ in net.named_buffers()] == ["steps", "scratch"]
    assert list(net.state_dict()) == ["steps"] + [n for n, _ in net.named_parameters()]  # own entries first
    assert [n for n, _ in net.named_modules()] == ["", "fc", "blocks", "blocks.0", "blocks.1", "head", "head.0"]
    assert [n for n, _ in net.named_children()] == ["fc", "blocks", "head"]
    shared = nn.Linear(2, 2)
    seq = nn.Sequential(shared, nn.ReLU(), shared)
    assert len(seq.parameters()) == 2 and len(list(seq.modules())) == 3
    frozen = nn.Linear(2, 2)
    frozen.requires_grad_(False)
    assert [n for n, _ in frozen.named_parameters()] == ["weight", "bias"] and not frozen.weight.requires_grad
    assert nn.Layer is nn.Module


def test_train_eval_apply_and_zero_grad():
    net = _Net()
    assert net.training and all(m.training for m in net.modules())
    assert net.eval() is net and not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())
    seen = []
    net.apply(lambda m: seen.append(type(m).__name__))
    assert seen[-1] == "_Net" and seen.count("Linear") == 3
    net(ad.ones((2, 3))).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.clear_grad()
    assert all(p.grad is None for p in net.parameters())
    with pytest.raises(TypeError, match="mode must be a bool"):
        net.train("no")


def test_state_dict_round_trip_with_buffers_and_clear_shape_errors():
    a, b = _Net(), _Net()
    a.steps = ad.asarray(7, dtype=ad.int64)
    res = b.load_state_dict(a.state_dict())
    assert res.missing_keys == [] and res.unexpected_keys == []
    assert b.steps.item() == 7 and b.steps.dtype == ad.int64
    x = ad.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())
    sd = a.state_dict()
    sd["blocks.0.weight"] = np.zeros((4, 5), np.float32)
    with pytest.raises(ValueError, match=r"blocks.0.weight has shape \(4, 4\) in the model but \(4, 5\) in the state"):
        b.load_state_dict(sd)
    with pytest.raises(KeyError, match=r"missing keys \['steps'\]"):
        b.load_state_dict({k: v for k, v in a.state_dict().items() if k != "steps"})
    with pytest.raises(TypeError, match="buffer 'steps' must be a Tensor or None"):
        b.steps = 3


def test_to_moves_parameters_buffers_and_grads_between_devices():
    net = _Net()
    net(ad.ones((2, 3))).sum().backward()
    w, g = net.fc.weight, net.fc.weight.grad.numpy()
    net.to("npu:0")
    assert net.fc.weight is w and w.device == "npu:0" and w.grad.device == "npu:0"
    assert net.steps.device == "npu:0" and net.scratch.device == "npu:0"
    np.testing.assert_array_equal(w.grad.numpy(), g)
    net.to("cpu", ad.float64)  # npu has no float64
    assert w.dtype == ad.float64 and w.grad.dtype == ad.float64 and net.steps.dtype == ad.int64
    out = net(ad.ones((2, 3), dtype=ad.float64))
    assert out.device == "cpu" and out.dtype == ad.float64 and w.device == "cpu"


def test_forward_hooks_and_pre_hooks_are_removable():
    lin = nn.Linear(2, 2)
    calls = []
    pre = lin.register_forward_pre_hook(lambda m, args: (args[0] * 0.0,))
    post = lin.register_forward_hook(lambda m, args, out: calls.append(out.shape) or out + 1.0)
    out = lin(ad.ones((3, 2)))
    np.testing.assert_allclose(out.numpy(), np.broadcast_to(lin.bias.numpy() + 1, (3, 2)), rtol=1e-6)
    assert calls == [(3, 2)]
    pre.remove()
    post.remove()
    np.testing.assert_allclose(lin(ad.ones((1, 2))).numpy(), (lin.weight.numpy().sum(1) + lin.bias.numpy())[None],
                               rtol=1e-5)
    assert calls == [(3, 2)]
    with pytest.raises(TypeError, match="hook must be callable"):
        lin.register_forward_hook(3)


def test_containers_index_slice_append_and_dict():
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert len(seq) == 3 and isinstance(seq[-1], nn.Linear) and isinstance(seq[1:], nn.Sequential)
    assert len(seq[1:]) == 2 and seq[1:][1] is seq[2]
    seq.append(nn.Identity())
    assert len(seq) == 4 and list(seq.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    with pytest.raises(IndexError, match="index 9 is out of range for 4 modules"):
        seq[9]
    with pytest.raises(TypeError, match="argument 1 is a int, not a Module"):
        nn.Sequential(nn.ReLU(), 3)
    ml = nn.ModuleList([nn.Linear(1, 1)]) + nn.ModuleList([nn.Linear(1, 2)])
    assert [n for n, _ in ml.named_parameters()] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    md = nn.ModuleDict({"enc": nn.Linear(2, 2), "act": nn.ReLU()})
    assert md.keys() == ["enc", "act"] and "enc" in md and len(md) == 2
    assert [n for n, _ in md.named_parameters()] == ["enc.weight", "enc.bias"]
    with pytest.raises(KeyError, match=r"no module 'dec'; its keys are \['enc', 'act'\]"):
        md["dec"]


# --- init -------------------------------------------------------------------------------------
def test_init_statistics_and_gains():
    w = nn.parameter(np.zeros((400, 300), np.float32))
    g = ad.Generator().manual_seed(0)
    init.kaiming_uniform_(w, a=math.sqrt(5), generator=g)
    assert abs(np.abs(_np(w)).max() - 1 / math.sqrt(300)) < 1e-4
    init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu", generator=g)
    assert abs(_np(w).std() - math.sqrt(2 / 400)) < 0.01 * math.sqrt(2 / 400) * 3
    init.xavier_uniform_(w, generator=g)
    assert abs(_np(w).var() - 2 / 700) < 0.03 * 2 / 700
    init.xavier_normal_(w, gain=init.calculate_gain("tanh"), generator=g)
    assert abs(_np(w).std() - 5 / 3 * math.sqrt(2 / 700)) < 0.01 * 5 / 3 * math.sqrt(2 / 700) * 3
    init.trunc_normal_(w, std=0.5, a=-0.4, b=0.6, generator=g)
    pdf = [math.exp(-z * z / 2) / math.sqrt(2 * math.pi) for z in (-0.8, 1.2)]
    cdf = [0.5 * (1 + math.erf(z / math.sqrt(2))) for z in (-0.8, 1.2)]
    want = 0.5 * (pdf[0] - pdf[1]) / (cdf[1] - cdf[0])  # the mean of the truncated normal
    assert _np(w).min() >= -0.4 and _np(w).max() <= 0.6 and abs(_np(w).mean() - want) < 0.002
    init.constant_(w, 0.25)
    assert np.all(_np(w) == 0.25) and w.requires_grad
    assert init.calculate_gain("leaky_relu", 0.2) == pytest.approx(math.sqrt(2 / 1.04))
    with pytest.raises(ValueError, match="unsupported nonlinearity 'swish'"):
        init.calculate_gain("swish")
    with pytest.raises(ValueError, match=r"at least 2 dimensions, got shape \(3,\)"):
        init.xavier_uniform_(nn.parameter(np.zeros(3, np.float32)))
    with pytest.raises(ValueError, match="mode must be 'fan_in' or 'fan_out'"):
        init.kaiming_uniform_(w, mode="fan")


@pytest.mark.parametrize("device", LOCAL[1:])
def test_same_seed_same_weights_on_every_device(device):
    ad.manual_seed(123)
    ref = nn.Linear(5, 7).state_dict()
    ad.manual_seed(123)
    other = nn.Linear(5, 7, device=device)
    assert other.weight.device == device
    for k, v in other.state_dict().items():
        np.testing.assert_array_equal(v, ref[k])
    ad.manual_seed(5)
    a = init.normal_(nn.parameter(np.zeros((3, 4), np.float32), device=device)).numpy()
    ad.manual_seed(5)
    np.testing.assert_array_equal(a, init.normal_(nn.parameter(np.zeros((3, 4), np.float32))).numpy())


# --- generated Tensor methods -------------------------------------------------------------------
def test_tensor_methods_generated_from_the_registry():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = ad.asarray(a)
    np.testing.assert_allclose(t.exp().numpy(), np.exp(a), rtol=1e-6)
    np.testing.assert_array_equal(t.argmax(dim=1).numpy(), [2, 2])
    assert t.sum(dim=1, keepdim=True).shape == (2, 1)
    assert t.view(3, 2).shape == (3, 2) and t.view((6,)).shape == (6,)
    np.testing.assert_array_equal(t.permute(1, 0).numpy(), a.T)
    np.testing.assert_array_equal(t.transpose(0, 1).numpy(), a.T)
    assert t.unsqueeze(0).shape == (1, 2, 3) and t.unsqueeze(0).unsqueeze(-1).squeeze().shape == (2, 3)
    assert t.reshape(1, 2, 3).flatten().shape == (6,) and t.reshape(2, 1, 3).flatten(1).shape == (2, 3)
    assert t.expand(4, 2, 3).shape == (4, 2, 3)
    assert (t.long().dtype, t.int().dtype, t.double().dtype, t.half().dtype, t.bool().dtype) == (
        ad.int64, ad.int32, ad.float64, ad.float16, ad.bool)
    np.testing.assert_array_equal(t.clamp(1, 4).numpy(), np.clip(a, 1, 4))
    np.testing.assert_array_equal(t.maximum(2.0).numpy(), np.maximum(a, 2))
    assert t.dim() == 2 and t.numel() == 6 and t.T.shape == (3, 2)
    p = nn.parameter(a)
    p.clone().square().sum().backward()
    np.testing.assert_allclose(p.grad.numpy(), 2 * a)
    with pytest.raises(ValueError, match="start_dim 1 comes after end_dim 0"):
        t.flatten(1, 0)


# --- layers -----------------------------------------------------------------------------------
def test_batchnorm_running_statistics_and_eval_match_numpy():
    rng = np.random.default_rng(0)
    bn = nn.BatchNorm2d(3, momentum=0.2)
    with ad.no_grad():
        bn.weight[...] = ad.asarray([1.0, 2.0, 0.5])
        bn.bias[...] = ad.asarray([0.0, -1.0, 3.0])
    rm, rv = np.zeros(3), np.ones(3)
    for step in range(3):
        x = rng.standard_normal((4, 3, 2, 5)) * (step + 1) + step
        y = bn(ad.asarray(x, dtype=ad.float32))
        mu, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
        want = (x - mu[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5) * np.array([1, 2, 0.5])[:, None, None] \
            + np.array([0, -1, 3])[:, None, None]
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)
        rm, rv = 0.8 * rm + 0.2 * mu, 0.8 * rv + 0.2 * var * 40 / 39
    np.testing.assert_allclose(bn.running_mean.numpy(), rm, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), rv, rtol=1e-5)
    assert bn.num_batches_tracked.item() == 3
    bn.eval()
    x = rng.standard_normal((2, 3, 2, 2))
    want = (x - rm[:, None, None]) / np.sqrt(rv[:, None, None] + 1e-5) * np.array([1, 2, 0.5])[:, None, None] \
        + np.array([0, -1, 3])[:, None, None]
    np.testing.assert_allclose(bn(ad.asarray(x, dtype=ad.float32)).numpy(), want, rtol=1e-4, atol=1e-4)
    assert bn.num_batches_tracked.item() == 3  # eval does not count
    cum = nn.BatchNorm1d(2, momentum=None)
    xs = [rng.standard_normal((5, 2)) for _ in range(2)]
    for x in xs:
        cum(ad.asarray(x, dtype=ad.float32))
    np.testing.assert_allclose(cum.running_mean.numpy(), np.mean([x.mean(0) for x in xs], axis=0), rtol=1e-5)
    with pytest.raises(ValueError, match=r"BatchNorm2d\(\): input must be 4-D"):
        bn(ad.ones((2, 3)))
    with pytest.raises(ValueError, match="input has 2 channels .* but num_features=3"):
        bn(ad.ones((2, 2, 1, 1)))


def test_dropout_train_and_eval_and_seeded_masks():
    drop = nn.Dropout(0.25)
    x = ad.ones((200, 50))
    ad.manual_seed(3)
    y = drop(x).numpy()
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.02 and np.allclose(y[kept], 1 / 0.75)
    ad.manual_seed(3)
    np.testing.assert_array_equal(drop(x).numpy(), y)
    np.testing.assert_array_equal(drop.eval()(x).numpy(), x.numpy())
    with pytest.raises(ValueError, match=r"p must be a probability in \[0, 1\], got 1.5"):
        nn.Dropout(1.5)


def test_conv_layers_shapes_defaults_and_errors():
    ad.manual_seed(0)
    conv = nn.Conv2d(3, 8, 3, padding="same", groups=1)
    assert conv.weight.shape == (8, 3, 3, 3) and np.abs(conv.weight.numpy()).max() <= 1 / math.sqrt(27)
    assert conv(ad.ones((2, 3, 5, 6))).shape == (2, 8, 5, 6)
    assert nn.Conv2d(4, 4, 3, stride=2, dilation=2, groups=2)(ad.ones((1, 4, 9, 9))).shape == (1, 4, 3, 3)
    assert nn.Conv1d(2, 5, 3, padding=1)(ad.ones((4, 2, 7))).shape == (4, 5, 7)
    up = nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1)
    assert up.weight.shape == (3, 2, 3, 3) and up(ad.ones((1, 3, 4, 4))).shape == (1, 2, 8, 8)
    x = np.random.default_rng(1).standard_normal((1, 3, 4, 4)).astype(np.float32)
    w, b = conv.weight.numpy(), conv.bias.numpy()
    pad = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.array([[[(pad[0, :, i:i + 3, j:j + 3] * w[o]).sum() + b[o] for j in range(4)] for i in range(4)]
                     for o in range(8)])
    np.testing.assert_allclose(conv(ad.asarray(x)).numpy()[0], want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"Conv2d\(\): input must be 3-D \(C, \.\.\.\) or 4-D \(N, C, H, W\), got shape \(5, 3\)"):
        conv(ad.ones((5, 3)))
    with pytest.raises(ValueError, match="input has 4 channels .* expects in_channels=3"):
        conv(ad.ones((1, 4, 5, 5)))
    with pytest.raises(ValueError, match=r"divisible by groups \(2\)"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="padding='same' needs stride 1"):
        nn.Conv2d(3, 4, 3, stride=2, padding="same")
    assert nn.MaxPool2d(2)(ad.ones((1, 1, 4, 6))).shape == (1, 1, 2, 3)
    assert nn.AvgPool2d(3, stride=1, padding=1)(ad.ones((1, 2, 4, 4))).shape == (1, 2, 4, 4)
    assert nn.AdaptiveAvgPool2d((1, None))(ad.ones((2, 3, 5, 4))).shape == (2, 3, 1, 4)


def test_embedding_padding_norms_and_activations():
    ad.manual_seed(1)
    emb = nn.Embedding(6, 3, padding_idx=2)
    assert np.all(emb.weight.numpy()[2] == 0)
    emb(ad.asarray([[2, 1], [2, 4]])).sum().backward()
    g = emb.weight.grad.numpy()
    assert np.all(g[2] == 0) and np.all(g[1] == 1) and np.all(g[0] == 0)
    x = np.random.default_rng(2).standard_normal((2, 4, 3)).astype(np.float32)
    ln = nn.LayerNorm(3)
    want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(ln(ad.asarray(x)).numpy(), want, rtol=1e-4, atol=1e-5)
    gn = nn.GroupNorm(2, 4)
    xg = x.reshape(2, 2, 2, 3)
    want = ((xg - xg.mean((2, 3), keepdims=True)) / np.sqrt(xg.var((2, 3), keepdims=True) + 1e-5)).reshape(x.shape)
    np.testing.assert_allclose(gn(ad.asarray(x)).numpy(), want, rtol=1e-4, atol=1e-5)
    t = ad.asarray(x)
    for mod, fn in ((nn.LeakyReLU(0.1), lambda v: np.where(v > 0, v, 0.1 * v)), (nn.SiLU(), lambda v: v / (1 + np.exp(-v))),
                    (nn.Tanh(), np.tanh), (nn.Sigmoid(), lambda v: 1 / (1 + np.exp(-v))), (nn.ReLU(), lambda v: np.maximum(v, 0)),
                    (nn.Softmax(dim=1), lambda v: np.exp(v) / np.exp(v).sum(1, keepdims=True))):
        np.testing.assert_allclose(mod(t).numpy(), fn(x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="num_channels \\(4\\) must be divisible by num_groups \\(3\\)"):
        nn.GroupNorm(3, 4)


def _np_mha(m, q, k, v, mask):
    e, h = m.embed_dim, m.num_heads
    w, b = m.in_proj_weight.numpy().astype(np.float64), m.in_proj_bias.numpy().astype(np.float64)
    qs, ks, vs = (t @ w[i * e:(i + 1) * e].T + b[i * e:(i + 1) * e] for i, t in enumerate((q, k, v)))
    split = [t.reshape(t.shape[0], t.shape[1], h, e // h).transpose(0, 2, 1, 3) for t in (qs, ks, vs)]
    s = split[0] @ split[1].transpose(0, 1, 3, 2) / math.sqrt(e // h) + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = (p @ split[2]).transpose(0, 2, 1, 3).reshape(q.shape)
    return o @ m.out_proj.weight.numpy().T + m.out_proj.bias.numpy(), p.mean(1)


def test_multihead_attention_matches_numpy_with_causal_and_padding_masks():
    ad.manual_seed(4)
    m = nn.MultiheadAttention(8, 2, batch_first=True)
    with ad.no_grad():
        m.in_proj_bias[...] = ad.asarray(np.linspace(-1, 1, 24), dtype=ad.float32)
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, 4, 8)).astype(np.float32) for _ in range(3))
    pad = np.array([[False] * 4, [False, False, False, True]])
    out, w = m(ad.asarray(q), ad.asarray(k), ad.asarray(v), key_padding_mask=ad.asarray(pad), is_causal=True)
    mask = np.where(np.tri(4, dtype=bool), 0, -np.inf)[None, None] + np.where(pad, -np.inf, 0)[:, None, None, :]
    want_o, want_w = _np_mha(m, q, k, v, mask)
    np.testing.assert_allclose(out.numpy(), want_o, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w.numpy(), want_w, rtol=1e-4, atol=1e-6)
    m.batch_first = False
    seq_first, none = m(*(ad.asarray(t.transpose(1, 0, 2)) for t in (q, k, v)), need_weights=False)
    want_o, _ = _np_mha(m, q, k, v, 0.0)
    np.testing.assert_allclose(seq_first.numpy().transpose(1, 0, 2), want_o, rtol=1e-4, atol=1e-5)
    assert none is None
    with pytest.raises(ValueError, match=r"attn_mask must have shape \(4, 4\) or \(4, 4, 4\), got \(3, 3\)"):
        m(*(ad.asarray(t.transpose(1, 0, 2)) for t in (q, k, v)), attn_mask=ad.ones((3, 3)))


def test_loss_modules_call_their_functional():
    rng = np.random.default_rng(6)
    logits = ad.asarray(rng.standard_normal((5, 4)).astype(np.float32))
    target = ad.asarray([0, 3, 1, 1, 2])
    F = nn.functional
    w = ad.asarray([1.0, 2.0, 0.5, 1.0])
    assert nn.CrossEntropyLoss(weight=w, label_smoothing=0.1)(logits, target).item() == pytest.approx(
        F.cross_entropy(logits, target, weight=w, label_smoothing=0.1).item())
    lp = F.log_softmax(logits, dim=1)
    assert nn.NLLLoss(reduction="sum")(lp, target).item() == pytest.approx(-sum(
        lp.numpy()[i, t] for i, t in enumerate([0, 3, 1, 1, 2])), rel=1e-5)
    a, b = ad.asarray(rng.standard_normal(6).astype(np.float32)), ad.asarray(rng.standard_normal(6).astype(np.float32))
    d = np.abs(a.numpy() - b.numpy())
    assert nn.L1Loss()(a, b).item() == pytest.approx(d.mean(), rel=1e-5)
    assert nn.HuberLoss(delta=0.5)(a, b).item() == pytest.approx(
        np.where(d < 0.5, 0.5 * d * d, 0.5 * (d - 0.25)).mean(), rel=1e-5)
    assert nn.SmoothL1Loss(beta=0.5)(a, b).item() == pytest.approx(np.where(d < 0.5, d * d, d - 0.25).mean(), rel=1e-5)
    assert nn.MSELoss()(a, b).item() == pytest.approx((d * d).mean(), rel=1e-5)
    p = ad.asarray(np.array([0.2, 0.9], np.float32))
    y = ad.asarray(np.array([0.0, 1.0], np.float32))
    assert nn.BCELoss()(p, y).item() == pytest.approx(-(np.log(0.8) + np.log(0.9)) / 2, rel=1e-5)
    assert nn.BCEWithLogitsLoss(pos_weight=ad.asarray([2.0]))(p, y).item() == pytest.approx(
        F.binary_cross_entropy_with_logits(p, y, pos_weight=ad.asarray([2.0])).item())
    assert nn.KLDivLoss(reduction="batchmean")(lp, F.softmax(logits, dim=1)).item() == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(TypeError, match="unexpected argument 'smoothing'"):
        nn.CrossEntropyLoss(smoothing=0.1)


def test_parameter_alias_and_register_parameter():
    m = nn.Module()
    m.w = nn.Parameter(ad.ones((2,), device="npu:0"))
    assert m.w.requires_grad and m.w.device == "npu:0" and [n for n, _ in m.named_parameters()] == ["w"]
    m.register_parameter("frozen", nn.Parameter(ad.zeros(1), requires_grad=False).requires_grad_(True))
    m.frozen.requires_grad_(False)
    assert [n for n, _ in m.named_parameters()] == ["w", "frozen"] and list(m.state_dict()) == ["w", "frozen"]
    with pytest.raises(TypeError, match="must be a Tensor that requires grad"):
        m.register_parameter("x", ad.zeros(1))
    with pytest.raises(KeyError, match="already a parameter"):
        m.register_buffer("w", ad.zeros(1))


def test_bilinear_and_unflatten_match_numpy():
    ad.manual_seed(2)
    bl = nn.Bilinear(3, 4, 2)
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    want = np.einsum("ni,kij,nj->nk", a, bl.weight.numpy(), b) + bl.bias.numpy()
    np.testing.assert_allclose(bl(ad.asarray(a), ad.asarray(b)).numpy(), want, rtol=1e-5, atol=1e-5)
    assert np.abs(bl.weight.numpy()).max() <= 1 / math.sqrt(3)
    assert nn.Unflatten(1, (2, 3))(ad.ones((4, 6, 5))).shape == (4, 2, 3, 5)
