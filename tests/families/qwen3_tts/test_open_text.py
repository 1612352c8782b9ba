"""Qwen3-TTS open requests (`rt.open`): text fed while the request runs becomes the talker's trailing text rows.

The rule under test (designs/qwen3_tts.md, "Open text"): frame t is fed trailing row t, and a frame whose row
has not arrived waits (no plan, no batch row); it never takes tts_pad in its place. So the same text gives the
same audio whatever the pieces and their pace, and equals the text submitted whole under the streaming feed.
Runs on the seeded tiny card (its tokenizer: UTF-8 bytes) and, for the tokenising rule, a small real BPE."""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any, Iterator

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from v2.card import load_card
from v2.errors import RequestError

from holds import expiry_after_first_frame

from .conftest import wait_idle

TEXT = "Hello there, how are you today? I am fine.\tThe  end"
BASE = {"speaker": "vivian", "seed": 5, "max_frames": 64, "stream": True}
WAV = (np.sin(np.arange(24000 * 2) * 0.03).astype(np.float32) * 0.3, 24000)


def tiny(**runtime: Any) -> Any:
    from v2.runtime import Runtime

    card = load_card("qwen3_tts_tiny")
    if runtime:
        card = card.model_copy(update={"runtime": card.runtime.model_copy(update=runtime)})
    return Runtime.from_card(card, device="cpu")


@pytest.fixture(scope="module")
def ort() -> Iterator[Any]:
    rt = tiny()
    yield rt
    rt.close()


def leak_free(rt: Any) -> None:
    s = wait_idle(rt)
    rt.engine.kv.pager.blocks.check()
    assert not rt.engine.kv.pager.tables and s["kv_blocks_free"] == s["kv_blocks"]
    assert not rt.engine.requests.idle and not rt.engine.requests.inputs


def pieces_of(text: str, rng: random.Random) -> list[str]:
    out, pos = [], 0
    while pos < len(text):
        n = rng.randint(1, 9)
        out.append(text[pos:pos + n])
        pos += n
    return out


def speak(rt: Any, pieces: list[str], *, delays: list[float] | None = None, **request: Any):
    h = rt.open({**BASE, **request})
    chunks: list = []
    reader = threading.Thread(target=lambda: chunks.extend(h))
    reader.start()
    for i, p in enumerate(pieces):
        h.feed(p)
        if delays:
            time.sleep(delays[i % len(delays)])
    h.end_text()
    r = h.result(120)
    reader.join(30)
    streamed = np.concatenate([c.audio for c in chunks], axis=1) if chunks else np.zeros((1, 0), np.float32)
    return r, streamed, h


def whole(rt: Any, text: str, **request: Any) -> Any:
    return rt.submit({**BASE, "text": text, "text_feed": "streaming", "stream": False, **request}).result(120)


def frame_rows(rt: Any) -> int:
    return rt.stats()["kinds"].get("ar_frame", {}).get("rows", 0)


def test_pieces_at_any_pace_equal_the_text_submitted_whole_and_streamed_equals_final(ort):
    ref = whole(ort, TEXT)
    assert ref.finish_reason == "length" and len(ref.codes) == 64  # past the text's rows: its end, then pads
    rng = random.Random(4)
    for pieces, delays in (([TEXT], None), (pieces_of(TEXT, rng), [0.0]), (pieces_of(TEXT, rng), [0.03, 0.0, 0.002])):
        r, streamed, h = speak(ort, pieces, delays=delays)
        assert r.error is None and np.array_equal(r.codes, ref.codes) and np.array_equal(r.audio, ref.audio)
        assert np.array_equal(streamed, r.audio)
        assert [(m.text_start, m.text_end, m.frame_start, m.frame_end) for m in h.marks()] == \
            [(s.text_start, s.text_end, s.frame_start, s.frame_end) for s in r.segments] == [(0, len(TEXT), 0, 64)]
    leak_free(ort)


