"""A word aligner added to the Qwen3-Omni cascade aligns the reply it speaks: the family tells what its reply
speaks (`spoken()`: the thinker's ids and their text), and the aligner times each word of it once the audio has
ended, in order, within the audio."""

from __future__ import annotations

from typing import Iterator

import pytest

from v2.models.forced_aligner.words import split_words
from v2.runtime import Runtime


class WordPerId:
    """The card's tokenizer, but whose text is one word per id (the seeded card's bytes tokenizer decodes its
    random ids to little or no text, so there would be nothing to align)."""

    def __init__(self, tokenizer: object = None) -> None:
        self.tokenizer = tokenizer

    def __getattr__(self, name: str) -> object:
        return getattr(self.tokenizer, name)

    def decode(self, ids: list[int]) -> str:
        return " ".join(f"w{i % 97}" for i in ids)


@pytest.fixture(scope="module")
def rt() -> Iterator[Runtime]:
    with Runtime.from_card("qwen3_omni_tiny", device="cpu", aligner="forced_aligner_tiny") as runtime:
        yield runtime


def test_the_reply_is_aligned_word_by_word(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rt.family, "tokenizer", WordPerId(rt.family.tokenizer))
    r = rt.submit({"messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 6, "max_frames": 40,
                   "seed": 1, "timestamps": "word"}).result(120)  # a hang check
    assert r.error is None and r.text_ids
    spoken = WordPerId().decode(list(r.text_ids))
    assert [w.word for w in r.words] == split_words(spoken, None)
    seconds = r.audio.shape[1] / r.sample_rate
    assert all(0 <= w.start <= w.end <= seconds + 1e-6 for w in r.words)
    assert all(a.start <= b.start for a, b in zip(r.words, r.words[1:]))


def test_a_text_only_reply_has_no_words(rt: Runtime) -> None:
    r = rt.submit({"messages": [{"role": "user", "content": "Hi"}], "modalities": ["text"], "max_tokens": 3,
                   "seed": 1, "timestamps": "word"}).result(120)  # a hang check
    assert r.error is None and r.words == ()
