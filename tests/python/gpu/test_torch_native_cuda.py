"""The compiled torch binding (python/fsdpa/_torch_native.cpp) on CUDA
tensors: it serves decode and prefill calls on torch's current stream,
paged caches and the LSE, and runs under CUDA-graph capture with a plan and
workspace of its own. Skipped without torch, a device, the CUDA backend or
the binding (unless FSDPA_TORCH_NATIVE=1, under which a missing binding
fails)."""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import fsdpa  # noqa: E402
from fsdpa import _api, _capi  # noqa: E402

if not fsdpa.backend_built("cuda"):
    pytest.skip("the library is built without the CUDA backend", allow_module_level=True)
if _capi.torch_native() is None:
    pytest.skip("no torch binding beside the library", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fsdpa_testing import reference, relative_error, spy_on_torch_binding  # noqa: E402

F = torch.nn.functional


@pytest.fixture
def spy(monkeypatch):
    return spy_on_torch_binding(monkeypatch)


def rand(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device="cuda", dtype=dtype)


def as_numpy(t):
    return t.detach().to("cpu", torch.float32).numpy()


@pytest.mark.parametrize("len_q", [1, 4, 300])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_serves_decode_and_prefill_on_the_current_stream(spy, len_q, dtype):
    q, k, v = rand(2, 8, len_q, 128, dtype=dtype), rand(2, 2, 700, 128, dtype=dtype), rand(
        2, 2, 700, 128, dtype=dtype)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(stream):
        out, lse = fsdpa.attention(q, k, v, causal=True, return_lse=True)
    stream.synchronize()
    assert out.device == q.device and out.dtype == dtype and lse.dtype == torch.float32
    want_out, want_lse = reference(as_numpy(q), as_numpy(k), as_numpy(v), causal=True)
    assert relative_error(as_numpy(out), want_out) <= 1e-2
    torch.testing.assert_close(lse.cpu(), torch.from_numpy(want_lse).float(), atol=1e-3,
                               rtol=1e-3)
    assert spy.served == 1 and spy.handed_back == 0


def test_serves_a_paged_cache(spy):
    page_size, pages, batch = 16, 40, 3
    q = rand(batch, 8, 1, 64)
    k_pages, v_pages = rand(pages, page_size, 2, 64), rand(pages, page_size, 2, 64)
    block_table = torch.randperm(pages, device="cuda", dtype=torch.int32)[:batch * 8].view(batch, 8)
    seq_lens_k = torch.tensor([1, 77, 128], device="cuda", dtype=torch.int32)
    with torch.no_grad():
        out = fsdpa.attention(q, k_pages, v_pages, block_table=block_table,
                              seq_lens_k=seq_lens_k)
    torch.cuda.synchronize()
    for b in range(batch):
        n = int(seq_lens_k[b])
        rows = torch.cat([k_pages[block_table[b, p]] for p in range(8)])[:n]  # [n, Hkv, D]
        values = torch.cat([v_pages[block_table[b, p]] for p in range(8)])[:n]
        k = rows.permute(1, 0, 2)[None]
        v = values.permute(1, 0, 2)[None]
        want, _ = reference(as_numpy(q[b:b + 1]), as_numpy(k), as_numpy(v))
        assert relative_error(as_numpy(out[b:b + 1]), want) <= 1e-2
    assert spy.served == 1


def test_runs_under_graph_capture_with_its_own_plan(spy, monkeypatch):
    # The capture runs under four splits (a workspace for the partials, from
    # torch's graph pool); nothing is planned outside it and no entry is made.
    q, k, v = rand(1, 16, 1, 128), rand(1, 2, 4096, 128), rand(1, 2, 4096, 128)
    entries = len(_api._plans)
    monkeypatch.setenv("FSDPA_DECODE_SPLITS", "4")
    with torch.no_grad():
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fsdpa.attention(q, k, v)
    monkeypatch.delenv("FSDPA_DECODE_SPLITS")
    assert spy.served == 1 and len(_api._plans) == entries
    for _ in range(2):
        q.copy_(rand(*q.shape))
        k.copy_(rand(*k.shape))
        graph.replay()
        torch.cuda.synchronize()
        want = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        assert ((out.double() - want.double()).norm() / want.double().norm()).item() < 1e-2


def test_library_errors_raise(spy):
    q, k = rand(1, 4, 1, 64), rand(1, 2, 10, 32)
    with pytest.raises(fsdpa.InvalidArgument, match="fsdpa: "):
        fsdpa.attention(q, k, k)
