"""A 2-layer character-level transformer language model with causal attention, trained on the
short story in examples/data/lighthouse.txt: ``python examples/transformer_lm.py --device xpu:0``.

Prints the loss curve, the next-character accuracy on the held-out last tenth of the text, and a
sample continued greedily from a prompt."""
from __future__ import annotations

import pathlib

import numpy as np

import anydevice as ad
from anydevice import nn, optim

try:
    from examples import _common
except ImportError:  # run as a script from any directory
    import _common

TEXT = pathlib.Path(__file__).with_name("data") / "lighthouse.txt"
BLOCK, WIDTH, HEADS, LAYERS = 32, 64, 4, 2


class Block(nn.Module):
    """Pre-norm transformer block: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU("tanh"), nn.Linear(4 * width, width))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False, is_causal=True)[0]
        return x + self.mlp(self.norm2(x))


class CharLM(nn.Module):
    def __init__(self, vocab: int):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, WIDTH), nn.Embedding(BLOCK, WIDTH)
        self.blocks = nn.Sequential(*(Block(WIDTH, HEADS) for _ in range(LAYERS)))
        self.norm, self.head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, vocab)
        self.register_buffer("positions", ad.arange(BLOCK), persistent=False)

    def forward(self, idx):
        t = idx.shape[-1]
        x = self.tok(idx) + self.pos(self.positions[:t])
        return self.head(self.norm(self.blocks(x)))


def windows(codes: np.ndarray):
    """Every (input, next characters) pair of BLOCK characters."""
    idx = np.arange(len(codes) - BLOCK)[:, None] + np.arange(BLOCK)
    return codes[idx], codes[idx + 1]


def run(device: str = "cpu", steps: int = 200, seed: int = 0, log=print) -> dict:
    ad.manual_seed(seed)
    text = TEXT.read_text(encoding="utf-8")
    chars = sorted(set(text))
    codes = np.array([chars.index(c) for c in text], dtype=np.int64)
    cut = int(0.9 * len(codes))
    x, y = windows(codes[:cut])
    xt, yt = windows(codes[cut:])
    net = CharLM(len(chars)).to(device)
    ad.manual_seed(seed + 1)  # dropout draws from the device's default generator: restart them all alike
    opt = optim.AdamW(net.parameters(), lr=3e-3, weight_decay=0.01)
    ce = nn.CrossEntropyLoss()

    def loss_of(m, b):
        return ce(m(b[0]).reshape(-1, len(chars)), b[1].reshape(-1))

    losses = _common.train(net, opt, loss_of, _common.batches(x, y, 16, seed, device), steps, log)
    acc = _common.accuracy(net, xt, yt, device)
    log(f"next-character accuracy {acc:.2%} on the held-out text on {device}")
    prompt = "The keeper "
    ids = [chars.index(c) for c in prompt]
    with ad.no_grad():
        for _ in range(60):
            logits = net(ad.asarray(np.array([ids[-BLOCK:]]), device=device))
            ids.append(int(logits[0, -1].argmax().item()))
    sample = "".join(chars[i] for i in ids)
    log(f"sample: {sample!r}")
    return {"losses": losses, "accuracy": acc, "sample": sample}


if __name__ == "__main__":
    a = _common.arguments(__doc__.splitlines()[0], 200)
    run(a.device, a.steps, a.seed)
