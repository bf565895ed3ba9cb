"""fsdpa.attention on numpy arrays against the float64 reference."""

import numpy as np
import pytest

import fsdpa
from fsdpa_testing import assert_close, randn, reference, relative_error

POLICIES = ["auto", "fused", "unfused"]


def qkv(rng, batch, heads_q, heads_kv, len_q, len_k, head_dim_qk, head_dim_v=None,
        dtype=np.float32):
    head_dim_v = head_dim_qk if head_dim_v is None else head_dim_v
    return (randn(rng, (batch, heads_q, len_q, head_dim_qk), dtype),
            randn(rng, (batch, heads_kv, len_k, head_dim_qk), dtype),
            randn(rng, (batch, heads_kv, len_k, head_dim_v), dtype))


def check(q, k, v, **options):
    """Runs attention with lse and compares both to the reference."""
    out, lse = fsdpa.attention(q, k, v, return_lse=True, **options)
    assert isinstance(out, np.ndarray) and out.dtype == q.dtype
    assert out.shape == (*q.shape[:3], v.shape[3])
    assert lse.shape == q.shape[:3]
    want_out, want_lse = reference(
        q, k, v, **{key: value for key, value in options.items() if key != "policy"})
    assert_close(out, want_out, lse, want_lse)
    return out, lse


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_plain(rng, policy, dtype):
    q, k, v = qkv(rng, 2, 4, 4, 17, 37, 64, dtype=dtype)
    check(q, k, v, policy=policy)


def test_returns_out_only_without_lse(rng):
    q, k, v = qkv(rng, 1, 2, 2, 3, 5, 8)
    out = fsdpa.attention(q, k, v)
    assert isinstance(out, np.ndarray)
    assert_close(out, reference(q, k, v)[0])


@pytest.mark.parametrize("head_dims", [(1, 1), (8, 8), (59, 59), (72, 72), (90, 90), (111, 111),
                                       (200, 200), (96, 64), (192, 128)])
def test_head_dims(rng, head_dims):
    q, k, v = qkv(rng, 1, 2, 1, 7, 19, *head_dims)
    check(q, k, v)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("causal_align", ["bottom_right", "top_left"])
@pytest.mark.parametrize("lengths", [(1, 1), (1, 37), (17, 37), (37, 37), (37, 17)])
def test_causal(rng, policy, causal_align, lengths):
    q, k, v = qkv(rng, 2, 3, 3, *lengths, 24)
    check(q, k, v, causal=True, causal_align=causal_align, policy=policy)


def test_causal_query_longer_than_keys_masks_first_rows(rng):
    # Bottom-right: query i sees keys j <= i + (Lk - Lq); rows i < Lq - Lk see none.
    q, k, v = qkv(rng, 1, 2, 2, 9, 4, 16)
    out, lse = check(q, k, v, causal=True)
    assert np.all(out[:, :, :5] == 0)
    assert np.all(np.isneginf(lse[:, :, :5]))
    assert np.all(np.isfinite(lse[:, :, 5:]))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("causal_align", ["bottom_right", "top_left"])
@pytest.mark.parametrize("window_left", [0, 1, 5, 100])
def test_window(rng, causal, causal_align, window_left):
    q, k, v = qkv(rng, 1, 2, 2, 13, 29, 32)
    check(q, k, v, causal=causal, causal_align=causal_align, window_left=window_left)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("softcap", [0.5, 5.0, 50.0])
def test_softcap(rng, policy, softcap):
    # A sharp scale so that every cap bites; causal, a mask and sinks on top.
    q, k, v = qkv(rng, 2, 4, 2, 13, 29, 32)
    mask = randn(rng, (1, 1, 13, 29))
    sinks = randn(rng, (4,))
    check(q, k, v, scale=1.0, softcap=softcap, causal=True, mask=mask, sinks=sinks, policy=policy)


def test_softcap_zero_is_none(rng):
    q, k, v = qkv(rng, 1, 2, 2, 5, 9, 16)
    np.testing.assert_array_equal(fsdpa.attention(q, k, v, softcap=0.0), fsdpa.attention(q, k, v))


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("mask_shape", [(2, 4, 11, 23), (1, 4, 11, 23), (2, 1, 11, 23),
                                        (1, 1, 11, 23), (11, 23), (4, 11, 23)])
def test_boolean_mask(rng, policy, mask_shape):
    q, k, v = qkv(rng, 2, 4, 2, 11, 23, 16)
    mask = rng.random(mask_shape) < 0.7
    check(q, k, v, mask=mask, causal=True, policy=policy)


