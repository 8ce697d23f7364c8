"""Value semantics and their edges, on cpu, npu and OpenCL: ``asarray`` copies, in-place operators
that never change another tensor, explicit numpy interop (arrays refused, scalars accepted),
autograd graphs that are used once unless retained, caches that keep no device memory, and
tensors that refuse to pickle."""
from __future__ import annotations

import copy
import gc
import operator
import pickle
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

import anydevice as ad
from anydevice.engine import autograd as _autograd
from anydevice.ops.registry import all_ops

_ocl = ad.device.unavailable_reason("opencl")
DEVICES = ["cpu", "npu", pytest.param("opencl", marks=pytest.mark.skipif(_ocl is not None, reason=str(_ocl)))]
HINT = r"anydevice\.asarray\(arr, device=t\.device\)"

FLOAT_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
             "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "@": operator.matmul}
INT_OPS = {"&": operator.and_, "|": operator.or_, "^": operator.xor, "<<": operator.lshift, ">>": operator.rshift}
COMPARE_OPS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
               ">=": operator.ge}
INPLACE = {"+": operator.iadd, "-": operator.isub, "*": operator.imul, "/": operator.itruediv,
           "//": operator.ifloordiv, "%": operator.imod, "**": operator.ipow, "@": operator.imatmul,
           "&": operator.iand, "|": operator.ior, "^": operator.ixor, "<<": operator.ilshift, ">>": operator.irshift}


def _operands(sym):
    """``(x, y)`` as numpy arrays of the dtype the operator works on (2x2, so ``@`` works too)."""
    if sym in INT_OPS:
        return np.array([[1, 6], [3, 12]], np.int32), np.array([[1, 2], [2, 0]], np.int32)
    return np.array([[1.5, 2.0], [3.0, 4.5]], np.float32), np.array([[0.5, 1.25], [2.0, 1.5]], np.float32)


def _t(a, device):
    return ad.asarray(a, device=device)


def _npu_allocated() -> int:
    """Bytes allocated on npu:0 once its queued kernels (which keep their buffers) are done."""
    gc.collect()
    ad.device.synchronize("npu")
    return ad.device.memory_allocated("npu")


def _leaf(a, device="npu"):
    """A leaf tensor that requires grad."""
    return ad.asarray(a, device=device).requires_grad_()


# --- 1. asarray copies ---------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_asarray_copy_true_gives_a_new_tensor(device):
    x = _t([1.0, 2.0, 3.0], device)
    y = ad.asarray(x, copy=True)
    assert y is not x and y.device == x.device and y.dtype is x.dtype
    y += 10.0
    y[0] = -1.0
    assert x.tolist() == [1.0, 2.0, 3.0] and y.tolist() == [-1.0, 12.0, 13.0]
    z = ad.asarray(x, dtype=ad.float16, copy=True)
    assert z.dtype is ad.float16 and z.tolist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("device", DEVICES)
