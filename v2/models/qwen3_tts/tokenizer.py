"""The Qwen3-TTS text tokenizer: the release's Qwen BPE and the chat-template ids around a text.

Owns: loading `tokenizer.json`, or `vocab.json` + `merges.txt` (byte-level BPE with Qwen2's pre-tokenizer
split and NFC), through the `tokenizers` package, and the three templates the prompt builder takes:
`<|im_start|>assistant\\n{text}<|im_end|>\\n<|im_start|>assistant\\n` (the text), `<|im_start|>user\\n
{instruction}<|im_end|>\\n` and `<|im_start|>assistant\\n{ref_text}<|im_end|>\\n`. As the reference's
tokenizer does, the special tokens split the template first and each piece between them is encoded on
its own (so "assistant\\n" and the text are one piece); `<|im_start|>` / `<|im_end|>` are the config's ids.
Text is encoded as text: special-token strings inside it are not turned into special ids.
Must not know: rows, the model, requests.
"""

from __future__ import annotations

from pathlib import Path

from v2.models.qwen3_tts.config import TextIds

# Qwen2's pre-tokenizer split (the release tokenizer's `Split` pattern, behaviour "isolated")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")


def _from_vocab_merges(vocab: Path, merges: Path):  # -> tokenizers.Tokenizer
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    tok = Tokenizer(models.BPE.from_file(str(vocab), str(merges)))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


class Qwen3TTSTokenizer:
    """Text -> the token-id tuples of `PromptSpec` (input_ids, instruct_ids, ref_ids)."""

    def __init__(self, tokenizer: object, ids: TextIds) -> None:
        self._tok = tokenizer
        self.ids = ids

    @classmethod
    def from_dir(cls, path: str | Path, ids: TextIds) -> "Qwen3TTSTokenizer":
        """`path/tokenizer.json`, else `path/vocab.json` + `path/merges.txt`; a clear error when neither exists."""
        from tokenizers import Tokenizer

        path = Path(path)
        if (path / "tokenizer.json").is_file():
            return cls(Tokenizer.from_file(str(path / "tokenizer.json")), ids)
        vocab, merges = path / "vocab.json", path / "merges.txt"
        if vocab.is_file() and merges.is_file():
            try:
                return cls(_from_vocab_merges(vocab, merges), ids)
            except Exception as e:  # tokenizers raises its own exception type for bad files
                raise ValueError(f"{path}: vocab.json / merges.txt are not a byte-level BPE ({e})") from e
        raise FileNotFoundError(f"{path}: no tokenizer.json, and no vocab.json + merges.txt")

    def encode(self, text: str) -> list[int]:
        """Plain text -> ids (no special tokens added)."""
        return list(self._tok.encode(text, add_special_tokens=False).ids)  # type: ignore[attr-defined]

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids)  # type: ignore[attr-defined]

    def text_ids(self, text: str) -> tuple[int, ...]:
        """`<|im_start|>assistant\\n{text}<|im_end|>\\n<|im_start|>assistant\\n`."""
        s, e = self.ids.im_start, self.ids.im_end
        return (s, *self.encode(f"assistant\n{text}"), e, *self.encode("\n"), s, *self.encode("assistant\n"))

    def instruct_ids(self, instruction: str) -> tuple[int, ...] | None:
        """`<|im_start|>user\\n{instruction}<|im_end|>\\n`; None for an empty instruction (none)."""
        if not instruction:
            return None
        return (self.ids.im_start, *self.encode(f"user\n{instruction}"), self.ids.im_end, *self.encode("\n"))

    def ref_ids(self, ref_text: str) -> tuple[int, ...]:
        """`<|im_start|>assistant\\n{ref_text}<|im_end|>\\n` (ICL voice clone)."""
        return (self.ids.im_start, *self.encode(f"assistant\n{ref_text}"), self.ids.im_end, *self.encode("\n"))
