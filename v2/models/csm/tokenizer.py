"""The CSM text tokenizer: the release's `tokenizer.json` (Llama-3's) and the ids of one turn's text.

Owns: loading `tokenizer.json` through the `tokenizers` package (a checkpoint without one has no tokenizer:
`from_dir` returns None and the prompt builder asks for ids), and a turn's text ids: `[{speaker}]{text}`
encoded without special tokens (the prompt builder puts `<|begin_of_text|>` / `<|end_of_text|>` around them
from the config's ids, as the reference's chat template does).
Must not know: rows, the model, requests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class CsmTokenizer:
    """Text -> ids, as the reference's processor tokenizes a rendered turn (add_special_tokens=False)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tok = tokenizer

    @classmethod
    def from_dir(cls, path: str | Path) -> "CsmTokenizer | None":
        """`path/tokenizer.json`, or None when the checkpoint has none; an unreadable file is a ValueError."""
        from tokenizers import Tokenizer

        file = Path(path) / "tokenizer.json"
        if not file.is_file():
            return None
        try:
            return cls(Tokenizer.from_file(str(file)))
        except Exception as e:  # tokenizers raises its own exception type for bad files
            raise ValueError(f"{file}: not a readable tokenizer.json ({e})") from e

    def encode(self, text: str) -> list[int]:
        """Plain text -> ids (no special tokens added)."""
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids))

    def turn_ids(self, speaker: str | int, text: str) -> tuple[int, ...]:
        """The ids of `[{speaker}]{text}`."""
        return tuple(self.encode(f"[{speaker}]{text}"))
