"""The OpenCL backend's element-wise launch in C (``_launch.c``): the same results as the
pyopencl path for every shape, dtype, offset and stream; the Python path takes over for what it
does not handle; a kernel's arguments stay right when launches through pyopencl (replays,
generic calls) come between; OpenCL errors reach the caller as pyopencl raises them."""
from __future__ import annotations

import gc
import os
import subprocess
import sys

import numpy as np
import pytest
from opencl_support import count_launches, needs_opencl

import anydevice as ad
from anydevice.device import Stream, stream_guard

pytestmark = needs_opencl
RNG = np.random.default_rng(11)


def _native():
    from anydevice_opencl.runtime import native_launch

    c = native_launch()
    if c is None:
        from anydevice_opencl.runtime import native_status

        pytest.skip(f"the C launch is not in use: {native_status()}")
    return c


def on(a):
    return ad.asarray(a, device="opencl")


def _add_launcher(ctx):
    """The Launcher of the specialized contiguous float32 add (its arguments: out, x, y, n)."""
    return ctx.runtime.programs.kernels[(ctx.index, ("ew", "add", ("float32", "float32"), "float32", "cc"))]


@pytest.fixture
def specialized(monkeypatch):
    """Every element-wise launch runs the specialized kernel (the one the hot path holds)."""
    from anydevice_opencl import kernels

    monkeypatch.setattr(kernels, "SPECIALIZE_LAUNCHES", 0)


def test_status_says_which_path_launches():
    from anydevice_opencl import plugin
    from anydevice_opencl.runtime import native_launch, native_status

    status = native_status()
    assert status.startswith("C (") == (native_launch() is not None), status
    assert plugin.anydevice_environment("opencl")["launch"] == status


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint8"])
@pytest.mark.parametrize("shape", [(16,), (3, 5), (0,), (1,), (4097,), (2, 0, 3), ()])
def test_results_as_numpy_on_the_hot_path(dtype, shape, specialized, monkeypatch):
    c = _native()
    if dtype == "float64" and "float64" not in ad.__array_namespace_info__().dtypes(device="opencl"):
        pytest.skip("the OpenCL device has no float64")
    a = np.abs(RNG.standard_normal(shape) * 10).astype(dtype)
    b = np.abs(RNG.standard_normal(shape) * 10).astype(dtype)
    x, y = on(a), on(b)
    before = c.launches()
    launches = count_launches(monkeypatch)
    with np.errstate(over="ignore"):  # uint8 wraps, as on the device
        want = a + b, a * b, -a
    for _ in range(3):  # the first call specializes and adds the launch; later ones take the hot path
        for got, w in zip(((x + y), (x * y), (-x)), want):
            assert got.dtype.name == dtype and got.shape == shape
            np.testing.assert_array_equal(got.numpy(), w)
    n = int(np.prod(shape))
    assert launches() == (9 if n else 0)
    assert (c.launches() > before) == (n > 0)


def test_the_hot_path_holds_the_launches_it_ran():
    c = _native()
    from anydevice_opencl import kernels

    fn = ad.device.get_backend("opencl").kernels.lookup("add", ad.float32).fn
    assert isinstance(fn, c.Elementwise) and fn.__name__ == "opencl_add"
    x = on(np.ones(8, np.float32))
    for _ in range(kernels.SPECIALIZE_LAUNCHES + 2):
        x + x
    assert fn.plans >= 1


def test_offsets_broadcasts_keywords_and_mixed_dtypes(specialized):
    _native()
    base = RNG.standard_normal(64).astype(np.float32)
    whole = on(base)
    for lo in (0, 1, 3, 17):
        part = ad.reshape(whole, (64,))[lo:lo + 20]  # may be a view at an element offset
        np.testing.assert_array_equal((part + part).numpy(), base[lo:lo + 20] * 2)
    m = RNG.standard_normal((4, 5)).astype(np.float32)
    r = RNG.standard_normal(5).astype(np.float32)
    np.testing.assert_array_equal((on(m) + on(r)).numpy(), m + r)  # broadcast: the Python kernel
    d = RNG.standard_normal(5)
    np.testing.assert_array_equal((on(r) + on(d)).numpy(), r + d)  # float32 + float64: promoted first
    g = ad.nn.functional.gelu(on(m), approximate="tanh").numpy()  # a keyword: the Python kernel
    assert g.shape == m.shape and np.all(np.isfinite(g))


