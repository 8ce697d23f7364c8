"""The public surface against the Python Array API standard 2024.12, as array-api-strict (its
strict reference implementation) spells it: every function of the main namespace and of the
``linalg`` and ``fft`` extensions exists in anydevice with the same signature (parameter names,
kinds, defaults), the Tensor has the standard's attributes and methods, and the inspection
namespace reports what each device really has. The function lists come from array-api-strict, never
typed here by hand."""
from __future__ import annotations

import inspect

import array_api_strict as strict
import numpy as np
import pytest
from array_api_strict import _array_object

import anydevice as ad

VERSION = "2024.12"
#: array-api-strict's own helpers, not part of the standard.
NOT_STANDARD = {"get_array_api_strict_flags", "set_array_api_strict_flags", "reset_array_api_strict_flags",
                "ArrayAPIStrictFlags"}
#: Extension functions still being built; every name here must still be missing (the list shrinks to empty).
NOT_YET: dict[str, set] = {"linalg": set(), "fft": set()}


def _introduced(fn) -> str:
    """The standard version that added ``fn`` (array-api-strict wraps newer functions with it)."""
    try:
        return inspect.getclosurevars(fn).nonlocals.get("version", "2021.12")
    except TypeError:
        return "2021.12"


def _functions(module) -> list:
    """Names of the standard's functions in ``module`` up to :data:`VERSION`."""
    out = []
    for name in module.__all__:
        fn = getattr(module, name)
        if name in NOT_STANDARD or not inspect.isfunction(fn) or _introduced(fn) > VERSION:
            continue
        out.append(name)
    return sorted(out)


def _params(fn, skip_self=False) -> list:
    """(name, kind, default) of every parameter; array-api-strict's ``Undef`` sentinel is the
    standard's ``None`` default, annotations are not compared."""
    ps = list(inspect.signature(fn).parameters.values())[1 if skip_self else 0:]
    return [(p.name, p.kind.name, None if type(p.default).__name__ == "Undef" else p.default) for p in ps]


def _ours(fn, ref) -> list:
    """:func:`_params` of an anydevice function, less the keyword-only parameters with defaults that
    the standard does not have (it allows such extensions: ``unique_values(x, /, *, size=None)``)."""
    known = {p[0] for p in _params(ref)}
    return [p for p in _params(fn) if p[0] in known or p[1] != "KEYWORD_ONLY" or p[2] is inspect.Parameter.empty]


MAIN = _functions(strict)
EXTENSIONS = {ext: _functions(getattr(strict, ext)) for ext in ("linalg", "fft")}


def test_the_function_lists_come_from_the_reference():
    # a broken discovery would make every other test here pass vacuously
    assert len(MAIN) > 120 and {"meshgrid", "tensordot", "unstack", "diff", "astype"} <= set(MAIN)
    assert "broadcast_shapes" not in MAIN and "isin" not in MAIN  # 2025.12 additions
    assert len(EXTENSIONS["linalg"]) > 20 and len(EXTENSIONS["fft"]) == 14


@pytest.mark.parametrize("name", MAIN)
def test_main_namespace_function(name):
    fn = getattr(ad, name, None)
    assert fn is not None, f"anydevice.{name} is missing"
    assert _ours(fn, getattr(strict, name)) == _params(getattr(strict, name)), f"{name}{inspect.signature(fn)}"
    assert fn.__doc__ and len(fn.__doc__.strip()) > 20, f"anydevice.{name} has no docstring for help()"


@pytest.mark.parametrize("ext,name", [(e, n) for e, names in EXTENSIONS.items() for n in names])
def test_extension_function(ext, name):
    mod = getattr(ad, ext, None)
    fn = getattr(mod, name, None)
    if name in NOT_YET[ext]:
        assert fn is None, f"anydevice.{ext}.{name} exists now: take it off NOT_YET"
        pytest.fail(f"anydevice.{ext}.{name} is not implemented yet")
    assert fn is not None, f"anydevice.{ext}.{name} is missing"
    ref = getattr(getattr(strict, ext), name)
    assert _ours(fn, ref) == _params(ref), f"{ext}.{name}{inspect.signature(fn)}"


def test_the_not_yet_list_is_exact():
    for ext, names in NOT_YET.items():
        missing = {n for n in EXTENSIONS[ext] if not hasattr(getattr(ad, ext, None), n)}
        assert missing == names, f"{ext}: missing now {sorted(missing)}, listed {sorted(names)}"


#: Where array-api-strict's Array departs from the standard's text: ``to_device``'s ``stream`` is
#: keyword-only there (``to_device(device, /, *, stream=None)``); ``__buffer__`` is Python's buffer
#: protocol for numpy, not part of the standard.
TENSOR_DEVIATIONS = {"to_device": [("device", "POSITIONAL_ONLY", inspect.Parameter.empty),
                                   ("stream", "KEYWORD_ONLY", None)]}
