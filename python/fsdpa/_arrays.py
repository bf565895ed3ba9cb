"""Arrays as fsdpa_tensor views (data pointer, dtype, device, sizes, strides
in elements): numpy arrays and torch tensors directly, any other object
through the DLPack protocol (__dlpack__ / __dlpack_device__: CuPy, JAX,
MLX, ...); and output allocation in the framework of the input. No framework
is imported unless the caller uses it."""

from __future__ import annotations

import ctypes
import sys

from . import _capi
from ._errors import InvalidArgument


def is_torch(value):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def is_numpy(value):
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.ndarray)


def _numpy_dtype_code(dtype):
    kind_and_size = (dtype.kind, dtype.itemsize)
    if kind_and_size == ("f", 2):
        return _capi.DTYPE_F16
    if kind_and_size == ("f", 4):
        return _capi.DTYPE_F32
    if kind_and_size == ("b", 1):
        return _capi.DTYPE_BOOL
    if kind_and_size == ("i", 4):
        return _capi.DTYPE_I32
    # ml_dtypes' bfloat16 (what JAX and others use): a 2-byte dtype named so.
    if dtype.name == "bfloat16" and dtype.itemsize == 2:
        return _capi.DTYPE_BF16
    return None


def _torch_dtype_code(dtype):
    torch = sys.modules["torch"]
    return {
        torch.float16: _capi.DTYPE_F16,
        torch.bfloat16: _capi.DTYPE_BF16,
        torch.float32: _capi.DTYPE_F32,
        torch.bool: _capi.DTYPE_BOOL,
        torch.int32: _capi.DTYPE_I32,
    }.get(dtype)


class View:
    """An fsdpa_tensor for one argument, holding a reference to the array (and
    to its DLPack capsule) so the memory outlives the call."""

    __slots__ = ("array", "struct", "device", "capsule")

    def __init__(self, array, struct, device, capsule=None):
        self.array = array
        self.struct = struct
        self.device = device  # ("cpu", 0) or ("cuda", index)
        self.capsule = capsule  # a DLPack capsule: its deleter runs when it is collected


def _fill(struct, sizes, strides, rank_at_least):
    sizes, strides = list(sizes), list(strides)
    if 0 in sizes:
        # An empty array addresses no memory, so its strides say nothing
        # (numpy reports 0 for all of them); give the contiguous ones, which
        # the library accepts for outputs too.
        stride = 1
        for d in reversed(range(len(sizes))):
            strides[d] = stride
            stride *= max(sizes[d], 1)
    # Lower-rank arrays (masks) broadcast numpy-style: leading dims of size 1.
    while len(sizes) < rank_at_least:
        sizes.insert(0, 1)
        strides.insert(0, 0)
    # A rank above 4 reaches the library, which names the expected rank.
    struct.rank = len(sizes)
    for d, (size, stride) in enumerate(zip(sizes[: _capi.MAX_RANK], strides[: _capi.MAX_RANK])):
        struct.sizes[d] = size
        struct.strides[d] = stride


