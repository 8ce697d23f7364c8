"""A LeNet-style network with BatchNorm and Dropout on sklearn's 8x8 digits:
``python examples/cnn_digits.py --device opencl:0``.

conv 3x3 (1->16) - BatchNorm - ReLU - max pool 2 - conv 3x3 (16->32) - BatchNorm - ReLU - max pool 2
- Flatten - Linear(128, 64) - ReLU - Dropout(0.25) - Linear(64, 10). Prints the loss curve and the
test accuracy (>= 97 % with the default steps)."""
from __future__ import annotations

import anydevice as ad
from anydevice import nn

try:
    from examples import _common
except ImportError:  # run as a script from any directory
    import _common


def model(device) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(128, 64), nn.ReLU(), nn.Dropout(0.25), nn.Linear(64, 10),
    ).to(device)


def run(device: str = "cpu", steps: int = 400, seed: int = 0, log=print) -> dict:
    ad.manual_seed(seed)
    return _common.classify_digits(model(device), device, steps, seed, 2e-3, shape=(1, 8, 8), log=log)


if __name__ == "__main__":
    a = _common.arguments(__doc__.splitlines()[0], 400)
    run(a.device, a.steps, a.seed)
