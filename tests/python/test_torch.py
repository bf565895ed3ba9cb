"""torch CPU tensors through the wrapper (skipped when torch is missing)."""

import numpy as np
import pytest

import fsdpa
from fsdpa_testing import assert_close, reference

torch = pytest.importorskip("torch")


@pytest.fixture
def generator():
    seed = int(np.random.SeedSequence().entropy % 2**63)
    print(f"torch seed={seed}")
    return torch.Generator().manual_seed(seed)


def as_numpy(t):
    return t.detach().to(torch.float32).numpy()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_cpu_tensors(generator, dtype):
    q = torch.randn(2, 4, 9, 40, generator=generator).to(dtype)
    k = torch.randn(2, 2, 17, 40, generator=generator).to(dtype)
    v = torch.randn(2, 2, 17, 24, generator=generator).to(dtype)
    sinks = torch.randn(4, generator=generator)
    mask = torch.rand(1, 4, 9, 17, generator=generator) < 0.7
    out, lse = fsdpa.attention(q, k, v, causal=True, mask=mask, sinks=sinks, return_lse=True)
    assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.device == q.device
    assert lse.dtype == torch.float32 and lse.shape == (2, 4, 9)
    want_out, want_lse = reference(as_numpy(q), as_numpy(k), as_numpy(v), causal=True,
                                   mask=mask.numpy(), sinks=sinks.numpy())
    assert_close(out.numpy(), want_out, lse.numpy(), want_lse)


def test_bf16_tensors(generator):
    q, k, v = (torch.randn(1, 2, 7, 32, generator=generator).to(torch.bfloat16) for _ in range(3))
    out = fsdpa.attention(q, k, v)
    want, _ = reference(as_numpy(q), as_numpy(k), as_numpy(v))
    got = out.to(torch.float64).numpy()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) <= 1e-2


def test_bshd_views(generator):
    q = torch.randn(2, 11, 4, 16, generator=generator).transpose(1, 2)
    k = torch.randn(2, 13, 2, 16, generator=generator).transpose(1, 2)
    v = torch.randn(2, 13, 2, 16, generator=generator).transpose(1, 2)
    out = torch.full((2, 11, 4, 16), float("nan")).transpose(1, 2)
    assert fsdpa.attention(q, k, v, out=out) is out
    want, _ = reference(q.numpy(), k.numpy(), v.numpy())
    assert_close(out.numpy(), want)


def test_plan_and_errors(generator):
    q = torch.randn(1, 3, 4, 8, generator=generator)
    k = torch.randn(1, 2, 4, 8, generator=generator)
    with pytest.raises(fsdpa.InvalidArgument,
                       match=r"^fsdpa: heads: heads_q=3 is not a multiple of heads_kv=2$"):
        fsdpa.attention(q, k, k)
    with pytest.raises(fsdpa.InvalidArgument, match=r"^fsdpa: q: torch dtype torch.float64"):
        fsdpa.attention(q.double(), k, k)
    info = fsdpa.plan(q[:, :2], k, k)
    assert info.backend == "cpu" and info.heads_q == 2
