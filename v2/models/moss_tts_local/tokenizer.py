"""Text tokenizers for channel 0 of prompt rows.

Owns: the byte-level tokenizer of the tiny card (UTF-8 bytes as ids 0..255) and the release's BPE
tokenizer loaded from its `tokenizer.json` through the `tokenizers` package. Both encode without
adding special tokens.
Must not know: rows, prompts' layout, the model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


class TextTokenizer(Protocol):
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...


class ByteTokenizer:
    """UTF-8 bytes as token ids 0..255."""

    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))


class JsonTokenizer:
    """A `tokenizer.json` (e.g. the release's Qwen BPE), no special tokens added."""

    def __init__(self, file: Path) -> None:
        from tokenizers import Tokenizer

        if not file.is_file():
            raise FileNotFoundError(f"tokenizer file not found: {file}")
        self._tok = Tokenizer.from_file(str(file))
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids


def load_tokenizer(kind: str, checkpoint: Path | None = None) -> TextTokenizer:
    """kind "bytes" or "json" (then `checkpoint/tokenizer.json`)."""
    if kind == "bytes":
        return ByteTokenizer()
    if kind == "json":
        if checkpoint is None:
            raise ValueError("tokenizer 'json' needs a checkpoint directory holding tokenizer.json")
        return JsonTokenizer(Path(checkpoint) / "tokenizer.json")
    raise ValueError(f"unknown tokenizer kind {kind!r} (expected 'bytes' or 'json')")
