"""CSM config parsing (every refusal names its field), generation defaults, strict loading, and the prompt
builder's text path (tokenizer) and refusals."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from v2.models.config import ConfigError
from v2.models.csm.config import CsmConfig, CsmSampling, GenerationDefaults
from v2.models.csm.model import Csm
from v2.models.csm.prompt import PromptError, Turn, layout
from v2.models.csm.tokenizer import CsmTokenizer
from v2.models.weights import CheckpointError
from v2.sampling_settings import HeadSampling

from .conftest import CHECKPOINT, KEYS, turns_of

DEPTH = "depth_decoder_config"


def test_config_reads_every_field_from_the_file(cconfig):
    cfg = CsmConfig.from_dict(cconfig)
    d = cconfig[DEPTH]
    for stack, src in ((cfg.backbone, cconfig), (cfg.depth, d)):
        assert (stack.hidden_size, stack.num_layers, stack.num_heads, stack.num_kv_heads, stack.head_dim,
                stack.intermediate_size, stack.rms_norm_eps) == (
            src["hidden_size"], src["num_hidden_layers"], src["num_attention_heads"], src["num_key_value_heads"],
            src["head_dim"], src["intermediate_size"], src["rms_norm_eps"])
        assert stack.vocab_size == cconfig["vocab_size"]
    for rope, src in ((cfg.backbone_rope, cconfig), (cfg.depth_rope, d)):
        r = src["rope_parameters"]
        assert rope is not None and (rope.factor, rope.low_freq_factor, rope.high_freq_factor,
                                     rope.original_max_position_embeddings) == (
            r["factor"], r["low_freq_factor"], r["high_freq_factor"], r["original_max_position_embeddings"])
    assert cfg.backbone.rope_theta == cconfig["rope_parameters"]["rope_theta"]
    assert (cfg.num_codebooks, cfg.vocab_size, cfg.text_vocab_size) == (
        cconfig["num_codebooks"], cconfig["vocab_size"], cconfig["text_vocab_size"])
    ids = cfg.ids
    assert (ids.bos, ids.eos, ids.audio, ids.audio_eos, ids.codebook_eos, ids.codebook_pad) == tuple(
        cconfig[k] for k in ("bos_token_id", "eos_token_id", "audio_token_id", "audio_eos_token_id",
                             "codebook_eos_token_id", "codebook_pad_token_id"))


def test_legacy_rope_fields_parse_the_same(cconfig):
    d = copy.deepcopy(cconfig)
    for node in (d, d[DEPTH]):
        params = node.pop("rope_parameters")
        node["rope_theta"] = params.pop("rope_theta")
        node["rope_scaling"] = params
    assert CsmConfig.from_dict(d) == CsmConfig.from_dict(cconfig)
    d[DEPTH]["rope_scaling"] = None
    assert CsmConfig.from_dict(d).depth_rope is None


def _set(d: dict, path: str, value: object) -> None:
    *parents, leaf = path.split(".")
    for p in parents:
        d = d[p]
    if value is None:
        del d[leaf]
    else:
        d[leaf] = value


@pytest.mark.parametrize("path, value, field", [
    ("hidden_size", None, "hidden_size"),
    ("num_codebooks", 1, "num_codebooks"),
    (f"{DEPTH}.head_dim", 7, f"{DEPTH}.head_dim"),
    ("num_key_value_heads", 3, "num_attention_heads"),
    (f"{DEPTH}.rms_norm_eps", None, f"{DEPTH}.rms_norm_eps"),
    ("rope_parameters.rope_type", "yarn", "rope_parameters.rope_type"),
    (f"{DEPTH}.rope_parameters.factor", None, f"{DEPTH}.rope_parameters.factor"),
    ("rope_parameters.high_freq_factor", 0.5, "rope_parameters.high_freq_factor"),
    ("rope_parameters.rope_theta", -1.0, "rope_parameters.rope_theta"),
    (f"{DEPTH}.backbone_hidden_size", 64, f"{DEPTH}.backbone_hidden_size"),
    (f"{DEPTH}.num_codebooks", 16, f"{DEPTH}.num_codebooks"),
    (f"{DEPTH}.vocab_size", 2048, f"{DEPTH}.vocab_size"),
    ("attention_bias", True, "attention_bias"),
    (f"{DEPTH}.mlp_bias", True, f"{DEPTH}.mlp_bias"),
    ("hidden_act", "gelu", "hidden_act"),
    ("codebook_eos_token_id", 2051, "codebook_eos_token_id"),
    ("audio_token_id", 128256, "audio_token_id"),
    ("audio_eos_token_id", 128002, "audio_eos_token_id"),
    ("eos_token_id", None, "eos_token_id"),
    ("tie_codebooks_embeddings", "yes", "tie_codebooks_embeddings"),
    ("model_type", "llama", "model_type"),
    (DEPTH, None, DEPTH),
])
def test_bad_config_fields_are_named(cconfig, path, value, field):
    d = copy.deepcopy(cconfig)
    _set(d, path, value)
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        CsmConfig.from_dict(d)


def test_generation_defaults_come_from_the_file():
    file = json.loads((CHECKPOINT / "generation_config.json").read_text())
    d = GenerationDefaults.from_dict(file)
    assert d.max_new_tokens == file["max_new_tokens"]
    assert d.sampling.backbone == HeadSampling(file["temperature"], file["top_k"], 1.0)
    assert d.sampling.depth == HeadSampling(file["depth_decoder_temperature"], file["depth_decoder_top_k"], 1.0)
    e = GenerationDefaults.from_dict({**file, "depth_decoder_top_k": 7, "top_p": 0.8})
    assert e.sampling.depth.top_k == 7 and e.sampling.backbone.top_p == 0.8 and e.sampling.depth.top_p == 1.0
    g = GenerationDefaults.from_dict(file, do_sample=False, depth_decoder_do_sample=False, max_new_tokens=8)
    assert g.sampling == CsmSampling.greedy() and g.max_new_tokens == 8
    # keys the file does not have: transformers' GenerationConfig defaults (greedy)
    assert GenerationDefaults.from_dict({"max_new_tokens": 3}).sampling == CsmSampling.greedy()
    with pytest.raises(ConfigError, match="max_new_tokens"):
        GenerationDefaults.from_dict({k: v for k, v in file.items() if k != "max_new_tokens"})
    with pytest.raises(ConfigError, match="depth_decoder_do_sample"):
        GenerationDefaults.from_dict({**file, "depth_decoder_do_sample": "yes"})
    with pytest.raises(ConfigError, match="depth_decoder_top_k"):
        GenerationDefaults.from_dict({**file, "depth_decoder_top_k": 2.5})
    with pytest.raises(ConfigError, match="temperature"):
        GenerationDefaults.from_dict({**file, "temperature": -1.0})
    with pytest.raises(ValueError, match="unknown"):
        GenerationDefaults.from_dict(file, beams=2)


def test_bf16_weights_load_exactly_into_float32_and_codec_keys_are_left(cmodel):
    params = dict(cmodel.named_parameters())
    with safe_open(str(CHECKPOINT / "model.safetensors"), framework="pt") as f:
        keys = list(f.keys())
        assert any(k.startswith("codec_model.") for k in keys)
        for key in ("lm_head.weight", "depth_decoder.codebooks_head.weight", "embed_text_tokens.weight"):
            assert torch.equal(params[key], f.get_tensor(key).float())
        q = f.get_tensor("backbone_model.layers.1.self_attn.q_proj.weight").float()
        assert torch.equal(params["backbone_model.layers.1.self_attn.qkv_proj.weight"][: q.shape[0]], q)
    assert not any(k.endswith(("q_norm.weight", "k_norm.weight")) for k in params)  # a Llama attention


def _edited_checkpoint(tmp_path: Path, edit) -> Path:
    out = tmp_path / "ckpt"
    out.mkdir()
    (out / "config.json").write_text((CHECKPOINT / "config.json").read_text())
    tensors = {k: v for k, v in load_file(str(CHECKPOINT / "model.safetensors")).items() if not k.startswith("codec_model.")}
    edit(tensors)
    save_file(tensors, str(out / "model.safetensors"))
    return out


def test_loader_errors_name_every_bad_key(tmp_path):
    def edit(t: dict) -> None:
        del t["backbone_model.norm.weight"]
        t["lm_head.weight"] = t["lm_head.weight"][:-1]
        t["extra.weight"] = torch.zeros(2)

    with pytest.raises(CheckpointError) as e:
        Csm.from_pretrained(_edited_checkpoint(tmp_path, edit))
    msg = str(e.value)
    assert "backbone_model.norm.weight" in msg and "extra.weight" in msg
    assert "lm_head.weight: checkpoint [2050, 48] vs model [2051, 48]" in msg


def test_one_stored_audio_table_fills_both_when_tied(tmp_path, cconfig):
    depth_key = "depth_decoder.model.embed_tokens.weight"
    path = _edited_checkpoint(tmp_path, lambda t: t.pop(depth_key))
    m = Csm.from_pretrained(path)
    assert torch.equal(m.get_parameter(depth_key), m.get_parameter("backbone_model.embed_tokens.embed_audio_tokens.weight"))
    (path / "config.json").write_text(json.dumps({**cconfig, "tie_codebooks_embeddings": False}))
    with pytest.raises(CheckpointError, match=depth_key):
        Csm.from_pretrained(path)


def stand_in_tokenizer(meta: dict, path: Path) -> CsmTokenizer:
    """The fixture's stand-in tokenizer as a tokenizer.json: words with their leading space, single digits
    and single punctuation marks, looked up in `stand_in_text_pieces`."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    vocab = dict(meta["stand_in_text_pieces"], **{"<unk>": 127999})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r" ?[A-Za-z]+|\d|[^\sA-Za-z\d]"), behavior="isolated")
    tok.save(str(path / "tokenizer.json"))
    loaded = CsmTokenizer.from_dir(path)
    assert loaded is not None
    return loaded


