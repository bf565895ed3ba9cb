"""attention()'s plan cache on the Python side: repeated calls reuse their
entry, anything that changes the plan misses it, and results stay right."""

import numpy as np
import pytest

import fsdpa
from fsdpa import _api
from fsdpa_testing import assert_close, reference


@pytest.fixture(autouse=True)
def empty_cache():
    _api._plans.clear()
    yield
    _api._plans.clear()


def inputs(rng, dtype=np.float32, lq=5, lk=11, d=16):
    q = rng.standard_normal((1, 4, lq, d)).astype(dtype)
    k = rng.standard_normal((1, 2, lk, d)).astype(dtype)
    v = rng.standard_normal((1, 2, lk, d)).astype(dtype)
    return q, k, v


def test_repeated_calls_hit_and_read_the_new_data(rng):
    q, k, v = inputs(rng)
    fsdpa.attention(q, k, v, causal=True)
    assert len(_api._plans) == 1
    for _ in range(3):
        q2, k2, v2 = inputs(rng)
        out = fsdpa.attention(q2, k2, v2, causal=True)
        assert_close(out, reference(q2, k2, v2, causal=True)[0])
    assert len(_api._plans) == 1


def test_every_argument_that_changes_the_plan_misses(rng):
    q, k, v = inputs(rng)
    mask = rng.random((1, 1, 5, 11)) < 0.8
    sinks = rng.standard_normal(4).astype(np.float32)
    calls = [
        dict(),
        dict(causal=True),
        dict(causal=True, causal_align="top_left"),
        dict(window_left=2),
        dict(scale=0.3),
        dict(softcap=5.0),
        dict(mask=mask),
        dict(sinks=sinks),
        dict(return_lse=True),
        dict(policy="unfused"),
    ]
    for kwargs in calls:
        got = fsdpa.attention(q, k, v, **kwargs)
        if kwargs.get("return_lse"):
            got = got[0]
        keys = {name: kwargs[name] for name in kwargs if name not in ("return_lse", "policy")}
        assert_close(got, reference(q, k, v, **keys)[0])
    assert len(_api._plans) == len(calls)
    # Another layout, dtype or alignment is another entry.
    fsdpa.attention(q.astype(np.float16), k.astype(np.float16), v.astype(np.float16))
    fsdpa.attention(np.ascontiguousarray(q[:, :, :4]), k, v)
    assert len(_api._plans) == len(calls) + 2


def test_types_are_part_of_the_key(rng):
    q, k, v = inputs(rng)
    fsdpa.attention(q, k, v, causal=True)
    with pytest.raises(fsdpa.InvalidArgument, match="^fsdpa: causal: expected a bool, got 1"):
        fsdpa.attention(q, k, v, causal=1)


def test_every_hit_plans_under_the_environment_of_its_call(rng, monkeypatch):
    # The entry holds no plan for its runs: the library's cache, keyed by the
    # environment too, serves each call.
    q, k, v = inputs(rng)
    assert fsdpa.plan(q, k, v).path == "fused-prefill"
    fsdpa.attention(q, k, v)
    monkeypatch.setenv("FSDPA_POLICY", "sometimes")
    with pytest.raises(fsdpa.InvalidArgument, match="^fsdpa: FSDPA_POLICY: expected auto"):
        fsdpa.attention(q, k, v)
    monkeypatch.setenv("FSDPA_NUM_THREADS", "2")
    monkeypatch.delenv("FSDPA_POLICY")
    assert_close(fsdpa.attention(q, k, v), reference(q, k, v)[0])
    monkeypatch.setenv("FSDPA_POLICY", "unfused")
    assert fsdpa.plan(q, k, v).path == "unfused"
    assert_close(fsdpa.attention(q, k, v), reference(q, k, v)[0])
    assert len(_api._plans) == 1


def test_a_read_only_out_is_refused_on_a_hit(rng):
    q, k, v = inputs(rng)
    out = np.empty((1, 4, 5, 16), np.float32)
    fsdpa.attention(q, k, v, out=out)
    out.setflags(write=False)
    with pytest.raises(fsdpa.InvalidArgument, match="^fsdpa: out: the array is read-only$"):
        fsdpa.attention(q, k, v, out=out)


def test_the_cache_is_bounded(rng, monkeypatch):
    monkeypatch.setattr(_api, "_CACHE_CAPACITY", 3)
    for lq in range(1, 8):
        q, k, v = inputs(rng, lq=lq)
        assert_close(fsdpa.attention(q, k, v), reference(q, k, v)[0])
    assert len(_api._plans) == 3


def test_mixed_frameworks_take_the_general_path(rng):
    q, k, v = inputs(rng)

    class Wrapped:
        def __init__(self, array):
            self.array = array
            self.shape = array.shape

        def __dlpack__(self, stream=None):
            return self.array.__dlpack__(stream=stream)

        def __dlpack_device__(self):
            return self.array.__dlpack_device__()

    out = fsdpa.attention(q, Wrapped(k), v)
    assert isinstance(out, np.ndarray)
    assert_close(out, reference(q, k, v)[0])
    assert len(_api._plans) == 0