def view(name, array, *, writable=False, rank_at_least=0):
    """The view of a numpy array or torch tensor. Raises TypeError for other
    objects and InvalidArgument for what the C ABI cannot express."""
    struct = _capi.Tensor()
    if is_numpy(array):
        code = _numpy_dtype_code(array.dtype)
        if code is None:
            raise InvalidArgument(
                f"fsdpa: {name}: numpy dtype {array.dtype} is not supported; use float16, "
                "float32, ml_dtypes.bfloat16 (bool for a mask, int32 for block_table and "
                "seq_lens_k)")
        if writable and not array.flags.writeable:
            raise InvalidArgument(f"fsdpa: {name}: the array is read-only")
        itemsize = array.itemsize
        strides = []
        for d, stride in enumerate(array.strides):
            if stride % itemsize != 0:
                raise InvalidArgument(
                    f"fsdpa: {name}: stride {stride} bytes of dim {d} is not a multiple of the "
                    f"element size {itemsize} bytes")
            strides.append(stride // itemsize)
        struct.data = data_pointer(array) or None
        struct.dtype = code
        struct.device_type = _capi.DEVICE_CPU
        struct.device_index = 0
        _fill(struct, array.shape, strides, rank_at_least)
        return View(array, struct, ("cpu", 0))
    if is_torch(array):
        code = _torch_dtype_code(array.dtype)
        if code is None:
            raise InvalidArgument(
                f"fsdpa: {name}: torch dtype {array.dtype} is not supported; use float16, "
                "bfloat16, float32 (bool for a mask, int32 for block_table and seq_lens_k)")
        device = array.device
        if device.type == "cpu":
            struct.device_type, index = _capi.DEVICE_CPU, 0
        elif device.type == "cuda":
            torch = sys.modules["torch"]
            index = device.index if device.index is not None else torch.cuda.current_device()
            struct.device_type = _capi.DEVICE_CUDA
        else:
            raise InvalidArgument(
                f"fsdpa: {name}: torch device {device} is not supported; use cpu or cuda")
        struct.device_index = index
        struct.data = data_pointer(array) or None
        struct.dtype = code
        _fill(struct, array.shape, array.stride(), rank_at_least)
        return View(array, struct, (device.type, index))
    if hasattr(array, "__dlpack__") and hasattr(array, "__dlpack_device__"):
        return _dlpack_view(name, array, struct, writable, rank_at_least)
    raise TypeError(
        f"fsdpa: {name}: expected a numpy.ndarray, a torch.Tensor or an object with "
        f"__dlpack__ and __dlpack_device__, got {type(array).__module__}.{type(array).__qualname__}")


# ------------------------------------------------------------------ DLPack
# The structs of dlpack.h (v0.8 and v1.x): a capsule named "dltensor" holds a
# DLManagedTensor, one named "dltensor_versioned" a DLManagedTensorVersioned.

_DL_CPU, _DL_CUDA = 1, 2
_DL_FLAG_READ_ONLY = 1
_DL_DTYPES = {(2, 16): _capi.DTYPE_F16, (4, 16): _capi.DTYPE_BF16, (2, 32): _capi.DTYPE_F32,
              (6, 8): _capi.DTYPE_BOOL, (0, 32): _capi.DTYPE_I32}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_capsule_api = ctypes.pythonapi
_capsule_api.PyCapsule_IsValid.restype = ctypes.c_int
_capsule_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_capsule_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _dlpack_stream(array, device_type):
    """The stream argument of __dlpack__: None on the CPU; on CUDA the stream
    fsdpa launches on (CuPy's current one for CuPy arrays, else the legacy
    default stream, which DLPack numbers 1)."""
    if device_type != _DL_CUDA:
        return None
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(array, cupy.ndarray):
        return cupy.cuda.get_current_stream().ptr or 1
    return 1


def _dlpack_view(name, array, struct, writable, rank_at_least):
    device_type, device_id = (int(x) for x in array.__dlpack_device__())
    if device_type not in (_DL_CPU, _DL_CUDA):
        raise InvalidArgument(
            f"fsdpa: {name}: DLPack device type {device_type} is not supported; use the CPU (1) "
            "or CUDA (2)")
    stream = _dlpack_stream(array, device_type)
    try:
        capsule = array.__dlpack__(stream=stream, max_version=(1, 0))
    except TypeError:  # a producer of the protocol before max_version
        capsule = array.__dlpack__(stream=stream)
    if _capsule_api.PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        managed = _DLManagedTensorVersioned.from_address(
            _capsule_api.PyCapsule_GetPointer(capsule, b"dltensor_versioned"))
        if writable and managed.flags & _DL_FLAG_READ_ONLY:
            raise InvalidArgument(f"fsdpa: {name}: the array is read-only (DLPack flag)")
    elif _capsule_api.PyCapsule_IsValid(capsule, b"dltensor"):
        managed = _DLManagedTensor.from_address(
            _capsule_api.PyCapsule_GetPointer(capsule, b"dltensor"))
    else:
        raise InvalidArgument(f"fsdpa: {name}: __dlpack__ did not return a DLPack capsule")
    t = managed.dl_tensor
    dtype = (t.dtype.code, t.dtype.bits)
    if t.dtype.lanes != 1 or dtype not in _DL_DTYPES:
        raise InvalidArgument(
            f"fsdpa: {name}: DLPack dtype (code {t.dtype.code}, {t.dtype.bits} bits, "
            f"{t.dtype.lanes} lanes) is not supported; use float16, bfloat16, float32 "
            "(bool for a mask, int32 for block_table and seq_lens_k)")
    shape = [t.shape[d] for d in range(t.ndim)]
    if t.strides:
        strides = [t.strides[d] for d in range(t.ndim)]
    else:  # compact row-major
        strides, stride = [0] * t.ndim, 1
        for d in reversed(range(t.ndim)):
            strides[d] = stride
            stride *= shape[d]
    struct.data = ((t.data or 0) + t.byte_offset) or None
    struct.dtype = _DL_DTYPES[dtype]
    struct.device_type = _capi.DEVICE_CPU if device_type == _DL_CPU else _capi.DEVICE_CUDA
    struct.device_index = 0 if device_type == _DL_CPU else device_id
    _fill(struct, shape, strides, rank_at_least)
    device = ("cpu", 0) if device_type == _DL_CPU else ("cuda", device_id)
    return View(array, struct, device, capsule)


def _framework(array):
    """The top-level module of the array's type (numpy, torch, cupy, jax, ...)."""
    return sys.modules.get(type(array).__module__.partition(".")[0])


def _from_dlpack_function(framework):
    for owner in (framework, getattr(framework, "dlpack", None), getattr(framework, "numpy", None)):
        function = getattr(owner, "from_dlpack", None)
        if callable(function):
            return function
    return None


def in_framework_of(like, buffer):
    """`buffer` (an output allocated by empty_like_kind) as an array of like's
    framework: itself for numpy, torch and CuPy, else through that
    framework's from_dlpack (the buffer itself when it has none)."""
    if is_numpy(like) or is_torch(like) or _is_cupy(like):
        return buffer
    function = _from_dlpack_function(_framework(like))
    return function(buffer) if function is not None else buffer


def _is_cupy(value):
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(value, cupy.ndarray)


_NUMPY_DTYPE_OF = {_capi.DTYPE_F16: "float16", _capi.DTYPE_F32: "float32",
                   _capi.DTYPE_BOOL: "bool"}


def _numpy_dtype(code):
    numpy = __import__("numpy")
    if code == _capi.DTYPE_BF16:
        try:
            import ml_dtypes  # noqa: PLC0415 (only needed for bfloat16 on the CPU)
        except ImportError:
            raise InvalidArgument(
                "fsdpa: out: a bfloat16 output on the CPU needs ml_dtypes (or pass out=)") from None
        return numpy.dtype(ml_dtypes.bfloat16)
    return numpy.dtype(_NUMPY_DTYPE_OF[code])


def empty_like_kind(like, shape, float32=False, like_view=None):
    """An uninitialized array of `shape` from the framework of `like`, on its
    device, with like's dtype or float32: numpy, torch and CuPy allocate their
    own; for another DLPack producer the buffer is numpy's on the CPU and
    CuPy's or torch's on CUDA, which in_framework_of() converts after the run."""
    if is_torch(like):
        torch = sys.modules["torch"]
        dtype = torch.float32 if float32 else like.dtype
        return torch.empty(shape, dtype=dtype, device=like.device)
    if is_numpy(like):
        numpy = sys.modules["numpy"]
        dtype = numpy.float32 if float32 else like.dtype
        return numpy.empty(shape, dtype=dtype)
    # A DLPack producer: its view says the dtype and the device.
    code = _capi.DTYPE_F32 if float32 else like_view.struct.dtype
    kind, index = like_view.device
    if kind == "cpu":
        return __import__("numpy").empty(shape, dtype=_numpy_dtype(code))
    cupy = sys.modules.get("cupy")
    if cupy is not None and code != _capi.DTYPE_BF16:  # CuPy has no bfloat16
        with cupy.cuda.Device(index):
            return cupy.empty(shape, dtype=_NUMPY_DTYPE_OF[code])
    torch = sys.modules.get("torch")
    if torch is not None:
        dtypes = {_capi.DTYPE_F16: torch.float16, _capi.DTYPE_BF16: torch.bfloat16,
                  _capi.DTYPE_F32: torch.float32}
        return torch.empty(shape, dtype=dtypes[code], device=f"cuda:{index}")
    raise InvalidArgument(
        f"fsdpa: out: cannot allocate a CUDA output for a {type(like).__module__} array without "
        "CuPy or torch imported; pass out=")


def empty_bytes_like_kind(like, count, like_view=None):
    """`count` uninitialized bytes on the device of `like`."""
    if is_torch(like):
        torch = sys.modules["torch"]
        return torch.empty(count, dtype=torch.uint8, device=like.device)
    if like_view is not None and like_view.device[0] == "cuda":
        return empty_like_kind(like, (count // 4 + 1,), float32=True, like_view=like_view)
    return __import__("numpy").empty(count, dtype="uint8")


def data_pointer(array):
    """The address of the first element of a numpy array, torch tensor or
    CuPy array."""
    if is_torch(array):
        return array.data_ptr()
    if _is_cupy(array):
        return array.data.ptr
    return array.ctypes.data


def current_stream(view_of_q):
    """The stream to launch on: torch's current stream for torch CUDA tensors,
    CuPy's for CuPy arrays, the legacy default stream (None) for other CUDA
    arrays, and None on the CPU (which takes no stream)."""
    kind, index = view_of_q.device
    if kind != "cuda":
        return None
    if is_torch(view_of_q.array):
        return torch_stream(index)
    if _is_cupy(view_of_q.array):
        return sys.modules["cupy"].cuda.get_current_stream().ptr or None
    return None


def stream_of(array):
    """current_stream() for a numpy array or torch tensor (the fast path):
    torch's raw current stream where torch exposes it (a stream object costs
    microseconds to make), else through torch.cuda.current_stream."""
    if is_torch(array) and array.is_cuda:
        return torch_stream(array.get_device())
    return None


def torch_stream(index):
    """torch's current stream on CUDA device `index` as an address (None for
    the legacy default stream): the raw one where torch exposes it (a stream
    object costs microseconds to make)."""
    torch = sys.modules["torch"]
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(index) or None
    return torch.cuda.current_stream(index).cuda_stream or None
