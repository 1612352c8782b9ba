"""Prompt layout: the release template, reference blocks, and field-named errors."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from v2.models.moss_tts_local.prompt import PromptError, build_prompt, check_rows
from v2.models.moss_tts_local.tokenizer import ByteTokenizer, JsonTokenizer, load_tokenizer


def text_of(rows: torch.Tensor, cfg) -> str:
    """Channel 0 as text: bytes decoded, special ids as <name>, reference rows as #."""
    names = {v: k for k, v in vars(cfg.ids).items()}
    out = []
    for ch0 in rows[:, 0].tolist():
        out.append(chr(ch0) if ch0 < 256 else ("#" if ch0 == cfg.ids.audio_user_slot else f"<{names[ch0]}>"))
    return "".join(out)


def test_layout_without_reference(tiny_model):
    cfg = tiny_model.cfg
    rows = build_prompt(ByteTokenizer(), cfg, "Hello.", language="English", tokens=25)
    assert text_of(rows, cfg) == (
        "<im_start>user\n<user_inst>\n- Reference(s):\nNone\n- Instruction:\nNone\n- Tokens:\n25\n- Quality:\nNone"
        "\n- Sound Event:\nNone\n- Ambient Sound:\nNone\n- Language:\nEnglish\n- Text:\nHello.\n</user_inst>"
        "<im_end>\n<im_start>assistant\n<audio_start>")
    assert bool((rows[:, 1:] == cfg.audio_pad_code).all())
    assert rows.dtype == torch.long and rows.shape[1] == 13


def test_layout_with_two_references(tiny_model):
    cfg = tiny_model.cfg
    a, b = torch.randint(0, 1024, (3, 12)), torch.randint(0, 1024, (2, 12))
    rows = build_prompt(ByteTokenizer(), cfg, "Hi", reference_codes=[a, b], instruction="calm")
    text = text_of(rows, cfg)
    assert "Reference(s):\n<audio_start>###<audio_end><audio_start>##<audio_end>\n- Instruction:\ncalm\n" in text
    refs = rows[rows[:, 0] == cfg.ids.audio_user_slot, 1:]
    assert torch.equal(refs, torch.cat([a, b]))


def test_special_skeleton_matches_the_reference_prompt(ref_model, ref):
    """The fixture's p2 (text ids are stand-ins) and ours agree on every special and audio row."""
    cfg = ref_model.cfg
    ours = build_prompt(ByteTokenizer(), cfg, "Good morning.", reference_codes=torch.from_numpy(ref["p2_reference_codes"]),
                        instruction="calm voice", language="English")
    theirs = torch.from_numpy(ref["p2_input_ids"])
    special = lambda r: r[r[:, 0] >= cfg.ids.pad]  # noqa: E731
    assert torch.equal(special(ours), special(theirs))


def test_bad_prompt_fields_are_named(tiny_model):
    cfg = tiny_model.cfg
    with pytest.raises(PromptError, match="text"):
        build_prompt(ByteTokenizer(), cfg, "   ")
    with pytest.raises(PromptError, match=r"reference_codes\[0\]: expected shape"):
        build_prompt(ByteTokenizer(), cfg, "x", reference_codes=torch.zeros(4, 11, dtype=torch.long))
    with pytest.raises(PromptError, match=r"reference_codes\[1\]: row 0: codes must lie"):
        build_prompt(ByteTokenizer(), cfg, "x", reference_codes=[torch.zeros(1, 12, dtype=torch.long),
                                                                 torch.full((1, 12), 1024)])
    with pytest.raises(PromptError, match="tokens"):
        build_prompt(ByteTokenizer(), cfg, "x", tokens=0)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 20), st.integers(-5, 1100), st.integers(0, 12))
def test_check_rows_accepts_exactly_valid_rows(tiny_model, t, code, col):
    cfg = tiny_model.cfg
    rows = torch.full((t, 13), cfg.audio_pad_code, dtype=torch.long)
    rows[:, 0] = 65
    rows[0, col] = code
    ok = (0 <= code < cfg.backbone.vocab_size) if col == 0 else (0 <= code < 1024 or code == cfg.audio_pad_code)
    if ok:
        assert torch.equal(check_rows(cfg, rows), rows)
    else:
        with pytest.raises(PromptError, match="prompt_rows"):
            check_rows(cfg, rows)


def test_check_rows_refuses_wrong_shape_and_dtype(tiny_model):
    with pytest.raises(PromptError, match=r"prompt_rows: expected shape"):
        check_rows(tiny_model.cfg, torch.zeros(5, 12, dtype=torch.long))
    with pytest.raises(PromptError, match="integer"):
        check_rows(tiny_model.cfg, torch.zeros(5, 13))


def test_json_tokenizer_encodes_without_special_tokens(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"hello": 0, "world": 1, "[UNK]": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    loaded = load_tokenizer("json", tmp_path)
    assert isinstance(loaded, JsonTokenizer) and loaded.encode("hello world") == [0, 1]
    with pytest.raises(FileNotFoundError):
        load_tokenizer("json", tmp_path / "missing")