TENSOR_SKIP = {"__buffer__"}
_ARRAY = _array_object.Array
TENSOR_NAMES = sorted(n for n in vars(_ARRAY) if n not in TENSOR_SKIP and not n.startswith("_")
                      or (n.startswith("__") and n.endswith("__") and n not in vars(object) and n not in TENSOR_SKIP
                          and n not in ("__annotations__", "__slots__", "__weakref__", "__dict__", "__module__",
                                        "__firstlineno__", "__static_attributes__", "__orig_bases__",
                                        "__parameters__")))


def test_tensor_names_come_from_the_reference():
    assert {"__add__", "__rtruediv__", "__dlpack__", "__array_namespace__", "mT", "T", "device", "to_device"} \
        <= set(TENSOR_NAMES)


@pytest.mark.parametrize("name", TENSOR_NAMES)
def test_tensor_attribute(name):
    ref = getattr(_ARRAY, name)
    ours = getattr(ad.Tensor, name, None)
    assert ours is not None, f"Tensor.{name} is missing"
    if not callable(ref) or isinstance(ref, property):
        return
    expected = TENSOR_DEVIATIONS.get(name) or _params(ref, skip_self=True)
    assert _params(ours, skip_self=True) == expected, f"Tensor.{name}{inspect.signature(ours)}"


def test_tensor_properties_on_a_value():
    x = ad.reshape(ad.arange(6, dtype=ad.float32), (2, 3))
    assert x.mT.shape == (3, 2) and x.T.shape == (3, 2) and x.ndim == 2 and x.size == 6
    assert x.device == ad.__array_namespace_info__().default_device()
    y = x.to_device("npu:0")
    assert str(y.device) == "npu:0" and y.tolist() == x.tolist() and x.to_device(x.device) is x


# --- version, namespace, inspection --------------------------------------------------------------
def test_array_api_version_and_namespace():
    x = ad.ones(2)
    assert ad.__array_api_version__ == "2024.12"
    for v in (None, "2021.12", "2022.12", "2023.12", "2024.12"):
        assert x.__array_namespace__(api_version=v) is ad
    for bad in ("2025.12", "2020.10", "latest"):
        with pytest.raises(ValueError, match=r"api_version .* is not supported; allowed: None, '2021.12'"):
            x.__array_namespace__(api_version=bad)
    with pytest.raises(TypeError):
        x.__array_namespace__("2024.12")  # keyword-only


def test_to_device_with_a_stream():
    from anydevice.runtime.streams import Stream

    x = ad.arange(4, dtype=ad.float32)
    s = Stream("npu:0")
    assert x.to_device("npu:0", stream=s).tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match=r"to_device\(\): stream must be None or a Stream of npu:1"):
        x.to_device("npu:1", stream=s)


def _devices():
    return [str(d) for d in ad.__array_namespace_info__().devices()]


