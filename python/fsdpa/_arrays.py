"""numpy arrays and torch tensors as fsdpa_tensor views (data pointer, dtype,
device, sizes, strides in elements), and output allocation with the library
of the input. Neither numpy nor torch is imported unless the caller uses it."""

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
    }.get(dtype)


class View:
    """An fsdpa_tensor for one argument, holding a reference to the array so
    the memory outlives the call."""

    def __init__(self, array, struct, device):
        self.array = array
        self.struct = struct
        self.device = device  # ("cpu", 0) or ("cuda", index)


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
                "float32, ml_dtypes.bfloat16 (or bool for a mask)")
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
                "bfloat16, float32 (or bool for a mask)")
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
    raise TypeError(
        f"fsdpa: {name}: expected a numpy.ndarray or a torch.Tensor, got "
        f"{type(array).__module__}.{type(array).__qualname__}")


def empty_like_kind(like, shape, float32=False):
    """An uninitialized array of `shape` from the library of `like` (numpy or
    torch, on like's device), with like's dtype, or float32."""
    if is_torch(like):
        torch = sys.modules["torch"]
        dtype = torch.float32 if float32 else like.dtype
        return torch.empty(shape, dtype=dtype, device=like.device)
    numpy = sys.modules["numpy"]
    dtype = numpy.float32 if float32 else like.dtype
    return numpy.empty(shape, dtype=dtype)


def empty_bytes_like_kind(like, count):
    """`count` uninitialized bytes from the library and device of `like`."""
    if is_torch(like):
        torch = sys.modules["torch"]
        return torch.empty(count, dtype=torch.uint8, device=like.device)
    return sys.modules["numpy"].empty(count, dtype=sys.modules["numpy"].uint8)


def data_pointer(array):
    """The address of the first element of a numpy array or torch tensor."""
    if is_torch(array):
        return array.data_ptr()
    return array.__array_interface__["data"][0]


def current_stream(view_of_q):
    """The stream to launch on: torch's current stream for CUDA tensors, else
    None (the CPU takes no stream)."""
    kind, index = view_of_q.device
    if kind == "cuda" and is_torch(view_of_q.array):
        torch = sys.modules["torch"]
        return torch.cuda.current_stream(index).cuda_stream or None
    return None
