"""`python -m v2.bench.opentext` runs on every tiny card with its default frame budget and its last line is
JSON with every figure: a family that speaks an open request as one sequence (Qwen3-TTS, CSM) gets the
reply's budget, not one sentence's, so its request is not ended while its text is still coming; and a
request that does end before its text (a budget too small for it) is counted, not a traceback."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from tiny_cards import speech_cards
from v2.bench.opentext import main, reply, session, summary
from v2.bench.opentext_budget import Budget, budget, frame_cap, segments_per_sentence, takes_min_frames
from v2.runtime import Runtime

CARDS = list(speech_cards().values())  # every family of the registry that speaks a given text, by its tiny card
FIELDS = {"sessions", "written_s", "segments_per_session", "audio_s_per_session", "underruns", "underrun_wait_s",
          "whole_underruns", "whole_underrun_wait_s", "finishes", "text_cut_sessions",
          "first_sentence_to_audio_p50_s", "open_first_piece_to_audio_p50_s", "whole_ttfa_p50_s",
          "whole_first_piece_to_audio_p50_s", "switch_chunk_per_frame_p50_s", "other_chunk_per_frame_p50_s",
          "audio_held_at_switch_min_s", "audio_held_at_switch_p50_s"}


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["--concurrency", "1", "--rounds", "1", *argv]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("card", CARDS)
def test_the_budget_follows_how_the_family_speaks_open_text(card):
    rt = Runtime.from_card(card, device="cpu")
    try:
        cap, per_segment = frame_cap(rt), segments_per_sentence(rt)
        h = rt.open({"text": "One sentence here. And a second one.", "seed": 1, "max_frames": cap})
        h.end_text()
        assert (len(h.result(120).segments) == 2) == per_segment  # the probe says what a reply does
        plan = budget(rt, 30, 5)
        assert plan.card_cap == cap and plan.per == ("segment" if per_segment else "request")
        assert plan.frames == (min(30, cap) if per_segment else min(150, cap))
        long = budget(rt, 30, 2, text_bytes=100)  # one frame per byte of text, at most, and one after it
        assert long.frames == (min(30, cap) if per_segment else min(101, cap))
        assert set(plan.request()) == ({"max_frames", "min_frames"} if plan.floor else {"max_frames"})
        with pytest.raises(ValueError, match="--frames"):
            budget(rt, 0, 5)
    finally:
        rt.close()


@pytest.mark.parametrize("card", CARDS)
def test_runs_on_each_tiny_card_with_its_defaults(capsys, card):
    # two sentences; one where the family takes a text row a frame: the tiny card's tokenizer is byte-level and
    # two sentences (131 bytes) pass its cap (120 frames), which fast frames may reach before the text ends
    sentences = 1 if card == "qwen3_tts_tiny" else 2
    assert len(reply(sentences, 0).encode()) < 120 or sentences == 2
    report = _run(capsys, "--card", card, "--sentences", str(sentences))
    assert report["card"] == card and report["frames_per_sentence"] == 30
    c1 = report["c1"]
    assert FIELDS <= set(c1), FIELDS - set(c1)
    assert c1["text_cut_sessions"] == 0 and c1["sessions"] == 1
    per_segment = report["frame_cap_per"] == "segment"
    assert report["frames_per_request"] >= (30 if per_segment else min(30 * sentences, report["card_max_frames"]))
    assert report["frames_per_request"] <= report["card_max_frames"]
    assert c1["segments_per_session"] == (sentences if per_segment else 1)
    assert c1["audio_s_per_session"] > 0 and c1["whole_ttfa_p50_s"] > 0
    cut = report["cancel_c1"]
    assert cut["sessions"] == 1 and cut["anything_after_ack"] is False


def test_a_request_ended_by_its_cap_before_its_text_is_counted() -> None:
    rt = Runtime.from_card("qwen3_tts_tiny", device="cpu")
    try:
        small = Budget(2, "request", frame_cap(rt), takes_min_frames(rt))  # two frames: fewer than the text's rows
        out: dict[str, Any] = {}
        session(rt, reply(2, 0), 0, argparse.Namespace(budget=small, tokens_per_s=30.0), out)
        assert out["text_cut"] is True and out["finish"] == "length" and out["audio_s"] > 0
        assert summary([out], [{"underruns": 0, "waited_s": 0.0}])["text_cut_sessions"] == 1
    finally:
        rt.close()
