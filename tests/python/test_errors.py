"""Errors: the library's messages, unchanged, as the right exception types;
the wrapper's own checks; nothing written on failure."""

import ctypes
import re

import numpy as np
import pytest

import fsdpa
from fsdpa import _arrays, _capi
from fsdpa_testing import randn


def test_exception_hierarchy():
    assert issubclass(fsdpa.InvalidArgument, fsdpa.Error)
    assert issubclass(fsdpa.InvalidArgument, ValueError)
    assert issubclass(fsdpa.Unsupported, fsdpa.Error)
    assert issubclass(fsdpa.Unsupported, NotImplementedError)
    assert issubclass(fsdpa.DeviceError, fsdpa.Error)
    assert issubclass(fsdpa.DeviceError, RuntimeError)
    assert issubclass(fsdpa.InternalError, RuntimeError)
    assert issubclass(fsdpa.LibraryNotFound, OSError)
    assert issubclass(fsdpa.Error, Exception)


def test_status_codes_map_to_types():
    from fsdpa._errors import error_for_status

    for status, cls in [(1, fsdpa.InvalidArgument), (2, fsdpa.Unsupported),
                        (3, fsdpa.DeviceError), (4, fsdpa.InternalError),
                        (99, fsdpa.InternalError)]:
        error = error_for_status(status, "fsdpa: text")
        assert type(error) is cls and error.status == status and str(error) == "fsdpa: text"


@pytest.fixture
def inputs(rng):
    return {"q": randn(rng, (1, 4, 5, 8)), "k": randn(rng, (1, 2, 7, 8)),
            "v": randn(rng, (1, 2, 7, 8))}


def exact(message):
    return "^" + re.escape(message) + "$"


# (arguments to change, exception, exact message). Messages starting with
# "fsdpa: " come from the C++ validation through the C ABI, except the few
# the wrapper checks itself (marked).
LIBRARY_ERRORS = [
    ({"k": (1, 3, 7, 8), "v": (1, 3, 7, 8)},
     "fsdpa: heads: heads_q=4 is not a multiple of heads_kv=3"),
    ({"k": (1, 2, 7, 6)},
     "fsdpa: k: size 3 (head_dim_qk) is 6, expected 8 (q's head_dim_qk)"),
    ({"v": (1, 2, 6, 8)}, "fsdpa: v: size 2 (len_k) is 6, expected 7 (k's len_k)"),
    ({"v": (2, 2, 7, 8)}, "fsdpa: v: size 0 (batch) is 2, expected 1 (q's batch)"),
    ({"q": (4, 5, 8)}, "fsdpa: q: expected rank 4 [B, Hq, Lq, Dqk], got rank 3"),
    ({"k": (1, 1, 2, 7, 8)}, "fsdpa: k: expected rank 4 [B, Hkv, Lk, Dqk], got rank 5"),
]


@pytest.mark.parametrize("shapes,message", LIBRARY_ERRORS)
def test_shape_errors(rng, inputs, shapes, message):
    for name, shape in shapes.items():
        inputs[name] = randn(rng, shape)
    with pytest.raises(fsdpa.InvalidArgument, match=exact(message)) as error:
        fsdpa.attention(inputs["q"], inputs["k"], inputs["v"])
    assert isinstance(error.value, ValueError) and error.value.status == 1
    with pytest.raises(fsdpa.InvalidArgument, match=exact(message)):
        fsdpa.plan(inputs["q"], inputs["k"], inputs["v"])


