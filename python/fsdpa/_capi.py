"""The C ABI of include/fsdpa/c_api.h through ctypes: the structs, the
constants, the function prototypes, and finding the shared library."""

import ctypes
import importlib.machinery
import importlib.util
import os
import sys
import threading
import warnings
from pathlib import Path

from ._errors import InvalidArgument, LibraryNotFound, error_for_status

# Must equal FSDPA_ABI_VERSION of the library (c_api.h).
ABI_VERSION = 4

# ------------------------------------------------------------------ constants

OK = 0

DTYPE_F16, DTYPE_BF16, DTYPE_F32, DTYPE_BOOL, DTYPE_I32 = 0, 1, 2, 3, 4
DEVICE_CPU, DEVICE_CUDA = 0, 1
CAUSAL_ALIGN_BOTTOM_RIGHT, CAUSAL_ALIGN_TOP_LEFT = 0, 1
POLICY_DEFAULT, POLICY_AUTO, POLICY_FUSED, POLICY_UNFUSED = -1, 0, 1, 2
BACKEND_CPU, BACKEND_CUDA = 0, 1

DTYPE_NAMES = {DTYPE_F16: "f16", DTYPE_BF16: "bf16", DTYPE_F32: "f32", DTYPE_BOOL: "bool",
               DTYPE_I32: "i32"}
DEVICE_NAMES = {DEVICE_CPU: "cpu", DEVICE_CUDA: "cuda"}
POLICY_NAMES = {POLICY_AUTO: "auto", POLICY_FUSED: "fused", POLICY_UNFUSED: "unfused"}
BACKEND_NAMES = {BACKEND_CPU: "cpu", BACKEND_CUDA: "cuda"}
PATH_NAMES = {0: "fused-prefill", 1: "fused-decode", 2: "unfused"}
MASK_NAMES = {0: "none", 1: "additive", 2: "boolean"}

MAX_RANK = 4

# ------------------------------------------------------------------ structs


class Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("device_type", ctypes.c_int32),
        ("device_index", ctypes.c_int32),
        ("rank", ctypes.c_int32),
        ("sizes", ctypes.c_int64 * MAX_RANK),
        ("strides", ctypes.c_int64 * MAX_RANK),
    ]


class Options(ctypes.Structure):
    _fields_ = [
        ("has_scale", ctypes.c_int32),
        ("causal", ctypes.c_int32),
        ("scale", ctypes.c_double),
        ("causal_align", ctypes.c_int32),
        ("has_window", ctypes.c_int32),
        ("window_left", ctypes.c_int64),
        ("policy", ctypes.c_int32),
        ("allow_tf32", ctypes.c_int32),
        ("softcap", ctypes.c_double),
    ]


class Tensors(ctypes.Structure):
    _fields_ = [
        ("q", Tensor),
        ("k", Tensor),
        ("v", Tensor),
        ("out", Tensor),
        ("mask", ctypes.POINTER(Tensor)),
        ("sinks", ctypes.POINTER(Tensor)),
        ("lse", ctypes.POINTER(Tensor)),
        ("block_table", ctypes.POINTER(Tensor)),
        ("seq_lens_k", ctypes.POINTER(Tensor)),
    ]


KERNEL_NAME_CAPACITY = 128
FALLBACK_REASON_CAPACITY = 1024


