"""The restore drill: train N steps on npu, save a training checkpoint (model, optimizer, scheduler,
RNG and DataLoader state), load it on npu, dcu and cpu, train M more steps; the losses equal an
uninterrupted N + M run bit for bit on the same device type and within float32 tolerance on
another type. N stops mid-epoch and M crosses an epoch boundary, so the loader's resume and the
next epoch's shuffle are both exercised."""
from __future__ import annotations

import numpy as np
import pytest

import anydevice as ad
from anydevice import nn
from anydevice.data import DataLoader, TensorDataset

N, M, BATCH, ROWS = 5, 7, 32, 256  # 8 batches per epoch


def _setup(device):
    ad.manual_seed(0)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(ROWS, 16)).astype(np.float32)
    y = (np.abs(X[:, :4]).argmax(axis=1)).astype(np.int64)
    loader = DataLoader(TensorDataset(ad.asarray(X), ad.asarray(y)), batch_size=BATCH, shuffle=True,
                        generator=ad.Generator(device="cpu").manual_seed(7), device=device)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 4)).to(device)
    opt = ad.optim.Adam(model.parameters(), lr=1e-2)
    sched = ad.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
    return model, opt, sched, loader


def _train(model, opt, sched, loader, steps, losses, it=None):
    """``steps`` optimizer steps over ``loader`` (epochs restart as needed); returns the open iterator."""
    it = iter(loader) if it is None else it
    done = 0
    while done < steps:
        for xb, yb in it:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.item())
            done += 1
            if done == steps:
                return it
        it = iter(loader)
    return it


def _checkpoint(model, opt, sched, loader, device):
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
            "loader": loader.state_dict(), "rng": ad.get_rng_state(device), "step": N}


@pytest.fixture(scope="module")
def reference():
    model, opt, sched, loader = _setup("npu")
    losses: list = []
    _train(model, opt, sched, loader, N + M, losses)
    return losses


@pytest.mark.parametrize("target", ["npu", "dcu", "cpu"])
def test_resume_on_another_device_continues_the_same_run(tmp_path, reference, target):
    model, opt, sched, loader = _setup("npu")
    first: list = []
    _train(model, opt, sched, loader, N, first)
    assert first == reference[:N]
    path = tmp_path / "train.ckpt"
    ad.save(_checkpoint(model, opt, sched, loader, "npu"), path)

    state = ad.load(path, map_location=target)
    assert state["step"] == N and state["loader"]["batches_yielded"] == N
    model2, opt2, sched2, loader2 = _setup(target)  # fresh objects, other initial weights drawn meanwhile
    model2.load_state_dict(state["model"])
    opt2.load_state_dict(state["optimizer"])
    sched2.load_state_dict(state["scheduler"])
    loader2.load_state_dict(state["loader"])
    ad.set_rng_state(state["rng"], target)
    assert all(str(p.device).startswith(target) for p in model2.parameters())
    rest: list = []
    _train(model2, opt2, sched2, loader2, M, rest)
    if target == "npu":
        assert rest == reference[N:]  # bit for bit on the same device type
    else:
        np.testing.assert_allclose(rest, reference[N:], rtol=2e-5, atol=1e-6)


def test_loader_resume_yields_the_rest_of_the_epoch_in_order():
    x = ad.arange(20)
    loader = DataLoader(TensorDataset(x), batch_size=3, shuffle=True, generator=ad.Generator().manual_seed(3))
    it = iter(loader)
    seen = [next(it)[0].numpy().tolist() for _ in range(2)]
    state = loader.state_dict()
    rest_uninterrupted = [b[0].numpy().tolist() for b in it]
    resumed = DataLoader(TensorDataset(x), batch_size=3, shuffle=True, generator=ad.Generator().manual_seed(99))
    resumed.load_state_dict(state)
    rest = [b[0].numpy().tolist() for b in resumed]
    assert rest == rest_uninterrupted and len(seen) + len(rest) == len(loader)
    assert loader.state_dict() == {"batches_yielded": 0, "generator": None}  # the epoch finished


def test_loader_state_errors():
    loader = DataLoader(TensorDataset(ad.arange(10)), batch_size=4)
    with pytest.raises(ValueError, match="batches_yielded must be an int in 0..3"):
        loader.load_state_dict({"batches_yielded": 9, "generator": None})
    with pytest.raises(ValueError, match="keys"):
        loader.load_state_dict({"position": 1})
    with pytest.raises(ValueError, match="not random"):
        loader.load_state_dict({"batches_yielded": 1, "generator": ad.Generator().get_state()})