@pytest.mark.parametrize("mask_dtype", [np.float32, np.float16])
@pytest.mark.parametrize("mask_shape", [(2, 4, 11, 23), (1, 4, 11, 23), (2, 1, 1, 23)])
def test_additive_mask(rng, mask_dtype, mask_shape):
    q, k, v = qkv(rng, 2, 4, 4, 11, 23, 16)
    mask = (2 * rng.standard_normal(mask_shape)).astype(mask_dtype)
    mask[rng.random(mask_shape) < 0.2] = -np.inf
    check(q, k, v, mask=mask)


def test_broadcast_view_mask(rng):
    # np.broadcast_to gives a read-only view with stride 0: masks may be one.
    q, k, v = qkv(rng, 3, 2, 2, 5, 9, 8)
    mask = np.broadcast_to(rng.random((1, 1, 5, 9)) < 0.6, (3, 2, 5, 9))
    assert mask.strides[0] == 0
    check(q, k, v, mask=mask)


def test_fully_masked_rows(rng):
    q, k, v = qkv(rng, 1, 2, 2, 6, 8, 16)
    mask = rng.random((1, 2, 6, 8)) < 0.7
    mask[0, 0, 2] = False
    mask[0, 1, 5] = False
    out, lse = check(q, k, v, mask=mask)
    assert np.all(out[0, 0, 2] == 0) and np.isneginf(lse[0, 0, 2])
    assert np.all(out[0, 1, 5] == 0) and np.isneginf(lse[0, 1, 5])
    additive = np.where(mask, 0.0, -np.inf).astype(np.float32)
    out, lse = check(q, k, v, mask=additive)
    assert np.all(out[0, 0, 2] == 0) and np.isneginf(lse[0, 0, 2])


@pytest.mark.parametrize("policy", POLICIES)
def test_sinks(rng, policy):
    q, k, v = qkv(rng, 2, 6, 2, 7, 15, 16)
    sinks = (2 * rng.standard_normal(6)).astype(np.float32)
    check(q, k, v, sinks=sinks, causal=True, policy=policy)


def test_sinks_with_fully_masked_row(rng):
    # The sink keeps the denominator positive: the row is 0, lse is the sink.
    q, k, v = qkv(rng, 1, 2, 2, 3, 4, 8)
    sinks = np.array([0.5, -1.0], dtype=np.float32)
    mask = np.ones((1, 1, 3, 4), dtype=bool)
    mask[..., 1, :] = False
    out, lse = check(q, k, v, sinks=sinks, mask=mask)
    assert np.all(out[:, :, 1] == 0)
    np.testing.assert_allclose(lse[0, :, 1], sinks, rtol=1e-6)


@pytest.mark.parametrize("heads", [(4, 4), (4, 1), (8, 2), (7, 1), (14, 2)])
def test_gqa(rng, heads):
    q, k, v = qkv(rng, 2, heads[0], heads[1], 5, 13, 32)
    check(q, k, v, causal=True)


def test_scale(rng):
    q, k, v = qkv(rng, 1, 2, 2, 5, 7, 16)
    check(q, k, v, scale=0.05)
    check(q, k, v, scale=2)


def test_everything_at_once(rng):
    q, k, v = qkv(rng, 2, 8, 2, 9, 31, 40, 24)
    mask = rng.random((2, 1, 9, 31)) < 0.8
    sinks = rng.standard_normal(8).astype(np.float32)
    check(q, k, v, mask=mask, sinks=sinks, causal=True, causal_align="top_left",
          window_left=6, scale=0.2)


# ------------------------------------------------------------------ layouts


def test_bshd_transposed_views(rng):
    # Memory [B, L, H, D] viewed as [B, H, L, D]: strides in bytes become
    # element strides.
    q = randn(rng, (2, 11, 4, 32)).transpose(0, 2, 1, 3)
    k = randn(rng, (2, 19, 2, 32)).transpose(0, 2, 1, 3)
    v = randn(rng, (2, 19, 2, 32)).transpose(0, 2, 1, 3)
    assert not q.flags.c_contiguous
    check(q, k, v, causal=True)


def test_sliced_views(rng):
    base_q = randn(rng, (2, 8, 20, 48))
    base_k = randn(rng, (2, 3, 30, 48))
    q = base_q[:, ::2, 1::2, 8:40]  # every other head and row, a slice of D
    k = base_k[:, 1:, ::3, 8:40]
    v = base_k[:, 1:, ::3, :24]
    check(q, k, v)


