"""torch.ops.fsdpa.attention and its faces on CUDA tensors: opcheck (dense
and paged), torch.compile(fullgraph=True), CUDA-graph capture, the autograd
error, the SDPA and FlashAttention faces against torch's own attention or
the float64 reference, flash_attn_with_kvcache on dense and paged caches."""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import fsdpa  # noqa: E402

if not fsdpa.backend_built("cuda"):
    pytest.skip("the library is built without the CUDA backend", allow_module_level=True)

import fsdpa.torch as ft  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fsdpa_testing import reference  # noqa: E402

F = torch.nn.functional


def rand(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device="cuda", dtype=dtype)


def error(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm()).item()


def test_opcheck():
    q, k, v = rand(2, 8, 33, 72), rand(2, 2, 77, 72), rand(2, 2, 77, 64)
    mask = torch.rand(2, 1, 33, 77, device="cuda") < 0.8
    sinks = torch.randn(8, device="cuda")
    cases = [
        (q, k, v, None, None, None, True, "bottom_right", None, 0.0, None, False, "bhsd"),
        (q, k, v, mask, sinks, 0.1, False, "bottom_right", 7, 20.0, "fused", True, "bshd"),
    ]
    for args in cases:
        torch.library.opcheck(torch.ops.fsdpa.attention.default, args)


def test_compile_fullgraph_has_no_graph_break():
    def layer(x, wq, k, v):
        q = (x @ wq).view(x.shape[0], x.shape[1], 8, 64).transpose(1, 2)
        return ft.attention(q, k, v, causal=True, out_layout="bshd").flatten(2)

    x, wq = rand(2, 40, 512), rand(512, 512)
    k, v = rand(2, 2, 40, 64), rand(2, 2, 40, 64)
    compiled = torch.compile(layer, fullgraph=True)
    torch.testing.assert_close(compiled(x, wq, k, v), layer(x, wq, k, v), atol=2e-2, rtol=2e-2)
    explanation = torch._dynamo.explain(layer)(x, wq, k, v)
    assert explanation.graph_break_count == 0


def assert_replays_match_sdpa(graph, out, q, k, v, refill):
    """Twice: new random data in the tensors of `refill`, a replay of
    `graph` (which wrote `out`), then out against torch's SDPA."""
    for _ in range(2):
        for tensor in refill:
            tensor.copy_(rand(*tensor.shape))
        graph.replay()
        torch.cuda.synchronize()
        want = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        assert error(out, want) < 1e-2


def test_cuda_graph_capture_replays_on_new_data():
    q, k, v = rand(1, 16, 1, 128), rand(1, 2, 4096, 128), rand(1, 2, 4096, 128)
    with torch.no_grad():
        ft.attention(q, k, v)  # plan outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = ft.attention(q, k, v)
        assert_replays_match_sdpa(graph, out, q, k, v, refill=(q, k))


def test_cuda_graph_capture_plans_for_its_environment(monkeypatch):
    # The Python fast path (the torch binding set aside): its entry is made
    # with one split; the capture runs under four, and the entry's plan for
    # it is one of four splits (with the workspace that plan needs, from
    # torch's graph pool).
    from fsdpa import _api, _capi  # noqa: PLC0415

    monkeypatch.setattr(_capi, "_native_state", (None,))
    q, k, v = rand(1, 16, 1, 128), rand(1, 2, 4096, 128), rand(1, 2, 4096, 128)
    _api._plans.clear()
    with torch.no_grad():
        monkeypatch.setenv("FSDPA_DECODE_SPLITS", "1")
        fsdpa.attention(q, k, v)
        monkeypatch.setenv("FSDPA_DECODE_SPLITS", "4")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fsdpa.attention(q, k, v)
        (entry,) = _api._plans.values()
        _, plan, workspace_bytes = entry.planned
        info = _api._plan_info(entry.lib, plan.handle)
        assert info.num_kv_splits == 4 and info.workspace_bytes == workspace_bytes
        monkeypatch.delenv("FSDPA_DECODE_SPLITS")
        assert_replays_match_sdpa(graph, out, q, k, v, refill=(q, v))


