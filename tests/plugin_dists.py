"""Fake *installed* plugin distributions for subprocess tests.

``make_dist(root, "aaa-evil-npu", {"npu": "evil_npu"}, {"evil_npu": SOURCE})`` writes a module and a
``<name>-<version>.dist-info`` folder with ``METADATA`` and ``entry_points.txt`` under ``root``; with
``root`` on ``PYTHONPATH`` a child interpreter sees it exactly as a ``pip install``-ed plugin
(``importlib.metadata.entry_points(group="anydevice.backends")``).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

#: Source of a minimal working plugin module over host memory; ``{types}`` is a list literal.
PLUGIN_TEMPLATE = '''
import numpy as np
from anydevice.backend import API_VERSION, DeviceTypeSpec, Runtime
from anydevice.plugins import hookimpl

TYPES = {types}
FILL = {fill}


class HostRuntime(Runtime):
    def __init__(self, count=2):
        self.count, self.mem, self._next = count, {{}}, 1

    def device_count(self):
        return self.count

    def malloc(self, index, nbytes):
        h, self._next = self._next, self._next + 1
        self.mem[h] = np.zeros(nbytes, np.uint8)
        return h

    def free(self, index, handle):
        self.mem.pop(handle, None)

    def copy_h2d(self, index, dst, offset, src):
        b = np.ascontiguousarray(src).reshape(-1).view(np.uint8)
        if FILL is not None:
            b = np.full(b.size // src.itemsize, FILL, src.dtype).view(np.uint8)
        self.mem[dst][offset:offset + b.nbytes] = b

    def copy_d2h(self, index, dst, src, offset):
        b = dst.reshape(-1).view(np.uint8)
        b[:] = self.mem[src][offset:offset + b.nbytes]

    def synchronize(self, index):
        pass


@hookimpl
def anydevice_api_version():
    return API_VERSION


@hookimpl
def anydevice_device_types():
    return [DeviceTypeSpec(t, aliases=tuple({aliases})) for t in TYPES]


@hookimpl
def anydevice_create_runtime(device_type):
    return HostRuntime()
'''


def plugin_source(types, aliases=(), fill=None, extra: str = "") -> str:
    """A working plugin module serving ``types``; ``fill`` makes every upload write that value
    (a plugin that returns wrong numbers); ``extra`` is appended verbatim (more hooks, overrides)."""
    return PLUGIN_TEMPLATE.format(types=list(types), aliases=list(aliases), fill=fill) + textwrap.dedent(extra)


def make_dist(root: Path, dist_name: str, entry_points: dict, modules: dict, version: str = "1.0") -> Path:
    """Write modules ``{module_name: source}`` and a dist-info for ``dist_name`` whose
    ``anydevice.backends`` entry points are ``{device_type: module_name}``."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for mod, src in modules.items():
        (root / f"{mod}.py").write_text(src)
    info = root / f"{dist_name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: {version}\n")
    eps = "".join(f"{t} = {m}\n" for t, m in entry_points.items())
    (info / "entry_points.txt").write_text(f"[anydevice.backends]\n{eps}")
    return info


def run_python(code: str, root: Path | None = None, timeout: float = 120, args=(), **env) -> subprocess.CompletedProcess:
    """Run ``code`` in a child interpreter with ``root`` (fake distributions) first on PYTHONPATH."""
    e = dict(os.environ, **{k: str(v) for k, v in env.items()})
    if root is not None:
        e["PYTHONPATH"] = os.pathsep.join([str(root)] + [p for p in [e.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          env=e, timeout=timeout)


def run_cli(args, root: Path | None = None, timeout: float = 120, **env) -> subprocess.CompletedProcess:
    """Run ``anydevice ARGS`` (the CLI) in a child interpreter, with fake distributions on the path."""
    return run_python("import sys; from anydevice.cli import main; sys.exit(main(sys.argv[1:]))", root,
                      timeout, args=list(args), **env)
