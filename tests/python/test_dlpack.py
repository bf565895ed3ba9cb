"""Objects that are neither numpy arrays nor torch tensors, through the
DLPack protocol: their views, the output in their framework, and the errors."""

import sys

import numpy as np
import pytest

import fsdpa
from fsdpa_testing import assert_close, reference


class Producer:
    """A minimal DLPack producer over a numpy array, as a third framework
    would be (its module, this one, has from_dlpack)."""

    def __init__(self, array, versioned=False, read_only=False):
        self.array = array
        self.versioned = versioned
        self.read_only = read_only
        self.calls = []

    @property
    def shape(self):
        return self.array.shape

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()

    def __dlpack__(self, stream=None, max_version=None):
        self.calls.append((stream, max_version))
        if not self.versioned:
            if max_version is not None:
                raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
            return self.array.__dlpack__(stream=stream)
        return _versioned_capsule(self.array, self.read_only)


def from_dlpack(buffer):
    """This test module plays the framework: its arrays come back as Producers."""
    return Producer(np.from_dlpack(buffer))


def _versioned_capsule(array, read_only):
    """A DLPack 1.0 capsule over a numpy array (numpy 1.24 makes only the
    unversioned kind), with the read-only flag as asked."""
    import ctypes

    from fsdpa import _arrays

    legacy = array.__dlpack__()
    managed_legacy = _arrays._DLManagedTensor.from_address(
        _arrays._capsule_api.PyCapsule_GetPointer(legacy, b"dltensor"))
    versioned = _arrays._DLManagedTensorVersioned()
    versioned.major, versioned.minor = 1, 0
    versioned.flags = 1 if read_only else 0
    versioned.dl_tensor = managed_legacy.dl_tensor
    _keep.append((legacy, versioned, array))  # the test process owns them
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new_capsule(ctypes.addressof(versioned), b"dltensor_versioned", None)


_keep = []


@pytest.mark.parametrize("versioned", [False, True])
def test_producers_run_and_the_output_comes_back_in_their_framework(rng, versioned):
    q = rng.standard_normal((2, 4, 9, 24)).astype(np.float32)
    k = rng.standard_normal((2, 2, 13, 24)).astype(np.float32)
    v = rng.standard_normal((2, 2, 13, 16)).astype(np.float32)[:, :, :, ::1]
    sinks = rng.standard_normal(4).astype(np.float32)
    producers = [Producer(x, versioned) for x in (q, k, v)]
    out, lse = fsdpa.attention(*producers, causal=True, sinks=Producer(sinks, versioned),
                               return_lse=True)
    assert isinstance(out, Producer) and isinstance(lse, Producer)
    assert out.array.shape == (2, 4, 9, 16) and lse.array.dtype == np.float32
    want, want_lse = reference(q, k, v, causal=True, sinks=sinks)
    assert_close(out.array, want, lse.array, want_lse)
    for p in producers:
        assert p.calls[-1][0] is None  # no stream on the CPU
        assert p.calls[0][1] == (1, 0)  # asked for DLPack 1.0 first


def test_strided_producer_views(rng):
    base = rng.standard_normal((2, 11, 4, 16)).astype(np.float32)
    q = base.transpose(0, 2, 1, 3)  # BSHD storage, BHSD view: non-compact strides
    out = np.full((2, 4, 11, 16), np.nan, np.float32)
    assert fsdpa.attention(Producer(q), Producer(q), Producer(q), out=Producer(out)) is not None
    want, _ = reference(q, q, q)
    assert_close(out, want)


def test_read_only_output_is_refused(rng):
    q = rng.standard_normal((1, 1, 2, 8)).astype(np.float32)
    out = Producer(np.zeros_like(q), versioned=True, read_only=True)
    with pytest.raises(fsdpa.InvalidArgument,
                       match=r"^fsdpa: out: the array is read-only \(DLPack flag\)$"):
        fsdpa.attention(q, q, q, out=out)


def test_unsupported_dlpack_dtype_is_named(rng):
    q = rng.standard_normal((1, 1, 2, 8)).astype(np.float32)
    with pytest.raises(fsdpa.InvalidArgument,
                       match=r"^fsdpa: k: DLPack dtype \(code 2, 64 bits, 1 lanes\) is not "):
        fsdpa.attention(q, Producer(q.astype(np.float64)), q)


def test_a_foreign_object_without_the_protocol_is_a_type_error():
    class NotAnArray:
        __dlpack_device__ = None  # only one of the two methods

    with pytest.raises(TypeError, match="^fsdpa: q: expected a numpy.ndarray"):
        fsdpa.attention(NotAnArray(), None, None)


def test_this_module_is_the_framework():
    assert sys.modules[Producer.__module__].from_dlpack is from_dlpack
