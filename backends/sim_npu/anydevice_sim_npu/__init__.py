"""anydevice-sim-npu: simulated accelerators for anydevice, and the worked example of a plugin.

Three device types, each a profile (``profiles.py``):

=====  ===========================  =======  ==========  ===========================================
type   modelled on                  devices  memory      dtypes / kernels
=====  ===========================  =======  ==========  ===========================================
npu    Ascend-like NPU              8        32 GiB      no float64, complex64, complex128
xpu    Kunlun-like XPU              4        16 GiB      no complex128, uint16/32/64; no native
                                                         ``erf``, ``round``, ``bitwise_left_shift``
                                                         (those fall back to the cpu)
dcu    Hygon-like DCU               4        16 GiB      every dtype
=====  ===========================  =======  ==========  ===========================================

Each profile also has peak FLOP/s, memory bandwidth and launch latency for the cost model
(``runtime.device_time``, used by stream clocks, ``Event.elapsed_time`` and
:func:`anydevice.profiler.profile`). Override them with ``ANYDEVICE_SIM_<TYPE>_PROFILE``
(JSON, e.g. ``'{"count": 2, "memory": "64MiB"}'``) or a TOML/JSON file named by
``ANYDEVICE_SIM_CONFIG``.

What is simulated: device memory that host code cannot touch (capacity enforced), one worker
thread per stream executing queued kernels in order, events, sticky asynchronous errors,
peer-to-peer copies, an all-reduce collective, and injected faults (:mod:`.faults`).
The arithmetic itself is numpy on the host.

Public helpers: :func:`reset` (clear a device's error state), :func:`inject` (arm a fault).
"""
from __future__ import annotations

from .faults import clear, inject, reset

__all__ = ["inject", "clear", "reset"]
