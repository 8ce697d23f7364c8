import itertools

import pytest

import anydevice as ad
from anydevice import dtypes as d

# The Array API standard's promotion table (2023.12 / 2024.12), written out independently.
i1, i2, i4, i8 = d.int8, d.int16, d.int32, d.int64
u1, u2, u4, u8 = d.uint8, d.uint16, d.uint32, d.uint64
f4, f8, c8, c16 = d.float32, d.float64, d.complex64, d.complex128
TABLE = {
    (i1, i1): i1, (i1, i2): i2, (i1, i4): i4, (i1, i8): i8,
    (i2, i2): i2, (i2, i4): i4, (i2, i8): i8, (i4, i4): i4, (i4, i8): i8, (i8, i8): i8,
    (u1, u1): u1, (u1, u2): u2, (u1, u4): u4, (u1, u8): u8,
    (u2, u2): u2, (u2, u4): u4, (u2, u8): u8, (u4, u4): u4, (u4, u8): u8, (u8, u8): u8,
    (i1, u1): i2, (i1, u2): i4, (i1, u4): i8, (i2, u1): i2, (i2, u2): i4, (i2, u4): i8,
    (i4, u1): i4, (i4, u2): i4, (i4, u4): i8, (i8, u1): i8, (i8, u2): i8, (i8, u4): i8,
    (f4, f4): f4, (f4, f8): f8, (f8, f8): f8, (c8, c8): c8, (c8, c16): c16, (c16, c16): c16,
    (f4, c8): c8, (f4, c16): c16, (f8, c8): c16, (f8, c16): c16, (d.bool_, d.bool_): d.bool_,
}
FULL = dict(TABLE)
FULL.update({(b, a): r for (a, b), r in TABLE.items()})
STANDARD = [i1, i2, i4, i8, u1, u2, u4, u8, f4, f8, c8, c16, d.bool_]


@pytest.mark.parametrize("a,b", list(itertools.product(STANDARD, STANDARD)), ids=lambda x: x.name)
def test_promotion_matches_standard(a, b):
    want = FULL.get((a, b))
    if want is None:
        with pytest.raises(TypeError, match="no type promotion"):
            d.promote(a, b)
    else:
        assert d.promote(a, b) is want
        assert ad.result_type(a, b) is want


def test_promotion_through_ops():
    x = ad.asarray([1, 2], dtype="uint8")
    y = ad.asarray([1, 2], dtype="int8")
    assert (x + y).dtype is ad.int16
    assert (ad.asarray([1.0], dtype="float32") + ad.asarray([1.0], dtype="float64")).dtype is ad.float64
    assert (ad.ones(2, dtype="float16") + ad.ones(2, dtype="bfloat16")).dtype is ad.float32


def test_python_scalars_adopt_tensor_dtype():
    x = ad.asarray([1, 2], dtype="int8")
    assert (x + 1).dtype is ad.int8
    assert (ad.ones(2, dtype="float16") * 2.5).dtype is ad.float16
    with pytest.raises(OverflowError, match="does not fit in int8"):
        x + 1000
    with pytest.raises(TypeError):
        x + 1.5


def test_dtype_lookup_errors():
    with pytest.raises(TypeError, match="unknown dtype 'float31'"):
        d.dtype("float31")
    assert d.dtype("bfloat16").numpy.name == "bfloat16"
    assert ad.isdtype(ad.float32, "real floating") and not ad.isdtype(ad.int8, ("bool", "real floating"))
    assert ad.can_cast(ad.int8, ad.int32) and not ad.can_cast(ad.float64, ad.float32)