def test_info_devices_and_capabilities():
    info = ad.__array_namespace_info__()
    devs = info.devices()
    assert str(devs[0]) == "cpu:0" and {"npu:0", "opencl:0"} <= set(map(str, devs))
    assert info.capabilities() == {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": 64}
    x = ad.ones(2)
    assert x[ad.asarray([True, False])].shape == (1,)  # what "boolean indexing" promises
    with pytest.raises(ValueError, match="at most 64"):
        ad.zeros((1,) * 65)
    with ad.device_guard("xpu:0"):
        assert str(info.default_device()) == "xpu:0"


@pytest.mark.parametrize("device", ["cpu:0", "npu:0", "xpu:0", "dcu:0", "opencl:0"])
def test_info_dtypes_are_what_the_device_has(device):
    info = ad.__array_namespace_info__()
    have = info.dtypes(device=device)
    for name, d in have.items():  # every listed dtype really works on the device
        assert ad.zeros(2, dtype=d, device=device).dtype is d and d.name == name
    for d in set(ad.dtypes.ALL_DTYPES) - set(have.values()):
        with pytest.raises(Exception, match=d.name):
            ad.zeros(2, dtype=d, device=device)
    real = info.dtypes(device=device, kind="real floating")
    assert set(real.values()) == {d for d in have.values() if ad.isdtype(d, "real floating")}
    assert set(info.dtypes(device=device, kind=("bool", "signed integer")).values()) == \
        {d for d in have.values() if d is ad.bool or ad.isdtype(d, "signed integer")}
    defaults = info.default_dtypes(device=device)
    assert defaults["real floating"] is ad.float32 and defaults["indexing"] is ad.int64
    assert ad.asarray([1.5], device=device).dtype is defaults["real floating"]
    assert ad.argmax(ad.ones(3, device=device)).dtype is defaults["indexing"]
    if ad.complex64 in have.values():
        assert defaults["complex floating"] is ad.complex64 and ad.asarray([1j], device=device).dtype is ad.complex64
    else:
        assert "complex floating" not in defaults


def test_npu_has_no_complex_so_info_says_so():
    info = ad.__array_namespace_info__()
    assert info.dtypes(device="npu:0", kind="complex floating") == {}
    assert "complex floating" not in info.default_dtypes(device="npu:0")
    with pytest.raises(ValueError, match="unknown dtype kind 'floats'"):
        info.dtypes(kind="floats")


# --- finfo / iinfo / result_type / isdtype / can_cast --------------------------------------------
@pytest.mark.parametrize("name", ["float16", "float32", "float64", "complex64", "complex128", "bfloat16"])
def test_finfo(name):
    f = ad.finfo(getattr(ad, name))
    real = {"complex64": "float32", "complex128": "float64"}.get(name, name)
    ref = np.finfo(real) if real != "bfloat16" else __import__("ml_dtypes").finfo("bfloat16")
    for attr in ("eps", "max", "min", "smallest_normal"):
        assert type(getattr(f, attr)) is float and getattr(f, attr) == float(getattr(ref, attr))
    assert type(f.bits) is int and f.bits == ref.bits and f.dtype is getattr(ad, real)
    assert ad.finfo(ad.ones(1, dtype=getattr(ad, name))).eps == f.eps


@pytest.mark.parametrize("name", ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"])
def test_iinfo(name):
    i = ad.iinfo(getattr(ad, name))
    ref = np.iinfo(name)
    assert (type(i.max), type(i.min), type(i.bits)) == (int, int, int)
    assert (i.bits, i.max, i.min, i.dtype) == (ref.bits, int(ref.max), int(ref.min), getattr(ad, name))


def test_result_type_with_python_scalars():
    cases = [((ad.float32, 1j), ad.complex64), ((ad.float64, 1j), ad.complex128), ((ad.float32, 1), ad.float32),
             ((ad.int8, 1), ad.int8), ((ad.bool, True), ad.bool), ((ad.complex64, 1.0), ad.complex64),
             ((ad.int8, ad.int16, 1), ad.int16), ((ad.ones(2, dtype=ad.uint8), 3), ad.uint8)]
    for args, want in cases:
        assert ad.result_type(*args) is want, args
        if not any(isinstance(a, ad.Tensor) for a in args):  # the reference agrees
            ref = strict.result_type(*[getattr(strict, a.name) if isinstance(a, ad.DType) else a for a in args])
            assert ref == getattr(strict, want.name)
    for args, what in [((ad.int8, 1.0), "a float combines with floating dtypes"),
                       ((ad.bool, 1), "an int combines with integer and floating dtypes"),
                       ((ad.int8, True), "a bool combines only with bool")]:
        with pytest.raises(TypeError, match=what):
            ad.result_type(*args)
    with pytest.raises(TypeError, match="Python scalars alone have no dtype"):
        ad.result_type(1, 2.0)


def test_isdtype_and_can_cast():
    assert ad.isdtype(dtype=ad.int8, kind="integral") and not ad.isdtype(ad.float32, ("bool", "integral"))
    assert ad.isdtype(ad.float32, ad.float32) and ad.isdtype(ad.complex64, "numeric")
    with pytest.raises(TypeError, match="isdtype\\(\\): dtype must be an anydevice dtype"):
        ad.isdtype("float32", "numeric")
    with pytest.raises(ValueError, match="unknown dtype kind 'float'"):
        ad.isdtype(ad.float32, "float")
    assert ad.can_cast(ad.int8, ad.int16) and not ad.can_cast(ad.int16, ad.int8)
    assert ad.can_cast(ad.ones(1, dtype=ad.float32), ad.float64)


# --- signatures are enforced the way they are shown --------------------------------------------
def test_binding_follows_the_signature():
    x = ad.ones((2, 3))
    with pytest.raises(TypeError, match=r"sum\(\): takes 1 positional argument\(s\) \(axis, dtype, keepdims "
                                        r"keyword-only\) but 2 were given; the signature is sum\(x, /, \*"):
        ad.sum(x, 0)
    with pytest.raises(TypeError, match=r"astype\(\): dtype is positional-only"):
        ad.engine.dispatch.xp.astype(x, dtype=ad.int8)
    with pytest.raises(TypeError, match=r"squeeze\(\): missing required argument 'axis'"):
        ad.squeeze(x)
    with pytest.raises(TypeError, match=r"add\(\): x1, x2 are positional-only"):
        ad.add(x1=x, x2=x)
    with pytest.raises(TypeError, match=r"reshape\(\): got multiple values for argument 'shape'"):
        ad.reshape(x, (6,), shape=(6,))
    with pytest.raises(TypeError, match=r"arange\(\): start is positional-only"):
        ad.arange(start=3)
    assert ad.reshape(x, shape=(3, 2)).shape == (3, 2) and ad.arange(1, stop=4).tolist() == [1, 2, 3]
    assert ad.sum(x, axis=0, keepdims=True).shape == (1, 3)


def test_help_shows_signature_and_parameters():
    import pydoc

    text = pydoc.render_doc(ad.sum, renderer=pydoc.plaintext)
    assert "sum(x, /, *, axis:" in text and "keepdims : bool, default False" in text
    assert "Returns" in text and "reduction" in text
    assert "repetitions : tuple[int, ...], required" in ad.tile.__doc__
