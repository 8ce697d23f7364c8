"""Exceptions raised by anydevice. Each message says what was wrong and what is allowed."""
from __future__ import annotations


class AnyDeviceError(RuntimeError):
    """Base class of anydevice's own runtime errors."""


class OutOfMemoryError(AnyDeviceError, MemoryError):
    """An allocation failed even after the allocator released its cache."""


class DeviceUnavailableError(AnyDeviceError):
    """A device type (or one device) is installed but cannot be used here (no driver, no device,
    a compiler that does not know this CPU, ...).

    ``hint`` says what to do about it; reports show it next to the reason.
    """

    def __init__(self, message: str = "", hint: str = ""):
        super().__init__(message)
        self.hint = hint


class DeviceError(AnyDeviceError):
    """An error reported by a device: a failed kernel, a lost device, a failed copy.

    Asynchronous backends raise it at the next synchronization point, naming the
    device, the stream and the op that failed.
    """


class FallbackError(AnyDeviceError):
    """Raised when an op would fall back to the CPU and ``ANYDEVICE_FALLBACK=error``."""


class UnsupportedError(AnyDeviceError, NotImplementedError):
    """A device cannot do what was asked (a capability it does not have)."""


class PluginError(AnyDeviceError):
    """A backend plugin broke its contract; the message names the plugin and the hook."""


class LinAlgError(AnyDeviceError, ValueError):
    """A linear-algebra op got a matrix it cannot handle: singular (inv, solve) or not positive-definite
    (cholesky). A ValueError, like numpy's ``LinAlgError``."""


class AxisError(ValueError, IndexError):
    """An axis argument outside ``[-ndim, ndim)`` (a 0-d array has no axes). A ValueError and an
    IndexError, like numpy's ``AxisError``, so code written for either keeps working."""


class CheckpointError(AnyDeviceError, ValueError):
    """A checkpoint file cannot be loaded: truncated, corrupt or hostile (bad header, offsets
    past the end or overlapping, unknown dtype, size mismatch, unknown metadata), or it names a
    device that does not exist here. ``path`` is the file, ``problem`` what was wrong with it.

    Raised before anything is returned: :func:`anydevice.load` validates the whole header
    before it reads any tensor data.
    """

    def __init__(self, path: str = "", problem: str = ""):
        super().__init__(f"cannot load checkpoint {path!r}: {problem}" if path else problem)
        self.path, self.problem = path, problem

    def __reduce__(self):
        return (type(self), (self.path, self.problem))
