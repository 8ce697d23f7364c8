"""Hook specifications of the anydevice plugin contract (API version 1).

Every hook is called on one plugin at a time, so a plugin that raises never disturbs
another; the core records the failure for ``anydevice check``. Hooks marked *required*
must be implemented; a plugin missing one is reported as failed.
"""
from __future__ import annotations

from . import hookspec


@hookspec(firstresult=True)
def anydevice_api_version() -> int:
    """Return the plugin API version this plugin was written against. **Required.**

    Called right after the plugin module is imported, before anything else. A plugin whose
    version is not in :data:`anydevice.backend.SUPPORTED_API_VERSIONS` is skipped with the
    reason recorded; it is never an error for ``import anydevice``.

    :return: an ``int``, normally :data:`anydevice.backend.API_VERSION` at the time of writing.
    """


@hookspec(firstresult=True)
def anydevice_device_types():
    """Describe the device types this plugin provides. **Required.**

    Called once after the API version check. Every type listed must also be the name of one
    of the plugin's entry points (that is what lets the core list types without importing
    plugins); aliases are resolved after loading.

    :return: a list of :class:`anydevice.backend.DeviceTypeSpec`.
    """


@hookspec(firstresult=True)
def anydevice_create_runtime(device_type: str):
    """Create the runtime of ``device_type``. **Required.**

    Called the first time the type is used (a tensor created on it, ``device_count``, the
    health check); the vendor SDK should be imported here, not at module import. Raise
    :class:`anydevice.DeviceUnavailableError` with a precise, actionable reason when the
    device cannot be used on this machine ("cupy is installed but no CUDA driver was found").

    :param device_type: one of the types returned by ``anydevice_device_types``.
    :return: an :class:`anydevice.backend.Runtime` instance.
    """


@hookspec(firstresult=True)
def anydevice_register_kernels(device_type: str, runtime, kernels) -> None:
    """Register native kernels. Optional: a plugin without kernels gets every op through
    decompositions and the CPU fallback.

    Called once, right after ``anydevice_create_runtime`` succeeded.

    :param device_type: the type being set up.
    :param runtime: the runtime just created.
    :param kernels: an :class:`anydevice.backend.KernelTable`; call ``kernels.register(op, fn, ...)``.
    """


@hookspec(firstresult=True)
def anydevice_environment(device_type: str) -> dict:
    """Facts about the vendor stack for ``anydevice check`` (SDK, driver and runtime versions,
    platforms, profile). Optional.

    Called by the health check even when ``anydevice_create_runtime`` failed, so it must not
    need a working device.

    :return: a flat ``dict`` of str → JSON-serializable value.
    """


@hookspec(firstresult=True)
def anydevice_all_reduce(device_type: str, runtime, buffers: list, op: str):
    """Reduce one buffer per device of ``device_type`` element-wise and give every device the
    result (a collective ``all_reduce``). Optional: without it the core stages the buffers
    through host memory.

    :param buffers: the input buffers, ``buffers[i]`` on device index ``i`` of the group, all of
        one shape and dtype; they must not be modified.
    :param op: ``"sum"``, ``"max"``, ``"min"`` or ``"prod"``.
    :return: a list of new buffers, one per input and on the same device, or ``None`` to
        let the core do it.
    """
