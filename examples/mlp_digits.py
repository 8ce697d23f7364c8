"""A 64-256-10 perceptron on sklearn's 8x8 digits: ``python examples/mlp_digits.py --device npu:0``.

Prints the loss curve and the test accuracy; the same seed gives the same curve on every device
(within float32 rounding)."""
from __future__ import annotations

import anydevice as ad
from anydevice import nn, optim

try:
    from examples import _common
except ImportError:  # run as a script from any directory
    import _common


def model(device) -> nn.Module:
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)


def run(device: str = "cpu", steps: int = 300, seed: int = 0, log=print) -> dict:
    ad.manual_seed(seed)
    x, y, xt, yt = _common.digits(seed)
    net = model(device)
    ad.manual_seed(seed + 1)  # dropout draws from the device's default generator: restart them all alike
    opt = optim.Adam(net.parameters(), lr=3e-3)
    ce = nn.CrossEntropyLoss()
    losses = _common.train(net, opt, lambda m, b: ce(m(b[0]), b[1]), _common.batches(x, y, 64, seed, device), steps, log)
    acc = _common.accuracy(net, xt, yt, device)
    log(f"test accuracy {acc:.2%} on {device}")
    return {"losses": losses, "accuracy": acc}


if __name__ == "__main__":
    a = _common.arguments(__doc__.splitlines()[0], 300)
    run(a.device, a.steps, a.seed)
