"""Plugin hooks of the OpenCL backend (entry point ``opencl`` in group ``anydevice.backends``).

pyopencl is imported only when the runtime is created, so ``import anydevice`` stays fast.
Environment: ``ANYDEVICE_OPENCL_PLATFORM`` (platform name substring),
``ANYDEVICE_OPENCL_DEVICE_TYPE`` (cpu/gpu/accelerator/all), ``ANYDEVICE_OPENCL_VISIBLE_DEVICES``
(indices, handled by the core), ``ANYDEVICE_OPENCL_CACHE_DIR`` (compiled programs; ``off``).
"""
from __future__ import annotations

from anydevice.base.errors import DeviceUnavailableError
from anydevice.runtime import API_VERSION, DeviceTypeSpec
from anydevice.runtime.markers import hookimpl


@hookimpl
def anydevice_api_version():
    return API_VERSION


@hookimpl
def anydevice_device_types():
    return [DeviceTypeSpec("opencl", aliases=("cl",), description="OpenCL devices through pyopencl (PoCL on CPUs)")]


@hookimpl
def anydevice_create_runtime(device_type):
    try:
        import pyopencl  # noqa: F401
    except ImportError as e:
        raise DeviceUnavailableError(f"pyopencl is not installed ({e})", hint="pip install anydevice-opencl") from e
    from .runtime import OpenClRuntime

    return OpenClRuntime()


@hookimpl
def anydevice_register_kernels(device_type, runtime, kernels):
    from .kernels import register
    from .kernels_optim import register as register_optim
    from .kernels_sorting import register as register_sorting

    register(kernels, runtime)
    register_sorting(kernels, runtime)
    register_optim(kernels, runtime)


@hookimpl
def anydevice_compile_graph(device_type, runtime, graph, kernels):
    from .graph import compile_graph

    return compile_graph(device_type, runtime, graph, kernels)


@hookimpl
def anydevice_environment(device_type):
    try:
        import pyopencl as cl
    except ImportError as e:
        return {"pyopencl": f"not installed ({e})"}
    from .runtime import native_status

    env = {"pyopencl": cl.VERSION_TEXT, "launch": native_status()}
    try:
        platforms = cl.get_platforms()
    except cl.Error as e:
        return {**env, "platforms": f"none ({e})"}
    env["platforms"] = [f"{p.name} {p.version}" for p in platforms]
    devices = []
    for p in platforms:
        try:
            devices += [f"{d.name.strip()} ({cl.device_type.to_string(d.type)}, {d.version})" for d in p.get_devices()]
        except cl.Error:
            continue
    env["devices"] = devices
    return env
