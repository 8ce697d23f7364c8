"""Discovery and loading of backend plugins, each isolated from the others.

``import anydevice`` reads nothing; the entry-point metadata is read the first time a
device type is needed, and a plugin module is imported only when one of its device types
is used (``anydevice plugins`` and ``anydevice check`` load them all).

Who gets a name is settled from package metadata alone, before any plugin is imported, so it
never depends on loading order or on how distributions are named:

- every entry point in group ``anydevice.backends`` claims a device type, every entry point in
  ``anydevice.aliases`` an alias (name = alias, value = its type) for the distribution that
  provides that type;
- a name claimed by two distributions goes to neither until ``ANYDEVICE_PLUGIN_<NAME>`` names
  one of them (distribution names compared per PEP 503); the records of both show the conflict;
- names of the core's own distribution (``cpu``) are never given to another.

``ANYDEVICE_BACKENDS=npu,opencl`` restricts loading to those types (cpu is always loaded: it is
the fallback target).
"""
from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
import threading
import traceback
from dataclasses import dataclass, field
from typing import NamedTuple

GROUP = "anydevice.backends"
ALIAS_GROUP = "anydevice.aliases"
ENV_ONLY = "ANYDEVICE_BACKENDS"
#: The distribution of the core; its names (``cpu``) cannot be claimed by any other.
BUILTIN = "anydevice"
REQUIRED_HOOKS = ("anydevice_api_version", "anydevice_device_types", "anydevice_create_runtime")
OPTIONAL_HOOKS = ("anydevice_register_kernels", "anydevice_environment", "anydevice_all_reduce", "anydevice_compile_graph",
                  "anydevice_collectives")

# Statuses of a record and of each type it claims. A type also goes through READY (its backend
# was created) or UNAVAILABLE (it cannot be used here); REFUSED marks a claim that may not be made.
DISCOVERED, LOADED, SKIPPED, FAILED, DISABLED = "discovered", "loaded", "skipped", "failed", "disabled"
CONFLICT, REFUSED, READY, UNAVAILABLE, OK = "conflict", "refused", "ready", "unavailable", "ok"
PROBLEMS = (FAILED, SKIPPED, DISABLED, CONFLICT, REFUSED, UNAVAILABLE)

_TYPE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def plugin_env_var(name: str) -> str:
    """The variable that picks the distribution serving a contested name, e.g. ``ANYDEVICE_PLUGIN_NPU``."""
    return "ANYDEVICE_PLUGIN_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def normalize(dist: str | None) -> str:
    """A distribution name normalized as PEP 503 says (``Anydevice_Sim.NPU`` -> ``anydevice-sim-npu``)."""
    return re.sub(r"[-_.]+", "-", dist or "").lower()


@dataclass
class PluginRecord:
    """What the core knows about one plugin; ``anydevice plugins`` and ``anydevice check`` report these."""

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
    claims: list = field(default_factory=list)      # every device type its entry points name
    type_status: dict = field(default_factory=dict)  # claimed type -> (status, reason)
    hints: dict = field(default_factory=dict)       # claimed type or alias -> what to do about it
    alias_status: dict = field(default_factory=dict)  # alias -> (target type, status, reason)
    notes: list = field(default_factory=list)       # contract remarks that do not stop the plugin
    output: str = ""                                # what it printed while importing and setting up
    loaded: bool = False                            # imported and its hooks answered well

    def can_set_up(self, device_type: str) -> bool:
        """Whether creating a runtime of ``device_type`` may be tried (again, after ``forget``)."""
        status = self.type_status.get(device_type, (self.status,))[0]
        return self.loaded and device_type in self.specs and device_type in self.types and status in (
            LOADED, READY, UNAVAILABLE, FAILED)

    @property
    def label(self) -> str:
        return self.distribution or self.name

    def as_dict(self) -> dict:
        return {
            "name": self.name, "module": self.module_path, "distribution": self.distribution,
            "version": self.version, "device_types": list(self.claims or self.types), "status": self.status,
            "reason": self.reason, "api_version": self.api_version,
            "type_status": {t: {"status": s, "reason": r, "hint": self.hints.get(t, "")}
                            for t, (s, r) in self.type_status.items()},
            "aliases": {a: {"type": t, "status": s, "reason": r} for a, (t, s, r) in self.alias_status.items()},
            "output": self.output,
        }