OPTION_ERRORS = [
    ({"scale": -1.0}, "fsdpa: scale: expected a finite value > 0, got -1"),
    ({"scale": 0}, "fsdpa: scale: expected a finite value > 0, got 0"),
    ({"scale": float("nan")}, "fsdpa: scale: expected a finite value > 0, got nan"),
    ({"scale": float("inf")}, "fsdpa: scale: expected a finite value > 0, got inf"),
    ({"window_left": -1}, "fsdpa: window_left: expected >= 0, got -1"),
    ({"scale": 1e39}, "fsdpa: scale: 1e+39 times log2(e) overflows float32; at most 2.35866e+38"),
    ({"softcap": -1.0}, "fsdpa: softcap: expected a finite value >= 0 (0: none), got -1"),
    ({"softcap": float("inf")}, "fsdpa: softcap: expected a finite value >= 0 (0: none), got inf"),
    # The wrapper's own checks:
    ({"scale": "big"}, "fsdpa: scale: expected a number, got 'big'"),
    ({"window_left": 2.5}, "fsdpa: window_left: expected an integer, got 2.5"),
    ({"softcap": "50"}, "fsdpa: softcap: expected a number, got '50'"),
    ({"causal": "top_left"},
     "fsdpa: causal: expected a bool, got 'top_left' (the alignment is causal_align)"),
    ({"causal": 1}, "fsdpa: causal: expected a bool, got 1 (the alignment is causal_align)"),
    ({"softcap": True}, "fsdpa: softcap: expected a number, got True"),
    ({"allow_tf32": 1}, "fsdpa: allow_tf32: expected a bool, got 1"),
    ({"return_lse": "yes"}, "fsdpa: return_lse: expected a bool, got 'yes'"),
    ({"return_lse": 0}, "fsdpa: return_lse: expected a bool, got 0"),
    ({"window_left": 2**70}, f"fsdpa: window_left: {2**70} does not fit in 64 bits"),
    ({"causal_align": "diagonal"},
     "fsdpa: causal_align: expected 'bottom_right' or 'top_left', got 'diagonal'"),
    ({"policy": "fast"}, "fsdpa: policy: expected 'auto', 'fused', 'unfused' or None, got 'fast'"),
    ({"policy": 1}, "fsdpa: policy: expected 'auto', 'fused', 'unfused' or None, got 1"),
    ({"policy": "Auto"}, "fsdpa: policy: expected 'auto', 'fused', 'unfused' or None, got 'Auto'"),
]


@pytest.mark.parametrize("options,message", OPTION_ERRORS)
def test_option_errors(inputs, options, message):
    # Twice: the second call would hit the cache entry of an accepted call.
    fsdpa.attention(inputs["q"], inputs["k"], inputs["v"])
    for _ in range(2):
        with pytest.raises(fsdpa.InvalidArgument, match=exact(message)):
            fsdpa.attention(inputs["q"], inputs["k"], inputs["v"], **options)
    with pytest.raises(fsdpa.InvalidArgument, match=exact(message)):
        fsdpa.plan(inputs["q"], inputs["k"], inputs["v"], **options)


def test_dtype_errors(inputs):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    with pytest.raises(fsdpa.InvalidArgument,
                       match=exact("fsdpa: k: dtype f16 differs from q's dtype f32")):
        fsdpa.attention(q, k.astype(np.float16), v)
    with pytest.raises(fsdpa.InvalidArgument,
                       match=exact("fsdpa: q: dtype bool is not supported; use f16, bf16 or f32")):
        fsdpa.attention(q > 0, k > 0, v > 0)
    with pytest.raises(fsdpa.InvalidArgument,
                       match=r"^fsdpa: q: numpy dtype float64 is not supported; use float16, "):
        fsdpa.attention(q.astype(np.float64), k, v)
    with pytest.raises(fsdpa.InvalidArgument, match=r"^fsdpa: v: numpy dtype int64 is not"):
        fsdpa.attention(q, k, v.astype(np.int64))
    with pytest.raises(fsdpa.InvalidArgument,
                       match=exact("fsdpa: v: dtype i32 differs from q's dtype f32")):
        fsdpa.attention(q, k, v.astype(np.int32))
    with pytest.raises(fsdpa.InvalidArgument,
                       match=exact("fsdpa: sinks: dtype must be f32, got f16")):
        fsdpa.attention(q, k, v, sinks=np.zeros(4, dtype=np.float16))


