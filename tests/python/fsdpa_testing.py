"""Shared by the Python wrapper tests: a float64 numpy reference of
docs/design.md (Semantics) and the error measures of docs/design.md (Tests and benchmarks)."""

import numpy as np

# docs/design.md (Tests and benchmarks): ||out - ref|| / ||ref|| per dtype of q/k/v/out.
TOLERANCE = {np.dtype(np.float32): 1e-5, np.dtype(np.float16): 2e-3}


def reference(q, k, v, *, scale=None, causal=False, causal_align="bottom_right",
              window_left=None, mask=None, sinks=None, softcap=None):
    """Attention in float64 from the definition: returns (out, lse)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    batch, heads_q, len_q, head_dim_qk = q.shape
    heads_kv, len_k = k.shape[1], k.shape[2]
    group = heads_q // heads_kv
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    if scale is None:
        scale = 1.0 / np.sqrt(head_dim_qk)
    scores = scale * np.einsum("bhid,bhjd->bhij", q, k)
    if softcap:
        scores = softcap * np.tanh(scores / softcap)
    i = np.arange(len_q)[:, None]
    j = np.arange(len_k)[None, :]
    diagonal = i + (len_k - len_q if causal_align == "bottom_right" else 0)
    keep = np.ones((len_q, len_k), dtype=bool)
    if causal:
        keep &= j <= diagonal
    if window_left is not None:
        keep &= j >= diagonal - window_left
    keep = np.broadcast_to(keep, scores.shape)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype == np.bool_:
            keep = keep & np.broadcast_to(mask, scores.shape)
        else:
            scores = scores + np.broadcast_to(mask.astype(np.float64), scores.shape)
    scores = np.where(keep, scores, -np.inf)
    row_max = scores.max(axis=-1, initial=-np.inf)
    sink = None
    if sinks is not None:
        sink = np.asarray(sinks, dtype=np.float64)[None, :, None]
        row_max = np.maximum(row_max, sink)
    fully_masked = row_max == -np.inf
    shift = np.where(fully_masked, 0.0, row_max)
    weights = np.exp(scores - shift[..., None])
    denominator = weights.sum(axis=-1)
    if sink is not None:
        denominator = denominator + np.exp(sink - shift)
    safe = np.where(fully_masked, 1.0, denominator)
    out = np.einsum("bhij,bhjd->bhid", weights, v) / safe[..., None]
    out[fully_masked] = 0.0
    lse = np.where(fully_masked, -np.inf, shift + np.log(safe))
    return out, lse


def relative_error(got, want):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    norm = np.linalg.norm(want)
    error = np.linalg.norm(got - want)
    return error / norm if norm > 0 else error


def assert_close(out, want_out, lse=None, want_lse=None):
    """out within docs/design.md (Tests and benchmarks) of the reference, every element written (no
    NaN), fully masked rows exactly 0, lse equal where finite and -inf where
    the reference is."""
    assert not np.isnan(np.asarray(out, dtype=np.float64)).any(), "out has NaN (unwritten?)"
    tolerance = TOLERANCE[np.dtype(out.dtype)]
    error = relative_error(out, want_out)
    assert error <= tolerance, f"relative error {error:.3g} > {tolerance}"
    zero_rows = np.all(want_out == 0, axis=-1)
    assert np.all(np.asarray(out)[zero_rows] == 0)
    if want_lse is not None:
        assert lse.dtype == np.float32 and lse.shape == want_lse.shape
        infinite = np.isinf(want_lse)
        assert np.array_equal(np.isneginf(lse), infinite)
        np.testing.assert_allclose(lse[~infinite], want_lse[~infinite], rtol=1e-5, atol=1e-5)


def randn(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


class TorchBindingSpy:
    """The compiled torch binding with its calls counted: served (a result)
    and handed back (None, for the Python path)."""

    def __init__(self, module):
        self.module = module
        self.served = self.handed_back = 0

    def attention(self, *args):
        result = self.module.attention(*args)
        if result is None:
            self.handed_back += 1
        else:
            self.served += 1
        return result


def spy_on_torch_binding(monkeypatch):
    """Puts a TorchBindingSpy in the binding's place for one test."""
    from fsdpa import _capi

    spy = TorchBindingSpy(_capi.torch_native())
    monkeypatch.setattr(_capi, "_native_state", (spy,))
    return spy
