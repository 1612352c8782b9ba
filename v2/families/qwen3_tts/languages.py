"""Qwen3-TTS's `language` values: "Auto", a language name of the checkpoint, or the ISO 639-1 code of one.

Owns: the ISO 639-1 table (a code -> the language's English name, lower-case, as the release config.json
spells the keys of `talker_config.codec_language_id`), resolving a request's `language` onto the checkpoint's
names (`resolve`: "en" -> "English", "CHINESE" -> "Chinese", case-insensitive), and its refusal: a
`RequestError` naming `language` and listing every value accepted.
Must not know: the request's other fields, the model, cards, the prompt layout.
"""

from __future__ import annotations

from typing import Iterable

from v2.errors import RequestError

AUTO = "Auto"  # the reference API's "no language id": the model decides
ISO_639_1: dict[str, str] = {
    "zh": "chinese", "en": "english", "de": "german", "it": "italian", "pt": "portuguese", "es": "spanish",
    "ja": "japanese", "ko": "korean", "fr": "french", "ru": "russian", "ar": "arabic", "nl": "dutch",
    "pl": "polish", "tr": "turkish", "uk": "ukrainian", "vi": "vietnamese", "th": "thai", "id": "indonesian",
    "hi": "hindi", "sv": "swedish", "cs": "czech", "el": "greek", "he": "hebrew", "fi": "finnish",
    "da": "danish", "no": "norwegian", "hu": "hungarian", "ro": "romanian", "ms": "malay",
}
_CODE_OF = {name: code for code, name in ISO_639_1.items()}
_SHOWN = 40  # characters of a refused value shown in the message


def spelled(name: str) -> str:
    """A checkpoint's language key as a request's value reads: its first letter capital ("english" -> "English")."""
    return name[:1].upper() + name[1:]


def accepted(names: Iterable[str]) -> str:
    """Every accepted value, for a refusal: "Auto, Chinese (zh), English (en), ..., Sichuan_dialect"."""
    shown = [f"{spelled(n)} ({_CODE_OF[n]})" if n in _CODE_OF else spelled(n) for n in sorted(set(names))]
    return ", ".join([AUTO, *shown])


def resolve(value: str, names: Iterable[str]) -> str:
    """`value` as the checkpoint names it: "Auto", one of `names` (the checkpoint's language keys, lower-case)
    or the ISO 639-1 code of one, case-insensitive; the name comes back spelled as `spelled`. Anything else
    is a `RequestError` naming `language` with the accepted values."""
    known = {n.lower() for n in names}
    key = value.lower()
    if key == AUTO.lower():
        return AUTO
    name = key if key in known else ISO_639_1.get(key)
    if name is None or name not in known:
        shown = value if len(value) <= _SHOWN else value[:_SHOWN - 1] + "…"
        raise RequestError(f"language: {shown!r} is not a language of this checkpoint; give one of "
                           f"{accepted(known)} (a name or its ISO 639-1 code, any case)", field="language")
    return spelled(name)
