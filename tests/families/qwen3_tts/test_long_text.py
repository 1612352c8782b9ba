"""Long text for Qwen3-TTS on the tiny card (seeded weights, bytes as text ids, CPU): a text over the card's
`max_segment_chars` is split at sentence ends and spoken as consecutive segments of one request (one handle,
one stream, `result.segments`); each later segment is the in-context layout with the segment before as its
reference (its text and codes) after the request's own speaker row, sampled with `segment_seed`, and equals
that prompt through the reference loop; streamed == whole across segments (one codec stream: the decode of
every frame, after the reference for an in-context clone); nothing leaks; refusals name `text`."""

from __future__ import annotations

import random
import tomllib
from dataclasses import replace

import numpy as np
import pytest
import torch

from v2.card import card_path
from v2.families.qwen3_tts.card import Qwen3Card
from v2.families.qwen3_tts.prepare import read_recording
from v2.families.qwen3_tts.segments import carried_spec
from v2.long_text import segment_seed
from v2.models.qwen3_tts.generate import generate
from v2.models.qwen3_tts.prompt import PromptSpec, build
from v2.errors import RequestError
from v2.runtime import Runtime
from v2.sentences import segments, spoken

from holds import Hold

from .conftest import wait_idle

SEGMENT_CHARS = 60
WAV = (np.random.default_rng(4).standard_normal(24000) * 0.1).astype(np.float32)  # 1 s at 24 kHz
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()