def test_packed_kv_buffer(rng):
    # k and v interleaved in one [B, H, L, 2, D] buffer.
    kv = randn(rng, (1, 2, 21, 2, 16))
    q = randn(rng, (1, 4, 6, 16))
    check(q, kv[:, :, :, 0], kv[:, :, :, 1], causal=True)


def test_packed_qkv_buffer_bshd(rng):
    qkv_buffer = randn(rng, (2, 9, 3, 4, 8))  # [B, L, 3, H, D]
    q, k, v = (qkv_buffer[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    check(q, k, v, causal=True)


def test_mla_v_is_a_view_of_k(rng):
    # MLA absorbed decode: v is the first Dv columns of k.
    q = randn(rng, (1, 16, 1, 72))
    k = randn(rng, (1, 1, 33, 72))
    check(q, k, k[..., :64])


def test_out_given_is_written_and_returned(rng):
    q, k, v = qkv(rng, 2, 2, 2, 5, 7, 8)
    out = np.full((2, 2, 5, 8), np.nan, dtype=np.float32)
    result = fsdpa.attention(q, k, v, out=out)
    assert result is out
    assert_close(out, reference(q, k, v)[0])


def test_out_given_strided(rng):
    q, k, v = qkv(rng, 2, 3, 3, 5, 7, 8)
    storage = np.full((2, 5, 3, 8), np.nan, dtype=np.float32)
    out = storage.transpose(0, 2, 1, 3)  # BSHD output
    result, lse = fsdpa.attention(q, k, v, out=out, return_lse=True)
    assert result is out
    want_out, want_lse = reference(q, k, v)
    assert_close(out, want_out, lse, want_lse)
    assert not np.isnan(storage).any()


def test_f16_with_everything(rng):
    q, k, v = qkv(rng, 1, 4, 2, 17, 37, 72, dtype=np.float16)
    mask = (rng.standard_normal((1, 4, 17, 37))).astype(np.float16)
    sinks = rng.standard_normal(4).astype(np.float32)
    check(q, k, v, mask=mask, sinks=sinks, causal=True, window_left=9)


def test_bf16_with_ml_dtypes(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    q, k, v = qkv(rng, 1, 2, 2, 9, 13, 32)
    q, k, v = (x.astype(ml_dtypes.bfloat16) for x in (q, k, v))
    out, lse = fsdpa.attention(q, k, v, return_lse=True, causal=True)
    assert out.dtype == q.dtype
    want_out, want_lse = reference(q.astype(np.float64), k.astype(np.float64),
                                   v.astype(np.float64), causal=True)
    assert relative_error(out.astype(np.float64), want_out) <= 1e-2
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ empty problems


def test_no_keys_gives_zeros_and_minus_inf(rng):
    q = randn(rng, (1, 2, 3, 8))
    k = np.empty((1, 2, 0, 8), dtype=np.float32)
    v = np.empty((1, 2, 0, 4), dtype=np.float32)
    out, lse = fsdpa.attention(q, k, v, return_lse=True)
    assert out.shape == (1, 2, 3, 4) and np.all(out == 0)
    assert np.all(np.isneginf(lse))


@pytest.mark.parametrize("shape", [(0, 2, 3, 8), (1, 0, 3, 8), (1, 2, 0, 8)])
def test_empty_problems(rng, shape):
    q = np.empty(shape, dtype=np.float32)
    heads_kv = 2 if shape[1] else 0
    k = randn(rng, (shape[0], heads_kv, 5, 8))
    v = randn(rng, (shape[0], heads_kv, 5, 8))
    out, lse = fsdpa.attention(q, k, v, return_lse=True)
    assert out.shape == shape and lse.shape == shape[:3]


# ------------------------------------------------------------------ threads


def test_concurrent_calls(rng):
    # ctypes releases the GIL: calls from several Python threads run at once.
    from concurrent.futures import ThreadPoolExecutor

    cases = [qkv(rng, 1, 4, 2, 9, 33, 24) for _ in range(8)]

    def run(case):
        return fsdpa.attention(*case, causal=True)

    with ThreadPoolExecutor(max_workers=4) as pool:
        outs = list(pool.map(run, cases))
    for case, out in zip(cases, outs):
        assert_close(out, reference(*case, causal=True)[0])
