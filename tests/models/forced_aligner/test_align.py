"""`make_clip` and `align`'s checks: words from text or given, ids from a tokenizer or given, each refusal
naming its field; a clip without words aligns to nothing and leaves the others as they are alone."""

from __future__ import annotations

import pytest
import torch

from v2.models.forced_aligner.align import Clip, align, make_clip
from v2.models.forced_aligner.model import ForcedAligner
from v2.models.forced_aligner.words import LanguageError

WAVE = torch.zeros(16000)


def test_text_split_and_tokenized() -> None:
    clip = make_clip(WAVE, 16000, "Hello, world!", tokenize=lambda w: [len(w), 7])
    assert clip.words == ("Hello", "world")
    assert clip.word_ids == ((5, 7), (5, 7))


def test_given_words_and_ids() -> None:
    clip = make_clip(WAVE, 16000, words=["a", "b"], word_ids=[[1], [2, 3]])
    assert clip == Clip(WAVE, ("a", "b"), ((1,), (2, 3)))


@pytest.mark.parametrize("kwargs, field", [
    ({"sample_rate": 24000, "text": "a", "word_ids": [[1]]}, "sample_rate: the aligner reads 16000 Hz"),
    ({"sample_rate": 16000}, "text: give the text or its words"),
    ({"sample_rate": 16000, "text": "a", "words": ["a"], "word_ids": [[1]]}, "words: give either"),
    ({"sample_rate": 16000, "words": ["a", ""], "word_ids": [[1], [2]]}, "words: every word"),
    ({"sample_rate": 16000, "text": "a b"}, "word_ids: no tokenizer"),
    ({"sample_rate": 16000, "text": "a b", "word_ids": [[1]]}, "word_ids: 1 entries for 2 words"),
    ({"sample_rate": 16000, "text": "a b", "word_ids": [[1], []]}, "word_ids: every word needs"),
])
def test_refusals_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        make_clip(WAVE, **kwargs)


def test_language_refused() -> None:
    with pytest.raises(LanguageError, match="language: 'Klingon'"):
        make_clip(WAVE, 16000, "a", language="Klingon", word_ids=[[1]])


def test_special_ids_and_audio_refused(aligner: ForcedAligner) -> None:
    with pytest.raises(ValueError, match="word_ids: clip 0 holds id 151705"):
        align(aligner, [Clip(WAVE, ("a",), ((151705,),))])
    with pytest.raises(ValueError, match="word_ids: clip 0 holds id 152064"):
        align(aligner, [Clip(WAVE, ("a",), ((152064,),))])
    with pytest.raises(ValueError, match="audio: the clip holds NaN"):
        align(aligner, [Clip(torch.full((8000,), float("nan")), ("a",), ((1,),))])
    with pytest.raises(ValueError, match=r"audio: one mono clip"):
        align(aligner, [Clip(torch.zeros(2, 8000), ("a",), ((1,),))])


def test_clip_without_words(aligner: ForcedAligner) -> None:
    wave = torch.randn(12000, generator=torch.Generator().manual_seed(1)) * 0.1
    some = Clip(wave, ("x", "y"), ((10,), (11,)))
    out = align(aligner, [Clip(WAVE, (), ()), some])
    assert out[0].words == [] and out[0].classes == []
    assert out[1] == align(aligner, [some])[0] and len(out[1].words) == 2
    assert all(w.start <= w.end for w in out[1].words)
