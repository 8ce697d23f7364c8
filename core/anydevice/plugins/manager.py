"""Discovery and loading of backend plugins, each isolated from the others.

``import anydevice`` reads nothing; the entry-point metadata is read the first time a
device type is needed, and a plugin module is imported only when one of its device types
is used or listed. ``ANYDEVICE_BACKENDS=npu,opencl`` restricts loading to those types
(cpu is always loaded: it is the fallback target).
"""
from __future__ import annotations

import importlib
import os
import threading
import traceback
from dataclasses import dataclass, field

GROUP = "anydevice.backends"
ENV_ONLY = "ANYDEVICE_BACKENDS"

# Record statuses.
DISCOVERED, LOADED, SKIPPED, FAILED, DISABLED = "discovered", "loaded", "skipped", "failed", "disabled"


@dataclass
class PluginRecord:
    """What the core knows about one plugin; ``anydevice check`` reports these."""

    name: str                      # the module path, or the name given to register()
    module_path: str | None
    distribution: str | None = None
    version: str | None = None
    types: list = field(default_factory=list)       # device types this plugin serves
    status: str = DISCOVERED
    reason: str = ""
    api_version: int | None = None
    module: object = None
    specs: dict = field(default_factory=dict)       # type -> DeviceTypeSpec
    traceback: str = ""

    def as_dict(self) -> dict:
        return {
            "name": self.name, "module": self.module_path, "distribution": self.distribution,
            "version": self.version, "device_types": list(self.types), "status": self.status,
            "reason": self.reason, "api_version": self.api_version,
        }


