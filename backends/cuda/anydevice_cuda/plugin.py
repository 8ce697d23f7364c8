"""Plugin hooks of the cuda backend (entry point ``cuda`` in group ``anydevice.backends``).

CuPy is imported only inside the hooks that need it, never when this module is imported,
so ``anydevice check`` can list the type (and the reason it is unavailable) on any machine.
"""
from __future__ import annotations

from anydevice.base.errors import DeviceUnavailableError
from anydevice.runtime import API_VERSION, DeviceTypeSpec
from anydevice.runtime.markers import hookimpl

#: DLPack device type code of CUDA memory (kDLCUDA).
DLPACK_CUDA = 2


@hookimpl
def anydevice_api_version():
    return API_VERSION


@hookimpl
def anydevice_device_types():
    return [DeviceTypeSpec("cuda", aliases=("gpu",), description="NVIDIA GPUs through CuPy (cuBLAS, NCCL)",
                           dlpack_code=DLPACK_CUDA)]


@hookimpl
def anydevice_create_runtime(device_type):
    from .diagnose import probe

    cupy, reason = probe()
    if cupy is None:
        raise DeviceUnavailableError(reason)
    from .runtime import CudaRuntime

    return CudaRuntime(cupy)


@hookimpl
def anydevice_register_kernels(device_type, runtime, kernels):
    from .kernels import register

    register(kernels)


@hookimpl
def anydevice_environment(device_type):
    return environment()


@hookimpl
def anydevice_compile_graph(device_type, runtime, graph, kernels):
    from .graph import compile_graph

    return compile_graph(device_type, runtime, graph, kernels)


@hookimpl
def anydevice_all_reduce(device_type, runtime, buffers, op):
    from .collectives import all_reduce

    return all_reduce(runtime.cp, buffers, op)


@hookimpl
def anydevice_collectives(device_type, runtime):
    from .collectives import factory

    return factory(runtime)


def environment() -> dict:
    """CuPy, CUDA runtime/driver and NCCL versions, the device count, or the reason CUDA is unusable."""
    from .diagnose import probe, version_text

    env: dict = {}
    cupy, reason = probe()
    try:
        import cupy as cp
    except Exception:  # noqa: BLE001
        cp = None
    if cp is not None:
        env["cupy"] = cp.__version__
        rt = cp.cuda.runtime
        for key, fn in (("cuda_runtime", rt.runtimeGetVersion), ("cuda_driver", rt.driverGetVersion)):
            try:
                v = int(fn())
            except Exception:  # noqa: BLE001 - leave the key out
                continue
            env[key] = version_text(v) if v else "none (no NVIDIA driver found)"
        from .collectives import nccl_version

        env["nccl"] = nccl_version() or "not installed (pip install anydevice-cuda[nccl] for multi-GPU all_reduce)"
    if cupy is not None:
        env["device_count"] = cupy.cuda.runtime.getDeviceCount()
    else:
        env["unavailable"] = reason
    return env
