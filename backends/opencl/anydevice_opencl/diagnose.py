"""What went wrong when an OpenCL driver could not build or run a program, and what to do.

Pure functions over the driver's text (a pyopencl error message or build log, and the platform
and device version strings), so they are tested on sample messages without the failing driver.
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
from typing import NamedTuple

#: What to install when the CPU device's PoCL is too old, or there is no OpenCL driver at all.
GET_POCL = ("your distribution's pocl-opencl-icd >= 3.1 (sudo apt-get install pocl-opencl-icd), "
            "or conda-forge's pocl (conda install -c conda-forge pocl)")
MAX_LINES = 5
MAX_LINE = 240
_BOILERPLATE = re.compile(
    r"^(cl\w+ failed: |Build on <|\(options: |\(source saved as |\d+ (warning|error)s? generated\.?$)")
_OUT_OF_RESOURCES = ("OUT_OF_RESOURCES", "OUT_OF_HOST_MEMORY", "MEM_OBJECT_ALLOCATION_FAILURE")
_NO_PLATFORM = ("PLATFORM_NOT_FOUND", "no OpenCL platform", "clGetPlatformIDs")


class Failure(NamedTuple):
    """A classified driver failure: ``kind`` is one of ``unknown-cpu``, ``no-platform``,
    ``out-of-resources`` or ``compiler``; ``lines`` are the driver's own error lines (a few);
    ``hint`` says what to do."""

    kind: str
    lines: list
    hint: str


def compiler_lines(message: str, source: str | None = None) -> list[str]:
    """The driver's error lines from ``message``, at most :data:`MAX_LINES`, each shortened to
    :data:`MAX_LINE` characters. pyopencl's framing (routine names, the device repr, the build
    options) is dropped, lines with "error" come first, and the driver's temporary file names
    are replaced by ``source`` (where the generated source was saved) when given."""
    lines, seen = [], set()
    for raw in message.splitlines():
        line = raw.strip()
        if line.startswith("Device ") and "failed to build the program" in line:
            line = line.partition(", log: ")[2].strip()  # PoCL's summary repeats the log
        if not line or _BOILERPLATE.match(line) or line in seen:
            continue
        seen.add(line)
        if source:
            line = re.sub(r"\S+\.cl(?=:\d+)", source, line)
        lines.append(line if len(line) <= MAX_LINE else line[:MAX_LINE - 1] + "…")
    errors = [x for x in lines if re.search(r"\berror\b", x, re.IGNORECASE)]
    return (errors + [x for x in lines if x not in errors])[:MAX_LINES]


def pocl_version(platform_version: str) -> tuple[str | None, str | None]:
    """(PoCL version, LLVM major version) from a platform version string such as
    ``'OpenCL 3.0 PoCL 3.0-rc2  Linux, Release, RELOC, LLVM 14.0.6, ...'``; None where absent."""
    pocl = re.search(r"\bpocl\s+(\d[\w.+~-]*)", platform_version, re.IGNORECASE)
    llvm = re.search(r"\bLLVM\s+(\d+)", platform_version)
    return (pocl.group(1) if pocl else None), (llvm.group(1) if llvm else None)


def cpu_model(device_name: str = "", cpuinfo: str | None = None) -> str:
    """The host CPU's model name from ``/proc/cpuinfo`` (or ``cpuinfo`` text), else the device name."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            cpuinfo = ""
    m = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    return m.group(1).strip() if m else re.sub(r"^(pthread|cpu|basic)-", "", device_name.strip())


def classify(message: str, platform_version: str = "", cpu: str = "", source: str | None = None) -> Failure:
    """Classify a driver failure from its message and the platform's version string."""
    lines = compiler_lines(message, source)
    if "unknown target CPU" in message:
        pocl, llvm = pocl_version(platform_version)
        who = f"PoCL {pocl or '(unknown version)'}" + (f" (LLVM {llvm})" if llvm else "")
        return Failure("unknown-cpu", lines, f"{who} does not know this CPU ({cpu or 'model unknown'}); install a "
                       f"newer PoCL, e.g. {GET_POCL}; with several platforms, ANYDEVICE_OPENCL_PLATFORM picks one")
    if any(k in message for k in _NO_PLATFORM):
        return Failure("no-platform", lines, f"install an OpenCL driver: your GPU vendor's OpenCL ICD, or for the CPU {GET_POCL}")
    if any(k in message for k in _OUT_OF_RESOURCES):
        return Failure("out-of-resources", lines, "the driver ran out of memory or resources: free memory, close other "
                       "programs using the device, or pick another device with ANYDEVICE_OPENCL_VISIBLE_DEVICES")
    return Failure("compiler", lines, "the OpenCL driver could not build or run a program; update the driver, or pick "
                   "another platform with ANYDEVICE_OPENCL_PLATFORM")


def failed_source_dir() -> str:
    """Where sources that failed to build are saved: ``$XDG_CACHE_HOME/anydevice/opencl-failed``
    (default ``~/.cache``), or the temporary folder when that cannot be written."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "anydevice", "opencl-failed")


def save_source(src: str) -> str:
    """Write ``src`` to ``<failed_source_dir>/<sha256 prefix>.cl`` and return the path."""
    name = hashlib.sha256(src.encode()).hexdigest()[:16] + ".cl"
    for folder in (failed_source_dir(), os.path.join(tempfile.gettempdir(), "anydevice-opencl-failed")):
        try:
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, name)
            with open(path, "w") as f:
                f.write(src)
            return path
        except OSError:
            continue
    return "(not saved: no writable cache or temporary folder)"
