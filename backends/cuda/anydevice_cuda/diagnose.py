"""Why CUDA cannot be used here: probing the CuPy stack and naming the fix.

:func:`classify` is a pure function of what the probe saw (an exception, the driver and
runtime versions, the device count), so every reason can be tested without a GPU.
"""
from __future__ import annotations

import os

INSTALL_HINT = "pip install cupy-cuda12x"

# CUDA runtime error names (cudaError_t) with their numeric codes, as CuPy reports them.
_NO_DEVICE = ("cudaErrorNoDevice", 100)
_INSUFFICIENT_DRIVER = ("cudaErrorInsufficientDriver", 35)
_UNAVAILABLE = ("cudaErrorDevicesUnavailable", 46)
_MISMATCH = ("cudaErrorSystemDriverMismatch", 803)
_COMPAT = ("cudaErrorCompatNotSupportedOnDevice", 804)


def version_text(v: int | None) -> str:
    """CUDA's integer versions (12040) as text ("12.4")."""
    return "unknown" if not v else f"{v // 1000}.{(v % 1000) // 10}"


def _is(exc, err) -> bool:
    name, code = err
    return getattr(exc, "status", None) == code or name in str(exc)


def _visible_note(visible: str | None) -> str:
    if visible is None:
        return ""
    return f" (CUDA_VISIBLE_DEVICES={visible!r} hides devices; unset it or list valid GPU indices)"


def classify(exc: BaseException | None, driver_version: int | None = None, runtime_version: int | None = None,
             device_count: int | None = None, visible: str | None = None) -> str:
    """The reason CUDA is unusable, from what :func:`probe` observed.

    :param exc: the exception raised by ``import cupy`` or by the first CUDA call, or None.
    :param driver_version: ``cudaDriverGetVersion()`` (0 when no driver is installed), or None if unknown.
    :param runtime_version: the CUDA runtime CuPy was built for (``12090``), or None.
    :param device_count: devices reported when no exception was raised.
    :param visible: the value of ``CUDA_VISIBLE_DEVICES`` (None when unset).
    """
    need = (runtime_version or 12000) // 1000
    if isinstance(exc, ImportError):
        text = str(exc)
        if getattr(exc, "name", None) == "cupy" or "No module named 'cupy'" in text:
            return f"cupy is not installed: {INSTALL_HINT}"
        return (f"cupy is installed but failed to import ({type(exc).__name__}: {text}); reinstall it with "
                f"{INSTALL_HINT} (or the cupy build matching your CUDA version)")
    if driver_version == 0 or (exc is not None and "libcuda" in str(exc)):
        return "cupy is installed but no CUDA driver was found: install the NVIDIA driver"
    if exc is not None and _is(exc, _MISMATCH):
        return ("the NVIDIA kernel module and the user-space driver libraries have different versions "
                "(cudaErrorSystemDriverMismatch): reboot, or reinstall the NVIDIA driver")
    if exc is not None and (_is(exc, _INSUFFICIENT_DRIVER) or _is(exc, _COMPAT)) or (
            driver_version and runtime_version and driver_version // 1000 < need):
        have = (driver_version or 0) // 1000
        alt = f" (pip install cupy-cuda{have}x)" if 11 <= have < need else ""
        return (f"the CUDA driver supports CUDA {version_text(driver_version)} but cupy-cuda{need}x needs "
                f"{need}.x: update the driver or install a cupy build for your CUDA{alt}")
    if exc is not None and _is(exc, _NO_DEVICE) or device_count == 0:
        return (f"the NVIDIA driver (CUDA {version_text(driver_version)}) is installed but no CUDA device was "
                f"found{_visible_note(visible)}; check that the GPU shows up in nvidia-smi")
    if exc is not None and _is(exc, _UNAVAILABLE):
        return ("every CUDA device is busy or unavailable (exclusive compute mode, or in use by another "
                "process); check nvidia-smi")
    if exc is not None:
        return f"CUDA initialization failed: {type(exc).__name__}: {exc}"
    return ""


def probe():
    """Import CuPy and count devices. Returns ``(cupy_module, None)`` or ``(None, reason)``."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        import cupy
    except Exception as e:  # noqa: BLE001 - any import failure is a reason, not a crash
        return None, classify(e)
    rt = cupy.cuda.runtime
    driver = _call(rt.driverGetVersion)
    runtime = _call(rt.runtimeGetVersion)
    try:
        n = rt.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - CUDARuntimeError and friends
        return None, classify(e, driver, runtime, visible=visible)
    if n == 0:
        return None, classify(None, driver, runtime, device_count=0, visible=visible)
    return cupy, None


def _call(fn):
    try:
        return int(fn())
    except Exception:  # noqa: BLE001
        return None
