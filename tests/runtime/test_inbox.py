"""Callers talk to the engine by messages: `submit`, `open`'s text, `cancel` and encodes are posted to the
engine's inbox and taken at the top of its next step; no caller thread writes the engine's queues."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from v2.runtime import Runtime
from v2.runtime.runtime import OverloadedError

RUNTIME_PY = Path(__file__).resolve().parents[2] / "v2" / "runtime" / "runtime.py"


def test_the_runtime_module_reaches_into_no_engine_queue():
    """`Runtime` names the engine's inbox and its read-only counts, never `engine.requests` / `.encoding`."""
    tree = ast.parse(RUNTIME_PY.read_text())
    reached = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
               and isinstance(node.value, ast.Attribute) and node.value.attr == "engine"}
    assert not reached & {"requests", "encoding", "kv", "scatter", "inflight"}, reached


@pytest.fixture
def rt():
    with Runtime.from_card("moss_tts_local_tiny") as runtime:
        yield runtime


def test_posted_requests_count_as_waiting_and_start_at_the_next_step(rt):
    cap = rt.family.max_waiting
    with rt._cond:  # the engine cannot take its inbox meanwhile (the lock is re-entrant for this thread)
        handles = rt.submit_many([{"text": "Posted.", "seed": i, "max_frames": 3} for i in range(3)])
        assert len(rt.engine.requests.waiting) == 0 and rt.engine.inbox.queued == 3  # posted, not written
        assert rt.stats()["waiting"] == 3
        with pytest.raises(OverloadedError, match="3 requests are already waiting"):
            rt.submit_many([{"text": "Too many.", "max_frames": 3}] * (cap - 2))
        handles[1].cancel()  # a message too, after the submit it cancels
    results = [h.result(timeout=60) for h in handles]
    assert [r.finish_reason for r in results] == ["length", "abort", "length"]
    assert rt.stats()["waiting"] == 0 and rt.engine.inbox.queued == 0


def test_an_open_request_s_text_arrives_through_the_inbox(rt):
    with rt._cond:
        handle = rt.open({"seed": 2, "max_frames": 4})
        handle.feed("Hello there.")
        handle.end_text()
        assert rt.engine.requests.inputs == set() and not rt.engine.requests.idle  # nothing written yet
    result = handle.result(timeout=60)
    assert result.error is None and len(result.codes) >= 1