def test_not_an_array(inputs):
    with pytest.raises(TypeError, match=exact(
            "fsdpa: q: expected a numpy.ndarray, a torch.Tensor or an object with __dlpack__ and "
            "__dlpack_device__, got builtins.list")):
        fsdpa.attention(inputs["q"].tolist(), inputs["k"], inputs["v"])
    with pytest.raises(TypeError, match="fsdpa: sinks: expected a numpy.ndarray"):
        fsdpa.attention(inputs["q"], inputs["k"], inputs["v"], sinks=[0.0] * 4)


def test_mask_and_sinks_errors(rng, inputs):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    with pytest.raises(fsdpa.InvalidArgument, match=exact(
            "fsdpa: mask: size 2 (len_q) is 3, expected 1 or 5 (q's len_q); the mask must "
            "broadcast to [B, Hq, Lq, Lk]")):
        fsdpa.attention(q, k, v, mask=np.ones((1, 1, 3, 7), dtype=bool))
    with pytest.raises(fsdpa.InvalidArgument, match=exact(
            "fsdpa: mask: size 1 (heads) is 2, expected 1 or 4 (q's heads_q); the mask must "
            "broadcast to [B, Hq, Lq, Lk]")):
        fsdpa.attention(q, k, v, mask=np.ones((2, 5, 7), dtype=bool))
    with pytest.raises(fsdpa.InvalidArgument,
                       match=exact("fsdpa: mask: expected rank 4 [B|1, Hq|1, Lq, Lk], got rank 5")):
        fsdpa.attention(q, k, v, mask=np.ones((1, 1, 1, 5, 7), dtype=bool))
    with pytest.raises(fsdpa.InvalidArgument,
                       match=exact("fsdpa: sinks: length is 3, expected heads_q=4")):
        fsdpa.attention(q, k, v, sinks=np.zeros(3, dtype=np.float32))
    with pytest.raises(fsdpa.InvalidArgument,
                       match=exact("fsdpa: sinks: expected rank 1 [Hq], got rank 2")):
        fsdpa.attention(q, k, v, sinks=np.zeros((1, 4), dtype=np.float32))


def test_stride_errors(inputs):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    with pytest.raises(fsdpa.InvalidArgument, match=exact(
            "fsdpa: q: stride 3 is -1; negative strides are not supported")):
        fsdpa.attention(q[..., ::-1], k, v)
    buffer = np.zeros(4096, dtype=np.uint8)
    odd = np.ndarray((1, 4, 5, 8), dtype=np.float32, buffer=buffer, strides=(640, 160, 30, 2))
    with pytest.raises(fsdpa.InvalidArgument, match=exact(
            "fsdpa: q: stride 30 bytes of dim 2 is not a multiple of the element size 4 bytes")):
        fsdpa.attention(odd, k, v)