@pytest.mark.parametrize("key", KEYS)
def test_text_turns_render_speaker_and_text_through_the_tokenizer(cmodel, cref, cmeta, tmp_path, key):
    tok = stand_in_tokenizer(cmeta, tmp_path)
    p = next(x for x in cmeta["prompts"] if x["key"] == key)
    by_ids = turns_of(cmeta, cref, key)
    turns = [Turn(t["role"], text=t["text"], audio=by_ids[i].audio) for i, t in enumerate(p["turns"])]
    assert list(layout(cmodel.cfg, turns, tok).ids) == cref[f"{key}_input_ids"].tolist()


def test_tokenizer_files(tmp_path):
    assert CsmTokenizer.from_dir(CHECKPOINT) is None  # the tiny checkpoint has none
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match="tokenizer.json"):
        CsmTokenizer.from_dir(tmp_path)


@pytest.mark.parametrize("turns, field", [
    ([], "turns"),
    ([Turn("0", text="Hello")], r"turns\[0\]\.text: this checkpoint has no tokenizer\.json"),
    ([Turn("0", text_ids=(1, 2)), Turn("1")], r"turns\[1\]"),
    ([Turn("0", text="a", text_ids=(1,))], r"turns\[0\]"),
    ([Turn("0", text_ids=(1, 128002))], r"turns\[0\]\.text_ids"),
    ([Turn("0", text_ids=(1, 128256))], r"turns\[0\]\.text_ids"),
    ([Turn("0", text_ids=())], r"turns\[0\]\.text_ids"),
    ([Turn("0", text_ids=(1,), audio=torch.zeros(3, 31, dtype=torch.long))], r"turns\[0\]\.audio"),
    ([Turn("0", text_ids=(1,), audio=torch.zeros(3, 32))], r"turns\[0\]\.audio"),
    ([Turn("0", text_ids=(1,)), Turn("1", text_ids=(2,), audio=torch.full((2, 32), 2051))], r"turns\[1\]\.audio"),
])
def test_prompt_refusals_name_the_field(cmodel, turns, field):
    with pytest.raises(PromptError, match=field):
        layout(cmodel.cfg, turns)
