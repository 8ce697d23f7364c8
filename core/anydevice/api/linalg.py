"""``anydevice.linalg``: the Array API linear-algebra extension.

Every function is a registry op (``anydevice.ops.linalg_ext``; matmul, matrix_transpose, tensordot
and vecdot are the main namespace's). eigh, qr, slogdet and svd return named tuples with the
standard's field names. cholesky, inv and solve raise :class:`~anydevice.errors.LinAlgError` (a
ValueError) naming the op when the matrix is not positive-definite or is singular.
"""
from __future__ import annotations

from collections import namedtuple

from anydevice.api import _extension
from anydevice.base.errors import LinAlgError

EighResult = namedtuple("EighResult", ["eigenvalues", "eigenvectors"])
QRResult = namedtuple("QRResult", ["Q", "R"])
SlogdetResult = namedtuple("SlogdetResult", ["sign", "logabsdet"])
SVDResult = namedtuple("SVDResult", ["U", "S", "Vh"])

_RESULTS = {"eigh": EighResult, "qr": QRResult, "slogdet": SlogdetResult, "svd": SVDResult}
_CHECKED = {
    "cholesky": "x is not positive-definite (Hermitian, with positive eigenvalues): the factorization failed",
    "inv": "x is singular (not invertible): the inverse has no finite value",
    "solve": "x1 is singular (not invertible): the system has no unique finite solution",
}

globals().update(_extension.functions("linalg", __name__, _RESULTS, _CHECKED, LinAlgError))
for _name in ("matmul", "matrix_transpose", "tensordot", "vecdot"):
    if _extension.main_function(_name) is not None:
        globals()[_name] = _extension.main_function(_name)

__all__ = sorted(n for n in globals() if not n.startswith("_") and n not in (
    "annotations", "namedtuple", "LinAlgError", "EighResult", "QRResult", "SlogdetResult", "SVDResult"))
