"""The OpenCL row kernels: softmax and log_softmax (one work-group per row), cross_entropy (per-row
losses, then their sum or mean) and cross_entropy_grad: results against the cpu backend and a
float64 numpy oracle over every axis, short and long rows, the 16-bit floats and special values;
launches per call; the same errors as on the cpu; gradients through them."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("anydevice_opencl")

from opencl_support import has_dtype, needs_opencl, no_fallback, spy_launches  # noqa: E402, F401

import anydevice as ad  # noqa: E402

pytestmark = [needs_opencl, pytest.mark.usefixtures("no_fallback")]
RNG = np.random.default_rng(11)
FNS = {"softmax": ad.softmax, "log_softmax": ad.log_softmax}


def _oracle(kind, x, axis):
    x = x.astype(np.float64)
    if x.ndim == 0:
        s = x - x
        return np.exp(s) / np.exp(s) if kind == "softmax" else s - np.log(np.exp(s))
    s = x - np.max(x, axis=axis, keepdims=True)
    lse = np.log(np.sum(np.exp(s), axis=axis, keepdims=True))
    return np.exp(s - lse) if kind == "softmax" else s - lse


@pytest.mark.parametrize("kind", list(FNS))
@pytest.mark.parametrize("shape,axis", [((256, 10), -1), ((4, 1000), 1), ((3, 5, 7), 1), ((3, 5, 7), 0),
                                        ((2, 300, 3), 1), ((64,), 0), ((65,), -1), ((1, 1), 0), ((), -1)])
def test_matches_cpu_and_oracle(kind, shape, axis):
    x = (RNG.standard_normal(shape) * 4).astype(np.float32)
    got = FNS[kind](ad.asarray(x, device="opencl"), axis=axis).numpy()
    cpu = FNS[kind](ad.asarray(x), axis=axis).numpy()
    assert got.shape == cpu.shape == x.shape and got.dtype == cpu.dtype
    np.testing.assert_allclose(got, _oracle(kind, x, axis), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, cpu, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", list(FNS))
@pytest.mark.parametrize("dtype,tol", [("float16", 2e-3), ("bfloat16", 1.6e-2), ("float64", 1e-12)])
def test_other_float_dtypes(kind, dtype, tol):
    if not has_dtype(dtype):
        pytest.skip(f"the OpenCL device has no {dtype}")
    x = ad.astype(ad.asarray((RNG.standard_normal((33, 70)) * 3).astype(np.float32)), dtype)
    got = FNS[kind](x.to("opencl"), axis=-1)
    want = FNS[kind](x, axis=-1)  # the cpu: computed in float32 (float64) and rounded once
    assert got.dtype == want.dtype
    np.testing.assert_allclose(ad.astype(got, "float64").numpy(), ad.astype(want, "float64").numpy(),
                               rtol=tol, atol=tol)


@pytest.mark.parametrize("kind", list(FNS))
def test_special_values_as_on_the_cpu(kind):
    x = np.array([[1.0, np.nan, 2.0], [-np.inf, -np.inf, -np.inf], [np.inf, 1.0, 2.0], [-np.inf, 0.0, 1.0],
                  [1e30, -1e30, 0.0], [3.0, 3.0, 3.0]], np.float32)
    got = FNS[kind](ad.asarray(x, device="opencl")).numpy()
    cpu = FNS[kind](ad.asarray(x)).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(cpu))
    np.testing.assert_allclose(got, cpu, rtol=1e-6, atol=1e-7)
    assert np.isnan(got[:3]).all() and not np.isnan(got[3:]).any()


@pytest.mark.parametrize("kind", list(FNS))
def test_one_launch_per_call(kind, monkeypatch):
    seen = spy_launches(monkeypatch)
    x = ad.asarray(RNG.standard_normal((8, 200)).astype(np.float32), device="opencl")
    FNS[kind](x, axis=-1).numpy()
    FNS[kind](x[:, :40], axis=-1).numpy()
    FNS[kind](x[:, :10], axis=-1).numpy()
    smx = [s for s in seen if s[0] == "smx"]
    assert [s[1:] for s in smx] == [(kind, "float32", 64), (kind, "float32", 1), (kind, "float32", "k10")], seen


@pytest.mark.parametrize("kind", list(FNS))
@pytest.mark.parametrize("args,kw,err", [((np.zeros((3, 0), np.float32),), {"axis": 1}, ValueError),
                                          ((np.zeros((3, 4), np.float32),), {"axis": 2}, Exception),
                                          ((np.zeros((3, 4), np.int32),), {}, TypeError)])
def test_errors_as_on_the_cpu(kind, args, kw, err):
    with pytest.raises(err) as on_cpu:
        FNS[kind](ad.asarray(args[0]), **kw)
    with pytest.raises(type(on_cpu.value)) as on_cl:
        FNS[kind](ad.asarray(args[0], device="opencl"), **kw)
    assert str(on_cl.value) == str(on_cpu.value)


def test_empty_rows_give_empty_results():
    x = np.zeros((0, 5), np.float32)
    for f in FNS.values():
        got = f(ad.asarray(x, device="opencl"), axis=-1)
        assert got.shape == (0, 5) and got.numpy().size == 0


@pytest.mark.parametrize("kind", list(FNS))
def test_gradient_matches_cpu(kind):
    x = (RNG.standard_normal((16, 12)) * 2).astype(np.float32)
    w = RNG.standard_normal((16, 12)).astype(np.float32)
    grads = []
    for dev in ("cpu", "opencl"):
        t = ad.asarray(x, device=dev)
        t.requires_grad_(True)
        ad.sum(FNS[kind](t, axis=-1) * ad.asarray(w, device=dev)).backward()
        grads.append(t.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-6)


# --- cross_entropy / cross_entropy_grad -----------------------------------------------------------
def _ce_oracle(x, lab, reduction):
    x = x.astype(np.float64)
    s = x - x.max(axis=-1, keepdims=True)
    lsm = s - np.log(np.exp(s).sum(axis=-1, keepdims=True))
    nll = -np.take_along_axis(lsm, lab[..., None], axis=-1)[..., 0]
    return nll if reduction == "none" else nll.sum() if reduction == "sum" else nll.mean()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(256, 10), (4, 100), (2, 3, 5), (5,), (3, 1)])
def test_cross_entropy_matches_cpu_and_oracle(shape, reduction):
    x = (RNG.standard_normal(shape) * 3).astype(np.float32)
    lab = RNG.integers(0, shape[-1], shape[:-1])
    got = ad.cross_entropy(ad.asarray(x, device="opencl"), ad.asarray(lab, device="opencl"), reduction=reduction)
    cpu = ad.cross_entropy(ad.asarray(x), ad.asarray(lab), reduction=reduction)
    assert got.shape == cpu.shape and got.dtype == cpu.dtype
    np.testing.assert_allclose(got.numpy(), _ce_oracle(x, lab, reduction), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got.numpy(), cpu.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype,tol", [("float16", 5e-3), ("bfloat16", 3e-2), ("float64", 1e-12)])
def test_cross_entropy_other_dtypes(dtype, tol, reduction):
    if not has_dtype(dtype):
        pytest.skip(f"the OpenCL device has no {dtype}")
    x = ad.astype(ad.asarray((RNG.standard_normal((300, 7)) * 3).astype(np.float32)), dtype)
    lab = ad.asarray(RNG.integers(0, 7, 300).astype(np.int32))
    got = ad.cross_entropy(x.to("opencl"), lab.to("opencl"), reduction=reduction)
    want = ad.cross_entropy(x, lab, reduction=reduction)  # per-row losses in float32, rounded once
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(ad.astype(got, "float64").numpy(), ad.astype(want, "float64").numpy(), rtol=tol, atol=tol)
    g = ad.astype(ad.asarray(RNG.standard_normal(tuple(want.shape)).astype(np.float32)), dtype)
    gg = ad.cross_entropy_grad(x.to("opencl"), lab.to("opencl"), g.to("opencl"), reduction=reduction)
    gw = ad.cross_entropy_grad(x, lab, g, reduction=reduction)
    np.testing.assert_allclose(ad.astype(gg, "float64").numpy(), ad.astype(gw, "float64").numpy(), rtol=tol, atol=tol)


def test_cross_entropy_with_infinite_logits_as_on_the_cpu():
    x = np.array([[0.0, -np.inf, 1.0], [np.inf, 0.0, 1.0], [np.nan, 0.0, 0.0], [2.0, 2.0, -np.inf]], np.float32)
    lab = np.array([0, 0, 1, 1])
    got = ad.cross_entropy(ad.asarray(x, device="opencl"), ad.asarray(lab, device="opencl"), reduction="none").numpy()
    cpu = ad.cross_entropy(ad.asarray(x), ad.asarray(lab), reduction="none").numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(cpu))
    np.testing.assert_allclose(got, cpu, rtol=1e-6)
    assert np.isfinite(got[[0, 3]]).all()  # a -inf logit elsewhere in the row leaves the label's loss finite


def test_cross_entropy_launches(monkeypatch):
    seen = spy_launches(monkeypatch)
    x = ad.asarray(RNG.standard_normal((256, 10)).astype(np.float32), device="opencl")
    lab = ad.asarray(RNG.integers(0, 10, 256), device="opencl")
    ad.cross_entropy(x, lab).numpy()
    assert [s[0] for s in seen if s[0] in ("smx", "cetot")] == ["smx", "cetot"], seen
    seen.clear()
    ad.cross_entropy_grad(x, lab, ad.asarray(np.float32(1.0), device="opencl")).numpy()
    assert [s[:2] for s in seen] == [("smx", "ceg")], seen


@pytest.mark.parametrize("labels", [[0, 3], [-1, 0]])
def test_cross_entropy_label_errors_as_on_the_cpu(labels):
    x, lab = np.zeros((2, 3), np.float32), np.asarray(labels)
    with pytest.raises(IndexError) as on_cpu:
        ad.cross_entropy(ad.asarray(x), ad.asarray(lab))
    with pytest.raises(IndexError) as on_cl:
        ad.cross_entropy(ad.asarray(x, device="opencl"), ad.asarray(lab, device="opencl"))
    assert str(on_cl.value) == str(on_cpu.value)


def test_cross_entropy_grad_skips_labels_out_of_range_as_on_the_cpu():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    lab, g = np.asarray([-1, 4, 2]), np.float32(0.5)
    got = ad.cross_entropy_grad(ad.asarray(x, device="opencl"), ad.asarray(lab, device="opencl"),
                                ad.asarray(g, device="opencl")).numpy()
    cpu = ad.cross_entropy_grad(ad.asarray(x), ad.asarray(lab), ad.asarray(g)).numpy()
    np.testing.assert_allclose(got, cpu, rtol=1e-6, atol=1e-7)


def test_cross_entropy_of_no_labels():
    x, lab = np.zeros((0, 4), np.float32), np.zeros(0, np.int64)
    for red in ("mean", "sum", "none"):
        got = ad.cross_entropy(ad.asarray(x, device="opencl"), ad.asarray(lab, device="opencl"), reduction=red).numpy()
        with warnings.catch_warnings():  # numpy's "mean of empty slice"
            warnings.simplefilter("ignore", RuntimeWarning)
            cpu = ad.cross_entropy(ad.asarray(x), ad.asarray(lab), reduction=red).numpy()
        np.testing.assert_array_equal(got, cpu)


def test_training_loss_gradient_matches_cpu():
    x = (RNG.standard_normal((32, 6)) * 2).astype(np.float32)
    lab = RNG.integers(0, 6, 32)
    grads = []
    for dev in ("cpu", "opencl"):
        t = ad.asarray(x, device=dev)
        t.requires_grad_(True)
        ad.cross_entropy(t * 1.5, ad.asarray(lab, device=dev)).backward()
        grads.append(t.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-7)


# --- softmax_grad / log_softmax_grad --------------------------------------------------------------
GRADS = {"softmax": ad.softmax_grad, "log_softmax": ad.log_softmax_grad}


@pytest.mark.parametrize("kind", list(GRADS))
@pytest.mark.parametrize("shape,axis", [((256, 10), -1), ((4, 1000), 1), ((3, 5, 7), 1), ((3, 5, 7), 0), ((65,), 0)])
def test_backward_ops_match_cpu(kind, shape, axis):
    x = (RNG.standard_normal(shape) * 2).astype(np.float32)
    g = RNG.standard_normal(shape).astype(np.float32)
    outs = [FNS[kind](ad.asarray(x, device=d), axis=axis) for d in ("cpu", "opencl")]
    cpu = GRADS[kind](ad.asarray(g), outs[0], axis=axis).numpy()
    got = GRADS[kind](ad.asarray(g, device="opencl"), outs[1], axis=axis).numpy()
    np.testing.assert_allclose(got, cpu, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", list(GRADS))
def test_backward_ops_one_launch_and_0d(kind, monkeypatch):
    seen = spy_launches(monkeypatch)
    o = FNS[kind](ad.asarray(RNG.standard_normal((8, 30)).astype(np.float32), device="opencl"))
    seen.clear()
    GRADS[kind](ad.ones_like(o), o).numpy()
    assert [s[:2] for s in seen] == [("smxg", kind)], seen
    z = GRADS[kind](ad.asarray(np.float32(2.0), device="opencl"), ad.asarray(np.float32(1.0), device="opencl"))
    assert z.shape == () and float(z) == 0.0


@pytest.mark.parametrize("kind", list(GRADS))
def test_backward_ops_errors_as_on_the_cpu(kind):
    a, b = np.ones((2, 3), np.float32), np.ones(3, np.float32)
    with pytest.raises(ValueError) as on_cpu:
        GRADS[kind](ad.asarray(a), ad.asarray(b))
    with pytest.raises(ValueError) as on_cl:
        GRADS[kind](ad.asarray(a, device="opencl"), ad.asarray(b, device="opencl"))
    assert str(on_cl.value) == str(on_cpu.value)