def test_a_stream_gets_the_launch(specialized):
    _native()
    a = RNG.standard_normal(1000).astype(np.float32)
    x = on(a)
    s = Stream(x.device)
    with stream_guard(s):
        for _ in range(3):
            y = x * x + x
    s.synchronize()
    np.testing.assert_array_equal(y.numpy(), a * a + a)


def test_arguments_stay_right_when_pyopencl_launches_between(specialized):
    _native()
    from anydevice_opencl import kernels

    ctx = ad.device.get_backend("opencl").contexts[0]
    a, b = RNG.standard_normal(32).astype(np.float32), RNG.standard_normal(32).astype(np.float32)
    x, y = on(a)._buf, on(b)._buf
    fn = ad.device.get_backend("opencl").kernels.lookup("add", ad.float32).fn
    host = ad.device.get_backend("opencl")

    def read(buf):
        return np.asarray(host.to_host(buf, 0, buf.shape, ad.float32))

    np.testing.assert_array_equal(read(fn(ctx, x, y)), a + b)
    run = _add_launcher(ctx)
    out = ctx.empty((32,), ad.float32)
    q = ctx.runtime.queues[ctx.index]
    grid = (kernels._items(32, 16, 128),), (128,)
    for first, second in ((x, y), (y, y), (x, x)):
        # the C path, then pyopencl with other arguments, then the C path again with the first ones
        np.testing.assert_array_equal(read(fn(ctx, first, second)), read(first) + read(second))
        run._arrays_py(q, *grid, (out, y, x), 32)
        np.testing.assert_array_equal(read(out), b + a)
        run(q, *grid, [out.block.handle, out.block.offset // 4, x.block.handle, x.block.offset // 4,
                       x.block.handle, x.block.offset // 4, 32])
        np.testing.assert_array_equal(read(out), a + a)
        np.testing.assert_array_equal(read(fn(ctx, first, second)), read(first) + read(second))


def test_compiled_replays_between_eager_launches():
    _native()
    a = RNG.standard_normal((8, 16)).astype(np.float32)
    b = RNG.standard_normal((8, 16)).astype(np.float32)
    x, y = on(a), on(b)
    f = ad.jit.compile(lambda u, v: (u + v) * u - v)
    for _ in range(4):
        np.testing.assert_allclose(f(x, y).numpy(), (a + b) * a - b, rtol=1e-6)
        np.testing.assert_array_equal((y + x).numpy(), b + a)
        np.testing.assert_allclose(f(y, x).numpy(), (b + a) * b - a, rtol=1e-6)


def test_an_opencl_error_is_pyopencls_and_leaves_the_kernel_usable(specialized):
    import pyopencl as cl

    _native()
    ctx = ad.device.get_backend("opencl").contexts[0]
    x = on(np.arange(16, dtype=np.float32))
    (x + x).numpy()
    run = _add_launcher(ctx)
    out = ctx.empty((16,), ad.float32)
    q = ctx.runtime.queues[ctx.index]
    too_big = 1 << 40  # no device has work-groups this large
    errors = []
    for launch in (run.arrays, run._arrays_py):
        with pytest.raises(cl.Error) as e:
            launch(q, (too_big,), (too_big,), (out, x._buf, x._buf), 16)
        errors.append((type(e.value), e.value.code))
    assert errors[0] == errors[1]
    np.testing.assert_array_equal((x + x).numpy(), np.arange(16, dtype=np.float32) * 2)


def test_launch_objects_are_collected():
    c = _native()
    from anydevice_opencl.runtime import Launcher

    ctx = ad.device.get_backend("opencl").contexts[0]
    kernel = next(iter(ctx.runtime.programs.kernels.values())).kernel

    def live():
        gc.collect()
        return sum(type(o) is c.Launch for o in gc.get_objects())

    before = live()
    for _ in range(50):
        Launcher(kernel)  # a Launcher and its C launch refer to each other
    assert live() <= before + 1


def test_off_by_environment_gives_the_same_results():
    code = ("import numpy as np, anydevice as ad\n"
            "from anydevice_opencl.runtime import native_launch, native_status\n"
            "x = ad.asarray(np.arange(40, dtype=np.float32), device='opencl')\n"
            "for _ in range(40): y = (x * x - x) / (x + 1.0)\n"
            "print(native_launch() is None, native_status().split()[0], y.numpy().tobytes().hex())\n")
    out = {}
    for flag in ("0", "1"):
        env = dict(os.environ, ANYDEVICE_OPENCL_NATIVE=flag)
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        out[flag] = r.stdout.split()
    assert out["0"][:2] == ["True", "off"]
    assert out["0"][2] == out["1"][2]
