"""Hook specifications of the anydevice plugin contract (API version 1).

Every hook is called on one plugin at a time, so a plugin that raises never disturbs
another; the core records the failure on the plugin's record (``anydevice plugins`` and
``anydevice check`` show it), per device type when a plugin serves several. Hooks marked
*required* must be implemented; a plugin missing one is reported as failed. Every hook needs
the :data:`anydevice.plugins.hookimpl` marker: a function with a hook's name but without it is
never called, and the record says so. What a plugin prints while it is imported or set up is
kept in its record (``rec.output``), not written to the user's terminal.

**Versioning.** :data:`anydevice.backend.API_VERSION` is the plugin API *major* version: it
changes only for breaking changes (a hook removed, a parameter or return contract changed), and
a plugin written for a version this core does not support is skipped with the reason. Additions
(new optional hooks, new optional :class:`~anydevice.backend.Runtime` methods, new optional
fields with defaults) are the minor part and keep the major version: a plugin written for
today's API keeps loading, and the core detects optional capabilities by their presence.

**Names.** A distribution names each device type it provides by an entry point in group
``anydevice.backends`` (``npu = "vendor_npu.plugin"``) and each alias by one in group
``anydevice.aliases`` (``gpu = "cuda"``: name = alias, value = a type of the same
distribution). The core reads both from package metadata, without importing any plugin, so a
device string resolves, and a mistyped one fails with the list of installed types, even when
some unrelated plugin's import would hang. Who gets a name never depends on loading order or
on distribution names:

- a name claimed by two distributions (two types, a type and an alias, two aliases) is served
  by neither; both records show status ``conflict`` naming both, and using the name raises
  :class:`anydevice.DeviceUnavailableError` saying so. ``ANYDEVICE_PLUGIN_<NAME>=<distribution>``
  (e.g. ``ANYDEVICE_PLUGIN_NPU=anydevice-sim-npu``; names compared per PEP 503) gives it to one;
- an alias only counts when its distribution provides the target type;
- the core's own names (``cpu``) are never given to another distribution.

Aliases given only in :class:`~anydevice.backend.DeviceTypeSpec` still work, but the core
learns them only once the plugin is loaded (one of its types used, ``anydevice plugins``):
they take names nobody declared in metadata, two of them for one name make it a conflict, and
they never displace a name declared in metadata. Declare aliases in ``anydevice.aliases`` to
have them known without loading and protected from being taken.

**Device admission.** After the runtime is created, the core calls the runtime's optional
``probe(index)`` once per physical device; one that raises ``DeviceUnavailableError(reason,
hint=...)`` is left out of the visible set (see :mod:`anydevice.backend`).
"""
from __future__ import annotations

from anydevice.runtime.markers import hookspec


@hookspec(firstresult=True)
def anydevice_api_version() -> int:
    """Return the plugin API version this plugin was written against. **Required.**

    Called right after the plugin module is imported, before anything else. A plugin whose
    version is not in :data:`anydevice.backend.SUPPORTED_API_VERSIONS` is skipped with the
    reason recorded; it is never an error for ``import anydevice``.

    :return: an ``int`` (not a string, not a bool), normally :data:`anydevice.backend.API_VERSION`
        at the time of writing; anything else fails the plugin.
    """


@hookspec(firstresult=True)
def anydevice_device_types():
    """Describe the device types this plugin provides. **Required.**

    Called once after the API version check. Every entry point of the plugin must be listed
    (an entry point without its spec fails that type); names are words (letters, digits, ``_``).
    ``aliases`` here are learned only after loading: declare them in ``anydevice.aliases`` too.

    :return: a list of :class:`anydevice.backend.DeviceTypeSpec`; anything else fails the plugin.
    """


@hookspec(firstresult=True)
def anydevice_create_runtime(device_type: str):
    """Create the runtime of ``device_type``. **Required.**

    Called the first time the type is used (a tensor created on it, ``device_count``, the
    health check); the vendor SDK should be imported here, not at module import. Raise
    :class:`anydevice.DeviceUnavailableError` with a precise, actionable reason when the
    device cannot be used on this machine ("cupy is installed but no CUDA driver was found").

    An exception other than ``DeviceUnavailableError`` marks the type *failed* (the record names
    this hook and the exception). The runtime's ``device_count()`` must return an ``int`` from 0
    to 4096 (not a bool or string); anything else makes the type unavailable with the reason.

    :param device_type: one of the types returned by ``anydevice_device_types``.
    :return: an :class:`anydevice.backend.Runtime` instance.
    """


@hookspec(firstresult=True)
def anydevice_register_kernels(device_type: str, runtime, kernels) -> None:
    """Register native kernels. Optional: a plugin without kernels gets every op through
    decompositions and the CPU fallback.

    Called once, right after ``anydevice_create_runtime`` succeeded. An exception marks the type
    failed. ``kernels.register`` refuses a non-callable; a returning kernel must give a buffer of
    its device (checked on the first call of each op, device and dtype), else the op raises
    :class:`anydevice.errors.PluginError` naming the op, the kernel and the plugin.

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
