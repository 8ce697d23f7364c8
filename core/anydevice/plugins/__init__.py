"""Plugin contract: pluggy hook specifications and entry-point discovery.

A backend is a module named by an entry point in group ``anydevice.backends``; the
entry point's *name* is the device type it provides (one entry point per type, several
may name the same module). Aliases are entry points in group ``anydevice.aliases``
(``gpu = "cuda"``). A name two distributions claim is served by neither until
``ANYDEVICE_PLUGIN_<NAME>=<distribution>`` picks one (see :mod:`.hookspecs`). Mark hook
implementations with :data:`hookimpl`.
"""
import pluggy

hookspec = pluggy.HookspecMarker("anydevice")
hookimpl = pluggy.HookimplMarker("anydevice")

__all__ = ["hookspec", "hookimpl"]