def test_a_frame_waits_for_its_text_row_and_waiting_costs_no_rows_or_steps(ort):
    """"Hello " decides 5 ids: the first in the prompt, 4 trailing rows, so 4 frames, then it waits."""
    h = ort.open({**BASE, "max_frames": 30})
    chunks: list = []
    reader = threading.Thread(target=lambda: chunks.extend(h))
    reader.start()
    start = frame_rows(ort)
    h.feed("Hello ")
    deadline = time.time() + 60
    while frame_rows(ort) - start < 4 and time.time() < deadline:
        time.sleep(0.02)
    before, rows = ort.stats(), frame_rows(ort)
    time.sleep(0.5)
    after = ort.stats()
    assert rows - start == 4 and frame_rows(ort) == rows  # frame 4's row has not arrived: no frame 4
    assert after["steps"] - before["steps"] < 40 and after["running"] == 1 and not h.done
    h.feed("wor")  # decides nothing yet ("wor" may go on)
    time.sleep(0.3)
    assert frame_rows(ort) == rows
    h.feed("ld. And on.")
    h.end_text()
    r = h.result(120)
    reader.join(30)
    ref = whole(ort, "Hello world. And on.", max_frames=30)
    assert np.array_equal(r.codes, ref.codes) and np.array_equal(r.audio, ref.audio)
    assert np.array_equal(np.concatenate([c.audio for c in chunks], axis=1), r.audio)
    leak_free(ort)


@pytest.mark.parametrize("clone", [{"x_vector_only": True}, {"reference_text": "A short transcript of it."}])
def test_a_clone_encodes_while_its_text_arrives(ort, clone):
    request = {"speaker": None, "reference_audio": WAV, **clone, "max_frames": 24}
    ref = whole(ort, TEXT, **request)
    r, streamed, _ = speak(ort, pieces_of(TEXT, random.Random(2)), delays=[0.0, 0.01], **request)
    assert np.array_equal(r.codes, ref.codes) and np.array_equal(r.audio, ref.audio)
    assert np.array_equal(streamed, r.audio)
    leak_free(ort)


@pytest.mark.exact
@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**40), cut=st.integers(1, len(TEXT) - 1))
def test_an_open_request_among_others_equals_itself_alone(ort, seed, cut):
    alone = whole(ort, TEXT, seed=seed, max_frames=20)
    others = [ort.submit({**BASE, "text": "Another request runs.", "seed": i, "max_frames": 25}) for i in range(2)]
    h = ort.open({**BASE, "seed": seed, "max_frames": 20})
    h.feed(TEXT[:cut])
    time.sleep(0.05)
    h.feed(TEXT[cut:])
    h.end_text()
    r = h.result(120)
    for o in others:
        o.result(120)
    assert np.array_equal(r.codes, alone.codes) and np.array_equal(r.audio, alone.audio)


def test_no_text_for_the_idle_timeout_ends_the_request_with_the_reason(monkeypatch):
    rt = tiny(input_idle_timeout_s=0.4)
    try:
        h = rt.open(BASE)
        h.feed("Half a wo")  # nothing decided: no prompt, never admitted
        r = h.result(30)
        assert r.finish_reason == "abort" and "no text arrived for 0.4 s" in r.error
        with pytest.raises(RuntimeError, match="has ended"):
            h.feed("rd.")
        # the idle timeout below is not checked until the first frame is made: a slow host's admission and
        # prefill cannot use it up before the first sentence is spoken
        expiry_after_first_frame(rt.engine.requests, rt.family.talker_loop, monkeypatch)
        h = rt.open(BASE)
        h.feed("Some words here and")  # admitted, speaks its rows, then waits for more
        r = h.result(30)
        assert r.finish_reason == "abort" and 0 < len(r.codes) < BASE["max_frames"]
        leak_free(rt)
    finally:
        rt.close()


