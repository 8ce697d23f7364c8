"""Device profiles of the simulated accelerators and how to override them.

A :class:`Profile` says how many devices a type has, how much memory each one holds,
which dtypes it supports, which primitive kernels it lacks, and the peak figures of the
cost model (see :meth:`Profile.device_time`).

Overrides, applied in this order when a type's runtime is created:

1. ``ANYDEVICE_SIM_CONFIG=/path/profiles.toml`` (or ``.json``): one table per type,
   e.g. ``[npu]\\ncount = 2\\nmemory = 1073741824``;
2. ``ANYDEVICE_SIM_<TYPE>_PROFILE='{"count": 2, "memory": 1073741824}'`` (JSON).

Allowed keys are the fields of :class:`Profile`; ``dtypes`` and ``missing_ops`` are lists
of names. Memory may be given as an int (bytes) or a string like ``"64MiB"``.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re

GiB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    count: int
    memory: int                  # bytes per device
    peak_flops: float            # FLOP/s used by the cost model
    bandwidth: float             # device memory bytes/s used by the cost model
    launch_latency: float = 4e-6  # seconds added to every kernel by the cost model
    dtypes: tuple = ()           # names; empty = every anydevice dtype
    missing_ops: tuple = ()      # primitives without a native kernel (they fall back to the cpu)
    host_bandwidth: float = 25e9  # host <-> device link bytes/s (PCIe-like), for queued copies
    link_bandwidth: float = 50e9  # device <-> device interconnect bytes/s per link (collectives across processes)
    link_latency: float = 8e-6    # seconds per message step of a collective

    def device_time(self, nbytes: int, flops: float) -> float:
        """Roofline estimate in seconds: launch latency + max(compute time, memory time)."""
        return self.launch_latency + max(flops / self.peak_flops, nbytes / self.bandwidth)

    def transfer_time(self, nbytes: int) -> float:
        """Seconds a queued host <-> device copy of ``nbytes`` occupies its stream."""
        return self.launch_latency + nbytes / self.host_bandwidth


_ALL_BUT = lambda *drop: tuple(n for n in (  # noqa: E731
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128") if n not in drop)

#: Built-in profiles, loosely modelled on public figures of each device family.
PROFILES = {
    "npu": Profile("Simulated NPU (Ascend-like)", count=8, memory=32 * GiB, peak_flops=256e12,
                   bandwidth=1.6e12, launch_latency=5e-6, dtypes=_ALL_BUT("float64", "complex64", "complex128")),
    "xpu": Profile("Simulated XPU (Kunlun-like)", count=4, memory=16 * GiB, peak_flops=128e12,
                   bandwidth=0.5e12, launch_latency=6e-6, dtypes=_ALL_BUT("complex128", "uint16", "uint32", "uint64"),
                   missing_ops=("erf", "round", "bitwise_left_shift")),
    "dcu": Profile("Simulated DCU (Hygon-like)", count=4, memory=16 * GiB, peak_flops=24.5e12,
                   bandwidth=1.0e12, launch_latency=4e-6),
}

_FIELDS = {f.name for f in dataclasses.fields(Profile)}
_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 10**3, "mb": 10**6, "gb": 10**9}


def env_var(device_type: str) -> str:
    return f"ANYDEVICE_SIM_{device_type.upper()}_PROFILE"


def load_profile(device_type: str, environ=None) -> Profile:
    """The profile of ``device_type`` with the config file and env var overrides applied."""
    environ = os.environ if environ is None else environ
    prof = PROFILES[device_type]
    path = environ.get("ANYDEVICE_SIM_CONFIG", "").strip()
    if path:
        table = _read_config(path).get(device_type, {})
        prof = apply_overrides(prof, table, f"{path} [{device_type}]")
    raw = environ.get(env_var(device_type), "").strip()
    if raw:
        try:
            table = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ValueError(f"{env_var(device_type)} is not valid JSON ({e}); example: "
                             f"'{{\"count\": 2, \"memory\": \"64MiB\"}}'") from None
        prof = apply_overrides(prof, table, env_var(device_type))
    return prof


def apply_overrides(prof: Profile, table: dict, where: str) -> Profile:
    if not isinstance(table, dict):
        raise ValueError(f"{where}: expected a table of profile fields, got {type(table).__name__}")
    unknown = sorted(set(table) - _FIELDS)
    if unknown:
        raise ValueError(f"{where}: unknown profile field(s) {unknown}; allowed: {sorted(_FIELDS)}")
    changes = {k: _coerce(k, v, where) for k, v in table.items()}
    return dataclasses.replace(prof, **changes)


def _coerce(key, value, where):
    if key == "memory":
        value = parse_bytes(value, where)
    elif key == "count":
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{where}: count must be a positive integer, got {value!r}")
    elif key in ("dtypes", "missing_ops"):
        if isinstance(value, str) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{where}: {key} must be a list of names, got {value!r}")
        value = tuple(value)
    elif key in ("peak_flops", "bandwidth", "launch_latency", "host_bandwidth", "link_bandwidth", "link_latency"):
        value = float(value)
        if value < 0 or (value == 0 and not key.endswith("latency")):
            raise ValueError(f"{where}: {key} must be positive, got {value!r}")
    return value


def parse_bytes(value, where="memory") -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(value))
    if m and m.group(2).lower() in _UNITS:
        return int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    raise ValueError(f"{where}: memory must be a positive number of bytes or a size like '64MiB', got {value!r}")


def _read_config(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ValueError(f"ANYDEVICE_SIM_CONFIG={path!r} cannot be read: {e}") from None
    if path.endswith(".json"):
        return json.loads(data)
    import tomllib

    try:
        return tomllib.loads(data.decode())
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"ANYDEVICE_SIM_CONFIG={path!r} is not valid TOML ({e}); use a .json file for JSON") from None
