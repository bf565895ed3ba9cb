"""torch CUDA tensors through the wrapper: device pointers, the device index
and torch's current stream. Runs under the `gpu` CTest label; skipped when
torch, a CUDA device or the library's CUDA backend is missing."""

import numpy as np
import pytest

import fsdpa

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
if not fsdpa.backend_built("cuda"):
    pytest.skip("the library is built without the CUDA backend", allow_module_level=True)

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fsdpa_testing import relative_error, reference  # noqa: E402

TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float32: 1e-5}


def as_numpy(t):
    return t.detach().to("cpu", torch.float32).numpy()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("head_dim", [64, 72, 128])
def test_cuda_tensors(dtype, head_dim):
    q = torch.randn(2, 8, 33, head_dim, device="cuda", dtype=dtype)
    k = torch.randn(2, 2, 77, head_dim, device="cuda", dtype=dtype)
    v = torch.randn(2, 2, 77, head_dim, device="cuda", dtype=dtype)
    out, lse = fsdpa.attention(q, k, v, causal=True, return_lse=True)
    assert out.device == q.device and out.dtype == dtype and lse.device == q.device
    torch.cuda.synchronize()
    want_out, want_lse = reference(as_numpy(q), as_numpy(k), as_numpy(v), causal=True)
    assert relative_error(as_numpy(out), want_out) <= TOLERANCE[dtype]
    np.testing.assert_allclose(lse.cpu().numpy(), want_lse, rtol=1e-4, atol=1e-4)


def test_runs_on_the_current_stream():
    q, k, v = (torch.randn(1, 4, 128, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        out = fsdpa.attention(q, k, v)
    stream.synchronize()
    want, _ = reference(as_numpy(q), as_numpy(k), as_numpy(v))
    assert relative_error(as_numpy(out), want) <= 2e-3


def test_plan_on_cuda():
    q = torch.randn(1, 4, 1, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 4, 4096, 128, device="cuda", dtype=torch.bfloat16)
    info = fsdpa.plan(q, k, k)
    assert info.backend == "cuda" and info.device == f"cuda:{q.device.index or 0}"


def test_device_mismatch():
    q = torch.randn(1, 2, 3, 8, device="cuda")
    k = torch.randn(1, 2, 3, 8)
    with pytest.raises(fsdpa.InvalidArgument, match=r"^fsdpa: k: on device cpu:0, expected q's"):
        fsdpa.attention(q, k, k)
