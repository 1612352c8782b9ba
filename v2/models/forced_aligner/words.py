"""The release's word rule: a transcript -> the words the aligner places timestamp markers after.

Owns: `split_words(text, language)` as the release's `encode_timestamp`: for every listed language except
Japanese and Korean (and for no language) its `tokenize_space_lang`: split on whitespace, keep only `'` and
letters / digits (Unicode categories L*, N*) inside each piece without splitting it, drop empty pieces, then make
every CJK ideograph its own word and each maximal run of other kept characters one word; Japanese: nagisa's
words (`nagisa.tagging`), each cleaned to its kept characters, empty ones dropped; Korean: soynlp's `LTokenizer`
scored by the release's word list (`korean_dict_jieba.dict`, every listed word scored 1.0), each token cleaned
the same way. The release's language names (`LANGUAGES`, matched without regard to case); refusals naming the
language when it is not listed, or when its splitter (the `align` extra's nagisa / soynlp) or the Korean word
list is missing. The word list is the release package's file (qwen-asr, `qwen_asr/inference/assets/`): given
as a path, or found in an installed `qwen_asr` package (located, never imported).
Must not know: tokens, ids, tensors, the model, the runtime.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import importlib.util
import unicodedata
from collections.abc import Iterator
from pathlib import Path

LANGUAGES = ("Chinese", "English", "Cantonese", "French", "German", "Italian", "Japanese", "Korean",
             "Portuguese", "Russian", "Spanish")
KOREAN_DICT = "korean_dict_jieba.dict"
# the release's CJK ideograph blocks (transformers also counts U+2F800-2FA1F; the release does not)
_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
        (0x2B820, 0x2CEAF), (0xF900, 0xFAFF))


class LanguageError(ValueError):
    """`language` names a language this build cannot split; the message names it."""


def is_cjk(ch: str) -> bool:
    code = ord(ch)
    return any(lo <= code <= hi for lo, hi in _CJK)


def _kept(ch: str) -> bool:
    return ch == "'" or unicodedata.category(ch)[0] in "LN"


def check_language(language: str | None) -> str | None:
    """The lower-cased name of a listed language (None: the default rule); an unlisted one is refused."""
    if language is None:
        return None
    if not isinstance(language, str):
        raise LanguageError(f"language: must be a language name, got {type(language).__name__}")
    key = language.strip().lower()
    if key not in {name.lower() for name in LANGUAGES}:
        raise LanguageError(f"language: {language!r} is not one the aligner lists ({', '.join(LANGUAGES)})")
    return key


def _clean(token: str) -> str:
    return "".join(ch for ch in token if _kept(ch))


def _japanese(text: str) -> list[str]:
    with _float_env_kept():  # nagisa's DyNet is built with fast-math: its import sets flush-to-zero
        try:
            import nagisa  # type: ignore[import-not-found]  # the `align` extra; loads its own small model
        except ImportError as e:
            raise LanguageError("language: 'Japanese' needs nagisa (pip install 'v2[align]'), which is not "
                                "installed; pass the words instead") from e
        words = nagisa.tagging(text).words
    return [w for w in (_clean(t) for t in words) if w]


@contextlib.contextmanager
def _float_env_kept() -> Iterator[None]:
    """This thread's floating-point environment as it was before the block (C's fegetenv / fesetenv): a library
    compiled with -ffast-math sets flush-to-zero and denormals-are-zero when it loads, which would change the
    bits of every later float operation of the thread (the exact rule's and the models')."""
    libm = _libm()
    if libm is None:
        yield
        return
    saved = ctypes.create_string_buffer(1024)  # larger than any fenv_t
    libm.fegetenv(saved)
    try:
        yield
    finally:
        libm.fesetenv(saved)


@functools.cache
def _libm() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("m")
    return ctypes.CDLL(name) if name else None


def find_korean_dict() -> Path | None:
    """The release's Korean word list inside an installed `qwen_asr` package (located, not imported), if any."""
    try:
        spec = importlib.util.find_spec("qwen_asr")
    except (ImportError, ValueError):
        return None
    for place in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(place) / "inference" / "assets" / KOREAN_DICT
        if path.is_file():
            return path
    return None


@functools.lru_cache(maxsize=2)
def _korean_tokenizer(path: Path) -> object:
    try:
        from soynlp.tokenizer import LTokenizer  # type: ignore[import-not-found]  # the `align` extra
    except ImportError as e:
        raise LanguageError("language: 'Korean' needs soynlp (pip install 'v2[align]'), which is not "
                            "installed; pass the words instead") from e
    scores: dict[str, float] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                scores[line.split()[0]] = 1.0
    return LTokenizer(scores=scores)


def _korean(text: str, korean_dict: Path | None) -> list[str]:
    path = korean_dict if korean_dict is not None else find_korean_dict()
    if path is None or not Path(path).is_file():
        raise LanguageError(f"language: 'Korean' needs the release's word list {KOREAN_DICT} (from the qwen-asr "
                            f"package; {'not found at ' + str(path) if path is not None else 'none given or installed'})"
                            "; pass its path or the words instead")
    tokens = _korean_tokenizer(Path(path)).tokenize(text)  # type: ignore[attr-defined]
    return [w for w in (_clean(t) for t in tokens) if w]


def split_words(text: str, language: str | None = None, *, korean_dict: Path | None = None) -> list[str]:
    """The words of `text` by the release's rule for `language` (see the module docstring); [] when nothing is
    kept. `korean_dict`: the release's Korean word list (default: the installed qwen-asr package's)."""
    if not isinstance(text, str):
        raise ValueError(f"text: must be a string, got {type(text).__name__}")
    key = check_language(language)
    if key == "japanese":
        return _japanese(text)
    if key == "korean":
        return _korean(text, korean_dict)
    words: list[str] = []
    for piece in text.split():
        run = ""
        for ch in piece:
            if not _kept(ch):
                continue
            if is_cjk(ch):
                if run:
                    words.append(run)
                    run = ""
                words.append(ch)
            else:
                run += ch
        if run:
            words.append(run)
    return words
