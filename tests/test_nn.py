"""nn.Linear / Module and the SGD and Adam optimizers against numpy implementations."""
import numpy as np
import pytest

import anydevice as ad
from anydevice import nn, optimizer


def _data(seed=0):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((3, 5)) * 0.5).astype(np.float32)
    b = (rng.standard_normal(3) * 0.1).astype(np.float32)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    y = rng.standard_normal((6, 3)).astype(np.float32)
    return w, b, x, y


def _np_grads(w, b, x, y):
    diff = x @ w.T + b - y
    d = 2.0 * diff / diff.size
    return float(np.mean(diff * diff)), d.T @ x, d.sum(axis=0)


def _model(w, b, device="cpu"):
    m = nn.Linear(5, 3, device=device)
    m.load_state_dict({"weight": w, "bias": b})
    return m


def test_linear_forward_matches_numpy_and_has_paddle_torch_layout():
    w, b, x, _ = _data()
    m = _model(w, b)
    assert m.weight.shape == (3, 5) and m.bias.shape == (3,)
    assert m.weight.requires_grad and m.bias.requires_grad
    out = m(ad.asarray(x))
    assert out.shape == (6, 3) and out.dtype == ad.float32
    np.testing.assert_allclose(out.numpy(), x @ w.T + b, rtol=1e-5, atol=1e-6)
    nb = nn.Linear(5, 3, bias=False)
    nb.weight = nn.parameter(w)
    assert nb.bias is None and len(nb.parameters()) == 1
    np.testing.assert_allclose(nb(ad.asarray(x)).numpy(), x @ w.T, rtol=1e-5, atol=1e-6)


def test_linear_default_init_is_bounded_and_reproducible_with_rng():
    a = nn.Linear(16, 4, rng=np.random.default_rng(1))
    b = nn.Linear(16, 4, rng=np.random.default_rng(1))
    assert np.array_equal(a.weight.numpy(), b.weight.numpy())
    assert np.abs(a.weight.numpy()).max() <= 0.25 and np.abs(a.bias.numpy()).max() <= 0.25


def test_linear_rejects_bad_arguments():
    with pytest.raises(ValueError, match="in_features must be a positive int"):
        nn.Linear(0, 3)
    with pytest.raises(TypeError, match="real floating"):
        nn.Linear(2, 3, dtype="int32")


def test_module_parameters_state_dict_and_sequential():
    seq = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 2))
    names = [n for n, _ in seq.named_parameters()]
    assert names == ["0.weight", "0.bias", "2.weight", "2.bias"]
    sd = seq.state_dict()
    other = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 2))
    other.load_state_dict(sd)
    x = ad.asarray(np.ones((2, 5), np.float32))
    np.testing.assert_array_equal(seq(x).numpy(), other(x).numpy())
    with pytest.raises(KeyError, match="missing"):
        other.load_state_dict({"0.weight": sd["0.weight"]})
    with pytest.raises(ValueError, match="has shape"):
        other.load_state_dict({**sd, "0.bias": np.zeros(7)})


def test_mse_loss_backward_matches_numpy():
    w, b, x, y = _data()
    m = _model(w, b)
    loss = nn.MSELoss()(m(ad.asarray(x)), ad.asarray(y))
    loss.backward()
    want_loss, dw, db = _np_grads(w, b, x, y)
    assert abs(loss.item() - want_loss) < 1e-5
    np.testing.assert_allclose(m.weight.grad.numpy(), dw, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m.bias.grad.numpy(), db, rtol=1e-5, atol=1e-6)
    m.zero_grad()
    assert m.weight.grad is None and m.bias.grad is None
    with pytest.raises(ValueError, match="reduction"):
        nn.mse_loss(ad.asarray(x), ad.asarray(x), reduction="avg")


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_matches_numpy_over_steps(momentum):
    w, b, x, y = _data(1)
    m = _model(w, b)
    opt = optimizer.SGD(m.parameters(), lr=0.1, momentum=momentum)
    pw, pb = w.astype(np.float64), b.astype(np.float64)
    bufs = [None, None]
    for _ in range(4):
        opt.zero_grad()
        nn.mse_loss(m(ad.asarray(x)), ad.asarray(y)).backward()
        opt.step()
        _, dw, db = _np_grads(pw, pb, x, y)
        for i, g in enumerate((dw, db)):
            bufs[i] = g if bufs[i] is None or not momentum else momentum * bufs[i] + g
        pw, pb = pw - 0.1 * bufs[0], pb - 0.1 * bufs[1]
    np.testing.assert_allclose(m.weight.numpy(), pw, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m.bias.numpy(), pb, rtol=1e-5, atol=1e-6)


