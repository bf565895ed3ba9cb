"""The compiled torch binding (python/fsdpa/_torch_native.cpp) on CPU
tensors: what it serves it serves right, what it hands back the Python path
serves, and its errors are the library's. Skipped without torch or without
the binding, unless FSDPA_TORCH_NATIVE=1 (CMake sets it where it built the
binding), under which a missing binding fails."""

import numpy as np
import pytest

import fsdpa
from fsdpa import _api, _capi
from fsdpa._errors import InvalidArgument, LibraryNotFound
from fsdpa_testing import assert_close, reference, relative_error, spy_on_torch_binding

torch = pytest.importorskip("torch")

if _capi.torch_native() is None:
    pytest.skip("no torch binding beside the library", allow_module_level=True)


@pytest.fixture
def spy(monkeypatch):
    return spy_on_torch_binding(monkeypatch)


@pytest.fixture
def generator(rng):
    return torch.Generator().manual_seed(int(rng.integers(2**62)))


def as_numpy(t):
    return t.detach().to(torch.float32).numpy()


def randn(generator, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=generator).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_serves_every_semantic(spy, generator, dtype):
    q = randn(generator, 2, 4, 9, 40, dtype=dtype)
    k = randn(generator, 2, 2, 17, 40, dtype=dtype)
    v = randn(generator, 2, 2, 17, 24, dtype=dtype)
    sinks = randn(generator, 4)
    mask = torch.rand(9, 17, generator=generator) < 0.7  # rank 2: broadcast
    cases = [dict(), dict(causal=True), dict(causal=True, causal_align="top_left"),
             dict(window_left=3, causal=True), dict(scale=0.3), dict(softcap=4.0),
             dict(mask=mask), dict(sinks=sinks), dict(mask=mask, sinks=sinks, causal=True)]
    for kwargs in cases:
        out, lse = fsdpa.attention(q, k, v, return_lse=True, **kwargs)
        assert out.dtype == dtype and out.shape == (2, 4, 9, 24) and out.is_contiguous()
        assert lse.dtype == torch.float32 and lse.shape == (2, 4, 9)
        want = {name: (value.numpy() if isinstance(value, torch.Tensor) else value)
                for name, value in kwargs.items()}
        want_out, want_lse = reference(as_numpy(q), as_numpy(k), as_numpy(v), **want)
        if dtype == torch.bfloat16:  # no numpy dtype: the output's error alone
            assert relative_error(out.to(torch.float64).numpy(), want_out) <= 1e-2
        else:
            assert_close(out.numpy(), want_out, lse.numpy(), want_lse)
    assert spy.served == len(cases) and spy.handed_back == 0


def test_strided_views_and_a_given_out(spy, generator):
    # BSHD tensors seen as BHSD: the strides reach the library as they are.
    q = randn(generator, 1, 7, 4, 32).transpose(1, 2)
    k = randn(generator, 1, 13, 2, 32).transpose(1, 2)
    v = randn(generator, 1, 13, 2, 32).transpose(1, 2)
    out = torch.full((1, 7, 4, 32), float("nan")).transpose(1, 2)
    got = fsdpa.attention(q, k, v, out=out, causal=True)
    assert got is out
    assert_close(as_numpy(out), reference(as_numpy(q), as_numpy(k), as_numpy(v), causal=True)[0])
    assert spy.served == 1


def test_repeated_calls_read_the_new_data(spy, generator):
    entries = len(_api._plans)
    for _ in range(3):
        q, k, v = (randn(generator, 1, 2, 3, 16) for _ in range(3))
        out = fsdpa.attention(q, k, v)
        assert_close(as_numpy(out), reference(as_numpy(q), as_numpy(k), as_numpy(v))[0])
    assert spy.served == 3
    assert len(_api._plans) == entries  # no key, no entry: the library's plan cache serves it


