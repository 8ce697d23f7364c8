"""What the OpenCL kernel test modules share: the skip reason when no OpenCL device works, a
fixture that turns CPU fallbacks into errors (every call must run on the device), and a spy on
the kernel launches of ``anydevice_opencl.kernels``, and a count of all launches."""
from __future__ import annotations

import importlib.util

import pytest

import anydevice as ad
from anydevice import dispatch

REASON = ("pyopencl is not installed (pip install anydevice-opencl)" if importlib.util.find_spec("pyopencl") is None
          else ad.device.unavailable_reason("opencl"))
needs_opencl = pytest.mark.skipif(bool(REASON), reason=f"no usable OpenCL device: {REASON}")


@pytest.fixture
def no_fallback():
    saved = dispatch.set_fallback_mode("error")
    yield
    dispatch.set_fallback_mode(saved)


def spy_launches(monkeypatch) -> list:
    """The specs launched through ``kernels._launch`` from now on."""
    from anydevice_opencl import kernels

    seen, launch = [], kernels._launch
    monkeypatch.setattr(kernels, "_launch", lambda ctx, spec, *a: (seen.append(spec), launch(ctx, spec, *a))[1])
    return seen


def count_launches(monkeypatch):
    """A function giving the kernels queued from now on, through pyopencl or the backend's C launch."""
    import pyopencl as cl

    from anydevice_opencl.runtime import native_launch

    c = native_launch()
    count, real = [0], cl.enqueue_nd_range_kernel
    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", lambda *a, **k: (count.__setitem__(0, count[0] + 1), real(*a, **k))[1])
    start = c.launches() if c is not None else 0
    return lambda: count[0] + (c.launches() - start if c is not None else 0)


def has_dtype(name: str) -> bool:
    return name in ad.__array_namespace_info__().dtypes(device="opencl")
