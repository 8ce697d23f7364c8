"""Plugin hooks of the simulated accelerators (entry points ``npu``, ``xpu``, ``dcu``)."""
from __future__ import annotations

from anydevice.runtime import API_VERSION, DeviceTypeSpec
from anydevice.runtime.markers import hookimpl

from .profiles import PROFILES

TYPES = ("npu", "xpu", "dcu")


@hookimpl
def anydevice_api_version():
    return API_VERSION


@hookimpl
def anydevice_device_types():
    return [DeviceTypeSpec(t, description=PROFILES[t].name + " (simulated on the host)") for t in TYPES]


@hookimpl
def anydevice_create_runtime(device_type):
    from . import faults
    from .profiles import load_profile
    from .runtime import SimRuntime

    rt = SimRuntime(device_type, load_profile(device_type))
    faults.apply_env(device_type, rt)
    return rt


@hookimpl
def anydevice_register_kernels(device_type, runtime, kernels):
    from .kernels import register

    register(kernels, runtime.views, missing=runtime.profile.missing_ops)


@hookimpl
def anydevice_compile_graph(device_type, runtime, graph, kernels):
    from .graph import compile_graph

    return compile_graph(device_type, runtime, graph, kernels)


@hookimpl
def anydevice_environment(device_type):
    from .profiles import env_var, load_profile

    try:
        p = load_profile(device_type)
    except ValueError as e:
        return {"profile_error": str(e)}
    return {"simulated": True, "model": p.name, "devices": p.count, "memory_per_device": p.memory,
            "peak_flops": p.peak_flops, "bandwidth": p.bandwidth, "missing_ops": list(p.missing_ops),
            "profile_env": env_var(device_type)}


@hookimpl
def anydevice_all_reduce(device_type, runtime, buffers, op):
    from anydevice.runtime.devices import get_backend

    be = get_backend(device_type)

    def allocate(i, shape, dtype):
        return be.empty(be.physical.index(buffers[i].index), shape, dtype)

    return runtime.all_reduce(buffers, op, allocate)


@hookimpl
def anydevice_collectives(device_type, runtime):
    from .collectives import factory

    return factory(runtime)
