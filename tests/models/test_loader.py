"""Loading: sharded or single files, tied aliases, and errors that name every bad key or field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from v2.models import CheckpointError, ConfigError
from v2.models.moss_tts_local.config import MossTTSLocalConfig
from v2.models.moss_tts_local.model import MossTTSLocal

from conftest import MODEL_DIR

SRC = MODEL_DIR / "checkpoint"


def copy_with(tmp_path: Path, edit=None, config_edit=None) -> Path:
    dst = tmp_path / "ckpt"
    dst.mkdir()
    tensors = load_file(str(SRC / "model.safetensors"))
    if edit:
        edit(tensors)
    save_file(tensors, str(dst / "model.safetensors"))
    config = json.loads((SRC / "config.json").read_text())
    if config_edit:
        config_edit(config)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def test_loads_in_requested_dtype_without_grad(ref_model):
    p = next(ref_model.parameters())
    assert p.dtype == torch.float32 and not p.requires_grad
    bf16 = MossTTSLocal.from_pretrained(SRC, dtype=torch.bfloat16)
    assert all(q.dtype == torch.bfloat16 for q in bf16.parameters())
    assert all(q.device.type == "cpu" for q in bf16.parameters())


def test_mismatch_lists_missing_unexpected_and_misshaped_keys(tmp_path):
    def edit(t):
        del t["transformer.layers.1.mlp.up_proj.weight"]
        t["local_transformer.wte.weight"] = torch.zeros(3, 64, dtype=torch.bfloat16)
        t["transformer.norm.weight"] = torch.ones(65, dtype=torch.bfloat16)

    with pytest.raises(CheckpointError) as e:
        MossTTSLocal.from_pretrained(copy_with(tmp_path, edit))
    msg = str(e.value)
    assert "missing keys (1): transformer.layers.1.mlp.up_proj.weight" in msg
    assert "unexpected keys (1): local_transformer.wte.weight" in msg
    assert "transformer.norm.weight: checkpoint [65] vs model [64]" in msg


def test_config_disagreeing_with_weights_names_the_keys(tmp_path):
    def cfg(c):
        c["qwen3_config"]["intermediate_size"] = 96

    with pytest.raises(CheckpointError, match=r"mlp\.gate_proj\.weight: checkpoint \[128, 64\] vs model \[96, 64\]"):
        MossTTSLocal.from_pretrained(copy_with(tmp_path, config_edit=cfg))


def test_tied_aliases_are_accepted_when_equal_and_refused_when_not(tmp_path, ref, ref_model):
    def add_equal(t):
        t["text_lm_head.weight"] = t["transformer.embed_tokens.weight"].clone()
        for c in range(12):
            t[f"audio_lm_heads.{c}.weight"] = t[f"audio_embeddings.{c}.weight"].clone()

    model = MossTTSLocal.from_pretrained(copy_with(tmp_path, add_equal))
    assert torch.equal(model.audio_embeddings[3].weight, ref_model.audio_embeddings[3].weight)

    def add_different(t):
        t["audio_lm_heads.2.weight"] = t["audio_embeddings.2.weight"] + 1

    shutil.rmtree(tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match=r"audio_lm_heads\.2\.weight' differs from 'audio_embeddings\.2\.weight"):
        MossTTSLocal.from_pretrained(copy_with(tmp_path, add_different))


def test_sharded_checkpoint_equals_single_file(tmp_path, ref_model):
    tensors = load_file(str(SRC / "model.safetensors"))
    keys = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
    weight_map = {}
    for name, ks in shards.items():
        save_file({k: tensors[k] for k in ks}, str(tmp_path / name))
        weight_map.update({k: name for k in ks})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    shutil.copy(SRC / "config.json", tmp_path / "config.json")
    model = MossTTSLocal.from_pretrained(tmp_path)
    for (n, a), (_, b) in zip(model.state_dict().items(), ref_model.state_dict().items()):
        assert torch.equal(a, b), n


def test_truncated_or_missing_files_are_clear_errors(tmp_path):
    ckpt = copy_with(tmp_path)
    data = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="model.safetensors"):
        MossTTSLocal.from_pretrained(ckpt)
    (ckpt / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        MossTTSLocal.from_pretrained(ckpt)
    with pytest.raises(CheckpointError, match="config.json is missing"):
        MossTTSLocal.from_pretrained(tmp_path / "nowhere")


def test_config_errors_name_the_field():
    config = json.loads((SRC / "config.json").read_text())
    del config["qwen3_config"]["hidden_size"]
    with pytest.raises(ConfigError, match=r"'qwen3_config\.hidden_size'"):
        MossTTSLocalConfig.from_dict(config)
    config = json.loads((SRC / "config.json").read_text())
    config["gpt2_config"]["n_embd"] = 32
    with pytest.raises(ConfigError, match=r"'gpt2_config\.n_embd'"):
        MossTTSLocalConfig.from_dict(config)
    config = json.loads((SRC / "config.json").read_text())
    config["audio_end_token_id"] = 10**7
    with pytest.raises(ConfigError, match="audio_end"):
        MossTTSLocalConfig.from_dict(config)


def test_rope_theta_is_read_from_either_place():
    config = json.loads((SRC / "config.json").read_text())
    assert MossTTSLocalConfig.from_dict(config).backbone.rope_theta == 1e6
    del config["qwen3_config"]["rope_parameters"]
    config["qwen3_config"]["rope_theta"] = 5e5
    assert MossTTSLocalConfig.from_dict(config).backbone.rope_theta == 5e5
    del config["qwen3_config"]["rope_theta"]
    with pytest.raises(ConfigError, match="rope_theta"):
        MossTTSLocalConfig.from_dict(config)