def test_cancel_while_waiting_for_text_or_admission_and_an_empty_text_free_everything(ort):
    h = ort.open(BASE)
    h.cancel()
    assert h.result(30).finish_reason == "abort"
    h = ort.open(BASE)
    h.feed("One two three four ")
    next(iter(h))
    h.cancel()
    assert h.result(30).finish_reason == "abort"
    h = ort.open(BASE)
    h.feed("  \t ")
    h.end_text()
    r = h.result(30)
    assert r.finish_reason == "stop" and r.audio.shape[1] == 0 and len(r.codes) == 0
    leak_free(ort)


def test_refusals_name_the_field_and_a_refused_piece_harms_nothing(ort):
    for fields, name in (({"text_ids": [5]}, "text_ids"), ({"text_feed": "whole"}, "text_feed"),
                         ({"profile": "rollout"}, "profile"), ({"speaker": "nobody"}, "speaker"),
                         ({"temperature": -1.0}, "temperature"), ({"max_frames": 10**6}, "max_frames")):
        with pytest.raises(RequestError, match=f"^{name}"):
            ort.open({**BASE, **fields})
    limit = load_card("qwen3_tts_tiny").loops.talker.max_text_chars
    h = ort.open({**BASE, "max_frames": 12})
    h.feed("Fine words. ")
    with pytest.raises(RequestError, match="^text: .*max_text_chars"):
        h.feed("x" * limit)
    h.end_text()
    with pytest.raises(RequestError, match="^text: the text has already ended"):
        h.feed("more")
    r = h.result(60)
    assert np.array_equal(r.codes, whole(ort, "Fine words. ", max_frames=12).codes)
    leak_free(ort)


# ----- the tokenising rule, without the runtime ------------------------------------------------------
@pytest.fixture(scope="module")
def bpe(tmp_path_factory: Any, ort: Any) -> Any:
    """A small real byte-level BPE with Qwen2's pre-tokeniser (the release tokenizer's loading path)."""
    from tokenizers import pre_tokenizers

    from v2.models.qwen3_tts.tokenizer import Qwen3TTSTokenizer

    tmp_path = tmp_path_factory.mktemp("bpe")
    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    merges = [("a", "s"), ("as", "s"), ("i", "s"), ("t", "a"), ("ass", "is"), ("assis", "ta"), ("n", "t"),
              ("assista", "nt"),  # the template's role word is one id, as in the release vocab
              ("Ġ", "a"), ("Ġa", "b"), ("a", "b"), ("ab", "c"), (".", "Ċ"), ("Ġ", "Ġ"), ("Ċ", "Ċ"), ("Ġ", "ĉ")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    (tmp_path / "merges.txt").write_text("#version: 0.2\n" + "\n".join(f"{a} {b}" for a, b in merges) + "\n")
    return Qwen3TTSTokenizer.from_dir(tmp_path, ort.family.cfg.text)


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet=list("abc .,\n\t'1\u00e9\u0301\u4f60"), min_size=1, max_size=40), data=st.data())
def test_the_ids_are_the_whole_text_s_however_its_pieces_arrive(bpe, ort, text, data):
    """Chunks cut at decided word boundaries tokenise as the whole text does (bytes and a real BPE), and
    feeding any split gives the same ids and trailing rows."""
    from v2.families.qwen3_tts.open_text import OpenText

    opened = ort.family.opened
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(len(text) - 1, 1)), max_size=6))))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)]) if text[a:b]]
    for tok in (opened.tokenizer, bpe):
        fed = OpenText(opened.card, opened.cfg, tok, opened.defaults, None, opened.talker)
        results = []
        for split in ([text], pieces):
            _, work = opened.open_text(dict(BASE))
            for p in split:
                fed.feed(work, p, end=False)
            fed.feed(work, "", end=True)
            results.append((work.body, work.trailing, work.ready))
        assert results[0] == results[1]
        assert results[0][0] == tok.encode(text)
