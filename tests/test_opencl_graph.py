"""The OpenCL graph compiler's kernels: sizes and strides are kernel arguments, so a chain of one
structure is one source (named by its digest) and one build, reused by every graph, variant and
shape that has it; chains that read broadcast inputs launch on a 2-d/3-d grid (rank 2 to 5 here);
reductions use a work-item per output element when there are many, a work-group per output
element when there are few and they are long. Results equal eager execution (bit-equal for
element-wise chains, within 2e-5 for reductions: another summation order), and bad input raises
eager's error."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import anydevice as ad
from anydevice.jit import partition

_reason = ("pyopencl is not installed" if importlib.util.find_spec("pyopencl") is None
           else ad.device.unavailable_reason("opencl"))
pytestmark = pytest.mark.skipif(bool(_reason), reason=f"no usable OpenCL device: {_reason}")
RNG = np.random.default_rng(11)


def _t(shape, dtype=np.float32):
    return ad.asarray(RNG.standard_normal(shape).astype(dtype), device="opencl")


def _fused_names(fn, *args):
    """Names of the kernels the compiler makes for ``fn(*args)``'s graph."""
    from anydevice_opencl.graph import compile_graph

    f = ad.jit.compile(fn)
    f(*args)
    be = ad.device.get_backend("opencl")
    view = partition.GraphView(partition.inline_decompositions(f.last_graph))
    claims = compile_graph("opencl", be.runtime, view, be.kernels) or []
    return sorted(k.program.name for _, k in claims if hasattr(k, "program"))


def _bcast(x, b, c):
    return ad.tanh(x * b + c) - b


def _rows(x, b):
    y = ad.exp(x - b)
    return ad.log(ad.sum(y, axis=-1)), ad.max(y * 2.0, axis=0)


@pytest.mark.parametrize("shapes", [
    ((7, 5), (5,), (7, 1)), ((3, 4, 130), (130,), (4, 1)), ((2, 3, 4, 5), (1, 5), (3, 1, 1)),
    ((2, 1, 3, 2, 9), (9,), (3, 1, 1)), ((9,), (1,), ()), ((6, 300), (300,), (1,))], ids=str)
def test_broadcast_chains_equal_eager_bit_for_bit(shapes):
    args = [_t(s) for s in shapes]
    want = _bcast(*args).numpy()
    f = ad.jit.compile(_bcast)
    for _ in range(2):
        got = f(*args).numpy()
    assert partition.build(f.last_graph).stats["fused_kernels"] == 1
    np.testing.assert_array_equal(got, want)


def test_one_source_and_one_build_for_every_shape_of_a_chain():
    rt = ad.device.get_backend("opencl").runtime
    first = _fused_names(_bcast, _t((5, 6)), _t((6,)), _t((5, 1)))
    assert first == _fused_names(_bcast, _t((40, 3)), _t((3,)), _t((40, 1)))
    assert first != _fused_names(_bcast, _t((5, 6)), _t((5, 6)), _t((5, 1)))  # another input broadcasts: another source
    f = ad.jit.compile(_rows)
    x, b = _t((33, 17)), _t((17,))
    f(x, b), f(x, b)
    before = rt.programs.stats["builds"]
    for shape in ((12, 17), (70, 5), (40, 30)):  # new variants of the same chains: no build
        x, b = _t(shape), _t(shape[-1:])
        want = _rows(x, b)
        for _ in range(2):
            got = f(x, b)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-5, atol=2e-5)
    assert rt.programs.stats["builds"] == before


@pytest.mark.parametrize("shape,axis", [((300, 70), 0), ((3, 1000), 1), ((1000, 3), 0), ((4, 5, 300), (0, 2)),
                                        ((70, 6, 5), (1,)), ((20, 30), None)], ids=str)
def test_reductions_in_both_layouts_equal_eager(shape, axis):
    def fn(x):
        return (ad.sum(x * x + 1.0, axis=axis), ad.log(ad.mean(x * 0.5 + 2.0, axis=axis)) * 2.0,
                ad.min(x - 1.0, axis=axis))

    x = _t(shape)
    want = [t.numpy() for t in fn(x)]
    f = ad.jit.compile(fn)
    for _ in range(2):
        got = [t.numpy() for t in f(x)]
    assert partition.build(f.last_graph).stats["fused_kernels"] == 3
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


