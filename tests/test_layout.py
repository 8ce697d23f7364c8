"""The package layout holds: no import cycles among core modules, layers per pyproject's contracts."""
import pathlib
import shutil
import subprocess
import sys

import pytest

grimp = pytest.importorskip("grimp", reason="import-linter (grimp) is installed by the test extra")

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _cycles(graph, package: str) -> list:
    """Strongly connected components of more than one module (Tarjan), imports inside functions included."""
    mods = sorted(m for m in graph.modules if m == package or m.startswith(package + "."))
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    edges = {m: sorted(d for d in graph.find_modules_directly_imported_by(m) if d in index or d in mods)
             for m in mods}

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for m in mods:
        if m not in index:
            visit(m)
    return out


def test_no_import_cycles_among_core_modules():
    graph = grimp.build_graph("anydevice")
    assert _cycles(graph, "anydevice") == []


def test_cycle_finder_finds_a_cycle(tmp_path, monkeypatch):
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyc import b\n")
    (pkg / "b.py").write_text("def f():\n    from cyc import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _cycles(grimp.build_graph("cyc"), "cyc") == [["cyc.a", "cyc.b"]]


def test_import_linter_contracts_hold():
    exe = shutil.which("lint-imports") or str(pathlib.Path(sys.executable).with_name("lint-imports"))
    r = subprocess.run([exe, "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


@pytest.mark.parametrize("old, new", [
    ("anydevice.backend", "anydevice.runtime.contract"), ("anydevice.plugins.hookspecs", "anydevice.runtime.hookspecs"),
    ("anydevice.plugins.manager", "anydevice.runtime.plugins"), ("anydevice.dtypes", "anydevice.base.dtypes"),
    ("anydevice.errors", "anydevice.base.errors"), ("anydevice.devices", "anydevice.runtime.devices"),
    ("anydevice._backend", "anydevice.runtime.devices"), ("anydevice.device", "anydevice.api.device"),
    ("anydevice.optimizer", "anydevice.optim"), ("anydevice.profiler", "anydevice.tools.profiler"),
    ("anydevice.cli", "anydevice.tools.cli"), ("anydevice.bench", "anydevice.tools.bench"),
    ("anydevice.dispatch", "anydevice.engine.dispatch"), ("anydevice.allocator", "anydevice.runtime.allocator"),
    ("anydevice.check", "anydevice.tools.check"),
])
def test_old_import_paths_are_the_new_modules(old, new):
    import importlib

    assert importlib.import_module(old) is importlib.import_module(new)


def test_old_vendor_spellings_still_build_a_plugin():
    from anydevice.backend import API_VERSION, DeviceTypeSpec, Runtime
    from anydevice.plugins import hookimpl
    from anydevice.runtime import Runtime as NewRuntime
    from anydevice.runtime.markers import hookimpl as new_hookimpl

    assert Runtime is NewRuntime and hookimpl is new_hookimpl
    assert isinstance(API_VERSION, int) and DeviceTypeSpec("x").name == "x"
