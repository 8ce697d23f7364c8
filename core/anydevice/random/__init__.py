"""Random numbers that are the same on every device.

    import anydevice as ad
    ad.manual_seed(0)
    x = ad.rand(2, 3, device="npu:0")      # the same bits as on "cpu", "opencl", ...
    g = ad.Generator("cpu").manual_seed(7)
    i = ad.randint(0, 10, (4,), generator=g)

Numbers come from the counter-based Philox-4x32-10 stream of a seed (the ops in
:mod:`anydevice.ops.random`); a :class:`Generator` holds a seed and an offset into its stream
(:mod:`.generator`), and every function here reserves the blocks it reads (:mod:`.functions`).
See docs/RANDOM.md.
"""
from __future__ import annotations

from anydevice.random.functions import (
    bernoulli,
    dropout,
    multinomial,
    normal,
    rand,
    randint,
    randn,
    randperm,
    standard_normal,
    uniform,
)
from anydevice.random.generator import (  # noqa: F401 - anydevice.random.* only
    DEFAULT_SEED,
    Generator,
    default_generator,
    get_rng_state,
    initial_seed,
    manual_seed,
    seed,
    set_rng_state,
)

#: What ``anydevice`` itself exports (``DEFAULT_SEED`` and ``default_generator`` stay here).
__all__ = ["Generator", "manual_seed", "seed", "initial_seed", "get_rng_state", "set_rng_state", "rand", "uniform",
           "randn", "normal", "standard_normal", "randint", "randperm", "bernoulli", "dropout", "multinomial"]
