"""Every sampling setting a request may carry yields a valid distribution on both heads: finite logprobs
<= 0, sampled tokens inside the processed support, and rollout == teacher-forced recompute within 1e-5."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from v2.runtime import Runtime

from conftest import check_exact
from domain import head, penalty


@pytest.fixture(scope="module")
def runtime():
    rt = Runtime.from_card("moss_tts_local_tiny", device="cpu")
    yield rt
    rt.close()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(head, head, penalty, st.integers(0, 2**32), st.integers(0, 6))
def test_the_whole_accepted_domain_gives_valid_exact_logprobs(runtime, stop, audio, rep, seed, min_frames):
    (t,) = runtime.rollout(["Every setting is a distribution."], n=1, seed=seed, max_frames=10, min_frames=min_frames,
                           stop=stop, audio=audio, repetition_penalty=rep).trajectories(120)
    assert np.isfinite(t.logprobs).all() and (t.logprobs <= 0).all()
    assert t.stop_logprob is None or (np.isfinite(t.stop_logprob) and t.stop_logprob <= 0)
    check_exact(runtime.model, t)  # finite = every sampled token has a finite processed logit: in the support