def test_asarray_copy_none_and_false_return_the_tensor_itself(device):
    x = _t([1.0, 2.0], device)
    assert ad.asarray(x) is x
    assert ad.asarray(x, copy=False) is x
    assert ad.asarray(x, dtype=x.dtype, device=x.device, copy=False) is x
    converted = ad.asarray(x, dtype=ad.int32)
    assert converted is not x and converted.dtype is ad.int32 and converted.tolist() == [1, 2]
    with pytest.raises(ValueError, match=r"copy=False.*float32 on .* int32 .*needs a copy.*copy=None or copy=True"):
        ad.asarray(x, dtype=ad.int32, copy=False)
    if device != "cpu":
        with pytest.raises(ValueError, match=r"copy=False.*needs a copy"):
            ad.asarray(x, device="cpu", copy=False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("data", [np.arange(3.0), [1, 2, 3], np.float32(2.5)], ids=["ndarray", "list", "np-scalar"])
def test_asarray_never_aliases_host_memory(device, data):
    with pytest.raises(ValueError, match=r"asarray\(copy=False\).*cannot become a tensor without a copy.*immutable"):
        ad.asarray(data, device=device, copy=False)
    arr = np.array([1.0, 2.0, 3.0], np.float32)
    t = ad.asarray(arr, device=device)
    arr[0] = 100.0
    assert t.tolist() == [1.0, 2.0, 3.0], "a tensor made from a numpy array never sees later changes to it"


def test_a_copy_of_a_tensor_in_a_graph_stays_differentiable():
    x = _leaf([1.0, 2.0, 3.0])
    y = ad.asarray(x, copy=True)
    assert y is not x and not y.is_leaf
    (y * y).sum().backward()
    assert x.grad.tolist() == [2.0, 4.0, 6.0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sym", list(INPLACE) + ["[...]=", "[0]="])
def test_an_inplace_operator_never_changes_another_tensor(device, sym):
    a, b = _operands(sym.rstrip("="))

    def update(t):
        if sym == "[...]=":
            t[...] = _t(b, device)
        elif sym == "[0]=":
            t[0] = _t(b[1], device)
        else:
            out = INPLACE[sym](t, _t(b, device))
            assert out is t, "an in-place operator returns the tensor it updated"

    if sym == "[...]=":
        expected = b
    elif sym == "[0]=":
        expected = np.stack([b[1], a[1]])
    else:
        expected = INPLACE[sym](a.copy(), b)

    x = _t(a, device)
    others = {
        "asarray(copy=True)": ad.asarray(x, copy=True), "detach()": x.detach(), "reshape": ad.reshape(x, (4,)),
        "x[:]": x[:], "astype(same)": x.astype(x.dtype), "copy.copy": copy.copy(x),
    }
    update(x)
    np.testing.assert_allclose(x.numpy(), expected, rtol=1e-6)
    for name, o in others.items():
        np.testing.assert_array_equal(o.numpy().reshape(a.shape), a, err_msg=f"{sym} on x changed {name}")
        if o.shape == a.shape:
            update(o)
    np.testing.assert_allclose(x.numpy(), expected, rtol=1e-6)  # ... and updating a copy leaves x alone
    y = ad.asarray(x, copy=True)
    update(y)
    np.testing.assert_allclose(x.numpy(), expected, rtol=1e-6)


# --- 2. numpy interop is explicit ----------------------------------------------------------------
ALL_BINARY = {**FLOAT_OPS, **INT_OPS, **COMPARE_OPS}


def _case(sym, table, device):
    """The operands for ``sym`` as numpy arrays, its function from ``table``, the left one as a tensor."""
    a, b = _operands(sym)
    return a, b, table[sym], _t(a, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sym", list(ALL_BINARY))
def test_tensor_and_ndarray_never_mix_silently(device, sym):
    a, b, fn, t = _case(sym, ALL_BINARY, device)
    for arr in (b, b[:1, :1]):  # a 2-D array, and a 1x1 one (only 0-d arrays act as scalars)
        with pytest.raises(TypeError, match=rf"Tensor {re.escape(sym)} numpy\.ndarray: .*implicitly.*{HINT}"):
            fn(t, arr)
        with pytest.raises(TypeError, match=rf"numpy\.\w+\(\) on \(numpy\.ndarray, Tensor\).*ndarray {re.escape(sym)} Tensor.*{HINT}"):
            fn(arr, t)
    # the fix the message gives works and keeps the device
    r = fn(t, ad.asarray(b, device=t.device))
    assert isinstance(r, ad.Tensor) and r.device == t.device
    np.testing.assert_allclose(r.numpy(), fn(a, b), rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sym", list(INPLACE))
def test_inplace_with_an_ndarray_is_refused_both_ways(device, sym):
    a, b, fn, t = _case(sym, INPLACE, device)
    with pytest.raises(TypeError, match=rf"Tensor {re.escape(sym)}= numpy\.ndarray.*{HINT}"):
        fn(t, b)
    np.testing.assert_array_equal(t.numpy(), a)
    arr = a.copy()
    with pytest.raises(TypeError, match=HINT):
        fn(arr, _t(b, device))
    np.testing.assert_array_equal(arr, a)


@pytest.mark.parametrize("device", DEVICES)
def test_numpy_ufuncs_are_refused_and_np_asarray_is_a_host_copy(device):
    t = _t([0.5, 1.0], device)
    with pytest.raises(TypeError, match=r"numpy\.sin\(\) does not compute on anydevice tensors.*anydevice\.sin\(t\)"):
        np.sin(t)
    with pytest.raises(TypeError, match=r"numpy\.add\(\) does not compute on anydevice tensors .*out="):
        np.add(t, t, out=np.zeros(2, np.float32))
    with pytest.raises(TypeError, match=r"numpy\.add\.reduce\(\)"):
        np.add.reduce(ad.asarray([1.0]))  # a cpu tensor: numpy 2.4 leaks the operands when a reduce override raises
    host = np.asarray(t)
    assert type(host) is np.ndarray and host.tolist() == [0.5, 1.0]
    host[0] = 9.0
    assert t.tolist() == [0.5, 1.0]
    assert np.asarray(t, dtype=np.float64).dtype == np.float64


def test_other_array_likes_are_refused():
    class HostArray:
        def __array__(self, dtype=None, copy=None):
            return np.ones(2, np.float32)

    t = ad.ones(2, device="npu")
    with pytest.raises(TypeError, match=rf"Tensor \+ \w+\.HostArray: .*{HINT}"):
        t + HostArray()
    with pytest.raises(TypeError, match=rf"\w+\.HostArray \* Tensor: .*{HINT}"):
        HostArray() * t


@pytest.mark.parametrize("device", DEVICES)
def test_numpy_scalars_act_like_python_scalars(device):
    t = _t([1.0, 2.0, 4.0], device)
    for ns, py in [(np.float32(2.5), 2.5), (np.float64(2.5), 2.5), (np.int64(3), 3), (np.int8(-2), -2),
                   (np.array(1.5), 1.5)]:  # numpy compares a scalar as a 0-d array, so 0-d arrays are scalars too
        for sym, fn in {**FLOAT_OPS, **COMPARE_OPS}.items():
            if sym == "@":
                continue
            for got, want in ((fn(t, ns), fn(t, py)), (fn(ns, t), fn(py, t))):
                assert isinstance(got, ad.Tensor) and got.device == t.device and got.dtype is want.dtype, (sym, ns)
                np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert (t * np.float64(2)).dtype is ad.float32, "a numpy scalar is weak, as a Python float is"
    i = _t([1, 2, 3], device)
    assert (np.int16(6) & i).tolist() == [0, 2, 2] and (i << np.uint8(1)).tolist() == [2, 4, 6]
    assert (np.bool_(True) & _t([True, False], device)).tolist() == [True, False]
    u = ad.asarray(a := np.ones(2, np.float32), device=device)
    u += np.float32(1.5)
    assert u.tolist() == [2.5, 2.5] and a.tolist() == [1.0, 1.0]
    with pytest.raises(TypeError, match="Python float cannot be combined with a int64 tensor"):
        i * np.float32(1.5)
    with pytest.raises(TypeError, match="Python float cannot be combined with a int64 tensor"):
        np.float32(1.5) * i


def test_numpy_scalars_keep_the_graph():
    x = _leaf([1.0, 2.0])
    loss = (np.float32(3) * x + x * np.float64(2)).sum()
    loss.backward()
    assert x.grad.tolist() == [5.0, 5.0]


# --- 3. autograd graphs are used once unless retained ---------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_a_second_backward_raises_and_leaves_the_gradients_alone(device):
    x = _leaf([1.0, 2.0], device)
    loss = (x * x).sum()
    loss.backward()
    assert x.grad.tolist() == [2.0, 4.0]
    with pytest.raises(RuntimeError, match=r"already used by an earlier backward\(\).*retain_graph=True"):
        loss.backward()
    assert x.grad.tolist() == [2.0, 4.0]


@pytest.mark.parametrize("device", DEVICES)
def test_retain_graph_allows_another_backward(device):
    x = _leaf([1.0, 2.0], device)
    loss = (x * x * 3.0).sum()
    loss.backward(retain_graph=True)
    loss.backward()  # the second call frees the graph
    assert x.grad.tolist() == [12.0, 24.0], "two backward calls accumulate"
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        loss.backward()
    x.grad = None
    loss2 = (x * 2.0).sum()
    _autograd.backward(loss2, retain_graph=True)
    _autograd.backward(loss2, None, False)
    assert x.grad.tolist() == [4.0, 4.0]


def test_a_shared_subgraph_is_used_up_by_the_first_backward():
    x = _leaf([1.0, 2.0])
    y = ad.exp(x)
    l1, l2 = y.sum(), (y * 2.0).sum()
    l1.backward()
    with pytest.raises(RuntimeError, match="through exp was already used"):
        l2.backward()
    z = ad.to_device(x, "cpu").sum()  # a device copy's node is used up too
    z.backward()
    with pytest.raises(RuntimeError, match="already used"):
        z.backward()


@pytest.mark.parametrize("retain", [False, True])
def test_backward_frees_the_saved_values(retain):
    x = _leaf(np.ones((256, 256), np.float32))  # 256 KiB each
    loss = (ad.exp(x) * ad.sin(x)).sum()  # saves exp(x), sin(x) and their product
    held = _npu_allocated()
    loss.backward(retain_graph=retain)
    x.grad = None  # the gradient itself is not a saved value
    freed = held - _npu_allocated()
    if retain:
        assert freed <= 0, "retain_graph=True keeps the saved values"
    else:
        assert freed >= 3 * 256 * 256 * 4, f"backward() returned only {freed} bytes"


# --- 4. caches keep no device memory --------------------------------------------------------------
def test_rejected_calls_keep_no_tensor_alive():
    x = ad.ones((4,), device="npu")
    base = _npu_allocated()
    for _ in range(20):
        big = ad.zeros((512, 1024), device="npu")  # 2 MiB
        with pytest.raises(IndexError, match="unsupported index"):
            ad.getitem(x, key=(big,))
        del big
    assert _npu_allocated() == base
    for op in all_ops():
        for key in op.dtype_cache:
            assert not any(isinstance(v, ad.Tensor) for v in _flatten(key)), (op.name, key)


def _flatten(v):
    if isinstance(v, tuple):
        for e in v:
            yield from _flatten(e)
    else:
        yield v


def test_empty_cache_returns_the_scalar_operand_buffers():
    x = ad.ones((8,), device="npu")
    ad.device.empty_cache("npu")  # scalars an earlier test cached
    base = _npu_allocated()
    for _ in range(3):  # the first call plans; later ones take the fast path, which caches the scalar
        y = x * 2.75 - 1.125
    assert y.tolist() == [1.625] * 8
    del y
    assert _npu_allocated() > base, "the scalar operands are cached on the device"
    ad.device.empty_cache("npu")
    assert _npu_allocated() == base
    assert (x * 2.75).tolist() == [2.75] * 8, "the operator still works after the cache was dropped"


def test_the_leak_check_fails_a_test_that_keeps_device_memory(pytester):
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makepyfile(textwrap.dedent("""
        import pytest
        import anydevice as ad

        kept = []

        def test_clean():
            assert (ad.ones(1000, device="npu") * 2.0).sum().item() == 2000.0

        def test_leaks():
            kept.append(ad.ones(1000, device="xpu"))

        @pytest.mark.keeps_device_memory
        def test_keeps_on_purpose():
            kept.append(ad.ones(1000, device="npu"))
    """))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_leaks*",
                                 "device memory was not returned after the test: xpu:0: 0 -> * bytes allocated*"])


# --- 5. pickling ----------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_tensors_refuse_to_pickle_and_name_the_way_to_save(device, tmp_path):
    t = _t([1.0, 2.0], device)
    for obj in (t, [t], {"w": t}):
        with pytest.raises(TypeError, match=r"cannot be pickled.*anydevice\.save\(obj, path\).*anydevice\.load\(path\)"
                                            r".*np\.save\(path, t\.numpy\(\)\)"):
            pickle.dumps(obj)
    ad.save({"w": t}, tmp_path / "w.safetensors")  # the way the message names works
    back = ad.load(tmp_path / "w.safetensors")["w"]
    assert back.device == t.device and back.tolist() == [1.0, 2.0]
    assert pickle.loads(pickle.dumps(t.device)) is t.device
    assert pickle.loads(pickle.dumps(t.dtype)) is t.dtype


@pytest.mark.parametrize("device", DEVICES)
def test_copy_and_deepcopy_give_independent_tensors(device):
    x = _leaf([1.0, 2.0], device)
    (x * x).sum().backward()
    for c in (copy.copy(x), copy.deepcopy(x)):
        assert c is not x and c.device == x.device and c.tolist() == [1.0, 2.0]
        assert c.requires_grad and c.is_leaf and c.grad.tolist() == [2.0, 4.0]
        with ad.no_grad():
            c += 1.0
        (c * 3.0).sum().backward()
        assert x.tolist() == [1.0, 2.0] and x.grad.tolist() == [2.0, 4.0]
        assert c.grad.tolist() == [5.0, 7.0]
    pair = copy.deepcopy([x, x])
    assert pair[0] is pair[1]
    with pytest.raises(RuntimeError, match=r"deepcopy\(\) of a tensor computed in a recorded graph.*detach\(\)"):
        copy.deepcopy(x * 2.0)


@pytest.mark.parametrize("device", ["cpu", "npu"])
def test_casts_do_not_warn_on_any_path(device):
    """Overflowing and NaN casts give IEEE/C results without numpy's RuntimeWarnings, for large
    and small, contiguous and strided arrays (the cpu's C conversion and its numpy path alike)."""
    import warnings

    big = np.array([7e4, np.nan, -7e4, 1.0], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "overflow encountered in cast" would raise here
        x = ad.asarray(np.tile(big, 40), device=device)
        tensors = [x, x[::2], x[:4]]
        if device == "cpu":
            tensors.append(ad.asarray(big.astype(np.float64) * 1e300, device=device))
        for t in tensors:
            for d in (ad.float16, ad.float32, ad.int32):
                t.astype(d)
