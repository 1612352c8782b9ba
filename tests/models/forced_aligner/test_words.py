"""The release's word rule (README "Words"): the fixture's cases, the rule's corners, and the refusals."""

from __future__ import annotations

import pytest

from tests.models.forced_aligner.conftest import CASES
from v2.models.forced_aligner.words import LanguageError, split_words


@pytest.mark.parametrize("case", CASES)
def test_fixture_cases(fmeta: dict, case: str) -> None:
    c = fmeta["cases"][case]
    assert split_words(c["text"], c["language"]) == c["words"]


@pytest.mark.parametrize("text, words", [
    ("Hello, world! It's ...", ["Hello", "world", "It's"]),
    ("13", ["13"]),
    ("今天天气", ["今", "天", "天", "气"]),
    ("用Python写", ["用", "Python", "写"]),
    ("well-known e-mail", ["wellknown", "email"]),        # punctuation is deleted, the piece is not split
    ("« Ça va ? » — oui.", ["Ça", "va", "oui"]),          # a piece of punctuation only is dropped
    ("naïve café ½", ["naïve", "café", "½"]),              # letters and numbers of every script are kept
    ("你好，世界！", ["你", "好", "世", "界"]),             # CJK punctuation deleted, ideographs one each
    ("  \t\n ", []),
    ("Привет мир", ["Привет", "мир"]),
])
def test_rule(text: str, words: list[str]) -> None:
    assert split_words(text) == words


def test_language_names_any_case() -> None:
    assert split_words("a b", "english") == split_words("a b", "Spanish") == ["a", "b"]


@pytest.mark.parametrize("language", ["Japanese", "korean"])
def test_japanese_korean_refused_naming_it(language: str) -> None:
    with pytest.raises(LanguageError, match=f"language: '{language}'.*pass the words"):
        split_words("こんにちは", language)


def test_unknown_language_refused() -> None:
    with pytest.raises(LanguageError, match="language: 'Klingon'"):
        split_words("a", "Klingon")
