"""anydevice.save / anydevice.load: round trips on every device, map_location, streaming memory,
corrupt and hostile files, atomic writes, Module.load_state_dict, and interop with safetensors."""
import gc
import json
import math
import os
import random
import time
import tracemalloc

import numpy as np
import pytest
from fakes import FakePlugin, HostRuntime, installed

import anydevice as ad
from anydevice import nn, optimizer

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def _values(d: ad.DType, shape=(2, 3), seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if d.kind == "bool":
        return rng.random(shape) > 0.5
    if d.kind in ("int", "uint"):
        info = np.iinfo(d.numpy)
        return rng.integers(info.min, info.max, shape, dtype=d.numpy, endpoint=True)
    if d.kind == "complex":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(d.numpy)
    return rng.standard_normal(shape).astype(d.numpy)


def _same(a, b) -> None:
    """Exact equality of two loaded values, containers and types included."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, ad.Tensor):
        assert (a.dtype, a.shape, a.device, a.requires_grad) == (b.dtype, b.shape, b.device, b.requires_grad)
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    elif isinstance(a, (np.ndarray, np.generic)):
        assert a.dtype == b.dtype and np.shape(a) == np.shape(b)
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b) and all(type(k) is type(kb) for k, kb in zip(a, b))
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    else:
        assert a == b


def _nested(device: str) -> dict:
    dev = ad.asarray([0], device=device).device
    tensors = {d.name: ad.asarray(_values(d, seed=i), dtype=d, device=device) for i, d in enumerate(dev.dtypes)}
    w = ad.asarray(_values(ad.float32, (4, 3)), device=device).requires_grad_()
    return {
        "tensors": tensors,
        "shapes": [ad.zeros((), dtype=ad.int32, device=device), ad.zeros((0, 5), device=device)],
        "model": {"layer.weight": w},
        "optim": {"state": {0: {"m": ad.ones((4, 3), device=device), "t": 7}, 1: {}}, "lr": 1e-3, "betas": (0.9, 0.999)},
        "rng": np.random.default_rng(5).bit_generator.state,  # 128-bit ints
        "legacy_rng": np.random.RandomState(3).get_state(legacy=False),  # a uint32 numpy array inside
        "floats": [math.inf, -math.inf, math.nan, -0.0, 1e-310, 0.1],
        "misc": (None, True, False, 0, -(2 ** 80), "", "ünïcode", [[], [[1, 2], ()], {}]),
        "keys": {None: 1, True: 2, 3: 3, 2.5: 4, "s": 5, (1, "a"): 6, "$tag-looking": 7},
        "numpy": {"bf16": np.arange(4).astype(ad.bfloat16.numpy), "scalar": np.float32(1.5), "c": np.ones(2, np.complex128)},
        "tied": (w, w),
    }


@pytest.mark.parametrize("device", ["cpu", "npu:1", "dcu:2"])
def test_round_trip_of_a_nested_structure_with_every_dtype_the_device_has(tmp_path, device):
    obj = _nested(device)
    p = tmp_path / "ckpt.safetensors"
    ad.save(obj, p)
    back = ad.load(p)
    _same(obj, back)
    assert back["tied"][0] is back["tied"][1] is back["model"]["layer.weight"]  # stored once, loaded once
    assert set(back["tensors"]) == {d.name for d in ad.asarray([0], device=device).device.dtypes}
    assert back["numpy"]["bf16"].dtype == ad.bfloat16.numpy and back["numpy"]["scalar"] == np.float32(1.5)


def test_save_on_npu_load_on_cpu_or_dcu_with_every_kind_of_map_location(tmp_path):
    p = tmp_path / "npu.safetensors"
    a, b = ad.asarray(_values(ad.bfloat16), device="npu:1"), ad.asarray(_values(ad.int64), device="npu:0")
    ad.save({"a": a, "b": b, "host": np.arange(3)}, p)
    assert [str(t.device) for t in ad.load(p).values() if isinstance(t, ad.Tensor)] == ["npu:1", "npu:0"]
    for where, want in [("cpu", ("cpu:0", "cpu:0")), (ad.asarray([0], device="dcu:3").device, ("dcu:3", "dcu:3")),
                        ({"npu:1": "dcu:0"}, ("dcu:0", "npu:0")), ({"npu": "cpu"}, ("cpu:0", "cpu:0")),
                        (lambda saved: saved.replace("npu", "dcu"), ("dcu:1", "dcu:0")),
                        (lambda saved: None, ("npu:1", "npu:0"))]:
        got = ad.load(p, map_location=where)
        assert (str(got["a"].device), str(got["b"].device)) == want, where
        assert got["a"].dtype == ad.bfloat16 and got["b"].dtype == ad.int64
        np.testing.assert_array_equal(got["a"].numpy(), a.numpy())
        np.testing.assert_array_equal(got["b"].numpy(), b.numpy())
        assert isinstance(got["host"], np.ndarray)  # numpy stays numpy wherever tensors go
    with pytest.raises(TypeError, match="map_location must be None, a Device"):
        ad.load(p, map_location=3)
    with pytest.raises(ValueError, match=r"map_location\['npu:1'\] is 'nope:0'"):
        ad.load(p, map_location={"npu:1": "nope:0"})
    with pytest.raises(ValueError, match="map_location is 'npu:99'.*does not exist"):
        ad.load(p, map_location="npu:99")


def test_a_device_that_is_not_here_is_named_with_a_map_location_hint(tmp_path):
    p = tmp_path / "fake.safetensors"
    with installed(FakePlugin(types=("ckptdev",), runtime=HostRuntime(count=2))):
        ad.save({"w": ad.asarray(_values(ad.float32), device="ckptdev:1")}, p)
        assert str(ad.load(p)["w"].device) == "ckptdev:1"
    with pytest.raises(ad.CheckpointError, match=r"saved on ckptdev:1, which cannot be used here .*pass map_location") as e:
        ad.load(p)
    assert e.value.path == str(p) and str(p) in str(e.value)
    np.testing.assert_array_equal(ad.load(p, map_location={"ckptdev:1": "cpu"})["w"].numpy(), _values(ad.float32))


def test_a_dtype_the_target_device_lacks_fails_before_anything_is_read(tmp_path):
    p = tmp_path / "c.safetensors"
    ad.save({"z": ad.asarray(_values(ad.complex128))}, p)
    with pytest.raises(ad.CheckpointError, match=r"tensor 'z' is complex128, which npu:0 does not support"):
        ad.load(p, map_location="npu")
    assert ad.load(p, map_location="dcu")["z"].dtype == ad.complex128


def test_unsupported_objects_are_refused_before_a_file_is_written(tmp_path):
    p = tmp_path / "x.safetensors"
    with pytest.raises(TypeError, match=r"obj\['a'\]\[1\] is a builtins.set, which a checkpoint cannot hold; allowed"):
        ad.save({"a": [1, {2}]}, p)
    with pytest.raises(TypeError, match=r"a dict key in obj\['d'\] is an array"):
        ad.save({"d": {ad.zeros(()): 1}}, p)
    with pytest.raises(TypeError, match=r"a dict key in obj\['d'\] is a builtins.frozenset"):
        ad.save({"d": {(1, frozenset()): 1}}, p)
    loop = []
    loop.append(loop)
    with pytest.raises(ValueError, match=r"obj\[0\] contains itself"):
        ad.save(loop, p)
    deep = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(ValueError, match="nested too deeply"):
        ad.save(deep, p)
    with pytest.raises(TypeError, match="numpy dtype object"):
        ad.save({"o": np.array([object()])}, p)
    assert os.listdir(tmp_path) == []


# --- streaming memory --------------------------------------------------------------------------
def test_load_and_save_stream_one_tensor_at_a_time(tmp_path):
    p = tmp_path / "big.safetensors"
    largest = 8 << 20
    state = {f"t{i}": ad.asarray(np.full(largest // 4, i, np.float32)) for i in range(8)}  # 64 MiB
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        ad.save(state, p)
        save_peak = tracemalloc.get_traced_memory()[1] - base
        assert os.path.getsize(p) > 8 * largest
        del state
        gc.collect()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        back = ad.load(p)
        kept, peak = (m - base for m in tracemalloc.get_traced_memory())
    finally:
        tracemalloc.stop()
    assert kept >= 8 * largest  # what load() returns is traced: the measurement sees tensor memory
    assert peak - kept < 2 * largest, f"load peaked {(peak - kept) / 2**20:.1f} MiB above its result"
    assert save_peak < 2 * largest, f"save peaked {save_peak / 2**20:.1f} MiB"
    assert [float(back[f"t{i}"][0]) for i in range(8)] == list(range(8))


# --- corrupt and hostile files -----------------------------------------------------------------
def _model():
    return nn.Linear(4, 3, rng=np.random.default_rng(0))


def _good(tmp_path):
    src = tmp_path / "good.safetensors"
    m = _model()
    ad.save({n: ad.asarray(v) for n, v in m.state_dict().items()}, src)
    return src, src.read_bytes()


def _parts(data: bytes):
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + n]), data[8 + n:]


def _pack(header, body: bytes) -> bytes:
    h = json.dumps(header).encode() if not isinstance(header, bytes) else header
    return len(h).to_bytes(8, "little") + h + body


def _variants(data: bytes):
    """(name, bytes, message pattern, whether the safetensors library also rejects it)."""
    header, body = _parts(data)
    names = [k for k in header if k != "__metadata__"]
    first = min(names, key=lambda k: header[k]["data_offsets"][0])
    n = int.from_bytes(data[:8], "little")

    def edit(fn, meta=None):
        h = json.loads(json.dumps(header))
        fn(h)
        if meta is not None:
            h["__metadata__"]["anydevice"] = meta
        return _pack(h, body)

    def offs(name, value):
        return lambda h: h[name].__setitem__("data_offsets", value)

    end = len(body)
    w, b = header["weight"]["data_offsets"], header["bias"]["data_offsets"]
    yield "empty", b"", "shorter than the 8-byte header length", True
    yield "cut in the length", data[:5], "shorter than the 8-byte header length", True
    yield "cut in the header", data[:8 + n // 2], r"runs past the end of the \d+-byte file", True
    yield "cut in the data", data[:-7], "past the end of the file's", True
    yield "one byte short", data[:-1], "past the end of the file's", True
    yield "trailing bytes", data + b"\0" * 8, "8 bytes after its last tensor", True
    yield "huge header length", (2 ** 62).to_bytes(8, "little") + data[8:], "over the 100000000-byte limit", True
    yield "flipped brace", data[:8] + b"[" + data[9:], "header is not valid JSON", True
    yield "not utf-8", data[:8] + b"\xff" + data[9:], "header is not valid JSON", True
    yield "header is a list", _pack(b"[1, 2]      ", body), "header is a JSON list, not an object", True
    yield "2**62-byte tensor", edit(lambda h: h[first].update(shape=[2 ** 60], data_offsets=[0, 2 ** 62])), \
        "ends at data byte 4611686018427387904, past the end", True
    yield "offsets past the end", edit(offs(first, [end, end + 48])), "past the end of the file's", True
    yield "overlapping offsets", edit(lambda h: (offs("weight", [0, w[1] - w[0]])(h), offs("bias", [0, b[1] - b[0]])(h))), \
        "overlap", True
    yield "end before begin", edit(offs(first, [8, 0])), "0 <= begin <= end", True
    yield "shape/size mismatch", edit(lambda h: h[first].update(shape=[5, 5])), r"F32\[5, 5\] \(100 bytes\) but its data_offsets span", True
    yield "unknown dtype", edit(lambda h: h[first].update(dtype="F8_E4M3")), "unknown dtype 'F8_E4M3'; anydevice reads", False
    yield "too many dims", edit(lambda h: h[first].update(shape=[1] * 12 + [3, 4] + [1] * 99)), "dimensions; at most", True
    yield "negative dim", edit(lambda h: h[first].update(shape=[-12])), "list of non-negative ints", True
    yield "NaN in header", data[:8] + data[8:8 + n].replace(b'"F32"', b"NaN  ", 1) + body, "not valid JSON: NaN is not JSON", True
    yield "non-JSON metadata", edit(lambda h: None, meta="{not json"), "structure metadata is not valid JSON", False
    yield "unknown type in metadata", edit(lambda h: None, meta='{"weight": {"$set": [1]}}'), \
        "encodes an unknown type '\\$set' at obj\\['weight'\\]", False
    yield "missing tensor", edit(lambda h: None, meta=json.dumps(
        {k: {"$tensor": {"name": k + "x", "dtype": "float32", "device": "cpu:0"}} for k in names})), "which is not in the file", False
    yield "unreferenced tensor", edit(lambda h: None, meta=json.dumps(
        {"weight": {"$tensor": {"name": "weight", "dtype": "float32", "device": "cpu:0"}}})), "not in its structure metadata", False
    yield "wrong dtype in metadata", edit(lambda h: None, meta=json.dumps(
        {k: {"$tensor": {"name": k, "dtype": "int32", "device": "cpu:0"}} for k in names})), "cannot hold int32 data", False
    yield "deep nesting", edit(lambda h: None, meta="[" * 100_000 + "]" * 100_000), "nested too deeply", False
    yield "deep structure", edit(lambda h: None, meta="[" * 700 + "]" * 700), "structure metadata is nested too deeply", False
    yield "newer format", edit(lambda h: h["__metadata__"].update({"anydevice.format": "9"})), "format '9'", False
    yield "duplicate key", _pack(data[8:8 + n].replace(b'"shape"', b'"dtype":"F32","shape"', 1), body), "appears twice", False


def test_every_corrupt_file_gives_a_clear_error_and_a_model_loaded_from_it_is_unchanged(tmp_path):
    src, data = _good(tmp_path)
    m = _model()
    m.weight = nn.parameter(np.zeros((3, 4), np.float32))
    before = {k: v.copy() for k, v in m.state_dict().items()}
    m.load_state_dict(ad.load(src))  # the good file loads
    assert not np.array_equal(m.state_dict()["weight"], before["weight"])
    m.load_state_dict(before)
    seen = set()
    for name, bad, pattern, lib_rejects in _variants(data):
        assert bad != data, name
        p = tmp_path / f"bad-{len(seen)}.safetensors"
        p.write_bytes(bad)
        with pytest.raises(ad.CheckpointError, match=pattern) as e:
            m.load_state_dict(ad.load(p))
        assert isinstance(e.value, ValueError) and e.value.path == str(p) and repr(str(p)) in str(e.value), name
        for k, v in m.state_dict().items():
            np.testing.assert_array_equal(v, before[k], err_msg=name)
        if lib_rejects:  # the reference library agrees the layout is broken
            with pytest.raises(Exception):  # noqa: B017 - the library's error types vary by version
                safetensors_numpy.load_file(p)
        seen.add(name)
    assert len(seen) == 28


def test_a_bool_tensor_holding_other_bytes_is_refused(tmp_path):
    p = tmp_path / "b.safetensors"
    ad.save({"m": ad.asarray([True, False, True])}, p)
    data = bytearray(p.read_bytes())
    data[-2] = 7
    p.write_bytes(bytes(data))
    with pytest.raises(ad.CheckpointError, match="tensor 'm' is BOOL but holds bytes other than 0 and 1"):
        ad.load(p)


def test_random_byte_flips_give_a_checkpoint_error_or_a_well_formed_result(tmp_path):
    """Any header byte changed: load() either raises CheckpointError or returns the same structure
    of tensors. ANYDEVICE_CHECKPOINT_FUZZ_S lengthens the run (seconds, default 1)."""
    src, data = _good(tmp_path)
    n = 8 + int.from_bytes(data[:8], "little")
    rng, stop, p, tries = random.Random(0), time.monotonic() + float(os.environ.get("ANYDEVICE_CHECKPOINT_FUZZ_S", "1")), \
        tmp_path / "f.safetensors", 0
    while time.monotonic() < stop or tries < 50:
        bad = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            bad[rng.randrange(n)] = rng.randrange(256)
        p.write_bytes(bytes(bad))
        try:
            got = ad.load(p)
        except ad.CheckpointError:
            pass
        else:
            assert isinstance(got, dict) and all(isinstance(v, ad.Tensor) for v in got.values())
        tries += 1


# --- atomic writes ----------------------------------------------------------------------------
class _FailingReads(HostRuntime):
    """Device reads fail after ``ok`` successful ones."""

    def __init__(self, ok):
        super().__init__(count=1)
        self.ok = ok

    def copy_d2h(self, index, dst, src, offset):
        if self.ok == 0:
            raise RuntimeError("device read failed (injected)")
        self.ok -= 1
        super().copy_d2h(index, dst, src, offset)


def test_a_failed_save_leaves_no_partial_file_and_keeps_the_old_checkpoint(tmp_path):
    p = tmp_path / "ckpt.safetensors"
    ad.save({"step": 1, "w": ad.asarray(_values(ad.float32))}, p)
    old = p.read_bytes()
    rt = _FailingReads(ok=10**9)
    with installed(FakePlugin(types=("flaky",), runtime=rt)):
        state = {f"t{i}": ad.asarray(_values(ad.float32, (64, 64), seed=i), device="flaky") for i in range(4)}
        rt.ok = 2  # the third tensor's host read fails midway through the file
        with pytest.raises(RuntimeError, match="injected"):
            ad.save(state, p)
        assert p.read_bytes() == old and sorted(os.listdir(tmp_path)) == ["ckpt.safetensors"]
        with pytest.raises(RuntimeError, match="injected"):
            rt.ok = 1
            ad.save(state, tmp_path / "new.safetensors")
        assert sorted(os.listdir(tmp_path)) == ["ckpt.safetensors"]
        rt.ok = 10**9
        ad.save(state, p)
    back = ad.load(p, map_location="cpu")
    np.testing.assert_array_equal(back["t3"].numpy(), _values(ad.float32, (64, 64), seed=3))
    assert sorted(os.listdir(tmp_path)) == ["ckpt.safetensors"]


# --- Module.load_state_dict -------------------------------------------------------------------
def test_load_state_dict_reports_every_problem_and_changes_nothing(tmp_path):
    seq = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 2))
    before = seq.state_dict()
    good = {k: v + 1 for k, v in before.items()}
    bad = dict(good, **{"2.bias": np.zeros(7, np.float32)})
    with pytest.raises(ValueError, match=r"2.bias has shape \(2,\) in the model but \(7,\) in the state; nothing"):
        seq.load_state_dict(bad)  # 0.* come first and would have loaded before the old check
    extra = {k: v for k, v in good.items() if k != "0.bias"} | {"9.weight": np.zeros(1)}
    with pytest.raises(KeyError, match=r"missing keys \['0.bias'\], unexpected keys \['9.weight'\]"):
        seq.load_state_dict(extra)
    with pytest.raises(TypeError, match="complex data cannot become float32"):
        seq.load_state_dict(dict(good, **{"2.bias": np.zeros(2, np.complex64)}))
    for k, v in seq.state_dict().items():
        np.testing.assert_array_equal(v, before[k])
    res = seq.load_state_dict(extra, strict=False)
    assert res.missing_keys == ["0.bias"] and res.unexpected_keys == ["9.weight"]
    np.testing.assert_array_equal(seq.state_dict()["0.weight"], good["0.weight"])
    np.testing.assert_array_equal(seq.state_dict()["0.bias"], before["0.bias"])
    with pytest.raises(TypeError, match="state must be a mapping"):
        seq.load_state_dict([1])


def test_training_resumes_on_another_device_from_a_checkpoint(tmp_path):
    x, y = (ad.asarray(np.random.default_rng(s).standard_normal((8, 4)).astype(np.float32), device="npu:0") for s in (1, 2))
    model = nn.Linear(4, 4, rng=np.random.default_rng(0), device="npu:0")
    opt = optimizer.Adam(model, lr=0.1)

    def step(m, o, xs, ys):
        loss = nn.mse_loss(m(xs), ys)
        loss.backward()
        o.step()
        o.zero_grad()

    step(model, opt, x, y)
    p = tmp_path / "train.safetensors"
    ad.save({"model": {n: t for n, t in model.named_parameters()}, "optim": opt.state_dict()}, p)
    state = ad.load(p, map_location="cpu")
    resumed = nn.Linear(4, 4)
    resumed.load_state_dict(state["model"])
    opt2 = optimizer.Adam(resumed, lr=0.1)
    opt2.load_state_dict(state["optim"])
    st = opt2.state[resumed.weight]
    assert st["step"] == 1 and st["exp_avg"].device == ad.asarray([0]).device
    step(model, opt, x, y)
    step(resumed, opt2, x.to("cpu"), y.to("cpu"))
    np.testing.assert_allclose(resumed.weight.numpy(), model.weight.numpy(), rtol=1e-5, atol=1e-6)


# --- interop ----------------------------------------------------------------------------------
def test_files_open_with_the_plain_safetensors_library(tmp_path):
    p = tmp_path / "i.safetensors"
    vals = {d: _values(d, seed=i) for i, d in enumerate(ad.asarray([0]).device.dtypes)}
    ad.save({"dt": {d.name: ad.asarray(v, dtype=d) for d, v in vals.items()}, "step": 3}, p)
    raw = safetensors_numpy.load_file(p)
    assert set(raw) == {f"dt.{d.name}" for d in vals}
    for d, v in vals.items():
        got = raw[f"dt.{d.name}"]
        if d.kind == "complex":  # real pairs in a trailing dimension of 2
            assert got.dtype == v.real.dtype and got.shape == v.shape + (2,)
            got = got[..., 0] + 1j * got[..., 1]
        assert got.dtype == v.dtype
        np.testing.assert_array_equal(got, v)
    theirs = tmp_path / "theirs.safetensors"
    safetensors_numpy.save_file({"a": vals[ad.float16], "c": vals[ad.complex64], "b": vals[ad.uint64]}, theirs)
    back = ad.load(theirs, map_location="dcu:1")
    assert list(back) == ["a", "b", "c"] or set(back) == {"a", "b", "c"}
    for k, d in (("a", ad.float16), ("b", ad.uint64), ("c", ad.complex64)):
        assert back[k].dtype == d and str(back[k].device) == "dcu:1"
        np.testing.assert_array_equal(back[k].numpy(), vals[d])


def test_files_load_into_pytorch(tmp_path):
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    p = tmp_path / "t.safetensors"
    vals = {d: _values(d, seed=i) for i, d in enumerate(ad.asarray([0]).device.dtypes)}
    ad.save({d.name: ad.asarray(v, dtype=d) for d, v in vals.items()}, p)
    got = safetensors_torch.load_file(p)
    for d, v in vals.items():
        t = got[d.name]
        if d.kind == "complex":
            t = torch.view_as_complex(t)
        assert str(t.dtype) == "torch." + d.name
        ref = torch.from_numpy(v.view(np.uint16)).view(torch.bfloat16) if d is ad.bfloat16 else torch.from_numpy(v)
        assert torch.equal(t, ref), d
