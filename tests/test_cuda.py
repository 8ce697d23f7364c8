"""The cuda backend (anydevice-cuda).

Without a GPU: device strings and the ``gpu`` alias, every unavailable reason (simulated
failures), the plugin's status and environment, the kernel table's completeness, and the
kernels' logic run against a numpy stand-in for CuPy ("cudasim"), compared with the cpu
backend. With a GPU: real math, memory statistics, streams, events and DLPack; these skip
with the unavailable reason otherwise.
"""
from __future__ import annotations

import contextlib
import importlib.util
import math
import subprocess
import sys
import types

import numpy as np
import pytest

import anydevice as ad
from anydevice.backend import KernelTable
from anydevice.engine import dispatch
from anydevice.errors import DeviceUnavailableError
from anydevice.ops.registry import all_ops, get_op
from anydevice.plugins import hookimpl
from anydevice.plugins.manager import LOADED, manager
from anydevice.runtime import devices as _backend

pytest.importorskip("anydevice_cuda", reason="anydevice-cuda is not installed (pip install -e backends/cuda)")
from fakes import FakePlugin, installed  # noqa: E402

from anydevice_cuda import diagnose  # noqa: E402


# --- plugin, device strings, reasons -----------------------------------------------------------
def test_plugin_loads_and_declares_cuda_with_gpu_alias():
    rec = manager.load_type("cuda")
    assert rec is not None and rec.status == LOADED, rec and rec.reason
    assert rec.distribution == "anydevice-cuda"
    spec = rec.specs["cuda"]
    assert spec.aliases == ("gpu",) and spec.dlpack_code == 2


def test_cuda_and_gpu_name_the_same_type():
    assert _backend.canonical_type("cuda") == "cuda"
    assert _backend.canonical_type("gpu") == "cuda"
    assert ad.device.device_count("gpu") == ad.device.device_count("cuda")


def test_plugin_import_does_not_import_cupy():
    code = "import sys, anydevice_cuda.plugin; print('cupy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_gpu_device_string_gives_the_unavailable_reason():
    reason = ad.device.unavailable_reason("cuda")
    if reason is None:
        pytest.skip("a CUDA GPU is available here")
    assert reason.startswith("cuda: ") and "unknown device type" not in reason
    for spec in ("gpu:0", "cuda", "cuda:0"):
        with pytest.raises(DeviceUnavailableError) as e:
            ad.ones((2,), device=spec)
        assert reason in str(e.value) and "unknown device type" not in str(e.value)
    assert ad.device.device_count("gpu") == 0


def test_environment_reports_versions_or_reason():
    from anydevice_cuda.plugin import environment

    env = environment()
    pytest.importorskip("cupy", reason="cupy is not installed")
    assert env["cupy"] and env["cuda_runtime"] and env["nccl"]
    if ad.device.unavailable_reason("cuda"):
        assert env["unavailable"] and "device_count" not in env
    else:
        assert env["device_count"] >= 1


class _CudaError(RuntimeError):
    """Stands in for cupy_backends...CUDARuntimeError (same ``status`` attribute and message)."""

    def __init__(self, status, name):
        super().__init__(f"{name}: simulated")
        self.status = status


@pytest.mark.parametrize("exc, kw, expected", [
    (ModuleNotFoundError("No module named 'cupy'", name="cupy"), {},
     "cupy is not installed: pip install cupy-cuda12x"),
    (ImportError("libnvrtc.so.12: cannot open shared object file", name="cupy_backends.cuda.libs.nvrtc"), {},
     "cupy is installed but failed to import"),
    (_CudaError(35, "cudaErrorInsufficientDriver"), {"driver_version": 0, "runtime_version": 12090},
     "cupy is installed but no CUDA driver was found: install the NVIDIA driver"),
    (_CudaError(35, "cudaErrorInsufficientDriver"), {"driver_version": 11040, "runtime_version": 12090},
     "the CUDA driver supports CUDA 11.4 but cupy-cuda12x needs 12.x: update the driver or install a cupy "
     "build for your CUDA (pip install cupy-cuda11x)"),
    (None, {"driver_version": 11080, "runtime_version": 12020, "device_count": 1},
     "the CUDA driver supports CUDA 11.8 but cupy-cuda12x needs 12.x"),
    (_CudaError(100, "cudaErrorNoDevice"), {"driver_version": 12040, "runtime_version": 12090},
     "the NVIDIA driver (CUDA 12.4) is installed but no CUDA device was found"),
    (None, {"driver_version": 12040, "device_count": 0, "visible": ""},
     "CUDA_VISIBLE_DEVICES=''"),
    (_CudaError(46, "cudaErrorDevicesUnavailable"), {"driver_version": 12040}, "busy or unavailable"),
    (_CudaError(803, "cudaErrorSystemDriverMismatch"), {"driver_version": 12040}, "reinstall the NVIDIA driver"),
    (_CudaError(999, "cudaErrorUnknown"), {"driver_version": 12040},
     "CUDA initialization failed: _CudaError: cudaErrorUnknown"),
])
def test_unavailable_reason_classification(exc, kw, expected):
    assert expected in diagnose.classify(exc, **kw)


