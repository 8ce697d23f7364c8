"""Bad input gets a clear error naming what was wrong and what is allowed, never a bare numpy traceback."""
import pytest
from fakes import FakePlugin, HostRuntime, installed

import anydevice as ad

X = ad.ones((2, 3))
CASES = [
    (lambda: ad.asarray("abc"), TypeError, "cannot be a tensor element type; allowed: bool"),
    (lambda: ad.asarray({}), TypeError, "cannot convert dict to a tensor"),
    (lambda: ad.zeros((-1,)), ValueError, "negative dimension in shape"),
    (lambda: ad.zeros("a"), TypeError, "shape must be an int or a tuple of ints"),
    (lambda: ad.reshape(X, (5,)), ValueError, r"cannot reshape an array of shape \(2, 3\) \(6 elements\) into \(5,\)"),
    (lambda: X.to("nosuch"), ValueError, "unknown device type 'nosuch'. Available: cpu"),
    (lambda: ad.sum(X, axis=5), ValueError, "axis 5 is out of range for an array of 2 dimension"),
    (lambda: ad.ones(3) @ ad.ones(4), ValueError, r"inner dimensions differ"),
    (lambda: ad.permute_dims(X, (0, 0)), ValueError, "not a permutation"),
    (lambda: ad.concat([X, ad.ones((3, 2))], axis=0), ValueError, "differ outside axis 0"),
    (lambda: X.astype("float128"), TypeError, "unknown dtype 'float128'; allowed"),
    (lambda: X[1.5], IndexError, "unsupported index 1.5"),
    (lambda: X[5], IndexError, "index 5 is out of bounds for axis 0 with size 2"),
    (lambda: ad.take(X, ad.asarray([2]), axis=0), IndexError, r"index 2 is out of range for axis 0 with size 2 \(allowed: -2..1\)"),
    (lambda: ad.full((2,), "a"), TypeError, "fill_value must be a Python number"),
    (lambda: ad.arange(0, 5, 0), ValueError, "step must not be zero"),
    (lambda: ad.linspace(0, 1, 5, dtype="int32"), TypeError, "dtype must be floating"),
    (lambda: ad.softmax(ad.ones(3, dtype="int32")), TypeError, "accepts real floating-point dtypes"),
    (lambda: ad.cross_entropy(X, ad.asarray([0, 1, 2])), ValueError, r"need labels of shape \(2,\)"),
    (lambda: ad.cross_entropy(X, ad.asarray([0, 3])), IndexError, r"label 3 is out of range for 3 classes"),
    (lambda: ad.cross_entropy(X, ad.asarray([0.0, 1.0])), TypeError, "labels must be an integer tensor"),
    (lambda: ad.layer_norm(X, ad.ones(2), ad.zeros(2)), ValueError, "must equal the trailing dimensions"),
    (lambda: ad.asarray([1]) / ad.asarray([2]), TypeError, "divide\\(\\) does not accept dtype int64"),
    (lambda: ad.squeeze(X, axis=0), ValueError, "only size-1 axes can be removed"),
    (lambda: ad.broadcast_to(X, (3, 3)), ValueError, "cannot be broadcast"),
    (lambda: ad.exp([1.0, 2.0]), TypeError, "convert it with anydevice.asarray"),
    (lambda: ad.where(X, X, X), TypeError, "condition must be bool"),
    (lambda: ad.clip(X, min="a"), TypeError, "min must be None or a Python number"),
    (lambda: ad.gelu(X, approximate="fast"), ValueError, "approximate must be 'none' or 'tanh'"),
    (lambda: ad.var(X, correction="a"), TypeError, "correction must be a finite number >= 0"),
    (lambda: ad.stack([]), ValueError, "needs at least one tensor"),
    (lambda: X.sum().backward(), RuntimeError, "does not require grad"),
]


@pytest.mark.parametrize("fn,exc,msg", CASES, ids=[str(i) for i in range(len(CASES))])
def test_clear_errors(fn, exc, msg):
    with pytest.raises(exc, match=msg):
        fn()


def test_creation_of_an_unsupported_dtype_is_refused():
    rt = HostRuntime(count=1, dtypes=(ad.float32, ad.int64, ad.bool))
    with installed(FakePlugin(types=("nof64",), runtime=rt)):
        for make in (lambda: ad.ones(2, dtype="float64", device="nof64"),
                     lambda: ad.arange(3, dtype="int32", device="nof64"),
                     lambda: ad.full((2,), 1, dtype="uint8", device="nof64")):
            with pytest.raises(TypeError, match="nof64:0 does not support dtype"):
                make()
        assert ad.ones(2, device="nof64").dtype is ad.float32
