"""Prompt layout: text, reference-audio codes and style fields -> prompt rows [T, 13].

Owns: the release's user/assistant template (each text piece tokenised on its own, no special tokens
added, missing fields written "None"), reference-audio blocks, and validation of what goes in, with
errors that name the field.
Must not know: the model's weights, sampling, requests, the runtime.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from v2.models.moss_tts_local.config import MossTTSLocalConfig
from v2.models.moss_tts_local.tokenizer import TextTokenizer

FRAMES_PER_SECOND = 12.5


class PromptError(ValueError):
    """A prompt field is invalid; the message names the field (and row), `field` says which of this module's
    arguments it is: "text", "tokens", "reference_codes", "assistant_codes" or check_rows' `field`."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


def _field(value: object) -> str:
    return "None" if value is None or value == "" else str(value)


def _reference_rows(cfg: MossTTSLocalConfig, codes: Tensor, index: int, field: str = "reference_codes") -> Tensor:
    name = f"{field}[{index}]"
    if not isinstance(codes, Tensor):
        codes = torch.as_tensor(codes)
    if codes.dim() != 2 or codes.shape[1] != cfg.n_vq or codes.shape[0] < 1:
        raise PromptError(f"{name}: expected shape [N >= 1, {cfg.n_vq}], got {list(codes.shape)}", field=field)
    if codes.dtype.is_floating_point or codes.dtype == torch.bool:
        raise PromptError(f"{name}: expected integer codes, got {codes.dtype}", field=field)
    bad = ((codes < 0) | (codes >= cfg.codebook_size)).any(dim=1)
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise PromptError(f"{name}: row {row}: codes must lie in [0, {cfg.codebook_size}), got {codes[row].tolist()}",
                          field=field)
    n = codes.shape[0]
    rows = torch.full((n + 2, cfg.row_width), cfg.audio_pad_code, dtype=torch.long)
    rows[0, 0] = cfg.ids.audio_start
    rows[1:-1, 0] = cfg.ids.audio_user_slot
    rows[1:-1, 1:] = codes.long()
    rows[-1, 0] = cfg.ids.audio_end
    return rows


def build_prompt(tokenizer: TextTokenizer, cfg: MossTTSLocalConfig, text: str, *,
                 reference_codes: Tensor | Sequence[Tensor] | None = None, instruction: str | None = None,
                 tokens: int | None = None, quality: str | None = None, sound_event: str | None = None,
                 ambient_sound: str | None = None, language: str | None = None,
                 assistant_codes: Tensor | None = None) -> Tensor:
    """Lay out one prompt as rows [T, 13] (int64); it ends with the `audio_start` row, or, in continuation
    mode, with the prompt audio's rows after it.

    `tokens` is a duration target in frames (12.5 per second); `reference_codes` is one [N, 12] tensor
    or a sequence of them (one voice prompt each, in the user turn: "clone" mode). `assistant_codes`
    [N, 12] is audio the assistant has already spoken ("continuation" mode: `text` then holds its transcript
    followed by the new text, and generation continues after these rows).
    """
    if not isinstance(text, str) or not text.strip():
        raise PromptError("text: must be a non-empty string", field="text")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
        raise PromptError(f"tokens: duration target must be a positive number of frames, got {tokens!r}",
                          field="tokens")
    if reference_codes is None:
        refs: list[Tensor] = []
    elif isinstance(reference_codes, Tensor):
        refs = [reference_codes]
    else:
        refs = list(reference_codes)
    pieces: list[Tensor] = []

    def special(token_id: int) -> None:
        pieces.append(_text_rows(cfg, [token_id]))

    def say(s: str) -> None:
        pieces.append(_text_rows(cfg, tokenizer.encode(s)))

    special(cfg.ids.im_start)
    say("user\n")
    say("<user_inst>\n- Reference(s):\n")
    if refs:
        pieces.extend(_reference_rows(cfg, r, i) for i, r in enumerate(refs))
    else:
        say("None")
    say(f"\n- Instruction:\n{_field(instruction)}\n- Tokens:\n{_field(tokens)}\n- Quality:\n{_field(quality)}"
        f"\n- Sound Event:\n{_field(sound_event)}\n- Ambient Sound:\n{_field(ambient_sound)}"
        f"\n- Language:\n{_field(language)}\n- Text:\n")
    say(text)
    say("\n</user_inst>")
    special(cfg.ids.im_end)
    say("\n")
    special(cfg.ids.im_start)
    say("assistant\n")
    special(cfg.ids.audio_start)
    if assistant_codes is not None:
        rows = _reference_rows(cfg, assistant_codes, 0, "assistant_codes")[1:-1]  # [N, 13], no start/end rows
        rows[:, 0] = cfg.ids.audio_assistant_slot
        pieces.append(rows)
    return torch.cat(pieces)


def _text_rows(cfg: MossTTSLocalConfig, ids: list[int]) -> Tensor:
    rows = torch.full((len(ids), cfg.row_width), cfg.audio_pad_code, dtype=torch.long)
    rows[:, 0] = torch.tensor(ids, dtype=torch.long)
    return rows


def check_rows(cfg: MossTTSLocalConfig, rows: Tensor, field: str = "prompt_rows") -> Tensor:
    """Validate explicit prompt rows [T, 13]: shape, integer dtype, ids and codes in range."""
    if not isinstance(rows, Tensor):
        rows = torch.as_tensor(rows)
    if rows.dim() != 2 or rows.shape[1] != cfg.row_width or rows.shape[0] < 1:
        raise PromptError(f"{field}: expected shape [T >= 1, {cfg.row_width}], got {list(rows.shape)}", field=field)
    if rows.dtype.is_floating_point or rows.dtype == torch.bool:
        raise PromptError(f"{field}: expected integer ids, got {rows.dtype}", field=field)
    ch0, codes = rows[:, 0], rows[:, 1:]
    bad_id = (ch0 < 0) | (ch0 >= cfg.backbone.vocab_size)
    if bool(bad_id.any()):
        row = int(bad_id.nonzero()[0, 0])
        raise PromptError(f"{field}: row {row}: channel-0 id {int(ch0[row])} outside [0, {cfg.backbone.vocab_size})",
                          field=field)
    bad_code = ~((codes >= 0) & (codes < cfg.codebook_size) | (codes == cfg.audio_pad_code)).all(dim=1)
    if bool(bad_code.any()):
        row = int(bad_code.nonzero()[0, 0])
        raise PromptError(f"{field}: row {row}: codes must lie in [0, {cfg.codebook_size}) or be the pad code "
                          f"{cfg.audio_pad_code}, got {codes[row].tolist()}", field=field)
    return rows.long()
