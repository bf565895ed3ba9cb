"""pytest fixtures of the Python wrapper tests."""

import os
import secrets

import numpy as np
import pytest


@pytest.fixture
def rng():
    """Fresh random inputs each run; FSDPA_TEST_SEED replays a failure."""
    seed = int(os.environ.get("FSDPA_TEST_SEED") or secrets.randbits(32))
    print(f"FSDPA_TEST_SEED={seed}")
    return np.random.default_rng(seed)


@pytest.fixture(autouse=True)
def no_policy_from_environment(monkeypatch):
    # Tests choose their policy; a FSDPA_POLICY set by the caller would change
    # what policy=None means.
    monkeypatch.delenv("FSDPA_POLICY", raising=False)
