"""The pluggy markers of the plugin contract: decorate hook implementations with :data:`hookimpl`."""
import pluggy

hookspec = pluggy.HookspecMarker("anydevice")
hookimpl = pluggy.HookimplMarker("anydevice")

__all__ = ["hookspec", "hookimpl"]
