"""Fixtures of the tiny CSM reference: the checkpoint, its arrays and conversations, the loaded model."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
import torch

from v2.models.csm.prompt import Turn

CSM_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "csm_tiny"
CHECKPOINT = CSM_DIR / "checkpoint"
KEYS = ("s0", "s1", "ctx")
TOL = dict(atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="session")
def cref() -> dict[str, np.ndarray]:
    with np.load(CSM_DIR / "reference.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="session")
def cmeta() -> dict:
    return json.loads((CSM_DIR / "meta.json").read_text())


@pytest.fixture(scope="session")
def cconfig() -> dict:
    return json.loads((CHECKPOINT / "config.json").read_text())


@pytest.fixture(scope="session")
def cmodel():
    from v2.models.csm.model import Csm

    return Csm.from_pretrained(CHECKPOINT)


@pytest.fixture(scope="session")
def other_config(cconfig) -> dict:
    """The fixture's config at other sizes: widths 40/24, 3 and 1 layers, 5/1 and 2/2 heads, head_dim 16/12,
    5 codebooks of 37 ids, text vocab 300 and its own special ids, other RoPE settings per stack."""
    d = copy.deepcopy(cconfig)
    d.pop("codec_config")
    d.update(hidden_size=40, num_hidden_layers=3, num_attention_heads=5, num_key_value_heads=1, head_dim=16,
             intermediate_size=72, num_codebooks=5, vocab_size=37, text_vocab_size=300, bos_token_id=290,
             eos_token_id=291, audio_token_id=292, audio_eos_token_id=293, pad_token_id=292,
             codebook_eos_token_id=0, codebook_pad_token_id=36, rms_norm_eps=1e-6,
             rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 2.0, "original_max_position_embeddings": 64})
    d["depth_decoder_config"].update(
        hidden_size=24, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2, head_dim=12,
        intermediate_size=40, backbone_hidden_size=40, num_codebooks=5, vocab_size=37,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    return d


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """Step-sized ops on a tiny model run several times faster on one intra-op thread on a shared CPU."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


def turns_of(meta: dict, ref: dict[str, np.ndarray], key: str) -> list[Turn]:
    """The fixture conversation `key` as turns: each turn's text ids are the stored ids between its
    `<|begin_of_text|>` and `<|end_of_text|>`; a turn with audio takes the stored context codes."""
    p = next(x for x in meta["prompts"] if x["key"] == key)
    bos, eos = meta["special_ids"]["bos <|begin_of_text|>"], meta["special_ids"]["eos <|end_of_text|>"]
    ids = ref[f"{key}_input_ids"].tolist()
    turns, pos = [], 0
    for turn in p["turns"]:
        assert ids[pos] == bos
        end = ids.index(eos, pos)
        audio = torch.from_numpy(ref[turn["audio"]["codes_array"]]) if "audio" in turn else None
        turns.append(Turn(turn["role"], text_ids=tuple(ids[pos + 1:end]), audio=audio))
        pos = end + 1 + (audio.shape[0] + 1 if audio is not None else 0)
    assert pos == len(ids)
    return turns


def np_close(actual: torch.Tensor, expected: np.ndarray) -> None:
    torch.testing.assert_close(actual.detach().float().cpu(), torch.from_numpy(expected), atol=TOL["atol"],
                               rtol=TOL["rtol"])
