"""Qwen3-Omni's text tokenizers for chat rendering: the release's Qwen BPE, and UTF-8 bytes for seeded cards.

Owns: `ChatTokenizer` (what the chat renderer needs: one piece of text between special tokens -> ids, and ids
-> text), `ByteTokenizer` (the seeded card's: UTF-8 bytes as ids; the config's role ids decode as their
words), `ReleaseTokenizer` (the checkpoint's
`tokenizer.json`, else `vocab.json` + `merges.txt` as a byte-level BPE with Qwen2's pre-tokenizer split and NFC)
and `build_chat_tokenizer` (which one a card's `tokenizer` setting and checkpoint give). The special tokens of
the chat layout and the role words never reach a tokenizer: the renderer places their ids (the config's) itself.
Must not know: the chat template, messages, audio, requests, the runtime.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, Sequence

from v2.models.qwen3_omni.config import TokenIds
from v2.models.qwen3_tts.tokenizer import QWEN2_PATTERN

class ChatTokenizer(Protocol):
    """One piece of text (no special tokens in it) -> ids, as the release tokenizer encodes the text between
    two special tokens; and ids -> text."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes as ids (seeded weights ship no tokenizer files); in decoded text the config's role ids are
    their words and other ids past the bytes are left out."""

    def __init__(self, ids: TokenIds) -> None:
        self._words = {ids.system: "system", ids.user: "user", ids.assistant: "assistant"}

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        out, run = [], bytearray()
        for i in ids:
            if i < 256:
                run.append(i)
                continue
            out.append(run.decode("utf-8", "replace"))
            run = bytearray()
            out.append(self._words.get(i, ""))
        out.append(run.decode("utf-8", "replace"))
        return "".join(out)


class ReleaseTokenizer:
    """The release's byte-level BPE through the `tokenizers` package."""

    def __init__(self, tokenizer: object) -> None:
        self._tok = tokenizer

    @classmethod
    def from_dir(cls, path: str | Path) -> "ReleaseTokenizer":
        """`path/tokenizer.json`, else `path/vocab.json` + `path/merges.txt`; FileNotFoundError when neither."""
        from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

        path = Path(path)
        if (path / "tokenizer.json").is_file():
            return cls(Tokenizer.from_file(str(path / "tokenizer.json")))
        vocab, merges = path / "vocab.json", path / "merges.txt"
        if not (vocab.is_file() and merges.is_file()):
            raise FileNotFoundError(f"{path}: no tokenizer.json, and no vocab.json + merges.txt")
        try:
            tok = Tokenizer(models.BPE.from_file(str(vocab), str(merges)))
        except Exception as e:  # tokenizers raises its own exception type for bad files
            raise ValueError(f"{path}: vocab.json / merges.txt are not a byte-level BPE ({e})") from e
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        tok.decoder = decoders.ByteLevel()
        return cls(tok)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)  # type: ignore[attr-defined]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(ids)))  # type: ignore[attr-defined]


def build_chat_tokenizer(kind: str, checkpoint_dir: str | Path | None, ids: TokenIds) -> ChatTokenizer | None:
    """The card's tokenizer: "bytes" -> `ByteTokenizer`; "release" -> the checkpoint's files, or None when the
    checkpoint ships none (requests then give `prompt_ids`)."""
    if kind == "bytes":
        return ByteTokenizer(ids)
    if kind != "release":
        raise ValueError(f"tokenizer: expected 'release' or 'bytes', got {kind!r}")
    if checkpoint_dir is None:
        return None
    try:
        return ReleaseTokenizer.from_dir(checkpoint_dir)
    except FileNotFoundError:
        return None