def test_adam_matches_numpy_over_steps_with_weight_decay():
    w, b, x, y = _data(2)
    m = _model(w, b)
    lr, (b1, b2), eps, wd = 0.05, (0.8, 0.99), 1e-6, 0.01
    opt = optimizer.Adam(m, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    ps = [w.astype(np.float64), b.astype(np.float64)]
    ms, vs = [0.0, 0.0], [0.0, 0.0]
    for t in range(1, 6):
        opt.clear_grad()
        nn.mse_loss(m(ad.asarray(x)), ad.asarray(y)).backward()
        opt.step()
        _, dw, db = _np_grads(ps[0], ps[1], x, y)
        for i, g in enumerate((dw, db)):
            g = g + wd * ps[i]
            ms[i] = b1 * ms[i] + (1 - b1) * g
            vs[i] = b2 * vs[i] + (1 - b2) * g * g
            ps[i] = ps[i] - lr * (ms[i] / (1 - b1 ** t)) / (np.sqrt(vs[i] / (1 - b2 ** t)) + eps)
    np.testing.assert_allclose(m.weight.numpy(), ps[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(m.bias.numpy(), ps[1], rtol=1e-5, atol=1e-5)
    assert opt.step_count == 5


def test_optimizer_update_rebinds_and_keeps_earlier_results():
    p = nn.parameter(np.ones(3, np.float32))
    before = p * 1.0
    (p * p).sum().backward()
    optimizer.SGD([p], lr=0.5).step()
    np.testing.assert_array_equal(p.numpy(), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(before.numpy(), [1.0, 1.0, 1.0])
    assert p.requires_grad and p.is_leaf


def test_optimizer_skips_params_without_grad_and_validates_arguments():
    p, q = nn.parameter([1.0, 2.0]), nn.parameter([3.0])
    (p * 2.0).sum().backward()
    optimizer.SGD([p, q], lr=1.0).step()
    np.testing.assert_array_equal(q.numpy(), [3.0])
    np.testing.assert_array_equal(p.numpy(), [-1.0, 0.0])
    with pytest.raises(ValueError, match="lr must be > 0"):
        optimizer.SGD([p], lr=0)
    with pytest.raises(ValueError, match="empty parameter list"):
        optimizer.Adam([], lr=0.1)
    with pytest.raises(ValueError, match="does not require grad"):
        optimizer.SGD([ad.ones(2)], lr=0.1)
    with pytest.raises(ValueError, match=r"betas\[1\] must be in \[0, 1\)"):
        optimizer.Adam([p], betas=(0.9, 1.0))
    with pytest.raises(TypeError, match="finite number"):
        optimizer.SGD([p], lr="fast")


def test_module_to_moves_parameters_keeping_identity():
    w, b, x, y = _data(3)
    m = _model(w, b)
    params = m.parameters()
    opt = optimizer.Adam(m, lr=0.01)
    m.to("cpu", ad.float64)
    assert m.weight is params[0] and m.weight.dtype == ad.float64 and m.weight.requires_grad
    nn.mse_loss(m(ad.asarray(x, dtype=ad.float64)), ad.asarray(y, dtype=ad.float64)).backward()
    opt.step()
    assert m.weight.dtype == ad.float64
    with pytest.raises(TypeError, match="real floating"):
        m.to(dtype=ad.int32)


@pytest.mark.filterwarnings("ignore::anydevice.FallbackWarning")
def test_training_on_a_fake_device_matches_cpu():
    from fakes import FakePlugin, installed

    w, b, x, y = _data(4)
    with installed(FakePlugin(types=("nnfake",)), types=["nnfake"]):
        results = []
        for dev in ("cpu", "nnfake:1"):
            m = _model(w, b, device=dev)
            opt = optimizer.Adam(m.parameters(), lr=0.01)
            for _ in range(3):
                opt.zero_grad()
                nn.mse_loss(m(ad.asarray(x, device=dev)), ad.asarray(y, device=dev)).backward()
                opt.step()
            assert m.weight.device == dev
            results.append(m.state_dict())
    for k in results[0]:
        np.testing.assert_allclose(results[1][k], results[0][k], rtol=1e-6, atol=1e-7)