def test_column_reductions_with_a_broadcast_input_and_a_partial_block_equal_eager():
    """A reduction keeping the last dim runs graph.COLUMN_BLOCK adjacent outputs per work-item:
    120 outputs (3 x 40, not merged: b broadcasts along the last dim) end in a partial block."""
    from anydevice_opencl import graph

    def fn(x, b):
        y = x * b + 1.0
        return ad.sum(y, axis=0), ad.max(y, axis=0) - ad.min(y, axis=0)

    x, b = _t((37, 3, 40)), _t((3, 1))
    assert 120 % graph.COLUMN_BLOCK
    want = [t.numpy() for t in fn(x, b)]
    f = ad.jit.compile(fn)
    for _ in range(2):
        got = [t.numpy() for t in f(x, b)]
    assert partition.build(f.last_graph).stats["fused_kernels"] == 1
    for g, w in zip(got, want):
        assert g.shape == w.shape == (3, 40)
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


def test_int_reductions_and_casts_equal_eager_exactly():
    def fn(s, x):
        m = s > 2
        return ad.sum(ad.where(m, s * 3, -s), axis=0), ad.max(ad.astype(s, ad.float32) + x, axis=1)

    s = ad.asarray(RNG.integers(-9, 9, (200, 90)).astype(np.int32), device="opencl")
    x = _t((90,))
    want = [t.numpy() for t in fn(s, x)]
    f = ad.jit.compile(fn)
    for _ in range(2):
        got = [t.numpy() for t in f(s, x)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_a_compiled_chain_raises_eagers_error_on_bad_shapes():
    f = ad.jit.compile(_bcast)
    args = [_t((4, 5)), _t((5,)), _t((4, 1))]
    f(*args), f(*args)
    bad = [_t((4, 5)), _t((6,)), _t((4, 1))]
    with pytest.raises(Exception) as eager:
        _bcast(*bad)
    with pytest.raises(type(eager.value)) as compiled:
        f(*bad)
    assert str(compiled.value) == str(eager.value)
    assert "multiply" in str(eager.value) and "(4, 5)" in str(eager.value) and "(6,)" in str(eager.value)


def test_sibling_reductions_share_one_kernel_with_their_epilogue():
    """A min and a max of one value (an input here) and what is computed from both are one kernel;
    so are a sum, a max and a mean of one chain's value, with the max - mean after them."""
    def fn(y, x):
        z = x * 2.0
        return (ad.logical_and(ad.min(y) >= 0, ad.max(y) < 10), ad.sum(z, axis=0),
                ad.max(z, axis=0) - ad.mean(z, axis=0), ad.min(x, axis=1))

    y = ad.asarray(np.arange(300) % 10, device="opencl")
    x = _t((300, 70))
    want = [t.numpy() for t in fn(y, x)]
    f = ad.jit.compile(fn)
    for _ in range(2):
        got = [t.numpy() for t in f(y, x)]
    run = partition.build(f.last_graph)
    assert run.stats["fused_kernels"] == 2 and run.stats["claimed_nodes"] == 10, run.explain()
    assert got[0] == want[0] and got[0].dtype == np.bool_
    np.testing.assert_array_equal(got[3], want[3])
    for g, w in zip(got[1:3], want[1:3]):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)
    bad = ad.asarray(np.array([3, 12, 5]), device="opencl")  # out of range: the epilogue sees both results
    assert not f(bad, x[:3])[0].numpy() and not fn(bad, x[:3])[0].numpy()