def test_classify_reports_nothing_when_cuda_works():
    assert diagnose.classify(None, driver_version=12040, runtime_version=12090, device_count=2) == ""


def _fake_cupy_runtime(**methods):
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(**methods))
    return cupy


def test_probe_without_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` raise ImportError
    assert diagnose.probe() == (None, "cupy is not installed: pip install cupy-cuda12x")


def test_probe_classifies_runtime_failures(monkeypatch):
    def no_device():
        raise _CudaError(100, "cudaErrorNoDevice")

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy_runtime(
        driverGetVersion=lambda: 12040, runtimeGetVersion=lambda: 12090, getDeviceCount=no_device))
    cupy, reason = diagnose.probe()
    assert cupy is None and "no CUDA device was found" in reason and "CUDA_VISIBLE_DEVICES='7'" in reason
    fake = _fake_cupy_runtime(driverGetVersion=lambda: 12040, runtimeGetVersion=lambda: 12090,
                              getDeviceCount=lambda: 2)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    assert diagnose.probe() == (fake, None)


# --- the kernel table -------------------------------------------------------------------------------
def test_kernel_table_covers_the_registry():
    pytest.importorskip("cupy", reason="cupy is not installed")
    from anydevice_cuda import kernels

    table = KernelTable("cuda")
    kernels.register(table)
    names = {o.name for o in all_ops()}
    missing = names - set(table.ops()) - set(kernels.INTENTIONALLY_ABSENT)
    assert not missing, f"ops without a cuda kernel or a documented reason: {sorted(missing)}"
    assert not set(kernels.INTENTIONALLY_ABSENT) & set(table.ops())
    assert all(isinstance(r, str) and r for r in kernels.INTENTIONALLY_ABSENT.values())
    assert set(table.ops()) <= names


# --- the kernels' logic on a numpy stand-in for CuPy ----------------------------------------------------
class _Recorder:
    def __init__(self):
        self.entered = []

    def device(self, index=None):
        rec = self

        class _Dev:
            def __enter__(self):
                rec.entered.append(("device", index))

            def __exit__(self, *exc):
                return False

        return _Dev()


def _numpy_cupy(recorder):
    """A module shaped like the parts of CuPy the kernels use, computing with numpy."""
    cp = types.ModuleType("cupy")
    for name in dir(np):
        if not name.startswith("_"):
            setattr(cp, name, getattr(np, name))

    def erf(x):
        return np.vectorize(math.erf, otypes=[np.float64])(x).astype(np.asarray(x).dtype)

    # like CuPy, gathers never raise for out-of-range indices (they wrap): the kernels must check
    cp.take = lambda a, i, axis=None: np.take(a, i, axis=axis, mode="wrap")
    cp.take_along_axis = lambda a, i, axis: np.take_along_axis(a, i % max(a.shape[axis], 1), axis=axis)
    elementwise = {"anydevice_erf": erf, "anydevice_sigmoid": lambda x: 1 / (1 + np.exp(-x))}
    cp.ElementwiseKernel = lambda inp, out, body, name: elementwise[name]
    cp.cuda = types.SimpleNamespace(
        Device=recorder.device, runtime=types.SimpleNamespace(getDevice=lambda: 0),
        memory=types.SimpleNamespace(OutOfMemoryError=type("OutOfMemoryError", (MemoryError,), {})),
    )
    special = types.ModuleType("cupyx.scipy.special")
    special.erf = erf
    compiler = types.ModuleType("cupy.cuda.compiler")
    compiler.CompileException = type("CompileException", (Exception,), {})
    return {"cupy": cp, "cupy.cuda.compiler": compiler, "cupyx": types.ModuleType("cupyx"),
            "cupyx.scipy": types.ModuleType("cupyx.scipy"), "cupyx.scipy.special": special}


class _SimStream:
    def __init__(self, recorder):
        self.recorder = recorder

    def __enter__(self):
        self.recorder.entered.append(("stream", id(self)))

    def __exit__(self, *exc):
        return False


class _SimRuntime:
    """Own storage in host memory, like the cuda runtime's cupy arrays."""

    def __init__(self, count, recorder):
        self.count, self.multi, self.recorder = count, count > 1, recorder

    def device_count(self):
        return self.count

    def synchronize(self, index):
        pass

    def empty(self, index, shape, dtype):
        return np.empty(shape, dtype.numpy)

    def from_host(self, index, arr):
        return np.array(arr, copy=True)

    def to_host(self, buf):
        return np.asarray(buf)

    def empty_cache(self, index):
        return 0

    def create_stream(self, index):
        return _SimStream(self.recorder)

    def copy_peer(self, buf, src_index, dst_index):
        self.recorder.entered.append(("peer", src_index, dst_index))
        return np.array(buf, copy=True)


class _ArrayTable:
    """Registers kernels whose numpy scalar results become 0-d arrays (CuPy always returns arrays)."""

    def __init__(self, table):
        self.table = table

    def register(self, name, fn, out=False):
        if out:  # the kernel fills buffers the core allocated
            self.table.register(name, fn, out=True)
            return

        def k(ctx, *a, **kw):
            r = fn(ctx, *a, **kw)
            return tuple(np.asarray(e) for e in r) if isinstance(r, tuple) else np.asarray(r)

        self.table.register(name, k)


@pytest.fixture(scope="module")
def sim():
    """Device type ``cudasim`` (2 devices): the cuda kernel table running on the numpy stand-in."""
    import anydevice_cuda

    recorder = _Recorder()
    path = f"{anydevice_cuda.__path__[0]}/kernels.py"
    with pytest.MonkeyPatch.context() as mp:
        for name, mod in _numpy_cupy(recorder).items():
            mp.setitem(sys.modules, name, mod)
        spec = importlib.util.spec_from_file_location("anydevice_cuda_sim_kernels", path)
        sim_kernels = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sim_kernels)

    class SimPlugin(FakePlugin):
        @hookimpl
        def anydevice_register_kernels(self, device_type, runtime, kernels):
            sim_kernels.register(_ArrayTable(kernels))

    plugin = SimPlugin(types=("cudasim",), runtime=_SimRuntime(2, recorder))
    with installed(plugin, name="cudasim-plugin"):
        yield types.SimpleNamespace(recorder=recorder, kernels=sim_kernels)


_rng = np.random.default_rng(0)
_POS = _rng.uniform(0.2, 2.0, (3, 4))
_ANY = _rng.uniform(-2.0, 2.0, (3, 4))
_INT = _rng.integers(-9, 9, (3, 4)).astype(np.int32)
_SHIFT = _rng.integers(0, 5, (3, 4)).astype(np.int32)

_UNARY = ["abs", "negative", "positive", "exp", "expm1", "log", "log1p", "log2", "log10", "sqrt", "square",
          "sin", "cos", "tan", "sinh", "cosh", "tanh", "floor", "ceil", "trunc", "round", "sign", "reciprocal",
          "isnan", "isinf", "isfinite", "erf", "relu", "sigmoid"]
_BINARY = ["add", "subtract", "multiply", "divide", "pow", "maximum", "minimum", "remainder", "floor_divide",
           "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "hypot", "logaddexp"]
_INT_BINARY = ["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift",
               "floor_divide", "remainder", "maximum"]


def _cases():
    """(op, inputs as numpy arrays (or lists of them), attrs, dtypes) covering every op of the registry."""
    fl = ("float32", "float16", "bfloat16")
    yield from ((op, [_POS if "log" in op or op in ("sqrt", "reciprocal") else _ANY], {}, fl) for op in _UNARY)
    yield from ((op, [_ANY, _POS], {}, fl) for op in _BINARY)
    yield from ((op, [_INT, _SHIFT + 1], {}, ("int32", "int8")) for op in _INT_BINARY)
    yield from ((op, [_ANY / 2.5], {}, fl) for op in ("acos", "asin", "atan", "asinh", "atanh", "signbit"))
    yield "acosh", [_POS + 1.0], {}, fl
    yield from ((op, [_ANY, np.concatenate([_ANY[:1], -_POS[1:]])], {}, fl) for op in ("atan2", "copysign", "nextafter"))
    yield "bitwise_invert", [_INT], {}, ("int32",)
    yield "logical_not", [_ANY > 0], {}, ("bool",)
    yield from ((op, [_ANY > 0, _POS > 1], {}, ("bool",)) for op in ("logical_and", "logical_or", "logical_xor"))
    yield "gelu", [_ANY], {"approximate": "none"}, fl
    yield "gelu", [_ANY], {"approximate": "tanh"}, fl
    yield from ((op, [_ANY], {}, fl) for op in ("real", "imag", "conj"))  # of real numbers
    yield from ((op, [_ANY + 1j * _POS], {}, ("complex128",)) for op in ("real", "imag", "conj"))
    yield "make_complex", [_ANY, _POS], {}, ("float32", "float64", "float16")
    yield "where", [_ANY > 0, _ANY, _POS], {}, fl
    yield "clip", [_ANY], {"min": -1.0, "max": 0.5}, fl
    yield "clip", [_INT], {"min": -3, "max": 4}, ("int32",)
    for op in ("sum", "prod", "max", "min", "argmax", "argmin", "mean", "logsumexp"):
        for attrs in ({"axis": None}, {"axis": 1, "keepdims": True}, {"axis": 0} if "arg" in op else {"axis": (0, 1)}):
            yield op, [_ANY], attrs, fl
    yield "sum", [_INT], {"axis": 0}, ("int8", "int32")
    yield "sum", [_INT], {"axis": 1, "dtype": "int8"}, ("int8",)
    yield "var", [_ANY], {"axis": 1, "correction": 1.0}, fl
    yield "std", [_ANY], {"axis": None}, fl
    yield "any", [_ANY > 1], {"axis": 1}, ("bool",)
    yield "all", [_ANY > -1], {"axis": None}, ("bool",)
    yield "matmul", [_ANY, _ANY.T], {}, fl + ("float64",)
    yield "matmul", [_INT, _INT.T], {}, ("int32",)
    yield "vecdot", [_ANY, _POS], {"axis": -1}, fl
    yield "matrix_transpose", [_ANY], {}, fl
    yield "linear", [_ANY, _POS, _POS[0, :3]], {}, ("float32",)
    yield "reshape", [_ANY], {"shape": (2, 6)}, fl
    yield "permute_dims", [_ANY], {"axes": (1, 0)}, fl
    yield "broadcast_to", [_ANY[:1]], {"shape": (5, 4)}, fl
    yield "concat", [[_ANY, _POS]], {"axis": 1}, fl
    yield "concat", [[_ANY, _POS]], {"axis": None}, ("float32",)
    yield "stack", [[_ANY, _POS]], {"axis": 0}, fl
    yield "squeeze", [_ANY[:1]], {"axis": 0}, fl
    yield "expand_dims", [_ANY], {"axis": 1}, fl
    yield "flip", [_ANY], {"axis": 0}, fl
    yield "astype", [_ANY * 3], {"dtype": "int32"}, fl
    yield "astype", [_INT], {"dtype": "float16"}, ("int32",)
    yield "getitem", [_ANY], {"key": (slice(1, None), slice(None, None, 2))}, fl
    yield "getitem", [_ANY], {"key": (1, None, Ellipsis)}, fl
    yield "setitem", [_ANY, _POS[0, :2]], {"key": (slice(0, 1), slice(1, 3))}, fl
    yield "getitem_grad", [_POS[:2, ::2]], {"shape": (3, 4), "key": (slice(1, None), slice(None, None, 2))}, fl
    yield from (("index_in_range", [np.array([[0, 3], [2, 1]])], {"low": lo, "high": hi}, ("int64",))
                for lo, hi in ((0, 4), (0, 3), (1, 4), (-(1 << 63), 1 << 63)))
    yield "take", [_ANY, np.array([2, -1, 0])], {"axis": 1}, fl
    yield "softmax", [_ANY], {"axis": -1}, fl
    yield "log_softmax", [_ANY], {"axis": 0}, fl
    yield "cross_entropy", [_ANY, np.array([0, 3, 1])], {"reduction": "mean"}, fl
    yield "cross_entropy", [_ANY, np.array([0, 3, 1])], {"reduction": "none"}, ("float32",)
    yield "cross_entropy_grad", [_ANY, np.array([0, 3, 7]), np.asarray(0.5)], {"reduction": "mean"}, fl
    yield "cross_entropy_grad", [_ANY, np.array([0, 3, 1]), _POS[:, 0]], {"reduction": "none"}, ("float32",)
    yield from ((op, [_ANY, _POS / 4.0], {"axis": a}, fl) for op in ("softmax_grad", "log_softmax_grad") for a in (-1, 0))
    yield "relu_grad", [_POS, _ANY], {}, fl
    yield "layer_norm", [_ANY, _POS[0], _ANY[0]], {"eps": 1e-5}, fl
    x4 = np.stack([_ANY, _POS])[None]  # (1, 2, 3, 4)
    yield "conv2d", [x4, np.resize(_POS, (3, 2, 2, 2))], {"padding": (1, 0, 1, 1)}, fl
    yield "conv2d", [x4, np.resize(_POS, (2, 1, 2, 2))], {"groups": 2, "dilation": (1, 2), "stride": 2}, ("float32",)
    yield "conv_transpose2d", [x4, np.resize(_POS, (2, 3, 2, 2))], {"stride": 2, "output_padding": 1}, fl
    yield "conv2d_weight_grad", [x4, np.resize(_ANY, (1, 3, 2, 3))], {"kernel_size": 2}, fl
    yield "max_pool2d", [x4], {"kernel_size": 2, "stride": 1, "padding": 1}, fl
    yield "avg_pool2d", [x4], {"kernel_size": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False}, fl
    yield "adaptive_avg_pool2d", [x4], {"output_size": (2, 3)}, fl
    yield "batch_norm", [x4, _ANY[0, :2], _POS[0, :2], _POS[1, :2], _ANY[1, :2]], {"eps": 1e-3}, fl
    yield "group_norm", [_ANY, _POS[0], _ANY[0]], {"num_groups": 2}, fl
    yield "embedding", [_ANY, np.array([[0, 2], [1, 1]])], {"padding_idx": 0}, fl
    yield "leaky_relu", [_ANY], {"negative_slope": 0.1}, fl
    yield "silu", [_ANY], {}, fl
    yield "elu", [_ANY], {"alpha": 0.5}, fl
    yield "nll_loss", [_ANY, np.array([0, 3, -100]), _POS[0]], {"reduction": "mean"}, fl
    yield "full", [], {"shape": (2, 3), "fill_value": 1.5}, fl
    yield "arange", [], {"start": 1, "stop": 7, "step": 2}, ("float32", "int64")
    yield "eye", [], {"n_rows": 3, "n_cols": 4, "k": 1}, fl + ("int32",)
    yield "linspace", [], {"start": 0.0, "stop": 1.0, "num": 5}, ("float32",)
    yield "philox_bits", [], {"shape": (3, 5), "key": (7, 8), "offset": (1 << 32) - 2}, ("uint32", "int8", "int64")
    rnd = {"key": (1, 2), "offset": 3}
    yield "random_uniform", [], {"shape": (9,), "low": -1.0, "high": 2.0, **rnd}, fl + ("float64",)
    yield "random_normal", [], {"shape": (9,), **rnd}, fl + ("float64",)
    yield "random_randint", [], {"shape": (9,), "low": -5, "high": 9, **rnd}, ("int64", "int8")
    yield "random_permutation", [], {"n": 9, **rnd}, ("int64",)
    sq = _ANY[:3, :3] + 3 * np.eye(3)  # well conditioned
    for op in ("cholesky", "inv", "det", "slogdet", "eigh", "eigvalsh", "svdvals", "matrix_rank", "pinv", "trace",
               "diagonal", "matrix_norm", "vector_norm"):
        yield op, [sq @ sq.T], {}, ("float32", "float16")
    yield "solve", [sq, _ANY[:3]], {}, ("float32",)
    yield "svd", [_ANY], {"full_matrices": False}, ("float32",)
    yield "qr", [_ANY.T], {}, ("float32",)
    yield "matrix_power", [sq], {"n": -2}, ("float32",)
    yield "outer", [_ANY[0], _POS[1]], {}, ("float32",)
    yield "cross", [_ANY[:, :3], _POS[:, 1:]], {}, ("float32",)
    yield "roll", [_ANY], {"shift": (1, -2), "axis": (0, 1)}, fl
    yield "tile", [_ANY], {"repetitions": (2, 1, 2)}, fl
    yield "repeat", [_ANY], {"repeats": 2, "axis": 1}, fl
    yield "diff", [_ANY], {"axis": 0, "n": 2}, fl
    yield "tensordot", [_ANY, _POS.T], {"axes": 1}, fl + ("int32",)
    yield from ((op, [_ANY], {"k": k}, fl) for op in ("tril", "triu") for k in (-1, 1))
    z = _ANY + 1j * _POS
    for op in ("fft", "ifft", "irfft", "hfft", "fftn", "ifftn", "irfftn"):
        yield op, [z], {"norm": "ortho"}, ("complex128",)
    for op in ("rfft", "ihfft", "rfftn"):
        yield op, [_ANY], {}, ("float32", "float64")
    yield "fftshift", [_ANY], {}, ("float32",)
    yield "ifftshift", [_ANY], {"axes": 0}, ("float32",)
    yield "fftfreq", [], {"n": 5, "d": 0.5}, ("float32",)
    yield "rfftfreq", [], {"n": 6}, ("float64",)
    yield "argsort", [_ANY], {"axis": 0, "descending": True}, fl
    yield "sort", [_ANY], {"axis": -1}, fl
    yield "take_along_axis", [_ANY, np.array([[0, -1], [2, 1], [3, 3]])], {"axis": 1}, fl
    yield "cumulative_sum", [_ANY], {"axis": 1, "include_initial": True}, fl
    yield "cumulative_prod", [_POS], {"axis": 0}, fl
    yield "searchsorted", [np.sort(_ANY[0]), _POS], {"side": "right"}, fl
    ints = np.round(_ANY)
    yield from ((op, [ints], {}, fl) for op in ("count_nonzero", "argwhere", "unique_values", "unique_counts",
                                                "unique_inverse", "unique_all"))
    yield "getitem_mask", [_ANY, _ANY > 0], {}, fl
    yield "setitem_mask", [_ANY, _ANY > 0, _POS[0, 0]], {}, fl
    yield "repeat_tensor", [_ANY, np.array([2, 0, 1])], {"axis": 0}, fl
    step = np.array(2.0, np.float32)  # the optimizer updates: the step count stays on the device
    yield "adam_update", [_ANY, _POS, _ANY, _POS, _POS, step], {"amsgrad": True, "weight_decay": 0.1}, ("float32",)
    yield "sgd_update", [_ANY, _POS, _ANY, step * 0], {"momentum": 0.9, "dampening": 0.5}, ("float32",)
    yield "rmsprop_update", [_ANY, _POS, _POS + 1, _ANY * 0.1, _ANY, step], {"centered": True, "momentum": 0.5}, ("float32",)
    yield "adagrad_update", [_ANY, _POS, _POS, step], {"lr_decay": 0.1}, ("float32",)


def _tensor(a, dtype, device):
    if isinstance(a, list):
        return [_tensor(x, dtype, device) for x in a]
    a = np.asarray(a)
    d = dtype if a.dtype.kind == "f" else ("int64" if a.dtype.kind in "iu" else None)
    return ad.asarray(a, dtype=d, device=device)


def _public(op, kw):
    """The op's public function (anydevice.linalg / .fft for their ops), its positional-only
    attributes taken out of ``kw`` and bound by position."""
    o = get_op(op)
    fn = getattr(getattr(ad, o.namespace) if o.namespace else ad, op)
    posonly = list(o.schema)[:o.positions[0]]
    pos = [kw.pop(k) for k in posonly if k in kw]
    return lambda *a, **k: _flat(fn(*a, *pos, **k, **kw))


def _flat(out):
    """A multi-output op's results as one 1-D tensor (their values in order, in the first one's dtype)."""
    if not isinstance(out, tuple):
        return out
    return ad.concat([ad.reshape(ad.astype(e, out[0].dtype), (-1,)) for e in out])


def _run(op, inputs, attrs, dtype, device):
    kw = dict(attrs)
    if op in ("full", "arange", "eye", "linspace") or not inputs:
        kw.update(dtype=dtype, device=device)
        return _public(op, kw)()
    if kw.get("dtype") and op in ("sum",):
        kw["dtype"] = getattr(ad, kw["dtype"])
    if op == "astype":
        kw["dtype"] = getattr(ad, kw["dtype"])
    ins = [_tensor(a, dtype, device) if op != "take" or i == 0 else ad.asarray(a, device=device)
           for i, a in enumerate(inputs)]
    if op == "cross_entropy":
        ins[1] = ad.asarray(inputs[1], device=device)
    if op in ("bitwise_left_shift", "bitwise_right_shift", "bitwise_and", "bitwise_or", "bitwise_xor",
              "bitwise_invert") or (dtype.startswith("int") and op in _INT_BINARY + ["sum", "clip", "matmul"]):
        ins = [ad.asarray(np.asarray(a), dtype=dtype, device=device) for a in inputs]
    return _public(op, kw)(*ins)


def test_sim_covers_every_op():
    covered = {c[0] for c in _cases()}
    assert covered == {o.name for o in all_ops()}


def test_kernels_match_cpu_on_numpy_standin(sim):
    failures, paths = [], set()
    observer = lambda op, dev, path, dt, i, o: paths.add(path) if dev.type == "cudasim" else None  # noqa: E731
    dispatch.add_observer(observer)
    old = dispatch.set_fallback_mode("error")  # every op must run on a kernel of the table
    try:
        _compare_all(failures)
    finally:
        dispatch.set_fallback_mode(old)
        dispatch.remove_observer(observer)
    assert not failures, "\n".join(failures)
    assert paths == {dispatch.NATIVE}


def _compare_all(failures):
    for op, inputs, attrs, dtypes in _cases():
        for dtype in dtypes:
            try:
                with np.errstate(all="ignore"):
                    want = _run(op, inputs, attrs, dtype, "cpu")
                    got = _run(op, inputs, attrs, dtype, "cudasim:0")
            except Exception as e:  # noqa: BLE001 - collected and reported together
                failures.append(f"{op}[{dtype}] {attrs}: {type(e).__name__}: {e}")
                continue
            if got.dtype is not want.dtype or got.shape != want.shape or str(got.device) != "cudasim:0":
                failures.append(f"{op}[{dtype}]: {got.dtype.name}{got.shape} vs cpu {want.dtype.name}{want.shape}")
                continue
            tol = 2e-2 if dtype in ("float16", "bfloat16") else 1e-6
            w, g = want.numpy(), got.numpy()
            if w.dtype.kind in "fc" or w.dtype.name == "bfloat16":
                w, g = w.astype(np.float64), g.astype(np.float64)
            if not np.allclose(g, w, rtol=tol, atol=tol, equal_nan=True):
                failures.append(f"{op}[{dtype}] {attrs}: {g.ravel()[:4]} vs cpu {w.ravel()[:4]}")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's reference on empty slices
def test_conformance_suite_on_numpy_standin(sim):
    """The conformance runner over every op: cudasim fails nothing that cpu passes."""
    runner = pytest.importorskip("anydevice_conformance.runner")
    old = dispatch.set_fallback_mode("silent")
    try:
        with np.errstate(all="ignore"):  # CuPy does not warn about floating-point errors; numpy would
            fails = {dev: {(c.op, c.dtype, c.check): c.message for op in all_ops()
                           for c in runner.run_device_op(op, dev) if c.status == "fail"}
                     for dev in ("cpu", "cudasim:0")}
    finally:
        dispatch.set_fallback_mode(old)
    extra = {k: v for k, v in fails["cudasim:0"].items() if k not in fails["cpu"]}
    assert not extra, "\n".join(f"{k}: {v[:300]}" for k, v in extra.items())


def test_take_out_of_range_is_an_index_error(sim):
    x = ad.asarray(_ANY, device="cudasim:0")
    with pytest.raises(IndexError, match="out of range for axis 1 with size 4"):
        ad.take(x, ad.asarray(np.array([0, 4]), device="cudasim:0"), axis=1)


def test_kernels_enter_device_and_stream(sim):
    rec = sim.recorder
    rec.entered.clear()
    a = ad.asarray(_ANY, device="cudasim:1")
    ad.exp(a + a)
    assert rec.entered.count(("device", 1)) == 2  # multi-GPU: each kernel sets its device
    s = ad.device.Stream("cudasim:1")
    rec.entered.clear()
    with ad.device.stream_guard(s):
        ad.exp(a)
    assert rec.entered == [("device", 1), ("stream", id(s.handle))]


def test_device_to_device_copy_uses_copy_peer(sim):
    sim.recorder.entered.clear()
    t = ad.asarray(_ANY, device="cudasim:0").to("cudasim:1")
    assert str(t.device) == "cudasim:1" and np.array_equal(t.numpy(), _ANY)
    assert sim.recorder.entered == [("peer", 0, 1)]


# --- the runtime against a scripted CuPy ------------------------------------------------------------
class _Pool:
    def __init__(self):
        self.used, self.total = 0, 0

    def malloc(self, n):
        self.used += n
        self.total = max(self.total, self.used)
        return types.SimpleNamespace(device_id=0, size=n)

    def used_bytes(self):
        return self.used

    def total_bytes(self):
        return self.total

    def free_all_blocks(self):
        self.total = self.used


def _scripted_cupy():
    pool = _Pool()
    allocator = [pool.malloc]
    rt = types.SimpleNamespace(
        getDeviceCount=lambda: 1, runtimeGetVersion=lambda: 12090, driverGetVersion=lambda: 12040,
        memGetInfo=lambda: (3 << 30, 8 << 30),
        getDeviceProperties=lambda i: {"name": b"Scripted GPU", "major": 9, "minor": 0,
                                       "totalGlobalMem": 8 << 30, "multiProcessorCount": 132},
        cudaDevAttrMemoryClockRate=36, cudaDevAttrGlobalMemoryBusWidth=37, cudaDevAttrClockRate=13,
        deviceGetAttribute=lambda attr, i: {36: 2_619_000, 37: 6144, 13: 1_980_000}[attr],
    )
    cuda = types.SimpleNamespace(runtime=rt, Device=lambda i=None: contextlib.nullcontext(),
                                 get_allocator=lambda: allocator[0],
                                 set_allocator=lambda f: allocator.__setitem__(0, f))
    return types.SimpleNamespace(__version__="14.2.0", cuda=cuda, get_default_memory_pool=lambda: pool), allocator


def test_runtime_memory_stats_track_peaks():
    from anydevice_cuda.runtime import CudaRuntime

    cp, allocator = _scripted_cupy()
    rt = CudaRuntime(cp)
    assert rt.tracking and allocator[0] is not cp.get_default_memory_pool().malloc
    a = allocator[0](1 << 20)
    allocator[0](1 << 10)
    cp.get_default_memory_pool().used -= a.size  # the 1 MiB block is freed back to the pool
    stats = rt.memory_stats(0)
    assert stats["allocated"] == 1 << 10 and stats["max_allocated"] == (1 << 20) + (1 << 10)
    assert stats["reserved"] == stats["max_reserved"] == (1 << 20) + (1 << 10) and stats["num_allocs"] == 2
    assert rt.empty_cache(0) == 1 << 20
    rt.reset_peak_memory_stats(0)
    assert rt.memory_stats(0)["max_allocated"] == 1 << 10
    assert rt.memory_info(0) == (3 << 30, 8 << 30)


def test_runtime_properties_and_dtypes():
    from anydevice_cuda.runtime import CudaRuntime, bfloat16_support

    cp, _ = _scripted_cupy()
    rt = CudaRuntime(cp)
    p = rt.properties(0)
    assert p["name"] == "Scripted GPU" and p["compute_capability"] == "9.0" and p["multiprocessors"] == 132
    assert p["peak_bandwidth_gbs"] == pytest.approx(2 * 2.619e9 * 6144 / 8 / 1e9, abs=0.1)
    assert p["cuda_runtime"] == "12.9" and p["cuda_driver"] == "12.4"
    assert ad.bfloat16 in rt.dtypes(0) and len(rt.dtypes(0)) == len(ad.dtypes.ALL_DTYPES)
    assert "CuPy >= 14" in bfloat16_support(types.SimpleNamespace(__version__="13.3.0"))
    rt.bf16_reason = bfloat16_support(types.SimpleNamespace(__version__="13.3.0"))
    assert ad.bfloat16 not in rt.dtypes(0)


class _Buf:
    """Shaped like a cupy array for the collectives code: device, dtype, shape, size, data.ptr."""

    def __init__(self, device, a):
        self.device, self.dtype, self.shape, self.size = types.SimpleNamespace(id=device), a.dtype, a.shape, a.size
        self.data = types.SimpleNamespace(ptr=id(self))


def test_all_reduce_goes_through_nccl_when_it_can(monkeypatch):
    from anydevice_cuda import collectives

    calls = []

    class Comm:
        def __init__(self, d):
            self.d = d

        def allReduce(self, src, dst, count, dtype, op, stream):  # noqa: N802 - NCCL's name
            calls.append((self.d, count, dtype, op, stream))

    nccl = types.SimpleNamespace(
        NCCL_FLOAT32=7, NCCL_SUM=0, NCCL_MAX=2, groupStart=lambda: calls.append("start"),
        groupEnd=lambda: calls.append("end"),
        NcclCommunicator=types.SimpleNamespace(initAll=lambda devs: [Comm(d) for d in devs]))
    cupy = types.SimpleNamespace(
        cuda=types.SimpleNamespace(Device=lambda d: contextlib.nullcontext(),
                                   get_current_stream=lambda: types.SimpleNamespace(ptr=99)),
        ascontiguousarray=lambda b: b, empty=lambda shape, dtype: _Buf(-1, np.empty(shape, dtype)))
    monkeypatch.setattr(collectives, "nccl_module", lambda: nccl)
    monkeypatch.setattr(collectives, "_comms", {})
    bufs = [_Buf(0, np.ones(3, np.float32)), _Buf(1, np.ones(3, np.float32))]
    assert len(collectives.all_reduce(cupy, bufs, "max")) == 2
    assert calls == ["start", (0, 3, 7, 2, 99), (1, 3, 7, 2, 99), "end"]
    two_bools = [_Buf(0, np.ones(3, bool)), _Buf(1, np.ones(3, bool))]
    assert collectives.all_reduce(cupy, two_bools, "sum") is None  # NCCL has no bool: the core stages it
    assert collectives.all_reduce(cupy, [bufs[0], bufs[0]], "sum") is None
    monkeypatch.setattr(collectives, "nccl_module", lambda: None)
    assert collectives.all_reduce(cupy, bufs, "sum") is None


def test_bench_report_renders(tmp_path):
    from anydevice_cuda import bench

    report = {"device": "cuda:0", "properties": {"name": "GPU", "compute_capability": "9.0", "multiprocessors": 132,
                                                "total_memory": 141 << 30},
              "sections": {"tiny_op": {"anydevice_operator_us": 9.0, "anydevice_function_us": 14.0,
                                       "cupy_operator_us": 6.0, "cupy_add_us": 6.5, "numpy_host_us": 0.4,
                                       "overhead_ratio": 1.5},
                           "matmul": [{"n": 4096, "dtype": "float32", "iters": 20, "anydevice_tflops": 50.0,
                                       "cupy_tflops": 51.0, "ratio": 0.98, "max_rel_error_64x64": 1e-6},
                                      {"n": 8192, "dtype": "bfloat16", "skipped": "time budget used up"}],
                           "add_bandwidth": {"error": "RuntimeError: boom"}, "interop": {"to_cupy_zero_copy": True}}}
    bench._write(str(tmp_path), report)
    (tmp_path / "steps.tsv").write_text("check\t0\t3\n")
    import json

    (tmp_path / "conformance.json").write_text(json.dumps({
        "ok": False, "devices": [{"device": "cuda:0", "counts": {"pass": 9, "fail": 1}}],
        "cases": [{"op": "erf", "dtype": "float16", "check": "values", "status": "fail", "message": "a|b"}]}))
    text = bench.summary(str(tmp_path))
    assert "| 9.00 | 14.00 | 6.00 |" in text and "| 4096 | float32 | 50.0 | 51.0 |" in text
    assert "time budget used up" in text and "Add bandwidth: error RuntimeError: boom" in text
    assert "| check | 0 | 3 |" in text and (tmp_path / "summary.md").exists()
    assert "All passed: False" in text and "| erf | float16 | values | a\\|b |" in text


# --- on a real GPU ------------------------------------------------------------------------------------
@pytest.fixture
def gpu():
    reason = ad.device.unavailable_reason("cuda")
    if reason:
        pytest.skip(reason)
    return "cuda:0"


def test_gpu_math_matches_numpy(gpu):
    a = _rng.standard_normal((64, 32)).astype(np.float32)
    b = _rng.standard_normal((32, 16)).astype(np.float32)
    x, y = ad.asarray(a, device=gpu), ad.asarray(b, device=gpu)
    np.testing.assert_allclose((x @ y).numpy(), a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ad.sum(ad.exp(x), axis=1).numpy(), np.exp(a).sum(1), rtol=1e-5)
    np.testing.assert_allclose(ad.erf(x).numpy(), np.vectorize(math.erf)(a), rtol=1e-5, atol=1e-6)
    h = ad.asarray(a, dtype=ad.bfloat16, device=gpu)
    w = ad.asarray(b, dtype=ad.bfloat16, device=gpu)
    np.testing.assert_allclose((h @ w).numpy().astype(np.float32), a @ b, rtol=5e-2, atol=1e-1)
    assert dispatch.fallback_counts().get(("matmul", gpu), 0) == 0


def test_gpu_memory_stats_streams_events(gpu):
    before = ad.device.memory_allocated(gpu)
    t = ad.zeros((1 << 20,), dtype=ad.float32, device=gpu)  # 4 MiB
    assert ad.device.memory_allocated(gpu) >= before + (4 << 20)
    assert ad.device.max_memory_allocated(gpu) >= ad.device.memory_allocated(gpu)
    props = ad.device.get_device_properties(gpu)
    assert props["total_memory"] > 0 and props["multiprocessors"] > 0
    s = ad.device.Stream(gpu)
    start, end = ad.device.Event(gpu), ad.device.Event(gpu)
    with ad.device.stream_guard(s):
        start.record(s)
        u = ad.sum(t + 1)
        end.record(s)
    end.synchronize()
    assert end.query() and start.elapsed_time(end) >= 0
    assert u.item() == float(1 << 20)


def test_gpu_peer_copy(gpu):
    if ad.device.device_count("cuda") < 2:
        pytest.skip("needs two GPUs")
    t = ad.arange(0, 10, dtype=ad.float32, device="cuda:0").to("cuda:1")
    assert str(t.device) == "cuda:1" and t.tolist() == list(range(10))


def test_gpu_dlpack_is_zero_copy(gpu):
    cupy = pytest.importorskip("cupy")
    t = ad.arange(0, 8, dtype=ad.float32, device=gpu)
    assert t.__dlpack_device__() == (2, 0)
    c = cupy.from_dlpack(t)
    assert c.data.ptr == t._buf.data.ptr
    back = ad.from_dlpack(c, device=gpu)
    assert back._buf.data.ptr == c.data.ptr and back.tolist() == list(range(8))