def test_hands_back_what_the_python_path_serves(spy, generator):
    q = randn(generator, 1, 2, 3, 16)
    empty = torch.empty(1, 2, 0, 16)
    out = fsdpa.attention(q, empty, empty)  # no keys: zeros
    assert torch.equal(out, torch.zeros(1, 2, 3, 16))
    assert spy.handed_back == 1 and spy.served == 0


@pytest.mark.parametrize("q_shape, message", [
    ((2, 3, 16), "q"),  # rank 3: the Python path names it
])
def test_handed_back_errors_are_the_python_paths(spy, generator, q_shape, message):
    q = randn(generator, *q_shape)
    k = randn(generator, 1, 2, 3, 16)
    with pytest.raises(InvalidArgument, match=message):
        fsdpa.attention(q, k, k)
    assert spy.served == 0


def test_unsupported_dtype_is_the_python_paths_error(spy, generator):
    q = randn(generator, 1, 2, 3, 16).to(torch.float64)
    with pytest.raises(InvalidArgument, match="torch dtype torch.float64 is not supported"):
        fsdpa.attention(q, q, q)
    assert spy.handed_back == 1


def test_library_errors_raise_through_check(spy, generator):
    q = randn(generator, 1, 2, 3, 16)
    k = randn(generator, 1, 2, 5, 8)  # Dqk differs from q's
    with pytest.raises(InvalidArgument, match="fsdpa: "):
        fsdpa.attention(q, k, k)
    assert spy.served == 0 and spy.handed_back == 0
    with pytest.raises(InvalidArgument, match="scale"):
        fsdpa.attention(q, q, q, scale=-1.0)


def test_threads_share_the_binding(generator):
    import concurrent.futures

    inputs = [tuple(randn(generator, 1, 4, 5, 32) for _ in range(3)) for _ in range(16)]

    def run(qkv):
        return fsdpa.attention(*qkv, causal=True)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(run, inputs))
    for (q, k, v), out in zip(inputs, outs):
        assert_close(as_numpy(out), reference(as_numpy(q), as_numpy(k), as_numpy(v),
                                              causal=True)[0])


@pytest.fixture
def fresh_state(monkeypatch):
    monkeypatch.setattr(_capi, "_native_state", None)


def test_setting_0_keeps_the_python_path(monkeypatch, fresh_state):
    monkeypatch.setenv("FSDPA_TORCH_NATIVE", "0")
    assert _capi.torch_native() is None


def test_setting_must_be_0_or_1(monkeypatch, fresh_state):
    monkeypatch.setenv("FSDPA_TORCH_NATIVE", "yes")
    with pytest.raises(InvalidArgument, match="FSDPA_TORCH_NATIVE: expected 0 or 1"):
        _capi.torch_native()


def test_setting_1_requires_the_binding(monkeypatch, fresh_state, tmp_path):
    monkeypatch.setenv("FSDPA_TORCH_NATIVE", "1")
    monkeypatch.setattr(_capi, "_lib_path", tmp_path / "libfsdpa.so")
    with pytest.raises(LibraryNotFound, match="FSDPA_TORCH_NATIVE=1 but there is no"):
        _capi.torch_native()


def test_a_binding_that_does_not_load_warns_and_the_python_path_runs(
        monkeypatch, fresh_state, tmp_path, rng):
    monkeypatch.delenv("FSDPA_TORCH_NATIVE", raising=False)
    monkeypatch.setattr(_capi, "_lib_path", tmp_path / "libfsdpa.so")
    import importlib.machinery
    (tmp_path / ("_torch_native" + importlib.machinery.EXTENSION_SUFFIXES[0])).write_bytes(
        b"not an ELF file")
    with pytest.warns(RuntimeWarning, match="cannot load the torch binding"):
        assert _capi.torch_native() is None
    q = torch.from_numpy(rng.standard_normal((1, 2, 3, 16)).astype(np.float32))
    assert_close(fsdpa.attention(q, q, q).numpy(), reference(q.numpy(), q.numpy(), q.numpy())[0])