class Claim(NamedTuple):
    rec: PluginRecord
    target: str | None              # None: a device type; else the type this alias names

    def describe(self, mixed: bool) -> str:
        if not mixed:
            return self.rec.label
        return f"{self.rec.label} (device type)" if self.target is None else f"{self.rec.label} (alias of {self.target!r})"


@dataclass
class Contest:
    """A name that several distributions claim: no one serves it until ``ANYDEVICE_PLUGIN_<NAME>`` picks."""

    name: str
    claims: list
    reason: str
    hint: str
    status: str = CONFLICT
    version: str | None = None
    module: object = None
    module_path: str | None = None
    api_version: int | None = None
    specs: dict = field(default_factory=dict)
    types: list = field(default_factory=list)    # it serves none
    output: str = ""

    @property
    def distribution(self) -> str:
        return " or ".join(sorted({c.rec.label for c in self.claims}))

    label = distribution

    @property
    def type_status(self) -> dict:
        return {self.name: (CONFLICT, self.reason)}

    @property
    def hints(self) -> dict:
        return {self.name: self.hint}

    def can_set_up(self, device_type: str) -> bool:
        return False


class PluginManager:
    def __init__(self):
        self._lock = threading.RLock()
        self._pm = None
        self.records: list[PluginRecord] = []
        self.by_type: dict = {}                     # type -> PluginRecord, or Contest for a contested one
        self.aliases: dict[str, str] = {}           # alias -> type
        self.alias_owner: dict[str, PluginRecord] = {}
        self.contested: dict[str, Contest] = {}     # every contested name, types and aliases
        self._spec_aliases: set = set()             # aliases known only from a loaded DeviceTypeSpec
        self._discovered = False

    # --- discovery --------------------------------------------------------------------
    @property
    def pm(self):
        if self._pm is None:
            import pluggy

            from anydevice.runtime import hookspecs

            self._pm = pluggy.PluginManager("anydevice")
            self._pm.add_hookspecs(hookspecs)
        return self._pm

    def discover(self) -> None:
        with self._lock:
            if self._discovered:
                return
            self._discovered = True
            from importlib.metadata import entry_points

            recs: dict[tuple, PluginRecord] = {}
            claims: dict[str, list] = {}
            for ep in entry_points(group=GROUP):
                key = (normalize(_dist_name(ep)), ep.value)
                rec = recs.get(key)
                if rec is None:
                    rec = recs[key] = PluginRecord(ep.value, ep.value, _dist_name(ep), _dist_version(ep))
                name = ep.name.strip().lower()
                if name not in rec.claims:
                    rec.claims.append(name)
                    claims.setdefault(name, []).append(Claim(rec, None))
            for ep in entry_points(group=ALIAS_GROUP):
                self._alias_claim(recs, claims, ep)
            self.records += sorted(recs.values(), key=lambda r: (normalize(r.distribution) != BUILTIN,
                                                                 normalize(r.distribution), r.name))
            for name in sorted(claims):
                self._settle(name, claims[name])
            self._check_alias_targets()
            self._apply_env_filter()
            for rec in recs.values():
                self._summarize(rec)

    def _alias_claim(self, recs: dict, claims: dict, ep) -> None:
        dist, alias, target = _dist_name(ep), ep.name.strip().lower(), ep.value.strip().lower()
        owner = next((r for r in recs.values() if normalize(r.distribution) == normalize(dist) and target in r.claims),
                     None)
        if owner is not None:
            claims.setdefault(alias, []).append(Claim(owner, target))
            owner.alias_status[alias] = (target, DISCOVERED, "")
            return
        rec = next((r for r in recs.values() if normalize(r.distribution) == normalize(dist)), None)
        if rec is None:   # a distribution with aliases but no device type at all
            rec = recs[(normalize(dist), "")] = PluginRecord(dist or "?", None, dist, _dist_version(ep), status=SKIPPED)
        rec.alias_status[alias] = (target, REFUSED, (
            f"{rec.label} declares alias {alias!r} for device type {target!r}, which it does not provide: an alias "
            f"can only come from the plugin that provides its type"))

    def _choice(self, name: str) -> str:
        return normalize(os.environ.get(plugin_env_var(name), "").strip())

    def _settle(self, name: str, claims: list) -> None:
        """Give ``name`` to its one claimant, to the built-in one, to the one ANYDEVICE_PLUGIN_<NAME> picks, or to none."""
        if len({normalize(c.rec.label) for c in claims}) == 1:   # one distribution: a type beats its own alias
            claims = sorted(claims, key=lambda c: c.target is not None)
            for c in claims[1:]:
                self._deny(c, name, REFUSED, f"{c.rec.label} declares {name!r} both as a device type and as an alias")
            if len(claims) == 1 or claims[0].target is None:
                return self._grant(name, claims[0])
        builtin = [c for c in claims if normalize(c.rec.distribution) == BUILTIN]
        if builtin:
            self._grant(name, builtin[0])
            for c in claims:
                if c is not builtin[0]:
                    self._deny(c, name, REFUSED, f"{name!r} is built into anydevice; {c.rec.label} may not provide it",
                               f"uninstall {c.rec.label} or ask its vendor to rename its entry point {name!r}")
            return
        var, choice = plugin_env_var(name), self._choice(name)
        picked = [c for c in claims if choice and normalize(c.rec.label) == choice]
        if picked:
            self._grant(name, picked[0])
            for c in claims:
                if c is not picked[0]:
                    self._deny(c, name, SKIPPED, f"{name!r} is served by {picked[0].rec.label}, chosen by "
                                                 f"{var}={os.environ[var].strip()}")
            return
        self._contest(name, claims)

    def _contest(self, name: str, claims: list) -> None:
        var = plugin_env_var(name)
        mixed = len({c.target is None for c in claims}) > 1
        what = "device type" if all(c.target is None for c in claims) else "alias" if not mixed else "name"
        who = sorted(c.describe(mixed) for c in claims)
        reason = f"{what} {name!r} is claimed by {_join(who)}: set {var} to one of them"
        if self._choice(name):
            reason += f" ({var}={os.environ[var].strip()!r} names none of them)"
        labels = sorted({c.rec.label for c in claims})
        hint = (" or ".join(f"{var}={d}" for d in labels)
                + " chooses the distribution that serves it; or uninstall the one you do not want")
        contest = Contest(name, list(claims), reason, hint)
        self.contested[name] = contest
        if any(c.target is None for c in claims):
            self.by_type[name] = contest
        self.aliases.pop(name, None)
        self.alias_owner.pop(name, None)
        for c in claims:
            self._deny(c, name, CONFLICT, reason, hint)

    def _grant(self, name: str, c: Claim) -> None:
        if c.target is None:
            self.by_type[name] = c.rec
            if name not in c.rec.types:
                c.rec.types.append(name)
            c.rec.type_status[name] = (c.rec.status if c.rec.status in (DISCOVERED, LOADED) else DISCOVERED, "")
        else:
            self.aliases[name], self.alias_owner[name] = c.target, c.rec
            c.rec.alias_status[name] = (c.target, OK, "")

    def _deny(self, c: Claim, name: str, status: str, reason: str, hint: str = "") -> None:
        if c.target is None:
            c.rec.type_status[name] = (status, reason)
        else:
            c.rec.alias_status[name] = (c.target, status, reason)
        if hint:
            c.rec.hints[name] = hint

    def _check_alias_targets(self) -> None:
        """An alias is kept only when its distribution serves the target (or is in the contest for it)."""
        for alias, target in list(self.aliases.items()):
            rec, owner = self.alias_owner[alias], self.by_type.get(target)
            if owner is rec or (isinstance(owner, Contest) and any(c.rec is rec for c in owner.claims)):
                continue
            del self.aliases[alias], self.alias_owner[alias]
            who = f"served by {owner.label}" if owner is not None else "served by no plugin"
            rec.alias_status[alias] = (target, REFUSED, f"alias {alias!r} of {rec.label} names device type "
                                                        f"{target!r}, which is {who}")

    def _apply_env_filter(self) -> None:
        only = os.environ.get(ENV_ONLY, "").strip()
        if not only:
            return
        allowed = {t.strip().lower() for t in only.split(",") if t.strip()} | {"cpu"}
        for rec in self.records:
            if rec.types and not (set(rec.types) & allowed):
                rec.status = DISABLED
                for t in rec.types:
                    rec.type_status[t] = (DISABLED, f"not selected by {ENV_ONLY}={only}")

    def _claim(self, rec: PluginRecord, dtype_name: str) -> bool:
        """Claim a type for an in-process plugin (``register``): refused when another already has it."""
        if dtype_name not in rec.claims:
            rec.claims.append(dtype_name)
        owner = self.by_type.get(dtype_name) or self.contested.get(dtype_name) or self.alias_owner.get(dtype_name)
        if owner is not None and owner is not rec:
            if normalize(getattr(owner, "distribution", None)) == BUILTIN:
                rec.type_status[dtype_name] = (REFUSED, f"{dtype_name!r} is built into anydevice; {rec.label} "
                                                        f"may not provide it")
            else:
                rec.type_status[dtype_name] = (SKIPPED, f"device type {dtype_name!r} is already provided by "
                                                        f"{owner.label}")
            self._summarize(rec)
            return False
        self._grant(dtype_name, Claim(rec, None))
        self._summarize(rec)
        return True

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
                types = list(rec.specs)
            for t in types:
                self._claim(rec, t.lower())
            if rec.types and rec.status == DISCOVERED:
                self._load(rec)
            return rec

    def unregister(self, rec: PluginRecord) -> None:
        with self._lock:
            if rec in self.records:
                self.records.remove(rec)
            for name, c in list(self.contested.items()):
                if any(cl.rec is rec for cl in c.claims):
                    del self.contested[name]
            for t in [t for t, r in self.by_type.items() if r is rec or (isinstance(r, Contest)
                                                                         and t not in self.contested)]:
                del self.by_type[t]
            for a in [a for a, r in self.alias_owner.items() if r is rec]:
                del self.aliases[a], self.alias_owner[a]
            if rec.module is not None and self._pm is not None and self._pm.is_registered(rec.module):
                self._pm.unregister(rec.module)

    # --- loading ----------------------------------------------------------------------
    def load_type(self, device_type: str):
        """The record serving ``device_type`` (its plugin imported and set up), a :class:`Contest`, or None."""
        self.discover()
        rec = self.by_type.get(device_type) or self.contested.get(device_type)
        if isinstance(rec, PluginRecord) and rec.status == DISCOVERED:
            with self._lock:
                if rec.status == DISCOVERED:
                    self._load(rec)
        return rec

    def load_all(self) -> None:
        self.discover()
        for rec in list(self.records):
            if rec.status == DISCOVERED and rec.types:
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

    @contextlib.contextmanager
    def capture(self, rec: PluginRecord):
        """Keep what the plugin prints (to stdout or stderr) in ``rec.output`` instead of the user's
        terminal, so ``anydevice plugins --json`` stays valid JSON. Process-wide: only around
        plugin import and setup hooks."""
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                yield
        finally:
            rec.output += buf.getvalue()

    def mark(self, rec, device_type: str, status: str, reason: str = "", hint: str = "") -> None:
        """Record what became of one type of ``rec`` (set up, unavailable, failed)."""
        if not isinstance(rec, PluginRecord):
            return
        with self._lock:
            rec.type_status[device_type] = (status, reason)
            if hint:
                rec.hints[device_type] = hint
            else:
                rec.hints.pop(device_type, None)
            self._summarize(rec)

    def _load(self, rec: PluginRecord, probe_types: bool = False) -> bool:
        with self.capture(rec):
            try:
                if rec.module is None:
                    rec.module = importlib.import_module(rec.module_path)
            except BaseException as e:  # noqa: BLE001 - a plugin must never break the core
                return self._fail(rec, f"import of {rec.module_path} failed: {type(e).__name__}: {e}", e)
            try:
                return self._set_up(rec, probe_types)
            except BaseException as e:  # noqa: BLE001
                return self._fail(rec, f"plugin {rec.label} raised in setup: {type(e).__name__}: {e}", e)

    def _set_up(self, rec: PluginRecord, probe_types: bool) -> bool:
        import pluggy

        from anydevice.runtime.contract import API_VERSION, SUPPORTED_API_VERSIONS

        if not self.pm.is_registered(rec.module):
            try:
                self.pm.register(rec.module, name=f"{rec.name}@{id(rec.module)}")
            except pluggy.PluginValidationError as e:
                return self._fail(rec, f"plugin {rec.label} does not match the hook specifications: {e}")
        for hook in REQUIRED_HOOKS:
            if not self.implements(rec, hook):
                return self._fail(rec, _missing_hook(rec, hook))
        rec.notes += [_unmarked(rec, h) + ", so it is never called" for h in OPTIONAL_HOOKS
                      if not self.implements(rec, h) and callable(getattr(rec.module, h, None))]
        ok, ver = self._ask(rec, "anydevice_api_version")
        if not ok:
            return False
        if type(ver) is not int:
            return self._fail(rec, f"anydevice_api_version() of plugin {rec.label} returned {ver!r} "
                                   f"({type(ver).__name__}); expected an int such as {API_VERSION}")
        rec.api_version = ver
        if ver not in SUPPORTED_API_VERSIONS:
            return self._give_up(rec, SKIPPED, (
                f"plugin targets anydevice plugin API version {ver!r}; this anydevice supports "
                f"{', '.join(map(str, SUPPORTED_API_VERSIONS))}: install a plugin release built for it"))
        ok, specs = self._ask(rec, "anydevice_device_types")
        if not ok:
            return False
        problem = _bad_specs(specs)
        if problem:
            return self._fail(rec, f"anydevice_device_types() of plugin {rec.label} {problem}")
        rec.specs = {s.name.lower(): s for s in specs}
        if probe_types:
            return True
        for t in rec.types:
            if t in rec.specs:
                rec.type_status[t] = (LOADED, "")
            else:
                rec.type_status[t] = (FAILED, f"plugin {rec.label} has entry point {t!r} but anydevice_device_types() "
                                              f"returns {sorted(rec.specs)}")
        rec.status, rec.loaded = LOADED, True
        self._adopt_aliases(rec)
        self._summarize(rec)
        return True

    def _ask(self, rec: PluginRecord, hook: str):
        try:
            return True, self.call(rec, hook)
        except Exception as e:  # noqa: BLE001
            self._fail(rec, f"plugin {rec.label} raised in {hook}(): {type(e).__name__}: {e}", e)
            return False, None

    def _adopt_aliases(self, rec: PluginRecord) -> None:
        """Aliases given only in a DeviceTypeSpec: they take names nobody declared in package metadata."""
        for t in rec.types:
            if rec.type_status[t][0] != LOADED:
                continue
            for a in rec.specs[t].aliases:
                a = a.strip().lower()
                if a not in rec.alias_status:
                    self._adopt_alias(rec, a, t)

    def _adopt_alias(self, rec: PluginRecord, alias: str, target: str) -> None:
        holder = self.by_type.get(alias) or self.contested.get(alias) or self.alias_owner.get(alias)
        choice = self._choice(alias)
        if holder is None:
            if choice and choice != normalize(rec.label):
                return self._deny(Claim(rec, target), alias, SKIPPED, f"{plugin_env_var(alias)} gives {alias!r} to "
                                                                      f"another distribution")
            self._grant(alias, Claim(rec, target))
            self._spec_aliases.add(alias)
            return None
        if alias in self._spec_aliases and isinstance(holder, PluginRecord):   # two aliases known only by loading
            self._settle(alias, [Claim(holder, self.aliases[alias]), Claim(rec, target)])
            if alias not in self.aliases:
                self._spec_aliases.discard(alias)
            return self._summarize(holder)
        self._deny(Claim(rec, target), alias, REFUSED, (
            f"alias {alias!r} of {rec.label} (declared only in DeviceTypeSpec) is refused: {alias!r} is already "
            f"claimed by {holder.label}; declare the alias in entry-point group {ALIAS_GROUP} to claim it on "
            f"equal terms"))
        if isinstance(holder, PluginRecord):
            holder.notes.append(f"{rec.label} also declares {alias!r} as an alias of {target!r} (refused)")
            self._summarize(holder)
        return None

    def _give_up(self, rec: PluginRecord, status: str, reason: str) -> bool:
        rec.status, rec.reason = status, reason
        for t in rec.types:
            rec.type_status[t] = (status, reason)
        return False

    def _fail(self, rec: PluginRecord, reason: str, exc: BaseException | None = None) -> bool:
        self._give_up(rec, FAILED, reason)
        if exc is not None:
            rec.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        if isinstance(exc, KeyboardInterrupt):
            raise exc
        return False

    def _summarize(self, rec: PluginRecord) -> None:
        """The record's status and reason from its types: failed when all failed, conflict when it serves none."""
        own = [rec.type_status[t][0] for t in rec.types if t in rec.type_status]
        lost = [s for t, (s, _) in rec.type_status.items() if t not in rec.types]
        if own and all(s == FAILED for s in own):
            rec.status = FAILED
        elif not rec.types and lost:
            rec.status = CONFLICT if CONFLICT in lost else SKIPPED
        elif rec.loaded:
            rec.status = LOADED
        reasons = [r for s, r in rec.type_status.values() if s in PROBLEMS and r]
        reasons += [r for _, s, r in rec.alias_status.values() if s in PROBLEMS and r] + rec.notes
        if reasons or rec.status not in (FAILED, SKIPPED):
            rec.reason = "; ".join(dict.fromkeys(reasons))


