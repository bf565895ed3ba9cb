"""Exceptions: one per status code of the C ABI, with the library's message."""


class Error(Exception):
    """Base of every fsdpa error. ``status`` is the C ABI status code (0 when
    the error was raised by the wrapper itself)."""

    status = 0


class InvalidArgument(Error, ValueError):
    """Bad input: names the argument, the expected and the actual value."""

    status = 1


class Unsupported(Error, NotImplementedError):
    """No kernel can serve the call (policy "fused" without a fused kernel, a
    backend that is not built)."""

    status = 2


class DeviceError(Error, RuntimeError):
    """A CUDA call failed."""

    status = 3


class InternalError(Error, RuntimeError):
    """Anything else the library raised, out-of-memory included."""

    status = 4


class LibraryNotFound(Error, OSError):
    """The fsdpa shared library could not be found or loaded."""


_BY_STATUS = {cls.status: cls for cls in (InvalidArgument, Unsupported, DeviceError, InternalError)}


def error_for_status(status, message):
    """The exception for a nonzero status code of the C ABI."""
    cls = _BY_STATUS.get(status, InternalError)
    error = cls(message)
    error.status = status
    return error
