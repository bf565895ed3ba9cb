"""fsdpa.prepare(): plan once, run many times on the arrays it was given."""

import numpy as np
import pytest

import fsdpa
from fsdpa_testing import reference, relative_error


def test_prepared_call_runs_repeatedly_on_new_data():
    rng = np.random.default_rng()
    q = rng.standard_normal((1, 4, 9, 24)).astype(np.float32)
    k = rng.standard_normal((1, 2, 13, 24)).astype(np.float32)
    v = rng.standard_normal((1, 2, 13, 16)).astype(np.float32)
    call = fsdpa.prepare(q, k, v, causal=True, policy="fused")
    assert call.info.kernel == "cpu_fused_online_softmax"
    assert call.info.workspace_bytes > 0
    for _ in range(3):
        q[...] = rng.standard_normal(q.shape)  # same buffers, fresh contents
        call.out[...] = np.nan
        out = call()
        assert out is call.out
        ref, _ = reference(q, k, v, causal=True)
        assert relative_error(out, ref) <= 1e-5


def test_prepared_call_with_lse():
    rng = np.random.default_rng()
    q = rng.standard_normal((2, 2, 5, 8)).astype(np.float32)
    k = rng.standard_normal((2, 2, 7, 8)).astype(np.float32)
    v = rng.standard_normal((2, 2, 7, 8)).astype(np.float32)
    out, lse = fsdpa.prepare(q, k, v, return_lse=True)()
    ref, ref_lse = reference(q, k, v)
    assert relative_error(out, ref) <= 1e-5
    assert np.max(np.abs(lse - ref_lse)) <= 1e-5


def test_prepare_raises_the_library_error():
    rng = np.random.default_rng()
    q = rng.standard_normal((1, 3, 4, 8)).astype(np.float32)
    k = rng.standard_normal((1, 2, 4, 8)).astype(np.float32)
    with pytest.raises(fsdpa.InvalidArgument, match="heads_q=3 is not a multiple of heads_kv=2"):
        fsdpa.prepare(q, k, k)
