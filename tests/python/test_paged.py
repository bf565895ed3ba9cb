"""Paged KV caches and ragged batches through fsdpa.attention on numpy
arrays: each sequence against the float64 reference on exactly its keys."""

import numpy as np
import pytest

import fsdpa
from fsdpa_testing import assert_close, randn, reference


def paged_cache(rng, k, v, lengths, page_size, spare_pages=3):
    """k, v [B, Hkv, Lk, D] as page pools [pages, page_size, Hkv, D] behind a
    shuffled block table [B, max_pages] (-1 past each sequence's pages)."""
    batch, heads_kv, len_k = k.shape[:3]
    max_pages = -(-len_k // page_size)
    used = [-(-int(n) // page_size) for n in lengths]
    num_pages = sum(used) + spare_pages
    order = rng.permutation(num_pages)
    k_pages = randn(rng, (num_pages, page_size, heads_kv, k.shape[3]), k.dtype)
    v_pages = randn(rng, (num_pages, page_size, heads_kv, v.shape[3]), v.dtype)
    table = np.full((batch, max_pages), -1, dtype=np.int32)
    next_page = 0
    for b in range(batch):
        for p in range(used[b]):
            page = order[next_page]
            next_page += 1
            table[b, p] = page
            keys = slice(p * page_size, min((p + 1) * page_size, len_k))
            rows = keys.stop - keys.start
            k_pages[page, :rows] = k[b, :, keys].transpose(1, 0, 2)
            v_pages[page, :rows] = v[b, :, keys].transpose(1, 0, 2)
    return k_pages, v_pages, table


def per_sequence_reference(q, k, v, lengths, **options):
    outs, lses = [], []
    for b, n in enumerate(lengths):
        out, lse = reference(q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n], **options)
        outs.append(out)
        lses.append(lse)
    return np.concatenate(outs), np.concatenate(lses)


@pytest.mark.parametrize("policy", ["fused", "unfused"])
@pytest.mark.parametrize("page_size", [1, 16, 5])
def test_paged_matches_each_sequence(rng, policy, page_size):
    lengths = [40, 1, 0, 23]
    q = randn(rng, (4, 8, 3, 64), np.float16)
    k = randn(rng, (4, 2, 40, 64), np.float16)
    v = randn(rng, (4, 2, 40, 48), np.float16)
    k_pages, v_pages, table = paged_cache(rng, k, v, lengths, page_size)
    seq_lens = np.array(lengths, dtype=np.int32)
    options = dict(causal=True, window_left=17)
    out, lse = fsdpa.attention(q, k_pages, v_pages, block_table=table, seq_lens_k=seq_lens,
                               return_lse=True, policy=policy, **options)
    want_out, want_lse = per_sequence_reference(q, k, v, lengths, **options)
    assert_close(out, want_out, lse, want_lse)


def test_dense_ragged_batch(rng):
    lengths = [7, 30, 0]
    q = randn(rng, (3, 4, 2, 32))
    k = randn(rng, (3, 4, 30, 32))
    v = randn(rng, (3, 4, 30, 32))
    sinks = randn(rng, (4,))
    out, lse = fsdpa.attention(q, k, v, seq_lens_k=np.array(lengths, dtype=np.int32),
                               sinks=sinks, return_lse=True, causal=True)
    want_out, want_lse = per_sequence_reference(q, k, v, lengths, causal=True, sinks=sinks)
    assert_close(out, want_out, lse, want_lse)


def test_repeated_calls_take_new_tables(rng):
    """Calls of one layout (one cached plan) with new tables, lengths and pools."""
    q = randn(rng, (2, 2, 1, 16))
    for lengths in ([24, 9], [3, 24], [0, 17]):
        k = randn(rng, (2, 2, 24, 16))
        v = randn(rng, (2, 2, 24, 16))
        k_pages, v_pages, table = paged_cache(rng, k, v, [24, 24], 8, spare_pages=0)
        out = fsdpa.attention(q, k_pages, v_pages, block_table=table,
                              seq_lens_k=np.array(lengths, dtype=np.int32))
        assert_close(out, per_sequence_reference(q, k, v, lengths)[0])


def test_plan_reports_the_cache(rng):
    q = randn(rng, (2, 4, 1, 64))
    k_pages = randn(rng, (9, 16, 2, 64))
    table = np.arange(8, dtype=np.int32).reshape(2, 4)
    info = fsdpa.plan(q, k_pages, k_pages, block_table=table,
                      seq_lens_k=np.array([64, 3], dtype=np.int32))
    assert info.page_size == 16 and info.num_pages == 9 and info.has_seq_lens_k
    assert info.len_k == 64
    assert "paged: page_size=16, 9 pages, 4 per sequence" in str(info)


def test_errors_name_the_table(rng):
    q = randn(rng, (1, 2, 1, 8))
    k_pages = randn(rng, (2, 4, 2, 8))
    with pytest.raises(fsdpa.InvalidArgument,
                       match=r"^fsdpa: block_table: element \[0, 1\] is 2, outside the pool's 2"):
        fsdpa.attention(q, k_pages, k_pages, block_table=np.array([[0, 2]], dtype=np.int32))
    with pytest.raises(fsdpa.InvalidArgument,
                       match=r"^fsdpa: seq_lens_k: element 0 is 9, expected 0..8"):
        fsdpa.attention(q, k_pages, k_pages, block_table=np.array([[0, 1]], dtype=np.int32),
                        seq_lens_k=np.array([9], dtype=np.int32))
    with pytest.raises(fsdpa.InvalidArgument,
                       match=r"^fsdpa: block_table: dtype must be i32, got f32"):
        fsdpa.attention(q, k_pages, k_pages, block_table=np.zeros((1, 2), dtype=np.float32))