def test_out_errors_leave_out_untouched(inputs):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    out = np.full((1, 4, 5, 8), np.nan, dtype=np.float32)
    cases = [
        ({"out": out, "scale": -2.0}, "fsdpa: scale: expected a finite value > 0, got -2"),
        ({"out": out, "sinks": np.zeros(2, np.float32)},
         "fsdpa: sinks: length is 2, expected heads_q=4"),
        ({"out": out, "mask": np.ones((1, 1, 5, 6), bool)},
         "fsdpa: mask: size 3 (len_k) is 6, expected 1 or 7 (k's len_k); the mask must "
         "broadcast to [B, Hq, Lq, Lk]"),
        ({"out": out, "policy": "sometimes"},
         "fsdpa: policy: expected 'auto', 'fused', 'unfused' or None, got 'sometimes'"),
    ]
    for options, message in cases:
        with pytest.raises(fsdpa.InvalidArgument, match=exact(message)):
            fsdpa.attention(q, k, v, **options)
        assert np.isnan(out).all()
    with pytest.raises(fsdpa.InvalidArgument, match=exact(
            "fsdpa: out: size 3 (head_dim_v) is 4, expected 8 (v's head_dim_v)")):
        fsdpa.attention(q, k, v, out=np.zeros((1, 4, 5, 4), np.float32))
    with pytest.raises(fsdpa.InvalidArgument,
                       match=exact("fsdpa: out: dtype f16 differs from q's dtype f32")):
        fsdpa.attention(q, k, v, out=np.zeros((1, 4, 5, 8), np.float16))
    with pytest.raises(fsdpa.InvalidArgument,
                       match=exact("fsdpa: out: overlaps the memory of q; outputs must not alias "
                                   "inputs")):
        fsdpa.attention(q, k, v, out=q)
    read_only = np.zeros((1, 4, 5, 8), np.float32)
    read_only.flags.writeable = False
    with pytest.raises(fsdpa.InvalidArgument, match=exact("fsdpa: out: the array is read-only")):
        fsdpa.attention(q, k, v, out=read_only)
    broadcast = np.lib.stride_tricks.as_strided(np.zeros(8, np.float32), (1, 4, 5, 8),
                                                (0, 0, 0, 4))
    with pytest.raises(fsdpa.InvalidArgument, match=exact(
            "fsdpa: out: stride 1 is 0 with size 4; an output cannot be broadcast")):
        fsdpa.attention(q, k, v, out=broadcast)


def _cuda_labelled_call(rng, head_dim):
    """fsdpa_tensors over host arrays labelled as CUDA memory. Planning reads
    no data, so this is safe for fsdpa_plan_create only."""
    arrays = [randn(rng, (1, 1, 1, head_dim)), randn(rng, (1, 1, 2, head_dim)),
              randn(rng, (1, 1, 2, head_dim)), np.empty((1, 1, 1, head_dim), np.float32)]
    views = [_arrays.view(name, a) for name, a in zip(("q", "k", "v", "out"), arrays)]
    for view in views:
        view.struct.device_type = _capi.DEVICE_CUDA
    return views, _capi.Tensors(*(view.struct for view in views))


def test_unsupported(rng):
    lib = _capi.library()
    views, tensors = _cuda_labelled_call(rng, 1040)
    options = _capi.Options()
    options.policy = _capi.POLICY_FUSED
    handle = ctypes.c_void_p()
    status = lib.fsdpa_plan_create(ctypes.byref(tensors), ctypes.byref(options),
                                   ctypes.byref(handle))
    if fsdpa.backend_built("cuda") and status == 3:
        # A fused CUDA row may read the device's properties before it
        # declines: without a GPU that is a DeviceError.
        with pytest.raises(fsdpa.DeviceError, match=r"^fsdpa: CUDA") as error:
            _capi.check(status)
        assert isinstance(error.value, RuntimeError)
        return
    with pytest.raises(fsdpa.Unsupported) as error:
        _capi.check(status)
    assert isinstance(error.value, NotImplementedError) and error.value.status == 2
    if fsdpa.backend_built("cuda"):
        assert str(error.value).startswith("fsdpa: no fused kernel")
    else:
        assert str(error.value) == ("fsdpa: no kernel: backend cuda is not built into this "
                                    "library (configure with FSDPA_CUDA=ON and nvcc)")
    assert not handle.value
    del views


def test_error_messages_are_per_thread(inputs):
    # The library's last error is thread-local; each thread raises its own.
    from concurrent.futures import ThreadPoolExecutor

    q, k, v = inputs["q"], inputs["k"], inputs["v"]

    def fail(scale):
        try:
            fsdpa.attention(q, k, v, scale=-scale)
        except fsdpa.InvalidArgument as error:
            return str(error)
        return None

    scales = list(range(1, 65))
    with ThreadPoolExecutor(max_workers=8) as pool:
        messages = list(pool.map(fail, scales))
    assert messages == [f"fsdpa: scale: expected a finite value > 0, got -{s}" for s in scales]
