"""The release's word rule (README "Words"): the fixture's cases, the rule's corners, Japanese (nagisa) and Korean
(soynlp's LTokenizer over the release's word list), and the refusals naming the language."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.models.forced_aligner.conftest import CASES
from v2.models.forced_aligner import words as words_module
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


def test_japanese_by_nagisa() -> None:
    # nagisa's words (the release pins 0.2.11), punctuation-only ones dropped; kanji are not split one each
    assert split_words("私は学生です。東京に住んでいます！", "Japanese") == [
        "私", "は", "学生", "です", "東京", "に", "住ん", "で", "い", "ます"]


def test_korean_by_ltokenizer_with_the_word_list(tmp_path: Path) -> None:
    words = tmp_path / "korean_dict_jieba.dict"
    words.write_text("안녕 10 x\n학생 5 n\n\n", encoding="utf-8")  # the release's format: word, count, tag
    assert split_words("안녕하세요 저는 학생입니다.", "korean", korean_dict=words) == [
        "안녕", "하세요", "저는", "학생", "입니다"]
    # without the list's scores no eojeol is cut: the list is what makes the release's split
    empty = tmp_path / "empty.dict"
    empty.write_text("", encoding="utf-8")
    assert split_words("안녕하세요 저는", "Korean", korean_dict=empty) == ["안녕하세요", "저는"]


def test_korean_without_its_word_list_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(words_module, "find_korean_dict", lambda: None)
    with pytest.raises(LanguageError, match="language: 'Korean' needs the release's word list korean_dict_jieba"):
        split_words("안녕하세요", "Korean")
    with pytest.raises(LanguageError, match="not found at"):
        split_words("안녕하세요", "Korean", korean_dict=tmp_path / "missing.dict")


def test_missing_splitters_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nagisa", None)  # an import of it raises ImportError
    monkeypatch.setitem(sys.modules, "soynlp.tokenizer", None)
    words_module._korean_tokenizer.cache_clear()
    with pytest.raises(LanguageError, match="language: 'Japanese' needs nagisa"):
        split_words("私は", "Japanese")
    listed = tmp_path / "k.dict"
    listed.write_text("안녕 1 x\n", encoding="utf-8")
    with pytest.raises(LanguageError, match="language: 'Korean' needs soynlp"):
        split_words("안녕", "Korean", korean_dict=listed)
    words_module._korean_tokenizer.cache_clear()


def test_unknown_language_refused() -> None:
    with pytest.raises(LanguageError, match="language: 'Klingon'"):
        split_words("a", "Klingon")


def test_japanese_words_leave_the_float_environment_as_it_was() -> None:
    """nagisa's DyNet is compiled with fast-math: loading it sets flush-to-zero / denormals-are-zero, which would
    change every later float operation of the thread (and break the exact rule). Run in a fresh interpreter, so
    the import is the first one."""
    pytest.importorskip("nagisa")
    script = ("import sys\n"
              "from v2.models.forced_aligner.words import split_words\n"
              "tiny = float.fromhex('0x0.0000000000001p-1022')\n"
              "assert tiny * 1.0 > 0\n"
              "assert split_words('私は学生です。', 'Japanese')\n"
              "sys.exit(0 if tiny * 1.0 > 0 else 3)\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
