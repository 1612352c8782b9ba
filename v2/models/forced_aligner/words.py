"""The release's word rule: a transcript -> the words the aligner places timestamp markers after.

Owns: `split_words(text, language)` as the release's `tokenize_space_lang` (every listed language except
Japanese and Korean): split on whitespace, keep only `'` and letters / digits (Unicode categories L*, N*)
inside each piece without splitting it, drop empty pieces, then make every CJK ideograph its own word and
each maximal run of other kept characters one word; the release's language names (`LANGUAGES`, matched
without regard to case); the refusal of Japanese and Korean, whose release splitters (nagisa; soynlp with the
release's own dictionary scores) are not part of this build, naming the language and the way around it
(give the words).
Must not know: tokens, ids, tensors, the model, the runtime.
"""

from __future__ import annotations

import unicodedata

LANGUAGES = ("Chinese", "English", "Cantonese", "French", "German", "Italian", "Japanese", "Korean",
             "Portuguese", "Russian", "Spanish")
UNSUPPORTED = {"japanese": "nagisa", "korean": "soynlp's LTokenizer with the release's dictionary scores"}
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


def check_language(language: str | None) -> None:
    """Refuse a language that is not the release's or that this build cannot split (None: the default rule)."""
    if language is None:
        return
    if not isinstance(language, str):
        raise LanguageError(f"language: must be a language name, got {type(language).__name__}")
    key = language.strip().lower()
    if key in UNSUPPORTED:
        raise LanguageError(f"language: {language!r} is not supported: the release splits its words with "
                            f"{UNSUPPORTED[key]}, which this build does not include; pass the words instead")
    if key not in {name.lower() for name in LANGUAGES}:
        raise LanguageError(f"language: {language!r} is not one the aligner lists ({', '.join(LANGUAGES)})")


def split_words(text: str, language: str | None = None) -> list[str]:
    """The words of `text` by the release's rule (see the module docstring); [] when nothing is kept."""
    if not isinstance(text, str):
        raise ValueError(f"text: must be a string, got {type(text).__name__}")
    check_language(language)
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
