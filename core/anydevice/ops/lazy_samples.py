"""Conformance-input helpers for op modules that must not import :mod:`anydevice.ops.samples` at
import time (it is loaded only when samples are asked for, which keeps ``import anydevice`` fast)."""
from __future__ import annotations


def sample(*args, **kw):
    from anydevice.ops.samples import Sample

    return Sample(*args, **kw)


def values(rng, d, shape, domain=None):
    from anydevice.ops.samples import values as _values

    return _values(rng, d, shape, domain)


def smooth(rng, d, shape, domain=None):
    from anydevice.ops.samples import smooth as _smooth

    return _smooth(rng, d, shape, domain)
