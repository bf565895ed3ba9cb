"""fsdpa.plan: the PlanInfo fields, the explanation, and the policy strings."""

import dataclasses
import math

import numpy as np
import pytest

import fsdpa
from fsdpa_testing import randn


@pytest.fixture
def tensors(rng):
    return (randn(rng, (2, 8, 5, 72)), randn(rng, (2, 2, 11, 72)), randn(rng, (2, 2, 11, 64)))


def test_plan_info_fields(tensors):
    q, k, v = tensors
    info = fsdpa.plan(q, k, v, causal=True, policy="auto")
    assert isinstance(info, fsdpa.PlanInfo)
    assert info.backend == "cpu"
    assert info.path in ("fused-prefill", "fused-decode")
    assert info.kernel and info.kernel in info.explain
    assert info.policy == "auto"
    assert info.dtype == "f32" and info.device == "cpu:0" and info.mask == "none"
    assert (info.has_sinks, info.has_lse) == (False, False)
    assert (info.batch, info.heads_q, info.heads_kv) == (2, 8, 2)
    assert (info.len_q, info.len_k, info.head_dim_qk, info.head_dim_v) == (5, 11, 72, 64)
    assert info.scale == pytest.approx(1 / math.sqrt(72), rel=1e-15)
    assert info.pad_ratio >= 1.0
    assert info.head_dim_qk_bucket == 0 or info.head_dim_qk_bucket >= 72
    assert info.head_dim_v_bucket == 0 or info.head_dim_v_bucket >= 64
    assert info.num_kv_splits >= 1 and info.num_threads >= 1
    assert isinstance(info.workspace_bytes, int) and info.workspace_bytes >= 0
    assert info.fallback_reason == ""
    assert str(info) == info.explain
    for line in ("problem   B=2 Hq=8 Hkv=2 Lq=5 Lk=11 Dqk=72 Dv=64 dtype=f32 device=cpu:0",
                 "causal=bottom-right", "policy    auto", "backend   cpu"):
        assert line in info.explain
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.kernel = "other"


def test_plan_reports_features(rng, tensors):
    q, k, v = tensors
    mask = rng.random((1, 8, 5, 11)) < 0.5
    sinks = randn(rng, (8,))
    info = fsdpa.plan(q, k, v, mask=mask, sinks=sinks, return_lse=True, scale=0.5,
                      causal=True, causal_align="top_left", window_left=3)
    assert info.mask == "boolean" and info.has_sinks and info.has_lse
    assert info.scale == 0.5
    assert "causal=top-left window=3 mask=boolean sinks=yes lse=yes scale=0.5" in info.explain
    additive = fsdpa.plan(q, k, v, mask=np.zeros((5, 11), dtype=np.float16))
    assert additive.mask == "additive" and "mask=additive-f16" in additive.explain


def test_plan_computes_nothing(tensors):
    q, k, v = tensors
    out = np.full((2, 8, 5, 64), np.nan, dtype=np.float32)
    fsdpa.plan(q, k, v, out=out)
    assert np.isnan(out).all()


@pytest.mark.parametrize("policy,path_is_fused", [("auto", True), ("fused", True),
                                                   ("unfused", False)])
def test_policy_strings(tensors, policy, path_is_fused):
    info = fsdpa.plan(*tensors, policy=policy)
    assert info.policy == policy
    assert (info.path != "unfused") == path_is_fused
    if policy == "unfused":
        assert info.fallback_reason == "policy is unfused"
        assert "fallback  policy is unfused" in info.explain
    else:
        assert info.fallback_reason == ""


def test_policy_none_reads_the_environment(tensors, monkeypatch):
    assert fsdpa.plan(*tensors).policy == "auto"
    monkeypatch.setenv("FSDPA_POLICY", "unfused")
    assert fsdpa.plan(*tensors).policy == "unfused"
    assert fsdpa.plan(*tensors).path == "unfused"
    assert fsdpa.plan(*tensors, policy="fused").policy == "fused"  # explicit wins
    monkeypatch.setenv("FSDPA_POLICY", "fused")
    assert fsdpa.plan(*tensors).policy == "fused"
    monkeypatch.setenv("FSDPA_POLICY", "fastest")
    with pytest.raises(fsdpa.InvalidArgument,
                       match="^fsdpa: FSDPA_POLICY: expected auto, fused or unfused, got 'fastest'$"):
        fsdpa.plan(*tensors)
    with pytest.raises(fsdpa.InvalidArgument, match="FSDPA_POLICY"):
        fsdpa.attention(*tensors)


def test_plan_for_strided_layout(rng):
    q = randn(rng, (1, 9, 4, 16)).transpose(0, 2, 1, 3)
    k = randn(rng, (1, 13, 2, 16)).transpose(0, 2, 1, 3)
    info = fsdpa.plan(q, k, k)
    assert (info.heads_q, info.len_q, info.heads_kv, info.len_k) == (4, 9, 2, 13)
