"""The OpenCL optimizer update kernels give the cpu kernels' bits: Adam in its one-launch form
(small parameters) and its two-launch form (scalars first, then a barrier-free element-wise
launch), with each option, and the step count advanced once either way."""
from __future__ import annotations

import numpy as np
import pytest
from opencl_support import needs_opencl, no_fallback  # noqa: F401

import anydevice as ad

pytestmark = needs_opencl

OPTIONS = [{}, {"amsgrad": True, "weight_decay": 0.1}, {"weight_decay": 0.1, "decoupled": True},
           {"beta1": 0.0, "beta2": 0.5}]


def _adam(device, arrays, step, kw):
    t = [ad.asarray(a, device=device) for a in [*arrays, step]]
    attrs = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0, "decoupled": False,
             "amsgrad": False, **kw}
    return [np.asarray(o.numpy()) for o in ad.adam_update(*t, **attrs)]


@pytest.mark.parametrize("n", [7, 300, 5000], ids=["tiny", "one launch", "two launches"])
@pytest.mark.parametrize("kw", OPTIONS, ids=["plain", "amsgrad+L2", "AdamW", "beta1 0"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_adam_update_gives_the_cpu_bits(no_fallback, n, kw, dtype):  # noqa: F811
    if dtype == "float64" and "float64" not in ad.__array_namespace_info__().dtypes(device="opencl"):
        pytest.skip("the OpenCL device has no float64")
    rng = np.random.default_rng(n)
    p, g, m = (rng.standard_normal(n).astype(dtype) for _ in range(3))
    v, vmax = (np.abs(rng.standard_normal(n)).astype(dtype) * 0.1 + c for c in (0.2, 0.3))
    step = np.asarray(4.0, np.float32)
    want = _adam("cpu", [p, g, m, v, vmax], step, kw)
    got = _adam("opencl", [p, g, m, v, vmax], step, kw)
    for name, a, b in zip(("param", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"), got, want):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        np.testing.assert_array_equal(a, b, err_msg=name, strict=True)
    assert float(got[-1]) == 5.0


def test_large_parameters_take_the_two_launch_form(monkeypatch):
    from anydevice_opencl import kernels_optim

    seen = []
    run = kernels_optim._run
    monkeypatch.setattr(kernels_optim, "_run", lambda ctx, name, *a, **k: (seen.append(name), run(ctx, name, *a, **k))[1])
    big, small = kernels_optim.ADAM_SPLIT + 1, kernels_optim.ADAM_SPLIT
    for n in (small, big):
        p = np.ones(n, np.float32)
        _adam("opencl", [p, p, p, p, p], np.asarray(0.0, np.float32), {})
    assert seen == ["adam_update", "adam_scalars", "adam_apply"]
