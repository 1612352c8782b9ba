"""Qwen3-TTS prompt layouts (modes, feeds, the dialect rule, bad fields) and the tokenizer wrapper."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import torch

from v2.models.qwen3_tts.config import Qwen3TTSConfig
from v2.models.qwen3_tts.prompt import NONE, SPEAKER, PromptError, PromptSpec, build, layout
from v2.models.qwen3_tts.tokenizer import Qwen3TTSTokenizer

from .conftest import KEYS, spec_of


@pytest.mark.parametrize("key", KEYS)
def test_layout_row_counts_are_known_before_embedding(qmodel, qref, qmeta, key):
    spec = spec_of(qmeta, qref, key)
    lay = layout(qmodel.cfg, spec)
    assert len(lay) == qref[f"{key}_prompt_embeds"].shape[0]
    assert len(lay.trailing) == qref[f"{key}_trailing_text"].shape[0]


def test_dialect_rule_and_codec_prefix(qmodel, qref, qmeta):
    cfg = qmodel.cfg
    cv = spec_of(qmeta, qref, "cv")  # Vivian, English
    eric = dataclasses.replace(cv, speaker="Eric", language="Auto")
    lay = layout(cfg, eric)  # Auto + dialect speaker: the think form with the dialect's id
    prefix = [c for c in lay.codec if c != NONE][:4]
    assert prefix == [cfg.codec.think, cfg.codec.think_bos, cfg.languages["sichuan_dialect"], cfg.codec.think_eos]
    english = layout(cfg, dataclasses.replace(eric, language="English"))  # not Chinese/auto: the language stays
    assert [c for c in english.codec if c != NONE][2] == cfg.languages["english"]
    auto = layout(cfg, dataclasses.replace(cv, language="auto"))  # no dialect: nothink, three ids
    assert [c for c in auto.codec if c != NONE][:3] == [cfg.codec.nothink, cfg.codec.think_bos, cfg.codec.think_eos]
    assert cfg.speakers["vivian"] in auto.codec
    xv = layout(cfg, spec_of(qmeta, qref, "xv"))
    assert xv.codec.count(SPEAKER) == 1


def test_0b6_custom_voice_drops_the_instruction(qconfig, qref, qmeta):
    d = copy.deepcopy(qconfig)
    d["tts_model_size"] = "0b6"
    spec = spec_of(qmeta, qref, "cvd")
    assert len(layout(Qwen3TTSConfig.from_dict(d), spec)) == len(layout(Qwen3TTSConfig.from_dict(qconfig), spec)) - len(spec.instruct_ids)


def test_default_feed_follows_the_reference_api():
    ids = (1,) * 9
    assert not PromptSpec("custom_voice", ids).streaming_feed() and not PromptSpec("voice_design", ids).streaming_feed()
    assert PromptSpec("voice_clone", ids).streaming_feed() and PromptSpec("voice_design", ids, non_streaming=False).streaming_feed()


@pytest.mark.parametrize("change, field", [
    (dict(speaker="nobody"), "speaker"),
    (dict(language="klingon"), "language"),
    (dict(mode="sing"), "mode"),
    (dict(input_ids=(151644, 77091, 198, 151645, 198, 151644, 77091, 198)), "input_ids"),
    (dict(input_ids=(151644, 77091, 198, 10**7, 151645, 198, 151644, 77091, 198)), "input_ids"),
    (dict(instruct_ids=()), "instruct_ids"),
])
def test_bad_prompt_fields_are_named(qmodel, qref, qmeta, change, field):
    spec = dataclasses.replace(spec_of(qmeta, qref, "cv"), **change)
    with pytest.raises(PromptError, match=field):
        layout(qmodel.cfg, spec)


def test_voice_clone_needs_its_inputs(qmodel, qref, qmeta):
    icl = spec_of(qmeta, qref, "icl")
    with pytest.raises(PromptError, match="ref_ids"):
        layout(qmodel.cfg, dataclasses.replace(icl, ref_ids=None))
    with pytest.raises(PromptError, match="ref_frames"):
        layout(qmodel.cfg, dataclasses.replace(icl, ref_frames=0))
    with pytest.raises(PromptError, match="speaker_embedding"):
        build(qmodel, icl, ref_codes=torch.from_numpy(qref["icl_ref_codes"]))
    with pytest.raises(PromptError, match="ref_codes"):
        build(qmodel, icl, speaker=torch.from_numpy(qref["spk_embedding"]))
    with pytest.raises(PromptError, match="speaker"):
        layout(qmodel.cfg, dataclasses.replace(icl, speaker="vivian"))


def _byte_level_files(tmp_path):
    """A small real byte-level BPE (vocab.json + merges.txt) with a few merges."""
    from tokenizers import pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    merges = [("a", "s"), ("as", "s"), ("i", "s"), ("t", "a"), ("ass", "is"), ("assis", "ta"), ("n", "t"),
              ("assista", "nt"), ("u", "s"), ("us", "e"), ("use", "r"), ("Ġ", "w")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    (tmp_path / "merges.txt").write_text("#version: 0.2\n" + "\n".join(f"{a} {b}" for a, b in merges) + "\n")
    return vocab


def test_tokenizer_wraps_text_in_the_chat_template(tmp_path, qmodel):
    vocab = _byte_level_files(tmp_path)
    ids = qmodel.cfg.text
    tok = Qwen3TTSTokenizer.from_dir(tmp_path, ids)
    nl = vocab["Ċ"]
    text = "Hello world, wie geht's?"
    t = tok.text_ids(text)
    assert t[:3] == (ids.im_start, vocab["assistant"], nl) and t[-5:] == (ids.im_end, nl, ids.im_start, vocab["assistant"], nl)
    assert tok.decode(list(t[3:-5])) == text and vocab["Ġw"] in t
    ins = tok.instruct_ids("calm")
    assert ins[:3] == (ids.im_start, vocab["user"], nl) and ins[-2:] == (ids.im_end, nl)
    assert tok.instruct_ids("") is None
    ref = tok.ref_ids("ja")
    assert ref[:3] == (ids.im_start, vocab["assistant"], nl) and ref[-2:] == (ids.im_end, nl)
    # the ids make a prompt the builder accepts; tokenizer.json gives the same ids
    layout(qmodel.cfg, PromptSpec("custom_voice", t, language="english", speaker="ryan", instruct_ids=ins))
    (tmp_path / "json").mkdir()
    tok._tok.save(str(tmp_path / "json" / "tokenizer.json"))  # type: ignore[attr-defined]
    assert Qwen3TTSTokenizer.from_dir(tmp_path / "json", ids).text_ids(text) == t


def test_tokenizer_files_missing_is_a_clear_error(tmp_path, qmodel):
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        Qwen3TTSTokenizer.from_dir(tmp_path, qmodel.cfg.text)
