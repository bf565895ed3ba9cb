"""fsdpa: fused scaled-dot-product attention for every head dimension.

A thin ctypes wrapper over the C ABI (include/fsdpa/c_api.h); no build step.
The shared library is $FSDPA_LIBRARY, else the first libfsdpa.so found next
to this package or in the build*/ directories of the repository it lives in.

    import numpy as np, fsdpa
    out = fsdpa.attention(q, k, v, causal=True)            # numpy or torch
    out, lse = fsdpa.attention(q, k, v, sinks=s, return_lse=True)
    print(fsdpa.plan(q, k, v, causal=True))                # what would run, and why

Library errors are raised with the library's message as fsdpa.InvalidArgument
(a ValueError), fsdpa.Unsupported (a NotImplementedError), fsdpa.DeviceError
or fsdpa.InternalError (RuntimeErrors), all subclasses of fsdpa.Error.
"""

from ._api import (
    PlanInfo,
    Prepared,
    attention,
    backend_built,
    library_path,
    plan,
    prepare,
    support_matrix,
    version,
)
from ._errors import (
    DeviceError,
    Error,
    InternalError,
    InvalidArgument,
    LibraryNotFound,
    Unsupported,
)

__all__ = [
    "DeviceError",
    "Error",
    "InternalError",
    "InvalidArgument",
    "LibraryNotFound",
    "PlanInfo",
    "Prepared",
    "Unsupported",
    "attention",
    "backend_built",
    "library_path",
    "plan",
    "prepare",
    "support_matrix",
    "version",
]