def test_dims_that_read_alike_are_merged_so_more_chains_share_a_source():
    def fn(x, axis):
        return ad.sum(x * x + 1.0, axis=axis)

    a = _fused_names(lambda x: fn(x, (1, 2)), _t((2, 3, 4)))
    assert a == _fused_names(lambda x: fn(x, 1), _t((2, 12))) == _fused_names(lambda x: fn(x, (1, 3)), _t((5, 1, 7, 3)))
    assert a != _fused_names(lambda x: fn(x, 0), _t((2, 12)))
    assert _fused_names(_bcast, _t((4, 5, 6)), _t((5, 6)), _t((4, 1, 1))) == _fused_names(_bcast, _t((4, 30)), _t((30,)),
                                                                                         _t((4, 1)))
    x = _t((5, 1, 7, 3))
    f = ad.jit.compile(lambda x: fn(x, (1, 3)))
    for _ in range(2):
        got = f(x).numpy()
    np.testing.assert_allclose(got, fn(x, (1, 3)).numpy(), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("k,m,n", [(256, 256, 64), (37, 13, 70), (300, 9, 256), (4, 3, 5)], ids=str)
def test_a_transposed_operand_matmul_is_one_launch_without_a_transposing_copy(monkeypatch, k, m, n):
    """matmul(matrix_transpose(x), y) (and permute_dims(x, (1, 0))) of 2-D float32 values is one
    claim: where eager runs the packed matmul, that kernel reading x by columns (no copy), else
    eager's kernels; eager's bits either way. A transpose something else also reads is left to
    eager kernels."""
    from opencl_support import spy_launches

    from anydevice_opencl import kernels

    monkeypatch.setattr(kernels, "_generic_runs", {})  # small work stays generic, whatever ran before
    x, y = _t((k, m)), _t((k, n))
    fns = [lambda x, y: ad.matmul(ad.matrix_transpose(x), y), lambda x, y: ad.permute_dims(x, (1, 0)) @ y]
    for fn in fns:
        want = fn(x, y).numpy()
        f = ad.jit.compile(fn)
        f(x, y)
        seen = spy_launches(monkeypatch)
        got = f(x, y).numpy()
        if m * n * k >= 4096:
            assert not any(s[0] in ("ew", "ewg") for s in seen), seen  # no copy
            assert ("mm", "float32", "packedta") in seen
        else:
            assert ("mm", "float32", "packedta") not in seen
        assert got.shape == want.shape == (m, n)
        np.testing.assert_array_equal(got, want, strict=True)
        run = partition.build(f.last_graph)
        assert run.stats["claimed_nodes"] == 2, run.explain()
    gram = ad.jit.compile(lambda x: ad.matrix_transpose(x) @ x)
    gram(x)
    np.testing.assert_allclose(gram(x).numpy(), x.numpy().T @ x.numpy(), rtol=1e-4, atol=1e-3)
    def both_fn(x, y):
        t = ad.matrix_transpose(x)
        return t @ y, t

    both = ad.jit.compile(both_fn)
    both(x, y)
    seen.clear()
    got = both(x, y)
    assert ("mm", "float32", "packedta") not in seen and ("mm", "float32", "packed" if m * n * k >= 4096 else "simple") in seen, seen
    np.testing.assert_allclose(got[0].numpy(), x.numpy().T @ y.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(got[1].numpy(), x.numpy().T)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("rows,k", [(256, 10), (7, 300)], ids=["short rows", "long rows"])
def test_a_loss_and_its_gradient_share_one_row_launch(monkeypatch, reduction, rows, k):
    """cross_entropy and cross_entropy_grad of the same logits and labels (the upstream gradient
    an input) are one claim: one "nllceg" launch gives both, with eager's bits."""
    from opencl_support import spy_launches

    def fn(x, y, g):
        return (ad.cross_entropy(x, y, reduction=reduction), ad.cross_entropy_grad(x, y, g, reduction=reduction))

    x = _t((rows, k))
    y = ad.asarray(RNG.integers(0, k, rows), device="opencl")
    g = _t((rows,) if reduction == "none" else ())
    want = [t.numpy() for t in fn(x, y, g)]
    f = ad.jit.compile(fn)
    f(x, y, g)
    seen = spy_launches(monkeypatch)
    got = [t.numpy() for t in f(x, y, g)]
    kinds = [s[1] for s in seen if s[0] == "smx"]
    assert kinds == ["nllceg"], seen
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b, strict=True)


@pytest.mark.parametrize("kw", [{}, {"amsgrad": True, "weight_decay": 0.1}, {"weight_decay": 0.1, "decoupled": True}],
                         ids=["plain", "amsgrad+L2", "AdamW"])
def test_the_adam_updates_of_a_step_are_one_claim_with_eagers_bits(monkeypatch, kw):
    """adam_update nodes of the same options are one claim: one launch of the step scalars, one
    element-wise launch shared by the parameters up to MULTI_SHARED elements, one per larger one."""
    from anydevice_opencl import kernels_optim

    sizes = [(10,), (300,), (kernels_optim.MULTI_SHARED + 5,), (7, 3), (64, 80)]
    attrs = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0, "decoupled": False,
             "amsgrad": False, **kw}

    def step(*flat):
        out = []
        for j in range(len(sizes)):
            out += list(ad.adam_update(*flat[6 * j:6 * j + 6], **attrs))
        return out

    flat = []
    for shape in sizes:
        flat += [_t(shape), _t(shape), _t(shape), ad.abs(_t(shape)) + 0.2, ad.abs(_t(shape)) + 0.3,
                 ad.asarray(np.float32(3.0), device="opencl")]
    want = [t.numpy() for t in step(*flat)]
    f = ad.jit.compile(step)
    f(*flat)
    calls = []
    run = kernels_optim.Launcher.__call__
    monkeypatch.setattr(kernels_optim.Launcher, "__call__", lambda self, *a: (calls.append(self.kernel.function_name), run(self, *a))[1])
    got = [t.numpy() for t in f(*flat)]
    assert sorted(calls) == sorted(["anydevice_adam_multi_scalars_5_float", "anydevice_adam_apply_float",
                                    "anydevice_adam_apply_float", "anydevice_adam_multi_3_float"]), calls
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b, strict=True)


