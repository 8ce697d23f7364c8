"""The root distribution's wheel holds the core, the cpu backend and the conformance suite."""
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_contents(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, timeout=300,
    )
    if r.returncode != 0 and "No module named" in r.stderr and "setuptools" in r.stderr:
        pytest.skip("setuptools is not installed in this environment")
    assert r.returncode == 0, r.stderr
    (wheel,) = tmp_path.glob("anydevice-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for must in ("anydevice/__init__.py", "anydevice/ops/registry.py", "anydevice_cpu/plugin.py",
                 "anydevice_conformance/__init__.py"):
        assert must in names, must
    ep = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(ep).decode()
    assert "[anydevice.backends]" in text and "cpu = anydevice_cpu.plugin" in text
    assert not any(n.startswith(("tests/", "backends/")) for n in names)
    from anydevice_cpu import native

    if native.AVAILABLE:  # a compiler built them here: the wheel builds them too
        assert any(n.startswith("anydevice_cpu/_native.") for n in names)