def test_fast_path_outputs_are_row_major_on_every_layout():
    # The fast path allocates out like q where q is row-major, with torch.empty
    # otherwise; a hit reuses the way its miss chose.
    k, v = rand(1, 2, 300, 64), rand(1, 2, 300, 64)
    queries = [rand(1, 8, 5, 64), rand(1, 5, 8, 64).transpose(1, 2), rand(1, 8, 1, 64),
               rand(1, 1, 8, 64).transpose(1, 2)]
    with torch.no_grad():
        for q in queries:
            want = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            for _ in range(2):  # the miss, then the hit
                out = fsdpa.attention(q, k, v)
                assert out.shape == (1, 8, q.shape[2], 64)
                assert out.stride() == torch.empty(out.shape).stride()
                assert error(out, want) < 1e-2
                out, lse = fsdpa.attention(q, k, v, return_lse=True)
                assert lse.shape == (1, 8, q.shape[2]) and lse.dtype == torch.float32
                assert error(out, want) < 1e-2


def test_compile_reduce_overhead():
    def step(q, k, v):
        return ft.attention(q, k, v) * 2

    q, k, v = rand(1, 16, 1, 128), rand(1, 2, 1024, 128), rand(1, 2, 1024, 128)
    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad():
        for _ in range(4):  # warm-up, record, replays
            q.copy_(rand(*q.shape))
            got = compiled(q, k, v).clone()
            want = 2 * F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            assert error(got, want) < 1e-2


def test_inputs_that_require_grad_raise():
    q = rand(1, 2, 4, 64).requires_grad_()
    k, v = rand(1, 2, 4, 64), rand(1, 2, 4, 64)
    with pytest.raises(fsdpa.Unsupported, match="^fsdpa: autograd: q requires grad"):
        ft.attention(q, k, v)
    with pytest.raises(fsdpa.Unsupported, match="^fsdpa: autograd: q requires grad"):
        fsdpa.attention(q, k, v)
    with torch.no_grad():
        assert ft.attention(q, k, v).shape == (1, 2, 4, 64)


@pytest.mark.parametrize("lq,lk", [(37, 37), (5, 300), (300, 120)])
@pytest.mark.parametrize("kind", ["causal", "bool", "additive", "none"])
def test_sdpa_face_matches_torch(lq, lk, kind):
    q, k, v = rand(2, 8, lq, 96), rand(2, 2, lk, 96), rand(2, 2, lk, 64)
    mask = None
    if kind == "bool":
        mask = torch.rand(2, 1, lq, lk, device="cuda") < 0.7
        mask[..., 0] = True
    elif kind == "additive":
        mask = torch.randn(1, 8, lq, lk, device="cuda", dtype=torch.bfloat16)
    is_causal = kind == "causal"
    got = ft.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                          enable_gqa=True)
    kr, vr = k.repeat_interleave(4, 1).float(), v.repeat_interleave(4, 1).float()
    want = F.scaled_dot_product_attention(q.float(), kr, vr, attn_mask=mask if mask is None or
                                          mask.dtype == torch.bool else mask.float(),
                                          is_causal=is_causal)
    if is_causal and lq > lk:  # torch gives NaN rows where top-left sees no key; fsdpa 0
        want = torch.nan_to_num(want)
    assert error(got, want) < 1e-2


def test_sdpa_face_errors_and_unbatched():
    q, k = rand(4, 9, 32), rand(2, 9, 32)
    with pytest.raises(fsdpa.InvalidArgument, match="^fsdpa: enable_gqa: query has 4 heads"):
        ft.scaled_dot_product_attention(q, k, k)
    with pytest.raises(fsdpa.Unsupported, match="^fsdpa: dropout_p"):
        ft.scaled_dot_product_attention(q, q, q, dropout_p=0.1)
    with pytest.raises(fsdpa.InvalidArgument, match="^fsdpa: attn_mask: must be None"):
        ft.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(9, 9, device="cuda",
                                                                      dtype=torch.bool),
                                        is_causal=True)
    got = ft.scaled_dot_product_attention(q, k, k, enable_gqa=True, scale=0.2)
    want = F.scaled_dot_product_attention(q.float(), k.repeat_interleave(2, 0).float(),
                                          k.repeat_interleave(2, 0).float(), scale=0.2)
    assert got.shape == (4, 9, 32) and error(got, want) < 1e-2


@pytest.mark.parametrize("window,causal,softcap", [((-1, -1), True, 0.0), ((16, 0), False, 0.0),
                                                    ((8, -1), False, 30.0), ((-1, -1), False, 0.0)])