def _join(names: list) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _unmarked(rec: PluginRecord, hook: str) -> str:
    return f"plugin {rec.label} defines {hook}() but without the @anydevice.plugins.hookimpl marker"


def _missing_hook(rec: PluginRecord, hook: str) -> str:
    if callable(getattr(rec.module, hook, None)):
        return _unmarked(rec, hook) + ": decorate it with @hookimpl (from anydevice.plugins import hookimpl)"
    return f"plugin {rec.label} does not implement the required hook {hook}()"


def _bad_specs(specs) -> str:
    """What is wrong with an ``anydevice_device_types()`` answer ('' when nothing)."""
    from anydevice.runtime.contract import DeviceTypeSpec

    if isinstance(specs, DeviceTypeSpec):
        return f"returned one DeviceTypeSpec ({specs.name!r}); expected a list of DeviceTypeSpec"
    if not isinstance(specs, (list, tuple)):
        return f"returned {specs!r} ({type(specs).__name__}); expected a list of DeviceTypeSpec"
    for s in specs:
        if not isinstance(s, DeviceTypeSpec):
            return f"returned {s!r} in its list; expected DeviceTypeSpec"
        if not isinstance(s.name, str) or not _TYPE_NAME.match(s.name):
            return f"returned a DeviceTypeSpec named {s.name!r}; a device type is a word like 'npu' (letters, digits, _)"
        if not isinstance(s.aliases, (tuple, list)) or not all(isinstance(a, str) and _TYPE_NAME.match(a)
                                                                for a in s.aliases):
            return f"returned aliases {s.aliases!r} for {s.name!r}; expected a tuple of words like ('gpu',)"
    return ""


def _dist_name(ep):
    dist = getattr(ep, "dist", None)
    return getattr(dist, "name", None) if dist is not None else None


def _dist_version(ep):
    dist = getattr(ep, "dist", None)
    return getattr(dist, "version", None) if dist is not None else None


#: The process-wide plugin manager.
manager = PluginManager()
