import numpy as np
import pytest

import anydevice as ad


def test_value_semantics_views_never_alias():
    x = ad.arange(6, dtype=ad.float32)
    r = ad.reshape(x, (2, 3))
    s = x[1:4]
    x[2] = 100.0
    assert r.tolist() == [[0, 1, 2], [3, 4, 5]] and s.tolist() == [1, 2, 3]
    assert x.tolist() == [0, 1, 100, 3, 4, 5]


def test_numpy_returns_a_copy():
    x = ad.ones(3)
    a = x.numpy()
    a[0] = 5
    assert x.tolist() == [1, 1, 1]
    np.asarray(x)[1] = 7
    assert x.tolist() == [1, 1, 1]
    with pytest.raises(ValueError, match="without a copy"):
        np.asarray(x, copy=False) if np.__version__ >= "2" else x.__array__(copy=False)


def test_inplace_must_keep_dtype():
    x = ad.asarray([1, 2], dtype="int32")
    x += 1
    assert x.dtype is ad.int32 and x.tolist() == [2, 3]
    y = ad.asarray([1, 2], dtype="int8")
    with pytest.raises(TypeError, match="in-place update would change int8"):
        y += ad.asarray([1, 1], dtype="int16")
    assert y.tolist() == [1, 2], "a failed in-place update leaves the tensor unchanged"


def test_setitem_forms_and_errors():
    x = ad.zeros((3, 4))
    x[0] = 1.0
    x[1, 1:3] = ad.asarray([5.0, 6.0])
    x[..., -1] = 9.0
    assert x.tolist() == [[1, 1, 1, 9], [0, 5, 6, 9], [0, 0, 0, 9]]
    with pytest.raises(IndexError, match="out of bounds"):
        x[3] = 1.0
    with pytest.raises(ValueError, match="cannot be broadcast"):
        x[0] = ad.ones(3)
    with pytest.raises(TypeError, match="cannot assign a float64"):
        x[0] = ad.ones(4, dtype=ad.float64)
    with pytest.raises(IndexError, match="boolean mask"):  # a mask works only as the whole index
        x[x > 0, 0]
    assert np.array_equal(x[x > 0].numpy(), x.numpy()[x.numpy() > 0])


def test_repr_shows_device_and_scalars():
    t = ad.asarray([[1.5, 2.0]])
    assert "device=cpu:0" in repr(t) and "float32" in repr(t)
    assert float(ad.sum(t)) == 3.5 and int(ad.asarray(3)) == 3
    with pytest.raises(ValueError, match="ambiguous"):
        bool(t)
    with pytest.raises(TypeError, match="cannot be constructed directly"):
        ad.Tensor([1, 2])


def test_asarray_dtypes():
    assert ad.asarray([1.0]).dtype is ad.float32
    assert ad.asarray(np.array([1.0])).dtype is ad.float64
    assert ad.asarray([1]).dtype is ad.int64
    assert ad.asarray([True]).dtype is ad.bool
    assert ad.asarray([1 + 2j]).dtype is ad.complex64
    with pytest.raises(TypeError, match="cannot convert list to a tensor"):
        ad.asarray([[1, 2], [3]])
    b = ad.asarray([1.5, 2.5], dtype="bfloat16")
    assert b.dtype is ad.bfloat16 and b.numpy().dtype.name == "bfloat16"


def test_dlpack_roundtrip_on_cpu():
    x = ad.asarray([1.0, 2.0])
    assert x.__dlpack_device__() == (1, 0)
    y = np.from_dlpack(x)
    assert y.tolist() == [1.0, 2.0]
    z = ad.from_dlpack(np.arange(3.0))
    assert z.tolist() == [0.0, 1.0, 2.0]


def test_namespace_info():
    info = ad.__array_namespace_info__()
    assert info.default_dtypes()["real floating"] is ad.float32
    assert "bfloat16" in info.dtypes(device="cpu")
    assert ad.ones(2).__array_namespace__() is ad
