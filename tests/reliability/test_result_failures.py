"""A failure while a request's result is built (its family's assembly, its error form, the delivery of a
non-streaming request's audio) ends that request as an error and no other; the caller's handle never hangs."""

from __future__ import annotations

import pytest

from v2.runtime import Runtime

from conftest import wait_idle

CARDS = {"moss_tts_local_tiny": {}, "qwen3_tts_tiny": {"speaker": "vivian"}}


@pytest.fixture(scope="module", params=sorted(CARDS))
def rt(request):
    runtime = Runtime.from_card(request.param, device="cpu")
    runtime.extra = CARDS[request.param]
    yield runtime
    runtime.close()


def ask(rt: Runtime, text: str, **more) -> dict:
    return {"text": text, "seed": 3, "max_frames": 6, **rt.extra, **more}


@pytest.mark.parametrize("where", ["assembly", "both", "delivery"])
def test_a_failing_result_ends_only_its_request_as_an_error(rt, monkeypatch, where):
    real_result = rt.family.result
    doomed: set[int] = set()

    def result(record, outputs, reason, now):
        if record.id in doomed and (where == "both" or outputs):
            raise RuntimeError("injected in result")
        return real_result(record, outputs, reason, now)

    monkeypatch.setattr(rt.family, "result", result)
    bystander = rt.submit(ask(rt, "A bystander speaks on."))
    victim = rt.submit(ask(rt, "This one fails at the end.", stream=where != "delivery"))
    if where == "delivery":

        def deliver(chunks):
            raise RuntimeError("injected in delivery")

        monkeypatch.setattr(victim, "deliver", deliver)
        doomed.clear()
    else:
        doomed.add(victim.request_id)
    got = victim.result(30)
    assert got.finish_reason == "error" and "injected" in (got.error or "")
    assert got.audio.shape[1] == 0 or where == "assembly"  # the family's error form may keep what it made
    ok = bystander.result(30)
    assert ok.finish_reason in ("stop", "length") and ok.error is None and ok.audio.shape[1] > 0
    wait_idle(rt)
    again = rt.submit(ask(rt, "And the runtime goes on.")).result(30)
    assert again.finish_reason in ("stop", "length")
