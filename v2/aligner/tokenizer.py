"""A word -> its ids, as the aligner's prompt wants them (each word encoded alone, no leading space, no special
tokens): the release's byte-level BPE (`tokenizer.json`, else `vocab.json` + `merges.txt` with Qwen2's
pre-tokenizer split), or "bytes" (a word's UTF-8 bytes as ids 0..255: the seeded card's, needing no files).
Owns: loading those from a checkpoint directory, and `NoTokenizer`, what a checkpoint without tokenizer files
gets (every word refused, naming `text`: pass `word_ids`).
Must not know: tensors, the model, the runtime.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

# Qwen2's pre-tokenizer split (the release tokenizer's `Split` pattern, behaviour "isolated")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")

Tokenize = Callable[[str], Sequence[int]]


def byte_ids(word: str) -> list[int]:
    """The "bytes" tokenizer: a word's UTF-8 bytes."""
    return list(word.encode("utf-8"))


class NoTokenizer:
    """A checkpoint without tokenizer files: text cannot be turned into ids (the caller gives `word_ids`)."""

    def __init__(self, where: Path) -> None:
        self.where = where

    def __call__(self, word: str) -> Sequence[int]:
        raise ValueError(f"text: the aligner's checkpoint {self.where} has no tokenizer (tokenizer.json, or "
                         "vocab.json + merges.txt); give word_ids instead")


def bpe_tokenizer(path: Path) -> Tokenize:
    """The checkpoint's BPE (tokenizer.json, else vocab.json + merges.txt), or `NoTokenizer` when it has none."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    if (path / "tokenizer.json").is_file():
        tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    elif (path / "vocab.json").is_file() and (path / "merges.txt").is_file():
        tok = Tokenizer(models.BPE.from_file(str(path / "vocab.json"), str(path / "merges.txt")))
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        tok.decoder = decoders.ByteLevel()
    else:
        return NoTokenizer(path)

    def encode(word: str) -> list[int]:
        return list(tok.encode(word, add_special_tokens=False).ids)

    return encode