def long_text(n: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    out = ""
    while len(out) < n:
        out += " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 7))).capitalize() + rng.choice([". ", "! ", "? ", "; "])
    return out.rstrip() + "."


def card(**talker) -> Qwen3Card:
    data = tomllib.loads(card_path("qwen3_tts_tiny").read_text())
    data["loops"]["talker"].update({"max_segment_chars": SEGMENT_CHARS, **talker})
    return Qwen3Card.model_validate(data)


@pytest.fixture(scope="module")
def rt():
    runtime = Runtime.from_card(card(), device="cpu")
    yield runtime
    runtime.close()


def leak_free(rt: Runtime) -> None:
    s = wait_idle(rt)
    rt.engine.kv.pager.blocks.check()
    assert not rt.engine.kv.pager.tables and s["kv_blocks_free"] == s["kv_blocks"] and s["kv_preempted"] == 0


def ids(text: str) -> tuple[int, ...]:
    return tuple(text.encode())  # the tiny card's tokenizer: UTF-8 bytes


def templated(kind: str, text: str) -> tuple[int, ...]:
    """The chat template on the tiny card: <|im_start|> 300, <|im_end|> 301, the role words one id each."""
    body, head = ids(text), (300, 305, 10)  # <|im_start|>assistant\n
    if kind == "text":
        return (*head, *body, 301, 10, *head)
    if kind == "instruction":
        return (300, 306, 10, *body, 301, 10)
    return (*head, *body, 301, 10)


MODES = {
    "custom_voice": {"speaker": "ryan", "instruction": "Slowly."},
    "voice_design": {"instruction": "A calm low voice.", "text_feed": "streaming"},
    "x_vector": {"reference_audio": (WAV, 24000), "x_vector_only": True},
    "icl": {"reference_audio": (WAV, 24000), "reference_text": "Some words here."},
}


def first_spec(mode: str, text: str, fields: dict) -> PromptSpec:
    """The first segment's spec as the reference API lays it out."""
    instruct = templated("instruction", fields["instruction"]) if "instruction" in fields else None
    feed = fields.get("text_feed")
    ns = None if feed is None else feed == "whole"
    if mode in ("custom_voice", "voice_design"):
        return PromptSpec(mode=mode, input_ids=templated("text", text), speaker=fields.get("speaker"),
                          instruct_ids=instruct, non_streaming=ns)
    return PromptSpec(mode="voice_clone", input_ids=templated("text", text), x_vector_only=mode == "x_vector",
                      ref_ids=templated("reference_text", fields["reference_text"]) if mode == "icl" else None,
                      non_streaming=ns)


@pytest.mark.parametrize("mode", list(MODES))
def test_each_segment_is_the_in_context_continuation_of_the_one_before(rt, mode):
    """Segment i's codes == the reference loop on its carried prompt (segment i-1's text and codes as the
    reference, the request's speaker row, instruction and feed), seeded `segment_seed(seed, i)`."""
    fam, model = rt.family, rt.model
    text = long_text(200, seed=1)
    req = {"text": text, "seed": 5, "max_frames": 4, "temperature": 0.9, "top_k": 40, **MODES[mode]}
    r = rt.submit(req).result(120)
    spans = segments(text, SEGMENT_CHARS)
    assert r.error is None and len(r.segments) == len(spans) >= 4
    assert [(s.text_start, s.text_end) for s in r.segments] == spans
    sampling = fam.prepare(fam.parse(req)).sampling
    xvec = ref = None
    if "reference_audio" in req:
        wav = read_recording(req["reference_audio"], fam.codec_spec, 30.0, codes=True)
        xvec = model.speaker_embedding(torch.from_numpy(wav.speaker_audio)).float()
        if mode == "icl":
            ref = fam.encoder.encode([torch.from_numpy(wav.codec_audio)])[0]
    said = [spoken(text[s:e]) for s, e in spans]
    first = spec = replace(first_spec(mode, said[0], MODES[mode]), ref_frames=0 if ref is None else len(ref))
    for i, s in enumerate(r.segments):
        if i > 0:
            prev = r.codes[r.segments[i - 1].frame_start:r.segments[i - 1].frame_end]
            spec = replace(carried_spec(first, templated("text", said[i]), templated("reference_text", said[i - 1])),
                           ref_frames=len(prev))
            ref = torch.from_numpy(prev)
        rows, trailing = build(model, spec, speaker=xvec, ref_codes=ref if spec.icl else None)
        assert s.prompt_rows == len(rows), i
        cap = s.frame_end - s.frame_start
        alone = generate(model, rows, trailing, max_new_tokens=4 + 1, min_new_tokens=2, sampling=sampling,
                         seed=segment_seed(5, i))
        assert cap == len(alone) and np.array_equal(alone.numpy(), r.codes[s.frame_start:s.frame_end]), i
    leak_free(rt)


@pytest.mark.parametrize("mode", ["custom_voice", "icl"])
def test_streamed_equals_whole_across_segments_one_stream(rt, mode):
    fam = rt.family
    text = long_text(260, seed=2)
    handle = rt.submit({"text": text, "seed": 3, "max_frames": 5, "stream": True, **MODES[mode]})
    chunks = list(handle)
    r = handle.result(120)
    assert len(r.segments) == len(segments(text, SEGMENT_CHARS)) >= 4 and r.finish_reason == "length"
    assert [c.seq for c in chunks] == list(range(len(chunks))) and chunks[-1].final and not any(c.final for c in chunks[:-1])
    assert np.array_equal(np.concatenate([c.audio for c in chunks], axis=1), r.audio)  # bit for bit
    frame = 0
    for s in r.segments:  # frame ranges tile the codes
        assert s.frame_start == frame and s.frame_end - s.frame_start == 5
        frame = s.frame_end
    assert frame == len(r.codes) == r.metrics.frames
    assert r.metrics.prompt_rows == sum(s.prompt_rows for s in r.segments)
    codes = torch.from_numpy(r.codes)
    if mode == "icl":  # the reference decoded first, its samples cut; the stream never restarts
        wav = read_recording(MODES[mode]["reference_audio"], fam.codec_spec, 30.0, codes=True)
        ref = fam.encoder.encode([torch.from_numpy(wav.codec_audio)])[0]
        whole = fam.codec.decode(torch.cat([ref, codes])[None])[0, len(ref) * fam.codec.hop:]
    else:
        whole = fam.codec.decode(codes[None])[0]
    assert torch.equal(torch.from_numpy(r.audio[0]), whole)
    leak_free(rt)


def test_a_short_text_is_one_segment_as_before(rt):
    text = "Hello there. A second sentence; and a third!"
    r = rt.submit({"text": text, "speaker": "ryan", "seed": 7, "max_frames": 6}).result(60)
    plain = rt.submit({"text_ids": list(ids(text)), "speaker": "ryan", "seed": 7, "max_frames": 6}).result(60)
    assert np.array_equal(r.codes, plain.codes) and np.array_equal(r.audio, plain.audio)
    (s,) = r.segments
    assert (s.text_start, s.text_end, s.frame_start, s.frame_end) == (0, len(text), 0, len(r.codes))
    assert s.prompt_rows == r.metrics.prompt_rows == plain.metrics.prompt_rows
    leak_free(rt)


def test_cancel_mid_way_and_preemption_free_everything(rt, monkeypatch):
    text = long_text(600, seed=3)
    # the engine is held at its 36th talker row (about half of the 13 segments; the third chunk is made by the
    # 28th) until the cancel is posted: the request cannot end first however fast the host is
    rows = iter(range(1, 10**6))
    hold = Hold(rt.family.talker_loop, monkeypatch, lambda state: next(rows) >= 36)
    handle = rt.submit({"text": text, "speaker": "ryan", "seed": 9, "max_frames": 5, "stream": True})
    try:
        for i, _ in enumerate(handle):
            if i == 2:
                handle.cancel()
                hold.release()
    finally:
        hold.release()
    r = handle.result(60)
    assert r.finish_reason == "abort" and 1 <= len(r.segments) < len(segments(text, SEGMENT_CHARS))
    assert r.segments[-1].frame_end == len(r.codes)
    leak_free(rt)


def test_preempted_segments_equal_alone():
    """A pool of 14 blocks of 16 rows (one request at full length): long texts wait for blocks for their next
    prompt and preempt each other while growing; codes and segments equal each alone."""
    with Runtime.from_card(card(kv_blocks=14, max_prompt_rows=200, max_frames=24), device="cpu") as small:
        reqs = [{"text": long_text(110, seed=10 + k), "speaker": "ryan", "seed": k, "max_frames": 24} for k in range(3)]
        alone = [small.submit(q).result(120) for q in reqs]
        together = [h.result(120) for h in small.submit_many(reqs)]
        for a, b in zip(alone, together):
            assert a.error is None and b.error is None and len(a.segments) >= 2
            assert np.array_equal(a.codes, b.codes) and a.segments == b.segments
        assert small.stats()["kv_preemptions"] > 0
        leak_free(small)


@pytest.mark.parametrize("request_, field, match", [
    ({"text": "word " * 300, "text_feed": "whole"}, "text", "cannot be split.*a sentence of 1499 characters"),
    ({"text": long_text(200), "profile": "rollout", "decode_audio": False}, "text", "rollout trajectory is one prompt"),
    ({"text": long_text(200), "max_frames": 700}, "max_frames", "exceeds"),
])
def test_text_that_cannot_be_spoken_as_segments_is_refused_naming_the_field(rt, request_, field, match):
    with pytest.raises(RequestError, match=f"^{field}: .*{match}"):
        rt.submit(request_)


def test_a_sentence_too_long_to_split_is_one_prompt_when_it_fits(rt):
    r = rt.submit({"text": "word " * 40, "speaker": "ryan", "seed": 1, "max_frames": 3}).result(60)  # no end mark
    assert len(r.segments) == 1 and (r.segments[0].text_start, r.segments[0].text_end) == (0, 200)
    with pytest.raises(RequestError, match=r"^text: a group shares one prompt"):
        rt.submit_many([{"text": long_text(200), "speaker": "ryan"}] * 2, share_prompt=True)
    leak_free(rt)


def test_a_later_prompt_with_no_room_for_carried_frames_is_refused_naming_text():
    with Runtime.from_card(card(max_segment_chars=100, max_prompt_rows=200), device="cpu") as small:
        text = ("a" * 95 + ". ") * 3  # a later prompt: 2 x 96 text rows in the whole feed
        with pytest.raises(RequestError, match=r"^text: segment 2 .*max_segment_chars"):
            small.submit({"text": text, "speaker": "ryan", "text_feed": "whole"})