class PluginManager:
    def __init__(self):
        self._lock = threading.RLock()
        self._pm = None
        self.records: list[PluginRecord] = []
        self.by_type: dict[str, PluginRecord] = {}
        self.aliases: dict[str, str] = {}
        self._discovered = False

    # --- discovery --------------------------------------------------------------------
    @property
    def pm(self):
        if self._pm is None:
            import pluggy

            from . import hookspecs

            self._pm = pluggy.PluginManager("anydevice")
            self._pm.add_hookspecs(hookspecs)
        return self._pm

    def discover(self) -> None:
        with self._lock:
            if self._discovered:
                return
            self._discovered = True
            from importlib.metadata import entry_points

            by_module: dict[tuple, PluginRecord] = {}
            eps = sorted(entry_points(group=GROUP), key=lambda e: (_dist_name(e) != "anydevice", _dist_name(e) or "", e.name))
            for ep in eps:
                key = (_dist_name(ep), ep.value)
                rec = by_module.get(key)
                if rec is None:
                    dist = getattr(ep, "dist", None)
                    rec = PluginRecord(ep.value, ep.value, _dist_name(ep), getattr(dist, "version", None))
                    by_module[key] = rec
                    self.records.append(rec)
                self._claim(rec, ep.name.strip().lower())
            self._apply_env_filter()

    def _claim(self, rec: PluginRecord, dtype_name: str) -> bool:
        owner = self.by_type.get(dtype_name)
        if owner is not None and owner is not rec:
            note = f"device type {dtype_name!r} is already provided by {owner.distribution or owner.name}"
            rec.reason = f"{rec.reason}; {note}" if rec.reason else note
            if not rec.types:
                rec.status = SKIPPED
            return False
        if dtype_name not in rec.types:
            rec.types.append(dtype_name)
        if rec.status == SKIPPED:
            rec.status = DISCOVERED
        self.by_type[dtype_name] = rec
        return True

    def _apply_env_filter(self) -> None:
        only = os.environ.get(ENV_ONLY, "").strip()
        if not only:
            return
        allowed = {t.strip().lower() for t in only.split(",") if t.strip()} | {"cpu"}
        for rec in self.records:
            if rec.types and not (set(rec.types) & allowed):
                rec.status = DISABLED
                rec.reason = f"not selected by {ENV_ONLY}={only}"

    def register(self, module, name: str | None = None, types=None, distribution=None, version=None) -> PluginRecord:
        """Register a plugin object in-process (tests, bring-up before packaging).

        ``types`` defaults to what the plugin's ``anydevice_device_types`` returns.
        """
        self.discover()
        with self._lock:
            name = name or getattr(module, "__name__", repr(module))
            rec = PluginRecord(name, None, distribution, version, module=module)
            self.records.append(rec)
            if types is None:
                if not self._load(rec, probe_types=True):
                    return rec
                types = [s.name for s in rec.specs.values()] or list(rec.specs)
            for t in types:
                self._claim(rec, t.lower())
            if not rec.types:
                rec.status = SKIPPED
                return rec
            if rec.status == DISCOVERED:
                self._load(rec)
            return rec

    def unregister(self, rec: PluginRecord) -> None:
        with self._lock:
            if rec in self.records:
                self.records.remove(rec)
            for t in list(self.by_type):
                if self.by_type[t] is rec:
                    del self.by_type[t]
            for a in [a for a, t in self.aliases.items() if t in rec.types]:
                del self.aliases[a]
            if rec.module is not None and self._pm is not None and self._pm.is_registered(rec.module):
                self._pm.unregister(rec.module)

    # --- loading ----------------------------------------------------------------------
    def load_type(self, device_type: str) -> PluginRecord | None:
        self.discover()
        rec = self.by_type.get(device_type)
        if rec is not None and rec.status == DISCOVERED:
            with self._lock:
                if rec.status == DISCOVERED:
                    self._load(rec)
        return rec

    def load_all(self) -> None:
        self.discover()
        for rec in list(self.records):
            if rec.status == DISCOVERED:
                with self._lock:
                    self._load(rec)

    def call(self, rec: PluginRecord, hook: str, **kwargs):
        """Call ``hook`` on the one plugin ``rec``; None when it does not implement it."""
        impl = getattr(self.pm.hook, hook)
        for hi in impl.get_hookimpls():
            if hi.plugin is rec.module:
                return hi.function(**kwargs)
        return None

    def implements(self, rec: PluginRecord, hook: str) -> bool:
        return any(hi.plugin is rec.module for hi in getattr(self.pm.hook, hook).get_hookimpls())

    def _load(self, rec: PluginRecord, probe_types: bool = False) -> bool:
        from ..backend import SUPPORTED_API_VERSIONS, DeviceTypeSpec

        try:
            if rec.module is None:
                rec.module = importlib.import_module(rec.module_path)
        except BaseException as e:  # noqa: BLE001 - a plugin must never break the core
            return self._fail(rec, f"import of {rec.module_path} failed: {type(e).__name__}: {e}", e)
        try:
            if not self.pm.is_registered(rec.module):
                self.pm.register(rec.module, name=f"{rec.name}@{id(rec.module)}")
            for hook in ("anydevice_api_version", "anydevice_device_types", "anydevice_create_runtime"):
                if not self.implements(rec, hook):
                    return self._fail(rec, f"plugin {rec.name} does not implement the required hook {hook}()")
            ver = self.call(rec, "anydevice_api_version")
            rec.api_version = ver
            if ver not in SUPPORTED_API_VERSIONS:
                rec.status = SKIPPED
                rec.reason = (
                    f"plugin targets anydevice plugin API version {ver!r}; this anydevice supports "
                    f"{', '.join(map(str, SUPPORTED_API_VERSIONS))}: install a plugin release built for it"
                )
                return False
            specs = self.call(rec, "anydevice_device_types") or []
            for s in specs:
                if not isinstance(s, DeviceTypeSpec):
                    return self._fail(rec, f"anydevice_device_types() of {rec.name} returned {s!r}, expected DeviceTypeSpec")
            rec.specs = {s.name.lower(): s for s in specs}
            if not probe_types:
                missing = [t for t in rec.types if t not in rec.specs]
                if missing:
                    return self._fail(
                        rec, f"plugin {rec.name} declares entry point(s) {missing} but anydevice_device_types() "
                        f"returns {sorted(rec.specs)}",
                    )
                self._adopt_aliases(rec)
                rec.status = LOADED
        except BaseException as e:  # noqa: BLE001
            return self._fail(rec, f"plugin {rec.name} raised in setup: {type(e).__name__}: {e}", e)
        return True

    def _adopt_aliases(self, rec: PluginRecord) -> None:
        for t in rec.types:
            for a in rec.specs[t].aliases:
                a = a.lower()
                if a not in self.by_type and a not in self.aliases:
                    self.aliases[a] = t

    def _fail(self, rec: PluginRecord, reason: str, exc: BaseException | None = None) -> bool:
        rec.status = FAILED
        rec.reason = reason
        if exc is not None:
            rec.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        if isinstance(exc, KeyboardInterrupt):
            raise exc
        return False


def _dist_name(ep):
    dist = getattr(ep, "dist", None)
    return getattr(dist, "name", None) if dist is not None else None


#: The process-wide plugin manager.
manager = PluginManager()
