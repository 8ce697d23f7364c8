"""A 64-256-10 perceptron on sklearn's 8x8 digits: ``python examples/mlp_digits.py --device npu:0``.

Prints the loss curve and the test accuracy; the same seed gives the same curve on every device
(within float32 rounding). Data-parallel on two simulated npus, each rank training on its half of
every batch of 64 (rank 0 prints; the loss shown is rank 0's half):
``anydevice launch --nproc-per-node 2 --devices npu examples/mlp_digits.py``."""
from __future__ import annotations

import anydevice as ad
from anydevice import nn

try:
    from examples import _common
except ImportError:  # run as a script from any directory
    import _common


def model(device) -> nn.Module:
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)


def run(device: str = "cpu", steps: int = 300, seed: int = 0, log=print) -> dict:
    ad.manual_seed(seed)
    return _common.classify_digits(model(device), device, steps, seed, 3e-3, log=log)


if __name__ == "__main__":
    a = _common.arguments(__doc__.splitlines()[0], 300)
    run(a.device, a.steps, a.seed)