def test_flash_face_matches_the_reference(window, causal, softcap):
    q, k, v = rand(2, 29, 8, 80), rand(2, 61, 2, 80), rand(2, 61, 2, 80)
    out = ft.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap)
    assert out.shape == (2, 29, 8, 80) and out.is_contiguous()
    as_np = lambda t: t.transpose(1, 2).float().cpu().numpy()  # noqa: E731
    want, _ = reference(as_np(q), as_np(k), as_np(v), causal=causal or window[1] == 0,
                        window_left=None if window[0] < 0 else window[0], softcap=softcap or None)
    got = out.transpose(1, 2).float().cpu().numpy()
    assert ((got - want) ** 2).sum() ** 0.5 / (want ** 2).sum() ** 0.5 < 1e-2


def test_flash_face_errors():
    q = rand(1, 4, 2, 64)
    with pytest.raises(fsdpa.Unsupported, match=r"^fsdpa: window_size: a right window"):
        ft.flash_attn_func(q, q, q, window_size=(4, 4))
    with pytest.raises(fsdpa.Unsupported, match="^fsdpa: alibi_slopes"):
        ft.flash_attn_func(q, q, q, alibi_slopes=torch.ones(2, device="cuda"))


def test_opcheck_paged():
    q = rand(3, 4, 2, 64)
    pool = rand(20, 16, 2, 64)
    table = torch.randperm(20, device="cuda", dtype=torch.int32)[:18].view(3, 6)
    lens = torch.tensor([5, 96, 40], device="cuda", dtype=torch.int32)
    args = (q, pool, pool, None, None, None, True, "bottom_right", None, 0.0, None, True, "bshd",
            table, lens)
    torch.library.opcheck(torch.ops.fsdpa.attention.default, args)


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("lq,causal,window", [(1, False, (-1, -1)), (3, True, (-1, -1)),
                                              (2, False, (20, 0))])
def test_flash_kvcache_face_matches_the_reference(paged, lq, causal, window):
    batch, hq, hkv, d, page, pages = 3, 8, 2, 64, 16, 7
    lens = [5, 112, 41]
    q = rand(batch, lq, hq, d)
    dense_k, dense_v = rand(batch, pages * page, hkv, d), rand(batch, pages * page, hkv, d)
    seqlens = torch.tensor(lens, device="cuda", dtype=torch.int32)
    if paged:  # the same keys in shuffled pages of a pool
        order = torch.randperm(batch * pages, device="cuda")
        table = order.view(batch, pages).to(torch.int32)
        k_pool = torch.empty(batch * pages, page, hkv, d, device="cuda", dtype=dense_k.dtype)
        v_pool = torch.empty_like(k_pool)
        k_pool[order] = dense_k.reshape(batch * pages, page, hkv, d)
        v_pool[order] = dense_v.reshape(batch * pages, page, hkv, d)
        out, lse = ft.flash_attn_with_kvcache(q, k_pool, v_pool, cache_seqlens=seqlens,
                                              block_table=table, causal=causal,
                                              window_size=window, return_softmax_lse=True)
    else:
        out, lse = ft.flash_attn_with_kvcache(q, dense_k, dense_v, cache_seqlens=seqlens,
                                              causal=causal, window_size=window,
                                              return_softmax_lse=True)
    assert out.shape == (batch, lq, hq, d) and lse.shape == (batch, hq, lq)
    as_np = lambda t: t.transpose(1, 2).float().cpu().numpy()  # noqa: E731
    for b, n in enumerate(lens):
        want, want_lse = reference(as_np(q[b:b + 1]), as_np(dense_k[b:b + 1, :n]),
                                   as_np(dense_v[b:b + 1, :n]), causal=causal or window[1] == 0,
                                   window_left=None if window[0] < 0 else window[0])
        got = out[b:b + 1].transpose(1, 2).float().cpu().numpy()
        assert ((got - want) ** 2).sum() ** 0.5 / (want ** 2).sum() ** 0.5 < 1e-2
        assert abs(lse[b].float().cpu().numpy() - want_lse[0]).max() < 1e-2


def test_flash_kvcache_face_errors():
    q, cache = rand(1, 1, 2, 64), rand(1, 8, 2, 64)
    with pytest.raises(fsdpa.Unsupported, match="^fsdpa: k: not implemented"):
        ft.flash_attn_with_kvcache(q, cache, cache, k=cache, v=cache)
    with pytest.raises(fsdpa.Unsupported, match="^fsdpa: num_splits"):
        ft.flash_attn_with_kvcache(q, cache, cache, num_splits=2)
    out = ft.flash_attn_with_kvcache(q, cache, cache, cache_seqlens=5)  # an int length
    want = ft.flash_attn_with_kvcache(q, cache[:, :5], cache[:, :5])
    torch.testing.assert_close(out, want, atol=2e-2, rtol=2e-2)
