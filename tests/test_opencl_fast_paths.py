"""The OpenCL backend's fast kernel paths, each checked against numpy on the shapes that reach
it and on the edges around it: the packed-panel float32 matmul (odd sizes, narrow and short
matrices, batches, broadcast batches), the vectorized reductions and element-wise kernels
(sizes that are not multiples of the vector width, offsets inside a buffer, strided inputs)."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

pytest.importorskip("anydevice_opencl")

import anydevice as ad  # noqa: E402
from anydevice import dispatch  # noqa: E402
from anydevice.device import get_backend  # noqa: E402
from anydevice_opencl import kernels  # noqa: E402

_reason = ("pyopencl is not installed (pip install anydevice-opencl)" if importlib.util.find_spec("pyopencl") is None
           else ad.device.unavailable_reason("opencl"))
pytestmark = pytest.mark.skipif(bool(_reason), reason=f"no usable OpenCL device: {_reason}")
RNG = np.random.default_rng(7)


_saved_mode = []


def setup_module():  # every kernel here runs on the device: a CPU fallback is an error
    _saved_mode.append(dispatch.set_fallback_mode("error"))


def teardown_module():
    dispatch.set_fallback_mode(_saved_mode.pop())


def on(a):
    return ad.asarray(np.asarray(a), device="opencl")


def ran(name: str) -> bool:
    """Whether a kernel of that C name has been fetched from the program cache."""
    rt = get_backend("opencl").runtime
    return any(k.kernel.function_name == name for k in rt.programs.kernels.values())


# --- matmul: B packed into column panels, register-blocked micro-kernel --------------------------
@pytest.mark.parametrize("shapes", [((64, 64), (64, 64)), ((300, 200), (200, 77)), ((7, 9), (9, 1000)), ((40, 3), (3, 41)), ((3, 1000), (1000, 100)),
                                    ((600, 500), (500, 5)), ((513, 1), (1, 700)), ((129, 257), (257, 33)),
                                    ((3, 70, 50), (3, 50, 90)), ((2, 3, 70, 50), (50, 90)),
                                    ((70, 50), (4, 50, 90)), ((1000,), (1000, 300)), ((300, 1000), (1000,))])
def test_packed_matmul_matches_numpy(shapes):
    a = RNG.standard_normal(shapes[0]).astype(np.float32)
    b = RNG.standard_normal(shapes[1]).astype(np.float32)
    want = a @ b
    got = ad.matmul(on(a), on(b)).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(a.shape[-1]))


def test_packed_matmul_is_the_path_for_large_float32():
    a = RNG.standard_normal((130, 70)).astype(np.float32)
    b = RNG.standard_normal((70, 129)).astype(np.float32)
    assert 130 * 129 * 70 >= kernels.SPECIALIZE_ELEMENTS
    np.testing.assert_allclose(ad.matmul(on(a), on(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)
    assert ran("mm_float32_pack") and ran("mm_float32_packed")


def test_packed_matmul_of_views_and_transposes():
    a = RNG.standard_normal((200, 300)).astype(np.float32)
    x = on(a)
    np.testing.assert_allclose(ad.matmul(x[10:150], x.T[:, 20:90]).numpy(), a[10:150] @ a.T[:, 20:90],
                               rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(ad.matmul(x.T, x).numpy(), a.T @ a, rtol=1e-4, atol=1e-3)


def test_packed_matmul_propagates_nan_and_inf():
    a = RNG.standard_normal((100, 80)).astype(np.float32)
    b = RNG.standard_normal((80, 90)).astype(np.float32)
    a[3, 5], b[7, 60] = np.nan, np.inf
    got, want = ad.matmul(on(a), on(b)).numpy(), a @ b
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-4, atol=1e-3)


# --- vectorized reductions: rows (reduced axes last) and columns (reduced axes first) ------------
def _fp64() -> bool:
    return get_backend("opencl").runtime.has_fp64(0)


REDUCERS = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}


@pytest.mark.parametrize("shape,axis", [((1_000_003,), None), ((37, 1001), 1), ((37, 1001), 0), ((5, 70_000), 1),
                                        ((70_000, 3), 0), ((130, 7, 65), (0, 1)), ((3, 4, 50), 1), ((64, 31), -1),
                                        ((2, 64), 0), ((129,), 0), ((17,), None), ((0, 5), 0), ((6, 0), 1)])
@pytest.mark.parametrize("kind", ["sum", "max", "min"])
def test_float32_reductions_match_numpy(shape, axis, kind):
    a = RNG.standard_normal(shape).astype(np.float32)
    if kind != "sum" and 0 in shape:
        return  # max/min of nothing is an error, tested elsewhere
    want = REDUCERS[kind](a.astype(np.float64), axis=axis)
    got = getattr(ad, kind)(on(a), axis=axis).numpy()
    assert got.shape == np.shape(want) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.sqrt(max(a.size, 1)))


@pytest.mark.parametrize("dtype", ["int16", "uint8", "int64", "float64"])  # int8 sums run in int64
@pytest.mark.parametrize("kind", ["sum", "prod", "max", "min"])
def test_reductions_of_other_dtypes_are_exact(dtype, kind):
    if dtype == "float64" and not _fp64():
        pytest.skip("float64 needs cl_khr_fp64")
    d = np.dtype(dtype)
    hi = 3 if kind == "prod" else 100
    a = RNG.integers(0 if d.kind == "u" else -hi, hi, size=(33, 517)).astype(d)
    for axis in (None, 0, 1):
        want = REDUCERS[kind](a, axis=axis) if kind in ("max", "min") else getattr(ad, kind)(ad.asarray(a), axis=axis).numpy()
        got = getattr(ad, kind)(on(a), axis=axis).numpy()
        assert got.dtype == np.asarray(want).dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape,axis", [((40_000,), None), ((9, 3000), 1), ((3000, 9), 0), ((300, 70), 0)])
def test_max_min_propagate_nan_and_infinities(shape, axis):
    a = RNG.standard_normal(shape).astype(np.float32)
    flat = a.reshape(-1)
    flat[::997] = np.inf
    flat[5::1999] = -np.inf
    flat[1234 % flat.size] = np.nan
    for kind in ("max", "min"):
        want = REDUCERS[kind](a, axis=axis)
        np.testing.assert_array_equal(getattr(ad, kind)(on(a), axis=axis).numpy(), want)


def test_sum_reads_a_view_at_an_offset():
    a = RNG.standard_normal((64, 1000)).astype(np.float32)
    x = ad.reshape(on(a.reshape(-1)), (64, 1000))  # a view sharing the buffer
    np.testing.assert_allclose(ad.sum(x[7:40], axis=1).numpy(), a[7:40].sum(axis=1), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(ad.sum(x[:, 3:900], axis=0).numpy(), a[:, 3:900].sum(axis=0), rtol=1e-5, atol=1e-4)
    assert ran("vred_sum_float32_rows") and ran("vred_sum_float32_cols")


# --- small uploads are queued, not waited for ------------------------------------------------------
def test_small_uploads_are_queued_from_a_private_copy():
    from anydevice_opencl import runtime

    src = np.arange(1000, dtype=np.float32)
    x = on(src)
    src[:] = -1  # the caller may reuse its array at once
    np.testing.assert_array_equal(x.numpy(), np.arange(1000, dtype=np.float32))
    xs = [on(np.full(7, i, np.int32)) for i in range(runtime.MAX_QUEUED_H2D + 50)]  # past the in-flight cap
    assert len(get_backend("opencl").runtime.pending[0]) <= runtime.MAX_QUEUED_H2D
    np.testing.assert_array_equal(ad.stack(xs).numpy(), np.repeat(np.arange(len(xs), dtype=np.int32)[:, None], 7, 1))
    big = RNG.standard_normal(runtime.QUEUED_H2D_BYTES // 4 + 1).astype(np.float32)  # blocking path
    np.testing.assert_array_equal(on(big).numpy(), big)


# --- element-wise: 16 elements per work-item for the IEEE arithmetic of float32/float64 ----------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [1, 15, 16, 17, 4099, 100_003])
def test_vector_elementwise_matches_numpy_bit_for_bit(dtype, n):
    if dtype == "float64" and not _fp64():
        pytest.skip("float64 needs cl_khr_fp64")
    a = RNG.standard_normal(n).astype(dtype)
    b = RNG.standard_normal(n).astype(dtype) + 0.5
    s = np.asarray(RNG.standard_normal(), dtype=dtype)
    x, y, z = on(a), on(b), on(s)
    for _ in range(kernels.SPECIALIZE_LAUNCHES + 1):  # past the generic tier
        got = [x + y, x - y, x * y, x / y, -x, x * z, z - x, x / z]
    want = [a + b, a - b, a * b, a / b, -a, a * s, s - a, a / s]
    for g, w in zip(got, want):
        assert g.numpy().dtype == w.dtype
        np.testing.assert_array_equal(g.numpy(), w)
    assert ran(f"ew_add_{dtype}_{dtype}_{dtype}_cc") and ran(f"ew_multiply_{dtype}_{dtype}_{dtype}_cs")


def test_vector_elementwise_at_offsets_and_with_nan():
    a = RNG.standard_normal(5000).astype(np.float32)
    a[17], a[4001] = np.nan, np.inf
    x = ad.reshape(on(a), (50, 100))
    for _ in range(kernels.SPECIALIZE_LAUNCHES + 1):
        got = (x[3:20] * x[21:38]).numpy()  # inputs at element offsets that are not multiples of 16
    np.testing.assert_array_equal(got, a.reshape(50, 100)[3:20] * a.reshape(50, 100)[21:38])


# --- strided kernels on 2-D work-group tiles (1 to 4 collapsed dims, more by a host loop) ---------
@pytest.mark.parametrize("shape,perm", [((300, 257), (1, 0)), ((17, 33, 65), (2, 0, 1)), ((9, 10, 11, 12), (3, 1, 0, 2)),
                                        ((3, 5, 7, 9, 11), (4, 2, 0, 3, 1)), ((4100, 3), (1, 0))])
def test_large_permutes_match_numpy(shape, perm):
    a = RNG.standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(ad.permute_dims(on(a), perm).numpy(), np.transpose(a, perm))
    out = np.transpose(a, perm).shape
    src = [kernels._cstrides(shape)[d] for d in perm]
    dims, _ = kernels._collapse(out, [kernels._cstrides(out), src])
    assert ran(f"ew_copy_uint32_uint32_g{min(len(dims), 4)}")


def test_large_strided_slices_and_broadcasts():
    a = RNG.standard_normal((70, 90, 3)).astype(np.float32)
    x = on(a)
    np.testing.assert_array_equal(x[::3, 5:80:2, 1].numpy(), a[::3, 5:80:2, 1])
    np.testing.assert_array_equal(x[::-1, :, ::-2].numpy(), a[::-1, :, ::-2])
    b = RNG.standard_normal((70, 1, 3)).astype(np.float32)
    np.testing.assert_array_equal((x + on(b)).numpy(), a + b)  # broadcast: a strided add
    v = RNG.standard_normal(20_000).astype(np.float32)
    np.testing.assert_array_equal(on(v)[1::7].numpy(), v[1::7])


# --- launches: scalar arguments as bytes, only changed ones set ----------------------------------
def test_scalar_arguments_of_every_type_reach_the_kernel():
    for _ in range(3):  # the same kernel object with changing ints, numpy floats and int codes
        for start, step, n in ((0.5, 0.25, 9), (-3.0, 1.5, 17), (2.0, -0.125, 33)):
            np.testing.assert_array_equal(ad.arange(start, start + step * n, step, device="opencl").numpy(),
                                          np.arange(start, start + step * n, step))
        for n in (5, 4099, 300):
            a = RNG.standard_normal(n).astype(np.float32)
            np.testing.assert_array_equal((on(a) * 3.0).numpy(), a * np.float32(3.0))
            np.testing.assert_array_equal(ad.arange(n, device="opencl").numpy(), np.arange(n))


@pytest.mark.parametrize("shapes", [((300, 64), (64, 256)), ((5, 40, 64), (5, 64, 96)), ((2, 40, 64), (64, 32)),
                                    ((33, 1000), (1000, 64))])
def test_matmul_reads_small_whole_panel_b_in_place(shapes):
    a = RNG.standard_normal(shapes[0]).astype(np.float32)
    b = RNG.standard_normal(shapes[1]).astype(np.float32)
    assert shapes[1][-1] % 32 == 0 and np.prod(shapes[1][-2:]) * 4 <= kernels.UNPACKED_B_BYTES
    np.testing.assert_allclose(ad.matmul(on(a), on(b)).numpy(), a @ b, rtol=1e-4, atol=1e-3)