@pytest.mark.parametrize("m,k,n", [(256, 64, 256), (9, 70, 45), (3, 4, 5)], ids=str)
def test_relu_of_a_linear_is_stored_by_the_matmul_with_eagers_bits(monkeypatch, m, k, n):
    """relu(linear(x, w, b)) is one claim: the packed matmul stores the linear result and its relu
    (NaN kept, as eager's relu); work too small to specialize runs eager's kernels in order."""
    from opencl_support import spy_launches

    def fn(x, w, b):
        y = ad.linear(x, w, b)
        return ad.relu(y), y * 2.0

    xs = RNG.standard_normal((m, k)).astype(np.float32)
    xs[0, 0] = np.nan
    x, w, b = ad.asarray(xs, device="opencl"), _t((n, k)), _t((n,))
    want = [t.numpy() for t in fn(x, w, b)]
    f = ad.jit.compile(fn)
    f(x, w, b)
    seen = spy_launches(monkeypatch)
    got = [t.numpy() for t in f(x, w, b)]
    if m * n * k >= 4096:
        assert ("mm", "float32", "packedbr") in seen and not any(s[:2] == ("ew", "relu") for s in seen), seen
    assert np.isnan(got[0][0]).any()
    for a, e in zip(got, want):
        np.testing.assert_array_equal(a, e, strict=True)


def test_a_linear_only_its_relu_reads_is_not_stored(monkeypatch):
    """Where nothing but the relu reads the linear result (inference: no gradient keeps it), the
    packed matmul stores the relu only ("packedr"), with eager's bits."""
    from opencl_support import spy_launches

    x, w, b = _t((64, 32)), _t((48, 32)), _t((48,))

    def fn(x, w, b):
        return ad.relu(ad.linear(x, w, b)) * 0.5

    want = fn(x, w, b).numpy()
    f = ad.jit.compile(fn)
    f(x, w, b)
    seen = spy_launches(monkeypatch)
    got = f(x, w, b).numpy()
    assert ("mm", "float32", "packedr") in seen and ("mm", "float32", "packedbr") not in seen, seen
    np.testing.assert_array_equal(got, want, strict=True)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_the_label_check_joins_the_loss_and_gradient_claim(monkeypatch, reduction):
    """cross_entropy's label check (index_in_range(labels, low=0, high=classes), a flag of the
    graph) is part of the loss-and-gradient claim: for 'mean' its flag comes from the loss's total
    launch (no fill and no launch of its own); a label out of range still raises eager's error."""
    from opencl_support import spy_launches

    def fn(x, y, g):
        return ad.cross_entropy(x, y, reduction=reduction), ad.cross_entropy_grad(x, y, g, reduction=reduction)

    x = _t((256, 10))
    g = _t((256,) if reduction == "none" else ())
    y = ad.asarray(RNG.integers(0, 10, 256), device="opencl")
    want = [t.numpy() for t in fn(x, y, g)]
    f = ad.jit.compile(fn)
    f(x, y, g)
    run = partition.build(f.last_graph)
    assert run.stats["claimed_nodes"] == 3, run.explain()
    seen = spy_launches(monkeypatch)
    got = [t.numpy() for t in f(x, y, g)]
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b, strict=True)
    if reduction == "mean":
        assert ("inrange", "int64") not in seen and [s[:2] for s in seen if s[0] == "smx"] == [("smx", "nllceg")], seen
    bad = ad.asarray(np.r_[RNG.integers(0, 10, 255), 10], device="opencl")
    with pytest.raises(IndexError) as eager:
        fn(x, bad, g)
    with pytest.raises(IndexError) as compiled:
        f(x, bad, g)
    assert str(compiled.value) == str(eager.value) and "label 10" in str(eager.value)
