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


@hookspec(firstresult=True)
def anydevice_compile_graph(device_type: str, runtime, graph, kernels):
    """Claim parts of a captured graph (``anydevice.jit.compile``) and return what runs them.
    Optional (an addition to API version 1): without it, or for the nodes it does not claim,
    the core replays each node's native kernel directly (the *planned executor*), and nodes
    without one through the dispatcher (decomposition, CPU fallback), as in eager mode.

    Called once per compiled graph variant whose values live on ``device_type``, before its first
    replay. ``graph`` is duck-typed (a backend never imports ``anydevice.jit``):

    - ``graph.nodes``: the nodes in topological order; a node has ``id`` (int), ``op`` (the
      registry's ``OpDef``: ``op.name``, ``op.category``), ``inputs`` (a tuple of values, a list
      of values for a variadic input, or plain Python scalars), ``attrs`` (a dict), ``outputs``
      (a tuple of values) and ``compute`` (the compute dtype the dispatcher chose: inputs arrive
      cast to it);
    - a value has ``id``, ``shape`` (a tuple), ``dtype`` (an :class:`anydevice.dtypes.DType`),
      ``producer`` (its node, or None for an input of the graph) and ``const`` (a captured
      tensor, or None);
    - ``graph.users(value)``: the nodes reading ``value``; ``graph.escapes(value)``: whether it
      is needed outside the node set being considered as well (a result of the graph, or written
      back to a parameter or optimizer state) -- true for every graph output;
    - ``graph.boundary(node_ids)``: ``(inputs, outputs)``, the values crossing the border of a
      set of node ids, in the order the core passes and expects them: ``inputs`` are the values
      the nodes read but do not produce, by first use (nodes in graph order, inputs in slot
      order), each once; ``outputs`` are the values the nodes produce that anything outside them
      reads (or that leave the graph), in the order they are produced.

    :param device_type: the type the graph runs on.
    :param runtime: the type's runtime.
    :param graph: the graph, as described above; it must not be modified.
    :param kernels: the type's :class:`anydevice.backend.KernelTable`.
    :return: ``None`` (claim nothing), or a list of ``(node_ids, executable)``: disjoint sets of
        node ids, each run by ``executable(ctx, buffers) -> buffers``, which receives the
        :class:`anydevice.backend.KernelContext` of the device (``ctx.empty`` allocates, ``ctx.stream``
        is the stream to queue on) and one buffer per value of ``graph.boundary(node_ids)[0]``, and
        returns a list with one new buffer per value of ``graph.boundary(node_ids)[1]`` (its shape
        and dtype). It must not modify its inputs. A claim that raises, overlaps another, names
        unknown nodes, or whose executable raises or returns the wrong buffers on its first run
        is reported as a :class:`anydevice.errors.PluginError` naming the plugin and this hook
        (a warning), and the core runs those nodes itself.
    """


@hookspec(firstresult=True)
def anydevice_collectives(device_type: str, runtime):
    """Give the communicator factory that runs collectives across processes on ``device_type``
    (the XCCL of this device). Optional (an addition to API version 1): without it, or for the
    collectives its communicator lacks, ``anydevice.distributed`` stages tensors through host
    memory over MPI, counted in ``anydevice.distributed.fallback_counts()`` and warned once.

    Called once per process group and device type, by every member at the same point, when a
    collective first meets a tensor of ``device_type`` (or at ``init_process_group(device_type=...)``).

    :param device_type: the type whose tensors are to be moved.
    :param runtime: the type's runtime.
    :return: ``None``, or ``factory(bootstrap) -> communicator``. ``bootstrap`` has ``rank`` and
        ``size`` (within the group), ``timeout`` (seconds), ``comm`` (an mpi4py communicator of the
        group's processes, private to this communicator: use it to exchange an id, as NCCL's
        unique id, or to move bytes), ``allocate(like, shape, dtype)`` (a new buffer on the
        device of buffer ``like``) and ``stream(like)`` (the runtime's handle of the current stream
        on that device, or on physical device ``like`` when it is an int; None for the default
        stream: order the collective after the work queued there). The communicator has ``name`` (a string, e.g. ``"nccl"``, what ``get_backend()``
        reports), optionally ``destroy()`` (when the group is destroyed) and ``abort()`` (after a
        collective timed out: stop work that may never finish), and any of these methods, each
        starting one collective on device buffers (never modifying its inputs) and returning a
        *request* with ``test() -> bool`` (polled by the core until true or the group's timeout)
        and ``result()`` (called once after ``test()`` was true: the new buffer, or None where
        the rank gets nothing) -- or returning ``None`` to decline this call (the core then
        stages it through MPI, counted):

        - ``all_reduce(x, op)``: ``op`` in ``"sum"``, ``"prod"``, ``"max"``, ``"min"`` (``bool``: max
          and min only); the result has ``x``'s shape;
        - ``broadcast(x, src)``: every rank passes a buffer of the same shape; result: ``src``'s;
        - ``reduce(x, dst, op)``: the result on group rank ``dst`` only;
        - ``all_gather(x)``: result ``(size, *x.shape)``, row ``i`` from rank ``i``;
        - ``gather(x, dst)``: the same on ``dst`` only;
        - ``scatter(x, src, like)``: ``x`` is ``(size, *like.shape)`` on ``src`` (None elsewhere);
          rank ``i`` gets row ``i``, on ``like``'s device (``like``: a buffer whose values are unused);
        - ``reduce_scatter(x, op)``: ``x`` is ``(size, *s)``; rank ``i`` gets the reduction of row ``i``;
        - ``all_to_all(x)``: ``x`` is ``(size, *s)``; row ``j`` of rank ``i``'s result is row ``i`` of rank ``j``'s ``x``;
        - ``send(x, dst, tag)`` (result None) and ``recv(like, src, tag)`` (a buffer of ``like``'s
          shape, dtype and device).

        Ranks are group ranks. AVG is done by the core (a sum, then a division on the device).
    """