class PlanInfo(ctypes.Structure):
    _fields_ = [
        ("backend", ctypes.c_int32),
        ("path", ctypes.c_int32),
        ("policy", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("device_type", ctypes.c_int32),
        ("device_index", ctypes.c_int32),
        ("mask", ctypes.c_int32),
        ("has_sinks", ctypes.c_int32),
        ("has_lse", ctypes.c_int32),
        ("num_threads", ctypes.c_int32),
        ("batch", ctypes.c_int64),
        ("heads_q", ctypes.c_int64),
        ("heads_kv", ctypes.c_int64),
        ("len_q", ctypes.c_int64),
        ("len_k", ctypes.c_int64),
        ("head_dim_qk", ctypes.c_int64),
        ("head_dim_v", ctypes.c_int64),
        ("head_dim_qk_bucket", ctypes.c_int64),
        ("head_dim_v_bucket", ctypes.c_int64),
        ("tile_q", ctypes.c_int64),
        ("tile_k", ctypes.c_int64),
        ("num_kv_splits", ctypes.c_int64),
        ("page_size", ctypes.c_int64),
        ("num_pages", ctypes.c_int64),
        ("has_seq_lens_k", ctypes.c_int32),
        ("num_v_slices", ctypes.c_int32),
        ("workspace_bytes", ctypes.c_uint64),
        ("scale", ctypes.c_double),
        ("pad_ratio", ctypes.c_double),
        ("kernel", ctypes.c_char * KERNEL_NAME_CAPACITY),
        ("fallback_reason", ctypes.c_char * FALLBACK_REASON_CAPACITY),
    ]


# The sizes c_api.h states; a mismatch means this file and the header differ.
STRUCT_SIZES = {Tensor: 88, Options: 48, Tensors: 392, PlanInfo: 1336}

# ------------------------------------------------------------------ loading


def _library_names():
    if sys.platform == "darwin":
        return ["libfsdpa.dylib"]
    if sys.platform == "win32":
        return ["fsdpa.dll", "libfsdpa.dll"]
    return ["libfsdpa.so", "libfsdpa.so.0"]


def candidate_paths(package_dir=None):
    """Where the library is looked for when FSDPA_LIBRARY is not set: the
    package's lib/ (where `pip install .` puts it), next to the package, then
    the build directories of the repository the package lives in (build/,
    build/lib/, then every other build*/ directory)."""
    package_dir = Path(package_dir or Path(__file__).resolve().parent)
    repo = package_dir.parent.parent  # <repo>/python/fsdpa
    directories = [package_dir / "lib", package_dir, repo / "build", repo / "build" / "lib"]
    for other in sorted(repo.glob("build*")):
        if other.is_dir() and other not in directories:
            directories += [other, other / "lib"]
    return [directory / name for directory in directories for name in _library_names()]


def find_library(environ=None, package_dir=None):
    """The path of the shared library: $FSDPA_LIBRARY if set, else the first
    of candidate_paths() that exists. Raises LibraryNotFound listing where it
    looked."""
    environ = os.environ if environ is None else environ
    explicit = environ.get("FSDPA_LIBRARY")
    if explicit:
        if not Path(explicit).is_file():
            raise LibraryNotFound(
                f"fsdpa: FSDPA_LIBRARY={explicit} does not name an existing file; "
                "point it at libfsdpa.so (the `fsdpa` target of the CMake build)"
            )
        return Path(explicit)
    candidates = candidate_paths(package_dir)
    for path in candidates:
        if path.is_file():
            return path
    looked = "\n  ".join(str(path) for path in candidates)
    raise LibraryNotFound(
        "fsdpa: the shared library was not found. Build it (cmake -S . -B build && "
        "cmake --build build) or set FSDPA_LIBRARY to its path. Looked in:\n  " + looked
    )


def _declare(lib):
    c_char_p, c_int32, c_void_p, c_size_t = (
        ctypes.c_char_p, ctypes.c_int32, ctypes.c_void_p, ctypes.c_size_t)
    plan_pointer = c_void_p  # opaque fsdpa_plan*
    prototypes = {
        "fsdpa_options_init": (Options, []),
        # fsdpa_tensors are passed by address (ctypes.addressof), so that the
        # fast path can pass a buffer that holds one.
        "fsdpa_attention": (c_int32, [c_void_p, ctypes.POINTER(Options), c_void_p]),
        # The fast path's call: every argument a plain address (the layout,
        # the data, the optional views' data, the options, the stream), which
        # ctypes converts faster than a checked pointer.
        "fsdpa_attention_data": (
            c_int32, [c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                      c_void_p]),
        "fsdpa_plan_create": (
            c_int32, [c_void_p, ctypes.POINTER(Options), ctypes.POINTER(c_void_p)]),
        "fsdpa_plan_get_info": (c_int32, [plan_pointer, ctypes.POINTER(PlanInfo)]),
        "fsdpa_plan_explain": (c_char_p, [plan_pointer]),
        "fsdpa_run": (c_int32, [plan_pointer, c_void_p, c_void_p, c_size_t, c_void_p]),
        "fsdpa_plan_destroy": (None, [plan_pointer]),
        "fsdpa_support_matrix": (c_char_p, []),
        "fsdpa_plan_environment": (c_char_p, []),
        "fsdpa_backend_built": (c_int32, [c_int32]),
        "fsdpa_version": (c_char_p, []),
        "fsdpa_abi_version": (c_int32, []),
        "fsdpa_last_error": (c_char_p, []),
        "fsdpa_status_string": (c_char_p, [c_int32]),
    }
    for name, (restype, argtypes) in prototypes.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes


_lock = threading.Lock()
_lib = None
_lib_path = None


def library():
    """The loaded library (loaded on first use, so `import fsdpa` works
    before it is built)."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            for struct, size in STRUCT_SIZES.items():
                if ctypes.sizeof(struct) != size:
                    raise LibraryNotFound(
                        f"fsdpa: internal: ctypes struct {struct.__name__} is "
                        f"{ctypes.sizeof(struct)} bytes, c_api.h says {size}")
            path = find_library()
            try:
                lib = ctypes.CDLL(str(path))  # CDLL releases the GIL during calls
                _declare(lib)
            except (OSError, AttributeError) as error:
                raise LibraryNotFound(f"fsdpa: cannot load {path}: {error}") from error
            abi = lib.fsdpa_abi_version()
            if abi != ABI_VERSION:
                raise LibraryNotFound(
                    f"fsdpa: {path} has C ABI version {abi}, this wrapper needs {ABI_VERSION}; "
                    "rebuild the library or use the matching python/fsdpa")
            _lib, _lib_path = lib, path
    return _lib


_environment_names = None


def environment():
    """The values of the environment variables planning reads (the library
    names them), as a tuple: what a cached plan was made for."""
    global _environment_names
    if _environment_names is None:
        names = library().fsdpa_plan_environment().decode("ascii")
        _environment_names = tuple(names.split(","))
        if _environ_bytes is not None:
            _environment_names = tuple(name.encode() for name in _environment_names)
    return tuple(map(_getenv, _environment_names))


# os.environ.get decodes the name and the value at every call (about a
# microsecond each); on POSIX the bytes mapping underneath has the same
# content, so the fast path reads that.
_environ_bytes = getattr(os.environ, "_data", None) if os.name == "posix" else None
if not isinstance(_environ_bytes, dict):
    _environ_bytes = None
_getenv = _environ_bytes.get if _environ_bytes is not None else os.environ.get


def check(status):
    """Raises the exception for a nonzero status, with the library's message
    (thread-local in the library, read from the same thread)."""
    if status != OK:
        message = library().fsdpa_last_error().decode("utf-8", "replace")
        raise error_for_status(status, message)


# ------------------------------------------------------------------ torch binding
# The compiled torch binding (python/fsdpa/_torch_native.cpp, built where
# CMake finds torch): a Python extension module beside the library file,
# named for this interpreter (_torch_native + its extension suffix). It
# calls the library this module loaded, through the addresses of its
# functions. FSDPA_TORCH_NATIVE: "0" never loads it (the Python fast
# path runs), "1" requires it, unset loads it where it is.
_native_lock = threading.Lock()
_native_state = None  # (module or None,) once looked for


def torch_native():
    """The torch binding set up on the library, or None where there is none
    (or FSDPA_TORCH_NATIVE=0). Call only once torch is imported."""
    state = _native_state
    if state is None:
        state = _load_torch_native()
    return state[0]


def _load_torch_native():
    global _native_state
    with _native_lock:
        if _native_state is not None:
            return _native_state
        setting = os.environ.get("FSDPA_TORCH_NATIVE", "")
        if setting not in ("", "0", "1"):
            raise InvalidArgument(
                f"fsdpa: FSDPA_TORCH_NATIVE: expected 0 or 1 (or unset), got {setting!r}")
        module = None if setting == "0" else _import_torch_native(required=setting == "1")
        _native_state = (module,)
        return _native_state


def _import_torch_native(required):
    lib = library()
    path = _lib_path.parent / ("_torch_native" + importlib.machinery.EXTENSION_SUFFIXES[0])
    if not path.is_file():
        if required:
            raise LibraryNotFound(
                f"fsdpa: FSDPA_TORCH_NATIVE=1 but there is no {path} (the fsdpa_torch_native "
                "target, built where CMake finds torch)")
        return None
    try:
        spec = importlib.util.spec_from_file_location("fsdpa._torch_native", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        abi = module.abi_version()
        if abi != ABI_VERSION:
            raise ImportError(f"it has C ABI version {abi}, this wrapper needs {ABI_VERSION}")
    except ImportError as error:  # built for another torch or another library
        message = f"fsdpa: cannot load the torch binding {path}: {error}"
        if required:
            raise LibraryNotFound(message) from error
        warnings.warn(message + "; the Python path runs", RuntimeWarning, stacklevel=3)
        return None
    module.set_library(*(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                         for name in ("fsdpa_attention", "fsdpa_plan_create",
                                      "fsdpa_plan_get_info", "fsdpa_run",
                                      "fsdpa_plan_destroy")), check)
    return module
