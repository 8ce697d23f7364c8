"""The fused optimizer updates on CuPy: the cpu backend's array kernels
(:func:`anydevice_cpu.kernels_optim.array_kernels`) with the step count kept on the device, so the
bias corrections are 0-d device arrays and a step never synchronizes with the host."""
from __future__ import annotations

from anydevice_cpu.kernels_optim import array_kernels


def register(kernels, launch, cp) -> None:
    """Register the update kernels over array module ``cp`` (CuPy; ``out=True``: the core allocates
    the results) through the cuda backend's ``launch(name, fn)`` wrapper (device, stream, out of
    memory)."""
    for name, fn in array_kernels(cp, host_step=False).items():
        kernels.register(name, launch(name, fn), out=True)
