"""Mixed precision on real models: a small CNN (Conv2d, BatchNorm, Dropout) on 8x8 digits and a
causal-attention language model, trained under autocast with GradScaler on npu (bfloat16, chosen
automatically) and on dcu (float16, asked for), end within a stated tolerance of float32 training;
a gradient made inf makes the scaler skip the step and back off."""
from __future__ import annotations

import numpy as np
import pytest

import anydevice as ad
from anydevice import amp, nn

STEPS = 12
#: the final loss under autocast may differ from float32 training by this fraction of it
#: (bfloat16 keeps 8 significant bits, float16 11: a dozen steps of Adam drift by a few percent)
REL_TOL = 0.08


def _digits():
    pytest.importorskip("sklearn", reason="scikit-learn provides the digits data")
    from sklearn.datasets import load_digits

    d = load_digits()
    X = (d.images[:256] / 16.0).astype(np.float32)[:, None]
    return X, d.target[:256].astype(np.int64)


def _cnn():
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Dropout(0.1), nn.Linear(8 * 4 * 4, 10))


class _TinyLM(nn.Module):
    def __init__(self, vocab=12, dim=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.attn = nn.MultiheadAttention(dim, 2, batch_first=True)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, vocab)

    def forward(self, tokens):
        h = self.emb(tokens)
        t = tokens.shape[1]
        causal = ad.triu(ad.ones((t, t), dtype=ad.bool, device=tokens.device), k=1)
        a, _ = self.attn(h, h, h, attn_mask=causal, need_weights=False)
        return self.out(self.norm(h + a))


def _lm_data():
    seq = np.array([(3 * i + i // 5) % 12 for i in range(8 * 17)], dtype=np.int64).reshape(8, 17)
    return seq[:, :-1], seq[:, 1:]


def _train(kind, device, mixed, dtype=None, inject_at=None):
    ad.manual_seed(0)
    if kind == "cnn":
        X, y = _digits()
        model = _cnn().to(device)
    else:
        X, y = _lm_data()
        model = _TinyLM().to(device)
    Xd, yd = ad.asarray(X, device=device), ad.asarray(y, device=device)
    opt = ad.optim.Adam(model.parameters(), lr=1e-2)
    scaler = amp.GradScaler(init_scale=2.0 ** 10, enabled=mixed)
    losses, skipped = [], []
    for step in range(STEPS):
        opt.zero_grad()
        with amp.autocast(device, dtype=dtype, enabled=mixed):
            logits = model(Xd)
            if kind == "lm":
                logits = ad.reshape(logits, (-1, logits.shape[-1]))
            loss = nn.functional.cross_entropy(logits, ad.reshape(yd, (-1,)))
        assert loss.dtype is ad.float32
        scaler.scale(loss).backward()
        if step == inject_at:
            p = next(iter(model.parameters()))
            p.grad = p.grad * float("inf")
        before = [p.numpy().copy() for p in model.parameters()]
        scale = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        if step == inject_at:
            skipped.append(all(np.array_equal(b, p.numpy()) for b, p in zip(before, model.parameters())))
            skipped.append(scaler.get_scale() == scale * 0.5)
        losses.append(loss.item())
    assert all(p.dtype is ad.float32 for p in model.parameters())  # master weights
    return losses, skipped


@pytest.mark.parametrize("kind", ["cnn", "lm"])
@pytest.mark.parametrize("device,dtype", [("npu", None), ("dcu", ad.float16)], ids=["npu-auto", "dcu-float16"])
def test_autocast_training_ends_near_float32(kind, device, dtype):
    ref, _ = _train(kind, device, mixed=False)
    got, _ = _train(kind, device, mixed=True, dtype=dtype)
    assert ref[-1] < ref[0] * 0.9, ref  # it learns
    assert abs(got[-1] - ref[-1]) <= REL_TOL * ref[-1], (got, ref)
    assert all(np.isfinite(got))


def test_autocast_picks_bfloat16_on_npu():
    with amp.autocast("npu") as region:
        assert region.dtype is ad.bfloat16
        a = ad.ones((2, 2), device="npu")
        assert ad.matmul(a, a).dtype is ad.bfloat16


@pytest.mark.parametrize("kind", ["cnn", "lm"])
def test_scaler_skips_a_step_with_an_injected_inf(kind):
    losses, skipped = _train(kind, "dcu", mixed=True, dtype=ad.float16, inject_at=3)
    assert skipped == [True, True]  # parameters unchanged and the scale halved
    assert all(np.isfinite(losses))
