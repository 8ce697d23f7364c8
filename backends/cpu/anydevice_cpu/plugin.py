"""Plugin hooks of the cpu backend (entry point ``cpu`` in group ``anydevice.backends``)."""
from __future__ import annotations

import platform

from anydevice.runtime import API_VERSION, DeviceTypeSpec
from anydevice.runtime.markers import hookimpl


@hookimpl
def anydevice_api_version():
    return API_VERSION


@hookimpl
def anydevice_device_types():
    return [DeviceTypeSpec("cpu", description="host CPU through numpy", dlpack_code=1)]


@hookimpl
def anydevice_create_runtime(device_type):
    from .runtime import CpuRuntime

    return CpuRuntime()


@hookimpl
def anydevice_register_kernels(device_type, runtime, kernels):
    from .kernels import _WRAP, register
    from .kernels_train import register as register_train

    register(kernels)
    register_train(kernels, _WRAP)


@hookimpl
def anydevice_compile_graph(device_type, runtime, graph, kernels):
    from .graph import compile_graph

    return compile_graph(device_type, runtime, graph, kernels)


@hookimpl
def anydevice_environment(device_type):
    import numpy as np

    from .native import STATUS

    return {"numpy": np.__version__, "processor": platform.processor() or platform.machine(), "c_kernels": STATUS}
